//! Lowering of the unary, binary and conversion instructions to Cranelift IR.

use super::*;

impl Cg<'_, '_> {
    pub(super) fn unary(&mut self, op: UnaryOp, ty: Ty, a: Value) -> Result<Value, String> {
        if ty == Ty::Bool {
            return Ok(match op {
                UnaryOp::LogicalNot => {
                    let one = self.iconst(Ty::Bool, 1);
                    self.b.ins().bxor(a, one)
                }
                UnaryOp::IsNaN => self.iconst(Ty::Bool, 0),
                UnaryOp::Identity => a,
                other => return Err(format!("unary {other:?} on Bool")),
            });
        }
        if ty.is_int() {
            return Ok(match op {
                UnaryOp::Abs if ty.is_signed() => self.b.ins().iabs(a),
                UnaryOp::Abs | UnaryOp::Identity => a,
                UnaryOp::Neg => self.b.ins().ineg(a),
                UnaryOp::BitwiseNot => self.b.ins().bnot(a),
                UnaryOp::BitCount => self.b.ins().popcnt(a),
                UnaryOp::Clz => self.b.ins().clz(a),
                UnaryOp::IsNaN => self.iconst(Ty::Bool, 0),
                UnaryOp::Sign => {
                    let zero = self.iconst(ty, 0);
                    let one = self.iconst(ty, 1);
                    let gt = self.compare(CompareOp::GreaterThan, ty, a, zero);
                    let r = self.select(gt, one, zero);
                    if ty.is_signed() {
                        let m1 = self.iconst(ty, -1);
                        let lt = self.compare(CompareOp::LessThan, ty, a, zero);
                        self.select(lt, m1, r)
                    } else {
                        r
                    }
                }
                other => return Err(format!("unary {other:?} on {ty:?}")),
            });
        }
        let fty = self.rty(ty);
        let mut e = Emit { b: self.b, ty: fty };
        let v = match op {
            UnaryOp::Neg => e.neg(a),
            UnaryOp::Abs => e.abs(a),
            UnaryOp::Sqrt => e.b.ins().sqrt(a),
            UnaryOp::Rsqrt => {
                let s = e.b.ins().sqrt(a);
                let one = e.cf(1.0);
                e.b.ins().fdiv(one, s)
            }
            UnaryOp::Ceil => e.b.ins().ceil(a),
            UnaryOp::Floor => e.b.ins().floor(a),
            UnaryOp::Round => e.b.ins().nearest(a),
            UnaryOp::Identity => a,
            UnaryOp::Sign => {
                let zero = e.cf(0.0);
                let one = e.cf(1.0);
                let m1 = e.cf(-1.0);
                let r = e.select_cmp(FloatCC::GreaterThan, a, zero, one, a);
                e.select_cmp(FloatCC::LessThan, a, zero, m1, r)
            }
            UnaryOp::IsNaN => {
                let m = e.b.ins().fcmp(FloatCC::Unordered, a, a);
                return Ok(self.bool_of_mask(m));
            }
            UnaryOp::IsFinite => {
                let inf = e.cf(f64::INFINITY);
                let ab = e.abs(a);
                let m = e.b.ins().fcmp(FloatCC::LessThan, ab, inf);
                return Ok(self.bool_of_mask(m));
            }
            other => match e.unary(other, a) {
                Some(v) => v,
                None => return Err(format!("unary {other:?} is not supported by the JIT")),
            },
        };
        // These give a value of the operand's type from one of that type (an integer result of
        // Ceil/Floor/Round is never wider than its operand): no rounding.
        let exact = matches!(
            op,
            UnaryOp::Neg
                | UnaryOp::Abs
                | UnaryOp::Ceil
                | UnaryOp::Floor
                | UnaryOp::Round
                | UnaryOp::Identity
                | UnaryOp::Sign
        );
        Ok(if exact { v } else { self.round(ty, v) })
    }

