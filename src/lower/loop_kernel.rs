//! `LoopKernel`: a fused elementwise loop body as a tiny SSA program, the unit the JIT compiles.
//!
//! A kernel reads `inputs` (each either a full array of the iteration length or a scalar that is
//! broadcast), evaluates `insts` in order for every element index, and writes `outputs`. All
//! values share one element type (`ty`); conversions and mixed types come later.

use crate::ir::op::{BinaryOp, CompareOp, UnaryOp};

/// Element type of a loop kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemTy {
    /// f32, vectorised as f32x4.
    F32,
    /// f64, vectorised as f64x2.
    F64,
}

/// How an input is read at element index `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `input[i]` (contiguous, same length as the iteration space).
    Full,
    /// `input[0]` for every `i` (a broadcast scalar).
    Scalar,
}

/// A register of the kernel program: the index of the instruction that produced it.
pub type Reg = usize;

/// One instruction of the loop body.
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// Reads input `n` at the current index.
    Load(usize),
    /// A constant (converted to the kernel's element type).
    Const(f64),
    /// An elementwise unary op.
    Unary(UnaryOp, Reg),
    /// An elementwise binary op.
    Binary(BinaryOp, Reg, Reg),
    /// `if cmp(a, b) { t } else { f }` — a comparison feeding a select.
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
}

/// A fused elementwise loop.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopKernel {
    /// Element type of every value.
    pub ty: ElemTy,
    /// How each input is read.
    pub inputs: Vec<Access>,
    /// The body, in SSA order.
    pub insts: Vec<Inst>,
    /// The registers stored to output 0, 1, …
    pub outputs: Vec<Reg>,
}

impl LoopKernel {
    /// A kernel of one element type over a flat iteration space: input `n` is read as
    /// `inputs[n]` says, `outputs[o]` is the register stored to output `o`.
    pub fn elementwise(ty: ElemTy, inputs: Vec<Access>, insts: Vec<Inst>, outputs: Vec<Reg>) -> LoopKernel {
        LoopKernel { ty, inputs, insts, outputs }
    }

    /// Checks that registers refer to earlier instructions and inputs exist.
    pub fn validate(&self) -> Result<(), String> {
        for (i, inst) in self.insts.iter().enumerate() {
            let regs: Vec<Reg> = match inst {
                Inst::Load(n) => {
                    if *n >= self.inputs.len() {
                        return Err(format!("inst {i}: load of input {n}, kernel has {}", self.inputs.len()));
                    }
                    vec![]
                }
                Inst::Const(_) => vec![],
                Inst::Unary(_, a) => vec![*a],
                Inst::Binary(_, a, b) => vec![*a, *b],
                Inst::Select { a, b, t, f, .. } => vec![*a, *b, *t, *f],
            };
            if let Some(r) = regs.iter().find(|&&r| r >= i) {
                return Err(format!("inst {i}: register {r} is not defined before use"));
            }
        }
        if let Some(r) = self.outputs.iter().find(|&&r| r >= self.insts.len()) {
            return Err(format!("output register {r} out of range"));
        }
        Ok(())
    }
}
