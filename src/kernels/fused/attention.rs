//! Tiled (flash-attention style) scaled dot-product attention in f32.
//!
//! Work is split into (batch, head, block of [`Q_BLOCK`] queries) items. An item packs its query
//! block transposed (`qᵀ`, `head_dim × Q_BLOCK`) and walks the keys in tiles of up to
//! [`K_BLOCK`] (sequences up to `K_BLOCK` keys are one tile: an exact softmax, no rescaling).
//! Scores are kept transposed, one row of `Q_BLOCK` query lanes per key, so that the softmax is
//! vertical (8 query rows per vector) and neither K nor V is ever repacked: the `Q·Kᵀ`
//! micro-kernel broadcasts key values straight from K, the `P·V` one broadcasts value entries
//! straight from V, both against vectors of 16 query lanes.
//!
//! Per tile: `sᵀ = scale·k·qᵀ + bias + additive mask` (excluded keys = −∞), then the
//! online-softmax update per query lane (running max `m`, running sum `l`, unnormalised output
//! `accᵀ`, `v_dim × Q_BLOCK`): `m' = max(m, max_j s_j)`, `α = e^(m − m')`,
//! `l' = α·l + Σ e^(s_j − m')`, `acc' = α·acc + Σ e^(s_j − m')·v_j`. The output row is `acc/l`,
//! or 0 when every key was excluded or scored −∞ (fully masked rows), and padded query rows
//! (≥ query_seq_len) stay 0. Extra memory per thread: `Q_BLOCK·(head_dim + v_dim + K_BLOCK + 3)`
//! floats; the `[S, S]` score matrix is never built. Causal attention stops each query block at
//! its last visible key.
//!
//! Conventions follow the reference kernel (`kernels/reference/fused_attention.rs`): causal is
//! top-left aligned (query i sees keys j ≤ i, also when the lengths differ), a Bool mask excludes
//! `false` keys, a NaN score makes the row NaN. One difference: when a value row of the key/value
//! head is not finite, keys whose weight underflows to 0 are skipped in `P·V` (so an infinite `v`
//! on an excluded key does not make the row NaN).
// Targets without SIMD paths (wasm32) leave parts of the SIMD scaffolding unused.
#![cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(unused_mut, unused_variables))]

use rayon::prelude::*;

pub use crate::ir::op::AttentionLayout;

use super::FusedIsa;
use super::vmath::exp_scalar;

/// Query rows per work item (two halves of [`QH`] lanes).
pub const Q_BLOCK: usize = 32;
/// Keys per tile.
pub const K_BLOCK: usize = 128;
/// Query lanes per micro-kernel column block (two AVX2 vectors).
const QH: usize = 16;

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

    /// Element distance between consecutive positions of one head (row width `w`, `nh` heads).
    #[inline]
    fn pos_stride(&self, nh: usize, w: usize) -> usize {
        match self.layout {
            AttentionLayout::Bhsd => w,
            AttentionLayout::Bshd => nh * w,
        }
    }

    /// Whether scores need per-element masking (causal, mask or bias).
    #[inline]
    fn masked(&self) -> bool {
        self.causal || !matches!(self.mask, AttentionMask::None) || self.bias.is_some()
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
    /// Running max per query lane.
    m: [f32; Q_BLOCK],
    /// Running sum per query lane.
    l: [f32; Q_BLOCK],
    /// Rescale factor of the last tile per query lane.
    alpha: [f32; Q_BLOCK],
    /// The tile's score maximum per query lane, kept by the AVX2 `Q·Kᵀ` micro-kernel (used when
    /// no mask or bias changes the scores afterwards).
    tmax: [f32; Q_BLOCK],
    /// The query block transposed, `head_dim × Q_BLOCK` (lanes past the block zero).
    qt: Vec<f32>,
    /// Scores, then probabilities, of the tile transposed: `K_BLOCK × Q_BLOCK`.
    st: Vec<f32>,
    /// Unnormalised output transposed, `v_dim × Q_BLOCK`.
    acc: Vec<f32>,
    /// `(batch, kv head, whether its first kv_len value rows are all finite)` of the last check.
    v_finite: Option<(usize, usize, bool)>,
}

