//! Small synthetic models for tests: a CTranslate2 `model.bin` built byte by byte, and a
//! canonical [`WhisperFile`] to write as ggml.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sotto_formats::{
    names, DType, Hparams, ModelConfig, SourceFormat, Storage, TensorData, WhisperFile,
};

/// A model small enough to parse thousands of times per second.
pub const HP: Hparams = Hparams {
    n_vocab: 8,
    n_audio_ctx: 3,
    n_audio_state: 4,
    n_audio_head: 2,
    n_audio_layer: 1,
    n_text_ctx: 2,
    n_text_state: 4,
    n_text_head: 2,
    n_text_layer: 1,
    n_mels: 2,
};

/// `vocabulary.txt` for [`HP`]: 4 ordinary tokens, then specials.
pub const VOCAB_TXT: &str = "!\n\u{120}a\n\u{100}\n\u{122}\u{143}\n<|endoftext|>\n<|startoftranscript|>\n<|notimestamps|>\n<|0.00|>\n";

/// Deterministic f16 bytes for `n` values, distinct per `seed`.
pub fn f16_bytes(n: usize, seed: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            half::f16::from_f32(((i * 7 + seed * 13) % 23) as f32 / 8.0 - 1.0).to_le_bytes()
        })
        .collect()
}

/// Builder for CTranslate2 `model.bin` bytes (binary version 6).
#[derive(Default)]
pub struct Ct2Builder {
    vars: Vec<(String, Vec<u32>, u8, Vec<u8>)>,
    aliases: Vec<(String, String)>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&((s.len() + 1) as u16).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

impl Ct2Builder {
    pub fn var(&mut self, name: &str, shape: &[usize], dtype_id: u8, data: Vec<u8>) -> &mut Self {
        self.vars.push((
            name.into(),
            shape.iter().map(|&d| d as u32).collect(),
            dtype_id,
            data,
        ));
        self
    }

    /// Replaces the variable `name` (or adds it).
    pub fn set(&mut self, name: &str, shape: &[usize], dtype_id: u8, data: Vec<u8>) -> &mut Self {
        self.vars.retain(|v| v.0 != name);
        self.var(name, shape, dtype_id, data)
    }

    pub fn f16(&mut self, name: &str, shape: &[usize]) -> &mut Self {
        let seed = self.vars.len();
        self.var(name, shape, 4, f16_bytes(shape.iter().product(), seed))
    }

    pub fn alias(&mut self, alias: &str, target: &str) -> &mut Self {
        self.aliases.push((alias.into(), target.into()));
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&6u32.to_le_bytes());
        put_str(&mut out, "WhisperSpec");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.vars.len() as u32).to_le_bytes());
        for (name, shape, dtype, data) in &self.vars {
            put_str(&mut out, name);
            out.push(shape.len() as u8);
            for d in shape {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.push(*dtype);
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        out.extend_from_slice(&(self.aliases.len() as u32).to_le_bytes());
        for (a, t) in &self.aliases {
            put_str(&mut out, a);
            put_str(&mut out, t);
        }
        out
    }
}

