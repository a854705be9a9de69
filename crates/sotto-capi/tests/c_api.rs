//! The C interface as C sees it: a C program built against `include/sotto.h` and the shared
//! library, and every entry point called from here with real and bad arguments.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

use sotto_capi::*;
use sotto_testdata::{jfk, normalise, JFK};

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    // SAFETY: sotto_last_error never returns NULL, and the string lives until the next failure.
    unsafe { CStr::from_ptr(sotto_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn string(p: *const c_char) -> Option<String> {
    // SAFETY: the library returns NULL or a live NUL-terminated string.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

unsafe extern "C" fn stop_after_first(
    index: c_int,
    _start: f64,
    _end: f64,
    text: *const c_char,
    user_data: *mut c_void,
) -> c_int {
    // SAFETY: user_data is the Vec this test passed; text is alive during the call.
    let seen = unsafe { &mut *user_data.cast::<Vec<(c_int, String)>>() };
    seen.push((index, string(text).unwrap()));
    0
}

unsafe extern "C" fn keep_whole_segments(
    segment: *const SottoTranscript,
    user_data: *mut c_void,
) -> c_int {
    // SAFETY: user_data is the Vec this test passed; the segment's transcript is alive
    // during the call.
    let seen = unsafe { &mut *user_data.cast::<Vec<(String, c_int)>>() };
    // SAFETY: as above.
    unsafe {
        assert_eq!(sotto_transcript_n_segments(segment), 1);
        seen.push((
            string(sotto_transcript_segment_text(segment, 0)).unwrap(),
            sotto_transcript_segment_n_tokens(segment, 0),
        ));
    }
    1
}

#[test]
fn transcribes_through_the_c_interface() {
    let model_dir = sotto_testdata::model_dir("tiny.en");
    let path = c(model_dir.to_str().unwrap());
    // SAFETY: every call below passes live handles and NUL-terminated strings, as sotto.h asks.
    unsafe {
        let model = sotto_model_load(path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        assert_eq!(sotto_model_is_multilingual(model), 0);
        assert_eq!(
            CStr::from_ptr(sotto_model_device(model)).to_str(),
            Ok("cpu")
        );
        assert_eq!(
            CStr::from_ptr(sotto_model_device_note(model)).to_str(),
            Ok("")
        );
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        assert!(!session.is_null(), "{}", last_error());

        let mut params = sotto_default_params();
        params.word_timestamps = 1;
        let file = c(jfk().to_str().unwrap());
        let t = sotto_transcribe_file(session, file.as_ptr(), &params);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(normalise(&string(sotto_transcript_text(t)).unwrap()), JFK);
        assert_eq!(string(sotto_transcript_language(t)).as_deref(), Some("en"));
        assert!((sotto_transcript_duration(t) - 11.0).abs() < 0.1);
        let n = sotto_transcript_n_segments(t);
        assert!(n >= 1);
        let mut words = 0;
        for s in 0..n {
            assert!(sotto_transcript_segment_start(t, s) < sotto_transcript_segment_end(t, s));
            for w in 0..sotto_transcript_n_words(t, s) {
                assert!(sotto_transcript_word_start(t, s, w) <= sotto_transcript_word_end(t, s, w));
                let p = sotto_transcript_word_probability(t, s, w);
                assert!((0.0..=1.0).contains(&p));
                assert!(string(sotto_transcript_word_text(t, s, w)).is_some());
                words += 1;
            }
        }
        assert_eq!(words, JFK.split(' ').count());
        // faster-whisper's per-segment figures.
        assert_eq!(sotto_transcript_language_probability(t), 1.0);
        for s in 0..n {
            assert!(sotto_transcript_segment_avg_logprob(t, s) < 0.0);
            assert!(sotto_transcript_segment_compression_ratio(t, s) > 0.0);
            assert_eq!(sotto_transcript_segment_temperature(t, s), 0.0);
            assert!(sotto_transcript_segment_seek(t, s) >= 0);
            let k = sotto_transcript_segment_n_tokens(t, s);
            assert!(k > 2);
            assert!((0..k).all(|i| (0..51864).contains(&sotto_transcript_segment_token(t, s, i))));
            assert_eq!(sotto_transcript_segment_token(t, s, k), -1);
        }
        // Out of range: an error, not a crash.
        assert!(sotto_transcript_segment_text(t, n).is_null());
        assert!(last_error().contains("out of range"), "{}", last_error());
        assert!(sotto_transcript_word_end(t, 0, 10_000).is_nan());
        assert!(sotto_transcript_segment_start(t, -1).is_nan());
        sotto_transcript_free(t);

        // The same audio as samples, greedy; a callback that stops after one segment.
        let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
        let mut seen: Vec<(c_int, String)> = Vec::new();
        let mut params = sotto_default_params();
        params.beam_size = 1;
        params.on_segment = Some(stop_after_first);
        params.user_data = (&mut seen as *mut Vec<(c_int, String)>).cast();
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &params);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, 0);
        assert_eq!(sotto_transcript_n_segments(t), 1);
        assert_eq!(
            string(sotto_transcript_segment_text(t, 0)).unwrap(),
            seen[0].1
        );
        sotto_transcript_free(t);

        // Whole segments as they are finished: the same as the transcript's.
        let mut whole: Vec<(String, c_int)> = Vec::new();
        let mut params = sotto_default_params();
        params.beam_size = 1;
        params.on_segment_transcript = Some(keep_whole_segments);
        params.user_data = (&mut whole as *mut Vec<(String, c_int)>).cast();
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &params);
        assert!(!t.is_null(), "{}", last_error());
        let n = sotto_transcript_n_segments(t);
        assert_eq!(whole.len(), n as usize);
        for (i, (text, tokens)) in whole.iter().enumerate() {
            let i = i as c_int;
            assert_eq!(
                string(sotto_transcript_segment_text(t, i)).as_ref(),
                Some(text)
            );
            assert_eq!(sotto_transcript_segment_n_tokens(t, i), *tokens);
        }
        sotto_transcript_free(t);

        // The bench checks what it is given.
        let mut b = SottoBench {
            struct_size: 8,
            n_threads: 0,
            encode_ms: 0.0,
            decode_ms: 0.0,
            batch_ms: 0.0,
            prompt_ms: 0.0,
        };
        assert_eq!(sotto_bench(session, 1, &mut b), -1);
        assert!(last_error().contains("struct_size"), "{}", last_error());
        b.struct_size = std::mem::size_of::<SottoBench>();
        assert_eq!(sotto_bench(session, 0, &mut b), -1);
        assert!(last_error().contains("runs"), "{}", last_error());
        assert_eq!(sotto_bench(session, 1, ptr::null_mut()), -1);
        assert_eq!(sotto_bench(ptr::null_mut(), 1, &mut b), -1);
        assert!(CStr::from_ptr(sotto_system_info())
            .to_str()
            .unwrap()
            .starts_with("sotto "));

        // The language transcribing would use, without transcribing: English-only, "en",
        // not detected (every language's probability 0).
        let mut params = sotto_default_params();
        let mut p = 0f32;
        let (x, n) = (samples.as_ptr(), samples.len());
        let mut probs = vec![0.5f32; sotto_lang_max_id() as usize + 1];
        let all = probs.as_mut_ptr();
        let code = sotto_transcribe_language(session, x, n, &params, &mut p, all);
        assert_eq!(string(code).as_deref(), Some("en"));
        assert_eq!(p, 1.0);
        assert!(probs.iter().all(|&q| q == 0.0));
        params.chunk_length = 31;
        let none = ptr::null_mut();
        assert!(sotto_transcribe_language(session, x, n, &params, &mut p, none).is_null());
        assert!(last_error().contains("chunk_length"), "{}", last_error());
        params.chunk_length = 0;
        // No stretches of speech: the language as transcribing names it, probability 0.
        let no_speech = ptr::null();
        let code =
            sotto_transcribe_speech_language(session, x, n, no_speech, 0, &params, &mut p, none);
        assert_eq!((string(code).as_deref(), p), (Some("en"), 0.0));
        let speech = [0.5f64, 3.0];
        let at = speech.as_ptr();
        let code = sotto_transcribe_speech_language(session, x, n, at, 1, &params, &mut p, all);
        assert_eq!((string(code).as_deref(), p), (Some("en"), 1.0));
        params.batch_size = 4;
        assert!(sotto_transcribe_language(session, x, n, &params, &mut p, none).is_null());
        assert!(last_error().contains("clip timestamps"), "{}", last_error());

        // English-only: no language detection, no German.
        let mut p = 0f32;
        assert!(sotto_detect_language(session, samples.as_ptr(), samples.len(), &mut p).is_null());
        assert!(last_error().contains("English-only"), "{}", last_error());
        let n = samples.len();
        assert!(sotto_detect_language_ex(session, samples.as_ptr(), n, -1, 0.5, &mut p).is_null());
        assert!(last_error().contains("segments"), "{}", last_error());
        // Options faster-whisper has: checked.
        let mut params = sotto_default_params();
        params.patience = 0.0;
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &params).is_null());
        assert!(last_error().contains("patience"), "{}", last_error());
        params.patience = 1.0;
        params.suppress_regex = c"(".as_ptr();
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &params).is_null());
        assert!(last_error().contains("suppress_regex"), "{}", last_error());
        params.suppress_regex = ptr::null();
        params.max_len = -3;
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &params).is_null());
        assert!(last_error().contains("max_len"), "{}", last_error());
        let mut params = sotto_default_params();
        params.beam_size = 1;
        params.compression_ratio_threshold = f32::NAN;
        params.log_prob_threshold = f32::INFINITY;
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &params).is_null());
        assert!(
            last_error().contains("log_prob_threshold"),
            "{}",
            last_error()
        );
        params.log_prob_threshold = f32::NAN;
        params.condition_on_previous_text = 0;
        params.hotwords = c"Americans".as_ptr();
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &params);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(normalise(&string(sotto_transcript_text(t)).unwrap()), JFK);
        sotto_transcript_free(t);
        let mut params = sotto_default_params();
        params.language = c"de".as_ptr();
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &params).is_null());
        assert!(last_error().contains("English-only"), "{}", last_error());
        sotto_session_free(session);
    }
}

