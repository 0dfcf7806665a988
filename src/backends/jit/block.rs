//! Inverted residual blocks run band by band: a 1×1 expansion, the depthwise convolution reading
//! it and the 1×1 projection reading that (MobileNetV2's block, EfficientNet's without its
//! squeeze) become one step that runs all three over a band of output rows before the next band.
//!
//! Layer by layer, the expansion writes a tensor several times wider than the block's input and
//! output (six times in MobileNetV2: 4.8 MB at 96 channels × 112², 1.8 MB at 144 × 56²) to
//! memory, the depthwise convolution reads it back and writes another, and the projection reads
//! that: the three layers are bound by memory bandwidth. Band by band, the expanded rows a band
//! needs and the band's depthwise result live in two scratch buffers of a few hundred KiB (kept
//! per thread between executions), from which the next layer reads them while they are in L2.
//! The expanded rows two consecutive bands share (the depthwise window's overlap) are moved to
//! the front of the buffer instead of being computed again. Each layer runs on the kernels of
//! [`crate::kernels::conv`] with the band's geometry (its rows, the scratch's strides), the
//! prepared filters and epilogues unchanged.
//!
//! The output rows of an image split into parts over the thread pool when the images alone do
//! not split evenly (batch 1): each part computes the few expanded rows at its upper edge that
//! its neighbour also computes.
//!
//! A depthwise convolution and the 1×1 projection of its result also form a step of their own
//! when no expansion comes with them ([`qualify_pair`]: the smaller blocks, whose expansion runs
//! as a step): the depthwise convolution reads its window rows from its input in place, band by
//! band, and its result stays in the scratch for the projection.
//!
//! The scratch is the running thread's, shared by every block and pair it runs: the next one
//! finds it in cache.
//!
//! Three consecutive convolution steps form a block ([`qualify`]) when the first is a 1×1
//! stride-1 convolution without residual, the second a depthwise convolution of its result and
//! the third a 1×1 stride-1 convolution of that (with or without residual), all channels-first
//! or all channels-last with dense planes and prepared constant filters, and neither
//! intermediate value read anywhere else. The first may also be any one-group convolution
//! without residual whose input is dense in either layout (MobileNetV2's stem, 3×3/2 from the
//! channels-first image into channels-last planes): a band's rows of its result come from the
//! input rows under their windows, with the padding above the first band (MobileNetV2 at batch
//! 1 on one Zen 5 core: stem, depthwise and projection 299 µs as a block against 331–363 µs as
//! three steps). Which of those run as blocks is the jit option `conv_blocks`: by default (`auto`) the
//! blocks whose expanded image is larger than a core's L2 cache ([`qualify`]'s `min_bytes`),
//! `on` every one, `off` none.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::shape::Shape;
use crate::kernels::conv::{ConvGeom, LineAligned};
use crate::kernels::tensor::Tensor;

use super::conv::ImageConv;
use super::fast::FastKernel;

const OP: &str = "ConvGeneral";

/// Bytes the scratch of one band (its expanded rows and its depthwise result) may take: the
/// band's rows are chosen so that both stay in a core's L2 cache with the layers' filters
/// (MobileNetV2's 112×112 block, 4 output rows of 56 per band: 0.97 ms at 256 KiB, 0.90 at
/// 512 KiB, 0.96 at 1 MiB).
const BAND_BYTES: usize = 512 << 10;

