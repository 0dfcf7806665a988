//! Shape inference through the `Function` API for the basic ops: elementwise, conversions, shape
//! manipulation, reductions, cumulative ops and barriers (catalogue §2, §4.0–§4.6, §4.12, §9, §10).
//!
//! Expected shapes are worked out by hand from the catalogue; every rejected call is checked to
//! name the op and to leave the module unchanged.

use std::fmt::Debug;
use std::sync::Arc;

use tensorjit::api::{Backend, Builder, Function, ReshapeSpec, Value};
use tensorjit::ir::dtype::SUPPORTED_DTYPES;
use tensorjit::ir::op::{ArithReduce, BinaryOp, CompareOp, PadAxis, ReduceKind, UnaryOp};
use tensorjit::{DType, Result, Shape};

use DType::*;

mod common;
use common::backend;

fn setup() -> (Arc<dyn Backend>, Builder, Function) {
    let be = backend();
    let b = be.builder("t");
    let f = b.main();
    (be, b, f)
}

// ------------------------------------------------------------------------------------------------
// Helpers.

fn par(f: &Function, dt: DType, dims: &[i64]) -> Value {
    f.parameter("p", Shape::new(dt, dims)).expect("parameter")
}

fn named(f: &Function, dt: DType, dims: &[i64], names: &[&str]) -> Value {
    f.parameter("p", Shape::with_names(dt, dims, names).expect("valid shape")).expect("parameter")
}

/// Dtype and dims of a successful result.
fn sh(f: &Function, r: Result<Value>) -> (DType, Vec<i64>) {
    let v = r.unwrap_or_else(|e| panic!("unexpected error: {e}"));
    let s = f.shape(v).expect("shape");
    (s.dtype, s.dims)
}

/// Full shape of a successful result.
fn full(f: &Function, r: Result<Value>) -> Shape {
    let v = r.unwrap_or_else(|e| panic!("unexpected error: {e}"));
    f.shape(v).expect("shape")
}