#[test]
fn bad_arguments_are_errors() {
    // SAFETY: NULL handles and strings are allowed arguments; the library must refuse them.
    unsafe {
        assert!(sotto_model_load(ptr::null(), ptr::null()).is_null());
        assert!(last_error().contains("NULL"));
        assert!(sotto_model_load(c"/no/such/model".as_ptr(), c"cpu".as_ptr()).is_null());
        assert!(last_error().contains("unknown model"), "{}", last_error());
        assert!(sotto_model_load(c"tiny.en".as_ptr(), c"tpu".as_ptr()).is_null());
        assert!(last_error().contains("unknown device"), "{}", last_error());
        let bad = sotto_model_load_ex(c"tiny.en".as_ptr(), c"cpu".as_ptr(), c"int4".as_ptr());
        assert!(bad.is_null());
        let e = last_error();
        assert!(e.contains("encoder_precision int4: expected auto"), "{e}");
        let bad = sotto_model_load_with(c"tiny.en".as_ptr(), c"cpu".as_ptr(), ptr::null(), 8);
        assert!(bad.is_null());
        assert!(
            last_error().contains("unknown bits 0x8"),
            "{}",
            last_error()
        );
        assert_eq!(sotto_model_is_multilingual(ptr::null()), -1);
        assert!(sotto_model_device(ptr::null()).is_null());
        assert!(sotto_model_device_note(ptr::null()).is_null());
        assert!(sotto_session_new(ptr::null(), 1).is_null());
        let x = [0f32; 4];
        assert!(sotto_transcribe(ptr::null_mut(), x.as_ptr(), 4, ptr::null()).is_null());
        assert!(last_error().contains("session is NULL"));
        assert_eq!(sotto_transcript_n_segments(ptr::null()), -1);
        assert!(sotto_transcript_text(ptr::null()).is_null());
        // Freeing NULL is a no-op, as free(3).
        sotto_model_free(ptr::null_mut());
        sotto_session_free(ptr::null_mut());
        sotto_transcript_free(ptr::null_mut());
    }
    // SAFETY: a static string.
    let version = unsafe { CStr::from_ptr(sotto_version()) };
    assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

/// Language ids as whisper.cpp numbers them, and a detection's every probability by id:
/// the library's own list (faster-whisper's `all_language_probs`), from the same session
/// as the C calls use.
#[test]
fn every_language_probability_by_id() {
    let dir = sotto_testdata::model_dir("base");
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let want = sotto::Model::load(&dir)
        .and_then(|m| m.session(2)?.detect_language(&samples))
        .expect("detects");
    let path = c(dir.to_str().unwrap());
    // SAFETY: live handles, NUL-terminated strings and buffers of the sizes sotto.h asks.
    unsafe {
        assert_eq!(sotto_lang_max_id(), 99);
        assert_eq!(string(sotto_lang_str(0)).as_deref(), Some("en"));
        assert_eq!(string(sotto_lang_str(99)).as_deref(), Some("yue"));
        assert!(sotto_lang_str(100).is_null() && sotto_lang_str(-1).is_null());
        assert_eq!(sotto_lang_id(c"de".as_ptr()), 2);
        assert_eq!(sotto_lang_id(c"German".as_ptr()), 2);
        assert_eq!(sotto_lang_id(c"xx".as_ptr()), -1);
        assert_eq!(sotto_lang_id(ptr::null()), -1);

        let model = sotto_model_load(path.as_ptr(), c"cpu".as_ptr());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        assert!(!session.is_null(), "{}", last_error());
        let (x, n) = (samples.as_ptr(), samples.len());
        let mut probs = vec![0f32; sotto_lang_max_id() as usize + 1];
        let mut p = 0f32;
        let code = sotto_detect_language_probs(session, x, n, 1, 0.5, &mut p, probs.as_mut_ptr());
        assert_eq!(string(code).as_deref(), Some(want.language));
        assert_eq!(p, want.probability as f32);
        assert_eq!(want.all.len(), 99, "base has no yue");
        for (code, q) in &want.all {
            let id = sotto_lang_id(c(code).as_ptr());
            assert_eq!(probs[id as usize], *q as f32, "{code}");
        }
        assert_eq!(probs[99], 0.0);
        let sum: f32 = probs.iter().sum();
        assert!((sum - 1.0).abs() < 1e-4, "{sum}");

        // What transcribing would detect: the same window here (jfk is under 30 s).
        let params = sotto_default_params();
        let mut again = vec![0f32; probs.len()];
        let code = sotto_transcribe_language(session, x, n, &params, &mut p, again.as_mut_ptr());
        assert_eq!(string(code).as_deref(), Some(want.language));
        assert_eq!(again, probs);
        // A language given is not detected: no list.
        let mut params = sotto_default_params();
        params.language = c"de".as_ptr();
        let code = sotto_transcribe_language(session, x, n, &params, &mut p, again.as_mut_ptr());
        assert_eq!((string(code).as_deref(), p), (Some("de"), 1.0));
        assert!(again.iter().all(|&q| q == 0.0));
        sotto_session_free(session);
    }
}

/// jfk between silences: 1 s, the clip, 3 s, the clip, 1 s.
fn gap_clip() -> Vec<f32> {
    let jfk = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let z = |s: usize| vec![0f32; s * 16_000];
    [z(1), jfk.clone(), z(3), jfk, z(1)].concat()
}

#[test]
fn voice_activity_detection_through_the_c_interface() {
    let vad_path = c(sotto_testdata::vad_model().to_str().unwrap());
    let model_path = c(sotto_testdata::model_dir("tiny.en").to_str().unwrap());
    let gap = gap_clip();
    // SAFETY: every call passes live handles, NUL-terminated strings and whole buffers.
    unsafe {
        let vad = sotto_vad_load(vad_path.as_ptr(), 1);
        assert!(!vad.is_null(), "{}", last_error());
        let speech = sotto_vad_detect(vad, gap.as_ptr(), gap.len(), ptr::null());
        assert!(!speech.is_null(), "{}", last_error());
        // The same stretches as the Rust API's, in seconds.
        let want = sotto::Vad::load(&sotto_testdata::vad_model())
            .unwrap()
            .speech(&gap)
            .unwrap();
        assert_eq!(sotto_speech_n(speech), want.len() as c_int);
        for (i, (s, e)) in want.iter().enumerate() {
            let i = i as c_int;
            assert_eq!(sotto_speech_start(speech, i), *s as f64 / 16_000.0);
            assert_eq!(sotto_speech_end(speech, i), *e as f64 / 16_000.0);
        }
        assert!(sotto_speech_end(speech, want.len() as c_int).is_nan());
        assert!(last_error().contains("out of range"), "{}", last_error());
        sotto_speech_free(speech);

        // Options are checked; a high threshold finds nothing in silence.
        let mut vp = sotto_vad_default_params();
        vp.threshold = 1.5;
        assert!(sotto_vad_detect(vad, gap.as_ptr(), gap.len(), &vp).is_null());
        assert!(last_error().contains("threshold"), "{}", last_error());
        vp = sotto_vad_default_params();
        vp.struct_size = 4;
        assert!(sotto_vad_detect(vad, gap.as_ptr(), gap.len(), &vp).is_null());
        assert!(last_error().contains("struct_size"), "{}", last_error());
        let quiet = [0f32; 16_000];
        let none = sotto_vad_detect(vad, quiet.as_ptr(), quiet.len(), ptr::null());
        assert_eq!(sotto_speech_n(none), 0);
        sotto_speech_free(none);

        // Transcribing with the VAD: speech only, the original audio's times.
        let model = sotto_model_load(model_path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        let mut params = sotto_default_params();
        params.beam_size = 1;
        // Temperature 0 only: JFK twice passes the compression threshold, and the
        // fallback's samples (so their segments) differ with each CPU's arithmetic.
        params.temperature_inc = 0.0;
        params.vad = vad;
        let t = sotto_transcribe(session, gap.as_ptr(), gap.len(), &params);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(
            normalise(&string(sotto_transcript_text(t)).unwrap()),
            format!("{JFK} {JFK}")
        );
        let n = sotto_transcript_n_segments(t);
        let starts: Vec<f64> = (0..n)
            .map(|i| sotto_transcript_segment_start(t, i))
            .collect();
        assert!(starts[0] >= 0.9, "{starts:?}");
        // The original audio's times: the last segment ends past the ~23 s the joined
        // speech lasts (the silences removed), however the model cut the segments.
        let end = sotto_transcript_segment_end(t, n - 1);
        assert!((24.5..28.0).contains(&end), "{starts:?} ... {end}");
        sotto_transcript_free(t);
        // Batched (params.batch_size): the chunks decoded together, the same words.
        params.batch_size = 4;
        params.no_timestamps = 1;
        let t = sotto_transcribe(session, gap.as_ptr(), gap.len(), &params);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(
            normalise(&string(sotto_transcript_text(t)).unwrap()),
            format!("{JFK} {JFK}")
        );
        assert!(sotto_transcript_segment_start(t, 0) >= 0.9);
        sotto_transcript_free(t);
        // On stretches found apart (no VAD run): the same transcript; bad ones refused.
        let found: Vec<f64> = want
            .iter()
            .flat_map(|&(s, e)| [s as f64 / 16_000.0, e as f64 / 16_000.0])
            .collect();
        let no_vad = SottoParams {
            vad: ptr::null(),
            ..params
        };
        for batch in [0, 4] {
            let p = SottoParams {
                batch_size: batch,
                ..no_vad
            };
            let t = sotto_transcribe_speech(
                session,
                gap.as_ptr(),
                gap.len(),
                found.as_ptr(),
                want.len(),
                &p,
            );
            assert!(!t.is_null(), "{}", last_error());
            assert_eq!(
                normalise(&string(sotto_transcript_text(t)).unwrap()),
                format!("{JFK} {JFK}")
            );
            sotto_transcript_free(t);
        }
        let (g, n) = (gap.as_ptr(), gap.len());
        assert!(sotto_transcribe_speech(session, g, n, ptr::null(), 1, &no_vad).is_null());
        assert!(last_error().contains("speech is NULL"), "{}", last_error());
        let bad = [3.0, 1.0];
        assert!(sotto_transcribe_speech(session, g, n, bad.as_ptr(), 1, &no_vad).is_null());
        assert!(last_error().contains("in order"), "{}", last_error());
        let bad = [-1.0, 1.0];
        assert!(sotto_transcribe_speech(session, g, n, bad.as_ptr(), 1, &no_vad).is_null());
        assert!(last_error().contains(">= 0"), "{}", last_error());
        // Batched without a VAD or stretches: refused.
        assert!(sotto_transcribe(session, g, n, &no_vad).is_null());
        assert!(
            last_error().contains("batch_size needs"),
            "{}",
            last_error()
        );
        // Clips: the second jfk only (from 14 s), one window at a time and batched.
        let clips = [14.0f32];
        for batch in [0, 4] {
            let p = SottoParams {
                batch_size: batch,
                clip_timestamps: clips.as_ptr(),
                n_clip_timestamps: 1,
                ..no_vad
            };
            let t = sotto_transcribe(session, g, n, &p);
            assert!(!t.is_null(), "{}", last_error());
            assert_eq!(normalise(&string(sotto_transcript_text(t)).unwrap()), JFK);
            assert!(sotto_transcript_segment_start(t, 0) >= 14.0);
            sotto_transcript_free(t);
        }
        params.batch_size = 0;
        params.no_timestamps = 0;
        // Bad VAD options in the params are refused too.
        params.vad_params.min_silence_duration_ms = -1;
        assert!(sotto_transcribe(session, gap.as_ptr(), gap.len(), &params).is_null());
        assert!(last_error().contains("min_silence"), "{}", last_error());
        sotto_session_free(session);
        sotto_vad_free(vad);

        assert!(sotto_vad_load(c"/no/such.onnx".as_ptr(), 0).is_null());
        assert!(last_error().contains("/no/such.onnx"), "{}", last_error());
        assert!(sotto_vad_detect(ptr::null(), gap.as_ptr(), 1, ptr::null()).is_null());
        assert!(last_error().contains("vad is NULL"), "{}", last_error());
        assert_eq!(sotto_speech_n(ptr::null()), -1);
        sotto_vad_free(ptr::null_mut());
        sotto_speech_free(ptr::null_mut());
    }
}

/// `sotto_params` as the first sotto.h declared it, before the VAD fields.
#[repr(C)]
struct ParamsV1 {
    struct_size: usize,
    language: *const c_char,
    translate: c_int,
    beam_size: c_int,
    best_of: c_int,
    temperature: f32,
    temperature_inc: f32,
    no_timestamps: c_int,
    word_timestamps: c_int,
    initial_prompt: *const c_char,
    on_segment: Option<SegmentCallback>,
    user_data: *mut c_void,
}

#[test]
fn params_from_an_older_header_still_work() {
    let model_path = c(sotto_testdata::model_dir("tiny.en").to_str().unwrap());
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let old = Box::new(ParamsV1 {
        struct_size: std::mem::size_of::<ParamsV1>(),
        language: ptr::null(),
        translate: 0,
        beam_size: 1,
        best_of: 5,
        temperature: 0.0,
        temperature_inc: 0.2,
        no_timestamps: 1,
        word_timestamps: 0,
        initial_prompt: ptr::null(),
        on_segment: None,
        user_data: ptr::null_mut(),
    });
    assert!(std::mem::size_of::<ParamsV1>() < std::mem::size_of::<SottoParams>());
    // SAFETY: live handles; the old struct is read only up to its own struct_size (a
    // boxed allocation of exactly that size, so a read past it would be caught by Miri
    // or ASan).
    unsafe {
        let model = sotto_model_load(model_path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        let p = (&*old as *const ParamsV1).cast::<SottoParams>();
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), p);
        assert!(!t.is_null(), "{}", last_error());
        assert_eq!(normalise(&string(sotto_transcript_text(t)).unwrap()), JFK);
        // no_timestamps: one segment for the window.
        assert_eq!(sotto_transcript_n_segments(t), 1);
        sotto_transcript_free(t);
        sotto_session_free(session);
    }
}

/// The fourth `sotto_params` ended at `n_clip_timestamps`; its padding after it lies where
/// `repetition_penalty` is now, and must not be read as that field.
#[test]
fn the_padding_of_an_older_struct_is_not_a_field() {
    let model_path = c(sotto_testdata::model_dir("tiny.en").to_str().unwrap());
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let v4_size = std::mem::offset_of!(SottoParams, repetition_penalty)
        .next_multiple_of(std::mem::align_of::<SottoParams>());
    assert!(v4_size < std::mem::size_of::<SottoParams>());
    let mut p = sotto_default_params();
    p.beam_size = 1;
    p.no_timestamps = 1;
    // Garbage in the old padding, and a valid struct past it.
    p.repetition_penalty = f32::NAN;
    // SAFETY: live handles, params of the full size (the library reads a prefix).
    unsafe {
        let model = sotto_model_load(model_path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        p.struct_size = std::mem::size_of::<SottoParams>();
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &p);
        assert!(t.is_null());
        assert!(
            last_error().contains("repetition_penalty"),
            "{}",
            last_error()
        );
        p.struct_size = v4_size;
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &p);
        assert!(!t.is_null(), "{}", last_error());
        let plain = string(sotto_transcript_text(t)).unwrap();
        assert_eq!(normalise(&plain), JFK);
        sotto_transcript_free(t);
        // The new fields, at the full size: no token twice, so not the plain tokens.
        p.struct_size = std::mem::size_of::<SottoParams>();
        p.repetition_penalty = 1.0;
        p.no_repeat_ngram_size = 1;
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &p);
        assert!(!t.is_null(), "{}", last_error());
        let text = string(sotto_transcript_text(t)).unwrap();
        assert_ne!(text, plain);
        sotto_transcript_free(t);
        sotto_session_free(session);
    }
}

