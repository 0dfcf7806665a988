//! The measured ULP error of the JIT's polynomial transcendentals against a reference, over the
//! whole input range including special values (the figures in docs/jit-math.md).
//!
//! f32 functions are compared with the f64 function of Rust's std (the platform libm) rounded to f32;
//! f64 functions with std's f64 function (itself within 1 ulp, so the bounds below allow for the
//! reference's own error). erf, which std lacks, is compared with the double-double series in
//! this file. Pow and Atan2 also check a table of C99 Annex F special cases written by hand.
//! Run `cargo test --test jit_math -- --nocapture` to see the measured maxima.

use tensorjit::codegen;
use tensorjit::codegen::{Access, ElemTy, Inst, LoopKernel};
use tensorjit::ir::op::{BinaryOp, UnaryOp};

/// An element type under test: its bit-level distance and a few constants.
trait Elem: Copy + PartialEq + std::fmt::Debug + Default + 'static {
    const TY: ElemTy;
    fn to_f64(self) -> f64;
    fn from_f64(x: f64) -> Self;
    fn key(self) -> i64;
    fn is_nan(self) -> bool;
    fn min_positive() -> f64;
}

impl Elem for f32 {
    const TY: ElemTy = ElemTy::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    fn key(self) -> i64 {
        let i = self.to_bits() as i32;
        if i < 0 { i64::from(i32::MIN) - i64::from(i) } else { i64::from(i) }
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn min_positive() -> f64 {
        f32::MIN_POSITIVE as f64
    }
}

impl Elem for f64 {
    const TY: ElemTy = ElemTy::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
    fn key(self) -> i64 {
        let i = self.to_bits() as i64;
        if i < 0 { i64::MIN - i } else { i }
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn min_positive() -> f64 {
        f64::MIN_POSITIVE
    }
}

/// Runs a compiled kernel with `inputs` (each `n` long) and one output of `n` elements.
fn run<T: Elem>(k: &LoopKernel, inputs: &[&[T]], n: usize) -> Vec<T> {
    let c = codegen::compile(k).expect("compile");
    let mut out = vec![T::default(); n];
    let mut ptrs: Vec<*mut u8> = inputs.iter().map(|s| s.as_ptr() as *mut u8).collect();
    ptrs.push(out.as_mut_ptr() as *mut u8);
    // SAFETY: every input slice has n elements, the output has n.
    unsafe { c.run(&ptrs, 0, n) };
    out
}

/// Runs the kernel over the whole slice (vector body + scalar tail: the lengths used here are
/// not multiples of the vector width times the unroll factor) and, for the first 64 elements,
/// once more element by element (scalar tail only); both must agree bit for bit up to NaN.
fn run_both<T: Elem>(k: &LoopKernel, inputs: &[&[T]]) -> Vec<T> {
    let n = inputs[0].len();
    let all = run(k, inputs, n);
    for i in 0..n.min(64) {
        let one: Vec<&[T]> = inputs.iter().map(|s| &s[i..=i]).collect();
        let r = run(k, &one, 1)[0];
        assert!(r == all[i] || (r.is_nan() && all[i].is_nan()), "scalar {r:?} vs vector {:?} at {i}", all[i]);
    }
    all
}

/// Distance in units in the last place (0 when both are NaN).
fn ulps<T: Elem>(a: T, b: T) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a == b {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    (a.key() - b.key()).unsigned_abs()
}

/// Whether the reference is subnormal and the result is a subnormal or zero (§9: tests must not
/// depend on subnormal results).
fn subnormal_case<T: Elem>(got: T, want: f64) -> bool {
    want != 0.0 && want.abs() < T::min_positive() && got.to_f64().abs() <= T::min_positive()
}

/// A small deterministic generator (64-bit LCG, high bits).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 ^ (self.0 >> 29)
    }
}

