//! Transcript parity with faster-whisper on the shared clips.
//!
//! For each clip with a faster-whisper transcript — greedy (`*-float32-b1`, sotto with
//! `beam_size: 1`) and faster-whisper's defaults (`*-float32-b5`, sotto's defaults: beam 5,
//! best of 5) — sotto's transcript must match it word for word (after normalisation) on at
//! least 90% of the clips, and sotto's pooled WER against the manifests' reference text must
//! be within a margin of faster-whisper's (1 point greedy, 0.5 point beam 5).

use std::collections::BTreeMap;
use std::path::Path;

use sotto::{Model, TranscribeOptions};

/// Lower-cases and keeps letters and digits; everything else separates words.
fn words(text: &str) -> Vec<String> {
    text.chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_lowercase().next().unwrap_or(c)
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Word-level edit distance.
fn edits(reference: &[String], hypothesis: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=hypothesis.len()).collect();
    for (i, r) in reference.iter().enumerate() {
        let mut cur = vec![i + 1; hypothesis.len() + 1];
        for (j, h) in hypothesis.iter().enumerate() {
            let sub = prev[j] + usize::from(r != h);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[hypothesis.len()]
}

/// file → (language, reference text), from both manifests.
fn manifests(shared: &Path) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for sub in ["real", "synth"] {
        let text =
            std::fs::read_to_string(shared.join("data/clips").join(sub).join("manifest.tsv"))
                .expect("manifest");
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            if cols.len() >= 3 {
                out.insert(
                    cols[0].to_string(),
                    (cols[1].to_string(), cols[2].to_string()),
                );
            }
        }
    }
    out
}

/// `beam`: 1 (greedy references, sotto greedy) or 5 (default references, default options).
fn check_model(name: &str, beam: usize, wer_margin: f64) {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    let model = Model::load(&sotto_testdata::model_dir(name)).expect("model loads");
    let mut session = model.session(2).expect("session");
    let refs_dir = shared.join(format!(
        "data/reference/faster-whisper/{name}-float32-b{beam}"
    ));
    let manifest = manifests(&shared);

    let (mut same, mut total) = (0, 0);
    let (mut our_edits, mut fw_edits, mut ref_words) = (0, 0, 0);
    let mut report = String::new();
    let mut entries: Vec<_> = std::fs::read_dir(&refs_dir)
        .expect("reference folder")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for fw_path in entries {
        let stem = fw_path.file_stem().unwrap().to_string_lossy().into_owned();
        let wav = format!("{stem}.wav");
        let (lang, reference) = manifest.get(&wav).expect("clip in manifest").clone();
        let fw_text = std::fs::read_to_string(&fw_path).expect("reference text");
        let audio =
            sotto::audio::load_16k_mono(sotto_testdata::clip(&shared, &wav).to_str().unwrap())
                .expect("audio");
        let opts = TranscribeOptions {
            language: Some(lang.clone()),
            beam_size: beam,
            ..TranscribeOptions::default()
        };
        let ours = session
            .transcribe(&audio, &opts, &mut |_| true)
            .expect("transcribe")
            .text();
        let (ours_w, fw_w, ref_w) = (words(&ours), words(&fw_text), words(&reference));
        total += 1;
        let matched = ours_w == fw_w;
        same += usize::from(matched);
        our_edits += edits(&ref_w, &ours_w);
        fw_edits += edits(&ref_w, &fw_w);
        ref_words += ref_w.len();
        report.push_str(&format!(
            "{} {stem} [{lang}]\n  sotto: {}\n  fw:    {}\n",
            if matched { "=" } else { "≠" },
            ours.trim(),
            fw_text.trim()
        ));
    }
    let our_wer = 100.0 * our_edits as f64 / ref_words as f64;
    let fw_wer = 100.0 * fw_edits as f64 / ref_words as f64;
    eprintln!(
        "{report}{name} beam {beam}: {same}/{total} clips word-for-word equal to faster-whisper; pooled WER sotto {our_wer:.2}% vs faster-whisper {fw_wer:.2}%"
    );
    assert!(
        total > 0,
        "no reference transcripts in {}",
        refs_dir.display()
    );
    assert!(
        same * 10 >= total * 9,
        "{name}: only {same}/{total} clips match faster-whisper word for word"
    );
    assert!(
        our_wer <= fw_wer + wer_margin,
        "{name}: pooled WER {our_wer:.2}% is more than {wer_margin} point above faster-whisper's {fw_wer:.2}%"
    );
}

#[test]
fn tiny_en_greedy_matches_faster_whisper() {
    check_model("tiny.en", 1, 1.0);
}

#[test]
fn base_greedy_matches_faster_whisper() {
    check_model("base", 1, 1.0);
}

#[test]
fn tiny_en_beam5_matches_faster_whisper() {
    check_model("tiny.en", 5, 0.5);
}

#[test]
fn base_beam5_matches_faster_whisper() {
    check_model("base", 5, 0.5);
}

#[test]
fn wer_helpers() {
    let w = |s: &str| words(s);
    assert_eq!(w("Hello, World!  it's"), ["hello", "world", "it", "s"]);
    assert_eq!(edits(&w("a b c"), &w("a x c d")), 2);
    assert_eq!(edits(&w(""), &w("a")), 1);
}
