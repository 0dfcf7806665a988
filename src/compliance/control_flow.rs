//! Compliance cases for functions, closures, Call, While, If, Sort (ops.md §3.5, §4.11), the
//! barriers (§4.12) and batch norm (§4.9).

use std::sync::Arc;

use super::*;

fn scalar_i32(f: &Function, name: &str) -> crate::Result<Value> {
    f.parameter(name, shape(DType::Int32, &[]))
}

/// The `functions` capability flag decides whether closures can be made.
pub fn functions_capability(b: &Arc<dyn Backend>) -> CaseResult {
    let builder = b.builder("caps");
    let main = builder.main();
    let closure = main.closure();
    if b.capabilities().functions {
        check(closure.is_ok(), || format!("functions = true but closure() failed: {:?}", closure.err()))
    } else {
        check(closure.is_err(), || "functions = false but closure() succeeded".to_string())?;
        skip("backend does not support functions")
    }
}

/// A closure's parent is the function it was made from (two levels); closures have no name.
pub fn closure_parent_links(b: &Arc<dyn Backend>) -> CaseResult {
    if !b.capabilities().functions {
        return skip("no functions");
    }
    let builder = b.builder("closures");
    let main = builder.main();
    check(main.name() == "main", || format!("main is named {:?}", main.name()))?;
    check(main.parent().is_none(), || "main has a parent".into())?;
    let c1 = main.closure().map_err(|e| e.to_string())?;
    let c2 = c1.closure().map_err(|e| e.to_string())?;
    check(c1.name().is_empty(), || format!("closure named {:?}", c1.name()))?;
    check(c1.parent().map(|p| p.id()) == Some(main.id()), || "closure's parent is not main".into())?;
    check(c2.parent().map(|p| p.id()) == Some(c1.id()), || "nested closure's parent is not the closure".into())
}

/// `new_function("my_function")` has that name; empty, "main" and duplicate names are rejected.
pub fn named_function(b: &Arc<dyn Backend>) -> CaseResult {
    if !b.capabilities().functions {
        return skip("no functions");
    }
    let builder = b.builder("named");
    let f = builder.new_function("my_function").map_err(|e| e.to_string())?;
    check(f.name() == "my_function", || format!("name {:?}", f.name()))?;
    check(builder.new_function("my_function").is_err(), || "duplicate name accepted".into())?;
    check(builder.new_function("main").is_err(), || "\"main\" accepted".into())?;
    check(builder.new_function("").is_err(), || "empty name accepted".into())
}

/// Call a named function `x·2+1` twice: `[1,2,3]` → `[7,11,15]`.
pub fn call_function(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Call, Mul, Add], [Float32]);
    let builder = b.builder("call");
    let g = builder.new_function("affine").map_err(|e| e.to_string())?;
    let run = || -> crate::Result<()> {
        let x = g.parameter("x", shape(DType::Float32, &[3]))?;
        let two = g.scalar(2f32)?;
        let one = g.scalar(1f32)?;
        let y = g.add(g.mul(x, two)?, one)?;
        g.return_(&[y])?;
        let main = builder.main();
        let p = main.parameter("p", shape(DType::Float32, &[3]))?;
        let a = main.call(&g, &[p])?;
        let c = main.call(&g, &a)?;
        main.return_(&c)
    };
    run().map_err(|e| format!("build: {e}"))?;
    let exe = builder.compile().map_err(|e| format!("compile: {e}"))?;
    let out = exe.execute(&[&v(&[1f32, 2., 3.])], &[]).map_err(|e| format!("execute: {e}"))?;
    expect("f(f(x))", &out[0], &[3], &[7f32, 11., 15.])
}

fn build_and_run(
    b: &Arc<dyn Backend>,
    inputs: &[Buffer],
    build: impl FnOnce(&crate::Builder) -> crate::Result<()>,
) -> Result<Vec<Buffer>, String> {
    let builder = b.builder("control");
    build(&builder).map_err(|e| format!("build: {e}"))?;
    let exe = builder.compile().map_err(|e| format!("compile: {e}"))?;
    let refs: Vec<&Buffer> = inputs.iter().collect();
    exe.execute(&refs, &[]).map_err(|e| format!("execute: {e}"))
}

