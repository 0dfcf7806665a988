//! The jit's channels-last layout pass (`conv_layout=auto|keep|nhwc|small`, `passes::layout`) on
//! IR-text convnet blocks written NCHW, as ONNX imports them: the optimised module must hold
//! the chosen convolutions channels-last with no transpose left inside the chain (bias adds,
//! clamps, residual adds, max pooling and a global average pool carried over), keep a lone
//! convolution (and with `conv_layout=small` large planes) channels-first, and compute what the interpreter computes on the
//! module as written (the oracle) with every option value, on 1 and 2 threads.
//!
//! Tolerance: the jit convolutions sum in another order than the interpreter, so results agree
//! to 1e-4 relative to the output's magnitude.
//!
//! Run with `cargo test --test conv_layout`.

use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::module::Module;
use tensorjit::ir::op::Op;
use tensorjit::ir::text::parse_module;
use tensorjit::{Buffer, DType};

/// Deterministic values in [-scale, scale).
fn floats_vec(n: usize, seed: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5 - 1.0) * scale).collect()
}

fn floats(n: usize, seed: usize, scale: f32) -> String {
    let v: Vec<String> = floats_vec(n, seed, scale).iter().map(|x| format!("{x:?}")).collect();
    format!("[{}]", v.join(", "))
}

/// `%dst = conv_general %x, W (constant %dst+1000)` with an NCHW input, OIHW filter, NCHW output.
#[allow(clippy::too_many_arguments)]
fn conv(
    dst: usize,
    x: usize,
    n: usize,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    groups: usize,
    hw: usize,
) -> String {
    let pad = k / 2;
    let out = (hw + 2 * pad - k) / stride + 1;
    let cin_g = cin / groups;
    format!(
        "  %{w} = constant {data} : f32[{cout},{cin_g},{k},{k}]\n  %{dst} = conv_general %{x}, %{w}, \
         input=(0,1,[2,3]), kernel=(1,0,[2,3]), output=(0,1,[2,3]), strides=[{stride},{stride}], \
         padding=[({pad},{pad}),({pad},{pad})], input_dilations=[1,1], kernel_dilations=[1,1], \
         channel_groups={groups}, batch_groups=1 : f32[{n},{cout},{out},{out}]\n",
        w = dst + 1000,
        data = floats(cout * cin_g * k * k, dst, 0.4),
    )
}

/// `%dst = clamp(%x + bias, 0, 6)` over `f32[n, c, hw, hw]` (ReLU6 as ONNX exports it: add,
/// max, min); the bias is `%dst+2000`, the bounds `%9000`/`%9001`.
fn bias_relu6(dst: usize, x: usize, n: usize, c: usize, hw: usize) -> String {
    let t = format!("f32[{n},{c},{hw},{hw}]");
    format!(
        "  %{b} = constant {data} : f32[1,{c},1,1]\n  %{a} = add %{x}, %{b} : {t}\n  %{m} = max %{a}, %9000 : {t}\n  \
         %{dst} = min %{m}, %9001 : {t}\n",
        b = dst + 2000,
        a = dst + 3000,
        m = dst + 4000,
        data = floats(c, dst + 7, 0.5),
    )
}

/// The shared head of the test graphs, values %1–%8 (the constants 0 and 6 first): a stride-2
/// stem 3→16 from `2·hw` pixels square to `hw`, with bias and ReLU6, then an inverted-residual
/// block on `hw`×`hw` (1×1 16→32, depthwise 3×3, 1×1 32→16, plus the stem's result).
fn inverted_residual(n: usize, hw: usize) -> String {
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    body += &conv(1, 0, n, 3, 16, 3, 2, 1, 2 * hw);
    body += &bias_relu6(2, 1, n, 16, hw);
    body += &conv(3, 2, n, 16, 32, 1, 1, 1, hw);
    body += &bias_relu6(4, 3, n, 32, hw);
    body += &conv(5, 4, n, 32, 32, 3, 1, 32, hw);
    body += &bias_relu6(6, 5, n, 32, hw);
    body += &conv(7, 6, n, 32, 16, 1, 1, 1, hw);
    body += &format!("  %8 = add %7, %2 : f32[{n},16,{hw},{hw}]\n");
    body
}

