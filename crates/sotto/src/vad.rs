//! Voice activity detection before transcription, as faster-whisper's `vad_filter`: only
//! the stretches of speech are transcribed, joined, and the transcript's times are mapped
//! back to the original audio.

use std::path::Path;
use std::sync::Arc;

pub use sotto_audio::vad::VadOptions;
use sotto_audio::vad::{collect_speech, group_speech, speech_timestamps, SpeechMap};
use sotto_model::silero::SileroVad;

use crate::{
    DecodeError, Error, LanguageDetection, Result, Segment, Session, Timings, TranscribeOptions,
    Transcript, LANGUAGES,
};

/// A loaded Silero VAD model and the options it is applied with; cheap to clone and
/// shareable between sessions.
#[derive(Clone)]
pub struct Vad {
    net: Arc<SileroVad>,
    pub options: VadOptions,
}

impl Vad {
    /// Loads the model: an ONNX file (faster-whisper's `silero_vad_v6.onnx`) or a
    /// whisper.cpp ggml VAD file (`ggml-silero-v5.1.2.bin`, `ggml-silero-v6.2.0.bin`), told
    /// apart by the ggml magic.
    pub fn load(path: &Path) -> Result<Vad> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
        let net = if sotto_formats::ggml_vad::is_ggml(&bytes) {
            let file = sotto_formats::ggml_vad::read(&bytes, path)?;
            SileroVad::from_torch_tensors(|name| file.tensors.get(name).cloned())
        } else {
            let tensors = sotto_formats::onnx::read_initializers(&bytes, path)?;
            SileroVad::from_tensors(|name| {
                let t = tensors.get(name)?;
                let dims = t
                    .dims
                    .iter()
                    .map(|&d| usize::try_from(d).ok())
                    .collect::<Option<_>>()?;
                Some((dims, t.floats()?))
            })
        }
        .map_err(|e| Error::Invalid(format!("{}: not a Silero VAD: {e}", path.display())))?;
        Ok(Vad {
            net: Arc::new(net),
            options: VadOptions::default(),
        })
    }

    /// Loads the model from the cache, fetching it first if needed (see
    /// [`sotto_hub::Hub::fetch_vad`]).
    pub fn load_cached(
        hub: &sotto_hub::Hub,
        progress: &mut dyn sotto_hub::Progress,
    ) -> Result<Vad> {
        Vad::load(&hub.fetch_vad(progress)?)
    }

    /// Speech probability of each 32 ms window of 16 kHz samples, computed on the calling
    /// rayon pool's threads (every core outside one).
    pub fn probabilities(&self, samples: &[f32]) -> Result<Vec<f32>> {
        self.net
            .probabilities(samples)
            .map_err(|e| Error::Invalid(format!("voice activity detection failed: {e}")))
    }

    /// The stretches of speech, `[start, end)` in samples.
    pub fn speech(&self, samples: &[f32]) -> Result<Vec<(usize, usize)>> {
        let probs = self.probabilities(samples)?;
        Ok(speech_timestamps(&probs, samples.len(), &self.options))
    }
}

