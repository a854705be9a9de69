//! Batched transcription against faster-whisper 1.2.1's `BatchedInferencePipeline`
//! (tests/golden/batched.json, made by scripts/goldens/batched.py): the same chunks (same
//! segment times, in the original audio), the same text; and windows decoded together
//! giving what each gives alone.

use sotto::{
    Device, EncoderPrecision, LoadOptions, Model, Segment, TranscribeOptions, Vad, VadOptions,
};

fn golden(case: &str) -> (String, Vec<(f64, f64, String)>) {
    let all: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sotto_testdata::golden("batched.json")).unwrap(),
    )
    .unwrap();
    let c = &all[case];
    let segments = c["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[0].as_f64().unwrap(),
                s[1].as_f64().unwrap(),
                s[2].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (c["language"].as_str().unwrap().to_string(), segments)
}

fn batched_vad() -> Vad {
    let mut vad = Vad::load(&sotto_testdata::vad_model()).unwrap();
    vad.options = VadOptions::batched();
    vad
}

/// Word-level edits between two texts after normalisation, and the reference's words.
fn edits(reference: &str, hypothesis: &str) -> (usize, usize) {
    let r: Vec<String> = sotto_testdata::normalise(reference)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let h: Vec<String> = sotto_testdata::normalise(hypothesis)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mut prev: Vec<usize> = (0..=h.len()).collect();
    for (i, rw) in r.iter().enumerate() {
        let mut cur = vec![i + 1; h.len() + 1];
        for (j, hw) in h.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(rw != hw))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    (prev[h.len()], r.len())
}

/// Our segments against the golden case: the same count and times (within `time_tol`
/// seconds), and the text within `max_wer` of faster-whisper's (its float32 against our f16
/// weights).
fn check(case: &str, got: &sotto::Transcript, max_wer: f64, time_tol: f64) {
    let (language, want) = golden(case);
    assert_eq!(got.language, language, "{case}");
    let ours: Vec<(f64, f64, &str)> = (got.segments.iter())
        .map(|s| (s.start, s.end, s.text.as_str()))
        .collect();
    assert_eq!(ours.len(), want.len(), "{case}: {ours:#?}\nwant {want:#?}");
    let (mut e, mut n, mut moved) = (0, 0, 0f64);
    for ((s, t, text), (ws, wt, wtext)) in ours.iter().zip(&want) {
        moved = moved.max((s - ws).abs()).max((t - wt).abs());
        assert!(
            (s - ws).abs() < time_tol && (t - wt).abs() < time_tol,
            "{case}: [{s}, {t}] against [{ws}, {wt}]"
        );
        let (de, dn) = edits(wtext, text);
        (e, n) = (e + de, n + dn);
    }
    let wer = e as f64 / n as f64;
    eprintln!(
        "{case}: {e} word edits in {n}, times within {moved:.2} s of faster-whisper's batched transcript"
    );
    assert!(
        wer <= max_wer,
        "{case}: WER {wer:.3} against faster-whisper\nours {ours:#?}\nwant {want:#?}"
    );
}

fn longform() -> Option<Vec<f32>> {
    let shared = sotto_testdata::shared_dir()?;
    let path = sotto_testdata::clip(&shared, "en10_longform.wav");
    Some(sotto::audio::load_16k_mono(path.to_str().unwrap()).unwrap())
}

/// A timestamp step: times that come from the VAD's chunks, or from the model at the
/// golden's own arithmetic, match to within it.
const STEP: f64 = 0.011;

/// How far the model's timestamps may move from f32's at `precision`. bf16 (AVX-512 BF16's
/// default) and int8 move the logits by up to ~0.1, and some timestamps are near-ties at
/// f32 (the end at 99.63 s of en10_longform beats the one at 99.71 s by 0.012): such a
/// timestamp moves by a few steps (bf16 moves two of its ends by 4 and 5). int16 stays
/// within a few thousandths of f32.
fn time_tolerance(precision: Option<EncoderPrecision>) -> f64 {
    match precision {
        Some(EncoderPrecision::F32 | EncoderPrecision::Int16) => STEP,
        _ => 0.15,
    }
}

