//! Tests of the `tensorjit` command on ONNX models (`run`, `import`, `info`, and `fmt`/`dump`
//! with a safetensors constants file): the models are built here from the public prost types
//! and encoded, using operators the importer maps (Add, Sub, Mul, Relu, Identity).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;
use prost::Message;
use tensorjit::onnx::proto::tensor_shape_proto::{Dimension, dimension};
use tensorjit::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    type_proto,
};

const FLOAT: i32 = 1;
const N: usize = 32;

/// A fresh, empty scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorjit_cli_onnx_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

enum D {
    Fixed(i64),
    Param(&'static str),
}

fn value_info(name: &str, dims: &[D]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                D::Fixed(v) => dimension::Value::DimValue(*v),
                D::Param(p) => dimension::Value::DimParam(p.to_string()),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(FLOAT),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_{}", outputs[0])),
        ..Default::default()
    }
}

fn initializer(name: &str, data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![data.len() as i64],
        data_type: Some(FLOAT),
        raw_data: Some(data.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

fn scale() -> Vec<f32> {
    (0..N).map(|i| 0.5 + i as f32 * 0.25).collect()
}

fn bias() -> Vec<f32> {
    (0..N).map(|i| i as f32 - 8.0).collect()
}

/// `diff = x - scale`, `y = relu(x * scale + bias)`, `same = identity(x)`, outputs in the
/// order (diff, y, same), x: f32[batch, 32].
fn model(extra: Vec<NodeProto>) -> ModelProto {
    let mut nodes = vec![
        node("Mul", &["x", "scale"], &["xs"]),
        node("Add", &["xs", "bias"], &["pre"]),
        node("Relu", &["pre"], &["y"]),
        node("Sub", &["x", "scale"], &["diff"]),
        node("Identity", &["x"], &["same"]),
    ];
    nodes.extend(extra);
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("tensorjit-tests".into()),
        producer_version: Some("1".into()),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            initializer: vec![initializer("scale", &scale()), initializer("bias", &bias())],
            input: vec![value_info("x", &[D::Param("batch"), D::Fixed(N as i64)])],
            output: vec![
                value_info("diff", &[D::Param("batch"), D::Fixed(N as i64)]),
                value_info("y", &[D::Param("batch"), D::Fixed(N as i64)]),
                value_info("same", &[D::Param("batch"), D::Fixed(N as i64)]),
            ],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn write_model(dir: &Path, name: &str, m: &ModelProto) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

fn write_npy(path: &Path, dims: &[u64], data: &[f32]) {
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(dims)
        .writer(BufWriter::new(File::create(path).unwrap()))
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

fn read_npy(path: &Path) -> (Vec<u64>, Vec<f32>) {
    let f = npyz::NpyFile::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let shape = f.shape().to_vec();
    (shape, f.into_vec::<f32>().unwrap())
}

/// Runs the binary; returns (exit code, stdout, stderr). No run may panic.
fn tensorjit(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorjit")).args(args).output().expect("tensorjit runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    (out.status.code().expect("exited, not killed by a signal"), stdout, stderr)
}

fn x_data(batch: usize) -> Vec<f32> {
    (0..batch * N).map(|i| (i as f32 - 20.0) * 0.5).collect()
}

/// The expected outputs (diff, y, same) for `x`.
fn expected(x: &[f32]) -> [Vec<f32>; 3] {
    let (s, b) = (scale(), bias());
    let diff = x.iter().enumerate().map(|(i, v)| v - s[i % N]).collect();
    let y = x.iter().enumerate().map(|(i, v)| (v * s[i % N] + b[i % N]).max(0.0)).collect();
    [diff, y, x.to_vec()]
}

fn check_outputs(out: &Path, batch: usize) {
    let want = expected(&x_data(batch));
    for (k, w) in want.iter().enumerate() {
        let (shape, v) = read_npy(&out.join(format!("out{k}.npy")));
        assert_eq!(shape, vec![batch as u64, N as u64], "out{k}");
        assert_eq!(&v, w, "out{k}");
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn run_executes_an_onnx_model_in_output_order() {
    let dir = scratch("run");
    let m = write_model(&dir, "model.onnx", &model(vec![]));
    let x = dir.join("x.npy");
    write_npy(&x, &[2, N as u64], &x_data(2));
    let out = dir.join("out");
    let xa = format!("x={}", s(&x));
    for backend in ["interp", "jit"] {
        let (code, stdout, err) = tensorjit(&["run", s(&m), "--input", &xa, "--out", s(&out), "--backend", backend]);
        assert_eq!(code, 0, "{err}");
        assert!(
            stdout.contains("output 0 \"diff\": (Float32)[2, 32]") || stdout.contains("output 0 \"diff\""),
            "{stdout}"
        );
        check_outputs(&out, 2);
    }
    let manifest = std::fs::read_to_string(out.join("outputs.txt")).unwrap();
    assert_eq!(manifest.lines().next().unwrap(), "out0.npy f32 [2, 32] native \"diff\"");
    assert!(manifest.contains("out2.npy f32 [2, 32] native \"same\""), "{manifest}");

    // Another batch size binds `batch` anew; --dim agrees with it.
    write_npy(&x, &[3, N as u64], &x_data(3));
    let (code, stdout, err) =
        tensorjit(&["--json", "run", s(&m), "-i", &xa, "-o", s(&out), "-b", "interp", "--dim", "batch=3"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["outputs"][1]["model_name"], "y");
    assert_eq!(v["outputs"][1]["shape"], serde_json::json!([3, 32]));
    check_outputs(&out, 3);

    // bench binds the dims from --dim alone and generates the input.
    let (code, stdout, err) =
        tensorjit(&["--json", "bench", s(&m), "--dim", "batch=4", "--repeat", "2", "--fill", "random"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([4, 32]));
    assert_eq!(v["inputs"][0]["source"], "random");

    // The format is found by content when the extension says nothing.
    let bin = dir.join("model.bin");
    std::fs::copy(&m, &bin).unwrap();
    let (code, _, err) = tensorjit(&["run", s(&bin), "--input", &xa, "--out", s(&out), "--backend", "interp"]);
    assert_eq!(code, 0, "{err}");
    check_outputs(&out, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_checks_inputs_against_the_model() {
    let dir = scratch("run_errors");
    let m = write_model(&dir, "model.onnx", &model(vec![]));
    let x = dir.join("x.npy");
    write_npy(&x, &[2, N as u64], &x_data(2));
    let xa = format!("x={}", s(&x));
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        let mut args = vec!["run", s(&m), "--out", s(&out), "--backend", "interp"];
        args.extend_from_slice(extra);
        tensorjit(&args)
    };
    // A --dim that disagrees with the input.
    let (code, _, err) = run(&["--input", &xa, "--dim", "batch=5"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--input x") && err.contains("batch is 5 from --dim batch=5"), "{err}");
    // A fixed dim that disagrees, and a wrong rank.
    let bad = dir.join("bad.npy");
    write_npy(&bad, &[2, 3], &[0.0; 6]);
    let (code, _, err) = run(&["--input", &format!("x={}", s(&bad))]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("axis 1 has size 3") && err.contains("[batch, 32]"), "{err}");
    write_npy(&bad, &[64], &[0.0; 64]);
    let (code, _, err) = run(&["--input", &format!("x={}", s(&bad))]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("rank 2"), "{err}");
    // Unknown and missing inputs.
    let (code, _, err) = run(&["--input", &xa, "--input", &format!("z={}", s(&x))]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no input \"z\"") && err.contains("inputs: x"), "{err}");
    let (code, _, err) = run(&[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has no --input x="), "{err}");
    // Usage errors.
    let (code, _, err) = run(&["--input", &xa, "--dim", "batch"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(&["--input", &xa, "--dim", "batch=-1"]);
    assert_eq!(code, 2, "{err}");
    // --dim on IR text.
    let tjir = dir.join("m.tjir");
    std::fs::write(&tjir, "module @m\n\nfunc @main(%0 \"x\": f32[2]) {\n  return %0\n}\n").unwrap();
    let (code, _, err) =
        tensorjit(&["run", s(&tjir), "--out", s(&out), "--input", &xa, "--dim", "batch=2", "--backend", "interp"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ONNX models only"), "{err}");
    // Garbage and unsupported operators name the file (and the node).
    let junk = dir.join("junk.onnx");
    std::fs::write(&junk, b"\x08\xff\xff\xff").unwrap();
    let (code, _, err) = tensorjit(&["run", s(&junk), "--out", s(&out)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("junk.onnx") && err.contains("not an ONNX model"), "{err}");
    let unsup = write_model(&dir, "unsup.onnx", &model(vec![node("NoSuchOp", &["x"], &["q"])]));
    let (code, _, err) = tensorjit(&["run", s(&unsup), "--out", s(&out), "--input", &xa]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unsup.onnx") && err.contains("NoSuchOp"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn import_writes_ir_and_safetensors_that_replay() {
    let dir = scratch("import");
    let m = write_model(&dir, "model.onnx", &model(vec![]));
    let sub = dir.join("ir");
    std::fs::create_dir_all(&sub).unwrap();
    let tjir = sub.join("model.tjir");
    let (code, stdout, err) = tensorjit(&["import", s(&m), "-o", s(&tjir)]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("model.safetensors") && stdout.contains("2 tensors"), "{stdout}");
    let text = std::fs::read_to_string(&tjir).unwrap();
    assert!(text.starts_with(";; imported from model.onnx (opset 17, produced by tensorjit-tests 1)"), "{text}");
    assert!(text.contains(";; output 1: \"y\""), "{text}");
    // Named after the initializers their data comes from (the importer may reshape them).
    assert!(text.contains(r#"constant safetensors("model.safetensors", "scale") : f32["#), "{text}");
    assert!(text.contains(r#"constant safetensors("model.safetensors", "bias") : f32["#), "{text}");
    assert!(text.contains("batch=?"), "{text}");

    // The weights file is an ordinary safetensors file with the initializers' names.
    let w = tensorjit::weights::load_safetensors(sub.join("model.safetensors")).unwrap();
    assert_eq!(w.buffer("scale").unwrap().to_vec::<f32>().unwrap(), scale());
    let bias_type = tensorjit::ir::text::format_shape(&w.shape("bias").unwrap());
    // `info` lists it.
    let (code, stdout, err) = tensorjit(&["info", s(&sub.join("model.safetensors"))]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains(&format!("\"bias\": {bias_type} (128 bytes)")) && stdout.contains("memory-mapped"),
        "{stdout}"
    );

    // The text replays with `run`, with the same outputs as the model.
    let x = dir.join("x.npy");
    write_npy(&x, &[2, N as u64], &x_data(2));
    let out = dir.join("out");
    let (code, _, err) = tensorjit(&["run", s(&tjir), "--input", &format!("x={}", s(&x)), "--out", s(&out)]);
    assert_eq!(code, 0, "{err}");
    check_outputs(&out, 2);
    // `check` and `fmt` read it too; fmt into another safetensors file replays as well.
    let (code, stdout, err) = tensorjit(&["check", s(&tjir)]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.starts_with("ok: module"), "{stdout}");
    let consts = sub.join("again.safetensors");
    let (code, again, err) = tensorjit(&["fmt", s(&tjir), "--constants-file", s(&consts)]);
    assert_eq!(code, 0, "{err}");
    assert!(again.contains(r#"safetensors("again.safetensors", "c0") : f32["#), "{again}");
    let again_path = sub.join("again.tjir");
    std::fs::write(&again_path, &again).unwrap();
    let (code, _, err) = tensorjit(&["run", s(&again_path), "--input", &format!("x={}", s(&x)), "--out", s(&out)]);
    assert_eq!(code, 0, "{err}");
    check_outputs(&out, 2);

    // --dim fixes a dimension; --weights names the file; --json reports.
    let fixed = dir.join("fixed.tjir");
    let (code, stdout, err) =
        tensorjit(&["--json", "import", s(&m), "-o", s(&fixed), "--dim", "batch=2", "--weights", "w.safetensors"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["command"], "import");
    assert_eq!(v["weights"]["constants"], 2);
    assert_eq!(v["inputs"][0]["type"], "f32[2,32]");
    assert_eq!(v["outputs"][2]["name"], "same");
    assert!(dir.join("w.safetensors").exists());
    // A dump of the optimised IR with its constants in a safetensors file replays.
    let (code, opt, err) =
        tensorjit(&["dump", s(&fixed), "--stage", "optimized", "--constants-file", s(&dir.join("opt.safetensors"))]);
    assert_eq!(code, 0, "{err}");
    assert!(opt.contains("safetensors(\"opt.safetensors\""), "{opt}");
    let opt_path = dir.join("opt.tjir");
    std::fs::write(&opt_path, &opt).unwrap();
    let (code, _, err) =
        tensorjit(&["run", s(&opt_path), "--input", &format!("x={}", s(&x)), "--out", s(&out), "--backend", "jit"]);
    assert_eq!(code, 0, "{err}");
    check_outputs(&out, 2);

    // Errors: weights elsewhere than next to the text, a missing model, a missing -o.
    let (code, _, err) = tensorjit(&["import", s(&m), "-o", s(&tjir), "--weights", "/tmp/elsewhere/w.safetensors"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--weights") && err.contains("IR file's directory"), "{err}");
    let (code, _, err) = tensorjit(&["import", s(&dir.join("none.onnx")), "-o", s(&tjir)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("none.onnx"), "{err}");
    let (code, _, err) = tensorjit(&["import", s(&m)]);
    assert_eq!(code, 2, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_describes_a_model() {
    let dir = scratch("info");
    let m = write_model(&dir, "model.onnx", &model(vec![node("NoSuchOp", &["x"], &["q"])]));
    let (code, stdout, err) = tensorjit(&["info", s(&m)]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "model: ",
        "opset: 17",
        "producer: tensorjit-tests 1",
        "\"x\": ",
        "batch, 32]",
        "\"diff\": ",
        "initializers: 2 (256 bytes)",
        "operators: 6 nodes, 6 types",
        "  Mul: 1",
        "  NoSuchOp: 1  (unsupported)",
        "unsupported operators: NoSuchOp",
    ] {
        assert!(stdout.contains(want), "{want:?} in\n{stdout}");
    }
    let (code, stdout, err) = tensorjit(&["info", s(&m), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["kind"], "onnx");
    assert_eq!(v["opset"], 17);
    assert_eq!(v["initializers"], serde_json::json!({ "count": 2, "bytes": 256 }));
    assert_eq!(v["operators"]["Relu"], 1);
    assert_eq!(v["nodes"], 6);
    assert_eq!(v["unsupported"], serde_json::json!(["NoSuchOp"]));
    assert_eq!(v["inputs"][0]["name"], "x");
    assert_eq!(v["outputs"].as_array().unwrap().len(), 3);
    // Not a model.
    let tjir = dir.join("m.tjir");
    std::fs::write(&tjir, "module @m\n").unwrap();
    let (code, stdout, err) = tensorjit(&["--json", "info", s(&tjir)]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("m.tjir") && err.contains("tensorjit check"), "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ok"], false);
    let (code, _, err) = tensorjit(&["info", s(&dir.join("nothing.onnx"))]);
    assert_eq!(code, 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dump_binds_symbolic_dimensions_given_with_dim() {
    let dir = scratch("dump_dim");
    let path = write_model(&dir, "m.onnx", &model(vec![]));
    // Without --dim the batch axis stays dynamic; with it, the compiled module has batch 3.
    let (code, out, err) = tensorjit(&["dump", s(&path), "--stage", "input"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("f32[batch=?,32]"), "{out}");
    let (code, out, err) = tensorjit(&["dump", s(&path), "--stage", "input", "--dim", "batch=3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("f32[3,32]") && !out.contains("batch=?"), "{out}");
    // --dim on an IR file is an error that names the file and the dimension.
    let ir = dir.join("m.tjir");
    std::fs::write(&ir, "module @m\n\nfunc @main(%0 \"x\": f32[2]) {\n  return %0\n}\n").unwrap();
    let (code, _, err) = tensorjit(&["dump", s(&ir), "--dim", "batch=3"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("m.tjir") && err.contains("batch") && err.contains("only ONNX"), "{err}");
}
