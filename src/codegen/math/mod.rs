//! Transcendental functions emitted as Cranelift IR (Cranelift has no exp/log/sin instructions).
//!
//! Every function is straight-line IR (plus one guarded loop for the huge-argument reduction of
//! sin/cos) that works lane-wise, so the same code serves a scalar and a vector of the element
//! type: `Emit::ty` is `F32`, `F32X4`, `F64` or `F64X2`.
//!
//! * f32 `exp`, `logistic`, `tanh` are native single-precision approximations.
//! * Every other f32 function is evaluated in f64 lanes (the f32 lanes are promoted, the f64 code
//!   below runs, and the result is rounded once to f32), which makes those functions nearly
//!   correctly rounded and gives sin/cos an exact reduction over the whole f32 range.
//! * The f64 functions use range reduction, Taylor or Chebyshev-fitted polynomials and, where
//!   the result depends on cancellation (log inside pow, the argument of sin/cos), double-f64
//!   ("double-double") arithmetic.
//!
//! The methods and the measured error (tests/jit_math.rs) are listed in docs/jit-math.md.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{BlockArg, ConstantData, InstBuilder, MemFlags, Type, Value, types};
use cranelift_frontend::FunctionBuilder;

use crate::codegen::loop_kernel::ElemTy;
use crate::ir::op::{BinaryOp, UnaryOp};

mod erf;
mod exp_log;
mod native_f32;
mod trig;

/// Flags for bitcasts between vector types: lanes in little-endian order (every target here).
pub(crate) fn little_endian() -> MemFlags {
    MemFlags::new().with_endianness(cranelift_codegen::ir::Endianness::Little)
}

/// Whether [`Emit::unary`] implements `op` for element type `ty`.
pub(crate) fn supports_unary(op: UnaryOp, ty: ElemTy) -> bool {
    matches!(ty, ElemTy::F32 | ElemTy::F64)
        && matches!(
            op,
            UnaryOp::Exp
                | UnaryOp::Expm1
                | UnaryOp::Log
                | UnaryOp::Log1p
                | UnaryOp::Logistic
                | UnaryOp::Tanh
                | UnaryOp::Erf
                | UnaryOp::Sin
                | UnaryOp::Cos
        )
}

/// Whether [`Emit::binary`] implements `op` for element type `ty`.
pub(crate) fn supports_binary(op: BinaryOp, ty: ElemTy) -> bool {
    matches!(ty, ElemTy::F32 | ElemTy::F64) && matches!(op, BinaryOp::Pow | BinaryOp::Atan2)
}

/// Lane-independent helpers for one element type (scalar or vector).
pub(crate) struct Emit<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    /// `F32`, `F32X4`, `F64` or `F64X2`.
    pub ty: Type,
}

// ---- constants -------------------------------------------------------------------------------

/// 1.5·2^52: adding it to an integer-valued f64 (|n| < 2^51) puts n in the low bits.
const MAGIC: f64 = 6755399441055744.0;

/// Number of 26-bit chunks of 2/π that the Payne–Hanek reduction uses for f64 inputs (enough
/// for |x| up to f64::MAX) and for inputs that came from f32 (|x| < 2^128).
const TRIG_CHUNKS_F64: i64 = 45;
const TRIG_CHUNKS_F32: i64 = 9;

/// Which of sin and cos [`Emit::sincos_d`] computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trig {
    Sin,
    Cos,
}

impl Emit<'_, '_> {
    /// The transcendental unary `op` applied to `x`, or `None` when this module does not
    /// implement it (see [`supports_unary`]).
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Option<Value> {
        if self.is_f64() {
            return self.unary_d(op, x, TRIG_CHUNKS_F64);
        }
        Some(match op {
            UnaryOp::Exp => self.exp(x),
            UnaryOp::Logistic => self.logistic(x),
            UnaryOp::Tanh => self.tanh(x),
            UnaryOp::Expm1 | UnaryOp::Log | UnaryOp::Log1p | UnaryOp::Erf | UnaryOp::Sin | UnaryOp::Cos => {
                self.via_f64(&[x], |e, a| e.unary_d(op, a[0], TRIG_CHUNKS_F32))?
            }
            _ => return None,
        })
    }

