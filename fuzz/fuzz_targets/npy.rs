//! Fuzz target `npy`: bytes → the `.npy` reader of `tensorjit run`
//! (`cli::read_npy_bytes`), then the conversions to parameter buffers (native, bf16 from
//! uint16 bits or float32, packed Int4 from uint8 bytes). Errors are expected; a panic, an
//! abort, a hang or a huge allocation is a finding, and so is an accepted file whose buffer
//! does not hold exactly the bytes read.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorjit::cli::read_npy_bytes;
use tensorjit::{DType, Shape};

fuzz_target!(|data: &[u8]| {
    let Ok(array) = read_npy_bytes(data, "fuzz.npy") else { return };
    let n: usize = array.dims.iter().product();
    assert_eq!(array.data.len(), n * array.dtype.bits() / 8, "data size of {:?} {:?}", array.dtype, array.dims);
    let bf16 = Shape::from_usize(DType::BFloat16, &array.dims);
    let int4 = Shape::new(DType::Int4, &[2 * n as i64]);
    let _ = array.clone().into_buffer_for(&bf16, "fuzz.npy");
    let _ = array.clone().into_buffer_for(&int4, "fuzz.npy");
    let own = Shape::from_usize(array.dtype, &array.dims);
    let data = array.data.clone();
    if let Ok(b) = array.into_buffer_for(&own, "fuzz.npy") {
        assert_eq!(b.to_bytes().expect("a host buffer"), data);
    }
});
