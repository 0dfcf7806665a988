//! The fused epilogue: scale, accumulate, bias and activation applied to a GEMM tile while it
//! is in registers (scale, accumulate, bias) or right after its store while it is hot in L1
//! (activation), plus the vectorisable activation approximations and their error bounds.
//!
//! Result per element: `C = act(alpha * (A·B) + beta * C_old + bias)`, where `beta == 0` does
//! not read `C_old` (it may hold anything, even NaN).
//!
//! f32 activations: on AVX-512 and AVX2 hand-vectorised on the fused kernels' `vmath` (`exp`,
//! GELU; subnormal results flushed to 0); elsewhere branch-free scalar polynomial approximations.
//! Errors of the scalar forms, measured against f64 `std` functions (see the tests):
//! `exp`-based ones (sigmoid, silu, tanh, gelu-tanh) within 2e-7 relative + 1e-7 absolute
//! scaled by |x| (gelu/silu), `gelu_erf` within 4e-7 absolute per unit of |x|
//! (Abramowitz–Stegun 7.1.26 `erf`, itself within 1.5e-7). f64 activations use `std`.

use super::isa::Isa;

/// The activation applied last in the epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
// The jit never asks for some activations; the crate's own tests and benches do (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub enum Activation {
    /// Identity.
    #[default]
    None,
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    /// `x/2 * (1 + erf(x/√2))`.
    GeluErf,
    /// `x/2 * (1 + tanh(√(2/π) (x + 0.044715 x³)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x · clamp(x/6 + 1/2, 0, 1)` (NaN stays NaN).
    HardSwish,
}

impl Activation {
    /// Every activation, [`Activation::None`] first.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub const ALL: [Activation; 8] = [
        Activation::None,
        Activation::Relu,
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::HardSwish,
    ];
}

/// An optional bias added before the activation.
#[derive(Clone, Copy, Debug, Default)]
// The jit only adds per-column biases; the crate's own tests use per-row ones (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub enum Bias<'a, T> {
    /// No bias.
    #[default]
    None,
    /// One value per output row (`len == m`).
    PerRow(&'a [T]),
    /// One value per output column (`len == n`), the usual dense-layer bias.
    PerColumn(&'a [T]),
}

/// What happens to the product before it is stored: `C = act(alpha·AB + beta·C_old + bias)`.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a, T> {
    /// Scale of the product.
    pub alpha: T,
    /// Scale of the old contents of C; `0` overwrites C without reading it, `1` accumulates.
    pub beta: T,
    /// Bias per row or per column.
    pub bias: Bias<'a, T>,
    /// Activation applied last.
    pub activation: Activation,
}

impl<T: Scalar> Default for Epilogue<'_, T> {
    fn default() -> Self {
        Epilogue { alpha: T::ONE, beta: T::ZERO, bias: Bias::None, activation: Activation::None }
    }
}

impl<'a, T: Scalar> Epilogue<'a, T> {
    /// `C += A·B`.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn accumulate() -> Self {
        Epilogue { beta: T::ONE, ..Self::default() }
    }

    /// A dense layer: `C = act(A·B + bias)` with a per-column bias.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn dense(bias: &'a [T], activation: Activation) -> Self {
        Epilogue { bias: Bias::PerColumn(bias), activation, ..Self::default() }
    }
}

/// A consumer of the finished product: the GEMM hands it every element of C once, in disjoint
/// regions, after the last update of each (the epilogue and activation applied), while the
/// values are in cache: a tile as the driver finishes it, a row on the unblocked path, the
/// whole output after a matrix-vector product. Regions may be handed over from several threads
/// at once. A half-precision product rounds its f32 output to bf16 or f16 this way, instead of
/// in a separate pass over memory ([`crate::kernels::half::RoundInto`]); a product finished in
/// one depth block then never writes its f32 output at all (the values come from a tile buffer).
pub trait Finish<T>: Sync + std::fmt::Debug {
    /// Takes one finished region.
    ///
    /// # Safety
    /// The region's `at` extent lies inside the C the GEMM was given and no other call covers
    /// any of its elements; `vals` is readable over its extent.
    unsafe fn finish(&self, region: &Region<T>);
}

