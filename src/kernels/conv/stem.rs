//! Direct convolution for few input channels (the stems of convnets: ResNet's 7×7 stride-2 3→64,
//! MobileNet's 3×3 stride-2 3→32), f32 forward, one group: no im2col matrix and no GEMM, every
//! output written once with its whole epilogue applied.
//!
//! One task per (image, output row). The task first copies the input rows its window covers into
//! a small zero-padded scratch split into the column stride's phases: row (ci, ty, px) holds the
//! padded columns j·sx + px of input channel ci's row oy·sy + ty·dy − pad (zeros when that row is
//! padding). Kernel column tx then reads phase (tx·dx mod sx) at column offset (tx·dx div sx), so
//! for every tap (ci, ty, tx) the inputs of consecutive output columns are consecutive scratch
//! values at one fixed offset. A tile is a run of output columns (one or two vectors) times a few
//! output channels, its sums in registers: per tap, one load of each pixel vector and one
//! broadcast weight per channel. The filter is packed once as `[channel block][tap][CB]`, the
//! taps in (ci, ty, tx) order, so a tile's weights are one contiguous strip. The tile's sums then
//! get the bias, residual, activation and clamp and are stored along the output row (contiguous
//! for NCHW outputs, strided for others). Any stride, dilation, padding and layout take the same
//! path.
//!
//! The tile kernels are compiled for AVX-512F (2 × 16 columns × 12 channels), AVX2+FMA
//! (2 × 8 columns × 6 channels) and portably (the AVX2 shape in plain arrays), selected at run
//! time ([`FusedIsa`]). Outputs with contiguous rows and an epilogue of bias, ReLU and clamp
//! only (ResNet's and MobileNet's stems) take a fused kernel instead, whose accumulators start at
//! the bias and get the ReLU and clamp in registers before they are stored straight into the
//! output row: tiles of up to 2 × 16 columns × 12 channels on AVX-512, 2 × 8 columns × 4
//! channels on AVX2 (8 accumulators; a 3 × 8 × 4 tile spilled one to the stack and was slower).
//! With a channels-last output of at most 64 channels and a small filter (MobileNet's stem), the
//! AVX-512 fused kernel puts the channels in the lanes instead ([`Job::unit_lanes`]): tiles of
//! output pixels × channel vectors, per tap one broadcast input value per pixel, each pixel's
//! channels stored in place. A broadcast needs no neighbouring columns, so where it can that
//! kernel reads a flat scratch instead of the phases ([`Rows::flat`]): the covered input rows
//! copied as they lie (a channels-last input's rows one copy each instead of a strided gather per
//! channel and phase), each tap's pixels a constant stride apart. Tiles whose windows lie inside
//! the input read it in place at the same offsets rebased on its rows ([`Rows::direct`]); only the
//! tiles that reach the padding read the scratch, and only their columns are copied (MobileNet's
//! channels-last stem, 8 × 224² on one Zen 5 core: 0.96 → 0.87 ms, the copies had been 19%).

#[cfg(target_arch = "x86_64")]
use super::depthwise::blocked::Transpose;
#[cfg(target_arch = "x86_64")]
use super::depthwise::{Lanes, each16};
use super::{ConvEpilogue, ConvGeom, LineAligned, OutPtr, copy_strided, for_units, split_pairs};
use crate::error::{Error, Result};
use crate::kernels::fused::FusedIsa;
use crate::kernels::gemm::Scratch;

const OP: &str = "conv_stem";

/// Output channels per packed filter block (the widest tile: 12 AVX-512 channels).
const CB: usize = 12;

/// Most input channels for which [`qualifies`] picks this kernel.
const MAX_CIN: usize = 4;

/// Largest scratch (f32 values) for which [`qualifies`] picks this kernel (256 KiB: the rows of
/// wide images stop fitting the caches well before that).
const MAX_SCRATCH: usize = 64 * 1024;

/// Largest scratch (f32 values) the kernel allocates at all (a filter prepared for a geometry
/// with the same key but a wider image beyond this is refused).
const HARD_SCRATCH: usize = 1 << 24;

/// Output columns the scratch rows are padded to (a multiple of every tile width).
const ROUND: usize = 32;

/// Work (multiply-adds) a parallel task should hold at least.
const TASK_WORK: usize = 1 << 15;

/// Whether the direct kernel is the faster path for `geom`: one group, at most [`MAX_CIN`] input
/// channels, a kernel larger than 1×1 and a scratch that stays small.
pub(super) fn qualifies(geom: &ConvGeom) -> bool {
    geom.groups == 1
        && (1..=MAX_CIN).contains(&geom.in_channels)
        && geom.taps() > 1
        && Rows::of(geom).is_some_and(|r| r.len <= MAX_SCRATCH)
}

/// A filter packed for [`conv`]: `[ceil(cout / CB)][taps][CB]` (zero beyond the last channel),
/// the taps in (input channel, kernel row, kernel column) order.
#[derive(Debug)]
pub(super) struct StemFilter {
    cout: usize,
    taps: usize,
    w: LineAligned,
    /// The same weights as `[taps][cout rounded up to LANES_CB]` (zero beyond the last channel),
    /// for the channels-in-lanes kernel ([`Job::unit_lanes`]); empty for filters it does not take
    /// (more than [`LANES_MAX`] channels or [`LANES_WEIGHT_BYTES`]).
    lanes: LineAligned,
    /// The scratch layout for the geometry the filter was packed for ([`StemFilter::laid_out_for`]),
    /// so that the executions of a compiled model do not build it again; and the flat one
    /// ([`Rows::flat`]) where that geometry's input takes it.
    rows: Option<Box<Rows>>,
    flat: Option<Box<Rows>>,
}

impl StemFilter {
    /// Packs the `cout` × `cin` × `kh` × `kw` filter whose element (o, i, y, x) is `at(o, i, y, x)`.
    pub(super) fn new(
        cin: usize,
        cout: usize,
        kh: usize,
        kw: usize,
        at: impl Fn(usize, usize, usize, usize) -> f32,
    ) -> Self {
        let taps = cin * kh * kw;
        let mut w = LineAligned::zeros(cout.div_ceil(CB) * taps * CB);
        for (b, block) in w.chunks_exact_mut(taps * CB).enumerate() {
            for (t, strip) in block.chunks_exact_mut(CB).enumerate() {
                let (i, y, x) = (t / (kh * kw), t / kw % kh, t % kw);
                for (c, v) in strip.iter_mut().enumerate().take(cout.saturating_sub(b * CB)) {
                    *v = at(b * CB + c, i, y, x);
                }
            }
        }
        // The channels-in-lanes copy only for the filters that kernel takes.
        let cpad = cout.next_multiple_of(LANES_CB);
        let small = (1..=LANES_MAX).contains(&cout) && taps * lanes_block(cpad) * 4 <= LANES_WEIGHT_BYTES;
        // Block-major: each pass's block of `lanes_block` channels holds its taps' weights
        // contiguously (rows of the whole padded width put every tap a few lines apart, in the
        // same few L1 sets).
        let mut lanes = LineAligned::zeros(if small { taps * cpad } else { 0 });
        let bw = lanes_block(cpad);
        for (i, v) in lanes.iter_mut().enumerate() {
            let (c, t) = (i / (taps * bw) * bw + i % bw, i / bw % taps);
            if c < cout {
                // Channel c of tap t lies in block c / CB's strip t.
                *v = w[(c / CB * taps + t) * CB + c % CB];
            }
        }
        StemFilter { cout, taps, w, lanes, rows: None, flat: None }
    }

    /// The filter with the scratch layout of `geom` kept (another geometry builds its own).
    pub(super) fn laid_out_for(self, geom: &ConvGeom) -> Self {
        let flat = (Rows::flat_for(geom) && !self.lanes.is_empty()).then(|| Rows::flat(geom)).flatten();
        StemFilter { rows: Rows::of(geom).map(Box::new), flat: flat.map(Box::new), ..self }
    }

    /// Bytes held.
    pub(super) fn size_bytes(&self) -> usize {
        (self.w.len() + self.lanes.len()) * 4
    }
}

/// The scratch layout of one output row: `cin·kh·sx` phase rows of `pw` values, and each tap's
/// offset into it.
#[derive(Debug)]
struct Rows {
    /// What the layout depends on: input channels, kernel height and width, column stride and
    /// dilation, output width, and for [`Rows::flat`] the values per column (1 + inner; 0: the
    /// phases) and the input's channel, row and column strides and row dilation (`direct`).
    key: [usize; 11],
    /// Values per scratch row.
    pw: usize,
    /// Scratch values from one output column's window to the next's: 1 in the stride phases,
    /// stride × input channels in the flat layout (read by the x86 lanes kernel).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    step: usize,
    len: usize,
    offs: Vec<usize>,
    /// The largest offset.
    last: usize,
    /// [`Rows::flat`] only: each tap's offset (in `offs`' order) in the input itself from the
    /// element (image, channel 0, the window's top row, column −pad), so that tiles whose
    /// windows lie inside the input read it in place ([`Job::unit_lanes`]); empty for the phases.
    direct: Vec<usize>,
}

impl Rows {
    /// What the layout of `geom` depends on.
    fn key(geom: &ConvGeom, flat: bool) -> [usize; 11] {
        let g = geom;
        let layout = if flat { 1 + Rows::inner(g) } else { 0 };
        let [_, sc, sh, sw] = if flat { g.x_strides } else { [0; 4] };
        let dy = if flat { g.dilation[0] } else { 0 };
        [g.in_channels, g.kernel_hw[0], g.kernel_hw[1], g.stride[1], g.dilation[1], g.out_hw[1], layout, sc, sh, sw, dy]
    }

