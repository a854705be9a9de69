//! sotto's C ABI, declared by `include/sotto.h`: load a model, open sessions, transcribe,
//! read segments and words. The language bindings (`bindings/python`) sit on it.
//!
//! Every function checks its pointers and catches panics: failure is a NULL, negative or
//! NaN return with the reason in [`sotto_last_error`], never an abort. Handles are boxed
//! Rust values; a transcript converts its strings to C once, so the pointers it hands out
//! live as long as it does.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use sotto::{Task, TranscribeOptions};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`; an error or a panic becomes `fail`, with the reason kept for
/// [`sotto_last_error`].
fn guard<T>(fail: T, f: impl FnOnce() -> Result<T, String>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            set_error(&msg);
            fail
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_error(&format!("internal error (a bug in sotto): {what}"));
            fail
        }
    }
}

/// A `const char *` argument as a `&str`; `what` names it in errors.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, String> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map(Some)
        .map_err(|_| format!("{what} is not UTF-8"))
}

/// A handle argument as a reference; `what` names it in errors.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` from this library.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, String> {
    // SAFETY: the caller passes NULL or a pointer this library returned and has not freed.
    unsafe { p.as_ref() }.ok_or_else(|| format!("{what} is NULL"))
}

/// As [`handle`], mutable.
///
/// # Safety
/// `p` is NULL or a live handle of type `T` from this library, used by no other thread.
unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, String> {
    // SAFETY: as `handle`; the header asks that a session be used by one thread at a time.
    unsafe { p.as_mut() }.ok_or_else(|| format!("{what} is NULL"))
}

