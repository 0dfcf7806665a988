//! Direct convolution for strided windows over many input channels (ResNet's stride-2 3×3
//! layers), f32 forward, one group, channels-first input: output channels in the vector lanes,
//! input pixels broadcast, no im2col matrix and no GEMM.
//!
//! Each image's input is first copied into zero-padded planes (one per channel, as wide as the
//! windows reach), so that every read is inside and the padding needs no test. A tile is [`R`]
//! consecutive output pixels (in raster order, across rows) × up to 64 output channels (4
//! AVX-512 vectors, 2 AVX2 ones), its sums in registers from the bias on: per (channel, tap),
//! one vector load of the weights per 16 (8) channels and one broadcast per pixel, each pixel's
//! input read at its own offset (held in a register) plus the tap's. Whatever the stride, no
//! im2col matrix is built and no lane is spent on padding or on columns past the row's end. The
//! filter is packed once as `[64-channel block][ci][tap][64]`, so a tile's weights are one
//! contiguous stream.
//!
//! Images are split over the threads in groups (each group staged in its task's own scratch,
//! which stays in L2; small images are grouped so that a tile's pixels may come from two images
//! and the last tile of each is not mostly empty); with fewer groups than threads, all images
//! are staged first and the tiles split. Within a group, tiles run in chunks of pixels whose
//! plane rows fit in L2, each chunk's tiles for every 64-channel block in turn (the block's
//! weights reused across the chunk).
//!
//! A ReLU and a clamp are applied in registers; other activations and a residual per value
//! before the store. Outputs are written one value at a time (a tile's 6 × 64 values against
//! 6 × 64 × taps × channels multiply-adds); dense channels-first planes as runs of a tile's
//! consecutive pixels per channel.

use super::depthwise::{Lanes, Portable};
use super::{ConvEpilogue, ConvGeom, LineAligned, OP, OutPtr, copy_strided, for_chunks, for_units};
use crate::error::{Error, Result};
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::epilogue::act_f32;
use crate::kernels::gemm::{Activation, Scratch};

/// Output channels per packed filter block (4 AVX-512 vectors).
const CB: usize = 64;

/// Pixels per tile.
const R: usize = 6;

/// Fewest input channels for which [`qualifies`] picks this kernel (fewer take `stem`).
const MIN_CIN: usize = 8;

/// Largest staged image (f32 values) for which [`qualifies`] picks this kernel: 2 MiB.
const MAX_IMAGE: usize = 1 << 19;

/// Plane values a chunk of tiles should span (about 512 KiB, half a Zen core's L2).
const CHUNK_VALUES: usize = 1 << 17;

/// Most values of staged images a group holds (about 1 MiB), when it holds more than one image.
const GROUP_VALUES: usize = 1 << 18;

/// Whether the direct kernel is the faster path for `geom`: one group, at least [`MIN_CIN`]
/// channels-first input channels with dense rows, a stride of at least 2 on both axes, a kernel
/// larger than 1×1, and a staged image that stays small. Channels-last stages (which the kernel
/// can run, [`layout_ok`]) take the implicit GEMM instead, which reads their pixels' channels
/// in place: on a 2-vCPU Intel Xeon (Sapphire Rapids class), ResNet-18's three stride-2 3×3
/// layers channels-last at batch 1 on one thread took 1.12, 0.83 and 0.82 ms on it against
/// 1.36, 1.06 and 0.99 ms here (the model 22.6–23.0 against 23.6–23.7 ms; two threads and batch
/// 8 within noise), its 256 → 512 layer at batch 8 6.75 against 8.09 ms.
pub(super) fn qualifies(geom: &ConvGeom) -> bool {
    geom.groups == 1
        && geom.in_channels >= MIN_CIN
        && geom.x_strides[3] == 1
        && geom.x_strides[1] != 1
        && geom.stride.iter().all(|&s| s >= 2)
        && geom.taps() > 1
        && Layout::of(geom).is_some_and(|l| l.image <= MAX_IMAGE)
}

/// Whether the input is channels-first with dense rows, or input and output are both
/// channels-last (a convnet's channels-last stages, `passes::layout`; each plane is then
/// gathered at the channel stride when staged).
fn layout_ok(geom: &ConvGeom) -> bool {
    let first = geom.x_strides[3] == 1 && geom.x_strides[1] != 1;
    let last = geom.x_strides[1] == 1 && geom.y_strides[1] == 1;
    first || last
}

