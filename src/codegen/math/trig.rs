//! Trigonometric functions in f64 lanes: sin/cos with the Cody–Waite and Payne–Hanek
//! argument reductions, and atan2.

use super::*;

/// π/2 in four parts; the first three have at most 33 significant bits, so `n·P` is exact for
/// |n| < 2^20 (fdlibm's medium-range split).
pub(super) const PIO2_1: f64 = 1.5707963267341256;
pub(super) const PIO2_2: f64 = 6.077100506303966e-11;
pub(super) const PIO2_3: f64 = 2.0222662487111665e-21;
pub(super) const PIO2_3T: f64 = 8.4784276603689e-32;
/// π/2, π/4, π as double-f64 (high part, low part).
pub(super) const PIO2_H: f64 = std::f64::consts::FRAC_PI_2;
pub(super) const PIO2_L: f64 = 6.123233995736766e-17;
pub(super) const PIO4_H: f64 = std::f64::consts::FRAC_PI_4;
pub(super) const PIO4_L: f64 = 3.061616997868383e-17;
pub(super) const PI_H: f64 = std::f64::consts::PI;
pub(super) const PI_L: f64 = 1.2246467991473532e-16;
/// |x| from which sin/cos use the Payne–Hanek reduction: n = round(x·2/π) < 2^20 below it.
pub(super) const HUGE_TRIG: f64 = 1_647_099.0;

/// sin y = y + y³·Σ SIN_S[j]·y^{2j} (Taylor to y^17; |y| ≤ π/4, dropped term < 2^−62 relative).
pub(super) const SIN_S: [f64; 8] = [
    -1.0 / 6.0,
    1.0 / 120.0,
    -1.0 / 5040.0,
    1.0 / 362880.0,
    -1.0 / 39916800.0,
    1.0 / 6227020800.0,
    -1.0 / 1307674368000.0,
    1.0 / 355687428096000.0,
];
/// cos y = 1 − y²/2 + y⁴·Σ COS_C[j]·y^{2j} (Taylor to y^16; dropped term < 2^−58).
pub(super) const COS_C: [f64; 7] = [
    1.0 / 24.0,
    -1.0 / 720.0,
    1.0 / 40320.0,
    -1.0 / 3628800.0,
    1.0 / 479001600.0,
    -1.0 / 87178291200.0,
    1.0 / 20922789888000.0,
];

/// atan(b)/b as a polynomial in z = b² on [0, tan²(π/8)]: Chebyshev interpolant of degree 11
/// at 60 digits (max relative error 4e−18).
pub(super) const ATAN_P: [f64; 12] = [
    1.0,
    -0.3333333333333312,
    0.19999999999940893,
    -0.14285714279250245,
    0.11111110744919658,
    -0.09090896809064027,
    0.07692045330902225,
    -0.06662951813629191,
    0.05846878297330872,
    -0.05035102456601552,
    0.03796525745386593,
    -0.017805397205419446,
];

/// 2/π in 26-bit chunks, scaled by 2^600 so that the deep chunks stay normal: entry i is
/// bits 26i+1 ..= 26i+26 after the binary point of 2/π, times 2^(600 − 26(i+1)) (each an exact
/// f64; computed with mpmath at 1300 bits). Used by [`Emit::reduce_huge`].
pub(super) static TWO_OVER_PI_SCALED: [f64; 45] = [
    2.6416636121591983e+180,
    4.473755396398119e+172,
    2.973748106092612e+164,
    1.1474672122087409e+157,
    4.2248973588586766e+148,
    1.3044644088886268e+141,
    2.622129163535969e+133,
    4.362534648040072e+124,
    3.927251695255066e+117,
    1.4037479001408836e+110,
    9.998090070469519e+101,
    1.8848416382657083e+94,
    4.352055270832885e+86,
    5.4322946486718525e+78,
    1.0840950971148388e+70,
    8.70829287409932e+62,
    1.6968815912787755e+55,
    3.591425416078619e+47,
    2.0273152711908564e+39,
    6.627587756293737e+31,
    7.387579808812906e+23,
    1.4741694633213952e+16,
    20550100.0,
    2.224660098552704,
    1.3493819395193896e-08,
    6.069069152926887e-17,
    1.15584179878604e-23,
    1.540688207690201e-31,
    2.9372122277192276e-39,
    1.646405443094729e-47,
    6.145422639522993e-55,
    4.960733889607687e-63,
    6.181229475297696e-71,
    5.112693181914562e-79,
    1.9536696731873403e-86,
    2.6938405463710756e-94,
    2.6764978826042154e-102,
    8.841120253208753e-110,
    7.853222147741055e-118,
    8.753749820038938e-126,
    7.975215318056252e-134,
    1.5231577594109698e-141,
    5.8566448117620214e-149,
    3.2724949462484394e-157,
    5.654565357393325e-166,
];

