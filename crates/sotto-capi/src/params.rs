//! `SottoParams`, the C side of `TranscribeOptions`: its layout across versions (older,
//! shorter structs are still read), its defaults, and its conversion.

use super::*;

/// Called as each segment is finished; 0 stops the transcription.
pub type SegmentCallback = unsafe extern "C" fn(
    index: c_int,
    start: f64,
    end: f64,
    text: *const c_char,
    user_data: *mut c_void,
) -> c_int;

/// Called as each segment is finished with a transcript of that segment alone; 0 stops
/// the transcription.
pub type SegmentTranscriptCallback =
    unsafe extern "C" fn(segment: *const SottoTranscript, user_data: *mut c_void) -> c_int;

/// `sotto_params` of `sotto.h`, field for field. Fields are only ever appended: a caller
/// built against an older header passes a smaller `struct_size`, and the fields it lacks
/// keep their defaults.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SottoParams {
    pub struct_size: usize,
    pub language: *const c_char,
    pub translate: c_int,
    pub beam_size: c_int,
    pub best_of: c_int,
    pub temperature: f32,
    pub temperature_inc: f32,
    pub no_timestamps: c_int,
    pub word_timestamps: c_int,
    pub initial_prompt: *const c_char,
    pub on_segment: Option<SegmentCallback>,
    pub user_data: *mut c_void,
    // Appended after the first header: an older caller's struct ends above.
    pub vad: *const SottoVad,
    pub vad_params: SottoVadParams,
    pub condition_on_previous_text: c_int,
    pub patience: f32,
    pub length_penalty: f32,
    pub compression_ratio_threshold: f32,
    pub log_prob_threshold: f32,
    pub no_speech_threshold: f32,
    pub hotwords: *const c_char,
    pub max_len: c_int,
    pub on_segment_transcript: Option<SegmentTranscriptCallback>,
    pub batch_size: c_int,
    pub clip_timestamps: *const f32,
    pub n_clip_timestamps: c_int,
    pub repetition_penalty: f32,
    pub no_repeat_ngram_size: c_int,
    pub multilingual: c_int,
    pub language_detection_threshold: f32,
    pub language_detection_segments: c_int,
    pub suppress_regex: *const c_char,
    pub grammar: *const c_char,
    pub grammar_rule: *const c_char,
    pub grammar_penalty: f32,
    pub max_context: c_int,
    pub seed: u64,
    pub entropy_threshold: f32,
    pub audio_ctx: c_int,
    pub chunk_length: c_int,
    pub prompt_reset_on_temperature: f32,
    pub suppress_blank: c_int,
    pub max_initial_timestamp: f32,
    pub max_new_tokens: c_int,
    pub hallucination_silence_threshold: f32,
    pub prefix: *const c_char,
    pub prepend_punctuations: *const c_char,
    pub append_punctuations: *const c_char,
    pub suppress_tokens: *const c_int,
    pub n_suppress_tokens: c_int,
}

/// `struct_size` of the first `sotto_params`, which ended at `user_data`.
pub(crate) const PARAMS_V1_SIZE: usize = std::mem::offset_of!(SottoParams, vad);
/// `struct_size` of the second, which ended at `on_segment_transcript` (a pointer: no
/// padding after it).
pub(crate) const PARAMS_V2_SIZE: usize = std::mem::offset_of!(SottoParams, batch_size);
/// `struct_size` of the third, which ended at `batch_size` (padded to the pointer after it).
pub(crate) const PARAMS_V3_SIZE: usize = std::mem::offset_of!(SottoParams, clip_timestamps);
/// `struct_size` of the fourth, which ended at `n_clip_timestamps`, padded to the struct's
/// alignment: that padding is where `repetition_penalty` lies now, so only the bytes up to
/// it are the caller's.
pub(crate) const PARAMS_V4_SIZE: usize = std::mem::offset_of!(SottoParams, repetition_penalty)
    .next_multiple_of(std::mem::align_of::<SottoParams>());

/// `struct_size` of the fifth, which ended at `suppress_regex` (a pointer: no padding).
pub(crate) const PARAMS_V5_SIZE: usize = std::mem::offset_of!(SottoParams, grammar);

/// `struct_size` of the sixth, which ended at `grammar_penalty`, padded to the struct's
/// alignment: `max_context` lies in that padding now, so only the bytes up to it are the
/// caller's.
pub(crate) const PARAMS_V6_SIZE: usize = std::mem::offset_of!(SottoParams, max_context)
    .next_multiple_of(std::mem::align_of::<SottoParams>());

