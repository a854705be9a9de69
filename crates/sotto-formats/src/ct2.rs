//! CTranslate2 Whisper folders (faster-whisper): `model.bin`, `config.json`,
//! `vocabulary.txt`.
//!
//! `model.bin` (little endian, binary versions 2..=6):
//! `u32 version; str spec; u32 revision; u32 n_vars; n_vars × {str name; u8 rank;
//! u32 dims[rank]; u8 dtype (item size before v4); u32 nbytes; data}; u32 n_aliases (v3+);
//! n_aliases × {str alias; str target}` where `str` is `u16 len incl. NUL, bytes`.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::storage::Reader;
use crate::{names, DType, FormatError, Hparams, ModelConfig, Result, SourceFormat, Storage};
use crate::{BpeMerges, TensorData, WhisperFile};

/// Raw contents of a CTranslate2 `model.bin`, names as CTranslate2 spells them.
#[derive(Clone, Debug)]
pub struct Ct2Model {
    pub version: u32,
    pub spec: String,
    pub revision: u32,
    /// Variables by CTranslate2 name (`encoder/layer_0/self_attention/linear_0/weight`).
    pub variables: BTreeMap<String, TensorData>,
    /// Alias name → target variable name.
    pub aliases: BTreeMap<String, String>,
}

impl Ct2Model {
    /// A variable by name, following one alias.
    pub fn get(&self, name: &str) -> Option<&TensorData> {
        self.variables
            .get(name)
            .or_else(|| self.aliases.get(name).and_then(|t| self.variables.get(t)))
    }
}

/// Most dimensions a CTranslate2 variable may have; real files use at most 3.
const MAX_RANK: u8 = 8;

/// Parses a `model.bin` held in `data`; `path` names it in errors. Tensors are views of `data`.
pub fn read_model_bin(data: &Storage, path: &Path) -> Result<Ct2Model> {
    let mut r = Reader::new(data.as_bytes(), path);
    let version = r.u32("binary version")?;
    if !(2..=6).contains(&version) {
        let msg = format!("CTranslate2 binary version {version} (supported: 2 to 6)");
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            msg,
        });
    }
    let spec = read_str(&mut r, "spec name")?;
    let revision = r.u32("spec revision")?;
    let n_vars = r.u32("variable count")?;
    let mut variables = BTreeMap::new();
    for i in 0..n_vars {
        let name = read_str(&mut r, &format!("name of variable {i}"))?;
        let rank = r.u8("rank")?;
        if rank > MAX_RANK {
            return Err(r.invalid(format!("variable {name} has rank {rank} (max {MAX_RANK})")));
        }
        let mut shape = Vec::with_capacity(rank.into());
        for _ in 0..rank {
            shape.push(r.u32("dimension")? as usize);
        }
        let code = r.u8("dtype")?;
        let dtype = if version >= 4 {
            dtype_from_id(code)
        } else {
            dtype_from_item_size(code)
        };
        let dtype =
            dtype.ok_or_else(|| r.invalid(format!("variable {name} has unknown dtype {code}")))?;
        let nbytes = r.u32("byte count")? as usize;
        let expected = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| dtype.nbytes(n));
        if expected != Some(nbytes) {
            return Err(r.invalid(format!(
                "variable {name}: {nbytes} bytes do not hold a {dtype:?} tensor of shape {shape:?}"
            )));
        }
        let range = r.take(nbytes, &format!("data of {name}"))?;
        let bytes = data
            .slice(range)
            .ok_or_else(|| r.invalid("variable data out of bounds"))?;
        if variables
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
            return Err(r.invalid(format!("variable {name} appears twice")));
        }
    }
    let mut aliases = BTreeMap::new();
    if version >= 3 {
        let n_aliases = r.u32("alias count")?;
        for _ in 0..n_aliases {
            let alias = read_str(&mut r, "alias name")?;
            let target = read_str(&mut r, "alias target")?;
            if !variables.contains_key(&target) {
                return Err(r.invalid(format!("alias {alias} points to missing variable {target}")));
            }
            aliases.insert(alias, target);
        }
    }
    if r.remaining() != 0 {
        return Err(r.invalid(format!(
            "{} trailing bytes after offset {}",
            r.remaining(),
            r.pos()
        )));
    }
    Ok(Ct2Model {
        version,
        spec,
        revision,
        variables,
        aliases,
    })
}

fn read_str(r: &mut Reader, what: &str) -> Result<String> {
    let len = r.u16(what)? as usize;
    let at = r.pos();
    let bytes = r.bytes(len, what)?;
    match bytes.split_last() {
        Some((0, text)) if !text.contains(&0) => std::str::from_utf8(text)
            .map(str::to_string)
            .map_err(|_| r.invalid(format!("{what} at offset {at} is not UTF-8"))),
        _ => Err(r.invalid(format!(
            "{what} at offset {at} is not a NUL-terminated string"
        ))),
    }
}

fn dtype_from_id(id: u8) -> Option<DType> {
    Some(match id {
        0 => DType::F32,
        1 => DType::I8,
        2 => DType::I16,
        3 => DType::I32,
        4 => DType::F16,
        5 => DType::BF16,
        _ => return None,
    })
}

fn dtype_from_item_size(size: u8) -> Option<DType> {
    Some(match size {
        4 => DType::F32,
        2 => DType::I16,
        1 => DType::I8,
        _ => return None,
    })
}

/// Where the files of a CTranslate2 model are.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (dir, bin) = if std::fs::metadata(path).map_err(io)?.is_dir() {
        (path.to_path_buf(), path.join("model.bin"))
    } else {
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        (dir, path.to_path_buf())
    };
    Ok((dir, bin))
}

/// Loads the model bytes, joining `model.bin.part1` + `model.bin.part2` when the model
/// ships split (an owned buffer then; otherwise a memory map).
fn model_bytes(dir: &Path, bin: &Path) -> Result<Storage> {
    if bin.is_file() {
        return Storage::map_file(bin);
    }
    let part1 = dir.join("model.bin.part1");
    if !part1.is_file() {
        let msg = "no model.bin in this CTranslate2 folder".to_string();
        return Err(FormatError::Invalid {
            path: dir.to_path_buf(),
            msg,
        });
    }
    let mut joined = Vec::new();
    for k in 1.. {
        let part = dir.join(format!("model.bin.part{k}"));
        if !part.is_file() {
            break;
        }
        let bytes =
            std::fs::read(&part).map_err(|source| FormatError::Io { path: part, source })?;
        joined.extend_from_slice(&bytes);
    }
    Ok(Storage::from_vec(joined))
}