/// Frees a handle made by [`Box::into_raw`] (a panic in a destructor is caught).
///
/// # Safety
/// `p` is NULL or a live handle of type `T` from this library, not used afterwards.
unsafe fn free<T>(p: *mut T) {
    guard((), || {
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` and is freed once, by the caller's contract.
            drop(unsafe { Box::from_raw(p) });
        }
        Ok(())
    })
}

/// A model, and where it runs as C strings (kept for the model's life).
pub struct SottoModel {
    model: sotto::Model,
    device: CString,
    device_note: CString,
}

/// A session and the threads it was opened with.
pub struct SottoSession(sotto::Session, usize);

/// A transcript with its strings already in C form.
pub struct SottoTranscript {
    transcript: sotto::Transcript,
    text: CString,
    language: CString,
    segments: Vec<CString>,
    words: Vec<Vec<CString>>,
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

impl SottoTranscript {
    fn new(transcript: sotto::Transcript) -> SottoTranscript {
        SottoTranscript {
            text: c_string(&transcript.text()),
            language: c_string(&transcript.language),
            segments: transcript
                .segments
                .iter()
                .map(|s| c_string(&s.text))
                .collect(),
            words: transcript
                .segments
                .iter()
                .map(|s| s.words.iter().map(|w| c_string(&w.word)).collect())
                .collect(),
            transcript,
        }
    }

    fn segment(&self, i: c_int) -> Result<&sotto::Segment, String> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.transcript.segments.get(i))
            .ok_or_else(|| {
                format!(
                    "segment {i} is out of range (the transcript has {})",
                    self.transcript.segments.len()
                )
            })
    }

    fn word(&self, segment: c_int, word: c_int) -> Result<&sotto::Word, String> {
        let s = self.segment(segment)?;
        usize::try_from(word)
            .ok()
            .and_then(|w| s.words.get(w))
            .ok_or_else(|| {
                format!(
                    "word {word} of segment {segment} is out of range (it has {})",
                    s.words.len()
                )
            })
    }
}

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
const PARAMS_V1_SIZE: usize = std::mem::offset_of!(SottoParams, vad);
/// `struct_size` of the second, which ended at `on_segment_transcript` (a pointer: no
/// padding after it).
const PARAMS_V2_SIZE: usize = std::mem::offset_of!(SottoParams, batch_size);
/// `struct_size` of the third, which ended at `batch_size` (padded to the pointer after it).
const PARAMS_V3_SIZE: usize = std::mem::offset_of!(SottoParams, clip_timestamps);
/// `struct_size` of the fourth, which ended at `n_clip_timestamps`, padded to the struct's
/// alignment: that padding is where `repetition_penalty` lies now, so only the bytes up to
/// it are the caller's.
const PARAMS_V4_SIZE: usize = std::mem::offset_of!(SottoParams, repetition_penalty)
    .next_multiple_of(std::mem::align_of::<SottoParams>());

/// `struct_size` of the fifth, which ended at `suppress_regex` (a pointer: no padding).
const PARAMS_V5_SIZE: usize = std::mem::offset_of!(SottoParams, grammar);

/// `struct_size` of the sixth, which ended at `grammar_penalty`, padded to the struct's
/// alignment: `max_context` lies in that padding now, so only the bytes up to it are the
/// caller's.
const PARAMS_V6_SIZE: usize = std::mem::offset_of!(SottoParams, max_context)
    .next_multiple_of(std::mem::align_of::<SottoParams>());

/// The older structs' sizes, and how many of their bytes hold fields.
const OLDER_PARAMS: [(usize, usize); 6] = [
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
    unsafe fn read(p: *const SottoParams) -> Result<SottoParams, String> {
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
    unsafe fn options(&self) -> Result<TranscribeOptions, String> {
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

/// The library version.
#[no_mangle]
pub extern "C" fn sotto_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Why the last failing call on this thread failed (empty before any failure).
#[no_mangle]
pub extern "C" fn sotto_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
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
fn zero_is_none(n: c_int, what: &str, zero: &str) -> Result<Option<usize>, String> {
    match usize::try_from(n) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(format!("params.{what} is {n}; it must be >= 0 (0: {zero})")),
    }
}

/// A threshold for C: its value, or NaN for none.
fn threshold_c(t: Option<f64>) -> f32 {
    t.map_or(f32::NAN, |v| v as f32)
}

/// Loads a model by name or path onto `device` (NULL: auto).
///
/// # Safety
/// `name_or_path` and `device` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_load(
    name_or_path: *const c_char,
    device: *const c_char,
) -> *mut SottoModel {
    // SAFETY: the same contract, and NULL for the precision.
    unsafe { sotto_model_load_ex(name_or_path, device, ptr::null()) }
}

/// [`sotto_model_load`] with the encoder's arithmetic on the CPU: `encoder_precision` as
/// `sotto transcribe --encoder-precision` takes it ("auto" or NULL, "f32", "bf16",
/// "bf16-fast", "int8", "int16"; a level this CPU cannot run is an error).
///
/// # Safety
/// `name_or_path`, `device` and `encoder_precision` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_load_ex(
    name_or_path: *const c_char,
    device: *const c_char,
    encoder_precision: *const c_char,
) -> *mut SottoModel {
    // SAFETY: the same contract, and no flags.
    unsafe { sotto_model_load_with(name_or_path, device, encoder_precision, 0) }
}

/// [`sotto_model_load_with`]'s flags: every logit from the f16 vocabulary rows (`--exact-logits`).
pub const SOTTO_LOAD_EXACT_LOGITS: c_uint = 1;
/// [`sotto_model_load_with`]'s flags: an f16 file's decoder layers quantized to q8_0 as they load
/// (`--quantize-decoder`; the CPU).
pub const SOTTO_LOAD_QUANTIZE_DECODER: c_uint = 2;

/// [`sotto_model_load_ex`] with `flags`, an OR of `SOTTO_LOAD_*` (0: none); other bits are
/// an error.
///
/// # Safety
/// As [`sotto_model_load_ex`].
#[no_mangle]
pub unsafe extern "C" fn sotto_model_load_with(
    name_or_path: *const c_char,
    device: *const c_char,
    encoder_precision: *const c_char,
    flags: c_uint,
) -> *mut SottoModel {
    guard(ptr::null_mut(), || {
        let known = SOTTO_LOAD_EXACT_LOGITS | SOTTO_LOAD_QUANTIZE_DECODER;
        if flags & !known != 0 {
            return Err(format!(
                "flags {flags:#x}: unknown bits {:#x}",
                flags & !known
            ));
        }
        // SAFETY: the arguments are as this function's contract says.
        let name = unsafe { text(name_or_path, "name_or_path") }?.ok_or("name_or_path is NULL")?;
        // SAFETY: as above.
        let precision = unsafe { text(encoder_precision, "encoder_precision") }?;
        let encoder: sotto::EncoderPrecision = precision
            .unwrap_or("auto")
            .parse()
            .map_err(|e| format!("encoder_precision {e}"))?;
        // SAFETY: as above.
        let device = unsafe { text(device, "device") }?.unwrap_or("auto");
        let device: sotto::Device = device.parse().map_err(|e: sotto::Error| e.to_string())?;
        // A named GPU is checked here; auto is resolved by the load, which leaves for the
        // CPU if the GPU it picks cannot take the model.
        if device != sotto::Device::Auto {
            sotto::select_device(device).map_err(|e| e.to_string())?;
        }
        let model = sotto::Model::load_named_with(
            name,
            &sotto::hub::Hub::from_env(),
            &mut sotto::hub::NoProgress,
            device,
            sotto::LoadOptions {
                encoder,
                exact_logits: flags & SOTTO_LOAD_EXACT_LOGITS != 0,
                quantize_decoder: flags & SOTTO_LOAD_QUANTIZE_DECODER != 0,
            },
        )
        .map_err(|e| e.to_string())?;
        let device = c_string(&model.device().to_string());
        let device_note = c_string(model.device_note().unwrap_or(""));
        Ok(Box::into_raw(Box::new(SottoModel {
            model,
            device,
            device_note,
        })))
    })
}

/// The `i`th model name sotto can fetch (tiny.en, tiny, base.en, ..., as `sotto models
/// list` shows them: faster-whisper's `available_models()`), NULL past the last.
#[no_mangle]
pub extern "C" fn sotto_known_model(i: c_int) -> *const c_char {
    static NAMES: std::sync::OnceLock<Vec<CString>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        sotto::hub::known_models()
            .iter()
            .map(|n| c_string(n))
            .collect()
    });
    usize::try_from(i)
        .ok()
        .and_then(|i| names.get(i))
        .map_or(ptr::null(), |n| n.as_ptr())
}

/// The folder or file a model name or path loads from, as [`sotto_model_load`] finds it: a
/// path as it is, else the model cache (`cache_dir`, or NULL for `$SOTTO_CACHE_DIR` and the
/// default), else fetched into it unless `local_only` is not 0 (faster-whisper's
/// `download_model`). Writes the path and a NUL to `buf` when it fits in `cap` bytes and
/// returns its length in bytes (without the NUL; call again with more room when it is `cap`
/// or more); -1 on failure.
///
/// # Safety
/// `name_or_path` and `cache_dir` are NULL or NUL-terminated strings; `buf` is NULL (with
/// `cap` 0) or writable for `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_path(
    name_or_path: *const c_char,
    cache_dir: *const c_char,
    local_only: c_int,
    buf: *mut c_char,
    cap: usize,
) -> c_int {
    guard(-1, || {
        // SAFETY: as this function's contract says.
        let name = unsafe { text(name_or_path, "name_or_path") }?.ok_or("name_or_path is NULL")?;
        // SAFETY: as above.
        let cache = unsafe { text(cache_dir, "cache_dir") }?;
        if buf.is_null() && cap > 0 {
            return Err("buf is NULL".into());
        }
        let mut hub = sotto::hub::Hub::from_env();
        if let Some(dir) = cache {
            hub = hub.with_cache_dir(dir.into());
        }
        let path = if local_only != 0 {
            let given = std::path::Path::new(name);
            match given.exists() {
                true => given.to_path_buf(),
                false => hub.cached(name).ok_or_else(|| {
                    format!(
                        "{name} is neither a path nor in the model cache {} (local only: not \
                         fetched)",
                        hub.models_dir().display()
                    )
                })?,
            }
        } else {
            hub.resolve(name, &mut sotto::hub::NoProgress)
                .map_err(|e| e.to_string())?
        };
        let path = path.to_str().ok_or("the model path is not UTF-8")?;
        let len = c_int::try_from(path.len()).map_err(|_| "the model path is too long")?;
        if path.len() < cap {
            // SAFETY: `buf` is writable for `cap` bytes (the contract), and len + 1 <= cap.
            unsafe {
                ptr::copy_nonoverlapping(path.as_ptr(), buf.cast::<u8>(), path.len());
                *buf.add(path.len()) = 0;
            }
        }
        Ok(len)
    })
}

/// Frees a model (its sessions keep what they need).
///
/// # Safety
/// `model` is NULL or a live model from [`sotto_model_load`], not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_free(model: *mut SottoModel) {
    // SAFETY: as this function's contract says.
    unsafe { free(model) }
}

/// 1 for a multilingual model, 0 for an English-only one, -1 for NULL.
///
/// # Safety
/// `model` is NULL or a live model.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_is_multilingual(model: *const SottoModel) -> c_int {
    guard(-1, || {
        // SAFETY: as this function's contract says.
        let m = unsafe { handle(model, "model") }?;
        Ok(c_int::from(m.model.is_multilingual()))
    })
}

/// Where the model runs: "cpu" or "cuda:N" ("cuda" for GPU 0); NULL for a NULL model.
/// Valid until the model is freed.
///
/// # Safety
/// `model` is NULL or a live model.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_device(model: *const SottoModel) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: as this function's contract says.
        let m = unsafe { handle(model, "model") }?;
        Ok(m.device.as_ptr())
    })
}

