//! whisper.cpp's legacy ggml `.bin` (magic `0x67676d6c`, not GGUF), read and written.
//!
//! Layout (little endian): `i32 magic; 11 × i32 hparams (… n_mels, ftype); i32 n_mel,
//! i32 n_fft, f32 filters[n_mel·n_fft]; i32 n_tokens, n_tokens × {u32 len, bytes};`
//! then tensors until EOF: `i32 n_dims, i32 name_len, i32 ttype, i32 ne[n_dims], name, data`
//! with `ne` the reversed shape (`ne[0]` fastest).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use half::f16;

use sotto_quant::{KQuant, QuantType, QK_K};

use crate::names::{self, Role};
use crate::storage::Reader;
use crate::{DType, FormatError, Hparams, ModelConfig, Result, SourceFormat, Storage};
use crate::{TensorData, WhisperFile};

/// `"ggml"` as a little-endian u32.
pub const MAGIC: u32 = 0x6767_6d6c;
/// Quantized files add `QNT_VERSION_FACTOR × qnt_version` to `ftype`.
pub const QNT_VERSION_FACTOR: i32 = 1000;

/// Longest tensor name we accept (real names are under 40 bytes).
const MAX_NAME: usize = 1024;

/// ggml tensor type id → dtype (the types whisper.cpp's quantizer writes).
pub fn dtype_from_ggml(id: i32) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::Q4_0,
        3 => DType::Q4_1,
        6 => DType::Q5_0,
        7 => DType::Q5_1,
        8 => DType::Q8_0,
        _ => return None,
    })
}

/// The dtype of a block type sotto has kernels for.
fn dtype_of(t: QuantType) -> DType {
    match t {
        QuantType::Q4_0 => DType::Q4_0,
        QuantType::Q4_1 => DType::Q4_1,
        QuantType::Q5_0 => DType::Q5_0,
        QuantType::Q5_1 => DType::Q5_1,
        // (No k-quant becomes q8_1, an activation type.)
        QuantType::Q8_0 | QuantType::Q8_1 => DType::Q8_0,
    }
}

/// dtype → ggml tensor type id.
pub fn ggml_type_id(dtype: DType) -> Option<i32> {
    Some(match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 6,
        DType::Q5_1 => 7,
        DType::Q8_0 => 8,
        _ => return None,
    })
}

/// Whole-file type (`ftype % 1000`): which `GGML_FTYPE` values we can read.
fn known_ftype(ftype: i32) -> bool {
    matches!(ftype, 0 | 1 | 2 | 3 | 7 | 8 | 9 | 10..=14)
}

/// Opens a ggml `.bin` (memory-mapped; tensors are views of the map).
pub fn load(path: &Path) -> Result<WhisperFile> {
    from_storage(&Storage::map_file(path)?, path)
}

/// Parses a ggml file held in `data`; `path` names it in errors.
pub fn from_storage(data: &Storage, path: &Path) -> Result<WhisperFile> {
    let mut r = Reader::new(data.as_bytes(), path);
    let magic = r.u32("magic")?;
    if magic != MAGIC {
        return Err(r.invalid(format!(
            "unknown magic 0x{magic:08x}, expected ggml 0x{MAGIC:08x}"
        )));
    }
    let mut hp = [0usize; 10];
    let labels = [
        "n_vocab",
        "n_audio_ctx",
        "n_audio_state",
        "n_audio_head",
        "n_audio_layer",
        "n_text_ctx",
        "n_text_state",
        "n_text_head",
        "n_text_layer",
        "n_mels",
    ];
    for (slot, label) in hp.iter_mut().zip(labels) {
        *slot = positive(&mut r, label)?;
    }
    let hparams = Hparams {
        n_vocab: hp[0],
        n_audio_ctx: hp[1],
        n_audio_state: hp[2],
        n_audio_head: hp[3],
        n_audio_layer: hp[4],
        n_text_ctx: hp[5],
        n_text_state: hp[6],
        n_text_head: hp[7],
        n_text_layer: hp[8],
        n_mels: hp[9],
    };
    let ftype = r.i32("ftype")?;
    if ftype < 0 || !known_ftype(ftype % QNT_VERSION_FACTOR) {
        let msg = format!("ggml ftype {ftype} (known: 0 f32, 1 f16, 2/3 q4, 7 q8_0, 8/9 q5, 10-14 q2_K-q6_K, plus 1000×qnt_version)");
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            msg,
        });
    }
    names::check_hparams(path, &hparams)?;
    let mel_filters = read_mel(&mut r, hparams.n_mels)?;
    let vocab = read_vocab(&mut r, hparams.n_vocab)?;
    let (tensors, weights_note) = read_tensors(&mut r, data)?;
    names::check(path, &hparams, &tensors)?;
    Ok(WhisperFile {
        path: path.to_path_buf(),
        format: SourceFormat::Ggml,
        hparams,
        tensors,
        vocab,
        mel_filters: Some(mel_filters),
        config: ModelConfig {
            weights_note,
            ..ModelConfig::default()
        },
    })
}

