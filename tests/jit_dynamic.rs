//! Modules with named dynamic axes on the jit: one specialised plan per binding of the axes
//! (shape ops folded, fused kernels, no interpreter), the bounded plan cache and its counters,
//! concurrent executions at different sizes, and bad bindings as errors.

use std::sync::Arc;

use tensorjit::api::{EventKind, Executable};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::text::parse_module;
use tensorjit::{Buffer, Error};

#[path = "common/fused.rs"]
mod common;

/// Dense + bias + tanh, a softmax over the dynamic `seq` axis, then a head split through
/// `dynamic_reshape` sized by `dynamic_dimension_size`, a transpose and the result's
/// `dynamic_shape`.
const ENCODER: &str = r#"module @enc
func @main(%0 "x": f32[batch=?,seq=?,8], %1 "w": f32[8,8], %2 "bias": f32[8]) {
  %3 = dot_general %0, %1, lhs_contracting=[2], rhs_contracting=[0], lhs_batch=[], rhs_batch=[] : f32[batch=?,seq=?,8]
  %4 = broadcast_in_dim %2, shape=f32[batch=?,seq=?,8], axes=[2] : f32[batch=?,seq=?,8]
  %5 = add %3, %4 : f32[batch=?,seq=?,8]
  %6 = tanh %5 : f32[batch=?,seq=?,8]
  %7 = reduce_max %6, axes=[1] : f32[batch=?,8]
  %8 = broadcast_in_dim %7, shape=f32[batch=?,seq=?,8], axes=[0,2] : f32[batch=?,seq=?,8]
  %9 = sub %6, %8 : f32[batch=?,seq=?,8]
  %10 = exp %9 : f32[batch=?,seq=?,8]
  %11 = reduce_sum %10, axes=[1] : f32[batch=?,8]
  %12 = broadcast_in_dim %11, shape=f32[batch=?,seq=?,8], axes=[0,2] : f32[batch=?,seq=?,8]
  %13 = div %10, %12 : f32[batch=?,seq=?,8]
  %14 = dynamic_dimension_size %0, axis=0 : i32[]
  %15 = dynamic_dimension_size %0, axis=1 : i32[]
  %16 = dynamic_reshape %13, %14, %15, specs=[batch=?,seq=?,2,4] : f32[batch=?,seq=?,2,4]
  %17 = transpose %16, perm=[0,2,1,3] : f32[batch=?,2,seq=?,4]
  %18 = dynamic_shape %17 : i32[4]
  return %17, %18
}
"#;

fn compile(config: &str, text: &str) -> Arc<dyn Executable> {
    let jit = JitBackend::constructor(config).expect("jit");
    jit.compile(parse_module(text).expect("parse")).expect("compile")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    common::Rng(seed).vec(n, -1.0, 1.0)
}

struct Case {
    batch: usize,
    seq: usize,
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Vec<f32>,
}

impl Case {
    fn new(batch: usize, seq: usize) -> Case {
        let seed = (batch * 100 + seq) as u64;
        Case { batch, seq, x: values(batch * seq * 8, seed), w: values(64, seed + 1), bias: values(8, seed + 2) }
    }

    fn inputs(&self) -> [Buffer; 3] {
        [
            Buffer::from_slice(&self.x, &[self.batch, self.seq, 8]).expect("x"),
            Buffer::from_slice(&self.w, &[8, 8]).expect("w"),
            Buffer::from_slice(&self.bias, &[8]).expect("bias"),
        ]
    }

