//! Vector math for the fused kernels and the GEMM epilogue: an f32 `exp` (Cephes-style range
//! reduction and a degree-6 polynomial), a cheaper one for the softmax's non-positive exponents
//! (`exp2_nonpos`: base 2, no range split), the GELU forms and the other activations. Each
//! algorithm is written once over a lane vocabulary (`vector_math!`) and instantiated for
//! AVX2+FMA (8 lanes) and AVX-512F (16 lanes); a portable scalar form follows the same algorithm
//! (not for `exp2_nonpos`: the portable softmax takes `exp_scalar`).
//!
//! `exp` error (measured by `tests/fused_kernels.rs::exp_max_error` against f64 `exp` over every
//! 64th f32 in [-87.3, 88.7]): max relative error 1.19e-7 (1.27 ulp) on the normal range.
//! Results below 2⁻¹²⁶ (x < −87.33, −∞ included) are flushed to 0, as the op catalogue's subnormal
//! rule allows: a subnormal result, and every later operation on it, takes a microcode assist
//! costing ~100 cycles, which made the GELU of large inputs several times slower. Inputs above
//! 88.73 give +∞, NaN stays NaN. The GELU forms flush the same way (see [`gelu_erf_scalar`]).

/// ln 2 split for the range reduction: `C1 + C2 = ln 2` with `C1` exact in 11 bits.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// Polynomial for `(e^r − 1 − r)/r²` on |r| ≤ ln2/2 (Cephes `expf` coefficients).
#[allow(clippy::excessive_precision)]
const P: [f32; 6] = [1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1];
/// Polynomial for `2^r` on |r| ≤ ½ (coefficients from degree 0; a relative-error fit to f64
/// `2^r` by iterated reweighted least squares on Chebyshev nodes, 1.9e-9 before rounding the
/// coefficients to f32, 7.9e-8 evaluated in f32 by Horner with FMA over 200,001 points).
/// Used by `exp2_nonpos`, the online softmax's exponential.
#[allow(clippy::excessive_precision)]
// Only the x86 vector paths take `exp2_nonpos`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const EXP2_P: [f32; 7] =
    [1.0, 6.931_471_825e-1, 2.402_264_625e-1, 5.550_328_642e-2, 9.618_489_072e-3, 1.339_993_207e-3, 1.534_580_952e-4];
/// Below this base-2 exponent `exp2_nonpos` returns 0 (its smallest result, `2⁻¹²⁵·2^−½`, is
/// then still normal).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const EXP2_FLUSH: f32 = -125.0;
/// Below this, `e^x < 2⁻¹²⁶` would be subnormal: the exp kernels return 0.
pub const EXP_FLUSH: f32 = -87.33;
/// Upper clamp of the exp argument (above: +∞).
const EXP_HI: f32 = 89.0;
/// Below this the exact GELU `x·Φ(x)` is under 1e-36, and `Φ` near the subnormal range: it
/// gives `x·0` (−0, or NaN for −∞). Above `GELU_HI`, `Φ(x)` is 1 in f32.
const GELU_LO: f32 = -12.8;
const GELU_HI: f32 = 10.0;

/// Numerical Recipes `erfcc` coefficients: `erfc(a) = t·exp(−a² + poly(t))`, `t = 1/(1 + a/2)`,
/// fractional error below 1.2e-7 for every a ≥ 0.
#[allow(clippy::excessive_precision)]
const ERFC: [f32; 10] = [
    -1.265_512_2,
    1.000_023_7,
    0.374_091_96,
    0.096_784_18,
    -0.186_288_06,
    0.278_868_07,
    -1.135_203_98,
    1.488_515_87,
    -0.822_152_23,
    0.170_872_77,
];
/// `erf(z) ≈ z·P(z²)/Q(z²)` on |z| ≤ [`ERF_R_CLAMP`] (coefficients from lowest degree; a
/// weighted least-squares fit to f64 `erf` refined towards equal ripple, max error 1.5e-8 before
/// rounding the coefficients to f32, 3.5e-7 absolute evaluated in f32 with FMA; `erf(3.9)` is 1
/// within 3.5e-8). Used by `gelu_erf_fast`, the cheaper GELU of the GEMM epilogue.
#[allow(clippy::excessive_precision)]
// Only the x86 vector paths take the fast GELU.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const ERF_R_P: [f32; 6] = [
    1.128_378_987_312_317,
    0.191_937_595_605_850_22,
    0.052_966_486_662_626_266,
    0.003_836_737_712_845_206_3,
    0.000_287_455_448_415_130_4,
    2.050_428_747_679_689e-6,
];
/// The denominator of the rational `erf` (its constant term is 1).
#[allow(clippy::excessive_precision)]
// Only the x86 vector paths take the fast GELU.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const ERF_R_Q: [f32; 5] = [
    0.503_432_035_446_167,
    0.114_756_807_684_898_38,
    0.015_108_923_427_760_601,
    0.001_181_703_526_526_689_5,
    3.823_108_272_626_996e-5,
];
/// Beyond |z| = 3.9 the rational `erf` is replaced by ±1.
// Only the x86 vector paths take the fast GELU.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const ERF_R_CLAMP: f32 = 3.9;
/// √(2/π) for the tanh form of GELU.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// Portable `exp` with the same algorithm as the AVX2 version.
#[inline]
pub fn exp_scalar(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < EXP_FLUSH {
        return 0.0;
    }
    let xc = x.min(EXP_HI);
    let n = (xc * LOG2E).round_ties_even();
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = P[0];
    for &c in &P[1..] {
        p = p * r + c;
    }
    let e = p * (r * r) + (r + 1.0);
    let ni = n as i32;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    e * f32::from_bits(((n1 + 127) as u32) << 23) * f32::from_bits(((n2 + 127) as u32) << 23)
}

