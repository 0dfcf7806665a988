//! Compliance cases for ReduceWindow and SelectAndScatter (ops.md §4.6, §9, §11).

use std::sync::Arc;

use super::*;
use crate::ir::op::ArithReduce;

#[allow(clippy::too_many_arguments)]
fn rw<T: TestElem>(
    b: &Arc<dyn Backend>,
    x: &[T],
    dims: &[usize],
    kind: ArithReduce,
    window: &[i64],
    strides: &[i64],
    in_dil: &[i64],
    win_dil: &[i64],
    padding: &[(i64, i64)],
) -> Result<Buffer, String> {
    exec1(b, &[t(x, dims)], |f, p| f.reduce_window(p[0], kind, window, strides, in_dil, win_dil, padding))
}

#[allow(clippy::too_many_arguments)]
fn sas(
    b: &Arc<dyn Backend>,
    operand: &[f32],
    dims: &[usize],
    source: &[f32],
    src_dims: &[usize],
    kind: ArithReduce,
    window: &[i64],
    strides: &[i64],
    padding: &[(i64, i64)],
) -> Result<Buffer, String> {
    exec1(b, &[t(operand, dims), t(source, src_dims)], |f, p| {
        f.select_and_scatter(p[0], p[1], kind, window, strides, padding)
    })
}

/// Sum, window 2, stride 1 over `[1,2,3,4]` → `[3,5,7]`.
pub fn reduce_window_sum_w2_s1(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let out = rw(b, &[1f32, 2., 3., 4.], &[4], ArithReduce::Sum, &[2], &[1], &[], &[], &[])?;
    expect("sum", &out, &[3], &[3f32, 5., 7.])
}

/// Product, window 2, stride 2, padding (1,1) over `[1,2,3,4]` → `[1,6,4]` (padding holds 1).
pub fn reduce_window_product_padding(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let out = rw(b, &[1f32, 2., 3., 4.], &[4], ArithReduce::Product, &[2], &[2], &[], &[], &[(1, 1)])?;
    expect("product", &out, &[3], &[1f32, 6., 4.])
}

/// Max, window 3, window dilation 2, stride 1 over `[1..7]` → `[5,6,7]`.
pub fn reduce_window_window_dilation(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let x = [1f32, 2., 3., 4., 5., 6., 7.];
    let out = rw(b, &x, &[7], ArithReduce::Max, &[3], &[1], &[1], &[2], &[])?;
    expect("max", &out, &[3], &[5f32, 6., 7.])
}

/// Max, window 3, input dilation 2, padding (1,1), stride 1 over `[1..7]` → 13 values.
pub fn reduce_window_input_dilation(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let x = [1f32, 2., 3., 4., 5., 6., 7.];
    let out = rw(b, &x, &[7], ArithReduce::Max, &[3], &[1], &[2], &[1], &[(1, 1)])?;
    expect("max", &out, &[13], &[1f32, 2., 2., 3., 3., 4., 4., 5., 5., 6., 6., 7., 7.])
}

/// Dilation holes hold the identity: Max of `[−1,−2,−3,−4]` (base dilation 2) =
/// `[−1,−2,−2,−3,−3]`; Sum and Product ignore holes too.
pub fn reduce_window_holes_hold_identity(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let out = rw(b, &[-1f32, -2., -3., -4.], &[4], ArithReduce::Max, &[3], &[1], &[2], &[1], &[])?;
    expect("max", &out, &[5], &[-1f32, -2., -2., -3., -3.])?;
    let out = rw(b, &[1f32, 2., 3.], &[3], ArithReduce::Sum, &[2], &[1], &[2], &[1], &[])?;
    expect("sum", &out, &[4], &[1f32, 2., 2., 3.])?;
    let out = rw(b, &[2f32, 3.], &[2], ArithReduce::Product, &[2], &[1], &[2], &[1], &[])?;
    expect("product", &out, &[2], &[2f32, 3.])
}

/// Empty strides default to the window size: Sum window 2 over `[1..6]` → `[3,7,11]`.
pub fn reduce_window_default_strides(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let out = rw(b, &[1f32, 2., 3., 4., 5., 6.], &[6], ArithReduce::Sum, &[2], &[], &[], &[], &[])?;
    expect("sum", &out, &[3], &[3f32, 7., 11.])
}

/// A window longer than the (padded) input gives an axis of size 0, not an error.
pub fn reduce_window_empty_output(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let out = rw(b, &[1f32, 2.], &[2], ArithReduce::Sum, &[3], &[1], &[], &[], &[])?;
    expect::<f32>("window 3 on 2", &out, &[0], &[])
}

