//! The transcription endpoints' fields and answers: whisper.cpp's `/inference` and OpenAI's
//! `/v1/audio/transcriptions` and `/translations` read one set of form fields (each API's
//! names) and answer in the formats their clients parse.

use serde::Serialize;
use serde_json::json;
use sotto::audio::diarize::Speaker;
use sotto::{Task, TranscribeOptions, Transcript};

use super::form::Form;
use crate::writers::{Extras, Format};

/// Largest beam or candidate count a request may ask for (each costs a KV cache).
pub const MAX_BEAMS: usize = 16;

/// Which API's error shape an endpoint answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// `{"error": "message"}`, as whisper.cpp's server.
    WhisperCpp,
    /// `{"error": {"message", "type", "param", "code"}}`, as OpenAI's API.
    OpenAi,
}

/// A request that gets no transcript: an HTTP status and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, message)
    }

    /// The JSON body in `dialect`'s shape.
    pub fn body(&self, dialect: Dialect) -> String {
        let doc = match dialect {
            Dialect::WhisperCpp => json!({ "error": self.message }),
            Dialect::OpenAi => json!({ "error": {
                "message": self.message,
                "type": if self.status >= 500 { "server_error" } else { "invalid_request_error" },
                "param": null,
                "code": null,
            }}),
        };
        doc.to_string()
    }

    /// A library error as an answer: what the request asked for is the client's problem
    /// (400), anything else the server's (500).
    pub fn from_sotto(e: &sotto::Error) -> ApiError {
        use sotto::DecodeError;
        let status = match e {
            sotto::Error::Audio(_) | sotto::Error::Invalid(_) | sotto::Error::Device(_) => 400,
            sotto::Error::Decode(
                DecodeError::UnknownLanguage { .. } | DecodeError::InvalidOption { .. },
            ) => 400,
            _ => 500,
        };
        ApiError::new(status, e.to_string())
    }
}

/// What a transcript is answered as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFormat {
    /// `{"text": ...}`.
    Json,
    /// openai-whisper's result: task, language, duration, text, segments (and words).
    VerboseJson,
    /// One segment per line.
    Text,
    /// A file format of `sotto transcribe` (srt, vtt, csv, tsv, lrc).
    File(Format),
}

impl ResponseFormat {
    pub fn parse(s: &str) -> Result<ResponseFormat, ApiError> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "json" => ResponseFormat::Json,
            "verbose_json" => ResponseFormat::VerboseJson,
            "text" | "txt" => ResponseFormat::Text,
            "srt" => ResponseFormat::File(Format::Srt),
            "vtt" => ResponseFormat::File(Format::Vtt),
            "csv" => ResponseFormat::File(Format::Csv),
            "tsv" => ResponseFormat::File(Format::Tsv),
            "lrc" => ResponseFormat::File(Format::Lrc),
            other => {
                return Err(ApiError::bad_request(format!(
                    "response_format: {other:?} is not one of json, verbose_json, text, srt, \
                     vtt, csv, tsv, lrc"
                )))
            }
        })
    }

    /// The body and its `Content-Type`. `extras.speakers` (empty, or one per segment:
    /// `diarize`) label the text as whisper.cpp's server does, `(speaker 0) text` a line
    /// each, and give verbose JSON's segments a `speaker`; `extras.srt_offset` numbers SRT
    /// cues on from it (`offset_n`).
    pub fn render(self, t: &Transcript, task: Task, extras: &Extras) -> (Vec<u8>, &'static str) {
        let speakers = extras.speakers;
        match self {
            ResponseFormat::Json => (
                json!({ "text": transcript_text(t, speakers) })
                    .to_string()
                    .into_bytes(),
                "application/json",
            ),
            ResponseFormat::VerboseJson => (verbose_json(t, task, speakers), "application/json"),
            ResponseFormat::Text => (
                file_body(t, Format::Txt, extras),
                "text/plain; charset=utf-8",
            ),
            ResponseFormat::File(f) => {
                let ct = match f {
                    Format::Srt => "application/x-subrip; charset=utf-8",
                    Format::Vtt => "text/vtt; charset=utf-8",
                    Format::Csv => "text/csv; charset=utf-8",
                    Format::Tsv => "text/tab-separated-values; charset=utf-8",
                    _ => "text/plain; charset=utf-8",
                };
                (file_body(t, f, extras), ct)
            }
        }
    }
}