/// Standard normal CDF Φ(x) = ½·erfc(−x/√2) through the `erfcc` approximation, with the
/// exponent `−x²/2` corrected for its rounding error.
#[inline]
fn phi_scalar(x: f32) -> f32 {
    if x < GELU_LO {
        return 0.0;
    }
    let x = x.min(GELU_HI);
    let a = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * a);
    let mut p = ERFC[9];
    for &c in ERFC[..9].iter().rev() {
        p = p * t + c;
    }
    // −a² = −x²/2 in double-f32: x² = x2 + lo exactly.
    let x2 = x * x;
    let lo = ((x as f64) * (x as f64) - x2 as f64) as f32;
    let h = -0.5 * x2;
    let s = h + p;
    let err = (h - s) + p;
    let e = exp_scalar(s);
    let ec = e + e * (err - 0.5 * lo);
    let half_erfc = 0.5 * t * ec;
    if x >= 0.0 { 1.0 - half_erfc } else { half_erfc }
}

/// Exact (erf) GELU of one value: `x·Φ(x)`, with `Φ` taken as 0 below `GELU_LO` = −12.8 (where
/// `x·Φ(x)` is under 1e-36).
#[inline]
pub fn gelu_erf_scalar(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    x * phi_scalar(x)
}

/// Tanh GELU of one value: `x·½·(1 + tanh(u)) = x / (1 + e^(−2u))`, `u = √(2/π)(x + 0.044715x³)`.
#[inline]
pub fn gelu_tanh_scalar(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp_scalar(-2.0 * u))
}

/// `exp` of every element of `x` into `y` (the shorter length) on the given path.
// Only the crate's own tests and benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn exp_f32(isa: super::FusedIsa, x: &[f32], y: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if isa.checked() == super::FusedIsa::Avx512 {
        // SAFETY: `checked()` confirmed AVX-512F.
        unsafe { avx512::exp_slice(x, y) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.checked().avx2() {
        // SAFETY: `checked()` confirmed AVX2 and FMA.
        unsafe { avx2::exp_slice(x, y) };
        return;
    }
    let _ = isa;
    y.iter_mut().zip(x).for_each(|(o, &v)| *o = exp_scalar(v));
}

