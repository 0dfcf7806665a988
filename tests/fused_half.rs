//! BF16 and F16 end to end through the fused ops (issue 24): the egg fusion pass fuses dense +
//! bias + GELU, layer norm and softmax written in a half type (their shape inference accepts
//! BF16/F16), and the "jit" backend runs them — fast fused kernels and the half GEMM, constant
//! weights pre-packed — computing in f32 and rounding once (§9). Expected values are f64 math
//! in this file on the same half inputs, rounded once; a result may be the neighbour of the
//! correctly rounded value (f32 compute error), no further. Odd sizes (not multiples of any
//! vector width) throughout; the whole file is rerun in child processes with AVX-512 disabled
//! (AVX2 kernels, bf16 → f32 conversion in packing) and with AVX2 disabled (portable code).
//!
//! Run with `cargo test --test fused_half` (add `--release` for speed).

use std::sync::Arc;

use half::{bf16, f16};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::op::{Activation, DenseLayout};
use tensorjit::ir::text::{parse_module, print_module};
use tensorjit::passes::egraph::{EggConfig, run};
use tensorjit::{Buffer, Executable};

#[path = "common/fused.rs"]
mod common;
use common::take_plans;

// ------------------------------------------------------------------------------------------------
// Half helpers.

/// Values of a half type as f64, and rounding from f64.
trait Half: Copy + tensorjit::Element {
    const NAME: &'static str;
    /// Mantissa bits after the point (bf16 7, f16 10).
    const FRAC_BITS: i32;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Half for bf16 {
    const NAME: &'static str = "bf16";
    const FRAC_BITS: i32 = 7;
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
}

impl Half for f16 {
    const NAME: &'static str = "f16";
    const FRAC_BITS: i32 = 10;
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
}

/// Deterministic values in [lo, hi), rounded to `H`.
fn values<H: Half>(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<H> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            H::from_f64(lo + (hi - lo) * u)
        })
        .collect()
}

/// Checks that every `got` is the once-rounded `want` (exact f64) or one of its neighbours:
/// within one unit in the last place of `H` at `|want|` (plus a tiny absolute slack for results
/// near zero, where the f32 compute error dominates).
fn assert_rounded_once<H: Half>(what: &str, got: &[H], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = g.to_f64();
        let ulp = if w == 0.0 { 0.0 } else { 2f64.powi(w.abs().log2().floor() as i32 - H::FRAC_BITS) };
        let ok = (g - w).abs() <= ulp + 1e-6 || (g.is_nan() && w.is_nan());
        assert!(ok, "{what} [{}]: element {i} = {g}, want {w} (ulp {ulp:.3e})", H::NAME);
        // Rounded once: at most one ulp, never off by more (double rounding through a half
        // intermediate would show as larger errors for the larger inputs).
    }
}

fn buffer<H: Half>(v: &[H], dims: &[usize]) -> Buffer {
    Buffer::from_slice(v, dims).expect("buffer")
}

fn jit() -> Arc<JitBackend> {
    JitBackend::new("parallelism=2").expect("jit backend")
}

/// Compiles IR text on the "jit" backend (its pipeline runs the fusion pass) and runs it.
fn run_text(text: &str, inputs: &[Buffer]) -> Vec<Buffer> {
    let m = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    let e = jit().compile_jit(m).expect("compile");
    let refs: Vec<&Buffer> = inputs.iter().collect();
    e.execute(&refs, &[]).expect("execute")
}

// ------------------------------------------------------------------------------------------------
// Unfused graphs, as exporters write them, in a dtype `T` (substituted below).

/// Dense + bias + exact GELU: `gelu(x·w + b)`; `w` a parameter, or a constant with the listed
/// values (`w_lit`).
fn dense_text(t: &str, m: usize, k: usize, n: usize) -> String {
    dense_text_w(t, m, k, n, None)
}