/// 2-D Sum with a 2×2 window, stride 1, over iota `[3,3]` → `[[8,12],[20,24]]`; Max with
/// stride 2 and padding.
pub fn reduce_window_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Float32]);
    let x: Vec<f32> = (0..9).map(|i| i as f32).collect();
    let out = rw(b, &x, &[3, 3], ArithReduce::Sum, &[2, 2], &[1, 1], &[], &[], &[])?;
    expect("sum", &out, &[2, 2], &[8f32, 12., 20., 24.])?;
    let out = rw(b, &x, &[3, 3], ArithReduce::Max, &[2, 2], &[2, 2], &[], &[], &[(0, 1), (0, 1)])?;
    expect("max", &out, &[2, 2], &[4f32, 5., 7., 8.])
}

/// I32 Min, window 2, stride 1, with and without low padding (padding = MAX, ignored).
pub fn reduce_window_min_int(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceWindow], [Int32]);
    let x = [5i32, 3, 8, 1, 9];
    let out = rw(b, &x, &[5], ArithReduce::Min, &[2], &[1], &[], &[], &[])?;
    expect("min", &out, &[4], &[3i32, 3, 1, 1])?;
    let out = rw(b, &x, &[5], ArithReduce::Min, &[2], &[1], &[], &[], &[(1, 0)])?;
    expect("min padded", &out, &[5], &[5i32, 3, 3, 1, 1])
}

/// SelectAndScatterMax, window 3, stride 2: `[1,5,3,6,2]`, source `[10,20]` → `[0,10,0,20,0]`.
pub fn select_and_scatter_max_w3_s2(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let out = sas(b, &[1., 5., 3., 6., 2.], &[5], &[10., 20.], &[2], ArithReduce::Max, &[3], &[2], &[])?;
    expect("max", &out, &[5], &[0f32, 10., 0., 20., 0.])
}

/// Ties pick the first: `[5,5,1,5]`, window 2, stride 1, source `[10,20,30]` → `[10,20,0,30]`.
pub fn select_and_scatter_ties_first(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let out = sas(b, &[5., 5., 1., 5.], &[4], &[10., 20., 30.], &[3], ArithReduce::Max, &[2], &[1], &[])?;
    expect("ties", &out, &[4], &[10f32, 20., 0., 30.])
}

/// Overlapping windows accumulate: `[1,3,2]`, window 2, stride 1, source `[5,7]` → `[0,12,0]`.
pub fn select_and_scatter_overlapping(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let out = sas(b, &[1., 3., 2.], &[3], &[5., 7.], &[2], ArithReduce::Max, &[2], &[1], &[])?;
    expect("overlap", &out, &[3], &[0f32, 12., 0.])
}

/// 2-D: `[[1,2],[3,4]]`, window 2×2, source `[[10]]` → `[[0,0],[0,10]]`.
pub fn select_and_scatter_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let out = sas(b, &[1., 2., 3., 4.], &[2, 2], &[10.], &[1, 1], ArithReduce::Max, &[2, 2], &[1, 1], &[])?;
    expect("2-D", &out, &[2, 2], &[0f32, 0., 0., 10.])
}

/// SelectAndScatterMin: `[3,1,1,2]` w2 s2 → `[0,10,20,0]`; `[1,5,3,6,2]` w3 s2 → `[10,0,0,0,20]`.
pub fn select_and_scatter_min(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMin], [Float32]);
    let out = sas(b, &[3., 1., 1., 2.], &[4], &[10., 20.], &[2], ArithReduce::Min, &[2], &[2], &[])?;
    expect("min w2", &out, &[4], &[0f32, 10., 20., 0.])?;
    let out = sas(b, &[1., 5., 3., 6., 2.], &[5], &[10., 20.], &[2], ArithReduce::Min, &[3], &[2], &[])?;
    expect("min w3", &out, &[5], &[10f32, 0., 0., 0., 20.])
}

/// XLA selection with NaN (§9): `[1,NaN,3]` → index 2, `[1,3,NaN]` → index 2 (the NaN),
/// `[NaN,NaN,3]` → index 2.
pub fn select_and_scatter_nan_selection(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let nan = f32::NAN;
    for x in [[1., nan, 3.], [1., 3., nan], [nan, nan, 3.]] {
        let out = sas(b, &x, &[3], &[10.], &[1], ArithReduce::Max, &[3], &[1], &[])?;
        expect(&format!("operand {x:?}"), &out, &[3], &[0f32, 0., 10.])?;
    }
    Ok(())
}

/// Padding cells are never selected, even when they would tie: operand `[−Inf,−Inf]`, window 2,
/// stride 1, padding (1,0), source `[1,2]` → `[3,0]`.
pub fn select_and_scatter_padding_never_selected(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [SelectAndScatterMax], [Float32]);
    let ninf = f32::NEG_INFINITY;
    let out = sas(b, &[ninf, ninf], &[2], &[1., 2.], &[2], ArithReduce::Max, &[2], &[1], &[(1, 0)])?;
    expect("padding", &out, &[2], &[3f32, 0.])?;
    let out = sas(b, &[-5., -3.], &[2], &[1., 2., 4.], &[3], ArithReduce::Max, &[2], &[1], &[(1, 1)])?;
    expect("padding both sides", &out, &[2], &[1f32, 6.])
}