/// A complete synthetic f16 CTranslate2 Whisper model for [`HP`].
pub fn ct2_model() -> Ct2Builder {
    let d = HP.n_audio_state;
    let mut b = Ct2Builder::default();
    b.f16("encoder/conv1/weight", &[d, HP.n_mels, 3])
        .f16("encoder/conv1/bias", &[d])
        .f16("encoder/conv2/weight", &[d, d, 3])
        .f16("encoder/conv2/bias", &[d])
        .f16("encoder/position_encodings/encodings", &[HP.n_audio_ctx, d])
        .f16("encoder/layer_norm/gamma", &[d])
        .f16("encoder/layer_norm/beta", &[d])
        .var(
            "encoder/num_heads",
            &[],
            2,
            (HP.n_audio_head as i16).to_le_bytes().to_vec(),
        );
    let ffn = |b: &mut Ct2Builder, p: &str| {
        b.f16(&format!("{p}/ffn/layer_norm/gamma"), &[d])
            .f16(&format!("{p}/ffn/layer_norm/beta"), &[d])
            .f16(&format!("{p}/ffn/linear_0/weight"), &[4 * d, d])
            .f16(&format!("{p}/ffn/linear_0/bias"), &[4 * d])
            .f16(&format!("{p}/ffn/linear_1/weight"), &[d, 4 * d])
            .f16(&format!("{p}/ffn/linear_1/bias"), &[d]);
    };
    let self_attn = |b: &mut Ct2Builder, p: &str| {
        b.f16(&format!("{p}/self_attention/layer_norm/gamma"), &[d])
            .f16(&format!("{p}/self_attention/layer_norm/beta"), &[d])
            .f16(&format!("{p}/self_attention/linear_0/weight"), &[3 * d, d])
            .f16(&format!("{p}/self_attention/linear_0/bias"), &[3 * d])
            .f16(&format!("{p}/self_attention/linear_1/weight"), &[d, d])
            .f16(&format!("{p}/self_attention/linear_1/bias"), &[d]);
    };
    self_attn(&mut b, "encoder/layer_0");
    ffn(&mut b, "encoder/layer_0");
    b.f16("decoder/embeddings/weight", &[HP.n_vocab, d])
        .f16("decoder/position_encodings/encodings", &[HP.n_text_ctx, d])
        .f16("decoder/layer_norm/gamma", &[d])
        .f16("decoder/layer_norm/beta", &[d])
        .var(
            "decoder/num_heads",
            &[],
            2,
            (HP.n_text_head as i16).to_le_bytes().to_vec(),
        );
    self_attn(&mut b, "decoder/layer_0");
    b.f16("decoder/layer_0/attention/layer_norm/gamma", &[d])
        .f16("decoder/layer_0/attention/layer_norm/beta", &[d])
        .f16("decoder/layer_0/attention/linear_0/weight", &[d, d])
        .f16("decoder/layer_0/attention/linear_0/bias", &[d])
        .f16("decoder/layer_0/attention/linear_1/weight", &[2 * d, d])
        .f16("decoder/layer_0/attention/linear_1/bias", &[2 * d])
        .f16("decoder/layer_0/attention/linear_2/weight", &[d, d])
        .f16("decoder/layer_0/attention/linear_2/bias", &[d]);
    ffn(&mut b, "decoder/layer_0");
    b.alias("decoder/projection/weight", "decoder/embeddings/weight");
    b
}

/// A canonical f32 model for [`HP`] (every tensor of [`names::expected`]).
pub fn whisper_file() -> WhisperFile {
    let tensors: BTreeMap<String, TensorData> = names::expected(&HP)
        .into_iter()
        .enumerate()
        .map(|(k, spec)| {
            let n: usize = spec.shape.iter().product();
            let data: Vec<u8> = (0..n)
                .flat_map(|i| ((i + k) as f32 * 0.25 - 1.0).to_le_bytes())
                .collect();
            (
                spec.name,
                TensorData {
                    dtype: DType::F32,
                    shape: spec.shape,
                    data: Storage::from_vec(data),
                },
            )
        })
        .collect();
    WhisperFile {
        path: PathBuf::from("synthetic"),
        format: SourceFormat::Ct2,
        hparams: HP,
        tensors,
        vocab: vec![b"!".to_vec(), b" a".to_vec(), vec![0], vec![]],
        mel_filters: None,
        config: ModelConfig::default(),
    }
}

/// Deterministic `[n_mels, 201]` filters.
pub fn mel_filters(n_mels: usize) -> Vec<f32> {
    (0..n_mels * 201)
        .map(|i| ((i * 31) % 97) as f32 / 1000.0)
        .collect()
}

/// A fresh scratch folder under cargo's per-target temp dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("sotto-formats-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Bytes of the synthetic model written as ggml by our writer.
pub fn ggml_bytes() -> Vec<u8> {
    let dir = scratch("synthetic-ggml");
    let out = dir.join("model.bin");
    sotto_formats::ggml::write(&whisper_file(), &mel_filters(HP.n_mels), &out)
        .expect("write synthetic ggml");
    let bytes = std::fs::read(&out).expect("read synthetic ggml");
    let _ = std::fs::remove_dir_all(&dir);
    bytes
}
