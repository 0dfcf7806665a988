//! A GPT-2-shaped decoder for autoregressive decoding on tensorjit: the weights (random with a
//! seed, or a Hugging Face GPT-2 safetensors file), one decode-step module built with the
//! `Builder` API, and a [`Decoder`] that threads a preallocated KV cache through it.
//!
//! Shared by examples/generate.rs and tests/decode.rs (`#[path]` module); see docs/decoding.md.
//!
//! The step takes token ids `i32[B]`, positions `i32[B]` (the number of tokens already in each
//! sequence's cache) and, per layer, the key and value caches `f32[B, H, Tmax, Dh]`; it returns
//! the greedy next tokens `i32[B]`, the logits `f32[B, V]` and the updated caches. The new key and
//! value rows are written with `DynamicUpdateSlice` at each sequence's position, and attention
//! reads only the filled prefix (`key_value_seq_len = position + 1`). The caches are donated at
//! every step: the jit writes the rows over the donated storage, so no cache is copied per
//! token, and the returned buffers hold the same memory.

#![allow(dead_code)] // each user takes a different part

use std::path::Path;
use std::sync::Arc;

use tensorjit::api::{AttentionConfig, GatherDims};
use tensorjit::ir::op::{AttentionLayout, DenseLayout};
use tensorjit::{Backend, Buffer, DType, Error, ExecOptions, Executable, Function, Result, Shape, Value};

/// The sizes of a GPT-2 model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads (head dim = `d_model / heads`).
    pub heads: usize,
    /// Width of the MLP.
    pub mlp: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Learned positions (the longest sequence).
    pub max_pos: usize,
    /// LayerNorm epsilon.
    pub eps: f64,
}

impl Config {
    /// GPT-2 small (124M parameters).
    pub fn small() -> Config {
        Config { layers: 12, d_model: 768, heads: 12, mlp: 3072, vocab: 50257, max_pos: 1024, eps: 1e-5 }
    }

    /// Dimension of one head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }
}

/// The weights of one block, in GPT-2's Conv1D layout (`[in, out]`).
#[derive(Clone, Debug)]
pub struct Layer {
    pub ln1_g: Vec<f32>,
    pub ln1_b: Vec<f32>,
    /// `[D, 3D]`: q, k, v column blocks.
    pub attn_w: Vec<f32>,
    pub attn_b: Vec<f32>,
    pub proj_w: Vec<f32>,
    pub proj_b: Vec<f32>,
    pub ln2_g: Vec<f32>,
    pub ln2_b: Vec<f32>,
    pub fc_w: Vec<f32>,
    pub fc_b: Vec<f32>,
    pub fc_proj_w: Vec<f32>,
    pub fc_proj_b: Vec<f32>,
}

/// All weights; the LM head is tied to `wte`.
#[derive(Clone, Debug)]
pub struct Weights {
    pub cfg: Config,
    /// `[V, D]`.
    pub wte: Vec<f32>,
    /// `[P, D]`.
    pub wpe: Vec<f32>,
    pub layers: Vec<Layer>,
    pub lnf_g: Vec<f32>,
    pub lnf_b: Vec<f32>,
}

/// A small deterministic generator (SplitMix64) for the random weights.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `n` values uniform in `[-a, a]`.
    fn uniform(&mut self, n: usize, a: f32) -> Vec<f32> {
        (0..n).map(|_| ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * a).collect()
    }
}

