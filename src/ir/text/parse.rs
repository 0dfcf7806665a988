//! The IR parser: text (see `docs/ir.md`) to a [`Module`], with line/column errors.
//!
//! Parsing is two-pass over the token list: a scan of the function headers allocates every
//! function in textual order (so ops may name a closure or function defined further down), then
//! each function is parsed and its params and node outputs are allocated in textual order.
//! Operand references are resolved at the end, so a reference to a value defined later is not
//! a parse error (the verifier reports the use before definition). Output shapes are taken from
//! the text; the parser does no shape inference.

use std::collections::HashMap;
use std::sync::Arc;

use half::{bf16, f16};

use crate::error::Result;
use crate::ir::dtype::{DType, DTypeClass};
use crate::ir::module::{FuncId, Module, NodeId, ValueId};
use crate::ir::op::{
    ALL_BINARY, ALL_COMPARE, ALL_REDUCE, ALL_UNARY, ConstData, ConvAxes, Op, PadAxis, Quantization, ReshapeDim,
};
use crate::ir::optype::OpType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};
use crate::ir::text::lexer::{Label, Pos, Tok, Token, tokenize};
use crate::ir::text::names::{
    ACTIVATION, ARITH, ATTENTION_LAYOUT, DENSE_LAYOUT, FFT, GGML_TYPE, QUANT_SCHEME, choices, from_name,
};
use crate::ir::text::print::implied_kind;

/// Where the parts of a parsed module were written (1-based lines), for diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceMap {
    /// Line of each node, indexed by `NodeId`.
    pub node_lines: Vec<usize>,
    /// Line of each function header, indexed by `FuncId`.
    pub func_lines: Vec<usize>,
}

impl SourceMap {
    /// The line of node `n`, if known.
    pub fn node_line(&self, n: NodeId) -> Option<usize> {
        self.node_lines.get(n.index()).copied().filter(|&l| l > 0)
    }

    /// The line of function `f`'s header, if known.
    pub fn func_line(&self, f: FuncId) -> Option<usize> {
        self.func_lines.get(f.index()).copied().filter(|&l| l > 0)
    }
}

/// Parses a module. Errors are [`crate::Error::Parse`] with the line and column of the offending
/// token and what was expected there.
pub fn parse_module(text: &str) -> Result<Module> {
    parse_module_with_locations(text).map(|(m, _)| m)
}

/// Parses a module and also returns where each node and function was written.
pub fn parse_module_with_locations(text: &str) -> Result<(Module, SourceMap)> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks,
        i: 0,
        m: Module::new(""),
        funcs: HashMap::new(),
        values: HashMap::new(),
        pending_inputs: Vec::new(),
        pending_outputs: Vec::new(),
        map: SourceMap::default(),
    };
    p.module()?;
    Ok((p.m, p.map))
}

const PLACEHOLDER: ValueId = ValueId(u32::MAX);

struct Parser {
    toks: Vec<Token>,
    i: usize,
    m: Module,
    funcs: HashMap<Label, FuncId>,
    values: HashMap<String, (ValueId, Pos)>,
    /// (node, operand index, label, position) to resolve at the end.
    pending_inputs: Vec<(NodeId, usize, String, Pos)>,
    /// (function, output index, label, position) to resolve at the end.
    pending_outputs: Vec<(FuncId, usize, String, Pos)>,
    map: SourceMap,
}

/// A parsed attribute or literal value, converted once the expected type is known.
#[derive(Clone, Debug)]
enum Val {
    Num { neg: bool, kind: NumKind, text: String, pos: Pos },
    Ident(String, Pos),
    Str(String, Pos),
    Bytes(Vec<u8>, Pos),
    Shape(Shape, Pos),
    Func(Label, Pos),
    List(Vec<Val>, Pos),
    Tuple(Vec<Val>, Pos),
    Named(String, Box<Val>, Pos),
    Question(Pos),
    Star(Pos),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum NumKind {
    Int,
    Float,
    Hex,
    Inf,
    Nan,
}

impl Val {
    fn pos(&self) -> Pos {
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
            | Val::Question(pos)
            | Val::Star(pos) => *pos,
        }
    }

