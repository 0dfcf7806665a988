//! Control over hostile or long runs on both backends ("interp" and "jit"): a `while` that never
//! ends is stopped by a deadline, by a `CancelToken` from another thread and by the
//! `while_limit` option, and the executable stays usable; `parallelism` is bounded; closure
//! constants survive repeated runs; complex tanh near its poles; dead and zero-sized
//! `dynamic_reshape`; bounded error messages through deep nesting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use num_complex::{Complex32, Complex64};
use tensorjit::ir::text::parse_module;
use tensorjit::ir::verify::verify;
use tensorjit::{Backend, Buffer, CancelToken, Error, ExecOptions, Executable};

const BACKENDS: &[&str] = &["interp", "jit"];

/// Generous bound for a run that must stop (the runs themselves stop after ~50 ms).
const STOP_BOUND: Duration = Duration::from_secs(5);

fn compile(config: &str, text: &str) -> Arc<dyn Executable> {
    let b: Arc<dyn Backend> = tensorjit::new_with_config(config).unwrap_or_else(|e| panic!("{config}: {e}"));
    let m = parse_module(text).unwrap_or_else(|e| panic!("parse: {e}"));
    verify(&m).unwrap_or_else(|e| panic!("verify: {e}"));
    b.compile(m).unwrap_or_else(|e| panic!("{config}: compile: {e}"))
}

fn i32s(v: i32) -> Buffer {
    Buffer::from_slice(&[v], &[]).unwrap()
}

/// `while x < n: x += 1`, returning x: with n = i32::MAX it runs for ~2³¹ iterations.
const COUNT_TO_N: &str = r#"
module @count
func @main(%0 "x": i32[], %1 "n": i32[]) {
  %2 = while %0, cond=@1, body=@2 : i32[]
  return %2
}
closure @1(%3: i32[]) parent=@main {
  %4 = less_than %3, %1 : bool[]
  return %4
}
closure @2(%5: i32[]) parent=@main {
  %6 = constant 1 : i32[]
  %7 = add %5, %6 : i32[]
  return %7
}
"#;

/// A normal run after a stopped one gives the right result (0 counted up to 5).
fn still_usable(exe: &dyn Executable, config: &str) {
    let out = exe.execute(&[&i32s(0), &i32s(5)], &[]).unwrap_or_else(|e| panic!("{config}: rerun: {e}"));
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![5], "{config}");
}

#[test]
fn endless_while_stopped_by_deadline() {
    for &config in BACKENDS {
        let exe = compile(config, COUNT_TO_N);
        let start = Instant::now();
        let r =
            exe.execute_with(&[&i32s(0), &i32s(i32::MAX)], &[], &ExecOptions::with_timeout(Duration::from_millis(50)));
        let took = start.elapsed();
        assert!(matches!(r, Err(Error::DeadlineExceeded)), "{config}: {:?}", r.map(|_| ()));
        assert!(took < STOP_BOUND, "{config}: stopped after {took:?}");
        still_usable(&*exe, config);
    }
}

#[test]
fn endless_while_stopped_by_cancel_from_another_thread() {
    for &config in BACKENDS {
        let exe = compile(config, COUNT_TO_N);
        let token = CancelToken::new();
        let remote = token.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            remote.cancel();
        });
        // The deadline only keeps a broken cancellation from hanging the test.
        let opts = ExecOptions {
            deadline: Instant::now().checked_add(Duration::from_secs(30)),
            cancel: Some(token),
            ..ExecOptions::default()
        };
        let start = Instant::now();
        let r = exe.execute_with(&[&i32s(0), &i32s(i32::MAX)], &[], &opts);
        let took = start.elapsed();
        canceller.join().unwrap();
        assert!(matches!(r, Err(Error::Cancelled)), "{config}: {:?}", r.map(|_| ()));
        assert!(took < STOP_BOUND, "{config}: stopped after {took:?}");
        still_usable(&*exe, config);
    }
}

#[test]
fn options_already_expired_stop_straight_line_code() {
    let text = r#"
module @sq
func @main(%0 "x": f32[3]) {
  %1 = mul %0, %0 : f32[3]
  return %1
}
"#;
    for &config in BACKENDS {
        let exe = compile(config, text);
        let x = Buffer::from_slice(&[1f32, -2.0, 0.5], &[3]).unwrap();
        let token = CancelToken::new();
        token.cancel();
        let r = exe.execute_with(&[&x], &[], &ExecOptions { cancel: Some(token), ..ExecOptions::default() });
        assert!(matches!(r, Err(Error::Cancelled)), "{config}: {:?}", r.map(|_| ()));
        let past = ExecOptions { deadline: Some(Instant::now()), ..ExecOptions::default() };
        let r = exe.execute_with(&[&x], &[], &past);
        assert!(matches!(r, Err(Error::DeadlineExceeded)), "{config}: {:?}", r.map(|_| ()));
        // Unexpired options change nothing: 1, 4, 0.25.
        let out = exe.execute_with(&[&x], &[], &ExecOptions::with_timeout(Duration::from_secs(60))).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![1.0, 4.0, 0.25], "{config}");
    }
}

