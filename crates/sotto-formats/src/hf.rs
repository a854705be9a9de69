//! Hugging Face `transformers` Whisper folders, as `save_pretrained` writes them and
//! fine-tunes are shared: `config.json`, `model.safetensors` (or the shards
//! `model.safetensors.index.json` lists; older checkpoints: `pytorch_model.bin` or its
//! `pytorch_model.bin.index.json` shards, read by [`crate::torch`]), `vocab.json` (or
//! `tokenizer.json`), and optionally `generation_config.json` (alignment heads, language
//! and suppressed tokens).
//!
//! Tensors keep their file's type (f32, f16 or bf16) and are views of the mapped shards;
//! names are mapped to whisper.cpp's by [`canonical_name`]. The output projection
//! `proj_out.weight` is tied to the token embedding in Whisper; a file whose copy differs
//! is refused rather than silently ignored.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::{names, BpeMerges, DType, FormatError, Hparams, ModelConfig, Result};
use crate::{SourceFormat, Storage, TensorData, WhisperFile};

/// Per-layer modules: Hugging Face's name (after `layers.N.`) and whisper.cpp's (after
/// `blocks.N.`). The decoder's `encoder_attn` is whisper.cpp's cross-attention.
const LAYER_MODULES: [(&str, &str); 13] = [
    ("self_attn.q_proj", "attn.query"),
    ("self_attn.k_proj", "attn.key"),
    ("self_attn.v_proj", "attn.value"),
    ("self_attn.out_proj", "attn.out"),
    ("self_attn_layer_norm", "attn_ln"),
    ("encoder_attn.q_proj", "cross_attn.query"),
    ("encoder_attn.k_proj", "cross_attn.key"),
    ("encoder_attn.v_proj", "cross_attn.value"),
    ("encoder_attn.out_proj", "cross_attn.out"),
    ("encoder_attn_layer_norm", "cross_attn_ln"),
    ("fc1", "mlp.0"),
    ("fc2", "mlp.2"),
    ("final_layer_norm", "mlp_ln"),
];

/// The tensors outside the layers: Hugging Face's name (after `model.`) and whisper.cpp's.
const GLOBALS: [(&str, &str); 11] = [
    ("encoder.conv1.weight", "encoder.conv1.weight"),
    ("encoder.conv1.bias", "encoder.conv1.bias"),
    ("encoder.conv2.weight", "encoder.conv2.weight"),
    ("encoder.conv2.bias", "encoder.conv2.bias"),
    (
        "encoder.embed_positions.weight",
        "encoder.positional_embedding",
    ),
    ("encoder.layer_norm.weight", "encoder.ln_post.weight"),
    ("encoder.layer_norm.bias", "encoder.ln_post.bias"),
    (
        "decoder.embed_tokens.weight",
        "decoder.token_embedding.weight",
    ),
    (
        "decoder.embed_positions.weight",
        "decoder.positional_embedding",
    ),
    ("decoder.layer_norm.weight", "decoder.ln.weight"),
    ("decoder.layer_norm.bias", "decoder.ln.bias"),
];

/// The output projection, tied to `decoder.embed_tokens.weight`.
const PROJ_OUT: &str = "proj_out.weight";

