//! Shape inference and API checks of the structured ops (windows, gather/scatter, dot, conv, FFT,
//! batch norm, RNG, control flow, AllReduce, fused ops), through a backend that only builds.
//!
//! Expected shapes come from the catalogue's worked examples (§4.6–§5) or are worked by hand
//! from its formulas (the arithmetic is written next to each case). Every rejected call is
//! checked to name the op and to leave the module unchanged.

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};

use tensorjit::api::{AttentionConfig, Builder, ConvConfig, DotConfig, Function, GatherDims, ScatterDims, Value};
use tensorjit::ir::dtype::DType;
use tensorjit::ir::op::{
    Activation, ArithReduce, AttentionLayout, ConvAxes, DenseLayout, FftType, GgmlType, Op, QuantScheme, Quantization,
};
use tensorjit::{Error, Result, Shape};

use DType::{
    BFloat16, Bool, Complex64, Complex128, Float16, Float32, Float64, Int8, Int32, Int64, Uint8, Uint32, Uint64,
};

mod common;
use common::backend;

/// A fresh builder and its main function.
fn setup() -> (Builder, Function) {
    let b = backend().builder("test");
    let f = b.main();
    (b, f)
}

/// A fresh parameter name (names need not be unique, but distinct ones read better in dumps).
fn next_name() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("p{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A new parameter of `f` with the given dtype and dims.
fn p(f: &Function, dtype: DType, dims: &[i64]) -> Value {
    f.parameter(&next_name(), Shape::new(dtype, dims)).expect("valid parameter")
}

/// A parameter with named (possibly dynamic) axes.
fn pn(f: &Function, dtype: DType, dims: &[i64], names: &[&str]) -> Value {
    f.parameter(&next_name(), Shape::with_names(dtype, dims, names).expect("valid shape")).expect("valid parameter")
}

fn s(dtype: DType, dims: &[i64]) -> Shape {
    Shape::new(dtype, dims)
}

fn sh(f: &Function, v: Value) -> Shape {
    f.shape(v).expect("value of this builder")
}

/// Asserts that `call` fails with an error naming `op`, and that the module is unchanged.
#[track_caller]
fn rejects<T: Debug>(b: &Builder, op: &str, call: impl FnOnce() -> Result<T>) -> Error {
    let before = b.module();
    let res = call();
    let err = match res {
        Ok(v) => panic!("expected {op} to fail, got {v:?}"),
        Err(e) => e,
    };
    assert!(err.to_string().contains(op), "error {err} does not name {op}");
    assert!(b.module() == before, "the module changed after a rejected {op} call");
    err
}

// ------------------------------------------------------------------------------------------------
// ReduceWindow and SelectAndScatter (§4.6)

#[test]
fn reduce_window_shapes() {
    let (b, f) = setup();
    let x4 = p(&f, Float32, &[4]);
    let x7 = p(&f, Float32, &[7]);
    let rw = |x, k, w: &[i64], st: &[i64], id: &[i64], wd: &[i64], pad: &[(i64, i64)]| {
        sh(&f, f.reduce_window(x, k, w, st, id, wd, pad).unwrap())
    };
    // [1,2,3,4] sum w2 s1 → 3 values.
    assert_eq!(rw(x4, ArithReduce::Sum, &[2], &[1], &[], &[], &[]), s(Float32, &[3]));
    // prod w2 s2 pad (1,1): padded 6, (6−2)/2+1 = 3.
    assert_eq!(rw(x4, ArithReduce::Product, &[2], &[2], &[], &[], &[(1, 1)]), s(Float32, &[3]));
    // [1..7] max w3 window dilation 2, stride 1: effective window 5, 7−5+1 = 3.
    assert_eq!(rw(x7, ArithReduce::Max, &[3], &[1], &[], &[2], &[]), s(Float32, &[3]));
    // max w3 input dilation 2 pad (1,1): dilated 13, padded 15, 15−3+1 = 13.
    assert_eq!(rw(x7, ArithReduce::Max, &[3], &[1], &[2], &[], &[(1, 1)]), s(Float32, &[13]));
    // Window 3 on length 2 → size 0, not an error.
    let x2 = p(&f, Float32, &[2]);
    assert_eq!(rw(x2, ArithReduce::Sum, &[3], &[1], &[], &[], &[]), s(Float32, &[0]));
    // Strides default to the window: [6,4] window [2,2] → [3,2].
    let x64 = p(&f, Int32, &[6, 4]);
    assert_eq!(rw(x64, ArithReduce::Min, &[2, 2], &[], &[], &[], &[]), s(Int32, &[3, 2]));
    // Empty window → all 1 (and strides 1): shape unchanged.
    assert_eq!(rw(x64, ArithReduce::Sum, &[], &[], &[], &[], &[]), s(Int32, &[6, 4]));
    // Rank-0 operand: unchanged.
    let sc = p(&f, Float64, &[]);
    assert_eq!(rw(sc, ArithReduce::Sum, &[], &[], &[], &[], &[]), s(Float64, &[]));
    // The stored op has its defaults filled in.
    let v = f.reduce_window(x64, ArithReduce::Sum, &[2, 1], &[], &[], &[], &[]).unwrap();
    let m = b.module();
    let node = m.nodes.iter().find(|n| n.outputs.contains(&v.id())).unwrap();
    match &node.op {
        Op::ReduceWindow { strides, input_dilations, window_dilations, padding, .. } => {
            assert_eq!(strides, &vec![2, 1]);
            assert_eq!(input_dilations, &vec![1, 1]);
            assert_eq!(window_dilations, &vec![1, 1]);
            assert_eq!(padding, &vec![(0, 0), (0, 0)]);
        }
        other => panic!("unexpected op {other:?}"),
    }
}

#[test]
fn reduce_window_errors() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[4, 4]);
    let bx = p(&f, Bool, &[4]);
    let cx = p(&f, Complex64, &[4]);
    let op = "ReduceWindow";
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[2, 2], &[1, 1], &[], &[], &[(-1, 0), (0, 0)]));
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[2], &[], &[], &[], &[]));
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[2, 2], &[0, 1], &[], &[], &[]));
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[0, 2], &[1, 1], &[], &[], &[]));
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[2, 2], &[1, 1], &[0, 1], &[], &[]));
    rejects(&b, op, || f.reduce_window(x, ArithReduce::Sum, &[2, 2], &[1, 1], &[], &[1, 0], &[]));
    rejects(&b, op, || f.reduce_window(bx, ArithReduce::Max, &[2], &[], &[], &[], &[]));
    rejects(&b, op, || f.reduce_window(cx, ArithReduce::Max, &[2], &[], &[], &[], &[]));
    // Complex sums are fine.
    assert_eq!(sh(&f, f.reduce_window(cx, ArithReduce::Sum, &[2], &[], &[], &[], &[]).unwrap()), s(Complex64, &[2]));
    // A dynamic axis only takes the identity window.
    let d = pn(&f, Float32, &[-1, 4], &["batch", ""]);
    let ok = f.reduce_window(d, ArithReduce::Sum, &[1, 2], &[], &[], &[], &[]).unwrap();
    assert_eq!(sh(&f, ok), Shape::with_names(Float32, &[-1, 2], &["batch", ""]).unwrap());
    rejects(&b, op, || f.reduce_window(d, ArithReduce::Sum, &[2, 2], &[], &[], &[], &[]));
}

#[test]
fn select_and_scatter_shapes_and_errors() {
    let (b, f) = setup();
    // [1,5,3,6,2] w3 s2: (5−3)/2+1 = 2 windows.
    let x = p(&f, Float32, &[5]);
    let src = p(&f, Float32, &[2]);
    let out = f.select_and_scatter(x, src, ArithReduce::Max, &[3], &[2], &[]).unwrap();
    assert_eq!(sh(&f, out), s(Float32, &[5]));
    // [5,5,1,5] w2 s1: 3 windows.
    let x4 = p(&f, Float32, &[4]);
    let src3 = p(&f, Float32, &[3]);
    assert_eq!(sh(&f, f.select_and_scatter(x4, src3, ArithReduce::Min, &[2], &[1], &[]).unwrap()), s(Float32, &[4]));
    // 2-D [2,2] w [2,2] s [1,1]: one window.
    let x22 = p(&f, Int32, &[2, 2]);
    let src11 = p(&f, Int32, &[1, 1]);
    let v = f.select_and_scatter(x22, src11, ArithReduce::Max, &[2, 2], &[1, 1], &[]).unwrap();
    assert_eq!(sh(&f, v), s(Int32, &[2, 2]));
    // Default strides = window: [4] w2 → 2 windows; a source of 3 does not fit.
    rejects(&b, "SelectAndScatter", || f.select_and_scatter(x4, src3, ArithReduce::Max, &[2], &[], &[]));
    rejects(&b, "SelectAndScatter", || f.select_and_scatter(x, src3, ArithReduce::Max, &[3], &[2], &[]));
    rejects(&b, "SelectAndScatter", || f.select_and_scatter(x, src, ArithReduce::Sum, &[3], &[2], &[]));
    let src_i = p(&f, Int32, &[2]);
    rejects(&b, "SelectAndScatter", || f.select_and_scatter(x, src_i, ArithReduce::Max, &[3], &[2], &[]));
    rejects(&b, "SelectAndScatter", || f.select_and_scatter(x, src, ArithReduce::Max, &[3], &[2], &[(-1, 0)]));
}

// ------------------------------------------------------------------------------------------------
// Gather and Scatter (§4.7)

fn example_gather_dims() -> GatherDims {
    GatherDims {
        index_vector_axis: 1,
        offset_output_axes: vec![1, 3],
        collapsed_slice_axes: vec![0, 2],
        start_index_map: vec![0, 2, 3],
        slice_sizes: vec![1, 3, 1, 1],
        indices_are_sorted: false,
    }
}

