//! Emitting the [`LoopKernel`] of one cluster: registers for members, inputs deduplicated by
//! (value, access), constants inlined.

use super::access::{broadcast_access, iter_shape};
use super::analysis::const_scalar;
use super::*;

/// Builds a kernel body: registers for members, inputs deduplicated by (value, access).
pub(super) struct Emitter<'m> {
    m: &'m Module,
    insts: Vec<Inst>,
    tys: Vec<Ty>,
    inputs: Vec<ValueId>,
    in_tys: Vec<Ty>,
    access: Vec<Access>,
    /// Registers of member results.
    regs: HashMap<ValueId, Reg>,
    /// Registers of inputs and constants already read.
    loaded: HashMap<(ValueId, Access), Reg>,
}

impl Emitter<'_> {
    fn push(&mut self, inst: Inst, ty: Ty) -> Reg {
        self.insts.push(inst);
        self.tys.push(ty);
        self.insts.len() - 1
    }

    /// The float constant held by register `r`, if it is one.
    fn const_of(&self, r: Reg) -> Option<f64> {
        match self.insts.get(r) {
            Some(Inst::Const(t, Lit::Float(c))) if t.is_float() => Some(*c),
            _ => None,
        }
    }

    /// Emits `op(a, b)`. Float Max/Min against a non-NaN constant `c` become one compare and
    /// select, exact for every `x` (the general Max/Min sequence also handles a NaN or
    /// signed-zero second operand, which a known constant rules out):
    /// - `max(x, c)` = `x < c ? c : x`, plus `+ 0` when `c` is +0 (so ReLU is `maxps`, `addps`);
    /// - `min(x, c)` = `x >= c ? c : x` when `c` is −0, else `x > c ? c : x`.
    ///
    /// Ordered comparisons: a NaN `x` selects `x`; ties select `x`, identical to `c` except
    /// for the zeros whose sign the rule fixes: max(−0, +0) = +0 (the `+ 0` turns the −0 a tie
    /// kept into +0 and changes no other value), min(+0, −0) = −0 (the `>=` picks `c`). The
    /// strict forms are what the x86 backend emits as a single `maxps`/`minps`.
    fn binary(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        let ty = self.tys[a];
        let (x, c) = match (self.const_of(a), self.const_of(b)) {
            (_, Some(c)) if !c.is_nan() => (a, (b, c)),
            (Some(c), _) if !c.is_nan() => (b, (a, c)),
            _ => return self.push(Inst::Binary(op, a, b), ty),
        };
        let (creg, cval) = c;
        let pos_zero = cval == 0.0 && cval.is_sign_positive();
        let neg_zero = cval == 0.0 && cval.is_sign_negative();
        let dir = match op {
            BinaryOp::Max => CompareOp::LessThan,
            BinaryOp::Min if neg_zero => CompareOp::GreaterOrEqual,
            BinaryOp::Min => CompareOp::GreaterThan,
            _ => return self.push(Inst::Binary(op, a, b), ty),
        };
        let r = self.push(Inst::Select { dir, a: x, b: creg, t: creg, f: x }, ty);
        if op == BinaryOp::Max && pos_zero { self.push(Inst::Binary(BinaryOp::Add, r, creg), ty) } else { r }
    }

    /// A kernel input reading `v` through `acc` (deduplicated).
    fn input(&mut self, v: ValueId, acc: Access) -> Reg {
        if let Some(&r) = self.loaded.get(&(v, acc.clone())) {
            return r;
        }
        let ty = Ty::of(self.m.shape(v).dtype).unwrap_or(Ty::F32);
        let r = match (&acc, const_scalar(self.m, v)) {
            (Access::Scalar, Some((t, lit))) => self.push(Inst::Const(t, lit), t),
            _ => {
                self.inputs.push(v);
                self.in_tys.push(ty);
                self.access.push(acc.clone());
                self.push(Inst::Load(self.inputs.len() - 1), ty)
            }
        };
        self.loaded.insert((v, acc), r);
        r
    }

    /// The register holding `v` read as `how` by a member with output dims `dims`.
    fn read(&mut self, v: ValueId, how: &Read, dims: &[i64]) -> Reg {
        if let Some(&r) = self.regs.get(&v) {
            return r; // a member (admitted only for element-for-element or flat reads)
        }
        let s = self.m.shape(v);
        let acc = match how {
            Read::Remap(a) => a.clone(),
            _ if s.size() == Some(1) => Access::Scalar,
            _ if s.dims == dims => Access::Full,
            Read::Flat => Access::Full,
            Read::Elem => broadcast_access(&s.dims, dims).unwrap_or(Access::Full),
        };
        self.input(v, acc)
    }
}

