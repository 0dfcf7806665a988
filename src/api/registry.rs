//! The backend registry: register by name, list, and create from `TENSORJIT_BACKEND` or a config string.

use std::sync::{Arc, Mutex, OnceLock};

use crate::api::backend::Backend;
use crate::error::{Error, Result};

/// A backend constructor taking the backend-config part of `"name:config"`.
pub type Constructor = fn(config: &str) -> Result<Arc<dyn Backend>>;

/// The environment variable read by [`new`].
pub const BACKEND_ENV: &str = "TENSORJIT_BACKEND";

/// The backend used by [`new`] when the environment variable is unset and it is registered.
pub const DEFAULT_BACKEND: &str = "jit";

fn registry() -> &'static Mutex<Vec<(String, Constructor)>> {
    static REG: OnceLock<Mutex<Vec<(String, Constructor)>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(crate::builtin_backends()))
}

/// Registers a backend constructor under `name` (replacing one of the same name).
pub fn register(name: &str, ctor: Constructor) {
    let mut r = registry().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = r.iter_mut().find(|(n, _)| n == name) {
        e.1 = ctor;
    } else {
        r.push((name.to_string(), ctor));
    }
}

/// Names of the registered backends, in registration order.
pub fn list() -> Vec<String> {
    registry().lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(n, _)| n.clone()).collect()
}

/// A backend from `TENSORJIT_BACKEND` if set (even empty), else the default backend if
/// registered, else the first registered one.
pub fn new() -> Result<Arc<dyn Backend>> {
    match std::env::var(BACKEND_ENV) {
        Ok(cfg) => new_with_config(&cfg),
        Err(_) if list().iter().any(|n| n == DEFAULT_BACKEND) => new_with_config(DEFAULT_BACKEND),
        Err(_) => new_with_config(""),
    }
}

/// A backend from `"name[:opt1,opt2=v]"`; `""` picks the first registered backend.
pub fn new_with_config(config: &str) -> Result<Arc<dyn Backend>> {
    let (name, opts) = config.split_once(':').unwrap_or((config, ""));
    let ctor = {
        let r = registry().lock().unwrap_or_else(|e| e.into_inner());
        if name.is_empty() { r.first().map(|e| e.1) } else { r.iter().find(|(n, _)| n == name).map(|e| e.1) }
    };
    match ctor {
        Some(c) => c(opts),
        None => Err(Error::Config(format!("unknown backend {name:?}; registered backends: {}", list().join(", ")))),
    }
}

/// One parsed `key` or `key=value` option of a backend config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigOption {
    /// The key.
    pub key: String,
    /// The value after `=`, if any.
    pub value: Option<String>,
}

/// Splits a backend config at commas (empty items ignored) and checks every key is in `valid`;
/// an unknown key is an error listing the valid ones.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parsing() {
        let o = parse_config("x", "parallelism=4,,ops_sequential", &["parallelism", "ops_sequential"]).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o[0].value.as_deref(), Some("4"));
        let e = parse_config("x", "bogus", &["parallelism"]).unwrap_err().to_string();
        assert!(e.contains("bogus") && e.contains("parallelism"), "{e}");
    }

    #[test]
    fn unknown_backend_lists_valid_ones() {
        let e = new_with_config("nonexistent:a=1").err().unwrap().to_string();
        assert!(e.contains("nonexistent"), "{e}");
    }
}
