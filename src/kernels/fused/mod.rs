//! Hand-written fused kernels (Softmax, LayerNorm, GELU, flash attention) used by the "jit"
//! backend in place of the reference kernels.
