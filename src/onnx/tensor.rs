//! ONNX tensors: element types, `TensorProto` payloads (raw, typed fields, external data) as the
//! IR's little-endian constant bytes, and `.pb` tensor files as [`Buffer`]s.

use std::path::Path;

use prost::Message;

use crate::api::Buffer;
use crate::error::{Error, Result};
use crate::ir::dtype::DType;
use crate::ir::shape::Shape;

use super::proto::{TensorProto, tensor_proto};

/// The IR dtype of an ONNX `TensorProto.DataType` code, or `None` for codes the IR has no type
/// for (strings, float8 variants the kernels do not compute in, ...).
pub fn dtype_from_onnx(code: i32) -> Option<DType> {
    use tensor_proto::DataType as D;
    Some(match D::try_from(code).ok()? {
        D::Float => DType::Float32,
        D::Uint8 => DType::Uint8,
        D::Int8 => DType::Int8,
        D::Uint16 => DType::Uint16,
        D::Int16 => DType::Int16,
        D::Int32 => DType::Int32,
        D::Int64 => DType::Int64,
        D::Bool => DType::Bool,
        D::Float16 => DType::Float16,
        D::Double => DType::Float64,
        D::Uint32 => DType::Uint32,
        D::Uint64 => DType::Uint64,
        D::Complex64 => DType::Complex64,
        D::Complex128 => DType::Complex128,
        D::Bfloat16 => DType::BFloat16,
        _ => return None,
    })
}

/// The ONNX `TensorProto.DataType` name of a code (for error messages).
pub fn onnx_type_name(code: i32) -> String {
    match tensor_proto::DataType::try_from(code) {
        Ok(d) => d.as_str_name().to_string(),
        Err(_) => format!("data type {code}"),
    }
}

/// The ONNX `TensorProto.DataType` code of an IR dtype (the inverse of [`dtype_from_onnx`]).
pub fn dtype_to_onnx(dtype: DType) -> Option<i32> {
    use tensor_proto::DataType as D;
    Some(match dtype {
        DType::Float32 => D::Float,
        DType::Uint8 => D::Uint8,
        DType::Int8 => D::Int8,
        DType::Uint16 => D::Uint16,
        DType::Int16 => D::Int16,
        DType::Int32 => D::Int32,
        DType::Int64 => D::Int64,
        DType::Bool => D::Bool,
        DType::Float16 => D::Float16,
        DType::Float64 => D::Double,
        DType::Uint32 => D::Uint32,
        DType::Uint64 => D::Uint64,
        DType::Complex64 => D::Complex64,
        DType::Complex128 => D::Complex128,
        DType::BFloat16 => D::Bfloat16,
        _ => return None,
    } as i32)
}

/// Where a tensor comes from, for error messages.
fn what(t: &TensorProto) -> String {
    if t.name().is_empty() { "unnamed tensor".to_string() } else { format!("tensor {:?}", t.name()) }
}

/// The shape (dtype and dims) of a `TensorProto`.
pub fn tensor_shape(t: &TensorProto) -> Result<Shape> {
    let dtype = dtype_from_onnx(t.data_type()).ok_or_else(|| {
        Error::not_implemented(
            "onnx",
            format!("{}: element type {} is not supported", what(t), onnx_type_name(t.data_type())),
        )
    })?;
    if let Some(d) = t.dims.iter().find(|&&d| d < 0) {
        return Err(Error::invalid("onnx", format!("{}: negative dimension {d} in {:?}", what(t), t.dims)));
    }
    let shape = Shape::new(dtype, &t.dims);
    shape.check_limits().map_err(|e| Error::limit("onnx", format!("{}: {e}", what(t))))?;
    Ok(shape)
}

/// The little-endian element bytes of `t`, taking `raw_data` out of it (moved, not copied) when
/// it holds the payload. `base_dir` resolves external data locations; `None` refuses them.
pub fn take_tensor_bytes(t: &mut TensorProto, base_dir: Option<&Path>) -> Result<(Shape, Vec<u8>)> {
    let shape = tensor_shape(t)?;
    let n = shape.num_elements();
    let esize = shape.dtype.size();
    let expected = n
        .checked_mul(esize)
        .ok_or_else(|| Error::limit("onnx", format!("{}: {n} elements of {} overflow", what(t), shape.dtype)))?;
    if t.data_location() == tensor_proto::DataLocation::External {
        let bytes = read_external(t, base_dir, expected)?;
        return Ok((shape, bytes));
    }
    let bytes = if t.raw_data.is_some() || n == 0 {
        t.raw_data.take().unwrap_or_default()
    } else {
        typed_bytes(t, shape.dtype, n)?
    };
    if bytes.len() != expected {
        return Err(Error::invalid(
            "onnx",
            format!("{}: {} bytes of data for shape {shape} ({expected} bytes expected)", what(t), bytes.len()),
        ));
    }
    if shape.dtype == DType::Bool && bytes.iter().any(|&b| b > 1) {
        return Err(Error::invalid("onnx", format!("{}: bool element other than 0 or 1", what(t))));
    }
    Ok((shape, bytes))
}

