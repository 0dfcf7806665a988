//! Compliance cases for shape manipulation, Where and Clamp (ops.md §4.4, §4.5, §9, §11).

use std::sync::Arc;

use half::{bf16, f16};

use super::*;
use crate::ir::op::PadAxis;

fn pa(start: i64, end: i64, interior: i64) -> PadAxis {
    PadAxis { start, end, interior }
}

fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// I32 `[4]` → `[2,2]`; F32 `[2,3]` → `[3,2]` keeps row-major order; `[6]` → `[1,2,3]`.
pub fn reshape_basic(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reshape], [Int32, Float32]);
    let out = exec1(b, &[v(&[1i32, 2, 3, 4])], |f, p| f.reshape(p[0], &[2, 2]))?;
    expect("[4]->[2,2]", &out, &[2, 2], &[1i32, 2, 3, 4])?;
    let out = exec1(b, &[t(&iota_f32(6), &[2, 3])], |f, p| f.reshape(p[0], &[3, 2]))?;
    expect("[2,3]->[3,2]", &out, &[3, 2], &iota_f32(6))?;
    let out = exec1(b, &[v(&iota_f32(6))], |f, p| f.reshape(p[0], &[1, 2, 3]))?;
    expect("[6]->[1,2,3]", &out, &[1, 2, 3], &iota_f32(6))
}

/// `[1]` → scalar, scalar → `[1,1]`, `[0,3]` → `[3,0]`.
pub fn reshape_scalar_and_empty(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reshape], [Float32]);
    expect("[1]->[]", &exec1(b, &[v(&[5f32])], |f, p| f.reshape(p[0], &[]))?, &[], &[5f32])?;
    expect("[]->[1,1]", &exec1(b, &[sc(5f32)], |f, p| f.reshape(p[0], &[1, 1]))?, &[1, 1], &[5f32])?;
    let out = exec1(b, &[t::<f32>(&[], &[0, 3])], |f, p| f.reshape(p[0], &[3, 0]))?;
    expect::<f32>("[0,3]->[3,0]", &out, &[3, 0], &[])
}

/// Reshape to a different element count is rejected.
pub fn reshape_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reshape], [Float32]);
    expect_error1(b, "[4]->[3]", &[v(&[1f32; 4])], |f, p| f.reshape(p[0], &[3]))?;
    expect_error1(b, "[4]->[2,3]", &[v(&[1f32; 4])], |f, p| f.reshape(p[0], &[2, 3]))
}

/// F32 `[2,3,4]` with perm (2,0,1) → `[4,2,3]`, `out[i,j,k] = in[j,k,i]`.
pub fn transpose_3d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Transpose], [Float32]);
    let out = exec1(b, &[t(&iota_f32(24), &[2, 3, 4])], |f, p| f.transpose(p[0], &[2, 0, 1]))?;
    let mut want = Vec::new();
    for i in 0..4 {
        for j in 0..2 {
            for k in 0..3 {
                want.push((12 * j + 4 * k + i) as f32);
            }
        }
    }
    expect("perm (2,0,1)", &out, &[4, 2, 3], &want)?;
    let out = exec1(b, &[t(&iota_f32(6), &[2, 3])], |f, p| f.transpose(p[0], &[1, 0]))?;
    expect("2-D", &out, &[3, 2], &[0f32, 3., 1., 4., 2., 5.])
}

/// Transpose of a scalar (empty perm) and of a size-0 tensor; invalid perms rejected.
pub fn transpose_scalar_and_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Transpose], [Float32]);
    expect("scalar", &exec1(b, &[sc(3f32)], |f, p| f.transpose(p[0], &[]))?, &[], &[3f32])?;
    let out = exec1(b, &[t::<f32>(&[], &[0, 2])], |f, p| f.transpose(p[0], &[1, 0]))?;
    expect::<f32>("empty", &out, &[2, 0], &[])?;
    let x = || vec![t(&iota_f32(6), &[2, 3])];
    expect_error1(b, "perm [0,0]", &x(), |f, p| f.transpose(p[0], &[0, 0]))?;
    expect_error1(b, "perm [1]", &x(), |f, p| f.transpose(p[0], &[1]))?;
    expect_error1(b, "perm [0,2]", &x(), |f, p| f.transpose(p[0], &[0, 2]))
}