/// A filter packed for [`conv`]: `[ceil(cout / CB)][cin][taps][CB]` (zero beyond the last
/// channel), the taps in (kernel row, kernel column) order.
#[derive(Debug)]
pub(super) struct DirectFilter {
    cin: usize,
    cout: usize,
    taps: usize,
    w: LineAligned,
    /// The staging layout for the geometry the filter was packed for
    /// ([`DirectFilter::laid_out_for`]), so that the executions of a compiled model do not build
    /// it again.
    layout: Option<Layout>,
}

impl DirectFilter {
    /// Packs the `cout` × `cin` × `kh` × `kw` filter whose element (o, i, y, x) is `at(o, i, y, x)`.
    pub(super) fn new(
        cin: usize,
        cout: usize,
        kh: usize,
        kw: usize,
        at: impl Fn(usize, usize, usize, usize) -> f32,
    ) -> Self {
        let taps = kh * kw;
        let mut w = LineAligned::zeros(cout.div_ceil(CB) * cin * taps * CB);
        for (b, block) in w.chunks_exact_mut((cin * taps * CB).max(1)).enumerate() {
            for (k, strip) in block.chunks_exact_mut(CB).enumerate() {
                let (i, t) = (k / taps, k % taps);
                for (c, v) in strip.iter_mut().enumerate().take(cout.saturating_sub(b * CB)) {
                    *v = at(b * CB + c, i, t / kw, t % kw);
                }
            }
        }
        DirectFilter { cin, cout, taps, w, layout: None }
    }

    /// The filter with the staging layout of `geom` kept (another geometry builds its own).
    pub(super) fn laid_out_for(self, geom: &ConvGeom) -> Self {
        DirectFilter { layout: Layout::of(geom), ..self }
    }

    /// Bytes held.
    pub(super) fn size_bytes(&self) -> usize {
        self.w.len() * 4
    }
}

/// The padded planes of one image and each tap's offset into a plane.
#[derive(Debug)]
struct Layout {
    /// What the layout depends on: kernel size, stride, dilation, output size, input channels.
    key: [usize; 9],
    /// Plane rows and columns (the padded input the windows reach), values per plane.
    hp: usize,
    wp: usize,
    ps: usize,
    /// Values per staged image.
    image: usize,
    /// Tap (ty, tx) at `offs[ty·kw + tx]`, and the largest of them.
    offs: Vec<usize>,
    last: usize,
}

impl Layout {
    /// What the layout of `geom` depends on.
    fn key(geom: &ConvGeom) -> [usize; 9] {
        let ([kh, kw], [sy, sx], [dy, dx], [oh, ow]) = (geom.kernel_hw, geom.stride, geom.dilation, geom.out_hw);
        [kh, kw, sy, sx, dy, dx, oh, ow, geom.in_channels]
    }

    /// The layout for `geom` (None when a size overflows).
    fn of(geom: &ConvGeom) -> Option<Layout> {
        let reach = |a: usize| {
            let last = (geom.out_hw[a].max(1) - 1).checked_mul(geom.stride[a])?;
            last.checked_add((geom.kernel_hw[a].max(1) - 1).checked_mul(geom.dilation[a])?)?.checked_add(1)
        };
        let (hp, wp) = (reach(0)?, reach(1)?);
        let ps = hp.checked_mul(wp)?.checked_next_multiple_of(16)?;
        let image = ps.checked_mul(geom.in_channels)?;
        let ([kh, kw], [dy, dx]) = (geom.kernel_hw, geom.dilation);
        let mut offs = Vec::with_capacity(kh * kw);
        for ty in 0..kh {
            offs.extend((0..kw).map(|tx| ty * dy * wp + tx * dx));
        }
        let last = offs.iter().copied().max().unwrap_or(0);
        Some(Layout { key: Layout::key(geom), hp, wp, ps, image, offs, last })
    }

    /// Offset of output pixel (oy, ox)'s window in a plane.
    #[inline]
    fn pixel(&self, geom: &ConvGeom, p: usize) -> usize {
        let ow = geom.out_hw[1];
        (p / ow) * geom.stride[0] * self.wp + (p % ow) * geom.stride[1]
    }
}