/// The algorithms on vectors, written once over a per-ISA lane vocabulary: the module that
/// invokes this macro defines `ops` (`V`, `M`, `LANES` and the primitives below, each
/// `#[inline]` with the module's target features) and gets `exp`, the GELU forms, the other
/// activations and the slice loops in its ISA. `$feat` is the target-feature list every function
/// is compiled with.
///
/// Primitives: `splat`, `zero`, `add`, `sub`, `mul`, `div`, `min`/`max` (x86 semantics: the
/// second operand where either is NaN), `fmadd(a, b, c) = a·b + c`, `fnmadd = c − a·b`,
/// `fmsub = a·b − c`, `abs`, `round` (to nearest even), comparisons `lt`/`ge` (ordered),
/// and `is_nan` giving a mask `M`, `first(k)` (the first `k` lanes),
/// `select(m, a, b)` (`a` where `m`), `scale2(e, n) = e·2ⁿ` for
/// integer-valued `n ∈ [−126, 128]` (`scale2_normal` the same for `n ∈ [−126, 127]`, where 2ⁿ
/// is one normal float), `hsum`, full `load`/`store` and `load_part`/`store_part`
/// of the first `k < LANES` lanes (the others read as 0, never written). Beside them, for
/// kernels that sum in f64 or stream their output: `VD` (f64 lanes, half as many), `zero_d`,
/// `widen_add(acc, v)` (every f32 lane of `v` added into the f64 lanes of `acc`), `hsum_d`,
/// `store_stream` (a non-temporal store to a vector-aligned address), `sfence` and `prefetch`.
#[cfg(target_arch = "x86_64")]
macro_rules! vector_math {
    ($feat:literal) => {
        use super::{
            ERF_R_CLAMP, ERF_R_P, ERF_R_Q, ERFC, EXP_FLUSH, EXP_HI, EXP2_FLUSH, EXP2_P, GELU_HI, GELU_LO, LN2_HI,
            LN2_LO, LOG2E, P, SQRT_2_OVER_PI,
        };
        use ops::*;
        pub use ops::{LANES, V, hsum};

        /// The core shared by the exp variants: for finite `xc`, `xc = n·ln 2 + r` (Cody–Waite,
        /// |r| ≤ ln2/2) and `e^r` by the polynomial; returns `(e^r, n)` with `n` integer-valued.
        /// The caller scales by 2ⁿ.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn exp_reduced(xc: V) -> (V, V) {
            let n = round(mul(xc, splat(LOG2E)));
            let r = fnmadd(n, splat(LN2_HI), xc);
            let r = fnmadd(n, splat(LN2_LO), r);
            let mut p = splat(P[0]);
            for &c in &P[1..] {
                p = fmadd(p, r, splat(c));
            }
            (fmadd(p, mul(r, r), add(r, splat(1.0))), n)
        }

        /// `exp` of every lane: results below 2⁻¹²⁶ flushed to 0, above 88.73 +∞, NaN kept.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn exp(x: V) -> V {
            // max returns its second operand for NaN lanes: xc is finite.
            let xc = min(max(x, splat(EXP_FLUSH)), splat(EXP_HI));
            let (e, n) = exp_reduced(xc);
            let y = select(lt(x, splat(EXP_FLUSH)), zero(), scale2(e, n));
            select(is_nan(x), x, y)
        }

        /// `2^t` for lanes `t ≤ 0` (up to rounding): `t = n + r` with `n` the nearest integer,
        /// `2^r` by the degree-6 `EXP2_P` (within 8e-8 relative), then `2ⁿ` into the exponent.
        /// Results below `2^EXP2_FLUSH` (−∞ included) are 0, never subnormal; NaN lanes NaN.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn exp2_nonpos(t: V) -> V {
            let n = round(t);
            let r = sub(t, n);
            let mut p = splat(EXP2_P[6]);
            for &c in EXP2_P[..6].iter().rev() {
                p = fmadd(p, r, splat(c));
            }
            // n ∈ [−125, 1] wherever the result is kept (a NaN lane stays NaN: p is NaN).
            select(lt(t, splat(EXP2_FLUSH)), zero(), scale2_normal(p, n))
        }

        /// `e^x` for lanes `x ≤ 0` (softmax exponents after the maximum is taken off):
        /// [`exp2_nonpos`] of `x·log₂e`: 12 vector operations on AVX-512 against [`exp`]'s 18
        /// (no Cody–Waite split, no clamps, no NaN select). The product's rounding adds at most
        /// |x|·6e-8 relative to the polynomial's 8e-8: below 2.2e-8 of the largest weight (1)
        /// for every `x ≤ 0`.
        /// Results below 2⁻¹²⁵ (x < −86.64, −∞ included) are 0, never subnormal; NaN lanes NaN.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn exp_nonpos(x: V) -> V {
            exp2_nonpos(mul(x, splat(LOG2E)))
        }

        /// Exact GELU of every lane (see [`super::gelu_erf_scalar`]).
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn gelu_erf(x: V) -> V {
            let xc = min(max(x, splat(GELU_LO)), splat(GELU_HI));
            let a = mul(abs(xc), splat(std::f32::consts::FRAC_1_SQRT_2));
            let t = div(splat(1.0), fmadd(splat(0.5), a, splat(1.0)));
            let mut p = splat(ERFC[9]);
            for &c in ERFC[..9].iter().rev() {
                p = fmadd(p, t, splat(c));
            }
            // −a² = −x²/2 in double-f32: x² = x2 + lo exactly.
            let x2 = mul(xc, xc);
            let lo = fmsub(xc, xc, x2);
            let h = mul(splat(-0.5), x2);
            let s = add(h, p);
            let err = add(sub(h, s), p);
            let e = exp(s);
            let ec = fmadd(e, fnmadd(splat(0.5), lo, err), e);
            let half_erfc = mul(mul(splat(0.5), t), ec);
            let phi = select(ge(xc, zero()), sub(splat(1.0), half_erfc), half_erfc);
            let phi = select(lt(x, splat(GELU_LO)), zero(), phi);
            // NaN lanes: x·Φ stays NaN since Φ is finite.
            mul(x, phi)
        }

        /// GELU `x·Φ(x)` of every lane with `Φ = ½(1 + erf(x/√2))` through the rational `erf`
        /// (`ERF_R_P`): about a third of the operations of [`gelu_erf`] (no `exp`), within 2e-7
        /// absolute per unit of |x| (an f32 emulation over [−8, 8]) instead of its 1e-7
        /// relative. Φ is exactly 0 where x/√2 ≤ −3.9 (x·Φ gives −0, or NaN for −∞) and exactly
        /// 1 where x/√2 ≥ 3.9; NaN stays NaN.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn gelu_erf_fast(x: V) -> V {
            let zr = mul(x, splat(std::f32::consts::FRAC_1_SQRT_2));
            // max returns its second operand for NaN lanes: z is finite.
            let z = min(max(zr, splat(-ERF_R_CLAMP)), splat(ERF_R_CLAMP));
            let t = mul(z, z);
            let mut p = splat(ERF_R_P[5]);
            for &c in ERF_R_P[..5].iter().rev() {
                p = fmadd(p, t, splat(c));
            }
            let mut q = splat(ERF_R_Q[4]);
            for &c in ERF_R_Q[..4].iter().rev() {
                q = fmadd(q, t, splat(c));
            }
            let q = fmadd(q, t, splat(1.0));
            let erf = div(mul(z, p), q);
            let phi = fmadd(splat(0.5), erf, splat(0.5));
            let phi = select(ge(zr, splat(ERF_R_CLAMP)), splat(1.0), phi);
            let phi = select(ge(splat(-ERF_R_CLAMP), zr), zero(), phi);
            mul(x, phi)
        }

        /// Tanh GELU of every lane (see [`super::gelu_tanh_scalar`]).
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn gelu_tanh(x: V) -> V {
            let inner = fmadd(splat(0.044_715), mul(mul(x, x), x), x);
            let m2u = mul(splat(-2.0 * SQRT_2_OVER_PI), inner);
            div(x, add(splat(1.0), exp(m2u)))
        }

        /// `max(x, 0)` with NaN kept.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn relu(x: V) -> V {
            select(lt(x, zero()), zero(), x)
        }

        /// `1 / (1 + e^−x)`.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn sigmoid(x: V) -> V {
            div(splat(1.0), add(splat(1.0), exp(sub(zero(), x))))
        }

        /// `x / (1 + e^−x)`.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn silu(x: V) -> V {
            div(x, add(splat(1.0), exp(sub(zero(), x))))
        }

        /// `tanh`: `1 − 2/(e^{2x} + 1)`, and the odd Taylor polynomial to x⁷ where |x| < 0.125
        /// (where the subtraction cancels).
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn tanh(x: V) -> V {
            let big = sub(splat(1.0), div(splat(2.0), add(exp(add(x, x)), splat(1.0))));
            let x2 = mul(x, x);
            let p = fmadd(x2, splat(-17.0 / 315.0), splat(2.0 / 15.0));
            let p = fmadd(x2, p, splat(-1.0 / 3.0));
            let small = fmadd(mul(x, x2), p, x);
            select(lt(abs(x), splat(0.125)), small, big)
        }

        /// `x · clamp(x/6 + 1/2, 0, 1)`, NaN kept.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn hard_swish(x: V) -> V {
            let g = fmadd(x, splat(1.0 / 6.0), splat(0.5));
            let g = min(max(g, zero()), splat(1.0));
            mul(x, select(is_nan(x), x, g))
        }

        /// The `k` lanes at `p` if `k < LANES`, else a whole vector; the other lanes as `fill`.
        ///
        /// # Safety
        /// The CPU must have this module's target features; `p..p + min(k, LANES)` must be
        /// readable.
        #[inline]
        #[target_feature(enable = $feat)]
        pub unsafe fn load_n(p: *const f32, k: usize, fill: V) -> V {
            // SAFETY: the caller's contract; a partial load touches only the first k lanes.
            unsafe { if k >= LANES { load(p) } else { select(first(k), load_part(p, k), fill) } }
        }

        /// Stores the first `min(k, LANES)` lanes of `v` at `p`.
        ///
        /// # Safety
        /// The CPU must have this module's target features; `p..p + min(k, LANES)` must be
        /// writable.
        #[inline]
        #[target_feature(enable = $feat)]
        pub unsafe fn store_n(p: *mut f32, k: usize, v: V) {
            // SAFETY: the caller's contract; a partial store touches only the first k lanes.
            unsafe { if k >= LANES { store(p, v) } else { store_part(p, k, v) } }
        }

        /// `y[i] = f(x[i])` for `i < n`, a vector at a time, the last one partial. `x` and `y`
        /// may be the same pointer.
        ///
        /// # Safety
        /// The CPU must have this module's target features; `x..x + n` must be readable and
        /// `y..y + n` writable; `f` must be safe to call on this CPU.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn map_raw(x: *const f32, y: *mut f32, n: usize, f: impl Fn(V) -> V) {
            let mut i = 0;
            while i < n {
                // SAFETY: the lanes i..min(i + LANES, n) lie inside both ranges.
                unsafe { store_n(y.add(i), n - i, f(load_n(x.add(i), n - i, zero()))) };
                i += LANES;
            }
        }

        /// `f` applied to every element of `x` into `y` (the shorter length), the last partial
        /// vector through masked loads and stores.
        ///
        /// # Safety
        /// The CPU must have this module's target features; `f` must be safe to call on it.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn map(x: &[f32], y: &mut [f32], f: impl Fn(V) -> V) {
            // SAFETY: n is the shorter length.
            unsafe { map_raw(x.as_ptr(), y.as_mut_ptr(), x.len().min(y.len()), f) }
        }

        /// `f` applied to every element of `xs` in place (see [`map`]).
        ///
        /// # Safety
        /// The CPU must have this module's target features; `f` must be safe to call on it.
        #[inline]
        #[target_feature(enable = $feat)]
        pub fn map_in_place(xs: &mut [f32], f: impl Fn(V) -> V) {
            let p = xs.as_mut_ptr();
            // SAFETY: one slice read and written lane for lane.
            unsafe { map_raw(p, p, xs.len(), f) }
        }

        /// `f` applied in place to `rows` rows of `cols` values at `p`, `rs` apart (a GEMM tile
        /// of C), in one call: the rows' vectors are independent, so the out-of-order core
        /// overlaps their latency chains and the constants are loaded once, where a call per
        /// row of one or two vectors waits on each chain in turn.
        ///
        /// # Safety
        /// The CPU must have this module's target features; `p + i·rs .. p + i·rs + cols` must
        /// be readable and writable for every `i < rows`; `f` must be safe to call on this CPU.
        #[inline]
        #[target_feature(enable = $feat)]
        pub unsafe fn map_rows_in_place(p: *mut f32, rs: usize, rows: usize, cols: usize, f: impl Fn(V) -> V) {
            for i in 0..rows {
                let r = p.wrapping_add(i * rs);
                // SAFETY: row i lies inside the block (the caller's contract).
                unsafe { map_raw(r, r, cols, &f) }
            }
        }

        /// `exp` of every element of `x` into `y` (the shorter length).
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        // Only `exp_f32` uses it, for the crate's own tests.
        #[cfg_attr(not(feature = "internals"), allow(dead_code))]
        #[target_feature(enable = $feat)]
        pub fn exp_slice(x: &[f32], y: &mut [f32]) {
            map(x, y, |v| exp(v));
        }

        /// `y[i] = exp(x[i] − m)` for `i` below the shorter length; returns the sum of the
        /// results (lane sums, then across the lanes). The last partial vector goes through
        /// masked loads and stores.
        ///
        /// # Safety
        /// The CPU must have this module's target features.
        #[target_feature(enable = $feat)]
        pub fn exp_shift_sum(x: &[f32], y: &mut [f32], m: f32) -> f32 {
            let n = x.len().min(y.len());
            let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
            let mv = splat(m);
            let mut sum = zero();
            let mut i = 0;
            while i < n {
                let k = n - i;
                // SAFETY: the lanes i..min(i + LANES, n) lie inside x and y.
                let e = unsafe { exp(sub(load_n(xp.add(i), k, zero()), mv)) };
                // SAFETY: as above.
                unsafe { store_n(yp.add(i), k, e) };
                sum = add(sum, if k >= LANES { e } else { select(first(k), e, zero()) });
                i += LANES;
            }
            hsum(sum)
        }
    };
}