/// Converts the typed repeated fields (`float_data`, `int32_data`, ...) of `t` to bytes.
fn typed_bytes(t: &TensorProto, dtype: DType, n: usize) -> Result<Vec<u8>> {
    fn check(t: &TensorProto, field: &str, len: usize, n: usize) -> Result<()> {
        if len != n {
            return Err(Error::invalid("onnx", format!("{}: {field} holds {len} values, the shape has {n}", what(t))));
        }
        Ok(())
    }
    let mut out = Vec::with_capacity(n * dtype.size());
    match dtype {
        DType::Float32 => {
            check(t, "float_data", t.float_data.len(), n)?;
            t.float_data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DType::Complex64 => {
            check(t, "float_data", t.float_data.len(), 2 * n)?;
            t.float_data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DType::Float64 => {
            check(t, "double_data", t.double_data.len(), n)?;
            t.double_data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DType::Complex128 => {
            check(t, "double_data", t.double_data.len(), 2 * n)?;
            t.double_data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DType::Int64 => {
            check(t, "int64_data", t.int64_data.len(), n)?;
            t.int64_data.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        DType::Uint32 | DType::Uint64 => {
            check(t, "uint64_data", t.uint64_data.len(), n)?;
            for &v in &t.uint64_data {
                if dtype == DType::Uint32 {
                    out.extend_from_slice(&(v as u32).to_le_bytes());
                } else {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        // int32_data carries every type of 32 bits or fewer: the value (or the raw bits of a
        // half-precision float) in the low bits.
        DType::Int32
        | DType::Int16
        | DType::Int8
        | DType::Uint16
        | DType::Uint8
        | DType::Bool
        | DType::Float16
        | DType::BFloat16 => {
            check(t, "int32_data", t.int32_data.len(), n)?;
            for &v in &t.int32_data {
                match dtype.size() {
                    4 => out.extend_from_slice(&v.to_le_bytes()),
                    2 => out.extend_from_slice(&(v as u16).to_le_bytes()),
                    _ => out.push(v as u8),
                }
            }
        }
        other => {
            return Err(Error::not_implemented("onnx", format!("{}: typed data for {other}", what(t))));
        }
    }
    Ok(out)
}

/// Reads the external data of `t` (`location`, `offset`, `length` entries) relative to
/// `base_dir`, refusing locations that leave it.
fn read_external(t: &TensorProto, base_dir: Option<&Path>, expected: usize) -> Result<Vec<u8>> {
    let Some(base) = base_dir else {
        return Err(Error::invalid(
            "onnx",
            format!("{}: external data needs the model's folder (load the model from a path)", what(t)),
        ));
    };
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let num = || {
            e.value().parse::<u64>().map_err(|_| {
                Error::invalid(
                    "onnx",
                    format!("{}: external data {} {:?} is not a number", what(t), e.key(), e.value()),
                )
            })
        };
        match e.key() {
            "location" => location = Some(e.value().to_string()),
            "offset" => offset = num()?,
            "length" => length = Some(num()?),
            _ => {}
        }
    }
    let location =
        location.ok_or_else(|| Error::invalid("onnx", format!("{}: external data without a location", what(t))))?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(Error::invalid(
            "onnx",
            format!("{}: external data location {location:?} leaves the model's folder", what(t)),
        ));
    }
    let path = base.join(rel);
    if let Some(len) = length
        && len != expected as u64
    {
        return Err(Error::invalid(
            "onnx",
            format!("{}: external data length {len}, the shape needs {expected} bytes", what(t)),
        ));
    }
    use std::io::{Read, Seek, SeekFrom};
    let io = |e: std::io::Error| Error::Io(format!("{}: external data {}: {e}", what(t), path.display()));
    let mut f = std::fs::File::open(&path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    if offset.checked_add(expected as u64).is_none_or(|end| end > file_len) {
        return Err(Error::invalid(
            "onnx",
            format!(
                "{}: external data {}: bytes {offset}..+{expected} lie past its end ({file_len} bytes)",
                what(t),
                path.display()
            ),
        ));
    }
    f.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(expected).map_err(|_| Error::out_of_memory("onnx external data", expected))?;
    f.take(expected as u64).read_to_end(&mut buf).map_err(io)?;
    Ok(buf)
}

/// Decodes one serialized `TensorProto` (the `input_0.pb` / `output_0.pb` files of the ONNX test
/// data sets) into its name and a [`Buffer`].
pub fn read_tensor_proto(bytes: &[u8]) -> Result<(String, Buffer)> {
    let mut t = TensorProto::decode(bytes).map_err(|e| Error::invalid("onnx", format!("TensorProto: {e}")))?;
    let (shape, data) = take_tensor_bytes(&mut t, None)?;
    Ok((t.name().to_string(), Buffer::from_bytes(shape, &data)?))
}

/// Serializes a [`Buffer`] as a `TensorProto` named `name` (raw little-endian data).
pub fn write_tensor_proto(name: &str, b: &Buffer) -> Result<Vec<u8>> {
    let data_type = dtype_to_onnx(b.dtype())
        .ok_or_else(|| Error::not_implemented("onnx", format!("{name:?}: dtype {} has no ONNX type", b.dtype())))?;
    let t = TensorProto {
        dims: b.shape().dims.clone(),
        data_type: Some(data_type),
        name: Some(name.to_string()),
        raw_data: Some(b.to_bytes()?),
        ..Default::default()
    };
    Ok(t.encode_to_vec())
}