#[test]
fn gather_shapes() {
    let (_b, f) = setup();
    // The tested example of §4.7.
    let operand = p(&f, Float32, &[4, 3, 2, 2]);
    let idx = p(&f, Int32, &[3, 3, 2]);
    assert_eq!(sh(&f, f.gather(operand, idx, &example_gather_dims()).unwrap()), s(Float32, &[3, 3, 2, 1]));
    // 1-D: operand [5], slice size 2, three starts → [3, 2].
    let x5 = p(&f, Int64, &[5]);
    let starts = p(&f, Uint8, &[3, 1]);
    let dims = GatherDims {
        index_vector_axis: 1,
        offset_output_axes: vec![1],
        collapsed_slice_axes: vec![],
        start_index_map: vec![0],
        slice_sizes: vec![2],
        indices_are_sorted: true,
    };
    assert_eq!(sh(&f, f.gather(x5, starts, &dims).unwrap()), s(Int64, &[3, 2]));
    // Implicit index vector (index_vector_axis = rank): row gather [5,2] by [4] → [4,2].
    let table = p(&f, Bool, &[5, 2]);
    let rows = p(&f, Int32, &[4]);
    let dims = GatherDims {
        index_vector_axis: 1,
        offset_output_axes: vec![1],
        collapsed_slice_axes: vec![0],
        start_index_map: vec![0],
        slice_sizes: vec![1, 2],
        indices_are_sorted: false,
    };
    assert_eq!(sh(&f, f.gather(table, rows, &dims).unwrap()), s(Bool, &[4, 2]));
    // Offset axes first: output [2(offset), 4(batch)].
    let dims2 = GatherDims { offset_output_axes: vec![0], ..dims.clone() };
    assert_eq!(sh(&f, f.gather(table, rows, &dims2).unwrap()), s(Bool, &[2, 4]));
    // Dynamic batch axes of the indices propagate with their names.
    let drows = pn(&f, Int32, &[-1], &["n"]);
    let g = f.gather(table, drows, &dims).unwrap();
    assert_eq!(sh(&f, g), Shape::with_names(Bool, &[-1, 2], &["n", ""]).unwrap());
    // Zero-size slices are allowed.
    let dims0 = GatherDims { slice_sizes: vec![1, 0], ..dims };
    assert_eq!(sh(&f, f.gather(table, rows, &dims0).unwrap()), s(Bool, &[4, 0]));
}

#[test]
fn gather_errors() {
    let (b, f) = setup();
    let operand = p(&f, Float32, &[4, 3, 2, 2]);
    let idx = p(&f, Int32, &[3, 3, 2]);
    let fidx = p(&f, Float32, &[3, 3, 2]);
    let ok = example_gather_dims();
    let bad = |edit: &dyn Fn(&mut GatherDims)| {
        let mut d = ok.clone();
        edit(&mut d);
        d
    };
    let cases: Vec<(&str, GatherDims)> = vec![
        ("index_vector_axis > rank", bad(&|d| d.index_vector_axis = 4)),
        ("index vector size 2 ≠ len(start_index_map)", bad(&|d| d.index_vector_axis = 2)),
        ("offset axes not ascending", bad(&|d| d.offset_output_axes = vec![3, 1])),
        ("offset axis out of range", bad(&|d| d.offset_output_axes = vec![1, 4])),
        ("collapsed not ascending", bad(&|d| d.collapsed_slice_axes = vec![2, 0])),
        ("collapsed repeated", bad(&|d| d.collapsed_slice_axes = vec![0, 0])),
        ("collapsed axis with slice size 3", bad(&|d| d.collapsed_slice_axes = vec![0, 1])),
        ("start_index_map too short", bad(&|d| d.start_index_map = vec![0, 2])),
        ("start_index_map repeated", bad(&|d| d.start_index_map = vec![0, 2, 2])),
        ("start_index_map out of range", bad(&|d| d.start_index_map = vec![0, 2, 4])),
        ("slice size above dim", bad(&|d| d.slice_sizes = vec![1, 4, 1, 1])),
        ("negative slice size", bad(&|d| d.slice_sizes = vec![1, -1, 1, 1])),
        ("slice_sizes length", bad(&|d| d.slice_sizes = vec![1, 3, 1])),
        ("rank ≠ collapsed + offsets", bad(&|d| d.offset_output_axes = vec![1])),
    ];
    for (what, dims) in cases {
        let err = rejects(&b, "Gather", || f.gather(operand, idx, &dims));
        assert!(matches!(err, Error::Invalid { .. }), "{what}: {err}");
    }
    rejects(&b, "Gather", || f.gather(operand, fidx, &ok));
}

fn example_scatter_dims() -> ScatterDims {
    ScatterDims {
        index_vector_axis: 1,
        update_window_axes: vec![1],
        inserted_window_axes: vec![],
        scatter_axes_to_operand_axes: vec![0],
        indices_are_sorted: false,
        unique_indices: false,
    }
}

#[test]
fn scatter_shapes() {
    let (_b, f) = setup();
    // §4.7 example: zeros [5], indices [4,1], updates [4,2], window axes [1].
    let operand = p(&f, Float32, &[5]);
    let idx = p(&f, Int32, &[4, 1]);
    let upd = p(&f, Float32, &[4, 2]);
    assert_eq!(sh(&f, f.scatter_sum(operand, idx, upd, &example_scatter_dims()).unwrap()), s(Float32, &[5]));
    // Compliance case: ScatterMax into [2,2,5], U8 indices [2,2], updates [5,2] window axis 0,
    // inserted (0,1): window 5 pairs with operand axis 2 (5).
    let op3 = p(&f, Float32, &[2, 2, 5]);
    let idx_u8 = p(&f, Uint8, &[2, 2]);
    let upd52 = p(&f, Float32, &[5, 2]);
    let dims = ScatterDims {
        index_vector_axis: 1,
        update_window_axes: vec![0],
        inserted_window_axes: vec![0, 1],
        scatter_axes_to_operand_axes: vec![0, 1],
        indices_are_sorted: false,
        unique_indices: false,
    };
    assert_eq!(sh(&f, f.scatter_max(op3, idx_u8, upd52, &dims).unwrap()), s(Float32, &[2, 2, 5]));
    // ScatterSum into [2,5,2] with inserted / map (0,2).
    let op3b = p(&f, Float32, &[2, 5, 2]);
    let dims_b =
        ScatterDims { inserted_window_axes: vec![0, 2], scatter_axes_to_operand_axes: vec![0, 2], ..dims.clone() };
    assert_eq!(sh(&f, f.scatter_sum(op3b, idx_u8, upd52, &dims_b).unwrap()), s(Float32, &[2, 5, 2]));
    // ScatterMin with implicit index vector: operand [6,3], indices [4], updates [4,3].
    let op63 = p(&f, Int32, &[6, 3]);
    let idx4 = p(&f, Int64, &[4]);
    let upd43 = p(&f, Int32, &[4, 3]);
    let dims_c = ScatterDims {
        index_vector_axis: 1,
        update_window_axes: vec![1],
        inserted_window_axes: vec![0],
        scatter_axes_to_operand_axes: vec![0],
        ..Default::default()
    };
    assert_eq!(sh(&f, f.scatter_min(op63, idx4, upd43, &dims_c).unwrap()), s(Int32, &[6, 3]));
    // The generic entry point records the kind.
    let v = f.scatter(ArithReduce::Max, op63, idx4, upd43, &dims_c).unwrap();
    assert_eq!(sh(&f, v), s(Int32, &[6, 3]));
}