fn dense_text_w(t: &str, m: usize, k: usize, n: usize, w_lit: Option<&str>) -> String {
    let (params, w_def) = match w_lit {
        None => (format!("%0 \"x\": {t}[{m},{k}], %1 \"w\": {t}[{k},{n}], %2 \"b\": {t}[{n}]"), String::new()),
        Some(lit) => {
            (format!("%0 \"x\": {t}[{m},{k}], %2 \"b\": {t}[{n}]"), format!("  %1 = constant [{lit}] : {t}[{k},{n}]\n"))
        }
    };
    format!(
        "module @dense_bias_gelu

func @main({params}) {{
{w_def}  %3 = dot_general %0, %1, lhs_contracting=[1], lhs_batch=[], rhs_contracting=[0], rhs_batch=[] : {t}[{m},{n}]
  %4 = broadcast_in_dim %2, shape={t}[{m},{n}], axes=[1] : {t}[{m},{n}]
  %5 = add %3, %4 : {t}[{m},{n}]
  %6 = constant 0.70710677 : {t}[]
  %7 = mul %5, %6 : {t}[{m},{n}]
  %8 = erf %7 : {t}[{m},{n}]
  %9 = constant 1.0 : {t}[]
  %10 = add %9, %8 : {t}[{m},{n}]
  %11 = constant 0.5 : {t}[]
  %12 = mul %5, %11 : {t}[{m},{n}]
  %13 = mul %12, %10 : {t}[{m},{n}]
  return %13
}}
"
    )
}

/// The values of `w` as an IR constant literal.
fn literal<H: Half>(w: &[H]) -> String {
    w.iter().map(|v| format!("{:?}", v.to_f64())).collect::<Vec<_>>().join(", ")
}

/// Dense + bias without activation (`x·w + b`), to isolate the GEMM from GELU's constants.
fn dense_bias_text(t: &str, m: usize, k: usize, n: usize) -> String {
    format!(
        "module @dense_bias

func @main(%0 \"x\": {t}[{m},{k}], %1 \"w\": {t}[{k},{n}], %2 \"b\": {t}[{n}]) {{
  %3 = dot_general %0, %1, lhs_contracting=[1], lhs_batch=[], rhs_contracting=[0], rhs_batch=[] : {t}[{m},{n}]
  %4 = broadcast_in_dim %2, shape={t}[{m},{n}], axes=[1] : {t}[{m},{n}]
  %5 = add %3, %4 : {t}[{m},{n}]
  return %5
}}
"
    )
}

/// Max-subtracted softmax over the last axis of `[r, c]`.
fn softmax_text(t: &str, r: usize, c: usize) -> String {
    format!(
        "module @softmax

func @main(%0 \"x\": {t}[{r},{c}]) {{
  %1 = reduce_max %0, axes=[1] : {t}[{r}]
  %2 = broadcast_in_dim %1, shape={t}[{r},{c}], axes=[0] : {t}[{r},{c}]
  %3 = sub %0, %2 : {t}[{r},{c}]
  %4 = exp %3 : {t}[{r},{c}]
  %5 = reduce_sum %4, axes=[1] : {t}[{r}]
  %6 = broadcast_in_dim %5, shape={t}[{r},{c}], axes=[0] : {t}[{r},{c}]
  %7 = div %4, %6 : {t}[{r},{c}]
  return %7
}}
"
    )
}

