//! Tests of `tensorjit::weights` (safetensors, `.npz`, `.npy`) and of the IR text's
//! `constant safetensors("FILE", "TENSOR")` form: round trips, constants added to graphs, and
//! hostile files that must be errors naming the file and the tensor, never panics.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tensorjit::ir::module::Module;
use tensorjit::ir::op::{ConstData, Op};
use tensorjit::ir::text::{
    PrintOptions, SideFile, parse_module, parse_module_with_constants, print_module_with_side_file,
};
use tensorjit::weights::{self, load, load_npy, load_npz, load_safetensors, save_npz, save_safetensors};
use tensorjit::{Buffer, DType, Shape};

/// A fresh, empty scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorjit_weights_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn f32s(n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|i| i as f32 * scale - 1.0).collect()
}

/// A safetensors file with the given header JSON and data bytes.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

fn err_of<T: std::fmt::Debug>(r: tensorjit::Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn safetensors_round_trip_every_dtype() {
    let dir = scratch("st_round_trip");
    let a = Buffer::from_slice(&f32s(12, 0.5), &[3, 4]).unwrap();
    let b = Buffer::from_slice(&[1i64, -2, 3], &[3]).unwrap();
    let c = Buffer::from_slice(&[true, false, true, true], &[2, 2]).unwrap();
    let d = Buffer::from_slice(&[half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)], &[2]).unwrap();
    let e = Buffer::from_slice(&[half::f16::from_f32(0.25)], &[]).unwrap();
    let f = Buffer::from_slice(&[7u8, 8, 9], &[3]).unwrap();
    let g = Buffer::from_slice(&[num_complex::Complex32::new(1.0, -1.0)], &[1]).unwrap();
    let empty = Buffer::from_slice::<f32>(&[], &[0, 5]).unwrap();
    let path = dir.join("w.safetensors");
    let all = [("a", &a), ("b", &b), ("c", &c), ("d", &d), ("e", &e), ("f", &f), ("g", &g), ("empty", &empty)];
    save_safetensors(&path, &all).unwrap();

    let w = load_safetensors(&path).unwrap();
    assert!(w.is_mapped());
    assert_eq!(w.len(), all.len());
    let mut names = w.names();
    names.sort();
    assert_eq!(names, ["a", "b", "c", "d", "e", "empty", "f", "g"]);
    for (name, buf) in all {
        assert_eq!(w.shape(name).as_ref(), Some(buf.shape()), "{name}");
        assert_eq!(w.bytes(name).unwrap(), buf.to_bytes().unwrap().as_slice(), "{name}");
        let got = w.get(name).unwrap();
        assert_eq!(got.shape(), buf.shape());
        assert_eq!(got.to_bytes().unwrap(), buf.to_bytes().unwrap());
    }
    assert_eq!(w.info("a").unwrap().file_dtype, "F32");
    assert_eq!(w.info("d").unwrap().file_dtype, "BF16");
    assert_eq!(w.total_bytes(), all.iter().map(|(_, b)| b.to_bytes().unwrap().len() as u64).sum::<u64>());
    // The views are aligned to their element size (the writer orders tensors by it).
    let p = w.bytes("b").unwrap().as_ptr() as usize;
    assert_eq!(p % 8, 0);
    // The safetensors crate itself reads the file.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("a").unwrap().shape(), &[3, 4]);
    // `load` picks the format by extension, and by content for another one.
    assert_eq!(load(&path).unwrap().len(), all.len());
    std::fs::copy(&path, dir.join("weights.bin")).unwrap();
    assert_eq!(load(dir.join("weights.bin")).unwrap().len(), all.len());
    // Unknown tensors and unsaveable dtypes are errors naming the file and the tensor.
    let e = err_of(w.buffer("nope"));
    assert!(e.contains("w.safetensors") && e.contains("\"nope\"") && e.contains("8 tensors"), "{e}");
    assert!(w.get("nope").is_none());
    let c128 = Buffer::from_slice(&[num_complex::Complex64::new(1.0, 0.0)], &[1]).unwrap();
    let e = err_of(save_safetensors(dir.join("x.safetensors"), &[("z", &c128)]));
    assert!(e.contains("\"z\"") && e.contains("c128"), "{e}");
    let e = err_of(save_safetensors(dir.join("x.safetensors"), &[("a", &a), ("a", &b)]));
    assert!(e.contains("twice"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn weights_become_constants_of_a_graph() {
    let dir = scratch("constants");
    let wdata = f32s(6, 1.0);
    let w_buf = Buffer::from_slice(&wdata, &[2, 3]).unwrap();
    let path = dir.join("w.safetensors");
    save_safetensors(&path, &[("layer.weight", &w_buf)]).unwrap();
    let w = load_safetensors(&path).unwrap();

    // Through the builder API.
    let backend = tensorjit::new_with_config("interp").unwrap();
    let builder = backend.builder("m");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[2, 3])).unwrap();
    let c = w.constant(&f, "layer.weight").unwrap();
    let y = f.add(x, c).unwrap();
    f.return_(&[y]).unwrap();
    assert!(w.constant(&f, "missing").is_err());
    let exe = builder.compile().unwrap();
    let xs = Buffer::from_slice(&[10.0f32; 6], &[2, 3]).unwrap();
    let out = exe.execute(&[&xs], &[]).unwrap();
    let want: Vec<f32> = wdata.iter().map(|v| v + 10.0).collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);

    // Into an IR module directly.
    let mut m = Module::new("direct");
    let main = m.main;
    let v = w.add_constant(&mut m, main, "layer.weight").unwrap();
    m.func_mut(m.main).outputs = Some(vec![v]);
    tensorjit::ir::verify::verify(&m).unwrap();
    let out = backend.compile(m).unwrap().execute(&[], &[]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), wdata);
    let mut m = Module::new("bad");
    let e = err_of(w.add_constant(&mut m, tensorjit::ir::module::FuncId(7), "layer.weight"));
    assert!(e.contains("layer.weight"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn npz_and_npy_load() {
    let dir = scratch("npz");
    let a = Buffer::from_slice(&f32s(6, 0.25), &[2, 3]).unwrap();
    let b = Buffer::from_slice(&[5i32, 6], &[2]).unwrap();
    let bf = Buffer::from_slice(&[half::bf16::from_f32(3.0)], &[1]).unwrap();
    let stored = dir.join("stored.npz");
    save_npz(&stored, &[("a", &a), ("dir/b", &b), ("bf", &bf)]).unwrap();
    let w = load_npz(&stored).unwrap();
    assert!(!w.is_mapped());
    assert_eq!(w.names(), ["a", "dir/b", "bf"]);
    assert_eq!(w.buffer("a").unwrap().to_vec::<f32>().unwrap(), f32s(6, 0.25));
    assert_eq!(w.buffer("dir/b").unwrap().to_vec::<i32>().unwrap(), vec![5, 6]);
    // bf16 is stored as its uint16 bits (the .npy convention): it loads as u16.
    assert_eq!(w.shape("bf"), Some(Shape::new(DType::Uint16, &[1])));
    assert_eq!(w.info("a").unwrap().file_dtype, "<f4");
    // Constants from decoded data share it.
    let (shape, data) = w.const_data("a").unwrap();
    assert_eq!(shape, Shape::new(DType::Float32, &[2, 3]));
    assert_eq!(data.0.as_slice(), w.bytes("a").unwrap());

    // A deflated archive, as np.savez_compressed writes.
    let deflated = dir.join("deflated.npz");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&deflated).unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        let mut npy = Vec::new();
        weights::npy::write_npy_to(&mut npy, &a, "a").unwrap();
        z.start_file("x.npy", opts).unwrap();
        z.write_all(&npy).unwrap();
        z.finish().unwrap();
    }
    let w = load(&deflated).unwrap();
    assert_eq!(w.buffer("x").unwrap().to_vec::<f32>().unwrap(), f32s(6, 0.25));

    // A single .npy.
    let npy = dir.join("vec.npy");
    weights::write_npy(&npy, &b).unwrap();
    assert_eq!(load_npy(&npy).unwrap().to_vec::<i32>().unwrap(), vec![5, 6]);
    let w = load(&npy).unwrap();
    assert_eq!(w.names(), ["vec"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hostile_safetensors_files_are_errors_naming_the_file() {
    let dir = scratch("hostile_st");
    let good = safetensors_bytes(r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &[0; 8]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "too short"),
        ("short_len", vec![1, 2, 3], "too short"),
        ("huge_header", u64::MAX.to_le_bytes().to_vec(), "header length"),
        (
            "header_past_end",
            {
                let mut b = 1000u64.to_le_bytes().to_vec();
                b.extend(b"{}");
                b
            },
            "past the end",
        ),
        ("truncated", good[..good.len() - 3].to_vec(), "truncated"),
        ("trailing", [good.clone(), vec![0; 4]].concat(), "truncated or padded"),
        ("not_json", safetensors_bytes("{not json", &[]), "not a valid safetensors file"),
        (
            "offsets_past_end",
            safetensors_bytes(r#"{"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &[0; 4]),
            "truncated",
        ),
        (
            "overlap",
            safetensors_bytes(
                r#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}"#,
                &[0; 6],
            ),
            "overlap",
        ),
        (
            "size_mismatch",
            safetensors_bytes(r#"{"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, &[0; 8]),
            "does not match",
        ),
        (
            "overflow",
            safetensors_bytes(r#"{"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#, &[]),
            "overflow",
        ),
        (
            "wide_dim",
            safetensors_bytes(r#"{"t":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}}"#, &[]),
            "exceeds i64::MAX",
        ),
        (
            "deep_rank",
            safetensors_bytes(
                &format!(r#"{{"t":{{"dtype":"U8","shape":[{}],"data_offsets":[0,1]}}}}"#, vec!["1"; 65].join(",")),
                &[0],
            ),
            "65 dimensions",
        ),
        (
            "bad_dtype",
            safetensors_bytes(r#"{"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}"#, &[0]),
            "not a valid",
        ),
        (
            "deep_json",
            safetensors_bytes(&format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)), &[]),
            "not a valid",
        ),
    ];
    for (name, bytes, want) in cases {
        let path = dir.join(format!("{name}.safetensors"));
        std::fs::write(&path, &bytes).unwrap();
        let e = err_of(load_safetensors(&path));
        assert!(e.contains(&format!("{name}.safetensors")) && e.contains(want), "{name}: {e}");
    }
    // Bool bytes other than 0/1 load, but the tensor is refused when materialised.
    let path = dir.join("bool.safetensors");
    std::fs::write(&path, safetensors_bytes(r#"{"flag":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#, &[1, 7]))
        .unwrap();
    let w = load_safetensors(&path).unwrap();
    let e = err_of(w.buffer("flag"));
    assert!(e.contains("bool.safetensors") && e.contains("\"flag\"") && e.contains("byte 7"), "{e}");
    // A dtype tensorjit lacks is listed, and refused by name.
    let path = dir.join("f6.safetensors");
    std::fs::write(&path, safetensors_bytes(r#"{"q":{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}}"#, &[0; 3]))
        .unwrap();
    let w = load_safetensors(&path).unwrap();
    assert_eq!(w.names(), ["q"]);
    assert_eq!(w.shape("q"), None);
    let e = err_of(w.buffer("q"));
    assert!(e.contains("f6.safetensors") && e.contains("\"q\"") && e.contains("F6_E2M3"), "{e}");
    // Not a file.
    let e = err_of(load_safetensors(&dir));
    assert!(e.contains("not a regular file"), "{e}");
    let e = err_of(load_safetensors(dir.join("missing.safetensors")));
    assert!(e.contains("missing.safetensors"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Overwrites the uncompressed size of every entry of a zip archive (local and central headers).
fn patch_zip_sizes(bytes: &mut [u8], size: u32) {
    let mut i = 0;
    while i + 30 <= bytes.len() {
        if bytes[i..].starts_with(b"PK\x03\x04") {
            bytes[i + 22..i + 26].copy_from_slice(&size.to_le_bytes());
        } else if bytes[i..].starts_with(b"PK\x01\x02") {
            bytes[i + 24..i + 28].copy_from_slice(&size.to_le_bytes());
        }
        i += 1;
    }
}

#[test]
fn hostile_npz_files_are_errors_naming_the_member() {
    let dir = scratch("hostile_npz");
    let a = Buffer::from_slice(&f32s(4, 1.0), &[4]).unwrap();
    let good = dir.join("good.npz");
    save_npz(&good, &[("a", &a)]).unwrap();
    let bytes = std::fs::read(&good).unwrap();

    let e = err_of(load_npz(dir.join("missing.npz")));
    assert!(e.contains("missing.npz"), "{e}");
    let not_zip = dir.join("not_zip.npz");
    std::fs::write(&not_zip, b"hello, not a zip").unwrap();
    let e = err_of(load_npz(&not_zip));
    assert!(e.contains("not_zip.npz") && e.contains("zip"), "{e}");
    let cut = dir.join("cut.npz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert!(err_of(load_npz(&cut)).contains("cut.npz"));
    // A member whose data is damaged (the CRC no longer matches).
    let mut damaged = bytes.clone();
    let at = damaged.windows(6).position(|w| w == b"\x93NUMPY").unwrap() + 140;
    damaged[at] ^= 0xff;
    let path = dir.join("damaged.npz");
    std::fs::write(&path, &damaged).unwrap();
    let e = err_of(load_npz(&path));
    assert!(e.contains("damaged.npz") && e.contains("\"a.npy\""), "{e}");
    // Declared sizes that lie: larger (a would-be bomb), smaller, or past the limit.
    for (name, size, want) in [("larger", 4_000_000_000u32, "trailing bytes"), ("smaller", 140, "truncated")] {
        let mut b = bytes.clone();
        patch_zip_sizes(&mut b, size);
        let path = dir.join(format!("{name}.npz"));
        std::fs::write(&path, &b).unwrap();
        let e = err_of(load_npz(&path));
        assert!(e.contains(&format!("{name}.npz")) && e.contains("a.npy") && e.contains(want), "{name}: {e}");
    }
    // A bad .npy member.
    let path = dir.join("bad_member.npz");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        z.start_file("m.npy", zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}").unwrap();
        z.finish().unwrap();
    }
    let e = err_of(load_npz(&path));
    assert!(e.contains("bad_member.npz") && e.contains("\"m.npy\""), "{e}");
    // Two members with one name.
    let path = dir.join("dup.npz");
    {
        let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let mut npy = Vec::new();
        weights::npy::write_npy_to(&mut npy, &a, "a").unwrap();
        z.start_file("a.npy", zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(&npy).unwrap();
        z.start_file("a", zip::write::SimpleFileOptions::default()).unwrap();
        z.write_all(&npy).unwrap();
        z.finish().unwrap();
    }
    let e = err_of(load_npz(&path));
    assert!(e.contains("dup.npz") && e.contains("twice"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `main(x: f32[64]) = x * w + b` with w, b large constants, plus an i4[40] constant
/// (a dtype safetensors lacks) returned as is.
fn model() -> Module {
    let backend = tensorjit::new_with_config("interp").unwrap();
    let builder = backend.builder("weights_model");
    let f = builder.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[64])).unwrap();
    let w = f.constant(&f32s(64, 0.125), &[64]).unwrap();
    let b = f.constant(&f32s(64, -0.5), &[64]).unwrap();
    let small = f.constant(&[1.0f32, 2.0], &[2]).unwrap();
    let packed = f.constant_bytes(Shape::new(DType::Int4, &[40]), &[0x21; 20]).unwrap();
    let y = f.mul(x, w).unwrap();
    let y = f.add(y, b).unwrap();
    f.return_(&[y, small, packed]).unwrap();
    builder.module()
}

fn run_interp(m: Module) -> Vec<Vec<u8>> {
    let backend = tensorjit::new_with_config("interp").unwrap();
    let exe = backend.compile(m).unwrap();
    let x = Buffer::from_slice(&f32s(64, 0.01), &[64]).unwrap();
    exe.execute(&[&x], &[]).unwrap().iter().map(|b| b.to_bytes().unwrap()).collect()
}

#[test]
fn ir_text_with_a_safetensors_side_file_round_trips() {
    let dir = scratch("ir_round_trip");
    let m = model();
    let mut side = SideFile::safetensors("weights.safetensors").unwrap();
    side.suggest_name(&m.nodes.iter().find_map(const_bytes).unwrap(), "w");
    let text = print_module_with_side_file(&m, &PrintOptions::dump(), &mut side);
    side.write_file(&dir.join("weights.safetensors")).unwrap();
    assert!(text.contains(r#"constant safetensors("weights.safetensors", "w") : f32[64]"#), "{text}");
    assert!(text.contains(r#"safetensors("weights.safetensors", "c0") : f32[64]"#), "{text}");
    assert!(text.contains(r#"safetensors("weights.safetensors", "c1") : i4[40]"#), "{text}");
    assert!(text.contains("constant [1.0, 2.0] : f32[2]"), "{text}");
    assert_eq!(side.blob_count(), 3);

    let back = parse_module_with_constants(&text, &dir).unwrap();
    assert_eq!(back, m);
    assert_eq!(run_interp(back.clone()), run_interp(m.clone()));
    // Printing the parsed module again, with the same names suggested, gives the same text.
    let mut side2 = SideFile::safetensors("weights.safetensors").unwrap();
    side2.suggest_name(&back.nodes.iter().find_map(const_bytes).unwrap(), "w");
    assert_eq!(print_module_with_side_file(&back, &PrintOptions::dump(), &mut side2), text);

    // The weights file is an ordinary one: the packed constant is a U8 tensor of its bytes.
    let w = load_safetensors(dir.join("weights.safetensors")).unwrap();
    assert_eq!(w.shape("w"), Some(Shape::new(DType::Float32, &[64])));
    assert_eq!(w.shape("c1"), Some(Shape::new(DType::Uint8, &[20])));
    let _ = std::fs::remove_dir_all(&dir);
}

fn const_bytes(n: &tensorjit::ir::module::Node) -> Option<Vec<u8>> {
    match &n.op {
        Op::Constant(ConstData(d)) if d.len() == 256 => Some(d.to_vec()),
        _ => None,
    }
}

#[test]
fn ir_text_names_tensors_of_an_existing_weights_file() {
    let dir = scratch("ir_refs");
    let wq = Buffer::from_slice(&f32s(6, 1.0), &[2, 3]).unwrap();
    save_safetensors(dir.join("model.safetensors"), &[("encoder.layer.0.attention.self.query.weight", &wq)]).unwrap();
    let text = |file: &str, tensor: &str, ty: &str| {
        format!(
            "module @m\n\nfunc @main(%0 \"x\": f32[2,3]) {{\n  %1 = constant safetensors({file:?}, {tensor:?}) : {ty}\n  %2 = add %0, %1 : f32[2,3]\n  return %2\n}}\n"
        )
    };
    let name = "encoder.layer.0.attention.self.query.weight";
    let m = parse_module_with_constants(&text("model.safetensors", name, "f32[2,3]"), &dir).unwrap();
    let Op::Constant(ConstData(d)) = &m.nodes[0].op else { panic!("not a constant") };
    assert_eq!(d.as_slice(), wq.to_bytes().unwrap().as_slice());
    // A `first=` preview is allowed and not checked.
    let t =
        text("model.safetensors", name, "f32[2,3]").replace(&format!("{name:?})"), &format!("{name:?}, first=[9])"));
    assert!(parse_module_with_constants(&t, &dir).is_ok());

    for (file, tensor, ty, want) in [
        ("model.safetensors", name, "f32[3,2]", "is f32[2,3] but the constant is f32[3,2]"),
        ("model.safetensors", name, "f64[2,3]", "but the constant is f64[2,3]"),
        ("model.safetensors", "nope", "f32[2,3]", "no tensor \"nope\""),
        ("missing.safetensors", name, "f32[2,3]", "missing.safetensors"),
        ("../model.safetensors", name, "f32[2,3]", "no `..`"),
        ("/etc/passwd", name, "f32[2,3]", "no `..`"),
    ] {
        let e = parse_module_with_constants(&text(file, tensor, ty), &dir).unwrap_err().to_string();
        assert!(e.contains("line 4") && e.contains(want), "{file} {tensor} {ty}: {e}");
    }
    // Not a safetensors file.
    std::fs::write(dir.join("junk.safetensors"), b"junk").unwrap();
    let e = parse_module_with_constants(&text("junk.safetensors", name, "f32[2,3]"), &dir).unwrap_err().to_string();
    assert!(e.contains("junk.safetensors") && e.contains("too short"), "{e}");
    // Bool data must be 0 or 1.
    std::fs::write(
        dir.join("flags.safetensors"),
        safetensors_bytes(r#"{"f":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}"#, &[1, 7]),
    )
    .unwrap();
    let t = "module @m\n\nfunc @main() {\n  %0 = constant safetensors(\"flags.safetensors\", \"f\") : bool[2]\n  return %0\n}\n";
    let e = parse_module_with_constants(t, &dir).unwrap_err().to_string();
    assert!(e.contains("flags.safetensors") && e.contains("byte 7"), "{e}");
    // Without a directory, and with a malformed form.
    let e = parse_module(&text("model.safetensors", name, "f32[2,3]")).unwrap_err().to_string();
    assert!(e.contains("no directory"), "{e}");
    let bad = text("model.safetensors", name, "f32[2,3]").replace(&format!(", {name:?}"), "");
    let e = parse_module_with_constants(&bad, &dir).unwrap_err().to_string();
    assert!(e.contains("the tensor's name"), "{e}");
    let bad =
        text("model.safetensors", name, "f32[2,3]").replace(&format!("{name:?})"), &format!("{name:?}, offset=3)"));
    let e = parse_module_with_constants(&bad, &dir).unwrap_err().to_string();
    assert!(e.contains("unknown item `offset=`"), "{e}");
    // A tensor named twice is read once (and shared).
    let twice = "module @m\n\nfunc @main() {\n  %0 = constant safetensors(\"model.safetensors\", \"encoder.layer.0.attention.self.query.weight\") : f32[2,3]\n  %1 = constant safetensors(\"model.safetensors\", \"encoder.layer.0.attention.self.query.weight\") : f32[2,3]\n  return %0, %1\n}\n";
    let m = parse_module_with_constants(twice, &dir).unwrap();
    let (Op::Constant(ConstData(a)), Op::Constant(ConstData(b))) = (&m.nodes[0].op, &m.nodes[1].op) else {
        panic!("not constants")
    };
    assert!(Arc::ptr_eq(a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
