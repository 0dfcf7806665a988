//! Convolution epilogues on the "jit" backend: a conv whose result feeds only an elementwise loop
//! computing `clamp(act((conv + bias) + residual))` runs as one conv step with that epilogue (jit
//! `merge`), and a batch norm after a conv with a constant filter folds into the filter and a
//! bias (`passes::conv_bn`). IR-text modules in NCHW and NHWC, plain, grouped and depthwise; the
//! plan must have no loop step left for the fused ones, the negative cases keep their loop, and
//! every result must match the interpreter running the module as written (the oracle).
//!
//! Tolerance: the jit convolution sums in another order than the interpreter (GEMM blocking),
//! and folded batch norms round once instead of per op, so results agree to 1e-4 relative to
//! the output's magnitude, not bit for bit. BF16 and F16 epilogues merge too (bias, residual,
//! ReLU, clamp): their results must equal the unmerged plan's bit for bit (the loop rounds after
//! every op, and so does the merged step).
//!
//! Run with `cargo test --test conv_fusion`.

use std::path::Path;

use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::module::Module;
use tensorjit::ir::text::parse_module;
use tensorjit::onnx::{ImportOptions, load_with};
use tensorjit::{Buffer, DType};

/// One convolution: 3x3, padding 1, stride 1, batch 2, 10x10 (output 1600+ elements, so that
/// constant folding keeps broadcasts of a bias compact).
#[derive(Clone, Copy)]
struct Conv {
    nhwc: bool,
    /// Rows and columns of the image.
    hw: usize,
    cin: usize,
    cout: usize,
    groups: usize,
}

const N: usize = 2;
const HW: usize = 10;

const NCHW: Conv = Conv { nhwc: false, hw: HW, cin: 4, cout: 8, groups: 1 };
const NHWC: Conv = Conv { nhwc: true, hw: HW, cin: 4, cout: 8, groups: 1 };

impl Conv {
    fn dims(&self, c: usize) -> String {
        let hw = self.hw;
        if self.nhwc { format!("f32[{N},{hw},{hw},{c}]") } else { format!("f32[{N},{c},{hw},{hw}]") }
    }

    fn out(&self) -> String {
        self.dims(self.cout)
    }

    /// Dims of a per-channel `[1, C, 1, 1]` (NCHW) or `[1, 1, 1, C]` (NHWC) constant.
    fn bias_dims(&self) -> String {
        if self.nhwc { format!("f32[1,1,1,{}]", self.cout) } else { format!("f32[1,{},1,1]", self.cout) }
    }

    fn channel_axis(&self) -> usize {
        if self.nhwc { 3 } else { 1 }
    }

    /// `%dst = conv_general %x, <constant filter %dst+1000>` lines.
    fn conv(&self, dst: usize, x: usize, seed: usize) -> String {
        let cin_g = self.cin / self.groups;
        let (kdims, dn) = if self.nhwc {
            (format!("f32[3,3,{cin_g},{}]", self.cout), "input=(0,3,[1,2]), kernel=(2,3,[0,1]), output=(0,3,[1,2])")
        } else {
            (format!("f32[{},{cin_g},3,3]", self.cout), "input=(0,1,[2,3]), kernel=(1,0,[2,3]), output=(0,1,[2,3])")
        };
        let k = floats(self.cout * cin_g * 9, seed, 0.3);
        format!(
            "  %{w} = constant {k} : {kdims}\n  %{dst} = conv_general %{x}, %{w}, {dn}, strides=[1,1], \
             padding=[(1,1),(1,1)], input_dilations=[1,1], kernel_dilations=[1,1], channel_groups={g}, \
             batch_groups=1 : {out}\n",
            w = dst + 1000,
            g = self.groups,
            out = self.out(),
        )
    }

    /// `%dst = constant` per-channel values.
    fn bias(&self, dst: usize, seed: usize) -> String {
        format!("  %{dst} = constant {} : {}\n", floats(self.cout, seed, 1.0), self.bias_dims())
    }

    /// The module: parameters x and r (a residual of the output's shape), then `body` (which
    /// may use `{out}` for the output type) returning `%ret`.
    fn module(&self, body: &str, ret: &str) -> Module {
        self.module_as(body, ret, "f32")
    }

