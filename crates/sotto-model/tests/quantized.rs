//! ggml-quantized tiny.en (written here with sotto-quant, as `whisper-quantize` would) must
//! still transcribe jfk.wav: its greedy tokens must mostly match the f16 model's (CTranslate2)
//! tokens; quantization may add a comma or change a word, a broken kernel matches nothing.

use std::sync::Arc;

use sotto_formats::DType;
use sotto_model::{Session, Whisper};
use sotto_quant::QuantType;

fn greedy(s: &mut Session, mel: &[f32], prompt: Vec<u32>) -> Vec<u32> {
    s.encode(mel).unwrap();
    let n_vocab = s.model().hparams().n_vocab;
    let mut logits = vec![0.0; n_vocab];
    let (mut input, mut got) = (prompt, Vec::new());
    while s.text_len() + input.len() <= s.model().hparams().n_text_ctx {
        s.decode(&input, &[input.len() - 1], &mut logits).unwrap();
        let next = (0..n_vocab)
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap() as u32;
        if next == 50256 {
            break;
        }
        got.push(next);
        input = vec![next];
    }
    got
}

/// Length of the longest common subsequence.
fn lcs(a: &[u32], b: &[u32]) -> usize {
    let mut row = vec![0usize; b.len() + 1];
    for x in a {
        let mut prev = 0;
        for (j, y) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if x == y {
                prev + 1
            } else {
                row[j + 1].max(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[test]
fn quantized_tiny_en_transcribes_jfk() {
    let src = sotto_formats::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let filters = sotto_testdata::read_f32(&sotto_testdata::golden("mel_filters80.f32"));
    let (meta, mel) = sotto_testdata::jfk_model_goldens();
    let want = sotto_testdata::golden_tokens(&meta, "tiny.en", "greedy_tokens");
    let dir = std::env::temp_dir().join(format!("sotto-quant-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (dt, qt, min_match) in [
        (DType::Q8_0, QuantType::Q8_0, 0.9),
        (DType::Q5_1, QuantType::Q5_1, 0.85),
        (DType::Q4_0, QuantType::Q4_0, 0.6),
    ] {
        let path = dir.join(format!("tiny.en-{qt}.bin"));
        let quantize = |x: &[f32], out: &mut [u8]| sotto_quant::quantize_row(qt, x, out);
        sotto_formats::ggml::write_quantized(&src, &filters, &path, dt, &quantize).unwrap();
        let file = sotto_formats::load(&path).unwrap();
        assert_eq!(file.tensors["decoder.blocks.0.mlp.0.weight"].dtype, dt);
        let model = Arc::new(Whisper::from_file(&file).unwrap());
        let mut s = Session::new(model, 2).unwrap();
        let got = greedy(
            &mut s,
            &mel,
            sotto_testdata::golden_tokens(&meta, "tiny.en", "prompt"),
        );
        let matched = lcs(&got, &want) as f64 / want.len().max(got.len()) as f64;
        eprintln!(
            "{qt}: {} tokens, {:.0}% match the f16 model's",
            got.len(),
            matched * 100.0
        );
        assert!(matched >= min_match, "{qt}: {got:?} vs {want:?}");
        std::fs::remove_file(&path).unwrap();
    }
    let _ = std::fs::remove_dir(&dir);
}
