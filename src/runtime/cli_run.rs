//! `tensorjit run`: executes the main function of an IR text file on NumPy `.npy` inputs and
//! writes the outputs as `.npy` files, reporting shapes, compile time and execution times.
//!
//! The library entry points are [`run`] (typed options in, a [`RunReport`] out) and
//! [`run_command`] (the CLI: parses arguments, runs, prints). The file conventions are in
//! [`RUN_HELP`] and `docs/cli.md`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use half::f16;
use npyz::{TypeChar, WriterBuilder};
use num_complex::{Complex32, Complex64};

use crate::api::backend::Executable;
use crate::api::buffer::Buffer;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};

/// The `--help` text of `tensorjit run`.
pub const RUN_HELP: &str = "\
usage: tensorjit run FILE.tjir --input NAME=PATH.npy ... --out DIR [--backend NAME[:OPTIONS]] [--repeat N]

Executes the main function of an IR text file (as written by the IR printer) with NumPy .npy
inputs and writes each output as DIR/out0.npy, DIR/out1.npy, ...

options:
  --input NAME=PATH  the .npy file for main's parameter NAME (one per parameter; every
                     parameter needs one, and every NAME must be a parameter)
  --out DIR          output directory (created if missing)
  --backend CONFIG   backend config, e.g. interp, jit, jit:parallelism=4
                     (default: $TENSORJIT_BACKEND, else the default backend)
  --repeat N         after one warm-up execution, execute N more times and print the median
                     and minimum time per execution
  --help             this text

dtype conventions (.npy has no bfloat16 and no sub-byte integers):
  bool, i8..i64, u8..u64, f16, f32, f64, c64, c128  native .npy dtypes (little-endian on write;
                     either byte order and C or Fortran order on read)
  bf16               stored as uint16 ('<u2') holding the raw bfloat16 bit patterns, same shape;
                     a bf16 parameter also takes such a uint16 file (a float32 file is rounded
                     to nearest even)
  i4,u4,i2,u2,i1,u1  stored as a 1-D uint8 array of the packed bytes (element 0 in the lowest
                     bits of byte 0); a packed parameter takes such a uint8 file
DIR/outputs.txt lists every output: file, dtype, shape and storage (native, bf16-bits-as-uint16
or packed-uint8).
";

/// Options of one `tensorjit run`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// The IR text file.
    pub file: PathBuf,
    /// `(parameter name, .npy path)` pairs.
    pub inputs: Vec<(String, PathBuf)>,
    /// Output directory.
    pub out: PathBuf,
    /// Backend config (`None`: [`crate::api::new`]).
    pub backend: Option<String>,
    /// Timed executions after the first one.
    pub repeat: Option<usize>,
}

/// How an output was stored in its `.npy` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// The .npy dtype is the tensor's dtype.
    Native,
    /// BFloat16 bit patterns in a uint16 array of the same shape.
    Bf16AsUint16,
    /// Packed sub-byte elements as a 1-D uint8 array of the bytes.
    PackedUint8,
}

impl Storage {
    /// The word used in `outputs.txt`.
    pub fn label(self) -> &'static str {
        match self {
            Storage::Native => "native",
            Storage::Bf16AsUint16 => "bf16-bits-as-uint16",
            Storage::PackedUint8 => "packed-uint8",
        }
    }
}

/// One written output.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputFile {
    /// Path of the .npy file.
    pub path: PathBuf,
    /// The tensor's shape.
    pub shape: Shape,
    /// How it was stored.
    pub storage: Storage,
}

/// Timings of `--repeat N`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RepeatStats {
    /// Number of timed executions.
    pub n: usize,
    /// Median time per execution.
    pub median: Duration,
    /// Minimum time per execution.
    pub min: Duration,
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
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
}