/// A called function with two inputs and two outputs of different dtypes.
pub fn call_multiple_outputs(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Call, Add, Sub, ConvertDType], [Float32, Int32]);
    let out = build_and_run(b, &[v(&[5f32, 1.]), v(&[2f32, 3.])], |builder| {
        let g = builder.new_function("sum_diff")?;
        let a = g.parameter("a", shape(DType::Float32, &[2]))?;
        let c = g.parameter("c", shape(DType::Float32, &[2]))?;
        let d = g.convert_dtype(g.sub(a, c)?, DType::Int32)?;
        g.return_(&[g.add(a, c)?, d])?;
        let main = builder.main();
        let x = main.parameter("x", shape(DType::Float32, &[2]))?;
        let y = main.parameter("y", shape(DType::Float32, &[2]))?;
        let r = main.call(&g, &[x, y])?;
        main.return_(&r)
    })?;
    expect("sum", &out[0], &[2], &[7f32, 4.])?;
    expect("diff", &out[1], &[2], &[3i32, -2])
}

/// Calling with mismatched input shapes, calling a closure, or an unreturned function fails.
pub fn call_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Call], [Float32]);
    let builder = b.builder("call_errors");
    let g = builder.new_function("g").map_err(|e| e.to_string())?;
    let main = builder.main();
    let p = main.parameter("p", shape(DType::Float32, &[2])).map_err(|e| e.to_string())?;
    check(main.call(&g, &[p]).is_err(), || "calling an unreturned function succeeded".into())?;
    let x = g.parameter("x", shape(DType::Float32, &[3])).map_err(|e| e.to_string())?;
    g.return_(&[x]).map_err(|e| e.to_string())?;
    check(main.call(&g, &[p]).is_err(), || "call with shape [2] for param [3] succeeded".into())?;
    let c = main.closure().map_err(|e| e.to_string())?;
    let cx = c.parameter("cx", shape(DType::Float32, &[2])).map_err(|e| e.to_string())?;
    c.return_(&[cx]).map_err(|e| e.to_string())?;
    check(main.call(&c, &[p]).is_err(), || "calling a closure succeeded".into())
}

/// While: state (i, acc) with `i < 10`, body `(i+1, acc+i)` → (10, 45).
pub fn while_counter(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [While, Add, LessThan], [Int32, Bool]);
    for (init, want) in [((0, 0), (10, 45)), ((7, 100), (10, 124))] {
        let out = build_and_run(b, &[sc(init.0), sc(init.1)], |builder| {
            let main = builder.main();
            let i0 = scalar_i32(&main, "i")?;
            let a0 = scalar_i32(&main, "acc")?;
            let cond = main.closure()?;
            let ci = scalar_i32(&cond, "i")?;
            let _ca = scalar_i32(&cond, "acc")?;
            cond.return_(&[cond.less_than(ci, cond.scalar(10i32)?)?])?;
            let body = main.closure()?;
            let bi = scalar_i32(&body, "i")?;
            let ba = scalar_i32(&body, "acc")?;
            body.return_(&[body.add(bi, body.scalar(1i32)?)?, body.add(ba, bi)?])?;
            let r = main.while_(&cond, &body, &[i0, a0])?;
            main.return_(&r)
        })?;
        expect("i", &out[0], &[], &[want.0])?;
        expect("acc", &out[1], &[], &[want.1])?;
    }
    Ok(())
}

