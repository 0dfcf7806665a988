//! Convolution gradients on the "jit" backend's backward kernels: transposed convolutions
//! (ConvGeneral with input dilation and/or negative padding) and filter gradients (XLA's
//! `ConvGeneral(x, dy)` form, with batch groups), compared with the reference "interp" backend on
//! random shapes (strides 1..3, kernel dilation, cropping and asymmetric padding, groups, NCHW and
//! NHWC, constant and run-time kernels, 1x1 images, kernels larger than the input, zero batch); the
//! gradients of a forward convolution against f64 loops written here; ONNX ConvTranspose models
//! (built in Rust) against the operator's definition; and the plan dump naming the kernels.
//!
//! Run with `cargo test --test jit_conv_backward`.

#[path = "common/jit.rs"]
mod jit_support;

use std::sync::Arc;

use prost::Message;
use tensorjit::api::ConvConfig;
use tensorjit::ir::op::ConvAxes;
use tensorjit::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, tensor_proto, tensor_shape_proto, type_proto,
};
use tensorjit::{Backend, Buffer, Builder, DType, Function, Shape, Value};

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
    /// Multiples of 1/8 in [-1, 1]: products and short sums are exact in f32.
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.below(17) as f32 / 8.0 - 1.0).collect()
    }
}

/// An operand of the test graph: a parameter, or (for kernels) a constant.
struct Operand {
    dims: Vec<usize>,
    data: Vec<f32>,
    constant: bool,
}

/// Builds `conv_general(x, k)` (k optionally reversed on `reverse` axes) on `backend` and runs it.
fn conv_on(backend: &str, x: &Operand, k: &Operand, reverse: &[usize], cfg: &ConvConfig) -> Vec<f32> {
    let b: Arc<dyn Backend> = tensorjit::new_with_config(backend).unwrap();
    let builder = Builder::new(b, "t");
    let f = builder.main();
    let outs = build(&f, x, k, reverse, cfg).unwrap();
    f.return_(&outs).unwrap();
    let exe = builder.compile().unwrap();
    let mut inputs = vec![Buffer::from_slice(&x.data, &x.dims).unwrap()];
    if !k.constant {
        inputs.push(Buffer::from_slice(&k.data, &k.dims).unwrap());
    }
    let refs: Vec<&Buffer> = inputs.iter().collect();
    exe.execute(&refs, &[]).unwrap()[0].to_vec::<f32>().unwrap()
}

fn build(f: &Function, x: &Operand, k: &Operand, reverse: &[usize], cfg: &ConvConfig) -> tensorjit::Result<Vec<Value>> {
    let xv = f.parameter("x", Shape::from_usize(DType::Float32, &x.dims))?;
    let mut kv = if k.constant {
        f.constant(&k.data, &k.dims)?
    } else {
        f.parameter("k", Shape::from_usize(DType::Float32, &k.dims))?
    };
    if !reverse.is_empty() {
        kv = f.reverse(kv, reverse)?;
    }
    Ok(vec![f.conv_general(xv, kv, cfg)?])
}

/// jit (1 or 3 threads) against interp.
fn compare(what: &str, x: &Operand, k: &Operand, reverse: &[usize], cfg: &ConvConfig, threads: usize) -> Vec<f32> {
    let want = conv_on("interp", x, k, reverse, cfg);
    let got = conv_on(&format!("jit:parallelism={threads}"), x, k, reverse, cfg);
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: at {i} jit {g} vs interp {w}");
    }
    got
}

