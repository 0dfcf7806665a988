//! Pooling kernels: f32 ReduceWindow (Max, Min, Sum) and SelectAndScatter (Max, Min, the max-pool
//! gradient) for windows that span at most two axes, bit-identical to the reference kernels.
//!
//! The operand is viewed as `[outer, H, mid, W, inner]`: `H` and `W` are the (at most two)
//! windowed axes, every other axis has window 1, stride 1 and no padding. NCHW pooling is
//! `[N·C, H, 1, W, 1]`, NHWC `[N, H, 1, W, C]`, 1-D pooling has `H = 1`. Input dilation must be 1;
//! window dilation, strides, low/high padding (padding cells are skipped: they hold the
//! reduction's identity), windows larger than the operand and empty axes are all taken.
//!
//! ReduceWindow writes each output row straight into the result, in the reference's order: the
//! accumulator starts at the identity and takes the window's in-bounds cells row by row (`kh`
//! outer, `kw` inner), so Max/Min (IEEE with NaN propagation: the first NaN in window order wins,
//! `max(−0, +0) = +0`) and Sum (same summation order) are bit-identical to the reference (for Sum,
//! up to which NaN payload survives `NaN + NaN`). On the NCHW band path Max and Min fold each
//! window row first and then the rows in order, which gives the same bits (the first NaN in
//! window order is the first NaN of the first row that has one; ties of ±0 come out equal either
//! way); each input row's fold is kept for the next output rows of the task that read it.
//! With `inner = 1` (NCHW) the loops run along the output columns: for every window column `kw`
//! the output columns whose cell is inside the row form one range, read contiguously from the
//! input row (stride 1) or from its stride phases (the row de-interleaved once per use into
//! `stride` contiguous phases, so stride 2 reads two half-rows). With `inner > 1` (NHWC) the loops
//! run along `inner` (Max on AVX-512 with a multiple of 16 channels folds each output pixel's
//! window in registers instead: `max_nhwc_avx512`). Both bodies are compiled for AVX-512F and
//! AVX2 (the select-based Max/Min vectorise there) and split `outer × H_out` rows over the
//! caller's pool.
//!
//! SelectAndScatter follows XLA's rule (scan the in-bounds cells in window order, keep the first,
//! switch to cell `e` unless `kept ≥ e` for Max / `kept ≤ e` for Min: ties keep the first, NaN
//! compares false both ways) and adds each source value to the selected element in source order;
//! tasks own whole `outer` planes, so no two write the same element.

use crate::error::{Error, Result};
use crate::kernels::conv::split_pairs;
use crate::kernels::fused::{FusedIsa, for_units};

/// The reduction of a pooling kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Maximum (identity −∞; SelectAndScatter: select the maximum).
    Max,
    /// Minimum (identity +∞; SelectAndScatter: select the minimum).
    Min,
    /// Sum (identity +0; ReduceWindow only).
    Sum,
}

impl PoolKind {
    /// `max`, `min` or `sum`.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Max => "max",
            PoolKind::Min => "min",
            PoolKind::Sum => "sum",
        }
    }
}

/// The operand viewed as `[outer, H, mid, W, inner]` with its window on `H` and `W` (`[0]` is
/// `H`, `[1]` is `W`); the result of a ReduceWindow is `[outer, out_hw[0], mid, out_hw[1], inner]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolGeom {
    /// Product of the axes before `H`.
    pub outer: usize,
    /// Product of the axes between `H` and `W`.
    pub mid: usize,
    /// Product of the axes after `W`.
    pub inner: usize,
    /// Operand extents of `H` and `W`.
    pub in_hw: [usize; 2],
    /// Result extents (number of windows) of `H` and `W`.
    pub out_hw: [usize; 2],
    /// Window extents (before dilation; 0 allowed: empty windows).
    pub window: [usize; 2],
    /// Window strides (≥ 1).
    pub stride: [usize; 2],
    /// Window dilations (≥ 1).
    pub dilation: [usize; 2],
    /// Low padding (the high padding only sets `out_hw`).
    pub pad: [usize; 2],
}

impl PoolGeom {
    /// Operand elements.
    pub fn in_len(&self) -> Option<usize> {
        [self.in_hw[0], self.mid, self.in_hw[1], self.inner].iter().try_fold(self.outer, |a, &d| a.checked_mul(d))
    }

    /// Result (ReduceWindow) / source (SelectAndScatter) elements.
    pub fn out_len(&self) -> Option<usize> {
        [self.out_hw[0], self.mid, self.out_hw[1], self.inner].iter().try_fold(self.outer, |a, &d| a.checked_mul(d))
    }

