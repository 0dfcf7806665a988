//! Cranelift code generation for [`LoopKernel`]s: an unrolled vector loop plus a scalar tail, or a
//! scalar loop.
//!
//! The generated function has the C signature
//! `fn(args: *const *mut u8, start: usize, end: usize)`: `args` holds the input pointers then
//! the output pointers, and the function processes flat element indices `start..end`, so the
//! caller can split the iteration space across threads.
//!
//! # Vector or scalar
//!
//! A kernel is *vectorised* (16-byte vectors: f32x4, f64x2, i32x4, i64x2, i16x8, i8x16, unrolled
//! up to [`UNROLL`] times, with a scalar tail; the unrolled copies of a short body walk the two
//! halves of the vector range side by side) when every value it touches — each input and output
//! in memory and each register — has one register width (F16/BF16 count as 32-bit: they are
//! computed in f32 lanes, loaded four halves at a time and widened, stored narrowed), every
//! `Strided` input's innermost view axis has stride 1 or 0 and an extent that is a multiple of
//! the lanes (a vector never straddles two runs; vector iterations start at multiples of the
//! lanes, so the caller's `start` must be one, as the executor's chunk boundaries are), it has no
//! `Iota`, and every instruction has a vector form here (integer Div/Rem, shifts,
//! BitCount/Clz, 8-bit multiplies and 64-bit Max/Min/Abs do not; conversions do between types
//! of one register width: int/Bool ↔ int/Bool, F16/BF16/F32 among themselves, and int/Bool ↔
//! float in 32-bit lanes). One mix of widths vectorises: Bool values in a 32-bit kernel without
//! reductions (an F32 compare whose Bool result is stored or feeds a Where) are kept as 32-bit
//! 0/1 lanes, loaded as 4 bytes and widened, stored narrowed. Everything else — other mixed
//! widths (an I32 → F64 convert, F32 ↔ F64, 64-bit int ↔ float), other remapped (strided)
//! inputs — runs a scalar loop.
//! When Cranelift rejects the vector form of a kernel the JIT retries it as a scalar loop
//! ([`build`] with `vector = false`).
//!
//! # Reductions
//!
//! A kernel with a [`Reduction`] runs `start..end` over output elements: for each one a loop
//! over the reduced extent evaluates the body and combines into accumulators (initialised to
//! the reduction's identity, combined in f32 for halves, stored once). When the reduced
//! elements of an output are contiguous (`inner == 1`) and the kernel vectorises, that loop is
//! vectorised with one vector accumulator per unrolled copy, folded lane by lane at the end;
//! float Sum/Product do so only when not `ordered` (vector partial sums reassociate). When the
//! kept axes after the reduced block hold whole vectors (`inner` a multiple of the lanes: a
//! channels-last pooling), a vector of consecutive outputs is reduced at a time instead, each
//! lane in element order (so bit-identical to the ordered sum), four vectors side by side
//! (independent add chains), with the element index and the offsets of strided inputs that
//! step evenly carried by the loop rather than divided out at every reduced position.
//!
//! # Semantics
//!
//! Every instruction matches the reference kernels bit for bit (NaN payloads aside): ints wrap;
//! int ÷ 0 gives −1 (all ones), `MIN / −1` wraps to `MIN`, int rem 0 gives the dividend; shift
//! amounts are read unsigned and amounts ≥ the width give 0 (arithmetic right: the sign fill);
//! float Max/Min propagate NaN and order −0 < +0; conversions follow §9 (float → int truncates
//! and saturates, NaN → 0; F64 → F16 rounds once through round-to-odd f32; to BF16 through f32);
//! F16/BF16 results are rounded to nearest even after every instruction that can leave the
//! type (not Max/Min/Neg/Abs/Ceil/Floor/Round/Sign), so an F16/BF16 register always holds a
//! value of its type and a store only re-encodes it. The half conversions stay in 32-bit lanes
//! (see [`Cg::round`]); f16 subnormals pass through f32 subnormals, so a thread that runs with
//! flush-to-zero / denormals-are-zero flushes them.
//! Register representation: see [`crate::codegen::loop_kernel`].

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{AbiParam, Block, InstBuilder, MemFlags, SourceLoc, Type, Value, types};
use cranelift_frontend::{FunctionBuilder, Variable};

