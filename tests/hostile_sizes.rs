//! Hostile tensor sizes on both CPU backends ("interp" and "jit"), through the builder API and
//! through IR text: element counts whose byte size would wrap, storage that does not match its
//! shape, and outputs too large to allocate. Every case ends in a clean `Err` of the right kind
//! (or the right answer), never a panic, a signal or an abort.

use std::sync::Arc;

use tensorjit::ir::op::PadAxis;
use tensorjit::ir::text::parse_module;
use tensorjit::ir::verify::verify;
use tensorjit::memory::AlignedBytes;
use tensorjit::{Backend, Buffer, DType, Error, Shape};

const BACKENDS: [&str; 2] = ["interp", "jit"];

fn backend(name: &str) -> Arc<dyn Backend> {
    tensorjit::new_with_config(name).expect("backend is registered")
}

/// Parses, verifies, compiles and executes `text` (no inputs) on `name`.
fn run_text(name: &str, text: &str) -> tensorjit::Result<Vec<Buffer>> {
    let m = parse_module(text)?;
    verify(&m)?;
    backend(name).compile(m)?.execute(&[], &[])
}

/// 2^43 f32 elements: 2^45 bytes (32 TiB), more than any machine here can map.
const HUGE: i64 = 1 << 43;

fn is_limit(e: &Error) -> bool {
    matches!(e, Error::Limit { .. })
}

fn is_verify_limit(e: &Error) -> bool {
    matches!(e, Error::Verify(msgs) if msgs.iter().any(|m| m.contains("limit exceeded")))
}

fn is_oom_or_limit(e: &Error) -> bool {
    matches!(e, Error::OutOfMemory { .. } | Error::Limit { .. })
}

#[test]
fn iota_of_2_pow_62_elements_is_a_limit_error() {
    // f32[2^62] is 2^64 bytes: its byte size used to wrap to 0 and the jit wrote into a 0-byte
    // buffer.
    let shape = Shape::new(DType::Float32, &[1 << 62]);
    for name in BACKENDS {
        let bld = backend(name).builder("iota62");
        let e = bld.main().iota(&shape, 0).unwrap_err();
        assert!(is_limit(&e), "{name}: {e}");
        assert!(e.to_string().contains("4611686018427387904"), "{name}: {e}");
        let text = "module @m\n\nfunc @main() {\n  %0 = iota shape=f32[4611686018427387904], axis=0 : f32[4611686018427387904]\n  return %0\n}\n";
        let e = run_text(name, text).unwrap_err();
        assert!(is_verify_limit(&e), "{name}: {e}");
    }
}

#[test]
fn buffers_of_wrapping_size_are_rejected_and_exp_still_runs() {
    let huge = Shape::new(DType::Float32, &[1 << 62]);
    // An empty slice used to be accepted for f32[2^62] (byte size wrapped to 0).
    assert!(is_limit(&Buffer::from_bytes(huge.clone(), &[]).unwrap_err()));
    assert!(is_limit(&Buffer::check_bytes(&huge, &[]).unwrap_err()));
    assert!(Buffer::from_slice::<f32>(&[], &[1 << 32, 1 << 32]).is_err());
    for name in BACKENDS {
        let bld = backend(name).builder("exp");
        let main = bld.main();
        assert!(is_limit(&main.parameter("x", huge.clone()).unwrap_err()), "{name}");
        let x = main.parameter("x", Shape::new(DType::Float32, &[2])).unwrap();
        let y = main.exp(x).unwrap();
        main.return_(&[y]).unwrap();
        let exe = bld.compile().unwrap();
        let x = Buffer::from_slice(&[0f32, 1.0], &[2]).unwrap();
        let out = exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        // exp(0) = 1, exp(1) = e.
        assert_eq!(out[0], 1.0, "{name}");
        assert!((out[1] - std::f32::consts::E).abs() < 1e-6, "{name}: {}", out[1]);
    }
}

