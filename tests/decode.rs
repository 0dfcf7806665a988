//! Autoregressive decoding with a KV cache (examples/support/gpt2.rs) on the jit: the decode
//! step's logits against a full causal forward over the whole prefix in f64 (written here), the
//! batched step with sequences of different lengths against each sequence alone, the donated
//! caches written in place (same storage before and after a step), the step planned without any
//! fallback (no interpreter, no reference kernel; `fallback=error` compiles it), a
//! DynamicUpdateSlice whose operand is still read afterwards not written in place, and bad
//! positions and tokens refused.

#[path = "../examples/support/gpt2.rs"]
mod gpt2;

use std::sync::Arc;

use gpt2::{CacheWrite, Config, Decoder, Weights, build_step};
use tensorjit::api::EventKind;
use tensorjit::{Backend, Buffer, DType, Profiler, Shape};

fn tiny() -> Config {
    Config { layers: 2, d_model: 32, heads: 4, mlp: 64, vocab: 40, max_pos: 16, eps: 1e-5 }
}

fn jit() -> Arc<dyn Backend> {
    tensorjit::new_with_config("jit").unwrap()
}

fn layer_norm(x: &[f64], g: &[f32], b: &[f32], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    x.iter().enumerate().map(|(i, v)| (v - mean) / (var + eps).sqrt() * g[i] as f64 + b[i] as f64).collect()
}

