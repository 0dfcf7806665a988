//! Execution tests of the "interp" backend: reuse and concurrency of executables, input
//! checking, donation, finalize, control flow, dynamic axes and error propagation.

use std::sync::Arc;

use tensorjit::api::ReshapeSpec;
use tensorjit::ir::op::{ArithReduce, BinaryOp, Op};
use tensorjit::ir::{Module, Shape};
use tensorjit::{Backend, Buffer, DType, Error, Executable};

fn backend() -> Arc<dyn Backend> {
    tensorjit::new_with_config("interp").expect("interp is registered")
}

fn f32s(dims: &[i64]) -> Shape {
    Shape::new(DType::Float32, dims)
}

/// `out = x * x + x` on f32[4].
fn square_plus(b: &Arc<dyn Backend>) -> Arc<dyn Executable> {
    let bld = b.builder("square_plus");
    let main = bld.main();
    let x = main.parameter("x", f32s(&[4])).unwrap();
    let sq = main.mul(x, x).unwrap();
    let out = main.add(sq, x).unwrap();
    main.return_(&[out]).unwrap();
    bld.compile().unwrap()
}

#[test]
fn registered_and_listed() {
    assert!(tensorjit::list().iter().any(|n| n == "interp"));
    let b = backend();
    assert_eq!(b.name(), "interp");
    assert!(tensorjit::new_with_config("interp:parallelism=2").is_ok());
    assert!(tensorjit::new_with_config("interp:ops_sequential").is_err(), "the option that did nothing is gone");
    let e = tensorjit::new_with_config("interp:nope").err().expect("unknown option rejected").to_string();
    assert!(e.contains("nope") && e.contains("parallelism"), "{e}");
}

#[test]
fn runs_many_times() {
    let b = backend();
    let exe = square_plus(&b);
    for k in 0..5 {
        let v = k as f32;
        let x = Buffer::from_slice(&[v, 1.0, -2.0, 0.5], &[4]).unwrap();
        let out = exe.execute(&[&x], &[]).unwrap();
        // x² + x, worked by hand: 1 → 2, −2 → 2, 0.5 → 0.75.
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![v * v + v, 2.0, 2.0, 0.75]);
        // The input is untouched.
        assert_eq!(x.to_vec::<f32>().unwrap(), vec![v, 1.0, -2.0, 0.5]);
    }
}