#[test]
fn from_bytes_with_the_wrong_length_is_invalid() {
    // f32[4] needs 16 bytes.
    let e = Buffer::from_bytes(Shape::new(DType::Float32, &[4]), &[0; 15]).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    assert!(e.to_string().contains("15 bytes") && e.to_string().contains("16 bytes"), "{e}");
    let e = Buffer::from_bytes(Shape::new(DType::Float32, &[4]), &[0; 17]).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e}");
    // Int4[3] packs into 2 bytes: 0x21 0x03 are the values 1, 2, 3.
    assert!(Buffer::from_bytes(Shape::new(DType::Int4, &[3]), &[0x21, 0x03]).is_ok());
    assert!(Buffer::from_bytes(Shape::new(DType::Int4, &[3]), &[0x21]).is_err());
}

#[test]
fn from_storage_checks_its_length() {
    // 4 bytes of storage for f32[4096] (16384 bytes): the jit used to read heap memory past it.
    let four = Arc::new(AlignedBytes::from_bytes(&[0; 4]));
    let e = Buffer::from_storage(Shape::new(DType::Float32, &[4096]), four).unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }) && e.to_string().contains("16384 bytes"), "{e}");
    // A matching storage of 2 f32 (1.0 = 0x3f800000, 2.0 = 0x40000000) runs on both backends.
    let bytes: Vec<u8> = [1f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let x = Buffer::from_storage(Shape::new(DType::Float32, &[2]), Arc::new(AlignedBytes::from_bytes(&bytes))).unwrap();
    for name in BACKENDS {
        let bld = backend(name).builder("add");
        let main = bld.main();
        let p = main.parameter("x", Shape::new(DType::Float32, &[2])).unwrap();
        let y = main.add(p, p).unwrap();
        main.return_(&[y]).unwrap();
        let out = bld.compile().unwrap().execute(&[&x], &[]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0], "{name}");
    }
}

#[test]
fn constant_of_2_pow_32_squared_then_slice_is_rejected() {
    let shape = Shape::new(DType::Float32, &[1 << 32, 1 << 32]);
    for name in BACKENDS {
        let bld = backend(name).builder("c");
        let e = bld.main().constant_bytes(shape.clone(), &[]).unwrap_err();
        assert!(is_limit(&e), "{name}: {e}");
        let text = "module @m\n\nfunc @main() {\n  %0 = constant [] : f32[4294967296,4294967296]\n  %1 = slice %0, starts=[0,0], limits=[1,1], strides=[1,1] : f32[1,1]\n  return %1\n}\n";
        let e = run_text(name, text).unwrap_err();
        assert!(is_verify_limit(&e), "{name}: {e}");
    }
}

/// Builds `f` on `name`, compiles and executes it: the error, wherever it happens.
fn build_and_run(
    name: &str,
    f: impl FnOnce(&tensorjit::api::Function) -> tensorjit::Result<tensorjit::api::Value>,
) -> Error {
    let bld = backend(name).builder("huge");
    let main = bld.main();
    let r =
        f(&main).and_then(|v| main.return_(&[v])).and_then(|()| bld.compile()).and_then(|exe| exe.execute(&[], &[]));
    match r {
        Ok(out) => panic!("{name}: a 2^45-byte output was computed: {:?}", out[0].shape()),
        Err(e) => e,
    }
}

