//! The direct stem kernel on the "jit" backend: a convolution with few input channels (ResNet's
//! 7×7 stride-2 3→64 stem, MobileNet's 3×3 stride-2 3→32 with ReLU6) runs on it (the plan says
//! so), agrees with the interpreter (the oracle) in NCHW and NHWC with its bias and activation
//! merged, and a run-time filter takes it too.
//!
//! Run with `cargo test --test conv_stem`.

#[path = "common/conv_text.rs"]
mod conv_text;

use conv_text::{floats, list};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::module::Module;
use tensorjit::ir::text::parse_module;
use tensorjit::{Buffer, DType};

const N: usize = 2;
const CIN: usize = 3;
/// Not multiples of the tile size, so edge tiles are cut.
const H: usize = 19;
const W: usize = 26;

/// `clip(conv_k×k/2(x, w, padding pad) + b, 0, hi)` in NCHW or NHWC, the filter a constant or
/// (`constant` false) the second argument.
fn module(nhwc: bool, k: usize, pad: usize, cout: usize, hi: f32, constant: bool) -> Module {
    let (oh, ow) = ((H + 2 * pad - k) / 2 + 1, (W + 2 * pad - k) / 2 + 1);
    let (xd, yd, kd, dn, bd) = if nhwc {
        (
            format!("f32[{N},{H},{W},{CIN}]"),
            format!("f32[{N},{oh},{ow},{cout}]"),
            format!("f32[{k},{k},{CIN},{cout}]"),
            "input=(0,3,[1,2]), kernel=(2,3,[0,1]), output=(0,3,[1,2])",
            format!("f32[1,1,1,{cout}]"),
        )
    } else {
        (
            format!("f32[{N},{CIN},{H},{W}]"),
            format!("f32[{N},{cout},{oh},{ow}]"),
            format!("f32[{cout},{CIN},{k},{k}]"),
            "input=(0,1,[2,3]), kernel=(1,0,[2,3]), output=(0,1,[2,3])",
            format!("f32[1,{cout},1,1]"),
        )
    };
    let (args, filter) = if constant {
        (String::new(), format!("  %1 = constant {} : {kd}\n", list(&floats(cout * CIN * k * k, 3, 0.3))))
    } else {
        (format!(", %1 \"w\": {kd}"), String::new())
    };
    let text = format!(
        "module @t\nfunc @main(%0 \"x\": {xd}{args}) {{\n{filter}  \
         %2 = conv_general %0, %1, {dn}, strides=[2,2], padding=[({pad},{pad}),({pad},{pad})], \
         input_dilations=[1,1], kernel_dilations=[1,1], channel_groups=1, batch_groups=1 : {yd}\n  \
         %3 = constant {b} : {bd}\n  %4 = add %2, %3 : {yd}\n  %5 = constant 0.0 : f32[]\n  \
         %6 = max %4, %5 : {yd}\n  %7 = constant {hi:?} : f32[]\n  %8 = min %6, %7 : {yd}\n  return %8\n}}\n",
        b = list(&floats(cout, 5, 1.0)),
    );
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn conv_lines(m: &Module) -> Vec<String> {
    let plan = JitBackend::new("").unwrap().compile_stages(m.clone()).unwrap().plan;
    plan.lines().filter(|l| l.contains("kernel ConvGeneral")).map(str::to_string).collect()
}

fn run(m: &Module, backend: &str, x_dims: &[usize], w: Option<(&[f32], &[usize])>) -> Vec<f32> {
    let x = Buffer::from_slice(&floats(x_dims.iter().product(), 7, 2.0), x_dims).unwrap();
    let exe = tensorjit::new_with_config(backend).unwrap().compile(m.clone()).unwrap();
    let wb = w.map(|(v, d)| Buffer::from_slice(v, d).unwrap());
    let inputs: Vec<&Buffer> = std::iter::once(&x).chain(wb.as_ref()).collect();
    let got = exe.execute(&inputs, &[]).unwrap_or_else(|e| panic!("{backend}: {e}"));
    assert_eq!(got[0].dtype(), DType::Float32);
    got[0].to_vec::<f32>().unwrap()
}

fn agree(want: &[f32], got: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1f32, |s, v| s.max(v.abs()));
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        assert!((a - b).abs() <= 1e-5 * scale, "{what} at {i}: {a} vs {b}");
    }
}

#[test]
fn stems_run_on_the_direct_kernel_and_match_the_interpreter() {
    // ResNet-18 (7×7, 64 channels, no clip worth the name) and MobileNetV2 (3×3, 32, ReLU6).
    for (k, pad, cout, hi) in [(7, 3, 64, 1000.0f32), (3, 1, 32, 6.0)] {
        for nhwc in [false, true] {
            let m = module(nhwc, k, pad, cout, hi, true);
            let convs = conv_lines(&m);
            assert!(convs.len() == 1 && convs[0].contains("stem direct"), "{convs:?}");
            let dims = if nhwc { [N, H, W, CIN] } else { [N, CIN, H, W] };
            let want = run(&m, "interp", &dims, None);
            for backend in ["jit:parallelism=1", "jit:parallelism=2"] {
                agree(&want, &run(&m, backend, &dims, None), &format!("{backend} k={k} nhwc={nhwc}"));
            }
        }
    }
}

#[test]
fn a_run_time_filter_takes_the_direct_kernel_too() {
    let (k, cout) = (7, 20);
    let m = module(false, k, 3, cout, 6.0, false);
    let convs = conv_lines(&m);
    assert!(convs.len() == 1 && convs[0].contains("stem direct"), "{convs:?}");
    let w = floats(cout * CIN * k * k, 9, 0.3);
    let dims = [N, CIN, H, W];
    let want = run(&m, "interp", &dims, Some((&w, &[cout, CIN, k, k])));
    agree(&want, &run(&m, "jit:parallelism=2", &dims, Some((&w, &[cout, CIN, k, k]))), "run-time filter");
}
