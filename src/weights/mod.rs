//! Model weights from files, without ONNX: safetensors (memory-mapped), `.npz` archives and
//! `.npy` arrays, as buffers or as constants of a graph. `docs/weights.md` describes the
//! formats, the checks and where data is copied.
//!
//! ```no_run
//! use tensorjit::{DType, Shape};
//!
//! let w = tensorjit::weights::load("model.safetensors")?; // or .npz / .npy
//! for name in w.names() {
//!     println!("{name}: {}", w.shape(name).map(|s| s.to_string()).unwrap_or_default());
//! }
//! let backend = tensorjit::new()?;
//! let builder = backend.builder("dense");
//! let f = builder.main();
//! let x = f.parameter("x", Shape::new(DType::Float32, &[1, 384]))?;
//! let wq = w.constant(&f, "encoder.layer.0.attention.self.query.weight")?; // f32[384,384]
//! let y = f.matmul(x, wq)?;
//! f.return_(&[y])?;
//! # Ok::<(), tensorjit::Error>(())
//! ```
//!
//! Every loader checks what a file claims against the file before allocating anything:
//! truncated files, bad headers, offsets past the end, overlapping tensors, sizes that
//! overflow, dims beyond `i64` or the rank limit and tensors over the per-tensor byte limit
//! ([`crate::limits::max_tensor_bytes`]) are errors that name the file and the tensor.
//!
//! Copies: a safetensors file is mapped, and [`Weights::bytes`] is a view of the mapping (no
//! copy). [`Weights::get`] / [`Weights::buffer`] copy a tensor once, into the buffer's aligned
//! storage; [`Weights::constant`] and [`Weights::add_constant`] copy it once, into the graph's
//! constant (which the compiled executable then shares). `.npz` and `.npy` data is decoded into
//! memory when loaded (one copy), and [`Weights::add_constant`] then shares it without another.

pub mod npy;
mod npz;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::api::buffer::Buffer;
use crate::api::builder::{Function, Value};
use crate::error::{Error, Result};
use crate::ir::module::{FuncId, Module, ValueId};
use crate::ir::op::{ConstData, Op};
use crate::ir::shape::Shape;
use crate::ir::text::format_shape;
use crate::ir::text::safetensors::{SafetensorsFile, to_safetensors_dtype};

pub use npy::{NpyArray, read_npy, read_npy_bytes, write_npy};

/// One tensor of a [`Weights`] file.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightInfo {
    /// Its name: the safetensors key, the `.npz` member without `.npy`, or the `.npy` file's
    /// stem.
    pub name: String,
    /// Its shape; `None` when its dtype has no tensorjit equivalent (e.g. safetensors `F6_E2M3`):
    /// such a tensor is listed but cannot be loaded.
    pub shape: Option<Shape>,
    /// Its dtype as the file writes it (`"F32"` in safetensors, `"<f4"` in `.npy`).
    pub file_dtype: String,
    /// Its dims as the file writes them.
    pub dims: Vec<usize>,
    /// The size of its data in bytes.
    pub bytes: usize,
}

/// A tensor decoded into memory (`.npz`, `.npy`).
#[derive(Clone, Debug)]
struct Decoded {
    info: WeightInfo,
    data: ConstData,
}

#[derive(Debug)]
enum Source {
    Safetensors(SafetensorsFile),
    Decoded(Vec<Decoded>),
}

/// The named tensors of a weights file. Cheap to query; tensors are materialised on demand.
#[derive(Debug)]
pub struct Weights {
    path: PathBuf,
    source: Source,
    infos: Vec<WeightInfo>,
    index: HashMap<String, usize>,
}

fn weights_err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid("weights", format!("{}: {msg}", path.display()))
}

