//! `tensorjit run`: executes the main function of an IR text file, or an ONNX model, on NumPy
//! `.npy` inputs and writes the outputs as `.npy` files, reporting shapes, compile time and
//! execution times. An ONNX model is imported with its symbolic dimensions bound from the
//! inputs' shapes and [`ModelOptions::dims`] (`--dim NAME=SIZE`).
//!
//! [`run`] takes typed options and returns a [`RunReport`]; [`print_report`] and
//! [`RunReport::to_json`] are its two output forms. The pieces (loading a module and its
//! inputs, creating the backend, timing executions) are shared with [`crate::cli::bench`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::backend::{Backend, ExecOptions, Executable};
use crate::api::buffer::Buffer;
use crate::api::profile::Profiler;
use crate::cli::model::{ModelFormat, bind_dims, check_onnx_file, declared_inputs, model_format};
use crate::cli::npy::{NpyArray, Storage, read_npy_file, read_npy_path, write_output};
use crate::cli::{CliError, display_name, load_module, millis};
use crate::ir::module::Module;
use crate::ir::shape::Shape;

/// The most timed executions `--repeat` (and `bench --repeat`/`--warmup`) accept.
pub const MAX_REPEAT: usize = 1_000_000;

/// Options of one `tensorjit run`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// The IR text file.
    pub file: PathBuf,
    /// `(parameter name, .npy path)` pairs.
    pub inputs: Vec<(String, PathBuf)>,
    /// Output directory.
    pub out: PathBuf,
    /// Backend config (`None`: [`crate::registry::new`]).
    pub backend: Option<String>,
    /// Timed executions after the first one.
    pub repeat: Option<usize>,
    /// Profile the executions (the repeated ones with `repeat`, else the first): per-kernel
    /// times and calls in [`RunReport::profile`].
    pub profile: bool,
    /// Write the profile as a Chrome trace (JSON) to this file (implies `profile`).
    pub trace: Option<PathBuf>,
}

/// Options that concern the model file rather than the run (see [`run_with`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelOptions {
    /// Sizes of an ONNX model's symbolic dimensions (`--dim NAME=SIZE`), on top of those the
    /// inputs' shapes give. An error for IR files.
    pub dims: Vec<(String, i64)>,
    /// Import an ONNX model with all its symbolic dimensions left dynamic (`--dynamic`): named
    /// axes bound at each execution from the inputs' shapes, instead of sizes fixed at import
    /// from the given inputs. `dims` then only sizes the generated inputs (`bench`). An error for
    /// IR files.
    pub dynamic: bool,
}

/// One written output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputFile {
    /// The model's name for it (an ONNX graph output's name); `None` for IR files.
    pub name: Option<String>,
    /// Path of the .npy file.
    pub path: PathBuf,
    /// The tensor's shape.
    pub shape: Shape,
    /// How it was stored.
    pub storage: Storage,
}

/// Timings of repeated executions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepeatStats {
    /// Number of timed executions.
    pub n: usize,
    /// Median time per execution.
    pub median: Duration,
    /// Minimum time per execution.
    pub min: Duration,
    /// Mean time per execution.
    pub mean: Duration,
    /// Maximum time per execution.
    pub max: Duration,
}

impl RepeatStats {
    /// As JSON: `{"n", "median_ms", "min_ms", "mean_ms", "max_ms"}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "n": self.n,
            "median_ms": millis(self.median),
            "min_ms": millis(self.min),
            "mean_ms": millis(self.mean),
            "max_ms": millis(self.max),
        })
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    /// The IR file.
    pub file: PathBuf,
    /// The backend's name.
    pub backend: String,
    /// The outputs, in order.
    pub outputs: Vec<OutputFile>,
    /// Time spent in the backend's `compile`.
    pub compile_time: Duration,
    /// Time of the first execution.
    pub execute_time: Duration,
    /// With `--repeat`.
    pub repeat: Option<RepeatStats>,
    /// With `--profile` or `--trace`: the events of the profiled executions.
    pub profile: Option<Profiler>,
}

impl RunReport {
    /// The report as one JSON object: `{"command": "run", "file", "ok": true, "backend",
    /// "outputs": [{"name", "model_name", "path", "shape", "dtype", "storage"}], "compile_ms", "execute_ms",
    /// "repeat": {"n", "median_ms", "min_ms", "mean_ms", "max_ms"} or null}`.
    pub fn to_json(&self) -> serde_json::Value {
        let outputs: Vec<serde_json::Value> = self
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| {
                serde_json::json!({
                    "name": format!("out{i}"),
                    "model_name": o.name,
                    "path": o.path.display().to_string(),
                    "shape": o.shape.dims,
                    "dtype": o.shape.dtype.short_name(),
                    "storage": o.storage.label(),
                })
            })
            .collect();
        serde_json::json!({
            "command": "run",
            "file": display_name(&self.file),
            "ok": true,
            "backend": self.backend,
            "outputs": outputs,
            "compile_ms": millis(self.compile_time),
            "execute_ms": millis(self.execute_time),
            "repeat": self.repeat.map(|r| r.to_json()),
            "profile": self.profile.as_ref().map(profile_json),
        })
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", millis(d))
}