fn positive(r: &mut Reader, what: &str) -> Result<usize> {
    let v = r.i32(what)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| r.invalid(format!("{what} = {v}, expected > 0")))
}

/// `[n_mels, n_fft]` f32 filters.
fn read_mel(r: &mut Reader, n_mels: usize) -> Result<Vec<f32>> {
    let n_mel = positive(r, "mel filter count")?;
    let n_fft = positive(r, "mel filter length")?;
    if n_mel != n_mels {
        return Err(r.invalid(format!("{n_mel} mel filters for n_mels = {n_mels}")));
    }
    let n = n_mel.checked_mul(n_fft).and_then(|n| n.checked_mul(4));
    let n = n.ok_or_else(|| r.invalid(format!("mel filter size {n_mel} × {n_fft} overflows")))?;
    let bytes = r.bytes(n, "mel filters")?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn read_vocab(r: &mut Reader, n_vocab: usize) -> Result<Vec<Vec<u8>>> {
    let n = r.i32("token count")?;
    let n = usize::try_from(n).ok().filter(|&n| n <= n_vocab);
    let n = n.ok_or_else(|| r.invalid(format!("token count out of range 0..={n_vocab}")))?;
    // Each token takes at least 4 bytes, so this bound keeps a lying count from allocating.
    let mut vocab = Vec::with_capacity(n.min(r.remaining() / 4));
    for i in 0..n {
        let len = r.u32("token length")? as usize;
        vocab.push(r.bytes(len, &format!("token {i}"))?.to_vec());
    }
    Ok(vocab)
}

/// The file's tensors, and a note naming the k-quant types among them (read as others).
fn read_tensors(
    r: &mut Reader,
    data: &Storage,
) -> Result<(BTreeMap<String, TensorData>, Option<String>)> {
    let mut tensors = BTreeMap::new();
    let mut kquants = BTreeMap::new();
    while r.remaining() > 0 {
        let at = r.pos();
        let n_dims = r.i32("tensor rank")?;
        let name_len = r.i32("tensor name length")?;
        let ttype = r.i32("tensor type")?;
        if !(1..=4).contains(&n_dims) {
            return Err(r.invalid(format!(
                "tensor at offset {at} has rank {n_dims} (expected 1..=4)"
            )));
        }
        let name_len = usize::try_from(name_len)
            .ok()
            .filter(|&n| (1..=MAX_NAME).contains(&n));
        let name_len = name_len
            .ok_or_else(|| r.invalid(format!("tensor at offset {at} has a bad name length")))?;
        let mut ne = Vec::with_capacity(4);
        for _ in 0..n_dims {
            ne.push(positive(r, "tensor dimension")?);
        }
        let name = std::str::from_utf8(r.bytes(name_len, "tensor name")?)
            .map_err(|_| r.invalid(format!("tensor name at offset {at} is not UTF-8")))?
            .to_string();
        // k-quants are read as the type sotto runs them as (`KQuant::target`).
        let kquant = KQuant::from_ggml_type_id(ttype);
        let dtype = match kquant {
            Some(k) => dtype_of(k.target()),
            None => dtype_from_ggml(ttype).ok_or_else(|| FormatError::Unsupported {
                path: r.path().to_path_buf(),
                msg: format!("tensor {name} has ggml type {ttype}"),
            })?,
        };
        let (per_block, block_bytes) = kquant.map_or(dtype.block(), |k| (QK_K, k.block_bytes()));
        let type_name = kquant.map_or(format!("{dtype:?}"), |k| k.name().to_string());
        // Quantized blocks run along ne[0], the row.
        if ne[0] % per_block != 0 {
            return Err(r.invalid(format!(
                "tensor {name}: row length {} is not a whole number of {type_name} blocks",
                ne[0]
            )));
        }
        let numel = ne.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let nbytes = numel.and_then(|n| (n / per_block).checked_mul(block_bytes));
        let nbytes =
            nbytes.ok_or_else(|| r.invalid(format!("tensor {name}: size {ne:?} overflows")))?;
        let range = r.take(nbytes, &format!("data of tensor {name}"))?;
        let mut bytes = data
            .slice(range)
            .ok_or_else(|| r.invalid("tensor data out of bounds"))?;
        if let Some(k) = kquant {
            let numel = numel.unwrap_or_default();
            let mut out = vec![0u8; dtype.nbytes(numel).unwrap_or_default()];
            k.transcode_row(bytes.as_bytes(), &mut out);
            // The file's pages are not read again: the load peaks at the new blocks.
            bytes.release();
            bytes = Storage::from_vec(out);
            kquants.insert(k.name(), dtype);
        }
        let mut shape: Vec<usize> = ne.into_iter().rev().collect();
        if matches!(name.as_str(), "encoder.conv1.bias" | "encoder.conv2.bias")
            && shape.len() == 2
            && shape[1] == 1
        {
            shape.pop();
        }
        if tensors
            .insert(
                name.clone(),
                TensorData {
                    dtype,
                    shape,
                    data: bytes,
                },
            )
            .is_some()
        {
            return Err(r.invalid(format!("tensor {name} appears twice")));
        }
    }
    let note = (!kquants.is_empty()).then(|| {
        let each: Vec<String> = kquants
            .iter()
            .map(|(k, d)| format!("{k} as {}", format!("{d:?}").to_lowercase()))
            .collect();
        format!(
            "k-quant weights run as the nearest type with kernels: {}",
            each.join(", ")
        )
    });
    Ok((tensors, note))
}

/// Writes `file` as an f16 ggml file exactly as whisper.cpp's converters do: conv and
/// 2-D weights f16; conv biases as `[d, 1]` f32; positional embeddings and every 1-D
/// tensor f32; tensors in [`names::expected`] order. `mel_filters` is `[n_mels, n_fft]`.
///
/// Atomic: writes a temporary file in the same folder, then renames it over `out`.
pub fn write(file: &WhisperFile, mel_filters: &[f32], out: &Path) -> Result<()> {
    write_file(file, mel_filters, out, None)
}

/// Quantizes one row: `x` holds whole blocks, `out` exactly their bytes in the target type.
pub type RowQuantizer<'a> = &'a dyn Fn(&[f32], &mut [u8]);

/// Writes `file` as whisper.cpp's `whisper-quantize` would write it from the f16 file of
/// [`write`]: the 2-D weights (linear layers and the token embedding, rows along the
/// input dimension) become `dtype` blocks made by `quantize_row`, from their f32 values;
/// every other tensor is stored as in the f16 file; `ftype` is `1000 × QNT_VERSION` plus
/// ggml's file type. `dtype` is one of q4_0, q4_1, q5_0, q5_1, q8_0.
///
/// With an f16 source the bytes are whisper.cpp's (it widens f16 to f32 before
/// quantizing too); an f32 source is quantized from its f32 values. Atomic, like [`write`].
pub fn write_quantized(
    file: &WhisperFile,
    mel_filters: &[f32],
    out: &Path,
    dtype: DType,
    quantize_row: RowQuantizer,
) -> Result<()> {
    let per_row = |_: &str, x: &[f32], n: usize, q: &mut [u8]| {
        let row_bytes = q.len() / (x.len() / n);
        for (xr, qr) in x.chunks_exact(n).zip(q.chunks_exact_mut(row_bytes)) {
            quantize_row(xr, qr);
        }
    };
    write_quantized_matrices(file, mel_filters, out, dtype, &per_row)
}

/// Quantizes one 2-D weight at once: its tensor name, its values as f32 (Shape: [rows, n],
/// rows along the input dimension), `n`, and the bytes to fill (`rows` rows of `n`
/// values in the target type), for quantizers that look at whole matrices (GPTQ).
pub type MatrixQuantizer<'a> = &'a dyn Fn(&str, &[f32], usize, &mut [u8]);

/// As [`write_quantized`], each 2-D weight quantized whole by `quantize`.
pub fn write_quantized_matrices(
    file: &WhisperFile,
    mel_filters: &[f32],
    out: &Path,
    dtype: DType,
    quantize: MatrixQuantizer,
) -> Result<()> {
    if quantized_ftype(dtype).is_none() {
        return Err(FormatError::Unsupported {
            path: out.to_path_buf(),
            msg: format!("cannot quantize to {dtype:?} (known: q4_0, q4_1, q5_0, q5_1, q8_0)"),
        });
    }
    for spec in names::expected(&file.hparams) {
        let row = spec.shape.last().copied().unwrap_or(0);
        if spec.role == Role::Matrix && row % dtype.block().0 != 0 {
            return Err(FormatError::Unsupported {
                path: file.path.clone(),
                msg: format!(
                    "tensor {}: rows of {row} values are not whole {dtype:?} blocks",
                    spec.name
                ),
            });
        }
    }
    write_file(file, mel_filters, out, Some((dtype, quantize)))
}

/// ggml's version of the quantized block layouts (`GGML_QNT_VERSION`).
pub const QNT_VERSION: i32 = 2;

/// The file type (`GGML_FTYPE_MOSTLY_*`) of a model whose weights are `dtype` blocks.
fn quantized_ftype(dtype: DType) -> Option<i32> {
    Some(match dtype {
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q8_0 => 7,
        DType::Q5_0 => 8,
        DType::Q5_1 => 9,
        _ => return None,
    })
}

type Quantize<'a> = Option<(DType, MatrixQuantizer<'a>)>;

