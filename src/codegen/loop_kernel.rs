//! `LoopKernel`: a fused loop body as a tiny typed SSA program, the unit the JIT compiles.
//!
//! A kernel iterates over a flat index space `0..len` (the caller runs any sub-range, so it can
//! split the work across threads). For every index `i` it reads its `inputs`, evaluates `insts` in
//! order and stores the `outputs` at element `i`.
//!
//! # Values and types
//!
//! Every register has a [`Ty`]: Bool, the eight native ints, F16, BF16, F32 or F64. In memory a
//! value takes `Ty::bytes()` bytes (Bool: one byte holding 0 or 1). In registers F16 and BF16 are
//! held as f32 values that are exactly representable in the half type: every instruction whose
//! result is a half type rounds its f32 result to nearest even, so a chain of half ops gives the
//! same bits as the reference kernels (which compute each op in f32 and round once); Bool is an
//! 8-bit integer 0/1.
//!
//! # Inputs
//!
//! Each input has an element type and an [`Access`]: read at `i` (`Full`), one element broadcast
//! to every `i` (`Scalar`), or through an index remapping (`Strided`): `i` is split row-major into
//! a multi-index of the view `dims` and the element read is `Σ idx[k]·strides[k]` (in elements),
//! which expresses transposes and broadcasts along any axes (stride 0).
//!
//! # Reductions
//!
//! A kernel with a [`Reduction`] ends in one or more reductions over the same axes. Its flat
//! index space is viewed as `[outer, red, inner]` (the reduced axes form the middle block) and it
//! iterates over the `outer·inner` *output* elements `j = o·inner + n` instead: for each `j` it
//! evaluates the body at every `i = (o·red + r)·inner + n`, `r in 0..red`, stores the plain
//! `outputs` at `i` as usual, and combines each reduced register into an accumulator that starts
//! at the reduction's identity and is stored at `j`. The caller's `start..end` range is then a
//! range of `j`. Half types accumulate in f32 and round once (as the reference kernels do).

use crate::ir::dtype::DType;
use crate::ir::op::{BinaryOp, CompareOp, ReduceKind, UnaryOp};

/// The float compute type the math emitters work in (F16/BF16 compute in F32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemTy {
    /// f32, vectorised as f32x4.
    F32,
    /// f64, vectorised as f64x2.
    F64,
}

/// The element type of one kernel value (in memory and, widened for halves, in registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Ty {
    /// One byte, 0 or 1.
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// IEEE binary16, computed in f32.
    F16,
    /// bfloat16, computed in f32.
    BF16,
    F32,
    F64,
}

impl Ty {
    /// The kernel type of dtype `d` (None for complex, packed and name-only dtypes).
    pub fn of(d: DType) -> Option<Ty> {
        Some(match d {
            DType::Bool => Ty::Bool,
            DType::Int8 => Ty::I8,
            DType::Int16 => Ty::I16,
            DType::Int32 => Ty::I32,
            DType::Int64 => Ty::I64,
            DType::Uint8 => Ty::U8,
            DType::Uint16 => Ty::U16,
            DType::Uint32 => Ty::U32,
            DType::Uint64 => Ty::U64,
            DType::Float16 => Ty::F16,
            DType::BFloat16 => Ty::BF16,
            DType::Float32 => Ty::F32,
            DType::Float64 => Ty::F64,
            _ => return None,
        })
    }

