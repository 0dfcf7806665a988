//! Compliance cases for DotGeneral and ConvGeneral (ops.md §4.8, §9, §11).
//!
//! Convolution expectations were worked out with the §4.8 formula (iota inputs and kernels) and
//! spot-checked by hand; each case's doc shows one hand-computed element.

use std::sync::Arc;

use half::{bf16, f16};

use super::*;
use crate::api::{ConvConfig, DotConfig};
use crate::ir::op::ConvAxes;

fn dflt() -> DotConfig {
    DotConfig::default()
}

#[allow(clippy::too_many_arguments)]
fn dot<T: TestElem>(
    b: &Arc<dyn Backend>,
    l: &[T],
    ld: &[usize],
    lc: &[usize],
    lb: &[usize],
    r: &[T],
    rd: &[usize],
    rc: &[usize],
    rb: &[usize],
    cfg: DotConfig,
) -> Result<Buffer, String> {
    exec1(b, &[t(l, ld), t(r, rd)], |f, p| f.dot_general(p[0], lc, lb, p[1], rc, rb, cfg))
}

fn iota_n(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

/// lhs `[2,3,4,5]` contract `[1]` batch `[3,0]`, rhs `[5,1,2,3]` contract `[3]` batch `[0,2]` →
/// `[5,2,4,1]` = einsum `abcd,dxab->dacx`, with iota inputs.
pub fn dot_shape_example(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let l = iota_n(120);
    let r = iota_n(30);
    let out = dot(b, &l, &[2, 3, 4, 5], &[1], &[3, 0], &r, &[5, 1, 2, 3], &[3], &[0, 2], dflt())?;
    let mut want = Vec::new();
    for d in 0..5 {
        for a in 0..2 {
            for c in 0..4 {
                for x in 0..1 {
                    let mut s = 0.0;
                    for bb in 0..3 {
                        s += l[((a * 3 + bb) * 4 + c) * 5 + d] * r[((d + x) * 2 + a) * 3 + bb];
                    }
                    want.push(s);
                }
            }
        }
    }
    expect("einsum abcd,dxab->dacx", &out, &[5, 2, 4, 1], &want)
}

/// lhs `[3,2,4]` contract `[1]`, rhs `[5,2]` contract `[1]` → `[3,4,5]` (lhs free axes, then
/// rhs free axes).
pub fn dot_free_axes_order(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let l = iota_n(24);
    let r = iota_n(10);
    let out = dot(b, &l, &[3, 2, 4], &[1], &[], &r, &[5, 2], &[1], &[], dflt())?;
    let mut want = Vec::new();
    for i in 0..3 {
        for k in 0..4 {
            for j in 0..5 {
                want.push((0..2).map(|m| l[(i * 2 + m) * 4 + k] * r[j * 2 + m]).sum::<f32>());
            }
        }
    }
    expect("[3,4,5]", &out, &[3, 4, 5], &want)
}

/// Contracting lists pair in order: A=`[[1,2],[3,4]]`, B=`[[5,6],[7,8]]`; contracting (0,1)/(1,0)
/// = trace(AB) = 69, (0,1)/(0,1) = Σ A∘B = 70.
pub fn dot_contract_pairs_in_order(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let a = [1f32, 2., 3., 4.];
    let bb = [5f32, 6., 7., 8.];
    let out = dot(b, &a, &[2, 2], &[0, 1], &[], &bb, &[2, 2], &[1, 0], &[], dflt())?;
    expect("trace(AB)", &out, &[], &[69f32])?;
    let out = dot(b, &a, &[2, 2], &[0, 1], &[], &bb, &[2, 2], &[0, 1], &[], dflt())?;
    expect("sum(A*B)", &out, &[], &[70f32])
}

fn matmul_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let a = vals::<T>(&[1., 2., 3., 4.]);
    let want = vals::<T>(&[19., 22., 43., 50.]);
    let out = dot(b, &a, &[2, 2], &[1], &[], &vals::<T>(&[5., 6., 7., 8.]), &[2, 2], &[0], &[], dflt())?;
    expect("non-transposed", &out, &[2, 2], &want)?;
    let out = dot(b, &a, &[2, 2], &[1], &[], &vals::<T>(&[5., 7., 6., 8.]), &[2, 2], &[1], &[], dflt())?;
    expect("transposed", &out, &[2, 2], &want)?;
    let out = dot(
        b,
        &vals::<T>(&[1., 3., 2., 4.]),
        &[2, 2],
        &[0],
        &[],
        &vals::<T>(&[5., 6., 7., 8.]),
        &[2, 2],
        &[0],
        &[],
        dflt(),
    )?;
    expect("lhs transposed", &out, &[2, 2], &want)
}