/// An inverted-residual block on 8×8 planes (small for 32 channels: the auto policy takes it)
/// after a channels-first stem on 16×16 planes, then a 3×3/2 max pool and a global average pool:
/// stem 3→16 (s2) → 1×1 16→32 → depthwise 3×3 → 1×1 32→16 + residual → max pool → mean.
fn block() -> Module {
    let n = 2;
    let mut body = inverted_residual(n, 8);
    body += "  %10 = reduce_window %8, kind=max, window=[1,1,3,3], strides=[1,1,2,2], \
             input_dilations=[1,1,1,1], window_dilations=[1,1,1,1], padding=[(0,0),(0,0),(1,1),(1,1)] : f32[2,16,4,4]\n";
    body += "  %11 = reduce_sum %10, axes=[2,3] : f32[2,16]\n";
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[2,3,16,16]) {{\n{body}  return %11\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn input() -> Buffer {
    Buffer::from_slice(&floats_vec(2 * 3 * 16 * 16, 5, 2.0), &[2, 3, 16, 16]).unwrap()
}

/// The optimised module's ConvGeneral output channel axes and its Transpose count.
fn layout_of(m: &Module, config: &str) -> (Vec<usize>, usize) {
    let o = JitBackend::new(config).unwrap().compile_stages(m.clone()).unwrap().optimized;
    let ops: Vec<&Op> = o.functions[0].body.iter().map(|&n| &o.node(n).op).collect();
    let convs = ops
        .iter()
        .filter_map(|op| match op {
            Op::ConvGeneral { axes, .. } => Some(axes.output_channels),
            _ => None,
        })
        .collect();
    (convs, ops.iter().filter(|op| matches!(op, Op::Transpose { .. })).count())
}

/// Runs `m` on the interpreter and the jit under `configs` and compares.
fn agree(m: &Module, inputs: &[Buffer], configs: &[&str]) {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let run = |backend: &str| {
        let exe = tensorjit::new_with_config(backend).unwrap().compile(m.clone()).unwrap();
        let got = exe.execute(&refs, &[]).unwrap_or_else(|e| panic!("{backend}: {e}"));
        assert_eq!(got[0].dtype(), DType::Float32);
        got[0].to_vec::<f32>().unwrap()
    };
    let want = run("interp");
    let scale = want.iter().fold(1f32, |m, v| m.max(v.abs()));
    for cfg in configs {
        let got = run(cfg);
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in want.iter().zip(&got).enumerate() {
            assert!((a - b).abs() <= 1e-4 * scale, "{cfg}: element {i}: interp {a}, jit {b} (scale {scale})");
        }
    }
}

#[test]
fn chains_run_channels_last_and_agree_with_the_interpreter() {
    let m = block();
    // Every option value, 1 and 2 threads.
    let configs = [
        "jit:parallelism=1",
        "jit:parallelism=2",
        "jit:parallelism=1,conv_layout=keep",
        "jit:parallelism=1,conv_layout=nhwc",
        "jit:parallelism=2,conv_layout=nhwc",
    ];
    agree(&m, &[input()], &configs);
    // nhwc: every convolution channels-last (output channels on axis 3), the pooling and the
    // global average pool read the channels-last tensor: no transpose left.
    assert_eq!(layout_of(&m, "conv_layout=nhwc"), (vec![3, 3, 3, 3], 0));
    // keep: as written.
    assert_eq!(layout_of(&m, "conv_layout=keep"), (vec![1, 1, 1, 1], 0));
    // auto: the stem's 8×8 output planes are small for 16 channels too (64 ≤ 4 · 16), so the
    // whole chain goes channels-last.
    assert_eq!(layout_of(&m, ""), (vec![3, 3, 3, 3], 0));
}

/// Two convolutions whose epilogues read broadcasts rather than constants (as a builder writes
/// them): ReLU6 as `clamp` of broadcast scalars, and a bias that is a parameter broadcast along
/// the channels. The broadcasts are re-made channels-last, so the chain has no transpose inside
/// (one for the result), and the jit agrees with the interpreter.
#[test]
fn broadcast_operands_are_carried_channels_last() {
    let (n, c, hw) = (2, 16, 8);
    let t = format!("f32[{n},{c},{hw},{hw}]");
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    body += &conv(2, 0, n, 3, c, 3, 1, 1, hw);
    body += &format!(
        "  %20 = broadcast_in_dim %9000, shape={t}, axes=[] : {t}\n  %21 = broadcast_in_dim %9001, shape={t}, axes=[] : {t}\n  \
         %22 = broadcast_in_dim %1, shape={t}, axes=[1] : {t}\n  %23 = add %2, %22 : {t}\n  %24 = clamp %20, %23, %21 : {t}\n"
    );
    body += &conv(3, 24, n, c, c, 3, 1, 1, hw);
    body += &format!("  %25 = add %3, %22 : {t}\n  %26 = clamp %20, %25, %21 : {t}\n");
    let text = format!(
        "module @t\nfunc @main(%0 \"x\": f32[{n},3,{hw},{hw}], %1 \"b\": f32[{c}]) {{\n{body}  return %26\n}}\n"
    );
    let m = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(layout_of(&m, "conv_layout=nhwc"), (vec![3, 3], 1));
    let x = Buffer::from_slice(&floats_vec(n * 3 * hw * hw, 3, 2.0), &[n, 3, hw, hw]).unwrap();
    let b = Buffer::from_slice(&floats_vec(c, 4, 1.0), &[c]).unwrap();
    agree(
        &m,
        &[x, b],
        &["jit:parallelism=1,conv_layout=nhwc", "jit:parallelism=2,conv_layout=nhwc", "jit:parallelism=1"],
    );
}

/// A 3×3 convolution and a depthwise one on `n` images of 32×32 with 8 channels (1024 pixels
/// per plane > 4 · 8: large planes).
fn large_planes(n: usize) -> Module {
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    body += &conv(1, 0, n, 8, 8, 3, 1, 1, 32);
    body += &bias_relu6(2, 1, n, 8, 32);
    body += &conv(3, 2, n, 8, 8, 3, 1, 8, 32);
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},8,32,32]) {{\n{body}  return %3\n}}\n");
    parse_module(&text).unwrap()
}