use crate::codegen::loop_kernel::{
    Access, ElemTy, Inst, Lit, LoopKernel, Reduction, Ty, reduce_combine, reduce_identity,
};
use crate::codegen::math::{self, Emit};
use crate::ir::op::{BinaryOp, CompareOp, UnaryOp};

mod access;
mod halves;
mod ops;
mod reduce;

use reduce::{build_reduce, reduce_vectorizes, reduce_vectorizes_across};

/// Vectors processed per iteration of the main loop of a short body.
pub(crate) const UNROLL: i64 = 4;

/// Bodies with more instructions than this are not unrolled: they already have enough
/// independent work per vector, and four copies of a long body mostly cost compile time.
pub(crate) const UNROLL_MAX_INSTS: usize = 48;

/// The unroll factor used for `k`.
pub(crate) fn unroll_for(k: &LoopKernel) -> i64 {
    if k.insts.len() > UNROLL_MAX_INSTS { 1 } else { UNROLL }
}

/// Whether the JIT can emit `inst` in a kernel of float element type `ty` (operands of that
/// type).
// Only the crate's own tests and benches use it (feature `internals`).
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub fn supports(ty: ElemTy, inst: &Inst) -> bool {
    supports_typed(inst, Ty::from_elem(ty))
}

/// Whether the JIT can emit `inst` when its (first) operand has type `ty`; loads, constants,
/// selects, wheres, converts and iotas always can.
pub fn supports_typed(inst: &Inst, ty: Ty) -> bool {
    match inst {
        Inst::Load(_) | Inst::Const(..) | Inst::Select { .. } | Inst::Where(..) | Inst::Iota { .. } => true,
        Inst::Convert(..) | Inst::Compare(..) => true,
        Inst::Binary(op, ..) => supports_binary(*op, ty),
        Inst::Unary(op, _) => supports_unary(*op, ty),
    }
}

fn supports_binary(op: BinaryOp, ty: Ty) -> bool {
    use BinaryOp::*;
    match ty {
        Ty::Bool => matches!(op, LogicalAnd | LogicalOr | LogicalXor),
        t if t.is_int() => matches!(
            op,
            Add | Sub
                | Mul
                | Div
                | Rem
                | Max
                | Min
                | BitwiseAnd
                | BitwiseOr
                | BitwiseXor
                | ShiftLeft
                | ShiftRightArithmetic
                | ShiftRightLogical
        ),
        t => {
            matches!(op, Add | Sub | Mul | Div | Max | Min)
                || t.float_elem().is_some_and(|e| math::supports_binary(op, e) && !t.is_half())
        }
    }
}

fn supports_unary(op: UnaryOp, ty: Ty) -> bool {
    use UnaryOp::*;
    match ty {
        Ty::Bool => matches!(op, LogicalNot | IsNaN | Identity),
        t if t.is_int() => matches!(op, Abs | Neg | Sign | BitwiseNot | BitCount | Clz | IsNaN | Identity),
        t => {
            matches!(op, Neg | Abs | Sqrt | Rsqrt | Ceil | Floor | Round | Identity | Sign | IsFinite | IsNaN)
                // XLA rounds each step of a half Logistic; the fused f32 form would round once.
                || (t.float_elem().is_some_and(|e| math::supports_unary(op, e)) && !(t.is_half() && op == Logistic))
        }
    }
}

/// The register lane type of `ty`.
fn lane_ty(ty: Ty) -> Type {
    match ty {
        Ty::Bool | Ty::I8 | Ty::U8 => types::I8,
        Ty::I16 | Ty::U16 => types::I16,
        Ty::I32 | Ty::U32 => types::I32,
        Ty::I64 | Ty::U64 => types::I64,
        Ty::F16 | Ty::BF16 | Ty::F32 => types::F32,
        Ty::F64 => types::F64,
    }
}

fn with_lanes(t: Type, lanes: i64) -> Type {
    if lanes == 1 { t } else { t.by(lanes as u32).unwrap_or(t) }
}

