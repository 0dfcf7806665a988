//! Vector math for the fused kernels: an f32 `exp` (Cephes-style range reduction and a degree-6
//! polynomial) and the GELU kernels, each in an AVX2+FMA form (8 lanes) and a portable scalar form
//! that follows the same algorithm.
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

/// AVX2+FMA versions. Every function requires a CPU with AVX2 and FMA (checked by the callers
/// through [`super::FusedIsa`]).
#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use std::arch::x86_64::*;

    use super::*;

    /// `exp` of 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp(x: __m256) -> __m256 {
        let set = _mm256_set1_ps;
        // max_ps returns its second operand for NaN lanes: xc is finite.
        let xc = _mm256_min_ps(_mm256_max_ps(x, set(EXP_FLUSH)), set(EXP_HI));
        let (e, n) = exp_reduced(xc);
        let ni = _mm256_cvtps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(ni);
        let n2 = _mm256_sub_epi32(ni, n1);
        let bias = _mm256_set1_epi32(127);
        let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        let y = _mm256_mul_ps(_mm256_mul_ps(e, s1), s2);
        let y = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, set(EXP_FLUSH)), y);
        _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    }

    /// The core shared by the exp variants: for finite `xc`, `xc = n·ln 2 + r` (Cody–Waite,
    /// |r| ≤ ln2/2) and `e^r` by the degree-7 polynomial; returns `(e^r, n)` with `n`
    /// integer-valued. The caller scales by 2ⁿ.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp_reduced(xc: __m256) -> (__m256, __m256) {
        let set = _mm256_set1_ps;
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(xc, set(LOG2E)));
        let r = _mm256_fnmadd_ps(n, set(LN2_HI), xc);
        let r = _mm256_fnmadd_ps(n, set(LN2_LO), r);
        let mut p = set(P[0]);
        p = _mm256_fmadd_ps(p, r, set(P[1]));
        p = _mm256_fmadd_ps(p, r, set(P[2]));
        p = _mm256_fmadd_ps(p, r, set(P[3]));
        p = _mm256_fmadd_ps(p, r, set(P[4]));
        p = _mm256_fmadd_ps(p, r, set(P[5]));
        (_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set(1.0))), n)
    }

    /// Exact GELU of 8 lanes (see [`super::gelu_erf_scalar`]).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu_erf(x: __m256) -> __m256 {
        let set = _mm256_set1_ps;
        let xc = _mm256_min_ps(_mm256_max_ps(x, set(GELU_LO)), set(GELU_HI));
        let absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let a = _mm256_mul_ps(_mm256_and_ps(xc, absmask), set(std::f32::consts::FRAC_1_SQRT_2));
        let t = _mm256_div_ps(set(1.0), _mm256_fmadd_ps(set(0.5), a, set(1.0)));
        let mut p = set(ERFC[9]);
        for i in (0..9).rev() {
            p = _mm256_fmadd_ps(p, t, set(ERFC[i]));
        }
        let x2 = _mm256_mul_ps(xc, xc);
        let lo = _mm256_fmsub_ps(xc, xc, x2);
        let h = _mm256_mul_ps(set(-0.5), x2);
        let s = _mm256_add_ps(h, p);
        let err = _mm256_add_ps(_mm256_sub_ps(h, s), p);
        let e = exp(s);
        let corr = _mm256_fnmadd_ps(set(0.5), lo, err);
        let ec = _mm256_fmadd_ps(e, corr, e);
        let half_erfc = _mm256_mul_ps(_mm256_mul_ps(set(0.5), t), ec);
        let pos = _mm256_cmp_ps::<_CMP_GE_OQ>(xc, _mm256_setzero_ps());
        let phi = _mm256_blendv_ps(half_erfc, _mm256_sub_ps(set(1.0), half_erfc), pos);
        let phi = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, set(GELU_LO)), phi);
        // NaN lanes: x·Φ stays NaN since Φ is finite.
        _mm256_mul_ps(x, phi)
    }

    /// Tanh GELU of 8 lanes (see [`super::gelu_tanh_scalar`]).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn gelu_tanh(x: __m256) -> __m256 {
        let set = _mm256_set1_ps;
        let x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        let inner = _mm256_fmadd_ps(set(0.044_715), x3, x);
        let m2u = _mm256_mul_ps(set(-2.0 * SQRT_2_OVER_PI), inner);
        _mm256_div_ps(x, _mm256_add_ps(set(1.0), exp(m2u)))
    }

    /// Sum of the 8 lanes.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// `x[i] = exp(x[i] − m)` in place; returns the sum of the results.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub fn exp_shift_sum(x: &mut [f32], m: f32) -> f32 {
        let n = x.len();
        let mv = _mm256_set1_ps(m);
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n.
            unsafe {
                let e = exp(_mm256_sub_ps(_mm256_loadu_ps(x.as_ptr().add(i)), mv));
                _mm256_storeu_ps(x.as_mut_ptr().add(i), e);
                acc = _mm256_add_ps(acc, e);
            }
            i += 8;
        }
        let mut s = hsum(acc);
        for v in &mut x[i..] {
            *v = exp_scalar(*v - m);
            s += *v;
        }
        s
    }

    /// `exp` of every element of `x` into `y` (equal lengths).
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub fn exp_slice(x: &[f32], y: &mut [f32]) {
        let n = x.len().min(y.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 ≤ n ≤ both lengths; unaligned loads/stores.
            unsafe { _mm256_storeu_ps(y.as_mut_ptr().add(i), exp(_mm256_loadu_ps(x.as_ptr().add(i)))) };
            i += 8;
        }
        for j in i..n {
            y[j] = exp_scalar(x[j]);
        }
    }
}

