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
