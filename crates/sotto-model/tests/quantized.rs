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

/// `LoadOptions::quantize_decoder` gives an f16 file the decoder a q8_0 file has: greedy
/// steps with the same logits, bit for bit, as tiny.en with only its decoder layers
/// stored as q8_0 (the encoder and the vocabulary left f16 in both).
#[test]
fn quantizing_the_decoder_at_load_gives_a_q8_0_files_decoder() {
    let dir = sotto_testdata::model_dir("tiny.en");
    let f16 = sotto_formats::load(&dir).unwrap();
    let mut q8 = sotto_formats::load(&dir).unwrap();
    let mut quantized = 0;
    for (name, t) in q8.tensors.iter_mut() {
        let layer = name.starts_with("decoder.blocks.") && name.ends_with(".weight");
        let cross_kv = name.contains("cross_attn.key") || name.contains("cross_attn.value");
        if !layer || cross_kv || t.shape.len() != 2 {
            continue;
        }
        let (n_out, n_in) = (t.shape[0], t.shape[1]);
        let (x, rb) = (t.to_f32().unwrap(), QuantType::Q8_0.row_bytes(n_in));
        let mut bytes = vec![0u8; n_out * rb];
        for (row, q) in x.chunks_exact(n_in).zip(bytes.chunks_exact_mut(rb)) {
            sotto_quant::quantize_row(QuantType::Q8_0, row, q);
        }
        t.dtype = DType::Q8_0;
        t.data = sotto_formats::Storage::from_vec(bytes);
        quantized += 1;
    }
    assert_eq!(
        quantized,
        4 * 8,
        "four layers: q, k, v, out, cross q and out, the MLP's two"
    );
    let (_, mel) = sotto_testdata::jfk_model_goldens();
    let load = |file: &sotto_formats::WhisperFile, quantize_decoder| {
        let opts = sotto_model::LoadOptions {
            quantize_decoder,
            ..Default::default()
        };
        let model = Arc::new(Whisper::from_file_with(file, opts).unwrap());
        let mut s = Session::new(model, 2).unwrap();
        s.encode(&mel).unwrap();
        s
    };
    let (mut a, mut b) = (load(&f16, true), load(&q8, false));
    let n_vocab = f16.hparams.n_vocab;
    let (mut la, mut lb) = (vec![0f32; n_vocab], vec![0f32; n_vocab]);
    let mut input = vec![50257u32];
    for step in 0..12 {
        a.decode(&input, &[input.len() - 1], &mut la).unwrap();
        b.decode(&input, &[input.len() - 1], &mut lb).unwrap();
        assert_eq!(la, lb, "step {step}");
        let next = (0..n_vocab)
            .max_by(|&i, &j| la[i].total_cmp(&la[j]))
            .unwrap();
        input = vec![next as u32];
    }
    // And it differs from the f16 decoder, which it replaces.
    let mut c = load(&f16, false);
    c.decode(&[50257], &[0], &mut lb).unwrap();
    a.reset_text();
    a.decode(&[50257], &[0], &mut la).unwrap();
    assert_ne!(la, lb);
}