    /// The layout for `geom` (None when its size overflows).
    fn of(geom: &ConvGeom) -> Option<Rows> {
        let ([kh, kw], sx, dx) = (geom.kernel_hw, geom.stride[1], geom.dilation[1]);
        let shift = (kw.max(1) - 1).checked_mul(dx)? / sx.max(1);
        let pw = geom.out_hw[1].checked_next_multiple_of(ROUND)?.checked_add(shift)?;
        let len = geom.in_channels.checked_mul(kh)?.checked_mul(sx)?.checked_mul(pw)?;
        let mut offs = Vec::with_capacity(geom.in_channels * kh * kw);
        for ci in 0..geom.in_channels {
            for ty in 0..kh {
                offs.extend((0..kw).map(|tx| ((ci * kh + ty) * sx + tx * dx % sx) * pw + tx * dx / sx));
            }
        }
        let last = offs.iter().copied().max().unwrap_or(0);
        Some(Rows { key: Rows::key(geom, false), pw, step: 1, len, offs, last, direct: Vec::new() })
    }

    /// The flat layout for `geom` (None when its size overflows): the padded input columns that
    /// the output row's windows cover, copied as the input holds them: for a channels-last input
    /// one scratch row per kernel row, `[column][channel]`, for a channels-first one a row per
    /// (channel, kernel row), with the stride phases left interleaved. Tap (ci, ty, tx) of output
    /// column ox is at its offset plus `ox·sx·inner` (`inner`: input channels, or 1); only the
    /// channels-in-lanes kernel reads it (one broadcast per value, so the columns need not be
    /// consecutive).
    fn flat(geom: &ConvGeom) -> Option<Rows> {
        let ([kh, kw], [sx, dx], cin) = (geom.kernel_hw, [geom.stride[1], geom.dilation[1]], geom.in_channels);
        let inner = Rows::inner(geom);
        let cols = (geom.out_hw[1].max(1) - 1).checked_mul(sx)?.checked_add((kw.max(1) - 1).checked_mul(dx)?)? + 1;
        let pw = cols.checked_mul(inner)?;
        let len = pw.checked_mul(kh)?.checked_mul(cin / inner)?;
        let [_, sc, sh, sw] = geom.x_strides;
        let dy = geom.dilation[0];
        let mut offs = Vec::with_capacity(cin * kh * kw);
        let mut direct = Vec::with_capacity(cin * kh * kw);
        for ci in 0..cin {
            for ty in 0..kh {
                // Channels-last: row ty, channel ci of each column; else row (ci, ty).
                let row = if inner == 1 { (ci * kh + ty) * pw } else { ty * pw + ci };
                offs.extend((0..kw).map(|tx| row + tx * dx * inner));
                // In the input: channel ci of kernel row ty, columns tx·dx from column −pad (a
                // dense row: `flat_for`, so `sw` is `inner`).
                let at = ci.checked_mul(sc)?.checked_add(ty.checked_mul(dy)?.checked_mul(sh)?)?;
                for tx in 0..kw {
                    direct.push(at.checked_add(tx.checked_mul(dx)?.checked_mul(sw)?)?);
                }
            }
        }
        let last = offs.iter().copied().max().unwrap_or(0);
        Some(Rows { key: Rows::key(geom, true), pw, step: sx * inner, len, offs, last, direct })
    }

    /// Whether this is a [`Rows::flat`] layout (its key says so), not the stride phases.
    fn is_flat(&self) -> bool {
        self.key[6] != 0
    }

    /// Whether `geom`'s input holds each pixel's channels together (channels-last, dense).
    fn channels_last(geom: &ConvGeom) -> bool {
        let [_, sc, _, sw] = geom.x_strides;
        sc == 1 && sw == geom.in_channels
    }

    /// Values per column in a flat scratch row: the input channels (channels-last), or 1.
    fn inner(geom: &ConvGeom) -> usize {
        if Rows::channels_last(geom) { geom.in_channels } else { 1 }
    }

    /// Whether the channels-in-lanes kernel reads `geom`'s input through the flat layout: dense
    /// rows (channels-last, or columns adjacent) whose step from one window to the next is one
    /// the kernel is compiled for ([`Job::unit_lanes_avx512`]: 3 input channels at stride 1 or
    /// 2 channels-last, stride 2 channels-first).
    fn flat_for(geom: &ConvGeom) -> bool {
        let (sx, cin) = (geom.stride[1], geom.in_channels);
        if Rows::channels_last(geom) { matches!(sx * cin, 3 | 6) } else { geom.x_strides[3] == 1 && sx == 2 }
    }
}

/// `y = clamp(act(conv(x, filter) + bias + residual))` with the default ISA. The caller has
/// validated the geometry against `x` and the output, and the bias and residual lengths.
pub(super) fn conv(
    geom: &ConvGeom,
    x: &[f32],
    f: &StemFilter,
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
    f: &StemFilter,
    epi: &ConvEpilogue<'_>,
    out: OutPtr,
    parallel: bool,
) -> Result<()> {
    if f.cout != geom.out_channels || f.w.len() != f.cout.div_ceil(CB) * f.taps * CB {
        return Err(Error::invalid(OP, format!("the packed filter is not one for {} channels", geom.out_channels)));
    }
    let isa = isa.checked();
    let fused =
        fused_epilogue(isa, geom, epi).map(|x| Fused { lanes: x.via_row && x.wide && !f.lanes.is_empty(), ..x });
    // The channels-in-lanes kernel reads a channels-last input through the flat layout.
    let flat = fused.is_some_and(|f| f.lanes) && Rows::flat_for(geom);
    let fresh;
    let rows = match if flat { f.flat.as_deref() } else { f.rows.as_deref() } {
        Some(r) if r.key == Rows::key(geom, flat) => Some(r),
        _ => {
            fresh = if flat { Rows::flat(geom) } else { Rows::of(geom) };
            fresh.as_ref()
        }
    };
    let rows = rows.filter(|r| r.len <= HARD_SCRATCH);
    let Some(rows) = rows.filter(|r| geom.groups == 1 && f.taps == r.offs.len() && f.taps > 0) else {
        return Err(Error::invalid(OP, format!("the direct stem kernel does not take {geom:?}")));
    };
    // Tiles may read the input in place (`Rows::direct`) only when every element of it lies
    // inside `x` (the caller validated this; checked again here because the reads are unchecked).
    let direct = rows.is_flat() && !rows.direct.is_empty() && {
        let dims = [geom.batch, geom.in_channels, geom.in_hw[0], geom.in_hw[1]];
        let reach = dims
            .iter()
            .zip(geom.x_strides)
            .try_fold(0usize, |acc, (&d, s)| acc.checked_add(d.checked_sub(1)?.checked_mul(s)?));
        reach.is_some_and(|r| r < x.len())
    };
    let job = Job { geom, x, f, epi, out, rows, isa, fused, direct };
    let [oh, ow] = geom.out_hw;
    let units = geom.batch * oh;
    let min_len = (TASK_WORK / (ow * geom.out_channels * f.taps).max(1)).max(1);
    let tile_len = {
        let (lanes, vecs, chans) = shape(isa);
        let row = if fused.is_some_and(|f| f.via_row && !f.lanes) { ow * geom.out_channels } else { 0 };
        (vecs * lanes * chans).max(row)
    };
    // Both scratch buffers come from the per-thread pool (no allocation once warm); `fill`
    // writes every value of the row scratch and the tile kernels every sum they hand on.
    for_units(
        parallel,
        units,
        min_len,
        || (Scratch::new(), Scratch::new()),
        |(buf, tile), u| job.unit(u / oh, u % oh, buf.get(job.rows.len), tile.get(tile_len)),
    );
    Ok(())
}

/// Everything a unit needs.
struct Job<'a> {
    geom: &'a ConvGeom,
    x: &'a [f32],
    f: &'a StemFilter,
    epi: &'a ConvEpilogue<'a>,
    out: OutPtr,
    rows: &'a Rows,
    isa: FusedIsa,
    /// The fused kernel ([`Job::unit_fused`]) that runs, when one does.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fused: Option<Fused>,
    /// Whether the flat layout's tiles whose windows lie inside the input read it in place
    /// (every input element lies inside `x`: checked in [`conv_on`]). Only the lanes kernel
    /// takes the flat layout, so only it sees this set.
    direct: bool,
}

/// The fused kernel chosen for a convolution: its vector width, the ReLU and the clamp.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Fused {
    /// 16-lane AVX-512 tiles, else 8-lane AVX2 ones.
    wide: bool,
    relu: bool,
    clamp: Option<(f32, f32)>,
    /// Channels-last output: each output row is computed channels-first into the tile scratch
    /// and transposed into place ([`Job::unit_via_row`]).
    via_row: bool,
    /// Channels-last output on AVX-512 with a filter small enough for the channels-in-lanes
    /// kernel ([`Job::unit_lanes`]), which runs instead of the transposing one.
    lanes: bool,
}

