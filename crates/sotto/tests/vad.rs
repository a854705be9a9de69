//! Voice activity detection against faster-whisper 1.2.1's (tests/golden/vad*, made by
//! scripts/goldens/vad.py with onnxruntime): window probabilities within 1e-4, the same
//! speech stretches, and transcription of speech only with the original audio's times.

use sotto::{Model, TranscribeOptions, Vad};

fn golden_probs(name: &str) -> Vec<f32> {
    sotto_testdata::read_f32(&sotto_testdata::golden(&format!("vad_{name}.f32")))
}

fn golden_stretches(name: &str) -> Vec<(usize, usize)> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sotto_testdata::golden("vad.json")).unwrap())
            .unwrap();
    meta["stretches"][name]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p[0].as_u64().unwrap() as usize,
                p[1].as_u64().unwrap() as usize,
            )
        })
        .collect()
}

/// jfk as int16 / 32768, as the goldens read it; and the "gap" clip made from it.
fn clips() -> (Vec<f32>, Vec<f32>) {
    let jfk = sotto::audio::load_16k_mono(sotto_testdata::jfk().to_str().unwrap()).unwrap();
    let z = |s: usize| vec![0f32; s * 16_000];
    let gap = [z(1), jfk.clone(), z(3), jfk.clone(), z(1)].concat();
    (jfk, gap)
}

#[test]
fn probabilities_and_stretches_match_faster_whisper() {
    let vad = Vad::load(&sotto_testdata::vad_model()).unwrap();
    let (jfk, gap) = clips();
    for (name, audio) in [("jfk", &jfk), ("gap", &gap)] {
        let want = golden_probs(name);
        let got = vad.probabilities(audio).unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            worst < 1e-4,
            "{name}: largest probability difference {worst}"
        );
        assert_eq!(vad.speech(audio).unwrap(), golden_stretches(name), "{name}");
    }
}

#[test]
fn speech_only_transcription_keeps_the_original_times() {
    let vad = Vad::load(&sotto_testdata::vad_model()).unwrap();
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(2).unwrap();
    let (_, gap) = clips();
    // Greedy at temperature 0 only: JFK twice compresses past the 2.4 threshold, and the
    // fallback's samples (hence their segments) would differ with each CPU's arithmetic.
    let opts = TranscribeOptions {
        beam_size: 1,
        temperatures: vec![0.0],
        ..TranscribeOptions::default()
    };
    let mut seen = Vec::new();
    let t = session
        .transcribe_speech(&vad, &gap, &opts, &mut |s| {
            seen.push(s.start);
            true
        })
        .unwrap();
    let text = sotto_testdata::normalise(&t.text());
    assert_eq!(
        text,
        format!("{} {}", sotto_testdata::JFK, sotto_testdata::JFK),
        "{t:?}"
    );
    assert!((t.duration - 27.0).abs() < 0.01, "{}", t.duration);
    // Segment times are the original audio's: the first starts after the 1 s of silence,
    // and the last ends past what the joined speech lasts (~4 s of silence removed; the
    // model's last timestamp may pass the audio's end a little), however the model cut
    // the segments.
    let joined = vad
        .speech(&gap)
        .unwrap()
        .iter()
        .map(|(a, b)| b - a)
        .sum::<usize>();
    let joined = joined as f64 / 16_000.0;
    let last = t.segments.last().expect("segments");
    assert!(
        last.end > joined + 1.5 && last.end < t.duration + 1.0,
        "joined speech {joined} s: {:?}",
        t.segments
    );
    assert!(t.segments[0].start >= 0.9, "{:?}", t.segments);
    assert_eq!(seen, t.segments.iter().map(|s| s.start).collect::<Vec<_>>());
    // Word times too: the second "And so" starts after the 3 s of silence, at 15 s of the
    // original, not where it lies in the joined speech (about 12.3 s).
    let words = session
        .transcribe_speech(
            &vad,
            &gap,
            &TranscribeOptions {
                word_timestamps: true,
                ..opts.clone()
            },
            &mut |_| true,
        )
        .unwrap();
    let ask: Vec<f64> = words
        .segments
        .iter()
        .flat_map(|s| &s.words)
        .filter(|w| w.word.trim().eq_ignore_ascii_case("and"))
        .map(|w| w.start)
        .collect();
    assert_eq!(ask.len(), 2, "{ask:?}");
    assert!(
        (0.9..1.5).contains(&ask[0]) && (14.9..15.5).contains(&ask[1]),
        "{ask:?}"
    );
    // Silence only: no segments, no error.
    let quiet = session
        .transcribe_speech(&vad, &vec![0f32; 5 * 16_000], &opts, &mut |_| true)
        .unwrap();
    assert!(quiet.segments.is_empty());
}