#[test]
fn concurrent_executions_match_sequential() {
    let b = backend();
    let exe = square_plus(&b);
    let input = |t: usize, i: usize| [t as f32, i as f32, -(t as f32) / 2.0, 3.0];
    let expected = |x: [f32; 4]| x.map(|v| v * v + v).to_vec();
    // Sequential reference run.
    let mut seq = vec![];
    for t in 0..8 {
        for i in 0..50 {
            let x = Buffer::from_slice(&input(t, i), &[4]).unwrap();
            seq.push(exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap());
        }
    }
    let par: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let exe = exe.clone();
                s.spawn(move || {
                    (0..50)
                        .map(|i| {
                            let x = Buffer::from_slice(&input(t, i), &[4]).unwrap();
                            let out = exe.execute(&[&x], &[]).unwrap()[0].to_vec::<f32>().unwrap();
                            assert_eq!(out, expected(input(t, i)), "thread {t} iteration {i}");
                            out
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(par.concat(), seq);
}

#[test]
fn input_errors_name_the_parameter() {
    let b = backend();
    let bld = b.builder("two");
    let main = bld.main();
    let x = main.parameter("alpha", f32s(&[2])).unwrap();
    let y = main.parameter("beta", Shape::new(DType::Int32, &[3])).unwrap();
    let yf = main.convert_dtype(y, DType::Float32).unwrap();
    let s = main.reduce_sum(yf, &[0]).unwrap();
    let out = main.broadcast_in_dim(s, &f32s(&[2]), &[]).unwrap();
    let out = main.add(x, out).unwrap();
    main.return_(&[out]).unwrap();
    let exe = bld.compile().unwrap();
    assert_eq!(exe.input_names(), &["alpha".to_string(), "beta".to_string()]);

    let good_x = Buffer::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let good_y = Buffer::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let out = exe.execute(&[&good_x, &good_y], &[]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![7.0, 8.0]);

    // Wrong count.
    let e = exe.execute(&[&good_x], &[]).unwrap_err().to_string();
    assert!(e.contains("alpha") && e.contains("beta"), "{e}");
    // Wrong dtype.
    let bad_y = Buffer::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let e = exe.execute(&[&good_x, &bad_y], &[]).unwrap_err().to_string();
    assert!(e.contains("beta"), "{e}");
    // Wrong shape.
    let bad_x = Buffer::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let e = exe.execute(&[&bad_x, &good_y], &[]).unwrap_err().to_string();
    assert!(e.contains("alpha"), "{e}");
    // A finalized input.
    let dead = Buffer::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    dead.finalize();
    let e = exe.execute(&[&good_x, &dead], &[]).unwrap_err();
    assert!(matches!(e, Error::UseAfterFree { .. }), "{e}");
    assert!(e.to_string().contains("beta"), "{e}");
}

#[test]
fn donation_invalidates_the_buffer() {
    let b = backend();
    let exe = square_plus(&b);
    let x = Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let out = exe.execute(&[&x], &[true]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 6.0, 12.0, 20.0]);
    assert!(!x.is_live());
    assert!(matches!(x.to_vec::<f32>(), Err(Error::UseAfterFree { .. })));
    // Using the donated buffer again is an error, not undefined behaviour.
    assert!(matches!(exe.execute(&[&x], &[]), Err(Error::UseAfterFree { .. })));
    assert!(matches!(exe.execute(&[&x], &[true]), Err(Error::UseAfterFree { .. })));
    // Finalizing after donation is fine.
    x.finalize();
    // The donate slice must match the inputs.
    let y = Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    assert!(exe.execute(&[&y], &[true, false]).is_err());
    assert!(y.is_live(), "a rejected call donates nothing");
}

#[test]
fn donated_input_passes_through_without_copy() {
    let b = backend();
    let bld = b.builder("passthrough");
    let main = bld.main();
    let x = main.parameter("x", f32s(&[3])).unwrap();
    let y = main.neg(x).unwrap();
    main.return_(&[x, y, x]).unwrap();
    let exe = bld.compile().unwrap();

    let xb = Buffer::from_slice(&[1.0f32, -2.0, 3.0], &[3]).unwrap();
    let ptr = xb.data_ptr().unwrap();
    let out = exe.execute(&[&xb], &[true]).unwrap();
    assert_eq!(out[0].data_ptr(), Some(ptr), "donated storage returned as is");
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![-1.0, 2.0, -3.0]);
    // Duplicate outputs share data and are each usable.
    assert_eq!(out[2].to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0]);
    out[0].finalize();
    assert_eq!(out[2].to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0]);
}

