//! `tensorjit`: the command-line tool. This file only declares the arguments (clap) and
//! dispatches to the subcommands of [`tensorjit::cli`], then prints their reports as text, as
//! one JSON object (`--json`) or not at all (`--quiet`). `docs/cli.md` describes every
//! subcommand. Exit status: 0 success, 1 failure (the message names the file), 2 usage error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tensorjit::cli::bench::{BenchOptions, Fill};
use tensorjit::cli::dump::{DumpOptions, Stage};
use tensorjit::cli::fmt::{ConstantsFileReport, FmtOptions};
use tensorjit::cli::import::ImportCommand;
use tensorjit::cli::model::parse_dim;
use tensorjit::cli::{CliError, MAX_REPEAT, ModelOptions, RunOptions};
use tensorjit::ir::text::{DEFAULT_DUMP_CONSTANT_ELEMENTS, DEFAULT_PREVIEW_ELEMENTS, PrintOptions};

const EXIT_STATUS: &str = "\
Exit status: 0 success, 1 failure (bad file, failed check, compile or execution error; the
message names the file, and the line and column for IR text errors), 2 usage error.
FILE may be `-` for standard input (IR text only). A model FILE is IR text (.tjir) or an ONNX
model (.onnx; another extension is read as ONNX when its first byte is 0x08). See docs/cli.md.";

const RUN_AFTER_HELP: &str = "\
dtype conventions (.npy has no bfloat16 and no sub-byte integers):
  bool, i8..i64, u8..u64, f16, f32, f64, c64, c128  native .npy dtypes (little-endian on write;
                     either byte order and C or Fortran order on read)
  bf16               stored as uint16 ('<u2') holding the raw bfloat16 bit patterns, same shape;
                     a bf16 parameter also takes such a uint16 file (a float32 file is rounded
                     to nearest even)
  i4,u4,i2,u2,i1,u1  stored as a 1-D uint8 array of the packed bytes (element 0 in the lowest
                     bits of byte 0); a packed parameter takes such a uint8 file
DIR/outputs.txt lists every output: file, dtype, shape and storage (native, bf16-bits-as-uint16
or packed-uint8).";

#[derive(Parser)]
#[command(
    name = "tensorjit",
    version,
    about = "Run, benchmark, check, format and dump tensorjit IR files (.tjir) and ONNX models; import and inspect ONNX models",
    after_help = EXIT_STATUS,
    propagate_version = true
)]
struct Cli {
    /// Print nothing on stdout except the text fmt and dump produce; errors still go to stderr
    #[arg(short, long, global = true, conflicts_with = "json")]
    quiet: bool,
    /// Print one JSON object per result on stdout (failures too: {"ok": false, "error": …})
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Execute main of an IR file or an ONNX model on .npy inputs and write its outputs as .npy files
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
    /// Compile an IR file or ONNX model once and time repeated executions (median, min, mean, max)
    Bench(BenchArgs),
    /// Parse and verify an IR file; print every error as FILE:LINE:COLUMN
    Check(CheckArgs),
    /// Print the canonical text of an IR file
    Fmt(FmtArgs),
    /// Print the jit backend's compilation stages of an IR file (no inputs needed)
    Dump(DumpArgs),
    /// Convert an ONNX model to IR text plus a safetensors file of its weights
    Import(ImportArgs),
    /// Describe an ONNX model (inputs, outputs, opset, operators, unsupported operators) or a
    /// weights file (.safetensors, .npz, .npy) without importing it
    Info(InfoArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The IR text file or ONNX model
    file: PathBuf,
    /// The .npy file for main's parameter NAME; every parameter needs one
    #[arg(short, long = "input", value_name = "NAME=PATH", value_parser = parse_input)]
    inputs: Vec<(String, PathBuf)>,
    /// Output directory for out0.npy, out1.npy, … and outputs.txt (created if missing; checked
    /// before anything is executed)
    #[arg(short, long, value_name = "DIR", value_parser = parse_out_dir)]
    out: PathBuf,
    /// Backend config: interp, jit, jit:parallelism=4, … [default: $TENSORJIT_BACKEND, else jit]
    #[arg(short, long, value_name = "CONFIG")]
    backend: Option<String>,
    /// After the first (warm-up) execution, execute N more times and report the median, minimum
    /// and mean time per execution (1 to 1000000)
    #[arg(short, long, value_name = "N", value_parser = parse_repeat, allow_negative_numbers = true)]
    repeat: Option<usize>,
    /// ONNX models: the size of the symbolic dimension NAME (others are bound from the inputs'
    /// shapes)
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, i64)>,
    /// ONNX models: import with the symbolic dimensions left dynamic (bound at each execution
    /// from the inputs' shapes) instead of fixed from the given inputs
    #[arg(long)]
    dynamic: bool,
    /// Time every step of the executions (the repeated ones with --repeat, else the first) and
    /// print where the time went: per kind (compiled loop, kernel, reference kernel, …) and the
    /// most expensive steps (JSON: a "profile" object)
    #[arg(long)]
    profile: bool,
    /// Write the profile as a Chrome trace (chrome://tracing, ui.perfetto.dev) to PATH; implies
    /// --profile
    #[arg(long, value_name = "PATH")]
    trace: Option<PathBuf>,
}

