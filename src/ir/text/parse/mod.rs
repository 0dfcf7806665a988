//! The IR parser: text (see `docs/ir.md`) to a [`Module`], with line/column errors.
//!
//! Parsing is two-pass over the token list: a scan of the function headers allocates every
//! function in textual order (so ops may name a closure or function defined further down), then
//! each function is parsed and its params and node outputs are allocated in textual order.
//! Operand references are resolved at the end, so a reference to a value defined later is not
//! a parse error (the verifier reports the use before definition). Output shapes are taken from
//! the text; the parser does no shape inference.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::ir::dtype::DType;
use crate::ir::module::{FuncId, Module, NodeId, ValueId};
use crate::ir::op::{ALL_BINARY, ALL_COMPARE, ALL_REDUCE, ALL_UNARY, ConstData, ConvAxes, Op, PadAxis};
use crate::ir::optype::OpType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};
use crate::ir::text::lexer::{Label, Pos, Tok, Token, tokenize};
use crate::ir::text::literal::{AttrMap, NumKind, Val, constant_bytes, parse_hex_bytes, reshape_dim};
use crate::ir::text::names::{ACTIVATION, ARITH, ATTENTION_LAYOUT, DENSE_LAYOUT, FFT};
use crate::ir::text::print::implied_kind;
use crate::ir::text::sidefile::{SideFileReader, parse_hash};
use crate::limits::MAX_PARSE_DEPTH;

mod ops;

/// Where the parts of a parsed module were written (1-based lines and columns), for
/// diagnostics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceMap {
    /// Line of each node, indexed by `NodeId`.
    pub node_lines: Vec<usize>,
    /// Column where each node starts, indexed by `NodeId`.
    pub node_columns: Vec<usize>,
    /// Line of each function header, indexed by `FuncId`.
    pub func_lines: Vec<usize>,
    /// Column of each function header's keyword, indexed by `FuncId`.
    pub func_columns: Vec<usize>,
}

impl SourceMap {
    /// The line of node `n`, if known.
    pub fn node_line(&self, n: NodeId) -> Option<usize> {
        self.node_lines.get(n.index()).copied().filter(|&l| l > 0)
    }

    /// The line and column of node `n`, if known.
    pub fn node_position(&self, n: NodeId) -> Option<(usize, usize)> {
        Some((self.node_line(n)?, self.node_columns.get(n.index()).copied().unwrap_or(1).max(1)))
    }

    /// The line of function `f`'s header, if known.
    pub fn func_line(&self, f: FuncId) -> Option<usize> {
        self.func_lines.get(f.index()).copied().filter(|&l| l > 0)
    }

    /// The line and column of function `f`'s header, if known.
    pub fn func_position(&self, f: FuncId) -> Option<(usize, usize)> {
        Some((self.func_line(f)?, self.func_columns.get(f.index()).copied().unwrap_or(1).max(1)))
    }
}

/// Options of [`parse_module_with_options`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParseOptions {
    /// The directory in which the side files of constants written `file("NAME", …)` or
    /// `safetensors("NAME", "TENSOR")` are looked up (usually the IR file's own directory).
    /// `None`: such a constant is a parse error.
    pub constants_dir: Option<PathBuf>,
}

/// Parses a module. Errors are [`crate::Error::Parse`] with the line and column of the offending
/// token and what was expected there. A constant whose data lives in a side file
/// (`file(…)`) is an error here: use [`parse_module_with_constants`].
pub fn parse_module(text: &str) -> Result<Module> {
    parse_module_with_locations(text).map(|(m, _)| m)
}

/// Parses a module and also returns where each node and function was written.
pub fn parse_module_with_locations(text: &str) -> Result<(Module, SourceMap)> {
    parse_module_with_options(text, &ParseOptions::default())
}

/// Parses a module whose large constants may live in side files (`constant file("NAME",
/// offset=…, bytes=…, hash=…) : shape`, written by
/// [`crate::ir::text::print_module_with_side_file`]); `NAME` is resolved relative to `dir`.
/// A missing, truncated or different side file is a [`crate::Error::Parse`] at the constant
/// naming the file (see [`crate::ir::text::SideFileReader`] for the checks).
pub fn parse_module_with_constants(text: &str, dir: &Path) -> Result<Module> {
    parse_module_with_options(text, &ParseOptions { constants_dir: Some(dir.to_path_buf()) }).map(|(m, _)| m)
}

