//! Winograd F(4×4, 3×3) on the "jit" backend: a 3×3 stride-1 convolution with a constant filter
//! and enough channels runs on the Winograd kernel (the plan says so), agrees with the
//! interpreter (the oracle), and `winograd=off` keeps the implicit GEMM.
//!
//! Tolerance: the Winograd transforms round a few times more than a direct sum (measured worst
//! case about 2e-6 of Σ|x·w|, docs/configuration.md); 1e-4 of the output's magnitude holds with a
//! wide margin.
//!
//! Run with `cargo test --test conv_winograd`.

#[path = "common/conv_text.rs"]
mod conv_text;

use conv_text::{floats, list};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::module::Module;
use tensorjit::ir::text::parse_module;
use tensorjit::{Buffer, DType};

const N: usize = 2;
const CIN: usize = 24;
const COUT: usize = 20;
/// Not a multiple of the tile size, so edge tiles are cut.
const H: usize = 13;
const W: usize = 11;

/// `relu(conv3x3(x, w, padding pad) + b)` in NCHW or NHWC.
fn module(nhwc: bool, pad: usize) -> Module {
    let (o_h, o_w) = (H + 2 * pad - 2, W + 2 * pad - 2);
    let (xd, yd, kd, dn, bd) = if nhwc {
        (
            format!("f32[{N},{H},{W},{CIN}]"),
            format!("f32[{N},{o_h},{o_w},{COUT}]"),
            format!("f32[3,3,{CIN},{COUT}]"),
            "input=(0,3,[1,2]), kernel=(2,3,[0,1]), output=(0,3,[1,2])",
            format!("f32[1,1,1,{COUT}]"),
        )
    } else {
        (
            format!("f32[{N},{CIN},{H},{W}]"),
            format!("f32[{N},{COUT},{o_h},{o_w}]"),
            format!("f32[{COUT},{CIN},3,3]"),
            "input=(0,1,[2,3]), kernel=(1,0,[2,3]), output=(0,1,[2,3])",
            format!("f32[1,{COUT},1,1]"),
        )
    };
    let text = format!(
        "module @t\nfunc @main(%0 \"x\": {xd}) {{\n  %1 = constant {k} : {kd}\n  \
         %2 = conv_general %0, %1, {dn}, strides=[1,1], padding=[({pad},{pad}),({pad},{pad})], \
         input_dilations=[1,1], kernel_dilations=[1,1], channel_groups=1, batch_groups=1 : {yd}\n  \
         %3 = constant {b} : {bd}\n  %4 = add %2, %3 : {yd}\n  %5 = constant 0.0 : f32[]\n  \
         %6 = max %4, %5 : {yd}\n  return %6\n}}\n",
        k = list(&floats(COUT * CIN * 9, 3, 0.3)),
        b = list(&floats(COUT, 5, 1.0)),
    );
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn conv_lines(m: &Module, config: &str) -> Vec<String> {
    let plan = JitBackend::new(config).unwrap().compile_stages(m.clone()).unwrap().plan;
    plan.lines().filter(|l| l.contains("kernel ConvGeneral")).map(str::to_string).collect()
}

fn run(m: &Module, backend: &str, nhwc: bool) -> Vec<f32> {
    let dims = if nhwc { vec![N, H, W, CIN] } else { vec![N, CIN, H, W] };
    let x = Buffer::from_slice(&floats(N * CIN * H * W, 7, 2.0), &dims).unwrap();
    let exe = tensorjit::new_with_config(backend).unwrap().compile(m.clone()).unwrap();
    let got = exe.execute(&[&x], &[]).unwrap_or_else(|e| panic!("{backend}: {e}"));
    assert_eq!(got[0].dtype(), DType::Float32);
    got[0].to_vec::<f32>().unwrap()
}

#[test]
fn winograd_runs_and_matches_the_interpreter() {
    for nhwc in [false, true] {
        for pad in [0, 1, 2] {
            let m = module(nhwc, pad);
            let convs = conv_lines(&m, "");
            assert!(convs.len() == 1 && convs[0].contains("winograd f(4,3)"), "{convs:?}");
            let want = run(&m, "interp", nhwc);
            let scale = want.iter().fold(1f32, |s, v| s.max(v.abs()));
            for backend in ["jit:parallelism=1", "jit:parallelism=2", "jit:winograd=off,parallelism=1"] {
                let got = run(&m, backend, nhwc);
                assert_eq!(got.len(), want.len());
                for (i, (a, b)) in want.iter().zip(&got).enumerate() {
                    assert!((a - b).abs() <= 1e-4 * scale, "{backend} nhwc={nhwc} pad={pad} at {i}: {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn winograd_off_keeps_the_implicit_gemm() {
    for nhwc in [false, true] {
        let convs = conv_lines(&module(nhwc, 1), "winograd=off");
        assert!(convs.len() == 1 && convs[0].contains("implicit gemm") && !convs[0].contains("winograd"), "{convs:?}");
    }
}
