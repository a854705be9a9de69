//! CTranslate2 Whisper folders (faster-whisper): `model.bin`, `config.json`,
//! `vocabulary.txt`.
//!
//! `model.bin` (little endian, binary versions 2..=6):
//! `u32 version; str spec; u32 revision; u32 n_vars; n_vars × {str name; u8 rank;
//! u32 dims[rank]; u8 dtype (item size before v4); u32 nbytes; data}; u32 n_aliases (v3+);
//! n_aliases × {str alias; str target}` where `str` is `u16 len incl. NUL, bytes`.

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
    let vocabulary = read("vocabulary.txt")?;
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

#[derive(Deserialize)]
struct RawTokenizer {
    model: RawBpe,
}

#[derive(Deserialize)]
struct RawBpe {
    merges: Vec<RawMerge>,
}

/// `tokenizers` writes a merge as `"a b"` (older files) or as `["a", "b"]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawMerge {
    Joined(String),
    Pair(String, String),
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
                RawMerge::Pair(a, b) => (a.as_str(), b.as_str()),
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
    if let Some(name) = model.variables.keys().find(|n| n.ends_with("_scale")) {
        return Err(unsupported(format!(
            "quantized (int8) CTranslate2 export (found {name}); use a float16 or float32 export"
        )));
    }
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
    let config = match config_json {
        Some(text) => parse_config(text, path)?,
        None => ModelConfig::default(),
    };
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

    /// A float variable (f32, f16 or bf16).
    fn float(&self, name: &str) -> Result<TensorData> {
        let t = self
            .model
            .get(name)
            .ok_or_else(|| self.invalid(format!("missing variable {name}")))?;
        match t.dtype {
            DType::F32 | DType::F16 | DType::BF16 => Ok(t.clone()),
            other => Err(FormatError::Unsupported {
                path: self.path.to_path_buf(),
                msg: format!(
                    "variable {name} has type {other:?} (quantized export?); use a float16 export"
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
    })
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
