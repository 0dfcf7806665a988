//! Tiled (flash-attention style) scaled dot-product attention in f32.
//!
//! Work is split into (batch, head, block of [`Q_BLOCK`] queries) items. Each item walks the keys
//! in blocks of [`K_BLOCK`]: for every query row of the block it computes the row's scores
//! against the key block (`scale·q·k + bias + additive mask`, excluded keys = −∞), then updates
//! the row's online-softmax state (running max `m`, running sum `l`, unnormalised output `acc`):
//! `m' = max(m, max_j s_j)`, `α = e^(m − m')`, `l' = α·l + Σ e^(s_j − m')`,
//! `acc' = α·acc + Σ e^(s_j − m')·v_j`. The output row is `acc/l`, or 0 when every key was
//! excluded or scored −∞ (fully masked rows), and padded query rows (≥ query_seq_len) stay 0.
//! Extra memory per thread: `Q_BLOCK·(v_dim + 2) + K_BLOCK` floats; the `[S, S]` score matrix is
//! never built. Causal attention stops each query block at its last visible key.
//!
//! Conventions follow the reference kernel (`kernels/reference/fused_attention.rs`): causal is
//! top-left aligned (query i sees keys j ≤ i, also when the lengths differ), a Bool mask excludes
//! `false` keys, a NaN score makes the row NaN. One difference: keys whose weight underflows to 0
//! are skipped in `P·V` (so an infinite `v` on such a key does not make the row NaN).

use rayon::prelude::*;

pub use crate::ir::op::AttentionLayout;

use super::FusedIsa;
use super::vmath::exp_scalar;

/// Query rows per work item.
pub const Q_BLOCK: usize = 32;
/// Keys per tile.
pub const K_BLOCK: usize = 64;