#[test]
fn dynamic_update_slice_reuses_donated_storage() {
    let b = backend();
    let bld = b.builder("dus");
    let main = bld.main();
    let x = main.parameter("cache", f32s(&[5])).unwrap();
    let u = main.parameter("update", f32s(&[2])).unwrap();
    let start = main.scalar(-1i32).unwrap();
    let out = main.dynamic_update_slice(x, u, &[start]).unwrap();
    main.return_(&[out]).unwrap();
    let exe = bld.compile().unwrap();
    let upd = Buffer::from_slice(&[9.0f32, 9.0], &[2]).unwrap();
    // §9: start −1 → −1 + 5 = 4, clamped to 5 − 2 = 3.
    let want = vec![0.0f32, 1.0, 2.0, 9.0, 9.0];

    // Not donated: a new buffer, the input unchanged.
    let cache = Buffer::from_slice(&[0.0f32, 1.0, 2.0, 3.0, 4.0], &[5]).unwrap();
    let out = exe.execute(&[&cache, &upd], &[]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(cache.to_vec::<f32>().unwrap(), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_ne!(out[0].data_ptr(), cache.data_ptr());

    // Donated: written in place.
    let ptr = cache.data_ptr().unwrap();
    let out = exe.execute(&[&cache, &upd], &[true, false]).unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(out[0].data_ptr(), Some(ptr));
    assert!(!cache.is_live());
    assert_eq!(upd.to_vec::<f32>().unwrap(), vec![9.0, 9.0]);
}

#[test]
fn execute_after_finalize_fails() {
    let b = backend();
    let exe = square_plus(&b);
    let x = Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    assert!(exe.execute(&[&x], &[]).is_ok());
    exe.finalize();
    let e = exe.execute(&[&x], &[]).unwrap_err();
    assert!(matches!(e, Error::UseAfterFree { .. }), "{e}");
    assert!(x.is_live(), "a failed execute leaves the inputs alone");
    // Backend finalize: later compiles fail.
    let b2 = backend();
    let bld = b2.builder("late");
    let main = bld.main();
    let p = main.parameter("p", f32s(&[])).unwrap();
    main.return_(&[p]).unwrap();
    b2.finalize();
    assert!(b2.is_finalized());
    assert!(bld.compile().is_err());
}

#[test]
fn while_loop_if_and_call() {
    let b = backend();
    let bld = b.builder("control");
    // A named function: double(v) = v + v.
    let double = bld.new_function("double").unwrap();
    let p = double.parameter("v", f32s(&[])).unwrap();
    let d = double.add(p, p).unwrap();
    double.return_(&[d]).unwrap();

    let main = bld.main();
    let n = main.parameter("n", Shape::scalar(DType::Int32)).unwrap();
    let x = main.parameter("x", f32s(&[])).unwrap();
    let flag = main.parameter("flag", Shape::scalar(DType::Bool)).unwrap();
    let zero = main.scalar(0i32).unwrap();
    // while i < n { i += 1; acc = double(acc) }
    let cond = main.closure().unwrap();
    let ci = cond.parameter("i", Shape::scalar(DType::Int32)).unwrap();
    let _ca = cond.parameter("acc", f32s(&[])).unwrap();
    let lt = cond.less_than(ci, n).unwrap(); // captures n from main
    cond.return_(&[lt]).unwrap();
    let body = main.closure().unwrap();
    let bi = body.parameter("i", Shape::scalar(DType::Int32)).unwrap();
    let ba = body.parameter("acc", f32s(&[])).unwrap();
    let one = body.scalar(1i32).unwrap();
    let bi1 = body.add(bi, one).unwrap();
    let ba2 = body.call(&double, &[ba]).unwrap()[0];
    body.return_(&[bi1, ba2]).unwrap();
    let st = main.while_(&cond, &body, &[zero, x]).unwrap();
    // if flag { acc + 1 } else { acc * 10 }
    let then_b = main.closure().unwrap();
    let c1 = then_b.scalar(1.0f32).unwrap();
    let t = then_b.add(st[1], c1).unwrap();
    then_b.return_(&[t]).unwrap();
    let else_b = main.closure().unwrap();
    let c10 = else_b.scalar(10.0f32).unwrap();
    let e = else_b.mul(st[1], c10).unwrap();
    else_b.return_(&[e]).unwrap();
    let r = main.if_(flag, &then_b, &else_b).unwrap();
    main.return_(&[st[0], r[0]]).unwrap();
    let exe = bld.compile().unwrap();

    let run = |n: i32, x: f32, flag: bool| {
        let out = exe.execute(&[&Buffer::scalar(n), &Buffer::scalar(x), &Buffer::scalar(flag)], &[]).unwrap();
        (out[0].to_vec::<i32>().unwrap()[0], out[1].to_vec::<f32>().unwrap()[0])
    };
    // 1.5 doubled 5 times = 48; +1 = 49.
    assert_eq!(run(5, 1.5, true), (5, 49.0));
    // Doubled 3 times = 12; × 10 = 120.
    assert_eq!(run(3, 1.5, false), (3, 120.0));
    // The condition is false at the start: the initial state comes back.
    assert_eq!(run(0, 2.0, true), (0, 3.0));
    assert_eq!(run(-4, 2.0, false), (0, 20.0));
}

fn less_than_comparator(main: &tensorjit::Function, dtypes: &[DType], key: usize) -> tensorjit::Function {
    let cmp = main.closure().unwrap();
    let mut params = vec![];
    for (k, &d) in dtypes.iter().enumerate() {
        params.push(cmp.parameter(&format!("lhs{k}"), Shape::scalar(d)).unwrap());
        params.push(cmp.parameter(&format!("rhs{k}"), Shape::scalar(d)).unwrap());
    }
    let lt = cmp.less_than(params[2 * key], params[2 * key + 1]).unwrap();
    cmp.return_(&[lt]).unwrap();
    cmp
}

#[test]
fn sort_with_comparator() {
    let b = backend();
    let bld = b.builder("sort");
    let main = bld.main();
    let keys = main.parameter("keys", Shape::new(DType::Int32, &[6])).unwrap();
    let vals = main.parameter("vals", f32s(&[6])).unwrap();
    let m = main.parameter("m", Shape::new(DType::Int32, &[2, 3])).unwrap();
    // Sort (keys, vals) by keys, stable.
    let by_key = less_than_comparator(&main, &[DType::Int32, DType::Float32], 0);
    let s1 = main.sort(&by_key, 0, true, &[keys, vals]).unwrap();
    // Sort (keys, vals) by vals: the comparator reads lhs1/rhs1 (interleaved parameters).
    let by_val = less_than_comparator(&main, &[DType::Int32, DType::Float32], 1);
    let s2 = main.sort(&by_val, 0, true, &[keys, vals]).unwrap();
    // A 2-D operand sorted along the last axis (−1) and along axis 0.
    let cmp_i = less_than_comparator(&main, &[DType::Int32], 0);
    let rows = main.sort(&cmp_i, -1, true, &[m]).unwrap();
    let cmp_j = less_than_comparator(&main, &[DType::Int32], 0);
    let cols = main.sort(&cmp_j, 0, true, &[m]).unwrap();
    main.return_(&[s1[0], s1[1], s2[0], s2[1], rows[0], cols[0]]).unwrap();
    let exe = bld.compile().unwrap();

    let k = Buffer::from_slice(&[3i32, 1, 2, 1, 3, 0], &[6]).unwrap();
    let v = Buffer::from_slice(&[10.0f32, 20.0, 30.0, 40.0, 5.0, 60.0], &[6]).unwrap();
    let mb = Buffer::from_slice(&[3i32, 1, 2, 0, 7, -1], &[2, 3]).unwrap();
    let out = exe.execute(&[&k, &v, &mb], &[]).unwrap();
    // Stable by key: key 1 keeps (20, 40) order, key 3 keeps (10, 5).
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 1, 1, 2, 3, 3]);
    assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![60.0, 20.0, 40.0, 30.0, 10.0, 5.0]);
    // By value: 5, 10, 20, 30, 40, 60 with their keys 3, 3, 1, 2, 1, 0.
    assert_eq!(out[2].to_vec::<i32>().unwrap(), vec![3, 3, 1, 2, 1, 0]);
    assert_eq!(out[3].to_vec::<f32>().unwrap(), vec![5.0, 10.0, 20.0, 30.0, 40.0, 60.0]);
    // [[3,1,2],[0,7,-1]] rows sorted: [[1,2,3],[-1,0,7]]; columns sorted: [[0,1,-1],[3,7,2]].
    assert_eq!(out[4].to_vec::<i32>().unwrap(), vec![1, 2, 3, -1, 0, 7]);
    assert_eq!(out[5].to_vec::<i32>().unwrap(), vec![0, 1, -1, 3, 7, 2]);
}