/// Parses a module with options, returning where each node and function was written.
pub fn parse_module_with_options(text: &str, opts: &ParseOptions) -> Result<(Module, SourceMap)> {
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
        side: opts.constants_dir.as_deref().map(SideFileReader::new),
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
    /// Reads `file(…)` constants; `None` when no directory was given.
    side: Option<SideFileReader>,
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
        if self.is_punct(c) { Ok(self.next().pos) } else { Err(self.err_expected(&format!("`{c}` {context}"))) }
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
        self.map.func_columns = vec![0; headers.len()];
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
        self.map.func_columns[f.index()] = kw.pos.column;
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
        let start = self.pos();
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
                    let v = self.value(0)?;
                    attrs.items.push((name, v, false, pos));
                }
                _ if t == OpType::Constant && payload.is_none() => payload = Some(self.value(0)?),
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
            let bytes = match &payload {
                Val::Call(form, args, pos) if form == "safetensors" => {
                    self.tensor_reference(args, *pos, shapes.first())?
                }
                Val::Call(form, args, pos) => self.constant_reference(form, args, *pos)?,
                _ => Arc::new(constant_bytes(&payload, shapes.first())?),
            };
            Op::Constant(ConstData(bytes))
        } else {
            self.build_op(t, &mut attrs)?
        };
        attrs.finish()?;
        let node = self.m.add_node(f, op, vec![PLACEHOLDER; operands.len()], shapes);
        self.map.node_lines.push(start.line);
        self.map.node_columns.push(start.column);
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
                        return Err(t
                            .pos
                            .err(format!("expected a dimension (integer or `?`), found {}", t.tok.describe())));
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

    /// One value; `depth` is how many values enclose it (brackets, unary signs, `name=`). At
    /// most [`MAX_PARSE_DEPTH`] levels are accepted, so hostile nesting is a parse error and
    /// not a stack overflow.
    fn value(&mut self, depth: usize) -> Result<Val> {
        let pos = self.pos();
        if depth > MAX_PARSE_DEPTH {
            return Err(
                pos.err(format!("value nested more than {MAX_PARSE_DEPTH} levels deep (brackets, signs or `name=`)"))
            );
        }
        let tok = self.peek().clone();
        let v = match tok {
            Tok::Punct('-') => {
                self.next();
                match self.value(depth + 1)? {
                    Val::Num { neg: false, kind, text, .. } => Val::Num { neg: true, kind, text, pos },
                    other => {
                        return Err(other
                            .pos()
                            .err(format!("expected a number after `-`, found {}", other.describe())));
                    }
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
            Tok::Ident(s) if *self.peek_at(1) == Tok::Punct('(') => {
                self.next();
                self.next();
                let mut items = Vec::new();
                if !self.eat_punct(')') {
                    loop {
                        items.push(self.value(depth + 1)?);
                        if self.eat_punct(')') {
                            break;
                        }
                        self.expect_punct(',', "or `)`")?;
                    }
                }
                Val::Call(s, items, pos)
            }
            Tok::Ident(s) | Tok::Str(s) if *self.peek_at(1) == Tok::Punct('=') => {
                self.next();
                self.next();
                let inner = self.value(depth + 1)?;
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
                        items.push(self.value(depth + 1)?);
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

    /// The data of a constant written `safetensors("FILE", "TENSOR"[, first=…])` of type
    /// `want`, read from the safetensors side file `FILE`.
    fn tensor_reference(&mut self, args: &[Val], pos: Pos, want: Option<&Shape>) -> Result<Arc<Vec<u8>>> {
        let usage = "constant: `safetensors(…)` takes the file's name and the tensor's name: \
                     `safetensors(\"FILE\", \"TENSOR\")`";
        let (file, tensor, rest) = match args {
            [Val::Str(f, _), Val::Str(t, _), rest @ ..] => (f.as_str(), t.as_str(), rest),
            _ => return Err(pos.err(usage)),
        };
        for a in rest {
            match a {
                // The leading values, for the reader; not checked.
                Val::Named(key, _, _) if key == "first" => {}
                Val::Named(key, _, apos) => {
                    return Err(apos.err(format!("constant safetensors(…): unknown item `{key}=`")));
                }
                other => return Err(other.expected("constant safetensors(…)", "`first=` or `)`")),
            }
        }
        let Some(want) = want else {
            return Err(pos.err("constant safetensors(…): the constant needs its type after `:`"));
        };
        let Some(side) = self.side.as_mut() else {
            return Err(pos.err(format!(
                "constant: the data is in the safetensors file {file:?}, and no directory to find it in was given \
                 (parse with `parse_module_with_constants`; the `tensorjit` commands look next to the IR file)"
            )));
        };
        side.read_tensor(file, tensor, want).map_err(|msg| pos.err(msg))
    }

    /// The data of a constant written `file("NAME", offset=…, bytes=…, hash="xxh64:…"[,
    /// first=…])`, read from the side file; `elided(…)` and other forms are errors.
    fn constant_reference(&mut self, form: &str, args: &[Val], pos: Pos) -> Result<Arc<Vec<u8>>> {
        let (name, named) = match (form, args.split_first()) {
            ("file", Some((Val::Str(name, _), rest))) => (name.as_str(), rest),
            ("file", _) => {
                return Err(pos.err(
                    "constant: `file(…)` takes the side file's name first: `file(\"NAME\", offset=…, bytes=…, hash=…)`",
                ));
            }
            ("elided", _) => {
                let detail = args
                    .iter()
                    .filter_map(|a| match a {
                        Val::Named(k, v, _) if k == "bytes" || k == "hash" => match &**v {
                            Val::Num { text, .. } => Some(format!("{k}={text}")),
                            Val::Str(t, _) => Some(format!("{k}={t}")),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(pos.err(format!(
                    "constant: the data was elided when this text was printed ({detail}); it cannot be read back. \
                     Print the module with a constants side file (`--constants-file`, \
                     `print_module_with_side_file`) to get text that replays"
                )));
            }
            (other, _) => {
                return Err(pos.err(format!(
                    "constant: unknown form `{other}(…)` (expected a value, `hex\"…\"`, `file(\"NAME\", offset=…, bytes=…, hash=…)` or `safetensors(\"FILE\", \"TENSOR\")`)"
                )));
            }
        };
        let (mut offset, mut bytes, mut hash) = (None, None, None);
        for a in named {
            let Val::Named(key, v, apos) = a else {
                return Err(a.expected("constant file(…)", "`offset=`, `bytes=`, `hash=` or `first=`"));
            };
            let slot_taken = match key.as_str() {
                "offset" => offset.replace(uint64(v, "constant file(…): offset")?).is_some(),
                "bytes" => bytes.replace(uint64(v, "constant file(…): bytes")?).is_some(),
                "hash" => {
                    let h = match &**v {
                        Val::Str(t, _) => parse_hash(t),
                        _ => None,
                    }
                    .ok_or_else(|| v.expected("constant file(…): hash", "a string `\"xxh64:\"` and 16 hex digits"))?;
                    hash.replace(h).is_some()
                }
                // The leading values, for the reader; not checked.
                "first" => false,
                _ => return Err(apos.err(format!("constant file(…): unknown item `{key}=`"))),
            };
            if slot_taken {
                return Err(apos.err(format!("constant file(…): `{key}=` is given twice")));
            }
        }
        let (Some(offset), Some(bytes), Some(hash)) = (offset, bytes, hash) else {
            return Err(pos.err("constant file(…): `offset=`, `bytes=` and `hash=` are required"));
        };
        let Some(side) = self.side.as_mut() else {
            return Err(pos.err(format!(
                "constant: the data is in the side file {name:?}, and no directory to find it in was given \
                 (parse with `parse_module_with_constants`; the `tensorjit` commands look next to the IR file)"
            )));
        };
        side.read(name, offset, bytes, hash).map_err(|msg| pos.err(msg))
    }
}

/// A non-negative integer of at most 64 bits.
fn uint64(v: &Val, what: &str) -> Result<u64> {
    let (x, _) = v.int(what)?;
    u64::try_from(x).map_err(|_| v.pos().err(format!("{what}: expected an integer from 0 to {}, found {x}", u64::MAX)))
}

fn fmt_label(l: &Label) -> String {
    match l {
        Label::Number(n) => format!("@{n}"),
        Label::Name(n) => format!("@{}", crate::ir::text::names::quote_name(n)),
    }
}