impl Emit<'_, '_> {
    /// sin x or cos x. Reduction `x = n·π/2 + y` with y as a double-f64 (|y| ≤ π/4): Cody–Waite
    /// with a four-part π/2 when every lane has |x| < 1647099 (n < 2^20), otherwise (a branch
    /// taken only when some lane is that large) the Payne–Hanek reduction of [`Self::reduce_huge`]
    /// for those lanes. Then the Taylor polynomials of sin and cos on y, and the quadrant n mod 4
    /// picks and signs one of them. ±Inf and NaN give NaN; sin(±0) = ±0.
    pub(super) fn sincos_d(&mut self, x: Value, which: Trig, chunks: i64) -> Value {
        let (yh, yl, q) = self.reduce_pio2(x, chunks);
        // sin y ≈ yh + (yl + yh³·S(z)); cos y ≈ w + (((1 − w) − z/2) + (z²·C(z) − yh·yl)), w = 1 − z/2.
        let z = self.b.ins().fmul(yh, yh);
        let sp = self.polyd(z, &SIN_S);
        let y3 = self.b.ins().fmul(z, yh);
        let sin_tail = self.fma(y3, sp, yl);
        let s = self.b.ins().fadd(yh, sin_tail);
        let cp = self.polyd(z, &COS_C);
        let z2 = self.b.ins().fmul(z, z);
        let half = self.cf(0.5);
        let hz = self.b.ins().fmul(z, half);
        let one = self.cf(1.0);
        let w = self.b.ins().fsub(one, hz);
        let t = self.b.ins().fsub(one, w);
        let t = self.b.ins().fsub(t, hz);
        let nyl = self.neg(yl);
        let u = self.b.ins().fmul(yh, nyl);
        let u = self.fma(z2, cp, u);
        let t = self.b.ins().fadd(t, u);
        let c = self.b.ins().fadd(w, t);
        // Quadrant: sin x = [s, c, −s, −c][q], cos x = [c, −s, −c, s][q].
        let one_i = self.ci(1);
        let odd = self.b.ins().band(q, one_i);
        let zero_i = self.ci(0);
        let swap = self.b.ins().isub(zero_i, odd);
        let (neg_src, r) = match which {
            Trig::Sin => (q, self.blend(swap, c, s)),
            Trig::Cos => {
                let q1 = self.b.ins().iadd(q, one_i);
                (q1, self.blend(swap, s, c))
            }
        };
        let two_i = self.ci(2);
        let neg = self.b.ins().band(neg_src, two_i);
        let neg = self.b.ins().ishl_imm(neg, 62);
        let rb = self.bits(r);
        let rb = self.b.ins().bxor(rb, neg);
        let r = self.bits_to_float(rb);
        let r = if which == Trig::Sin {
            let zero = self.cf(0.0);
            self.select_cmp(FloatCC::Equal, x, zero, x, r)
        } else {
            r
        };
        let ax = self.abs(x);
        let inf = self.cf(f64::INFINITY);
        let nan = self.cf(f64::NAN);
        self.select_cmp(FloatCC::Equal, ax, inf, nan, r)
    }

    /// `x = n·π/2 + (yh + yl)`, returning `(yh, yl, n)` with n in integer lanes (only n mod 4 is
    /// meaningful). Cody–Waite for every lane; when any lane has |x| ≥ [`HUGE_TRIG`], a branch
    /// computes the Payne–Hanek reduction for all lanes and those lanes take it.
    pub(super) fn reduce_pio2(&mut self, x: Value, chunks: i64) -> (Value, Value, Value) {
        let inv = self.cf(std::f64::consts::FRAC_2_PI);
        let t = self.b.ins().fmul(x, inv);
        let n = self.b.ins().nearest(t);
        let nn = self.neg(n);
        let p1 = self.cf(PIO2_1);
        let t1 = self.fma(nn, p1, x); // exact: n·PIO2_1 exact, x − n·PIO2_1 exact (Sterbenz)
        let p2 = self.cf(PIO2_2);
        let w2 = self.b.ins().fmul(n, p2); // exact
        let nw2 = self.neg(w2);
        let (h, e1) = self.two_sum(t1, nw2);
        let p3 = self.cf(PIO2_3);
        let w3 = self.b.ins().fmul(n, p3); // exact
        let nw3 = self.neg(w3);
        let (h, e2) = self.two_sum(h, nw3);
        let p4 = self.cf(PIO2_3T);
        let lo = self.b.ins().fadd(e1, e2);
        let lo = self.fma(nn, p4, lo);
        let (yh, yl) = self.fast_two_sum(h, lo);
        let q = self.quadrant(n);

        // Branch to the Payne–Hanek reduction when some lane is huge.
        let ax = self.abs(x);
        let lim = self.cf(HUGE_TRIG);
        let big = self.b.ins().fcmp(FloatCC::GreaterThanOrEqual, ax, lim);
        let any = if self.ty.is_vector() { self.b.ins().vany_true(big) } else { big };
        let huge_blk = self.b.create_block();
        let merge = self.b.create_block();
        let ity = self.int_ty();
        let m_yh = self.b.append_block_param(merge, self.ty);
        let m_yl = self.b.append_block_param(merge, self.ty);
        let m_q = self.b.append_block_param(merge, ity);
        let cheap = [BlockArg::Value(yh), BlockArg::Value(yl), BlockArg::Value(q)];
        self.b.ins().brif(any, huge_blk, &[], merge, &cheap);

        self.b.switch_to_block(huge_blk);
        let (hh, hl, hq) = self.reduce_huge(x, chunks);
        let bigm = self.mask(FloatCC::GreaterThanOrEqual, ax, lim);
        let yh2 = self.blend(bigm, hh, yh);
        let yl2 = self.blend(bigm, hl, yl);
        let hqb = self.b.ins().band(hq, bigm);
        let qb = self.b.ins().band_not(q, bigm);
        let q2 = self.b.ins().bor(hqb, qb);
        self.b.ins().jump(merge, &[BlockArg::Value(yh2), BlockArg::Value(yl2), BlockArg::Value(q2)]);

        self.b.switch_to_block(merge);
        (m_yh, m_yl, m_q)
    }