#[test]
fn scatter_errors() {
    let (b, f) = setup();
    let operand = p(&f, Float32, &[2, 2, 5]);
    let idx = p(&f, Uint8, &[2, 2]);
    let upd = p(&f, Float32, &[5, 2]);
    let ok = ScatterDims {
        index_vector_axis: 1,
        update_window_axes: vec![0],
        inserted_window_axes: vec![0, 1],
        scatter_axes_to_operand_axes: vec![0, 1],
        indices_are_sorted: false,
        unique_indices: false,
    };
    assert!(f.scatter_sum(operand, idx, upd, &ok).is_ok());
    let bad = |edit: &dyn Fn(&mut ScatterDims)| {
        let mut d = ok.clone();
        edit(&mut d);
        d
    };
    let cases: Vec<(&str, ScatterDims)> = vec![
        ("index_vector_axis > rank", bad(&|d| d.index_vector_axis = 3)),
        ("update window axes out of range", bad(&|d| d.update_window_axes = vec![2])),
        ("update window axes + batch ≠ rank(updates)", bad(&|d| d.update_window_axes = vec![0, 1])),
        ("inserted not ascending", bad(&|d| d.inserted_window_axes = vec![1, 0])),
        ("inserted repeated", bad(&|d| d.inserted_window_axes = vec![0, 0])),
        ("window + inserted ≠ rank(operand)", bad(&|d| d.inserted_window_axes = vec![0])),
        ("window larger than operand axis", bad(&|d| d.inserted_window_axes = vec![0, 2])),
        ("map length ≠ index vector size", bad(&|d| d.scatter_axes_to_operand_axes = vec![0])),
        ("map repeated", bad(&|d| d.scatter_axes_to_operand_axes = vec![1, 1])),
        ("map out of range", bad(&|d| d.scatter_axes_to_operand_axes = vec![0, 3])),
        ("implicit index vector (size 1) with a map of 2", bad(&|d| d.index_vector_axis = 2)),
    ];
    for (what, dims) in cases {
        let err = rejects(&b, "Scatter", || f.scatter_sum(operand, idx, upd, &dims));
        assert!(matches!(err, Error::Invalid { .. }), "{what}: {err}");
    }
    // Updates axes not ascending.
    let op2 = p(&f, Float32, &[4, 3]);
    let idx1 = p(&f, Int32, &[2, 1]);
    let upd3 = p(&f, Float32, &[2, 4, 3]);
    let d2 = ScatterDims {
        index_vector_axis: 1,
        update_window_axes: vec![2, 1],
        inserted_window_axes: vec![],
        scatter_axes_to_operand_axes: vec![0],
        ..Default::default()
    };
    rejects(&b, "Scatter", || f.scatter_sum(op2, idx1, upd3, &d2));
    let d2_ok = ScatterDims { update_window_axes: vec![1, 2], ..d2 };
    assert_eq!(sh(&f, f.scatter_sum(op2, idx1, upd3, &d2_ok).unwrap()), s(Float32, &[4, 3]));
    // Batch dims of updates must equal those of the indices: 3 ≠ 2.
    let upd_b3 = p(&f, Float32, &[3, 4, 3]);
    rejects(&b, "Scatter", || f.scatter_sum(op2, idx1, upd_b3, &d2_ok));
    // Dtypes: updates ≠ operand, float indices, Product, Bool operand, complex Max.
    let upd_i = p(&f, Int32, &[5, 2]);
    rejects(&b, "Scatter", || f.scatter_sum(operand, idx, upd_i, &ok));
    let fidx = p(&f, Float32, &[2, 2]);
    rejects(&b, "Scatter", || f.scatter_sum(operand, fidx, upd, &ok));
    rejects(&b, "Scatter", || f.scatter(ArithReduce::Product, operand, idx, upd, &ok));
    let bop = p(&f, Bool, &[2, 2, 5]);
    let bupd = p(&f, Bool, &[5, 2]);
    rejects(&b, "Scatter", || f.scatter_max(bop, idx, bupd, &ok));
    let cop = p(&f, Complex64, &[2, 2, 5]);
    let cupd = p(&f, Complex64, &[5, 2]);
    rejects(&b, "Scatter", || f.scatter_max(cop, idx, cupd, &ok));
    assert!(f.scatter_sum(cop, idx, cupd, &ok).is_ok());
}

// ------------------------------------------------------------------------------------------------
// DotGeneral (§4.8)

#[test]
fn dot_general_shapes() {
    let (_b, f) = setup();
    let lhs = p(&f, Float32, &[2, 3, 4, 5]);
    let rhs = p(&f, Float32, &[5, 1, 2, 3]);
    let v = f.dot_general(lhs, &[1], &[3, 0], rhs, &[3], &[0, 2], DotConfig::default()).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[5, 2, 4, 1]));
    let l2 = p(&f, Float32, &[3, 2, 4]);
    let r2 = p(&f, Float32, &[5, 2]);
    assert_eq!(
        sh(&f, f.dot_general(l2, &[1], &[], r2, &[1], &[], DotConfig::default()).unwrap()),
        s(Float32, &[3, 4, 5])
    );
    // BF16 with output dtype F32.
    let a = p(&f, BFloat16, &[32, 20]);
    let c = p(&f, BFloat16, &[20, 64]);
    let cfg = DotConfig { accumulator_dtype: Some(Float32), output_dtype: Some(Float32) };
    assert_eq!(sh(&f, f.dot_general(a, &[1], &[], c, &[0], &[], cfg).unwrap()), s(Float32, &[32, 64]));
    // Invalid = unset: stays BF16.
    let cfg = DotConfig { accumulator_dtype: Some(DType::Invalid), output_dtype: Some(DType::Invalid) };
    assert_eq!(sh(&f, f.dot_general(a, &[1], &[], c, &[0], &[], cfg).unwrap()), s(BFloat16, &[32, 64]));
    // Vector · vector → scalar; int8 stays int8.
    let x = p(&f, Int8, &[7]);
    assert_eq!(sh(&f, f.dot_general(x, &[0], &[], x, &[0], &[], DotConfig::default()).unwrap()), s(Int8, &[]));
    // TransposedLarge: [4,32,8,2,256]·[4,32,8,256], contract 4/3, batch (0,2)/(0,2) → [4,8,32,2,32].
    let tl = p(&f, Float32, &[4, 32, 8, 2, 256]);
    let tr = p(&f, Float32, &[4, 32, 8, 256]);
    let v = f.dot_general(tl, &[4], &[0, 2], tr, &[3], &[0, 2], DotConfig::default()).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[4, 8, 32, 2, 32]));
    // Size-0 contraction is fine; complex is accepted.
    let z1 = p(&f, Complex128, &[3, 0]);
    let z2 = p(&f, Complex128, &[0, 2]);
    assert_eq!(sh(&f, f.matmul(z1, z2).unwrap()), s(Complex128, &[3, 2]));
    // matmul [3,4]·[4,5] → [3,5].
    let m1 = p(&f, Float64, &[3, 4]);
    let m2 = p(&f, Float64, &[4, 5]);
    assert_eq!(sh(&f, f.matmul(m1, m2).unwrap()), s(Float64, &[3, 5]));
    // Dynamic batch axes keep their names.
    let dl = pn(&f, Float32, &[-1, 3, 4], &["batch", "", ""]);
    let dr = pn(&f, Float32, &[-1, 4, 6], &["batch", "", ""]);
    let v = f.dot_general(dl, &[2], &[0], dr, &[1], &[0], DotConfig::default()).unwrap();
    assert_eq!(sh(&f, v), Shape::with_names(Float32, &[-1, 3, 6], &["batch", "", ""]).unwrap());
}

#[test]
fn dot_general_errors() {
    let (b, f) = setup();
    let l = p(&f, Float32, &[2, 3]);
    let r = p(&f, Float32, &[3, 4]);
    let ri = p(&f, Int32, &[3, 4]);
    let bl = p(&f, Bool, &[2, 3]);
    let br = p(&f, Bool, &[3, 4]);
    let d = DotConfig::default();
    let op = "DotGeneral";
    rejects(&b, op, || f.dot_general(l, &[1], &[], ri, &[0], &[], d));
    rejects(&b, op, || f.dot_general(l, &[0], &[], r, &[0], &[], d)); // 2 vs 3
    rejects(&b, op, || f.dot_general(l, &[1], &[], r, &[0, 1], &[], d)); // lengths
    rejects(&b, op, || f.dot_general(l, &[1], &[0], r, &[0], &[], d)); // batch lengths
    rejects(&b, op, || f.dot_general(l, &[2], &[], r, &[0], &[], d)); // out of range
    rejects(&b, op, || f.dot_general(l, &[1], &[1], r, &[0], &[0], d)); // axis twice
    rejects(&b, op, || f.dot_general(bl, &[1], &[], br, &[0], &[], d));
    let cfg = DotConfig { accumulator_dtype: None, output_dtype: Some(Bool) };
    rejects(&b, op, || f.dot_general(l, &[1], &[], r, &[0], &[], cfg));
    let l3 = p(&f, Float32, &[2, 3, 4]);
    rejects(&b, op, || f.matmul(l3, r));
    // Dynamic pairs must share a name.
    let da = pn(&f, Float32, &[-1, 3], &["a", ""]);
    let db = pn(&f, Float32, &[-1, 3], &["b", ""]);
    rejects(&b, op, || f.dot_general(da, &[1], &[0], db, &[1], &[0], d));
}

// ------------------------------------------------------------------------------------------------
// ConvGeneral (§4.8)

/// NCW / IOW / NCW (and their 2-D, 3-D versions) for `s` spatial axes.
fn conv_axes(s: usize) -> ConvAxes {
    let spatial: Vec<usize> = (2..2 + s).collect();
    ConvAxes {
        input_batch: 0,
        input_channels: 1,
        input_spatial: spatial.clone(),
        kernel_input_channels: 0,
        kernel_output_channels: 1,
        kernel_spatial: spatial.clone(),
        output_batch: 0,
        output_channels: 1,
        output_spatial: spatial,
    }
}

fn conv_cfg(s: usize) -> ConvConfig {
    ConvConfig { axes: conv_axes(s), ..Default::default() }
}

