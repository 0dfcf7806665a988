//! Neural-network operators: MatMul, Gemm, Einsum, convolution, pooling, normalisations, softmax, resize.

use super::Handler;

/// Op types mapped here.
pub(super) const OPS: &[&str] = &[];

pub(super) fn lookup(op: &str) -> Option<Handler> {
    let _ = op;
    None
}