/// Whether a `dtype` tensor can be written into a file quantized to `target` (`None`: f16).
/// Floats always; q8_0 (a CTranslate2 int8 folder, a q8_0 file) as f16 values, or copied
/// into a q8_0 file; a quantized model is not quantized again to another type, as
/// whisper-quantize refuses it too.
fn readable(dtype: DType, target: Option<DType>) -> bool {
    match dtype {
        DType::F32 | DType::F16 | DType::BF16 => true,
        DType::Q8_0 => matches!(target, None | Some(DType::Q8_0)),
        _ => false,
    }
}

fn write_file(file: &WhisperFile, mel_filters: &[f32], out: &Path, quant: Quantize) -> Result<()> {
    let invalid = |msg: String| FormatError::Invalid {
        path: out.to_path_buf(),
        msg,
    };
    names::check(&file.path, &file.hparams, &file.tensors)?;
    let n_mels = file.hparams.n_mels;
    if mel_filters.is_empty() || !mel_filters.len().is_multiple_of(n_mels) {
        return Err(invalid(format!(
            "{} mel filter values do not split into {n_mels} filters",
            mel_filters.len()
        )));
    }
    if let Some((name, t)) = file
        .tensors
        .iter()
        .find(|(_, t)| !readable(t.dtype, quant.map(|q| q.0)))
    {
        return Err(FormatError::Unsupported {
            path: file.path.clone(),
            msg: format!(
                "tensor {name} is {:?}; only float models can be written or quantized (and \
                 q8_0 ones written as f16 or as q8_0)",
                t.dtype
            ),
        });
    }
    let file_name = out
        .file_name()
        .ok_or_else(|| invalid("output path has no file name".into()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = out.with_file_name(tmp_name);
    let result =
        write_tmp(file, mel_filters, quant, &tmp).and_then(|()| std::fs::rename(&tmp, out));
    result.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        FormatError::Io {
            path: out.to_path_buf(),
            source,
        }
    })
}