#[derive(Args)]
struct ImportArgs {
    /// The ONNX model
    file: PathBuf,
    /// The IR text file to write
    #[arg(short, long, value_name = "PATH", value_parser = parse_out_file)]
    out: PathBuf,
    /// The safetensors file for the weights, in the same directory as --out [default: --out
    /// with the extension .safetensors]
    #[arg(short, long, value_name = "PATH")]
    weights: Option<PathBuf>,
    /// The size of the symbolic dimension NAME (the others stay dynamic)
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, i64)>,
    /// Constants with more than N elements go to the weights file
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DUMP_CONSTANT_ELEMENTS)]
    max_constant_elements: usize,
}

#[derive(Args)]
struct InfoArgs {
    /// The ONNX model or weights file
    file: PathBuf,
}

#[derive(Args)]
struct BenchArgs {
    /// The IR text file or ONNX model
    file: PathBuf,
    /// The .npy file for main's parameter NAME; parameters without one are generated (--fill)
    #[arg(short, long = "input", value_name = "NAME=PATH", value_parser = parse_input)]
    inputs: Vec<(String, PathBuf)>,
    /// Backend config: interp, jit, jit:parallelism=4, … [default: $TENSORJIT_BACKEND, else jit]
    #[arg(short, long, value_name = "CONFIG")]
    backend: Option<String>,
    /// Timed executions (1 to 1000000)
    #[arg(short, long, value_name = "N", default_value_t = 10, value_parser = parse_repeat, allow_negative_numbers = true)]
    repeat: usize,
    /// Untimed executions before the timed ones (0 to 1000000)
    #[arg(short, long, value_name = "N", default_value_t = 1, value_parser = parse_warmup, allow_negative_numbers = true)]
    warmup: usize,
    /// Value of a parameter without --input: zeros, or deterministic pseudo-random values (floats
    /// in [-1, 1), integers in [0, 16))
    #[arg(long, value_enum, default_value_t = Fill::Zeros)]
    fill: Fill,
    /// ONNX models: the size of the symbolic dimension NAME (others are bound from the inputs'
    /// shapes; with --dynamic, the size of generated inputs)
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, i64)>,
    /// ONNX models: import with the symbolic dimensions left dynamic (bound at each execution
    /// from the inputs' shapes) instead of fixed from the given inputs
    #[arg(long)]
    dynamic: bool,
}

#[derive(Args)]
struct CheckArgs {
    /// The IR text file
    file: PathBuf,
}

#[derive(Args)]
struct ConstantArgs {
    /// Constants with more than N elements are printed as a summary (hash and first values);
    /// their data goes to --constants-file, else it is elided (the text then does not parse)
    #[arg(long, value_name = "N")]
    max_constant_elements: Option<usize>,
    /// How many leading values a summarised constant shows
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PREVIEW_ELEMENTS)]
    preview: usize,
    /// Write the summarised constants' data to PATH; the text refers to it by its file name
    /// (`constant file("NAME", offset=…, bytes=…, hash=…)`), so keep the two side by side
    #[arg(long, value_name = "PATH")]
    constants_file: Option<PathBuf>,
}