fn float_cc(dir: CompareOp) -> FloatCC {
    match dir {
        CompareOp::Equal => FloatCC::Equal,
        CompareOp::NotEqual => FloatCC::NotEqual,
        CompareOp::GreaterOrEqual => FloatCC::GreaterThanOrEqual,
        CompareOp::GreaterThan => FloatCC::GreaterThan,
        CompareOp::LessOrEqual => FloatCC::LessThanOrEqual,
        CompareOp::LessThan => FloatCC::LessThan,
    }
}

fn int_cc(dir: CompareOp, signed: bool) -> IntCC {
    match (dir, signed) {
        (CompareOp::Equal, _) => IntCC::Equal,
        (CompareOp::NotEqual, _) => IntCC::NotEqual,
        (CompareOp::GreaterOrEqual, true) => IntCC::SignedGreaterThanOrEqual,
        (CompareOp::GreaterThan, true) => IntCC::SignedGreaterThan,
        (CompareOp::LessOrEqual, true) => IntCC::SignedLessThanOrEqual,
        (CompareOp::LessThan, true) => IntCC::SignedLessThan,
        (CompareOp::GreaterOrEqual, false) => IntCC::UnsignedGreaterThanOrEqual,
        (CompareOp::GreaterThan, false) => IntCC::UnsignedGreaterThan,
        (CompareOp::LessOrEqual, false) => IntCC::UnsignedLessThanOrEqual,
        (CompareOp::LessThan, false) => IntCC::UnsignedLessThan,
    }
}

/// The number of vector lanes `k` runs with (1: scalar loop). See the module docs.
pub(crate) fn vector_lanes(k: &LoopKernel, tys: &[Ty]) -> i64 {
    // Every value has one byte width, except that Bool values may sit in a 32-bit loop without
    // reductions (4 lanes: loaded as 4 bytes and widened, kept as 32-bit 0/1 lanes, stored
    // narrowed), e.g. an f32 compare whose Bool result is stored or feeds a Where.
    let all = || k.in_tys.iter().chain(tys);
    // Register widths: F16/BF16 are computed in f32 lanes (loaded as four halves and widened,
    // stored narrowed).
    let mut widths = all().filter(|&&t| t != Ty::Bool).map(|t| t.reg_bytes());
    let w = widths.next().unwrap_or(1);
    if widths.any(|x| x != w) {
        return 1;
    }
    if w != 1 && all().any(|&t| t == Ty::Bool) && (w != 4 || k.reduce.is_some()) {
        return 1;
    }
    for inst in &k.insts {
        let ok = match inst {
            Inst::Load(_) | Inst::Const(..) | Inst::Where(..) | Inst::Compare(..) | Inst::Select { .. } => true,
            Inst::Iota { .. } => false,
            Inst::Convert(a, to) => {
                // Same register width on both sides (checked above): int/Bool ↔ int/Bool,
                // float ↔ float (F16/BF16/F32), and int/Bool ↔ float in 32-bit lanes.
                let intish = |t: Ty| t.is_int() || t == Ty::Bool;
                let from = tys[*a];
                from == *to || intish(from) == intish(*to) || w == 4
            }
            Inst::Unary(op, a) => {
                let t = tys[*a];
                match op {
                    UnaryOp::BitCount | UnaryOp::Clz => false,
                    UnaryOp::Abs if t.is_int() => w < 8,
                    UnaryOp::IsFinite | UnaryOp::IsNaN => t.is_float(),
                    _ => true,
                }
            }
            Inst::Binary(op, a, _) => {
                let t = tys[*a];
                match op {
                    BinaryOp::Div | BinaryOp::Rem | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min if t.is_float() => {
                        true
                    }
                    BinaryOp::Div
                    | BinaryOp::Rem
                    | BinaryOp::ShiftLeft
                    | BinaryOp::ShiftRightArithmetic
                    | BinaryOp::ShiftRightLogical => false,
                    BinaryOp::Mul => w > 1,
                    BinaryOp::Max | BinaryOp::Min => w < 8,
                    _ => true,
                }
            }
        };
        if !ok {
            return 1;
        }
    }
    let lanes = (16 / w) as i64;
    // A strided input vectorises when every aligned vector of flat indices stays inside one run
    // of its innermost view axis and that axis is read contiguously (stride 1) or broadcast
    // (stride 0). In a row reduction the vector loop starts each row at j·red: it must also be
    // a multiple of the lanes.
    let strided = k.inputs.iter().filter_map(|a| match a {
        Access::Strided { dims, strides } => Some((dims, strides)),
        _ => None,
    });
    let mut any_strided = false;
    for (dims, strides) in strided {
        any_strided = true;
        let (Some(&d), Some(&st)) = (dims.last(), strides.last()) else { return 1 };
        if !(st == 0 || st == 1) || d % lanes != 0 {
            return 1;
        }
    }
    // Across outputs (`inner` a whole number of vectors) every vector starts aligned instead.
    let rows_misaligned = |r: &crate::codegen::loop_kernel::Reduction| {
        r.red as i64 % lanes != 0 && !(r.inner > 1 && r.inner as i64 % lanes == 0)
    };
    if any_strided && k.reduce.as_ref().is_some_and(rows_misaligned) {
        return 1;
    }
    lanes
}