    /// The transcendental binary `op` (Pow, Atan2) applied to `x, y`, or `None` when this module
    /// does not implement it (see [`supports_binary`]). For Atan2, `x` is the numerator y and
    /// `y` the denominator x (operand order of the op: lhs = y, rhs = x).
    pub fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Option<Value> {
        if !matches!(op, BinaryOp::Pow | BinaryOp::Atan2) {
            return None;
        }
        if self.is_f64() {
            return self.binary_d(op, x, y);
        }
        self.via_f64(&[x, y], |e, a| e.binary_d(op, a[0], a[1]))
    }

    fn unary_d(&mut self, op: UnaryOp, x: Value, chunks: i64) -> Option<Value> {
        Some(match op {
            UnaryOp::Exp => self.exp_d(x, None),
            UnaryOp::Expm1 => self.expm1_d(x),
            UnaryOp::Log => self.log_d(x),
            UnaryOp::Log1p => self.log1p_d(x),
            UnaryOp::Logistic => self.logistic_d(x),
            UnaryOp::Tanh => self.tanh_d(x),
            UnaryOp::Erf => self.erf_d(x),
            UnaryOp::Sin => self.sincos_d(x, Trig::Sin, chunks),
            UnaryOp::Cos => self.sincos_d(x, Trig::Cos, chunks),
            _ => return None,
        })
    }

    fn binary_d(&mut self, op: BinaryOp, x: Value, y: Value) -> Option<Value> {
        Some(match op {
            BinaryOp::Pow => self.pow_d(x, y),
            BinaryOp::Atan2 => self.atan2_d(x, y),
            _ => return None,
        })
    }

    /// Runs `f` on the arguments widened to f64 lanes and rounds its result once to f32. An
    /// `f32x4` is processed as two `f64x2` halves.
    fn via_f64(&mut self, args: &[Value], mut f: impl FnMut(&mut Emit, &[Value]) -> Option<Value>) -> Option<Value> {
        let le = little_endian();
        if !self.ty.is_vector() {
            let wide: Vec<Value> = args.iter().map(|&a| self.b.ins().fpromote(types::F64, a)).collect();
            let r = f(&mut Emit { b: &mut *self.b, ty: types::F64 }, &wide)?;
            return Some(self.b.ins().fdemote(types::F32, r));
        }
        // Lanes 2, 3 moved down to lanes 0, 1 (byte shuffle), then widened.
        let hi_mask: Vec<u8> = (8..16).chain(8..16).collect();
        let hi_mask = self.b.func.dfg.immediates.push(ConstantData::from(hi_mask));
        let mut lo_args = vec![];
        let mut hi_args = vec![];
        for &a in args {
            lo_args.push(self.b.ins().fvpromote_low(a));
            let bytes = self.b.ins().bitcast(types::I8X16, le, a);
            let hi = self.b.ins().shuffle(bytes, bytes, hi_mask);
            let hi = self.b.ins().bitcast(types::F32X4, le, hi);
            hi_args.push(self.b.ins().fvpromote_low(hi));
        }
        let r_lo = f(&mut Emit { b: &mut *self.b, ty: types::F64X2 }, &lo_args)?;
        let r_hi = f(&mut Emit { b: &mut *self.b, ty: types::F64X2 }, &hi_args)?;
        // fvdemote puts the two results in lanes 0, 1 (lanes 2, 3 are zero); join the halves.
        let d_lo = self.b.ins().fvdemote(r_lo);
        let d_hi = self.b.ins().fvdemote(r_hi);
        let join: Vec<u8> = (0..8).chain(16..24).collect();
        let join = self.b.func.dfg.immediates.push(ConstantData::from(join));
        let a = self.b.ins().bitcast(types::I8X16, le, d_lo);
        let c = self.b.ins().bitcast(types::I8X16, le, d_hi);
        let r = self.b.ins().shuffle(a, c, join);
        Some(self.b.ins().bitcast(types::F32X4, le, r))
    }

    // ---- lane helpers ---------------------------------------------------------------------

    fn is_f64(&self) -> bool {
        self.ty.lane_type() == types::F64
    }

