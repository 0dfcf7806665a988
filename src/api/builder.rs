//! `Builder`, `Function` and `Value`: building a module through checked graph-building calls.
//!
//! Every op method of [`Function`] (in `api/ops_*.rs`) goes through `Function::push`: it checks
//! that the function is still open, that the backend supports the op, that every operand belongs
//! to this builder and is visible from this function, then infers the output shapes
//! ([`crate::ir::infer`]) and only then appends the node — so a rejected call leaves the
//! function unchanged.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::backend::{Backend, Capabilities, Executable};
use crate::error::{Error, Result};
use crate::ir::dtype::Element;
use crate::ir::module::{FuncId, Module, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::optype::OpType;
use crate::ir::shape::Shape;

static NEXT_BUILDER_ID: AtomicU32 = AtomicU32::new(1);

/// A handle to a value of a function under construction. Cheap to copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Value {
    builder: u32,
    id: ValueId,
}

impl Value {
    /// The IR value id (`%N` in the text format).
    pub fn id(self) -> ValueId {
        self.id
    }
}

pub(crate) struct State {
    pub(crate) id: u32,
    pub(crate) module: Module,
    pub(crate) caps: Capabilities,
    pub(crate) compiled: bool,
}

impl dyn Backend {
    /// A new builder named `name`, with an empty `main`, whose `compile` calls this backend.
    ///
    /// ```
    /// use tensorjit::{DType, Shape};
    ///
    /// let backend = tensorjit::new_with_config("interp")?;
    /// let builder = backend.builder("relu");
    /// let main = builder.main();
    /// let x = main.parameter("x", Shape::new(DType::Float32, &[4]))?;
    /// let zero = main.constant(&[0.0f32], &[])?;
    /// let zero = main.broadcast_in_dim(zero, &Shape::new(DType::Float32, &[4]), &[])?;
    /// let y = main.max(x, zero)?;
    /// main.return_(&[y])?;
    /// // The module can be printed as IR text before it is compiled.
    /// assert!(tensorjit::ir::text::print_module(&builder.module()).contains("max"));
    /// let exe = builder.compile()?;
    /// let x = tensorjit::Buffer::from_slice(&[-2.0f32, -0.5, 0.5, 2.0], &[4])?;
    /// assert_eq!(exe.execute(&[&x], &[])?[0].to_vec::<f32>()?, [0.0, 0.0, 0.5, 2.0]);
    /// # Ok::<(), tensorjit::Error>(())
    /// ```
    pub fn builder(self: &Arc<Self>, name: &str) -> Builder {
        Builder::new(Arc::clone(self), name)
    }
}

/// Builds one module (computation) for a backend; `compile` hands it to that backend.
pub struct Builder {
    state: Arc<Mutex<State>>,
    backend: Arc<dyn Backend>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Builder {
    /// A builder named `name` for `backend`, with an empty `main`.
    pub fn new(backend: Arc<dyn Backend>, name: &str) -> Builder {
        let caps = backend.capabilities().clone();
        let state = State {
            id: NEXT_BUILDER_ID.fetch_add(1, Ordering::Relaxed),
            module: Module::new(name),
            caps,
            compiled: false,
        };
        Builder { state: Arc::new(Mutex::new(state)), backend }
    }

    /// The computation name.
    pub fn name(&self) -> String {
        lock(&self.state).module.name.clone()
    }

    /// The backend this builder compiles for.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The entry function, named `"main"`.
    pub fn main(&self) -> Function {
        let main = lock(&self.state).module.main;
        Function { state: self.state.clone(), id: main }
    }

    /// A new top-level named function, callable with [`Function::call`].
    pub fn new_function(&self, name: &str) -> Result<Function> {
        let mut st = lock(&self.state);
        if st.compiled {
            return Err(Error::invalid("new_function", "the builder was already compiled"));
        }
        if name.is_empty() || name == "main" || st.module.func_by_name(name).is_some() {
            return Err(Error::invalid("new_function", format!("name {name:?} is empty, \"main\" or already used")));
        }
        if !st.caps.functions {
            return Err(Error::not_implemented("new_function", "backend does not support functions"));
        }
        let id = st.module.add_function(Some(name.to_string()), None);
        Ok(Function { state: self.state.clone(), id })
    }

    /// The shape of a value built by this builder.
    pub fn op_shape(&self, v: Value) -> Result<Shape> {
        let st = lock(&self.state);
        check_value(&st, "op_shape", v)?;
        Ok(st.module.shape(v.id).clone())
    }

    /// A copy of the module built so far (for printing, inspection or passes).
    pub fn module(&self) -> Module {
        lock(&self.state).module.clone()
    }

    /// Compiles the module with the backend, which verifies it first. `main` must have returned.
    pub fn compile(self) -> Result<Arc<dyn Executable>> {
        let module = {
            let mut st = lock(&self.state);
            if st.compiled {
                return Err(Error::invalid("compile", "the builder was already compiled"));
            }
            if st.module.func(st.module.main).outputs.is_none() {
                return Err(Error::invalid("compile", "main has not returned (call Function::return_ first)"));
            }
            st.compiled = true;
            st.module.clone()
        };
        // Every backend verifies what it compiles (the contract of `Backend::compile`).
        self.backend.compile(module)
    }
}

fn check_value(st: &State, op: &str, v: Value) -> Result<()> {
    if v.builder != st.id || v.id.index() >= st.module.values.len() {
        return Err(Error::invalid(op, format!("value {} belongs to another builder", v.id)));
    }
    Ok(())
}

/// A function under construction: `main`, a named function or a closure. Ops are its methods.
#[derive(Clone)]
pub struct Function {
    state: Arc<Mutex<State>>,
    id: FuncId,
}

impl Function {
    /// The function id in the module.
    pub fn id(&self) -> FuncId {
        self.id
    }