/// Why a model loaded for "auto" runs on the CPU although a GPU was found (its upload
/// failed), else ""; NULL for a NULL model. Valid until the model is freed.
///
/// # Safety
/// `model` is NULL or a live model.
#[no_mangle]
pub unsafe extern "C" fn sotto_model_device_note(model: *const SottoModel) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: as this function's contract says.
        let m = unsafe { handle(model, "model") }?;
        Ok(m.device_note.as_ptr())
    })
}

/// A new session of `model` with `n_threads` threads (<= 0: every core).
///
/// # Safety
/// `model` is NULL or a live model.
#[no_mangle]
pub unsafe extern "C" fn sotto_session_new(
    model: *const SottoModel,
    n_threads: c_int,
) -> *mut SottoSession {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let m = unsafe { handle(model, "model") }?;
        let threads = usize::try_from(n_threads)
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let session = m.model.session(threads).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(SottoSession(session, threads))))
    })
}

/// Frees a session and everything it allocated.
///
/// # Safety
/// `session` is NULL or a live session, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_session_free(session: *mut SottoSession) {
    // SAFETY: as this function's contract says.
    unsafe { free(session) }
}

/// Transcribes with `params` (NULL: defaults), reporting segments to its callback.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread; `params` is NULL or
/// points to a `sotto_params` whose strings and `user_data` are valid for the call.
unsafe fn run(
    session: *mut SottoSession,
    samples: &[f32],
    params: *const SottoParams,
) -> Result<*mut SottoTranscript, String> {
    // SAFETY: as this function's contract says.
    unsafe { run_on(session, samples, params, None) }
}

/// [`run`], on the stretches of speech `found` (`[start, end)` in samples) when given
/// instead of those `params.vad` would find.
///
/// # Safety
/// As [`run`].
unsafe fn run_on(
    session: *mut SottoSession,
    samples: &[f32],
    params: *const SottoParams,
    found: Option<Vec<(usize, usize)>>,
) -> Result<*mut SottoTranscript, String> {
    // SAFETY: as this function's contract says.
    let s = unsafe { handle_mut(session, "session") }?;
    // SAFETY: as above.
    let p = unsafe { SottoParams::read(params) }?;
    // SAFETY: the params' strings are valid for the call.
    let opts = unsafe { p.options() }?;
    let mut index = 0;
    let (callback, whole, user_data) = (p.on_segment, p.on_segment_transcript, p.user_data);
    let mut on_segment = |seg: &sotto::Segment| {
        let mut go_on = true;
        if let Some(cb) = callback {
            let text = c_string(&seg.text);
            // SAFETY: the caller's callback, given a string alive for the call and its own
            // user_data, as sotto.h documents.
            go_on &= unsafe { cb(index, seg.start, seg.end, text.as_ptr(), user_data) } != 0;
        }
        if let Some(cb) = whole {
            let one = SottoTranscript::new(sotto::Transcript {
                language: String::new(),
                language_probability: f64::NAN,
                duration: f64::NAN,
                segments: vec![seg.clone()],
            });
            // SAFETY: the caller's callback, given a transcript alive for the call and its
            // own user_data, as sotto.h documents.
            go_on &= unsafe { cb(&one, user_data) } != 0;
        }
        index += 1;
        go_on
    };
    let batch = batch_size(&p)?;
    // SAFETY: `p.vad` is NULL or a live VAD, by sotto.h's contract.
    let chunks = unsafe { speech_of(&p, samples, found, batch) }?;
    let t = match (chunks, batch) {
        (None, n) if n > 0 && !opts.clip_timestamps.is_empty() => {
            s.0.transcribe_batched_clips(samples, &opts, n, &mut on_segment)
                .map(|(t, _)| t)
        }
        (None, 0) => s.0.transcribe(samples, &opts, &mut on_segment),
        (None, _) => {
            return Err(
                "params.batch_size needs params.vad (the VAD cuts the chunks) or \
                 params.clip_timestamps (the clips are the chunks)"
                    .into(),
            )
        }
        (Some(chunks), 0) => {
            s.0.transcribe_chunks_timed(samples, &chunks, &opts, &mut on_segment)
                .map(|(t, _)| t)
        }
        (Some(chunks), n) => {
            s.0.transcribe_batched_chunks(samples, &chunks, &opts, n, &mut on_segment)
                .map(|(t, _)| t)
        }
    }
    .map_err(|e| e.to_string())?;
    Ok(Box::into_raw(Box::new(SottoTranscript::new(t))))
}

/// `params.batch_size`, checked.
fn batch_size(p: &SottoParams) -> Result<usize, String> {
    usize::try_from(p.batch_size)
        .map_err(|_| format!("params.batch_size is {}; it must be >= 0", p.batch_size))
}

/// The stretches of speech a transcription with `p` reads: `found` when given, else what
/// `p.vad` finds (at most 30 s each in the batched mode), else None (all the audio, or
/// its clips).
///
/// # Safety
/// `p.vad` is NULL or a live VAD.
unsafe fn speech_of(
    p: &SottoParams,
    samples: &[f32],
    found: Option<Vec<(usize, usize)>>,
    batch: usize,
) -> Result<Option<Vec<(usize, usize)>>, String> {
    let mut options = p.vad_params.options()?;
    if batch > 0 {
        options.max_speech_duration_s = options.max_speech_duration_s.min(30.0);
    }
    // SAFETY: NULL or a live VAD (the contract).
    Ok(match (found, unsafe { p.vad.as_ref() }) {
        (Some(found), _) => Some(found),
        (None, Some(vad)) => Some(vad.speech(samples, options)?),
        (None, None) => None,
    })
}

/// `n_samples` samples at `samples` as a slice.
///
/// # Safety
/// `samples` is NULL or points to `n_samples` floats alive during the call.
unsafe fn sample_slice<'a>(samples: *const f32, n_samples: usize) -> Result<&'a [f32], String> {
    if samples.is_null() {
        return match n_samples {
            0 => Ok(&[]),
            _ => Err("samples is NULL".into()),
        };
    }
    if n_samples > isize::MAX as usize / std::mem::size_of::<f32>() {
        return Err(format!("n_samples {n_samples} is larger than memory"));
    }
    // SAFETY: non-NULL, `n_samples` floats by the caller's contract, size checked above.
    Ok(unsafe { std::slice::from_raw_parts(samples, n_samples) })
}

/// Decodes an audio file to 16 kHz mono; `*n_samples` of them, freed by
/// [`sotto_audio_free`].
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `n_samples` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sotto_audio_load(path: *const c_char, n_samples: *mut usize) -> *mut f32 {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let path = unsafe { text(path, "path") }?.ok_or("path is NULL")?;
        // SAFETY: as above.
        let n = unsafe { n_samples.as_mut() }.ok_or("n_samples is NULL")?;
        let samples = sotto::audio::load_16k_mono(path).map_err(|e| e.to_string())?;
        *n = samples.len();
        Ok(Box::into_raw(samples.into_boxed_slice()).cast())
    })
}