    /// [`Conv::module`] with every tensor of element type `ty` instead of f32.
    fn module_as(&self, body: &str, ret: &str, ty: &str) -> Module {
        let text = format!(
            "module @t\nfunc @main(%0 \"x\": {x}, %1 \"r\": {out}) {{\n{body}  return {ret}\n}}\n",
            x = self.dims(self.cin),
            out = self.out(),
            body = body.replace("{out}", &self.out()),
        )
        .replace("f32[", &format!("{ty}["));
        parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    /// [`Conv::inputs`] rounded to `ty` (`bf16` or `f16`).
    fn inputs_as(&self, ty: &str) -> Vec<Buffer> {
        self.inputs()
            .iter()
            .map(|b| {
                let (v, dims) = (b.to_vec::<f32>().unwrap(), b.dims().to_vec());
                match ty {
                    "bf16" => {
                        Buffer::from_slice(&v.iter().map(|&x| half::bf16::from_f32(x)).collect::<Vec<_>>(), &dims)
                    }
                    _ => Buffer::from_slice(&v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>(), &dims),
                }
                .unwrap()
            })
            .collect()
    }

    fn inputs(&self) -> Vec<Buffer> {
        let hw = self.hw;
        let shape = |c: usize| -> Vec<usize> { if self.nhwc { vec![N, hw, hw, c] } else { vec![N, c, hw, hw] } };
        let x = floats_vec(N * self.cin * hw * hw, 7, 2.0);
        let r = floats_vec(N * self.cout * hw * hw, 11, 2.0);
        vec![Buffer::from_slice(&x, &shape(self.cin)).unwrap(), Buffer::from_slice(&r, &shape(self.cout)).unwrap()]
    }
}

/// Deterministic values in [-scale, scale).
fn floats_vec(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * scale).collect()
}

fn floats(n: usize, seed: usize, scale: f32) -> String {
    let v: Vec<String> = floats_vec(n, seed, scale).iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", v.join(", "))
}

/// The plan's listing.
fn plan(m: &Module) -> String {
    JitBackend::new("").unwrap().compile_stages(m.clone()).unwrap().plan
}

/// The op names of the optimised module's main (up to the first brace or parenthesis of
/// their debug text, plus the binary op: `Binary(Add`).
fn optimized_ops(m: &Module) -> Vec<String> {
    let o = JitBackend::new("").unwrap().compile_stages(m.clone()).unwrap().optimized;
    let name = |s: String| s.split([' ', ')']).next().unwrap_or_default().to_string();
    o.functions[0].body.iter().map(|&n| name(format!("{:?}", o.node(n).op))).collect()
}

/// Runs `m` on the interpreter and the jit (1 and 2 threads) and compares.
fn agree(m: &Module, inputs: &[Buffer]) {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let mut outs = vec![];
    for backend in ["interp", "jit:parallelism=1", "jit:parallelism=2"] {
        let exe = tensorjit::new_with_config(backend).unwrap().compile(m.clone()).unwrap();
        let got = exe.execute(&refs, &[]).unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(got[0].dtype(), DType::Float32);
        outs.push(got[0].to_vec::<f32>().unwrap());
    }
    let scale = outs[0].iter().fold(1f32, |m, v| m.max(v.abs()));
    for jit in &outs[1..] {
        assert_eq!(jit.len(), outs[0].len());
        for (i, (a, b)) in outs[0].iter().zip(jit).enumerate() {
            let close = (a - b).abs() <= 1e-4 * scale || (a.is_nan() && b.is_nan());
            assert!(close, "element {i}: interp {a}, jit {b} (scale {scale})");
        }
    }
}

/// The plan runs every conv with an epilogue and has no loop step.
fn fused(m: &Module, epilogue: &str) {
    let p = plan(m);
    assert!(!p.contains("loop cluster"), "a loop is left:\n{p}");
    let convs: Vec<&str> = p.lines().filter(|l| l.contains("kernel ConvGeneral")).collect();
    assert!(!convs.is_empty(), "{p}");
    assert!(convs.iter().any(|l| l.contains(&format!("epilogue {epilogue}"))), "want epilogue {epilogue}:\n{p}");
}