/// Two-pass layer norm over the last axis of `[r, c]` with gamma and beta (mean = sum · 1/c,
/// with `c` a power of two so 1/c is exact in every float type).
fn layernorm_text(t: &str, r: usize, c: usize) -> String {
    let inv = 1.0 / c as f64;
    format!(
        "module @layernorm

func @main(%0 \"x\": {t}[{r},{c}], %1 \"gamma\": {t}[{c}], %2 \"beta\": {t}[{c}]) {{
  %3 = reduce_sum %0, axes=[1] : {t}[{r}]
  %4 = constant {inv:?} : {t}[]
  %5 = mul %3, %4 : {t}[{r}]
  %6 = broadcast_in_dim %5, shape={t}[{r},{c}], axes=[0] : {t}[{r},{c}]
  %7 = sub %0, %6 : {t}[{r},{c}]
  %8 = mul %7, %7 : {t}[{r},{c}]
  %9 = reduce_sum %8, axes=[1] : {t}[{r}]
  %10 = mul %9, %4 : {t}[{r}]
  %11 = constant 0.0625 : {t}[]
  %12 = add %10, %11 : {t}[{r}]
  %13 = rsqrt %12 : {t}[{r}]
  %14 = broadcast_in_dim %13, shape={t}[{r},{c}], axes=[0] : {t}[{r},{c}]
  %15 = mul %7, %14 : {t}[{r},{c}]
  %16 = broadcast_in_dim %1, shape={t}[{r},{c}], axes=[1] : {t}[{r},{c}]
  %17 = mul %15, %16 : {t}[{r},{c}]
  %18 = broadcast_in_dim %2, shape={t}[{r},{c}], axes=[1] : {t}[{r},{c}]
  %19 = add %17, %18 : {t}[{r},{c}]
  return %19
}}
"
    )
}

/// Runs the egg pass on `text` and returns the printed result.
fn fused(text: &str) -> String {
    let mut m = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}\n{text}"));
    run(&mut m, &EggConfig::default()).expect("egg pass");
    print_module(&m)
}

// ------------------------------------------------------------------------------------------------
// Fusion in half types.

#[test]
fn softmax_layernorm_dense_fuse_in_bf16_and_f16() {
    for t in ["bf16", "f16"] {
        let p = fused(&softmax_text(t, 5, 37));
        assert!(p.contains(&format!("= fused_softmax %0, axis=1 : {t}[5,37]")), "{t} softmax not fused:\n{p}");
        assert!(!p.contains("exp"), "{t}:\n{p}");
        let p = fused(&layernorm_text(t, 3, 64));
        assert!(p.contains("fused_layer_norm %0, %1, %2, axes=[1]"), "{t} layer norm not fused:\n{p}");
        assert!(p.contains("has_gamma=true, has_beta=true") && !p.contains("rsqrt"), "{t}:\n{p}");
        let p = fused(&dense_bias_text(t, 7, 33, 45));
        assert!(
            p.contains(&format!(
                "fused_dense %0, %1, %2, activation=none, layout=input_outputs, has_bias=true : {t}[7,45]"
            )),
            "{t} dense + bias not fused:\n{p}"
        );
    }
}

/// Dense + bias + GELU written with the constants an exporter uses (`1/√2` as 0.70710677, which a
/// bf16 or f16 constant holds as 0.70703125, 1.2e-4 off): the rules compare half-type constants
/// within one unit in the last place of their type, so GELU fuses into the dense in every type.
#[test]
fn dense_bias_gelu_fuses_in_bf16_and_f16() {
    for t in ["bf16", "f16", "f32"] {
        let p = fused(&dense_text(t, 7, 33, 45));
        assert!(
            p.contains(&format!(
                "fused_dense %0, %1, %2, activation=gelu, layout=input_outputs, has_bias=true : {t}[7,45]"
            )),
            "{t} dense + bias + gelu not fused:\n{p}"
        );
    }
}

// ------------------------------------------------------------------------------------------------
// Numerics on the "jit" backend against f64 math rounded once.

fn erf(x: f64) -> f64 {
    // Abramowitz–Stegun 7.1.26 is too coarse (1.5e-7 absolute is fine for half results, but use
    // the series / continued fraction for a clean f64 reference): series below 2.5, erfc
    // continued fraction above.
    let a = x.abs();
    let r = if a < 2.5 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        // erfc(a) = e^{-a²}/√π · 1/(a + 1/2/(a + 1/(a + 3/2/(a + …)))) (Lentz, backwards).
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f)
    };
    if x < 0.0 { -r } else { r }
}

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