/// Writes the human summary of a run.
pub fn print_report(r: &RunReport, w: &mut impl Write) -> std::io::Result<()> {
    for (i, o) in r.outputs.iter().enumerate() {
        let note = match o.storage {
            Storage::Native => String::new(),
            Storage::Bf16AsUint16 => " (bf16 stored as uint16 bits)".into(),
            Storage::PackedUint8 => format!(" ({} stored as packed uint8 bytes)", o.shape.dtype.short_name()),
        };
        let name = o.name.as_ref().map(|n| format!(" {n:?}")).unwrap_or_default();
        writeln!(w, "output {i}{name}: {} -> {}{note}", o.shape, o.path.display())?;
    }
    writeln!(w, "backend: {}", r.backend)?;
    writeln!(w, "compile: {}", ms(r.compile_time))?;
    writeln!(w, "execute: {} (first execution)", ms(r.execute_time))?;
    if let Some(s) = r.repeat {
        writeln!(w, "repeat {}: median {} / execution, min {}, mean {}", s.n, ms(s.median), ms(s.min), ms(s.mean))?;
    }
    if let Some(p) = &r.profile {
        let runs = r.repeat.map_or(1, |s| s.n);
        writeln!(w, "\nprofile ({runs} execution{}, the 30 most expensive steps):", if runs == 1 { "" } else { "s" })?;
        w.write_all(p.summary_table(Some(30)).as_bytes())?;
    }
    Ok(())
}

/// `{"executions"?, "kinds": [{"kind", "calls", "total_ms"}], "steps": [{"name", "kind", "calls",
/// "total_ms"}]}`, largest total first.
fn profile_json(p: &Profiler) -> serde_json::Value {
    let stats = p.summary();
    serde_json::json!({
        "kinds": p
            .kind_totals()
            .iter()
            .map(|k| serde_json::json!({"kind": k.kind.name(), "calls": k.calls, "total_ms": millis(k.total)}))
            .collect::<Vec<_>>(),
        "steps": stats
            .iter()
            .map(|s| serde_json::json!({"name": s.name, "kind": s.kind.name(), "calls": s.calls, "total_ms": millis(s.total)}))
            .collect::<Vec<_>>(),
    })
}

fn usage(msg: impl Into<String>) -> CliError {
    CliError::new(msg)
}

/// A repeat count in `1..=MAX_REPEAT`, or an error naming `flag`.
pub fn check_repeat(flag: &str, n: usize) -> Result<usize, CliError> {
    if (1..=MAX_REPEAT).contains(&n) {
        Ok(n)
    } else {
        Err(usage(format!("{flag} needs an integer from 1 to {MAX_REPEAT}, got {n}")))
    }
}

/// Makes the value of parameter `index` (`name`, `shape`) when no `.npy` file is given.
pub(crate) type InputGenerator<'a> = dyn FnMut(usize, &str, &Shape) -> Result<Buffer, CliError> + 'a;

/// A model loaded with its inputs (see `load_with_inputs`).
pub(crate) struct Loaded {
    /// The module (verified).
    pub(crate) module: Module,
    /// One buffer per parameter of main.
    pub(crate) buffers: Vec<Buffer>,
    /// Where each came from.
    pub(crate) sources: Vec<InputSource>,
    /// The model's output names (ONNX), `None` for IR files.
    pub(crate) output_names: Option<Vec<String>>,
}