/// Computes attention into `out` (the query's layout with head dim `v_dim`, `B·H·Sq·v_dim`
/// values, of any prior content: every one is written, padded and fully masked query rows with
/// 0). Returns false (computing nothing) if a slice is shorter than the shapes require.
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
        out[..nb * nh * sq * vd].fill(0.0);
        return true;
    }
    let isa = isa.checked();
    let qblocks = sq.div_ceil(Q_BLOCK);
    let items = nb * nh * qblocks;
    let outp = OutPtr(out.as_mut_ptr());
    let new_scratch = || Scratch {
        m: [0.0; Q_BLOCK],
        l: [0.0; Q_BLOCK],
        alpha: [0.0; Q_BLOCK],
        tmax: [f32::NEG_INFINITY; Q_BLOCK],
        qt: vec![0.0; d * Q_BLOCK],
        st: vec![0.0; K_BLOCK * Q_BLOCK],
        acc: vec![0.0; vd * Q_BLOCK],
        v_finite: None,
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

/// One (batch, head, query block) item: the query block is packed transposed once; per key
/// tile, the transposed scores come from the `k·qᵀ` micro-kernel, are masked, go through the
/// online-softmax update (becoming probabilities in place), and `vᵀ·pᵀ` is added to the
/// (rescaled) transposed output by the `P·V` micro-kernel.
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
    // Rows past the query length (padding) are 0.
    let block_end = (i0 + Q_BLOCK).min(sq);
    zero_rows(p, b, h, i1.max(i0)..block_end, out);
    if i0 >= i1 {
        return;
    }
    let rows = i1 - i0;
    let kend = if p.causal { kv_len.min(i1) } else { kv_len };
    if kend == 0 {
        zero_rows(p, b, h, i0..i1, out); // every row fully masked
        return;
    }
    // Query lanes computed: whole halves of QH.
    let lanes = rows.div_ceil(QH) * QH;
    pack_qt(isa, p, q, b, h, i0, rows, lanes, &mut s.qt);
    s.m[..lanes].fill(f32::NEG_INFINITY);
    s.l[..lanes].fill(0.0);
    let ks = p.pos_stride(nkv, d);
    let vs = p.pos_stride(nkv, vd);
    let kbase = p.off(nkv, skv, d, b, hk, 0);
    let vbase = p.off(nkv, skv, vd, b, hk, 0);
    let v_finite = match s.v_finite {
        Some((cb, ch, f)) if cb == b && ch == hk => f,
        _ => {
            let f = rows_finite(isa, &v[vbase..vbase + (kv_len - 1) * vs + vd], kv_len, vs, vd);
            s.v_finite = Some((b, hk, f));
            f
        }
    };
    let mut j0 = 0;
    while j0 < kend {
        let j1 = (j0 + K_BLOCK).min(kend);
        let nk = j1 - j0;
        let kt = &k[kbase + j0 * ks..kbase + (j1 - 1) * ks + d];
        scores(isa, &s.qt, d, kt, ks, nk, lanes, p.scale, &mut s.st, &mut s.tmax);
        let tmax = if p.masked() {
            mask_tile(p, b, h, i0, rows, j0, nk, &mut s.st);
            None
        } else {
            Some(&s.tmax)
        };
        softmax_tile(isa, &mut s.st, nk, lanes, tmax, &mut s.m, &mut s.l, &mut s.alpha);
        let vt = &v[vbase + j0 * vs..vbase + (j1 - 1) * vs + vd];
        pv(isa, &s.st, nk, vt, vs, vd, lanes, &s.alpha, j0 == 0, v_finite, &mut s.acc);
        j0 = j1;
    }
    store_out(isa, p, b, h, i0, rows, &s.m, &s.l, &s.acc, out);
}

/// Packs query rows `i0..i0 + rows` of head (b, h) transposed into `qt` (`head_dim × Q_BLOCK`),
/// zeroing lanes `rows..lanes`.
#[allow(clippy::too_many_arguments)]
fn pack_qt(
    isa: FusedIsa,
    p: &AttentionParams<'_>,
    q: &[f32],
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    lanes: usize,
    qt: &mut [f32],
) {
    let (nh, sq, d) = (p.heads, p.seq_q, p.head_dim);
    let row = |r: usize| {
        let qo = p.off(nh, sq, d, b, h, i0 + r);
        &q[qo..qo + d]
    };
    let mut r0 = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && d >= 8 {
        while r0 + 8 <= rows {
            let src: [&[f32]; 8] = std::array::from_fn(|i| row(r0 + i));
            let dst = &mut qt[r0..(d - 1) * Q_BLOCK + r0 + 8];
            // SAFETY: AVX2+FMA confirmed by `checked()`; 8 rows of d values, dst holds d rows of
            // 8 lanes Q_BLOCK apart.
            unsafe { avx2::pack8(src, d, dst) };
            r0 += 8;
        }
    }
    let _ = isa;
    for r in r0..rows {
        for (c, &x) in row(r).iter().enumerate() {
            qt[c * Q_BLOCK + r] = x;
        }
    }
    if lanes > rows {
        for c in 0..d {
            qt[c * Q_BLOCK + rows..c * Q_BLOCK + lanes].fill(0.0);
        }
    }
}

/// Writes 0 to output rows `rows` of head (b, h).
fn zero_rows(p: &AttentionParams<'_>, b: usize, h: usize, rows: std::ops::Range<usize>, out: OutPtr) {
    let (nh, sq, vd) = (p.heads, p.seq_q, p.v_dim);
    for i in rows {
        // SAFETY: row (b, h, i) with i < seq_q holds vd values inside `out` (checked by the
        // caller) and belongs to the calling item only.
        unsafe { std::ptr::write_bytes(out.0.add(p.off(nh, sq, vd, b, h, i)), 0, vd) };
    }
}

