//! Large constants in side files: printed as `file("NAME", offset=…, bytes=…, hash=…)`,
//! parsed back to an identical module that computes the same outputs; hostile side files
//! (missing, short, different, overlapping, outside the directory) are clean errors naming the
//! file; `elided(…)` text says the data was elided; `TENSORJIT_DUMP` dumps stay small and replay.

use std::path::{Path, PathBuf};

use tensorjit::ir::Module;
use tensorjit::ir::text::{
    PrintOptions, SideFile, parse_module, parse_module_with_constants, print_module, print_module_with,
    print_module_with_side_file,
};
use tensorjit::{Buffer, DType, Shape};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tensorjit_side_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `out = x · W + b` with W a 384×384 f32 constant, b a 384 constant and a small i32 one.
fn model() -> Module {
    let backend = tensorjit::new_with_config("interp").unwrap();
    let b = backend.builder("mlp");
    let f = b.main();
    let w: Vec<f32> = (0..384 * 384).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
    let bias: Vec<f32> = (0..384).map(|i| i as f32 * 0.25).collect();
    let x = f.parameter("x", Shape::new(DType::Float32, &[2, 384])).unwrap();
    let wv = f.constant(&w, &[384, 384]).unwrap();
    let bv = f.constant(&bias, &[1, 384]).unwrap();
    let small = f.constant(&[1i32, 2, 3], &[3]).unwrap();
    let y = f.matmul(x, wv).unwrap();
    let bb = f.broadcast_in_dim(bv, &Shape::new(DType::Float32, &[2, 384]), &[0, 1]).unwrap();
    let out = f.add(y, bb).unwrap();
    f.return_(&[out, small]).unwrap();
    b.module()
}

fn run_interp(m: Module) -> Vec<Vec<u8>> {
    let backend = tensorjit::new_with_config("interp").unwrap();
    let exe = backend.compile(m).unwrap();
    let x: Vec<f32> = (0..2 * 384).map(|i| (i % 13) as f32 - 6.0).collect();
    let outs = exe.execute(&[&Buffer::from_slice(&x, &[2, 384]).unwrap()], &[]).unwrap();
    outs.iter().map(|b| b.to_bytes().unwrap()).collect()
}

/// Writes `text` and its side file into `dir`; returns the side file's path.
fn write_pair(dir: &Path, text: &str, side: &SideFile) -> PathBuf {
    std::fs::write(dir.join("m.tjir"), text).unwrap();
    let p = dir.join(side.name());
    side.write_file(&p).unwrap();
    p
}

