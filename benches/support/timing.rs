//! Shared by the fused-versus-unfused benchmarks: timing two executables back to back.

use std::time::Instant;

use tensorjit::backends::jit::JitExecutable;
use tensorjit::{Buffer, Executable};

/// Best wall times (seconds) of executables `a` and `b` over `reps` rounds that run one
/// execution of each back to back (after one untimed execution each), so that both see the same
/// machine state (this machine is shared: a slow spell then slows both sides instead of skewing
/// the ratio).
pub fn time_pair(a: &JitExecutable, b: &JitExecutable, inputs: &[&Buffer], reps: usize) -> (f64, f64) {
    let one = |e: &JitExecutable| {
        let t = Instant::now();
        let out = e.execute(inputs, &[]).expect("execute");
        let s = t.elapsed().as_secs_f64();
        drop(out);
        s
    };
    one(a);
    one(b);
    let (mut ta, mut tb) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..reps {
        ta = ta.min(one(a));
        tb = tb.min(one(b));
    }
    (ta, tb)
}