#[test]
fn huge_iota_pad_and_broadcast_are_out_of_memory_not_an_abort() {
    let big = Shape::new(DType::Float32, &[HUGE]);
    for name in BACKENDS {
        let e = build_and_run(name, |f| f.iota(&big, 0));
        assert!(is_oom_or_limit(&e), "{name} iota: {e}");
        let e = build_and_run(name, |f| {
            let one = f.scalar(1f32)?;
            f.broadcast_in_dim(one, &big, &[])
        });
        assert!(is_oom_or_limit(&e), "{name} broadcast: {e}");
        let e = build_and_run(name, |f| {
            let x = f.constant(&[1f32, 2.0], &[2])?;
            let zero = f.scalar(0f32)?;
            f.pad(x, zero, &[PadAxis { start: 0, end: HUGE - 2, interior: 0 }])
        });
        assert!(is_oom_or_limit(&e), "{name} pad: {e}");
        // The same through IR text.
        for body in [
            format!("  %0 = iota shape=f32[{HUGE}], axis=0 : f32[{HUGE}]\n  return %0"),
            format!(
                "  %0 = constant 1.0 : f32[]\n  %1 = broadcast_in_dim %0, shape=f32[{HUGE}], axes=[] : f32[{HUGE}]\n  return %1"
            ),
            format!(
                "  %0 = constant [1.0, 2.0] : f32[2]\n  %1 = constant 0.0 : f32[]\n  %2 = pad %0, %1, axes=[(0,{},0)] : f32[{HUGE}]\n  return %2",
                HUGE - 2
            ),
        ] {
            let text = format!("module @m\n\nfunc @main() {{\n{body}\n}}\n");
            let e = run_text(name, &text).unwrap_err();
            assert!(is_oom_or_limit(&e), "{name}: {e}\n{text}");
        }
    }
}

#[test]
fn u8_iota_is_stored_at_one_byte_per_element() {
    for name in BACKENDS {
        // u8[2,300] along axis 1: element (i, j) = j mod 256 (u8 wraps: 256 → 0, 299 → 43).
        let bld = backend(name).builder("iota_u8");
        let main = bld.main();
        let a = main.iota(&Shape::new(DType::Uint8, &[2, 300]), 1).unwrap();
        let b = main.iota(&Shape::new(DType::Uint8, &[3, 2]), 0).unwrap();
        main.return_(&[a, b]).unwrap();
        let out = bld.compile().unwrap().execute(&[], &[]).unwrap();
        let a = out[0].to_bytes().unwrap();
        assert_eq!(a.len(), 600, "{name}");
        assert_eq!((a[0], a[255], a[256], a[299], a[300], a[599]), (0, 255, 0, 43, 0, 43), "{name}");
        assert_eq!(out[1].to_vec::<u8>().unwrap(), vec![0, 0, 1, 1, 2, 2], "{name}");
        let text = "module @m\n\nfunc @main() {\n  %0 = iota shape=u8[4,3], axis=1 : u8[4,3]\n  return %0\n}\n";
        let out = run_text(name, text).unwrap();
        assert_eq!(out[0].to_vec::<u8>().unwrap(), vec![0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], "{name}");
    }
}

#[test]
fn dynamic_reshape_to_overflowing_sizes_is_an_error() {
    // Sizes 2^32 · 2^32 from scalar operands, then an inferred axis: the known product overflows
    // i64 (it used to panic); without an inferred axis the sizes do not match 2 elements; a
    // zero-sized reshape [0, 2^62] holds nothing but is over the byte limit (zero counted as 1).
    let reshape = |operands: &str, specs: &str, out: &str| {
        format!(
            "module @m\n\nfunc @main() {{\n  %0 = constant [] : f32[0]\n  %1 = constant [1.0, 2.0] : f32[2]\n  %2 = constant 4294967296 : i64[]\n  %3 = constant 4611686018427387904 : i64[]\n  %4 = dynamic_reshape {operands}, specs={specs} : {out}\n  return %4\n}}\n"
        )
    };
    for name in BACKENDS {
        for text in [
            reshape("%1, %2, %2", "[a=?,b=?,c=*]", "f32[a=?,b=?,c=?]"),
            reshape("%1, %2, %2", "[a=?,b=?]", "f32[a=?,b=?]"),
            reshape("%0, %3", "[0,a=?]", "f32[0,a=?]"),
        ] {
            match run_text(name, &text) {
                Err(Error::Invalid { op, .. }) => assert_eq!(op, "DynamicReshape", "{name}\n{text}"),
                other => panic!("{name}: {other:?}\n{text}"),
            }
        }
    }
}
