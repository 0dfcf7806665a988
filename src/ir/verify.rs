//! The module verifier: re-checks every invariant of a [`Module`] and reports all violations.
//!
//! Checklist (each violation is reported, with the function, the node `%N = op` and the problem;
//! values and closures are named as the text printer names them):
//!
//! Module
//! - M1. `main` is in range, is named `"main"` and has no parent.
//! - M2. Named functions have a non-empty name, unique in the module; only `main` is named `"main"`.
//!
//! Functions
//! - F1. A closure (no name) has a parent in range; a named function has none; parent chains
//!   end (no function is its own ancestor).
//! - F2. There is one parameter name per parameter.
//! - F3. Each parameter id is in range, and its value is defined as `Param(i)` of this function.
//! - F4. The function has returned (`outputs` set) at least one value; each output is in range and
//!   visible at the end of the body (a parameter, a body output, or a value available from an
//!   ancestor, see N3).
//! - F5. Parameter names of one function are distinct (the empty name, an unnamed parameter, may
//!   repeat).
//!
//! Nodes (of the bodies; a node that left every body is dead and not checked)
//! - N1. Body entries are in range; each node appears in exactly one body, the body of its `func`.
//! - N2. Each output id is in range and its value is defined as `Node { node, output: i }` in the
//!   node's function.
//! - N3. Each operand is in range and defined before use: a parameter or an output of an earlier
//!   node of the same body, or a value of a strict ancestor that is available where the closure
//!   is used — a parameter of the ancestor or an output of a node placed before the ancestor's
//!   first node that (transitively, through nested closures) uses the closure. A value of any
//!   other function (a sibling closure, a callee, a child) is not visible.
//! - N4. Callees are in range and have returned; `call` names a named function other than `main`;
//!   `sort`/`while`/`if` name closures whose parent is the node's function.
//! - N5. No recursion: the graph "function → callee of one of its nodes" has no cycle.
//! - N6. Every parameter and node output has a valid shape (`Shape::validate`) of a supported
//!   dtype.
//! - N7. `constant`: no operands, one output of static shape, data length equal to the shape's
//!   `byte_size()`, Bool bytes 0 or 1.
//! - N8. Every other op: the output shapes (count, dtype, dims, axis names) equal what
//!   `infer_shapes` computes from the operand shapes; an inference error is a violation. (Not
//!   run when an operand or callee is already broken, to avoid cascades.)
//!
//! Limits (checked first, by iterative walks; a violation is reported alone, as
//! [`Error::Limit`] from [`verify`], because the other checks and every later stage of a compile
//! assume bounded nesting)
//! - L1. A function is nested at most [`MAX_NESTING`] levels deep in its parent chain (a named
//!   function is level 1, its closures level 2, …).
//! - L2. A chain of invocations (`call`, and the closures of `if`/`while`/`sort`) is at most
//!   [`MAX_NESTING`] levels deep, counting the outermost function as level 1: what execution
//!   would reject at run time is rejected here, before any compile stage walks the chain.
//!
//! Every walk here is iterative and the whole check is linear in the size of the module (the
//! visibility of ancestor values, N3, is a lookup per operand, not a set per closure).
//!
//! Values
//! - V1. Each value's `func` is in range and its `def` points back to it: `Param(i)` ⇒ it is the
//!   i-th parameter of its function; `Node { node, output }` ⇒ it is that output of that node,
//!   and the node belongs to the same function.

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::infer::infer_shapes;
use crate::ir::module::{FuncId, Module, NodeId, ValueDef, ValueId};
use crate::ir::op::Op;
use crate::ir::shape::Shape;
use crate::ir::text::Names;
use crate::ir::text::format_shape;
use crate::limits::MAX_NESTING;

/// One violation, with the function and node it concerns (for mapping back to source lines).
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    /// The function concerned, if any.
    pub func: Option<FuncId>,
    /// The node concerned, if any.
    pub node: Option<NodeId>,
    /// The full message (names the function, node and problem).
    pub message: String,
}

/// Verifies `m`, returning every violation found as [`Error::Verify`], or [`Error::Limit`] when
/// functions are nested deeper than [`MAX_NESTING`] (L1, L2; then nothing else is checked).
pub fn verify(m: &Module) -> Result<()> {
    check_limits(m)?;
    let diags = verify_diagnostics(m);
    if diags.is_empty() { Ok(()) } else { Err(Error::Verify(diags.into_iter().map(|d| d.message).collect())) }
}

