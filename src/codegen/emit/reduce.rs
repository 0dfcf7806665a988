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

/// Whether `red` vectorises across outputs at `lanes` lanes: the kept axes after the reduced
/// block (`inner`) hold a whole number of vectors, so `lanes` consecutive outputs read `lanes`
/// consecutive elements at every reduced position, and every combine has a vector form. Each
/// lane accumulates its output in element order, so float sums stay bit-identical to the
/// ordered ones.
pub(super) fn reduce_vectorizes_across(red: &Reduction, tys: &[Ty], lanes: i64) -> bool {
    lanes > 1
        && red.inner > 1
        && red.inner as i64 % lanes == 0
        && red.outputs.iter().all(|&(kind, r)| {
            let t = tys[r];
            match reduce_combine(kind, t) {
                Some(BinaryOp::Mul) if t.is_int() => t.bytes() > 1,
                Some(BinaryOp::Max | BinaryOp::Min) if t.is_int() => t.bytes() < 8,
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

/// The flat index of the first reduced element of output `j`: `(j div inner)·red·inner + j mod
/// inner` (`j·red` when `inner` is 1).
fn output_base(b: &mut FunctionBuilder, j: Value, red_n: i64, inner: i64) -> Value {
    if inner == 1 {
        return b.ins().imul_imm(j, red_n);
    }
    let o = b.ins().udiv_imm(j, inner);
    let n = b.ins().urem_imm(j, inner);
    let ob = b.ins().imul_imm(o, red_n.saturating_mul(inner));
    b.ins().iadd(ob, n)
}

/// One accumulator per reduction of `red`, `lanes` wide, set to the combine's identity.
fn identities(b: &mut FunctionBuilder, red: &Reduction, tys: &[Ty], ptr: Type, lanes: i64) -> Vec<Variable> {
    red.outputs
        .iter()
        .map(|&(kind, r)| {
            let t = tys[r].compute_ty();
            let v = b.declare_var(with_lanes(lane_ty(t), lanes));
            let init = Cg { b: &mut *b, lanes, ptr }.emit_const(t, reduce_identity(kind, tys[r]));
            b.def_var(v, init);
            v
        })
        .collect()
}

/// `while r < end { body(r); r += step }` over the variable `r` (unsigned compare); continues
/// in a new block after the loop.
fn counted_loop(
    b: &mut FunctionBuilder,
    r: Variable,
    end: i64,
    step: i64,
    mut body: impl FnMut(&mut FunctionBuilder, Value) -> Result<(), String>,
) -> Result<(), String> {
    let head = b.create_block();
    let body_block = b.create_block();
    let done = b.create_block();
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let rv = b.use_var(r);
    let c = b.ins().icmp_imm(IntCC::UnsignedLessThan, rv, end);
    b.ins().brif(c, body_block, &[], done, &[]);

    b.switch_to_block(body_block);
    let rv = b.use_var(r);
    body(b, rv)?;
    let next = b.ins().iadd_imm(rv, step);
    b.def_var(r, next);
    b.ins().jump(head, &[]);
    b.switch_to_block(done);
    Ok(())
}

/// The loop of reduced positions `r` from the variable's value to `red_n`, one at a time:
/// evaluates the body `lanes` wide at `base + r·inner` and combines into `accs`. Continues in a
/// new block.
#[allow(clippy::too_many_arguments)]
fn reduced_positions(
    b: &mut FunctionBuilder,
    (k, tys, setup): (&LoopKernel, &[Ty], &Setup),
    ptr: Type,
    lanes: i64,
    (r, red_n, inner): (Variable, i64, i64),
    base: Value,
    ops: &[(BinaryOp, Ty)],
    accs: &[Variable],
) -> Result<(), String> {
    counted_loop(b, r, red_n, 1, |b, rv| {
        let off = if inner == 1 { rv } else { b.ins().imul_imm(rv, inner) };
        let i = b.ins().iadd(base, off);
        accumulate(&mut Cg { b: &mut *b, lanes, ptr }, k, tys, setup, i, ops, accs)
    })
}

/// Stores the accumulators `accs` (`lanes` wide) of outputs from `j` on, each rounded once to
/// its type (halves accumulate in f32; stores take values of their type).
fn store_accs(
    b: &mut FunctionBuilder,
    setup: &Setup,
    first_out: usize,
    (ptr, lanes): (Type, i64),
    j: Value,
    ops: &[(BinaryOp, Ty)],
    accs: &[Variable],
) {
    for (n, &(_, t)) in ops.iter().enumerate() {
        let acc = b.use_var(accs[n]);
        let mut cg = Cg { b: &mut *b, lanes, ptr };
        let acc = cg.round(t, acc);
        let off = cg.b.ins().imul_imm(j, t.bytes() as i64);
        let addr = cg.b.ins().iadd(setup.out_ptrs[first_out + n], off);
        cg.store(t, acc, addr, false);
    }
}

/// Emits the loops of a kernel with a [`Reduction`] after the entry block's setup: `j` runs over
/// `start..end` output elements, `r` over the reduced extent (vectorised when `lanes > 1`, which
/// requires `inner == 1`: the reduced elements of one output are then contiguous). With
/// `across > 1` ([`reduce_vectorizes_across`]) the outputs from the first multiple of `across`
/// to the last are first computed `across` at a time (one vector accumulator per reduction, one
/// vector store), and the `j` loop does the outputs before and after them.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_reduce(
    b: &mut FunctionBuilder,
    k: &LoopKernel,
    red: &Reduction,
    tys: &[Ty],
    setup: &Setup,
    ptr: Type,
    (lanes, across): (i64, i64),
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

    // The outputs `vs..ve` computed `across` at a time (none without `across`).
    let (vs, ve) = if across > 1 {
        let up = b.ins().iadd_imm(start, across - 1);
        let vs = b.ins().band_imm(up, !(across - 1));
        let vs = b.ins().umin(vs, end);
        let down = b.ins().band_imm(end, !(across - 1));
        let ve = b.ins().umax(vs, down);
        build_across(b, (k, tys, setup), red, ptr, across, (vs, ve), &ops)?;
        (vs, ve)
    } else {
        (end, end)
    };

    let j = b.declare_var(ptr);
    b.def_var(j, start);
    let jhead = b.create_block();
    let jbody = b.create_block();
    let exit = b.create_block();
    b.ins().jump(jhead, &[]);
    b.switch_to_block(jhead);
    let jv = b.use_var(j);
    // Past the outputs done `across` at a time.
    let at_vs = b.ins().icmp(IntCC::Equal, jv, vs);
    let jv = b.ins().select(at_vs, ve, jv);
    b.def_var(j, jv);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, jv, end);
    b.ins().brif(c, jbody, &[], exit, &[]);

    b.switch_to_block(jbody);
    let jv = b.use_var(j);
    let base = output_base(b, jv, red_n, inner);
    let accs = identities(b, red, tys, ptr, 1);
    let r = b.declare_var(ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(r, zero);

    let unroll = unroll_for(k);
    let step = lanes * unroll;
    let vec_end = if lanes > 1 { (red_n / step) * step } else { 0 };
    if vec_end > 0 {
        // One vector accumulator per unrolled copy and reduction (independent dependency chains).
        let vaccs: Vec<Vec<Variable>> = (0..unroll).map(|_| identities(b, red, tys, ptr, lanes)).collect();
        counted_loop(b, r, vec_end, step, |b, rv| {
            let i0 = b.ins().iadd(base, rv);
            for (u, row) in vaccs.iter().enumerate() {
                let iu = b.ins().iadd_imm(i0, u as i64 * lanes);
                accumulate(&mut Cg { b: &mut *b, lanes, ptr }, k, tys, setup, iu, &ops, row)?;
            }
            Ok(())
        })?;
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

    // The reduced positions past the vector loop, one at a time.
    reduced_positions(b, (k, tys, setup), ptr, 1, (r, red_n, inner), base, &ops, &accs)?;
    let jv = b.use_var(j);
    store_accs(b, setup, n_plain, (ptr, 1), jv, &ops, &accs);
    let next = b.ins().iadd_imm(jv, 1);
    b.def_var(j, next);
    b.ins().jump(jhead, &[]);

    b.switch_to_block(exit);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    Ok(())
}

/// The outputs `vs..ve` (multiples of `lanes`) of [`build_reduce`], `lanes` at a time: output
/// vector j reads, at reduced position r, the `lanes` consecutive elements from
/// `(j div inner)·red·inner + j mod inner + r·inner` (the body evaluated there as a vector), and
/// stores its `lanes` accumulators with one vector store. Continues in a new block.
fn build_across(
    b: &mut FunctionBuilder,
    (k, tys, setup): (&LoopKernel, &[Ty], &Setup),
    red: &Reduction,
    ptr: Type,
    lanes: i64,
    (vs, ve): (Value, Value),
    ops: &[(BinaryOp, Ty)],
) -> Result<(), String> {
    let (red_n, inner) = (red.red as i64, red.inner as i64);
    let j = b.declare_var(ptr);
    b.def_var(j, vs);
    let head = b.create_block();
    let body = b.create_block();
    let done = b.create_block();
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let jv = b.use_var(j);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, jv, ve);
    b.ins().brif(c, body, &[], done, &[]);

    b.switch_to_block(body);
    let jv = b.use_var(j);
    let base = output_base(b, jv, red_n, inner);
    let accs = identities(b, red, tys, ptr, lanes);
    let r = b.declare_var(ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(r, zero);
    reduced_positions(b, (k, tys, setup), ptr, lanes, (r, red_n, inner), base, ops, &accs)?;
    let jv = b.use_var(j);
    store_accs(b, setup, k.outputs.len(), (ptr, lanes), jv, ops, &accs);
    let next = b.ins().iadd_imm(jv, lanes);
    b.def_var(j, next);
    b.ins().jump(head, &[]);

    b.switch_to_block(done);
    Ok(())
}
