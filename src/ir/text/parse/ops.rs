//! Building an [`Op`] from a parsed op type and its attribute map.

use super::*;

/// Ops without attributes whose mnemonic says everything (elementwise, compare, barriers, …).
pub(super) fn simple_op(t: OpType) -> Option<Op> {
    let mut cands: Vec<Op> = ALL_UNARY.iter().map(|&u| Op::Unary(u)).collect();
    cands.extend(ALL_BINARY.iter().map(|&b| Op::Binary(b)));
    for &dir in &ALL_COMPARE {
        cands.push(Op::Compare { dir, total_order: false });
        cands.push(Op::Compare { dir, total_order: true });
    }
    cands.extend([
        Op::Clamp,
        Op::Where,
        Op::DynamicUpdateSlice,
        Op::DynamicShape,
        Op::OptimizationBarrier,
        Op::SchedulingBarrier,
    ]);
    cands.into_iter().find(|op| op.op_type() == t)
}

impl Parser {
    pub(super) fn func_attr(&self, a: &mut AttrMap, name: &str) -> Result<FuncId> {
        match a.req(name)? {
            Val::Func(l, pos) => self.func_ref(&l, pos),
            v => Err(v.expected(&a.what(name), "a function reference `@…`")),
        }
    }

    pub(super) fn build_op(&self, t: OpType, a: &mut AttrMap) -> Result<Op> {
        use OpType as T;
        if let Some(op) = simple_op(t) {
            return Ok(op);
        }
        if let Some(kind) = ALL_REDUCE.iter().copied().find(|&k| Op::Reduce { kind: k, axes: vec![] }.op_type() == t) {
            return Ok(Op::Reduce { kind, axes: a.usizes("axes")? });
        }
        let cumulative = ARITH
            .iter()
            .map(|(k, _)| *k)
            .find(|&k| Op::Cumulative { kind: k, axis: 0, exclusive: false, reverse: false }.op_type() == t);
        if let Some(kind) = cumulative {
            return Ok(Op::Cumulative {
                kind,
                axis: a.usize("axis")?,
                exclusive: a.flag("exclusive")?,
                reverse: a.flag("reverse")?,
            });
        }
        let op = match t {
            T::ConvertDType => Op::ConvertDType { dtype: a.dtype("dtype")? },
            T::Bitcast => Op::Bitcast { dtype: a.dtype("dtype")? },
            T::Reshape => Op::Reshape { dims: a.i64s("dims")? },
            T::DynamicReshape => {
                let w = a.what("specs");
                let v = a.req("specs")?;
                let specs = v.list(&w)?.iter().map(|s| reshape_dim(s, &w)).collect::<Result<Vec<_>>>()?;
                Op::DynamicReshape { specs }
            }
            T::Transpose => Op::Transpose { perm: a.usizes("perm")? },
            T::BroadcastInDim => Op::BroadcastInDim { shape: a.shape("shape")?, axes: a.usizes("axes")? },
            T::Concatenate => Op::Concatenate { axis: a.usize("axis")? },
            T::Slice => Op::Slice { starts: a.i64s("starts")?, limits: a.i64s("limits")?, strides: a.i64s("strides")? },
            T::DynamicSlice => Op::DynamicSlice { sizes: a.i64s("sizes")? },
            T::Pad => {
                let w = a.what("axes");
                let v = a.req("axes")?;
                let axes = v
                    .list(&w)?
                    .iter()
                    .map(|p| {
                        let t = p.tuple(&w, 3)?;
                        Ok(PadAxis { start: t[0].i64(&w)?, end: t[1].i64(&w)?, interior: t[2].i64(&w)? })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Op::Pad { axes }
            }
            T::Reverse => Op::Reverse { axes: a.usizes("axes")? },
            T::Iota => Op::Iota { shape: a.shape("shape")?, axis: a.usize("axis")? },
            T::DynamicDimensionSize => Op::DynamicDimensionSize { axis: a.usize("axis")? },
            T::ArgMinMax => {
                Op::ArgMinMax { axis: a.usize("axis")?, out_dtype: a.dtype("out_dtype")?, is_min: a.flag("is_min")? }
            }
            T::ReduceWindow => Op::ReduceWindow {
                kind: a.enumerated("kind", &ARITH)?,
                window: a.i64s("window")?,
                strides: a.i64s("strides")?,
                input_dilations: a.i64s("input_dilations")?,
                window_dilations: a.i64s("window_dilations")?,
                padding: a.pairs("padding")?,
            },
            T::SelectAndScatterMax | T::SelectAndScatterMin | T::SelectAndScatterSum => {
                let kind = match a.get("kind") {
                    Some(v) => v.enumerated(&a.what("kind"), &ARITH)?,
                    None => implied_kind(t),
                };
                Op::SelectAndScatter {
                    kind,
                    window: a.i64s("window")?,
                    strides: a.i64s("strides")?,
                    padding: a.pairs("padding")?,
                }
            }
            T::Gather => Op::Gather {
                index_vector_axis: a.usize("index_vector_axis")?,
                offset_output_axes: a.usizes("offset_output_axes")?,
                collapsed_slice_axes: a.usizes("collapsed_slice_axes")?,
                start_index_map: a.usizes("start_index_map")?,
                slice_sizes: a.i64s("slice_sizes")?,
                indices_are_sorted: a.flag("indices_are_sorted")?,
            },
            T::ScatterSum | T::ScatterMax | T::ScatterMin => {
                let kind = match a.get("kind") {
                    Some(v) => v.enumerated(&a.what("kind"), &ARITH)?,
                    None => implied_kind(t),
                };
                Op::Scatter {
                    kind,
                    index_vector_axis: a.usize("index_vector_axis")?,
                    update_window_axes: a.usizes("update_window_axes")?,
                    inserted_window_axes: a.usizes("inserted_window_axes")?,
                    scatter_axes_to_operand_axes: a.usizes("scatter_axes_to_operand_axes")?,
                    indices_are_sorted: a.flag("indices_are_sorted")?,
                    unique_indices: a.flag("unique_indices")?,
                }
            }
            T::DotGeneral => Op::DotGeneral {
                lhs_contracting: a.usizes("lhs_contracting")?,
                lhs_batch: a.usizes("lhs_batch")?,
                rhs_contracting: a.usizes("rhs_contracting")?,
                rhs_batch: a.usizes("rhs_batch")?,
                accumulator_dtype: a.opt_dtype("accumulator_dtype")?,
                output_dtype: a.opt_dtype("output_dtype")?,
            },
            T::ConvGeneral => {
                let (input_batch, input_channels, input_spatial) = a.conv_triple("input")?;
                let (kernel_input_channels, kernel_output_channels, kernel_spatial) = a.conv_triple("kernel")?;
                let (output_batch, output_channels, output_spatial) = a.conv_triple("output")?;
                Op::ConvGeneral {
                    axes: ConvAxes {
                        input_batch,
                        input_channels,
                        input_spatial,
                        kernel_input_channels,
                        kernel_output_channels,
                        kernel_spatial,
                        output_batch,
                        output_channels,
                        output_spatial,
                    },
                    strides: a.i64s("strides")?,
                    padding: a.pairs("padding")?,
                    input_dilations: a.i64s("input_dilations")?,
                    kernel_dilations: a.i64s("kernel_dilations")?,
                    channel_groups: a.i64("channel_groups")?,
                    batch_groups: a.i64("batch_groups")?,
                }
            }
            T::FFT => Op::Fft { fft_type: a.enumerated("fft_type", &FFT)?, lengths: a.i64s("lengths")? },
            T::BatchNormForInference => {
                Op::BatchNormInference { epsilon: a.f32("epsilon")?, feature_axis: a.usize("feature_axis")? }
            }
            T::BatchNormForTraining => {
                Op::BatchNormTraining { epsilon: a.f32("epsilon")?, feature_axis: a.usize("feature_axis")? }
            }
            T::BatchNormGradient => {
                Op::BatchNormGradient { epsilon: a.f32("epsilon")?, feature_axis: a.usize("feature_axis")? }
            }
            T::RNGBitGenerator => Op::RngBitGenerator { shape: a.shape("shape")? },
            T::Call => Op::Call { func: self.func_attr(a, "func")? },
            T::Sort => Op::Sort {
                comparator: self.func_attr(a, "comparator")?,
                axis: a.usize("axis")?,
                stable: a.flag("stable")?,
            },
            T::While => Op::While { cond: self.func_attr(a, "cond")?, body: self.func_attr(a, "body")? },
            T::If => Op::If {
                then_branch: self.func_attr(a, "then_branch")?,
                else_branch: self.func_attr(a, "else_branch")?,
            },
            T::AllReduce => {
                let kind = a.enumerated("kind", &ARITH)?;
                let w = a.what("replica_groups");
                let v = a.req("replica_groups")?;
                let replica_groups = v.list(&w)?.iter().map(|g| g.usizes(&w)).collect::<Result<Vec<_>>>()?;
                Op::AllReduce { kind, replica_groups }
            }
            T::FusedSoftmax => Op::FusedSoftmax { axis: a.usize("axis")? },
            T::FusedGelu => Op::FusedGelu { exact: a.flag("exact")? },
            T::FusedLayerNorm => Op::FusedLayerNorm {
                axes: a.usizes("axes")?,
                epsilon: a.f64("epsilon")?,
                has_gamma: a.flag("has_gamma")?,
                has_beta: a.flag("has_beta")?,
            },
            T::FusedDense => Op::FusedDense {
                activation: a.enumerated("activation", &ACTIVATION)?,
                layout: a.enumerated("layout", &DENSE_LAYOUT)?,
                has_bias: a.flag("has_bias")?,
            },
            T::FusedScaledDotProductAttention => Op::FusedScaledDotProductAttention {
                layout: a.enumerated("layout", &ATTENTION_LAYOUT)?,
                scale: a.f64("scale")?,
                causal: a.flag("causal")?,
                has_mask: a.flag("has_mask")?,
                has_bias: a.flag("has_bias")?,
                has_seq_lens: a.flag("has_seq_lens")?,
                quantized_matmuls: a.flag("quantized_matmuls")?,
            },
            T::FusedScaledDotProductAttentionVJP => Op::FusedScaledDotProductAttentionVjp {
                layout: a.enumerated("layout", &ATTENTION_LAYOUT)?,
                scale: a.f64("scale")?,
                causal: a.flag("causal")?,
            },
            T::FusedQuantizedDense => Op::FusedQuantizedDense {
                quant: a.quant()?,
                activation: a.enumerated("activation", &ACTIVATION)?,
                has_zero_point: a.flag("has_zero_point")?,
                has_bias: a.flag("has_bias")?,
            },
            T::QuantizedEmbeddingLookup => Op::QuantizedEmbeddingLookup { quant: a.quant()? },
            T::FusedAttentionQKVProjection => Op::FusedAttentionQkvProjection {
                q_dim: a.i64("q_dim")?,
                kv_dim: a.i64("kv_dim")?,
                has_bias_q: a.flag("has_bias_q")?,
                has_bias_k: a.flag("has_bias_k")?,
                has_bias_v: a.flag("has_bias_v")?,
            },
            other => return Err(a.pos.err(format!("`{}` is not an op of the IR", other.name()))),
        };
        Ok(op)
    }
}
