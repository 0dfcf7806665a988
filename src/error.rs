//! The one error type of the public API, with a variant per kind of failure.

use std::fmt;

/// Result alias used throughout tensorjit.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tensorjit. Messages name the op (or component) and the
/// offending operand, attribute or value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument: wrong dtype, shape, axis, attribute, operand, …
    #[error("{op}: {msg}")]
    Invalid {
        /// The op or API entry point that rejected the call.
        op: String,
        /// What was wrong, naming the offending value.
        msg: String,
    },
    /// The op, dtype or option is not supported by this backend.
    #[error("{op}: not implemented: {msg}")]
    NotImplemented {
        /// The op or feature.
        op: String,
        /// Why (which dtype, which backend, …).
        msg: String,
    },
    /// Malformed IR text.
    #[error("parse error at line {line}, column {column}: {msg}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What was expected or found.
        msg: String,
    },
    /// The verifier found broken invariants (all of them are listed).
    #[error("verification failed with {} error(s):\n{}", .0.len(), VerifyList(.0))]
    Verify(Vec<String>),
    /// Bad backend configuration string or registry lookup.
    #[error("config: {0}")]
    Config(String),
    /// A failure while executing a compiled function.
    #[error("execute: {0}")]
    Execution(String),
    /// Use of a buffer, executable or backend after it was donated or finalized.
    #[error("{what} used after it was {state}")]
    UseAfterFree {
        /// What was used ("buffer", "executable", …).
        what: String,
        /// "finalized" or "donated".
        state: String,
    },
    /// Input/output failure (files, .npy).
    #[error("io: {0}")]
    Io(String),
    /// An allocation failed (or would exceed the per-tensor limit of [`crate::limits`]).
    #[error("{op}: out of memory: {bytes} bytes could not be allocated")]
    OutOfMemory {
        /// The op, file or component that needed the memory.
        op: String,
        /// The size of the failed allocation.
        bytes: usize,
    },
    /// A documented limit of [`crate::limits`] was exceeded (nesting depth, tensor size, loop
    /// iterations, thread count, input size).
    #[error("{what}: limit exceeded: {msg}")]
    Limit {
        /// The op, file or component.
        what: String,
        /// Which limit and the offending value.
        msg: String,
    },
    /// The execution was cancelled through its [`crate::api::CancelToken`]; the executable stays
    /// usable.
    #[error("execute: cancelled")]
    Cancelled,
    /// The execution ran past the deadline of its [`crate::api::ExecOptions`]; the executable
    /// stays usable.
    #[error("execute: deadline exceeded")]
    DeadlineExceeded,
}

struct VerifyList<'a>(&'a [String]);

impl fmt::Display for VerifyList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl Error {
    /// An [`Error::Invalid`] for `op`.
    pub fn invalid(op: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Invalid { op: op.into(), msg: msg.into() }
    }

    /// An [`Error::NotImplemented`] for `op`.
    pub fn not_implemented(op: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::NotImplemented { op: op.into(), msg: msg.into() }
    }

    /// An [`Error::Limit`] for `what`.
    pub fn limit(what: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::Limit { what: what.into(), msg: msg.into() }
    }

    /// An [`Error::OutOfMemory`] for `op`.
    pub fn out_of_memory(op: impl Into<String>, bytes: usize) -> Error {
        Error::OutOfMemory { op: op.into(), bytes }
    }

    /// Whether this is a "not implemented" error (callers fall back to decompositions).
    pub fn is_not_implemented(&self) -> bool {
        matches!(self, Error::NotImplemented { .. })
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e.to_string())
    }
}

/// Returns `Err(Error::invalid(op, format!(...)))` from the enclosing function.
#[macro_export]
macro_rules! bail {
    ($op:expr, $($fmt:tt)*) => {
        return Err($crate::error::Error::invalid($op, format!($($fmt)*)))
    };
}