/// AVX2+FMA (8 lanes). Every function requires a CPU with AVX2 and FMA (checked by the callers
/// through [`super::FusedIsa`]).
#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    /// The 8-lane vocabulary of `vector_math!` (whose comment documents each primitive).
    ///
    /// # Safety
    /// Every function requires a CPU with AVX2 and FMA.
    #[allow(missing_docs, clippy::missing_safety_doc)]
    pub mod ops {
        use std::arch::x86_64::*;

        /// One vector of f32 lanes.
        pub type V = __m256;
        /// A lane mask (all-ones or all-zeros lanes).
        pub type M = __m256;
        /// Lanes per vector.
        pub const LANES: usize = 8;

        macro_rules! binary {
            ($($name:ident = $intr:ident),*) => {$(
                #[inline]
                #[target_feature(enable = "avx2,fma")]
                pub fn $name(a: V, b: V) -> V {
                    $intr(a, b)
                }
            )*};
        }
        binary!(add = _mm256_add_ps, sub = _mm256_sub_ps, mul = _mm256_mul_ps, div = _mm256_div_ps);
        binary!(min = _mm256_min_ps, max = _mm256_max_ps);
        macro_rules! ternary {
            ($($name:ident = $intr:ident),*) => {$(
                #[inline]
                #[target_feature(enable = "avx2,fma")]
                pub fn $name(a: V, b: V, c: V) -> V {
                    $intr(a, b, c)
                }
            )*};
        }
        ternary!(fmadd = _mm256_fmadd_ps, fnmadd = _mm256_fnmadd_ps, fmsub = _mm256_fmsub_ps);
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn splat(x: f32) -> V {
            _mm256_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn zero() -> V {
            _mm256_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn abs(x: V) -> V {
            _mm256_andnot_ps(_mm256_set1_ps(-0.0), x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn round(x: V) -> V {
            _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn lt(a: V, b: V) -> M {
            _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn ge(a: V, b: V) -> M {
            _mm256_cmp_ps::<_CMP_GE_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn is_nan(a: V) -> M {
            _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn first(k: usize) -> M {
            _mm256_castsi256_ps(first_i(k))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn select(m: M, a: V, b: V) -> V {
            _mm256_blendv_ps(b, a, m)
        }
        /// `e·2ⁿ` as two exponent-field scalings by 2^⌊n/2⌋ and 2^⌈n/2⌉ (each a normal float for
        /// n ∈ [−126, 128]).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn scale2(e: V, n: V) -> V {
            let ni = _mm256_cvtps_epi32(n);
            let n1 = _mm256_srai_epi32::<1>(ni);
            let n2 = _mm256_sub_epi32(ni, n1);
            let bias = _mm256_set1_epi32(127);
            let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
            let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
            _mm256_mul_ps(_mm256_mul_ps(e, s1), s2)
        }
        /// `e·2ⁿ` with 2ⁿ built in the exponent field (n ∈ [−126, 127]).
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn scale2_normal(e: V, n: V) -> V {
            let bias = _mm256_set1_epi32(127);
            let s = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), bias)));
            _mm256_mul_ps(e, s)
        }
        /// Sum of the 8 lanes.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn hsum(v: V) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_movehdup_ps(s));
            _mm_cvtss_f32(s)
        }
        /// The first `k` lanes set.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        fn first_i(k: usize) -> __m256i {
            _mm256_cmpgt_epi32(_mm256_set1_epi32(k as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
        }
        /// # Safety
        /// `p..p + 8` must be readable.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn load(p: *const f32) -> V {
            // SAFETY: the caller's contract.
            unsafe { _mm256_loadu_ps(p) }
        }
        /// # Safety
        /// `p..p + 8` must be writable.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn store(p: *mut f32, v: V) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_storeu_ps(p, v) }
        }
        /// # Safety
        /// `p..p + k` must be readable (`k ≤ 8`); the other lanes are 0 and not touched.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn load_part(p: *const f32, k: usize) -> V {
            // SAFETY: the caller's contract; masked-off lanes are not accessed.
            unsafe { _mm256_maskload_ps(p, first_i(k)) }
        }
        /// # Safety
        /// `p..p + k` must be writable (`k ≤ 8`); the other lanes are not touched.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn store_part(p: *mut f32, k: usize, v: V) {
            // SAFETY: the caller's contract; masked-off lanes are not accessed.
            unsafe { _mm256_maskstore_ps(p, first_i(k), v) }
        }
        /// Four f64 lanes.
        pub type VD = __m256d;
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn zero_d() -> VD {
            _mm256_setzero_pd()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn widen_add(acc: VD, v: V) -> VD {
            let lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            let hi = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v));
            _mm256_add_pd(acc, _mm256_add_pd(lo, hi))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn hsum_d(v: VD) -> f64 {
            let s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd::<1>(v));
            _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)))
        }
        /// # Safety
        /// `p..p + 8` must be writable and 32-byte aligned.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub unsafe fn store_stream(p: *mut f32, v: V) {
            // SAFETY: the caller's contract.
            unsafe { _mm256_stream_ps(p, v) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn sfence() {
            _mm_sfence()
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub fn prefetch(p: *const f32) {
            _mm_prefetch::<_MM_HINT_T0>(p.cast())
        }
    }

    vector_math!("avx2,fma");
}