/// whisper.cpp's ggml VAD file (what `whisper-cli --vad-model` loads) of a Silero VAD ONNX
/// file's weights (faster-whisper's `silero_vad_v6.onnx`, the weights of silero-vad 6.0 and
/// 6.1): the tensors renamed to the PyTorch state dict's names, the LSTM's gates put back
/// in PyTorch's order and its two biases apart, laid out as whisper.cpp's converter lays
/// them out (f16 convolutions and STFT basis).
pub fn ggml_vad_from_onnx(onnx: &[u8], path: &Path) -> Result<Vec<u8>> {
    let tensors = sotto_formats::onnx::read_initializers(onnx, path)?;
    let invalid =
        |what: &str| Error::Invalid(format!("{}: not a Silero VAD: {what}", path.display()));
    let get = |name: &str| -> Result<(Vec<usize>, Vec<f32>)> {
        let t = tensors
            .get(name)
            .ok_or_else(|| invalid(&format!("no tensor {name}")))?;
        let dims = t.dims.iter().map(|&d| d.max(0) as usize).collect();
        let values = t
            .floats()
            .ok_or_else(|| invalid(&format!("tensor {name} is not float")))?;
        Ok((dims, values))
    };
    // ONNX's gate blocks i, o, f, c, in PyTorch's order i, f, g, o.
    let torch_order = |v: &[f32]| -> Vec<f32> {
        let block = v.len() / 4;
        [0, 2, 3, 1]
            .iter()
            .flat_map(|&g| v[g * block..(g + 1) * block].to_vec())
            .collect()
    };
    let mut out: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for i in 0..4 {
        for what in ["weight", "bias"] {
            let (dims, v) = get(&format!("encoder.conv_layers.{i}.{what}"))?;
            out.push((format!("_model.encoder.{i}.reparam_conv.{what}"), dims, v));
        }
    }
    for (onnx_name, torch_name) in [
        ("onnx::LSTM_209", "weight_ih"),
        ("onnx::LSTM_210", "weight_hh"),
    ] {
        let (dims, v) = get(onnx_name)?;
        if dims.len() != 3 || v.len() % 4 != 0 {
            return Err(invalid(&format!("{onnx_name} has shape {dims:?}")));
        }
        let name = format!("_model.decoder.rnn.{torch_name}");
        out.push((name, dims[1..].to_vec(), torch_order(&v)));
    }
    let (dims, b) = get("onnx::LSTM_211")?;
    if b.len() % 8 != 0 {
        return Err(invalid(&format!("onnx::LSTM_211 has shape {dims:?}")));
    }
    let (b_ih, b_hh) = b.split_at(b.len() / 2);
    for (name, half) in [("bias_ih", b_ih), ("bias_hh", b_hh)] {
        let v = torch_order(half);
        out.push((format!("_model.decoder.rnn.{name}"), vec![v.len()], v));
    }
    for what in ["weight", "bias"] {
        let (dims, v) = get(&format!("decoder.conv1d.{what}"))?;
        out.push((format!("_model.decoder.decoder.2.{what}"), dims, v));
    }
    let (dims, v) = get("encoder.feature_extractor.forward_basis_buffer")?;
    out.push(("_model.stft.forward_basis_buffer".into(), dims, v));
    // What whisper.cpp would load must be what sotto runs: the network builds from it.
    let refs: Vec<(&str, &[usize], &[f32])> = out
        .iter()
        .map(|(n, d, v)| (n.as_str(), d.as_slice(), v.as_slice()))
        .collect();
    let bytes = sotto_formats::ggml_vad::write((6, 0, 0), &refs);
    let back = sotto_formats::ggml_vad::read(&bytes, path)?;
    SileroVad::from_torch_tensors(|name| back.tensors.get(name).cloned())
        .map_err(|e| invalid(&e))?;
    Ok(bytes)
}

