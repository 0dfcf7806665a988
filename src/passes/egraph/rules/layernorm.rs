//! Stage 2: FusedLayerNorm from `(x − mean) · rsqrt(var + eps)` with the variance as
//! `E[(x−μ)²]` or `E[x²] − μ²`, the inverse square root as `rsqrt` or `1/sqrt` (or a division
//! by `sqrt`), applied before or after broadcasting back; then gamma and beta folded in.
//!
//! Means are the stage-1 `Mean{A}` idiom (sum × 1/n or sum ÷ n, n checked there), broadcasts
//! back the `Restore{A}` idiom. Every piece must use the same axes A.

use egg::Id;

use super::{
    Arg, Rule, binary, binary_comm, emit, emit_aux, internal1, means, ops, restores_along, same, same_shape,
    scalar_const, shape, shortest_f32, splat,
};
use crate::ir::dtype::DType;
use crate::ir::op::{BinaryOp, Op, UnaryOp};
use crate::passes::egraph::analysis::EG;
use crate::passes::egraph::lang::{Internal, TNode};

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![
        Rule { name: "layernorm-core", matcher: layernorm_core },
        Rule { name: "layernorm-half", matcher: layernorm_half },
        Rule { name: "layernorm-gamma", matcher: layernorm_gamma },
        Rule { name: "layernorm-beta", matcher: layernorm_beta },
    ]
}

/// `(x, μ, A)` where `d = x − Restore{A}(μ)` and `μ = Mean{A}(x)` (the same x).
fn centred(eg: &EG, d: Id) -> Vec<(Id, Id, Vec<usize>)> {
    let mut out = vec![];
    for (x, mr) in binary(eg, d, BinaryOp::Sub) {
        if !same_shape(eg, d, x) {
            continue;
        }
        for (mu, axes) in super::restores(eg, mr) {
            if means(eg, mu).iter().any(|(mx, ma)| *ma == axes && same(eg, *mx, x)) {
                out.push((x, mu, axes));
            }
        }
    }
    out
}

/// Whether `v` is the biased variance of x over `axes` with mean `mu`: `Mean{A}(Square(x −
/// Restore{A}(μ)))` or `Mean{A}(Square(x)) − Square(μ)`, optionally clamped as `Max(var, 0)`
/// (either order; flax guards E[x²]−μ² against rounding below zero — the fused op's variance is
/// never negative, so the clamp is the identity on it). Guard: the clamp bound is exactly +0.
fn is_variance(eg: &EG, v: Id, x: Id, mu: Id, axes: &[usize]) -> bool {
    is_variance_unclamped(eg, v, x, mu, axes)
        || binary_comm(eg, v, BinaryOp::Max).into_iter().any(|(w, z)| {
            splat(eg, z).is_some_and(|z| z == 0.0 && z.is_sign_positive())
                && same_shape(eg, v, w)
                && is_variance_unclamped(eg, w, x, mu, axes)
        })
}

fn is_variance_unclamped(eg: &EG, v: Id, x: Id, mu: Id, axes: &[usize]) -> bool {
    let two_pass = means(eg, v).into_iter().any(|(sq, a)| {
        a == axes
            && internal1(eg, sq, &Internal::Square).into_iter().any(|dd| {
                centred(eg, dd).iter().any(|(x2, mu2, a2)| same(eg, *x2, x) && same(eg, *mu2, mu) && a2 == axes)
            })
    });
    two_pass
        || binary(eg, v, BinaryOp::Sub).into_iter().any(|(m2, musq)| {
            let ex2 = means(eg, m2)
                .into_iter()
                .any(|(sq, a)| a == axes && internal1(eg, sq, &Internal::Square).into_iter().any(|xx| same(eg, xx, x)));
            ex2 && internal1(eg, musq, &Internal::Square).into_iter().any(|m| same(eg, m, mu))
        })
}

