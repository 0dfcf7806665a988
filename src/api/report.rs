//! What runs each part of a compiled executable ([`ExecutionReport`]): generated loops,
//! specialised kernels, reference kernels or the interpreter, decided once at compile time, so
//! that a fallback to slow paths is visible (and, with the jit's `fallback=error`, refused).

use std::fmt;

use super::profile::EventKind;

/// Steps of one kind doing the same work ([`ExecutionReport::steps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// What runs them: [`EventKind::Loop`] (generated code), [`EventKind::Kernel`] (a GEMM,
    /// convolution, pooling or fused kernel), [`EventKind::Reference`] (the scalar reference
    /// kernel of the op), [`EventKind::Alias`] (no work), [`EventKind::Control`] (control flow
    /// running nested steps) or [`EventKind::Interp`] (the interpreter).
    pub kind: EventKind,
    /// The step as the profile names it (`conv f32 8x64x56x56 * 3x3 … implicit gemm`,
    /// `loop: add, max f32[8,64,56,56]`, `transpose f32[8,12,128,32]`).
    pub label: String,
    /// How many steps of the executable (over all its functions) share this kind and label.
    pub count: usize,
}

/// How a compiled executable runs its work. Backends that report it fill
/// [`CompileReport::execution`](super::CompileReport::execution).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionReport {
    /// Why the whole module runs on the interpreter (the jit delegates modules it cannot plan,
    /// e.g. with dynamic shapes); `None` when it is planned.
    pub interpreted: Option<String>,
    /// The plan's steps grouped by (kind, label), in order of first appearance.
    pub steps: Vec<StepReport>,
    /// For a module with dynamic axes that the jit specialises per binding of its axes: which
    /// binding [`steps`](Self::steps) describe (the latest compiled; none before the first
    /// execution) and how many were compiled. `None` for a static module.
    pub specialized: Option<String>,
}

impl ExecutionReport {
    /// Adds one step (grouped with earlier steps of the same kind and label).
    pub fn add(&mut self, kind: EventKind, label: String) {
        match self.steps.iter_mut().find(|s| s.kind == kind && s.label == label) {
            Some(s) => s.count += 1,
            None => self.steps.push(StepReport { kind, label, count: 1 }),
        }
    }

    /// The number of steps of `kind`.
    pub fn count(&self, kind: EventKind) -> usize {
        self.steps.iter().filter(|s| s.kind == kind).map(|s| s.count).sum()
    }

    /// The slow paths this executable takes: the interpreter (with its reason) and every
    /// reference-kernel step (with its count); empty when everything runs generated code or
    /// specialised kernels.
    pub fn fallbacks(&self) -> Vec<String> {
        let mut out: Vec<String> = self.interpreted.iter().map(|why| format!("interpreter: {why}")).collect();
        for s in self.steps.iter().filter(|s| matches!(s.kind, EventKind::Reference | EventKind::Interp)) {
            out.push(format!("{} kernel: {} (x{})", s.kind.name(), s.label, s.count));
        }
        out
    }

    /// The summary line of [`Display`](fmt::Display) and the [`fallbacks`](Self::fallbacks),
    /// one per line (`  fallback: …`): what the CLI prints and the plan dump starts with.
    pub fn summary(&self) -> String {
        let mut out = self.to_string().lines().next().unwrap_or_default().to_string();
        out.push('\n');
        for f in self.fallbacks() {
            out.push_str(&format!("  fallback: {f}\n"));
        }
        out
    }
}

impl fmt::Display for ExecutionReport {
    /// A summary line, then one line per group: `kind  xCOUNT  label`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(why) = &self.interpreted {
            return writeln!(f, "execution: the whole module runs on the interpreter: {why}");
        }
        let kinds = [
            (EventKind::Loop, "generated loops"),
            (EventKind::Kernel, "specialised kernels"),
            (EventKind::Reference, "reference kernels"),
            (EventKind::Alias, "aliases"),
            (EventKind::Control, "control steps"),
        ];
        let counts: Vec<String> = kinds.iter().map(|(k, what)| format!("{} {what}", self.count(*k))).collect();
        match &self.specialized {
            Some(s) => writeln!(f, "execution: {} ({s})", counts.join(", "))?,
            None => writeln!(f, "execution: {}", counts.join(", "))?,
        }
        for s in &self.steps {
            writeln!(f, "  {:<9} x{:<4} {}", s.kind.name(), s.count, s.label)?;
        }
        Ok(())
    }
}

/// Counters of the specialised plans of a module with dynamic axes (jit): one plan per binding
/// of the axes, compiled at the first execution with it and kept in a least-recently-used cache
/// of [`capacity`](Self::capacity) plans (the jit's `specializations=N`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecializationStats {
    /// The dynamic axes of the inputs, in the order of a binding's sizes.
    pub axes: Vec<String>,
    /// Most plans kept.
    pub capacity: usize,
    /// Plans kept now.
    pub cached: usize,
    /// Executions that found their plan in the cache.
    pub hits: u64,
    /// Executions that compiled a plan (the first at each binding, and again after an eviction).
    pub misses: u64,
    /// Plans evicted to make room.
    pub evictions: u64,
    /// Time spent compiling plans, over all misses.
    pub compile_time: std::time::Duration,
    /// Plans replaced by their recompilation with the whole pass pipeline (egg fusion on the
    /// static shapes), done in the background after each miss.
    pub upgraded: u64,
    /// `(phase, time)` of the latest plan compiled at a miss, in order: `specialize` (the
    /// module made static), then the phases of its [`crate::api::CompileReport`] (verification,
    /// each pass, planning). Empty before the first miss.
    pub latest_compile: Vec<(String, std::time::Duration)>,
    /// The constant memory of that plan: its `owned_bytes` were made by its compile, its
    /// `shared_bytes` found in the process-wide constant cache (packed weights included).
    pub latest_constants: crate::api::ConstantMemory,
}

impl fmt::Display for SpecializationStats {
    /// One line: `axes [batch, sequence]: 3 of 16 plans cached, 40 hits, 3 misses, 0 evictions, compile 51.2 ms, 3 upgraded`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "axes [{}]: {} of {} plans cached, {} hits, {} misses, {} evictions, compile {:.1} ms, {} upgraded",
            self.axes.join(", "),
            self.cached,
            self.capacity,
            self.hits,
            self.misses,
            self.evictions,
            self.compile_time.as_secs_f64() * 1e3,
            self.upgraded
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_steps_and_lists_fallbacks() {
        let mut r = ExecutionReport::default();
        r.add(EventKind::Loop, "loop: add f32[4]".into());
        r.add(EventKind::Reference, "transpose f32[2,3]".into());
        r.add(EventKind::Loop, "loop: add f32[4]".into());
        r.add(EventKind::Kernel, "gemm".into());
        assert_eq!(r.steps.len(), 3);
        assert_eq!(r.count(EventKind::Loop), 2);
        assert_eq!(r.fallbacks(), vec!["reference kernel: transpose f32[2,3] (x1)".to_string()]);
        let text = r.to_string();
        assert!(text.starts_with("execution: 2 generated loops, 1 specialised kernels, 1 reference kernels"), "{text}");
        let whole = ExecutionReport { interpreted: Some("dynamic".into()), ..ExecutionReport::default() };
        assert_eq!(whole.fallbacks(), vec!["interpreter: dynamic".to_string()]);
    }
}
