//! Per-kernel execution profiles: what ran, how often and for how long, readable as a table or
//! as a Chrome trace (`chrome://tracing`, Perfetto), so that a user sees where time goes
//! without an external profiler.
//!
//! Give [`ExecOptions::profiler`](crate::ExecOptions) a [`Profiler`]; every execution with those
//! options appends one [`ProfileEvent`] per plan step (jit: a compiled loop, a specialised
//! kernel such as a GEMM or a fused op, a reference kernel, a zero-copy alias, control flow) or
//! per node (interp). A profiler may be shared by several executions and threads; its events
//! accumulate until [`Profiler::clear`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What kind of work a [`ProfileEvent`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventKind {
    /// A loop compiled by the jit (an elementwise/reduction fusion cluster).
    Loop,
    /// A specialised kernel: GEMM, a fused op (dense, attention, softmax, layer norm, …).
    Kernel,
    /// A node run by its scalar reference kernel.
    Reference,
    /// A node whose result shares its operand's storage (no work).
    Alias,
    /// Control flow (call, while, if, sort); its time includes the steps it ran, which have
    /// their own events.
    Control,
    /// A node run by the interpreter backend.
    Interp,
}

impl EventKind {
    /// A short lowercase name (`loop`, `kernel`, `reference`, `alias`, `control`, `interp`).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Loop => "loop",
            EventKind::Kernel => "kernel",
            EventKind::Reference => "reference",
            EventKind::Alias => "alias",
            EventKind::Control => "control",
            EventKind::Interp => "interp",
        }
    }
}

/// One timed step of an execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileEvent {
    /// What ran, e.g. `gemm f32 [1024x384]·[384x1536] packed +bias`, `reference transpose
    /// f32[8,12,128,32]`, `loop 3: add, mul, tanh f32[1024,1536]`.
    pub name: String,
    /// Its kind.
    pub kind: EventKind,
    /// When it started, from the profiler's creation.
    pub start: Duration,
    /// How long it took.
    pub duration: Duration,
    /// A small number identifying the thread that ran the step (kernels may use the backend's
    /// pool inside one step).
    pub thread: u64,
}

/// Totals of the events that share a name and kind.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelStats {
    /// The events' name.
    pub name: String,
    /// Their kind.
    pub kind: EventKind,
    /// How many events.
    pub calls: u64,
    /// Their summed duration.
    pub total: Duration,
}

#[derive(Debug)]
struct Inner {
    origin: Instant,
    events: Mutex<Vec<ProfileEvent>>,
}

/// Collects [`ProfileEvent`]s; cheap to clone (clones share the events).
#[derive(Clone, Debug)]
pub struct Profiler(Arc<Inner>);

impl Default for Profiler {
    fn default() -> Profiler {
        Profiler::new()
    }
}

impl PartialEq for Profiler {
    fn eq(&self, other: &Profiler) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn thread_number() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

impl Profiler {
    /// An empty profiler; event times count from now.
    pub fn new() -> Profiler {
        Profiler(Arc::new(Inner { origin: Instant::now(), events: Mutex::new(Vec::new()) }))
    }

    fn events_lock(&self) -> std::sync::MutexGuard<'_, Vec<ProfileEvent>> {
        // A panic while holding the lock cannot leave the vector inconsistent (push only).
        self.0.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a step that started at `start` and ends now; `name` is built only here, so a
    /// caller pays for the label only when profiling.
    pub fn record(&self, kind: EventKind, start: Instant, name: impl FnOnce() -> String) {
        let end = Instant::now();
        let event = ProfileEvent {
            name: name(),
            kind,
            start: start.saturating_duration_since(self.0.origin),
            duration: end.saturating_duration_since(start),
            thread: thread_number(),
        };
        self.events_lock().push(event);
    }

    /// A copy of the events recorded so far, in the order they ended.
    pub fn events(&self) -> Vec<ProfileEvent> {
        self.events_lock().clone()
    }

    /// Forgets the events recorded so far.
    pub fn clear(&self) {
        self.events_lock().clear();
    }

    /// The events grouped by name and kind, largest total time first.
    pub fn summary(&self) -> Vec<KernelStats> {
        let mut by: HashMap<(String, EventKind), (u64, Duration)> = HashMap::new();
        for e in self.events_lock().iter() {
            let s = by.entry((e.name.clone(), e.kind)).or_default();
            s.0 += 1;
            s.1 += e.duration;
        }
        let mut out: Vec<KernelStats> =
            by.into_iter().map(|((name, kind), (calls, total))| KernelStats { name, kind, calls, total }).collect();
        out.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        out
    }

    /// Totals per kind of step (the events of [`Profiler::summary`] grouped by kind: `name` is
    /// the kind's name), largest total first.
    pub fn kind_totals(&self) -> Vec<KernelStats> {
        group_by_kind(&self.summary())
    }