/// `y = clamp(act(conv(x, filter) + bias + residual))` with the default ISA. The caller has
/// validated the geometry against `x` and the output, and the bias and residual lengths.
pub(super) fn conv(
    geom: &ConvGeom,
    x: &[f32],
    f: &DirectFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    conv_on(FusedIsa::selected(), geom, x, f, epi, out, parallel)
}

/// [`conv`] on `isa` (lowered to what the CPU runs).
fn conv_on(
    isa: FusedIsa,
    geom: &ConvGeom,
    x: &[f32],
    f: &DirectFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    let fresh;
    let layout = match &f.layout {
        Some(l) if l.key == Layout::key(geom) => Some(l),
        _ => {
            fresh = Layout::of(geom);
            fresh.as_ref()
        }
    };
    let layout = layout.filter(|l| l.image <= 1 << 26 && !l.offs.is_empty());
    let ok = geom.groups == 1 && (geom.x_strides[3] == 1 || layout_ok(geom)) && geom.in_channels > 0;
    let Some(layout) = layout.filter(|_| ok) else {
        return Err(Error::invalid(OP, format!("the direct strided kernel does not take {geom:?}")));
    };
    if (f.cin, f.cout, f.taps) != (geom.in_channels, geom.out_channels, geom.taps())
        || f.w.len() != f.cout.div_ceil(CB) * f.cin * f.taps * CB
    {
        return Err(Error::invalid(OP, "the packed filter is not one for this convolution"));
    }
    let isa = isa.checked();
    let early = epi.early_activation();
    let in_regs = epi.residual.is_none()
        && matches!(early, Activation::None | Activation::Relu)
        && epi.clamp.is_none_or(|(lo, hi)| !lo.is_nan() && !hi.is_nan());
    let job = Job { geom, x, f, epi, out, l: layout, isa, in_regs };
    // Tiles per chunk: the plane rows a chunk reads (its pixels' rows plus the window's reach, in
    // every channel) about CHUNK_VALUES values.
    let plane_rows = CHUNK_VALUES / (geom.in_channels * layout.wp).max(1);
    let reach = (geom.kernel_hw[0].max(1) - 1) * geom.dilation[0];
    let chunk = (plane_rows.saturating_sub(reach) / geom.stride[0] * geom.out_hw[1] / R).max(1);
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    let (n, image, blocks) = (geom.batch, layout.image, geom.out_channels.div_ceil(CB));
    // Images are staged and tiled in groups (a tile's pixels may come from two images), so that
    // small images do not leave most of their last tile empty.
    let per = (GROUP_VALUES / image.max(1)).clamp(1, n.div_ceil(threads).max(1));
    let groups = n.div_ceil(per);
    let tiles = |m: usize| (m * geom.out_hw[0] * geom.out_hw[1]).div_ceil(R);
    if threads == 1 || groups >= 2 * threads || (groups.is_multiple_of(threads) && n.is_multiple_of(per)) {
        // A group per unit, staged in the unit's own scratch (it stays in L2).
        for_units(parallel, groups, 1, Scratch::new, |buf, gi| {
            let (n0, m) = (gi * per, per.min(n - gi * per));
            let xs = buf.get(m * image);
            for (i, planes) in xs.chunks_exact_mut(image).enumerate() {
                job.stage(n0 + i, planes);
            }
            let tiles = tiles(m);
            for t0 in (0..tiles).step_by(chunk) {
                for b in 0..blocks {
                    job.tiles(n0, m, xs, t0..tiles.min(t0 + chunk), b);
                }
            }
        });
    } else {
        // Fewer groups than threads: every image staged first (split by channel), then one group
        // split into (chunk, block) units.
        let mut staged = Scratch::new();
        let all = staged.get(n * image);
        for_chunks(parallel, all, layout.ps, |(u, plane)| {
            job.stage_channel(u / geom.in_channels, u % geom.in_channels, plane)
        });
        let tiles = tiles(n);
        let chunks = tiles.div_ceil(chunk);
        let all = &*all;
        for_units(
            parallel,
            chunks * blocks,
            1,
            || (),
            |_, u| {
                let t0 = u / blocks * chunk;
                job.tiles(0, n, all, t0..tiles.min(t0 + chunk), u % blocks);
            },
        );
    }
    Ok(())
}

/// Everything a unit needs.
struct Job<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    f: &'a DirectFilter,
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    l: &'a Layout,
    isa: FusedIsa,
    /// Whether the whole epilogue is the bias, a ReLU and a clamp, applied in registers.
    in_regs: bool,
}

