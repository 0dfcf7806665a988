//! ConvGeneral on the "jit" backend's convolution kernels: results against a direct f64 loop written
//! here, for NCHW/OIHW and NHWC/HWIO layouts, 1-D and 2-D, strides, paddings (both sides),
//! kernel dilations, channel groups and depthwise convolutions, with the kernel as a parameter
//! (packed per execution) and as a constant (packed at compile time), on 1 and 3 threads; the
//! same convolutions in BF16 and F16 (computed in f32, the result rounded once); and the plan
//! dump naming the kernel.
//!
//! Run with `cargo test --test jit_conv`.

#[path = "common/jit.rs"]
mod jit_support;

use half::{bf16, f16};
use jit_support::{backend, compile, run};
use tensorjit::api::ConvConfig;
use tensorjit::backends::jit::JitExecutable;
use tensorjit::ir::op::ConvAxes;
use tensorjit::{Buffer, Element, Shape};

/// An element type the convolutions run in: the test's values (multiples of 1/8 in [-1, 1])
/// are exact in each, and so is every product and partial sum in f32, so the f64 sum rounded
/// once to the type is the exact result of the catalogue's "compute in f32, round once".
trait Elem: Element + Copy + std::fmt::Debug {
    fn of(v: f32) -> Self;
    /// The bit pattern (compared exactly).
    fn bits(self) -> u32;
}

impl Elem for f32 {
    fn of(v: f32) -> Self {
        v
    }
    fn bits(self) -> u32 {
        self.to_bits()
    }
}

impl Elem for bf16 {
    fn of(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn bits(self) -> u32 {
        self.to_bits().into()
    }
}

impl Elem for f16 {
    fn of(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn bits(self) -> u32 {
        self.to_bits().into()
    }
}

/// One convolution: NCHW-style sizes plus the layouts used to store them.
#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    groups: usize,
    cin_g: usize,
    cout_g: usize,
    /// Spatial sizes (1 or 2 axes).
    input: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<(usize, usize)>,
    dilation: Vec<usize>,
    channels_last: bool,
    constant_kernel: bool,
}

impl Case {
    fn out(&self) -> Vec<usize> {
        (0..self.input.len())
            .map(|a| {
                let span = self.input[a] + self.padding[a].0 + self.padding[a].1;
                let win = (self.kernel[a] - 1) * self.dilation[a] + 1;
                if span < win { 0 } else { (span - win) / self.stride[a] + 1 }
            })
            .collect()
    }
}

/// Row-major dims of a tensor stored with (batch-or-O, channel-or-I, spatial…) logical axes, in
/// the case's layout: channels-first [n, c, s…] or channels-last [n, s…, c] (kernels: OIHW or HWIO).
fn layout_dims(first: usize, second: usize, spatial: &[usize], channels_last: bool, kernel: bool) -> Vec<usize> {
    match (channels_last, kernel) {
        (false, _) => [first, second].into_iter().chain(spatial.iter().copied()).collect(),
        (true, false) => [first].into_iter().chain(spatial.iter().copied()).chain([second]).collect(),
        // HWIO: spatial, then input channels, then output channels.
        (true, true) => spatial.iter().copied().chain([second, first]).collect(),
    }
}

/// Flat index of logical (a, b, spatial…) in the layout of `layout_dims`.
fn index(first: usize, second: usize, pos: &[usize], dims: &[usize], channels_last: bool, kernel: bool) -> usize {
    let order: Vec<usize> = match (channels_last, kernel) {
        (false, _) => [first, second].into_iter().chain(pos.iter().copied()).collect(),
        (true, false) => [first].into_iter().chain(pos.iter().copied()).chain([second]).collect(),
        (true, true) => pos.iter().copied().chain([second, first]).collect(),
    };
    order.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

fn axes(s: usize, channels_last: bool) -> ConvAxes {
    let sp: Vec<usize> = (0..s).collect();
    if channels_last {
        ConvAxes {
            input_batch: 0,
            input_channels: s + 1,
            input_spatial: sp.iter().map(|a| a + 1).collect(),
            kernel_input_channels: s,
            kernel_output_channels: s + 1,
            kernel_spatial: sp.clone(),
            output_batch: 0,
            output_channels: s + 1,
            output_spatial: sp.iter().map(|a| a + 1).collect(),
        }
    } else {
        ConvAxes {
            input_batch: 0,
            input_channels: 1,
            input_spatial: sp.iter().map(|a| a + 2).collect(),
            kernel_input_channels: 1,
            kernel_output_channels: 0,
            kernel_spatial: sp.iter().map(|a| a + 2).collect(),
            output_batch: 0,
            output_channels: 1,
            output_spatial: sp.iter().map(|a| a + 2).collect(),
        }
    }
}

/// Every index of `dims`.
fn positions(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &d in dims {
        all = all.into_iter().flat_map(|p: Vec<usize>| (0..d).map(move |i| [p.clone(), vec![i]].concat())).collect();
    }
    all
}

/// Values that are multiples of 1/8 in [-1, 1]: every product and partial sum here is exact in f32.
fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 29 + seed * 13 + 3) % 17) as f32 / 8.0 - 1.0).collect()
}