/// Whether `expand`, `dw` and `project` (each the image kernel of consecutive steps, `dw` reading
/// `expand`'s result and `project` reading `dw`'s) can run as one block, whose expanded image
/// (the depthwise input of one image) takes more than `min_bytes`.
///
/// The default `min_bytes` is a core's L2 cache (jit `conv_blocks=auto`), from MobileNetV2 at
/// batch 1 (112², 56² and 28² blocks, expanded images of 4.8 MB, 1.8 MB and 602 KB). On a 2-vCPU
/// Intel Xeon (Sapphire Rapids class, 2 MiB of L2 per core): the 112² block ran 0.90 ms fused
/// against 1.06 ms as three steps (one thread, profiled), the model 7.03–7.11 against 7.15–7.23
/// ms on one thread; the 56² and 28² blocks ran slower fused (0.78–0.88 against 0.76 ms at 56²,
/// 0.65–0.70 against 0.56 ms for the two at 28²): layer by layer their expanded images stay in
/// that L2, and the kernels run less efficiently on bands than on whole planes. On a 2-vCPU AMD
/// EPYC Zen 4 (1 MiB of L2 per core) the 56² blocks win fused (the stride-1 one 736 µs against
/// 908 as three steps, the stride-2 one 388 against 437; the model 7.19 against 7.51 ms on one
/// thread, 3.90 against 4.00 on two, best of 10 alternated rounds) and the 28² ones do not
/// (7.27 ms with them).
pub(crate) fn qualify(expand: &ImageConv, dw: &ImageConv, project: &ImageConv, min_bytes: usize) -> bool {
    let (a, b) = (expand.geom(), dw.geom());
    // The depthwise input and everything after it channels-first or (all) channels-last
    // ([`dw_projects`]); the first convolution's input either.
    let last = b.x_strides[1] == 1;
    let first_in = dense_as(a.x_strides[1] == 1, a.x_strides, a.in_channels, a.in_hw);
    let c6 = a.out_channels;
    expand.images == dw.images
        && dw_projects(dw, project)
        && first_in
        && dense_as(last, a.y_strides, a.out_channels, a.out_hw)
        && (pointwise(a) || (a.groups == 1 && a.kernel_hw.iter().all(|&k| k > 0) && rows_inside(a)))
        && !expand.has_residual()
        && b.in_channels == c6
        && b.in_hw == a.out_hw
        && [b.in_hw[1], c6, size_of::<f32>()].iter().fold(b.in_hw[0], |n, &k| n.saturating_mul(k)) > min_bytes
}

/// Whether `dw` and `project` (the image kernels of consecutive steps, `project` reading `dw`'s
/// result) can run as one step band by band without an expansion before them (a depthwise
/// convolution whose input is any dense image: the expansions too small for [`qualify`]'s
/// threshold run as steps of their own). Band by band, the depthwise result stays in a scratch
/// buffer that the projection reads while it is in cache, instead of a tensor written to memory
/// and read back, and on several threads the pair is one parallel split instead of two. One
/// image only: over a batch the layers as steps run the projection over all the images' pixels
/// at once (MobileNetV2 at batch 8 on one Zen 5 core: 22.9 ms as steps, 23.5 as pairs image by
/// image). On `threads` threads its output rows must split evenly (MobileNetV2's 7 rows at 7×7
/// would take 4 against 3 on two threads; its layers alone split channels evenly).
pub(crate) fn qualify_pair(dw: &ImageConv, project: &ImageConv, threads: usize) -> bool {
    let ho = dw.geom().out_hw[0];
    let even = threads <= 1 || ho.is_multiple_of(threads);
    dw.images == 1 && dw_projects(dw, project) && ho > 0 && even
}

/// What [`qualify`] and [`qualify_pair`] ask of the depthwise convolution `dw` and the
/// projection `project` of its result: dense images in one layout (channels-first or
/// channels-last), a depthwise convolution without residual whose output rows each read an input
/// row, a 1×1 stride-1 one-group projection of all its channels, one image count.
fn dw_projects(dw: &ImageConv, project: &ImageConv) -> bool {
    let (b, c) = (dw.geom(), project.geom());
    let last = b.x_strides[1] == 1;
    let dense = |s: [usize; 4], c: usize, hw: [usize; 2]| dense_as(last, s, c, hw);
    let planes =
        |g: &ConvGeom| dense(g.x_strides, g.in_channels, g.in_hw) && dense(g.y_strides, g.out_channels, g.out_hw);
    dw.images == project.images
        && [b, c].iter().all(|g| planes(g))
        && b.is_depthwise()
        && b.kernel_hw[0] > 0
        && b.out_channels == b.in_channels
        && b.out_channels > 0
        && !dw.has_residual()
        && pointwise(c)
        && c.in_channels == b.out_channels
        && c.in_hw == b.out_hw
        && b.out_hw[1] > 0
        && rows_inside(b)
}

/// Whether `s` are the strides of a dense image of `c` channels × `hw` pixels, channels-last when
/// `last` (the image stride aside: one image's rows may be a band of a larger one).
fn dense_as(last: bool, s: [usize; 4], c: usize, hw: [usize; 2]) -> bool {
    s[1..] == strides(last, c, hw[0], hw[1])[1..]
}

/// Whether `g` is a 1×1 stride-1 one-group convolution without padding.
fn pointwise(g: &ConvGeom) -> bool {
    g.kernel_hw == [1, 1] && g.stride == [1, 1] && g.pad == [0, 0] && g.groups == 1 && g.in_hw == g.out_hw
}

