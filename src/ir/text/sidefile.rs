//! Constants whose data lives in a side file, so that the IR text of a model with large
//! weights stays readable and still replays.
//!
//! The printer ([`crate::ir::text::print_module_with_side_file`]) writes a large constant as
//!
//! ```text
//! %1 = constant file("constants.bin", offset=0, bytes=589824, hash="xxh64:4fd2…", first=[0.1, …]) : f32[384,384]
//! ```
//!
//! and appends its bytes (little-endian, row-major, exactly the constant's in-memory data) to a
//! [`SideFile`]; the parser ([`crate::ir::text::parse_module_with_constants`]) reads them back
//! through a [`SideFileReader`] rooted at the IR file's directory, checking the byte range
//! against the file's size and the [XXH64](super::xxh64) hash of the bytes. `first=` repeats the
//! leading values for the reader; the parser does not check it. Blobs start at multiples of 64
//! bytes; identical constants are stored once.
//!
//! A side file made with [`SideFile::safetensors`] is a safetensors file instead, whose tensors
//! the text names:
//!
//! ```text
//! %1 = constant safetensors("model.safetensors", "encoder.layer.0.attention.self.query.weight") : f32[384,384]
//! ```
//!
//! The parser checks the tensor's dtype and dims against the constant's type (a dtype the
//! format has no code for — complex128, packed sub-byte integers, some float8s — is stored as a
//! 1-D `U8` tensor of the constant's bytes). Such files are ordinary weight files: any
//! safetensors reader (and [`crate::weights`]) opens them, and a text may refer to a weight
//! file it did not write.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::op::ConstData;
use crate::ir::shape::Shape;
use crate::ir::text::format_shape;
use crate::ir::text::safetensors::{SafetensorsFile, to_safetensors_dtype};
use crate::ir::text::xxh64::xxh64;

/// The prefix of a hash in the text (`hash="xxh64:00112233aabbccdd"`).
pub const HASH_PREFIX: &str = "xxh64:";

/// Blobs start at multiples of this many bytes (so a reader may map them aligned).
const ALIGN: u64 = 64;

/// `hash` as written in the text.
pub fn format_hash(hash: u64) -> String {
    format!("{HASH_PREFIX}{hash:016x}")
}

/// The hash written as `xxh64:` and 16 hex digits, or `None`.
pub fn parse_hash(s: &str) -> Option<u64> {
    let hex = s.strip_prefix(HASH_PREFIX)?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Checks a side file's name as written in the text: a relative path below the IR file's
/// directory (no `..`, `.`, root or drive components), so that a text cannot make the parser
/// read files elsewhere.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let bad = || {
        format!(
            "constant data file {name:?}: the name must be a relative path below the IR file's directory \
             (no `..`, no absolute path)"
        )
    };
    if name.is_empty() || name.contains('\0') {
        return Err(bad());
    }
    let p = Path::new(name);
    if p.is_absolute() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(bad());
    }
    Ok(())
}

/// Where one constant's data was put in a [`SideFile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobRef {
    /// Byte offset in the file.
    pub offset: u64,
    /// Number of bytes.
    pub bytes: u64,
    /// XXH64 of the bytes.
    pub hash: u64,
}

/// The format of a [`SideFile`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SideFormat {
    /// Raw blobs, 64-byte aligned, referenced as `file("NAME", offset=…, bytes=…, hash=…)`.
    Raw,
    /// A safetensors file whose tensors are referenced by name: `safetensors("NAME", "TENSOR")`.
    Safetensors,
}

/// One tensor of a safetensors side file.
#[derive(Debug)]
struct SideTensor {
    name: String,
    dtype: safetensors::Dtype,
    dims: Vec<usize>,
    /// Index into `blobs`.
    blob: usize,
}

/// A tensor to serialise (the safetensors crate's view of it).
struct TensorView<'a> {
    dtype: safetensors::Dtype,
    dims: &'a [usize],
    data: &'a [u8],
}

impl safetensors::View for TensorView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        self.dims
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data)
    }

    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The data of the constants a printer wrote by reference, to be written as one file; shared by
