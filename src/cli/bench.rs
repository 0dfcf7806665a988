//! `tensorjit bench FILE [--input NAME=PATH.npy …]`: compiles an IR file once, executes it
//! `--warmup` times untimed, then `--repeat` times timed, and reports the median, minimum, mean
//! and maximum time per execution. Nothing is written.
//!
//! A parameter without `--input` gets a generated value of its shape (`--fill`): zeros (the
//! default), or deterministic pseudo-random values (`random`: floats uniform in [-1, 1),
//! integers in [0, 16), random bools and bytes; the same every run). A dynamic shape cannot be
//! generated and needs an `--input`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use half::{bf16, f16};

use crate::api::backend::{CompileReport, ConstantMemory};
use crate::api::buffer::Buffer;
use crate::cli::run::{
    InputSource, Loaded, ModelOptions, RepeatStats, backend, check_repeat, compile, load_with_inputs, time_executions,
};
use crate::cli::{CliError, display_name, millis};
use crate::ir::dtype::{DType, DTypeClass};
use crate::ir::shape::Shape;
use crate::ir::text::format_shape;

/// How `bench` makes a parameter's value when no `--input` gives one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum Fill {
    /// All elements zero.
    #[default]
    Zeros,
    /// Deterministic pseudo-random values: floats in [-1, 1), integers in [0, 16), bools,
    /// random bytes for packed dtypes.
    Random,
}

impl Fill {
    /// The word used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fill::Zeros => "zeros",
            Fill::Random => "random",
        }
    }
}

/// Options of [`bench()`].
#[derive(Clone, Debug, PartialEq)]
pub struct BenchOptions {
    /// The IR file or ONNX model.
    pub file: PathBuf,
    /// `(parameter name, .npy path)` pairs; other parameters are generated (`fill`).
    pub inputs: Vec<(String, PathBuf)>,
    /// Backend config (`None`: `$TENSORJIT_BACKEND`, else the default backend).
    pub backend: Option<String>,
    /// Timed executions (1 to [`crate::cli::MAX_REPEAT`]).
    pub repeat: usize,
    /// Untimed executions before them (0 to [`crate::cli::MAX_REPEAT`]).
    pub warmup: usize,
    /// How parameters without an input are generated.
    pub fill: Fill,
    /// ONNX models: sizes of symbolic dimensions (`--dim NAME=SIZE`), on top of those the
    /// given inputs bind (with `dynamic`: the sizes of the generated inputs only).
    pub dims: Vec<(String, i64)>,
    /// ONNX models: keep the symbolic dimensions dynamic (see [`ModelOptions::dynamic`]).
    pub dynamic: bool,
}

impl Default for BenchOptions {
    fn default() -> BenchOptions {
        BenchOptions {
            file: PathBuf::new(),
            inputs: Vec::new(),
            backend: None,
            repeat: 10,
            warmup: 1,
            fill: Fill::Zeros,
            dims: Vec::new(),
            dynamic: false,
        }
    }
}

/// One parameter of a benchmarked module and where its value came from.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchInput {
    /// The parameter's name.
    pub name: String,
    /// Its shape.
    pub shape: Shape,
    /// The `.npy` file, or `None` when generated.
    pub file: Option<PathBuf>,
}

/// The result of [`bench()`].
#[derive(Clone, Debug, PartialEq)]
pub struct BenchReport {
    /// The IR file.
    pub file: String,
    /// The backend's name.
    pub backend: String,
    /// The parameters.
    pub inputs: Vec<BenchInput>,
    /// How generated parameters were filled.
    pub fill: Fill,
    /// Time spent loading the file (and importing it, for ONNX) and its inputs.
    pub import_time: Duration,
    /// Time spent in the backend's `compile`.
    pub compile_time: Duration,
    /// The backend's phase-by-phase compile times, when it records them.
    pub compile_report: Option<CompileReport>,
    /// The executable's constant memory, when the backend reports it.
    pub constant_memory: Option<ConstantMemory>,
    /// Untimed executions.
    pub warmup: usize,
    /// The timed executions.
    pub stats: RepeatStats,
}