    /// Its name (`""` for closures).
    pub fn name(&self) -> String {
        lock(&self.state).module.func(self.id).name.clone().unwrap_or_default()
    }

    /// The enclosing function of a closure.
    pub fn parent(&self) -> Option<Function> {
        let p = lock(&self.state).module.func(self.id).parent;
        p.map(|id| Function { state: self.state.clone(), id })
    }

    /// Whether `return_` was called.
    pub fn is_returned(&self) -> bool {
        lock(&self.state).module.func(self.id).outputs.is_some()
    }

    fn open(&self, st: &State, op: &str) -> Result<()> {
        if st.compiled {
            return Err(Error::invalid(op, "the builder was already compiled"));
        }
        if st.module.func(self.id).outputs.is_some() {
            return Err(Error::invalid(op, format!("function {} has already returned", st.module.func_label(self.id))));
        }
        Ok(())
    }

    /// A new closure (for Sort, While, If bodies) whose parent is this function. It may read
    /// values of this function and of its ancestors.
    pub fn closure(&self) -> Result<Function> {
        let mut st = lock(&self.state);
        if st.compiled {
            return Err(Error::invalid("closure", "the builder was already compiled"));
        }
        if !st.caps.functions {
            return Err(Error::not_implemented("closure", "backend does not support functions"));
        }
        let id = st.module.add_function(None, Some(self.id));
        Ok(Function { state: self.state.clone(), id })
    }

    /// Adds the next parameter.
    pub fn parameter(&self, name: &str, shape: Shape) -> Result<Value> {
        let mut st = lock(&self.state);
        self.open(&st, "parameter")?;
        shape.validate_for("parameter", &format!("{name:?}"))?;
        if !st.caps.dtypes.contains(&shape.dtype) {
            return Err(Error::not_implemented("parameter", format!("{name:?}: dtype {} not supported", shape.dtype)));
        }
        if shape.is_dynamic() && !st.caps.dynamic_axes {
            return Err(Error::not_implemented("parameter", format!("{name:?}: dynamic shape {shape} not supported")));
        }
        let id = st.module.add_param(self.id, name, shape);
        Ok(Value { builder: st.id, id })
    }

    /// A constant holding a copy of `data` with dims `dims`.
    pub fn constant<T: Element>(&self, data: &[T], dims: &[usize]) -> Result<Value> {
        let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
        if n != data.len() || dims.iter().any(|&d| i64::try_from(d).is_err()) {
            return Err(Error::invalid(
                "constant",
                format!("{} elements given for dims {dims:?} ({n} elements)", data.len()),
            ));
        }
        self.constant_bytes(Shape::from_usize(T::DTYPE, dims), crate::memory::element_bytes(data))
    }

    /// A scalar constant.
    pub fn scalar<T: Element>(&self, value: T) -> Result<Value> {
        self.constant(&[value], &[])
    }