/// Writes output rows `i0..i0 + rows` of head (b, h): `accᵀ[·][r] / l_r`, or 0 for fully masked
/// rows (`m_r = −∞`).
#[allow(clippy::too_many_arguments)]
fn store_out(
    isa: FusedIsa,
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    m: &[f32; Q_BLOCK],
    l: &[f32; Q_BLOCK],
    acc: &[f32],
    out: OutPtr,
) {
    let (nh, sq, vd) = (p.heads, p.seq_q, p.v_dim);
    let dst = |r: usize| {
        if m[r] == f32::NEG_INFINITY {
            std::ptr::null_mut()
        } else {
            // The offset stays inside `out` (checked by the caller); it is only dereferenced below.
            out.0.wrapping_add(p.off(nh, sq, vd, b, h, i0 + r))
        }
    };
    let inv: [f32; Q_BLOCK] = std::array::from_fn(|r| 1.0 / l[r]);
    for r in (0..rows).filter(|&r| m[r] == f32::NEG_INFINITY) {
        zero_rows(p, b, h, i0 + r..i0 + r + 1, out);
    }
    let mut r0 = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && vd >= 8 {
        while r0 + 8 <= rows {
            let d8: [*mut f32; 8] = std::array::from_fn(|i| dst(r0 + i));
            let a = &acc[r0..(vd - 1) * Q_BLOCK + r0 + 8];
            // SAFETY: AVX2+FMA confirmed by `checked()`; `a` holds vd rows of 8 lanes Q_BLOCK
            // apart; each non-null d8[i] is the start of output row (b, h, i0 + r0 + i), vd values
            // inside `out` (checked by the caller) written by this item only.
            unsafe { avx2::store8(a, vd, &inv[r0..r0 + 8], d8) };
            r0 += 8;
        }
    }
    let _ = isa;
    for r in r0..rows {
        let o = dst(r);
        if o.is_null() {
            continue;
        }
        for c in 0..vd {
            // SAFETY: o + c is inside output row (b, h, i0 + r) (vd values inside `out`, checked
            // by the caller), which belongs to this item only.
            unsafe { *o.add(c) = acc[c * Q_BLOCK + r] * inv[r] };
        }
    }
}

/// Whether the `n` rows of `vd` values (`vs` apart) of `v` are all finite.
fn rows_finite(isa: FusedIsa, v: &[f32], n: usize, vs: usize, vd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: AVX2+FMA confirmed by `checked()`.
        return unsafe { avx2::all_finite(v, n, vs, vd) };
    }
    let _ = isa;
    (0..n).all(|j| v[j * vs..j * vs + vd].iter().all(|x| x.is_finite()))
}

/// Calls the micro-kernel `$f::<R>$args` whose const row count `R` is `$nr`, one of the listed
/// counts (the callers cap `$nr` at the ISA's `ROWS`, the largest listed).
#[cfg(target_arch = "x86_64")]
macro_rules! with_rows {
    ([$($r:literal)*], $nr:expr, $m:ident::$f:ident, $args:tt) => {
        match $nr {
            $($r => $m::$f::<$r> $args,)*
            _ => {}
        }
    };
}

/// Transposed scores of a tile: `st[j][r] = scale · Σ_c k_j[c]·qt[c][r]` for the `nk` key rows
/// of `k` (`ks` apart) and query lanes `r < lanes` (a multiple of [`QH`]). The AVX2 path also
/// sets `tmax[r]` to the lane's maximum score (the generic path leaves `tmax` alone).
#[allow(clippy::too_many_arguments)]
fn scores(
    isa: FusedIsa,
    qt: &[f32],
    d: usize,
    k: &[f32],
    ks: usize,
    nk: usize,
    lanes: usize,
    scale: f32,
    st: &mut [f32],
    tmax: &mut [f32; Q_BLOCK],
) {
    assert!(
        (1..=K_BLOCK).contains(&nk)
            && lanes <= Q_BLOCK
            && lanes.is_multiple_of(QH)
            && qt.len() >= d * Q_BLOCK
            && k.len() >= (nk - 1) * ks + d
            && st.len() >= K_BLOCK * Q_BLOCK
    );
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        let stp = st.as_mut_ptr();
        tmax[..lanes].fill(f32::NEG_INFINITY);
        let (qp, kp, mxp) = (qt.as_ptr(), k.as_ptr(), tmax.as_mut_ptr());
        let two = lanes == 2 * avx512::LANES;
        let mut j = 0;
        while j < nk {
            let nr = (nk - j).min(avx512::ROWS);
            // SAFETY: AVX-512F confirmed by `checked()`; key rows j..j+nr ≤ nk of k (d values,
            // ks apart); lanes 0..lanes (16 or 32, the vectors the call covers) of qt's d rows,
            // of st's rows j..j+nr and of tmax (asserted above).
            unsafe {
                let (kj, sj) = (kp.add(j * ks), stp.add(j * Q_BLOCK));
                if two {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nr, avx512::qk2, (qp, d, kj, ks, sj, scale, mxp))
                } else {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nr, avx512::qk1, (qp, d, kj, ks, sj, scale, mxp))
                }
            }
            j += nr;
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        let stp = st.as_mut_ptr();
        tmax[..lanes].fill(f32::NEG_INFINITY);
        let mxp = tmax.as_mut_ptr();
        micro_tiles(lanes, nk, |h, j, nr| {
            // SAFETY: AVX2+FMA confirmed by `checked()`; key rows j..j+nr ≤ nk of k (d values,
            // ks apart), lanes h..h+16 ≤ Q_BLOCK of qt's d rows, of st's rows j..j+nr and of
            // tmax (asserted above).
            unsafe {
                with_rows!(
                    [1 2 3 4 5 6],
                    nr,
                    avx2::qk_r,
                    (qt.as_ptr().add(h), d, k.as_ptr().add(j * ks), ks, stp.add(j * Q_BLOCK + h), scale, mxp.add(h))
                )
            }
        });
        return;
    }
    let _ = isa;
    for j in 0..nk {
        let kr = &k[j * ks..j * ks + d];
        let row = &mut st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        row.fill(0.0);
        for (c, &x) in kr.iter().enumerate() {
            for (o, &qv) in row.iter_mut().zip(&qt[c * Q_BLOCK..c * Q_BLOCK + lanes]) {
                *o += x * qv;
            }
        }
        row.iter_mut().for_each(|o| *o *= scale);
    }
}