/// 2×2 matmuls with rhs contracting axis 0 or 1 (and lhs contracting axis 0) in F32, F64, BF16,
/// F16: `[[1,2],[3,4]]·[[5,6],[7,8]] = [[19,22],[43,50]]`.
pub fn dot_matmul_layouts(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral]);
    for_types!(b, matmul_typed, [f32, f64, bf16, f16])
}

/// Vector·vector → scalar 32; matrix·vector `[3,7]`; vector·matrix `[4,6]`.
pub fn dot_vector_cases(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let out = dot(b, &[1f32, 2., 3.], &[3], &[0], &[], &[4f32, 5., 6.], &[3], &[0], &[], dflt())?;
    expect("vec.vec", &out, &[], &[32f32])?;
    let m = [1f32, 2., 3., 4.];
    let out = dot(b, &m, &[2, 2], &[1], &[], &[1f32, 1.], &[2], &[0], &[], dflt())?;
    expect("mat.vec", &out, &[2], &[3f32, 7.])?;
    let out = dot(b, &[1f32, 1.], &[2], &[0], &[], &m, &[2, 2], &[0], &[], dflt())?;
    expect("vec.mat", &out, &[2], &[4f32, 6.])
}

/// Batched matmul: lhs iota `[2,2,3]` (batch 0, contract 2) · rhs iota `[2,3,1]` (batch 0,
/// contract 1) → `[5,14,86,122]`.
pub fn dot_batch_matmul(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let out = dot(b, &iota_n(12), &[2, 2, 3], &[2], &[0], &iota_n(6), &[2, 3, 1], &[1], &[0], dflt())?;
    expect("batch", &out, &[2, 2, 1], &[5f32, 14., 86., 122.])
}

fn half_out_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out =
        dot(b, &vals::<T>(&[2., 4., 6.]), &[1, 3], &[1], &[], &vals::<T>(&[1., 3., 9.]), &[3, 1], &[0], &[], dflt())?;
    expect("[1,3]x[3,1]", &out, &[1, 1], &vals::<T>(&[68.]))
}

/// Half inputs give half outputs by default: `[1,3]·[3,1]` = 68 in BF16 and F16.
pub fn dot_half_output_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral]);
    for_types!(b, half_out_typed, [bf16, f16])
}

/// BF16 accumulates in f32 and rounds once: `[1, 2⁻⁹ ×512]·ones` = 2.0 (a BF16 running sum
/// would stay at 1) and `[256,1,1,1,1]·ones` = 260.
pub fn dot_half_f32_accumulation(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [BFloat16]);
    let mut x = vec![bf16::ONE];
    x.extend(std::iter::repeat_n(bf16::from_f64(2f64.powi(-9)), 512));
    let ones = vec![bf16::ONE; 513];
    let out = dot(b, &x, &[513], &[0], &[], &ones, &[513], &[0], &[], dflt())?;
    expect("1 + 512*2^-9", &out, &[], &[bf16::from_f64(2.0)])?;
    let y = vals::<bf16>(&[256., 1., 1., 1., 1.]);
    let out = dot(b, &y, &[5], &[0], &[], &vals::<bf16>(&[1.; 5]), &[5], &[0], &[], dflt())?;
    expect("256+4", &out, &[], &[bf16::from_f64(260.0)])
}

