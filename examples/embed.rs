//! Sentence embeddings with all-MiniLM-L6-v2 on tensorjit: tokenise, run the ONNX model, mean-pool
//! with the attention mask, L2-normalise, and print the pairwise cosine similarities.
//!
//! ```text
//! python3 tools/export-minilm.py /work/models/minilm        # model.onnx + tokenizer.json
//! cargo run --release --example embed -- /work/models/minilm/model.onnx \
//!     [--tokenizer tokenizer.json] [--backend jit] [--json out.json] \
//!     [--file sentences.txt] [--seq-buckets 16,32,64,128,256] [--batch-buckets 1,2,4,8,16,32] \
//!     [--precompile] [SENTENCE ...]
//! python3 tools/embed-check.py out.json                     # compare with sentence-transformers
//! ```
//!
//! Without sentences (arguments or `--file`, one per line) a built-in list is used. `--json`
//! writes `{"model", "backend", "sentences", "embeddings"}` for tools/embed-check.py and as the
//! reference of examples/loadtest.rs. See docs/serving.md.

#[path = "support/minilm.rs"]
mod minilm;

use std::path::PathBuf;
use std::time::Instant;

use minilm::{Embedder, EmbedderOptions, Res, cosine, memory_mib, parse_sizes, tokenizer_path};

const DEFAULT_SENTENCES: &[&str] = &[
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "The new movie is awesome",
    "The cat sits outside",
    "I love pasta",
    "Do you like pizza?",
    "tensorjit compiles tensor graphs with Cranelift and runs them on the CPU.",
    "Ünïcödé, punctuation!? and numbers 3.14159 — handled by the BERT normaliser.",
    "",
];

fn usage() -> ! {
    eprintln!(
        "usage: embed MODEL.onnx [--tokenizer PATH] [--backend CONFIG] [--json OUT] [--file SENTENCES.txt] \
         [--seq-buckets LIST] [--batch-buckets LIST] [--precompile] [SENTENCE ...]"
    );
    std::process::exit(2)
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mut model: Option<PathBuf> = None;
    let mut tokenizer: Option<PathBuf> = None;
    let mut json: Option<PathBuf> = None;
    let mut opts = EmbedderOptions::default();
    let mut sentences: Vec<String> = Vec::new();
    let mut precompile = false;
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--tokenizer" => tokenizer = Some(value().into()),
            "--backend" => opts.backend = value(),
            "--json" => json = Some(value().into()),
            "--file" => {
                let text = std::fs::read_to_string(value())?;
                sentences.extend(text.lines().map(str::to_string));
            }
            "--seq-buckets" => opts.seq_buckets = parse_sizes(&value())?,
            "--batch-buckets" => opts.batch_buckets = parse_sizes(&value())?,
            "--precompile" => precompile = true,
            "-h" | "--help" => usage(),
            s if s.starts_with("--") => usage(),
            _ if model.is_none() => model = Some(a.into()),
            _ => sentences.push(a),
        }
    }
    let model = model.unwrap_or_else(|| usage());
    if sentences.is_empty() {
        sentences = DEFAULT_SENTENCES.iter().map(|s| s.to_string()).collect();
    }
    let tok = tokenizer_path(&model, tokenizer.as_deref());

    let t = Instant::now();
    let emb = Embedder::new(&model, &tok, opts)?;
    eprintln!("backend: {}", emb.backend_description());
    eprintln!("read model and tokenizer in {:.2}s", t.elapsed().as_secs_f64());
    if precompile {
        let secs = emb.precompile()?;
        let (rss, hwm) = memory_mib().unwrap_or((0.0, 0.0));
        eprintln!(
            "precompiled {} shapes in {secs:.1}s; VmRSS {rss:.0} MiB, VmHWM {hwm:.0} MiB",
            emb.compile_log().len()
        );
    }

    let t = Instant::now();
    let (vectors, stats) = emb.embed_with_stats(&sentences)?;
    let total = t.elapsed().as_secs_f64();
    let compile: f64 = if precompile { 0.0 } else { emb.compile_log().values().sum() };
    for ((b, s), secs) in emb.compile_log() {
        eprintln!("compiled batch {b} x sequence {s} in {secs:.2}s");
    }
    if let Some((rss, hwm)) = memory_mib() {
        eprintln!("VmRSS {rss:.0} MiB, VmHWM {hwm:.0} MiB");
    }
    eprintln!(
        "embedded {} sentences in {total:.3}s (import+compile {compile:.3}s, tokenize {:.4}s, {} executions {:.3}s)",
        sentences.len(),
        stats.tokenize_s,
        stats.executions,
        stats.execute_s - compile
    );
    // A second run of the same batch: executables are cached, so this is the steady state.
    let t = Instant::now();
    let again = emb.embed(&sentences)?;
    eprintln!("again (compiled): {:.3}s", t.elapsed().as_secs_f64());
    let drift = vectors.iter().zip(&again).map(|(a, b)| cosine(a, b)).fold(1.0f64, f64::min);
    if drift < 0.999_999 {
        return Err(format!("the second run differs (min cosine {drift})").into());
    }

    let dim = vectors.first().map_or(0, Vec::len);
    println!("{} sentences, {dim}-dimensional embeddings\n", sentences.len());
    for (i, s) in sentences.iter().enumerate() {
        println!("[{i:2}] {s:?}");
    }
    println!("\ncosine similarities:");
    print!("    ");
    for j in 0..sentences.len() {
        print!("{j:>6}");
    }
    println!();
    for (i, a) in vectors.iter().enumerate() {
        print!("{i:>4}");
        for b in &vectors {
            print!("{:>6.3}", cosine(a, b));
        }
        println!();
    }
    let mut best: Vec<(f64, usize, usize)> = Vec::new();
    for i in 0..vectors.len() {
        for j in i + 1..vectors.len() {
            best.push((cosine(&vectors[i], &vectors[j]), i, j));
        }
    }
    best.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("\nmost similar pairs:");
    for (c, i, j) in best.iter().take(5) {
        println!("  {c:.4}  {:?} ~ {:?}", sentences[*i], sentences[*j]);
    }

    if let Some(path) = json {
        let doc = serde_json::json!({
            "model": model.display().to_string(),
            "backend": emb.backend_description(),
            "sentences": sentences,
            "embeddings": vectors,
        });
        std::fs::write(&path, serde_json::to_vec(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