#[test]
fn large_planes_and_lone_convolutions_keep_their_layout() {
    // Two images: the small-planes rule keeps the large planes NCHW.
    let big = large_planes(2);
    assert_eq!(layout_of(&big, "conv_layout=small"), (vec![1, 1], 0));
    // auto and nhwc take them, with one transpose back to the NCHW result.
    assert_eq!(layout_of(&big, ""), (vec![3, 3], 1));
    assert_eq!(layout_of(&big, "conv_layout=nhwc"), (vec![3, 3], 1));
    let x = Buffer::from_slice(&floats_vec(2 * 8 * 32 * 32, 3, 1.0), &[2, 8, 32, 32]).unwrap();
    agree(&big, &[x], &["jit:parallelism=1", "jit:parallelism=2,conv_layout=nhwc", "jit:conv_layout=small"]);
    // One image: auto takes every convolution channels-last, as nhwc does; keep keeps them.
    let one = large_planes(1);
    assert_eq!(layout_of(&one, ""), (vec![3, 3], 1));
    assert_eq!(layout_of(&one, "conv_layout=keep"), (vec![1, 1], 0));
    let x = Buffer::from_slice(&floats_vec(8 * 32 * 32, 3, 1.0), &[1, 8, 32, 32]).unwrap();
    agree(&one, &[x], &["jit:parallelism=1", "jit:parallelism=2", "jit:parallelism=2,conv_layout=keep"]);

    // One convolution whose result is returned: nothing to gain, even with small planes.
    let text = format!(
        "module @t\nfunc @main(%0 \"x\": f32[2,32,4,4]) {{\n{}  return %1\n}}\n",
        conv(1, 0, 2, 32, 32, 3, 1, 1, 4)
    );
    let lone = parse_module(&text).unwrap();
    assert_eq!(layout_of(&lone, ""), (vec![1], 0));
}