#[test]
fn audio_decodes_from_memory() {
    let bytes = std::fs::read(jfk()).unwrap();
    let want = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let mut n = 0usize;
    // SAFETY: whole buffers and a writable count.
    unsafe {
        let p = sotto_audio_decode(bytes.as_ptr().cast(), bytes.len(), &mut n);
        assert!(!p.is_null(), "{}", last_error());
        assert_eq!(std::slice::from_raw_parts(p, n), &want[..]);
        sotto_audio_free(p, n);
        assert!(sotto_audio_decode(bytes.as_ptr().cast(), 10, &mut n).is_null());
        assert!(!last_error().is_empty());
        assert!(sotto_audio_decode(ptr::null(), 0, &mut n).is_null());
        assert!(
            last_error().contains("empty") || last_error().contains("no"),
            "{}",
            last_error()
        );
        assert!(sotto_audio_decode(ptr::null(), 5, &mut n).is_null());
        assert!(last_error().contains("NULL"), "{}", last_error());
    }
}

/// 48 kHz fed in 10 ms pieces comes out, piece by piece and at the end, as one resampling
/// of the whole; a rate sotto does not take, a NULL and a finished resampler are errors.
#[test]
fn a_resampler_streams_what_a_whole_resampling_gives() {
    let x: Vec<f32> = (0..48_000 + 123)
        .map(|i| ((i as f32 * 0.031).sin() + (i as f32 * 0.0007).cos()) * 0.3)
        .collect();
    let whole = sotto::audio::resample_to_16k(&x, 48_000).unwrap();
    let mut got = Vec::new();
    let take = |p: *mut f32, n: usize, got: &mut Vec<f32>| {
        if n > 0 {
            // SAFETY: the library returned `n` floats at `p`, freed here once.
            unsafe {
                got.extend_from_slice(std::slice::from_raw_parts(p, n));
                sotto_audio_free(p, n);
            }
        } else {
            assert!(p.is_null());
        }
    };
    let mut n = 0usize;
    // SAFETY: live resampler handles, whole buffers and writable counts.
    unsafe {
        let r = sotto_resampler_new(48_000);
        assert!(!r.is_null(), "{}", last_error());
        let mut fed = 0;
        for piece in x.chunks(480) {
            let p = sotto_resampler_push(r, piece.as_ptr(), piece.len(), &mut n);
            take(p, n, &mut got);
            fed += piece.len();
            // Ready as the audio comes: never more than the filter's 100 taps behind.
            assert!(fed / 3 - got.len() <= 40, "{} of {}", got.len(), fed / 3);
        }
        let p = sotto_resampler_push(r, ptr::null(), 0, &mut n);
        take(p, n, &mut got);
        let p = sotto_resampler_finish(r, &mut n);
        take(p, n, &mut got);
        assert_eq!(got, whole);
        assert!(sotto_resampler_push(r, x.as_ptr(), 10, &mut n).is_null());
        assert!(last_error().contains("finished"), "{}", last_error());
        assert!(sotto_resampler_finish(r, &mut n).is_null());
        sotto_resampler_free(r);

        assert!(sotto_resampler_new(0).is_null());
        assert!(last_error().contains("rate"), "{}", last_error());
        assert!(sotto_resampler_new(-5).is_null());
        assert!(sotto_resampler_push(ptr::null_mut(), x.as_ptr(), 1, &mut n).is_null());
        assert!(last_error().contains("NULL"), "{}", last_error());
        let r = sotto_resampler_new(16_000);
        let p = sotto_resampler_push(r, x.as_ptr(), 100, &mut n);
        assert_eq!(std::slice::from_raw_parts(p, n), &x[..100]);
        sotto_audio_free(p, n);
        assert!(sotto_resampler_push(r, ptr::null(), 3, &mut n).is_null());
        assert!(last_error().contains("NULL"), "{}", last_error());
        sotto_resampler_free(r);
        sotto_resampler_free(ptr::null_mut());
    }
}