impl Weights {
    fn new(path: PathBuf, source: Source) -> Result<Weights> {
        let infos: Vec<WeightInfo> = match &source {
            Source::Safetensors(f) => f
                .tensors()
                .iter()
                .map(|t| WeightInfo {
                    name: t.name.clone(),
                    shape: t.shape(),
                    file_dtype: t.code.clone(),
                    dims: t.dims.clone(),
                    bytes: t.range.len(),
                })
                .collect(),
            Source::Decoded(d) => d.iter().map(|d| d.info.clone()).collect(),
        };
        let mut index = HashMap::with_capacity(infos.len());
        for (i, t) in infos.iter().enumerate() {
            if index.insert(t.name.clone(), i).is_some() {
                return Err(weights_err(&path, format!("tensor {:?} appears twice", t.name)));
            }
        }
        Ok(Weights { path, source, infos, index })
    }

    /// The file the weights were loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.infos.len()
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }

    /// The tensors' names, in file order (data order for safetensors, member order for `.npz`).
    pub fn names(&self) -> Vec<&str> {
        self.infos.iter().map(|t| t.name.as_str()).collect()
    }

    /// Every tensor's name, shape, file dtype and size, in file order.
    pub fn tensors(&self) -> &[WeightInfo] {
        &self.infos
    }

    /// The tensor `name`'s description.
    pub fn info(&self, name: &str) -> Option<&WeightInfo> {
        self.index.get(name).map(|&i| &self.infos[i])
    }

    /// Whether there is a tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The shape of tensor `name` (`None` when absent or of a dtype tensorjit lacks).
    pub fn shape(&self, name: &str) -> Option<Shape> {
        self.info(name)?.shape.clone()
    }

    /// The total size of the tensors' data in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.infos.iter().map(|t| t.bytes as u64).sum()
    }

    /// Whether the data is a memory mapping of the file (safetensors, where the target can map
    /// files), rather than decoded into memory.
    pub fn is_mapped(&self) -> bool {
        matches!(&self.source, Source::Safetensors(f) if f.is_mapped())
    }

    /// The underlying safetensors file, when the weights are one.
    pub fn safetensors(&self) -> Option<&SafetensorsFile> {
        match &self.source {
            Source::Safetensors(f) => Some(f),
            Source::Decoded(_) => None,
        }
    }

    /// The bytes of tensor `name` (little-endian, row-major; packed for sub-byte dtypes),
    /// without copying: a view of the mapped file for safetensors, of the decoded data
    /// otherwise. Safetensors files written by the usual libraries (and by tensorjit) order
    /// tensors by element size, so each view starts at a multiple of its element size from the
    /// page-aligned mapping and may be reinterpreted in place.
    pub fn bytes(&self, name: &str) -> Option<&[u8]> {
        match &self.source {
            Source::Safetensors(f) => f.data(name),
            Source::Decoded(d) => d.get(*self.index.get(name)?).map(|d| d.data.0.as_slice()),
        }
    }

    /// An error about tensor `name` of this file.
    fn tensor_err(&self, name: &str, msg: impl std::fmt::Display) -> Error {
        weights_err(&self.path, format!("tensor {name:?}: {msg}"))
    }

    /// The shape and bytes of tensor `name`, checked: present, of a tensorjit dtype that can
    /// hold data, valid data (e.g. bool bytes 0 or 1).
    fn checked(&self, name: &str) -> Result<(Shape, &[u8])> {
        let Some(info) = self.info(name) else {
            let mut some: Vec<String> = self.infos.iter().take(5).map(|t| format!("{:?}", t.name)).collect();
            if self.infos.len() > 5 {
                some.push("…".into());
            }
            return Err(weights_err(
                &self.path,
                format!("no tensor {name:?} ({} tensors: {})", self.infos.len(), some.join(", ")),
            ));
        };
        let shape = info
            .shape
            .clone()
            .ok_or_else(|| self.tensor_err(name, format!("dtype {} has no tensorjit equivalent", info.file_dtype)))?;
        let bytes = self.bytes(name).ok_or_else(|| self.tensor_err(name, "its data lies past the end of the file"))?;
        Buffer::check_bytes(&shape, bytes).map_err(|e| self.tensor_err(name, e))?;
        Ok((shape, bytes))
    }

    /// Tensor `name` as a buffer (one copy, see the module doc); `None` when there is no such
    /// tensor or it cannot be loaded ([`Weights::buffer`] says why).
    pub fn get(&self, name: &str) -> Option<Buffer> {
        self.buffer(name).ok()
    }

    /// Tensor `name` as a buffer (one copy). Errors name the file and the tensor.
    pub fn buffer(&self, name: &str) -> Result<Buffer> {
        let (shape, bytes) = self.checked(name)?;
        Buffer::from_bytes(shape, bytes).map_err(|e| self.tensor_err(name, e))
    }

    /// Tensor `name` as the shape and data of an IR constant: one copy from a mapped file,
    /// none for decoded data (shared).
    pub fn const_data(&self, name: &str) -> Result<(Shape, ConstData)> {
        let (shape, bytes) = self.checked(name)?;
        if let Source::Decoded(d) = &self.source
            && let Some(d) = self.index.get(name).and_then(|&i| d.get(i))
        {
            return Ok((shape, d.data.clone()));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(bytes.len()).map_err(|_| Error::out_of_memory(format!("weights: {name}"), bytes.len()))?;
        v.extend_from_slice(bytes);
        Ok((shape, ConstData(Arc::new(v))))
    }

    /// Adds tensor `name` to the function `f` under construction as a constant (one copy, into
    /// the graph). Errors name the file and the tensor.
    pub fn constant(&self, f: &Function, name: &str) -> Result<Value> {
        let (shape, bytes) = self.checked(name)?;
        f.constant_bytes(shape, bytes).map_err(|e| self.tensor_err(name, e))
    }

    /// Appends tensor `name` as a `constant` node to the body of `func` in the IR module `m` and
    /// returns its value (see [`Weights::const_data`] for the copy).
    pub fn add_constant(&self, m: &mut Module, func: FuncId, name: &str) -> Result<ValueId> {
        if func.index() >= m.functions.len() {
            return Err(self.tensor_err(name, format!("the module has no function {}", func.0)));
        }
        let (shape, data) = self.const_data(name)?;
        let node = m.add_node(func, Op::Constant(data), vec![], vec![shape]);
        Ok(m.node(node).outputs[0])
    }
}

