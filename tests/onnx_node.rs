//! The ONNX backend node tests (vendored in tests/data/onnx-node) on both backends: every case
//! imports, compiles and matches its expected outputs within the case's own tolerance, except
//! the cases listed with a reason in tests/onnx_node_skips.txt.
//!
//! A graph input that the importer needs as a constant (axes, sizes, pads… given as inputs) is
//! frozen to the case's test data with `ImportOptions::constant_inputs`, but only when the
//! import error names it (`onnx::inputs_to_freeze`); every other input stays a runtime input.
//!
//! `TENSORJIT_ONNX_NODE_FILTER=substr` runs the matching cases only (the skip list is then not
//! checked for completeness); `TENSORJIT_ONNX_NODE_BLESS=1` rewrites the skip list from the
//! failures; `TENSORJIT_ONNX_NODE_REPORT=path` writes the pass counts per operator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use tensorjit::ir::dtype::DType;
use tensorjit::onnx::{ImportOptions, OnnxModel};
use tensorjit::{Backend, Buffer};

const DATA: &str = "tests/data/onnx-node";
const SKIPS: &str = "tests/onnx_node_skips.txt";

/// `assert_allclose` semantics: |a − e| ≤ atol + rtol·|e|, NaN matches NaN, infinities match
/// exactly; integers and booleans compare exactly.
fn compare(got: &Buffer, want: &Buffer, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {} (expected {})", got.dtype(), want.dtype()));
    }
    if got.dims() != want.dims() {
        return Err(format!("dims {:?} (expected {:?})", got.dims(), want.dims()));
    }
    let as_f64 = |b: &Buffer| -> Option<Vec<f64>> {
        Some(match b.dtype() {
            DType::Float32 => b.to_vec::<f32>().ok()?.into_iter().map(f64::from).collect(),
            DType::Float64 => b.to_vec::<f64>().ok()?,
            DType::Float16 => b.to_vec::<half::f16>().ok()?.into_iter().map(f64::from).collect(),
            DType::BFloat16 => b.to_vec::<half::bf16>().ok()?.into_iter().map(f64::from).collect(),
            _ => return None,
        })
    };
    match (as_f64(got), as_f64(want)) {
        (Some(g), Some(w)) => {
            for (i, (&a, &e)) in g.iter().zip(&w).enumerate() {
                let ok = if e.is_nan() {
                    a.is_nan()
                } else if e.is_infinite() {
                    a == e
                } else {
                    (a - e).abs() <= atol + rtol * e.abs()
                };
                if !ok {
                    return Err(format!("element {i}: {a} (expected {e}, rtol {rtol}, atol {atol})"));
                }
            }
            Ok(())
        }
        _ => {
            let (g, w) = (got.to_bytes().map_err(|e| e.to_string())?, want.to_bytes().map_err(|e| e.to_string())?);
            if g != w {
                let size = got.dtype().size().max(1);
                let i = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0) / size;
                return Err(format!("element {i} differs ({} bytes each)", size));
            }
            Ok(())
        }
    }
}

fn read_pb(p: &Path) -> Result<Buffer, String> {
    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    tensorjit::onnx::read_tensor_proto(&bytes).map(|(_, b)| b).map_err(|e| format!("{}: {e}", p.display()))
}

/// Imports a case's model, freezing the graph inputs that the importer needs as constants:
/// when the import fails because an operand computed from graph inputs must be known at import
/// (`onnx::inputs_to_freeze` reads their names from the error), those inputs get this data
/// set's values through `ImportOptions::constant_inputs` and the import is retried. Inputs the
/// importer does not ask for stay runtime inputs.
fn import_case(bytes: &[u8], dir: &Path, names: &[String], inputs: &[Buffer]) -> Result<OnnxModel, String> {
    let mut opts = ImportOptions::default();
    loop {
        let err = match tensorjit::onnx::load_bytes_with(bytes, Some(dir), &opts) {
            Ok(model) => return Ok(model),
            Err(e) => e,
        };
        let wanted: Vec<String> = tensorjit::onnx::inputs_to_freeze(&err)
            .into_iter()
            .filter(|name| !opts.constant_inputs.contains_key(name))
            .collect();
        if wanted.is_empty() {
            return Err(err.to_string());
        }
        for name in wanted {
            let value = names
                .iter()
                .position(|n| *n == name)
                .and_then(|k| inputs.get(k))
                .ok_or_else(|| format!("{err} (no test data for graph input {name:?} to freeze it)"))?;
            opts.constant_inputs.insert(name, value.clone());
        }
    }
}