/// Two channels apart, interleaved at 16 kHz: a stereo file's own, a mono file's twice.
#[test]
fn stereo_audio_decodes_with_its_channels_apart() {
    let left: Vec<f32> = (0..8000).map(|i| (i as f32 * 0.01).sin() * 0.5).collect();
    let right: Vec<f32> = left.iter().map(|v| -v * 0.5).collect();
    let stereo = sotto_testdata::wav_channels(&[&left, &right]);
    let mono = sotto_testdata::wav(&left);
    let mut n = 0usize;
    // SAFETY: whole buffers and a writable count.
    unsafe {
        let p = sotto_audio_decode_stereo(stereo.as_ptr().cast(), stereo.len(), &mut n);
        assert!(!p.is_null(), "{}", last_error());
        let got = std::slice::from_raw_parts(p, n).to_vec();
        sotto_audio_free(p, n);
        assert_eq!(n, 2 * left.len());
        // 16-bit PCM: within one step of what was written.
        for (i, (l, r)) in left.iter().zip(&right).enumerate() {
            assert!(
                (got[2 * i] - l).abs() < 1e-4 && (got[2 * i + 1] - r).abs() < 1e-4,
                "{i}"
            );
        }
        let p = sotto_audio_decode_stereo(mono.as_ptr().cast(), mono.len(), &mut n);
        assert!(!p.is_null(), "{}", last_error());
        let got = std::slice::from_raw_parts(p, n).to_vec();
        sotto_audio_free(p, n);
        assert_eq!(n, 2 * left.len());
        assert!(got.chunks(2).all(|lr| lr[0] == lr[1]));
        assert!(sotto_audio_decode_stereo(stereo.as_ptr().cast(), 10, &mut n).is_null());
        assert!(sotto_audio_decode_stereo(ptr::null(), 5, &mut n).is_null());
        assert!(last_error().contains("NULL"), "{}", last_error());
    }
}