    /// Checks strides and dilations are ≥ 1 and every window position computation fits in i64
    /// (the kernels' index arithmetic relies on it).
    pub fn validate(&self, op: &str) -> Result<()> {
        const LIMIT: usize = (i64::MAX / 4) as usize;
        if self.stride.contains(&0) || self.dilation.contains(&0) {
            return Err(Error::invalid(
                op,
                format!("strides {:?} and dilations {:?} must be ≥ 1", self.stride, self.dilation),
            ));
        }
        for a in 0..2 {
            // The last window's start plus its dilated extent, and the padded operand end.
            let reach = self.out_hw[a]
                .checked_mul(self.stride[a])
                .and_then(|v| v.checked_add(self.window[a].checked_mul(self.dilation[a])?))
                .and_then(|v| v.checked_add(self.pad[a])?.checked_add(self.in_hw[a]));
            if reach.is_none_or(|r| r > LIMIT) {
                return Err(Error::invalid(op, format!("window geometry {self:?} overflows")));
            }
        }
        if self.in_len().is_none() || self.out_len().is_none() {
            return Err(Error::invalid(op, format!("window geometry {self:?} overflows")));
        }
        Ok(())
    }

    /// For the banded NCHW path (`inner = 1`): the padded row slot (the `span` padded positions
    /// an output row reads for whole [`BLOCK`]s of columns, rounded up to whole strides) and the
    /// most operand rows one output
    /// row reads; None where the window is empty or the rows would take more than 4 MiB.
    fn band(&self) -> Option<(usize, usize)> {
        if self.inner != 1 || self.window[1] == 0 || self.out_hw[1] == 0 {
            return None;
        }
        // No overflow: `validate` bounds both terms.
        // Whole blocks of output columns: the last block reads identity cells past the row.
        let ow = self.out_hw[1].next_multiple_of(BLOCK);
        let span = (ow - 1) * self.stride[1] + (self.window[1] - 1) * self.dilation[1] + 1;
        let slot = span.div_ceil(self.stride[1]) * self.stride[1];
        let rows = self.window[0].min(self.in_hw[0]);
        (slot.saturating_mul(rows + 1) <= 1 << 20).then_some((slot, rows))
    }

    /// The window cells `k` (a range) of output index `o` on axis `a` that land on operand
    /// elements; cell `k` reads element `o·stride − pad + k·dilation`.
    fn cells(&self, a: usize, o: usize) -> (usize, usize) {
        // In i64 without overflow: `validate` bounds every term by i64::MAX / 4.
        let (n, d) = (self.in_hw[a] as i64, self.dilation[a] as i64);
        let start = o as i64 * self.stride[a] as i64 - self.pad[a] as i64;
        let first = if start >= 0 { 0 } else { (-start + d - 1) / d };
        let end = if n - start <= 0 { 0 } else { (n - 1 - start) / d + 1 };
        let w = self.window[a] as i64;
        (first.min(w) as usize, end.min(w) as usize)
    }
}

/// One reduction on f32, as the reference computes it (`Arith` for f32 in the reference kernels).
trait Combine {
    /// The identity (the value of an empty window).
    const INIT: f32;
    /// `acc ⊕ x`, written with selects so that it vectorises.
    fn combine(acc: f32, x: f32) -> f32;
    /// Whether folding a window row by row (each row folded first) gives the same bits as
    /// folding its cells in order: Max and Min (the first NaN in window order is the first NaN
    /// of the first row that has one; ±0 and other ties give equal results either way), not Sum.
    const ASSOCIATIVE: bool;
    /// Whether this is [`MaxOp`] (which has an AVX-512 channels-last body).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const IS_MAX: bool = false;
}

struct MaxOp;
struct MinOp;
struct SumOp;

impl Combine for MaxOp {
    const INIT: f32 = f32::NEG_INFINITY;
    const ASSOCIATIVE: bool = true;
    const IS_MAX: bool = true;
    /// The reference's NaN-propagating max: a NaN accumulator stays, a NaN `x` is taken, and
    /// `x` replaces an equal negative accumulator (`max(−0, +0) = +0`).
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        let take = (x > acc) | (x.is_nan() & !acc.is_nan()) | ((x == acc) & acc.is_sign_negative());
        if take { x } else { acc }
    }
}

impl Combine for MinOp {
    const INIT: f32 = f32::INFINITY;
    const ASSOCIATIVE: bool = true;
    /// As [`MaxOp`], mirrored (`min(+0, −0) = −0`).
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        let take = (x < acc) | (x.is_nan() & !acc.is_nan()) | ((x == acc) & !acc.is_sign_negative());
        if take { x } else { acc }
    }
}

impl Combine for SumOp {
    const INIT: f32 = 0.0;
    const ASSOCIATIVE: bool = false;
    #[inline(always)]
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
}

