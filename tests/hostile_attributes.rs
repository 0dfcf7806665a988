//! Hostile attribute values in IR text on both CPU backends ("interp" and "jit"): paddings,
//! dilations, strides and sizes near ±2^63, zero and negative strides. Compiling verifies the
//! module (shape inference included), so every bad case must end in a clean `Err` naming the op
//! — never an arithmetic-overflow panic. Huge but valid attributes that give a small output must
//! run and give the hand-computed answer (the kernels' index arithmetic stays in range).

use std::sync::Arc;

use tensorjit::ir::text::parse_module;
use tensorjit::{Backend, Buffer};

const BACKENDS: [&str; 2] = ["interp", "jit"];

fn backend(name: &str) -> Arc<dyn Backend> {
    tensorjit::new_with_config(name).expect("backend is registered")
}

/// A module `@m` whose `@main` has `params` and the single-result `body` (whose result is `%9`).
fn module(params: &str, body: &str) -> String {
    format!("module @m\nfunc @main({params}) {{\n  {body}\n  return %9\n}}\n")
}

/// Parses and compiles `text` on both backends and asserts a clean error naming `op` and
/// containing every string of `needles`.
fn assert_rejected(text: &str, op: &str, needles: &[&str]) {
    for name in BACKENDS {
        let m = parse_module(text).unwrap_or_else(|e| panic!("{name}: parse failed: {e}\n{text}"));
        let e = match backend(name).compile(m) {
            Ok(_) => panic!("{name}: accepted\n{text}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(op), "{name}: error does not name {op}: {e}");
        for n in needles {
            assert!(e.contains(n), "{name}: error does not contain {n:?}: {e}");
        }
    }
}

/// Parses, compiles and runs `text` on both backends with f32 `inputs` (data, dims); returns
/// the single f32 output of each backend.
fn run_f32(text: &str, inputs: &[(&[f32], &[usize])]) -> Vec<(&'static str, Vec<f32>)> {
    let bufs: Vec<Buffer> = inputs.iter().map(|(d, s)| Buffer::from_slice(d, s).unwrap()).collect();
    let refs: Vec<&Buffer> = bufs.iter().collect();
    BACKENDS
        .iter()
        .map(|&name| {
            let m = parse_module(text).unwrap();
            let exe = backend(name).compile(m).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            let out = exe.execute(&refs, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, out[0].to_vec::<f32>().unwrap())
        })
        .collect()
}

const X5: &str = r#"%0 "x": f32[5]"#;

// 2^62, 2^61, 2^60, 2^59 and i64::MAX as IR text.
const P62: &str = "4611686018427387904";
const P61: &str = "2305843009213693952";
const P60: &str = "1152921504606846976";
const P59: &str = "576460752303423488";
const MAX: &str = "9223372036854775807";

fn conv(pad: &str, strides: &str, in_dil: &str, k_dil: &str, k: usize, out: &str) -> String {
    let params = format!(r#"%0 "x": f32[1,1,5], %1 "k": f32[1,1,{k}]"#);
    let body = format!(
        "%9 = conv_general %0, %1, input=(0,1,[2]), kernel=(0,1,[2]), output=(0,1,[2]), strides=[{strides}], \
         padding=[{pad}], input_dilations=[{in_dil}], kernel_dilations=[{k_dil}], channel_groups=1, \
         batch_groups=1 : f32[1,1,{out}]"
    );
    module(&params, &body)
}

#[test]
fn conv_general_rejects_overflowing_and_nonpositive_attributes() {
    // The reported reproducer: (2^62 + 2^62) + 4·2^62 overflows i64.
    let pad = format!("({P62},{P62})");
    assert_rejected(&conv(&pad, "1", P62, MAX, 3, "5"), "ConvGeneral", &["overflows", "axis 2"]);
    // Input extent alone: (5 − 1)·2^62 = 2^64.
    assert_rejected(&conv("(0,0)", "1", P62, "1", 3, "5"), "ConvGeneral", &["overflows", P62]);
    // Kernel extent: (3 − 1)·2^62 + 1 > i64::MAX.
    assert_rejected(&conv("(0,0)", "1", "1", P62, 3, "5"), "ConvGeneral", &["overflows", P62]);
    // |lo| + |hi| + 5 > i64::MAX even though lo + hi + 5 = 5 fits (negative padding crops).
    let pad = format!("(-{P62},{P62})");
    assert_rejected(&conv(&pad, "1", "1", "1", 3, "3"), "ConvGeneral", &["overflows", P62]);
    // Zero and negative strides / dilations.
    assert_rejected(&conv("(0,0)", "0", "1", "1", 3, "3"), "ConvGeneral", &["strides"]);
    assert_rejected(&conv("(0,0)", "-1", "1", "1", 3, "3"), "ConvGeneral", &["strides"]);
    assert_rejected(&conv("(0,0)", "1", "0", "1", 3, "3"), "ConvGeneral", &["dilations"]);
    assert_rejected(&conv("(0,0)", "1", "1", "-2", 3, "3"), "ConvGeneral", &["dilations"]);
    // channel_groups i64::MAX with 0 input and output channels: kernel input channels (5) ×
    // groups overflows; 0 ≠ 5 · i64::MAX, so it is an error, not a panic.
    let params = r#"%0 "x": f32[1,0,5], %1 "k": f32[5,0,3]"#;
    let body = format!(
        "%9 = conv_general %0, %1, input=(0,1,[2]), kernel=(0,1,[2]), output=(0,1,[2]), strides=[1], \
         padding=[(0,0)], input_dilations=[1], kernel_dilations=[1], channel_groups={MAX}, batch_groups=1 \
         : f32[1,0,3]"
    );
    assert_rejected(&module(params, &body), "ConvGeneral", &["channel_groups"]);
}

#[test]
fn conv_general_with_huge_valid_attributes_runs() {
    let x: &[f32] = &[1.0, 2.0, 3.0, 4.0, 5.0];
    let k: &[f32] = &[1.0, 10.0];
    // Input dilation 2^60 puts x at 0, 2^60, …, 4·2^60; a kernel dilated by 2^60 with stride 2^60
    // sees neighbours: out[p] = x[p] + 10·x[p+1] over (2^62 + 1 − 2^60 − 1)/2^60 + 1 = 4 windows.
    let text = conv("(0,0)", P60, P60, P60, 2, "4");
    for (name, got) in run_f32(&text, &[(x, &[1, 1, 5]), (k, &[1, 1, 2])]) {
        assert_eq!(got, [21.0, 32.0, 43.0, 54.0], "{name}");
    }
    // Input dilation 2^59: x at 0, 2^59, 2^60, 3·2^59, 2^61 (dilated extent 2^61 + 1). Padding
    // (−2^61, 2^61) crops all but x[4], now at 0: lo + hi + 2^61 + 1 = 2^61 + 1 cells. Kernel
    // extent 2^59 + 1, stride 2^59: (2^61 + 1 − 2^59 − 1)/2^59 + 1 = 4 windows; only window 0
    // touches x[4] (tap 0, weight 1), tap 1 and every later window read zeros: [5, 0, 0, 0].
    let pad = format!("(-{P61},{P61})");
    let text = conv(&pad, P59, P59, P59, 2, "4");
    for (name, got) in run_f32(&text, &[(x, &[1, 1, 5]), (k, &[1, 1, 2])]) {
        assert_eq!(got, [5.0, 0.0, 0.0, 0.0], "{name}");
    }
}

fn reduce_window(kind: &str, w: &str, s: &str, in_dil: &str, w_dil: &str, pad: &str, out: &str) -> String {
    let body = format!(
        "%9 = reduce_window %0, kind={kind}, window=[{w}], strides=[{s}], input_dilations=[{in_dil}], \
         window_dilations=[{w_dil}], padding=[{pad}] : f32[{out}]"
    );
    module(X5, &body)
}

#[test]
fn reduce_window_rejects_overflowing_and_nonpositive_attributes() {
    let rw = |w: &str, s: &str, id: &str, wd: &str, pad: &str| reduce_window("sum", w, s, id, wd, pad, "1");
    let pad = format!("({MAX},{MAX})");
    assert_rejected(&rw("2", "1", "1", "1", &pad), "ReduceWindow", &["overflows", MAX]);
    assert_rejected(&rw("2", "1", P62, "1", "(0,0)"), "ReduceWindow", &["overflows", P62]);
    // (3 − 1)·2^62 + 1 > i64::MAX.
    assert_rejected(&rw("3", "1", "1", P62, "(0,0)"), "ReduceWindow", &["overflows", P62]);
    assert_rejected(&rw(MAX, "1", "1", "2", "(0,0)"), "ReduceWindow", &["overflows", MAX]);
    assert_rejected(&rw("2", "0", "1", "1", "(0,0)"), "ReduceWindow", &["stride"]);
    assert_rejected(&rw("2", "-3", "1", "1", "(0,0)"), "ReduceWindow", &["stride"]);
    assert_rejected(&rw("2", "1", "0", "1", "(0,0)"), "ReduceWindow", &["dilation"]);
    assert_rejected(&rw("2", "1", "1", "-1", "(0,0)"), "ReduceWindow", &["dilation"]);
    assert_rejected(&rw("0", "1", "1", "1", "(0,0)"), "ReduceWindow", &["window"]);
    let pad = format!("(-{P62},0)");
    assert_rejected(&rw("2", "1", "1", "1", &pad), "ReduceWindow", &["padding"]);
}

#[test]
fn reduce_window_with_huge_valid_attributes_runs() {
    let x: &[f32] = &[1.0, 2.0, 3.0, 4.0, 5.0];
    // Stride larger than the input: one window, x[0] + x[1].
    let text = reduce_window("sum", "2", MAX, "1", "1", "(0,0)", "1");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [3.0], "{name}");
    }
    // Input and window dilation 2^60 with stride 2^60: pairs of neighbours, (2^62 + 1 − 2^60 − 1)/2^60 + 1
    // = 4 windows: [1+2, 2+3, 3+4, 4+5].
    let text = reduce_window("sum", "2", P60, P60, P60, "(0,0)", "4");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [3.0, 5.0, 7.0, 9.0], "{name}");
    }
    // Low padding 2^62, window 1, stride 2^62: (2^62 + 5 − 1)/2^62 + 1 = 2 windows, at padded
    // positions 0 (padding: the sum's identity 0) and 2^62 (x[0]).
    let pad = format!("({P62},0)");
    let text = reduce_window("sum", "1", P62, "1", "1", &pad, "2");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [0.0, 1.0], "{name}");
    }
}

