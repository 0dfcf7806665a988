//! F16/BF16 in 32-bit lanes: rounding an f32 register to a half type, the half ↔ f32 bit
//! conversions and the round-to-odd f64 → f32 step.

use super::*;

impl Cg<'_, '_> {
    /// Rounds an f32 register to the half type `ty` (identity for other types). The result is
    /// an f32 holding a value of the half type: every F16/BF16 register holds one (see
    /// [`Cg::f32_to_f16_bits`]).
    pub(super) fn round(&mut self, ty: Ty, x: Value) -> Value {
        match ty {
            Ty::F16 => self.round_f16(x),
            Ty::BF16 => self.round_bf16(x),
            _ => x,
        }
    }

    /// f32 → the nearest f16 value (ties to even), as an f32, without leaving f32: with `e` the
    /// exponent of |x| clamped to f16's normal range [−14, 15] and `m = 2^(e+13)`, the f32 sum
    /// |x| + m keeps exactly f16's precision at that exponent (below 2⁻¹⁴, f16's subnormal step
    /// 2⁻²⁴), so the adder rounds |x| to nearest even and subtracting m is exact. Results above
    /// 65504 become Inf; NaN stays NaN; the sign is put back last (−0 stays −0).
    pub(super) fn round_f16(&mut self, x: Value) -> Value {
        let b = self.bits_of(x);
        let sm = self.iconst(Ty::I32, 0x8000_0000);
        let sign = self.b.ins().band(b, sm);
        let a = self.b.ins().bxor(b, sign);
        let em = self.iconst(Ty::I32, 0x7f80_0000);
        let e = self.b.ins().band(a, em);
        let lo = self.iconst(Ty::I32, 0x3880_0000);
        let e = self.b.ins().smax(e, lo);
        let hi = self.iconst(Ty::I32, 0x4700_0000);
        let e = self.b.ins().smin(e, hi);
        let k = self.iconst(Ty::I32, 13 << 23);
        let m = self.b.ins().iadd(e, k);
        let m = self.f32_of(m);
        let af = self.f32_of(a);
        let s = self.b.ins().fadd(af, m);
        let y = self.b.ins().fsub(s, m);
        let max = self.fconst(Ty::F32, 65504.0);
        let over = self.b.ins().fcmp(FloatCC::LessThan, max, y);
        let inf = self.fconst(Ty::F32, f64::INFINITY);
        let y = self.select(over, inf, y);
        let yb = self.bits_of(y);
        let r = self.b.ins().bor(yb, sign);
        self.f32_of(r)
    }

    /// f32 → the nearest bf16 value (ties to even), as an f32: add 0x7fff plus the lowest kept
    /// bit and clear the 16 dropped bits (a carry into the exponent rounds up to the next binade
    /// or to Inf); NaN stays NaN.
    pub(super) fn round_bf16(&mut self, x: Value) -> Value {
        let b = self.bits_of(x);
        let lsb = self.b.ins().ushr_imm(b, 16);
        let one = self.iconst(Ty::I32, 1);
        let lsb = self.b.ins().band(lsb, one);
        let bias = self.iconst(Ty::I32, 0x7fff);
        let r = self.b.ins().iadd(b, bias);
        let r = self.b.ins().iadd(r, lsb);
        let keep = self.iconst(Ty::I32, 0xffff_0000);
        let r = self.b.ins().band(r, keep);
        let m = self.iconst(Ty::I32, 0x7fff_ffff);
        let abs = self.b.ins().band(b, m);
        let r = self.select_cmp32(IntCC::SignedGreaterThan, abs, 0x7f80_0000, b, r);
        self.f32_of(r)
    }

    /// The bits of f32 lanes as I32 lanes.
    pub(super) fn bits_of(&mut self, x: Value) -> Value {
        let t = self.rty(Ty::I32);
        self.b.ins().bitcast(t, math::little_endian(), x)
    }

    /// I32 lanes read as f32 lanes.
    pub(super) fn f32_of(&mut self, x: Value) -> Value {
        let t = self.rty(Ty::F32);
        self.b.ins().bitcast(t, math::little_endian(), x)
    }

    /// `c ? t : f` for 32-bit registers, with `c` the comparison of `a` with the constant `k`.
    pub(super) fn select_cmp32(&mut self, cc: IntCC, a: Value, k: u32, t: Value, f: Value) -> Value {
        let k = self.iconst(Ty::I32, k.into());
        let m = self.b.ins().icmp(cc, a, k);
        self.select(m, t, f)
    }

    // The half conversions below work lane-wise on 32-bit registers (scalar or four lanes): a
    // half value travels as its 16 bits in the low half of a 32-bit lane (upper half zero).