/// The plan keeps a loop step and runs no conv with an epilogue.
fn unfused(m: &Module) {
    let p = plan(m);
    assert!(p.contains("loop cluster") && !p.contains("epilogue"), "{p}");
}

const RELU: &str = "  %50 = constant 0.0 : f32[]\n  %51 = constant 6.0 : f32[]\n";

#[test]
fn bias_and_relu_fuse_in_both_layouts() {
    for c in [NCHW, NHWC] {
        let body = format!(
            "{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = max %3, %50 : {{out}}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2)
        );
        let m = c.module(&body, "%5");
        fused(&m, "bias + relu");
        agree(&m, &c.inputs());
    }
}

#[test]
fn relu6_fuses_as_max_min_and_as_clamp() {
    for c in [NCHW, NHWC] {
        // Max then Min, the bias added on the left.
        let body = format!(
            "{}{}{RELU}  %3 = add %4, %2 : {{out}}\n  %5 = max %3, %50 : {{out}}\n  %6 = min %5, %51 : {{out}}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2)
        );
        let m = c.module(&body, "%6");
        fused(&m, "bias + clamp [0, 6]");
        agree(&m, &c.inputs());
        // Clamp, the bias a broadcast of a rank-1 constant.
        let axis = c.channel_axis();
        let body = format!(
            "{}  %4 = constant {} : f32[{}]\n  %7 = broadcast_in_dim %4, shape={{out}}, axes=[{axis}] : {{out}}\n\
             {RELU}  %3 = add %2, %7 : {{out}}\n  %6 = clamp %50, %3, %51 : {{out}}\n",
            c.conv(2, 0, 1),
            floats(c.cout, 3, 1.0),
            c.cout
        );
        let m = c.module(&body, "%6");
        fused(&m, "bias + clamp [0, 6]");
        agree(&m, &c.inputs());
    }
}

/// ReLU6 bounds as `clamp` of broadcast scalars shared by two convolutions (as a builder writes
/// them once, or CSE leaves them): each loop computes its own copy of the broadcasts, so both
/// epilogues merge and no step writes the broadcasts out.
#[test]
fn clamps_sharing_broadcast_bounds_fuse_into_both_convs() {
    for nhwc in [true, false] {
        let c = Conv { nhwc, hw: HW, cin: 8, cout: 8, groups: 1 };
        let body = format!(
            "{}{}{RELU}  %60 = broadcast_in_dim %50, shape={{out}}, axes=[] : {{out}}\n  \
             %61 = broadcast_in_dim %51, shape={{out}}, axes=[] : {{out}}\n  %3 = add %2, %4 : {{out}}\n  \
             %5 = clamp %60, %3, %61 : {{out}}\n{}{}  %7 = add %6, %8 : {{out}}\n  %9 = clamp %60, %7, %61 : {{out}}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2),
            c.conv(6, 5, 3),
            c.bias(8, 4)
        );
        let m = c.module(&body, "%9");
        fused(&m, "bias + clamp [0, 6]");
        let p = plan(&m);
        let merged =
            p.lines().filter(|l| l.contains("kernel ConvGeneral") && l.contains("epilogue bias + clamp [0, 6]"));
        assert_eq!(merged.count(), 2, "{p}");
        agree(&m, &c.inputs());
    }
}

#[test]
fn residual_block_end_fuses() {
    for c in [NCHW, NHWC] {
        // ResNet: relu((conv + b) + r), the residual a parameter, on either side of the add.
        for add in ["%3, %1", "%1, %3"] {
            let body = format!(
                "{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = add {add} : {{out}}\n  %6 = max %5, %50 : {{out}}\n",
                c.conv(2, 0, 1),
                c.bias(4, 2)
            );
            let m = c.module(&body, "%6");
            fused(&m, "bias + residual + relu");
            agree(&m, &c.inputs());
        }
        // The downsampling block: relu((conv1 + b1) + (conv2 + b2)) over the same input; the
        // earlier conv writes its sum, the later one adds it.
        let body = format!(
            "{}{}{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %8 = add %7, %9 : {{out}}\n  %10 = add %3, %8 : {{out}}\n  %11 = max %10, %50 : {{out}}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2),
            c.conv(7, 0, 5),
            c.bias(9, 6)
        );
        let m = c.module(&body, "%11");
        fused(&m, "bias + residual + relu");
        fused(&m, "bias");
        agree(&m, &c.inputs());
    }
}

