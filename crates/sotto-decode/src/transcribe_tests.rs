use proptest::prelude::*;

use super::*;
use crate::mock::{one_hot, Ctx, MockInference};
use crate::tokenizer::tests::toy;

const N_MELS: usize = 2;

/// A log-mel whose value is 1 + frame index, so padding (zeros) is visible.
fn mel_data(n_frames: usize) -> Vec<f32> {
    (0..N_MELS)
        .flat_map(|_| (0..n_frames).map(|f| 1.0 + f as f32))
        .collect()
}

fn view(data: &[f32]) -> MelView<'_> {
    MelView {
        data,
        n_mels: N_MELS,
        n_frames: data.len() / N_MELS,
    }
}

fn text(s: &str) -> Vec<u32> {
    s.bytes().map(u32::from).collect()
}

fn run(
    inf: &mut MockInference,
    tok: &Tokenizer,
    frames: usize,
    opts: &TranscribeOptions,
) -> Transcript {
    let data = mel_data(frames);
    transcribe(inf, tok, &view(&data), opts, &mut |_| true).unwrap()
}

fn spans(t: &Transcript) -> Vec<(f64, f64, &str)> {
    t.segments
        .iter()
        .map(|s| (s.start, s.end, s.text.as_str()))
        .collect()
}

#[test]
fn windows_follow_timestamps_and_prompt_with_previous_text() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w0 = [vec![tb], text("hi"), vec![tb + 100, tb + 100], text("yo")].concat();
    let w1 = [vec![tb], text("ok"), vec![tb + 150]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w0, w1]);
    // 5 s of content plus the padding frame.
    let t = run(&mut inf, &tok, 501, &TranscribeOptions::default());
    assert_eq!(spans(&t), vec![(0.0, 2.0, "hi"), (2.0, 5.0, "ok")]);
    assert_eq!(
        (t.language.as_str(), t.language_probability, t.duration),
        ("en", 1.0, 5.0)
    );
    assert_eq!(t.segments[1].seek, 200);
    assert_eq!(t.segments[1].id, 2);
    assert_eq!(inf.prompts[0], vec![tok.sot()]);
    let previous = [vec![tb], text("hi"), vec![tb + 100]].concat();
    assert_eq!(
        inf.prompts[1],
        [vec![tok.sot_prev()], previous, vec![tok.sot()]].concat()
    );
    // Windows are the content frames from seek, zero padded; the padding frame is left out.
    assert_eq!(inf.windows[0][499], 500.0);
    assert_eq!(inf.windows[0][500], 0.0);
    assert_eq!(inf.windows[1][0], 201.0);
    assert_eq!(inf.windows[1][N_FRAMES + 299], 500.0);
    assert_eq!(inf.windows[1][N_FRAMES + 300], 0.0);
    let s = &t.segments[0];
    assert_eq!(s.temperature, 0.0);
    assert!(s.avg_logprob > -0.2 && s.no_speech_prob < 0.01 && s.compression_ratio > 0.0);
}

#[test]
fn segment_at_window_end_and_long_audio() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w0 = [vec![tb], text("one"), vec![tb + 1500]].concat();
    let w1 = [vec![tb + 10], text("two"), vec![tb + 750]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w0, w1]);
    let t = run(&mut inf, &tok, 4501, &TranscribeOptions::default());
    assert_eq!(spans(&t), vec![(0.0, 30.0, "one"), (30.0, 45.0, "two")]);
    assert_eq!(inf.windows.len(), 2);
}