/// Runs one case on one backend: the graph inputs it froze at import, or the reason it failed.
fn run_case(dir: &Path, backend: &Arc<dyn Backend>, rtol: f64, atol: f64) -> Result<Vec<String>, String> {
    let bytes = std::fs::read(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    // The graph's inputs (initializers excluded), in the order of the input_K.pb files.
    let names: Vec<String> =
        tensorjit::onnx::info_bytes(&bytes).map_err(|e| e.to_string())?.inputs.into_iter().map(|(n, _)| n).collect();
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    sets.sort();
    if sets.is_empty() {
        return Err("no test data set".to_string());
    }
    let mut frozen = Vec::new();
    // The executable of a model imported without frozen inputs serves every data set.
    let mut shared: Option<(Vec<String>, Arc<dyn tensorjit::Executable>)> = None;
    for set in sets {
        let mut inputs = Vec::new();
        let mut outputs = Vec::new();
        for k in 0.. {
            let p = set.join(format!("input_{k}.pb"));
            if !p.exists() {
                break;
            }
            inputs.push(read_pb(&p)?);
        }
        for k in 0.. {
            let p = set.join(format!("output_{k}.pb"));
            if !p.exists() {
                break;
            }
            outputs.push(read_pb(&p)?);
        }
        let (runtime, exe) = match &shared {
            Some((r, e)) => (r.clone(), e.clone()),
            None => {
                let model = import_case(&bytes, dir, &names, &inputs)?;
                let runtime: Vec<String> = model.inputs.iter().map(|t| t.name.clone()).collect();
                let exe = backend.compile(model.module).map_err(|e| format!("compile: {e}"))?;
                if runtime.len() == names.len() {
                    shared = Some((runtime.clone(), exe.clone()));
                }
                (runtime, exe)
            }
        };
        let mut refs: Vec<&Buffer> = Vec::new();
        for name in &runtime {
            let k = names.iter().position(|n| n == name).ok_or_else(|| format!("unknown input {name:?}"))?;
            refs.push(inputs.get(k).ok_or_else(|| format!("no test data for input {name:?}"))?);
        }
        for name in names.iter().filter(|n| !runtime.contains(n)) {
            if !frozen.contains(name) {
                frozen.push(name.clone());
            }
        }
        let got = exe.execute(&refs, &[]).map_err(|e| format!("execute: {e}"))?;
        if got.len() != outputs.len() {
            return Err(format!("{} outputs (expected {})", got.len(), outputs.len()));
        }
        for (k, (g, w)) in got.iter().zip(&outputs).enumerate() {
            compare(g, w, rtol, atol).map_err(|e| format!("output {k}: {e}"))?;
        }
    }
    Ok(frozen)
}

/// The operator a case tests: the op of its non-expanded model's last node.
fn operator_of(dir: &Path) -> String {
    let name = dir.file_name().unwrap().to_string_lossy().to_string();
    let base = match name.find("_expanded") {
        Some(i) => dir.with_file_name(&name[..i]),
        None => dir.to_path_buf(),
    };
    std::fs::read(base.join("model.onnx"))
        .ok()
        .and_then(|b| tensorjit::onnx::info_bytes(&b).ok())
        .and_then(|i| i.last_op)
        .unwrap_or_else(|| "?".to_string())
}

#[test]
fn onnx_node_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join(DATA);
    let tolerances: BTreeMap<String, (f64, f64)> = std::fs::read_to_string(data.join("tolerances.txt"))
        .expect("tolerances.txt")
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), (it.next()?.parse().ok()?, it.next()?.parse().ok()?)))
        })
        .collect();
    let filter = std::env::var("TENSORJIT_ONNX_NODE_FILTER").ok();
    let skips_text = std::fs::read_to_string(root.join(SKIPS)).unwrap_or_default();
    let skips: BTreeMap<String, String> = skips_text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once(": ").map(|(a, b)| (a.trim().to_string(), b.to_string())))
        .collect();
    let backends: Vec<(&str, Arc<dyn Backend>)> =
        ["interp", "jit"].iter().map(|n| (*n, tensorjit::new_with_config(n).expect("backend"))).collect();
    let cases: Vec<(&String, &(f64, f64))> =
        tolerances.iter().filter(|(name, _)| filter.as_deref().is_none_or(|f| name.contains(f))).collect();
    // (case, operator, first failure "backend: reason" or None, graph inputs frozen at import)
    let results: Vec<(String, String, Option<String>, Vec<String>)> = cases
        .par_iter()
        .map(|&(name, &(rtol, atol))| {
            let dir = data.join(name);
            let mut failure = None;
            let mut frozen = Vec::new();
            if dir.join("unwritable.txt").exists() {
                failure = Some("test data not representable as tensors (sequence or optional values)".to_string());
            } else {
                for (bname, b) in &backends {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_case(&dir, b, rtol, atol)))
                        .unwrap_or_else(|_| Err("PANIC".to_string()));
                    match r {
                        Ok(f) => frozen = f,
                        Err(e) => {
                            let e = e.replace('\n', " ");
                            failure = Some(format!("{bname}: {e}"));
                            break;
                        }
                    }
                }
            }
            (name.to_string(), operator_of(&dir), failure, frozen)
        })
        .collect();

    // operator → (passed, cases, passed with graph inputs frozen at import)
    let mut per_op: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
    for (_, op, f, frozen) in &results {
        let e = per_op.entry(op.clone()).or_default();
        e.1 += 1;
        if f.is_none() {
            e.0 += 1;
            e.2 += usize::from(!frozen.is_empty());
        }
    }
    let passed = results.iter().filter(|r| r.2.is_none()).count();
    let with_frozen = results.iter().filter(|r| r.2.is_none() && !r.3.is_empty()).count();
    let mut report = format!(
        "# ONNX node tests: {passed} of {} cases pass on interp and jit ({with_frozen} of them with graph inputs \
         frozen at import)\n\n",
        results.len()
    );
    report.push_str("| operator | passed | cases | passed with frozen inputs |\n|---|---|---|---|\n");
    for (op, (p, n, fz)) in &per_op {
        report.push_str(&format!("| {op} | {p} | {n} | {fz} |\n"));
    }
    eprintln!("{report}");
    if let Ok(path) = std::env::var("TENSORJIT_ONNX_NODE_REPORT") {
        std::fs::write(path, &report).expect("write the report");
    }

    let panics: Vec<&String> =
        results.iter().filter(|r| r.2.as_deref().is_some_and(|f| f.contains("PANIC"))).map(|r| &r.0).collect();
    assert!(panics.is_empty(), "cases that panicked (bad input must be an Err): {panics:?}");

    if std::env::var("TENSORJIT_ONNX_NODE_BLESS").is_ok_and(|v| v == "1") {
        let mut out = String::from(
            "# ONNX node test cases not run by tests/onnx_node.rs, with the reason (the first backend's error).\n\
             # Regenerate: TENSORJIT_ONNX_NODE_BLESS=1 cargo test --test onnx_node\n",
        );
        let mut all: BTreeMap<String, String> = if filter.is_some() { skips.clone() } else { BTreeMap::new() };
        for (name, _, f, _) in &results {
            match f {
                Some(reason) => {
                    all.insert(name.clone(), reason.clone());
                }
                None => {
                    all.remove(name);
                }
            }
        }
        for (name, reason) in &all {
            let mut reason = reason.clone();
            reason.truncate(300);
            out.push_str(&format!("{name}: {reason}\n"));
        }
        std::fs::write(root.join(SKIPS), out).expect("write the skip list");
        return;
    }

    let unexpected: Vec<String> = results
        .iter()
        .filter(|(name, _, f, _)| f.is_some() && !skips.contains_key(name))
        .map(|(name, _, f, _)| format!("{name}: {}", f.as_deref().unwrap_or("")))
        .collect();
    let stale: Vec<&String> =
        results.iter().filter(|(name, _, f, _)| f.is_none() && skips.contains_key(name)).map(|r| &r.0).collect();
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "{} failing case(s) not in {SKIPS}:\n{}\n{} case(s) in {SKIPS} now pass (remove them): {stale:?}",
        unexpected.len(),
        unexpected.join("\n"),
        stale.len()
    );
}
