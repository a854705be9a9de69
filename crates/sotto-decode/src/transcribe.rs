//! Long-form transcription: 30 s windows moved by the timestamps the model emits, as
//! faster-whisper 1.2.1's `WhisperModel.generate_segments` (transcribe.py) does, with its
//! prefix, hotwords, clip timestamps, word timestamps and hallucination silence threshold
//! (not its VAD); plus an energy gate that skips windows with no sound at all, and segment
//! length limits.

use crate::align::{get_end, Aligner, Word, APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS};
use crate::beam::BeamSearch;
use crate::fallback::{generate_with_fallback, Fallback, FallbackOptions};
use crate::filters::{
    ApplyTimestampRules, LogitFilter, NoRepeatNgram, RepetitionPenalty, SuppressBlank,
    SuppressTokens,
};
use crate::grammar::{Grammar, GrammarError, GrammarFilter};
use crate::greedy::{DecodeTask, Greedy, Rng, Search};
use crate::inference::{Inference, LogitNeed};
use crate::segments::{
    skip_hallucinations, split_by_timestamps, split_cut, Hallucination, SegmentLimits, WindowSpan,
};
use crate::tokenizer::{Task, Tokenizer};
use crate::{DecodeError, Result};

/// Frames in one window (`FeatureExtractor.nb_max_frames`: 30 s at hop 160).
pub const N_FRAMES: usize = 3000;
/// The decoder's context (faster-whisper's `max_length`, every Whisper model's n_text_ctx).
pub const MAX_LENGTH: usize = 448;
/// Seconds per mel frame (`hop_length / sampling_rate` = 160 / 16000).
const TIME_PER_FRAME: f64 = 160.0 / 16000.0;
/// Seconds per timestamp step.
const TIME_PRECISION: f64 = 0.02;

/// The whole log-mel of the audio, as faster-whisper's `FeatureExtractor(audio, padding=160)`
/// computes it: the last frame covers the padding, so the content is `n_frames - 1` frames.
#[derive(Debug, Clone, Copy)]
pub struct MelView<'a> {
    /// Shape: [n_mels, n_frames], row-major.
    pub data: &'a [f32],
    /// Mel bins (80 or 128).
    pub n_mels: usize,
    /// Frames, padding frame included.
    pub n_frames: usize,
}

impl MelView<'_> {
    pub(crate) fn check(&self) -> Result<()> {
        if self.n_mels == 0 || self.data.len() != self.n_mels * self.n_frames {
            return Err(DecodeError::Mel(format!(
                "{} values do not make [{} mels, {} frames]",
                self.data.len(),
                self.n_mels,
                self.n_frames
            )));
        }
        Ok(())
    }

    /// Frames holding audio: `n_frames - 1` (faster-whisper's `content_frames`).
    pub fn content_frames(&self) -> usize {
        self.n_frames.saturating_sub(1)
    }

    /// Frames `start..start + len` (clamped to the mel), padded with zeros to a window
    /// (faster-whisper's `pad_or_trim`). Shape: [n_mels, 3000].
    pub fn window(&self, start: usize, len: usize) -> Vec<f32> {
        let end = (start + len.min(N_FRAMES)).min(self.n_frames);
        let mut out = vec![0f32; self.n_mels * N_FRAMES];
        if start < end {
            for (m, row) in out.chunks_exact_mut(N_FRAMES).enumerate() {
                let src = &self.data[m * self.n_frames..][start..end];
                row[..src.len()].copy_from_slice(src);
            }
        }
        out
    }
}

/// [`TranscribeOptions::silence_floor`]'s default.
pub const DEFAULT_SILENCE_FLOOR: f64 = -0.6;

