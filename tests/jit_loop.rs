//! Tests of the Cranelift loop-kernel compiler: arithmetic, tails, broadcasts, scalar inputs, the
//! compiled-kernel cache, and the typed instructions (ints, Bool, F16/BF16, conversions, index
//! remappings, iota). Expected values are worked by hand from the catalogue's rules (§4, §9).

use tensorjit::codegen;
use tensorjit::codegen::{Access, ElemTy, Inst, Lit, LoopKernel, Ty};
use tensorjit::ir::op::{BinaryOp, CompareOp, UnaryOp};

/// Plain-old-data element types the tests read and write.
trait Pod: Copy + Default {
    fn to_bytes(self) -> Vec<u8>;
    fn from_bytes(b: &[u8]) -> Self;
}
macro_rules! pod {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            fn to_bytes(self) -> Vec<u8> { self.to_le_bytes().to_vec() }
            fn from_bytes(b: &[u8]) -> Self { <$t>::from_le_bytes(b.try_into().unwrap()) }
        }
    )*};
}
pod!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

fn bytes<T: Pod>(v: &[T]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bytes()).collect()
}

fn elems<T: Pod>(b: &[u8]) -> Vec<T> {
    let n = std::mem::size_of::<T>();
    b.chunks(n).map(T::from_bytes).collect()
}

/// Runs `k` over `start..end` with raw input buffers; output `o` has `n` elements of its type.
fn run_range(k: &LoopKernel, inputs: &[Vec<u8>], n: usize, start: usize, end: usize) -> Vec<Vec<u8>> {
    let c = codegen::compile(k).expect("compile");
    let mut outs: Vec<Vec<u8>> =
        (0..k.outputs.len()).map(|o| vec![0u8; n * k.output_ty(o).expect("typed").bytes()]).collect();
    let mut ptrs: Vec<*mut u8> = inputs.iter().map(|s| s.as_ptr() as *mut u8).collect();
    ptrs.extend(outs.iter_mut().map(|o| o.as_mut_ptr()));
    // SAFETY: each input buffer holds every element the kernel reads (n elements for Full inputs,
    // one for Scalar inputs, the strided extent otherwise) and each output n elements.
    unsafe { c.run(&ptrs, start, end) };
    outs
}

fn run(k: &LoopKernel, inputs: &[Vec<u8>], n: usize) -> Vec<Vec<u8>> {
    run_range(k, inputs, n, 0, n)
}

fn kernel(in_tys: Vec<Ty>, inputs: Vec<Access>, insts: Vec<Inst>, outputs: Vec<usize>) -> LoopKernel {
    LoopKernel { in_tys, inputs, insts, outputs, reduce: None }
}

fn run_f32(k: &LoopKernel, inputs: &[&[f32]], n: usize) -> Vec<Vec<f32>> {
    let ins: Vec<Vec<u8>> = inputs.iter().map(|s| bytes(s)).collect();
    run(k, &ins, n).iter().map(|o| elems::<f32>(o)).collect()
}

#[test]
fn fused_chain_matches_scalar_math_for_every_tail_length() {
    // out = max((a + b) * 2 - a / b, 0)
    let k = LoopKernel::elementwise(
        ElemTy::F32,
        vec![Access::Full, Access::Full],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Binary(BinaryOp::Add, 0, 1),
            Inst::Const(Ty::F32, Lit::Float(2.0)),
            Inst::Binary(BinaryOp::Mul, 2, 3),
            Inst::Binary(BinaryOp::Div, 0, 1),
            Inst::Binary(BinaryOp::Sub, 4, 5),
            Inst::Const(Ty::F32, Lit::Float(0.0)),
            Inst::Binary(BinaryOp::Max, 6, 7),
        ],
        vec![8],
    );
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
    let k = LoopKernel::elementwise(
        ElemTy::F32,
        vec![Access::Full, Access::Scalar],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Unary(UnaryOp::Neg, 0),
            Inst::Binary(BinaryOp::Mul, 0, 1),
            Inst::Select { dir: CompareOp::LessThan, a: 0, b: 1, t: 2, f: 3 },
        ],
        vec![4, 0],
    );
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
    let k = LoopKernel::elementwise(
        ElemTy::F64,
        vec![Access::Full],
        vec![Inst::Load(0), Inst::Unary(UnaryOp::Sqrt, 0)],
        vec![1],
    );
    let a = codegen::compile(&k).unwrap();
    let before = codegen::compiled_count();
    let b = codegen::compile(&k.clone()).unwrap();
    assert_eq!(codegen::compiled_count(), before);
    assert_eq!(a.clif, b.clif);
    let x = [4.0f64, 9.0, 2.25];
    let mut y = [0.0f64; 3];
    let ptrs = [x.as_ptr() as *mut u8, y.as_mut_ptr() as *mut u8];
    // SAFETY: x and y hold 3 f64 each.
    unsafe { b.run(&ptrs, 0, 3) };
    assert_eq!(y, [2.0, 3.0, 1.5]);
}

fn binary_kernel(t: Ty, op: BinaryOp) -> LoopKernel {
    kernel(
        vec![t, t],
        vec![Access::Full, Access::Full],
        vec![Inst::Load(0), Inst::Load(1), Inst::Binary(op, 0, 1)],
        vec![2],
    )
}

#[test]
fn integer_division_and_remainder_follow_the_spec() {
    // §9: ÷0 → −1 (all ones unsigned), MIN/−1 wraps to MIN, rem 0 → dividend, MIN rem −1 = 0.
    let m = i32::MIN;
    let a = bytes(&[7i32, -7, m, -6, 7, m, 9]);
    let b = bytes(&[0i32, 0, -1, 2, -2, 2, -1]);
    let q = elems::<i32>(&run(&binary_kernel(Ty::I32, BinaryOp::Div), &[a, b], 7)[0]);
    assert_eq!(q, vec![-1, -1, m, -3, -3, -1_073_741_824, -9]);
    let a = bytes(&[7i32, -7, m, -7, 7, 9]);
    let b = bytes(&[0i32, 0, -1, 4, -4, 1]);
    let r = elems::<i32>(&run(&binary_kernel(Ty::I32, BinaryOp::Rem), &[a, b], 6)[0]);
    assert_eq!(r, vec![7, -7, 0, -3, 3, 0]);
    let q = run(&binary_kernel(Ty::U32, BinaryOp::Div), &[bytes(&[7u32, 7]), bytes(&[0u32, 2])], 2);
    assert_eq!(elems::<u32>(&q[0]), vec![u32::MAX, 3]);
    let r = run(&binary_kernel(Ty::U8, BinaryOp::Rem), &[bytes(&[7u8, 200]), bytes(&[0u8, 7])], 2);
    assert_eq!(elems::<u8>(&r[0]), vec![7, 4]);
    let q = run(&binary_kernel(Ty::I8, BinaryOp::Div), &[bytes(&[-128i8, -128]), bytes(&[-1i8, 2])], 2);
    assert_eq!(elems::<i8>(&q[0]), vec![-128, -64]);
    let q = run(&binary_kernel(Ty::I64, BinaryOp::Div), &[bytes(&[i64::MIN, 5]), bytes(&[-1i64, 0])], 2);
    assert_eq!(elems::<i64>(&q[0]), vec![i64::MIN, -1]);
}

