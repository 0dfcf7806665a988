//! Depthwise convolution (one input and one output channel per group, f32 forward), direct: no
//! im2col, every output written once with its whole epilogue applied.
//!
//! Channels not innermost (NCHW): one task per (image, channel) plane. The plane is first copied
//! into a zero-padded scratch split into its stride phases: phase (py, px) holds the padded
//! positions (i·sy + py, j·sx + px) as a dense `ph × pw` matrix, `pw` being the output width plus
//! the window's reach in phase columns. Output pixel (oy, ox) and tap (ty, tx) then read phase
//! (ty·dy mod sy, tx·dx mod sx) at (oy + ty·dy div sy, ox + tx·dx div sx): for the flat index
//! q = oy·pw + ox every tap is one fixed offset, so the whole plane is a one-dimensional
//! convolution over q, computed [`BLOCK`] outputs at a time with the accumulators in registers.
//! Stride 2 costs one de-interleave of each input row; narrow planes (7, 14 wide) keep the
//! vectors full, since a block runs across output rows (the `pw − ow` columns between rows are
//! computed and dropped). Any stride, dilation and padding take the same path.
//!
//! Channels innermost (NHWC): one task per (image, output row), accumulated in an `[ow][c]` row
//! vectorised along the channels, each tap over the output columns whose input column is inside.
//!
//! Both bodies are compiled for AVX-512F and AVX2+FMA and portably, selected at run time
//! ([`FusedIsa`]); the plane path's tap loop and stride-2 de-interleave use explicit vectors
//! there. Geometries whose phases would dwarf the planes (huge dilations into the padding) take
//! a plain per-output loop.

use rayon::prelude::*;

use super::{ConvEpilogue, ConvGeom, OutPtr, copy_strided};
use crate::error::Result;
use crate::kernels::fused::FusedIsa;

/// Outputs per block of the plane path (two AVX-512 vectors, four AVX2 vectors of accumulators).
const BLOCK: usize = 32;

/// The compiled bodies ([`Job::unit`]'s `ISA`).
const GENERIC: u8 = 0;
#[cfg(target_arch = "x86_64")]
const AVX2: u8 = 1;
#[cfg(target_arch = "x86_64")]
const AVX512: u8 = 2;

/// Work (multiply-adds) a parallel task should hold at least.
const TASK_WORK: usize = 1 << 15;

/// Depthwise convolution with the weights `w` as `[taps][channels]`, on the default ISA.
pub(super) fn depthwise(geom: &ConvGeom, x: &[f32], w: &[f32], epi: &ConvEpilogue<'_>, out: OutPtr) -> Result<()> {
    depthwise_on(FusedIsa::selected(), geom, x, w, epi, out);
    Ok(())
}

/// [`depthwise`] on `isa` (lowered to what the CPU runs). The caller has validated the geometry
/// against `x` and the output, and the bias and residual lengths.
fn depthwise_on(isa: FusedIsa, geom: &ConvGeom, x: &[f32], w: &[f32], epi: &ConvEpilogue<'_>, out: OutPtr) {
    let isa = isa.checked();
    let [oh, ow] = geom.out_hw;
    let c = geom.out_channels;
    let job = Job { geom, x, w, epi, out, lay: Phases::of(geom) };
    // Planes (channels-first) or output rows (channels innermost) as units.
    let channels_inner = geom.x_strides[1] == 1;
    // Phases far larger than the input and output planes (dilations reaching far into the
    // padding): the plane is computed by a plain loop instead.
    let planes = geom.in_hw[0] * geom.in_hw[1] + oh * ow;
    if !channels_inner && job.lay.len().is_none_or(|l| l > 4 * planes + 4096) {
        (0..geom.batch * c).into_par_iter().for_each(|u| job.plane_direct(u / c, u % c));
        return;
    }
    let (units, work) =
        if channels_inner { (geom.batch * oh, ow * c * geom.taps()) } else { (geom.batch * c, oh * ow * geom.taps()) };
    let min_len = (TASK_WORK / work.max(1)).max(1);
    (0..units).into_par_iter().with_min_len(min_len).for_each_init(Scratch::default, |scratch, u| {
        dispatch(isa, &job, channels_inner, u, scratch);
    });
}