/// Options of [`transcribe`]. `Default` is faster-whisper 1.2.1's `WhisperModel.transcribe`
/// defaults (transcribe.py, its signature): beam search of 5 at temperature 0, best of 5
/// samples above.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscribeOptions {
    /// Spoken language code; None detects it on multilingual models and means "en" for
    /// English-only ones (which also ignore any other code). Default None (`language=None`).
    pub language: Option<String>,
    /// Transcribe or translate to English. Default transcribe (`task="transcribe"`).
    pub task: Task,
    /// Temperatures tried in turn by the fallback. Default 0.0, 0.2, .., 1.0 (`temperature`).
    pub temperatures: Vec<f64>,
    /// Beams at temperature 0; 1 decodes greedily. Default 5 (`beam_size=5`).
    pub beam_size: usize,
    /// Sampled candidates per temperature above 0, decoded as one batch. Default 5
    /// (`best_of=5`).
    pub best_of: usize,
    /// Beam search stops after `round(beam_size · patience)` finished hypotheses. Default 1.0
    /// (`patience=1`).
    pub patience: f64,
    /// Finished hypotheses (beams and samples) are ranked by
    /// `sum_logprob / len^length_penalty`. Default 1.0 (`length_penalty=1`).
    pub length_penalty: f64,
    /// Retry above this gzip compression ratio. Default 2.4 (`compression_ratio_threshold`).
    pub compression_ratio_threshold: Option<f64>,
    /// Retry when the last 32 tokens of a longer result are spread below this entropy
    /// (nats; whisper.cpp's `entropy_thold`, 2.4 there). Default None (faster-whisper has
    /// no such test).
    pub entropy_threshold: Option<f64>,
    /// Retry below this average log-probability. Default -1.0 (`log_prob_threshold`).
    pub log_prob_threshold: Option<f64>,
    /// Skip a window whose no-speech probability is above this while its average
    /// log-probability is below `log_prob_threshold`. Default 0.6 (`no_speech_threshold`).
    pub no_speech_threshold: Option<f64>,
    /// Prompt each window with the text so far. Default true (`condition_on_previous_text`).
    pub condition_on_previous_text: bool,
    /// Drop the prompt after a window decoded above this temperature. Default 0.5
    /// (`prompt_reset_on_temperature`).
    pub prompt_reset_on_temperature: f64,
    /// Text prompted before the first window (encoded as `" " + text.trim()`). Default None
    /// (`initial_prompt`).
    pub initial_prompt: Option<String>,
    /// Keep the initial prompt at the head of every window's prompt, before the most recent
    /// text that still fits, even after a prompt reset (whisper.cpp's
    /// `carry_initial_prompt`). Default false (faster-whisper prompts it once).
    pub carry_initial_prompt: bool,
    /// Most tokens of earlier text a window's prompt carries, `<|startofprev|>` counted
    /// (whisper.cpp's `n_max_text_ctx`, `-mc`): 0 and 1 carry none, the initial prompt
    /// included. None: half the context (224), as faster-whisper does. Default None.
    pub max_context: Option<usize>,
    /// Lowers the logits of tokens already generated in the window (divided by it when
    /// positive, multiplied when negative); above 1 discourages repetition. Must be > 0.
    /// Default 1.0, off (`repetition_penalty`).
    pub repetition_penalty: f64,
    /// Forbid repeating any n-gram of this many tokens within a window; 0 is off. Default 0
    /// (`no_repeat_ngram_size`).
    pub no_repeat_ngram_size: usize,
    /// Detect the language of every window (from its encoding) and decode it in that
    /// language; the transcript's `language` stays the first detection's (or the one
    /// given). Multilingual models only; English-only ones ignore it. Default false
    /// (`multilingual`).
    pub multilingual: bool,
    /// Language detection stops at the first 30 s window whose most likely language is
    /// likelier than this. Default 0.5 (`language_detection_threshold`).
    pub language_detection_threshold: f64,
    /// Language detection reads up to this many 30 s windows; when none passes the
    /// threshold, the language most often on top wins, with its best probability.
    /// Default 1 (`language_detection_segments`).
    pub language_detection_segments: usize,
    /// Never produce a text token whose bytes this regular expression matches in whole
    /// (whisper.cpp's `suppress_regex`; Rust `regex` syntax, matched against the token as
    /// decoded, leading space included: `.*[0-9].*` keeps digits out). Default None.
    pub suppress_regex: Option<String>,
    /// A GBNF grammar the text of each window should follow (whisper.cpp's `--grammar`, see
    /// [`crate::grammar`]): text tokens it cannot accept next are lowered by
    /// `grammar_penalty`; the end of the text and timestamps never are. Default None.
    pub grammar: Option<String>,
    /// The grammar's start rule. Default `root` (whisper.cpp's `--grammar-rule`).
    pub grammar_rule: String,
    /// How much the logits of tokens outside the grammar are lowered (whisper.cpp's
    /// `--grammar-penalty`); ≥ 0. Default 100.
    pub grammar_penalty: f64,
    /// Forbid a blank first token. Default true (`suppress_blank`).
    pub suppress_blank: bool,
    /// Token ids never sampled; -1 adds the non-speech symbols; an empty list suppresses
    /// nothing (see [`suppressed_tokens`]). Default [-1] (`suppress_tokens=[-1]`).
    pub suppress_tokens: Vec<i64>,
    /// Decode text only (`<|notimestamps|>`); each window is then one segment. Default false
    /// (`without_timestamps`).
    pub without_timestamps: bool,
    /// Latest first timestamp, seconds. Default 1.0 (`max_initial_timestamp`).
    pub max_initial_timestamp: f64,
    /// Most tokens per window; None: up to half the context. Default None (`max_new_tokens`).
    pub max_new_tokens: Option<usize>,
    /// Seed of the sampler (faster-whisper has none; ours is reproducible). Default 0.
    pub seed: u64,
    /// Time each word from the cross-attention of the alignment heads; segment bounds and
    /// seeking then follow the words. Default false (`word_timestamps`).
    pub word_timestamps: bool,
    /// Punctuation joined to the following word. Default `"'“¿([{-`
    /// (`prepend_punctuations`).
    pub prepend_punctuations: String,
    /// Punctuation joined to the previous word. Default `"'.。,，!！?？:：”)]}、`
    /// (`append_punctuations`).
    pub append_punctuations: String,
    /// The decoder's (layer, head) cross-attention pairs used for word timing; needed when
    /// `word_timestamps` is on (the `sotto` facade fills them from the model). Default None.
    pub alignment_heads: Option<Vec<(usize, usize)>>,
    /// Text the first window's transcript is forced to begin with (encoded as
    /// `" " + text.trim()`, after `<|0.00|>` unless `without_timestamps`); it is part of the
    /// output. Only for a window starting at 0. Default None (`prefix`).
    pub prefix: Option<String>,
    /// Words to steer the spelling of, prompted before every window (after
    /// `<|startofprev|>`, before the previous text); not with a prefix. Default None
    /// (`hotwords`).
    pub hotwords: Option<String>,
    /// Stretches to transcribe, seconds from the start: `[start, end, start, end, ...]`; an
    /// odd count runs the last one to the end; empty means all. Default empty
    /// (`clip_timestamps="0"`).
    pub clip_timestamps: Vec<f64>,
    /// With word timing, skip a silence longer than this many seconds before a likely
    /// hallucination (improbable, too short or too long words), and drop the hallucination.
    /// Setting it turns word timing on. Default None (`hallucination_silence_threshold`).
    pub hallucination_silence_threshold: Option<f64>,
    /// A window whose loudest log-mel value stays below this is silence: it is skipped
    /// without decoding, so digital silence gives no text (Whisper says " You" to it). So
    /// is a window lying wholly at the mel's clamp, 80 dB under the file's loudest part,
    /// where the model's input is constant. Values are faster-whisper's normalised log-mel
    /// `(log10(power) + 4) / 4`: -1.5 is digital silence, -0.9 16-bit dither, -0.6 white
    /// noise at about -80 dBFS RMS, -0.1 at -60 dBFS; windows of speech in the shared clips
    /// reach 0.89 and above. Default Some(-0.6); None decodes every window, as
    /// faster-whisper does (sotto's own).
    pub silence_floor: Option<f64>,
    /// Also skip a window as silence when every decoding attempt failed the thresholds and
    /// its no-speech probability is above `no_speech_threshold`: what is left is a
    /// repetition loop over noise (faster-whisper keeps it). Default true (sotto's own).
    pub silence_on_failed_fallback: bool,
    /// Split segments longer than this many characters between words (whisper.cpp's
    /// `max_len` with `split_on_word`). Turns word timing on. Default None.
    pub max_segment_chars: Option<usize>,
    /// Split segments of more than this many text tokens between words. Turns word timing
    /// on. Default None.
    pub max_segment_tokens: Option<usize>,
    /// Encode only the first this many encoder positions of each window (whisper.cpp's
    /// `audio_ctx`; 20 ms each): windows are `audio_ctx · 20` ms long, and the encoder's
    /// work shrinks faster than them (3–4× faster at 500, 10 s windows). The model was trained on
    /// 30 s windows only, so text may be worse. At most the model's n_audio_ctx (1500);
    /// one window at a time only (not the batched mode). Default None: 30 s windows.
    pub audio_ctx: Option<usize>,
    /// Seconds of audio per window, 1 to 30 (faster-whisper's `chunk_length`): each window
    /// holds at most this much, zero-padded to 30 s for the encoder as faster-whisper pads
    /// it; in the batched mode, the longest chunk. Default None: 30.
    pub chunk_length: Option<usize>,
}