/// Opens a CTranslate2 Whisper folder, or its `model.bin` (the other files are read from
/// the same folder). `config.json` is optional; `vocabulary.txt` is required.
pub fn load(path: &Path) -> Result<WhisperFile> {
    let (dir, bin) = locate(path)?;
    let data = model_bytes(&dir, &bin)?;
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read_to_string(&p).map_err(|source| FormatError::Io { path: p, source })
    };
    let vocabulary =
        if dir.join("vocabulary.txt").is_file() || !dir.join("vocabulary.json").is_file() {
            read("vocabulary.txt")?
        } else {
            vocabulary_from_json(&read("vocabulary.json")?, &dir.join("vocabulary.json"))?
        };
    let config = if dir.join("config.json").is_file() {
        Some(read("config.json")?)
    } else {
        None
    };
    let mut file = from_parts(&data, &vocabulary, config.as_deref(), &bin)?;
    if dir.join("tokenizer.json").is_file() {
        let json = read("tokenizer.json")?;
        file.config.bpe_merges = Some(BpeMerges::new(json, dir.join("tokenizer.json")));
    }
    file.path = path.to_path_buf();
    Ok(file)
}

/// `vocabulary.json` (CTranslate2 3.0 and later: a JSON list of the tokens) as the lines
/// of a `vocabulary.txt`. A token never holds a newline: GPT-2's byte map spells it `Ċ`.
fn vocabulary_from_json(json: &str, path: &Path) -> Result<String> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    let tokens: Vec<Cow<str>> =
        serde_json::from_str(json).map_err(|e| invalid(format!("not a list of tokens: {e}")))?;
    let mut text = String::with_capacity(json.len());
    for (id, t) in tokens.iter().enumerate() {
        if t.contains('\n') {
            return Err(invalid(format!("token {id} {t:?} holds a newline")));
        }
        text.push_str(t);
        text.push('\n');
    }
    Ok(text)
}

#[derive(Deserialize)]
struct RawTokenizer<'a> {
    #[serde(borrow)]
    model: RawBpe<'a>,
}

#[derive(Deserialize)]
struct RawBpe<'a> {
    #[serde(borrow)]
    merges: Vec<RawMerge<'a>>,
}

/// `tokenizers` writes a merge as `"a b"` (older files) or as `["a", "b"]`; borrowed from
/// the file's text where it has no escapes (50 000 strings not allocated at every load).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawMerge<'a> {
    Joined(#[serde(borrow)] Cow<'a, str>),
    Pair(#[serde(borrow)] Cow<'a, str>, #[serde(borrow)] Cow<'a, str>),
}

/// The BPE merges of a Hugging Face `tokenizer.json`, as raw byte pairs in rank order.
pub fn parse_merges(text: &str, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    let raw: RawTokenizer =
        serde_json::from_str(text).map_err(|e| invalid(format!("bad tokenizer.json: {e}")))?;
    let table = unicode_to_byte();
    let to_bytes = |s: &str| -> Option<Vec<u8>> {
        s.chars()
            .map(|c| table.get(c as usize).copied().flatten())
            .collect()
    };
    raw.model
        .merges
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (a, b) = match m {
                RawMerge::Joined(s) => s
                    .split_once(' ')
                    .ok_or_else(|| invalid(format!("merge {i} {s:?} has no space")))?,
                RawMerge::Pair(a, b) => (a.as_ref(), b.as_ref()),
            };
            match (to_bytes(a), to_bytes(b)) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(invalid(format!(
                    "merge {i} ({a:?}, {b:?}) has a char outside GPT-2's byte map"
                ))),
            }
        })
        .collect()
}

/// Builds a [`WhisperFile`] from the bytes of `model.bin`, the text of `vocabulary.txt`
/// and of `config.json`. `path` names the model in errors.
pub fn from_parts(
    model_bin: &Storage,
    vocabulary: &str,
    config_json: Option<&str>,
    path: &Path,
) -> Result<WhisperFile> {
    let model = read_model_bin(model_bin, path)?;
    let unsupported = |msg: String| FormatError::Unsupported {
        path: path.to_path_buf(),
        msg,
    };
    if model.spec != "WhisperSpec" {
        return Err(unsupported(format!(
            "CTranslate2 spec {} is not a Whisper model",
            model.spec
        )));
    }
    let mut model = model;
    dequantize(&mut model, path)?;
    let (hparams, tensors) = Canon {
        model: &model,
        path,
    }
    .build()?;
    let vocab = decode_vocabulary(
        vocabulary,
        hparams.n_vocab,
        &path.with_file_name("vocabulary.txt"),
    )?;
    let mut config = match config_json {
        Some(text) => parse_config(text, path)?,
        None => ModelConfig::default(),
    };
    let text = vocabulary.strip_suffix('\n').unwrap_or(vocabulary);
    config.special_tokens = Some(
        text.split('\n')
            .skip(vocab.len())
            .map(str::to_string)
            .collect(),
    );
    Ok(WhisperFile {
        path: path.to_path_buf(),
        format: SourceFormat::Ct2,
        hparams,
        tensors,
        vocab,
        mel_filters: None,
        config,
    })
}

