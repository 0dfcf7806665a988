//! Compliance cases for compiling and executing: input checks, donation, repeated and concurrent
//! execution, output forms (ops.md §3.3, §3.6, §7 Exec).

use std::sync::Arc;

use super::*;
use crate::api::Executable;

fn compile_neg(b: &Arc<dyn Backend>) -> Result<Arc<dyn Executable>, String> {
    let builder = b.builder("neg");
    let f = builder.main();
    let x = f.parameter("neg_input", shape(DType::Float32, &[3])).map_err(|e| e.to_string())?;
    let y = f.neg(x).map_err(|e| e.to_string())?;
    f.return_(&[y]).map_err(|e| e.to_string())?;
    builder.compile().map_err(|e| format!("compile: {e}"))
}

/// Parameter F32 `[3]`; outputs Neg(x) and an I64 constant; the executable reports its
/// signature.
pub fn compile_and_execute(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32, Int64]);
    let builder = b.builder("basic");
    let f = builder.main();
    let build = || -> crate::Result<()> {
        let x = f.parameter("x", shape(DType::Float32, &[3]))?;
        let c = f.constant(&[7i64, -8], &[2])?;
        f.return_(&[f.neg(x)?, c])
    };
    build().map_err(|e| format!("build: {e}"))?;
    let exe = builder.compile().map_err(|e| format!("compile: {e}"))?;
    check(exe.input_names() == ["x"], || format!("input names {:?}", exe.input_names()))?;
    check(exe.input_shapes() == [shape(DType::Float32, &[3])], || format!("input shapes {:?}", exe.input_shapes()))?;
    let want_out = [shape(DType::Float32, &[3]), shape(DType::Int64, &[2])];
    check(exe.output_shapes() == want_out, || format!("output shapes {:?}", exe.output_shapes()))?;
    let out = exe.execute(&[&v(&[1f32, -2., 0.5])], &[]).map_err(|e| format!("execute: {e}"))?;
    check(out.len() == 2, || format!("{} outputs", out.len()))?;
    expect("neg", &out[0], &[3], &[-1f32, 2., -0.5])?;
    expect("constant", &out[1], &[2], &[7i64, -8])
}

/// Two inputs (or none) for a one-parameter function are an error.
pub fn wrong_number_of_parameters(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    let x = v(&[1f32, 2., 3.]);
    check(exe.execute(&[&x, &x], &[]).is_err(), || "2 inputs for 1 parameter accepted".into())?;
    check(exe.execute(&[], &[]).is_err(), || "0 inputs for 1 parameter accepted".into())
}

/// A wrong size (`[4]`) or dtype (U32) is an error that names the parameter.
pub fn incompatible_parameters(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    match exe.execute(&[&v(&[1f32, 2., 3., 4.])], &[]) {
        Ok(_) => return Err("shape [4] for parameter [3] accepted".into()),
        Err(e) => check(e.to_string().contains("neg_input"), || format!("error does not name the parameter: {e}"))?,
    }
    if has_dtype(b, DType::Uint32) {
        check(exe.execute(&[&v(&[1u32, 2, 3])], &[]).is_err(), || "U32 input for F32 parameter accepted".into())?;
    }
    check(exe.execute(&[&t(&[1f32, 2., 3.], &[1, 3])], &[]).is_err(), || "rank-2 input accepted".into())
}

/// A donated input cannot be used afterwards (an error, never garbage); finalizing it is fine;
/// the output is still right.
pub fn donation_invalidates_input(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    let x = v(&[1f32, 2., 3.]);
    let out = exe.execute(&[&x], &[true]).map_err(|e| format!("execute with donation: {e}"))?;
    expect("neg", &out[0], &[3], &[-1f32, -2., -3.])?;
    check(!x.is_live(), || "donated buffer is still live".into())?;
    check(x.to_vec::<f32>().is_err(), || "reading a donated buffer succeeded".into())?;
    check(exe.execute(&[&x], &[]).is_err(), || "executing with a donated buffer succeeded".into())?;
    x.finalize();
    x.finalize();
    expect("output after finalize", &out[0], &[3], &[-1f32, -2., -3.])
}