/// every module printed with it (identical data is stored once). It holds the constants'
/// shared buffers, not copies.
#[derive(Debug)]
pub struct SideFile {
    name: String,
    format: SideFormat,
    blobs: Vec<(BlobRef, ConstData)>,
    /// Blob index by the address of a constant's shared buffer (held in `blobs`, so an address
    /// is never reused while this file exists): a constant printed again is not hashed again.
    by_address: HashMap<usize, usize>,
    /// Blob indices by (hash, length).
    by_hash: HashMap<(u64, u64), Vec<usize>>,
    len: u64,
    /// Safetensors format: the tensors, and their index by (blob, dtype, dims).
    tensors: Vec<SideTensor>,
    tensor_index: HashMap<(usize, String, Vec<usize>), usize>,
    /// Names suggested for data with a given (hash, length) (see [`SideFile::suggest_name`]).
    hints: HashMap<(u64, u64), String>,
    /// The suggested names (kept free for the data they were suggested for).
    hint_names: HashSet<String>,
    used_names: HashSet<String>,
    next_name: usize,
}

impl SideFile {
    /// An empty side file that the text will name `name` (a relative path, see [`check_name`];
    /// usually a bare file name, the file then lying next to the IR text).
    pub fn new(name: &str) -> Result<SideFile> {
        SideFile::with_format(name, SideFormat::Raw)
    }

    /// An empty safetensors side file that the text will name `name`: constants are written
    /// `safetensors("NAME", "TENSOR")`, with tensor names from [`SideFile::suggest_name`] or
    /// generated (`c0`, `c1`, …).
    pub fn safetensors(name: &str) -> Result<SideFile> {
        SideFile::with_format(name, SideFormat::Safetensors)
    }

    /// An empty side file of the format its name implies: safetensors for a name ending in
    /// `.safetensors`, raw blobs otherwise.
    pub fn for_name(name: &str) -> Result<SideFile> {
        let st = Path::new(name).extension().is_some_and(|e| e == crate::ir::text::safetensors::EXTENSION);
        SideFile::with_format(name, if st { SideFormat::Safetensors } else { SideFormat::Raw })
    }

    /// An empty side file of format `format`.
    pub fn with_format(name: &str, format: SideFormat) -> Result<SideFile> {
        check_name(name).map_err(|e| Error::invalid("constants side file", e))?;
        Ok(SideFile {
            name: name.to_string(),
            format,
            blobs: Vec::new(),
            by_address: HashMap::new(),
            by_hash: HashMap::new(),
            len: 0,
            tensors: Vec::new(),
            tensor_index: HashMap::new(),
            hints: HashMap::new(),
            hint_names: HashSet::new(),
            used_names: HashSet::new(),
            next_name: 0,
        })
    }

    /// Its format.
    pub fn format(&self) -> SideFormat {
        self.format
    }

    /// Whether it is a safetensors file.
    pub fn is_safetensors(&self) -> bool {
        self.format == SideFormat::Safetensors
    }

    /// Names a constant holding exactly `data` `name` in a safetensors side file, should it
    /// be added (the first name suggested for the same data wins; a name already taken, or
    /// `__metadata__`, is not used). `tensorjit import` passes the ONNX initializers' names.
    pub fn suggest_name(&mut self, data: &[u8], name: &str) {
        if name.is_empty() || name == "__metadata__" {
            return;
        }
        let slot = self.hints.entry((xxh64(data), data.len() as u64)).or_insert_with(|| name.to_string());
        self.hint_names.insert(slot.clone());
    }