    /// Integer lanes holding the integer-valued f64 lanes `n` (|n| < 2^51) modulo 2^64.
    pub(super) fn quadrant(&mut self, n: Value) -> Value {
        let magic = self.cf(MAGIC);
        let t = self.b.ins().fadd(n, magic);
        let tb = self.bits(t);
        let mb = self.ci(MAGIC.to_bits() as i64);
        self.b.ins().isub(tb, mb)
    }

    /// Payne–Hanek: `x·(2/π) mod 4` computed exactly enough for every lane with |x| ≥ 2^20.
    /// x·2^−600 is split into two halves of at most 27 significant bits, and each half is
    /// multiplied by the 26-bit chunks of 2/π (scaled by 2^600, [`TWO_OVER_PI_SCALED`]), so
    /// every product is exact; each product is reduced mod 4 exactly and accumulated exactly
    /// (TwoSum) into `hi` (kept in [−2, 2] by exact mod-4 steps) and `lo`, whose own rounding
    /// errors go to `lolo`. The chunks are loaded in a loop of `chunks` iterations (45 cover
    /// f64::MAX, 9 cover f32::MAX). The sum's error is about 2^−150 quarter turns plus the
    /// truncated table (x·2^−1170), far below the closest approach of any f64 to a multiple of
    /// π/2 (about 2^−61).
    pub(super) fn reduce_huge(&mut self, x: Value, chunks: i64) -> (Value, Value, Value) {
        let down = self.cf(2f64.powi(-600));
        let xs = self.b.ins().fmul(x, down);
        let xb = self.bits(xs);
        let lowmask = self.ci((1i64 << 27) - 1);
        let hb = self.b.ins().band_not(xb, lowmask);
        let xh = self.bits_to_float(hb);
        let xl = self.b.ins().fsub(xs, xh);

        let table = self.b.ins().iconst(types::I64, TWO_OVER_PI_SCALED.as_ptr() as i64);
        let zero = self.cf(0.0);
        let i0 = self.b.ins().iconst(types::I64, 0);
        let lp = self.b.create_block();
        let done = self.b.create_block();
        let i = self.b.append_block_param(lp, types::I64);
        let hi = self.b.append_block_param(lp, self.ty);
        let lo = self.b.append_block_param(lp, self.ty);
        let lolo = self.b.append_block_param(lp, self.ty);
        let d_hi = self.b.append_block_param(done, self.ty);
        let d_lo = self.b.append_block_param(done, self.ty);
        let d_lolo = self.b.append_block_param(done, self.ty);
        let z = BlockArg::Value(zero);
        self.b.ins().jump(lp, &[BlockArg::Value(i0), z, z, z]);

        self.b.switch_to_block(lp);
        let off = self.b.ins().ishl_imm(i, 3);
        let addr = self.b.ins().iadd(table, off);
        let flags = MemFlags::trusted().with_readonly();
        let c = self.b.ins().load(types::F64, flags, addr, 0);
        let c = if self.ty.is_vector() { self.b.ins().splat(self.ty, c) } else { c };
        let quarter = self.cf(0.25);
        let four = self.cf(4.0);
        let mut hi = hi;
        let mut lo = lo;
        let mut lolo = lolo;
        for part in [xh, xl] {
            let p = self.b.ins().fmul(part, c); // exact
            let pq = self.b.ins().fmul(p, quarter);
            let k = self.b.ins().nearest(pq);
            let nfour = self.neg(four);
            let r = self.fma(k, nfour, p); // p − 4k, exact, in [−2, 2]
            let (s, e) = self.two_sum(hi, r);
            let (l, e2) = self.two_sum(lo, e);
            lo = l;
            lolo = self.b.ins().fadd(lolo, e2);
            let sq = self.b.ins().fmul(s, quarter);
            let k = self.b.ins().nearest(sq);
            let nfour = self.neg(four);
            hi = self.fma(k, nfour, s); // exact
        }
        let i1 = self.b.ins().iadd_imm(i, 1);
        let more = self.b.ins().icmp_imm(IntCC::SignedLessThan, i1, chunks);
        self.b.ins().brif(
            more,
            lp,
            &[BlockArg::Value(i1), BlockArg::Value(hi), BlockArg::Value(lo), BlockArg::Value(lolo)],
            done,
            &[BlockArg::Value(hi), BlockArg::Value(lo), BlockArg::Value(lolo)],
        );

        self.b.switch_to_block(done);
        // The fraction f = (hi − n) + lo + lolo in quarter turns (hi − n is exact and may be
        // smaller than lo), then y = f·π/2 as a double-f64.
        let n = self.b.ins().nearest(d_hi);
        let fh0 = self.b.ins().fsub(d_hi, n);
        let (fh, fl) = self.two_sum(fh0, d_lo);
        let fl = self.b.ins().fadd(fl, d_lolo);
        let ph = self.cf(PIO2_H);
        let pl = self.cf(PIO2_L);
        let yh = self.b.ins().fmul(fh, ph);
        let nyh = self.neg(yh);
        let yl = self.fma(fh, ph, nyh);
        let yl = self.fma(fh, pl, yl);
        let yl = self.fma(fl, ph, yl);
        let (yh, yl) = self.fast_two_sum(yh, yl);
        let q = self.quadrant(n);
        (yh, yl, q)
    }