    /// The type of an [`ElemTy`].
    // Only `elementwise` and `supports` use it, for the crate's own tests.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn from_elem(e: ElemTy) -> Ty {
        match e {
            ElemTy::F32 => Ty::F32,
            ElemTy::F64 => Ty::F64,
        }
    }

    /// Bytes per element in memory.
    pub fn bytes(self) -> usize {
        match self {
            Ty::Bool | Ty::I8 | Ty::U8 => 1,
            Ty::I16 | Ty::U16 | Ty::F16 | Ty::BF16 => 2,
            Ty::I32 | Ty::U32 | Ty::F32 => 4,
            Ty::I64 | Ty::U64 | Ty::F64 => 8,
        }
    }

    /// Bytes per element in registers (halves are computed in f32).
    pub fn reg_bytes(self) -> usize {
        match self {
            Ty::F16 | Ty::BF16 => 4,
            t => t.bytes(),
        }
    }

    /// F16, BF16, F32 or F64.
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64)
    }

    /// The type values of this type are computed in (F32 for F16/BF16, which a chain of ops
    /// rounds per instruction but a reduction accumulates unrounded).
    pub fn compute_ty(self) -> Ty {
        if self.is_half() { Ty::F32 } else { self }
    }

    /// F16 or BF16.
    pub fn is_half(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16)
    }

    /// A native integer type (not Bool).
    pub fn is_int(self) -> bool {
        matches!(self, Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64 | Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64)
    }

    /// A signed integer type.
    pub fn is_signed(self) -> bool {
        matches!(self, Ty::I8 | Ty::I16 | Ty::I32 | Ty::I64)
    }

    /// The float compute type of a float type (F32 for F16/BF16/F32; None for others).
    pub fn float_elem(self) -> Option<ElemTy> {
        match self {
            Ty::F16 | Ty::BF16 | Ty::F32 => Some(ElemTy::F32),
            Ty::F64 => Some(ElemTy::F64),
            _ => None,
        }
    }
}

/// How an input is read at element index `i`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `input[i]` (contiguous, same length as the iteration space).
    Full,
    /// `input[0]` for every `i` (a broadcast scalar).
    Scalar,
    /// `input[Σ idx[k]·strides[k]]` where `idx` is `i` split row-major over `dims` (whose product
    /// is the iteration length). Strides are in elements; 0 on broadcast axes.
    Strided {
        /// The view the flat index is split over.
        dims: Vec<i64>,
        /// Element stride of each view axis.
        strides: Vec<i64>,
    },
}

/// A register of the kernel program: the index of the instruction that produced it.
pub type Reg = usize;

/// A constant's value (interpreted in the instruction's type).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lit {
    /// A float (rounded to the type: f32, or to the half type).
    Float(f64),
    /// An integer (its low bits are kept for narrower types; Bool: 0 or 1).
    Int(i128),
}

/// One instruction of the loop body.
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// Reads input `n` at the current index (type: the input's).
    Load(usize),
    /// A constant of type `ty`.
    Const(Ty, Lit),
    /// An elementwise unary op. IsFinite/IsNaN give Bool, the others the operand's type.
    Unary(UnaryOp, Reg),
    /// An elementwise binary op on two values of one type (shift amounts included).
    Binary(BinaryOp, Reg, Reg),
    /// An IEEE comparison (NaN compares unequal to everything), giving Bool.
    Compare(CompareOp, Reg, Reg),
    /// `if cmp(a, b) { t } else { f }` — a comparison feeding a select (float operands).
    Select {
        /// Comparison direction.
        dir: CompareOp,
        /// Left operand of the comparison.
        a: Reg,
        /// Right operand.
        b: Reg,
        /// Value where the comparison holds.
        t: Reg,
        /// Value elsewhere.
        f: Reg,
    },
    /// `if c { t } else { f }` with a Bool `c`.
    Where(Reg, Reg, Reg),
    /// ConvertDType to `Ty` with the reference kernels' semantics (§9).
    Convert(Reg, Ty),
    /// The index along `axis` of the view `dims` (the flat index split row-major), as I64.
    Iota {
        /// The view (its product is the iteration length).
        dims: Vec<i64>,
        /// The axis whose index is the value.
        axis: usize,
    },
}

/// A fused loop over a flat index space.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopKernel {
    /// Element type of each input.
    pub in_tys: Vec<Ty>,
    /// How each input is read.
    pub inputs: Vec<Access>,
    /// The body, in SSA order.
    pub insts: Vec<Inst>,
    /// The registers stored to output 0, 1, … (each in its register's type).
    pub outputs: Vec<Reg>,
    /// Reductions at the end of the loop (their outputs follow `outputs`), if any.
    pub reduce: Option<Reduction>,
}