impl Weights {
    /// Random weights from `seed`: uniform with GPT-2's initial standard deviation 0.02 (biases
    /// and LayerNorm parameters too, so that a test exercises them).
    pub fn random(cfg: Config, seed: u64) -> Weights {
        let mut r = Rng(seed);
        let a = 0.02 * 3f32.sqrt();
        let (d, m) = (cfg.d_model, cfg.mlp);
        let gamma = |n: usize, r: &mut Rng| r.uniform(n, 0.1).into_iter().map(|x| 1.0 + x).collect::<Vec<_>>();
        let layers = (0..cfg.layers)
            .map(|_| Layer {
                ln1_g: gamma(d, &mut r),
                ln1_b: r.uniform(d, a),
                attn_w: r.uniform(d * 3 * d, a),
                attn_b: r.uniform(3 * d, a),
                proj_w: r.uniform(d * d, a),
                proj_b: r.uniform(d, a),
                ln2_g: gamma(d, &mut r),
                ln2_b: r.uniform(d, a),
                fc_w: r.uniform(d * m, a),
                fc_b: r.uniform(m, a),
                fc_proj_w: r.uniform(m * d, a),
                fc_proj_b: r.uniform(d, a),
            })
            .collect();
        Weights {
            cfg,
            wte: r.uniform(cfg.vocab * d, a),
            wpe: r.uniform(cfg.max_pos * d, a),
            layers,
            lnf_g: gamma(d, &mut r),
            lnf_b: r.uniform(d, a),
        }
    }

    /// Weights from a Hugging Face GPT-2 safetensors file (`wte.weight`, `h.N.attn.c_attn.weight`,
    /// …, with or without the `transformer.` prefix of `GPT2LMHeadModel`'s state dict). The
    /// sizes come from the tensors' shapes; `heads` (not recorded in the file) is `d_model / 64`.
    pub fn load(path: &Path) -> Result<Weights> {
        let w = tensorjit::weights::load(path)?;
        let prefix = if w.contains("transformer.wte.weight") { "transformer." } else { "" };
        let get = |name: &str, dims: &[usize]| -> Result<Vec<f32>> {
            let full = format!("{prefix}{name}");
            let b = w.buffer(&full)?;
            if b.dtype() != DType::Float32 || b.dims() != dims {
                return Err(Error::invalid("gpt2", format!("{full} is {}, expected f32{dims:?}", b.shape())));
            }
            b.to_vec::<f32>()
        };
        let dims = |name: &str| w.shape(&format!("{prefix}{name}")).map(|s| s.dims.clone());
        let (Some(te), Some(pe)) = (dims("wte.weight"), dims("wpe.weight")) else {
            return Err(Error::invalid("gpt2", format!("{}: no wte.weight / wpe.weight", path.display())));
        };
        let (vocab, d, max_pos) = (te[0] as usize, te[1] as usize, pe[0] as usize);
        let layers = (0..).take_while(|i| w.contains(&format!("{prefix}h.{i}.ln_1.weight"))).count();
        let mlp = dims("h.0.mlp.c_fc.weight").map_or(4 * d, |s| s[1] as usize);
        let cfg = Config { layers, d_model: d, heads: (d / 64).max(1), mlp, vocab, max_pos, eps: 1e-5 };
        let layer = |i: usize| -> Result<Layer> {
            let p = |s: &str| format!("h.{i}.{s}");
            Ok(Layer {
                ln1_g: get(&p("ln_1.weight"), &[d])?,
                ln1_b: get(&p("ln_1.bias"), &[d])?,
                attn_w: get(&p("attn.c_attn.weight"), &[d, 3 * d])?,
                attn_b: get(&p("attn.c_attn.bias"), &[3 * d])?,
                proj_w: get(&p("attn.c_proj.weight"), &[d, d])?,
                proj_b: get(&p("attn.c_proj.bias"), &[d])?,
                ln2_g: get(&p("ln_2.weight"), &[d])?,
                ln2_b: get(&p("ln_2.bias"), &[d])?,
                fc_w: get(&p("mlp.c_fc.weight"), &[d, mlp])?,
                fc_b: get(&p("mlp.c_fc.bias"), &[mlp])?,
                fc_proj_w: get(&p("mlp.c_proj.weight"), &[mlp, d])?,
                fc_proj_b: get(&p("mlp.c_proj.bias"), &[d])?,
            })
        };
        Ok(Weights {
            cfg,
            wte: get("wte.weight", &[vocab, d])?,
            wpe: get("wpe.weight", &[max_pos, d])?,
            layers: (0..layers).map(layer).collect::<Result<_>>()?,
            lnf_g: get("ln_f.weight", &[d])?,
            lnf_b: get("ln_f.bias", &[d])?,
        })
    }
}