/// A channels-first inverted-residual block on 32×32 planes (large: `conv_layout=small` keeps
/// it NCHW, `auto` makes it channels-last; each plane holds at least `chain::MIN_PIXELS` pixels) after a stem on 64×64,
/// then a stride-2 convolution down to 16×16 and two on those (planes below `MIN_PIXELS`, above
/// `MIN_SMALL_PIXELS`): stem 3→16 (s2) → 1×1 16→32 → depthwise 3×3 → 1×1 32→16 + residual (the
/// stem's result) → 3×3/2 16→16 → 1×1 16→64 (a 4 KB filter against 80 KB of activations per
/// image: it joins the chain) → 3×3 64→64 (a 147 KB filter, more as prepared, against 128 KB:
/// it does not). Returns the last
/// result's sum plus the depthwise result's (a value read after the chain).
fn chain_block(n: usize) -> Module {
    let mut body = inverted_residual(n, 32);
    body += &conv(9, 8, n, 16, 16, 3, 2, 1, 32);
    body += &conv(13, 9, n, 16, 64, 1, 1, 1, 16);
    body += &conv(15, 13, n, 64, 64, 3, 1, 1, 16);
    body += &format!("  %10 = reduce_sum %6, axes=[1,2,3] : f32[{n}]\n");
    body += &format!("  %11 = reduce_sum %15, axes=[1,2,3] : f32[{n}]\n  %12 = add %10, %11 : f32[{n}]\n");
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},3,64,64]) {{\n{body}  return %12\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The plan's line for the chain step, if there is one.
fn chain_of(m: &Module, config: &str) -> Option<String> {
    let plan = JitBackend::new(config).unwrap().compile_stages(m.clone()).unwrap().plan;
    plan.lines().find(|l| l.contains("conv chain")).map(str::to_string)
}

#[test]
fn large_plane_convolutions_run_image_by_image_and_agree_with_the_interpreter() {
    for n in [1, 2, 3, 4] {
        let m = chain_block(n);
        let x = Buffer::from_slice(&floats_vec(n * 3 * 64 * 64, n, 2.0), &[n, 3, 64, 64]).unwrap();
        agree(
            &m,
            &[x],
            &[
                "jit:parallelism=1",
                "jit:parallelism=2",
                "jit:parallelism=3",
                "jit:parallelism=2,conv_chains=off",
                "jit:parallelism=1,conv_layout=nhwc",
                "jit:parallelism=2,conv_layout=small",
            ],
        );
        // The five convolutions reading 32×32 planes or more and the 16×16 one with the small
        // filter are one step (their bias, ReLU6 and residual in their epilogues; not the last
        // one, whose filter outweighs its activations) on one thread, and on two when the batch
        // splits evenly.
        let one = chain_of(&m, "parallelism=1");
        let two = chain_of(&m, "parallelism=2");
        if n == 1 {
            assert_eq!((one, two), (None, None), "one image: nothing to split");
            continue;
        }
        let one = one.expect("a chain on one thread");
        assert!(one.contains("conv chain of 6 convolutions"), "{one}");
        assert_eq!(two.is_some(), n % 2 == 0, "batch {n} on two threads: {two:?}");
        // Three threads: only a batch of 3 splits evenly (and none holds 4 images per thread).
        assert_eq!(chain_of(&m, "parallelism=3").is_some(), n == 3);
        assert_eq!(chain_of(&m, "parallelism=1,conv_chains=off"), None);
        // Channels-last (every convolution NHWC): a chain as well; so with the large planes
        // channels-first.
        assert!(chain_of(&m, "parallelism=1,conv_layout=nhwc").is_some());
        assert!(chain_of(&m, "parallelism=1,conv_layout=small").is_some());
    }
}

#[test]
fn a_value_read_by_a_closure_stays_computed_channels_first() {
    // The block's inner results %4 (the 1×1's ReLU6) and %5 (the depthwise convolution) get
    // channels-last twins; closures of `if` read them by id from @main. The pass must keep
    // them computed in @main's body (or the closures would read values nothing computes).
    let n = 2;
    let body = inverted_residual(n, 8);
    let t32 = format!("f32[{n},32,8,8]");
    let text = format!(
        "module @t\nfunc @main(%0 \"x\": f32[{n},3,16,16], %50 \"p\": bool[]) {{\n{body}  \
         %51 = if %50, then_branch=@1, else_branch=@2 : {t32}\n  \
         %52 = reduce_sum %51, axes=[1,2,3] : f32[{n}]\n  %53 = reduce_sum %8, axes=[1,2,3] : f32[{n}]\n  \
         %54 = add %52, %53 : f32[{n}]\n  return %54\n}}\n\n\
         closure @1() parent=@main {{\n  %60 = neg %4 : {t32}\n  return %60\n}}\n\n\
         closure @2() parent=@main {{\n  return %5\n}}\n"
    );
    let m = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for p in [true, false] {
        let x = Buffer::from_slice(&floats_vec(n * 3 * 16 * 16, 9, 2.0), &[n, 3, 16, 16]).unwrap();
        let p = Buffer::from_slice(&[p], &[]).unwrap();
        agree(
            &m,
            &[x, p],
            &["jit:parallelism=1", "jit:parallelism=2", "jit:parallelism=1,conv_layout=nhwc", "jit:conv_layout=keep"],
        );
    }
    // The chain still goes channels-last; the depthwise convolution that closure @2 returns
    // stays computed channels-first as well (its twin feeds the chain).
    let (convs, _) = layout_of(&m, "conv_layout=nhwc");
    assert_eq!(convs, vec![3, 3, 3, 1, 3]);
}

/// Two inverted-residual blocks whose depthwise convolutions read 112×112 planes (expanded
/// images of 1.6 MB: `conv_blocks=auto` fuses them where that is more than a core's L2 cache,
/// `on` everywhere): the head's block with its residual (stride 1), then 1×1 16→32 → depthwise
/// 3×3/2 → 1×1 32→8 without one, down to 56×56.
fn band_blocks(n: usize) -> Module {
    let mut body = inverted_residual(n, 112);
    body += &conv(20, 8, n, 16, 32, 1, 1, 1, 112);
    body += &bias_relu6(21, 20, n, 32, 112);
    body += &conv(22, 21, n, 32, 32, 3, 2, 32, 112);
    body += &bias_relu6(23, 22, n, 32, 56);
    body += &conv(24, 23, n, 32, 8, 1, 1, 1, 56);
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},3,224,224]) {{\n{body}  return %24\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The plan's lines for block steps.
fn blocks_of(m: &Module, config: &str) -> Vec<String> {
    steps_of(m, config, "conv block")
}

/// The plan's lines for depthwise and projection pair steps.
fn pairs_of(m: &Module, config: &str) -> Vec<String> {
    steps_of(m, config, "conv pair")
}

/// The plan's lines that contain `what`.
fn steps_of(m: &Module, config: &str, what: &str) -> Vec<String> {
    let plan = JitBackend::new(config).unwrap().compile_stages(m.clone()).unwrap().plan;
    plan.lines().filter(|l| l.contains(what)).map(str::to_string).collect()
}

/// `m` on a `[n, 3, 224, 224]` batch (values from `seed`) agrees with the interpreter with the
/// blocks on in one thread (bands in order), two and three (an image's rows in parts when the
/// images do not split evenly), and in the `more` configurations.
fn agree_with_blocks(m: &Module, n: usize, seed: usize, more: &[&str]) {
    let x = Buffer::from_slice(&floats_vec(n * 3 * 224 * 224, seed, 2.0), &[n, 3, 224, 224]).unwrap();
    let mut configs = vec![
        "jit:parallelism=1,conv_blocks=on",
        "jit:parallelism=2,conv_blocks=on",
        "jit:parallelism=3,conv_blocks=on",
    ];
    configs.extend_from_slice(more);
    agree(m, &[x], &configs);
}

#[test]
fn inverted_residual_blocks_run_band_by_band_and_agree_with_the_interpreter() {
    for n in [1, 2, 3] {
        let m = band_blocks(n);
        // The blocks off, and channels-last blocks.
        agree_with_blocks(
            &m,
            n,
            n + 11,
            &[
                "jit:parallelism=2,conv_blocks=off",
                "jit:parallelism=1,conv_layout=nhwc,conv_blocks=on",
                "jit:parallelism=2,conv_layout=nhwc,conv_blocks=on",
            ],
        );
        for cfg in [
            "parallelism=1,conv_blocks=on",
            "parallelism=2,conv_blocks=on",
            "parallelism=2,conv_layout=nhwc,conv_blocks=on",
        ] {
            let blocks = blocks_of(&m, cfg);
            assert_eq!(blocks.len(), 2, "{cfg}, batch {n}: {blocks:?}");
            assert!(blocks[0].contains("residual") && blocks[1].contains("/[2, 2]"), "{blocks:?}");
        }
        assert!(blocks_of(&m, "parallelism=1,conv_blocks=off").is_empty());
    }
}

/// MobileNetV2's head: a stem `k`×`k`/2 3→32 on `[n, 3, 224, 224]` with bias and ReLU6, the
/// depthwise 3×3 over its 112×112 planes (1.6 MB an image) and a 1×1 32→16 projection.
fn stem_block(n: usize, k: usize) -> Module {
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    // 112 for the odd kernels; an empty kernel (k = 0, no padding) gives 113.
    let hw = (224 + 2 * (k / 2) - k) / 2 + 1;
    body += &conv(1, 0, n, 3, 32, k, 2, 1, 224);
    body += &bias_relu6(2, 1, n, 32, hw);
    body += &conv(3, 2, n, 32, 32, 3, 1, 32, hw);
    body += &bias_relu6(4, 3, n, 32, hw);
    body += &conv(5, 4, n, 32, 16, 1, 1, 1, hw);
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},3,224,224]) {{\n{body}  return %5\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn a_stem_heads_a_band_by_band_block() {
    // The stem computes, band by band, the rows of its result the depthwise window needs: from
    // the input rows under them, the padding above the first band (3×3/2 with padding 1, and a
    // 7×7/2 with padding 3 reaching further), in one thread and in row parts over two and three,
    // channels-first and channels-last (the model's own layout: the stem reads the channels-first
    // input and writes channels-last).
    for (n, k) in [(1, 3), (2, 7)] {
        let m = stem_block(n, k);
        agree_with_blocks(
            &m,
            n,
            n + 5,
            &["jit:parallelism=1,conv_layout=keep,conv_blocks=on", "jit:parallelism=2,conv_layout=nhwc,conv_blocks=on"],
        );
        for cfg in ["parallelism=1,conv_blocks=on", "parallelism=2,conv_layout=keep,conv_blocks=on"] {
            let blocks = blocks_of(&m, cfg);
            assert_eq!(blocks.len(), 1, "{cfg}: {blocks:?}");
            assert!(blocks[0].contains("stem direct"), "{blocks:?}");
        }
        assert!(blocks_of(&m, "parallelism=1,conv_blocks=off").is_empty());
    }
    // An empty first kernel (its sums are its bias alone) stays a step of its own.
    let m = stem_block(1, 0);
    assert!(blocks_of(&m, "parallelism=1,conv_blocks=on").is_empty());
    let x = Buffer::from_slice(&floats_vec(3 * 224 * 224, 6, 2.0), &[1, 3, 224, 224]).unwrap();
    agree(&m, &[x], &["jit:parallelism=1,conv_blocks=on", "jit:parallelism=2,conv_blocks=on"]);
}

/// A 3×3 convolution 16→16 on `[n, 16, hw, hw]` (which takes the chain channels-last under
/// `conv_layout=auto`), then one inverted-residual block: 1×1 16→`c6` → depthwise 3×3 → 1×1
/// `c6`→16, each with bias and ReLU6 but the last.
fn expansion_block(n: usize, hw: usize, c6: usize) -> Module {
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    body += &conv(6, 0, n, 16, 16, 3, 1, 1, hw);
    body += &conv(1, 6, n, 16, c6, 1, 1, 1, hw);
    body += &bias_relu6(2, 1, n, c6, hw);
    body += &conv(3, 2, n, c6, c6, 3, 1, c6, hw);
    body += &bias_relu6(4, 3, n, c6, hw);
    body += &conv(5, 4, n, c6, 16, 1, 1, 1, hw);
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},16,{hw},{hw}]) {{\n{body}  return %5\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn auto_blocks_are_those_whose_expanded_image_outgrows_the_l2_cache() {
    // 8×8 × 32 channels, 8 KiB per image (batch 4: still 8 KiB an image): smaller than any L2
    // cache; 112×112 × 192 channels, 9.6 MB: larger than any (per-core L2 caches are 0.25 to
    // 2 MiB on the CPUs tensorjit targets). Channels-first and channels-last alike.
    // (Nothing here executes the large block: its plan is all the test reads.)
    for layout in [",conv_layout=keep", ",conv_layout=nhwc"] {
        let small = expansion_block(4, 8, 32);
        assert!(blocks_of(&small, &format!("parallelism=1{layout}")).is_empty());
        assert_eq!(blocks_of(&small, &format!("parallelism=1,conv_blocks=on{layout}")).len(), 1);
        // Over a batch the depthwise convolution and projection stay steps; for one image they
        // run as a pair (not with the blocks off, nor where the whole block runs).
        assert!(pairs_of(&small, &format!("parallelism=1{layout}")).is_empty());
        let one = expansion_block(1, 8, 32);
        assert_eq!(pairs_of(&one, &format!("parallelism=1{layout}")).len(), 1, "{layout}");
        assert_eq!(pairs_of(&one, &format!("parallelism=2{layout}")).len(), 1, "{layout}");
        assert!(pairs_of(&one, &format!("parallelism=3{layout}")).is_empty(), "8 rows, 3 threads");
        assert!(pairs_of(&one, &format!("parallelism=1,conv_blocks=off{layout}")).is_empty());
        assert!(pairs_of(&one, &format!("parallelism=1,conv_blocks=on{layout}")).is_empty());
        let large = expansion_block(1, 112, 192);
        assert_eq!(blocks_of(&large, &format!("parallelism=1{layout}")).len(), 1, "{layout}");
        assert_eq!(blocks_of(&large, &format!("parallelism=1,conv_blocks=auto{layout}")).len(), 1);
        assert!(blocks_of(&large, &format!("parallelism=1,conv_blocks=off{layout}")).is_empty());
    }
    let small = expansion_block(4, 8, 32);
    let x = Buffer::from_slice(&floats_vec(4 * 16 * 8 * 8, 3, 2.0), &[4, 16, 8, 8]).unwrap();
    agree(&small, &[x], &["jit:parallelism=2,conv_blocks=on,conv_layout=keep", "jit:parallelism=1,conv_blocks=on"]);
    // The pairs, in either layout, on one thread and two (the image's rows in two parts).
    let one = expansion_block(1, 8, 32);
    let x = Buffer::from_slice(&floats_vec(16 * 8 * 8, 4, 2.0), &[1, 16, 8, 8]).unwrap();
    agree(
        &one,
        &[x],
        &[
            "jit:parallelism=1,conv_layout=keep",
            "jit:parallelism=1",
            "jit:parallelism=2,conv_layout=keep",
            "jit:parallelism=2",
        ],
    );
}

#[test]
fn a_block_intermediate_read_elsewhere_keeps_the_three_steps() {
    // The depthwise result (%6) is also returned: the block would have to write it.
    let n = 1;
    let body = inverted_residual(n, 112);
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},3,224,224]) {{\n{body}  return %8, %6\n}}\n");
    let m = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(blocks_of(&m, "parallelism=1,conv_blocks=on").is_empty());
    let x = Buffer::from_slice(&floats_vec(3 * 224 * 224, 4, 2.0), &[n, 3, 224, 224]).unwrap();
    agree(&m, &[x], &["jit:parallelism=2"]);
}