fn select_and_scatter(w: &str, s: &str, pad: &str, n_src: usize) -> String {
    let params = format!(r#"%0 "x": f32[5], %1 "src": f32[{n_src}]"#);
    let body = format!("%9 = select_and_scatter_max %0, %1, window=[{w}], strides=[{s}], padding=[{pad}] : f32[5]");
    module(&params, &body)
}

#[test]
fn select_and_scatter_rejects_overflowing_and_nonpositive_attributes() {
    let pad = format!("({MAX},1)");
    assert_rejected(&select_and_scatter("2", "1", &pad, 1), "SelectAndScatter", &["overflows", MAX]);
    assert_rejected(&select_and_scatter("2", "0", "(0,0)", 4), "SelectAndScatter", &["stride"]);
    assert_rejected(&select_and_scatter("2", "-1", "(0,0)", 4), "SelectAndScatter", &["stride"]);
    assert_rejected(&select_and_scatter("-2", "1", "(0,0)", 4), "SelectAndScatter", &["window"]);
}

#[test]
fn select_and_scatter_with_huge_valid_attributes_runs() {
    let x: &[f32] = &[1.0, 5.0, 3.0, 4.0, 2.0];
    // Stride i64::MAX: one window over x[0..3]; its max 5 (index 1) receives 10.
    let text = select_and_scatter("3", MAX, "(0,0)", 1);
    for (name, got) in run_f32(&text, &[(x, &[5]), (&[10.0], &[1])]) {
        assert_eq!(got, [0.0, 10.0, 0.0, 0.0, 0.0], "{name}");
    }
    // Padding (1, 2^62), stride 2^62: (2^62 + 6 − 3)/2^62 + 1 = 2 windows. Window 0 covers padded
    // −1..2 → x[0], x[1]: index 1 receives 10; window 1 is all padding and selects nothing.
    let pad = format!("(1,{P62})");
    let text = select_and_scatter("3", P62, &pad, 2);
    for (name, got) in run_f32(&text, &[(x, &[5]), (&[10.0, 20.0], &[2])]) {
        assert_eq!(got, [0.0, 10.0, 0.0, 0.0, 0.0], "{name}");
    }
}

/// A window of 2^62 cells over 2^61 + 5 + 2^61 padded positions: the kernels walk only the
/// cells that land on the 5 real elements (a walk over every cell would never finish).
#[test]
fn huge_windows_over_huge_padding_cost_the_operand_extent() {
    let x: &[f32] = &[1.0, 5.0, 3.0, 4.0, 2.0];
    let pad = format!("({P61},{P61})");
    // (2^62 + 5 − 2^62)/5 + 1 = 2 windows, at padded 0..2^62 and 5..2^62 + 5; both hold x[0..5]
    // (padded 2^61..2^61 + 5): sums 15, maxima 5.
    let text = reduce_window("sum", P62, "5", "1", "1", &pad, "2");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [15.0, 15.0], "{name}");
    }
    let text = reduce_window("max", P62, "5", "1", "1", &pad, "2");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [5.0, 5.0], "{name}");
    }
    // Both windows select x[1] = 5, which receives 10 + 20.
    let text = select_and_scatter(P62, "5", &pad, 2);
    for (name, got) in run_f32(&text, &[(x, &[5]), (&[10.0, 20.0], &[2])]) {
        assert_eq!(got, [0.0, 30.0, 0.0, 0.0, 0.0], "{name}");
    }
    // Window dilation 2^59 over the same padding: 8 cells spanning 7·2^59 + 1 positions, stride
    // 2^59: (2^62 + 5 − 7·2^59 − 1)/2^59 + 1 = 2 windows, too sparse to hit more than one element.
    // Window 0's cells sit at k·2^59 and cell 4 lands on padded 2^61 = x[0]; window 1's at
    // (k + 1)·2^59, and cell 3 lands on x[0].
    let p59 = "576460752303423488";
    let text = reduce_window("sum", "8", p59, "1", p59, &pad, "2");
    for (name, got) in run_f32(&text, &[(x, &[5])]) {
        assert_eq!(got, [1.0, 1.0], "{name}");
    }
}

