//! The Whisper forward pass on the CPU.
//!
//! [`Whisper`] holds the immutable weights (shared between streams through an `Arc`);
//! a [`Session`] holds one stream's state: its thread pool, the encoder output of the
//! current 30 s window, the cross-attention K/V computed from it once, and the
//! self-attention KV cache of the text decoded so far.

mod calibrate;
mod kv;
mod session;
pub mod silero;
mod weights;
mod work;

pub use calibrate::{Calibration, InputStats};
pub use session::{check_align_input, check_decode_input, EncoderLaps, Session};
pub use sotto_compute::{ab, measure_compute_peaks, measure_peaks, ComputeError, Peaks, VocabTop};
pub use sotto_formats::Hparams;
pub use work::EncoderWork;

use std::path::PathBuf;

use sotto_compute::{Linear, Norm};

/// Errors from building a model or running it.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A tensor is missing or has the wrong shape or type.
    #[error("{path}: tensor {name}: {msg}")]
    Tensor {
        path: PathBuf,
        name: String,
        msg: String,
    },
    /// The hyper-parameters cannot describe a Whisper model.
    #[error("{path}: hyper-parameters: {msg}")]
    Hparams { path: PathBuf, msg: String },
    /// A call with arguments that do not fit the model or the session's state.
    #[error("{op}: {msg}")]
    Input { op: &'static str, msg: String },
    #[error(transparent)]
    Compute(#[from] ComputeError),
}

/// Self- or cross-attention projections.
#[derive(Debug)]
pub(crate) struct Attention {
    pub query: Linear,
    /// No bias, as in Whisper.
    pub key: Linear,
    pub value: Linear,
    pub out: Linear,
}

/// A pre-LN transformer block; `cross` is present in decoder blocks only.
#[derive(Debug)]
pub(crate) struct Block {
    pub attn_ln: Norm,
    pub attn: Attention,
    pub cross: Option<(Norm, Attention)>,
    pub mlp_ln: Norm,
    /// Shape: [4·d, d]
    pub mlp_0: Linear,
    /// Shape: [d, 4·d]
    pub mlp_2: Linear,
}

#[derive(Debug)]
pub(crate) struct Encoder {
    /// Shape: [d, n_mels, 3] as a linear layer [d, n_mels·3].
    pub conv1: Linear,
    /// Shape: [d, d, 3] as a linear layer [d, d·3].
    pub conv2: Linear,
    /// Shape: [n_audio_ctx, d]
    pub pos: Vec<f32>,
    pub blocks: Vec<Block>,
    pub ln_post: Norm,
}

#[derive(Debug)]
pub(crate) struct Decoder {
    /// Shape: [n_vocab, d]; also the (tied) output projection.
    pub token_embedding: Linear,
    /// Shape: [n_text_ctx, d]
    pub pos: Vec<f32>,
    pub blocks: Vec<Block>,
    pub ln: Norm,
}

/// Immutable Whisper weights. 2-D weights stay in the file's precision (f16 or f32).
#[derive(Debug)]
pub struct Whisper {
    hparams: Hparams,
    pub(crate) encoder: Encoder,
    pub(crate) decoder: Decoder,
    /// The encoder's precision as it runs on this CPU (F32 where bf16 is unsupported).
    pub(crate) encoder_precision: EncoderPrecision,
}

/// The encoder's arithmetic on the CPU. The bf16 levels need AVX-512 BF16; elsewhere they
/// run as [`EncoderPrecision::F32`] (see [`bf16_encoder_supported`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EncoderPrecision {
    /// Per model file and CPU:
    /// - f16/f32 files: [`EncoderPrecision::Bf16`] where the CPU has AVX-512 BF16, else
    ///   [`EncoderPrecision::Int16`] where the kernels run AVX2 (not AVX-512, whose f32 GEMM
    ///   is faster than the 16-bit pair products), else [`EncoderPrecision::F32`];
    /// - ggml block-quantized files (q8_0 and coarser: their weights carry no more than
    ///   int8 precision): [`EncoderPrecision::Int8`] with AVX-512 VNNI, else
    ///   [`EncoderPrecision::Int16`] (same speed on the AVX2 tile, half int8's loss), else
    ///   the f16 files' choice.
    #[default]
    Auto,
    /// Every product in f32 (weights widened from f16): the reference path.
    F32,
    /// The encoder's linear layers and convs, and the cross-attention K/V projections, as
    /// bf16 GEMMs with f32 accumulation (twice the FLOPs per instruction); in the
    /// self-attention the scores QKᵀ run on 13-bit integer levels of Q and K with exact
    /// sums (AVX-512 VNNI), the softmax in f32, and P·V in bf16.
    /// Transcripts stay within the WER of the f32 path on the shared clips (see the README).
    Bf16,
    /// [`EncoderPrecision::Bf16`] with the attention scores QKᵀ in bf16 too, and the
    /// decoder's prompt pass (the previous window's text, ~100–225 tokens per window) as
    /// bf16 GEMMs over its f16 weights: faster again, but the extra rounding moves more
    /// transcripts (tiny.en beam 5: +1 WER point on the shared clips), so it is opt-in.
    Bf16Fast,
    /// The encoder's linear layers and convs, and the cross-attention K/V projections, as
    /// int8 GEMMs: weights quantized per output channel at load, activations per row on
    /// every call, exact i32 sums, as faster-whisper's `int8` does. With AVX-512 VNNI the
    /// activations are bytes too, at about twice the bf16 GEMM's rate; on AVX2 (i16 pair
    /// products, 1.6× the f32 GEMM's rate) they keep up to 32 767 levels a side instead of
    /// 127 at no cost, which halves the distance from f16. Attention as in
    /// [`EncoderPrecision::Bf16`] where the CPU has AVX-512 BF16, else f32. The default for
    /// ggml-quantized model files on CPUs with AVX-512 VNNI. Runs as F32 on CPUs without
    /// AVX2.
    Int8,
    /// [`EncoderPrecision::Int8`]'s AVX2 products (i16 pairs, `vpmaddwd`, exact i32 sums)
    /// with the weights given as many levels as the activations: the most whose sums cannot
    /// overflow i32 (`sotto_compute::wide_qmax`: 2 047 a side at k = 512, 1 023 at k = 2048,
    /// 11–12 bits), per output channel and per row; the self-attention's Q·Kᵀ (per query
    /// and per key, 5 792 levels at d_head 64) and P·V (per row and key tile, per value
    /// column, 1 672 levels) on the same pair products, the softmax in f32 between them.
    /// Faster than int8 here at ~1/30 of its distance from the f32 path (teacher-forced KL
    /// to f32 on the shared clips: tiny.en 0.000022 against int8's 0.00091). The default on
    /// AVX2 CPUs without AVX-512. Runs as F32 on CPUs without AVX2.
    Int16,
}