/// As [`sotto_audio_load`], from a whole file held in memory (`len` bytes at `data`).
///
/// # Safety
/// `data` is NULL or points to `len` readable bytes; `n_samples` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sotto_audio_decode(
    data: *const c_void,
    len: usize,
    n_samples: *mut usize,
) -> *mut f32 {
    // SAFETY: the same contract.
    unsafe { decode_memory(data, len, n_samples, false) }
}

/// As [`sotto_audio_decode`], keeping the first two channels apart (faster-whisper's
/// `decode_audio(split_stereo=True)`): left and right interleaved at 16 kHz, mono input in
/// both; `*n_samples` floats (twice the frames), freed by [`sotto_audio_free`].
///
/// # Safety
/// As [`sotto_audio_decode`].
#[no_mangle]
pub unsafe extern "C" fn sotto_audio_decode_stereo(
    data: *const c_void,
    len: usize,
    n_samples: *mut usize,
) -> *mut f32 {
    // SAFETY: the same contract.
    unsafe { decode_memory(data, len, n_samples, true) }
}

/// The body of the two in-memory decodes: mono, or left and right interleaved.
///
/// # Safety
/// As [`sotto_audio_decode`].
unsafe fn decode_memory(
    data: *const c_void,
    len: usize,
    n_samples: *mut usize,
    stereo: bool,
) -> *mut f32 {
    guard(ptr::null_mut(), || {
        if data.is_null() && len > 0 {
            return Err("data is NULL".into());
        }
        // SAFETY: as this function's contract says.
        let n = unsafe { n_samples.as_mut() }.ok_or("n_samples is NULL")?;
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: non-NULL, `len` readable bytes by the caller's contract.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
        };
        let audio =
            sotto::audio::decode_bytes_16k_within("data", bytes, None, f64::INFINITY, stereo)
                .map_err(|e| e.to_string())?;
        let samples = match (stereo, &audio.stereo) {
            (false, _) => audio.mono,
            (true, Some([l, r])) => interleave(l, r),
            (true, None) => interleave(&audio.mono, &audio.mono),
        };
        *n = samples.len();
        Ok(Box::into_raw(samples.into_boxed_slice()).cast())
    })
}

/// Two channels as left, right pairs.
fn interleave(left: &[f32], right: &[f32]) -> Vec<f32> {
    left.iter().zip(right).flat_map(|(&l, &r)| [l, r]).collect()
}

/// Frees samples from [`sotto_audio_load`] or [`sotto_audio_decode`].
///
/// # Safety
/// `samples` is NULL or came from `sotto_audio_load` with this `n_samples`, and is not used
/// afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_audio_free(samples: *mut f32, n_samples: usize) {
    if !samples.is_null() {
        let slice = ptr::slice_from_raw_parts_mut(samples, n_samples);
        // SAFETY: the boxed slice `sotto_audio_load` leaked, with its length, freed once.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// Transcribes 16 kHz mono samples.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread; `samples` points to
/// `n_samples` floats; `params` is NULL or a valid `sotto_params`.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcribe(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    params: *const SottoParams,
) -> *mut SottoTranscript {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        // SAFETY: as above.
        unsafe { run(session, samples, params) }
    })
}

/// Transcribes the stretches of speech `speech` of 16 kHz mono samples: `n_speech`
/// (start, end) pairs of seconds, in order, as `sotto_vad_detect` gives them (so a caller
/// that ran the VAD does not run it again); `params.vad` is not used. With
/// `params.batch_size` > 0 each stretch must be at most 30 s.
///
/// # Safety
/// As [`sotto_transcribe`]; `speech` is NULL (with `n_speech` 0) or points to `2 · n_speech`
/// doubles.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcribe_speech(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    speech: *const f64,
    n_speech: usize,
    params: *const SottoParams,
) -> *mut SottoTranscript {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        // SAFETY: as above.
        let found = unsafe { stretches(speech, n_speech) }?;
        // SAFETY: as above.
        unsafe { run_on(session, samples, params, Some(found)) }
    })
}

/// `n_speech` (start, end) pairs of seconds at `speech` as stretches of 16 kHz samples.
///
/// # Safety
/// `speech` is NULL (with `n_speech` 0) or points to `2 · n_speech` doubles.
unsafe fn stretches(speech: *const f64, n_speech: usize) -> Result<Vec<(usize, usize)>, String> {
    let pairs = match (speech.is_null(), n_speech) {
        (_, 0) => &[][..],
        (true, _) => return Err("speech is NULL".into()),
        (false, n) if n > isize::MAX as usize / 16 => {
            return Err(format!("n_speech {n} is larger than memory"))
        }
        // SAFETY: non-NULL, 2·n_speech doubles by the caller's contract, size checked.
        (false, n) => unsafe { std::slice::from_raw_parts(speech, 2 * n) },
    };
    let rate = f64::from(sotto::audio::SAMPLE_RATE);
    let at = |t: f64| {
        (t.is_finite() && t >= 0.0)
            .then(|| (t * rate).round() as usize)
            .ok_or_else(|| format!("speech time {t} is not a time in seconds >= 0"))
    };
    pairs
        .chunks_exact(2)
        .map(|p| Ok((at(p[0])?, at(p[1])?)))
        .collect()
}

/// Decodes and transcribes an audio file.
///
/// # Safety
/// As [`sotto_transcribe`]; `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcribe_file(
    session: *mut SottoSession,
    path: *const c_char,
    params: *const SottoParams,
) -> *mut SottoTranscript {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let path = unsafe { text(path, "path") }?.ok_or("path is NULL")?;
        let samples = sotto::audio::load_16k_mono(path).map_err(|e| e.to_string())?;
        // SAFETY: as above.
        unsafe { run(session, &samples, params) }
    })
}

/// `sotto_vad_params` of `sotto.h`, field for field.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SottoVadParams {
    pub struct_size: usize,
    pub threshold: f32,
    pub neg_threshold: f32,
    pub min_speech_duration_ms: c_int,
    pub max_speech_duration_s: f32,
    pub min_silence_duration_ms: c_int,
    pub speech_pad_ms: c_int,
}

impl SottoVadParams {
    /// The options these parameters ask for, checked.
    fn options(&self) -> Result<sotto::VadOptions, String> {
        if self.struct_size != std::mem::size_of::<SottoVadParams>() {
            return Err(format!(
                "vad_params.struct_size is {}, not {}: take them from \
                 sotto_vad_default_params() of the sotto.h this library ships",
                self.struct_size,
                std::mem::size_of::<SottoVadParams>()
            ));
        }
        let probability = |p: f32, what: &str| {
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(format!("vad_params.{what} is {p}; it must be in [0, 1]"))
            }
        };
        let ms = |v: c_int, what: &str| {
            if v >= 0 {
                Ok(f64::from(v))
            } else {
                Err(format!("vad_params.{what} is {v}; it must be >= 0"))
            }
        };
        let max = f64::from(self.max_speech_duration_s);
        if max.is_nan() {
            return Err("vad_params.max_speech_duration_s is NaN".into());
        }
        Ok(sotto::VadOptions {
            threshold: probability(self.threshold, "threshold")?,
            neg_threshold: if self.neg_threshold < 0.0 {
                None
            } else {
                Some(probability(self.neg_threshold, "neg_threshold")?)
            },
            min_speech_duration_ms: ms(self.min_speech_duration_ms, "min_speech_duration_ms")?,
            max_speech_duration_s: if max > 0.0 { max } else { f64::INFINITY },
            min_silence_duration_ms: ms(self.min_silence_duration_ms, "min_silence_duration_ms")?,
            speech_pad_ms: ms(self.speech_pad_ms, "speech_pad_ms")?,
        })
    }
}

