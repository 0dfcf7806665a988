//! The thread pools that run the parallel parts of executions (loops over large tensors, GEMM,
//! the fused kernels).
//!
//! By default every backend of the process runs on one shared pool ([`shared_pool`]), created at
//! first use with [`shared_pool_threads`] threads (`TENSORJIT_THREADS`, else the number of
//! cores, at most [`MAX_THREADS`]), so two backends, or many executables, never oversubscribe
//! the cores. A backend may instead be given a pool of its own (`parallelism=N`,
//! [`Threads::Own`]); the kernels always split their work for the pool they run in.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rayon::ThreadPool;

use crate::config::{check_threads, option_error};
use crate::error::{Error, Result};
use crate::limits::MAX_THREADS;

pub use crate::env::THREADS_ENV;

/// Which threads a backend runs on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Threads {
    /// The process-wide pool ([`shared_pool`]), shared with every other backend using it.
    #[default]
    Shared,
    /// A pool of the backend's own with this many threads (1 to [`MAX_THREADS`]; 1 runs every
    /// execution on the calling thread, without a pool). Written `parallelism=N` in a config.
    Own(usize),
}

impl std::fmt::Display for Threads {
    /// The config-string value: `shared` or the thread count.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Threads::Shared => f.write_str("shared"),
            Threads::Own(n) => write!(f, "{n}"),
        }
    }
}

/// Counters of the pools tensorjit started in this process.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadPoolStats {
    /// Threads of the shared pool: its size if started, else the size it will have.
    pub shared_threads: usize,
    /// Whether the shared pool has been started.
    pub shared_started: bool,
    /// Pools started for backends with a pool of their own (ever, not only alive ones).
    pub own_pools_started: usize,
    /// Threads of those pools, summed.
    pub own_threads_started: usize,
}

struct Shared {
    pool: Option<Arc<ThreadPool>>,
    /// Size set by [`set_shared_pool_threads`] (0: not set).
    size: usize,
}

fn shared() -> &'static Mutex<Shared> {
    static SHARED: Mutex<Shared> = Mutex::new(Shared { pool: None, size: 0 });
    &SHARED
}

static OWN_POOLS: AtomicUsize = AtomicUsize::new(0);
static OWN_THREADS: AtomicUsize = AtomicUsize::new(0);

/// The number of cores (at most [`MAX_THREADS`]).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
}

/// The size of the shared pool in `s` (set, else the environment, else the cores).
fn configured(s: &Shared) -> Result<usize> {
    if let Some(p) = &s.pool {
        return Ok(p.current_num_threads());
    }
    if s.size > 0 {
        return Ok(s.size);
    }
    Ok(crate::env::env_usize(THREADS_ENV, 1, MAX_THREADS)?.unwrap_or_else(available_cores))
}

/// Threads of the shared pool: its size once started; before, what [`set_shared_pool_threads`]
/// set, else `TENSORJIT_THREADS`, else the number of cores. An invalid `TENSORJIT_THREADS` is an
/// [`Error::Config`] naming it.
pub fn shared_pool_threads() -> Result<usize> {
    configured(&shared().lock().unwrap_or_else(|e| e.into_inner()))
}

/// Sets the size of the shared pool (1 to [`MAX_THREADS`]) before it starts. Once it has
/// started, asking for another size is an [`Error::Config`] (the same size is accepted).
pub fn set_shared_pool_threads(n: usize) -> Result<()> {
    crate::config::check_threads("shared pool", "threads", n)?;
    let mut s = shared().lock().unwrap_or_else(|e| e.into_inner());
    match &s.pool {
        Some(p) if p.current_num_threads() != n => Err(Error::Config(format!(
            "the shared thread pool has already started with {} threads; cannot resize it to {n}",
            p.current_num_threads()
        ))),
        _ => {
            s.size = n;
            Ok(())
        }
    }
}

/// The process-wide pool every backend uses by default, started at the first call with
/// [`shared_pool_threads`] threads.
pub fn shared_pool() -> Result<Arc<ThreadPool>> {
    let mut s = shared().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = &s.pool {
        return Ok(p.clone());
    }
    let n = configured(&s)?;
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("tensorjit-{i}"))
        .build()
        .map(Arc::new)
        .map_err(|e| Error::Config(format!("cannot start the shared pool of {n} threads: {e}")))?;
    tracing::debug!(target: "tensorjit::threads", threads = n, "started the shared thread pool");
    s.pool = Some(p.clone());
    Ok(p)
}