    /// The encoder computed in f64 by the formulas (independent of tensorjit), laid out as
    /// `[batch, 2, seq, 4]`.
    fn expected(&self) -> Vec<f64> {
        let (b, s) = (self.batch, self.seq);
        let mut h = vec![0f64; b * s * 8];
        for r in 0..b * s {
            for j in 0..8 {
                let dot: f64 = (0..8).map(|k| self.x[r * 8 + k] as f64 * self.w[k * 8 + j] as f64).sum();
                h[r * 8 + j] = (dot + self.bias[j] as f64).tanh();
            }
        }
        let mut out = vec![0f64; b * s * 8];
        for bi in 0..b {
            for j in 0..8 {
                let col: Vec<f64> = (0..s).map(|t| h[(bi * s + t) * 8 + j]).collect();
                let max = col.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = col.iter().map(|v| (v - max).exp()).sum();
                for (t, v) in col.iter().enumerate() {
                    // [b, t, head, d] → [b, head, t, d] with j = head·4 + d.
                    let (head, d) = (j / 4, j % 4);
                    out[((bi * 2 + head) * s + t) * 4 + d] = (v - max).exp() / sum;
                }
            }
        }
        out
    }

    fn check(&self, out: &[Buffer]) {
        let what = format!("batch {} seq {}", self.batch, self.seq);
        assert_eq!(out[0].dims(), vec![self.batch, 2, self.seq, 4], "{what}");
        let got = out[0].to_vec::<f32>().expect("f32");
        for (i, (g, w)) in got.iter().zip(self.expected()).enumerate() {
            assert!((*g as f64 - w).abs() <= 1e-5, "{what}: element {i} = {g}, want {w}");
        }
        let dims: Vec<i32> = [self.batch, 2, self.seq, 4].iter().map(|&d| d as i32).collect();
        assert_eq!(out[1].to_vec::<i32>().expect("i32"), dims, "{what}: dynamic_shape");
    }
}

fn run(exe: &dyn Executable, case: &Case) -> Vec<Buffer> {
    let ins = case.inputs();
    exe.execute(&[&ins[0], &ins[1], &ins[2]], &[]).expect("execute")
}

#[test]
fn each_binding_gets_a_specialised_plan() {
    let exe = compile("fallback=error", ENCODER);
    let shapes = [(1, 1), (2, 5), (3, 7), (2, 5), (1, 1), (0, 3)];
    for &(b, s) in &shapes {
        let case = Case::new(b, s);
        case.check(&run(exe.as_ref(), &case));
    }
    let stats = exe.specialization_stats().expect("stats");
    assert_eq!(stats.axes, vec!["batch".to_string(), "seq".to_string()]);
    assert_eq!((stats.misses, stats.hits, stats.cached, stats.evictions), (4, 2, 4, 0), "{stats}");
    assert!(stats.compile_time > std::time::Duration::ZERO);
    let r = exe.compile_report().expect("report").execution;
    assert!(r.fallbacks().is_empty(), "{r}");
    assert_eq!(r.interpreted, None);
    // The dense is a GEMM kernel in the specialised plan, not a reference kernel.
    assert!(r.count(EventKind::Kernel) >= 1, "{r}");
    assert_eq!(r.count(EventKind::Reference), 0, "{r}");
}

#[test]
fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
    let exe = compile("specializations=2", ENCODER);
    // (1,2) and (1,3) fill the cache; (1,2) is used again, so (1,3) goes when (1,4) arrives;
    // (1,2) is still a hit; (1,3) compiles again (evicting (1,4), the least recent).
    for (s, hit) in [(2, false), (3, false), (2, true), (4, false), (2, true), (3, false)] {
        let before = exe.specialization_stats().expect("stats");
        let case = Case::new(1, s);
        case.check(&run(exe.as_ref(), &case));
        let after = exe.specialization_stats().expect("stats");
        assert_eq!(after.hits - before.hits, u64::from(hit), "seq {s}: {after}");
        assert!(after.cached <= 2, "{after}");
    }
    let stats = exe.specialization_stats().expect("stats");
    assert_eq!((stats.misses, stats.hits, stats.evictions, stats.capacity), (4, 2, 2, 2), "{stats}");
}

#[test]
fn concurrent_executions_at_different_sizes() {
    let exe = compile("parallelism=2", ENCODER);
    std::thread::scope(|scope| {
        for t in 0..4usize {
            let exe = exe.clone();
            scope.spawn(move || {
                for round in 0..6 {
                    let case = Case::new(1 + (t + round) % 3, 2 + t);
                    case.check(&run(exe.as_ref(), &case));
                }
            });
        }
    });
    let stats = exe.specialization_stats().expect("stats");
    assert_eq!(stats.hits + stats.misses, 24, "{stats}");
    assert!(stats.cached <= 12, "{stats}");
}