fn check(c: &Case, threads: usize) {
    check_as::<f32>(c, threads)
}

fn check_as<T: Elem>(c: &Case, threads: usize) {
    let cl = c.channels_last;
    let (cin, cout) = (c.cin_g * c.groups, c.cout_g * c.groups);
    let out = c.out();
    let xd = layout_dims(c.batch, cin, &c.input, cl, false);
    let kd = layout_dims(cout, c.cin_g, &c.kernel, cl, true);
    let yd = layout_dims(c.batch, cout, &out, cl, false);
    let x = values(xd.iter().product(), 1);
    let k = values(kd.iter().product(), 2);
    let cfg = ConvConfig {
        axes: axes(c.input.len(), cl),
        strides: c.stride.iter().map(|&v| v as i64).collect(),
        padding: c.padding.iter().map(|&(lo, hi)| (lo as i64, hi as i64)).collect(),
        input_dilations: vec![],
        kernel_dilations: c.dilation.iter().map(|&v| v as i64).collect(),
        channel_groups: c.groups as i64,
        batch_groups: 1,
    };
    let b = backend(&format!("parallelism={threads}"));
    let xs = Shape::from_usize(T::DTYPE, &xd);
    let ks = Shape::from_usize(T::DTYPE, &kd);
    let (xt, kt): (Vec<T>, Vec<T>) = (x.iter().map(|&v| T::of(v)).collect(), k.iter().map(|&v| T::of(v)).collect());
    let e = compile(&b, |f| {
        let xv = f.parameter("x", xs.clone())?;
        let kv = if c.constant_kernel { f.constant(&kt, &kd)? } else { f.parameter("k", ks.clone())? };
        Ok(vec![f.conv_general(xv, kv, &cfg)?])
    });
    let mut inputs = vec![Buffer::from_slice(&xt, &xd).unwrap()];
    if !c.constant_kernel {
        inputs.push(Buffer::from_slice(&kt, &kd).unwrap());
    }
    let got = run(&e, &inputs)[0].to_vec::<T>().unwrap();
    assert_eq!(got.len(), yd.iter().product::<usize>(), "{c:?}");
    for n in 0..c.batch {
        for o in 0..cout {
            let g = o / c.cout_g;
            for p in positions(&out) {
                let mut want = 0.0f64;
                for i in 0..c.cin_g {
                    'tap: for t in positions(&c.kernel) {
                        let mut q = Vec::new();
                        for a in 0..p.len() {
                            let v = (p[a] * c.stride[a] + t[a] * c.dilation[a]) as i64 - c.padding[a].0 as i64;
                            if v < 0 || v >= c.input[a] as i64 {
                                continue 'tap;
                            }
                            q.push(v as usize);
                        }
                        let xv = x[index(n, g * c.cin_g + i, &q, &xd, cl, false)];
                        let kv = k[index(o, i, &t, &kd, cl, true)];
                        want += xv as f64 * kv as f64;
                    }
                }
                let v = got[index(n, o, &p, &yd, cl, false)];
                let want = T::of(want as f32);
                assert_eq!(
                    v.bits(),
                    want.bits(),
                    "{:?} {c:?} threads {threads} at n={n} o={o} {p:?}: {v:?} vs {want:?}",
                    T::DTYPE
                );
            }
        }
    }
}

