//! Compile time of long elementwise chains on both backends (issue item 4b): a chain of `n`
//! nodes, either unary (`x → exp → neg → exp → …`) or binary (`x → x+y → ·y → +y → …` with a
//! second parameter `y`), built with the public builder and compiled on `interp` and `jit`.
//! Prints one line per (chain, size, backend): build time, compile time, and for `jit` the
//! time of each optimisation pass (the pipeline `jit` runs before planning).
//!
//! `cargo bench --bench compile_chain` (sizes 8000, 32000, 200000), or with sizes:
//! `cargo bench --bench compile_chain -- 1000 8000`. Not a criterion bench: one compile of a
//! 200,000-node chain is the measurement, and each size runs once (best of `REPEATS`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorjit::ir::module::Module;
use tensorjit::passes::PassCtx;
use tensorjit::passes::egraph::EggConfig;
use tensorjit::{Backend, DType, Shape};

/// Compiles per size and backend; the best time is printed.
const REPEATS: usize = 2;

#[derive(Clone, Copy)]
enum Chain {
    Unary,
    Binary,
}

impl Chain {
    fn name(self) -> &'static str {
        match self {
            Chain::Unary => "exp/neg",
            Chain::Binary => "add/mul",
        }
    }
}

fn build(b: &Arc<dyn Backend>, chain: Chain, n: usize) -> tensorjit::Builder {
    let bld = b.builder("chain");
    let main = bld.main();
    let x = main.parameter("x", Shape::new(DType::Float32, &[64])).expect("x");
    let y = main.parameter("y", Shape::new(DType::Float32, &[64])).expect("y");
    let mut v = x;
    for i in 0..n {
        v = match (chain, i % 2) {
            (Chain::Unary, 0) => main.exp(v),
            (Chain::Unary, _) => main.neg(v),
            (Chain::Binary, 0) => main.add(v, y),
            (Chain::Binary, _) => main.mul(v, y),
        }
        .expect("op");
    }
    main.return_(&[v]).expect("return");
    bld
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![8_000, 32_000, 200_000] } else { sizes };
    println!("{:<8} {:>8} {:<7} {:>9} {:>10}", "chain", "nodes", "backend", "build s", "compile s");
    for chain in [Chain::Unary, Chain::Binary] {
        for &n in &sizes {
            for name in ["interp", "jit"] {
                let b = tensorjit::new_with_config(name).expect("backend");
                let mut best_build = Duration::MAX;
                let mut best_compile = Duration::MAX;
                let mut module: Option<Module> = None;
                for _ in 0..REPEATS {
                    let t = Instant::now();
                    let bld = build(&b, chain, n);
                    best_build = best_build.min(t.elapsed());
                    module.get_or_insert_with(|| bld.module());
                    let t = Instant::now();
                    let exe = bld.compile().expect("compile");
                    best_compile = best_compile.min(t.elapsed());
                    drop(exe);
                }
                println!("{:<8} {n:>8} {name:<7} {:>9.3} {:>10.3}", chain.name(), secs(best_build), secs(best_compile));
                if name == "jit"
                    && let Some(mut m) = module
                {
                    // Where jit's time goes: the pass pipeline (verification off, as in release).
                    let mut ctx = PassCtx { verify: false, ..PassCtx::default() };
                    let t = Instant::now();
                    let report = tensorjit::passes::optimize_with_fusion(&mut m, &mut ctx, Some(&EggConfig::default()))
                        .expect("passes");
                    if std::env::var_os("TJ_EGG_REPORT").is_some()
                        && let Some(r) = report
                    {
                        println!("{r}");
                    }
                    let total = t.elapsed();
                    let mut per_pass: Vec<(String, Duration)> = Vec::new();
                    for (pass, d, _) in &ctx.timings {
                        match per_pass.iter_mut().find(|(p, _)| p == pass) {
                            Some((_, s)) => *s += *d,
                            None => per_pass.push((pass.clone(), *d)),
                        }
                    }
                    let parts: Vec<String> = per_pass.iter().map(|(p, d)| format!("{p} {:.3}", secs(*d))).collect();
                    println!("{:<8} {n:>8} passes  {:>9} {:>10.3}  ({})", "", "", secs(total), parts.join(", "));
                }
            }
        }
    }
}