/// Every violation of `m`, in a deterministic order (module, functions in print order, values).
/// A nesting limit violation (L1, L2) is the only diagnostic when there is one.
pub fn verify_diagnostics(m: &Module) -> Vec<Diagnostic> {
    if let Err(e) = check_limits(m) {
        return vec![Diagnostic { func: None, node: None, message: e.to_string() }];
    }
    let mut v =
        Verifier { m, names: Names::new(m), diags: Vec::new(), chain_ok: Vec::new(), vis: Visibility::default() };
    v.run();
    v.diags
}

/// How a parent chain ends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chain {
    /// At a function without a parent; the number of functions on the chain (itself included).
    Depth(usize),
    /// At a parent id that is out of range.
    OutOfRange(FuncId),
    /// In a cycle.
    Cycle,
}

/// The parent chain of every function, each function visited once (iteratively).
fn parent_chains(m: &Module) -> Vec<Chain> {
    let n = m.functions.len();
    // None: not visited; Some(None): on the current path; Some(Some(c)): done.
    let mut state: Vec<Option<Option<Chain>>> = vec![None; n];
    let mut path: Vec<usize> = Vec::new();
    for start in 0..n {
        if state[start].is_some() {
            continue;
        }
        path.clear();
        let mut cur = start;
        let end = loop {
            match state[cur] {
                Some(Some(c)) => break c,
                Some(None) => break Chain::Cycle,
                None => {}
            }
            state[cur] = Some(None);
            path.push(cur);
            match m.functions[cur].parent {
                None => break Chain::Depth(0),
                Some(p) if p.index() >= n => break Chain::OutOfRange(p),
                Some(p) => cur = p.index(),
            }
        };
        let mut c = end;
        for &f in path.iter().rev() {
            if let Chain::Depth(d) = c {
                c = Chain::Depth(d + 1);
            }
            state[f] = Some(Some(c));
        }
    }
    state.into_iter().map(|s| s.flatten().unwrap_or(Chain::Cycle)).collect()
}

/// The callees (in range, without repeats) of the nodes of each function's body.
fn callee_lists(m: &Module) -> Vec<Vec<FuncId>> {
    let n = m.functions.len();
    m.functions
        .iter()
        .map(|fd| {
            let mut out: Vec<FuncId> = Vec::new();
            let mut seen: HashSet<FuncId> = HashSet::new();
            for &nid in &fd.body {
                if let Some(node) = m.nodes.get(nid.index()) {
                    for c in node.op.callees() {
                        if c.index() < n && seen.insert(c) {
                            out.push(c);
                        }
                    }
                }
            }
            out
        })
        .collect()
}