/// `x · w + b` with w row-major `[k, n]`.
fn dense(x: &[f64], w: &[f32], b: &[f32], n: usize) -> Vec<f64> {
    let mut y: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    for (i, &xi) in x.iter().enumerate() {
        for (j, yj) in y.iter_mut().enumerate() {
            *yj += xi * w[i * n + j] as f64;
        }
    }
    y
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// GPT-2's forward over the whole sequence `toks` with causal attention, in f64: the logits
/// of the last position.
fn full_forward(w: &Weights, toks: &[i32]) -> Vec<f64> {
    let c = w.cfg;
    let (d, nh, dh) = (c.d_model, c.heads, c.head_dim());
    let mut x: Vec<Vec<f64>> = toks
        .iter()
        .enumerate()
        .map(|(t, &tok)| (0..d).map(|i| (w.wte[tok as usize * d + i] + w.wpe[t * d + i]) as f64).collect())
        .collect();
    for l in &w.layers {
        let qkv: Vec<Vec<f64>> =
            x.iter().map(|xt| dense(&layer_norm(xt, &l.ln1_g, &l.ln1_b, c.eps), &l.attn_w, &l.attn_b, 3 * d)).collect();
        for t in 0..x.len() {
            let mut att = vec![0.0; d];
            for h in 0..nh {
                let q = &qkv[t][h * dh..(h + 1) * dh];
                let scores: Vec<f64> = (0..=t)
                    .map(|j| {
                        let k = &qkv[j][d + h * dh..d + (h + 1) * dh];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (dh as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for (j, p) in e.iter().enumerate() {
                    for i in 0..dh {
                        att[h * dh + i] += p / z * qkv[j][2 * d + h * dh + i];
                    }
                }
            }
            let o = dense(&att, &l.proj_w, &l.proj_b, d);
            x[t].iter_mut().zip(o).for_each(|(a, b)| *a += b);
        }
        for xt in x.iter_mut() {
            let hdn = dense(&layer_norm(xt, &l.ln2_g, &l.ln2_b, c.eps), &l.fc_w, &l.fc_b, c.mlp);
            let hdn: Vec<f64> = hdn.into_iter().map(gelu_tanh).collect();
            let o = dense(&hdn, &l.fc_proj_w, &l.fc_proj_b, d);
            xt.iter_mut().zip(o).for_each(|(a, b)| *a += b);
        }
    }
    let last = layer_norm(x.last().unwrap(), &w.lnf_g, &w.lnf_b, c.eps);
    (0..c.vocab).map(|v| (0..d).map(|i| last[i] * w.wte[v * d + i] as f64).sum()).collect()
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= 1e-4 * scale, "{what}: logit {i} is {g}, expected {w}");
    }
}

fn argmax(v: &[f64]) -> i32 {
    v.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as i32
}

/// Each decode step (cache of the previous tokens + one new token) gives the logits of a full
/// causal forward over the whole prefix, and the greedy token is their argmax.
#[test]
fn decode_step_matches_the_full_causal_forward() {
    let w = Weights::random(tiny(), 7);
    for backend in ["jit", "jit:parallelism=2", "interp"] {
        let be = tensorjit::new_with_config(backend).unwrap();
        let mut dec = Decoder::new(build_step(&be, &w, 1, 12, CacheWrite::SamePosition).unwrap()).unwrap();
        let mut toks = vec![3i32];
        for step in 0..10 {
            let out = dec.step(&[*toks.last().unwrap()]).unwrap();
            let want = full_forward(&w, &toks);
            assert_close(&out.logits, &want, &format!("{backend} step {step}"));
            assert_eq!(out.next, [argmax(&want)], "{backend} step {step}");
            // Greedy, with a fixed token now and then so that repeats do not hide a bug.
            toks.push(if step % 3 == 2 { (step * 7) % 40 } else { out.next[0] });
        }
        assert_eq!(dec.lens(), [10]);
    }
}

/// Eight sequences at different lengths in one batched step (one cache write per sequence, each
/// at its own position; attention over each one's own prefix) equal each sequence decoded
/// alone from the same cache state.
#[test]
fn batched_sequences_of_different_lengths_equal_each_alone() {
    let w = Weights::random(tiny(), 11);
    let be = jit();
    let lens = [0usize, 5, 2, 9, 1, 7, 3, 11];
    let mut batched = Decoder::new(build_step(&be, &w, lens.len(), 16, CacheWrite::PerSequence).unwrap()).unwrap();
    batched.set_lens(&lens).unwrap();
    let mut alone: Vec<Decoder> = lens
        .iter()
        .map(|&l| {
            let mut d = Decoder::new(build_step(&be, &w, 1, 16, CacheWrite::SamePosition).unwrap()).unwrap();
            d.set_lens(&[l]).unwrap();
            d
        })
        .collect();
    let mut feed: Vec<i32> = (0..lens.len() as i32).map(|i| (i * 5 + 1) % 40).collect();
    let v = tiny().vocab;
    for step in 0..4 {
        let out = batched.step(&feed).unwrap();
        for (i, d) in alone.iter_mut().enumerate() {
            let one = d.step(&[feed[i]]).unwrap();
            let want: Vec<f64> = one.logits.iter().map(|&x| x as f64).collect();
            assert_close(&out.logits[i * v..(i + 1) * v], &want, &format!("step {step} sequence {i}"));
            assert_eq!(out.next[i], one.next[0], "step {step} sequence {i}");
        }
        feed = out.next;
    }
    let ends: Vec<usize> = lens.iter().map(|l| l + 4).collect();
    assert_eq!(batched.lens(), ends.as_slice());
}

/// The caches donated to a step come back in the same storage (written in place, not copied),
/// batched per-sequence writes included; without donation the inputs are left unchanged and the
/// results hold the new rows.
#[test]
fn donated_caches_are_updated_in_place() {
    let w = Weights::random(tiny(), 3);
    let be = jit();
    for (batch, write) in [(1, CacheWrite::SamePosition), (3, CacheWrite::PerSequence)] {
        let mut dec = Decoder::new(build_step(&be, &w, batch, 8, write).unwrap()).unwrap();
        let ptrs: Vec<usize> = dec.caches().iter().map(|b| b.data_ptr().unwrap()).collect();
        for step in 0..3 {
            dec.step(&vec![step + 1; batch]).unwrap();
            let now: Vec<usize> = dec.caches().iter().map(|b| b.data_ptr().unwrap()).collect();
            assert_eq!(now, ptrs, "batch {batch} step {step}: a cache was copied");
        }
        // Each step wrote its row: positions 0..3 of every cache hold values, 3.. are still 0.
        let dh = tiny().head_dim();
        let k0 = dec.caches()[0].to_vec::<f32>().unwrap();
        for (r, row) in k0.chunks(dh).enumerate() {
            let pos = r % 8;
            assert_eq!(row.iter().any(|&x| x != 0.0), pos < 3, "batch {batch} row {r} (position {pos})");
        }
    }

    // Not donated: the caller's caches keep their contents, the results are new storage.
    let step = build_step(&be, &w, 1, 8, CacheWrite::SamePosition).unwrap();
    let dims = [1, 4, 8, 8];
    let caches: Vec<Buffer> = (0..4).map(|_| Buffer::from_slice(&[0f32; 256], &dims).unwrap()).collect();
    let (tok, pos) = (Buffer::from_slice(&[5i32], &[1]).unwrap(), Buffer::from_slice(&[2i32], &[1]).unwrap());
    let mut inputs = vec![&tok, &pos];
    inputs.extend(caches.iter());
    let out = step.exe.execute(&inputs, &[]).unwrap();
    for (c, o) in caches.iter().zip(&out[2..]) {
        assert!(c.to_vec::<f32>().unwrap().iter().all(|&x| x == 0.0));
        assert_ne!(c.data_ptr(), o.data_ptr());
        let o = o.to_vec::<f32>().unwrap();
        assert!(o.chunks(8).enumerate().all(|(r, row)| row.iter().any(|&x| x != 0.0) == (r % 8 == 2)));
    }
}

/// The decode step runs on the jit's generated loops and kernels only: the report lists no
/// interpreter and no reference kernel (`fallback=error` would refuse either), the cache writes
/// are the DynamicUpdateSlice kernel (one per cache, or per cache and sequence) and attention
/// the fused kernel (one per layer); the steps a profiled execution records agree.
#[test]
fn decode_step_has_no_fallback() {
    let w = Weights::random(tiny(), 13);
    let be = tensorjit::new_with_config("jit:fallback=error").unwrap();
    let layers = tiny().layers;
    for (batch, write, writes) in
        [(1, CacheWrite::SamePosition, 2 * layers), (3, CacheWrite::PerSequence, 2 * layers * 3)]
    {
        let mut dec = Decoder::new(build_step(&be, &w, batch, 8, write).unwrap()).unwrap();
        let r = dec.step.exe.compile_report().expect("the jit reports its compile").execution;
        assert_eq!(r.interpreted, None, "{r}");
        assert!(r.fallbacks().is_empty(), "{write:?}:\n{r}");
        assert_eq!(r.count(EventKind::Reference) + r.count(EventKind::Interp), 0, "{r}");
        let kernels = |what: &str| -> usize {
            r.steps.iter().filter(|s| s.kind == EventKind::Kernel && s.label.contains(what)).map(|s| s.count).sum()
        };
        assert_eq!(kernels("dynamic_update_slice"), writes, "{write:?}:\n{r}");
        assert_eq!(kernels("attention"), layers, "{write:?}:\n{r}");

        let profiler = Profiler::new();
        dec.opts.profiler = Some(profiler.clone());
        dec.step(&vec![1; batch]).unwrap();
        let events = profiler.events();
        assert!(!events.is_empty());
        let slow: Vec<&str> = events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Reference | EventKind::Interp))
            .map(|e| e.name.as_str())
            .collect();
        assert!(slow.is_empty(), "{write:?}: {slow:?}");
    }
}

