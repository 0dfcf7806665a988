//! Tests of the "jit" backend beyond the compliance suite: that elementwise graphs really run as
//! compiled loops (with values worked out by hand), parallel splitting, donation and in-place
//! reuse, delegation to the interpreter, concurrent executions, options and dumps.
//!
//! Run with `cargo test --test jit_backend`.

use std::sync::Arc;

#[path = "common/jit.rs"]
mod jit_support;

use jit_support::{backend, compile, run};
use tensorjit::backends::jit::JitBackend;
use tensorjit::ir::op::CompareOp;
use tensorjit::{Buffer, DType, Executable, Function, Shape, Value};

fn param(f: &Function, name: &str, d: DType, dims: &[i64]) -> Value {
    f.parameter(name, Shape::new(d, dims)).expect("parameter")
}

#[test]
fn fused_chain_runs_as_one_loop_with_hand_values() {
    let b = backend("");
    // y = max((a + b) * 2 - a / b, 0), and s = a + b is returned too.
    let e = compile(&b, |f| {
        let a = param(f, "a", DType::Float32, &[5]);
        let bb = param(f, "b", DType::Float32, &[5]);
        let s = f.add(a, bb)?;
        let two = f.scalar(2f32)?;
        let zero = f.scalar(0f32)?;
        let t = f.mul(s, two)?;
        let q = f.div(a, bb)?;
        let d = f.sub(t, q)?;
        Ok(vec![f.max(d, zero)?, s])
    });
    assert!(e.uses_compiled_plan());
    assert_eq!(e.num_loop_steps(), 1);
    let a = Buffer::from_slice(&[1f32, -4., 3., 0., -1.], &[5]).unwrap();
    let bb = Buffer::from_slice(&[1f32, 2., -1., 5., 4.], &[5]).unwrap();
    let out = run(&e, &[a, bb]);
    // (1+1)*2 - 1 = 3; (-4+2)*2 - (-2) = -2 -> 0; (3-1)*2 - (-3) = 7; (0+5)*2 - 0 = 10;
    // (-1+4)*2 - (-0.25) = 6.25.
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3., 0., 7., 10., 6.25]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![2., -2., 2., 5., 3.]);
}

#[test]
fn where_compare_and_clamp_fuse() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float64, &[6]);
        let zero = f.scalar(0f64)?;
        let c = f.compare(CompareOp::LessThan, false, x, zero)?;
        let three = f.scalar(3f64)?;
        let w = f.where_(c, f.neg(x)?, f.mul(x, three)?)?;
        let lo = f.scalar(1f64)?;
        let hi = f.scalar(10f64)?;
        Ok(vec![f.clamp(lo, w, hi)?])
    });
    assert_eq!(e.num_loop_steps(), 1);
    let x = Buffer::from_slice(&[-2f64, 0.5, 4., -20., f64::NAN, -0.25], &[6]).unwrap();
    let out = run(&e, &[x])[0].to_vec::<f64>().unwrap();
    // where: 2, 1.5, 12, 20, NaN*3 = NaN (NaN < 0 is false), 0.25; clamp to [1, 10]: NaN stays NaN.
    assert_eq!(out[..4], [2., 1.5, 10., 10.]);
    assert!(out[4].is_nan());
    assert_eq!(out[5], 1.);
}

#[test]
fn scalar_broadcasts_and_reference_kernels_mix() {
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[2, 3]);
        let s = param(f, "s", DType::Float32, &[]);
        let sb = f.broadcast_in_dim(s, &Shape::new(DType::Float32, &[2, 3]), &[])?;
        let y = f.add(x, sb)?; // loop
        let r = f.reduce_sum(y, &[1])?; // reference kernel
        let t = f.transpose(y, &[1, 0])?; // reference kernel
        let half = f.scalar(0.5f32)?;
        Ok(vec![f.mul(r, half)?, t]) // second loop over [2]
    });
    assert_eq!(e.num_loop_steps(), 2);
    let x = Buffer::from_slice(&[1f32, 2., 3., 4., 5., 6.], &[2, 3]).unwrap();
    let out = run(&e, &[x, Buffer::scalar(10f32)]);
    // y = [[11,12,13],[14,15,16]]; row sums 36, 45 halved.
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![18., 22.5]);
    assert_eq!(out[1].dims(), vec![3, 2]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![11., 14., 12., 15., 13., 16.]);
}

