//! Greedy generation with a GPT-2-shaped decoder on tensorjit, one token per step, with a KV
//! cache updated in place (examples/support/gpt2.rs builds the step; docs/decoding.md).
//!
//! ```text
//! cargo run --release --example generate -- [--weights gpt2.safetensors] [--seed 0] [--layers N]
//!     [--backend jit:parallelism=1] [--prompt 464,2068,7586] [--tokens 20] [--tmax 1024]
//!     [--batch-lens 5,9,...]   # batched: sequences of these prompt lengths, decoded together
//!     [--bench-stdin]          # latency server for benches/compare/decode_peers.py
//!     [--profile C]            # where a step's time goes at context C (per-kernel table)
//! ```
//!
//! Without `--weights` the model is GPT-2 small with random weights from `--seed` (`--layers`
//! makes it shallower). Tokens are ids (there is no tokenizer here). The prompt is fed one token
//! per step (the prefill uses the decode step too); the generated ids are printed with the
//! per-token latency of the decode steps.
//!
//! `--bench-stdin` compiles the step and answers lines on stdin, one JSON line each:
//! `ctx C N` times N decode steps of one sequence ending at context C (positions C−N … C−1; the
//! cache contents are whatever they are, which does not change the work), and `batch L1,…,LB N`
//! times N steps of B sequences at lengths L1…LB (each sequence's own position).

#[path = "support/gpt2.rs"]
mod gpt2;

use std::io::BufRead;
use std::path::PathBuf;
use std::time::Instant;

use gpt2::{CacheWrite, Config, Decoder, Weights, build_step};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn usage() -> ! {
    eprintln!(
        "usage: generate [--weights FILE.safetensors] [--seed N] [--layers N] [--backend CONFIG] [--prompt IDS] \
         [--tokens N] [--tmax N] [--batch-lens LENS] [--bench-stdin] [--profile CONTEXT]"
    );
    std::process::exit(2)
}

