//! The initializers (weights) of an ONNX model file, read from its protobuf encoding with
//! no ONNX runtime: `ModelProto.graph` (field 7) → `GraphProto.initializer` (field 5) →
//! `TensorProto` {dims 1, data_type 2, float_data 4, int64_data 7, name 8, raw_data 9}.
//! Enough for small models whose graph the caller implements itself (Silero VAD). Every
//! length is checked against the input; nothing is allocated from a claimed size.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{FormatError, Result};

/// One initializer: shape and little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxTensor {
    pub dims: Vec<i64>,
    /// ONNX `TensorProto.DataType`: 1 float, 7 int64, ...
    pub data_type: i32,
    pub data: Vec<u8>,
}

impl OnnxTensor {
    pub const FLOAT: i32 = 1;
    pub const INT64: i32 = 7;

    /// The values of a float tensor.
    pub fn floats(&self) -> Option<Vec<f32>> {
        (self.data_type == Self::FLOAT && self.data.len().is_multiple_of(4)).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }

    /// The values of an int64 tensor.
    pub fn int64s(&self) -> Option<Vec<i64>> {
        (self.data_type == Self::INT64 && self.data.len().is_multiple_of(8)).then(|| {
            self.data
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        })
    }
}

/// A protobuf reader over one message's bytes.
struct Wire<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// A field's value, by wire type.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

impl<'a> Wire<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Wire { buf, pos: 0 }
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// The next field: its number and value; None at the end, Err on malformed bytes.
    fn field(&mut self) -> std::result::Result<Option<(u64, Value<'a>)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint().ok_or("truncated field key")?;
        let (number, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Value::Varint(self.varint().ok_or("truncated varint")?),
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if self.buf.len() - self.pos < n {
                    return Err("truncated fixed-width field".into());
                }
                self.pos += n;
                Value::Fixed
            }
            2 => {
                let len = self.varint().ok_or("truncated length")?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= self.buf.len() - self.pos)
                    .ok_or("length past the end of the message")?;
                let bytes = &self.buf[self.pos..self.pos + len];
                self.pos += len;
                Value::Bytes(bytes)
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((number, value)))
    }
}

/// Reads every initializer of the ONNX model in `data`; `path` names it in errors.
pub fn read_initializers(data: &[u8], path: &Path) -> Result<BTreeMap<String, OnnxTensor>> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg: format!("not a readable ONNX model: {msg}"),
    };
    let mut graph = None;
    let mut model = Wire::new(data);
    while let Some((number, value)) = model.field().map_err(invalid)? {
        if let (7, Value::Bytes(b)) = (number, value) {
            graph = Some(b);
        }
    }
    let graph = graph.ok_or_else(|| invalid("no graph".into()))?;
    let mut out = BTreeMap::new();
    let mut g = Wire::new(graph);
    while let Some((number, value)) = g.field().map_err(invalid)? {
        if let (5, Value::Bytes(b)) = (number, value) {
            let (name, t) = tensor(b).map_err(invalid)?;
            out.insert(name, t);
        }
    }
    Ok(out)
}

