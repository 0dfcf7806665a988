//! Quickstart: build a small model (a dense layer with bias and GELU, then a softmax) through the
//! API, compile it, execute it on a few inputs, and print the outputs and the IR text.
//!
//! Run with `cargo run --example quickstart` (pick a backend with e.g.
//! `TENSORJIT_BACKEND=interp cargo run --example quickstart`).

use tensorjit::api::DotConfig;
use tensorjit::{Buffer, DType, Function, Result, Shape, Value};

/// GELU through the fused op, or its exact decomposition `x/2 · (1 + erf(x/√2))` when the
/// backend does not provide the fused op (it answers NotImplemented).
fn gelu(f: &Function, x: Value) -> Result<Value> {
    match f.fused_gelu(x, true) {
        Err(e) if e.is_not_implemented() => {
            let shape = f.shape(x)?;
            let c = |v: f32| -> Result<Value> { f.broadcast_in_dim(f.scalar(v)?, &shape, &[]) };
            let erf = f.erf(f.mul(x, c(std::f32::consts::FRAC_1_SQRT_2)?)?)?;
            let one_plus = f.add(erf, c(1.0)?)?;
            f.mul(f.mul(x, c(0.5)?)?, one_plus)
        }
        other => other,
    }
}

/// Softmax along the last axis of a rank-2 value, fused or decomposed
/// (`exp(x − max) / Σ exp(x − max)`).
fn softmax(f: &Function, x: Value) -> Result<Value> {
    match f.fused_softmax(x, 1) {
        Err(e) if e.is_not_implemented() => {
            let shape = f.shape(x)?;
            let max = f.broadcast_in_dim(f.reduce_max(x, &[1])?, &shape, &[0])?;
            let e = f.exp(f.sub(x, max)?)?;
            let sum = f.broadcast_in_dim(f.reduce_sum(e, &[1])?, &shape, &[0])?;
            f.div(e, sum)
        }
        other => other,
    }
}

fn main() -> Result<()> {
    let backend = tensorjit::new()?;
    println!("backend: {}\n", backend.description());

    // y = softmax(gelu(x · W + b)) with x: [2, 4], W: [4, 3], b: [3].
    let builder = backend.builder("quickstart");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[2, 4]))?;
    #[rustfmt::skip]
    let w = f.constant(&[
        0.5f32, -0.25, 1.0,
        0.75, 0.5, -0.5,
        -1.0, 0.25, 0.5,
        0.25, 1.0, 0.0,
    ], &[4, 3])?;
    let b = f.constant(&[0.1f32, -0.2, 0.3], &[3])?;
    let h = f.dot_general(x, &[1], &[], w, &[0], &[], DotConfig::default())?;
    let bias = f.broadcast_in_dim(b, &Shape::new(DType::Float32, &[2, 3]), &[1])?;
    let h = f.add(h, bias)?;
    let g = gelu(&f, h)?;
    let y = softmax(&f, g)?;
    f.return_(&[y])?;

    println!("IR text:\n{}", tensorjit::ir::text::print_module(&builder.module()));
    let exe = builder.compile()?;

    let inputs: [[f32; 8]; 3] =
        [[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], [0.5, -1.0, 2.0, 0.25, -0.5, 0.5, 1.5, -2.0], [0.0; 8]];
    for (i, data) in inputs.iter().enumerate() {
        let xb = Buffer::from_slice(data, &[2, 4])?;
        let out = exe.execute(&[&xb], &[])?;
        let probs = out[0].to_vec::<f32>()?;
        println!("input {i}: x = {data:?}");
        for (r, row) in probs.chunks(3).enumerate() {
            let sum: f32 = row.iter().sum();
            println!("  softmax row {r}: {row:.5?} (sum {sum:.6})");
        }
    }
    Ok(())
}
