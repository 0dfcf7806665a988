//! The bounded `.npy` reader and writer, with the dtype conventions of `docs/cli.md` for the
//! dtypes `.npy` lacks (bf16 as uint16 bits, packed sub-byte dtypes as uint8 bytes).
//!
//! Every size a file claims is checked against the file's real size and the per-tensor limit
//! before anything is allocated; [`read_npy_bytes`] is the entry point of the `npy` fuzz target.
//! `tensorjit run` reads its inputs with [`read_npy_file`] and writes its outputs with
//! [`write_npy`]; [`crate::weights::load_npy`] and the `.npz` loader use [`read_npy`].

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use half::f16;
use npyz::WriterBuilder;
use num_complex::{Complex32, Complex64};

use crate::api::buffer::Buffer;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::shape::{DYNAMIC_DIM, Shape};

fn usage(msg: impl Into<String>) -> Error {
    Error::invalid("npy", msg)
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

/// How an output was stored in its `.npy` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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

/// The most bytes a `.npy` header (the Python dict literal after the length field) may have.
/// NumPy writes headers of well under 1 KiB and refuses to read ones over 10 000 bytes by default.
pub const MAX_NPY_HEADER_BYTES: usize = 1 << 20;

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
    Error::invalid("npy", format!("{what}: {msg}"))
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
    /// `docs/cli.md` (bf16 from uint16 bits or float32, packed dtypes from uint8 bytes).
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

/// Opens `path` for reading: a regular file of at most [`crate::limits::MAX_INPUT_FILE_BYTES`]
/// bytes; returns it and its size. `what` names it in errors.
pub(crate) fn open_bounded(path: &Path, what: &str) -> Result<(File, u64)> {
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
    Ok((f, meta.len()))
}

/// Reads the whole .npy file at `path` (a regular file of at most
/// [`crate::limits::MAX_INPUT_FILE_BYTES`] bytes) with [`read_npy`]; `what` names it in errors.
pub fn read_npy_path(path: &Path, what: &str) -> Result<NpyArray> {
    let (f, len) = open_bounded(path, what)?;
    read_npy(&mut BufReader::new(f), len, what)
}

/// Reads the .npy at `path` (see [`read_npy_path`]) as a buffer for a parameter of shape
/// `want`, with the conventions of [`NpyArray::into_buffer_for`]; `what` names it in errors.
pub fn read_npy_file(path: &Path, want: &Shape, what: &str) -> Result<Buffer> {
    read_npy_path(path, what)?.into_buffer_for(want, what)
}

fn write_vec<W: Write, T: npyz::Serialize + npyz::AutoSerialize + Copy>(
    w: W,
    dims: &[u64],
    data: &[T],
    what: &str,
) -> Result<()> {
    let io = |e: std::io::Error| Error::Io(format!("{what}: {e}"));
    let mut w = npyz::WriteOptions::new().default_dtype().shape(dims).writer(w).begin_nd().map_err(io)?;
    w.extend(data.iter().cloned()).map_err(io)?;
    w.finish().map_err(io)
}

/// Writes the buffer `b` as a .npy file at `path` (created or truncated), following the
/// conventions of `docs/cli.md` for bf16 and the packed dtypes; says how it was stored.
pub fn write_npy(path: &Path, b: &Buffer) -> Result<Storage> {
    let f = File::create(path).map_err(|e| io_err(path, e))?;
    let mut w = BufWriter::new(f);
    let storage = write_npy_to(&mut w, b, &path.display().to_string())?;
    w.flush().map_err(|e| io_err(path, e))?;
    Ok(storage)
}

/// Writes the buffer `b` as `.npy` bytes to `w` (see [`write_npy`]); `what` names the
/// destination in errors.
pub fn write_npy_to(w: &mut impl Write, b: &Buffer, what: &str) -> Result<Storage> {
    let dims: Vec<u64> = b.shape().dims.iter().map(|&d| d as u64).collect();
    let d = b.dtype();
    if d.is_packed() {
        let bytes = b.to_bytes()?;
        write_vec(w, &[bytes.len() as u64], &bytes, what)?;
        return Ok(Storage::PackedUint8);
    }
    match d {
        DType::Bool => write_vec(w, &dims, &b.to_vec::<bool>()?, what)?,
        DType::Int8 => write_vec(w, &dims, &b.to_vec::<i8>()?, what)?,
        DType::Int16 => write_vec(w, &dims, &b.to_vec::<i16>()?, what)?,
        DType::Int32 => write_vec(w, &dims, &b.to_vec::<i32>()?, what)?,
        DType::Int64 => write_vec(w, &dims, &b.to_vec::<i64>()?, what)?,
        DType::Uint8 => write_vec(w, &dims, &b.to_vec::<u8>()?, what)?,
        DType::Uint16 => write_vec(w, &dims, &b.to_vec::<u16>()?, what)?,
        DType::Uint32 => write_vec(w, &dims, &b.to_vec::<u32>()?, what)?,
        DType::Uint64 => write_vec(w, &dims, &b.to_vec::<u64>()?, what)?,
        DType::Float16 => write_vec(w, &dims, &b.to_vec::<f16>()?, what)?,
        DType::Float32 => write_vec(w, &dims, &b.to_vec::<f32>()?, what)?,
        DType::Float64 => write_vec(w, &dims, &b.to_vec::<f64>()?, what)?,
        DType::Complex64 => write_vec(w, &dims, &b.to_vec::<Complex32>()?, what)?,
        DType::Complex128 => write_vec(w, &dims, &b.to_vec::<Complex64>()?, what)?,
        DType::BFloat16 => {
            let bits: Vec<u16> = b.to_vec::<half::bf16>()?.into_iter().map(|x| x.to_bits()).collect();
            write_vec(w, &dims, &bits, what)?;
            return Ok(Storage::Bf16AsUint16);
        }
        other => return Err(Error::not_implemented("npy", format!("{what}: cannot write dtype {other}"))),
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
}