fn tensor(bytes: &[u8]) -> std::result::Result<(String, OnnxTensor), String> {
    let mut w = Wire::new(bytes);
    let (mut dims, mut data_type, mut name) = (Vec::new(), 0i32, String::new());
    let (mut raw, mut floats, mut ints): (Option<&[u8]>, Vec<u8>, Vec<u8>) =
        (None, Vec::new(), Vec::new());
    while let Some((number, value)) = w.field()? {
        match (number, value) {
            (1, Value::Varint(d)) => dims.push(d as i64),
            (1, Value::Bytes(packed)) => {
                let mut p = Wire::new(packed);
                while p.pos < packed.len() {
                    dims.push(p.varint().ok_or("truncated packed dims")? as i64);
                }
            }
            (2, Value::Varint(t)) => data_type = t as i32,
            (4, Value::Bytes(packed)) => floats.extend_from_slice(packed),
            (7, Value::Bytes(packed)) => {
                let mut p = Wire::new(packed);
                while p.pos < packed.len() {
                    let v = p.varint().ok_or("truncated packed int64s")? as i64;
                    ints.extend_from_slice(&v.to_le_bytes());
                }
            }
            (8, Value::Bytes(n)) => {
                name = String::from_utf8(n.to_vec()).map_err(|_| "a name is not UTF-8")?;
            }
            (9, Value::Bytes(r)) => raw = Some(r),
            (13 | 14, _) => return Err(format!("tensor {name:?} keeps its data outside the file")),
            _ => {}
        }
    }
    let data = match raw {
        Some(r) => r.to_vec(),
        None if !floats.is_empty() => floats,
        None => ints,
    };
    let numel = dims
        .iter()
        .try_fold(1u64, |a, &d| {
            u64::try_from(d).ok().and_then(|d| a.checked_mul(d))
        })
        .ok_or_else(|| format!("tensor {name:?} has dims {dims:?}"))?;
    let size = match data_type {
        1 => 4,
        7 => 8,
        other => {
            return Err(format!(
                "tensor {name:?} has data type {other} (float or int64 expected)"
            ))
        }
    };
    if numel.checked_mul(size) != Some(data.len() as u64) {
        return Err(format!(
            "tensor {name:?} has {} bytes for dims {dims:?}",
            data.len()
        ));
    }
    Ok((
        name,
        OnnxTensor {
            dims,
            data_type,
            data,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn bytes_field(n: u64, b: &[u8], out: &mut Vec<u8>) {
        varint(n << 3 | 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    /// A model with one float initializer `w` of dims [2, 3] and one int64 `k` = [-1, 64].
    fn model() -> Vec<u8> {
        let mut w = Vec::new();
        varint(1 << 3, &mut w);
        varint(2, &mut w);
        varint(1 << 3, &mut w);
        varint(3, &mut w);
        varint(2 << 3, &mut w);
        varint(1, &mut w);
        bytes_field(8, b"w", &mut w);
        let raw: Vec<u8> = (0..6)
            .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
            .collect();
        bytes_field(9, &raw, &mut w);
        let mut k = Vec::new();
        let mut dims = Vec::new();
        varint(2, &mut dims);
        bytes_field(1, &dims, &mut k);
        varint(2 << 3, &mut k);
        varint(7, &mut k);
        bytes_field(8, b"k", &mut k);
        let mut ints = Vec::new();
        varint(-1i64 as u64, &mut ints);
        varint(64, &mut ints);
        bytes_field(7, &ints, &mut k);
        let mut graph = Vec::new();
        bytes_field(1, b"a node we skip", &mut graph);
        bytes_field(5, &w, &mut graph);
        bytes_field(5, &k, &mut graph);
        let mut model = Vec::new();
        varint(1 << 3, &mut model); // ir_version
        varint(8, &mut model);
        bytes_field(7, &graph, &mut model);
        model
    }

    #[test]
    fn reads_raw_and_packed_initializers() {
        let t = read_initializers(&model(), Path::new("m.onnx")).unwrap();
        assert_eq!(t["w"].dims, vec![2, 3]);
        assert_eq!(t["w"].floats().unwrap(), vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(t["k"].int64s().unwrap(), vec![-1, 64]);
    }

    #[test]
    fn cut_models_are_errors() {
        let m = model();
        for len in 0..m.len() {
            let r = read_initializers(&m[..len], Path::new("m.onnx"));
            if let Ok(t) = r {
                // A cut on a field boundary of the outer message only drops the graph.
                panic!("{len}: parsed {t:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn corrupted_models_never_panic(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
            let mut m = model();
            for (i, v) in flips {
                let at = i.index(m.len());
                m[at] ^= v | 1;
            }
            let _ = read_initializers(&m, Path::new("m.onnx"));
        }
    }
}