#[test]
fn dynamic_axes_bind_at_execution() {
    let b = backend();
    let bld = b.builder("dynamic");
    let main = bld.main();
    let xs = Shape::with_names(DType::Float32, &[-1, 3], &["batch", ""]).unwrap();
    let x = main.parameter("x", xs).unwrap();
    let ys = Shape::with_names(DType::Float32, &[-1], &["batch"]).unwrap();
    let y = main.parameter("y", ys).unwrap();
    // A new dynamic axis introduced by a broadcast of a constant, sized by the binding.
    let c = main.scalar(0.5f32).unwrap();
    let cb = main.broadcast_in_dim(c, &Shape::with_names(DType::Float32, &[-1], &["batch"]).unwrap(), &[]).unwrap();
    let y2 = main.add(y, cb).unwrap();
    let yb =
        main.broadcast_in_dim(y2, &Shape::with_names(DType::Float32, &[-1, 3], &["batch", ""]).unwrap(), &[0]).unwrap();
    let s = main.add(x, yb).unwrap();
    let total = main.reduce_sum(s, &[0]).unwrap();
    let shape = main.dynamic_shape(s).unwrap();
    main.return_(&[s, total, shape]).unwrap();
    let exe = bld.compile().unwrap();
    assert!(exe.output_shapes()[0].is_dynamic());

    for batch in [1usize, 2, 4] {
        let xv: Vec<f32> = (0..batch * 3).map(|i| i as f32).collect();
        let yv: Vec<f32> = (0..batch).map(|i| 10.0 * i as f32).collect();
        let out = exe
            .execute(
                &[&Buffer::from_slice(&xv, &[batch, 3]).unwrap(), &Buffer::from_slice(&yv, &[batch]).unwrap()],
                &[],
            )
            .unwrap();
        assert_eq!(out[0].dims(), vec![batch, 3]);
        assert!(!out[0].shape().is_dynamic());
        let want: Vec<f32> = (0..batch * 3).map(|i| i as f32 + 10.0 * (i / 3) as f32 + 0.5).collect();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), want);
        let col = |j: usize| (0..batch).map(|r| want[r * 3 + j]).sum::<f32>();
        assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![col(0), col(1), col(2)]);
        assert_eq!(out[2].to_vec::<i32>().unwrap(), vec![batch as i32, 3]);
    }
    // Conflicting sizes for "batch": the error names the parameter and the axis.
    let e = exe
        .execute(
            &[&Buffer::from_slice(&[0.0f32; 6], &[2, 3]).unwrap(), &Buffer::from_slice(&[0.0f32; 3], &[3]).unwrap()],
            &[],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"y\"") && e.contains("batch"), "{e}");
}

