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
    /// Running max per query row.
    m: Vec<f32>,
    /// Running sum per query row.
    l: Vec<f32>,
    /// Unnormalised output rows, `Q_BLOCK × v_dim`.
    acc: Vec<f32>,
    /// The query block packed row-major, `Q_BLOCK × head_dim`.
    qp: Vec<f32>,
    /// The key tile transposed, `head_dim × K_BLOCK` (columns past the tile zero).
    kt: Vec<f32>,
    /// Scores, then probabilities, of the tile: `Q_BLOCK × K_BLOCK`.
    s: Vec<f32>,
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
        qp: vec![0.0; Q_BLOCK * d],
        kt: vec![0.0; d * K_BLOCK],
        s: vec![0.0; Q_BLOCK * K_BLOCK],
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

/// One (batch, head, query block) item: the query block is packed once; per key tile, the
/// tile is packed transposed, the `rows × nk` scores come from a register-tiled `Q·Kᵀ`
/// micro-kernel, each row is masked and goes through the online-softmax update (its scores
/// become probabilities in place), and `P·V` is added to the output rows by a register-tiled
/// micro-kernel.
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
    for r in 0..rows {
        let qo = p.off(nh, sq, d, b, h, i0 + r);
        s.qp[r * d..(r + 1) * d].copy_from_slice(&q[qo..qo + d]);
    }
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
        let nk16 = nk.div_ceil(16) * 16;
        pack_kt(&k[kbase + j0 * kstride..], kstride, d, nk, nk16, &mut s.kt);
        // Keys visible to the last row of each row group (causal) bound the tiles computed.
        let visible = |r_end: usize| if p.causal { (i0 + r_end).saturating_sub(j0).min(nk) } else { nk };
        scores_tile(isa, &s.qp, d, &s.kt, rows, nk16, p.scale, &mut s.s, visible);
        for r in 0..rows {
            let i = i0 + r;
            let row = &mut s.s[r * K_BLOCK..r * K_BLOCK + nk];
            let jv = if p.causal { j1.min(i + 1) } else { j1 };
            if jv <= j0 {
                row.fill(0.0);
                continue;
            }
            row[jv - j0..].fill(f32::NEG_INFINITY);
            apply_mask(p, b, h, i, j0, row);
            let m_new = nan_max(s.m[r], row_max(isa, row));
            if m_new == f32::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            let alpha = exp_scalar(s.m[r] - m_new);
            let sum = exp_shift_sum(isa, row, m_new);
            s.l[r] = s.l[r] * alpha + sum;
            s.m[r] = m_new;
            if alpha != 1.0 {
                s.acc[r * vd..(r + 1) * vd].iter_mut().for_each(|a| *a *= alpha);
            }
        }
        pv_tile(isa, &s.s, nk, &v[vbase + j0 * vstride..], vstride, vd, rows, &mut s.acc);
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

/// Packs `nk` key rows (`ks` apart, `d` values each) transposed into `kt` (`d × K_BLOCK`),
/// zeroing columns `nk..nk16`.
fn pack_kt(k: &[f32], ks: usize, d: usize, nk: usize, nk16: usize, kt: &mut [f32]) {
    for j in 0..nk {
        let kr = &k[j * ks..j * ks + d];
        for (c, &x) in kr.iter().enumerate() {
            kt[c * K_BLOCK + j] = x;
        }
    }
    if nk16 > nk {
        for c in 0..d {
            kt[c * K_BLOCK + nk..c * K_BLOCK + nk16].fill(0.0);
        }
    }
}