/// BF16 scalar → `[2]`.
pub fn broadcast_scalar(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim], [BFloat16]);
    let x = bf16::from_f32(3.0);
    let out = exec1(b, &[sc(x)], |f, p| f.broadcast_in_dim(p[0], &shape(DType::BFloat16, &[2]), &[]))?;
    expect("scalar->[2]", &out, &[2], &[x, x])
}

/// I8 `[1,2]{1,3}` → `[2,3,2]` with axes (0,2): every innermost row is `{1,3}`.
pub fn broadcast_prefix(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim], [Int8]);
    let out =
        exec1(b, &[t(&[1i8, 3], &[1, 2])], |f, p| f.broadcast_in_dim(p[0], &shape(DType::Int8, &[2, 3, 2]), &[0, 2]))?;
    expect("prefix", &out, &[2, 3, 2], &[1i8, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3])
}

/// F16 `[2]{3,5}` → `[2,2,2]` with axes (1): `x[j]` at `[i,j,k]`.
pub fn broadcast_interspaced(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim], [Float16]);
    let x = vals::<f16>(&[3., 5.]);
    let out = exec1(b, &[v(&x)], |f, p| f.broadcast_in_dim(p[0], &shape(DType::Float16, &[2, 2, 2]), &[1]))?;
    expect("interspaced", &out, &[2, 2, 2], &vals::<f16>(&[3., 3., 5., 5., 3., 3., 5., 5.]))
}

/// A permuting axis map: x `[2,3]`, axes `[1,0]`, target `[3,2]` → `out[i,j] = x[j,i]`.
pub fn broadcast_permuting_axes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim], [Float32]);
    let out = exec1(b, &[t(&[1f32, 2., 3., 4., 5., 6.], &[2, 3])], |f, p| {
        f.broadcast_in_dim(p[0], &shape(DType::Float32, &[3, 2]), &[1, 0])
    })?;
    expect("permute", &out, &[3, 2], &[1f32, 4., 2., 5., 3., 6.])?;
    let out = exec1(b, &[t(&[1f32, 2.], &[2, 1])], |f, p| {
        f.broadcast_in_dim(p[0], &shape(DType::Float32, &[3, 2]), &[1, 0])
    })?;
    expect("permute + size-1", &out, &[3, 2], &[1f32, 2., 1., 2., 1., 2.])
}

/// Broadcasting a dim other than 1 to a different size, or duplicate axes, is rejected.
pub fn broadcast_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim], [Float32]);
    expect_error1(b, "[3]->[2]", &[v(&[1f32, 2., 3.])], |f, p| {
        f.broadcast_in_dim(p[0], &shape(DType::Float32, &[2]), &[0])
    })?;
    expect_error1(b, "duplicate axes", &[t(&[1f32; 4], &[2, 2])], |f, p| {
        f.broadcast_in_dim(p[0], &shape(DType::Float32, &[2, 2]), &[0, 0])
    })?;
    expect_error1(b, "axes count", &[t(&[1f32; 4], &[2, 2])], |f, p| {
        f.broadcast_in_dim(p[0], &shape(DType::Float32, &[2, 2, 2]), &[0])
    })
}

/// F32 1-D concatenation.
pub fn concatenate_1d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [Float32]);
    let out = exec1(b, &[v(&[1f32, 2.]), v(&[3f32])], |f, p| f.concatenate(0, &[p[0], p[1]]))?;
    expect("1-D", &out, &[3], &[1f32, 2., 3.])
}