/// The older structs' sizes, and how many of their bytes hold fields.
pub(crate) const OLDER_PARAMS: [(usize, usize); 6] = [
    (PARAMS_V1_SIZE, PARAMS_V1_SIZE),
    (PARAMS_V2_SIZE, PARAMS_V2_SIZE),
    (PARAMS_V3_SIZE, PARAMS_V3_SIZE),
    (
        PARAMS_V4_SIZE,
        std::mem::offset_of!(SottoParams, repetition_penalty),
    ),
    (PARAMS_V5_SIZE, PARAMS_V5_SIZE),
    (
        PARAMS_V6_SIZE,
        std::mem::offset_of!(SottoParams, max_context),
    ),
];

impl SottoParams {
    /// The caller's params, NULL meaning the defaults; fields beyond its `struct_size`
    /// keep their defaults.
    ///
    /// # Safety
    /// `p` is NULL or points to a `sotto_params` of at least its own `struct_size` bytes.
    pub(crate) unsafe fn read(p: *const SottoParams) -> Result<SottoParams, String> {
        let mut params = sotto_default_params();
        if p.is_null() {
            return Ok(params);
        }
        // SAFETY: every version of the struct begins with its size.
        let size = unsafe { ptr::read_unaligned(p.cast::<usize>()) };
        let fields = match OLDER_PARAMS.iter().find(|(s, _)| *s == size) {
            Some(&(_, fields)) => fields,
            None if size == std::mem::size_of::<SottoParams>() => size,
            None => {
                return Err(format!(
                    "params.struct_size is {size}, not {}: take the params from \
                     sotto_default_params() of the sotto.h this library ships",
                    std::mem::size_of::<SottoParams>()
                ))
            }
        };
        // SAFETY: the caller's struct holds `size` >= `fields` bytes, whose fields are a
        // prefix of ours (fields are only appended), and `params` is a plain-data struct
        // of at least that size.
        unsafe {
            ptr::copy_nonoverlapping(
                p.cast::<u8>(),
                ptr::addr_of_mut!(params).cast::<u8>(),
                fields,
            )
        };
        params.struct_size = std::mem::size_of::<SottoParams>();
        Ok(params)
    }
}