/// Emission state for one copy of the body.
struct Cg<'a, 'b> {
    b: &'a mut FunctionBuilder<'b>,
    lanes: i64,
    ptr: Type,
}

impl Cg<'_, '_> {
    /// The register lane type of `ty` here: Bool lanes are as wide as the kernel's other lanes
    /// in a 4-lane (32-bit) vector loop, bytes otherwise (see `vector_lanes`).
    fn lt(&self, ty: Ty) -> Type {
        if ty == Ty::Bool && self.lanes == 4 { types::I32 } else { lane_ty(ty) }
    }

    fn rty(&self, ty: Ty) -> Type {
        with_lanes(self.lt(ty), self.lanes)
    }

    fn splat(&mut self, ty: Type, s: Value) -> Value {
        if self.lanes == 1 { s } else { self.b.ins().splat(with_lanes(ty, self.lanes), s) }
    }

    /// An integer constant of register type `ty` (low bits of `v`).
    fn iconst(&mut self, ty: Ty, v: i128) -> Value {
        let lt = self.lt(ty);
        let bits = lt.bits();
        let masked = if bits >= 64 { v as i64 } else { ((v as u64) & ((1u64 << bits) - 1)) as i64 };
        let s = self.b.ins().iconst(lt, masked);
        self.splat(lt, s)
    }

    /// A float constant of register type `ty` (F16/BF16 values rounded to the half type).
    fn fconst(&mut self, ty: Ty, v: f64) -> Value {
        let s = match ty {
            Ty::F64 => self.b.ins().f64const(v),
            Ty::F16 => self.b.ins().f32const(half::f16::from_f64(v).to_f32()),
            Ty::BF16 => self.b.ins().f32const(half::bf16::from_f64(v).to_f32()),
            _ => self.b.ins().f32const(v as f32),
        };
        let lt = lane_ty(ty);
        self.splat(lt, s)
    }

    fn emit_const(&mut self, ty: Ty, lit: Lit) -> Value {
        match (ty.is_float(), lit) {
            (true, Lit::Float(f)) => self.fconst(ty, f),
            (true, Lit::Int(i)) => self.fconst(ty, i as f64),
            (false, Lit::Int(i)) => self.iconst(ty, if ty == Ty::Bool { (i != 0) as i128 } else { i }),
            (false, Lit::Float(f)) => {
                let i = if ty == Ty::Bool { (f != 0.0) as i128 } else { f as i128 };
                self.iconst(ty, i)
            }
        }
    }

    /// A Bool register (0/1 lanes) from a comparison mask or scalar flag.
    fn bool_of_mask(&mut self, m: Value) -> Value {
        if self.lanes == 1 {
            return m; // scalar icmp/fcmp give an i8 0/1
        }
        let mt = self.b.func.dfg.value_type(m);
        let one = self.b.ins().iconst(mt.lane_type(), 1);
        let one = self.b.ins().splat(mt, one);
        self.b.ins().band(m, one)
    }