#[test]
fn execute_into_takes_concrete_output_buffers() {
    let exe = compile("", ENCODER);
    let case = Case::new(2, 3);
    let ins = case.inputs();
    let out0 = Buffer::from_slice(&[0f32; 2 * 2 * 3 * 4], &[2, 2, 3, 4]).expect("out0");
    let out1 = Buffer::from_slice(&[0i32; 4], &[4]).expect("out1");
    exe.execute_into(&[&ins[0], &ins[1], &ins[2]], &[], &[&out0, &out1], &Default::default()).expect("execute_into");
    case.check(&[out0, out1]);
    // Output buffers of another binding's shape are refused.
    let wrong = Buffer::from_slice(&[0f32; 2 * 2 * 4 * 4], &[2, 2, 4, 4]).expect("wrong");
    let out1 = Buffer::from_slice(&[0i32; 4], &[4]).expect("out1");
    let e = exe.execute_into(&[&ins[0], &ins[1], &ins[2]], &[], &[&wrong, &out1], &Default::default());
    assert!(e.is_err(), "an output of the wrong shape is refused");
}

#[test]
fn bad_bindings_are_errors() {
    // Two inputs share the axis `n`: sizes 2 and 3 cannot both bind it.
    let text = r#"module @two
func @main(%0 "a": f32[n=?], %1 "b": f32[n=?]) {
  %2 = add %0, %1 : f32[n=?]
  return %2
}
"#;
    let exe = compile("", text);
    let a = Buffer::from_slice(&[1f32, 2.0], &[2]).expect("a");
    let b = Buffer::from_slice(&[1f32, 2.0, 3.0], &[3]).expect("b");
    let e = exe.execute(&[&a, &b], &[]).expect_err("conflicting sizes").to_string();
    assert!(e.contains("\"n\"") && e.contains("parameter 1"), "{e}");
    // Wrong rank, wrong count.
    let m = Buffer::from_slice(&[1f32, 2.0], &[1, 2]).expect("m");
    assert!(exe.execute(&[&a, &m], &[]).is_err());
    assert!(exe.execute(&[&a], &[]).is_err());
    // A good binding still runs: [1, 2] + [1, 2].
    let out = exe.execute(&[&a, &a], &[]).expect("execute");
    assert_eq!(out[0].to_vec::<f32>().expect("f32"), vec![2.0, 4.0]);
    let stats = exe.specialization_stats().expect("stats");
    assert_eq!((stats.misses, stats.hits), (1, 0), "rejected bindings compile nothing: {stats}");
}

#[test]
fn a_binding_that_breaks_a_reshape_is_an_error_naming_it() {
    // [n] reshaped to [k, 2] with k = n / 2 inferred: an odd n does not divide.
    let text = r#"module @halves
func @main(%0 "x": f32[n=?]) {
  %1 = dynamic_reshape %0, specs=[k=*,2] : f32[k=?,2]
  %2 = reduce_sum %1, axes=[1] : f32[k=?]
  return %2
}
"#;
    let exe = compile("", text);
    let x = Buffer::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4]).expect("x");
    assert_eq!(exe.execute(&[&x], &[]).expect("even")[0].to_vec::<f32>().expect("f32"), vec![3.0, 7.0]);
    let odd = Buffer::from_slice(&[1f32, 2.0, 3.0], &[3]).expect("odd");
    match exe.execute(&[&odd], &[]) {
        Err(Error::Invalid { op, .. }) => assert_eq!(op, "DynamicReshape"),
        other => panic!("{other:?}"),
    }
}

/// Three projections of one input with constant weights and biases (attention's Q, K and V),
/// a softmax of the first over the last axis: `{X}` is the input's batch and sequence axes.
fn projections(x_axes: &str) -> String {
    projections_of(x_axes, 8)
}