/// Loads `file` (verified; IR text or ONNX, see [`model_format`]), and builds one buffer per
/// parameter of main: from the `.npy` file `inputs` names for it, else from `generate` (an
/// error when there is none). Every name in `inputs` must be a parameter. An ONNX model is
/// imported with its symbolic dimensions bound by `model.dims` and the given inputs' shapes.
pub(crate) fn load_with_inputs(
    file: &Path,
    inputs: &[(String, PathBuf)],
    mut generate: Option<&mut InputGenerator<'_>>,
    model: &ModelOptions,
) -> Result<Loaded, CliError> {
    let mut arrays: BTreeMap<String, NpyArray> = BTreeMap::new();
    let (module, output_names) = match model_format(file) {
        ModelFormat::Ir => {
            if model.dynamic {
                return Err(CliError::in_file(
                    file,
                    crate::error::Error::invalid(
                        "--dynamic",
                        "applies to ONNX models only (IR files keep their shapes)",
                    ),
                ));
            }
            if let Some((name, _)) = model.dims.first() {
                return Err(CliError::in_file(
                    file,
                    crate::error::Error::invalid(
                        "--dim",
                        format!("{name}: sizes of symbolic dimensions apply to ONNX models only"),
                    ),
                ));
            }
            let (module, _) = load_module(file)?;
            crate::ir::verify::verify(&module).map_err(|e| CliError::in_file(file, e))?;
            (module, None)
        }
        ModelFormat::Onnx => {
            // Decoded once, from the file, one initializer at a time (peak memory: the model,
            // not the model plus the file's bytes).
            check_onnx_file(file)?;
            let proto = crate::onnx::decode_path(file).map_err(|e| CliError::in_file(file, e))?;
            let declared = declared_inputs(&proto);
            let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
            for (name, path) in inputs {
                let Some(i) = names.iter().position(|n| n == name) else {
                    return Err(usage(format!(
                        "--input {name:?}: the model has no input {name:?} (inputs: {})",
                        names.join(", ")
                    )));
                };
                if arrays.contains_key(name) {
                    return Err(usage(format!("--input {name:?} given twice")));
                }
                let what = format!("parameter {i} ({name:?}) from {}", path.display());
                arrays.insert(name.clone(), read_npy_path(path, &what).map_err(CliError::from)?);
            }
            let opts = if model.dynamic {
                // Nothing bound: the module keeps the model's named dynamic axes.
                bind_dims(&declared, &BTreeMap::new(), &[])?
            } else {
                let given = arrays.iter().map(|(n, a)| (n.clone(), a.dims.clone())).collect();
                bind_dims(&declared, &given, &model.dims)?
            };
            let dir = crate::cli::constants_dir_of(file);
            let m = crate::onnx::import_proto(proto, Some(&dir), &opts).map_err(|e| CliError::in_file(file, e))?;
            (m.module, Some(m.outputs.into_iter().map(|o| o.name).collect()))
        }
    };
    let main = module.func(module.main);
    let names = main.param_names.clone();
    let shapes = module.param_shapes(module.main);

    // Match the inputs to the parameters by name before compiling.
    let mut given: BTreeMap<&str, &Path> = BTreeMap::new();
    for (name, path) in inputs {
        if !names.contains(name) {
            return Err(usage(format!(
                "--input {name:?}: main has no parameter {name:?} (parameters: {})",
                names.join(", ")
            )));
        }
        if given.insert(name.as_str(), path.as_path()).is_some() {
            return Err(usage(format!("--input {name:?} given twice")));
        }
    }
    let mut buffers = Vec::with_capacity(names.len());
    let mut sources = Vec::with_capacity(names.len());
    for (i, (name, shape)) in names.iter().zip(&shapes).enumerate() {
        match (given.get(name.as_str()), generate.as_mut()) {
            (Some(path), _) => {
                let what = format!("parameter {i} ({name:?}) from {}", path.display());
                let b = match arrays.remove(name) {
                    Some(a) => a.into_buffer_for(shape, &what),
                    None => read_npy_file(path, shape, &what),
                };
                buffers.push(b.map_err(CliError::from)?);
                sources.push(InputSource::File(path.to_path_buf()));
            }
            (None, Some(g)) => {
                let shape =
                    if shape.is_dynamic() && model.dynamic { sized(shape, &model.dims, name)? } else { shape.clone() };
                buffers.push(g(i, name, &shape)?);
                sources.push(InputSource::Generated);
            }
            (None, None) => {
                return Err(usage(format!("parameter {i} ({name:?}, {shape}) has no --input {name}=PATH.npy")));
            }
        }
    }
    Ok(Loaded { module, buffers, sources, output_names })
}

/// `shape` with its dynamic axes sized by `--dim` (for a generated input of a dynamic model).
fn sized(shape: &Shape, dims: &[(String, i64)], param: &str) -> Result<Shape, CliError> {
    let mut out = shape.dims.clone();
    for (i, d) in out.iter_mut().enumerate().filter(|(_, d)| **d == crate::ir::shape::DYNAMIC_DIM) {
        let name = shape.axis_name(i);
        *d = dims.iter().find(|(n, _)| n == name).map(|&(_, v)| v).ok_or_else(|| {
            usage(format!(
                "parameter {param:?} ({shape}): give its size {name:?} with --dim {name}=SIZE or its value with --input"
            ))
        })?;
    }
    Ok(Shape::new(shape.dtype, &out))
}

/// Where a parameter's value came from (see `load_with_inputs`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum InputSource {
    /// A `.npy` file.
    File(PathBuf),
    /// Generated by the command.
    Generated,
}

/// The backend of `config` (`None`: `$TENSORJIT_BACKEND` or the default).
pub(crate) fn backend(config: Option<&str>) -> Result<Arc<dyn Backend>, CliError> {
    match config {
        Some(cfg) => crate::registry::new_with_config(cfg),
        None => crate::registry::new(),
    }
    .map_err(CliError::from)
}