/// Replaces CTranslate2's quantized variables (`--quantization int8*` or `int16`) with
/// types sotto computes with, and drops their `_scale` variables.
///
/// CTranslate2 stores `q = round(w · scale)`: int8 with one f32 scale per output row (a
/// convolution's rows are its output channels), int16 with one scale for the tensor.
/// An int8 matrix whose rows are whole 32-value blocks becomes q8_0 (the same `q`, each
/// block's `d` = the row's `1 / scale` in f16: within 2⁻¹¹ of it, a twentieth of the int8
/// step at most), so it keeps its size and runs on the q8_0 kernels; anything else
/// becomes f32 `q / scale`, exactly.
fn dequantize(model: &mut Ct2Model, path: &Path) -> Result<()> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    if let Some(name) = model.variables.keys().find(|n| n.ends_with("_zero")) {
        return Err(FormatError::Unsupported {
            path: path.to_path_buf(),
            msg: format!(
                "{name}: zero points (an AWQ export) are not supported; use a float16, \
                 float32 or int8 export"
            ),
        });
    }
    let scaled: Vec<String> = model
        .variables
        .keys()
        .filter_map(|n| n.strip_suffix("_scale"))
        .map(str::to_string)
        .collect();
    for name in scaled {
        let scale = model
            .variables
            .remove(&format!("{name}_scale"))
            .expect("listed");
        let t = model
            .variables
            .get(&name)
            .ok_or_else(|| invalid(format!("{name}_scale scales a missing variable")))?;
        let scales = match scale.dtype {
            DType::F32 => scale.to_f32().map_err(invalid)?,
            other => return Err(invalid(format!("{name}_scale has type {other:?}, not f32"))),
        };
        let rows = t.shape.first().copied().unwrap_or(1);
        let per_row = match (t.dtype, scales.len()) {
            (DType::I8, n) if n == rows && scale.shape.len() == 1 => true,
            (DType::I16, 1) => false,
            (dtype, n) => {
                return Err(invalid(format!(
                    "{name}: a {dtype:?} tensor of shape {:?} with {n} scales",
                    t.shape
                )))
            }
        };
        if let Some(s) = scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(invalid(format!("{name}_scale holds {s}")));
        }
        let converted = if per_row && t.shape.len() == 2 && t.shape[1] % 32 == 0 {
            int8_to_q8_0(t, &scales)
        } else {
            int_to_f32(t, &scales)
        };
        // Converted: the file's copy need not stay resident.
        t.data.release();
        model.variables.insert(name, converted);
    }
    Ok(())
}

/// An int8 matrix with one scale per row as q8_0 blocks (see [`dequantize`]).
fn int8_to_q8_0(t: &TensorData, scales: &[f32]) -> TensorData {
    let cols = t.shape[1];
    let q = t.data.as_bytes();
    let mut out = Vec::with_capacity(q.len() / 32 * 34);
    for (row, &s) in q.chunks_exact(cols).zip(scales) {
        let d = half::f16::from_f32(1.0 / s).to_le_bytes();
        for block in row.chunks_exact(32) {
            out.extend_from_slice(&d);
            out.extend_from_slice(block);
        }
    }
    TensorData {
        dtype: DType::Q8_0,
        shape: t.shape.clone(),
        data: Storage::from_vec(out),
    }
}

/// An int8 or int16 tensor as f32 `q / scale`: one scale per row, or one for all.
fn int_to_f32(t: &TensorData, scales: &[f32]) -> TensorData {
    let b = t.data.as_bytes();
    let q: Vec<f32> = match t.dtype {
        DType::I8 => b.iter().map(|&v| f32::from(v as i8)).collect(),
        _ => b
            .chunks_exact(2)
            .map(|c| f32::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
    };
    let per_scale = q.len() / scales.len();
    let mut out = Vec::with_capacity(q.len() * 4);
    for (values, &s) in q.chunks_exact(per_scale.max(1)).zip(scales) {
        for v in values {
            out.extend_from_slice(&(v / s).to_le_bytes());
        }
    }
    TensorData {
        dtype: DType::F32,
        shape: t.shape.clone(),
        data: Storage::from_vec(out),
    }
}

/// Maps CTranslate2 variables to canonical whisper.cpp tensors.
struct Canon<'a> {
    model: &'a Ct2Model,
    path: &'a Path,
}

