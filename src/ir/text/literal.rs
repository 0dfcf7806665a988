//! Literal values of the text format (numbers, lists, shapes, …) and their conversion to
//! attribute types and constant bytes once the expected type is known.

use half::{bf16, f16};

use crate::error::Result;
use crate::ir::dtype::{DType, DTypeClass};
use crate::ir::op::{Quantization, ReshapeDim};
use crate::ir::shape::Shape;
use crate::ir::text::lexer::{Label, Pos};
use crate::ir::text::names::{GGML_TYPE, QUANT_SCHEME, choices, from_name};

/// A parsed attribute or literal value, converted once the expected type is known.
#[derive(Clone, Debug)]
pub(super) enum Val {
    Num {
        neg: bool,
        kind: NumKind,
        text: String,
        pos: Pos,
    },
    Ident(String, Pos),
    Str(String, Pos),
    Bytes(Vec<u8>, Pos),
    Shape(Shape, Pos),
    Func(Label, Pos),
    List(Vec<Val>, Pos),
    Tuple(Vec<Val>, Pos),
    Named(String, Box<Val>, Pos),
    /// `name(item, …)`: the side-file forms of a constant's payload (`file(…)`, `elided(…)`).
    Call(String, Vec<Val>, Pos),
    Question(Pos),
    Star(Pos),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum NumKind {
    Int,
    Float,
    Hex,
    Inf,
    Nan,
}

impl Val {
    pub(super) fn pos(&self) -> Pos {
        match self {
            Val::Num { pos, .. }
            | Val::Ident(_, pos)
            | Val::Str(_, pos)
            | Val::Bytes(_, pos)
            | Val::Shape(_, pos)
            | Val::Func(_, pos)
            | Val::List(_, pos)
            | Val::Tuple(_, pos)
            | Val::Named(_, _, pos)
            | Val::Call(_, _, pos)
            | Val::Question(pos)
            | Val::Star(pos) => *pos,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Val::Num { neg, text, kind, .. } => {
                let t = match kind {
                    NumKind::Hex => format!("0x{text}"),
                    _ => text.clone(),
                };
                format!("number `{}{t}`", if *neg { "-" } else { "" })
            }
            Val::Ident(s, _) => format!("`{s}`"),
            Val::Str(s, _) => format!("string {s:?}"),
            Val::Bytes(..) => "hex bytes".into(),
            Val::Shape(..) => "a shape".into(),
            Val::Func(..) => "a function reference".into(),
            Val::List(..) => "a list".into(),
            Val::Tuple(..) => "a tuple".into(),
            Val::Named(n, ..) => format!("named item `{n}=…`"),
            Val::Call(n, ..) => format!("`{n}(…)`"),
            Val::Question(_) => "`?`".into(),
            Val::Star(_) => "`*`".into(),
        }
    }

    pub(super) fn expected(&self, what: &str, expected: &str) -> crate::Error {
        self.pos().err(format!("{what}: expected {expected}, found {}", self.describe()))
    }

    /// An integer as i128 (decimal, or hex read as an unsigned bit pattern).
    pub(super) fn int(&self, what: &str) -> Result<(i128, bool)> {
        match self {
            Val::Num { neg, kind: NumKind::Int, text, pos } => {
                let v: i128 = text.parse().map_err(|_| pos.err(format!("{what}: integer `{text}` is too large")))?;
                Ok((if *neg { -v } else { v }, false))
            }
            Val::Num { neg: false, kind: NumKind::Hex, text, pos } => {
                let v = u128::from_str_radix(text, 16)
                    .ok()
                    .filter(|&v| v <= u64::MAX as u128)
                    .ok_or_else(|| pos.err(format!("{what}: hex number `0x{text}` is empty or too large")))?;
                Ok((v as i128, true))
            }
            _ => Err(self.expected(what, "an integer")),
        }
    }

    pub(super) fn i64(&self, what: &str) -> Result<i64> {
        let (v, hex) = self.int(what)?;
        if hex {
            return Ok(v as u64 as i64);
        }
        i64::try_from(v).map_err(|_| self.pos().err(format!("{what}: {v} does not fit in 64 bits")))
    }

    pub(super) fn usize(&self, what: &str) -> Result<usize> {
        let v = self.i64(what)?;
        usize::try_from(v).map_err(|_| self.pos().err(format!("{what}: expected a non-negative integer, found {v}")))
    }

    pub(super) fn bool(&self, what: &str) -> Result<bool> {
        match self {
            Val::Ident(s, _) if s == "true" => Ok(true),
            Val::Ident(s, _) if s == "false" => Ok(false),
            _ => Err(self.expected(what, "`true` or `false`")),
        }
    }