/// Runs `call`, which must fail with a message naming `op`, leaving the module unchanged.
fn fails<T: Debug>(b: &Builder, op: &str, call: impl FnOnce() -> Result<T>) -> String {
    let before = b.module();
    let r = call();
    let after = b.module();
    let msg = match r {
        Ok(v) => panic!("{op}: expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    };
    assert!(msg.contains(op), "error {msg:?} does not name {op}");
    assert_eq!(before, after, "{op}: module changed by a rejected call ({msg})");
    msg
}

fn s(dt: DType, dims: &[i64]) -> (DType, Vec<i64>) {
    (dt, dims.to_vec())
}

const SINT: [DType; 4] = [Int8, Int16, Int32, Int64];
const UINT: [DType; 4] = [Uint8, Uint16, Uint32, Uint64];
const FLT: [DType; 4] = [Float16, BFloat16, Float32, Float64];
const CPLX: [DType; 2] = [Complex64, Complex128];
const PACKED: [DType; 6] = [Int4, Uint4, Int2, Uint2, Int1, Uint1];

fn set(groups: &[&[DType]]) -> Vec<DType> {
    groups.iter().flat_map(|g| g.iter().copied()).collect()
}

// ------------------------------------------------------------------------------------------------
// Unary.

type UnaryFn = fn(&Function, Value) -> Result<Value>;

#[test]
fn unary_dtype_groups_and_output_dtypes() {
    let num = set(&[&SINT, &UINT, &FLT, &CPLX]);
    let signed = set(&[&SINT, &FLT, &CPLX]);
    let flt = set(&[&FLT]);
    let flt_c = set(&[&FLT, &CPLX]);
    let int = set(&[&SINT, &UINT]);
    let all = SUPPORTED_DTYPES.to_vec();
    let cplx = CPLX.to_vec();
    let boolean_only = vec![Bool];
    let real = |d: DType| match d {
        Complex64 => Float32,
        Complex128 => Float64,
        d => d,
    };
    let same = |d: DType| d;
    let boolean = |_: DType| Bool;
    #[allow(clippy::type_complexity)]
    let table: Vec<(&str, UnaryFn, &Vec<DType>, &dyn Fn(DType) -> DType)> = vec![
        ("Abs", Function::abs, &num, &real),
        ("Neg", Function::neg, &signed, &same),
        ("Sign", Function::sign, &num, &same),
        ("Ceil", Function::ceil, &flt, &same),
        ("Floor", Function::floor, &flt, &same),
        ("Round", Function::round, &flt, &same),
        ("Exp", Function::exp, &flt_c, &same),
        ("Expm1", Function::expm1, &flt_c, &same),
        ("Log", Function::log, &flt_c, &same),
        ("Log1p", Function::log1p, &flt_c, &same),
        ("Logistic", Function::logistic, &flt_c, &same),
        ("Sqrt", Function::sqrt, &flt_c, &same),
        ("Rsqrt", Function::rsqrt, &flt_c, &same),
        ("Cos", Function::cos, &flt_c, &same),
        ("Sin", Function::sin, &flt_c, &same),
        ("Tanh", Function::tanh, &flt_c, &same),
        ("Erf", Function::erf, &flt, &same),
        ("IsFinite", Function::is_finite, &flt, &boolean),
        ("IsNaN", Function::is_nan, &num, &boolean),
        ("LogicalNot", Function::logical_not, &boolean_only, &same),
        ("BitwiseNot", Function::bitwise_not, &int, &same),
        ("BitCount", Function::bit_count, &int, &same),
        ("Clz", Function::clz, &int, &same),
        ("Real", Function::real, &flt_c, &real),
        ("Imag", Function::imag, &flt_c, &real),
        ("Conj", Function::conj, &cplx, &same),
        ("Identity", Function::identity, &all, &same),
    ];
    assert_eq!(table.len(), 27);
    let (_be, b, f) = setup();
    for (name, method, accepted, out) in &table {
        for &dt in SUPPORTED_DTYPES.iter() {
            let x = par(&f, dt, &[2, 3]);
            if accepted.contains(&dt) {
                assert_eq!(sh(&f, method(&f, x)), s(out(dt), &[2, 3]), "{name} on {dt}");
            } else {
                let msg = fails(&b, name, || method(&f, x));
                assert!(msg.contains(&dt.to_string()), "{msg}");
            }
        }
    }
}

#[test]
fn unary_keeps_scalar_empty_and_unit_shapes() {
    let (_be, _b, f) = setup();
    for dims in [&[][..], &[0], &[1], &[1, 0, 4]] {
        let x = par(&f, Float32, dims);
        assert_eq!(sh(&f, f.exp(x)), s(Float32, dims));
        assert_eq!(sh(&f, f.is_finite(x)), s(Bool, dims));
        assert_eq!(sh(&f, f.unary(UnaryOp::Neg, x)), s(Float32, dims));
        let c = par(&f, Complex128, dims);
        assert_eq!(sh(&f, f.abs(c)), s(Float64, dims));
    }
}

// ------------------------------------------------------------------------------------------------
// Binary and comparisons.

type BinaryFn = fn(&Function, Value, Value) -> Result<Value>;

#[test]
fn binary_dtype_groups() {
    let num = set(&[&SINT, &UINT, &FLT, &CPLX]);
    let ordered = set(&[&SINT, &UINT, &FLT]);
    let flt = set(&[&FLT]);
    let int = set(&[&SINT, &UINT]);
    let boolean = vec![Bool];
    let table: Vec<(&str, BinaryFn, &Vec<DType>)> = vec![
        ("Add", Function::add, &num),
        ("Sub", Function::sub, &num),
        ("Mul", Function::mul, &num),
        ("Div", Function::div, &num),
        ("Rem", Function::rem, &ordered),
        ("Pow", Function::pow, &num),
        ("Atan2", Function::atan2, &flt),
        ("Max", Function::max, &num),
        ("Min", Function::min, &num),
        ("BitwiseAnd", Function::bitwise_and, &int),
        ("BitwiseOr", Function::bitwise_or, &int),
        ("BitwiseXor", Function::bitwise_xor, &int),
        ("LogicalAnd", Function::logical_and, &boolean),
        ("LogicalOr", Function::logical_or, &boolean),
        ("LogicalXor", Function::logical_xor, &boolean),
        ("ShiftLeft", Function::shift_left, &int),
        ("ShiftRightArithmetic", Function::shift_right_arithmetic, &int),
        ("ShiftRightLogical", Function::shift_right_logical, &int),
    ];
    let (_be, b, f) = setup();
    for (name, method, accepted) in &table {
        for &dt in SUPPORTED_DTYPES.iter() {
            let x = par(&f, dt, &[2, 1]);
            let y = par(&f, dt, &[1, 3]);
            if accepted.contains(&dt) {
                assert_eq!(sh(&f, method(&f, x, y)), s(dt, &[2, 3]), "{name} on {dt}");
            } else {
                fails(&b, name, || method(&f, x, y));
            }
        }
    }
}

#[test]
fn binary_broadcasting() {
    let (_be, b, f) = setup();
    let m23 = par(&f, Float32, &[2, 3]);
    let sc = par(&f, Float32, &[]);
    let c21 = par(&f, Float32, &[2, 1]);
    let r13 = par(&f, Float32, &[1, 3]);
    let z = par(&f, Float32, &[0]);
    let one = par(&f, Float32, &[1]);
    let v3 = par(&f, Float32, &[3]);
    let m24 = par(&f, Float32, &[2, 4]);
    assert_eq!(sh(&f, f.add(m23, sc)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.add(sc, m23)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.add(sc, sc)), s(Float32, &[]));
    assert_eq!(sh(&f, f.mul(c21, r13)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.mul(r13, c21)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.sub(c21, m23)), s(Float32, &[2, 3]));
    // A dim of 1 broadcasts to 0 (not the other way round).
    assert_eq!(sh(&f, f.add(z, one)), s(Float32, &[0]));
    assert_eq!(sh(&f, f.add(one, z)), s(Float32, &[0]));
    assert_eq!(sh(&f, f.add(z, sc)), s(Float32, &[0]));
    assert_eq!(sh(&f, f.binary(BinaryOp::Max, one, one)), s(Float32, &[1]));
    // No rank extension.
    let msg = fails(&b, "Add", || f.add(m23, v3));
    assert!(msg.contains("rank"), "{msg}");
    fails(&b, "Add", || f.add(m23, m24));
    fails(&b, "Add", || f.add(z, v3));
    // Dtypes must match.
    let i = par(&f, Int32, &[2, 3]);
    let msg = fails(&b, "Mul", || f.mul(m23, i));
    assert!(msg.contains("Float32") && msg.contains("Int32"), "{msg}");
    let isc = par(&f, Int32, &[]);
    fails(&b, "Pow", || f.pow(m23, isc));
}

#[test]
fn complex_from_parts() {
    let (_be, b, f) = setup();
    let re = par(&f, Float32, &[2, 3]);
    let im = par(&f, Float32, &[2, 3]);
    let sc = par(&f, Float32, &[]);
    assert_eq!(sh(&f, f.complex(re, im)), s(Complex64, &[2, 3]));
    assert_eq!(sh(&f, f.complex(sc, im)), s(Complex64, &[2, 3]));
    assert_eq!(sh(&f, f.complex(re, sc)), s(Complex64, &[2, 3]));
    let d = par(&f, Float64, &[4]);
    assert_eq!(sh(&f, f.complex(d, d)), s(Complex128, &[4]));
    let row = par(&f, Float32, &[1, 3]);
    fails(&b, "Complex", || f.complex(re, row));
    fails(&b, "Complex", || f.complex(re, d));
    for dt in [Float16, BFloat16, Int32, Complex64, Bool] {
        let x = par(&f, dt, &[2]);
        fails(&b, "Complex", || f.complex(x, x));
    }
}

#[test]
fn comparisons() {
    let ordered = set(&[&SINT, &UINT, &FLT]);
    let num = set(&[&SINT, &UINT, &FLT, &CPLX]);
    let table: Vec<(&str, BinaryFn, &Vec<DType>)> = vec![
        ("Equal", Function::equal, &num),
        ("NotEqual", Function::not_equal, &num),
        ("GreaterOrEqual", Function::greater_or_equal, &ordered),
        ("GreaterThan", Function::greater_than, &ordered),
        ("LessOrEqual", Function::less_or_equal, &ordered),
        ("LessThan", Function::less_than, &ordered),
        ("EqualTotalOrder", Function::equal_total_order, &num),
        ("NotEqualTotalOrder", Function::not_equal_total_order, &num),
        ("GreaterOrEqualTotalOrder", Function::greater_or_equal_total_order, &ordered),
        ("GreaterThanTotalOrder", Function::greater_than_total_order, &ordered),
        ("LessOrEqualTotalOrder", Function::less_or_equal_total_order, &ordered),
        ("LessThanTotalOrder", Function::less_than_total_order, &ordered),
    ];
    let (_be, b, f) = setup();
    for (name, method, accepted) in &table {
        for &dt in SUPPORTED_DTYPES.iter() {
            let x = par(&f, dt, &[3, 1]);
            let y = par(&f, dt, &[]);
            if accepted.contains(&dt) {
                assert_eq!(sh(&f, method(&f, x, y)), s(Bool, &[3, 1]), "{name} on {dt}");
            } else {
                fails(&b, name, || method(&f, x, y));
            }
        }
    }
    let x = par(&f, Float32, &[2, 1]);
    let y = par(&f, Float32, &[1, 5]);
    assert_eq!(sh(&f, f.compare(CompareOp::LessThan, true, x, y)), s(Bool, &[2, 5]));
    let z = par(&f, Float64, &[2, 1]);
    fails(&b, "LessThanTotalOrder", || f.compare(CompareOp::LessThan, true, x, z));
    let w = par(&f, Float32, &[3, 5]);
    fails(&b, "GreaterThan", || f.greater_than(x, w));
}

// ------------------------------------------------------------------------------------------------
// Clamp, Where, conversions.

#[test]
fn clamp_shapes_and_dtypes() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2, 3]);
    let lo = par(&f, Float32, &[]);
    let hi = par(&f, Float32, &[2, 3]);
    assert_eq!(sh(&f, f.clamp(lo, x, lo)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.clamp(hi, x, lo)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.clamp(lo, x, hi)), s(Float32, &[2, 3]));
    let xs = par(&f, Int32, &[]);
    assert_eq!(sh(&f, f.clamp(xs, xs, xs)), s(Int32, &[]));
    for dt in set(&[&SINT, &UINT, &FLT]) {
        let v = par(&f, dt, &[0]);
        assert_eq!(sh(&f, f.clamp(v, v, v)), s(dt, &[0]));
    }
    for dt in [Bool, Complex64, Int4] {
        let v = par(&f, dt, &[2]);
        fails(&b, "Clamp", || f.clamp(v, v, v));
    }
    let row = par(&f, Float32, &[3]);
    let col = par(&f, Float32, &[2, 1]);
    fails(&b, "Clamp", || f.clamp(row, x, lo));
    fails(&b, "Clamp", || f.clamp(lo, x, col));
    let i = par(&f, Int32, &[]);
    fails(&b, "Clamp", || f.clamp(i, x, lo));
    fails(&b, "Clamp", || f.clamp(lo, x, i));
    // A non-scalar x with scalar bounds keeps x's shape, but x may not be broadcast by the bounds.
    fails(&b, "Clamp", || f.clamp(hi, lo, lo));
}