#[test]
fn conv_general_shapes() {
    let (_b, f) = setup();
    let conv = |x: &[i64], k: &[i64], cfg: ConvConfig| {
        let xv = p(&f, Float32, x);
        let kv = p(&f, Float32, k);
        sh(&f, f.conv_general(xv, kv, &cfg).unwrap()).dims
    };
    // 1D with padding: [2,3,5]·[3,4,2], stride 2, pad (0,1): padded 6, (6−2)/2+1 = 3.
    assert_eq!(
        conv(&[2, 3, 5], &[3, 4, 2], ConvConfig { strides: vec![2], padding: vec![(0, 1)], ..conv_cfg(1) }),
        [2, 4, 3]
    );
    // Stride 2: [1,2,6]·[2,3,2]: (6−2)/2+1 = 3.
    assert_eq!(conv(&[1, 2, 6], &[2, 3, 2], ConvConfig { strides: vec![2], ..conv_cfg(1) }), [1, 3, 3]);
    // Input dilation 2: 4 → 7, 7−2+1 = 6.
    assert_eq!(conv(&[1, 2, 4], &[2, 3, 2], ConvConfig { input_dilations: vec![2], ..conv_cfg(1) }), [1, 3, 6]);
    // Kernel dilation 2: window 3, 6−3+1 = 4.
    assert_eq!(conv(&[1, 2, 6], &[2, 3, 2], ConvConfig { kernel_dilations: vec![2], ..conv_cfg(1) }), [1, 3, 4]);
    // Feature groups 2: Cin 6 = 3·2, 5−2+1 = 4.
    assert_eq!(conv(&[1, 6, 5], &[3, 4, 2], ConvConfig { channel_groups: 2, ..conv_cfg(1) }), [1, 4, 4]);
    // Batch groups 2: batch 4/2 = 2.
    assert_eq!(conv(&[4, 2, 5], &[2, 4, 2], ConvConfig { batch_groups: 2, ..conv_cfg(1) }), [2, 4, 4]);
    // 2D: [1,3,4,4]·[3,2,2,2] → [1,2,3,3].
    assert_eq!(conv(&[1, 3, 4, 4], &[3, 2, 2, 2], conv_cfg(2)), [1, 2, 3, 3]);
    // 3D: strides (2,1,1), pads (0,0),(1,1),(0,0), in_dil (1,2,1), k_dil (1,1,2):
    // axis 0: (4−2)/2+1 = 2; axis 1: 7+2−2+1 = 8; axis 2: 4−3+1 = 2.
    let cfg3 = ConvConfig {
        strides: vec![2, 1, 1],
        padding: vec![(0, 0), (1, 1), (0, 0)],
        input_dilations: vec![1, 2, 1],
        kernel_dilations: vec![1, 1, 2],
        ..conv_cfg(3)
    };
    assert_eq!(conv(&[1, 2, 4, 4, 4], &[2, 2, 2, 2, 2], cfg3), [1, 2, 2, 8, 2]);
    // Transposed output: batch at 2, channels at 0, spatial (3,1): spatial 3 and 4.
    let mut axes = conv_axes(2);
    axes.output_batch = 2;
    axes.output_channels = 0;
    axes.output_spatial = vec![3, 1];
    assert_eq!(conv(&[1, 3, 4, 5], &[3, 2, 2, 2], ConvConfig { axes, ..Default::default() }), [2, 4, 1, 3]);
    // Kernel longer than the input → size 0; negative padding crops; groups 0 mean 1.
    assert_eq!(conv(&[1, 1, 2], &[1, 1, 3], conv_cfg(1)), [1, 1, 0]);
    assert_eq!(conv(&[1, 1, 5], &[1, 1, 2], ConvConfig { padding: vec![(-1, 0)], ..conv_cfg(1) }), [1, 1, 3]);
    assert_eq!(
        conv(&[1, 2, 5], &[2, 3, 2], ConvConfig { channel_groups: 0, batch_groups: 0, ..conv_cfg(1) }),
        [1, 3, 4]
    );
    // Channels-last layout (NWC / WIO / NWC): [2,9,3]·[3,3,8], stride 2 → (9−3)/2+1 = 4.
    let nwc = ConvAxes {
        input_batch: 0,
        input_channels: 2,
        input_spatial: vec![1],
        kernel_input_channels: 1,
        kernel_output_channels: 2,
        kernel_spatial: vec![0],
        output_batch: 0,
        output_channels: 2,
        output_spatial: vec![1],
    };
    assert_eq!(
        conv(&[2, 9, 3], &[3, 3, 8], ConvConfig { axes: nwc, strides: vec![2], ..Default::default() }),
        [2, 4, 8]
    );
    // Integer convolution keeps the dtype.
    let xi = p(&f, Int32, &[1, 1, 4]);
    let ki = p(&f, Int32, &[1, 1, 2]);
    assert_eq!(sh(&f, f.conv_general(xi, ki, &conv_cfg(1)).unwrap()), s(Int32, &[1, 1, 3]));
}

#[test]
fn conv_general_errors() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[1, 6, 5]);
    let k = p(&f, Float32, &[3, 4, 2]);
    let op = "ConvGeneral";
    rejects(&b, op, || f.conv_general(x, k, &conv_cfg(1))); // Cin 6 ≠ 3
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { channel_groups: 4, ..conv_cfg(1) }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { channel_groups: 2, batch_groups: 2, ..conv_cfg(1) }));
    let ok = ConvConfig { channel_groups: 2, ..conv_cfg(1) };
    assert!(f.conv_general(x, k, &ok).is_ok());
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { strides: vec![0], ..ok.clone() }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { input_dilations: vec![0], ..ok.clone() }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { kernel_dilations: vec![0], ..ok.clone() }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { strides: vec![1, 1], ..ok.clone() }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { padding: vec![(0, 0), (0, 0)], ..ok.clone() }));
    let mut dup = conv_axes(1);
    dup.output_channels = 0;
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { axes: dup, ..ok.clone() }));
    rejects(&b, op, || f.conv_general(x, k, &ConvConfig { axes: conv_axes(2), ..ok.clone() }));
    // Batch groups must divide the batch and the output channels.
    let xb = p(&f, Float32, &[3, 2, 5]);
    let kb = p(&f, Float32, &[2, 4, 2]);
    rejects(&b, op, || f.conv_general(xb, kb, &ConvConfig { batch_groups: 2, ..conv_cfg(1) }));
    // Rank < 3, rank mismatch, dtype mismatch, Bool.
    let x2 = p(&f, Float32, &[1, 6]);
    let k2 = p(&f, Float32, &[6, 4]);
    rejects(&b, op, || f.conv_general(x2, k2, &conv_cfg(0)));
    let k4 = p(&f, Float32, &[3, 4, 2, 2]);
    rejects(&b, op, || f.conv_general(x, k4, &ok));
    let ki = p(&f, Int32, &[3, 4, 2]);
    rejects(&b, op, || f.conv_general(x, ki, &ok));
    let xbool = p(&f, Bool, &[1, 1, 3]);
    let kbool = p(&f, Bool, &[1, 1, 2]);
    rejects(&b, op, || f.conv_general(xbool, kbool, &conv_cfg(1)));
}

// ------------------------------------------------------------------------------------------------
// FFT (§4.8)

#[test]
fn fft_shapes_and_errors() {
    let (b, f) = setup();
    let r = p(&f, Float32, &[2, 8]);
    assert_eq!(sh(&f, f.fft(r, FftType::ForwardReal, &[8]).unwrap()), s(Complex64, &[2, 5]));
    let r64 = p(&f, Float64, &[2, 8]);
    assert_eq!(sh(&f, f.fft(r64, FftType::ForwardReal, &[8]).unwrap()), s(Complex128, &[2, 5]));
    // 2-D real FFT = rfft2: [4,6] → [4, 4].
    let r2 = p(&f, Float32, &[3, 4, 6]);
    assert_eq!(sh(&f, f.fft(r2, FftType::ForwardReal, &[4, 6]).unwrap()), s(Complex64, &[3, 4, 4]));
    // Inverse real: 5 bins → 8 (or 9) reals.
    let c = p(&f, Complex64, &[2, 5]);
    assert_eq!(sh(&f, f.fft(c, FftType::InverseReal, &[8]).unwrap()), s(Float32, &[2, 8]));
    assert_eq!(sh(&f, f.fft(c, FftType::InverseReal, &[9]).unwrap()), s(Float32, &[2, 9]));
    let c128 = p(&f, Complex128, &[3, 4]);
    assert_eq!(sh(&f, f.fft(c128, FftType::Forward, &[4]).unwrap()), s(Complex128, &[3, 4]));
    assert_eq!(sh(&f, f.fft(c128, FftType::Inverse, &[3, 4]).unwrap()), s(Complex128, &[3, 4]));
    let op = "FFT";
    rejects(&b, op, || f.fft(r, FftType::Forward, &[8])); // real operand
    rejects(&b, op, || f.fft(c, FftType::ForwardReal, &[5])); // complex operand
    rejects(&b, op, || f.fft(r, FftType::ForwardReal, &[7])); // length mismatch
    rejects(&b, op, || f.fft(c, FftType::InverseReal, &[5])); // needs 3 bins
    rejects(&b, op, || f.fft(c128, FftType::Forward, &[])); // no lengths
    rejects(&b, op, || f.fft(c128, FftType::Forward, &[1, 1, 3, 4])); // too many
    rejects(&b, op, || f.fft(c128, FftType::Forward, &[2, 3, 4])); // rank 2 < 3
    let h = p(&f, BFloat16, &[8]);
    rejects(&b, op, || f.fft(h, FftType::ForwardReal, &[8]));
}

// ------------------------------------------------------------------------------------------------
// Batch norm (§4.9)

#[test]
fn batch_norm_shapes_and_errors() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[2, 3, 4]);
    let c3 = p(&f, Float32, &[3]);
    let c4 = p(&f, Float32, &[4]);
    let v = f.batch_norm_inference(x, c3, c3, c3, c3, 1e-5, 1).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[2, 3, 4]));
    let (y, mean, var) = f.batch_norm_training(x, c4, c4, 1e-3, 2).unwrap();
    assert_eq!((sh(&f, y), sh(&f, mean), sh(&f, var)), (s(Float32, &[2, 3, 4]), s(Float32, &[4]), s(Float32, &[4])));
    let (gx, gs, go) = f.batch_norm_gradient(x, c3, c3, c3, x, 1e-3, 1).unwrap();
    assert_eq!((sh(&f, gx), sh(&f, gs), sh(&f, go)), (s(Float32, &[2, 3, 4]), s(Float32, &[3]), s(Float32, &[3])));
    rejects(&b, "BatchNormForInference", || f.batch_norm_inference(x, c4, c3, c3, c3, 1e-5, 1));
    rejects(&b, "BatchNormForInference", || f.batch_norm_inference(x, c3, c3, c3, c3, 1e-5, 3));
    rejects(&b, "BatchNormForInference", || f.batch_norm_inference(x, c3, c3, c3, c3, f32::NAN, 1));
    let d3 = p(&f, Float64, &[3]);
    rejects(&b, "BatchNormForInference", || f.batch_norm_inference(x, c3, c3, c3, d3, 1e-5, 1));
    let xi = p(&f, Int32, &[2, 3]);
    let i3 = p(&f, Int32, &[3]);
    rejects(&b, "BatchNormForTraining", || f.batch_norm_training(xi, i3, i3, 1e-5, 1));
    rejects(&b, "BatchNormForTraining", || f.batch_norm_training(x, c3, c3, 1e-5, 2));
    let g_bad = p(&f, Float32, &[2, 3, 5]);
    rejects(&b, "BatchNormGradient", || f.batch_norm_gradient(x, c3, c3, c3, g_bad, 1e-3, 1));
    let m2 = p(&f, Float32, &[3, 1]);
    rejects(&b, "BatchNormGradient", || f.batch_norm_gradient(x, c3, m2, c3, x, 1e-3, 1));
}