#[test]
fn large_loops_split_across_threads_give_exact_results() {
    for config in ["parallelism=1", "parallelism=2", "parallelism=3"] {
        let b = backend(config);
        let n = 200_003usize; // > PARALLEL_MIN_ELEMENTS, prime
        let e = compile(&b, |f| {
            let x = param(f, "x", DType::Float32, &[n as i64]);
            let y = param(f, "y", DType::Float32, &[n as i64]);
            let c = f.scalar(3f32)?;
            Ok(vec![f.sub(f.mul(x, c)?, y)?])
        });
        let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let out = run(&e, &[Buffer::from_slice(&xs, &[n]).unwrap(), Buffer::from_slice(&ys, &[n]).unwrap()]);
        let got = out[0].to_vec::<f32>().unwrap();
        for i in (0..n).step_by(997).chain(n - 20..n) {
            // 3i - (i mod 7): exact in f32 below 2^24.
            assert_eq!(got[i], (3 * i - i % 7) as f32, "{config} element {i}");
        }
    }
}

#[test]
fn donated_input_storage_is_reused_and_shared_inputs_untouched() {
    let b = backend("parallelism=1");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[1024]);
        let two = f.scalar(2f32)?;
        let one = f.scalar(1f32)?;
        Ok(vec![f.add(f.mul(x, two)?, one)?])
    });
    let data: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    // Not donated: the caller's buffer is read, never written, and the output is new memory.
    let x = Buffer::from_slice(&data, &[1024]).unwrap();
    let out = e.execute(&[&x], &[false]).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), data);
    assert_ne!(out[0].data_ptr(), x.data_ptr());
    assert_eq!(out[0].to_vec::<f32>().unwrap()[1023], 2047.);
    // Donated: the output takes over the input's storage.
    let x = Buffer::from_slice(&data, &[1024]).unwrap();
    let ptr = x.data_ptr();
    let out = e.execute(&[&x], &[true]).unwrap();
    assert!(!x.is_live());
    assert_eq!(out[0].data_ptr(), ptr);
    assert_eq!(out[0].to_vec::<f32>().unwrap()[..3], [1., 3., 5.]);
}

#[test]
fn control_flow_runs_nested_compiled_plans() {
    let b = backend("");
    // while i < 3: i += 1; x = x * 2 + y   (y captured from main)
    let e = compile(&b, |f| {
        let i0 = param(f, "i", DType::Int32, &[]);
        let x0 = param(f, "x", DType::Float32, &[1000]);
        let y = param(f, "y", DType::Float32, &[1000]);
        let cond = f.closure()?;
        let ci = cond.parameter("i", Shape::scalar(DType::Int32))?;
        cond.parameter("x", Shape::new(DType::Float32, &[1000]))?;
        cond.return_(&[cond.compare(CompareOp::LessThan, false, ci, cond.scalar(3i32)?)?])?;
        let body = f.closure()?;
        let bi = body.parameter("i", Shape::scalar(DType::Int32))?;
        let bx = body.parameter("x", Shape::new(DType::Float32, &[1000]))?;
        let nx = body.add(body.mul(bx, body.scalar(2f32)?)?, y)?;
        body.return_(&[body.add(bi, body.scalar(1i32)?)?, nx])?;
        f.while_(&cond, &body, &[i0, x0])
    });
    assert!(e.uses_compiled_plan());
    assert!(e.num_loop_steps() >= 1, "the body's elementwise chain is a compiled loop");
    let x: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let out = run(
        &e,
        &[
            Buffer::scalar(0i32),
            Buffer::from_slice(&x, &[1000]).unwrap(),
            Buffer::from_slice(&[1f32; 1000], &[1000]).unwrap(),
        ],
    );
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![3]);
    // x → 2x+1 → 4x+3 → 8x+7
    let got = out[1].to_vec::<f32>().unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, 8.0 * i as f32 + 7.0, "element {i}");
    }
    // Running again gives the same answer (closure constants and params are re-bound).
    let again = run(
        &e,
        &[
            Buffer::scalar(0i32),
            Buffer::from_slice(&x, &[1000]).unwrap(),
            Buffer::from_slice(&[1f32; 1000], &[1000]).unwrap(),
        ],
    );
    assert_eq!(again[1].to_vec::<f32>().unwrap(), got);
}