/// Which fused kernel takes `geom` with `epi` on `isa` (already checked), if any: contiguous
/// output rows, no residual, no activation other than ReLU, clamp bounds that are not NaN; the
/// 16-lane one on AVX-512, the 8-lane one on AVX2. (On one Zen 5 core, ResNet's stem 8×3×224² →
/// 64 7×7/2 with bias and ReLU: 12.6 ms with the general tiles and a pass over the stored
/// values, 9.6–9.9 ms fused; MobileNetV2's 3×3/2 → 32 with ReLU6: 2.3–2.8 ms with the 8-lane
/// fused tiles, 1.4–2.0 ms with the 16-lane ones.)
fn fused_epilogue(isa: FusedIsa, geom: &ConvGeom, epi: &ConvEpilogue<'_>) -> Option<Fused> {
    let relu = match epi.activation {
        crate::kernels::gemm::Activation::None => false,
        crate::kernels::gemm::Activation::Relu => true,
        _ => return None,
    };
    let plain_clamp = epi.clamp.is_none_or(|(lo, hi)| !lo.is_nan() && !hi.is_nan());
    let wide = match isa {
        FusedIsa::Avx512 => true,
        FusedIsa::Avx2 => false,
        _ => return None,
    };
    // Channels innermost in the output (and more than one, or the test below holds anyway).
    let via_row = geom.y_strides[3] != 1 && geom.y_strides[1] == 1;
    let ok = (geom.y_strides[3] == 1 || via_row) && epi.residual.is_none() && plain_clamp;
    ok.then_some(Fused { wide, relu, clamp: epi.clamp, via_row, lanes: false })
}

/// The tile shape of each ISA: (f32 lanes per vector, most vectors, most channels).
fn shape(isa: FusedIsa) -> (usize, usize, usize) {
    match isa {
        FusedIsa::Avx512 => (16, 2, 12),
        _ => (8, 2, 6),
    }
}