/// A task's buffers, kept between its units.
#[derive(Default)]
struct Scratch {
    /// The padded phases of a plane, or the accumulators of a row.
    buf: Vec<f32>,
    /// (offset, weight) per tap of a plane.
    taps: Vec<(usize, f32)>,
    /// One padded input row (stride 2), before it is split into its two phases.
    row: Vec<f32>,
}

/// Everything a unit needs.
struct Job<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    w: &'a [f32],
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    lay: Phases,
}

/// Runs unit `u` on the body compiled for `isa` (already [`FusedIsa::checked`]).
fn dispatch(isa: FusedIsa, job: &Job<'_>, channels_inner: bool, u: usize, scratch: &mut Scratch) {
    #[cfg(target_arch = "x86_64")]
    if isa == FusedIsa::Avx512 {
        // SAFETY: Avx512 survives `checked()` only on CPUs with AVX-512F, AVX2 and FMA.
        unsafe { unit_avx512(job, channels_inner, u, scratch) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.avx2() {
        // SAFETY: `avx2()` holds only after `checked()` confirmed AVX2 and FMA.
        unsafe { unit_avx2(job, channels_inner, u, scratch) };
        return;
    }
    let _ = isa;
    job.unit::<GENERIC>(channels_inner, u, scratch);
}

/// The unit body compiled with AVX-512F enabled (16-lane vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn unit_avx512(job: &Job<'_>, channels_inner: bool, u: usize, scratch: &mut Scratch) {
    job.unit::<AVX512>(channels_inner, u, scratch);
}

/// The unit body compiled with AVX2+FMA enabled (8-lane vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn unit_avx2(job: &Job<'_>, channels_inner: bool, u: usize, scratch: &mut Scratch) {
    job.unit::<AVX2>(channels_inner, u, scratch);
}

/// `a·b + c`, fused in the x86 bodies (compiled with FMA; elsewhere `mul_add` is a libm call).
#[inline(always)]
fn madd<const ISA: u8>(a: f32, b: f32, c: f32) -> f32 {
    if ISA == GENERIC { a * b + c } else { a.mul_add(b, c) }
}

/// `acc += Σ k·buf[q0 + off ..][..BLOCK]` over the taps (offset, weight), the accumulators in
/// registers: explicit vectors on x86 (the compiler leaves this loop scalar), a plain loop
/// elsewhere.
#[inline(always)]
fn accumulate<const ISA: u8>(buf: &[f32], q0: usize, taps: &[(usize, f32)], acc: &mut [f32; BLOCK]) {
    #[cfg(target_arch = "x86_64")]
    {
        if ISA == AVX512 {
            // SAFETY: the AVX512 body runs only on CPUs with AVX-512F (see `dispatch`).
            return unsafe { accumulate_avx512(buf, q0, taps, acc) };
        }
        if ISA == AVX2 {
            // SAFETY: the AVX2 body runs only on CPUs with AVX2 and FMA (see `dispatch`).
            return unsafe { accumulate_avx2(buf, q0, taps, acc) };
        }
    }
    for &(off, k) in taps {
        let src: &[f32; BLOCK] = buf[q0 + off..][..BLOCK].try_into().expect("BLOCK values");
        for (a, &v) in acc.iter_mut().zip(src) {
            *a += v * k;
        }
    }
}

/// [`accumulate`] in two AVX-512 vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn accumulate_avx512(buf: &[f32], q0: usize, taps: &[(usize, f32)], acc: &mut [f32; BLOCK]) {
    use std::arch::x86_64::*;
    // SAFETY: `acc` holds BLOCK = 32 values.
    let mut a = unsafe { [_mm512_loadu_ps(acc.as_ptr()), _mm512_loadu_ps(acc.as_ptr().add(16))] };
    for &(off, k) in taps {
        let src = &buf[q0 + off..][..BLOCK];
        let kv = _mm512_set1_ps(k);
        // SAFETY: `src` holds BLOCK values (the slice above is bounds-checked).
        unsafe {
            a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(src.as_ptr()), kv, a[0]);
            a[1] = _mm512_fmadd_ps(_mm512_loadu_ps(src.as_ptr().add(16)), kv, a[1]);
        }
    }
    // SAFETY: as for the loads.
    unsafe {
        _mm512_storeu_ps(acc.as_mut_ptr(), a[0]);
        _mm512_storeu_ps(acc.as_mut_ptr().add(16), a[1]);
    }
}