/// Int8 `[100,100]·[1,1]` wraps to −56; with output dtype Int32 it is 200.
pub fn dot_int8_wraps_and_output_dtype(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Int8]);
    let out = dot(b, &[100i8, 100], &[2], &[0], &[], &[1i8, 1], &[2], &[0], &[], dflt())?;
    expect("i8", &out, &[], &[-56i8])?;
    if has_dtype(b, DType::Int32) {
        let cfg = DotConfig { accumulator_dtype: None, output_dtype: Some(DType::Int32) };
        let out = dot(b, &[100i8, 100], &[2], &[0], &[], &[1i8, 1], &[2], &[0], &[], cfg)?;
        expect("i8 -> i32", &out, &[], &[200i32])?;
    }
    Ok(())
}

fn int_dot_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let out = dot(
        b,
        &vals::<T>(&[1., 2., 3., 4., 5., 6.]),
        &[2, 3],
        &[1],
        &[],
        &vals::<T>(&[4., 5., 6.]),
        &[3],
        &[0],
        &[],
        dflt(),
    )?;
    expect("[2,3].[3]", &out, &[2], &vals::<T>(&[32., 77.]))
}

/// DotGeneral in every integer dtype.
pub fn dot_int_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral]);
    for_types!(b, int_dot_typed, [i8, i16, i32, i64, u8, u16, u32, u64])
}

/// A size-0 contraction gives zeros: `[2,0]·[0,3]` → zeros `[2,3]`.
pub fn dot_size0_contraction(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32]);
    let out = dot::<f32>(b, &[], &[2, 0], &[1], &[], &[], &[0, 3], &[0], &[], dflt())?;
    expect("zeros", &out, &[2, 3], &[0f32; 6])
}

/// F16 inputs with accumulator F32 and output F32, or output F32 only → F32 result.
pub fn dot_config_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float16, Float32]);
    let x = vals::<f16>(&[0.5, 1.5]);
    let y = vals::<f16>(&[2., 4.]);
    for cfg in [
        DotConfig { accumulator_dtype: Some(DType::Float32), output_dtype: Some(DType::Float32) },
        DotConfig { accumulator_dtype: None, output_dtype: Some(DType::Float32) },
    ] {
        let out = dot(b, &x, &[2], &[0], &[], &y, &[2], &[0], &[], cfg)?;
        expect(&format!("{cfg:?}"), &out, &[], &[7f32])?;
    }
    let cfg = DotConfig { accumulator_dtype: Some(DType::Float32), output_dtype: None };
    let out = dot(b, &x, &[2], &[0], &[], &y, &[2], &[0], &[], cfg)?;
    expect("acc only", &out, &[], &[f16::from_f64(7.0)])
}

/// lhs `[4,3,5]`, rhs `[4,6,5]`, batch 0, contracting the last axes → `[4,3,6]` against a
/// direct sum.
pub fn dot_transposed_larger(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float64]);
    let l: Vec<f64> = (0..60).map(|i| ((i * 7) % 11) as f64 - 5.).collect();
    let r: Vec<f64> = (0..120).map(|i| ((i * 5) % 13) as f64 - 6.).collect();
    let out = dot(b, &l, &[4, 3, 5], &[2], &[0], &r, &[4, 6, 5], &[2], &[0], dflt())?;
    let mut want = Vec::new();
    for bb in 0..4 {
        for i in 0..3 {
            for j in 0..6 {
                want.push((0..5).map(|k| l[(bb * 3 + i) * 5 + k] * r[(bb * 6 + j) * 5 + k]).sum::<f64>());
            }
        }
    }
    expect("batched, transposed rhs", &out, &[4, 3, 6], &want)
}

/// Mismatched contracting or batch sizes and mixed dtypes are rejected.
pub fn dot_errors(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [DotGeneral], [Float32, Float64]);
    let cfg = dflt();
    expect_error1(b, "contract 2 vs 3", &[t(&[0f32; 4], &[2, 2]), t(&[0f32; 6], &[3, 2])], |f, p| {
        f.dot_general(p[0], &[1], &[], p[1], &[0], &[], cfg)
    })?;
    expect_error1(b, "batch 2 vs 3", &[t(&[0f32; 4], &[2, 2]), t(&[0f32; 6], &[3, 2])], |f, p| {
        f.dot_general(p[0], &[1], &[0], p[1], &[1], &[0], cfg)
    })?;
    expect_error1(b, "dtypes", &[t(&[0f32; 2], &[2]), t(&[0f64; 2], &[2])], |f, p| {
        f.dot_general(p[0], &[0], &[], p[1], &[0], &[], cfg)
    })
}