/// I8 2-D along axis 0.
pub fn concatenate_axis0_i8(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [Int8]);
    let out = exec1(b, &[t(&[1i8, 2], &[1, 2]), t(&[3i8, 4, 5, 6], &[2, 2])], |f, p| f.concatenate(0, &[p[0], p[1]]))?;
    expect("axis 0", &out, &[3, 2], &[1i8, 2, 3, 4, 5, 6])
}

/// BF16, three inputs along axis 1.
pub fn concatenate_three_bf16(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [BFloat16]);
    let ins = [
        t(&vals::<bf16>(&[1., 2.]), &[2, 1]),
        t(&vals::<bf16>(&[3., 4., 5., 6.]), &[2, 2]),
        t(&vals::<bf16>(&[7., 8.]), &[2, 1]),
    ];
    let out = exec1(b, &ins, |f, p| f.concatenate(1, &[p[0], p[1], p[2]]))?;
    expect("axis 1", &out, &[2, 4], &vals::<bf16>(&[1., 3., 4., 7., 2., 5., 6., 8.]))
}

/// One operand is returned as is; size-0 operands contribute nothing.
pub fn concatenate_single_and_empty(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [Int32]);
    expect("single", &exec1(b, &[v(&[4i32, 5])], |f, p| f.concatenate(0, &[p[0]]))?, &[2], &[4i32, 5])?;
    let out =
        exec1(b, &[v(&[1i32, 2]), t::<i32>(&[], &[0]), v(&[3i32])], |f, p| f.concatenate(0, &[p[0], p[1], p[2]]))?;
    expect("with empty", &out, &[3], &[1i32, 2, 3])
}

/// Scalars, mismatched non-axis dims, mixed dtypes and an out-of-range axis are rejected.
pub fn concatenate_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [Int32, Float32]);
    expect_error1(b, "scalars", &[sc(1i32), sc(2i32)], |f, p| f.concatenate(0, &[p[0], p[1]]))?;
    expect_error1(b, "dims", &[t(&[1i32; 4], &[2, 2]), t(&[1i32; 3], &[1, 3])], |f, p| {
        f.concatenate(0, &[p[0], p[1]])
    })?;
    expect_error1(b, "dtypes", &[v(&[1i32]), v(&[1f32])], |f, p| f.concatenate(0, &[p[0], p[1]]))?;
    expect_error1(b, "axis", &[v(&[1i32]), v(&[1i32])], |f, p| f.concatenate(1, &[p[0], p[1]]))
}

/// `{0..4}[2:4]` → `{2,3}`, `[2:5:2]` → `{2,4}`, full range.
pub fn slice_simple(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Slice], [Int32]);
    let x = || vec![v(&[0i32, 1, 2, 3, 4])];
    expect("[2:4]", &exec1(b, &x(), |f, p| f.slice(p[0], &[2], &[4], &[1]))?, &[2], &[2i32, 3])?;
    expect("[2:5:2]", &exec1(b, &x(), |f, p| f.slice(p[0], &[2], &[5], &[2]))?, &[2], &[2i32, 4])?;
    expect("[0:5:3]", &exec1(b, &x(), |f, p| f.slice(p[0], &[0], &[5], &[3]))?, &[2], &[0i32, 3])?;
    expect("[:]", &exec1(b, &x(), |f, p| f.slice(p[0], &[0], &[5], &[1]))?, &[5], &[0i32, 1, 2, 3, 4])
}

/// F32 `[3,4]` iota, rows 0:3:2 and columns 1:4:2 → `[[1,3],[9,11]]`.
pub fn slice_strided_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Slice], [Float32]);
    let out = exec1(b, &[t(&iota_f32(12), &[3, 4])], |f, p| f.slice(p[0], &[0, 1], &[3, 4], &[2, 2]))?;
    expect("strided", &out, &[2, 2], &[1f32, 3., 9., 11.])?;
    let out = exec1(b, &[t(&iota_f32(12), &[3, 4])], |f, p| f.slice(p[0], &[1, 0], &[3, 2], &[1, 1]))?;
    expect("with start", &out, &[2, 2], &[4f32, 5., 8., 9.])
}