    /// The integer type with the lane layout of `ty`.
    fn int_ty(&self) -> Type {
        match (self.is_f64(), self.ty.is_vector()) {
            (false, false) => types::I32,
            (false, true) => types::I32X4,
            (true, false) => types::I64,
            (true, true) => types::I64X2,
        }
    }

    /// A constant of the element type (splatted for vectors).
    pub fn c(&mut self, v: f32) -> Value {
        self.cf(v as f64)
    }

    /// A constant given in f64, rounded to the lane type (f32 or f64).
    pub fn cf(&mut self, v: f64) -> Value {
        let s = if self.is_f64() { self.b.ins().f64const(v) } else { self.b.ins().f32const(v as f32) };
        if self.ty.is_vector() { self.b.ins().splat(self.ty, s) } else { s }
    }

    /// An integer constant of the lane integer type (splatted for vectors).
    fn ci(&mut self, v: i64) -> Value {
        let lane = self.int_ty().lane_type();
        let s = self.b.ins().iconst(lane, if lane == types::I32 { v as i32 as i64 } else { v });
        let ity = self.int_ty();
        if self.ty.is_vector() { self.b.ins().splat(ity, s) } else { s }
    }

    fn flags() -> MemFlags {
        little_endian()
    }

    /// The bits of float lanes as integer lanes.
    fn bits(&mut self, x: Value) -> Value {
        let ity = self.int_ty();
        self.b.ins().bitcast(ity, Self::flags(), x)
    }

    fn bits_to_float(&mut self, x: Value) -> Value {
        self.b.ins().bitcast(self.ty, Self::flags(), x)
    }