#[test]
fn where_rules() {
    let (_be, b, f) = setup();
    let c23 = par(&f, Bool, &[2, 3]);
    let cs = par(&f, Bool, &[]);
    let t23 = par(&f, Int32, &[2, 3]);
    let ts = par(&f, Int32, &[]);
    let f23 = par(&f, Int32, &[2, 3]);
    assert_eq!(sh(&f, f.where_(c23, t23, f23)), s(Int32, &[2, 3]));
    assert_eq!(sh(&f, f.where_(c23, t23, ts)), s(Int32, &[2, 3]));
    assert_eq!(sh(&f, f.where_(c23, ts, f23)), s(Int32, &[2, 3]));
    assert_eq!(sh(&f, f.where_(cs, t23, f23)), s(Int32, &[2, 3]));
    assert_eq!(sh(&f, f.where_(cs, ts, ts)), s(Int32, &[]));
    // Both values scalar: the output takes cond's dims with the value dtype.
    assert_eq!(sh(&f, f.where_(c23, ts, ts)), s(Int32, &[2, 3]));
    for dt in [Bool, Float16, Uint64, Complex128] {
        let v = par(&f, dt, &[0]);
        let c = par(&f, Bool, &[0]);
        assert_eq!(sh(&f, f.where_(c, v, v)), s(dt, &[0]));
    }
    let cf = par(&f, Float32, &[2, 3]);
    fails(&b, "Where", || f.where_(cf, t23, f23));
    let g23 = par(&f, Int64, &[2, 3]);
    fails(&b, "Where", || f.where_(c23, t23, g23));
    let t3 = par(&f, Int32, &[3]);
    let t1 = par(&f, Int32, &[1]);
    fails(&b, "Where", || f.where_(cs, t3, t1));
    let c3 = par(&f, Bool, &[3]);
    fails(&b, "Where", || f.where_(c3, t23, f23));
    let c13 = par(&f, Bool, &[1, 3]);
    fails(&b, "Where", || f.where_(c13, t23, ts));
}

#[test]
fn convert_dtype_any_to_any() {
    let (_be, b, f) = setup();
    for &from in SUPPORTED_DTYPES.iter() {
        let x = par(&f, from, &[2, 3]);
        for &to in SUPPORTED_DTYPES.iter() {
            assert_eq!(sh(&f, f.convert_dtype(x, to)), s(to, &[2, 3]), "{from} -> {to}");
        }
        for bad in [F8E5M2, F8E4M3FN, F4E2M1FN, Token, Invalid] {
            let msg = fails(&b, "ConvertDType", || f.convert_dtype(x, bad));
            assert!(msg.contains(&bad.to_string()), "{msg}");
        }
    }
    let sc = par(&f, Float64, &[]);
    assert_eq!(sh(&f, f.convert_dtype(sc, Int4)), s(Int4, &[]));
}

#[test]
fn bitcast_widths() {
    let (_be, b, f) = setup();
    // Same width: dims kept.
    let x = par(&f, Float32, &[2, 3]);
    assert_eq!(sh(&f, f.bitcast(x, Int32)), s(Int32, &[2, 3]));
    assert_eq!(sh(&f, f.bitcast(x, Uint32)), s(Uint32, &[2, 3]));
    // Narrower: trailing axis of src_bits/dst_bits (U32 [1] -> U16 [1,2]; scalar -> [k]).
    let u = par(&f, Uint32, &[1]);
    assert_eq!(sh(&f, f.bitcast(u, Uint16)), s(Uint16, &[1, 2]));
    let us = par(&f, Uint32, &[]);
    assert_eq!(sh(&f, f.bitcast(us, Uint16)), s(Uint16, &[2]));
    let fs = par(&f, Float32, &[]);
    assert_eq!(sh(&f, f.bitcast(fs, Uint8)), s(Uint8, &[4]));
    let d = par(&f, Float64, &[3]);
    assert_eq!(sh(&f, f.bitcast(d, Int1)), s(Int1, &[3, 64]));
    let b8 = par(&f, Uint8, &[1]);
    assert_eq!(sh(&f, f.bitcast(b8, Int4)), s(Int4, &[1, 2]));
    // Wider: last axis of dst_bits/src_bits removed.
    let w = par(&f, Uint16, &[1, 2]);
    assert_eq!(sh(&f, f.bitcast(w, Uint32)), s(Uint32, &[1]));
    let w8 = par(&f, Uint8, &[4]);
    assert_eq!(sh(&f, f.bitcast(w8, Float32)), s(Float32, &[]));
    let n4 = par(&f, Int4, &[5, 2]);
    assert_eq!(sh(&f, f.bitcast(n4, Uint8)), s(Uint8, &[5]));
    // Bool counts as 8 bits.
    let bl = par(&f, Bool, &[3, 4]);
    assert_eq!(sh(&f, f.bitcast(bl, Uint32)), s(Uint32, &[3]));
    assert_eq!(sh(&f, f.bitcast(bl, Int8)), s(Int8, &[3, 4]));
    // Complex only to itself.
    let c = par(&f, Complex64, &[2]);
    assert_eq!(sh(&f, f.bitcast(c, Complex64)), s(Complex64, &[2]));
    fails(&b, "Bitcast", || f.bitcast(c, Uint64));
    fails(&b, "Bitcast", || f.bitcast(c, Float32));
    fails(&b, "Bitcast", || f.bitcast(d, Complex64));
    // Wider target with a wrong or missing last axis.
    let bad = par(&f, Uint16, &[1, 3]);
    fails(&b, "Bitcast", || f.bitcast(bad, Uint32));
    let s16 = par(&f, Uint16, &[]);
    fails(&b, "Bitcast", || f.bitcast(s16, Uint32));
    fails(&b, "Bitcast", || f.bitcast(x, F8E5M2));
    fails(&b, "Bitcast", || f.bitcast(x, Token));
}