impl SottoParams {
    /// The options these parameters ask for.
    ///
    /// # Safety
    /// The string fields are NULL or NUL-terminated strings alive during the call.
    pub(crate) unsafe fn options(&self) -> Result<TranscribeOptions, String> {
        let mut opts = TranscribeOptions::default();
        // SAFETY: string fields as this function's contract says.
        if let Some(lang) = unsafe { text(self.language, "params.language") }? {
            if lang != "auto" {
                let code = sotto::language_code(lang)
                    .ok_or_else(|| format!("params.language {lang:?} is not a Whisper language"))?;
                opts.language = Some(code.to_string());
            }
        }
        // SAFETY: as above.
        opts.initial_prompt = unsafe { text(self.initial_prompt, "params.initial_prompt") }?
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        if self.translate != 0 {
            opts.task = Task::Translate;
        }
        let count = |n: c_int, what: &str| {
            usize::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("params.{what} is {n}; it must be at least 1"))
        };
        opts.beam_size = count(self.beam_size, "beam_size")?;
        opts.best_of = count(self.best_of, "best_of")?;
        let (t, inc) = (f64::from(self.temperature), f64::from(self.temperature_inc));
        if !(t.is_finite() && t >= 0.0 && inc.is_finite() && inc >= 0.0) {
            return Err(format!(
                "params.temperature {t} and temperature_inc {inc} must be numbers >= 0"
            ));
        }
        opts.temperatures = sotto::fallback_temperatures(t, inc);
        opts.without_timestamps = self.no_timestamps != 0;
        opts.word_timestamps = self.word_timestamps != 0;
        opts.condition_on_previous_text = self.condition_on_previous_text != 0;
        let positive = |v: f32, what: &str| {
            if v.is_finite() && v > 0.0 {
                Ok(f64::from(v))
            } else {
                Err(format!("params.{what} is {v}; it must be a number > 0"))
            }
        };
        opts.patience = positive(self.patience, "patience")?;
        opts.length_penalty = positive(self.length_penalty, "length_penalty")?;
        let threshold = |v: f32, what: &str| match v {
            v if v.is_nan() => Ok(None),
            v if v.is_finite() => Ok(Some(f64::from(v))),
            v => Err(format!("params.{what} is {v}; a number, or NaN for none")),
        };
        opts.compression_ratio_threshold = threshold(
            self.compression_ratio_threshold,
            "compression_ratio_threshold",
        )?;
        opts.log_prob_threshold = threshold(self.log_prob_threshold, "log_prob_threshold")?;
        opts.no_speech_threshold = threshold(self.no_speech_threshold, "no_speech_threshold")?;
        // SAFETY: string fields as this function's contract says.
        opts.hotwords = unsafe { text(self.hotwords, "params.hotwords") }?
            .filter(|h| !h.is_empty())
            .map(str::to_string);
        opts.clip_timestamps = match (self.clip_timestamps.is_null(), self.n_clip_timestamps) {
            (_, 0) => Vec::new(),
            (true, n) => return Err(format!("params.clip_timestamps is NULL for {n} times")),
            (false, n) if !(1..=1 << 20).contains(&n) => {
                return Err(format!("params.n_clip_timestamps is {n}"))
            }
            // SAFETY: non-NULL, n floats by sotto.h's contract, n checked above.
            (false, n) => unsafe { std::slice::from_raw_parts(self.clip_timestamps, n as usize) }
                .iter()
                .map(|&t| f64::from(t))
                .collect(),
        };
        // SAFETY: string fields as this function's contract says.
        opts.suppress_regex = unsafe { text(self.suppress_regex, "params.suppress_regex") }?
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        // SAFETY: string fields as this function's contract says.
        opts.grammar = unsafe { text(self.grammar, "params.grammar") }?
            .filter(|g| !g.is_empty())
            .map(str::to_string);
        // SAFETY: as above.
        if let Some(rule) = unsafe { text(self.grammar_rule, "params.grammar_rule") }? {
            opts.grammar_rule = rule.to_string();
        }
        opts.grammar_penalty = f64::from(self.grammar_penalty);
        opts.max_context = match self.max_context {
            -1 => None,
            n => Some(usize::try_from(n).map_err(|_| {
                format!("params.max_context is {n}; it must be >= 0, or -1 for the default")
            })?),
        };
        opts.seed = self.seed;
        opts.entropy_threshold = threshold(self.entropy_threshold, "entropy_threshold")?;
        opts.audio_ctx = zero_is_none(self.audio_ctx, "audio_ctx", "whole windows")?;
        opts.chunk_length = zero_is_none(self.chunk_length, "chunk_length", "30 s")?;
        if !self.prompt_reset_on_temperature.is_finite() {
            return Err(format!(
                "params.prompt_reset_on_temperature is {}; it must be a number",
                self.prompt_reset_on_temperature
            ));
        }
        opts.prompt_reset_on_temperature = f64::from(self.prompt_reset_on_temperature);
        opts.suppress_blank = self.suppress_blank != 0;
        let t = self.max_initial_timestamp;
        if !(t.is_finite() && t >= 0.0) {
            return Err(format!(
                "params.max_initial_timestamp is {t}; it must be seconds >= 0"
            ));
        }
        opts.max_initial_timestamp = f64::from(t);
        opts.max_new_tokens = zero_is_none(self.max_new_tokens, "max_new_tokens", "no limit")?;
        opts.hallucination_silence_threshold = threshold(
            self.hallucination_silence_threshold,
            "hallucination_silence_threshold",
        )?;
        // SAFETY: string fields as this function's contract says.
        opts.prefix = unsafe { text(self.prefix, "params.prefix") }?
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        // SAFETY: as above.
        if let Some(p) = unsafe { text(self.prepend_punctuations, "params.prepend_punctuations") }?
        {
            opts.prepend_punctuations = p.to_string();
        }
        // SAFETY: as above.
        if let Some(p) = unsafe { text(self.append_punctuations, "params.append_punctuations") }? {
            opts.append_punctuations = p.to_string();
        }
        if !self.suppress_tokens.is_null() {
            let n = usize::try_from(self.n_suppress_tokens)
                .ok()
                .filter(|&n| n <= 1 << 20)
                .ok_or_else(|| format!("params.n_suppress_tokens is {}", self.n_suppress_tokens))?;
            // SAFETY: non-NULL, n ints by sotto.h's contract, n checked above.
            let ids = unsafe { std::slice::from_raw_parts(self.suppress_tokens, n) };
            opts.suppress_tokens = ids.iter().map(|&t| i64::from(t)).collect();
        }
        opts.repetition_penalty = positive(self.repetition_penalty, "repetition_penalty")?;
        opts.no_repeat_ngram_size = usize::try_from(self.no_repeat_ngram_size).map_err(|_| {
            format!(
                "params.no_repeat_ngram_size is {}; it must be >= 0",
                self.no_repeat_ngram_size
            )
        })?;
        opts.multilingual = self.multilingual != 0;
        if self.language_detection_threshold.is_nan() {
            return Err("params.language_detection_threshold is NaN".into());
        }
        opts.language_detection_threshold = f64::from(self.language_detection_threshold);
        opts.language_detection_segments = count(
            self.language_detection_segments,
            "language_detection_segments",
        )?;
        opts.max_segment_chars = match self.max_len {
            0 => None,
            n => Some(
                usize::try_from(n)
                    .map_err(|_| format!("params.max_len is {n}; it must be >= 0"))?,
            ),
        };
        Ok(opts)
    }
}