/// The transcript's text; diarized, a labelled line per segment (whisper.cpp's server).
fn transcript_text(t: &Transcript, speakers: &[Speaker]) -> String {
    if speakers.is_empty() {
        return t.text();
    }
    let lines = t.segments.iter().zip(speakers);
    lines
        .map(|(s, sp)| crate::writers::labelled_text(&s.text, Some(*sp)) + "\n")
        .collect()
}

fn file_body(t: &Transcript, f: Format, extras: &Extras) -> Vec<u8> {
    let mut out = Vec::new();
    f.write(t, extras, &mut out)
        .expect("writing to a Vec<u8> cannot fail");
    out
}

#[derive(Serialize)]
struct Verbose<'a> {
    task: &'static str,
    /// The language's English name, as openai-whisper and OpenAI's API give it.
    language: &'a str,
    language_probability: f64,
    duration: f64,
    text: String,
    segments: Vec<VerboseSegment<'a>>,
    /// Every word of the transcript, with word timing only (OpenAI's `words`).
    #[serde(skip_serializing_if = "Option::is_none")]
    words: Option<Vec<VerboseWord<'a>>>,
}

#[derive(Serialize)]
struct VerboseSegment<'a> {
    id: usize,
    seek: usize,
    start: f64,
    end: f64,
    text: &'a str,
    tokens: &'a [u32],
    temperature: f64,
    avg_logprob: f64,
    compression_ratio: f64,
    no_speech_prob: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    words: Option<Vec<VerboseWord<'a>>>,
    /// With `diarize` on stereo audio: `0`, `1` or `?`, as the CLI's JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    speaker: Option<&'static str>,
}

#[derive(Serialize)]
struct VerboseWord<'a> {
    word: &'a str,
    start: f64,
    end: f64,
    probability: f64,
}

fn verbose_json(t: &Transcript, task: Task, speakers: &[Speaker]) -> Vec<u8> {
    // Times to the millisecond; the timestamp tokens carry centiseconds.
    let ms = |x: f64| (x * 1000.0).round() / 1000.0;
    fn words(s: &sotto::Segment) -> Vec<VerboseWord<'_>> {
        let ms = |x: f64| (x * 1000.0).round() / 1000.0;
        s.words
            .iter()
            .map(|w| VerboseWord {
                word: &w.word,
                start: ms(w.start),
                end: ms(w.end),
                probability: w.probability,
            })
            .collect()
    }
    let timed = t.segments.iter().any(|s| !s.words.is_empty());
    let doc = Verbose {
        task: match task {
            Task::Transcribe => "transcribe",
            Task::Translate => "translate",
        },
        language: sotto::language_name(&t.language).unwrap_or(&t.language),
        language_probability: t.language_probability,
        duration: ms(t.duration),
        text: transcript_text(t, speakers),
        segments: t
            .segments
            .iter()
            .enumerate()
            .map(|(i, s)| VerboseSegment {
                id: i,
                seek: s.seek,
                start: ms(s.start),
                end: ms(s.end),
                text: &s.text,
                tokens: &s.tokens,
                temperature: s.temperature,
                avg_logprob: s.avg_logprob,
                compression_ratio: s.compression_ratio,
                no_speech_prob: s.no_speech_prob,
                words: timed.then(|| words(s)),
                speaker: speakers.get(i).map(|sp| sp.id()),
            })
            .collect(),
        words: timed.then(|| t.segments.iter().flat_map(words).collect()),
    };
    serde_json::to_vec(&doc).expect("a transcript serializes")
}

/// A transcription request, its fields read.
#[derive(Debug, Clone)]
pub struct Job {
    pub opts: TranscribeOptions,
    pub format: ResponseFormat,
    /// Answer with the detected language only (whisper.cpp's `detect_language`).
    pub detect_language: bool,
    /// Transcribe the speech the VAD finds only (`vad_filter`, or whisper.cpp's `vad`).
    pub vad: bool,
    /// How the VAD finds speech: faster-whisper's defaults, changed by whisper.cpp's
    /// `vad_threshold`, `vad_min_speech_duration_ms`, ... fields.
    pub vad_options: sotto::VadOptions,
    /// Answer as server-sent events, a `transcript.text.delta` per finished segment then
    /// `transcript.text.done`, as OpenAI's streaming transcriptions do (`stream=true`).
    pub stream: bool,
    /// Decode up to this many chunks of speech together, as faster-whisper's
    /// `BatchedInferencePipeline` (`batch_size`, or the server's `--batch-size`): the VAD
    /// with that mode's defaults cuts the audio (`vad_*` fields still apply), or the
    /// clips of `offset_t`/`duration` are the chunks. None: one window at a time.
    pub batch_size: Option<usize>,
    /// Label each segment with the louder channel of a stereo upload, as whisper.cpp's
    /// `diarize` (mono audio gets no labels).
    pub diarize: bool,
    /// Added to SRT's cue numbers (whisper.cpp's `offset_n`: subtitles of a part that
    /// follows others).
    pub srt_offset: usize,
}