#[test]
fn dynamic_reshape_with_runtime_sizes() {
    // Catalogue §7: I32 [batch, seq_len] → Dynamic{"num_tokens", batch·seq_len}.
    let b = backend();
    let bld = b.builder("dynreshape");
    let main = bld.main();
    let xs = Shape::with_names(DType::Int32, &[-1, -1], &["batch", "seq_len"]).unwrap();
    let x = main.parameter("x", xs).unwrap();
    let bsz = main.dynamic_dimension_size(x, 0).unwrap();
    let slen = main.dynamic_dimension_size(x, 1).unwrap();
    let n = main.mul(bsz, slen).unwrap();
    let flat = main.dynamic_reshape(x, &[ReshapeSpec::Dynamic { name: "num_tokens".into(), value: n }]).unwrap();
    let doubled = main.add(flat, flat).unwrap();
    main.return_(&[doubled]).unwrap();
    let exe = bld.compile().unwrap();
    for (bs, sl) in [(2usize, 3usize), (4, 2)] {
        let xv: Vec<i32> = (0..(bs * sl) as i32).collect();
        let out = exe.execute(&[&Buffer::from_slice(&xv, &[bs, sl]).unwrap()], &[]).unwrap();
        assert_eq!(out[0].dims(), vec![bs * sl]);
        assert_eq!(out[0].to_vec::<i32>().unwrap(), xv.iter().map(|v| v * 2).collect::<Vec<_>>());
    }
}

