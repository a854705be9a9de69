//! whisper.cpp's ggml Silero VAD files (`ggml-silero-v5.1.2.bin`, `ggml-silero-v6.2.0.bin`,
//! what `whisper-cli --vad-model` and whisper.rn's `initWhisperVad` load), as
//! `models/convert-silero-vad-to-ggml.py` writes them, all little-endian:
//!
//! - the ggml magic (u32), then the model type as an i32 length and its bytes
//!   (`silero-16k`), the Silero version (three i32), window and context sizes, the encoder
//!   layer count and each layer's in/out channels and kernel size, the LSTM's input and
//!   hidden sizes, and the final convolution's in/out channels (all i32);
//! - then tensors to the end of the file, each an i32 dimension count, name length and
//!   type (0 f32, 1 f16), the dimensions innermost first, the name, and the elements,
//!   with no padding. Names are the PyTorch state dict's (`_model.encoder.0.reparam_conv.
//!   weight`); squeezed shapes (the final convolution's bias has none).
//!
//! Every count and length is checked against the bytes left; the header must describe the
//! Silero network sotto implements.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{FormatError, Result};

/// The ggml magic that begins every whisper.cpp model file.
pub const MAGIC: u32 = crate::ggml::MAGIC;

/// A Silero VAD read from a ggml file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgmlVad {
    /// The Silero release the weights come from, e.g. (6, 2, 0).
    pub version: (i32, i32, i32),
    /// Each tensor by its PyTorch name: its shape (outermost first, as the file squeezed
    /// it) and values (f16 widened to f32).
    pub tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
}

/// The header the reader requires: Silero's 16 kHz network.
const WINDOW: i32 = 512;
const CONTEXT: i32 = 64;
const LAYERS: [(i32, i32); 4] = [(129, 128), (128, 64), (64, 64), (64, 128)];
const HIDDEN: i32 = 128;

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| {
                format!(
                    "truncated: {what} needs {n} bytes at offset {}, the file has {}",
                    self.at,
                    self.data.len()
                )
            })?;
        let b = &self.data[self.at..end];
        self.at = end;
        Ok(b)
    }

    fn i32(&mut self, what: &str) -> std::result::Result<i32, String> {
        let b = self.bytes(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count or size field: non-negative and at most `max`.
    fn count(&mut self, what: &str, max: usize) -> std::result::Result<usize, String> {
        let v = self.i32(what)?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{what} is {v}"))
    }

    fn done(&self) -> bool {
        self.at == self.data.len()
    }
}

/// Reads a ggml Silero VAD file's bytes; `path` names it in errors.
pub fn read(data: &[u8], path: &Path) -> Result<GgmlVad> {
    let fail = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg: format!("not a readable ggml Silero VAD file: {msg}"),
    };
    let unsupported = |msg: String| FormatError::Unsupported {
        path: path.to_path_buf(),
        msg,
    };
    let mut r = Reader { data, at: 0 };
    let magic = r.i32("the magic").map_err(fail)? as u32;
    if magic != MAGIC {
        return Err(fail(format!(
            "magic {magic:#010x}, not ggml's {MAGIC:#010x}"
        )));
    }
    let type_len = r.count("the model type's length", 64).map_err(fail)?;
    let model_type = r.bytes(type_len, "the model type").map_err(fail)?;
    let model_type = String::from_utf8_lossy(model_type).into_owned();
    if model_type != "silero-16k" {
        return Err(unsupported(format!(
            "VAD model type {model_type:?} (sotto runs silero-16k)"
        )));
    }
    let version = (
        r.i32("the version").map_err(fail)?,
        r.i32("the version").map_err(fail)?,
        r.i32("the version").map_err(fail)?,
    );
    let mut header = vec![
        r.i32("the window size").map_err(fail)?,
        r.i32("the context size").map_err(fail)?,
    ];
    let layers = r.i32("the encoder layer count").map_err(fail)?;
    if layers != LAYERS.len() as i32 {
        return Err(unsupported(format!(
            "{layers} encoder layers (Silero has {})",
            LAYERS.len()
        )));
    }
    for _ in 0..LAYERS.len() {
        for what in ["channels in", "channels out", "kernel size"] {
            header.push(r.i32(what).map_err(fail)?);
        }
    }
    for what in [
        "LSTM input",
        "LSTM hidden",
        "final conv in",
        "final conv out",
    ] {
        header.push(r.i32(what).map_err(fail)?);
    }
    let mut want = vec![WINDOW, CONTEXT];
    for (c_in, c_out) in LAYERS {
        want.extend([c_in, c_out, 3]);
    }
    want.extend([HIDDEN, HIDDEN, HIDDEN, 1]);
    if header != want {
        return Err(unsupported(format!(
            "a Silero network of other sizes (header {header:?}, sotto runs {want:?})"
        )));
    }
    let mut tensors = BTreeMap::new();
    while !r.done() {
        let n_dims = r.count("a tensor's dimension count", 4).map_err(fail)?;
        let name_len = r.count("a tensor's name length", 256).map_err(fail)?;
        let ftype = r.i32("a tensor's type").map_err(fail)?;
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(r.count("a tensor dimension", 1 << 24).map_err(fail)?);
        }
        dims.reverse();
        let name = r.bytes(name_len, "a tensor name").map_err(fail)?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| fail("a tensor name is not UTF-8".into()))?;
        let count = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= data.len())
            .ok_or_else(|| fail(format!("tensor {name} has shape {dims:?}: too large")))?;
        let values = match ftype {
            0 => r
                .bytes(count * 4, &name)
                .map_err(fail)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            1 => r
                .bytes(count * 2, &name)
                .map_err(fail)?
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            t => {
                return Err(unsupported(format!(
                    "tensor {name} has ggml type {t} (a VAD file holds f32 or f16)"
                )))
            }
        };
        if tensors.insert(name.clone(), (dims, values)).is_some() {
            return Err(fail(format!("tensor {name} appears twice")));
        }
    }
    Ok(GgmlVad { version, tensors })
}

