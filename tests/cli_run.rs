//! Tests of `tensorjit run` (the library side, `tensorjit::runtime::cli_run`): IR text written by
//! the printer, .npy inputs written with npyz, outputs read back and checked against values
//! worked by hand.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;
use tensorjit::runtime::cli_run::{RunOptions, Storage, run, run_command};
use tensorjit::{DType, Shape};

/// A fresh, empty scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorjit_cli_run_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write_npy<T: npyz::Serialize + npyz::AutoSerialize + Copy>(path: &Path, dims: &[u64], data: &[T]) {
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(dims)
        .writer(BufWriter::new(File::create(path).unwrap()))
        .begin_nd()
        .unwrap();
    w.extend(data.iter().copied()).unwrap();
    w.finish().unwrap();
}

fn read_npy<T: npyz::Deserialize>(path: &Path) -> (Vec<u64>, String, Vec<T>) {
    let f = npyz::NpyFile::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let shape = f.shape().to_vec();
    let dtype = f.dtype().descr();
    (shape, dtype, f.into_vec::<T>().unwrap())
}

/// Builds a module with the interp backend's builder and writes its IR text to `dir/name.tjir`.
fn write_ir(dir: &Path, name: &str, build: impl FnOnce(&tensorjit::Function)) -> PathBuf {
    let b = tensorjit::new_with_config("interp").unwrap();
    let bld = b.builder(name);
    build(&bld.main());
    let text = tensorjit::ir::text::print_module(&bld.module());
    let path = dir.join(format!("{name}.tjir"));
    std::fs::write(&path, text).unwrap();
    path
}

fn opts(file: PathBuf, inputs: &[(&str, PathBuf)], out: PathBuf) -> RunOptions {
    RunOptions {
        file,
        inputs: inputs.iter().map(|(n, p)| (n.to_string(), p.clone())).collect(),
        out,
        backend: Some("interp".into()),
        repeat: None,
    }
}

/// `out0 = x + broadcast(y)`, `out1 = sum(x, axis 1)` on x f32[2,3], y f32[3].
fn add_sum_ir(dir: &Path) -> PathBuf {
    write_ir(dir, "add_sum", |main| {
        let x = main.parameter("x", Shape::new(DType::Float32, &[2, 3])).unwrap();
        let y = main.parameter("y", Shape::new(DType::Float32, &[3])).unwrap();
        let yb = main.broadcast_in_dim(y, &Shape::new(DType::Float32, &[2, 3]), &[1]).unwrap();
        let s = main.add(x, yb).unwrap();
        let r = main.reduce_sum(x, &[1]).unwrap();
        main.return_(&[s, r]).unwrap();
    })
}

