//! The IR printer: a module as canonical text (see `docs/ir.md` for the grammar).
//!
//! Values are renumbered in print order (main first, then the other functions in `FuncId`
//! order; in each function its parameters, then the outputs of its body nodes in order), and
//! closures are labelled by their position in that order, so that parsing the text allocates
//! exactly the same ids again and `print(parse(text)) == text`.

use std::cell::RefCell;
use std::fmt::Write as _;

use half::{bf16, f16};

use crate::ir::dtype::{DType, DTypeClass};
use crate::ir::module::{FuncId, Module, ValueId};
use crate::ir::op::{ArithReduce, ConstData, Op};
use crate::ir::optype::OpType;
use crate::ir::shape::Shape;
use crate::ir::text::names::{
    ACTIVATION, ARITH, ATTENTION_LAYOUT, DENSE_LAYOUT, FFT, GGML_TYPE, QUANT_SCHEME, format_reshape_dim, format_shape,
    name_of, quote_name,
};
use crate::ir::text::sidefile::{SideFile, format_hash};
use crate::ir::text::xxh64::xxh64;

/// Constants with more elements than this are summarised in dumps ([`PrintOptions::dump`]).
pub const DEFAULT_DUMP_CONSTANT_ELEMENTS: usize = 16;

/// How many leading values a summarised constant shows by default (`first=[…]`).
pub const DEFAULT_PREVIEW_ELEMENTS: usize = 4;

/// Options of [`print_module_with`] and [`print_module_with_side_file`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintOptions {
    /// Constants with more elements than this (bytes, for constants printed as `hex"…"`) are
    /// not printed in full: [`print_module_with`] writes `elided(bytes=…, hash=…, first=[…])`
    /// (readable, but a parse error: the data is gone), [`print_module_with_side_file`] writes
    /// `file("NAME", offset=…, bytes=…, hash=…, first=[…])` and puts the data in the side file
    /// (replays with [`crate::ir::text::parse_module_with_constants`]). `None` (the default):
    /// every constant in full.
    pub max_constant_elements: Option<usize>,
    /// How many leading elements (bytes, for `hex` data) a summarised constant shows in
    /// `first=…`; 0 leaves `first` out.
    pub preview_elements: usize,
}

impl Default for PrintOptions {
    fn default() -> PrintOptions {
        PrintOptions { max_constant_elements: None, preview_elements: DEFAULT_PREVIEW_ELEMENTS }
    }
}

impl PrintOptions {
    /// Constants with more than `max` elements summarised.
    pub fn summarized(max: usize) -> PrintOptions {
        PrintOptions { max_constant_elements: Some(max), ..PrintOptions::default() }
    }

    /// The options of dumps: constants with more than [`DEFAULT_DUMP_CONSTANT_ELEMENTS`]
    /// elements summarised.
    pub fn dump() -> PrintOptions {
        PrintOptions::summarized(DEFAULT_DUMP_CONSTANT_ELEMENTS)
    }
}

/// The canonical text of `m`; [`crate::ir::text::parse_module`] reads it back.
pub fn print_module(m: &Module) -> String {
    print_module_with(m, &PrintOptions::default())
}

/// The text of `m` with options: constants above `opts.max_constant_elements` are written
/// `elided(…)`, which does not parse back (see [`print_module_with_side_file`] for text that
/// does).
pub fn print_module_with(m: &Module, opts: &PrintOptions) -> String {
    Printer::new(m, opts, None).print()
}

/// The text of `m` with constants above `opts.max_constant_elements` written by reference,
/// `file("NAME", offset=…, bytes=…, hash=…, first=[…])`, their data added to `side` (which the
/// caller writes out, see [`SideFile::write_file`]; one side file may serve many modules). A
/// safetensors side file ([`SideFile::safetensors`]) gives `safetensors("NAME", "TENSOR")`.
/// [`crate::ir::text::parse_module_with_constants`] reads the text back to an identical module.
pub fn print_module_with_side_file(m: &Module, opts: &PrintOptions, side: &mut SideFile) -> String {
    Printer::new(m, opts, Some(side)).print()
}