/// [`shared_pool`], or `None` when it cannot be started (a platform without threads, such as
/// wasm32-wasip1, or a failed thread spawn): the caller then runs its work on the calling
/// thread. The failure is reported as a `tracing` warning (target `tensorjit::threads`).
pub fn shared_pool_or_none() -> Option<Arc<ThreadPool>> {
    match shared_pool() {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(target: "tensorjit::threads", error = %e, "running on the calling thread");
            None
        }
    }
}

/// A new pool of `n` threads for one backend (`backend` names it in errors and thread names).
#[cfg_attr(not(feature = "jit"), allow(dead_code))]
pub(crate) fn own_pool(backend: &str, n: usize) -> Result<Arc<ThreadPool>> {
    let name = backend.to_string();
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(move |i| format!("tensorjit-{name}-{i}"))
        .build()
        .map_err(|e| Error::Config(format!("backend {backend:?}: cannot start {n} threads: {e}")))?;
    OWN_POOLS.fetch_add(1, Ordering::Relaxed);
    OWN_THREADS.fetch_add(n, Ordering::Relaxed);
    tracing::debug!(target: "tensorjit::threads", backend, threads = n, "started a backend's own thread pool");
    Ok(Arc::new(p))
}

/// The pools started so far.
pub fn stats() -> ThreadPoolStats {
    let s = shared().lock().unwrap_or_else(|e| e.into_inner());
    ThreadPoolStats {
        shared_threads: configured(&s).unwrap_or_else(|_| available_cores()),
        shared_started: s.pool.is_some(),
        own_pools_started: OWN_POOLS.load(Ordering::Relaxed),
        own_threads_started: OWN_THREADS.load(Ordering::Relaxed),
    }
}

/// Runs `f(threads)` where parallel kernel code called from outside a backend should run: in
/// the current rayon pool when the caller is one of its threads (a backend's `pool.install`),
/// otherwise in the shared pool — never in rayon's global pool, which would be a second set of
/// threads beside tensorjit's. `threads` 0 becomes the size of that pool; 1 runs `f(1)` here.
#[cfg(any(feature = "jit", feature = "internals"))]
pub(crate) fn in_pool<R: Send>(threads: usize, f: impl FnOnce(usize) -> R + Send) -> Result<R> {
    if threads == 1 {
        return Ok(f(1));
    }
    if rayon::current_thread_index().is_some() {
        let n = if threads == 0 { rayon::current_num_threads() } else { threads };
        return Ok(f(n));
    }
    // A platform that cannot start threads (wasm32-wasip1) runs the work here.
    let Some(p) = shared_pool_or_none() else {
        return Ok(f(1));
    };
    let n = if threads == 0 { p.current_num_threads() } else { threads };
    if n <= 1 {
        return Ok(f(1));
    }
    Ok(p.install(|| f(n)))
}

/// Parses a thread choice: `shared` (the process-wide pool) or a thread count (1 to
/// [`MAX_THREADS`]: a pool of the backend's own).
pub(crate) fn parse_threads(backend: &str, key: &str, v: Option<&str>) -> Result<Threads> {
    match v {
        None => Err(option_error(backend, key, format!("needs a value ({key}=N or {key}=shared)"))),
        Some("shared") => Ok(Threads::Shared),
        Some(s) => match s.parse::<usize>() {
            Ok(n) => check_threads(backend, key, n).map(Threads::Own),
            Err(_) => Err(option_error(
                backend,
                key,
                format!("must be a positive integer (at most {MAX_THREADS}) or \"shared\", got {s:?}"),
            )),
        },
    }
}

/// Keeps the other threads of the current pool looking for work, instead of falling asleep,
/// for as long as it lives; made by [`KeepWarm::start`] on a pool thread at the start of a
/// step sequence, dropped at its end.
///
/// A rayon worker that finds no work spins briefly and then sleeps on a condition variable; the
/// next parallel split must then wake it through the kernel, and waits for it to join. On a
/// 2-vCPU KVM guest (Intel Xeon, family 6 model 167) a split of two 75 µs halves with 12 µs of
/// serial work between splits took 104–107 µs: the second half started 13–15 µs late and the
/// caller slept on the join. With the other thread kept warm the same split took 77–81 µs. A
/// batch-1 convnet runs about a hundred such splits per execution, each a kernel of tens of µs.
///
/// Each other thread of the pool runs a job that takes the pool's pending work as it appears
/// (`rayon::yield_now`: its own deque, the others', then the injected jobs, as an idle worker
/// would) and otherwise spins with a pause, until it has found no work for [`WARM_IDLE_LIMIT`]
/// while an execution runs, or for [`WARM_LINGER`] after the guard is dropped. Only the one
/// execution that runs its whole step sequence inside its pool starts one (`WholeInPool` in the
/// jit backend), so at most one guard spins a pool at a time.
pub(crate) struct KeepWarm {
    /// What its threads share (the tests count the spinning ones).
    #[cfg_attr(not(test), allow(dead_code))]
    state: Arc<Warm>,
}

