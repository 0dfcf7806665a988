//! ONNX import edge cases: hostile or unsupported models are errors naming the node, tensor or
//! file (never panics); initializers, external data and symbolic dimensions load as documented.

use prost::Message;
use tensorjit::Error;
use tensorjit::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto::AttributeType, tensor_proto, tensor_shape_proto,
    type_proto,
};
use tensorjit::onnx::{ImportOptions, load_bytes, load_bytes_with};

fn dim(v: Result<i64, &str>) -> tensor_shape_proto::Dimension {
    tensor_shape_proto::Dimension {
        value: Some(match v {
            Ok(n) => tensor_shape_proto::dimension::Value::DimValue(n),
            Err(p) => tensor_shape_proto::dimension::Value::DimParam(p.to_string()),
        }),
        ..Default::default()
    }
}

fn input(name: &str, elem: tensor_proto::DataType, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim: dims.iter().map(|d| dim(*d)).collect() }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto { name: Some(name.to_string()), ..Default::default() }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.to_string()),
        name: Some(name.to_string()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn f32_tensor(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.to_string()),
        dims: dims.to_vec(),
        data_type: Some(tensor_proto::DataType::Float as i32),
        raw_data: Some(data.iter().flat_map(|v| v.to_le_bytes()).collect()),
        ..Default::default()
    }
}

fn model(opset: i64, graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(opset) }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// `y = relu(x + b)` with `x: f32[batch, 2]` and the initializer `b`.
fn add_relu(b: TensorProto) -> GraphProto {
    GraphProto {
        name: Some("g".to_string()),
        node: vec![node("Add", "add", &["x", "b"], &["s"]), node("Relu", "relu", &["s"], &["y"])],
        initializer: vec![b],
        input: vec![input("x", tensor_proto::DataType::Float, &[Err("batch"), Ok(2)])],
        output: vec![output("y")],
        ..Default::default()
    }
}

fn msg(e: Error) -> String {
    e.to_string()
}

#[test]
fn a_model_runs_and_symbolic_dims_are_named_or_bound() {
    let bytes = model(17, add_relu(f32_tensor("b", &[2], &[1.0, -3.0])));
    let m = load_bytes(&bytes).unwrap();
    assert_eq!(m.inputs[0].shape.dims, vec![-1, 2]);
    assert_eq!(m.inputs[0].shape.axis_name(0), "batch");
    let mut opts = ImportOptions::default();
    opts.dims.insert("batch".to_string(), 3);
    let m = load_bytes_with(&bytes, None, &opts).unwrap();
    assert_eq!(m.inputs[0].shape.dims, vec![3, 2]);
    let exe = tensorjit::new_with_config("jit").unwrap().compile(m.module).unwrap();
    let x = tensorjit::Buffer::from_slice(&[0.0f32, 1.0, 2.0, 3.0, -5.0, 5.0], &[3, 2]).unwrap();
    // relu(x + [1, -3]) by hand.
    assert_eq!(exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [1.0, 0.0, 3.0, 0.0, 0.0, 2.0]);
}