#[test]
fn long_audio_in_batches_matches_faster_whisper_s_batched_pipeline() {
    let Some(audio) = longform() else {
        return;
    };
    let vad = batched_vad();
    let dir = sotto_testdata::model_dir("tiny.en");
    let model = Model::load(&dir).unwrap();
    // The golden's arithmetic, where the model's timestamps must match to a step.
    let f32_opts = LoadOptions {
        encoder: EncoderPrecision::F32,
        ..LoadOptions::default()
    };
    let reference = Model::load_with(&dir, Device::Cpu, f32_opts).unwrap();
    for (model, case, beam, without_ts) in [
        (&model, "longform", 1, true),
        (&model, "longform_b5", 5, true),
        (&model, "longform_ts", 1, false),
        (&reference, "longform_ts", 1, false),
    ] {
        let mut session = model.session(2).unwrap();
        let opts = TranscribeOptions {
            beam_size: beam,
            without_timestamps: without_ts,
            ..TranscribeOptions::default()
        };
        let mut seen = Vec::new();
        let (t, timings) = session
            .transcribe_batched(&vad, &audio, &opts, 8, &mut |s: &Segment| {
                seen.push(s.clone());
                true
            })
            .unwrap();
        assert_eq!(
            seen, t.segments,
            "{case}: on_segment saw the final segments"
        );
        assert_eq!(timings.windows, 6, "{case}");
        assert!((t.duration - 150.05).abs() < 0.1, "{case}: {}", t.duration);
        // Without timestamps, a segment is a VAD chunk: its times are the VAD's.
        let tol = if without_ts {
            STEP
        } else {
            time_tolerance(model.encoder_precision())
        };
        check(case, &t, 0.02, tol);
    }
}

#[test]
fn windows_decoded_together_give_what_each_gives_alone() {
    let Some(audio) = longform() else {
        return;
    };
    let vad = batched_vad();
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(2).unwrap();
    for beam in [1, 5] {
        let opts = TranscribeOptions {
            beam_size: beam,
            ..TranscribeOptions::default()
        };
        let run = |session: &mut sotto::Session, n: usize| {
            session
                .transcribe_batched(&vad, &audio, &opts, n, &mut |_| true)
                .unwrap()
        };
        let (alone, one) = run(&mut session, 1);
        let (together, eight) = run(&mut session, 8);
        let (three, _) = run(&mut session, 3);
        let text = |t: &sotto::Transcript| -> Vec<String> {
            t.segments.iter().map(|s| s.text.clone()).collect()
        };
        assert_eq!(text(&together), text(&alone), "beam {beam}");
        assert_eq!(text(&three), text(&alone), "beam {beam}");
        // Shared passes: far fewer decoder steps than one window at a time.
        assert!(eight.steps * 3 < one.steps, "{} {}", eight.steps, one.steps);
    }
}