/// [`accumulate`] in four AVX2 vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn accumulate_avx2(buf: &[f32], q0: usize, taps: &[(usize, f32)], acc: &mut [f32; BLOCK]) {
    use std::arch::x86_64::*;
    // SAFETY: `acc` holds BLOCK = 32 values.
    let mut a: [__m256; 4] = std::array::from_fn(|v| unsafe { _mm256_loadu_ps(acc.as_ptr().add(8 * v)) });
    for &(off, k) in taps {
        let src = &buf[q0 + off..][..BLOCK];
        let kv = _mm256_set1_ps(k);
        for (v, a) in a.iter_mut().enumerate() {
            // SAFETY: `src` holds BLOCK = 32 values (the slice above is bounds-checked).
            *a = _mm256_fmadd_ps(unsafe { _mm256_loadu_ps(src.as_ptr().add(8 * v)) }, kv, *a);
        }
    }
    for (v, a) in a.iter().enumerate() {
        // SAFETY: as for the loads.
        unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(8 * v), *a) };
    }
}

/// The phase-split padded plane of the channels-first path (see the module doc).
#[derive(Clone, Copy, Debug)]
struct Phases {
    /// Strides (row, column): the number of phases per axis.
    s: [usize; 2],
    /// Rows and columns of each phase.
    ph: usize,
    pw: usize,
}

impl Phases {
    fn of(geom: &ConvGeom) -> Phases {
        let reach = |a: usize| (geom.kernel_hw[a].max(1) - 1) * geom.dilation[a] / geom.stride[a];
        Phases { s: geom.stride, ph: geom.out_hw[0] + reach(0), pw: geom.out_hw[1] + reach(1) }
    }

    /// Elements of the scratch: all phases plus a row and a block of slack that the last block
    /// reads (into columns it drops).
    fn len(&self) -> Option<usize> {
        let phases = self.s[0].checked_mul(self.s[1])?.checked_mul(self.ph)?.checked_mul(self.pw)?;
        phases.checked_add(self.pw)?.checked_add(BLOCK)
    }

    /// Offset of tap (ty, tx) from the flat output index.
    fn offset(&self, geom: &ConvGeom, ty: usize, tx: usize) -> usize {
        let (dy, dx) = (ty * geom.dilation[0], tx * geom.dilation[1]);
        let phase = (dy % self.s[0]) * self.s[1] + dx % self.s[1];
        (phase * self.ph + dy / self.s[0]) * self.pw + dx / self.s[1]
    }
}