/// Inputs spanning the whole range of `T`: specials, a dense grid on [−100, 100], a log-spaced
/// sweep of both signs, and random bit patterns of finite values. The length is odd.
fn sweep<T: Elem>() -> Vec<T> {
    let (max, min_pos) =
        if T::TY == ElemTy::F32 { (f32::MAX as f64, f32::MIN_POSITIVE as f64) } else { (f64::MAX, f64::MIN_POSITIVE) };
    let mut v: Vec<f64> = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, min_pos, max, -max, 1.0, -1.0];
    for i in -20000..=20000 {
        v.push(i as f64 * 0.005);
    }
    let (mut x, step) = if T::TY == ElemTy::F32 { (1e-30, 1.0137) } else { (1e-300, 1.011) };
    while x < max / 1.02 {
        v.push(x);
        v.push(-x);
        x *= step;
    }
    let mut r = Lcg(12345);
    for _ in 0..40000 {
        let b = r.next();
        let f = if T::TY == ElemTy::F32 { f32::from_bits((b >> 32) as u32) as f64 } else { f64::from_bits(b) };
        if f.is_finite() {
            v.push(f);
        }
    }
    if v.len().is_multiple_of(2) {
        v.push(0.5);
    }
    v.into_iter().map(T::from_f64).collect()
}

/// Max ULP error of unary `op` over the sweep, and the input where it occurs.
fn max_ulp_unary<T: Elem>(op: UnaryOp, reference: fn(f64) -> f64) -> (u64, T) {
    let k = LoopKernel::elementwise(T::TY, vec![Access::Full], vec![Inst::Load(0), Inst::Unary(op, 0)], vec![1]);
    let xs = sweep::<T>();
    let out = run_both(&k, &[&xs]);
    let mut worst = (0, T::default());
    for (i, &x) in xs.iter().enumerate() {
        let want = reference(x.to_f64());
        if subnormal_case(out[i], want) {
            continue;
        }
        let u = ulps(out[i], T::from_f64(want));
        if u > worst.0 {
            worst = (u, x);
        }
    }
    worst
}

fn check_unary<T: Elem>(name: &str, op: UnaryOp, reference: fn(f64) -> f64, bound: u64) {
    let (u, at) = max_ulp_unary::<T>(op, reference);
    let ty = if T::TY == ElemTy::F32 { "f32" } else { "f64" };
    println!("{name} {ty}: max {u} ulp at x = {at:?}");
    assert!(u <= bound, "{name} {ty}: {u} ulp at {at:?} (bound {bound})");
}

// ---- the erf reference: double-double Taylor series ---------------------------------------

/// A double-double number hi + lo.
#[derive(Clone, Copy)]
struct Dd(f64, f64);

impl Dd {
    fn add(self, o: Dd) -> Dd {
        let s = self.0 + o.0;
        let bb = s - self.0;
        let e = (self.0 - (s - bb)) + (o.0 - bb) + self.1 + o.1;
        let h = s + e;
        Dd(h, e - (h - s))
    }
    fn mul(self, o: Dd) -> Dd {
        let p = self.0 * o.0;
        let e = self.0.mul_add(o.0, -p) + self.0 * o.1 + self.1 * o.0;
        let h = p + e;
        Dd(h, e - (h - p))
    }
    fn div_f(self, d: f64) -> Dd {
        let q = self.0 / d;
        let r = Dd(self.0, self.1).add(Dd(-q * d, -q.mul_add(d, -(q * d))));
        let q2 = r.0 / d;
        let h = q + q2;
        Dd(h, q2 - (h - q))
    }
}

/// erf(x) to well under 1 f64 ulp: for |x| ≤ 3 the Taylor series
/// erf x = 2/√π Σ (−1)ⁿ x^{2n+1} / (n!(2n+1)) in double-double (it loses at most 13 of its
/// 106 bits to cancellation); for |x| > 3, 1 − erfc x with the continued fraction
/// erfc x = e^{−x²}/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …)))) in f64 (erfc < 2.3e−5 there,
/// so its 1e−15 relative error is far below an ulp of the result).
fn erf_ref(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax > 3.0 {
        if ax > 7.0 {
            return 1f64.copysign(x);
        }
        let mut t = ax;
        for k in (1..=400).rev() {
            t = ax + (k as f64 / 2.0) / t;
        }
        let r = 1.0 - (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * t);
        return r.copysign(x);
    }
    let x2 = Dd(x, 0.0).mul(Dd(x, 0.0));
    let mut pow = Dd(x, 0.0); // x^{2n+1}/n!
    let mut sum = Dd(x, 0.0);
    for n in 1..200 {
        pow = pow.mul(x2).div_f(-(n as f64));
        let term = pow.div_f((2 * n + 1) as f64);
        sum = sum.add(term);
        if term.0.abs() < 1e-40 {
            break;
        }
    }
    // 2/√π as double-double.
    let c = Dd(std::f64::consts::FRAC_2_SQRT_PI, 1.6715373322150457e-17);
    let r = c.mul(sum);
    r.0 + r.1
}