#[test]
fn shifts_with_out_of_range_amounts() {
    // shift_left int32 1 by [31,32,33,−1] = [MIN,0,0,0]; −1<<1 = −2.
    let s = run(
        &binary_kernel(Ty::I32, BinaryOp::ShiftLeft),
        &[bytes(&[1i32, 1, 1, 1, -1]), bytes(&[31i32, 32, 33, -1, 1])],
        5,
    );
    assert_eq!(elems::<i32>(&s[0]), vec![i32::MIN, 0, 0, 0, -2]);
    // shift_right_arithmetic int32 [−8,8,−2] by [32,−1,1] = [−1,0,−1].
    let s = run(
        &binary_kernel(Ty::I32, BinaryOp::ShiftRightArithmetic),
        &[bytes(&[-8i32, 8, -2]), bytes(&[32i32, -1, 1])],
        3,
    );
    assert_eq!(elems::<i32>(&s[0]), vec![-1, 0, -1]);
    // uint8 arithmetic right fills with the top bit: 0x80>>1 = 0xC0, 0x80>>8 = 0xFF, 0x40>>1 = 0x20.
    let s = run(
        &binary_kernel(Ty::U8, BinaryOp::ShiftRightArithmetic),
        &[bytes(&[0x80u8, 0x80, 0x40]), bytes(&[1u8, 8, 1])],
        3,
    );
    assert_eq!(elems::<u8>(&s[0]), vec![0xC0, 0xFF, 0x20]);
    // shift_right_logical int32 −8 by [1,32,−1] = [2147483644,0,0].
    let s = run(
        &binary_kernel(Ty::I32, BinaryOp::ShiftRightLogical),
        &[bytes(&[-8i32, -8, -8]), bytes(&[1i32, 32, -1])],
        3,
    );
    assert_eq!(elems::<i32>(&s[0]), vec![2_147_483_644, 0, 0]);
    // u16 1 << 15 = 0x8000, << 16 = 0.
    let s = run(&binary_kernel(Ty::U16, BinaryOp::ShiftLeft), &[bytes(&[1u16, 1]), bytes(&[15u16, 16])], 2);
    assert_eq!(elems::<u16>(&s[0]), vec![0x8000, 0]);
}

#[test]
fn vectorised_integer_arithmetic_wraps_for_every_tail_length() {
    // out0 = a*b + a (wrapping), out1 = max(a, b), out2 = min(a, b) ^ a; i32 (i32x4 lanes).
    let k = kernel(
        vec![Ty::I32, Ty::I32],
        vec![Access::Full, Access::Full],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Binary(BinaryOp::Mul, 0, 1),
            Inst::Binary(BinaryOp::Add, 2, 0),
            Inst::Binary(BinaryOp::Max, 0, 1),
            Inst::Binary(BinaryOp::Min, 0, 1),
            Inst::Binary(BinaryOp::BitwiseXor, 5, 0),
        ],
        vec![3, 4, 6],
    );
    assert!(codegen::compile(&k).unwrap().clif.contains("i32x4"), "an all-i32 kernel is vectorised");
    for n in [0usize, 1, 5, 16, 37] {
        let a: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(0x3fff_ffff) ^ 0x55).collect();
        let b: Vec<i32> = (0..n as i32).map(|i| 7 - 3 * i).collect();
        let out = run(&k, &[bytes(&a), bytes(&b)], n);
        let (o0, o1, o2) = (elems::<i32>(&out[0]), elems::<i32>(&out[1]), elems::<i32>(&out[2]));
        for i in 0..n {
            assert_eq!(o0[i], a[i].wrapping_mul(b[i]).wrapping_add(a[i]), "n={n} i={i}");
            assert_eq!(o1[i], a[i].max(b[i]));
            assert_eq!(o2[i], a[i].min(b[i]) ^ a[i]);
        }
    }
    // u8 (i8x16 lanes): 200 + 100 wraps to 44; unsigned max.
    let k = binary_kernel(Ty::U8, BinaryOp::Add);
    let a = vec![200u8; 35];
    let b: Vec<u8> = (0..35).map(|i| i as u8 * 3).collect();
    let out = elems::<u8>(&run(&k, &[bytes(&a), bytes(&b)], 35)[0]);
    assert_eq!(out[0], 200);
    assert_eq!(out[20], 4); // 200 + 60 = 260 → 4
    assert_eq!(out[34], 46); // 200 + 102 = 302 → 46
    let out =
        elems::<u64>(&run(&binary_kernel(Ty::U64, BinaryOp::Max), &[bytes(&[u64::MAX, 3]), bytes(&[1u64, 9])], 2)[0]);
    assert_eq!(out, vec![u64::MAX, 9]);
}

#[test]
fn integer_unary_ops() {
    let un = |t: Ty, op: UnaryOp| kernel(vec![t], vec![Access::Full], vec![Inst::Load(0), Inst::Unary(op, 0)], vec![1]);
    let x = bytes(&[-5i16, 0, 7, i16::MIN]);
    assert_eq!(elems::<i16>(&run(&un(Ty::I16, UnaryOp::Abs), std::slice::from_ref(&x), 4)[0]), vec![5, 0, 7, i16::MIN]);
    assert_eq!(
        elems::<i16>(&run(&un(Ty::I16, UnaryOp::Neg), std::slice::from_ref(&x), 4)[0]),
        vec![5, 0, -7, i16::MIN]
    );
    assert_eq!(elems::<i16>(&run(&un(Ty::I16, UnaryOp::Sign), std::slice::from_ref(&x), 4)[0]), vec![-1, 0, 1, -1]);
    assert_eq!(
        elems::<i16>(&run(&un(Ty::I16, UnaryOp::BitwiseNot), std::slice::from_ref(&x), 4)[0]),
        vec![4, -1, -8, i16::MAX]
    );
    // popcount(−5 = 0xFFFB) = 15, clz(7) = 13, clz(0) = 16.
    assert_eq!(elems::<i16>(&run(&un(Ty::I16, UnaryOp::BitCount), std::slice::from_ref(&x), 4)[0]), vec![15, 0, 3, 1]);
    assert_eq!(elems::<i16>(&run(&un(Ty::I16, UnaryOp::Clz), &[x], 4)[0]), vec![0, 16, 13, 0]);
    let u = bytes(&[0u32, 9, u32::MAX]);
    assert_eq!(elems::<u32>(&run(&un(Ty::U32, UnaryOp::Sign), std::slice::from_ref(&u), 3)[0]), vec![0, 1, 1]);
    assert_eq!(elems::<u32>(&run(&un(Ty::U32, UnaryOp::Abs), &[u], 3)[0]), vec![0, 9, u32::MAX]);
}