/// A `rows` x `cols` region of C handed to a [`Finish`]: where it lies in C (`at`, strides `rs`,
/// `cs`; an address only, C may not hold the values) and where its final values are (`vals`,
/// strides `vrs`, `vcs`: C itself or a tile buffer).
#[derive(Clone, Copy, Debug)]
pub struct Region<T> {
    /// Element (0, 0) of the region in C.
    pub at: *const T,
    /// Row stride of C.
    pub rs: usize,
    /// Column stride of C.
    pub cs: usize,
    /// Rows of the region.
    pub rows: usize,
    /// Columns of the region.
    pub cols: usize,
    /// Element (0, 0) of the values.
    pub vals: *const T,
    /// Row stride of the values.
    pub vrs: usize,
    /// Column stride of the values.
    pub vcs: usize,
}

impl<T> Region<T> {
    /// A region of C whose values are in C.
    pub fn in_place(at: *const T, rs: usize, cs: usize, rows: usize, cols: usize) -> Self {
        Region { at, rs, cs, rows, cols, vals: at, vrs: rs, vcs: cs }
    }
}

/// The accumulator/output element types (f32, f64, i32) and their epilogue arithmetic.
pub trait Scalar: Copy + Send + Sync + PartialEq + Default + std::fmt::Debug + 'static {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// `a * b + c` (wrapping for integers).
    fn mul_add(a: Self, b: Self, c: Self) -> Self;
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// The value of an i32 correction term (used by integer kernels' column sums).
    fn from_i32(x: i32) -> Self;
    /// Applies `act` to every element of `xs` with the kernels of `isa`.
    fn activate(isa: Isa, act: Activation, xs: &mut [Self]) {
        // SAFETY: one row of xs.len() elements, the slice itself.
        unsafe { Self::activate_block(isa, act, xs.as_mut_ptr(), 0, 1, xs.len()) }
    }
    /// Applies `act` to the `rows` × `cols` block at `p` (rows `rs` elements apart) with the
    /// kernels of `isa`: a tile of C in one call.
    ///
    /// # Safety
    /// Every row `p + i·rs .. p + i·rs + cols` (`i < rows`) must be valid for reads and writes
    /// and not aliased elsewhere during the call.
    unsafe fn activate_block(isa: Isa, act: Activation, p: *mut Self, rs: usize, rows: usize, cols: usize) {
        let _ = isa;
        // SAFETY: the caller's contract.
        unsafe { each_row(p, rs, rows, cols, |row| Self::activate_row(act, row)) }
    }
    /// Applies `act` to one row without vector kernels ([`Scalar::activate_block`]'s default).
    fn activate_row(act: Activation, xs: &mut [Self]);
}

/// `f` on each of the `rows` rows of `cols` elements at `p`, `rs` elements apart.
///
/// # Safety
/// As [`Scalar::activate_block`]: every row must be valid for reads and writes and not aliased.
unsafe fn each_row<T>(p: *mut T, rs: usize, rows: usize, cols: usize, mut f: impl FnMut(&mut [T])) {
    for i in 0..rows {
        // SAFETY: row i of the block (the caller's contract).
        f(unsafe { std::slice::from_raw_parts_mut(p.wrapping_add(i * rs), cols) });
    }
}

impl Scalar for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
    fn add(a: f32, b: f32) -> f32 {
        a + b
    }
    fn from_i32(x: i32) -> f32 {
        x as f32
    }
    unsafe fn activate_block(isa: Isa, act: Activation, p: *mut f32, rs: usize, rows: usize, cols: usize) {
        if act == Activation::None {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use super::isa::isa_supported;
            if isa == Isa::Avx512 && isa_supported(Isa::Avx512) {
                // SAFETY: AVX-512F is present (checked just above); the block's rows are valid
                // (the caller's contract).
                return unsafe { act_f32_avx512(act, p, rs, rows, cols) };
            }
            if matches!(isa, Isa::Avx2 | Isa::Avx512) && isa_supported(Isa::Avx2) {
                // SAFETY: AVX2 and FMA are present (checked just above); the block's rows are
                // valid (the caller's contract).
                return unsafe { act_f32_avx2(act, p, rs, rows, cols) };
            }
        }
        let _ = isa;
        // SAFETY: the caller's contract.
        unsafe { each_row(p, rs, rows, cols, |row| Self::activate_row(act, row)) }
    }
    fn activate_row(act: Activation, xs: &mut [f32]) {
        act_f32_slice(act, xs)
    }
}