    /// The summary as a text table: time per kind, then the `top` most expensive names (all
    /// with `None`), each with its calls, total and mean time and its share of the time of the
    /// steps (control-flow events excluded from the share: their time is their steps').
    pub fn summary_table(&self, top: Option<usize>) -> String {
        let stats = self.summary();
        let work: Duration = stats.iter().filter(|s| s.kind != EventKind::Control).map(|s| s.total).sum();
        let share = |d: Duration| if work.is_zero() { 0.0 } else { 100.0 * d.as_secs_f64() / work.as_secs_f64() };
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut t = String::new();
        let _ = writeln!(t, "{:<10} {:>8} {:>11} {:>7}", "kind", "calls", "total ms", "share");
        for k in group_by_kind(&stats) {
            let pct = if k.kind == EventKind::Control { "-".to_string() } else { format!("{:.1}%", share(k.total)) };
            let _ = writeln!(t, "{:<10} {:>8} {:>11.3} {:>7}", k.name, k.calls, ms(k.total), pct);
        }
        let _ = writeln!(t);
        let _ = writeln!(t, "{:>11} {:>7} {:>8} {:>10}  {:<9} name", "total ms", "share", "calls", "mean µs", "kind");
        let n = top.unwrap_or(stats.len()).min(stats.len());
        for s in &stats[..n] {
            let pct = if s.kind == EventKind::Control { "-".to_string() } else { format!("{:.1}%", share(s.total)) };
            let mean = s.total.as_secs_f64() * 1e6 / s.calls.max(1) as f64;
            let _ = writeln!(
                t,
                "{:>11.3} {:>7} {:>8} {:>10.1}  {:<9} {}",
                ms(s.total),
                pct,
                s.calls,
                mean,
                s.kind.name(),
                s.name
            );
        }
        if n < stats.len() {
            let rest: Duration = stats[n..].iter().filter(|s| s.kind != EventKind::Control).map(|s| s.total).sum();
            let _ = writeln!(
                t,
                "{:>11.3} {:>7} ({} more names)",
                ms(rest),
                format!("{:.1}%", share(rest)),
                stats.len() - n
            );
        }
        t
    }

    /// The events in the Chrome trace event format (a JSON object with `traceEvents`, one
    /// complete event `"ph": "X"` per step, times in microseconds), for `chrome://tracing` or
    /// <https://ui.perfetto.dev>.
    pub fn chrome_trace(&self) -> String {
        let mut t = String::from("{\"traceEvents\":[");
        for (i, e) in self.events_lock().iter().enumerate() {
            if i > 0 {
                t.push(',');
            }
            t.push_str("\n{\"name\":");
            json_string(&mut t, &e.name);
            let _ = write!(
                t,
                ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":1,\"tid\":{}}}",
                e.kind.name(),
                e.start.as_secs_f64() * 1e6,
                e.duration.as_secs_f64() * 1e6,
                e.thread
            );
        }
        t.push_str("\n],\"displayTimeUnit\":\"ms\"}\n");
        t
    }
}

/// `stats` summed per kind, largest total first.
fn group_by_kind(stats: &[KernelStats]) -> Vec<KernelStats> {
    let mut kinds: Vec<KernelStats> = Vec::new();
    for s in stats {
        match kinds.iter_mut().find(|k| k.kind == s.kind) {
            Some(k) => {
                k.calls += s.calls;
                k.total += s.total;
            }
            None => kinds.push(KernelStats {
                name: s.kind.name().to_string(),
                kind: s.kind,
                calls: s.calls,
                total: s.total,
            }),
        }
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.total));
    kinds
}

/// Appends `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_groups_by_name_and_orders_by_total_time() {
        let p = Profiler::new();
        let t0 = Instant::now();
        let long = t0.checked_sub(Duration::from_millis(30)).unwrap_or(t0);
        p.record(EventKind::Reference, t0, || "reference transpose f32[2,3]".into());
        p.record(EventKind::Kernel, long, || "gemm".into());
        p.record(EventKind::Reference, t0, || "reference transpose f32[2,3]".into());
        let s = p.summary();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "gemm");
        assert!(s[0].total >= Duration::from_millis(30));
        assert_eq!((s[1].name.as_str(), s[1].calls), ("reference transpose f32[2,3]", 2));
        let table = p.summary_table(Some(1));
        assert!(table.contains("gemm") && table.contains("(1 more names)"), "{table}");
        p.clear();
        assert!(p.events().is_empty());
    }

    #[test]
    fn chrome_trace_escapes_names() {
        let p = Profiler::new();
        p.record(EventKind::Loop, Instant::now(), || "a \"quoted\" \\ name\n".into());
        let t = p.chrome_trace();
        assert!(t.starts_with("{\"traceEvents\":["), "{t}");
        assert!(t.contains(r#""name":"a \"quoted\" \\ name\n","cat":"loop","ph":"X""#), "{t}");
    }
}