    /// The name written in the text.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's size in bytes so far (raw format); for safetensors, the bytes of its
    /// tensors' data (the header comes on top).
    pub fn len(&self) -> u64 {
        match self.format {
            SideFormat::Raw => self.len,
            SideFormat::Safetensors => self.tensors.iter().map(|t| self.blobs[t.blob].0.bytes).sum(),
        }
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Number of distinct blobs (raw format) or tensors (safetensors).
    pub fn blob_count(&self) -> usize {
        match self.format {
            SideFormat::Raw => self.blobs.len(),
            SideFormat::Safetensors => self.tensors.len(),
        }
    }

    /// Adds a constant's data (or finds it already stored) and says where it is (the raw
    /// format's reference; see [`SideFile::add_tensor`] for safetensors).
    pub fn add(&mut self, data: &ConstData) -> BlobRef {
        let i = self.blob_index(data);
        self.blobs[i].0
    }

    /// Adds a constant of type `shape` to a safetensors side file (or finds it already there)
    /// and returns its tensor name. A dtype the format has no code for (or data that is not
    /// exactly `shape`'s bytes) is stored as a 1-D `U8` tensor of the bytes.
    pub fn add_tensor(&mut self, shape: &Shape, data: &ConstData) -> String {
        let blob = self.blob_index(data);
        let bytes = data.0.len();
        let (dtype, dims) = match to_safetensors_dtype(shape.dtype) {
            Some(d) if !shape.is_dynamic() && shape.byte_size() == Some(bytes) => (d, shape.udims()),
            _ => (safetensors::Dtype::U8, vec![bytes]),
        };
        let key = (blob, dtype.to_string(), dims);
        if let Some(&t) = self.tensor_index.get(&key) {
            return self.tensors[t].name.clone();
        }
        let r = self.blobs[blob].0;
        let name = match self.hints.get(&(r.hash, r.bytes)) {
            Some(h) if !self.used_names.contains(h) => h.clone(),
            _ => loop {
                let n = format!("c{}", self.next_name);
                self.next_name += 1;
                if !self.used_names.contains(&n) && !self.hint_names.contains(&n) {
                    break n;
                }
            },
        };
        self.used_names.insert(name.clone());
        self.tensors.push(SideTensor { name: name.clone(), dtype, dims: key.2.clone(), blob });
        self.tensor_index.insert(key, self.tensors.len() - 1);
        name
    }

    /// The index in `blobs` of `data` (added if new).
    fn blob_index(&mut self, data: &ConstData) -> usize {
        let address = Arc::as_ptr(&data.0) as usize;
        if let Some(&i) = self.by_address.get(&address) {
            return i;
        }
        let bytes = data.0.len() as u64;
        let hash = xxh64(&data.0);
        let same = self
            .by_hash
            .get(&(hash, bytes))
            .and_then(|c| c.iter().copied().find(|&i| self.blobs[i].1.0.as_slice() == data.0.as_slice()));
        let i = match same {
            Some(i) => i,
            None => {
                let offset = self.len.next_multiple_of(ALIGN);
                let r = BlobRef { offset, bytes, hash };
                self.len = offset + bytes;
                self.blobs.push((r, data.clone()));
                self.by_hash.entry((hash, bytes)).or_default().push(self.blobs.len() - 1);
                self.blobs.len() - 1
            }
        };
        self.by_address.insert(address, i);
        i
    }

    /// The safetensors views of the tensors.
    fn views(&self) -> Vec<(&str, TensorView<'_>)> {
        self.tensors
            .iter()
            .map(|t| {
                let data = self.blobs[t.blob].1.0.as_slice();
                (t.name.as_str(), TensorView { dtype: t.dtype, dims: &t.dims, data })
            })
            .collect()
    }

    /// Writes the file's bytes to `w`: blobs with zero padding between them, or the
    /// safetensors file (built in memory first: use [`SideFile::write_file`] for large ones).
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        if self.is_safetensors() {
            let bytes = safetensors::serialize(self.views(), None).map_err(std::io::Error::other)?;
            return w.write_all(&bytes);
        }
        let mut at = 0u64;
        let zeros = [0u8; ALIGN as usize];
        for (r, data) in &self.blobs {
            w.write_all(&zeros[..(r.offset - at) as usize])?;
            w.write_all(&data.0)?;
            at = r.offset + r.bytes;
        }
        Ok(())
    }

    /// Writes the file at `path` (created or truncated).
    pub fn write_file(&self, path: &Path) -> Result<()> {
        let io = |e: std::io::Error| Error::Io(format!("{}: cannot write the constants file: {e}", path.display()));
        if self.is_safetensors() {
            // Streams the tensors to a temporary file next to `path`, then renames it.
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let target = dir.join(path.file_name().ok_or_else(|| io(std::io::Error::other("not a file name")))?);
            return safetensors::serialize_to_file(self.views(), None, &target)
                .map_err(|e| Error::Io(format!("{}: cannot write the constants file: {e}", path.display())));
        }
        let mut w = std::io::BufWriter::new(File::create(path).map_err(io)?);
        self.write_to(&mut w).map_err(io)?;
        w.flush().map_err(io)
    }
}

struct OpenFile {
    file: File,
    path: PathBuf,
    len: u64,
    /// Bytes read from it so far (distinct ranges).
    read: u64,
}