impl Session {
    /// As [`Session::transcribe`], on the stretches of speech `vad` finds only (joined as
    /// faster-whisper's `collect_chunks` does); segment and word times, also those
    /// `on_segment` sees, are the original audio's. No speech gives no segments.
    pub fn transcribe_speech(
        &mut self,
        vad: &Vad,
        samples: &[f32],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<Transcript> {
        self.transcribe_speech_timed(vad, samples, opts, on_segment)
            .map(|(t, _)| t)
    }

    /// As [`Session::transcribe_speech`], also reporting where the time went (the VAD's
    /// share in `Timings::vad`).
    pub fn transcribe_speech_timed(
        &mut self,
        vad: &Vad,
        samples: &[f32],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        check(samples, opts)?;
        let start = std::time::Instant::now();
        let chunks = vad.speech(samples)?;
        let vad_time = start.elapsed();
        let (t, mut timings) = self.transcribe_chunks_timed(samples, &chunks, opts, on_segment)?;
        timings.vad = vad_time;
        timings.total = start.elapsed();
        Ok((t, timings))
    }

    /// As [`Session::transcribe_speech_timed`], on stretches of speech already found
    /// (`[start, end)` in samples, in order, as [`Vad::speech`] gives them): for callers
    /// that run the VAD apart, e.g. on threads of their own.
    pub fn transcribe_chunks_timed(
        &mut self,
        samples: &[f32],
        chunks: &[(usize, usize)],
        opts: &TranscribeOptions,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        check(samples, opts)?;
        check_stretches(samples, chunks)?;
        let start = std::time::Instant::now();
        let duration = (samples.len() / sotto_audio::HOP_LENGTH) as f64 * 0.01;
        if chunks.is_empty() {
            let timings = Timings {
                total: start.elapsed(),
                ..Timings::default()
            };
            return Ok((self.no_speech(opts, duration), timings));
        }
        let map = SpeechMap::new(chunks);
        let speech = collect_speech(samples, chunks);
        let mut mapped = |s: &Segment| on_segment(&restore(&map, s.clone()));
        let (mut t, mut timings) = self.transcribe_timed(&speech, opts, &mut mapped)?;
        t.segments = t.segments.into_iter().map(|s| restore(&map, s)).collect();
        t.duration = duration;
        timings.total = start.elapsed();
        Ok((t, timings))
    }
}

impl Session {
    /// The transcript of audio without speech: no segments, the language as asked.
    fn no_speech(&self, opts: &TranscribeOptions, duration: f64) -> Transcript {
        let language = opts
            .language
            .clone()
            .filter(|l| l != "auto")
            .unwrap_or_else(|| {
                if self.model().is_multilingual() {
                    String::new()
                } else {
                    "en".into()
                }
            });
        Transcript {
            language,
            language_probability: 0.0,
            duration,
            segments: Vec::new(),
        }
    }

    /// faster-whisper's batched mode (`BatchedInferencePipeline.transcribe`): `vad` finds
    /// the speech, with stretches of at most 30 s, or `chunk_length` (its
    /// `max_speech_duration_s` capped there; [`VadOptions::batched`] are that mode's
    /// defaults); consecutive stretches are joined into chunks of at most that, and up to
    /// `batch_size` chunks are decoded
    /// together, one window each, sharing every decoder pass (see
    /// [`sotto_decode::transcribe_batched`] for what differs from [`Session::transcribe`]:
    /// no text carried between windows; the first temperature for all, the others only for
    /// a window that fails the thresholds). Times are the original
    /// audio's. Devices that hold one window at a time decode the chunks one by one.
    pub fn transcribe_batched(
        &mut self,
        vad: &Vad,
        samples: &[f32],
        opts: &TranscribeOptions,
        batch_size: usize,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        check(samples, opts)?;
        let start = std::time::Instant::now();
        let mut vad = vad.clone();
        let chunk = opts.chunk_seconds() as f64;
        vad.options.max_speech_duration_s = vad.options.max_speech_duration_s.min(chunk);
        let stretches = vad.speech(samples)?;
        let vad_time = start.elapsed();
        let (t, mut timings) =
            self.transcribe_batched_chunks(samples, &stretches, opts, batch_size, on_segment)?;
        timings.vad = vad_time;
        timings.total = start.elapsed();
        Ok((t, timings))
    }

    /// As [`Session::transcribe_batched`], on stretches of speech already found (`[start,
    /// end)` in samples, in order, each at most 30 s, as [`Vad::speech`] gives them with
    /// `max_speech_duration_s` 30): for callers that run the VAD apart.
    pub fn transcribe_batched_chunks(
        &mut self,
        samples: &[f32],
        stretches: &[(usize, usize)],
        opts: &TranscribeOptions,
        batch_size: usize,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        check(samples, opts)?;
        let opts = self.prepare(opts)?;
        let start = std::time::Instant::now();
        let duration = (samples.len() / sotto_audio::HOP_LENGTH) as f64 * 0.01;
        let pieces = speech_pieces(samples, stretches, &opts)?;
        if stretches.is_empty() {
            let timings = Timings {
                total: start.elapsed(),
                ..Timings::default()
            };
            return Ok((self.no_speech(&opts, duration), timings));
        }
        let map = SpeechMap::new(stretches);
        let mut mapped = |s: &Segment| on_segment(&restore(&map, s.clone()));
        let (mut t, mut timings) = self.decode_chunks(pieces, &opts, batch_size, &mut mapped)?;
        t.segments = t.segments.into_iter().map(|s| restore(&map, s)).collect();
        t.duration = duration;
        timings.total = start.elapsed();
        Ok((t, timings))
    }