fn convert_kernel(from: Ty, to: Ty) -> LoopKernel {
    kernel(vec![from], vec![Access::Full], vec![Inst::Load(0), Inst::Convert(0, to)], vec![1])
}

#[test]
fn float_to_int_conversions_truncate_and_saturate() {
    let x = bytes(&[300.0f32, -300.0, f32::NAN, -1.9, 127.5, 1e10, -0.5]);
    assert_eq!(
        elems::<i8>(&run(&convert_kernel(Ty::F32, Ty::I8), std::slice::from_ref(&x), 7)[0]),
        vec![127, -128, 0, -1, 127, 127, 0]
    );
    assert_eq!(
        elems::<u8>(&run(&convert_kernel(Ty::F32, Ty::U8), std::slice::from_ref(&x), 7)[0]),
        vec![255, 0, 0, 0, 127, 255, 0]
    );
    assert_eq!(
        elems::<i32>(&run(&convert_kernel(Ty::F32, Ty::I32), std::slice::from_ref(&x), 7)[0]),
        vec![300, -300, 0, -1, 127, i32::MAX, 0]
    );
    assert_eq!(
        elems::<u64>(&run(&convert_kernel(Ty::F32, Ty::U64), &[x], 7)[0]),
        vec![300, 0, 0, 0, 127, 10_000_000_000, 0]
    );
    let y = bytes(&[-1e300f64, 4.75, 9.3e18]);
    assert_eq!(elems::<i64>(&run(&convert_kernel(Ty::F64, Ty::I64), &[y], 3)[0]), vec![i64::MIN, 4, i64::MAX]);
}

#[test]
fn int_bool_and_float_conversions() {
    // u64::MAX → f64 is 2^64 (rounded), → f32 2^64; i64 −3 → f32 −3.
    let u = bytes(&[u64::MAX, 1]);
    assert_eq!(
        elems::<f64>(&run(&convert_kernel(Ty::U64, Ty::F64), std::slice::from_ref(&u), 2)[0]),
        vec![18_446_744_073_709_551_616.0, 1.0]
    );
    assert_eq!(
        elems::<f32>(&run(&convert_kernel(Ty::U64, Ty::F32), &[u], 2)[0]),
        vec![18_446_744_073_709_551_616.0, 1.0]
    );
    // Narrowing ints wrap, widening sign- or zero-extends.
    assert_eq!(elems::<i8>(&run(&convert_kernel(Ty::I32, Ty::I8), &[bytes(&[300i32, -129])], 2)[0]), vec![44, 127]);
    assert_eq!(elems::<i64>(&run(&convert_kernel(Ty::I8, Ty::I64), &[bytes(&[-2i8, 5])], 2)[0]), vec![-2, 5]);
    assert_eq!(elems::<u32>(&run(&convert_kernel(Ty::U8, Ty::U32), &[bytes(&[0xffu8, 5])], 2)[0]), vec![255, 5]);
    assert_eq!(elems::<u16>(&run(&convert_kernel(Ty::I8, Ty::U16), &[bytes(&[-1i8])], 1)[0]), vec![0xffff]);
    // x ≠ 0 → true (NaN too); Bool → 0/1.
    let f = bytes(&[0.0f32, -0.0, f32::NAN, 0.25]);
    assert_eq!(run(&convert_kernel(Ty::F32, Ty::Bool), &[f], 4)[0], vec![0, 0, 1, 1]);
    assert_eq!(run(&convert_kernel(Ty::I16, Ty::Bool), &[bytes(&[0i16, 256, -1])], 3)[0], vec![0, 1, 1]);
    assert_eq!(elems::<f64>(&run(&convert_kernel(Ty::Bool, Ty::F64), &[vec![1u8, 0]], 2)[0]), vec![1.0, 0.0]);
    assert_eq!(elems::<i32>(&run(&convert_kernel(Ty::Bool, Ty::I32), &[vec![1u8, 0]], 2)[0]), vec![1, 0]);
    // f64 → f32 rounds to nearest; f32 → f64 exact.
    let d = bytes(&[1.0f64 + 2f64.powi(-24), 1e300]);
    assert_eq!(elems::<f32>(&run(&convert_kernel(Ty::F64, Ty::F32), &[d], 2)[0]), vec![1.0, f32::INFINITY]);
}