impl Job<'_> {
    /// Copies image `img` into its padded planes in `xs` (see the module doc).
    fn stage(&self, img: usize, xs: &mut [f32]) {
        for (ci, plane) in xs.chunks_exact_mut(self.l.ps).enumerate().take(self.geom.in_channels) {
            self.stage_channel(img, ci, plane);
        }
    }

    /// The padded plane of channel `ci` of image `img` into `plane` (`ps` values).
    fn stage_channel(&self, img: usize, ci: usize, plane: &mut [f32]) {
        let g = self.geom;
        let [sn, sc, sh, sw] = g.x_strides;
        let ([pad_y, pad_x], [ih, iw]) = (g.pad, g.in_hw);
        let (hp, wp) = (self.l.hp, self.l.wp);
        // Plane column c is input column c − pad_x: inside for lo ≤ c < hi.
        let (lo, hi) = (pad_x.min(wp), (pad_x + iw).min(wp));
        let (rows, slack) = plane.split_at_mut(hp * wp);
        slack.fill(0.0);
        for (j, dst) in rows.chunks_exact_mut(wp).enumerate() {
            let iy = j.checked_sub(pad_y).filter(|&iy| iy < ih);
            let Some(iy) = iy.filter(|_| lo < hi) else {
                dst.fill(0.0);
                continue;
            };
            dst[..lo].fill(0.0);
            dst[hi..].fill(0.0);
            copy_strided(&mut dst[lo..hi], &self.x[img * sn + ci * sc + iy * sh + (lo - pad_x) * sw..], sw);
        }
    }

    /// Tiles `tiles` of the `m` images from `n0` on (staged one after the other in `xs`), for
    /// output channel block `b`; pixel p of the group is pixel p mod (oh·ow) of image
    /// n0 + p div (oh·ow).
    fn tiles(&self, n0: usize, m: usize, xs: &[f32], tiles: std::ops::Range<usize>, b: usize) {
        let (g, l) = (self.geom, self.l);
        let (cin, taps, cout) = (g.in_channels, self.f.taps, g.out_channels);
        let (per_image, pixels) = (g.out_hw[0] * g.out_hw[1], m * g.out_hw[0] * g.out_hw[1]);
        let c0 = b * CB;
        let chans = CB.min(cout - c0);
        let w = &self.f.w[b * cin * taps * CB..][..cin * taps * CB];
        let mut bias = [0.0f32; CB];
        if let Some(bs) = self.epi.bias {
            bias[..chans].copy_from_slice(&bs[c0..c0 + chans]);
        }
        let relu = self.in_regs && self.epi.early_activation() == Activation::Relu;
        let clamp = if self.in_regs { self.epi.clamp } else { None };
        let args = TileArgs { xs, offs: &l.offs, last: l.last, ps: l.ps, cin, w, bias: &bias, relu, clamp };
        let mut tmp = [0.0f32; R * CB];
        for t in tiles {
            let p0 = t * R;
            // The last tile repeats its last pixel in the lanes past the end (not stored).
            let at: [usize; R] = std::array::from_fn(|r| {
                let p = (p0 + r).min(pixels - 1);
                (p / per_image) * l.image + l.pixel(g, p % per_image)
            });
            args.run(self.isa, &at, chans, &mut tmp);
            // The tile's pixels, split where they change image.
            let (mut p, end) = (p0, (p0 + R).min(pixels));
            while p < end {
                let (img, pp) = (p / per_image, p % per_image);
                let run = (per_image - pp).min(end - p);
                self.store(&tmp[(p - p0) * CB..], n0 + img, c0, chans, pp, run);
                p += run;
            }
        }
    }

    /// Writes the tile sums `vals` (pixel `r`'s channels at `vals[r·CB..]`) of the `n` pixels
    /// from `p0` on and channels `c0..c0 + chans` of image `img`, with what is left of the
    /// epilogue.
    fn store(&self, vals: &[f32], img: usize, c0: usize, chans: usize, p0: usize, n: usize) {
        let g = self.geom;
        let ow = g.out_hw[1];
        let [yn, yc, yh, yw] = g.y_strides;
        if self.in_regs && yw == 1 && yh == ow {
            // Dense channels-first planes: each channel's pixels are consecutive.
            for c in 0..chans {
                let at = img * yn + (c0 + c) * yc + p0;
                for r in 0..n {
                    // SAFETY: `validate` checked that every output element lies inside the
                    // output; this is (img, c0 + c, pixel p0 + r), which only the unit that owns
                    // these pixels of image `img` and channel block `c0 / CB` writes.
                    unsafe { self.out.write(at + r, vals[r * CB + c]) };
                }
            }
            return;
        }
        let early = self.epi.early_activation();
        for (r, vals) in vals.chunks_exact(CB).enumerate().take(n) {
            let (oy, ox) = ((p0 + r) / ow, (p0 + r) % ow);
            let at = img * yn + c0 * yc + oy * yh + ox * yw;
            for (c, &v) in vals[..chans].iter().enumerate() {
                let i = at + c * yc;
                let v = if self.in_regs { v } else { self.epi.finish(act_f32(early, v), i) };
                // SAFETY: as above: (img, c0 + c, oy, ox) is this unit's alone.
                unsafe { self.out.write(i, v) };
            }
        }
    }
}

