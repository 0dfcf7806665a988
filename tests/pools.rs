//! The process-wide pools: the shared thread pool (every backend and executable on one pool by
//! default; a backend with its own pool of N threads; the size from `TENSORJIT_THREADS` or
//! `set_shared_pool_threads`, checked in child processes) and the buffer pool's statistics and
//! cap (`memory::pool_stats`, `set_pool_cap`, least-recently-returned eviction, 0 disables).
//!
//! Both pools are process-wide, so the tests of this file take one lock and run one at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use tensorjit::backends::jit::{JitBackend, JitExecutable, JitOptions};
use tensorjit::ir::text::parse_module;
use tensorjit::memory::{self, ALIGN, AlignedBytes, POOL_MIN_BYTES};
use tensorjit::threads;
use tensorjit::{Backend, Buffer, Executable};

fn lock() -> MutexGuard<'static, ()> {
    static L: Mutex<()> = Mutex::new(());
    L.lock().unwrap_or_else(|e| e.into_inner())
}

/// Elements of the loop test: above the jit's parallel threshold.
const N: usize = 1 << 17;

/// `exp(x) * x` over N elements, and a 128³ GEMM: both split across the pool.
fn module() -> tensorjit::ir::module::Module {
    let text = format!(
        r#"
module @par
func @main(%0 "x": f32[{N}], %1 "a": f32[128,128]) {{
  %2 = exp %0 : f32[{N}]
  %3 = mul %2, %0 : f32[{N}]
  %4 = dot_general %1, %1, lhs_contracting=[1], lhs_batch=[], rhs_contracting=[0], rhs_batch=[] : f32[128,128]
  return %3, %4
}}
"#
    );
    parse_module(&text).unwrap_or_else(|e| panic!("{e}"))
}

fn inputs() -> (Buffer, Buffer) {
    let x: Vec<f32> = (0..N).map(|i| (i % 97) as f32 / 50.0 - 1.0).collect();
    let a: Vec<f32> = (0..128 * 128).map(|i| (i % 13) as f32 / 8.0 - 0.75).collect();
    (Buffer::from_slice(&x, &[N]).unwrap(), Buffer::from_slice(&a, &[128, 128]).unwrap())
}

/// Runs `e` and checks its outputs against the interpreter's.
fn check(e: &dyn Executable) {
    let (x, a) = inputs();
    let got = e.execute(&[&x, &a], &[]).unwrap();
    let interp = tensorjit::new_with_config("interp").unwrap().compile(module()).unwrap();
    let want = interp.execute(&[&x, &a], &[]).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
        for (i, (g, w)) in g.iter().zip(&w).enumerate() {
            assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "element {i}: {g} vs {w}");
        }
    }
}

fn compile(b: &Arc<JitBackend>) -> JitExecutable {
    b.compile_jit(module()).unwrap()
}

#[test]
fn backends_and_executables_share_one_pool_by_default() {
    let _g = lock();
    let shared = threads::shared_pool().unwrap();
    let before = threads::stats();
    let a = JitBackend::new("").unwrap();
    let b = JitBackend::with_options(JitOptions::default()).unwrap();
    let c = JitBackend::new("parallelism=shared").unwrap();
    for backend in [&a, &b, &c] {
        let p = backend.thread_pool().unwrap().expect("a pool");
        assert!(Arc::ptr_eq(&p, &shared), "every default backend runs on the shared pool");
        assert_eq!(backend.parallelism(), shared.current_num_threads());
        assert!(backend.description().contains("shared pool"), "{}", backend.description());
    }
    let exes: Vec<JitExecutable> = (0..12).map(|i| compile([&a, &b, &c][i % 3])).collect();
    for e in &exes {
        assert!(Arc::ptr_eq(&e.thread_pool().expect("a pool"), &shared));
    }
    for e in exes.iter().take(3) {
        check(e);
    }
    // Also through the registry and the dyn API.
    let d = tensorjit::new().unwrap();
    check(&*d.compile(module()).unwrap());
    let after = threads::stats();
    assert_eq!(after.own_pools_started, before.own_pools_started, "no backend started a pool of its own");
    assert!(after.shared_started);
    assert_eq!(after.shared_threads, shared.current_num_threads());
    assert_eq!(threads::shared_pool_threads().unwrap(), shared.current_num_threads());
}