impl Canon<'_> {
    fn invalid(&self, msg: String) -> FormatError {
        FormatError::Invalid {
            path: self.path.to_path_buf(),
            msg,
        }
    }

    /// A float variable (f32, f16 or bf16), or an int8 one [`dequantize`] made q8_0.
    fn float(&self, name: &str) -> Result<TensorData> {
        let t = self
            .model
            .get(name)
            .ok_or_else(|| self.invalid(format!("missing variable {name}")))?;
        match t.dtype {
            DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0 => Ok(t.clone()),
            other => Err(FormatError::Unsupported {
                path: self.path.to_path_buf(),
                msg: format!(
                    "variable {name} has type {other:?} without a {name}_scale to read it by"
                ),
            }),
        }
    }

    fn int_scalar(&self, name: &str) -> Result<usize> {
        let t = self
            .model
            .get(name)
            .ok_or_else(|| self.invalid(format!("missing variable {name}")))?;
        let b = t.data.as_bytes();
        let v = match (t.dtype, b.len()) {
            (DType::I8, 1) => i64::from(b[0] as i8),
            (DType::I16, 2) => i64::from(i16::from_le_bytes([b[0], b[1]])),
            (DType::I32, 4) => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            _ => return Err(self.invalid(format!("variable {name} is not an integer scalar"))),
        };
        usize::try_from(v).map_err(|_| self.invalid(format!("variable {name} is negative ({v})")))
    }

    /// Size of `axis` of a float variable.
    fn dim(&self, name: &str, axis: usize) -> Result<usize> {
        let t = self.float(name)?;
        t.shape.get(axis).copied().ok_or_else(|| {
            self.invalid(format!(
                "variable {name} has shape {:?}, no axis {axis}",
                t.shape
            ))
        })
    }

    fn count_layers(&self, side: &str) -> usize {
        let has = |i: usize| {
            let name = format!("{side}/layer_{i}/self_attention/linear_0/weight");
            self.model.variables.contains_key(&name)
        };
        (0..).take_while(|&i| has(i)).count()
    }

    fn hparams(&self) -> Result<Hparams> {
        let emb = "decoder/embeddings/weight";
        let (enc_pos, dec_pos) = (
            "encoder/position_encodings/encodings",
            "decoder/position_encodings/encodings",
        );
        Ok(Hparams {
            n_vocab: self.dim(emb, 0)?,
            n_audio_ctx: self.dim(enc_pos, 0)?,
            n_audio_state: self.dim(enc_pos, 1)?,
            n_audio_head: self.int_scalar("encoder/num_heads")?,
            n_audio_layer: self.count_layers("encoder"),
            n_text_ctx: self.dim(dec_pos, 0)?,
            n_text_state: self.dim(emb, 1)?,
            n_text_head: self.int_scalar("decoder/num_heads")?,
            n_text_layer: self.count_layers("decoder"),
            n_mels: self.dim("encoder/conv1/weight", 1)?,
        })
    }

    /// Splits a fused `[k·d, …]` variable along its first axis into `k` row blocks.
    /// The parts are contiguous sub-ranges, so they stay views of the file.
    fn split<const K: usize>(&self, name: &str) -> Result<[TensorData; K]> {
        let t = self.float(name)?;
        let rows = t.shape.first().copied().unwrap_or(0);
        if rows == 0 || rows % K != 0 {
            return Err(self.invalid(format!(
                "variable {name} of shape {:?} is not {K} fused blocks",
                t.shape
            )));
        }
        let part_bytes = t.data.len() / K;
        let mut shape = t.shape.clone();
        shape[0] = rows / K;
        let out_of_bounds = || self.invalid(format!("variable {name} split out of bounds"));
        let mut parts = Vec::with_capacity(K);
        for i in 0..K {
            let data = t
                .data
                .slice(i * part_bytes..(i + 1) * part_bytes)
                .ok_or_else(out_of_bounds)?;
            parts.push(TensorData {
                dtype: t.dtype,
                shape: shape.clone(),
                data,
            });
        }
        parts.try_into().map_err(|_| out_of_bounds())
    }

    fn build(&self) -> Result<(Hparams, BTreeMap<String, TensorData>)> {
        let hp = self.hparams()?;
        names::check_hparams(self.path, &hp)?;
        let mut out = BTreeMap::new();
        let mut put = |name: String, t: TensorData| {
            out.insert(name, t);
        };
        for conv in ["conv1", "conv2"] {
            put(
                format!("encoder.{conv}.weight"),
                self.float(&format!("encoder/{conv}/weight"))?,
            );
            put(
                format!("encoder.{conv}.bias"),
                self.float(&format!("encoder/{conv}/bias"))?,
            );
        }
        put(
            "encoder.positional_embedding".into(),
            self.float("encoder/position_encodings/encodings")?,
        );
        put(
            "encoder.ln_post.weight".into(),
            self.float("encoder/layer_norm/gamma")?,
        );
        put(
            "encoder.ln_post.bias".into(),
            self.float("encoder/layer_norm/beta")?,
        );
        put(
            "decoder.token_embedding.weight".into(),
            self.float("decoder/embeddings/weight")?,
        );
        put(
            "decoder.positional_embedding".into(),
            self.float("decoder/position_encodings/encodings")?,
        );
        put(
            "decoder.ln.weight".into(),
            self.float("decoder/layer_norm/gamma")?,
        );
        put(
            "decoder.ln.bias".into(),
            self.float("decoder/layer_norm/beta")?,
        );
        for i in 0..hp.n_audio_layer {
            let p = format!("encoder/layer_{i}");
            let q = |s: &str| names::enc(i, s);
            self.self_attention(&p, &q, &mut put)?;
            self.ffn(&p, &q, &mut put)?;
        }
        for i in 0..hp.n_text_layer {
            let p = format!("decoder/layer_{i}");
            let q = |s: &str| names::dec(i, s);
            self.self_attention(&p, &q, &mut put)?;
            self.cross_attention(&p, &q, &mut put)?;
            self.ffn(&p, &q, &mut put)?;
        }
        self.check_tied_projection()?;
        names::check(self.path, &hp, &out)?;
        Ok((hp, out))
    }

    fn layer_norm(
        &self,
        ct2: &str,
        canon: String,
        put: &mut impl FnMut(String, TensorData),
    ) -> Result<()> {
        put(
            format!("{canon}.weight"),
            self.float(&format!("{ct2}/gamma"))?,
        );
        put(format!("{canon}.bias"), self.float(&format!("{ct2}/beta"))?);
        Ok(())
    }

    fn linear(
        &self,
        ct2: &str,
        canon: String,
        put: &mut impl FnMut(String, TensorData),
    ) -> Result<()> {
        put(
            format!("{canon}.weight"),
            self.float(&format!("{ct2}/weight"))?,
        );
        put(format!("{canon}.bias"), self.float(&format!("{ct2}/bias"))?);
        Ok(())
    }

    /// Fused `linear_0` = [q; k; v] `[3d, d]`, bias [q_b; 0; v_b]; the key bias is dropped.
    fn self_attention(
        &self,
        p: &str,
        q: &dyn Fn(&str) -> String,
        put: &mut impl FnMut(String, TensorData),
    ) -> Result<()> {
        let a = format!("{p}/self_attention");
        self.layer_norm(&format!("{a}/layer_norm"), q("attn_ln"), put)?;
        let [wq, wk, wv] = self.split::<3>(&format!("{a}/linear_0/weight"))?;
        let [bq, _, bv] = self.split::<3>(&format!("{a}/linear_0/bias"))?;
        put(q("attn.query.weight"), wq);
        put(q("attn.query.bias"), bq);
        put(q("attn.key.weight"), wk);
        put(q("attn.value.weight"), wv);
        put(q("attn.value.bias"), bv);
        self.linear(&format!("{a}/linear_1"), q("attn.out"), put)
    }

    /// `linear_0` = query, `linear_1` = fused [k; v] `[2d, d]` (bias [0; v_b]), `linear_2` = out.
    fn cross_attention(
        &self,
        p: &str,
        q: &dyn Fn(&str) -> String,
        put: &mut impl FnMut(String, TensorData),
    ) -> Result<()> {
        let a = format!("{p}/attention");
        self.layer_norm(&format!("{a}/layer_norm"), q("cross_attn_ln"), put)?;
        self.linear(&format!("{a}/linear_0"), q("cross_attn.query"), put)?;
        let [wk, wv] = self.split::<2>(&format!("{a}/linear_1/weight"))?;
        let [_, bv] = self.split::<2>(&format!("{a}/linear_1/bias"))?;
        put(q("cross_attn.key.weight"), wk);
        put(q("cross_attn.value.weight"), wv);
        put(q("cross_attn.value.bias"), bv);
        self.linear(&format!("{a}/linear_2"), q("cross_attn.out"), put)
    }

    fn ffn(
        &self,
        p: &str,
        q: &dyn Fn(&str) -> String,
        put: &mut impl FnMut(String, TensorData),
    ) -> Result<()> {
        self.layer_norm(&format!("{p}/ffn/layer_norm"), q("mlp_ln"), put)?;
        self.linear(&format!("{p}/ffn/linear_0"), q("mlp.0"), put)?;
        self.linear(&format!("{p}/ffn/linear_1"), q("mlp.2"), put)
    }

    /// whisper.cpp reuses the token embedding as the output head, so a separate,
    /// different projection cannot be represented.
    fn check_tied_projection(&self) -> Result<()> {
        let proj = "decoder/projection/weight";
        let emb = "decoder/embeddings/weight";
        if self.model.aliases.get(proj).is_some_and(|t| t == emb) {
            return Ok(());
        }
        match (
            self.model.variables.get(proj),
            self.model.variables.get(emb),
        ) {
            (None, _) => Ok(()),
            (Some(p), Some(e)) if p.dtype == e.dtype && p.shape == e.shape && p.data == e.data => {
                Ok(())
            }
            _ => Err(FormatError::Unsupported {
                path: self.path.to_path_buf(),
                msg: "decoder output projection is not tied to the token embedding".into(),
            }),
        }
    }
}