    /// bf16 value held in an f32 (see [`Cg::round`]) → its bits; NaN → quiet NaN with the top
    /// payload bits.
    pub(super) fn f32_to_bf16_bits(&mut self, x: Value) -> Value {
        let b = self.bits_of(x);
        let hi = self.b.ins().ushr_imm(b, 16);
        let q = self.iconst(Ty::I32, 0x40);
        let nan_q = self.b.ins().bor(hi, q);
        let m = self.iconst(Ty::I32, 0x7fff_ffff);
        let abs = self.b.ins().band(b, m);
        // |x| bits are below 2³¹: a signed compare (one instruction on x86) orders them.
        self.select_cmp32(IntCC::SignedGreaterThan, abs, 0x7f80_0000, nan_q, hi)
    }

    /// bf16 bits → f32 (exact).
    pub(super) fn bf16_bits_to_f32(&mut self, w: Value) -> Value {
        let w = self.b.ins().ishl_imm(w, 16);
        self.f32_of(w)
    }

    /// f16 value held in an f32 (see [`Cg::round`]; the conversion is exact) → its bits; ±Inf
    /// → ±Inf, NaN → quiet NaN with the top payload bits.
    ///
    /// |x|·2⁻¹¹² moves f16's exponent bias into f32's: its bits shifted right by 13 are the f16
    /// bits (f16 subnormals become f32 subnormals with the same significand, so a thread running
    /// with flush-to-zero flushes them). Inf and NaN stay Inf and (quiet) NaN, whose shifted
    /// exponent field is 0x3FC00: subtracting 0x38000 makes it f16's 0x7C00.
    pub(super) fn f32_to_f16_bits(&mut self, x: Value) -> Value {
        let f = self.bits_of(x);
        let sm = self.iconst(Ty::I32, 0x8000_0000);
        let sign = self.b.ins().band(f, sm);
        let a = self.b.ins().bxor(f, sign);
        let af = self.f32_of(a);
        let scale = self.fconst(Ty::F32, f64::from(f32::from_bits((127 - 112) << 23)));
        let y = self.b.ins().fmul(af, scale);
        let yb = self.bits_of(y);
        let n = self.b.ins().ushr_imm(yb, 13);
        let lim = self.iconst(Ty::I32, 0x7f7f_ffff);
        let special = self.b.ins().icmp(IntCC::SignedGreaterThan, a, lim);
        let rebias = self.iconst(Ty::I32, 0x38000);
        let rebias = if self.lanes == 1 {
            let zero = self.iconst(Ty::I32, 0);
            self.b.ins().select(special, rebias, zero)
        } else {
            self.b.ins().band(special, rebias)
        };
        let r = self.b.ins().isub(n, rebias);
        let sh = self.b.ins().ushr_imm(sign, 16);
        self.b.ins().bor(r, sh)
    }

    /// f16 bits → f32 (exact).
    ///
    /// The sign and the 15 other bits are placed at f32's sign and bits 27..13 (shifted left
    /// 16, arithmetic right 3, the smeared sign bits masked off): read as f32 and times 2¹¹²,
    /// that is the value of every finite half (subnormals through f32 subnormals). Inf and NaN
    /// come out at 2¹⁶ and above (their exponent field is all ones): setting every f32 exponent
    /// bit then keeps their payload.
    pub(super) fn f16_bits_to_f32(&mut self, w: Value) -> Value {
        let t = self.b.ins().ishl_imm(w, 16);
        let t = self.b.ins().sshr_imm(t, 3);
        let keep = self.iconst(Ty::I32, 0x8fff_e000);
        let t = self.b.ins().band(t, keep);
        let f = self.f32_of(t);
        let scale = self.fconst(Ty::F32, f64::from(f32::from_bits((127 + 112) << 23)));
        let f = self.b.ins().fmul(f, scale);
        let af = self.b.ins().fabs(f);
        let big = self.fconst(Ty::F32, 65536.0);
        let special = self.b.ins().fcmp(FloatCC::LessThanOrEqual, big, af);
        let fb = self.bits_of(f);
        let e = self.iconst(Ty::I32, 0x7f80_0000);
        let sp = self.b.ins().bor(fb, e);
        let r = self.select(special, sp, fb);
        self.f32_of(r)
    }

    /// f64 → f32 rounded to odd (so that a second rounding to F16 is a correct single rounding).
    pub(super) fn f64_to_f32_odd(&mut self, x: Value) -> Value {
        let f = self.b.ins().fdemote(types::F32, x);
        let back = self.b.ins().fpromote(types::F64, f);
        let bits = self.bits_of(f);
        let abs = self.b.ins().band_imm(bits, 0x7fff_ffff);
        let finite = self.b.ins().icmp_imm(IntCC::UnsignedLessThan, abs, 0x7f80_0000);
        let inexact = self.b.ins().fcmp(FloatCC::NotEqual, back, x);
        let use_odd = self.b.ins().band(finite, inexact);
        let ab = self.b.ins().fabs(back);
        let ax = self.b.ins().fabs(x);
        let away = self.b.ins().fcmp(FloatCC::GreaterThan, ab, ax);
        let away = self.b.ins().uextend(types::I32, away);
        let t = self.b.ins().isub(bits, away);
        let t = self.b.ins().bor_imm(t, 1);
        let r = self.b.ins().select(use_odd, t, bits);
        self.f32_of(r)
    }
}
