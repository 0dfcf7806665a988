//! The measured ULP error of the JIT's polynomial transcendentals against an f64 reference, over
//! the whole input range including special values (the figures in docs/jit-math.md).

use tensorjit::ir::op::UnaryOp;
use tensorjit::jit;
use tensorjit::lower::{Access, ElemTy, Inst, LoopKernel};

fn run_f32(k: &LoopKernel, inputs: &[&[f32]], n: usize) -> Vec<Vec<f32>> {
    let c = jit::compile(k).expect("compile");
    let mut outs: Vec<Vec<f32>> = k.outputs.iter().map(|_| vec![0.0; n]).collect();
    let mut ptrs: Vec<*mut u8> = inputs.iter().map(|s| s.as_ptr() as *mut u8).collect();
    ptrs.extend(outs.iter_mut().map(|o| o.as_mut_ptr() as *mut u8));
    // SAFETY: every input slice has n elements (or 1 for Scalar inputs), outputs have n.
    unsafe { c.run(&ptrs, 0, n) };
    outs
}

/// Distance in units in the last place between two f32 (0 when both are the same NaN class).
fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a == b {
        return 0;
    }
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        if i < 0 { i64::from(i32::MIN) - i64::from(i) } else { i64::from(i) }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Inputs spanning the whole f32 range: specials, a dense grid near 0 and a log-spaced sweep.
fn sweep() -> Vec<f32> {
    let mut v = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE, f32::MAX, f32::MIN];
    for i in -20000..=20000 {
        v.push(i as f32 * 0.005);
    }
    let mut x = 1e-30f32;
    while x < 3e38 {
        v.push(x);
        v.push(-x);
        x *= 1.0137;
    }
    v
}

fn max_ulp(op: UnaryOp, reference: fn(f64) -> f64) -> (u64, f32) {
    let k = LoopKernel::elementwise(ElemTy::F32, vec![Access::Full], vec![Inst::Load(0), Inst::Unary(op, 0)], vec![1]);
    let xs = sweep();
    let out = run_f32(&k, &[&xs], xs.len());
    let mut worst = (0, 0.0);
    for (i, &x) in xs.iter().enumerate() {
        let want = reference(x as f64) as f32;
        // Results in the subnormal range may be flushed to zero (§9 subnormals).
        if want != 0.0 && want.abs() < f32::MIN_POSITIVE && out[0][i] == 0.0 {
            continue;
        }
        let u = ulps(out[0][i], want);
        if u > worst.0 {
            worst = (u, x);
        }
    }
    worst
}

#[test]
fn exp_error_is_bounded() {
    let (u, at) = max_ulp(UnaryOp::Exp, f64::exp);
    println!("exp: max {u} ulp at x = {at}");
    assert!(u <= 2, "exp: {u} ulp at {at}");
}

#[test]
fn tanh_error_is_bounded() {
    let (u, at) = max_ulp(UnaryOp::Tanh, f64::tanh);
    println!("tanh: max {u} ulp at x = {at}");
    assert!(u <= 4, "tanh: {u} ulp at {at}");
}

#[test]
fn logistic_error_is_bounded() {
    let (u, at) = max_ulp(UnaryOp::Logistic, |x| 1.0 / (1.0 + (-x).exp()));
    println!("logistic: max {u} ulp at x = {at}");
    assert!(u <= 4, "logistic: {u} ulp at {at}");
}
