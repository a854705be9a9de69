//! sotto: Whisper speech-to-text.
//!
//! Brief overview: a [`Model`] is loaded once (weights, tokenizer) and is immutable,
//! `Send + Sync` and cheap to clone. Each concurrent stream opens its own [`Session`],
//! which owns its buffers, caches and threads and frees them when dropped.
//! [`Session::transcribe`] runs the whole pipeline: log-mel, encoder, decoder and the
//! long-form segmenter, reporting each finished segment to a callback.
//!
//! ```no_run
//! let model = sotto::Model::load(std::path::Path::new("models/tiny.en"))?;
//! let mut session = model.session(2)?;
//! let audio = sotto::audio::load_16k_mono("samples/jfk.wav")?;
//! let transcript = session.transcribe(&audio, &sotto::TranscribeOptions::default(), &mut |_| true)?;
//! println!("{}", transcript.text());
//! # Ok::<(), sotto::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod device;
mod engine;
mod vad;

pub use device::{select_device, Device, DeviceChoice};
pub use engine::Forward;
use engine::Weights;
pub use sotto_audio as audio;
#[cfg(feature = "cuda")]
pub use sotto_cuda as cuda;
pub use sotto_decode::{
    fallback_temperatures, language_code, language_name, regex_suppressed, special_token_texts,
    suppressed_tokens, DecodeError, LanguageDetection, LogitNeed, Segment, ShortlistSpec,
    Shortlists, Task, Tokenizer, TranscribeOptions, Transcript, Word, APPEND_PUNCTUATIONS,
    LANGUAGES, PREPEND_PUNCTUATIONS,
};
pub use sotto_formats as formats;
pub use sotto_hub as hub;
pub use sotto_isa::{amx_bf16, isa};
pub use sotto_model as model;
pub use sotto_model::{
    bf16_encoder_supported, int16_encoder_supported, int8_encoder_supported, measure_compute_peaks,
    measure_peaks, EncoderPrecision, EncoderWork, LoadOptions, Peaks,
};
pub use vad::{ggml_vad_from_onnx, Vad, VadOptions};

/// What this build runs on, in one line: its version, the CPU's SIMD path and whether the
/// GPU backend is built in, e.g. `sotto 0.1.0 | CPU avx2 | CUDA: no`.
pub fn system_info() -> String {
    format!(
        "sotto {} | CPU {} | CUDA: {}",
        env!("CARGO_PKG_VERSION"),
        isa().name(),
        if cfg!(feature = "cuda") {
            "built in"
        } else {
            "no"
        }
    )
}

