//! Sentence embeddings with all-MiniLM-L6-v2 (or any BERT-style ONNX encoder with inputs
//! `input_ids`, `attention_mask`, optionally `token_type_ids`, and output `last_hidden_state`)
//! on tensorjit: tokenise, pad to a shape bucket, execute, mean-pool with the attention mask and
//! L2-normalise — what sentence-transformers' Transformer → Pooling(mean) → Normalize does.
//!
//! Shared by examples/embed.rs and examples/serve.rs (`#[path]` module); see docs/serving.md.
//!
//! Shapes: the exported model's `batch` and `sequence` axes are symbolic. The `jit` backend
//! compiles static shapes only (it hands dynamic modules to the interpreter), so the model is
//! imported and compiled once per *shape bucket*: the sequence is padded up to the next length in
//! `seq_buckets` (padding positions have attention mask 0, so they change no real token's state
//! and are left out of the mean), and the batch up to the next size in `batch_buckets` (padding
//! rows are all-`[PAD]` and are dropped). Executables are cached by shape; `precompile` builds them
//! all up front (the server does, so that requests never compile).

#![allow(dead_code)] // each example uses a different part

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tensorjit::onnx::{ImportOptions, OnnxModel};
use tensorjit::{Backend, Buffer, Executable};
use tokenizers::{Tokenizer, TruncationParams};

/// Result type of the examples (tensorjit, tokenizer and I/O errors as text).
pub type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 (sentence_bert_config.json):
/// longer inputs are truncated to this many tokens, [CLS] and [SEP] included.
pub const DEFAULT_MAX_SEQ: usize = 256;
/// Sequence buckets (tokens, [CLS]/[SEP] included).
pub const DEFAULT_SEQ_BUCKETS: &[usize] = &[16, 32, 64, 128, 256];
/// Batch buckets (sentences per execution); larger requests are split into chunks of the largest.
pub const DEFAULT_BATCH_BUCKETS: &[usize] = &[1, 2, 4, 8, 16, 32];

/// Options of an [`Embedder`].
#[derive(Clone, Debug)]
pub struct EmbedderOptions {
    /// Backend config string (`jit`, `interp`, `jit:parallelism=1`, ...).
    pub backend: String,
    /// Ascending sequence buckets; the last is the truncation length.
    pub seq_buckets: Vec<usize>,
    /// Ascending batch buckets.
    pub batch_buckets: Vec<usize>,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        EmbedderOptions {
            backend: "jit".into(),
            seq_buckets: DEFAULT_SEQ_BUCKETS.to_vec(),
            batch_buckets: DEFAULT_BATCH_BUCKETS.to_vec(),
        }
    }
}

/// Parses a comma-separated list of sizes, e.g. `16,32,64`.
pub fn parse_sizes(text: &str) -> Res<Vec<usize>> {
    let mut v: Vec<usize> = text.split(',').map(|s| s.trim().parse::<usize>()).collect::<Result<_, _>>()?;
    v.sort_unstable();
    v.dedup();
    if v.is_empty() || v[0] == 0 {
        return Err(format!("bad size list {text:?}").into());
    }
    Ok(v)
}

/// One compiled shape.
struct Compiled {
    exe: Arc<dyn Executable>,
    /// For each executable input: which of our three tensors feeds it.
    feeds: Vec<Feed>,
}

#[derive(Clone, Copy, Debug)]
enum Feed {
    Ids,
    Mask,
    Types,
}

/// A cache entry: filled once by the first thread that compiles its shape.
type Slot = Arc<OnceLock<Arc<Compiled>>>;

/// Timings of one [`Embedder::embed`] call.
#[derive(Clone, Copy, Debug, Default)]
pub struct EmbedStats {
    pub tokenize_s: f64,
    pub execute_s: f64,
    pub executions: usize,
}

/// A tokenizer plus the model compiled per shape bucket.
pub struct Embedder {
    backend: Arc<dyn Backend>,
    model_path: PathBuf,
    /// The model file, read once; each shape bucket imports from it.
    model_bytes: Vec<u8>,
    tokenizer: Tokenizer,
    opts: EmbedderOptions,
    /// Hidden size (last dim of `last_hidden_state`), known after the first compile.
    hidden: OnceLock<usize>,
    cache: Mutex<HashMap<(usize, usize), Slot>>,
    /// Seconds spent importing + compiling, per shape.
    compile_log: Mutex<BTreeMap<(usize, usize), f64>>,
}

/// `tokenizer.json` given explicitly, else beside the model.
pub fn tokenizer_path(model: &Path, explicit: Option<&Path>) -> PathBuf {
    match explicit {
        Some(p) => p.to_path_buf(),
        None => model.parent().unwrap_or(Path::new(".")).join("tokenizer.json"),
    }
}

