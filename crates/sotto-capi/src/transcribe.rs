//! Transcribing samples, stretches of speech and files with a session.

use super::*;

/// Transcribes with `params` (NULL: defaults), reporting segments to its callback.
///
/// # Safety
/// `session` is NULL or a live session used by no other thread; `params` is NULL or
/// points to a `sotto_params` whose strings and `user_data` are valid for the call.
pub(crate) unsafe fn run(
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
pub(crate) unsafe fn run_on(
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

/// The stretches of speech a transcription with `p` reads: `found` when given, else what
/// `p.vad` finds (at most 30 s each in the batched mode), else None (all the audio, or
/// its clips).
///
/// # Safety
/// `p.vad` is NULL or a live VAD.
pub(crate) unsafe fn speech_of(
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
pub(crate) unsafe fn sample_slice<'a>(
    samples: *const f32,
    n_samples: usize,
) -> Result<&'a [f32], String> {
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
pub(crate) unsafe fn stretches(
    speech: *const f64,
    n_speech: usize,
) -> Result<Vec<(usize, usize)>, String> {
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