/// [`projections`] with `d` features (weights `[d, d]`).
fn projections_of(x_axes: &str, d: usize) -> String {
    let lit = |seed: u64, n: usize| values(n, seed).iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ");
    let mut text = format!("module @qkv\nfunc @main(%0 \"x\": f32[{x_axes},{d}]) {{\n");
    let mut outs = vec![];
    for p in 0..3usize {
        let v = 1 + p * 6;
        text += &format!(
            "  %{w} = constant [{}] : f32[{d},{d}]\n  %{b} = constant [{}] : f32[{d}]\n  \
             %{dot} = dot_general %0, %{w}, lhs_contracting=[2], rhs_contracting=[0], lhs_batch=[], rhs_batch=[] : f32[{x_axes},{d}]\n  \
             %{bb} = broadcast_in_dim %{b}, shape=f32[{x_axes},{d}], axes=[2] : f32[{x_axes},{d}]\n  \
             %{s} = add %{dot}, %{bb} : f32[{x_axes},{d}]\n",
            lit(10 + p as u64, d * d),
            lit(20 + p as u64, d),
            w = v,
            b = v + 1,
            dot = v + 2,
            bb = v + 3,
            s = v + 4,
        );
        outs.push(v + 4);
    }
    text += &format!("  %19 = fused_softmax %{}, axis=2 : f32[{x_axes},{d}]\n", outs[0]);
    text += &format!("  return %19, %{}, %{}\n}}\n", outs[1], outs[2]);
    text
}

#[test]
fn a_specialisation_plans_like_the_module_compiled_for_its_sizes() {
    // A specialisation skips the egg pass (the dynamic module went through it once); its plan
    // must still be the one the module written with those sizes gets: the three projections
    // merged into one GEMM with its bias, the fused softmax, no reference kernel.
    let dynamic = compile("fallback=error", &projections("batch=?,seq=?"));
    // Sizes with more than 1024 elements per activation: the fold pass materialises a bias
    // broadcast smaller than that (then the fixed module adds it in a loop).
    for &(b, s) in &[(4usize, 40usize), (3, 50)] {
        let x = Buffer::from_slice(&values(b * s * 8, 7), &[b, s, 8]).expect("x");
        let got = dynamic.execute(&[&x], &[]).expect("dynamic");
        let fixed = compile("fallback=error", &projections(&format!("{b},{s}")));
        let want = fixed.execute(&[&x], &[]).expect("fixed");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.to_vec::<f32>().expect("f32"), w.to_vec::<f32>().expect("f32"), "batch {b} seq {s}");
        }
        let r = dynamic.compile_report().expect("report").execution;
        let fixed_r = fixed.compile_report().expect("report").execution;
        assert_eq!(r.steps, fixed_r.steps, "batch {b} seq {s}:\n{r}\nfixed:\n{fixed_r}");
        let gemms: Vec<_> = r.steps.iter().filter(|st| st.label.contains("gemm")).collect();
        assert_eq!(gemms.len(), 1, "one merged projection GEMM: {r}");
        assert_eq!(gemms[0].count, 1, "{r}");
        assert!(gemms[0].label.contains("x24] +bias"), "N = 3 x 8, biases in the epilogue: {r}");
    }
    // Each plan is also recompiled with the whole pipeline in the background and swapped in;
    // results and plan stay those of the fixed module.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while dynamic.specialization_stats().expect("stats").upgraded < 2 {
        assert!(std::time::Instant::now() < deadline, "no background upgrade in 60 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (b, s) = (3, 50);
    let x = Buffer::from_slice(&values(b * s * 8, 7), &[b, s, 8]).expect("x");
    let got = dynamic.execute(&[&x], &[]).expect("dynamic");
    let fixed = compile("fallback=error", &projections(&format!("{b},{s}")));
    let want = fixed.execute(&[&x], &[]).expect("fixed");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.to_vec::<f32>().expect("f32"), w.to_vec::<f32>().expect("f32"), "upgraded plan");
    }
    let r = dynamic.compile_report().expect("report").execution;
    assert_eq!(r.steps, fixed.compile_report().expect("report").execution.steps, "upgraded plan:\n{r}");
    let stats = dynamic.specialization_stats().expect("stats");
    assert_eq!((stats.misses, stats.upgraded), (2, 2), "{stats}");
}