/// A channels-last model as a TensorFlow export writes it: `x` NHWC, `transpose(x, [0,3,1,2])`,
/// a depthwise 3×3 convolution with bias and ReLU6, a 1×1 one, `transpose(y, [0,2,3,1])`. With
/// `also_nchw`, the NCHW view of `x` and the last convolution's NCHW result are returned as well;
/// `lone`: the depthwise convolution (with its epilogue) alone between the transposes.
fn channels_last_model(also_nchw: bool, lone: bool) -> Module {
    let (n, c, hw) = (2, 16, 6);
    let mut body = String::from("  %9000 = constant 0.0 : f32[]\n  %9001 = constant 6.0 : f32[]\n");
    body += &format!("  %1 = transpose %0, perm=[0,3,1,2] : f32[{n},{c},{hw},{hw}]\n");
    body += &conv(2, 1, n, c, c, 3, 1, c, hw);
    body += &bias_relu6(3, 2, n, c, hw);
    // The value transposed back and its channels: the depthwise result alone, or the 1×1's.
    let (last, cout) = if lone { (3, c) } else { (4, 8) };
    if !lone {
        body += &conv(4, 3, n, c, 8, 1, 1, 1, hw);
    }
    body += &format!("  %5 = transpose %{last}, perm=[0,2,3,1] : f32[{n},{hw},{hw},{cout}]\n");
    let ret = if also_nchw { format!("%5, %1, %{last}") } else { "%5".to_string() };
    let text = format!("module @t\nfunc @main(%0 \"x\": f32[{n},{hw},{hw},{c}]) {{\n{body}  return {ret}\n}}\n");
    parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn transposes_around_convolutions_are_absorbed_into_channels_last_ones() {
    let x = Buffer::from_slice(&floats_vec(2 * 6 * 6 * 16, 13, 2.0), &[2, 6, 6, 16]).unwrap();
    let configs = ["jit:parallelism=1", "jit:parallelism=2", "jit:parallelism=1,conv_layout=keep"];
    // Both convolutions read and write the NHWC tensors: no transpose left.
    let m = channels_last_model(false, false);
    assert_eq!(layout_of(&m, ""), (vec![3, 3], 0));
    // One convolution alone: the same.
    let lone = channels_last_model(false, true);
    assert_eq!(layout_of(&lone, ""), (vec![3], 0));
    agree(&lone, std::slice::from_ref(&x), &configs);
    // keep: as written.
    assert_eq!(layout_of(&m, "conv_layout=keep"), (vec![1, 1], 2));
    agree(&m, std::slice::from_ref(&x), &configs);
    // NCHW readers too: the transpose to NCHW stays for the one returning it, and the 1×1's NCHW
    // result is made by one transpose back.
    let m = channels_last_model(true, false);
    assert_eq!(layout_of(&m, ""), (vec![3, 3], 2));
    let refs = [&x];
    let want = tensorjit::new_with_config("interp").unwrap().compile(m.clone()).unwrap().execute(&refs, &[]).unwrap();
    for cfg in configs {
        let got = tensorjit::new_with_config(cfg).unwrap().compile(m.clone()).unwrap().execute(&refs, &[]).unwrap();
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(w.shape(), g.shape(), "{cfg}: output {i}");
            let (w, g) = (w.to_vec::<f32>().unwrap(), g.to_vec::<f32>().unwrap());
            let scale = w.iter().fold(1f32, |m, v| m.max(v.abs()));
            for (a, b) in w.iter().zip(&g) {
                assert!((a - b).abs() <= 1e-4 * scale, "{cfg}: output {i}: interp {a}, jit {b}");
            }
        }
    }
}