#[test]
fn half_conversions_round_to_nearest_even() {
    let t = 2f32.powi(-11);
    let x = [1.0f32, 1.0 + t, 1.0 + 3.0 * t, 65519.0, 65520.0, 2f32.powi(-25), 3.0 * 2f32.powi(-25), -0.0, -2.5, 1e-10];
    let h = elems::<u16>(&run(&convert_kernel(Ty::F32, Ty::F16), &[bytes(&x)], x.len())[0]);
    // 1 → 0x3C00; 1+2⁻¹¹ ties to 1; 1+3·2⁻¹¹ ties up to 1+2⁻⁹ (0x3C02); 65519 → 65504 (0x7BFF);
    // 65520 → Inf; 2⁻²⁵ ties to 0; 3·2⁻²⁵ → 2·2⁻²⁴ (0x0002); −0 → 0x8000; −2.5 → 0xC100; 1e−10 → 0.
    assert_eq!(h, vec![0x3C00, 0x3C00, 0x3C02, 0x7BFF, 0x7C00, 0x0000, 0x0002, 0x8000, 0xC100, 0x0000]);
    let nan = elems::<u16>(&run(&convert_kernel(Ty::F32, Ty::F16), &[bytes(&[f32::NAN])], 1)[0]);
    assert!(nan[0] & 0x7C00 == 0x7C00 && nan[0] & 0x3FF != 0, "{:#x}", nan[0]);
    // F64 → F16 rounds once: 1 + 2⁻¹¹ + 2⁻⁴⁰ is above the tie, so 1 + 2⁻¹⁰ (0x3C01).
    let d = bytes(&[1.0f64 + 2f64.powi(-11) + 2f64.powi(-40), 1.0 + 2f64.powi(-11)]);
    assert_eq!(elems::<u16>(&run(&convert_kernel(Ty::F64, Ty::F16), &[d], 2)[0]), vec![0x3C01, 0x3C00]);
    // BF16: 1 + 2⁻⁸ ties to 1 (0x3F80); 1 + 3·2⁻⁸ → 1 + 2⁻⁶ (0x3F82); −Inf stays.
    let b = [1.0f32, 1.0 + 2f32.powi(-8), 1.0 + 3.0 * 2f32.powi(-8), f32::NEG_INFINITY];
    assert_eq!(
        elems::<u16>(&run(&convert_kernel(Ty::F32, Ty::BF16), &[bytes(&b)], 4)[0]),
        vec![0x3F80, 0x3F80, 0x3F82, 0xFF80]
    );
    // F16 → F32 is exact: min subnormal 2⁻²⁴, Inf, −Inf, 0x3555 = 0.333251953125.
    let hb = bytes(&[0x0001u16, 0x7C00, 0xFC00, 0x3555]);
    assert_eq!(
        elems::<f32>(&run(&convert_kernel(Ty::F16, Ty::F32), &[hb], 4)[0]),
        vec![2f32.powi(-24), f32::INFINITY, f32::NEG_INFINITY, 0.333_251_95]
    );
    // F16 → I32 truncates the half value: 0x4170 = 2.71875 → 2; BF16 0xC040 = −3 → −3.
    assert_eq!(elems::<i32>(&run(&convert_kernel(Ty::F16, Ty::I32), &[bytes(&[0x4170u16])], 1)[0]), vec![2]);
    assert_eq!(elems::<i32>(&run(&convert_kernel(Ty::BF16, Ty::I32), &[bytes(&[0xC040u16])], 1)[0]), vec![-3]);
}

#[test]
fn half_arithmetic_rounds_every_step() {
    // F16: (1 + 2⁻¹¹) + 2⁻¹¹ rounds to 1 at each step (f32 would give 1 + 2⁻¹⁰ = 0x3C01).
    let k = kernel(
        vec![Ty::F16, Ty::F16],
        vec![Access::Full, Access::Scalar],
        vec![Inst::Load(0), Inst::Load(1), Inst::Binary(BinaryOp::Add, 0, 1), Inst::Binary(BinaryOp::Add, 2, 1)],
        vec![3],
    );
    let out = run(&k, &[bytes(&[0x3C00u16, 0x4000]), bytes(&[0x1000u16])], 2);
    // 0x1000 = 2⁻¹¹; 2 + 2⁻¹¹ + 2⁻¹¹ stays 2 (0x4000).
    assert_eq!(elems::<u16>(&out[0]), vec![0x3C00, 0x4000]);
    // BF16 multiply: 3 × 1.5 = 4.5 (0x4090) exact; 1.0078125 × 1.0078125 = 1.01568… → 1.015625 (0x3F82).
    let k = binary_kernel(Ty::BF16, BinaryOp::Mul);
    let out = run(&k, &[bytes(&[0x4040u16, 0x3F81]), bytes(&[0x3FC0u16, 0x3F81])], 2);
    assert_eq!(elems::<u16>(&out[0]), vec![0x4090, 0x3F82]);
}

#[test]
fn compare_gives_bool_and_where_selects() {
    // b0 = x < y (NaN → false); out = b0 ? x : y  in f64; plus IsNaN.
    let k = kernel(
        vec![Ty::F64, Ty::F64],
        vec![Access::Full, Access::Full],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Compare(CompareOp::LessThan, 0, 1),
            Inst::Where(2, 0, 1),
            Inst::Unary(UnaryOp::IsNaN, 0),
            Inst::Compare(CompareOp::NotEqual, 0, 1),
        ],
        vec![2, 3, 4, 5],
    );
    let x = [1.0f64, 5.0, f64::NAN, -0.0];
    let y = [2.0f64, 3.0, 1.0, 0.0];
    let out = run(&k, &[bytes(&x), bytes(&y)], 4);
    assert_eq!(out[0], vec![1, 0, 0, 0]);
    assert_eq!(elems::<f64>(&out[1])[..2], [1.0, 3.0]);
    assert_eq!(elems::<f64>(&out[1])[2], 1.0);
    assert_eq!(out[2], vec![0, 0, 1, 0]);
    assert_eq!(out[3], vec![1, 1, 1, 0]);
}

#[test]
fn bool_kernels_vectorise_over_bytes() {
    // out = !(a & b) | (a ^ c) over 0/1 bytes, 37 elements (two i8x16 vectors and a tail).
    let k = kernel(
        vec![Ty::Bool, Ty::Bool, Ty::Bool],
        vec![Access::Full, Access::Full, Access::Full],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Load(2),
            Inst::Binary(BinaryOp::LogicalAnd, 0, 1),
            Inst::Unary(UnaryOp::LogicalNot, 3),
            Inst::Binary(BinaryOp::LogicalXor, 0, 2),
            Inst::Binary(BinaryOp::LogicalOr, 4, 5),
            Inst::Compare(CompareOp::Equal, 0, 1),
            Inst::Where(2, 1, 7),
        ],
        vec![6, 8],
    );
    assert!(codegen::compile(&k).unwrap().clif.contains("i8x16"), "an all-Bool kernel is vectorised");
    let n = 37;
    let a: Vec<u8> = (0..n).map(|i| (i % 2) as u8).collect();
    let b: Vec<u8> = (0..n).map(|i| (i % 3 == 0) as u8).collect();
    let c: Vec<u8> = (0..n).map(|i| (i % 5 < 2) as u8).collect();
    let out = run(&k, &[a.clone(), b.clone(), c.clone()], n);
    for i in 0..n {
        let (x, y, z) = (a[i] == 1, b[i] == 1, c[i] == 1);
        assert_eq!(out[0][i], (!(x && y) || (x != z)) as u8, "i={i}");
        assert_eq!(out[1][i], if z { y } else { x == y } as u8, "i={i}");
    }
}

