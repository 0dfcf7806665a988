//! Compliance cases for dynamic (named, `-1`) axes: binding at execute, broadcasting,
//! DynamicReshape, DynamicShape, DynamicDimensionSize (ops.md §2, §4.5, §7 SpecialOps).

use std::sync::Arc;

use super::*;
use crate::api::ReshapeSpec;

fn dyn_shape(dtype: DType, dims: &[i64], names: &[&str]) -> Shape {
    match Shape::with_names(dtype, dims, names) {
        Ok(s) => s,
        Err(e) => panic!("compliance case shape: {e}"),
    }
}

fn needs_dynamic(b: &Arc<dyn Backend>) -> Option<String> {
    (!b.capabilities().dynamic_axes).then(|| format!("backend {} has no dynamic axes", b.name()))
}

/// F32 `[batch,1] + [batch,4]` run with batch = 2 → concrete `[2,4]`.
pub fn add_dim1_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params =
        [dyn_shape(DType::Float32, &[-1, 1], &["batch", ""]), dyn_shape(DType::Float32, &[-1, 4], &["batch", ""])];
    let ins = [t(&[1f32, 2.], &[2, 1]), t(&[0f32, 1., 2., 3., 10., 20., 30., 40.], &[2, 4])];
    let out = exec_with(b, &params, &ins, |f, p| Ok(vec![f.add(p[0], p[1])?]))?;
    expect("[batch,1]+[batch,4]", &out[0], &[2, 4], &[1f32, 2., 3., 4., 12., 22., 32., 42.])
}

/// Scalar + `[batch,3]` run with batch = 2 → `[2,3]`.
pub fn add_scalar_broadcast(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params = [shape(DType::Float32, &[]), dyn_shape(DType::Float32, &[-1, 3], &["batch", ""])];
    let ins = [sc(1f32), t(&[0f32, 1., 2., 3., 4., 5.], &[2, 3])];
    let out = exec_with(b, &params, &ins, |f, p| Ok(vec![f.add(p[0], p[1])?]))?;
    expect("scalar+[batch,3]", &out[0], &[2, 3], &[1f32, 2., 3., 4., 5., 6.])
}

fn reshape_explicit(b: &Arc<dyn Backend>, dims: [usize; 2]) -> CaseResult {
    let params = [dyn_shape(DType::Int32, &[-1, -1], &["batch", "seq_len"])];
    let n = dims[0] * dims[1];
    let x: Vec<i32> = (0..n as i32).collect();
    let out = exec_with(b, &params, &[t(&x, &dims)], |f, p| {
        let a = f.dynamic_dimension_size(p[0], 0)?;
        let c = f.dynamic_dimension_size(p[0], 1)?;
        let tokens = f.mul(a, c)?;
        let spec = [ReshapeSpec::Dynamic { name: "num_tokens".into(), value: tokens }];
        Ok(vec![f.dynamic_reshape(p[0], &spec)?])
    })?;
    expect(&format!("{dims:?}"), &out[0], &[n], &x)
}

/// DynamicReshape of I32 `[batch,seq_len]` to `[num_tokens]` with num_tokens =
/// DynamicDimensionSize(0)·DynamicDimensionSize(1); one executable run with 2×3 and 4×2.
pub fn dynamic_reshape_explicit_values(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicReshape, DynamicDimensionSize, Mul], [Int32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    reshape_explicit(b, [2, 3])?;
    reshape_explicit(b, [4, 2])
}

/// DynamicReshape of I32 `[batch,seq_len,4]` to (`seq_len` from its runtime size, inferred):
/// 2×3×4 → `[3,8]`.
pub fn dynamic_reshape_mixed_inferred(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicReshape, DynamicDimensionSize], [Int32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params = [dyn_shape(DType::Int32, &[-1, -1, 4], &["batch", "seq_len", ""])];
    let x: Vec<i32> = (0..24).collect();
    let out = exec_with(b, &params, &[t(&x, &[2, 3, 4])], |f, p| {
        let s = f.dynamic_dimension_size(p[0], 1)?;
        let spec = [
            ReshapeSpec::Dynamic { name: "seq_len".into(), value: s },
            ReshapeSpec::Inferred { name: "inferred_flat".into() },
        ];
        Ok(vec![f.dynamic_reshape(p[0], &spec)?])
    })?;
    expect("[3,8]", &out[0], &[3, 8], &x)
}

