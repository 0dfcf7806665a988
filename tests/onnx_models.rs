//! Small ONNX models (tests/data/onnx-models, written by tools/onnx-control-cases.py with
//! expected outputs from `onnx.reference`) on both backends: If on run-time and import-time
//! conditions, Loop with a constant trip count and scan outputs, Loop stopping early.

use std::path::Path;

use tensorjit::Buffer;

fn read_pb(p: &Path) -> Buffer {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    tensorjit::onnx::read_tensor_proto(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display())).1
}

fn run_case(name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx-models").join(name);
    let set = dir.join("test_data_set_0");
    let inputs: Vec<Buffer> =
        (0..).map(|k| set.join(format!("input_{k}.pb"))).take_while(|p| p.exists()).map(|p| read_pb(&p)).collect();
    let want: Vec<Buffer> =
        (0..).map(|k| set.join(format!("output_{k}.pb"))).take_while(|p| p.exists()).map(|p| read_pb(&p)).collect();
    for backend in ["interp", "jit"] {
        let model = tensorjit::onnx::load(dir.join("model.onnx")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let exe = tensorjit::new_with_config(backend).unwrap().compile(model.module).unwrap();
        let refs: Vec<&Buffer> = inputs.iter().collect();
        let got = exe.execute(&refs, &[]).unwrap_or_else(|e| panic!("{name} on {backend}: {e}"));
        assert_eq!(got.len(), want.len(), "{name} on {backend}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.dims(), w.dims(), "{name} on {backend}");
            let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
            for (a, b) in g.iter().zip(&w) {
                assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{name} on {backend}: {g:?} vs {w:?}");
            }
        }
    }
}

#[test]
fn loop_with_constant_trip_count_and_scan_output() {
    run_case("loop_const_trip");
}

#[test]
fn loop_stopping_early_on_its_condition() {
    run_case("loop_early_stop");
}

#[test]
fn if_on_a_runtime_condition() {
    run_case("if_true");
    run_case("if_false");
}

#[test]
fn if_on_a_condition_known_at_import_keeps_one_branch() {
    // test_if's structure with the condition as a constant: only the taken branch is imported.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx-models/if_true");
    let model = tensorjit::onnx::load_with(dir.join("model.onnx"), &tensorjit::onnx::ImportOptions::default()).unwrap();
    // Run-time condition: the module holds an If node.
    let text = tensorjit::ir::text::print_module(&model.module);
    assert!(text.contains(" if "), "{text}");
}