    /// atan2(y, x): a = min(|x|,|y|)/max(|x|,|y|) ∈ [0, 1]; for a > tan(π/8),
    /// atan a = π/4 + atan((a − 1)/(a + 1)); atan b = b·P(b²) on |b| ≤ tan(π/8); then
    /// π/2 ∓ θ when |y| > |x| (− when x ≥ 0), else π − θ when x has its sign bit set, and
    /// finally the sign of y. Both zero (a := 0) and both infinite (a := 1) follow the C99
    /// table through the same steps.
    pub(super) fn atan2_d(&mut self, y: Value, x: Value) -> Value {
        let ay = self.abs(y);
        let ax = self.abs(x);
        let mx = self.b.ins().fmax(ay, ax);
        let mn = self.b.ins().fmin(ay, ax);
        let a = self.b.ins().fdiv(mn, mx);
        let zero = self.cf(0.0);
        let inf = self.cf(f64::INFINITY);
        let one = self.cf(1.0);
        let a = self.select_cmp(FloatCC::Equal, mx, zero, zero, a);
        let a = self.select_cmp(FloatCC::Equal, mn, inf, one, a);
        let am1 = self.b.ins().fsub(a, one);
        let ap1 = self.b.ins().fadd(a, one);
        let bb = self.b.ins().fdiv(am1, ap1);
        let big = self.mask_c(FloatCC::GreaterThan, a, 0.41421356237309503);
        let b = self.blend(big, bb, a);
        let z = self.b.ins().fmul(b, b);
        let p = self.polyd(z, &ATAN_P[1..]);
        let bz = self.b.ins().fmul(b, z);
        let at = self.fma(bz, p, b);
        let q4h = self.cf(PIO4_H);
        let q4l = self.cf(PIO4_L);
        let t = self.b.ins().fadd(q4l, at);
        let t = self.b.ins().fadd(q4h, t);
        let th = self.blend(big, t, at);
        // With t = ±θ by the sign of x (−0 counts as negative): |y| > |x| gives π/2 − t
        // (π/2 ∓ θ); otherwise x < 0 gives π + t (π − θ) and x > 0 gives θ. One rounding each.
        let xneg = self.sign_mask(x);
        let nth = self.neg(th);
        let t = self.blend(xneg, nth, th);
        let p2h = self.cf(PIO2_H);
        let p2l = self.cf(PIO2_L);
        let u = self.b.ins().fsub(p2l, t);
        let swapped = self.b.ins().fadd(p2h, u);
        let pih = self.cf(PI_H);
        let pil = self.cf(PI_L);
        let u = self.b.ins().fadd(pil, t);
        let back = self.b.ins().fadd(pih, u);
        let r = self.blend(xneg, back, th);
        let r = self.select_cmp(FloatCC::GreaterThan, ay, ax, swapped, r);
        self.with_sign_of(r, y)
    }
}