/// Columns `c0..c1` of the row-major `rows × cols` matrix `w`.
fn columns(w: &[f32], cols: usize, c0: usize, c1: usize) -> Vec<f32> {
    w.chunks(cols).flat_map(|row| row[c0..c1].iter().copied()).collect()
}

/// How the step writes the new key/value rows into the caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheWrite {
    /// One `DynamicUpdateSlice` for the whole batch at the position of sequence 0: every
    /// sequence of the batch must be at the same position.
    SamePosition,
    /// One `DynamicUpdateSlice` per sequence, each at its own position (sequences of different
    /// lengths). Each writes one `[1, H, 1, Dh]` row block over the previous one's result, in
    /// place, so the cost is B small copies, not a copy of the cache.
    PerSequence,
}

/// The decode-step executable and its sizes.
pub struct Step {
    pub exe: Arc<dyn Executable>,
    pub cfg: Config,
    pub batch: usize,
    /// Cache length (the longest sequence the step can decode).
    pub tmax: usize,
    /// How it writes the caches.
    pub write: CacheWrite,
}

/// Builds and compiles the decode step for `batch` sequences and caches of `tmax` positions
/// (at most the model's `max_pos`).
pub fn build_step(
    backend: &Arc<dyn Backend>,
    w: &Weights,
    batch: usize,
    tmax: usize,
    write: CacheWrite,
) -> Result<Step> {
    let cfg = w.cfg;
    if batch == 0 || tmax == 0 || tmax > cfg.max_pos {
        return Err(Error::invalid("gpt2", format!("batch {batch} / cache length {tmax} (max {})", cfg.max_pos)));
    }
    let (b, d, h, dh) = (batch as i64, cfg.d_model as i64, cfg.heads as i64, cfg.head_dim() as i64);
    let builder = backend.builder("gpt2_decode_step");
    let f = builder.main();
    let tokens = f.parameter("tokens", Shape::new(DType::Int32, &[b]))?;
    let positions = f.parameter("positions", Shape::new(DType::Int32, &[b]))?;
    let cache_shape = Shape::new(DType::Float32, &[b, h, tmax as i64, dh]);
    let mut caches = Vec::with_capacity(2 * cfg.layers);
    for l in 0..cfg.layers {
        caches.push(f.parameter(&format!("k{l}"), cache_shape.clone())?);
        caches.push(f.parameter(&format!("v{l}"), cache_shape.clone())?);
    }
    let c = |data: &[f32], dims: &[usize]| f.constant(data, dims);
    let rows = |table: Value, idx: Value, width: i64| {
        let dims = GatherDims {
            index_vector_axis: 1,
            offset_output_axes: vec![1],
            collapsed_slice_axes: vec![0],
            start_index_map: vec![0],
            slice_sizes: vec![1, width],
            indices_are_sorted: false,
        };
        f.gather(table, idx, &dims)
    };
    let (dz, ds) = (cfg.d_model, cfg.d_model);
    let mut x =
        f.add(rows(c(&w.wte, &[cfg.vocab, dz])?, tokens, d)?, rows(c(&w.wpe, &[cfg.max_pos, ds])?, positions, d)?)?;

    // Start indices of the cache writes, and the attention lengths (position + 1; one query).
    let zero = f.scalar(0i32)?;
    let pos_of = |s: usize| -> Result<Value> { f.reshape(f.slice(positions, &[s as i64], &[s as i64 + 1], &[])?, &[]) };
    let starts: Vec<Value> = match write {
        CacheWrite::SamePosition => vec![pos_of(0)?],
        CacheWrite::PerSequence => (0..batch).map(pos_of).collect::<Result<_>>()?,
    };
    let kv_len = f.add(positions, f.broadcast_in_dim(f.scalar(1i32)?, &Shape::new(DType::Int32, &[b]), &[])?)?;
    let q_len = f.constant(&vec![1i32; batch], &[batch])?;
    let write_rows = |cache: Value, row: Value| -> Result<Value> {
        // row: [B, H, 1, Dh].
        match write {
            CacheWrite::SamePosition => f.dynamic_update_slice(cache, row, &[zero, zero, starts[0], zero]),
            CacheWrite::PerSequence => {
                let mut cache = cache;
                for (s, &at) in starts.iter().enumerate() {
                    let si = s as i64;
                    let one = f.slice(row, &[si, 0, 0, 0], &[si + 1, h, 1, dh], &[])?;
                    cache = f.dynamic_update_slice(cache, one, &[f.scalar(s as i32)?, zero, at, zero])?;
                }
                Ok(cache)
            }
        }
    };

    let dense = |f: &Function, x: Value, wt: Vec<f32>, bias: &[f32], k: usize, n: usize| -> Result<Value> {
        let wv = f.constant(&wt, &[k, n])?;
        let bv = f.constant(bias, &[n])?;
        f.fused_dense(x, wv, Some(bv), Default::default(), DenseLayout::InputOutputs)
    };
    let ln = |x: Value, g: &[f32], bb: &[f32]| -> Result<Value> {
        f.fused_layer_norm(x, &[-1], cfg.eps, Some(c(g, &[dz])?), Some(c(bb, &[dz])?))
    };
    let mut new_caches = Vec::with_capacity(caches.len());
    for (l, lw) in w.layers.iter().enumerate() {
        let hn = ln(x, &lw.ln1_g, &lw.ln1_b)?;
        let split = |i: usize| -> Result<Value> {
            let wt = columns(&lw.attn_w, 3 * dz, i * dz, (i + 1) * dz);
            let y = dense(&f, hn, wt, &lw.attn_b[i * dz..(i + 1) * dz], dz, dz)?;
            // [B, D] is [B, H, 1, Dh] row-major: a reshape, no transpose.
            f.reshape(y, &[b, h, 1, dh])
        };
        let (q, k, v) = (split(0)?, split(1)?, split(2)?);
        let kc = write_rows(caches[2 * l], k)?;
        let vc = write_rows(caches[2 * l + 1], v)?;
        let cfg_att = AttentionConfig { seq_lens: Some((q_len, kv_len)), ..Default::default() };
        let (att, _) = f.fused_scaled_dot_product_attention(q, kc, vc, AttentionLayout::Bhsd, &cfg_att)?;
        let att = f.reshape(att, &[b, d])?;
        x = f.add(x, dense(&f, att, lw.proj_w.clone(), &lw.proj_b, dz, dz)?)?;
        let hn = ln(x, &lw.ln2_g, &lw.ln2_b)?;
        let m = f.fused_gelu(dense(&f, hn, lw.fc_w.clone(), &lw.fc_b, dz, cfg.mlp)?, false)?;
        x = f.add(x, dense(&f, m, lw.fc_proj_w.clone(), &lw.fc_proj_b, cfg.mlp, dz)?)?;
        new_caches.push(kc);
        new_caches.push(vc);
    }
    let x = ln(x, &w.lnf_g, &w.lnf_b)?;
    // Tied LM head: logits = x · wteᵀ, with wteᵀ `[D, V]` transposed here (a constant of its
    // own: the jit packs it for GEMM, while the embedding gather reads wte itself).
    let mut wte_t = vec![0f32; w.wte.len()];
    for (v, row) in w.wte.chunks(dz).enumerate() {
        for (i, &x) in row.iter().enumerate() {
            wte_t[i * cfg.vocab + v] = x;
        }
    }
    let head = c(&wte_t, &[dz, cfg.vocab])?;
    let logits = f.fused_dense(x, head, None, Default::default(), DenseLayout::InputOutputs)?;
    // Greedy token: the lowest index holding the row's maximum (argmax, ties to the first) as a
    // max reduction, a compare and a min reduction over the indices, which the jit runs as
    // generated loops (its ArgMinMax is the scalar reference kernel). A row with a NaN has no
    // index equal to its (NaN) maximum and gives `vocab`, outside the vocabulary: `Decoder::step`
    // refuses it as the next input.
    let (bv, vv) =
        (Shape::new(DType::Float32, &[b, cfg.vocab as i64]), Shape::new(DType::Int32, &[b, cfg.vocab as i64]));
    let top = f.broadcast_in_dim(f.reduce_max(logits, &[1])?, &bv, &[0])?;
    let at_top = f.where_(f.equal(logits, top)?, f.iota(&vv, 1)?, f.scalar(cfg.vocab as i32)?)?;
    let next = f.reduce_min(at_top, &[1])?;
    let mut outs = vec![next, logits];
    outs.extend(new_caches);
    f.return_(&outs)?;
    Ok(Step { exe: builder.compile()?, cfg, batch, tmax, write })
}

