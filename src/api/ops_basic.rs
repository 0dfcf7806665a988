//! `Function` methods for elementwise, shape-manipulation, reduction, cumulative and barrier ops.

use crate::api::builder::Function;

impl Function {}