    /// A constant from raw little-endian bytes (packed for sub-byte dtypes).
    pub fn constant_bytes(&self, shape: Shape, bytes: &[u8]) -> Result<Value> {
        if shape.is_dynamic() {
            return Err(Error::invalid("constant", format!("shape {shape} is dynamic")));
        }
        // The buffer checks (size, Bool bytes, supported dtype), without a copy.
        crate::api::buffer::Buffer::check_bytes(&shape, bytes).map_err(|e| match e {
            Error::Limit { msg, .. } => Error::limit("constant", msg),
            e => Error::invalid("constant", e.to_string()),
        })?;
        self.push(Op::Constant(ConstData(Arc::new(bytes.to_vec()))), &[], Some(vec![shape])).map(|v| v[0])
    }

    /// The shape of a value.
    pub fn shape(&self, v: Value) -> Result<Shape> {
        let st = lock(&self.state);
        check_value(&st, "shape", v)?;
        Ok(st.module.shape(v.id).clone())
    }

    /// Sets the outputs (at least one); the function is frozen afterwards.
    pub fn return_(&self, outputs: &[Value]) -> Result<()> {
        let mut st = lock(&self.state);
        self.open(&st, "return")?;
        if outputs.is_empty() {
            return Err(Error::invalid("return", "at least one output is required"));
        }
        for (i, &v) in outputs.iter().enumerate() {
            check_value(&st, "return", v)?;
            if !st.module.is_visible(v.id, self.id) {
                return Err(Error::invalid(
                    "return",
                    format!("output {i} ({}) is not visible from this function", v.id),
                ));
            }
        }
        st.module.func_mut(self.id).outputs = Some(outputs.iter().map(|v| v.id).collect());
        Ok(())
    }

    /// Appends `op` applied to `inputs`, checking everything first. `shapes` overrides shape
    /// inference (used by `constant` only). Returns the output values.
    pub(crate) fn push(&self, op: Op, inputs: &[Value], shapes: Option<Vec<Shape>>) -> Result<Vec<Value>> {
        let mut st = lock(&self.state);
        let ty = op.op_type();
        let name = ty.to_string();
        self.open(&st, &name)?;
        if !st.caps.supports(ty) {
            return Err(Error::not_implemented(&name, "not supported by this backend"));
        }
        for (i, &v) in inputs.iter().enumerate() {
            check_value(&st, &name, v)?;
            if !st.module.is_visible(v.id, self.id) {
                return Err(Error::invalid(
                    &name,
                    format!(
                        "operand {i} ({}) belongs to function {}, not visible from {}",
                        v.id,
                        st.module.func_label(st.module.value(v.id).func),
                        st.module.func_label(self.id)
                    ),
                ));
            }
        }
        for callee in op.callees() {
            if callee == self.id || st.module.is_ancestor_or_self(callee, self.id) {
                return Err(Error::invalid(
                    &name,
                    format!("function {} cannot call itself or an ancestor", st.module.func_label(callee)),
                ));
            }
        }
        let ids: Vec<ValueId> = inputs.iter().map(|v| v.id).collect();
        let shapes = match shapes {
            Some(s) => s,
            None => {
                let in_shapes: Vec<&Shape> = ids.iter().map(|&v| st.module.shape(v)).collect();
                crate::ir::infer::infer_shapes(&st.module, &op, &in_shapes)?
            }
        };
        for (k, s) in shapes.iter().enumerate() {
            s.validate_for(&name, &format!("output {k}"))?;
            if !st.caps.dtypes.contains(&s.dtype) {
                return Err(Error::not_implemented(
                    &name,
                    format!("output dtype {} not supported by this backend", s.dtype),
                ));
            }
        }
        let func = self.id;
        let node = st.module.add_node(func, op, ids, shapes);
        let bid = st.id;
        Ok(st.module.node(node).outputs.iter().map(|&id| Value { builder: bid, id }).collect())
    }

    /// [`push`](Self::push) for single-output ops.
    pub(crate) fn push1(&self, op: Op, inputs: &[Value]) -> Result<Value> {
        Ok(self.push(op, inputs, None)?[0])
    }

    /// Runs `f` with the module (read-only), e.g. to look at callee signatures.
    pub(crate) fn with_module<R>(&self, f: impl FnOnce(&Module) -> R) -> R {
        f(&lock(&self.state).module)
    }

    /// Whether `other` was made by the same builder.
    pub(crate) fn same_builder(&self, other: &Function) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Whether the backend supports `op`.
    pub fn supports(&self, op: OpType) -> bool {
        lock(&self.state).caps.supports(op)
    }
}