#[test]
fn if_and_sort_run_on_the_plan() {
    let b = backend("");
    let e = compile(&b, |f| {
        let p = param(f, "p", DType::Bool, &[]);
        let x = param(f, "x", DType::Float32, &[5]);
        let then_b = f.closure()?;
        then_b.return_(&[then_b.neg(x)?])?;
        let else_b = f.closure()?;
        else_b.return_(&[else_b.mul(x, else_b.scalar(10f32)?)?])?;
        let picked = f.if_(p, &then_b, &else_b)?;
        let cmp = f.closure()?;
        let l = cmp.parameter("l", Shape::scalar(DType::Float32))?;
        let r = cmp.parameter("r", Shape::scalar(DType::Float32))?;
        cmp.return_(&[cmp.compare(CompareOp::LessThan, false, l, r)?])?;
        let sorted = f.sort(&cmp, 0, true, &[picked[0]])?;
        Ok(vec![picked[0], sorted[0]])
    });
    assert!(e.uses_compiled_plan());
    let xs = [3f32, -1.0, 2.0, 5.0, 0.5];
    let out = run(&e, &[Buffer::scalar(true), Buffer::from_slice(&xs, &[5]).unwrap()]);
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![-3.0, 1.0, -2.0, -5.0, -0.5]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![-5.0, -3.0, -2.0, -0.5, 1.0]);
    let out = run(&e, &[Buffer::scalar(false), Buffer::from_slice(&xs, &[5]).unwrap()]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![-10.0, 5.0, 20.0, 30.0, 50.0]);
}

/// Closures that read values of `main` computed by its loops and read nowhere else in `main`
/// (an elementwise result and a broadcast of a scalar): the loops write them out for the
/// branch, which computes exp(x) + x, or s + x (s broadcast), worked by hand below.
#[test]
fn closures_read_values_of_main_computed_by_loops() {
    let b = backend("");
    let e = compile(&b, |f| {
        let p = param(f, "p", DType::Bool, &[]);
        let x = param(f, "x", DType::Float32, &[5]);
        let s = param(f, "s", DType::Float32, &[]);
        let ex = f.exp(x)?;
        let sb = f.broadcast_in_dim(s, &Shape::new(DType::Float32, &[5]), &[])?;
        let then_b = f.closure()?;
        then_b.return_(&[then_b.add(ex, x)?])?;
        let else_b = f.closure()?;
        else_b.return_(&[else_b.add(sb, x)?])?;
        f.if_(p, &then_b, &else_b)
    });
    let xs = [0f32, 1.0, -2.0, 0.5, 3.0];
    for (p, want) in [(true, xs.map(|v| v.exp() + v)), (false, xs.map(|v| 2.5 + v))] {
        let out = run(&e, &[Buffer::scalar(p), Buffer::from_slice(&xs, &[5]).unwrap(), Buffer::scalar(2.5f32)]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want.to_vec(), "p = {p}");
    }
}