/// The reductions ending a kernel: the iteration geometry and the reduced registers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reduction {
    /// Product of the kept axes before the reduced block.
    pub outer: usize,
    /// Product of the reduced axes (0: every output is the identity).
    pub red: usize,
    /// Product of the kept axes after the reduced block.
    pub inner: usize,
    /// Each reduction and the register it reduces; stored to outputs `outputs.len()`, … in turn.
    pub outputs: Vec<(ReduceKind, Reg)>,
    /// Float Sum/Product accumulate in element order (bit-identical to the reference kernels)
    /// rather than in vector partial sums.
    pub ordered: bool,
}

impl Reduction {
    /// Number of output elements (`outer·inner`), the kernel's iteration count.
    pub fn out_len(&self) -> usize {
        self.outer * self.inner
    }
}

/// The binary op combining two partial results of `kind` on type `ty`, if the JIT reduces it.
pub fn reduce_combine(kind: ReduceKind, ty: Ty) -> Option<BinaryOp> {
    let op = match kind {
        ReduceKind::Sum if ty != Ty::Bool => BinaryOp::Add,
        ReduceKind::Product if ty != Ty::Bool => BinaryOp::Mul,
        ReduceKind::Max if ty != Ty::Bool => BinaryOp::Max,
        ReduceKind::Min if ty != Ty::Bool => BinaryOp::Min,
        ReduceKind::BitwiseAnd if ty.is_int() => BinaryOp::BitwiseAnd,
        ReduceKind::BitwiseOr if ty.is_int() => BinaryOp::BitwiseOr,
        ReduceKind::BitwiseXor if ty.is_int() => BinaryOp::BitwiseXor,
        ReduceKind::LogicalAnd if ty == Ty::Bool => BinaryOp::LogicalAnd,
        ReduceKind::LogicalOr if ty == Ty::Bool => BinaryOp::LogicalOr,
        ReduceKind::LogicalXor if ty == Ty::Bool => BinaryOp::LogicalXor,
        _ => return None,
    };
    Some(op)
}

/// The identity of `kind` on type `ty` (the value of an empty reduction).
pub fn reduce_identity(kind: ReduceKind, ty: Ty) -> Lit {
    let (min, max): (i128, i128) = match ty {
        Ty::I8 => (i8::MIN as i128, i8::MAX as i128),
        Ty::I16 => (i16::MIN as i128, i16::MAX as i128),
        Ty::I32 => (i32::MIN as i128, i32::MAX as i128),
        Ty::I64 => (i64::MIN as i128, i64::MAX as i128),
        Ty::U8 => (0, u8::MAX as i128),
        Ty::U16 => (0, u16::MAX as i128),
        Ty::U32 => (0, u32::MAX as i128),
        Ty::U64 => (0, u64::MAX as i128),
        _ => (0, 1),
    };
    match (kind, ty.is_float()) {
        (ReduceKind::Sum, true) => Lit::Float(0.0),
        (ReduceKind::Product, true) => Lit::Float(1.0),
        (ReduceKind::Max, true) => Lit::Float(f64::NEG_INFINITY),
        (ReduceKind::Min, true) => Lit::Float(f64::INFINITY),
        (ReduceKind::Product, false) => Lit::Int(1),
        (ReduceKind::Max, false) => Lit::Int(min),
        (ReduceKind::Min, false) => Lit::Int(max),
        (ReduceKind::BitwiseAnd, _) => Lit::Int(-1),
        (ReduceKind::LogicalAnd, _) => Lit::Int(1),
        _ => Lit::Int(0),
    }
}

