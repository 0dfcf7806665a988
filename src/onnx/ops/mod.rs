//! Operator handlers: one function per ONNX op type, mapping a node onto IR ops. Each file
//! covers a family and exposes `lookup` (op type → handler) and `OPS` (the names it maps).

pub(crate) mod common;
mod control;
mod elementwise;
mod nn;
mod reduce;
mod shape;

pub(crate) use super::graph::Handler;

/// The handler for a default-domain op type.
pub(crate) fn handler(op_type: &str) -> Option<Handler> {
    elementwise::lookup(op_type)
        .or_else(|| shape::lookup(op_type))
        .or_else(|| reduce::lookup(op_type))
        .or_else(|| nn::lookup(op_type))
        .or_else(|| control::lookup(op_type))
}

/// Every op type with a handler, sorted.
pub(crate) fn supported() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = [elementwise::OPS, shape::OPS, reduce::OPS, nn::OPS, control::OPS].concat();
    v.sort_unstable();
    v
}