#[test]
fn garbage_and_truncated_models_are_errors() {
    assert!(matches!(load_bytes(b"\xff\xff\xff\xff not protobuf"), Err(Error::Invalid { .. })));
    let bytes = model(17, add_relu(f32_tensor("b", &[2], &[1.0, -3.0])));
    for cut in [1, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        assert!(load_bytes(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    assert!(load_bytes(&model(17, GraphProto::default())).is_ok() || load_bytes(&[]).is_err());
}

#[test]
fn unsupported_operator_attribute_and_opset_name_what_is_missing() {
    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.node[1].op_type = Some("NoSuchOp".to_string());
    let e = msg(load_bytes(&model(17, g)).unwrap_err());
    assert!(e.contains("\"relu\"") && e.contains("NoSuchOp") && e.contains("not implemented"), "{e}");

    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.node[1].attribute.push(AttributeProto {
        name: Some("alpha".to_string()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(0.5),
        ..Default::default()
    });
    let e = msg(load_bytes(&model(17, g)).unwrap_err());
    assert!(e.contains("\"relu\"") && e.contains("\"alpha\""), "{e}");

    let e = msg(load_bytes(&model(3, add_relu(f32_tensor("b", &[2], &[1.0, -3.0])))).unwrap_err());
    assert!(e.contains("opset 3"), "{e}");

    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.node[0].domain = Some("com.microsoft".to_string());
    let e = msg(load_bytes(&model(17, g)).unwrap_err());
    assert!(e.contains("com.microsoft"), "{e}");
}

#[test]
fn undefined_inputs_and_bad_initializers_are_errors() {
    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.node[1].input[0] = "nowhere".to_string();
    let e = msg(load_bytes(&model(17, g)).unwrap_err());
    assert!(e.contains("nowhere"), "{e}");

    // 3 floats of data for 2 elements.
    let mut b = f32_tensor("b", &[2], &[1.0, 2.0, 3.0]);
    let e = msg(load_bytes(&model(17, add_relu(b.clone()))).unwrap_err());
    assert!(e.contains("\"b\"") && e.contains("12 bytes"), "{e}");
    // Negative and huge dims.
    b.dims = vec![-2];
    assert!(load_bytes(&model(17, add_relu(b.clone()))).is_err());
    b.dims = vec![1 << 40, 1 << 40];
    assert!(load_bytes(&model(17, add_relu(b))).is_err());
    // Unsupported element type (string).
    let mut s = f32_tensor("b", &[2], &[1.0, 2.0]);
    s.data_type = Some(tensor_proto::DataType::String as i32);
    let e = msg(load_bytes(&model(17, add_relu(s))).unwrap_err());
    assert!(e.contains("STRING"), "{e}");
}

fn external(b: &mut TensorProto, location: &str, offset: u64, length: u64) {
    b.raw_data = None;
    b.data_location = Some(tensor_proto::DataLocation::External as i32);
    b.external_data =
        [("location", location.to_string()), ("offset", offset.to_string()), ("length", length.to_string())]
            .into_iter()
            .map(|(k, v)| StringStringEntryProto { key: Some(k.to_string()), value: Some(v) })
            .collect();
}

#[test]
fn external_data_loads_from_the_model_folder_and_never_escapes_it() {
    let dir = std::env::temp_dir().join(format!("tj-onnx-ext-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut data = vec![0u8; 16];
    data.extend([2.0f32, -1.0].iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(dir.join("model.onnx.data"), &data).unwrap();

    let mut b = f32_tensor("b", &[2], &[]);
    external(&mut b, "model.onnx.data", 16, 8);
    let bytes = model(17, add_relu(b.clone()));
    std::fs::write(dir.join("model.onnx"), &bytes).unwrap();
    let mut opts = ImportOptions::default();
    opts.dims.insert("batch".to_string(), 1);
    let m = tensorjit::onnx::load_with(dir.join("model.onnx"), &opts).unwrap();
    let exe = tensorjit::new_with_config("interp").unwrap().compile(m.module).unwrap();
    let x = tensorjit::Buffer::from_slice(&[1.0f32, 0.5], &[1, 2]).unwrap();
    assert_eq!(exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [3.0, 0.0]);

    // From bytes there is no folder: refused.
    assert!(load_bytes(&bytes).is_err());
    // Escapes, absolute paths, ranges past the end, wrong lengths, missing files.
    for (loc, off, len) in [
        ("../model.onnx.data", 16, 8),
        ("/etc/passwd", 0, 8),
        ("model.onnx.data", 20, 8),
        ("model.onnx.data", u64::MAX - 2, 8),
        ("model.onnx.data", 0, 4),
        ("missing.data", 0, 8),
    ] {
        let mut b = f32_tensor("b", &[2], &[]);
        external(&mut b, loc, off, len);
        let r = load_bytes_with(&model(17, add_relu(b)), Some(&dir), &Default::default());
        let e = msg(r.expect_err(loc));
        assert!(e.contains("\"b\""), "{loc}: {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn shape_subgraphs_fold_at_import() {
    // y = Reshape(x, Concat(Shape(x)[0:1], [-1])) : the target shape is a constant once folded.
    let g = GraphProto {
        name: Some("g".to_string()),
        node: vec![node("Shape", "shape", &["x"], &["s"]), node("Reshape", "reshape", &["x", "s"], &["y"])],
        input: vec![input("x", tensor_proto::DataType::Float, &[Ok(2), Ok(3)])],
        output: vec![output("y")],
        ..Default::default()
    };
    let m = load_bytes(&model(17, g)).unwrap();
    let text = tensorjit::ir::text::print_module(&m.module);
    assert!(!text.contains("dynamic"), "{text}");
    assert_eq!(m.outputs[0].shape.dims, vec![2, 3]);
}

fn i64_input(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dims: Vec<Result<i64, &str>> = dims.iter().map(|&d| Ok(d)).collect();
    input(name, tensor_proto::DataType::Int64, &dims)
}

/// `y = Unsqueeze(x, axes)` (opset 13) with `x: f32[2, 3]` and `axes` a graph input `i64[1]`.
fn unsqueeze_by_input() -> GraphProto {
    GraphProto {
        name: Some("g".to_string()),
        node: vec![node("Unsqueeze", "unsq", &["x", "axes"], &["y"])],
        input: vec![input("x", tensor_proto::DataType::Float, &[Ok(2), Ok(3)]), i64_input("axes", &[1])],
        output: vec![output("y")],
        ..Default::default()
    }
}

#[test]
fn operands_that_must_be_constant_name_the_graph_inputs_to_freeze() {
    use tensorjit::onnx::inputs_to_freeze;
    // The operand is a graph input itself.
    let e = load_bytes(&model(13, unsqueeze_by_input())).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("\"unsq\"") && text.contains("input 1 (axes)"), "{text}");
    assert!(text.contains("graph input \"axes\"") && text.contains("ImportOptions::constant_inputs"), "{text}");
    assert!(!text.contains("symbolic") && !text.contains("ImportOptions::dims"), "{text}");
    assert_eq!(inputs_to_freeze(&e), ["axes"]);

    // Computed from two graph inputs: pads = Concat(a, b).
    let mut g = GraphProto {
        name: Some("g".to_string()),
        node: vec![node("Concat", "cat", &["a", "b"], &["pads"]), node("Pad", "pad", &["x", "pads"], &["y"])],
        input: vec![
            input("x", tensor_proto::DataType::Float, &[Ok(2), Ok(3)]),
            i64_input("a", &[2]),
            i64_input("b", &[2]),
        ],
        output: vec![output("y")],
        ..Default::default()
    };
    g.node[0].attribute.push(AttributeProto {
        name: Some("axis".to_string()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(0),
        ..Default::default()
    });
    let e = load_bytes(&model(18, g)).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("\"pad\"") && text.contains("input 1 (pads)"), "{text}");
    assert!(text.contains("computed at run time from graph inputs \"a\", \"b\""), "{text}");
    assert_eq!(inputs_to_freeze(&e), ["a", "b"]);

    // Computed from a graph input's dynamic dims: a size the axis names can express imports
    // (tests/onnx_dynamic.rs); one they cannot (batch·batch) suggests binding the dims.
    let g = GraphProto {
        name: Some("g".to_string()),
        node: vec![
            node("Shape", "shape", &["x"], &["s"]),
            node("Mul", "square", &["s", "s"], &["s2"]),
            node("ConstantOfShape", "fill", &["s2"], &["y"]),
        ],
        input: vec![input("x", tensor_proto::DataType::Float, &[Err("batch"), Ok(3)])],
        output: vec![output("y")],
        ..Default::default()
    };
    let text = load_bytes(&model(17, g)).unwrap_err().to_string();
    assert!(text.contains("\"fill\"") && text.contains("batch*batch"), "{text}");
    assert!(text.contains("ImportOptions::dims"), "{text}");

    // Other errors name nothing to freeze.
    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.node[1].op_type = Some("NoSuchOp".to_string());
    assert!(inputs_to_freeze(&load_bytes(&model(17, g)).unwrap_err()).is_empty());
}

#[test]
fn constant_inputs_fold_like_initializers() {
    let bytes = model(13, unsqueeze_by_input());
    let mut opts = ImportOptions::default();
    opts.constant_inputs.insert("axes".to_string(), tensorjit::Buffer::from_slice(&[-1i64], &[1]).unwrap());
    let m = load_bytes_with(&bytes, None, &opts).unwrap();
    // `axes` is no longer an input; Unsqueeze at axis -1 of a rank-3 result: [2, 3, 1].
    let names: Vec<&str> = m.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["x"]);
    assert_eq!(m.outputs[0].shape.dims, vec![2, 3, 1]);
    let exe = tensorjit::new_with_config("interp").unwrap().compile(m.module).unwrap();
    let x = tensorjit::Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let y = &exe.execute(&[&x], &[]).unwrap()[0];
    assert_eq!(y.dims(), [2, 3, 1]);
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

    // A frozen input overrides an initializer listed as an input (a default value).
    let mut g = add_relu(f32_tensor("b", &[2], &[1.0, -3.0]));
    g.input.push(input("b", tensor_proto::DataType::Float, &[Ok(2)]));
    let mut opts = ImportOptions::default();
    opts.dims.insert("batch".to_string(), 1);
    opts.constant_inputs.insert("b".to_string(), tensorjit::Buffer::from_slice(&[10.0f32, 20.0], &[2]).unwrap());
    let m = load_bytes_with(&model(17, g), None, &opts).unwrap();
    assert_eq!(m.inputs.len(), 1);
    let exe = tensorjit::new_with_config("interp").unwrap().compile(m.module).unwrap();
    let x = tensorjit::Buffer::from_slice(&[-11.0f32, 1.0], &[1, 2]).unwrap();
    // relu([-11 + 10, 1 + 20]) by hand.
    assert_eq!(exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap(), [0.0, 21.0]);
}

#[test]
fn constant_inputs_are_checked() {
    let bytes = model(13, unsqueeze_by_input());
    let bad = [
        ("nope", tensorjit::Buffer::from_slice(&[1i64], &[1]).unwrap(), "not a graph input"),
        ("axes", tensorjit::Buffer::from_slice(&[1i32], &[1]).unwrap(), "is declared"),
        ("axes", tensorjit::Buffer::from_slice(&[1i64, 2], &[2]).unwrap(), "dims [2]"),
        ("axes", tensorjit::Buffer::from_slice(&[1i64], &[1, 1]).unwrap(), "dims [1, 1]"),
    ];
    for (name, value, want) in bad {
        let mut opts = ImportOptions::default();
        opts.constant_inputs.insert(name.to_string(), value);
        let e = load_bytes_with(&bytes, None, &opts).unwrap_err().to_string();
        assert!(e.contains(&format!("{name:?}")) && e.contains(want), "{name}: {e}");
    }
}
