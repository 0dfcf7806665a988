//! Compliance cases for Gather and the Scatter ops (ops.md §4.7, §9, §11).

use std::sync::Arc;

use super::*;
use crate::api::{GatherDims, ScatterDims};

fn gdims(iva: usize, offsets: &[usize], collapsed: &[usize], map: &[usize], sizes: &[i64]) -> GatherDims {
    GatherDims {
        index_vector_axis: iva,
        offset_output_axes: offsets.to_vec(),
        collapsed_slice_axes: collapsed.to_vec(),
        start_index_map: map.to_vec(),
        slice_sizes: sizes.to_vec(),
        indices_are_sorted: false,
    }
}

fn sdims(iva: usize, window: &[usize], inserted: &[usize], map: &[usize]) -> ScatterDims {
    ScatterDims {
        index_vector_axis: iva,
        update_window_axes: window.to_vec(),
        inserted_window_axes: inserted.to_vec(),
        scatter_axes_to_operand_axes: map.to_vec(),
        indices_are_sorted: false,
        unique_indices: false,
    }
}

/// The catalogue's worked example: operand iota `[4,3,2,2]`, indices `[3,3,2]` (index vector
/// axis 1), offsets `[1,3]`, collapsed `[0,2]`, map `[0,2,3]`, sizes `[1,3,1,1]` → `[3,3,2,1]`,
/// with some start indices out of range (clamped).
pub fn gather_worked_example(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather], [Float32, Int32]);
    let operand: Vec<f32> = (0..48).map(|i| i as f32).collect();
    // Index vectors (a, c, d) for batch (i, j); stored as idx[i, component, j].
    let vecs: [[[i32; 3]; 2]; 3] = [[[0, 1, 1], [3, 0, 0]], [[2, 1, 0], [5, -1, 7]], [[1, 0, 1], [-2, 2, 0]]];
    let mut idx = Vec::new();
    for row in &vecs {
        for comp in 0..3 {
            for v in row {
                idx.push(v[comp]);
            }
        }
    }
    let d = gdims(1, &[1, 3], &[0, 2], &[0, 2, 3], &[1, 3, 1, 1]);
    let out = exec1(b, &[t(&operand, &[4, 3, 2, 2]), t(&idx, &[3, 3, 2])], |f, p| f.gather(p[0], p[1], &d))?;
    // Clamped starts: (0,1,1)→3, (3,0,0)→36, (2,1,0)→26, (5,−1,7)→(3,0,1)=37, (1,0,1)→13,
    // (−2,2,0)→(0,1,0)=2; the offset axis of size 3 adds 0, 4, 8.
    let want = [3f32, 36., 7., 40., 11., 44., 26., 37., 30., 41., 34., 45., 13., 2., 17., 6., 21., 10.];
    expect("worked example", &out, &[3, 3, 2, 1], &want)
}

/// 1-D: operand `{0..4}`, slice size 2, starts `{−1,3,4}` → `{{0,1},{3,4},{3,4}}`.
pub fn gather_1d_clamped(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather], [Int32]);
    let d = gdims(1, &[1], &[], &[0], &[2]);
    let out = exec1(b, &[v(&[0i32, 1, 2, 3, 4]), t(&[-1i32, 3, 4], &[3, 1])], |f, p| f.gather(p[0], p[1], &d))?;
    expect("1-D", &out, &[3, 2], &[0i32, 1, 3, 4, 3, 4])
}

/// Rows `[−1,0,4,5,7]` of a `[5,2]` operand (implicit index vector axis) → rows `[0,0,4,4,4]`.
pub fn gather_rows_clamped(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather], [Float32, Int32]);
    let operand: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let d = gdims(1, &[1], &[0], &[0], &[1, 2]);
    let out = exec1(b, &[t(&operand, &[5, 2]), v(&[-1i32, 0, 4, 5, 7])], |f, p| f.gather(p[0], p[1], &d))?;
    expect("rows", &out, &[5, 2], &[0f32, 1., 0., 1., 8., 9., 8., 9., 8., 9.])
}

