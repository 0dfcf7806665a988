//! The backend registry: register by name, list, and create from `TENSORJIT_BACKEND`, a config
//! string (`"jit:parallelism=4"`) or typed options ([`new_with_options`]).

use std::sync::{Arc, Mutex, OnceLock};

use crate::api::backend::Backend;
use crate::backends::interp::{InterpBackend, InterpOptions};
#[cfg(feature = "jit")]
use crate::backends::jit::{JitBackend, JitOptions};
use crate::error::{Error, Result};

pub use crate::config::{ConfigOption, parse_config};

/// A backend constructor taking the backend-config part of `"name:config"`.
pub type Constructor = fn(config: &str) -> Result<Arc<dyn Backend>>;

/// The environment variable read by [`new`].
pub use crate::env::BACKEND_ENV;

/// The backend used by [`new`] when the environment variable is unset and it is registered:
/// "jit", or "interp" when the crate is built without the `jit` feature.
#[cfg(feature = "jit")]
pub const DEFAULT_BACKEND: &str = "jit";
/// The backend used by [`new`] when the environment variable is unset and it is registered:
/// "jit", or "interp" when the crate is built without the `jit` feature.
#[cfg(not(feature = "jit"))]
pub const DEFAULT_BACKEND: &str = "interp";

fn registry() -> &'static Mutex<Vec<(String, Constructor)>> {
    static REG: OnceLock<Mutex<Vec<(String, Constructor)>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(builtin_backends()))
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

/// The config [`new`] uses for a value of `TENSORJIT_BACKEND` (`None`: unset): the value when it
/// has anything but whitespace, else the default backend if registered, else `""` (the first
/// registered one). A variable set to an empty or blank value counts as unset.
pub fn config_from_env_value(value: Option<&str>) -> String {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        Some(cfg) => cfg.to_string(),
        None if list().iter().any(|n| n == DEFAULT_BACKEND) => DEFAULT_BACKEND.to_string(),
        None => String::new(),
    }
}

/// A backend from `TENSORJIT_BACKEND` if it is set to something other than blanks, else the
/// default backend if registered, else the first registered one.
pub fn new() -> Result<Arc<dyn Backend>> {
    let value = std::env::var(BACKEND_ENV).ok();
    new_with_config(&config_from_env_value(value.as_deref()))
}

/// A backend from `"name[:opt1,opt2=v]"`; `""` picks the first registered backend.
///
/// ```
/// let jit = tensorjit::new_with_config("jit:parallelism=2,fusion=on")?;
/// assert_eq!(jit.name(), "jit");
/// assert!(tensorjit::list().contains(&"interp".to_string()));
/// // Unknown backends and options are errors that name them.
/// let e = tensorjit::new_with_config("jit:bogus=1").err().unwrap();
/// assert!(e.to_string().contains("bogus"));
/// # Ok::<(), tensorjit::Error>(())
/// ```
pub fn new_with_config(config: &str) -> Result<Arc<dyn Backend>> {
    let (name, opts) = config.split_once(':').unwrap_or((config, ""));
    let name = name.trim();
    let ctor = {
        let r = registry().lock().unwrap_or_else(|e| e.into_inner());
        if name.is_empty() { r.first().map(|e| e.1) } else { r.iter().find(|(n, _)| n == name).map(|e| e.1) }
    };
    match ctor {
        Some(c) => c(opts),
        None => Err(Error::Config(format!("unknown backend {name:?}; registered backends: {}", list().join(", ")))),
    }
}

/// The typed options of one of the built-in backends, for [`new_with_options`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendOptions {
    /// The "jit" backend.
    #[cfg(feature = "jit")]
    Jit(JitOptions),
    /// The "interp" backend.
    Interp(InterpOptions),
}

#[cfg(feature = "jit")]
impl From<JitOptions> for BackendOptions {
    fn from(o: JitOptions) -> Self {
        BackendOptions::Jit(o)
    }
}