/// whisper.cpp's `audio_ctx`: windows of 2·ctx frames, so none of the audio is skipped, and
/// the model is told the length before the first encode.
#[test]
fn audio_ctx_makes_shorter_windows() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    // A single timestamp ending moves to the next window; a last timestamp moves to it.
    let w0 = [vec![tb], text("one"), vec![tb + 400]].concat();
    let w1 = [vec![tb], text("two"), vec![tb + 100, tb + 100], text("x")].concat();
    let w2 = [vec![tb + 10], text("end"), vec![tb + 300]].concat();
    let w3 = [vec![tb], text("z"), vec![tb + 150]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w0, w1, w2, w3]);
    let opts = TranscribeOptions {
        audio_ctx: Some(500),
        ..Default::default()
    };
    let t = run(&mut inf, &tok, 2501, &opts);
    assert_eq!(inf.audio_ctx, Some(500));
    assert_eq!(
        spans(&t),
        vec![
            (0.0, 8.0, "one"),
            (10.0, 12.0, "two"),
            (12.0, 18.0, "end"),
            (22.0, 25.0, "z")
        ]
    );
    assert_eq!(inf.windows.len(), 4);
    // Each window holds 1000 frames of audio, zero after them.
    let second: Vec<f32> = (1001..=2000).map(|f| f as f32).chain([0.0]).collect();
    assert_eq!(inf.windows[1][..1001], second[..]);
    assert_eq!(inf.windows[3][0], 2201.0);
    assert_eq!(inf.windows[3][299], 2500.0);
    assert_eq!(inf.windows[3][300], 0.0);
    assert_eq!(t.duration, 25.0);

    // A timestamp past the window's end (15 s in a 10 s window) moves the next window to
    // the end of this one, not past audio it never heard.
    let w0 = [vec![tb], text("far"), vec![tb + 750, tb + 750], text("x")].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w0, vec![]]);
    run(&mut inf, &tok, 2001, &opts);
    assert_eq!(inf.windows.len(), 2);
    assert_eq!(inf.windows[1][0], 1001.0);

    let zero = TranscribeOptions {
        audio_ctx: Some(0),
        ..Default::default()
    };
    let data = mel_data(100);
    let err = transcribe(&mut inf, &tok, &view(&data), &zero, &mut |_| true).unwrap_err();
    assert!(err.to_string().contains("audio_ctx"), "{err}");
}

#[test]
fn without_timestamps_makes_one_segment_per_window() {
    let tok = toy(&[], 99);
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![text("plain")]);
    let opts = TranscribeOptions {
        without_timestamps: true,
        ..Default::default()
    };
    let t = run(&mut inf, &tok, 3501, &opts);
    assert_eq!(spans(&t), vec![(0.0, 30.0, "plain"), (30.0, 35.0, "plain")]);
    assert_eq!(inf.prompts[0], vec![tok.sot(), tok.no_timestamps()]);
    assert_eq!(*inf.prompts[1].last().unwrap(), tok.no_timestamps());
    assert_eq!(inf.prompts[1][0], tok.sot_prev());
}

#[test]
fn abort_stops_after_the_segment() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [
        vec![tb],
        text("a"),
        vec![tb + 100, tb + 100],
        text("b"),
        vec![tb + 200],
    ]
    .concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w]);
    let data = mel_data(9001);
    let mut seen = 0;
    let t = transcribe(
        &mut inf,
        &tok,
        &view(&data),
        &Default::default(),
        &mut |_| {
            seen += 1;
            false
        },
    )
    .unwrap();
    assert_eq!((seen, t.segments.len(), inf.windows.len()), (1, 1, 1));
}

#[test]
fn silent_windows_are_skipped() {
    let tok = toy(&[], 99);
    let (n, tb, ns, eot) = (
        tok.n_vocab(),
        tok.timestamp_begin(),
        tok.no_speech(),
        tok.eot(),
    );
    // Window 0: no-speech at the sot row and flat (unlikely) text; window 1: speech.
    let mut inf = MockInference::new(n, move |ctx: &Ctx| {
        if ctx.window == 0 {
            return if ctx.generated.is_empty() {
                one_hot(n, ns, 20.0)
            } else {
                vec![0.0; n]
            };
        }
        let script = [vec![tb], text("ok"), vec![tb + 100]].concat();
        one_hot(
            n,
            script.get(ctx.generated.len()).copied().unwrap_or(eot),
            10.0,
        )
    });
    let t = run(&mut inf, &tok, 3201, &TranscribeOptions::default());
    assert_eq!(spans(&t), vec![(30.0, 32.0, "ok")]);
    // The silent window was decoded once (no fallback) and left no prompt behind.
    assert_eq!(inf.prompts.len(), 2);
    assert_eq!(inf.prompts[1], vec![tok.sot()]);
}

