//! Exponential and logarithm family in f64 lanes: exp, expm1, log (also as double-f64),
//! log1p, logistic, tanh and pow.

use super::*;

/// ln 2 split so that `n·LN2_HI` is exact for |n| < 2^21 (the classic fdlibm split).
pub(super) const LN2_HI: f64 = 0.6931471803691238;
pub(super) const LN2_LO: f64 = 1.9082149292705877e-10;
/// ln(f64::MAX) and the input below which e^x is under half the smallest subnormal.
pub(super) const EXP_HI: f64 = 709.782712893384;
pub(super) const EXP_LO: f64 = -745.1332191019412;

/// 1/k! for k = 2..=13: e^r − 1 = r + r²·Σ EXP_Q[j]·r^j (Taylor; the first dropped term,
/// r^14/14!, is below 2^−57 relative for |r| ≤ ln2/2).
pub(super) const EXP_Q: [f64; 12] = [
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
    1.0 / 40320.0,
    1.0 / 362880.0,
    1.0 / 3628800.0,
    1.0 / 39916800.0,
    1.0 / 479001600.0,
    1.0 / 6227020800.0,
];

/// 2/(2k+1) for k = 2..=13: 2·atanh(s) = 2s + (2/3)s³ + s⁵·Σ LOG_R[j]·s^{2j} (Taylor; |s| ≤
/// 0.1716, the first dropped term is below 2^−66 relative).
pub(super) const LOG_R: [f64; 12] = [
    2.0 / 5.0,
    2.0 / 7.0,
    2.0 / 9.0,
    2.0 / 11.0,
    2.0 / 13.0,
    2.0 / 15.0,
    2.0 / 17.0,
    2.0 / 19.0,
    2.0 / 21.0,
    2.0 / 23.0,
    2.0 / 25.0,
    2.0 / 27.0,
];
/// 2/3 as double-f64.
pub(super) const TWO_THIRDS_H: f64 = 0.6666666666666666;
pub(super) const TWO_THIRDS_L: f64 = 3.700743415417188e-17;

impl Emit<'_, '_> {
    // ---- f64 lanes ------------------------------------------------------------------------

    /// Cody–Waite reduction of `x` clamped to `[lo, hi]`: `x = n·ln2 + r` with `n` integral
    /// (as a float) and |r| ≤ ln2/2, `ln2` split in two parts so `r` is exact. `lo`, `hi` are
    /// constants, neither NaN nor zero.
    pub(super) fn reduce_ln2_d(&mut self, x: Value, lo: Value, hi: Value) -> (Value, Value) {
        let xc = self.max_k(x, lo);
        let xc = self.min_k(xc, hi);
        let log2e = self.cf(std::f64::consts::LOG2_E);
        let t = self.b.ins().fmul(xc, log2e);
        let n = self.b.ins().nearest(t);
        let nn = self.neg(n);
        let l1 = self.cf(LN2_HI);
        let l2 = self.cf(LN2_LO);
        let r = self.fma(nn, l1, xc);
        (n, self.fma(nn, l2, r))
    }