impl Scalar for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn mul_add(a: f64, b: f64, c: f64) -> f64 {
        a * b + c
    }
    fn add(a: f64, b: f64) -> f64 {
        a + b
    }
    fn from_i32(x: i32) -> f64 {
        x as f64
    }
    fn activate_row(act: Activation, xs: &mut [f64]) {
        if act == Activation::None {
            return;
        }
        for x in xs {
            *x = act_f64(act, *x);
        }
    }
}

impl Scalar for i32 {
    const ZERO: i32 = 0;
    const ONE: i32 = 1;
    fn mul_add(a: i32, b: i32, c: i32) -> i32 {
        a.wrapping_mul(b).wrapping_add(c)
    }
    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }
    fn from_i32(x: i32) -> i32 {
        x
    }
    /// Integer outputs support only [`Activation::None`] and [`Activation::Relu`] (the GEMM
    /// entry points reject the others before any work).
    fn activate_row(act: Activation, xs: &mut [i32]) {
        if act == Activation::Relu {
            for x in xs {
                *x = (*x).max(0);
            }
        }
    }
}

/// The exact activation in f64 (used for f64 outputs, and as the reference in tests).
pub fn act_f64(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::GeluErf => 0.5 * x * (1.0 + erf_f64(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Tanh => x.tanh(),
        Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
    }
}

/// `erf` in f64 to about 1e-15 (series for small |x|, continued fraction for the tail).
pub fn erf_f64(x: f64) -> f64 {
    let ax = x.abs();
    let r = if ax < 2.5 {
        // Maclaurin series: erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)).
        let mut term = ax;
        let mut sum = ax;
        let x2 = ax * ax;
        for n in 1..200 {
            term *= -x2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(x) = e^{-x²}/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) (Lentz-free, evaluated backwards).
        let mut f = ax;
        for n in (1..80).rev() {
            f = ax + (n as f64 / 2.0) / f;
        }
        1.0 - (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * f)
    };
    if x < 0.0 { -r } else { r }
}

// ---- f32 approximations: branch-free, so loops over slices vectorise. ----

/// `e^x` in f32: range reduction by ln 2 (Cody–Waite) and a degree-6 polynomial; relative
/// error about 2 ulp over [-87, 88]; saturates to 0 / large finite values outside.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // Round x·log2(e) to the nearest integer with the 1.5·2^23 trick (no libm call).
    let magic = 12_582_912.0f32;
    let n = (x * std::f32::consts::LOG2_E + magic) - magic;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = 1.0 / 720.0f32;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    let scale = f32::from_bits((((n as i32) + 127) as u32) << 23);
    p * scale
}

/// Logistic sigmoid in f32 from [`exp_f32`].
#[inline(always)]
pub fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// `tanh` in f32: `1 - 2/(e^{2x}+1)`, with an odd Taylor polynomial for |x| < 0.125 where the
/// subtraction would cancel.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let big = 1.0 - 2.0 / (exp_f32(2.0 * x) + 1.0);
    let x2 = x * x;
    // tanh x = x - x³/3 + 2x⁵/15 - 17x⁷/315 + ...
    let small = x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    if x.abs() < 0.125 { small } else { big }
}

/// `erf` in f32 (Abramowitz–Stegun 7.1.26, absolute error 1.5e-7 in exact arithmetic).
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let ax = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * ax);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let r = 1.0 - poly * exp_f32(-ax * ax);
    if x < 0.0 { -r } else { r }
}

/// One f32 activation (the scalar form of the vectorised slice loops).
#[inline(always)]
pub fn act_f32(act: Activation, x: f32) -> f32 {
    match act {
        Activation::None => x,
        Activation::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        Activation::GeluErf => 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)),
        Activation::GeluTanh => 0.5 * x * (1.0 + tanh_f32(0.797_884_6 * (x + 0.044_715 * x * x * x))),
        Activation::Silu => x * sigmoid_f32(x),
        Activation::Sigmoid => sigmoid_f32(x),
        Activation::Tanh => tanh_f32(x),
        Activation::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
    }
}

macro_rules! act_loop {
    ($act:expr, $xs:expr) => {
        match $act {
            Activation::None => {}
            Activation::Relu => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::Relu, *x)),
            Activation::GeluErf => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::GeluErf, *x)),
            Activation::GeluTanh => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::GeluTanh, *x)),
            Activation::Silu => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::Silu, *x)),
            Activation::Sigmoid => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::Sigmoid, *x)),
            Activation::Tanh => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::Tanh, *x)),
            Activation::HardSwish => $xs.iter_mut().for_each(|x| *x = act_f32(Activation::HardSwish, *x)),
        }
    };
}