/// `(v, eps)` where `s = v + eps` (either order), eps a scalar constant (or a broadcast of
/// one), finite and ≥ 0, and the sum has v's shape.
fn plus_eps(eg: &EG, s: Id) -> Vec<(Id, f64)> {
    binary_comm(eg, s, BinaryOp::Add)
        .into_iter()
        .filter(|&(v, _)| same_shape(eg, s, v))
        .filter_map(|(v, e)| {
            let f32_dtype = shape(eg, v).is_some_and(|sh| sh.dtype == DType::Float32);
            scalar_const(eg, e)
                .filter(|e| e.is_finite() && *e >= 0.0)
                .map(|e| (v, if f32_dtype { shortest_f32(e) } else { e }))
        })
        .collect()
}

/// `(v, eps)` pairs such that class `r` is `f(v + eps)` broadcast back along `axes`, where
/// `inner(c)` lists the `s` of the class's `f(s)` nodes: either `Restore{A}(f(v + eps))` or
/// `f(Restore{A}(v) + eps)`.
fn restored_of_eps(eg: &EG, r: Id, axes: &[usize], inner: &dyn Fn(Id) -> Vec<Id>) -> Vec<(Id, f64)> {
    let mut out = vec![];
    for q in restores_along(eg, r, axes) {
        for s in inner(q) {
            out.extend(plus_eps(eg, s));
        }
    }
    for s in inner(r) {
        for (vr, e) in plus_eps(eg, s) {
            out.extend(restores_along(eg, vr, axes).into_iter().map(|v| (v, e)));
        }
    }
    out
}

/// `(x − μ) · InvSqrt(var + eps)` (either order, inverse square root before or after the
/// broadcast back) or `(x − μ) / Sqrt(var + eps)` `= FusedLayerNorm{A, eps}(x)`. Guards: μ is the
/// mean of the same x over A (n checked by the Mean idiom), var is the biased variance of that
/// x and μ over the same A (two-pass or E[x²]−μ²), every broadcast back restores exactly A, eps
/// a non-negative scalar constant, the result has x's shape, x float (F32, F64, BF16, F16).
fn layernorm_core(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    let mut forms: Vec<(Id, Id, bool)> =
        binary_comm(eg, id, BinaryOp::Mul).into_iter().map(|(d, r)| (d, r, true)).collect();
    forms.extend(binary(eg, id, BinaryOp::Div).into_iter().map(|(d, q)| (d, q, false)));
    for (d, r, is_mul) in forms {
        if !same_shape(eg, id, d) {
            continue;
        }
        for (x, mu, axes) in centred(eg, d) {
            let inner = |c: Id| -> Vec<Id> {
                if is_mul { internal1(eg, c, &Internal::InvSqrt) } else { super::unary(eg, c, UnaryOp::Sqrt) }
            };
            for (v, eps) in restored_of_eps(eg, r, &axes, &inner) {
                if is_variance(eg, v, x, mu, &axes) {
                    let op = Op::FusedLayerNorm { axes: axes.clone(), epsilon: eps, has_gamma: false, has_beta: false };
                    out.extend(emit(eg, id, op, &[x]));
                }
            }
        }
    }
    out
}

/// A FusedLayerNorm e-node's attributes and operands.
struct Norm {
    axes: Vec<usize>,
    eps: f64,
    has_gamma: bool,
    has_beta: bool,
    operands: Vec<Id>,
}

/// The fused layer norms in a class.
fn layer_norms(eg: &EG, id: Id) -> Vec<Norm> {
    ops(eg, id)
        .filter_map(|(op, c)| match op {
            Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } => Some(Norm {
                axes: axes.clone(),
                eps: *epsilon,
                has_gamma: *has_gamma,
                has_beta: *has_beta,
                operands: c.to_vec(),
            }),
            _ => None,
        })
        .collect()
}

