//! The operations of the IR: one variant per op of the catalogue (§4, §5, §10) with its attributes.
//!
//! Operands are not stored here: a [`crate::ir::Node`] holds the op plus its input value ids in a
//! fixed order documented on each variant. Optional operands (bias, gamma, mask, …) are present
//! exactly when the matching `has_*` attribute is true, in the documented order.

use crate::ir::dtype::DType;
use crate::ir::ids::FuncId;
use crate::ir::shape::Shape;

/// Unary elementwise ops (§4.3). Operand: `x`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum UnaryOp {
    Abs,
    Neg,
    Sign,
    Ceil,
    Floor,
    Round,
    Exp,
    Expm1,
    Log,
    Log1p,
    Logistic,
    Sqrt,
    Rsqrt,
    Cos,
    Sin,
    Tanh,
    Erf,
    IsFinite,
    IsNaN,
    LogicalNot,
    BitwiseNot,
    BitCount,
    Clz,
    Real,
    Imag,
    Conj,
    Identity,
}

/// Every unary op, in declaration order.
pub const ALL_UNARY: [UnaryOp; 27] = {
    use UnaryOp::*;
    [
        Abs, Neg, Sign, Ceil, Floor, Round, Exp, Expm1, Log, Log1p, Logistic, Sqrt, Rsqrt, Cos, Sin, Tanh, Erf,
        IsFinite, IsNaN, LogicalNot, BitwiseNot, BitCount, Clz, Real, Imag, Conj, Identity,
    ]
};

/// Binary elementwise ops (§4.1) plus `Complex` (§4.4). Operands: `lhs, rhs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Pow,
    Atan2,
    Max,
    Min,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    ShiftLeft,
    ShiftRightArithmetic,
    ShiftRightLogical,
    /// `re + i·im`: F32 → C64, F64 → C128.
    Complex,
}

/// Every binary op, in declaration order.
pub const ALL_BINARY: [BinaryOp; 19] = {
    use BinaryOp::*;
    [
        Add,
        Sub,
        Mul,
        Div,
        Rem,
        Pow,
        Atan2,
        Max,
        Min,
        BitwiseAnd,
        BitwiseOr,
        BitwiseXor,
        LogicalAnd,
        LogicalOr,
        LogicalXor,
        ShiftLeft,
        ShiftRightArithmetic,
        ShiftRightLogical,
        Complex,
    ]
};

/// Comparison directions (§4.2). Output is Bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum CompareOp {
    Equal,
    NotEqual,
    GreaterOrEqual,
    GreaterThan,
    LessOrEqual,
    LessThan,
}

/// Every comparison direction.
pub const ALL_COMPARE: [CompareOp; 6] = {
    use CompareOp::*;
    [Equal, NotEqual, GreaterOrEqual, GreaterThan, LessOrEqual, LessThan]
};

/// Reductions over axes (§4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum ReduceKind {
    Sum,
    Product,
    Max,
    Min,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
}

/// Every reduce kind.
pub const ALL_REDUCE: [ReduceKind; 10] = {
    use ReduceKind::*;
    [Sum, Product, Max, Min, BitwiseAnd, BitwiseOr, BitwiseXor, LogicalAnd, LogicalOr, LogicalXor]
};

/// The arithmetic reductions used by ReduceWindow, Scatter, SelectAndScatter, AllReduce and the
/// cumulative ops (each op accepts the subset its section lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum ArithReduce {
    Sum,
    Product,
    Max,
    Min,
}

/// Padding of one axis for Pad (§4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PadAxis {
    /// Elements added before (negative: cropped).
    pub start: i64,
    /// Elements added after (negative: cropped).
    pub end: i64,
    /// Fill elements inserted between neighbours (≥ 0).
    pub interior: i64,
}

/// One output dimension of DynamicReshape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReshapeDim {
    /// A fixed size.
    Static(i64),
    /// A dynamic axis named `name` whose size is the next "value" operand (scalar int).
    Dynamic(String),
    /// The single axis inferred from the element count.
    Inferred(String),
}