/// Whether every output row of `g` reads at least one input row (no band of output rows lies
/// wholly in the padding).
fn rows_inside(g: &ConvGeom) -> bool {
    let reach = (g.kernel_hw[0].max(1) - 1) * g.dilation[0] + 1;
    g.pad[0] < reach && (g.out_hw[0].max(1) - 1) * g.stride[0] < g.in_hw[0] + g.pad[0]
}

/// A task's scratch: the expanded rows of a band's window (`[channel][cap][width]`), the
/// band's depthwise result (`[channel][band][out width]`), and where rows are split over tasks,
/// the band's projection and its residual (`[out channel][band][out width]`). Each starts on a
/// cache line, so that the depthwise kernel's vector loads never split two (MobileNetV2 batch 1,
/// one Zen 5 core: its four blocks' depthwise layers 305 → 244 µs, the model 2.87 → 2.79 ms).
#[derive(Default)]
struct Set {
    e: LineAligned,
    d: LineAligned,
    p: LineAligned,
    r: LineAligned,
}

thread_local! {
    /// The scratch of the blocks this thread runs ([`BlockKernel::run_into`]).
    static SCRATCH: std::cell::Cell<Set> = std::cell::Cell::new(Set::default());
}

/// Where a task's results go.
enum Out<'a> {
    /// Rows `first..` of an image's result (all of its channels), the task's alone: the whole
    /// image (`first` = 0), or a part of a channels-last one.
    Image { y: &'a mut [f32], first: usize },
    /// Some rows of a channels-first image whose other rows other tasks write.
    Rows(Rows),
}

/// An image's result that tasks share, each writing its own rows of every channel.
struct Rows {
    /// Its first element.
    at: *mut f32,
    /// Its elements.
    len: usize,
}

// SAFETY: a `Rows` is only written through `Rows::write`, at rows that belong to one task (the
// parts of an image partition its output rows), and read by no task.
unsafe impl Send for Rows {}

impl Rows {
    /// Copies `vals` to elements `at..at + vals.len()`.
    fn write(&mut self, at: usize, vals: &[f32]) {
        assert!(at + vals.len() <= self.len, "conv block: rows outside the result");
        // SAFETY: the range lies inside the image's result (asserted) and belongs to the rows of
        // the calling task, which no other task writes or reads (see the `Send` impl).
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.at.add(at), vals.len()) }
    }
}

/// The block's kernel.
struct BlockKernel {
    /// The expansion; none for a depthwise convolution and projection alone ([`qualify_pair`]),
    /// whose depthwise convolution reads the block's input.
    expand: Option<ImageConv>,
    dw: ImageConv,
    project: ImageConv,
    /// Output rows of the depthwise convolution per band.
    band: usize,
    /// Whether the operands are channels-last (else channels-first).
    channels_last: bool,
    /// Rows of expanded input per channel in the scratch (a band's window).
    cap: usize,
    desc: String,
}

/// The step running the block `expand` → `dw` → `project` (they [`qualify`]), or `dw` →
/// `project` alone (they [`qualify_pair`]).
pub(crate) fn build(expand: Option<ImageConv>, dw: ImageConv, project: ImageConv) -> Box<dyn FastKernel> {
    let b = dw.geom();
    let (w, wo, c6) = (b.in_hw[1], b.out_hw[1], b.out_channels);
    let reach = (b.kernel_hw[0] - 1) * b.dilation[0] + 1;
    // Without an expansion there are no expanded rows to hold.
    let cap_of = |rows: usize| if expand.is_some() { (rows - 1) * b.stride[0] + reach } else { 0 };
    let bytes = |rows: usize| 4 * c6 * (cap_of(rows) * w + rows * wo);
    // The most rows within the budget (at least one, at most the plane).
    let mut band = 1;
    while band < b.out_hw[0] && bytes(band + 1) <= BAND_BYTES {
        band += 1;
    }
    let cap = cap_of(band);
    // A pair says so in plan dumps and profiles.
    let (kind, first) = match &expand {
        Some(e) => ("block", format!("{}; ", e.desc)),
        None => ("pair", String::new()),
    };
    let desc = format!(
        "conv {kind}, band by band ({} images, bands of {band} of {} rows, {} bytes of scratch per task): {first}{}; {}",
        dw.images,
        b.out_hw[0],
        bytes(band),
        dw.desc,
        project.desc
    );
    tracing::debug!(target: "tensorjit::jit", kernel = %desc, "conv block");
    let channels_last = b.x_strides[1] == 1;
    Box::new(BlockKernel { expand, dw, project, band, cap, channels_last, desc })
}

