//! Pooling (ReduceWindow Max/Min/Sum, SelectAndScatter Max/Min) on the "jit" backend's pooling
//! kernels against the reference interpreter "interp": random NCHW, NHWC and 1-D geometries
//! (windows 1..4, strides 1..3, uneven padding, window dilation, windows larger than the input,
//! 1x1 images, empty batches and empty outputs), values with ties, ±0, −∞ and NaNs of two
//! payloads, on 1 and 3 threads; and the plan dump naming the kernel. Max/Min and SelectAndScatter
//! must be bit-identical; Sum too (same summation order), with NaNs compared as NaN. BF16 and
//! F16 ReduceWindow (f32 inside the jit's kernel, rounded once) against the interpreter too.
//!
//! Run with `cargo test --test jit_pool`.

use std::sync::Arc;

use tensorjit::ir::text::parse_module;
use tensorjit::{Backend, Buffer};

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn values(rng: &mut Lcg, n: usize) -> Vec<f32> {
    let nan2 = f32::from_bits(0x7fc0_0321);
    (0..n)
        .map(|_| match rng.next(20) {
            0 => f32::NAN,
            1 => nan2,
            2 => f32::NEG_INFINITY,
            3 => -0.0,
            4 => 0.0,
            _ => (rng.next(7) as f32 - 3.0) * 0.25,
        })
        .collect()
}

fn list(v: &[usize]) -> String {
    v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
}

/// One pooling node: operand dims and per-axis attributes.
#[derive(Clone, Debug)]
struct Case {
    dims: Vec<usize>,
    window: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    padding: Vec<(usize, usize)>,
}

impl Case {
    fn out(&self) -> Vec<usize> {
        (0..self.dims.len())
            .map(|a| {
                let padded = self.dims[a] + self.padding[a].0 + self.padding[a].1;
                let w = self.window[a];
                let ext = if w == 0 { 0 } else { (w - 1) * self.dilations[a] + 1 };
                if padded < ext { 0 } else { (padded - ext) / self.strides[a] + 1 }
            })
            .collect()
    }

    /// `reduce_window` of kind `kind` or, with `kind` `select_max`/`select_min`, SelectAndScatter.
    fn module(&self, kind: &str) -> String {
        let (d, o) = (list(&self.dims), list(&self.out()));
        let pad: Vec<String> = self.padding.iter().map(|(l, h)| format!("({l},{h})")).collect();
        let common = format!("window=[{}], strides=[{}]", list(&self.window), list(&self.strides));
        let pad = pad.join(",");
        let body = match kind.strip_prefix("select_") {
            Some(k) => format!(
                "(%0 \"x\": f32[{d}], %1 \"s\": f32[{o}]) {{\n  %2 = select_and_scatter_{k} %0, %1, {common}, padding=[{pad}] : f32[{d}]\n  return %2"
            ),
            None => format!(
                "(%0 \"x\": f32[{d}]) {{\n  %2 = reduce_window %0, kind={kind}, {common}, input_dilations=[{}], window_dilations=[{}], padding=[{pad}] : f32[{o}]\n  return %2",
                list(&vec![1; self.dims.len()]),
                list(&self.dilations),
            ),
        };
        format!("module @p\nfunc @main{body}\n}}\n")
    }
}

fn backends(threads: usize) -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    (
        tensorjit::new_with_config(&format!("jit:parallelism={threads}")).expect("jit"),
        tensorjit::new_with_config("interp").expect("interp"),
    )
}

/// Bits to compare: NaNs of a Sum as one NaN (which payload survives `NaN + NaN` depends on the
/// operand order of an addition).
fn bits(v: &[f32], canonical_nan: bool) -> Vec<u32> {
    v.iter().map(|&x| if canonical_nan && x.is_nan() { f32::NAN.to_bits() } else { x.to_bits() }).collect()
}

fn check(c: &Case, kind: &str, rng: &mut Lcg, threads: usize) {
    let (jit, interp) = backends(threads);
    let text = c.module(kind);
    let n: usize = c.dims.iter().product();
    let x = values(rng, n);
    let mut inputs = vec![Buffer::from_slice(&x, &c.dims).unwrap()];
    if kind.starts_with("select_") {
        let out = c.out();
        let s: Vec<f32> = (0..out.iter().product()).map(|i| (i % 13) as f32 * 0.5 - 2.0).collect();
        inputs.push(Buffer::from_slice(&s, &out).unwrap());
    }
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let got = jit.compile(parse_module(&text).unwrap()).unwrap().execute(&refs, &[]).unwrap();
    let want = interp.compile(parse_module(&text).unwrap()).unwrap().execute(&refs, &[]).unwrap();
    let (got, want) = (got[0].to_vec::<f32>().unwrap(), want[0].to_vec::<f32>().unwrap());
    assert_eq!(bits(&got, kind == "sum"), bits(&want, kind == "sum"), "{kind} {c:?}\n{text}");
}