/// GPT-2's byte → printable-char map, inverted: index by char code, get the byte.
fn unicode_to_byte() -> [Option<u8>; 324] {
    let mut table = [None; 324];
    let mut extra = 0usize;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            usize::from(b)
        } else {
            extra += 1;
            255 + extra
        };
        table[c] = Some(b);
    }
    table
}

/// Raw bytes of the ordinary tokens (ids below `<|endoftext|>`) of a `vocabulary.txt`
/// (one GPT-2 byte-to-unicode string per line); `path` names the file in errors.
pub fn decode_vocabulary(text: &str, n_vocab: usize, path: &Path) -> Result<Vec<Vec<u8>>> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    let text = text.strip_suffix('\n').unwrap_or(text);
    let eot = text
        .split('\n')
        .position(|t| t == "<|endoftext|>")
        .ok_or_else(|| invalid("no <|endoftext|> token".into()))?;
    if eot >= n_vocab {
        return Err(invalid(format!(
            "<|endoftext|> is token {eot}, beyond the {n_vocab} embeddings"
        )));
    }
    let table = unicode_to_byte();
    text.split('\n')
        .take(eot)
        .enumerate()
        .map(|(id, token)| {
            token
                .chars()
                .map(|c| table.get(c as usize).copied().flatten())
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| {
                    invalid(format!(
                        "token {id} {token:?} has a char outside GPT-2's byte map"
                    ))
                })
        })
        .collect()
}

#[derive(Deserialize)]
struct RawConfig {
    alignment_heads: Option<Vec<(usize, usize)>>,
    lang_ids: Option<Vec<u32>>,
    suppress_ids: Option<Vec<u32>>,
    suppress_ids_begin: Option<Vec<u32>>,
}

/// Parses CTranslate2's `config.json`.
pub fn parse_config(text: &str, path: &Path) -> Result<ModelConfig> {
    let raw: RawConfig = serde_json::from_str(text).map_err(|e| FormatError::Invalid {
        path: path.with_file_name("config.json"),
        msg: format!("bad config.json: {e}"),
    })?;
    Ok(ModelConfig {
        alignment_heads: raw.alignment_heads,
        lang_ids: raw.lang_ids,
        suppress_ids: raw.suppress_ids,
        suppress_ids_begin: raw.suppress_ids_begin,
        bpe_merges: None,
        special_tokens: None,
        weights_note: None,
    })
}

/// Where a written CTranslate2 variable's bytes come from.
enum Part<'a> {
    Bytes(&'a [u8]),
    /// This many zero bytes (the key biases Whisper does not have).
    Zeros(usize),
    /// A scalar's own bytes.
    Owned(Vec<u8>),
}

/// One variable to write: shape, element type, and its bytes in pieces.
struct Var<'a> {
    shape: Vec<usize>,
    dtype: DType,
    parts: Vec<Part<'a>>,
}

impl<'a> Var<'a> {
    fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                Part::Zeros(n) => *n,
                Part::Owned(v) => v.len(),
            })
            .sum()
    }

    /// A variable of `dtype` holding `bytes`.
    fn owned(shape: Vec<usize>, dtype: DType, bytes: Vec<u8>) -> Var<'a> {
        Var {
            shape,
            dtype,
            parts: vec![Part::Owned(bytes)],
        }
    }

    /// The values as f32 (a float or q8_0 variable).
    fn to_f32(&self) -> std::result::Result<Vec<f32>, String> {
        let mut out = Vec::new();
        for p in &self.parts {
            match p {
                Part::Bytes(b) => out.extend(crate::values_f32(self.dtype, b)?),
                Part::Owned(b) => out.extend(crate::values_f32(self.dtype, b)?),
                Part::Zeros(n) => out.resize(out.len() + n / self.dtype.block().1, 0.0),
            }
        }
        Ok(out)
    }
}

/// What `--quantization` CTranslate2's converter was given: how [`write_quantized`]
/// stores the weights (the `weight` of every linear layer, both convolutions and the
/// token embedding) and the other float variables (biases, norms, position tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantization {
    /// Weights int8 with one f32 scale per output row; other floats as they are.
    Int8,
    /// Weights int8; other floats f16.
    Int8Float16,
    /// Weights int8; other floats f32.
    Int8Float32,
    /// Weights int16 with one f32 scale per tensor; other floats f32.
    Int16,
    /// Everything f16.
    Float16,
    /// Everything f32.
    Float32,
}

impl Quantization {
    /// CTranslate2's names, as `--quantization` takes them.
    pub const NAMES: [&'static str; 6] = [
        "int8",
        "int8_float16",
        "int8_float32",
        "int16",
        "float16",
        "float32",
    ];

    /// The quantization CTranslate2 calls `name`.
    pub fn from_name(name: &str) -> Option<Quantization> {
        use Quantization::*;
        let all = [Int8, Int8Float16, Int8Float32, Int16, Float16, Float32];
        Self::NAMES.iter().position(|n| *n == name).map(|i| all[i])
    }

    /// The type the variables it does not quantize get (`None`: their own).
    fn floats(self) -> Option<DType> {
        match self {
            Quantization::Int8 => None,
            Quantization::Int8Float16 | Quantization::Float16 => Some(DType::F16),
            _ => Some(DType::F32),
        }
    }

    /// The integer type of the weights, if it quantizes them.
    fn weights(self) -> Option<DType> {
        match self {
            Quantization::Int8 | Quantization::Int8Float16 | Quantization::Int8Float32 => {
                Some(DType::I8)
            }
            Quantization::Int16 => Some(DType::I16),
            _ => None,
        }
    }
}