#[test]
fn strided_inputs_transpose_and_broadcast() {
    // out[i, j] = x[j, i] + r[j] over a [3, 2] iteration space, x: [2, 3] row-major, r: [2].
    let k = kernel(
        vec![Ty::F32, Ty::F32],
        vec![
            Access::Strided { dims: vec![3, 2], strides: vec![1, 3] },
            Access::Strided { dims: vec![3, 2], strides: vec![0, 1] },
        ],
        vec![Inst::Load(0), Inst::Load(1), Inst::Binary(BinaryOp::Add, 0, 1)],
        vec![2],
    );
    let x = [0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0];
    let r = [10.0f32, 20.0];
    let out = run_f32(&k, &[&x, &r], 6);
    assert_eq!(out[0], vec![10.0, 23.0, 11.0, 24.0, 12.0, 25.0]);
    // A sub-range (as a thread would run it) computes only its elements.
    let out = run_range(&k, &[bytes(&x), bytes(&r)], 6, 3, 5);
    assert_eq!(elems::<f32>(&out[0]), vec![0.0, 0.0, 0.0, 24.0, 12.0, 0.0]);
}

#[test]
fn iota_along_a_middle_axis() {
    // dims [2, 3, 2], axis 1: 0 0 1 1 2 2 0 0 1 1 2 2; converted to F32 and to U8 (+ 250 wraps).
    let k = kernel(
        vec![],
        vec![],
        vec![
            Inst::Iota { dims: vec![2, 3, 2], axis: 1 },
            Inst::Convert(0, Ty::F32),
            Inst::Convert(0, Ty::U8),
            Inst::Const(Ty::U8, Lit::Int(254)),
            Inst::Binary(BinaryOp::Add, 2, 3),
        ],
        vec![1, 4],
    );
    let out = run(&k, &[], 12);
    assert_eq!(elems::<f32>(&out[0]), vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);
    assert_eq!(out[1], vec![254, 254, 255, 255, 0, 0, 254, 254, 255, 255, 0, 0]);
}

#[test]
fn ill_typed_kernels_are_rejected() {
    let k = kernel(
        vec![Ty::I32, Ty::F32],
        vec![Access::Full, Access::Full],
        vec![Inst::Load(0), Inst::Load(1), Inst::Binary(BinaryOp::Add, 0, 1)],
        vec![2],
    );
    assert!(k.validate().is_err());
    assert!(codegen::compile(&k).is_err());
    let k = kernel(vec![Ty::Bool], vec![Access::Full], vec![Inst::Load(0), Inst::Unary(UnaryOp::Sqrt, 0)], vec![1]);
    assert!(codegen::compile(&k).is_err(), "sqrt of Bool is not an op the JIT emits");
}

/// Bias add (`[r, c]` + `b[c]`: innermost stride 1) and row broadcast (`x[r, c] − m[r]`:
/// innermost stride 0) read through stride maps vectorise when `c` is a multiple of the lanes,
/// and give the same values as the scalar loop used otherwise (and for unaligned tails).
#[test]
fn strided_inputs_with_unit_or_zero_inner_stride_vectorise() {
    for (rows, cols) in [(3usize, 8usize), (5, 4), (3, 5), (2, 12)] {
        let k = LoopKernel::elementwise(
            ElemTy::F32,
            vec![
                Access::Full,
                Access::Strided { dims: vec![rows as i64, cols as i64], strides: vec![0, 1] },
                Access::Strided { dims: vec![rows as i64, cols as i64], strides: vec![1, 0] },
            ],
            vec![
                Inst::Load(0),
                Inst::Load(1),
                Inst::Load(2),
                Inst::Binary(BinaryOp::Add, 0, 1),
                Inst::Binary(BinaryOp::Sub, 3, 2),
            ],
            vec![4],
        );
        let vector = cols % 4 == 0;
        assert_eq!(codegen::compile(&k).unwrap().clif.contains("f32x4"), vector, "{rows}x{cols}");
        let n = rows * cols;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let bias: Vec<f32> = (0..cols).map(|c| 100.0 * (c + 1) as f32).collect();
        let m: Vec<f32> = (0..rows).map(|r| 1000.0 * (r + 1) as f32).collect();
        let out = run_f32(&k, &[&x, &bias, &m], n);
        for i in 0..n {
            let (r, c) = (i / cols, i % cols);
            assert_eq!(out[0][i], x[i] + bias[c] - m[r], "{rows}x{cols} i={i}");
        }
    }
}

#[test]
fn vector_loop_halves_cover_every_range_exactly_once() {
    // The vector loop walks two halves of its range side by side; every element of start..end
    // must be written once, with the right broadcast row, and nothing outside the range.
    let (rows, cols) = (13usize, 8usize);
    let n = rows * cols;
    let k = LoopKernel::elementwise(
        ElemTy::F32,
        vec![Access::Full, Access::Strided { dims: vec![rows as i64, cols as i64], strides: vec![0, 1] }],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Const(Ty::F32, Lit::Float(3.0)),
            Inst::Binary(BinaryOp::Mul, 0, 2),
            Inst::Binary(BinaryOp::Add, 3, 1),
        ],
        vec![4],
    );
    assert!(codegen::compile(&k).unwrap().clif.contains("f32x4"));
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let bias: Vec<f32> = (0..cols).map(|c| 1000.0 * (c + 1) as f32).collect();
    for (start, end) in [(0, n), (4, n), (0, n - 3), (8, 8 + 16 * 3), (12, 12 + 16 * 5 + 7), (16, 17), (4, 4 + 31)] {
        let out = elems::<f32>(&run_range(&k, &[bytes(&x), bytes(&bias)], n, start, end)[0]);
        for (i, &o) in out.iter().enumerate() {
            let want = if (start..end).contains(&i) { 3.0 * i as f32 + bias[i % cols] } else { 0.0 };
            assert_eq!(o, want, "range {start}..{end}, i={i}");
        }
    }
}