/// While whose condition is false at the start returns the initial state.
pub fn while_false_at_start(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [While, Add, LessThan], [Int32, Bool, Float32]);
    let out = build_and_run(b, &[sc(20i32), v(&[1.5f32, -2.])], |builder| {
        let main = builder.main();
        let i0 = scalar_i32(&main, "i")?;
        let x0 = main.parameter("x", shape(DType::Float32, &[2]))?;
        let cond = main.closure()?;
        let ci = scalar_i32(&cond, "i")?;
        let _cx = cond.parameter("x", shape(DType::Float32, &[2]))?;
        cond.return_(&[cond.less_than(ci, cond.scalar(10i32)?)?])?;
        let body = main.closure()?;
        let bi = scalar_i32(&body, "i")?;
        let bx = body.parameter("x", shape(DType::Float32, &[2]))?;
        body.return_(&[body.add(bi, body.scalar(1i32)?)?, body.add(bx, bx)?])?;
        let r = main.while_(&cond, &body, &[i0, x0])?;
        main.return_(&r)
    })?;
    expect("i", &out[0], &[], &[20i32])?;
    expect("x", &out[1], &[2], &[1.5f32, -2.])
}

/// While closures capture values of `main`: x += step while max(x) < limit → `[5,10]`.
pub fn while_captures_outer_value(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [While, Add, LessThan, ReduceMax], [Float32, Bool]);
    let out = build_and_run(b, &[v(&[0f32, 0.]), v(&[1f32, 2.]), sc(10f32)], |builder| {
        let main = builder.main();
        let x0 = main.parameter("x", shape(DType::Float32, &[2]))?;
        let step = main.parameter("step", shape(DType::Float32, &[2]))?;
        let limit = main.parameter("limit", shape(DType::Float32, &[]))?;
        let cond = main.closure()?;
        let cx = cond.parameter("x", shape(DType::Float32, &[2]))?;
        cond.return_(&[cond.less_than(cond.reduce_max(cx, &[])?, limit)?])?;
        let body = main.closure()?;
        let bx = body.parameter("x", shape(DType::Float32, &[2]))?;
        body.return_(&[body.add(bx, step)?])?;
        let r = main.while_(&cond, &body, &[x0])?;
        main.return_(&r)
    })?;
    expect("x", &out[0], &[2], &[5f32, 10.])
}

/// If picks a branch by the runtime predicate; branches capture values of `main`. The same
/// executable runs with both predicates.
pub fn if_branches(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [If, Mul, Add], [Float32, Bool]);
    let builder = b.builder("if");
    let build = || -> crate::Result<()> {
        let main = builder.main();
        let pred = main.parameter("pred", shape(DType::Bool, &[]))?;
        let a = main.parameter("a", shape(DType::Float32, &[2]))?;
        let t_ = main.closure()?;
        t_.return_(&[t_.mul(a, t_.scalar(2f32)?)?])?;
        let e = main.closure()?;
        e.return_(&[e.add(a, e.scalar(1f32)?)?])?;
        let r = main.if_(pred, &t_, &e)?;
        main.return_(&r)
    };
    build().map_err(|e| format!("build: {e}"))?;
    let exe = builder.compile().map_err(|e| format!("compile: {e}"))?;
    let a = v(&[3f32, -1.]);
    let out = exe.execute(&[&sc(true), &a], &[]).map_err(|e| format!("execute: {e}"))?;
    expect("then", &out[0], &[2], &[6f32, -2.])?;
    let out = exe.execute(&[&sc(false), &a], &[]).map_err(|e| format!("execute: {e}"))?;
    expect("else", &out[0], &[2], &[4f32, 0.])
}

/// If with two outputs of different dtypes.
pub fn if_multiple_outputs_and_captures(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [If, Neg], [Float32, Bool, Int32]);
    for (pred, want_x, want_n) in [(true, -2.5f32, 1i32), (false, 2.5, 2)] {
        let out = build_and_run(b, &[sc(pred), sc(2.5f32)], |builder| {
            let main = builder.main();
            let p = main.parameter("pred", shape(DType::Bool, &[]))?;
            let x = main.parameter("x", shape(DType::Float32, &[]))?;
            let t_ = main.closure()?;
            t_.return_(&[t_.neg(x)?, t_.scalar(1i32)?])?;
            let e = main.closure()?;
            e.return_(&[x, e.scalar(2i32)?])?;
            let r = main.if_(p, &t_, &e)?;
            main.return_(&r)
        })?;
        expect("x", &out[0], &[], &[want_x])?;
        expect("n", &out[1], &[], &[want_n])?;
    }
    Ok(())
}

