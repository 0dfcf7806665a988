//! The per-tensor byte limit (`limits::set_max_tensor_bytes`) at its edge: a shape of exactly
//! the limit is accepted and computed, one byte over is an `Error::Limit`, on both backends.
//!
//! The limit is process-wide, so this binary holds a single test (tests of one binary run in
//! parallel threads) and restores the previous limit even when an assertion fails.

use tensorjit::ir::text::parse_module;
use tensorjit::ir::verify::verify;
use tensorjit::limits::set_max_tensor_bytes;
use tensorjit::{Buffer, DType, Error, Shape};

/// Restores the previous limit on drop.
struct Restore(usize);

impl Drop for Restore {
    fn drop(&mut self) {
        set_max_tensor_bytes(self.0);
    }
}

fn is_limit(r: tensorjit::Result<impl Sized>) -> bool {
    matches!(r, Err(Error::Limit { .. }))
}

#[test]
fn a_shape_of_exactly_the_limit_is_accepted_and_one_byte_over_is_not() {
    let _restore = Restore(set_max_tensor_bytes(4096));
    let f32s = |dims: &[i64]| Shape::new(DType::Float32, dims);

    // f32[1024] is 4096 bytes; f32[1025] is 4100.
    assert!(f32s(&[1024]).validate().is_ok());
    assert!(is_limit(f32s(&[1025]).validate()));
    // u8[4096] is exactly the limit, u8[4097] one byte over.
    assert!(Buffer::from_bytes(Shape::new(DType::Uint8, &[4096]), &[7; 4096]).is_ok());
    assert!(is_limit(Buffer::from_bytes(Shape::new(DType::Uint8, &[4097]), &[7; 4097])));
    // Int4 packs two per byte: 8192 values are 4096 bytes, 8193 need 4097.
    assert!(Shape::new(DType::Int4, &[8192]).validate().is_ok());
    assert!(is_limit(Shape::new(DType::Int4, &[8193]).validate()));
    // Zero dims count as 1: f32[0, 1025] holds nothing but its row stride is 4100 bytes.
    assert!(is_limit(f32s(&[0, 1025]).validate()));
    assert!(f32s(&[0, 1024]).validate().is_ok());
    assert!(Buffer::from_slice(&[0f32; 1024], &[1024]).is_ok());
    assert!(is_limit(Buffer::from_slice(&[0f32; 1025], &[1025])));

    for name in ["interp", "jit"] {
        let b = tensorjit::new_with_config(name).unwrap();
        // At the limit: iota f32[1024] computes 0, 1, …, 1023.
        let bld = b.builder("at_limit");
        let main = bld.main();
        let v = main.iota(&f32s(&[1024]), 0).unwrap();
        main.return_(&[v]).unwrap();
        let out = bld.compile().unwrap().execute(&[], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!((out.len(), out[0], out[1], out[1023]), (1024, 0.0, 1.0, 1023.0), "{name}");

        // One element over: the builder, parameters and the IR text path all refuse.
        let bld = b.builder("over");
        let main = bld.main();
        assert!(is_limit(main.iota(&f32s(&[1025]), 0)), "{name}");
        assert!(is_limit(main.parameter("x", f32s(&[1025]))), "{name}");
        let x = main.parameter("x", f32s(&[1024])).unwrap();
        let zero = main.scalar(0f32).unwrap();
        let pad = tensorjit::ir::op::PadAxis { start: 0, end: 1, interior: 0 };
        assert!(is_limit(main.pad(x, zero, &[pad])), "{name}: an inferred output over the limit");
        let text = "module @m\n\nfunc @main() {\n  %0 = iota shape=f32[1025], axis=0 : f32[1025]\n  return %0\n}\n";
        let e = verify(&parse_module(text).unwrap()).unwrap_err();
        assert!(matches!(&e, Error::Verify(m) if m.iter().any(|m| m.contains("4100 bytes"))), "{name}: {e}");
    }
}
