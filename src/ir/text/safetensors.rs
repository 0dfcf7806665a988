//! Safetensors files: a validated, memory-mapped reader ([`SafetensorsFile`]) and the mapping
//! between the format's dtype codes (`"F32"`, `"BF16"`, …) and tensorjit's [`DType`]s.
//!
//! The IR parser reads `constant safetensors("FILE", "TENSOR")` through it (see
//! [`crate::ir::text::sidefile::SideFileReader`]), and [`crate::weights`] builds its public
//! loader on it. The header is parsed and validated by the `safetensors` crate (header length
//! within the file and at most 100 MB, UTF-8 JSON, tensors contiguous and non-overlapping, each
//! tensor's byte count equal to its dims times its element size with overflow checked, the data
//! section ending exactly at the end of the file); on top of that every tensor with a tensorjit
//! dtype must be a valid [`Shape`] (rank, `i64` dims, the per-tensor byte limit). Nothing is
//! copied: [`SafetensorsFile::data`] is a view of the mapped file.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::shape::Shape;

/// The usual file name extension (`model.safetensors`).
pub const EXTENSION: &str = "safetensors";

/// The safetensors dtype of a tensorjit dtype, `None` when the format has no code for it
/// (complex128, the packed sub-byte integers, some float8 variants).
pub fn to_safetensors_dtype(d: DType) -> Option<Dtype> {
    Some(match d {
        DType::Bool => Dtype::BOOL,
        DType::Int8 => Dtype::I8,
        DType::Int16 => Dtype::I16,
        DType::Int32 => Dtype::I32,
        DType::Int64 => Dtype::I64,
        DType::Uint8 => Dtype::U8,
        DType::Uint16 => Dtype::U16,
        DType::Uint32 => Dtype::U32,
        DType::Uint64 => Dtype::U64,
        DType::Float16 => Dtype::F16,
        DType::BFloat16 => Dtype::BF16,
        DType::Float32 => Dtype::F32,
        DType::Float64 => Dtype::F64,
        DType::Complex64 => Dtype::C64,
        DType::F8E5M2 => Dtype::F8_E5M2,
        DType::F8E4M3FN => Dtype::F8_E4M3,
        DType::F8E8M0FNU => Dtype::F8_E8M0,
        DType::F8E4M3FNUZ => Dtype::F8_E4M3FNUZ,
        DType::F8E5M2FNUZ => Dtype::F8_E5M2FNUZ,
        _ => return None,
    })
}

/// The tensorjit dtype of a safetensors dtype, `None` when tensorjit has none (F4, F6).
pub fn from_safetensors_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::I8 => DType::Int8,
        Dtype::I16 => DType::Int16,
        Dtype::I32 => DType::Int32,
        Dtype::I64 => DType::Int64,
        Dtype::U8 => DType::Uint8,
        Dtype::U16 => DType::Uint16,
        Dtype::U32 => DType::Uint32,
        Dtype::U64 => DType::Uint64,
        Dtype::F16 => DType::Float16,
        Dtype::BF16 => DType::BFloat16,
        Dtype::F32 => DType::Float32,
        Dtype::F64 => DType::Float64,
        Dtype::C64 => DType::Complex64,
        Dtype::F8_E5M2 => DType::F8E5M2,
        Dtype::F8_E4M3 => DType::F8E4M3FN,
        Dtype::F8_E8M0 => DType::F8E8M0FNU,
        Dtype::F8_E4M3FNUZ => DType::F8E4M3FNUZ,
        Dtype::F8_E5M2FNUZ => DType::F8E5M2FNUZ,
        _ => return None,
    })
}

/// The code of a safetensors dtype as written in the header (`"F32"`, `"F8_E4M3"`).
pub fn dtype_code(d: Dtype) -> String {
    d.to_string()
}