fn usage(msg: impl Into<String>) -> Error {
    Error::invalid("tensorjit run", msg)
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

/// Parses the arguments after `run`. `Ok(None)` means `--help` was asked for.
pub fn parse_args(args: &[String]) -> Result<Option<RunOptions>> {
    let mut o = RunOptions::default();
    let mut file = None;
    let mut out = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        // `--flag value` or `--flag=value`.
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        let mut value = |name: &str| -> Result<String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i).cloned().ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match flag {
            "--help" | "-h" => return Ok(None),
            "--input" | "-i" => {
                let v = value("--input")?;
                let (name, path) =
                    v.split_once('=').ok_or_else(|| usage(format!("--input {v:?}: expected NAME=PATH.npy")))?;
                if o.inputs.iter().any(|(n, _)| n == name) {
                    return Err(usage(format!("--input {name:?} given twice")));
                }
                o.inputs.push((name.to_string(), PathBuf::from(path)));
            }
            "--out" | "-o" => out = Some(PathBuf::from(value("--out")?)),
            "--backend" | "-b" => o.backend = Some(value("--backend")?),
            "--repeat" | "-r" => {
                let v = value("--repeat")?;
                match v.parse::<usize>() {
                    Ok(n) if n >= 1 => o.repeat = Some(n),
                    _ => return Err(usage(format!("--repeat needs a positive integer, got {v:?}"))),
                }
            }
            f if f.starts_with('-') && f.len() > 1 => return Err(usage(format!("unknown option {f:?} (see --help)"))),
            _ => {
                if file.is_some() {
                    return Err(usage(format!("more than one IR file given ({a:?})")));
                }
                file = Some(PathBuf::from(a));
            }
        }
        i += 1;
    }
    o.file = file.ok_or_else(|| usage("no IR file given (see --help)"))?;
    o.out = out.ok_or_else(|| usage("--out DIR is required"))?;
    Ok(Some(o))
}

/// The CLI entry point of `tensorjit run`: `args` are the arguments after `run`. Prints the
/// output shapes, the compile time and the execution time(s) to stdout.
pub fn run_command(args: &[String]) -> Result<()> {
    let Some(opts) = parse_args(args)? else {
        print!("{RUN_HELP}");
        return Ok(());
    };
    let report = run(&opts)?;
    let mut stdout = std::io::stdout().lock();
    print_report(&report, &mut stdout).map_err(|e| Error::Io(e.to_string()))
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// Writes the human summary of a run.
pub fn print_report(r: &RunReport, w: &mut impl Write) -> std::io::Result<()> {
    for (i, o) in r.outputs.iter().enumerate() {
        let note = match o.storage {
            Storage::Native => String::new(),
            Storage::Bf16AsUint16 => " (bf16 stored as uint16 bits)".into(),
            Storage::PackedUint8 => format!(" ({} stored as packed uint8 bytes)", o.shape.dtype.short_name()),
        };
        writeln!(w, "output {i}: {} -> {}{note}", o.shape, o.path.display())?;
    }
    writeln!(w, "backend: {}", r.backend)?;
    writeln!(w, "compile: {}", ms(r.compile_time))?;
    writeln!(w, "execute: {} (first execution)", ms(r.execute_time))?;
    if let Some(s) = r.repeat {
        writeln!(w, "repeat {}: median {} / execution, min {}", s.n, ms(s.median), ms(s.min))?;
    }
    Ok(())
}

/// Parses, verifies, compiles and executes `opts.file` and writes the outputs.
pub fn run(opts: &RunOptions) -> Result<RunReport> {
    let text = std::fs::read_to_string(&opts.file).map_err(|e| io_err(&opts.file, e))?;
    let module = crate::ir::text::parse_module(&text)?;
    crate::ir::verify::verify(&module)?;
    let main = module.func(module.main);
    let names = main.param_names.clone();
    let shapes = module.param_shapes(module.main);

    // Match the inputs to the parameters by name before compiling.
    let given: BTreeMap<&str, &Path> = opts.inputs.iter().map(|(n, p)| (n.as_str(), p.as_path())).collect();
    for (name, _) in &opts.inputs {
        if !names.contains(name) {
            return Err(usage(format!(
                "--input {name:?}: main has no parameter {name:?} (parameters: {})",
                names.join(", ")
            )));
        }
    }
    let mut buffers = Vec::with_capacity(names.len());
    for (i, (name, shape)) in names.iter().zip(&shapes).enumerate() {
        let path = given
            .get(name.as_str())
            .ok_or_else(|| usage(format!("parameter {i} ({name:?}, {shape}) has no --input {name}=PATH.npy")))?;
        let what = format!("parameter {i} ({name:?}) from {}", path.display());
        buffers.push(read_input(path, shape, &what)?);
    }

    let backend = match &opts.backend {
        Some(cfg) => crate::api::new_with_config(cfg)?,
        None => crate::api::new()?,
    };
    let t0 = Instant::now();
    let exe = backend.compile(module)?;
    let compile_time = t0.elapsed();

    let refs: Vec<&Buffer> = buffers.iter().collect();
    let t1 = Instant::now();
    let outs = exe.execute(&refs, &[])?;
    let execute_time = t1.elapsed();
    let repeat = match opts.repeat {
        Some(n) => Some(time_repeats(exe.as_ref(), &refs, n)?),
        None => None,
    };

    std::fs::create_dir_all(&opts.out).map_err(|e| io_err(&opts.out, e))?;
    let mut outputs = Vec::with_capacity(outs.len());
    let mut manifest = String::new();
    for (i, b) in outs.iter().enumerate() {
        let path = opts.out.join(format!("out{i}.npy"));
        let storage = write_output(&path, b)?;
        manifest.push_str(&format!("out{i}.npy {} {:?} {}\n", b.dtype().short_name(), b.shape().dims, storage.label()));
        outputs.push(OutputFile { path, shape: b.shape().clone(), storage });
    }
    let mpath = opts.out.join("outputs.txt");
    std::fs::write(&mpath, manifest).map_err(|e| io_err(&mpath, e))?;
    Ok(RunReport { backend: backend.name().to_string(), outputs, compile_time, execute_time, repeat })
}

fn time_repeats(exe: &dyn Executable, inputs: &[&Buffer], n: usize) -> Result<RepeatStats> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let outs = exe.execute(inputs, &[])?;
        drop(outs);
        times.push(t.elapsed());
    }
    times.sort();
    let median = if n % 2 == 1 { times[n / 2] } else { (times[n / 2 - 1] + times[n / 2]) / 2 };
    Ok(RepeatStats { n, median, min: times[0] })
}

