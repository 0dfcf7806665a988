//! The public, backend-neutral API: registry, `Backend`, `Builder`, `Function`, `Executable`, `Buffer`.

pub mod backend;
pub mod buffer;
pub mod builder;
pub mod collective;
mod ops_basic;
mod ops_structured;
pub mod profile;
pub mod report;

pub use backend::{
    Backend, CancelToken, Capabilities, CompileReport, ConstantMemory, ExecOptions, Executable, check_inputs,
    check_output_buffers,
};
pub use buffer::Buffer;
pub use builder::{Builder, Function, Value};
pub use ops_basic::ReshapeSpec;
pub use ops_structured::{AttentionConfig, ConvConfig, DotConfig, GatherDims, ScatterDims};
pub use profile::{EventKind, KernelStats, ProfileEvent, Profiler};
pub use report::{ExecutionReport, SpecializationStats, StepReport};
