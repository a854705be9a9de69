//! Language detection on the shared non-English clips; no text out of silence or noise
//! with default settings, and faster-whisper's own output on digital silence without the
//! energy gate.

use sotto::{Model, TranscribeOptions};

/// The manifests' language of a clip.
fn manifest_language(shared: &std::path::Path, file: &str) -> String {
    for sub in ["real", "synth"] {
        let manifest = shared.join("data/clips").join(sub).join("manifest.tsv");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        if let Some(line) = text.lines().find(|l| l.split('\t').next() == Some(file)) {
            return line
                .split('\t')
                .nth(1)
                .expect("language column")
                .to_string();
        }
    }
    panic!("{file} is in no manifest");
}

#[test]
fn base_detects_the_language_of_every_non_english_clip() {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let model = Model::load(&sotto_testdata::model_dir("base")).expect("model loads");
    let mut session = model.session(2).expect("session");
    for file in [
        "cheetah_de.wav",
        "cheetah_es.wav",
        "cheetah_fr.wav",
        "de01_news.wav",
        "es01_news.wav",
        "fr01_news.wav",
    ] {
        let wav = sotto_testdata::clip(&shared, file);
        let audio = sotto::audio::load_16k_mono(&wav.to_string_lossy()).expect("clip loads");
        let d = session.detect_language(&audio).expect("detects");
        let expected = manifest_language(&shared, file);
        eprintln!(
            "{file}: {} {:.4} (expected {expected})",
            d.language, d.probability
        );
        assert_eq!(d.language, expected, "{file}: top 3 {:?}", &d.all[..3]);
        let total: f64 = d.all.iter().map(|(_, p)| p).sum();
        assert!(
            (total - 1.0).abs() < 1e-3,
            "{file}: probabilities sum to {total}"
        );
        assert!(
            d.all.windows(2).all(|w| w[0].1 >= w[1].1),
            "{file}: not sorted"
        );
    }
}

/// faster-whisper 1.2.1's `detect_language(audio, language_detection_segments,
/// language_detection_threshold)` (float32) on clips each followed by silence up to 30 s:
/// the language, its probability and the top of the list it returns.
#[test]
fn detection_over_several_windows_matches_faster_whisper() {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let clip = |f: &str| {
        let wav = sotto_testdata::clip(&shared, f);
        let mut a = sotto::audio::load_16k_mono(&wav.to_string_lossy()).expect("clip loads");
        a.resize(30 * 16000, 0.0);
        a
    };
    let (es, fr) = (clip("cheetah_es.wav"), clip("cheetah_fr.wav"));
    let model = Model::load_with(
        &sotto_testdata::model_dir("base"),
        sotto::Device::Cpu,
        sotto::LoadOptions::F32,
    )
    .expect("model loads");
    let mut session = model.session(2).expect("session");
    for (audio, segments, threshold, want) in [
        // The second window passes the threshold.
        ([&es[..], &fr, &fr].concat(), 3, 0.99, ("fr", 0.9965, "fr")),
        // None does: fr is on top twice of three.
        ([&es[..], &fr, &fr].concat(), 3, 1.01, ("fr", 0.9965, "fr")),
        // One each of es, fr and en (the one-frame window after 60 s, as faster-whisper
        // reads it): the first wins; the list is the last window's.
        ([&es[..], &fr].concat(), 5, 1.01, ("es", 0.5062, "en")),
    ] {
        let d = session
            .detect_language_with(&audio, segments, threshold)
            .expect("detects");
        let got = (d.language, d.probability, d.all[0].0);
        assert!(
            got.0 == want.0 && (got.1 - want.1).abs() < 2e-3 && got.2 == want.2,
            "{segments} windows, threshold {threshold}: {got:?}, want {want:?}"
        );
    }
    assert!(session.detect_language_with(&es, 0, 0.5).is_err());
}

#[test]
fn english_only_models_refuse_detection() {
    if sotto_testdata::shared_dir().is_none() {
        return;
    }
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).expect("model loads");
    let mut session = model.session(1).expect("session");
    let err = session.detect_language(&[0.0; 16000]).unwrap_err();
    assert!(err.to_string().contains("English-only"), "{err}");
}

/// xorshift64*: uniform in [-1, 1).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// 30 s each of digital silence, 16-bit dither (±1 LSB), white noise and brown noise
/// (seeded; peak 0.3).
fn non_speech() -> Vec<(&'static str, Vec<f32>)> {
    let n = 30 * 16000;
    let mut rng = Noise(0x5eed_1234_abcd_0001);
    let white: Vec<f32> = (0..n).map(|_| 0.3 * rng.next()).collect();
    let dither: Vec<f32> = (0..n)
        .map(|_| (rng.next() * 1.5).round() / 32768.0)
        .collect();
    let mut level = 0f32;
    let mut brown: Vec<f32> = (0..n)
        .map(|_| {
            // Leaky integration keeps the walk bounded around zero.
            level = 0.998 * level + 0.02 * rng.next();
            level
        })
        .collect();
    let peak = brown.iter().fold(0f32, |m, x| m.max(x.abs()));
    brown.iter_mut().for_each(|x| *x *= 0.3 / peak);
    vec![
        ("silence", vec![0.0; n]),
        ("dither", dither),
        ("white noise", white),
        ("brown noise", brown),
    ]
}

/// Default settings give no text on silence or noise. Without sotto's own rules
/// (`silence_floor: None`, `silence_on_failed_fallback: false`) digital silence gives faster-whisper 1.2.1's own output, " You"
/// (measured with faster-whisper on the same 30 s of zeros, float32: tiny.en no_speech_prob
/// 0.948, avg_logprob -0.681; base 0.932, -0.659): its skip rule drops a window only when
/// no_speech_prob > 0.6 *and* avg_logprob < -1.0, and this hallucination is confident enough
/// to stay.
fn check_silent(name: &str) {
    if sotto_testdata::shared_dir().is_none() {
        return;
    }
    let model = Model::load(&sotto_testdata::model_dir(name)).expect("model loads");
    let mut session = model.session(2).expect("session");
    let opts = TranscribeOptions::default();
    let mut heard = Vec::new();
    for (what, audio) in non_speech() {
        let t = session
            .transcribe(&audio, &opts, &mut |_| true)
            .expect("transcribes");
        if !t.text().is_empty() {
            let first = &t.segments[0];
            heard.push(format!(
                "{what}: {:?} (no_speech_prob {:.3}, avg_logprob {:.3}, temperature {})",
                t.text(),
                first.no_speech_prob,
                first.avg_logprob,
                first.temperature
            ));
        }
        if what == "silence" {
            let ungated = TranscribeOptions {
                silence_floor: None,
                silence_on_failed_fallback: false,
                ..TranscribeOptions::default()
            };
            let t = session.transcribe(&audio, &ungated, &mut |_| true).unwrap();
            assert_eq!(
                t.text(),
                "You",
                "{name}: ungated silence should give faster-whisper's text"
            );
            let s = &t.segments[0];
            assert!(
                s.no_speech_prob > 0.6 && s.avg_logprob > -1.0,
                "{name}: silence kept for another reason: {s:?}"
            );
        }
    }
    assert!(
        heard.is_empty(),
        "{name} heard text in silence or noise:\n{}",
        heard.join("\n")
    );
}

#[test]
fn tiny_en_hears_nothing_in_silence_or_noise() {
    check_silent("tiny.en");
}

#[test]
fn base_hears_nothing_in_silence_or_noise() {
    check_silent("base");
}