#[test]
fn bool_values_vectorise_in_32_bit_loops() {
    // m = x > y (NaN: false); out0 = m; out1 = (m & keep) | !mask_row ? x : y, with keep a Full
    // Bool input, mask_row a Bool broadcast along rows ([rows, 4], strides [1, 0]) and a Bool
    // scalar; i32 lanes alongside: out2 = (x != y) ^ s as Bool. Every tail length.
    let cols = 4usize;
    let k = kernel(
        vec![Ty::F32, Ty::F32, Ty::Bool, Ty::Bool, Ty::Bool],
        vec![
            Access::Full,
            Access::Full,
            Access::Full,
            Access::Strided { dims: vec![0, cols as i64], strides: vec![1, 0] },
            Access::Scalar,
        ],
        vec![
            Inst::Load(0),                               // 0 x
            Inst::Load(1),                               // 1 y
            Inst::Load(2),                               // 2 keep
            Inst::Load(3),                               // 3 row flag
            Inst::Load(4),                               // 4 s
            Inst::Compare(CompareOp::GreaterThan, 0, 1), // 5 m
            Inst::Binary(BinaryOp::LogicalAnd, 5, 2),    // 6
            Inst::Unary(UnaryOp::LogicalNot, 3),         // 7
            Inst::Binary(BinaryOp::LogicalOr, 6, 7),     // 8
            Inst::Where(8, 0, 1),                        // 9
            Inst::Compare(CompareOp::NotEqual, 0, 1),    // 10
            Inst::Binary(BinaryOp::LogicalXor, 10, 4),   // 11
        ],
        vec![5, 9, 11],
    );
    for rows in [0usize, 1, 2, 3, 4, 5, 9, 26] {
        let n = rows * cols;
        let mut k = k.clone();
        k.inputs[3] = Access::Strided { dims: vec![rows as i64, cols as i64], strides: vec![1, 0] };
        assert!(codegen::compile(&k).unwrap().clif.contains("f32x4"), "rows={rows}: vectorised");
        let x: Vec<f32> = (0..n).map(|i| if i % 7 == 3 { f32::NAN } else { (i % 5) as f32 - 2.0 }).collect();
        let y: Vec<f32> = (0..n).map(|i| (i % 3) as f32 - 1.0).collect();
        let keep: Vec<u8> = (0..n).map(|i| (i % 4 != 1) as u8).collect();
        let row: Vec<u8> = (0..rows).map(|r| (r % 3 != 0) as u8).collect();
        for s in [0u8, 1] {
            let ins = [bytes(&x), bytes(&y), keep.clone(), row.clone(), vec![s]];
            let out = run(&k, &ins, n);
            let got1 = elems::<f32>(&out[1]);
            for i in 0..n {
                let m = x[i] > y[i];
                assert_eq!(out[0][i], m as u8, "rows={rows} i={i}");
                let c = (m && keep[i] == 1) || row[i / cols] == 0;
                let want = if c { x[i] } else { y[i] };
                assert!(got1[i] == want || got1[i].is_nan() && want.is_nan(), "rows={rows} i={i}");
                assert_eq!(out[2][i], ((x[i] != y[i]) != (s == 1)) as u8, "rows={rows} s={s} i={i}");
            }
        }
    }
}

/// Runs `c` over `start..end` with 16-byte aligned buffers (as the runtime's are): input `i` is
/// `inputs[i]`, every output `n` elements of `out_bytes` bytes. Returns the outputs' bytes.
fn run_aligned(
    c: &codegen::CompiledLoop,
    inputs: &[Vec<u8>],
    out_bytes: &[usize],
    n: usize,
    start: usize,
    end: usize,
) -> Vec<Vec<u8>> {
    // u128 storage is 16-byte aligned on x86-64 and aarch64.
    let store = |b: &[u8]| {
        let mut v = vec![0u128; b.len().div_ceil(16).max(1)];
        // SAFETY: v holds at least b.len() bytes; u8 has no alignment or validity requirement.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len()) };
        v
    };
    let ins: Vec<Vec<u128>> = inputs.iter().map(|b| store(b)).collect();
    let mut outs: Vec<Vec<u128>> = out_bytes.iter().map(|&w| store(&vec![0xA5u8; n * w])).collect();
    let mut ptrs: Vec<*mut u8> = ins.iter().map(|v| v.as_ptr() as *mut u8).collect();
    ptrs.extend(outs.iter_mut().map(|v| v.as_mut_ptr().cast::<u8>()));
    // SAFETY: inputs hold n elements, outputs n elements of their widths, all 16-byte aligned;
    // `start` is a multiple of 16 (the streaming kernel's extra requirement).
    unsafe { c.run(&ptrs, start, end) };
    outs.iter()
        .zip(out_bytes)
        .map(|(v, &w)| {
            // SAFETY: v holds at least n·w initialised bytes.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), n * w) }.to_vec()
        })
        .collect()
}

/// The streaming (non-temporal store) variant of a kernel writes exactly what the ordinary
/// kernel writes, over every aligned start and every tail, for f32, f64 and i8 loops with two
/// outputs; it ends with a fence; kernels with a reduction have none.
#[test]
fn streaming_kernels_write_what_the_ordinary_ones_write() {
    // f32: out0 = (a·b − 1.5) max 0, out1 = a + b. Bytes outside start..end keep the 0xA5 fill.
    let k = LoopKernel::elementwise(
        ElemTy::F32,
        vec![Access::Full, Access::Full],
        vec![
            Inst::Load(0),
            Inst::Load(1),
            Inst::Binary(BinaryOp::Mul, 0, 1),
            Inst::Const(Ty::F32, Lit::Float(1.5)),
            Inst::Binary(BinaryOp::Sub, 2, 3),
            Inst::Const(Ty::F32, Lit::Float(0.0)),
            Inst::Binary(BinaryOp::Max, 4, 5),
            Inst::Binary(BinaryOp::Add, 0, 1),
        ],
        vec![6, 7],
    );
    let f64k = binary_kernel(Ty::F64, BinaryOp::Div);
    let i8k = binary_kernel(Ty::I8, BinaryOp::Sub);
    for (k, w) in [(&k, 4usize), (&f64k, 8), (&i8k, 1)] {
        let nt =
            codegen::compile_streaming(k, false).expect("compile").expect("a vector kernel has a streaming variant");
        assert!(nt.clif.contains("fence"), "{}", nt.clif);
        let plain = codegen::compile(k).expect("compile");
        let n = 300;
        let a: Vec<u8> = (0..n * w).map(|i| (i * 7 % 251) as u8).collect();
        let b: Vec<u8> = (0..n * w).map(|i| (i * 13 % 241 + 3) as u8 | 0x40).collect();
        let outs = vec![w; k.outputs.len()];
        for start in [0usize, 16, 64, 128] {
            for end in (start..=n).step_by(7).chain([n]) {
                let want = run_aligned(&plain, &[a.clone(), b.clone()], &outs, n, start, end);
                let got = run_aligned(&nt, &[a.clone(), b.clone()], &outs, n, start, end);
                assert_eq!(got, want, "width {w}, {start}..{end}");
            }
        }
    }
    // Spot-check the f32 values themselves at one element (worked by hand): a = 2, b = 3 gives
    // (6 − 1.5) max 0 = 4.5 and 5.
    let nt = codegen::compile_streaming(&k, false).unwrap().unwrap();
    let a: Vec<u8> = bytes(&[2f32; 32]);
    let b: Vec<u8> = bytes(&[3f32; 32]);
    let got = run_aligned(&nt, &[a, b], &[4, 4], 32, 0, 32);
    assert_eq!((elems::<f32>(&got[0]), elems::<f32>(&got[1])), (vec![4.5; 32], vec![5.0; 32]));

    let mut red = LoopKernel::elementwise(ElemTy::F32, vec![Access::Full], vec![Inst::Load(0)], vec![]);
    red.reduce = Some(tensorjit::codegen::Reduction {
        outer: 1,
        red: 64,
        inner: 1,
        outputs: vec![(tensorjit::ir::op::ReduceKind::Sum, 0)],
        ordered: false,
    });
    assert!(codegen::compile_streaming(&red, false).expect("compile").is_none());
}

