//! Transcendental functions emitted as Cranelift IR (Cranelift has no exp/log/tanh instructions).
//!
//! Each function works on a scalar `f32` or on `f32x4` lanes: the caller passes the type. The
//! approximations and their measured error are listed in docs/jit-math.md; the tests in
//! tests/jit_math.rs measure the maximum error in ULP against an f64 reference.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, MemFlags, Type, Value, types};
use cranelift_frontend::FunctionBuilder;

use crate::ir::op::{BinaryOp, UnaryOp};
use crate::lower::loop_kernel::ElemTy;

/// Whether [`Emit::unary`] implements `op` for element type `ty`.
pub(crate) fn supports_unary(op: UnaryOp, ty: ElemTy) -> bool {
    matches!((op, ty), (UnaryOp::Exp | UnaryOp::Logistic | UnaryOp::Tanh, ElemTy::F32))
}

/// Whether [`Emit::binary`] implements `op` for element type `ty`.
pub(crate) fn supports_binary(_op: BinaryOp, _ty: ElemTy) -> bool {
    false
}

/// Lane-independent helpers for one element type (scalar or vector).
pub(crate) struct Emit<'a, 'b> {
    pub b: &'a mut FunctionBuilder<'b>,
    /// `F32` or `F32X4`.
    pub ty: Type,
}

impl Emit<'_, '_> {
    /// The transcendental unary `op` applied to `x`, or `None` when this module does not
    /// implement it (see [`supports_unary`]).
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Option<Value> {
        Some(match op {
            UnaryOp::Exp => self.exp(x),
            UnaryOp::Logistic => self.logistic(x),
            UnaryOp::Tanh => self.tanh(x),
            _ => return None,
        })
    }

    /// The transcendental binary `op` (Pow, Atan2) applied to `x, y`, or `None` when this module
    /// does not implement it (see [`supports_binary`]).
    pub fn binary(&mut self, op: BinaryOp, x: Value, y: Value) -> Option<Value> {
        let _ = (op, x, y);
        None
    }

    fn int_ty(&self) -> Type {
        if self.ty.is_vector() { types::I32X4 } else { types::I32 }
    }

    /// A constant of the element type (splatted for vectors).
    pub fn c(&mut self, v: f32) -> Value {
        self.cf(v as f64)
    }

    /// A constant given in f64, rounded to the lane type (f32 or f64).
    pub fn cf(&mut self, v: f64) -> Value {
        let s =
            if self.ty.lane_type() == types::F64 { self.b.ins().f64const(v) } else { self.b.ins().f32const(v as f32) };
        if self.ty.is_vector() { self.b.ins().splat(self.ty, s) } else { s }
    }

    fn ci(&mut self, v: i32) -> Value {
        let s = self.b.ins().iconst(types::I32, v as i64);
        if self.ty.is_vector() { self.b.ins().splat(types::I32X4, s) } else { s }
    }

    fn bits_to_float(&mut self, x: Value) -> Value {
        let flags = MemFlags::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        self.b.ins().bitcast(self.ty, flags, x)
    }

    /// `a * b + c` with one rounding (FMA instructions when the host has them).
    pub fn fma(&mut self, a: Value, b: Value, c: Value) -> Value {
        self.b.ins().fma(a, b, c)
    }

    /// Selects `t` where `cond(a, b)` holds, else `f`.
    pub fn select_cmp(&mut self, cc: FloatCC, a: Value, b: Value, t: Value, f: Value) -> Value {
        let m = self.b.ins().fcmp(cc, a, b);
        if self.ty.is_vector() {
            let flags = MemFlags::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
            let m = self.b.ins().bitcast(self.ty, flags, m);
            self.b.ins().bitselect(m, t, f)
        } else {
            self.b.ins().select(m, t, f)
        }
    }

    /// `mag` (non-negative) with the sign bit of `sgn`.
    fn with_sign_of(&mut self, mag: Value, sgn: Value) -> Value {
        if !self.ty.is_vector() {
            return self.b.ins().fcopysign(mag, sgn);
        }
        let flags = MemFlags::new().with_endianness(cranelift_codegen::ir::Endianness::Little);
        let ity = self.int_ty();
        let sb = self.b.ins().bitcast(ity, flags, sgn);
        let mb = self.b.ins().bitcast(ity, flags, mag);
        let mask = self.ci(i32::MIN);
        let s = self.b.ins().band(sb, mask);
        let r = self.b.ins().bor(mb, s);
        self.b.ins().bitcast(self.ty, flags, r)
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1]·x + …`.
    fn poly(&mut self, x: Value, coeffs: &[f32]) -> Value {
        let mut acc = self.c(coeffs[coeffs.len() - 1]);
        for &k in coeffs[..coeffs.len() - 1].iter().rev() {
            let kc = self.c(k);
            acc = self.fma(acc, x, kc);
        }
        acc
    }

    /// e^x. Range reduction `x = n·ln2 + r`, |r| ≤ ln2/2, degree-6 polynomial for e^r, and the
    /// scale 2^n applied in two halves so that results near the subnormal boundary and near
    /// f32::MAX are exact powers. Below −87.3365 (result subnormal) gives 0, above 88.7228 gives
    /// +Inf; NaN propagates.
    pub fn exp(&mut self, x: Value) -> Value {
        const LO: f32 = -87.336_55;
        const HI: f32 = 88.722_84;
        let lo = self.c(LO);
        let hi = self.c(HI);
        let xc = self.b.ins().fmax(x, lo);
        let xc = self.b.ins().fmin(xc, hi);
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
        let nx = self.b.ins().fneg(x);
        let e = self.exp(nx);
        let one = self.c(1.0);
        let d = self.b.ins().fadd(one, e);
        self.b.ins().fdiv(one, d)
    }

    /// tanh(x) = sign(x)·(1 − 2/(e^{2|x|} + 1)), with a polynomial for |x| < 0.4 where that
    /// form cancels; saturates to ±1 beyond |x| = 9.
    pub fn tanh(&mut self, x: Value) -> Value {
        let ax = self.b.ins().fabs(x);
        let nine = self.c(9.0);
        let axc = self.b.ins().fmin(ax, nine);
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
        // NaN: the comparison is false, so the result is signed_big, which is NaN (fmin propagates it).
        self.select_cmp(FloatCC::LessThan, ax, lim, small, signed_big)
    }
}
