//! Tiled (flash-attention style) scaled dot-product attention in f32.
//!
//! Work is split into (batch, head, block of [`Q_BLOCK`] queries) items. An item packs its query
//! block transposed (`qᵀ`, `head_dim × Q_BLOCK`) and walks the keys in tiles of up to
//! [`K_BLOCK`] (sequences up to `K_BLOCK` keys are one tile: an exact softmax, no rescaling).
//! Scores are kept transposed, one row of `Q_BLOCK` query lanes per key, so that the softmax is
//! vertical (8 query rows per vector) and neither K nor V is packed into panels: the `Q·Kᵀ`
//! micro-kernel broadcasts key values straight from the key rows, the `P·V` one value entries
//! straight from the value rows, both against vectors of 16 query lanes (strided rows are first
//! copied contiguously, see `Scratch::kv`, and from 2 MiB of operands prefetched an item or a
//! head ahead, see `prefetch`).
//!
//! Per tile: `sᵀ = scale·k·qᵀ + bias + additive mask` (excluded keys = −∞), then the
//! online-softmax update per query lane (running max `m`, running sum `l`, unnormalised output
//! `accᵀ`, `v_dim × Q_BLOCK`): `m' = max(m, max_j s_j)`, `α = e^(m − m')`,
//! `l' = α·l + Σ e^(s_j − m')`, `acc' = α·acc + Σ e^(s_j − m')·v_j`. The output row is `acc/l`,
//! or 0 when every key was excluded or scored −∞ (fully masked rows), and padded query rows
//! (≥ query_seq_len) stay 0. Extra memory per thread: `Q_BLOCK·(head_dim + v_dim + K_BLOCK + 3)`
//! floats, plus `kv_len·(head_dim + v_dim)` when the key and value rows are strided (BSHD: they
//! are copied contiguously once per batch and kv head); the `[S, S]` score matrix is never
//! built. Causal attention stops each query block at its last visible key. Key-only masks
//! (`[B, 1, 1, Skv]`, `[B, H, 1, Skv]`) skip the per-score mask pass: a Bool one with few runs
//! of kept keys by walking those runs, an additive one on AVX2 by being added in the `Q·Kᵀ`
//! micro-kernel. A mask that varies along the query axis (GPT-2's export combines its causal
//! and padding masks into one `[B, 1, S, S]` tensor) is scanned per query block: keys hidden
//! from every row of the block are skipped, keys neutral to every row need no per-score pass,
//! and each row's hidden keys become −∞; a row of an additive mask that then sees no key
//! (every one hidden from it) has its block recomputed with the mask added to every score, so
//! the result is the unfused graph's.
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
use tile::{mask_rows, mask_tile, pv, scores, softmax_tile};