// ------------------------------------------------------------------------------------------------
// RNGBitGenerator (§4.10)

#[test]
fn rng_bit_generator_shapes_and_errors() {
    let (b, f) = setup();
    let st3 = p(&f, Uint64, &[3]);
    let (ns, vals) = f.rng_bit_generator(st3, &s(Uint32, &[6])).unwrap();
    assert_eq!((sh(&f, ns), sh(&f, vals)), (s(Uint64, &[3]), s(Uint32, &[6])));
    let st2 = p(&f, Uint64, &[2]);
    let (ns, vals) = f.rng_bit_generator(st2, &s(Float64, &[2, 3])).unwrap();
    assert_eq!((sh(&f, ns), sh(&f, vals)), (s(Uint64, &[2]), s(Float64, &[2, 3])));
    let (_, vals) = f.rng_bit_generator(st2, &s(BFloat16, &[])).unwrap();
    assert_eq!(sh(&f, vals), s(BFloat16, &[]));
    let op = "RNGBitGenerator";
    let st4 = p(&f, Uint64, &[4]);
    let st_u32 = p(&f, Uint32, &[3]);
    rejects(&b, op, || f.rng_bit_generator(st4, &s(Uint32, &[6])));
    rejects(&b, op, || f.rng_bit_generator(st_u32, &s(Uint32, &[6])));
    rejects(&b, op, || f.rng_bit_generator(st3, &s(Bool, &[6])));
    rejects(&b, op, || f.rng_bit_generator(st3, &s(Uint32, &[-3])));
}

// ------------------------------------------------------------------------------------------------
// Call, Sort, While, If (§4.11)

#[test]
fn call_shapes_and_errors() {
    let (b, f) = setup();
    let g = b.new_function("g").unwrap();
    let ga = p(&g, Float32, &[2]);
    let gb = p(&g, Int32, &[]);
    let x = p(&f, Float32, &[2]);
    let n = p(&f, Int32, &[]);
    // Not returned yet.
    rejects(&b, "Call", || f.call(&g, &[x, n]));
    g.return_(&[gb, ga]).unwrap();
    let outs = f.call(&g, &[x, n]).unwrap();
    assert_eq!(outs.iter().map(|&v| sh(&f, v)).collect::<Vec<_>>(), vec![s(Int32, &[]), s(Float32, &[2])]);
    // Wrong count, wrong shape, wrong dtype.
    rejects(&b, "Call", || f.call(&g, &[x]));
    let x3 = p(&f, Float32, &[3]);
    rejects(&b, "Call", || f.call(&g, &[x3, n]));
    let n64 = p(&f, Int64, &[]);
    rejects(&b, "Call", || f.call(&g, &[x, n64]));
    // A closure is not callable; nor is a function of another builder.
    let cl = f.closure().unwrap();
    let cp = p(&cl, Float32, &[]);
    cl.return_(&[cp]).unwrap();
    rejects(&b, "Call", || f.call(&cl, &[x]));
    let b2 = backend().builder("other");
    let h = b2.new_function("h").unwrap();
    let hp = p(&h, Float32, &[2]);
    h.return_(&[hp]).unwrap();
    rejects(&b, "Call", || f.call(&h, &[x]));
    // Calls from a named function to another one are fine.
    let k = b.new_function("k").unwrap();
    let kx = p(&k, Float32, &[2]);
    let kn = p(&k, Int32, &[]);
    let outs = k.call(&g, &[kx, kn]).unwrap();
    assert_eq!(outs.len(), 2);
}

/// A closure of `parent` with scalar parameters of `dtypes` that returns `ret` (built inside).
fn closure_with(parent: &Function, dtypes: &[DType], ret: impl FnOnce(&Function, &[Value]) -> Vec<Value>) -> Function {
    let c = parent.closure().unwrap();
    let params: Vec<Value> = dtypes.iter().map(|&d| p(&c, d, &[])).collect();
    let outs = ret(&c, &params);
    c.return_(&outs).unwrap();
    c
}

fn true_const(c: &Function, _: &[Value]) -> Vec<Value> {
    vec![c.scalar(true).unwrap()]
}

#[test]
fn sort_shapes() {
    let (b, f) = setup();
    let keys = p(&f, Float32, &[3, 4]);
    let vals = p(&f, Int32, &[3, 4]);
    let cmp = closure_with(&f, &[Float32, Float32, Int32, Int32], true_const);
    let outs = f.sort(&cmp, -1, true, &[keys, vals]).unwrap();
    assert_eq!(outs.iter().map(|&v| sh(&f, v)).collect::<Vec<_>>(), vec![s(Float32, &[3, 4]), s(Int32, &[3, 4])]);
    // The negative axis is stored normalised.
    let m = b.module();
    let node = m.nodes.iter().find(|n| n.outputs.contains(&outs[0].id())).unwrap();
    assert!(matches!(node.op, Op::Sort { axis: 1, stable: true, .. }), "{:?}", node.op);
    // A Bool comparator may return one of its parameters.
    let flags = p(&f, Bool, &[5]);
    let cmp_b = closure_with(&f, &[Bool, Bool], |_, ps| vec![ps[1]]);
    assert_eq!(sh(&f, f.sort(&cmp_b, 0, false, &[flags]).unwrap()[0]), s(Bool, &[5]));
}

#[test]
fn sort_errors() {
    let (b, f) = setup();
    let keys = p(&f, Float32, &[3, 4]);
    let vals = p(&f, Int32, &[3, 4]);
    let other = p(&f, Int32, &[4, 3]);
    let good = closure_with(&f, &[Float32, Float32, Int32, Int32], true_const);
    let op = "Sort";
    rejects(&b, op, || f.sort(&good, 2, false, &[keys, vals]));
    rejects(&b, op, || f.sort(&good, -3, false, &[keys, vals]));
    rejects(&b, op, || f.sort(&good, 0, false, &[]));
    rejects(&b, op, || f.sort(&good, 0, false, &[keys, other]));
    // Wrong number of parameters; non-interleaved order; non-scalar parameter.
    let one = closure_with(&f, &[Float32, Float32], true_const);
    rejects(&b, op, || f.sort(&one, 0, false, &[keys, vals]));
    let blocked = closure_with(&f, &[Float32, Int32, Float32, Int32], true_const);
    rejects(&b, op, || f.sort(&blocked, 0, false, &[keys, vals]));
    let vec_param = f.closure().unwrap();
    let a = p(&vec_param, Float32, &[1]);
    let _ = p(&vec_param, Float32, &[1]);
    let t = vec_param.scalar(true).unwrap();
    vec_param.return_(&[t]).unwrap();
    let _ = a;
    rejects(&b, op, || f.sort(&vec_param, 0, false, &[keys]));
    // Returns a non-Bool, or two values.
    let ret_f = closure_with(&f, &[Float32, Float32], |_, ps| vec![ps[0]]);
    rejects(&b, op, || f.sort(&ret_f, 0, false, &[keys]));
    let ret2 = closure_with(&f, &[Float32, Float32], |c, _| vec![c.scalar(true).unwrap(), c.scalar(false).unwrap()]);
    rejects(&b, op, || f.sort(&ret2, 0, false, &[keys]));
    // A named function, an unreturned closure, a closure of another function or builder.
    let named = b.new_function("named_cmp").unwrap();
    let _ = p(&named, Float32, &[]);
    let _ = p(&named, Float32, &[]);
    let t = named.scalar(true).unwrap();
    named.return_(&[t]).unwrap();
    rejects(&b, op, || f.sort(&named, 0, false, &[keys]));
    let open = f.closure().unwrap();
    let _ = p(&open, Float32, &[]);
    let _ = p(&open, Float32, &[]);
    rejects(&b, op, || f.sort(&open, 0, false, &[keys]));
    let inner_parent = f.closure().unwrap();
    let nested = closure_with(&inner_parent, &[Float32, Float32], true_const);
    rejects(&b, op, || f.sort(&nested, 0, false, &[keys]));
    let of_named = closure_with(&named_open(&b), &[Float32, Float32], true_const);
    rejects(&b, op, || f.sort(&of_named, 0, false, &[keys]));
    let b2 = backend().builder("other");
    let foreign = closure_with(&b2.main(), &[Float32, Float32], true_const);
    rejects(&b, op, || f.sort(&foreign, 0, false, &[keys]));
    // The closure works from the function it belongs to.
    let good1 = closure_with(&f, &[Float32, Float32], true_const);
    assert!(f.sort(&good1, 0, false, &[keys]).is_ok());
}

/// A new named function that has not returned.
fn named_open(b: &Builder) -> Function {
    b.new_function(&format!("fn_{}", next_name())).unwrap()
}