#[derive(Args)]
struct FmtArgs {
    /// The IR text file
    file: PathBuf,
    #[command(flatten)]
    constants: ConstantArgs,
}

#[derive(Args)]
#[command(after_help = "\
Each section starts with a `;; ==== STAGE: NAME ====` comment line, so the output of one IR stage
(input or optimized) is a module that `tensorjit run` replays (with --constants-file when
constants are summarised). IR stages summarise constants of more than 16 elements.")]
struct DumpArgs {
    /// The IR text file
    file: PathBuf,
    /// The stages to print, comma-separated or repeated [default: all]
    #[arg(short, long = "stage", value_enum, value_delimiter = ',', value_name = "STAGE")]
    stages: Vec<Stage>,
    /// The jit backend's config: jit or jit:OPTIONS (fusion=off, reductions=ordered,
    /// streaming_stores=on, …)
    #[arg(short, long, value_name = "CONFIG", default_value = "jit")]
    backend: String,
    /// ONNX models: the size of the symbolic dimension NAME (the others stay dynamic)
    #[arg(long = "dim", value_name = "NAME=SIZE", value_parser = parse_dim)]
    dims: Vec<(String, i64)>,
    #[command(flatten)]
    constants: ConstantArgs,
}

fn parse_input(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name.to_string(), PathBuf::from(path))),
        _ => Err(format!("expected NAME=PATH.npy, got {s:?}")),
    }
}

fn parse_out_file(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() || s == "-" {
        Err("expected the path of the IR file to write".into())
    } else {
        Ok(PathBuf::from(s))
    }
}

fn parse_out_dir(s: &str) -> Result<PathBuf, String> {
    if s.is_empty() { Err("the output directory must not be empty".into()) } else { Ok(PathBuf::from(s)) }
}

fn parse_count(s: &str, min: usize) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (min..=MAX_REPEAT).contains(&n) => Ok(n),
        _ => Err(format!("expected an integer from {min} to {MAX_REPEAT}, got {s:?}")),
    }
}

fn parse_repeat(s: &str) -> Result<usize, String> {
    parse_count(s, 1)
}

fn parse_warmup(s: &str) -> Result<usize, String> {
    parse_count(s, 0)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Human,
    Quiet,
    Json,
}

/// Prints a JSON value as one line on stdout (write errors, e.g. a closed pipe, are ignored).
fn print_json(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, v);
    let _ = writeln!(out);
}

/// Reports a failure of `command` (exit status 1).
fn fail(mode: Mode, command: &str, e: &CliError) -> u8 {
    if mode == Mode::Json {
        print_json(&e.to_json(command));
    }
    match e.location() {
        Some(loc) => eprintln!("{loc}: error: {}", e.message),
        None => eprintln!("error: {}", e.message),
    }
    1
}

fn note_constants(mode: Mode, c: &Option<ConstantsFileReport>) {
    if let (Mode::Human, Some(c)) = (mode, c) {
        eprintln!("wrote {} ({} bytes, {} constants)", c.path.display(), c.bytes, c.constants);
    }
}

fn print_options(c: &ConstantArgs, default_max: Option<usize>) -> PrintOptions {
    PrintOptions { max_constant_elements: c.max_constant_elements.or(default_max), preview_elements: c.preview }
}