/// The tensorjit dtype of a .npy type string.
fn npy_dtype(ts: &npyz::TypeStr) -> Option<DType> {
    let size = ts.size_field();
    Some(match (ts.type_char(), size) {
        (TypeChar::Bool, 1) => DType::Bool,
        (TypeChar::Int, 1) => DType::Int8,
        (TypeChar::Int, 2) => DType::Int16,
        (TypeChar::Int, 4) => DType::Int32,
        (TypeChar::Int, 8) => DType::Int64,
        (TypeChar::Uint, 1) => DType::Uint8,
        (TypeChar::Uint, 2) => DType::Uint16,
        (TypeChar::Uint, 4) => DType::Uint32,
        (TypeChar::Uint, 8) => DType::Uint64,
        (TypeChar::Float, 2) => DType::Float16,
        (TypeChar::Float, 4) => DType::Float32,
        (TypeChar::Float, 8) => DType::Float64,
        (TypeChar::Complex, 8) => DType::Complex64,
        (TypeChar::Complex, 16) => DType::Complex128,
        _ => return None,
    })
}

/// Reorders Fortran-order data (first index fastest) to C order.
fn fortran_to_c<T: Copy>(data: Vec<T>, dims: &[usize]) -> Vec<T> {
    let n = data.len();
    if dims.len() < 2 || n == 0 {
        return data;
    }
    // Fortran strides: axis 0 has stride 1.
    let mut fstride = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        fstride[k] = fstride[k - 1] * dims[k - 1];
    }
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        out.push(data[idx.iter().zip(&fstride).map(|(i, s)| i * s).sum::<usize>()]);
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

fn read_vec<T: npyz::Deserialize + Copy>(
    npy: npyz::NpyFile<BufReader<File>>,
    dims: &[usize],
    fortran: bool,
    what: &str,
) -> Result<Vec<T>> {
    let v = npy.into_vec::<T>().map_err(|e| Error::Io(format!("{what}: {e}")))?;
    Ok(if fortran { fortran_to_c(v, dims) } else { v })
}