/// `Convert{h}(FusedLayerNorm{A}(Convert{f32}(x)))` with `x` of the half type `h` (BF16 or
/// F16) `= FusedLayerNorm{A}(x)` in `h`, whose contract is exactly that (f32 compute, one
/// rounding; widening a half value to f32 is exact): the form of an ONNX `LayerNormalization` of
/// a half tensor with `stash_type` f32, which normalises in f32 and casts back before its scale
/// and bias. Those then fold in by the gamma and beta rules, in the half type (one rounding for
/// the fused op, as every fused op of a half chain: §9). Guards: the norm has neither gamma nor
/// beta; the outer conversion returns to `x`'s own dtype.
fn layernorm_half(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    let Some(h) = shape(eg, id).map(|s| s.dtype).filter(|d| d.is_half()) else { return out };
    for (op, c) in ops(eg, id) {
        if *op != (Op::ConvertDType { dtype: h }) {
            continue;
        }
        for ln in layer_norms(eg, c[0]) {
            let xs = ln.operands[0];
            if ln.has_gamma || ln.has_beta || shape(eg, xs).is_none_or(|s| s.dtype != DType::Float32) {
                continue;
            }
            for (op2, c2) in ops(eg, xs) {
                if *op2 == (Op::ConvertDType { dtype: DType::Float32 })
                    && shape(eg, c2[0]).is_some_and(|s| s.dtype == h)
                {
                    let op = Op::FusedLayerNorm {
                        axes: ln.axes.clone(),
                        epsilon: ln.eps,
                        has_gamma: false,
                        has_beta: false,
                    };
                    emit_aux(eg, id, op, &[Arg::Class(c2[0])], &mut out);
                }
            }
        }
    }
    out
}

/// `p` when class `g` is `p` broadcast over x's other axes: `BroadcastInDim(p, shape of x,
/// axes=A)` with p's dims equal to x's dims on A; `g` itself when A is every axis of x; or `g`
/// reshaped to x's dims on A when `g` has x's rank with size 1 off A (the implicit broadcasting
/// of binary ops, as ONNX exports write gamma and beta).
fn per_feature(eg: &EG, g: Id, x: Id, axes: &[usize]) -> Vec<Arg> {
    let (Some(xs), Some(gs)) = (shape(eg, x), shape(eg, g)) else { return vec![] };
    if gs.dtype != xs.dtype || gs.rank() != xs.rank() {
        return vec![];
    }
    let mut out = vec![];
    let feature: Vec<i64> = axes.iter().map(|&a| xs.dims[a]).collect();
    if gs == xs {
        for (op, c) in ops(eg, g) {
            if let Op::BroadcastInDim { axes: ba, .. } = op
                && ba == axes
                && shape(eg, c[0]).is_some_and(|p| p.dims == feature)
            {
                out.push(Arg::Class(c[0]));
            }
        }
    }
    out.extend(super::squeezed(eg, g, axes, &feature));
    out
}

/// `FusedLayerNorm{A}(x) · Bcast_A(gamma)` (either order) `= FusedLayerNorm{A, gamma}(x,
/// gamma)`. Guards: the norm has neither gamma nor beta yet; gamma's dims are exactly x's dims
/// on A and it is broadcast along A only; the product has x's shape.
fn layernorm_gamma(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (n, g) in binary_comm(eg, id, BinaryOp::Mul) {
        for ln in layer_norms(eg, n) {
            if ln.has_gamma || ln.has_beta {
                continue;
            }
            let x = ln.operands[0];
            for gamma in per_feature(eg, g, x, &ln.axes) {
                let op =
                    Op::FusedLayerNorm { axes: ln.axes.clone(), epsilon: ln.eps, has_gamma: true, has_beta: false };
                emit_aux(eg, id, op, &[Arg::Class(x), gamma], &mut out);
            }
        }
    }
    out
}

/// `FusedLayerNorm{A}(x[, gamma]) + Bcast_A(beta)` (either order) `= FusedLayerNorm{A, beta}`.
/// Guards: the norm has no beta yet; beta's dims are exactly x's dims on A, broadcast along A
/// only; the sum has x's shape.
fn layernorm_beta(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (n, b) in binary_comm(eg, id, BinaryOp::Add) {
        for ln in layer_norms(eg, n) {
            if ln.has_beta {
                continue;
            }
            for beta in per_feature(eg, b, ln.operands[0], &ln.axes) {
                let op = Op::FusedLayerNorm {
                    axes: ln.axes.clone(),
                    epsilon: ln.eps,
                    has_gamma: ln.has_gamma,
                    has_beta: true,
                };
                let mut operands: Vec<Arg> = ln.operands.iter().map(|&o| Arg::Class(o)).collect();
                operands.push(beta);
                emit_aux(eg, id, op, &operands, &mut out);
            }
        }
    }
    out
}