/// A donated operand that is still read after its DynamicUpdateSlice is not written over: the
/// later reader sees the original values.
#[test]
fn update_slice_keeps_an_operand_read_later() {
    let be = jit();
    let b = be.builder("dus_live");
    let f = b.main();
    let x = f.parameter("x", Shape::new(DType::Float32, &[4, 3])).unwrap();
    let u = f.parameter("u", Shape::new(DType::Float32, &[1, 3])).unwrap();
    let at = f.parameter("at", Shape::new(DType::Int32, &[])).unwrap();
    let zero = f.scalar(0i32).unwrap();
    let y = f.dynamic_update_slice(x, u, &[at, zero]).unwrap();
    let z = f.add(x, x).unwrap();
    f.return_(&[y, z]).unwrap();
    let exe = b.compile().unwrap();
    let xv: Vec<f32> = (0..12).map(|i| i as f32).collect();
    for at_v in [1i32, -1, 9] {
        let xb = Buffer::from_slice(&xv, &[4, 3]).unwrap();
        let ub = Buffer::from_slice(&[-1f32, -2.0, -3.0], &[1, 3]).unwrap();
        let ab = Buffer::scalar(at_v);
        let out = exe.execute(&[&xb, &ub, &ab], &[true, false, false]).unwrap();
        // Negative starts count from the end, then clamp to [0, 4 − 1] (−1 → 3, 9 → 3).
        let row = if at_v < 0 { at_v + 4 } else { at_v }.clamp(0, 3) as usize;
        let mut want = xv.clone();
        want[row * 3..row * 3 + 3].copy_from_slice(&[-1.0, -2.0, -3.0]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "at {at_v}");
        assert_eq!(out[1].to_vec::<f32>().unwrap(), xv.iter().map(|v| 2.0 * v).collect::<Vec<_>>(), "at {at_v}");
    }
}