#[test]
fn while_limit_caps_iterations() {
    for config in ["interp:while_limit=10", "jit:while_limit=10"] {
        let exe = compile(config, COUNT_TO_N);
        // Endless: stopped at the 11th iteration.
        let start = Instant::now();
        match exe.execute(&[&i32s(0), &i32s(i32::MAX)], &[]) {
            Err(Error::Limit { what, msg }) => {
                assert!(what.contains("while") && what.contains("node"), "{config}: {what}");
                assert!(msg.contains("10"), "{config}: {msg}");
            }
            r => panic!("{config}: expected a limit error, got {:?}", r.map(|_| ())),
        }
        assert!(start.elapsed() < STOP_BOUND, "{config}");
        // Exactly 10 iterations are allowed: 0 → 10; 11 are not.
        let out = exe.execute(&[&i32s(0), &i32s(10)], &[]).unwrap();
        assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![10], "{config}");
        assert!(matches!(exe.execute(&[&i32s(0), &i32s(11)], &[]), Err(Error::Limit { .. })), "{config}");
        still_usable(&*exe, config);
    }
    for config in ["interp:while_limit", "jit:while_limit=-3", "jit:while_limit=many"] {
        assert!(matches!(tensorjit::new_with_config(config), Err(Error::Config(_))), "{config}");
    }
}

#[test]
fn parallelism_is_bounded() {
    for config in ["jit:parallelism=100000", "interp:parallelism=100000", "jit:parallelism=1025"] {
        match tensorjit::new_with_config(config) {
            Err(Error::Config(msg)) => assert!(msg.contains("parallelism") && msg.contains("1024"), "{msg}"),
            r => panic!("{config}: expected a config error, got {:?}", r.map(|b| b.name().to_string())),
        }
    }
    assert!(tensorjit::new_with_config("jit:parallelism=1024").is_ok());
    assert!(tensorjit::new_with_config("interp:parallelism=1024").is_ok());
}

#[test]
fn while_body_returning_its_own_constant() {
    // i counts 0 → 3; v is replaced by the body's constant [7, −1] at every iteration.
    let text = r#"
module @wconst
func @main(%0 "v": f32[2]) {
  %1 = constant 0 : i32[]
  %2, %3 = while %1, %0, cond=@1, body=@2 : i32[], f32[2]
  return %2, %3
}
closure @1(%4: i32[], %5: f32[2]) parent=@main {
  %6 = constant 3 : i32[]
  %7 = less_than %4, %6 : bool[]
  return %7
}
closure @2(%8: i32[], %9: f32[2]) parent=@main {
  %10 = constant 1 : i32[]
  %11 = add %8, %10 : i32[]
  %12 = constant [7, -1] : f32[2]
  return %11, %12
}
"#;
    for config in ["interp", "jit", "jit:while_limit=10", "jit:fusion=off"] {
        let exe = compile(config, text);
        for _ in 0..2 {
            let v = Buffer::from_slice(&[0.5f32, 0.25], &[2]).unwrap();
            let out = exe.execute(&[&v], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
            assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![3], "{config}");
            assert_eq!(out[1].to_vec::<f32>().unwrap(), vec![7.0, -1.0], "{config}");
        }
    }
}

#[test]
fn sort_comparator_returning_constant_false() {
    // No element is less than another: a stable sort keeps the input order.
    let text = r#"
module @sconst
func @main(%0 "x": f32[5]) {
  %1 = sort %0, comparator=@1, axis=0, stable=true : f32[5]
  return %1
}
closure @1(%2: f32[], %3: f32[]) parent=@main {
  %4 = constant false : bool[]
  return %4
}
"#;
    for &config in BACKENDS {
        let exe = compile(config, text);
        for _ in 0..2 {
            let x = Buffer::from_slice(&[3f32, 1.0, 2.0, -4.0, 0.5], &[5]).unwrap();
            let out = exe.execute(&[&x], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
            assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![3.0, 1.0, 2.0, -4.0, 0.5], "{config}");
        }
    }
}

/// Distance in units in the last place between two finite f32 (zeros of either sign are 0).
fn ulps32(a: f32, b: f32) -> u64 {
    let k = |v: f32| if v.is_sign_negative() { -i64::from((-v).to_bits()) } else { i64::from(v.to_bits()) };
    k(a).abs_diff(k(b))
}

fn ulps64(a: f64, b: f64) -> u64 {
    let k = |v: f64| if v.is_sign_negative() { -((-v).to_bits() as i128) } else { v.to_bits() as i128 };
    (k(a) - k(b)).unsigned_abs() as u64
}