impl Job<'_> {
    /// Output row `oy` of image `n`, every channel.
    fn unit(&self, n: usize, oy: usize, buf: &mut [f32], tile: &mut [f32]) {
        // Rows whose windows lie inside the input (lanes tiles over the flat layout): only the
        // tiles that reach the padding read the scratch, and only their columns are filled.
        let base = self.direct_base(n, oy);
        match base {
            Some(_) => {
                let r = lanes_tile(self.geom.out_channels.next_multiple_of(LANES_CB));
                for first in tile_firsts(self.geom.out_hw[1], r) {
                    if !self.inside_cols(first, r) {
                        self.fill_flat(n, oy, buf, self.span(first, r));
                    }
                }
            }
            None if self.rows.is_flat() => self.fill_flat(n, oy, buf, 0..usize::MAX),
            None => self.fill(n, oy, buf),
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(fused @ Fused { wide, relu, clamp, via_row, lanes }) = self.fused {
            if lanes {
                // SAFETY: `lanes` is set only with `wide`, after `FusedIsa::checked` confirmed
                // AVX-512 on this CPU; `base` comes from `direct_base`.
                return unsafe { self.unit_lanes_avx512(n, oy, buf, fused, base) };
            }
            if via_row {
                return self.unit_via_row(n, oy, buf, tile, wide, relu, clamp);
            }
            // SAFETY: `fused` is set only for the AVX2 and AVX-512 ISAs after `FusedIsa::checked`
            // confirmed them on this CPU, `wide` only for AVX-512 (`fused_epilogue`).
            return unsafe {
                if wide {
                    self.unit_fused_avx512(n, oy, buf, relu, clamp)
                } else {
                    self.unit_fused_avx2(n, oy, buf, relu, clamp)
                }
            };
        }
        let (g, taps) = (self.geom, self.f.taps);
        let ow = g.out_hw[1];
        let (lanes, vecs, chans) = shape(self.isa);
        // Channel steps of 4 on AVX-512 and 2 elsewhere, so the last block wastes little.
        let quantum = chans / 3;
        for c0 in (0..g.out_channels).step_by(chans) {
            let c = chans.min(g.out_channels - c0);
            let cv = c.next_multiple_of(quantum);
            // This block's weights: the strip of block c0 / CB from channel c0 % CB on.
            let w = &self.f.w[(c0 / CB * taps * CB + c0 % CB)..][..(taps - 1) * CB + cv];
            for ox0 in (0..ow).step_by(vecs * lanes) {
                let m = (vecs * lanes).min(ow - ox0);
                let p = m.div_ceil(lanes);
                let t = Tile { xs: &buf[ox0..], rows: self.rows, w };
                let width = p * lanes;
                t.run(self.isa, p, cv, &mut tile[..cv * width]);
                for (j, vals) in tile.chunks_exact_mut(width).take(c).enumerate() {
                    self.store(&mut vals[..m], n, c0 + j, oy, ox0);
                }
            }
        }
    }

    /// The kernel with the epilogue in registers: output row `oy` of image `n` from the filled
    /// scratch `buf`, in tiles of up to [`FUSED_VECS`] vectors of `V` × `CH` channels (in steps
    /// of [`FUSED_QUANTUM`]) whose accumulators start at the bias and get the ReLU and the clamp
    /// before they are stored straight into the output row (no tile buffer, no pass over the
    /// stored values).
    ///
    /// # Safety
    /// The CPU has `V`'s features; `fused_epilogue` accepted the geometry and epilogue; `CH` is a
    /// multiple of [`FUSED_QUANTUM`] that divides [`CB`].
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn unit_fused<V: Lanes, const CH: usize>(
        &self,
        n: usize,
        oy: usize,
        buf: &[f32],
        relu: bool,
        clamp: Option<(f32, f32)>,
    ) {
        let (g, taps) = (self.geom, self.f.taps);
        let (ow, cout) = (g.out_hw[1], g.out_channels);
        // Every pixel load stays inside `buf`: the last tile's vectors end at ow rounded up to a
        // whole vector, read from each tap's offset (at most `last`); every weight of a block
        // lies in its CB-wide strip (blocks start at multiples of CH, which divides CB, and a
        // tile reads at most CH channels).
        assert!(
            self.rows.last + ow.next_multiple_of(V::L) <= buf.len()
                && taps == self.rows.offs.len()
                && self.f.w.len() == cout.div_ceil(CB) * taps * CB
                && CB.is_multiple_of(CH),
            "stem scratch or filter too short"
        );
        let [yn, yc, yh, _] = g.y_strides;
        // SAFETY: the caller's contract (features).
        let bounds = clamp.map(|(lo, hi)| unsafe { (V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0) });
        for c0 in (0..cout).step_by(CH) {
            let w = &self.f.w[c0 / CB * taps * CB + c0 % CB..];
            let bias: [f32; CH] =
                std::array::from_fn(|c| self.epi.bias.and_then(|b| b.get(c0 + c).copied()).unwrap_or(0.0));
            let chans = CH.min(cout - c0);
            let mut ox0 = 0;
            while ox0 < ow {
                let vecs = (ow - ox0).div_ceil(V::L).min(FUSED_VECS);
                let last = (ow - ox0).min(V::L * vecs) - V::L * (vecs - 1);
                let at = n * yn + c0 * yc + oy * yh + ox0;
                let tile = FusedTile { xs: &buf[ox0..], offs: &self.rows.offs, w, chans, last, relu, bounds };
                // SAFETY: the caller's contract (features); the loads are inside `buf` and `w`
                // (asserted above); the stores are output row `oy` of image `n`, channels
                // c0..c0 + chans, columns ox0..ox0 + L·(vecs − 1) + last ≤ ow, which `validate`
                // checked to lie in the output and only this task writes.
                unsafe {
                    let out = self.out.0.add(at);
                    macro_rules! go {
                        ($($c:literal),*) => {
                            match (vecs, chans.next_multiple_of(FUSED_QUANTUM)) {
                                $((2, $c) if $c <= CH => tile.run::<2, $c>(out, yc, &bias),
                                  (_, $c) if $c <= CH => tile.run::<1, $c>(out, yc, &bias),)*
                                _ => unreachable!("fused stem tile of {chans} channels"),
                            }
                        };
                    }
                    go!(4, 8, 12);
                }
                ox0 += V::L * vecs;
            }
        }
    }

    /// The fused kernel for a channels-last output: output row `oy` of image `n` computed
    /// channels-first (`[channel][column]`) into `tile` by [`Job::unit_fused`], then transposed
    /// into the output row `L × L` values at a time in registers. (Stored straight, each
    /// channel's row would be written one value per pixel: MobileNetV2's stem ran 0.63 ms
    /// against 0.31 ms into channels-first output, batch 1, one core.)
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn unit_via_row(
        &self,
        n: usize,
        oy: usize,
        buf: &[f32],
        tile: &mut [f32],
        wide: bool,
        relu: bool,
        clamp: Option<(f32, f32)>,
    ) {
        let g = self.geom;
        let (ow, cout) = (g.out_hw[1], g.out_channels);
        let row = &mut tile[..ow * cout];
        let flat = ConvGeom { y_strides: [0, ow, 0, 1], ..g.clone() };
        let job = Job { geom: &flat, out: OutPtr(row.as_mut_ptr()), ..*self };
        let [yn, yc, yh, yw] = g.y_strides;
        assert!(yc == 1 && ow * cout <= row.len(), "stem row scratch or output layout");
        // SAFETY: `fused` (with `via_row`) is set only for AVX2 and AVX-512 after
        // `FusedIsa::checked` confirmed them, `wide` only for AVX-512; the flat job's stores lie
        // in `row` (channel c, column ox at c·ow + ox < ow·cout); the transpose writes output
        // row `oy` of image `n`, every (column, channel) at ox·yw + c (yc = 1), which `validate`
        // checked to lie in the output and only this task writes.
        unsafe {
            let dst = self.out.0.add(n * yn + oy * yh);
            if wide {
                job.unit_fused_avx512(0, 0, buf, relu, clamp);
                transpose_row_avx512(row, cout, ow, dst, yw);
            } else {
                job.unit_fused_avx2(0, 0, buf, relu, clamp);
                transpose_row_avx2(row, cout, ow, dst, yw);
            }
        }
    }

    /// The kernel for a channels-last output with the channels in the vector lanes: output row
    /// `oy` of image `n` from the filled scratch `buf`, in tiles of `R` output pixels × `NV`
    /// vectors of channels (channels `c0..c0 + NV·L` of the row's at most [`LANES_MAX`], those
    /// past the output's last not stored) whose accumulators
    /// start at the bias; per tap, `NV` weight vectors and one broadcast input value per pixel.
    /// The ReLU and the clamp are applied in registers and each pixel's channels stored in place,
    /// with no transpose. The sums are the channels-first kernel's (the same fused multiply-adds
    /// in the same tap order), so the results are too. (MobileNetV2's stem, 32 channels, fills
    /// every lane, where the channels-first tiles of 12 channels × 32 columns waste the ends of
    /// 112-pixel rows and of the channels, and skips the transpose; see [`LANES_WEIGHT_BYTES`].)
    ///
    /// # Safety
    /// The CPU has `V`'s features; `fused_epilogue` accepted the geometry and epilogue (with a
    /// channels-last output: `yc` = 1); `NV` vectors hold every output channel.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn unit_lanes<V: Lanes, const NV: usize, const R: usize, const S: usize>(
        &self,
        n: usize,
        oy: usize,
        buf: &[f32],
        f: Fused,
        c0: usize,
        base: Option<usize>,
    ) {
        let (g, relu, clamp) = (self.geom, f.relu, f.clamp);
        let (ow, cout) = (g.out_hw[1], g.out_channels);
        let cpad = cout.next_multiple_of(LANES_CB);
        let offs = &self.rows.offs;
        let [yn, yc, yh, yw] = g.y_strides;
        // Every read stays inside `buf` (columns below ow, S apart, from each tap's offset, at
        // most `last`) and the weights (taps rows of cpad); the vectors hold every channel.
        assert!(
            self.rows.last + (ow.max(1) - 1) * S < buf.len()
                && self.rows.step == S
                && self.f.lanes.len() == offs.len() * cpad
                && c0 + NV * V::L <= cpad
                && NV * V::L == lanes_block(cpad)
                && c0 < cout
                && yc == 1
                && ow > 0,
            "stem scratch, filter or output layout"
        );
        let (xs, w) = (buf.as_ptr(), self.f.lanes.as_ptr());
        // The bias of the block's channels, zero past `cout`.
        let mut bias = [0.0f32; LANES_MAX];
        for (c, b) in bias.iter_mut().enumerate().take(NV * V::L) {
            *b = self.epi.bias.and_then(|b| b.get(c0 + c).copied()).unwrap_or(0.0);
        }
        // The block's channels c0..c0 + NV·L, the last ones past `cout` not stored.
        let cend = cout.min(c0 + NV * V::L);
        let vecs = (cend - c0).div_ceil(V::L);
        let tile = LanesTile {
            offs,
            // SAFETY: the block's weights, a row of NV·L per tap, lie inside the filter
            // (asserted above: c0 + NV·L ≤ cpad).
            w: unsafe { w.add(c0 * offs.len()) },
            xs,
            ow,
            bias: &bias,
            relu,
            clamp,
            // SAFETY: channel c0 of output row `oy` of image `n`: inside the output (`validate`).
            dst: unsafe { self.out.0.add(n * yn + oy * yh + c0) },
            yw,
            vecs,
            last: cend - c0 - (vecs - 1) * V::L,
        };
        // Tiles whose windows lie inside the input read it in place: the same sums from the
        // input's own rows (`Rows::direct`; their addresses are formed from column −pad, which
        // may lie before `x`, so with wrapping arithmetic, and only inside columns are read).
        debug_assert!(R == lanes_tile(cpad) && (base.is_none() || self.rows.direct.len() == offs.len()));
        let inside = LanesTile {
            offs: &self.rows.direct,
            xs: self.x.as_ptr().wrapping_add(base.unwrap_or(0)).wrapping_sub(g.pad[1] * g.x_strides[3]),
            ..tile
        };
        let mut ox0 = 0;
        while ox0 < ow {
            // The tile's first pixel: `ox0`, or for a row's short last tile `ow - R` (the pixels
            // before `ox0` summed again and not stored), so that every tap reads the tile's input
            // columns at constant offsets from one address; rows shorter than a tile repeat their
            // last pixel instead (read, not stored). The same firsts as `tile_firsts`, whose
            // tiles that are not inside the input the caller filled the scratch for.
            // SAFETY: the caller's contract (features); the scratch loads are inside `buf` and
            // the weights (asserted above); in-place loads only with `base` from `direct_base`
            // (every kernel row of the windows inside the input, every input element inside `x`)
            // and `inside_cols` (every column read inside the input); the stores are pixels
            // ox0..ow of output row `oy` of image `n`, each one's channels c0..cend (yc = 1),
            // which `validate` checked to lie in the output and only this task writes.
            unsafe {
                if ow >= R {
                    let first = ox0.min(ow - R);
                    if base.is_some() && self.inside_cols(first, R) {
                        inside.run::<V, NV, R, S, false>(first, ox0);
                    } else {
                        tile.run::<V, NV, R, S, false>(first, ox0);
                    }
                } else {
                    tile.run::<V, NV, R, S, true>(ox0, ox0);
                }
            }
            ox0 += R;
        }
    }

    /// [`Job::unit_lanes`] on AVX-512, one pass over the row per block of [`lanes_block`]
    /// channels: up to 28 accumulators (14 pixels × 2 vectors, 7 × 3, 16 × 1). The tile's pixels
    /// are read at constant offsets from one address per tap, so no general register holds a
    /// pixel's column (with one per pixel, 24 accumulators spilled at every tap); ResNet's 112-pixel
    /// rows are 8 whole tiles.
    ///
    /// # Safety
    /// As for [`Job::unit_lanes`], with AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn unit_lanes_avx512(&self, n: usize, oy: usize, buf: &[f32], f: Fused, base: Option<usize>) {
        use std::arch::x86_64::__m512;
        let cpad = self.geom.out_channels.next_multiple_of(LANES_CB);
        // SAFETY: the caller's contract; each call's vectors are a whole block of the padded
        // channels (`lanes_block` divides `cpad`).
        unsafe {
            for c0 in (0..cpad).step_by(lanes_block(cpad)) {
                macro_rules! go {
                    ($($s:literal),*) => {
                        match (lanes_block(cpad) / 16, self.rows.step) {
                            $((1, $s) => self.unit_lanes::<__m512, 1, 16, $s>(n, oy, buf, f, c0, base),
                              (2, $s) => self.unit_lanes::<__m512, 2, 14, $s>(n, oy, buf, f, c0, base),
                              (_, $s) => self.unit_lanes::<__m512, 3, 7, $s>(n, oy, buf, f, c0, base),)*
                            (_, s) => unreachable!("stem scratch step {s}"),
                        }
                    };
                }
                go!(1, 2, 3, 6);
            }
        }
    }

    /// [`Job::unit_fused`] on AVX2: tiles of 2 × 8 columns × 4 channels.
    ///
    /// # Safety
    /// As for [`Job::unit_fused`], with AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn unit_fused_avx2(&self, n: usize, oy: usize, buf: &[f32], relu: bool, clamp: Option<(f32, f32)>) {
        // SAFETY: the caller's contract.
        unsafe { self.unit_fused::<std::arch::x86_64::__m256, 4>(n, oy, buf, relu, clamp) }
    }

    /// [`Job::unit_fused`] on AVX-512: tiles of 2 × 16 columns × 12 channels.
    ///
    /// # Safety
    /// As for [`Job::unit_fused`], with AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn unit_fused_avx512(&self, n: usize, oy: usize, buf: &[f32], relu: bool, clamp: Option<(f32, f32)>) {
        // SAFETY: the caller's contract.
        unsafe { self.unit_fused::<std::arch::x86_64::__m512, 12>(n, oy, buf, relu, clamp) }
    }

    /// For the flat layout's in-place reads ([`Rows::direct`]): the index in `x` of element
    /// (image `n`, channel 0, the top row of output row `oy`'s windows, column 0) when every
    /// kernel row of those windows lies inside the input, else `None` (the row reads the scratch).
    fn direct_base(&self, n: usize, oy: usize) -> Option<usize> {
        let g = self.geom;
        if !self.direct || !(0..g.kernel_hw[0]).all(|ty| g.src(0, oy, ty).is_some()) {
            return None;
        }
        Some(n * g.x_strides[0] + g.src(0, oy, 0)? * g.x_strides[2])
    }

    /// Whether the lanes tile of `r` output columns from `first` (a whole tile, inside the row)
    /// reads input columns only, no padding: then it may read the input in place.
    fn inside_cols(&self, first: usize, r: usize) -> bool {
        let g = self.geom;
        let (sx, dx, kw, pad, iw) = (g.stride[1], g.dilation[1], g.kernel_hw[1], g.pad[1], g.in_hw[1]);
        first + r <= g.out_hw[1] && first * sx >= pad && first * sx - pad + (r - 1) * sx + (kw - 1) * dx < iw
    }

    /// The padded columns of the flat scratch that the lanes tile of `r` output columns from
    /// `first` reads (it may run past the last column: the caller clips it).
    fn span(&self, first: usize, r: usize) -> std::ops::Range<usize> {
        let g = self.geom;
        let (sx, dx, kw) = (g.stride[1], g.dilation[1], g.kernel_hw[1]);
        first * sx..first * sx + (r - 1) * sx + (kw - 1) * dx + 1
    }

    /// Copies the input rows under output row `oy` of image `n` into `buf` in the flat layout
    /// ([`Rows::flat`]), padded columns `span` only: each kernel row's columns, channels
    /// innermost, zeros outside the input.
    fn fill_flat(&self, n: usize, oy: usize, buf: &mut [f32], span: std::ops::Range<usize>) {
        let g = self.geom;
        let [sn, sc, sh, sw] = g.x_strides;
        let (kh, cin, pad, iw, pw) = (g.kernel_hw[0], g.in_channels, g.pad[1], g.in_hw[1], self.rows.pw);
        // Values per column in a row, and the channels a row holds from its first.
        let inner = Rows::inner(g);
        let planes = cin / inner.max(1);
        let cols = pw / inner.max(1);
        let (a, b) = (span.start.min(cols), span.end.clamp(span.start.min(cols), cols));
        // Padded column j is input column j − pad: inside for lo ≤ j < hi (within the span).
        let lo = pad.clamp(a, b);
        let hi = (iw + pad).clamp(lo, b);
        for (r, row) in buf.chunks_exact_mut(pw).enumerate().take(kh * planes) {
            let (ci, ty) = (r / kh, r % kh);
            let Some(iy) = g.src(0, oy, ty) else {
                row[a * inner..b * inner].fill(0.0);
                continue;
            };
            row[a * inner..lo * inner].fill(0.0);
            row[hi * inner..b * inner].fill(0.0);
            if lo < hi {
                let start = n * sn + ci * sc + iy * sh + (lo - pad) * sw;
                let vals = (hi - lo) * inner;
                // Dense: the row's values are consecutive in the input (`flat_for`).
                row[lo * inner..hi * inner].copy_from_slice(&self.x[start..][..vals]);
            }
        }
    }

    /// Copies the input rows under output row `oy` of image `n` into `buf` (see the module doc).
    fn fill(&self, n: usize, oy: usize, buf: &mut [f32]) {
        let g = self.geom;
        let [sn, sc, sh, sw] = g.x_strides;
        let (kh, sx, pad, iw, pw) = (g.kernel_hw[0], g.stride[1], g.pad[1], g.in_hw[1], self.rows.pw);
        for (r, rows) in buf.chunks_exact_mut(sx * pw).enumerate().take(g.in_channels * kh) {
            let (ci, ty) = (r / kh, r % kh);
            let Some(iy) = g.src(0, oy, ty) else {
                rows.fill(0.0);
                continue;
            };
            if sx == 2 && sw == 1 && iw > 0 {
                // Both phases in one pass over the input row: input column c is padded column
                // c + pad, so even columns go to phase pad mod 2 from j = pad div 2 on, odd ones
                // to the other phase from j = ceil(pad / 2) on.
                let (p0, p1) = rows.split_at_mut(pw);
                let (even, odd) = if pad % 2 == 0 { (p0, p1) } else { (p1, p0) };
                let (oe, oo) = ((pad / 2).min(pw), pad.div_ceil(2).min(pw));
                // ne is no or no + 1 (the last even column has no odd partner).
                let (ne, no) = (iw.div_ceil(2).min(pw - oe), (iw / 2).min(pw - oo));
                let src = &self.x[n * sn + ci * sc + iy * sh..][..iw];
                even[..oe].fill(0.0);
                even[oe + ne..].fill(0.0);
                odd[..oo].fill(0.0);
                odd[oo + no..].fill(0.0);
                split_pairs(self.isa, &src[..2 * no], &mut even[oe..oe + no], &mut odd[oo..oo + no]);
                if ne > no {
                    even[oe + no] = src[2 * no];
                }
                continue;
            }
            for (px, dst) in rows.chunks_exact_mut(pw).enumerate() {
                // Padded column j·sx + px is input column j·sx + px − pad: inside for lo ≤ j < hi.
                let lo = pad.saturating_sub(px).div_ceil(sx).min(pw);
                let hi = (iw + pad).saturating_sub(px).div_ceil(sx).clamp(lo, pw);
                dst[..lo].fill(0.0);
                dst[hi..].fill(0.0);
                if lo < hi {
                    let start = n * sn + ci * sc + iy * sh + (lo * sx + px - pad) * sw;
                    copy_strided(&mut dst[lo..hi], &self.x[start..], sx * sw);
                }
            }
        }
    }

    /// Adds the bias and the residual to the sums `vals` of channel `o`, output row `oy` of image
    /// `n` from column `ox0` on, applies the activation and the clamp, and stores them.
    fn store(&self, vals: &mut [f32], n: usize, o: usize, oy: usize, ox0: usize) {
        let [yn, yc, yh, yw] = self.geom.y_strides;
        let at = n * yn + o * yc + oy * yh + ox0 * yw;
        if let Some(b) = self.epi.bias {
            vals.iter_mut().for_each(|v| *v += b[o]);
        }
        if let Some(r) = self.epi.residual {
            vals.iter_mut().enumerate().for_each(|(j, v)| *v += r[at + j * yw]);
        }
        self.epi.activate_slice(vals);
        if yw == 1 {
            // SAFETY: `validate` checked that every output element (image, channel, row, column)
            // lies inside the output; these are consecutive ones of output row `oy` of image `n`,
            // which only this task writes.
            unsafe { std::slice::from_raw_parts_mut(self.out.0.add(at), vals.len()) }.copy_from_slice(vals);
        } else {
            for (j, &v) in vals.iter().enumerate() {
                // SAFETY: as above, element by element.
                unsafe { self.out.write(at + j * yw, v) };
            }
        }
    }
}