/// An If nested in a While body; its branches capture a value of `main` (a grandparent):
/// acc = 1; for i in 0..4: acc = if i < 2 { acc + x } else { acc · x } → 63 for x = 3.
pub fn nested_closure_capture(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [While, If, Add, Mul, LessThan], [Float32, Int32, Bool]);
    let out = build_and_run(b, &[sc(3f32), sc(4i32)], |builder| {
        let main = builder.main();
        let x = main.parameter("x", shape(DType::Float32, &[]))?;
        let n = scalar_i32(&main, "n")?;
        let cond = main.closure()?;
        let ci = scalar_i32(&cond, "i")?;
        let _ca = cond.parameter("acc", shape(DType::Float32, &[]))?;
        cond.return_(&[cond.less_than(ci, n)?])?;
        let body = main.closure()?;
        let bi = scalar_i32(&body, "i")?;
        let ba = body.parameter("acc", shape(DType::Float32, &[]))?;
        let pred = body.less_than(bi, body.scalar(2i32)?)?;
        let t_ = body.closure()?;
        t_.return_(&[t_.add(ba, x)?])?;
        let e = body.closure()?;
        e.return_(&[e.mul(ba, x)?])?;
        let acc = body.if_(pred, &t_, &e)?;
        body.return_(&[body.add(bi, body.scalar(1i32)?)?, acc[0]])?;
        let init = [main.scalar(0i32)?, main.scalar(1f32)?];
        let r = main.while_(&cond, &body, &init)?;
        main.return_(&r)
    })?;
    expect("i", &out[0], &[], &[4i32])?;
    expect("acc", &out[1], &[], &[63f32])
}

/// Builds a comparator closure with 2N scalar params of the given dtypes (interleaved lhs/rhs)
/// and returns `cmp(params)`.
fn comparator(
    main: &Function,
    dtypes: &[DType],
    cmp: impl FnOnce(&Function, &[Value]) -> crate::Result<Value>,
) -> crate::Result<Function> {
    let c = main.closure()?;
    let mut ps = Vec::new();
    for (i, &d) in dtypes.iter().enumerate() {
        ps.push(c.parameter(&format!("lhs{i}"), shape(d, &[]))?);
        ps.push(c.parameter(&format!("rhs{i}"), shape(d, &[]))?);
    }
    let r = cmp(&c, &ps)?;
    c.return_(&[r])?;
    Ok(c)
}

fn sort_run(
    b: &Arc<dyn Backend>,
    inputs: &[Buffer],
    axis: i64,
    stable: bool,
    cmp: impl FnOnce(&Function, &[Value]) -> crate::Result<Value>,
) -> Result<Vec<Buffer>, String> {
    let dtypes: Vec<DType> = inputs.iter().map(|x| x.dtype()).collect();
    exec(b, inputs, |f, p| {
        let c = comparator(f, &dtypes, cmp)?;
        f.sort(&c, axis, stable, p)
    })
}

/// Sort F32 ascending with a `<` comparator.
pub fn sort_f32(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThan], [Float32, Bool]);
    let out = sort_run(b, &[v(&[3f32, 1., 2., -1.])], 0, false, |c, p| c.less_than(p[0], p[1]))?;
    expect("ascending", &out[0], &[4], &[-1f32, 1., 2., 3.])
}

/// Sort I32 descending with a `>` comparator.
pub fn sort_descending_comparator(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, GreaterThan], [Int32, Bool]);
    let out = sort_run(b, &[v(&[3i32, 1, 2, -1, 2])], 0, true, |c, p| c.greater_than(p[0], p[1]))?;
    expect("descending", &out[0], &[5], &[3i32, 2, 2, 1, -1])
}

/// A stable sort keeps equal keys in input order (payload permuted alongside).
pub fn sort_stable_ties(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThan], [Int32, Bool]);
    let ins = [v(&[2i32, 1, 2, 1, 0]), v(&[0i32, 1, 2, 3, 4])];
    let out = sort_run(b, &ins, 0, true, |c, p| c.less_than(p[0], p[1]))?;
    expect("keys", &out[0], &[5], &[0i32, 1, 1, 2, 2])?;
    expect("payload", &out[1], &[5], &[4i32, 1, 3, 0, 2])
}