/// The names sotto can fetch, and where a name or path loads from: a path as it is, a
/// cached model in its cache folder, and with `local_only` an error rather than a fetch.
#[test]
fn model_names_and_paths() {
    // SAFETY: NUL-terminated strings and buffers of the sizes passed.
    unsafe {
        let names: Vec<String> = (0..).map_while(|i| string(sotto_known_model(i))).collect();
        assert!(names.iter().any(|n| n == "tiny.en") && names.iter().any(|n| n == "base"));
        assert!(sotto_known_model(-1).is_null());

        let dir = sotto_testdata::model_dir("tiny.en");
        let cache = dir.parent().unwrap().parent().unwrap();
        let (cache_c, dir_c) = (c(cache.to_str().unwrap()), c(dir.to_str().unwrap()));
        let mut buf = vec![0 as c_char; 4096];
        let (b, cap) = (buf.as_mut_ptr(), buf.len());
        // A path as it is; its length alone with no room.
        let n = sotto_model_path(dir_c.as_ptr(), ptr::null(), 1, b, cap);
        assert_eq!(string(b).as_deref(), dir.to_str());
        assert_eq!(n as usize, dir.to_str().unwrap().len());
        assert_eq!(
            sotto_model_path(dir_c.as_ptr(), ptr::null(), 1, ptr::null_mut(), 0),
            n
        );
        // A name, from the cache folder given.
        let n = sotto_model_path(c"tiny.en".as_ptr(), cache_c.as_ptr(), 1, b, cap);
        assert!(n > 0, "{}", last_error());
        assert_eq!(Path::new(&string(b).unwrap()), dir);
        // Local only: an empty cache has nothing, and nothing is fetched.
        let empty = tempfile::tempdir().unwrap();
        let empty_c = c(empty.path().to_str().unwrap());
        assert_eq!(
            sotto_model_path(c"tiny.en".as_ptr(), empty_c.as_ptr(), 1, b, cap),
            -1
        );
        assert!(last_error().contains("local only"), "{}", last_error());
        assert!(std::fs::read_dir(empty.path()).unwrap().next().is_none());
        assert_eq!(sotto_model_path(ptr::null(), ptr::null(), 1, b, cap), -1);
        assert_eq!(
            sotto_model_path(dir_c.as_ptr(), ptr::null(), 1, ptr::null_mut(), 8),
            -1
        );
    }
}