/// Compiles `module` on `backend`; returns the executable and the time `compile` took.
pub(crate) fn compile(
    backend: &dyn Backend,
    module: Module,
    file: &Path,
) -> Result<(Arc<dyn Executable>, Duration), CliError> {
    let t0 = Instant::now();
    let exe = backend.compile(module).map_err(|e| CliError::in_file(file, e))?;
    Ok((exe, t0.elapsed()))
}

/// Executes `exe` `n` times and returns the statistics of the times per execution.
pub(crate) fn time_executions(
    exe: &dyn Executable,
    inputs: &[&Buffer],
    n: usize,
    file: &Path,
    opts: &ExecOptions,
) -> Result<RepeatStats, CliError> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let outs = exe.execute_with(inputs, &[], opts).map_err(|e| CliError::in_file(file, e))?;
        drop(outs);
        times.push(t.elapsed());
    }
    times.sort();
    let (Some(&min), Some(&max)) = (times.first(), times.last()) else {
        return Err(usage("no executions to time"));
    };
    let median = if n % 2 == 1 { times[n / 2] } else { (times[n / 2 - 1] + times[n / 2]) / 2 };
    let mean = times.iter().sum::<Duration>() / n as u32;
    Ok(RepeatStats { n, median, min, mean, max })
}

/// Parses (or imports), verifies, compiles and executes `opts.file` and writes the outputs.
pub fn run(opts: &RunOptions) -> Result<RunReport, CliError> {
    run_with(opts, &ModelOptions::default())
}

/// [`run`] with the model options (`--dim`).
pub fn run_with(opts: &RunOptions, model: &ModelOptions) -> Result<RunReport, CliError> {
    if let Some(n) = opts.repeat {
        check_repeat("--repeat", n)?;
    }
    let Loaded { module, buffers, output_names, .. } = load_with_inputs(&opts.file, &opts.inputs, None, model)?;
    prepare_out_dir(&opts.out)?;
    let backend = backend(opts.backend.as_deref())?;
    let (exe, compile_time) = compile(backend.as_ref(), module, &opts.file)?;

    let refs: Vec<&Buffer> = buffers.iter().collect();
    let profiler = (opts.profile || opts.trace.is_some()).then(Profiler::new);
    let profiled = ExecOptions { profiler: profiler.clone(), ..ExecOptions::default() };
    let first = if opts.repeat.is_some() { ExecOptions::default() } else { profiled.clone() };
    let t1 = Instant::now();
    let outs = exe.execute_with(&refs, &[], &first).map_err(|e| CliError::in_file(&opts.file, e))?;
    let execute_time = t1.elapsed();
    let repeat = match opts.repeat {
        Some(n) => Some(time_executions(exe.as_ref(), &refs, n, &opts.file, &profiled)?),
        None => None,
    };
    if let (Some(path), Some(p)) = (&opts.trace, &profiler) {
        std::fs::write(path, p.chrome_trace()).map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
    }

    let mut outputs = Vec::with_capacity(outs.len());
    let mut manifest = String::new();
    for (i, b) in outs.iter().enumerate() {
        let path = opts.out.join(format!("out{i}.npy"));
        let storage = write_output(&path, b)?;
        let name = output_names.as_ref().and_then(|n| n.get(i)).cloned();
        let label = name.as_ref().map(|n| format!(" {n:?}")).unwrap_or_default();
        manifest.push_str(&format!(
            "out{i}.npy {} {:?} {}{label}\n",
            b.dtype().short_name(),
            b.shape().dims,
            storage.label()
        ));
        outputs.push(OutputFile { name, path, shape: b.shape().clone(), storage });
    }
    let mpath = opts.out.join("outputs.txt");
    std::fs::write(&mpath, manifest).map_err(|e| CliError::new(format!("{}: {e}", mpath.display())))?;
    Ok(RunReport {
        file: opts.file.clone(),
        backend: backend.name().to_string(),
        outputs,
        compile_time,
        execute_time,
        repeat,
        profile: profiler,
    })
}

/// Checks that `out` can take the outputs before anything is executed: a non-empty path that
/// is a directory or can be created as one, and in which a file can be created.
pub fn prepare_out_dir(out: &Path) -> Result<(), CliError> {
    let err = |msg: String| CliError::new(msg);
    if out.as_os_str().is_empty() {
        return Err(err("--out: the output directory must not be empty".into()));
    }
    if out.exists() && !out.is_dir() {
        return Err(err(format!("--out {}: exists and is not a directory", out.display())));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| err(format!("{}: cannot create the output directory: {e}", out.display())))?;
    let probe = out.join(format!(".tensorjit-write-test-{}", std::process::id()));
    File::create(&probe).map_err(|e| err(format!("{}: the output directory is not writable: {e}", out.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
