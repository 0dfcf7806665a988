//! Cranelift code generation for [`LoopKernel`]s: an unrolled vector loop plus a scalar tail.
//!
//! The generated function has the C signature
//! `fn(args: *const *mut u8, start: usize, end: usize)`: `args` holds the input pointers then
//! the output pointers, and the function processes element indices `start..end`, so the caller
//! can split the iteration space across threads.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{AbiParam, Block, InstBuilder, MemFlags, Type, Value, types};
use cranelift_frontend::{FunctionBuilder, Variable};

use crate::ir::op::{BinaryOp, CompareOp, UnaryOp};
use crate::jit::math::{self, Emit};
use crate::lower::loop_kernel::{Access, ElemTy, Inst, LoopKernel};

/// Vectors processed per iteration of the main loop of a short body.
pub(crate) const UNROLL: i64 = 4;

/// Bodies with more instructions than this are not unrolled: they already have enough
/// independent work per vector, and four copies of a long body mostly cost compile time.
pub(crate) const UNROLL_MAX_INSTS: usize = 48;

/// The unroll factor used for `k`.
pub(crate) fn unroll_for(k: &LoopKernel) -> i64 {
    if k.insts.len() > UNROLL_MAX_INSTS { 1 } else { UNROLL }
}

fn lane_types(ty: ElemTy) -> (Type, Type, i64) {
    match ty {
        ElemTy::F32 => (types::F32, types::F32X4, 4),
        ElemTy::F64 => (types::F64, types::F64X2, 2),
    }
}

/// Whether the JIT can emit `inst` for element type `ty` (others fall back to reference kernels).
pub fn supports(ty: ElemTy, inst: &Inst) -> bool {
    match inst {
        Inst::Load(_) | Inst::Const(_) | Inst::Select { .. } => true,
        Inst::Binary(op, ..) => {
            matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min)
                || math::supports_binary(*op, ty)
        }
        Inst::Unary(op, _) => match op {
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Ceil
            | UnaryOp::Floor
            | UnaryOp::Round
            | UnaryOp::Identity => true,
            other => math::supports_unary(*other, ty),
        },
    }
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

/// Emits the body for one element (scalar `ty`) or one vector (vector `ty`) at byte offset `off`.
fn emit_body(
    b: &mut FunctionBuilder,
    k: &LoopKernel,
    ty: Type,
    in_ptrs: &[Value],
    scalars: &[Option<Value>],
    out_ptrs: &[Value],
    off: Value,
) -> Result<(), String> {
    let flags = MemFlags::new().with_notrap();
    let mut regs: Vec<Value> = Vec::with_capacity(k.insts.len());
    for inst in &k.insts {
        let v = match inst {
            Inst::Load(n) => match (k.inputs[*n], scalars[*n]) {
                (Access::Scalar, Some(s)) => {
                    if ty.is_vector() {
                        b.ins().splat(ty, s)
                    } else {
                        s
                    }
                }
                _ => {
                    let addr = b.ins().iadd(in_ptrs[*n], off);
                    b.ins().load(ty, flags, addr, 0)
                }
            },
            Inst::Const(c) => Emit { b, ty }.cf(*c),
            Inst::Unary(op, a) => {
                let a = regs[*a];
                let mut e = Emit { b, ty };
                match op {
                    UnaryOp::Neg => e.b.ins().fneg(a),
                    UnaryOp::Abs => e.b.ins().fabs(a),
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
                    other => match e.unary(*other, a) {
                        Some(v) => v,
                        None => return Err(format!("unary {other:?} is not supported by the JIT")),
                    },
                }
            }
            Inst::Binary(op, x, y) => {
                let (x, y) = (regs[*x], regs[*y]);
                match op {
                    BinaryOp::Add => b.ins().fadd(x, y),
                    BinaryOp::Sub => b.ins().fsub(x, y),
                    BinaryOp::Mul => b.ins().fmul(x, y),
                    BinaryOp::Div => b.ins().fdiv(x, y),
                    BinaryOp::Max => b.ins().fmax(x, y),
                    BinaryOp::Min => b.ins().fmin(x, y),
                    other => match (Emit { b, ty }).binary(*other, x, y) {
                        Some(v) => v,
                        None => return Err(format!("binary {other:?} is not supported by the JIT")),
                    },
                }
            }
            Inst::Select { dir, a, b: bb, t, f } => {
                let (a, bb, t, f) = (regs[*a], regs[*bb], regs[*t], regs[*f]);
                Emit { b, ty }.select_cmp(float_cc(*dir), a, bb, t, f)
            }
        };
        regs.push(v);
    }
    for (o, &r) in k.outputs.iter().enumerate() {
        let addr = b.ins().iadd(out_ptrs[o], off);
        b.ins().store(flags, regs[r], addr, 0);
    }
    Ok(())
}

/// Builds the Cranelift function for `k` into `b` (whose signature must be empty; it is set here).
pub(crate) fn build(b: &mut FunctionBuilder, k: &LoopKernel, ptr: Type) -> Result<(), String> {
    k.validate()?;
    if let Some(inst) = k.insts.iter().find(|i| !supports(k.ty, i)) {
        return Err(format!("instruction {inst:?} is not supported by the JIT for {:?}", k.ty));
    }
    b.func.signature.params.extend([AbiParam::new(ptr), AbiParam::new(ptr), AbiParam::new(ptr)]);
    let (sty, vty, lanes) = lane_types(k.ty);
    let esize = sty.bytes() as i64;
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
            Access::Scalar => Some(b.ins().load(sty, MemFlags::new().with_notrap(), p, 0)),
            Access::Full => None,
        });
    }
    let out_ptrs: Vec<Value> = (0..k.outputs.len())
        .map(|o| b.ins().load(ptr, load_flags, args, ((n_in + o) as i32) * ptr.bytes() as i32))
        .collect();

    let i: Variable = b.declare_var(ptr);
    b.def_var(i, start);
    let unroll = unroll_for(k);
    let step = lanes * unroll;
    // vec_end = start + ((end - start) / step) * step
    let len = b.ins().isub(end, start);
    let q = b.ins().udiv_imm(len, step);
    let q = b.ins().imul_imm(q, step);
    let vec_end = b.ins().iadd(start, q);

    let vhead: Block = b.create_block();
    let vbody = b.create_block();
    let thead = b.create_block();
    let tbody = b.create_block();
    let exit = b.create_block();
    b.ins().jump(vhead, &[]);

    b.switch_to_block(vhead);
    let iv = b.use_var(i);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, iv, vec_end);
    b.ins().brif(c, vbody, &[], thead, &[]);

    b.switch_to_block(vbody);
    let iv = b.use_var(i);
    let base = b.ins().imul_imm(iv, esize);
    for u in 0..unroll {
        let off = b.ins().iadd_imm(base, u * lanes * esize);
        emit_body(b, k, vty, &in_ptrs, &scalars, &out_ptrs, off)?;
    }
    let next = b.ins().iadd_imm(iv, step);
    b.def_var(i, next);
    b.ins().jump(vhead, &[]);

    b.switch_to_block(thead);
    let iv = b.use_var(i);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, iv, end);
    b.ins().brif(c, tbody, &[], exit, &[]);

    b.switch_to_block(tbody);
    let iv = b.use_var(i);
    let off = b.ins().imul_imm(iv, esize);
    emit_body(b, k, sty, &in_ptrs, &scalars, &out_ptrs, off)?;
    let next = b.ins().iadd_imm(iv, 1);
    b.def_var(i, next);
    b.ins().jump(thead, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    Ok(())
}