#[test]
fn runs_a_printed_module_on_npy_inputs() {
    let dir = scratch("basic");
    let ir = add_sum_ir(&dir);
    write_npy(&dir.join("x.npy"), &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    write_npy(&dir.join("y.npy"), &[3], &[10.0f32, 20.0, 30.0]);
    let out = dir.join("out");
    let mut o = opts(ir, &[("y", dir.join("y.npy")), ("x", dir.join("x.npy"))], out.clone());
    o.repeat = Some(3);
    let report = run(&o).unwrap();
    assert_eq!(report.backend, "interp");
    assert_eq!(report.outputs.len(), 2);
    assert_eq!(report.outputs[0].shape, Shape::new(DType::Float32, &[2, 3]));
    assert_eq!(report.outputs[1].shape, Shape::new(DType::Float32, &[2]));
    assert_eq!(report.outputs[0].storage, Storage::Native);
    let rep = report.repeat.unwrap();
    assert_eq!(rep.n, 3);
    assert!(rep.min <= rep.median);

    let (shape, descr, v) = read_npy::<f32>(&out.join("out0.npy"));
    assert_eq!(shape, vec![2, 3]);
    assert_eq!(descr, "'<f4'");
    assert_eq!(v, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    let (shape, _, v) = read_npy::<f32>(&out.join("out1.npy"));
    assert_eq!(shape, vec![2]);
    assert_eq!(v, vec![6.0, 15.0]);
    let manifest = std::fs::read_to_string(out.join("outputs.txt")).unwrap();
    assert!(manifest.contains("out0.npy f32 [2, 3] native"), "{manifest}");

    // The CLI entry point (prints a summary) on the same files.
    let args: Vec<String> = [
        o.file.to_str().unwrap(),
        "--input",
        &format!("x={}", dir.join("x.npy").display()),
        "--input",
        &format!("y={}", dir.join("y.npy").display()),
        "--out",
        out.to_str().unwrap(),
        "--backend",
        "interp",
        "--repeat",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    run_command(&args).unwrap();
    assert!(run_command(&["--help".to_string()]).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn input_mismatches_name_the_parameter() {
    let dir = scratch("errors");
    let ir = add_sum_ir(&dir);
    write_npy(&dir.join("x.npy"), &[2, 3], &[0.0f32; 6]);
    write_npy(&dir.join("y.npy"), &[3], &[0.0f32; 3]);
    write_npy(&dir.join("y4.npy"), &[4], &[0.0f32; 4]);
    write_npy(&dir.join("yi.npy"), &[3], &[0i32; 3]);
    let out = dir.join("out");
    let err = |inputs: &[(&str, PathBuf)]| run(&opts(ir.clone(), inputs, out.clone())).unwrap_err().to_string();

    let e = err(&[("x", dir.join("x.npy"))]);
    assert!(e.contains("\"y\""), "missing: {e}");
    let e = err(&[("x", dir.join("x.npy")), ("y", dir.join("y.npy")), ("z", dir.join("y.npy"))]);
    assert!(e.contains("\"z\""), "extra: {e}");
    let e = err(&[("x", dir.join("x.npy")), ("y", dir.join("y4.npy"))]);
    assert!(e.contains("\"y\"") && e.contains("[4]"), "shape: {e}");
    let e = err(&[("x", dir.join("x.npy")), ("y", dir.join("yi.npy"))]);
    assert!(e.contains("\"y\"") && e.contains("i4"), "dtype: {e}");
    let e = err(&[("x", dir.join("x.npy")), ("y", dir.join("missing.npy"))]);
    assert!(e.contains("missing.npy"), "no file: {e}");
    assert!(!out.exists(), "nothing written on error");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bfloat16_goes_through_uint16_bits() {
    let dir = scratch("bf16");
    let ir = write_ir(&dir, "bf16", |main| {
        let x = main.parameter("x", Shape::new(DType::BFloat16, &[4])).unwrap();
        let d = main.add(x, x).unwrap();
        main.return_(&[d]).unwrap();
    });
    // bf16 bits: 1.0 = 0x3F80, 1.5 = 0x3FC0, −0.5 = 0xBF00, 0.0 = 0x0000.
    write_npy(&dir.join("x.npy"), &[4], &[0x3F80u16, 0x3FC0, 0xBF00, 0x0000]);
    let out = dir.join("out");
    let report = run(&opts(ir, &[("x", dir.join("x.npy"))], out.clone())).unwrap();
    assert_eq!(report.outputs[0].storage, Storage::Bf16AsUint16);
    let (shape, descr, v) = read_npy::<u16>(&out.join("out0.npy"));
    assert_eq!(shape, vec![4]);
    assert_eq!(descr, "'<u2'");
    // 2.0 = 0x4000, 3.0 = 0x4040, −1.0 = 0xBF80, 0.0.
    assert_eq!(v, vec![0x4000, 0x4040, 0xBF80, 0x0000]);
    let manifest = std::fs::read_to_string(out.join("outputs.txt")).unwrap();
    assert!(manifest.contains("out0.npy bf16 [4] bf16-bits-as-uint16"), "{manifest}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn other_dtypes_round_trip() {
    let dir = scratch("dtypes");
    let ir = write_ir(&dir, "dtypes", |main| {
        let a = main.parameter("a", Shape::new(DType::Int64, &[3])).unwrap();
        let b = main.parameter("b", Shape::new(DType::Int64, &[3])).unwrap();
        let gt = main.greater_than(a, b).unwrap();
        let re = main.parameter("re", Shape::new(DType::Float32, &[2])).unwrap();
        let im = main.parameter("im", Shape::new(DType::Float32, &[2])).unwrap();
        let c = main.complex(re, im).unwrap();
        let h = main.parameter("h", Shape::new(DType::Float16, &[2])).unwrap();
        let u = main.parameter("u", Shape::new(DType::Uint8, &[])).unwrap();
        main.return_(&[gt, a, c, h, u]).unwrap();
    });
    write_npy(&dir.join("a.npy"), &[3], &[1i64, 5, -3]);
    write_npy(&dir.join("b.npy"), &[3], &[2i64, 5, -4]);
    write_npy(&dir.join("re.npy"), &[2], &[1.0f32, -2.0]);
    write_npy(&dir.join("im.npy"), &[2], &[0.5f32, 3.0]);
    write_npy(&dir.join("h.npy"), &[2], &[half::f16::from_f32(0.25), half::f16::from_f32(-8.0)]);
    write_npy(&dir.join("u.npy"), &[], &[200u8]);
    let out = dir.join("out");
    let names = ["a", "b", "re", "im", "h", "u"];
    let inputs: Vec<(&str, PathBuf)> = names.iter().map(|n| (*n, dir.join(format!("{n}.npy")))).collect();
    run(&opts(ir, &inputs, out.clone())).unwrap();
    let (_, descr, v) = read_npy::<bool>(&out.join("out0.npy"));
    assert_eq!(descr, "'|b1'");
    assert_eq!(v, vec![false, false, true]);
    assert_eq!(read_npy::<i64>(&out.join("out1.npy")).2, vec![1, 5, -3]);
    let (_, descr, v) = read_npy::<num_complex::Complex32>(&out.join("out2.npy"));
    assert_eq!(descr, "'<c8'");
    assert_eq!(v, vec![num_complex::Complex32::new(1.0, 0.5), num_complex::Complex32::new(-2.0, 3.0)]);
    assert_eq!(
        read_npy::<half::f16>(&out.join("out3.npy")).2,
        vec![half::f16::from_f32(0.25), half::f16::from_f32(-8.0)]
    );
    let (shape, _, v) = read_npy::<u8>(&out.join("out4.npy"));
    assert_eq!(shape, Vec::<u64>::new());
    assert_eq!(v, vec![200]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn packed_dtypes_go_through_uint8_bytes() {
    let dir = scratch("packed");
    let ir = write_ir(&dir, "packed", |main| {
        let x = main.parameter("x", Shape::new(DType::Int4, &[3])).unwrap();
        main.return_(&[x]).unwrap();
    });
    // Int4 [1, −2, 7]: element 0 in the low nibble → bytes 0xE1, 0x07.
    write_npy(&dir.join("x.npy"), &[2], &[0xE1u8, 0x07]);
    let out = dir.join("out");
    let report = run(&opts(ir.clone(), &[("x", dir.join("x.npy"))], out.clone())).unwrap();
    assert_eq!(report.outputs[0].storage, Storage::PackedUint8);
    assert_eq!(report.outputs[0].shape, Shape::new(DType::Int4, &[3]));
    let (shape, descr, v) = read_npy::<u8>(&out.join("out0.npy"));
    assert_eq!((shape, descr.as_str()), (vec![2], "'|u1'"));
    assert_eq!(v, vec![0xE1, 0x07]);
    // Three bytes cannot be an Int4[3].
    write_npy(&dir.join("bad.npy"), &[3], &[1u8, 2, 3]);
    let e = run(&opts(ir, &[("x", dir.join("bad.npy"))], dir.join("out2"))).unwrap_err().to_string();
    assert!(e.contains("\"x\""), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_backend_is_an_error() {
    let dir = scratch("backend");
    let ir = add_sum_ir(&dir);
    write_npy(&dir.join("x.npy"), &[2, 3], &[0.0f32; 6]);
    write_npy(&dir.join("y.npy"), &[3], &[0.0f32; 3]);
    let mut o = opts(ir, &[("x", dir.join("x.npy")), ("y", dir.join("y.npy"))], dir.join("out"));
    o.backend = Some("no_such_backend".into());
    let e = run(&o).unwrap_err().to_string();
    assert!(e.contains("no_such_backend"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