/// Applies `act` to a slice (portable build).
pub fn act_f32_slice(act: Activation, xs: &mut [f32]) {
    act_loop!(act, xs)
}

#[cfg(target_arch = "x86_64")]
use x86::{act_f32_avx2, act_f32_avx512};

/// Hand-vectorised activations for the x86 epilogue. The epilogue runs them on a tile of C (rows
/// of 16 to 48 values), too short for the compiler's vectorised loops, which unroll 4 × 16 wide
/// and leave such rows to their scalar remainder; the whole tile in one call, so that its
/// vectors' latency chains overlap. They are the fused kernels' vector math
/// (`fused::vmath`); the erf GELU is its rational form (`gelu_erf_fast`, within the epilogue's
/// documented error, about a third of the work of `FusedGelu`'s `exp`-based one, which keeps
/// 1e-7 relative error in the far negative tail), so `FusedDense` with GELU is within that error
/// of `FusedGelu`, not equal to it.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Activation;
    use crate::kernels::fused::vmath::{avx2, avx512};

    /// One `match` per call, each arm its own loop over the block in the ISA module `$isa`.
    macro_rules! per_activation {
        ($act:expr, ($p:expr, $rs:expr, $rows:expr, $cols:expr), $isa:ident) => {
            match $act {
                Activation::None => {}
                Activation::Relu => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::relu(v)),
                Activation::GeluErf => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::gelu_erf_fast(v)),
                Activation::GeluTanh => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::gelu_tanh(v)),
                Activation::Silu => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::silu(v)),
                Activation::Sigmoid => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::sigmoid(v)),
                Activation::Tanh => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::tanh(v)),
                Activation::HardSwish => $isa::map_rows_in_place($p, $rs, $rows, $cols, |v| $isa::hard_swish(v)),
            }
        };
    }

    /// `act` on the `rows` × `cols` block at `p` (rows `rs` apart) with AVX-512 (16 lanes,
    /// masked tail).
    ///
    /// # Safety
    /// The CPU must support AVX-512F; every row `p + i·rs .. p + i·rs + cols` (`i < rows`) must
    /// be readable and writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn act_f32_avx512(act: Activation, p: *mut f32, rs: usize, rows: usize, cols: usize) {
        // SAFETY: the caller's contract.
        unsafe { per_activation!(act, (p, rs, rows, cols), avx512) }
    }

    /// `act` on the `rows` × `cols` block at `p` (rows `rs` apart) with AVX2 (8 lanes, masked
    /// tail).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; every row `p + i·rs .. p + i·rs + cols` (`i < rows`)
    /// must be readable and writable.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn act_f32_avx2(act: Activation, p: *mut f32, rs: usize, rows: usize, cols: usize) {
        // SAFETY: the caller's contract.
        unsafe { per_activation!(act, (p, rs, rows, cols), avx2) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_f64_matches_known_values() {
        // erf(0.5) = 0.5204998778130465, erf(1) = 0.8427007929497149, erf(3) = 0.9999779095030014.
        assert!((erf_f64(0.5) - 0.520_499_877_813_046_5).abs() < 1e-14);
        assert!((erf_f64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-14);
        assert!((erf_f64(-3.0) + 0.999_977_909_503_001_4).abs() < 1e-14);
    }

    #[test]
    fn f32_activations_are_within_documented_error() {
        let acts = &Activation::ALL[1..];
        for &act in acts {
            let mut worst = 0.0f64;
            let mut x = -20.0f32;
            while x <= 20.0 {
                let got = act_f32(act, x) as f64;
                let want = act_f64(act, x as f64);
                let err = (got - want).abs() / (1.0 + (x as f64).abs());
                worst = worst.max(err / 4e-7);
                x += 0.003_17;
            }
            assert!(worst <= 1.0, "{act:?}: error {:.3e}", worst * 4e-7);
        }
    }

    /// The vector activations of every ISA this CPU runs against the f64 definitions on a dense
    /// grid of [−20, 20] (the slice test below samples only every 0.25): the documented 4e-7
    /// absolute error per unit of |x|.
    #[test]
    fn vector_activations_within_documented_error_on_a_dense_grid() {
        use super::super::isa::isa_supported;
        let xs: Vec<f32> = (0..=12_000).map(|i| -20.0 + i as f32 * (40.0 / 12_000.0)).collect();
        for isa in [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| isa_supported(i)) {
            for &act in &Activation::ALL[1..] {
                let mut got = xs.clone();
                f32::activate(isa, act, &mut got);
                let worst = xs
                    .iter()
                    .zip(&got)
                    .map(|(&x, &g)| (g as f64 - act_f64(act, x as f64)).abs() / (1.0 + (x as f64).abs()))
                    .fold(0.0f64, f64::max);
                assert!(worst <= 4e-7, "{isa:?} {act:?}: error {worst:.3e}");
            }
        }
    }

    #[test]
    fn exp_f32_relative_error() {
        let mut x = -80.0f32;
        while x < 80.0 {
            let rel = ((exp_f32(x) as f64) - (x as f64).exp()).abs() / (x as f64).exp();
            assert!(rel < 5e-7, "exp({x}) rel err {rel}");
            x += 0.0137;
        }
    }

    /// The slice activations of every ISA this CPU runs (the vector paths with their masked
    /// tails) against the f64 definitions, for every length up to 50 and the special values.
    #[test]
    fn slice_activations_on_every_isa_path() {
        use super::super::isa::isa_supported;
        let acts = &Activation::ALL[1..];
        let isas = [Isa::Generic, Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| isa_supported(i));
        for isa in isas {
            for &act in acts {
                for n in 1..=50usize {
                    // Values spread over [-14, 14] with a different offset per length.
                    let xs: Vec<f32> = (0..n).map(|i| ((i * 37 + n * 11) % 113) as f32 / 4.0 - 14.0).collect();
                    let mut got = xs.clone();
                    f32::activate(isa, act, &mut got);
                    for (&x, &g) in xs.iter().zip(&got) {
                        let want = act_f64(act, x as f64);
                        let err = (g as f64 - want).abs() / (1.0 + (x as f64).abs());
                        assert!(err <= 4e-7, "{isa:?} {act:?} n={n} x={x}: {g:e} vs {want:e}");
                    }
                }
                // Special values (NaN kept; limits at ±∞ and far out; 0 at 0).
                let xs = [f32::NAN, 0.0, -100.0, 100.0, f32::INFINITY, -1e30, 1e30];
                let mut got = xs.to_vec();
                f32::activate(isa, act, &mut got);
                assert!(got[0].is_nan(), "{isa:?} {act:?}: NaN gave {}", got[0]);
                let (zero, m100, p100, pinf) = (got[1], got[2], got[3], got[4]);
                let want: [f64; 4] = match act {
                    Activation::Relu | Activation::HardSwish | Activation::GeluErf | Activation::GeluTanh => {
                        [0.0, 0.0, 100.0, f64::INFINITY]
                    }
                    Activation::Silu => [0.0, 0.0, 100.0, f64::INFINITY],
                    Activation::Sigmoid => [0.5, 0.0, 1.0, 1.0],
                    Activation::Tanh => [0.0, -1.0, 1.0, 1.0],
                    Activation::None => unreachable!(),
                };
                // Far-out values may keep a tiny tail (under 1e-30) on paths that do not flush.
                for (g, w) in [zero, m100, p100, pinf].into_iter().zip(want) {
                    assert!(g as f64 == w || (g as f64 - w).abs() <= 1e-30, "{isa:?} {act:?}: {g:e} vs {w:e}");
                }
                if act != Activation::Sigmoid && act != Activation::Tanh {
                    assert_eq!(got[6], 1e30, "{isa:?} {act:?}");
                }
            }
        }
    }

    #[test]
    fn relu_keeps_nan() {
        assert!(act_f32(Activation::Relu, f32::NAN).is_nan());
        assert_eq!(act_f32(Activation::Relu, -2.0), 0.0);
    }

    #[test]
    fn hard_swish_by_hand() {
        // x·clamp(x/6 + 1/2, 0, 1): 0 below -3, x above 3, 1·(1/6 + 1/2) = 2/3 at 1, -1/3 at -1.
        for (x, want) in
            [(-4.0, 0.0), (-3.0, 0.0), (-1.0, -1.0 / 3.0), (0.0, 0.0), (1.0, 2.0 / 3.0), (3.0, 3.0), (5.0, 5.0)]
        {
            assert!((act_f64(Activation::HardSwish, x) - want).abs() < 1e-15, "{x}");
            assert!((act_f32(Activation::HardSwish, x as f32) as f64 - want).abs() < 1e-7, "{x}");
        }
        assert!(act_f32(Activation::HardSwish, f32::NAN).is_nan());
    }
}