// ---- unary tests ----------------------------------------------------------------------------

#[test]
fn exp_error_is_bounded() {
    check_unary::<f32>("exp", UnaryOp::Exp, f64::exp, 2);
    check_unary::<f64>("exp", UnaryOp::Exp, f64::exp, 2);
}

#[test]
fn tanh_error_is_bounded() {
    check_unary::<f32>("tanh", UnaryOp::Tanh, f64::tanh, 4);
    check_unary::<f64>("tanh", UnaryOp::Tanh, f64::tanh, 4);
}

#[test]
fn logistic_error_is_bounded() {
    check_unary::<f32>("logistic", UnaryOp::Logistic, |x| 1.0 / (1.0 + (-x).exp()), 4);
    check_unary::<f64>("logistic", UnaryOp::Logistic, |x| 1.0 / (1.0 + (-x).exp()), 4);
}

#[test]
fn log_error_is_bounded() {
    check_unary::<f32>("log", UnaryOp::Log, f64::ln, 1);
    check_unary::<f64>("log", UnaryOp::Log, f64::ln, 2);
}

#[test]
fn log1p_error_is_bounded() {
    check_unary::<f32>("log1p", UnaryOp::Log1p, f64::ln_1p, 1);
    check_unary::<f64>("log1p", UnaryOp::Log1p, f64::ln_1p, 2);
}

#[test]
fn expm1_error_is_bounded() {
    check_unary::<f32>("expm1", UnaryOp::Expm1, f64::exp_m1, 1);
    check_unary::<f64>("expm1", UnaryOp::Expm1, f64::exp_m1, 3);
}

#[test]
fn erf_error_is_bounded() {
    check_unary::<f32>("erf", UnaryOp::Erf, erf_ref, 1);
    check_unary::<f64>("erf", UnaryOp::Erf, erf_ref, 3);
}

#[test]
fn sin_error_is_bounded() {
    check_unary::<f32>("sin", UnaryOp::Sin, f64::sin, 1);
    check_unary::<f64>("sin", UnaryOp::Sin, f64::sin, 2);
}

#[test]
fn cos_error_is_bounded() {
    check_unary::<f32>("cos", UnaryOp::Cos, f64::cos, 1);
    check_unary::<f64>("cos", UnaryOp::Cos, f64::cos, 2);
}

/// f64 arguments where the argument reduction needs the most bits: 6381956970095103·2^797
/// (within about 2^−61 of a multiple of π/2; the hardest f64 case tabulated in J.-M. Muller's
/// *Elementary Functions*), f64::MAX, 2^1000, 1e22, and π/2, π, 2π rounded to f64.
/// Reference: std, except where noted.
#[test]
fn sin_cos_hard_reductions() {
    let worst = 6381956970095103.0 * 2f64.powi(797);
    let xs: Vec<f64> = vec![
        worst,
        -worst,
        std::f64::consts::FRAC_PI_2,
        std::f64::consts::PI,
        2.0 * std::f64::consts::PI,
        1e22,
        f64::MAX,
        5.319372648326541e255,
        2f64.powi(1000),
    ];
    for op in [UnaryOp::Sin, UnaryOp::Cos] {
        let k =
            LoopKernel::elementwise(ElemTy::F64, vec![Access::Full], vec![Inst::Load(0), Inst::Unary(op, 0)], vec![1]);
        let out = run_both(&k, &[&xs]);
        for (i, &x) in xs.iter().enumerate() {
            let mut want = if op == UnaryOp::Sin { x.sin() } else { x.cos() };
            if x.abs() == worst && op == UnaryOp::Cos {
                // The libm behind std is 8 ulp off here (−4.68716592425462e−19); the correctly
                // rounded value, from mpmath at 1500 bits, is:
                want = -4.687165924254628e-19;
            }
            let u = ulps(out[i], want);
            println!("{op:?}({x:e}) f64: {u} ulp");
            assert!(u <= 2, "{op:?}({x:e}) = {}, want {want} ({u} ulp)", out[i]);
        }
    }
}

