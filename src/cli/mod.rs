//! `tensorjit run`: executes the main function of an IR text file on NumPy `.npy` inputs and
//! writes the outputs as `.npy` files, reporting shapes, compile time and execution times.
//!
//! The library entry points are [`run`] (typed options in, a [`RunReport`] out) and
//! [`run_command`] (the CLI: parses arguments, runs, prints). The file conventions are in
//! [`RUN_HELP`] and `docs/cli.md`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use half::f16;
use npyz::WriterBuilder;
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
  --out DIR          output directory (created if missing; checked before executing)
  --backend CONFIG   backend config, e.g. interp, jit, jit:parallelism=4
                     (default: $TENSORJIT_BACKEND, else the default backend)
  --repeat N         after one warm-up execution, execute N more times (1 to 1000000) and
                     print the median and minimum time per execution
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
            "--out" | "-o" => {
                let v = value("--out")?;
                if v.is_empty() {
                    return Err(usage("--out needs a directory, got an empty string"));
                }
                out = Some(PathBuf::from(v));
            }
            "--backend" | "-b" => o.backend = Some(value("--backend")?),
            "--repeat" | "-r" => {
                let v = value("--repeat")?;
                match v.parse::<usize>() {
                    Ok(n) if (1..=MAX_REPEAT).contains(&n) => o.repeat = Some(n),
                    _ => {
                        return Err(usage(format!("--repeat needs an integer from 1 to {MAX_REPEAT}, got {v:?}")));
                    }
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
    if let Some(n) = opts.repeat
        && !(1..=MAX_REPEAT).contains(&n)
    {
        return Err(usage(format!("--repeat needs an integer from 1 to {MAX_REPEAT}, got {n}")));
    }
    let text = read_text_file(&opts.file)?;
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

    prepare_out_dir(&opts.out)?;
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

/// The most bytes a `.npy` header (the Python dict literal after the length field) may have.
/// NumPy writes headers of well under 1 KiB and refuses to read ones over 10 000 bytes by default.
pub const MAX_NPY_HEADER_BYTES: usize = 1 << 20;

/// The most timed executions `--repeat` accepts.
pub const MAX_REPEAT: usize = 1_000_000;

/// A decoded `.npy` array: its dtype, C-order dims and data (little-endian, C order).
#[derive(Clone, Debug, PartialEq)]
pub struct NpyArray {
    /// The element type written in the file.
    pub dtype: DType,
    /// The dims written in the file.
    pub dims: Vec<usize>,
    /// `dims.product() * dtype size` bytes, little-endian elements in C order.
    pub data: Vec<u8>,
}

fn npy_err(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid("tensorjit run", format!("{what}: {msg}"))
}

/// A read error of `part` of a .npy file.
fn read_err(what: &str, part: &str, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        npy_err(what, format!("truncated .npy file: it ends within its {part}"))
    } else {
        Error::Io(format!("{what}: {e}"))
    }
}

/// The tensorjit dtype and element size of a .npy type string such as `<f4`; `swap` is true when
/// its elements are big-endian.
fn npy_type(descr: &str, what: &str) -> Result<(DType, bool)> {
    let unsupported = || npy_err(what, format!("unsupported .npy dtype {descr:?}"));
    let mut chars = descr.chars();
    let swap = match chars.next() {
        Some('<') | Some('|') => false,
        Some('>') => cfg!(target_endian = "little"),
        Some('=') => false,
        _ => return Err(unsupported()),
    };
    let kind = chars.next().ok_or_else(unsupported)?;
    let size: usize = chars.as_str().parse().map_err(|_| unsupported())?;
    let dtype = match (kind, size) {
        ('b', 1) => DType::Bool,
        ('i', 1) => DType::Int8,
        ('i', 2) => DType::Int16,
        ('i', 4) => DType::Int32,
        ('i', 8) => DType::Int64,
        ('u', 1) => DType::Uint8,
        ('u', 2) => DType::Uint16,
        ('u', 4) => DType::Uint32,
        ('u', 8) => DType::Uint64,
        ('f', 2) => DType::Float16,
        ('f', 4) => DType::Float32,
        ('f', 8) => DType::Float64,
        ('c', 8) => DType::Complex64,
        ('c', 16) => DType::Complex128,
        _ => return Err(unsupported()),
    };
    Ok((dtype, swap && size > 1))
}

/// The fields of a .npy header dict.
struct NpyHeader {
    descr: String,
    fortran: bool,
    shape: Vec<u64>,
}

/// A cursor over the header text: a flat, non-recursive parser of the one dict literal NumPy
/// writes (`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`).
struct HeaderText<'a> {
    s: &'a [u8],
    pos: usize,
    what: &'a str,
}