#[test]
fn initial_prompt_and_prompt_reset() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [vec![tb], text("a"), vec![tb + 100, tb + 100], text("b")].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w]);
    let opts = TranscribeOptions {
        initial_prompt: Some("  Hello ".into()),
        condition_on_previous_text: false,
        ..Default::default()
    };
    run(&mut inf, &tok, 301, &opts);
    let hello = tok.encode(" Hello");
    assert_eq!(
        inf.prompts[0],
        [vec![tok.sot_prev()], hello, vec![tok.sot()]].concat()
    );
    // Not conditioning: the next window's prompt starts afresh.
    assert_eq!(inf.prompts[1], vec![tok.sot()]);
}

#[test]
fn options_and_inputs_are_checked() {
    let tok = toy(&[], 99);
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![vec![]]);
    let data = mel_data(10);
    let bad = MelView {
        data: &data,
        n_mels: 3,
        n_frames: 10,
    };
    assert!(matches!(
        transcribe(&mut inf, &tok, &bad, &Default::default(), &mut |_| true),
        Err(DecodeError::Mel(_))
    ));
    let opts = TranscribeOptions {
        max_new_tokens: Some(500),
        ..Default::default()
    };
    assert!(transcribe(&mut inf, &tok, &view(&data), &opts, &mut |_| true).is_err());
    let mut other = MockInference::scripted(100, 0, vec![vec![]]);
    assert!(matches!(
        transcribe(
            &mut other,
            &tok,
            &view(&data),
            &Default::default(),
            &mut |_| true
        ),
        Err(DecodeError::VocabMismatch { .. })
    ));
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![vec![]]);
    inf.fail_encode = Some(0);
    assert!(matches!(
        transcribe(
            &mut inf,
            &tok,
            &view(&data),
            &Default::default(),
            &mut |_| true
        ),
        Err(DecodeError::Inference(_))
    ));
    // Empty audio: nothing to decode.
    let t = run(
        &mut MockInference::scripted(tok.n_vocab(), 0, vec![]),
        &tok,
        1,
        &Default::default(),
    );
    assert!(t.segments.is_empty() && t.duration == 0.0);
    assert_eq!(max_steps(4, 0, None).unwrap(), 224);
    assert_eq!(max_steps(228, 0, None).unwrap(), 221);
    assert_eq!(max_steps(4, 0, Some(10)).unwrap(), 7);
}

#[test]
fn suppressed_tokens_follow_faster_whisper() {
    let tok = toy(&[], 99);
    assert!(suppressed_tokens(&tok, &[]).is_empty());
    let s = suppressed_tokens(&tok, &[5, -2, 5]);
    assert_eq!(s[0], 5);
    assert!(s.contains(&tok.sot()) && s.contains(&tok.no_speech()) && !s.contains(&tok.eot()));
    assert_eq!(s.len(), 7);
    let all = suppressed_tokens(&tok, &[-1]);
    assert!(tok.non_speech_tokens().iter().all(|t| all.contains(t)));
}

/// A toy multilingual vocabulary (51865 entries): 50257 ordinary tokens, 99 languages.
fn multilingual() -> Tokenizer {
    let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    vocab.extend((256..50257).map(|i| format!("<t{i}>").into_bytes()));
    Tokenizer::new(vocab, 51865).unwrap()
}

/// A model that hears German (logit 3 for "de", 2 for the next language) and says "ja"
/// from 0 to 1 s in every window.
fn says_ja_in_german(tok: &Tokenizer) -> MockInference {
    let (n, sot, tb, eot) = (tok.n_vocab(), tok.sot(), tok.timestamp_begin(), tok.eot());
    let de = tok.language_token("de").unwrap();
    MockInference::new(n, move |ctx: &Ctx| {
        if ctx.sequence == [sot] {
            let mut l = one_hot(n, de, 3.0);
            l[de as usize + 1] = 2.0;
            return l;
        }
        let script = [vec![tb], text("ja"), vec![tb + 50]].concat();
        one_hot(
            n,
            script.get(ctx.generated.len()).copied().unwrap_or(eot),
            10.0,
        )
    })
}

