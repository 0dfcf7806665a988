//! BF16/F16 convolutions on the half-precision GEMM: one group, dense channels-last images (the
//! layout the jit's layout pass gives convnets), the filter packed once as the
//! `[kernel rows × kernel columns × input channels][output channels]` matrix of the half type
//! (`gemm_bf16`: bf16 pairs for the AMX-BF16 or AVX512-BF16 tiles where the CPU has them;
//! `gemm_f16`: f32 panels), each block of output pixels' patches gathered in the half type
//! (im2col; a 1×1 stride-1 convolution without padding reads its input rows in place), f32
//! accumulation. Each block leaves the GEMM as an f32 tile that the caller finishes (epilogue,
//! rounding) into the block's output rows while it is in cache: no f32 copy of the input or of
//! the result is ever made.
//!
//! Work is split over the caller's pool by (image, block of pixels); a block holds about 256 KiB
//! of patches and of f32 sums, and there are at least four per thread.

use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::kernels::gemm::{GemmArgs, MatMut, MatRef, PackedB, Rhs, Scratch, gemm_bf16, gemm_f16};
use crate::kernels::half::HalfFloat;

use super::{BLOCK_ELEMS, ConvEpilogue, ConvGeom, OP, im2col_rows};

/// A half type with its GEMM: how its filter is packed and its blocks multiplied.
pub trait HalfGemm: Copy + Default + Send + Sync + 'static {
    /// `v` rounded to the type (to nearest even).
    fn of(v: f32) -> Self;
    /// The `k × n` row-major matrix `b` packed for [`HalfGemm::gemm`].
    fn pack(k: usize, n: usize, b: MatRef<'_, Self>) -> Result<PackedB>;
    /// `C = A·B` with f32 accumulation and output.
    fn gemm(args: GemmArgs<'_, Self, f32>) -> Result<()>;
    /// Bit patterns viewed as values of the type (zero-copy).
    fn view(bits: &mut [u16]) -> &mut [Self];
}

impl HalfGemm for bf16 {
    fn of(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn pack(k: usize, n: usize, b: MatRef<'_, Self>) -> Result<PackedB> {
        PackedB::new_bf16(k, n, b)
    }
    fn gemm(args: GemmArgs<'_, Self, f32>) -> Result<()> {
        gemm_bf16(args)
    }
    fn view(bits: &mut [u16]) -> &mut [Self] {
        use half::slice::HalfBitsSliceExt;
        bits.reinterpret_cast_mut::<bf16>()
    }
}

impl HalfGemm for f16 {
    fn of(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn pack(k: usize, n: usize, b: MatRef<'_, Self>) -> Result<PackedB> {
        PackedB::new_f16(k, n, b)
    }
    fn gemm(args: GemmArgs<'_, Self, f32>) -> Result<()> {
        gemm_f16(args)
    }
    fn view(bits: &mut [u16]) -> &mut [Self] {
        use half::slice::HalfBitsSliceExt;
        bits.reinterpret_cast_mut::<f16>()
    }
}

/// Whether [`conv2d_half`] takes `geom`: one group, at least one input and output channel and
/// one tap, dense channels-last input rows and a dense channels-last output whose images follow
/// one another.
pub fn qualifies(geom: &ConvGeom) -> bool {
    let ([_, w], [oh, ow]) = (geom.in_hw, geom.out_hw);
    let (ci, co) = (geom.in_channels, geom.out_channels);
    geom.groups == 1
        && ci > 0
        && co > 0
        && geom.kernel_hw[0] * geom.kernel_hw[1] > 0
        && geom.x_strides[1..] == [1, w * ci, ci]
        && geom.y_strides == [oh * ow * co, 1, ow * co, co]
}

/// A filter packed for [`conv2d_half`]: the `[taps × input channels][output channels]` matrix of
/// the half type.
pub struct HalfFilter {
    packed: PackedB,
    k: usize,
    cout: usize,
}

impl HalfFilter {
    /// Packs the f32 weights `w` (values of the half type `H`, so exact there), whose element
    /// (output channel o, input channel i, kernel row, kernel column) is at
    /// `o·ws[0] + i·ws[1] + row·ws[2] + column·ws[3]`.
    pub fn new<H: HalfGemm>(geom: &ConvGeom, w: &[f32], ws: [usize; 4]) -> Result<Self> {
        if !qualifies(geom) {
            return Err(Error::invalid(OP, format!("the half-precision GEMM does not take {geom:?}")));
        }
        let (cin, cout, [kh, kw]) = (geom.in_channels, geom.out_channels, geom.kernel_hw);
        let last = (cout - 1) * ws[0] + (cin - 1) * ws[1] + (kh - 1) * ws[2] + (kw - 1) * ws[3];
        if last >= w.len() {
            return Err(Error::invalid(OP, format!("filter of {} values for {geom:?} (strides {ws:?})", w.len())));
        }
        let k = kh * kw * cin;
        let mut b = vec![H::default(); k * cout];
        for (r, row) in b.chunks_exact_mut(cout).enumerate() {
            let (tap, i) = (r / cin, r % cin);
            let at = i * ws[1] + (tap / kw) * ws[2] + (tap % kw) * ws[3];
            for (o, v) in row.iter_mut().enumerate() {
                *v = H::of(w[at + o * ws[0]]);
            }
        }
        Ok(HalfFilter { packed: H::pack(k, cout, MatRef::row_major(&b, cout))?, k, cout })
    }

    /// Bytes of the packed matrix.
    pub fn size_bytes(&self) -> usize {
        self.packed.size_bytes()
    }
}

/// Growable scratch of half-type patches on the calling thread, kept between calls (taken for a
/// task and put back when dropped, so a warm call allocates nothing). The thread keeps a few:
/// rayon may start several tasks of one call on a thread before the first ends.
struct Cols(Vec<u16>);

/// Most patch buffers one thread keeps.
const COLS_KEPT: usize = 4;

thread_local! {
    static COLS: std::cell::RefCell<Vec<Vec<u16>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Cols {
    fn take() -> Self {
        Cols(COLS.with(|c| c.borrow_mut().pop()).unwrap_or_default())
    }

    fn get<H: HalfGemm>(&mut self, len: usize) -> &mut [H] {
        if self.0.len() < len {
            self.0.resize(len, 0);
        }
        H::view(&mut self.0[..len])
    }
}

impl Drop for Cols {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        // A thread being torn down has no slot left: the buffer is simply freed.
        let _ = COLS.try_with(|c| {
            let mut kept = c.borrow_mut();
            if kept.len() < COLS_KEPT {
                kept.push(v);
            }
        });
    }
}

/// What the caller does with each finished block: `finish(at, tile, y)` with `tile` the block's
/// f32 sums (`pixels × output channels`, row-major) and `y` its output values, which start at
/// output element `at`.
pub type FinishBlock<'a, H> = dyn Fn(usize, &mut [f32], &mut [H]) + Sync + 'a;

/// The convolution of `x` into `y` (both of the half type `H`, laid out as [`qualifies`] says),
/// `filter` packed for `geom`, each block's sums handed to `finish`; over the current rayon pool
/// when `parallel`.
pub fn conv2d_half<H: HalfGemm>(
    geom: &ConvGeom,
    x: &[H],
    filter: &HalfFilter,
    y: &mut [H],
    finish: &FinishBlock<'_, H>,
    parallel: bool,
) -> Result<()> {
    let (cin, cout, [kh, kw]) = (geom.in_channels, geom.out_channels, geom.kernel_hw);
    let k = kh * kw * cin;
    let pixels = geom.out_hw[0] * geom.out_hw[1];
    let y_len = geom.batch * pixels * cout;
    if !qualifies(geom) || filter.k != k || filter.cout != cout {
        return Err(Error::invalid(OP, format!("the half-precision GEMM does not take {geom:?} with its filter")));
    }
    geom.validate(x.len(), y.len())?;
    if y.len() < y_len {
        return Err(Error::invalid(OP, format!("result of {} values for {geom:?}", y.len())));
    }
    if y_len == 0 {
        return Ok(());
    }
    let threads = if parallel { rayon::current_num_threads().max(1) } else { 1 };
    // About BLOCK_ELEMS of patches and of f32 sums (the tile is finished while it is in L2), a
    // multiple of 16 pixels, and enough blocks for the threads.
    let mut rows = (BLOCK_ELEMS / k.max(cout)).clamp(16, 4096) / 16 * 16;
    if geom.batch < threads * 4 {
        let want = (threads * 4).div_ceil(geom.batch.max(1));
        rows = rows.min(pixels.div_ceil(want).next_multiple_of(16)).max(16);
    }
    // A 1×1 stride-1 convolution without padding: each block's patches are its input rows.
    let in_place = [kh, kw] == [1, 1]
        && geom.stride == [1, 1]
        && geom.pad == [0, 0]
        && geom.in_hw == geom.out_hw
        && geom.x_strides[2] == geom.in_hw[1] * cin;
    let block = |(tile, cols): &mut (Scratch, Cols), img: usize, blk: usize, yb: &mut [H]| -> Result<()> {
        let (p0, mb) = (blk * rows, yb.len() / cout);
        let a = if in_place {
            MatRef::row_major(&x[img * geom.x_strides[0] + p0 * cin..][..mb * cin], cin)
        } else {
            let c = cols.get::<H>(mb * k);
            im2col_rows(geom, x, img, 0, p0, mb, c);
            MatRef::row_major(c, k)
        };
        let t = tile.get(mb * cout);
        H::gemm(GemmArgs::new(mb, cout, k, a, Rhs::Packed(&filter.packed), MatMut::row_major(t, cout)))?;
        finish((img * pixels + p0) * cout, t, yb);
        Ok(())
    };
    let init = || (Scratch::new(), Cols::take());
    let y = &mut y[..y_len];
    if parallel {
        y.par_chunks_mut(pixels * cout).enumerate().try_for_each(|(img, yi)| {
            yi.par_chunks_mut(rows * cout).enumerate().try_for_each_init(init, |s, (blk, yb)| block(s, img, blk, yb))
        })
    } else {
        let mut s = init();
        for (img, yi) in y.chunks_mut(pixels * cout).enumerate() {
            for (blk, yb) in yi.chunks_mut(rows * cout).enumerate() {
                block(&mut s, img, blk, yb)?;
            }
        }
        Ok(())
    }
}

/// The epilogue of a half-typed convolution as the half-typed loop it replaces computes it
/// ([`finish_rows`]): the bias add and the residual add each rounded to the type, then the
/// activation (none or ReLU) and the clamp of `act`.
pub struct HalfTail<'a, H> {
    /// One value per output channel (the values' channels are innermost).
    pub bias: Option<&'a [f32]>,
    /// Laid out like the values.
    pub residual: Option<&'a [H]>,
    /// The activation and the clamp (its bias and residual are not read).
    pub act: ConvEpilogue<'a>,
}

/// Finishes the f32 sums `v` of whole output pixels (channels innermost, `bias.len()` of them
/// per pixel) into `y`: `r(r(r(v) + bias) + residual)`, the activation and the clamp, then the
/// store (`r`: rounding to `H`, in f32 lanes), vectorised for the CPU's widest path.
pub fn finish_rows<H: HalfFloat>(t: &HalfTail<'_, H>, v: &mut [f32], y: &mut [H]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::kernels::fused::FusedIsa;
        match FusedIsa::selected().checked() {
            // SAFETY: `checked` confirmed the features each path is compiled for.
            FusedIsa::Avx512 => return unsafe { finish_rows_avx512(t, v, y) },
            // SAFETY: as above.
            FusedIsa::Avx2 => return unsafe { finish_rows_avx2(t, v, y) },
            FusedIsa::Generic => {}
        }
    }
    finish_rows_body(t, v, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2,fma")]
fn finish_rows_avx512<H: HalfFloat>(t: &HalfTail<'_, H>, v: &mut [f32], y: &mut [H]) {
    finish_rows_body(t, v, y)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn finish_rows_avx2<H: HalfFloat>(t: &HalfTail<'_, H>, v: &mut [f32], y: &mut [H]) {
    finish_rows_body(t, v, y)
}

/// [`finish_rows`]' body: a pass per step over the whole slice (the bias one row by row), so
/// that each loop is long and vectorises.
#[inline(always)]
fn finish_rows_body<H: HalfFloat>(t: &HalfTail<'_, H>, v: &mut [f32], y: &mut [H]) {
    v.iter_mut().for_each(|x| *x = H::round_f32(*x));
    if let Some(b) = t.bias.filter(|b| !b.is_empty()) {
        for row in v.chunks_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(x, b)| *x = H::round_f32(*x + b));
        }
    }
    if let Some(r) = t.residual {
        v.iter_mut().zip(r).for_each(|(x, s)| *x = H::round_f32(*x + s.widen1()));
    }
    t.act.activate_slice(v);
    y.iter_mut().zip(v.iter()).for_each(|(h, x)| *h = H::from_rounded(*x));
}
