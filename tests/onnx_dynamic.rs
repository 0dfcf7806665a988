//! ONNX import with symbolic dimensions left dynamic: the shape subgraphs transformer exports
//! emit (`Shape → Gather → Unsqueeze → Concat → Reshape` head split/merge, `position_ids[:, :seq]`,
//! `Expand`/`ConstantOfShape`/`Range` to symbolic sizes, attention-mask arithmetic) import with
//! the inputs' axis names, verify, and run on `interp` at several shapes, matching hand-computed
//! values and the import with the dims bound. Sizes the IR's axis names cannot express are errors
//! naming the node.

use prost::Message;
use tensorjit::api::Executable;
use tensorjit::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto, attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
};
use tensorjit::onnx::{ImportOptions, OnnxModel, load_bytes, load_bytes_with};
use tensorjit::{Buffer, Error};

/// A graph under construction: nodes, constants (as initializers), inputs and outputs.
#[derive(Default)]
struct G {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<String>,
}

impl G {
    /// A graph input; `Err(name)` dims are symbolic.
    fn input(&mut self, name: &str, ty: DataType, dims: &[Result<i64, &str>]) -> &mut G {
        use tensor_shape_proto::dimension::Value;
        let dim = |d: &Result<i64, &str>| tensor_shape_proto::Dimension {
            value: Some(match d {
                Ok(n) => Value::DimValue(*n),
                Err(p) => Value::DimParam(p.to_string()),
            }),
            ..Default::default()
        };
        self.inputs.push(ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(ty as i32),
                    shape: Some(TensorShapeProto { dim: dims.iter().map(dim).collect() }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    fn init(&mut self, name: &str, ty: DataType, dims: &[i64], raw: Vec<u8>) -> &mut G {
        self.inits.push(TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(ty as i32),
            raw_data: Some(raw),
            ..Default::default()
        });
        self
    }

    fn ints(&mut self, name: &str, dims: &[i64], v: &[i64]) -> &mut G {
        self.init(name, DataType::Int64, dims, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    fn floats(&mut self, name: &str, dims: &[i64], v: &[f32]) -> &mut G {
        self.init(name, DataType::Float, dims, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// A node named after its output, with integer / integer-list attributes.
    fn op(&mut self, op: &str, inputs: &[&str], out: &str, attrs: &[(&str, &[i64])]) -> &mut G {
        let attribute = attrs
            .iter()
            .map(|(k, v)| {
                let mut a = AttributeProto { name: Some(k.to_string()), ..Default::default() };
                if matches!(*k, "axis" | "to") {
                    a.r#type = Some(AttributeType::Int as i32);
                    a.i = v.first().copied();
                } else {
                    a.r#type = Some(AttributeType::Ints as i32);
                    a.ints = v.to_vec();
                }
                a
            })
            .collect();
        self.nodes.push(NodeProto {
            op_type: Some(op.into()),
            name: Some(out.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.into()],
            attribute,
            ..Default::default()
        });
        self
    }

    fn out(&mut self, name: &str) -> &mut G {
        self.outputs.push(name.into());
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let graph = GraphProto {
            name: Some("g".into()),
            node: self.nodes.clone(),
            initializer: self.inits.clone(),
            input: self.inputs.clone(),
            output: self
                .outputs
                .iter()
                .map(|o| ValueInfoProto { name: Some(o.clone()), ..Default::default() })
                .collect(),
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
            graph: Some(graph),
            ..Default::default()
        }
        .encode_to_vec()
    }
}

/// `Shape(x)[i]` as a 1-element vector, under `name` (the `Shape → Gather → Unsqueeze` chain).
fn dim_of(g: &mut G, x: &str, i: i64, name: &str) {
    let (s, k, gi, ax) = (format!("{name}.shape"), format!("{name}.k"), format!("{name}.gather"), format!("{name}.ax"));
    g.ints(&k, &[], &[i]).ints(&ax, &[1], &[0]);
    g.op("Shape", &[x], &s, &[]).op("Gather", &[&s, &k], &gi, &[("axis", &[0])]).op(
        "Unsqueeze",
        &[&gi, &ax],
        name,
        &[],
    );
}

/// Imports `bytes` with every symbolic dim dynamic and checks the module verifies and its
/// outputs carry `names` on their dynamic axes.
fn import_dynamic(bytes: &[u8], names: &[&[&str]]) -> OnnxModel {
    let m = load_bytes(bytes).unwrap();
    tensorjit::ir::verify::verify(&m.module).unwrap();
    for (o, want) in m.outputs.iter().zip(names) {
        let got: Vec<&str> = (0..o.shape.rank()).map(|i| o.shape.axis_name(i)).collect();
        assert_eq!(got, *want, "output {} is {}", o.name, o.shape);
    }
    m
}

/// The same model with its symbolic dims bound (`dims`).
fn import_static(bytes: &[u8], dims: &[(&str, i64)]) -> OnnxModel {
    let mut opts = ImportOptions::default();
    for &(k, v) in dims {
        opts.dims.insert(k.into(), v);
    }
    let m = load_bytes_with(bytes, None, &opts).unwrap();
    assert!(!m.module.func(m.module.main).outputs.iter().flatten().any(|&v| m.module.shape(v).is_dynamic()));
    m
}

/// A dynamic import compiled once on each backend: every binding runs on the same executables.
struct Exes {
    interp: std::sync::Arc<dyn Executable>,
    jit: std::sync::Arc<dyn Executable>,
}

fn compile(m: &OnnxModel) -> Exes {
    let c = |cfg: &str| tensorjit::new_with_config(cfg).unwrap().compile(m.module.clone()).unwrap();
    Exes { interp: c("interp"), jit: c("jit") }
}

impl Exes {
    /// Runs `inputs` on both backends; the jit must have specialised the module (no interpreter).
    fn run(&self, inputs: &[Buffer]) -> [Vec<Buffer>; 2] {
        let refs: Vec<&Buffer> = inputs.iter().collect();
        let i = self.interp.execute(&refs, &[]).unwrap();
        let j = self.jit.execute(&refs, &[]).unwrap();
        let r = self.jit.compile_report().expect("report").execution;
        assert_eq!(r.interpreted, None, "{r}");
        assert!(r.specialized.is_some(), "{r}");
        [i, j]
    }

    fn f32(&self, inputs: &[Buffer]) -> [Vec<f32>; 2] {
        self.run(inputs).map(|o| o[0].to_vec::<f32>().unwrap())
    }

    fn i64(&self, inputs: &[Buffer]) -> [Vec<i64>; 2] {
        self.run(inputs).map(|o| o[0].to_vec::<i64>().unwrap())
    }

    /// The jit compiled one specialisation per distinct binding run so far.
    fn assert_specialized(&self, bindings: u64) {
        let stats = self.jit.specialization_stats().expect("stats");
        assert_eq!(stats.misses, bindings, "{stats}");
    }
}

/// The static import (dims bound) on the interpreter.
fn run_static(m: &OnnxModel, inputs: &[Buffer]) -> Vec<Buffer> {
    let exe = tensorjit::new_with_config("interp").unwrap().compile(m.module.clone()).unwrap();
    let refs: Vec<&Buffer> = inputs.iter().collect();
    exe.execute(&refs, &[]).unwrap()
}

/// Runs the dynamic import (interp and jit) and the import bound to `dims`: all give `want`.
fn check_f32(bytes: &[u8], exes: &Exes, dims: &[(&str, i64)], inputs: &[Buffer], want: &[f32]) {
    let [i, j] = exes.f32(inputs);
    assert_eq!(i, want, "dynamic import on interp at {dims:?}");
    assert_eq!(j, want, "dynamic import on jit at {dims:?}");
    let st = run_static(&import_static(bytes, dims), inputs)[0].to_vec::<f32>().unwrap();
    assert_eq!(st, want, "static import at {dims:?}");
}

/// As [`check_f32`] for an `i64` result.
fn check_i64(bytes: &[u8], exes: &Exes, dims: &[(&str, i64)], inputs: &[Buffer], want: &[i64]) {
    let [i, j] = exes.i64(inputs);
    assert_eq!(i, want, "dynamic import on interp at {dims:?}");
    assert_eq!(j, want, "dynamic import on jit at {dims:?}");
    let st = run_static(&import_static(bytes, dims), inputs)[0].to_vec::<i64>().unwrap();
    assert_eq!(st, want, "static import at {dims:?}");
}

fn iota_f32(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()
}

#[test]
fn head_split_and_merge_keep_the_batch_and_sequence_names() {
    // x: [batch, seq, 6] → Reshape [b, s, 2, -1] → Transpose (heads first) → Transpose back →
    // Reshape [b, s, -1] → + x: y = 2x, through the torch export's shape chain.
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Err("seq"), Ok(6)]);
    dim_of(&mut g, "x", 0, "b");
    dim_of(&mut g, "x", 1, "s");
    g.ints("two", &[1], &[2]).ints("m1", &[1], &[-1]);
    g.op("Concat", &["b", "s", "two", "m1"], "split_shape", &[("axis", &[0])])
        .op("Reshape", &["x", "split_shape"], "heads", &[])
        .op("Transpose", &["heads"], "t", &[("perm", &[0, 2, 1, 3])])
        .op("Transpose", &["t"], "back", &[("perm", &[0, 2, 1, 3])])
        .op("Concat", &["b", "s", "m1"], "merge_shape", &[("axis", &[0])])
        .op("Reshape", &["back", "merge_shape"], "merged", &[])
        .op("Add", &["merged", "x"], "y", &[])
        .out("y")
        .out("heads");
    let bytes = g.bytes();
    let m = import_dynamic(&bytes, &[&["batch", "seq", ""], &["batch", "seq", "", ""]]);
    assert_eq!(m.outputs[1].shape.dims, [-1, -1, 2, 3], "the head size is inferred statically");
    let exes = compile(&m);
    for (b, s) in [(2usize, 3usize), (1, 5), (2, 3)] {
        let x = iota_f32(b * s * 6);
        let want: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
        let xb = Buffer::from_slice(&x, &[b, s, 6]).unwrap();
        check_f32(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], &[xb], &want);
    }
    // (2, 3) again is a cache hit: two specialisations.
    exes.assert_specialized(2);
}

#[test]
fn slicing_a_constant_to_the_sequence_length_gives_the_sequence_axis() {
    // position_ids[:, :seq] with position_ids = [[100, 101, …, 107]] (static [1, 8]), added to
    // ids: [batch, seq].
    let mut g = G::default();
    g.input("ids", DataType::Int64, &[Err("batch"), Err("seq")]);
    g.ints("pos", &[1, 8], &(100..108).collect::<Vec<_>>()).ints("zero", &[1], &[0]).ints("one", &[1], &[1]);
    dim_of(&mut g, "ids", 1, "s");
    g.op("Slice", &["pos", "zero", "s", "one", "one"], "p", &[]).op("Add", &["ids", "p"], "y", &[]).out("y");
    let bytes = g.bytes();
    let exes = compile(&import_dynamic(&bytes, &[&["batch", "seq"]]));
    for (b, s) in [(2usize, 3usize), (3, 8), (1, 1)] {
        let ids: Vec<i64> = (0..(b * s) as i64).map(|i| i * 1000).collect();
        let want: Vec<i64> = (0..b * s).map(|i| ids[i] + 100 + (i % s) as i64).collect();
        let buf = Buffer::from_slice(&ids, &[b, s]).unwrap();
        check_i64(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], &[buf], &want);
    }
    exes.assert_specialized(3);
}

#[test]
fn range_expand_and_constant_of_shape_take_symbolic_sizes() {
    // y = ids + Expand(Unsqueeze(Range(0, seq, 1)), [batch, seq]) + ConstantOfShape([batch, seq], 7)
    //   + Range(2, seq + 2, 1) (a start computed from the sizes too: seq + 2 - seq).
    let mut g = G::default();
    g.input("ids", DataType::Int64, &[Err("batch"), Err("seq")]);
    dim_of(&mut g, "ids", 0, "b");
    dim_of(&mut g, "ids", 1, "s");
    g.ints("z", &[], &[0]).ints("one", &[], &[1]).ints("two", &[], &[2]).ints("ax0", &[1], &[0]);
    g.op("Squeeze", &["s", "ax0"], "s0", &[])
        .op("Range", &["z", "s0", "one"], "r", &[])
        .op("Unsqueeze", &["r", "ax0"], "r2", &[])
        .op("Concat", &["b", "s"], "bs", &[("axis", &[0])])
        .op("Expand", &["r2", "bs"], "e", &[]);
    let mut cos = NodeProto {
        op_type: Some("ConstantOfShape".into()),
        name: Some("c".into()),
        input: vec!["bs".into()],
        output: vec!["c".into()],
        ..Default::default()
    };
    cos.attribute.push(AttributeProto {
        name: Some("value".into()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(TensorProto {
            dims: vec![1],
            data_type: Some(DataType::Int64 as i32),
            raw_data: Some(7i64.to_le_bytes().to_vec()),
            ..Default::default()
        }),
        ..Default::default()
    });
    g.nodes.push(cos);
    g.op("Add", &["s0", "two"], "hi", &[])
        .op("Sub", &["hi", "s0"], "lo", &[])
        .op("Range", &["lo", "hi", "one"], "r3", &[])
        .op("Add", &["ids", "e"], "y1", &[])
        .op("Add", &["y1", "c"], "y2", &[])
        .op("Add", &["y2", "r3"], "y", &[])
        .out("y");
    let bytes = g.bytes();
    let exes = compile(&import_dynamic(&bytes, &[&["batch", "seq"]]));
    for (b, s) in [(2usize, 3usize), (1, 6)] {
        let ids: Vec<i64> = (0..(b * s) as i64).map(|i| i * 100).collect();
        let want: Vec<i64> = (0..b * s).map(|i| ids[i] + (i % s) as i64 + 7 + (i % s) as i64 + 2).collect();
        let buf = Buffer::from_slice(&ids, &[b, s]).unwrap();
        check_i64(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], &[buf], &want);
    }
    exes.assert_specialized(2);
}

#[test]
fn attention_mask_arithmetic_broadcasts_over_named_axes() {
    // scores [batch, 2, seq, seq] + (1 - float(mask[:, None, None, :])) * -1000.
    let mut g = G::default();
    g.input("scores", DataType::Float, &[Err("batch"), Ok(2), Err("seq"), Err("seq")]);
    g.input("mask", DataType::Int64, &[Err("batch"), Err("seq")]);
    g.ints("axes", &[2], &[1, 2]).floats("one", &[], &[1.0]).floats("big", &[], &[-1000.0]);
    g.op("Unsqueeze", &["mask", "axes"], "m4", &[])
        .op("Cast", &["m4"], "mf", &[("to", &[DataType::Float as i64])])
        .op("Sub", &["one", "mf"], "inv", &[])
        .op("Mul", &["inv", "big"], "bias", &[])
        .op("Add", &["scores", "bias"], "y", &[])
        .out("y");
    let bytes = g.bytes();
    let exes = compile(&import_dynamic(&bytes, &[&["batch", "", "seq", "seq"]]));
    for (b, s) in [(2usize, 3usize), (1, 4)] {
        let scores = iota_f32(b * 2 * s * s);
        let mask: Vec<i64> = (0..b * s).map(|i| i64::from(i % s != s - 1 || i / s == 0)).collect();
        let want: Vec<f32> = (0..scores.len())
            .map(|i| {
                let (bi, j) = (i / (2 * s * s), i % s);
                scores[i] + if mask[bi * s + j] == 0 { -1000.0 } else { 0.0 }
            })
            .collect();
        let inputs = [Buffer::from_slice(&scores, &[b, 2, s, s]).unwrap(), Buffer::from_slice(&mask, &[b, s]).unwrap()];
        check_f32(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], &inputs, &want);
    }
}

#[test]
fn shape_arithmetic_on_static_dims_stays_folded() {
    // Reshape(x, [Shape(x)[0], Shape(x)[1] * Shape(x)[2]]) on x: [batch, 2, 3]: the static product
    // folds to the constant 6; the batch axis keeps its name and the reshape is a plain one.
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Ok(2), Ok(3)]);
    dim_of(&mut g, "x", 0, "b");
    dim_of(&mut g, "x", 1, "d1");
    dim_of(&mut g, "x", 2, "d2");
    g.op("Mul", &["d1", "d2"], "inner", &[])
        .op("Concat", &["b", "inner"], "shape", &[("axis", &[0])])
        .op("Reshape", &["x", "shape"], "y", &[])
        .out("y");
    let bytes = g.bytes();
    let m = import_dynamic(&bytes, &[&["batch", ""]]);
    assert_eq!(m.outputs[0].shape.dims, [-1, 6]);
    let text = tensorjit::ir::text::print_module(&m.module);
    assert!(!text.contains("dynamic_reshape") && !text.contains("dynamic_dimension_size"), "{text}");
    let exes = compile(&m);
    for b in [2usize, 5] {
        let x = iota_f32(b * 6);
        check_f32(&bytes, &exes, &[("batch", b as i64)], &[Buffer::from_slice(&x, &[b, 2, 3]).unwrap()], &x);
    }
}