/// `s[r][j] = scale · Σ_c qp[r][c]·kt[c][j]` for `r < rows`, `j < nk16` (a multiple of 16),
/// skipping 16-key groups that `visible(r_end)` (keys visible to rows `< r_end`) excludes for a
/// whole row group; those entries are left as they are (the caller masks them).
#[allow(clippy::too_many_arguments)]
fn scores_tile(
    isa: FusedIsa,
    qp: &[f32],
    d: usize,
    kt: &[f32],
    rows: usize,
    nk16: usize,
    scale: f32,
    s: &mut [f32],
    visible: impl Fn(usize) -> usize,
) {
    debug_assert!(qp.len() >= rows * d && kt.len() >= d * K_BLOCK && s.len() >= rows * K_BLOCK);
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        let mut r0 = 0;
        while r0 < rows {
            let nr = (rows - r0).min(avx2::QK_ROWS);
            let cols = visible(r0 + nr).min(nk16);
            let mut j = 0;
            while j < cols {
                // SAFETY: AVX2+FMA confirmed by `checked()`; rows r0..r0+nr < rows of qp (d
                // values each) and s (K_BLOCK each), columns j..j+16 ≤ nk16 ≤ K_BLOCK of kt's d
                // rows (asserted above).
                unsafe {
                    avx2::qk(
                        nr,
                        qp.as_ptr().add(r0 * d),
                        d,
                        kt.as_ptr().add(j),
                        s.as_mut_ptr().add(r0 * K_BLOCK + j),
                        scale,
                    )
                };
                j += 16;
            }
            r0 += nr;
        }
        return;
    }
    let _ = isa;
    for r in 0..rows {
        let cols = visible(r + 1).min(nk16);
        let row = &mut s[r * K_BLOCK..r * K_BLOCK + cols];
        row.fill(0.0);
        for (c, &x) in qp[r * d..(r + 1) * d].iter().enumerate() {
            for (o, &kv) in row.iter_mut().zip(&kt[c * K_BLOCK..c * K_BLOCK + cols]) {
                *o += x * kv;
            }
        }
        row.iter_mut().for_each(|o| *o *= scale);
    }
}

/// `acc[r] += Σ_j s[r][j]·v_j` for `r < rows`, `j < nk` (v rows `vs` apart). The AVX2 path
/// multiplies every weight, so it is used only when the `nk` value rows are finite; otherwise
/// (and on the generic path) keys with weight 0 are skipped, so an infinite value on an
/// excluded key does not make the row NaN.
#[allow(clippy::too_many_arguments)]
fn pv_tile(isa: FusedIsa, s: &[f32], nk: usize, v: &[f32], vs: usize, vd: usize, rows: usize, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        let vr = &v[..(nk - 1) * vs + vd];
        // SAFETY: AVX2+FMA confirmed by `checked()`.
        if unsafe { avx2::all_finite(vr, nk, vs, vd) } {
            let mut r0 = 0;
            while r0 < rows {
                let nr = (rows - r0).min(avx2::PV_ROWS);
                // SAFETY: rows r0..r0+nr of s (K_BLOCK apart, nk ≤ K_BLOCK used) and of acc (vd
                // apart) exist; vr holds nk rows of vd values vs apart.
                unsafe {
                    avx2::pv(nr, s.as_ptr().add(r0 * K_BLOCK), nk, vr.as_ptr(), vs, vd, acc.as_mut_ptr().add(r0 * vd))
                };
                r0 += nr;
            }
            return;
        }
    }
    for r in 0..rows {
        accumulate(isa, &s[r * K_BLOCK..r * K_BLOCK + nk], v, vs, vd, &mut acc[r * vd..(r + 1) * vd]);
    }
}

/// NaN-propagating maximum of a row (−∞ for an empty row).
fn row_max(isa: FusedIsa, x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: AVX2+FMA confirmed by `checked()`.
        return unsafe { avx2::row_max(x) };
    }
    let _ = isa;
    x.iter().fold(f32::NEG_INFINITY, |m, &v| nan_max(m, v))
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