// ------------------------------------------------------------------------------------------------
// Shape manipulation.

#[test]
fn reshape_and_transpose() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2, 3]);
    assert_eq!(sh(&f, f.reshape(x, &[3, 2])), s(Float32, &[3, 2]));
    assert_eq!(sh(&f, f.reshape(x, &[6])), s(Float32, &[6]));
    assert_eq!(sh(&f, f.reshape(x, &[1, 6, 1])), s(Float32, &[1, 6, 1]));
    let sc = par(&f, Int8, &[]);
    assert_eq!(sh(&f, f.reshape(sc, &[1, 1])), s(Int8, &[1, 1]));
    let z = par(&f, Float32, &[0, 3]);
    assert_eq!(sh(&f, f.reshape(z, &[3, 0, 7])), s(Float32, &[3, 0, 7]));
    let p = par(&f, Int4, &[4]);
    assert_eq!(sh(&f, f.reshape(p, &[2, 2])), s(Int4, &[2, 2]));
    fails(&b, "Reshape", || f.reshape(x, &[4]));
    fails(&b, "Reshape", || f.reshape(x, &[]));
    fails(&b, "Reshape", || f.reshape(x, &[-2, -3]));
    // -1 is a dynamic dim and x has none.
    fails(&b, "Reshape", || f.reshape(x, &[-1, 3]));

    let t = par(&f, Uint8, &[2, 3, 4]);
    assert_eq!(sh(&f, f.transpose(t, &[2, 0, 1])), s(Uint8, &[4, 2, 3]));
    assert_eq!(sh(&f, f.transpose(t, &[0, 1, 2])), s(Uint8, &[2, 3, 4]));
    assert_eq!(sh(&f, f.transpose(sc, &[])), s(Int8, &[]));
    assert_eq!(sh(&f, f.transpose(p, &[0])), s(Int4, &[4]));
    fails(&b, "Transpose", || f.transpose(t, &[0, 0, 1]));
    fails(&b, "Transpose", || f.transpose(t, &[0, 1]));
    fails(&b, "Transpose", || f.transpose(t, &[0, 1, 3]));
    fails(&b, "Transpose", || f.transpose(sc, &[0]));
}

#[test]
fn dynamic_reshape_specs() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2, 6]);
    let n = |name: &str| ReshapeSpec::Inferred { name: name.into() };
    // Static input, no runtime values: a static result (inferred 12/3 = 4), names kept.
    let r = full(&f, f.dynamic_reshape(x, &[ReshapeSpec::Static(3), n("n")]));
    assert_eq!((r.dtype, r.dims.clone()), s(Float32, &[3, 4]));
    assert_eq!(r.axis_name(1), "n");
    assert_eq!(sh(&f, f.dynamic_reshape(x, &[ReshapeSpec::Static(3), ReshapeSpec::Static(4)])), s(Float32, &[3, 4]));
    assert_eq!(sh(&f, f.dynamic_reshape(x, &[n("all")])), s(Float32, &[12]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[ReshapeSpec::Static(0), n("n")]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[ReshapeSpec::Static(5), n("n")]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[ReshapeSpec::Static(3), ReshapeSpec::Static(5)]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[n("a"), n("b")]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[ReshapeSpec::Static(-1), n("b")]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[ReshapeSpec::Static(12), n("")]));
    // A runtime size gives a dynamic axis named per spec.
    let v = par(&f, Int32, &[]);
    let dynspec = |name: &str, value: Value| ReshapeSpec::Dynamic { name: name.into(), value };
    let r = full(&f, f.dynamic_reshape(x, &[dynspec("batch", v), ReshapeSpec::Static(6)]));
    assert_eq!(r.dims, vec![-1, 6]);
    assert_eq!(r.axis_name(0), "batch");
    let r = full(&f, f.dynamic_reshape(x, &[dynspec("b", v), n("n")]));
    assert_eq!((r.axis_name(0), r.axis_name(1), r.dims.clone()), ("b", "n", vec![-1, -1]));
    let vf = par(&f, Float32, &[]);
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[dynspec("b", vf), ReshapeSpec::Static(6)]));
    let v1 = par(&f, Int64, &[1]);
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[dynspec("b", v1), ReshapeSpec::Static(6)]));
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[dynspec("", v), ReshapeSpec::Static(6)]));
    // 12 elements are not a multiple of 5.
    fails(&b, "DynamicReshape", || f.dynamic_reshape(x, &[dynspec("b", v), ReshapeSpec::Static(5)]));
}