fn write_tmp(
    file: &WhisperFile,
    mel_filters: &[f32],
    quant: Quantize,
    tmp: &Path,
) -> std::io::Result<()> {
    let f = File::create(tmp)?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    write_to(file, mel_filters, quant, &mut w)?;
    let f = w.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()
}

fn i32_of(v: usize) -> std::io::Result<i32> {
    i32::try_from(v).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{v} exceeds i32"))
    })
}

/// The byte stream of [`write`] / [`write_quantized`] (inputs already checked).
fn write_to(
    file: &WhisperFile,
    mel_filters: &[f32],
    quant: Quantize,
    w: &mut impl Write,
) -> std::io::Result<()> {
    let hp = &file.hparams;
    w.write_all(&MAGIC.to_le_bytes())?;
    let fields = [
        hp.n_vocab,
        hp.n_audio_ctx,
        hp.n_audio_state,
        hp.n_audio_head,
        hp.n_audio_layer,
        hp.n_text_ctx,
        hp.n_text_state,
        hp.n_text_head,
        hp.n_text_layer,
        hp.n_mels,
    ];
    for v in fields {
        w.write_all(&i32_of(v)?.to_le_bytes())?;
    }
    let ftype = match quant {
        Some((dtype, _)) => {
            QNT_VERSION * QNT_VERSION_FACTOR + quantized_ftype(dtype).unwrap_or_default()
        }
        None => 1, // mostly f16
    };
    w.write_all(&ftype.to_le_bytes())?;
    w.write_all(&i32_of(hp.n_mels)?.to_le_bytes())?;
    w.write_all(&i32_of(mel_filters.len() / hp.n_mels)?.to_le_bytes())?;
    for v in mel_filters {
        w.write_all(&v.to_le_bytes())?;
    }
    w.write_all(&i32_of(file.vocab.len())?.to_le_bytes())?;
    for token in &file.vocab {
        w.write_all(&i32_of(token.len())?.to_le_bytes())?;
        w.write_all(token)?;
    }
    for spec in names::expected(hp) {
        let t = &file.tensors[&spec.name];
        let (target, ne): (DType, Vec<usize>) = match spec.role {
            Role::Matrix if quant.is_some() => (
                quant.map_or(DType::F16, |q| q.0),
                t.shape.iter().rev().copied().collect(),
            ),
            Role::ConvWeight | Role::Matrix => {
                (DType::F16, t.shape.iter().rev().copied().collect())
            }
            Role::ConvBias => (DType::F32, vec![1, t.shape[0]]),
            Role::PositionalEmbedding | Role::Vector => {
                (DType::F32, t.shape.iter().rev().copied().collect())
            }
        };
        let ttype = ggml_type_id(target).unwrap_or(0);
        for v in [i32_of(ne.len())?, i32_of(spec.name.len())?, ttype] {
            w.write_all(&v.to_le_bytes())?;
        }
        for d in ne {
            w.write_all(&i32_of(d)?.to_le_bytes())?;
        }
        w.write_all(spec.name.as_bytes())?;
        match quant {
            Some((dtype, quantize)) if target == dtype => {
                write_quantized_data(&spec.name, t, dtype, quantize, w)?
            }
            _ => write_data(t, target, w)?,
        }
    }
    Ok(())
}