impl<'a> HeaderText<'a> {
    fn err(&self, msg: impl std::fmt::Display) -> Error {
        npy_err(self.what, format!("bad .npy header at byte {}: {msg}", self.pos))
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    /// Skips whitespace and consumes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.eat(c) { Ok(()) } else { Err(self.err(format!("expected `{}`", c as char))) }
    }

    /// A quoted string without escapes.
    fn string(&mut self) -> Result<String> {
        self.skip_ws();
        let q = match self.s.get(self.pos) {
            Some(&q @ (b'\'' | b'"')) => q,
            Some(b'[') => return Err(npy_err(self.what, "structured .npy dtypes are not supported")),
            _ => return Err(self.err("expected a quoted string")),
        };
        let start = self.pos + 1;
        let len = self.s[start..].iter().position(|&c| c == q).ok_or_else(|| self.err("unterminated string"))?;
        self.pos = start + len + 1;
        std::str::from_utf8(&self.s[start..start + len])
            .map(str::to_string)
            .map_err(|_| self.err("string is not UTF-8"))
    }

    fn word(&mut self) -> &'a [u8] {
        self.skip_ws();
        let start = self.pos;
        while self.pos < self.s.len() && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_') {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    fn boolean(&mut self) -> Result<bool> {
        match self.word() {
            b"True" => Ok(true),
            b"False" => Ok(false),
            _ => Err(self.err("expected True or False")),
        }
    }

    /// `(d0, d1, ...)` (or a list), each a non-negative integer.
    fn shape(&mut self) -> Result<Vec<u64>> {
        let close = if self.eat(b'(') {
            b')'
        } else if self.eat(b'[') {
            b']'
        } else {
            return Err(self.err("expected a shape tuple"));
        };
        let mut dims = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(dims);
            }
            if dims.len() == crate::limits::MAX_RANK {
                return Err(Error::limit(
                    self.what,
                    format!(".npy shape has more than {} dimensions", crate::limits::MAX_RANK),
                ));
            }
            let w = self.word();
            let d = std::str::from_utf8(w).ok().and_then(|w| w.parse::<u64>().ok());
            dims.push(d.ok_or_else(|| self.err("expected a non-negative integer dimension"))?);
            if !self.eat(b',') {
                self.expect(close)?;
                return Ok(dims);
            }
        }
    }

    fn header(&mut self) -> Result<NpyHeader> {
        let (mut descr, mut fortran, mut shape) = (None, None, None);
        self.expect(b'{')?;
        while !self.eat(b'}') {
            let key = self.string()?;
            self.expect(b':')?;
            let dup = match key.as_str() {
                "descr" => descr.replace(self.string()?).is_some(),
                "fortran_order" => fortran.replace(self.boolean()?).is_some(),
                "shape" => shape.replace(self.shape()?).is_some(),
                other => return Err(self.err(format!("unknown key {other:?}"))),
            };
            if dup {
                return Err(self.err(format!("key {key:?} given twice")));
            }
            if !self.eat(b',') {
                self.expect(b'}')?;
                break;
            }
        }
        self.skip_ws();
        if self.pos != self.s.len() {
            return Err(self.err("unexpected text after the header dict"));
        }
        match (descr, fortran, shape) {
            (Some(descr), Some(fortran), Some(shape)) => Ok(NpyHeader { descr, fortran, shape }),
            _ => Err(self.err("the header needs the keys 'descr', 'fortran_order' and 'shape'")),
        }
    }
}

