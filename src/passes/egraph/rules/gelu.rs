//! Stage 2: FusedGelu from its erf form `x·½·(1+erf(x/√2))` and its tanh form
//! `x·½·(1+tanh(√(2/π)·(x+0.044715·x³)))`, in the bracketings and operand orders exporters use.
//!
//! Every constant is compared to its exact value within relative 1e-6 (f32 rounding passes, a
//! constant off by 1e-3 does not; a bf16/f16 constant within one unit in the last place of its
//! type, `approx_in`) and must be a splat constant that does not widen x.

use egg::Id;

use super::{Rule, binary, binary_comm, emit, perms3, product3, same, same_shape, splat, splat_is, unary};
use crate::ir::op::{BinaryOp, Op, UnaryOp};
use crate::passes::egraph::analysis::EG;
use crate::passes::egraph::lang::TNode;

/// The rules of this family.
pub fn rules() -> Vec<Rule> {
    vec![Rule { name: "gelu-erf", matcher: gelu_erf }, Rule { name: "gelu-tanh", matcher: gelu_tanh }]
}

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// √(2/π).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044715;

/// `(x, t)` pairs where the class is `x·½·t` in any bracketing and order (`(x·½)·t`,
/// `x·(½·t)`, `(x·t)·½`, …) or `(x·t)/2`.
fn half_products(eg: &EG, id: Id) -> Vec<(Id, Id)> {
    let mut out = vec![];
    for f in product3(eg, id) {
        for [x, h, t] in perms3(f) {
            if splat_is(eg, h, 0.5) {
                out.push((x, t));
            }
        }
    }
    for (p, two) in binary(eg, id, BinaryOp::Div) {
        if splat_is(eg, two, 2.0) {
            out.extend(binary_comm(eg, p, BinaryOp::Mul));
        }
    }
    out
}

/// `u` where `t = 1 + f(u)` (either order) for the unary `f`.
fn one_plus(eg: &EG, t: Id, f: UnaryOp) -> Vec<Id> {
    binary_comm(eg, t, BinaryOp::Add)
        .into_iter()
        .filter(|&(one, _)| splat_is(eg, one, 1.0))
        .flat_map(|(_, g)| unary(eg, g, f))
        .collect()
}

/// Whether `u` is `x·c` (either order) with `c ≈ k`, or `x / d` with `d ≈ 1/k`.
fn scaled(eg: &EG, u: Id, x: Id, k: f64) -> bool {
    binary_comm(eg, u, BinaryOp::Mul).into_iter().any(|(a, c)| same(eg, a, x) && splat_is(eg, c, k))
        || binary(eg, u, BinaryOp::Div).into_iter().any(|(a, d)| same(eg, a, x) && splat_is(eg, d, 1.0 / k))
}

/// `x·½·(1 + erf(x·(1/√2)))` (also `erf(x/√2)`, `½·x·(…)`, `(x·(…))/2`, `1+erf` in either
/// order) `= FusedGelu{exact}(x)`. Guards: ½, 1, 1/√2 (or √2, or 2) are splat constants within
/// relative 1e-6; the erf argument scales the same x that multiplies; the result has x's shape;
/// x is a float.
fn gelu_erf(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (x, t) in half_products(eg, id) {
        if !same_shape(eg, id, x) {
            continue;
        }
        if one_plus(eg, t, UnaryOp::Erf).into_iter().any(|u| scaled(eg, u, x, FRAC_1_SQRT_2)) {
            out.extend(emit(eg, id, Op::FusedGelu { exact: true }, &[x]));
        }
    }
    out
}

/// Whether `c` is `x³`: `x·x·x` in any bracketing, or `Pow(x, 3)`.
fn cube(eg: &EG, c: Id, x: Id) -> bool {
    product3(eg, c).iter().any(|f| f.iter().all(|&a| same(eg, a, x)))
        || binary(eg, c, BinaryOp::Pow).into_iter().any(|(b, e)| same(eg, b, x) && splat(eg, e) == Some(3.0))
}

/// Whether `v` is `√(2/π)·(x + 0.044715·x³)` (every product and sum in either order).
fn tanh_argument(eg: &EG, v: Id, x: Id) -> bool {
    binary_comm(eg, v, BinaryOp::Mul).into_iter().any(|(k, w)| {
        splat_is(eg, k, SQRT_2_OVER_PI)
            && binary_comm(eg, w, BinaryOp::Add).into_iter().any(|(a, z)| {
                same(eg, a, x)
                    && binary_comm(eg, z, BinaryOp::Mul)
                        .into_iter()
                        .any(|(c, x3)| splat_is(eg, c, GELU_CUBIC) && cube(eg, x3, x))
            })
    })
}

/// `x·½·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` with x³ as `x·x·x` or `Pow(x, 3)`
/// `= FusedGelu{approximate}(x)`. Guards: ½, 1, √(2/π), 0.044715 splat constants within
/// relative 1e-6, exponent exactly 3; every x is the same class; result of x's shape; x float.
fn gelu_tanh(eg: &EG, id: Id) -> Vec<TNode> {
    let mut out = vec![];
    for (x, t) in half_products(eg, id) {
        if !same_shape(eg, id, x) {
            continue;
        }
        if one_plus(eg, t, UnaryOp::Tanh).into_iter().any(|v| tanh_argument(eg, v, x)) {
            out.extend(emit(eg, id, Op::FusedGelu { exact: false }, &[x]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::egraph::rules::approx;

    #[test]
    fn constants() {
        assert!(approx(SQRT_2_OVER_PI, (2.0 / std::f64::consts::PI).sqrt()));
        assert!(approx(f64::from(FRAC_1_SQRT_2 as f32), FRAC_1_SQRT_2));
        assert!(!approx(FRAC_1_SQRT_2 + 1e-3, FRAC_1_SQRT_2));
        assert!(approx(f64::from(0.044715f32), GELU_CUBIC));
    }
}
