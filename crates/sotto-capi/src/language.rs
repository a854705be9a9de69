//! Language detection, transcription in a detected language, and the language table.

use super::*;

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
pub(crate) unsafe fn language_on(
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
pub(crate) unsafe fn write_detection(
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
pub(crate) fn static_language_code(language: &str) -> Result<*const c_char, String> {
    sotto::LANGUAGES
        .iter()
        .position(|&c| c == language)
        .map(|i| LANGUAGE_CODES_C[i].as_ptr().cast())
        .ok_or_else(|| format!("unknown language {language}"))
}

/// [`sotto::LANGUAGES`], NUL-terminated for C.
pub(crate) const LANGUAGE_CODES_C: [&str; 100] = {
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