    /// e^(x + xl), `xl` an optional low part (|xl| ≤ 2^−40·|x|, from pow). `x = n·ln2 + r`
    /// (Cody–Waite), e^r − 1 by its Taylor polynomial to r^13, scale 2^n in two halves (so
    /// subnormal results are produced, not flushed). Above ln(MAX) +Inf, below −745.13 zero, NaN
    /// propagates.
    pub(super) fn exp_d(&mut self, x: Value, xl: Option<Value>) -> Value {
        let lo = self.cf(EXP_LO);
        let hi = self.cf(EXP_HI);
        let (n, mut r) = self.reduce_ln2_d(x, lo, hi);
        if let Some(xl) = xl {
            r = self.b.ins().fadd(r, xl);
        }
        let q = self.polyd(r, &EXP_Q);
        let r2 = self.b.ins().fmul(r, r);
        let em = self.fma(r2, q, r);
        let one = self.cf(1.0);
        let p = self.b.ins().fadd(one, em);
        let y = self.scale_d(p, n);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, zero, y);
        self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y)
    }

    /// e^x − 1: with `x = n·ln2 + r`, `2^n·(expm1(r) + 1 − 2^−n)`, and `expm1(r)` itself when
    /// n = 0 (|x| ≤ ln2/2, no cancellation). −1 below −40, +Inf above ln(MAX), ±0 kept.
    pub(super) fn expm1_d(&mut self, x: Value) -> Value {
        let lo = self.cf(-40.0);
        let hi = self.cf(EXP_HI);
        let (n, r) = self.reduce_ln2_d(x, lo, hi);
        let q = self.polyd(r, &EXP_Q);
        let r2 = self.b.ins().fmul(r, r);
        let em = self.fma(r2, q, r);
        // 1 − 2^−n, with n clamped to ±60 (beyond, 2^−n is negligible or the result is −1).
        let c60 = self.cf(60.0);
        let m60 = self.cf(-60.0);
        let nc = self.min_k(n, c60);
        let nc = self.max_k(nc, m60);
        let nneg = self.neg(nc);
        let t = self.pow2_d(nneg);
        let one = self.cf(1.0);
        let om = self.b.ins().fsub(one, t);
        let s = self.b.ins().fadd(em, om);
        let big = self.scale_d(s, n);
        let zero = self.cf(0.0);
        let y = self.select_cmp(FloatCC::Equal, n, zero, em, big);
        let m1 = self.cf(-1.0);
        let inf = self.cf(f64::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, m1, y);
        let y = self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y);
        self.select_cmp(FloatCC::Equal, x, zero, x, y)
    }

    /// ln x as a double-f64 `(hi, lo)` for finite x > 0 (garbage otherwise; callers select the
    /// special values). `x = 2^k·m`, m ∈ [√½, √2), f = m − 1, s = f/(2 + f) carried as s + sl,
    /// ln m = 2s + (2/3)s³ (double-f64) + s⁵·R(s²); relative error about 2^−66.
    pub(super) fn log_dd(&mut self, x: Value) -> (Value, Value) {
        // Subnormals: scale by 2^54 first.
        let tiny = self.mask_c(FloatCC::LessThan, x, f64::MIN_POSITIVE);
        let k54 = self.cf(18014398509481984.0);
        let xs0 = self.b.ins().fmul(x, k54);
        let xs = self.blend(tiny, xs0, x);
        let zero = self.cf(0.0);
        let kadj = self.blend_c(tiny, -54.0, zero);
        // u = bits(x) − bits(√½) + 2^62 is positive; its top bits are k + 1024 and its mantissa
        // bits plus bits(√½) give m ∈ [√½, √2).
        let c = std::f64::consts::FRAC_1_SQRT_2.to_bits() as i64;
        let xb = self.bits(xs);
        let off = self.ci(c - (1i64 << 62));
        let u = self.b.ins().isub(xb, off);
        let kk = self.b.ins().ushr_imm(u, 52);
        let magic = self.ci(MAGIC.to_bits() as i64);
        let kb = self.b.ins().iadd(kk, magic);
        let kf = self.bits_to_float(kb);
        let kmag = self.cf(MAGIC + 1024.0);
        let kf = self.b.ins().fsub(kf, kmag);
        let kf = self.b.ins().fadd(kf, kadj);
        let mmask = self.ci((1i64 << 52) - 1);
        let mb = self.b.ins().band(u, mmask);
        let cc = self.ci(c);
        let mb = self.b.ins().iadd(mb, cc);
        let m = self.bits_to_float(mb);
        let one = self.cf(1.0);
        let two = self.cf(2.0);
        let f = self.b.ins().fsub(m, one);
        // s = f / d, d = 2 + f = dh + dl exactly.
        let dh = self.b.ins().fadd(two, f);
        let t = self.b.ins().fsub(dh, two);
        let dl = self.b.ins().fsub(f, t);
        let sh = self.b.ins().fdiv(f, dh);
        let nsh = self.neg(sh);
        let rem = self.fma(nsh, dh, f);
        let sdl = self.b.ins().fmul(sh, dl);
        let rem = self.b.ins().fsub(rem, sdl);
        let sl = self.b.ins().fdiv(rem, dh);
        // s³ as a double-f64, times 2/3.
        let s2h = self.b.ins().fmul(sh, sh);
        let ns2h = self.neg(s2h);
        let s2l = self.fma(sh, sh, ns2h);
        let s3h = self.b.ins().fmul(s2h, sh);
        let ns3h = self.neg(s3h);
        let s3l = self.fma(s2h, sh, ns3h);
        let s3l = self.fma(s2l, sh, s3l);
        let ch = self.cf(TWO_THIRDS_H);
        let cl = self.cf(TWO_THIRDS_L);
        let t1h = self.b.ins().fmul(ch, s3h);
        let nt1h = self.neg(t1h);
        let t1l = self.fma(ch, s3h, nt1h);
        let t1l = self.fma(cl, s3h, t1l);
        let t1l = self.fma(ch, s3l, t1l);
        // s⁵·R(s²)
        let rp = self.polyd(s2h, &LOG_R);
        let s5 = self.b.ins().fmul(s3h, s2h);
        let r = self.b.ins().fmul(s5, rp);
        // k·ln2 + 2s + t1 + (2 sl + t1l + r + k·ln2_lo)
        let l1 = self.cf(LN2_HI);
        let l2 = self.cf(LN2_LO);
        let a = self.b.ins().fmul(kf, l1);
        let s2 = self.b.ins().fadd(sh, sh);
        let (h1, e1) = self.two_sum(a, s2);
        let (h2, e2) = self.two_sum(h1, t1h);
        let sl2 = self.b.ins().fadd(sl, sl);
        let small = self.b.ins().fadd(sl2, t1l);
        let small = self.b.ins().fadd(small, r);
        let small = self.fma(kf, l2, small);
        let e = self.b.ins().fadd(e1, e2);
        let lo = self.b.ins().fadd(e, small);
        self.fast_two_sum(h2, lo)
    }

    /// ln x: `log_dd` rounded, with ln(±0) = −Inf, ln(<0) = NaN, ln(+Inf) = +Inf, NaN kept.
    pub(super) fn log_d(&mut self, x: Value) -> Value {
        let (h, l) = self.log_dd(x);
        let r = self.b.ins().fadd(h, l);
        self.log_specials(x, x, r)
    }

    /// Special values of ln(u) given the argument `u` (x for log, 1 + x for log1p), with NaN
    /// taken from `x`.
    pub(super) fn log_specials(&mut self, u: Value, x: Value, r: Value) -> Value {
        let zero = self.cf(0.0);
        let ninf = self.cf(f64::NEG_INFINITY);
        let inf = self.cf(f64::INFINITY);
        let nan = self.cf(f64::NAN);
        let r = self.select_cmp(FloatCC::LessThan, u, zero, nan, r);
        let r = self.select_cmp(FloatCC::Equal, u, zero, ninf, r);
        let r = self.select_cmp(FloatCC::Equal, u, inf, inf, r);
        self.select_cmp(FloatCC::Unordered, x, x, x, r)
    }

    /// ln(1 + x) = ln(u) + (x − (u − 1))/u with u = 1 + x rounded (the correction restores
    /// what the rounding of u lost). ±0 kept, −1 → −Inf, < −1 → NaN.
    pub(super) fn log1p_d(&mut self, x: Value) -> Value {
        let one = self.cf(1.0);
        let u = self.b.ins().fadd(one, x);
        let um1 = self.b.ins().fsub(u, one);
        let c = self.b.ins().fsub(x, um1);
        let (h, l) = self.log_dd(u);
        let cu = self.b.ins().fdiv(c, u);
        let lo = self.b.ins().fadd(l, cu);
        let r = self.b.ins().fadd(h, lo);
        let r = self.log_specials(u, x, r);
        let zero = self.cf(0.0);
        self.select_cmp(FloatCC::Equal, x, zero, x, r)
    }

    /// 1 / (1 + e^−x) (the form XLA and the reference kernels use).
    pub(super) fn logistic_d(&mut self, x: Value) -> Value {
        let nx = self.neg(x);
        let e = self.exp_d(nx, None);
        let one = self.cf(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// tanh x = sign(x)·t/(t + 2) with t = expm1(2|x|) (no cancellation anywhere); |x| is
    /// clamped to 20, beyond which the quotient rounds to 1.
    pub(super) fn tanh_d(&mut self, x: Value) -> Value {
        let ax = self.abs(x);
        let c20 = self.cf(20.0);
        let axc = self.min_k(ax, c20);
        let a2 = self.b.ins().fadd(axc, axc);
        let t = self.expm1_d(a2);
        let two = self.cf(2.0);
        let d = self.b.ins().fadd(t, two);
        let r = self.b.ins().fdiv(t, d);
        self.with_sign_of(r, x)
    }

    /// x^y. |x|^y = e^{y·ln|x|} with ln|x| as a double-f64 ([`Self::log_dd`]), the product
    /// y·ln|x| as a double-f64, and e^(h + l) ([`Self::exp_d`] with a low part); then the sign
    /// for negative x and odd integer y, and C99 Annex F special cases by selects.
    pub(super) fn pow_d(&mut self, x: Value, y: Value) -> Value {
        let ax = self.abs(x);
        let (lh, ll) = self.log_dd(ax);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        // ln 0 = −Inf, ln Inf = +Inf exactly (the product then gives 0 or Inf below).
        let z = self.mask(FloatCC::Equal, ax, zero);
        let i = self.mask(FloatCC::Equal, ax, inf);
        let lh = self.blend_c(z, f64::NEG_INFINITY, lh);
        let lh = self.blend_c(i, f64::INFINITY, lh);
        let zi = self.b.ins().bor(z, i);
        let ll = self.blend_c(zi, 0.0, ll);
        let ph = self.b.ins().fmul(y, lh);
        let nph = self.neg(ph);
        let pl = self.fma(y, lh, nph);
        let pl = self.fma(y, ll, pl);
        let r = self.exp_d(ph, Some(pl));
        // Negative base: odd integer y negates, non-integer y gives NaN (finite x only).
        let fy = self.b.ins().floor(y);
        let yint = self.mask(FloatCC::Equal, fy, y);
        let half = self.cf(0.5);
        let yh = self.b.ins().fmul(y, half);
        let fyh = self.b.ins().floor(yh);
        let hnot = self.mask(FloatCC::NotEqual, fyh, yh);
        let yodd = self.b.ins().band(yint, hnot);
        let xneg = self.sign_mask(x);
        let flip = self.b.ins().band(xneg, yodd);
        let nr = self.neg(r);
        let r = self.blend(flip, nr, r);
        let xlt = self.mask(FloatCC::LessThan, x, zero);
        let ninf = self.cf(f64::NEG_INFINITY);
        let xfin = self.mask(FloatCC::GreaterThan, x, ninf);
        let bad = self.b.ins().band(xlt, xfin);
        let bad = self.b.ins().band_not(bad, yint);
        let r = self.blend_c(bad, f64::NAN, r);
        // NaN operands propagate, except for the cases below.
        let xy = self.b.ins().fadd(x, y);
        let unord = self.mask(FloatCC::Unordered, x, y);
        let r = self.blend(unord, xy, r);
        // (−1)^±Inf = 1, 1^y = 1 (even NaN), x^±0 = 1 (even NaN).
        let one = self.cf(1.0);
        let ay = self.abs(y);
        let a1 = self.mask(FloatCC::Equal, ax, one);
        let yinf = self.mask(FloatCC::Equal, ay, inf);
        let m1inf = self.b.ins().band(a1, yinf);
        let r = self.blend_c(m1inf, 1.0, r);
        let r = self.select_cmp(FloatCC::Equal, x, one, one, r);
        self.select_cmp(FloatCC::Equal, y, zero, one, r)
    }
}