/// AVX-512F (16 lanes). Every function requires a CPU with AVX-512F (checked by the callers
/// through [`super::FusedIsa`]).
#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::__mmask16;

    /// The lanes `i..min(i + 16, n)` as a mask (`i < n`).
    #[inline(always)]
    pub fn lanes(i: usize, n: usize) -> __mmask16 {
        let k = (n - i).min(16);
        if k == 16 { !0 } else { (1u16 << k) - 1 }
    }

    /// The 16-lane vocabulary of `vector_math!` (whose comment documents each primitive).
    ///
    /// # Safety
    /// Every function requires a CPU with AVX-512F.
    #[allow(missing_docs, clippy::missing_safety_doc)]
    pub mod ops {
        use std::arch::x86_64::*;

        /// One vector of f32 lanes.
        pub type V = __m512;
        /// A lane mask (one bit per lane).
        pub type M = __mmask16;
        /// Lanes per vector.
        pub const LANES: usize = 16;

        macro_rules! binary {
            ($($name:ident = $intr:ident),*) => {$(
                #[inline]
                #[target_feature(enable = "avx512f")]
                pub fn $name(a: V, b: V) -> V {
                    $intr(a, b)
                }
            )*};
        }
        binary!(add = _mm512_add_ps, sub = _mm512_sub_ps, mul = _mm512_mul_ps, div = _mm512_div_ps);
        binary!(min = _mm512_min_ps, max = _mm512_max_ps);
        macro_rules! ternary {
            ($($name:ident = $intr:ident),*) => {$(
                #[inline]
                #[target_feature(enable = "avx512f")]
                pub fn $name(a: V, b: V, c: V) -> V {
                    $intr(a, b, c)
                }
            )*};
        }
        ternary!(fmadd = _mm512_fmadd_ps, fnmadd = _mm512_fnmadd_ps, fmsub = _mm512_fmsub_ps);
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn splat(x: f32) -> V {
            _mm512_set1_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn zero() -> V {
            _mm512_setzero_ps()
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn abs(x: V) -> V {
            _mm512_abs_ps(x)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn round(x: V) -> V {
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn lt(a: V, b: V) -> M {
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn ge(a: V, b: V) -> M {
            _mm512_cmp_ps_mask::<_CMP_GE_OQ>(a, b)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn is_nan(a: V) -> M {
            _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn first(k: usize) -> M {
            super::lanes(0, k)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn select(m: M, a: V, b: V) -> V {
            _mm512_mask_blend_ps(m, b, a)
        }
        /// `e·2ⁿ` in one rounding (`vscalefps`).
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn scale2(e: V, n: V) -> V {
            _mm512_scalef_ps(e, n)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn scale2_normal(e: V, n: V) -> V {
            _mm512_scalef_ps(e, n)
        }
        /// Sum of the 16 lanes.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn hsum(v: V) -> f32 {
            _mm512_reduce_add_ps(v)
        }
        /// # Safety
        /// `p..p + 16` must be readable.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn load(p: *const f32) -> V {
            // SAFETY: the caller's contract.
            unsafe { _mm512_loadu_ps(p) }
        }
        /// # Safety
        /// `p..p + 16` must be writable.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn store(p: *mut f32, v: V) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_storeu_ps(p, v) }
        }
        /// # Safety
        /// `p..p + k` must be readable (`k ≤ 16`); the other lanes are 0 and not touched.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn load_part(p: *const f32, k: usize) -> V {
            // SAFETY: the caller's contract; masked-off lanes are not accessed.
            unsafe { _mm512_maskz_loadu_ps(super::lanes(0, k), p) }
        }
        /// # Safety
        /// `p..p + k` must be writable (`k ≤ 16`); the other lanes are not touched.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn store_part(p: *mut f32, k: usize, v: V) {
            // SAFETY: the caller's contract; masked-off lanes are not accessed.
            unsafe { _mm512_mask_storeu_ps(p, super::lanes(0, k), v) }
        }
        /// Eight f64 lanes.
        pub type VD = __m512d;
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn zero_d() -> VD {
            _mm512_setzero_pd()
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn widen_add(acc: VD, v: V) -> VD {
            let lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
            let hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))));
            _mm512_add_pd(acc, _mm512_add_pd(lo, hi))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn hsum_d(v: VD) -> f64 {
            _mm512_reduce_add_pd(v)
        }
        /// # Safety
        /// `p..p + 16` must be writable and 64-byte aligned.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn store_stream(p: *mut f32, v: V) {
            // SAFETY: the caller's contract.
            unsafe { _mm512_stream_ps(p, v) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn sfence() {
            _mm_sfence()
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub fn prefetch(p: *const f32) {
            _mm_prefetch::<_MM_HINT_T0>(p.cast())
        }
    }

    vector_math!("avx512f");
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    /// `exp_nonpos` over a slice on one path: `$isa` the module, `$feat` its target features.
    macro_rules! nonpos {
        ($isa:ident, $feat:literal) => {{
            #[target_feature(enable = $feat)]
            fn run(x: &[f32]) -> Vec<f32> {
                use super::$isa::{LANES, exp_nonpos, load_n, ops::*, store_n};
                let mut out = vec![0f32; x.len()];
                for (src, dst) in x.chunks(LANES).zip(out.chunks_mut(LANES)) {
                    // SAFETY: `load_n`/`store_n` touch the chunk's lanes only.
                    unsafe {
                        store_n(dst.as_mut_ptr(), dst.len(), exp_nonpos(load_n(src.as_ptr(), src.len(), zero())))
                    };
                }
                out
            }
            run
        }};
    }

    /// `exp_nonpos` over a slice on one path (which needs that path's target features).
    type Path = unsafe fn(&[f32]) -> Vec<f32>;

    /// The paths this CPU runs, by name.
    fn paths() -> Vec<(&'static str, Path)> {
        let mut v: Vec<(&'static str, Path)> = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(("avx2", nonpos!(avx2, "avx2,fma")));
        }
        if is_x86_feature_detected!("avx512f") {
            v.push(("avx512", nonpos!(avx512, "avx512f")));
        }
        v
    }

    /// Against f64 `exp` over every 16th f32 of [−86, 0]: within 1.2e-7 relative plus 3e-8
    /// absolute (the rounding of `x·log₂e`, at most |x|·6e-8 of a result at most 1); the flush
    /// to 0 below 2⁻¹²⁵, −∞ and NaN.
    #[test]
    fn exp_nonpos_error() {
        let mut xs = Vec::new();
        let mut b = 0u32;
        while b <= 86f32.to_bits() {
            xs.push(-f32::from_bits(b));
            b += 16;
        }
        for (name, f) in paths() {
            // SAFETY: `paths` lists only the paths this CPU has.
            let y = unsafe { f(&xs) };
            let mut worst = 0f64;
            for (&x, &e) in xs.iter().zip(&y) {
                let t = (x as f64).exp();
                worst = worst.max((e as f64 - t).abs() / (1.2e-7 * t + 3e-8));
            }
            assert!(worst <= 1.0, "{name}: error {worst} of the bound");
            // −3.4e38 (an additive mask's minimum): its product with log₂e overflows to −∞,
            // which gives 0, not NaN.
            let sp = [0.0f32, f32::NEG_INFINITY, f32::NAN, -86.6, -86.7, -200.0, -1e-7, -3.4e38];
            // SAFETY: as above.
            let y = unsafe { f(&sp) };
            assert_eq!(y[0], 1.0, "{name}");
            assert_eq!(y[1], 0.0, "{name}");
            assert!(y[2].is_nan(), "{name}");
            // 2⁻¹²⁵ = e^−86.64: above it normal results, below it 0 (never subnormal).
            assert!(y[3] > 0.0 && y[3].is_normal(), "{name}: {}", y[3]);
            assert_eq!(y[4], 0.0, "{name}");
            assert_eq!(y[5], 0.0, "{name}");
            assert!((y[6] - 1.0).abs() <= f32::EPSILON, "{name}");
            assert_eq!(y[7], 0.0, "{name}");
        }
    }
}