/// `acc += Σ_j p[j]·v_j` over the keys with a non-zero weight.
fn accumulate(isa: FusedIsa, p: &[f32], v: &[f32], vs: usize, vd: usize, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx2 {
        // SAFETY: AVX2+FMA confirmed by `checked()`.
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

    use super::K_BLOCK;

    /// Query rows per `Q·Kᵀ` micro-kernel call (6 rows × 16 keys = 12 accumulators).
    pub(super) const QK_ROWS: usize = 6;
    /// Query rows per `P·V` micro-kernel call (6 rows × 16 columns = 12 accumulators).
    pub(super) const PV_ROWS: usize = 6;

    /// Scores of `nr` (1..=6) packed query rows (`d` apart) against 16 packed key columns.
    ///
    /// # Safety
    /// AVX2+FMA; `qp` holds `nr` rows of `d` values; `kt` points at column j of a `d × K_BLOCK`
    /// packed tile with j + 16 ≤ K_BLOCK; `s` points at column j of `nr` rows `K_BLOCK` apart.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn qk(nr: usize, qp: *const f32, d: usize, kt: *const f32, s: *mut f32, scale: f32) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match nr {
                1 => qk_r::<1>(qp, d, kt, s, scale),
                2 => qk_r::<2>(qp, d, kt, s, scale),
                3 => qk_r::<3>(qp, d, kt, s, scale),
                4 => qk_r::<4>(qp, d, kt, s, scale),
                5 => qk_r::<5>(qp, d, kt, s, scale),
                6 => qk_r::<6>(qp, d, kt, s, scale),
                _ => {}
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn qk_r<const R: usize>(qp: *const f32, d: usize, kt: *const f32, s: *mut f32, scale: f32) {
        let mut a = [[_mm256_setzero_ps(); 2]; R];
        for c in 0..d {
            // SAFETY: c < d rows of kt, 16 columns from kt; q row r < R has d values.
            unsafe {
                let k0 = _mm256_loadu_ps(kt.add(c * K_BLOCK));
                let k1 = _mm256_loadu_ps(kt.add(c * K_BLOCK + 8));
                for (r, ar) in a.iter_mut().enumerate() {
                    let x = _mm256_set1_ps(*qp.add(r * d + c));
                    ar[0] = _mm256_fmadd_ps(x, k0, ar[0]);
                    ar[1] = _mm256_fmadd_ps(x, k1, ar[1]);
                }
            }
        }
        let sc = _mm256_set1_ps(scale);
        for (r, ar) in a.iter().enumerate() {
            // SAFETY: row r < R of s has 16 writable columns from s.
            unsafe {
                _mm256_storeu_ps(s.add(r * K_BLOCK), _mm256_mul_ps(ar[0], sc));
                _mm256_storeu_ps(s.add(r * K_BLOCK + 8), _mm256_mul_ps(ar[1], sc));
            }
        }
    }

    /// `acc[r] += Σ_{j<nk} p[r][j]·v_j` for `nr` (1..=6) rows.
    ///
    /// # Safety
    /// AVX2+FMA; `p` holds `nr` rows `K_BLOCK` apart with `nk` values each; `v` holds `nk` rows
    /// `vs` apart of `vd` values; `acc` holds `nr` rows of `vd` values, `vd` apart.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pv(nr: usize, p: *const f32, nk: usize, v: *const f32, vs: usize, vd: usize, acc: *mut f32) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match nr {
                1 => pv_r::<1>(p, nk, v, vs, vd, acc),
                2 => pv_r::<2>(p, nk, v, vs, vd, acc),
                3 => pv_r::<3>(p, nk, v, vs, vd, acc),
                4 => pv_r::<4>(p, nk, v, vs, vd, acc),
                5 => pv_r::<5>(p, nk, v, vs, vd, acc),
                6 => pv_r::<6>(p, nk, v, vs, vd, acc),
                _ => {}
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pv_r<const R: usize>(p: *const f32, nk: usize, v: *const f32, vs: usize, vd: usize, acc: *mut f32) {
        let mut c = 0;
        while c + 16 <= vd {
            // SAFETY: columns c..c+16 ≤ vd of acc's and v's rows; rows r < R of p and acc and
            // j < nk of v exist (the caller's contract).
            unsafe { pv_cols::<R, 2>(p, nk, v.add(c), vs, vd, acc.add(c)) };
            c += 16;
        }
        if c + 8 <= vd {
            // SAFETY: as above with columns c..c+8 ≤ vd.
            unsafe { pv_cols::<R, 1>(p, nk, v.add(c), vs, vd, acc.add(c)) };
            c += 8;
        }
        while c < vd {
            for r in 0..R {
                let mut t = 0.0;
                for j in 0..nk {
                    // SAFETY: c < vd; row r < R of p, row j < nk of v (the caller's contract).
                    unsafe { t += *p.add(r * K_BLOCK + j) * *v.add(j * vs + c) };
                }
                // SAFETY: c < vd, row r < R of acc.
                unsafe { *acc.add(r * vd + c) += t };
            }
            c += 1;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pv_cols<const R: usize, const W: usize>(
        p: *const f32,
        nk: usize,
        v: *const f32,
        vs: usize,
        vd: usize,
        acc: *mut f32,
    ) {
        let mut a = [[_mm256_setzero_ps(); W]; R];
        for (r, ar) in a.iter_mut().enumerate() {
            for (x, ax) in ar.iter_mut().enumerate() {
                // SAFETY: 8·W columns from acc's rows r < R exist (the caller's contract).
                *ax = unsafe { _mm256_loadu_ps(acc.add(r * vd + 8 * x)) };
            }
        }
        for j in 0..nk {
            let mut vv = [_mm256_setzero_ps(); W];
            for (x, vx) in vv.iter_mut().enumerate() {
                // SAFETY: 8·W columns of v's row j < nk exist (the caller's contract).
                *vx = unsafe { _mm256_loadu_ps(v.add(j * vs + 8 * x)) };
            }
            for (r, ar) in a.iter_mut().enumerate() {
                // SAFETY: row r < R of p has nk > j weights.
                let w = _mm256_set1_ps(unsafe { *p.add(r * K_BLOCK + j) });
                for (ax, &vx) in ar.iter_mut().zip(&vv) {
                    *ax = _mm256_fmadd_ps(w, vx, *ax);
                }
            }
        }
        for (r, ar) in a.iter().enumerate() {
            for (x, &ax) in ar.iter().enumerate() {
                // SAFETY: as for the loads of acc.
                unsafe { _mm256_storeu_ps(acc.add(r * vd + 8 * x), ax) };
            }
        }
    }

    /// Whether the `nk` rows of `vd` values (`vs` apart) of `v` are all finite.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn all_finite(v: &[f32], nk: usize, vs: usize, vd: usize) -> bool {
        let zero = _mm256_setzero_ps();
        let mut acc = zero;
        let v8 = vd / 8 * 8;
        for j in 0..nk {
            let row = &v[j * vs..j * vs + vd];
            let mut c = 0;
            while c < v8 {
                // SAFETY: c + 8 ≤ vd = row.len(); x·0 is 0 for finite x, NaN otherwise.
                acc = _mm256_add_ps(acc, _mm256_mul_ps(unsafe { _mm256_loadu_ps(row.as_ptr().add(c)) }, zero));
                c += 8;
            }
            if !row[v8..].iter().all(|x| x.is_finite()) {
                return false;
            }
        }
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(acc, acc)) == 0
    }

    /// NaN-propagating maximum of `x` (−∞ when empty).
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn row_max(x: &[f32]) -> f32 {
        let n = x.len();
        let mut mx = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut nan = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
            mx = _mm256_max_ps(mx, v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
            i += 8;
        }
        if _mm256_movemask_ps(nan) != 0 {
            return f32::NAN;
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), mx) };
        let m = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        x[i..].iter().fold(m, |a, &b| super::nan_max(a, b))
    }

    /// `acc += Σ_j p[j]·v_j` (rows `vs` apart) over the keys with a non-zero weight.
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