    /// faster-whisper's batched mode on clips instead of the VAD's speech (its
    /// `clip_timestamps`): each of `opts.clip_timestamps`' stretches (`[start, end, ...]`
    /// seconds, an odd count running the last to the end) is a chunk of its own, cut into
    /// equal pieces of at most 30 s (or `chunk_length`) where longer (faster-whisper keeps
    /// only the first 30 s),
    /// up to `batch_size` decoded together; times are the audio's.
    pub fn transcribe_batched_clips(
        &mut self,
        samples: &[f32],
        opts: &TranscribeOptions,
        batch_size: usize,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        let start = std::time::Instant::now();
        let pieces = clip_pieces(samples, opts)?;
        let opts = TranscribeOptions {
            clip_timestamps: Vec::new(),
            ..self.prepare(opts)?
        };
        let (mut t, mut timings) = self.decode_chunks(pieces, &opts, batch_size, on_segment)?;
        t.duration = (samples.len() / sotto_audio::HOP_LENGTH) as f64 * 0.01;
        timings.total = start.elapsed();
        Ok((t, timings))
    }

    /// Decodes `pieces` (audio, and the sample its times count from) as the windows of a
    /// batched transcription; `opts` prepared, without clips.
    fn decode_chunks(
        &mut self,
        pieces: impl Iterator<Item = (Vec<f32>, usize)>,
        opts: &TranscribeOptions,
        batch_size: usize,
        on_segment: &mut dyn FnMut(&Segment) -> bool,
    ) -> Result<(Transcript, Timings)> {
        self.with_chunks(pieces, |inf, tok, chunks| {
            sotto_decode::transcribe_batched(inf, tok, chunks, opts, batch_size, on_segment)
        })
    }

    /// `pieces` (audio, and the sample its times count from) as the chunks of a batched
    /// transcription, handed to `f` with this session's inference and the tokenizer.
    fn with_chunks<R>(
        &mut self,
        pieces: impl Iterator<Item = (Vec<f32>, usize)>,
        f: impl FnOnce(
            &mut dyn sotto_decode::Inference,
            &sotto_decode::tokenizer::Tokenizer,
            &[sotto_decode::Chunk],
        ) -> std::result::Result<R, sotto_decode::DecodeError>,
    ) -> Result<(R, Timings)> {
        let mut timings = Timings::default();
        let t = std::time::Instant::now();
        let rate = f64::from(sotto_audio::SAMPLE_RATE);
        let n_mels = self.model().hparams().n_mels;
        let mels: Vec<(sotto_audio::Mel, f64, f64)> = pieces
            .map(|(audio, offset)| {
                let mel = sotto_audio::log_mel_spectrogram(&audio, n_mels, sotto_audio::HOP_LENGTH);
                (mel, offset as f64 / rate, audio.len() as f64 / rate)
            })
            .collect();
        let chunks: Vec<sotto_decode::Chunk> = (mels.iter())
            .map(|(mel, offset, duration)| sotto_decode::Chunk {
                mel: sotto_decode::MelView {
                    data: &mel.data,
                    n_mels: mel.n_mels,
                    n_frames: mel.n_frames,
                },
                offset: *offset,
                duration: *duration,
            })
            .collect();
        timings.mel = t.elapsed();
        let n_vocab = self.model().hparams().n_vocab;
        let mut inference = crate::TimedInference {
            n_vocab,
            session: self.inner.as_mut(),
            timings: &mut timings,
        };
        let r = f(&mut inference, &self.model.inner.tokenizer, &chunks)?;
        Ok((r, timings))
    }