#[test]
fn activations_fuse() {
    for c in [NCHW, NHWC] {
        for (lines, ret, want) in [
            ("  %5 = logistic %3 : {out}\n", "%5", "bias + sigmoid"),
            ("  %5 = tanh %3 : {out}\n", "%5", "bias + tanh"),
            ("  %5 = logistic %3 : {out}\n  %6 = mul %3, %5 : {out}\n", "%6", "bias + silu"),
            (
                "  %5 = add %3, %1 : {out}\n  %6 = logistic %5 : {out}\n  %7 = mul %6, %5 : {out}\n",
                "%7",
                "bias + residual + silu",
            ),
        ] {
            let body = format!("{}{}  %3 = add %2, %4 : {{out}}\n{lines}", c.conv(2, 0, 1), c.bias(4, 2));
            let m = c.module(&body, ret);
            fused(&m, want);
            agree(&m, &c.inputs());
        }
    }
}

/// The result bytes of `m` on the jit with `threads` threads.
fn jit_bytes(m: &Module, inputs: &[Buffer], threads: usize) -> Vec<Vec<u8>> {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let exe = tensorjit::new_with_config(&format!("jit:parallelism={threads}")).unwrap().compile(m.clone()).unwrap();
    exe.execute(&refs, &[]).unwrap().iter().map(|b| b.to_bytes().unwrap()).collect()
}

#[test]
fn half_precision_epilogues_fuse_and_round_as_the_loop() {
    for ty in ["bf16", "f16"] {
        // Channels-last images whose f32 result is larger than a band (2 × 40 × 40 × 32: the
        // GEMM's blocks, and the depthwise step band by band) too.
        let big = Conv { nhwc: true, hw: 40, cin: 8, cout: 32, groups: 1 };
        let big_dw = Conv { nhwc: true, hw: 40, cin: 32, cout: 32, groups: 32 };
        // Images within a band but a result larger than a piece: finished in parallel chunks.
        let wide_dw = Conv { nhwc: true, hw: 20, cin: 64, cout: 64, groups: 64 };
        for c in [NCHW, NHWC, Conv { nhwc: true, hw: HW, cin: 8, cout: 8, groups: 8 }, big, big_dw, wide_dw] {
            let (conv, bias) = (c.conv(2, 0, 1), c.bias(4, 2));
            let relu6 = format!(
                "{conv}{bias}{RELU}  %3 = add %4, %2 : {{out}}\n  %5 = max %3, %50 : {{out}}\n  %6 = min %5, %51 : {{out}}\n"
            );
            let residual = format!(
                "{conv}{bias}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = add %3, %1 : {{out}}\n  %6 = max %5, %50 : {{out}}\n"
            );
            let down = format!(
                "{conv}{bias}{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %8 = add %7, %9 : {{out}}\n  %10 = add %3, %8 : {{out}}\n  %11 = max %10, %50 : {{out}}\n",
                c.conv(7, 0, 5),
                c.bias(9, 6)
            );
            for (body, ret, want, conv_values) in [
                (relu6, "%6", "bias + clamp [0, 6]", "%2"),
                (residual, "%6", "bias + residual + relu", "%2"),
                (down, "%11", "bias + residual + relu", "%2, %7"),
            ] {
                let m = c.module_as(&body, ret, ty);
                fused(&m, want);
                // Returning the convolutions' own results too keeps the loops: the unmerged plan.
                let kept = c.module_as(&body, &format!("{ret}, {conv_values}"), ty);
                assert!(plan(&kept).contains("loop cluster"), "{}", plan(&kept));
                let inputs = c.inputs_as(ty);
                for threads in [1, 2] {
                    let (got, unmerged) = (jit_bytes(&m, &inputs, threads), jit_bytes(&kept, &inputs, threads));
                    assert_eq!(got[0], unmerged[0], "{ty} {want} threads {threads}");
                }
            }
            // Other activations of a half type stay out of the conv step (they round inside):
            // the bias merges, the logistic runs on its own.
            let sig = format!("{conv}{bias}  %3 = add %2, %4 : {{out}}\n  %5 = logistic %3 : {{out}}\n");
            let p = plan(&c.module_as(&sig, "%5", ty));
            assert!(p.contains("epilogue bias") && !p.contains("sigmoid"), "{p}");
        }
    }
}