fn pad(axes: &str, out: &str) -> String {
    let params = r#"%0 "x": f32[2], %1 "fill": f32[]"#;
    module(params, &format!("%9 = pad %0, %1, axes=[{axes}] : f32[{out}]"))
}

#[test]
fn pad_rejects_overflowing_sizes_and_negative_interior() {
    assert_rejected(&pad(&format!("({MAX},{MAX},0)"), "2"), "Pad", &["overflows"]);
    assert_rejected(&pad("(0,0,-1)", "2"), "Pad", &["interior"]);
    assert_rejected(&pad(&format!("(-{MAX},0,0)"), "2"), "Pad", &["negative"]);
}

#[test]
fn pad_with_huge_valid_attributes_runs() {
    // Interior i64::MAX puts x[1] at i64::MAX + 1 = 2^63; start −i64::MAX moves it to 1 and x[0]
    // to −i64::MAX (cropped): size 2 − i64::MAX + 0 + i64::MAX = 2, contents [fill, x[1]]. The
    // kernel's step (interior + 1) and position (o − start) both leave i64 here.
    let text = pad(&format!("(-{MAX},0,{MAX})"), "2");
    for (name, got) in run_f32(&text, &[(&[7.0, 8.0], &[2]), (&[-1.0], &[])]) {
        assert_eq!(got, [-1.0, 8.0], "{name}");
    }
}

