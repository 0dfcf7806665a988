//! The flash attention kernel with key-only masks (`[B, 1, 1, Skv]` and `[B, H, 1, Skv]`): Bool
//! ones, which it applies by walking the runs of kept keys when there are few of them and per
//! score otherwise, and additive ones (values and −∞), which its AVX2 `Q·Kᵀ` micro-kernel adds: few and many runs, runs across key tiles, a batch with no kept key, with causal
//! attention, sequence lengths and grouped kv heads, in both layouts, on every ISA path this
//! machine runs, against the reference kernel (the project's oracle). Also BSHD q, k and v as
//! column blocks of one wider projection (`qkv_row_strides`, whose rows the kernel copies).

use tensorjit::Shape;
use tensorjit::ir::op::{AttentionLayout, Op};
use tensorjit::kernels::fused::attention::{AttentionMask, AttentionParams, broadcast_strides};
use tensorjit::kernels::fused::attention_f32;
use tensorjit::kernels::reference;

#[path = "common/fused.rs"]
mod common;
use common::{Rng, isas, tensor};

/// How the kept keys of one (batch, head) are laid out.
#[derive(Clone, Copy, Debug)]
enum Keys {
    /// A few runs: holes at fixed places (some across the 128-key tile boundary).
    FewRuns,
    /// Every third key dropped (more runs than the kernel walks one by one).
    Fragmented,
}

#[derive(Clone, Debug)]
struct Case {
    layout: AttentionLayout,
    b: usize,
    h: usize,
    hkv: usize,
    s: usize,
    d: usize,
    keys: Keys,
    /// The mask varies per head (`[B, H, 1, Skv]`), else `[B, 1, 1, Skv]`.
    per_head: bool,
    causal: bool,
    lens: Option<Vec<(usize, usize)>>,
    /// The mask as additive values (kept keys uniform in [−3, 3], the others −∞), else Bool.
    additive: bool,
}

impl Case {
    fn dims(&self, heads: usize) -> Vec<usize> {
        match self.layout {
            AttentionLayout::Bhsd => vec![self.b, heads, self.s, self.d],
            AttentionLayout::Bshd => vec![self.b, self.s, heads, self.d],
        }
    }

    /// Keep flags of the mask rows (batch-major, then head when per head): row 1 keeps nothing.
    fn keep(&self) -> Vec<bool> {
        let rows = if self.per_head { self.b * self.h } else { self.b };
        let mut keep = Vec::with_capacity(rows * self.s);
        for r in 0..rows {
            for j in 0..self.s {
                keep.push(match (r, self.keys) {
                    (1, _) => false,
                    (_, Keys::FewRuns) => !(j % 97 == 5 + r || (120 + r..140 + r).contains(&j) || j + 3 + r == self.s),
                    (_, Keys::Fragmented) => (j + r) % 3 != 0,
                });
            }
        }
        keep
    }
}

/// The attention op with a mask and the default scale.
fn op(layout: AttentionLayout, causal: bool, lens: bool) -> Op {
    Op::FusedScaledDotProductAttention {
        layout,
        scale: 0.0,
        causal,
        has_mask: true,
        has_bias: false,
        has_seq_lens: lens,
        quantized_matmuls: false,
    }
}

/// `|got − want| ≤ abs + rel·|want|` element-wise.
#[track_caller]
fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32, abs: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= abs + rel * w.abs(), "{what}: element {i}: got {g:e}, want {w:e}");
    }
}