/// Empty slices: `[2:2]` → `[0]`; `[[0:2],[1:1]]` → `[2,0]`.
pub fn slice_empty(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Slice], [Float32]);
    let out = exec1(b, &[v(&iota_f32(5))], |f, p| f.slice(p[0], &[2], &[2], &[1]))?;
    expect::<f32>("[2:2]", &out, &[0], &[])?;
    let out = exec1(b, &[t(&iota_f32(6), &[2, 3])], |f, p| f.slice(p[0], &[0, 1], &[2, 1], &[1, 1]))?;
    expect::<f32>("[0:2,1:1]", &out, &[2, 0], &[])
}

/// Slice is strict (§9): negative start, limit > dim, start > limit and stride 0 are errors.
pub fn slice_strict_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Slice], [Float32]);
    let x = || vec![v(&iota_f32(5))];
    expect_error1(b, "negative start", &x(), |f, p| f.slice(p[0], &[-1], &[5], &[1]))?;
    expect_error1(b, "limit > dim", &x(), |f, p| f.slice(p[0], &[0], &[6], &[1]))?;
    expect_error1(b, "start > limit", &x(), |f, p| f.slice(p[0], &[3], &[2], &[1]))?;
    expect_error1(b, "stride 0", &x(), |f, p| f.slice(p[0], &[0], &[5], &[0]))
}

/// DynamicSlice of `{0..4}`, size 2: a negative start gets +dim then clamps (§9, §11).
pub fn dynamic_slice_negative_starts(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicSlice], [Int32]);
    let cases = [(-1, [3, 4]), (-2, [3, 4]), (-5, [0, 1]), (-7, [0, 1]), (10, [3, 4]), (1, [1, 2]), (0, [0, 1])];
    for (start, want) in cases {
        let out = exec1(b, &[v(&[0i32, 1, 2, 3, 4]), sc(start)], |f, p| f.dynamic_slice(p[0], &[p[1]], &[2]))?;
        expect(&format!("start {start}"), &out, &[2], &want)?;
    }
    Ok(())
}

/// 2-D DynamicSlice with I64 starts: (1,2) and (2,−1) both give `[[6,7],[10,11]]` of iota `[3,4]`.
pub fn dynamic_slice_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicSlice], [Float32, Int64]);
    for (r, c) in [(1i64, 2i64), (2, -1)] {
        let out =
            exec1(b, &[t(&iota_f32(12), &[3, 4]), sc(r), sc(c)], |f, p| f.dynamic_slice(p[0], &[p[1], p[2]], &[2, 2]))?;
        expect(&format!("start ({r},{c})"), &out, &[2, 2], &[6f32, 7., 10., 11.])?;
    }
    Ok(())
}

/// DynamicUpdateSlice of `{0..4}` with `{9,9}`: start −1 → `{0,1,2,9,9}`, 1, 10 (clamped), −5.
pub fn dynamic_update_slice_clamps(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicUpdateSlice], [Int32]);
    let cases = [(-1, [0, 1, 2, 9, 9]), (1, [0, 9, 9, 3, 4]), (10, [0, 1, 2, 9, 9]), (-5, [9, 9, 2, 3, 4])];
    for (start, want) in cases {
        let out = exec1(b, &[v(&[0i32, 1, 2, 3, 4]), v(&[9i32, 9]), sc(start)], |f, p| {
            f.dynamic_update_slice(p[0], p[1], &[p[2]])
        })?;
        expect(&format!("start {start}"), &out, &[5], &want)?;
    }
    Ok(())
}

/// 2-D DynamicUpdateSlice of zeros `[3,3]` with `[[1,2],[3,4]]` at (1,0).
pub fn dynamic_update_slice_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicUpdateSlice], [Float32, Int32]);
    let out = exec1(b, &[t(&[0f32; 9], &[3, 3]), t(&[1f32, 2., 3., 4.], &[2, 2]), sc(1i32), sc(0i32)], |f, p| {
        f.dynamic_update_slice(p[0], p[1], &[p[2], p[3]])
    })?;
    expect("2-D", &out, &[3, 3], &[0f32, 0., 0., 1., 2., 0., 3., 4., 0.])
}