/// faster-whisper's `VadOptions` defaults.
#[no_mangle]
pub extern "C" fn sotto_vad_default_params() -> SottoVadParams {
    let d = sotto::VadOptions::default();
    let ms = |v: f64| v as c_int;
    SottoVadParams {
        struct_size: std::mem::size_of::<SottoVadParams>(),
        threshold: d.threshold,
        neg_threshold: d.neg_threshold.unwrap_or(-1.0),
        min_speech_duration_ms: ms(d.min_speech_duration_ms),
        max_speech_duration_s: if d.max_speech_duration_s.is_finite() {
            d.max_speech_duration_s as f32
        } else {
            0.0
        },
        min_silence_duration_ms: ms(d.min_silence_duration_ms),
        speech_pad_ms: ms(d.speech_pad_ms),
    }
}

/// A loaded Silero VAD and the threads its convolutional front end runs on (apart from
/// the sessions', which it must not take).
pub struct SottoVad {
    vad: sotto::Vad,
    pool: rayon::ThreadPool,
}

impl SottoVad {
    /// `[start, end)` sample ranges of speech in `samples`.
    fn speech(
        &self,
        samples: &[f32],
        options: sotto::VadOptions,
    ) -> Result<Vec<(usize, usize)>, String> {
        let mut vad = self.vad.clone();
        vad.options = options;
        self.pool
            .install(|| vad.speech(samples))
            .map_err(|e| e.to_string())
    }
}

/// Stretches of speech found by [`sotto_vad_detect`], in seconds.
pub struct SottoSpeech(Vec<(f64, f64)>);

impl SottoSpeech {
    fn get(&self, i: c_int) -> Result<(f64, f64), String> {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.0.get(i).copied())
            .ok_or_else(|| format!("stretch {i} is out of range (there are {})", self.0.len()))
    }
}

/// Loads the Silero VAD v6 from `path` (NULL: the cached one, fetched on first use), to
/// run on `n_threads` threads (<= 0: every core).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sotto_vad_load(path: *const c_char, n_threads: c_int) -> *mut SottoVad {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let vad = match unsafe { text(path, "path") }? {
            Some(path) => sotto::Vad::load(std::path::Path::new(path)),
            None => {
                sotto::Vad::load_cached(&sotto::hub::Hub::from_env(), &mut sotto::hub::NoProgress)
            }
        }
        .map_err(|e| e.to_string())?;
        let threads = usize::try_from(n_threads).unwrap_or(0);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("sotto-vad-{i}"))
            .build()
            .map_err(|e| format!("cannot start the VAD's threads: {e}"))?;
        Ok(Box::into_raw(Box::new(SottoVad { vad, pool })))
    })
}

/// Frees a VAD.
///
/// # Safety
/// `vad` is NULL or a live VAD, used by no transcription in progress and not afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_vad_free(vad: *mut SottoVad) {
    // SAFETY: as this function's contract says.
    unsafe { free(vad) }
}

/// The stretches of speech in 16 kHz mono samples (params NULL: the defaults).
///
/// # Safety
/// `vad` is NULL or a live VAD; `samples` points to `n_samples` floats; `params` is NULL
/// or a valid `sotto_vad_params`.
#[no_mangle]
pub unsafe extern "C" fn sotto_vad_detect(
    vad: *const SottoVad,
    samples: *const f32,
    n_samples: usize,
    params: *const SottoVadParams,
) -> *mut SottoSpeech {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let vad = unsafe { handle(vad, "vad") }?;
        // SAFETY: as above.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        // SAFETY: as above; the struct's size is checked before its fields are used.
        let options = match unsafe { params.as_ref() } {
            Some(p) => p.options()?,
            None => sotto::VadOptions::default(),
        };
        let rate = f64::from(sotto::audio::SAMPLE_RATE);
        let stretches = vad
            .speech(samples, options)?
            .into_iter()
            .map(|(s, e)| (s as f64 / rate, e as f64 / rate))
            .collect();
        Ok(Box::into_raw(Box::new(SottoSpeech(stretches))))
    })
}

/// # Safety
/// `speech` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn sotto_speech_n(speech: *const SottoSpeech) -> c_int {
    guard(-1, || {
        // SAFETY: as this function's contract says.
        let s = unsafe { handle(speech, "speech") }?;
        c_int::try_from(s.0.len()).map_err(|_| "too many stretches".to_string())
    })
}

/// # Safety
/// `speech` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn sotto_speech_start(speech: *const SottoSpeech, i: c_int) -> f64 {
    guard(f64::NAN, || {
        // SAFETY: as this function's contract says.
        Ok(unsafe { handle(speech, "speech") }?.get(i)?.0)
    })
}

/// # Safety
/// `speech` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn sotto_speech_end(speech: *const SottoSpeech, i: c_int) -> f64 {
    guard(f64::NAN, || {
        // SAFETY: as this function's contract says.
        Ok(unsafe { handle(speech, "speech") }?.get(i)?.1)
    })
}

/// # Safety
/// `speech` is NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_speech_free(speech: *mut SottoSpeech) {
    // SAFETY: as this function's contract says.
    unsafe { free(speech) }
}

/// `sotto_bench` of `sotto.h`, field for field.
#[repr(C)]
pub struct SottoBench {
    pub struct_size: usize,
    pub n_threads: c_int,
    pub encode_ms: f64,
    pub decode_ms: f64,
    pub batch_ms: f64,
    pub prompt_ms: f64,
}

/// The median of `runs` timings of `f` after one untimed call.
fn median_ms(
    runs: usize,
    mut f: impl FnMut() -> Result<std::time::Duration, String>,
) -> Result<f64, String> {
    f()?;
    let mut t = (0..runs).map(|_| f()).collect::<Result<Vec<_>, _>>()?;
    t.sort();
    Ok(t[t.len() / 2].as_secs_f64() * 1e3)
}