impl Job<'_> {
    #[inline(always)]
    fn unit<const ISA: u8>(&self, channels_inner: bool, u: usize, scratch: &mut Scratch) {
        if channels_inner {
            let oh = self.geom.out_hw[0];
            self.row::<ISA>(u / oh, u % oh, scratch);
        } else {
            let c = self.geom.out_channels;
            self.plane::<ISA>(u / c, u % c, scratch);
        }
    }

    /// Copies plane `ch` of image `img` into `buf` split into its padded stride phases (`tmp`:
    /// room for a padded row).
    #[inline(always)]
    fn fill_phases<const ISA: u8>(&self, img: usize, ch: usize, buf: &mut [f32], tmp: &mut Vec<f32>) {
        let g = self.geom;
        let Phases { s: [sy, sx], ph, pw } = self.lay;
        let [sn, sc, sh, sw] = g.x_strides;
        let ([ih, iw], [py0, px0]) = (g.in_hw, g.pad);
        for py in 0..sy {
            for i in 0..ph {
                // Padded row i·sy + py is input row i·sy + py − pad.
                let iy = (i * sy + py).checked_sub(py0).filter(|&r| r < ih);
                let rows = &mut buf[(py * sx * ph + i) * pw..];
                let Some(iy) = iy else {
                    for px in 0..sx {
                        rows[px * ph * pw..][..pw].fill(0.0);
                    }
                    continue;
                };
                let line = &self.x[img * sn + ch * sc + iy * sh..];
                if sx == 2 {
                    // The padded row (2·pw positions), then its even and odd positions.
                    tmp.resize(2 * pw, 0.0);
                    let lo = px0.min(2 * pw);
                    let n = iw.min(2 * pw - lo);
                    tmp[..lo].fill(0.0);
                    copy_strided(&mut tmp[lo..lo + n], line, sw);
                    tmp[lo + n..].fill(0.0);
                    let (even, odd) = rows.split_at_mut(ph * pw);
                    deinterleave::<ISA, true>(tmp, &mut even[..pw], &mut odd[..pw]);
                    continue;
                }
                for px in 0..sx {
                    let dst = &mut rows[px * ph * pw..][..pw];
                    // Phase columns j whose input column j·sx + px − pad lies in 0..iw.
                    let lo = px0.saturating_sub(px).div_ceil(sx);
                    let hi = (iw + px0).saturating_sub(px).div_ceil(sx).min(pw);
                    if lo >= hi {
                        dst.fill(0.0);
                        continue;
                    }
                    dst[..lo].fill(0.0);
                    dst[hi..].fill(0.0);
                    copy_strided(&mut dst[lo..hi], &line[(lo * sx + px - px0) * sw..], sx * sw);
                }
            }
        }
    }

    /// Channel `ch` of image `img`, channels-first: the whole output plane.
    #[inline(always)]
    fn plane<const ISA: u8>(&self, img: usize, ch: usize, scratch: &mut Scratch) {
        let g = self.geom;
        let ([kh, kw], [oh, ow], c) = (g.kernel_hw, g.out_hw, g.out_channels);
        let pw = self.lay.pw;
        let len = self.lay.len().expect("checked by `depthwise_on`");
        if scratch.buf.len() < len {
            scratch.buf.resize(len, 0.0);
        }
        let buf = &mut scratch.buf[..len];
        self.fill_phases::<ISA>(img, ch, buf, &mut scratch.row);
        let buf = &*buf;
        let taps = &mut scratch.taps;
        taps.clear();
        for ty in 0..kh {
            taps.extend((0..kw).map(|tx| (self.lay.offset(g, ty, tx), self.w[(ty * kw + tx) * c + ch])));
        }
        let bias = self.epi.bias.map_or(0.0, |b| b[ch]);
        let [yn, yc, yh, yw] = g.y_strides;
        let base = img * yn + ch * yc;
        let total = oh * pw;
        let mut q0 = 0;
        while q0 < total {
            let mut acc = [bias; BLOCK];
            accumulate::<ISA>(buf, q0, taps, &mut acc);
            if self.epi.residual.is_none() {
                finish_block(self.epi, &mut acc);
            }
            // Store the block's runs of real output columns (ox < ow) row by row.
            let end = (q0 + BLOCK).min(total);
            let mut q = q0;
            while q < end {
                let (oy, ox) = (q / pw, q % pw);
                let row_end = (q - ox + pw).min(end);
                if ox < ow {
                    let n = (q - ox + ow).min(end) - q;
                    let run = &mut acc[q - q0..][..n];
                    self.store(run, base + oy * yh + ox * yw, yw);
                }
                q = row_end;
            }
            q0 += BLOCK;
        }
    }

    /// Channel `ch` of image `img` by a direct loop over the in-bounds taps of each output.
    fn plane_direct(&self, img: usize, ch: usize) {
        let g = self.geom;
        let ([kh, kw], [oh, ow], c) = (g.kernel_hw, g.out_hw, g.out_channels);
        let [sn, sc, sh, sw] = g.x_strides;
        let [yn, yc, yh, yw] = g.y_strides;
        for oy in 0..oh {
            for ox in 0..ow {
                let mut v = [self.epi.bias.map_or(0.0, |b| b[ch])];
                for ty in 0..kh {
                    let Some(iy) = g.src(0, oy, ty) else { continue };
                    for tx in 0..kw {
                        if let Some(ix) = g.src(1, ox, tx) {
                            v[0] += self.x[img * sn + ch * sc + iy * sh + ix * sw] * self.w[(ty * kw + tx) * c + ch];
                        }
                    }
                }
                if self.epi.residual.is_none() {
                    self.epi.activate_slice(&mut v);
                }
                self.store(&mut v, img * yn + ch * yc + oy * yh + ox * yw, 1);
            }
        }
    }

    /// Output row `oy` of image `img`, channels innermost.
    #[inline(always)]
    fn row<const ISA: u8>(&self, img: usize, oy: usize, scratch: &mut Scratch) {
        let g = self.geom;
        let [sn, _, sh, sw] = g.x_strides;
        let ([kh, kw], ow, c, s) = (g.kernel_hw, g.out_hw[1], g.out_channels, g.stride[1]);
        let acc = &mut scratch.buf;
        acc.clear();
        match self.epi.bias {
            Some(b) => (0..ow).for_each(|_| acc.extend_from_slice(b)),
            None => acc.resize(ow * c, 0.0),
        }
        for ty in 0..kh {
            let Some(iy) = g.src(0, oy, ty) else { continue };
            for tx in 0..kw {
                let wt = &self.w[(ty * kw + tx) * c..][..c];
                let (lo, hi, first) = g.inside_cols(tx);
                for ox in lo..hi {
                    let at = img * sn + iy * sh + (first + (ox - lo) * s) * sw;
                    for ((a, &v), &k) in acc[ox * c..][..c].iter_mut().zip(&self.x[at..][..c]).zip(wt) {
                        *a = madd::<ISA>(v, k, *a);
                    }
                }
            }
        }
        if self.epi.residual.is_none() {
            self.epi.activate_slice(acc);
        }
        let [yn, yc, yh, yw] = g.y_strides;
        for (ox, run) in acc.chunks_exact_mut(c).enumerate() {
            self.store(run, img * yn + oy * yh + ox * yw, yc);
        }
    }

    /// Writes `vals` to the output elements `at, at + step, …`, first adding the residual and
    /// applying the activation and clamp if the residual is there (else the caller has applied
    /// them).
    #[inline(always)]
    fn store(&self, vals: &mut [f32], at: usize, step: usize) {
        if let Some(r) = self.epi.residual {
            let n = vals.len();
            if step == 1 {
                for (v, &r) in vals.iter_mut().zip(&r[at..at + n]) {
                    *v += r;
                }
            } else {
                for (j, v) in vals.iter_mut().enumerate() {
                    *v += r[at + j * step];
                }
            }
            self.epi.activate_slice(vals);
        }
        if step == 1 {
            // SAFETY: `validate` checked that every output element (image, channel, row,
            // column) lies inside the output, and these are `vals.len()` consecutive ones of one
            // unit: this task alone owns its (image, channel) plane or (image, row).
            let dst = unsafe { std::slice::from_raw_parts_mut(self.out.0.add(at), vals.len()) };
            dst.copy_from_slice(vals);
        } else {
            for (j, &v) in vals.iter().enumerate() {
                // SAFETY: as above, element by element.
                unsafe { self.out.write(at + j * step, v) };
            }
        }
    }
}

