//! Compliance cases for FFT (analytic spectra) and RNGBitGenerator (Philox-4x32-10, ops.md §4.8,
//! §4.10, §11).

use std::f64::consts::PI;
use std::sync::Arc;

use num_complex::{Complex32, Complex64};

use super::*;
use crate::ir::op::FftType;

fn c(re: f32, im: f32) -> Complex32 {
    Complex32::new(re, im)
}

fn fft1(b: &Arc<dyn Backend>, x: Buffer, ty: FftType, lengths: &[i64]) -> Result<Buffer, String> {
    exec1(b, &[x], |f, p| f.fft(p[0], ty, lengths))
}

/// Forward FFT of length 4: δ → ones, δ₁ → `[1,−i,−1,i]`, ones → `[4,0,0,0]` (one batch row each).
pub fn fft_forward_1d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Complex64]);
    let x = [
        c(1., 0.),
        c(0., 0.),
        c(0., 0.),
        c(0., 0.),
        c(0., 0.),
        c(1., 0.),
        c(0., 0.),
        c(0., 0.),
        c(1., 0.),
        c(1., 0.),
        c(1., 0.),
        c(1., 0.),
    ];
    let out = fft1(b, t(&x, &[3, 4]), FftType::Forward, &[4])?;
    let want = [
        (1., 0.),
        (1., 0.),
        (1., 0.),
        (1., 0.),
        (1., 0.),
        (0., -1.),
        (-1., 0.),
        (0., 1.),
        (4., 0.),
        (0., 0.),
        (0., 0.),
        (0., 0.),
    ];
    expect_complex::<Complex32>("forward", &out, &[3, 4], &want, 1e-6, 0.0)
}

/// Inverse FFT scales by 1/N: `[4,0,0,0]` → ones, `[1,−i,−1,i]` → δ₁.
pub fn fft_inverse_1d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Complex64]);
    let x = [c(4., 0.), c(0., 0.), c(0., 0.), c(0., 0.), c(1., 0.), c(0., -1.), c(-1., 0.), c(0., 1.)];
    let out = fft1(b, t(&x, &[2, 4]), FftType::Inverse, &[4])?;
    let want = [(1., 0.), (1., 0.), (1., 0.), (1., 0.), (0., 0.), (1., 0.), (0., 0.), (0., 0.)];
    expect_complex::<Complex32>("inverse", &out, &[2, 4], &want, 1e-6, 0.0)
}

/// 2-D FFT over the last two axes: `[[1,2],[3,4]]` → `[[10,−2],[−4,0]]`.
pub fn fft_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Complex64]);
    let x = [c(1., 0.), c(2., 0.), c(3., 0.), c(4., 0.)];
    let out = fft1(b, t(&x, &[2, 2]), FftType::Forward, &[2, 2])?;
    expect_complex::<Complex32>("fft2", &out, &[2, 2], &[(10., 0.), (-2., 0.), (-4., 0.), (0., 0.)], 1e-6, 0.0)
}

/// C128 length-3 FFT: `[1,2,3]` → `[6, −1.5+0.866i, −1.5−0.866i]`; `[0,0,1]` → `[1, ω², ω]`.
pub fn fft_batched_f64(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Complex128]);
    let z = |re: f64| Complex64::new(re, 0.);
    let x = [z(1.), z(2.), z(3.), z(0.), z(0.), z(1.)];
    let out = fft1(b, t(&x, &[2, 3]), FftType::Forward, &[3])?;
    let h = 3f64.sqrt() / 2.;
    let want = [(6., 0.), (-1.5, h), (-1.5, -h), (1., 0.), (-0.5, h), (-0.5, -h)];
    expect_complex::<Complex64>("c128", &out, &[2, 3], &want, 1e-12, 0.0)
}

/// Real FFT F32 `[2,8]` → C64 `[2,5]`: cos(2πn/8) → `[0,4,0,0,0]`, ones → `[8,0,0,0,0]`.
pub fn rfft(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Float32, Complex64]);
    let mut x: Vec<f32> = (0..8).map(|n| (2. * PI * n as f64 / 8.).cos() as f32).collect();
    x.extend([1f32; 8]);
    let out = fft1(b, t(&x, &[2, 8]), FftType::ForwardReal, &[8])?;
    let mut want = vec![(0., 0.), (4., 0.), (0., 0.), (0., 0.), (0., 0.)];
    want.extend([(8., 0.), (0., 0.), (0., 0.), (0., 0.), (0., 0.)]);
    expect_complex::<Complex32>("rfft", &out, &[2, 5], &want, 1e-5, 0.0)
}