/// ReduceWindow of `x` (`g.in_len()` values) into `y` (`g.out_len()` values), every result
/// written (the previous contents of `y` do not matter); rows split over `pool`.
pub fn reduce_window_f32(
    isa: FusedIsa,
    g: &PoolGeom,
    kind: PoolKind,
    x: &[f32],
    y: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    const OP: &str = "ReduceWindow";
    g.validate(OP)?;
    if Some(x.len()) != g.in_len() || Some(y.len()) != g.out_len() {
        return Err(Error::invalid(OP, format!("{} inputs and {} results for {g:?}", x.len(), y.len())));
    }
    // One unit: the `mid` output rows of one (outer, output row) pair.
    let unit = g.mid * g.out_hw[1] * g.inner;
    if unit == 0 || y.is_empty() {
        return Ok(());
    }
    let isa = isa.checked();
    let cost = unit.saturating_mul((g.window[0] * g.window[1]).clamp(1, 64));
    for_units(pool, y, unit, cost, |first, ys| {
        SCRATCH.with_borrow_mut(|scratch| match kind {
            PoolKind::Max => rows::<MaxOp>(isa, g, x, first, ys, scratch),
            PoolKind::Min => rows::<MinOp>(isa, g, x, first, ys, scratch),
            PoolKind::Sum => rows::<SumOp>(isa, g, x, first, ys, scratch),
        })
    });
    Ok(())
}