#[test]
fn a_backend_can_have_its_own_pool() {
    let _g = lock();
    let shared = threads::shared_pool().unwrap();
    let before = threads::stats();
    let own = JitBackend::with_options(JitOptions::default().parallelism(3)).unwrap();
    assert_eq!(own.parallelism(), 3);
    assert!(own.description().contains("own pool"), "{}", own.description());
    let p = own.thread_pool().unwrap().expect("its own pool");
    assert_eq!(p.current_num_threads(), 3);
    assert!(!Arc::ptr_eq(&p, &shared));
    assert!(Arc::ptr_eq(&p, &own.thread_pool().unwrap().unwrap()), "started once per backend");
    let e1 = compile(&own);
    let e2 = compile(&own);
    assert!(Arc::ptr_eq(&e1.thread_pool().unwrap(), &p) && Arc::ptr_eq(&e2.thread_pool().unwrap(), &p));
    check(&e1);
    check(&e2);
    let after = threads::stats();
    assert_eq!(after.own_pools_started, before.own_pools_started + 1);
    assert_eq!(after.own_threads_started, before.own_threads_started + 3);
    // One thread: no pool at all, every execution on the calling thread.
    let single = JitBackend::new("parallelism=1").unwrap();
    assert!(single.thread_pool().unwrap().is_none());
    let e = compile(&single);
    assert!(e.thread_pool().is_none());
    check(&e);
    // The pool of a backend created from a config string through the registry works too.
    let r = tensorjit::new_with_config("jit:parallelism=2").unwrap();
    check(&*r.compile(module()).unwrap());
}

/// Runs test `name` of this binary in a child process with `env` (and `TJ_POOLS_CHILD=1`).
fn child(name: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env("TJ_POOLS_CHILD", "1")
        .env_remove("TENSORJIT_THREADS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run child");
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && so.contains("1 passed"), "child {name} {env:?} failed:\n{so}\n{se}");
    so
}

fn in_child() -> bool {
    std::env::var_os("TJ_POOLS_CHILD").is_some()
}

/// Child: the shared pool's size, from `TENSORJIT_THREADS` or (with `TJ_SET_THREADS`) from
/// `set_shared_pool_threads` before first use.
#[test]
fn child_shared_pool_size() {
    if !in_child() {
        return;
    }
    if let Ok(n) = std::env::var("TJ_SET_THREADS") {
        threads::set_shared_pool_threads(n.parse().unwrap()).unwrap();
    }
    assert!(!threads::stats().shared_started);
    let b = JitBackend::new("").unwrap();
    let e = compile(&b);
    check(&e);
    let p = e.thread_pool().unwrap();
    assert!(threads::stats().shared_started);
    // Resizing after the start is refused.
    let other = p.current_num_threads() + 1;
    assert!(threads::set_shared_pool_threads(other).is_err());
    println!("shared={} parallelism={}", p.current_num_threads(), b.parallelism());
}

#[test]
fn shared_pool_size_is_configurable() {
    if in_child() {
        return;
    }
    assert!(child("child_shared_pool_size", &[("TENSORJIT_THREADS", "3")]).contains("shared=3 parallelism=3"));
    assert!(child("child_shared_pool_size", &[("TJ_SET_THREADS", "2")]).contains("shared=2 parallelism=2"));
    assert!(
        child("child_shared_pool_size", &[("TENSORJIT_THREADS", "3"), ("TJ_SET_THREADS", "1")])
            .contains("shared=1 parallelism=1"),
        "the setter wins over the environment"
    );
}

/// Bytes the pool accounts for an allocation of `len` bytes.
fn rounded(len: usize) -> usize {
    len.div_ceil(ALIGN) * ALIGN
}

