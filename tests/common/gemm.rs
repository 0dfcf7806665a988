//! Shared support of the GEMM tests (tests/gemm.rs natively, tests/gemm_aarch64.rs under
//! qemu): test matrices in three layouts, the naive f64 triple-loop reference with the fused
//! epilogue, the checker, and the child-process runner for the environment overrides.
#![allow(dead_code)]

use tensorjit::kernels::gemm::epilogue::act_f64;
use tensorjit::kernels::gemm::{Activation, Bias, Epilogue, Scalar};

/// Values that are exact in bf16/f16/i8 and whose products are exact: multiples of 1/8 in
/// [-1, 1].
pub fn val(seed: usize, i: usize, j: usize) -> f64 {
    (((i * 7 + j * 13 + seed * 5) % 17) as f64 - 8.0) / 8.0
}

/// A rows x cols matrix of `f(r, c)`: layout 0 row-major, 1 column-major (the transpose of
/// row-major), 2 row-major with padded rows (stride cols + 3). Padding holds 99, a marker the
/// checks require to survive. Returns (data, rs, cs).
pub fn layout(rows: usize, cols: usize, kind: usize, f: impl Fn(usize, usize) -> f64) -> (Vec<f64>, usize, usize) {
    let (rs, cs, len) = match kind {
        0 => (cols, 1, rows * cols),
        1 => (1, rows, rows * cols),
        _ => (cols + 3, 1, rows * (cols + 3)),
    };
    let mut d = vec![99.0; len.max(1)];
    for r in 0..rows {
        for c in 0..cols {
            d[r * rs + c * cs] = f(r, c);
        }
    }
    (d, rs, cs)
}

/// A problem's sizes and the layouts of A, B, C (see [`layout`]).
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub la: usize,
    pub lb: usize,
    pub lc: usize,
}

impl Case {
    /// All three operands row-major.
    pub fn plain(m: usize, n: usize, k: usize) -> Case {
        Case { m, n, k, la: 0, lb: 0, lc: 0 }
    }
}

/// Epilogue settings, in f64 for the reference.
#[derive(Clone, Copy, Debug)]
pub struct Ep {
    pub alpha: f64,
    pub beta: f64,
    /// 0 none, 1 per row, 2 per column.
    pub bias: u8,
    pub act: Activation,
}

/// `C = A·B`.
pub const PLAIN: Ep = Ep { alpha: 1.0, beta: 0.0, bias: 0, act: Activation::None };

/// Inputs of one case and the expected output.
pub struct Problem {
    pub a: (Vec<f64>, usize, usize),
    pub b: (Vec<f64>, usize, usize),
    pub c: (Vec<f64>, usize, usize),
    pub bias: Vec<f64>,
    pub want: Vec<f64>,
    /// Σ|a·b| + |beta·c| + |pre-activation| + 1 per element (the error scale).
    pub scale: Vec<f64>,
}

/// The inputs of `cs` and `act(alpha·A·B + beta·C + bias)` by a naive f64 triple loop.
pub fn problem(cs: Case, ep: Ep) -> Problem {
    let a = layout(cs.m, cs.k, cs.la, |i, p| val(1, i, p));
    let b = layout(cs.k, cs.n, cs.lb, |p, j| val(2, p, j));
    let c = layout(cs.m, cs.n, cs.lc, |i, j| val(3, i, j));
    let bias: Vec<f64> = match ep.bias {
        1 => (0..cs.m).map(|i| val(4, i, 0)).collect(),
        2 => (0..cs.n).map(|j| val(5, 0, j)).collect(),
        _ => vec![],
    };
    let mut want = c.0.clone();
    let mut scale = vec![0.0; c.0.len()];
    for i in 0..cs.m {
        for j in 0..cs.n {
            let (mut s, mut sa) = (0.0, 0.0);
            for p in 0..cs.k {
                let x = a.0[i * a.1 + p * a.2] * b.0[p * b.1 + j * b.2];
                s += x;
                sa += x.abs();
            }
            let idx = i * c.1 + j * c.2;
            let mut v = ep.alpha * s + ep.beta * c.0[idx];
            v += match ep.bias {
                1 => bias[i],
                2 => bias[j],
                _ => 0.0,
            };
            want[idx] = act_f64(ep.act, v);
            scale[idx] = ep.alpha.abs() * sa + ep.beta.abs() * c.0[idx].abs() + v.abs() + 1.0;
        }
    }
    Problem { a, b, c, bias, want, scale }
}

/// The kernel-side epilogue of `ep` with `bias` (in the element type) and alpha/beta converted.
pub fn epilogue<T: Scalar>(ep: Ep, bias: &[T], alpha: T, beta: T) -> Epilogue<'_, T> {
    Epilogue {
        alpha,
        beta,
        bias: match ep.bias {
            1 => Bias::PerRow(bias),
            2 => Bias::PerColumn(bias),
            _ => Bias::None,
        },
        activation: ep.act,
    }
}

/// Checks `got` (C after the call, in f64) against the reference within `tol` times each
/// element's error scale, and that no element outside the logical C (padding) was written.
pub fn check(what: &str, cs: Case, got: &[f64], p: &Problem, tol: f64) {
    let mut inside = vec![false; got.len()];
    for i in 0..cs.m {
        for j in 0..cs.n {
            let idx = i * p.c.1 + j * p.c.2;
            inside[idx] = true;
            let err = (got[idx] - p.want[idx]).abs();
            assert!(
                err <= tol * p.scale[idx],
                "{what} {cs:?}: C[{i},{j}] = {} want {} (err {err:.3e})",
                got[idx],
                p.want[idx]
            );
        }
    }
    for (idx, (&g, &c0)) in got.iter().zip(p.c.0.iter()).enumerate() {
        if !inside[idx] {
            assert_eq!(g, c0, "{what} {cs:?}: element {idx} outside C was written");
        }
    }
}

/// Runs test `test` of this binary again in a child process with `marker=want` and the
/// environment `vars` (the GEMM overrides are read once per process), through cargo's aarch64
/// runner (qemu) when cross-testing; panics with the child's output if it fails.
pub fn run_child(test: &str, marker: &str, want: &str, vars: &[(&str, &str)], clear: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let runner =
        std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok().filter(|_| cfg!(target_arch = "aarch64"));
    let mut cmd = match &runner {
        Some(r) => {
            let mut c = std::process::Command::new(r);
            c.arg(&exe);
            c
        }
        None => std::process::Command::new(&exe),
    };
    cmd.args([test, "--exact", "--test-threads=1"]).env(marker, want);
    for k in clear {
        cmd.env_remove(k);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{vars:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