/// One tile's operands for every ISA.
struct TileArgs<'a> {
    /// The staged image.
    xs: &'a [f32],
    offs: &'a [usize],
    /// The largest of `offs`.
    last: usize,
    /// Values per channel in `xs`.
    ps: usize,
    cin: usize,
    /// The channel block's weights: channel ci, tap t at `w[(ci·taps + t)·CB..]`.
    w: &'a [f32],
    bias: &'a [f32; CB],
    relu: bool,
    clamp: Option<(f32, f32)>,
}

impl TileArgs<'_> {
    /// Sums of the pixels whose windows start at offsets `at` of the planes, for the first
    /// `chans` channels (whole vectors) of the block, into `tmp`, with the bias and (when set) the
    /// ReLU and the clamp.
    fn run(&self, isa: FusedIsa, at: &[usize; R], chans: usize, tmp: &mut [f32; R * CB]) {
        // Every load stays inside the slices: pixel reads reach the last channel's plane at the
        // farthest pixel plus the farthest tap, weights the last tap's strip.
        let (taps, last) = (self.offs.len(), self.last);
        let far = at.iter().copied().max().unwrap_or(0);
        assert!(
            taps > 0
                && self.cin > 0
                && (self.cin - 1) * self.ps + last + far < self.xs.len()
                && self.cin * taps * CB <= self.w.len()
                && (1..=CB).contains(&chans),
            "direct tile out of bounds"
        );
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` was checked on this CPU (AVX-512F); bounds asserted above.
            FusedIsa::Avx512 => unsafe {
                let t = tmp.as_mut_ptr();
                match chans.div_ceil(16) {
                    1 => tile_avx512::<1>(self, at, 0, t),
                    2 => tile_avx512::<2>(self, at, 0, t),
                    3 => tile_avx512::<3>(self, at, 0, t),
                    _ => tile_avx512::<4>(self, at, 0, t),
                }
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` was checked on this CPU (AVX2 and FMA); bounds asserted above.
            FusedIsa::Avx2 => unsafe {
                for c in (0..chans).step_by(16) {
                    let t = tmp.as_mut_ptr().add(c);
                    if chans - c > 8 { tile_avx2::<2>(self, at, c, t) } else { tile_avx2::<1>(self, at, c, t) }
                }
            },
            _ => {
                for c in (0..chans).step_by(16) {
                    // SAFETY: the portable body has no feature needs; bounds asserted above.
                    unsafe {
                        let t = tmp.as_mut_ptr().add(c);
                        if chans - c > 8 {
                            tile::<Portable, 2>(self, at, c, t)
                        } else {
                            tile::<Portable, 1>(self, at, c, t)
                        }
                    }
                }
            }
        }
    }
}