#[test]
fn language_is_detected_on_multilingual_models() {
    let tok = multilingual();
    let (sot, de) = (tok.sot(), tok.language_token("de").unwrap());
    let mut inf = says_ja_in_german(&tok);
    let data = mel_data(201);
    let t = run(&mut inf, &tok, 201, &Default::default());
    assert_eq!(t.language, "de");
    // softmax over 99 language logits: e^3 / (e^3 + e^2 + 97).
    let p = 3f64.exp() / (3f64.exp() + 2f64.exp() + 97.0);
    assert!((t.language_probability - p).abs() < 1e-6);
    // Detection sees the padding frame (features[..., :3000]); decoding windows do not.
    assert_eq!(inf.windows[0][200], 201.0);
    assert_eq!(inf.windows[1][200], 0.0);
    assert_eq!(inf.prompts[1], vec![sot, de, tok.transcribe()]);
    assert_eq!(spans(&t), vec![(0.0, 1.0, "ja")]);
    // A given language is used as is; an unknown one is an error.
    let opts = TranscribeOptions {
        language: Some("fr".into()),
        task: Task::Translate,
        ..Default::default()
    };
    let t = transcribe(&mut inf, &tok, &view(&data), &opts, &mut |_| true).unwrap();
    assert_eq!((t.language.as_str(), t.language_probability), ("fr", 1.0));
    let fr = tok.language_token("fr").unwrap();
    assert_eq!(*inf.prompts.last().unwrap(), vec![sot, fr, tok.translate()]);
    let opts = TranscribeOptions {
        language: Some("xx".into()),
        ..Default::default()
    };
    assert!(matches!(
        transcribe(&mut inf, &tok, &view(&data), &opts, &mut |_| true),
        Err(DecodeError::UnknownLanguage { .. })
    ));
    // English-only models take "en" whatever they are told.
    let en = toy(&[], 99);
    let mut inf = MockInference::scripted(en.n_vocab(), en.eot(), vec![vec![]]);
    let opts = TranscribeOptions {
        language: Some("fr".into()),
        ..Default::default()
    };
    assert_eq!(run(&mut inf, &en, 101, &opts).language, "en");
    assert!(detect_language(&mut inf, &en, &view(&data), 1, 0.5).is_err());
}

#[test]
fn detection_window_is_encoded_once() {
    let tok = multilingual();
    let (sot, de) = (tok.sot(), tok.language_token("de").unwrap());
    let mut inf = says_ja_in_german(&tok);
    // 40 s: the first window's mel is the one detection saw, so it is encoded once.
    let t = run(&mut inf, &tok, 4001, &Default::default());
    assert_eq!(t.language, "de");
    assert_eq!(inf.windows.len(), 2, "detection + one more window");
    assert_eq!((inf.windows[0][0], inf.windows[1][0]), (1.0, 3001.0));
    // The reused window still decodes from a fresh sequence.
    assert_eq!(inf.prompts[0], vec![sot]);
    assert_eq!(inf.prompts[1], vec![sot, de, tok.transcribe()]);
    assert_eq!(spans(&t)[0], (0.0, 1.0, "ja"));
}