/// Loads a weights file by its extension (`.safetensors`, `.npz`, `.npy`), or, for another
/// extension, by its first bytes (a zip archive is `.npz`, `\x93NUMPY` is `.npy`, anything else
/// is tried as safetensors). A `.npy` file holds one tensor, named by the file's stem.
pub fn load(path: impl AsRef<Path>) -> Result<Weights> {
    let path = path.as_ref();
    match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => load_safetensors(path),
        Some("npz") => load_npz(path),
        Some("npy") => load_npy_weights(path),
        _ => {
            let mut magic = [0u8; 6];
            let n = {
                use std::io::Read;
                let (f, _) = npy::open_bounded(path, &path.display().to_string())?;
                let mut got = 0;
                let mut r = f.take(6);
                while got < 6 {
                    match r.read(&mut magic[got..]) {
                        Ok(0) => break,
                        Ok(k) => got += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(Error::Io(format!("{}: {e}", path.display()))),
                    }
                }
                got
            };
            if magic[..n].starts_with(b"PK\x03\x04") || magic[..n].starts_with(b"PK\x05\x06") {
                load_npz(path)
            } else if &magic[..n] == b"\x93NUMPY" {
                load_npy_weights(path)
            } else {
                load_safetensors(path)
            }
        }
    }
}

/// Opens a safetensors file: maps it and validates its header and every tensor (see the
/// module doc); no tensor data is read.
pub fn load_safetensors(path: impl AsRef<Path>) -> Result<Weights> {
    let path = path.as_ref();
    let f = SafetensorsFile::open(path)?;
    Weights::new(path.to_path_buf(), Source::Safetensors(f))
}

/// Loads a `.npz` archive (a zip of `.npy` members, stored or deflated, as `np.savez` and
/// `np.savez_compressed` write): every member is decoded, its name without `.npy` naming it.
pub fn load_npz(path: impl AsRef<Path>) -> Result<Weights> {
    let path = path.as_ref();
    let tensors = npz::read(path)?;
    Weights::new(path.to_path_buf(), Source::Decoded(tensors))
}