/// Everything that can go wrong, by layer. Each message names the input and the problem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Format(#[from] sotto_formats::FormatError),
    #[error(transparent)]
    Audio(#[from] sotto_audio::AudioError),
    #[error("{path}: {source}")]
    Model {
        path: PathBuf,
        #[source]
        source: sotto_model::ModelError,
    },
    #[error(transparent)]
    Decode(#[from] sotto_decode::DecodeError),
    #[error(transparent)]
    Hub(#[from] sotto_hub::HubError),
    #[error("{0}")]
    Invalid(String),
    /// A device that cannot run the model (see [`select_device`]).
    #[error("{0}")]
    Device(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A loaded Whisper model: immutable weights plus tokenizer, shared by sessions.
#[derive(Clone)]
pub struct Model {
    inner: Arc<ModelInner>,
}

struct ModelInner {
    path: PathBuf,
    weights: Weights,
    tokenizer: Tokenizer,
    hparams: sotto_formats::Hparams,
    config: sotto_formats::ModelConfig,
    /// How the file stores the decoder's matrices (its first MLP weight's type).
    weight_type: Option<sotto_formats::DType>,
    /// Why `Device::Auto` runs on the CPU after all, when the GPU it chose failed to load.
    device_note: Option<String>,
}

impl Model {
    /// Loads a CTranslate2 folder or a whisper.cpp ggml `.bin` to run on the CPU.
    pub fn load(path: &Path) -> Result<Model> {
        Model::load_on(path, Device::Cpu)
    }

    /// Loads a model onto `device` (`Auto` is resolved by [`select_device`]): its weights
    /// are uploaded there once and every session runs there.
    pub fn load_on(path: &Path, device: Device) -> Result<Model> {
        Model::load_with(path, device, LoadOptions::default())
    }

    /// [`Model::load_on`] with load options (the CPU's bf16 encoder).
    pub fn load_with(path: &Path, device: Device, opts: LoadOptions) -> Result<Model> {
        Model::from_file(sotto_formats::load(path)?, device, opts)
    }

    /// A model of a published size (`sotto_formats::random::SIZES`: `tiny` … `large-v3`)
    /// with random weights, for timing sizes whose weights are not at hand: the cost of an
    /// encoder window or a decoder step does not depend on the values. Its transcripts
    /// mean nothing.
    pub fn random(size: &str, device: Device, opts: LoadOptions) -> Result<Model> {
        let h = sotto_formats::random::hparams(size).ok_or_else(|| {
            let sizes = sotto_formats::random::SIZES.join(", ");
            Error::Invalid(format!("no model size {size:?} (sizes: {sizes})"))
        })?;
        Model::from_file(sotto_formats::random::whisper(h, 1), device, opts)
    }

    /// A model from a file already read (`sotto_formats::load`), onto `device`.
    pub fn from_file(
        mut file: sotto_formats::WhisperFile,
        device: Device,
        opts: LoadOptions,
    ) -> Result<Model> {
        let auto = device == Device::Auto;
        let device = match device {
            Device::Auto => select_device(Device::Auto)?.device,
            d => d,
        };
        let path = file.path.clone();
        let path = path.as_path();
        let vocab = std::mem::take(&mut file.vocab);
        let merges = file.config.bpe_merges.take();
        let n_vocab = file.hparams.n_vocab;
        let weight_type = (file.tensors.get("decoder.blocks.0.mlp.0.weight")).map(|t| t.dtype);
        // The tokenizer's merge table (~40 ms) is built beside the weights.
        let (weights, tokenizer) = std::thread::scope(|s| {
            let tokenizer = s.spawn(move || -> Result<Tokenizer> {
                let invalid = |e: sotto_decode::DecodeError| {
                    Error::Invalid(format!("{}: vocabulary: {e}", path.display()))
                };
                match merges {
                    // faster-whisper encodes prompts with the folder's tokenizer.json
                    // merges, which differ from tiktoken's for the multilingual models.
                    Some(merges) => Tokenizer::with_merges(vocab, n_vocab, &merges.parse()?),
                    None => Tokenizer::new(vocab, n_vocab),
                }
                .map_err(invalid)
            });
            let cpu = || {
                sotto_model::Whisper::from_file_with(&file, opts)
                    .map(|w| Weights::Cpu(Arc::new(w)))
                    .map_err(|source| Error::Model {
                        path: path.to_path_buf(),
                        source,
                    })
            };
            let gpu = |n| match opts.quantize_decoder {
                // A GPU's decoder steps are not bound by the weights' bytes as the CPU's are.
                true => Err(Error::Device(
                    "quantizing the decoder at load is for the CPU; the GPU runs the file's \
                     weights"
                        .into(),
                )),
                false => cuda_weights(&file, n, opts.encoder),
            };
            let weights = weights_or_cpu(auto, device, gpu, cpu);
            let tokenizer = tokenizer.join().expect("tokenizer thread does not panic");
            (weights, tokenizer)
        });
        let ((weights, device_note), tokenizer) = (weights?, tokenizer?);
        Ok(Model {
            inner: Arc::new(ModelInner {
                path: path.to_path_buf(),
                weights,
                tokenizer,
                hparams: file.hparams,
                config: file.config,
                weight_type,
                device_note,
            }),
        })
    }

    /// Resolves a model name (`tiny.en`, `base`, fetched into the cache on first use)
    /// or a path, then loads it.
    pub fn load_named(
        name_or_path: &str,
        hub: &sotto_hub::Hub,
        progress: &mut dyn sotto_hub::Progress,
    ) -> Result<Model> {
        Model::load_named_on(name_or_path, hub, progress, Device::Cpu)
    }

    /// [`Model::load_named`] onto `device`.
    pub fn load_named_on(
        name_or_path: &str,
        hub: &sotto_hub::Hub,
        progress: &mut dyn sotto_hub::Progress,
        device: Device,
    ) -> Result<Model> {
        Model::load_named_with(name_or_path, hub, progress, device, LoadOptions::default())
    }

    /// [`Model::load_named`] onto `device` with load options.
    pub fn load_named_with(
        name_or_path: &str,
        hub: &sotto_hub::Hub,
        progress: &mut dyn sotto_hub::Progress,
        device: Device,
        opts: LoadOptions,
    ) -> Result<Model> {
        let path = hub.resolve(name_or_path, progress)?;
        Model::load_with(&path, device, opts)
    }

    /// Opens a new transcription state with its own buffers (on the model's device) and,
    /// on the CPU, `threads` worker threads.
    pub fn session(&self, threads: usize) -> Result<Session> {
        let path = &self.inner.path;
        let inner: Box<dyn Forward> = match &self.inner.weights {
            Weights::Cpu(w) => Box::new(
                sotto_model::Session::new(w.clone(), threads.max(1)).map_err(|source| {
                    Error::Model {
                        path: path.clone(),
                        source,
                    }
                })?,
            ),
            #[cfg(feature = "cuda")]
            Weights::Cuda(w) => Box::new(
                sotto_cuda::CudaSession::new(w.clone())
                    .map_err(|e| Error::Device(format!("{}: {e}", path.display())))?,
            ),
        };
        Ok(Session {
            model: self.clone(),
            inner,
        })
    }

    /// Transcribes `clips` (16 kHz mono) on the CPU while summing `x xᵀ` over the inputs
    /// of every linear layer: the statistics GPTQ quantization needs
    /// (`sotto_quant::GptqFactor`), keyed by weight tensor name. `on_clip` sees each
    /// clip's transcript as it is done.
    pub fn calibrate(
        &self,
        clips: &[Vec<f32>],
        threads: usize,
        opts: &TranscribeOptions,
        on_clip: &mut dyn FnMut(usize, &Transcript),
    ) -> Result<std::collections::BTreeMap<String, sotto_model::InputStats>> {
        let weights = match &self.inner.weights {
            Weights::Cpu(w) => w.clone(),
            #[cfg(feature = "cuda")]
            Weights::Cuda(_) => {
                return Err(Error::Device(
                    "calibration runs on the CPU: load the model with --device cpu".into(),
                ))
            }
        };
        let calibration = Arc::new(sotto_model::Calibration::new(&weights));
        let mut forward =
            sotto_model::Session::new(weights.clone(), threads.max(1)).map_err(|source| {
                Error::Model {
                    path: self.inner.path.clone(),
                    source,
                }
            })?;
        forward.set_probe(Some(calibration.clone()));
        let mut session = Session {
            model: self.clone(),
            inner: Box::new(forward),
        };
        for (i, clip) in clips.iter().enumerate() {
            let t = session.transcribe(clip, opts, &mut |_| true)?;
            on_clip(i, &t);
        }
        drop(session);
        Ok(calibration.stats(&weights))
    }

    /// The device the model's sessions run on.
    pub fn device(&self) -> Device {
        self.inner.weights.device()
    }

    /// Why a model loaded with [`Device::Auto`] runs on the CPU although a GPU was found
    /// (its upload failed), for the caller to show; None otherwise.
    pub fn device_note(&self) -> Option<&str> {
        self.inner.device_note.as_deref()
    }

    /// The encoder arithmetic a CPU model runs (`Auto` resolved); `None` on a GPU.
    pub fn encoder_precision(&self) -> Option<EncoderPrecision> {
        match &self.inner.weights {
            engine::Weights::Cpu(w) => Some(w.encoder_precision()),
            #[cfg(feature = "cuda")]
            engine::Weights::Cuda(_) => None,
        }
    }

    /// Bytes one decoder step streams on the CPU (see
    /// [`sotto_model::Whisper::decoder_step_bytes`]); `None` on a GPU.
    pub fn decoder_step_bytes(&self) -> Option<usize> {
        match &self.inner.weights {
            engine::Weights::Cpu(w) => Some(w.decoder_step_bytes()),
            #[cfg(feature = "cuda")]
            engine::Weights::Cuda(_) => None,
        }
    }

    /// The products of one encoder window on the CPU, by precision; `None` on a GPU.
    pub fn encoder_work(&self) -> Option<EncoderWork> {
        match &self.inner.weights {
            engine::Weights::Cpu(w) => Some(w.encoder_work()),
            #[cfg(feature = "cuda")]
            engine::Weights::Cuda(_) => None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    pub fn hparams(&self) -> &sotto_formats::Hparams {
        &self.inner.hparams
    }

    pub fn config(&self) -> &sotto_formats::ModelConfig {
        &self.inner.config
    }

    /// How the model file stores the decoder's matrices (f16, q8_0, ...), as read; None
    /// for a file without the usual tensor names.
    pub fn weight_type(&self) -> Option<sotto_formats::DType> {
        self.inner.weight_type
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// Whether the model knows languages other than English.
    pub fn is_multilingual(&self) -> bool {
        self.inner.tokenizer.is_multilingual()
    }

    /// The decoder's (layer, head) cross-attention pairs that follow word timing: from the
    /// model's `config.json` when it lists them, else openai-whisper's set for the model's
    /// size, else every head of the second half of the decoder layers.
    pub fn alignment_heads(&self) -> Vec<(usize, usize)> {
        if let Some(heads) = &self.inner.config.alignment_heads {
            return heads.clone();
        }
        let hp = &self.inner.hparams;
        let hint = self
            .inner
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        sotto_decode::default_alignment_heads(
            hp.n_text_layer,
            hp.n_text_head,
            hp.n_mels,
            self.is_multilingual(),
            &hint,
        )
    }
}

/// Where the time of one transcription went.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Voice activity detection ([`Session::transcribe_speech_timed`] only).
    pub vad: Duration,
    pub mel: Duration,
    pub encode: Duration,
    /// Every decoder call: the steps below, prompt passes and word alignment.
    pub decode: Duration,
    pub windows: usize,
    pub decode_calls: usize,
    /// The decoder calls that add one token to each sequence (greedy or beam steps): their
    /// count and time (with the beams' cache reorders), part of `decode_calls` and `decode`.
    pub steps: usize,
    pub step_time: Duration,
    pub total: Duration,
}

/// The weights on `device` (`gpu` uploads them to a GPU ordinal, `cpu` builds them for the
/// CPU). A GPU that `auto` chose but that cannot take the model (no NVRTC, too little
/// memory) leaves the CPU, which always can, and a note saying why; one asked for by name
/// is an error.
fn weights_or_cpu<W>(
    auto: bool,
    device: Device,
    gpu: impl FnOnce(usize) -> Result<W>,
    cpu: impl FnOnce() -> Result<W>,
) -> Result<(W, Option<String>)> {
    match device {
        Device::Cuda(ordinal) => match gpu(ordinal) {
            Err(Error::Device(why)) if auto => {
                let note = format!("the GPU could not take the model ({why}); using the CPU");
                Ok((cpu()?, Some(note)))
            }
            r => r.map(|w| (w, None)),
        },
        _ => cpu().map(|w| (w, None)),
    }
}

/// Uploads a model file's weights to GPU `ordinal`: in f16 (tensor cores), or, where the
/// CPU's f32 encoder was asked for, in f32 with the decoder's quantized products computed
/// as the CPU computes them (the GPU's closest to the CPU's transcripts).
#[cfg(feature = "cuda")]
fn cuda_weights(
    file: &sotto_formats::WhisperFile,
    ordinal: usize,
    encoder: EncoderPrecision,
) -> Result<Weights> {
    let precision = match encoder {
        EncoderPrecision::F32 => sotto_cuda::Precision::F32,
        _ => sotto_cuda::Precision::F16,
    };
    sotto_cuda::CudaWhisper::new(file, ordinal, precision)
        .map(|w| Weights::Cuda(Arc::new(w)))
        .map_err(|e| Error::Device(format!("{}: {e}", file.path.display())))
}

#[cfg(not(feature = "cuda"))]
fn cuda_weights(_: &sotto_formats::WhisperFile, _: usize, _: EncoderPrecision) -> Result<Weights> {
    Err(Error::Device(
        "this sotto was built without CUDA support (rebuild with --features cuda)".into(),
    ))
}

/// One transcription stream: owns its KV caches, buffers and threads.
pub struct Session {
    model: Model,
    inner: Box<dyn Forward>,
}

impl Session {
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The device's forward pass, for benchmarks and tools that drive the encoder and
    /// decoder directly.
    pub fn forward(&mut self) -> &mut dyn Forward {
        self.inner.as_mut()
    }

    /// Transcribes 16 kHz mono samples. `on_segment` sees each segment as it is
    /// finished; returning `false` stops early and keeps what was transcribed so far.
    pub fn transcribe(
        &mut self,
        samples: &[f32],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<Transcript> {
        self.transcribe_timed(samples, opts, on_segment)
            .map(|(t, _)| t)
    }

    /// As [`Session::transcribe`], also reporting where the time went.
    pub fn transcribe_timed(
        &mut self,
        samples: &[f32],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        let start = Instant::now();
        if samples.is_empty() {
            return Err(Error::Invalid("the audio contains no samples".into()));
        }
        let opts = self.prepare(opts)?;
        let (transcript, mut timings) = self.on_mel(samples, |inf, tok, mel| {
            sotto_decode::transcribe(inf, tok, mel, &opts, on_segment)
        })?;
        timings.total = start.elapsed();
        Ok((transcript, timings))
    }

    /// `f` on the log-mel of `samples` (faster-whisper's `FeatureExtractor(audio)`, with
    /// its 160 samples of padding), this session's inference and the tokenizer; the
    /// timings of the mel and of `f`'s passes.
    fn on_mel<R>(
        &mut self,
        samples: &[f32],
        f: impl FnOnce(
            &mut dyn sotto_decode::Inference,
            &sotto_decode::tokenizer::Tokenizer,
            &sotto_decode::MelView,
        ) -> std::result::Result<R, sotto_decode::DecodeError>,
    ) -> Result<(R, Timings)> {
        let hp = *self.model.hparams();
        let mut timings = Timings::default();
        let t = Instant::now();
        let mel = sotto_audio::log_mel_spectrogram(samples, hp.n_mels, sotto_audio::HOP_LENGTH);
        timings.mel = t.elapsed();
        let view = sotto_decode::MelView {
            data: &mel.data,
            n_mels: mel.n_mels,
            n_frames: mel.n_frames,
        };
        let mut inference = TimedInference {
            n_vocab: hp.n_vocab,
            session: self.inner.as_mut(),
            timings: &mut timings,
        };
        let r = f(&mut inference, &self.model.inner.tokenizer, &view)?;
        Ok((r, timings))
    }
}

impl Session {
    /// The language [`Session::transcribe`] with `opts` would decode `samples` in, its
    /// probability and every language's, without transcribing: `opts.language` when given
    /// (1.0, no list), else detected from the same windows of the same mel (faster-whisper's
    /// `transcribe()` detects from the first clip's start, over `chunk_length` windows, the
    /// mel scaled over the whole audio: [`Session::detect_language_with`] reads only the
    /// first windows'). English-only models give "en".
    pub fn transcribe_language(
        &mut self,
        samples: &[f32],
        opts: &TranscribeOptions,
    ) -> Result<LanguageDetection> {
        if samples.is_empty() {
            return Err(Error::Invalid("the audio contains no samples".into()));
        }
        let opts = self.prepare(opts)?;
        let (language, _) = self.on_mel(samples, |inf, tok, mel| {
            sotto_decode::transcribe_language(inf, tok, mel, &opts)
        })?;
        Ok(language)
    }

    /// `opts` as this model runs them: English-only models take "en" (or none) only,
    /// "auto" detects, and word timing gets the model's alignment heads.
    fn prepare(&self, opts: &TranscribeOptions) -> Result<TranscribeOptions> {
        let mut opts = opts.clone();
        if !self.model.is_multilingual() {
            match opts.language.as_deref() {
                None | Some("en") | Some("auto") => opts.language = Some("en".into()),
                Some(other) => {
                    return Err(Error::Invalid(format!(
                        "{} is an English-only model; it cannot transcribe language '{other}'",
                        self.model.path().display()
                    )))
                }
            }
        } else if opts.language.as_deref() == Some("auto") {
            opts.language = None;
        }
        if opts.needs_word_timing() && !self.inner.can_align() {
            return Err(Error::Device(format!(
                "word timing (word timestamps, the hallucination threshold, segment limits) \
                 does not run on {} yet; use --device cpu",
                self.model.device()
            )));
        }
        if opts.needs_word_timing() && opts.alignment_heads.is_none() {
            opts.alignment_heads = Some(self.model.alignment_heads());
        }
        Ok(opts)
    }

    /// Detects the spoken language of the first 30 s of 16 kHz mono samples, as
    /// faster-whisper does: every language's probability, most likely first.
    pub fn detect_language(&mut self, samples: &[f32]) -> Result<LanguageDetection> {
        self.detect_language_with(samples, 1, 0.5)
    }

    /// [`Session::detect_language`] with faster-whisper's `language_detection_segments` and
    /// `language_detection_threshold`: up to `segments` windows of 30 s, until one's most
    /// likely language is above `threshold`; when none is, the language most often on top,
    /// with its best probability (and the last window's list).
    pub fn detect_language_with(
        &mut self,
        samples: &[f32],
        segments: usize,
        threshold: f64,
    ) -> Result<LanguageDetection> {
        if samples.is_empty() {
            return Err(Error::Invalid("the audio contains no samples".into()));
        }
        if !self.model.is_multilingual() {
            return Err(Error::Invalid(format!(
                "{} is an English-only model; it cannot detect languages",
                self.model.path().display()
            )));
        }
        // As faster-whisper's `detect_language(audio)`: the log-mel of only the audio read.
        let read = segments.saturating_mul(30 * sotto_audio::SAMPLE_RATE as usize);
        let samples = &samples[..samples.len().min(read)];
        let (detection, _) = self.on_mel(samples, |inf, tok, mel| {
            sotto_decode::detect_language(inf, tok, mel, segments, threshold)
        })?;
        Ok(detection)
    }
}

/// Adapts the model's session to the decoder's [`sotto_decode::Inference`] boundary,
/// timing each side.
struct TimedInference<'a> {
    n_vocab: usize,
    session: &'a mut dyn Forward,
    timings: &'a mut Timings,
}

impl TimedInference<'_> {
    /// Books one decoder call; `step`: it added one token to each sequence.
    fn count(&mut self, took: Duration, step: bool) {
        self.timings.decode += took;
        self.timings.decode_calls += 1;
        if step {
            self.timings.steps += 1;
            self.timings.step_time += took;
        }
    }
}

impl sotto_decode::Inference for TimedInference<'_> {
    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn encode(&mut self, mel: &[f32]) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.encode(mel)?;
        self.timings.encode += t.elapsed();
        self.timings.windows += 1;
        Ok(())
    }

    fn max_windows(&self) -> usize {
        self.session.max_windows()
    }

    fn encode_windows(&mut self, mels: &[&[f32]]) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.encode_windows(mels)?;
        self.timings.encode += t.elapsed();
        self.timings.windows += mels.len();
        Ok(())
    }

    fn select_window(&mut self, w: usize) -> Result<(), sotto_decode::BoxError> {
        self.session.select_window(w)
    }

    fn set_audio_ctx(&mut self, ctx: Option<usize>) -> Result<(), sotto_decode::BoxError> {
        self.session.set_audio_ctx(ctx)
    }

    fn reset(&mut self) {
        self.session.reset_text();
    }

    fn set_logit_need(&mut self, need: &sotto_decode::LogitNeed) {
        self.session.set_logit_need(need);
    }

    fn decode(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.decode(tokens, rows, logits)?;
        self.count(t.elapsed(), tokens.len() == 1);
        Ok(())
    }

    fn decode_batch(
        &mut self,
        tokens: &[u32],
        batch: usize,
        logits: &mut [f32],
    ) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.decode_batch(tokens, batch, logits)?;
        self.count(t.elapsed(), tokens.len() == batch);
        Ok(())
    }

    fn decode_shortlists(
        &mut self,
        tokens: &[u32],
        rows: &[usize],
        out: &mut sotto_decode::Shortlists,
    ) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.decode_shortlists(tokens, rows, out)?;
        self.count(t.elapsed(), tokens.len() == 1);
        Ok(())
    }

    fn decode_batch_shortlists(
        &mut self,
        tokens: &[u32],
        batch: usize,
        out: &mut sotto_decode::Shortlists,
    ) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.decode_batch_shortlists(tokens, batch, out)?;
        self.count(t.elapsed(), tokens.len() == batch);
        Ok(())
    }

    fn reorder(&mut self, src: &[usize]) -> Result<(), sotto_decode::BoxError> {
        let t = Instant::now();
        self.session.reorder(src)?;
        // A beam step's bookkeeping: step time, not a call of its own.
        let took = t.elapsed();
        self.timings.decode += took;
        self.timings.step_time += took;
        Ok(())
    }

    fn align(
        &mut self,
        tokens: &[u32],
        heads: &[(usize, usize)],
        rows: &[usize],
        logits: &mut [f32],
    ) -> Result<Vec<f32>, sotto_decode::BoxError> {
        let t = Instant::now();
        let scores = self.session.align(tokens, heads, rows, logits)?;
        self.count(t.elapsed(), false);
        Ok(scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_leaves_a_gpu_that_cannot_take_the_model_for_the_cpu() {
        let no_nvrtc = |_: usize| -> Result<&str> { Err(Error::Device("no libnvrtc".into())) };
        let cpu = || Ok("cpu");
        let (w, note) = weights_or_cpu(true, Device::Cuda(0), no_nvrtc, cpu).unwrap();
        assert_eq!(w, "cpu");
        assert_eq!(
            note.as_deref(),
            Some("the GPU could not take the model (no libnvrtc); using the CPU")
        );
        // Asked for by name, the GPU's error is the answer.
        let e = weights_or_cpu(false, Device::Cuda(0), no_nvrtc, cpu).unwrap_err();
        assert_eq!(
            e.to_string(),
            Error::Device("no libnvrtc".into()).to_string()
        );
        // A GPU that takes it, and the CPU, carry no note; a bad file is no device problem.
        let gpu = |n: usize| Ok(if n == 1 { "gpu 1" } else { "gpu ?" });
        assert_eq!(
            weights_or_cpu(true, Device::Cuda(1), gpu, cpu).unwrap(),
            ("gpu 1", None)
        );
        assert_eq!(
            weights_or_cpu(true, Device::Cpu, gpu, cpu).unwrap(),
            ("cpu", None)
        );
        let bad = |_: usize| -> Result<&str> { Err(Error::Invalid("truncated".into())) };
        assert!(weights_or_cpu(true, Device::Cuda(0), bad, cpu).is_err());
    }

    /// `Model::random` builds its tokenizer from the placeholder vocabulary: every size's
    /// vocabulary size must leave a valid number of language tokens.
    #[test]
    fn every_random_size_has_a_tokenizer() {
        for size in sotto_formats::random::SIZES {
            let h = sotto_formats::random::hparams(size).unwrap();
            let vocab = sotto_formats::random::vocabulary(h.n_vocab);
            let tok = Tokenizer::new(vocab, h.n_vocab).unwrap_or_else(|e| panic!("{size}: {e}"));
            assert_eq!(tok.is_multilingual(), !size.ends_with(".en"), "{size}");
        }
    }
}