fn gelu_tanh(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
}

/// `x·w + b` for the half inputs, in f64.
fn dense_f64<H: Half>(x: &[H], w: &[H], b: &[H], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut want = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|p| x[i * k + p].to_f64() * w[p * n + j].to_f64()).sum();
            want[i * n + j] = s + b[j].to_f64();
        }
    }
    want
}

/// FusedDense + bias + GELU built directly, `w` a parameter or a constant (pre-packed at compile
/// time), `[K, N]` or (`transposed`, layout OutputsInput) `[N, K]`.
fn check_dense_gelu<H: Half>(m: usize, k: usize, n: usize, constant_w: bool, transposed: bool) {
    let x = values::<H>(m * k, 1, -1.0, 1.0);
    let w = values::<H>(k * n, 2, -0.5, 0.5);
    let b = values::<H>(n, 3, -1.0, 1.0);
    // The [K, N] matrix of w (w itself, or the transpose of a [N, K] w).
    let wkn: Vec<H> = if transposed { (0..k * n).map(|i| w[(i % n) * k + i / n]).collect() } else { w.clone() };
    let want: Vec<f64> = dense_f64(&x, &wkn, &b, m, k, n).into_iter().map(gelu).collect();
    let (layout, wdims) =
        if transposed { (DenseLayout::OutputsInput, [n, k]) } else { (DenseLayout::InputOutputs, [k, n]) };
    let be = jit();
    let builder = tensorjit::Builder::new(be.clone(), "dense");
    let f = builder.main();
    let dt = <H as tensorjit::Element>::DTYPE;
    let shape = |d: &[usize]| tensorjit::Shape::new(dt, &d.iter().map(|&v| v as i64).collect::<Vec<_>>());
    let xp = f.parameter("x", shape(&[m, k])).expect("x");
    let wv = if constant_w { f.constant(&w, &wdims).expect("w") } else { f.parameter("w", shape(&wdims)).expect("w") };
    let bp = f.parameter("b", shape(&[n])).expect("b");
    let y = f.fused_dense(xp, wv, Some(bp), Activation::Gelu, layout).expect("dense");
    f.return_(&[y]).expect("return");
    let e = be.compile_jit(builder.module()).expect("compile");
    let mut inputs = vec![buffer(&x, &[m, k])];
    if !constant_w {
        inputs.push(buffer(&w, &wdims));
    }
    inputs.push(buffer(&b, &[n]));
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let got = e.execute(&refs, &[]).expect("execute")[0].to_vec::<H>().expect("output");
    let what = format!("dense+bias+gelu {m}x{k}x{n} constant w {constant_w} {layout:?}");
    assert_rounded_once(&what, &got, &want);
}

/// Dense + bias written unfused (DotGeneral, BroadcastInDim, Add): fused by the pipeline into one
/// FusedDense, so the sum is rounded once.
fn check_dense_text<H: Half>(m: usize, k: usize, n: usize) {
    let x = values::<H>(m * k, 1, -1.0, 1.0);
    let w = values::<H>(k * n, 2, -0.5, 0.5);
    let b = values::<H>(n, 3, -1.0, 1.0);
    let want = dense_f64(&x, &w, &b, m, k, n);
    let out =
        run_text(&dense_bias_text(H::NAME, m, k, n), &[buffer(&x, &[m, k]), buffer(&w, &[k, n]), buffer(&b, &[n])]);
    assert_rounded_once(&format!("dense+bias {m}x{k}x{n}"), &out[0].to_vec::<H>().expect("output"), &want);
}