fn ids(s: &str) -> Res<Vec<usize>> {
    Ok(s.split(',').filter(|t| !t.trim().is_empty()).map(|t| t.trim().parse()).collect::<Result<_, _>>()?)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let (mut weights, mut seed, mut layers, mut backend) = (None::<PathBuf>, 0u64, None::<usize>, "jit".to_string());
    let (mut prompt, mut tokens, mut tmax, mut batch_lens, mut bench) =
        (vec![464, 2068, 7586, 21831], 20usize, None::<usize>, None::<Vec<usize>>, false);
    let mut profile = None::<usize>;
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--weights" => weights = Some(value().into()),
            "--seed" => seed = value().parse()?,
            "--layers" => layers = Some(value().parse()?),
            "--backend" => backend = value(),
            "--prompt" => prompt = ids(&value())?,
            "--tokens" => tokens = value().parse()?,
            "--tmax" => tmax = Some(value().parse()?),
            "--batch-lens" => batch_lens = Some(ids(&value())?),
            "--bench-stdin" => bench = true,
            "--profile" => profile = Some(value().parse()?),
            _ => usage(),
        }
    }
    let t = Instant::now();
    let w = match &weights {
        Some(p) => Weights::load(p)?,
        None => {
            let mut cfg = Config::small();
            cfg.layers = layers.unwrap_or(cfg.layers);
            Weights::random(cfg, seed)
        }
    };
    let cfg = w.cfg;
    let tmax = tmax.unwrap_or(cfg.max_pos);
    let backend = tensorjit::new_with_config(&backend)?;
    eprintln!("model: {cfg:?}; backend: {}; weights ready in {:.2}s", backend.description(), t.elapsed().as_secs_f64());
    let compile = |batch: usize, write: CacheWrite| -> Res<Decoder> {
        let t = Instant::now();
        let step = build_step(&backend, &w, batch, tmax, write)?;
        eprintln!("compiled the batch-{batch} step ({write:?}) in {:.2}s", t.elapsed().as_secs_f64());
        Ok(Decoder::new(step)?)
    };

    if let Some(ctx) = profile {
        // Warm-up steps, then 8 profiled ones ending at context `ctx`.
        let mut dec = compile(1, CacheWrite::SamePosition)?;
        dec.set_lens(&[ctx.saturating_sub(10)])?;
        dec.step(&[0])?;
        dec.step(&[0])?;
        let profiler = tensorjit::Profiler::new();
        dec.opts.profiler = Some(profiler.clone());
        for _ in 0..8 {
            dec.step(&[0])?;
        }
        println!("8 decode steps ending at context {ctx}:\n{}", profiler.summary_table(Some(20)));
        return Ok(());
    }

    if bench {
        let mut single = compile(1, CacheWrite::SamePosition)?;
        let mut batched: Option<Decoder> = None;
        println!("{{\"ready\": true}}");
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            let parts: Vec<&str> = line.split_whitespace().collect();
            // Each sequence ends the N steps at its given context.
            let (dec, ends, n) = match parts.as_slice() {
                ["ctx", c, n] => (&mut single, vec![c.parse::<usize>()?], n.parse::<usize>()?),
                ["batch", lens, n] => {
                    let lens = ids(lens)?;
                    if batched.as_ref().is_none_or(|d| d.step.batch != lens.len()) {
                        batched = Some(compile(lens.len(), CacheWrite::PerSequence)?);
                    }
                    (batched.as_mut().expect("compiled above"), lens, n.parse::<usize>()?)
                }
                _ => {
                    println!("{{\"error\": {:?}}}", format!("unknown command {line}"));
                    continue;
                }
            };
            let lens: Vec<usize> = ends.iter().map(|&e| e.saturating_sub(n)).collect();
            dec.set_lens(&lens)?;
            let toks = vec![0i32; lens.len()];
            let mut times = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                dec.step(&toks)?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let list = times.iter().map(|t| format!("{t:.4}")).collect::<Vec<_>>().join(", ");
            println!("{{\"cmd\": {line:?}, \"ms\": [{list}]}}");
        }
        return Ok(());
    }

    let lens = batch_lens.unwrap_or_else(|| vec![prompt.len()]);
    let batch = lens.len();
    let write = if batch == 1 { CacheWrite::SamePosition } else { CacheWrite::PerSequence };
    let mut dec = compile(batch, write)?;
    // Sequence i's prompt: the first lens[i] ids of the prompt, cycled.
    let prompts: Vec<Vec<i32>> =
        lens.iter().map(|&l| (0..l).map(|j| prompt[j % prompt.len().max(1)] as i32).collect()).collect();
    let mut outs: Vec<Vec<i32>> = vec![Vec::new(); batch];
    let mut next = vec![0i32; batch];
    let (mut prefill, mut decode) = (Vec::new(), Vec::new());
    let longest = *lens.iter().max().unwrap_or(&0);
    // Sequences advance together: a sequence still in its prompt feeds its next prompt token,
    // one past it feeds its last prediction. Shorter prompts start generating earlier.
    for s in 0..longest + tokens {
        let done = (0..batch).all(|i| outs[i].len() >= tokens);
        if done {
            break;
        }
        let feed: Vec<i32> = (0..batch).map(|i| if s < prompts[i].len() { prompts[i][s] } else { next[i] }).collect();
        let t = Instant::now();
        let o = dec.step(&feed)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        if s + 1 < longest {
            prefill.push(ms)
        } else {
            decode.push(ms)
        }
        for i in 0..batch {
            if s + 1 >= prompts[i].len() && outs[i].len() < tokens {
                outs[i].push(o.next[i]);
            }
        }
        next = o.next;
    }
    for (i, o) in outs.iter().enumerate() {
        let p: Vec<String> = prompts[i].iter().map(|t| t.to_string()).collect();
        let g: Vec<String> = o.iter().map(|t| t.to_string()).collect();
        println!("sequence {i}: prompt [{}] -> [{}]", p.join(", "), g.join(", "));
    }
    eprintln!(
        "{} steps: prompt {:.2} ms/step (median), generation {:.2} ms/step (median), batch {batch}",
        prefill.len() + decode.len(),
        median(&mut prefill),
        median(&mut decode)
    );
    Ok(())
}