/// Pseudo-random logits from a seed and the sequence: a model that babbles, constrained only
/// by the filters, with timestamps kept inside the window's content.
fn babbler(tok: &Tokenizer, seed: u64) -> MockInference {
    let (n, tb, eot) = (
        tok.n_vocab(),
        tok.timestamp_begin() as usize,
        tok.eot() as usize,
    );
    MockInference::new(n, move |ctx: &Ctx| {
        let mut h = seed ^ (ctx.window as u64).wrapping_mul(0x9E37_79B9);
        for &t in ctx.sequence {
            h = (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01B3);
        }
        let mut rng = crate::greedy::Rng::new(h);
        let content = ctx
            .mel
            .chunks(N_FRAMES)
            .next()
            .map_or(0, |r| r.iter().filter(|v| **v != 0.0).count());
        let mut l: Vec<f32> = (0..n).map(|_| (rng.next_f64() * 8.0) as f32).collect();
        for (i, v) in l.iter_mut().enumerate().skip(tb) {
            if (i - tb) * 2 > content {
                *v = f32::NEG_INFINITY;
            }
        }
        if ctx.generated.len() > 12 {
            l[eot] = 50.0;
        }
        l
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn segments_are_ordered_inside_the_audio(seed in any::<u64>(), frames in 2usize..9000) {
        let tok = toy(&[], 99);
        let mut inf = babbler(&tok, seed);
        let t = run(&mut inf, &tok, frames, &TranscribeOptions { best_of: 2, ..Default::default() });
        let mut last_end = 0.0f64;
        for s in &t.segments {
            prop_assert!(s.start <= s.end, "{s:?}");
            prop_assert!(s.start >= last_end - 1e-9, "{s:?} after {last_end}");
            prop_assert!(s.end <= t.duration + 1e-9, "{s:?} beyond {}", t.duration);
            prop_assert_eq!(&tok.decode(&s.tokens), &s.text);
            last_end = s.end;
        }
    }
}

#[test]
fn babbler_produces_segments_for_the_property() {
    let tok = toy(&[], 99);
    let total: usize = (0..4u64)
        .map(|seed| {
            let mut inf = babbler(&tok, seed);
            let opts = TranscribeOptions {
                best_of: 2,
                ..Default::default()
            };
            run(&mut inf, &tok, 6001, &opts).segments.len()
        })
        .sum();
    assert!(total >= 4, "{total} segments");
}

#[test]
fn prefix_is_forced_into_the_first_window_only() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    // The script counts the forced tokens as its first ones (the toy suppresses " ").
    let w = [vec![tb], text(" hi"), text("yo"), vec![tb + 100]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w]);
    let opts = TranscribeOptions {
        prefix: Some("  hi ".into()),
        hotwords: Some("Zed".into()),
        ..Default::default()
    };
    let t = run(&mut inf, &tok, 3501, &opts);
    assert_eq!(t.segments[0].text, " hiyo");
    // The prompt itself is unchanged, and holds no hotwords while a prefix is used.
    assert_eq!(inf.prompts[0], vec![tok.sot()]);
    // Forced tokens (<|0.00|> and " hi") score 0; the rest were chosen by the model.
    let lp = &t.segments[0].token_logprobs;
    assert_eq!(lp.len(), t.segments[0].tokens.len());
    assert!(lp[..4].iter().all(|&l| l == 0.0));
    assert!(lp[4..].iter().all(|&l| l < 0.0));
    // The second window (at 30 s) has no prefix but the hotwords, before the previous text.
    let second = &inf.prompts[1];
    assert_eq!(second[0], tok.sot_prev());
    assert_eq!(second[1..5], text(" Zed")[..]);
    assert_eq!(second[5], tb);
}

#[test]
fn hotwords_open_every_prompt() {
    let tok = toy(&[], 99);
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![text("x")]);
    let opts = TranscribeOptions {
        hotwords: Some("Kennedy".into()),
        without_timestamps: true,
        ..Default::default()
    };
    run(&mut inf, &tok, 101, &opts);
    assert_eq!(
        inf.prompts[0],
        [
            vec![tok.sot_prev()],
            text(" Kennedy"),
            vec![tok.sot(), tok.no_timestamps()]
        ]
        .concat()
    );
}

#[test]
fn forced_tokens_count_toward_max_steps() {
    // CTranslate2's start step excludes them; faster-whisper's length check includes them.
    assert_eq!(max_steps(1, 5, None).unwrap(), 224);
    assert_eq!(max_steps(1, 5, Some(10)).unwrap(), 8);
    assert!(max_steps(1, 5, Some(443)).is_err());
}

#[test]
fn clip_timestamps_pick_the_stretches_decoded() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [vec![tb], text("a"), vec![tb + 50]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w]);
    let opts = TranscribeOptions {
        clip_timestamps: vec![10.0, 20.0, 50.0],
        ..Default::default()
    };
    let t = run(&mut inf, &tok, 9001, &opts);
    let starts: Vec<f64> = t.segments.iter().map(|s| s.start).collect();
    assert_eq!(starts, vec![10.0, 50.0, 80.0]);
    // The first window holds frames 1000..2000 only, zero padded.
    assert_eq!(inf.windows[0][0], 1001.0);
    assert_eq!(inf.windows[0][999], 2000.0);
    assert_eq!(inf.windows[0][1000], 0.0);
    assert_eq!(inf.windows.len(), 3);
    for bad in [vec![-1.0], vec![f64::NAN]] {
        let opts = TranscribeOptions {
            clip_timestamps: bad,
            ..Default::default()
        };
        let data = mel_data(101);
        assert!(transcribe(&mut inf, &tok, &view(&data), &opts, &mut |_| true).is_err());
    }
}