#[test]
fn broadcast_in_dim_rules() {
    let (_be, b, f) = setup();
    // Catalogue examples.
    let x = par(&f, Float32, &[1, 2]);
    let target = Shape::new(Float32, &[2, 3, 2]);
    assert_eq!(sh(&f, f.broadcast_in_dim(x, &target, &[0, 2])), s(Float32, &[2, 3, 2]));
    let v = par(&f, Float32, &[2]);
    assert_eq!(sh(&f, f.broadcast_in_dim(v, &Shape::new(Float32, &[2, 2, 2]), &[1])), s(Float32, &[2, 2, 2]));
    // A permuting map is allowed.
    let m = par(&f, Int32, &[2, 3]);
    assert_eq!(sh(&f, f.broadcast_in_dim(m, &Shape::new(Int32, &[3, 2]), &[1, 0])), s(Int32, &[3, 2]));
    let sc = par(&f, Bool, &[]);
    assert_eq!(sh(&f, f.broadcast_in_dim(sc, &Shape::new(Bool, &[2, 0]), &[])), s(Bool, &[2, 0]));
    let one = par(&f, Float32, &[1]);
    assert_eq!(sh(&f, f.broadcast_in_dim(one, &Shape::new(Float32, &[0]), &[0])), s(Float32, &[0]));
    let p = par(&f, Uint4, &[3]);
    assert_eq!(sh(&f, f.broadcast_in_dim(p, &Shape::new(Uint4, &[4, 3]), &[1])), s(Uint4, &[4, 3]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &target, &[0]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &target, &[2, 2]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &target, &[0, 3]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(v, &Shape::new(Float32, &[3]), &[0]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(v, &Shape::new(Float64, &[2]), &[0]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(m, &Shape::new(Int32, &[2, 3]), &[1, 0]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(v, &Shape::new(Float32, &[2, -3]), &[0]));
}

#[test]
fn concatenate_rules() {
    let (_be, b, f) = setup();
    let a = par(&f, Float32, &[2, 3]);
    let c = par(&f, Float32, &[4, 3]);
    let e = par(&f, Float32, &[0, 3]);
    assert_eq!(sh(&f, f.concatenate(0, &[a, c])), s(Float32, &[6, 3]));
    assert_eq!(sh(&f, f.concatenate(0, &[a, c, e, a])), s(Float32, &[8, 3]));
    assert_eq!(sh(&f, f.concatenate(0, &[a])), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.concatenate(1, &[a, a])), s(Float32, &[2, 6]));
    let z = par(&f, Float32, &[2, 0]);
    assert_eq!(sh(&f, f.concatenate(1, &[z, a, z])), s(Float32, &[2, 3]));
    let p = par(&f, Int2, &[3]);
    assert_eq!(sh(&f, f.concatenate(0, &[p, p])), s(Int2, &[6]));
    fails(&b, "Concatenate", || f.concatenate(0, &[]));
    let sc = par(&f, Float32, &[]);
    fails(&b, "Concatenate", || f.concatenate(0, &[sc, sc]));
    let i = par(&f, Int32, &[2, 3]);
    fails(&b, "Concatenate", || f.concatenate(0, &[a, i]));
    let r1 = par(&f, Float32, &[3]);
    fails(&b, "Concatenate", || f.concatenate(0, &[a, r1]));
    fails(&b, "Concatenate", || f.concatenate(2, &[a, a]));
    fails(&b, "Concatenate", || f.concatenate(1, &[a, c]));
}

#[test]
fn slice_is_strict() {
    let (_be, b, f) = setup();
    let x = par(&f, Int32, &[5]);
    assert_eq!(sh(&f, f.slice(x, &[2], &[4], &[])), s(Int32, &[2]));
    assert_eq!(sh(&f, f.slice(x, &[2], &[5], &[2])), s(Int32, &[2]));
    assert_eq!(sh(&f, f.slice(x, &[0], &[5], &[2])), s(Int32, &[3]));
    assert_eq!(sh(&f, f.slice(x, &[0], &[5], &[7])), s(Int32, &[1]));
    assert_eq!(sh(&f, f.slice(x, &[2], &[2], &[])), s(Int32, &[0]));
    assert_eq!(sh(&f, f.slice(x, &[5], &[5], &[3])), s(Int32, &[0]));
    let m = par(&f, Int32, &[2, 3]);
    assert_eq!(sh(&f, f.slice(m, &[0, 1], &[2, 1], &[1, 1])), s(Int32, &[2, 0]));
    let sc = par(&f, Int32, &[]);
    assert_eq!(sh(&f, f.slice(sc, &[], &[], &[])), s(Int32, &[]));
    let p = par(&f, Uint1, &[16]);
    assert_eq!(sh(&f, f.slice(p, &[1], &[16], &[3])), s(Uint1, &[5]));
    fails(&b, "Slice", || f.slice(x, &[-1], &[4], &[]));
    fails(&b, "Slice", || f.slice(x, &[0], &[6], &[]));
    fails(&b, "Slice", || f.slice(x, &[3], &[2], &[]));
    fails(&b, "Slice", || f.slice(x, &[0], &[5], &[0]));
    fails(&b, "Slice", || f.slice(x, &[0], &[5], &[-1]));
    fails(&b, "Slice", || f.slice(m, &[0], &[2], &[]));
    fails(&b, "Slice", || f.slice(m, &[0, 0], &[2, 3], &[1]));
}

#[test]
fn dynamic_slice_and_update() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[5]);
    let i = par(&f, Int32, &[]);
    let j = par(&f, Uint64, &[]);
    assert_eq!(sh(&f, f.dynamic_slice(x, &[i], &[2])), s(Float32, &[2]));
    assert_eq!(sh(&f, f.dynamic_slice(x, &[i], &[0])), s(Float32, &[0]));
    assert_eq!(sh(&f, f.dynamic_slice(x, &[j], &[5])), s(Float32, &[5]));
    let m = par(&f, Int8, &[3, 4]);
    assert_eq!(sh(&f, f.dynamic_slice(m, &[i, j], &[1, 4])), s(Int8, &[1, 4]));
    let sc = par(&f, Float32, &[]);
    assert_eq!(sh(&f, f.dynamic_slice(sc, &[], &[])), s(Float32, &[]));
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[i], &[6]));
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[i], &[-1]));
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[], &[2]));
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[i, i], &[2]));
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[i], &[2, 1]));
    let fi = par(&f, Float32, &[]);
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[fi], &[2]));
    let vi = par(&f, Int32, &[1]);
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[vi], &[2]));

    let u = par(&f, Float32, &[2]);
    assert_eq!(sh(&f, f.dynamic_update_slice(x, u, &[i])), s(Float32, &[5]));
    let u0 = par(&f, Float32, &[0]);
    assert_eq!(sh(&f, f.dynamic_update_slice(x, u0, &[j])), s(Float32, &[5]));
    assert_eq!(sh(&f, f.dynamic_update_slice(x, x, &[i])), s(Float32, &[5]));
    let big = par(&f, Float32, &[6]);
    fails(&b, "DynamicUpdateSlice", || f.dynamic_update_slice(x, big, &[i]));
    let ui = par(&f, Int32, &[2]);
    fails(&b, "DynamicUpdateSlice", || f.dynamic_update_slice(x, ui, &[i]));
    let u2 = par(&f, Float32, &[1, 2]);
    fails(&b, "DynamicUpdateSlice", || f.dynamic_update_slice(x, u2, &[i]));
    fails(&b, "DynamicUpdateSlice", || f.dynamic_update_slice(x, u, &[]));
    fails(&b, "DynamicUpdateSlice", || f.dynamic_update_slice(x, u, &[fi]));
}

#[test]
fn pad_sizes() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[5]);
    let fill = par(&f, Float32, &[]);
    let pa = |start, end, interior| PadAxis { start, end, interior };
    // Catalogue examples: 5 − 2 + 4·1 = 7; 5 − 2 + 1 = 4; 5 + 2 − 3 + 4·2 = 12.
    assert_eq!(sh(&f, f.pad(x, fill, &[pa(-1, -1, 1)])), s(Float32, &[7]));
    assert_eq!(sh(&f, f.pad(x, fill, &[pa(-2, 1, 0)])), s(Float32, &[4]));
    assert_eq!(sh(&f, f.pad(x, fill, &[pa(2, -3, 2)])), s(Float32, &[12]));
    assert_eq!(sh(&f, f.pad(x, fill, &[])), s(Float32, &[5]));
    assert_eq!(sh(&f, f.pad(x, fill, &[pa(-5, 0, 0)])), s(Float32, &[0]));
    // An empty axis gets no interior padding: 0 + 1 + 1 = 2.
    let e = par(&f, Float32, &[0]);
    assert_eq!(sh(&f, f.pad(e, fill, &[pa(1, 1, 3)])), s(Float32, &[2]));
    // Configs for the leading axes only.
    let m = par(&f, Float32, &[2, 3]);
    assert_eq!(sh(&f, f.pad(m, fill, &[pa(1, 0, 0)])), s(Float32, &[3, 3]));
    assert_eq!(sh(&f, f.pad(m, fill, &[pa(0, 0, 0), pa(0, 0, 1)])), s(Float32, &[2, 5]));
    let sc = par(&f, Float32, &[]);
    assert_eq!(sh(&f, f.pad(sc, fill, &[])), s(Float32, &[]));
    let p = par(&f, Int4, &[3]);
    let pfill = par(&f, Int4, &[]);
    assert_eq!(sh(&f, f.pad(p, pfill, &[pa(1, 0, 0)])), s(Int4, &[4]));
    fails(&b, "Pad", || f.pad(x, fill, &[pa(-3, -3, 0)]));
    fails(&b, "Pad", || f.pad(x, fill, &[pa(0, 0, -1)]));
    fails(&b, "Pad", || f.pad(x, fill, &[pa(0, 0, 0), pa(1, 0, 0)]));
    let wrong = par(&f, Float64, &[]);
    fails(&b, "Pad", || f.pad(x, wrong, &[]));
    let vec_fill = par(&f, Float32, &[1]);
    fails(&b, "Pad", || f.pad(x, vec_fill, &[]));
}