/// whisper.cpp's name for a Hugging Face tensor name (with or without the `model.` prefix
/// of `WhisperForConditionalGeneration`), or None for a name outside the Whisper layout.
pub fn canonical_name(hf: &str) -> Option<String> {
    let name = hf.strip_prefix("model.").unwrap_or(hf);
    if let Some(&(_, c)) = GLOBALS.iter().find(|(h, _)| *h == name) {
        return Some(c.to_string());
    }
    let (side, rest) = name.split_once(".layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, param) = rest.rsplit_once('.')?;
    let layer: usize = layer.parse().ok().filter(|_| !layer.starts_with('+'))?;
    let &(_, c) = LAYER_MODULES.iter().find(|(h, _)| *h == module)?;
    let cross = module.starts_with("encoder_attn");
    let valid = match side {
        "encoder" => !cross,
        "decoder" => true,
        _ => false,
    };
    (valid && matches!(param, "weight" | "bias"))
        .then(|| format!("{side}.blocks.{layer}.{c}.{param}"))
}

/// The Hugging Face name (with the `model.` prefix) of a whisper.cpp tensor name.
pub fn hf_name(canonical: &str) -> Option<String> {
    if let Some(&(h, _)) = GLOBALS.iter().find(|(_, c)| *c == canonical) {
        return Some(format!("model.{h}"));
    }
    let (side, rest) = canonical.split_once(".blocks.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, param) = rest.rsplit_once('.')?;
    let &(h, _) = LAYER_MODULES.iter().find(|(_, c)| *c == module)?;
    Some(format!("model.{side}.layers.{layer}.{h}.{param}"))
}

/// The weight files a checkpoint may have, safetensors first: (single file, shard index).
const WEIGHTS: [(&str, &str); 2] = [
    ("model.safetensors", "model.safetensors.index.json"),
    ("pytorch_model.bin", "pytorch_model.bin.index.json"),
];

/// Whether `dir` holds a Hugging Face checkpoint: in safetensors, or PyTorch's format
/// beside a `config.json`.
pub fn is_hf_dir(dir: &Path) -> bool {
    let [safetensors, torch] = WEIGHTS;
    let has = |(one, index): (&str, &str)| dir.join(one).is_file() || dir.join(index).is_file();
    has(safetensors) || (has(torch) && dir.join("config.json").is_file())
}

/// `config.json` of a `WhisperForConditionalGeneration`: the fields that size the model.
#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: usize,
    num_mel_bins: usize,
    d_model: usize,
    encoder_layers: usize,
    encoder_attention_heads: usize,
    decoder_layers: usize,
    decoder_attention_heads: usize,
    max_source_positions: usize,
    max_target_positions: usize,
}

#[derive(Deserialize, Default)]
struct RawGenerationConfig {
    alignment_heads: Option<Vec<(usize, usize)>>,
    lang_to_id: Option<BTreeMap<String, u32>>,
    suppress_tokens: Option<Vec<u32>>,
    begin_suppress_tokens: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct RawIndex {
    weight_map: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawTokenizerVocab {
    model: RawTokenizerModel,
}

#[derive(Deserialize)]
struct RawTokenizerModel {
    vocab: HashMap<String, u32>,
}

fn invalid(path: &Path, msg: String) -> FormatError {
    FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    }
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|e| invalid(path, format!("bad JSON: {e}")))
}

/// Opens a Hugging Face Whisper folder, or one of its `.safetensors` files (the rest is
/// read from the same folder).
pub fn load(path: &Path) -> Result<WhisperFile> {
    let dir = if path.is_dir() {
        path
    } else {
        path.parent().unwrap_or(Path::new("."))
    };
    let config_path = dir.join("config.json");
    let raw: RawConfig = json(&config_path)?;
    if let Some(t) = raw.model_type.as_deref().filter(|t| *t != "whisper") {
        return Err(FormatError::Unsupported {
            path: config_path,
            msg: format!("model_type {t:?} is not a Whisper model"),
        });
    }
    let hparams = Hparams {
        n_vocab: raw.vocab_size,
        n_audio_ctx: raw.max_source_positions,
        n_audio_state: raw.d_model,
        n_audio_head: raw.encoder_attention_heads,
        n_audio_layer: raw.encoder_layers,
        n_text_ctx: raw.max_target_positions,
        n_text_state: raw.d_model,
        n_text_head: raw.decoder_attention_heads,
        n_text_layer: raw.decoder_layers,
        n_mels: raw.num_mel_bins,
    };
    names::check_hparams(&config_path, &hparams)?;

    let mut tensors = BTreeMap::new();
    let mut proj_out = None;
    for shard in shards(dir)? {
        read_shard(&shard, &mut tensors, &mut proj_out)?;
    }
    let weights_path = dir.join(weights_name(dir));
    if let Some((p, shard)) = proj_out {
        let tied = tensors
            .get("decoder.token_embedding.weight")
            .is_some_and(|e: &TensorData| {
                e.dtype == p.dtype && e.shape == p.shape && e.data == p.data
            });
        if !tied {
            return Err(FormatError::Unsupported {
                path: shard,
                msg: "proj_out.weight is not tied to the token embedding".into(),
            });
        }
    }
    names::check(&weights_path, &hparams, &tensors)?;

    let vocab = vocabulary(dir, hparams.n_vocab)?;
    let mut config = ModelConfig::default();
    let gen_path = dir.join("generation_config.json");
    if gen_path.is_file() {
        let g: RawGenerationConfig = json(&gen_path)?;
        config.alignment_heads = g.alignment_heads;
        config.lang_ids = g.lang_to_id.map(|m| {
            let mut ids: Vec<u32> = m.into_values().collect();
            ids.sort_unstable();
            ids
        });
        config.suppress_ids = g.suppress_tokens;
        config.suppress_ids_begin = g.begin_suppress_tokens;
    }
    let tokenizer = dir.join("tokenizer.json");
    if tokenizer.is_file() {
        config.bpe_merges = Some(BpeMerges::new(read_text(&tokenizer)?, tokenizer));
    }
    Ok(WhisperFile {
        path: path.to_path_buf(),
        format: SourceFormat::Hf,
        hparams,
        tensors,
        vocab,
        mel_filters: None,
        config,
    })
}

/// The single weights file's name of the kind the folder has (safetensors first).
fn weights_name(dir: &Path) -> &'static str {
    let [(safetensors, st_index), (torch, torch_index)] = WEIGHTS;
    let torch_only = !dir.join(safetensors).is_file()
        && !dir.join(st_index).is_file()
        && (dir.join(torch).is_file() || dir.join(torch_index).is_file());
    if torch_only {
        torch
    } else {
        safetensors
    }
}