    /// `-x`. Vectors flip the sign bits with a constant mask (one `xorps` against a pooled
    /// constant; Cranelift's own `fneg` rebuilds the mask with two instructions at every use).
    pub fn neg(&mut self, x: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fneg(x);
        }
        let m = self.cf(-0.0);
        self.b.ins().bxor(x, m)
    }

    /// `|x|`, as [`Emit::neg`] with an `andps` against the all-but-sign mask.
    pub fn abs(&mut self, x: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fabs(x);
        }
        let s = if self.is_f64() {
            self.b.ins().f64const(Ieee64::with_bits(u64::MAX >> 1))
        } else {
            self.b.ins().f32const(Ieee32::with_bits(u32::MAX >> 1))
        };
        let m = self.b.ins().splat(self.ty, s);
        self.b.ins().band(x, m)
    }

    /// `min(x, k)` for a constant `k` that is neither NaN nor ±0: `k < x ? k : x`, one `minps`
    /// on x86 (Cranelift's general `fmin` also orders signed zeros and NaN operands, ~8
    /// instructions). A NaN `x` gives `x`, as the propagating minimum does.
    fn min_k(&mut self, x: Value, k: Value) -> Value {
        self.select_cmp(FloatCC::LessThan, k, x, k, x)
    }

    /// `max(x, k)` for a constant `k` that is neither NaN nor ±0 (one `maxps`; see
    /// [`Emit::min_k`]).
    fn max_k(&mut self, x: Value, k: Value) -> Value {
        self.select_cmp(FloatCC::LessThan, x, k, k, x)
    }

    /// `a * b + c` with one rounding (FMA instructions when the host has them).
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }

    /// Selects `t` where `cond(a, b)` holds, else `f`.
    pub fn select_cmp(&mut self, cc: FloatCC, a: Value, b: Value, t: Value, f: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        if self.ty.is_vector() {
            let m = self.b.ins().bitcast(self.ty, Self::flags(), m);
            self.b.ins().bitselect(m, t, f)
        } else {
            self.b.ins().select(m, t, f)
        }
    }

    /// All-ones integer lanes where `cc(a, b)` holds, zero elsewhere.
    fn mask(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        if self.ty.is_vector() {
            m
        } else {
            let ity = self.int_ty();
            self.b.ins().bmask(ity, m)
        }
    }

    /// `mask(cc, a, k)` for a constant `k`.
    fn mask_c(&mut self, cc: FloatCC, a: Value, k: f64) -> Value {
        let kc = self.cf(k);
        self.mask(cc, a, kc)
    }

    /// Float lanes: `t` where the integer mask `m` is all ones, else `f`.
    fn blend(&mut self, m: Value, t: Value, f: Value) -> Value {
        let tb = self.bits(t);
        let fb = self.bits(f);
        let tm = self.b.ins().band(tb, m);
        let fm = self.b.ins().band_not(fb, m);
        let r = self.b.ins().bor(tm, fm);
        self.bits_to_float(r)
    }

    /// `blend` with a constant for `t`.
    fn blend_c(&mut self, m: Value, t: f64, f: Value) -> Value {
        let tc = self.cf(t);
        self.blend(m, tc, f)
    }

    /// All-ones lanes where the sign bit of `x` is set (also −0 and −NaN).
    fn sign_mask(&mut self, x: Value) -> Value {
        let xb = self.bits(x);
        let shift = if self.is_f64() { 63 } else { 31 };
        self.b.ins().sshr_imm(xb, shift)
    }

    /// `mag` (non-negative) with the sign bit of `sgn`.
    fn with_sign_of(&mut self, mag: Value, sgn: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fcopysign(mag, sgn);
        }
        let sb = self.bits(sgn);
        let mb = self.bits(mag);
        let mask = self.ci(if self.is_f64() { i64::MIN } else { i32::MIN as i64 });
        let s = self.b.ins().band(sb, mask);
        let r = self.b.ins().bor(mb, s);
        self.bits_to_float(r)
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1]·x + …` (f32 coefficients).
    fn poly(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let wide: Vec<f64> = coeffs.iter().map(|&k| k as f64).collect();
        self.polyd(x, &wide)
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1]·x + …`, coefficients rounded to the lane type.
    fn polyd(&mut self, x: Value, coeffs: &[f64]) -> Value {
        let mut acc = self.cf(coeffs[coeffs.len() - 1]);
        for &k in coeffs[..coeffs.len() - 1].iter().rev() {
            let kc = self.cf(k);
            acc = self.fma(acc, x, kc);
        }
        acc
    }

    /// Float lanes of `a + b` as an unevaluated sum `(s, e)`, `s + e = a + b` exactly (Knuth).
    fn two_sum(&mut self, a: Value, b: Value) -> (Value, Value) {
        let s = self.b.ins().fadd(a, b);
        let bb = self.b.ins().fsub(s, a);
        let aa = self.b.ins().fsub(s, bb);
        let db = self.b.ins().fsub(b, bb);
        let da = self.b.ins().fsub(a, aa);
        let e = self.b.ins().fadd(da, db);
        (s, e)
    }

    /// `two_sum` for |a| ≥ |b| (Dekker).
    fn fast_two_sum(&mut self, a: Value, b: Value) -> (Value, Value) {
        let s = self.b.ins().fadd(a, b);
        let t = self.b.ins().fsub(s, a);
        let e = self.b.ins().fsub(b, t);
        (s, e)
    }

    /// 2^n for integer-valued f64 lanes n in [−1022, 1023] (built from the exponent bits).
    fn pow2_d(&mut self, n: Value) -> Value {
        let magic = self.cf(MAGIC);
        let t = self.b.ins().fadd(n, magic);
        let tb = self.bits(t);
        // bits(n + MAGIC) = bits(MAGIC) + n; subtract it and add the exponent bias in one step.
        let off = self.ci(MAGIC.to_bits() as i64 - 1023);
        let e = self.b.ins().isub(tb, off);
        let e = self.b.ins().ishl_imm(e, 52);
        self.bits_to_float(e)
    }

    /// x·2^n for integer-valued f64 lanes n in [−1075, 1024], in two exact halves.
    fn scale_d(&mut self, x: Value, n: Value) -> Value {
        let half = self.cf(0.5);
        let h = self.b.ins().fmul(n, half);
        let n1 = self.b.ins().floor(h);
        let n2 = self.b.ins().fsub(n, n1);
        let s1 = self.pow2_d(n1);
        let s2 = self.pow2_d(n2);
        let y = self.b.ins().fmul(x, s1);
        self.b.ins().fmul(y, s2)
    }
}
