//! The typed options of the "jit" backend ([`JitOptions`]) and their config-string form
//! (`"parallelism=4,fusion=off"`, parsed by [`JitOptions::parse`] with the shared helpers of
//! [`crate::config`]; docs/configuration.md lists every option).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::config::{self, check_threads, option_error, parse_config};
use crate::error::Result;
use crate::threads::Threads;

use super::NAME;

/// The option names accepted in the config string.
pub const OPTIONS: &[&str] = &[
    "parallelism",
    "while_limit",
    "fusion",
    "reductions",
    "streaming_stores",
    "fallback",
    "winograd",
    "conv_layout",
    "conv_chains",
    "conv_blocks",
    "spin",
    "specializations",
    "dump",
];

/// Specialised plans a module with dynamic axes keeps by default (`specializations=N`).
pub const DEFAULT_SPECIALIZATIONS: usize = 16;

/// Most specialised plans a module with dynamic axes may keep.
pub const MAX_SPECIALIZATIONS: usize = 4096;

/// How fused float Sum/Product reductions accumulate (`reductions=fast|ordered`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reductions {
    /// Vector partial sums (reassociated, like every vectorising compiler). The default.
    #[default]
    Fast,
    /// Each output accumulated in element order, bit-identical to the reference interpreter.
    Ordered,
}

/// When loops write their outputs with non-temporal stores (`streaming_stores=auto|on|off`; see
/// docs/architecture.md, "JIT").
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StreamingStores {
    /// When a loop's outputs take at least the last-level cache's size. The default.
    #[default]
    Auto,
    /// Always (where the kernel has such a variant).
    On,
    /// Never.
    Off,
}

/// Which inverted residual blocks (1×1 expansion → depthwise → 1×1 projection) run as one step,
/// band of rows by band of rows (`conv_blocks=auto|on|off`; `backends::jit::block`). Results
/// agree to rounding either way.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ConvBlocks {
    /// The blocks whose expanded image (the depthwise convolution's input, per image) is larger
    /// than a core's L2 cache: layer by layer it would go through L3 between the three steps;
    /// the depthwise convolutions and projections of the others as pairs. The default.
    #[default]
    Auto,
    /// Every block that qualifies, whatever its size (and pairs where one does not).
    On,
    /// None: each convolution is its own step.
    Off,
}

/// What compiling does when part of a module would leave generated code and specialised kernels
/// (`fallback=allow|error`): a node run by its scalar reference kernel, or the whole module
/// delegated to the interpreter (dynamic shapes, collectives). The compile report's
/// [`ExecutionReport`](crate::api::ExecutionReport) lists them either way.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// Run them (the default).
    #[default]
    Allow,
    /// Refuse to compile: an [`Error::Invalid`](crate::Error::Invalid) listing every fallback.
    Error,
}

/// Which convolutions compile to channels-last (NHWC) activations
/// (`conv_layout=auto|keep|nhwc|small`; see `passes::layout`). Results are the same either way
/// (the layout changes, not the math).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ConvLayout {
    /// The layout the convolution kernels run fastest on, as measured: at present every chain
    /// of NCHW convolutions runs channels-last, at every batch size. On a 2-vCPU Intel Xeon
    /// (Sapphire Rapids class), batch 8, alternated with the small-planes rule ([`ConvLayout::Small`],
    /// the default for batches above 1 before), 3 rounds, best ms: ResNet-18 127.6 against 143.7
    /// on one thread, 65.2 against 75.9 on two; MobileNetV2 53.95 against 54.01 and 26.75 against
    /// 27.48. Batch 1 had moved to all channels-last earlier (MobileNetV2 6.19–6.72 against
    /// 6.54–7.01 ms on one thread; ResNet-18 25.5–27.7 against 27.4–29.1). The default.
    #[default]
    Auto,
    /// Every convolution keeps the layout its dimension numbers give.
    Keep,
    /// Every chain of NCHW convolutions runs channels-last.
    Nhwc,
    /// Chains of NCHW convolutions whose output planes are small for their channel count (a
    /// convnet's later stages) run channels-last; the large planes of the first stages stay
    /// channels-first, on the row-vectorised kernels.
    Small,
}

