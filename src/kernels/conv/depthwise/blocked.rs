//! The channel-blocked path of the depthwise convolution: channels-first planes are transposed,
//! `L` channels at a time, into a zero-padded `[row][column][L]` scratch, convolved there with
//! the channels as the vector lanes (every lane useful whatever the plane's width, stride or
//! dilation), and transposed back.
//!
//! One unit is one (image, block of `L` channels). Its scratch holds the block's weights as
//! `[tap][L]`, the padded input and the output block as `[pixel][L]`. A register block is [`R`]
//! output columns of one row: each tap loads one weight vector and one input vector per column,
//! except for windows 3 columns wide at stride 1 (whole blocks), where each window row loads its
//! three weight vectors and each input column once, for the taps of every output that reads it.
//! The bias starts the accumulators; the rest of the epilogue is applied to each vector of the
//! transpose back, as the plane paths store theirs ([`Job::store_vec`]). Both transposes are
//! `L × L` register transposes ([`Transpose`]) over runs of pixels: the whole plane when it is
//! dense, else row by row; the pixels of runs of narrow rows land at places read from a table the
//! task's scratch keeps. While a small plane's rows are convolved, the next unit's planes are
//! prefetched into L2. Every loop over an array of vectors is written out at constant indices
//! (`each16!`), and each ISA's body is a function of its own, so that the vectors stay in
//! registers.

use super::{Finish, Job, Lanes, Portable, Scratch, each16, window3_column};

/// Output columns per register block (independent accumulator chains).
const R: usize = 8;

/// Bytes a strip's input and output blocks may hold together: planes whose blocks are larger
/// are convolved a strip of output rows at a time, so that both stay in the core's L2 cache
/// between the transposes and the convolution.
pub(super) const STRIP_BYTES: usize = 160 << 10;

/// Vectors that can be transposed as an `L × L` matrix in registers.
///
/// Safety of every method: the CPU has the type's features.
pub(in crate::kernels::conv) trait Transpose: Lanes {
    /// Transposes the matrix whose row `i` is `v[i]` (`v.len() == L`): afterwards lane `j` of
    /// `v[i]` is what lane `i` of `v[j]` was.
    unsafe fn transpose(v: &mut [Self]);
}

