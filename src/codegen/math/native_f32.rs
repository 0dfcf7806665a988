//! Native single-precision `exp`, `logistic` and `tanh` for f32 lanes.

use super::*;

impl Emit<'_, '_> {
    // ---- f32 (native single precision) ----------------------------------------------------

    /// e^x. Range reduction `x = n·ln2 + r`, |r| ≤ ln2/2, degree-6 polynomial for e^r, and the
    /// scale 2^n applied in two halves so that results near the subnormal boundary and near
    /// f32::MAX are exact powers. Below −87.3365 (result subnormal) gives 0, above 88.7228 gives
    /// +Inf; NaN propagates.
    pub fn exp(&mut self, x: Value) -> Value {
        const LO: f32 = -87.336_55;
        const HI: f32 = 88.722_84;
        let lo = self.c(LO);
        let hi = self.c(HI);
        let xc = self.max_k(x, lo);
        let xc = self.min_k(xc, hi);
        let log2e = self.c(std::f32::consts::LOG2_E);
        let t = self.b.ins().fmul(xc, log2e);
        let n = self.b.ins().nearest(t);
        let ln2_hi = self.c(-0.693_359_4);
        let ln2_lo = self.c(2.121_944_4e-4);
        let r = self.fma(n, ln2_hi, xc);
        let r = self.fma(n, ln2_lo, r);
        // e^r ≈ 1 + r + r²·P(r), P a degree-5 fit on [−ln2/2, ln2/2] (the classic Cephes expf set).
        let p5 = self.poly(r, &[0.5, 1.666_666_5e-1, 4.166_579_6e-2, 8.333_452e-3, 1.398_2e-3, 1.987_569_1e-4]);
        let r2 = self.b.ins().fmul(r, r);
        let one_c = self.c(1.0);
        let lin = self.b.ins().fadd(r, one_c);
        let p = self.fma(r2, p5, lin);
        let ity = self.int_ty();
        let ni = self.b.ins().fcvt_to_sint_sat(ity, n);
        let n1 = self.b.ins().sshr_imm(ni, 1);
        let n2 = self.b.ins().isub(ni, n1);
        let bias = self.ci(127);
        let e1 = self.b.ins().iadd(n1, bias);
        let e2 = self.b.ins().iadd(n2, bias);
        let e1 = self.b.ins().ishl_imm(e1, 23);
        let e2 = self.b.ins().ishl_imm(e2, 23);
        let s1 = self.bits_to_float(e1);
        let s2 = self.bits_to_float(e2);
        let y = self.b.ins().fmul(p, s1);
        let y = self.b.ins().fmul(y, s2);
        let zero = self.c(0.0);
        let inf = self.c(f32::INFINITY);
        let y = self.select_cmp(FloatCC::LessThan, x, lo, zero, y);
        self.select_cmp(FloatCC::GreaterThan, x, hi, inf, y)
    }

    /// 1 / (1 + e^−x).
    pub fn logistic(&mut self, x: Value) -> Value {
        let nx = self.neg(x);
        let e = self.exp(nx);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// tanh(x) = sign(x)·(1 − 2/(e^{2|x|} + 1)), with a polynomial for |x| < 0.4 where that
    /// form cancels; |x| is clamped to 10, where the quotient already rounds to ±1 (at 9 it
    /// would still give 1 − 2^−24).
    pub fn tanh(&mut self, x: Value) -> Value {
        let ax = self.abs(x);
        let ten = self.c(10.0);
        let axc = self.min_k(ax, ten);
        let two = self.c(2.0);
        let t = self.b.ins().fmul(axc, two);
        let e = self.exp(t);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(e, one);
        let q = self.b.ins().fdiv(two, d);
        let big = self.b.ins().fsub(one, q);
        // Small |x|: odd polynomial x + x^3·P(x^2) (Taylor to x^13; the first dropped term is below
        // 1e-8 relative for |x| < 0.4).
        let x2 = self.b.ins().fmul(x, x);
        let p = self
            .poly(x2, &[-0.333_333_34, 0.133_333_33, -0.053_968_254, 0.021_869_488, -0.008_863_236, 0.003_592_128_6]);
        let x3 = self.b.ins().fmul(x2, x);
        let small = self.fma(x3, p, x);
        let signed_big = self.with_sign_of(big, x);
        let lim = self.c(0.4);
        // NaN: the comparison is false, so the result is signed_big, which is NaN (min_k keeps it).
        let r = self.select_cmp(FloatCC::LessThan, ax, lim, small, signed_big);
        // ±0 exactly (the FMA above turns −0 into +0: −0·p with p < 0 is +0).
        let zero = self.c(0.0);
        self.select_cmp(FloatCC::Equal, x, zero, x, r)
    }
}
