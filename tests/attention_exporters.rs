//! The exporters' BERT attention (filetests `attention_bert_torchscript` and
//! `attention_bert_dynamo` in tests/filetests/egraph) run unfused on "interp", fused by the egg
//! pass on "interp" (the reference kernel) and through the whole "jit" pipeline (the flash
//! kernel), with a padding mask whose second batch masks every key: the fused forms must give
//! what the unfused graph gives, the fully masked rows included (uniform weights over the keys,
//! as `softmax` of equal `finfo.min` scores, not 0 or NaN).
//!
//! `cargo test --test attention_exporters`.

use std::path::Path;
use std::sync::Arc;

use tensorjit::ir::Module;
use tensorjit::ir::text::parse_module;
use tensorjit::passes::egraph::{EggConfig, run};
use tensorjit::{Backend, Buffer};

fn load(name: &str) -> Module {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/filetests/egraph/{name}.tjir"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn backend(config: &str) -> Arc<dyn Backend> {
    tensorjit::new_with_config(config).expect("backend")
}

fn exec(b: &Arc<dyn Backend>, m: Module, inputs: &[&Buffer]) -> Vec<f32> {
    let out = b.compile(m).expect("compile").execute(inputs, &[]).expect("execute");
    out[0].to_vec::<f32>().expect("f32")
}

/// `[B=2, S=4, H·D=8]` projections (deterministic values in [−2, 2)).
fn projections() -> [Buffer; 3] {
    let v = |seed: usize| -> Buffer {
        let d: Vec<f32> = (0..64).map(|i| (((i + 17 * seed) * 7919 % 4001) as f32) / 1000.0 - 2.0).collect();
        Buffer::from_slice(&d, &[2, 4, 8]).expect("buffer")
    };
    [v(1), v(2), v(3)]
}

/// Key j of batch b attended: batch 0 keeps keys 0 and 1 (trailing padding), batch 1 none.
const KEEP: [[bool; 4]; 2] = [[true, true, false, false], [false, false, false, false]];

/// Checks the fused outputs against the unfused one, and the fully masked batch 1 by hand:
/// every row of a head is the mean of that head's four value rows.
fn check(name: &str, mask: Buffer) {
    let before = load(name);
    let mut after = before.clone();
    let report = run(&mut after, &EggConfig::default()).expect("egg");
    assert!(report.fired("sdpa") > 0, "{name}: attention not fused\n{report}");
    let [q, k, v] = projections();
    let inputs = [&q, &k, &v, &mask];
    let interp = backend("interp");
    let want = exec(&interp, before.clone(), &inputs);
    let fused_ref = exec(&interp, after, &inputs);
    let jit = exec(&backend("jit"), before, &inputs);
    for (what, got) in [("fused (reference kernel)", &fused_ref), ("jit (flash kernel)", &jit)] {
        for (i, (&a, &b)) in want.iter().zip(got.iter()).enumerate() {
            assert!((a - b).abs() <= 1e-5 * a.abs().max(1.0), "{name}: {what}[{i}]: unfused {a}, fused {b}");
        }
    }
    let vv = v.to_vec::<f32>().expect("f32");
    for s in 0..4 {
        for c in 0..8 {
            // Batch 1, head c / 4, column c % 4: the mean over the keys j.
            let mean = (0..4).map(|j| vv[32 + j * 8 + c]).sum::<f32>() / 4.0;
            let got = want[32 + s * 8 + c];
            assert!((got - mean).abs() <= 1e-6, "{name}: unfused fully masked row {s}[{c}] = {got}, mean {mean}");
        }
    }
}

#[test]
fn torchscript_form_fused_matches_unfused_with_a_fully_masked_batch() {
    let keep: Vec<bool> = KEEP.iter().flatten().copied().collect();
    check("attention_bert_torchscript", Buffer::from_slice(&keep, &[2, 1, 1, 4]).expect("mask"));
}

#[test]
fn dynamo_form_fused_matches_unfused_with_a_fully_masked_batch() {
    let mask: Vec<i64> = KEEP.iter().flatten().map(|&t| i64::from(t)).collect();
    check("attention_bert_dynamo", Buffer::from_slice(&mask, &[2, 4]).expect("mask"));
}