/// CTranslate2's `optimize(quantization)`, step for step in f32 as numpy does it, so
/// that the bytes are its converter's: int8 `q = rint(w · 127 / amax(|row|))` (a zero row
/// counts as amax 127), int16 `q = rint(w · 1024 / amax(|w|))`, each with its `_scale`;
/// f16 by round-to-nearest-even.
fn quantize(
    vars: BTreeMap<String, Var<'_>>,
    q: Quantization,
) -> std::result::Result<BTreeMap<String, Var<'_>>, String> {
    let mut out = BTreeMap::new();
    for (name, v) in vars {
        if v.dtype.is_integer() {
            out.insert(name, v);
            continue;
        }
        let values = v.to_f32().map_err(|e| format!("{name}: {e}"))?;
        // The variables whose CTranslate2 layer spec has a `weight_scale`.
        if let (Some(int), true) = (q.weights(), name.ends_with("/weight")) {
            let rows = v.shape.first().copied().unwrap_or(1).max(1);
            let (bytes, scales, scale_shape) = if int == DType::I8 {
                let mut bytes = Vec::with_capacity(values.len());
                let mut scales = Vec::with_capacity(rows);
                for row in values.chunks(values.len() / rows) {
                    let mut amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
                    if amax == 0.0 {
                        amax = 127.0;
                    }
                    let scale = 127.0f32 / amax.max(127.0f32 / f32::MAX);
                    bytes.extend(
                        row.iter()
                            .map(|x| (x * scale).round_ties_even() as i8 as u8),
                    );
                    scales.push(scale);
                }
                (bytes, scales, vec![rows])
            } else {
                let amax = values.iter().fold(0f32, |m, x| m.max(x.abs()));
                let scale = 1024.0f32 / amax;
                let bytes = values
                    .iter()
                    .flat_map(|x| {
                        let v = (x * scale).round_ties_even();
                        (v.clamp(i16::MIN.into(), i16::MAX.into()) as i16).to_le_bytes()
                    })
                    .collect();
                (bytes, vec![scale], Vec::new())
            };
            let scale_bytes = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
            out.insert(
                format!("{name}_scale"),
                Var::owned(scale_shape, DType::F32, scale_bytes),
            );
            out.insert(name, Var::owned(v.shape, int, bytes));
            continue;
        }
        match q.floats() {
            Some(DType::F16) if v.dtype != DType::F16 => {
                let bytes = values
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect();
                out.insert(name, Var::owned(v.shape, DType::F16, bytes));
            }
            Some(DType::F32) if v.dtype != DType::F32 => {
                let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
                out.insert(name, Var::owned(v.shape, DType::F32, bytes));
            }
            _ => {
                out.insert(name, v);
            }
        }
    }
    Ok(out)
}

fn dtype_id(dtype: DType) -> Option<u8> {
    Some(match dtype {
        DType::F32 => 0,
        DType::I8 => 1,
        DType::I16 => 2,
        DType::I32 => 3,
        DType::F16 => 4,
        DType::BF16 => 5,
        _ => return None,
    })
}

/// The variables of a CTranslate2 `WhisperSpec` (revision 3), from canonical tensors.
struct Spec<'a> {
    file: &'a WhisperFile,
    out: &'a Path,
    /// Whether a quantization follows, which reads q8_0 tensors as their values.
    quantized: bool,
    vars: BTreeMap<String, Var<'a>>,
}