/// Reads constant data from side files in one directory, for the parser. Every read is checked
/// before anything is allocated: the range lies within the file, is within the per-tensor
/// limit ([`crate::limits::max_tensor_bytes`]), and the distinct ranges read from one file add
/// up to at most its size (the printer never writes overlapping ranges, so a hostile text
/// cannot make the parser hold a file's bytes many times over); the bytes must have the hash
/// the text gives. A range read twice is shared.
///
/// Safetensors side files (`safetensors("NAME", "TENSOR")`) are mapped once per parse; each
/// tensor's dtype and dims must be the constant's type, and a tensor named twice is read once
/// (the format's tensors do not overlap, so a text cannot make the parser hold more than the
/// file's size either).
pub struct SideFileReader {
    dir: PathBuf,
    files: HashMap<String, OpenFile>,
    /// `(name, offset, bytes)` → (hash, data) of every range read.
    cache: HashMap<RangeKey, (u64, Arc<Vec<u8>>)>,
    /// Safetensors files by name.
    tensor_files: HashMap<String, SafetensorsFile>,
    /// `(file, tensor)` → data of every tensor read.
    tensor_cache: HashMap<(String, String), Arc<Vec<u8>>>,
}

type RangeKey = (String, u64, u64);

impl SideFileReader {
    /// A reader resolving names relative to `dir`.
    pub fn new(dir: &Path) -> SideFileReader {
        SideFileReader {
            dir: dir.to_path_buf(),
            files: HashMap::new(),
            cache: HashMap::new(),
            tensor_files: HashMap::new(),
            tensor_cache: HashMap::new(),
        }
    }

    /// The data of tensor `tensor` of the safetensors side file `file`, for a constant of type
    /// `want`: the tensor's dtype and dims must be `want`'s (or, for a dtype safetensors has no
    /// code for, a 1-D `U8` tensor of `want`'s byte size). Errors are messages naming the file
    /// and the tensor (the parser adds the position).
    pub fn read_tensor(&mut self, file: &str, tensor: &str, want: &Shape) -> std::result::Result<Arc<Vec<u8>>, String> {
        check_name(file)?;
        let key = (file.to_string(), tensor.to_string());
        if !self.tensor_files.contains_key(file) {
            let f = SafetensorsFile::open(&self.dir.join(file)).map_err(|e| format!("constant data file: {e}"))?;
            self.tensor_files.insert(file.to_string(), f);
        }
        let Some(f) = self.tensor_files.get(file) else {
            return Err(format!("constant data file {file:?}: not open"));
        };
        let shown = f.path().display().to_string();
        let t = f.tensor(tensor).ok_or_else(|| {
            format!("constant data file {shown}: it has no tensor {tensor:?} ({} tensors)", f.tensors().len())
        })?;
        let matches = match to_safetensors_dtype(want.dtype) {
            Some(_) => {
                t.dtype == Some(want.dtype)
                    && t.dims.len() == want.rank()
                    && want.dims.iter().zip(&t.dims).all(|(&w, &d)| w >= 0 && w as usize == d)
            }
            None => t.code == "U8" && t.dims.len() == 1 && !want.is_dynamic() && want.byte_size() == Some(t.dims[0]),
        };
        if !matches {
            let stored = if to_safetensors_dtype(want.dtype).is_none() && !want.is_dynamic() {
                format!(" (a {} constant is stored as a 1-D U8 tensor of its bytes)", want.dtype.short_name())
            } else {
                String::new()
            };
            return Err(format!(
                "constant data file {shown}: tensor {tensor:?} is {} but the constant is {}{stored}",
                t.type_text(),
                format_shape(want)
            ));
        }
        if let Some(d) = self.tensor_cache.get(&key) {
            return Ok(d.clone());
        }
        if want.dtype == crate::ir::dtype::DType::Bool
            && let Some(b) = f.data(tensor).and_then(|d| d.iter().copied().find(|&b| b > 1))
        {
            return Err(format!("constant data file {shown}: bool tensor {tensor:?} holds the byte {b} (not 0 or 1)"));
        }
        let bytes =
            f.data(tensor).ok_or_else(|| format!("constant data file {shown}: tensor {tensor:?} lies past its end"))?;
        let max = crate::limits::max_tensor_bytes();
        if bytes.len() > max {
            return Err(format!(
                "constant data file {shown}: tensor {tensor:?} of {} bytes exceeds the tensor size limit of {max} bytes",
                bytes.len()
            ));
        }
        let mut data = Vec::new();
        data.try_reserve_exact(bytes.len())
            .map_err(|_| format!("constant data file {shown}: out of memory for {} bytes", bytes.len()))?;
        data.extend_from_slice(bytes);
        let data = Arc::new(data);
        self.tensor_cache.insert(key, data.clone());
        Ok(data)
    }