#[test]
fn while_shapes_and_errors() {
    let (b, f) = setup();
    let i = p(&f, Int32, &[]);
    let acc = p(&f, Float32, &[3]);
    let cond = {
        let c = f.closure().unwrap();
        let _ = p(&c, Int32, &[]);
        let _ = p(&c, Float32, &[3]);
        let t = c.scalar(false).unwrap();
        c.return_(&[t]).unwrap();
        c
    };
    let body = {
        let c = f.closure().unwrap();
        let ci = p(&c, Int32, &[]);
        let ca = p(&c, Float32, &[3]);
        c.return_(&[ci, ca]).unwrap();
        c
    };
    let outs = f.while_(&cond, &body, &[i, acc]).unwrap();
    assert_eq!(outs.iter().map(|&v| sh(&f, v)).collect::<Vec<_>>(), vec![s(Int32, &[]), s(Float32, &[3])]);
    let op = "While";
    rejects(&b, op, || f.while_(&cond, &body, &[]));
    rejects(&b, op, || f.while_(&cond, &body, &[i]));
    let acc4 = p(&f, Float32, &[4]);
    rejects(&b, op, || f.while_(&cond, &body, &[i, acc4]));
    // cond returning a non-Bool; body returning the wrong shapes or count.
    let cond_f = {
        let c = f.closure().unwrap();
        let ci = p(&c, Int32, &[]);
        let _ = p(&c, Float32, &[3]);
        c.return_(&[ci]).unwrap();
        c
    };
    rejects(&b, op, || f.while_(&cond_f, &body, &[i, acc]));
    let body_swapped = {
        let c = f.closure().unwrap();
        let ci = p(&c, Int32, &[]);
        let ca = p(&c, Float32, &[3]);
        c.return_(&[ca, ci]).unwrap();
        c
    };
    rejects(&b, op, || f.while_(&cond, &body_swapped, &[i, acc]));
    let body_short = {
        let c = f.closure().unwrap();
        let ci = p(&c, Int32, &[]);
        let _ = p(&c, Float32, &[3]);
        c.return_(&[ci]).unwrap();
        c
    };
    rejects(&b, op, || f.while_(&cond, &body_short, &[i, acc]));
    // Body is a named function; body of another function.
    let named = b.new_function("body_named").unwrap();
    let ni = p(&named, Int32, &[]);
    let na = p(&named, Float32, &[3]);
    named.return_(&[ni, na]).unwrap();
    rejects(&b, op, || f.while_(&cond, &named, &[i, acc]));
    let elsewhere = {
        let c = named_open(&b).closure().unwrap();
        let ci = p(&c, Int32, &[]);
        let ca = p(&c, Float32, &[3]);
        c.return_(&[ci, ca]).unwrap();
        c
    };
    rejects(&b, op, || f.while_(&cond, &elsewhere, &[i, acc]));
}

#[test]
fn if_shapes_and_errors() {
    let (b, f) = setup();
    let pred = p(&f, Bool, &[]);
    let x = p(&f, Float32, &[2]);
    let y = p(&f, Float32, &[2]);
    let then_b = closure_with(&f, &[], |_, _| vec![x]); // captures x
    let else_b = closure_with(&f, &[], |c, _| vec![c.constant(&[1.0f32, 2.0], &[2]).unwrap()]);
    let outs = f.if_(pred, &then_b, &else_b).unwrap();
    assert_eq!(outs.iter().map(|&v| sh(&f, v)).collect::<Vec<_>>(), vec![s(Float32, &[2])]);
    let op = "If";
    rejects(&b, op, || f.if_(x, &then_b, &else_b));
    let pred1 = p(&f, Bool, &[1]);
    rejects(&b, op, || f.if_(pred1, &then_b, &else_b));
    let with_param = closure_with(&f, &[Float32], |_, ps| vec![ps[0]]);
    rejects(&b, op, || f.if_(pred, &with_param, &else_b));
    let other_shape = closure_with(&f, &[], |c, _| vec![c.constant(&[1.0f32, 2.0, 3.0], &[3]).unwrap()]);
    rejects(&b, op, || f.if_(pred, &then_b, &other_shape));
    let two = closure_with(&f, &[], |_, _| vec![x, y]);
    rejects(&b, op, || f.if_(pred, &then_b, &two));
    let unreturned = f.closure().unwrap();
    rejects(&b, op, || f.if_(pred, &then_b, &unreturned));
    // Both branches returning two values is fine.
    let two_b = closure_with(&f, &[], |_, _| vec![y, x]);
    assert_eq!(f.if_(pred, &two, &two_b).unwrap().len(), 2);
}

// ------------------------------------------------------------------------------------------------
// AllReduce (§4.13)

#[test]
fn all_reduce_shapes_and_errors() {
    let (b, f) = setup();
    let a = p(&f, Float32, &[2, 3]);
    let c = p(&f, Int32, &[4]);
    let outs = f.all_reduce(&[a, c], ArithReduce::Sum, &[vec![0, 1], vec![2, 3]]).unwrap();
    assert_eq!(outs.iter().map(|&v| sh(&f, v)).collect::<Vec<_>>(), vec![s(Float32, &[2, 3]), s(Int32, &[4])]);
    assert_eq!(f.all_reduce(&[a], ArithReduce::Max, &[]).unwrap().len(), 1);
    let op = "AllReduce";
    rejects(&b, op, || f.all_reduce(&[], ArithReduce::Sum, &[]));
    rejects(&b, op, || f.all_reduce(&[a], ArithReduce::Sum, &[vec![0, 1], vec![1]]));
    rejects(&b, op, || f.all_reduce(&[a], ArithReduce::Sum, &[vec![]]));
    let bo = p(&f, Bool, &[2]);
    rejects(&b, op, || f.all_reduce(&[bo], ArithReduce::Sum, &[]));
}

// ------------------------------------------------------------------------------------------------
// Fused ops (§5)

#[test]
fn fused_softmax_gelu_layer_norm() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[2, 3, 4]);
    assert_eq!(sh(&f, f.fused_softmax(x, 2).unwrap()), s(Float32, &[2, 3, 4]));
    rejects(&b, "FusedSoftmax", || f.fused_softmax(x, -1));
    rejects(&b, "FusedSoftmax", || f.fused_softmax(x, 3));
    let xi = p(&f, Int32, &[4]);
    rejects(&b, "FusedSoftmax", || f.fused_softmax(xi, 0));
    // Half types are accepted (computed in f32, rounded once per fused op, §9); F8 is not.
    let h = p(&f, BFloat16, &[4]);
    assert_eq!(sh(&f, f.fused_softmax(h, 0).unwrap()), s(BFloat16, &[4]));
    let h16 = p(&f, Float16, &[2, 4]);
    assert_eq!(sh(&f, f.fused_softmax(h16, 1).unwrap()), s(Float16, &[2, 4]));
    let g4h = p(&f, Float16, &[4]);
    let ln = f.fused_layer_norm(h16, &[1], 1e-5, Some(g4h), Some(g4h)).unwrap();
    assert_eq!(sh(&f, ln), s(Float16, &[2, 4]));
    let g4f = p(&f, Float32, &[4]);
    rejects(&b, "FusedLayerNorm", || f.fused_layer_norm(h16, &[1], 1e-5, Some(g4f), None));
    assert_eq!(sh(&f, f.fused_gelu(h, true).unwrap()), s(BFloat16, &[4]));
    assert_eq!(sh(&f, f.fused_gelu(x, false).unwrap()), s(Float32, &[2, 3, 4]));
    rejects(&b, "FusedGelu", || f.fused_gelu(xi, true));
    // Layer norm over the last axis with gamma/beta [4]; over (1, 2) with [3, 4].
    let g4 = p(&f, Float32, &[4]);
    let g34 = p(&f, Float32, &[3, 4]);
    assert_eq!(sh(&f, f.fused_layer_norm(x, &[-1], 1e-5, Some(g4), Some(g4)).unwrap()), s(Float32, &[2, 3, 4]));
    assert_eq!(sh(&f, f.fused_layer_norm(x, &[2, -2], 1e-5, Some(g34), None).unwrap()), s(Float32, &[2, 3, 4]));
    assert_eq!(sh(&f, f.fused_layer_norm(x, &[1], 1e-5, None, None).unwrap()), s(Float32, &[2, 3, 4]));
    let m = b.module();
    let ln_axes: Vec<Vec<usize>> = m
        .nodes
        .iter()
        .filter_map(|n| match &n.op {
            Op::FusedLayerNorm { axes, .. } => Some(axes.clone()),
            _ => None,
        })
        .collect();
    // The F16 layer norm over [1] built above comes first.
    assert_eq!(ln_axes, vec![vec![1], vec![2], vec![1, 2], vec![1]]);
    let op = "FusedLayerNorm";
    rejects(&b, op, || f.fused_layer_norm(x, &[-1], 1e-5, Some(g34), None));
    rejects(&b, op, || f.fused_layer_norm(x, &[-1], 1e-5, None, Some(g34)));
    rejects(&b, op, || f.fused_layer_norm(x, &[-1, 2], 1e-5, None, None));
    rejects(&b, op, || f.fused_layer_norm(x, &[3], 1e-5, None, None));
    rejects(&b, op, || f.fused_layer_norm(x, &[], 1e-5, None, None));
    rejects(&b, op, || f.fused_layer_norm(x, &[2], f64::NAN, None, None));
    let g4d = p(&f, Float64, &[4]);
    rejects(&b, op, || f.fused_layer_norm(x, &[2], 1e-5, Some(g4d), None));
}