/// Dimension numbers of ConvGeneral (§4.8). `S` = number of spatial axes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ConvAxes {
    /// Input batch axis.
    pub input_batch: usize,
    /// Input channel axis.
    pub input_channels: usize,
    /// Input spatial axes (S).
    pub input_spatial: Vec<usize>,
    /// Kernel input-channel axis.
    pub kernel_input_channels: usize,
    /// Kernel output-channel axis.
    pub kernel_output_channels: usize,
    /// Kernel spatial axes (S).
    pub kernel_spatial: Vec<usize>,
    /// Output batch axis.
    pub output_batch: usize,
    /// Output channel axis.
    pub output_channels: usize,
    /// Output spatial axes (S).
    pub output_spatial: Vec<usize>,
}

/// FFT kinds (§4.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum FftType {
    Forward,
    Inverse,
    ForwardReal,
    InverseReal,
}

/// Activations of the fused ops (§5). Discriminants follow the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Activation {
    /// Identity.
    #[default]
    None = 0,
    /// Exact (erf) GELU.
    Gelu = 1,
    /// max(x, 0), NaN kept.
    Relu = 2,
    /// x / (1 + e^−x).
    Silu = 3,
    /// x · clamp(x/6 + ½, 0, 1).
    HardSwish = 4,
    /// tanh.
    Tanh = 5,
}

/// Weight layout of FusedDense (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum DenseLayout {
    /// `w = [K, N…]`.
    #[default]
    InputOutputs = 0,
    /// `w = [N…, K]`.
    OutputsInput = 1,
}

/// Axis layout of attention tensors (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AttentionLayout {
    /// `[batch, heads, seq, head_dim]`.
    #[default]
    Bhsd = 0,
    /// `[batch, seq, heads, head_dim]`.
    Bshd = 1,
}

/// Quantization schemes (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum QuantScheme {
    /// `q·scale + zero_point`.
    #[default]
    Linear = 0,
    /// NF4 table lookup times scale.
    Nf4 = 1,
    /// llama.cpp GGML blocks.
    Ggml = 2,
}

/// GGML block types (§5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum GgmlType {
    #[default]
    Q4_0 = 0,
    Q8_0,
    Iq4Nl,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

/// Quantization parameters of FusedQuantizedDense / QuantizedEmbeddingLookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Quantization {
    /// The scheme.
    pub scheme: QuantScheme,
    /// Axis along which a scale block runs (must be 1 for Linear).
    pub block_axis: usize,
    /// Output columns that share one scale (Linear / NF4).
    pub block_size: usize,
    /// GGML block type (GGML only).
    pub ggml_type: GgmlType,
}

/// Constant payload: the raw little-endian bytes of the elements (packed for sub-byte dtypes).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConstData(pub std::sync::Arc<Vec<u8>>);