    pub(super) fn dtype(&self, what: &str) -> Result<DType> {
        match self {
            Val::Ident(s, pos) => s.parse::<DType>().map_err(|_| pos.err(format!("{what}: unknown dtype `{s}`"))),
            _ => Err(self.expected(what, "a dtype name such as `f32`")),
        }
    }

    pub(super) fn enumerated<T: Copy>(&self, what: &str, table: &[(T, &'static str)]) -> Result<T> {
        match self {
            Val::Ident(s, _) => from_name(table, s).ok_or_else(|| self.expected(what, &choices(table))),
            _ => Err(self.expected(what, &choices(table))),
        }
    }

    pub(super) fn shape(&self, what: &str) -> Result<Shape> {
        match self {
            Val::Shape(s, _) => Ok(s.clone()),
            _ => Err(self.expected(what, "a shape such as `f32[2,3]`")),
        }
    }

    pub(super) fn list(&self, what: &str) -> Result<&[Val]> {
        match self {
            Val::List(v, _) => Ok(v),
            _ => Err(self.expected(what, "a list `[…]`")),
        }
    }

    pub(super) fn tuple(&self, what: &str, n: usize) -> Result<&[Val]> {
        match self {
            Val::Tuple(v, _) if v.len() == n => Ok(v),
            _ => Err(self.expected(what, &format!("a tuple of {n} items `(…)`"))),
        }
    }

    pub(super) fn i64s(&self, what: &str) -> Result<Vec<i64>> {
        self.list(what)?.iter().map(|v| v.i64(what)).collect()
    }

    pub(super) fn usizes(&self, what: &str) -> Result<Vec<usize>> {
        self.list(what)?.iter().map(|v| v.usize(what)).collect()
    }

    pub(super) fn f64_value(&self, what: &str) -> Result<f64> {
        match self {
            Val::Num { neg, kind: NumKind::Int | NumKind::Float, text, pos } => {
                let v: f64 = text.parse().map_err(|_| pos.err(format!("{what}: bad number `{text}`")))?;
                Ok(if *neg { -v } else { v })
            }
            Val::Num { neg, kind: NumKind::Inf, .. } => Ok(if *neg { f64::NEG_INFINITY } else { f64::INFINITY }),
            _ => Err(self.expected(what, "a number")),
        }
    }

    /// Raw bits written as `0x…` for a float of `bits` width, if this is a hex literal.
    pub(super) fn float_bits(&self, what: &str, bits: u32) -> Result<Option<u64>> {
        match self {
            Val::Num { neg: false, kind: NumKind::Hex, text, pos } => {
                let v = u64::from_str_radix(text, 16)
                    .ok()
                    .filter(|&v| bits == 64 || v < (1u64 << bits))
                    .ok_or_else(|| pos.err(format!("{what}: `0x{text}` is not a {bits}-bit pattern")))?;
                Ok(Some(v))
            }
            Val::Num { neg: true, kind: NumKind::Hex, pos, .. } => {
                Err(pos.err(format!("{what}: a hex bit pattern cannot be negated")))
            }
            _ => Ok(None),
        }
    }

    pub(super) fn nan_sign(&self) -> Option<bool> {
        match self {
            Val::Num { neg, kind: NumKind::Nan, .. } => Some(*neg),
            _ => None,
        }
    }

    pub(super) fn f32(&self, what: &str) -> Result<f32> {
        if let Some(b) = self.float_bits(what, 32)? {
            return Ok(f32::from_bits(b as u32));
        }
        if let Some(neg) = self.nan_sign() {
            return Ok(f32::from_bits(if neg { 0xffc0_0000 } else { 0x7fc0_0000 }));
        }
        match self {
            Val::Num { neg, kind: NumKind::Int | NumKind::Float, text, pos } => {
                let v: f32 = text.parse().map_err(|_| pos.err(format!("{what}: bad number `{text}`")))?;
                Ok(if *neg { -v } else { v })
            }
            _ => Ok(self.f64_value(what)? as f32),
        }
    }

    pub(super) fn f64(&self, what: &str) -> Result<f64> {
        if let Some(b) = self.float_bits(what, 64)? {
            return Ok(f64::from_bits(b));
        }
        if let Some(neg) = self.nan_sign() {
            return Ok(f64::from_bits(if neg { 0xfff8_0000_0000_0000 } else { 0x7ff8_0000_0000_0000 }));
        }
        self.f64_value(what)
    }

    pub(super) fn half_bits(&self, what: &str, canonical_nan: u16, from_f64: fn(f64) -> u16) -> Result<u16> {
        if let Some(b) = self.float_bits(what, 16)? {
            return Ok(b as u16);
        }
        if let Some(neg) = self.nan_sign() {
            return Ok(if neg { canonical_nan | 0x8000 } else { canonical_nan });
        }
        Ok(from_f64(self.f64_value(what)?))
    }
}

/// Attributes of one node, consumed by name while building the op.
pub(super) struct AttrMap {
    pub(super) op: &'static str,
    pub(super) pos: Pos,
    /// (name, value, used, position of the name).
    pub(super) items: Vec<(String, Val, bool, Pos)>,
}

impl AttrMap {
    pub(super) fn what(&self, name: &str) -> String {
        format!("attribute `{name}` of {}", self.op)
    }

    pub(super) fn get(&mut self, name: &str) -> Option<Val> {
        self.items.iter_mut().find(|(n, _, _, _)| n == name).map(|(_, v, used, _)| {
            *used = true;
            v.clone()
        })
    }

    pub(super) fn req(&mut self, name: &str) -> Result<Val> {
        self.get(name).ok_or_else(|| self.pos.err(format!("{}: missing attribute `{name}`", self.op)))
    }

    pub(super) fn usize(&mut self, name: &str) -> Result<usize> {
        let w = self.what(name);
        self.req(name)?.usize(&w)
    }

    pub(super) fn i64(&mut self, name: &str) -> Result<i64> {
        let w = self.what(name);
        self.req(name)?.i64(&w)
    }

    pub(super) fn usizes(&mut self, name: &str) -> Result<Vec<usize>> {
        let w = self.what(name);
        self.req(name)?.usizes(&w)
    }

    pub(super) fn i64s(&mut self, name: &str) -> Result<Vec<i64>> {
        let w = self.what(name);
        self.req(name)?.i64s(&w)
    }

    /// A boolean flag; absent means `false`.
    pub(super) fn flag(&mut self, name: &str) -> Result<bool> {
        let w = self.what(name);
        self.get(name).map_or(Ok(false), |v| v.bool(&w))
    }

    pub(super) fn dtype(&mut self, name: &str) -> Result<DType> {
        let w = self.what(name);
        self.req(name)?.dtype(&w)
    }

    pub(super) fn opt_dtype(&mut self, name: &str) -> Result<Option<DType>> {
        let w = self.what(name);
        self.get(name).map(|v| v.dtype(&w)).transpose()
    }

    pub(super) fn shape(&mut self, name: &str) -> Result<Shape> {
        let w = self.what(name);
        self.req(name)?.shape(&w)
    }

    pub(super) fn f32(&mut self, name: &str) -> Result<f32> {
        let w = self.what(name);
        self.req(name)?.f32(&w)
    }

    pub(super) fn f64(&mut self, name: &str) -> Result<f64> {
        let w = self.what(name);
        self.req(name)?.f64(&w)
    }

    pub(super) fn enumerated<T: Copy>(&mut self, name: &str, table: &[(T, &'static str)]) -> Result<T> {
        let w = self.what(name);
        self.req(name)?.enumerated(&w, table)
    }

    pub(super) fn pairs(&mut self, name: &str) -> Result<Vec<(i64, i64)>> {
        let w = self.what(name);
        let v = self.req(name)?;
        v.list(&w)?
            .iter()
            .map(|p| {
                let t = p.tuple(&w, 2)?;
                Ok((t[0].i64(&w)?, t[1].i64(&w)?))
            })
            .collect()
    }

    /// `(a, b, [spatial…])` of ConvGeneral's `input`, `kernel` and `output` attributes.
    pub(super) fn conv_triple(&mut self, name: &str) -> Result<(usize, usize, Vec<usize>)> {
        let w = self.what(name);
        let v = self.req(name)?;
        let t = v.tuple(&w, 3)?;
        Ok((t[0].usize(&w)?, t[1].usize(&w)?, t[2].usizes(&w)?))
    }

    pub(super) fn quant(&mut self) -> Result<Quantization> {
        Ok(Quantization {
            scheme: self.enumerated("scheme", &QUANT_SCHEME)?,
            block_axis: self.usize("block_axis")?,
            block_size: self.usize("block_size")?,
            ggml_type: self.enumerated("ggml_type", &GGML_TYPE)?,
        })
    }

    /// Errors on the first attribute that was not consumed.
    pub(super) fn finish(self) -> Result<()> {
        match self.items.iter().find(|(_, _, used, _)| !used) {
            Some((n, _, _, pos)) => Err(pos.err(format!("{}: unknown attribute `{n}`", self.op))),
            None => Ok(()),
        }
    }
}

pub(super) fn reshape_dim(v: &Val, what: &str) -> Result<ReshapeDim> {
    match v {
        Val::Named(name, inner, _) => match inner.as_ref() {
            Val::Question(_) => Ok(ReshapeDim::Dynamic(name.clone())),
            Val::Star(_) => Ok(ReshapeDim::Inferred(name.clone())),
            other => Err(other.expected(what, "`?` (dynamic) or `*` (inferred) after `name=`")),
        },
        other => {
            Ok(ReshapeDim::Static(other.i64(what).map_err(|_| other.expected(what, "a size, `name=?` or `name=*`"))?))
        }
    }
}

pub(super) fn parse_hex_bytes(h: &str, pos: Pos) -> Result<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return Err(pos.err("hex bytes: expected an even number of hex digits"));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&h[i..i + 2], 16)
                .map_err(|_| pos.err(format!("hex bytes: bad hex digits `{}`", &h[i..i + 2])))
        })
        .collect()
}

/// The bytes of a constant from its payload and (first) output shape.
pub(super) fn constant_bytes(payload: &Val, shape: Option<&Shape>) -> Result<Vec<u8>> {
    if let Val::Bytes(b, _) = payload {
        return Ok(b.clone());
    }
    let Some(shape) = shape else {
        return Err(payload.pos().err("constant: without an output shape the value must be `hex\"…\"` bytes"));
    };
    let dt = shape.dtype;
    let ok = matches!(
        dt.class(),
        DTypeClass::Bool | DTypeClass::SignedInt | DTypeClass::UnsignedInt | DTypeClass::Float | DTypeClass::Complex
    ) && !dt.is_packed();
    if !ok {
        return Err(payload
            .pos()
            .err(format!("constant: values of dtype {} must be written as `hex\"…\"` bytes", dt.short_name())));
    }
    let mut elems = Vec::new();
    flatten(payload, &mut elems);
    let mut out = Vec::with_capacity(elems.len() * dt.size());
    for e in elems {
        encode_element(dt, e, &mut out)?;
    }
    Ok(out)
}

fn flatten<'a>(v: &'a Val, out: &mut Vec<&'a Val>) {
    match v {
        Val::List(items, _) => items.iter().for_each(|i| flatten(i, out)),
        other => out.push(other),
    }
}

