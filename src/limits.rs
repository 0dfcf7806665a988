//! The documented resource limits of tensorjit, in one place: tensor size, nesting depth, input
//! sizes and thread counts (docs/limits.md describes them for users).
//!
//! Every limit here turns a hostile or mistaken input into an [`Error`](crate::Error) naming the
//! op, file or value, instead of a crash, an abort or an unbounded wait.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Deepest nesting of functions: closures inside closures and chains of `call`s. Enforced by the
/// verifier and at compile time (and again at execution, for recursive calls).
pub const MAX_NESTING: usize = 200;

/// Deepest nesting the `.tjir` parser accepts in one expression: brackets of a literal, unary
/// signs, nested attribute values, chained `=`.
pub const MAX_PARSE_DEPTH: usize = 256;

/// The largest tensor rank accepted anywhere.
pub const MAX_RANK: usize = 64;

/// The most threads a pool may be given: a backend's own (`parallelism=N`) or the shared one
/// (`TENSORJIT_THREADS`, [`crate::threads::set_shared_pool_threads`]).
pub const MAX_THREADS: usize = 1024;

/// The largest IR text file or `.npy` file the CLI reads (bytes).
pub const MAX_INPUT_FILE_BYTES: u64 = 16 << 30;

/// Default of [`max_tensor_bytes`]: `isize::MAX`, the largest allocation Rust can describe.
pub const DEFAULT_MAX_TENSOR_BYTES: usize = isize::MAX as usize;

/// The environment variable lowering [`max_tensor_bytes`] (a number of bytes).
pub use crate::env::MAX_TENSOR_BYTES_ENV;

/// 0 means "not set yet: read `TENSORJIT_MAX_TENSOR_BYTES` or use the default".
static MAX_TENSOR_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The largest byte size a tensor shape may have (process-wide): `TENSORJIT_MAX_TENSOR_BYTES`
/// when set (a number of bytes, at most `isize::MAX`), otherwise [`DEFAULT_MAX_TENSOR_BYTES`],
/// or what [`set_max_tensor_bytes`] last set.
pub fn max_tensor_bytes() -> usize {
    match MAX_TENSOR_BYTES.load(Ordering::Relaxed) {
        0 => {
            // An invalid value is reported by `config::check_env` when a backend is created.
            let v = crate::env::env_usize(MAX_TENSOR_BYTES_ENV, 1, usize::MAX)
                .ok()
                .flatten()
                .map_or(DEFAULT_MAX_TENSOR_BYTES, |v| v.min(DEFAULT_MAX_TENSOR_BYTES));
            MAX_TENSOR_BYTES.store(v, Ordering::Relaxed);
            v
        }
        v => v,
    }
}

/// Sets the process-wide per-tensor byte limit (clamped to `1..=isize::MAX`). Shapes created
/// afterwards are checked against it; it returns the previous limit.
pub fn set_max_tensor_bytes(bytes: usize) -> usize {
    let prev = max_tensor_bytes();
    MAX_TENSOR_BYTES.store(bytes.clamp(1, DEFAULT_MAX_TENSOR_BYTES), Ordering::Relaxed);
    prev
}