/// An operation with its attributes. The doc of each variant lists its operands in order and
/// its outputs when there is more than one.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Op {
    /// A literal tensor; no operands. The node's single output shape carries dtype and dims.
    Constant(ConstData),
    /// Unary elementwise op. Operands: `x`.
    Unary(UnaryOp),
    /// Binary elementwise op with broadcasting (§4.0). Operands: `lhs, rhs`.
    Binary(BinaryOp),
    /// Comparison. Operands: `lhs, rhs`. `total_order` selects the *TotalOrder variants.
    Compare {
        /// Direction.
        dir: CompareOp,
        /// Total order on floats (§4.2).
        total_order: bool,
    },
    /// `min(max(lo, x), hi)`. Operands: `lo, x, hi`.
    Clamp,
    /// Operands: `cond, on_true, on_false`.
    Where,
    /// Operands: `x`.
    ConvertDType {
        /// Target dtype.
        dtype: DType,
    },
    /// Raw bit reinterpretation. Operands: `x`.
    Bitcast {
        /// Target dtype.
        dtype: DType,
    },
    /// Operands: `x`.
    Reshape {
        /// Output dims.
        dims: Vec<i64>,
    },
    /// Operands: `x`, then one scalar int value per `Dynamic` spec, in order.
    DynamicReshape {
        /// One spec per output axis.
        specs: Vec<ReshapeDim>,
    },
    /// Operands: `x`.
    Transpose {
        /// `out[i] = in[perm[i]]`.
        perm: Vec<usize>,
    },
    /// Operands: `x`.
    BroadcastInDim {
        /// Output shape (its dtype equals x's).
        shape: Shape,
        /// Output axis of each x axis.
        axes: Vec<usize>,
    },
    /// Operands: one or more tensors.
    Concatenate {
        /// Concatenation axis.
        axis: usize,
    },
    /// Operands: `x`.
    Slice {
        /// Inclusive starts.
        starts: Vec<i64>,
        /// Exclusive limits.
        limits: Vec<i64>,
        /// Strides (≥ 1).
        strides: Vec<i64>,
    },
    /// Operands: `x`, then one scalar int start per axis.
    DynamicSlice {
        /// Output sizes.
        sizes: Vec<i64>,
    },
    /// Operands: `x, update`, then one scalar int start per axis.
    DynamicUpdateSlice,
    /// Operands: `x, fill` (scalar of x's dtype).
    Pad {
        /// Per-axis config for the leading axes (missing = 0).
        axes: Vec<PadAxis>,
    },
    /// Operands: `x`.
    Reverse {
        /// Axes to reverse.
        axes: Vec<usize>,
    },
    /// No operands.
    Iota {
        /// Output shape.
        shape: Shape,
        /// Axis whose index is the value.
        axis: usize,
    },
    /// Operands: `x`. Output: Int32 `[rank]`.
    DynamicShape,
    /// Operands: `x`. Output: Int32 scalar.
    DynamicDimensionSize {
        /// The axis.
        axis: usize,
    },
    /// Operands: `x`.
    Reduce {
        /// The reduction.
        kind: ReduceKind,
        /// Reduced axes, sorted and unique (the builder expands "no axes" to all axes).
        axes: Vec<usize>,
    },
    /// Operands: `x`.
    ArgMinMax {
        /// Reduced axis.
        axis: usize,
        /// Integer output dtype.
        out_dtype: DType,
        /// ArgMin if true, else ArgMax.
        is_min: bool,
    },
    /// Operands: `x`.
    ReduceWindow {
        /// Reduction.
        kind: ArithReduce,
        /// Window size per axis.
        window: Vec<i64>,
        /// Strides per axis (defaults filled in by the builder).
        strides: Vec<i64>,
        /// Input (base) dilations per axis.
        input_dilations: Vec<i64>,
        /// Window dilations per axis.
        window_dilations: Vec<i64>,
        /// (low, high) padding per axis.
        padding: Vec<(i64, i64)>,
    },
    /// Operands: `operand, source`.
    SelectAndScatter {
        /// Max or Min selection.
        kind: ArithReduce,
        /// Window size per axis.
        window: Vec<i64>,
        /// Strides per axis.
        strides: Vec<i64>,
        /// (low, high) padding per axis.
        padding: Vec<(i64, i64)>,
    },
    /// Operands: `operand, start_indices`.
    Gather {
        /// Axis of `start_indices` holding the index vector (= rank ⇒ implicit).
        index_vector_axis: usize,
        /// Output positions of the offset (non-collapsed) axes.
        offset_output_axes: Vec<usize>,
        /// Operand axes dropped from the output (slice size 1).
        collapsed_slice_axes: Vec<usize>,
        /// Operand axis addressed by each index-vector component.
        start_index_map: Vec<usize>,
        /// Slice size per operand axis.
        slice_sizes: Vec<i64>,
        /// Hint.
        indices_are_sorted: bool,
    },
    /// Operands: `operand, scatter_indices, updates`.
    Scatter {
        /// Sum, Max or Min.
        kind: ArithReduce,
        /// Axis of `scatter_indices` holding the index vector.
        index_vector_axis: usize,
        /// Axes of `updates` forming the window.
        update_window_axes: Vec<usize>,
        /// Operand axes with implicit window size 1.
        inserted_window_axes: Vec<usize>,
        /// Operand axis addressed by each index-vector component.
        scatter_axes_to_operand_axes: Vec<usize>,
        /// Hint.
        indices_are_sorted: bool,
        /// Hint.
        unique_indices: bool,
    },
    /// Operands: `lhs, rhs`.
    DotGeneral {
        /// Contracting axes of lhs.
        lhs_contracting: Vec<usize>,
        /// Batch axes of lhs.
        lhs_batch: Vec<usize>,
        /// Contracting axes of rhs.
        rhs_contracting: Vec<usize>,
        /// Batch axes of rhs.
        rhs_batch: Vec<usize>,
        /// Accumulation precision (None = default of §9).
        accumulator_dtype: Option<DType>,
        /// Output dtype (None = input dtype).
        output_dtype: Option<DType>,
    },
    /// Operands: `input, kernel`.
    ConvGeneral {
        /// Dimension numbers.
        axes: ConvAxes,
        /// Stride per spatial axis.
        strides: Vec<i64>,
        /// (low, high) padding per spatial axis (negative crops).
        padding: Vec<(i64, i64)>,
        /// Input dilation per spatial axis.
        input_dilations: Vec<i64>,
        /// Kernel dilation per spatial axis.
        kernel_dilations: Vec<i64>,
        /// Feature group count (≥ 1).
        channel_groups: i64,
        /// Batch group count (≥ 1).
        batch_groups: i64,
    },
    /// Operands: `x`.
    Fft {
        /// Kind.
        fft_type: FftType,
        /// Lengths of the transformed trailing axes (1..=3).
        lengths: Vec<i64>,
    },
    /// Operands: `x, scale, offset, mean, variance`.
    BatchNormInference {
        /// Epsilon.
        epsilon: f32,
        /// Feature axis.
        feature_axis: usize,
    },
    /// Operands: `x, scale, offset`. Outputs: `normalized, batch_mean, batch_var`.
    BatchNormTraining {
        /// Epsilon.
        epsilon: f32,
        /// Feature axis.
        feature_axis: usize,
    },
    /// Operands: `x, scale, mean, variance, grad_out`. Outputs: `grad_x, grad_scale, grad_offset`.
    BatchNormGradient {
        /// Epsilon.
        epsilon: f32,
        /// Feature axis.
        feature_axis: usize,
    },
    /// Operands: `state` (`U64[3]` or `U64[2]`). Outputs: `new_state, values`.
    RngBitGenerator {
        /// Shape of the random values.
        shape: Shape,
    },
    /// Operands: the callee's inputs. Outputs: the callee's outputs.
    Call {
        /// A named function of the module.
        func: FuncId,
    },
    /// Operands: the N tensors to sort. Outputs: the sorted tensors.
    Sort {
        /// Closure with 2N scalar params (interleaved lhs/rhs) returning scalar Bool.
        comparator: FuncId,
        /// Sorted axis (normalised to ≥ 0).
        axis: usize,
        /// Keep equal elements in input order.
        stable: bool,
    },
    /// Operands: the initial state. Outputs: the final state.
    While {
        /// Closure: state → scalar Bool.
        cond: FuncId,
        /// Closure: state → state.
        body: FuncId,
    },
    /// Operands: `pred` (scalar Bool). Outputs: the branch outputs.
    If {
        /// Closure without parameters run when `pred` is true.
        then_branch: FuncId,
        /// Closure without parameters run when `pred` is false.
        else_branch: FuncId,
    },
    /// Operands: any values. Outputs: the same values.
    OptimizationBarrier,
    /// Operands: `operand`, then the dependencies. Output: `operand`.
    SchedulingBarrier,
    /// Operands: tensors. Outputs: one reduced tensor per operand.
    AllReduce {
        /// Reduction.
        kind: ArithReduce,
        /// Device groups.
        replica_groups: Vec<Vec<usize>>,
    },
    /// Cumulative reduction (§10). Operands: `x`.
    Cumulative {
        /// Sum, Product, Max or Min.
        kind: ArithReduce,
        /// Axis.
        axis: usize,
        /// Element `i` excludes `x[i]`.
        exclusive: bool,
        /// Run from the end of the axis.
        reverse: bool,
    },
    /// Operands: `x`.
    FusedSoftmax {
        /// Normalised axis.
        axis: usize,
    },
    /// Operands: `x`.
    FusedGelu {
        /// Erf form if true, tanh approximation otherwise.
        exact: bool,
    },
    /// Operands: `x`, then `gamma` if `has_gamma`, then `beta` if `has_beta`.
    FusedLayerNorm {
        /// Normalised axes (sorted, unique, ≥ 0).
        axes: Vec<usize>,
        /// Epsilon.
        epsilon: f64,
        /// Whether a gamma operand follows.
        has_gamma: bool,
        /// Whether a beta operand follows.
        has_beta: bool,
    },
    /// Operands: `x, w`, then `bias` if `has_bias`.
    FusedDense {
        /// Activation applied last.
        activation: Activation,
        /// Layout of `w`.
        layout: DenseLayout,
        /// Whether a bias operand follows.
        has_bias: bool,
    },
    /// Operands: `q, k, v`, then `mask` if `has_mask`, `bias` if `has_bias`, then
    /// `query_seq_len, key_value_seq_len` if `has_seq_lens`. Output: `out` (no VJP states).
    FusedScaledDotProductAttention {
        /// BHSD or BSHD.
        layout: AttentionLayout,
        /// Score scale (0 ⇒ 1/√head_dim).
        scale: f64,
        /// Causal masking (query i sees keys j ≤ i).
        causal: bool,
        /// Mask operand present (Bool: true = attend; float: additive).
        has_mask: bool,
        /// Additive bias operand present.
        has_bias: bool,
        /// Per-batch sequence lengths present.
        has_seq_lens: bool,
        /// Hint, may be ignored.
        quantized_matmuls: bool,
    },
    /// Operands: `q, k, v, out, d_out` (and the forward's optional operands as flags say).
    /// Outputs: `dq, dk, dv`.
    FusedScaledDotProductAttentionVjp {
        /// BHSD or BSHD.
        layout: AttentionLayout,
        /// Score scale.
        scale: f64,
        /// Causal masking.
        causal: bool,
    },
    /// Operands: `x, w, scale`, then `zero_point` if `has_zero_point`, then `bias` if `has_bias`.
    /// GGML takes only `x, w` (+ bias).
    FusedQuantizedDense {
        /// Quantization parameters.
        quant: Quantization,
        /// Activation.
        activation: Activation,
        /// Whether a zero-point operand is present.
        has_zero_point: bool,
        /// Whether a bias operand is present.
        has_bias: bool,
    },
    /// Operands: `data, indices`.
    QuantizedEmbeddingLookup {
        /// Quantization parameters (GGML only).
        quant: Quantization,
    },
    /// Operands: `x, w_qkv`, then `bias_q`, `bias_k`, `bias_v` if their flags are set.
    /// Outputs: `q, k, v`.
    FusedAttentionQkvProjection {
        /// Width of q.
        q_dim: i64,
        /// Width of k and v.
        kv_dim: i64,
        /// bias_q present.
        has_bias_q: bool,
        /// bias_k present.
        has_bias_k: bool,
        /// bias_v present.
        has_bias_v: bool,
    },
}