#[test]
fn reverse_iota_and_dynamic_shape_ops() {
    let (_be, b, f) = setup();
    let x = par(&f, Complex64, &[2, 3]);
    assert_eq!(sh(&f, f.reverse(x, &[1])), s(Complex64, &[2, 3]));
    assert_eq!(sh(&f, f.reverse(x, &[1, 0])), s(Complex64, &[2, 3]));
    assert_eq!(sh(&f, f.reverse(x, &[])), s(Complex64, &[2, 3]));
    fails(&b, "Reverse", || f.reverse(x, &[0, 0]));
    fails(&b, "Reverse", || f.reverse(x, &[2]));

    assert_eq!(sh(&f, f.iota(&Shape::new(Float32, &[2, 3]), 1)), s(Float32, &[2, 3]));
    assert_eq!(sh(&f, f.iota(&Shape::new(Int64, &[5]), 0)), s(Int64, &[5]));
    assert_eq!(sh(&f, f.iota(&Shape::new(Uint8, &[0, 4]), 0)), s(Uint8, &[0, 4]));
    fails(&b, "Iota", || f.iota(&Shape::new(Float32, &[2, 3]), 2));
    fails(&b, "Iota", || f.iota(&Shape::new(Float32, &[]), 0));
    for dt in [Bool, Complex64, Int4, F8E5M2] {
        fails(&b, "Iota", || f.iota(&Shape::new(dt, &[3]), 0));
    }

    assert_eq!(sh(&f, f.dynamic_shape(x)), s(Int32, &[2]));
    let sc = par(&f, Bool, &[]);
    assert_eq!(sh(&f, f.dynamic_shape(sc)), s(Int32, &[0]));
    assert_eq!(sh(&f, f.dynamic_dimension_size(x, 1)), s(Int32, &[]));
    fails(&b, "DynamicDimensionSize", || f.dynamic_dimension_size(x, 2));
    fails(&b, "DynamicDimensionSize", || f.dynamic_dimension_size(sc, 0));
}

// ------------------------------------------------------------------------------------------------
// Reductions, ArgMinMax, cumulative ops.

type ReduceFn = fn(&Function, Value, &[usize]) -> Result<Value>;

#[test]
fn reductions() {
    let num = set(&[&SINT, &UINT, &FLT, &CPLX]);
    let int = set(&[&SINT, &UINT]);
    let boolean = vec![Bool];
    let table: Vec<(&str, ReduceFn, &Vec<DType>)> = vec![
        ("ReduceSum", Function::reduce_sum, &num),
        ("ReduceProduct", Function::reduce_product, &num),
        ("ReduceMax", Function::reduce_max, &num),
        ("ReduceMin", Function::reduce_min, &num),
        ("ReduceBitwiseAnd", Function::reduce_bitwise_and, &int),
        ("ReduceBitwiseOr", Function::reduce_bitwise_or, &int),
        ("ReduceBitwiseXor", Function::reduce_bitwise_xor, &int),
        ("ReduceLogicalAnd", Function::reduce_logical_and, &boolean),
        ("ReduceLogicalOr", Function::reduce_logical_or, &boolean),
        ("ReduceLogicalXor", Function::reduce_logical_xor, &boolean),
    ];
    let (_be, b, f) = setup();
    for (name, method, accepted) in &table {
        for &dt in SUPPORTED_DTYPES.iter() {
            let x = par(&f, dt, &[2, 3, 4]);
            if accepted.contains(&dt) {
                assert_eq!(sh(&f, method(&f, x, &[1])), s(dt, &[2, 4]), "{name} on {dt}");
                assert_eq!(sh(&f, method(&f, x, &[])), s(dt, &[]), "{name} on {dt}");
                assert_eq!(sh(&f, method(&f, x, &[2, 0])), s(dt, &[3]), "{name} on {dt}");
                assert_eq!(sh(&f, method(&f, x, &[0, 1, 2])), s(dt, &[]), "{name} on {dt}");
                fails(&b, name, || method(&f, x, &[3]));
                fails(&b, name, || method(&f, x, &[1, 1]));
            } else {
                fails(&b, name, || method(&f, x, &[1]));
            }
        }
    }
    let z = par(&f, Float32, &[0, 3]);
    assert_eq!(sh(&f, f.reduce_max(z, &[0])), s(Float32, &[3]));
    assert_eq!(sh(&f, f.reduce_sum(z, &[1])), s(Float32, &[0]));
    let sc = par(&f, Int32, &[]);
    assert_eq!(sh(&f, f.reduce_sum(sc, &[])), s(Int32, &[]));
    fails(&b, "ReduceSum", || f.reduce_sum(sc, &[0]));
    assert_eq!(sh(&f, f.reduce(ReduceKind::Product, z, &[1, 0])), s(Float32, &[]));
}

#[test]
fn arg_min_max_rules() {
    let (_be, b, f) = setup();
    for dt in set(&[&SINT, &UINT, &FLT]) {
        let x = par(&f, dt, &[2, 3]);
        assert_eq!(sh(&f, f.arg_min_max(x, 1, Int32, false)), s(Int32, &[2]));
        assert_eq!(sh(&f, f.arg_min_max(x, 0, Uint8, true)), s(Uint8, &[3]));
    }
    // Only the reduced axis must be non-empty.
    let z = par(&f, Float32, &[2, 0]);
    assert_eq!(sh(&f, f.arg_min_max(z, 0, Int64, true)), s(Int64, &[0]));
    let msg = fails(&b, "ArgMinMax", || f.arg_min_max(z, 1, Int64, true));
    assert!(msg.contains("empty"), "{msg}");
    let v = par(&f, Float32, &[1]);
    assert_eq!(sh(&f, f.arg_min_max(v, 0, Int32, false)), s(Int32, &[]));
    for dt in [Complex64, Bool, Int4] {
        let x = par(&f, dt, &[3]);
        fails(&b, "ArgMinMax", || f.arg_min_max(x, 0, Int32, false));
    }
    let sc = par(&f, Float32, &[]);
    fails(&b, "ArgMinMax", || f.arg_min_max(sc, 0, Int32, false));
    let x = par(&f, Float32, &[2, 3]);
    fails(&b, "ArgMinMax", || f.arg_min_max(x, 2, Int32, false));
    for out in [Float32, Bool, Complex64, Int4, F8E4M3] {
        fails(&b, "ArgMinMax", || f.arg_min_max(x, 0, out, false));
    }
}

type CumFn = fn(&Function, Value, usize, bool, bool) -> Result<Value>;

