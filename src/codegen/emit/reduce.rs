//! The reduction loop: accumulators over the reduced extent, vectorised when the reduced
//! elements are contiguous.

use super::*;

/// Whether every combine of `red` has a vector form at byte width `w`.
pub(super) fn reduce_vectorizes(red: &Reduction, tys: &[Ty]) -> bool {
    red.inner == 1
        && red.outputs.iter().all(|&(kind, r)| {
            let t = tys[r];
            let w = t.bytes();
            match reduce_combine(kind, t) {
                Some(BinaryOp::Add | BinaryOp::Mul) if t.is_float() => !red.ordered,
                Some(BinaryOp::Mul) if t.is_int() => w > 1,
                Some(BinaryOp::Max | BinaryOp::Min) if t.is_int() => w < 8,
                Some(_) => true,
                None => false,
            }
        })
}

/// Evaluates the body at `i` and combines each reduced register into its accumulator `accs[n]`
/// with `ops[n]` (op and element type).
pub(super) fn accumulate(
    cg: &mut Cg,
    k: &LoopKernel,
    tys: &[Ty],
    setup: &Setup,
    i: Value,
    ops: &[(BinaryOp, Ty)],
    accs: &[Variable],
) -> Result<(), String> {
    let regs = emit_body(cg, k, tys, setup, i)?;
    let reduced = k.reduce.as_ref().map(|r| r.outputs.as_slice()).unwrap_or_default();
    for (n, &(op, t)) in ops.iter().enumerate() {
        let acc = cg.b.use_var(accs[n]);
        let v = cg.binary(op, t.compute_ty(), acc, regs[reduced[n].1])?;
        cg.b.def_var(accs[n], v);
    }
    Ok(())
}

