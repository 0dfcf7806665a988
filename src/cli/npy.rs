//! The `.npy` reader and writer of `tensorjit run` and `bench`; they live in the library's
//! [`crate::weights::npy`] and are re-exported here under their command-line names.

pub use crate::weights::npy::{
    MAX_NPY_HEADER_BYTES, NpyArray, Storage, read_npy, read_npy_bytes, read_npy_file, read_npy_path, write_npy,
    write_npy as write_output,
};