/// Special values worked by hand (C99 Annex F and the spec, §4.6 / §9).
#[test]
fn unary_special_values() {
    let inf = f64::INFINITY;
    let cases: &[(UnaryOp, f64, f64)] = &[
        (UnaryOp::Log, 0.0, -inf),
        (UnaryOp::Log, -0.0, -inf),
        (UnaryOp::Log, -1.0, f64::NAN),
        (UnaryOp::Log, inf, inf),
        (UnaryOp::Log, 1.0, 0.0),
        (UnaryOp::Log1p, -1.0, -inf),
        (UnaryOp::Log1p, -2.0, f64::NAN),
        (UnaryOp::Log1p, -0.0, -0.0),
        (UnaryOp::Log1p, inf, inf),
        (UnaryOp::Expm1, -0.0, -0.0),
        (UnaryOp::Expm1, -inf, -1.0),
        (UnaryOp::Expm1, inf, inf),
        (UnaryOp::Expm1, 1e-20, 1e-20),
        (UnaryOp::Exp, -inf, 0.0),
        (UnaryOp::Exp, inf, inf),
        (UnaryOp::Exp, 0.0, 1.0),
        (UnaryOp::Erf, inf, 1.0),
        (UnaryOp::Erf, -inf, -1.0),
        (UnaryOp::Erf, -0.0, -0.0),
        (UnaryOp::Sin, inf, f64::NAN),
        (UnaryOp::Sin, -inf, f64::NAN),
        (UnaryOp::Sin, -0.0, -0.0),
        (UnaryOp::Cos, inf, f64::NAN),
        (UnaryOp::Cos, -0.0, 1.0),
        (UnaryOp::Tanh, inf, 1.0),
        (UnaryOp::Tanh, -inf, -1.0),
        (UnaryOp::Tanh, -0.0, -0.0),
        (UnaryOp::Logistic, inf, 1.0),
        (UnaryOp::Logistic, -inf, 0.0),
        (UnaryOp::Logistic, 0.0, 0.5),
    ];
    for &(op, x, want) in cases {
        for nan_in in [false, true] {
            let x = if nan_in { f64::NAN } else { x };
            let want = if nan_in { f64::NAN } else { want };
            check_exact::<f32>(op, x, want);
            check_exact::<f64>(op, x, want);
        }
    }
}

/// `op(x)` in `T`, run in a vector body (x repeated 17 times) and in the scalar tail, must be
/// `want` exactly (same sign of zero; any NaN for NaN).
fn check_exact<T: Elem>(op: UnaryOp, x: f64, want: f64) {
    let k = LoopKernel::elementwise(T::TY, vec![Access::Full], vec![Inst::Load(0), Inst::Unary(op, 0)], vec![1]);
    let xs = vec![T::from_f64(x); 17];
    for r in run_both(&k, &[&xs]) {
        let got = r.to_f64();
        let ok = if want.is_nan() { got.is_nan() } else { got.to_bits() == T::from_f64(want).to_f64().to_bits() };
        assert!(ok, "{op:?}({x}) in {:?} = {got}, want {want}", T::TY);
    }
}

// ---- binary ops -----------------------------------------------------------------------------

fn binary_kernel(ty: ElemTy, op: BinaryOp) -> LoopKernel {
    LoopKernel::elementwise(
        ty,
        vec![Access::Full, Access::Full],
        vec![Inst::Load(0), Inst::Load(1), Inst::Binary(op, 0, 1)],
        vec![2],
    )
}

/// Max ULP error of binary `op(a, b)` over the product of `xs` and `ys`.
fn max_ulp_binary<T: Elem>(op: BinaryOp, xs: &[f64], ys: &[f64], reference: fn(f64, f64) -> f64) -> (u64, T, T) {
    let mut a = vec![];
    let mut b = vec![];
    for &x in xs {
        for &y in ys {
            a.push(T::from_f64(x));
            b.push(T::from_f64(y));
        }
    }
    if a.len().is_multiple_of(2) {
        a.push(T::from_f64(0.5));
        b.push(T::from_f64(0.5));
    }
    let out = run_both(&binary_kernel(T::TY, op), &[&a, &b]);
    let mut worst = (0, T::default(), T::default());
    for i in 0..a.len() {
        let want = reference(a[i].to_f64(), b[i].to_f64());
        if subnormal_case(out[i], want) {
            continue;
        }
        let u = ulps(out[i], T::from_f64(want));
        if u > worst.0 {
            worst = (u, a[i], b[i]);
        }
    }
    worst
}

