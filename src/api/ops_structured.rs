//! `Function` methods for windows, gather/scatter, dot, conv, FFT, batch norm, RNG, control flow,
//! collectives and fused ops, with the config structs they take.
//!
//! Each method fills in attribute defaults (so the stored op is explicit), checks what only the
//! API can see (closures of this very function, optional operands), then goes through
//! [`Function::push`], where shape inference does the remaining checks. A rejected call leaves
//! the module unchanged.

use crate::api::builder::{Function, Value};
use crate::bail;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::op::{
    Activation, ArithReduce, AttentionLayout, ConvAxes, DenseLayout, FftType, Op, QuantScheme, Quantization,
};
use crate::ir::shape::Shape;

/// Dimension numbers of [`Function::gather`] (catalogue §4.7).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatherDims {
    /// Axis of the start indices holding the index vector (= their rank ⇒ implicit size-1 axis).
    pub index_vector_axis: usize,
    /// Output positions (ascending) of the non-collapsed operand axes.
    pub offset_output_axes: Vec<usize>,
    /// Operand axes (ascending, slice size 1) dropped from the output.
    pub collapsed_slice_axes: Vec<usize>,
    /// Operand axis addressed by each index-vector component.
    pub start_index_map: Vec<usize>,
    /// Slice size per operand axis.
    pub slice_sizes: Vec<i64>,
    /// Hint: the indices are sorted.
    pub indices_are_sorted: bool,
}

/// Dimension numbers of the scatter ops (catalogue §4.7).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScatterDims {
    /// Axis of the indices holding the index vector (= their rank ⇒ implicit size-1 axis).
    pub index_vector_axis: usize,
    /// Axes of `updates` (ascending) forming the update window.
    pub update_window_axes: Vec<usize>,
    /// Operand axes (ascending) with an implicit window size of 1.
    pub inserted_window_axes: Vec<usize>,
    /// Operand axis addressed by each index-vector component.
    pub scatter_axes_to_operand_axes: Vec<usize>,
    /// Hint: the indices are sorted.
    pub indices_are_sorted: bool,
    /// Hint: no index repeats.
    pub unique_indices: bool,
}

/// Precision options of [`Function::dot_general`]. `None` (or `Some(DType::Invalid)`) = default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DotConfig {
    /// Accumulation dtype (default: §9 — f32 for half types, the dtype itself otherwise).
    pub accumulator_dtype: Option<DType>,
    /// Output dtype (default: the input dtype).
    pub output_dtype: Option<DType>,
}

/// Configuration of [`Function::conv_general`]. Empty vectors take the defaults (stride 1, no
/// padding, dilation 1); group counts ≤ 1 mean 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvConfig {
    /// Dimension numbers (which axis is batch, channels, spatial in input, kernel and output).
    pub axes: ConvAxes,
    /// Stride per spatial axis.
    pub strides: Vec<i64>,
    /// (low, high) padding per spatial axis; negative values crop.
    pub padding: Vec<(i64, i64)>,
    /// Input (lhs) dilation per spatial axis.
    pub input_dilations: Vec<i64>,
    /// Kernel (rhs) dilation per spatial axis.
    pub kernel_dilations: Vec<i64>,
    /// Feature group count.
    pub channel_groups: i64,
    /// Batch group count.
    pub batch_groups: i64,
}

/// Options of [`Function::fused_scaled_dot_product_attention`] (catalogue §5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionConfig {
    /// Score scale; 0 selects 1/√head_dim.
    pub scale: f64,
    /// Query i attends only keys j ≤ i.
    pub causal: bool,
    /// Bool (true = attend) or additive float mask, rank 2–4, broadcast to `[B, H, S, Skv]`.
    pub mask: Option<Value>,
    /// Additive float bias, rank 2–4, broadcast to `[B, H, S, Skv]`.
    pub bias: Option<Value>,
    /// `(query_seq_len, key_value_seq_len)`, both Int32 `[B]`.
    pub seq_lens: Option<(Value, Value)>,
    /// Hint that the matmuls may be quantized (may be ignored).
    pub quantized_matmuls: bool,
}

/// Replaces an empty per-axis list by `rank` copies of `default(axis)`.
fn or_default<T: Copy>(v: &[T], rank: usize, default: impl Fn(usize) -> T) -> Vec<T> {
    if v.is_empty() { (0..rank).map(default).collect() } else { v.to_vec() }
}