/// Times the session's encoder and decoder as whisper.cpp's bench reports them (whisper.rn's
/// `bench()`): an encoder window; a decoder step of one sequence; a step of five beams; a
/// 256-token prompt. Each figure is the median of `runs` (>= 1) after a warm-up.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread; `out` is NULL or points to
/// a `sotto_bench` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn sotto_bench(
    session: *mut SottoSession,
    runs: c_int,
    out: *mut SottoBench,
) -> c_int {
    guard(-1, || {
        // SAFETY: as this function's contract says.
        let s = unsafe { handle_mut(session, "session") }?;
        // SAFETY: as above.
        let out = unsafe { out.as_mut() }.ok_or("out is NULL")?;
        if out.struct_size != std::mem::size_of::<SottoBench>() {
            return Err(format!(
                "out.struct_size is {}, not {}",
                out.struct_size,
                std::mem::size_of::<SottoBench>()
            ));
        }
        let runs = usize::try_from(runs)
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| format!("runs is {runs}; it must be at least 1"))?;
        let model = s.0.model().clone();
        let hp = *model.hparams();
        let tok = model.tokenizer();
        let (sot, eot) = (tok.sot(), tok.eot());
        // What greedy and beam search ask for (the best 1, or 2 per beam) and read: each
        // row as a shortlist record.
        let need = |top: usize| sotto::LogitNeed::Top {
            top,
            text_end: eot,
            never: Vec::new(),
            watch: Vec::new(),
        };
        let lists = |top: usize| {
            let spec = sotto::ShortlistSpec::from_need(hp.n_vocab, eot as usize, &need(top));
            sotto::Shortlists::new(spec)
        };
        let fwd = s.0.forward();
        let e = |e: Box<dyn std::error::Error + Send + Sync>| e.to_string();
        // The encoder's cost does not depend on the values it is given.
        let window = vec![0f32; hp.n_mels * sotto::audio::N_FRAMES];
        let encode_ms = median_ms(runs, || {
            let t = std::time::Instant::now();
            fwd.encode(&window).map_err(e)?;
            Ok(t.elapsed())
        })?;
        // Ordinary text tokens; their values do not change the cost.
        let text = |i: usize| 400 + i as u32;
        let mut logits = vec![0f32; hp.n_vocab];
        let steps = 32.min(hp.n_text_ctx / 4);
        fwd.set_logit_need(&need(1));
        let mut greedy = lists(1);
        let decode_ms = median_ms(runs, || {
            fwd.reset_text();
            fwd.decode_shortlists(&[sot], &[0], &mut greedy)
                .map_err(e)?;
            let t = std::time::Instant::now();
            for i in 0..steps {
                fwd.decode_shortlists(&[text(i)], &[0], &mut greedy)
                    .map_err(e)?;
            }
            Ok(t.elapsed() / steps as u32)
        })?;
        fwd.set_logit_need(&need(10));
        let mut beam = lists(10);
        let beams: Vec<u32> = (0..5).map(text).collect();
        let batch_ms = median_ms(runs, || {
            fwd.reset_text();
            fwd.decode_shortlists(&[sot], &[0], &mut beam).map_err(e)?;
            fwd.reorder(&[0; 5]).map_err(e)?;
            let t = std::time::Instant::now();
            for _ in 0..steps {
                fwd.decode_batch_shortlists(&beams, 5, &mut beam)
                    .map_err(e)?;
            }
            Ok(t.elapsed() / steps as u32)
        })?;
        let prompt: Vec<u32> = std::iter::once(sot)
            .chain((1..256.min(hp.n_text_ctx / 2)).map(text))
            .collect();
        fwd.set_logit_need(&need(1));
        let prompt_ms = median_ms(runs, || {
            fwd.reset_text();
            let t = std::time::Instant::now();
            fwd.decode(&prompt, &[prompt.len() - 1], &mut logits[..hp.n_vocab])
                .map_err(e)?;
            Ok(t.elapsed())
        })?;
        fwd.reset_text();
        *out = SottoBench {
            struct_size: out.struct_size,
            n_threads: c_int::try_from(s.1).unwrap_or(c_int::MAX),
            encode_ms,
            decode_ms,
            batch_ms,
            prompt_ms,
        };
        Ok(0)
    })
}

/// What the library runs on, in one line: its version, the model's device kinds it was
/// built for and the CPU's SIMD path, e.g. `sotto 0.1.0 | CPU avx2 | CUDA: no`.
#[no_mangle]
pub extern "C" fn sotto_system_info() -> *const c_char {
    static INFO: std::sync::OnceLock<CString> = std::sync::OnceLock::new();
    INFO.get_or_init(|| c_string(&sotto::system_info()))
        .as_ptr()
}

/// The most likely language of the first 30 s: a static code; its probability in
/// `*probability` when that is not NULL.
///
/// # Safety
/// As [`sotto_transcribe`]; `probability` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sotto_detect_language(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    probability: *mut f32,
) -> *const c_char {
    // SAFETY: the same contract.
    unsafe { sotto_detect_language_ex(session, samples, n_samples, 1, 0.5, probability) }
}

/// [`sotto_detect_language`] over up to `segments` windows of 30 s, until one's most likely
/// language is above `threshold` (faster-whisper's `language_detection_segments` and
/// `language_detection_threshold`; when none is, the language most often on top).
///
/// # Safety
/// As [`sotto_detect_language`].
#[no_mangle]
pub unsafe extern "C" fn sotto_detect_language_ex(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    segments: c_int,
    threshold: f32,
    probability: *mut f32,
) -> *const c_char {
    // SAFETY: the same contract, and NULL asks for no list.
    unsafe {
        sotto_detect_language_probs(
            session,
            samples,
            n_samples,
            segments,
            threshold,
            probability,
            ptr::null_mut(),
        )
    }
}

/// [`sotto_detect_language_ex`], also writing every language's probability (of the last
/// window read, as faster-whisper's `all_language_probs`) into `lang_probs`, indexed by
/// [`sotto_lang_id`], as whisper.cpp's `whisper_lang_auto_detect` does.
///
/// # Safety
/// As [`sotto_detect_language`]; `lang_probs` is NULL or writable for
/// `sotto_lang_max_id() + 1` floats.
#[no_mangle]
pub unsafe extern "C" fn sotto_detect_language_probs(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    segments: c_int,
    threshold: f32,
    probability: *mut f32,
    lang_probs: *mut f32,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: as this function's contract says.
        let s = unsafe { handle_mut(session, "session") }?;
        // SAFETY: as above.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        let segments = usize::try_from(segments)
            .map_err(|_| format!("segments is {segments}; it must be at least 1"))?;
        let d = (s.0)
            .detect_language_with(samples, segments, f64::from(threshold))
            .map_err(|e| e.to_string())?;
        // SAFETY: NULL or writable, by this function's contract.
        unsafe { write_detection(&d, probability, lang_probs) }
    })
}