#[test]
fn soundless_windows_are_not_decoded() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [vec![tb], text("a"), vec![tb + 50]].concat();
    // 30 s of digital silence (-1.5 in every bin), then 30 s of sound.
    let frames = 6001;
    let data: Vec<f32> = (0..N_MELS)
        .flat_map(|_| (0..frames).map(|f| if f < 3000 { -1.5 } else { 1.0 }))
        .collect();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w.clone()]);
    let t = transcribe(
        &mut inf,
        &tok,
        &view(&data),
        &Default::default(),
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(spans(&t), vec![(30.0, 31.0, "a")]);
    assert_eq!(inf.windows.len(), 1);
    // Without the gate every window is decoded, as faster-whisper does.
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w]);
    let opts = TranscribeOptions {
        silence_floor: None,
        ..Default::default()
    };
    let t = transcribe(&mut inf, &tok, &view(&data), &opts, &mut |_| true).unwrap();
    assert_eq!(t.segments.len(), 2);
    // Silence beside loud sound sits at the mel's clamp (2 under the file's top): no decode.
    let data: Vec<f32> = (0..N_MELS)
        .flat_map(|_| (0..frames).map(|f| if f < 3000 { 0.5 } else { 2.5 }))
        .collect();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![text("a")]);
    transcribe(
        &mut inf,
        &tok,
        &view(&data),
        &Default::default(),
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(inf.windows.len(), 1);
}

#[test]
fn hopeless_windows_without_speech_are_silence() {
    let fb = |nsp: f64, avg: f64, exhausted: bool| Fallback {
        result: crate::greedy::DecodingResult {
            tokens: vec![1],
            logprobs: vec![avg as f32],
            sum_logprob: avg,
            avg_logprob: avg,
            no_speech_prob: nsp,
        },
        temperature: 1.0,
        compression_ratio: 3.0,
        exhausted,
    };
    let opts = TranscribeOptions::default();
    // faster-whisper's rule: likely silent and improbable.
    assert!(is_silence(&fb(0.9, -1.5, false), &opts));
    assert!(!is_silence(&fb(0.9, -0.2, false), &opts));
    // Ours: likely silent and every attempt failed, however confident the loop.
    assert!(is_silence(&fb(0.9, -0.05, true), &opts));
    assert!(!is_silence(&fb(0.3, -0.05, true), &opts));
    let faster_whisper = TranscribeOptions {
        silence_on_failed_fallback: false,
        ..Default::default()
    };
    assert!(!is_silence(&fb(0.9, -0.05, true), &faster_whisper));
}

#[test]
fn carried_initial_prompt_heads_every_window() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [vec![tb], text("ok"), vec![tb + 150]].concat();
    let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w.clone()]);
    let opts = TranscribeOptions {
        initial_prompt: Some("Zed".into()),
        carry_initial_prompt: true,
        // Resets the prompt after every window: the carried prompt must stay.
        condition_on_previous_text: false,
        without_timestamps: false,
        ..Default::default()
    };
    run(&mut inf, &tok, 6001, &opts);
    let head = [vec![tok.sot_prev()], text(" Zed")].concat();
    assert!(inf.prompts.len() >= 2);
    for p in &inf.prompts {
        assert_eq!(p[..head.len()], head[..], "{p:?}");
    }
    // The cap keeps the carried prompt whole and the most recent text.
    let carried: Vec<u32> = (0..10).collect();
    let all: Vec<u32> = (0..400).collect();
    let c = carry_prompt(&carried, &all, 0, MAX_LENGTH / 2 - 1);
    assert_eq!(c.len(), MAX_LENGTH / 2 - 1);
    assert_eq!(c[..10], carried[..]);
    assert_eq!(*c.last().unwrap(), 399);
    assert_eq!(
        carry_prompt(&[], &all, 390, MAX_LENGTH / 2 - 1),
        (390..400).collect::<Vec<u32>>()
    );
}

