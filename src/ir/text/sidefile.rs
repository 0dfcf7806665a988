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

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ir::op::ConstData;
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

/// The data of the constants a printer wrote by reference, to be written as one file; shared by
/// every module printed with it (identical data is stored once). It holds the constants'
/// shared buffers, not copies.
#[derive(Debug)]
pub struct SideFile {
    name: String,
    blobs: Vec<(BlobRef, ConstData)>,
    /// Blob index by the address of a constant's shared buffer (held in `blobs`, so an address
    /// is never reused while this file exists): a constant printed again is not hashed again.
    by_address: HashMap<usize, usize>,
    /// Blob indices by (hash, length).
    by_hash: HashMap<(u64, u64), Vec<usize>>,
    len: u64,
}

impl SideFile {
    /// An empty side file that the text will name `name` (a relative path, see [`check_name`];
    /// usually a bare file name, the file then lying next to the IR text).
    pub fn new(name: &str) -> Result<SideFile> {
        check_name(name).map_err(|e| Error::invalid("constants side file", e))?;
        Ok(SideFile {
            name: name.to_string(),
            blobs: Vec::new(),
            by_address: HashMap::new(),
            by_hash: HashMap::new(),
            len: 0,
        })
    }

    /// The name written in the text.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's size in bytes so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.blobs.is_empty()
    }

    /// Number of distinct blobs.
    pub fn blob_count(&self) -> usize {
        self.blobs.len()
    }

    /// Adds a constant's data (or finds it already stored) and says where it is.
    pub fn add(&mut self, data: &ConstData) -> BlobRef {
        let address = Arc::as_ptr(&data.0) as usize;
        if let Some(&i) = self.by_address.get(&address) {
            return self.blobs[i].0;
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
        self.blobs[i].0
    }

    /// Writes the file's bytes (blobs with zero padding between them) to `w`.
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
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
pub struct SideFileReader {
    dir: PathBuf,
    files: HashMap<String, OpenFile>,
    /// `(name, offset, bytes)` → (hash, data) of every range read.
    cache: HashMap<RangeKey, (u64, Arc<Vec<u8>>)>,
}

type RangeKey = (String, u64, u64);

impl SideFileReader {
    /// A reader resolving names relative to `dir`.
    pub fn new(dir: &Path) -> SideFileReader {
        SideFileReader { dir: dir.to_path_buf(), files: HashMap::new(), cache: HashMap::new() }
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