/// `R` pixels × `NV` vectors of channels from channel `c` of the block: sums in registers from
/// the bias on, the ReLU and the clamp when set, stored to `tmp` (pixel r at `tmp[r·CB..]`).
///
/// # Safety
/// The CPU has `V`'s features; the bounds asserted in [`TileArgs::run`] hold for `at`,
/// `c + NV·L ≤ CB`, and `tmp` holds `R` rows of `CB` values from channel `c` on.
#[inline(always)]
unsafe fn tile<V: Lanes, const NV: usize>(a: &TileArgs<'_>, at: &[usize; R], c: usize, tmp: *mut f32) {
    let taps = a.offs.len();
    let at = *at;
    // SAFETY: the caller's contract (features and bounds) throughout.
    unsafe {
        let w = a.w.as_ptr().add(c);
        let bias: [V; NV] = V::loads(a.bias.as_ptr().add(c));
        let mut acc = [bias; R];
        for ci in 0..a.cin {
            let x = a.xs.as_ptr().add(ci * a.ps);
            let wc = w.add(ci * taps * CB);
            for (t, &off) in a.offs.iter().enumerate() {
                let wv: [V; NV] = V::loads(wc.add(t * CB));
                let p = x.add(off);
                for (acc, &i) in acc.iter_mut().zip(&at) {
                    let b = V::splat(*p.add(i));
                    for (s, &k) in acc.iter_mut().zip(&wv) {
                        *s = k.fmadd(b, *s);
                    }
                }
            }
        }
        let bounds = a.clamp.map(|(lo, hi)| (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0));
        for (r, acc) in acc.iter().enumerate() {
            for (v, &s) in acc.iter().enumerate() {
                let mut s = s;
                if a.relu {
                    s = s.relu();
                }
                if let Some((lo, hi, zlo, zhi)) = bounds {
                    s = s.clamp(lo, hi, zlo, zhi);
                }
                s.store(tmp.add(r * CB + v * V::L));
            }
        }
    }
}

/// [`tile`] on AVX-512 (16 lanes, up to 4 vectors: 24 accumulators).
///
/// # Safety
/// As for [`tile`], with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const NV: usize>(a: &TileArgs<'_>, at: &[usize; R], c: usize, tmp: *mut f32) {
    // SAFETY: the caller's contract.
    unsafe { tile::<std::arch::x86_64::__m512, NV>(a, at, c, tmp) }
}