/// The weight files of a checkpoint: the index's shards, else the single file; in
/// safetensors where the folder has them, else PyTorch's `.bin`.
fn shards(dir: &Path) -> Result<Vec<PathBuf>> {
    let one = weights_name(dir);
    let index = dir.join(format!("{one}.index.json"));
    if !index.is_file() {
        return Ok(vec![dir.join(one)]);
    }
    let ext = if one.ends_with(".bin") {
        ".bin"
    } else {
        ".safetensors"
    };
    let raw: RawIndex = json(&index)?;
    let mut files: Vec<&String> = raw.weight_map.values().collect();
    files.sort_unstable();
    files.dedup();
    files
        .into_iter()
        .map(|f| {
            let p = Path::new(f);
            // A shard is a file beside the index, never a path elsewhere.
            if p.components().count() != 1 || !f.ends_with(ext) {
                Err(invalid(
                    &index,
                    format!("shard {f:?} is not a {ext} file name"),
                ))
            } else {
                Ok(dir.join(p))
            }
        })
        .collect()
}

/// The tensors of a safetensors file held in `data`, under the file's own names, in file
/// order; each a view of `data`. `path` names the file in errors. Only f32, f16 and bf16
/// tensors are accepted.
pub fn read_safetensors(data: &Storage, path: &Path) -> Result<Vec<(String, TensorData)>> {
    let (header, meta) = safetensors::SafeTensors::read_metadata(data.as_bytes())
        .map_err(|e| invalid(path, format!("not a valid safetensors file: {e}")))?;
    let start = 8 + header;
    let mut infos: Vec<(String, &safetensors::tensor::TensorInfo)> =
        meta.tensors().into_iter().collect();
    infos.sort_by_key(|(_, info)| info.data_offsets.0);
    infos
        .into_iter()
        .map(|(name, info)| {
            let dtype = match info.dtype {
                safetensors::Dtype::F32 => DType::F32,
                safetensors::Dtype::F16 => DType::F16,
                safetensors::Dtype::BF16 => DType::BF16,
                other => {
                    return Err(FormatError::Unsupported {
                        path: path.to_path_buf(),
                        msg: format!(
                            "tensor {name} has type {other:?} (f32, f16 or bf16 expected)"
                        ),
                    })
                }
            };
            let (s, e) = info.data_offsets;
            let view = data
                .slice(start + s..start + e)
                .ok_or_else(|| invalid(path, format!("tensor {name} lies outside the file")))?;
            let t = TensorData {
                dtype,
                shape: info.shape.clone(),
                data: view,
            };
            Ok((name, t))
        })
        .collect()
}