/// `even[j] = src[2j]`, `odd[j] = src[2j + 1]` for every `j` the outputs hold; with `ODD`
/// false only the even values (`odd` unused). `src` must reach the last value read.
#[inline(always)]
fn deinterleave<const ISA: u8, const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let n = if ODD { even.len().min(odd.len()) } else { even.len() };
    // Whole pairs in `src` for the vector loops (the last even value may have no odd partner).
    let pairs = n.min(src.len() / 2);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if ISA == AVX512 {
            // SAFETY: the AVX512 body runs only on CPUs with AVX-512F (see `dispatch`).
            done = unsafe { deinterleave_avx512::<ODD>(src, even, odd, pairs) };
        } else if ISA == AVX2 {
            // SAFETY: the AVX2 body runs only on CPUs with AVX2 (see `dispatch`).
            done = unsafe { deinterleave_avx2::<ODD>(src, even, odd, pairs) };
        }
    }
    for (j, e) in even.iter_mut().enumerate().take(n).skip(done) {
        *e = src[2 * j];
        if ODD {
            odd[j] = src[2 * j + 1];
        }
    }
}

/// `dst[j] = src[2j]` on the default ISA: stride-2 im2col rows.
pub(super) fn gather_even(dst: &mut [f32], src: &[f32]) {
    match FusedIsa::selected().checked() {
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx512 => deinterleave::<AVX512, false>(src, dst, &mut []),
        #[cfg(target_arch = "x86_64")]
        FusedIsa::Avx2 => deinterleave::<AVX2, false>(src, dst, &mut []),
        _ => deinterleave::<GENERIC, false>(src, dst, &mut []),
    }
}