/// The AVX2 micro-kernel calls covering query lanes `0..lanes` (halves of [`QH`]) and
/// `0..rows` broadcast rows (keys of `Q·Kᵀ`, value columns of `P·V`) in groups of up to
/// `avx2::ROWS`: `f(h, r, n)` for lanes `h..h + QH` and rows `r..r + n`.
#[cfg(target_arch = "x86_64")]
fn micro_tiles(lanes: usize, rows: usize, mut f: impl FnMut(usize, usize, usize)) {
    for h in (0..lanes).step_by(QH) {
        let mut r = 0;
        while r < rows {
            let n = (rows - r).min(avx2::ROWS);
            f(h, r, n);
            r += n;
        }
    }
}

/// Excludes (−∞) causally hidden keys and keys masked by the Bool mask, adds the additive mask
/// and the bias (to keys not already −∞), for query rows `i0..i0 + rows` and keys `j0..j0 + nk`.
#[allow(clippy::too_many_arguments)]
fn mask_tile(
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    j0: usize,
    nk: usize,
    st: &mut [f32],
) {
    for r in 0..rows {
        let i = i0 + r;
        // Keys visible to query i within the tile.
        let nv = if p.causal { (i + 1).saturating_sub(j0).min(nk) } else { nk };
        for j in nv..nk {
            st[j * Q_BLOCK + r] = f32::NEG_INFINITY;
        }
        match p.mask {
            AttentionMask::None => {}
            AttentionMask::Bool(m, sm) => {
                let base = b * sm[0] + h * sm[1] + i * sm[2] + j0 * sm[3];
                for j in 0..nv {
                    if !m[base + j * sm[3]] {
                        st[j * Q_BLOCK + r] = f32::NEG_INFINITY;
                    }
                }
            }
            AttentionMask::Additive(m, sm) => {
                let base = b * sm[0] + h * sm[1] + i * sm[2] + j0 * sm[3];
                for j in 0..nv {
                    let x = &mut st[j * Q_BLOCK + r];
                    if *x != f32::NEG_INFINITY {
                        *x += m[base + j * sm[3]];
                    }
                }
            }
        }
        if let Some((bias, sb)) = p.bias {
            let base = b * sb[0] + h * sb[1] + i * sb[2] + j0 * sb[3];
            for j in 0..nv {
                let x = &mut st[j * Q_BLOCK + r];
                if *x != f32::NEG_INFINITY {
                    *x += bias[base + j * sb[3]];
                }
            }
        }
    }
}

/// Online-softmax update of query lanes `0..lanes` with the `nk` transposed scores of a tile:
/// the scores become `e^(s − m')` in place, `alpha` receives `e^(m − m')`, `l` becomes
/// `α·l + Σ e^(s − m')` and `m` becomes `m'` (NaN if a score or `m` is NaN). A lane whose `m'`
/// is −∞ (nothing visible yet) gets probabilities 0, `α` 0 and keeps `m = −∞`, `l = 0`.
#[allow(clippy::too_many_arguments)]
fn softmax_tile(
    isa: FusedIsa,
    st: &mut [f32],
    nk: usize,
    lanes: usize,
    tmax: Option<&[f32; Q_BLOCK]>,
    m: &mut [f32; Q_BLOCK],
    l: &mut [f32; Q_BLOCK],
    alpha: &mut [f32; Q_BLOCK],
) {
    assert!(lanes <= Q_BLOCK && lanes.is_multiple_of(8) && st.len() >= nk * Q_BLOCK);
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        let mut x = 0;
        if isa == FusedIsa::Avx512 {
            while x + avx512::LANES <= lanes {
                // SAFETY: AVX-512F confirmed by `checked()`; lanes x..x+16 ≤ Q_BLOCK of the nk
                // rows of st and of m, l, alpha (asserted above).
                unsafe {
                    avx512::softmax_lanes(
                        st.as_mut_ptr().add(x),
                        nk,
                        tmax.map(|t| t.as_ptr().add(x)),
                        m.as_mut_ptr().add(x),
                        l.as_mut_ptr().add(x),
                        alpha.as_mut_ptr().add(x),
                    )
                };
                x += avx512::LANES;
            }
        }
        for x in (x..lanes).step_by(8) {
            // SAFETY: AVX2+FMA confirmed by `checked()`; lanes x..x+8 ≤ Q_BLOCK of the nk rows
            // of st and of m, l, alpha (asserted above).
            unsafe {
                avx2::softmax_lanes(
                    st.as_mut_ptr().add(x),
                    nk,
                    tmax.map(|t| t.as_ptr().add(x)),
                    m.as_mut_ptr().add(x),
                    l.as_mut_ptr().add(x),
                    alpha.as_mut_ptr().add(x),
                )
            };
        }
        return;
    }
    let _ = (isa, tmax);
    let mut mt = [f32::NEG_INFINITY; Q_BLOCK];
    for j in 0..nk {
        for (a, &s) in mt[..lanes].iter_mut().zip(&st[j * Q_BLOCK..j * Q_BLOCK + lanes]) {
            *a = nan_max(*a, s);
        }
    }
    let mut mu = [0f32; Q_BLOCK];
    for r in 0..lanes {
        let mn = nan_max(m[r], mt[r]);
        mu[r] = if mn == f32::NEG_INFINITY { 0.0 } else { mn };
        alpha[r] = exp_scalar(m[r] - mu[r]);
        m[r] = mn;
    }
    let mut sum = [0f32; Q_BLOCK];
    for j in 0..nk {
        let row = &mut st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        for ((x, &u), sm) in row.iter_mut().zip(&mu[..lanes]).zip(&mut sum[..lanes]) {
            *x = exp_scalar(*x - u);
            *sm += *x;
        }
    }
    for r in 0..lanes {
        l[r] = l[r] * alpha[r] + sum[r];
    }
}