    /// The language the transcription of `samples` with `opts` decodes in, its probability
    /// and (when detected) every language's, without transcribing: `speech` the stretches
    /// a VAD found (`[start, end)` in samples; None: all the audio, or `opts.clip_timestamps`), `batch_size` 0
    /// one window at a time ([`Session::transcribe`], or [`Session::transcribe_chunks_timed`]
    /// on the speech), else faster-whisper's batched mode
    /// ([`Session::transcribe_batched_chunks`], or [`Session::transcribe_batched_clips`]
    /// with clips). What faster-whisper's `transcribe()` returns before its segments; no
    /// speech gives the [`Transcript`]'s language with probability 0.
    pub fn transcription_language(
        &mut self,
        samples: &[f32],
        speech: Option<&[(usize, usize)]>,
        opts: &TranscribeOptions,
        batch_size: usize,
    ) -> Result<LanguageDetection> {
        if samples.is_empty() {
            return Err(Error::Invalid("the audio contains no samples".into()));
        }
        let opts = self.prepare(opts)?;
        let pieces: Box<dyn Iterator<Item = (Vec<f32>, usize)>> = match (speech, batch_size) {
            (None, 0) => return self.transcribe_language(samples, &opts),
            (Some(stretches), 0) => {
                check(samples, &opts)?;
                check_stretches(samples, stretches)?;
                if stretches.is_empty() {
                    return self.no_speech_language(&opts);
                }
                let speech = collect_speech(samples, stretches);
                return self.transcribe_language(&speech, &opts);
            }
            (Some(stretches), _) => {
                check(samples, &opts)?;
                if stretches.is_empty() {
                    check_stretches(samples, stretches)?;
                    return self.no_speech_language(&opts);
                }
                Box::new(speech_pieces(samples, stretches, &opts)?)
            }
            (None, _) if opts.clip_timestamps.is_empty() => {
                return Err(Error::Invalid(
                    "batched transcription needs the speech (a VAD's stretches) or clip \
                     timestamps: its chunks"
                        .into(),
                ))
            }
            (None, _) => Box::new(clip_pieces(samples, &opts)?),
        };
        let opts = TranscribeOptions {
            clip_timestamps: Vec::new(),
            ..opts
        };
        let (language, _) = self.with_chunks(pieces, |inf, tok, chunks| {
            sotto_decode::batched_transcribe_language(inf, tok, chunks, &opts)
        })?;
        Ok(language)
    }

    /// [`Session::transcription_language`] of audio without speech: the language of
    /// [`Session::no_speech`]'s transcript (given, or "" on multilingual models) with
    /// probability 0.
    fn no_speech_language(&self, opts: &TranscribeOptions) -> Result<LanguageDetection> {
        let language = self.no_speech(opts, 0.0).language;
        let known = if language.is_empty() {
            ""
        } else {
            LANGUAGES
                .iter()
                .copied()
                .find(|c| *c == language)
                .ok_or_else(|| {
                    Error::Decode(DecodeError::UnknownLanguage {
                        code: language,
                        known: LANGUAGES.len(),
                    })
                })?
        };
        Ok(LanguageDetection {
            probability: 0.0,
            ..LanguageDetection::given(known)
        })
    }
}

/// The chunks of a batched transcription of the speech `stretches` (in order, each at most
/// 30 s): consecutive stretches joined up to `opts`' chunk length, each chunk's audio with
/// its start in the joined speech.
fn speech_pieces<'a>(
    samples: &'a [f32],
    stretches: &'a [(usize, usize)],
    opts: &TranscribeOptions,
) -> Result<impl Iterator<Item = (Vec<f32>, usize)> + 'a> {
    check_stretches(samples, stretches)?;
    let max = 30 * sotto_audio::SAMPLE_RATE as usize;
    if stretches.iter().any(|&(s, e)| e - s > max) {
        return Err(Error::Invalid(
            "batched transcription takes stretches of speech of at most 30 s (the VAD's \
             max_speech_duration_s 30)"
                .into(),
        ));
    }
    let chunk = opts.chunk_seconds() * sotto_audio::SAMPLE_RATE as usize;
    let mut joined = 0usize;
    // Lazily: each chunk's audio lives until its log-mel is made.
    Ok(group_speech(stretches, chunk).into_iter().map(move |g| {
        let audio = collect_speech(samples, &stretches[g]);
        let offset = joined;
        joined += audio.len();
        (audio, offset)
    }))
}