    fn describe(&self) -> String {
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
            Val::Question(_) => "`?`".into(),
            Val::Star(_) => "`*`".into(),
        }
    }

    fn expected(&self, what: &str, expected: &str) -> crate::Error {
        self.pos().err(format!("{what}: expected {expected}, found {}", self.describe()))
    }

    /// An integer as i128 (decimal, or hex read as an unsigned bit pattern).
    fn int(&self, what: &str) -> Result<(i128, bool)> {
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

    fn i64(&self, what: &str) -> Result<i64> {
        let (v, hex) = self.int(what)?;
        if hex {
            return Ok(v as u64 as i64);
        }
        i64::try_from(v).map_err(|_| self.pos().err(format!("{what}: {v} does not fit in 64 bits")))
    }

    fn usize(&self, what: &str) -> Result<usize> {
        let v = self.i64(what)?;
        usize::try_from(v).map_err(|_| self.pos().err(format!("{what}: expected a non-negative integer, found {v}")))
    }

    fn bool(&self, what: &str) -> Result<bool> {
        match self {
            Val::Ident(s, _) if s == "true" => Ok(true),
            Val::Ident(s, _) if s == "false" => Ok(false),
            _ => Err(self.expected(what, "`true` or `false`")),
        }
    }

    fn dtype(&self, what: &str) -> Result<DType> {
        match self {
            Val::Ident(s, pos) => s.parse::<DType>().map_err(|_| pos.err(format!("{what}: unknown dtype `{s}`"))),
            _ => Err(self.expected(what, "a dtype name such as `f32`")),
        }
    }

    fn enumerated<T: Copy>(&self, what: &str, table: &[(T, &'static str)]) -> Result<T> {
        match self {
            Val::Ident(s, _) => from_name(table, s).ok_or_else(|| self.expected(what, &choices(table))),
            _ => Err(self.expected(what, &choices(table))),
        }
    }

    fn shape(&self, what: &str) -> Result<Shape> {
        match self {
            Val::Shape(s, _) => Ok(s.clone()),
            _ => Err(self.expected(what, "a shape such as `f32[2,3]`")),
        }
    }

    fn list(&self, what: &str) -> Result<&[Val]> {
        match self {
            Val::List(v, _) => Ok(v),
            _ => Err(self.expected(what, "a list `[…]`")),
        }
    }

    fn tuple(&self, what: &str, n: usize) -> Result<&[Val]> {
        match self {
            Val::Tuple(v, _) if v.len() == n => Ok(v),
            _ => Err(self.expected(what, &format!("a tuple of {n} items `(…)`"))),
        }
    }

    fn i64s(&self, what: &str) -> Result<Vec<i64>> {
        self.list(what)?.iter().map(|v| v.i64(what)).collect()
    }

    fn usizes(&self, what: &str) -> Result<Vec<usize>> {
        self.list(what)?.iter().map(|v| v.usize(what)).collect()
    }

    fn f64_value(&self, what: &str) -> Result<f64> {
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
    fn float_bits(&self, what: &str, bits: u32) -> Result<Option<u64>> {
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

    fn nan_sign(&self) -> Option<bool> {
        match self {
            Val::Num { neg, kind: NumKind::Nan, .. } => Some(*neg),
            _ => None,
        }
    }

    fn f32(&self, what: &str) -> Result<f32> {
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

    fn f64(&self, what: &str) -> Result<f64> {
        if let Some(b) = self.float_bits(what, 64)? {
            return Ok(f64::from_bits(b));
        }
        if let Some(neg) = self.nan_sign() {
            return Ok(f64::from_bits(if neg { 0xfff8_0000_0000_0000 } else { 0x7ff8_0000_0000_0000 }));
        }
        self.f64_value(what)
    }

    fn half_bits(&self, what: &str, canonical_nan: u16, from_f64: fn(f64) -> u16) -> Result<u16> {
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
struct AttrMap {
    op: &'static str,
    pos: Pos,
    /// (name, value, used, position of the name).
    items: Vec<(String, Val, bool, Pos)>,
}

impl AttrMap {
    fn what(&self, name: &str) -> String {
        format!("attribute `{name}` of {}", self.op)
    }

    fn get(&mut self, name: &str) -> Option<Val> {
        self.items.iter_mut().find(|(n, _, _, _)| n == name).map(|(_, v, used, _)| {
            *used = true;
            v.clone()
        })
    }

    fn req(&mut self, name: &str) -> Result<Val> {
        self.get(name).ok_or_else(|| self.pos.err(format!("{}: missing attribute `{name}`", self.op)))
    }

    fn usize(&mut self, name: &str) -> Result<usize> {
        let w = self.what(name);
        self.req(name)?.usize(&w)
    }

    fn i64(&mut self, name: &str) -> Result<i64> {
        let w = self.what(name);
        self.req(name)?.i64(&w)
    }

    fn usizes(&mut self, name: &str) -> Result<Vec<usize>> {
        let w = self.what(name);
        self.req(name)?.usizes(&w)
    }

    fn i64s(&mut self, name: &str) -> Result<Vec<i64>> {
        let w = self.what(name);
        self.req(name)?.i64s(&w)
    }

    /// A boolean flag; absent means `false`.
    fn flag(&mut self, name: &str) -> Result<bool> {
        let w = self.what(name);
        self.get(name).map_or(Ok(false), |v| v.bool(&w))
    }

    fn dtype(&mut self, name: &str) -> Result<DType> {
        let w = self.what(name);
        self.req(name)?.dtype(&w)
    }

    fn opt_dtype(&mut self, name: &str) -> Result<Option<DType>> {
        let w = self.what(name);
        self.get(name).map(|v| v.dtype(&w)).transpose()
    }

    fn shape(&mut self, name: &str) -> Result<Shape> {
        let w = self.what(name);
        self.req(name)?.shape(&w)
    }

    fn f32(&mut self, name: &str) -> Result<f32> {
        let w = self.what(name);
        self.req(name)?.f32(&w)
    }

    fn f64(&mut self, name: &str) -> Result<f64> {
        let w = self.what(name);
        self.req(name)?.f64(&w)
    }

    fn enumerated<T: Copy>(&mut self, name: &str, table: &[(T, &'static str)]) -> Result<T> {
        let w = self.what(name);
        self.req(name)?.enumerated(&w, table)
    }

    fn pairs(&mut self, name: &str) -> Result<Vec<(i64, i64)>> {
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
    fn conv_triple(&mut self, name: &str) -> Result<(usize, usize, Vec<usize>)> {
        let w = self.what(name);
        let v = self.req(name)?;
        let t = v.tuple(&w, 3)?;
        Ok((t[0].usize(&w)?, t[1].usize(&w)?, t[2].usizes(&w)?))
    }

    fn quant(&mut self) -> Result<Quantization> {
        Ok(Quantization {
            scheme: self.enumerated("scheme", &QUANT_SCHEME)?,
            block_axis: self.usize("block_axis")?,
            block_size: self.usize("block_size")?,
            ggml_type: self.enumerated("ggml_type", &GGML_TYPE)?,
        })
    }

    /// Errors on the first attribute that was not consumed.
    fn finish(self) -> Result<()> {
        match self.items.iter().find(|(_, _, used, _)| !used) {
            Some((n, _, _, pos)) => Err(pos.err(format!("{}: unknown attribute `{n}`", self.op))),
            None => Ok(()),
        }
    }
}

/// Ops without attributes whose mnemonic says everything (elementwise, compare, barriers, …).
fn simple_op(t: OpType) -> Option<Op> {
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
    fn peek(&self) -> &Tok {
        &self.toks[self.i].tok
    }

    fn peek_at(&self, k: usize) -> &Tok {
        let j = (self.i + k).min(self.toks.len() - 1);
        &self.toks[j].tok
    }

    fn pos(&self) -> Pos {
        self.toks[self.i].pos
    }

    fn next(&mut self) -> Token {
        let t = self.toks[self.i].clone();
        if self.i + 1 < self.toks.len() {
            self.i += 1;
        }
        t
    }

    fn found(&self) -> String {
        self.peek().describe()
    }

    fn err_expected(&self, what: &str) -> crate::Error {
        self.pos().err(format!("expected {what}, found {}", self.found()))
    }

    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char, context: &str) -> Result<Pos> {
        if self.is_punct(c) {
            Ok(self.next().pos)
        } else {
            Err(self.err_expected(&format!("`{c}` {context}")))
        }
    }

    fn skip_newlines(&mut self) {
        while *self.peek() == Tok::Newline {
            self.next();
        }
    }

    fn expect_eol(&mut self, context: &str) -> Result<()> {
        match self.peek() {
            Tok::Newline => {
                self.next();
                Ok(())
            }
            Tok::Eof => Ok(()),
            _ => Err(self.err_expected(&format!("end of line {context}"))),
        }
    }

    fn module(&mut self) -> Result<()> {
        self.skip_newlines();
        if *self.peek() != Tok::Ident("module".into()) {
            return Err(self.err_expected("`module @name` header"));
        }
        self.next();
        self.m.name = match self.next() {
            Token { tok: Tok::Func(Label::Name(n) | Label::Number(n)), .. } => n,
            t => return Err(t.pos.err(format!("expected module name `@name`, found {}", t.tok.describe()))),
        };
        self.expect_eol("after the module header")?;
        self.scan_functions()?;
        loop {
            self.skip_newlines();
            match self.peek() {
                Tok::Eof => break,
                Tok::Ident(k) if k == "func" || k == "closure" => self.function()?,
                _ => return Err(self.err_expected("`func` or `closure`")),
            }
        }
        self.resolve()
    }

    /// First pass: allocate every function (main is `FuncId(0)`), in textual order.
    fn scan_functions(&mut self) -> Result<()> {
        let mut depth = 0usize;
        let mut line_start = true;
        let mut has_main = false;
        let mut headers = Vec::new();
        for k in self.i..self.toks.len() {
            let t = &self.toks[k];
            match &t.tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth = depth.saturating_sub(1),
                Tok::Ident(kw) if line_start && depth == 0 && (kw == "func" || kw == "closure") => {
                    if let Some(Token { tok: Tok::Func(label), pos }) = self.toks.get(k + 1) {
                        match (kw.as_str(), label) {
                            ("func", Label::Number(n)) => {
                                return Err(pos.err(format!(
                                    "expected a function name, found `@{n}` (numeric labels are for closures)"
                                )));
                            }
                            ("closure", Label::Name(n)) => {
                                return Err(pos.err(format!(
                                    "expected a closure number such as `@1`, found `@{n}` (names are for functions)"
                                )));
                            }
                            _ => {}
                        }
                        if headers.iter().any(|(l, _, _)| l == label) {
                            return Err(pos.err(format!("function `{}` is defined twice", fmt_label(label))));
                        }
                        if *label == Label::Name("main".into()) {
                            has_main = true;
                        }
                        headers.push((label.clone(), kw == "closure", t.pos));
                    }
                }
                _ => {}
            }
            line_start = t.tok == Tok::Newline;
        }
        if !has_main {
            return Err(self.toks[self.toks.len() - 1].pos.err("expected a `func @main(…)` definition"));
        }
        self.map.func_lines = vec![0; headers.len()];
        for (label, _, _) in headers {
            let id = match &label {
                Label::Name(n) if n == "main" => self.m.main,
                Label::Name(n) => self.m.add_function(Some(n.clone()), None),
                Label::Number(_) => self.m.add_function(None, None),
            };
            self.funcs.insert(label, id);
        }
        Ok(())
    }

    fn func_ref(&self, label: &Label, pos: Pos) -> Result<FuncId> {
        self.funcs.get(label).copied().ok_or_else(|| pos.err(format!("undefined function `{}`", fmt_label(label))))
    }

    fn function(&mut self) -> Result<()> {
        let kw = self.next();
        let (label, lpos) = match self.next() {
            Token { tok: Tok::Func(l), pos } => (l, pos),
            t => return Err(t.pos.err(format!("expected a function label `@…`, found {}", t.tok.describe()))),
        };
        let f = self.func_ref(&label, lpos)?;
        self.map.func_lines[f.index()] = kw.pos.line;
        self.expect_punct('(', "opening the parameter list")?;
        if !self.eat_punct(')') {
            loop {
                let (vlabel, vpos) = match self.next() {
                    Token { tok: Tok::Value(v), pos } => (v, pos),
                    t => {
                        return Err(t.pos.err(format!("expected a parameter `%N`, found {}", t.tok.describe())));
                    }
                };
                let name = match self.peek() {
                    Tok::Str(s) => {
                        let s = s.clone();
                        self.next();
                        s
                    }
                    _ => String::new(),
                };
                self.expect_punct(':', "before the parameter's shape")?;
                let shape = self.shape()?;
                let v = self.m.add_param(f, &name, shape);
                self.define(vlabel, v, vpos)?;
                if self.eat_punct(')') {
                    break;
                }
                self.expect_punct(',', "or `)` after a parameter")?;
            }
        }
        if *self.peek() == Tok::Ident("parent".into()) {
            self.next();
            self.expect_punct('=', "after `parent`")?;
            let parent = match self.next() {
                Token { tok: Tok::Func(l), pos } => self.func_ref(&l, pos)?,
                t => return Err(t.pos.err(format!("expected a function label `@…`, found {}", t.tok.describe()))),
            };
            self.m.func_mut(f).parent = Some(parent);
        }
        self.expect_punct('{', "opening the function body")?;
        self.expect_eol("after `{`")?;
        loop {
            self.skip_newlines();
            match self.peek().clone() {
                Tok::Punct('}') => break,
                Tok::Ident(k) if k == "return" => {
                    self.next();
                    let mut outs = Vec::new();
                    if !matches!(self.peek(), Tok::Newline | Tok::Eof) {
                        loop {
                            match self.next() {
                                Token { tok: Tok::Value(v), pos } => outs.push((v, pos)),
                                t => {
                                    return Err(t
                                        .pos
                                        .err(format!("expected a returned value `%N`, found {}", t.tok.describe())));
                                }
                            }
                            if !self.eat_punct(',') {
                                break;
                            }
                        }
                    }
                    self.expect_eol("after the returned values")?;
                    for (k, (v, pos)) in outs.iter().enumerate() {
                        self.pending_outputs.push((f, k, v.clone(), *pos));
                    }
                    self.m.func_mut(f).outputs = Some(vec![PLACEHOLDER; outs.len()]);
                    self.skip_newlines();
                    if !self.is_punct('}') {
                        return Err(self.err_expected("`}` after `return` (it must be the last statement)"));
                    }
                    break;
                }
                Tok::Eof => return Err(self.err_expected("`}` closing the function body")),
                _ => self.node(f)?,
            }
        }
        self.next();
        self.expect_eol("after `}`")
    }

    fn define(&mut self, label: String, v: ValueId, pos: Pos) -> Result<()> {
        if let Some((_, prev)) = self.values.get(&label) {
            return Err(pos.err(format!("value `%{label}` is already defined at line {}", prev.line)));
        }
        self.values.insert(label, (v, pos));
        Ok(())
    }

    fn node(&mut self, f: FuncId) -> Result<()> {
        let line = self.pos().line;
        let mut results = Vec::new();
        if matches!(self.peek(), Tok::Value(_)) {
            loop {
                match self.next() {
                    Token { tok: Tok::Value(v), pos } => results.push((v, pos)),
                    t => return Err(t.pos.err(format!("expected a result `%N`, found {}", t.tok.describe()))),
                }
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct('=', "after the results")?;
        }
        let (mnemonic, mpos) = match self.next() {
            Token { tok: Tok::Ident(s), pos } => (s, pos),
            t => return Err(t.pos.err(format!("expected an op name, found {}", t.tok.describe()))),
        };
        let t = OpType::from_name(&mnemonic).ok_or_else(|| mpos.err(format!("unknown op `{mnemonic}`")))?;
        let mut operands: Vec<(String, Pos)> = Vec::new();
        let mut attrs = AttrMap { op: t.name(), pos: mpos, items: Vec::new() };
        let mut payload: Option<Val> = None;
        let mut first = true;
        while !matches!(self.peek(), Tok::Newline | Tok::Eof | Tok::Punct(':')) {
            if !first {
                self.expect_punct(',', "between operands and attributes")?;
            }
            first = false;
            let pos = self.pos();
            match self.peek().clone() {
                Tok::Value(v) => {
                    if !attrs.items.is_empty() || payload.is_some() {
                        return Err(pos.err(format!("operand `%{v}` must come before the attributes")));
                    }
                    self.next();
                    operands.push((v, pos));
                }
                Tok::Ident(name) if *self.peek_at(1) == Tok::Punct('=') => {
                    self.next();
                    self.next();
                    if attrs.items.iter().any(|(n, _, _, _)| *n == name) {
                        return Err(pos.err(format!("{}: attribute `{name}` is given twice", t.name())));
                    }
                    let v = self.value()?;
                    attrs.items.push((name, v, false, pos));
                }
                _ if t == OpType::Constant && payload.is_none() => payload = Some(self.value()?),
                _ => {
                    return Err(self.err_expected(if t == OpType::Constant {
                        "an operand `%N`, the constant's value or an attribute `name=value`"
                    } else {
                        "an operand `%N` or an attribute `name=value`"
                    }));
                }
            }
        }
        let mut shapes = Vec::new();
        if self.is_punct(':') {
            let cpos = self.next().pos;
            loop {
                shapes.push(self.shape()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
            if shapes.len() != results.len() {
                return Err(cpos.err(format!(
                    "{mnemonic}: {} result(s) but {} output shape(s) after `:`",
                    results.len(),
                    shapes.len()
                )));
            }
        } else if !results.is_empty() {
            return Err(self.err_expected("`:` and the output shapes"));
        }
        self.expect_eol("after the node")?;
        let op = if t == OpType::Constant {
            let payload = payload.ok_or_else(|| mpos.err("constant: missing value (e.g. `constant [1, 2]`)"))?;
            let bytes = constant_bytes(&payload, shapes.first())?;
            Op::Constant(ConstData(Arc::new(bytes)))
        } else {
            self.build_op(t, &mut attrs)?
        };
        attrs.finish()?;
        let node = self.m.add_node(f, op, vec![PLACEHOLDER; operands.len()], shapes);
        self.map.node_lines.push(line);
        for (k, (v, pos)) in operands.into_iter().enumerate() {
            self.pending_inputs.push((node, k, v, pos));
        }
        let outs = self.m.node(node).outputs.clone();
        for ((label, pos), v) in results.into_iter().zip(outs) {
            self.define(label, v, pos)?;
        }
        Ok(())
    }

    fn resolve(&mut self) -> Result<()> {
        for (node, k, label, pos) in std::mem::take(&mut self.pending_inputs) {
            let v = self.lookup(&label, pos)?;
            self.m.nodes[node.index()].inputs[k] = v;
        }
        for (f, k, label, pos) in std::mem::take(&mut self.pending_outputs) {
            let v = self.lookup(&label, pos)?;
            if let Some(outs) = self.m.func_mut(f).outputs.as_mut() {
                outs[k] = v;
            }
        }
        Ok(())
    }

    fn lookup(&self, label: &str, pos: Pos) -> Result<ValueId> {
        self.values.get(label).map(|(v, _)| *v).ok_or_else(|| pos.err(format!("undefined value `%{label}`")))
    }

    /// `dtype[dims]` with dims `4`, `?`, `name=4`, `name=?`.
    fn shape(&mut self) -> Result<Shape> {
        let (dname, dpos) = match self.next() {
            Token { tok: Tok::Ident(s), pos } => (s, pos),
            t => return Err(t.pos.err(format!("expected a shape such as `f32[2,3]`, found {}", t.tok.describe()))),
        };
        let dtype: DType = dname.parse().map_err(|_| dpos.err(format!("unknown dtype `{dname}`")))?;
        self.expect_punct('[', "after the dtype of a shape (scalars are written `f32[]`)")?;
        let mut dims = Vec::new();
        let mut names = Vec::new();
        if !self.eat_punct(']') {
            loop {
                let name = match (self.peek().clone(), self.peek_at(1)) {
                    (Tok::Ident(n) | Tok::Str(n), Tok::Punct('=')) => {
                        self.next();
                        self.next();
                        n
                    }
                    _ => String::new(),
                };
                let neg = self.eat_punct('-');
                let d = match self.next() {
                    Token { tok: Tok::Punct('?'), .. } if !neg => DYNAMIC_DIM,
                    Token { tok: Tok::Int(s), pos } => {
                        let v: i64 = s.parse().map_err(|_| pos.err(format!("dimension `{s}` is too large")))?;
                        if neg { -v } else { v }
                    }
                    t => {
                        return Err(t.pos.err(format!("expected a dimension (integer or `?`), found {}", t.tok.describe())));
                    }
                };
                dims.push(d);
                names.push(name);
                if self.eat_punct(']') {
                    break;
                }
                self.expect_punct(',', "or `]` in the shape")?;
            }
        }
        let axis_names = if names.iter().all(String::is_empty) { None } else { Some(names) };
        Ok(Shape { dtype, dims, axis_names })
    }

    fn value(&mut self) -> Result<Val> {
        let pos = self.pos();
        let tok = self.peek().clone();
        let v = match tok {
            Tok::Punct('-') => {
                self.next();
                match self.value()? {
                    Val::Num { neg: false, kind, text, .. } => Val::Num { neg: true, kind, text, pos },
                    other => return Err(other.pos().err(format!("expected a number after `-`, found {}", other.describe()))),
                }
            }
            Tok::Int(s) => {
                self.next();
                Val::Num { neg: false, kind: NumKind::Int, text: s, pos }
            }
            Tok::Float(s) => {
                self.next();
                Val::Num { neg: false, kind: NumKind::Float, text: s, pos }
            }
            Tok::Hex(s) => {
                self.next();
                Val::Num { neg: false, kind: NumKind::Hex, text: s, pos }
            }
            Tok::Ident(s) if s == "inf" || s == "nan" => {
                self.next();
                let kind = if s == "inf" { NumKind::Inf } else { NumKind::Nan };
                Val::Num { neg: false, kind, text: s, pos }
            }
            Tok::Ident(s) if s == "hex" && matches!(self.peek_at(1), Tok::Str(_)) => {
                self.next();
                let t = self.next();
                let h = match t.tok {
                    Tok::Str(h) => h,
                    _ => String::new(),
                };
                Val::Bytes(parse_hex_bytes(&h, t.pos)?, pos)
            }
            Tok::Ident(_) if *self.peek_at(1) == Tok::Punct('[') => Val::Shape(self.shape()?, pos),
            Tok::Ident(s) | Tok::Str(s) if *self.peek_at(1) == Tok::Punct('=') => {
                self.next();
                self.next();
                let inner = self.value()?;
                Val::Named(s, Box::new(inner), pos)
            }
            Tok::Ident(s) => {
                self.next();
                Val::Ident(s, pos)
            }
            Tok::Str(s) => {
                self.next();
                Val::Str(s, pos)
            }
            Tok::Func(l) => {
                self.next();
                Val::Func(l, pos)
            }
            Tok::Punct('?') => {
                self.next();
                Val::Question(pos)
            }
            Tok::Punct('*') => {
                self.next();
                Val::Star(pos)
            }
            Tok::Punct(open @ ('[' | '(')) => {
                self.next();
                let close = if open == '[' { ']' } else { ')' };
                let mut items = Vec::new();
                if !self.eat_punct(close) {
                    loop {
                        items.push(self.value()?);
                        if self.eat_punct(close) {
                            break;
                        }
                        self.expect_punct(',', &format!("or `{close}`"))?;
                    }
                }
                if open == '[' { Val::List(items, pos) } else { Val::Tuple(items, pos) }
            }
            _ => return Err(self.err_expected("a value")),
        };
        Ok(v)
    }

    fn func_attr(&self, a: &mut AttrMap, name: &str) -> Result<FuncId> {
        match a.req(name)? {
            Val::Func(l, pos) => self.func_ref(&l, pos),
            v => Err(v.expected(&a.what(name), "a function reference `@…`")),
        }
    }

    fn build_op(&self, t: OpType, a: &mut AttrMap) -> Result<Op> {
        use OpType as T;
        if let Some(op) = simple_op(t) {
            return Ok(op);
        }
        if let Some(kind) = ALL_REDUCE.iter().copied().find(|&k| Op::Reduce { kind: k, axes: vec![] }.op_type() == t)
        {
            return Ok(Op::Reduce { kind, axes: a.usizes("axes")? });
        }
        let cumulative = ARITH.iter().map(|(k, _)| *k).find(|&k| {
            Op::Cumulative { kind: k, axis: 0, exclusive: false, reverse: false }.op_type() == t
        });
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
            T::ArgMinMax => Op::ArgMinMax {
                axis: a.usize("axis")?,
                out_dtype: a.dtype("out_dtype")?,
                is_min: a.flag("is_min")?,
            },
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

fn fmt_label(l: &Label) -> String {
    match l {
        Label::Number(n) => format!("@{n}"),
        Label::Name(n) => format!("@{}", crate::ir::text::names::quote_name(n)),
    }
}

fn reshape_dim(v: &Val, what: &str) -> Result<ReshapeDim> {
    match v {
        Val::Named(name, inner, _) => match inner.as_ref() {
            Val::Question(_) => Ok(ReshapeDim::Dynamic(name.clone())),
            Val::Star(_) => Ok(ReshapeDim::Inferred(name.clone())),
            other => Err(other.expected(what, "`?` (dynamic) or `*` (inferred) after `name=`")),
        },
        other => Ok(ReshapeDim::Static(
            other.i64(what).map_err(|_| other.expected(what, "a size, `name=?` or `name=*`"))?,
        )),
    }
}

fn parse_hex_bytes(h: &str, pos: Pos) -> Result<Vec<u8>> {
    if h.len() % 2 != 0 {
        return Err(pos.err("hex bytes: expected an even number of hex digits"));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| pos.err(format!("hex bytes: bad hex digits `{}`", &h[i..i + 2])))
        })
        .collect()
}

/// The bytes of a constant from its payload and (first) output shape.
fn constant_bytes(payload: &Val, shape: Option<&Shape>) -> Result<Vec<u8>> {
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
        return Err(payload.pos().err(format!(
            "constant: values of dtype {} must be written as `hex\"…\"` bytes",
            dt.short_name()
        )));
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