/// Pad `{1..5}`: (−1,−1,interior 1) → `{0,2,0,3,0,4,0}`; (−2,1,0) → `{3,4,5,0}`.
pub fn pad_negative_and_interior(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Float32]);
    let x = || vec![v(&[1f32, 2., 3., 4., 5.]), sc(0f32)];
    let out = exec1(b, &x(), |f, p| f.pad(p[0], p[1], &[pa(-1, -1, 1)]))?;
    expect("(-1,-1,1)", &out, &[7], &[0f32, 2., 0., 3., 0., 4., 0.])?;
    let out = exec1(b, &x(), |f, p| f.pad(p[0], p[1], &[pa(-2, 1, 0)]))?;
    expect("(-2,1,0)", &out, &[4], &[3f32, 4., 5., 0.])
}

/// Pad `{1..5}` with (2,−3,interior 2) → 12 elements: the crop applies after interior padding.
pub fn pad_crop_with_interior(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Int32]);
    let out = exec1(b, &[v(&[1i32, 2, 3, 4, 5]), sc(0i32)], |f, p| f.pad(p[0], p[1], &[pa(2, -3, 2)]))?;
    expect("(2,-3,2)", &out, &[12], &[0i32, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4])
}

/// Pad of an empty vector with (1,1,3) → `{9,9}` (no interior between zero elements).
pub fn pad_empty_input(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Float32]);
    let out = exec1(b, &[t::<f32>(&[], &[0]), sc(9f32)], |f, p| f.pad(p[0], p[1], &[pa(1, 1, 3)]))?;
    expect("empty", &out, &[2], &[9f32, 9.])
}

/// 2-D Pad with interior padding on both axes.
pub fn pad_2d_interior(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Float32]);
    let out =
        exec1(b, &[t(&[1f32, 2., 3., 4.], &[2, 2]), sc(-1f32)], |f, p| f.pad(p[0], p[1], &[pa(1, 0, 1), pa(0, 1, 1)]))?;
    let want = [-1f32, -1., -1., -1., 1., -1., 2., -1., -1., -1., -1., -1., 3., -1., 4., -1.];
    expect("2-D", &out, &[4, 4], &want)
}

/// Configs for leading axes only (missing = 0); Bool operands pad too.
pub fn pad_leading_axes_only_and_bool(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Int32]);
    let out = exec1(b, &[t(&[1i32, 2, 3, 4], &[2, 2]), sc(7i32)], |f, p| f.pad(p[0], p[1], &[pa(1, 0, 0)]))?;
    expect("leading", &out, &[3, 2], &[7i32, 7, 1, 2, 3, 4])?;
    if has_dtype(b, DType::Bool) {
        let out = exec1(b, &[v(&[true]), sc(false)], |f, p| f.pad(p[0], p[1], &[pa(1, 1, 0)]))?;
        expect("bool", &out, &[3], &[false, true, false])?;
    }
    Ok(())
}

/// A negative resulting size or negative interior is rejected.
pub fn pad_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Pad], [Float32]);
    let x = || vec![v(&[1f32, 2.]), sc(0f32)];
    expect_error1(b, "size < 0", &x(), |f, p| f.pad(p[0], p[1], &[pa(-3, 0, 0)]))?;
    expect_error1(b, "interior < 0", &x(), |f, p| f.pad(p[0], p[1], &[pa(0, 0, -1)]))?;
    expect_error1(b, "fill not scalar", &[v(&[1f32, 2.]), v(&[0f32])], |f, p| f.pad(p[0], p[1], &[pa(1, 0, 0)]))
}