impl Transpose for Portable {
    #[inline(always)]
    unsafe fn transpose(v: &mut [Self]) {
        for i in 0..8 {
            for j in i + 1..8 {
                let t = v[i].0[j];
                v[i].0[j] = v[j].0[i];
                v[j].0[i] = t;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Transpose for std::arch::x86_64::__m256 {
    #[inline(always)]
    unsafe fn transpose(v: &mut [Self]) {
        use std::arch::x86_64::*;
        let v: &mut [__m256; 8] = v.try_into().expect("8 rows");
        // SAFETY: the caller's contract: AVX2 is there (the shuffles are AVX).
        unsafe {
            // Pairs of rows interleaved: t[2i] holds (r0 r1) columns 0 1 | 4 5, t[2i + 1] 2 3 | 6 7.
            let mut t = [_mm256_setzero_ps(); 8];
            for i in 0..4 {
                t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
                t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
            }
            // Four rows per 128-bit half: u[4g + k] holds rows 4g..4g+4 of columns k | k + 4.
            let mut u = [_mm256_setzero_ps(); 8];
            for g in 0..2 {
                let (a, b, c, d) = (t[4 * g], t[4 * g + 2], t[4 * g + 1], t[4 * g + 3]);
                let (a, b) = (_mm256_castps_pd(a), _mm256_castps_pd(b));
                let (c, d) = (_mm256_castps_pd(c), _mm256_castps_pd(d));
                u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
                u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
                u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(c, d));
                u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(c, d));
            }
            // The two halves of each column joined.
            for k in 0..4 {
                v[k] = _mm256_permute2f128_ps::<0x20>(u[k], u[4 + k]);
                v[k + 4] = _mm256_permute2f128_ps::<0x31>(u[k], u[4 + k]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Transpose for std::arch::x86_64::__m512 {
    #[inline(always)]
    unsafe fn transpose(v: &mut [Self]) {
        use std::arch::x86_64::*;
        let v: &mut [__m512; 16] = v.try_into().expect("16 rows");
        // SAFETY: the caller's contract: AVX-512F is there.
        unsafe {
            // Pairs of rows interleaved per 128-bit lane.
            let mut t = [_mm512_setzero_ps(); 16];
            for i in 0..8 {
                t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
                t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
            }
            // Four rows per 128-bit lane: u[4g + k] holds rows 4g..4g+4 of columns k, k + 4,
            // k + 8 and k + 12 in its four lanes.
            let mut u = [_mm512_setzero_ps(); 16];
            for g in 0..4 {
                let (a, b, c, d) = (t[4 * g], t[4 * g + 2], t[4 * g + 1], t[4 * g + 3]);
                u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
                u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
                u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(c), _mm512_castps_pd(d)));
                u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(c), _mm512_castps_pd(d)));
            }
            // The 128-bit lanes of the four row groups gathered per column.
            for k in 0..4 {
                let lo01 = _mm512_shuffle_f32x4::<0x44>(u[k], u[4 + k]);
                let hi01 = _mm512_shuffle_f32x4::<0xEE>(u[k], u[4 + k]);
                let lo23 = _mm512_shuffle_f32x4::<0x44>(u[8 + k], u[12 + k]);
                let hi23 = _mm512_shuffle_f32x4::<0xEE>(u[8 + k], u[12 + k]);
                v[k] = _mm512_shuffle_f32x4::<0x88>(lo01, lo23);
                v[k + 4] = _mm512_shuffle_f32x4::<0xDD>(lo01, lo23);
                v[k + 8] = _mm512_shuffle_f32x4::<0x88>(hi01, hi23);
                v[k + 12] = _mm512_shuffle_f32x4::<0xDD>(hi01, hi23);
            }
        }
    }
}

/// Rows and columns of the padded input a unit reads: the window's reach from the first to the
/// last output.
pub(super) fn extent(g: &crate::kernels::conv::ConvGeom) -> Option<(usize, usize)> {
    let reach = |a: usize| -> Option<usize> {
        let last = g.out_hw[a].checked_sub(1)?.checked_mul(g.stride[a])?;
        last.checked_add(g.kernel_hw[a].checked_sub(1)?.checked_mul(g.dilation[a])?)?.checked_add(1)
    };
    Some((reach(0)?, reach(1)?))
}

/// A run of pixels of a plane: `n` pixels from the start of row `row`, which continue on the
/// next row after `wrap` columns, at element `at` of the plane.
#[derive(Clone, Copy)]
struct Run {
    at: usize,
    n: usize,
    row: usize,
    wrap: usize,
}

impl Job<'_> {
    /// [`Job::plane_block`] on AVX-512 vectors, compiled as a function of its own: inlined into
    /// the unit body beside every other path, its loop state lived on the stack.
    ///
    /// # Safety
    /// As [`Job::plane_block`], on a CPU with AVX-512F, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[inline(never)]
    pub(super) unsafe fn plane_block_avx512(
        &self,
        img: usize,
        cb: usize,
        out_rows: std::ops::Range<usize>,
        scratch: &mut Scratch,
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.plane_block::<std::arch::x86_64::__m512>(img, cb, out_rows, scratch) }
    }

    /// [`Job::plane_block`] on AVX2 vectors, a function of its own (see above).
    ///
    /// # Safety
    /// As [`Job::plane_block`], on a CPU with AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    #[inline(never)]
    pub(super) unsafe fn plane_block_avx2(
        &self,
        img: usize,
        cb: usize,
        out_rows: std::ops::Range<usize>,
        scratch: &mut Scratch,
    ) {
        // SAFETY: the caller's contract.
        unsafe { self.plane_block::<std::arch::x86_64::__m256>(img, cb, out_rows, scratch) }
    }

    /// Output rows `out_rows` of channel block `cb` of image `img` on the vectors `S` (see the
    /// module doc).
    ///
    /// # Safety
    /// The CPU has `S`'s features; `self.blocked` holds (channels-first input and output with
    /// dense rows, an [`extent`]).
    #[inline(always)]
    pub(super) unsafe fn plane_block<S: Transpose>(
        &self,
        img: usize,
        cb: usize,
        out_rows: std::ops::Range<usize>,
        scratch: &mut Scratch,
    ) {
        let g = self.geom;
        let l = S::L;
        let c = g.out_channels;
        let c0 = cb * l;
        let cn = l.min(c - c0);
        let ([ih, iw], [oh, ow], [kh, kw]) = (g.in_hw, g.out_hw, g.kernel_hw);
        let ([sy, sx], [dy, dx], [pt, pl]) = (g.stride, g.dilation, g.pad);
        if oh == 0 || ow == 0 {
            return;
        }
        let (ph, pw) = extent(g).expect("checked by `depthwise_on`");
        let taps = kh * kw;
        // Output rows per strip: the whole plane when its blocks fit the budget, else as many
        // rows as do (at least one).
        let reach = (kh - 1) * dy + 1;
        let in_rows = |n: usize| (n - 1) * sy + reach;
        let row_bytes = |n: usize| (in_rows(n) * pw + n * ow) * l * 4;
        let budget = self.strip_bytes;
        let sr = if row_bytes(oh) <= budget {
            oh
        } else {
            (1..oh).take_while(|&n| row_bytes(n) <= budget).last().unwrap_or(1)
        };
        debug_assert!(in_rows(oh) == ph);
        // Weights, padded input strip, output strip (plus one transpose's worth of slack: the
        // last run's final transpose loads L pixel vectors).
        let (wlen, ilen, olen) = (taps * l, in_rows(sr) * pw * l, (sr * ow + l) * l);
        // Each part starts on a cache line (64 bytes = 16 values; the parts are multiples of L
        // values): a vector load across two lines would cost two.
        if scratch.blk.len() < wlen + ilen + olen + 16 {
            scratch.blk.resize(wlen + ilen + olen + 16, 0.0);
        }
        let skew = scratch.blk.as_ptr().align_offset(64).min(16);
        let (pad_key, places) = (&mut scratch.pad_key, &mut scratch.places);
        let (wb, rest) = scratch.blk[skew..].split_at_mut(wlen);
        let (ib, ob) = rest.split_at_mut(ilen);
        // The block's weights as [tap][L] (lanes past `cn` zero), a vector per tap.
        assert!(taps * c <= self.w.len() && c0 + cn <= c, "depthwise weights too short");
        for t in 0..taps {
            // SAFETY: weights t·c + c0 .. + cn lie inside `w` (asserted above; masked to the
            // first cn lanes when the block is partial); `wb` holds taps × L values.
            unsafe {
                let src = self.w.as_ptr().add(t * c + c0);
                let v = if cn == l { S::load(src) } else { S::load_masked(src, S::mask(0, cn)) };
                v.store(wb[t * l..].as_mut_ptr());
            }
        }
        // SAFETY: the CPU has S's features (the caller's contract); the bias holds `c` values,
        // lanes c0..c0 + cn of it are read.
        let bias = unsafe {
            match self.epi.bias {
                Some(b) => S::load_masked(b[c0..].as_ptr(), S::mask(0, cn)),
                None => S::splat(0.0),
            }
        };
        // SAFETY: the CPU has S's features (the caller's contract).
        let fin = unsafe { Finish::<S>::of(self.epi) };
        let [sn, sc, sh, _] = g.x_strides;
        let xp = self.x[img * sn + c0 * sc..].as_ptr();
        let [yn, yc, yh, _] = g.y_strides;
        let base = img * yn + c0 * yc;
        // The next unit's planes (the next channel block of the image, or the next image's
        // first: `cn` planes on when the input is dense), asked for into L2 while this unit's
        // multiply-adds run, a share of their lines per output row, when the planes are small
        // enough to be taken whole: a unit reads its planes as L streams, which the hardware
        // prefetchers start cold on every unit (best of six alternated runs, one Zen 4 thread,
        // batch 8: 960 channels at 7² 0.262 → 0.254 ms, 576 at 14² stride 2 0.309 → 0.287).
        let span = l * sc;
        let next = (sh == iw && sc == ih * iw && span * 4 <= PREFETCH_BYTES && sr == oh)
            .then(|| (xp.wrapping_add(cn * sc), (span / 16).div_ceil(oh)));
        let left = pl.min(pw);
        let cols_in = iw.min(pw.saturating_sub(pl));
        let end = out_rows.end.min(oh);
        for oy0 in (out_rows.start..end).step_by(sr) {
            let n = sr.min(end - oy0);
            let rows = in_rows(n);
            // Padded rows p0..p0 + rows; input rows iy0..iy1 of them hold data.
            let p0 = oy0 * sy;
            let iy0 = p0.saturating_sub(pt).min(ih);
            let iy1 = (p0 + rows).saturating_sub(pt).min(ih).max(iy0);
            let (top, inside) = ((iy0 + pt).saturating_sub(p0).min(rows), iy1 - iy0);
            let strip = &mut ib[..rows * pw * l];
            // The strip's padding (its interior is overwritten below), unless the last strip
            // convolved in this buffer had the same place and layout: only this path writes the
            // buffer, and only inside the interior, so its padding is still zero.
            let key = [strip.as_ptr() as usize, rows, pw, l, top, inside, left, cols_in];
            if *pad_key != key {
                strip[..top * pw * l].fill(0.0);
                strip[(top + inside) * pw * l..].fill(0.0);
                for r in top..top + inside {
                    let row = &mut strip[r * pw * l..(r + 1) * pw * l];
                    row[..left * l].fill(0.0);
                    row[(left + cols_in) * l..].fill(0.0);
                }
                *pad_key = key;
            }
            // The input rows into the strip.
            if inside > 0 && cols_in > 0 {
                if sh == iw && cols_in == iw {
                    let run = Run { at: iy0 * iw, n: inside * iw, row: top, wrap: iw };
                    // SAFETY: the caller's contract; `validate` checked the planes' extent (rows
                    // below `ih` of dense rows of `iw`); the strip holds (top + row, pl + col)
                    // for every row < inside and column < cols_in.
                    unsafe { self.block_in::<S>((xp, sc, cn), run, strip, [pl, pw, cols_in], &mut *places) };
                } else {
                    for r in 0..inside {
                        let run = Run { at: (iy0 + r) * sh, n: cols_in, row: top + r, wrap: usize::MAX };
                        // SAFETY: as above, one row at a time.
                        unsafe { self.block_in::<S>((xp, sc, cn), run, strip, [pl, pw, cols_in], &mut *places) };
                    }
                }
            }
            let rows = Rows {
                ibp: strip.as_ptr(),
                wbp: wb.as_ptr(),
                obp: ob.as_mut_ptr(),
                ow,
                pw,
                kernel: [kh, kw],
                stride: [sy, sx],
                dilation: [dy, dx],
                bias,
                fin: &fin,
                // (With the plane in one strip, this loop runs once.)
                next,
            };
            // Blocks of 7 columns where they divide the row and 8 do not (MobileNet's 7-, 14-,
            // 28- and 112-wide planes): no block computes columns it does not store, and at
            // stride 1 every 3-wide window block takes the shared-load path (576 channels 14²
            // stride 2, batch 8, one Zen 4 thread: 0.263 → 0.253 ms).
            let sevens = ow % R != 0 && ow % 7 == 0;
            for oy in 0..n {
                // SAFETY: the caller's contract (features); the strip holds the padded input
                // rows of output rows 0..n, the output block n·ow pixels, the weights taps × L.
                unsafe {
                    if sevens {
                        rows.row::<7>(oy);
                    } else {
                        rows.row::<R>(oy);
                    }
                }
            }
            // The output strip back into the planes, the rest of the epilogue on the way.
            if yc == 1 && c > 1 {
                // Channels-last output: the strip's pixels are its pixels' channel runs.
                let yw = g.y_strides[3];
                for r in 0..n {
                    for ox in 0..ow {
                        let at = base + (oy0 + r) * yh + ox * yw;
                        // SAFETY: the caller's contract; `validate` checked the output's extent;
                        // this unit alone writes channels c0..c0 + cn of image `img`, here
                        // those of pixel (oy0 + r, ox); pixel r·ow + ox is in the output strip.
                        unsafe {
                            let v = S::load(ob.as_ptr().add((r * ow + ox) * l));
                            match fin {
                                Finish::Registers { .. } => v.store_first(self.out.0.add(at), cn),
                                Finish::Spill => {
                                    let mut tmp = [0.0; 16];
                                    v.store(tmp.as_mut_ptr());
                                    let vals = &mut tmp[..cn];
                                    if self.epi.residual.is_none() {
                                        self.epi.activate_slice(vals);
                                    }
                                    self.store(vals, at, 1);
                                }
                            }
                        }
                    }
                }
            } else if yh == ow {
                let run = Run { at: oy0 * ow, n: n * ow, row: 0, wrap: ow };
                // SAFETY: the caller's contract; `validate` checked the output's extent; this
                // unit alone writes channels c0..c0 + cn of image `img`.
                unsafe { self.block_out::<S>(ob, base, cn, run, &fin) };
            } else {
                for r in 0..n {
                    let run = Run { at: (oy0 + r) * yh, n: ow, row: r, wrap: usize::MAX };
                    // SAFETY: as above, one row at a time.
                    unsafe { self.block_out::<S>(ob, base, cn, run, &fin) };
                }
            }
        }
    }

    /// Transposes `run` of the `cn` planes at `xp` (channel stride `sc`) into the padded strip
    /// `ib` (`[pl, pw, cols]`: its left padding, row length, and the input columns it holds), the
    /// run's first pixel at strip row `run.row`. A run of rows narrower than a vector is a whole
    /// dense plane (every column held); its pixels' places come from `places`.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `run` lies inside each of the `cn` planes; pixel (row, col)
    /// of the run with col < cols lands inside `ib`.
    #[inline(always)]
    unsafe fn block_in<S: Transpose>(
        &self,
        (xp, sc, cn): (*const f32, usize, usize),
        run: Run,
        ib: &mut [f32],
        [pl, pw, cols]: [usize; 3],
        places: &mut Places,
    ) {
        let l = S::L;
        // SAFETY: the caller's contract (features).
        let mut v = [unsafe { S::splat(0.0) }; 16];
        if run.wrap >= l {
            // Rows at least a vector wide: row by row, each cut into vectors of pixels (the last
            // one masked), which land side by side in the strip.
            let width = run.wrap.min(run.n);
            let cols = width.min(cols);
            for r in 0..run.n / width {
                let start = ((run.row + r) * pw + pl) * l;
                assert!(start + cols * l <= ib.len(), "depthwise block too short");
                let mut p = 0;
                while p < cols {
                    let n = l.min(cols - p);
                    // SAFETY: the caller's contract: pixels at + r·width + p .. + n of planes
                    // 0..cn are inside `x` (masked to the first n lanes when the row ends); the
                    // strip holds the row's `cols` vectors (asserted above).
                    unsafe {
                        load_pixels::<S>(&mut v, xp.add(run.at + r * width + p), sc, cn, n);
                        let dst = ib.as_mut_ptr().add(start + p * l);
                        // Whole vectors in a loop of constant length (registers, no memcpy).
                        if n == l {
                            for (i, vi) in v.iter().enumerate().take(l) {
                                vi.store(dst.add(i * l));
                            }
                        } else {
                            for (i, vi) in v.iter().enumerate().take(n) {
                                vi.store(dst.add(i * l));
                            }
                        }
                    }
                    p += n;
                }
            }
            return;
        }
        // Narrow rows come only as a whole dense plane (`plane_block`): every pixel lands in
        // the strip, at a place read from the table (no branch per pixel).
        debug_assert!(cols >= run.wrap, "depthwise narrow run with columns outside the strip");
        let pos = places.of(run, pw, pl, l);
        // The places grow with the pixel: the last is the largest.
        assert!(pos.last().is_none_or(|&at| at + l <= ib.len()), "depthwise block too short");
        let dst = ib.as_mut_ptr();
        let mut p = 0;
        while p < run.n {
            let n = l.min(run.n - p);
            if n <= TAIL {
                // A tail of one or two pixels: value by value, not a whole transpose.
                for (i, &a) in pos[p..p + n].iter().enumerate() {
                    let px = &mut ib[a..a + l];
                    for (j, o) in px.iter_mut().enumerate() {
                        // SAFETY: the caller's contract: pixel at + p + i of planes below cn is
                        // inside `x`.
                        *o = if j < cn { unsafe { *xp.add(j * sc + run.at + p + i) } } else { 0.0 };
                    }
                }
                break;
            }
            let at = &pos[p..p + n];
            // SAFETY: the caller's contract: pixels at..at + n of planes 0..cn are inside `x`
            // (masked to the first n lanes when the run ends); every place + L ≤ ib.len()
            // (asserted above).
            unsafe { load_pixels::<S>(&mut v, xp.add(run.at + p), sc, cn, n) };
            // At constant indices of `v` (see `each16`).
            each16!(i => {
                if let (Some(vi), Some(&a)) = (v.get(i), at.get(i)) {
                    // SAFETY: as above.
                    unsafe { vi.store(dst.add(a)) };
                }
            });
            p += n;
        }
    }

    /// Transposes `run` of the output block `ob` (the sums with their bias, and with the
    /// epilogue already applied when `fin` is [`Finish::Registers`]) back into the `cn` output
    /// planes from element `base` (channel stride `yc`, columns dense); a [`Finish::Spill`]
    /// epilogue is applied by [`Job::store_vec`] on the way.
    ///
    /// # Safety
    /// The CPU has `S`'s features; the run's elements of the `cn` planes lie inside the output and
    /// belong to this unit; output columns are contiguous.
    #[inline(always)]
    unsafe fn block_out<S: Transpose>(&self, ob: &[f32], base: usize, cn: usize, run: Run, fin: &Finish<S>) {
        let l = S::L;
        let yc = self.geom.y_strides[1];
        let first = run.row * self.geom.out_hw[1];
        // SAFETY: the caller's contract (features).
        let mut v = [unsafe { S::splat(0.0) }; 16];
        let mut p = 0;
        while p < run.n {
            let n = l.min(run.n - p);
            if n <= TAIL && matches!(fin, Finish::Registers { .. }) {
                // A tail of one or two pixels: value by value, not a whole transpose.
                for i in 0..n {
                    let px = &ob[(first + p + i) * l..(first + p + i + 1) * l];
                    for (j, &v) in px.iter().enumerate().take(cn) {
                        // SAFETY: the caller's contract: element base + j·yc + run.at + p + i
                        // of the output is this unit's.
                        unsafe { *self.out.0.add(base + j * yc + run.at + p + i) = v };
                    }
                }
                break;
            }
            // The last transpose reads up to L pixels past the block's end: its slack.
            assert!((first + p + l) * l <= ob.len(), "depthwise output block too short");
            // SAFETY: checked just above; the CPU has S's features.
            // (At constant indices of `v`, see `each16`.)
            unsafe {
                let src = ob.as_ptr().add((first + p) * l);
                for (i, vi) in v.iter_mut().enumerate() {
                    if i < l {
                        *vi = S::load(src.add(i * l));
                    }
                }
                S::transpose(&mut v[..l]);
            }
            let out = self.out.0.wrapping_add(base + run.at + p);
            // SAFETY (each store): the caller's contract: elements at..at + n of the planes
            // below `cn` are this unit's, and dense.
            match fin {
                // At constant indices of `v` (see `each16`), one copy per case: whole vectors,
                // the masked tail. (With the epilogue's match inside each copy the AVX-512 body
                // was 137 KB of code: 0.336 against 0.244 ms at 960 channels 7², batch 8, one
                // Zen 4 thread.)
                Finish::Registers { .. } if n == l => each16!(j => {
                    if j < cn
                        && let Some(&vj) = v.get(j)
                    {
                        // SAFETY: see above.
                        unsafe { vj.store(out.add(j * yc)) };
                    }
                }),
                Finish::Registers { .. } => each16!(j => {
                    if j < cn
                        && let Some(&vj) = v.get(j)
                    {
                        // SAFETY: see above.
                        unsafe { vj.store_first(out.add(j * yc), n) };
                    }
                }),
                Finish::Spill => {
                    for (j, &vj) in v.iter().enumerate().take(cn) {
                        // SAFETY: see above.
                        unsafe { self.store_vec(fin, vj, base + j * yc + run.at + p, n) };
                    }
                }
            }
            p += n;
        }
    }
}

/// The places in a strip of the pixels of a narrow run ([`Job::block_in`]), kept in a task's
/// scratch between units, with the run and strip geometry they were built for.
#[derive(Default)]
pub(super) struct Places {
    at: Vec<usize>,
    key: [usize; 6],
}

impl Places {
    /// The place of each pixel of `run` in a strip of rows `pw` pixels wide with `pl` columns of
    /// left padding and `l` lanes per pixel (built when the geometry differs from the last).
    #[inline(always)]
    fn of(&mut self, run: Run, pw: usize, pl: usize, l: usize) -> &[usize] {
        let key = [run.row, run.n, run.wrap, pw, pl, l];
        if self.key != key {
            self.at.clear();
            self.at.extend((0..run.n).map(|k| ((run.row + k / run.wrap) * pw + pl + k % run.wrap) * l));
            self.key = key;
        }
        &self.at
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.at.capacity() * std::mem::size_of::<usize>()
    }
}

/// One strip's register blocks: the padded input, weights and output block of a unit (see
/// [`Job::plane_block`]) with the geometry its rows need.
struct Rows<'f, S: Lanes> {
    ibp: *const f32,
    wbp: *const f32,
    obp: *mut f32,
    ow: usize,
    pw: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    bias: S,
    fin: &'f Finish<S>,
    /// Lines to ask for: from where, and how many per output row.
    next: Option<(*const f32, usize)>,
}