#[test]
fn barriers_and_single_device_all_reduce() {
    let b = backend();
    let bld = b.builder("barriers");
    let main = bld.main();
    let x = main.parameter("x", f32s(&[2])).unwrap();
    let y = main.parameter("y", Shape::new(DType::Int8, &[3])).unwrap();
    let ob = main.optimization_barrier(&[x, y]).unwrap();
    let sb = main.scheduling_barrier(ob[0], &[ob[1]]).unwrap();
    let ar = main.all_reduce(&[sb], ArithReduce::Sum, &[vec![0]]).unwrap();
    main.return_(&[ar[0], ob[1]]).unwrap();
    let exe = bld.compile().unwrap();
    let out = exe
        .execute(
            &[&Buffer::from_slice(&[1.5f32, -2.0], &[2]).unwrap(), &Buffer::from_slice(&[1i8, 2, 3], &[3]).unwrap()],
            &[],
        )
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
    assert_eq!(out[1].to_vec::<i8>().unwrap(), vec![1, 2, 3]);

    // A replica group spanning two devices cannot run on one.
    let bld = b.builder("allreduce2");
    let main = bld.main();
    let x = main.parameter("x", f32s(&[2])).unwrap();
    match main.all_reduce(&[x], ArithReduce::Sum, &[vec![0, 1]]) {
        Err(e) => assert!(e.to_string().contains("AllReduce"), "{e}"),
        Ok(r) => {
            main.return_(&[r[0]]).unwrap();
            let exe = bld.compile().unwrap();
            let e = exe.execute(&[&Buffer::from_slice(&[1.0f32, 2.0], &[2]).unwrap()], &[]).unwrap_err();
            assert!(e.is_not_implemented() && e.to_string().contains("AllReduce"), "{e}");
        }
    }
}

#[test]
fn hand_built_modules_are_verified_at_compile() {
    // A hand-built module (no builder checks): Add of f32[2] and f32[3] claiming an f32[2]
    // result. `Backend::compile` verifies what it is given, so it is rejected before any kernel
    // runs, naming the node and the op.
    let mut m = Module::new("bad");
    let main = m.main;
    let a = m.add_param(main, "a", f32s(&[2]));
    let c = m.add_param(main, "c", f32s(&[3]));
    let n = m.add_node(main, Op::Binary(BinaryOp::Add), vec![a, c], vec![f32s(&[2])]);
    let out = m.node(n).outputs[0];
    m.func_mut(main).outputs = Some(vec![out]);
    for b in [backend(), tensorjit::new_with_config("jit").unwrap()] {
        let e = b.compile(m.clone()).err().expect("an invalid module must not compile");
        assert!(matches!(e, tensorjit::Error::Verify(_)), "{e}");
        let e = e.to_string();
        assert!(e.contains("add") && e.contains("dimension 2 of lhs and 3 of rhs"), "{e}");
    }
}