/// Fields clients send that change nothing here: whisper.cpp's console and model-loading
/// options, and OpenAI's model choice (the server answers with the model it has loaded).
const IGNORED: [&str; 8] = [
    "model",
    "word_thold",
    "split_on_word",
    "debug_mode",
    "print_special",
    "print_colors",
    "print_realtime",
    "print_progress",
];

/// Every field a transcription request may carry.
const KNOWN: [&str; 42] = [
    "file",
    "offset_n",
    "suppress_non_speech",
    "audio_ctx",
    "suppress_regex",
    "grammar",
    "grammar_rule",
    "grammar_penalty",
    "batch_size",
    "response_format",
    "language",
    "prompt",
    "translate",
    "task",
    "temperature",
    "temperature_inc",
    "no_timestamps",
    "beam_size",
    "best_of",
    "offset_t",
    "duration",
    "max_len",
    "max_context",
    "entropy_thold",
    "logprob_thold",
    "no_speech_thold",
    "word_timestamps",
    "timestamp_granularities",
    "timestamp_granularities[]",
    "detect_language",
    "hotwords",
    "diarize",
    "tinydiarize",
    "stream",
    "vad_filter",
    "vad",
    "vad_threshold",
    "vad_min_speech_duration_ms",
    "vad_min_silence_duration_ms",
    "vad_max_speech_duration_s",
    "vad_speech_pad_ms",
    "vad_samples_overlap",
];

/// The fields of `form` neither read nor known to be harmless (logged, not refused: clients
/// of both APIs send extras).
pub fn unknown_fields(form: &Form) -> Vec<String> {
    form.names()
        .filter(|n| !KNOWN.contains(n) && !IGNORED.contains(n))
        .map(str::to_string)
        .collect()
}

fn text<'a>(form: &'a Form, name: &str) -> Result<Option<&'a str>, ApiError> {
    form.text(name).map_err(ApiError::bad_request)
}

fn boolean(form: &Form, name: &str) -> Result<Option<bool>, ApiError> {
    let Some(v) = text(form, name)? else {
        return Ok(None);
    };
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "on" => Ok(Some(true)),
        "false" | "0" | "no" | "n" | "off" | "" => Ok(Some(false)),
        _ => Err(ApiError::bad_request(format!(
            "{name}: {v:?} is not true or false"
        ))),
    }
}

fn number(form: &Form, name: &str) -> Result<Option<f64>, ApiError> {
    match text(form, name)? {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("{name}: {v:?} is not a number"))),
    }
}

/// A count such as `beam_size`: whisper.cpp sends -1 for "the default", read as 1.
fn count(form: &Form, name: &str) -> Result<Option<usize>, ApiError> {
    let Some(x) = number(form, name)? else {
        return Ok(None);
    };
    if x.fract() != 0.0 || x > MAX_BEAMS as f64 {
        return Err(ApiError::bad_request(format!(
            "{name}: {x} is not a whole number up to {MAX_BEAMS}"
        )));
    }
    Ok(Some(x.max(1.0) as usize))
}

/// Most chunks one request may decode together (as `sotto transcribe --batch-size`).
pub const MAX_BATCH: usize = 64;

/// Reads a transcription request's fields over the server's `defaults`. `translate_route`
/// is OpenAI's `/v1/audio/translations`.
#[cfg(test)]
pub fn read_job(
    form: &Form,
    defaults: &TranscribeOptions,
    translate_route: bool,
) -> Result<Job, ApiError> {
    read_job_with(form, defaults, None, translate_route)
}

