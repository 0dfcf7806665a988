//! Shared support of the fused-kernel tests (tests/fused_kernels.rs, tests/attention_padding.rs,
//! tests/fused_half.rs): a deterministic generator, the ISA paths this machine runs, tensors from
//! slices, and the plans a `dump=DIR` backend wrote.
#![allow(dead_code)]

use std::path::Path;

use tensorjit::kernels::Tensor;
use tensorjit::kernels::fused::FusedIsa;
use tensorjit::{Element, Shape};

/// Deterministic pseudo-random numbers (64-bit LCG, top bits).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next_u32() as f32 / (1u64 << 31) as f32)
    }
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.next_u32() as usize % n
    }
}

/// The ISA paths this machine can run.
pub fn isas() -> Vec<FusedIsa> {
    let mut v = vec![FusedIsa::Generic];
    if FusedIsa::avx2_available() {
        v.push(FusedIsa::Avx2);
    }
    if FusedIsa::avx512_available() {
        v.push(FusedIsa::Avx512);
    }
    v
}

/// A tensor of `dims` holding `v`.
pub fn tensor<T: Element>(dims: &[usize], v: &[T]) -> Tensor {
    let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
    Tensor::from_vec(Shape::new(T::DTYPE, &d), v).expect("tensor")
}

/// Every `plan.txt` a `dump=DIR` backend wrote under `dir` (one folder per compile), joined;
/// then removes `dir`.
pub fn take_plans(dir: &Path) -> String {
    let mut plan = String::new();
    for e in std::fs::read_dir(dir).expect("dump dir").flatten() {
        let p = e.path().join("plan.txt");
        if let Ok(s) = std::fs::read_to_string(if e.path().is_dir() { p } else { e.path() }) {
            plan.push_str(&s);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    plan
}