impl BenchReport {
    /// The human summary.
    pub fn write_human(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(w, "backend: {}", self.backend)?;
        writeln!(w, "import: {:.3} ms", millis(self.import_time))?;
        writeln!(w, "compile: {:.3} ms", millis(self.compile_time))?;
        if let Some(r) = &self.compile_report {
            for (name, t) in &r.phases {
                writeln!(w, "  {name}: {:.3} ms", millis(*t))?;
            }
            writeln!(w, "  (hashing constants: {:.3} ms of the above)", millis(r.hashing))?;
            let e = &r.execution;
            if e.interpreted.is_some() || !e.steps.is_empty() {
                write!(w, "{}", e.summary())?;
            }
        }
        if let Some(c) = &self.constant_memory {
            writeln!(
                w,
                "constant memory: {} bytes ({} plan constants, {} packed gemm operands; {} owned, {} shared) in {} buffers",
                c.total_bytes(),
                c.plan_bytes,
                c.packed_bytes,
                c.owned_bytes,
                c.shared_bytes,
                c.buffers
            )?;
        }
        for i in &self.inputs {
            match &i.file {
                Some(f) => writeln!(w, "input {}: {} from {}", i.name, format_shape(&i.shape), f.display())?,
                None => writeln!(w, "input {}: {} generated ({})", i.name, format_shape(&i.shape), self.fill.name())?,
            }
        }
        let s = &self.stats;
        writeln!(
            w,
            "{} executions after {} warm-up: median {:.3} ms, min {:.3} ms, mean {:.3} ms, max {:.3} ms",
            s.n,
            self.warmup,
            millis(s.median),
            millis(s.min),
            millis(s.mean),
            millis(s.max)
        )
    }

    /// As one JSON object: `{"command": "bench", "file", "ok": true, "backend", "inputs":
    /// [{"name", "shape", "dtype", "source"}], "import_ms", "compile_ms", "compile_phases": {"phases":
    /// [{"name", "ms"}], "hashing_ms", "total_ms"} or null, "constant_memory": {"total_bytes",
    /// "plan_bytes", "packed_bytes", "owned_bytes", "shared_bytes", "buffers"} or null,
    /// "fallbacks": [text] (reference kernels and the interpreter, see `ExecutionReport`) or null, "warmup",
    /// "repeat": {"n",
    /// "median_ms", "min_ms", "mean_ms", "max_ms"}}` (`source`: the `.npy` path, or `zeros` /
    /// `random` for generated values).
    pub fn to_json(&self) -> serde_json::Value {
        let inputs: Vec<serde_json::Value> = self
            .inputs
            .iter()
            .map(|i| {
                serde_json::json!({
                    "name": i.name,
                    "shape": i.shape.dims,
                    "dtype": i.shape.dtype.short_name(),
                    "source": i.file.as_ref().map_or(self.fill.name().to_string(), |f| f.display().to_string()),
                })
            })
            .collect();
        serde_json::json!({
            "command": "bench",
            "file": self.file,
            "ok": true,
            "backend": self.backend,
            "inputs": inputs,
            "import_ms": millis(self.import_time),
            "compile_ms": millis(self.compile_time),
            "compile_phases": self.compile_report.as_ref().map(compile_phases_json),
            "constant_memory": self.constant_memory.as_ref().map(constant_memory_json),
            "fallbacks": self.compile_report.as_ref().map(|r| r.execution.fallbacks()),
            "warmup": self.warmup,
            "repeat": self.stats.to_json(),
        })
    }
}

/// `{"phases": [{"name", "ms"}], "hashing_ms", "total_ms"}`.
pub fn compile_phases_json(r: &CompileReport) -> serde_json::Value {
    let phases: Vec<serde_json::Value> =
        r.phases.iter().map(|(name, t)| serde_json::json!({"name": name, "ms": millis(*t)})).collect();
    serde_json::json!({"phases": phases, "hashing_ms": millis(r.hashing), "total_ms": millis(r.total)})
}

/// `{"total_bytes", "plan_bytes", "packed_bytes", "owned_bytes", "shared_bytes", "buffers"}`.
pub fn constant_memory_json(c: &ConstantMemory) -> serde_json::Value {
    serde_json::json!({
        "total_bytes": c.total_bytes(),
        "plan_bytes": c.plan_bytes,
        "packed_bytes": c.packed_bytes,
        "owned_bytes": c.owned_bytes,
        "shared_bytes": c.shared_bytes,
        "buffers": c.buffers,
    })
}