impl<'a> Spec<'a> {
    fn tensor(&self, name: &str) -> Result<&'a TensorData> {
        let t = self
            .file
            .tensors
            .get(name)
            .ok_or_else(|| FormatError::Invalid {
                path: self.out.to_path_buf(),
                msg: format!("missing tensor {name}"),
            })?;
        let quantized_ok = self.quantized && t.dtype == DType::Q8_0;
        if (dtype_id(t.dtype).is_none() && !quantized_ok) || t.dtype.is_integer() {
            let hint = if t.dtype == DType::Q8_0 {
                " (with a quantization, q8_0 is read as its values)"
            } else {
                ""
            };
            return Err(FormatError::Unsupported {
                path: self.out.to_path_buf(),
                msg: format!(
                    "tensor {name} is {:?}: CTranslate2's Whisper holds f32, f16 or bf16{hint}",
                    t.dtype
                ),
            });
        }
        Ok(t)
    }

    fn scalar(&mut self, name: &str, dtype: DType, value: i64) {
        let bytes = match dtype {
            DType::I8 => (value as i8).to_le_bytes().to_vec(),
            _ => (value as i16).to_le_bytes().to_vec(),
        };
        self.vars
            .insert(name.to_string(), Var::owned(Vec::new(), dtype, bytes));
    }

    /// `name` ← the canonical tensor `canonical`.
    fn put(&mut self, name: String, canonical: &str) -> Result<()> {
        let t = self.tensor(canonical)?;
        self.vars.insert(
            name,
            Var {
                shape: t.shape.clone(),
                dtype: t.dtype,
                parts: vec![Part::Bytes(t.data.as_bytes())],
            },
        );
        Ok(())
    }

    /// `name` ← the canonical tensors stacked along their first axis; `None` stands for
    /// a zero block shaped as `like` (the absent key bias).
    fn fuse(&mut self, name: String, parts: &[Option<&str>], like: &str) -> Result<()> {
        let like = self.tensor(like)?;
        let mut shape = like.shape.clone();
        shape[0] = 0;
        let mut bytes = Vec::with_capacity(parts.len());
        for p in parts {
            match p {
                Some(c) => {
                    let t = self.tensor(c)?;
                    if t.dtype != like.dtype || t.shape[1..] != like.shape[1..] {
                        return Err(FormatError::Invalid {
                            path: self.out.to_path_buf(),
                            msg: format!(
                                "tensor {c} cannot be fused with {like:?}",
                                like = like.shape
                            ),
                        });
                    }
                    shape[0] += t.shape[0];
                    bytes.push(Part::Bytes(t.data.as_bytes()));
                }
                None => {
                    shape[0] += like.shape[0];
                    bytes.push(Part::Zeros(like.data.len()));
                }
            }
        }
        self.vars.insert(
            name,
            Var {
                shape,
                dtype: like.dtype,
                parts: bytes,
            },
        );
        Ok(())
    }

    /// `name/{gamma,beta}` ← `canonical.{weight,bias}`.
    fn norm(&mut self, name: &str, canonical: &str) -> Result<()> {
        self.put(format!("{name}/gamma"), &format!("{canonical}.weight"))?;
        self.put(format!("{name}/beta"), &format!("{canonical}.bias"))
    }

    /// `name/{weight,bias}` ← `canonical.{weight,bias}`.
    fn linear(&mut self, name: &str, canonical: &str) -> Result<()> {
        self.put(format!("{name}/weight"), &format!("{canonical}.weight"))?;
        self.put(format!("{name}/bias"), &format!("{canonical}.bias"))
    }

    /// A layer's self-attention, q/k/v fused as `linear_0` (a zero key bias).
    fn self_attention(&mut self, ct2: &str, c: &str) -> Result<()> {
        self.norm(&format!("{ct2}/layer_norm"), &format!("{c}.attn_ln"))?;
        let w = |p: &str| format!("{c}.attn.{p}.weight");
        self.fuse(
            format!("{ct2}/linear_0/weight"),
            &[Some(&w("query")), Some(&w("key")), Some(&w("value"))],
            &w("query"),
        )?;
        let b = |p: &str| format!("{c}.attn.{p}.bias");
        self.fuse(
            format!("{ct2}/linear_0/bias"),
            &[Some(&b("query")), None, Some(&b("value"))],
            &b("query"),
        )?;
        self.linear(&format!("{ct2}/linear_1"), &format!("{c}.attn.out"))
    }

    fn ffn(&mut self, ct2: &str, c: &str) -> Result<()> {
        self.norm(&format!("{ct2}/layer_norm"), &format!("{c}.mlp_ln"))?;
        self.linear(&format!("{ct2}/linear_0"), &format!("{c}.mlp.0"))?;
        self.linear(&format!("{ct2}/linear_1"), &format!("{c}.mlp.2"))
    }

    fn build(mut self) -> Result<BTreeMap<String, Var<'a>>> {
        let hp = self.file.hparams;
        // WhisperSpec's scalars, as CTranslate2's converter writes them.
        self.scalar("decoder/activation", DType::I8, 3); // GELU
        self.scalar("decoder/alibi", DType::I8, 0);
        self.scalar("decoder/alignment_heads", DType::I16, 1);
        self.scalar("decoder/alignment_layer", DType::I16, -1);
        self.scalar("decoder/num_heads", DType::I16, hp.n_text_head as i64);
        self.scalar("decoder/pre_norm", DType::I8, 1);
        self.scalar("decoder/scale_embeddings", DType::I8, 0);
        self.scalar("decoder/start_from_zero_embedding", DType::I8, 0);
        self.scalar("encoder/num_heads", DType::I16, hp.n_audio_head as i64);
        for conv in ["conv1", "conv2"] {
            self.linear(&format!("encoder/{conv}"), &format!("encoder.{conv}"))?;
        }
        self.put(
            "encoder/position_encodings/encodings".into(),
            "encoder.positional_embedding",
        )?;
        for i in 0..hp.n_audio_layer {
            let (ct2, c) = (format!("encoder/layer_{i}"), format!("encoder.blocks.{i}"));
            self.self_attention(&format!("{ct2}/self_attention"), &c)?;
            self.ffn(&format!("{ct2}/ffn"), &c)?;
        }
        self.norm("encoder/layer_norm", "encoder.ln_post")?;
        self.put(
            "decoder/embeddings/weight".into(),
            "decoder.token_embedding.weight",
        )?;
        self.put(
            "decoder/position_encodings/encodings".into(),
            "decoder.positional_embedding",
        )?;
        for i in 0..hp.n_text_layer {
            let (ct2, c) = (format!("decoder/layer_{i}"), format!("decoder.blocks.{i}"));
            self.self_attention(&format!("{ct2}/self_attention"), &c)?;
            let a = format!("{ct2}/attention");
            self.norm(&format!("{a}/layer_norm"), &format!("{c}.cross_attn_ln"))?;
            self.linear(&format!("{a}/linear_0"), &format!("{c}.cross_attn.query"))?;
            let w = |p: &str| format!("{c}.cross_attn.{p}.weight");
            self.fuse(
                format!("{a}/linear_1/weight"),
                &[Some(&w("key")), Some(&w("value"))],
                &w("key"),
            )?;
            let vb = format!("{c}.cross_attn.value.bias");
            self.fuse(format!("{a}/linear_1/bias"), &[None, Some(&vb)], &vb)?;
            self.linear(&format!("{a}/linear_2"), &format!("{c}.cross_attn.out"))?;
            self.ffn(&format!("{ct2}/ffn"), &c)?;
        }
        self.norm("decoder/layer_norm", "decoder.ln")?;
        Ok(self.vars)
    }
}