/// Normalises a possibly negative axis against `rank`.
fn norm_axis(op: &str, what: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!(op, "{what} {axis} out of range for rank {rank}");
    }
    Ok(if axis < 0 { (axis + r) as usize } else { axis as usize })
}

/// Treats `Some(DType::Invalid)` as unset.
fn unset_invalid(d: Option<DType>) -> Option<DType> {
    d.filter(|&d| d != DType::Invalid)
}

impl Function {
    /// The shape of an operand, with an error naming `op` if it is not from this builder.
    fn operand_shape(&self, op: &str, what: &str, v: Value) -> Result<Shape> {
        self.shape(v).map_err(|_| Error::invalid(op, format!("{what} ({}) belongs to another builder", v.id())))
    }

    /// Checks a closure argument of Sort/While/If: same builder, a closure (not a named
    /// function) whose parent is this function, already returned.
    fn check_closure(&self, op: &str, role: &str, f: &Function) -> Result<()> {
        if !self.same_builder(f) {
            bail!(op, "{role} belongs to another builder");
        }
        let (is_closure, parent, returned, label) = self.with_module(|m| {
            let d = m.func(f.id());
            (d.is_closure(), d.parent, d.outputs.is_some(), m.func_label(f.id()))
        });
        if !is_closure {
            bail!(op, "{role} is the named function {label:?}; a closure made with Function::closure is required");
        }
        if parent != Some(self.id()) {
            bail!(op, "{role} ({label}) must be a closure created from this function (via Function::closure)");
        }
        if !returned {
            bail!(op, "{role} ({label}) has not returned yet (call return_ on it first)");
        }
        Ok(())
    }