/// Bad requests are errors, not panics: a full cache, tokens outside the vocabulary or of the
/// wrong count, a cache longer than the positions, lengths beyond the cache, and sequences at
/// different positions for a same-position step. A position beyond the cache given to the
/// step directly is clamped (the catalogue's DynamicUpdateSlice), not a crash.
#[test]
fn bad_positions_and_tokens_are_errors() {
    let w = Weights::random(tiny(), 5);
    let be = jit();
    let mut dec = Decoder::new(build_step(&be, &w, 1, 3, CacheWrite::SamePosition).unwrap()).unwrap();
    for t in 0..3 {
        dec.step(&[t]).unwrap();
    }
    let e = dec.step(&[1]).err().expect("a full cache is an error");
    assert!(e.to_string().contains("beyond the cache length 3"), "{e}");
    assert!(dec.set_lens(&[4]).is_err());
    dec.set_lens(&[0]).unwrap();
    assert!(dec.step(&[40]).is_err());
    assert!(dec.step(&[-1]).is_err());
    assert!(dec.step(&[1, 2]).is_err());
    assert!(build_step(&be, &w, 1, 17, CacheWrite::SamePosition).is_err());
    assert!(build_step(&be, &w, 0, 4, CacheWrite::SamePosition).is_err());

    let mut two = Decoder::new(build_step(&be, &w, 2, 4, CacheWrite::SamePosition).unwrap()).unwrap();
    two.set_lens(&[1, 2]).unwrap();
    assert!(two.step(&[1, 1]).is_err());

    let step = build_step(&be, &w, 1, 4, CacheWrite::SamePosition).unwrap();
    let caches: Vec<Buffer> = (0..4).map(|_| Buffer::from_slice(&[0f32; 128], &[1, 4, 4, 8]).unwrap()).collect();
    for p in [4i32, 1000, -7] {
        let (tok, pos) = (Buffer::from_slice(&[1i32], &[1]).unwrap(), Buffer::from_slice(&[p], &[1]).unwrap());
        let mut inputs = vec![&tok, &pos];
        inputs.extend(caches.iter());
        let out = step.exe.execute(&inputs, &[]).unwrap();
        let logits = out[1].to_vec::<f32>().unwrap();
        assert!(logits.iter().all(|x| x.is_finite()), "position {p}");
    }
}