/// Reads a whole `.npy` file of `len` bytes from `r`. Every size in the file is checked against
/// `len` (and the header against [`MAX_NPY_HEADER_BYTES`], the data against
/// [`crate::limits::max_tensor_bytes`]) before anything is allocated; a file with bytes after
/// the data is rejected. `what` names the file in errors.
pub fn read_npy(r: &mut impl Read, len: u64, what: &str) -> Result<NpyArray> {
    let mut pre = [0u8; 8];
    r.read_exact(&mut pre).map_err(|e| read_err(what, "magic string", e))?;
    if &pre[..6] != b"\x93NUMPY" {
        return Err(npy_err(what, "not a .npy file (no \\x93NUMPY magic)"));
    }
    let header_len = match pre[6] {
        1 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b).map_err(|e| read_err(what, "header length", e))?;
            u16::from_le_bytes(b) as u64
        }
        2 | 3 => {
            let mut b = [0u8; 4];
            r.read_exact(&mut b).map_err(|e| read_err(what, "header length", e))?;
            u32::from_le_bytes(b) as u64
        }
        v => return Err(npy_err(what, format!("unsupported .npy format version {v}.{}", pre[7]))),
    };
    let prefix = if pre[6] == 1 { 10 } else { 12 };
    let header_end = prefix + header_len;
    if header_end > len {
        return Err(npy_err(what, format!("the header claims {header_len} bytes but the file has {len} bytes")));
    }
    if header_len > MAX_NPY_HEADER_BYTES as u64 {
        return Err(Error::limit(
            what,
            format!(".npy header of {header_len} bytes; at most {MAX_NPY_HEADER_BYTES} are allowed"),
        ));
    }
    let mut text = vec![0u8; header_len as usize];
    r.read_exact(&mut text).map_err(|e| read_err(what, "header", e))?;
    let h = HeaderText { s: &text, pos: 0, what }.header()?;
    let (dtype, swap) = npy_type(&h.descr, what)?;
    let elem = dtype.bits() / 8;

    let too_big = || {
        Error::limit(
            what,
            format!(
                ".npy shape {:?} of {} exceeds the tensor size limit of {} bytes",
                h.shape,
                h.descr,
                crate::limits::max_tensor_bytes()
            ),
        )
    };
    let mut dims = Vec::with_capacity(h.shape.len());
    let mut n: usize = 1;
    for &d in &h.shape {
        // Each dim must also be a valid shape dim (an i64), even where another dim is 0.
        let d = usize::try_from(d).ok().filter(|&d| d as u64 <= i64::MAX as u64).ok_or_else(too_big)?;
        n = n.checked_mul(d).ok_or_else(too_big)?;
        dims.push(d);
    }
    let bytes = n.checked_mul(elem).filter(|&b| b <= crate::limits::max_tensor_bytes()).ok_or_else(too_big)?;
    let present = len - header_end;
    if (bytes as u64) != present {
        return Err(npy_err(
            what,
            if (bytes as u64) > present {
                format!(
                    "truncated: shape {:?} of {} needs {bytes} data bytes, the file has {present}",
                    h.shape, h.descr
                )
            } else {
                format!(
                    "{} trailing bytes after the data of shape {:?} of {}",
                    present - bytes as u64,
                    h.shape,
                    h.descr
                )
            },
        ));
    }
    let mut data = Vec::new();
    data.try_reserve_exact(bytes).map_err(|_| Error::out_of_memory(what, bytes))?;
    data.resize(bytes, 0);
    r.read_exact(&mut data).map_err(|e| read_err(what, "data", e))?;
    // The file may have grown since its size was taken.
    if r.read(&mut [0u8; 1]).map_err(|e| read_err(what, "data", e))? != 0 {
        return Err(npy_err(what, "trailing bytes after the data"));
    }
    if swap {
        // Complex numbers are two floats, each swapped on its own.
        let part = if dtype.is_complex() { elem / 2 } else { elem };
        data.chunks_exact_mut(part).for_each(|c| c.reverse());
    }
    if h.fortran {
        data = fortran_to_c(&data, elem, &dims);
    }
    Ok(NpyArray { dtype, dims, data })
}

/// Reads the `.npy` bytes `bytes` (a whole file) as [`read_npy`] does.
pub fn read_npy_bytes(bytes: &[u8], what: &str) -> Result<NpyArray> {
    read_npy(&mut &bytes[..], bytes.len() as u64, what)
}

/// Reorders Fortran-order data (first index fastest) of `elem`-byte elements to C order.
fn fortran_to_c(data: &[u8], elem: usize, dims: &[usize]) -> Vec<u8> {
    let n = data.len() / elem.max(1);
    if dims.len() < 2 || n == 0 {
        return data.to_vec();
    }
    // Fortran strides (in elements): axis 0 has stride 1.
    let mut fstride = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        fstride[k] = fstride[k - 1] * dims[k - 1];
    }
    let mut out = Vec::with_capacity(data.len());
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        let at = idx.iter().zip(&fstride).map(|(i, s)| i * s).sum::<usize>() * elem;
        out.extend_from_slice(&data[at..at + elem]);
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

impl NpyArray {
    /// The array as a buffer of its own dtype and dims.
    pub fn into_buffer(self) -> Result<Buffer> {
        Buffer::from_bytes(Shape::from_usize(self.dtype, &self.dims), &self.data)
    }

