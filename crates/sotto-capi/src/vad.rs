//! The Silero VAD: loading it, its parameters, and the stretches of speech it finds.

use super::*;

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
    pub(crate) fn options(&self) -> Result<sotto::VadOptions, String> {
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
    pub(crate) fn speech(
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
    pub(crate) fn get(&self, i: c_int) -> Result<(f64, f64), String> {
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