/// faster-whisper's `transcribe()` defaults.
#[no_mangle]
pub extern "C" fn sotto_default_params() -> SottoParams {
    let d = TranscribeOptions::default();
    SottoParams {
        struct_size: std::mem::size_of::<SottoParams>(),
        language: ptr::null(),
        translate: 0,
        beam_size: c_int::try_from(d.beam_size).unwrap_or(5),
        best_of: c_int::try_from(d.best_of).unwrap_or(5),
        temperature: 0.0,
        temperature_inc: 0.2,
        no_timestamps: 0,
        word_timestamps: 0,
        initial_prompt: ptr::null(),
        on_segment: None,
        user_data: ptr::null_mut(),
        vad: ptr::null(),
        vad_params: sotto_vad_default_params(),
        condition_on_previous_text: c_int::from(d.condition_on_previous_text),
        patience: d.patience as f32,
        length_penalty: d.length_penalty as f32,
        compression_ratio_threshold: threshold_c(d.compression_ratio_threshold),
        log_prob_threshold: threshold_c(d.log_prob_threshold),
        no_speech_threshold: threshold_c(d.no_speech_threshold),
        hotwords: ptr::null(),
        max_len: 0,
        on_segment_transcript: None,
        batch_size: 0,
        clip_timestamps: ptr::null(),
        n_clip_timestamps: 0,
        repetition_penalty: d.repetition_penalty as f32,
        no_repeat_ngram_size: c_int::try_from(d.no_repeat_ngram_size).unwrap_or(0),
        multilingual: c_int::from(d.multilingual),
        language_detection_threshold: d.language_detection_threshold as f32,
        language_detection_segments: c_int::try_from(d.language_detection_segments).unwrap_or(1),
        suppress_regex: ptr::null(),
        grammar: ptr::null(),
        grammar_rule: ptr::null(),
        grammar_penalty: d.grammar_penalty as f32,
        max_context: -1,
        seed: d.seed,
        entropy_threshold: threshold_c(d.entropy_threshold),
        audio_ctx: 0,
        chunk_length: 0,
        prompt_reset_on_temperature: d.prompt_reset_on_temperature as f32,
        suppress_blank: c_int::from(d.suppress_blank),
        max_initial_timestamp: d.max_initial_timestamp as f32,
        max_new_tokens: 0,
        hallucination_silence_threshold: threshold_c(d.hallucination_silence_threshold),
        prefix: ptr::null(),
        prepend_punctuations: ptr::null(),
        append_punctuations: ptr::null(),
        suppress_tokens: ptr::null(),
        n_suppress_tokens: 0,
    }
}

/// A count where 0 means the default (`zero`, named in the error): None for 0, an error
/// naming `params.{what}` for a negative value.
pub(crate) fn zero_is_none(n: c_int, what: &str, zero: &str) -> Result<Option<usize>, String> {
    match usize::try_from(n) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(format!("params.{what} is {n}; it must be >= 0 (0: {zero})")),
    }
}

/// A threshold for C: its value, or NaN for none.
pub(crate) fn threshold_c(t: Option<f64>) -> f32 {
    t.map_or(f32::NAN, |v| v as f32)
}

/// `params.batch_size`, checked.
pub(crate) fn batch_size(p: &SottoParams) -> Result<usize, String> {
    usize::try_from(p.batch_size)
        .map_err(|_| format!("params.batch_size is {}; it must be >= 0", p.batch_size))
}
