//! A small random Whisper built in memory, for tests that need no model file.

use std::collections::BTreeMap;
use std::sync::Arc;

use sotto_formats::{DType, Hparams, ModelConfig, SourceFormat, Storage, TensorData, WhisperFile};

use crate::{ModelError, Session, Whisper};

pub const HP: Hparams = Hparams {
    n_vocab: 50,
    n_audio_ctx: 8,
    n_audio_state: 8,
    n_audio_head: 2,
    n_audio_layer: 2,
    n_text_ctx: 10,
    n_text_state: 8,
    n_text_head: 2,
    n_text_layer: 2,
    n_mels: 4,
};

fn rand_vec(n: usize, seed: &mut u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor(shape: &[usize], f16: bool, seed: &mut u64) -> TensorData {
    let n = shape.iter().product();
    let v = rand_vec(n, seed, 0.5);
    let (dtype, bytes) = if f16 {
        (
            DType::F16,
            v.iter()
                .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
                .collect(),
        )
    } else {
        (DType::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect())
    };
    TensorData {
        dtype,
        shape: shape.to_vec(),
        data: Storage::from_vec(bytes),
    }
}

/// A random model in whisper.cpp naming; 2-D weights f16, everything else f32.
pub fn file() -> WhisperFile {
    let h = HP;
    let mut seed = 7u64;
    let mut t = BTreeMap::new();
    let mut add = |name: String, shape: &[usize], f16: bool| {
        t.insert(name, tensor(shape, f16, &mut seed));
    };
    let (da, dt) = (h.n_audio_state, h.n_text_state);
    add("encoder.conv1.weight".into(), &[da, h.n_mels, 3], true);
    add("encoder.conv1.bias".into(), &[da], false);
    add("encoder.conv2.weight".into(), &[da, da, 3], true);
    add("encoder.conv2.bias".into(), &[da], false);
    add(
        "encoder.positional_embedding".into(),
        &[h.n_audio_ctx, da],
        false,
    );
    add(
        "decoder.token_embedding.weight".into(),
        &[h.n_vocab, dt],
        true,
    );
    add(
        "decoder.positional_embedding".into(),
        &[h.n_text_ctx, dt],
        false,
    );
    for (p, d) in [("encoder.ln_post", da), ("decoder.ln", dt)] {
        add(format!("{p}.weight"), &[d], false);
        add(format!("{p}.bias"), &[d], false);
    }
    let blocks = (0..h.n_audio_layer)
        .map(|i| (format!("encoder.blocks.{i}"), da, false))
        .chain((0..h.n_text_layer).map(|i| (format!("decoder.blocks.{i}"), dt, true)));
    for (b, d, cross) in blocks {
        let mut attns = vec!["attn"];
        if cross {
            attns.push("cross_attn");
        }
        for ln in ["attn_ln", "mlp_ln", "cross_attn_ln"]
            .iter()
            .take(if cross { 3 } else { 2 })
        {
            add(format!("{b}.{ln}.weight"), &[d], false);
            add(format!("{b}.{ln}.bias"), &[d], false);
        }
        for a in attns {
            for p in ["query", "key", "value", "out"] {
                add(format!("{b}.{a}.{p}.weight"), &[d, d], true);
                if p != "key" {
                    add(format!("{b}.{a}.{p}.bias"), &[d], false);
                }
            }
        }
        add(format!("{b}.mlp.0.weight"), &[4 * d, d], true);
        add(format!("{b}.mlp.0.bias"), &[4 * d], false);
        add(format!("{b}.mlp.2.weight"), &[d, 4 * d], false);
        add(format!("{b}.mlp.2.bias"), &[d], false);
    }
    WhisperFile {
        path: "synthetic".into(),
        format: SourceFormat::Ggml,
        hparams: h,
        tensors: t,
        vocab: Vec::new(),
        mel_filters: None,
        config: ModelConfig::default(),
    }
}

fn session(threads: usize) -> Session {
    let model = Arc::new(Whisper::from_file(&file()).unwrap());
    let mut s = Session::new(model, threads).unwrap();
    let mel = rand_vec(HP.n_mels * 2 * HP.n_audio_ctx, &mut 3, 1.0);
    s.encode(&mel).unwrap();
    s
}

pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn incremental_decode_matches_one_batch() {
    let v = HP.n_vocab;
    let toks = [1u32, 7, 3, 49, 0];
    let mut a = session(2);
    let mut all = vec![0.0; toks.len() * v];
    a.decode(&toks, &[0, 1, 2, 3, 4], &mut all).unwrap();
    assert_eq!(a.text_len(), 5);
    assert!(all.iter().all(|x| x.is_finite()));

    // One token at a time, in a session with another thread count.
    let mut b = session(1);
    for (i, &t) in toks.iter().enumerate() {
        let mut one = vec![0.0; v];
        b.decode(&[t], &[0], &mut one).unwrap();
        assert!(
            max_abs_diff(&one, &all[i * v..(i + 1) * v]) < 1e-4,
            "token {i}"
        );
    }
    // Chunks of 2 + 3 after a reset, asking only for some rows, in another order.
    b.reset_text();
    let mut two = vec![0.0; v];
    b.decode(&toks[..2], &[1], &mut two).unwrap();
    assert!(max_abs_diff(&two, &all[v..2 * v]) < 1e-4);
    let mut rest = vec![0.0; 2 * v];
    b.decode(&toks[2..], &[2, 0], &mut rest).unwrap();
    assert!(max_abs_diff(&rest[..v], &all[4 * v..]) < 1e-4);
    assert!(max_abs_diff(&rest[v..], &all[2 * v..3 * v]) < 1e-4);
    // Later tokens must not change earlier logits (the causal mask).
    assert!(max_abs_diff(&all[..v], &all[v..2 * v]) > 1e-3);
}

#[test]
fn encode_is_deterministic_across_thread_counts() {
    let a = session(1);
    let b = session(3);
    assert!(a.encoder_output().iter().any(|&x| x != 0.0));
    assert!(max_abs_diff(a.encoder_output(), b.encoder_output()) < 1e-5);
    assert_eq!(a.encoder_output().len(), HP.n_audio_ctx * HP.n_audio_state);
}

/// whisper.cpp's `audio_ctx`: the encoder reads the first 2·ctx frames alone, the
/// decoder attends to ctx positions, and the full length gives the usual bits.
#[test]
fn audio_ctx_encodes_the_first_frames_alone() {
    let (ctx, d, frames) = (3, HP.n_audio_state, 2 * HP.n_audio_ctx);
    let mut mel = rand_vec(HP.n_mels * frames, &mut 3, 1.0);
    let mut s = session(1);
    let full = s.encoder_output().to_vec();
    for bad in [Some(0), Some(HP.n_audio_ctx + 1)] {
        let err = s.set_audio_ctx(bad).unwrap_err().to_string();
        assert!(err.contains("audio_ctx"), "{err}");
    }
    assert_eq!(s.audio_ctx(), HP.n_audio_ctx);
    s.set_audio_ctx(Some(ctx)).unwrap();
    assert_eq!(s.audio_ctx(), ctx);
    let mut l = vec![0.0; HP.n_vocab];
    assert!(
        s.decode(&[1], &[0], &mut l).is_err(),
        "the old audio is dropped"
    );
    s.encode(&mel).unwrap();
    let short = s.encoder_output().to_vec();
    assert_eq!(short.len(), ctx * d);
    // Frames past 2·ctx change nothing.
    for row in mel.chunks_exact_mut(frames) {
        row[2 * ctx..].iter_mut().for_each(|v| *v = 9.0);
    }
    s.encode(&mel).unwrap();
    assert_eq!(s.encoder_output(), &short[..]);
    assert!(
        max_abs_diff(&short, &full[..ctx * d]) > 1e-3,
        "positions see less"
    );
    s.decode(&[1, 7], &[1], &mut l).unwrap();
    assert!(l.iter().all(|x| x.is_finite()));
    let scores = s.align(&[1, 7, 3], &[(0, 1)], &[2], &mut l).unwrap();
    assert_eq!(scores.len(), 3 * ctx);
    // Two windows at once, then back to the whole window.
    s.encode_windows(&[&mel, &mel]).unwrap();
    s.set_audio_ctx(Some(HP.n_audio_ctx)).unwrap();
    let b = session(1);
    let mel = rand_vec(HP.n_mels * frames, &mut 3, 1.0);
    s.encode(&mel).unwrap();
    assert_eq!(s.encoder_output(), b.encoder_output());
    assert_eq!(s.encoder_output(), &full[..]);
}

#[test]
fn decode_rejects_bad_calls_without_changing_state() {
    let model = Arc::new(Whisper::from_file(&file()).unwrap());
    let mut s = Session::new(model, 1).unwrap();
    let v = HP.n_vocab;
    let mut l = vec![0.0; v];
    assert!(matches!(
        s.decode(&[1], &[0], &mut l),
        Err(ModelError::Input { .. })
    ));
    assert!(s.encode(&[0.0; 5]).is_err());
    s.encode(&vec![0.1; HP.n_mels * 2 * HP.n_audio_ctx])
        .unwrap();
    assert!(s.decode(&[], &[], &mut []).is_err());
    assert!(s.decode(&[50], &[0], &mut l).is_err());
    assert!(s.decode(&[1], &[1], &mut l).is_err());
    assert!(s.decode(&[1], &[0], &mut l[1..]).is_err());
    assert!(s.decode(&[1; 11], &[], &mut []).is_err());
    assert_eq!(s.text_len(), 0);
    s.decode(&[1; 10], &[9], &mut l).unwrap();
    let err = s.decode(&[1], &[0], &mut l).unwrap_err();
    assert!(err.to_string().contains("n_text_ctx"), "{err}");
    assert_eq!(s.text_len(), 10);
}

#[test]
fn from_file_names_missing_and_misshapen_tensors() {
    let mut f = file();
    f.tensors.remove("decoder.blocks.1.cross_attn.key.weight");
    let err = Whisper::from_file(&f).unwrap_err().to_string();
    assert!(
        err.contains("synthetic") && err.contains("decoder.blocks.1.cross_attn.key.weight"),
        "{err}"
    );

    let mut f = file();
    let mut seed = 1;
    f.tensors.insert(
        "encoder.blocks.0.mlp.0.weight".into(),
        tensor(&[8, 32], true, &mut seed),
    );
    let err = Whisper::from_file(&f).unwrap_err().to_string();
    assert!(
        err.contains("encoder.blocks.0.mlp.0.weight") && err.contains("shape"),
        "{err}"
    );

    let mut f = file();
    f.hparams.n_text_head = 3;
    assert!(matches!(
        Whisper::from_file(&f),
        Err(ModelError::Hparams { .. })
    ));
}

/// The bytes a step streams, counted by hand for this model (d = 8, MLP 32, 8 audio
/// positions; 2-D weights f16 but `mlp.2` f32; 50 vocabulary rows left f16: too narrow to
/// screen).
#[test]
fn decoder_step_bytes_by_hand() {
    let model = Whisper::from_file(&file()).unwrap();
    let (w, b) = (2, 4);
    let self_attn = 4 * 8 * 8 * w + 3 * 8 * b; // q, k, v, out; k has no bias
    let cross = 2 * 8 * 8 * w + 2 * 8 * b + 2 * 8 * 8 * w; // q, out; K and V of 8 positions
    let mlp = 32 * 8 * w + 8 * 32 * 4 + (32 + 8) * b;
    let vocab = 50 * 8 * w;
    assert_eq!(
        model.decoder_step_bytes(),
        2 * (self_attn + cross + mlp) + vocab
    );
}
