//! Which nodes fuse: the per-node fusion analysis (elementwise, reduction, absorbed
//! compares, constants) and the admission test of an open cluster.

use super::access::{broadcast_access, normalize_access, reduce_geometry, row_major};
use super::*;

/// The value of a one-element Constant `v` (any kernel dtype), as a typed literal.
pub(super) fn const_scalar(m: &Module, v: ValueId) -> Option<(Ty, Lit)> {
    let ValueDef::Node { node, .. } = m.value(v).def else { return None };
    let Op::Constant(data) = &m.node(node).op else { return None };
    let s = m.shape(v);
    if s.size() != Some(1) {
        return None;
    }
    let ty = Ty::of(s.dtype)?;
    let b = data.0.as_slice();
    let arr = |n: usize| -> Option<[u8; 8]> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b.get(..n)?);
        Some(a)
    };
    let raw = u64::from_le_bytes(arr(ty.bytes())?);
    let lit = match ty {
        Ty::Bool => Lit::Int((raw & 0xff != 0) as i128),
        Ty::I8 => Lit::Int(raw as u8 as i8 as i128),
        Ty::I16 => Lit::Int(raw as u16 as i16 as i128),
        Ty::I32 => Lit::Int(raw as u32 as i32 as i128),
        Ty::I64 => Lit::Int(raw as i64 as i128),
        Ty::U8 | Ty::U16 | Ty::U32 | Ty::U64 => Lit::Int(raw as i128),
        Ty::F16 => Lit::Float(half::f16::from_bits(raw as u16).to_f64()),
        Ty::BF16 => Lit::Float(half::bf16::from_bits(raw as u16).to_f64()),
        Ty::F32 => Lit::Float(f32::from_bits(raw as u32) as f64),
        Ty::F64 => Lit::Float(f64::from_bits(raw)),
    };
    Some((ty, lit))
}

/// The node defining `v`, if any.
pub(super) fn def_node(m: &Module, v: ValueId) -> Option<NodeId> {
    match m.value(v).def {
        ValueDef::Node { node, .. } => Some(node),
        ValueDef::Param(_) => None,
    }
}

pub(super) struct Analysis<'m> {
    pub(super) m: &'m Module,
    /// Number of reads of each value by nodes of the function (with multiplicity).
    pub(super) uses: Vec<u32>,
    /// Values returned by the function or read by other functions (closures).
    pub(super) returned: HashSet<ValueId>,
}

impl Analysis<'_> {
    /// Whether `v` can be read element for element by a member with output dims `dims`: same
    /// dims, one element, or dims that broadcast to `dims`.
    fn elem_ok(&self, v: ValueId, dims: &[i64]) -> bool {
        let s = self.m.shape(v);
        !s.is_dynamic()
            && Ty::of(s.dtype).is_some()
            && (s.dims == dims || s.size() == Some(1) || broadcast_access(&s.dims, dims).is_some())
    }

    /// How node `n` would be emitted in a cluster, or `None` if it is not fusable.
    pub(super) fn fuse(&self, n: NodeId) -> Option<Fuse> {
        let m = self.m;
        let node = m.node(n);
        if node.outputs.len() != 1 {
            return None;
        }
        let out = m.shape(node.outputs[0]);
        let ty = Ty::of(out.dtype)?;
        if out.is_dynamic() {
            return None;
        }
        let dims = out.dims.as_slice();
        let ins = &node.inputs;
        let dt = |v: ValueId| Ty::of(m.shape(v).dtype);
        if let (Op::Reduce { kind, axes }, &[x]) = (&node.op, ins.as_slice()) {
            let xs = m.shape(x);
            let combine = reduce_combine(*kind, ty)?;
            let acc = ty.compute_ty();
            if xs.is_dynamic() || dt(x)? != ty || !crate::codegen::supports_typed(&Inst::Binary(combine, 0, 0), acc) {
                return None;
            }
            return reduce_geometry(&xs.dims, axes).map(|geom| Fuse::Reduce { kind: *kind, x, geom });
        }
        let fuse = match (&node.op, ins.as_slice()) {
            (Op::Binary(op), &[a, b]) => {
                let t = dt(a)?;
                if dt(b)? != t || t != ty || !crate::codegen::supports_typed(&Inst::Binary(*op, 0, 0), t) {
                    return None;
                }
                Fuse::Binary(*op, a, b)
            }
            (Op::Unary(op), &[x]) => {
                if !crate::codegen::supports_typed(&Inst::Unary(*op, 0), dt(x)?) {
                    return None;
                }
                Fuse::Unary(*op, x)
            }
            (Op::Compare { dir, total_order }, &[a, b]) => {
                let t = dt(a)?;
                if dt(b)? != t || (*total_order && t.is_float()) || ty != Ty::Bool {
                    return None;
                }
                Fuse::Compare(*dir, a, b)
            }
            (Op::Clamp, &[lo, x, hi]) => {
                if dt(lo)? != ty || dt(x)? != ty || dt(hi)? != ty || ty == Ty::Bool {
                    return None;
                }
                Fuse::Clamp(lo, x, hi)
            }
            (Op::ConvertDType { dtype }, &[x]) if *dtype == m.shape(x).dtype => Fuse::Alias(x),
            (Op::ConvertDType { .. }, &[x]) => Fuse::Convert(x, dt(x).map(|_| ty)?),
            (Op::BroadcastInDim { .. }, &[x]) if m.shape(x).size() == Some(1) => Fuse::Alias(x),
            (Op::BroadcastInDim { axes, .. }, &[x]) => {
                let xs = m.shape(x);
                if xs.is_dynamic() || axes.len() != xs.rank() || axes.iter().any(|&a| a >= dims.len()) {
                    return None;
                }
                let rs = row_major(&xs.dims);
                let mut strides = vec![0i64; dims.len()];
                for (a, &o) in axes.iter().enumerate() {
                    if xs.dims[a] != 1 {
                        strides[o] = rs[a];
                    }
                }
                Fuse::Remap(x, normalize_access(dims, &strides))
            }
            (Op::Transpose { perm }, &[x]) => {
                let xs = m.shape(x);
                if xs.is_dynamic() || perm.len() != xs.rank() || perm.len() != dims.len() {
                    return None;
                }
                let rs = row_major(&xs.dims);
                let strides: Option<Vec<i64>> = perm.iter().map(|&p| rs.get(p).copied()).collect();
                Fuse::Remap(x, normalize_access(dims, &strides?))
            }
            (Op::Reshape { .. }, &[x]) if m.shape(x).size() == out.size() && dt(x)? == ty => Fuse::Reshape(x),
            (Op::Iota { axis, .. }, &[]) if ty != Ty::Bool && *axis < dims.len() => {
                Fuse::Iota { dims: dims.to_vec(), axis: *axis, ty }
            }
            (Op::Where, &[cond, t, f]) => {
                if dt(cond)? != Ty::Bool || dt(t)? != ty || dt(f)? != ty {
                    return None;
                }
                match self.absorbable(cond, node.func, dims, ty) {
                    Some((dir, a, b)) => Fuse::Select { dir, a, b, t, f },
                    None => Fuse::Where(cond, t, f),
                }
            }
            _ => return None,
        };
        let elem_ok = fuse.reads().iter().all(|(v, r)| *r != Read::Elem || self.elem_ok(*v, dims));
        elem_ok.then_some(fuse)
    }

    /// The comparison `(dir, a, b)` defining `cond` when a Where over (`dims`, `ty`) may absorb
    /// it: a non-total-order (or integer) Compare of operands of type `ty`, of the Where's dims,
    /// in the same function, read only by this Where and not returned.
    fn absorbable(&self, cond: ValueId, func: FuncId, dims: &[i64], ty: Ty) -> Option<(CompareOp, ValueId, ValueId)> {
        let m = self.m;
        let c = def_node(m, cond)?;
        let cn = m.node(c);
        let Op::Compare { dir, total_order } = cn.op else { return None };
        let ok = cn.func == func
            && self.uses[cond.index()] == 1
            && !self.returned.contains(&cond)
            && m.shape(cond).dims == dims
            && cn.inputs.len() == 2
            && cn.inputs.iter().all(|&v| Ty::of(m.shape(v).dtype) == Some(ty))
            && (!total_order || !ty.is_float())
            && cn.inputs.iter().all(|&v| self.elem_ok(v, dims));
        ok.then_some((dir, cn.inputs[0], cn.inputs[1]))
    }
}