fn encode_element(dt: DType, v: &Val, out: &mut Vec<u8>) -> Result<()> {
    let what = format!("constant element of dtype {}", dt.short_name());
    let int_in = |lo: i128, hi: i128, bits: u32| -> Result<i128> {
        let (x, hex) = v.int(&what)?;
        if hex {
            if bits < 128 && x >= (1i128 << bits) {
                return Err(v.pos().err(format!("{what}: `{}` has more than {bits} bits", v.describe())));
            }
            // Reinterpret the bit pattern as a two's complement value of `bits` width.
            return Ok(if lo < 0 && x > hi { x - (1i128 << bits) } else { x });
        }
        if x < lo || x > hi {
            return Err(v.pos().err(format!("{what}: {x} is out of range [{lo}, {hi}]")));
        }
        Ok(x)
    };
    match dt {
        DType::Bool => out.push(v.bool(&what)? as u8),
        DType::Int8 => out.push(int_in(i8::MIN as i128, i8::MAX as i128, 8)? as i8 as u8),
        DType::Uint8 => out.push(int_in(0, u8::MAX as i128, 8)? as u8),
        DType::Int16 => out.extend((int_in(i16::MIN as i128, i16::MAX as i128, 16)? as i16).to_le_bytes()),
        DType::Uint16 => out.extend((int_in(0, u16::MAX as i128, 16)? as u16).to_le_bytes()),
        DType::Int32 => out.extend((int_in(i32::MIN as i128, i32::MAX as i128, 32)? as i32).to_le_bytes()),
        DType::Uint32 => out.extend((int_in(0, u32::MAX as i128, 32)? as u32).to_le_bytes()),
        DType::Int64 => out.extend((int_in(i64::MIN as i128, i64::MAX as i128, 64)? as i64).to_le_bytes()),
        DType::Uint64 => out.extend((int_in(0, u64::MAX as i128, 64)? as u64).to_le_bytes()),
        DType::Float16 => out.extend(v.half_bits(&what, 0x7e00, |x| f16::from_f64(x).to_bits())?.to_le_bytes()),
        DType::BFloat16 => out.extend(v.half_bits(&what, 0x7fc0, |x| bf16::from_f64(x).to_bits())?.to_le_bytes()),
        DType::Float32 => out.extend(v.f32(&what)?.to_le_bytes()),
        DType::Float64 => out.extend(v.f64(&what)?.to_le_bytes()),
        DType::Complex64 => {
            let t = v.tuple(&what, 2).map_err(|_| v.expected(&what, "a complex number `(re, im)`"))?;
            out.extend(t[0].f32(&what)?.to_le_bytes());
            out.extend(t[1].f32(&what)?.to_le_bytes());
        }
        DType::Complex128 => {
            let t = v.tuple(&what, 2).map_err(|_| v.expected(&what, "a complex number `(re, im)`"))?;
            out.extend(t[0].f64(&what)?.to_le_bytes());
            out.extend(t[1].f64(&what)?.to_le_bytes());
        }
        other => {
            return Err(v.pos().err(format!("constant: dtype {} has no element syntax", other.short_name())));
        }
    }
    Ok(())
}
