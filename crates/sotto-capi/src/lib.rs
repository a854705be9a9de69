//! sotto's C ABI, declared by `include/sotto.h`: load a model, open sessions, transcribe,
//! read segments and words. The language bindings (`bindings/python`) sit on it.
//!
//! Every function checks its pointers and catches panics: failure is a NULL, negative or
//! NaN return with the reason in [`sotto_last_error`], never an abort. Handles are boxed
//! Rust values; a transcript converts its strings to C once, so the pointers it hands out
//! live as long as it does.
//!
//! Here: errors, handles, models and sessions. `params.rs`: the options struct and its
//! versions; `transcribe.rs` and `language.rs`: running a session; `transcript.rs`: reading
//! what it made; `audio.rs`, `vad.rs` and `bench.rs`: decoding, speech detection, timing.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use sotto::{Task, TranscribeOptions};

mod audio;
mod bench;
mod language;
mod params;
mod transcribe;
mod transcript;
mod vad;

pub use audio::*;
pub use bench::*;
pub use language::*;
pub use params::*;
pub use transcribe::*;
pub use transcript::*;
pub use vad::*;

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

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// A model, and where it runs as C strings (kept for the model's life).
pub struct SottoModel {
    model: sotto::Model,
    device: CString,
    device_note: CString,
}

/// A session and the threads it was opened with.
pub struct SottoSession(sotto::Session, usize);

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