/// A xorshift64* generator (deterministic inputs, no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// A value of `shape` filled as `fill` says; `seed` varies it between parameters.
pub fn generate(shape: &Shape, fill: Fill, seed: u64) -> crate::Result<Buffer> {
    let bytes = shape.byte_size().ok_or_else(|| {
        crate::Error::invalid("tensorjit bench", format!("cannot generate a value of the dynamic shape {shape}"))
    })?;
    let mut data = Vec::new();
    data.try_reserve_exact(bytes).map_err(|_| crate::Error::out_of_memory("tensorjit bench", bytes))?;
    let dt = shape.dtype;
    if fill == Fill::Zeros {
        data.resize(bytes, 0);
        return Buffer::from_bytes(shape.clone(), &data);
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
    let n = if dt.is_packed() || dt.size() == 0 { bytes } else { bytes / dt.size() };
    for _ in 0..n {
        let small = rng.next() % 16;
        match dt {
            _ if dt.is_packed() => data.push(rng.next() as u8),
            DType::Bool => data.push((rng.next() & 1) as u8),
            DType::Float16 => data.extend(f16::from_f64(rng.unit()).to_le_bytes()),
            DType::BFloat16 => data.extend(bf16::from_f64(rng.unit()).to_le_bytes()),
            DType::Float32 => data.extend((rng.unit() as f32).to_le_bytes()),
            DType::Float64 => data.extend(rng.unit().to_le_bytes()),
            DType::Complex64 => {
                data.extend((rng.unit() as f32).to_le_bytes());
                data.extend((rng.unit() as f32).to_le_bytes());
            }
            DType::Complex128 => {
                data.extend(rng.unit().to_le_bytes());
                data.extend(rng.unit().to_le_bytes());
            }
            _ if matches!(dt.class(), DTypeClass::SignedInt | DTypeClass::UnsignedInt) => {
                data.extend(&small.to_le_bytes()[..dt.size()]);
            }
            _ => data.extend((0..dt.size()).map(|_| rng.next() as u8)),
        }
    }
    data.resize(bytes, 0);
    Buffer::from_bytes(shape.clone(), &data)
}

/// Loads `opts.file` and its inputs, compiles once, and times the executions.
pub fn bench(opts: &BenchOptions) -> Result<BenchReport, CliError> {
    check_repeat("--repeat", opts.repeat)?;
    if opts.warmup > 0 {
        check_repeat("--warmup", opts.warmup)?;
    }
    let fill = opts.fill;
    let mut gen_fn = |i: usize, name: &str, shape: &Shape| {
        generate(shape, fill, i as u64)
            .map_err(|e| CliError::new(format!("parameter {i} ({name:?}): {e}; give it an --input {name}=PATH.npy")))
    };
    let t_import = std::time::Instant::now();
    let Loaded { module, buffers, sources, .. } = load_with_inputs(
        &opts.file,
        &opts.inputs,
        Some(&mut gen_fn),
        &ModelOptions { dims: opts.dims.clone(), dynamic: opts.dynamic },
    )?;
    let import_time = t_import.elapsed();
    let main = module.func(module.main);
    let inputs = main
        .param_names
        .iter()
        .zip(module.param_shapes(module.main))
        .zip(&sources)
        .map(|((name, shape), src)| BenchInput {
            name: name.clone(),
            shape,
            file: match src {
                InputSource::File(p) => Some(p.clone()),
                InputSource::Generated => None,
            },
        })
        .collect();
    let backend = backend(opts.backend.as_deref())?;
    let (exe, compile_time) = compile(backend.as_ref(), module, &opts.file)?;
    let refs: Vec<&Buffer> = buffers.iter().collect();
    for _ in 0..opts.warmup {
        exe.execute(&refs, &[]).map_err(|e| CliError::in_file(&opts.file, e))?;
    }
    let stats = time_executions(exe.as_ref(), &refs, opts.repeat, &opts.file, &Default::default())?;
    Ok(BenchReport {
        file: display_name(&opts.file),
        backend: backend.name().to_string(),
        inputs,
        fill,
        import_time,
        compile_time,
        compile_report: exe.compile_report(),
        constant_memory: exe.constant_memory(),
        warmup: opts.warmup,
        stats,
    })
}