/// The language [`sotto_transcribe`] with `params` would decode `samples` in, without
/// transcribing: `params.language` when set (probability 1), else detected as transcribing
/// detects it (one window at a time: from the first clip's start, over `chunk_length` or
/// `audio_ctx` windows, `language_detection_segments` of them, the log-mel scaled over all
/// the speech; with `params.batch_size`: on the chunks' log-mels joined, as faster-whisper's
/// batched mode), on the speech `params.vad` finds when set. A static code, its probability
/// in `*probability` when that is not NULL; "en" for English-only models; "" and 0 when
/// the VAD finds no speech. Every language's probability goes to `lang_probs` (indexed by
/// [`sotto_lang_id`]) when detected, all 0 when given or not detected. For a caller that
/// must name the language before the segments come, as faster-whisper's `transcribe()`
/// (its `info.language_probability` and `info.all_language_probs`).
///
/// # Safety
/// As [`sotto_transcribe`]; `probability` is NULL or writable; `lang_probs` NULL or
/// writable for `sotto_lang_max_id() + 1` floats.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcribe_language(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    params: *const SottoParams,
    probability: *mut f32,
    lang_probs: *mut f32,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: as this function's contract says.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        // SAFETY: as above.
        unsafe { language_on(session, samples, params, None, probability, lang_probs) }
    })
}

/// [`sotto_transcribe_language`] for [`sotto_transcribe_speech`]: the language its
/// transcription of the stretches `speech` would decode in (`params.vad` not used).
///
/// # Safety
/// As [`sotto_transcribe_speech`]; `probability` and `lang_probs` as
/// [`sotto_transcribe_language`] takes them.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature: sotto_transcribe_speech's, and outputs
pub unsafe extern "C" fn sotto_transcribe_speech_language(
    session: *mut SottoSession,
    samples: *const f32,
    n_samples: usize,
    speech: *const f64,
    n_speech: usize,
    params: *const SottoParams,
    probability: *mut f32,
    lang_probs: *mut f32,
) -> *const c_char {
    guard(ptr::null(), || {
        // SAFETY: as this function's contract says.
        let samples = unsafe { sample_slice(samples, n_samples) }?;
        // SAFETY: as above.
        let found = unsafe { stretches(speech, n_speech) }?;
        // SAFETY: as above.
        unsafe {
            language_on(
                session,
                samples,
                params,
                Some(found),
                probability,
                lang_probs,
            )
        }
    })
}

/// The body of the two language calls, on the stretches `found` when given.
///
/// # Safety
/// As [`sotto_transcribe_language`].
unsafe fn language_on(
    session: *mut SottoSession,
    samples: &[f32],
    params: *const SottoParams,
    found: Option<Vec<(usize, usize)>>,
    probability: *mut f32,
    lang_probs: *mut f32,
) -> Result<*const c_char, String> {
    // SAFETY: as this function's contract says.
    let s = unsafe { handle_mut(session, "session") }?;
    // SAFETY: as above.
    let p = unsafe { SottoParams::read(params) }?;
    // SAFETY: the params' strings are valid for the call.
    let opts = unsafe { p.options() }?;
    let batch = batch_size(&p)?;
    // SAFETY: `p.vad` is NULL or a live VAD, by sotto.h's contract.
    let speech = unsafe { speech_of(&p, samples, found, batch) }?;
    let d = (s.0)
        .transcription_language(samples, speech.as_deref(), &opts, batch)
        .map_err(|e| e.to_string())?;
    // SAFETY: NULL or writable, by this function's contract.
    unsafe { write_detection(&d, probability, lang_probs) }
}

/// A language's static C code, its probability to `*probability` and every language's to
/// `lang_probs` by id (all 0 when `d` has no list), each when not NULL.
///
/// # Safety
/// `probability` is NULL or writable; `lang_probs` NULL or writable for
/// [`LANGUAGE_CODES_C`]`.len()` floats.
unsafe fn write_detection(
    d: &sotto::LanguageDetection,
    probability: *mut f32,
    lang_probs: *mut f32,
) -> Result<*const c_char, String> {
    // SAFETY: NULL or writable, by this function's contract.
    if let Some(out) = unsafe { probability.as_mut() } {
        *out = d.probability as f32;
    }
    if !lang_probs.is_null() {
        // SAFETY: writable for this many floats, by this function's contract.
        let out = unsafe { std::slice::from_raw_parts_mut(lang_probs, LANGUAGE_CODES_C.len()) };
        out.fill(0.0);
        for &(code, p) in &d.all {
            if let Some(i) = sotto::LANGUAGES.iter().position(|&c| c == code) {
                out[i] = p as f32;
            }
        }
    }
    if d.language.is_empty() {
        return Ok(c"".as_ptr());
    }
    static_language_code(d.language)
}

/// The largest language id: `lang_probs` arrays hold `sotto_lang_max_id() + 1` floats (as
/// whisper.cpp's `whisper_lang_max_id`). Ids follow Whisper's language tokens: 0 is "en".
#[no_mangle]
pub extern "C" fn sotto_lang_max_id() -> c_int {
    LANGUAGE_CODES_C.len() as c_int - 1
}

/// The static code of language `id` ("en" for 0), NULL when out of range.
#[no_mangle]
pub extern "C" fn sotto_lang_str(id: c_int) -> *const c_char {
    usize::try_from(id)
        .ok()
        .and_then(|i| LANGUAGE_CODES_C.get(i))
        .map_or(ptr::null(), |c| c.as_ptr().cast())
}

/// The id of a language code or English name ("de" or "german"), -1 when unknown or NULL.
///
/// # Safety
/// `code` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn sotto_lang_id(code: *const c_char) -> c_int {
    if code.is_null() {
        return -1;
    }
    // SAFETY: non-NULL and NUL-terminated, by this function's contract.
    let code = unsafe { CStr::from_ptr(code) }.to_string_lossy();
    sotto::language_code(&code)
        .and_then(|c| sotto::LANGUAGES.iter().position(|&l| l == c))
        .map_or(-1, |i| i as c_int)
}

/// The static C string of a language code.
fn static_language_code(language: &str) -> Result<*const c_char, String> {
    sotto::LANGUAGES
        .iter()
        .position(|&c| c == language)
        .map(|i| LANGUAGE_CODES_C[i].as_ptr().cast())
        .ok_or_else(|| format!("unknown language {language}"))
}

/// [`sotto::LANGUAGES`], NUL-terminated for C.
const LANGUAGE_CODES_C: [&str; 100] = {
    macro_rules! c {
        ($($code:literal),*) => { [$(concat!($code, "\0")),*] };
    }
    c!(
        "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
        "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
        "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
        "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
        "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
        "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
        "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"
    )
};

/// Frees a transcript and its strings.
///
/// # Safety
/// `t` is NULL or a live transcript, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_free(t: *mut SottoTranscript) {
    // SAFETY: as this function's contract says.
    unsafe { free(t) }
}

/// Reads a transcript: `fail` and the reason on a NULL handle or a bad index.
///
/// # Safety
/// `t` is NULL or a live transcript.
unsafe fn read<R>(
    t: *const SottoTranscript,
    fail: R,
    f: impl FnOnce(&SottoTranscript) -> Result<R, String>,
) -> R {
    guard(fail, || {
        // SAFETY: as this function's contract says.
        f(unsafe { handle(t, "transcript") }?)
    })
}