impl std::str::FromStr for EncoderPrecision {
    type Err = String;

    /// `auto`, `f32`, `bf16`, `bf16-fast`, `int8` or `int16`; a level this kernel path
    /// cannot run is an error naming what it lacks, not a silent f32 run.
    fn from_str(name: &str) -> Result<Self, String> {
        let lacks = |what: &str| {
            format!("{name}: this CPU (or SOTTO_FORCE_ISA) lacks {what} (use auto or f32)")
        };
        match name {
            "auto" => Ok(EncoderPrecision::Auto),
            "f32" => Ok(EncoderPrecision::F32),
            "bf16" | "bf16-fast" if !bf16_encoder_supported() => Err(lacks("AVX-512 BF16")),
            "int8" if !int8_encoder_supported() => Err(lacks("AVX2 and AVX-512 VNNI")),
            "int16" if !int16_encoder_supported() => Err(lacks("AVX2")),
            "bf16" => Ok(EncoderPrecision::Bf16),
            "bf16-fast" => Ok(EncoderPrecision::Bf16Fast),
            "int8" => Ok(EncoderPrecision::Int8),
            "int16" => Ok(EncoderPrecision::Int16),
            other => Err(format!(
                "{other}: expected auto, int8, int16, bf16, bf16-fast or f32"
            )),
        }
    }
}

/// How a model's weights are prepared at load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Default [`EncoderPrecision::Auto`].
    pub encoder: EncoderPrecision,
    /// Keep the vocabulary projection of f16 Whisper files as f16 tiles, every logit
    /// computed from the f16 rows, instead of screened q8_0 planes (see
    /// `sotto_compute::VocabWeights` and [`Session::set_logit_need`]). Default false.
    pub exact_logits: bool,
    /// Quantize an f16 or f32 file's decoder weights (the layers, not the vocabulary, which
    /// is screened anyway) to q8_0 as they load, as `sotto quantize q8_0` would store them:
    /// half the bytes a decoder step reads, the decoder of a q8_0 file (CTranslate2's int8
    /// quantizes its decoder too). The CPU only. Default false.
    pub quantize_decoder: bool,
}

// These answer for the selected kernel path (`sotto_isa::isa`), not the CPU alone: a run
// with `SOTTO_FORCE_ISA=avx2` on an AVX-512 CPU chooses and runs what an AVX2 CPU would.