impl BlockKernel {
    /// Output rows `rows.0..rows.1` of one image: `x` the image's input, `res` its residual
    /// (when the projection adds one), `out` where its result goes, `set` the task's scratch.
    fn part(
        &self,
        x: &[f32],
        res: Option<&[f32]>,
        out: &mut Out<'_>,
        rows: (usize, usize),
        set: &mut Set,
    ) -> Result<()> {
        let Set { e, d, p: pbuf, r: rbuf } = set;
        let b = self.dw.geom();
        let last = self.channels_last;
        let [w, wo] = [b.in_hw[1], b.out_hw[1]];
        let (c6, cap) = (b.out_channels, self.cap);
        // The thread's scratch may be larger (another block's).
        let (e, d) = (&mut e[..c6 * cap * w], &mut d[..c6 * self.band * wo]);
        let (se, sd) = (strides(last, c6, cap, w), strides(last, c6, self.band, wo));
        // Expanded rows held in `e` (absolute rows lo..hi, from the window's row 0).
        let mut held: Option<(usize, usize)> = None;
        let mut o0 = rows.0;
        while o0 < rows.1 {
            let o1 = (o0 + self.band).min(rows.1);
            let (lo, hi, pad_top) = window_rows(b, o0, o1);
            // The depthwise input: the window's rows of the block's input in place (a pair), or
            // of the expansion in the scratch.
            let (src, x_strides): (&[f32], _) = match &self.expand {
                None => (&x[lo * b.x_strides[2]..], b.x_strides),
                Some(expand) => {
                    self.expand_rows(expand, x, (&mut *e, se), &mut held, (lo, hi))?;
                    (&*e, se)
                }
            };
            let g = ConvGeom {
                in_hw: [hi - lo, w],
                out_hw: [o1 - o0, wo],
                pad: [pad_top, b.pad[1]],
                x_strides,
                y_strides: sd,
                ..b.clone()
            };
            self.dw.run_as(&one_image(last, g), src, None, d)?;
            self.project_band(d, sd, res, out, (o0, o1), pbuf, rbuf)?;
            o0 = o1;
        }
        Ok(())
    }

    /// The expanded rows `lo..hi` (a band's depthwise window) into the scratch `e` (strides `se`)
    /// from the block's input `x`: the rows still `held` from the previous band moved to the
    /// front, the others computed from the input rows they read; `held` then says which rows `e`
    /// holds.
    fn expand_rows(
        &self,
        expand: &ImageConv,
        x: &[f32],
        (e, se): (&mut [f32], [usize; 4]),
        held: &mut Option<(usize, usize)>,
        (lo, hi): (usize, usize),
    ) -> Result<()> {
        let (a, b) = (expand.geom(), self.dw.geom());
        let last = self.channels_last;
        let (w, c6) = (b.in_hw[1], b.out_channels);
        // Rows still held from the previous band move to the window's front.
        let start = match *held {
            Some((plo, phi)) if (plo..phi).contains(&lo) => {
                if lo > plo {
                    let planes = if last { 1 } else { c6 };
                    for ch in 0..planes {
                        let at = ch * se[1];
                        e.copy_within(at + (lo - plo) * se[2]..at + (phi - plo) * se[2], at);
                    }
                }
                phi
            }
            _ => lo,
        };
        if hi > start {
            // The first convolution's output rows start..hi, from the input rows they read (the
            // same rows for a 1×1 expansion).
            let (ilo, ihi, ipad) = window_rows(a, start, hi);
            let g = ConvGeom {
                in_hw: [ihi - ilo, a.in_hw[1]],
                out_hw: [hi - start, w],
                pad: [ipad, a.pad[1]],
                y_strides: se,
                ..a.clone()
            };
            let g = one_image_of(a.x_strides[1] == 1, last, g);
            expand.run_as(&g, &x[ilo * a.x_strides[2]..], None, &mut e[(start - lo) * se[2]..])?;
        }
        *held = Some((lo, hi.max(start)));
        Ok(())
    }