/// L1 and L2: nesting of parent chains and of invocation chains, by iterative walks (broken
/// chains and call cycles are left to F1 and N5).
pub fn check_limits(m: &Module) -> Result<()> {
    let label = |f: FuncId| {
        let names = Names::new(m);
        match m.functions.get(f.index()) {
            Some(fd) if fd.is_closure() => format!("closure {}", names.func(f)),
            _ => names.func(f),
        }
    };
    let chains = parent_chains(m);
    if let Some(f) = chains.iter().position(|c| matches!(c, Chain::Depth(d) if *d > MAX_NESTING)) {
        let deepest = chains.iter().filter_map(|c| if let Chain::Depth(d) = c { Some(*d) } else { None }).max();
        let d = deepest.unwrap_or(MAX_NESTING + 1);
        // The first function past the limit is the one at level MAX_NESTING + 1 of its chain.
        let mut g = FuncId(f as u32);
        while let Chain::Depth(k) = chains[g.index()]
            && k > MAX_NESTING + 1
            && let Some(p) = m.functions[g.index()].parent
        {
            g = p;
        }
        return Err(Error::limit(
            label(g),
            format!("closures nested {d} levels deep (a named function is level 1); at most {MAX_NESTING} are allowed"),
        ));
    }
    // L2: levels[f] = 1 + the deepest level among f's callees, by an iterative post-order walk;
    // an edge back into the current path (recursion, reported by N5) is ignored.
    let callees = callee_lists(m);
    let n = m.functions.len();
    let mut levels: Vec<usize> = vec![0; n];
    let mut on_path = vec![false; n];
    for start in 0..n {
        if levels[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        on_path[start] = true;
        while let Some(&mut (f, ref mut k)) = stack.last_mut() {
            if let Some(&c) = callees[f].get(*k) {
                *k += 1;
                let c = c.index();
                if levels[c] == 0 && !on_path[c] {
                    on_path[c] = true;
                    stack.push((c, 0));
                }
            } else {
                levels[f] = 1 + callees[f].iter().map(|c| levels[c.index()]).max().unwrap_or(0);
                on_path[f] = false;
                stack.pop();
            }
        }
    }
    let Some(top) = (0..n).filter(|&f| levels[f] > MAX_NESTING).max_by_key(|&f| (levels[f], f == m.main.index()))
    else {
        return Ok(());
    };
    // Follow the deepest chain down to the function at level MAX_NESTING + 1.
    let mut g = top;
    for _ in 0..MAX_NESTING {
        match callees[g].iter().map(|c| c.index()).max_by_key(|&c| levels[c]) {
            Some(c) if levels[c] + 1 == levels[g] => g = c,
            _ => break,
        }
    }
    let top_label = label(FuncId(top as u32));
    Err(Error::limit(
        label(FuncId(g as u32)),
        format!(
            "calls and closures nested {} levels deep from {top_label} ({top_label} is level 1); at most \
             {MAX_NESTING} are allowed",
            levels[top]
        ),
    ))
}

/// Where ancestor values are defined, for N3 (see [`Verifier::visible_from_ancestors`]).
#[derive(Default)]
struct Visibility {
    /// For each value: the functions it is a parameter of, and `(function, body position)` of
    /// the first node of each body that outputs it.
    producers: HashMap<ValueId, Vec<(FuncId, Option<usize>)>>,
    /// For each closure: the position in its parent's body of the first node that uses it.
    first_use: Vec<Option<usize>>,
    /// For the function being checked: its strict ancestors and, for each, the body position
    /// before which its values are available.
    cutoffs: HashMap<FuncId, usize>,
}

struct Verifier<'a> {
    m: &'a Module,
    names: Names,
    diags: Vec<Diagnostic>,
    /// Whether the parent chain of each function is well formed (in range, acyclic).
    chain_ok: Vec<bool>,
    /// Definition sites for the visibility of ancestor values (N3).
    vis: Visibility,
}