/// Values of both signs from 1e−300 (1e−40 for f32) to the top of the range, log-spaced,
/// plus the specials and small integers and halves.
fn grid_1d(f32_range: bool, n: usize) -> Vec<f64> {
    let (lo, hi): (f64, f64) = if f32_range { (1e-40, 3e38) } else { (1e-300, 1e300) };
    let mut v = vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0];
    let r = (hi / lo).ln() / n as f64;
    for i in 0..=n {
        let x = lo * (r * i as f64).exp();
        v.push(x);
        v.push(-x);
    }
    for i in -40..=40 {
        v.push(i as f64 * 0.25);
        v.push(1.0 + i as f64 * 1e-3);
    }
    v
}

fn pow_grid<T: Elem>(bound: u64) {
    let f32r = T::TY == ElemTy::F32;
    let xs = grid_1d(f32r, 120);
    let ys = grid_1d(f32r, 120);
    // Exponents up to ±1e300 overflow everything; the interesting y are moderate ones.
    let ys: Vec<f64> = ys.into_iter().filter(|y| y.abs() < 2000.0 || !y.is_finite()).collect();
    let (u, a, b) = max_ulp_binary::<T>(BinaryOp::Pow, &xs, &ys, f64::powf);
    let ty = if f32r { "f32" } else { "f64" };
    println!("pow {ty}: max {u} ulp at x = {a:?}, y = {b:?}");
    assert!(u <= bound, "pow {ty}: {u} ulp at ({a:?}, {b:?})");
    // Dense near 1 with large exponents (where ln x must be carried in extra precision).
    let xs: Vec<f64> = (0..400).map(|i| 1.0 + (i as f64 - 200.0) * 1.37e-4).collect();
    let ys: Vec<f64> = (0..60).map(|i| (i as f64 - 30.0) * 97.3).collect();
    let (u, a, b) = max_ulp_binary::<T>(BinaryOp::Pow, &xs, &ys, f64::powf);
    println!("pow {ty} near 1: max {u} ulp at x = {a:?}, y = {b:?}");
    assert!(u <= bound, "pow {ty} near 1: {u} ulp at ({a:?}, {b:?})");
}

#[test]
fn pow_error_is_bounded() {
    pow_grid::<f32>(1);
    pow_grid::<f64>(2);
}

fn atan2_grid<T: Elem>(bound: u64) {
    let f32r = T::TY == ElemTy::F32;
    let g = grid_1d(f32r, 150);
    let (u, a, b) = max_ulp_binary::<T>(BinaryOp::Atan2, &g, &g, f64::atan2);
    let ty = if f32r { "f32" } else { "f64" };
    println!("atan2 {ty}: max {u} ulp at y = {a:?}, x = {b:?}");
    assert!(u <= bound, "atan2 {ty}: {u} ulp at ({a:?}, {b:?})");
}

#[test]
fn atan2_error_is_bounded() {
    atan2_grid::<f32>(1);
    atan2_grid::<f64>(2);
}

/// `op(a, b)` in `T` (vector body and scalar tail) must be `want` exactly (sign of zero too).
fn check_exact2<T: Elem>(op: BinaryOp, a: f64, b: f64, want: f64) {
    let xs = vec![T::from_f64(a); 13];
    let ys = vec![T::from_f64(b); 13];
    for r in run_both(&binary_kernel(T::TY, op), &[&xs, &ys]) {
        let got = r.to_f64();
        let want_t = T::from_f64(want).to_f64();
        let ok = if want.is_nan() { got.is_nan() } else { got.to_bits() == want_t.to_bits() };
        assert!(ok, "{op:?}({a}, {b}) in {:?} = {got}, want {want_t}", T::TY);
    }
}

