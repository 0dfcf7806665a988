//! Decoding an ONNX file without holding the whole file and the decoded model at once: the
//! file is read in order, the graph's initializers (almost all of a model's bytes) are decoded
//! one at a time from a buffer of their own size, and every other field is collected and decoded
//! as usual. Peak memory is the decoded model plus the largest initializer, instead of the
//! decoded model plus the whole file.
//!
//! Protobuf wire format: a field is a varint key (`number << 3 | wire type`) then its payload
//! (wire type 0: a varint; 1: 8 bytes; 2: a varint length and that many bytes; 5: 4 bytes).
//! `ModelProto.graph` is field 7 and `GraphProto.initializer` field 5, both length-delimited.

use std::io::{BufRead, Read};

use prost::Message;

use super::proto::{GraphProto, ModelProto, TensorProto};
use crate::error::{Error, Result};

/// `ModelProto.graph`.
const MODEL_GRAPH: u64 = 7;
/// `GraphProto.initializer`.
const GRAPH_INITIALIZER: u64 = 5;

fn bad(what: &str) -> Error {
    Error::invalid("onnx", format!("not an ONNX model: {what}"))
}

fn io(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof { bad("truncated field") } else { Error::Io(e.to_string()) }
}

/// Reads a varint, appending its bytes to `raw`; `None` at a clean end of input.
fn varint(r: &mut impl BufRead, raw: &mut Vec<u8>) -> Result<Option<u64>> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8];
        if r.read(&mut b).map_err(io)? == 0 {
            return if i == 0 { Ok(None) } else { Err(bad("truncated varint")) };
        }
        raw.push(b[0]);
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(bad("varint longer than 10 bytes"))
}

/// Copies `n` bytes of `r` onto `out`.
fn copy(r: &mut impl BufRead, n: u64, out: &mut Vec<u8>) -> Result<()> {
    let got = std::io::copy(&mut r.by_ref().take(n), out).map_err(io)?;
    if got != n {
        return Err(bad("truncated field"));
    }
    Ok(())
}

/// Reads the fields of one message from `r`: each length-delimited field numbered `special` is
/// handed to `take` with its length; every other field is appended, key included, to the returned
/// bytes.
fn split(
    r: &mut impl BufRead,
    special: u64,
    mut take: impl FnMut(&mut dyn BufRead, u64) -> Result<()>,
) -> Result<Vec<u8>> {
    let mut rest = Vec::new();
    loop {
        let mark = rest.len();
        let Some(key) = varint(r, &mut rest)? else { return Ok(rest) };
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            2 => {
                let len = varint(r, &mut rest)?.ok_or_else(|| bad("truncated field"))?;
                if number == special {
                    rest.truncate(mark);
                    let mut part = r.by_ref().take(len);
                    take(&mut part, len)?;
                    if part.limit() != 0 {
                        return Err(bad("field not read to its end"));
                    }
                } else {
                    copy(r, len, &mut rest)?;
                }
            }
            0 => {
                varint(r, &mut rest)?.ok_or_else(|| bad("truncated varint"))?;
            }
            1 => copy(r, 8, &mut rest)?,
            5 => copy(r, 4, &mut rest)?,
            w => return Err(bad(&format!("wire type {w} of field {number}"))),
        }
    }
}

/// Decodes a model from `r` (see the module doc).
pub(crate) fn decode_model(r: &mut impl BufRead) -> Result<ModelProto> {
    let mut graph: Option<GraphProto> = None;
    let rest = split(r, MODEL_GRAPH, |mut part, _| {
        let mut inits: Vec<TensorProto> = Vec::new();
        let mut buf = Vec::new();
        let rest = split(&mut part, GRAPH_INITIALIZER, |t, n| {
            buf.clear();
            let n = usize::try_from(n).map_err(|_| bad("initializer too large"))?;
            buf.try_reserve_exact(n).map_err(|_| Error::out_of_memory("onnx initializer", n))?;
            t.read_to_end(&mut buf).map_err(io)?;
            inits.push(TensorProto::decode(buf.as_slice()).map_err(|e| bad(&e.to_string()))?);
            Ok(())
        })?;
        let mut g = GraphProto::decode(rest.as_slice()).map_err(|e| bad(&e.to_string()))?;
        g.initializer = inits;
        // A repeated embedded message merges into the first (protobuf semantics).
        match &mut graph {
            Some(first) => {
                let mut bytes = Vec::new();
                g.encode(&mut bytes).map_err(|e| bad(&e.to_string()))?;
                first.merge(bytes.as_slice()).map_err(|e| bad(&e.to_string()))?;
            }
            None => graph = Some(g),
        }
        Ok(())
    })?;
    let mut model = ModelProto::decode(rest.as_slice()).map_err(|e| bad(&e.to_string()))?;
    model.graph = graph;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::NodeProto;

    /// A model with two initializers between nodes, a doc string after the graph, and every
    /// wire type in its fields.
    fn sample() -> ModelProto {
        let t = |name: &str, raw: Vec<u8>| TensorProto {
            name: Some(name.into()),
            dims: vec![raw.len() as i64],
            data_type: Some(2),
            raw_data: Some(raw),
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![NodeProto { op_type: Some("Relu".into()), ..Default::default() }],
                initializer: vec![t("a", vec![1, 2, 3]), t("b", (0..=255).collect())],
                ..Default::default()
            }),
            doc_string: Some("after the graph".into()),
            ..Default::default()
        }
    }

    #[test]
    fn streamed_decoding_equals_prost_decoding() {
        let model = sample();
        let bytes = model.encode_to_vec();
        let streamed = decode_model(&mut std::io::BufReader::with_capacity(7, bytes.as_slice())).unwrap();
        assert_eq!(streamed, ModelProto::decode(bytes.as_slice()).unwrap());
        assert_eq!(streamed, model);
    }

    #[test]
    fn truncated_or_malformed_input_is_an_error() {
        let bytes = sample().encode_to_vec();
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            let e = decode_model(&mut &bytes[..cut]).unwrap_err().to_string();
            assert!(e.contains("not an ONNX model"), "{cut}: {e}");
        }
        // Wire type 3 (groups) is not used by ONNX.
        let e = decode_model(&mut &[0x0bu8, 0][..]).unwrap_err().to_string();
        assert!(e.contains("wire type 3"), "{e}");
    }
}