/// Every f16 and bf16 bit pattern converts to f32 exactly in the vector loop (four halves per
/// vector) and in the scalar tail, as the `half` crate converts them.
#[test]
fn half_to_f32_vector_conversions_match_the_half_crate_on_every_pattern() {
    let n = 1usize << 16;
    let pats: Vec<u16> = (0..=u16::MAX).collect();
    for from in [Ty::F16, Ty::BF16] {
        let k = convert_kernel(from, Ty::F32);
        let clif = codegen::compile(&k).unwrap().clif;
        assert!(clif.contains("f32x4") && clif.contains("uwiden_low"), "{from:?} → F32 vectorised:\n{clif}");
        // 4..n − 2: the range starts past the array start and ends in a scalar tail.
        let out = elems::<f32>(&run_range(&k, &[bytes(&pats)], n, 4, n - 2)[0]);
        for (i, &p) in pats.iter().enumerate().take(n - 2).skip(4) {
            let want =
                if from == Ty::F16 { half::f16::from_bits(p).to_f32() } else { half::bf16::from_bits(p).to_f32() };
            assert!(
                out[i].to_bits() == want.to_bits() || (out[i].is_nan() && want.is_nan()),
                "{from:?} {p:#06x}: {} vs {want}",
                out[i]
            );
        }
    }
}

/// Every f16 and bf16 pattern survives a vector load, a negation and a store: the sign flips,
/// every other bit stays (NaNs stay NaN).
#[test]
fn every_half_pattern_survives_load_neg_store() {
    let n = 1usize << 16;
    let pats: Vec<u16> = (0..=u16::MAX).collect();
    for ty in [Ty::F16, Ty::BF16] {
        let k = kernel(vec![ty], vec![Access::Full], vec![Inst::Load(0), Inst::Unary(UnaryOp::Neg, 0)], vec![1]);
        assert!(codegen::compile(&k).unwrap().clif.contains("f32x4"), "{ty:?}");
        let out = elems::<u16>(&run(&k, &[bytes(&pats)], n)[0]);
        let nan = |h: u16| {
            if ty == Ty::F16 { half::f16::from_bits(h).is_nan() } else { half::bf16::from_bits(h).is_nan() }
        };
        for (&p, &o) in pats.iter().zip(&out) {
            if nan(p) {
                assert!(nan(o), "{ty:?} {p:#06x} → {o:#06x}");
            } else {
                assert_eq!(o, p ^ 0x8000, "{ty:?} {p:#06x}");
            }
        }
    }
}

/// f32 → f16 / bf16 in the vector loop rounds to nearest even like the `half` crate: every
/// half value, the ties halfway to its neighbour, one f32 ulp either side of each tie, and
/// specials (±0, ±Inf, NaN, overflow, subnormal results).
#[test]
fn f32_to_half_vector_conversions_round_like_the_half_crate() {
    for to in [Ty::F16, Ty::BF16] {
        let mut xs: Vec<f32> = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, 1e30, -1e-30];
        xs.extend([65519.0, 65520.0, f32::MAX, f32::MIN_POSITIVE, 2f32.powi(-25), 3.0 * 2f32.powi(-25)]);
        for p in 0..=u16::MAX {
            let (v, next) = if to == Ty::F16 {
                (half::f16::from_bits(p).to_f32(), half::f16::from_bits(p.wrapping_add(1)).to_f32())
            } else {
                (half::bf16::from_bits(p).to_f32(), half::bf16::from_bits(p.wrapping_add(1)).to_f32())
            };
            if !v.is_finite() || !next.is_finite() {
                continue;
            }
            let mid = ((v as f64 + next as f64) / 2.0) as f32;
            xs.extend([v, mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits() - 1)]);
        }
        let k = convert_kernel(Ty::F32, to);
        let clif = codegen::compile(&k).unwrap().clif;
        assert!(clif.contains("f32x4") && clif.contains("unarrow"), "F32 → {to:?} vectorised:\n{clif}");
        let out = elems::<u16>(&run(&k, &[bytes(&xs)], xs.len())[0]);
        for (&x, &h) in xs.iter().zip(&out) {
            let want = if to == Ty::F16 { half::f16::from_f32(x).to_bits() } else { half::bf16::from_f32(x).to_bits() };
            assert_eq!(h, want, "{to:?} {x:e} ({:#010x})", x.to_bits());
        }
    }
}

/// A half chain runs in f32x4 lanes and rounds after every op: out = (a·b + a) / b, max(·, s)
/// with a scalar s, against the same steps through the `half` crate, for every tail length.
#[test]
fn half_arithmetic_vectorises_and_rounds_every_step() {
    for ty in [Ty::F16, Ty::BF16] {
        let k = kernel(
            vec![ty, ty, ty],
            vec![Access::Full, Access::Full, Access::Scalar],
            vec![
                Inst::Load(0),
                Inst::Load(1),
                Inst::Load(2),
                Inst::Binary(BinaryOp::Mul, 0, 1),
                Inst::Binary(BinaryOp::Add, 3, 0),
                Inst::Binary(BinaryOp::Div, 4, 1),
                Inst::Binary(BinaryOp::Max, 5, 2),
            ],
            vec![6],
        );
        assert!(codegen::compile(&k).unwrap().clif.contains("f32x4"), "{ty:?}");
        type Codec = (fn(f32) -> u16, fn(u16) -> f32);
        let (to, from): Codec = if ty == Ty::F16 {
            (|x| half::f16::from_f32(x).to_bits(), |h| half::f16::from_bits(h).to_f32())
        } else {
            (|x| half::bf16::from_f32(x).to_bits(), |h| half::bf16::from_bits(h).to_f32())
        };
        let r = |x: f32| from(to(x));
        for n in [0usize, 1, 4, 7, 16, 17, 31, 64, 67] {
            let a: Vec<u16> = (0..n).map(|i| to(1.0 + i as f32 * 0.377)).collect();
            let b: Vec<u16> = (0..n).map(|i| to(0.3 + (i % 5) as f32 * 1.13)).collect();
            let s = to(2.5);
            let out = elems::<u16>(&run(&k, &[bytes(&a), bytes(&b), bytes(&[s])], n)[0]);
            for i in 0..n {
                let (x, y) = (from(a[i]), from(b[i]));
                let want = to(r(r(r(x * y) + x) / y).max(2.5));
                assert_eq!(out[i], want, "{ty:?} n={n} i={i}");
            }
        }
    }
}