/// [`tile`] on AVX2 (8 lanes, up to 2 vectors: 12 accumulators).
///
/// # Safety
/// As for [`tile`], with AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const NV: usize>(a: &TileArgs<'_>, at: &[usize; R], c: usize, tmp: *mut f32) {
    // SAFETY: the caller's contract.
    unsafe { tile::<std::arch::x86_64::__m256, NV>(a, at, c, tmp) }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Lcg, Operands, Parts, strides};
    use super::super::{ConvFilter, FilterKind, conv2d_f32};
    use super::*;

    /// One case: the geometry's free parameters.
    #[derive(Clone, Copy, Debug)]
    struct Case {
        batch: usize,
        cin: usize,
        cout: usize,
        in_hw: [usize; 2],
        k: [usize; 2],
        stride: [usize; 2],
        /// Low and high padding per axis.
        pads: [[usize; 2]; 2],
        dil: [usize; 2],
        /// NHWC output.
        nhwc_out: bool,
        /// NHWC input (else channels-first).
        nhwc_in: bool,
    }

    impl Case {
        fn geom(&self) -> ConvGeom {
            let out_hw: [usize; 2] = std::array::from_fn(|a| {
                let span = self.in_hw[a] + self.pads[a][0] + self.pads[a][1];
                let reach = (self.k[a] - 1) * self.dil[a] + 1;
                span.checked_sub(reach).map_or(0, |r| r / self.stride[a] + 1)
            });
            let order = if self.nhwc_out { [0, 2, 3, 1] } else { [0, 1, 2, 3] };
            let (n, [h, w], [oh, ow]) = (self.batch, self.in_hw, out_hw);
            ConvGeom {
                batch: n,
                in_channels: self.cin,
                in_hw: self.in_hw,
                out_channels: self.cout,
                out_hw,
                kernel_hw: self.k,
                stride: self.stride,
                pad: [self.pads[0][0], self.pads[1][0]],
                dilation: self.dil,
                groups: 1,
                x_strides: strides([n, self.cin, h, w], if self.nhwc_in { [0, 2, 3, 1] } else { [0, 1, 2, 3] }),
                y_strides: strides([n, self.cout, oh, ow], order),
            }
        }
    }

    /// Runs `case` with the epilogue `parts` (bias, residual, activation, clamp) through
    /// `conv2d_f32` (when the geometry takes this kernel) and through every ISA path on 1 and 2
    /// threads, each against the f64 loop.
    fn check(rng: &mut Lcg, case: Case, parts: Parts, two: &rayon::ThreadPool) {
        let g = case.geom();
        let (cin, cout, [kh, kw]) = (case.cin, case.cout, case.k);
        let ops = Operands::new(rng, &g, parts);
        let (x, w, ws, epi) = (&ops.x, &ops.w, ops.ws, ops.epilogue());
        let len = g.batch * cout * g.out_hw[0] * g.out_hw[1];
        let compare = |y: &[f32], what: &str| ops.check(y, what, &case);
        if qualifies(&g) {
            let filter = ConvFilter::new(&g, w, ws).unwrap();
            assert_eq!(filter.describe(), "strided direct");
            assert!(matches!(filter.kind, FilterKind::Direct(_)));
            let mut y = vec![f32::NAN; len];
            conv2d_f32(&g, x, &filter, &epi, &mut y, Some(two)).unwrap();
            compare(&y, "conv2d_f32");
        }
        let at = |o: usize, i: usize, y: usize, x: usize| ops.at(o, i, y, x);
        let f = DirectFilter::new(cin, cout, kh, kw, at);
        let cached = DirectFilter::new(cin, cout, kh, kw, at).laid_out_for(&g);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for (pool, parallel, f) in [(&one, false, &f), (&one, true, &cached), (two, true, &f)] {
                let mut y = vec![f32::NAN; len];
                let out = OutPtr(y.as_mut_ptr());
                pool.install(|| conv_on(isa, &g, x, f, &epi, out, parallel)).unwrap();
                compare(&y, isa.name());
            }
        }
    }

    fn two_threads() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap()
    }

    const ALL_PARTS: Parts = (true, true, Activation::Relu, Some((-0.5, 0.7)));

    /// A ResNet stride-2 layer on a small image; the other cases change a few fields.
    const BASE: Case = Case {
        batch: 2,
        cin: 16,
        cout: 64,
        in_hw: [14, 14],
        k: [3, 3],
        stride: [2, 2],
        pads: [[1, 1], [1, 1]],
        dil: [1, 1],
        nhwc_out: false,
        nhwc_in: false,
    };

    #[test]
    fn matches_naive_loop_on_strided_layers_and_edges() {
        let (mut rng, two) = (Lcg(17), two_threads());
        let base = BASE;
        let cases = [
            base,
            // One image (the staged-first split on two threads), three (odd against two threads).
            Case { batch: 1, ..base },
            Case { batch: 3, cout: 40, ..base },
            // Channels not a multiple of any vector or block; one output channel.
            Case { cin: 9, cout: 70, ..base },
            Case { cout: 1, in_hw: [9, 30], ..base },
            Case { cout: 130, cin: 8, in_hw: [7, 7], ..base },
            // A 1×1 image, a kernel larger than the input with padding, no padding at all.
            Case { in_hw: [1, 1], ..base },
            Case { in_hw: [3, 4], k: [5, 7], pads: [[2, 2], [3, 3]], ..base },
            Case { pads: [[0, 0], [0, 0]], in_hw: [12, 13], ..base },
            // Stride 3, dilation, asymmetric padding, different strides, 1-D rows.
            Case { stride: [3, 3], k: [4, 5], pads: [[0, 2], [1, 2]], ..base },
            Case { dil: [2, 3], stride: [2, 3], pads: [[2, 1], [0, 4]], cout: 9, ..base },
            Case { in_hw: [1, 50], k: [1, 7], stride: [2, 2], pads: [[0, 0], [3, 1]], cout: 7, ..base },
            // ResNet's 7×7 output and the stem-like 7×7 kernel, NHWC output, no images.
            Case { in_hw: [14, 14], cin: 32, cout: 64, batch: 1, ..base },
            Case { k: [7, 7], pads: [[3, 3], [3, 3]], in_hw: [20, 21], cout: 24, ..base },
            Case { nhwc_out: true, cout: 20, ..base },
            Case { nhwc_in: true, nhwc_out: true, cout: 20, ..base },
            Case { nhwc_in: true, nhwc_out: true, cin: 24, cout: 130, in_hw: [7, 9], ..base },
            Case { batch: 0, ..base },
        ];
        for case in cases {
            check(&mut rng, case, ALL_PARTS, &two);
            // Without the residual: the epilogue in registers.
            check(&mut rng, case, (true, false, Activation::Relu, Some((0.0, 6.0))), &two);
        }
    }

    #[test]
    fn matches_naive_loop_on_random_shapes_and_epilogues() {
        let (mut rng, two) = (Lcg(23), two_threads());
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..30 {
            let mut pick = |n: usize, from: usize| from + rng.below(n);
            let case = Case {
                batch: pick(3, 0),
                cin: pick(20, 1),
                cout: pick(80, 1),
                in_hw: [pick(14, 1), pick(30, 1)],
                k: [pick(5, 1), pick(5, 1)],
                stride: [pick(3, 1), pick(3, 1)],
                pads: [[pick(3, 0), pick(3, 0)], [pick(3, 0), pick(3, 0)]],
                dil: [pick(2, 1), pick(2, 1)],
                nhwc_out: pick(2, 0) == 1,
                nhwc_in: false,
            };
            // Channels-last input only into channels-last output (what the kernel takes).
            let case = Case { nhwc_in: case.nhwc_out && pick(2, 0) == 1, ..case };
            let clamp = [None, Some((-0.25, 0.5)), Some((f32::NAN, 1.0))][pick(3, 0)];
            let parts = (pick(2, 0) == 1, pick(2, 0) == 1, acts[pick(4, 0)], clamp);
            check(&mut rng, case, parts, &two);
        }
    }

    #[test]
    fn takes_strided_layers_only() {
        let resnet = Case { batch: 1, cin: 64, cout: 128, in_hw: [56, 56], ..BASE };
        assert!(qualifies(&resnet.geom()));
        assert!(qualifies(&Case { cin: 256, cout: 512, in_hw: [14, 14], ..resnet }.geom()));
        // Stride 1 (Winograd or the implicit GEMM), 1×1 kernels, few channels (stems), groups
        // and channels-last input keep the other paths (the kernel runs channels-last stages,
        // tested below through `conv_on`, but the implicit GEMM is faster there).
        assert!(!qualifies(&Case { stride: [1, 1], ..resnet }.geom()));
        assert!(!qualifies(&Case { k: [1, 1], pads: [[0, 0], [0, 0]], ..resnet }.geom()));
        assert!(!qualifies(&Case { cin: 3, ..resnet }.geom()));
        assert!(!qualifies(&ConvGeom { groups: 2, ..resnet.geom() }));
        let g = resnet.geom();
        let nhwc = ConvGeom { x_strides: strides([1, 64, 56, 56], [0, 2, 3, 1]), ..g.clone() };
        assert!(!qualifies(&nhwc));
        assert!(!qualifies(&Case { nhwc_in: true, nhwc_out: true, ..resnet }.geom()));
        assert_eq!(ConvFilter::new(&g, &vec![0.0; 128 * 64 * 9], [576, 9, 3, 1]).unwrap().describe(), "strided direct");
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let g = BASE.geom();
        let (x, mut y) = (vec![0.0; 2 * 16 * 196], vec![0.0; 2 * 64 * 49]);
        let out = OutPtr(y.as_mut_ptr());
        let epi = ConvEpilogue::default();
        // A filter for another kernel size, for other channel counts; groups; no input channels;
        // channels-last input into channels-first output.
        let other = DirectFilter::new(16, 64, 3, 2, |_, _, _, _| 1.0);
        assert!(conv_on(FusedIsa::Generic, &g, &x, &other, &epi, out, true).is_err());
        let narrow = DirectFilter::new(16, 60, 3, 3, |_, _, _, _| 1.0);
        assert!(conv_on(FusedIsa::Generic, &g, &x, &narrow, &epi, out, true).is_err());
        let f = DirectFilter::new(16, 64, 3, 3, |_, _, _, _| 1.0);
        let grouped = ConvGeom { groups: 2, ..g.clone() };
        assert!(conv_on(FusedIsa::Generic, &grouped, &x, &f, &epi, out, true).is_err());
        let empty = DirectFilter::new(0, 64, 3, 3, |_, _, _, _| 1.0);
        assert!(
            conv_on(FusedIsa::Generic, &ConvGeom { in_channels: 0, ..g.clone() }, &x, &empty, &epi, out, true).is_err()
        );
        let nhwc = ConvGeom { x_strides: strides([2, 16, 14, 14], [0, 2, 3, 1]), ..g.clone() };
        assert!(conv_on(FusedIsa::Generic, &nhwc, &x, &f, &epi, out, true).is_err());
        assert!(conv_on(FusedIsa::Generic, &g, &x, &f, &epi, out, true).is_ok());
    }
}