/// Dimension numbers for `s` spatial axes: activations channels-first ([n, c, s…]) or
/// channels-last ([n, s…, c]); kernels OIHW, IOHW (ONNX ConvTranspose) or HWIO.
fn axes(s: usize, channels_last: bool, kernel_io: bool) -> ConvAxes {
    let sp = |from: usize| (from..from + s).collect::<Vec<_>>();
    let (batch, ch, spatial) = if channels_last { (0, s + 1, sp(1)) } else { (0, 1, sp(2)) };
    let (ki, ko, ks) = match (channels_last, kernel_io) {
        (true, _) => (s, s + 1, sp(0)),
        (false, false) => (1, 0, sp(2)),
        (false, true) => (0, 1, sp(2)),
    };
    ConvAxes {
        input_batch: batch,
        input_channels: ch,
        input_spatial: spatial.clone(),
        kernel_input_channels: ki,
        kernel_output_channels: ko,
        kernel_spatial: ks,
        output_batch: batch,
        output_channels: ch,
        output_spatial: spatial,
    }
}

/// Row-major dims of a tensor with logical (first, second, spatial…) axes laid out by `a`.
fn dims_of(first: (usize, usize), second: (usize, usize), spatial: &[usize], sp_axes: &[usize]) -> Vec<usize> {
    let mut d = vec![0; spatial.len() + 2];
    d[first.0] = first.1;
    d[second.0] = second.1;
    for (&a, &v) in sp_axes.iter().zip(spatial) {
        d[a] = v;
    }
    d
}

#[test]
fn transposed_convolutions_match_interp_on_random_shapes() {
    let mut rng = Lcg(11);
    for case in 0..80 {
        let s = if case % 5 == 4 { 1 } else { 2 };
        let channels_last = case % 2 == 1;
        let kernel_io = case % 3 == 0 && !channels_last;
        let groups = [1, 1, 2, 3][rng.below(4)];
        let (cin_g, cout_g) = (1 + rng.below(5), 1 + rng.below(5));
        let batch = if case % 17 == 3 { 0 } else { 1 + rng.below(2) };
        let mut input = Vec::new();
        let mut kernel = Vec::new();
        let mut in_dil = Vec::new();
        let mut k_dil = Vec::new();
        let mut padding = Vec::new();
        let mut strides = Vec::new();
        for _ in 0..s {
            // 1x1 images and kernels larger than the input come up often.
            let i = 1 + rng.below(6);
            let k = 1 + rng.below(5);
            let d = 1 + rng.below(3);
            let kd = 1 + rng.below(2);
            let eff = ((k - 1) * kd + 1) as i64;
            // Full-transposed padding eff-1 minus a crop/extension in -2..=2, per side.
            let lo = eff - 1 - (rng.below(5) as i64 - 2);
            let hi = eff - 1 - (rng.below(5) as i64 - 2) + rng.below(d) as i64;
            let span = (i as i64 - 1) * d as i64 + 1 + lo + hi;
            let (lo, hi) = if span < eff { (eff - 1, eff - 1) } else { (lo, hi) };
            input.push(i);
            kernel.push(k);
            in_dil.push(d as i64);
            k_dil.push(kd as i64);
            padding.push((lo, hi));
            // Every tenth case also strides an undilated axis (cropping forward convolution).
            strides.push(if case % 10 == 7 && d == 1 { 2 } else { 1 });
        }
        if in_dil.iter().all(|&d| d == 1) && padding.iter().all(|p| p.0 >= 0) {
            padding[0].0 = -1 - rng.below(2) as i64;
            padding[0].1 += 4;
        }
        let ax = axes(s, channels_last, kernel_io);
        let (cin, cout) = (cin_g * groups, cout_g * groups);
        let xd = dims_of((ax.input_batch, batch), (ax.input_channels, cin), &input, &ax.input_spatial);
        let kd =
            dims_of((ax.kernel_output_channels, cout), (ax.kernel_input_channels, cin_g), &kernel, &ax.kernel_spatial);
        let x = Operand { data: rng.values(xd.iter().product()), dims: xd, constant: false };
        let k = Operand { data: rng.values(kd.iter().product()), dims: kd, constant: case % 4 < 2 };
        let cfg = ConvConfig {
            axes: ax.clone(),
            strides,
            padding,
            input_dilations: in_dil,
            kernel_dilations: k_dil,
            channel_groups: groups as i64,
            batch_groups: 1,
        };
        let reverse = if case % 3 == 1 { ax.kernel_spatial.clone() } else { vec![] };
        let what = format!("case {case}: batch {batch} x {:?} k {:?} {cfg:?}", x.dims, k.dims);
        compare(&what, &x, &k, &reverse, &cfg, if case % 2 == 0 { 1 } else { 3 });
    }
}