/// Embedding lookup with I64, U8 and I32 indices of shape `[2,1]`.
pub fn gather_index_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather], [Float32]);
    let operand: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let d = gdims(1, &[1], &[0], &[0], &[1, 2]);
    let want = [6f32, 7., 0., 1.];
    let mut ran = false;
    for idx in [
        has_dtype(b, DType::Int64).then(|| t(&[3i64, 0], &[2, 1])),
        has_dtype(b, DType::Uint8).then(|| t(&[3u8, 0], &[2, 1])),
        has_dtype(b, DType::Int32).then(|| t(&[3i32, 0], &[2, 1])),
    ]
    .into_iter()
    .flatten()
    {
        let what = format!("{} indices", idx.dtype());
        let out = exec1(b, &[t(&operand, &[4, 2]), idx], |f, p| f.gather(p[0], p[1], &d))?;
        expect(&what, &out, &[2, 2], &want)?;
        ran = true;
    }
    if !ran {
        return skip("no integer index dtype");
    }
    Ok(())
}

/// A slice size larger than the dim and a collapsed axis with slice size ≠ 1 are rejected.
pub fn gather_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Gather], [Float32, Int32]);
    let ins = || vec![t(&[0f32; 10], &[5, 2]), v(&[1i32, 2])];
    let too_big = gdims(1, &[1], &[0], &[0], &[1, 3]);
    expect_error1(b, "slice size > dim", &ins(), |f, p| f.gather(p[0], p[1], &too_big))?;
    let bad_collapse = gdims(1, &[1], &[0], &[0], &[2, 2]);
    expect_error1(b, "collapsed size 2", &ins(), |f, p| f.gather(p[0], p[1], &bad_collapse))
}

/// ScatterSum into zeros `[5]` with window-2 updates at `[−1,3,4,1]`: windows even partly out of
/// bounds are skipped whole → `{0,1000,2000,10,20}`.
pub fn scatter_out_of_bounds_skipped(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterSum], [Float32, Int32]);
    let d = sdims(1, &[1], &[], &[0]);
    let updates = [1f32, 2., 10., 20., 100., 200., 1000., 2000.];
    let out = exec1(b, &[v(&[0f32; 5]), t(&[-1i32, 3, 4, 1], &[4, 1]), t(&updates, &[4, 2])], |f, p| {
        f.scatter_sum(p[0], p[1], p[2], &d)
    })?;
    expect("window 2", &out, &[5], &[0f32, 1000., 2000., 10., 20.])?;
    let d1 = sdims(1, &[], &[0], &[0]);
    let out = exec1(b, &[v(&[0f32; 5]), t(&[-1i32, 5, 2, 2], &[4, 1]), v(&[1f32, 2., 3., 4.])], |f, p| {
        f.scatter_sum(p[0], p[1], p[2], &d1)
    })?;
    expect("size 1", &out, &[5], &[0f32, 0., 7., 0., 0.])
}

/// Duplicate indices combine with the reduction: `[1],[1],[3]` ← `[1,2,3]` → `[0,3,0,3]`.
pub fn scatter_duplicates_combine(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterSum], [Float32, Int32]);
    let d = sdims(1, &[], &[0], &[0]);
    let out = exec1(b, &[v(&[0f32; 4]), t(&[1i32, 1, 3], &[3, 1]), v(&[1f32, 2., 3.])], |f, p| {
        f.scatter_sum(p[0], p[1], p[2], &d)
    })?;
    expect("duplicates", &out, &[4], &[0f32, 3., 0., 3.])
}

/// ScatterMax of `[3,NaN]` at one index gives NaN.
pub fn scatter_max_nan(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterMax], [Float32, Int32]);
    let d = sdims(1, &[], &[0], &[0]);
    let out = exec1(b, &[v(&[0f32; 2]), t(&[0i32, 0], &[2, 1]), v(&[3f32, f32::NAN])], |f, p| {
        f.scatter_max(p[0], p[1], p[2], &d)
    })?;
    expect("nan", &out, &[2], &[f32::NAN, 0.])
}