// ---------------------------------------------------------------------------------------------
// ConvGeneral: NC(spatial) input and output, kernel [I, O, spatial].

fn nc_axes(s: usize) -> ConvAxes {
    let sp: Vec<usize> = (2..2 + s).collect();
    ConvAxes {
        input_batch: 0,
        input_channels: 1,
        input_spatial: sp.clone(),
        kernel_input_channels: 0,
        kernel_output_channels: 1,
        kernel_spatial: sp.clone(),
        output_batch: 0,
        output_channels: 1,
        output_spatial: sp,
    }
}

fn conv_cfg(s: usize) -> ConvConfig {
    ConvConfig { axes: nc_axes(s), ..Default::default() }
}

fn conv_iota<T: TestElem>(
    b: &Arc<dyn Backend>,
    in_dims: &[usize],
    k_dims: &[usize],
    cfg: &ConvConfig,
) -> Result<Buffer, String> {
    let x = iota_vec::<T>(in_dims.iter().product());
    let k = iota_vec::<T>(k_dims.iter().product());
    exec1(b, &[t(&x, in_dims), t(&k, k_dims)], |f, p| f.conv_general(p[0], p[1], cfg))
}

/// "1D with padding": input `[2,3,5]`, kernel `[3,4,2]`, stride 2, padding (0,1) → `[2,4,3]`.
/// out[0,0,0] = (0·0+1·1) + (5·8+6·9) + (10·16+11·17) = 442.
pub fn conv_1d_padding(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { strides: vec![2], padding: vec![(0, 1)], ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[2, 3, 5], &[3, 4, 2], &cfg)?;
    let want = [
        442f32, 544., 296., 508., 634., 350., 574., 724., 404., 640., 814., 458., 1207., 1309., 656., 1453., 1579.,
        800., 1699., 1849., 944., 1945., 2119., 1088.,
    ];
    expect("1D padding", &out, &[2, 4, 3], &want)
}

/// "1D with stride 2": input `[1,2,6]`, kernel `[2,3,2]` → `[1,3,3]`;
/// out[0,0,0] = 0·0 + 1·1 + 6·6 + 7·7 = 86.
pub fn conv_1d_stride(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { strides: vec![2], ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[1, 2, 6], &[2, 3, 2], &cfg)?;
    expect("1D stride", &out, &[1, 3, 3], &[86f32, 114., 142., 114., 158., 202., 142., 202., 262.])
}

/// "1D with input dilation": input `[1,2,4]` dilated by 2, kernel `[2,3,2]` → `[1,3,6]`;
/// out[0,0,1] = (hole·0 + 1·1) + (hole·6 + 5·7) = 36.
pub fn conv_1d_input_dilation(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { input_dilations: vec![2], ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[1, 2, 4], &[2, 3, 2], &cfg)?;
    let want = [24f32, 36., 30., 44., 36., 52., 32., 48., 42., 60., 52., 72., 40., 60., 54., 76., 68., 92.];
    expect("1D input dilation", &out, &[1, 3, 6], &want)
}

/// "1D with kernel dilation": input `[1,2,6]`, kernel `[2,3,2]` dilated by 2 → `[1,3,4]`;
/// out[0,0,0] = 0·0 + 2·1 + 6·6 + 8·7 = 94.
pub fn conv_1d_kernel_dilation(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { kernel_dilations: vec![2], ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[1, 2, 6], &[2, 3, 2], &cfg)?;
    let want = [94f32, 108., 122., 136., 126., 148., 170., 192., 158., 188., 218., 248.];
    expect("1D kernel dilation", &out, &[1, 3, 4], &want)
}