/// Where cargo put this package's shared library: beside this test's binary or one up.
fn shared_library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for dir in [deps, deps.parent().unwrap()] {
        if dir.join(library_file()).exists() {
            return dir.to_path_buf();
        }
    }
    panic!("no {} near {}", library_file(), exe.display());
}

fn library_file() -> &'static str {
    if cfg!(target_os = "macos") {
        "libsotto_capi.dylib"
    } else {
        "libsotto_capi.so"
    }
}

/// The C example, compiled with warnings as errors against the header and the shared
/// library, transcribes the sample.
#[cfg(unix)]
#[test]
fn a_c_program_links_and_transcribes() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        assert!(
            std::env::var_os("SOTTO_REQUIRE_CC").is_none(),
            "no C compiler ({cc})"
        );
        eprintln!("skipped: no C compiler ({cc}) to build bindings/c/transcribe.c");
        return;
    }
    let root = sotto_testdata::workspace_root();
    let lib = shared_library_dir();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("transcribe");
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(root.join("crates/sotto-capi/include"))
        .arg(root.join("bindings/c/transcribe.c"))
        .arg("-L")
        .arg(&lib)
        .arg("-lsotto_capi")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let model = sotto_testdata::model_dir("tiny.en");
    let run = Command::new(&out).arg(&model).arg(jfk()).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.starts_with("[   0.00 --> "), "{stdout}");
    assert!(stdout.contains("language en, 11.00 s"), "{stdout}");
    let text = stdout
        .lines()
        .find_map(|l| l.strip_prefix("text: "))
        .unwrap();
    assert_eq!(normalise(text), JFK);
    assert!(stdout.contains("out of range"), "{stdout}");
    // Bad input: a clear error and exit status 1.
    let bad = Command::new(&out)
        .arg(&model)
        .arg(Path::new("/no/such.wav"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).starts_with("error: "));
}