/// Emits the kernel of one group of fusable nodes.
pub(super) fn build_cluster(
    m: &Module,
    absorbed_by: &HashMap<NodeId, NodeId>,
    group: Vec<(NodeId, Fuse)>,
    outputs: Vec<ValueId>,
) -> Cluster {
    let first = iter_shape(m, group[0].0, &group[0].1);
    let (dtype, dims) = (first.dtype, first.dims.clone());
    let len = first.num_elements();
    let mut e = Emitter {
        m,
        insts: vec![],
        tys: vec![],
        inputs: vec![],
        in_tys: vec![],
        access: vec![],
        regs: HashMap::new(),
        loaded: HashMap::new(),
    };
    let absorbed_of: HashMap<NodeId, NodeId> = absorbed_by.iter().map(|(&c, &w)| (w, c)).collect();
    let mut nodes = vec![];
    let mut absorbed = vec![];
    let mut reductions: HashMap<ValueId, (ReduceKind, Reg)> = HashMap::new();
    let mut geometry = None;
    for (n, fz) in group {
        nodes.push(n);
        let out = m.node(n).outputs[0];
        let od = m.shape(out).dims.clone();
        let ty = Ty::of(m.shape(out).dtype).unwrap_or(Ty::F32);
        let el = Read::Elem;
        let r = match fz {
            Fuse::Reduce { kind, x, geom } => {
                let xd = m.shape(x).dims.clone();
                let a = e.read(x, &el, &xd);
                reductions.insert(out, (kind, a));
                geometry = Some(geom);
                continue;
            }
            Fuse::Alias(x) => e.read(x, &el, &od),
            Fuse::Reshape(x) => e.read(x, &Read::Flat, &od),
            Fuse::Remap(x, acc) => e.read(x, &Read::Remap(acc), &od),
            Fuse::Unary(op, x) => {
                let a = e.read(x, &el, &od);
                e.push(Inst::Unary(op, a), ty)
            }
            Fuse::Binary(op, x, y) => {
                let a = e.read(x, &el, &od);
                let b = e.read(y, &el, &od);
                e.binary(op, a, b)
            }
            Fuse::Compare(dir, x, y) => {
                let a = e.read(x, &el, &od);
                let b = e.read(y, &el, &od);
                e.push(Inst::Compare(dir, a, b), Ty::Bool)
            }
            Fuse::Where(c, t, f) => {
                let (c, t, f) = (e.read(c, &el, &od), e.read(t, &el, &od), e.read(f, &el, &od));
                e.push(Inst::Where(c, t, f), ty)
            }
            Fuse::Convert(x, to) => {
                let a = e.read(x, &el, &od);
                e.push(Inst::Convert(a, to), to)
            }
            Fuse::Iota { dims, axis, ty } => {
                // Only the axis's own extent matters: the axes before and after it merge.
                let inner: i64 = dims[axis + 1..].iter().product();
                let outer: i64 = dims[..axis].iter().product();
                let i = e.push(Inst::Iota { dims: vec![outer, dims[axis], inner], axis: 1 }, Ty::I64);
                if ty == Ty::I64 { i } else { e.push(Inst::Convert(i, ty), ty) }
            }
            Fuse::Clamp(lo, x, hi) => {
                let (lo, x, hi) = (e.read(lo, &el, &od), e.read(x, &el, &od), e.read(hi, &el, &od));
                let t = e.binary(BinaryOp::Max, lo, x);
                e.binary(BinaryOp::Min, t, hi)
            }
            Fuse::Select { dir, a, b, t, f } => {
                let (a, b, t, f) = (e.read(a, &el, &od), e.read(b, &el, &od), e.read(t, &el, &od), e.read(f, &el, &od));
                if let Some(&c) = absorbed_of.get(&n) {
                    absorbed.push(c);
                }
                e.push(Inst::Select { dir, a, b, t, f }, ty)
            }
        };
        e.regs.insert(out, r);
    }
    // Plain outputs first, then the reductions' (the kernel's output order).
    let (reduced, plain): (Vec<ValueId>, Vec<ValueId>) = outputs.into_iter().partition(|v| reductions.contains_key(v));
    let out: Vec<Reg> = plain.iter().map(|v| e.regs[v]).collect();
    let reduce = match geometry {
        Some((outer, red, inner)) if !reduced.is_empty() => {
            let outputs = reduced.iter().map(|v| reductions[v]).collect();
            Some(Reduction { outer, red, inner, outputs, ordered: false })
        }
        _ => None,
    };
    let outputs: Vec<ValueId> = plain.into_iter().chain(reduced).collect();
    let kernel = LoopKernel { in_tys: e.in_tys, inputs: e.access, insts: e.insts, outputs: out, reduce };
    Cluster { dtype, dims, len, nodes, absorbed, inputs: e.inputs, outputs, kernel }
}
