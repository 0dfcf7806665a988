//! Tests of the Cranelift loop-kernel compiler: arithmetic, tails, broadcasts, scalar inputs and
//! the compiled-kernel cache.

use tensorjit::ir::op::{BinaryOp, CompareOp, UnaryOp};
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

#[test]
fn fused_chain_matches_scalar_math_for_every_tail_length() {
    // out = max((a + b) * 2 - a / b, 0)
    let k = LoopKernel {
        ty: ElemTy::F32,
        inputs: vec![Access::Full, Access::Full],
        insts: vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Binary(BinaryOp::Add, 0, 1),
            Inst::Const(2.0),
            Inst::Binary(BinaryOp::Mul, 2, 3),
            Inst::Binary(BinaryOp::Div, 0, 1),
            Inst::Binary(BinaryOp::Sub, 4, 5),
            Inst::Const(0.0),
            Inst::Binary(BinaryOp::Max, 6, 7),
        ],
        outputs: vec![8],
    };
    for n in [0usize, 1, 3, 4, 15, 16, 17, 33, 100] {
        let a: Vec<f32> = (0..n).map(|i| i as f32 - 7.5).collect();
        let b: Vec<f32> = (0..n).map(|i| 1.0 + i as f32 * 0.25).collect();
        let out = run_f32(&k, &[&a, &b], n);
        for i in 0..n {
            let want = ((a[i] + b[i]) * 2.0 - a[i] / b[i]).max(0.0);
            assert_eq!(out[0][i], want, "n={n} i={i}");
        }
    }
}

#[test]
fn scalar_broadcast_input_and_select() {
    // out0 = x < t ? -x : x * t ; out1 = x (two outputs)
    let k = LoopKernel {
        ty: ElemTy::F32,
        inputs: vec![Access::Full, Access::Scalar],
        insts: vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Unary(UnaryOp::Neg, 0),
            Inst::Binary(BinaryOp::Mul, 0, 1),
            Inst::Select { dir: CompareOp::LessThan, a: 0, b: 1, t: 2, f: 3 },
        ],
        outputs: vec![4, 0],
    };
    let x: Vec<f32> = (0..21).map(|i| i as f32 - 10.0).collect();
    let t = [3.0f32];
    let out = run_f32(&k, &[&x, &t], x.len());
    for (i, &xi) in x.iter().enumerate() {
        let want = if xi < 3.0 { -xi } else { xi * 3.0 };
        assert_eq!(out[0][i], want);
        assert_eq!(out[1][i], xi);
    }
}

#[test]
fn identical_kernels_compile_once() {
    let k = LoopKernel {
        ty: ElemTy::F64,
        inputs: vec![Access::Full],
        insts: vec![Inst::Load(0), Inst::Unary(UnaryOp::Sqrt, 0)],
        outputs: vec![1],
    };
    let a = jit::compile(&k).unwrap();
    let before = jit::compiled_count();
    let b = jit::compile(&k.clone()).unwrap();
    assert_eq!(jit::compiled_count(), before);
    assert_eq!(a.clif, b.clif);
    let x = [4.0f64, 9.0, 2.25];
    let mut y = [0.0f64; 3];
    let ptrs = [x.as_ptr() as *mut u8, y.as_mut_ptr() as *mut u8];
    // SAFETY: x and y hold 3 f64 each.
    unsafe { b.run(&ptrs, 0, 3) };
    assert_eq!(y, [2.0, 3.0, 1.5]);
}