/// The Python binding (`bindings/python`, ctypes over the shared library) passes its own
/// tests.
#[test]
fn the_python_binding_passes_its_tests() {
    let Some(python) = python("to run bindings/python/test_sotto.py") else {
        return;
    };
    let root = sotto_testdata::workspace_root();
    let mut run = Command::new(&python);
    if let Some(shared) = sotto_testdata::shared_dir() {
        run.env("SOTTO_TEST_CLIPS", shared.join("data/clips"));
    }
    let run = run
        .args(["-m", "unittest", "-v", "test_sotto"])
        .current_dir(root.join("bindings/python"))
        .env("SOTTO_LIB", shared_library_dir().join(library_file()))
        .env("SOTTO_TEST_MODEL", sotto_testdata::model_dir("tiny.en"))
        .env("SOTTO_TEST_AUDIO", jfk())
        .env("SOTTO_TEST_VAD", sotto_testdata::vad_model())
        .env("SOTTO_TEST_BASE", sotto_testdata::model_dir("base"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("OK"), "{err}");
}

/// `$PYTHON` (else `python3`), or None, having said the test that wanted it `for` skips,
/// where there is none (a failure under `SOTTO_REQUIRE_PYTHON`).
fn python(for_what: &str) -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&python).arg("--version").output().is_ok() {
        return Some(python);
    }
    assert!(
        std::env::var_os("SOTTO_REQUIRE_PYTHON").is_none(),
        "no Python ({python})"
    );
    eprintln!("skipped: no Python ({python}) {for_what}");
    None
}