    /// The array as a buffer for a parameter of shape `want`, following the conventions of
    /// [`RUN_HELP`] (bf16 from uint16 bits or float32, packed dtypes from uint8 bytes).
    pub fn into_buffer_for(self, want: &Shape, what: &str) -> Result<Buffer> {
        let NpyArray { dtype: file_dtype, dims, data } = self;
        let n: usize = dims.iter().product();
        if want.dtype.is_packed() {
            // Packed bytes in a uint8 file; the logical shape comes from the parameter.
            if file_dtype != DType::Uint8 || want.is_dynamic() || Some(n) != want.byte_size() {
                return Err(usage(format!(
                    "{what}: a {} parameter {want} takes a uint8 .npy of {} packed bytes; file holds {} {dims:?}",
                    want.dtype.short_name(),
                    want.byte_size().map_or("?".to_string(), |b| b.to_string()),
                    file_dtype.short_name()
                )));
            }
            return Buffer::from_bytes(Shape::new(want.dtype, &want.dims), &data);
        }
        let dims_match =
            dims.len() == want.rank() && want.dims.iter().zip(&dims).all(|(&w, &g)| w == DYNAMIC_DIM || w == g as i64);
        let mismatch =
            || usage(format!("{what}: file holds {} {dims:?}, the parameter is {want}", file_dtype.short_name()));
        if !dims_match {
            return Err(mismatch());
        }
        match (want.dtype, file_dtype) {
            (DType::BFloat16, DType::Uint16) => Buffer::from_bytes(Shape::from_usize(DType::BFloat16, &dims), &data),
            (DType::BFloat16, DType::Float32) => {
                let bf: Vec<u8> = data
                    .chunks_exact(4)
                    .flat_map(|c| half::bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
                    .collect();
                Buffer::from_bytes(Shape::from_usize(DType::BFloat16, &dims), &bf)
            }
            (w, f) if w == f => Buffer::from_bytes(Shape::from_usize(w, &dims), &data),
            _ => Err(mismatch()),
        }
    }
}

/// Reads the .npy at `path` as a buffer for a parameter of shape `want`.
fn read_input(path: &Path, want: &Shape, what: &str) -> Result<Buffer> {
    let f = File::open(path).map_err(|e| io_err(path, e))?;
    let meta = f.metadata().map_err(|e| io_err(path, e))?;
    if !meta.is_file() {
        return Err(usage(format!("{what}: not a regular file")));
    }
    if meta.len() > crate::limits::MAX_INPUT_FILE_BYTES {
        return Err(Error::limit(
            what,
            format!("{} bytes; input files may have at most {}", meta.len(), crate::limits::MAX_INPUT_FILE_BYTES),
        ));
    }
    read_npy(&mut BufReader::new(f), meta.len(), what)?.into_buffer_for(want, what)
}

/// Reads a whole IR text from `r` (`name` names it in errors), in chunks: stops with an error
/// at the first NUL byte, past [`crate::limits::MAX_INPUT_FILE_BYTES`] bytes, or on invalid
/// UTF-8.
pub fn read_text(r: impl Read, name: &str) -> Result<String> {
    const CHUNK: usize = 64 << 10;
    let max = crate::limits::MAX_INPUT_FILE_BYTES;
    let mut r = r.take(max + 1);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let k = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Io(format!("{name}: {e}"))),
        };
        if let Some(i) = chunk[..k].iter().position(|&b| b == 0) {
            return Err(Error::invalid(name, format!("NUL byte at offset {}: not an IR text file", buf.len() + i)));
        }
        if (buf.len() + k) as u64 > max {
            return Err(Error::limit(name, format!("larger than {max} bytes")));
        }
        buf.try_reserve(k).map_err(|_| Error::out_of_memory(name, buf.len() + k))?;
        buf.extend_from_slice(&chunk[..k]);
    }
    String::from_utf8(buf).map_err(|e| {
        Error::invalid(name, format!("not UTF-8 text (invalid byte at offset {})", e.utf8_error().valid_up_to()))
    })
}

/// Reads the IR text file `path` with [`read_text`] (`-` is standard input).
pub fn read_text_file(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        return read_text(std::io::stdin().lock(), "<stdin>");
    }
    let f = File::open(path).map_err(|e| io_err(path, e))?;
    if f.metadata().map_err(|e| io_err(path, e))?.is_dir() {
        return Err(Error::Io(format!("{}: is a directory", path.display())));
    }
    read_text(f, &path.display().to_string())
}

/// Checks that `out` can take the outputs before anything is executed: a non-empty path that
/// is a directory or can be created as one, and in which a file can be created.
pub fn prepare_out_dir(out: &Path) -> Result<()> {
    if out.as_os_str().is_empty() {
        return Err(usage("--out: the output directory must not be empty"));
    }
    if out.exists() && !out.is_dir() {
        return Err(usage(format!("--out {}: exists and is not a directory", out.display())));
    }
    std::fs::create_dir_all(out).map_err(|e| io_err(out, format!("cannot create the output directory: {e}")))?;
    let probe = out.join(format!(".tensorjit-write-test-{}", std::process::id()));
    File::create(&probe).map_err(|e| io_err(out, format!("the output directory is not writable: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
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
        assert_eq!(fortran_to_c(&[1, 4, 2, 5, 3, 6], 1, &[2, 3]), vec![1, 2, 3, 4, 5, 6]);
        // Two-byte elements move as a whole.
        assert_eq!(fortran_to_c(&[1, 0, 4, 0, 2, 0, 5, 0], 2, &[2, 2]), vec![1, 0, 2, 0, 4, 0, 5, 0]);
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