#[test]
fn grouped_and_depthwise_convs_fuse() {
    for nhwc in [false, true] {
        for (cin, groups) in [(8, 8), (8, 2)] {
            let c = Conv { nhwc, hw: HW, cin, cout: 8, groups };
            let body = format!(
                "{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = max %3, %50 : {{out}}\n  %6 = min %5, %51 : {{out}}\n",
                c.conv(2, 0, 1),
                c.bias(4, 2)
            );
            let m = c.module(&body, "%6");
            fused(&m, "bias + clamp [0, 6]");
            agree(&m, &c.inputs());
            let body = format!(
                "{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = add %3, %1 : {{out}}\n",
                c.conv(2, 0, 1),
                c.bias(4, 2)
            );
            let m = c.module(&body, "%5");
            fused(&m, "bias + residual");
            agree(&m, &c.inputs());
        }
    }
}

#[test]
fn batch_norm_folds_into_the_filter() {
    for c in [NCHW, NHWC] {
        let cd = c.bias_dims();
        // ONNX BatchNormalization's import: ((conv + b) − mean) · k + beta, then ReLU.
        let body = format!(
            "{}{}  %20 = constant {} : {cd}\n  %21 = constant {} : {cd}\n  %22 = constant {} : {cd}\n{RELU}\
             %3 = add %2, %4 : {{out}}\n  %5 = sub %3, %20 : {{out}}\n  %6 = mul %5, %21 : {{out}}\n\
             %7 = add %6, %22 : {{out}}\n  %8 = max %7, %50 : {{out}}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2),
            floats(c.cout, 3, 0.5),
            floats(c.cout, 4, 2.0),
            floats(c.cout, 5, 1.0),
        );
        let m = c.module(&body, "%8");
        let ops = optimized_ops(&m);
        let count = |name: &str| ops.iter().filter(|o| o.starts_with(name)).count();
        assert_eq!((count("ConvGeneral"), count("Binary(Add"), count("Binary(Sub")), (1, 1, 0), "{ops:?}");
        assert_eq!(count("Binary(Mul"), 0, "{ops:?}");
        fused(&m, "bias + relu");
        agree(&m, &c.inputs());
    }
    // The catalogue's BatchNormInference op, on a conv without bias.
    let c = NCHW;
    let p = |seed: usize, scale: f32| format!("constant {} : f32[{}]", floats(c.cout, seed, scale), c.cout);
    let var: Vec<String> = floats_vec(c.cout, 6, 1.0).iter().map(|v| format!("{:?}", v.abs() + 0.1)).collect();
    let body = format!(
        "{}  %20 = {}\n  %21 = {}\n  %22 = {}\n  %23 = constant [{}] : f32[{}]\n\
         %3 = batch_norm_for_inference %2, %20, %21, %22, %23, epsilon=0.001, feature_axis=1 : {{out}}\n",
        c.conv(2, 0, 1),
        p(3, 2.0),
        p(4, 1.0),
        p(5, 1.0),
        var.join(", "),
        c.cout,
    );
    let m = c.module(&body, "%3");
    let ops = optimized_ops(&m);
    assert!(!ops.iter().any(|o| o.starts_with("BatchNorm")), "{ops:?}");
    fused(&m, "bias");
    agree(&m, &c.inputs());
}