/// "1D with feature groups": input `[1,6,5]`, kernel `[3,4,2]`, 2 channel groups → `[1,4,4]`;
/// outputs 2–3 read input channels 3–5.
pub fn conv_1d_feature_groups(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { channel_groups: 2, ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[1, 6, 5], &[3, 4, 2], &cfg)?;
    let want =
        [442f32, 493., 544., 595., 508., 571., 634., 697., 1699., 1774., 1849., 1924., 1945., 2032., 2119., 2206.];
    expect("1D feature groups", &out, &[1, 4, 4], &want)
}

/// "1D with batch groups": input `[4,2,5]`, kernel `[2,4,2]`, 2 batch groups → `[2,4,4]`;
/// out[0,2,0] reads batch 2: (20·4 + 21·5) + (25·12 + 26·13) = 823.
pub fn conv_1d_batch_groups(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { batch_groups: 2, ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[4, 2, 5], &[2, 4, 2], &cfg)?;
    let want = [
        95f32, 113., 131., 149., 119., 145., 171., 197., 823., 857., 891., 925., 1007., 1049., 1091., 1133., 275.,
        293., 311., 329., 379., 405., 431., 457., 1163., 1197., 1231., 1265., 1427., 1469., 1511., 1553.,
    ];
    expect("1D batch groups", &out, &[2, 4, 4], &want)
}

/// "2D": input `[1,3,4,4]`, kernel `[3,2,2,2]` → `[1,2,3,3]`; out[0,0,0,0] = 24 + 712 + 2424 = 3160.
pub fn conv_2d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let out = conv_iota::<f32>(b, &[1, 3, 4, 4], &[3, 2, 2, 2], &conv_cfg(2))?;
    let want = [
        3160f32, 3274., 3388., 3616., 3730., 3844., 4072., 4186., 4300., 4048., 4210., 4372., 4696., 4858., 5020.,
        5344., 5506., 5668.,
    ];
    expect("2D", &out, &[1, 2, 3, 3], &want)
}

/// "3D": input `[1,2,4,4,4]`, kernel `[2,2,2,2,2]`, strides (2,1,1), padding ((0,0),(1,1),(0,0)),
/// input dilation (1,2,1), kernel dilation (1,1,2) → `[1,2,2,8,2]`.
pub fn conv_3d(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig {
        strides: vec![2, 1, 1],
        padding: vec![(0, 0), (1, 1), (0, 0)],
        input_dilations: vec![1, 2, 1],
        kernel_dilations: vec![1, 1, 2],
        ..conv_cfg(3)
    };
    let out = conv_iota::<f32>(b, &[1, 2, 4, 4, 4], &[2, 2, 2, 2, 2], &cfg)?;
    let want = [
        6280f32, 6380., 5624., 5708., 6680., 6780., 5960., 6044., 7080., 7180., 6296., 6380., 7480., 7580., 6632.,
        6716., 9480., 9580., 8312., 8396., 9880., 9980., 8648., 8732., 10280., 10380., 8984., 9068., 10680., 10780.,
        9320., 9404., 8904., 9068., 8248., 8396., 9560., 9724., 8840., 8988., 10216., 10380., 9432., 9580., 10872.,
        11036., 10024., 10172., 14152., 14316., 12984., 13132., 14808., 14972., 13576., 13724., 15464., 15628., 14168.,
        14316., 16120., 16284., 14760., 14908.,
    ];
    expect("3D", &out, &[1, 2, 2, 8, 2], &want)
}

/// "2D convolution with transposed output": input `[1,3,4,5]`, kernel `[3,2,2,2]`, output axes
/// batch 2, channels 0, spatial (3,1) → output dims `[2,4,1,3]`; out[0,0,0,0] = 29 + 885 + 3021.
pub fn conv_2d_transposed_output(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let mut cfg = conv_cfg(2);
    cfg.axes.output_batch = 2;
    cfg.axes.output_channels = 0;
    cfg.axes.output_spatial = vec![3, 1];
    let out = conv_iota::<f32>(b, &[1, 3, 4, 5], &[3, 2, 2, 2], &cfg)?;
    let want = [
        3935f32, 4505., 5075., 4049., 4619., 5189., 4163., 4733., 5303., 4277., 4847., 5417., 5039., 5849., 6659.,
        5201., 6011., 6821., 5363., 6173., 6983., 5525., 6335., 7145.,
    ];
    expect("transposed output", &out, &[2, 4, 1, 3], &want)
}