/// The GEMM weights of a dynamic module are packed once, when it is compiled: no binding (not
/// even the first) packs them again, each plan finds them in the process-wide constant cache,
/// and computes what the module compiled for its sizes does.
#[test]
fn weights_are_packed_once_at_the_dynamic_compile() {
    // Weights of 64 KiB each: large enough to be shared (`MIN_SHARED_BYTES`).
    const D: usize = 128;
    let weights = 3 * D * D * 4;
    let dynamic = compile("fallback=error", &projections_of("batch=?,seq=?", D));
    let mem = dynamic.constant_memory().expect("constant memory");
    assert!(mem.packed_bytes >= weights, "packed at compile time: {mem:?}");
    for &(b, s) in &[(2usize, 5usize), (3, 4)] {
        let x = Buffer::from_slice(&values(b * s * D, 9), &[b, s, D]).expect("x");
        let got = dynamic.execute(&[&x], &[]).expect("dynamic");
        let c = dynamic.specialization_stats().expect("stats").latest_constants;
        assert!(c.shared_bytes >= weights && c.owned_bytes < D * D * 4, "batch {b} seq {s}: {c:?}");
        let fixed = compile("fallback=error", &projections_of(&format!("{b},{s}"), D));
        let want = fixed.execute(&[&x], &[]).expect("fixed");
        for (g, w) in got.iter().zip(&want) {
            for (x, y) in g.to_vec::<f32>().expect("f32").iter().zip(w.to_vec::<f32>().expect("f32")) {
                assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "batch {b} seq {s}: {x} vs {y}");
            }
        }
    }
}

#[test]
fn positions_sliced_from_a_table_by_a_dynamic_iota_fold_away() {
    // `table[0, 2 .. 2 + seq]` written as an ONNX export's dynamic Slice becomes: a gather of a
    // constant table by `2 + iota(seq)` along axis 1. Specialised, the iota is a constant and
    // the gather folds: no reference gather kernel (fallback=error would refuse one).
    let table: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 3.0).collect();
    let lit = table.iter().map(|v| format!("{v:?}")).collect::<Vec<_>>().join(", ");
    let text = format!(
        "module @pos\nfunc @main(%0 \"x\": f32[1,seq=?]) {{\n  \
         %1 = constant [{lit}] : f32[1,16]\n  \
         %2 = iota shape=i32[seq=?], axis=0 : i32[seq=?]\n  \
         %3 = constant 2 : i32[]\n  \
         %4 = broadcast_in_dim %3, shape=i32[seq=?], axes=[] : i32[seq=?]\n  \
         %5 = add %2, %4 : i32[seq=?]\n  \
         %6 = gather %1, %5, index_vector_axis=1, offset_output_axes=[0], collapsed_slice_axes=[1], \
         start_index_map=[1], slice_sizes=[1,1], indices_are_sorted=true : f32[1,seq=?]\n  \
         %7 = add %0, %6 : f32[1,seq=?]\n  return %7\n}}\n"
    );
    let exe = compile("fallback=error", &text);
    for seq in [3usize, 14, 1] {
        let x = values(seq, seq as u64);
        let out = exe.execute(&[&Buffer::from_slice(&x, &[1, seq]).expect("x")], &[]).expect("execute");
        let want: Vec<f32> = (0..seq).map(|t| x[t] + table[t + 2]).collect();
        assert_eq!(out[0].to_vec::<f32>().expect("f32"), want, "seq {seq}");
        let r = exe.compile_report().expect("report").execution;
        assert_eq!(r.count(EventKind::Reference), 0, "seq {seq}: {r}");
        assert!(!r.steps.iter().any(|s| s.label.contains("gather")), "seq {seq}: {r}");
    }
}