/// ((x, y), (re, im)): tanh(x + iy) = re + i·im.
type Case<T> = ((T, T), (T, T));

#[test]
#[allow(clippy::approx_constant, reason = "inputs next to π/2 and 3π/2 on purpose, not π/2 itself")]
fn complex_tanh_near_the_poles() {
    // References: mpmath.tanh at 60 digits on the exact inputs (the f32 inputs widened), rounded
    // to f32 (complex64) or f64 (complex128). 1.5707964 is the f32 nearest π/2.
    let c64: &[Case<f32>] = &[
        ((0.0, 1.5707964), (0.0, -22877332.0)),
        ((1e-7, 1.5707964), (8395822.0, -3669930.5)),
        ((-3e-6, 1.5707963), (-333122.34, 8383.346)),
        ((0.001, -1.5707964), (1000.0003, 0.04371137)),
        ((2e-5, 1.5707965), (49996.684, -407.2747)),
        ((0.0, 4.712389), (0.0, -83858280.0)),
        ((0.5, 0.25), (0.48548728, 0.19805545)),
        ((30.0, 1.0), (1.0, 1.5924546e-26)),
        ((-0.0001, 1.570796), (-9999.901, 31.39134)),
        ((4e-8, -1.5707963), (5479502.5, -10342273.0)),
    ];
    let c128: &[Case<f64>] = &[
        ((0.0, 1.5707963267948966), (0.0, 1.633123935319537e+16)),
        ((1e-17, 1.5707963267948966), (2597807817194060.0, 1.5906985140633388e+16)),
        ((1e-09, 1.5707963267948963), (999999999.9999197, 283.2769448823762)),
        ((-2e-12, -1.5707963267948966), (-499999999531.3251, -15308084.974992884)),
        ((0.5, 0.25), (0.48548728102413535, 0.19805544995134952)),
        ((400.0, 1.0), (1.0, 0.0)),
        ((-1e-300, 1.5707963267948966), (-2.6670937881135714e-268, 1.633123935319537e+16)),
    ];
    let n64 = c64.len();
    let n128 = c128.len();
    let text = format!(
        "module @ctanh\nfunc @main(%0 \"a\": c64[{n64}], %1 \"b\": c128[{n128}]) {{\n  %2 = tanh %0 : c64[{n64}]\n  \
         %3 = tanh %1 : c128[{n128}]\n  return %2, %3\n}}\n"
    );
    for &config in BACKENDS {
        let exe = compile(config, &text);
        let a: Vec<Complex32> = c64.iter().map(|&((x, y), _)| Complex32::new(x, y)).collect();
        let b: Vec<Complex64> = c128.iter().map(|&((x, y), _)| Complex64::new(x, y)).collect();
        let a = Buffer::from_slice(&a, &[n64]).unwrap();
        let b = Buffer::from_slice(&b, &[n128]).unwrap();
        let out = exe.execute(&[&a, &b], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
        for (got, &(z, (re, im))) in out[0].to_vec::<Complex32>().unwrap().iter().zip(c64) {
            // Computed in f64 and rounded once: within 1 f32 ulp per part.
            assert!(
                ulps32(got.re, re) <= 1 && ulps32(got.im, im) <= 1,
                "{config}: tanh{z:?} = {got}, want {re} + {im}i"
            );
        }
        for (got, &(z, (re, im))) in out[1].to_vec::<Complex64>().unwrap().iter().zip(c128) {
            assert!(
                ulps64(got.re, re) <= 4 && ulps64(got.im, im) <= 4,
                "{config}: tanh{z:?} = {got}, want {re} + {im}i"
            );
        }
    }
}

#[test]
fn dead_dynamic_reshape_is_not_run() {
    // %2 would reshape 4 elements to [n, 2]; with n = 7 it fails, but nothing reads it (nor %3).
    let text = r#"
module @dead
func @main(%0 "x": f32[4], %1 "n": i32[]) {
  %2 = dynamic_reshape %0, %1, specs=[rows=?,2] : f32[rows=?,2]
  %3 = exp %2 : f32[rows=?,2]
  %4 = add %0, %0 : f32[4]
  return %4
}
"#;
    let live = r#"
module @live
func @main(%0 "x": f32[4], %1 "n": i32[]) {
  %2 = dynamic_reshape %0, %1, specs=[rows=?,2] : f32[rows=?,2]
  %3 = reduce_sum %2, axes=[0,1] : f32[]
  return %3
}
"#;
    for &config in BACKENDS {
        let exe = compile(config, text);
        let x = Buffer::from_slice(&[1f32, 2.0, 3.0, -4.0], &[4]).unwrap();
        let out = exe.execute(&[&x, &i32s(7)], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, -8.0], "{config}");
        // When its result is used, the same bad size is still an error naming the op.
        let exe = compile(config, live);
        let e = exe.execute(&[&x, &i32s(7)], &[]).err().unwrap_or_else(|| panic!("{config}: no error"));
        assert!(e.to_string().contains("DynamicReshape"), "{config}: {e}");
        // 1 + 2 + 3 − 4 = 2 with a valid size.
        let out = exe.execute(&[&x, &i32s(2)], &[]).unwrap();
        assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0], "{config}");
    }
}