/// Copies `src` (`cout` rows of `ow` values: channel c, column ox at c·ow + ox) to the output
/// row at `dst`, column ox and channel c at ox·yw + c: whole `L × L` blocks transposed in
/// registers, the edges value by value.
///
/// # Safety
/// The CPU has `V`'s features; `src` holds `cout · ow` values; `dst` is valid for writes at every
/// ox·yw + c (ox < ow, c < cout) and nothing else accesses those values meanwhile.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose_row<V: Transpose>(src: &[f32], cout: usize, ow: usize, dst: *mut f32, yw: usize) {
    let l = V::L;
    assert!(src.len() >= cout * ow && l <= 16, "stem row scratch too short");
    let (cb, xb) = (cout / l * l, ow / l * l);
    // SAFETY: the caller's contract; each load reads l values of row c0 + i from column x0
    // (x0 + l ≤ xb ≤ ow, c0 + i < cb ≤ cout: inside `src`), each store l values of column
    // x0 + i from channel c0 (c0 + l ≤ cout).
    unsafe {
        let mut v = [V::splat(0.0); 16];
        for c0 in (0..cb).step_by(l) {
            for x0 in (0..xb).step_by(l) {
                for (i, r) in v[..l].iter_mut().enumerate() {
                    *r = V::load(src.as_ptr().add((c0 + i) * ow + x0));
                }
                V::transpose(&mut v[..l]);
                for (i, r) in v[..l].iter().enumerate() {
                    r.store(dst.add((x0 + i) * yw + c0));
                }
            }
        }
        for c in 0..cout {
            let from = if c < cb { xb } else { 0 };
            for ox in from..ow {
                *dst.add(ox * yw + c) = src[c * ow + ox];
            }
        }
    }
}

/// [`transpose_row`] on AVX2 (8 × 8 blocks).
///
/// # Safety
/// As for [`transpose_row`], with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn transpose_row_avx2(src: &[f32], cout: usize, ow: usize, dst: *mut f32, yw: usize) {
    // SAFETY: the caller's contract.
    unsafe { transpose_row::<std::arch::x86_64::__m256>(src, cout, ow, dst, yw) }
}

/// [`transpose_row`] on AVX-512 (16 × 16 blocks).
///
/// # Safety
/// As for [`transpose_row`], with AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_row_avx512(src: &[f32], cout: usize, ow: usize, dst: *mut f32, yw: usize) {
    // SAFETY: the caller's contract.
    unsafe { transpose_row::<std::arch::x86_64::__m512>(src, cout, ow, dst, yw) }
}

/// Most vectors per tile of the fused kernels.
#[cfg(target_arch = "x86_64")]
const FUSED_VECS: usize = 2;

/// Channels per vector of [`Job::unit_lanes`]' weight rows (an AVX-512 vector).
const LANES_CB: usize = 16;

/// Most output channels of [`Job::unit_lanes`] (four AVX-512 vectors).
const LANES_MAX: usize = 4 * LANES_CB;

/// One [`Job::unit_lanes`] pass's operands: the tap offsets into the row scratch `xs`, the
/// block's weights `w` (a row of `NV` vectors per tap), its bias and epilogue, and where the
/// row's first pixel's block of channels goes (`dst`, pixels `yw` apart; `vecs` vectors stored,
/// the last one's first `last` lanes).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct LanesTile<'a> {
    offs: &'a [usize],
    w: *const f32,
    xs: *const f32,
    ow: usize,
    bias: &'a [f32; LANES_MAX],
    relu: bool,
    clamp: Option<(f32, f32)>,
    dst: *mut f32,
    yw: usize,
    vecs: usize,
    last: usize,
}