/// The order functions are printed in: main first, then the others in `FuncId` order.
pub fn function_order(m: &Module) -> Vec<FuncId> {
    let n = m.functions.len();
    let mut order = Vec::with_capacity(n);
    if m.main.index() < n {
        order.push(m.main);
    }
    order.extend((0..n).map(|i| FuncId(i as u32)).filter(|&f| f != m.main));
    order
}

/// Canonical labels of values (`%N` in print order) and functions (`@name`, closures `@K`).
pub(crate) struct Names {
    /// Functions in print order.
    pub(crate) order: Vec<FuncId>,
    /// Canonical number of each value (indexed by `ValueId`), `None` if it is never printed.
    value_num: Vec<Option<usize>>,
    /// Label of each function (indexed by `FuncId`), `@` included.
    func_label: Vec<String>,
}

impl Names {
    pub(crate) fn new(m: &Module) -> Names {
        let order = function_order(m);
        let mut func_label = vec![String::new(); m.functions.len()];
        for (k, &f) in order.iter().enumerate() {
            func_label[f.index()] = match &m.func(f).name {
                Some(name) => format!("@{}", quote_name(name)),
                None => format!("@{k}"),
            };
        }
        let mut value_num = vec![None; m.values.len()];
        let mut next = 0usize;
        let mut number = |v: ValueId| {
            if let Some(slot @ None) = value_num.get_mut(v.index()) {
                *slot = Some(next);
                next += 1;
            }
        };
        for &f in &order {
            let fd = m.func(f);
            for &p in &fd.params {
                number(p);
            }
            for &n in &fd.body {
                if let Some(node) = m.nodes.get(n.index()) {
                    for &o in &node.outputs {
                        number(o);
                    }
                }
            }
        }
        Names { order, value_num, func_label }
    }

    /// `%N` (canonical number) or `%!raw` for a value that is never printed.
    pub(crate) fn value(&self, v: ValueId) -> String {
        match self.value_num.get(v.index()).copied().flatten() {
            Some(n) => format!("%{n}"),
            // Dangling reference (dead node output or out-of-range id): readable, not parseable.
            None => format!("%!{}", v.0),
        }
    }

    /// `@name`, `@K` for closures, `@!raw` when out of range.
    pub(crate) fn func(&self, f: FuncId) -> String {
        match self.func_label.get(f.index()) {
            Some(l) => l.clone(),
            None => format!("@!{}", f.0),
        }
    }
}

struct Printer<'a> {
    m: &'a Module,
    opts: &'a PrintOptions,
    names: Names,
    side: RefCell<Option<&'a mut SideFile>>,
}

impl<'a> Printer<'a> {
    fn new(m: &'a Module, opts: &'a PrintOptions, side: Option<&'a mut SideFile>) -> Printer<'a> {
        Printer { m, opts, names: Names::new(m), side: RefCell::new(side) }
    }

    fn value(&self, v: ValueId) -> String {
        self.names.value(v)
    }

    fn func(&self, f: FuncId) -> String {
        self.names.func(f)
    }

    fn values(&self, vs: &[ValueId]) -> String {
        vs.iter().map(|&v| self.value(v)).collect::<Vec<_>>().join(", ")
    }

    fn print(self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "module @{}", quote_name(&self.m.name));
        for &f in &self.names.order {
            out.push('\n');
            self.print_function(&mut out, f);
        }
        out
    }