use crate::ir::optype::OpType;

impl Op {
    /// The op kind (for capabilities, error messages and the text mnemonic).
    pub fn op_type(&self) -> OpType {
        use OpType as T;
        match self {
            Op::Constant(_) => T::Constant,
            Op::Unary(u) => match u {
                UnaryOp::Abs => T::Abs,
                UnaryOp::Neg => T::Neg,
                UnaryOp::Sign => T::Sign,
                UnaryOp::Ceil => T::Ceil,
                UnaryOp::Floor => T::Floor,
                UnaryOp::Round => T::Round,
                UnaryOp::Exp => T::Exp,
                UnaryOp::Expm1 => T::Expm1,
                UnaryOp::Log => T::Log,
                UnaryOp::Log1p => T::Log1p,
                UnaryOp::Logistic => T::Logistic,
                UnaryOp::Sqrt => T::Sqrt,
                UnaryOp::Rsqrt => T::Rsqrt,
                UnaryOp::Cos => T::Cos,
                UnaryOp::Sin => T::Sin,
                UnaryOp::Tanh => T::Tanh,
                UnaryOp::Erf => T::Erf,
                UnaryOp::IsFinite => T::IsFinite,
                UnaryOp::IsNaN => T::IsNaN,
                UnaryOp::LogicalNot => T::LogicalNot,
                UnaryOp::BitwiseNot => T::BitwiseNot,
                UnaryOp::BitCount => T::BitCount,
                UnaryOp::Clz => T::Clz,
                UnaryOp::Real => T::Real,
                UnaryOp::Imag => T::Imag,
                UnaryOp::Conj => T::Conj,
                UnaryOp::Identity => T::Identity,
            },
            Op::Binary(b) => match b {
                BinaryOp::Add => T::Add,
                BinaryOp::Sub => T::Sub,
                BinaryOp::Mul => T::Mul,
                BinaryOp::Div => T::Div,
                BinaryOp::Rem => T::Rem,
                BinaryOp::Pow => T::Pow,
                BinaryOp::Atan2 => T::Atan2,
                BinaryOp::Max => T::Max,
                BinaryOp::Min => T::Min,
                BinaryOp::BitwiseAnd => T::BitwiseAnd,
                BinaryOp::BitwiseOr => T::BitwiseOr,
                BinaryOp::BitwiseXor => T::BitwiseXor,
                BinaryOp::LogicalAnd => T::LogicalAnd,
                BinaryOp::LogicalOr => T::LogicalOr,
                BinaryOp::LogicalXor => T::LogicalXor,
                BinaryOp::ShiftLeft => T::ShiftLeft,
                BinaryOp::ShiftRightArithmetic => T::ShiftRightArithmetic,
                BinaryOp::ShiftRightLogical => T::ShiftRightLogical,
                BinaryOp::Complex => T::Complex,
            },
            Op::Compare { dir, total_order } => match (dir, total_order) {
                (CompareOp::Equal, false) => T::Equal,
                (CompareOp::NotEqual, false) => T::NotEqual,
                (CompareOp::GreaterOrEqual, false) => T::GreaterOrEqual,
                (CompareOp::GreaterThan, false) => T::GreaterThan,
                (CompareOp::LessOrEqual, false) => T::LessOrEqual,
                (CompareOp::LessThan, false) => T::LessThan,
                (CompareOp::Equal, true) => T::EqualTotalOrder,
                (CompareOp::NotEqual, true) => T::NotEqualTotalOrder,
                (CompareOp::GreaterOrEqual, true) => T::GreaterOrEqualTotalOrder,
                (CompareOp::GreaterThan, true) => T::GreaterThanTotalOrder,
                (CompareOp::LessOrEqual, true) => T::LessOrEqualTotalOrder,
                (CompareOp::LessThan, true) => T::LessThanTotalOrder,
            },
            Op::Clamp => T::Clamp,
            Op::Where => T::Where,
            Op::ConvertDType { .. } => T::ConvertDType,
            Op::Bitcast { .. } => T::Bitcast,
            Op::Reshape { .. } => T::Reshape,
            Op::DynamicReshape { .. } => T::DynamicReshape,
            Op::Transpose { .. } => T::Transpose,
            Op::BroadcastInDim { .. } => T::BroadcastInDim,
            Op::Concatenate { .. } => T::Concatenate,
            Op::Slice { .. } => T::Slice,
            Op::DynamicSlice { .. } => T::DynamicSlice,
            Op::DynamicUpdateSlice => T::DynamicUpdateSlice,
            Op::Pad { .. } => T::Pad,
            Op::Reverse { .. } => T::Reverse,
            Op::Iota { .. } => T::Iota,
            Op::DynamicShape => T::DynamicShape,
            Op::DynamicDimensionSize { .. } => T::DynamicDimensionSize,
            Op::Reduce { kind, .. } => match kind {
                ReduceKind::Sum => T::ReduceSum,
                ReduceKind::Product => T::ReduceProduct,
                ReduceKind::Max => T::ReduceMax,
                ReduceKind::Min => T::ReduceMin,
                ReduceKind::BitwiseAnd => T::ReduceBitwiseAnd,
                ReduceKind::BitwiseOr => T::ReduceBitwiseOr,
                ReduceKind::BitwiseXor => T::ReduceBitwiseXor,
                ReduceKind::LogicalAnd => T::ReduceLogicalAnd,
                ReduceKind::LogicalOr => T::ReduceLogicalOr,
                ReduceKind::LogicalXor => T::ReduceLogicalXor,
            },
            Op::ArgMinMax { .. } => T::ArgMinMax,
            Op::ReduceWindow { .. } => T::ReduceWindow,
            Op::SelectAndScatter { kind, .. } => match kind {
                ArithReduce::Max => T::SelectAndScatterMax,
                ArithReduce::Min => T::SelectAndScatterMin,
                _ => T::SelectAndScatterSum,
            },
            Op::Gather { .. } => T::Gather,
            Op::Scatter { kind, .. } => match kind {
                ArithReduce::Max => T::ScatterMax,
                ArithReduce::Min => T::ScatterMin,
                _ => T::ScatterSum,
            },
            Op::DotGeneral { .. } => T::DotGeneral,
            Op::ConvGeneral { .. } => T::ConvGeneral,
            Op::Fft { .. } => T::FFT,
            Op::BatchNormInference { .. } => T::BatchNormForInference,
            Op::BatchNormTraining { .. } => T::BatchNormForTraining,
            Op::BatchNormGradient { .. } => T::BatchNormGradient,
            Op::RngBitGenerator { .. } => T::RNGBitGenerator,
            Op::Call { .. } => T::Call,
            Op::Sort { .. } => T::Sort,
            Op::While { .. } => T::While,
            Op::If { .. } => T::If,
            Op::OptimizationBarrier => T::OptimizationBarrier,
            Op::SchedulingBarrier => T::SchedulingBarrier,
            Op::AllReduce { .. } => T::AllReduce,
            Op::Cumulative { kind, .. } => match kind {
                ArithReduce::Sum => T::CumSum,
                ArithReduce::Product => T::CumProd,
                ArithReduce::Max => T::CumMax,
                ArithReduce::Min => T::CumMin,
            },
            Op::FusedSoftmax { .. } => T::FusedSoftmax,
            Op::FusedGelu { .. } => T::FusedGelu,
            Op::FusedLayerNorm { .. } => T::FusedLayerNorm,
            Op::FusedDense { .. } => T::FusedDense,
            Op::FusedScaledDotProductAttention { .. } => T::FusedScaledDotProductAttention,
            Op::FusedScaledDotProductAttentionVjp { .. } => T::FusedScaledDotProductAttentionVJP,
            Op::FusedQuantizedDense { .. } => T::FusedQuantizedDense,
            Op::QuantizedEmbeddingLookup { .. } => T::QuantizedEmbeddingLookup,
            Op::FusedAttentionQkvProjection { .. } => T::FusedAttentionQKVProjection,
        }
    }

    /// The closures and functions this op refers to.
    pub fn callees(&self) -> Vec<FuncId> {
        match self {
            Op::Call { func } => vec![*func],
            Op::Sort { comparator, .. } => vec![*comparator],
            Op::While { cond, body } => vec![*cond, *body],
            Op::If { then_branch, else_branch } => vec![*then_branch, *else_branch],
            _ => vec![],
        }
    }
}