#[cfg(target_arch = "x86_64")]
impl LanesTile<'_> {
    /// The tile of `R` pixels from column `first` (see [`lanes_sums`] for `CLAMP`): summed from
    /// the bias, the ReLU and clamp applied, and its pixels from column `from` below `ow` stored.
    /// Not inlined, so that the `R × NV` accumulators have the vector registers to themselves:
    /// inlined into the row loop, the bias and clamp bounds held across it pushed three of the
    /// 14 × 2 accumulators onto the stack, a load and a store per tap each.
    ///
    /// # Safety
    /// The CPU has AVX-512F and `V` is its vector (or narrower); [`lanes_sums`]' reads are
    /// readable for these arguments; the stored pixels' `vecs` vectors lie inside the output.
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    unsafe fn run<V: Lanes, const NV: usize, const R: usize, const S: usize, const CLAMP: bool>(
        &self,
        first: usize,
        from: usize,
    ) {
        // SAFETY: the caller's contract throughout.
        unsafe {
            let bias: [V; NV] = V::loads(self.bias.as_ptr());
            let acc = lanes_sums::<V, NV, R, S, CLAMP>(self.offs, self.w, self.xs, first, self.ow, bias);
            // The ReLU and clamp applied to each vector as it is stored (as `map` closures over
            // the tile, compiled apart, each call passed the tile through memory: MobileNetV2 at
            // batch 1 on one Zen 4 core spent 1.7% of its forward in the clamp's closure alone).
            // (A `match`, not `Option::map`: the splats must not sit in a closure.)
            #[allow(clippy::manual_map)]
            let clamp = match self.clamp {
                Some((lo, hi)) => Some((V::splat(lo), V::splat(hi), lo == 0.0, hi == 0.0)),
                None => None,
            };
            let relu = self.relu;
            const { assert!(R <= 16, "each16 writes out up to 16 pixels") };
            if from == first && first + R <= self.ow && self.vecs == NV && self.last == V::L {
                // A whole tile (every pixel and vector stored): plain stores in straight-line code
                // (the loop below tests each pixel, each vector and the last vector's lane count
                // before every store; kept apart from it on purpose, see docs/benchmarks.md,
                // session 53). ResNet's 7×7/2 stem, channels-last, one image, one Zen 5 core,
                // alternated: 919–934 → 870–895 µs; MobileNetV2's stem block 304–318 → 296–310 µs.
                let dst = self.dst.add(first * self.yw);
                each16!(r => {
                    if r < R {
                        for (v, &a) in acc[r].iter().enumerate() {
                            a.relu_clamp(relu, clamp).store(dst.add(r * self.yw + v * V::L));
                        }
                    }
                });
                return;
            }
            // Every tile pixel written out (`each16`), the ones outside from..ow skipped.
            each16!(r => {
                let ox = first + r;
                if r < R && ox >= from && ox < self.ow {
                    let dst = self.dst.add(ox * self.yw);
                    for (v, &a) in acc[r].iter().enumerate() {
                        if v >= self.vecs {
                            continue;
                        }
                        let (p, a) = (dst.add(v * V::L), a.relu_clamp(relu, clamp));
                        if v + 1 < self.vecs { a.store(p) } else { a.store_first(p, self.last) }
                    }
                }
            });
        }
    }
}

/// The sums of one [`Job::unit_lanes`] tile: `R` pixels of an output row from column `first`
/// (`CLAMP`: columns past `ow - 1` read column `ow - 1`), `NV` vectors of channels from the
/// block's weights `w` (one row of `NV` vectors per tap), starting at `bias`; column c's value
/// of a tap is `S` scratch values after column c − 1's (1 in the stride phases, stride × input
/// channels in the flat layout). Without `CLAMP` the pixels are columns `first..first + R`, read
/// at constant offsets from each tap's address.
///
/// # Safety
/// The CPU has `V`'s features; for every tap offset `off`, `xs[off + c·S]` for the columns c
/// read (`first..first + R` without `CLAMP`, `first..ow` with it) and `w[..offs.len() · NV·L]`
/// are readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lanes_sums<V: Lanes, const NV: usize, const R: usize, const S: usize, const CLAMP: bool>(
    offs: &[usize],
    w: *const f32,
    xs: *const f32,
    first: usize,
    ow: usize,
    bias: [V; NV],
) -> [[V; NV]; R] {
    let mut acc = [bias; R];
    // SAFETY: the reads are the ones the caller's contract names.
    unsafe {
        for (t, &off) in offs.iter().enumerate() {
            let wt = w.add(t * NV * V::L);
            let wv: [V; NV] = V::loads(wt);
            // Wrapping: the in-place tiles' base lies `pad` columns before their row.
            let xt = xs.wrapping_add(off + first * S);
            for (r, acc) in acc.iter_mut().enumerate() {
                let c = if CLAMP { (first + r).min(ow - 1) - first } else { r };
                let x = V::splat(*xt.add(c * S));
                for (a, &k) in acc.iter_mut().zip(&wv) {
                    *a = x.fmadd(k, *a);
                }
            }
        }
    }
    acc
}

/// Output columns per tile of the lanes kernel for `cpad` padded channels (the `R` that
/// [`Job::unit_lanes_avx512`] picks for [`lanes_block`]).
fn lanes_tile(cpad: usize) -> usize {
    match lanes_block(cpad) / 16 {
        1 => 16,
        2 => 14,
        _ => 7,
    }
}

/// The first columns of the lanes kernel's tiles of `r` columns along a row of `ow`: every `r`-th
/// column, the last whole tile moved back to end at the row's end (the row shorter than a tile:
/// one tile at 0).
fn tile_firsts(ow: usize, r: usize) -> impl Iterator<Item = usize> {
    (0..ow).step_by(r.max(1)).map(move |ox0| if ow >= r { ox0.min(ow - r) } else { ox0 })
}

/// Channels of one pass of [`Job::unit_lanes`] over a row for `cpad` (a multiple of
/// [`LANES_CB`], at most [`LANES_MAX`]) padded channels: a whole-vector block that divides them,
/// so that a block's weights stay in L1 (ResNet's 64 channels in blocks of 32).
fn lanes_block(cpad: usize) -> usize {
    if cpad.is_multiple_of(32) {
        32
    } else if cpad == 48 {
        48
    } else {
        LANES_CB
    }
}

/// Largest block of the filter (bytes, as [`Job::unit_lanes`] reads it: taps × [`lanes_block`]
/// channels) that kernel takes: every tile reads its block's whole filter, which must stay in L1
/// beside the row scratch. MobileNetV2's stem (27 taps × 32 channels, 3.5 KB) ran 0.26 ms against
/// 0.34 on the transposing kernel (batch 1, one core of a 2-vCPU Intel Xeon); ResNet-18's (147
/// taps × 64 channels, 38 KB) ran 3.6–3.9 ms against 2.0–2.1 as one block, and 1.65–1.78 against
/// 1.89–2.11 in two blocks of 32 channels (18.4 KB each; blocks of 16 channels: 1.84–1.86).
const LANES_WEIGHT_BYTES: usize = 20 << 10;

/// The channel step of the fused kernels' tiles (divides [`CB`]; MobileNet's 32 channels are 8
/// whole steps).
#[cfg(target_arch = "x86_64")]
const FUSED_QUANTUM: usize = 4;

/// One tile of [`Job::unit_fused`].
#[cfg(target_arch = "x86_64")]
struct FusedTile<'a, V: Lanes> {
    /// The scratch from the tile's first column.
    xs: &'a [f32],
    offs: &'a [usize],
    /// The block's weights: tap t's channels at `w[t·CB..]`.
    w: &'a [f32],
    /// Channels stored (the others are past the last channel), lanes of the last vector stored.
    chans: usize,
    last: usize,
    relu: bool,
    /// Clamp bounds as vectors, and whether each is ±0.
    bounds: Option<(V, V, bool, bool)>,
}

#[cfg(target_arch = "x86_64")]
impl<V: Lanes> FusedTile<'_, V> {
    /// `P` vectors × `C` channels: sums in registers from the bias on, then the epilogue, then
    /// the stores at `out` (channel rows `yc` apart).
    ///
    /// # Safety
    /// The CPU has `V`'s features; every tap offset plus L·P lies inside `xs`, `w` holds
    /// `(taps − 1)·CB + C` values, `bias` at least `C`; `out` is valid for `chans` ≤ `C` rows of
    /// L·(P − 1) + `last` values, `yc` apart.
    #[inline(always)]
    unsafe fn run<const P: usize, const C: usize>(&self, out: *mut f32, yc: usize, bias: &[f32]) {
        let (xs, w) = (self.xs.as_ptr(), self.w.as_ptr());
        // SAFETY: the caller's contract (features and bounds) throughout.
        unsafe {
            let mut acc: [[V; P]; C] = std::array::from_fn(|c| [V::splat(bias[c]); P]);
            for (k, &off) in self.offs.iter().enumerate() {
                let xv: [V; P] = V::loads(xs.add(off));
                for (c, acc) in acc.iter_mut().enumerate() {
                    let wv = V::splat(*w.add(k * CB + c));
                    for (a, &x) in acc.iter_mut().zip(&xv) {
                        *a = x.fmadd(wv, *a);
                    }
                }
            }
            for (c, acc) in acc.iter().enumerate().take(self.chans) {
                for (p, &a) in acc.iter().enumerate() {
                    let mut a = a;
                    if self.relu {
                        a = a.relu();
                    }
                    if let Some((lo, hi, zlo, zhi)) = self.bounds {
                        a = a.clamp(lo, hi, zlo, zhi);
                    }
                    let dst = out.add(c * yc + V::L * p);
                    if p + 1 < P { a.store(dst) } else { a.store_first(dst, self.last) }
                }
            }
        }
    }
}

/// One tile's operands: the scratch from the tile's first column, the taps' offsets into it, and
/// the weights (tap t's channels at `w[t·CB..]`).
struct Tile<'a> {
    xs: &'a [f32],
    rows: &'a Rows,
    w: &'a [f32],
}