/// One tensor of a [`SafetensorsFile`].
#[derive(Clone, Debug, PartialEq)]
pub struct SafetensorsTensor {
    /// Its name in the file.
    pub name: String,
    /// Its dtype code in the file (`"F32"`).
    pub code: String,
    /// Its tensorjit dtype; `None` when tensorjit has none (the tensor is listed, but cannot be
    /// turned into a buffer or constant).
    pub dtype: Option<DType>,
    /// Its dims (row-major).
    pub dims: Vec<usize>,
    /// Where its bytes lie in the file.
    pub range: Range<usize>,
}

impl SafetensorsTensor {
    /// Its tensorjit shape, when its dtype has one.
    pub fn shape(&self) -> Option<Shape> {
        self.dtype.map(|d| Shape::from_usize(d, &self.dims))
    }

    /// Its dtype and dims as text: `f32[384,384]` (`F6_E2M3[4]` for a dtype tensorjit lacks).
    pub fn type_text(&self) -> String {
        match self.shape() {
            Some(s) => crate::ir::text::format_shape(&s),
            None => {
                let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
                format!("{}[{}]", self.code, dims.join(","))
            }
        }
    }
}

/// The bytes of a file: mapped, or read when mapping is not possible (e.g. on wasm).
enum FileBytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl FileBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Read(v) => v,
        }
    }
}

/// A safetensors file, opened and validated; tensor data are views of the (mapped) file.
///
/// The file is mapped read-only; like every memory-mapped loader it must not be truncated or
/// rewritten by another process while it is open (tensorjit itself writes safetensors files
/// to a temporary file that is then renamed, which leaves open mappings intact).
pub struct SafetensorsFile {
    path: PathBuf,
    bytes: FileBytes,
    tensors: Vec<SafetensorsTensor>,
    index: HashMap<String, usize>,
    metadata: Option<HashMap<String, String>>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("mapped", &self.is_mapped())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid("safetensors", format!("{}: {msg}", path.display()))
}

impl SafetensorsFile {
    /// Opens, maps and validates the safetensors file at `path`. Errors name the file (and the
    /// tensor, for a tensor that is not a valid tensorjit shape).
    pub fn open(path: &Path) -> Result<SafetensorsFile> {
        let io = |e: std::io::Error| Error::Io(format!("{}: {e}", path.display()));
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(err(path, "not a regular file"));
        }
        if meta.len() > crate::limits::MAX_INPUT_FILE_BYTES {
            return Err(Error::limit(
                "safetensors",
                format!(
                    "{}: {} bytes; weight files may have at most {}",
                    path.display(),
                    meta.len(),
                    crate::limits::MAX_INPUT_FILE_BYTES
                ),
            ));
        }
        // An empty file cannot be mapped; it is not a valid safetensors file either.
        let mapped = if meta.len() == 0 {
            None
        } else {
            // SAFETY: the mapping is read-only and private to this object, which keeps it alive
            // as long as any view of it; its bytes are only ever read as `&[u8]` (every byte
            // pattern is valid). The remaining hazard of any file mapping — another process
            // truncating or rewriting the file while it is mapped — is documented on
            // `SafetensorsFile` and is outside what a reader can prevent.
            unsafe { memmap2::MmapOptions::new().map(&file) }.ok()
        };
        let bytes = match mapped {
            Some(m) => FileBytes::Mapped(m),
            None => {
                // No mmap on this target (or a special file): read it, bounded by its size.
                let n = usize::try_from(meta.len()).map_err(|_| err(path, "too large for this machine"))?;
                let mut v = Vec::new();
                v.try_reserve_exact(n).map_err(|_| Error::out_of_memory(path.display().to_string(), n))?;
                (&file).take(meta.len()).read_to_end(&mut v).map_err(io)?;
                FileBytes::Read(v)
            }
        };
        SafetensorsFile::parse(path.to_path_buf(), bytes)
    }

    /// Validates the safetensors bytes `bytes` (a whole file); `name` names it in errors.
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<SafetensorsFile> {
        SafetensorsFile::parse(PathBuf::from(name), FileBytes::Read(bytes))
    }

    fn parse(path: PathBuf, bytes: FileBytes) -> Result<SafetensorsFile> {
        let data = bytes.as_slice();
        let (header_len, meta) = SafeTensors::read_metadata(data)
            .map_err(|e| err(&path, format!("not a valid safetensors file: {}", describe(&e, data.len()))))?;
        let start = 8 + header_len;
        let mut tensors = Vec::new();
        for name in meta.offset_keys() {
            let Some(info) = meta.info(&name) else { continue };
            let (s, e) = info.data_offsets;
            let range = (start + s)..(start + e);
            let t = SafetensorsTensor {
                name,
                code: dtype_code(info.dtype),
                dtype: from_safetensors_dtype(info.dtype),
                dims: info.shape.clone(),
                range,
            };
            check_tensor(&path, &t)?;
            tensors.push(t);
        }
        let index = tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        let metadata = meta.metadata().clone();
        Ok(SafetensorsFile { path, bytes, tensors, index, metadata })
    }

    /// The file's path (as given to [`SafetensorsFile::open`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file is memory-mapped (else it was read into memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, FileBytes::Mapped(_))
    }

    /// The tensors, in the order of their data in the file.
    pub fn tensors(&self) -> &[SafetensorsTensor] {
        &self.tensors
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&SafetensorsTensor> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of tensor `name` (little-endian, row-major), a view of the file: no copy.
    /// Files written by the safetensors libraries (and by tensorjit) sort tensors by element
    /// size, so each tensor starts at a multiple of its element size from the page-aligned
    /// start of the mapping.
    pub fn data(&self, name: &str) -> Option<&[u8]> {
        let t = self.tensor(name)?;
        self.bytes.as_slice().get(t.range.clone())
    }

    /// The `__metadata__` string map of the header, if any.
    pub fn metadata(&self) -> Option<&HashMap<String, String>> {
        self.metadata.as_ref()
    }

    /// The size of the file in bytes.
    pub fn file_len(&self) -> usize {
        self.bytes.as_slice().len()
    }
}