#[test]
fn constants_and_unused_values() {
    let b = backend();
    let bld = b.builder("consts");
    let main = bld.main();
    let x = main.parameter("x", f32s(&[2, 2])).unwrap();
    let _unused = main.parameter("unused", f32s(&[1])).unwrap();
    let c = main.constant(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let _dead = main.mul(x, x).unwrap();
    let s = main.sub(x, c).unwrap();
    main.return_(&[s]).unwrap();
    let exe = bld.compile().unwrap();
    let out = exe
        .execute(
            &[
                &Buffer::from_slice(&[10.0f32, 20.0, 30.0, 40.0], &[2, 2]).unwrap(),
                &Buffer::from_slice(&[0.0f32], &[1]).unwrap(),
            ],
            &[],
        )
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![9.0, 18.0, 27.0, 36.0]);
    assert_eq!(out[0].dims(), vec![2, 2]);
}

#[test]
fn dynamic_concat_reshape_iota_and_loops() {
    let b = backend();
    let bld = b.builder("dyn_more");
    // A named function with a dynamic parameter (its axis names are bound at each call).
    let twice = bld.new_function("twice").unwrap();
    let p = twice.parameter("v", Shape::with_names(DType::Int32, &[-1], &["batch"]).unwrap()).unwrap();
    let pp = twice.add(p, p).unwrap();
    twice.return_(&[pp]).unwrap();

    let main = bld.main();
    let xs = Shape::with_names(DType::Float32, &[-1, 2], &["batch", ""]).unwrap();
    let x = main.parameter("x", xs).unwrap();
    // Concatenating along the dynamic axis: size batch + batch.
    let cat = main.concatenate(0, &[x, x]).unwrap();
    // Reshape keeping the dynamic axis: [batch, 2] → [batch, 2, 1].
    let r = main.reshape(x, &[-1, 2, 1]).unwrap();
    // Iota over the dynamic axis.
    let io = main.iota(&Shape::with_names(DType::Int32, &[-1], &["batch"]).unwrap(), 0).unwrap();
    // A While loop whose state has the dynamic axis: doubles x three times.
    let zero = main.scalar(0i32).unwrap();
    let cond = main.closure().unwrap();
    let ci = cond.parameter("i", Shape::scalar(DType::Int32)).unwrap();
    let _cs = cond.parameter("s", main.shape(x).unwrap()).unwrap();
    let three = cond.scalar(3i32).unwrap();
    let lt = cond.less_than(ci, three).unwrap();
    cond.return_(&[lt]).unwrap();
    let body = main.closure().unwrap();
    let bi = body.parameter("i", Shape::scalar(DType::Int32)).unwrap();
    let bs = body.parameter("s", main.shape(x).unwrap()).unwrap();
    let one = body.scalar(1i32).unwrap();
    let bi1 = body.add(bi, one).unwrap();
    let bs2 = body.add(bs, bs).unwrap();
    body.return_(&[bi1, bs2]).unwrap();
    let st = main.while_(&cond, &body, &[zero, x]).unwrap();
    let c = main.call(&twice, &[io]).unwrap();
    let outs = vec![cat, r, io, st[1], c[0]];
    main.return_(&outs).unwrap();
    let exe = bld.compile().unwrap();

    for batch in [1usize, 3] {
        let xv: Vec<f32> = (0..batch * 2).map(|i| i as f32 + 1.0).collect();
        let out = exe.execute(&[&Buffer::from_slice(&xv, &[batch, 2]).unwrap()], &[]).unwrap();
        assert_eq!(out[0].dims(), vec![2 * batch, 2]);
        assert_eq!(out[0].to_vec::<f32>().unwrap(), [xv.clone(), xv.clone()].concat());
        assert_eq!(out[1].dims(), vec![batch, 2, 1]);
        assert_eq!(out[1].to_vec::<f32>().unwrap(), xv);
        assert_eq!(out[2].to_vec::<i32>().unwrap(), (0..batch as i32).collect::<Vec<_>>());
        assert_eq!(out[3].to_vec::<f32>().unwrap(), xv.iter().map(|v| v * 8.0).collect::<Vec<_>>());
        assert_eq!(out[4].to_vec::<i32>().unwrap(), (0..batch as i32).map(|v| 2 * v).collect::<Vec<_>>());
    }
}