#[test]
fn flattening_batch_and_sequence_and_splitting_them_back_runs_specialised() {
    // x: [batch, seq, 6] → Reshape [-1, 6] (an axis batch*seq, a DynamicReshape whose size is
    // computed from the shapes) → * 3 → Reshape [Shape(x)[0], Shape(x)[1], 6]: y = 3x. The
    // jit evaluates the size operands when it specialises, so nothing runs on the interpreter.
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Err("seq"), Ok(6)]);
    dim_of(&mut g, "x", 0, "b");
    dim_of(&mut g, "x", 1, "s");
    g.ints("flat", &[2], &[-1, 6]).ints("six", &[1], &[6]).floats("three", &[], &[3.0]);
    g.op("Reshape", &["x", "flat"], "rows", &[])
        .op("Mul", &["rows", "three"], "scaled", &[])
        .op("Concat", &["b", "s", "six"], "back_shape", &[("axis", &[0])])
        .op("Reshape", &["scaled", "back_shape"], "y", &[])
        .out("y")
        .out("rows");
    let bytes = g.bytes();
    let m = import_dynamic(&bytes, &[&["batch", "seq", ""], &["batch*seq", ""]]);
    let exes = compile(&m);
    for (b, s) in [(2usize, 3usize), (3, 1), (1, 7)] {
        let x = iota_f32(b * s * 6);
        let want: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
        let xb = Buffer::from_slice(&x, &[b, s, 6]).unwrap();
        check_f32(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], std::slice::from_ref(&xb), &want);
        let [i, j] = exes.run(&[xb]);
        assert_eq!(i[1].dims(), vec![b * s, 6]);
        assert_eq!(j[1].dims(), vec![b * s, 6]);
    }
    exes.assert_specialized(3);
}