/// Whether the kernel path runs the bf16 encoder levels: AVX-512 BF16.
pub fn bf16_encoder_supported() -> bool {
    sotto_compute::bf16_gemm_active()
}

/// Whether the kernel path runs [`EncoderPrecision::Int8`]: AVX-512 VNNI or AVX2, or
/// aarch64 with the dot-product extension.
pub fn int8_encoder_supported() -> bool {
    sotto_compute::int8_gemm_active()
}

/// Whether the kernel path runs [`EncoderPrecision::Int16`]: AVX2 (or AVX-512).
pub fn int16_encoder_supported() -> bool {
    sotto_compute::int16_gemm_active()
}

impl LoadOptions {
    /// Every weight and activation in f32 or the file's precision: the reference path.
    pub const F32: LoadOptions = LoadOptions {
        encoder: EncoderPrecision::F32,
        exact_logits: true,
        quantize_decoder: false,
    };
}

impl Whisper {
    /// Builds the model from a loaded file, checking every tensor's shape and type.
    pub fn from_file(f: &sotto_formats::WhisperFile) -> Result<Self, ModelError> {
        Whisper::from_file_with(f, LoadOptions::default())
    }

    /// [`Whisper::from_file`] with load options.
    pub fn from_file_with(
        f: &sotto_formats::WhisperFile,
        opts: LoadOptions,
    ) -> Result<Self, ModelError> {
        weights::build(f, opts)
    }

    pub fn hparams(&self) -> &Hparams {
        &self.hparams
    }

    /// The encoder precision this model runs on this CPU (never `Auto`).
    pub fn encoder_precision(&self) -> EncoderPrecision {
        self.encoder_precision
    }

    /// The products of one [`Session::encode`] at this model's encoder precision.
    pub fn encoder_work(&self) -> EncoderWork {
        let mut w = EncoderWork::new(&self.hparams, self.encoder_precision);
        if !bf16_encoder_supported() {
            // Int8 on AVX2: the attention's scores and P·V fall back to f32.
            w.f32_flops += w.bf16_flops + w.i16_pair_ops;
            (w.bf16_flops, w.i16_pair_ops) = (0.0, 0.0);
        }
        w
    }

    /// Bytes one decoder step streams however few its rows: every decoder layer's weights
    /// (self-attention, cross-attention queries and outputs, MLP), its cross-attention K and
    /// V (f16, one window's positions) and the vocabulary projection (its screened plane, or
    /// the f16 rows with exact logits). The self-attention cache (~2·layers·d·4 bytes per
    /// token so far) and the few rows a screen recomputes are not counted.
    pub fn decoder_step_bytes(&self) -> usize {
        let h = &self.hparams;
        let per_layer = |b: &Block| {
            let a = &b.attn;
            let cross = b.cross.as_ref().map_or(0, |(_, c)| {
                c.query.stream_bytes()
                    + c.out.stream_bytes()
                    + 2 * 2 * h.n_audio_ctx * h.n_text_state
            });
            a.query.stream_bytes()
                + a.key.stream_bytes()
                + a.value.stream_bytes()
                + a.out.stream_bytes()
                + cross
                + b.mlp_0.stream_bytes()
                + b.mlp_2.stream_bytes()
        };
        self.decoder.blocks.iter().map(per_layer).sum::<usize>()
            + self.decoder.token_embedding.stream_bytes()
    }

    /// Mel frames in one window (2 · n_audio_ctx, 3000 for Whisper).
    pub fn n_frames(&self) -> usize {
        2 * self.hparams.n_audio_ctx
    }
}

#[cfg(test)]
pub(crate) mod testmodel;

// Weights are shared between streams; sessions move between threads.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    const fn movable<T: Send>() {}
    shareable::<Whisper>();
    movable::<Session>();
};

#[cfg(test)]
mod precision_names {
    use super::*;

    #[test]
    fn names_parse_and_a_level_the_cpu_lacks_is_named() {
        assert_eq!("auto".parse(), Ok(EncoderPrecision::Auto));
        assert_eq!("f32".parse(), Ok(EncoderPrecision::F32));
        let e = "int4".parse::<EncoderPrecision>().unwrap_err();
        assert_eq!(
            e,
            "int4: expected auto, int8, int16, bf16, bf16-fast or f32"
        );
        match "bf16".parse::<EncoderPrecision>() {
            Ok(p) => assert!(bf16_encoder_supported() && p == EncoderPrecision::Bf16),
            Err(e) => assert!(!bf16_encoder_supported() && e.contains("lacks AVX-512 BF16")),
        }
    }
}