#[test]
fn fused_dense_shapes_and_errors() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[2, 3]);
    let w = p(&f, Float32, &[3, 4]);
    let bias = p(&f, Float32, &[4]);
    let v = f.fused_dense(x, w, Some(bias), Activation::Relu, DenseLayout::InputOutputs).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[2, 4]));
    let wt = p(&f, Float32, &[4, 3]);
    let v = f.fused_dense(x, wt, None, Activation::None, DenseLayout::OutputsInput).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[2, 4]));
    // Several output axes and several batch axes: [5,2,3]·[3,4,6] → [5,2,4,6], bias [4,6].
    let x3 = p(&f, Float64, &[5, 2, 3]);
    let w3 = p(&f, Float64, &[3, 4, 6]);
    let b46 = p(&f, Float64, &[4, 6]);
    let v = f.fused_dense(x3, w3, Some(b46), Activation::Gelu, DenseLayout::InputOutputs).unwrap();
    assert_eq!(sh(&f, v), s(Float64, &[5, 2, 4, 6]));
    let op = "FusedDense";
    let b3 = p(&f, Float32, &[3]);
    rejects(&b, op, || f.fused_dense(x, w, Some(b3), Activation::None, DenseLayout::InputOutputs));
    rejects(&b, op, || f.fused_dense(x, wt, None, Activation::None, DenseLayout::InputOutputs));
    let wd = p(&f, Float64, &[3, 4]);
    rejects(&b, op, || f.fused_dense(x, wd, None, Activation::None, DenseLayout::InputOutputs));
    let xi = p(&f, Int32, &[2, 3]);
    let wi = p(&f, Int32, &[3, 4]);
    rejects(&b, op, || f.fused_dense(xi, wi, None, Activation::None, DenseLayout::InputOutputs));
    let w1 = p(&f, Float32, &[3]);
    rejects(&b, op, || f.fused_dense(x, w1, None, Activation::None, DenseLayout::InputOutputs));
    // BF16 / F16: the dtype is kept; x, w and bias must agree.
    for dt in [BFloat16, Float16] {
        let (xh, wh, bh) = (p(&f, dt, &[2, 3]), p(&f, dt, &[3, 4]), p(&f, dt, &[4]));
        let v = f.fused_dense(xh, wh, Some(bh), Activation::Gelu, DenseLayout::InputOutputs).unwrap();
        assert_eq!(sh(&f, v), s(dt, &[2, 4]));
        rejects(&b, op, || f.fused_dense(xh, w, None, Activation::None, DenseLayout::InputOutputs));
        rejects(&b, op, || f.fused_dense(xh, wh, Some(bias), Activation::None, DenseLayout::InputOutputs));
    }
}

#[test]
fn attention_shapes() {
    let (b, f) = setup();
    // BHSD with GQA (8 query heads, 2 kv heads) and a wider v head: out [2,8,5,32].
    let q = p(&f, Float32, &[2, 8, 5, 16]);
    let k = p(&f, Float32, &[2, 2, 7, 16]);
    let v = p(&f, Float32, &[2, 2, 7, 32]);
    let (out, states) =
        f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, &AttentionConfig::default()).unwrap();
    assert_eq!(sh(&f, out), s(Float32, &[2, 8, 5, 32]));
    assert!(states.is_empty());
    // BSHD, BF16, causal.
    let qh = p(&f, BFloat16, &[2, 5, 4, 8]);
    let kh = p(&f, BFloat16, &[2, 6, 4, 8]);
    let cfg = AttentionConfig { causal: true, scale: 0.5, ..Default::default() };
    let (out, _) = f.fused_scaled_dot_product_attention(qh, kh, kh, AttentionLayout::Bshd, &cfg).unwrap();
    assert_eq!(sh(&f, out), s(BFloat16, &[2, 5, 4, 8]));
    // Masks of rank 2–4 (Bool or q's dtype), bias, sequence lengths together.
    for mask_dims in [&[5i64, 7][..], &[2, 1, 5, 7], &[8, 1, 7], &[1, 1]] {
        let mask = p(&f, Bool, mask_dims);
        let bias = p(&f, Float32, &[8, 5, 7]);
        let ql = p(&f, Int32, &[2]);
        let kl = p(&f, Int32, &[2]);
        let cfg =
            AttentionConfig { mask: Some(mask), bias: Some(bias), seq_lens: Some((ql, kl)), ..Default::default() };
        let (out, _) = f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, &cfg).unwrap();
        assert_eq!(sh(&f, out), s(Float32, &[2, 8, 5, 32]), "mask {mask_dims:?}");
    }
    let fmask = p(&f, Float32, &[5, 7]);
    let cfg = AttentionConfig { mask: Some(fmask), ..Default::default() };
    assert!(f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, &cfg).is_ok());
    // The operands are stored in the documented order with the flags set.
    let m = b.module();
    let last = m.nodes.last().unwrap();
    assert!(matches!(last.op, Op::FusedScaledDotProductAttention { has_mask: true, has_bias: false, .. }));
    assert_eq!(last.inputs, vec![q.id(), k.id(), v.id(), fmask.id()]);
}

#[test]
fn attention_errors() {
    let (b, f) = setup();
    let q = p(&f, Float32, &[2, 8, 5, 16]);
    let k = p(&f, Float32, &[2, 2, 7, 16]);
    let v = p(&f, Float32, &[2, 2, 7, 16]);
    let op = "FusedScaledDotProductAttention";
    let d = AttentionConfig::default();
    let sdpa =
        |q, k, v, cfg: &AttentionConfig| f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, cfg);
    let k3 = p(&f, Float32, &[2, 3, 7, 16]);
    rejects(&b, op, || sdpa(q, k3, k3, &d)); // 3 kv heads do not divide 8
    let k_hd = p(&f, Float32, &[2, 2, 7, 8]);
    rejects(&b, op, || sdpa(q, k_hd, v, &d)); // head_dim 8 ≠ 16
    let k_b = p(&f, Float32, &[3, 2, 7, 16]);
    rejects(&b, op, || sdpa(q, k_b, k_b, &d)); // batch
    let v_s = p(&f, Float32, &[2, 2, 6, 16]);
    rejects(&b, op, || sdpa(q, k, v_s, &d)); // kv seq lengths differ
    let v_h = p(&f, Float32, &[2, 4, 7, 16]);
    rejects(&b, op, || sdpa(q, k, v_h, &d)); // k and v heads differ
    let q3 = p(&f, Float32, &[2, 8, 5]);
    rejects(&b, op, || sdpa(q3, k, v, &d));
    let qi = p(&f, Int32, &[2, 8, 5, 16]);
    let ki = p(&f, Int32, &[2, 2, 7, 16]);
    rejects(&b, op, || sdpa(qi, ki, ki, &d));
    let kd = p(&f, Float64, &[2, 2, 7, 16]);
    rejects(&b, op, || sdpa(q, kd, kd, &d));
    // Masks and biases that do not broadcast or have the wrong dtype or rank.
    for (dt, dims) in
        [(Bool, &[5i64, 6][..]), (Bool, &[7]), (Int32, &[5, 7]), (Bool, &[3, 8, 5, 7]), (Bool, &[1, 2, 8, 5, 7])]
    {
        let mask = p(&f, dt, dims);
        rejects(&b, op, || sdpa(q, k, v, &AttentionConfig { mask: Some(mask), ..Default::default() }));
    }
    for (dt, dims) in [(Float32, &[5i64, 6][..]), (Bool, &[5, 7]), (Float64, &[5, 7]), (Float32, &[7])] {
        let bias = p(&f, dt, dims);
        rejects(&b, op, || sdpa(q, k, v, &AttentionConfig { bias: Some(bias), ..Default::default() }));
    }
    let l64 = p(&f, Int64, &[2]);
    let l32 = p(&f, Int32, &[2]);
    let l32_3 = p(&f, Int32, &[3]);
    rejects(&b, op, || sdpa(q, k, v, &AttentionConfig { seq_lens: Some((l64, l32)), ..Default::default() }));
    rejects(&b, op, || sdpa(q, k, v, &AttentionConfig { seq_lens: Some((l32, l32_3)), ..Default::default() }));
    rejects(&b, op, || sdpa(q, k, v, &AttentionConfig { scale: f64::NAN, ..Default::default() }));
}

#[test]
fn attention_vjp() {
    let (b, f) = setup();
    let q = p(&f, Float32, &[2, 4, 5, 8]);
    let k = p(&f, Float32, &[2, 2, 7, 8]);
    let v = p(&f, Float32, &[2, 2, 7, 8]);
    let cfg = AttentionConfig { causal: true, ..Default::default() };
    let (out, states) = f.fused_scaled_dot_product_attention(q, k, v, AttentionLayout::Bhsd, &cfg).unwrap();
    let d_out = p(&f, Float32, &[2, 4, 5, 8]);
    let (dq, dk, dv) =
        f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bhsd, &cfg, out, &states, d_out).unwrap();
    assert_eq!((sh(&f, dq), sh(&f, dk), sh(&f, dv)), (sh(&f, q), sh(&f, k), sh(&f, v)));
    let op = "FusedScaledDotProductAttentionVJP";
    let bad_d = p(&f, Float32, &[2, 4, 5, 7]);
    rejects(&b, op, || f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bhsd, &cfg, out, &[], bad_d));
    rejects(&b, op, || {
        f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bhsd, &cfg, bad_d, &[], bad_d)
    });
    rejects(&b, op, || f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bshd, &cfg, out, &[], d_out));
    rejects(&b, op, || {
        f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bhsd, &cfg, out, &[out], d_out)
    });
    let mask = p(&f, Bool, &[5, 7]);
    let with_mask = AttentionConfig { mask: Some(mask), ..cfg.clone() };
    let err = rejects(&b, op, || {
        f.fused_scaled_dot_product_attention_vjp(q, k, v, AttentionLayout::Bhsd, &with_mask, out, &[], d_out)
    });
    assert!(err.is_not_implemented());
}

fn linear(block_size: usize) -> Quantization {
    Quantization { scheme: QuantScheme::Linear, block_axis: 1, block_size, ggml_type: GgmlType::Q4_0 }
}