/// Most pixels at the end of a run moved value by value instead of by a register transpose
/// (960 channels at 7²: 49 pixels, three whole transposes and one for a single pixel).
const TAIL: usize = 2;

/// Largest span of a channel block's input planes that a unit prefetches for the next.
const PREFETCH_BYTES: usize = 64 << 10;

/// Asks for the cache line of `p` into L2 (a hint: `p` need not point into a buffer).
#[inline(always)]
fn prefetch_l2(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing and never faults; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl<S: Lanes> Rows<'_, S> {
    /// Output row `oy` of the strip, `B` columns per register block.
    ///
    /// # Safety
    /// The CPU has `S`'s features; the strip at `ibp` holds the padded input rows of output row
    /// `oy` (`extent`), `obp` its `ow` pixels, `wbp` the block's taps × L weights.
    #[inline(always)]
    unsafe fn row<const B: usize>(&self, oy: usize) {
        let l = S::L;
        let (ibp, wbp, obp, ow, pw) = (self.ibp, self.wbp, self.obp, self.ow, self.pw);
        let ([kh, kw], [sy, sx], [dy, dx]) = (self.kernel, self.stride, self.dilation);
        // 3-wide windows at stride 1: each input vector of a whole block's row is loaded once
        // for the three taps that read it (one load per 2.4 FMAs instead of 1.1).
        let three = kw == 3 && dx == 1 && sx == 1;
        if let Some((at, per_row)) = self.next {
            for k in oy * per_row..(oy + 1) * per_row {
                prefetch_l2(at.wrapping_add(k * 16));
            }
        }
        for ox0 in (0..ow).step_by(B) {
            let nr = B.min(ow - ox0);
            // Columns past the row's end repeat its last one (computed, not stored).
            let cols: [usize; B] = std::array::from_fn(|r| (ox0 + r).min(ow - 1) * sx * l);
            let mut acc = [self.bias; B];
            if three && nr == B {
                for ty in 0..kh {
                    // SAFETY: strip row oy·sy + ty·dy < rows, and columns ox0 + j ≤ ox0 + B + 1
                    // ≤ ow + 1 < pw (`extent`: pw ≥ ow + 2 for this window); the weights hold
                    // taps × L values.
                    unsafe {
                        let wt = wbp.add(ty * 3 * l);
                        let w3 = [S::load(wt), S::load(wt.add(l)), S::load(wt.add(2 * l))];
                        let q = ibp.add((oy * sy + ty * dy) * pw * l + ox0 * l);
                        for j in 0..B + 2 {
                            window3_column(&mut acc, &w3, j, S::load(q.add(j * l)));
                        }
                    }
                }
            } else {
                for ty in 0..kh {
                    let row = (oy * sy + ty * dy) * pw * l;
                    for tx in 0..kw {
                        // SAFETY: strip row oy·sy + ty·dy < rows and column ox·sx + tx·dx < pw
                        // for every output (oy, ox) of the strip and tap (`extent`); the weights
                        // hold taps × L values.
                        unsafe {
                            let wv = S::load(wbp.add((ty * kw + tx) * l));
                            let q = ibp.add(row + tx * dx * l);
                            for r in 0..B {
                                acc[r] = S::load(q.add(cols[r])).fmadd(wv, acc[r]);
                            }
                        }
                    }
                }
            }
            if let &Finish::Registers { relu, clamp } = self.fin {
                // Every column (those past `nr` are not stored): constant indices.
                for a in acc.iter_mut() {
                    // SAFETY: the CPU has S's features (the caller's contract).
                    unsafe {
                        if relu {
                            *a = a.relu();
                        }
                        if let Some((lo, hi, zlo, zhi)) = clamp {
                            *a = a.clamp(lo, hi, zlo, zhi);
                        }
                    }
                }
            }
            // SAFETY (each store): pixels oy·ow + ox0 + r < sr·ow of the output strip for r <
            // nr. (Register by register, at constant indices: see `each16`.)
            let at = obp.wrapping_add((oy * ow + ox0) * l);
            each16!(r => {
                if r < nr
                    && let Some(a) = acc.get(r)
                {
                    // SAFETY: as above.
                    unsafe { a.store(at.add(r * l)) };
                }
            });
        }
    }
}

/// Loads `n` (≤ `S::L`) pixels from each of the `cn` planes at `xp` (channel stride `sc`; planes
/// `cn..S::L` read as zeros) into `v` and transposes them: `v[i]` holds pixel i of every plane.
///
/// # Safety
/// The CPU has `S`'s features; pixels 0..n of planes 0..cn at `xp` are readable (lanes past n
/// are masked off).
#[inline(always)]
unsafe fn load_pixels<S: Transpose>(v: &mut [S; 16], xp: *const f32, sc: usize, cn: usize, n: usize) {
    let l = S::L;
    // SAFETY: the caller's contract: each load reads pixels 0..n of a plane below cn.
    unsafe {
        let m = S::mask(0, n);
        for (j, vj) in v.iter_mut().enumerate().take(l) {
            let src = xp.add(j * sc);
            *vj = if j >= cn {
                S::splat(0.0)
            } else if n == l {
                S::load(src)
            } else {
                S::load_masked(src, m)
            };
        }
        S::transpose(&mut v[..l]);
    }
}
