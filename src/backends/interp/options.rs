//! The typed options of the "interp" backend ([`InterpOptions`]) and their config-string form
//! (parsed by [`InterpOptions::parse`] with the shared helpers of [`crate::config`];
//! docs/configuration.md lists every option).

use std::fmt;
use std::str::FromStr;

use crate::config::{self, check_threads, option_error, parse_config};
use crate::error::Result;
use crate::threads::Threads;

use super::NAME;

/// The option names accepted in the config string.
pub const OPTIONS: &[&str] = &["parallelism", "while_limit"];

/// The options of an [`InterpBackend`](super::InterpBackend):
///
/// ```
/// use tensorjit::backends::interp::{InterpBackend, InterpOptions};
/// let opts = InterpOptions::default().while_limit(100);
/// assert_eq!(opts.to_string(), "while_limit=100");
/// assert_eq!("while_limit=100".parse::<InterpOptions>().unwrap(), opts);
/// let backend = InterpBackend::with_options(opts).unwrap();
/// ```
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InterpOptions {
    /// Accepted and checked like the jit's `parallelism` (1 to
    /// [`crate::limits::MAX_THREADS`], or `shared`) so that one config works on both backends;
    /// the interpreter runs each execution on the calling thread (concurrent `execute` calls
    /// on one executable run in parallel), so it has no other effect.
    pub threads: Threads,
    /// Most iterations one `while` may run; one more is an [`Error::Limit`](crate::Error::Limit)
    /// naming the while node (`while_limit=N`; default unbounded).
    pub while_limit: Option<u64>,
}

impl InterpOptions {
    /// The defaults (as [`InterpOptions::default`]).
    pub fn new() -> InterpOptions {
        InterpOptions::default()
    }

    /// `parallelism=N` (checked, otherwise without effect: see [`InterpOptions::threads`]).
    pub fn parallelism(mut self, n: usize) -> Self {
        self.threads = Threads::Own(n);
        self
    }

    /// At most `n` iterations per `while`.
    pub fn while_limit(mut self, n: u64) -> Self {
        self.while_limit = Some(n);
        self
    }

    /// The options of a config string (`""`, `"while_limit=10"`, …): an unknown option or a bad
    /// value is an [`Error::Config`](crate::Error::Config) naming it.
    pub fn parse(config: &str) -> Result<InterpOptions> {
        let mut o = InterpOptions::new();
        for item in parse_config(NAME, config, OPTIONS)? {
            let (key, v) = (item.key.as_str(), item.value.as_deref());
            match key {
                "parallelism" => o.threads = crate::threads::parse_threads(NAME, key, v)?,
                "while_limit" => o.while_limit = Some(config::parse_u64(NAME, key, v)?),
                _ => return Err(option_error(NAME, key, "not handled (internal error)")),
            }
        }
        Ok(o)
    }

    /// Checks the values the setters took (what [`Self::parse`] checks for a config string).
    pub fn validate(&self) -> Result<()> {
        if let Threads::Own(n) = self.threads {
            check_threads(NAME, "parallelism", n)?;
        }
        Ok(())
    }
}

impl FromStr for InterpOptions {
    type Err = crate::error::Error;

    fn from_str(s: &str) -> Result<InterpOptions> {
        InterpOptions::parse(s)
    }
}

impl fmt::Display for InterpOptions {
    /// The config string of the options that differ from the defaults.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = vec![];
        if self.threads != Threads::Shared {
            items.push(format!("parallelism={}", self.threads));
        }
        if let Some(n) = self.while_limit {
            items.push(format!("while_limit={n}"));
        }
        f.write_str(&items.join(","))
    }
}