fn put_str(out: &mut impl std::io::Write, s: &str) -> std::io::Result<()> {
    let len = u16::try_from(s.len() + 1).map_err(|_| std::io::Error::other("name too long"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(s.as_bytes())?;
    out.write_all(&[0])
}

/// Writes `file` as a CTranslate2 Whisper folder in `dir` (created if missing), as
/// CTranslate2's converter writes one: `model.bin` (binary version 6, `WhisperSpec`
/// revision 3; q/k/v fused, each tensor in its own float type, the output projection an
/// alias of the token embedding), `vocabulary.txt` (the ordinary tokens, then the special
/// tokens as the source spelled them, else `specials`: see
/// `sotto_decode::special_token_texts`), `config.json` (the alignment heads and token
/// lists the file carries) and, when the source has one, `tokenizer.json`; for a model
/// with other than 80 mel bins also `preprocessor_config.json`, which faster-whisper reads
/// its feature size from. Block-quantized tensors have no CTranslate2 float type: such
/// files are refused.
pub fn write(file: &WhisperFile, specials: &[String], dir: &Path) -> Result<()> {
    write_with(file, specials, dir, None)
}

/// As [`write`], the weights stored as CTranslate2's converter stores them when given
/// `--quantization q` (the same bytes: `scripts/goldens/ct2_quantized.py`); a q8_0
/// source (a ggml q8_0 file, or an int8 folder as read) is quantized from its values.
pub fn write_quantized(
    file: &WhisperFile,
    specials: &[String],
    dir: &Path,
    q: Quantization,
) -> Result<()> {
    write_with(file, specials, dir, Some(q))
}

fn write_with(
    file: &WhisperFile,
    specials: &[String],
    dir: &Path,
    q: Option<Quantization>,
) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FormatError::Io { path, source }
    };
    let bin = dir.join("model.bin");
    let vars = Spec {
        file,
        out: &bin,
        quantized: q.is_some(),
        vars: BTreeMap::new(),
    }
    .build()?;
    let vars = match q {
        Some(q) => quantize(vars, q).map_err(|msg| FormatError::Invalid {
            path: bin.clone(),
            msg,
        })?,
        None => vars,
    };
    let mut ids = BTreeMap::new();
    for (name, v) in &vars {
        let id = dtype_id(v.dtype).ok_or_else(|| FormatError::Unsupported {
            path: bin.clone(),
            msg: format!("{name} is {:?}, which CTranslate2 does not hold", v.dtype),
        })?;
        ids.insert(name.as_str(), id);
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    {
        use std::io::Write;
        let f = std::fs::File::create(&bin).map_err(io(&bin))?;
        let mut w = std::io::BufWriter::new(f);
        let mut write = || -> std::io::Result<()> {
            w.write_all(&6u32.to_le_bytes())?;
            put_str(&mut w, "WhisperSpec")?;
            w.write_all(&3u32.to_le_bytes())?;
            w.write_all(&(vars.len() as u32).to_le_bytes())?;
            for (name, v) in &vars {
                put_str(&mut w, name)?;
                w.write_all(&[v.shape.len() as u8])?;
                for &d in &v.shape {
                    let d = u32::try_from(d)
                        .map_err(|_| std::io::Error::other("dimension too large"))?;
                    w.write_all(&d.to_le_bytes())?;
                }
                w.write_all(&[ids[name.as_str()]])?;
                let n = u32::try_from(v.len())
                    .map_err(|_| std::io::Error::other(format!("{name} is over 4 GiB")))?;
                w.write_all(&n.to_le_bytes())?;
                for p in &v.parts {
                    match p {
                        Part::Bytes(b) => w.write_all(b)?,
                        Part::Owned(b) => w.write_all(b)?,
                        Part::Zeros(n) => w.write_all(&vec![0u8; *n])?,
                    }
                }
            }
            w.write_all(&1u32.to_le_bytes())?;
            put_str(&mut w, "decoder/projection/weight")?;
            put_str(&mut w, "decoder/embeddings/weight")?;
            w.flush()
        };
        write().map_err(io(&bin))?;
    }

    let mut vocabulary = String::new();
    for token in &file.vocab {
        vocabulary.extend(token.iter().map(|&b| crate::hf::byte_to_unicode(b)));
        vocabulary.push('\n');
    }
    let specials = file.config.special_tokens.as_deref().unwrap_or(specials);
    for s in specials {
        vocabulary.push_str(s);
        vocabulary.push('\n');
    }
    let path = dir.join("vocabulary.txt");
    std::fs::write(&path, vocabulary).map_err(io(&path))?;

    let c = &file.config;
    let mut config = serde_json::Map::new();
    if let Some(h) = &c.alignment_heads {
        config.insert("alignment_heads".into(), serde_json::json!(h));
    }
    for (key, v) in [
        ("lang_ids", &c.lang_ids),
        ("suppress_ids", &c.suppress_ids),
        ("suppress_ids_begin", &c.suppress_ids_begin),
    ] {
        if let Some(v) = v {
            config.insert(key.into(), serde_json::json!(v));
        }
    }
    let path = dir.join("config.json");
    let text = serde_json::to_string_pretty(&config).expect("JSON values serialize");
    std::fs::write(&path, text).map_err(io(&path))?;
    if let Some(m) = &c.bpe_merges {
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, m.text()).map_err(io(&path))?;
    }
    if file.hparams.n_mels != 80 {
        let path = dir.join("preprocessor_config.json");
        let pre = serde_json::json!({
            "chunk_length": 30,
            "feature_extractor_type": "WhisperFeatureExtractor",
            "feature_size": file.hparams.n_mels,
            "hop_length": 160,
            "n_fft": 400,
            "n_samples": 480000,
            "nb_max_frames": 3000,
            "sampling_rate": 16000,
        });
        std::fs::write(&path, pre.to_string()).map_err(io(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection() {
        let table = unicode_to_byte();
        let mut seen: Vec<u8> = table.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..=255).collect::<Vec<u8>>());
        assert_eq!(table['Ġ' as usize], Some(b' '));
        assert_eq!(table['Ċ' as usize], Some(b'\n'));
        assert_eq!(table['a' as usize], Some(b'a'));
    }

    /// Both ways `tokenizers` writes a merge, borrowed or (with JSON escapes) owned, in
    /// file order; and what is not a merge is an error naming it.
    #[test]
    fn merges_parse_in_both_forms() {
        let p = Path::new("tokenizer.json");
        let json = r#"{"model": {"vocab": {"a": 0}, "merges": ["\u0120 t", ["h", "e"], "Ġt he"]}}"#;
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b" ".to_vec(), b"t".to_vec()),
            (b"h".to_vec(), b"e".to_vec()),
            (b" t".to_vec(), b"he".to_vec()),
        ];
        assert_eq!(parse_merges(json, p).unwrap(), want);
        let e = parse_merges(r#"{"model": {"merges": ["ab"]}}"#, p).unwrap_err();
        assert!(
            e.to_string().contains(r#"merge 0 "ab" has no space"#),
            "{e}"
        );
        let e = parse_merges(r#"{"model": {"merges": [["a", "\u20ac"]]}}"#, p).unwrap_err();
        assert!(e.to_string().contains("outside GPT-2's byte map"), "{e}");
        assert!(parse_merges("{", p).is_err());
    }

    #[test]
    fn vocabulary_needs_endoftext_within_the_embedding() {
        let p = Path::new("vocabulary.txt");
        assert_eq!(
            decode_vocabulary("Ġa\nb\n<|endoftext|>\n", 4, p).unwrap(),
            [b" a".to_vec(), b"b".to_vec()]
        );
        assert!(decode_vocabulary("a\nb\n", 4, p).is_err());
        assert!(decode_vocabulary("a\n<|endoftext|>\n", 1, p).is_err());
        assert!(decode_vocabulary("\u{2603}\n<|endoftext|>\n", 4, p).is_err());
    }
}