#[test]
fn equal_and_where_on_shapes_are_decided_at_import() {
    // The torch export of `expand(batch, seq)`: shape = Where(Equal([b, s], -1), 1, [b, s]);
    // y = ids + Expand(c, shape) with c = [[5]], and a second output Where(Equal(s, s), 2, 3)
    // broadcast the same way (seq == seq is true for every size).
    let mut g = G::default();
    g.input("ids", DataType::Int64, &[Err("batch"), Err("seq")]);
    dim_of(&mut g, "ids", 0, "b");
    dim_of(&mut g, "ids", 1, "s");
    g.ints("m1", &[2], &[-1, -1]).ints("ones", &[2], &[1, 1]).ints("c", &[1, 1], &[5]);
    g.ints("two", &[1, 1], &[2]).ints("three", &[1, 1], &[3]);
    g.op("Concat", &["b", "s"], "bs", &[("axis", &[0])])
        .op("Equal", &["bs", "m1"], "is_neg", &[])
        .op("Where", &["is_neg", "ones", "bs"], "shape", &[])
        .op("Expand", &["c", "shape"], "e", &[])
        .op("Add", &["ids", "e"], "y", &[])
        .op("Equal", &["s", "s"], "same", &[])
        .op("Where", &["same", "two", "three"], "pick", &[])
        .op("Expand", &["pick", "shape"], "z", &[])
        .out("y")
        .out("z");
    let bytes = g.bytes();
    let exes = compile(&import_dynamic(&bytes, &[&["batch", "seq"], &["batch", "seq"]]));
    for (b, s) in [(2usize, 3usize), (1, 4)] {
        let ids: Vec<i64> = (0..(b * s) as i64).map(|i| i * 10).collect();
        let want: Vec<i64> = ids.iter().map(|v| v + 5).collect();
        let buf = Buffer::from_slice(&ids, &[b, s]).unwrap();
        check_i64(&bytes, &exes, &[("batch", b as i64), ("seq", s as i64)], std::slice::from_ref(&buf), &want);
        for out in exes.run(&[buf]) {
            assert_eq!(out[1].to_vec::<i64>().unwrap(), vec![2; b * s]);
        }
    }
    exes.assert_specialized(2);
}