impl Default for TranscribeOptions {
    fn default() -> Self {
        let fb = FallbackOptions::default();
        TranscribeOptions {
            language: None,
            task: Task::Transcribe,
            temperatures: fb.temperatures,
            beam_size: 5,
            best_of: fb.best_of,
            patience: 1.0,
            length_penalty: fb.length_penalty,
            compression_ratio_threshold: fb.compression_ratio_threshold,
            entropy_threshold: fb.entropy_threshold,
            log_prob_threshold: fb.log_prob_threshold,
            no_speech_threshold: fb.no_speech_threshold,
            condition_on_previous_text: true,
            prompt_reset_on_temperature: 0.5,
            initial_prompt: None,
            carry_initial_prompt: false,
            max_context: None,
            repetition_penalty: 1.0,
            no_repeat_ngram_size: 0,
            multilingual: false,
            language_detection_threshold: 0.5,
            language_detection_segments: 1,
            suppress_regex: None,
            grammar: None,
            grammar_rule: "root".into(),
            grammar_penalty: 100.0,
            suppress_blank: true,
            suppress_tokens: vec![-1],
            without_timestamps: false,
            max_initial_timestamp: 1.0,
            max_new_tokens: None,
            seed: 0,
            word_timestamps: false,
            audio_ctx: None,
            chunk_length: None,
            prepend_punctuations: PREPEND_PUNCTUATIONS.into(),
            append_punctuations: APPEND_PUNCTUATIONS.into(),
            alignment_heads: None,
            prefix: None,
            hotwords: None,
            clip_timestamps: Vec::new(),
            hallucination_silence_threshold: None,
            silence_floor: Some(DEFAULT_SILENCE_FLOOR),
            silence_on_failed_fallback: true,
            max_segment_chars: None,
            max_segment_tokens: None,
        }
    }
}

impl TranscribeOptions {
    /// The search at temperature 0, after checking the decoding options' ranges.
    fn zero_search(&self) -> Result<Box<dyn Search>> {
        Ok(match self.zero_search_kind()? {
            Some(beam) => Box::new(beam),
            None => Box::new(Greedy),
        })
    }

    /// The beam search at temperature 0, or None for greedy decoding, after checking the
    /// decoding options' ranges.
    pub(crate) fn zero_search_kind(&self) -> Result<Option<BeamSearch>> {
        let invalid = |name, reason: String| Err(DecodeError::InvalidOption { name, reason });
        if self.best_of == 0 {
            return invalid("best_of", "must be at least 1".into());
        }
        if !self.length_penalty.is_finite() {
            return invalid(
                "length_penalty",
                format!("{} is not finite", self.length_penalty),
            );
        }
        if self
            .temperatures
            .iter()
            .any(|t| !(t.is_finite() && *t >= 0.0))
        {
            return invalid(
                "temperature",
                format!("{:?} must be >= 0", self.temperatures),
            );
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return invalid(
                "repetition_penalty",
                format!("{} must be > 0", self.repetition_penalty),
            );
        }
        check_detection(
            self.language_detection_segments,
            self.language_detection_threshold,
        )?;
        if self.patience.is_nan() || self.patience <= 0.0 {
            return invalid("patience", format!("{} must be > 0", self.patience));
        }
        if self.beam_size <= 1 {
            if self.beam_size == 0 {
                return invalid("beam_size", "must be at least 1".into());
            }
            return Ok(None);
        }
        let beam = BeamSearch {
            beam_size: self.beam_size,
            patience: self.patience,
            length_penalty: self.length_penalty,
            entropy_threshold: self.entropy_threshold,
        };
        beam.max_finished()?;
        Ok(Some(beam))
    }

    /// Whether the words must be timed (so the alignment heads are needed): asked for, or
    /// needed by the hallucination threshold or a segment limit.
    pub fn needs_word_timing(&self) -> bool {
        self.word_timestamps
            || self.hallucination_silence_threshold.is_some()
            || self.limits().is_set()
    }

    /// The alignment heads word timing uses: empty when no word is timed; an error when
    /// words must be timed and the heads are not given.
    pub(crate) fn word_heads(&self) -> Result<Vec<(usize, usize)>> {
        match (&self.alignment_heads, self.needs_word_timing()) {
            (Some(h), _) => Ok(h.clone()),
            (None, false) => Ok(Vec::new()),
            (None, true) => Err(DecodeError::InvalidOption {
                name: "alignment_heads",
                reason: "word timestamps need the model's alignment heads".into(),
            }),
        }
    }

    pub(crate) fn limits(&self) -> SegmentLimits {
        SegmentLimits {
            max_chars: self.max_segment_chars,
            max_tokens: self.max_segment_tokens,
        }
    }

