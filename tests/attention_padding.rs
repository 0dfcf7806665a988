//! The flash attention kernel with the compact padding masks of exported transformers: a
//! `[B, 1, 1, Skv]` additive mask of 0 / f32::MIN (what `Where(attention_mask, 0, finfo.min)`
//! gives) and the same as a Bool mask, in both layouts, on every ISA path this machine runs and
//! multi-threaded, against the reference kernel (the project's oracle) and, for fully masked
//! rows, against the value the unfused graph gives (uniform weights: the mean of v).
//!
//! Run with `cargo test --release --test attention_padding`.

use tensorjit::Shape;
use tensorjit::ir::op::{AttentionLayout, Op};
use tensorjit::kernels::fused::attention::{AttentionMask, AttentionParams, broadcast_strides};
use tensorjit::kernels::fused::{FusedIsa, attention_f32};
use tensorjit::kernels::reference;

#[path = "common/fused.rs"]
mod common;
use common::{Rng, isas, tensor};

/// One case: shapes, layout and how the padding is laid out.
#[derive(Clone, Debug)]
struct Case {
    layout: AttentionLayout,
    b: usize,
    h: usize,
    s: usize,
    d: usize,
    /// The mask as Bool (else additive 0 / f32::MIN).
    boolean: bool,
}

impl Case {
    fn dims(&self) -> Vec<usize> {
        match self.layout {
            AttentionLayout::Bhsd => vec![self.b, self.h, self.s, self.d],
            AttentionLayout::Bshd => vec![self.b, self.s, self.h, self.d],
        }
    }

    /// Key j of batch b is attended: batch 0 everything, batch 1 nothing (a fully masked row
    /// for every query), the others trailing padding of varying length and one random hole.
    fn keep(&self, rng: &mut Rng) -> Vec<bool> {
        let mut keep = vec![true; self.b * self.s];
        for b in 1..self.b {
            let row = &mut keep[b * self.s..(b + 1) * self.s];
            if b == 1 {
                row.fill(false);
            } else {
                let len = 1 + rng.below(self.s);
                row[len..].fill(false);
                row[rng.below(len)] = false;
            }
        }
        keep
    }
}

/// Runs the kernel with `pool` and the reference kernel; returns (fused, reference, v, keep).
fn run(c: &Case, isa: FusedIsa, rng: &mut Rng, pool: Option<&rayon::ThreadPool>) -> [Vec<f32>; 3] {
    let dims = c.dims();
    let n: usize = dims.iter().product();
    let (q, k, v) = (rng.vec(n, -2.0, 2.0), rng.vec(n, -2.0, 2.0), rng.vec(n, -1.0, 1.0));
    let keep = c.keep(rng);
    let add: Vec<f32> = keep.iter().map(|&t| if t { 0.0 } else { f32::MIN }).collect();
    let mdims = [c.b, 1, 1, c.s];
    let full = [c.b, c.h, c.s, c.s];
    let strides = broadcast_strides(mdims, full).expect("mask strides");
    let mask = if c.boolean { AttentionMask::Bool(&keep, strides) } else { AttentionMask::Additive(&add, strides) };
    let p = AttentionParams {
        layout: c.layout,
        batch: c.b,
        heads: c.h,
        kv_heads: c.h,
        seq_q: c.s,
        seq_kv: c.s,
        head_dim: c.d,
        v_dim: c.d,
        scale: 1.0 / (c.d as f32).sqrt(),
        causal: false,
        mask,
        bias: None,
        seq_lens: None,
        qkv_row_strides: None,
    };
    let mut got = vec![f32::NAN; n];
    assert!(attention_f32(isa, &p, &q, &k, &v, &mut got, pool), "kernel rejected {c:?}");
    let op = Op::FusedScaledDotProductAttention {
        layout: c.layout,
        scale: 0.0,
        causal: false,
        has_mask: true,
        has_bias: false,
        has_seq_lens: false,
        quantized_matmuls: false,
    };
    let m = if c.boolean { tensor(&mdims, &keep) } else { tensor(&mdims, &add) };
    let inputs = [tensor(&dims, &q), tensor(&dims, &k), tensor(&dims, &v), m];
    let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
    let want = reference::eval(&op, &inputs, &[Shape::new(tensorjit::DType::Float32, &d)]).expect("reference")[0]
        .typed::<f32>()
        .to_vec();
    [got, want, v]
}

/// `|got − want| ≤ abs + rel·|want|` element-wise.
#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32, abs: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= abs + rel * w.abs(), "{what}: element {i}: got {g:e}, want {w:e}");
    }
}

fn cases() -> Vec<Case> {
    let mut out = vec![];
    for layout in [AttentionLayout::Bshd, AttentionLayout::Bhsd] {
        for (b, h, s, d) in
            [(3, 2, 1, 32), (3, 3, 33, 32), (4, 2, 128, 64), (3, 2, 37, 7), (3, 1, 200, 33), (3, 2, 70, 17)]
        {
            for boolean in [false, true] {
                out.push(Case { layout, b, h, s, d, boolean });
            }
        }
    }
    out
}

/// Every case on every ISA, single- and multi-threaded, against the reference kernel.
#[test]
fn padding_masks_vs_reference() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("pool");
    let mut rng = Rng(11);
    for c in cases() {
        for isa in isas() {
            for pl in [None, Some(&pool)] {
                let [got, want, _] = run(&c, isa, &mut rng, pl);
                let what = format!("{c:?} {} threads {}", isa.name(), pl.map_or(1, |p| p.current_num_threads()));
                assert_close(&what, &got, &want, 2e-5, 2e-6 + 2e-7 * c.d as f32);
            }
        }
    }
}

/// Batch 1 masks every key: with the additive f32::MIN mask every score of a row is the same
/// f32::MIN (the scores are far below its ulp), so the softmax is uniform and each output row is
/// the mean of that head's value rows — what `softmax(s + where(m, 0, finfo.min))·v` gives
/// unfused. With the Bool mask the row is 0 (the op's convention for excluded keys).
#[test]
fn fully_masked_rows_match_the_unfused_graph() {
    let mut rng = Rng(12);
    for c in cases() {
        for isa in isas() {
            let [got, _, v] = run(&c, isa, &mut rng, None);
            let dims = c.dims();
            let at = |x: &[f32], s: usize, h: usize, e: usize| match c.layout {
                AttentionLayout::Bshd => x[((c.s + s) * c.h + h) * c.d + e],
                AttentionLayout::Bhsd => x[((c.h + h) * c.s + s) * c.d + e],
            };
            assert_eq!(dims[0], c.b);
            for h in 0..c.h {
                for e in 0..c.d {
                    let mean = (0..c.s).map(|j| f64::from(at(&v, j, h, e))).sum::<f64>() / c.s as f64;
                    let want = if c.boolean { 0.0 } else { mean as f32 };
                    for i in 0..c.s {
                        let g = at(&got, i, h, e);
                        assert!(
                            (g - want).abs() <= 1e-5,
                            "{c:?} {}: row {i} head {h} col {e}: {g} vs {want}",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
}