    fn print_function(&self, out: &mut String, f: FuncId) {
        let fd = self.m.func(f);
        let kw = if fd.name.is_some() { "func" } else { "closure" };
        let params: Vec<String> = fd
            .params
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let name = fd.param_names.get(i).map(String::as_str).unwrap_or("");
                let shape = self.m.values.get(p.index()).map(|v| format_shape(&v.shape)).unwrap_or_else(|| "?".into());
                if name.is_empty() {
                    format!("{}: {shape}", self.value(p))
                } else {
                    format!("{} {name:?}: {shape}", self.value(p))
                }
            })
            .collect();
        let _ = write!(out, "{kw} {}({})", self.func(f), params.join(", "));
        if let Some(parent) = fd.parent {
            let _ = write!(out, " parent={}", self.func(parent));
        }
        out.push_str(" {\n");
        for &n in &fd.body {
            match self.m.nodes.get(n.index()) {
                Some(node) => {
                    out.push_str("  ");
                    self.print_node(out, &node.op, &node.inputs, &node.outputs);
                    out.push('\n');
                }
                None => {
                    let _ = writeln!(out, "  ; missing node n{}", n.0);
                }
            }
        }
        if let Some(outs) = &fd.outputs {
            if outs.is_empty() {
                out.push_str("  return\n");
            } else {
                let _ = writeln!(out, "  return {}", self.values(outs));
            }
        }
        out.push_str("}\n");
    }

    fn print_node(&self, out: &mut String, op: &Op, inputs: &[ValueId], outputs: &[ValueId]) {
        if !outputs.is_empty() {
            let _ = write!(out, "{} = ", self.values(outputs));
        }
        out.push_str(op.op_type().name());
        let mut items: Vec<String> = inputs.iter().map(|&v| self.value(v)).collect();
        let out_shapes: Vec<Option<&Shape>> =
            outputs.iter().map(|&v| self.m.values.get(v.index()).map(|d| &d.shape)).collect();
        if let Op::Constant(data) = op {
            let shape = out_shapes.first().copied().flatten();
            items.push(self.constant(shape, data));
        }
        items.extend(self.attrs(op));
        if !items.is_empty() {
            out.push(' ');
            out.push_str(&items.join(", "));
        }
        if !outputs.is_empty() {
            let shapes: Vec<String> =
                out_shapes.iter().map(|s| s.map(format_shape).unwrap_or_else(|| "?".into())).collect();
            let _ = write!(out, " : {}", shapes.join(", "));
        }
    }

    /// A constant's payload: in full, or summarised (`elided(…)` / `file(…)`) when it has more
    /// elements than the options allow.
    fn constant(&self, shape: Option<&Shape>, data: &ConstData) -> String {
        let bytes = data.0.as_slice();
        let elementwise = shape.filter(|s| elementwise_printable(s.dtype, bytes));
        let n = elementwise.map_or(bytes.len(), |s| bytes.len() / s.dtype.size());
        if self.opts.max_constant_elements.is_none_or(|max| n <= max) {
            return format_constant(shape, data);
        }
        let preview = self.opts.preview_elements.min(n);
        let first = match elementwise {
            _ if preview == 0 => String::new(),
            Some(s) => {
                let size = s.dtype.size();
                let items: Vec<String> =
                    bytes.chunks_exact(size).take(preview).map(|c| format_element(s.dtype, c)).collect();
                format!(", first=[{}]", items.join(", "))
            }
            None => {
                let mut h = String::from(", first=hex\"");
                for b in &bytes[..preview] {
                    let _ = write!(h, "{b:02x}");
                }
                h.push('"');
                h
            }
        };
        match self.side.borrow_mut().as_mut() {
            Some(side) if side.is_safetensors() => match shape {
                Some(s) => {
                    let tensor = side.add_tensor(s, data);
                    format!("safetensors({:?}, {tensor:?})", side.name())
                }
                // A constant without a type cannot be checked against a tensor when parsed.
                None => format!("elided(bytes={}, hash=\"{}\"{first})", bytes.len(), format_hash(xxh64(bytes))),
            },
            Some(side) => {
                let r = side.add(data);
                format!(
                    "file({:?}, offset={}, bytes={}, hash=\"{}\"{first})",
                    side.name(),
                    r.offset,
                    r.bytes,
                    format_hash(r.hash)
                )
            }
            None => format!("elided(bytes={}, hash=\"{}\"{first})", bytes.len(), format_hash(xxh64(bytes))),
        }
    }

    fn attrs(&self, op: &Op) -> Vec<String> {
        let mut a = Attrs(Vec::new());
        match op {
            Op::Constant(_)
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare { .. }
            | Op::Clamp
            | Op::Where
            | Op::DynamicUpdateSlice
            | Op::DynamicShape
            | Op::OptimizationBarrier
            | Op::SchedulingBarrier => {}
            Op::ConvertDType { dtype } | Op::Bitcast { dtype } => a.add("dtype", dtype.short_name()),
            Op::Reshape { dims } => a.add("dims", ints(dims)),
            Op::DynamicReshape { specs } => {
                a.add("specs", list(specs.iter().map(format_reshape_dim)));
            }
            Op::Transpose { perm } => a.add("perm", ints(perm)),
            Op::BroadcastInDim { shape, axes } => {
                a.add("shape", format_shape(shape));
                a.add("axes", ints(axes));
            }
            Op::Concatenate { axis } => a.add("axis", axis),
            Op::Slice { starts, limits, strides } => {
                a.add("starts", ints(starts));
                a.add("limits", ints(limits));
                a.add("strides", ints(strides));
            }
            Op::DynamicSlice { sizes } => a.add("sizes", ints(sizes)),
            Op::Pad { axes } => {
                a.add("axes", list(axes.iter().map(|p| format!("({},{},{})", p.start, p.end, p.interior))));
            }
            Op::Reverse { axes } => a.add("axes", ints(axes)),
            Op::Iota { shape, axis } => {
                a.add("shape", format_shape(shape));
                a.add("axis", axis);
            }
            Op::DynamicDimensionSize { axis } => a.add("axis", axis),
            Op::Reduce { axes, .. } => a.add("axes", ints(axes)),
            Op::ArgMinMax { axis, out_dtype, is_min } => {
                a.add("axis", axis);
                a.add("out_dtype", out_dtype.short_name());
                a.add("is_min", is_min);
            }
            Op::ReduceWindow { kind, window, strides, input_dilations, window_dilations, padding } => {
                a.add("kind", name_of(&ARITH, *kind));
                a.add("window", ints(window));
                a.add("strides", ints(strides));
                a.add("input_dilations", ints(input_dilations));
                a.add("window_dilations", ints(window_dilations));
                a.add("padding", pairs(padding));
            }
            Op::SelectAndScatter { kind, window, strides, padding } => {
                if *kind != implied_kind(op.op_type()) {
                    a.add("kind", name_of(&ARITH, *kind));
                }
                a.add("window", ints(window));
                a.add("strides", ints(strides));
                a.add("padding", pairs(padding));
            }
            Op::Gather {
                index_vector_axis,
                offset_output_axes,
                collapsed_slice_axes,
                start_index_map,
                slice_sizes,
                indices_are_sorted,
            } => {
                a.add("index_vector_axis", index_vector_axis);
                a.add("offset_output_axes", ints(offset_output_axes));
                a.add("collapsed_slice_axes", ints(collapsed_slice_axes));
                a.add("start_index_map", ints(start_index_map));
                a.add("slice_sizes", ints(slice_sizes));
                a.add("indices_are_sorted", indices_are_sorted);
            }
            Op::Scatter {
                kind,
                index_vector_axis,
                update_window_axes,
                inserted_window_axes,
                scatter_axes_to_operand_axes,
                indices_are_sorted,
                unique_indices,
            } => {
                if *kind != implied_kind(op.op_type()) {
                    a.add("kind", name_of(&ARITH, *kind));
                }
                a.add("index_vector_axis", index_vector_axis);
                a.add("update_window_axes", ints(update_window_axes));
                a.add("inserted_window_axes", ints(inserted_window_axes));
                a.add("scatter_axes_to_operand_axes", ints(scatter_axes_to_operand_axes));
                a.add("indices_are_sorted", indices_are_sorted);
                a.add("unique_indices", unique_indices);
            }
            Op::DotGeneral {
                lhs_contracting,
                lhs_batch,
                rhs_contracting,
                rhs_batch,
                accumulator_dtype,
                output_dtype,
            } => {
                a.add("lhs_contracting", ints(lhs_contracting));
                a.add("lhs_batch", ints(lhs_batch));
                a.add("rhs_contracting", ints(rhs_contracting));
                a.add("rhs_batch", ints(rhs_batch));
                if let Some(d) = accumulator_dtype {
                    a.add("accumulator_dtype", d.short_name());
                }
                if let Some(d) = output_dtype {
                    a.add("output_dtype", d.short_name());
                }
            }
            Op::ConvGeneral {
                axes,
                strides,
                padding,
                input_dilations,
                kernel_dilations,
                channel_groups,
                batch_groups,
            } => {
                a.add("input", format!("({},{},{})", axes.input_batch, axes.input_channels, ints(&axes.input_spatial)));
                a.add(
                    "kernel",
                    format!(
                        "({},{},{})",
                        axes.kernel_input_channels,
                        axes.kernel_output_channels,
                        ints(&axes.kernel_spatial)
                    ),
                );
                a.add(
                    "output",
                    format!("({},{},{})", axes.output_batch, axes.output_channels, ints(&axes.output_spatial)),
                );
                a.add("strides", ints(strides));
                a.add("padding", pairs(padding));
                a.add("input_dilations", ints(input_dilations));
                a.add("kernel_dilations", ints(kernel_dilations));
                a.add("channel_groups", channel_groups);
                a.add("batch_groups", batch_groups);
            }
            Op::Fft { fft_type, lengths } => {
                a.add("fft_type", name_of(&FFT, *fft_type));
                a.add("lengths", ints(lengths));
            }
            Op::BatchNormInference { epsilon, feature_axis }
            | Op::BatchNormTraining { epsilon, feature_axis }
            | Op::BatchNormGradient { epsilon, feature_axis } => {
                a.add("epsilon", format_f32(*epsilon));
                a.add("feature_axis", feature_axis);
            }
            Op::RngBitGenerator { shape } => a.add("shape", format_shape(shape)),
            Op::Call { func } => a.add("func", self.func(*func)),
            Op::Sort { comparator, axis, stable } => {
                a.add("comparator", self.func(*comparator));
                a.add("axis", axis);
                a.add("stable", stable);
            }
            Op::While { cond, body } => {
                a.add("cond", self.func(*cond));
                a.add("body", self.func(*body));
            }
            Op::If { then_branch, else_branch } => {
                a.add("then_branch", self.func(*then_branch));
                a.add("else_branch", self.func(*else_branch));
            }
            Op::AllReduce { kind, replica_groups } => {
                a.add("kind", name_of(&ARITH, *kind));
                a.add("replica_groups", list(replica_groups.iter().map(|g| ints(g))));
            }
            Op::Cumulative { axis, exclusive, reverse, .. } => {
                a.add("axis", axis);
                a.add("exclusive", exclusive);
                a.add("reverse", reverse);
            }
            Op::FusedSoftmax { axis } => a.add("axis", axis),
            Op::FusedGelu { exact } => a.add("exact", exact),
            Op::FusedLayerNorm { axes, epsilon, has_gamma, has_beta } => {
                a.add("axes", ints(axes));
                a.add("epsilon", format_f64(*epsilon));
                a.add("has_gamma", has_gamma);
                a.add("has_beta", has_beta);
            }
            Op::FusedDense { activation, layout, has_bias } => {
                a.add("activation", name_of(&ACTIVATION, *activation));
                a.add("layout", name_of(&DENSE_LAYOUT, *layout));
                a.add("has_bias", has_bias);
            }
            Op::FusedScaledDotProductAttention {
                layout,
                scale,
                causal,
                has_mask,
                has_bias,
                has_seq_lens,
                quantized_matmuls,
            } => {
                a.add("layout", name_of(&ATTENTION_LAYOUT, *layout));
                a.add("scale", format_f64(*scale));
                a.add("causal", causal);
                a.add("has_mask", has_mask);
                a.add("has_bias", has_bias);
                a.add("has_seq_lens", has_seq_lens);
                a.add("quantized_matmuls", quantized_matmuls);
            }
            Op::FusedScaledDotProductAttentionVjp { layout, scale, causal } => {
                a.add("layout", name_of(&ATTENTION_LAYOUT, *layout));
                a.add("scale", format_f64(*scale));
                a.add("causal", causal);
            }
            Op::FusedQuantizedDense { quant, activation, has_zero_point, has_bias } => {
                a.quant(quant);
                a.add("activation", name_of(&ACTIVATION, *activation));
                a.add("has_zero_point", has_zero_point);
                a.add("has_bias", has_bias);
            }
            Op::QuantizedEmbeddingLookup { quant } => a.quant(quant),
            Op::FusedAttentionQkvProjection { q_dim, kv_dim, has_bias_q, has_bias_k, has_bias_v } => {
                a.add("q_dim", q_dim);
                a.add("kv_dim", kv_dim);
                a.add("has_bias_q", has_bias_q);
                a.add("has_bias_k", has_bias_k);
                a.add("has_bias_v", has_bias_v);
            }
        }
        a.0
    }
}

