//! Configuration shared by the whole crate: the one parser of backend config strings
//! (`"parallelism=4,fusion=off"`, the part after `name:` in `TENSORJIT_BACKEND`), the typed value
//! parsers every backend's options use (so every bad value is an [`Error::Config`] naming the
//! backend and the option), and the environment variables the crate reads ([`ENV_VARS`](crate::env::ENV_VARS),
//! listed in [`crate::env`], checked by [`check_env`]). docs/configuration.md lists every option and variable.
//!
//! The typed options themselves live with their backends:
//! [`JitOptions`](crate::backends::jit::JitOptions) and
//! [`InterpOptions`](crate::backends::interp::InterpOptions).

use std::fmt::Display;

use crate::env::{MAX_ENV_BLOCK, MAX_TENSOR_BYTES_ENV, POOL_ENV, THREADS_ENV, env_usize};
use crate::error::{Error, Result};
use crate::limits::MAX_THREADS;

/// One parsed `key` or `key=value` item of a backend config string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigOption {
    /// The key.
    pub key: String,
    /// The value after `=`, if any.
    pub value: Option<String>,
}

/// Splits a backend config at commas (empty items ignored, keys and values trimmed) and checks
/// every key is in `valid`; an unknown key is an error naming it and listing the valid ones.
/// A key given twice keeps its last value (the backends' parsers read the items in order).
pub fn parse_config(backend: &str, config: &str, valid: &[&str]) -> Result<Vec<ConfigOption>> {
    let mut out = vec![];
    for item in config.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (item, None),
        };
        if !valid.contains(&key) {
            return Err(Error::Config(format!(
                "backend {backend:?}: unknown option {key:?}; valid options: {}",
                valid.join(", ")
            )));
        }
        out.push(ConfigOption { key: key.to_string(), value });
    }
    Ok(out)
}

/// An error about option `key` of `backend`: `backend "jit": option parallelism: <msg>`.
pub(crate) fn option_error(backend: &str, key: &str, msg: impl Display) -> Error {
    Error::Config(format!("backend {backend:?}: option {key}: {msg}"))
}

/// Checks a thread count given to option `key`: 1 to [`MAX_THREADS`].
pub(crate) fn check_threads(backend: &str, key: &str, n: usize) -> Result<usize> {
    match n {
        0 => Err(option_error(backend, key, format!("must be a positive integer (at most {MAX_THREADS}), got 0"))),
        n if n > MAX_THREADS => {
            Err(option_error(backend, key, format!("{key}={n} exceeds the limit of {MAX_THREADS} threads")))
        }
        n => Ok(n),
    }
}

/// Parses a non-negative integer.
pub(crate) fn parse_u64(backend: &str, key: &str, v: Option<&str>) -> Result<u64> {
    v.and_then(|n| n.parse::<u64>().ok()).ok_or_else(|| {
        option_error(backend, key, format!("needs a non-negative integer ({key}=N), got {:?}", v.unwrap_or("")))
    })
}

/// Parses an on/off switch: `on`, `true`, `1` or the bare key are on; `off`, `false`, `0` off.
#[cfg_attr(not(feature = "jit"), allow(dead_code))]
pub(crate) fn parse_switch(backend: &str, key: &str, v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("on" | "true" | "1") => Ok(true),
        Some("off" | "false" | "0") => Ok(false),
        Some(s) => Err(option_error(backend, key, format!("must be on or off, got {s:?}"))),
    }
}

/// Parses one of a fixed set of words.
#[cfg_attr(not(feature = "jit"), allow(dead_code))]
pub(crate) fn parse_choice<T: Copy>(backend: &str, key: &str, v: Option<&str>, choices: &[(&str, T)]) -> Result<T> {
    match v.and_then(|s| choices.iter().find(|(name, _)| *name == s)) {
        Some(&(_, t)) => Ok(t),
        None => {
            let names: Vec<&str> = choices.iter().map(|c| c.0).collect();
            Err(option_error(backend, key, format!("must be one of {}, got {:?}", names.join(", "), v.unwrap_or(""))))
        }
    }
}

/// Parses a non-empty value (a path, a name).
#[cfg_attr(not(feature = "jit"), allow(dead_code))]
pub(crate) fn parse_nonempty<'a>(backend: &str, key: &str, v: Option<&'a str>, what: &str) -> Result<&'a str> {
    match v {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(option_error(backend, key, format!("needs {what} ({key}={})", what.to_uppercase()))),
    }
}

/// Checks every numeric environment variable of [`ENV_VARS`](crate::env::ENV_VARS) (the backends' constructors call
/// it, so a mistyped value is an error when a backend is created rather than silently ignored;
/// where a variable is read later, an invalid value falls back to the default). The on/off
/// variables (`TENSORJIT_DISABLE_*`) accept any value: set and neither empty nor `0` is on.
pub fn check_env() -> Result<()> {
    env_usize(THREADS_ENV, 1, MAX_THREADS)?;
    env_usize(POOL_ENV, 0, usize::MAX)?;
    env_usize(MAX_TENSOR_BYTES_ENV, 1, usize::MAX)?;
    for v in ["TENSORJIT_GEMM_KC", "TENSORJIT_GEMM_MC", "TENSORJIT_GEMM_NC"] {
        env_usize(v, 0, MAX_ENV_BLOCK)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_and_unknown_keys() {
        let o = parse_config("x", " parallelism = 4 ,,fusion", &["parallelism", "fusion"]).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!((o[0].key.as_str(), o[0].value.as_deref()), ("parallelism", Some("4")));
        assert_eq!((o[1].key.as_str(), o[1].value.as_deref()), ("fusion", None));
        let e = parse_config("x", "bogus", &["parallelism"]).unwrap_err().to_string();
        assert!(e.contains("bogus") && e.contains("parallelism"), "{e}");
    }

    #[test]
    fn values() {
        use crate::threads::{Threads, parse_threads};
        assert_eq!(parse_threads("b", "parallelism", Some("shared")).unwrap(), Threads::Shared);
        assert_eq!(parse_threads("b", "parallelism", Some("3")).unwrap(), Threads::Own(3));
        for bad in [None, Some("0"), Some("-1"), Some("x"), Some("1025")] {
            let e = parse_threads("b", "parallelism", bad).unwrap_err().to_string();
            assert!(e.contains("parallelism"), "{e}");
        }
        assert!(parse_switch("b", "fusion", None).unwrap());
        assert!(!parse_switch("b", "fusion", Some("off")).unwrap());
        assert!(parse_switch("b", "fusion", Some("maybe")).unwrap_err().to_string().contains("maybe"));
        assert_eq!(parse_choice("b", "k", Some("y"), &[("x", 1), ("y", 2)]).unwrap(), 2);
        let e = parse_choice("b", "k", Some("z"), &[("x", 1), ("y", 2)]).unwrap_err().to_string();
        assert!(e.contains("x, y") && e.contains("\"z\"") && e.contains("option k"), "{e}");
        assert_eq!(parse_u64("b", "n", Some("7")).unwrap(), 7);
        assert!(parse_u64("b", "n", Some("-7")).is_err());
        assert!(parse_nonempty("b", "dump", Some(""), "a directory").is_err());
    }
}