impl Embedder {
    /// Reads the model and the tokenizer; compiles nothing yet.
    pub fn new(model: &Path, tokenizer: &Path, opts: EmbedderOptions) -> Res<Embedder> {
        if opts.seq_buckets.is_empty() || opts.batch_buckets.is_empty() {
            return Err("empty bucket list".into());
        }
        let backend = tensorjit::new_with_config(&opts.backend)?;
        let model_bytes = std::fs::read(model).map_err(|e| format!("{}: {e}", model.display()))?;
        let mut tok = Tokenizer::from_file(tokenizer).map_err(|e| format!("{}: {e}", tokenizer.display()))?;
        // The file pads to a fixed 128 and truncates at 128 (the ONNX export's defaults): we pad
        // ourselves (to a bucket) and truncate as sentence-transformers does.
        tok.with_padding(None);
        let max_len = *opts.seq_buckets.last().unwrap();
        tok.with_truncation(Some(TruncationParams { max_length: max_len, ..TruncationParams::default() }))
            .map_err(|e| format!("truncation: {e}"))?;
        Ok(Embedder {
            backend,
            model_path: model.to_path_buf(),
            model_bytes,
            tokenizer: tok,
            opts,
            hidden: OnceLock::new(),
            cache: Mutex::new(HashMap::new()),
            compile_log: Mutex::new(BTreeMap::new()),
        })
    }

    /// The backend's description.
    pub fn backend_description(&self) -> String {
        self.backend.description()
    }

    /// The options.
    pub fn options(&self) -> &EmbedderOptions {
        &self.opts
    }

    /// Embedding size (compiles the smallest shape if nothing is compiled yet).
    pub fn dim(&self) -> Res<usize> {
        if let Some(&h) = self.hidden.get() {
            return Ok(h);
        }
        self.compiled(self.opts.batch_buckets[0], self.opts.seq_buckets[0])?;
        Ok(*self.hidden.get().unwrap())
    }