/// Without donation inputs are never overwritten and stay readable; outputs are fresh storage.
pub fn non_donated_inputs_untouched(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    let x = v(&[1f32, 2., 3.]);
    let out = exe.execute(&[&x], &[false]).map_err(|e| format!("execute: {e}"))?;
    expect("neg", &out[0], &[3], &[-1f32, -2., -3.])?;
    expect("input kept", &x, &[3], &[1f32, 2., 3.])?;
    check(out[0].data_ptr() != x.data_ptr(), || "output shares the input's storage without donation".into())
}

/// The same executable runs many times with different inputs.
pub fn execute_repeatedly(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    for i in 0..5 {
        let k = i as f32;
        let out = exe.execute(&[&v(&[k, k + 1., -k])], &[]).map_err(|e| format!("run {i}: {e}"))?;
        expect(&format!("run {i}"), &out[0], &[3], &[-k, -k - 1., k])?;
    }
    Ok(())
}

/// `Executable: Send + Sync`: four threads execute the same executable at once.
pub fn execute_from_threads(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let exe = compile_neg(b)?;
    let results: Option<Vec<CaseResult>> = std::thread::scope(|s| {
        let handles: std::io::Result<Vec<_>> = (0..4)
            .map(|i| {
                let exe = exe.clone();
                // Builder::spawn_scoped reports a platform without threads (wasm32-wasip1) as an
                // error instead of panicking.
                std::thread::Builder::new().spawn_scoped(s, move || -> CaseResult {
                    for j in 0..20 {
                        let k = (i * 100 + j) as f32;
                        let out = exe.execute(&[&v(&[k, 1., -k])], &[]).map_err(|e| e.to_string())?;
                        expect(&format!("thread {i} run {j}"), &out[0], &[3], &[-k, -1., k])?;
                    }
                    Ok(())
                })
            })
            .collect();
        let handles = handles.ok()?;
        Some(handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into()))).collect())
    });
    match results {
        Some(results) => results.into_iter().collect(),
        None => skip("this platform cannot start threads"),
    }
}

/// The same value returned twice, and a parameter returned directly.
pub fn duplicate_and_parameter_outputs(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let out = exec(b, &[v(&[1f32, 2.])], |f, p| {
        let y = f.neg(p[0])?;
        Ok(vec![y, y, p[0]])
    })?;
    expect("y", &out[0], &[2], &[-1f32, -2.])?;
    expect("y again", &out[1], &[2], &[-1f32, -2.])?;
    expect("parameter", &out[2], &[2], &[1f32, 2.])
}

/// A graph without parameters (constants only).
pub fn constant_only_graph(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Int32]);
    let out = exec1(b, &[], |f, _| f.add(f.constant(&[1i32, 2, 3], &[3])?, f.scalar(10i32)?))?;
    expect("constants", &out, &[3], &[11i32, 12, 13])
}

/// Compiling before `main` returned is an error.
pub fn compile_requires_return(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let builder = b.builder("no_return");
    let f = builder.main();
    let x = f.parameter("x", shape(DType::Float32, &[])).map_err(|e| e.to_string())?;
    f.neg(x).map_err(|e| e.to_string())?;
    check(builder.compile().is_err(), || "compile without return_ succeeded".into())
}

/// A value of another builder is rejected by op methods and by `return_`.
pub fn value_from_other_builder(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let b1 = b.builder("one");
    let b2 = b.builder("two");
    let x1 = b1.main().parameter("x", shape(DType::Float32, &[])).map_err(|e| e.to_string())?;
    let f2 = b2.main();
    check(f2.neg(x1).is_err(), || "op accepted a value of another builder".into())?;
    check(f2.return_(&[x1]).is_err(), || "return_ accepted a value of another builder".into())
}

/// Scalar and size-0 parameters.
pub fn empty_and_scalar_parameters(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Neg], [Float32]);
    let out = exec(b, &[sc(2f32), t::<f32>(&[], &[0, 2])], |f, p| Ok(vec![f.neg(p[0])?, f.neg(p[1])?]))?;
    expect("scalar", &out[0], &[], &[-2f32])?;
    expect::<f32>("empty", &out[1], &[0, 2], &[])
}