/// Reads one safetensors file's tensors, as views of its mapping, into `tensors` under
/// whisper.cpp's names; `proj_out` gets the output projection if the file has one.
fn read_shard(
    path: &Path,
    tensors: &mut BTreeMap<String, TensorData>,
    proj_out: &mut Option<(TensorData, PathBuf)>,
) -> Result<()> {
    let data = Storage::map_file(path)?;
    let named = if path.extension().is_some_and(|e| e == "bin") {
        // `save_pretrained`'s state dict, as `torch.save` pickles it.
        crate::torch::Checkpoint::read(&data, path)?.tensors(&[], |_| true)?
    } else {
        read_safetensors(&data, path)?
    };
    for (name, t) in named {
        if name == PROJ_OUT || name == format!("model.{PROJ_OUT}") {
            *proj_out = Some((t, path.to_path_buf()));
            continue;
        }
        let canonical = canonical_name(&name).ok_or_else(|| FormatError::Unsupported {
            path: path.to_path_buf(),
            msg: format!("tensor {name} is not part of a Whisper model"),
        })?;
        if tensors.insert(canonical, t).is_some() {
            return Err(invalid(path, format!("tensor {name} appears twice")));
        }
    }
    Ok(())
}

/// The ordinary tokens' bytes (ids below `<|endoftext|>`) from `vocab.json`, else from
/// `tokenizer.json`'s model vocabulary.
fn vocabulary(dir: &Path, n_vocab: usize) -> Result<Vec<Vec<u8>>> {
    let vocab_path = dir.join("vocab.json");
    let (map, path): (HashMap<String, u32>, PathBuf) = if vocab_path.is_file() {
        (json(&vocab_path)?, vocab_path)
    } else {
        let t = dir.join("tokenizer.json");
        if !t.is_file() {
            return Err(FormatError::Io {
                path: vocab_path,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no vocab.json or tokenizer.json beside the weights",
                ),
            });
        }
        let raw: RawTokenizerVocab = json(&t)?;
        (raw.model.vocab, t)
    };
    let eot = *map
        .get("<|endoftext|>")
        .ok_or_else(|| invalid(&path, "no <|endoftext|> token".into()))? as usize;
    if eot >= n_vocab {
        return Err(invalid(
            &path,
            format!("<|endoftext|> is token {eot}, beyond the {n_vocab} embeddings"),
        ));
    }
    let mut tokens: Vec<Option<&str>> = vec![None; eot];
    for (token, &id) in &map {
        if let Some(slot) = tokens.get_mut(id as usize) {
            if slot.replace(token).is_some() {
                return Err(invalid(&path, format!("token id {id} appears twice")));
            }
        }
    }
    let lines: Vec<&str> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| t.ok_or_else(|| invalid(&path, format!("no token has id {id}"))))
        .collect::<Result<_>>()?;
    // As vocabulary.txt: one token per line, <|endoftext|> after the ordinary ones.
    let mut text = lines.join("\n");
    text.push_str("\n<|endoftext|>");
    crate::ct2::decode_vocabulary(&text, n_vocab, &path)
}