impl From<InterpOptions> for BackendOptions {
    fn from(o: InterpOptions) -> Self {
        BackendOptions::Interp(o)
    }
}

impl BackendOptions {
    /// The backend's registry name.
    pub fn backend_name(&self) -> &'static str {
        match self {
            #[cfg(feature = "jit")]
            BackendOptions::Jit(_) => crate::backends::jit::NAME,
            BackendOptions::Interp(_) => crate::backends::interp::NAME,
        }
    }

    /// The options of a full config string `"name[:options]"` of a built-in backend (`""`: the
    /// default backend).
    pub fn parse(config: &str) -> Result<BackendOptions> {
        let (name, opts) = config.split_once(':').unwrap_or((config, ""));
        match name.trim() {
            #[cfg(feature = "jit")]
            "" | "jit" => Ok(BackendOptions::Jit(JitOptions::parse(opts)?)),
            #[cfg(not(feature = "jit"))]
            "" => Ok(BackendOptions::Interp(InterpOptions::parse(opts)?)),
            "interp" => Ok(BackendOptions::Interp(InterpOptions::parse(opts)?)),
            other => Err(Error::Config(format!(
                "unknown built-in backend {other:?}; built-in backends: {}",
                if cfg!(feature = "jit") { "jit, interp" } else { "interp (built without the jit feature)" }
            ))),
        }
    }
}

impl std::fmt::Display for BackendOptions {
    /// The full config string (`jit`, `jit:parallelism=2`, `interp:while_limit=9`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opts = match self {
            #[cfg(feature = "jit")]
            BackendOptions::Jit(o) => o.to_string(),
            BackendOptions::Interp(o) => o.to_string(),
        };
        f.write_str(self.backend_name())?;
        if !opts.is_empty() {
            write!(f, ":{opts}")?;
        }
        Ok(())
    }
}

/// A built-in backend from typed options (`tensorjit::new_with_options(JitOptions::default()
/// .parallelism(4))`): the same as [`new_with_config`] with the options' config string, without
/// the round trip through text. It creates the built-in backend even if another constructor
/// was [`register`]ed under its name.
pub fn new_with_options(opts: impl Into<BackendOptions>) -> Result<Arc<dyn Backend>> {
    match opts.into() {
        #[cfg(feature = "jit")]
        BackendOptions::Jit(o) => Ok(JitBackend::with_options(o)?),
        BackendOptions::Interp(o) => Ok(InterpBackend::with_options(o)?),
    }
}

/// The backends compiled into the crate, registered at first use of the registry.
fn builtin_backends() -> Vec<(String, Constructor)> {
    vec![
        (crate::backends::interp::NAME.to_string(), crate::backends::interp::InterpBackend::constructor as Constructor),
        #[cfg(feature = "jit")]
        (crate::backends::jit::NAME.to_string(), crate::backends::jit::JitBackend::constructor as Constructor),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_backend_lists_valid_ones() {
        let e = new_with_config("nonexistent:a=1").err().unwrap().to_string();
        assert!(e.contains("nonexistent"), "{e}");
    }

    #[test]
    fn blank_environment_value_is_unset() {
        for v in [None, Some(""), Some("   "), Some("\t")] {
            assert_eq!(config_from_env_value(v), DEFAULT_BACKEND, "{v:?}");
        }
        assert_eq!(config_from_env_value(Some(" interp ")), "interp");
    }

    #[cfg(feature = "jit")]
    #[test]
    fn typed_options_round_trip() {
        let o = BackendOptions::from(JitOptions::default().parallelism(2));
        assert_eq!(o.to_string(), "jit:parallelism=2");
        assert_eq!(BackendOptions::parse(&o.to_string()).unwrap(), o);
        let i = BackendOptions::from(InterpOptions::default().while_limit(9));
        assert_eq!(BackendOptions::parse(&i.to_string()).unwrap(), i);
        assert!(BackendOptions::parse("other").is_err());
    }
}
