//! tiny.en through the CUDA session in host emulation (tests/common/emu.rs), against
//! CTranslate2's goldens for jfk.wav (written by scripts/goldens/model.py): the encoder
//! output and a greedy decode, token for token, at the real shapes (1500 audio positions,
//! the 51864-token vocabulary). The GPU itself is checked against the CPU in model.rs.
//!
//! Tolerance: F16 precision rounds every product input of the encoder to f16 (cuBLAS on
//! tensor cores); decoder steps multiply f32 activations by the f16 weights. Measured max
//! |diff| of the encoder output against CTranslate2's f32: 5.7e-3 (on values up to ~±20);
//! the bound leaves ~10x, and a real error (a wrong scale, eps or mask) moves it past 0.1.
//! About 50 s in release: every thread of every block is emulated.

mod common;

use std::sync::Arc;

use sotto_cuda::{CudaSession, CudaWhisper, Precision};

const ENC_TOL: f32 = 0.05;

fn golden_mel(meta: &serde_json::Value) -> Vec<f32> {
    let raw = sotto_testdata::read_f32(&sotto_testdata::golden("model_jfk_mel.f32"));
    let shape = &meta["mel"]["shape"];
    let (n_mels, n) = (
        shape[0].as_u64().unwrap() as usize,
        shape[1].as_u64().unwrap() as usize,
    );
    assert_eq!(raw.len(), n_mels * n);
    // Zero-padded to the 3000-frame window, as faster-whisper does.
    let mut mel = vec![0.0f32; n_mels * 3000];
    for m in 0..n_mels {
        mel[m * 3000..m * 3000 + n].copy_from_slice(&raw[m * n..(m + 1) * n]);
    }
    mel
}

fn tokens(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best }) as u32
}

#[test]
fn tiny_en_emulated_matches_ctranslate2() {
    let Some(emu) = common::emu::get() else {
        return;
    };
    let path = sotto_testdata::golden("model_goldens.json");
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let f = sotto_formats::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dev = Arc::new(common::emu::EmuDevice(emu));
    let model = Arc::new(CudaWhisper::on_host(&f, Precision::F16, dev).unwrap());
    let mut s = CudaSession::new(model).unwrap();
    s.encode(&golden_mel(&meta)).unwrap();

    let d = f.hparams.n_audio_state;
    let want = sotto_testdata::read_f32(&sotto_testdata::golden("model_tiny.en_enc_every10.f32"));
    let enc = s.encoder_output().unwrap();
    let got: Vec<f32> = enc.chunks_exact(d).step_by(10).flatten().copied().collect();
    let diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    println!("tiny.en F16 in emulation: encoder max |diff| {diff:.2e}");
    assert!(diff < ENC_TOL, "encoder max |diff| {diff}");

    // Plain argmax greedy decoding, as CTranslate2's generate(beam_size=1), suppression off.
    let eot = 50256u32;
    let want = tokens(&meta["tiny.en"]["greedy_tokens"]);
    let mut logits = vec![0.0; f.hparams.n_vocab];
    let mut input = tokens(&meta["tiny.en"]["prompt"]);
    let mut got = Vec::new();
    while s.text_len() + input.len() <= f.hparams.n_text_ctx {
        s.decode(&input, &[input.len() - 1], &mut logits).unwrap();
        let next = argmax(&logits);
        if next == eot {
            break;
        }
        got.push(next);
        input = vec![next];
    }
    assert_eq!(got, want);
    assert_eq!(s.step_graphs(), 1, "greedy steps run as one captured graph");
}
