//! `Function` methods for elementwise, shape-manipulation, reduction, cumulative and barrier ops.
//!
//! Each method builds an [`Op`] and appends it through the checked `push`, so shapes and dtypes
//! are inferred (and rejected) by [`crate::ir::infer`] before anything is added: a failing call
//! leaves the function unchanged. Semantics: catalogue §4.0–§4.6, §4.12, §9 and §10.

use std::collections::BTreeSet;

use crate::api::builder::{Function, Value};
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::module::Module;
use crate::ir::op::{ArithReduce, BinaryOp, CompareOp, Op, PadAxis, ReduceKind, ReshapeDim, UnaryOp};
use crate::ir::optype::OpType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// One output dimension of [`Function::dynamic_reshape`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReshapeSpec {
    /// A fixed size (≥ 0).
    Static(i64),
    /// A dynamic axis called `name` whose size is the runtime value of `value` (a scalar integer).
    Dynamic {
        /// The axis name (non-empty).
        name: String,
        /// Scalar integer holding the size.
        value: Value,
    },
    /// The one axis (at most) whose size is inferred from the element count.
    Inferred {
        /// The axis name (non-empty).
        name: String,
    },
}

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, x: Value) -> Result<Value> {
                self.unary(UnaryOp::$op, x)
            }
        )*
    };
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, lhs: Value, rhs: Value) -> Result<Value> {
                self.binary(BinaryOp::$op, lhs, rhs)
            }
        )*
    };
}

macro_rules! compare_methods {
    ($($(#[$doc:meta])* $name:ident => $dir:ident, $total:expr;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, lhs: Value, rhs: Value) -> Result<Value> {
                self.compare(CompareOp::$dir, $total, lhs, rhs)
            }
        )*
    };
}

macro_rules! reduce_methods {
    ($($(#[$doc:meta])* $name:ident => $kind:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, x: Value, axes: &[usize]) -> Result<Value> {
                self.reduce(ReduceKind::$kind, x, axes)
            }
        )*
    };
}

macro_rules! cumulative_methods {
    ($($(#[$doc:meta])* $name:ident => $kind:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, x: Value, axis: usize, exclusive: bool, reverse: bool) -> Result<Value> {
                self.cumulative(ArithReduce::$kind, x, axis, exclusive, reverse)
            }
        )*
    };
}

/// Re-attributes an error raised by a helper call (e.g. [`Function::shape`]) to `op`.
fn relabel(e: Error, op: OpType) -> Error {
    match e {
        Error::Invalid { msg, .. } => Error::invalid(op.to_string(), msg),
        other => other,
    }
}

/// Names of the dynamic axes of every parameter in the module: the names a new dynamic axis may use.
fn bound_axis_names(m: &Module) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in &m.functions {
        for &p in &f.params {
            let s = m.shape(p);
            for i in 0..s.rank() {
                if s.dims[i] == DYNAMIC_DIM {
                    out.insert(s.axis_name(i).to_string());
                }
            }
        }
    }
    out
}

/// Whether a dynamic axis name is bound: in `bound`, or a symbolic sum (`"=a+b+3"`) of bound names.
fn is_bound(name: &str, bound: &BTreeSet<String>) -> bool {
    match name.strip_prefix('=') {
        Some(sum) => sum.split('+').all(|t| t.parse::<i64>().is_ok() || bound.contains(t)),
        None => bound.contains(name),
    }
}

impl Function {
    /// The shape of `x`, with errors attributed to `op`.
    fn shape_for(&self, op: OpType, x: Value) -> Result<Shape> {
        self.shape(x).map_err(|e| relabel(e, op))
    }

    /// Errors unless every dynamic axis of `shape` not listed in `known` is bound by a parameter.
    fn check_new_dynamic_axes(&self, op: OpType, shape: &Shape, known: &BTreeSet<String>) -> Result<()> {
        if !shape.is_dynamic() {
            return Ok(());
        }
        let bound = self.with_module(bound_axis_names);
        for i in 0..shape.rank() {
            let name = shape.axis_name(i);
            if shape.dims[i] == DYNAMIC_DIM && !known.contains(name) && !is_bound(name, &bound) {
                return Err(Error::invalid(
                    op.to_string(),
                    format!("dynamic axis {i} ({name:?}) of {shape} is not bound by any parameter"),
                ));
            }
        }
        Ok(())
    }

    // --------------------------------------------------------------------------------------------
    // Unary elementwise (§4.3).