/// Emits the loops of a kernel with a [`Reduction`] after the entry block's setup: `j` runs over
/// `start..end` output elements, `r` over the reduced extent (vectorised when `lanes > 1`, which
/// requires `inner == 1`: the reduced elements of one output are then contiguous).
#[allow(clippy::too_many_arguments)]
pub(super) fn build_reduce(
    b: &mut FunctionBuilder,
    k: &LoopKernel,
    red: &Reduction,
    tys: &[Ty],
    setup: &Setup,
    ptr: Type,
    lanes: i64,
    (start, end): (Value, Value),
) -> Result<(), String> {
    let n_plain = k.outputs.len();
    let (red_n, inner) = (red.red as i64, red.inner as i64);
    let ops: Vec<(BinaryOp, Ty)> = red
        .outputs
        .iter()
        .map(|&(kind, r)| {
            let t = tys[r];
            reduce_combine(kind, t).map(|op| (op, t)).ok_or_else(|| format!("reduction {kind:?} of {t:?}"))
        })
        .collect::<Result<_, String>>()?;
    let identity = |cg: &mut Cg, n: usize| {
        let (kind, r) = red.outputs[n];
        cg.emit_const(tys[r].compute_ty(), reduce_identity(kind, tys[r]))
    };

    let j = b.declare_var(ptr);
    b.def_var(j, start);
    let jhead = b.create_block();
    let jbody = b.create_block();
    let exit = b.create_block();
    b.ins().jump(jhead, &[]);
    b.switch_to_block(jhead);
    let jv = b.use_var(j);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, jv, end);
    b.ins().brif(c, jbody, &[], exit, &[]);

    b.switch_to_block(jbody);
    let jv = b.use_var(j);
    // Flat index of the first reduced element of output j: (o·red)·inner + n.
    let base = if inner == 1 {
        b.ins().imul_imm(jv, red_n)
    } else {
        let o = b.ins().udiv_imm(jv, inner);
        let n = b.ins().urem_imm(jv, inner);
        let ob = b.ins().imul_imm(o, red_n.saturating_mul(inner));
        b.ins().iadd(ob, n)
    };
    let accs: Vec<Variable> = (0..ops.len())
        .map(|n| {
            let v = b.declare_var(lane_ty(ops[n].1.compute_ty()));
            let init = identity(&mut Cg { b: &mut *b, lanes: 1, ptr }, n);
            b.def_var(v, init);
            v
        })
        .collect();
    let r = b.declare_var(ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(r, zero);

    let unroll = unroll_for(k);
    let step = lanes * unroll;
    let vec_end = if lanes > 1 { (red_n / step) * step } else { 0 };
    if vec_end > 0 {
        // One vector accumulator per unrolled copy and reduction (independent dependency chains).
        let mut vaccs: Vec<Vec<Variable>> = vec![];
        for _ in 0..unroll {
            let mut row = vec![];
            for (n, &(_, t)) in ops.iter().enumerate() {
                let v = b.declare_var(with_lanes(lane_ty(t.compute_ty()), lanes));
                let init = identity(&mut Cg { b: &mut *b, lanes, ptr }, n);
                b.def_var(v, init);
                row.push(v);
            }
            vaccs.push(row);
        }
        let vhead = b.create_block();
        let vbody = b.create_block();
        let vdone = b.create_block();
        b.ins().jump(vhead, &[]);
        b.switch_to_block(vhead);
        let rv = b.use_var(r);
        let c = b.ins().icmp_imm(IntCC::UnsignedLessThan, rv, vec_end);
        b.ins().brif(c, vbody, &[], vdone, &[]);

        b.switch_to_block(vbody);
        let rv = b.use_var(r);
        let i0 = b.ins().iadd(base, rv);
        for (u, row) in vaccs.iter().enumerate() {
            let iu = b.ins().iadd_imm(i0, u as i64 * lanes);
            accumulate(&mut Cg { b: &mut *b, lanes, ptr }, k, tys, setup, iu, &ops, row)?;
        }
        let next = b.ins().iadd_imm(rv, step);
        b.def_var(r, next);
        b.ins().jump(vhead, &[]);

        b.switch_to_block(vdone);
        for (n, &(op, t)) in ops.iter().enumerate() {
            let mut v = b.use_var(vaccs[0][n]);
            for row in &vaccs[1..] {
                let w = b.use_var(row[n]);
                v = Cg { b: &mut *b, lanes, ptr }.binary(op, t.compute_ty(), v, w)?;
            }
            let mut acc = b.use_var(accs[n]);
            for l in 0..lanes {
                let x = b.ins().extractlane(v, l as u8);
                acc = Cg { b: &mut *b, lanes: 1, ptr }.binary(op, t.compute_ty(), acc, x)?;
            }
            b.def_var(accs[n], acc);
        }
    }

    let thead = b.create_block();
    let tbody = b.create_block();
    let store = b.create_block();
    b.ins().jump(thead, &[]);
    b.switch_to_block(thead);
    let rv = b.use_var(r);
    let c = b.ins().icmp_imm(IntCC::UnsignedLessThan, rv, red_n);
    b.ins().brif(c, tbody, &[], store, &[]);

    b.switch_to_block(tbody);
    let rv = b.use_var(r);
    let off = if inner == 1 { rv } else { b.ins().imul_imm(rv, inner) };
    let i = b.ins().iadd(base, off);
    accumulate(&mut Cg { b: &mut *b, lanes: 1, ptr }, k, tys, setup, i, &ops, &accs)?;
    let next = b.ins().iadd_imm(rv, 1);
    b.def_var(r, next);
    b.ins().jump(thead, &[]);

    b.switch_to_block(store);
    let jv = b.use_var(j);
    for (n, &(_, t)) in ops.iter().enumerate() {
        let acc = b.use_var(accs[n]);
        // Halves accumulate in f32: round once here (stores take values of their type).
        let acc = Cg { b: &mut *b, lanes: 1, ptr }.round(t, acc);
        let off = b.ins().imul_imm(jv, t.bytes() as i64);
        let addr = b.ins().iadd(setup.out_ptrs[n_plain + n], off);
        Cg { b: &mut *b, lanes: 1, ptr }.store(t, acc, addr, false);
    }
    let next = b.ins().iadd_imm(jv, 1);
    b.def_var(j, next);
    b.ins().jump(jhead, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    Ok(())
}