#[test]
fn clips_are_chunks_of_their_own_and_long_ones_are_cut() {
    let Some(audio) = longform() else {
        return;
    };
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(2).unwrap();
    let opts = TranscribeOptions {
        beam_size: 1,
        clip_timestamps: vec![0.0],
        ..TranscribeOptions::default()
    };
    // 150 s from 0 to the end: six equal pieces of 25 s, each a window, times the audio's.
    let (t, timings) = session
        .transcribe_batched_clips(&audio, &opts, 8, &mut |_| true)
        .unwrap();
    assert_eq!(timings.windows, 6);
    // Blind cuts cut words: only the text's ends are checked. One of these windows loops
    // at temperature 0 ("It's a It's a ..."): the fallback decodes it again, hotter.
    let text = t.text();
    assert!(text.starts_with("This is a long recording"), "{text}");
    assert!(text.ends_with("Thank you for listening."), "{text}");
    assert!(t.segments.iter().any(|s| s.temperature > 0.0), "{t:#?}");
    assert!(text.matches("It's a").count() < 3, "{text}");
    // In window order (a window's times may run past its piece: the model's timestamps
    // count on into the padding, as faster-whisper's do).
    assert!(t.segments.windows(2).all(|w| w[0].seek <= w[1].seek));
    let piece = audio.len().div_ceil(6);
    assert_eq!(t.segments.last().unwrap().seek, 5 * piece / 160);
    let last = t.segments.last().unwrap();
    assert!((140.0..=150.1).contains(&last.end), "{last:?}");
    // With one temperature (faster-whisper's batched mode), the loop stays.
    let once = TranscribeOptions {
        temperatures: vec![0.0],
        ..opts.clone()
    };
    let (looped, _) = session
        .transcribe_batched_clips(&audio, &once, 8, &mut |_| true)
        .unwrap();
    assert!(looped.segments.iter().all(|s| s.temperature == 0.0));
    let again = looped.text();
    assert!(again.matches("It's a").count() > 10, "{again}");
    // Two clips of jfk: the second's segments start at its clip.
    let jfk = sotto::audio::load_16k_mono(sotto_testdata::jfk().to_str().unwrap()).unwrap();
    let opts = TranscribeOptions {
        clip_timestamps: vec![0.0, 4.6, 4.6],
        ..opts
    };
    let (t, timings) = session
        .transcribe_batched_clips(&jfk, &opts, 8, &mut |_| true)
        .unwrap();
    assert_eq!(timings.windows, 2);
    assert!(
        t.segments.iter().any(|s| (s.start - 4.6).abs() < 0.01),
        "{t:#?}"
    );
    for bad in [vec![], vec![-1.0]] {
        let opts = TranscribeOptions {
            clip_timestamps: bad,
            ..opts.clone()
        };
        assert!(session
            .transcribe_batched_clips(&jfk, &opts, 8, &mut |_| true)
            .is_err());
    }
}

#[test]
fn speech_apart_keeps_its_times_and_words_are_timed() {
    let vad = batched_vad();
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(2).unwrap();
    let jfk = sotto::audio::load_16k_mono(sotto_testdata::jfk().to_str().unwrap()).unwrap();
    let z = |s: usize| vec![0f32; s * 16_000];
    let gap = [z(1), jfk.clone(), z(3), jfk, z(1)].concat();
    let opts = TranscribeOptions {
        beam_size: 1,
        without_timestamps: true,
        ..TranscribeOptions::default()
    };
    let (t, _) = session
        .transcribe_batched(&vad, &gap, &opts, 4, &mut |_| true)
        .unwrap();
    check("gap", &t, 0.0, STEP);
    // Word timing on windows decoded together: each word where faster-whisper puts it in
    // the original audio, to a timestamp step.
    let words = TranscribeOptions {
        word_timestamps: true,
        ..opts.clone()
    };
    let (t, _) = session
        .transcribe_batched(&vad, &gap, &words, 4, &mut |_| true)
        .unwrap();
    check("gap_words", &t, 0.0, STEP);
    let all: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sotto_testdata::golden("batched.json")).unwrap(),
    )
    .unwrap();
    let want = all["gap_words"]["words"].as_array().unwrap();
    let got: Vec<&sotto::Word> = t.segments.iter().flat_map(|s| &s.words).collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        let (ws, we) = (w[0].as_f64().unwrap(), w[1].as_f64().unwrap());
        assert_eq!(g.word, w[2].as_str().unwrap());
        assert!(
            (g.start - ws).abs() < 0.021 && (g.end - we).abs() < 0.021,
            "{:?} against {w}",
            (g.start, g.end, &g.word)
        );
    }
    // No speech: no segments, no error.
    let (quiet, _) = session
        .transcribe_batched(&vad, &z(5), &opts, 4, &mut |_| true)
        .unwrap();
    assert!(quiet.segments.is_empty());
}

