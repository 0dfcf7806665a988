//! `Function` methods for windows, gather/scatter, dot, conv, FFT, batch norm, RNG, control flow,
//! collectives and fused ops.

use crate::api::builder::Function;

impl Function {}