#[test]
fn unfusable_epilogues_keep_their_loop() {
    let c = NCHW;
    let conv = c.conv(2, 0, 1);
    // The conv result has another reader (it is returned too).
    let m = {
        let body = format!("{conv}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = max %3, %50 : {{out}}\n", c.bias(4, 2));
        let text_ret = "%5, %2";
        c.module(&body, text_ret)
    };
    unfused(&m);
    agree(&m, &c.inputs());
    // A bias that varies along the width, not per channel.
    let m = c.module(
        &format!(
            "{conv}  %4 = constant {} : f32[1,1,1,{HW}]\n{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = max %3, %50 : {{out}}\n",
            floats(HW, 2, 1.0)
        ),
        "%5",
    );
    unfused(&m);
    agree(&m, &c.inputs());
    // A bias that is not a constant (here a slice of the residual parameter's first channel row).
    let m = c.module(
        &format!(
            "{conv}  %4 = slice %1, starts=[0,0,0,0], limits=[1,{},1,1], strides=[1,1,1,1] : f32[1,{},1,1]\n{RELU}\
             %3 = add %2, %4 : {{out}}\n  %5 = max %3, %50 : {{out}}\n",
            c.cout, c.cout
        ),
        "%5",
    );
    unfused(&m);
    agree(&m, &c.inputs());
    // The residual added before the bias (another rounding order): left alone.
    let m =
        c.module(&format!("{conv}{}  %3 = add %2, %1 : {{out}}\n  %5 = add %3, %4 : {{out}}\n", c.bias(4, 2)), "%5");
    unfused(&m);
    agree(&m, &c.inputs());
}

/// The real convnet exports, when present on this machine (they are not vendored: tens of MB):
/// every convolution of ResNet-18 and MobileNetV2 runs with its bias and activation (and the
/// residual adds) in its epilogue, the last one too (the global average pool's loop is left the
/// sum alone).
#[test]
fn convnet_exports_fuse_every_conv() {
    for (name, convs, fused, with_residual) in [("resnet18", 20, 20, 8), ("mobilenet_v2", 52, 52, 10)] {
        let path = Path::new("/work/models").join(format!("{name}-torchscript/model.onnx"));
        if !path.exists() {
            eprintln!("skipped: {} is absent", path.display());
            continue;
        }
        let mut opts = ImportOptions::default();
        opts.dims.insert("batch".into(), 1);
        let m = load_with(&path, &opts).unwrap_or_else(|e| panic!("{name}: {e}")).module;
        let p = plan(&m);
        // Each convolution's description (a block step describes its three).
        let lines = |what: &str| {
            let steps = p.lines().filter(|l| l.contains("kernel ConvGeneral"));
            steps.flat_map(|l| l.split("conv f32 ").skip(1)).filter(|c| c.contains(what)).count()
        };
        assert_eq!(lines(""), convs, "{name}:\n{p}");
        assert_eq!(lines("epilogue bias"), fused, "{name}:\n{p}");
        assert_eq!(lines("residual"), with_residual, "{name}:\n{p}");
        let x = Buffer::from_slice(&floats_vec(3 * 224 * 224, 13, 1.0), &[1, 3, 224, 224]).unwrap();
        agree(&m, &[x]);
    }
}

/// A convnet's end: relu((conv + b) + r) summed over the image (global average pooling before
/// its division). The reduction does not take the bias, residual and ReLU into its loop: they
/// are the conv's epilogue, and the loop left is the sum alone, reading the conv's result.
#[test]
fn pooled_tail_stays_the_conv_epilogue() {
    for c in [NCHW, NHWC] {
        let spatial = if c.nhwc { "[1,2]" } else { "[2,3]" };
        let kept = format!("f32[{N},{}]", c.cout);
        let body = format!(
            "{}{}{RELU}  %3 = add %2, %4 : {{out}}\n  %5 = add %3, %1 : {{out}}\n  %6 = max %5, %50 : {{out}}\n  \
             %7 = reduce_sum %6, axes={spatial} : {kept}\n",
            c.conv(2, 0, 1),
            c.bias(4, 2)
        );
        let m = c.module(&body, "%7");
        let p = plan(&m);
        let merged =
            p.lines().filter(|l| l.contains("kernel ConvGeneral") && l.contains("epilogue bias + residual + relu"));
        assert_eq!(merged.count(), 1, "{p}");
        let loops: Vec<&str> = p.lines().filter(|l| l.contains("loop cluster")).collect();
        assert_eq!(loops.len(), 1, "{p}");
        let reads = loops[0].split("reads [").nth(1).and_then(|r| r.split(']').next()).unwrap_or_default();
        assert!(!reads.contains(','), "the pooling loop reads more than the conv's result: {}", loops[0]);
        agree(&m, &c.inputs());
    }
}
