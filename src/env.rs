//! The environment variables the crate reads: their names (one place, so that every layer can
//! name them without importing the layer that uses them), and the reading rules they share
//! (trimmed; empty or whitespace is unset; numbers checked against a range, with an error naming
//! the variable). docs/configuration.md describes each.

use std::fmt::Display;

use crate::error::{Error, Result};

/// The backend [`crate::new`] creates (`name[:options]`).
pub const BACKEND_ENV: &str = "TENSORJIT_BACKEND";
/// The size of the shared thread pool (read when it is created).
pub const THREADS_ENV: &str = "TENSORJIT_THREADS";
/// The buffer pool's cap in megabytes (`0` disables pooling); read when the pool is first used.
pub const POOL_ENV: &str = "TENSORJIT_POOL_MB";
/// Lowers the per-tensor byte limit ([`crate::limits::max_tensor_bytes`]).
pub const MAX_TENSOR_BYTES_ENV: &str = "TENSORJIT_MAX_TENSOR_BYTES";
/// The directory the jit backend dumps its compile stages into.
pub const DUMP_ENV: &str = "TENSORJIT_DUMP";
/// The largest GEMM block size the `TENSORJIT_GEMM_{KC,MC,NC}` overrides accept (elements).
pub const MAX_ENV_BLOCK: usize = 1 << 24;

/// Every environment variable the crate reads (each described in docs/configuration.md).
pub const ENV_VARS: &[&str] = &[
    BACKEND_ENV,
    THREADS_ENV,
    POOL_ENV,
    MAX_TENSOR_BYTES_ENV,
    DUMP_ENV,
    "TENSORJIT_GEMM_KC",
    "TENSORJIT_GEMM_MC",
    "TENSORJIT_GEMM_NC",
    "TENSORJIT_DISABLE_AVX512",
    "TENSORJIT_DISABLE_AMX",
    "TENSORJIT_DISABLE_AVX2",
    "TENSORJIT_DISABLE_SME",
    "TENSORJIT_DISABLE_NEON",
];

/// The value of environment variable `name`, trimmed; `None` when it is unset, empty or only
/// whitespace (every variable of the crate treats those alike), or not valid Unicode.
pub(crate) fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// An error about environment variable `name` set to `value`.
pub(crate) fn env_error(name: &str, value: &str, msg: impl Display) -> Error {
    Error::Config(format!("environment variable {name}={value:?}: {msg}"))
}

/// Parses the numeric variable `name` (unset: `Ok(None)`); a value that is not a non-negative
/// integer, or is outside `min..=max`, is an error naming the variable and the value.
pub(crate) fn env_usize(name: &str, min: usize, max: usize) -> Result<Option<usize>> {
    let Some(v) = env_value(name) else { return Ok(None) };
    match v.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        Ok(n) if n > max => Err(env_error(name, &v, format!("at most {max}"))),
        _ => Err(env_error(name, &v, format!("must be an integer of at least {min}"))),
    }
}