/// Greedy decoding with a KV cache: the caches live in buffers donated to every step.
pub struct Decoder {
    pub step: Step,
    /// Options of every step's execution (e.g. a profiler).
    pub opts: ExecOptions,
    caches: Vec<Buffer>,
    /// Tokens in each sequence's cache.
    lens: Vec<usize>,
}

/// What one step returns.
pub struct StepOut {
    /// Greedy next token per sequence.
    pub next: Vec<i32>,
    /// `[B, V]` logits, row-major.
    pub logits: Vec<f32>,
}

impl Decoder {
    /// A decoder with zeroed caches.
    pub fn new(step: Step) -> Result<Decoder> {
        let n = step.batch * step.cfg.heads * step.tmax * step.cfg.head_dim();
        let dims = [step.batch, step.cfg.heads, step.tmax, step.cfg.head_dim()];
        let zeros = vec![0f32; n];
        let caches = (0..2 * step.cfg.layers).map(|_| Buffer::from_slice(&zeros, &dims)).collect::<Result<_>>()?;
        let lens = vec![0; step.batch];
        Ok(Decoder { step, opts: ExecOptions::default(), caches, lens })
    }

    /// Tokens already decoded per sequence.
    pub fn lens(&self) -> &[usize] {
        &self.lens
    }

