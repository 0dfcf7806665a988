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
    accumulate_at(cg, k, tys, setup, (i, &[]), ops, accs)
}

/// [`accumulate`] with the element offsets of some strided inputs given ([`emit_body_at`]).
fn accumulate_at(
    cg: &mut Cg,
    k: &LoopKernel,
    tys: &[Ty],
    setup: &Setup,
    (i, offsets): (Value, &[Option<Value>]),
    ops: &[(BinaryOp, Ty)],
    accs: &[Variable],
) -> Result<(), String> {
    let regs = emit_body_at(cg, k, tys, setup, i, offsets)?;
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
///
/// Up to [`ACROSS_GROUP`] output vectors run together, each with its own accumulators: one
/// vector's sum is a chain of dependent adds, bound by their latency, and the element index was
/// divided out of the output index at every reduced position (a sum over 7×7 pixels of 1280
/// channels on an Intel Xeon, model 167, one thread: 17.6 µs one vector at a time, 4.8 µs four
/// at a time with the indices carried by the loop). The vectors past the last whole group run
/// one at a time.
fn build_across(
    b: &mut FunctionBuilder,
    (k, tys, setup): (&LoopKernel, &[Ty], &Setup),
    red: &Reduction,
    ptr: Type,
    lanes: i64,
    (vs, ve): (Value, Value),
    ops: &[(BinaryOp, Ty)],
) -> Result<(), String> {
    // Fewer vectors per group when there are several reductions (each needs its accumulators
    // in registers).
    let group = (ACROSS_GROUP / ops.len().max(1) as i64).max(1);
    // The groups: from vs to the last whole group (`lanes` and `group` are powers of two).
    let span = b.ins().isub(ve, vs);
    let whole = b.ins().band_imm(span, !(group * lanes - 1));
    let vg = b.ins().iadd(vs, whole);
    // The strided inputs whose offsets advance by a constant per reduced position.
    let (red_n, inner) = (red.red as i64, red.inner as i64);
    let steps: Vec<Option<i64>> = k.inputs.iter().map(|a| strided_step(a, red_n, inner)).collect();
    across_vectors(b, (k, tys, setup), red, (ptr, lanes), (group, &steps), (vs, vg), ops)?;
    if group > 1 {
        across_vectors(b, (k, tys, setup), red, (ptr, lanes), (1, &steps), (vg, ve), ops)?;
    }
    Ok(())
}

/// The constant change of a strided input's element offset from one reduced position to the
/// next, when there is one: the view's trailing axes from some axis `a + 1` on hold exactly
/// `inner` elements, so that a step of `inner` is a step of 1 along axis `a`, and axis `a`'s
/// extent is a multiple of `red`, so that an output's `red` steps never carry into the axes
/// before it (its first one is a multiple of `red`). A bias broadcast over the pixels of a
/// channels-last image (`[pixels, channels]`, strides `[0, 1]`, summed over the pixels) steps
/// by 0.
fn strided_step(a: &Access, red: i64, inner: i64) -> Option<i64> {
    let Access::Strided { dims, strides } = a else { return None };
    let mut tail = 1i64;
    for ax in (0..dims.len()).rev() {
        if tail == inner {
            return (red > 0 && dims[ax] % red == 0).then_some(strides[ax]);
        }
        tail = tail.checked_mul(dims[ax])?;
        if tail > inner {
            return None;
        }
    }
    None
}

/// Output vectors beside each other in [`build_across`].
const ACROSS_GROUP: i64 = 4;

/// The outputs `from..to` (a multiple of `group · lanes` of them) `group` vectors at a time, for
/// [`build_across`]. Each vector's element index is a loop variable advanced by `inner` per
/// reduced position (computed from the output index once, before the loop), and so is the offset
/// of each strided input with a step in `steps` ([`strided_step`]). Continues in a new block.
fn across_vectors(
    b: &mut FunctionBuilder,
    (k, tys, setup): (&LoopKernel, &[Ty], &Setup),
    red: &Reduction,
    (ptr, lanes): (Type, i64),
    (group, steps): (i64, &[Option<i64>]),
    (from, to): (Value, Value),
    ops: &[(BinaryOp, Ty)],
) -> Result<(), String> {
    let (red_n, inner) = (red.red as i64, red.inner as i64);
    let j = b.declare_var(ptr);
    b.def_var(j, from);
    let head = b.create_block();
    let body = b.create_block();
    let done = b.create_block();
    b.ins().jump(head, &[]);
    b.switch_to_block(head);
    let jv = b.use_var(j);
    let c = b.ins().icmp(IntCC::UnsignedLessThan, jv, to);
    b.ins().brif(c, body, &[], done, &[]);

    b.switch_to_block(body);
    let jv = b.use_var(j);
    // Per output vector: its element index and the element offsets of the strided inputs that
    // advance by a constant per reduced position, each a loop variable.
    let mut idx = Vec::new();
    let mut accs = Vec::new();
    for u in 0..group {
        let ju = b.ins().iadd_imm(jv, u * lanes);
        let base = output_base(b, ju, red_n, inner);
        let v = b.declare_var(ptr);
        b.def_var(v, base);
        let offs: Vec<Option<(Variable, i64)>> = k
            .inputs
            .iter()
            .zip(steps)
            .map(|(a, st)| match (a, st) {
                (Access::Strided { dims, strides }, Some(st)) => {
                    let o = b.declare_var(ptr);
                    let at = strided_offset(b, ptr, base, dims, strides);
                    b.def_var(o, at);
                    Some((o, *st))
                }
                _ => None,
            })
            .collect();
        idx.push((v, offs));
        accs.push(identities(b, red, tys, ptr, lanes));
    }
    let r = b.declare_var(ptr);
    let zero = b.ins().iconst(ptr, 0);
    b.def_var(r, zero);
    counted_loop(b, r, red_n, 1, |b, _| {
        for ((v, offs), row) in idx.iter().zip(&accs) {
            let i = b.use_var(*v);
            let at: Vec<Option<Value>> = offs.iter().map(|o| o.map(|(o, _)| b.use_var(o))).collect();
            accumulate_at(&mut Cg { b: &mut *b, lanes, ptr }, k, tys, setup, (i, &at), ops, row)?;
            let next = b.ins().iadd_imm(i, inner);
            b.def_var(*v, next);
            for (&(o, st), x) in offs.iter().flatten().zip(at.into_iter().flatten()) {
                let next = b.ins().iadd_imm(x, st);
                b.def_var(o, next);
            }
        }
        Ok(())
    })?;
    let jv = b.use_var(j);
    for (u, row) in accs.iter().enumerate() {
        let ju = b.ins().iadd_imm(jv, u as i64 * lanes);
        store_accs(b, setup, k.outputs.len(), (ptr, lanes), ju, ops, row);
    }
    let next = b.ins().iadd_imm(jv, group * lanes);
    b.def_var(j, next);
    b.ins().jump(head, &[]);

    b.switch_to_block(done);
    Ok(())
}