#[test]
fn cumulative_ops() {
    let table: Vec<(&str, CumFn)> = vec![
        ("CumSum", Function::cum_sum),
        ("CumProd", Function::cum_prod),
        ("CumMax", Function::cum_max),
        ("CumMin", Function::cum_min),
    ];
    let num = set(&[&SINT, &UINT, &FLT, &CPLX]);
    let (_be, b, f) = setup();
    for (name, method) in &table {
        for &dt in SUPPORTED_DTYPES.iter() {
            let x = par(&f, dt, &[3, 4]);
            if num.contains(&dt) {
                assert_eq!(sh(&f, method(&f, x, 1, false, false)), s(dt, &[3, 4]), "{name} on {dt}");
                assert_eq!(sh(&f, method(&f, x, 0, true, true)), s(dt, &[3, 4]), "{name} on {dt}");
                fails(&b, name, || method(&f, x, 2, false, false));
            } else {
                fails(&b, name, || method(&f, x, 0, false, false));
            }
        }
        let sc = par(&f, Float32, &[]);
        fails(&b, name, || method(&f, sc, 0, false, false));
        let z = par(&f, Int16, &[0]);
        assert_eq!(sh(&f, method(&f, z, 0, true, false)), s(Int16, &[0]));
    }
    let x = par(&f, Float64, &[5]);
    assert_eq!(sh(&f, f.cumulative(ArithReduce::Sum, x, 0, false, true)), s(Float64, &[5]));
}

// ------------------------------------------------------------------------------------------------
// Barriers.

#[test]
fn barriers() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2]);
    let y = par(&f, Int4, &[]);
    let z = par(&f, Bool, &[0, 3]);
    let outs = f.optimization_barrier(&[x, y, z]).expect("barrier");
    assert_eq!(outs.len(), 3);
    assert_eq!(sh(&f, Ok(outs[0])), s(Float32, &[2]));
    assert_eq!(sh(&f, Ok(outs[1])), s(Int4, &[]));
    assert_eq!(sh(&f, Ok(outs[2])), s(Bool, &[0, 3]));
    assert!(outs.iter().all(|o| ![x, y, z].contains(o)), "barrier outputs are new values");
    fails(&b, "OptimizationBarrier", || f.optimization_barrier(&[]));
    assert_eq!(sh(&f, f.scheduling_barrier(x, &[y, z])), s(Float32, &[2]));
    assert_eq!(sh(&f, f.scheduling_barrier(z, &[])), s(Bool, &[0, 3]));
}

// ------------------------------------------------------------------------------------------------
// Ownership and visibility of operands.

#[test]
fn operands_must_belong_to_this_builder_and_be_visible() {
    let (be, b, f) = setup();
    let b2 = be.builder("other");
    let f2 = b2.main();
    let foreign = par(&f2, Float32, &[2]);
    let x = par(&f, Float32, &[2]);
    let msg = fails(&b, "Add", || f.add(x, foreign));
    assert!(msg.contains("another builder"), "{msg}");
    fails(&b, "Neg", || f.neg(foreign));
    fails(&b, "ReduceSum", || f.reduce_sum(foreign, &[]));
    fails(&b, "Slice", || f.slice(foreign, &[0], &[1], &[]));
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(foreign, &Shape::new(Float32, &[2]), &[0]));

    // A closure may read its ancestors' values.
    let c1 = f.closure().expect("closure");
    let c2 = f.closure().expect("closure");
    let y = par(&c1, Float32, &[2]);
    assert_eq!(sh(&c1, c1.add(x, y)), s(Float32, &[2]));
    let nested = c1.closure().expect("nested closure");
    assert_eq!(sh(&nested, nested.mul(x, y)), s(Float32, &[2]));
    // A sibling closure's value is not visible.
    let msg = fails(&b, "Add", || c2.add(x, y));
    assert!(msg.contains("not visible"), "{msg}");
    fails(&b, "Concatenate", || c2.concatenate(0, &[x, y]));
    // Nor is a child's value visible from the parent.
    fails(&b, "Sub", || f.sub(x, y));
    fails(&b, "OptimizationBarrier", || f.optimization_barrier(&[x, y]));
    fails(&b, "SchedulingBarrier", || f.scheduling_barrier(x, &[y]));
    let i = par(&c1, Int32, &[]);
    fails(&b, "DynamicSlice", || f.dynamic_slice(x, &[i], &[1]));
}

#[test]
fn returned_function_is_frozen() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2]);
    let y = f.exp(x).expect("exp");
    f.return_(&[y]).expect("return");
    fails(&b, "Exp", || f.exp(x));
}

// ------------------------------------------------------------------------------------------------
// Dynamic axes (§2).

#[test]
fn dynamic_axes_in_elementwise_ops() {
    let (_be, b, f) = setup();
    let x = named(&f, Float32, &[-1, 3], &["batch", ""]);
    let y = named(&f, Float32, &[-1, 3], &["batch", ""]);
    let one = par(&f, Float32, &[1, 3]);
    let sc = par(&f, Float32, &[]);
    let r = full(&f, f.add(x, y));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3], "batch"));
    let r = full(&f, f.mul(one, x));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3], "batch"));
    let r = full(&f, f.sub(x, sc));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3], "batch"));
    let r = full(&f, f.exp(x));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3], "batch"));
    let r = full(&f, f.less_than(x, y));
    assert_eq!((r.dtype, r.axis_name(0)), (Bool, "batch"));
    let s2 = named(&f, Float32, &[-1, 3], &["seq", ""]);
    let msg = fails(&b, "Add", || f.add(x, s2));
    assert!(msg.contains("batch") && msg.contains("seq"), "{msg}");
    let four = par(&f, Float32, &[4, 3]);
    fails(&b, "Add", || f.add(x, four));
    // Names on static axes unify too: "" + x → x, x + y → error.
    let rows = named(&f, Float32, &[2, 3], &["rows", ""]);
    let plain = par(&f, Float32, &[2, 3]);
    let cols = named(&f, Float32, &[2, 3], &["cols", ""]);
    assert_eq!(full(&f, f.add(plain, rows)).axis_name(0), "rows");
    fails(&b, "Add", || f.add(rows, cols));
    let anon = named(&f, Float32, &[-1], &["?"]);
    fails(&b, "Add", || f.add(anon, anon));
    // Where and Clamp keep the names.
    let c = named(&f, Bool, &[-1, 3], &["batch", ""]);
    assert_eq!(full(&f, f.where_(c, x, sc)).axis_name(0), "batch");
    assert_eq!(full(&f, f.clamp(sc, x, sc)).axis_name(0), "batch");
}