#[test]
fn side_file_round_trip_gives_an_identical_module() {
    let dir = scratch("roundtrip");
    let m = model();
    let mut side = SideFile::new("weights.bin").unwrap();
    let text = print_module_with_side_file(&m, &PrintOptions::dump(), &mut side);
    assert!(text.len() < 2000, "short text: {} bytes\n{text}", text.len());
    assert!(text.contains("constant file(\"weights.bin\", offset=0, bytes=589824, hash=\"xxh64:"), "{text}");
    assert!(text.contains("first=[-0.5, 0.41900003, 0.338, 0.25700003]) : f32[384,384]"), "{text}");
    // Small constants stay inline.
    assert!(text.contains("constant [1, 2, 3] : i32[3]"), "{text}");
    assert_eq!(side.blob_count(), 2);
    assert_eq!(side.len(), 589824 + 1536);
    write_pair(&dir, &text, &side);

    let back = parse_module_with_constants(&text, &dir).unwrap();
    assert_eq!(back, m, "identical module");
    assert_eq!(print_module(&back), print_module(&m));
    // Printing again with a fresh side file gives the same text and bytes.
    let mut side2 = SideFile::new("weights.bin").unwrap();
    assert_eq!(print_module_with_side_file(&back, &PrintOptions::dump(), &mut side2), text);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    side.write_to(&mut a).unwrap();
    side2.write_to(&mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(run_interp(back), run_interp(m));
    // Without a directory the text is a clean error.
    let e = parse_module(&text).unwrap_err().to_string();
    assert!(e.contains("weights.bin") && e.contains("parse_module_with_constants"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn elided_constants_do_not_parse() {
    let m = model();
    let text = print_module_with(&m, &PrintOptions::dump());
    assert!(text.len() < 2000, "{text}");
    assert!(text.contains("constant elided(bytes=589824, hash=\"xxh64:"), "{text}");
    let e = parse_module(&text).unwrap_err().to_string();
    assert!(e.contains("elided") && e.contains("589824") && e.contains("--constants-file"), "{e}");
    let e = parse_module_with_constants(&text, Path::new(".")).unwrap_err().to_string();
    assert!(e.contains("elided"), "{e}");
}

#[test]
fn hostile_side_files_are_errors_naming_the_file() {
    let dir = scratch("hostile");
    let m = model();
    let mut side = SideFile::new("c.bin").unwrap();
    let text = print_module_with_side_file(&m, &PrintOptions::dump(), &mut side);
    let path = write_pair(&dir, &text, &side);
    let good = std::fs::read(&path).unwrap();
    let err = |t: &str| parse_module_with_constants(t, &dir).unwrap_err().to_string();

    // Missing file.
    std::fs::remove_file(&path).unwrap();
    let e = err(&text);
    assert!(e.contains("c.bin") && e.contains("cannot open"), "missing: {e}");
    // Truncated (wrong size).
    std::fs::write(&path, &good[..good.len() - 10]).unwrap();
    let e = err(&text);
    assert!(e.contains("c.bin") && e.contains("past its end"), "truncated: {e}");
    // Same size, one byte changed: wrong hash.
    let mut bad = good.clone();
    bad[1000] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    let e = err(&text);
    assert!(e.contains("c.bin") && e.contains("hash") && e.contains("line 4, column 17"), "hash: {e}");
    // A directory where the file should be.
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let e = err(&text);
    assert!(e.contains("c.bin"), "directory: {e}");
    std::fs::remove_dir(&path).unwrap();
    std::fs::write(&path, &good).unwrap();
    assert!(parse_module_with_constants(&text, &dir).is_ok());

    // Hand-made references: out of range, overflowing, overlapping, escaping the directory,
    // malformed.
    let hash = "xxh64:0000000000000000";
    let module =
        |payload: &str| format!("module @h\n\nfunc @main() {{\n  %0 = constant {payload} : u8[4]\n  return %0\n}}\n");
    for (payload, want) in [
        (format!("file(\"c.bin\", offset=18446744073709551615, bytes=4, hash=\"{hash}\")"), "past its end"),
        (format!("file(\"c.bin\", offset=0, bytes=18446744073709551615, hash=\"{hash}\")"), "past its end"),
        (format!("file(\"../c.bin\", offset=0, bytes=4, hash=\"{hash}\")"), "relative path"),
        (format!("file(\"/etc/passwd\", offset=0, bytes=4, hash=\"{hash}\")"), "relative path"),
        ("file(\"c.bin\", offset=0, bytes=4, hash=\"md5:1\")".to_string(), "16 hex digits"),
        ("file(\"c.bin\", offset=0, bytes=4)".to_string(), "required"),
        (format!("file(\"c.bin\", offset=-1, bytes=4, hash=\"{hash}\")"), "offset"),
        (format!("file(\"c.bin\", offset=0, offset=0, bytes=4, hash=\"{hash}\")"), "twice"),
        (format!("file(\"c.bin\", offset=0, bytes=4, hash=\"{hash}\", mode=1)"), "unknown item"),
        (format!("file(offset=0, bytes=4, hash=\"{hash}\")"), "name first"),
        ("weights(1)".to_string(), "unknown form"),
    ] {
        let e = err(&module(&payload));
        assert!(e.contains(want), "{payload}: {e}");
    }
    // Many overlapping references to the same large range: refused once they add up to more
    // than the file (the printer never writes overlapping ranges).
    let len = good.len() as u64;
    let big = len - 100;
    let mut t = String::from("module @o\n\nfunc @main() {\n");
    for k in 0..4 {
        let h = tensorjit::ir::text::xxh64::xxh64(&good[k..k + big as usize]);
        t.push_str(&format!(
            "  %{k} = constant file(\"c.bin\", offset={k}, bytes={big}, hash=\"xxh64:{h:016x}\") : u8[{big}]\n"
        ));
    }
    t.push_str("  return %0\n}\n");
    let e = err(&t);
    assert!(e.contains("add up to more than") && e.contains("c.bin"), "{e}");
    // The same range twice is read once and shared.
    let h = tensorjit::ir::text::xxh64::xxh64(&good[..big as usize]);
    let r = format!("file(\"c.bin\", offset=0, bytes={big}, hash=\"xxh64:{h:016x}\")");
    let t = format!(
        "module @s\n\nfunc @main() {{\n  %0 = constant {r} : u8[{big}]\n  %1 = constant {r} : u8[{big}]\n  return %0, %1\n}}\n"
    );
    assert!(parse_module_with_constants(&t, &dir).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn jit_dumps_put_large_constants_in_a_side_file() {
    let dir = scratch("jitdump");
    let m = model();
    let expected = run_interp(m.clone());
    let backend = tensorjit::new_with_config(&format!("jit:dump={}", dir.display())).unwrap();
    backend.compile(m.clone()).unwrap();
    let sub: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(sub.len(), 1, "{sub:?}");
    let d = &sub[0];
    let input = std::fs::read_to_string(d.join("ir-00-input.tjir")).unwrap();
    assert!(input.len() < 2000, "{input}");
    assert!(input.contains("file(\"constants.bin\""), "{input}");
    assert!(d.join("constants.bin").metadata().unwrap().len() >= 589824);
    // Every dumped IR file replays (its constants come from the shared side file).
    for entry in std::fs::read_dir(d).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "tjir") {
            let text = std::fs::read_to_string(&p).unwrap();
            let back = parse_module_with_constants(&text, d).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            if p.ends_with("ir-00-input.tjir") {
                assert_eq!(back, m);
            }
            assert_eq!(run_interp(back), expected, "{}", p.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