const CONV_LAYOUT: &[(&str, ConvLayout)] =
    &[("auto", ConvLayout::Auto), ("keep", ConvLayout::Keep), ("nhwc", ConvLayout::Nhwc), ("small", ConvLayout::Small)];
const CONV_BLOCKS: &[(&str, ConvBlocks)] =
    &[("auto", ConvBlocks::Auto), ("on", ConvBlocks::On), ("off", ConvBlocks::Off)];
const FALLBACK: &[(&str, Fallback)] = &[("allow", Fallback::Allow), ("error", Fallback::Error)];
const REDUCTIONS: &[(&str, Reductions)] = &[("fast", Reductions::Fast), ("ordered", Reductions::Ordered)];
const STREAMING: &[(&str, StreamingStores)] =
    &[("auto", StreamingStores::Auto), ("on", StreamingStores::On), ("off", StreamingStores::Off)];

fn word<T: PartialEq + Copy>(table: &[(&'static str, T)], v: T) -> &'static str {
    table.iter().find(|(_, t)| *t == v).map_or("?", |(n, _)| n)
}

/// The options of a [`JitBackend`](super::JitBackend), built with chained setters:
///
/// ```
/// use tensorjit::backends::jit::{JitBackend, JitOptions, Reductions};
/// let opts = JitOptions::default().parallelism(2).while_limit(1000).reductions(Reductions::Ordered);
/// assert_eq!(opts.to_string(), "parallelism=2,while_limit=1000,reductions=ordered");
/// assert_eq!("parallelism=2,while_limit=1000,reductions=ordered".parse::<JitOptions>().unwrap(), opts);
/// let backend = JitBackend::with_options(opts).unwrap();
/// assert_eq!(backend.parallelism(), 2);
/// ```
///
/// The setters do not check values; [`JitBackend::with_options`](super::JitBackend::with_options)
/// does (an [`Error::Config`](crate::Error::Config) naming the option).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitOptions {
    /// The threads that run large loops, GEMMs and fused kernels: the process-wide shared pool
    /// (default) or a pool of the backend's own (`parallelism=N`).
    pub threads: Threads,
    /// Most iterations one `while` may run; one more is an [`Error::Limit`](crate::Error::Limit)
    /// naming the while node (`while_limit=N`; default unbounded).
    pub while_limit: Option<u64>,
    /// Run the egg fusion pass (`fusion=on|off`; default on).
    pub fusion: bool,
    /// How fused float reductions accumulate (`reductions=fast|ordered`).
    pub reductions: Reductions,
    /// Non-temporal output stores (`streaming_stores=auto|on|off`).
    pub streaming_stores: StreamingStores,
    /// Whether reference kernels and the interpreter may run parts of a module
    /// (`fallback=allow|error`).
    pub fallback: Fallback,
    /// 3×3 stride-1 convolutions with constant filters and ≥ 16 channels run as Winograd
    /// F(4×4, 3×3) (`winograd=on|off`; default on): fewer multiplications, a few times the
    /// direct path's rounding error (docs/configuration.md).
    pub winograd: bool,
    /// Which NCHW convolution chains run channels-last (`conv_layout=auto|keep|nhwc|small`;
    /// default auto).
    pub conv_layout: ConvLayout,
    /// Consecutive convolutions over large planes run as one step, image by image
    /// (`conv_chains=on|off`; default on; `backends::jit::chain`). `off`: every convolution is
    /// its own step, layer by layer (a profile then times each one).
    pub conv_chains: bool,
    /// Which inverted residual blocks (1×1 expansion → depthwise → 1×1 projection) run as one
    /// step, band of rows by band of rows, their expanded rows kept in the cache
    /// (`conv_blocks=auto|on|off`; default auto: those whose expanded image exceeds a core's L2
    /// cache, and of the others the depthwise convolution and projection as a pair;
    /// `backends::jit::block`).
    pub conv_blocks: ConvBlocks,
    /// While an execution runs its steps inside its pool, the pool's other threads look for
    /// work between its parallel splits instead of sleeping (`spin=on|off`; default on;
    /// `threads::KeepWarm`): no wake-up latency per split, at the price of those threads
    /// spinning on their cores through the execution's short serial stretches (a thread that
    /// finds no work for 200 µs goes back to the pool's sleep; after the execution, for 100 µs,
    /// so that the next one finds them awake).
    pub spin: bool,
    /// Most specialised plans a module with dynamic axes keeps, one per binding of its axes
    /// (least recently used evicted first; `specializations=N`, 1 to
    /// [`MAX_SPECIALIZATIONS`]; default [`DEFAULT_SPECIALIZATIONS`]).
    pub specializations: usize,
    /// Write every compilation stage under this directory (`dump=DIR`; else `TENSORJIT_DUMP`).
    pub dump: Option<PathBuf>,
}

impl Default for JitOptions {
    /// Shared pool, unbounded `while`, fusion on, fast reductions, automatic streaming stores,
    /// fallbacks allowed, Winograd on, no dump.
    fn default() -> JitOptions {
        JitOptions {
            threads: Threads::Shared,
            while_limit: None,
            fusion: true,
            reductions: Reductions::Fast,
            streaming_stores: StreamingStores::Auto,
            fallback: Fallback::Allow,
            winograd: true,
            conv_layout: ConvLayout::Auto,
            conv_chains: true,
            conv_blocks: ConvBlocks::Auto,
            spin: true,
            specializations: DEFAULT_SPECIALIZATIONS,
            dump: None,
        }
    }
}

impl JitOptions {
    /// The defaults (as [`JitOptions::default`]).
    pub fn new() -> JitOptions {
        JitOptions::default()
    }

    /// A pool of the backend's own with `n` threads (1: no pool, every execution on the calling
    /// thread; at most [`crate::limits::MAX_THREADS`]).
    pub fn parallelism(mut self, n: usize) -> Self {
        self.threads = Threads::Own(n);
        self
    }

    /// The process-wide shared pool (the default).
    pub fn shared_pool(mut self) -> Self {
        self.threads = Threads::Shared;
        self
    }

    /// The threads to run on.
    pub fn threads(mut self, t: Threads) -> Self {
        self.threads = t;
        self
    }

    /// At most `n` iterations per `while`.
    pub fn while_limit(mut self, n: u64) -> Self {
        self.while_limit = Some(n);
        self
    }

    /// Whether the egg fusion pass runs.
    pub fn fusion(mut self, on: bool) -> Self {
        self.fusion = on;
        self
    }

    /// How fused float reductions accumulate.
    pub fn reductions(mut self, r: Reductions) -> Self {
        self.reductions = r;
        self
    }

    /// When outputs are written with non-temporal stores.
    pub fn streaming_stores(mut self, s: StreamingStores) -> Self {
        self.streaming_stores = s;
        self
    }

    /// Whether compiling accepts reference kernels and the interpreter.
    pub fn fallback(mut self, f: Fallback) -> Self {
        self.fallback = f;
        self
    }

    /// Whether consecutive convolutions over large planes run as one step, image by image.
    pub fn conv_chains(mut self, on: bool) -> Self {
        self.conv_chains = on;
        self
    }

    /// Which inverted residual blocks run as one step, band by band.
    pub fn conv_blocks(mut self, b: ConvBlocks) -> Self {
        self.conv_blocks = b;
        self
    }

    /// Whether the pool's other threads spin between an execution's parallel splits.
    pub fn spin(mut self, on: bool) -> Self {
        self.spin = on;
        self
    }

    /// Whether 3×3 stride-1 convolutions may run as Winograd F(4×4, 3×3).
    pub fn winograd(mut self, on: bool) -> Self {
        self.winograd = on;
        self
    }

    /// Which NCHW convolution chains run channels-last.
    pub fn conv_layout(mut self, l: ConvLayout) -> Self {
        self.conv_layout = l;
        self
    }

    /// Most specialised plans kept per module with dynamic axes.
    pub fn specializations(mut self, n: usize) -> Self {
        self.specializations = n;
        self
    }

    /// Dump every compilation stage under `dir`.
    pub fn dump(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dump = Some(dir.into());
        self
    }

    /// The options of a config string (`""`, `"parallelism=2,fusion=off"`, …): an unknown
    /// option or a bad value is an [`Error::Config`](crate::Error::Config) naming it.
    pub fn parse(config: &str) -> Result<JitOptions> {
        let mut o = JitOptions::new();
        for item in parse_config(NAME, config, OPTIONS)? {
            let (key, v) = (item.key.as_str(), item.value.as_deref());
            match key {
                "parallelism" => o.threads = crate::threads::parse_threads(NAME, key, v)?,
                "while_limit" => o.while_limit = Some(config::parse_u64(NAME, key, v)?),
                "fusion" => o.fusion = config::parse_switch(NAME, key, v)?,
                "reductions" => o.reductions = config::parse_choice(NAME, key, v, REDUCTIONS)?,
                "streaming_stores" => o.streaming_stores = config::parse_choice(NAME, key, v, STREAMING)?,
                "fallback" => o.fallback = config::parse_choice(NAME, key, v, FALLBACK)?,
                "winograd" => o.winograd = config::parse_switch(NAME, key, v)?,
                "conv_chains" => o.conv_chains = config::parse_switch(NAME, key, v)?,
                "conv_blocks" => o.conv_blocks = config::parse_choice(NAME, key, v, CONV_BLOCKS)?,
                "spin" => o.spin = config::parse_switch(NAME, key, v)?,
                "conv_layout" => o.conv_layout = config::parse_choice(NAME, key, v, CONV_LAYOUT)?,
                "specializations" => {
                    let n = config::parse_u64(NAME, key, v)?;
                    o.specializations = usize::try_from(n).unwrap_or(usize::MAX);
                    o.validate_specializations()?;
                }
                "dump" => o.dump = Some(PathBuf::from(config::parse_nonempty(NAME, key, v, "a directory")?)),
                _ => return Err(option_error(NAME, key, "not handled (internal error)")),
            }
        }
        Ok(o)
    }

    /// Checks the values the setters took (what [`Self::parse`] checks for a config string).
    pub fn validate(&self) -> Result<()> {
        if let Threads::Own(n) = self.threads {
            check_threads(NAME, "parallelism", n)?;
        }
        self.validate_specializations()?;
        if self.dump.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return Err(option_error(NAME, "dump", "needs a directory (dump=DIR)"));
        }
        Ok(())
    }
}

impl JitOptions {
    fn validate_specializations(&self) -> Result<()> {
        if !(1..=MAX_SPECIALIZATIONS).contains(&self.specializations) {
            let why = format!("must be 1 to {MAX_SPECIALIZATIONS}, got {}", self.specializations);
            return Err(option_error(NAME, "specializations", why));
        }
        Ok(())
    }
}

impl FromStr for JitOptions {
    type Err = crate::error::Error;

    fn from_str(s: &str) -> Result<JitOptions> {
        JitOptions::parse(s)
    }
}

impl fmt::Display for JitOptions {
    /// The config string of the options that differ from the defaults (`""` for the defaults);
    /// [`JitOptions::parse`] reads it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = vec![];
        if self.threads != Threads::Shared {
            items.push(format!("parallelism={}", self.threads));
        }
        if let Some(n) = self.while_limit {
            items.push(format!("while_limit={n}"));
        }
        if !self.fusion {
            items.push("fusion=off".into());
        }
        if self.reductions != Reductions::Fast {
            items.push(format!("reductions={}", word(REDUCTIONS, self.reductions)));
        }
        if self.streaming_stores != StreamingStores::Auto {
            items.push(format!("streaming_stores={}", word(STREAMING, self.streaming_stores)));
        }
        if self.fallback != Fallback::Allow {
            items.push(format!("fallback={}", word(FALLBACK, self.fallback)));
        }
        if !self.winograd {
            items.push("winograd=off".into());
        }
        if self.conv_layout != ConvLayout::Auto {
            items.push(format!("conv_layout={}", word(CONV_LAYOUT, self.conv_layout)));
        }
        if !self.conv_chains {
            items.push("conv_chains=off".into());
        }
        if self.conv_blocks != ConvBlocks::Auto {
            items.push(format!("conv_blocks={}", word(CONV_BLOCKS, self.conv_blocks)));
        }
        if !self.spin {
            items.push("spin=off".into());
        }
        if self.specializations != DEFAULT_SPECIALIZATIONS {
            items.push(format!("specializations={}", self.specializations));
        }
        if let Some(d) = &self.dump {
            items.push(format!("dump={}", d.display()));
        }
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_display_round_trip() {
        assert_eq!(JitOptions::parse("").unwrap(), JitOptions::new());
        assert_eq!(JitOptions::new().to_string(), "");
        let o = JitOptions::new()
            .parallelism(3)
            .while_limit(7)
            .fusion(false)
            .reductions(Reductions::Ordered)
            .streaming_stores(StreamingStores::Off)
            .fallback(Fallback::Error)
            .winograd(false)
            .conv_layout(ConvLayout::Keep)
            .conv_chains(false)
            .conv_blocks(ConvBlocks::Off)
            .spin(false)
            .specializations(3)
            .dump("/tmp/x");
        let s = o.to_string();
        assert_eq!(
            s,
            "parallelism=3,while_limit=7,fusion=off,reductions=ordered,streaming_stores=off,fallback=error,winograd=off,conv_layout=keep,conv_chains=off,conv_blocks=off,spin=off,specializations=3,dump=/tmp/x"
        );
        assert_eq!(JitOptions::parse("conv_layout=nhwc").unwrap().conv_layout, ConvLayout::Nhwc);
        assert_eq!(JitOptions::parse("conv_layout=small").unwrap().conv_layout, ConvLayout::Small);
        assert_eq!(JitOptions::parse("conv_blocks=on").unwrap().conv_blocks, ConvBlocks::On);
        assert_eq!(JitOptions::parse("conv_blocks=auto").unwrap().conv_blocks, ConvBlocks::Auto);
        assert_eq!(JitOptions::parse("").unwrap().conv_blocks, ConvBlocks::Auto);
        assert_eq!(JitOptions::parse(&s).unwrap(), o);
        assert_eq!(JitOptions::parse("parallelism=2,parallelism=shared").unwrap().threads, Threads::Shared);
        assert!(!JitOptions::parse("winograd=off").unwrap().winograd);
        assert!(JitOptions::parse("winograd=off,winograd=on").unwrap().winograd);
        assert!(!JitOptions::parse("conv_chains=0").unwrap().conv_chains);
        assert!(JitOptions::new().spin && !JitOptions::parse("spin=off").unwrap().spin);
    }

    #[test]
    fn bad_options_name_themselves() {
        for (cfg, word) in [
            ("ops_sequential", "ops_sequential"),
            ("parallelism=0", "parallelism"),
            ("fusion=maybe", "fusion"),
            ("reductions", "reductions"),
            ("streaming_stores=sometimes", "streaming_stores"),
            ("fallback=warn", "fallback"),
            ("winograd=2", "winograd"),
            ("conv_layout=nchwc", "conv_layout"),
            ("conv_chains=some", "conv_chains"),
            ("conv_blocks=some", "conv_blocks"),
            ("spin=fast", "spin"),
            ("specializations=0", "specializations"),
            ("specializations=5000", "4096"),
            ("dump", "dump"),
            ("while_limit=-1", "while_limit"),
        ] {
            let e = JitOptions::parse(cfg).unwrap_err().to_string();
            assert!(e.contains(word) && e.contains("\"jit\""), "{cfg}: {e}");
        }
        assert!(JitOptions::new().parallelism(0).validate().is_err());
        assert!(JitOptions::new().parallelism(crate::limits::MAX_THREADS + 1).validate().is_err());
        assert!(JitOptions::new().dump("").validate().is_err());
        assert!(JitOptions::new().parallelism(1).validate().is_ok());
    }
}