/// Sends the library's `tracing` events to stderr when `RUST_LOG` is set (e.g.
/// `RUST_LOG=tensorjit=debug`, `RUST_LOG=tensorjit::jit=trace`); without it nothing is logged.
fn init_logging() {
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        use std::io::IsTerminal;
        let ansi = std::io::stderr().is_terminal();
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    }
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let mode = match (cli.json, cli.quiet) {
        (true, _) => Mode::Json,
        (false, true) => Mode::Quiet,
        _ => Mode::Human,
    };
    let mut out = std::io::stdout().lock();
    let code = match cli.command {
        Command::Run(a) => {
            let opts = RunOptions {
                file: a.file,
                inputs: a.inputs,
                out: a.out,
                backend: a.backend,
                repeat: a.repeat,
                profile: a.profile,
                trace: a.trace,
            };
            match tensorjit::cli::run_with(&opts, &ModelOptions { dims: a.dims, dynamic: a.dynamic }) {
                Ok(r) => {
                    match mode {
                        Mode::Human => drop(tensorjit::cli::print_report(&r, &mut out)),
                        Mode::Json => print_json(&r.to_json()),
                        Mode::Quiet => {}
                    }
                    0
                }
                Err(e) => fail(mode, "run", &e),
            }
        }
        Command::Bench(a) => {
            let opts = BenchOptions {
                file: a.file,
                inputs: a.inputs,
                backend: a.backend,
                repeat: a.repeat,
                warmup: a.warmup,
                fill: a.fill,
                dims: a.dims,
                dynamic: a.dynamic,
            };
            match tensorjit::cli::bench::bench(&opts) {
                Ok(r) => {
                    match mode {
                        Mode::Human => drop(r.write_human(&mut out)),
                        Mode::Json => print_json(&r.to_json()),
                        Mode::Quiet => {}
                    }
                    0
                }
                Err(e) => fail(mode, "bench", &e),
            }
        }
        Command::Check(a) => {
            let r = tensorjit::cli::check::check(&a.file);
            match mode {
                Mode::Human => drop(r.write_human(&mut out, &mut std::io::stderr())),
                Mode::Json => print_json(&r.to_json()),
                Mode::Quiet => drop(r.write_errors(&mut std::io::stderr())),
            }
            if r.ok { 0 } else { 1 }
        }
        Command::Fmt(a) => {
            let opts = FmtOptions {
                file: a.file,
                print: print_options(&a.constants, None),
                constants_file: a.constants.constants_file,
            };
            match tensorjit::cli::fmt::fmt(&opts) {
                Ok(r) => {
                    match mode {
                        Mode::Json => print_json(&r.to_json()),
                        _ => drop(out.write_all(r.text.as_bytes())),
                    }
                    note_constants(mode, &r.constants_file);
                    0
                }
                Err(e) => fail(mode, "fmt", &e),
            }
        }
        Command::Dump(a) => {
            let opts = DumpOptions {
                file: a.file,
                stages: a.stages,
                backend: Some(a.backend),
                print: print_options(&a.constants, Some(DEFAULT_DUMP_CONSTANT_ELEMENTS)),
                constants_file: a.constants.constants_file,
                dims: a.dims,
            };
            match tensorjit::cli::dump::dump(&opts) {
                Ok(r) => {
                    match mode {
                        Mode::Json => print_json(&r.to_json()),
                        _ => drop(r.write_human(&mut out)),
                    }
                    note_constants(mode, &r.constants_file);
                    0
                }
                Err(e) => fail(mode, "dump", &e),
            }
        }
        Command::Import(a) => {
            let opts = ImportCommand {
                file: a.file,
                out: a.out,
                weights: a.weights,
                dims: a.dims,
                max_constant_elements: a.max_constant_elements,
            };
            match tensorjit::cli::import::import(&opts) {
                Ok(r) => {
                    match mode {
                        Mode::Human => drop(r.write_human(&mut out)),
                        Mode::Json => print_json(&r.to_json()),
                        Mode::Quiet => {}
                    }
                    0
                }
                Err(e) => fail(mode, "import", &e),
            }
        }
        Command::Info(a) => match tensorjit::cli::info::info(&a.file) {
            Ok(r) => {
                match mode {
                    Mode::Human => drop(r.write_human(&mut out)),
                    Mode::Json => print_json(&r.to_json()),
                    Mode::Quiet => {}
                }
                0
            }
            Err(e) => fail(mode, "info", &e),
        },
    };
    let _ = out.flush();
    ExitCode::from(code)
}