    /// The comparison of `a`, `b` (type `ty`): a scalar i8 0/1 or a lane mask.
    ///
    /// Float `>`/`>=` are emitted as `<`/`<=` with the operands swapped (the same ordered
    /// predicate): Cranelift's x86 backend turns `bitselect(a < b, a, b)` into one `minps` and
    /// `bitselect(b < a, a, b)` into one `maxps`, which the constant Max/Min selects rely on.
    fn compare(&mut self, dir: CompareOp, ty: Ty, a: Value, b: Value) -> Value {
        if ty.is_float() {
            match dir {
                CompareOp::GreaterThan => self.b.ins().fcmp(FloatCC::LessThan, b, a),
                CompareOp::GreaterOrEqual => self.b.ins().fcmp(FloatCC::LessThanOrEqual, b, a),
                _ => self.b.ins().fcmp(float_cc(dir), a, b),
            }
        } else {
            self.b.ins().icmp(int_cc(dir, ty.is_signed()), a, b)
        }
    }

    /// `m ? t : f` for a comparison result `m` (scalar flag or lane mask).
    fn select(&mut self, m: Value, t: Value, f: Value) -> Value {
        if self.lanes == 1 {
            return self.b.ins().select(m, t, f);
        }
        let tt = self.b.func.dfg.value_type(t);
        let m = if self.b.func.dfg.value_type(m) == tt {
            m
        } else {
            let flags = math::little_endian();
            self.b.ins().bitcast(tt, flags, m)
        };
        self.b.ins().bitselect(m, t, f)
    }
}

/// Per-kernel values computed once in the entry block.
struct Setup {
    in_ptrs: Vec<Value>,
    /// Hoisted register value of each `Scalar` input (scalar form).
    scalars: Vec<Option<Value>>,
    out_ptrs: Vec<Value>,
    /// Tag the plain outputs' 16-byte vector stores for non-temporal stores.
    stream: bool,
}

/// The element offset of a strided input at flat index `i`.
fn strided_offset(b: &mut FunctionBuilder, ptr: Type, i: Value, dims: &[i64], strides: &[i64]) -> Value {
    let mut off: Option<Value> = None;
    let mut inner = 1i64;
    let mut terms = vec![];
    for k in (0..dims.len()).rev() {
        terms.push((k, inner));
        inner = inner.saturating_mul(dims[k].max(1));
    }
    for (k, inner) in terms {
        if strides[k] == 0 || dims[k] <= 1 {
            continue;
        }
        let q = if inner == 1 { i } else { b.ins().udiv_imm(i, inner) };
        let idx = if k == 0 { q } else { b.ins().urem_imm(q, dims[k]) };
        let t = if strides[k] == 1 { idx } else { b.ins().imul_imm(idx, strides[k]) };
        off = Some(match off {
            Some(o) => b.ins().iadd(o, t),
            None => t,
        });
    }
    off.unwrap_or_else(|| b.ins().iconst(ptr, 0))
}

/// Emits the body for one element (lanes = 1) or one vector at flat index `i`, stores the plain
/// outputs there and returns every register's value.
fn emit_body(cg: &mut Cg, k: &LoopKernel, tys: &[Ty], s: &Setup, i: Value) -> Result<Vec<Value>, String> {
    emit_body_at(cg, k, tys, s, i, &[])
}