/// Two operands of different dtypes sorted by the second: the comparator's parameters are
/// interleaved, so `p2 < p3` compares the second operand (§9).
pub fn sort_multi_operand_by_second(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThan], [Int32, Float32, Bool]);
    let ins = [v(&[10i32, 20, 30]), v(&[3f32, 1., 2.])];
    let out = sort_run(b, &ins, 0, true, |c, p| c.less_than(p[2], p[3]))?;
    expect("a", &out[0], &[3], &[20i32, 30, 10])?;
    expect("b", &out[1], &[3], &[1f32, 2., 3.])
}

/// Each lane along the axis sorts independently: axis 1, axis −1 and axis 0 of 2-D inputs.
pub fn sort_2d_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThan], [Float32, Bool]);
    let x = || vec![t(&[3f32, 1., 2., 9., 7., 8.], &[2, 3])];
    for axis in [1, -1] {
        let out = sort_run(b, &x(), axis, false, |c, p| c.less_than(p[0], p[1]))?;
        expect(&format!("axis {axis}"), &out[0], &[2, 3], &[1f32, 2., 3., 7., 8., 9.])?;
    }
    let out = sort_run(b, &[t(&[3f32, 1., 2., 4.], &[2, 2])], 0, false, |c, p| c.less_than(p[0], p[1]))?;
    expect("axis 0", &out[0], &[2, 2], &[2f32, 1., 3., 4.])
}

/// Sorting with a TotalOrder comparator: `[0,−0,NaN,−NaN,1,−Inf,−0]` →
/// `[−NaN,−Inf,−0,−0,0,1,NaN]` (bits, stable).
pub fn sort_total_order_nan_and_zero(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Sort, LessThanTotalOrder], [Float32, Bool]);
    let nan = f32::from_bits(0x7FC0_0000);
    let neg_nan = f32::from_bits(0xFFC0_0000);
    let inf = f32::INFINITY;
    let x = [0.0f32, -0.0, nan, neg_nan, 1., -inf, -0.0];
    let out = sort_run(b, &[v(&x)], 0, true, |c, p| c.less_than_total_order(p[0], p[1]))?;
    expect_bits("total order", &out[0], &[7], &[neg_nan, -inf, -0.0, -0.0, 0.0, 1., nan])
}

/// A closure may not use values of another builder or of a sibling closure.
pub fn closure_foreign_value_error(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    if !b.capabilities().functions {
        return skip("no functions");
    }
    let other = b.builder("other");
    let ov = other.main().parameter("o", shape(DType::Float32, &[])).map_err(|e| e.to_string())?;
    let builder = b.builder("foreign");
    let main = builder.main();
    let c1 = main.closure().map_err(|e| e.to_string())?;
    check(c1.neg(ov).is_err(), || "value of another builder accepted".into())?;
    let c2 = main.closure().map_err(|e| e.to_string())?;
    let x2 = c2.parameter("x", shape(DType::Float32, &[])).map_err(|e| e.to_string())?;
    check(c1.neg(x2).is_err(), || "value of a sibling closure accepted".into())?;
    let m = main.parameter("m", shape(DType::Float32, &[])).map_err(|e| e.to_string())?;
    check(c1.neg(m).is_ok(), || "value of the parent rejected".into())
}

/// OptimizationBarrier is the identity on one or several values of any dtypes.
pub fn barriers_optimization(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [OptimizationBarrier], [Float32, Int32]);
    let out = exec(b, &[v(&[1.5f32, -2.])], |f, p| f.optimization_barrier(&[p[0]]))?;
    expect("one", &out[0], &[2], &[1.5f32, -2.])?;
    let out = exec(b, &[v(&[1.5f32]), t(&[7i32, 8, 9, 10], &[2, 2])], |f, p| f.optimization_barrier(&[p[0], p[1]]))?;
    expect("two f32", &out[0], &[1], &[1.5f32])?;
    expect("two i32", &out[1], &[2, 2], &[7i32, 8, 9, 10])
}