/// Half reductions vectorise over contiguous rows and accumulate in f32 (rounded once at the
/// store): row max and row sum of small integers (exact in any order).
#[test]
fn half_row_reductions_vectorise() {
    use tensorjit::codegen::Reduction;
    use tensorjit::ir::op::ReduceKind;
    let (rows, red) = (3usize, 37usize);
    let k = LoopKernel {
        in_tys: vec![Ty::F16],
        inputs: vec![Access::Full],
        insts: vec![Inst::Load(0)],
        outputs: vec![],
        reduce: Some(Reduction {
            outer: rows,
            red,
            inner: 1,
            outputs: vec![(ReduceKind::Max, 0), (ReduceKind::Sum, 0)],
            ordered: false,
        }),
    };
    let c = codegen::compile(&k).unwrap();
    assert!(c.clif.contains("f32x4"));
    let vals: Vec<f32> = (0..rows * red).map(|i| ((i * 7) % 23) as f32 - 11.0).collect();
    let x: Vec<u16> = vals.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let mut mx = vec![0u16; rows];
    let mut sm = vec![0u16; rows];
    let ptrs = [x.as_ptr() as *mut u8, mx.as_mut_ptr().cast::<u8>(), sm.as_mut_ptr().cast::<u8>()];
    // SAFETY: x holds rows·red halves; each output rows halves.
    unsafe { c.run(&ptrs, 0, rows) };
    for r in 0..rows {
        let row = &vals[r * red..(r + 1) * red];
        let want_max = row.iter().cloned().fold(f32::MIN, f32::max);
        let want_sum: f32 = row.iter().sum();
        assert_eq!(half::f16::from_bits(mx[r]).to_f32(), want_max, "row {r}");
        assert_eq!(half::f16::from_bits(sm[r]).to_f32(), want_sum, "row {r}");
    }
}

/// Same-width int ↔ float and Bool ↔ float conversions stay in the 32-bit vector loop:
/// i32 → f32 rounds to nearest even, u32 → f32 too (2³² − 1 → 2³²), f32 → i32 / u32 truncate
/// and saturate (NaN → 0), Bool → f32 gives 0/1, f32 → Bool is x ≠ 0 (NaN → true),
/// and i32 → f16 rounds the exact value once.
#[test]
fn same_width_int_bool_float_conversions_vectorise() {
    let vec_of = |k: &LoopKernel| codegen::compile(k).unwrap().clif.contains("x4");
    let i = [16_777_217i32, -16_777_219, 0, -1, i32::MAX, i32::MIN, 7, 2049];
    let k = convert_kernel(Ty::I32, Ty::F32);
    assert!(vec_of(&k));
    assert_eq!(
        elems::<f32>(&run(&k, &[bytes(&i)], 8)[0]),
        vec![16_777_216.0, -16_777_220.0, 0.0, -1.0, 2_147_483_648.0, -2_147_483_648.0, 7.0, 2049.0]
    );
    let k = convert_kernel(Ty::I32, Ty::F16);
    assert!(vec_of(&k));
    // 2049 ties between 2048 and 2050 (f16 spacing 2 there): even → 2048 (0x6800); i32::MAX → Inf.
    assert_eq!(
        elems::<u16>(&run(&k, &[bytes(&i)], 8)[0]),
        vec![0x7C00, 0xFC00, 0x0000, 0xBC00, 0x7C00, 0xFC00, 0x4700, 0x6800]
    );
    let u = [u32::MAX, 1, 0x8000_0001, 3, 16_777_217, 0, 9, 10];
    let k = convert_kernel(Ty::U32, Ty::F32);
    assert!(vec_of(&k));
    assert_eq!(
        elems::<f32>(&run(&k, &[bytes(&u)], 8)[0]),
        vec![4_294_967_296.0, 1.0, 2_147_483_648.0, 3.0, 16_777_216.0, 0.0, 9.0, 10.0]
    );
    let f = [2.9f32, -2.9, f32::NAN, 3e9, -3e9, -0.5, 1e-3, 4_294_967_040.0];
    let k = convert_kernel(Ty::F32, Ty::I32);
    assert!(vec_of(&k));
    assert_eq!(elems::<i32>(&run(&k, &[bytes(&f)], 8)[0]), vec![2, -2, 0, i32::MAX, i32::MIN, 0, 0, i32::MAX]);
    let k = convert_kernel(Ty::F32, Ty::U32);
    assert!(vec_of(&k));
    assert_eq!(elems::<u32>(&run(&k, &[bytes(&f)], 8)[0]), vec![2, 0, 0, 3_000_000_000, 0, 0, 0, 4_294_967_040]);
    let k = convert_kernel(Ty::Bool, Ty::F32);
    assert!(vec_of(&k));
    assert_eq!(
        elems::<f32>(&run(&k, &[vec![1u8, 0, 0, 1, 1, 1, 0, 1, 0]], 9)[0]),
        vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    );
    let k = convert_kernel(Ty::F32, Ty::Bool);
    assert!(vec_of(&k));
    assert_eq!(run(&k, &[bytes(&f)], 8)[0], vec![1, 1, 1, 1, 1, 1, 1, 1]);
    let z = [0.0f32, -0.0, 1.0, 0.0, f32::NAN, 0.0, -0.0, 5.0];
    assert_eq!(run(&k, &[bytes(&z)], 8)[0], vec![0, 0, 1, 0, 1, 0, 0, 1]);
    let k = convert_kernel(Ty::Bool, Ty::F16);
    assert!(vec_of(&k));
    assert_eq!(elems::<u16>(&run(&k, &[vec![1u8, 0, 1, 1, 0]], 5)[0]), vec![0x3C00, 0, 0x3C00, 0x3C00, 0]);
}