/// A compiled tile kernel: writes `cv` channels × `p` vectors of sums to the slice.
type TileFn = unsafe fn(&Tile<'_>, &mut [f32]);

impl Tile<'_> {
    /// Runs the kernel of `isa` for `p` vectors and `cv` channels (`cv` a multiple of 4 up to 12
    /// on AVX-512, of 2 up to 6 elsewhere) into `out` (`cv` rows of `p` vectors).
    fn run(&self, isa: FusedIsa, p: usize, cv: usize, out: &mut [f32]) {
        let (lanes, _, _) = shape(isa);
        // Every load of the kernels stays inside these bounds: the pixel vectors of the last
        // tap, the weights of the last tap's last channel, the sums.
        // `Rows::of` made `last` the largest offset.
        let taps = self.rows.offs.len();
        assert!(
            self.rows.last + p * lanes <= self.xs.len()
                && taps > 0
                && (taps - 1) * CB + cv <= self.w.len()
                && cv * p * lanes <= out.len(),
            "stem tile out of bounds"
        );
        macro_rules! pick {
            ($f:ident: $($p:literal, $c:literal);*) => {
                match (p, cv) {
                    $(($p, $c) => $f::<$p, $c> as TileFn,)*
                    _ => unreachable!("tile {p}×{cv}"),
                }
            };
        }
        let kernel = match isa {
            #[cfg(target_arch = "x86_64")]
            FusedIsa::Avx512 => pick!(tile_avx512: 1, 4; 1, 8; 1, 12; 2, 4; 2, 8; 2, 12),
            #[cfg(target_arch = "x86_64")]
            FusedIsa::Avx2 => pick!(tile_avx2: 1, 2; 1, 4; 1, 6; 2, 2; 2, 4; 2, 6),
            _ => pick!(tile_generic: 1, 2; 1, 4; 1, 6; 2, 2; 2, 4; 2, 6),
        };
        // SAFETY: the bounds the kernels rely on are asserted above; the AVX-512 and AVX2
        // kernels are only picked for an `isa` that `FusedIsa::checked` confirmed on this CPU.
        unsafe { kernel(self, out) }
    }
}