/// `pip install bindings/python` (its `setup.py`, given this build's library through
/// `SOTTO_LIB` so as not to run cargo inside cargo) gives a package that finds its own
/// library and transcribes, imported from anywhere. pip fetches setuptools from PyPI.
#[test]
fn the_python_package_installs_with_pip() {
    let Some(python) = python("to install bindings/python") else {
        return;
    };
    let root = sotto_testdata::workspace_root();
    let dir = tempfile::tempdir().unwrap();
    // A copy of the package's sources: the build writes beside them.
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sotto")).unwrap();
    for f in ["setup.py", "pyproject.toml", "sotto/__init__.py"] {
        std::fs::copy(root.join("bindings/python").join(f), src.join(f)).unwrap();
    }
    let venv = dir.path().join("venv");
    let made = Command::new(&python)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let venv_python = venv.join(if cfg!(windows) {
        "Scripts/python.exe"
    } else {
        "bin/python"
    });
    let install = Command::new(&venv_python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(&src)
        .env("SOTTO_LIB", shared_library_dir().join(library_file()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&install.stderr);
    assert!(install.status.success(), "pip install: {err}");

    let script = r#"
import os, sys
import sotto
lib = sotto._library_path()
assert lib.startswith(sys.prefix), (lib, sys.prefix)
print(sotto.__version__)
model = sotto.Model(os.environ["MODEL"])
with model.session(threads=2) as s:
    print(s.transcribe(os.environ["AUDIO"]).text)
"#;
    let run = Command::new(&venv_python)
        .args(["-c", script])
        .current_dir(dir.path())
        .env_remove("SOTTO_LIB")
        .env_remove("PYTHONPATH")
        .env("MODEL", sotto_testdata::model_dir("tiny.en"))
        .env("AUDIO", jfk())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(normalise(lines.next().unwrap_or("")), normalise(JFK));
    // The package's version is the workspace's.
    let toml = std::fs::read_to_string(root.join("bindings/python/pyproject.toml")).unwrap();
    let want = format!("version = \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(toml.lines().any(|l| l.starts_with(&want)), "{want}");
}

/// The Node binding (`bindings/node`: whisper.rn's API over the shared library through
/// Koffi, one worker thread per context) passes its own tests. Needs `npm ci` run in
/// `bindings/node` first (`.ci/run` does; `SOTTO_REQUIRE_NODE=1` makes its absence fail).
#[test]
fn the_node_binding_passes_its_tests() {
    let root = sotto_testdata::workspace_root();
    let dir = root.join("bindings/node");
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".into());
    let have_node = Command::new(&node).arg("--version").output().is_ok();
    if !have_node || !dir.join("node_modules/koffi").is_dir() {
        let why = if have_node {
            "bindings/node/node_modules is missing (run `npm ci` there)"
        } else {
            "no Node.js"
        };
        assert!(std::env::var_os("SOTTO_REQUIRE_NODE").is_none(), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let run = Command::new(&node)
        .args(["--test", "test/"])
        .current_dir(&dir)
        .env("SOTTO_LIB", shared_library_dir().join(library_file()))
        .env("SOTTO_TEST_MODEL", sotto_testdata::model_dir("tiny.en"))
        .env("SOTTO_TEST_AUDIO", jfk())
        .env("SOTTO_TEST_VAD", sotto_testdata::vad_model())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("# fail 0"), "{out}");
}

/// whisper.cpp's grammar sampling through the sixth struct: lower case only; a grammar that
/// does not parse names itself; the fifth struct (ending at `suppress_regex`) still reads.
#[test]
fn a_grammar_steers_the_text_and_the_fifth_struct_still_reads() {
    let model_path = c(sotto_testdata::model_dir("tiny.en").to_str().unwrap());
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let mut p = sotto_default_params();
    p.beam_size = 1;
    p.grammar = c"root ::= [^A-Z]*".as_ptr();
    // SAFETY: live handles, params from sotto_default_params, C strings that outlive the calls.
    unsafe {
        let model = sotto_model_load(model_path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &p);
        assert!(!t.is_null(), "{}", last_error());
        let text = string(sotto_transcript_text(t)).unwrap();
        assert!(text.contains("fellow americans"), "{text}");
        assert!(!text.contains(|c: char| c.is_ascii_uppercase()), "{text}");
        sotto_transcript_free(t);
        p.grammar_rule = c"start".as_ptr();
        assert!(sotto_transcribe(session, samples.as_ptr(), samples.len(), &p).is_null());
        assert!(last_error().contains("no rule `start`"), "{}", last_error());
        // The fifth struct ends before the grammar: its bytes past that are not read.
        p.struct_size = std::mem::offset_of!(SottoParams, grammar);
        let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), &p);
        assert!(!t.is_null(), "{}", last_error());
        let text = string(sotto_transcript_text(t)).unwrap();
        assert_eq!(normalise(&text), JFK);
        sotto_transcript_free(t);
        sotto_session_free(session);
    }
}

/// The seventh struct's `max_context`, `seed`, `entropy_threshold`, `audio_ctx` and
/// `chunk_length`: a bad value is an
/// error that names it, the sixth struct's padding (where `max_context` lies now) is not
/// read, and the seed picks what the sampler draws.
#[test]
fn max_context_and_seed_and_the_sixth_struct() {
    let model_path = c(sotto_testdata::model_dir("tiny.en").to_str().unwrap());
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let v6_size = std::mem::offset_of!(SottoParams, max_context)
        .next_multiple_of(std::mem::align_of::<SottoParams>());
    assert!(v6_size < std::mem::size_of::<SottoParams>());
    let mut p = sotto_default_params();
    assert_eq!((p.max_context, p.seed), (-1, 0));
    assert!(p.entropy_threshold.is_nan());
    p.beam_size = 1;
    p.initial_prompt = c"Zed.".as_ptr();
    // SAFETY: live handles, params from sotto_default_params, C strings that outlive the calls.
    unsafe {
        let model = sotto_model_load(model_path.as_ptr(), c"cpu".as_ptr());
        assert!(!model.is_null(), "{}", last_error());
        let session = sotto_session_new(model, 2);
        sotto_model_free(model);
        let text = |p: &SottoParams| {
            let t = sotto_transcribe(session, samples.as_ptr(), samples.len(), p);
            if t.is_null() {
                return Err(last_error());
            }
            let text = string(sotto_transcript_text(t)).unwrap();
            sotto_transcript_free(t);
            Ok(text)
        };
        p.max_context = -5;
        let e = text(&p).unwrap_err();
        assert!(e.contains("max_context"), "{e}");
        p.max_context = -1;
        p.entropy_threshold = f32::INFINITY;
        let e = text(&p).unwrap_err();
        assert!(e.contains("entropy_threshold"), "{e}");
        p.entropy_threshold = 2.4;
        assert_eq!(normalise(&text(&p).unwrap()), JFK);
        // whisper.cpp's audio_ctx: 15 s windows hear all of jfk's 11 s.
        assert_eq!(p.audio_ctx, 0);
        for (bad, what) in [(-1, "audio_ctx"), (1501, "audio_ctx")] {
            p.audio_ctx = bad;
            let e = text(&p).unwrap_err();
            assert!(e.contains(what), "{bad}: {e}");
        }
        p.audio_ctx = 750;
        assert_eq!(normalise(&text(&p).unwrap()), JFK);
        p.audio_ctx = 0;
        // faster-whisper's chunk_length: 1 to 30 s windows.
        assert_eq!(p.chunk_length, 0);
        for bad in [-1, 31] {
            p.chunk_length = bad;
            let e = text(&p).unwrap_err();
            assert!(e.contains("chunk_length"), "{bad}: {e}");
        }
        p.chunk_length = 15;
        assert_eq!(normalise(&text(&p).unwrap()), JFK);
        p.chunk_length = 0;
        // faster-whisper's remaining transcribe() options: defaults as its, bad values named.
        assert_eq!((p.suppress_blank, p.max_new_tokens), (1, 0));
        assert_eq!(
            (p.prompt_reset_on_temperature, p.max_initial_timestamp),
            (0.5, 1.0)
        );
        assert!(p.hallucination_silence_threshold.is_nan() && p.suppress_tokens.is_null());
        let none: [c_int; 0] = [];
        p.suppress_tokens = none.as_ptr();
        p.prefix = c"And so my".as_ptr();
        p.hallucination_silence_threshold = 2.0;
        let t = text(&p).unwrap();
        assert!(t.starts_with("And so my"), "{t}");
        assert_eq!(normalise(&t), JFK);
        p.n_suppress_tokens = -1;
        assert!(text(&p).unwrap_err().contains("n_suppress_tokens"));
        p.n_suppress_tokens = 0;
        p.max_initial_timestamp = f32::NAN;
        assert!(text(&p).unwrap_err().contains("max_initial_timestamp"));
        p.max_new_tokens = -2;
        p.max_initial_timestamp = 1.0;
        assert!(text(&p).unwrap_err().contains("max_new_tokens"));
        p = SottoParams {
            initial_prompt: p.initial_prompt,
            ..sotto_default_params()
        };
        p.beam_size = 1;
        p.max_context = -5;
        p.struct_size = v6_size;
        assert_eq!(normalise(&text(&p).unwrap()), JFK);
        p.struct_size = std::mem::size_of::<SottoParams>();
        p.max_context = 0;
        assert_eq!(normalise(&text(&p).unwrap()), JFK);
        // Sampling at temperature 1, no fallback: each seed draws its own text, again.
        p.temperature = 1.0;
        p.temperature_inc = 0.0;
        let draws: Vec<String> = [7, 8, 7]
            .iter()
            .map(|&seed| {
                p.seed = seed;
                text(&p).unwrap()
            })
            .collect();
        assert_eq!(draws[0], draws[2]);
        assert_ne!(draws[0], draws[1]);
        sotto_session_free(session);
    }
}