/// `accᵀ[c][r] = α_r·accᵀ[c][r] + Σ_j pᵀ[j][r]·v_j[c]` (or without the first term when `first`)
/// for `c < vd`, lanes `r < lanes`, the `nk` value rows of `v` (`vs` apart). The vector path
/// multiplies every weight, so it is used only when the value rows are `finite`; otherwise keys
/// with weight 0 are skipped, so an infinite value on an excluded key does not make the row NaN.
#[allow(clippy::too_many_arguments)]
fn pv(
    isa: FusedIsa,
    st: &[f32],
    nk: usize,
    v: &[f32],
    vs: usize,
    vd: usize,
    lanes: usize,
    alpha: &[f32; Q_BLOCK],
    first: bool,
    finite: bool,
    acc: &mut [f32],
) {
    assert!(
        nk >= 1
            && lanes <= Q_BLOCK
            && lanes.is_multiple_of(QH)
            && st.len() >= nk * Q_BLOCK
            && v.len() >= (nk - 1) * vs + vd
            && acc.len() >= vd * Q_BLOCK
    );
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 && finite {
        let (sp, vp, accp, ap) = (st.as_ptr(), v.as_ptr(), acc.as_mut_ptr(), alpha.as_ptr());
        let two = lanes == 2 * avx512::LANES;
        let mut c = 0;
        while c < vd {
            let nc = (vd - c).min(avx512::ROWS);
            // SAFETY: AVX-512F confirmed by `checked()`; rows 0..nk of st, lanes 0..lanes (16 or
            // 32, the vectors the call covers); value columns c..c+nc ≤ vd of the nk rows of v;
            // acc rows c..c+nc ≤ vd; alpha lanes 0..lanes (asserted above).
            unsafe {
                let (vc, ac) = (vp.add(c), accp.add(c * Q_BLOCK));
                if two {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nc, avx512::pv2, (sp, nk, vc, vs, ac, ap, first))
                } else {
                    with_rows!([1 2 3 4 5 6 7 8 9 10 11 12], nc, avx512::pv1, (sp, nk, vc, vs, ac, ap, first))
                }
            }
            c += nc;
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() && finite {
        let accp = acc.as_mut_ptr();
        micro_tiles(lanes, vd, |h, c, nc| {
            // SAFETY: AVX2+FMA confirmed by `checked()`; rows 0..nk of st and lanes h..h+16 ≤
            // Q_BLOCK; value columns c..c+nc ≤ vd of the nk rows of v; acc rows c..c+nc ≤ vd,
            // lanes h..h+16; alpha lanes h..h+16 (asserted above).
            unsafe {
                let (sp, vp, ap) = (st.as_ptr().add(h), v.as_ptr().add(c), alpha.as_ptr().add(h));
                with_rows!([1 2 3 4 5 6], nc, avx2::pv_r, (sp, nk, vp, vs, accp.add(c * Q_BLOCK + h), ap, first))
            }
        });
        return;
    }
    let _ = isa;
    for c in 0..vd {
        let row = &mut acc[c * Q_BLOCK..c * Q_BLOCK + lanes];
        if first {
            row.fill(0.0);
        } else {
            row.iter_mut().zip(&alpha[..lanes]).for_each(|(a, &al)| *a *= al);
        }
    }
    for j in 0..nk {
        let prow = &st[j * Q_BLOCK..j * Q_BLOCK + lanes];
        for (c, &x) in v[j * vs..j * vs + vd].iter().enumerate() {
            let row = &mut acc[c * Q_BLOCK..c * Q_BLOCK + lanes];
            if finite {
                row.iter_mut().zip(prow).for_each(|(a, &w)| *a += w * x);
            } else {
                row.iter_mut().zip(prow).filter(|(_, w)| **w != 0.0).for_each(|(a, &w)| *a += w * x);
            }
        }
    }
}

/// The online-softmax update of one vector of query lanes, written once over `vmath`'s lane
/// vocabulary (`online_softmax!(features, isa)` inside each ISA module defines
/// `softmax_lanes`).
#[cfg(target_arch = "x86_64")]
macro_rules! online_softmax {
    ($feat:literal, $isa:ident) => {
        /// Online-softmax update of `LANES` query lanes (see `super::softmax_tile`): with the
        /// running maximum `m` and the tile's maximum `mx` (`tmax`, else found here), `μ = max(m,
        /// mx)` (0 where it is −∞: nothing visible yet), scores `s ← e^(s − μ)`, `α = e^(m − μ)`,
        /// `l ← l·α + Σ s`, `m ← μ`.
        ///
        /// NaN: a maximum found with `max` may drop a NaN score, but every NaN reaches `l`
        /// (`e^NaN` is NaN in `exp_nonpos`; a NaN `m` makes `α` NaN; a +∞ maximum makes the
        /// exponent of its own key ∞ − ∞), and a lane whose `l` is NaN gets `m` = NaN, so its
        /// output row is NaN (never taken for a fully masked row).
        ///
        /// # Safety
        /// The CPU has the module's features; `st` points at `LANES` lanes of `nk` rows
        /// `Q_BLOCK` apart; `m`, `l`, `alpha` and `tmax` hold `LANES` values each.
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn softmax_lanes(
            st: *mut f32,
            nk: usize,
            tmax: Option<*const f32>,
            m: *mut f32,
            l: *mut f32,
            alpha: *mut f32,
        ) {
            use crate::kernels::fused::vmath::$isa::{exp_nonpos, ops::*};
            let ninf = splat(f32::NEG_INFINITY);
            // SAFETY: the caller's contract.
            unsafe {
                let mo = load(m);
                let mx = match tmax {
                    Some(t) => load(t),
                    None => {
                        let mut mx = ninf;
                        for j in 0..nk {
                            mx = max(mx, load(st.add(j * Q_BLOCK)));
                        }
                        mx
                    }
                };
                let mx = max(mo, mx);
                // Lanes with nothing visible (−∞ ≥ mx: mx is −∞) shift by 0: their −∞ scores
                // give 0, α = e^(−∞) = 0. A NaN mx is kept.
                let mu = select(ge(ninf, mx), zero(), mx);
                let al = exp_nonpos(sub(mo, mu));
                let mut sum = zero();
                for j in 0..nk {
                    let e = exp_nonpos(sub(load(st.add(j * Q_BLOCK)), mu));
                    store(st.add(j * Q_BLOCK), e);
                    sum = add(sum, e);
                }
                let ln = fmadd(load(l), al, sum);
                store(l, ln);
                store(m, select(is_nan(ln), splat(f32::NAN), mx));
                store(alpha, al);
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Q_BLOCK;

    /// Broadcast rows per micro-kernel call: keys of `Q·Kᵀ`, value columns of `P·V`
    /// (6 rows × 16 query lanes = 12 accumulators).
    pub(super) const ROWS: usize = 6;

    /// Transposed scores of `R` (1..=6) key rows against 16 query lanes; `mx` (16 lanes)
    /// becomes the maximum of itself and the new scores (`max_ps` order: a NaN score may be
    /// dropped, see `softmax_lanes`).
    ///
    /// # Safety
    /// AVX2+FMA; `qt` points at lane h of a `d × Q_BLOCK` packed block with h + 16 ≤ Q_BLOCK;
    /// `k` holds `R` rows of `d` values `ks` apart; `st` points at lane h of `R` rows `Q_BLOCK`
    /// apart; `mx` at 16 values.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn qk_r<const R: usize>(
        qt: *const f32,
        d: usize,
        k: *const f32,
        ks: usize,
        st: *mut f32,
        scale: f32,
        mx: *mut f32,
    ) {
        let mut a = [[_mm256_setzero_ps(); 2]; R];
        let kp: [*const f32; R] = std::array::from_fn(|r| k.wrapping_add(r * ks));
        for c in 0..d {
            // SAFETY: c < d rows of qt with 16 lanes from qt; key row r < R has d values.
            unsafe {
                let q0 = _mm256_loadu_ps(qt.add(c * Q_BLOCK));
                let q1 = _mm256_loadu_ps(qt.add(c * Q_BLOCK + 8));
                for (ar, &kr) in a.iter_mut().zip(&kp) {
                    let x = _mm256_broadcast_ss(&*kr.add(c));
                    ar[0] = _mm256_fmadd_ps(x, q0, ar[0]);
                    ar[1] = _mm256_fmadd_ps(x, q1, ar[1]);
                }
            }
        }
        let sc = _mm256_set1_ps(scale);
        // SAFETY: mx holds 16 values (the contract).
        let mut m = unsafe { [_mm256_loadu_ps(mx), _mm256_loadu_ps(mx.add(8))] };
        for (r, ar) in a.iter().enumerate() {
            let s = [_mm256_mul_ps(ar[0], sc), _mm256_mul_ps(ar[1], sc)];
            m = [_mm256_max_ps(m[0], s[0]), _mm256_max_ps(m[1], s[1])];
            // SAFETY: row r < R of st has 16 writable lanes from st.
            unsafe {
                _mm256_storeu_ps(st.add(r * Q_BLOCK), s[0]);
                _mm256_storeu_ps(st.add(r * Q_BLOCK + 8), s[1]);
            }
        }
        // SAFETY: as for the loads of mx.
        unsafe {
            _mm256_storeu_ps(mx, m[0]);
            _mm256_storeu_ps(mx.add(8), m[1]);
        }
    }

    /// `accᵀ[c][·] = α·accᵀ[c][·] + Σ_{j<nk} pᵀ[j][·]·v_j[c]` for `R` (1..=6) value columns
    /// and 16 query lanes (no `α` term when `first`).
    ///
    /// # Safety
    /// AVX2+FMA; `p` points at lane h of `nk` rows `Q_BLOCK` apart with h + 16 ≤ Q_BLOCK; `v`
    /// holds `nk` rows `vs` apart with `R` values each; `acc` points at lane h of `R` rows
    /// `Q_BLOCK` apart; `alpha` holds 16 values.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pv_r<const R: usize>(
        p: *const f32,
        nk: usize,
        v: *const f32,
        vs: usize,
        acc: *mut f32,
        alpha: *const f32,
        first: bool,
    ) {
        let mut a = [[_mm256_setzero_ps(); 2]; R];
        if !first {
            // SAFETY: 16 alpha values; rows r < R of acc have 16 lanes (the caller's contract).
            unsafe {
                let al = [_mm256_loadu_ps(alpha), _mm256_loadu_ps(alpha.add(8))];
                for (r, ar) in a.iter_mut().enumerate() {
                    ar[0] = _mm256_mul_ps(_mm256_loadu_ps(acc.add(r * Q_BLOCK)), al[0]);
                    ar[1] = _mm256_mul_ps(_mm256_loadu_ps(acc.add(r * Q_BLOCK + 8)), al[1]);
                }
            }
        }
        for j in 0..nk {
            // SAFETY: row j < nk of p has 16 lanes; row j of v has R values (the caller's contract).
            unsafe {
                let p0 = _mm256_loadu_ps(p.add(j * Q_BLOCK));
                let p1 = _mm256_loadu_ps(p.add(j * Q_BLOCK + 8));
                let vr = v.add(j * vs);
                for (r, ar) in a.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*vr.add(r));
                    ar[0] = _mm256_fmadd_ps(x, p0, ar[0]);
                    ar[1] = _mm256_fmadd_ps(x, p1, ar[1]);
                }
            }
        }
        for (r, ar) in a.iter().enumerate() {
            // SAFETY: as for the loads of acc.
            unsafe {
                _mm256_storeu_ps(acc.add(r * Q_BLOCK), ar[0]);
                _mm256_storeu_ps(acc.add(r * Q_BLOCK + 8), ar[1]);
            }
        }
    }

    online_softmax!("avx2,fma", avx2);

    /// Transposes an 8×8 block: lane i of row j of the result is lane j of row i of `r`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// Packs 8 rows of `d` values transposed: value c of `src[i]` goes to `dst[c·Q_BLOCK + i]`.
    ///
    /// # Safety
    /// AVX2+FMA; every `src[i]` holds `d` values and `dst` holds `(d − 1)·Q_BLOCK + 8`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pack8(src: [&[f32]; 8], d: usize, dst: &mut [f32]) {
        debug_assert!(src.iter().all(|s| s.len() >= d) && dst.len() >= (d - 1) * Q_BLOCK + 8);
        let dp = dst.as_mut_ptr();
        let mut c = 0;
        while c + 8 <= d {
            // SAFETY: columns c..c+8 ≤ d of each source row; rows c..c+8 of dst (the contract).
            unsafe {
                let t = transpose8(std::array::from_fn(|i| _mm256_loadu_ps(src[i].as_ptr().add(c))));
                for (x, &tx) in t.iter().enumerate() {
                    _mm256_storeu_ps(dp.add((c + x) * Q_BLOCK), tx);
                }
            }
            c += 8;
        }
        for cc in c..d {
            for (i, s) in src.iter().enumerate() {
                dst[cc * Q_BLOCK + i] = s[cc];
            }
        }
    }

    /// Writes 8 output rows: value c of row i is `acc[c·Q_BLOCK + i]·inv[i]`, for `c < vd`; rows
    /// whose pointer is null are skipped.
    ///
    /// # Safety
    /// AVX2+FMA; `acc` holds `(vd − 1)·Q_BLOCK + 8` values, `inv` 8; every non-null `dst[i]`
    /// points at `vd` writable values that no other thread accesses.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn store8(acc: &[f32], vd: usize, inv: &[f32], dst: [*mut f32; 8]) {
        debug_assert!(acc.len() >= (vd - 1) * Q_BLOCK + 8 && inv.len() >= 8);
        let ap = acc.as_ptr();
        // SAFETY: inv holds 8 values (the contract).
        let iv = unsafe { _mm256_loadu_ps(inv.as_ptr()) };
        let mut c = 0;
        while c + 8 <= vd {
            // SAFETY: rows c..c+8 < vd of acc, 8 lanes each; columns c..c+8 ≤ vd of each
            // non-null dst row (the contract).
            unsafe {
                let t =
                    transpose8(std::array::from_fn(|x| _mm256_mul_ps(_mm256_loadu_ps(ap.add((c + x) * Q_BLOCK)), iv)));
                for (&o, &tx) in dst.iter().zip(&t) {
                    if !o.is_null() {
                        _mm256_storeu_ps(o.add(c), tx);
                    }
                }
            }
            c += 8;
        }
        for cc in c..vd {
            for (i, &o) in dst.iter().enumerate() {
                if !o.is_null() {
                    // SAFETY: cc < vd values of the row (the contract).
                    unsafe { *o.add(cc) = acc[cc * Q_BLOCK + i] * inv[i] };
                }
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
}

/// AVX-512F micro-kernels: all query lanes of a block (16 or 32: one or two vectors) against up
/// to [`avx512::ROWS`] broadcast rows, and the online-softmax update of 16 lanes.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::Q_BLOCK;

    /// f32 lanes of one vector.
    pub(super) const LANES: usize = 16;
    /// Broadcast rows per micro-kernel call (12 rows × 2 vectors = 24 accumulators).
    pub(super) const ROWS: usize = 12;

    /// Transposed scores of `R` key rows against `NV` vectors of query lanes; `mx` (`NV`
    /// vectors) becomes the maximum of itself and the new scores (see `avx2::qk_r`).
    ///
    /// # Safety
    /// AVX-512F; `qt` points at a `d × Q_BLOCK` packed block (`NV · 16 ≤ Q_BLOCK` lanes read);
    /// `k` holds `R` rows of `d` values `ks` apart; `st` points at `R` rows `Q_BLOCK` apart of
    /// `NV · 16` writable lanes; `mx` at `NV · 16` values.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn qk<const NV: usize, const R: usize>(
        qt: *const f32,
        d: usize,
        k: *const f32,
        ks: usize,
        st: *mut f32,
        scale: f32,
        mx: *mut f32,
    ) {
        let mut a = [[_mm512_setzero_ps(); NV]; R];
        let kp: [*const f32; R] = std::array::from_fn(|r| k.wrapping_add(r * ks));
        for c in 0..d {
            // SAFETY: c < d rows of qt with NV·16 lanes; key row r < R has d values.
            unsafe {
                let q: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(qt.add(c * Q_BLOCK + v * LANES)));
                for (ar, &kr) in a.iter_mut().zip(&kp) {
                    let x = _mm512_set1_ps(*kr.add(c));
                    for (acc, &qv) in ar.iter_mut().zip(&q) {
                        *acc = _mm512_fmadd_ps(x, qv, *acc);
                    }
                }
            }
        }
        let sc = _mm512_set1_ps(scale);
        // SAFETY: mx holds NV·16 values; row r < R of st has NV·16 writable lanes (the contract).
        unsafe {
            let mut m: [__m512; NV] = std::array::from_fn(|v| _mm512_loadu_ps(mx.add(v * LANES)));
            for (r, ar) in a.iter().enumerate() {
                for (v, (&acc, mv)) in ar.iter().zip(m.iter_mut()).enumerate() {
                    let s = _mm512_mul_ps(acc, sc);
                    *mv = _mm512_max_ps(*mv, s);
                    _mm512_storeu_ps(st.add(r * Q_BLOCK + v * LANES), s);
                }
            }
            for (v, &mv) in m.iter().enumerate() {
                _mm512_storeu_ps(mx.add(v * LANES), mv);
            }
        }
    }

    /// [`qk`] over 16 query lanes.
    ///
    /// # Safety
    /// As [`qk`] with `NV = 1`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn qk1<const R: usize>(
        qt: *const f32,
        d: usize,
        k: *const f32,
        ks: usize,
        st: *mut f32,
        scale: f32,
        mx: *mut f32,
    ) {
        // SAFETY: forwarded contract.
        unsafe { qk::<1, R>(qt, d, k, ks, st, scale, mx) }
    }

    /// [`qk`] over 32 query lanes.
    ///
    /// # Safety
    /// As [`qk`] with `NV = 2`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn qk2<const R: usize>(
        qt: *const f32,
        d: usize,
        k: *const f32,
        ks: usize,
        st: *mut f32,
        scale: f32,
        mx: *mut f32,
    ) {
        // SAFETY: forwarded contract.
        unsafe { qk::<2, R>(qt, d, k, ks, st, scale, mx) }
    }

    /// `accᵀ[c][·] = α·accᵀ[c][·] + Σ_{j<nk} pᵀ[j][·]·v_j[c]` for `R` value columns and `NV`
    /// vectors of query lanes (no `α` term when `first`).
    ///
    /// # Safety
    /// AVX-512F; `p` points at `nk` rows `Q_BLOCK` apart of `NV · 16` lanes; `v` holds `nk` rows
    /// `vs` apart with `R` values each; `acc` points at `R` rows `Q_BLOCK` apart of `NV · 16`
    /// lanes; `alpha` holds `NV · 16` values.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn pv<const NV: usize, const R: usize>(
        p: *const f32,
        nk: usize,
        v: *const f32,
        vs: usize,
        acc: *mut f32,
        alpha: *const f32,
        first: bool,
    ) {
        let mut a = [[_mm512_setzero_ps(); NV]; R];
        if !first {
            // SAFETY: NV·16 alpha values; rows r < R of acc have NV·16 lanes (the contract).
            unsafe {
                let al: [__m512; NV] = std::array::from_fn(|x| _mm512_loadu_ps(alpha.add(x * LANES)));
                for (r, ar) in a.iter_mut().enumerate() {
                    for (x, (acc_v, &alv)) in ar.iter_mut().zip(&al).enumerate() {
                        *acc_v = _mm512_mul_ps(_mm512_loadu_ps(acc.add(r * Q_BLOCK + x * LANES)), alv);
                    }
                }
            }
        }
        for j in 0..nk {
            // SAFETY: row j < nk of p has NV·16 lanes; row j of v has R values (the contract).
            unsafe {
                let pj: [__m512; NV] = std::array::from_fn(|x| _mm512_loadu_ps(p.add(j * Q_BLOCK + x * LANES)));
                let vr = v.add(j * vs);
                for (r, ar) in a.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*vr.add(r));
                    for (acc_v, &pv) in ar.iter_mut().zip(&pj) {
                        *acc_v = _mm512_fmadd_ps(x, pv, *acc_v);
                    }
                }
            }
        }
        for (r, ar) in a.iter().enumerate() {
            for (x, &acc_v) in ar.iter().enumerate() {
                // SAFETY: as for the loads of acc.
                unsafe { _mm512_storeu_ps(acc.add(r * Q_BLOCK + x * LANES), acc_v) };
            }
        }
    }

    /// [`pv`] over 16 query lanes.
    ///
    /// # Safety
    /// As [`pv`] with `NV = 1`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pv1<const R: usize>(
        p: *const f32,
        nk: usize,
        v: *const f32,
        vs: usize,
        acc: *mut f32,
        alpha: *const f32,
        first: bool,
    ) {
        // SAFETY: forwarded contract.
        unsafe { pv::<1, R>(p, nk, v, vs, acc, alpha, first) }
    }

    /// [`pv`] over 32 query lanes.
    ///
    /// # Safety
    /// As [`pv`] with `NV = 2`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pv2<const R: usize>(
        p: *const f32,
        nk: usize,
        v: *const f32,
        vs: usize,
        acc: *mut f32,
        alpha: *const f32,
        first: bool,
    ) {
        // SAFETY: forwarded contract.
        unsafe { pv::<2, R>(p, nk, v, vs, acc, alpha, first) }
    }

    online_softmax!("avx512f", avx512);
}