/// GPT-2's byte → printable-char map, the inverse of the one vocabularies are read with.
pub(crate) fn byte_to_unicode(b: u8) -> char {
    let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable {
        return char::from(b);
    }
    // The others take 256, 257, ... in byte order.
    let rank = (0..b)
        .filter(|&x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
        .count() as u32;
    char::from_u32(256 + rank).expect("below 324")
}

/// Writes `file` as a Hugging Face folder in `dir` (created if missing): `config.json`,
/// `model.safetensors` (each tensor in its own type, under `transformers`' names),
/// `vocab.json`, `generation_config.json` (alignment heads and token lists the file
/// carries) and, when the source has one, `tokenizer.json`. Block-quantized tensors have
/// no safetensors type: such files are refused.
pub fn write(file: &WhisperFile, dir: &Path) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FormatError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let weights = dir.join("model.safetensors");
    let mut views = Vec::with_capacity(file.tensors.len());
    for (name, t) in &file.tensors {
        let dtype = match t.dtype {
            DType::F32 => safetensors::Dtype::F32,
            DType::F16 => safetensors::Dtype::F16,
            DType::BF16 => safetensors::Dtype::BF16,
            other => {
                return Err(FormatError::Unsupported {
                    path: weights,
                    msg: format!("tensor {name} is {other:?}: safetensors holds f32, f16 or bf16"),
                })
            }
        };
        let hf = hf_name(name)
            .ok_or_else(|| invalid(&weights, format!("tensor {name} has no Hugging Face name")))?;
        let view = safetensors::tensor::TensorView::new(dtype, t.shape.clone(), t.data.as_bytes())
            .map_err(|e| invalid(&weights, format!("tensor {name}: {e}")))?;
        views.push((hf, view));
    }
    let bytes = safetensors::serialize(views, None)
        .map_err(|e| invalid(&weights, format!("serializing: {e}")))?;
    std::fs::write(&weights, bytes).map_err(io(&weights))?;

    let hp = &file.hparams;
    let config = serde_json::json!({
        "architectures": ["WhisperForConditionalGeneration"],
        "model_type": "whisper",
        "vocab_size": hp.n_vocab,
        "num_mel_bins": hp.n_mels,
        "d_model": hp.n_audio_state,
        "encoder_layers": hp.n_audio_layer,
        "encoder_attention_heads": hp.n_audio_head,
        "encoder_ffn_dim": 4 * hp.n_audio_state,
        "decoder_layers": hp.n_text_layer,
        "decoder_attention_heads": hp.n_text_head,
        "decoder_ffn_dim": 4 * hp.n_text_state,
        "max_source_positions": hp.n_audio_ctx,
        "max_target_positions": hp.n_text_ctx,
        "activation_function": "gelu",
        "scale_embedding": false,
        "tie_word_embeddings": true,
    });
    let mut vocab: serde_json::Map<String, serde_json::Value> = file
        .vocab
        .iter()
        .enumerate()
        .map(|(id, bytes)| {
            let token: String = bytes.iter().map(|&b| byte_to_unicode(b)).collect();
            (token, id.into())
        })
        .collect();
    vocab.insert("<|endoftext|>".into(), file.vocab.len().into());
    let mut generation = serde_json::Map::new();
    let c = &file.config;
    if let Some(h) = &c.alignment_heads {
        generation.insert("alignment_heads".into(), serde_json::json!(h));
    }
    if let Some(s) = &c.suppress_ids {
        generation.insert("suppress_tokens".into(), serde_json::json!(s));
    }
    if let Some(s) = &c.suppress_ids_begin {
        generation.insert("begin_suppress_tokens".into(), serde_json::json!(s));
    }
    for (name, doc) in [
        ("config.json", config),
        ("vocab.json", serde_json::Value::Object(vocab)),
        (
            "generation_config.json",
            serde_json::Value::Object(generation),
        ),
    ] {
        let path = dir.join(name);
        let text = serde_json::to_string_pretty(&doc).expect("JSON values serialize");
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    if let Some(m) = &c.bpe_merges {
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, m.text()).map_err(io(&path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_inverts_the_readers() {
        let text: String = (0..=255u8)
            .map(byte_to_unicode)
            .collect::<Vec<_>>()
            .iter()
            .map(|c| format!("{c}\n"))
            .collect();
        let text = format!("{text}<|endoftext|>");
        let back = crate::ct2::decode_vocabulary(&text, 300, Path::new("t")).unwrap();
        assert_eq!(back, (0..=255u8).map(|b| vec![b]).collect::<Vec<_>>());
    }

    #[test]
    fn names_map_both_ways() {
        for (hf, c) in [
            ("model.encoder.conv1.weight", "encoder.conv1.weight"),
            (
                "encoder.embed_positions.weight",
                "encoder.positional_embedding",
            ),
            (
                "model.encoder.layers.3.self_attn.k_proj.weight",
                "encoder.blocks.3.attn.key.weight",
            ),
            (
                "model.decoder.layers.11.encoder_attn.v_proj.bias",
                "decoder.blocks.11.cross_attn.value.bias",
            ),
            (
                "model.decoder.layers.0.fc2.weight",
                "decoder.blocks.0.mlp.2.weight",
            ),
            ("model.decoder.layer_norm.bias", "decoder.ln.bias"),
        ] {
            assert_eq!(canonical_name(hf).as_deref(), Some(c), "{hf}");
            let back = hf_name(c).unwrap();
            assert_eq!(
                back.trim_start_matches("model."),
                hf.trim_start_matches("model.")
            );
        }
        for bad in [
            "model.encoder.layers.0.encoder_attn.q_proj.weight",
            "model.encoder.layers.x.fc1.weight",
            "model.encoder.layers.0.fc1.lora_A",
            "model.decoder.layers.+1.fc1.weight",
            "lm_head.weight",
            "model.encoder.layers.0.fc3.weight",
        ] {
            assert_eq!(canonical_name(bad), None, "{bad}");
        }
    }
}