/// [`check`] for a ReduceWindow of BF16 or F16 (`ty` as the IR text spells it): the values
/// rounded to the type, the results compared bit for bit (a Sum's NaNs as one NaN).
fn check_half(c: &Case, kind: &str, rng: &mut Lcg, threads: usize, ty: &str) {
    let (jit, interp) = backends(threads);
    let text = c.module(kind).replace("f32[", &format!("{ty}["));
    let x = values(rng, c.dims.iter().product());
    let input = match ty {
        "bf16" => Buffer::from_slice(&x.iter().map(|&v| half::bf16::from_f32(v)).collect::<Vec<_>>(), &c.dims),
        _ => Buffer::from_slice(&x.iter().map(|&v| half::f16::from_f32(v)).collect::<Vec<_>>(), &c.dims),
    }
    .unwrap();
    let got = jit.compile(parse_module(&text).unwrap()).unwrap().execute(&[&input], &[]).unwrap();
    let want = interp.compile(parse_module(&text).unwrap()).unwrap().execute(&[&input], &[]).unwrap();
    let widened = |b: &Buffer| -> Vec<f32> {
        match ty {
            "bf16" => b.to_vec::<half::bf16>().unwrap().iter().map(|v| v.to_f32()).collect(),
            _ => b.to_vec::<half::f16>().unwrap().iter().map(|v| v.to_f32()).collect(),
        }
    };
    let (got, want) = (widened(&got[0]), widened(&want[0]));
    assert_eq!(bits(&got, kind == "sum"), bits(&want, kind == "sum"), "{ty} {kind} {c:?}\n{text}");
}

/// A random 2-D (NCHW or NHWC) or 1-D case.
fn random_case(rng: &mut Lcg) -> Case {
    let spatial = 1 + rng.next(2);
    let w: Vec<usize> = (0..spatial).map(|_| 1 + rng.next(4)).collect();
    let sp = |rng: &mut Lcg, v: usize| (0..spatial).map(|_| v + rng.next(3)).collect::<Vec<_>>();
    let hw: Vec<usize> = (0..spatial).map(|_| [0, 1, 2, 3, 5, 8, 13, 40][rng.next(8)]).collect();
    let st = sp(rng, 1);
    let dil: Vec<usize> = (0..spatial).map(|_| 1 + rng.next(2) * rng.next(2)).collect();
    let pad: Vec<(usize, usize)> = (0..spatial).map(|_| (rng.next(3), rng.next(3))).collect();
    let (batch, ch) = ([0, 1, 2][rng.next(3)], [1, 3, 16][rng.next(3)]);
    let nhwc = rng.next(2) == 1;
    // Batch and channel axes: window 1, stride 1.
    let lay = |v: &[usize], one: usize| {
        if nhwc { [vec![one], v.to_vec(), vec![one]].concat() } else { [vec![one, one], v.to_vec()].concat() }
    };
    let dims = if nhwc { [vec![batch], hw.clone(), vec![ch]].concat() } else { [vec![batch, ch], hw.clone()].concat() };
    let padding = if nhwc {
        [vec![(0, 0)], pad.clone(), vec![(0, 0)]].concat()
    } else {
        [vec![(0, 0), (0, 0)], pad.clone()].concat()
    };
    Case { dims, window: lay(&w, 1), strides: lay(&st, 1), dilations: lay(&dil, 1), padding }
}

#[test]
fn random_pooling_matches_interp() {
    let mut rng = Lcg(5);
    for i in 0..120 {
        let c = random_case(&mut rng);
        for kind in ["max", "min", "sum"] {
            check(&c, kind, &mut rng, if i % 2 == 0 { 1 } else { 3 });
        }
        // SelectAndScatter takes no window dilation.
        let c = Case { dilations: vec![1; c.dims.len()], ..c };
        for kind in ["select_max", "select_min"] {
            check(&c, kind, &mut rng, if i % 2 == 0 { 3 } else { 1 });
        }
    }
}

fn case(dims: &[usize], window: &[usize], strides: &[usize], padding: &[(usize, usize)]) -> Case {
    Case {
        dims: dims.to_vec(),
        window: window.to_vec(),
        strides: strides.to_vec(),
        dilations: vec![1; dims.len()],
        padding: padding.to_vec(),
    }
}