/// whisper.cpp's `max_context`: a prompt carries at most that many tokens, its
/// `<|startofprev|>` counted; 0 carries nothing, not even the initial prompt.
#[test]
fn max_context_bounds_the_carried_text() {
    let tok = toy(&[], 99);
    let tb = tok.timestamp_begin();
    let w = [vec![tb], text("four"), vec![tb + 150]].concat();
    let prompts = |max_context| {
        let mut inf = MockInference::scripted(tok.n_vocab(), tok.eot(), vec![w.clone()]);
        let opts = TranscribeOptions {
            initial_prompt: Some("Zed".into()),
            max_context,
            without_timestamps: false,
            ..Default::default()
        };
        run(&mut inf, &tok, 9001, &opts);
        assert!(inf.prompts.len() >= 3);
        inf.prompts
    };
    let sot = |p: &[u32]| p.iter().position(|&t| t == tok.sot()).unwrap();
    // By default the second window carries the prompt and the first window's text.
    let all = prompts(None);
    let first = [vec![tok.sot_prev()], text(" Zed"), w.clone()].concat();
    assert_eq!(all[1][..sot(&all[1])], first[..]);
    // Three: <|startofprev|> and the latest two tokens.
    for p in &prompts(Some(3))[1..] {
        assert_eq!(p[..sot(p)], [tok.sot_prev(), u32::from(b'r'), tb + 150]);
    }
    for p in prompts(Some(0)) {
        assert_eq!(sot(&p), 0, "{p:?}");
    }
}

#[test]
fn fallback_temperature_ladders() {
    assert_eq!(
        fallback_temperatures(0.0, 0.2),
        TranscribeOptions::default().temperatures
    );
    assert_eq!(fallback_temperatures(0.5, 0.0), vec![0.5]);
    assert_eq!(fallback_temperatures(1.5, 0.2), vec![1.5]);
    assert_eq!(fallback_temperatures(0.0, 0.3), vec![0.0, 0.3, 0.6, 0.9]);
    assert_eq!(fallback_temperatures(0.2, 0.4), vec![0.2, 0.6, 1.0]);
}

#[test]
fn suppress_regex_matches_whole_text_tokens() {
    let tok = toy(&[], 99);
    let digits: Vec<u32> = (u32::from(b'0')..=u32::from(b'9')).collect();
    assert_eq!(regex_suppressed(&tok, "[0-9]").unwrap(), digits);
    // Whole tokens only: "a" alone, not every token holding an "a".
    assert_eq!(regex_suppressed(&tok, "a").unwrap(), vec![u32::from(b'a')]);
    // Never a special token, even for a pattern that matches anything.
    let all = regex_suppressed(&tok, "(?s-u:.*)").unwrap();
    assert_eq!(all.len(), tok.eot() as usize);
    let err = regex_suppressed(&tok, "(").unwrap_err().to_string();
    assert!(err.contains("suppress_regex"), "{err}");
    // In the filters, beside the suppressed tokens.
    let opts = TranscribeOptions {
        suppress_regex: Some("[0-9]".into()),
        ..TranscribeOptions::default()
    };
    let need = |opts: &TranscribeOptions| {
        let f = filters(&tok, opts).unwrap();
        let refs: Vec<&dyn LogitFilter> = f.iter().map(|f| f.as_ref()).collect();
        let task = DecodeTask {
            prompt: &[],
            sot_index: 0,
            forced: &[],
            eot: tok.eot(),
            no_speech: tok.no_speech(),
            max_steps: 1,
            filters: &refs,
        };
        task.logit_need(1)
    };
    match need(&opts) {
        LogitNeed::Top { never, .. } => assert!(digits.iter().all(|d| never.contains(d))),
        other => panic!("{other:?}"),
    }
    let bad = TranscribeOptions {
        suppress_regex: Some("[".into()),
        ..TranscribeOptions::default()
    };
    assert!(filters(&tok, &bad).is_err());
}