thread_local! {
    /// The stride phases of one input row (NCHW path), kept per thread between calls.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The output units `first..` held by `ys`, on the ISA's compiled body.
fn rows<K: Combine>(isa: FusedIsa, g: &PoolGeom, x: &[f32], first: usize, ys: &mut [f32], scratch: &mut Vec<f32>) {
    let len = match g.band() {
        // Separable: the band being reduced, then `rows` cached horizontal reductions.
        Some((slot, rows)) if K::ASSOCIATIVE && g.window[0] <= MAX_CACHED => {
            2 * slot + rows * g.out_hw[1].next_multiple_of(BLOCK)
        }
        Some((slot, rows)) => slot * (rows + 1),
        // Phases of min(stride, W) rows of ceil(W / stride) values.
        None if g.inner == 1 && g.stride[1] > 1 => g.in_hw[1].div_ceil(g.stride[1]) * g.stride[1].min(g.in_hw[1]),
        None => 0,
    };
    if scratch.len() < len {
        scratch.resize(len, 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` (called by `reduce_window_f32`) only on CPUs with
        // AVX-512F, AVX2 and FMA.
        unsafe { rows_avx512::<K>(g, x, first, ys, scratch) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { rows_avx2::<K>(g, x, first, ys, scratch) };
        return;
    }
    let _ = isa;
    rows_body::<K>(FusedIsa::Generic, g, x, first, ys, scratch);
}

/// The portable body compiled with AVX-512F enabled (16-lane selects).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn rows_avx512<K: Combine>(g: &PoolGeom, x: &[f32], first: usize, ys: &mut [f32], scratch: &mut [f32]) {
    rows_body::<K>(FusedIsa::Avx512, g, x, first, ys, scratch);
}

/// The portable body compiled with AVX2+FMA enabled (8-lane selects).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn rows_avx2<K: Combine>(g: &PoolGeom, x: &[f32], first: usize, ys: &mut [f32], scratch: &mut [f32]) {
    rows_body::<K>(FusedIsa::Avx2, g, x, first, ys, scratch);
}

/// Output units `first..` (one unit: `mid` rows of `out_hw[1]·inner` values) into `ys`.
#[inline(always)]
fn rows_body<K: Combine>(isa: FusedIsa, g: &PoolGeom, x: &[f32], first: usize, ys: &mut [f32], scratch: &mut [f32]) {
    let (h, w, oh, ow) = (g.in_hw[0], g.in_hw[1], g.out_hw[0], g.out_hw[1]);
    let row_in = w * g.inner;
    let row_out = ow * g.inner;
    let band = g.band();
    // Max/Min fold each window row first, then the rows in order (see the module doc); the
    // input rows whose folds the cache slots hold.
    let separable = band.filter(|_| K::ASSOCIATIVE && g.window[0] <= MAX_CACHED);
    let mut cached = [usize::MAX; MAX_CACHED];
    for (u, yu) in ys.chunks_exact_mut(g.mid * row_out).enumerate() {
        let (o, r) = ((first + u) / oh, (first + u) % oh);
        let (k0, k1) = g.cells(0, r);
        for (m, yr) in yu.chunks_exact_mut(row_out).enumerate() {
            // The operand row (in units of `row_in`) that window row kh reads, and its values.
            let key = |kh: usize| (o * h + r * g.stride[0] + kh * g.dilation[0] - g.pad[0]) * g.mid + m;
            let row = |kh: usize| &x[key(kh) * row_in..][..row_in];
            if let Some((slot, rows)) = separable {
                // Max/Min: each input row's horizontal reduction is kept and reused by the next
                // output rows of the unit run that read it (stride < window: 3×3/2 max pooling
                // reads each row 1.5 times on average).
                let hlen = g.out_hw[1].next_multiple_of(BLOCK);
                let (tmp, rest) = scratch.split_at_mut(slot);
                let (band, hrows) = rest.split_at_mut(slot);
                let mut at = [usize::MAX; MAX_CACHED];
                for kh in k0..k1 {
                    let want = key(kh);
                    if let Some(i) = cached.iter().position(|&c| c == want) {
                        at[kh - k0] = i;
                        continue;
                    }
                    // A slot whose row this output row does not read.
                    let free = (0..rows.min(MAX_CACHED))
                        .find(|&i| !(k0..k1).any(|k| cached[i] == key(k)))
                        .expect("a free slot: the window reads at most `rows` rows");
                    phases::<K>(isa, g, row(kh), tmp, band);
                    // The row's horizontal fold: `banded` over this one row.
                    banded::<K>(g, band, slot, &mut hrows[free * hlen..(free + 1) * hlen]);
                    cached[free] = want;
                    at[kh - k0] = free;
                }
                vertical::<K>(&at[..k1 - k0], hrows, hlen, yr);
                continue;
            }
            if let Some((slot, _)) = band {
                let (tmp, bands) = scratch.split_at_mut(slot);
                for (i, kh) in (k0..k1).enumerate() {
                    phases::<K>(isa, g, row(kh), tmp, &mut bands[i * slot..(i + 1) * slot]);
                }
                banded::<K>(g, &bands[..(k1 - k0) * slot], slot, yr);
                continue;
            }
            #[cfg(target_arch = "x86_64")]
            if K::IS_MAX && isa == FusedIsa::Avx512 && g.inner.is_multiple_of(16) && k1 - k0 <= MAX_CACHED {
                let mut xrs: [&[f32]; MAX_CACHED] = [&[]; MAX_CACHED];
                for (i, kh) in (k0..k1).enumerate() {
                    xrs[i] = row(kh);
                }
                // SAFETY: `isa` is Avx512 only after `checked()` confirmed AVX-512F.
                unsafe { max_nhwc_avx512(g, &xrs[..k1 - k0], yr) };
                continue;
            }
            yr.fill(K::INIT);
            for kh in k0..k1 {
                let xr = row(kh);
                if g.inner == 1 {
                    columns::<K>(g, xr, yr, scratch);
                } else {
                    channels::<K>(g, xr, yr);
                }
            }
        }
    }
}

/// Output values per block of the banded path (two AVX-512 vectors of accumulators).
const BLOCK: usize = 32;

/// Operand row `xr` padded with the identity to the `slot` positions an output row reads
/// (position `p` is operand column `p − pad`), stored de-interleaved into `band`: phase `q`
/// (the positions `q, q + s, …`) at `q·slot/s`, so a window column reads a contiguous run.
#[inline(always)]
fn phases<K: Combine>(isa: FusedIsa, g: &PoolGeom, xr: &[f32], tmp: &mut [f32], band: &mut [f32]) {
    let s = g.stride[1];
    let padded = if s == 1 { &mut band[..] } else { &mut tmp[..] };
    let lo = g.pad[1].min(padded.len());
    let n = xr.len().min(padded.len() - lo);
    padded[..lo].fill(K::INIT);
    padded[lo..lo + n].copy_from_slice(&xr[..n]);
    padded[lo + n..].fill(K::INIT);
    let plen = tmp.len() / s;
    if s == 2 {
        // Two-source permutes on AVX-512 and AVX2 (the compiler left a loop of pairs scalar).
        let (even, odd) = band.split_at_mut(plen);
        split_pairs(isa, tmp, &mut even[..plen], &mut odd[..plen]);
    } else if s > 2 {
        for (j, ch) in tmp.chunks_exact(s).enumerate() {
            for (q, &v) in ch.iter().enumerate() {
                band[q * plen + j] = v;
            }
        }
    }
}

/// One output row from the de-interleaved padded rows `bands` (`slot` values each, one per
/// window row in range): every window cell reduced into [`BLOCK`] accumulators, stored once.
/// Padding cells hold the identity, which leaves every accumulator's bits unchanged (Max/Min:
/// `acc ⊕ ∓∞ = acc`; Sum: `acc + 0 = acc` as a sum started at +0 is never −0).
#[inline(always)]
fn banded<K: Combine>(g: &PoolGeom, bands: &[f32], slot: usize, yr: &mut [f32]) {
    let (s, d) = (g.stride[1], g.dilation[1]);
    let plen = slot / s;
    let cell = |kw: usize| (kw * d) % s * plen + (kw * d) / s;
    for (b, yb) in yr.chunks_mut(BLOCK).enumerate() {
        let mut acc = [K::INIT; BLOCK];
        for band in bands.chunks_exact(slot) {
            for kw in 0..g.window[1] {
                // Cell kw of output column ow reads padded position ow·s + kw·d (inside the slot,
                // which covers whole blocks).
                fold::<K>(&mut acc, &band[cell(kw) + b * BLOCK..]);
            }
        }
        let n = yb.len();
        yb.copy_from_slice(&acc[..n]);
    }
}

/// `acc[j] = acc[j] ⊕ v[j]` for the first [`BLOCK`] values of `v` (a fixed-length block, so the
/// loop unrolls into vector selects).
#[inline(always)]
fn fold<K: Combine>(acc: &mut [f32; BLOCK], v: &[f32]) {
    let v: &[f32; BLOCK] = v[..BLOCK].try_into().expect("BLOCK values");
    for (a, &v) in acc.iter_mut().zip(v) {
        *a = K::combine(*a, v);
    }
}

/// Window rows whose horizontal reductions the separable Max/Min path caches, at most.
const MAX_CACHED: usize = 8;

/// One output row from the horizontal reductions `hrows` (`hlen` values each) of its window
/// rows, slot `at[i]` holding window row i: folded in window-row order.
#[inline(always)]
fn vertical<K: Combine>(at: &[usize], hrows: &[f32], hlen: usize, yr: &mut [f32]) {
    for (b, yb) in yr.chunks_mut(BLOCK).enumerate() {
        let mut acc = [K::INIT; BLOCK];
        for &i in at {
            fold::<K>(&mut acc, &hrows[i * hlen + b * BLOCK..]);
        }
        let n = yb.len();
        yb.copy_from_slice(&acc[..n]);
    }
}

/// Combines one input row `xr` (W values) into the output row `yr` for every window column `kw`.
#[inline(always)]
fn columns<K: Combine>(g: &PoolGeom, xr: &[f32], yr: &mut [f32], scratch: &mut [f32]) {
    let (w, ow, s, d, pad) =
        (g.in_hw[1] as i64, g.out_hw[1] as i64, g.stride[1] as i64, g.dilation[1] as i64, g.pad[1] as i64);
    if w == 0 || ow == 0 {
        return;
    }
    // Window columns that some output column reads inside the row: off = kw·d − pad ∈
    // [−(ow−1)·s, w−1] (i64 without overflow: see `PoolGeom::validate`).
    let lo = pad - (ow - 1) * s;
    let kw0 = if lo <= 0 { 0 } else { (lo + d - 1) / d };
    let kw1 = ((w - 1 + pad) / d + 1).min(g.window[1] as i64);
    let (phases, plen) = if s == 1 {
        (xr, 0)
    } else {
        // De-interleave: phase p holds xr[p], xr[p + s], … at p·plen.
        let plen = (w + s - 1) / s;
        let np = s.min(w);
        for p in 0..np {
            let dst = &mut scratch[(p * plen) as usize..((p + 1) * plen) as usize];
            for (j, v) in dst.iter_mut().enumerate() {
                let i = j as i64 * s + p;
                if i < w {
                    *v = xr[i as usize];
                }
            }
        }
        (&scratch[..(np * plen) as usize], plen)
    };
    for kw in kw0..kw1 {
        let off = kw * d - pad;
        // Output columns whose cell ow·s + off lies in [0, w).
        let a = if off >= 0 { 0 } else { (-off + s - 1) / s };
        let b = ((w - 1 - off) / s + 1).min(ow);
        if a >= b {
            continue;
        }
        // Element ow·s + off is phase off mod s, index ow + off div s.
        let src = (off.rem_euclid(s) * plen + a + off.div_euclid(s)) as usize;
        let n = (b - a) as usize;
        for (y, &v) in yr[a as usize..b as usize].iter_mut().zip(&phases[src..src + n]) {
            *y = K::combine(*y, v);
        }
    }
}

/// Combines one input row `xr` (`W·inner` values) into the output row `yr` (`out_hw[1]·inner`),
/// `inner` values at a time.
#[inline(always)]
fn channels<K: Combine>(g: &PoolGeom, xr: &[f32], yr: &mut [f32]) {
    let c = g.inner;
    for (j, yc) in yr.chunks_exact_mut(c).enumerate() {
        let (k0, k1) = g.cells(1, j);
        for kw in k0..k1 {
            let iw = j * g.stride[1] + kw * g.dilation[1] - g.pad[1];
            for (y, &v) in yc.iter_mut().zip(&xr[iw * c..(iw + 1) * c]) {
                *y = K::combine(*y, v);
            }
        }
    }
}

/// Channels-last max pooling of one output row `yr` (`out_hw[1]·inner` values, `inner` a
/// multiple of 16) from the window's input rows `xrs` (window order, `W·inner` values each),
/// [`MaxOp`]'s select written with AVX-512 operations: each output pixel's window folded in
/// registers, four vectors of channels at a time (four independent chains), in window order,
/// and stored once. The portable body read and wrote the output row once per window cell and
/// kept one chain per vector: ResNet-18's 3×3/2 max pooling at 112² × 64, one image, one Zen 5
/// core, 250–266 µs → 180–231 with the select as five compares and mask logic → 120–143 with
/// two `vmaxps` and two NaN compares (alternated, in the model; onnxruntime's takes 60 µs).
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_nhwc_avx512(g: &PoolGeom, xrs: &[&[f32]], yr: &mut [f32]) {
    use std::arch::x86_64::*;
    let c = g.inner;
    // MaxOp::combine (take x where x > acc, where x is NaN and acc is not, or where they are
    // equal and acc is negative): `vmaxps` returns its second operand on ties and NaNs, so the
    // two operand orders agree on the larger of two ordered values, and on equal ones give x
    // and acc, whose bitwise and is +0 when either zero is +0 (equal non-zero values have equal
    // bits); then a NaN x replaces the result and a NaN acc stays.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn take(acc: __m512, x: __m512) -> __m512 {
        let (a, b) = (_mm512_castps_si512(_mm512_max_ps(acc, x)), _mm512_castps_si512(_mm512_max_ps(x, acc)));
        let r = _mm512_castsi512_ps(_mm512_and_si512(a, b));
        let r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), x);
        _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(acc, acc), acc)
    }
    for (j, yc) in yr.chunks_exact_mut(c).enumerate() {
        let (k0, k1) = g.cells(1, j);
        let cols = k0..k1;
        let col = |kw: usize| (j * g.stride[1] + kw * g.dilation[1] - g.pad[1]) * c;
        let mut c0 = 0;
        while c0 < c {
            let nv = ((c - c0) / 16).min(4);
            let mut acc = [_mm512_set1_ps(f32::NEG_INFINITY); 4];
            for xr in xrs {
                for kw in cols.clone() {
                    let cell = &xr[col(kw) + c0..][..nv * 16];
                    for (v, a) in acc.iter_mut().enumerate().take(nv) {
                        // SAFETY: `cell` holds nv·16 values (sliced above); AVX-512F (the contract).
                        *a = take(*a, unsafe { _mm512_loadu_ps(cell.as_ptr().add(v * 16)) });
                    }
                }
            }
            let out = &mut yc[c0..c0 + nv * 16];
            for (v, a) in acc.iter().enumerate().take(nv) {
                // SAFETY: `out` holds nv·16 values.
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(v * 16), *a) };
            }
            c0 += nv * 16;
        }
    }
}

/// SelectAndScatter: `y` (`g.in_len()` values, shaped like `x`) becomes zero plus, for each
/// window in source order, its source value added at the element of `x` the window selects
/// (`kind` Max or Min). Every value of `y` is written; planes split over `pool`.
pub fn select_and_scatter_f32(
    g: &PoolGeom,
    kind: PoolKind,
    x: &[f32],
    src: &[f32],
    y: &mut [f32],
    pool: Option<&rayon::ThreadPool>,
) -> Result<()> {
    const OP: &str = "SelectAndScatter";
    g.validate(OP)?;
    if kind == PoolKind::Sum {
        return Err(Error::invalid(OP, "selection Sum not supported (Max or Min)"));
    }
    if Some(x.len()) != g.in_len() || Some(y.len()) != g.in_len() || Some(src.len()) != g.out_len() {
        return Err(Error::invalid(
            OP,
            format!("{} operand, {} source and {} result values for {g:?}", x.len(), src.len(), y.len()),
        ));
    }
    let plane = g.in_hw[0] * g.mid * g.in_hw[1] * g.inner;
    let splane = g.out_hw[0] * g.mid * g.out_hw[1] * g.inner;
    if plane == 0 {
        return Ok(());
    }
    let cost = plane + splane.saturating_mul((g.window[0] * g.window[1]).clamp(1, 64));
    let is_max = kind == PoolKind::Max;
    for_units(pool, y, plane, cost, |first, ys| {
        ys.fill(0.0);
        for (p, yp) in ys.chunks_exact_mut(plane).enumerate() {
            let o = first + p;
            scatter_plane(g, is_max, &x[o * plane..(o + 1) * plane], &src[o * splane..(o + 1) * splane], yp);
        }
    });
    Ok(())
}

/// One `outer` plane of SelectAndScatter, windows in source order (the `inner` lanes of one
/// window position side by side).
fn scatter_plane(g: &PoolGeom, is_max: bool, x: &[f32], src: &[f32], y: &mut [f32]) {
    let c = g.inner;
    let (w, ow) = (g.in_hw[1], g.out_hw[1]);
    let mut s = 0;
    for r in 0..g.out_hw[0] {
        let (h0, h1) = g.cells(0, r);
        for m in 0..g.mid {
            for j in 0..ow {
                let (w0, w1) = g.cells(1, j);
                let at = |kh: usize, kw: usize| {
                    let ih = r * g.stride[0] + kh * g.dilation[0] - g.pad[0];
                    let iw = j * g.stride[1] + kw * g.dilation[1] - g.pad[1];
                    ((ih * g.mid + m) * w + iw) * c
                };
                for ch in 0..c {
                    let mut kept: Option<usize> = None;
                    for kh in h0..h1 {
                        for kw in w0..w1 {
                            let e = at(kh, kw) + ch;
                            kept = match kept {
                                Some(k) if (is_max && x[k] >= x[e]) || (!is_max && x[k] <= x[e]) => Some(k),
                                _ => Some(e),
                            };
                        }
                    }
                    if let Some(k) = kept {
                        y[k] += src[s];
                    }
                    s += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) % n as u64) as usize
        }
    }

    /// Values with ties, signed zeros, infinities and NaNs of two payloads.
    fn values(rng: &mut Lcg, n: usize, specials: bool) -> Vec<f32> {
        let nan2 = f32::from_bits(0x7fc0_0123);
        (0..n)
            .map(|_| match (specials, rng.next(14)) {
                (true, 0) => f32::NAN,
                (true, 1) => nan2,
                (true, 2) => f32::NEG_INFINITY,
                (true, 3) => -0.0,
                (true, 4) => 0.0,
                (_, k) => (rng.next(9) as f32 - 4.0) * 0.5 + k as f32 * 0.125,
            })
            .collect()
    }

    fn random_geom(rng: &mut Lcg) -> (PoolGeom, [usize; 2]) {
        let mut g = PoolGeom {
            outer: rng.next(3),
            mid: 1 + rng.next(2) * rng.next(2),
            inner: [1, 1, 2, 3, 17][rng.next(5)],
            in_hw: [rng.next(7), rng.next(9)],
            out_hw: [0, 0],
            window: [rng.next(5), rng.next(5)],
            stride: [1 + rng.next(3), 1 + rng.next(3)],
            dilation: [1 + rng.next(2) * rng.next(2), 1 + rng.next(2) * rng.next(2)],
            pad: [rng.next(3), rng.next(3)],
        };
        let hi = [rng.next(3), rng.next(3)];
        for (a, &h) in hi.iter().enumerate() {
            let padded = g.in_hw[a] + g.pad[a] + h;
            let ext = if g.window[a] == 0 { 0 } else { (g.window[a] - 1) * g.dilation[a] + 1 };
            g.out_hw[a] = if padded < ext { 0 } else { (padded - ext) / g.stride[a] + 1 };
        }
        (g, hi)
    }

    /// The in-bounds cells of every window, in source order: (flat operand index list).
    fn windows(g: &PoolGeom) -> Vec<Vec<usize>> {
        let mut all = Vec::new();
        for o in 0..g.outer {
            for r in 0..g.out_hw[0] {
                for m in 0..g.mid {
                    for j in 0..g.out_hw[1] {
                        for c in 0..g.inner {
                            let mut cells = Vec::new();
                            for kh in 0..g.window[0] {
                                for kw in 0..g.window[1] {
                                    let ih = (r * g.stride[0] + kh * g.dilation[0]) as i64 - g.pad[0] as i64;
                                    let iw = (j * g.stride[1] + kw * g.dilation[1]) as i64 - g.pad[1] as i64;
                                    if ih < 0 || iw < 0 || ih >= g.in_hw[0] as i64 || iw >= g.in_hw[1] as i64 {
                                        continue;
                                    }
                                    let (ih, iw) = (ih as usize, iw as usize);
                                    cells.push((((o * g.in_hw[0] + ih) * g.mid + m) * g.in_hw[1] + iw) * g.inner + c);
                                }
                            }
                            all.push(cells);
                        }
                    }
                }
            }
        }
        all
    }

    /// The reference's f32 max/min/sum, written with branches.
    fn naive(kind: PoolKind, acc: f32, v: f32) -> f32 {
        match kind {
            PoolKind::Sum => acc + v,
            _ if acc.is_nan() => acc,
            _ if v.is_nan() => v,
            PoolKind::Max if v > acc || (v == acc && acc.is_sign_negative()) => v,
            PoolKind::Min if v < acc || (v == acc && acc.is_sign_positive()) => v,
            _ => acc,
        }
    }

    /// The bits to compare: Sum's NaNs as one canonical NaN (which payload survives `NaN + NaN`
    /// depends on the operand order the compiler picks for an addition).
    fn bits(kind: PoolKind, v: f32) -> u32 {
        if kind == PoolKind::Sum && v.is_nan() { f32::NAN.to_bits() } else { v.to_bits() }
    }

    fn isas() -> [FusedIsa; 3] {
        [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512]
    }

    #[test]
    fn reduce_window_matches_naive_loop_bit_for_bit() {
        let mut rng = Lcg(7);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for case in 0..400 {
            let (g, _) = random_geom(&mut rng);
            let x = values(&mut rng, g.in_len().unwrap(), case % 2 == 0);
            let cells = windows(&g);
            for kind in [PoolKind::Max, PoolKind::Min, PoolKind::Sum] {
                let init = match kind {
                    PoolKind::Max => f32::NEG_INFINITY,
                    PoolKind::Min => f32::INFINITY,
                    PoolKind::Sum => 0.0,
                };
                let want: Vec<u32> =
                    cells.iter().map(|c| bits(kind, c.iter().fold(init, |a, &i| naive(kind, a, x[i])))).collect();
                let isa = isas()[case % 3];
                let mut y = vec![1.5f32; g.out_len().unwrap()];
                reduce_window_f32(isa, &g, kind, &x, &mut y, (case % 2 == 1).then_some(&pool)).unwrap();
                let got: Vec<u32> = y.iter().map(|&v| bits(kind, v)).collect();
                assert_eq!(got, want, "{kind:?} {isa:?} {g:?}");
            }
        }
    }

    #[test]
    fn large_rows_on_every_path() {
        // ResNet-like rows long enough for full vectors on both layouts, strides 1 and 2.
        let mut rng = Lcg(3);
        // Channel counts of 16, 48 and 80 take the AVX-512 channels-last max body in one, three
        // and four-then-one vectors.
        for (inner, stride, pad) in [(1, 2, 1), (1, 1, 1), (16, 2, 1), (40, 1, 0), (48, 2, 1), (80, 1, 2)] {
            let g = PoolGeom {
                outer: 3,
                mid: 1,
                inner,
                in_hw: [9, 37],
                out_hw: [(9 + 2 * pad - 3) / stride + 1, (37 + 2 * pad - 3) / stride + 1],
                window: [3, 3],
                stride: [stride, stride],
                dilation: [1, 1],
                pad: [pad, pad],
            };
            let x = values(&mut rng, g.in_len().unwrap(), true);
            let cells = windows(&g);
            for isa in isas() {
                for kind in [PoolKind::Max, PoolKind::Min, PoolKind::Sum] {
                    let init = [f32::NEG_INFINITY, f32::INFINITY, 0.0][kind as usize];
                    let mut y = vec![0f32; g.out_len().unwrap()];
                    reduce_window_f32(isa, &g, kind, &x, &mut y, None).unwrap();
                    for (k, c) in cells.iter().enumerate() {
                        let want = c.iter().fold(init, |a, &i| naive(kind, a, x[i]));
                        assert_eq!(bits(kind, y[k]), bits(kind, want), "{kind:?} {isa:?} {g:?} at {k}");
                    }
                }
            }
        }
    }

    #[test]
    fn select_and_scatter_matches_naive_loop() {
        let mut rng = Lcg(11);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        for case in 0..400 {
            let (g, _) = random_geom(&mut rng);
            // Few distinct values: many ties.
            let x: Vec<f32> = values(&mut rng, g.in_len().unwrap(), case % 2 == 0).iter().map(|v| v.round()).collect();
            let src = values(&mut rng, g.out_len().unwrap(), false);
            for kind in [PoolKind::Max, PoolKind::Min] {
                let mut want = vec![0f32; x.len()];
                for (s, c) in windows(&g).iter().enumerate() {
                    let mut kept: Option<usize> = None;
                    for &e in c {
                        let keep = kept.is_some_and(|k| match kind {
                            PoolKind::Max => x[k] >= x[e],
                            _ => x[k] <= x[e],
                        });
                        if !keep {
                            kept = Some(e);
                        }
                    }
                    if let Some(k) = kept {
                        want[k] += src[s];
                    }
                }
                let mut y = vec![9f32; x.len()];
                select_and_scatter_f32(&g, kind, &x, &src, &mut y, (case % 2 == 1).then_some(&pool)).unwrap();
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                let want: Vec<u32> = want.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{kind:?} {g:?}");
            }
        }
    }

    #[test]
    fn bad_geometry_and_lengths_are_errors() {
        let g = PoolGeom {
            outer: 1,
            mid: 1,
            inner: 1,
            in_hw: [1, 4],
            out_hw: [1, 2],
            window: [1, 2],
            stride: [1, 2],
            dilation: [1, 1],
            pad: [0, 0],
        };
        let x = [1f32, 2., 3., 4.];
        let mut y = [0f32; 2];
        reduce_window_f32(FusedIsa::Generic, &g, PoolKind::Max, &x, &mut y, None).unwrap();
        assert_eq!(y, [2., 4.]);
        let e = reduce_window_f32(FusedIsa::Generic, &g, PoolKind::Max, &x[..3], &mut y, None).unwrap_err();
        assert!(e.to_string().contains("ReduceWindow"), "{e}");
        let zero = PoolGeom { stride: [1, 0], ..g.clone() };
        assert!(reduce_window_f32(FusedIsa::Generic, &zero, PoolKind::Sum, &x, &mut y, None).is_err());
        let huge = PoolGeom { pad: [0, usize::MAX / 2], ..g.clone() };
        assert!(reduce_window_f32(FusedIsa::Generic, &huge, PoolKind::Sum, &x, &mut y, None).is_err());
        let mut z = [0f32; 4];
        let e = select_and_scatter_f32(&g, PoolKind::Sum, &x, &y, &mut z, None).unwrap_err();
        assert!(e.to_string().contains("SelectAndScatter"), "{e}");
        assert!(select_and_scatter_f32(&g, PoolKind::Max, &x, &y[..1], &mut z, None).is_err());
        select_and_scatter_f32(&g, PoolKind::Max, &x, &[5., 7.], &mut z, None).unwrap();
        assert_eq!(z, [0., 5., 0., 7.]);
    }
}
