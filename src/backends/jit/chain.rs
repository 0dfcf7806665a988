//! Convolution chains run image by image: consecutive convolution steps over large planes (a
//! convnet's first stages) become one step that runs the whole chain on one image before the
//! next, the images split over the thread pool.
//!
//! Layer by layer, a batch of 8 images writes each layer's whole result (tens of MiB at 112×112)
//! to memory and the next layer reads it back: those layers are bound by memory bandwidth, on
//! one core and more on two. Image by image, a value that only the chain reads lives in a
//! buffer of one image (kept by the kernel, reused image after image), which the next layer
//! reads from the cache; the values read after the chain are written in place, image by image.
//! There is no barrier between the layers, so two threads each run their own images from the
//! first layer to the last.
//!
//! A step joins a chain when it is a convolution with a prepared constant filter whose operands
//! hold their images one after another, with input planes of at least [`MIN_PIXELS`] pixels (or
//! [`MIN_SMALL_PIXELS`] under a small filter), and the same batch as the chain; chains of two or
//! more steps are formed where the batch splits evenly over the pool's threads (or is at least
//! four images per thread). The jit option `conv_chains=off` keeps every convolution its own step
//! (a profile then times each one).

use std::collections::HashMap;
use std::sync::Mutex;

use rayon::prelude::*;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::ValueId;
use crate::ir::shape::Shape;
use crate::kernels::conv::LineAligned;
use crate::kernels::tensor::Tensor;

use super::conv::{ConvKernel, ImageConv};
use super::fast::FastKernel;

/// Input planes of at least this many pixels join a chain whatever their filter (MobileNetV2 at
/// batch 8 on one Zen 5 core: the 28×28 layers ran 3–14% faster image by image, the 56×56 and
/// 112×112 ones 5–37% faster).
pub(crate) const MIN_PIXELS: usize = 28 * 28;

/// Smaller input planes, down to this many pixels, join a chain when the filter is no larger
/// than one image's input and result together: a chain reads the filter again for every image,
/// which then costs no more than the activations it keeps in the cache. MobileNetV2's 14×14
/// layers qualify (filters of 1–300 KB against 0.3–0.5 MB of activations per image); on a 2-vCPU
/// Intel Xeon (Sapphire Rapids class) at batch 8 the model ran 54.7–57.1 ms against 56.5–60.2
/// on one core and 27.6–29.7 against 31.2–34.0 on two with them chained. ResNet-18's 14×14
/// layers (2.4 MB filters against 0.4 MB of activations) do not: image by image they ran the
/// model 16% slower. Planes below it (7×7) stay out: their whole batch fits the cache anyway.
const MIN_SMALL_PIXELS: usize = 14 * 14;

/// Where a link reads an operand.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// The chain step's operand k (a value made before the chain).
    In(usize),
    /// Buffer k of the image: a chain result (k < results) or a scratch slot.
    Buf(usize),
}

/// One convolution of a chain.
struct Link {
    conv: ImageConv,
    x: Src,
    residual: Option<Src>,
    /// The buffer it writes.
    out: usize,
}

/// The chain's kernel.
struct ChainKernel {
    links: Vec<Link>,
    images: usize,
    /// Elements per image of each operand, and of each buffer (results first, then scratch).
    in_lens: Vec<usize>,
    buf_lens: Vec<usize>,
    results: usize,
    /// Scratch buffers of one image, one set per thread running images, kept between executions;
    /// each starts on a cache line (the kernels' vector loads of it never split two).
    sets: Mutex<Vec<Vec<LineAligned>>>,
    desc: String,
}

/// The image kernel of a step's fast kernel when it may join a chain (`outputs`: the step's
/// result count; `threads`: the pool's).
pub(crate) fn qualify(fast: &dyn FastKernel, outputs: usize, threads: usize) -> Option<ImageConv> {
    let conv = fast.as_any()?.downcast_ref::<ConvKernel>()?.per_image()?;
    let even = conv.images % threads.max(1) == 0 || conv.images >= 4 * threads;
    let pixels = conv.in_pixels();
    let large = pixels >= MIN_PIXELS
        || (pixels >= MIN_SMALL_PIXELS && conv.filter_bytes() <= (conv.x_len + conv.y_len) * size_of::<f32>());
    (conv.images >= 2 && even && large && outputs == 1).then_some(conv)
}