    /// Applies the unary elementwise op `op` to `x` (shape kept; dtype per the op's rule).
    pub fn unary(&self, op: UnaryOp, x: Value) -> Result<Value> {
        self.push1(Op::Unary(op), &[x])
    }

    unary_methods! {
        /// |x|; num dtypes (unsigned: identity); complex gives the real magnitude (C64 → F32).
        abs => Abs;
        /// −x; signed ints, floats and complex (int MIN → MIN).
        neg => Neg;
        /// −1, 0 or +1 by sign (NaN → NaN, ±0 kept; complex: x/|x|, 0 → 0).
        sign => Sign;
        /// Rounds towards +∞; floats only.
        ceil => Ceil;
        /// Rounds towards −∞; floats only.
        floor => Floor;
        /// Rounds to nearest, ties to even; floats only.
        round => Round;
        /// eˣ; floats or complex.
        exp => Exp;
        /// eˣ − 1, accurate near 0; floats or complex.
        expm1 => Expm1;
        /// Natural logarithm; floats or complex.
        log => Log;
        /// ln(1 + x), accurate near 0; floats or complex.
        log1p => Log1p;
        /// 1 / (1 + e⁻ˣ); floats or complex.
        logistic => Logistic;
        /// Square root; floats or complex.
        sqrt => Sqrt;
        /// 1 / √x; floats or complex.
        rsqrt => Rsqrt;
        /// Cosine; floats or complex.
        cos => Cos;
        /// Sine; floats or complex.
        sin => Sin;
        /// Hyperbolic tangent; floats or complex.
        tanh => Tanh;
        /// Error function; floats only.
        erf => Erf;
        /// Bool: false for ±Inf and NaN; floats only.
        is_finite => IsFinite;
        /// Bool: true where x is NaN (always false for integers); num dtypes.
        is_nan => IsNaN;
        /// Logical negation; Bool only.
        logical_not => LogicalNot;
        /// One's complement; non-packed integers.
        bitwise_not => BitwiseNot;
        /// Population count of the raw bits, same dtype; non-packed integers.
        bit_count => BitCount;
        /// Leading zero bits within the dtype width (Clz(0) = width); non-packed integers.
        clz => Clz;
        /// Real part (complex → real dtype; floats: x itself).
        real => Real;
        /// Imaginary part (complex → real dtype; floats: zeros).
        imag => Imag;
        /// Complex conjugate a − bi; complex only.
        conj => Conj;
        /// A copy of x; any dtype, packed ones included.
        identity => Identity;
    }

    // --------------------------------------------------------------------------------------------
    // Binary elementwise (§4.1) and comparisons (§4.2).

    /// Applies the binary elementwise op `op` with the broadcasting rule of §4.0 (same dtypes;
    /// a scalar broadcasts; otherwise equal ranks and dims equal or 1).
    pub fn binary(&self, op: BinaryOp, lhs: Value, rhs: Value) -> Result<Value> {
        self.push1(Op::Binary(op), &[lhs, rhs])
    }

    binary_methods! {
        /// lhs + rhs; num dtypes, ints wrap.
        add => Add;
        /// lhs − rhs; num dtypes, ints wrap.
        sub => Sub;
        /// lhs · rhs; num dtypes, ints wrap.
        mul => Mul;
        /// lhs / rhs; ints truncate toward zero (÷0 → −1 / all ones); num dtypes.
        div => Div;
        /// Remainder of truncated division (sign of the dividend; float = fmod); ints and floats.
        rem => Rem;
        /// lhs raised to rhs; num dtypes.
        pow => Pow;
        /// atan2(y = lhs, x = rhs), quadrant-aware; floats only.
        atan2 => Atan2;
        /// Elementwise maximum, NaN-propagating (complex: lexicographic); num dtypes.
        max => Max;
        /// Elementwise minimum, NaN-propagating (complex: lexicographic); num dtypes.
        min => Min;
        /// Bitwise and; non-packed integers.
        bitwise_and => BitwiseAnd;
        /// Bitwise or; non-packed integers.
        bitwise_or => BitwiseOr;
        /// Bitwise xor; non-packed integers.
        bitwise_xor => BitwiseXor;
        /// Logical and; Bool only.
        logical_and => LogicalAnd;
        /// Logical or; Bool only.
        logical_or => LogicalOr;
        /// Logical xor (inequality); Bool only.
        logical_xor => LogicalXor;
        /// lhs << rhs (amount ≥ width or negative → 0); non-packed integers.
        shift_left => ShiftLeft;
        /// Sign-filling right shift (unsigned filled with the top bit); non-packed integers.
        shift_right_arithmetic => ShiftRightArithmetic;
        /// Zero-filling right shift of the raw bits; non-packed integers.
        shift_right_logical => ShiftRightLogical;
        /// re + i·im: F32 → C64, F64 → C128 (equal shapes or one scalar).
        complex => Complex;
    }