/// The jax form of the filter gradient of `y = conv(x, w)` (x NCHW or NHWC, w OIHW, `groups`
/// channel groups) as a ConvGeneral over x and dy.
struct GradCase {
    batch: usize,
    groups: usize,
    cin_g: usize,
    cout_g: usize,
    input: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [(i64, i64); 2],
    dilation: [usize; 2],
    channels_last: bool,
}

impl GradCase {
    fn out(&self) -> [usize; 2] {
        std::array::from_fn(|a| {
            let span = self.input[a] as i64 + self.pad[a].0 + self.pad[a].1;
            let win = ((self.kernel[a] - 1) * self.dilation[a] + 1) as i64;
            if span < win { 0 } else { ((span - win) / self.stride[a] as i64 + 1) as usize }
        })
    }

    /// x, dy (activation layout) and the filter-gradient node: the node's batch axis is x's
    /// channel axis, its feature axis x's batch axis; dy is the kernel; the result is OIHW.
    fn node(&self, rng: &mut Lcg) -> (Operand, Operand, ConvConfig) {
        let (cin, cout) = (self.cin_g * self.groups, self.cout_g * self.groups);
        let out = self.out();
        let act = |c: usize, sp: [usize; 2]| {
            if self.channels_last { vec![self.batch, sp[0], sp[1], c] } else { vec![self.batch, c, sp[0], sp[1]] }
        };
        let (xd, yd) = (act(cin, self.input), act(cout, out));
        let (c_ax, sp) = if self.channels_last { (3, vec![1, 2]) } else { (1, vec![2, 3]) };
        let cfg = ConvConfig {
            axes: ConvAxes {
                input_batch: c_ax,
                input_channels: 0,
                input_spatial: sp.clone(),
                kernel_input_channels: 0,
                kernel_output_channels: c_ax,
                kernel_spatial: sp,
                output_batch: 1,
                output_channels: 0,
                output_spatial: vec![2, 3],
            },
            strides: self.dilation.iter().map(|&v| v as i64).collect(),
            // High padding so that the result's spatial size is the kernel's.
            padding: (0..2)
                .map(|a| {
                    let lo = self.pad[a].0;
                    let hi = ((self.kernel[a] - 1) * self.dilation[a]) as i64
                        + ((out[a].max(1) - 1) * self.stride[a]) as i64
                        + 1
                        - self.input[a] as i64
                        - lo;
                    (lo, hi)
                })
                .collect(),
            input_dilations: vec![],
            kernel_dilations: self.stride.iter().map(|&v| v as i64).collect(),
            channel_groups: 1,
            batch_groups: self.groups as i64,
        };
        let x = Operand { data: rng.values(xd.iter().product()), dims: xd, constant: false };
        let dy = Operand { data: rng.values(yd.iter().product()), dims: yd, constant: false };
        (x, dy, cfg)
    }