struct Attrs(Vec<String>);

impl Attrs {
    fn add(&mut self, name: &str, value: impl std::fmt::Display) {
        self.0.push(format!("{name}={value}"));
    }

    fn quant(&mut self, q: &crate::ir::op::Quantization) {
        self.add("scheme", name_of(&QUANT_SCHEME, q.scheme));
        self.add("block_axis", q.block_axis);
        self.add("block_size", q.block_size);
        self.add("ggml_type", name_of(&GGML_TYPE, q.ggml_type));
    }
}

/// The reduction a Scatter / SelectAndScatter mnemonic stands for (Sum unless Max or Min).
pub(crate) fn implied_kind(t: OpType) -> ArithReduce {
    match t {
        OpType::ScatterMax | OpType::SelectAndScatterMax => ArithReduce::Max,
        OpType::ScatterMin | OpType::SelectAndScatterMin => ArithReduce::Min,
        _ => ArithReduce::Sum,
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(","))
}

fn ints<T: std::fmt::Display>(v: &[T]) -> String {
    list(v.iter().map(|x| x.to_string()))
}

fn pairs(v: &[(i64, i64)]) -> String {
    list(v.iter().map(|(a, b)| format!("({a},{b})")))
}

/// An f32 in text form: shortest round-trip decimal, `inf`, `-inf`, `nan`, `-nan`, or the raw
/// bits `0x7fc00001` for a NaN with another payload.
pub fn format_f32(v: f32) -> String {
    if v.is_nan() {
        match v.to_bits() {
            0x7fc0_0000 => "nan".into(),
            0xffc0_0000 => "-nan".into(),
            b => format!("0x{b:08x}"),
        }
    } else {
        format!("{v:?}")
    }
}

