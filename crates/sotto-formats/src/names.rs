//! The canonical tensor names and shapes of a Whisper model (whisper.cpp's
//! `whisper-arch.h` analogue), shared by both loaders and the ggml writer.
//!
//! Order matters: [`expected`] lists tensors in the order whisper.cpp's converters write
//! them, which is the order [`crate::ggml::write`] uses.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{FormatError, Hparams, Result, TensorData};

/// How a tensor is stored in an f16 ggml file (whisper.cpp's converter rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `encoder.conv{1,2}.weight`, shape `[d, c_in, 3]`: f16.
    ConvWeight,
    /// `encoder.conv{1,2}.bias`, canonical shape `[d]`, stored as `[d, 1]` f32.
    ConvBias,
    /// Positional embeddings, `[n_ctx, d]`: f32 (whisper.cpp requires it).
    PositionalEmbedding,
    /// Other 2-D weights (linear layers, token embedding): f16.
    Matrix,
    /// 1-D tensors (biases, layer norms): f32.
    Vector,
}

/// One required tensor: canonical name, canonical shape (outermost first) and role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub role: Role,
}

/// Shape of a per-layer tensor in units of the layer width `d`.
#[derive(Clone, Copy)]
enum Dims {
    D,
    DxD,
    D4,
    D4xD,
    DxD4,
}

impl Dims {
    fn shape(self, d: usize) -> Vec<usize> {
        match self {
            Dims::D => vec![d],
            Dims::DxD => vec![d, d],
            Dims::D4 => vec![4 * d],
            Dims::D4xD => vec![4 * d, d],
            Dims::DxD4 => vec![d, 4 * d],
        }
    }
}

/// Self-attention block, suffixes after `{encoder,decoder}.blocks.N.`. No key bias.
const SELF_ATTN: [(&str, Dims); 9] = [
    ("attn_ln.weight", Dims::D),
    ("attn_ln.bias", Dims::D),
    ("attn.query.weight", Dims::DxD),
    ("attn.query.bias", Dims::D),
    ("attn.key.weight", Dims::DxD),
    ("attn.value.weight", Dims::DxD),
    ("attn.value.bias", Dims::D),
    ("attn.out.weight", Dims::DxD),
    ("attn.out.bias", Dims::D),
];

/// Decoder cross-attention block (queries from the text, keys/values from the audio).
const CROSS_ATTN: [(&str, Dims); 9] = [
    ("cross_attn_ln.weight", Dims::D),
    ("cross_attn_ln.bias", Dims::D),
    ("cross_attn.query.weight", Dims::DxD),
    ("cross_attn.query.bias", Dims::D),
    ("cross_attn.key.weight", Dims::DxD),
    ("cross_attn.value.weight", Dims::DxD),
    ("cross_attn.value.bias", Dims::D),
    ("cross_attn.out.weight", Dims::DxD),
    ("cross_attn.out.bias", Dims::D),
];

/// Feed-forward block: `mlp.0` is `[4d, d]`, `mlp.2` is `[d, 4d]`.
const MLP: [(&str, Dims); 6] = [
    ("mlp_ln.weight", Dims::D),
    ("mlp_ln.bias", Dims::D),
    ("mlp.0.weight", Dims::D4xD),
    ("mlp.0.bias", Dims::D4),
    ("mlp.2.weight", Dims::DxD4),
    ("mlp.2.bias", Dims::D),
];

/// Name of a per-layer encoder tensor, e.g. `enc(0, "attn.query.weight")`.
pub fn enc(layer: usize, suffix: &str) -> String {
    format!("encoder.blocks.{layer}.{suffix}")
}

/// Name of a per-layer decoder tensor, e.g. `dec(0, "cross_attn.key.weight")`.
pub fn dec(layer: usize, suffix: &str) -> String {
    format!("decoder.blocks.{layer}.{suffix}")
}

/// How many tensors a model with these hyper-parameters has.
pub fn expected_count(hp: &Hparams) -> usize {
    let per_enc = SELF_ATTN.len() + MLP.len();
    let per_dec = SELF_ATTN.len() + CROSS_ATTN.len() + MLP.len();
    11usize
        .saturating_add(per_enc.saturating_mul(hp.n_audio_layer))
        .saturating_add(per_dec.saturating_mul(hp.n_text_layer))
}

/// Every tensor of a model, in whisper.cpp converter order.
pub fn expected(hp: &Hparams) -> Vec<TensorSpec> {
    expected_iter(hp).collect()
}

/// A layer tensor's spec: 1-D ones are plain vectors, the rest matrices.
fn layer_spec(name: String, dims: Dims, d: usize) -> TensorSpec {
    let role = if matches!(dims, Dims::D | Dims::D4) {
        Role::Vector
    } else {
        Role::Matrix
    };
    TensorSpec {
        name,
        shape: dims.shape(d),
        role,
    }
}

fn spec(name: &str, shape: Vec<usize>, role: Role) -> TensorSpec {
    TensorSpec {
        name: name.to_string(),
        shape,
        role,
    }
}