/// Inverse real FFT C64 `[3,5]` → F32 `[3,8]`; the imaginary parts of the DC and Nyquist bins are
/// ignored.
pub fn irfft(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Float32, Complex64]);
    let z = c(0., 0.);
    let x = [c(8., 0.), z, z, z, z, z, c(4., 0.), z, z, z, c(8., 5.), z, z, z, c(0., 3.)];
    let out = fft1(b, t(&x, &[3, 5]), FftType::InverseReal, &[8])?;
    let mut want = vec![1.0; 8];
    want.extend((0..8).map(|n| (2. * PI * n as f64 / 8.).cos()));
    want.extend([1.0; 8]);
    expect_close::<f32>("irfft", &out, &[3, 8], &want, 1e-6, 0.0)
}

/// Lengths that do not match the transformed dims are rejected.
pub fn fft_length_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [FFT], [Complex64]);
    let x = || vec![v(&[c(1., 0.); 4])];
    expect_error1(b, "forward length 8 on 4", &x(), |f, p| f.fft(p[0], FftType::Forward, &[8]))?;
    expect_error1(b, "irfft length 8 needs 5 bins", &x(), |f, p| f.fft(p[0], FftType::InverseReal, &[8]))
}

fn rng(b: &Arc<dyn Backend>, state: &[u64], out: Shape) -> Result<(Buffer, Buffer), String> {
    let mut o = exec(b, &[v(state)], |f, p| {
        let (s, x) = f.rng_bit_generator(p[0], &out)?;
        Ok(vec![s, x])
    })?;
    let x = o.remove(1);
    Ok((o.remove(0), x))
}

/// The first Philox-4x32-10 words for key 0, counter 0 (verified against jax, §4.10).
const PHILOX_0: [u32; 6] = [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8, 0xf8e4cca4, 0x5cb200db];

/// State `[0,0,0]`, U32 `[6]` → the §4.10 words, new state `[0,2,0]`; key 42, counter 7 → words
/// of Philox(key 42, counter 7), new state `[42,8,0]`.
pub fn rng_philox_example_u32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Uint32]);
    let (s, x) = rng(b, &[0, 0, 0], shape(DType::Uint32, &[6]))?;
    expect("values", &x, &[6], &PHILOX_0)?;
    expect("new state", &s, &[3], &[0u64, 2, 0])?;
    let (s, x) = rng(b, &[42, 7, 0], shape(DType::Uint32, &[2, 2]))?;
    expect("key 42 values", &x, &[2, 2], &[0x5bbd83b1u32, 0x68784c85, 0x172067aa, 0x2e6b75b7])?;
    expect("key 42 state", &s, &[3], &[42u64, 8, 0])
}

/// The jax form of the state, U64[2] = `[key, counter]`: `[0,0]` → same words, new state `[0,2]`.
pub fn rng_two_word_state(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Uint32]);
    let (s, x) = rng(b, &[0, 0], shape(DType::Uint32, &[6]))?;
    expect("values", &x, &[6], &PHILOX_0)?;
    expect("new state", &s, &[2], &[0u64, 2])
}

/// 64-bit elements take two words (`w₂ⱼ | w₂ⱼ₊₁<<32`); 8/16-bit elements the low bits of one word.
pub fn rng_u64_and_small_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64]);
    let (s, x) = rng(b, &[0, 0, 0], shape(DType::Uint64, &[3]))?;
    expect("u64", &x, &[3], &[0xe169c58d6627e8d5u64, 0x9b00dbd8bc57ac4c, 0x5cb200dbf8e4cca4])?;
    expect("u64 state", &s, &[3], &[0u64, 2, 0])?;
    if has_dtype(b, DType::Uint8) {
        let (s, x) = rng(b, &[0, 0, 0], shape(DType::Uint8, &[6]))?;
        expect("u8", &x, &[6], &[0xd5u8, 0x8d, 0x4c, 0xd8, 0xa4, 0xdb])?;
        expect("u8 state", &s, &[3], &[0u64, 2, 0])?;
    }
    if has_dtype(b, DType::Uint16) {
        let (_, x) = rng(b, &[0, 0, 0], shape(DType::Uint16, &[2]))?;
        expect("u16", &x, &[2], &[0xe8d5u16, 0xc58d])?;
    }
    Ok(())
}