    /// dW[o, i, ty, tx] = Σ_n Σ_p x[n, g·cin_g + i, p·s + t·d − lo] dy[n, o, p] in f64.
    fn naive(&self, x: &Operand, dy: &Operand) -> Vec<f64> {
        let (cin, cout) = (self.cin_g * self.groups, self.cout_g * self.groups);
        let out = self.out();
        let at = |c: usize, chans: usize, n: usize, y: usize, xx: usize, sp: [usize; 2]| {
            if self.channels_last {
                ((n * sp[0] + y) * sp[1] + xx) * chans + c
            } else {
                ((n * chans + c) * sp[0] + y) * sp[1] + xx
            }
        };
        let [kh, kw] = self.kernel;
        let mut dw = vec![0.0; cout * self.cin_g * kh * kw];
        for o in 0..cout {
            let g = o / self.cout_g;
            for i in 0..self.cin_g {
                for ty in 0..kh {
                    for tx in 0..kw {
                        let mut s = 0.0f64;
                        for n in 0..self.batch {
                            for oy in 0..out[0] {
                                for ox in 0..out[1] {
                                    let iy = (oy * self.stride[0] + ty * self.dilation[0]) as i64 - self.pad[0].0;
                                    let ix = (ox * self.stride[1] + tx * self.dilation[1]) as i64 - self.pad[1].0;
                                    if iy < 0 || ix < 0 || iy >= self.input[0] as i64 || ix >= self.input[1] as i64 {
                                        continue;
                                    }
                                    let xv =
                                        x.data[at(g * self.cin_g + i, cin, n, iy as usize, ix as usize, self.input)];
                                    let dv = dy.data[at(o, cout, n, oy, ox, out)];
                                    s += xv as f64 * dv as f64;
                                }
                            }
                        }
                        dw[((o * self.cin_g + i) * kh + ty) * kw + tx] = s;
                    }
                }
            }
        }
        dw
    }
}

/// A [`GradCase`] from (batch, groups, cin_g, cout_g) and the spatial parameters.
fn gc(
    (batch, groups, cin_g, cout_g): (usize, usize, usize, usize),
    input: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [(i64, i64); 2],
    dilation: [usize; 2],
    channels_last: bool,
) -> GradCase {
    GradCase { batch, groups, cin_g, cout_g, input, kernel, stride, pad, dilation, channels_last }
}

#[test]
fn filter_gradients_match_interp_and_f64_loops() {
    let mut rng = Lcg(5);
    let fixed = [
        // ResNet-like 3x3 same padding, strided, dilated, cropped, grouped, depthwise, 1x1 image,
        // kernel larger than the input, zero batch.
        gc((2, 1, 5, 7), [9, 8], [3, 3], [1, 1], [(1, 1), (1, 1)], [1, 1], false),
        gc((3, 1, 4, 3), [11, 9], [3, 2], [2, 3], [(1, 0), (0, 2)], [1, 2], true),
        gc((2, 6, 1, 1), [7, 7], [3, 3], [1, 1], [(1, 1), (1, 1)], [1, 1], true),
        gc((2, 4, 1, 1), [8, 6], [3, 3], [2, 2], [(1, 1), (1, 1)], [1, 1], false),
        gc((1, 3, 2, 2), [6, 5], [2, 3], [1, 1], [(-1, 1), (1, -1)], [1, 1], false),
        gc((2, 1, 3, 2), [1, 1], [3, 3], [1, 1], [(1, 1), (1, 1)], [1, 1], true),
        gc((1, 1, 2, 2), [2, 3], [5, 5], [1, 1], [(2, 2), (2, 2)], [1, 1], false),
        gc((0, 2, 2, 3), [5, 5], [3, 3], [1, 1], [(1, 1), (1, 1)], [1, 1], true),
    ];
    let mut cases: Vec<GradCase> = fixed.into_iter().collect();
    for case in 0..30 {
        let groups = [1, 1, 2, 4][rng.below(4)];
        let depthwise = case % 4 == 0;
        let (cin_g, cout_g) = if depthwise { (1, 1 + rng.below(2)) } else { (1 + rng.below(6), 1 + rng.below(6)) };
        let kernel = [1 + rng.below(4), 1 + rng.below(4)];
        let input = [kernel[0] + rng.below(9), kernel[1] + rng.below(9)];
        cases.push(GradCase {
            batch: 1 + rng.below(3),
            groups: if depthwise { 2 + rng.below(5) } else { groups },
            cin_g,
            cout_g,
            input,
            kernel,
            stride: [1 + rng.below(2), 1 + rng.below(3)],
            pad: [(rng.below(3) as i64 - 1, rng.below(2) as i64), (rng.below(2) as i64, rng.below(3) as i64 - 1)],
            dilation: [1 + rng.below(2), 1],
            channels_last: case % 2 == 0,
        });
    }
    for (i, c) in cases.iter().enumerate() {
        if c.out().contains(&0) {
            continue;
        }
        let (x, dy, cfg) = c.node(&mut rng);
        let what = format!("filter gradient case {i}: x {:?} dy {:?} {cfg:?}", x.dims, dy.dims);
        let got = compare(&what, &x, &dy, &[], &cfg, 1 + i % 3);
        let want = c.naive(&x, &dy);
        assert_eq!(got.len(), want.len(), "{what}");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{what}: at {j} {g} vs f64 {w}");
        }
    }
}