#[test]
fn dynamic_axes_in_shape_ops() {
    let (_be, b, f) = setup();
    let x = named(&f, Float32, &[-1, 3, 4], &["batch", "", ""]);
    // Slice: full range keeps the axis; static bounds give a static unnamed dim; else error.
    let r = full(&f, f.slice(x, &[0, 0, 1], &[-1, 3, 3], &[]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3, 2], "batch"));
    let r = full(&f, f.slice(x, &[1, 0, 0], &[3, 3, 4], &[]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![2, 3, 4], ""));
    fails(&b, "Slice", || f.slice(x, &[1, 0, 0], &[-1, 3, 4], &[]));
    fails(&b, "Slice", || f.slice(x, &[0, 0, 0], &[-1, 3, 4], &[2, 1, 1]));
    // Pad: only zero configs on dynamic axes.
    let fill = par(&f, Float32, &[]);
    let zero = PadAxis::default();
    assert_eq!(full(&f, f.pad(x, fill, &[zero, PadAxis { start: 1, end: 1, interior: 0 }])).dims, vec![-1, 5, 4]);
    fails(&b, "Pad", || f.pad(x, fill, &[PadAxis { start: 1, end: 0, interior: 0 }]));
    // Reshape: same number of dynamic axes, names mapped in order.
    let r = full(&f, f.reshape(x, &[-1, 12]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 12], "batch"));
    let r = full(&f, f.reshape(x, &[2, 6, -1]));
    assert_eq!((r.dims.clone(), r.axis_name(2)), (vec![2, 6, -1], "batch"));
    fails(&b, "Reshape", || f.reshape(x, &[-1, 5]));
    fails(&b, "Reshape", || f.reshape(x, &[-1, -1, 12]));
    fails(&b, "Reshape", || f.reshape(x, &[12, 4]));
    // Transpose and reduce carry the names.
    let r = full(&f, f.transpose(x, &[1, 2, 0]));
    assert_eq!((r.dims.clone(), r.axis_name(2)), (vec![3, 4, -1], "batch"));
    let r = full(&f, f.reduce_sum(x, &[1]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 4], "batch"));
    assert_eq!(full(&f, f.reduce_sum(x, &[0])).dims, vec![3, 4]);
    // Bitcast cannot consume a dynamic last axis.
    let u = named(&f, Uint16, &[3, -1], &["", "k"]);
    fails(&b, "Bitcast", || f.bitcast(u, Uint32));
    let r = full(&f, f.bitcast(u, Uint8));
    assert_eq!((r.dims.clone(), r.axis_name(1)), (vec![3, -1, 2], "k"));
    // Concatenate on a dynamic axis gives a symbolic sum name.
    let y = named(&f, Float32, &[2, 3, 4], &["", "", ""]);
    let r = full(&f, f.concatenate(0, &[x, y]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3, 4], "=batch+2"));
    let a = named(&f, Float32, &[-1], &["a"]);
    let bb = named(&f, Float32, &[-1], &["b"]);
    assert_eq!(full(&f, f.concatenate(0, &[bb, a])).axis_name(0), "=a+b");
    let ab = full(&f, f.concatenate(0, &[bb, a]));
    assert_eq!(ab.dims, vec![-1]);
    let other = named(&f, Float32, &[-1, 3, 4], &["seq", "", ""]);
    fails(&b, "Concatenate", || f.concatenate(1, &[x, other]));
    // DynamicShape of a dynamic tensor is still Int32 [rank].
    assert_eq!(sh(&f, f.dynamic_shape(x)), s(Int32, &[3]));
}

#[test]
fn dynamic_axes_in_broadcast_and_iota() {
    let (_be, b, f) = setup();
    let x = named(&f, Float32, &[-1, 3], &["batch", ""]);
    let t = Shape::with_names(Float32, &[-1, 3, 2], &["batch", "", ""]).unwrap();
    let r = full(&f, f.broadcast_in_dim(x, &t, &[0, 1]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3, 2], "batch"));
    // A dynamic input axis cannot be broadcast to a static or differently named axis.
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &Shape::new(Float32, &[4, 3, 2]), &[0, 1]));
    let seq = Shape::with_names(Float32, &[-1, 3, 2], &["seq", "", ""]).unwrap();
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &seq, &[0, 1]));
    // New dynamic axes need a name bound by a parameter ("batch" is; "zzz" is not).
    let v = par(&f, Float32, &[3]);
    let bound = Shape::with_names(Float32, &[-1, 3], &["batch", ""]).unwrap();
    let r = full(&f, f.broadcast_in_dim(v, &bound, &[1]));
    assert_eq!((r.dims.clone(), r.axis_name(0)), (vec![-1, 3], "batch"));
    let one = par(&f, Float32, &[1]);
    assert_eq!(full(&f, f.broadcast_in_dim(one, &bound, &[0])).dims, vec![-1, 3]);
    let unbound = Shape::with_names(Float32, &[-1, 3], &["zzz", ""]).unwrap();
    let msg = fails(&b, "BroadcastInDim", || f.broadcast_in_dim(v, &unbound, &[1]));
    assert!(msg.contains("zzz"), "{msg}");
    // A static dim > 1 cannot grow into a dynamic axis.
    let three = par(&f, Float32, &[3]);
    let dyn3 = Shape::with_names(Float32, &[-1], &["batch"]).unwrap();
    fails(&b, "BroadcastInDim", || f.broadcast_in_dim(three, &dyn3, &[0]));
    // Iota on a bound dynamic axis.
    let it = Shape::with_names(Int32, &[-1, 2], &["batch", ""]).unwrap();
    assert_eq!(full(&f, f.iota(&it, 0)).dims, vec![-1, 2]);
    let it_bad = Shape::with_names(Int32, &[-1, 2], &["nope", ""]).unwrap();
    fails(&b, "Iota", || f.iota(&it_bad, 0));
}

#[test]
fn declared_only_dtypes_are_rejected_everywhere() {
    let (_be, b, f) = setup();
    let x = par(&f, Float32, &[2]);
    for bad in [F8E5M2, F8E4M3FN, F8E4M3B11FNUZ, F8E5M2FNUZ, F8E4M3FNUZ, F8E4M3, F8E3M4, F8E8M0FNU, F4E2M1FN] {
        fails(&b, "ConvertDType", || f.convert_dtype(x, bad));
        fails(&b, "Bitcast", || f.bitcast(x, bad));
        fails(&b, "Iota", || f.iota(&Shape::new(bad, &[2]), 0));
        fails(&b, "ArgMinMax", || f.arg_min_max(x, 0, bad, true));
        fails(&b, "BroadcastInDim", || f.broadcast_in_dim(x, &Shape::new(bad, &[2]), &[0]));
        // Parameters of such dtypes cannot even be created.
        assert!(f.parameter("bad", Shape::new(bad, &[2])).is_err());
    }
}

#[test]
fn packed_dtypes_are_storage_only() {
    // §1 / §9: sub-byte dtypes are accepted by ConvertDType, Bitcast and data movement, never by
    // arithmetic.
    for &dt in PACKED.iter() {
        let (_be, b, f) = setup();
        let x = par(&f, dt, &[4]);
        let y = par(&f, dt, &[4]);
        fails(&b, "Add", || f.add(x, y));
        fails(&b, "Neg", || f.neg(x));
        fails(&b, "ReduceSum", || f.reduce_sum(x, &[0]));
        assert_eq!(sh(&f, f.convert_dtype(x, Int32)), s(Int32, &[4]));
        assert_eq!(sh(&f, f.reshape(x, &[2, 2])), s(dt, &[2, 2]));
    }
}