/// C99 Annex F F.9.4.4 (pow), worked by hand.
#[test]
fn pow_special_cases() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let cases: &[(f64, f64, f64)] = &[
        // pow(x, ±0) = 1 for any x, even NaN.
        (nan, 0.0, 1.0),
        (nan, -0.0, 1.0),
        (inf, 0.0, 1.0),
        (-3.0, -0.0, 1.0),
        (0.0, 0.0, 1.0),
        // pow(+1, y) = 1 for any y, even NaN.
        (1.0, nan, 1.0),
        (1.0, inf, 1.0),
        (1.0, -inf, 1.0),
        (1.0, 12345.5, 1.0),
        // pow(−1, ±Inf) = 1.
        (-1.0, inf, 1.0),
        (-1.0, -inf, 1.0),
        // Negative finite base, non-integer finite exponent: NaN.
        (-8.0, 1.0 / 3.0, nan),
        (-2.0, 0.5, nan),
        (-0.5, -1.5, nan),
        // Other NaN operands.
        (nan, 1.0, nan),
        (2.0, nan, nan),
        // pow(±0, y): odd negative integer → ±Inf; other negative (incl. −Inf) → +Inf;
        // odd positive integer → ±0; other positive → +0.
        (0.0, -1.0, inf),
        (-0.0, -1.0, -inf),
        (-0.0, -3.0, -inf),
        (-0.0, -2.0, inf),
        (-0.0, -0.5, inf),
        (0.0, -inf, inf),
        (-0.0, -inf, inf),
        (0.0, 3.0, 0.0),
        (-0.0, 3.0, -0.0),
        (-0.0, 2.0, 0.0),
        (-0.0, 0.5, 0.0),
        (-0.0, inf, 0.0),
        // pow(x, −Inf): +Inf for |x| < 1, +0 for |x| > 1; pow(x, +Inf) the reverse.
        (0.5, -inf, inf),
        (-0.5, -inf, inf),
        (2.0, -inf, 0.0),
        (-2.0, -inf, 0.0),
        (0.5, inf, 0.0),
        (-0.5, inf, 0.0),
        (2.0, inf, inf),
        (-2.0, inf, inf),
        // pow(−Inf, y): odd negative integer → −0, other negative → +0; odd positive → −Inf,
        // other positive → +Inf.
        (-inf, -3.0, -0.0),
        (-inf, -2.0, 0.0),
        (-inf, -0.5, 0.0),
        (-inf, 3.0, -inf),
        (-inf, 2.0, inf),
        (-inf, 0.5, inf),
        // pow(+Inf, y): +0 for y < 0, +Inf for y > 0.
        (inf, -2.0, 0.0),
        (inf, 0.5, inf),
        // Exact ordinary cases.
        (-2.0, 3.0, -8.0),
        (-2.0, 2.0, 4.0),
        (2.0, 10.0, 1024.0),
        (4.0, 0.5, 2.0),
        (2.0, -1.0, 0.5),
        (-8.0, -1.0, -0.125),
        (10.0, 2.0, 100.0),
        // Overflow and underflow.
        (10.0, 400.0, inf),
        (-10.0, 401.0, -inf),
        (10.0, -400.0, 0.0),
        (-10.0, -401.0, -0.0),
    ];
    for &(x, y, want) in cases {
        check_exact2::<f64>(BinaryOp::Pow, x, y, want);
        // In f32, 10^±400 over/underflows just the same.
        check_exact2::<f32>(BinaryOp::Pow, x, y, want);
    }
}

/// C99 Annex F F.9.1.4 (atan2(y, x)), worked by hand.
#[test]
fn atan2_special_cases() {
    use std::f64::consts::{FRAC_PI_2 as H, FRAC_PI_4 as Q, PI};
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let cases: &[(f64, f64, f64)] = &[
        (0.0, 0.0, 0.0),
        (-0.0, 0.0, -0.0),
        (0.0, -0.0, PI),
        (-0.0, -0.0, -PI),
        (0.0, -1.0, PI),
        (-0.0, -1.0, -PI),
        (0.0, 1.0, 0.0),
        (-0.0, 1.0, -0.0),
        (1.0, 0.0, H),
        (1.0, -0.0, H),
        (-1.0, 0.0, -H),
        (-1.0, -0.0, -H),
        (1.0, -inf, PI),
        (-1.0, -inf, -PI),
        (1.0, inf, 0.0),
        (-1.0, inf, -0.0),
        (inf, 5.0, H),
        (-inf, 5.0, -H),
        (inf, -5.0, H),
        (inf, inf, Q),
        (-inf, inf, -Q),
        (inf, -inf, 3.0 * Q),
        (-inf, -inf, -3.0 * Q),
        (1.0, 1.0, Q),
        (-1.0, -1.0, -3.0 * Q),
        (nan, 1.0, nan),
        (1.0, nan, nan),
        (nan, nan, nan),
    ];
    for &(y, x, want) in cases {
        check_exact2::<f64>(BinaryOp::Atan2, y, x, want);
        check_exact2::<f32>(BinaryOp::Atan2, y, x, want);
    }
}