/// Every case on every ISA against the reference kernel.
#[test]
fn key_only_masks_vs_reference() {
    let mut rng = Rng(11);
    let mut cases = Vec::new();
    for layout in [AttentionLayout::Bshd, AttentionLayout::Bhsd] {
        let c = |s, d, keys| Case {
            layout,
            b: 3,
            h: 4,
            hkv: 2,
            s,
            d,
            keys,
            per_head: false,
            causal: false,
            lens: None,
            additive: false,
        };
        cases.extend([
            c(128, 32, Keys::FewRuns),
            c(300, 64, Keys::FewRuns),
            c(50, 32, Keys::Fragmented),
            Case { per_head: true, ..c(200, 32, Keys::FewRuns) },
            Case { causal: true, ..c(260, 16, Keys::FewRuns) },
            Case { causal: true, per_head: true, ..c(40, 64, Keys::Fragmented) },
            Case { lens: Some(vec![(128, 100), (7, 128), (60, 3)]), ..c(128, 32, Keys::FewRuns) },
            Case { additive: true, ..c(128, 32, Keys::FewRuns) },
            Case { additive: true, per_head: true, ..c(300, 64, Keys::Fragmented) },
            Case { additive: true, causal: true, ..c(70, 32, Keys::FewRuns) },
        ]);
    }
    for c in &cases {
        // Query heads are laid out BHSD for the reference; the kernel gets the case's layout.
        let (qd, kd) = (c.dims(c.h), c.dims(c.hkv));
        let (nq, nk): (usize, usize) = (qd.iter().product(), kd.iter().product());
        let (q, k, v) = (rng.vec(nq, -2.0, 2.0), rng.vec(nk, -2.0, 2.0), rng.vec(nk, -1.0, 1.0));
        let keep = c.keep();
        let add: Vec<f32> = keep.iter().map(|&t| if t { rng.uniform(-3.0, 3.0) } else { f32::NEG_INFINITY }).collect();
        let mdims = if c.per_head { [c.b, c.h, 1, c.s] } else { [c.b, 1, 1, c.s] };
        let full = [c.b, c.h, c.s, c.s];
        let strides = broadcast_strides(mdims, full).expect("mask strides");
        // The reference takes BHSD: transpose BSHD operands.
        let to_bhsd = |x: &[f32], heads: usize| -> Vec<f32> {
            match c.layout {
                AttentionLayout::Bhsd => x.to_vec(),
                AttentionLayout::Bshd => (0..x.len())
                    .map(|e| {
                        let (bh, sd) = (e / (c.s * c.d), e % (c.s * c.d));
                        let (b, h, s, dd) = (bh / heads, bh % heads, sd / c.d, sd % c.d);
                        x[((b * c.s + s) * heads + h) * c.d + dd]
                    })
                    .collect(),
            }
        };
        let bh = |heads: usize| [c.b, heads, c.s, c.d];
        let mut inputs = vec![
            tensor(&bh(c.h), &to_bhsd(&q, c.h)),
            tensor(&bh(c.hkv), &to_bhsd(&k, c.hkv)),
            tensor(&bh(c.hkv), &to_bhsd(&v, c.hkv)),
            if c.additive { tensor(&mdims, &add) } else { tensor(&mdims, &keep) },
        ];
        if let Some(l) = &c.lens {
            let ql: Vec<i32> = l.iter().map(|p| p.0 as i32).collect();
            let kl: Vec<i32> = l.iter().map(|p| p.1 as i32).collect();
            inputs.push(tensor(&[c.b], &ql));
            inputs.push(tensor(&[c.b], &kl));
        }
        let od: Vec<i64> = bh(c.h).iter().map(|&x| x as i64).collect();
        let want = reference::eval(
            &op(AttentionLayout::Bhsd, c.causal, c.lens.is_some()),
            &inputs,
            &[Shape::new(tensorjit::DType::Float32, &od)],
        )
        .expect("reference")[0]
            .typed::<f32>()
            .to_vec();
        let p = AttentionParams {
            layout: c.layout,
            batch: c.b,
            heads: c.h,
            kv_heads: c.hkv,
            seq_q: c.s,
            seq_kv: c.s,
            head_dim: c.d,
            v_dim: c.d,
            scale: 1.0 / (c.d as f32).sqrt(),
            causal: c.causal,
            mask: if c.additive { AttentionMask::Additive(&add, strides) } else { AttentionMask::Bool(&keep, strides) },
            bias: None,
            seq_lens: c.lens.as_deref(),
            qkv_row_strides: None,
        };
        for isa in isas() {
            let mut got = vec![f32::NAN; nq];
            assert!(attention_f32(isa, &p, &q, &k, &v, &mut got, None), "kernel rejected {c:?}");
            assert_close(&format!("{c:?} {}", isa.name()), &to_bhsd(&got, c.h), &want, 2e-5, 5e-6);
        }
    }
}

/// BSHD q, k and v as column blocks of one `[B·S, 3·H·D]` projection (row strides 3·H·D) give
/// the values of the same q, k and v stored contiguously, which the reference kernel checks.
#[test]
fn strided_projection_columns_vs_reference() {
    let mut rng = Rng(12);
    for (b, h, s, d) in [(2, 3, 128, 32), (2, 2, 150, 64), (1, 4, 33, 16)] {
        let w = h * d;
        let wide = rng.vec(b * s * 3 * w, -2.0, 2.0);
        let part = |t: usize| -> Vec<f32> {
            (0..b * s).flat_map(|r| wide[r * 3 * w + t * w..r * 3 * w + (t + 1) * w].to_vec()).collect()
        };
        let (q, k, v) = (part(0), part(1), part(2));
        // Trailing padding of 5 keys in batch 0, none in the others.
        let keep: Vec<bool> = (0..b * s).map(|e| e >= s || e % s < s - 5).collect();
        let mdims = [b, 1, 1, s];
        let strides = broadcast_strides(mdims, [b, h, s, s]).expect("mask strides");
        let mk = |strided: bool| AttentionParams {
            layout: AttentionLayout::Bshd,
            batch: b,
            heads: h,
            kv_heads: h,
            seq_q: s,
            seq_kv: s,
            head_dim: d,
            v_dim: d,
            scale: 1.0 / (d as f32).sqrt(),
            causal: false,
            mask: AttentionMask::Bool(&keep, strides),
            bias: None,
            seq_lens: None,
            qkv_row_strides: strided.then_some([3 * w, 3 * w, 3 * w]),
        };
        let dims = [b, s, h, d];
        let inputs = [tensor(&dims, &q), tensor(&dims, &k), tensor(&dims, &v), tensor(&mdims, &keep)];
        let od: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
        let want = reference::eval(
            &op(AttentionLayout::Bshd, false, false),
            &inputs,
            &[Shape::new(tensorjit::DType::Float32, &od)],
        )
        .expect("reference")[0]
            .typed::<f32>()
            .to_vec();
        for isa in isas() {
            let mut got = vec![f32::NAN; b * s * w];
            assert!(attention_f32(isa, &mk(true), &wide, &wide[w..], &wide[2 * w..], &mut got, None));
            assert_close(&format!("strided {b}x{h}x{s}x{d} {}", isa.name()), &got, &want, 2e-5, 5e-6);
            let mut flat = vec![f32::NAN; b * s * w];
            assert!(attention_f32(isa, &mk(false), &q, &k, &v, &mut flat, None));
            assert_close(&format!("contiguous {b}x{h}x{s}x{d} {}", isa.name()), &flat, &want, 2e-5, 5e-6);
        }
    }
}