    /// Compares lhs and rhs in direction `dir` (IEEE, or the float total order when
    /// `total_order`), broadcasting as binary ops; output Bool. Ordered directions reject complex.
    pub fn compare(&self, dir: CompareOp, total_order: bool, lhs: Value, rhs: Value) -> Result<Value> {
        self.push1(Op::Compare { dir, total_order }, &[lhs, rhs])
    }

    compare_methods! {
        /// lhs == rhs (IEEE: NaN ≠ NaN, −0 == +0); Bool output.
        equal => Equal, false;
        /// lhs != rhs (IEEE: NaN != anything); Bool output.
        not_equal => NotEqual, false;
        /// lhs ≥ rhs (IEEE; NaN → false); Bool output; no complex.
        greater_or_equal => GreaterOrEqual, false;
        /// lhs > rhs (IEEE; NaN → false); Bool output; no complex.
        greater_than => GreaterThan, false;
        /// lhs ≤ rhs (IEEE; NaN → false); Bool output; no complex.
        less_or_equal => LessOrEqual, false;
        /// lhs < rhs (IEEE; NaN → false); Bool output; no complex.
        less_than => LessThan, false;
        /// Bitwise-identical equality in the float total order (−0 ≠ +0, NaN = same NaN); Bool output.
        equal_total_order => Equal, true;
        /// Negation of `equal_total_order`; Bool output.
        not_equal_total_order => NotEqual, true;
        /// lhs ≥ rhs in the total order −NaN < −Inf < … < −0 < +0 < … < +Inf < +NaN; Bool output.
        greater_or_equal_total_order => GreaterOrEqual, true;
        /// lhs > rhs in the float total order; Bool output.
        greater_than_total_order => GreaterThan, true;
        /// lhs ≤ rhs in the float total order; Bool output.
        less_or_equal_total_order => LessOrEqual, true;
        /// lhs < rhs in the float total order; Bool output.
        less_than_total_order => LessThan, true;
    }

    // --------------------------------------------------------------------------------------------
    // Other elementwise and conversions (§4.4).

    /// min(max(min, x), max) elementwise; `min`/`max` are scalars or x-shaped, same dtype (ints,
    /// floats); NaN anywhere → NaN.
    pub fn clamp(&self, min: Value, x: Value, max: Value) -> Result<Value> {
        self.push1(Op::Clamp, &[min, x, max])
    }

    /// Selects `on_true` where `cond` (Bool) holds, else `on_false`; values of one dtype, equal
    /// shapes or scalars; cond scalar or of the output dims.
    pub fn where_(&self, cond: Value, on_true: Value, on_false: Value) -> Result<Value> {
        self.push1(Op::Where, &[cond, on_true, on_false])
    }

    /// Converts each element to `dtype` (float → int truncates and saturates, NaN → 0; any → Bool
    /// is x ≠ 0); dims kept.
    pub fn convert_dtype(&self, x: Value, dtype: DType) -> Result<Value> {
        self.push1(Op::ConvertDType { dtype }, &[x])
    }

    /// Reinterprets the raw bits as `dtype`: same width keeps dims; narrower appends an axis of
    /// `src_bits/dst_bits`; wider consumes a last axis of `dst_bits/src_bits`.
    pub fn bitcast(&self, x: Value, dtype: DType) -> Result<Value> {
        self.push1(Op::Bitcast { dtype }, &[x])
    }

    // --------------------------------------------------------------------------------------------
    // Shape manipulation (§4.5).

    /// Row-major reinterpretation with new `dims` (same element count; `-1` marks a dynamic
    /// output axis, which takes the names of x's dynamic axes in order).
    pub fn reshape(&self, x: Value, dims: &[i64]) -> Result<Value> {
        self.push1(Op::Reshape { dims: dims.to_vec() }, &[x])
    }