/// A ggml Silero VAD file as whisper.cpp's converter lays it out (f16 convolution
/// weights and STFT basis, other tensors f32, shapes squeezed), from PyTorch-named
/// tensors with their full shapes. The reader's counterpart: what it writes, whisper.cpp's
/// `--vad-model` loads.
pub fn write(version: (i32, i32, i32), tensors: &[(&str, &[usize], &[f32])]) -> Vec<u8> {
    fn i32s(out: &mut Vec<u8>, vs: &[i32]) {
        for v in vs {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut out = Vec::new();
    i32s(&mut out, &[MAGIC as i32, 10]);
    out.extend_from_slice(b"silero-16k");
    i32s(
        &mut out,
        &[version.0, version.1, version.2, WINDOW, CONTEXT],
    );
    i32s(&mut out, &[LAYERS.len() as i32]);
    for (c_in, c_out) in LAYERS {
        i32s(&mut out, &[c_in, c_out, 3]);
    }
    i32s(&mut out, &[HIDDEN, HIDDEN, HIDDEN, 1]);
    for &(name, shape, values) in tensors {
        let stft = name.ends_with("stft.forward_basis_buffer");
        // The converter keeps the STFT basis's 3 dims and squeezes every other tensor.
        let dims: Vec<usize> = if stft {
            shape.to_vec()
        } else {
            shape.iter().copied().filter(|&d| d != 1).collect()
        };
        let f16 = stft
            || (name.contains("weight")
                && (name.contains("encoder") || name.contains("_model.decoder.decoder.2")));
        i32s(
            &mut out,
            &[dims.len() as i32, name.len() as i32, i32::from(f16)],
        );
        let inner_first: Vec<i32> = dims.iter().rev().map(|&d| d as i32).collect();
        i32s(&mut out, &inner_first);
        out.extend_from_slice(name.as_bytes());
        for &v in values {
            if f16 {
                out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    out
}

/// Whether `data` begins with the ggml magic (a ggml VAD file rather than ONNX).
pub fn is_ggml(data: &[u8]) -> bool {
    data.len() >= 4 && u32::from_le_bytes([data[0], data[1], data[2], data[3]]) == MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Vec<u8> {
        write(
            (6, 2, 0),
            &[
                ("_model.decoder.decoder.2.bias", &[1], &[0.25]),
                ("_model.decoder.rnn.bias_ih", &[3], &[1.0, -2.0, 3.5]),
                (
                    "_model.encoder.0.reparam_conv.weight",
                    &[2, 1, 3],
                    &[0.5, 1.0, 2.0, -1.0, 0.0, 4.0],
                ),
            ],
        )
    }

    #[test]
    fn reads_what_the_converter_layout_holds() {
        let v = read(&tiny(), Path::new("t.bin")).unwrap();
        assert_eq!(v.version, (6, 2, 0));
        assert_eq!(
            v.tensors["_model.decoder.decoder.2.bias"],
            (vec![], vec![0.25])
        );
        assert_eq!(
            v.tensors["_model.decoder.rnn.bias_ih"],
            (vec![3], vec![1.0, -2.0, 3.5])
        );
        // Squeezed to [2, 3], stored as f16 (these values are exact in f16).
        assert_eq!(
            v.tensors["_model.encoder.0.reparam_conv.weight"],
            (vec![2, 3], vec![0.5, 1.0, 2.0, -1.0, 0.0, 4.0])
        );
    }

    #[test]
    fn every_truncation_and_bad_header_is_an_error() {
        let good = tiny();
        for n in 0..good.len() {
            match read(&good[..n], Path::new("t.bin")) {
                Err(e) => assert!(e.to_string().starts_with("t.bin: "), "{n}: {e}"),
                // Cut between tensors: fewer tensors (the network then names the missing).
                Ok(v) => assert!(v.tensors.len() < 3, "{n}"),
            }
        }
        let mut other = good.clone();
        other[4 * 5 + 10] = 99; // the window size's low byte
        let err = read(&other, Path::new("t.bin")).unwrap_err().to_string();
        assert!(err.contains("other sizes"), "{err}");
        let mut ftype = good.clone();
        // The last tensor: three i32, two dims, its name, six f16; its type is the third i32.
        let name = "_model.encoder.0.reparam_conv.weight";
        let start = good.len() - (3 * 4 + 2 * 4 + name.len() + 6 * 2);
        ftype[start + 8] = 8;
        let err = read(&ftype, Path::new("t.bin")).unwrap_err().to_string();
        assert!(err.contains("ggml type 8"), "{err}");
        let err = read(b"\x08\x00\x00\x00rest", Path::new("t.bin"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("magic"), "{err}");
    }
}
