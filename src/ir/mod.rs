//! The SSA tensor IR: dtypes, shapes, ops, the module arenas, shape inference, verifier and text format.

pub mod dtype;
pub mod dynamic;
pub mod ids;
pub mod infer;
pub mod module;
pub mod op;
pub mod optype;
pub mod shape;
pub mod text;
pub mod verify;

pub use dtype::{DType, Element};
pub use module::{FuncId, FunctionData, Module, Node, NodeId, ValueData, ValueDef, ValueId};
pub use op::Op;
pub use optype::OpType;
pub use shape::{DYNAMIC_DIM, Shape};