    /// Reshape whose output dims may be runtime values ([`ReshapeSpec::Dynamic`]) or inferred from
    /// the element count (at most one [`ReshapeSpec::Inferred`]); static result when possible.
    pub fn dynamic_reshape(&self, x: Value, specs: &[ReshapeSpec]) -> Result<Value> {
        let mut inputs = vec![x];
        let dims = specs
            .iter()
            .map(|s| match s {
                ReshapeSpec::Static(d) => ReshapeDim::Static(*d),
                ReshapeSpec::Dynamic { name, value } => {
                    inputs.push(*value);
                    ReshapeDim::Dynamic(name.clone())
                }
                ReshapeSpec::Inferred { name } => ReshapeDim::Inferred(name.clone()),
            })
            .collect();
        self.push1(Op::DynamicReshape { specs: dims }, &inputs)
    }

    /// Permutes the axes: `out.dims[i] = x.dims[perm[i]]`; `perm` is a permutation of `0..rank`.
    pub fn transpose(&self, x: Value, perm: &[usize]) -> Result<Value> {
        self.push1(Op::Transpose { perm: perm.to_vec() }, &[x])
    }

    /// Broadcasts x to `shape`: x axis i becomes output axis `axes[i]` (unique, any order), each x
    /// dim 1 or equal to the target dim; new dynamic axes must use names bound by a parameter.
    pub fn broadcast_in_dim(&self, x: Value, shape: &Shape, axes: &[usize]) -> Result<Value> {
        let op = OpType::BroadcastInDim;
        let xs = self.shape_for(op, x)?;
        let known: BTreeSet<String> =
            (0..xs.rank()).filter(|&i| xs.dims[i] == DYNAMIC_DIM).map(|i| xs.axis_name(i).to_string()).collect();
        self.check_new_dynamic_axes(op, shape, &known)?;
        self.push1(Op::BroadcastInDim { shape: shape.clone(), axes: axes.to_vec() }, &[x])
    }

    /// Joins `operands` (≥ 1, same dtype and rank ≥ 1, other dims equal) along `axis`.
    pub fn concatenate(&self, axis: usize, operands: &[Value]) -> Result<Value> {
        self.push1(Op::Concatenate { axis }, operands)
    }

    /// Strided slice `x[starts:limits:strides]` per axis; strict bounds `0 ≤ start ≤ limit ≤ dim`,
    /// stride ≥ 1; empty `strides` means all 1.
    pub fn slice(&self, x: Value, starts: &[i64], limits: &[i64], strides: &[i64]) -> Result<Value> {
        let strides =
            if strides.is_empty() { vec![1; self.shape_for(OpType::Slice, x)?.rank()] } else { strides.to_vec() };
        self.push1(Op::Slice { starts: starts.to_vec(), limits: limits.to_vec(), strides }, &[x])
    }

    /// Slice of `sizes` at runtime `starts` (one scalar integer per axis; negative → +dim, then
    /// clamped to `[0, dim − size]`).
    pub fn dynamic_slice(&self, x: Value, starts: &[Value], sizes: &[i64]) -> Result<Value> {
        let mut inputs = vec![x];
        inputs.extend_from_slice(starts);
        self.push1(Op::DynamicSlice { sizes: sizes.to_vec() }, &inputs)
    }

    /// x with `update` written at runtime `starts` (one scalar integer per axis, adjusted as in
    /// [`dynamic_slice`](Self::dynamic_slice)); output shape of x.
    pub fn dynamic_update_slice(&self, x: Value, update: Value, starts: &[Value]) -> Result<Value> {
        let mut inputs = vec![x, update];
        inputs.extend_from_slice(starts);
        self.push1(Op::DynamicUpdateSlice, &inputs)
    }

    /// Pads x with the scalar `fill`: per leading axis `start`/`end` elements (negative crops) and
    /// `interior` fills between neighbours; missing axes are not padded.
    pub fn pad(&self, x: Value, fill: Value, axes: &[PadAxis]) -> Result<Value> {
        self.push1(Op::Pad { axes: axes.to_vec() }, &[x, fill])
    }

    /// Reverses the order of the elements along each of `axes` (unique, in range).
    pub fn reverse(&self, x: Value, axes: &[usize]) -> Result<Value> {
        self.push1(Op::Reverse { axes: axes.to_vec() }, &[x])
    }

    /// A tensor of `shape` (rank ≥ 1, integer or float) whose value is the index along `axis`.
    pub fn iota(&self, shape: &Shape, axis: usize) -> Result<Value> {
        self.check_new_dynamic_axes(OpType::Iota, shape, &BTreeSet::new())?;
        self.push1(Op::Iota { shape: shape.clone(), axis }, &[])
    }