#[test]
fn resnet_pools_and_edge_cases_match_interp() {
    let mut rng = Lcg(9);
    let z4 = [(0, 0); 4];
    let cases = [
        // ResNet's 3x3/2 pad 1 max pool (NCHW, NHWC), 2x2/2, a long row, kernel larger than the
        // input with padding, a 1x1 image, an empty batch, an empty output.
        case(&[2, 3, 33, 70], &[1, 1, 3, 3], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 1), (1, 1)]),
        case(&[2, 33, 70, 5], &[1, 3, 3, 1], &[1, 2, 2, 1], &[(0, 0), (1, 1), (1, 1), (0, 0)]),
        case(&[1, 4, 16, 16], &[1, 1, 2, 2], &[1, 1, 2, 2], &z4),
        case(&[1, 2, 4, 300], &[1, 1, 2, 3], &[1, 1, 1, 1], &[(0, 0), (0, 0), (1, 0), (2, 1)]),
        case(&[1, 2, 2, 3], &[1, 1, 5, 6], &[1, 1, 1, 2], &[(0, 0), (0, 0), (2, 2), (3, 2)]),
        case(&[2, 3, 1, 1], &[1, 1, 3, 3], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 1), (1, 1)]),
        case(&[0, 3, 8, 8], &[1, 1, 3, 3], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 1), (1, 1)]),
        case(&[1, 3, 2, 2], &[1, 1, 3, 3], &[1, 1, 1, 1], &z4),
        // A window on a middle axis and the last one ([outer, H, mid, W]), and a 1-D pool.
        case(&[2, 5, 3, 9], &[1, 2, 1, 3], &[1, 1, 1, 2], &[(0, 0), (1, 0), (0, 0), (0, 1)]),
        case(&[3, 50], &[1, 4], &[1, 3], &[(0, 0), (2, 1)]),
        // A huge window and padding over a tiny row (two windows): no per-cell or per-padding work.
        case(
            &[1, 2, 2, 3],
            &[1, 1, 1, 1_000_000],
            &[1, 1, 1, 1_000_000],
            &[(0, 0), (0, 0), (0, 0), (1_000_000, 1_000_000)],
        ),
    ];
    for (i, c) in cases.iter().enumerate() {
        for kind in ["max", "min", "sum", "select_max", "select_min"] {
            check(c, kind, &mut rng, if i % 2 == 0 { 1 } else { 3 });
        }
    }
}

/// The plan text of `module` compiled with the plan dump on.
fn plan(module: &str) -> String {
    let dir = std::env::temp_dir().join(format!("tensorjit-jit-pool-plan-{}-{}", std::process::id(), module.len()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = tensorjit::new_with_config(&format!("jit:dump={}", dir.display())).expect("jit");
    b.compile(parse_module(module).unwrap()).unwrap();
    let sub: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|d| d.unwrap().path()).collect();
    let plan = std::fs::read_to_string(sub[0].join("plan.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    plan
}

#[test]
fn half_precision_reduce_window_matches_interp() {
    let mut rng = Lcg(0x5eed_0016);
    for i in 0..40 {
        let c = random_case(&mut rng);
        for kind in ["max", "min", "sum"] {
            check_half(&c, kind, &mut rng, if i % 2 == 0 { 1 } else { 3 }, "bf16");
            check_half(&c, kind, &mut rng, if i % 2 == 0 { 3 } else { 1 }, "f16");
        }
    }
    // ResNet's max pool, channels-last, and a global average pool's sum.
    let resnet = case(&[1, 16, 16, 64], &[1, 3, 3, 1], &[1, 2, 2, 1], &[(0, 0), (1, 1), (1, 1), (0, 0)]);
    check_half(&resnet, "max", &mut rng, 2, "bf16");
    let global = case(&[2, 8, 7, 7], &[1, 1, 7, 7], &[1, 1, 1, 1], &[(0, 0); 4]);
    check_half(&global, "sum", &mut rng, 2, "f16");
    let p = plan(&resnet.module("max").replace("f32[", "bf16["));
    assert!(p.contains("maxpool bf16 (in f32) 1x16x16x64 3x3 /2 pad 1 nhwc"), "{p}");
    // A half-precision SelectAndScatter keeps the reference kernel.
    let s = case(&[2, 6, 6, 8], &[1, 2, 2, 1], &[1, 2, 2, 1], &[(0, 0); 4]);
    assert!(!plan(&s.module("select_max").replace("f32[", "bf16[")).contains("maxpool"));
}

#[test]
fn plan_runs_pooling_on_the_pool_kernel() {
    let c = case(&[8, 64, 14, 14], &[1, 1, 3, 3], &[1, 1, 2, 2], &[(0, 0), (0, 0), (1, 1), (1, 1)]);
    let p = plan(&c.module("max"));
    assert!(p.contains("maxpool f32 8x64x14x14 3x3 /2 pad 1 nchw"), "{p}");
    let c = case(&[2, 6, 6, 8], &[1, 2, 2, 1], &[1, 2, 2, 1], &[(0, 0); 4]);
    let p = plan(&c.module("select_max"));
    assert!(p.contains("maxpool select-and-scatter f32 2x6x6x8 2x2 /2 pad 0 nhwc"), "{p}");
    // Input dilation and three windowed axes keep the reference kernel.
    let dilated = c.module("sum").replace("input_dilations=[1,1,1,1]", "input_dilations=[1,2,1,1]");
    let dilated = dilated.replace("f32[2,3,3,8]", "f32[2,5,3,8]");
    assert!(!plan(&dilated).contains("sumpool"), "{dilated}");
    let three = case(&[2, 6, 6, 8], &[1, 2, 2, 2], &[1, 2, 2, 2], &[(0, 0); 4]);
    assert!(!plan(&three.module("max")).contains("maxpool"));
}