    /// The projection of output rows `o0..o1` from their depthwise result `d` (the band's
    /// scratch, strides `sd`), into `out`; `pbuf` and `rbuf` hold a band's result and residual
    /// where the rows go to an image that other tasks also write.
    #[allow(clippy::too_many_arguments)]
    fn project_band(
        &self,
        d: &[f32],
        sd: [usize; 4],
        res: Option<&[f32]>,
        out: &mut Out<'_>,
        (o0, o1): (usize, usize),
        pbuf: &mut [f32],
        rbuf: &mut [f32],
    ) -> Result<()> {
        let (b, c) = (self.dw.geom(), self.project.geom());
        let last = self.channels_last;
        let [ho, wo] = b.out_hw;
        let co = c.out_channels;
        let band_geom = |y_strides: [usize; 4]| {
            let g = ConvGeom { in_hw: [o1 - o0, wo], out_hw: [o1 - o0, wo], x_strides: sd, y_strides, ..c.clone() };
            one_image(last, g)
        };
        let row = c.y_strides[2];
        match out {
            Out::Image { y, first } => {
                let r = res.map(|r| &r[o0 * row..]);
                self.project.run_as(&band_geom(c.y_strides), d, r, &mut y[(o0 - *first) * row..])
            }
            Out::Rows(y) => {
                // Channels-first rows of an image other tasks also write: the band's result in
                // the scratch (its residual copied there, laid out like it), then its rows
                // copied into each channel's plane.
                let n = (o1 - o0) * wo;
                let band = self.band * wo;
                if let Some(r) = res {
                    for ch in 0..co {
                        rbuf[ch * band..][..n].copy_from_slice(&r[ch * ho * wo + o0 * wo..][..n]);
                    }
                }
                let g = band_geom([co * band, band, wo, 1]);
                self.project.run_as(&g, d, res.map(|_| &rbuf[..]), pbuf)?;
                for ch in 0..co {
                    y.write(ch * ho * wo + o0 * wo, &pbuf[ch * band..][..n]);
                }
                Ok(())
            }
        }
    }
}

/// The input rows `lo..hi` (inside the image) that output rows `o0..o1` of `g` read, and the
/// padding rows above `lo` that the first of them reaches.
fn window_rows(g: &ConvGeom, o0: usize, o1: usize) -> (usize, usize, usize) {
    let (s, p) = (g.stride[0], g.pad[0]);
    let reach = (g.kernel_hw[0] - 1) * g.dilation[0] + 1;
    let lo = (o0 * s).saturating_sub(p);
    let hi = ((o1 - 1) * s + reach).saturating_sub(p).min(g.in_hw[0]).max(lo);
    (lo, hi, p.saturating_sub(o0 * s))
}

/// `g` with image strides that span its rows (one image: what the channels-last kernels take as
/// dense), when `last`.
fn one_image(last: bool, g: ConvGeom) -> ConvGeom {
    one_image_of(last, last, g)
}

/// [`one_image`] for an input (`x_last`) and a result (`y_last`) in layouts of their own.
fn one_image_of(x_last: bool, y_last: bool, mut g: ConvGeom) -> ConvGeom {
    if x_last {
        g.x_strides[0] = g.in_hw[0] * g.x_strides[2];
    }
    if y_last {
        g.y_strides[0] = g.out_hw[0] * g.y_strides[2];
    }
    g
}

/// Strides (image, channel, row, column) of a dense `[c][h][w]` image, `[h][w][c]` when `last`.
fn strides(last: bool, c: usize, h: usize, w: usize) -> [usize; 4] {
    if last { [h * w * c, 1, w * c, c] } else { [c * h * w, h * w, w, 1] }
}

impl FastKernel for BlockKernel {
    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn run(&self, inputs: &[Tensor], out_shapes: &[Shape], pool: Option<&rayon::ThreadPool>) -> Result<Vec<Tensor>> {
        super::fast::run_via_into(self, inputs, out_shapes, pool)
    }

    fn writes_into(&self) -> bool {
        true
    }