fn case2(batch: usize, groups: usize, cin_g: usize, cout_g: usize, input: [usize; 2], kernel: [usize; 2]) -> Case {
    Case {
        batch,
        groups,
        cin_g,
        cout_g,
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        stride: vec![1, 1],
        padding: vec![(0, 0), (0, 0)],
        dilation: vec![1, 1],
        channels_last: false,
        constant_kernel: false,
    }
}

/// The cases of both layouts, each with its kernel as a parameter and as a constant.
fn cases() -> Vec<Case> {
    let mut cases = vec![
        // 3x3 same padding, 1x1 projection, ResNet's strided 7x7 stem (small), dilation.
        Case { padding: vec![(1, 1), (1, 1)], ..case2(2, 1, 5, 7, [6, 5], [3, 3]) },
        case2(1, 1, 17, 9, [4, 3], [1, 1]),
        Case { stride: vec![2, 2], padding: vec![(3, 3), (3, 3)], ..case2(1, 1, 3, 4, [11, 9], [7, 7]) },
        Case { padding: vec![(2, 2), (2, 2)], dilation: vec![2, 2], ..case2(1, 1, 2, 3, [7, 7], [3, 3]) },
        // Uneven padding, groups, depthwise (multiplier 1 and 2), stride 2 depthwise.
        Case { stride: vec![2, 1], padding: vec![(1, 0), (0, 2)], ..case2(2, 3, 2, 2, [5, 4], [3, 2]) },
        Case { padding: vec![(1, 1), (1, 1)], ..case2(2, 6, 1, 1, [5, 6], [3, 3]) },
        Case { stride: vec![2, 2], padding: vec![(0, 1), (0, 1)], ..case2(1, 5, 1, 1, [9, 8], [3, 3]) },
        Case { padding: vec![(1, 1), (1, 1)], ..case2(1, 2, 1, 3, [5, 5], [3, 3]) },
        // Kernel larger than the input with padding; a 1x1 image; empty batch and empty output.
        Case { padding: vec![(2, 2), (2, 2)], ..case2(1, 1, 3, 2, [2, 2], [5, 5]) },
        Case { padding: vec![(1, 1), (1, 1)], ..case2(2, 1, 3, 2, [1, 1], [3, 3]) },
        Case { padding: vec![(1, 1), (1, 1)], ..case2(0, 1, 3, 2, [4, 4], [3, 3]) },
        case2(1, 1, 3, 2, [2, 2], [5, 5]),
        // 1-D.
        Case {
            input: vec![9],
            kernel: vec![3],
            stride: vec![2],
            padding: vec![(1, 2)],
            dilation: vec![1],
            ..case2(3, 1, 4, 5, [1, 1], [1, 1])
        },
    ];
    cases.extend(cases.clone().into_iter().map(|c| Case { channels_last: true, ..c }));
    cases.extend(cases.clone().into_iter().map(|c| Case { constant_kernel: true, ..c }));
    cases
}

#[test]
fn convolutions_match_direct_loop_in_both_layouts() {
    for (i, c) in cases().iter().enumerate() {
        check(c, if i % 2 == 0 { 1 } else { 3 });
    }
}

#[test]
fn half_precision_convolutions_round_the_f32_result_once() {
    // The f32 cases, and a 3x3 with 16 channels (the Winograd kernel where the filter is constant).
    let wide = Case { padding: vec![(1, 1), (1, 1)], ..case2(1, 1, 16, 16, [8, 8], [3, 3]) };
    let mut all = cases();
    all.extend([wide.clone(), Case { channels_last: true, constant_kernel: true, ..wide }]);
    // Channels-last images whose f32 result is larger than a band (the steps run band by band):
    // a padded 3x3 over two images, a strided depthwise one, a strided 1x1 and uneven padding.
    let banded = |c: Case| Case { channels_last: true, constant_kernel: true, ..c };
    all.extend([
        banded(Case { padding: vec![(1, 1), (1, 1)], ..case2(2, 1, 8, 48, [30, 26], [3, 3]) }),
        banded(Case { stride: vec![2, 2], padding: vec![(1, 1), (1, 1)], ..case2(1, 64, 1, 1, [64, 40], [3, 3]) }),
        banded(Case { stride: vec![2, 2], ..case2(1, 1, 24, 96, [40, 40], [1, 1]) }),
        banded(Case { stride: vec![2, 1], padding: vec![(2, 0), (1, 2)], ..case2(1, 1, 5, 64, [70, 30], [5, 3]) }),
    ]);
    for (i, c) in all.iter().enumerate() {
        check_as::<bf16>(c, if i % 2 == 0 { 1 } else { 3 });
        check_as::<f16>(c, if i % 2 == 0 { 3 } else { 1 });
    }
}