/// An f64 in text form (see [`format_f32`]).
pub fn format_f64(v: f64) -> String {
    if v.is_nan() {
        match v.to_bits() {
            0x7ff8_0000_0000_0000 => "nan".into(),
            0xfff8_0000_0000_0000 => "-nan".into(),
            b => format!("0x{b:016x}"),
        }
    } else {
        format!("{v:?}")
    }
}

/// A half-precision value: `nan`/`-nan` for the canonical NaNs, raw bits `0x7e01` for other
/// NaNs, else the shortest decimal that converts back (through `to_bits(from_f64(..))`, the
/// parser's conversion) to the same bits.
fn format_half(bits: u16, canonical_nan: u16, value: f32, from_f64: fn(f64) -> u16) -> String {
    if value.is_nan() {
        return if bits == canonical_nan {
            "nan".into()
        } else if bits == canonical_nan | 0x8000 {
            "-nan".into()
        } else {
            format!("0x{bits:04x}")
        };
    }
    if value.is_infinite() || value == 0.0 {
        return format!("{value:?}");
    }
    // 9 significant digits always identify an f32, so the loop ends with a match at the latest
    // there; the fallback is the exact f32 value.
    for digits in 1..=9usize {
        let s = format!("{:.*e}", digits - 1, value);
        if let Ok(x) = s.parse::<f64>()
            && from_f64(x) == bits
        {
            return format!("{x:?}");
        }
    }
    format!("{value:?}")
}