/// Reads the .npy at `path` as a buffer for a parameter of shape `want`.
fn read_input(path: &Path, want: &Shape, what: &str) -> Result<Buffer> {
    let f = File::open(path).map_err(|e| io_err(path, e))?;
    let npy = npyz::NpyFile::new(BufReader::new(f)).map_err(|e| io_err(path, e))?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        return Err(usage(format!("{what}: structured .npy dtypes are not supported")));
    };
    let file_dtype = npy_dtype(&ts).ok_or_else(|| usage(format!("{what}: unsupported .npy dtype {ts}")))?;
    let dims: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let fortran = npy.order() == npyz::Order::Fortran;
    let n: usize = dims.iter().product();
    let mismatch = || usage(format!("{what}: file holds {} {dims:?}, the parameter is {want}", ts));
    let dims_match = |d: &[usize]| {
        d.len() == want.rank() && want.dims.iter().zip(d).all(|(&w, &g)| w == DYNAMIC_DIM || w == g as i64)
    };
    let want_dtype = want.dtype;
    if want_dtype.is_packed() {
        // Packed bytes in a uint8 file; the logical shape comes from the parameter.
        if file_dtype != DType::Uint8 || want.is_dynamic() || Some(n) != want.byte_size() {
            return Err(usage(format!(
                "{what}: a {} parameter {want} takes a uint8 .npy of {} packed bytes; file holds {ts} {dims:?}",
                want_dtype.short_name(),
                want.byte_size().map_or("?".to_string(), |b| b.to_string())
            )));
        }
        let bytes = read_vec::<u8>(npy, &dims, fortran, what)?;
        return Buffer::from_bytes(Shape::new(want_dtype, &want.dims), &bytes);
    }
    if !dims_match(&dims) {
        return Err(mismatch());
    }
    match (want_dtype, file_dtype) {
        (DType::BFloat16, DType::Uint16) => {
            let bits = read_vec::<u16>(npy, &dims, fortran, what)?;
            let v: Vec<half::bf16> = bits.into_iter().map(half::bf16::from_bits).collect();
            Buffer::from_slice(&v, &dims)
        }
        (DType::BFloat16, DType::Float32) => {
            let v: Vec<half::bf16> =
                read_vec::<f32>(npy, &dims, fortran, what)?.into_iter().map(half::bf16::from_f32).collect();
            Buffer::from_slice(&v, &dims)
        }
        (w, f) if w == f => match w {
            DType::Bool => Buffer::from_slice(&read_vec::<bool>(npy, &dims, fortran, what)?, &dims),
            DType::Int8 => Buffer::from_slice(&read_vec::<i8>(npy, &dims, fortran, what)?, &dims),
            DType::Int16 => Buffer::from_slice(&read_vec::<i16>(npy, &dims, fortran, what)?, &dims),
            DType::Int32 => Buffer::from_slice(&read_vec::<i32>(npy, &dims, fortran, what)?, &dims),
            DType::Int64 => Buffer::from_slice(&read_vec::<i64>(npy, &dims, fortran, what)?, &dims),
            DType::Uint8 => Buffer::from_slice(&read_vec::<u8>(npy, &dims, fortran, what)?, &dims),
            DType::Uint16 => Buffer::from_slice(&read_vec::<u16>(npy, &dims, fortran, what)?, &dims),
            DType::Uint32 => Buffer::from_slice(&read_vec::<u32>(npy, &dims, fortran, what)?, &dims),
            DType::Uint64 => Buffer::from_slice(&read_vec::<u64>(npy, &dims, fortran, what)?, &dims),
            DType::Float16 => Buffer::from_slice(&read_vec::<f16>(npy, &dims, fortran, what)?, &dims),
            DType::Float32 => Buffer::from_slice(&read_vec::<f32>(npy, &dims, fortran, what)?, &dims),
            DType::Float64 => Buffer::from_slice(&read_vec::<f64>(npy, &dims, fortran, what)?, &dims),
            DType::Complex64 => Buffer::from_slice(&read_vec::<Complex32>(npy, &dims, fortran, what)?, &dims),
            DType::Complex128 => Buffer::from_slice(&read_vec::<Complex64>(npy, &dims, fortran, what)?, &dims),
            _ => Err(mismatch()),
        },
        _ => Err(mismatch()),
    }
}

