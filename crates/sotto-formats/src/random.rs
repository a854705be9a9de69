//! Whisper models of the published sizes with random weights, built in memory: for timing
//! sizes whose weights are not at hand (an encoder window or a decoder step costs the same
//! whatever the values) and for tests at real shapes.
//!
//! Matrices are f16 with outputs of about unit variance (uniform weights of variance
//! 1 / fan-in), layer-norm scales near 1, biases and embeddings small; the vocabulary is
//! the 256 single bytes followed by placeholder tokens, so that a tokenizer builds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::{DType, Hparams, ModelConfig, SourceFormat, Storage, TensorData, WhisperFile};

/// The sizes [`hparams`] knows, as openai-whisper names them.
pub const SIZES: [&str; 12] = [
    "tiny",
    "tiny.en",
    "base",
    "base.en",
    "small",
    "small.en",
    "medium",
    "medium.en",
    "large-v1",
    "large-v2",
    "large-v3",
    "large-v3-turbo",
];

/// openai-whisper's dimensions of a published size (`None` for another name).
pub fn hparams(size: &str) -> Option<Hparams> {
    let english = size.ends_with(".en");
    let (state, heads, layers) = match size.trim_end_matches(".en") {
        "tiny" => (384, 6, 4),
        "base" => (512, 8, 6),
        "small" => (768, 12, 12),
        "medium" => (1024, 16, 24),
        "large-v1" | "large-v2" | "large-v3" | "large-v3-turbo" if !english => (1280, 20, 32),
        _ => return None,
    };
    let v3 = size.starts_with("large-v3");
    Some(Hparams {
        n_vocab: match (english, v3) {
            (true, _) => 51864,
            (false, false) => 51865,
            (false, true) => 51866,
        },
        n_audio_ctx: 1500,
        n_audio_state: state,
        n_audio_head: heads,
        n_audio_layer: layers,
        n_text_ctx: 448,
        n_text_state: state,
        n_text_head: heads,
        n_text_layer: if size == "large-v3-turbo" { 4 } else { layers },
        n_mels: if v3 { 128 } else { 80 },
    })
}

/// Deterministic values in [-scale, scale) (xorshift64*), `seed` advanced.
fn uniform(n: usize, seed: &mut u64, scale: f32) -> impl Iterator<Item = f32> + '_ {
    *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut s = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    (0..n).map(move |_| {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
        (2.0 * u - 1.0) * scale
    })
}

/// The ordinary tokens of a tokenizer for `n_vocab` (50 256 for English-only sizes, 50 257
/// otherwise, as the real vocabularies have): every single byte, then placeholders. None
/// for a smaller, made-up vocabulary (test models), which no tokenizer fits.
pub fn vocabulary(n_vocab: usize) -> Vec<Vec<u8>> {
    if n_vocab < 51864 {
        return Vec::new();
    }
    let n = if n_vocab == 51864 { 50256 } else { 50257 };
    (0..=255u8)
        .map(|b| vec![b])
        .chain((256..n).map(|i| format!("<random {i}>").into_bytes()))
        .collect()
}