#[test]
fn stretches_found_apart_give_the_same_transcript_and_bad_ones_are_refused() {
    let vad = Vad::load(&sotto_testdata::vad_model()).unwrap();
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mut session = model.session(2).unwrap();
    let (_, gap) = clips();
    let opts = TranscribeOptions {
        beam_size: 1,
        ..TranscribeOptions::default()
    };
    let whole = session
        .transcribe_speech(&vad, &gap, &opts, &mut |_| true)
        .unwrap();
    let chunks = vad.speech(&gap).unwrap();
    let (apart, _) = session
        .transcribe_chunks_timed(&gap, &chunks, &opts, &mut |_| true)
        .unwrap();
    assert_eq!(apart.segments, whole.segments);
    for bad in [
        vec![(10, 5)],
        vec![(100, 200), (150, 300)],
        vec![(0, gap.len() + 1)],
    ] {
        let err = session
            .transcribe_chunks_timed(&gap, &bad, &opts, &mut |_| true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("speech stretches"), "{bad:?}: {err}");
    }
}

#[test]
fn a_whisper_cpp_ggml_vad_file_runs_as_the_onnx_one() {
    let Some(ggml) = sotto_testdata::silero_ggml() else {
        return;
    };
    let vad = Vad::load(&ggml).unwrap();
    // The ONNX file's network with the weights the ggml file rounds to f16 (convolutions
    // and STFT basis) rounded the same way: the two must then agree to float precision,
    // which checks the names, layouts and PyTorch's gate order.
    let onnx_path = sotto_testdata::vad_model();
    let onnx =
        sotto::formats::onnx::read_initializers(&std::fs::read(&onnx_path).unwrap(), &onnx_path)
            .unwrap();
    let rounded = sotto::model::silero::SileroVad::from_tensors(|name| {
        let t = onnx.get(name)?;
        let dims = t.dims.iter().map(|&d| d as usize).collect();
        let mut v = t.floats()?;
        if name.ends_with("forward_basis_buffer") || name.ends_with(".weight") {
            v = v
                .into_iter()
                .map(|x| half::f16::from_f32(x).to_f32())
                .collect();
        }
        Some((dims, v))
    })
    .unwrap();
    let (jfk, gap) = clips();
    for (name, audio) in [("jfk", &jfk), ("gap", &gap)] {
        let got = vad.probabilities(audio).unwrap();
        let exact = rounded.probabilities(audio).unwrap();
        let worst = |want: &[f32]| {
            assert_eq!(got.len(), want.len(), "{name}");
            got.iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max)
        };
        let same_weights = worst(&exact);
        assert!(
            same_weights < 1e-5,
            "{name}: {same_weights} from the rounded ONNX network"
        );
        let speech = vad.speech(audio).unwrap();
        let rounded_speech =
            sotto::audio::vad::speech_timestamps(&exact, audio.len(), &vad.options);
        assert_eq!(speech, rounded_speech, "{name}");
        // Against faster-whisper's own (f32) run, f16 weights move a probability by at most
        // a few hundredths, and an edge of speech by at most a window.
        let vs_golden = worst(&golden_probs(name));
        assert!(
            vs_golden < 0.05,
            "{name}: {vs_golden} from faster-whisper's"
        );
        let golden = golden_stretches(name);
        assert_eq!(speech.len(), golden.len(), "{name}");
        for (a, b) in speech.iter().zip(&golden) {
            assert!(
                a.0.abs_diff(b.0) <= 512 && a.1.abs_diff(b.1) <= 512,
                "{name}: {speech:?} against {golden:?}"
            );
        }
    }
    // A truncated or foreign file is a one-line error naming it.
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.bin");
    let bytes = std::fs::read(&ggml).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let err = Vad::load(&cut).err().unwrap().to_string();
    assert!(
        err.contains("cut.bin") && err.contains("truncated"),
        "{err}"
    );
    let model = sotto_testdata::model_dir("tiny.en").join("model.bin");
    let err = Vad::load(&model).err().unwrap().to_string();
    assert!(err.contains("model.bin"), "{err}");
}

#[test]
fn the_onnx_vad_converts_to_the_file_whisper_cpp_s_converter_writes() {
    let Some(ggml) = sotto_testdata::silero_ggml() else {
        return;
    };
    // faster-whisper's ONNX holds silero-vad 6.1.0's weights; the converter's file from
    // that release's PyTorch archive must come out byte for byte, but for the version.
    let onnx_path = sotto_testdata::vad_model();
    let got = sotto::ggml_vad_from_onnx(&std::fs::read(&onnx_path).unwrap(), &onnx_path).unwrap();
    let mut want = std::fs::read(&ggml).unwrap();
    let version = 4 + 4 + "silero-16k".len();
    want[version..version + 12].copy_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "first difference at byte {:?}",
        got.iter().zip(&want).position(|(a, b)| a != b)
    );
    let err = sotto::ggml_vad_from_onnx(b"\x08\x01", &onnx_path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("silero_vad_v6.onnx"), "{err}");
}