/// [`emit_body`] with the element offsets of some strided inputs given (`offsets[n]`, computed by
/// the caller from `i`) instead of derived from `i`.
fn emit_body_at(
    cg: &mut Cg,
    k: &LoopKernel,
    tys: &[Ty],
    s: &Setup,
    i: Value,
    offsets: &[Option<Value>],
) -> Result<Vec<Value>, String> {
    let ptr = cg.ptr;
    let mut regs: Vec<Value> = Vec::with_capacity(k.insts.len());
    for inst in &k.insts {
        let v = match inst {
            Inst::Load(n) => {
                let ty = k.in_tys[*n];
                match (&k.inputs[*n], s.scalars[*n]) {
                    (Access::Scalar, Some(sv)) => cg.broadcast(ty, sv),
                    (Access::Strided { dims, strides }, _) => {
                        // Vector form (see `vector_lanes`): the lanes share one run of the
                        // innermost axis, read contiguously or as one broadcast element.
                        let off = match offsets.get(*n) {
                            Some(&Some(off)) => off,
                            _ => strided_offset(cg.b, ptr, i, dims, strides),
                        };
                        let off = cg.b.ins().imul_imm(off, ty.bytes() as i64);
                        let addr = cg.b.ins().iadd(s.in_ptrs[*n], off);
                        if cg.lanes > 1 && strides.last() == Some(&0) {
                            let lanes = cg.lanes;
                            cg.lanes = 1;
                            let v = cg.load(ty, addr);
                            cg.lanes = lanes;
                            cg.broadcast(ty, v)
                        } else {
                            cg.load(ty, addr)
                        }
                    }
                    _ => {
                        let off = cg.b.ins().imul_imm(i, ty.bytes() as i64);
                        let addr = cg.b.ins().iadd(s.in_ptrs[*n], off);
                        cg.load(ty, addr)
                    }
                }
            }
            Inst::Const(ty, lit) => cg.emit_const(*ty, *lit),
            Inst::Unary(op, a) => cg.unary(*op, tys[*a], regs[*a])?,
            Inst::Binary(op, a, b) => cg.binary(*op, tys[*a], regs[*a], regs[*b])?,
            Inst::Compare(dir, a, b) => {
                let m = cg.compare(*dir, tys[*a], regs[*a], regs[*b]);
                cg.bool_of_mask(m)
            }
            Inst::Select { dir, a, b, t, f } => {
                let m = cg.compare(*dir, tys[*a], regs[*a], regs[*b]);
                cg.select(m, regs[*t], regs[*f])
            }
            Inst::Where(c, t, f) => {
                if cg.lanes == 1 {
                    cg.b.ins().select(regs[*c], regs[*t], regs[*f])
                } else {
                    let zero = cg.iconst(Ty::Bool, 0);
                    let m = cg.b.ins().icmp(IntCC::NotEqual, regs[*c], zero);
                    cg.select(m, regs[*t], regs[*f])
                }
            }
            Inst::Convert(a, to) => cg.convert(regs[*a], tys[*a], *to),
            Inst::Iota { dims, axis } => {
                let mut inner = 1i64;
                for &d in &dims[axis + 1..] {
                    inner = inner.saturating_mul(d.max(1));
                }
                let q = if inner == 1 { i } else { cg.b.ins().udiv_imm(i, inner) };
                let idx = if *axis == 0 { q } else { cg.b.ins().urem_imm(q, dims[*axis].max(1)) };
                if ptr == types::I64 { idx } else { cg.b.ins().uextend(types::I64, idx) }
            }
        };
        regs.push(v);
    }
    for (o, &r) in k.outputs.iter().enumerate() {
        let ty = tys[r];
        let off = cg.b.ins().imul_imm(i, ty.bytes() as i64);
        let addr = cg.b.ins().iadd(s.out_ptrs[o], off);
        cg.store(ty, regs[r], addr, s.stream);
    }
    Ok(regs)
}

/// Source location given to the vector stores that may become non-temporal: the JIT finds their
/// machine code through it (`MachBuffer` source-location ranges).
pub(crate) const STREAM_MARK: u32 = 0x5752;