/// The portable tile: `P` vectors of 8 columns × `C` channels in plain arrays.
fn tile_generic<const P: usize, const C: usize>(t: &Tile<'_>, out: &mut [f32]) {
    let mut acc = [[[0.0f32; 8]; P]; C];
    for (k, &off) in t.rows.offs.iter().enumerate() {
        let src = &t.xs[off..off + 8 * P];
        let w = &t.w[k * CB..k * CB + C];
        for (acc, &w) in acc.iter_mut().zip(w) {
            for (a, s) in acc.iter_mut().zip(src.chunks_exact(8)) {
                for (a, &s) in a.iter_mut().zip(s) {
                    *a += s * w;
                }
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        out[c * 8 * P..][..8 * P].copy_from_slice(acc.as_flattened());
    }
}

/// The AVX2 tile: `P` × 8 columns × `C` channels in `P·C` ymm accumulators.
///
/// # Safety
/// The CPU has AVX2 and FMA, and the bounds asserted in [`Tile::run`] hold.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const P: usize, const C: usize>(t: &Tile<'_>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); P]; C];
    let (xs, w) = (t.xs.as_ptr(), t.w.as_ptr());
    for (k, &off) in t.rows.offs.iter().enumerate() {
        // SAFETY: `off + 8·P` ≤ the scratch length and `k·CB + C` ≤ the weights' (asserted in
        // `Tile::run`).
        unsafe {
            let xv: [__m256; P] = std::array::from_fn(|p| _mm256_loadu_ps(xs.add(off + 8 * p)));
            for (c, acc) in acc.iter_mut().enumerate() {
                let wv = _mm256_broadcast_ss(&*w.add(k * CB + c));
                for (a, &x) in acc.iter_mut().zip(&xv) {
                    *a = _mm256_fmadd_ps(x, wv, *a);
                }
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        for (p, &a) in acc.iter().enumerate() {
            // SAFETY: `out` holds C rows of 8·P values (asserted in `Tile::run`).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add((c * P + p) * 8), a) };
        }
    }
}

/// The AVX-512 tile: `P` × 16 columns × `C` channels in `P·C` zmm accumulators.
///
/// # Safety
/// The CPU has AVX-512F, and the bounds asserted in [`Tile::run`] hold.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const P: usize, const C: usize>(t: &Tile<'_>, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); P]; C];
    let (xs, w) = (t.xs.as_ptr(), t.w.as_ptr());
    for (k, &off) in t.rows.offs.iter().enumerate() {
        // SAFETY: `off + 16·P` ≤ the scratch length and `k·CB + C` ≤ the weights' (asserted in
        // `Tile::run`).
        unsafe {
            let xv: [__m512; P] = std::array::from_fn(|p| _mm512_loadu_ps(xs.add(off + 16 * p)));
            for (c, acc) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*w.add(k * CB + c));
                for (a, &x) in acc.iter_mut().zip(&xv) {
                    *a = _mm512_fmadd_ps(x, wv, *a);
                }
            }
        }
    }
    for (c, acc) in acc.iter().enumerate() {
        for (p, &a) in acc.iter().enumerate() {
            // SAFETY: `out` holds C rows of 16·P values (asserted in `Tile::run`).
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add((c * P + p) * 16), a) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{Lcg, naive, strides};
    use super::super::{ConvFilter, FilterKind, conv2d_f32};
    use super::*;
    use crate::kernels::gemm::Activation;
    use crate::kernels::gemm::epilogue::act_f64;

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
        /// NHWC input, NHWC output.
        nhwc: [bool; 2],
    }

    impl Case {
        fn geom(&self) -> ConvGeom {
            let out_hw: [usize; 2] = std::array::from_fn(|a| {
                let span = self.in_hw[a] + self.pads[a][0] + self.pads[a][1];
                let reach = (self.k[a] - 1) * self.dil[a] + 1;
                span.checked_sub(reach).map_or(0, |r| r / self.stride[a] + 1)
            });
            let order = |nhwc: bool| if nhwc { [0, 2, 3, 1] } else { [0, 1, 2, 3] };
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
                x_strides: strides([n, self.cin, h, w], order(self.nhwc[0])),
                y_strides: strides([n, self.cout, oh, ow], order(self.nhwc[1])),
            }
        }
    }

    /// Runs `case` with the epilogue `parts` (bias, residual, activation, clamp) through
    /// `conv2d_f32` (when the geometry takes this kernel) and through every ISA path on 1 and 2
    /// threads, each against the f64 loop.
    fn check(rng: &mut Lcg, case: Case, parts: (bool, bool, Activation, bool), two: &rayon::ThreadPool) {
        let g = case.geom();
        let (cin, cout, [kh, kw]) = (case.cin, case.cout, case.k);
        let x: Vec<f32> = (0..g.batch * cin * g.in_hw[0] * g.in_hw[1]).map(|_| rng.next()).collect();
        // Filter as IHWO, a layout other than the packed one.
        let ws = strides([cout, cin, kh, kw], [1, 2, 3, 0]);
        let w: Vec<f32> = (0..cout * cin * kh * kw).map(|_| rng.next()).collect();
        let bias: Vec<f32> = (0..cout).map(|_| rng.next()).collect();
        let len = g.batch * cout * g.out_hw[0] * g.out_hw[1];
        let res: Vec<f32> = (0..len).map(|_| rng.next()).collect();
        let epi = ConvEpilogue {
            bias: parts.0.then_some(&bias[..]),
            residual: parts.1.then_some(&res[..]),
            activation: parts.2,
            clamp: parts.3.then_some((-0.5, 0.7)),
        };
        let want: Vec<(usize, f64)> = naive(&g, &x, &w, ws, epi.bias)
            .into_iter()
            .map(|(i, v)| {
                let v = act_f64(parts.2, if parts.1 { v + res[i] as f64 } else { v });
                (i, if parts.3 { v.clamp(-0.5, 0.7) } else { v })
            })
            .collect();
        let scale = (cin * kh * kw) as f64;
        let compare = |y: &[f32], what: &str| {
            for &(i, v) in &want {
                let tol = 2e-6 * scale + 1e-6 * v.abs();
                assert!((y[i] as f64 - v).abs() <= tol, "{what} {case:?} {parts:?} at {i}: {} vs {v}", y[i]);
            }
        };
        if g.is_stem() {
            let filter = ConvFilter::new(&g, &w, ws).unwrap();
            assert_eq!(filter.describe(), "stem direct");
            assert!(matches!(filter.kind, FilterKind::Stem(_)));
            let mut y = vec![f32::NAN; len];
            conv2d_f32(&g, &x, &filter, &epi, &mut y, Some(two)).unwrap();
            compare(&y, "conv2d_f32");
        }
        let f = StemFilter::new(cin, cout, kh, kw, |o, i, y, x| w[o * ws[0] + i * ws[1] + y * ws[2] + x * ws[3]]);
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for isa in [FusedIsa::Generic, FusedIsa::Avx2, FusedIsa::Avx512] {
            for (pool, parallel) in [(&one, false), (&one, true), (two, true)] {
                let mut y = vec![f32::NAN; len];
                let out = OutPtr(y.as_mut_ptr());
                pool.install(|| conv_on(isa, &g, &x, &f, &epi, out, parallel)).unwrap();
                compare(&y, isa.name());
            }
        }
    }

    fn two_threads() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap()
    }

    const ALL_PARTS: (bool, bool, Activation, bool) = (true, true, Activation::Relu, true);

    /// ResNet's stem on a small image; the other cases change a few fields.
    const STEM: Case = Case {
        batch: 1,
        cin: 3,
        cout: 64,
        in_hw: [30, 37],
        k: [7, 7],
        stride: [2, 2],
        pads: [[3, 3], [3, 3]],
        dil: [1, 1],
        nhwc: [false, false],
    };

    #[test]
    fn matches_naive_loop_on_stems_and_edges() {
        let (mut rng, two) = (Lcg(11), two_threads());
        let base = STEM;
        let cases = [
            // ResNet's stem (two images), MobileNet's, VGG's (stride 1).
            Case { batch: 2, ..base },
            Case { cout: 32, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [33, 40], ..base },
            Case { k: [3, 3], stride: [1, 1], pads: [[1, 1], [1, 1]], cout: 13, ..base },
            // Channels not a multiple of any tile; one channel in and out.
            Case { cin: 4, cout: 27, ..base },
            Case { cin: 1, cout: 1, in_hw: [9, 70], ..base },
            // A 1×1 image, a kernel larger than the input with padding, no padding at all.
            Case { in_hw: [1, 1], ..base },
            Case { in_hw: [3, 4], k: [5, 7], stride: [1, 1], pads: [[2, 2], [3, 3]], ..base },
            Case { pads: [[0, 0], [0, 0]], in_hw: [12, 12], ..base },
            // Stride 3, dilation, asymmetric padding, 1-D rows.
            Case { stride: [3, 3], k: [4, 5], pads: [[0, 2], [1, 2]], ..base },
            Case { dil: [2, 3], stride: [1, 2], pads: [[2, 1], [0, 4]], cin: 2, cout: 9, ..base },
            Case { in_hw: [1, 50], k: [1, 7], pads: [[0, 0], [3, 1]], cout: 7, ..base },
            // NHWC on either side, no images.
            Case { nhwc: [true, false], cout: 20, ..base },
            Case { nhwc: [false, true], cout: 20, ..base },
            Case { nhwc: [true, true], batch: 2, cin: 2, cout: 5, ..base },
            // Channels-last output in whole 16 × 16 blocks and edges (MobileNet's stem, 64
            // channels over 35 columns).
            Case { nhwc: [false, true], cout: 32, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [9, 64], ..base },
            Case { nhwc: [false, true], cout: 64, in_hw: [6, 70], ..base },
            // ResNet's rows of 112 pixels: eight whole tiles of 14.
            Case { nhwc: [false, true], cout: 64, in_hw: [3, 224], ..base },
            // Channels-last outputs with the channels in the lanes (3×3 filters, small enough):
            // three vectors (40 channels) over rows of 23 pixels (three tiles of 7 and a last one
            // from pixel 16, over the third), four (64: two blocks of two) over rows of 12 (shorter
            // than a tile of 14: its last pixel repeated), two over rows of exactly one tile.
            // ResNet's 7×7 filter with 64 channels (two blocks) is the one above (rows of 35:
            // tiles from pixels 0, 14 and 21).
            Case { nhwc: [false, true], cout: 40, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [5, 45], ..base },
            Case { nhwc: [false, true], cout: 64, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [4, 23], ..base },
            Case { nhwc: [false, true], cout: 32, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [3, 28], ..base },
            // The channels-in-lanes kernel over the flat scratch: channels-last inputs with three
            // channels at stride 2 (MobileNet's and ResNet's stems as a channels-last model has
            // them; rows of 32 pixels, of 12: shorter than a tile, a dilated window with
            // asymmetric padding) and stride 1 (three vectors, rows of 45), channels-first inputs
            // at stride 2 (the cases above); at stride 1 the stride phases.
            Case { nhwc: [true, true], batch: 2, cout: 32, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [9, 64], ..base },
            Case { nhwc: [true, true], cout: 64, in_hw: [6, 70], ..base },
            Case { nhwc: [true, true], cout: 64, k: [3, 3], pads: [[1, 1], [1, 1]], in_hw: [4, 23], ..base },
            Case {
                nhwc: [true, true],
                cout: 32,
                k: [3, 3],
                dil: [1, 2],
                pads: [[1, 0], [2, 1]],
                in_hw: [7, 41],
                ..base
            },
            // In-place reads with dilated rows: kernel rows two apart, windows inside the input
            // from the second output row on.
            Case {
                nhwc: [true, true],
                cout: 32,
                k: [3, 3],
                dil: [2, 1],
                pads: [[2, 2], [1, 1]],
                in_hw: [9, 64],
                ..base
            },
            Case {
                nhwc: [true, true],
                cout: 40,
                k: [3, 3],
                stride: [1, 1],
                pads: [[1, 1], [1, 1]],
                in_hw: [5, 45],
                ..base
            },
            Case {
                nhwc: [false, true],
                cout: 32,
                k: [3, 3],
                stride: [1, 1],
                pads: [[1, 1], [1, 1]],
                in_hw: [4, 30],
                ..base
            },
            Case { batch: 0, ..base },
        ];
        for case in cases {
            check(&mut rng, case, ALL_PARTS, &two);
            // Without the residual (ReLU and clamp): the fused kernels for NCHW outputs.
            check(&mut rng, case, (true, false, Activation::Relu, true), &two);
        }
    }

    #[test]
    fn matches_naive_loop_on_random_shapes_and_epilogues() {
        let (mut rng, two) = (Lcg(5), two_threads());
        let acts = [Activation::None, Activation::Relu, Activation::Sigmoid, Activation::HardSwish];
        for _ in 0..40 {
            let mut pick = |n: usize, from: usize| from + rng.below(n);
            let case = Case {
                batch: pick(3, 0),
                cin: pick(4, 1),
                cout: pick(30, 1),
                in_hw: [pick(14, 1), pick(40, 1)],
                k: [pick(7, 1), pick(7, 1)],
                stride: [pick(3, 1), pick(3, 1)],
                pads: [[pick(4, 0), pick(4, 0)], [pick(4, 0), pick(4, 0)]],
                dil: [pick(2, 1), pick(2, 1)],
                nhwc: [pick(2, 0) == 1, pick(2, 0) == 1],
            };
            let parts = (pick(2, 0) == 1, pick(2, 0) == 1, acts[pick(4, 0)], pick(2, 0) == 1);
            check(&mut rng, case, parts, &two);
        }
    }

    #[test]
    fn every_epilogue_part_alone() {
        let (mut rng, two) = (Lcg(3), two_threads());
        let case = Case { batch: 2, cout: 19, in_hw: [11, 21], k: [3, 3], pads: [[1, 1], [1, 1]], ..STEM };
        let none = (false, false, Activation::None, false);
        for parts in [
            none,
            (true, false, Activation::None, false),
            (false, true, Activation::None, false),
            (false, false, Activation::Tanh, false),
            (false, false, Activation::None, true),
        ] {
            check(&mut rng, case, parts, &two);
        }
    }

    #[test]
    fn packs_a_filter_without_output_channels() {
        // A convolution with no output channels still gets a filter (and computes nothing).
        let f = StemFilter::new(3, 0, 3, 3, |_, _, _, _| 1.0);
        assert_eq!(f.size_bytes(), 0);
        let g = Case { cout: 0, k: [3, 3], pads: [[1, 1], [1, 1]], ..STEM }.geom();
        let filter = ConvFilter::new(&g, &[], [1, 1, 1, 1]).unwrap();
        let x = vec![1.0f32; 3 * 30 * 37];
        conv2d_f32(&g, &x, &filter, &ConvEpilogue::default(), &mut [], None).unwrap();
    }

    #[test]
    fn takes_stems_only() {
        let stem = Case { in_hw: [224, 224], ..STEM };
        assert!(stem.geom().is_stem());
        assert!(Case { k: [3, 3], pads: [[1, 1], [1, 1]], cout: 32, ..stem }.geom().is_stem());
        // Many input channels, 1×1 kernels and groups keep the other paths.
        assert!(!Case { cin: 16, ..stem }.geom().is_stem());
        assert!(!Case { k: [1, 1], pads: [[0, 0], [0, 0]], ..stem }.geom().is_stem());
        assert!(!ConvGeom { groups: 3, out_channels: 63, ..stem.geom() }.is_stem());
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let case = Case { cout: 8, in_hw: [8, 8], k: [3, 3], stride: [1, 1], pads: [[1, 1], [1, 1]], ..STEM };
        let g = case.geom();
        let (x, mut y) = (vec![0.0; 3 * 64], vec![0.0; 8 * 64]);
        let out = OutPtr(y.as_mut_ptr());
        let epi = ConvEpilogue::default();
        // A filter for another kernel size, for fewer channels, for groups.
        let small = StemFilter::new(3, 8, 3, 2, |_, _, _, _| 1.0);
        assert!(conv_on(FusedIsa::Generic, &g, &x, &small, &epi, out, true).is_err());
        let narrow = StemFilter::new(3, 4, 3, 3, |_, _, _, _| 1.0);
        assert!(conv_on(FusedIsa::Generic, &g, &x, &narrow, &epi, out, true).is_err());
        let grouped = ConvGeom { groups: 3, in_channels: 3, out_channels: 3, ..g.clone() };
        let f = StemFilter::new(1, 3, 3, 3, |_, _, _, _| 1.0);
        assert!(conv_on(FusedIsa::Generic, &grouped, &x, &f, &epi, out, true).is_err());
        // Through the public entry: a stem filter for another geometry, a short output.
        let w = vec![0.5; 8 * 3 * 9];
        let filter = ConvFilter::new(&g, &w, [27, 9, 3, 1]).unwrap();
        let other = Case { cout: 9, ..case }.geom();
        assert!(conv2d_f32(&other, &x, &filter, &epi, &mut vec![0.0; 9 * 64], None).is_err());
        assert!(conv2d_f32(&g, &x, &filter, &epi, &mut y[..100], None).is_err());
        assert!(conv2d_f32(&g, &x, &filter, &epi, &mut y, None).is_ok());
    }
}