/// # Safety
/// `t` is NULL or a live transcript; the string lives as long as it.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_text(t: *const SottoTranscript) -> *const c_char {
    // SAFETY: as this function's contract says.
    unsafe { read(t, ptr::null(), |t| Ok(t.text.as_ptr())) }
}

/// # Safety
/// `t` is NULL or a live transcript; the string lives as long as it.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_language(t: *const SottoTranscript) -> *const c_char {
    // SAFETY: as this function's contract says.
    unsafe { read(t, ptr::null(), |t| Ok(t.language.as_ptr())) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_duration(t: *const SottoTranscript) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.transcript.duration)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_n_segments(t: *const SottoTranscript) -> c_int {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, -1, |t| {
            c_int::try_from(t.segments.len()).map_err(|_| "too many segments".to_string())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript; the string lives as long as it.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_text(
    t: *const SottoTranscript,
    segment: c_int,
) -> *const c_char {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, ptr::null(), |t| {
            t.segment(segment)?;
            Ok(t.segments[segment as usize].as_ptr())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_start(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.start)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_end(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.end)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_no_speech_prob(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.no_speech_prob)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_language_probability(t: *const SottoTranscript) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.transcript.language_probability)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_avg_logprob(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.avg_logprob)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_compression_ratio(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.compression_ratio)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_temperature(
    t: *const SottoTranscript,
    segment: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.segment(segment)?.temperature)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_seek(
    t: *const SottoTranscript,
    segment: c_int,
) -> c_int {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, -1, |t| {
            c_int::try_from(t.segment(segment)?.seek).map_err(|_| "seek out of range".to_string())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_n_tokens(
    t: *const SottoTranscript,
    segment: c_int,
) -> c_int {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, -1, |t| {
            c_int::try_from(t.segment(segment)?.tokens.len())
                .map_err(|_| "too many tokens".to_string())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_segment_token(
    t: *const SottoTranscript,
    segment: c_int,
    token: c_int,
) -> c_int {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, -1, |t| {
            let s = t.segment(segment)?;
            usize::try_from(token)
                .ok()
                .and_then(|k| s.tokens.get(k))
                .map(|&id| id as c_int)
                .ok_or_else(|| {
                    format!(
                        "token {token} of segment {segment} is out of range (it has {})",
                        s.tokens.len()
                    )
                })
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_n_words(
    t: *const SottoTranscript,
    segment: c_int,
) -> c_int {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, -1, |t| {
            c_int::try_from(t.segment(segment)?.words.len())
                .map_err(|_| "too many words".to_string())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript; the string lives as long as it.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_word_text(
    t: *const SottoTranscript,
    segment: c_int,
    word: c_int,
) -> *const c_char {
    // SAFETY: as this function's contract says.
    unsafe {
        read(t, ptr::null(), |t| {
            t.word(segment, word)?;
            Ok(t.words[segment as usize][word as usize].as_ptr())
        })
    }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_word_start(
    t: *const SottoTranscript,
    segment: c_int,
    word: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.word(segment, word)?.start)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_word_end(
    t: *const SottoTranscript,
    segment: c_int,
    word: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.word(segment, word)?.end)) }
}

/// # Safety
/// `t` is NULL or a live transcript.
#[no_mangle]
pub unsafe extern "C" fn sotto_transcript_word_probability(
    t: *const SottoTranscript,
    segment: c_int,
    word: c_int,
) -> f64 {
    // SAFETY: as this function's contract says.
    unsafe { read(t, f64::NAN, |t| Ok(t.word(segment, word)?.probability)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_codes_match_the_tokenizer() {
        for (c, code) in LANGUAGE_CODES_C.iter().zip(sotto::LANGUAGES) {
            assert_eq!(c.strip_suffix('\0'), Some(code));
        }
    }

    #[test]
    fn params_are_checked() {
        let mut p = sotto_default_params();
        // SAFETY: no strings set.
        let opts = unsafe { p.options() }.unwrap();
        assert_eq!(opts.temperatures, TranscribeOptions::default().temperatures);
        assert_eq!(opts.beam_size, 5);
        p.beam_size = 0;
        // SAFETY: as above.
        assert!(unsafe { p.options() }.unwrap_err().contains("beam_size"));
        p.beam_size = 1;
        p.temperature = f32::NAN;
        // SAFETY: as above.
        assert!(unsafe { p.options() }.unwrap_err().contains("temperature"));
        p.temperature = 0.0;
        p.language = c"Deutsch".as_ptr();
        // SAFETY: a static string.
        assert!(unsafe { p.options() }.unwrap_err().contains("language"));
        p.language = c"German".as_ptr();
        // SAFETY: as above.
        assert_eq!(
            unsafe { p.options() }.unwrap().language.as_deref(),
            Some("de")
        );
        p.struct_size = 8;
        // SAFETY: a whole struct, whatever size it claims.
        let err = unsafe { SottoParams::read(&p) }.err().unwrap();
        assert!(err.contains("struct_size"), "{err}");
        p.struct_size = PARAMS_V1_SIZE;
        // SAFETY: as above; the VAD fields beyond the old size take the defaults.
        p.vad = std::ptr::NonNull::dangling().as_ptr();
        let read = unsafe { SottoParams::read(&p) }.unwrap();
        assert!(read.vad.is_null());
        assert_eq!(read.struct_size, std::mem::size_of::<SottoParams>());
        // The second header's struct: batch_size keeps its default.
        p.struct_size = PARAMS_V2_SIZE;
        p.vad = std::ptr::null();
        p.max_len = 42;
        p.batch_size = 8;
        // SAFETY: as above.
        let read = unsafe { SottoParams::read(&p) }.unwrap();
        assert_eq!((read.max_len, read.batch_size), (42, 0));
        // The third's: the clips keep theirs.
        p.struct_size = PARAMS_V3_SIZE;
        p.n_clip_timestamps = 2;
        // SAFETY: as above.
        let read = unsafe { SottoParams::read(&p) }.unwrap();
        assert_eq!((read.batch_size, read.n_clip_timestamps), (8, 0));
        // Clip timestamps are read and checked.
        let mut p = sotto_default_params();
        let clips = [1.5f32, 4.0, 7.0];
        (p.clip_timestamps, p.n_clip_timestamps) = (clips.as_ptr(), 3);
        // SAFETY: three floats at clip_timestamps.
        assert_eq!(
            unsafe { p.options() }.unwrap().clip_timestamps,
            vec![1.5, 4.0, 7.0]
        );
        p.n_clip_timestamps = -1;
        // SAFETY: as above.
        assert!(unsafe { p.options() }
            .unwrap_err()
            .contains("n_clip_timestamps"));
        (p.clip_timestamps, p.n_clip_timestamps) = (std::ptr::null(), 2);
        // SAFETY: NULL is checked.
        assert!(unsafe { p.options() }.unwrap_err().contains("NULL"));
    }
}
