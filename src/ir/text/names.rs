//! Spellings shared by the printer and the parser: enum names, names needing quotes, shapes.

use std::fmt::Write as _;

use crate::ir::op::{
    Activation, ArithReduce, AttentionLayout, DenseLayout, FftType, GgmlType, QuantScheme, ReshapeDim,
};
use crate::ir::shape::{DYNAMIC_DIM, Shape};
use crate::ir::text::lexer::is_plain_ident;

/// Arithmetic reduction kinds.
pub const ARITH: [(ArithReduce, &str); 4] = [
    (ArithReduce::Sum, "sum"),
    (ArithReduce::Product, "product"),
    (ArithReduce::Max, "max"),
    (ArithReduce::Min, "min"),
];

/// FFT kinds.
pub const FFT: [(FftType, &str); 4] = [
    (FftType::Forward, "forward"),
    (FftType::Inverse, "inverse"),
    (FftType::ForwardReal, "forward_real"),
    (FftType::InverseReal, "inverse_real"),
];

/// Activations of the fused ops.
pub const ACTIVATION: [(Activation, &str); 6] = [
    (Activation::None, "none"),
    (Activation::Gelu, "gelu"),
    (Activation::Relu, "relu"),
    (Activation::Silu, "silu"),
    (Activation::HardSwish, "hard_swish"),
    (Activation::Tanh, "tanh"),
];

/// FusedDense weight layouts.
pub const DENSE_LAYOUT: [(DenseLayout, &str); 2] =
    [(DenseLayout::InputOutputs, "input_outputs"), (DenseLayout::OutputsInput, "outputs_input")];

/// Attention axis layouts.
pub const ATTENTION_LAYOUT: [(AttentionLayout, &str); 2] =
    [(AttentionLayout::Bhsd, "bhsd"), (AttentionLayout::Bshd, "bshd")];

/// Quantization schemes.
pub const QUANT_SCHEME: [(QuantScheme, &str); 3] =
    [(QuantScheme::Linear, "linear"), (QuantScheme::Nf4, "nf4"), (QuantScheme::Ggml, "ggml")];

/// GGML block types.
pub const GGML_TYPE: [(GgmlType, &str); 8] = [
    (GgmlType::Q4_0, "q4_0"),
    (GgmlType::Q8_0, "q8_0"),
    (GgmlType::Iq4Nl, "iq4_nl"),
    (GgmlType::Q2K, "q2_k"),
    (GgmlType::Q3K, "q3_k"),
    (GgmlType::Q4K, "q4_k"),
    (GgmlType::Q5K, "q5_k"),
    (GgmlType::Q6K, "q6_k"),
];

/// The spelling of `v` in `table`.
pub fn name_of<T: PartialEq + Copy>(table: &[(T, &'static str)], v: T) -> &'static str {
    table.iter().find(|(t, _)| *t == v).map(|(_, n)| *n).unwrap_or("?")
}

/// The value spelled `name` in `table`.
pub fn from_name<T: Copy>(table: &[(T, &'static str)], name: &str) -> Option<T> {
    table.iter().find(|(_, n)| *n == name).map(|(t, _)| *t)
}

/// The choices of `table`, for error messages: "`a`, `b` or `c`".
pub fn choices<T>(table: &[(T, &'static str)]) -> String {
    let names: Vec<String> = table.iter().map(|(_, n)| format!("`{n}`")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// A name as written in the text: bare when it is a plain identifier, else a quoted string.
pub fn quote_name(s: &str) -> String {
    if is_plain_ident(s) { s.to_string() } else { format!("{s:?}") }
}

/// A shape in text form: `f32[2,3]`, `f32[]`, `f32[batch=?,512]`.
pub fn format_shape(s: &Shape) -> String {
    let mut out = String::from(s.dtype.short_name());
    out.push('[');
    for (i, &d) in s.dims.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let name = s.axis_name(i);
        if !name.is_empty() {
            out.push_str(&quote_name(name));
            out.push('=');
        }
        if d == DYNAMIC_DIM {
            out.push('?');
        } else {
            let _ = write!(out, "{d}");
        }
    }
    out.push(']');
    out
}

/// One DynamicReshape spec: `4`, `name=?` (dynamic) or `name=*` (inferred).
pub fn format_reshape_dim(d: &ReshapeDim) -> String {
    match d {
        ReshapeDim::Static(n) => n.to_string(),
        ReshapeDim::Dynamic(name) => format!("{}=?", quote_name(name)),
        ReshapeDim::Inferred(name) => format!("{}=*", quote_name(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::dtype::DType;

    #[test]
    fn shapes() {
        assert_eq!(format_shape(&Shape::new(DType::Float32, &[2, 3])), "f32[2,3]");
        assert_eq!(format_shape(&Shape::scalar(DType::BFloat16)), "bf16[]");
        let s = Shape::with_names(DType::Int8, &[-1, 512, 2], &["batch", "", "a b"]).unwrap();
        assert_eq!(format_shape(&s), "i8[batch=?,512,\"a b\"=2]");
    }

    #[test]
    fn tables_round_trip() {
        for (v, n) in GGML_TYPE {
            assert_eq!(from_name(&GGML_TYPE, n), Some(v));
            assert_eq!(name_of(&GGML_TYPE, v), n);
        }
        assert_eq!(choices(&ATTENTION_LAYOUT), "`bhsd` or `bshd`");
    }
}
