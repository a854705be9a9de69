//! Word timestamps against faster-whisper 1.2.1's (`word_timestamps=True`, beam 5, float32)
//! on the shared clips: over the words both transcripts share, the median absolute
//! difference of starts and ends is at most 100 ms; every word lies in its segment and in
//! the audio, in order.

use sotto::{Model, TranscribeOptions, Transcript};

/// Lower-cased letters and digits of a word.
fn norm(w: &str) -> String {
    w.chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Pairs of indices of equal words along a longest common subsequence.
fn matches(a: &[String], b: &[String]) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut l = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if a[i] == b[j] {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((i, j));
            (i, j) = (i + 1, j + 1);
        } else if l[i + 1][j] >= l[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

fn check_properties(clip: &str, t: &Transcript) {
    let mut last = 0.0f64;
    for s in &t.segments {
        assert!(!s.words.is_empty(), "{clip}: segment {} has no words", s.id);
        for w in &s.words {
            let ctx = format!("{clip}: word {:?} [{}, {}]", w.word, w.start, w.end);
            assert!(w.start <= w.end, "{ctx}: ends before it starts");
            assert!(
                w.start + 1e-9 >= last,
                "{ctx}: starts before the word before ends ({last})"
            );
            assert!(
                w.start + 1e-9 >= s.start && w.end <= s.end + 1e-9,
                "{ctx}: outside its segment [{}, {}]",
                s.start,
                s.end
            );
            assert!(
                w.end <= t.duration + 0.02,
                "{ctx}: past the audio ({} s)",
                t.duration
            );
            assert!(
                (0.0..=1.0).contains(&w.probability),
                "{ctx}: probability {}",
                w.probability
            );
            last = w.end;
        }
    }
}

fn check_model(name: &str, multilingual: bool) {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let refs = shared.join(format!(
        "data/reference/faster-whisper/{name}-float32-b5-words"
    ));
    let model = Model::load(&sotto_testdata::model_dir(name)).expect("model loads");
    let mut session = model.session(2).expect("session");
    let mut entries: Vec<_> = std::fs::read_dir(&refs)
        .expect("reference folder")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "no references in {}", refs.display());
    let mut diffs: Vec<f64> = Vec::new();
    let mut report = String::new();
    for path in &entries {
        let clip = path.file_stem().unwrap().to_string_lossy().into_owned();
        let reference: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let ref_words: Vec<(String, f64, f64)> = reference["segments"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["words"].as_array().cloned().unwrap_or_default())
            .map(|w| {
                (
                    norm(w["word"].as_str().unwrap()),
                    w["start"].as_f64().unwrap(),
                    w["end"].as_f64().unwrap(),
                )
            })
            .collect();
        let wav = sotto_testdata::clip(&shared, &format!("{clip}.wav"));
        let audio = sotto::audio::load_16k_mono(&wav.to_string_lossy()).expect("clip loads");
        let opts = TranscribeOptions {
            word_timestamps: true,
            language: multilingual
                .then(|| reference["language"].as_str().map(str::to_string))
                .flatten(),
            ..Default::default()
        };
        let t = session
            .transcribe(&audio, &opts, &mut |_| true)
            .expect("transcribes");
        check_properties(&clip, &t);
        let ours: Vec<(String, f64, f64)> = t
            .segments
            .iter()
            .flat_map(|s| s.words.iter())
            .map(|w| (norm(&w.word), w.start, w.end))
            .collect();
        let a: Vec<String> = ours.iter().map(|w| w.0.clone()).collect();
        let b: Vec<String> = ref_words.iter().map(|w| w.0.clone()).collect();
        let pairs = matches(&a, &b);
        let mut clip_diffs = Vec::new();
        for &(i, j) in &pairs {
            clip_diffs.push((ours[i].1 - ref_words[j].1).abs());
            clip_diffs.push((ours[i].2 - ref_words[j].2).abs());
        }
        let max = clip_diffs.iter().copied().fold(0.0, f64::max);
        report += &format!(
            "{clip}: {}/{} words matched, max |diff| {:.0} ms\n",
            pairs.len(),
            ref_words.len(),
            max * 1000.0
        );
        diffs.extend(clip_diffs);
    }
    diffs.sort_by(f64::total_cmp);
    let median = diffs[diffs.len() / 2];
    let exact = diffs.iter().filter(|&&d| d < 0.005).count();
    let within = |ms: f64| diffs.iter().filter(|&&d| d <= ms / 1000.0 + 1e-9).count();
    eprintln!(
        "{name}: {} word times, median |diff| {:.1} ms, equal {:.1}%, <= 20 ms {:.1}%, <= 100 ms {:.1}%\n{report}",
        diffs.len(),
        median * 1000.0,
        100.0 * exact as f64 / diffs.len() as f64,
        100.0 * within(20.0) as f64 / diffs.len() as f64,
        100.0 * within(100.0) as f64 / diffs.len() as f64,
    );
    assert!(
        median <= 0.1,
        "{name}: median |diff| {median} s > 100 ms\n{report}"
    );
}

#[test]
fn tiny_en_word_times_match_faster_whisper() {
    check_model("tiny.en", false);
}

#[test]
fn base_word_times_match_faster_whisper() {
    check_model("base", true);
}

/// Segment limits only re-cut the text: the pieces keep every word in order, respect the
/// limits (a lone longer word aside), keep `decode(tokens) == text`, and stay ordered.
#[test]
fn segment_limits_split_between_words() {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let model = Model::load(&sotto_testdata::model_dir("tiny.en")).expect("model loads");
    let mut session = model.session(2).expect("session");
    for clip in ["real/jfk.wav", "synth/en07_story.wav"] {
        let path = shared.join("data/clips").join(clip);
        let audio = sotto::audio::load_16k_mono(path.to_str().unwrap()).unwrap();
        let whole = TranscribeOptions {
            word_timestamps: true,
            ..Default::default()
        };
        let full = session.transcribe(&audio, &whole, &mut |_| true).unwrap();
        for (chars, tokens) in [(Some(20), None), (None, Some(6)), (Some(42), Some(12))] {
            let opts = TranscribeOptions {
                max_segment_chars: chars,
                max_segment_tokens: tokens,
                ..whole.clone()
            };
            let t = session.transcribe(&audio, &opts, &mut |_| true).unwrap();
            let words = |t: &Transcript| -> Vec<String> {
                t.segments
                    .iter()
                    .flat_map(|s| s.words.iter().map(|w| w.word.clone()))
                    .collect()
            };
            assert_eq!(words(&t), words(&full), "{clip}: the words changed");
            assert!(
                t.segments.len() > full.segments.len(),
                "{clip}: nothing split"
            );
            check_properties(clip, &t);
            for s in &t.segments {
                assert_eq!(model.tokenizer().decode(&s.tokens), s.text);
                assert_eq!(s.tokens.len(), s.token_logprobs.len());
                let n_chars = s.text.trim_start().chars().count();
                let fits = chars.is_none_or(|c| n_chars <= c)
                    && tokens.is_none_or(|c| s.tokens.len() <= c);
                assert!(
                    fits || s.words.len() == 1,
                    "{clip}: {:?} breaks {chars:?}/{tokens:?}",
                    s.text
                );
            }
        }
    }
}