/// Reads a `.npy` file as a buffer of its own dtype and dims (bounded and checked as
/// [`read_npy`] describes). Errors name the file.
pub fn load_npy(path: impl AsRef<Path>) -> Result<Buffer> {
    let path = path.as_ref();
    let what = path.display().to_string();
    npy::read_npy_path(path, &what)?.into_buffer()
}

/// A `.npy` file as weights with one tensor named by the file's stem.
fn load_npy_weights(path: &Path) -> Result<Weights> {
    let what = path.display().to_string();
    let a = npy::read_npy_path(path, &what)?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("array").to_string();
    let d = decoded(name, a);
    Weights::new(path.to_path_buf(), Source::Decoded(vec![d]))
}

/// A decoded `.npy` array as a tensor.
fn decoded(name: String, a: NpyArray) -> Decoded {
    let shape = Shape::from_usize(a.dtype, &a.dims);
    let info = WeightInfo {
        name,
        file_dtype: npy_descr(&shape),
        dims: a.dims.clone(),
        shape: Some(shape),
        bytes: a.data.len(),
    };
    Decoded { info, data: ConstData(Arc::new(a.data)) }
}

/// The little-endian `.npy` type string of a decoded array's dtype.
fn npy_descr(s: &Shape) -> String {
    use crate::ir::dtype::DType::*;
    let (kind, size) = match s.dtype {
        Bool => ('b', 1),
        Int8 | Int16 | Int32 | Int64 => ('i', s.dtype.size()),
        Uint8 | Uint16 | Uint32 | Uint64 => ('u', s.dtype.size()),
        Float16 | Float32 | Float64 => ('f', s.dtype.size()),
        Complex64 | Complex128 => ('c', s.dtype.size()),
        other => return other.short_name().to_string(),
    };
    let order = if size == 1 { '|' } else { '<' };
    format!("{order}{kind}{size}")
}

/// The safetensors view of a buffer being saved.
struct SaveView<'a> {
    dtype: safetensors::Dtype,
    dims: Vec<usize>,
    data: &'a [u8],
}

impl safetensors::View for SaveView<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.dims
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data)
    }

    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Writes named buffers as a safetensors file at `path` (through a temporary file in the same
/// folder, renamed over `path`, so that a mapping of an older `path` stays intact). Every
/// dtype with a safetensors code can be saved (not complex128 or the packed sub-byte
/// integers); names must be distinct and not `__metadata__`.
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(&str, &Buffer)]) -> Result<()> {
    let path = path.as_ref();
    let mut storages = Vec::with_capacity(tensors.len());
    let mut seen = std::collections::HashSet::new();
    for (name, b) in tensors {
        if *name == "__metadata__" || !seen.insert(*name) {
            return Err(weights_err(path, format!("tensor name {name:?} is reserved or given twice")));
        }
        if to_safetensors_dtype(b.dtype()).is_none() {
            return Err(weights_err(
                path,
                format!("tensor {name:?}: safetensors has no dtype for {}", format_shape(b.shape())),
            ));
        }
        storages.push(b.storage()?);
    }
    let views: Vec<(&str, SaveView<'_>)> = tensors
        .iter()
        .zip(&storages)
        .map(|((name, b), s)| {
            let dtype = to_safetensors_dtype(b.dtype()).unwrap_or(safetensors::Dtype::U8);
            (*name, SaveView { dtype, dims: b.dims(), data: s.as_bytes() })
        })
        .collect();
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let target = dir.join(path.file_name().ok_or_else(|| weights_err(path, "not a file name"))?);
    safetensors::serialize_to_file(views, None, &target)
        .map_err(|e| Error::Io(format!("{}: cannot write the safetensors file: {e}", path.display())))
}

/// Writes named buffers as a `.npz` archive (stored, uncompressed members `NAME.npy`, each
/// written with [`write_npy`]'s conventions).
pub fn save_npz(path: impl AsRef<Path>, tensors: &[(&str, &Buffer)]) -> Result<()> {
    npz::write(path.as_ref(), tensors)
}