    /// The runtime dims of x as Int32 `[rank]`.
    pub fn dynamic_shape(&self, x: Value) -> Result<Value> {
        self.push1(Op::DynamicShape, &[x])
    }

    /// The runtime size of axis `axis` of x as an Int32 scalar.
    pub fn dynamic_dimension_size(&self, x: Value, axis: usize) -> Result<Value> {
        self.push1(Op::DynamicDimensionSize { axis }, &[x])
    }

    // --------------------------------------------------------------------------------------------
    // Reductions (§4.6) and cumulative ops (§10).

    /// Reduces x over `axes` (unique, in range, any order) with `kind`; an empty `axes` reduces
    /// every axis. Output: x dims without the reduced axes.
    pub fn reduce(&self, kind: ReduceKind, x: Value, axes: &[usize]) -> Result<Value> {
        let axes = if axes.is_empty() {
            let probe = Op::Reduce { kind, axes: vec![] };
            (0..self.shape_for(probe.op_type(), x)?.rank()).collect()
        } else {
            let mut a = axes.to_vec();
            a.sort_unstable();
            a
        };
        self.push1(Op::Reduce { kind, axes }, &[x])
    }

    reduce_methods! {
        /// Sum over `axes` (empty: all); identity 0; num dtypes.
        reduce_sum => Sum;
        /// Product over `axes` (empty: all); identity 1; num dtypes.
        reduce_product => Product;
        /// Maximum over `axes` (empty: all), NaN-propagating; identity lowest; num dtypes.
        reduce_max => Max;
        /// Minimum over `axes` (empty: all), NaN-propagating; identity highest; num dtypes.
        reduce_min => Min;
        /// Bitwise and over `axes` (empty: all); identity all ones; non-packed integers.
        reduce_bitwise_and => BitwiseAnd;
        /// Bitwise or over `axes` (empty: all); identity 0; non-packed integers.
        reduce_bitwise_or => BitwiseOr;
        /// Bitwise xor over `axes` (empty: all); identity 0; non-packed integers.
        reduce_bitwise_xor => BitwiseXor;
        /// Logical and over `axes` (empty: all); identity true; Bool.
        reduce_logical_and => LogicalAnd;
        /// Logical or over `axes` (empty: all); identity false; Bool.
        reduce_logical_or => LogicalOr;
        /// Parity (logical xor) over `axes` (empty: all); identity false; Bool.
        reduce_logical_xor => LogicalXor;
    }

    /// Index of the minimum (`is_min`) or maximum along `axis` (non-empty), as `out_dtype`
    /// (an integer dtype); ties and NaN → first index. x: ints or floats, not a scalar.
    pub fn arg_min_max(&self, x: Value, axis: usize, out_dtype: DType, is_min: bool) -> Result<Value> {
        self.push1(Op::ArgMinMax { axis, out_dtype, is_min }, &[x])
    }

    /// Running reduction `kind` along `axis`; `exclusive` leaves `x[i]` out of element `i` (the
    /// first is the identity), `reverse` runs from the end. Same shape and dtype (num, no Bool).
    pub fn cumulative(
        &self,
        kind: ArithReduce,
        x: Value,
        axis: usize,
        exclusive: bool,
        reverse: bool,
    ) -> Result<Value> {
        self.push1(Op::Cumulative { kind, axis, exclusive, reverse }, &[x])
    }

    cumulative_methods! {
        /// Running sum along `axis` (see [`cumulative`](Self::cumulative)).
        cum_sum => Sum;
        /// Running product along `axis` (see [`cumulative`](Self::cumulative)).
        cum_prod => Product;
        /// Running maximum along `axis`, NaN sticking from its position on.
        cum_max => Max;
        /// Running minimum along `axis`, NaN sticking from its position on.
        cum_min => Min;
    }

    // --------------------------------------------------------------------------------------------
    // Barriers (§4.12).

    /// Identity on one or more values that optimisations may not move computation across.
    pub fn optimization_barrier(&self, values: &[Value]) -> Result<Vec<Value>> {
        self.push(Op::OptimizationBarrier, values, None)
    }

    /// Identity on `x`, scheduled after every value of `deps` (any shapes and dtypes).
    pub fn scheduling_barrier(&self, x: Value, deps: &[Value]) -> Result<Value> {
        let mut inputs = vec![x];
        inputs.extend_from_slice(deps);
        self.push1(Op::SchedulingBarrier, &inputs)
    }
}
