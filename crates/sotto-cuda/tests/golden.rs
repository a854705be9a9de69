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

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |best, i| if x[i] > x[best] { i } else { best }) as u32
}

#[test]
fn tiny_en_emulated_matches_ctranslate2() {
    let Some(emu) = common::emu::get() else {
        return;
    };
    let (meta, mel) = sotto_testdata::jfk_model_goldens();
    let f = sotto_formats::load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dev = Arc::new(common::emu::EmuDevice::new(
        emu,
        common::emu::Schedule::Forward,
    ));
    let model = Arc::new(CudaWhisper::on_host(&f, Precision::F16, dev).unwrap());
    let mut s = CudaSession::new(model).unwrap();
    s.encode(&mel).unwrap();

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
    let want = sotto_testdata::golden_tokens(&meta, "tiny.en", "greedy_tokens");
    let mut logits = vec![0.0; f.hparams.n_vocab];
    let mut input = sotto_testdata::golden_tokens(&meta, "tiny.en", "prompt");
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