    /// Compiles every (batch, sequence) bucket; returns the total seconds.
    pub fn precompile(&self) -> Res<f64> {
        let t = Instant::now();
        for &b in &self.opts.batch_buckets {
            for &s in &self.opts.seq_buckets {
                self.compiled(b, s)?;
            }
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// Import + compile seconds per shape so far.
    pub fn compile_log(&self) -> BTreeMap<(usize, usize), f64> {
        self.compile_log.lock().unwrap().clone()
    }

    fn compiled(&self, batch: usize, seq: usize) -> Res<Arc<Compiled>> {
        let cell = self.cache.lock().unwrap().entry((batch, seq)).or_default().clone();
        if let Some(c) = cell.get() {
            return Ok(c.clone());
        }
        // Another thread may be compiling the same shape: both compile, one result is kept
        // (OnceLock::get_or_try_init is unstable). The server precompiles, so this is rare.
        let t = Instant::now();
        let c = Arc::new(self.compile(batch, seq)?);
        self.compile_log.lock().unwrap().insert((batch, seq), t.elapsed().as_secs_f64());
        Ok(cell.get_or_init(|| c).clone())
    }

    fn compile(&self, batch: usize, seq: usize) -> Res<Compiled> {
        let info = tensorjit::onnx::info_bytes(&self.model_bytes)?;
        let mut opts = ImportOptions::default();
        for (name, _) in &info.inputs {
            opts.input_dims.insert(name.clone(), vec![batch as i64, seq as i64]);
        }
        let base = self.model_path.parent().map(Path::to_path_buf);
        let model: OnnxModel = tensorjit::onnx::load_bytes_with(&self.model_bytes, base.as_deref(), &opts)
            .map_err(|e| format!("{}: {e}", self.model_path.display()))?;
        let feeds = model
            .inputs
            .iter()
            .map(|i| match i.name.as_str() {
                "input_ids" => Ok(Feed::Ids),
                "attention_mask" => Ok(Feed::Mask),
                "token_type_ids" => Ok(Feed::Types),
                other => Err(format!("unexpected model input {other:?}")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = model.outputs.first().ok_or("the model has no outputs")?;
        let dims = &out.shape.dims;
        if dims.len() != 3 || dims[0] != batch as i64 || dims[1] != seq as i64 {
            return Err(
                format!("output {} has shape {}, expected [{batch}, {seq}, hidden]", out.name, out.shape).into()
            );
        }
        let _ = self.hidden.set(dims[2] as usize);
        let exe = self.backend.compile(model.module)?;
        Ok(Compiled { exe, feeds })
    }

    fn bucket(list: &[usize], n: usize) -> usize {
        *list.iter().find(|&&b| b >= n).unwrap_or(list.last().unwrap())
    }

    /// Token ids of each text (truncated), for inspection.
    pub fn tokenize(&self, texts: &[String]) -> Res<Vec<Vec<u32>>> {
        let enc = self.tokenizer.encode_batch(texts.to_vec(), true).map_err(|e| format!("tokenizer: {e}"))?;
        Ok(enc.iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// L2-normalised mean-pooled embeddings, one per text.
    pub fn embed(&self, texts: &[String]) -> Res<Vec<Vec<f32>>> {
        self.embed_with_stats(texts).map(|(e, _)| e)
    }

    /// [`Embedder::embed`] with timings.
    pub fn embed_with_stats(&self, texts: &[String]) -> Res<(Vec<Vec<f32>>, EmbedStats)> {
        let mut stats = EmbedStats::default();
        if texts.is_empty() {
            return Ok((Vec::new(), stats));
        }
        let t = Instant::now();
        // encode (not encode_batch): the tokenizer's own rayon parallelism would compete with
        // tensorjit's pool; one sentence takes microseconds.
        let enc: Vec<_> = texts
            .iter()
            .map(|s| self.tokenizer.encode(s.as_str(), true))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("tokenizer: {e}"))?;
        stats.tokenize_s = t.elapsed().as_secs_f64();

        // Sort by length and cut into chunks: each chunk holds sentences of one sequence bucket
        // (so a short sentence is never padded to a long one's bucket), and its size is the
        // largest batch bucket that it fills (so 5 sentences run as 4 + 1, not as 8 with 3
        // padding rows); only a remainder smaller than the smallest bucket is padded.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| enc[i].get_ids().len());
        let mut chunks: Vec<(usize, &[usize])> = Vec::new();
        let mut rest: &[usize] = &order;
        while let Some(&first) = rest.first() {
            let seq = Self::bucket(&self.opts.seq_buckets, enc[first].get_ids().len());
            let same = rest
                .iter()
                .take_while(|&&i| Self::bucket(&self.opts.seq_buckets, enc[i].get_ids().len()) == seq)
                .count();
            let take = self.opts.batch_buckets.iter().rev().find(|&&b| b <= same).copied().unwrap_or(same);
            let (chunk, tail) = rest.split_at(take);
            chunks.push((seq, chunk));
            rest = tail;
        }
        let mut out = vec![Vec::new(); texts.len()];
        let t = Instant::now();
        for (seq, chunk) in chunks {
            let batch = Self::bucket(&self.opts.batch_buckets, chunk.len());
            let c = self.compiled(batch, seq)?;
            let hidden = *self.hidden.get().unwrap();
            let mut ids = vec![0i64; batch * seq];
            let mut mask = vec![0i64; batch * seq];
            let mut types = vec![0i64; batch * seq];
            for (row, &i) in chunk.iter().enumerate() {
                let e = &enc[i];
                for (k, ((&id, &m), &ty)) in
                    e.get_ids().iter().zip(e.get_attention_mask()).zip(e.get_type_ids()).enumerate().take(seq)
                {
                    ids[row * seq + k] = id as i64;
                    mask[row * seq + k] = m as i64;
                    types[row * seq + k] = ty as i64;
                }
            }
            let bufs = [
                Buffer::from_slice(&ids, &[batch, seq])?,
                Buffer::from_slice(&mask, &[batch, seq])?,
                Buffer::from_slice(&types, &[batch, seq])?,
            ];
            let inputs: Vec<&Buffer> = c
                .feeds
                .iter()
                .map(|f| match f {
                    Feed::Ids => &bufs[0],
                    Feed::Mask => &bufs[1],
                    Feed::Types => &bufs[2],
                })
                .collect();
            let res = c.exe.execute(&inputs, &[])?;
            stats.executions += 1;
            let h = res[0].to_vec::<f32>()?;
            for (row, &i) in chunk.iter().enumerate() {
                out[i] = mean_pool_normalize(
                    &h[row * seq * hidden..(row + 1) * seq * hidden],
                    &mask[row * seq..(row + 1) * seq],
                    hidden,
                );
            }
        }
        stats.execute_s = t.elapsed().as_secs_f64();
        Ok((out, stats))
    }
}

/// sentence-transformers' mean pooling (`Σ h·mask / max(Σ mask, 1e-9)`) and `F.normalize`
/// (`x / max(‖x‖, 1e-12)`), accumulated in f64.
pub fn mean_pool_normalize(h: &[f32], mask: &[i64], hidden: usize) -> Vec<f32> {
    let mut sum = vec![0f64; hidden];
    let mut count = 0f64;
    for (t, &m) in mask.iter().enumerate() {
        if m != 0 {
            count += m as f64;
            for (s, &x) in sum.iter_mut().zip(&h[t * hidden..(t + 1) * hidden]) {
                *s += x as f64 * m as f64;
            }
        }
    }
    let count = count.max(1e-9);
    sum.iter_mut().for_each(|s| *s /= count);
    let norm = sum.iter().map(|s| s * s).sum::<f64>().sqrt().max(1e-12);
    sum.iter().map(|s| (s / norm) as f32).collect()
}

/// Cosine similarity of two vectors (f64 accumulation).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

/// This process's (VmRSS, VmHWM) in MiB from /proc/self/status (None where there is no /proc).
pub fn memory_mib() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}