/// Builds the Cranelift function for `k` into `b` (whose signature must be empty; it is set here).
/// With `vector = false` the kernel is emitted as a scalar loop whatever its types. With `stream`
/// (kernels without a reduction), the vector loop's 16-byte output stores are tagged with
/// [`STREAM_MARK`] and the kernel ends with a fence, so non-temporal stores patched in for them
/// are ordered before the kernel returns.
pub(crate) fn build(
    b: &mut FunctionBuilder,
    k: &LoopKernel,
    ptr: Type,
    vector: bool,
    stream: bool,
) -> Result<(), String> {
    let tys = k.types()?;
    for inst in &k.insts {
        let operand = match inst {
            Inst::Unary(_, a) | Inst::Binary(_, a, _) => tys[*a],
            _ => Ty::Bool,
        };
        if !supports_typed(inst, operand) {
            return Err(format!("instruction {inst:?} is not supported by the JIT for {operand:?}"));
        }
    }
    b.func.signature.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(ptr)]);
    let lanes = if vector { vector_lanes(k, &tys) } else { 1 };
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let args = b.block_params(entry)[0];
    let start = b.block_params(entry)[1];
    let end = b.block_params(entry)[2];
    let load_flags = MemFlags::trusted();
    let n_in = k.inputs.len();
    let mut in_ptrs = vec![];
    let mut scalars = vec![];
    for (i, acc) in k.inputs.iter().enumerate() {
        let p = b.ins().load(ptr, load_flags, args, (i as i32) * ptr.bytes() as i32);
        in_ptrs.push(p);
        scalars.push(match acc {
            Access::Scalar => Some(Cg { b: &mut *b, lanes: 1, ptr }.load(k.in_tys[i], p)),
            _ => None,
        });
    }
    let n_out = k.outputs.len() + k.reduce.as_ref().map_or(0, |r| r.outputs.len());
    let out_ptrs: Vec<Value> =
        (0..n_out).map(|o| b.ins().load(ptr, load_flags, args, ((n_in + o) as i32) * ptr.bytes() as i32)).collect();
    let stream = stream && vector && k.reduce.is_none();
    let setup = Setup { in_ptrs, scalars, out_ptrs, stream };
    if let Some(red) = &k.reduce {
        if reduce_vectorizes_across(red, &tys, lanes) {
            return build_reduce(b, k, red, &tys, &setup, ptr, (1, lanes), (start, end));
        }
        let lanes = if reduce_vectorizes(red, &tys) { lanes } else { 1 };
        return build_reduce(b, k, red, &tys, &setup, ptr, (lanes, 1), (start, end));
    }

    let i: Variable = b.declare_var(ptr);
    b.def_var(i, start);
    let thead = b.create_block();
    let tbody = b.create_block();
    let exit = b.create_block();
    if lanes > 1 {
        // Two streams: the vector range is cut into halves walked side by side, half the
        // unrolled copies in each, so one thread keeps twice as many memory streams in flight
        // (measured on a 16M f32 chain: +7–20% bandwidth on one thread, 2–9% on two).
        let unroll = unroll_for(k);
        let step = lanes * unroll;
        // Not for non-temporal stores: those want each line written whole before the next
        // (two interleaved streams writing half a line each ran at half the speed of one).
        let streams: i64 = if unroll % 2 == 0 && !setup.stream { 2 } else { 1 };
        let per = unroll / streams;
        // half = ((end - start) / step) * step / streams; the vector range is start..start + streams·half.
        let len = b.ins().isub(end, start);
        let q = b.ins().udiv_imm(len, step);
        let half = b.ins().imul_imm(q, step / streams);
        let mid = b.ins().iadd(start, half);
        let vec_end = if streams == 2 { b.ins().iadd(mid, half) } else { mid };
        let vhead: Block = b.create_block();
        let vbody = b.create_block();
        let vdone = b.create_block();
        b.ins().jump(vhead, &[]);

        b.switch_to_block(vhead);
        let iv = b.use_var(i);
        let c = b.ins().icmp(IntCC::UnsignedLessThan, iv, mid);
        b.ins().brif(c, vbody, &[], vdone, &[]);

        b.switch_to_block(vbody);
        let iv = b.use_var(i);
        for s in 0..streams {
            let base = if s == 0 { iv } else { b.ins().iadd(iv, half) };
            for u in 0..per {
                let iu = b.ins().iadd_imm(base, u * lanes);
                emit_body(&mut Cg { b: &mut *b, lanes, ptr }, k, &tys, &setup, iu)?;
            }
        }
        let next = b.ins().iadd_imm(iv, per * lanes);
        b.def_var(i, next);
        b.ins().jump(vhead, &[]);

        b.switch_to_block(vdone);
        b.def_var(i, vec_end);
        b.ins().jump(thead, &[]);
    } else {
        b.ins().jump(thead, &[]);
    }

    b.switch_to_block(thead);
    let iv = b.use_var(i);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, iv, end);
    b.ins().brif(c, tbody, &[], exit, &[]);

    b.switch_to_block(tbody);
    let iv = b.use_var(i);
    emit_body(&mut Cg { b: &mut *b, lanes: 1, ptr }, k, &tys, &setup, iv)?;
    let next = b.ins().iadd_imm(iv, 1);
    b.def_var(i, next);
    b.ins().jump(thead, &[]);

    b.switch_to_block(exit);
    if stream {
        b.ins().fence();
    }
    b.ins().return_(&[]);
    b.seal_all_blocks();
    Ok(())
}