/// Query rows per work item (two halves of `QH` lanes).
pub const Q_BLOCK: usize = 32;
/// Keys per tile.
pub const K_BLOCK: usize = 128;
/// Operand bytes (q, k and v together) from which BSHD rows are prefetched (see `prefetch`).
const PREFETCH_BYTES: usize = 2 << 20;
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
    /// BSHD only: the element distance between consecutive positions of q, k and v, when they
    /// are column blocks of wider rows (e.g. one `[B·S, 3·H·D]` projection whose q, k and v
    /// start at offsets 0, H·D, 2·H·D of the slices passed); `None`: contiguous (`heads·head_dim`,
    /// `kv_heads·head_dim`, `kv_heads·v_dim`). Ignored for BHSD. The output is always contiguous.
    pub qkv_row_strides: Option<[usize; 3]>,
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

    /// [`Self::off`] in operand `t` (0: q, 1: k, 2: v), which may have wider rows
    /// ([`AttentionParams::qkv_row_strides`]).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn off_in(&self, t: usize, nh: usize, ns: usize, w: usize, b: usize, h: usize, s: usize) -> usize {
        match (self.layout, self.qkv_row_strides) {
            (AttentionLayout::Bshd, Some(r)) => (b * ns + s) * r[t] + h * w,
            _ => self.off(nh, ns, w, b, h, s),
        }
    }

    /// [`Self::pos_stride`] in operand `t` (as [`Self::off_in`]).
    #[inline]
    fn pos_stride_in(&self, t: usize, nh: usize, w: usize) -> usize {
        match (self.layout, self.qkv_row_strides) {
            (AttentionLayout::Bshd, Some(r)) => r[t],
            _ => self.pos_stride(nh, w),
        }
    }

    /// The elements operand `t` must hold: one past its last addressed element (0 if empty).
    fn extent_in(&self, t: usize, nb: usize, nh: usize, ns: usize, w: usize) -> usize {
        if nb == 0 || nh == 0 || ns == 0 || w == 0 {
            return 0;
        }
        self.off_in(t, nh, ns, w, nb - 1, nh - 1, ns - 1) + w
    }

    /// Whether row strides given for q, k, v hold their rows without overlap.
    fn strides_fit(&self) -> bool {
        match (self.layout, self.qkv_row_strides) {
            (AttentionLayout::Bshd, Some([rq, rk, rv])) => {
                rq >= self.heads * self.head_dim
                    && rk >= self.kv_heads * self.head_dim
                    && rv >= self.kv_heads * self.v_dim
            }
            _ => true,
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
    /// The additive key-only mask values of the tile, when the AVX2 `Q·Kᵀ` micro-kernel adds
    /// them (see `key_add`).
    kadd: [f32; K_BLOCK],
    /// Per query row of the block: keys before `lo` neutral, from `hi` on hidden (see
    /// `mask_extent`).
    lo: [usize; Q_BLOCK],
    /// See `lo`.
    hi: [usize; Q_BLOCK],
    /// The query block transposed, `head_dim × Q_BLOCK` (lanes past the block zero).
    qt: crate::kernels::gemm::Scratch,
    /// Scores, then probabilities, of the tile transposed: `K_BLOCK × Q_BLOCK`.
    st: crate::kernels::gemm::Scratch,
    /// Unnormalised output transposed, `v_dim × Q_BLOCK`.
    acc: crate::kernels::gemm::Scratch,
    /// The key and value rows of one (batch, kv head) copied contiguously (row strides
    /// `head_dim` and `v_dim`: `kv_len·head_dim` key values, then `kv_len·v_dim` value values)
    /// when their positions are further apart (BSHD): strides that are multiples of 512 bytes
    /// put the rows of a tile in a few L1 sets, which then reloads them from L2 on every pass.
    kv: crate::kernels::gemm::Scratch,
    /// `(batch, kv head, whether its first kv_len value rows are all finite)` of the last check
    /// (and of the rows in `kv` when copied).
    v_finite: Option<(usize, usize, bool)>,
    /// `(offset, keys, whether they are all 0)` of the last key-only additive mask row checked
    /// (see `key_add`): the heads and query blocks of a batch element share it.
    kadd_zero: Option<(usize, usize, bool)>,
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
    if !p.strides_fit()
        || q.len() < p.extent_in(0, nb, nh, sq, d)
        || k.len() < p.extent_in(1, nb, nkv, skv, d)
        || v.len() < p.extent_in(2, nb, nkv, skv, vd)
    {
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
    // The three buffers come from the GEMM's per-thread pool (no allocation once warm), zeroed
    // once per worker as fresh vectors would be.
    let new_scratch = || {
        let buf = |len: usize| {
            let mut b = crate::kernels::gemm::Scratch::new();
            b.get(len).fill(0.0);
            b
        };
        Scratch {
            m: [0.0; Q_BLOCK],
            l: [0.0; Q_BLOCK],
            alpha: [0.0; Q_BLOCK],
            tmax: [f32::NEG_INFINITY; Q_BLOCK],
            kadd: [0.0; K_BLOCK],
            lo: [0; Q_BLOCK],
            hi: [0; Q_BLOCK],
            qt: buf(d * Q_BLOCK),
            st: buf(K_BLOCK * Q_BLOCK),
            acc: buf(vd * Q_BLOCK),
            kv: crate::kernels::gemm::Scratch::new(),
            v_finite: None,
            kadd_zero: None,
        }
    };
    // BSHD operands larger than an L2 (the products they come from have evicted their first
    // rows) are prefetched ahead of the items that read them.
    let far = p.layout == AttentionLayout::Bshd && (q.len() + k.len() + v.len()) * 4 >= PREFETCH_BYTES;
    let run = |s: &mut Scratch, it: usize| {
        let (bh, qb) = (it / qblocks, it % qblocks);
        let (b, h) = (bh / nh, bh % nh);
        if far {
            prefetch(p, q, k, v, it, qblocks);
        }
        item(isa, p, q, k, v, outp, s, b, h, qb);
    };
    let work = full.saturating_mul(d + vd);
    match pool {
        Some(pl) if pl.current_num_threads() > 1 && items > 1 && work >= 1 << 16 => {
            // Runs of at least a quarter of a thread's share: each run starts a scratch (its K/V
            // copy included) and its items come in order (the prefetches read ahead in it).
            // Split down to single items, MiniLM's attention at 32 × 128 on two Zen 5 cores took
            // 2.97–3.17 ms per layer, 2.50–2.56 so (8 × 384: 5.02–5.13 → 4.75–4.98).
            let min = items.div_ceil(pl.current_num_threads() * 4);
            pl.install(|| (0..items).into_par_iter().with_min_len(min).for_each_init(new_scratch, run));
        }
        _ => {
            let mut s = new_scratch();
            (0..items).for_each(|it| run(&mut s, it));
        }
    }
    true
}

/// Copies rows of `w` values `stride` apart in `src` into `dst` contiguously (as many rows as
/// `dst` holds). Head widths of 32 and 64 copy by fixed-size moves (a call to `memcpy` per
/// 128-byte row cost more than the copy).
fn copy_rows(dst: &mut [f32], src: &[f32], stride: usize, w: usize) {
    fn fixed<const W: usize>(dst: &mut [f32], src: &[f32], stride: usize) {
        for (j, row) in dst.chunks_exact_mut(W).enumerate() {
            let s: &[f32; W] = src[j * stride..j * stride + W].try_into().expect("W values");
            let d: &mut [f32; W] = row.try_into().expect("W values");
            *d = *s;
        }
    }
    match w {
        0 => {}
        32 => fixed::<32>(dst, src, stride),
        64 => fixed::<64>(dst, src, stride),
        _ => {
            for (j, row) in dst.chunks_exact_mut(w).enumerate() {
                row.copy_from_slice(&src[j * stride..j * stride + w]);
            }
        }
    }
}

/// Prefetches (into L2) from BSHD operands (strided by position) what the work items after
/// `it` (the next ones of the calling worker, usually) read first: the next item's query rows,
/// and share `qb` of `qblocks` of the key and value rows of the next (batch, head), which its
/// first item copies contiguously. The rows of one head are 64–256 bytes a few KiB apart in the
/// projection that produced them, usually no longer in L2: fetched on demand by the copies,
/// they cost a quarter of the attention time at head_dim 32 (MiniLM, batch 8 × 128).
fn prefetch(p: &AttentionParams<'_>, q: &[f32], k: &[f32], v: &[f32], it: usize, qblocks: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let (nh, nkv, sq, skv, d, vd) = (p.heads, p.kv_heads, p.seq_q, p.seq_kv, p.head_dim, p.v_dim);
        let (nb, group) = (p.batch, nh / nkv);
        let lens = |b: usize| p.seq_lens.map_or((sq, skv), |l| (l[b].0.min(sq), l[b].1.min(skv)));
        let fetch = |t: usize,
                     x: &[f32],
                     nhx: usize,
                     ns: usize,
                     w: usize,
                     (b, hx): (usize, usize),
                     r: std::ops::Range<usize>| {
            for i in r {
                let row = x.as_ptr().wrapping_add(p.off_in(t, nhx, ns, w, b, hx, i));
                for o in (0..w).step_by(16) {
                    // SAFETY: prefetch is a hint that never faults.
                    unsafe {
                        use std::arch::x86_64::{_MM_HINT_T1, _mm_prefetch};
                        _mm_prefetch::<_MM_HINT_T1>(row.wrapping_add(o).cast::<i8>());
                    }
                }
            }
        };
        let (bh, qb) = (it / qblocks, it % qblocks);
        let next = it + 1;
        if next < nb * nh * qblocks {
            let (nbh, nqb) = (next / qblocks, next % qblocks);
            let (b, h) = (nbh / nh, nbh % nh);
            let i0 = (nqb * Q_BLOCK).min(lens(b).0);
            fetch(0, q, nh, sq, d, (b, h), i0..(i0 + Q_BLOCK).min(lens(b).0));
        }
        let (b, h) = (bh / nh, bh % nh);
        let (b2, h2) = ((bh + 1) / nh, (bh + 1) % nh);
        if b2 < nb && (b2, h2 / group) != (b, h / group) {
            let kv_len = lens(b2).1;
            let share = |x: usize| x * kv_len / qblocks;
            fetch(1, k, nkv, skv, d, (b2, h2 / group), share(qb)..share(qb + 1));
            fetch(2, v, nkv, skv, vd, (b2, h2 / group), share(qb)..share(qb + 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, q, k, v, it, qblocks);
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
    let (qt, st, acc) = (s.qt.get(d * Q_BLOCK), s.st.get(K_BLOCK * Q_BLOCK), s.acc.get(vd * Q_BLOCK));
    pack_qt(isa, p, q, b, h, i0, rows, lanes, qt);
    s.m[..lanes].fill(f32::NEG_INFINITY);
    s.l[..lanes].fill(0.0);
    let (ks0, vs0) = (p.pos_stride_in(1, nkv, d), p.pos_stride_in(2, nkv, vd));
    let kbase0 = p.off_in(1, nkv, skv, d, b, hk, 0);
    let vbase0 = p.off_in(2, nkv, skv, vd, b, hk, 0);
    // Strided rows are copied once per (batch, kv head), for every query block and query head
    // using them (the items of one worker come in that order).
    let copy = ks0 != d || vs0 != vd;
    let kvl = if copy { kv_len * (d + vd) } else { 0 };
    let kv = s.kv.get(kvl);
    let cached = matches!(s.v_finite, Some((cb, ch, _)) if cb == b && ch == hk);
    if copy && !cached {
        let (kc, vc) = kv.split_at_mut(kv_len * d);
        copy_rows(&mut kc[..kv_len * d], &k[kbase0..], ks0, d);
        copy_rows(&mut vc[..kv_len * vd], &v[vbase0..], vs0, vd);
    }
    let (k, ks, kbase, v, vs, vbase) = if copy {
        let (kc, vc) = kv.split_at(kv_len * d);
        (kc, d, 0, vc, vd, 0)
    } else {
        (k, ks0, kbase0, v, vs0, vbase0)
    };
    let v_finite = match s.v_finite {
        Some((cb, ch, f)) if cb == b && ch == hk => f,
        _ => {
            let f = rows_finite(isa, &v[vbase..vbase + (kv_len - 1) * vs + vd], kv_len, vs, vd);
            s.v_finite = Some((b, hk, f));
            f
        }
    };
    // A key-only Bool mask (the padding mask) with few runs of kept keys is applied by walking
    // only those runs: no per-score masking, and the tile maxima of the micro-kernels stay valid.
    let mut spans = [(0, kend); MAX_RUNS];
    // `causal_only`: the per-score masking left is the causal one alone.
    let (nspans, masked, causal_only) = match key_runs(p, b, h, kend, &mut spans) {
        Some(n) => (n, p.causal, true),
        None => {
            spans[0] = (0, kend);
            (1, p.masked(), matches!(p.mask, AttentionMask::None) && p.bias.is_none())
        }
    };
    if nspans == 0 {
        zero_rows(p, b, h, i0..i1, out); // every key excluded
        return;
    }
    // An additive key-only mask (the exporters' `[B, 1, 1, Skv]` padding mask) is added by the
    // AVX2 or AVX-512 `Q·Kᵀ` micro-kernel, before it takes the tile maxima; a row of zeros (no
    // key padded) adds nothing and is skipped (a score of −0 would become +0, which weighs the
    // same). The row is checked once for all the heads and query blocks that share it.
    let kadd = if masked { key_add(isa, p, b, h) } else { None };
    let masked = masked && kadd.is_none();
    let kadd = kadd.filter(|&(m, base, s3)| {
        let zero = match s.kadd_zero {
            Some((at, n, z)) if at == base && n == kend => z,
            _ => {
                let z = (0..kend).all(|j| m[base + j * s3] == 0.0);
                s.kadd_zero = Some((base, kend, z));
                z
            }
        };
        !zero
    });
    // A mask varying along the query axis is applied from each row's extents: keys before a
    // row's `lo` are neutral to it, from its `hi` on hidden (−∞), and keys hidden from every row
    // of the block (from `hid`) are skipped. Keys below `vis` need no per-score pass.
    let ext = if masked { mask_extent(p, b, h, i0, rows, kend, &mut s.lo, &mut s.hi) } else { None };
    let (vis, hid) = match ext {
        _ if !masked => (usize::MAX, kend),
        Some(e) => e,
        None if causal_only => (i0 + 1, kend),
        None => (0, kend),
    };
    if hid < kend {
        spans[0] = (0, hid);
    }
    let all_keys = [(0, kend)];
    // Pass 1 is exact for every row that sees a score above `SEEN` (a hidden additive key then
    // weighs e^(s + a − m) = 0); if a row of an additive mask sees none (every key hidden from
    // it), pass 2 recomputes the block adding the mask itself to every score, as the unfused
    // graph weighs those keys.
    let mut first = true;
    for exact in [false, true] {
        if exact {
            let additive = matches!(p.mask, AttentionMask::Additive(..));
            if ext.is_none() || !additive || !s.m[..rows].iter().any(|&m| m <= SEEN) {
                break;
            }
            s.m[..lanes].fill(f32::NEG_INFINITY);
            s.l[..lanes].fill(0.0);
            first = true;
        }
        let list = if exact { &all_keys[..] } else { &spans[..nspans] };
        for &(r0, r1) in list {
            let mut j0 = r0;
            while j0 < r1 {
                let j1 = (j0 + K_BLOCK).min(r1);
                let nk = j1 - j0;
                let kt = &k[kbase + j0 * ks..kbase + (j1 - 1) * ks + d];
                // The tile's mask values: read in place when contiguous, else gathered.
                let ka = kadd.map(|(m, base, s3)| {
                    if s3 == 1 {
                        &m[base + j0..base + j1]
                    } else {
                        for (j, a) in s.kadd[..nk].iter_mut().enumerate() {
                            *a = m[base + (j0 + j) * s3];
                        }
                        &s.kadd[..nk]
                    }
                });
                scores(isa, qt, d, kt, ks, nk, lanes, p.scale, ka, st, &mut s.tmax);
                // A tile whose keys are all neutral (e.g. with causal masking alone, keys at or
                // before the block's first query) needs no per-score pass, and the tile maxima
                // stay valid.
                let tmax = if masked && j1 > vis {
                    if ext.is_some() && !exact {
                        mask_rows(p, b, h, i0, rows, j0, nk, &s.lo, &s.hi, st);
                    } else {
                        mask_tile(p, b, h, i0, rows, j0, vis.saturating_sub(j0), nk, st);
                    }
                    None
                } else {
                    Some(&s.tmax)
                };
                softmax_tile(isa, st, nk, lanes, tmax, &mut s.m, &mut s.l, &mut s.alpha);
                let vt = &v[vbase + j0 * vs..vbase + (j1 - 1) * vs + vd];
                pv(isa, st, nk, vt, vs, vd, lanes, &s.alpha, first, v_finite, acc);
                first = false;
                j0 = j1;
            }
        }
    }
    if first {
        zero_rows(p, b, h, i0..i1, out); // every key hidden from every row (Bool mask)
        return;
    }
    store_out(isa, p, b, h, i0, rows, &s.m, &s.l, acc, out);
}

/// On the AVX2 and AVX-512 paths, for an additive mask that does not vary along the query axis,
/// without causal masking or bias: the mask, the offset of head (b, h)'s values and the key
/// stride.
fn key_add<'a>(isa: FusedIsa, p: &AttentionParams<'a>, b: usize, h: usize) -> Option<(&'a [f32], usize, usize)> {
    match p.mask {
        AttentionMask::Additive(m, sm)
            if matches!(isa, FusedIsa::Avx2 | FusedIsa::Avx512) && sm[2] == 0 && !p.causal && p.bias.is_none() =>
        {
            Some((m, b * sm[0] + h * sm[1], sm[3]))
        }
        _ => None,
    }
}

/// Additive mask values at or below this hide a key (`−∞` in the first pass, see `item`:
/// `e^(s + a − m)` is 0 in f32 for any score `|s| < 9·10²⁹` once the row's maximum `m` is
/// above [`SEEN`]).
const HIDDEN: f32 = -1e30;
/// See [`HIDDEN`].
const SEEN: f32 = -1e29;

/// For a mask that varies along the query axis (e.g. a causal and a padding mask combined into
/// one `[B, 1, Sq, Skv]` tensor) and no bias: the extents of query rows `i0..i0 + rows` of head
/// (b, h) over keys `0..kend`, `lo[r]` (keys before it neutral to row r: Bool true or additive
/// 0) and `hi[r]` (keys from it on hidden from row r: Bool false, additive ≤ [`HIDDEN`], or
/// causally hidden), and `(vis, hid)`: the least `lo` and the greatest `hi`. `None` for other
/// masks or with a bias. Reads at most `rows · kend` mask values, 16 at a time on contiguous
/// rows.
#[allow(clippy::too_many_arguments)]
fn mask_extent(
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    i0: usize,
    rows: usize,
    kend: usize,
    lo: &mut [usize; Q_BLOCK],
    hi: &mut [usize; Q_BLOCK],
) -> Option<(usize, usize)> {
    if p.bias.is_some() {
        return None;
    }
    #[allow(clippy::too_many_arguments)]
    fn scan<T: Copy>(
        m: &[T],
        sm: [usize; 4],
        p: &AttentionParams<'_>,
        (b, h, i0, rows, kend): (usize, usize, usize, usize, usize),
        lo: &mut [usize; Q_BLOCK],
        hi: &mut [usize; Q_BLOCK],
        neutral: impl Fn(T) -> bool,
        hidden: impl Fn(T) -> bool,
    ) -> Option<(usize, usize)> {
        if sm[2] == 0 {
            return None;
        }
        let (mut vis, mut hid) = (kend, 0);
        for r in 0..rows {
            let base = b * sm[0] + h * sm[1] + (i0 + r) * sm[2];
            let lim = if p.causal { kend.min(i0 + r + 1) } else { kend };
            let (mut h1, mut l0) = (lim, 0);
            let at = |j: usize| m[base + j * sm[3]];
            // Contiguous rows go 16 keys at a time first, by a branch-free fold (vectorised);
            // the last keys one by one.
            let row = (sm[3] == 1).then(|| &m[base..base + lim]);
            let all = |xs: &[T], f: &dyn Fn(T) -> bool| xs.iter().fold(true, |a, &x| a & f(x));
            if let Some(row) = row {
                while h1 >= 16 && all(&row[h1 - 16..h1], &hidden) {
                    h1 -= 16;
                }
            }
            while h1 > 0 && hidden(at(h1 - 1)) {
                h1 -= 1;
            }
            if let Some(row) = row {
                while l0 + 16 <= h1 && all(&row[l0..l0 + 16], &neutral) {
                    l0 += 16;
                }
            }
            while l0 < h1 && neutral(at(l0)) {
                l0 += 1;
            }
            (lo[r], hi[r]) = (l0, h1);
            hid = hid.max(h1);
            vis = vis.min(l0);
        }
        Some((vis.min(hid), hid))
    }
    let args = (b, h, i0, rows, kend);
    match p.mask {
        AttentionMask::Bool(m, sm) => scan(m, sm, p, args, lo, hi, |x| x, |x| !x),
        AttentionMask::Additive(m, sm) => scan(m, sm, p, args, lo, hi, |x| x == 0.0, |x| x <= HIDDEN),
        AttentionMask::None => None,
    }
}

/// Most runs of kept keys a key-only Bool mask may have to be applied by skipping the
/// excluded keys (more fragmented masks are applied per score).
const MAX_RUNS: usize = 8;

/// For a Bool mask that does not vary along the query axis and no bias: the runs of kept keys
/// of head (b, h) below `kend`, written to `spans`, and their count (0: every key excluded);
/// `None` for any other mask or bias, or more than [`MAX_RUNS`] runs.
fn key_runs(
    p: &AttentionParams<'_>,
    b: usize,
    h: usize,
    kend: usize,
    spans: &mut [(usize, usize); MAX_RUNS],
) -> Option<usize> {
    let AttentionMask::Bool(m, sm) = p.mask else { return None };
    if sm[2] != 0 || p.bias.is_some() {
        return None;
    }
    let base = b * sm[0] + h * sm[1];
    let kept = |j: usize| m[base + j * sm[3]];
    let (mut n, mut j) = (0, 0);
    while j < kend {
        if !kept(j) {
            j += 1;
            continue;
        }
        let start = j;
        while j < kend && kept(j) {
            j += 1;
        }
        if n == MAX_RUNS {
            return None;
        }
        spans[n] = (start, j);
        n += 1;
    }
    Some(n)
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
        let qo = p.off_in(0, nh, sq, d, b, h, i0 + r);
        &q[qo..qo + d]
    };
    // Rows 0..r0 go through the AVX2 path (x86-64 only), the rest through the loop below.
    #[cfg(target_arch = "x86_64")]
    let mut r0 = 0;
    #[cfg(not(target_arch = "x86_64"))]
    let r0 = 0;
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
    // Rows 0..r0 go through the AVX2 path (x86-64 only), the rest through the loop below.
    #[cfg(target_arch = "x86_64")]
    let mut r0 = 0;
    #[cfg(not(target_arch = "x86_64"))]
    let r0 = 0;
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
            use crate::kernels::fused::vmath::$isa::{LANES, exp_nonpos, exp2_nonpos, ops::*};
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
                // The shift and the change to base 2 in one multiply-add, `s·log₂e − μ·log₂e`,
                // unless a maximum is so large (an additive mask's −3.4e38 on every key) that
                // `μ·log₂e` would overflow: then `(s − μ)·log₂e`. (MiniLM at 8 × 384 on one Zen 5
                // core, `perf`: this function 2.85% of the samples with `exp`'s Cody–Waite
                // reduction, 2.35% with the subtraction and product apart, 1.72% in one.)
                let mut mus = [0f32; LANES];
                store(mus.as_mut_ptr(), mu);
                let huge = mus.iter().any(|u| u.abs() >= 1e38);
                let (l2e, mu2) = (splat(std::f32::consts::LOG2_E), mul(mu, splat(std::f32::consts::LOG2_E)));
                for j in 0..nk {
                    let s = load(st.add(j * Q_BLOCK));
                    let e = exp2_nonpos(if huge { mul(sub(s, mu), l2e) } else { fmsub(s, l2e, mu2) });
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

// The ISA modules and the tile steps use the macros above, so they are declared after them.
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod tile;