/// AVX-512F versions (16 lanes) of the exp core. Every function requires a CPU with AVX-512F
/// (checked by the callers through [`super::FusedIsa`]).
#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    use super::*;

    /// [`super::avx2::exp_reduced`] on 16 lanes: for finite `xc`, `(e^r, n)` with
    /// `xc = n·ln 2 + r`, |r| ≤ ln2/2, `n` integer-valued; the caller scales by 2ⁿ.
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn exp_reduced(xc: __m512) -> (__m512, __m512) {
        let set = _mm512_set1_ps;
        let n =
            _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(xc, set(LOG2E)));
        let r = _mm512_fnmadd_ps(n, set(LN2_HI), xc);
        let r = _mm512_fnmadd_ps(n, set(LN2_LO), r);
        let mut p = set(P[0]);
        p = _mm512_fmadd_ps(p, r, set(P[1]));
        p = _mm512_fmadd_ps(p, r, set(P[2]));
        p = _mm512_fmadd_ps(p, r, set(P[3]));
        p = _mm512_fmadd_ps(p, r, set(P[4]));
        p = _mm512_fmadd_ps(p, r, set(P[5]));
        (_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, set(1.0))), n)
    }

    /// `exp` of 16 lanes: the range reduction and polynomial of [`super::avx2::exp`], scaled by
    /// 2ⁿ in one rounding (`vscalefps`, so results in the subnormal range are rounded once).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn exp(x: __m512) -> __m512 {
        let set = _mm512_set1_ps;
        // max_ps returns its second operand for NaN lanes: xc is finite.
        let xc = _mm512_min_ps(_mm512_max_ps(x, set(EXP_FLUSH)), set(EXP_HI));
        let (e, n) = exp_reduced(xc);
        let y = _mm512_maskz_mov_ps(!_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set(EXP_FLUSH)), _mm512_scalef_ps(e, n));
        _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x), x)
    }

    /// Exact GELU of 16 lanes (see [`super::gelu_erf_scalar`]).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn gelu_erf(x: __m512) -> __m512 {
        let set = _mm512_set1_ps;
        let xc = _mm512_min_ps(_mm512_max_ps(x, set(GELU_LO)), set(GELU_HI));
        let a = _mm512_mul_ps(_mm512_abs_ps(xc), set(std::f32::consts::FRAC_1_SQRT_2));
        let t = _mm512_div_ps(set(1.0), _mm512_fmadd_ps(set(0.5), a, set(1.0)));
        let mut p = set(ERFC[9]);
        for i in (0..9).rev() {
            p = _mm512_fmadd_ps(p, t, set(ERFC[i]));
        }
        let x2 = _mm512_mul_ps(xc, xc);
        let lo = _mm512_fmsub_ps(xc, xc, x2);
        let h = _mm512_mul_ps(set(-0.5), x2);
        let s = _mm512_add_ps(h, p);
        let err = _mm512_add_ps(_mm512_sub_ps(h, s), p);
        let e = exp(s);
        let corr = _mm512_fnmadd_ps(set(0.5), lo, err);
        let ec = _mm512_fmadd_ps(e, corr, e);
        let half_erfc = _mm512_mul_ps(_mm512_mul_ps(set(0.5), t), ec);
        let pos = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(xc, _mm512_setzero_ps());
        let phi = _mm512_mask_blend_ps(pos, half_erfc, _mm512_sub_ps(set(1.0), half_erfc));
        let phi = _mm512_maskz_mov_ps(!_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, set(GELU_LO)), phi);
        // NaN lanes: x·Φ stays NaN since Φ is finite.
        _mm512_mul_ps(x, phi)
    }

    /// Tanh GELU of 16 lanes (see [`super::gelu_tanh_scalar`]).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn gelu_tanh(x: __m512) -> __m512 {
        let set = _mm512_set1_ps;
        let x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        let inner = _mm512_fmadd_ps(set(0.044_715), x3, x);
        let m2u = _mm512_mul_ps(set(-2.0 * SQRT_2_OVER_PI), inner);
        _mm512_div_ps(x, _mm512_add_ps(set(1.0), exp(m2u)))
    }

    /// The lanes `i..min(i + 16, n)` as a mask (`i < n`).
    #[inline(always)]
    pub fn lanes(i: usize, n: usize) -> __mmask16 {
        let k = (n - i).min(16);
        if k == 16 { !0 } else { (1u16 << k) - 1 }
    }

    /// `f` applied to every element of `x` into `y` (the shorter length), the last partial
    /// vector through masked loads and stores.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `f` must be safe to call on such a CPU.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub fn map(x: &[f32], y: &mut [f32], f: impl Fn(__m512) -> __m512) {
        let n = x.len().min(y.len());
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let mut i = 0;
        while i < n {
            let mask = lanes(i, n);
            // SAFETY: the mask covers lanes i.. below n, inside both slices; masked lanes are
            // neither read nor written.
            unsafe { _mm512_mask_storeu_ps(yp.add(i), mask, f(_mm512_maskz_loadu_ps(mask, xp.add(i)))) };
            i += 16;
        }
    }

    /// `exp` of every element of `x` into `y` (the shorter length).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub fn exp_slice(x: &[f32], y: &mut [f32]) {
        map(x, y, |v| exp(v));
    }
}