/// [`expected`] one tensor at a time, so that checking a file whose header claims a huge
/// model allocates nothing in proportion to the claim.
pub fn expected_iter(hp: &Hparams) -> impl Iterator<Item = TensorSpec> + '_ {
    let (da, dt) = (hp.n_audio_state, hp.n_text_state);
    let head = [
        spec(
            "encoder.conv1.weight",
            vec![da, hp.n_mels, 3],
            Role::ConvWeight,
        ),
        spec("encoder.conv1.bias", vec![da], Role::ConvBias),
        spec("encoder.conv2.weight", vec![da, da, 3], Role::ConvWeight),
        spec("encoder.conv2.bias", vec![da], Role::ConvBias),
        spec(
            "encoder.positional_embedding",
            vec![hp.n_audio_ctx, da],
            Role::PositionalEmbedding,
        ),
        spec("encoder.ln_post.weight", vec![da], Role::Vector),
        spec("encoder.ln_post.bias", vec![da], Role::Vector),
    ];
    let encoder = (0..hp.n_audio_layer).flat_map(move |i| {
        SELF_ATTN
            .iter()
            .chain(&MLP)
            .map(move |(suffix, dims)| layer_spec(enc(i, suffix), *dims, da))
    });
    let middle = [
        spec(
            "decoder.token_embedding.weight",
            vec![hp.n_vocab, dt],
            Role::Matrix,
        ),
        spec(
            "decoder.positional_embedding",
            vec![hp.n_text_ctx, dt],
            Role::PositionalEmbedding,
        ),
        spec("decoder.ln.weight", vec![dt], Role::Vector),
        spec("decoder.ln.bias", vec![dt], Role::Vector),
    ];
    let decoder = (0..hp.n_text_layer).flat_map(move |i| {
        SELF_ATTN
            .iter()
            .chain(&CROSS_ATTN)
            .chain(&MLP)
            .map(move |(suffix, dims)| layer_spec(dec(i, suffix), *dims, dt))
    });
    head.into_iter().chain(encoder).chain(middle).chain(decoder)
}

/// Largest width, context, vocabulary and layer count we accept; far above any Whisper
/// model, low enough that shape arithmetic cannot overflow.
const MAX_DIM: usize = 1 << 20;
const MAX_LAYERS: usize = 1 << 10;

/// Checks that hyper-parameters are positive, bounded and consistent (heads divide the
/// width; audio and text widths match, as whisper.cpp assumes).
pub fn check_hparams(path: &Path, hp: &Hparams) -> Result<()> {
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    let dims = [
        ("n_vocab", hp.n_vocab),
        ("n_audio_ctx", hp.n_audio_ctx),
        ("n_audio_state", hp.n_audio_state),
        ("n_audio_head", hp.n_audio_head),
        ("n_text_ctx", hp.n_text_ctx),
        ("n_text_state", hp.n_text_state),
        ("n_text_head", hp.n_text_head),
        ("n_mels", hp.n_mels),
    ];
    for (name, v) in dims {
        if v == 0 || v > MAX_DIM {
            return Err(invalid(format!(
                "hparam {name} = {v} is out of range 1..={MAX_DIM}"
            )));
        }
    }
    for (name, v) in [
        ("n_audio_layer", hp.n_audio_layer),
        ("n_text_layer", hp.n_text_layer),
    ] {
        if v == 0 || v > MAX_LAYERS {
            return Err(invalid(format!(
                "hparam {name} = {v} is out of range 1..={MAX_LAYERS}"
            )));
        }
    }
    if !hp.n_audio_state.is_multiple_of(hp.n_audio_head)
        || !hp.n_text_state.is_multiple_of(hp.n_text_head)
    {
        return Err(invalid(format!(
            "head counts ({}, {}) do not divide the widths ({}, {})",
            hp.n_audio_head, hp.n_text_head, hp.n_audio_state, hp.n_text_state
        )));
    }
    if hp.n_audio_state != hp.n_text_state {
        return Err(invalid(format!(
            "n_audio_state {} != n_text_state {} (whisper.cpp requires them equal)",
            hp.n_audio_state, hp.n_text_state
        )));
    }
    Ok(())
}

/// Checks that `tensors` holds exactly the tensors [`expected`] lists, each with the
/// expected shape and a float or block-quantized type. Errors name the first offender.
pub fn check(path: &Path, hp: &Hparams, tensors: &BTreeMap<String, TensorData>) -> Result<()> {
    check_hparams(path, hp)?;
    let invalid = |msg: String| FormatError::Invalid {
        path: path.to_path_buf(),
        msg,
    };
    let n_expected = expected_count(hp);
    for spec in expected_iter(hp) {
        let Some(t) = tensors.get(&spec.name) else {
            return Err(invalid(format!(
                "missing tensor {} (shape {:?})",
                spec.name, spec.shape
            )));
        };
        if t.shape != spec.shape {
            return Err(invalid(format!(
                "tensor {} has shape {:?}, expected {:?}",
                spec.name, t.shape, spec.shape
            )));
        }
        if t.dtype.is_integer() {
            return Err(invalid(format!(
                "tensor {} has integer type {:?}",
                spec.name, t.dtype
            )));
        }
    }
    // Every expected tensor was found, so the list is no longer than the file's own.
    if tensors.len() != n_expected {
        let known: std::collections::HashSet<String> = expected_iter(hp).map(|s| s.name).collect();
        let extra = tensors.keys().find(|k| !known.contains(k.as_str()));
        return Err(invalid(format!(
            "unexpected tensor {}",
            extra.map_or("?", |s| s.as_str())
        )));
    }
    Ok(())
}