/// What a [`KeepWarm`] guard shares with its threads.
#[derive(Default)]
struct Warm {
    /// Threads running the keep-warm loop now.
    spinning: AtomicUsize,
}

/// How long a kept-warm thread polls without finding work before it returns to the pool (and
/// to rayon's own spin-then-sleep): the gaps between an execution's parallel splits are a few
/// µs to tens of µs; a longer serial stretch lets the core go. It also bounds the stall when the
/// keep-warm job lands on top of a job that the execution waits for (below).
const WARM_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_micros(200);

/// How long a kept-warm thread goes on polling without finding work once its guard is dropped
/// (the execution ended): the next execution of a caller that runs them back to back (a server
/// under load, a benchmark) then finds its threads awake. Its first parallel split otherwise
/// waits for a thread woken through the kernel: MobileNetV2 at batch 1 on two threads of a Zen 5
/// guest, `tensorjit run --profile`, three alternated pairs: the first block 159–193 → 142–146
/// µs, the median execution 1.589–1.885 → 1.574–1.599 ms. The price: up to this long of spinning
/// on the pool's other cores after each execution.
const WARM_LINGER: std::time::Duration = std::time::Duration::from_micros(100);

/// [`KeepWarm`] guards alive in the process: a loop that outlived its own guard serves the
/// next execution's splits under [`WARM_IDLE_LIMIT`] again (that execution's own keep-warm job
/// returns at once on a thread already in a loop).
static LIVE_GUARDS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread is running a keep-warm loop (further down its stack, perhaps).
    static WARMING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl KeepWarm {
    /// Starts keeping the current pool's other threads warm; `None` outside a pool or in a
    /// pool of one thread.
    ///
    /// A rayon thread runs queued jobs while it waits for the other half of a split, so the
    /// keep-warm job can start on top of a piece of the very execution it serves (a thread
    /// still in the previous execution's keep-warm loop steals a piece of this one, the piece
    /// waits for its own split and picks up this execution's keep-warm job): the piece below
    /// it cannot finish while it polls, and the execution waits for that piece. A thread whose
    /// stack already holds a keep-warm loop therefore returns at once, and any loop returns
    /// after [`WARM_IDLE_LIMIT`] without work, so such a stall is bounded.
    pub(crate) fn start() -> Option<KeepWarm> {
        let me = rayon::current_thread_index()?;
        if rayon::current_num_threads() < 2 {
            return None;
        }
        let state = Arc::new(Warm::default());
        LIVE_GUARDS.fetch_add(1, Ordering::AcqRel);
        let shared = state.clone();
        // Broadcast jobs go to each thread's own queue, so the job for this thread is never run
        // by another (the one that lands here returns at once).
        rayon::spawn_broadcast(move |ctx| {
            if ctx.index() == me || WARMING.with(|w| w.replace(true)) {
                return;
            }
            shared.spinning.fetch_add(1, Ordering::AcqRel);
            let mut idle_since: Option<std::time::Instant> = None;
            loop {
                match rayon::yield_now() {
                    Some(rayon::Yield::Executed) => idle_since = None,
                    Some(rayon::Yield::Idle) => {
                        // With no execution running (this guard dropped, no other one made
                        // since), a shorter wait for the next one's work.
                        let limit = if LIVE_GUARDS.load(Ordering::Acquire) > 0 { WARM_IDLE_LIMIT } else { WARM_LINGER };
                        if idle_since.get_or_insert_with(std::time::Instant::now).elapsed() > limit {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                    None => break,
                }
            }
            shared.spinning.fetch_sub(1, Ordering::AcqRel);
            WARMING.with(|w| w.set(false));
        });
        Some(KeepWarm { state })
    }

    /// The pool's threads in the keep-warm loop now (they join as the pool runs their jobs).
    #[cfg(test)]
    fn spinning(&self) -> usize {
        self.state.spinning.load(Ordering::Acquire)
    }
}

impl Drop for KeepWarm {
    fn drop(&mut self) {
        LIVE_GUARDS.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_pool_is_one_pool() {
        let a = shared_pool().unwrap();
        let b = shared_pool().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(shared_pool_threads().unwrap(), a.current_num_threads());
        assert!(stats().shared_started);
        // Resizing a started pool is refused; its own size is accepted.
        assert!(set_shared_pool_threads(a.current_num_threads()).is_ok());
        let other = if a.current_num_threads() == 1 { 2 } else { 1 };
        assert!(set_shared_pool_threads(other).is_err());
        assert!(set_shared_pool_threads(0).is_err());
        assert!(set_shared_pool_threads(MAX_THREADS + 1).is_err());
    }

    #[test]
    fn in_pool_uses_the_enclosing_pool() {
        assert_eq!(in_pool(1, |n| n).unwrap(), 1);
        let own = own_pool("test", 3).unwrap();
        let (n, inside) = own.install(|| in_pool(0, |n| (n, rayon::current_thread_index().is_some())).unwrap());
        assert_eq!((n, inside), (3, true));
        let (n, in_shared) =
            in_pool(0, |n| (n, rayon::current_thread_index().is_some() || shared_pool_threads().unwrap() == 1))
                .unwrap();
        assert_eq!(n.max(1), shared_pool_threads().unwrap());
        assert!(in_shared);
    }

    /// Waits up to 10 s for `f` to hold.
    fn eventually(f: impl Fn() -> bool) -> bool {
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_secs(10) {
            if f() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        false
    }

    #[test]
    fn keep_warm_runs_the_work_and_lets_go() {
        // Outside a pool, and in a pool of one thread, there is nothing to keep warm.
        assert!(KeepWarm::start().is_none());
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        assert!(one.install(KeepWarm::start).is_none());

        let pool = own_pool("test", 3).unwrap();
        pool.install(|| {
            let warm = KeepWarm::start().expect("a pool of three threads");
            // Split work is run, by the warm threads among others: every unit once.
            let seen: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(0)).collect();
            let threads = Mutex::new(std::collections::HashSet::new());
            use rayon::prelude::*;
            (0..64usize).into_par_iter().with_max_len(1).for_each(|i| {
                seen[i].fetch_add(1, Ordering::Relaxed);
                threads.lock().unwrap().insert(rayon::current_thread_index());
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
            });
            assert!(seen.iter().all(|n| n.load(Ordering::Relaxed) == 1));
            assert!(threads.lock().unwrap().len() > 1, "the work stayed on one thread");
            // With nothing to do the loops return to the pool while the guard lives...
            assert!(eventually(|| warm.spinning() == 0), "threads still spinning: {}", warm.spinning());
            drop(warm);
            // ... and a dropped guard's loops return after [`WARM_LINGER`] without work.
            let warm = KeepWarm::start().unwrap();
            let state = warm.state.clone();
            drop(warm);
            assert!(eventually(|| state.spinning.load(Ordering::Acquire) == 0), "threads still spinning");
        });
    }

    #[test]
    fn keep_warm_never_stalls_nested_splits() {
        // Executions back to back, each a guard and splits inside splits, as the jit runs its
        // steps: a keep-warm loop that started on top of a piece the execution waits for would
        // hang it (seen with a loop that polled until its guard was dropped). Run on a thread of
        // its own, so that a hang fails the test instead of stopping it.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = own_pool("test", 2).unwrap();
            use rayon::prelude::*;
            let mut total = 0usize;
            for _ in 0..20000 {
                total += pool.install(|| {
                    let _warm = KeepWarm::start();
                    (0..8usize)
                        .into_par_iter()
                        .map(|i| {
                            (0..4usize)
                                .into_par_iter()
                                .map(|j| {
                                    // A few µs per piece, so that pieces are there to steal.
                                    let t = std::time::Instant::now();
                                    while t.elapsed() < std::time::Duration::from_micros(3) {
                                        std::hint::spin_loop();
                                    }
                                    i * j
                                })
                                .sum::<usize>()
                        })
                        .sum::<usize>()
                });
            }
            tx.send(total).unwrap();
        });
        let total = rx.recv_timeout(std::time::Duration::from_secs(120)).expect("executions stalled");
        // Σ_i Σ_j i·j over 8 × 4 = 28 · 6 per execution.
        assert_eq!(total, 20000 * 28 * 6);
    }
}