    pub(super) fn binary(&mut self, op: BinaryOp, ty: Ty, x: Value, y: Value) -> Result<Value, String> {
        if ty.is_float() {
            let v = match op {
                BinaryOp::Add => self.b.ins().fadd(x, y),
                BinaryOp::Sub => self.b.ins().fsub(x, y),
                BinaryOp::Mul => self.b.ins().fmul(x, y),
                BinaryOp::Div => self.b.ins().fdiv(x, y),
                BinaryOp::Max => self.b.ins().fmax(x, y),
                BinaryOp::Min => self.b.ins().fmin(x, y),
                other => {
                    let fty = self.rty(ty);
                    match (Emit { b: self.b, ty: fty }).binary(other, x, y) {
                        Some(v) => v,
                        None => return Err(format!("binary {other:?} is not supported by the JIT")),
                    }
                }
            };
            // Max and Min return one of their operands: no rounding.
            return Ok(if matches!(op, BinaryOp::Max | BinaryOp::Min) { v } else { self.round(ty, v) });
        }
        let signed = ty.is_signed();
        let bits = lane_ty(ty).bits() as i128;
        Ok(match op {
            BinaryOp::Add => self.b.ins().iadd(x, y),
            BinaryOp::Sub => self.b.ins().isub(x, y),
            BinaryOp::Mul => self.b.ins().imul(x, y),
            BinaryOp::BitwiseAnd | BinaryOp::LogicalAnd => self.b.ins().band(x, y),
            BinaryOp::BitwiseOr | BinaryOp::LogicalOr => self.b.ins().bor(x, y),
            BinaryOp::BitwiseXor | BinaryOp::LogicalXor => self.b.ins().bxor(x, y),
            BinaryOp::Max if signed => self.b.ins().smax(x, y),
            BinaryOp::Max => self.b.ins().umax(x, y),
            BinaryOp::Min if signed => self.b.ins().smin(x, y),
            BinaryOp::Min => self.b.ins().umin(x, y),
            BinaryOp::Div | BinaryOp::Rem => {
                // Divisors 0 and −1 are replaced by 1 (so the hardware never traps) and their
                // results patched: ÷0 → all ones, rem 0 → x, ÷−1 → −x (wraps), rem −1 → 0.
                let zero = self.iconst(ty, 0);
                let one = self.iconst(ty, 1);
                let is0 = self.b.ins().icmp(IntCC::Equal, y, zero);
                let safe = if signed {
                    let m1 = self.iconst(ty, -1);
                    let ism1 = self.b.ins().icmp(IntCC::Equal, y, m1);
                    let bad = self.b.ins().bor(is0, ism1);
                    let s = self.b.ins().select(bad, one, y);
                    let q = if op == BinaryOp::Div { self.b.ins().sdiv(x, s) } else { self.b.ins().srem(x, s) };
                    let alt = if op == BinaryOp::Div { self.b.ins().ineg(x) } else { zero };
                    self.b.ins().select(ism1, alt, q)
                } else {
                    let s = self.b.ins().select(is0, one, y);
                    if op == BinaryOp::Div { self.b.ins().udiv(x, s) } else { self.b.ins().urem(x, s) }
                };
                let on0 = if op == BinaryOp::Div { self.iconst(ty, -1) } else { x };
                self.b.ins().select(is0, on0, safe)
            }
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical => {
                let r = if op == BinaryOp::ShiftLeft { self.b.ins().ishl(x, y) } else { self.b.ins().ushr(x, y) };
                let w = self.iconst(ty, bits);
                let big = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, y, w);
                let zero = self.iconst(ty, 0);
                self.b.ins().select(big, zero, r)
            }
            BinaryOp::ShiftRightArithmetic => {
                let w1 = self.iconst(ty, bits - 1);
                let s = self.b.ins().umin(y, w1);
                self.b.ins().sshr(x, s)
            }
            other => return Err(format!("binary {other:?} on {ty:?}")),
        })
    }

    /// ConvertDType of register `x` from `from` to `to`.
    pub(super) fn convert(&mut self, x: Value, from: Ty, to: Ty) -> Value {
        if from == to {
            return x;
        }
        let lt = lane_ty(to);
        let rt = self.rty(to);
        if to == Ty::Bool {
            return if from.is_float() {
                let zero = self.fconst(from, 0.0);
                let m = self.b.ins().fcmp(FloatCC::NotEqual, x, zero);
                self.bool_of_mask(m)
            } else {
                let zero = self.iconst(from, 0);
                let m = self.b.ins().icmp(IntCC::NotEqual, x, zero);
                self.bool_of_mask(m)
            };
        }
        // Register lane widths (Bool lanes are 32-bit in a 4-lane loop).
        let src_bits = self.lt(from).bits();
        if !from.is_float() {
            // Bool / int source.
            let signed = from.is_signed();
            if to.is_int() {
                let dst_bits = lt.bits();
                return if dst_bits == src_bits {
                    x
                } else if dst_bits < src_bits {
                    self.b.ins().ireduce(rt, x)
                } else if signed {
                    self.b.ins().sextend(rt, x)
                } else {
                    self.b.ins().uextend(rt, x)
                };
            }
            let x = if src_bits < 32 {
                if signed { self.b.ins().sextend(types::I32, x) } else { self.b.ins().uextend(types::I32, x) }
            } else {
                x
            };
            let fty = self.rty(to);
            let f = if signed { self.b.ins().fcvt_from_sint(fty, x) } else { self.b.ins().fcvt_from_uint(fty, x) };
            return self.round(to, f);
        }
        // Float source (halves are held as f32).
        if to.is_int() {
            let signed = to.is_signed();
            let dst_bits = lt.bits();
            if dst_bits >= 32 {
                return if signed {
                    self.b.ins().fcvt_to_sint_sat(rt, x)
                } else {
                    self.b.ins().fcvt_to_uint_sat(rt, x)
                };
            }
            let w = if signed {
                let w = self.b.ins().fcvt_to_sint_sat(types::I32, x);
                let (lo, hi) =
                    if dst_bits == 8 { (i8::MIN as i64, i8::MAX as i64) } else { (i16::MIN as i64, i16::MAX as i64) };
                let lo = self.b.ins().iconst(types::I32, lo);
                let hi = self.b.ins().iconst(types::I32, hi);
                let w = self.b.ins().smax(w, lo);
                self.b.ins().smin(w, hi)
            } else {
                let w = self.b.ins().fcvt_to_uint_sat(types::I32, x);
                let hi = if dst_bits == 8 { u8::MAX as i64 } else { u16::MAX as i64 };
                let hi = self.b.ins().iconst(types::I32, hi);
                self.b.ins().umin(w, hi)
            };
            return self.b.ins().ireduce(rt, w);
        }
        match (from, to) {
            (Ty::F64, Ty::F16) => {
                let f = self.f64_to_f32_odd(x);
                self.round(Ty::F16, f)
            }
            (Ty::F64, t) => {
                let f = self.b.ins().fdemote(types::F32, x);
                self.round(t, f)
            }
            (_, Ty::F64) => self.b.ins().fpromote(types::F64, x),
            (_, t) => self.round(t, x),
        }
    }
}