#[test]
fn slice_rejects_nonpositive_strides_and_runs_with_a_huge_one() {
    let slice =
        |s: &str, out: &str| module(X5, &format!("%9 = slice %0, starts=[1], limits=[5], strides=[{s}] : f32[{out}]"));
    assert_rejected(&slice("0", "4"), "Slice", &["stride"]);
    assert_rejected(&slice("-1", "4"), "Slice", &["stride"]);
    // Stride i64::MAX from 1: only x[1].
    for (name, got) in run_f32(&slice(MAX, "1"), &[(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5])]) {
        assert_eq!(got, [2.0], "{name}");
    }
}

#[test]
fn qkv_projection_rejects_overflowing_dims() {
    // q_dim + 2·kv_dim overflows i64.
    let params = r#"%0 "x": f32[2,16], %1 "w": f32[16,16]"#;
    let text = format!(
        "module @m\nfunc @main({params}) {{\n  %2, %3, %4 = fused_attention_qkv_projection %0, %1, q_dim={MAX}, \
         kv_dim={P62}, has_bias_q=false, has_bias_k=false, has_bias_v=false : f32[2,8], f32[2,4], f32[2,4]\n  \
         return %2\n}}\n"
    );
    assert_rejected(&text, "FusedAttentionQKVProjection", &[MAX, P62]);
}