/// Writes a float tensor's data as `target` (f32 or f16), copying when the types match
/// so f16 sources stay bit-exact; f32 → f16 rounds to nearest even, as numpy does.
fn write_data(t: &TensorData, target: DType, w: &mut impl Write) -> std::io::Result<()> {
    if t.dtype == target {
        return w.write_all(t.data.as_bytes());
    }
    let values = t
        .to_f32()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut buf = Vec::with_capacity(1 << 16);
    for chunk in values.chunks(1 << 14) {
        buf.clear();
        match target {
            DType::F16 => chunk
                .iter()
                .for_each(|&v| buf.extend_from_slice(&f16::from_f32(v).to_le_bytes())),
            _ => chunk
                .iter()
                .for_each(|&v| buf.extend_from_slice(&v.to_le_bytes())),
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Quantizes a float tensor (rows run along the last, fastest dimension) as a whole; a
/// tensor already in `dtype` (q8_0 from a CTranslate2 int8 folder) is copied as it is.
fn write_quantized_data(
    name: &str,
    t: &TensorData,
    dtype: DType,
    quantize: MatrixQuantizer,
    w: &mut impl Write,
) -> std::io::Result<()> {
    let bad = |msg: String| std::io::Error::new(std::io::ErrorKind::InvalidData, msg);
    let n = t.shape.last().copied().unwrap_or(0);
    if n == 0 || t.dtype.nbytes(t.numel()) != Some(t.data.len()) {
        return Err(bad(format!(
            "{:?} tensor {:?} holds {} bytes",
            t.dtype,
            t.shape,
            t.data.len()
        )));
    }
    let out_bytes = dtype
        .nbytes(n)
        .ok_or_else(|| bad(format!("row of {n} values")))?;
    if t.dtype == dtype {
        return w.write_all(t.data.as_bytes());
    }
    let values = t.to_f32().map_err(bad)?;
    let mut q = vec![0u8; values.len() / n * out_bytes];
    quantize(name, &values, n, &mut q);
    w.write_all(&q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ttype: i32, ne: &[i32], data_len: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [ne.len() as i32, 1, ttype].iter().chain(ne) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.push(b'x');
        b.extend(std::iter::repeat_n(0u8, data_len));
        b
    }

    fn parse(bytes: Vec<u8>) -> Result<BTreeMap<String, TensorData>> {
        let data = Storage::from_vec(bytes);
        let path = Path::new("t.bin");
        read_tensors(&mut Reader::new(data.as_bytes(), path), &data).map(|(t, _)| t)
    }

    #[test]
    fn quantized_tensors_keep_type_and_exact_size() {
        for (ttype, dtype, block_bytes) in [
            (2, DType::Q4_0, 18),
            (3, DType::Q4_1, 20),
            (6, DType::Q5_0, 22),
            (7, DType::Q5_1, 24),
            (8, DType::Q8_0, 34),
        ] {
            let t = &parse(record(ttype, &[64, 3], 2 * 3 * block_bytes)).unwrap()["x"];
            assert_eq!(
                (t.dtype, t.shape.as_slice(), t.data.len()),
                (dtype, &[3, 64][..], 6 * block_bytes)
            );
            // q8_0 reads as its values (all zero here); the others have no reader here.
            assert_eq!(t.to_f32().is_ok(), dtype == DType::Q8_0, "{dtype:?}");
            // One byte short, or a row that is not whole blocks, fails.
            assert!(parse(record(ttype, &[64, 3], 6 * block_bytes - 1)).is_err());
            assert!(parse(record(ttype, &[48, 3], 6 * block_bytes)).is_err());
        }
        // k-quants read as the type they run as: a q4_K super-block is eight q4_1 blocks;
        // a row must be whole super-blocks.
        let t = &parse(record(12, &[256, 2], 2 * 144)).unwrap()["x"];
        assert_eq!((t.dtype, t.data.len()), (DType::Q4_1, 2 * 8 * 20));
        assert!(parse(record(12, &[128, 2], 144)).is_err());
        assert!(parse(record(12, &[256, 2], 2 * 144 - 1)).is_err());
        // q8_K (ggml's activation type) and i8 are no weight types.
        for ttype in [15, 24] {
            assert!(matches!(
                parse(record(ttype, &[256], 292)),
                Err(FormatError::Unsupported { .. })
            ));
        }
    }
}