#[test]
fn the_language_is_detected_on_the_chunks_joined() {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let path = sotto_testdata::clip(&shared, "cheetah_de.wav");
    let audio = sotto::audio::load_16k_mono(path.to_str().unwrap()).unwrap();
    let model = Model::load(&sotto_testdata::model_dir("base")).unwrap();
    let mut session = model.session(2).unwrap();
    let opts = TranscribeOptions {
        beam_size: 1,
        without_timestamps: true,
        ..TranscribeOptions::default()
    };
    let vad = batched_vad();
    let (t, _) = session
        .transcribe_batched(&vad, &audio, &opts, 8, &mut |_| true)
        .unwrap();
    check("de", &t, 0.0, STEP);
    // Named before decoding (faster-whisper's `info`), for the same stretches: the same.
    let speech = vad.speech(&audio).unwrap();
    let named = session
        .transcription_language(&audio, Some(&speech), &opts, 8)
        .unwrap();
    assert_eq!(
        (named.language, named.probability),
        (t.language.as_str(), t.language_probability)
    );
    // Detected: every language's probability, likeliest first, the named one on top.
    assert_eq!(named.all[0], (named.language, named.probability));
    assert!(named.all.windows(2).all(|w| w[0].1 >= w[1].1));
    // Clips as chunks too.
    let clips = TranscribeOptions {
        clip_timestamps: vec![0.0, 9.5, 9.5],
        ..opts.clone()
    };
    let (t, _) = session
        .transcribe_batched_clips(&audio, &clips, 8, &mut |_| true)
        .unwrap();
    let named = session
        .transcription_language(&audio, None, &clips, 8)
        .unwrap();
    assert_eq!(
        (named.language, named.probability),
        (t.language.as_str(), t.language_probability)
    );
}

/// German, French and Spanish clips one after another: with `multilingual` each chunk
/// is decoded in its own language (faster-whisper's batched `multilingual=True`), not in
/// the one detected at the start.
#[test]
fn each_chunk_in_its_own_language() {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let zeros = |s: usize| vec![0f32; s * 16000];
    let mut audio = Vec::new();
    for (clip, times) in [
        ("de01_news.wav", 2),
        ("fr01_news.wav", 3),
        ("es01_news.wav", 2),
    ] {
        let path = sotto_testdata::clip(&shared, clip);
        let a = sotto::audio::load_16k_mono(path.to_str().unwrap()).unwrap();
        for _ in 0..times {
            audio.extend_from_slice(&a);
            audio.extend(zeros(2));
        }
        audio.extend(zeros(18));
    }
    let model = Model::load_with(
        &sotto_testdata::model_dir("base"),
        Device::Cpu,
        LoadOptions::F32,
    )
    .unwrap();
    let mut session = model.session(2).unwrap();
    let opts = TranscribeOptions {
        beam_size: 1,
        without_timestamps: true,
        multilingual: true,
        ..TranscribeOptions::default()
    };
    let (t, _) = session
        .transcribe_batched(&batched_vad(), &audio, &opts, 8, &mut |_| true)
        .unwrap();
    check("multilingual", &t, 0.0, STEP);
}

#[test]
fn what_batched_decoding_cannot_do_is_refused() {
    let vad = batched_vad();
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(1).unwrap();
    let jfk = sotto::audio::load_16k_mono(sotto_testdata::jfk().to_str().unwrap()).unwrap();
    let base = TranscribeOptions {
        beam_size: 1,
        ..TranscribeOptions::default()
    };
    for (opts, n, what) in [
        (
            TranscribeOptions {
                temperatures: vec![0.4],
                ..base.clone()
            },
            4,
            "temperature",
        ),
        (
            TranscribeOptions {
                prefix: Some("And so".into()),
                ..base.clone()
            },
            4,
            "prefix",
        ),
        (
            TranscribeOptions {
                clip_timestamps: vec![1.0],
                ..base.clone()
            },
            4,
            "clip timestamps",
        ),
        (
            TranscribeOptions {
                audio_ctx: Some(500),
                ..base.clone()
            },
            4,
            "audio_ctx",
        ),
        (base.clone(), 0, "batch_size"),
    ] {
        let err = session
            .transcribe_batched(&vad, &jfk, &opts, n, &mut |_| true)
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
    assert!(session
        .transcribe_batched(&vad, &[], &base, 4, &mut |_| true)
        .is_err());
}