    /// Sets the cache length of every sequence (e.g. to time a step at a given context without
    /// a prefill: the cache contents then are whatever they were).
    pub fn set_lens(&mut self, lens: &[usize]) -> Result<()> {
        if lens.len() != self.step.batch || lens.iter().any(|&l| l > self.step.tmax) {
            return Err(Error::invalid(
                "decode",
                format!("lengths {lens:?} for {} caches of {}", self.step.batch, self.step.tmax),
            ));
        }
        self.lens.copy_from_slice(lens);
        Ok(())
    }

    /// The caches (`k0, v0, k1, …`).
    pub fn caches(&self) -> &[Buffer] {
        &self.caches
    }

    /// Appends `tokens[i]` to sequence i and returns the next-token prediction. A sequence
    /// whose cache is full is an error (nothing runs).
    pub fn step(&mut self, tokens: &[i32]) -> Result<StepOut> {
        let s = &self.step;
        if tokens.len() != s.batch {
            return Err(Error::invalid("decode", format!("{} tokens for a batch of {}", tokens.len(), s.batch)));
        }
        if let Some(i) = self.lens.iter().position(|&l| l >= s.tmax) {
            return Err(Error::invalid(
                "decode",
                format!("sequence {i} is at position {}, beyond the cache length {}", self.lens[i], s.tmax),
            ));
        }
        if s.write == CacheWrite::SamePosition && self.lens.iter().any(|&l| l != self.lens[0]) {
            return Err(Error::invalid(
                "decode",
                format!("lengths {:?} differ; the step writes one position", self.lens),
            ));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t < 0 || t as usize >= s.cfg.vocab) {
            return Err(Error::invalid("decode", format!("token {t} outside the vocabulary of {}", s.cfg.vocab)));
        }
        let positions: Vec<i32> = self.lens.iter().map(|&l| l as i32).collect();
        let tok = Buffer::from_slice(tokens, &[s.batch])?;
        let pos = Buffer::from_slice(&positions, &[s.batch])?;
        let mut inputs: Vec<&Buffer> = vec![&tok, &pos];
        inputs.extend(self.caches.iter());
        let mut donate = vec![false, false];
        donate.extend(std::iter::repeat_n(true, self.caches.len()));
        let mut out = s.exe.execute_with(&inputs, &donate, &self.opts)?;
        let rest = out.split_off(2);
        self.caches = rest;
        self.lens.iter_mut().for_each(|l| *l += 1);
        Ok(StepOut { next: out[0].to_vec::<i32>()?, logits: out[1].to_vec::<f32>()? })
    }
}