/// An open cluster while walking the body.
pub(super) struct Open {
    pub(super) len: usize,
    pub(super) nodes: Vec<(NodeId, Fuse)>,
    pub(super) produced: HashSet<ValueId>,
    /// Results of the cluster's reductions (not readable inside it).
    pub(super) reduced: HashSet<ValueId>,
    /// The reduction geometry all of the cluster's reductions share.
    pub(super) geom: Option<(usize, usize, usize)>,
    /// Members that copy a generator an earlier item computed (see `cluster_function`).
    pub(super) copies: HashSet<NodeId>,
}

impl Open {
    /// Whether the cluster is a tail a convolution can take as its epilogue: no reduction yet,
    /// only adds, maxima, minima, clamps, sigmoids, tanh, products (SiLU) and broadcasts or
    /// reshapes, and it reads a `ConvGeneral`'s result element for element. The op list mirrors
    /// the conv tails the jit's `merge` pass accepts (which sits above this layer); a tail it
    /// then rejects costs one write and read of its result.
    pub(super) fn conv_tail(&self, m: &Module) -> bool {
        let epilogue_op = |n: NodeId| {
            matches!(
                m.node(n).op,
                Op::Binary(BinaryOp::Add | BinaryOp::Max | BinaryOp::Min | BinaryOp::Mul)
                    | Op::Unary(UnaryOp::Logistic | UnaryOp::Tanh)
                    | Op::Clamp
                    | Op::BroadcastInDim { .. }
                    | Op::Reshape { .. }
            )
        };
        self.geom.is_none()
            && self.nodes.iter().all(|&(n, _)| epilogue_op(n))
            && self.nodes.iter().any(|(_, fz)| {
                fz.reads().iter().any(|(v, r)| {
                    *r == Read::Elem
                        && !self.produced.contains(v)
                        && def_node(m, *v).is_some_and(|n| matches!(m.node(n).op, Op::ConvGeneral { .. }))
                })
            })
    }

    /// Whether `n` (fusable as `fz`, output dims `dims`) can join: every remapped read is of a
    /// value computed before the cluster, every flat read of a member, and every member read
    /// element for element has the node's dims.
    pub(super) fn admits(&self, m: &Module, fz: &Fuse, dims: &[i64]) -> bool {
        if let Fuse::Reduce { geom, .. } = fz
            && self.geom.is_some_and(|g| g != *geom)
        {
            return false;
        }
        fz.reads().iter().all(|(v, r)| {
            if self.reduced.contains(v) {
                return false;
            }
            let member = self.produced.contains(v);
            match r {
                Read::Elem => !member || m.shape(*v).dims == dims || self.len == 1,
                Read::Flat => member,
                Read::Remap(_) => !member,
            }
        })
    }
}