    /// Reduces each window of `x` with `kind` (Sum, Product, Max, Min). Empty `window` ⇒ all 1,
    /// empty `strides` ⇒ the window, empty dilations ⇒ 1, empty `padding` ⇒ 0; padding and
    /// dilation holes hold the reduction's identity; a window larger than the input gives size 0.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window(
        &self,
        x: Value,
        kind: ArithReduce,
        window: &[i64],
        strides: &[i64],
        input_dilations: &[i64],
        window_dilations: &[i64],
        padding: &[(i64, i64)],
    ) -> Result<Value> {
        let rank = self.operand_shape("ReduceWindow", "x", x)?.rank();
        let window = or_default(window, rank, |_| 1);
        let op = Op::ReduceWindow {
            kind,
            strides: or_default(strides, rank, |i| window.get(i).copied().unwrap_or(1)),
            input_dilations: or_default(input_dilations, rank, |_| 1),
            window_dilations: or_default(window_dilations, rank, |_| 1),
            padding: or_default(padding, rank, |_| (0, 0)),
            window,
        };
        self.push1(op, &[x])
    }

    /// For each window of `operand` selects one element (first maximum for Max, first minimum for
    /// Min) and adds the matching `source` value there; the output has the operand's shape and
    /// starts at 0. Defaults as in [`reduce_window`](Self::reduce_window) (no dilations).
    pub fn select_and_scatter(
        &self,
        operand: Value,
        source: Value,
        kind: ArithReduce,
        window: &[i64],
        strides: &[i64],
        padding: &[(i64, i64)],
    ) -> Result<Value> {
        let op_name = match kind {
            ArithReduce::Max => "SelectAndScatterMax",
            ArithReduce::Min => "SelectAndScatterMin",
            _ => bail!("SelectAndScatter", "selection kind must be Max or Min, got {kind:?}"),
        };
        let rank = self.operand_shape(op_name, "operand", operand)?.rank();
        let window = or_default(window, rank, |_| 1);
        let op = Op::SelectAndScatter {
            kind,
            strides: or_default(strides, rank, |i| window.get(i).copied().unwrap_or(1)),
            padding: or_default(padding, rank, |_| (0, 0)),
            window,
        };
        self.push1(op, &[operand, source])
    }

    /// Gathers slices of `operand` at the start positions in `start_indices` (XLA gather; starts
    /// are clamped so each slice lies inside the operand).
    pub fn gather(&self, operand: Value, start_indices: Value, dims: &GatherDims) -> Result<Value> {
        let op = Op::Gather {
            index_vector_axis: dims.index_vector_axis,
            offset_output_axes: dims.offset_output_axes.clone(),
            collapsed_slice_axes: dims.collapsed_slice_axes.clone(),
            start_index_map: dims.start_index_map.clone(),
            slice_sizes: dims.slice_sizes.clone(),
            indices_are_sorted: dims.indices_are_sorted,
        };
        self.push1(op, &[operand, start_indices])
    }

    /// Combines `updates` into a copy of `operand` at the positions in `indices` with `kind`
    /// (Sum, Max or Min; XLA scatter; windows partly out of bounds are skipped).
    pub fn scatter(
        &self,
        kind: ArithReduce,
        operand: Value,
        indices: Value,
        updates: Value,
        dims: &ScatterDims,
    ) -> Result<Value> {
        if kind == ArithReduce::Product {
            bail!("Scatter", "combiner must be Sum, Max or Min, got Product");
        }
        let op = Op::Scatter {
            kind,
            index_vector_axis: dims.index_vector_axis,
            update_window_axes: dims.update_window_axes.clone(),
            inserted_window_axes: dims.inserted_window_axes.clone(),
            scatter_axes_to_operand_axes: dims.scatter_axes_to_operand_axes.clone(),
            indices_are_sorted: dims.indices_are_sorted,
            unique_indices: dims.unique_indices,
        };
        self.push1(op, &[operand, indices, updates])
    }

    /// [`scatter`](Self::scatter) adding the updates (duplicates accumulate).
    pub fn scatter_sum(&self, operand: Value, indices: Value, updates: Value, dims: &ScatterDims) -> Result<Value> {
        self.scatter(ArithReduce::Sum, operand, indices, updates, dims)
    }

    /// [`scatter`](Self::scatter) keeping the maximum of operand and updates.
    pub fn scatter_max(&self, operand: Value, indices: Value, updates: Value, dims: &ScatterDims) -> Result<Value> {
        self.scatter(ArithReduce::Max, operand, indices, updates, dims)
    }

    /// [`scatter`](Self::scatter) keeping the minimum of operand and updates.
    pub fn scatter_min(&self, operand: Value, indices: Value, updates: Value, dims: &ScatterDims) -> Result<Value> {
        self.scatter(ArithReduce::Min, operand, indices, updates, dims)
    }

    /// Generalised matrix product: contracts `lhs_contracting[i]` with `rhs_contracting[i]`;
    /// output axes are the batch axes (in the order given), then lhs free, then rhs free axes.
    /// Output dtype = `config.output_dtype`, else the input dtype.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_general(
        &self,
        lhs: Value,
        lhs_contracting: &[usize],
        lhs_batch: &[usize],
        rhs: Value,
        rhs_contracting: &[usize],
        rhs_batch: &[usize],
        config: DotConfig,
    ) -> Result<Value> {
        let op = Op::DotGeneral {
            lhs_contracting: lhs_contracting.to_vec(),
            lhs_batch: lhs_batch.to_vec(),
            rhs_contracting: rhs_contracting.to_vec(),
            rhs_batch: rhs_batch.to_vec(),
            accumulator_dtype: unset_invalid(config.accumulator_dtype),
            output_dtype: unset_invalid(config.output_dtype),
        };
        self.push1(op, &[lhs, rhs])
    }

    /// Matrix product of `lhs` `[M, K]` and `rhs` `[K, N]` → `[M, N]` (a [`dot_general`](Self::dot_general)).
    pub fn matmul(&self, lhs: Value, rhs: Value) -> Result<Value> {
        let l = self.operand_shape("DotGeneral", "lhs", lhs)?;
        let r = self.operand_shape("DotGeneral", "rhs", rhs)?;
        if l.rank() != 2 || r.rank() != 2 {
            bail!("DotGeneral", "matmul needs rank-2 operands [M, K] x [K, N], got {l} and {r}");
        }
        self.dot_general(lhs, &[1], &[], rhs, &[0], &[], DotConfig::default())
    }

    /// Convolution (cross-correlation, no kernel flip) with strides, padding, dilations and
    /// channel/batch groups; spatial output size `floor((lo+hi+dilated input − dilated kernel)
    /// / stride) + 1`, or 0 when the kernel is larger.
    pub fn conv_general(&self, input: Value, kernel: Value, cfg: &ConvConfig) -> Result<Value> {
        let s = cfg.axes.input_spatial.len();
        let op = Op::ConvGeneral {
            axes: cfg.axes.clone(),
            strides: or_default(&cfg.strides, s, |_| 1),
            padding: or_default(&cfg.padding, s, |_| (0, 0)),
            input_dilations: or_default(&cfg.input_dilations, s, |_| 1),
            kernel_dilations: or_default(&cfg.kernel_dilations, s, |_| 1),
            channel_groups: cfg.channel_groups.max(1),
            batch_groups: cfg.batch_groups.max(1),
        };
        self.push1(op, &[input, kernel])
    }

    /// FFT over the last `lengths.len()` (1–3) axes: complex forward/inverse (inverse scaled by
    /// 1/∏lengths), real-to-complex (last dim → n/2+1) or complex-to-real (last dim → n).
    pub fn fft(&self, x: Value, fft_type: FftType, lengths: &[i64]) -> Result<Value> {
        self.push1(Op::Fft { fft_type, lengths: lengths.to_vec() }, &[x])
    }

    /// `(x − mean)·rsqrt(variance + epsilon)·scale + offset` with the 1-D parameters broadcast
    /// along `feature_axis`.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_inference(
        &self,
        x: Value,
        scale: Value,
        offset: Value,
        mean: Value,
        variance: Value,
        epsilon: f32,
        feature_axis: usize,
    ) -> Result<Value> {
        self.push1(Op::BatchNormInference { epsilon, feature_axis }, &[x, scale, offset, mean, variance])
    }

    /// Normalises `x` with the mean and biased variance over all axes but `feature_axis`;
    /// returns `(normalized, batch_mean, batch_var)`.
    pub fn batch_norm_training(
        &self,
        x: Value,
        scale: Value,
        offset: Value,
        epsilon: f32,
        feature_axis: usize,
    ) -> Result<(Value, Value, Value)> {
        let o = self.push(Op::BatchNormTraining { epsilon, feature_axis }, &[x, scale, offset], None)?;
        Ok((o[0], o[1], o[2]))
    }

    /// Gradients of batch normalisation given `grad_out`; returns `(grad_x, grad_scale,
    /// grad_offset)`.
    #[allow(clippy::too_many_arguments)]
    pub fn batch_norm_gradient(
        &self,
        x: Value,
        scale: Value,
        mean: Value,
        variance: Value,
        grad_out: Value,
        epsilon: f32,
        feature_axis: usize,
    ) -> Result<(Value, Value, Value)> {
        let inputs = [x, scale, mean, variance, grad_out];
        let o = self.push(Op::BatchNormGradient { epsilon, feature_axis }, &inputs, None)?;
        Ok((o[0], o[1], o[2]))
    }

    /// Philox-4x32-10 random bits: from `state` (Uint64 `[3]` or `[2]`) returns `(new_state,
    /// values)` with `values` of `shape` (any integer or float dtype).
    pub fn rng_bit_generator(&self, state: Value, shape: &Shape) -> Result<(Value, Value)> {
        let o = self.push(Op::RngBitGenerator { shape: shape.clone() }, &[state], None)?;
        Ok((o[0], o[1]))
    }

    /// Calls the named function `f` (same builder, already returned) with `inputs`, whose shapes
    /// must equal its parameters; returns its outputs.
    pub fn call(&self, f: &Function, inputs: &[Value]) -> Result<Vec<Value>> {
        if !self.same_builder(f) {
            bail!("Call", "callee belongs to another builder");
        }
        let (is_closure, returned, label) = self.with_module(|m| {
            let d = m.func(f.id());
            (d.is_closure(), d.outputs.is_some(), m.func_label(f.id()))
        });
        if is_closure {
            bail!("Call", "callee {label} is a closure; Call needs a named function (Builder::new_function)");
        }
        if !returned {
            bail!("Call", "callee {label:?} has not returned yet (call return_ on it first)");
        }
        self.push(Op::Call { func: f.id() }, inputs, None)
    }

    /// Sorts `inputs` (equal dims) along `axis` (negative counts from the end), all permuted
    /// alike; `comparator` is a closure of this function with 2N scalar parameters (lhs₀, rhs₀,
    /// lhs₁, rhs₁, …) returning a scalar Bool "lhs goes first".
    pub fn sort(&self, comparator: &Function, axis: i64, stable: bool, inputs: &[Value]) -> Result<Vec<Value>> {
        let Some(&first) = inputs.first() else { bail!("Sort", "needs at least one input") };
        let rank = self.operand_shape("Sort", "input 0", first)?.rank();
        let axis = norm_axis("Sort", "axis", axis, rank)?;
        self.check_closure("Sort", "comparator", comparator)?;
        self.push(Op::Sort { comparator: comparator.id(), axis, stable }, inputs, None)
    }

    /// `while cond(s) { s = body(s) }` starting from `initial`; `cond` and `body` are closures
    /// of this function taking the state (cond returns a scalar Bool, body the next state).
    pub fn while_(&self, cond: &Function, body: &Function, initial: &[Value]) -> Result<Vec<Value>> {
        self.check_closure("While", "cond", cond)?;
        self.check_closure("While", "body", body)?;
        self.push(Op::While { cond: cond.id(), body: body.id() }, initial, None)
    }

    /// Runs `then_branch` if the scalar Bool `pred` is true, else `else_branch` (parameterless
    /// closures of this function with outputs of equal shapes); returns the branch outputs.
    pub fn if_(&self, pred: Value, then_branch: &Function, else_branch: &Function) -> Result<Vec<Value>> {
        self.check_closure("If", "then branch", then_branch)?;
        self.check_closure("If", "else branch", else_branch)?;
        self.push(Op::If { then_branch: then_branch.id(), else_branch: else_branch.id() }, &[pred], None)
    }

    /// Reduces each operand elementwise with `kind` across the devices of each replica group;
    /// one output per operand, same shape.
    pub fn all_reduce(
        &self,
        operands: &[Value],
        kind: ArithReduce,
        replica_groups: &[Vec<usize>],
    ) -> Result<Vec<Value>> {
        self.push(Op::AllReduce { kind, replica_groups: replica_groups.to_vec() }, operands, None)
    }

    /// Numerically stable softmax of `x` along `axis` (≥ 0; a negative axis is an error).
    pub fn fused_softmax(&self, x: Value, axis: i64) -> Result<Value> {
        if axis < 0 {
            bail!("FusedSoftmax", "axis {axis} must be ≥ 0 (negative axes are not accepted)");
        }
        self.push1(Op::FusedSoftmax { axis: axis as usize }, &[x])
    }

    /// GELU of `x`: exact erf form if `exact`, else the tanh approximation.
    pub fn fused_gelu(&self, x: Value, exact: bool) -> Result<Value> {
        self.push1(Op::FusedGelu { exact }, &[x])
    }

    /// Layer normalisation over the joint `axes` (negatives count from the end, order ignored):
    /// `(x − mean)/√(var + epsilon)`, then `·gamma`, `+beta` (dims of the normalised axes).
    pub fn fused_layer_norm(
        &self,
        x: Value,
        axes: &[i64],
        epsilon: f64,
        gamma: Option<Value>,
        beta: Option<Value>,
    ) -> Result<Value> {
        let rank = self.operand_shape("FusedLayerNorm", "x", x)?.rank();
        let mut norm =
            axes.iter().map(|&a| norm_axis("FusedLayerNorm", "axis", a, rank)).collect::<Result<Vec<_>>>()?;
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            bail!("FusedLayerNorm", "axes {axes:?} repeat an axis (rank {rank})");
        }
        let op = Op::FusedLayerNorm { axes: norm, epsilon, has_gamma: gamma.is_some(), has_beta: beta.is_some() };
        let inputs: Vec<Value> = [Some(x), gamma, beta].into_iter().flatten().collect();
        self.push1(op, &inputs)
    }

    /// `activation(x·w + bias)`: x `[…, K]`; w `[K, N…]` (InputOutputs) or `[N…, K]`
    /// (OutputsInput); bias `[N…]`; output `[…, N…]`.
    pub fn fused_dense(
        &self,
        x: Value,
        w: Value,
        bias: Option<Value>,
        activation: Activation,
        layout: DenseLayout,
    ) -> Result<Value> {
        let op = Op::FusedDense { activation, layout, has_bias: bias.is_some() };
        let inputs: Vec<Value> = [Some(x), Some(w), bias].into_iter().flatten().collect();
        self.push1(op, &inputs)
    }

    /// `softmax(q·kᵀ·scale + bias + mask)·v` per batch and query head (grouped-query heads
    /// allowed); output = q's shape with v's head dim. Returns `(out, states)`; `states` for
    /// the VJP are empty in tensorjit.
    pub fn fused_scaled_dot_product_attention(
        &self,
        q: Value,
        k: Value,
        v: Value,
        layout: AttentionLayout,
        cfg: &AttentionConfig,
    ) -> Result<(Value, Vec<Value>)> {
        let op = Op::FusedScaledDotProductAttention {
            layout,
            scale: cfg.scale,
            causal: cfg.causal,
            has_mask: cfg.mask.is_some(),
            has_bias: cfg.bias.is_some(),
            has_seq_lens: cfg.seq_lens.is_some(),
            quantized_matmuls: cfg.quantized_matmuls,
        };
        let (ql, kvl) = match cfg.seq_lens {
            Some((a, b)) => (Some(a), Some(b)),
            None => (None, None),
        };
        let inputs: Vec<Value> =
            [Some(q), Some(k), Some(v), cfg.mask, cfg.bias, ql, kvl].into_iter().flatten().collect();
        Ok((self.push1(op, &inputs)?, vec![]))
    }

    /// Gradients `(dq, dk, dv)` of [`fused_scaled_dot_product_attention`](Self::fused_scaled_dot_product_attention)
    /// given its `out` and the output gradient `d_out`. Only `scale` and `causal` of `cfg` are
    /// supported (mask, bias and sequence lengths → NotImplemented); `states` must be the
    /// (empty) states returned by the forward call.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_scaled_dot_product_attention_vjp(
        &self,
        q: Value,
        k: Value,
        v: Value,
        layout: AttentionLayout,
        cfg: &AttentionConfig,
        out: Value,
        states: &[Value],
        d_out: Value,
    ) -> Result<(Value, Value, Value)> {
        const OP: &str = "FusedScaledDotProductAttentionVJP";
        if cfg.mask.is_some() || cfg.bias.is_some() || cfg.seq_lens.is_some() {
            return Err(Error::not_implemented(OP, "mask, bias and sequence lengths are not supported by the VJP"));
        }
        if !states.is_empty() {
            bail!(OP, "{} states given; the forward op of this builder returns none", states.len());
        }
        let op = Op::FusedScaledDotProductAttentionVjp { layout, scale: cfg.scale, causal: cfg.causal };
        let o = self.push(op, &[q, k, v, out, d_out], None)?;
        Ok((o[0], o[1], o[2]))
    }

    /// `activation(x·dequant(w) + bias)` for quantized weights: Linear and NF4 take `scale`
    /// (F32 `[K, ceil(N/block_size)]`; Linear also an optional `zero_point`); GGML takes
    /// neither. x is F32 `[…, K]`, output F32 `[…, N]`.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_quantized_dense(
        &self,
        x: Value,
        w: Value,
        scale: Option<Value>,
        zero_point: Option<Value>,
        bias: Option<Value>,
        quant: Quantization,
        activation: Activation,
    ) -> Result<Value> {
        const OP: &str = "FusedQuantizedDense";
        match (quant.scheme, scale) {
            (QuantScheme::Ggml, Some(_)) => bail!(OP, "GGML weights carry their scales; scale must be None"),
            (QuantScheme::Linear | QuantScheme::Nf4, None) => {
                bail!(OP, "{:?} quantization needs a scale operand", quant.scheme)
            }
            _ => {}
        }
        let op = Op::FusedQuantizedDense {
            quant,
            activation,
            has_zero_point: zero_point.is_some(),
            has_bias: bias.is_some(),
        };
        let inputs: Vec<Value> = [Some(x), Some(w), scale, zero_point, bias].into_iter().flatten().collect();
        self.push1(op, &inputs)
    }

    /// Dequantises the rows of `data` (GGML blocks, Uint8 `[V, bytes_per_row]`) selected by
    /// `indices` (`[…, 1]`) into F32 `[…, K]`.
    pub fn quantized_embedding_lookup(&self, data: Value, indices: Value, quant: Quantization) -> Result<Value> {
        self.push1(Op::QuantizedEmbeddingLookup { quant }, &[data, indices])
    }

    /// `y = x·w_qkv` split into `(q [B, q_dim], k [B, kv_dim], v [B, kv_dim])` with optional
    /// per-part biases; x is `[B, in]`, w_qkv `[in, q_dim + 2·kv_dim]`.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_attention_qkv_projection(
        &self,
        x: Value,
        w_qkv: Value,
        bias_q: Option<Value>,
        bias_k: Option<Value>,
        bias_v: Option<Value>,
        q_dim: i64,
        kv_dim: i64,
    ) -> Result<(Value, Value, Value)> {
        let op = Op::FusedAttentionQkvProjection {
            q_dim,
            kv_dim,
            has_bias_q: bias_q.is_some(),
            has_bias_k: bias_k.is_some(),
            has_bias_v: bias_v.is_some(),
        };
        let inputs: Vec<Value> = [Some(x), Some(w_qkv), bias_q, bias_k, bias_v].into_iter().flatten().collect();
        let o = self.push(op, &inputs, None)?;
        Ok((o[0], o[1], o[2]))
    }
}
