//! The log-mel front end against faster-whisper's FeatureExtractor (goldens from
//! scripts/goldens/mel.py).

use sotto_audio::{decode_file, log_mel_spectrogram, mel_filters};
use sotto_testdata::{clip, golden, read_f32, shared_dir};

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn golden_meta() -> serde_json::Value {
    let text = std::fs::read_to_string(golden("mel.json")).expect("tests/golden/mel.json");
    serde_json::from_str(&text).expect("mel.json is JSON")
}

#[test]
fn mel_filters_match_librosa() {
    for n_mels in [80, 128] {
        let want = read_f32(&golden(&format!("mel_filters{n_mels}.f32")));
        let got = mel_filters(n_mels);
        assert_eq!(got.len(), n_mels * 201);
        let diff = max_abs_diff(&got, &want);
        eprintln!("mel_filters({n_mels}): max abs diff {diff:e}");
        assert!(diff <= 1e-6, "{n_mels} mels: max abs diff {diff}");
    }
}

#[test]
fn log_mel_matches_faster_whisper() {
    let Some(shared) = shared_dir() else { return };
    let meta = golden_meta();
    let cases = meta["mel"].as_object().expect("mel entries");
    assert!(cases.len() >= 5);
    for (file, case) in cases {
        let clip_name = case["clip"].as_str().unwrap();
        let n_mels = case["n_mels"].as_u64().unwrap() as usize;
        let padding = case["padding"].as_u64().unwrap() as usize;
        let shape: Vec<usize> = case["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();

        let audio = decode_file(&clip(&shared, clip_name)).unwrap();
        assert_eq!(audio.sample_rate, 16000, "{clip_name}");
        assert_eq!(
            audio.samples.len() as u64,
            case["n_samples"].as_u64().unwrap()
        );
        let mel = log_mel_spectrogram(&audio.samples, n_mels, padding);
        assert_eq!([mel.n_mels, mel.n_frames], [shape[0], shape[1]], "{file}");

        let want = read_f32(&golden(file));
        let diff = max_abs_diff(&mel.data, &want);
        eprintln!("{file}: max abs diff {diff:e}");
        assert!(diff <= 1e-4, "{file}: max abs diff {diff}");
    }
}