/// Whether constant data of `dtype` is printed element by element (else as hex bytes).
fn elementwise_printable(dtype: DType, data: &[u8]) -> bool {
    let class_ok = matches!(
        dtype.class(),
        DTypeClass::Bool | DTypeClass::SignedInt | DTypeClass::UnsignedInt | DTypeClass::Float | DTypeClass::Complex
    );
    class_ok
        && !dtype.is_packed()
        && dtype.size() > 0
        && data.len().is_multiple_of(dtype.size())
        && (dtype != DType::Bool || data.iter().all(|&b| b <= 1))
}

fn format_element(dtype: DType, b: &[u8]) -> String {
    fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        a
    }
    match dtype {
        DType::Bool => (if b[0] != 0 { "true" } else { "false" }).into(),
        DType::Int8 => (b[0] as i8).to_string(),
        DType::Uint8 => b[0].to_string(),
        DType::Int16 => i16::from_le_bytes(arr(b)).to_string(),
        DType::Uint16 => u16::from_le_bytes(arr(b)).to_string(),
        DType::Int32 => i32::from_le_bytes(arr(b)).to_string(),
        DType::Uint32 => u32::from_le_bytes(arr(b)).to_string(),
        DType::Int64 => i64::from_le_bytes(arr(b)).to_string(),
        DType::Uint64 => u64::from_le_bytes(arr(b)).to_string(),
        DType::Float16 => {
            let bits = u16::from_le_bytes(arr(b));
            format_half(bits, 0x7e00, f16::from_bits(bits).to_f32(), |x| f16::from_f64(x).to_bits())
        }
        DType::BFloat16 => {
            let bits = u16::from_le_bytes(arr(b));
            format_half(bits, 0x7fc0, bf16::from_bits(bits).to_f32(), |x| bf16::from_f64(x).to_bits())
        }
        DType::Float32 => format_f32(f32::from_le_bytes(arr(b))),
        DType::Float64 => format_f64(f64::from_le_bytes(arr(b))),
        DType::Complex64 => {
            format!("({}, {})", format_f32(f32::from_le_bytes(arr(b))), format_f32(f32::from_le_bytes(arr(&b[4..]))))
        }
        DType::Complex128 => {
            format!("({}, {})", format_f64(f64::from_le_bytes(arr(b))), format_f64(f64::from_le_bytes(arr(&b[8..]))))
        }
        // Not reached: other dtypes are printed as hex bytes.
        _ => "?".into(),
    }
}

/// The payload of a constant in full: a bare scalar, a flat `[a, b, …]` list in row-major
/// order, or `hex"…"` bytes (packed and name-only dtypes, or data that does not decode).
fn format_constant(shape: Option<&Shape>, data: &ConstData) -> String {
    let bytes = data.0.as_slice();
    match shape {
        Some(s) if elementwise_printable(s.dtype, bytes) => {
            let size = s.dtype.size();
            let n = bytes.len() / size;
            if s.rank() == 0 && n == 1 {
                return format_element(s.dtype, bytes);
            }
            let items: Vec<String> = bytes.chunks_exact(size).map(|c| format_element(s.dtype, c)).collect();
            format!("[{}]", items.join(", "))
        }
        _ => {
            let mut s = String::with_capacity(2 * bytes.len() + 5);
            s.push_str("hex\"");
            for b in bytes {
                let _ = write!(s, "{b:02x}");
            }
            s.push('"');
            s
        }
    }
}