/// The chains among a function's steps: runs `[a, b)` of two or more consecutive qualifying
/// steps (`convs[j]`: step j's image kernel, if it qualifies) with one batch.
pub(crate) fn runs(convs: &[Option<ImageConv>]) -> Vec<(usize, usize)> {
    let mut runs = vec![];
    let mut i = 0;
    while i < convs.len() {
        let Some(c) = &convs[i] else {
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < convs.len() && convs[j].as_ref().is_some_and(|d| d.images == c.images) {
            j += 1;
        }
        if j - i >= 2 {
            runs.push((i, j));
        }
        i = j;
    }
    runs
}

/// One convolution step joining a chain.
pub(crate) struct Member {
    /// The operands it reads at run time: its input, and its residual if any (the filter is
    /// prepared).
    pub operands: SmallVec<[ValueId; 2]>,
    pub output: ValueId,
    pub out_shape: Shape,
    pub conv: ImageConv,
}

/// A chain made into one step: its operands (values made before it), its results and their
/// shapes, and its kernel.
pub(crate) struct Chain {
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub out_shapes: Vec<Shape>,
    pub kernel: Box<dyn FastKernel>,
}

/// The one step running `group` (in order); `escapes`: whether a value is read after the chain
/// (or kept).
pub(crate) fn build(group: Vec<Member>, escapes: impl Fn(ValueId) -> bool) -> Chain {
    let made: HashMap<ValueId, usize> = group.iter().enumerate().map(|(j, m)| (m.output, j)).collect();
    // Results: values read after the chain (in the order they are made); the last link's value
    // always (nothing else could be what the chain is for).
    let mut results: Vec<ValueId> = vec![];
    let mut result_shapes: Vec<Shape> = vec![];
    for (j, m) in group.iter().enumerate() {
        if escapes(m.output) || j + 1 == group.len() {
            results.push(m.output);
            result_shapes.push(m.out_shape.clone());
        }
    }
    // Last link reading each scratch value.
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for (j, m) in group.iter().enumerate() {
        for &v in &m.operands {
            if made.contains_key(&v) {
                last.insert(v, j);
            }
        }
    }
    let mut inputs: Vec<ValueId> = vec![];
    let mut in_lens: Vec<usize> = vec![];
    let mut buf_of: HashMap<ValueId, usize> = results.iter().enumerate().map(|(b, &v)| (v, b)).collect();
    let mut buf_lens: Vec<usize> =
        group.iter().filter(|m| buf_of.contains_key(&m.output)).map(|m| m.conv.y_len).collect();
    let mut free: Vec<usize> = vec![];
    let mut links = Vec::with_capacity(group.len());
    let mut descs = vec![];
    let images = group[0].conv.images;
    for (j, m) in group.into_iter().enumerate() {
        let Member { operands: ops, output: v, conv, .. } = m;
        let mut src = |v: ValueId, len: usize| -> Src {
            if let Some(&b) = buf_of.get(&v) {
                return Src::Buf(b);
            }
            let at = inputs.iter().position(|&u| u == v).unwrap_or_else(|| {
                inputs.push(v);
                in_lens.push(len);
                inputs.len() - 1
            });
            Src::In(at)
        };
        let x = src(ops[0], conv.x_len);
        let residual = ops.get(1).map(|&r| src(r, conv.y_len));
        let out = match buf_of.get(&v) {
            Some(&b) => b,
            None => {
                let b = free.pop().unwrap_or_else(|| {
                    buf_lens.push(0);
                    buf_lens.len() - 1
                });
                buf_lens[b] = buf_lens[b].max(conv.y_len);
                buf_of.insert(v, b);
                b
            }
        };
        // Scratch values read for the last time here free their buffers for later links.
        for &u in ops.iter() {
            if last.get(&u) == Some(&j)
                && let Some(&b) = buf_of.get(&u)
                && b >= results.len()
                && !free.contains(&b)
            {
                free.push(b);
            }
        }
        descs.push(conv.desc.clone());
        links.push(Link { conv, x, residual, out });
    }
    let desc = format!(
        "conv chain of {} convolutions, image by image ({} images; {} scratch buffers of {} bytes per image): {}",
        links.len(),
        images,
        buf_lens.len() - results.len(),
        buf_lens[results.len()..].iter().sum::<usize>() * 4,
        descs.join("; ")
    );
    tracing::debug!(target: "tensorjit::jit", kernel = %desc, "conv chain");
    let kernel =
        ChainKernel { links, images, in_lens, results: results.len(), buf_lens, sets: Mutex::new(vec![]), desc };
    Chain { inputs, outputs: results, out_shapes: result_shapes, kernel: Box::new(kernel) }
}

impl ChainKernel {
    /// Image `img` through every link: `ins` the operands, `bufs` the image's results (first)
    /// and scratch buffers.
    fn image(&self, img: usize, ins: &[&[f32]], bufs: &mut [&mut [f32]]) -> Result<()> {
        for l in &self.links {
            let y = std::mem::take(&mut bufs[l.out]);
            let read = |s: Src, len: usize| -> &[f32] {
                match s {
                    Src::In(k) => &ins[k][img * len..(img + 1) * len],
                    Src::Buf(b) => &bufs[b][..len],
                }
            };
            let x = read(l.x, l.conv.x_len);
            let r = l.residual.map(|s| read(s, l.conv.y_len));
            let done = l.conv.run(x, r, &mut y[..l.conv.y_len]);
            bufs[l.out] = y;
            done?;
        }
        Ok(())
    }
}

impl FastKernel for ChainKernel {
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
        const OP: &str = "ConvGeneral";
        if inputs.len() != self.in_lens.len() || outs.len() != self.results {
            return Err(Error::invalid(
                OP,
                format!(
                    "conv chain: {} operands and {} results, expected {} and {}",
                    inputs.len(),
                    outs.len(),
                    self.in_lens.len(),
                    self.results
                ),
            ));
        }
        let whole = |t: &Tensor, len: usize| {
            t.shape.dtype == DType::Float32
                && t.data.len() == t.shape.num_elements() * 4
                && t.shape.num_elements() == len * self.images
        };
        let mut ins: SmallVec<[&[f32]; 8]> = SmallVec::new();
        for (k, (t, &len)) in inputs.iter().zip(&self.in_lens).enumerate() {
            if !whole(t, len) {
                return Err(Error::invalid(
                    OP,
                    format!("conv chain operand {k} {} has {} bytes", t.shape, t.data.len()),
                ));
            }
            ins.push(t.typed::<f32>());
        }
        // Each result cut into its images: image i's slices are `per[i]`.
        let mut per: SmallVec<[SmallVec<[&mut [f32]; 8]>; 16]> = (0..self.images).map(|_| SmallVec::new()).collect();
        for (k, (t, &len)) in outs.iter_mut().zip(&self.buf_lens).enumerate() {
            if !whole(t, len) {
                return Err(Error::invalid(
                    OP,
                    format!("conv chain result {k} {} has {} bytes", t.shape, t.data.len()),
                ));
            }
            for (img, chunk) in t.typed_mut::<f32>().chunks_mut(len).enumerate() {
                per[img].push(chunk);
            }
        }
        let scratch = &self.buf_lens[self.results..];
        let one = |(img, res): (usize, &mut SmallVec<[&mut [f32]; 8]>)| -> Result<()> {
            let mut set = self.sets.lock().map_or_else(|_| None, |mut s| s.pop()).unwrap_or_default();
            if set.len() != scratch.len() {
                set = scratch.iter().map(|&n| LineAligned::zeros(n)).collect();
            }
            let mut bufs: SmallVec<[&mut [f32]; 24]> = res.iter_mut().map(|r| &mut **r).collect();
            bufs.extend(set.iter_mut().map(|v| &mut v[..]));
            let done = self.image(img, &ins, &mut bufs);
            drop(bufs);
            if let Ok(mut s) = self.sets.lock() {
                s.push(set);
            }
            done
        };
        match pool {
            Some(p) if p.current_num_threads() > 1 => {
                p.install(|| per.par_iter_mut().enumerate().with_max_len(1).try_for_each(one))
            }
            _ => per.iter_mut().enumerate().try_for_each(one),
        }
    }
}