/// A model whose one node `op` reads `Shape(x) * Shape(x)` (`x: [batch, 2]`) as its shape
/// operand: `[batch*batch, 4]`, which no axis name can express.
fn squared_shape(op: &str) -> Vec<u8> {
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Ok(2)]);
    g.op("Shape", &["x"], "s", &[]).op("Mul", &["s", "s"], "sq", &[]);
    match op {
        "Expand" => g.floats("one", &[1, 1], &[1.0]).op("Expand", &["one", "sq"], "y", &[]),
        _ => g.op(op, &["sq"], "y", &[]),
    };
    g.out("y").bytes()
}

#[test]
fn sizes_the_axis_names_cannot_express_are_errors_naming_the_node() {
    for op in ["ConstantOfShape", "Expand"] {
        let e = load_bytes(&squared_shape(op)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, Error::NotImplemented { .. }), "{op}: {text}");
        assert!(text.contains("\"y\"") && text.contains(op) && text.contains("batch*batch"), "{op}: {text}");
        assert!(text.contains("--dim"), "{op}: {text}");
        // Bound, the same model imports.
        let mut opts = ImportOptions::default();
        opts.dims.insert("batch".into(), 3);
        let m = load_bytes_with(&squared_shape(op), None, &opts).unwrap();
        assert_eq!(m.outputs[0].shape.dims, [9, 4]);
    }

    // A strided slice to a symbolic end.
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Err("seq")]);
    g.ints("zero", &[1], &[0]).ints("one", &[1], &[1]).ints("two", &[1], &[2]);
    dim_of(&mut g, "x", 1, "s");
    g.op("Slice", &["x", "zero", "s", "one", "two"], "y", &[]).out("y");
    let text = load_bytes(&g.bytes()).unwrap_err().to_string();
    assert!(text.contains("\"y\"") && text.contains("step 2"), "{text}");

    // Gathering a dynamic axis of data whose other axis is dynamic too, with run-time indices.
    let mut g = G::default();
    g.input("x", DataType::Float, &[Err("batch"), Err("seq")]);
    g.input("i", DataType::Int64, &[Ok(2)]);
    g.op("Gather", &["x", "i"], "y", &[("axis", &[1])]).out("y");
    let text = load_bytes(&g.bytes()).unwrap_err().to_string();
    assert!(text.contains("\"y\"") && text.contains("dynamic"), "{text}");
}