/// Go case: ScatterMax into zeros `[2,2,5]`, U8 indices `[[0,1],[1,0]]`, updates `[5,2]` with
/// window axis 0, inserted axes (0,1).
pub fn scatter_max_go_case(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterMax], [Float32, Uint8]);
    let d = sdims(1, &[0], &[0, 1], &[0, 1]);
    let updates = [1f32, -1., 2., -2., 3., -3., 4., -4., 5., -5.];
    let out = exec1(b, &[t(&[0f32; 20], &[2, 2, 5]), t(&[0u8, 1, 1, 0], &[2, 2]), t(&updates, &[5, 2])], |f, p| {
        f.scatter_max(p[0], p[1], p[2], &d)
    })?;
    let mut want = [0f32; 20];
    for (k, w) in want[5..10].iter_mut().enumerate() {
        *w = (k + 1) as f32;
    }
    expect("max", &out, &[2, 2, 5], &want)
}

/// Go case: ScatterSum into ones `[2,5,2]`, indices `[[0,1],[1,0]]`, updates `[2,5]` with window
/// axis 1, inserted axes / map (0,2).
pub fn scatter_sum_go_case(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterSum], [Float32, Int32]);
    let d = sdims(1, &[1], &[0, 2], &[0, 2]);
    let updates = [1f32, 2., 3., 4., 5., 10., 20., 30., 40., 50.];
    let out = exec1(b, &[t(&[1f32; 20], &[2, 5, 2]), t(&[0i32, 1, 1, 0], &[2, 2]), t(&updates, &[2, 5])], |f, p| {
        f.scatter_sum(p[0], p[1], p[2], &d)
    })?;
    let mut want = [1f32; 20];
    for w in 0..5 {
        want[w * 2 + 1] += (w + 1) as f32;
        want[10 + w * 2] += 10. * (w + 1) as f32;
    }
    expect("sum", &out, &[2, 5, 2], &want)
}

/// ScatterMin: `[5,5,5]` ← `[3,7,1]` at `[0],[2],[0]` → `[1,5,5]`.
pub fn scatter_min(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterMin], [Float32, Int32]);
    let d = sdims(1, &[], &[0], &[0]);
    let out = exec1(b, &[v(&[5f32; 3]), t(&[0i32, 2, 0], &[3, 1]), v(&[3f32, 7., 1.])], |f, p| {
        f.scatter_min(p[0], p[1], p[2], &d)
    })?;
    expect("min", &out, &[3], &[1f32, 5., 5.])
}

/// 2-D windows 2×2 into zeros `[3,3]` at (0,0), (2,2), (1,1), (−1,0): only the in-bounds
/// windows (0,0) and (1,1) apply.
pub fn scatter_2d_window_partly_outside(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterSum], [Float32, Int32]);
    let d = sdims(1, &[1, 2], &[], &[0, 1]);
    let mut updates = Vec::new();
    for k in 1..=4 {
        updates.extend([k as f32; 4]);
    }
    let out = exec1(
        b,
        &[t(&[0f32; 9], &[3, 3]), t(&[0i32, 0, 2, 2, 1, 1, -1, 0], &[4, 2]), t(&updates, &[4, 2, 2])],
        |f, p| f.scatter_sum(p[0], p[1], p[2], &d),
    )?;
    expect("2-D", &out, &[3, 3], &[1f32, 1., 0., 1., 4., 3., 0., 3., 3.])
}

/// Integer ScatterSum with I64 indices (duplicates add).
pub fn scatter_int_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ScatterSum], [Int32, Int64]);
    let d = sdims(1, &[], &[0], &[0]);
    let out = exec1(b, &[v(&[1i32, 2, 3, 4]), t(&[3i64, 0, 3], &[3, 1]), v(&[10i32, 20, 30])], |f, p| {
        f.scatter_sum(p[0], p[1], p[2], &d)
    })?;
    expect("i32", &out, &[4], &[21i32, 2, 3, 44])
}