/// F32 2×2 reversed on both axes.
pub fn reverse_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reverse], [Float32]);
    let out = exec1(b, &[t(&[1f32, 2., 3., 4.], &[2, 2])], |f, p| f.reverse(p[0], &[0, 1]))?;
    expect("both axes", &out, &[2, 2], &[4f32, 3., 2., 1.])
}

/// I32 `[2,3]` reversed on axis 1; no axes = identity; out-of-range axis rejected.
pub fn reverse_one_axis(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Reverse], [Int32]);
    let x = || vec![t(&[1i32, 2, 3, 4, 5, 6], &[2, 3])];
    expect("axis 1", &exec1(b, &x(), |f, p| f.reverse(p[0], &[1]))?, &[2, 3], &[3i32, 2, 1, 6, 5, 4])?;
    expect("axis 0", &exec1(b, &x(), |f, p| f.reverse(p[0], &[0]))?, &[2, 3], &[4i32, 5, 6, 1, 2, 3])?;
    expect("none", &exec1(b, &x(), |f, p| f.reverse(p[0], &[]))?, &[2, 3], &[1i32, 2, 3, 4, 5, 6])?;
    expect_error1(b, "axis 2", &x(), |f, p| f.reverse(p[0], &[2]))
}

/// I8 `[2,3]` axis 1 and BF16 `[2,3]` axis 0 (Go cases), U64 `[4]`.
pub fn iota_int_and_half(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Iota]);
    if has_dtype(b, DType::Int8) {
        let out = exec1(b, &[], |f, _| f.iota(&shape(DType::Int8, &[2, 3]), 1))?;
        expect("i8 axis 1", &out, &[2, 3], &[0i8, 1, 2, 0, 1, 2])?;
    }
    if has_dtype(b, DType::BFloat16) {
        let out = exec1(b, &[], |f, _| f.iota(&shape(DType::BFloat16, &[2, 3]), 0))?;
        expect("bf16 axis 0", &out, &[2, 3], &vals::<bf16>(&[0., 0., 0., 1., 1., 1.]))?;
    }
    if has_dtype(b, DType::Uint64) {
        let out = exec1(b, &[], |f, _| f.iota(&shape(DType::Uint64, &[4]), 0))?;
        expect("u64", &out, &[4], &[0u64, 1, 2, 3])?;
    }
    Ok(())
}

/// F32 `[3,2]` axis 0 and F64 `[2,2]` axis 1.
pub fn iota_float_axis(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Iota], [Float32]);
    let out = exec1(b, &[], |f, _| f.iota(&shape(DType::Float32, &[3, 2]), 0))?;
    expect("f32", &out, &[3, 2], &[0f32, 0., 1., 1., 2., 2.])?;
    if has_dtype(b, DType::Float64) {
        let out = exec1(b, &[], |f, _| f.iota(&shape(DType::Float64, &[2, 2]), 1))?;
        expect("f64", &out, &[2, 2], &[0f64, 1., 0., 1.])?;
    }
    Ok(())
}

/// Iota of a scalar shape or with an out-of-range axis is rejected.
pub fn iota_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Iota], [Float32]);
    expect_error1(b, "rank 0", &[], |f, _| f.iota(&shape(DType::Float32, &[]), 0))?;
    expect_error1(b, "axis 2", &[], |f, _| f.iota(&shape(DType::Float32, &[2, 2]), 2))
}

/// Where with all scalars (BF16).
pub fn where_scalars_bf16(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Where], [Bool, BFloat16]);
    let (x, y) = (bf16::from_f32(1.5), bf16::from_f32(-2.0));
    expect("true", &exec1(b, &[sc(true), sc(x), sc(y)], |f, p| f.where_(p[0], p[1], p[2]))?, &[], &[x])?;
    expect("false", &exec1(b, &[sc(false), sc(x), sc(y)], |f, p| f.where_(p[0], p[1], p[2]))?, &[], &[y])
}

