//! The SSA module: arenas of values, nodes and functions, addressed by typed ids.
//!
//! Data flow (which node defines a value, which values a node reads) lives in the arenas;
//! the order of execution of a function is its `body` list of node ids, kept apart so that a
//! pass can reorder or drop nodes without touching the graph. Values and nodes are numbered
//! module-wide, so a closure refers to a captured value of an ancestor by its plain id.

use crate::error::{Error, Result};
use crate::ir::op::Op;
use crate::ir::shape::Shape;

pub use crate::ir::ids::{FuncId, NodeId, ValueId};

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// The `index`-th parameter of its function.
    Param(usize),
    /// Output number `output` of `node`.
    Node {
        /// Defining node.
        node: NodeId,
        /// Output index.
        output: usize,
    },
}

/// A value's static facts.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// Its shape (dtype + dims).
    pub shape: Shape,
    /// Its definition.
    pub def: ValueDef,
    /// The function it is defined in.
    pub func: FuncId,
}

/// One op application.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The op and its attributes.
    pub op: Op,
    /// Operands, in the order documented on the op.
    pub inputs: Vec<ValueId>,
    /// Results.
    pub outputs: Vec<ValueId>,
    /// The function the node belongs to.
    pub func: FuncId,
}

/// A function: parameters, an ordered body and, once returned, its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionData {
    /// `Some("main")` / `Some(name)` for named functions; `None` for closures.
    pub name: Option<String>,
    /// Enclosing function of a closure.
    pub parent: Option<FuncId>,
    /// Parameter values in order.
    pub params: Vec<ValueId>,
    /// Parameter names (same length as `params`).
    pub param_names: Vec<String>,
    /// Nodes in execution order.
    pub body: Vec<NodeId>,
    /// Returned values; `None` until `return` is called.
    pub outputs: Option<Vec<ValueId>>,
}

impl FunctionData {
    /// Whether this is a closure (no name).
    pub fn is_closure(&self) -> bool {
        self.name.is_none()
    }
}

/// A whole program: the main function, named functions and closures.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// Module (computation) name.
    pub name: String,
    /// All values.
    pub values: Vec<ValueData>,
    /// All nodes (a node removed by a pass stays in the arena but leaves every body).
    pub nodes: Vec<Node>,
    /// All functions; `main` is one of them.
    pub functions: Vec<FunctionData>,
    /// The entry function.
    pub main: FuncId,
}

impl Module {
    /// A module with an empty `main` function.
    pub fn new(name: &str) -> Module {
        let mut m =
            Module { name: name.to_string(), values: vec![], nodes: vec![], functions: vec![], main: FuncId(0) };
        m.main = m.add_function(Some("main".to_string()), None);
        m
    }

    /// Adds an empty function (closure when `name` is `None`).
    pub fn add_function(&mut self, name: Option<String>, parent: Option<FuncId>) -> FuncId {
        let id = FuncId(self.functions.len() as u32);
        self.functions.push(FunctionData {
            name,
            parent,
            params: vec![],
            param_names: vec![],
            body: vec![],
            outputs: None,
        });
        id
    }

    /// Adds a parameter to `func` and returns its value.
    pub fn add_param(&mut self, func: FuncId, name: &str, shape: Shape) -> ValueId {
        let index = self.functions[func.index()].params.len();
        let v = self.new_value(shape, ValueDef::Param(index), func);
        let f = &mut self.functions[func.index()];
        f.params.push(v);
        f.param_names.push(name.to_string());
        v
    }

    /// Empties the data of every constant node outside every function body (nodes that rewrites
    /// left behind: nothing executes or reads them), so that they keep no bytes alive.
    pub fn release_unreachable_constants(&mut self) {
        let mut reachable = vec![false; self.nodes.len()];
        for f in &self.functions {
            for &n in &f.body {
                reachable[n.index()] = true;
            }
        }
        for (node, reachable) in self.nodes.iter_mut().zip(reachable) {
            if let Op::Constant(d) = &mut node.op
                && !reachable
                && !d.0.is_empty()
            {
                d.0 = std::sync::Arc::new(Vec::new());
            }
        }
    }

    /// Appends a node to the end of `func`'s body, creating one output value per shape.
    pub fn add_node(&mut self, func: FuncId, op: Op, inputs: Vec<ValueId>, output_shapes: Vec<Shape>) -> NodeId {
        let node = NodeId(self.nodes.len() as u32);
        let outputs = output_shapes
            .into_iter()
            .enumerate()
            .map(|(output, s)| self.new_value(s, ValueDef::Node { node, output }, func))
            .collect();
        self.nodes.push(Node { op, inputs, outputs, func });
        self.functions[func.index()].body.push(node);
        node
    }

    fn new_value(&mut self, shape: Shape, def: ValueDef, func: FuncId) -> ValueId {
        let v = ValueId(self.values.len() as u32);
        self.values.push(ValueData { shape, def, func });
        v
    }

    /// The facts of a value.
    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v.index()]
    }

    /// The payload of `v` when a Constant node defines it.
    pub fn constant_data(&self, v: ValueId) -> Option<&std::sync::Arc<Vec<u8>>> {
        match self.value(v).def {
            ValueDef::Node { node, .. } => match &self.node(node).op {
                Op::Constant(c) => Some(&c.0),
                _ => None,
            },
            ValueDef::Param(_) => None,
        }
    }

    /// The shape of a value.
    pub fn shape(&self, v: ValueId) -> &Shape {
        &self.values[v.index()].shape
    }

    /// A node.
    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n.index()]
    }

    /// A function.
    pub fn func(&self, f: FuncId) -> &FunctionData {
        &self.functions[f.index()]
    }

    /// Mutable access to a function.
    pub fn func_mut(&mut self, f: FuncId) -> &mut FunctionData {
        &mut self.functions[f.index()]
    }

    /// Looks a named function up.
    pub fn func_by_name(&self, name: &str) -> Option<FuncId> {
        self.functions.iter().position(|f| f.name.as_deref() == Some(name)).map(|i| FuncId(i as u32))
    }

    /// Whether `anc` is `f` or one of its enclosing functions.
    pub fn is_ancestor_or_self(&self, anc: FuncId, f: FuncId) -> bool {
        let mut cur = Some(f);
        while let Some(c) = cur {
            if c == anc {
                return true;
            }
            cur = self.functions.get(c.index()).and_then(|d| d.parent);
        }
        false
    }

    /// Whether `func` may read value `v` (defined in `func` or an ancestor).
    pub fn is_visible(&self, v: ValueId, func: FuncId) -> bool {
        self.values.get(v.index()).is_some_and(|d| self.is_ancestor_or_self(d.func, func))
    }

    /// Parameter shapes of a function.
    pub fn param_shapes(&self, f: FuncId) -> Vec<Shape> {
        self.func(f).params.iter().map(|&p| self.shape(p).clone()).collect()
    }

    /// Output shapes of a returned function (error if not returned yet).
    pub fn output_shapes(&self, f: FuncId) -> Result<Vec<Shape>> {
        match &self.func(f).outputs {
            Some(o) => Ok(o.iter().map(|&v| self.shape(v).clone()).collect()),
            None => Err(Error::invalid("Call", format!("function {} has not returned yet", self.func_label(f)))),
        }
    }

    /// A human label for a function: its name, or `closure fN`.
    pub fn func_label(&self, f: FuncId) -> String {
        match self.functions.get(f.index()).and_then(|d| d.name.clone()) {
            Some(n) => n,
            None => format!("closure {f}"),
        }
    }
}