    /// Checks the options the window loop uses.
    fn check_window_options(&self) -> Result<()> {
        let invalid = |name, reason: String| Err(DecodeError::InvalidOption { name, reason });
        if let Some(t) = self.hallucination_silence_threshold {
            if !(t.is_finite() && t >= 0.0) {
                return invalid(
                    "hallucination_silence_threshold",
                    format!("{t} must be a duration >= 0"),
                );
            }
        }
        if let Some(t) = self
            .clip_timestamps
            .iter()
            .find(|t| !(t.is_finite() && **t >= 0.0))
        {
            return invalid(
                "clip_timestamps",
                format!("{t} is not a time in seconds >= 0"),
            );
        }
        if self.max_segment_chars == Some(0) || self.max_segment_tokens == Some(0) {
            return invalid(
                "max_segment_chars",
                "segment limits must be at least 1".into(),
            );
        }
        if self.silence_floor.is_some_and(f64::is_nan) {
            return invalid("silence_floor", "NaN is not a level".into());
        }
        if self.audio_ctx == Some(0) {
            return invalid("audio_ctx", "a window needs at least 1 position".into());
        }
        self.check_chunk_length()
    }

    /// `chunk_length`, if given, is 1 to 30 s.
    pub(crate) fn check_chunk_length(&self) -> Result<()> {
        match self.chunk_length {
            Some(s) if !(1..=30).contains(&s) => Err(DecodeError::InvalidOption {
                name: "chunk_length",
                reason: format!("{s} s is not from 1 to 30 s (a window's length)"),
            }),
            _ => Ok(()),
        }
    }

    /// Seconds per window (and, batched, per chunk): `chunk_length`, else 30.
    pub fn chunk_seconds(&self) -> usize {
        self.chunk_length.unwrap_or(30).clamp(1, 30)
    }

    /// Mel frames per window: 3000 (30 s), fewer with `chunk_length` or `audio_ctx`.
    pub(crate) fn window_frames(&self) -> usize {
        let chunk = self.chunk_seconds() * 100;
        let ctx = self.audio_ctx.map_or(N_FRAMES, |c| c.saturating_mul(2));
        chunk.min(ctx).min(N_FRAMES)
    }

    pub(crate) fn fallback(&self) -> FallbackOptions {
        FallbackOptions {
            temperatures: self.temperatures.clone(),
            best_of: self.best_of,
            length_penalty: self.length_penalty,
            compression_ratio_threshold: self.compression_ratio_threshold,
            entropy_threshold: self.entropy_threshold,
            log_prob_threshold: self.log_prob_threshold,
            no_speech_threshold: self.no_speech_threshold,
        }
    }
}

/// The temperatures a fallback tries in turn: `start`, `start + step`, ... up to 1
/// (whisper.cpp's `temperature` and `temperature_inc`); just `start` when `step` is 0 or
/// `start` is above 1. `fallback_temperatures(0.0, 0.2)` is faster-whisper's default.
pub fn fallback_temperatures(start: f64, step: f64) -> Vec<f64> {
    let mut out = vec![start];
    if step > 0.0 {
        for k in 1.. {
            // Rounded to 1e-6 so that 0.2 steps stay 0.6, not 0.6000000000000001.
            let next = ((start + f64::from(k) * step) * 1e6).round() / 1e6;
            if next > 1.0 + 1e-9 {
                break;
            }
            out.push(next);
        }
    }
    out
}

/// One transcribed stretch (faster-whisper's `Segment`).
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// 1-based, in order.
    pub id: usize,
    /// Frame at which its window started.
    pub seek: usize,
    /// Seconds from the start of the audio.
    pub start: f64,
    /// Seconds from the start of the audio.
    pub end: f64,
    /// `tokenizer.decode(tokens)`.
    pub text: String,
    /// Its tokens, timestamps included (a segment split by the length limits has only its
    /// words' tokens).
    pub tokens: Vec<u32>,
    /// Log-probability of each of `tokens` as decoded (after the logit filters; 0 for tokens
    /// forced by a prefix).
    pub token_logprobs: Vec<f32>,
    /// Of the window's decoding.
    pub avg_logprob: f64,
    /// Of the window's text.
    pub compression_ratio: f64,
    /// Of the window.
    pub no_speech_prob: f64,
    /// Of the window's last decoding attempt.
    pub temperature: f64,
    /// Its timed words when `word_timestamps` is on, else empty.
    pub words: Vec<Word>,
}

/// The result of [`transcribe`] (faster-whisper's `TranscriptionInfo` plus the segments).
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// Language code used.
    pub language: String,
    /// Its detected probability; 1 when given or English-only.
    pub language_probability: f64,
    /// Seconds of content: `(n_frames - 1) * 0.01`, the audio length to 10 ms.
    pub duration: f64,
    /// The segments emitted (up to the one that aborted, if any).
    pub segments: Vec<Segment>,
}

impl Transcript {
    /// The whole text: the segments' texts joined, trimmed at both ends.
    pub fn text(&self) -> String {
        let joined: String = self.segments.iter().map(|s| s.text.as_str()).collect();
        joined.trim().to_string()
    }
}

/// The suppressed set as faster-whisper's `get_suppressed_tokens`: the ids given (-1 standing
/// for [`Tokenizer::non_speech_tokens`]) plus the task and start tokens and `<|nospeech|>`;
/// empty when `ids` is empty. Sorted, unique.
pub fn suppressed_tokens(tok: &Tokenizer, ids: &[i64]) -> Vec<u32> {
    if ids.is_empty() {
        return Vec::new();
    }
    let n = tok.n_vocab() as i64;
    let mut out: Vec<u32> = ids
        .iter()
        .filter(|&&i| (0..n).contains(&i))
        .map(|&i| i as u32)
        .collect();
    if ids.contains(&-1) {
        out.extend(tok.non_speech_tokens());
    }
    out.extend([
        tok.transcribe(),
        tok.translate(),
        tok.sot(),
        tok.sot_prev(),
        tok.sot_lm(),
        tok.no_speech(),
    ]);
    out.sort_unstable();
    out.dedup();
    out
}

/// The text tokens whose bytes `re` matches in whole (whisper.cpp's `suppress_regex`, which
/// `std::regex_match`es every token). Special tokens are never matched: a pattern such as
/// `.*` would otherwise forbid the end of the text.
pub fn regex_suppressed(tok: &Tokenizer, re: &str) -> Result<Vec<u32>> {
    let whole = regex::bytes::Regex::new(&format!("^(?:{re})$")).map_err(|e| {
        DecodeError::InvalidOption {
            name: "suppress_regex",
            reason: e.to_string(),
        }
    })?;
    Ok((0..tok.eot())
        .filter(|&id| whole.is_match(&tok.decode_bytes(&[id])))
        .collect())
}