/// Optional, outside CI: `$TENSORJIT_ONNX_DYNAMIC_DIR` holds `model.onnx` (inputs
/// `[batch, sequence]`) and `case_*/` folders with one `NAME.npy` per model input and the
/// onnxruntime outputs `out_K.npy`. The model is imported once with its dims dynamic and run on
/// one jit executable at every case: no interpreter, and every float output within 1e-4 of
/// onnxruntime relative to the output's largest magnitude. Skipped when the variable is unset.
#[test]
fn a_real_model_matches_onnxruntime_at_every_shape_on_one_executable() {
    let Some(dir) = std::env::var_os("TENSORJIT_ONNX_DYNAMIC_DIR").map(std::path::PathBuf::from) else {
        eprintln!("TENSORJIT_ONNX_DYNAMIC_DIR unset: skipped");
        return;
    };
    let m = tensorjit::onnx::load(dir.join("model.onnx")).unwrap();
    assert!(m.inputs.iter().all(|i| i.shape.is_dynamic()), "{:?}", m.inputs);
    let exe = tensorjit::new_with_config("jit").unwrap().compile(m.module.clone()).unwrap();
    let mut cases: Vec<_> =
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    cases.sort();
    assert!(!cases.is_empty(), "no case_* folders in {}", dir.display());
    for case in &cases {
        let ins: Vec<Buffer> = m
            .inputs
            .iter()
            .map(|i| tensorjit::weights::load_npy(case.join(format!("{}.npy", i.name))).unwrap())
            .collect();
        let refs: Vec<&Buffer> = ins.iter().collect();
        let got = exe.execute(&refs, &[]).unwrap();
        let r = exe.compile_report().unwrap().execution;
        assert_eq!(r.interpreted, None, "{r}");
        eprintln!("{}: {}", case.display(), r.summary().trim());
        for (k, g) in got.iter().enumerate() {
            let want = tensorjit::weights::load_npy(case.join(format!("out_{k}.npy"))).unwrap();
            assert_eq!(g.dims(), want.dims(), "{} output {k}", case.display());
            let (g, w) = (g.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
            let scale = w.iter().fold(0f32, |a, v| a.max(v.abs())).max(1e-30);
            let err = g.iter().zip(&w).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            eprintln!("{} output {k}: max abs err {err:e}, scale {scale}", case.display());
            assert!(err / scale <= 1e-4, "{} output {k}: max abs error {err} vs scale {scale}", case.display());
        }
    }
    eprintln!("{}", exe.specialization_stats().unwrap());
}