#[test]
fn zero_sized_dynamic_reshape() {
    let text = r#"
module @zero
func @main(%0 "x": f32[0,4], %1 "n": i32[]) {
  %2 = dynamic_reshape %0, %1, specs=[rows=?,2] : f32[rows=?,2]
  %3 = reduce_sum %2, axes=[1] : f32[rows=?]
  return %2, %3
}
"#;
    for &config in BACKENDS {
        let exe = compile(config, text);
        let x = Buffer::from_slice::<f32>(&[], &[0, 4]).unwrap();
        let out = exe.execute(&[&x, &i32s(0)], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
        assert_eq!(out[0].dims(), vec![0, 2], "{config}");
        assert_eq!(out[1].dims(), vec![0], "{config}");
        assert!(out[0].to_vec::<f32>().unwrap().is_empty());
        // A negative size is still rejected, naming the op.
        let e = exe.execute(&[&x, &i32s(-1)], &[]).err().unwrap_or_else(|| panic!("{config}: no error"));
        assert!(e.to_string().contains("DynamicReshape"), "{config}: {e}");
    }
}

/// `depth` nested `if`s (all taking `p`); the innermost then-branch reshapes x to [n, 2].
fn nested_ifs(depth: usize) -> String {
    let mut t = String::from(
        "module @deep\nfunc @main(%0 \"x\": f32[4], %1 \"n\": i32[], %2 \"p\": bool[]) {\n  \
         %3 = if %2, then_branch=@1, else_branch=@2 : f32[]\n  return %3\n}\n",
    );
    let mut v = 4;
    for level in 1..=depth {
        let (then_c, else_c) = (2 * level - 1, 2 * level);
        let parent = if level == 1 { "@main".to_string() } else { format!("@{}", 2 * level - 3) };
        if level < depth {
            t += &format!(
                "closure @{then_c}() parent={parent} {{\n  %{v} = if %2, then_branch=@{}, else_branch=@{} : f32[]\n  \
                 return %{v}\n}}\n",
                2 * level + 1,
                2 * level + 2
            );
            v += 1;
        } else {
            t += &format!(
                "closure @{then_c}() parent={parent} {{\n  %{v} = dynamic_reshape %0, %1, specs=[rows=?,2] : \
                 f32[rows=?,2]\n  %{} = reduce_sum %{v}, axes=[0,1] : f32[]\n  return %{}\n}}\n",
                v + 1,
                v + 1
            );
            v += 2;
        }
        t += &format!(
            "closure @{else_c}() parent={parent} {{\n  %{v} = reduce_sum %0, axes=[0] : f32[]\n  return %{v}\n}}\n"
        );
        v += 1;
    }
    t
}

#[test]
fn error_through_deep_nesting_stays_short() {
    const DEPTH: usize = 150;
    // Deep recursion in the passes and executors: run with a generous stack.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(|| {
            let text = nested_ifs(DEPTH);
            let x = Buffer::from_slice(&[1f32, 2.0, 3.0, -4.0], &[4]).unwrap();
            let yes = Buffer::from_slice(&[true], &[]).unwrap();
            let no = Buffer::from_slice(&[false], &[]).unwrap();
            for &config in BACKENDS {
                let exe = compile(config, &text);
                // p false: the first else-branch, sum(x) = 2.
                let out = exe.execute(&[&x, &i32s(7), &no], &[]).unwrap_or_else(|e| panic!("{config}: {e}"));
                assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0], "{config}");
                // p true: down to the innermost branch, whose reshape to [7, 2] fails.
                let e = exe.execute(&[&x, &i32s(7), &yes], &[]).err().unwrap_or_else(|| panic!("{config}: no error"));
                let msg = e.to_string();
                assert!(msg.len() < 600, "{config}: {} bytes: {msg}", msg.len());
                assert!(msg.contains("cannot reshape"), "{config}: {msg}");
                assert!(msg.contains(&format!("{DEPTH} levels below main")), "{config}: {msg}");
                assert!(msg.contains("in main"), "{config}: outermost location: {msg}");
                // Still usable, and the innermost branch works with a valid size: 2.
                let out = exe.execute(&[&x, &i32s(2), &yes], &[]).unwrap();
                assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![2.0], "{config}");
            }
        })
        .unwrap()
        .join()
        .unwrap();
}