#[test]
fn memory_pool_statistics() {
    let _g = lock();
    let prev = memory::set_pool_cap(64 << 20);
    memory::release_pool();
    memory::reset_pool_stats();
    let s = memory::pool_stats();
    assert_eq!((s.held_bytes, s.held_buffers, s.hits, s.misses, s.returned, s.evictions), (0, 0, 0, 0, 0, 0));
    assert_eq!(s.cap_bytes, 64 << 20);

    let len = POOL_MIN_BYTES * 5 + 3 * ALIGN + 7;
    let a = AlignedBytes::zeroed(len);
    assert_eq!(memory::pool_stats().misses, 1, "nothing of that size was free");
    drop(a);
    let s = memory::pool_stats();
    assert_eq!((s.returned, s.held_buffers, s.held_bytes), (1, 1, rounded(len)));
    assert_eq!(s.peak_held_bytes, rounded(len));
    assert_eq!(memory::pooled_bytes(), rounded(len));
    let b = AlignedBytes::try_recycled(len).unwrap();
    let s = memory::pool_stats();
    assert_eq!((s.hits, s.misses, s.held_bytes, s.held_buffers), (1, 1, 0, 0));
    assert_eq!(s.peak_held_bytes, rounded(len), "the peak stays");
    drop(b);
    // Small allocations and copies of caller data bypass the pool.
    drop(AlignedBytes::zeroed(POOL_MIN_BYTES - 64));
    drop(AlignedBytes::from_slice(&vec![1u8; POOL_MIN_BYTES * 2]));
    let s = memory::pool_stats();
    assert_eq!((s.hits, s.misses, s.returned), (1, 1, 2));

    // Executions on both backends reuse their output buffers through the pool.
    for config in ["jit", "jit:parallelism=1", "interp"] {
        let e = tensorjit::new_with_config(config).unwrap().compile(module()).unwrap();
        let (x, a) = inputs();
        drop(e.execute(&[&x, &a], &[]).unwrap());
        let hits = memory::pool_stats().hits;
        drop(e.execute(&[&x, &a], &[]).unwrap());
        assert!(memory::pool_stats().hits > hits, "{config}: the second run reused buffers");
    }
    memory::release_pool();
    memory::set_pool_cap(prev);
}

#[test]
fn memory_pool_cap_evicts_least_recently_returned() {
    let _g = lock();
    let unit = POOL_MIN_BYTES * 2 + 5 * ALIGN;
    let prev = memory::set_pool_cap(3 * unit);
    memory::release_pool();
    memory::reset_pool_stats();
    let bufs: Vec<AlignedBytes> = (0..4).map(|_| AlignedBytes::zeroed(unit)).collect();
    let ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
    drop(bufs); // returned in order 0, 1, 2, 3: the fourth evicts the first
    let s = memory::pool_stats();
    assert_eq!((s.returned, s.evictions, s.evicted_bytes), (4, 1, unit as u64));
    assert_eq!((s.held_buffers, s.held_bytes), (3, 3 * unit));
    assert_eq!(s.peak_held_bytes, 3 * unit);
    let again: Vec<AlignedBytes> = (0..3).map(|_| AlignedBytes::recycled(unit)).collect();
    let got: HashSet<*const u8> = again.iter().map(|b| b.as_ptr()).collect();
    assert_eq!(got, ptrs[1..].iter().copied().collect::<HashSet<_>>(), "the three most recent were kept");
    assert_eq!(memory::pool_stats().hits, 3);

    // A buffer larger than the whole cap is freed at once.
    drop(AlignedBytes::zeroed(4 * unit));
    assert_eq!(memory::pool_stats().over_cap, 1);

    // Lowering the cap evicts at once.
    drop(again);
    assert_eq!(memory::pool_stats().held_bytes, 3 * unit);
    assert_eq!(memory::set_pool_cap(unit + 1), 3 * unit);
    let s = memory::pool_stats();
    assert_eq!((s.held_buffers, s.held_bytes, s.evictions), (1, unit, 3));
    assert_eq!(memory::pool_cap(), unit + 1);

    // Cap 0: nothing held, nothing pooled, no misses counted.
    memory::set_pool_cap(0);
    let s = memory::pool_stats();
    assert_eq!((s.held_bytes, s.held_buffers, s.cap_bytes), (0, 0, 0));
    let misses = s.misses;
    drop(AlignedBytes::zeroed(unit));
    let b = AlignedBytes::recycled(unit);
    let s = memory::pool_stats();
    assert_eq!((s.held_bytes, s.hits, s.misses, s.over_cap), (0, 3, misses, 2));
    drop(b);
    // Executions still work without a pool.
    let e = JitBackend::new("").unwrap();
    check(&compile(&e));
    assert_eq!(memory::pool_stats().held_bytes, 0);

    memory::set_pool_cap(prev);
    memory::reset_pool_stats();
    assert_eq!(memory::pool_stats().hits, 0);
}