/// SchedulingBarrier returns its operand; dependencies of the same and of other dtypes.
pub fn barriers_scheduling(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SchedulingBarrier], [Float32, Int32, Bool]);
    let out = exec1(b, &[v(&[1f32, 2.]), v(&[3f32])], |f, p| f.scheduling_barrier(p[0], &[p[1]]))?;
    expect("same dtype dep", &out, &[2], &[1f32, 2.])?;
    let out =
        exec1(b, &[v(&[1f32, 2.]), v(&[5i32, 6, 7]), sc(true)], |f, p| f.scheduling_barrier(p[0], &[p[1], p[2]]))?;
    expect("other dtype deps", &out, &[2], &[1f32, 2.])
}

/// BatchNormForInference: `(x−mean)·rsqrt(var+eps)·scale+offset` along feature axis 1:
/// `[[1,2],[3,4]]`, scale `[1,2]`, offset `[0,1]`, mean `[2,3]`, var `[1,4]`, eps 0 →
/// `[[−1,0],[1,2]]`.
pub fn batch_norm_inference(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BatchNormForInference], [Float32]);
    let ins = [t(&[1f32, 2., 3., 4.], &[2, 2]), v(&[1f32, 2.]), v(&[0f32, 1.]), v(&[2f32, 3.]), v(&[1f32, 4.])];
    let out = exec1(b, &ins, |f, p| f.batch_norm_inference(p[0], p[1], p[2], p[3], p[4], 0.0, 1))?;
    expect_close::<f32>("inference", &out, &[2, 2], &[-1., 0., 1., 2.], 1e-6, 0.0)
}

/// BatchNormForTraining: x `[[1,2],[3,6]]` (feature axis 1), scale `[2,1]`, offset `[0,10]`,
/// eps 0 → normalized `[[−2,9],[2,11]]`, mean `[2,4]`, biased variance `[1,4]`.
pub fn batch_norm_training(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BatchNormForTraining], [Float32]);
    let ins = [t(&[1f32, 2., 3., 6.], &[2, 2]), v(&[2f32, 1.]), v(&[0f32, 10.])];
    let out = exec(b, &ins, |f, p| {
        let (y, m, var) = f.batch_norm_training(p[0], p[1], p[2], 0.0, 1)?;
        Ok(vec![y, m, var])
    })?;
    expect_close::<f32>("normalized", &out[0], &[2, 2], &[-2., 9., 2., 11.], 1e-6, 0.0)?;
    expect_close::<f32>("mean", &out[1], &[2], &[2., 4.], 1e-6, 0.0)?;
    expect_close::<f32>("variance", &out[2], &[2], &[1., 4.], 1e-6, 0.0)
}

/// BatchNormGradient for x `[0,1,2]` (shape `[3,1]`, feature axis 1), scale 2, mean 1,
/// var 2/3, grad `[1,0,0]`, eps 0: grad_x = 2·√1.5·[1/6,−1/3,1/6], grad_scale = −√1.5,
/// grad_offset = 1.
pub fn batch_norm_gradient(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BatchNormGradient], [Float32]);
    let ins = [t(&[0f32, 1., 2.], &[3, 1]), v(&[2f32]), v(&[1f32]), v(&[2. / 3f32]), t(&[1f32, 0., 0.], &[3, 1])];
    let out = exec(b, &ins, |f, p| {
        let (gx, gs, go) = f.batch_norm_gradient(p[0], p[1], p[2], p[3], p[4], 0.0, 1)?;
        Ok(vec![gx, gs, go])
    })?;
    let r = 1.5f64.sqrt();
    expect_close::<f32>("grad_x", &out[0], &[3, 1], &[2. * r / 6., -2. * r / 3., 2. * r / 6.], 1e-5, 1e-5)?;
    expect_close::<f32>("grad_scale", &out[1], &[1], &[-r], 1e-5, 1e-5)?;
    expect_close::<f32>("grad_offset", &out[2], &[1], &[1.], 1e-6, 0.0)
}