/// The input gradient of `y = conv(x, w)` (NCHW, OIHW, one group) computed as jax does — a
/// ConvGeneral of dy dilated by the stride with the spatially reversed kernel, input and output
/// channels swapped — against the f64 loop `dx[n, c, i] = Σ dy[n, o, p] · w[o, c, q]` over
/// `i = p·s + q·d − lo`.
#[test]
fn input_gradients_match_f64_loops() {
    let mut rng = Lcg(3);
    // (batch, cin, cout, input, kernel, stride, pad, dilation)
    type Fwd = (usize, usize, usize, [usize; 2], [usize; 2], [usize; 2], [(i64, i64); 2], [usize; 2]);
    let shapes: [Fwd; 4] = [
        (2, 3, 4, [8, 7], [3, 3], [2, 2], [(1, 1), (1, 1)], [1, 1]),
        (1, 5, 2, [9, 9], [3, 2], [3, 2], [(0, 2), (1, 0)], [1, 2]),
        (2, 2, 3, [6, 6], [4, 4], [2, 2], [(1, 2), (1, 2)], [1, 1]),
        (1, 4, 4, [5, 5], [3, 3], [1, 1], [(1, 1), (1, 1)], [2, 1]),
    ];
    for (case, &(batch, cin, cout, input, kernel, stride, pad, dil)) in shapes.iter().enumerate() {
        let out: [usize; 2] = std::array::from_fn(|a| {
            let span = input[a] as i64 + pad[a].0 + pad[a].1;
            let win = ((kernel[a] - 1) * dil[a] + 1) as i64;
            ((span - win) / stride[a] as i64 + 1) as usize
        });
        let dy = Operand {
            dims: vec![batch, cout, out[0], out[1]],
            data: rng.values(batch * cout * out[0] * out[1]),
            constant: false,
        };
        let w = Operand {
            dims: vec![cout, cin, kernel[0], kernel[1]],
            data: rng.values(cout * cin * kernel[0] * kernel[1]),
            constant: case % 2 == 0,
        };
        // The kernel is OIHW of the forward conv: its O is this conv's input channels.
        let padding: Vec<(i64, i64)> = (0..2)
            .map(|a| {
                let eff = ((kernel[a] - 1) * dil[a] + 1) as i64;
                let plo = eff - 1 - pad[a].0;
                let dilated = ((out[a] - 1) * stride[a] + 1) as i64;
                (plo, input[a] as i64 - dilated - plo + eff - 1)
            })
            .collect();
        let cfg = ConvConfig {
            axes: axes(2, false, true),
            strides: vec![1, 1],
            padding,
            input_dilations: stride.iter().map(|&v| v as i64).collect(),
            kernel_dilations: dil.iter().map(|&v| v as i64).collect(),
            channel_groups: 1,
            batch_groups: 1,
        };
        let got = compare(&format!("input gradient {case}"), &dy, &w, &[2, 3], &cfg, 2);
        let mut want = vec![0.0f64; batch * cin * input[0] * input[1]];
        for n in 0..batch {
            for o in 0..cout {
                for c in 0..cin {
                    for oy in 0..out[0] {
                        for ox in 0..out[1] {
                            for ty in 0..kernel[0] {
                                for tx in 0..kernel[1] {
                                    let iy = (oy * stride[0] + ty * dil[0]) as i64 - pad[0].0;
                                    let ix = (ox * stride[1] + tx * dil[1]) as i64 - pad[1].0;
                                    if iy < 0 || ix < 0 || iy >= input[0] as i64 || ix >= input[1] as i64 {
                                        continue;
                                    }
                                    let d = dy.data[((n * cout + o) * out[0] + oy) * out[1] + ox] as f64;
                                    let k = w.data[((o * cin + c) * kernel[0] + ty) * kernel[1] + tx] as f64;
                                    want[((n * cin + c) * input[0] + iy as usize) * input[1] + ix as usize] += d * k;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(got.len(), want.len());
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "input gradient {case} at {j}: {g} vs {w}");
        }
    }
}

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// A one-node ConvTranspose model: input X, initializer W ([C, M/group, kh, kw]).
fn conv_transpose_model(xd: &[i64], wd: &[i64], w: &[f32], attrs: Vec<AttributeProto>) -> Vec<u8> {
    let dims = xd
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    let x = ValueInfoProto {
        name: Some("x".to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(tensor_proto::DataType::Float as i32),
                shape: Some(TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let wt = TensorProto {
        name: Some("w".to_string()),
        dims: wd.to_vec(),
        data_type: Some(tensor_proto::DataType::Float as i32),
        raw_data: Some(w.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    };
    let node = NodeProto {
        op_type: Some("ConvTranspose".to_string()),
        name: Some("ct".to_string()),
        input: vec!["x".to_string(), "w".to_string()],
        output: vec!["y".to_string()],
        attribute: attrs,
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some("g".to_string()),
        node: vec![node],
        initializer: vec![wt],
        input: vec![x],
        output: vec![ValueInfoProto { name: Some("y".to_string()), ..Default::default() }],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// ONNX ConvTranspose imported and run on jit, against the operator's definition (each input
/// pixel scatters `x · W` into the output at `i·stride + k·dilation − pad_begin`) in f64.
#[test]
fn onnx_conv_transpose_matches_its_definition() {
    let mut rng = Lcg(9);
    // (batch, C, M, group, input, kernel, strides, dilations, pads [b0, b1, e0, e1], output_padding)
    type Ct = (usize, usize, usize, usize, [usize; 2], [usize; 2], [usize; 2], [usize; 2], [usize; 4], [usize; 2]);
    let cases: [Ct; 4] = [
        (2, 4, 6, 1, [5, 4], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], [1, 1]),
        (1, 4, 4, 2, [3, 3], [4, 4], [2, 2], [1, 1], [1, 1, 1, 1], [0, 0]),
        (1, 3, 2, 1, [4, 3], [3, 2], [3, 1], [1, 2], [0, 0, 2, 0], [2, 0]),
        (1, 2, 3, 1, [1, 1], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0], [0, 0]),
    ];
    for (case, &(batch, c, m, group, input, kernel, strides, dil, pads, out_pad)) in cases.iter().enumerate() {
        let mg = m / group;
        let xd = [batch, c, input[0], input[1]];
        let wd = [c, mg, kernel[0], kernel[1]];
        let x: Vec<f32> = rng.values(xd.iter().product());
        let w: Vec<f32> = rng.values(wd.iter().product());
        let out: [usize; 2] = std::array::from_fn(|a| {
            strides[a] * (input[a] - 1) + out_pad[a] + (kernel[a] - 1) * dil[a] + 1 - pads[a] - pads[a + 2]
        });
        let i64s = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let bytes = conv_transpose_model(
            &i64s(&xd),
            &i64s(&wd),
            &w,
            vec![
                attr_ints("strides", &i64s(&strides)),
                attr_ints("dilations", &i64s(&dil)),
                attr_ints("pads", &i64s(&pads)),
                attr_ints("output_padding", &i64s(&out_pad)),
                attr_int("group", group as i64),
            ],
        );
        let model = tensorjit::onnx::load_bytes(&bytes).unwrap();
        let exe = tensorjit::new_with_config("jit:parallelism=2").unwrap().compile(model.module).unwrap();
        let xb = Buffer::from_slice(&x, &xd).unwrap();
        let got = exe.execute(&[&xb], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        let mut want = vec![0.0f64; batch * m * out[0] * out[1]];
        let cg = c / group;
        for n in 0..batch {
            for ci in 0..c {
                let g = ci / cg;
                for iy in 0..input[0] {
                    for ix in 0..input[1] {
                        let xv = x[((n * c + ci) * input[0] + iy) * input[1] + ix] as f64;
                        for mo in 0..mg {
                            for ky in 0..kernel[0] {
                                for kx in 0..kernel[1] {
                                    let oy = (iy * strides[0] + ky * dil[0]) as i64 - pads[0] as i64;
                                    let ox = (ix * strides[1] + kx * dil[1]) as i64 - pads[1] as i64;
                                    if oy < 0 || ox < 0 || oy >= out[0] as i64 || ox >= out[1] as i64 {
                                        continue;
                                    }
                                    let wv = w[((ci * mg + mo) * kernel[0] + ky) * kernel[1] + kx] as f64;
                                    let o = g * mg + mo;
                                    want[((n * m + o) * out[0] + oy as usize) * out[1] + ox as usize] += xv * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(got.len(), want.len(), "ConvTranspose case {case}");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "ConvTranspose case {case} at {j}: {g} vs {w}");
        }
    }
}

/// The plan dump names the backward kernels (and the packed phases of a constant kernel).
#[test]
fn plan_runs_gradients_on_the_backward_kernels() {
    let dir = std::env::temp_dir().join(format!("tensorjit-jit-conv-bwd-plan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = jit_support::backend(&format!("dump={}", dir.display()));
    let mut rng = Lcg(1);
    let w = rng.values(8 * 4 * 3 * 3);
    let transposed = ConvConfig {
        axes: axes(2, false, true),
        strides: vec![1, 1],
        padding: vec![(1, 2), (1, 2)],
        input_dilations: vec![2, 2],
        kernel_dilations: vec![1, 1],
        channel_groups: 1,
        batch_groups: 1,
    };
    let grad = gc((2, 1, 8, 4), [8, 8], [3, 3], [1, 1], [(1, 1), (1, 1)], [1, 1], false);
    let (gx, gdy, gcfg) = grad.node(&mut rng);
    let e = jit_support::compile(&b, |f| {
        let x = f.parameter("x", Shape::new(DType::Float32, &[1, 8, 5, 5]))?;
        let k = f.constant(&w, &[8, 4, 3, 3])?;
        let xs = f.parameter("gx", Shape::from_usize(DType::Float32, &gx.dims))?;
        let dy = f.parameter("gdy", Shape::from_usize(DType::Float32, &gdy.dims))?;
        Ok(vec![f.conv_general(x, k, &transposed)?, f.conv_general(xs, dy, &gcfg)?])
    });
    assert!(e.uses_compiled_plan());
    let sub: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|d| d.unwrap().path()).collect();
    let plan = std::fs::read_to_string(sub[0].join("plan.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let kernels: Vec<&str> = plan.lines().filter(|l| l.contains("kernel ConvGeneral")).collect();
    assert!(
        kernels.iter().any(|l| l.contains("conv transposed") && l.contains("4 phases") && l.contains("packed")),
        "{plan}"
    );
    assert!(kernels.iter().any(|l| l.contains("conv filter gradient")), "{plan}");
    // And they compute what interp and the f64 loop compute.
    let x = Operand { dims: vec![1, 8, 5, 5], data: rng.values(200), constant: false };
    let inputs = [&x, &gx, &gdy].map(|o| Buffer::from_slice(&o.data, &o.dims).unwrap());
    let outs = jit_support::run(&e, &inputs);
    let k = Operand { dims: vec![8, 4, 3, 3], data: w, constant: true };
    let want = conv_on("interp", &x, &k, &[], &transposed);
    assert_eq!(outs[0].to_vec::<f32>().unwrap(), want);
    let got = outs[1].to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(grad.naive(&gx, &gdy)) {
        assert!((*g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()), "{g} vs {w}");
    }
}
