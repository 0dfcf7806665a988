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
//! dense, else row by row.

use super::{Finish, Job, Lanes, Portable, Scratch, window3_column};

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
        if scratch.buf.len() < wlen + ilen + olen + 16 {
            scratch.buf.resize(wlen + ilen + olen + 16, 0.0);
        }
        let skew = scratch.buf.as_ptr().align_offset(64).min(16);
        let (wb, rest) = scratch.buf[skew..].split_at_mut(wlen);
        let (ib, ob) = rest.split_at_mut(ilen);
        for t in 0..taps {
            for j in 0..l {
                wb[t * l + j] = if j < cn { self.w[t * c + c0 + j] } else { 0.0 };
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
            // The strip's padding (its interior is overwritten below).
            strip[..top * pw * l].fill(0.0);
            strip[(top + inside) * pw * l..].fill(0.0);
            for r in top..top + inside {
                let row = &mut strip[r * pw * l..(r + 1) * pw * l];
                row[..left * l].fill(0.0);
                row[(left + cols_in) * l..].fill(0.0);
            }
            // The input rows into the strip.
            if inside > 0 && cols_in > 0 {
                if sh == iw && cols_in == iw {
                    let run = Run { at: iy0 * iw, n: inside * iw, row: top, wrap: iw };
                    // SAFETY: the caller's contract; `validate` checked the planes' extent (rows
                    // below `ih` of dense rows of `iw`); the strip holds (top + row, pl + col)
                    // for every row < inside and column < cols_in.
                    unsafe { self.block_in::<S>(xp, sc, cn, run, strip, [pl, pw, cols_in]) };
                } else {
                    for r in 0..inside {
                        let run = Run { at: (iy0 + r) * sh, n: cols_in, row: top + r, wrap: usize::MAX };
                        // SAFETY: as above, one row at a time.
                        unsafe { self.block_in::<S>(xp, sc, cn, run, strip, [pl, pw, cols_in]) };
                    }
                }
            }
            let (ibp, wbp, obp) = (strip.as_ptr(), wb.as_ptr(), ob.as_mut_ptr());
            // 3-wide windows at stride 1: each input vector of a whole block's row is loaded
            // once for the three taps that read it (one load per 2.4 FMAs instead of 1.1).
            let three = kw == 3 && dx == 1 && sx == 1;
            for oy in 0..n {
                for ox0 in (0..ow).step_by(R) {
                    let nr = R.min(ow - ox0);
                    // Columns past the row's end repeat its last one (computed, not stored).
                    let cols: [usize; R] = std::array::from_fn(|r| (ox0 + r).min(ow - 1) * sx * l);
                    let mut acc = [bias; R];
                    if three && nr == R {
                        for ty in 0..kh {
                            // SAFETY: strip row oy·sy + ty·dy < rows, and columns ox0 + j ≤ ox0 +
                            // R + 1 ≤ ow + 1 < pw (`extent`: pw ≥ ow + 2 for this window); the
                            // weights hold taps × L values.
                            unsafe {
                                let wt = wbp.add(ty * 3 * l);
                                let w3 = [S::load(wt), S::load(wt.add(l)), S::load(wt.add(2 * l))];
                                let q = ibp.add((oy * sy + ty * dy) * pw * l + ox0 * l);
                                for j in 0..R + 2 {
                                    window3_column(&mut acc, &w3, j, S::load(q.add(j * l)));
                                }
                            }
                        }
                    } else {
                        for ty in 0..kh {
                            let row = (oy * sy + ty * dy) * pw * l;
                            for tx in 0..kw {
                                // SAFETY: strip row oy·sy + ty·dy < rows and column ox·sx + tx·dx <
                                // pw for every output (oy, ox) of the strip and tap (`extent`); the
                                // weights hold taps × L values.
                                unsafe {
                                    let wv = S::load(wbp.add((ty * kw + tx) * l));
                                    let q = ibp.add(row + tx * dx * l);
                                    for r in 0..R {
                                        acc[r] = S::load(q.add(cols[r])).fmadd(wv, acc[r]);
                                    }
                                }
                            }
                        }
                    }
                    if let &Finish::Registers { relu, clamp } = &fin {
                        for a in acc.iter_mut().take(nr) {
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
                    // SAFETY: pixels oy·ow + ox0 + r < sr·ow of the output strip for r < nr.
                    // (Whole blocks are stored register by register: a loop of variable length
                    // over the spilled block would become a call to memcpy.)
                    unsafe {
                        let at = obp.add((oy * ow + ox0) * l);
                        if nr == R {
                            for (r, a) in acc.iter().enumerate() {
                                a.store(at.add(r * l));
                            }
                        } else {
                            for (r, a) in acc.iter().enumerate().take(nr) {
                                a.store(at.add(r * l));
                            }
                        }
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
    /// run's first pixel at strip row `run.row`.
    ///
    /// # Safety
    /// The CPU has `S`'s features; `run` lies inside each of the `cn` planes; pixel (row, col)
    /// of the run with col < cols lands inside `ib`.
    #[inline(always)]
    unsafe fn block_in<S: Transpose>(
        &self,
        xp: *const f32,
        sc: usize,
        cn: usize,
        run: Run,
        ib: &mut [f32],
        [pl, pw, cols]: [usize; 3],
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
        let (mut row, mut col) = (run.row, 0);
        let mut p = 0;
        while p < run.n {
            let n = l.min(run.n - p);
            // SAFETY: the caller's contract: pixels at..at + n of planes 0..cn are inside `x`
            // (masked to the first n lanes when the run ends).
            unsafe { load_pixels::<S>(&mut v, xp.add(run.at + p), sc, cn, n) };
            for vi in v.iter().take(n) {
                if col < cols {
                    let at = (row * pw + col + pl) * l;
                    assert!(at + l <= ib.len(), "depthwise block too short");
                    // SAFETY: checked just above.
                    unsafe { vi.store(ib.as_mut_ptr().add(at)) };
                }
                col += 1;
                if col == run.wrap {
                    (row, col) = (row + 1, 0);
                }
            }
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
            // The last transpose reads up to L pixels past the block's end: its slack.
            assert!((first + p + l) * l <= ob.len(), "depthwise output block too short");
            // SAFETY: checked just above; the CPU has S's features.
            unsafe {
                for (i, vi) in v.iter_mut().enumerate().take(l) {
                    *vi = S::load(ob.as_ptr().add((first + p + i) * l));
                }
                S::transpose(&mut v[..l]);
            }
            for (j, &vj) in v.iter().enumerate().take(cn) {
                let at = base + j * yc + run.at + p;
                // SAFETY: the caller's contract: elements at..at + n are this unit's, and dense.
                unsafe {
                    match fin {
                        Finish::Registers { .. } => vj.store_first(self.out.0.add(at), n),
                        Finish::Spill => self.store_vec(fin, vj, at, n),
                    }
                }
            }
            p += n;
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