#[test]
fn dense_bias_gelu_values() {
    for &(m, k, n) in &[(1, 3, 5), (7, 33, 45), (29, 130, 67), (130, 97, 70)] {
        for constant_w in [false, true] {
            for transposed in [false, true] {
                check_dense_gelu::<bf16>(m, k, n, constant_w, transposed);
                check_dense_gelu::<f16>(m, k, n, constant_w, transposed);
            }
        }
        check_dense_text::<bf16>(m, k, n);
        check_dense_text::<f16>(m, k, n);
    }
}

fn check_softmax<H: Half>(r: usize, c: usize) {
    let x = values::<H>(r * c, 4, -8.0, 8.0);
    let mut want = vec![0.0; r * c];
    for i in 0..r {
        let row: Vec<f64> = x[i * c..(i + 1) * c].iter().map(|v| v.to_f64()).collect();
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        for j in 0..c {
            want[i * c + j] = (row[j] - mx).exp() / sum;
        }
    }
    let out = run_text(&softmax_text(H::NAME, r, c), &[buffer(&x, &[r, c])]);
    assert_rounded_once(&format!("softmax {r}x{c}"), &out[0].to_vec::<H>().expect("output"), &want);
}

fn check_layernorm<H: Half>(r: usize, c: usize) {
    let x = values::<H>(r * c, 5, -3.0, 5.0);
    let g = values::<H>(c, 6, 0.5, 1.5);
    let bt = values::<H>(c, 7, -0.5, 0.5);
    let mut want = vec![0.0; r * c];
    for i in 0..r {
        let row: Vec<f64> = x[i * c..(i + 1) * c].iter().map(|v| v.to_f64()).collect();
        let mean = row.iter().sum::<f64>() / c as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / c as f64;
        for j in 0..c {
            want[i * c + j] = (row[j] - mean) / (var + 0.0625).sqrt() * g[j].to_f64() + bt[j].to_f64();
        }
    }
    let out = run_text(&layernorm_text(H::NAME, r, c), &[buffer(&x, &[r, c]), buffer(&g, &[c]), buffer(&bt, &[c])]);
    assert_rounded_once(&format!("layer norm {r}x{c}"), &out[0].to_vec::<H>().expect("output"), &want);
}

#[test]
fn softmax_and_layernorm_values() {
    for &(r, c) in &[(1, 1), (3, 7), (5, 37), (9, 129), (2, 1000)] {
        check_softmax::<bf16>(r, c);
        check_softmax::<f16>(r, c);
    }
    for &(r, c) in &[(1, 8), (3, 64), (7, 128), (2, 1024)] {
        check_layernorm::<bf16>(r, c);
        check_layernorm::<f16>(r, c);
    }
}

/// The fused ops built directly (FusedGelu both forms, FusedSoftmax over a leading axis,
/// FusedLayerNorm over a leading axis) on odd sizes.
fn check_direct<H: Half>() {
    let (r, c) = (13usize, 37usize);
    let x = values::<H>(r * c, 8, -6.0, 6.0);
    let b = jit();
    let builder = tensorjit::Builder::new(b.clone(), "direct");
    let f = builder.main();
    let dt = <H as tensorjit::Element>::DTYPE;
    let p = f.parameter("x", tensorjit::Shape::new(dt, &[r as i64, c as i64])).expect("x");
    let outs = vec![
        f.fused_gelu(p, true).expect("gelu"),
        f.fused_gelu(p, false).expect("gelu tanh"),
        f.fused_softmax(p, 0).expect("softmax axis 0"),
        f.fused_layer_norm(p, &[0], 1e-5, None, None).expect("ln axis 0"),
    ];
    f.return_(&outs).expect("return");
    let e = b.compile_jit(builder.module()).expect("compile");
    let xb = buffer(&x, &[r, c]);
    let got = e.execute(&[&xb], &[]).expect("execute");
    let xv: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let g: Vec<f64> = xv.iter().map(|&v| gelu(v)).collect();
    let gt: Vec<f64> = xv.iter().map(|&v| gelu_tanh(v)).collect();
    let (mut sm, mut ln) = (vec![0.0; r * c], vec![0.0; r * c]);
    for j in 0..c {
        let col: Vec<f64> = (0..r).map(|i| xv[i * c + j]).collect();
        let mx = col.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = col.iter().map(|v| (v - mx).exp()).sum();
        let mean = col.iter().sum::<f64>() / r as f64;
        let var = col.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / r as f64;
        for i in 0..r {
            sm[i * c + j] = (col[i] - mx).exp() / sum;
            ln[i * c + j] = (col[i] - mean) / (var + 1e-5).sqrt();
        }
    }
    for (i, (want, what)) in
        [(g, "gelu"), (gt, "gelu tanh"), (sm, "softmax axis 0"), (ln, "layer norm axis 0")].into_iter().enumerate()
    {
        assert_eq!(got[i].shape().dtype, dt);
        assert_rounded_once(what, &got[i].to_vec::<H>().expect("output"), &want);
    }
}