/// [`deinterleave`] of the first 16·⌊n/16⌋ pairs (`n` ≤ the pairs the slices hold) with
/// two-source permutes; returns how many.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn deinterleave_avx512<const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32], n: usize) -> usize {
    use std::arch::x86_64::*;
    let ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    let n = n / 16 * 16;
    for j in (0..n).step_by(16) {
        let s = &src[2 * j..][..32];
        // SAFETY: `s` holds 32 values; `even` (and `odd` when ODD) hold n ≥ j + 16.
        unsafe {
            let (a, b) = (_mm512_loadu_ps(s.as_ptr()), _mm512_loadu_ps(s.as_ptr().add(16)));
            _mm512_storeu_ps(even[j..][..16].as_mut_ptr(), _mm512_permutex2var_ps(a, ie, b));
            if ODD {
                _mm512_storeu_ps(odd[j..][..16].as_mut_ptr(), _mm512_permutex2var_ps(a, io, b));
            }
        }
    }
    n
}

/// [`deinterleave`] of the first 8·⌊n/8⌋ pairs with in-lane shuffles and a lane permute;
/// returns how many.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn deinterleave_avx2<const ODD: bool>(src: &[f32], even: &mut [f32], odd: &mut [f32], n: usize) -> usize {
    use std::arch::x86_64::*;
    let n = n / 8 * 8;
    for j in (0..n).step_by(8) {
        let s = &src[2 * j..][..16];
        // SAFETY: `s` holds 16 values; `even` (and `odd` when ODD) hold n ≥ j + 8.
        unsafe {
            let (a, b) = (_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8)));
            // [a0 a2 b0 b2 | a4 a6 b4 b6] → 64-bit lanes 0, 2, 1, 3.
            let ev = _mm256_castps_pd(_mm256_shuffle_ps::<0x88>(a, b));
            _mm256_storeu_ps(even[j..][..8].as_mut_ptr(), _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(ev)));
            if ODD {
                let od = _mm256_castps_pd(_mm256_shuffle_ps::<0xDD>(a, b));
                _mm256_storeu_ps(odd[j..][..8].as_mut_ptr(), _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(od)));
            }
        }
    }
    n
}

/// The activation and clamp of `epi` over a full block (fixed length: fully vectorised).
#[inline(always)]
fn finish_block(epi: &ConvEpilogue<'_>, acc: &mut [f32; BLOCK]) {
    epi.activate_slice(acc);
}

#[cfg(test)]
mod tests {
    use super::super::tests::strides;
    use super::super::{ConvFilter, FilterKind, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::Activation;
    use crate::kernels::gemm::epilogue::act_f64;

    struct Lcg(u64);
    impl Lcg {
        fn step(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn value(&mut self) -> f32 {
            (self.step() as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
        }
        fn below(&mut self, n: usize) -> usize {
            self.step() as usize % n
        }
    }

    /// A depthwise geometry: `c` channels, `win` = [stride, low padding, high padding,
    /// dilation], NHWC or NCHW input and output (`nhwc`) chosen independently.
    fn geom(
        batch: usize,
        c: usize,
        in_hw: [usize; 2],
        k: [usize; 2],
        win: [[usize; 2]; 4],
        nhwc: (bool, bool),
    ) -> ConvGeom {
        let [stride, pad, pad_hi, dil] = win;
        let (x_nhwc, y_nhwc) = nhwc;
        let out_hw: [usize; 2] = std::array::from_fn(|a| {
            let span = in_hw[a] + pad[a] + pad_hi[a];
            let win = (k[a] - 1) * dil[a] + 1;
            if span < win { 0 } else { (span - win) / stride[a] + 1 }
        });
        let order = |nhwc: bool| if nhwc { [0, 2, 3, 1] } else { [0, 1, 2, 3] };
        ConvGeom {
            batch,
            in_channels: c,
            in_hw,
            out_channels: c,
            out_hw,
            kernel_hw: k,
            stride,
            pad,
            dilation: dil,
            groups: c,
            x_strides: strides([batch, c, in_hw[0], in_hw[1]], order(x_nhwc)),
            y_strides: strides([batch, c, out_hw[0], out_hw[1]], order(y_nhwc)),
        }
    }

    /// The epilogue parts a case uses: bias, residual, activation, clamp.
    #[derive(Clone, Copy, Debug)]
    struct Parts(bool, bool, Activation, bool);

    /// Direct f64 loop: `clamp(act(Σ x·w + bias + residual))` at every output index.
    fn naive(g: &ConvGeom, x: &[f32], w: &[f32], bias: &[f32], res: &[f32], p: Parts) -> Vec<(usize, f64)> {
        let ([kh, kw], [oh, ow]) = (g.kernel_hw, g.out_hw);
        let (xs, ys) = (g.x_strides, g.y_strides);
        let mut out = Vec::new();
        for n in 0..g.batch {
            for ch in 0..g.out_channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut s = if p.0 { bias[ch] as f64 } else { 0.0 };
                        for ty in 0..kh {
                            for tx in 0..kw {
                                let iy = (oy * g.stride[0] + ty * g.dilation[0]) as i64 - g.pad[0] as i64;
                                let ix = (ox * g.stride[1] + tx * g.dilation[1]) as i64 - g.pad[1] as i64;
                                if iy < 0 || ix < 0 || iy >= g.in_hw[0] as i64 || ix >= g.in_hw[1] as i64 {
                                    continue;
                                }
                                let xv = x[n * xs[0] + ch * xs[1] + iy as usize * xs[2] + ix as usize * xs[3]];
                                s += xv as f64 * w[(ch * kh + ty) * kw + tx] as f64;
                            }
                        }
                        let i = n * ys[0] + ch * ys[1] + oy * ys[2] + ox * ys[3];
                        if p.1 {
                            s += res[i] as f64;
                        }
                        s = act_f64(p.2, s);
                        if p.3 {
                            s = s.clamp(-0.5, 0.7);
                        }
                        out.push((i, s));
                    }
                }
            }
        }
        out
    }