/// [`read_job`] with the server's `--batch-size` for requests that give no `batch_size`
/// (a request's `batch_size=0` asks for one window at a time).
pub fn read_job_with(
    form: &Form,
    defaults: &TranscribeOptions,
    default_batch: Option<usize>,
    translate_route: bool,
) -> Result<Job, ApiError> {
    let mut opts = defaults.clone();
    if boolean(form, "tinydiarize")? == Some(true) {
        return Err(ApiError::bad_request(
            "tinydiarize is not supported by this server (it needs a tdrz model); \
             diarize labels the channels of stereo audio",
        ));
    }
    let diarize = boolean(form, "diarize")? == Some(true);
    let format = match text(form, "response_format")? {
        None | Some("") => ResponseFormat::Json,
        Some(f) => ResponseFormat::parse(f)?,
    };
    if let Some(lang) = text(form, "language")? {
        opts.language = match lang {
            "" | "auto" => None,
            l => Some(
                sotto::language_code(l)
                    .ok_or_else(|| {
                        ApiError::bad_request(format!(
                            "language: {l:?} is neither a Whisper language code nor a name"
                        ))
                    })?
                    .to_string(),
            ),
        };
    }
    if let Some(p) = text(form, "prompt")? {
        opts.initial_prompt = (!p.is_empty()).then(|| p.to_string());
    }
    if let Some(h) = text(form, "hotwords")? {
        opts.hotwords = (!h.is_empty()).then(|| h.to_string());
    }
    if let Some(r) = text(form, "suppress_regex")? {
        opts.suppress_regex = (!r.is_empty()).then(|| r.to_string());
    }
    // whisper.cpp's grammar sampling (its CLI's --grammar, --grammar-rule, --grammar-penalty).
    if let Some(g) = text(form, "grammar")? {
        opts.grammar = (!g.is_empty()).then(|| g.to_string());
    }
    if let Some(r) = text(form, "grammar_rule")?.filter(|r| !r.is_empty()) {
        opts.grammar_rule = r.to_string();
    }
    if let Some(p) = number(form, "grammar_penalty")? {
        if p < 0.0 {
            return Err(ApiError::bad_request(format!(
                "grammar_penalty: {p} is below 0"
            )));
        }
        opts.grammar_penalty = p;
    }
    opts.task = match text(form, "task")? {
        None | Some("") => opts.task,
        Some("transcribe") => Task::Transcribe,
        Some("translate") => Task::Translate,
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "task: {t:?} is not transcribe or translate"
            )))
        }
    };
    if translate_route || boolean(form, "translate")? == Some(true) {
        opts.task = Task::Translate;
    }
    let t = number(form, "temperature")?;
    let inc = number(form, "temperature_inc")?;
    if t.is_some() || inc.is_some() {
        let t = t.unwrap_or(opts.temperatures.first().copied().unwrap_or(0.0));
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::bad_request(format!(
                "temperature: {t} is not between 0 and 2"
            )));
        }
        let inc = inc.unwrap_or(0.2);
        if inc < 0.0 {
            return Err(ApiError::bad_request(format!(
                "temperature_inc: {inc} is negative"
            )));
        }
        opts.temperatures = sotto::fallback_temperatures(t, inc);
    }
    if let Some(b) = boolean(form, "no_timestamps")? {
        opts.without_timestamps = b;
    }
    if let Some(n) = count(form, "beam_size")? {
        opts.beam_size = n;
    }
    if let Some(n) = count(form, "best_of")? {
        opts.best_of = n;
    }
    let ms = |name| -> Result<Option<f64>, ApiError> {
        match number(form, name)? {
            Some(x) if x < 0.0 => Err(ApiError::bad_request(format!(
                "{name}: {x} is not a time in milliseconds >= 0"
            ))),
            x => Ok(x.map(|x| x / 1000.0)),
        }
    };
    let (offset, duration) = (ms("offset_t")?, ms("duration")?);
    if offset.is_some() || duration.is_some() {
        let start = offset.unwrap_or(0.0);
        opts.clip_timestamps = match duration {
            Some(d) if d > 0.0 => vec![start, start + d],
            _ if start > 0.0 => vec![start],
            _ => Vec::new(),
        };
    }
    let srt_offset = match number(form, "offset_n")? {
        Some(n) if n < 0.0 || n.fract() != 0.0 || n > u32::MAX as f64 => {
            return Err(ApiError::bad_request(format!(
                "offset_n: {n} is not a segment count"
            )))
        }
        n => n.unwrap_or(0.0) as usize,
    };
    if let Some(n) = number(form, "max_len")? {
        if n < 0.0 || n.fract() != 0.0 {
            return Err(ApiError::bad_request(format!(
                "max_len: {n} is not a character count"
            )));
        }
        opts.max_segment_chars = (n >= 1.0).then_some(n as usize);
    }
    // whisper.cpp's server: -1 (its default) leaves the context at half the decoder's.
    if let Some(n) = number(form, "max_context")? {
        if n.fract() != 0.0 || n < -1.0 {
            return Err(ApiError::bad_request(format!(
                "max_context: {n} is not a token count (or -1)"
            )));
        }
        opts.max_context = (n >= 0.0).then_some(n as usize);
    }
    // whisper.cpp's `suppress_nst`: its non-speech symbols are OpenAI's `-1` set, which
    // faster-whisper (and so this server) suppresses unless told otherwise.
    match boolean(form, "suppress_non_speech")? {
        Some(true) if !opts.suppress_tokens.contains(&-1) => opts.suppress_tokens.push(-1),
        Some(false) => opts.suppress_tokens.retain(|&t| t != -1),
        _ => {}
    }
    // whisper.cpp's server: 0 (its default) encodes whole 30 s windows.
    if let Some(n) = number(form, "audio_ctx")? {
        if n.fract() != 0.0 || n < 0.0 {
            return Err(ApiError::bad_request(format!(
                "audio_ctx: {n} is not a count of encoder positions (or 0 for all)"
            )));
        }
        opts.audio_ctx = (n >= 1.0).then_some(n as usize);
    }
    if let Some(x) = number(form, "entropy_thold")? {
        opts.entropy_threshold = Some(x);
    }
    if let Some(x) = number(form, "logprob_thold")? {
        opts.log_prob_threshold = Some(x);
    }
    if let Some(x) = number(form, "no_speech_thold")? {
        opts.no_speech_threshold = Some(x);
    }
    if let Some(w) = boolean(form, "word_timestamps")? {
        opts.word_timestamps = w;
    }
    for name in ["timestamp_granularities[]", "timestamp_granularities"] {
        for part in form.all(name) {
            let v = std::str::from_utf8(&part.data)
                .map_err(|_| ApiError::bad_request(format!("{name}: not UTF-8")))?;
            for g in v.split(',').map(str::trim) {
                match g {
                    "word" => opts.word_timestamps = true,
                    "segment" | "" => {}
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "{name}: {other:?} is not word or segment"
                        )))
                    }
                }
            }
        }
    }
    let detect_language = boolean(form, "detect_language")?.unwrap_or(false);
    let vad = boolean(form, "vad_filter")?
        .or(boolean(form, "vad")?)
        .unwrap_or(false);
    if vad && !opts.clip_timestamps.is_empty() {
        return Err(ApiError::bad_request(
            "vad_filter does not combine with offset_t or duration",
        ));
    }
    let batch_size = match number(form, "batch_size")? {
        // A shorter encoder context decodes one window at a time unless the request asks.
        None => default_batch.filter(|_| opts.audio_ctx.is_none()),
        Some(x) if x.fract() != 0.0 || !(0.0..=MAX_BATCH as f64).contains(&x) => {
            return Err(ApiError::bad_request(format!(
                "batch_size: {x} is not a whole number from 0 (one window at a time) to {MAX_BATCH}"
            )))
        }
        Some(x) => Some(x as usize),
    }
    .filter(|&n| n > 0);
    // Batched mode's VAD defaults are faster-whisper's for its pipeline; fields override.
    let mut vad_options = match batch_size {
        Some(_) => sotto::VadOptions::batched(),
        None => sotto::VadOptions::default(),
    };
    let at_least = |name: &str, min: f64, strict: bool| -> Result<Option<f64>, ApiError> {
        match number(form, name)? {
            Some(v) if v < min || (strict && v == min) => Err(ApiError::bad_request(format!(
                "{name}: {v} must be {} {min}",
                if strict { ">" } else { ">=" }
            ))),
            v => Ok(v),
        }
    };
    if let Some(t) = at_least("vad_threshold", 0.0, false)? {
        if t > 1.0 {
            return Err(ApiError::bad_request(format!(
                "vad_threshold: {t} is not a probability"
            )));
        }
        vad_options.threshold = t as f32;
    }
    if let Some(v) = at_least("vad_min_speech_duration_ms", 0.0, false)? {
        vad_options.min_speech_duration_ms = v;
    }
    if let Some(v) = at_least("vad_min_silence_duration_ms", 0.0, false)? {
        vad_options.min_silence_duration_ms = v;
    }
    if let Some(v) = at_least("vad_max_speech_duration_s", 0.0, true)? {
        vad_options.max_speech_duration_s = v;
    }
    if let Some(v) = at_least("vad_speech_pad_ms", 0.0, false)? {
        vad_options.speech_pad_ms = v;
    }
    // whisper.cpp's overlap between the joined stretches has no counterpart here.
    number(form, "vad_samples_overlap")?;
    let stream = boolean(form, "stream")?.unwrap_or(false);
    if stream && detect_language {
        return Err(ApiError::bad_request(
            "stream does not combine with detect_language",
        ));
    }
    Ok(Job {
        opts,
        format,
        detect_language,
        vad,
        vad_options,
        stream,
        batch_size,
        diarize,
        srt_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::super::form::encode::{multipart, parse};
    use super::*;

    fn form(fields: &[(&str, &str)]) -> Form {
        let parts: Vec<(&str, Option<&str>, &[u8])> = fields
            .iter()
            .map(|(n, v)| (*n, None, v.as_bytes()))
            .collect();
        let (ct, body) = multipart(&parts);
        parse(&ct, body, 1 << 20).unwrap()
    }

    fn job(fields: &[(&str, &str)]) -> Result<Job, ApiError> {
        read_job(&form(fields), &TranscribeOptions::default(), false)
    }

    #[test]
    fn defaults_are_the_servers() {
        let mut defaults = TranscribeOptions {
            beam_size: 1,
            ..TranscribeOptions::default()
        };
        defaults.language = Some("de".into());
        let j = read_job(&form(&[]), &defaults, false).unwrap();
        assert_eq!(j.opts.beam_size, 1);
        assert_eq!(j.opts.language.as_deref(), Some("de"));
        assert_eq!(j.format, ResponseFormat::Json);
        assert!(!j.detect_language && !j.vad);
        assert!(
            read_job(&form(&[("vad_filter", "true")]), &defaults, false)
                .unwrap()
                .vad
        );
        assert!(
            read_job(&form(&[("vad", "1")]), &defaults, false)
                .unwrap()
                .vad
        );
        let j = read_job(&form(&[]), &defaults, true).unwrap();
        assert_eq!(j.opts.task, Task::Translate);
        // whisper.cpp's VAD fields; faster-whisper's defaults for the rest.
        let j = read_job(
            &form(&[
                ("vad", "true"),
                ("vad_threshold", "0.3"),
                ("vad_min_silence_duration_ms", "100"),
                ("vad_max_speech_duration_s", "12.5"),
                ("vad_samples_overlap", "0.1"),
            ]),
            &defaults,
            false,
        )
        .unwrap();
        assert_eq!(j.vad_options.threshold, 0.3);
        assert_eq!(j.vad_options.min_silence_duration_ms, 100.0);
        assert_eq!(j.vad_options.max_speech_duration_s, 12.5);
        assert_eq!(j.vad_options.speech_pad_ms, 400.0);
        for (name, v) in [
            ("vad_threshold", "1.5"),
            ("vad_speech_pad_ms", "-1"),
            ("vad_max_speech_duration_s", "0"),
            ("vad_min_speech_duration_ms", "soon"),
        ] {
            let err = read_job(&form(&[(name, v)]), &defaults, false).unwrap_err();
            assert!(format!("{err:?}").contains(name), "{name}: {err:?}");
        }
    }

    #[test]
    fn whisper_cpp_fields() {
        let j = job(&[
            ("response-format", "verbose_json"),
            ("temperature", "0.2"),
            ("temperature_inc", "0.4"),
            ("language", "auto"),
            ("translate", "true"),
            ("no_timestamps", "1"),
            ("beam_size", "-1"),
            ("best_of", "3"),
            ("offset_t", "1500"),
            ("duration", "2000"),
            ("max_len", "42"),
            ("max_context", "64"),
            ("audio_ctx", "512"),
            ("entropy_thold", "2.4"),
            ("logprob_thold", "-0.5"),
            ("prompt", "  Hello. "),
            ("model", "ignored"),
            ("suppress_regex", ".*[0-9].*"),
            ("grammar", "cmd ::= \" go\""),
            ("grammar_rule", "cmd"),
            ("grammar_penalty", "20"),
        ])
        .unwrap();
        assert_eq!(j.opts.suppress_regex.as_deref(), Some(".*[0-9].*"));
        assert_eq!(j.opts.grammar.as_deref(), Some("cmd ::= \" go\""));
        assert_eq!(
            (j.opts.grammar_rule.as_str(), j.opts.grammar_penalty),
            ("cmd", 20.0)
        );
        assert_eq!(j.format, ResponseFormat::VerboseJson);
        assert_eq!(j.opts.temperatures, vec![0.2, 0.6, 1.0]);
        assert_eq!(j.opts.language, None);
        assert_eq!(j.opts.task, Task::Translate);
        assert!(j.opts.without_timestamps);
        assert_eq!((j.opts.beam_size, j.opts.best_of), (1, 3));
        assert_eq!(j.opts.clip_timestamps, vec![1.5, 3.5]);
        assert_eq!(j.opts.max_segment_chars, Some(42));
        assert_eq!(j.opts.max_context, Some(64));
        assert_eq!(j.opts.audio_ctx, Some(512));
        let nst = |v| {
            job(&[("suppress_non_speech", v)])
                .unwrap()
                .opts
                .suppress_tokens
        };
        assert_eq!((nst("false"), nst("true")), (vec![], vec![-1]));
        assert_eq!(job(&[("audio_ctx", "0")]).unwrap().opts.audio_ctx, None);
        assert_eq!(job(&[("offset_n", "3")]).unwrap().srt_offset, 3);
        assert_eq!(j.srt_offset, 0);
        assert_eq!(j.opts.entropy_threshold, Some(2.4));
        assert_eq!(
            job(&[("max_context", "-1")]).unwrap().opts.max_context,
            None
        );
        assert_eq!(j.opts.log_prob_threshold, Some(-0.5));
        assert_eq!(j.opts.initial_prompt.as_deref(), Some("Hello."));
    }

    #[test]
    fn openai_fields() {
        let j = job(&[
            ("model", "whisper-1"),
            ("language", "German"),
            ("temperature", "0"),
            ("response_format", "srt"),
            ("timestamp_granularities[]", "word"),
            ("timestamp_granularities[]", "segment"),
        ])
        .unwrap();
        assert_eq!(j.opts.language.as_deref(), Some("de"));
        assert_eq!(j.opts.temperatures, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(j.format, ResponseFormat::File(Format::Srt));
        assert!(j.opts.word_timestamps);
        assert!(unknown_fields(&form(&[("model", "x"), ("colour", "red")])) == ["colour"]);
    }

    #[test]
    fn bad_fields_are_400s_that_name_the_field() {
        for (fields, names) in [
            (vec![("response_format", "pdf")], "response_format"),
            (vec![("language", "klingon")], "language"),
            (vec![("temperature", "hot")], "temperature"),
            (vec![("temperature", "NaN")], "temperature"),
            (vec![("temperature", "3")], "temperature"),
            (vec![("temperature_inc", "-0.2")], "temperature_inc"),
            (vec![("beam_size", "2.5")], "beam_size"),
            (vec![("beam_size", "1000")], "beam_size"),
            (vec![("translate", "maybe")], "translate"),
            (vec![("offset_t", "-5")], "offset_t"),
            (vec![("max_len", "-1")], "max_len"),
            (vec![("offset_n", "-1")], "offset_n"),
            (vec![("offset_n", "2.5")], "offset_n"),
            (vec![("max_context", "-2")], "max_context"),
            (vec![("max_context", "1.5")], "max_context"),
            (vec![("audio_ctx", "-1")], "audio_ctx"),
            (vec![("suppress_non_speech", "some")], "suppress_non_speech"),
            (vec![("audio_ctx", "7.5")], "audio_ctx"),
            (vec![("task", "summarize")], "task"),
            (
                vec![("timestamp_granularities[]", "char")],
                "timestamp_granularities",
            ),
            (vec![("diarize", "maybe")], "diarize"),
            (vec![("grammar_penalty", "-1")], "grammar_penalty"),
            (vec![("tinydiarize", "true")], "tinydiarize"),
            (vec![("stream", "maybe")], "stream"),
            (
                vec![("vad_filter", "yes"), ("offset_t", "500")],
                "vad_filter",
            ),
        ] {
            let e = job(&fields).unwrap_err();
            assert_eq!(e.status, 400, "{fields:?}");
            assert!(e.message.contains(names), "{fields:?}: {}", e.message);
        }
    }

    #[test]
    fn answers() {
        let seg = sotto::Segment {
            id: 1,
            seek: 0,
            start: 0.0,
            end: 1.5,
            text: " Hallo Welt.".into(),
            tokens: vec![50364, 2425],
            token_logprobs: vec![0.0, -0.1],
            avg_logprob: -0.1,
            compression_ratio: 1.0,
            no_speech_prob: 0.01,
            temperature: 0.0,
            words: vec![sotto::Word {
                start: 0.1,
                end: 0.6,
                word: " Hallo".into(),
                probability: 0.9,
                tokens: vec![2425],
                token_times: vec![0.1],
            }],
        };
        let t = Transcript {
            language: "de".into(),
            language_probability: 0.97,
            duration: 1.5,
            segments: vec![seg],
        };
        let plain = Extras::default();
        let (body, ct) = ResponseFormat::Json.render(&t, Task::Transcribe, &plain);
        assert_eq!(ct, "application/json");
        assert_eq!(body, br#"{"text":"Hallo Welt."}"#);
        let (body, _) = ResponseFormat::VerboseJson.render(&t, Task::Translate, &plain);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["task"], "translate");
        assert_eq!(v["language"], "german");
        assert_eq!(v["segments"][0]["id"], 0);
        assert_eq!(v["segments"][0]["words"][0]["word"], " Hallo");
        assert_eq!(v["words"][0]["end"], 0.6);
        assert!(v["segments"][0].get("speaker").is_none());
        let (body, ct) = ResponseFormat::Text.render(&t, Task::Transcribe, &plain);
        assert_eq!(
            (body.as_slice(), ct),
            (&b"Hallo Welt.\n"[..], "text/plain; charset=utf-8")
        );
        // Diarized: whisper.cpp's labels in the text, verbose JSON's `speaker` per segment.
        let right = Extras {
            speakers: &[Speaker::Right],
            ..Extras::default()
        };
        let (body, _) = ResponseFormat::Json.render(&t, Task::Transcribe, &right);
        assert_eq!(body, br#"{"text":"(speaker 1) Hallo Welt.\n"}"#);
        let (body, _) = ResponseFormat::VerboseJson.render(&t, Task::Transcribe, &right);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["segments"][0]["speaker"], "1");
        assert_eq!(v["segments"][0]["text"], " Hallo Welt.");
        let (body, _) = ResponseFormat::File(Format::Srt).render(&t, Task::Transcribe, &right);
        let srt = String::from_utf8(body).unwrap();
        assert!(srt.starts_with("1\n"), "{srt}");
        assert!(srt.contains("\n(speaker 1) Hallo Welt.\n"), "{srt}");
        // whisper.cpp's offset_n numbers the cues on from it.
        let later = Extras {
            srt_offset: 7,
            ..Extras::default()
        };
        let (body, _) = ResponseFormat::File(Format::Srt).render(&t, Task::Transcribe, &later);
        assert!(
            body.starts_with(b"8\n00:00:"),
            "{}",
            String::from_utf8_lossy(&body)
        );
        let e = ApiError::bad_request("no file");
        assert_eq!(e.body(Dialect::WhisperCpp), r#"{"error":"no file"}"#);
        let v: serde_json::Value = serde_json::from_str(&e.body(Dialect::OpenAi)).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }

    #[test]
    fn batch_size_comes_from_the_request_else_the_server() {
        let defaults = TranscribeOptions::default();
        let with = |fields: &[(&str, &str)], server: Option<usize>| {
            read_job_with(&form(fields), &defaults, server, false)
        };
        assert_eq!(with(&[], None).unwrap().batch_size, None);
        assert_eq!(with(&[], Some(8)).unwrap().batch_size, Some(8));
        assert_eq!(
            with(&[("batch_size", "4")], None).unwrap().batch_size,
            Some(4)
        );
        assert_eq!(
            with(&[("batch_size", "4")], Some(8)).unwrap().batch_size,
            Some(4)
        );
        assert_eq!(
            with(&[("batch_size", "0")], Some(8)).unwrap().batch_size,
            None
        );
        // A request for a shorter encoder context decodes one window at a time, unless it
        // asks for batches itself (refused later, by name).
        assert_eq!(
            with(&[("audio_ctx", "500")], Some(8)).unwrap().batch_size,
            None
        );
        assert_eq!(
            with(&[("audio_ctx", "500"), ("batch_size", "2")], Some(8))
                .unwrap()
                .batch_size,
            Some(2)
        );
        for bad in ["65", "2.5", "-1", "many"] {
            let e = with(&[("batch_size", bad)], None).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert!(e.message.contains("batch_size"), "{bad}: {}", e.message);
        }
        // Batched mode's VAD defaults (faster-whisper's pipeline), the fields over them.
        let j = with(&[("batch_size", "2")], None).unwrap();
        assert_eq!(j.vad_options, sotto::VadOptions::batched());
        let j = with(&[("batch_size", "2"), ("vad_threshold", "0.3")], None).unwrap();
        assert_eq!(j.vad_options.threshold, 0.3);
        assert_eq!(
            j.vad_options.min_silence_duration_ms,
            sotto::VadOptions::batched().min_silence_duration_ms
        );
        assert_eq!(
            with(&[], None).unwrap().vad_options,
            sotto::VadOptions::default()
        );
    }
}