    /// The `bytes` bytes at `offset` of side file `name`, which must hash to `hash`. Errors are
    /// messages naming the file (the parser adds the position).
    pub fn read(
        &mut self,
        name: &str,
        offset: u64,
        bytes: u64,
        hash: u64,
    ) -> std::result::Result<Arc<Vec<u8>>, String> {
        check_name(name)?;
        let key = (name.to_string(), offset, bytes);
        if let Some((h, data)) = self.cache.get(&key) {
            return if *h == hash {
                Ok(data.clone())
            } else {
                Err(format!(
                    "constant data file {name:?}: bytes {offset}..{} hash to {} but the text says {}",
                    offset.saturating_add(bytes),
                    format_hash(*h),
                    format_hash(hash)
                ))
            };
        }
        if !self.files.contains_key(name) {
            let path = self.dir.join(name);
            let shown = path.display().to_string();
            let file = File::open(&path).map_err(|e| format!("constant data file {shown}: cannot open it: {e}"))?;
            let meta = file.metadata().map_err(|e| format!("constant data file {shown}: {e}"))?;
            if !meta.is_file() {
                return Err(format!("constant data file {shown}: not a regular file"));
            }
            self.files.insert(name.to_string(), OpenFile { file, path, len: meta.len(), read: 0 });
        }
        let Some(f) = self.files.get_mut(name) else {
            return Err(format!("constant data file {name:?}: not open"));
        };
        let shown = f.path.display().to_string();
        let end = offset.checked_add(bytes).filter(|&e| e <= f.len).ok_or_else(|| {
            format!(
                "constant data file {shown}: bytes {offset}..{} lie past its end ({} bytes): a truncated or \
                 wrong side file",
                offset as u128 + bytes as u128,
                f.len
            )
        })?;
        let max = crate::limits::max_tensor_bytes();
        let n = usize::try_from(bytes).ok().filter(|&n| n <= max).ok_or_else(|| {
            format!(
                "constant data file {shown}: a constant of {bytes} bytes exceeds the tensor size limit of {max} bytes"
            )
        })?;
        if f.read.saturating_add(bytes) > f.len {
            return Err(format!(
                "constant data file {shown}: the constants read from it add up to more than its {} bytes \
                 (overlapping ranges)",
                f.len
            ));
        }
        let mut data = Vec::new();
        data.try_reserve_exact(n).map_err(|_| format!("constant data file {shown}: out of memory for {n} bytes"))?;
        data.resize(n, 0);
        f.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| f.file.read_exact(&mut data))
            .map_err(|e| format!("constant data file {shown}: cannot read bytes {offset}..{end}: {e}"))?;
        f.read += bytes;
        let got = xxh64(&data);
        if got != hash {
            return Err(format!(
                "constant data file {shown}: bytes {offset}..{end} hash to {} but the text says {}: a wrong or \
                 damaged side file",
                format_hash(got),
                format_hash(hash)
            ));
        }
        let data = Arc::new(data);
        self.cache.insert(key, (hash, data.clone()));
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_below_the_directory() {
        for ok in ["c.bin", "sub/c.bin", "a b.bin"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "/etc/passwd", "../c.bin", "a/../../c.bin", "./c.bin", "a\0b"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn identical_data_is_stored_once_and_aligned() {
        let mut s = SideFile::new("c.bin").unwrap();
        let a = ConstData(Arc::new(vec![1u8; 10]));
        let b = ConstData(Arc::new(vec![2u8; 3]));
        let a2 = ConstData(Arc::new(vec![1u8; 10]));
        let ra = s.add(&a);
        let rb = s.add(&b);
        assert_eq!(s.add(&a2), ra);
        assert_eq!(s.add(&a), ra);
        assert_eq!((ra.offset, rb.offset, s.len(), s.blob_count()), (0, 64, 67, 2));
        let mut out = Vec::new();
        s.write_to(&mut out).unwrap();
        assert_eq!(out.len(), 67);
        assert_eq!(&out[64..], &[2, 2, 2]);
        assert_eq!(parse_hash(&format_hash(ra.hash)), Some(ra.hash));
        assert_eq!(parse_hash("xxh64:123"), None);
        assert_eq!(parse_hash("md5:0000000000000000"), None);
    }
}