#[test]
fn concurrent_executions_equal_sequential_ones() {
    const N: usize = 70_001; // large enough to use the pool from every thread
    let n = N;
    let b = backend("parallelism=2");
    let e = Arc::new(compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[n as i64]);
        let t = f.tanh(x)?;
        let m = f.reduce_max(t, &[0])?;
        let half = f.scalar(0.5f32)?;
        Ok(vec![f.add(f.mul(t, half)?, f.exp(x)?)?, m])
    }));
    fn input(k: usize) -> Buffer {
        let v: Vec<f32> = (0..N).map(|i| ((i * (k + 3)) % 101) as f32 / 25.0 - 2.0).collect();
        Buffer::from_slice(&v, &[N]).unwrap()
    }
    let want: Vec<(Vec<u32>, Vec<u32>)> = (0..8)
        .map(|k| {
            let o = run(&e, &[input(k)]);
            let bits = |b: &Buffer| b.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            (bits(&o[0]), bits(&o[1]))
        })
        .collect();
    let want = Arc::new(want);
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let (e, want) = (e.clone(), want.clone());
            std::thread::spawn(move || {
                let x = input(k);
                for _ in 0..25 {
                    let o = e.execute(&[&x], &[]).unwrap();
                    let bits = |b: &Buffer| b.to_vec::<f32>().unwrap().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert!(bits(&o[0]) == want[k].0 && bits(&o[1]) == want[k].1, "thread {k} differs");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}

#[test]
fn dump_writes_every_stage_and_the_ir_replays() {
    let dir = std::env::temp_dir().join(format!("tensorjit-dump-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let b = backend(&format!("dump={}", dir.display()));
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[8]);
        let one = f.scalar(1f32)?;
        let y = f.mul(x, one)?; // removed by simplify: a pass snapshot is written
        Ok(vec![f.logistic(f.add(y, one)?)?])
    });
    assert_eq!(e.num_loop_steps(), 1);
    let sub: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|d| d.unwrap().path()).collect();
    assert_eq!(sub.len(), 1, "one directory per compiled module: {sub:?}");
    let files: Vec<String> =
        std::fs::read_dir(&sub[0]).unwrap().map(|d| d.unwrap().file_name().to_string_lossy().into_owned()).collect();
    for want in
        ["ir-00-input.tjir", "passes.txt", "clusters.txt", "kernel-0.clif", "kernel-0.asm", "plan.txt", "execution.txt"]
    {
        assert!(files.iter().any(|f| f == want), "missing {want} in {files:?}");
    }
    let irs: Vec<&String> = files.iter().filter(|f| f.ends_with(".tjir")).collect();
    assert!(irs.len() >= 2, "input and at least one pass snapshot: {irs:?}");
    for f in irs {
        let text = std::fs::read_to_string(sub[0].join(f)).unwrap();
        let m = tensorjit::ir::text::parse_module(&text).unwrap_or_else(|e| panic!("{f} does not parse: {e}"));
        tensorjit::ir::verify::verify(&m).unwrap();
    }
    let clif = std::fs::read_to_string(sub[0].join("kernel-0.clif")).unwrap();
    assert!(clif.contains("f32x4"), "vector loop in the Cranelift IR");
    let plan = std::fs::read_to_string(sub[0].join("plan.txt")).unwrap();
    assert!(plan.contains("loop cluster0"), "{plan}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn options_and_errors() {
    assert_eq!(backend("parallelism=2").parallelism(), 2);
    assert!(backend("").parallelism() >= 1);
    let e = JitBackend::new("parallelism=2,fast").err().unwrap().to_string();
    assert!(e.contains("fast") && e.contains("parallelism") && e.contains("while_limit") && e.contains("dump"), "{e}");
    assert!(JitBackend::new("ops_sequential").is_err(), "the option that did nothing is gone");
    let b = backend("");
    let e = compile(&b, |f| {
        let x = param(f, "x", DType::Float32, &[2]);
        Ok(vec![f.sqrt(x)?])
    });
    // Wrong input shape names the parameter.
    let bad = Buffer::from_slice(&[1f32, 2., 3.], &[3]).unwrap();
    let err = e.execute(&[&bad], &[]).unwrap_err().to_string();
    assert!(err.contains("\"x\""), "{err}");
    let ok = Buffer::from_slice(&[4f32, 9.], &[2]).unwrap();
    assert_eq!(run(&e, std::slice::from_ref(&ok))[0].to_vec::<f32>().unwrap(), vec![2., 3.]);
    e.finalize();
    assert!(matches!(e.execute(&[&ok], &[]), Err(tensorjit::Error::UseAfterFree { .. })));
}

#[test]
fn jit_is_registered_and_the_default() {
    assert!(tensorjit::list().iter().any(|n| n == "jit"));
    let b = tensorjit::new_with_config("jit:parallelism=2").unwrap();
    assert_eq!(b.name(), "jit");
    if std::env::var_os("TENSORJIT_BACKEND").is_none() {
        assert_eq!(tensorjit::new().unwrap().name(), "jit");
    }
    let e = tensorjit::new_with_config("jit:bogus").err().unwrap().to_string();
    assert!(e.contains("bogus") && e.contains("dump"), "{e}");
}

#[test]
fn long_bodies_without_unrolling_handle_every_tail_length() {
    // 60 fused ops (more than the unrolling limit): 30 × (add 0.5, max −100) = x + 15 exactly.
    let b = backend("parallelism=1");
    for n in [0usize, 1, 3, 4, 5, 8, 17, 33] {
        let e = compile(&b, |f| {
            let mut x = param(f, "x", DType::Float32, &[n as i64]);
            for _ in 0..30 {
                x = f.add(x, f.scalar(0.5f32)?)?;
                x = f.max(x, f.scalar(-100f32)?)?;
            }
            Ok(vec![x])
        });
        assert_eq!(e.num_loop_steps(), 1);
        let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
        let out = run(&e, &[Buffer::from_slice(&xs, &[n]).unwrap()])[0].to_vec::<f32>().unwrap();
        let want: Vec<f32> = xs.iter().map(|x| x + 15.0).collect();
        assert_eq!(out, want, "n = {n}");
    }
}

#[test]
fn max_min_against_constants_keep_nan_and_signed_zero_rules() {
    // Catalogue §4.1: NaN in either → NaN; Max(−0, +0) = +0, Min(−0, +0) = −0. Neg and Abs
    // flip / clear the sign bit only. The 7 special values repeat 5 times (35 elements) so that
    // they pass through the unrolled vector loop and the scalar tail, in f32 and f64.
    fn check<T: tensorjit::ir::dtype::Element + Into<f64>>(dt: DType, of: fn(f64) -> T) {
        let b = backend("");
        let e = compile(&b, |f| {
            let x = param(f, "x", dt, &[35]);
            let c = |v: f64| f.scalar(of(v));
            let (pz, nz) = (c(0.0)?, c(-0.0)?);
            Ok(vec![
                f.max(x, pz)?,
                f.max(nz, x)?,
                f.min(pz, x)?,
                f.min(x, nz)?,
                f.max(x, c(2.0)?)?,
                f.min(c(-1.5)?, x)?,
                f.neg(x)?,
                f.abs(x)?,
            ])
        });
        assert_eq!(e.num_loop_steps(), 1);
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        let xs = [-0., 0., nan, -1., 1., inf, -inf];
        let want: [[f64; 7]; 8] = [
            [0., 0., nan, 0., 1., inf, 0.],
            [-0., 0., nan, -0., 1., inf, -0.],
            [-0., 0., nan, -1., 0., 0., -inf],
            [-0., -0., nan, -1., -0., -0., -inf],
            [2., 2., nan, 2., 2., inf, 2.],
            [-1.5, -1.5, nan, -1.5, -1.5, -1.5, -inf],
            [0., -0., nan, 1., -1., -inf, inf],
            [0., 0., nan, 1., 1., inf, inf],
        ];
        let x: Vec<T> = (0..35).map(|i| of(xs[i % 7])).collect();
        let out = run(&e, &[Buffer::from_slice(&x, &[35]).unwrap()]);
        for (k, w) in want.iter().enumerate() {
            let got = out[k].to_vec::<T>().unwrap();
            for (i, g) in got.iter().enumerate() {
                let (g, w): (f64, f64) = ((*g).into(), w[i % 7]);
                assert!(
                    (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits(),
                    "{dt:?} output {k} element {i}: got {g:?}, want {w:?}"
                );
            }
        }
    }
    check::<f32>(DType::Float32, |v| v as f32);
    check::<f64>(DType::Float64, |v| v);
}

/// `streaming_stores=on` (non-temporal output stores) writes the same values as the ordinary
/// stores, for every tail length, split across threads into chunks, with several outputs of
/// different widths (f32 and Bool), f64 and i8 loops, and in place over a donated input. The
/// expected values are computed here in plain Rust: y = (x·3 − 1) max 0, m = x > 2,
/// w = m ? y : x; z = x / 4 in f64; b = x + x + 7 in wrapping i8.
#[test]
fn streaming_stores_write_the_same_values() {
    let off = backend("parallelism=3,streaming_stores=off");
    for threads in [1, 3] {
        let on = backend(&format!("parallelism={threads},streaming_stores=on"));
        for n in [0usize, 1, 15, 16, 17, 63, 64, 65, 1000, 65_537, 100_003] {
            let build = |f: &Function| {
                let x = param(f, "x", DType::Float32, &[n as i64]);
                let y = f.max(f.sub(f.mul(x, f.scalar(3f32)?)?, f.scalar(1f32)?)?, f.scalar(0f32)?)?;
                let m = f.greater_than(x, f.scalar(2f32)?)?;
                Ok(vec![y, m, f.where_(m, y, x)?])
            };
            let (e_on, e_off) = (compile(&on, build), compile(&off, build));
            // Shorter loops may have no vector store to stream (a 1-element input is read as a
            // scalar); from 64 elements on every one of these loops has.
            let streams = |e: &tensorjit::backends::jit::JitExecutable| {
                assert!(n < 64 || e.num_streaming_loops() == 1, "n = {n}: not streaming");
            };
            streams(&e_on);
            assert_eq!(e_off.num_streaming_loops(), 0);
            let xs: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.0625 - 1.5).collect();
            let x = Buffer::from_slice(&xs, &[n]).unwrap();
            let want_y: Vec<f32> = xs.iter().map(|v| (v * 3.0 - 1.0).max(0.0)).collect();
            let want_m: Vec<bool> = xs.iter().map(|&v| v > 2.0).collect();
            let want_w: Vec<f32> = xs.iter().zip(&want_y).map(|(&v, &y)| if v > 2.0 { y } else { v }).collect();
            for e in [&e_on, &e_off] {
                let out = run(e, std::slice::from_ref(&x));
                assert_eq!(out[0].to_vec::<f32>().unwrap(), want_y, "n = {n}, threads = {threads}");
                assert_eq!(out[1].to_vec::<bool>().unwrap(), want_m, "n = {n}, threads = {threads}");
                assert_eq!(out[2].to_vec::<f32>().unwrap(), want_w, "n = {n}, threads = {threads}");
            }
            let e = compile(&on, |f| Ok(vec![f.div(param(f, "x", DType::Float64, &[n as i64]), f.scalar(4f64)?)?]));
            streams(&e);
            let xd: Vec<f64> = xs.iter().map(|&v| f64::from(v) * 3.0).collect();
            let out = run(&e, &[Buffer::from_slice(&xd, &[n]).unwrap()]);
            let want: Vec<f64> = xd.iter().map(|v| v / 4.0).collect();
            assert_eq!(out[0].to_vec::<f64>().unwrap(), want, "f64, n = {n}, threads = {threads}");
            let e = compile(&on, |f| {
                let x = param(f, "x", DType::Int8, &[n as i64]);
                Ok(vec![f.add(f.add(x, x)?, f.scalar(7i8)?)?])
            });
            streams(&e);
            let xb: Vec<i8> = (0..n).map(|i| (i * 37 % 256) as u8 as i8).collect();
            let out = run(&e, &[Buffer::from_slice(&xb, &[n]).unwrap()]);
            let want: Vec<i8> = xb.iter().map(|v| v.wrapping_add(*v).wrapping_add(7)).collect();
            assert_eq!(out[0].to_vec::<i8>().unwrap(), want, "i8, n = {n}, threads = {threads}");
            // In place: the donated input's storage becomes the output.
            let e = compile(&on, |f| {
                let x = param(f, "x", DType::Float32, &[n as i64]);
                Ok(vec![f.neg(f.mul(x, f.scalar(0.5f32)?)?)?])
            });
            let d = Buffer::from_slice(&xs, &[n]).unwrap();
            let out = e.execute(&[&d], &[true]).unwrap();
            let want: Vec<f32> = xs.iter().map(|v| -(v * 0.5)).collect();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "in place, n = {n}, threads = {threads}");
        }
    }
    // `auto` streams only outputs at least as large as the last-level cache.
    let auto = backend("parallelism=1");
    let e = compile(&auto, |f| Ok(vec![f.neg(param(f, "x", DType::Float32, &[4096]))?]));
    assert_eq!(e.num_streaming_loops(), 0);
    let e = JitBackend::new("streaming_stores=maybe").err().unwrap().to_string();
    assert!(e.contains("streaming_stores") && e.contains("maybe"), "{e}");
}