/// A scalar condition picks a whole U8 vector.
pub fn where_scalar_cond(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Where], [Bool, Uint8]);
    let out = exec1(b, &[sc(false), v(&[1u8, 2]), v(&[3u8, 4])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect("false", &out, &[2], &[3u8, 4])
}

/// A Bool vector with I32 scalar values takes the condition's dims.
pub fn where_bool_vector_scalar_values(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Where], [Bool, Int32]);
    let out = exec1(b, &[v(&[true, false, true]), sc(1i32), sc(0i32)], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect("vector cond", &out, &[3], &[1i32, 0, 1])
}

/// All vectors (F32), and one vector value with a scalar value.
pub fn where_all_vectors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Where], [Bool, Float32]);
    let out = exec1(b, &[v(&[true, false]), v(&[1f32, 2.]), v(&[3f32, 4.])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect("vectors", &out, &[2], &[1f32, 4.])?;
    let out = exec1(b, &[v(&[true, false]), v(&[1f32, 2.]), sc(f32::NAN)], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect("scalar on_false", &out, &[2], &[1f32, f32::NAN])
}

/// Non-Bool condition, mismatched value dtypes and shapes are rejected.
pub fn where_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Where], [Bool, Float32, Int32]);
    expect_error1(b, "f32 cond", &[v(&[1f32]), v(&[1f32]), v(&[2f32])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect_error1(b, "dtypes", &[v(&[true]), v(&[1f32]), v(&[2i32])], |f, p| f.where_(p[0], p[1], p[2]))?;
    expect_error1(b, "cond dims", &[v(&[true, false, true]), v(&[1f32, 2.]), v(&[3f32, 4.])], |f, p| {
        f.where_(p[0], p[1], p[2])
    })
}

/// Clamp(min, x, max): `clamp(2, [0,1,3,NaN], 1)` = `[1,1,1,NaN]` (min > max → max); NaN bounds
/// give NaN; an ordinary clamp.
pub fn clamp_nan_and_order(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Clamp], [Float32]);
    let nan = f32::NAN;
    let out = exec1(b, &[sc(2f32), v(&[0f32, 1., 3., nan]), sc(1f32)], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("min>max", &out, &[4], &[1f32, 1., 1., nan])?;
    let out = exec1(b, &[sc(nan), v(&[1f32]), sc(2f32)], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("nan min", &out, &[1], &[nan])?;
    let out = exec1(b, &[sc(0f32), v(&[1f32]), sc(nan)], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("nan max", &out, &[1], &[nan])?;
    let out = exec1(b, &[sc(0f32), v(&[-1f32, 0.5, 2.]), sc(1f32)], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("ordinary", &out, &[3], &[0f32, 0.5, 1.])
}

/// I32 `clamp(5, [0,7], 3)` = `[3,3]`; per-element bounds.
pub fn clamp_int_and_arrays(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Clamp], [Int32]);
    let out = exec1(b, &[sc(5i32), v(&[0i32, 7]), sc(3i32)], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("int", &out, &[2], &[3i32, 3])?;
    let out = exec1(b, &[v(&[0i32, 0, 0]), v(&[-1i32, 5, 2]), v(&[1i32, 3, 1])], |f, p| f.clamp(p[0], p[1], p[2]))?;
    expect("arrays", &out, &[3], &[0i32, 3, 1])
}

/// Scalars and size-0 tensors through BroadcastInDim, Reshape and Transpose.
pub fn identity_and_scalars(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [BroadcastInDim, Reshape], [Float32]);
    let out = exec1(b, &[sc(1f32)], |f, p| f.broadcast_in_dim(p[0], &shape(DType::Float32, &[2, 0]), &[]))?;
    expect::<f32>("scalar->[2,0]", &out, &[2, 0], &[])?;
    let out = exec1(b, &[sc(4f32)], |f, p| {
        let r = f.reshape(p[0], &[1, 1])?;
        f.broadcast_in_dim(r, &shape(DType::Float32, &[2, 1, 3]), &[1, 0])
    })?;
    expect("[1,1]->[2,1,3]", &out, &[2, 1, 3], &[4f32; 6])
}