fn write_vec<T: npyz::Serialize + npyz::AutoSerialize + Copy>(path: &Path, dims: &[u64], data: &[T]) -> Result<()> {
    let f = File::create(path).map_err(|e| io_err(path, e))?;
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(dims)
        .writer(BufWriter::new(f))
        .begin_nd()
        .map_err(|e| io_err(path, e))?;
    w.extend(data.iter().cloned()).map_err(|e| io_err(path, e))?;
    w.finish().map_err(|e| io_err(path, e))
}

/// Writes one output buffer as .npy at `path` following the conventions of [`RUN_HELP`].
pub fn write_output(path: &Path, b: &Buffer) -> Result<Storage> {
    let dims: Vec<u64> = b.shape().dims.iter().map(|&d| d as u64).collect();
    let d = b.dtype();
    if d.is_packed() {
        let bytes = b.to_bytes()?;
        write_vec(path, &[bytes.len() as u64], &bytes)?;
        return Ok(Storage::PackedUint8);
    }
    match d {
        DType::Bool => write_vec(path, &dims, &b.to_vec::<bool>()?)?,
        DType::Int8 => write_vec(path, &dims, &b.to_vec::<i8>()?)?,
        DType::Int16 => write_vec(path, &dims, &b.to_vec::<i16>()?)?,
        DType::Int32 => write_vec(path, &dims, &b.to_vec::<i32>()?)?,
        DType::Int64 => write_vec(path, &dims, &b.to_vec::<i64>()?)?,
        DType::Uint8 => write_vec(path, &dims, &b.to_vec::<u8>()?)?,
        DType::Uint16 => write_vec(path, &dims, &b.to_vec::<u16>()?)?,
        DType::Uint32 => write_vec(path, &dims, &b.to_vec::<u32>()?)?,
        DType::Uint64 => write_vec(path, &dims, &b.to_vec::<u64>()?)?,
        DType::Float16 => write_vec(path, &dims, &b.to_vec::<f16>()?)?,
        DType::Float32 => write_vec(path, &dims, &b.to_vec::<f32>()?)?,
        DType::Float64 => write_vec(path, &dims, &b.to_vec::<f64>()?)?,
        DType::Complex64 => write_vec(path, &dims, &b.to_vec::<Complex32>()?)?,
        DType::Complex128 => write_vec(path, &dims, &b.to_vec::<Complex64>()?)?,
        DType::BFloat16 => {
            let bits: Vec<u16> = b.to_vec::<half::bf16>()?.into_iter().map(|x| x.to_bits()).collect();
            write_vec(path, &dims, &bits)?;
            return Ok(Storage::Bf16AsUint16);
        }
        other => return Err(Error::not_implemented("tensorjit run", format!("cannot write dtype {other}"))),
    }
    Ok(Storage::Native)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fortran_order_is_transposed() {
        // A 2x3 matrix [[1,2,3],[4,5,6]] in Fortran order is stored column by column.
        assert_eq!(fortran_to_c(vec![1, 4, 2, 5, 3, 6], &[2, 3]), vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn args() {
        let a: Vec<String> =
            ["m.tjir", "--input", "x=a.npy", "--input=y=b.npy", "--out", "o", "--repeat", "3", "--backend=interp"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        let o = parse_args(&a).unwrap().unwrap();
        assert_eq!(o.file, PathBuf::from("m.tjir"));
        assert_eq!(o.inputs, vec![("x".into(), PathBuf::from("a.npy")), ("y".into(), PathBuf::from("b.npy"))]);
        assert_eq!(o.out, PathBuf::from("o"));
        assert_eq!(o.repeat, Some(3));
        assert_eq!(o.backend.as_deref(), Some("interp"));
        assert_eq!(parse_args(&["--help".to_string()]).unwrap(), None);
        assert!(parse_args(&["m.tjir".to_string()]).is_err(), "--out is required");
        assert!(parse_args(&["m.tjir".into(), "--out".into(), "o".into(), "--repeat".into(), "0".into()]).is_err());
        assert!(parse_args(&["m.tjir".into(), "--bogus".into()]).is_err());
    }
}