impl Verifier<'_> {
    fn report(&mut self, func: Option<FuncId>, node: Option<NodeId>, message: String) {
        self.diags.push(Diagnostic { func, node, message });
    }

    fn flabel(&self, f: FuncId) -> String {
        let l = self.names.func(f);
        match self.m.functions.get(f.index()) {
            Some(fd) if fd.is_closure() => format!("closure {l}"),
            _ => l,
        }
    }

    fn nlabel(&self, n: NodeId) -> String {
        let node = &self.m.nodes[n.index()];
        let name = node.op.op_type().name();
        if node.outputs.is_empty() {
            format!("{name} (node n{}, no outputs)", n.0)
        } else {
            let outs: Vec<String> = node.outputs.iter().map(|&v| self.names.value(v)).collect();
            format!("{} = {name}", outs.join(", "))
        }
    }

    fn val(&self, v: ValueId) -> String {
        self.names.value(v)
    }

    fn in_range(&self, v: ValueId) -> bool {
        v.index() < self.m.values.len()
    }

    fn func_ok(&self, f: FuncId) -> bool {
        f.index() < self.m.functions.len()
    }

    fn run(&mut self) {
        self.check_module();
        self.check_parents();
        let owners = self.check_bodies();
        self.index_definitions();
        for f in self.names.order.clone() {
            self.check_function(f, &owners);
        }
        self.check_values();
        self.check_recursion();
    }

    // M1, M2
    fn check_module(&mut self) {
        let m = self.m;
        if !self.func_ok(m.main) {
            self.report(None, None, format!("module: main function {} is out of range", m.main));
        } else {
            let fd = m.func(m.main);
            if fd.name.as_deref() != Some("main") {
                let msg = format!("module: the main function {} is not named \"main\"", self.flabel(m.main));
                self.report(Some(m.main), None, msg);
            }
            if fd.parent.is_some() {
                self.report(Some(m.main), None, "module: @main has a parent".into());
            }
        }
        let mut seen: HashMap<&str, FuncId> = HashMap::new();
        for (i, fd) in m.functions.iter().enumerate() {
            let f = FuncId(i as u32);
            let Some(name) = fd.name.as_deref() else { continue };
            if name.is_empty() {
                self.report(Some(f), None, format!("function {f}: named function with an empty name"));
            } else if name == "main" && f != m.main {
                self.report(Some(f), None, format!("function {f}: only the main function may be named \"main\""));
            } else if let Some(prev) = seen.insert(name, f) {
                let msg = format!("function {f}: name {name:?} is already used by function {prev}");
                self.report(Some(f), None, msg);
            }
        }
    }

    // F1
    fn check_parents(&mut self) {
        let chains = parent_chains(self.m);
        self.chain_ok = chains.iter().map(|c| matches!(c, Chain::Depth(_))).collect();
        for (i, chain) in chains.iter().enumerate() {
            let f = FuncId(i as u32);
            let fd = &self.m.functions[i];
            match (fd.is_closure(), fd.parent) {
                (true, None) => self.report(Some(f), None, format!("{}: closure without a parent", self.flabel(f))),
                (false, Some(_)) if f != self.m.main => {
                    self.report(Some(f), None, format!("{}: a named function cannot have a parent", self.flabel(f)));
                }
                _ => {}
            }
            match *chain {
                Chain::Depth(_) => {}
                Chain::OutOfRange(p) => {
                    self.report(Some(f), None, format!("{}: parent {p} is out of range", self.flabel(f)));
                }
                Chain::Cycle => {
                    self.report(Some(f), None, format!("{}: is its own ancestor (parent cycle)", self.flabel(f)));
                }
            }
        }
    }

    /// N1 (membership): which function's body holds each node (first occurrence).
    fn check_bodies(&mut self) -> Vec<Option<FuncId>> {
        let mut owner: Vec<Option<FuncId>> = vec![None; self.m.nodes.len()];
        for f in self.names.order.clone() {
            for &n in &self.m.func(f).body {
                if n.index() >= self.m.nodes.len() {
                    self.report(Some(f), None, format!("{}: body entry {n} is out of range", self.flabel(f)));
                    continue;
                }
                match owner[n.index()] {
                    Some(prev) => {
                        let msg = format!(
                            "{}: {} also appears in the body of {} (a node belongs to exactly one body)",
                            self.flabel(f),
                            self.nlabel(n),
                            self.flabel(prev)
                        );
                        self.report(Some(f), Some(n), msg);
                    }
                    None => owner[n.index()] = Some(f),
                }
            }
        }
        owner
    }

    /// Records where every value is defined (parameters, first producing node of each body) and
    /// where each closure is first used in its parent, once for the whole module (N3).
    fn index_definitions(&mut self) {
        let m = self.m;
        let nf = m.functions.len();
        let mut producers: HashMap<ValueId, Vec<(FuncId, Option<usize>)>> = HashMap::new();
        let mut first_use: Vec<Option<usize>> = vec![None; nf];
        // (function, value) pairs already recorded for a node output: only the first counts.
        let mut node_sites: HashSet<(FuncId, ValueId)> = HashSet::new();
        for (i, fd) in m.functions.iter().enumerate() {
            let f = FuncId(i as u32);
            for &p in &fd.params {
                producers.entry(p).or_default().push((f, None));
            }
            for (pos, &nid) in fd.body.iter().enumerate() {
                let Some(node) = m.nodes.get(nid.index()) else { continue };
                for &o in &node.outputs {
                    if node_sites.insert((f, o)) {
                        producers.entry(o).or_default().push((f, Some(pos)));
                    }
                }
                for c in node.op.callees() {
                    if let Some(cd) = m.functions.get(c.index())
                        && cd.parent == Some(f)
                        && first_use[c.index()].is_none()
                    {
                        first_use[c.index()] = Some(pos);
                    }
                }
            }
        }
        self.vis.producers = producers;
        self.vis.first_use = first_use;
    }

    /// Prepares [`Self::visible_from_ancestors`] for closure `f`: each strict ancestor with the
    /// body position up to which its values are available in `f` (the ancestor's first node that,
    /// through nested closures, uses `f`). At most [`MAX_NESTING`] steps (L1 holds).
    fn enter_function(&mut self, f: FuncId) {
        self.vis.cutoffs.clear();
        if !self.chain_ok[f.index()] {
            return;
        }
        let mut child = f;
        while let Some(p) = self.m.functions[child.index()].parent {
            let cut = self.vis.first_use[child.index()].unwrap_or(self.m.functions[p.index()].body.len());
            self.vis.cutoffs.insert(p, cut);
            child = p;
        }
    }

    /// Whether `v` is a value of a strict ancestor of the function last entered that is
    /// available there (see N3).
    fn visible_from_ancestors(&self, v: ValueId) -> bool {
        self.vis.producers.get(&v).is_some_and(|sites| {
            sites.iter().any(|&(g, at)| {
                self.vis.cutoffs.get(&g).is_some_and(|&cut| match at {
                    None => true,
                    Some(pos) => pos < cut,
                })
            })
        })
    }

    fn check_shape(&mut self, f: FuncId, node: Option<NodeId>, what: &str, s: &Shape) -> bool {
        let mut ok = true;
        if let Err(e) = s.validate() {
            self.report(Some(f), node, format!("{what}: invalid shape {}: {e}", format_shape(s)));
            ok = false;
        }
        if !s.dtype.is_supported() {
            let msg = format!("{what}: dtype {} is not supported in tensors", s.dtype.short_name());
            self.report(Some(f), node, msg);
            ok = false;
        }
        ok
    }

    fn check_function(&mut self, f: FuncId, owners: &[Option<FuncId>]) {
        let m = self.m;
        let fd = m.func(f);
        let fl = self.flabel(f);
        // F2, F3
        if fd.param_names.len() != fd.params.len() {
            let msg = format!("{fl}: {} parameter names for {} parameters", fd.param_names.len(), fd.params.len());
            self.report(Some(f), None, msg);
        }
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, name) in fd.param_names.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            if let Some(first) = by_name.insert(name.as_str(), i) {
                by_name.insert(name.as_str(), first);
                let msg = format!("{fl}: parameters {first} and {i} are both named {name:?} (names must be distinct)");
                self.report(Some(f), None, msg);
            }
        }
        let mut defined: HashSet<ValueId> = HashSet::new();
        for (i, &p) in fd.params.iter().enumerate() {
            if !self.in_range(p) {
                self.report(Some(f), None, format!("{fl}: parameter {i} ({p}) is out of range"));
                continue;
            }
            let vd = m.value(p);
            if vd.def != ValueDef::Param(i) || vd.func != f {
                let msg =
                    format!("{fl}: parameter {i} ({}) is not defined as parameter {i} of this function", self.val(p));
                self.report(Some(f), None, msg);
            }
            self.check_shape(f, None, &format!("{fl}: parameter {}", self.val(p)), &vd.shape.clone());
            defined.insert(p);
        }
        self.enter_function(f);
        let mut seen: HashSet<NodeId> = HashSet::new();
        for &n in &fd.body {
            if n.index() >= m.nodes.len() || owners[n.index()] != Some(f) || !seen.insert(n) {
                continue;
            }
            self.check_node(f, n, &defined);
            for &o in &m.node(n).outputs {
                defined.insert(o);
            }
        }
        // F4
        match &fd.outputs {
            None => self.report(Some(f), None, format!("{fl}: function has not returned (no `return`)")),
            Some(outs) if outs.is_empty() => {
                self.report(Some(f), None, format!("{fl}: function returns no values (at least one is required)"));
            }
            Some(outs) => {
                for (i, &o) in outs.iter().enumerate() {
                    if !self.in_range(o) {
                        self.report(Some(f), None, format!("{fl}: output {i} ({o}) is out of range"));
                    } else if !defined.contains(&o) && !self.visible_from_ancestors(o) {
                        let msg = format!("{fl}: output {i} ({}) {}", self.val(o), self.why_unavailable(f, o));
                        self.report(Some(f), None, msg);
                    }
                }
            }
        }
    }

    /// Why value `v` (in range) cannot be read in `f` at this point.
    fn why_unavailable(&self, f: FuncId, v: ValueId) -> String {
        let vf = self.m.value(v).func;
        if vf == f {
            "is used before its definition (or its defining node is not in the body)".into()
        } else if self.func_ok(vf) && self.chain_ok[f.index()] && self.m.is_ancestor_or_self(vf, f) {
            format!(
                "belongs to ancestor {} but is not defined before the point where that function uses this closure",
                self.flabel(vf)
            )
        } else {
            format!("belongs to {}, which is not an ancestor: it is not visible here", self.flabel(vf))
        }
    }

    fn check_node(&mut self, f: FuncId, n: NodeId, defined: &HashSet<ValueId>) {
        let m = self.m;
        let node = m.node(n);
        let ctx = format!("{}: {}", self.flabel(f), self.nlabel(n));
        // N1 (func field)
        if node.func != f {
            let msg = format!("{ctx}: the node's func is {} but it is in the body of this function", node.func);
            self.report(Some(f), Some(n), msg);
        }
        // N2, N6
        let mut outputs_ok = true;
        for (i, &o) in node.outputs.iter().enumerate() {
            if !self.in_range(o) {
                self.report(Some(f), Some(n), format!("{ctx}: output {i} ({o}) is out of range"));
                outputs_ok = false;
                continue;
            }
            let vd = m.value(o);
            if vd.def != (ValueDef::Node { node: n, output: i }) || vd.func != f {
                let msg = format!("{ctx}: output {i} ({}) is not defined as output {i} of this node", self.val(o));
                self.report(Some(f), Some(n), msg);
            }
            let what = format!("{ctx}: output {}", self.val(o));
            outputs_ok &= self.check_shape(f, Some(n), &what, &vd.shape.clone());
        }
        // N3
        let mut inputs_ok = true;
        for (i, &v) in node.inputs.iter().enumerate() {
            if !self.in_range(v) {
                self.report(Some(f), Some(n), format!("{ctx}: operand {i} ({v}) is out of range"));
                inputs_ok = false;
            } else if !defined.contains(&v) && !self.visible_from_ancestors(v) {
                let msg = format!("{ctx}: operand {i} ({}) {}", self.val(v), self.why_unavailable(f, v));
                self.report(Some(f), Some(n), msg);
                inputs_ok = false;
            } else if m.value(v).shape.validate().is_err() || !m.value(v).shape.dtype.is_supported() {
                inputs_ok = false;
            }
        }
        // N4
        let mut callees_ok = true;
        for callee in node.op.callees() {
            if !self.func_ok(callee) {
                self.report(Some(f), Some(n), format!("{ctx}: callee {callee} is out of range"));
                callees_ok = false;
                continue;
            }
            let cd = m.func(callee);
            let cl = self.flabel(callee);
            // Broken ids inside the callee are reported with the callee; inference would trip on them.
            if cd.params.iter().chain(cd.outputs.iter().flatten()).any(|&v| !self.in_range(v)) {
                callees_ok = false;
            }
            match &node.op {
                Op::Call { .. } => {
                    if cd.is_closure() {
                        let msg = format!("{ctx}: `call` must name a named function, not {cl}");
                        self.report(Some(f), Some(n), msg);
                        callees_ok = false;
                    } else if callee == m.main {
                        self.report(Some(f), Some(n), format!("{ctx}: @main cannot be called"));
                        callees_ok = false;
                    }
                }
                _ => {
                    if !cd.is_closure() {
                        let msg = format!("{ctx}: expects a closure but names the function {cl}");
                        self.report(Some(f), Some(n), msg);
                        callees_ok = false;
                    } else if cd.parent != Some(f) {
                        let parent = cd.parent.map(|p| self.flabel(p)).unwrap_or_else(|| "none".into());
                        let msg =
                            format!("{ctx}: {cl} is a closure of {parent}; only ops of its parent function may use it");
                        self.report(Some(f), Some(n), msg);
                        callees_ok = false;
                    }
                }
            }
            if cd.outputs.is_none() {
                self.report(Some(f), Some(n), format!("{ctx}: callee {cl} has not returned"));
                callees_ok = false;
            }
        }
        // N7, N8
        if let Op::Constant(data) = &node.op {
            if !node.inputs.is_empty() {
                self.report(Some(f), Some(n), format!("{ctx}: a constant takes no operands"));
            }
            if node.outputs.len() != 1 {
                let msg = format!("{ctx}: a constant has exactly one output, not {}", node.outputs.len());
                self.report(Some(f), Some(n), msg);
                return;
            }
            if !outputs_ok {
                return;
            }
            let shape = &m.value(node.outputs[0]).shape;
            match shape.byte_size() {
                None => self.report(Some(f), Some(n), format!("{ctx}: a constant cannot have a dynamic shape")),
                Some(size) if size != data.0.len() => {
                    let msg = format!(
                        "{ctx}: constant data has {} bytes but shape {} needs {size}",
                        data.0.len(),
                        format_shape(shape)
                    );
                    self.report(Some(f), Some(n), msg);
                }
                Some(_) => {
                    if shape.dtype == DType::Bool
                        && let Some(k) = data.0.iter().position(|&b| b > 1)
                    {
                        let msg = format!("{ctx}: Bool constant element {k} is {} (must be 0 or 1)", data.0[k]);
                        self.report(Some(f), Some(n), msg);
                    }
                }
            }
            return;
        }
        if !(inputs_ok && callees_ok) {
            return;
        }
        let in_shapes: Vec<&Shape> = node.inputs.iter().map(|&v| &m.value(v).shape).collect();
        match infer_shapes(m, &node.op, &in_shapes) {
            Err(e) => self.report(Some(f), Some(n), format!("{ctx}: shape inference rejects the node: {e}")),
            Ok(expected) => {
                if expected.len() != node.outputs.len() {
                    let msg = format!(
                        "{ctx}: the node has {} output(s) but the op produces {}",
                        node.outputs.len(),
                        expected.len()
                    );
                    self.report(Some(f), Some(n), msg);
                } else if outputs_ok {
                    for (i, (&o, want)) in node.outputs.iter().zip(&expected).enumerate() {
                        let got = &m.value(o).shape;
                        if got != want {
                            let msg = format!(
                                "{ctx}: output {i} ({}) has shape {} but inference gives {}",
                                self.val(o),
                                format_shape(got),
                                format_shape(want)
                            );
                            self.report(Some(f), Some(n), msg);
                        }
                    }
                }
            }
        }
    }

    // V1
    fn check_values(&mut self) {
        let m = self.m;
        for (i, vd) in m.values.iter().enumerate() {
            let v = ValueId(i as u32);
            if !self.func_ok(vd.func) {
                self.report(None, None, format!("value {}: function {} is out of range", self.val(v), vd.func));
                continue;
            }
            let ok = match vd.def {
                ValueDef::Param(k) => m.func(vd.func).params.get(k) == Some(&v),
                ValueDef::Node { node, output } => {
                    m.nodes.get(node.index()).is_some_and(|nd| nd.outputs.get(output) == Some(&v) && nd.func == vd.func)
                }
            };
            if !ok {
                let what = match vd.def {
                    ValueDef::Param(k) => format!("parameter {k} of {}", self.flabel(vd.func)),
                    ValueDef::Node { node, output } => {
                        format!("output {output} of node {node} in {}", self.flabel(vd.func))
                    }
                };
                self.report(
                    Some(vd.func),
                    None,
                    format!("value {}: claims to be {what}, which it is not", self.val(v)),
                );
            }
        }
    }

    // N5
    fn check_recursion(&mut self) {
        let m = self.m;
        let n = m.functions.len();
        let mut edges: Vec<Vec<FuncId>> = vec![Vec::new(); n];
        for (i, fd) in m.functions.iter().enumerate() {
            for &nid in &fd.body {
                if let Some(node) = m.nodes.get(nid.index()) {
                    for c in node.op.callees() {
                        if self.func_ok(c) && !edges[i].contains(&c) {
                            edges[i].push(c);
                        }
                    }
                }
            }
        }
        // Iterative DFS with colours: 0 = new, 1 = on stack, 2 = done.
        let mut colour = vec![0u8; n];
        let mut reported: HashSet<Vec<FuncId>> = HashSet::new();
        for &start in &self.names.order.clone() {
            if colour[start.index()] != 0 {
                continue;
            }
            let mut stack: Vec<(FuncId, usize)> = vec![(start, 0)];
            colour[start.index()] = 1;
            while let Some(&mut (f, ref mut k)) = stack.last_mut() {
                if let Some(&c) = edges[f.index()].get(*k) {
                    *k += 1;
                    match colour[c.index()] {
                        0 => {
                            colour[c.index()] = 1;
                            stack.push((c, 0));
                        }
                        1 => {
                            let from = stack.iter().position(|(g, _)| *g == c).unwrap_or(0);
                            let mut cycle: Vec<FuncId> = stack[from..].iter().map(|(g, _)| *g).collect();
                            let mut key = cycle.clone();
                            key.sort();
                            if reported.insert(key) {
                                cycle.push(c);
                                let path: Vec<String> = cycle.iter().map(|&g| self.names.func(g)).collect();
                                self.report(Some(c), None, format!("recursion: {}", path.join(" -> ")));
                            }
                        }
                        _ => {}
                    }
                } else {
                    colour[f.index()] = 2;
                    stack.pop();
                }
            }
        }
    }
}
