//! Decoding audio files and bytes to 16 kHz samples for the caller.

use super::*;

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
pub(crate) unsafe fn decode_memory(
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
pub(crate) fn interleave(left: &[f32], right: &[f32]) -> Vec<f32> {
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

/// A resampler to 16 kHz fed as audio arrives ([`sotto_resampler_new`]): the filter every
/// decode uses (libswresample's), so live audio at 44.1 or 48 kHz reads as the same
/// recording would from a file.
pub struct SottoResampler {
    /// None once finished.
    inner: Option<sotto::audio::Resampler16k>,
}

/// A resampler from `rate` Hz to 16 kHz; NULL where sotto does not take that rate.
#[no_mangle]
pub extern "C" fn sotto_resampler_new(rate: c_int) -> *mut SottoResampler {
    guard(ptr::null_mut(), || {
        let rate = u32::try_from(rate).map_err(|_| format!("a sample rate of {rate} Hz"))?;
        let r = sotto::audio::Resampler16k::new(rate).map_err(|e| e.to_string())?;
        Ok(Box::into_raw(Box::new(SottoResampler { inner: Some(r) })))
    })
}

/// Feeds `n` mono samples at the resampler's rate; then the 16 kHz samples now ready,
/// `*n_out` of them (0 at first: the filter needs some input ahead), freed by
/// [`sotto_audio_free`]. NULL with `*n_out` 0 is nothing ready; failure is NULL too, with
/// [`sotto_last_error`] set, after a resampler that is NULL or finished.
///
/// # Safety
/// `r` is NULL or a live resampler; `samples` points to `n` floats (or is NULL with `n`
/// 0); `n_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn sotto_resampler_push(
    r: *mut SottoResampler,
    samples: *const f32,
    n: usize,
    n_out: *mut usize,
) -> *mut f32 {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let (inner, out) = unsafe { resampler_args(r, n_out) }?;
        let inner = inner.as_mut().ok_or("the resampler was finished")?;
        if samples.is_null() && n > 0 {
            return Err("samples is NULL".into());
        }
        if n > 0 {
            // SAFETY: non-NULL, `n` readable floats by the caller's contract.
            let x = unsafe { std::slice::from_raw_parts(samples, n) };
            inner.push(x).map_err(|e| e.to_string())?;
        }
        Ok(boxed(inner.take_ready(), out))
    })
}

/// Ends the stream: the 16 kHz samples still held (`*n_out`, freed by
/// [`sotto_audio_free`]). All the pushes' samples and these are `round(n * 16000 / rate)`
/// for the `n` fed. The resampler is spent; free it with [`sotto_resampler_free`].
///
/// # Safety
/// As [`sotto_resampler_push`].
#[no_mangle]
pub unsafe extern "C" fn sotto_resampler_finish(
    r: *mut SottoResampler,
    n_out: *mut usize,
) -> *mut f32 {
    guard(ptr::null_mut(), || {
        // SAFETY: as this function's contract says.
        let (inner, out) = unsafe { resampler_args(r, n_out) }?;
        let inner = inner.take().ok_or("the resampler was finished")?;
        Ok(boxed(inner.finish().map_err(|e| e.to_string())?, out))
    })
}

/// The resampler behind `r` and the count `n_out`, set to 0 until there is output.
///
/// # Safety
/// `r` is NULL or a live resampler; `n_out` is NULL or writable; neither outlives the call.
unsafe fn resampler_args<'a>(
    r: *mut SottoResampler,
    n_out: *mut usize,
) -> Result<(&'a mut Option<sotto::audio::Resampler16k>, &'a mut usize), String> {
    // SAFETY: as this function's contract says.
    let out = unsafe { n_out.as_mut() }.ok_or("n_out is NULL")?;
    *out = 0;
    // SAFETY: as above.
    let r = unsafe { r.as_mut() }.ok_or("resampler is NULL")?;
    Ok((&mut r.inner, out))
}

/// Frees a resampler (NULL is fine).
///
/// # Safety
/// `r` is NULL or came from [`sotto_resampler_new`], and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn sotto_resampler_free(r: *mut SottoResampler) {
    // SAFETY: as this function's contract says.
    unsafe { free(r) }
}

/// `samples` for [`sotto_audio_free`], their count in `n`; NULL for none.
fn boxed(samples: Vec<f32>, n: &mut usize) -> *mut f32 {
    *n = samples.len();
    if samples.is_empty() {
        return ptr::null_mut();
    }
    Box::into_raw(samples.into_boxed_slice()).cast()
}