/// A tensor with a tensorjit dtype must be a valid shape within the limits; any tensor's dims
/// must fit an `i64` and its rank the rank limit.
fn check_tensor(path: &Path, t: &SafetensorsTensor) -> Result<()> {
    let what = || format!("{}: tensor {:?}", path.display(), t.name);
    if t.dims.len() > crate::limits::MAX_RANK {
        return Err(Error::limit(
            "safetensors",
            format!("{}: {} dimensions (at most {})", what(), t.dims.len(), crate::limits::MAX_RANK),
        ));
    }
    if let Some(d) = t.dims.iter().find(|&&d| i64::try_from(d).is_err()) {
        return Err(Error::invalid("safetensors", format!("{}: dimension {d} exceeds i64::MAX", what())));
    }
    if let Some(s) = t.shape() {
        s.validate_for("safetensors", &what())?;
    }
    Ok(())
}

/// The crate's error, said in words (with the file size where it helps).
fn describe(e: &safetensors::SafeTensorError, file_len: usize) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::HeaderTooSmall => format!("the file ({file_len} bytes) is too short for the 8-byte header length"),
        E::HeaderTooLarge => "the header length is larger than 100 MB".to_string(),
        E::InvalidHeaderLength => format!("the header length runs past the end of the file ({file_len} bytes)"),
        E::MetadataIncompleteBuffer => {
            format!("the tensors' data does not end at the end of the file ({file_len} bytes): truncated or padded")
        }
        E::InvalidOffset(name) => format!("tensor {name:?}: its data offsets overlap or leave a gap"),
        E::ValidationOverflow => "a tensor's size overflows".to_string(),
        E::TensorInvalidInfo => "a tensor's byte range does not match its dtype and shape".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_codes_round_trip() {
        for d in crate::ir::dtype::SUPPORTED_DTYPES.iter().copied() {
            if let Some(st) = to_safetensors_dtype(d) {
                assert_eq!(from_safetensors_dtype(st), Some(d), "{d}");
            }
        }
        assert_eq!(dtype_code(Dtype::F8_E4M3), "F8_E4M3");
        assert_eq!(to_safetensors_dtype(DType::Complex128), None);
    }
}