impl LoopKernel {
    /// A kernel of one float element type over a flat iteration space: input `n` is read as
    /// `inputs[n]` says, `outputs[o]` is the register stored to output `o`.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn elementwise(ty: ElemTy, inputs: Vec<Access>, insts: Vec<Inst>, outputs: Vec<Reg>) -> LoopKernel {
        LoopKernel { in_tys: vec![Ty::from_elem(ty); inputs.len()], inputs, insts, outputs, reduce: None }
    }

    /// Number of iterations the caller's `start..end` range covers: the elements for a plain
    /// kernel of `len` elements, the output elements for one with a [`Reduction`].
    pub fn iterations(&self, len: usize) -> usize {
        self.reduce.as_ref().map_or(len, Reduction::out_len)
    }

    /// The type of every register, or why the program is ill-typed (registers used before they
    /// are defined, missing inputs, mismatched operand types).
    pub fn types(&self) -> Result<Vec<Ty>, String> {
        if self.in_tys.len() != self.inputs.len() {
            return Err(format!("{} input types for {} inputs", self.in_tys.len(), self.inputs.len()));
        }
        let mut tys: Vec<Ty> = Vec::with_capacity(self.insts.len());
        for (i, inst) in self.insts.iter().enumerate() {
            let reg = |r: Reg| -> Result<Ty, String> {
                tys.get(r).copied().ok_or_else(|| format!("inst {i}: register {r} is not defined before use"))
            };
            let same = |a: Ty, b: Ty, what: &str| -> Result<(), String> {
                if a == b { Ok(()) } else { Err(format!("inst {i}: {what} operands have types {a:?} and {b:?}")) }
            };
            let t = match inst {
                Inst::Load(n) => *self
                    .in_tys
                    .get(*n)
                    .ok_or_else(|| format!("inst {i}: load of input {n}, kernel has {}", self.inputs.len()))?,
                Inst::Const(t, _) => *t,
                Inst::Unary(op, a) => {
                    let t = reg(*a)?;
                    if matches!(op, UnaryOp::IsFinite | UnaryOp::IsNaN) { Ty::Bool } else { t }
                }
                Inst::Binary(_, a, b) => {
                    let (x, y) = (reg(*a)?, reg(*b)?);
                    same(x, y, "binary")?;
                    x
                }
                Inst::Compare(_, a, b) => {
                    same(reg(*a)?, reg(*b)?, "compare")?;
                    Ty::Bool
                }
                Inst::Select { a, b, t, f, .. } => {
                    same(reg(*a)?, reg(*b)?, "select comparison")?;
                    let (x, y) = (reg(*t)?, reg(*f)?);
                    same(x, y, "select")?;
                    x
                }
                Inst::Where(c, t, f) => {
                    same(reg(*c)?, Ty::Bool, "where condition")?;
                    let (x, y) = (reg(*t)?, reg(*f)?);
                    same(x, y, "where")?;
                    x
                }
                Inst::Convert(a, to) => {
                    reg(*a)?;
                    *to
                }
                Inst::Iota { dims, axis } => {
                    if *axis >= dims.len() {
                        return Err(format!("inst {i}: iota axis {axis} of a rank-{} view", dims.len()));
                    }
                    Ty::I64
                }
            };
            tys.push(t);
        }
        if let Some(r) = self.outputs.iter().find(|&&r| r >= self.insts.len()) {
            return Err(format!("output register {r} out of range"));
        }
        if let Some(red) = &self.reduce {
            for &(kind, r) in &red.outputs {
                let t = *tys.get(r).ok_or_else(|| format!("reduced register {r} out of range"))?;
                if reduce_combine(kind, t).is_none() {
                    return Err(format!("reduction {kind:?} of a {t:?} register"));
                }
            }
        }
        for (n, a) in self.inputs.iter().enumerate() {
            if let Access::Strided { dims, strides } = a
                && dims.len() != strides.len()
            {
                return Err(format!("input {n}: {} strides for a rank-{} view", strides.len(), dims.len()));
            }
        }
        Ok(tys)
    }

    /// Checks that registers refer to earlier instructions, inputs exist and operand types agree.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn validate(&self) -> Result<(), String> {
        self.types().map(|_| ())
    }

    /// Element type of output `o`.
    // Only the crate's own tests and benches use it (feature `internals`).
    #[cfg_attr(not(feature = "internals"), allow(dead_code))]
    pub fn output_ty(&self, o: usize) -> Option<Ty> {
        let tys = self.types().ok()?;
        self.outputs.get(o).and_then(|&r| tys.get(r).copied())
    }
}