/// ReduceSum over axis 1 of F32 `[batch,seq,4]` run with 2×3×4 → concrete `[2,4]`.
pub fn dynamic_reduce(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ReduceSum], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params = [dyn_shape(DType::Float32, &[-1, -1, 4], &["batch", "seq", ""])];
    let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let out = exec_with(b, &params, &[t(&x, &[2, 3, 4])], |f, p| Ok(vec![f.reduce_sum(p[0], &[1])?]))?;
    expect("sum axis 1", &out[0], &[2, 4], &[12f32, 15., 18., 21., 48., 51., 54., 57.])
}

/// Concatenate along a static axis of `[batch,2]` and `[batch,3]` → `[2,5]`.
pub fn dynamic_concat_non_concat_axis(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Concatenate], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params =
        [dyn_shape(DType::Float32, &[-1, 2], &["batch", ""]), dyn_shape(DType::Float32, &[-1, 3], &["batch", ""])];
    let ins = [t(&[1f32, 2., 3., 4.], &[2, 2]), t(&[5f32, 6., 7., 8., 9., 10.], &[2, 3])];
    let out = exec_with(b, &params, &ins, |f, p| Ok(vec![f.concatenate(1, &[p[0], p[1]])?]))?;
    expect("concat", &out[0], &[2, 5], &[1f32, 2., 5., 6., 7., 3., 4., 8., 9., 10.])
}

/// Slice of `[batch,3]` with the full range on the dynamic axis (limit −1) → `[2,2]`.
pub fn dynamic_slice_full_axis(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Slice], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params = [dyn_shape(DType::Float32, &[-1, 3], &["batch", ""])];
    let out = exec_with(b, &params, &[t(&[0f32, 1., 2., 3., 4., 5.], &[2, 3])], |f, p| {
        Ok(vec![f.slice(p[0], &[0, 0], &[-1, 2], &[1, 1])?])
    })?;
    expect("slice", &out[0], &[2, 2], &[0f32, 1., 3., 4.])
}

/// DynamicShape of `[batch,3]` with batch = 5 → I32 `[5,3]`; DynamicDimensionSize(0) → 5.
pub fn dynamic_shape_and_dimension_size(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DynamicShape, DynamicDimensionSize], [Float32, Int32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let params = [dyn_shape(DType::Float32, &[-1, 3], &["batch", ""])];
    let out = exec_with(b, &params, &[t(&[0f32; 15], &[5, 3])], |f, p| {
        Ok(vec![f.dynamic_shape(p[0])?, f.dynamic_dimension_size(p[0], 0)?])
    })?;
    expect("shape", &out[0], &[2], &[5i32, 3])?;
    expect("dim 0", &out[1], &[], &[5i32])
}

/// At execute, one axis name bound to two sizes, a wrong rank, or a wrong static dim is an error.
pub fn dynamic_binding_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [Add], [Float32]);
    if let Some(why) = needs_dynamic(b) {
        return skip(why);
    }
    let builder = b.builder("bindings");
    let f = builder.main();
    let build = || -> crate::Result<()> {
        let x = f.parameter("x", dyn_shape(DType::Float32, &[-1, 2], &["batch", ""]))?;
        let y = f.parameter("y", dyn_shape(DType::Float32, &[-1, 2], &["batch", ""]))?;
        f.return_(&[f.add(x, y)?])
    };
    build().map_err(|e| format!("build: {e}"))?;
    let exe = builder.compile().map_err(|e| format!("compile: {e}"))?;
    let ok = exe.execute(&[&t(&[0f32; 6], &[3, 2]), &t(&[1f32; 6], &[3, 2])], &[]);
    check(ok.is_ok(), || format!("consistent binding rejected: {:?}", ok.err()))?;
    let conflict = exe.execute(&[&t(&[0f32; 6], &[3, 2]), &t(&[0f32; 4], &[2, 2])], &[]);
    check(conflict.is_err(), || "batch bound to 3 and 2 accepted".into())?;
    let rank = exe.execute(&[&t(&[0f32; 6], &[3, 2]), &t(&[0f32; 6], &[6])], &[]);
    check(rank.is_err(), || "rank-1 input for a rank-2 parameter accepted".into())?;
    let stat = exe.execute(&[&t(&[0f32; 9], &[3, 3]), &t(&[0f32; 9], &[3, 3])], &[]);
    check(stat.is_err(), || "static dim 3 for a parameter dim of 2 accepted".into())
}