/// Float dtypes take the raw bits: F32 element j = `f32::from_bits(wⱼ)`.
pub fn rng_float_bits(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Float32]);
    let (_, x) = rng(b, &[0, 0, 0], shape(DType::Float32, &[4]))?;
    let want: Vec<f32> = PHILOX_0[..4].iter().map(|&w| f32::from_bits(w)).collect();
    expect_bits("f32", &x, &[4], &want)?;
    if has_dtype(b, DType::Float64) {
        let (_, x) = rng(b, &[0, 0, 0], shape(DType::Float64, &[1]))?;
        expect_bits("f64", &x, &[1], &[f64::from_bits(0xe169c58d6627e8d5)])?;
    }
    Ok(())
}

/// Chaining: 12 words from `[0,0,0]` equal 8 words from `[0,0,0]` followed by 4 words from the
/// returned state.
pub fn rng_state_chaining(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Uint32]);
    let (_, all) = rng(b, &[0, 0, 0], shape(DType::Uint32, &[12]))?;
    let all = get::<u32>("12 words", &all, &[12])?;
    check(all[..6] == PHILOX_0, || format!("first words {:x?}", &all[..6]))?;
    let (s1, first) = rng(b, &[0, 0, 0], shape(DType::Uint32, &[8]))?;
    expect("first 8", &first, &[8], &all[..8])?;
    let s1 = get::<u64>("state", &s1, &[3])?;
    let (_, next) = rng(b, &s1, shape(DType::Uint32, &[4]))?;
    expect("next 4", &next, &[4], &all[8..])
}

/// The 128-bit counter carries: `[0, 2⁶⁴−1, 0]` with 8 words → new state `[0,1,1]`, and words
/// 4..8 equal the first words of state `[0,0,1]`.
pub fn rng_counter_carry(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Uint32]);
    let (s, x) = rng(b, &[0, u64::MAX, 0], shape(DType::Uint32, &[8]))?;
    expect("new state", &s, &[3], &[0u64, 1, 1])?;
    let x = get::<u32>("carry words", &x, &[8])?;
    let (_, y) = rng(b, &[0, 0, 1], shape(DType::Uint32, &[4]))?;
    expect("block after carry", &y, &[4], &x[4..])?;
    expect("block after carry (value)", &y, &[4], &[0x844515e1u32, 0xf08d6eaa, 0x0f19c053, 0x83f875f0])
}

fn histogram_ok(what: &str, fractions: impl Iterator<Item = f64>) -> CaseResult {
    let mut bins = [0usize; 10];
    let mut n = 0usize;
    for u in fractions {
        bins[((u * 10.0) as usize).min(9)] += 1;
        n += 1;
    }
    let expected = n as f64 / 10.0;
    for (i, &c) in bins.iter().enumerate() {
        if (c as f64 - expected).abs() > 0.1 * expected {
            return Err(format!("{what}: bin {i} has {c} of {n} samples (expected {expected} ± 10%): {bins:?}"));
        }
    }
    Ok(())
}

/// 100 000 U32 samples from `[0,0,0]` fill 10 equal bins within ±10%.
pub fn rng_uniform_histogram_u32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64, Uint32]);
    let (_, x) = rng(b, &[0, 0, 0], shape(DType::Uint32, &[100_000]))?;
    let x = get::<u32>("u32", &x, &[100_000])?;
    histogram_ok("u32", x.iter().map(|&w| w as f64 / 4294967296.0))
}

/// 100 000 U64 samples from `[0,0,0]` fill 10 equal bins within ±10%.
pub fn rng_uniform_histogram_u64(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [RNGBitGenerator], [Uint64]);
    let (_, x) = rng(b, &[0, 0, 0], shape(DType::Uint64, &[100_000]))?;
    let x = get::<u64>("u64", &x, &[100_000])?;
    histogram_ok("u64", x.iter().map(|&w| (w >> 11) as f64 / 9007199254740992.0))
}