/// The chunks of a batched transcription of `opts.clip_timestamps` (`[start, end, ...]`
/// seconds, an odd count running the last to the end): each clip, cut into equal pieces
/// of at most the chunk length where longer, with the sample it starts at.
fn clip_pieces<'a>(
    samples: &'a [f32],
    opts: &TranscribeOptions,
) -> Result<impl Iterator<Item = (Vec<f32>, usize)> + 'a> {
    if samples.is_empty() {
        return Err(Error::Invalid("the audio contains no samples".into()));
    }
    let rate = f64::from(sotto_audio::SAMPLE_RATE);
    let times = &opts.clip_timestamps;
    if times.is_empty() || times.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(Error::Invalid(format!(
            "clip timestamps {times:?}: give start and end times in seconds >= 0"
        )));
    }
    let at = |t: f64| ((t * rate).round() as usize).min(samples.len());
    let mut clips: Vec<(usize, usize)> = (times.chunks(2))
        .map(|c| (at(c[0]), c.get(1).map_or(samples.len(), |&e| at(e))))
        .collect();
    clips.retain(|&(s, e)| s < e);
    let max = opts.chunk_seconds() * sotto_audio::SAMPLE_RATE as usize;
    // A clip longer than a window: equal pieces, so that none is a sliver.
    Ok(clips.into_iter().flat_map(move |(s, e)| {
        let len = (e - s).div_ceil((e - s).div_ceil(max));
        (s..e)
            .step_by(len)
            .map(move |p| (samples[p..(p + len).min(e)].to_vec(), p))
    }))
}

/// Stretches of speech must be in order, apart and within the audio.
fn check_stretches(samples: &[f32], stretches: &[(usize, usize)]) -> Result<()> {
    let in_order = stretches
        .iter()
        .try_fold(0, |prev, &(s, e)| (prev <= s && s <= e).then_some(e))
        .is_some_and(|last| last <= samples.len());
    if !in_order {
        return Err(Error::Invalid(
            "speech stretches must be in order, apart and within the audio".into(),
        ));
    }
    Ok(())
}

/// What no VAD run can fix: no audio, or clip timestamps (they would cut the speech again).
fn check(samples: &[f32], opts: &TranscribeOptions) -> Result<()> {
    if samples.is_empty() {
        return Err(Error::Invalid("the audio contains no samples".into()));
    }
    if !opts.clip_timestamps.is_empty() {
        return Err(Error::Invalid(
            "VAD and clip timestamps do not combine: give one or the other".into(),
        ));
    }
    Ok(())
}

/// A segment's times in the original audio (faster-whisper's `restore_speech_timestamps`:
/// each word by the stretch its middle falls in, the segment then from its words).
fn restore(map: &SpeechMap, mut s: Segment) -> Segment {
    if s.words.is_empty() {
        s.start = map.original_time(s.start, None, false);
        s.end = map.original_time(s.end, None, true);
        return s;
    }
    for w in &mut s.words {
        let chunk = map.chunk_index((w.start + w.end) / 2.0, false);
        w.start = map.original_time(w.start, Some(chunk), false);
        w.end = map.original_time(w.end, Some(chunk), false);
        for t in &mut w.token_times {
            *t = map.original_time(*t, Some(chunk), false);
        }
    }
    s.start = s.words[0].start;
    s.end = s.words[s.words.len() - 1].end;
    s
}