/// A Whisper of shape `h` (a published size's, or any other) with random weights from
/// `seed`.
pub fn whisper(h: Hparams, seed: u64) -> WhisperFile {
    let mut tensors = BTreeMap::new();
    let path = PathBuf::from(format!("random weights (seed {seed})"));
    let mut seed = seed;
    let mut add = |name: String, shape: &[usize], kind: Kind| {
        let n: usize = shape.iter().product();
        let fan_in: usize = shape[1..].iter().product::<usize>().max(1);
        let (dtype, bytes): (DType, Vec<u8>) = match kind {
            Kind::Matrix => {
                // Uniform on [-a, a) has variance a² / 3: a = √(3 / fan_in) gives 1 / fan_in.
                let a = (3.0 / fan_in as f32).sqrt();
                let v = uniform(n, &mut seed, a).flat_map(|x| half::f16::from_f32(x).to_le_bytes());
                (DType::F16, v.collect())
            }
            Kind::Scale => {
                let v = uniform(n, &mut seed, 0.1).flat_map(|x| (1.0 + x).to_le_bytes());
                (DType::F32, v.collect())
            }
            Kind::Offset => {
                let v = uniform(n, &mut seed, 0.2).flat_map(|x| x.to_le_bytes());
                (DType::F32, v.collect())
            }
        };
        let data = Storage::from_vec(bytes);
        tensors.insert(
            name,
            TensorData {
                dtype,
                shape: shape.to_vec(),
                data,
            },
        );
    };
    let (da, dt) = (h.n_audio_state, h.n_text_state);
    add(
        "encoder.conv1.weight".into(),
        &[da, h.n_mels, 3],
        Kind::Matrix,
    );
    add("encoder.conv1.bias".into(), &[da], Kind::Offset);
    add("encoder.conv2.weight".into(), &[da, da, 3], Kind::Matrix);
    add("encoder.conv2.bias".into(), &[da], Kind::Offset);
    add(
        "encoder.positional_embedding".into(),
        &[h.n_audio_ctx, da],
        Kind::Offset,
    );
    add(
        "decoder.token_embedding.weight".into(),
        &[h.n_vocab, dt],
        Kind::Matrix,
    );
    add(
        "decoder.positional_embedding".into(),
        &[h.n_text_ctx, dt],
        Kind::Offset,
    );
    for (p, d) in [("encoder.ln_post", da), ("decoder.ln", dt)] {
        add(format!("{p}.weight"), &[d], Kind::Scale);
        add(format!("{p}.bias"), &[d], Kind::Offset);
    }
    let blocks = (0..h.n_audio_layer)
        .map(|i| (format!("encoder.blocks.{i}"), da, false))
        .chain((0..h.n_text_layer).map(|i| (format!("decoder.blocks.{i}"), dt, true)));
    for (b, d, cross) in blocks {
        let norms: &[&str] = match cross {
            true => &["attn_ln", "mlp_ln", "cross_attn_ln"],
            false => &["attn_ln", "mlp_ln"],
        };
        for ln in norms {
            add(format!("{b}.{ln}.weight"), &[d], Kind::Scale);
            add(format!("{b}.{ln}.bias"), &[d], Kind::Offset);
        }
        let attns: &[(&str, usize)] = match cross {
            true => &[("attn", d), ("cross_attn", da)],
            false => &[("attn", d)],
        };
        for &(a, d_kv) in attns {
            for p in ["query", "key", "value", "out"] {
                let n_in = if p == "key" || p == "value" { d_kv } else { d };
                add(format!("{b}.{a}.{p}.weight"), &[d, n_in], Kind::Matrix);
                if p != "key" {
                    add(format!("{b}.{a}.{p}.bias"), &[d], Kind::Offset);
                }
            }
        }
        add(format!("{b}.mlp.0.weight"), &[4 * d, d], Kind::Matrix);
        add(format!("{b}.mlp.0.bias"), &[4 * d], Kind::Offset);
        add(format!("{b}.mlp.2.weight"), &[d, 4 * d], Kind::Matrix);
        add(format!("{b}.mlp.2.bias"), &[d], Kind::Offset);
    }
    WhisperFile {
        path,
        format: SourceFormat::Ggml,
        hparams: h,
        tensors,
        vocab: vocabulary(h.n_vocab),
        mel_filters: None,
        config: ModelConfig::default(),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    /// f16, variance 1 / fan-in.
    Matrix,
    /// f32 near 1 (layer-norm scales).
    Scale,
    /// f32, small (biases, embeddings, layer-norm offsets).
    Offset,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_has_openai_whispers_dimensions() {
        for size in SIZES {
            let h = hparams(size).unwrap_or_else(|| panic!("{size}"));
            assert_eq!(h.n_audio_state % h.n_audio_head, 0, "{size}");
            assert_eq!(h.n_audio_state / h.n_audio_head, 64, "{size}: head width");
        }
        let v3 = hparams("large-v3").unwrap();
        assert_eq!((v3.n_mels, v3.n_vocab, v3.n_text_layer), (128, 51866, 32));
        assert_eq!(hparams("large-v3-turbo").unwrap().n_text_layer, 4);
        assert_eq!(hparams("base.en").unwrap().n_vocab, 51864);
        assert_eq!(hparams("large.en"), None);
        assert_eq!(hparams("huge"), None);
    }

    #[test]
    fn a_random_tiny_has_every_tensor_at_its_shape() {
        let h = hparams("tiny").unwrap();
        let f = whisper(h, 1);
        // 2 convs × 2, 2 positional, token embedding, 2 final norms × 2, then per block:
        // encoder 4 norms + 7 attention + 4 mlp; decoder 6 norms + 14 attention + 4 mlp.
        let want = 4 + 2 + 1 + 4 + 4 * 15 + 4 * 24;
        assert_eq!(f.tensors.len(), want);
        let t = &f.tensors["decoder.token_embedding.weight"];
        assert_eq!((t.dtype, t.shape.clone()), (DType::F16, vec![51865, 384]));
        assert_eq!(t.data.as_bytes().len(), 51865 * 384 * 2);
        assert_eq!(f.vocab.len(), 50257);
        assert_eq!(
            whisper(h, 1).tensors["encoder.conv1.bias"].data.as_bytes(),
            f.tensors["encoder.conv1.bias"].data.as_bytes(),
            "deterministic"
        );
    }
}
