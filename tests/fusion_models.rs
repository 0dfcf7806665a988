//! Fusion on real exporter output: the toy-sized BERT, GPT-2 and ViT exports of
//! tests/data/fusion (both torch exporters) must come out of the jit pipeline with every dense
//! layer fused with its bias (and GELU where the catalogue's Gelu activation applies), the Q, K
//! and V projections merged into one, every LayerNorm fused with its gamma and beta, every
//! softmax fused (alone or inside attention), and nothing of those decompositions left over;
//! its plan must run every tanh GELU in a GEMM epilogue, every residual add inside its LayerNorm
//! and every attention on q, k, v read in place; and the fused module must compute what the
//! interpreter computes from the unfused import. A bf16 export of the BERT one must fuse alike.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::module::Module;
use tensorjit::ir::op::{Activation, Op, ReduceKind, UnaryOp};
use tensorjit::onnx::{ImportOptions, load_with};
use tensorjit::{Buffer, DType};

const BATCH: usize = 2;
const SEQ: usize = 16;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/fusion").join(format!("{name}.onnx"))
}

/// The model's inputs with fixed dims: text models `[BATCH, SEQ]`, ViT `[BATCH, 3, 32, 32]`.
fn import(name: &str) -> Module {
    let mut opts = ImportOptions::default();
    for (input, dims) in inputs_of(name) {
        opts.input_dims.insert(input.into(), dims.iter().map(|&d| d as i64).collect());
    }
    load_with(fixture(name), &opts).unwrap_or_else(|e| panic!("{name}: {e}")).module
}

fn inputs_of(name: &str) -> Vec<(&'static str, Vec<usize>)> {
    if name.starts_with("vit") {
        vec![("pixel_values", vec![BATCH, 3, 32, 32])]
    } else if name.starts_with("gpt2") {
        vec![("input_ids", vec![BATCH, SEQ]), ("attention_mask", vec![BATCH, SEQ])]
    } else {
        vec![
            ("input_ids", vec![BATCH, SEQ]),
            ("attention_mask", vec![BATCH, SEQ]),
            ("token_type_ids", vec![BATCH, SEQ]),
        ]
    }
}

/// Deterministic inputs: token ids below the toy vocabulary (128), the last sequence padded
/// after three quarters, token types 0, pixels in [-1, 1).
fn input_buffers(name: &str) -> Vec<Buffer> {
    let mut state = 0x9e37_79b9_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    inputs_of(name)
        .into_iter()
        .map(|(input, dims)| {
            let n: usize = dims.iter().product();
            match input {
                "pixel_values" => {
                    let v: Vec<f32> = (0..n).map(|_| (next() % 2000) as f32 / 1000.0 - 1.0).collect();
                    Buffer::from_slice(&v, &dims).unwrap()
                }
                "input_ids" => {
                    let v: Vec<i64> = (0..n).map(|_| i64::from(next() % 128)).collect();
                    Buffer::from_slice(&v, &dims).unwrap()
                }
                "attention_mask" => {
                    let v: Vec<i64> =
                        (0..n).map(|i| i64::from(!(i / SEQ == BATCH - 1 && i % SEQ >= SEQ * 3 / 4))).collect();
                    Buffer::from_slice(&v, &dims).unwrap()
                }
                _ => Buffer::from_slice(&vec![0i64; n], &dims).unwrap(),
            }
        })
        .collect()
}

/// What the optimised module is made of.
#[derive(Default, Debug)]
struct Census {
    ops: BTreeMap<String, usize>,
    dense_with_bias: usize,
    dense_gelu: usize,
    norms_with_gamma_beta: usize,
    /// Reductions, square roots, erf/exp/tanh and plain matmuls (no batch axes) left over.
    leftovers: Vec<String>,
}

fn census(m: &Module) -> Census {
    let mut c = Census::default();
    for n in &m.func(m.main).body {
        let op = &m.node(*n).op;
        *c.ops.entry(op.op_type().name().to_string()).or_default() += 1;
        match op {
            Op::FusedDense { activation, has_bias, .. } => {
                c.dense_with_bias += usize::from(*has_bias);
                c.dense_gelu += usize::from(*activation == Activation::Gelu);
            }
            Op::FusedLayerNorm { has_gamma: true, has_beta: true, .. } => c.norms_with_gamma_beta += 1,
            Op::Reduce { kind: ReduceKind::Sum | ReduceKind::Max, .. }
            | Op::Unary(UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Erf | UnaryOp::Exp | UnaryOp::Tanh) => {
                c.leftovers.push(format!("{op:?}"));
            }
            Op::DotGeneral { lhs_batch, .. } if lhs_batch.is_empty() => c.leftovers.push(format!("{op:?}")),
            _ => {}
        }
    }
    c
}

fn count(c: &Census, name: &str) -> usize {
    c.ops.get(name).copied().unwrap_or(0)
}

/// What the fused module's plan merges below the IR (jit `merge`), counted in its listing.
#[derive(Debug, PartialEq)]
struct Merged {
    /// GEMM steps with the tanh GELU in their epilogue.
    gelu_in_epilogue: usize,
    /// GELU steps left.
    gelu_steps: usize,
    /// LayerNorm steps adding their residual themselves.
    norms_with_residual: usize,
    /// Attention steps reading q, k, v in place from one projection.
    attention_in_place: usize,
}

fn merged(plan: &str) -> Merged {
    let lines = |what: &str| plan.lines().filter(|l| l.contains(what)).count();
    Merged {
        gelu_in_epilogue: lines("gelutanh"),
        gelu_steps: lines("kernel fused_gelu"),
        norms_with_residual: lines("of a residual add"),
        attention_in_place: lines("reading q/k/v in place"),
    }
}