    /// Runs `g` through `conv2d_f32` and then through every ISA path on 1 thread, 2 threads and
    /// the global pool, each against the f64 loop.
    fn check(rng: &mut Lcg, g: &ConvGeom, p: Parts, pool: &rayon::ThreadPool) {
        let c = g.out_channels;
        let [kh, kw] = g.kernel_hw;
        let x: Vec<f32> = (0..g.batch * c * g.in_hw[0] * g.in_hw[1]).map(|_| rng.value()).collect();
        // OIHW weights (I = 1).
        let w: Vec<f32> = (0..c * kh * kw).map(|_| rng.value()).collect();
        let bias: Vec<f32> = (0..c).map(|_| rng.value()).collect();
        let len = g.batch * c * g.out_hw[0] * g.out_hw[1];
        let res: Vec<f32> = (0..len).map(|_| rng.value()).collect();
        let epi = ConvEpilogue {
            bias: p.0.then_some(&bias[..]),
            residual: p.1.then_some(&res[..]),
            activation: p.2,
            clamp: p.3.then_some((-0.5, 0.7)),
        };
        let filter = ConvFilter::new(g, &w, [kh * kw, kh * kw, kw, 1]).unwrap();
        assert_eq!(filter.describe(), "depthwise direct");
        let FilterKind::Depthwise(wt) = &filter.kind else { unreachable!("depthwise filter") };
        let want = naive(g, &x, &w, &bias, &res, p);
        assert_eq!(want.len(), len);
        let compare = |y: &[f32], what: &str| {
            for &(i, v) in &want {
                let tol = 1e-5 * (kh * kw) as f64 + 1e-6 * v.abs();
                assert!((y[i] as f64 - v).abs() <= tol, "{what} {g:?} {p:?} at {i}: {} vs {v}", y[i]);
            }
        };
        let mut y = vec![f32::NAN; len];
        conv2d_f32(g, &x, &filter, &epi, &mut y, None).unwrap();
        compare(&y, "default");
        if len == 0 {
            return;
        }
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for threads in [1, 2] {
                let mut y = vec![f32::NAN; len];
                let out = OutPtr(y.as_mut_ptr());
                let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
                let p = if threads == 1 { &one } else { pool };
                p.install(|| depthwise_on(isa, g, &x, wt, &epi, out));
                compare(&y, isa.name());
            }
        }
    }

    #[test]
    fn deinterleave_matches_scalar_on_every_path() {
        let src: Vec<f32> = (0..200).map(|v| v as f32).collect();
        for n in 0..90 {
            let want_e: Vec<f32> = (0..n).map(|j| (2 * j) as f32).collect();
            let want_o: Vec<f32> = (0..n).map(|j| (2 * j + 1) as f32).collect();
            type Path = fn(&[f32], &mut [f32], &mut [f32]);
            let mut paths: Vec<Path> = vec![deinterleave::<GENERIC, true>];
            #[cfg(target_arch = "x86_64")]
            {
                if FusedIsa::avx2_available() {
                    paths.push(deinterleave::<AVX2, true>);
                }
                if FusedIsa::avx512_available() {
                    paths.push(deinterleave::<AVX512, true>);
                }
            }
            for f in paths {
                let (mut e, mut o) = (vec![-1.0; n], vec![-1.0; n]);
                f(&src[..2 * n], &mut e, &mut o);
                assert_eq!((&e, &o), (&want_e, &want_o), "n = {n}");
            }
            // Even values only, from a source that ends at the last one read.
            let mut d = vec![-1.0; n];
            gather_even(&mut d, &src[..(2 * n).saturating_sub(1)]);
            assert_eq!(d, want_e, "n = {n}");
        }
    }

    #[test]
    fn matches_naive_loop_on_fixed_shapes() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(3);
        let all = Parts(true, true, Activation::Relu, true);
        let relu6 = Parts(true, false, Activation::Relu, true);
        for (xl, yl) in [(false, false), (true, true), (false, true), (true, false)] {
            // MobileNetV2's shapes, shrunk: 3x3 stride 1 and 2, narrow planes, odd channel counts.
            let gs = [
                geom(2, 17, [15, 15], [3, 3], [[2, 2], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 33, [14, 14], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(3, 5, [7, 7], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 3, [40, 37], [3, 3], [[2, 2], [1, 1], [0, 0], [1, 1]], (xl, yl)),
                // Stride 3, dilation, asymmetric padding, 5x5, 1x1 kernel.
                geom(1, 4, [11, 10], [3, 2], [[3, 3], [2, 0], [0, 2], [1, 1]], (xl, yl)),
                geom(2, 6, [9, 9], [3, 3], [[1, 2], [2, 1], [1, 2], [2, 3]], (xl, yl)),
                geom(1, 9, [8, 6], [5, 5], [[1, 1], [2, 2], [2, 2], [1, 1]], (xl, yl)),
                geom(1, 2, [6, 7], [1, 1], [[2, 1], [0, 0], [0, 0], [1, 1]], (xl, yl)),
                // 1x1 image, kernel larger than the input, zero batch, empty output.
                geom(3, 7, [1, 1], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 3, [2, 2], [5, 5], [[1, 1], [2, 2], [2, 2], [1, 1]], (xl, yl)),
                geom(0, 4, [4, 4], [3, 3], [[1, 1], [1, 1], [1, 1], [1, 1]], (xl, yl)),
                geom(1, 4, [2, 2], [5, 5], [[1, 1], [0, 0], [0, 0], [1, 1]], (xl, yl)),
                // Dilation reaching far into the padding (the plain loop).
                geom(2, 3, [3, 4], [3, 3], [[1, 2], [60, 55], [60, 50], [50, 45]], (xl, yl)),
            ];
            for g in &gs {
                check(&mut rng, g, all, &pool);
                check(&mut rng, g, relu6, &pool);
            }
        }
    }

    #[test]
    fn matches_naive_loop_on_random_shapes_and_epilogues() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let mut rng = Lcg(11);
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..150 {
            let c = 2 + rng.below(39);
            let in_hw = [1 + rng.below(20), 1 + rng.below(40)];
            let k = [1 + rng.below(4), 1 + rng.below(4)];
            let stride = [1 + rng.below(3), 1 + rng.below(3)];
            let dil = [1 + rng.below(2), 1 + rng.below(2)];
            let pad = [rng.below(3), rng.below(3)];
            let pad_hi = [rng.below(3), rng.below(3)];
            let batch = [0, 1, 1, 3][rng.below(4)];
            let (xl, yl) = (rng.below(2) == 1, rng.below(2) == 1);
            let g = geom(batch, c, in_hw, k, [stride, pad, pad_hi, dil], (xl, yl));
            let p = Parts(rng.below(2) == 1, rng.below(2) == 1, acts[rng.below(4)], rng.below(2) == 1);
            check(&mut rng, &g, p, &pool);
        }
    }
}