    fn run_into(&self, inputs: &[Tensor], outs: &mut [Tensor], pool: Option<&rayon::ThreadPool>) -> Result<()> {
        let residual = self.project.has_residual();
        let [out] = outs else {
            return Err(Error::invalid(OP, format!("conv block: expected 1 result, got {}", outs.len())));
        };
        if inputs.len() != 1 + usize::from(residual) {
            return Err(Error::invalid(
                OP,
                format!("conv block: {} operands, expected {}", inputs.len(), 1 + usize::from(residual)),
            ));
        }
        let images = self.dw.images;
        let whole = |t: &Tensor, len: usize| {
            t.shape.dtype == DType::Float32
                && t.data.len() == t.shape.num_elements() * 4
                && t.shape.num_elements() == len * images
        };
        let x_len = self.expand.as_ref().unwrap_or(&self.dw).x_len;
        let y_len = self.project.y_len;
        for (k, t) in inputs.iter().enumerate() {
            if !whole(t, if k == 0 { x_len } else { y_len }) {
                return Err(Error::invalid(
                    OP,
                    format!("conv block operand {k} {} has {} bytes", t.shape, t.data.len()),
                ));
            }
        }
        if !whole(out, y_len) {
            return Err(Error::invalid(OP, format!("conv block result {} has {} bytes", out.shape, out.data.len())));
        }
        let x = inputs[0].typed::<f32>();
        let res = inputs.get(1).map(|t| t.typed::<f32>());
        let b = self.dw.geom();
        let ho = b.out_hw[0];
        let threads = pool.map_or(1, |p| p.current_num_threads().max(1));
        // Images that do not split evenly over the threads: each image's rows in parts.
        let parts = if threads > 1 && !images.is_multiple_of(threads) && images < 4 * threads {
            threads.min(ho).max(1)
        } else {
            1
        };
        let e_len = b.out_channels * self.cap * b.in_hw[1];
        let d_len = b.out_channels * self.band * b.out_hw[1];
        let p_len = if parts > 1 && !self.channels_last {
            self.project.geom().out_channels * self.band * b.out_hw[1]
        } else {
            0
        };
        let r_len = if residual { p_len } else { 0 };
        // The thread's scratch, shared by every block it runs (grown to the largest): the next
        // block finds it in cache. A scratch of each block's own (MobileNetV2's twelve depthwise
        // and projection pairs, up to 451 KB each) came back from memory every execution: at
        // batch 1 on one Zen 5 core the pairs ran 105 µs slower than their layers as steps.
        let take = || {
            let mut set = SCRATCH.with(|s| s.take());
            for (v, n) in [(&mut set.e, e_len), (&mut set.d, d_len), (&mut set.p, p_len), (&mut set.r, r_len)] {
                if v.len() < n {
                    *v = LineAligned::zeros(n);
                }
            }
            set
        };
        let give = |set: Set| SCRATCH.with(|s| s.set(set));
        let image = |img: usize| (&x[img * x_len..(img + 1) * x_len], res.map(|r| &r[img * y_len..(img + 1) * y_len]));
        let y = out.typed_mut::<f32>();
        if parts == 1 {
            // Whole images per task.
            let one = |(img, ys): (usize, &mut [f32])| -> Result<()> {
                let mut set = take();
                let (xs, rs) = image(img);
                let done = self.part(xs, rs, &mut Out::Image { y: ys, first: 0 }, (0, ho), &mut set);
                give(set);
                done
            };
            return match pool {
                Some(p) if threads > 1 && images > 1 => {
                    p.install(|| y.par_chunks_mut(y_len).enumerate().with_max_len(1).try_for_each(one))
                }
                _ => y.chunks_mut(y_len).enumerate().try_for_each(one),
            };
        }
        let bounds = |k: usize| ho * k / parts;
        if self.channels_last {
            // Each part's rows are one run of the image's result: the tasks' slices.
            let row = self.project.geom().y_strides[2];
            let mut pieces: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(images * parts);
            for (img, mut ys) in y.chunks_mut(y_len).enumerate() {
                for k in 0..parts {
                    let (head, tail) = ys.split_at_mut((bounds(k + 1) - bounds(k)) * row);
                    pieces.push((img, k, head));
                    ys = tail;
                }
            }
            let one = |(img, k, ys): &mut (usize, usize, &mut [f32])| -> Result<()> {
                let mut set = take();
                let (xs, rs) = image(*img);
                let first = bounds(*k);
                let done = self.part(xs, rs, &mut Out::Image { y: ys, first }, (first, bounds(*k + 1)), &mut set);
                give(set);
                done
            };
            return match pool {
                Some(p) if threads > 1 => p.install(|| pieces.par_iter_mut().with_max_len(1).try_for_each(one)),
                _ => pieces.iter_mut().try_for_each(one),
            };
        }
        // Channels-first: unit u is image u / parts, its output rows part u % parts.
        let base = y.as_mut_ptr() as usize;
        let one = |u: usize| -> Result<()> {
            let (img, k) = (u / parts, u % parts);
            let mut set = take();
            let (xs, rs) = image(img);
            // Points inside `y` (img < images, `y` holds images · y_len elements, checked above).
            let at = (base as *mut f32).wrapping_add(img * y_len);
            let mut rows = Out::Rows(Rows { at, len: y_len });
            let done = self.part(xs, rs, &mut rows, (bounds(k), bounds(k + 1)), &mut set);
            give(set);
            done
        };
        let units = images * parts;
        match pool {
            Some(p) if threads > 1 && units > 1 => {
                p.install(|| (0..units).into_par_iter().with_max_len(1).try_for_each(one))
            }
            _ => (0..units).try_for_each(one),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::backends::jit::conv::{self, ConvKernel};
    use crate::backends::jit::fast::Packed;
    use crate::backends::jit::shared::Accounting;
    use crate::ir::module::NodeId;
    use crate::ir::op::Op;
    use crate::ir::text::parse_module;

    /// `%dst = conv_general %x, W` (NCHW, OIHW, constant weights `%dst+100`) on `hw`² planes.
    fn conv(dst: usize, x: usize, cin: usize, cout: usize, k: usize, groups: usize, hw: usize) -> String {
        conv_as(false, dst, x, (cin, cout), (k, 1), groups, hw)
    }

    /// [`conv`] channels-last (NHWC) when `last`, at `stride`: the result is `hw / stride` square.
    fn conv_as(
        last: bool,
        dst: usize,
        x: usize,
        (cin, cout): (usize, usize),
        (k, stride): (usize, usize),
        groups: usize,
        hw: usize,
    ) -> String {
        let n = cout * (cin / groups) * k * k;
        let data: Vec<String> = (0..n).map(|i| format!("{:?}", ((i * 37 % 23) as f32 - 11.0) / 16.0)).collect();
        let (axes, ho) = (if last { "(0,3,[1,2])" } else { "(0,1,[2,3])" }, hw / stride);
        let shape = if last { format!("1,{ho},{ho},{cout}") } else { format!("1,{cout},{ho},{ho}") };
        format!(
            "  %{w} = constant [{d}] : f32[{cout},{cig},{k},{k}]\n  %{dst} = conv_general %{x}, %{w}, \
             input={axes}, kernel=(1,0,[2,3]), output={axes}, strides=[{stride},{stride}], \
             padding=[({p},{p}),({p},{p})], input_dilations=[1,1], kernel_dilations=[1,1], \
             channel_groups={groups}, batch_groups=1 : f32[{shape}]\n",
            w = dst + 100,
            d = data.join(", "),
            cig = cin / groups,
            p = k / 2,
        )
    }

    /// The image kernels of the convolutions of `body` (one function over `input`, returning `ret`).
    fn image_convs(input: &str, body: &str, ret: usize) -> Vec<ImageConv> {
        let m =
            parse_module(&format!("module @t\nfunc @main(%0 \"x\": {input}) {{\n{body}  return %{ret}\n}}\n")).unwrap();
        let convs: Vec<NodeId> =
            m.functions[0].body.iter().copied().filter(|&n| matches!(m.node(n).op, Op::ConvGeneral { .. })).collect();
        let mut packed = Packed(HashMap::new());
        let mut acct = Accounting::default();
        for &n in &convs {
            let job = conv::pack_job(&m, n, false).unwrap();
            packed.0.insert(n, (job.run)(&mut acct).unwrap());
        }
        convs
            .iter()
            .map(|&n| {
                let k = conv::prepare(&m, n, &packed).unwrap();
                k.as_any().unwrap().downcast_ref::<ConvKernel>().unwrap().per_image().unwrap()
            })
            .collect()
    }

    /// Depthwise 3×3 (stride 1 or 2) and projection pairs, both layouts: the pair step against
    /// its two convolutions one after the other, on one thread and on two (the rows of the one
    /// image in two parts), and which pairs qualify on how many threads.
    #[test]
    fn pair_runs_like_its_two_convolutions() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for (last, stride, hw) in [(true, 1, 14), (true, 2, 28), (false, 1, 14), (true, 1, 7), (false, 2, 14)] {
            let (c6, co) = (40, 12);
            let input = if last { format!("f32[1,{hw},{hw},{c6}]") } else { format!("f32[1,{c6},{hw},{hw}]") };
            let body = conv_as(last, 1, 0, (c6, c6), (3, stride), c6, hw)
                + &conv_as(last, 2, 1, (c6, co), (1, 1), 1, hw / stride);
            let [dw, project] = <[ImageConv; 2]>::try_from(image_convs(&input, &body, 2)).ok().unwrap();
            let ho = hw / stride;
            // Seven output rows do not split evenly over two threads.
            assert!(qualify_pair(&dw, &project, 1));
            assert_eq!(qualify_pair(&dw, &project, 2), ho % 2 == 0, "{hw} / {stride}");
            let xs: Vec<f32> = (0..c6 * hw * hw).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
            let (mut d, mut want) = (vec![0.0; c6 * ho * ho], vec![0.0; co * ho * ho]);
            dw.run(&xs, None, &mut d).unwrap();
            project.run(&d, None, &mut want).unwrap();
            let k = build(None, dw, project);
            let dims = |c: usize, h: usize| if last { [1, h, h, c] } else { [1, c, h, h] }.map(|d| d as i64);
            let x = Tensor::from_vec(Shape::new(DType::Float32, &dims(c6, hw)), &xs).unwrap();
            for p in [None, Some(&pool)] {
                let mut out = [Tensor::zeros(Shape::new(DType::Float32, &dims(co, ho)))];
                k.run_into(std::slice::from_ref(&x), &mut out, p).unwrap();
                let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
                for (i, (g, w)) in out[0].typed::<f32>().iter().zip(&want).enumerate() {
                    assert!((g - w).abs() <= 1e-5 * scale, "{last} {stride} {hw}: element {i}: {g} vs {w}");
                }
            }
        }
    }

    /// The block 4 → 8 → depthwise 3×3 → 4 over one 112×112 image, and its three image kernels.
    fn block() -> (Box<dyn FastKernel>, [ImageConv; 3]) {
        let body = conv(1, 0, 4, 8, 1, 1, 112) + &conv(2, 1, 8, 8, 3, 8, 112) + &conv(3, 2, 8, 4, 1, 1, 112);
        let images = || <[ImageConv; 3]>::try_from(image_convs("f32[1,4,112,112]", &body, 3)).ok().unwrap();
        let [a, b, c] = images();
        // The expanded image, 8 channels × 112², takes 401,408 bytes: a block above any smaller
        // threshold, not from that size on.
        assert!(qualify(&a, &b, &c, 0));
        assert!(qualify(&a, &b, &c, 8 * 112 * 112 * 4 - 1));
        assert!(!qualify(&a, &b, &c, 8 * 112 * 112 * 4));
        (build(Some(a), b, c), images())
    }

    #[test]
    fn runs_like_its_three_convolutions_and_refuses_bad_operands() {
        let (k, [a, b, c]) = block();
        let shape = |c: i64| Shape::new(DType::Float32, &[1, c, 112, 112]);
        let xs: Vec<f32> = (0..4 * 112 * 112).map(|i| ((i * 7919 % 2003) as f32 / 1001.5) - 1.0).collect();
        let x = Tensor::from_vec(shape(4), &xs).unwrap();
        // The three convolutions one after the other, whole planes.
        let (mut e, mut d, mut want) = (vec![0.0; 8 * 112 * 112], vec![0.0; 8 * 112 * 112], vec![0.0; 4 * 112 * 112]);
        a.run(&xs, None, &mut e).unwrap();
        b.run(&e, None, &mut d).unwrap();
        c.run(&d, None, &mut want).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for p in [None, Some(&pool)] {
            let mut out = [Tensor::zeros(shape(4))];
            k.run_into(std::slice::from_ref(&x), &mut out, p).unwrap();
            let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (i, (g, w)) in out[0].typed::<f32>().iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-5 * scale, "element {i}: {g} vs {w}");
            }
        }
        // Bad operands and results are errors naming the op, not panics.
        let mut out = [Tensor::zeros(shape(4))];
        let wrong = Tensor::from_vec(shape(3), &xs[..3 * 112 * 112]).unwrap();
        let f64s = Tensor::from_vec(Shape::new(DType::Float64, &[1, 4, 112, 112]), &vec![0f64; 4 * 112 * 112]).unwrap();
        for inputs in [vec![], vec![x.clone(), x.clone()], vec![wrong], vec![f64s]] {
            let e = k.run_into(&inputs, &mut out, None).unwrap_err();
            assert!(e.to_string().contains("ConvGeneral"), "{e}");
        }
        for mut outs in [vec![], vec![Tensor::zeros(shape(3))], vec![Tensor::zeros(shape(4)), Tensor::zeros(shape(4))]]
        {
            let e = k.run_into(std::slice::from_ref(&x), &mut outs, None).unwrap_err();
            assert!(e.to_string().contains("ConvGeneral"), "{e}");
        }
    }
}