/// A mask broadcast to `[B, H, Sq, Skv]` by per-axis element strides (0 on broadcast axes).
#[derive(Clone, Copy, Debug)]
pub enum AttentionMask<'a> {
    /// No mask.
    None,
    /// Bool mask: `true` = attend.
    Bool(&'a [bool], [usize; 4]),
    /// Additive float mask.
    Additive(&'a [f32], [usize; 4]),
}

/// Shapes and options of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionParams<'a> {
    /// Axis order of q, k, v and the output.
    pub layout: AttentionLayout,
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`; query head h uses kv head `h / (heads / kv_heads)`).
    pub kv_heads: usize,
    /// Query sequence length.
    pub seq_q: usize,
    /// Key/value sequence length.
    pub seq_kv: usize,
    /// Head dim of q and k.
    pub head_dim: usize,
    /// Head dim of v (and of the output).
    pub v_dim: usize,
    /// Score scale (already resolved: not 0 ⇒ 1/√d here).
    pub scale: f32,
    /// Query i sees keys j ≤ i.
    pub causal: bool,
    /// Mask.
    pub mask: AttentionMask<'a>,
    /// Additive bias broadcast like the mask.
    pub bias: Option<(&'a [f32], [usize; 4])>,
    /// Per-batch `(query_len, kv_len)`.
    pub seq_lens: Option<&'a [(usize, usize)]>,
}

/// Element strides broadcasting an operand of dims `dims4` (placed on `[B, H, Sq, Skv]`) to
/// `full`, or `None` if some axis is neither 1 nor the full size.
pub fn broadcast_strides(dims4: [usize; 4], full: [usize; 4]) -> Option<[usize; 4]> {
    let mut strides = [0usize; 4];
    let mut s = 1;
    for a in (0..4).rev() {
        if dims4[a] != 1 && dims4[a] != full[a] {
            return None;
        }
        strides[a] = if dims4[a] == 1 { 0 } else { s };
        s *= dims4[a];
    }
    Some(strides)
}

impl AttentionParams<'_> {
    /// Offset of row (b, h, s) of a tensor with `nh` heads, `ns` positions and row width `w`.
    #[inline]
    fn off(&self, nh: usize, ns: usize, w: usize, b: usize, h: usize, s: usize) -> usize {
        match self.layout {
            AttentionLayout::Bhsd => ((b * nh + h) * ns + s) * w,
            AttentionLayout::Bshd => ((b * ns + s) * nh + h) * w,
        }
    }
}

/// Raw output pointer shared by the work items, which write disjoint rows.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the pointer is only used to write rows owned by exactly one work item.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Per-thread scratch.
struct Scratch {
    m: Vec<f32>,
    l: Vec<f32>,
    acc: Vec<f32>,
    sc: Vec<f32>,
}

/// Computes attention into `out` (the query's layout with head dim `v_dim`, `B·H·Sq·v_dim`
/// values, which must be zero-filled: padded query rows are left untouched). Returns false
/// (computing nothing) if a slice is shorter than the shapes require.
pub fn attention_f32(
    isa: FusedIsa,
    p: &AttentionParams<'_>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> bool {
    let (nb, nh, nkv, sq, skv, d, vd) = (p.batch, p.heads, p.kv_heads, p.seq_q, p.seq_kv, p.head_dim, p.v_dim);
    if nkv == 0 || nh % nkv != 0 {
        return false;
    }
    if q.len() < nb * nh * sq * d || k.len() < nb * nkv * skv * d || v.len() < nb * nkv * skv * vd {
        return false;
    }
    if out.len() < nb * nh * sq * vd || p.seq_lens.is_some_and(|l| l.len() < nb) {
        return false;
    }
    let full = nb * nh * sq * skv;
    let mask_ok = match p.mask {
        AttentionMask::None => true,
        AttentionMask::Bool(m, s) => max_index(s, [nb, nh, sq, skv]) < m.len() || full == 0,
        AttentionMask::Additive(m, s) => max_index(s, [nb, nh, sq, skv]) < m.len() || full == 0,
    };
    if !mask_ok || p.bias.is_some_and(|(b, s)| full != 0 && max_index(s, [nb, nh, sq, skv]) >= b.len()) {
        return false;
    }
    if full == 0 || d == 0 && vd == 0 {
        return true;
    }
    let isa = isa.checked();
    let qblocks = sq.div_ceil(Q_BLOCK);
    let items = nb * nh * qblocks;
    let outp = OutPtr(out.as_mut_ptr());
    let new_scratch = || Scratch {
        m: vec![0.0; Q_BLOCK],
        l: vec![0.0; Q_BLOCK],
        acc: vec![0.0; Q_BLOCK * vd],
        sc: vec![0.0; K_BLOCK],
    };
    let run = |s: &mut Scratch, it: usize| {
        let (bh, qb) = (it / qblocks, it % qblocks);
        let (b, h) = (bh / nh, bh % nh);
        item(isa, p, q, k, v, outp, s, b, h, qb);
    };
    let work = full.saturating_mul(d + vd);
    match pool {
        Some(pl) if pl.current_num_threads() > 1 && items > 1 && work >= 1 << 16 => {
            pl.install(|| (0..items).into_par_iter().for_each_init(new_scratch, run));
        }
        _ => {
            let mut s = new_scratch();
            (0..items).for_each(|it| run(&mut s, it));
        }
    }
    true
}

fn max_index(s: [usize; 4], full: [usize; 4]) -> usize {
    (0..4).map(|a| s[a] * full[a].saturating_sub(1)).sum()
}

#[inline]
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// One (batch, head, query block) item.
#[allow(clippy::too_many_arguments)]
fn item(
    isa: FusedIsa,
    p: &AttentionParams<'_>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: OutPtr,
    s: &mut Scratch,
    b: usize,
    h: usize,
    qb: usize,
) {
    let (nh, nkv, sq, skv, d, vd) = (p.heads, p.kv_heads, p.seq_q, p.seq_kv, p.head_dim, p.v_dim);
    let hk = h / (nh / nkv);
    let (q_len, kv_len) = p.seq_lens.map_or((sq, skv), |l| (l[b].0.min(sq), l[b].1.min(skv)));
    let i0 = qb * Q_BLOCK;
    let i1 = (i0 + Q_BLOCK).min(q_len);
    if i0 >= i1 {
        return;
    }
    let rows = i1 - i0;
    let kend = if p.causal { kv_len.min(i1) } else { kv_len };
    s.m[..rows].fill(f32::NEG_INFINITY);
    s.l[..rows].fill(0.0);
    s.acc[..rows * vd].fill(0.0);
    let kstride = match p.layout {
        AttentionLayout::Bhsd => d,
        AttentionLayout::Bshd => nkv * d,
    };
    let vstride = match p.layout {
        AttentionLayout::Bhsd => vd,
        AttentionLayout::Bshd => nkv * vd,
    };
    let kbase = p.off(nkv, skv, d, b, hk, 0);
    let vbase = p.off(nkv, skv, vd, b, hk, 0);
    let mut j0 = 0;
    while j0 < kend {
        let j1 = (j0 + K_BLOCK).min(kend);
        let nk = j1 - j0;
        for r in 0..rows {
            let i = i0 + r;
            let jv = if p.causal { j1.min(i + 1) } else { j1 };
            if jv <= j0 {
                continue;
            }
            let qo = p.off(nh, sq, d, b, h, i);
            let qr = &q[qo..qo + d];
            let sc = &mut s.sc[..nk];
            scores(isa, qr, &k[kbase + j0 * kstride..], kstride, d, &mut sc[..jv - j0], p.scale);
            sc[jv - j0..].fill(f32::NEG_INFINITY);
            apply_mask(p, b, h, i, j0, sc);
            let bmax = sc.iter().fold(f32::NEG_INFINITY, |m, &x| nan_max(m, x));
            let m_new = nan_max(s.m[r], bmax);
            if m_new == f32::NEG_INFINITY {
                continue;
            }
            let alpha = exp_scalar(s.m[r] - m_new);
            let sum = exp_shift_sum(isa, sc, m_new);
            s.l[r] = s.l[r] * alpha + sum;
            s.m[r] = m_new;
            let acc = &mut s.acc[r * vd..(r + 1) * vd];
            if alpha != 1.0 {
                acc.iter_mut().for_each(|a| *a *= alpha);
            }
            accumulate(isa, sc, &v[vbase + j0 * vstride..], vstride, vd, acc);
        }
        j0 = j1;
    }
    for r in 0..rows {
        let oo = p.off(nh, sq, vd, b, h, i0 + r);
        if s.m[r] == f32::NEG_INFINITY {
            continue; // fully masked: the zero-filled output stays 0
        }
        let inv = 1.0 / s.l[r];
        let acc = &s.acc[r * vd..(r + 1) * vd];
        for (c, &a) in acc.iter().enumerate() {
            // SAFETY: oo + c < B·H·Sq·vd ≤ out.len() (checked by the caller); row (b, h, i0 + r)
            // belongs to this item only.
            unsafe { *out.0.add(oo + c) = a * inv };
        }
    }
}

/// Excludes (−∞) keys masked by the Bool mask or kv length, adds bias and additive mask.
fn apply_mask(p: &AttentionParams<'_>, b: usize, h: usize, i: usize, j0: usize, sc: &mut [f32]) {
    match p.mask {
        AttentionMask::None => {}
        AttentionMask::Bool(m, st) => {
            let base = b * st[0] + h * st[1] + i * st[2] + j0 * st[3];
            for (j, x) in sc.iter_mut().enumerate() {
                if !m[base + j * st[3]] {
                    *x = f32::NEG_INFINITY;
                }
            }
        }
        AttentionMask::Additive(m, st) => {
            let base = b * st[0] + h * st[1] + i * st[2] + j0 * st[3];
            for (j, x) in sc.iter_mut().enumerate() {
                if *x != f32::NEG_INFINITY {
                    *x += m[base + j * st[3]];
                }
            }
        }
    }
    if let Some((bias, st)) = p.bias {
        let base = b * st[0] + h * st[1] + i * st[2] + j0 * st[3];
        for (j, x) in sc.iter_mut().enumerate() {
            if *x != f32::NEG_INFINITY {
                *x += bias[base + j * st[3]];
            }
        }
    }
}

/// `x = exp(x − m)` in place; the sum of the results.
fn exp_shift_sum(isa: FusedIsa, x: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: FusedIsa::Avx2 is only used after `checked()` confirmed AVX2 and FMA.
        return unsafe { super::vmath::avx2::exp_shift_sum(x, m) };
    }
    let _ = isa;
    let mut s = 0.0;
    for v in x.iter_mut() {
        *v = exp_scalar(*v - m);
        s += *v;
    }
    s
}

/// `sc[j] = scale · q·k_j` for the `sc.len()` keys starting at `k` (rows `ks` apart).
fn scores(isa: FusedIsa, q: &[f32], k: &[f32], ks: usize, d: usize, sc: &mut [f32], scale: f32) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: FusedIsa::Avx2 is only used after `checked()` confirmed AVX2 and FMA.
        unsafe { avx2::scores(q, k, ks, d, sc, scale) };
        return;
    }
    let _ = isa;
    for (j, o) in sc.iter_mut().enumerate() {
        let kr = &k[j * ks..j * ks + d];
        *o = scale * q.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>();
    }
}

/// `acc += Σ_j p[j]·v_j` over the keys with a non-zero weight.
fn accumulate(isa: FusedIsa, p: &[f32], v: &[f32], vs: usize, vd: usize, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: as in `scores`.
        unsafe { avx2::accumulate(p, v, vs, vd, acc) };
        return;
    }
    let _ = isa;
    for (j, &w) in p.iter().enumerate() {
        if w != 0.0 {
            for (a, &x) in acc.iter_mut().zip(&v[j * vs..j * vs + vd]) {
                *a += w * x;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Dot products of `q` with 4 key rows at `k`, `k + ks`, … (d values each), times `scale`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn dot4(q: &[f32], k: &[f32], ks: usize, d: usize, scale: f32) -> [f32; 4] {
        let (qp, kp) = (q.as_ptr(), k.as_ptr());
        let mut a = [_mm256_setzero_ps(); 4];
        let mut c = 0;
        // SAFETY: the caller guarantees q.len() ≥ d and k.len() ≥ 3·ks + d; c + 8 ≤ d.
        unsafe {
            while c + 8 <= d {
                let qv = _mm256_loadu_ps(qp.add(c));
                for (r, acc) in a.iter_mut().enumerate() {
                    *acc = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add(r * ks + c)), *acc);
                }
                c += 8;
            }
        }
        let t0 = _mm256_hadd_ps(a[0], a[1]);
        let t1 = _mm256_hadd_ps(a[2], a[3]);
        let t2 = _mm256_hadd_ps(t0, t1);
        let r = _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps::<1>(t2));
        let mut out = [0f32; 4];
        // SAFETY: `out` holds 4 floats.
        unsafe { _mm_storeu_ps(out.as_mut_ptr(), r) };
        for (r, o) in out.iter_mut().enumerate() {
            for cc in c..d {
                *o += q[cc] * k[r * ks + cc];
            }
            *o *= scale;
        }
        out
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn scores(q: &[f32], k: &[f32], ks: usize, d: usize, sc: &mut [f32], scale: f32) {
        let n = sc.len();
        let mut j = 0;
        while j + 4 <= n {
            let r = dot4(q, &k[j * ks..j * ks + 3 * ks + d], ks, d, scale);
            sc[j..j + 4].copy_from_slice(&r);
            j += 4;
        }
        while j < n {
            let kr = &k[j * ks..j * ks + d];
            let mut acc = _mm256_setzero_ps();
            let mut c = 0;
            while c + 8 <= d {
                // SAFETY: c + 8 ≤ d ≤ both lengths.
                unsafe {
                    acc = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(c)), _mm256_loadu_ps(kr.as_ptr().add(c)), acc);
                }
                c += 8;
            }
            let mut s = super::super::vmath::avx2::hsum(acc);
            for cc in c..d {
                s += q[cc] * kr[cc];
            }
            sc[j] = s * scale;
            j += 1;
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) fn accumulate(p: &[f32], v: &[f32], vs: usize, vd: usize, acc: &mut [f32]) {
        let n = p.len();
        let v8 = vd / 8 * 8;
        let ap = acc.as_mut_ptr();
        let mut j = 0;
        while j + 4 <= n {
            let w = [p[j], p[j + 1], p[j + 2], p[j + 3]];
            if w != [0.0; 4] {
                let vr = &v[j * vs..j * vs + 3 * vs + vd];
                let vp = vr.as_ptr();
                let wv = w.map(|x| _mm256_set1_ps(x));
                let mut c = 0;
                // SAFETY: c + 8 ≤ v8 ≤ vd ≤ acc.len(); the v rows lie in `vr` (3·vs + vd values).
                unsafe {
                    while c < v8 {
                        let mut a = _mm256_loadu_ps(ap.add(c));
                        a = _mm256_fmadd_ps(wv[0], _mm256_loadu_ps(vp.add(c)), a);
                        a = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(vp.add(vs + c)), a);
                        a = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(vp.add(2 * vs + c)), a);
                        a = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(vp.add(3 * vs + c)), a);
                        _mm256_storeu_ps(ap.add(c), a);
                        c += 8;
                    }
                }
                for cc in v8..vd {
                    acc[cc] += w[0] * vr[cc] + w[1] * vr[vs + cc] + w[2] * vr[2 * vs + cc] + w[3] * vr[3 * vs + cc];
                }
            }
            j += 4;
        }
        while j < n {
            let w = p[j];
            if w != 0.0 {
                let vr = &v[j * vs..j * vs + vd];
                let wv = _mm256_set1_ps(w);
                let mut c = 0;
                while c < v8 {
                    // SAFETY: c + 8 ≤ v8 ≤ vd, the length of `vr` and at most acc.len().
                    unsafe {
                        let a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr.as_ptr().add(c)), _mm256_loadu_ps(ap.add(c)));
                        _mm256_storeu_ps(ap.add(c), a);
                    }
                    c += 8;
                }
                for cc in v8..vd {
                    acc[cc] += w * vr[cc];
                }
            }
            j += 1;
        }
    }
}