#[test]
fn direct_fused_ops_values() {
    check_direct::<bf16>();
    check_direct::<f16>();
}

/// The compiled plan runs the bf16 dense on the GEMM with the bias and GELU in its epilogue and
/// the constant weights pre-packed, and softmax on the fused kernel.
#[test]
fn plan_uses_half_gemm_and_fused_kernels() {
    let dir = std::env::temp_dir().join(format!("tensorjit-fused-half-{}", std::process::id()));
    let b = JitBackend::new(&format!("dump={}", dir.display())).expect("jit");
    let w = values::<bf16>(33 * 45, 2, -0.5, 0.5);
    let builder = tensorjit::Builder::new(b.clone(), "plan");
    let f = builder.main();
    let x = f.parameter("x", tensorjit::Shape::new(tensorjit::DType::BFloat16, &[7, 33])).expect("x");
    let bias = f.parameter("b", tensorjit::Shape::new(tensorjit::DType::BFloat16, &[45])).expect("b");
    let wc = f.constant(&w, &[33, 45]).expect("w");
    let y = f.fused_dense(x, wc, Some(bias), Activation::Gelu, DenseLayout::InputOutputs).expect("dense");
    f.return_(&[y]).expect("return");
    b.compile_jit(builder.module()).expect("compile");
    // The unfused text form fuses dense + bias + GELU (see `dense_bias_gelu_fuses_in_bf16_and_f16`).
    let text = dense_text_w("bf16", 7, 33, 45, Some(&literal(&w)));
    b.compile_jit(parse_module(&text).expect("parse")).expect("compile");
    let m = parse_module(&softmax_text("bf16", 5, 37)).expect("parse");
    b.compile_jit(m).expect("compile");
    let plan = take_plans(&dir);
    for want in [
        ("kernel FusedDense via gemm bfloat16 [7x33]·[33x45] +bias geluerf packed (", 2),
        ("fused softmax axis 1 BFloat16", 1),
    ] {
        assert_eq!(plan.matches(want.0).count(), want.1, "plan should have {want:?}:\n{plan}");
    }
}

/// Reruns this file's numeric tests with AVX-512 disabled (AVX2 kernels, half → f32 conversion
/// while packing) and with AVX2 disabled (portable code), each in a child process (the
/// choice is read once per process).
#[test]
fn forced_lower_isas_in_child_processes() {
    if std::env::var_os("TJ_FUSED_HALF_CHILD").is_some() {
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    for var in ["TENSORJIT_DISABLE_AVX512", "TENSORJIT_DISABLE_AVX2"] {
        for test in ["dense_bias_gelu_values", "softmax_and_layernorm_values", "direct_fused_ops_values"] {
            let out = std::process::Command::new(&exe)
                .args(["--exact", test, "--test-threads=1"])
                .env(var, "1")
                .env("TJ_FUSED_HALF_CHILD", "1")
                .output()
                .expect("run child");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "child {test} with {var}=1 failed:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