/// Compiles the 3×3 pad-1 convolution of an `[1, 8, 6, 6]` NCHW input of `T` with a constant
/// `[16, 8, 3, 3]` filter (channels-last: `[1, 6, 6, 8]` and HWIO `[3, 3, 8, 16]`), with the plan
/// dump on: the executable and the plan's ConvGeneral line.
fn conv_plan<T: Elem>(tag: &str, channels_last: bool) -> (JitExecutable, String) {
    let dir = std::env::temp_dir().join(format!("tensorjit-jit-conv-plan-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = backend(&format!("dump={}", dir.display()));
    let k: Vec<T> = values(16 * 8 * 9, 2).into_iter().map(T::of).collect();
    let (xd, kd): (&[i64], &[usize]) =
        if channels_last { (&[1, 6, 6, 8], &[3, 3, 8, 16]) } else { (&[1, 8, 6, 6], &[16, 8, 3, 3]) };
    let cfg = ConvConfig {
        axes: axes(2, channels_last),
        strides: vec![1, 1],
        padding: vec![(1, 1), (1, 1)],
        input_dilations: vec![],
        kernel_dilations: vec![1, 1],
        channel_groups: 1,
        batch_groups: 1,
    };
    let e = compile(&b, |f| {
        let x = f.parameter("x", Shape::new(T::DTYPE, xd))?;
        let kv = f.constant(&k, kd)?;
        Ok(vec![f.conv_general(x, kv, &cfg)?])
    });
    assert!(e.uses_compiled_plan());
    let sub: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|d| d.unwrap().path()).collect();
    let plan = std::fs::read_to_string(sub[0].join("plan.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let line = plan.lines().find(|l| l.contains("kernel ConvGeneral")).unwrap_or_else(|| panic!("{plan}"));
    (e, line.to_string())
}

#[test]
fn plan_runs_half_precision_conv_on_the_conv_kernel() {
    let (e, line) = conv_plan::<bf16>("bf16", false);
    assert!(line.contains("conv bf16 (in f32)") && line.contains("packed"), "{line}");
    // Channels-last, one group: on the half-precision GEMM.
    let (_, nhwc) = conv_plan::<bf16>("bf16-nhwc", true);
    assert!(nhwc.contains("bf16 gemm (packed"), "{nhwc}");
    let (_, nhwc) = conv_plan::<f16>("f16-nhwc", true);
    assert!(nhwc.contains("f16 gemm (packed"), "{nhwc}");
    // A warm execution's result is the same as the first's (the scratch is reused).
    let x: Vec<bf16> = values(8 * 36, 1).into_iter().map(bf16::from_f32).collect();
    let input = [Buffer::from_slice(&x, &[1, 8, 6, 6]).unwrap()];
    let first = run(&e, &input)[0].to_vec::<bf16>().unwrap();
    assert_eq!(run(&e, &input)[0].to_vec::<bf16>().unwrap(), first);
}

#[test]
fn plan_runs_conv_on_the_conv_kernel() {
    let (_, line) = conv_plan::<f32>("f32", false);
    assert!(line.contains("conv f32 ") && line.contains("implicit gemm") && line.contains("packed"), "{line}");
    let c = Case { padding: vec![(1, 1), (1, 1)], constant_kernel: true, ..case2(1, 1, 8, 16, [6, 6], [3, 3]) };
    check(&c, 2);
}
