//! Tests of `tensorjit run` (the library side, `tensorjit::cli::run`, and the binary): IR text
//! written by the printer, .npy inputs written with npyz, outputs read back and checked against
//! values worked by hand.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use npyz::WriterBuilder;
use tensorjit::cli::{RunOptions, Storage, read_npy_bytes, read_text, run};
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
        ..RunOptions::default()
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

    // The command (prints a summary) on the same files.
    let x = format!("x={}", dir.join("x.npy").display());
    let y = format!("y={}", dir.join("y.npy").display());
    let args =
        ["run", o.file.to_str().unwrap(), "--input", &x, "--input", &y, "--out", out.to_str().unwrap(), "--backend"];
    let (code, err) = tensorjit(&[&args[..], &["interp", "--repeat", "2"]].concat(), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(tensorjit(&["run", "--help"], &[]).0, 0);
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
    assert!(e.contains("\"y\"") && e.contains("i32"), "dtype: {e}");
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

/// A .npy file of format `version` with the header dict `dict` (padded to 64 bytes, as NumPy
/// does) followed by `data`.
fn npy_bytes(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let prefix = if version == 1 { 10 } else { 12 };
    let mut header = dict.to_string();
    while !(prefix + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY".to_vec();
    b.extend([version, 0]);
    if version == 1 {
        b.extend((header.len() as u16).to_le_bytes());
    } else {
        b.extend((header.len() as u32).to_le_bytes());
    }
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

/// Runs the `tensorjit` binary; returns (exit code, stderr).
fn tensorjit(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorjit"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("tensorjit runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (out.status.code().expect("exited, not killed by a signal"), err)
}

#[test]
fn npy_reader_decodes_byte_order_and_fortran_order() {
    // >i4 [2, 3] in Fortran order: columns (1, 4), (2, 5), (3, 6), each big-endian.
    let data: Vec<u8> = [1i32, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_be_bytes()).collect();
    let f = npy_bytes(1, "{'descr': '>i4', 'fortran_order': True, 'shape': (2, 3), }", &data);
    let b = read_npy_bytes(&f, "m.npy").unwrap().into_buffer().unwrap();
    assert_eq!(b.shape(), &Shape::new(DType::Int32, &[2, 3]));
    assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    // Big-endian complex: each half is swapped on its own.
    let data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_be_bytes()).collect();
    let f = npy_bytes(2, "{'descr': '>c8', 'fortran_order': False, 'shape': (), }", &data);
    let b = read_npy_bytes(&f, "c.npy").unwrap().into_buffer().unwrap();
    assert_eq!(b.to_vec::<num_complex::Complex32>().unwrap(), vec![num_complex::Complex32::new(1.5, -2.0)]);
}

#[test]
fn hostile_npy_headers_are_errors_naming_the_file() {
    // A v2 header claiming 4 GiB in a 13-byte file: refused before any allocation.
    let mut f = b"\x93NUMPY\x02\x00".to_vec();
    f.extend(u32::MAX.to_le_bytes());
    f.push(b'{');
    assert_eq!(f.len(), 13);
    let e = read_npy_bytes(&f, "huge_header.npy").unwrap_err().to_string();
    assert!(e.contains("huge_header.npy") && e.contains("4294967295"), "{e}");
    // A shape whose byte size overflows, and one that is far larger than the file.
    let f = npy_bytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", &[]);
    let e = read_npy_bytes(&f, "overflow.npy").unwrap_err().to_string();
    assert!(e.contains("overflow.npy") && e.contains("limit"), "{e}");
    // A dim beyond i64::MAX is refused even when another dim makes the array empty.
    let f = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775808), }", &[]);
    let e = read_npy_bytes(&f, "wide.npy").unwrap_err().to_string();
    assert!(e.contains("wide.npy") && e.contains("limit"), "{e}");
    let f = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", &[0; 8]);
    let e = read_npy_bytes(&f, "short.npy").unwrap_err().to_string();
    assert!(e.contains("short.npy") && e.contains("truncated") && e.contains("8"), "{e}");
    // Trailing bytes after the data.
    let f = npy_bytes(1, "{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }", &[1, 2, 3]);
    let e = read_npy_bytes(&f, "trailing.npy").unwrap_err().to_string();
    assert!(e.contains("trailing.npy") && e.contains("1 trailing bytes"), "{e}");
    // Malformed dicts, deep nesting and structured dtypes are errors, not panics.
    for (dict, want) in [
        ("{'descr': '<f4', 'shape': (2,), }", "needs the keys"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", "non-negative"),
        ("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (), }", "True or False"),
        ("{'descr': '<q9', 'fortran_order': False, 'shape': (), }", "unsupported .npy dtype"),
        ("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", "structured"),
        (&format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", "(".repeat(100_000)), "integer"),
    ] {
        let e = read_npy_bytes(&npy_bytes(2, dict, &[]), "bad.npy").unwrap_err().to_string();
        assert!(e.contains("bad.npy") && e.contains(want), "{dict:.80}: {e}");
    }
    let e = read_npy_bytes(b"\x93NUMPY\x01", "cut.npy").unwrap_err().to_string();
    assert!(e.contains("cut.npy") && e.contains("ends within its magic string"), "{e}");
}

#[test]
fn npy_data_is_checked_against_the_tensor_size_limit() {
    let dir = scratch("limit");
    // A dynamic axis, so that the module itself is within the limit.
    let ir = write_ir(&dir, "limit", |main| {
        let x = main.parameter("x", Shape::with_names(DType::Float32, &[-1], &["n"]).unwrap()).unwrap();
        main.return_(&[x]).unwrap();
    });
    // 1200 data bytes, complete and well-formed, over a limit of 1000 bytes.
    std::fs::write(
        dir.join("x.npy"),
        npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (300,), }", &[0; 1200]),
    )
    .unwrap();
    let x = format!("x={}", dir.join("x.npy").display());
    let out = dir.join("out");
    let args = ["run", ir.to_str().unwrap(), "--input", &x, "--out", out.to_str().unwrap(), "--backend", "interp"];
    let (code, err) = tensorjit(&args, &[("TENSORJIT_MAX_TENSOR_BYTES", "1000")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("x.npy") && err.contains("limit") && err.contains("1000 bytes"), "{err}");
    // Within the default limit the same file runs.
    let (code, err) = tensorjit(&args, &[]);
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn numeric_flags_are_bounded() {
    // Usage errors: exit status 2, before any file is read.
    for n in ["18446744073709551615", "1000000000000", "0", "-1", "1e3"] {
        let (code, err) = tensorjit(&["run", "m.tjir", "--out", "o", "--repeat", n], &[]);
        assert_eq!(code, 2, "--repeat {n}: {err}");
        assert!(err.contains("--repeat") && err.contains("1000000"), "--repeat {n}: {err}");
    }
    let o = RunOptions { repeat: Some(usize::MAX), ..opts(PathBuf::from("m.tjir"), &[], PathBuf::from("o")) };
    let e = run(&o).unwrap_err().to_string();
    assert!(e.contains("--repeat"), "{e}");
}

#[test]
fn input_files_are_read_in_bounded_chunks() {
    // /dev/zero never ends: the first chunk's NUL byte stops the read.
    let (code, err) = tensorjit(&["check", "/dev/zero"], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/dev/zero") && err.contains("NUL byte at offset 0"), "{err}");
    let e = read_text(&b"module @m\n\xff"[..], "bad.tjir").unwrap_err().to_string();
    assert!(e.contains("bad.tjir") && e.contains("UTF-8") && e.contains("offset 10"), "{e}");
    assert_eq!(read_text(&b"module @m\n"[..], "ok.tjir").unwrap(), "module @m\n");
    let dir = scratch("textdir");
    let (code, err) = tensorjit(&["fmt", dir.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is a directory"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_directory_is_checked_before_executing() {
    let dir = scratch("outdir");
    let ir = add_sum_ir(&dir);
    write_npy(&dir.join("x.npy"), &[2, 3], &[0.0f32; 6]);
    write_npy(&dir.join("y.npy"), &[3], &[0.0f32; 3]);
    let x = format!("x={}", dir.join("x.npy").display());
    let y = format!("y={}", dir.join("y.npy").display());
    let run_to = |out: &str| tensorjit(&["run", ir.to_str().unwrap(), "-i", &x, "-i", &y, "--out", out], &[]);
    // An empty --out is a usage error (exit status 2).
    let (code, err) = run_to("");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out") && err.contains("empty"), "{err}");
    let (code, err) = tensorjit(&["run", ir.to_str().unwrap(), "-i", &x, "-i", &y, "--out="], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out"), "{err}");
    // A file where the directory should be, and a path below a file.
    let file = dir.join("a_file");
    std::fs::write(&file, "not a directory").unwrap();
    let (code, err) = run_to(file.to_str().unwrap());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a_file") && err.contains("not a directory"), "{err}");
    let (code, err) = run_to(file.join("sub").to_str().unwrap());
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a_file/sub") && err.contains("cannot create"), "{err}");
    // The library checks it too, before executing.
    let e = run(&opts(ir.clone(), &[("x", dir.join("x.npy")), ("y", dir.join("y.npy"))], PathBuf::new()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--out"), "{e}");
    assert_eq!(run_to(dir.join("fresh").to_str().unwrap()).0, 0);
    assert!(dir.join("fresh/out0.npy").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--profile` / `--trace`: every step of every profiled execution is an event; the trace file
/// is Chrome's JSON format.
#[test]
fn profile_and_trace_record_every_step() {
    let dir = scratch("profile");
    let ir = add_sum_ir(&dir);
    write_npy(&dir.join("x.npy"), &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    write_npy(&dir.join("y.npy"), &[3], &[10.0f32, 20.0, 30.0]);
    for backend in ["interp", "jit"] {
        let trace = dir.join(format!("{backend}.json"));
        let mut o = opts(ir.clone(), &[("y", dir.join("y.npy")), ("x", dir.join("x.npy"))], dir.join("out"));
        o.backend = Some(backend.into());
        o.repeat = Some(3);
        o.trace = Some(trace.clone());
        let report = run(&o).unwrap();
        let profile = report.profile.expect("a profile");
        let events = profile.events();
        assert!(!events.is_empty());
        // Three profiled executions (the warm-up is not profiled): each step thrice.
        let summary = profile.summary();
        assert!(summary.iter().all(|s| s.calls % 3 == 0), "{summary:?}");
        let text = std::fs::read_to_string(&trace).unwrap();
        assert!(text.starts_with("{\"traceEvents\":["), "{text}");
        assert_eq!(text.matches("\"ph\":\"X\"").count(), events.len(), "{text}");
    }
    // The interpreter times each node: the broadcast, the add and the reduction.
    let mut o = opts(ir, &[("y", dir.join("y.npy")), ("x", dir.join("x.npy"))], dir.join("out"));
    o.profile = true;
    let names: Vec<String> = run(&o).unwrap().profile.unwrap().events().into_iter().map(|e| e.name).collect();
    for want in ["broadcast_in_dim f32[2,3]", "add f32[2,3]", "reduce_sum f32[2]"] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
