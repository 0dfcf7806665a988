//! `FinalizeSlot`: the compiled state of an executable, shared by concurrent executions and
//! dropped by `finalize` (after which every access is an [`Error::UseAfterFree`]).

use std::sync::{Arc, RwLock};

use crate::error::{Error, Result};

/// Holds `Arc<T>` until [`FinalizeSlot::take`]; executions clone the `Arc`, so a finalize
/// during a running execution frees the state only when that execution ends.
#[derive(Debug)]
pub struct FinalizeSlot<T>(RwLock<Option<Arc<T>>>);

impl<T> FinalizeSlot<T> {
    /// A slot holding `value`.
    pub fn new(value: T) -> FinalizeSlot<T> {
        FinalizeSlot(RwLock::new(Some(Arc::new(value))))
    }

    /// The state, or `UseAfterFree` once finalized.
    pub fn get(&self) -> Result<Arc<T>> {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| Error::UseAfterFree { what: "executable".into(), state: "finalized".into() })
    }

    /// Removes the state (finalize); returns it if it was still there.
    pub fn take(&self) -> Option<Arc<T>> {
        self.0.write().unwrap_or_else(|e| e.into_inner()).take()
    }
}
