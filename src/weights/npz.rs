//! `.npz` archives: zip files of `.npy` members (`np.savez` stores them, `np.savez_compressed`
//! deflates them). Reading is bounded by what the archive declares, checked before decoding: each
//! member's uncompressed size within [`crate::limits::MAX_INPUT_FILE_BYTES`], and all of them
//! together too (a "zip bomb" is refused, not expanded); each member is then read by the `.npy`
//! reader with its declared size, so a member that decompresses to more or fewer bytes than it
//! declares, or whose CRC is wrong, is an error.

use std::io::{BufReader, Write};
use std::path::Path;

use crate::api::buffer::Buffer;
use crate::error::{Error, Result};
use crate::limits::MAX_INPUT_FILE_BYTES;
use crate::weights::npy::{open_bounded, read_npy, write_npy_to};
use crate::weights::{Decoded, decoded};

/// The most members an archive may have.
const MAX_MEMBERS: usize = 1 << 20;

fn npz_err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::invalid("npz", format!("{}: {msg}", path.display()))
}

/// Decodes every member of the archive at `path`.
pub(super) fn read(path: &Path) -> Result<Vec<Decoded>> {
    let (f, _) = open_bounded(path, &path.display().to_string())?;
    let mut z =
        zip::ZipArchive::new(BufReader::new(f)).map_err(|e| npz_err(path, format!("not a .npz (zip) archive: {e}")))?;
    if z.len() > MAX_MEMBERS {
        return Err(Error::limit("npz", format!("{}: {} members (at most {MAX_MEMBERS})", path.display(), z.len())));
    }
    let mut total: u64 = 0;
    let mut out = Vec::with_capacity(z.len());
    for i in 0..z.len() {
        let mut m = z.by_index(i).map_err(|e| npz_err(path, format!("member {i}: {e}")))?;
        if m.is_dir() {
            continue;
        }
        let member = m.name().map_err(|e| npz_err(path, format!("member {i}: bad name: {e}")))?.into_owned();
        let what = format!("{}: member {member:?}", path.display());
        if m.encrypted() {
            return Err(Error::invalid("npz", format!("{what}: encrypted members are not supported")));
        }
        let size = m.size();
        total = total.saturating_add(size);
        if size > MAX_INPUT_FILE_BYTES || total > MAX_INPUT_FILE_BYTES {
            return Err(Error::limit(
                "npz",
                format!(
                    "{what}: the members expand to more than {MAX_INPUT_FILE_BYTES} bytes ({size} bytes declared for \
                     this one)"
                ),
            ));
        }
        let a = read_npy(&mut m, size, &what)?;
        let name = member.strip_suffix(".npy").unwrap_or(&member).to_string();
        out.push(decoded(name, a));
    }
    Ok(out)
}

/// Writes `tensors` as an archive of stored members `NAME.npy`.
pub(super) fn write(path: &Path, tensors: &[(&str, &Buffer)]) -> Result<()> {
    let io = |e: &dyn std::fmt::Display| Error::Io(format!("{}: cannot write the .npz archive: {e}", path.display()));
    let f = std::fs::File::create(path).map_err(|e| io(&e))?;
    let mut z = zip::ZipWriter::new(std::io::BufWriter::new(f));
    let mut seen = std::collections::HashSet::new();
    for (name, b) in tensors {
        if !seen.insert(*name) {
            return Err(npz_err(path, format!("tensor name {name:?} given twice")));
        }
        let mut bytes = Vec::new();
        write_npy_to(&mut bytes, b, &format!("{}: member {name:?}", path.display()))?;
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        z.start_file(format!("{name}.npy"), opts).map_err(|e| io(&e))?;
        z.write_all(&bytes).map_err(|e| io(&e))?;
    }
    let mut w = z.finish().map_err(|e| io(&e))?;
    w.flush().map_err(|e| io(&e))
}
