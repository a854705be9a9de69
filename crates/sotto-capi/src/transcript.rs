//! A transcript's text, segments, tokens and words, read through its handle.

use super::*;

/// A transcript with its strings already in C form.
pub struct SottoTranscript {
    transcript: sotto::Transcript,
    text: CString,
    language: CString,
    segments: Vec<CString>,
    words: Vec<Vec<CString>>,
}

impl SottoTranscript {
    pub(crate) fn new(transcript: sotto::Transcript) -> SottoTranscript {
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

    pub(crate) fn segment(&self, i: c_int) -> Result<&sotto::Segment, String> {
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

    pub(crate) fn word(&self, segment: c_int, word: c_int) -> Result<&sotto::Word, String> {
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
pub(crate) unsafe fn read<R>(
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