/// Negative padding crops: input `[0..4]`, kernel `[0,1]`, padding (−1,0) → `[2,3,4]`.
pub fn conv_negative_padding_crops(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let cfg = ConvConfig { padding: vec![(-1, 0)], ..conv_cfg(1) };
    let out = conv_iota::<f32>(b, &[1, 1, 5], &[1, 1, 2], &cfg)?;
    expect("crop", &out, &[1, 1, 3], &[2f32, 3., 4.])
}

/// A kernel longer than the input gives a spatial axis of size 0, not an error.
pub fn conv_kernel_larger_than_input(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let out = conv_iota::<f32>(b, &[1, 1, 2], &[1, 1, 3], &conv_cfg(1))?;
    expect::<f32>("empty", &out, &[1, 1, 0], &[])
}

fn conv_typed<T: TestElem>(b: &Arc<dyn Backend>) -> CaseResult {
    let cfg = ConvConfig { strides: vec![2], ..conv_cfg(1) };
    let out = conv_iota::<T>(b, &[1, 2, 6], &[2, 3, 2], &cfg)?;
    expect("1D stride", &out, &[1, 3, 3], &vals::<T>(&[86., 114., 142., 114., 158., 202., 142., 202., 262.]))
}

/// The "1D with stride 2" case in F64, I32, U64, BF16 and F16 (all values exact in each dtype;
/// half types accumulate in f32).
pub fn conv_int_and_half_dtypes(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral]);
    for_types!(b, conv_typed, [f64, i32, u64, bf16, f16])
}

/// The "2D" case in channels-last layouts: input NHWC `[1,4,4,3]`, kernel HWIO `[2,2,3,2]`,
/// output NHWC `[1,3,3,2]` — the same numbers as [`conv_2d`], transposed.
pub fn conv_nhwc_hwio(b: &Arc<dyn Backend>) -> CaseResult {
    need!(b, [ConvGeneral], [Float32]);
    let mut x = vec![0f32; 48];
    for h in 0..4 {
        for w in 0..4 {
            for c in 0..3 {
                x[(h * 4 + w) * 3 + c] = (16 * c + 4 * h + w) as f32;
            }
        }
    }
    let mut k = vec![0f32; 24];
    for h in 0..2 {
        for w in 0..2 {
            for i in 0..3 {
                for o in 0..2 {
                    k[((h * 2 + w) * 3 + i) * 2 + o] = (8 * i + 4 * o + 2 * h + w) as f32;
                }
            }
        }
    }
    let cfg = ConvConfig {
        axes: ConvAxes {
            input_batch: 0,
            input_channels: 3,
            input_spatial: vec![1, 2],
            kernel_input_channels: 2,
            kernel_output_channels: 3,
            kernel_spatial: vec![0, 1],
            output_batch: 0,
            output_channels: 3,
            output_spatial: vec![1, 2],
        },
        ..Default::default()
    };
    let out = exec1(b, &[t(&x, &[1, 4, 4, 3]), t(&k, &[2, 2, 3, 2])], |f, p| f.conv_general(p[0], p[1], &cfg))?;
    let nchw = [
        3160f32, 3274., 3388., 3616., 3730., 3844., 4072., 4186., 4300., 4048., 4210., 4372., 4696., 4858., 5020.,
        5344., 5506., 5668.,
    ];
    let mut want = Vec::new();
    for h in 0..3 {
        for w in 0..3 {
            for o in 0..2 {
                want.push(nchw[o * 9 + h * 3 + w]);
            }
        }
    }
    expect("NHWC/HWIO", &out, &[1, 3, 3, 2], &want)
}