fn ggml(t: GgmlType) -> Quantization {
    Quantization { scheme: QuantScheme::Ggml, block_axis: 0, block_size: 0, ggml_type: t }
}

#[test]
fn quantized_dense_shapes() {
    let (_b, f) = setup();
    // Linear Int8 [K=3, N=8], block 4 → scale [3, 2]; output [2, 8].
    let x = p(&f, Float32, &[2, 3]);
    let w = p(&f, Int8, &[3, 8]);
    let sc = p(&f, Float32, &[3, 2]);
    let bias = p(&f, Float32, &[8]);
    let v = f.fused_quantized_dense(x, w, Some(sc), Some(sc), Some(bias), linear(4), Activation::Silu).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[2, 8]));
    // Block 3: ceil(8/3) = 3 scale columns; packed Int4 weights.
    let w4 = p(&f, DType::Int4, &[3, 8]);
    let sc3 = p(&f, Float32, &[3, 3]);
    assert_eq!(
        sh(&f, f.fused_quantized_dense(x, w4, Some(sc3), None, None, linear(3), Activation::None).unwrap()),
        s(Float32, &[2, 8])
    );
    // NF4 with Uint8 weights.
    let wu = p(&f, Uint8, &[3, 8]);
    let nf4 = Quantization { scheme: QuantScheme::Nf4, ..linear(4) };
    assert_eq!(
        sh(&f, f.fused_quantized_dense(x, wu, Some(sc), None, None, nf4, Activation::None).unwrap()),
        s(Float32, &[2, 8])
    );
    // GGML Q4_0: 36 bytes per row = 2 blocks of 18 → K = 64; N = 4 rows.
    let xg = p(&f, Float32, &[5, 64]);
    let wg = p(&f, Uint8, &[4, 36]);
    let bg = p(&f, Float32, &[4]);
    let v = f.fused_quantized_dense(xg, wg, None, None, Some(bg), ggml(GgmlType::Q4_0), Activation::None).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[5, 4]));
    // Q8_0: 34 bytes → 32 values; Q4_K: 144 → 256; Q6_K: 210 → 256; IQ4_NL: 18 → 32.
    for (t, bytes, k) in
        [(GgmlType::Q8_0, 68, 64), (GgmlType::Q4K, 144, 256), (GgmlType::Q6K, 420, 512), (GgmlType::Iq4Nl, 18, 32)]
    {
        let xk = p(&f, Float32, &[1, 3, k]);
        let wk = p(&f, Uint8, &[6, bytes]);
        let v = f.fused_quantized_dense(xk, wk, None, None, None, ggml(t), Activation::Tanh).unwrap();
        assert_eq!(sh(&f, v), s(Float32, &[1, 3, 6]), "{t:?}");
    }
}

#[test]
fn quantized_dense_errors() {
    let (b, f) = setup();
    let x = p(&f, Float32, &[2, 3]);
    let w = p(&f, Int8, &[3, 8]);
    let sc = p(&f, Float32, &[3, 2]);
    let op = "FusedQuantizedDense";
    let qd = |x, w, s, z, bias, q| f.fused_quantized_dense(x, w, s, z, bias, q, Activation::None);
    rejects(&b, op, || qd(x, w, None, None, None, linear(4))); // missing scale
    rejects(&b, op, || qd(x, w, Some(sc), None, None, Quantization { block_axis: 0, ..linear(4) }));
    rejects(&b, op, || qd(x, w, Some(sc), None, None, linear(0)));
    rejects(&b, op, || qd(x, w, Some(sc), None, None, linear(3))); // scale must be [3, 3]
    let bias3 = p(&f, Float32, &[3]);
    rejects(&b, op, || qd(x, w, Some(sc), None, Some(bias3), linear(4)));
    let nf4 = Quantization { scheme: QuantScheme::Nf4, ..linear(4) };
    let wu = p(&f, Uint8, &[3, 8]);
    rejects(&b, op, || qd(x, wu, Some(sc), Some(sc), None, nf4));
    let wf = p(&f, Float32, &[3, 8]);
    rejects(&b, op, || qd(x, wf, Some(sc), None, None, linear(4)));
    let x4 = p(&f, Float32, &[2, 4]);
    rejects(&b, op, || qd(x4, w, Some(sc), None, None, linear(4))); // K mismatch
    let xd = p(&f, Float64, &[2, 3]);
    rejects(&b, op, || qd(xd, w, Some(sc), None, None, linear(4)));
    let xg = p(&f, Float32, &[5, 64]);
    let wg = p(&f, Uint8, &[4, 36]);
    rejects(&b, op, || qd(xg, wg, Some(sc), None, None, ggml(GgmlType::Q4_0)));
    let wg_bad = p(&f, Uint8, &[4, 35]);
    rejects(&b, op, || qd(xg, wg_bad, None, None, None, ggml(GgmlType::Q4_0)));
    rejects(&b, op, || qd(xg, wg, None, None, None, ggml(GgmlType::Q8_0))); // 36 bytes ≠ k·34
    let wq2 = p(&f, Uint8, &[4, 84]);
    let xq2 = p(&f, Float32, &[5, 256]);
    let err = rejects(&b, op, || qd(xq2, wq2, None, None, None, ggml(GgmlType::Q2K)));
    assert!(err.is_not_implemented());
}

#[test]
fn quantized_embedding_lookup_shapes_and_errors() {
    let (b, f) = setup();
    let data = p(&f, Uint8, &[10, 34]);
    let idx = p(&f, Int32, &[3, 1]);
    let v = f.quantized_embedding_lookup(data, idx, ggml(GgmlType::Q8_0)).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[3, 32]));
    let idx3 = p(&f, Int64, &[2, 4, 1]);
    let v = f.quantized_embedding_lookup(data, idx3, ggml(GgmlType::Q8_0)).unwrap();
    assert_eq!(sh(&f, v), s(Float32, &[2, 4, 32]));
    let op = "QuantizedEmbeddingLookup";
    let idx_flat = p(&f, Int32, &[3]);
    rejects(&b, op, || f.quantized_embedding_lookup(data, idx_flat, ggml(GgmlType::Q8_0)));
    let fidx = p(&f, Float32, &[3, 1]);
    rejects(&b, op, || f.quantized_embedding_lookup(data, fidx, ggml(GgmlType::Q8_0)));
    let fdata = p(&f, Float32, &[10, 34]);
    rejects(&b, op, || f.quantized_embedding_lookup(fdata, idx, ggml(GgmlType::Q8_0)));
    rejects(&b, op, || f.quantized_embedding_lookup(data, idx, ggml(GgmlType::Q4_0))); // 34 % 18 ≠ 0
    let err = rejects(&b, op, || f.quantized_embedding_lookup(data, idx, linear(4)));
    assert!(err.is_not_implemented());
}

#[test]
fn qkv_projection_shapes_and_errors() {
    let (b, f) = setup();
    // Compliance case: x [1,3], w [3,4], q_dim 2, kv_dim 1.
    let x = p(&f, Float32, &[1, 3]);
    let w = p(&f, Float32, &[3, 4]);
    let (q, k, v) = f.fused_attention_qkv_projection(x, w, None, None, None, 2, 1).unwrap();
    assert_eq!((sh(&f, q), sh(&f, k), sh(&f, v)), (s(Float32, &[1, 2]), s(Float32, &[1, 1]), s(Float32, &[1, 1])));
    let bq = p(&f, Float32, &[2]);
    let bk = p(&f, Float32, &[1]);
    let (q, _, v) = f.fused_attention_qkv_projection(x, w, Some(bq), None, Some(bk), 2, 1).unwrap();
    assert_eq!((sh(&f, q), sh(&f, v)), (s(Float32, &[1, 2]), s(Float32, &[1, 1])));
    let op = "FusedAttentionQKVProjection";
    rejects(&b, op, || f.fused_attention_qkv_projection(x, w, None, None, None, 1, 1)); // 3 ≠ 4 columns
    rejects(&b, op, || f.fused_attention_qkv_projection(x, w, Some(bk), None, None, 2, 1)); // bias_q [1]
    rejects(&b, op, || f.fused_attention_qkv_projection(x, w, None, Some(bq), None, 2, 1)); // bias_k [2]
    rejects(&b, op, || f.fused_attention_qkv_projection(x, w, None, None, None, 4, 0));
    let x3 = p(&f, Float32, &[1, 1, 3]);
    rejects(&b, op, || f.fused_attention_qkv_projection(x3, w, None, None, None, 2, 1));
    let wd = p(&f, Float64, &[3, 4]);
    rejects(&b, op, || f.fused_attention_qkv_projection(x, wd, None, None, None, 2, 1));
}

// ------------------------------------------------------------------------------------------------
// Cross-cutting checks

#[test]
fn operands_of_another_builder_are_rejected() {
    let (b, f) = setup();
    let (_b2, f2) = setup();
    let x = p(&f, Float32, &[2, 3]);
    let foreign = p(&f2, Float32, &[3, 4]);
    rejects(&b, "DotGeneral", || f.matmul(x, foreign));
    rejects(&b, "FusedGelu", || f.fused_gelu(foreign, true));
    rejects(&b, "ReduceWindow", || f.reduce_window(foreign, ArithReduce::Sum, &[], &[], &[], &[], &[]));
}

#[test]
fn closures_may_use_structured_ops_on_captured_values() {
    let (_b, f) = setup();
    let x = p(&f, Float32, &[2, 3]);
    let w = p(&f, Float32, &[3, 4]);
    let c = f.closure().unwrap();
    let y = c.matmul(x, w).unwrap();
    assert_eq!(sh(&c, y), s(Float32, &[2, 4]));
}