/// Fuses `name` and checks the census: `dense` dense layers all with bias, `gelu_in_dense` of
/// them with the GELU activation, `norms` layer norms with gamma and beta, `softmaxes`
/// softmaxes (alone or inside attention), `gelu_alone` stand-alone FusedGelu ops; and the plan:
/// every stand-alone (tanh) GELU in its dense's GEMM epilogue, every LayerNorm adding its
/// residual itself (no add step before it), every attention reading q, k, v in place.
fn check(name: &str, dense: usize, gelu_in_dense: usize, gelu_alone: usize, norms: usize, softmaxes: usize) {
    let stages = JitBackend::new("").unwrap().compile_stages(import(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let c = census(&stages.optimized);
    let ctx = format!("{name}: {c:?}");
    let want = Merged {
        gelu_in_epilogue: gelu_alone,
        gelu_steps: 0,
        norms_with_residual: norms,
        attention_in_place: softmaxes,
    };
    assert_eq!(merged(&stages.plan), want, "{name}: plan\n{}", stages.plan);
    assert_eq!(count(&c, "fused_dense"), dense, "{ctx}");
    assert_eq!(c.dense_with_bias, dense, "{ctx}");
    assert_eq!(c.dense_gelu, gelu_in_dense, "{ctx}");
    assert_eq!(count(&c, "fused_gelu"), gelu_alone, "{ctx}");
    assert_eq!(count(&c, "fused_layer_norm"), norms, "{ctx}");
    assert_eq!(c.norms_with_gamma_beta, norms, "{ctx}");
    assert_eq!(count(&c, "fused_softmax") + count(&c, "fused_scaled_dot_product_attention"), softmaxes, "{ctx}");
    assert!(c.leftovers.is_empty(), "{ctx}");
}

/// The jit (fused) and the interpreter (the import as it is) agree on the model's output: to
/// 1e-5 of its scale in f32; in bf16 (where the fused ops round once and the import's op chain
/// after each op) to 3e-2 of its scale, a few bf16 steps, with a cosine of at least 0.9995.
fn agree(name: &str) {
    let inputs = input_buffers(name);
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let mut outs = vec![];
    let mut dtype = None;
    for backend in ["interp", "jit"] {
        let exe = tensorjit::new_with_config(backend).unwrap().compile(import(name)).unwrap();
        let got = exe.execute(&refs, &[]).unwrap_or_else(|e| panic!("{name} on {backend}: {e}"));
        dtype = Some(got[0].dtype());
        outs.push(match got[0].dtype() {
            DType::Float32 => got[0].to_vec::<f32>().unwrap(),
            DType::BFloat16 => got[0].to_vec::<half::bf16>().unwrap().iter().map(|x| x.to_f32()).collect(),
            d => panic!("{name} on {backend}: output dtype {d}"),
        });
    }
    let half = dtype == Some(DType::BFloat16);
    let scale = outs[0].iter().fold(0f32, |m, v| m.max(v.abs()));
    assert!(scale > 0.0, "{name}: all-zero output");
    let tol = if half { 3e-2 } else { 1e-5 };
    for (i, (a, b)) in outs[0].iter().zip(&outs[1]).enumerate() {
        assert!((a - b).abs() <= tol * scale, "{name} element {i}: interp {a}, jit {b} (scale {scale})");
    }
    if half {
        let dot: f64 = outs[0].iter().zip(&outs[1]).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cos = dot / (norm(&outs[0]) * norm(&outs[1]));
        assert!(cos >= 0.9995, "{name}: cosine {cos}");
    }
}

// Per layer: BERT and ViT have Q, K, V (merged into one dense over the concatenated weights),
// output, FFN-in (+ GELU), FFN-out; GPT-2 one QKV projection (Conv1D, exported as Gemm), the
// output projection and two FFN layers, with the tanh GELU, which the catalogue's Gelu
// activation (erf form) is not, so it stays a FusedGelu in the module (and runs in its dense's
// GEMM epilogue in the plan). LayerNorms: BERT 2 per layer + the embeddings', GPT-2 and ViT 2 per
// layer + the final one; each adds its residual (or the embeddings' sum) itself in the plan.

macro_rules! fixtures {
    ($($test:ident: $name:literal => $counts:expr;)*) => {
        $(
            #[test]
            fn $test() {
                let (dense, gelu_in_dense, gelu_alone, norms, softmaxes) = $counts;
                check($name, dense, gelu_in_dense, gelu_alone, norms, softmaxes);
                agree($name);
            }
        )*
    };
}

// (dense, of them with GELU, stand-alone GELU, layer norms, softmaxes)
fixtures! {
    bert_torchscript_fuses: "bert-torchscript" => (8, 2, 0, 5, 2);
    bert_dynamo_fuses: "bert-dynamo" => (8, 2, 0, 5, 2);
    gpt2_torchscript_fuses: "gpt2-torchscript" => (8, 0, 2, 5, 2);
    gpt2_dynamo_fuses: "gpt2-dynamo" => (8, 0, 2, 5, 2);
    vit_torchscript_fuses: "vit-torchscript" => (8, 2, 0, 5, 2);
    vit_dynamo_fuses: "vit-dynamo" => (8, 2, 0, 5, 2);
    // `model.to(torch.bfloat16)`: the LayerNormalization of bf16 normalises in f32 and casts
    // back before its scale and bias; it still fuses whole, with its residual add.
    bert_torchscript_bf16_fuses: "bert-torchscript-bf16" => (8, 2, 0, 5, 2);
}