/// A detected language.
#[derive(Debug, Clone, PartialEq)]
pub struct LanguageDetection {
    /// The most likely code.
    pub language: &'static str,
    /// Its probability among the languages.
    pub probability: f64,
    /// Every language with its probability, most likely first (faster-whisper's
    /// `all_language_probs`); empty where the language was not detected but given.
    pub all: Vec<(&'static str, f64)>,
}

impl LanguageDetection {
    /// A language that was given, not detected: probability 1, no list.
    pub fn given(language: &'static str) -> Self {
        LanguageDetection {
            language,
            probability: 1.0,
            all: Vec::new(),
        }
    }
}

/// Detects the spoken language as faster-whisper's `detect_language` does: the softmax over
/// the language tokens' logits after `<|startoftranscript|>` (CTranslate2's), on the first
/// 30 s, or on up to `segments` windows of 30 s until one's likeliest language is above
/// `threshold` (when none is: the language most often on top, with its best probability).
/// faster-whisper's defaults are 1 and 0.5.
pub fn detect_language(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    segments: usize,
    threshold: f64,
) -> Result<LanguageDetection> {
    check_detection(segments, threshold)?;
    inf.set_audio_ctx(None).map_err(DecodeError::Inference)?;
    detect_language_over(inf, tok, mel, 0, N_FRAMES, segments, threshold).map(|(d, _)| d)
}

/// The language [`transcribe`] with `opts` decodes in, its probability and (when detected)
/// every language's, without decoding: detected from the same mel windows (the first clip's, `chunk_length` or
/// `audio_ctx` long, up to `language_detection_segments` of them) when `opts.language` is
/// None, so a caller that must name the language before the segments come (faster-whisper's
/// `transcribe`, which returns it with a generator) gets what transcribing would pick.
pub fn transcribe_language(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    opts: &TranscribeOptions,
) -> Result<LanguageDetection> {
    mel.check()?;
    check_vocab(inf, tok)?;
    opts.check_window_options()?;
    check_detection(
        opts.language_detection_segments,
        opts.language_detection_threshold,
    )?;
    inf.set_audio_ctx(opts.audio_ctx)
        .map_err(|e| DecodeError::InvalidOption {
            name: "audio_ctx",
            reason: e.to_string(),
        })?;
    resolve_language(inf, tok, mel, opts).map(|(d, _)| d)
}

/// faster-whisper's `language_detection_segments` and `_threshold`, checked.
fn check_detection(segments: usize, threshold: f64) -> Result<()> {
    let invalid = |name, reason: &str| {
        Err(DecodeError::InvalidOption {
            name,
            reason: reason.into(),
        })
    };
    if segments == 0 {
        return invalid("language_detection_segments", "must be at least 1");
    }
    if threshold.is_nan() {
        return invalid("language_detection_threshold", "NaN is not a probability");
    }
    Ok(())
}

/// [`detect_language`] on the window of `frames` (30 s, or shorter with `audio_ctx`) from
/// frame `start`; also returns that window's mel, which `inf` holds encoded.
pub(crate) fn detect_language_at(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    start: usize,
    frames: usize,
) -> Result<(LanguageDetection, Vec<f32>)> {
    mel.check()?;
    if !tok.is_multilingual() {
        return Err(DecodeError::InvalidOption {
            name: "language",
            reason: "detection needs a multilingual model".into(),
        });
    }
    check_vocab(inf, tok)?;
    let window = mel.window(start, frames);
    inf.encode(&window).map_err(DecodeError::Inference)?;
    let detection = detect_encoded(inf, tok)?;
    Ok((detection, window))
}

/// faster-whisper's `detect_language` with `language_detection_segments` and
/// `language_detection_threshold`: the 30 s windows from frame `start`, up to `segments`
/// of them, until one's most likely language is likelier than `threshold`; when none is,
/// the language most often on top (the first to get there on a tie) with its best
/// probability, and the last window's list. Windows are `window_frames` long (3000, or fewer
/// with `audio_ctx`). Also returns the last window's mel, which `inf` holds encoded.
pub(crate) fn detect_language_over(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    start: usize,
    window_frames: usize,
    segments: usize,
    threshold: f64,
) -> Result<(LanguageDetection, Vec<f32>)> {
    let frames = mel
        .n_frames
        .saturating_sub(start)
        .min(segments.saturating_mul(window_frames));
    let mut votes: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut at = start;
    loop {
        let (d, window) = detect_language_at(inf, tok, mel, at, window_frames)?;
        at += window_frames;
        if d.probability > threshold {
            return Ok((d, window));
        }
        match votes.iter_mut().find(|(l, _)| *l == d.language) {
            Some((_, p)) => p.push(d.probability),
            None => votes.push((d.language, vec![d.probability])),
        }
        if at >= start + frames {
            // `max` keeps the first of equal counts, as Python's does.
            let (language, probs) =
                votes.iter().fold(
                    &votes[0],
                    |best, v| if v.1.len() > best.1.len() { v } else { best },
                );
            let probability = probs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let d = LanguageDetection {
                language,
                probability,
                all: d.all,
            };
            return Ok((d, window));
        }
    }
}

/// The language of the window `inf` has just encoded.
fn detect_encoded(inf: &mut dyn Inference, tok: &Tokenizer) -> Result<LanguageDetection> {
    // The language tokens lie past the text, which a search's shortlist holds exactly
    // anyway; asking for every logit keeps this independent of the search before it.
    inf.set_logit_need(&LogitNeed::All);
    inf.reset();
    let mut logits = vec![0f32; tok.n_vocab()];
    inf.decode(&[tok.sot()], &[0], &mut logits)
        .map_err(DecodeError::Inference)?;
    let first = tok.sot() as usize + 1;
    Ok(language_of(tok, &logits[first..first + tok.n_languages()]))
}

/// The detection the language tokens' logits (in the tokenizer's order) make: their
/// softmax, most likely first.
pub(crate) fn language_of(tok: &Tokenizer, langs: &[f32]) -> LanguageDetection {
    let lse = crate::filters::logsumexp(langs);
    let mut all: Vec<(&'static str, f64)> = tok
        .languages()
        .iter()
        .zip(langs)
        .map(|(code, l)| (*code, f64::from((l - lse).exp())))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (language, probability) = all[0];
    LanguageDetection {
        language,
        probability,
        all,
    }
}

pub(crate) fn check_vocab(inf: &dyn Inference, tok: &Tokenizer) -> Result<()> {
    if inf.n_vocab() != tok.n_vocab() {
        return Err(DecodeError::VocabMismatch {
            model: inf.n_vocab(),
            tokenizer: tok.n_vocab(),
        });
    }
    Ok(())
}

/// A language code the caller gave, checked against the model's languages.
pub(crate) fn given_language(tok: &Tokenizer, code: &str) -> Result<LanguageDetection> {
    match tok.languages().iter().find(|c| **c == code) {
        Some(&known) => Ok(LanguageDetection::given(known)),
        None => Err(DecodeError::UnknownLanguage {
            code: code.into(),
            known: tok.n_languages(),
        }),
    }
}

/// The language to decode with and its probability (faster-whisper's `transcribe`, which
/// detects it from the first clip's start, truncated to a frame, when that is inside the
/// audio), and the mel window detection left encoded in `inf`, if any.
fn resolve_language(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    opts: &TranscribeOptions,
) -> Result<(LanguageDetection, Option<Vec<f32>>)> {
    match opts.language.as_deref() {
        _ if !tok.is_multilingual() => Ok((LanguageDetection::given("en"), None)),
        None => {
            let first = opts.clip_timestamps.first().map_or(0.0, |t| t * 100.0);
            let start = if first < mel.content_frames() as f64 {
                first as usize
            } else {
                0
            };
            detect_language_over(
                inf,
                tok,
                mel,
                start,
                opts.window_frames(),
                opts.language_detection_segments,
                opts.language_detection_threshold,
            )
            .map(|(d, window)| (d, Some(window)))
        }
        Some(code) => given_language(tok, code).map(|d| (d, None)),
    }
}

/// `" " + text.trim()` encoded, at most `MAX_LENGTH / 2 - 1` tokens (faster-whisper's
/// `get_prompt` for its prefix and hotwords); None for None or "" (Python's falsy strings).
pub(crate) fn encode_hint(tok: &Tokenizer, text: Option<&str>) -> Option<Vec<u32>> {
    let text = text.filter(|t| !t.is_empty())?;
    let mut ids = tok.encode(&format!(" {}", text.trim()));
    ids.truncate(MAX_LENGTH / 2 - 1);
    Some(ids)
}

/// faster-whisper's `get_prompt`: `[<|startofprev|>, hotwords, previous text]` when there is
/// either, then the start sequence (and `<|notimestamps|>`). Hotwords are left out of a
/// window that has a prefix.
pub(crate) fn prompt(
    tok: &Tokenizer,
    previous: &[u32],
    hotwords: Option<&[u32]>,
    sot_sequence: &[u32],
    without_ts: bool,
) -> Vec<u32> {
    let mut p = Vec::new();
    if !previous.is_empty() || hotwords.is_some() {
        p.push(tok.sot_prev());
        p.extend_from_slice(hotwords.unwrap_or_default());
        p.extend_from_slice(&previous[previous.len().saturating_sub(MAX_LENGTH / 2 - 1)..]);
    }
    p.extend_from_slice(sot_sequence);
    if without_ts {
        p.push(tok.no_timestamps());
    }
    p
}

/// The text before a window, at most `room` tokens: the latest of `all_tokens` since the
/// last reset, or, when an initial prompt is `carried`, that prompt followed by the latest
/// text after it that fits.
fn carry_prompt(carried: &[u32], all_tokens: &[u32], reset_since: usize, room: usize) -> Vec<u32> {
    let latest = |t: &[u32], n: usize| t[t.len().saturating_sub(n)..].to_vec();
    if carried.is_empty() {
        return latest(&all_tokens[reset_since..], room);
    }
    let text = &all_tokens[reset_since.max(carried.len())..];
    [carried, &latest(text, room.saturating_sub(carried.len()))].concat()
}

impl TranscribeOptions {
    /// Tokens of earlier text a window's prompt may carry (see `max_context`).
    pub(crate) fn context_room(&self) -> usize {
        let most = MAX_LENGTH / 2 - 1;
        self.max_context
            .map_or(most, |n| n.saturating_sub(1).min(most))
    }
}

/// The forced start of a window with a prefix: `<|0.00|>` (with timestamps) then the text.
fn forced_prefix(tok: &Tokenizer, prefix: &[u32], without_ts: bool) -> Vec<u32> {
    let mut f = Vec::with_capacity(prefix.len() + 1);
    if !without_ts {
        f.push(tok.timestamp_begin());
    }
    f.extend_from_slice(prefix);
    f
}

/// faster-whisper's clip timestamps as frame ranges: `round(t · 100)` each, `[0]` when
/// empty, the end of the content appended to an odd count.
fn seek_clips(times: &[f64], content_frames: usize) -> Vec<(usize, usize)> {
    let mut points: Vec<usize> = times
        .iter()
        .map(|t| (t * 100.0).round_ties_even().min(usize::MAX as f64) as usize)
        .collect();
    if points.is_empty() {
        points.push(0);
    }
    if points.len() % 2 == 1 {
        points.push(content_frames);
    }
    points.chunks_exact(2).map(|c| (c[0], c[1])).collect()
}

/// Log-mel units below the file's loudest value where the front end clamps (8 in log10
/// power, divided by 4 in faster-whisper's normalisation): under it the mel is constant.
const MEL_CLAMP_RANGE: f32 = 2.0;

/// Whether frames `start..start + len` hold no sound: every value below `floor`, or every
/// value at the clamp `MEL_CLAMP_RANGE` under `file_max` (the mel there is constant, so
/// nothing in it can be speech).
fn is_soundless(
    mel: &MelView,
    start: usize,
    len: usize,
    floor: Option<f64>,
    file_max: f32,
) -> bool {
    let Some(floor) = floor else {
        return false;
    };
    let end = (start + len).min(mel.n_frames);
    let (lo, hi) = mel
        .data
        .chunks_exact(mel.n_frames)
        .flat_map(|row| &row[start.min(end)..end])
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let clamp = file_max - MEL_CLAMP_RANGE;
    f64::from(hi) < floor || (hi - clamp).abs() <= 1e-4 && (lo - clamp).abs() <= 1e-4
}

/// The filters of every window, in CTranslate2's order.
pub(crate) fn filters(
    tok: &Tokenizer,
    opts: &TranscribeOptions,
) -> Result<Vec<Box<dyn LogitFilter>>> {
    let mut f: Vec<Box<dyn LogitFilter>> = Vec::new();
    if opts.repetition_penalty != 1.0 {
        f.push(Box::new(RepetitionPenalty::new(
            opts.repetition_penalty as f32,
        )));
    }
    if opts.no_repeat_ngram_size > 0 {
        f.push(Box::new(NoRepeatNgram::new(opts.no_repeat_ngram_size)));
    }
    let mut suppress = suppressed_tokens(tok, &opts.suppress_tokens);
    if let Some(re) = &opts.suppress_regex {
        suppress.extend(regex_suppressed(tok, re)?);
        suppress.sort_unstable();
        suppress.dedup();
    }
    if !suppress.is_empty() {
        f.push(Box::new(SuppressTokens::new(suppress)));
    }
    if opts.suppress_blank {
        f.push(Box::new(SuppressBlank::new(tok)));
    }
    if !opts.without_timestamps {
        let index = (opts.max_initial_timestamp / TIME_PRECISION).round_ties_even();
        if !(0.0..=1e6).contains(&index) {
            return Err(DecodeError::InvalidOption {
                name: "max_initial_timestamp",
                reason: format!("{} s is not a time in a window", opts.max_initial_timestamp),
            });
        }
        f.push(Box::new(ApplyTimestampRules::new(tok, Some(index as u32))));
    }
    if let Some(g) = &opts.grammar {
        f.push(Box::new(grammar_filter(tok, opts, g)?));
    }
    Ok(f)
}

/// The grammar filter of `opts`, its faults named as options.
fn grammar_filter(tok: &Tokenizer, opts: &TranscribeOptions, text: &str) -> Result<GrammarFilter> {
    let invalid = |name, e: GrammarError| DecodeError::InvalidOption {
        name,
        reason: e.to_string(),
    };
    if !(opts.grammar_penalty >= 0.0 && opts.grammar_penalty.is_finite()) {
        return Err(DecodeError::InvalidOption {
            name: "grammar_penalty",
            reason: format!("{} is not a finite number ≥ 0", opts.grammar_penalty),
        });
    }
    let grammar = Grammar::parse(text).map_err(|e| invalid("grammar", e))?;
    let (rule, penalty) = (&opts.grammar_rule, opts.grammar_penalty as f32);
    GrammarFilter::new(grammar, rule, penalty, tok, !opts.without_timestamps)
        .map_err(|e| invalid("grammar_rule", e))
}

/// Tokens generated (forced ones included) after a prompt of `prompt_len` tokens followed
/// by `forced_len` forced ones: faster-whisper's `max_length` check over the whole prompt,
/// then CTranslate2's `min(max_length / 2, max_length - start_step)`, whose start step does
/// not count the forced tokens.
pub(crate) fn max_steps(
    prompt_len: usize,
    forced_len: usize,
    max_new_tokens: Option<usize>,
) -> Result<usize> {
    let full = prompt_len + forced_len;
    let total = max_new_tokens.map_or(MAX_LENGTH, |n| full.saturating_add(n));
    if total > MAX_LENGTH {
        return Err(DecodeError::InvalidOption {
            name: "max_new_tokens",
            reason: format!(
                "a prompt of {full} tokens plus {} new ones exceeds the model's {MAX_LENGTH}",
                total - full
            ),
        });
    }
    Ok((total / 2).min((total + 1).saturating_sub(prompt_len)))
}

/// Whether the window is skipped as silence: faster-whisper's rule (no-speech probability
/// above its threshold and average log-probability below its own), or sotto's
/// `silence_on_failed_fallback`.
fn is_silence(fb: &Fallback, opts: &TranscribeOptions) -> bool {
    let Some(ns) = opts.no_speech_threshold else {
        return false;
    };
    let confident = opts
        .log_prob_threshold
        .is_some_and(|lp| fb.result.avg_logprob > lp);
    let hopeless = opts.silence_on_failed_fallback && fb.exhausted;
    fb.result.no_speech_prob > ns && (!confident || hopeless)
}

/// Transcribes the whole of `mel`, calling `on_segment` for each segment as it is decoded;
/// `on_segment` returning false stops cleanly after that segment.
pub fn transcribe(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    mel: &MelView,
    opts: &TranscribeOptions,
    on_segment: &mut dyn FnMut(&Segment) -> bool,
) -> Result<Transcript, DecodeError> {
    mel.check()?;
    check_vocab(inf, tok)?;
    let mut zero = opts.zero_search()?;
    opts.check_window_options()?;
    // The model knows its longest context, and whether its device can shorten it.
    inf.set_audio_ctx(opts.audio_ctx)
        .map_err(|e| DecodeError::InvalidOption {
            name: "audio_ctx",
            reason: e.to_string(),
        })?;
    let window_frames = opts.window_frames();
    let content_frames = mel.content_frames();
    // The window language detection encoded: a first window with the same mel (audio of
    // 30 s or more) reuses it instead of running the encoder twice.
    let (language, mut encoded) = resolve_language(inf, tok, mel, opts)?;
    let mut out = Transcript {
        language: language.language.into(),
        language_probability: language.probability,
        duration: content_frames as f64 * TIME_PER_FRAME,
        segments: Vec::new(),
    };
    let sot_sequence = tok.sot_sequence(&out.language, opts.task)?;
    let filters = filters(tok, opts)?;
    let filter_refs: Vec<&dyn LogitFilter> = filters.iter().map(|f| f.as_ref()).collect();
    let fallback = opts.fallback();
    let mut rng = Rng::new(opts.seed);
    let mut all_tokens: Vec<u32> = match &opts.initial_prompt {
        Some(p) => tok.encode(&format!(" {}", p.trim())),
        None => Vec::new(),
    };
    // The initial prompt kept for every window, at most what a prompt may carry.
    let room = opts.context_room();
    let carried: Vec<u32> = if opts.carry_initial_prompt {
        let n = all_tokens.len().min(room);
        all_tokens[..n].to_vec()
    } else {
        Vec::new()
    };
    let prefix = encode_hint(tok, opts.prefix.as_deref());
    let hotwords = encode_hint(tok, opts.hotwords.as_deref());
    let heads = opts.word_heads()?;
    let multilingual = opts.multilingual && tok.is_multilingual();
    let mut last_speech_timestamp = 0.0;
    let mut prompt_reset_since = 0usize;
    let clips = seek_clips(&opts.clip_timestamps, content_frames);
    let file_max = mel.data.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let (mut clip_idx, mut seek) = (0, clips[0].0);

    while clip_idx < clips.len() {
        let (clip_start, clip_end) = (clips[clip_idx].0, clips[clip_idx].1.min(content_frames));
        seek = seek.max(clip_start);
        if seek >= clip_end {
            clip_idx += 1;
            if let Some(next) = clips.get(clip_idx) {
                seek = next.0;
            }
            continue;
        }
        let time_offset = seek as f64 * TIME_PER_FRAME;
        let segment_size = window_frames
            .min(content_frames - seek)
            .min(clip_end - seek);
        if is_soundless(mel, seek, segment_size, opts.silence_floor, file_max) {
            seek += segment_size;
            continue;
        }
        let window = mel.window(seek, segment_size);
        if encoded.take().is_some_and(|w| w == window) {
            inf.reset();
        } else {
            inf.encode(&window).map_err(DecodeError::Inference)?;
        }
        // faster-whisper's `multilingual`: this window's own language, for its prompt and
        // its words.
        let window_sot;
        let (language, sot_sequence) = if multilingual {
            let detected = detect_encoded(inf, tok)?.language;
            window_sot = tok.sot_sequence(detected, opts.task)?;
            (detected, &window_sot[..])
        } else {
            (&out.language[..], &sot_sequence[..])
        };
        let aligner = Aligner {
            tok,
            language,
            sot_sequence,
            heads: &heads,
            prepend: &opts.prepend_punctuations,
            append: &opts.append_punctuations,
        };
        let window_prefix = prefix.as_deref().filter(|_| seek == 0);
        let previous = carry_prompt(&carried, &all_tokens, prompt_reset_since, room);
        let p = prompt(
            tok,
            &previous,
            hotwords.as_deref().filter(|_| window_prefix.is_none()),
            sot_sequence,
            opts.without_timestamps,
        );
        let forced = window_prefix
            .map(|f| forced_prefix(tok, f, opts.without_timestamps))
            .unwrap_or_default();
        let task = DecodeTask {
            prompt: &p,
            sot_index: p.iter().position(|&t| t == tok.sot()).unwrap_or(0),
            forced: &forced,
            eot: tok.eot(),
            no_speech: tok.no_speech(),
            max_steps: max_steps(p.len(), forced.len(), opts.max_new_tokens)?,
            filters: &filter_refs,
        };
        let fb = generate_with_fallback(inf, tok, &task, &fallback, zero.as_mut(), &mut rng)?;
        if is_silence(&fb, opts) {
            seek += segment_size;
            continue;
        }
        let previous_seek = seek;
        let span = WindowSpan {
            time_offset,
            duration: segment_size as f64 * TIME_PER_FRAME,
            end_time: (seek + window_frames) as f64 * TIME_PER_FRAME,
            content_duration: out.duration,
            seek,
            content_frames,
        };
        let (mut cuts, next_seek, single_ending) = split_by_timestamps(
            tok,
            &fb.result.tokens,
            &fb.result.logprobs,
            time_offset,
            segment_size,
            span.duration,
            seek,
        );
        seek = next_seek;
        if opts.audio_ctx.is_some() {
            // Timestamps reach 30 s, past a shortened window's end, where the model heard
            // nothing: the next window starts no later than this one's end.
            seek = seek.min(previous_seek + segment_size);
        }
        if opts.needs_word_timing() {
            // faster-whisper ignores the value add_word_timestamps returns here.
            aligner.add_word_timestamps(
                inf,
                &mut cuts,
                previous_seek,
                segment_size,
                last_speech_timestamp,
            )?;
            if let Some(end) = get_end(&cuts).filter(|&e| !single_ending && e > time_offset) {
                seek = (end * 100.0).round_ties_even() as usize;
            }
            if let Some(threshold) = opts.hallucination_silence_threshold {
                let verdict = skip_hallucinations(
                    &mut cuts,
                    &mut seek,
                    &span,
                    threshold,
                    last_speech_timestamp,
                );
                if let Hallucination::SkipTo(frame) = verdict {
                    seek = frame;
                    continue;
                }
            }
            if let Some(end) = get_end(&cuts) {
                last_speech_timestamp = end;
            }
        }
        for cut in cuts {
            let text = tok.decode(&cut.tokens);
            if cut.start == cut.end || text.trim().is_empty() {
                continue;
            }
            all_tokens.extend_from_slice(&cut.tokens);
            let pieces = split_cut(tok, &cut, opts.limits()).unwrap_or_else(|| vec![cut]);
            for piece in pieces {
                out.segments.push(Segment {
                    id: out.segments.len() + 1,
                    seek: previous_seek,
                    start: piece.start,
                    end: piece.end,
                    text: tok.decode(&piece.tokens),
                    tokens: piece.tokens,
                    token_logprobs: piece.logprobs,
                    avg_logprob: fb.result.avg_logprob,
                    compression_ratio: fb.compression_ratio,
                    no_speech_prob: fb.result.no_speech_prob,
                    temperature: fb.temperature,
                    words: if opts.word_timestamps {
                        piece.words
                    } else {
                        Vec::new()
                    },
                });
                if !on_segment(out.segments.last().expect("just pushed")) {
                    return Ok(out);
                }
            }
        }
        if !opts.condition_on_previous_text || fb.temperature > opts.prompt_reset_on_temperature {
            prompt_reset_since = all_tokens.len();
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "transcribe_tests.rs"]
mod tests;
