//! PyTorch checkpoints: a file PyTorch wrote (silero-vad's TorchScript archive) read as
//! Python's own unpickler reads it.

use std::path::Path;

use sotto_formats::torch::Checkpoint;
use sotto_formats::{ggml_vad, hf, load, Storage, WhisperFile};

use sotto_testdata::torch_save;

fn same_model(a: &WhisperFile, b: &WhisperFile) {
    assert_eq!(a.hparams, b.hparams);
    assert_eq!(a.vocab, b.vocab);
    assert_eq!(a.config.alignment_heads, b.config.alignment_heads);
    assert_eq!(a.tensors.len(), b.tensors.len());
    for (name, t) in &a.tensors {
        let u = &b.tensors[name];
        assert_eq!((t.dtype, &t.shape), (u.dtype, &u.shape), "{name}");
        assert!(t.data == u.data, "{name} differs");
    }
}

/// A Hugging Face folder whose weights are `pytorch_model.bin` (whole, or shards and
/// their index), as transformers saved checkpoints before safetensors, reads as the same
/// folder in safetensors: every tensor a view of the file with the same bytes.
#[test]
fn pytorch_model_bin_folders_read_as_their_safetensors() {
    let src = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("safetensors");
    hf::write(&src, &st).unwrap();
    let want = load(&st).unwrap();
    for shards in ["1", "3"] {
        let pt = dir.path().join(format!("torch-{shards}"));
        let args = [
            "hf".as_ref(),
            st.as_os_str(),
            pt.as_os_str(),
            "--shards".as_ref(),
            shards.as_ref(),
        ];
        if !torch_save(&args) {
            return;
        }
        assert!(!pt.join("model.safetensors").exists());
        let got = load(&pt).unwrap();
        assert!(got.tensors.values().all(|t| t.data.is_mapped()));
        same_model(&want, &got);
    }
}

/// Every tensor of silero-vad 6.1.0's TorchScript archive, read by sotto's pickle
/// machine, holds the values `scripts/silero-ggml` read with Python's `pickle` into the
/// ggml VAD file: the 16 kHz network's f32 tensors exactly, its f16 ones to f16.
#[test]
fn a_file_pytorch_wrote_reads_as_pythons_pickle_reads_it() {
    let (Some(jit), Some(ggml)) = (sotto_testdata::silero_jit(), sotto_testdata::silero_ggml())
    else {
        return;
    };
    let data = Storage::map_file(&jit).unwrap();
    let ckpt = Checkpoint::read(&data, &jit).unwrap();
    let tensors = ckpt.tensors(&[], |_| true).unwrap();
    let vad = ggml_vad::read(&std::fs::read(&ggml).unwrap(), &ggml).unwrap();
    let mut matched = 0;
    for (name, want) in &vad.tensors {
        let (_, t) = tensors
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not found"));
        let got = t.to_f32().unwrap();
        assert_eq!(got.len(), want.1.len(), "{name}");
        let f16 = got
            .iter()
            .zip(&want.1)
            .all(|(a, b)| half::f16::from_f32(*a).to_f32() == *b);
        assert!(got == want.1 || f16, "{name} differs");
        matched += 1;
    }
    assert_eq!(matched, vad.tensors.len());
    // Both networks (16 and 8 kHz, 15 tensors each) and two empty state tensors.
    assert_eq!(tensors.len(), 32);
}

/// Anything but a torch zip is refused by name.
#[test]
fn not_a_checkpoint() {
    let p = Path::new("x.pt");
    for bytes in [
        &b""[..],
        b"PK\x03\x04",
        b"hello",
        b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19rest",
    ] {
        let e = Checkpoint::read(&Storage::from_vec(bytes.to_vec()), p)
            .err()
            .unwrap();
        assert!(e.to_string().contains("x.pt"), "{e}");
    }
}

/// Damaged copies of a real checkpoint (bytes changed in its pickle and zip directory,
/// or cut short) are read or refused, never a panic; a read one names only tensors
/// inside their storages.
#[test]
fn damaged_checkpoints_are_errors_not_panics() {
    use proptest::prelude::*;
    let Some(jit) = sotto_testdata::silero_jit() else {
        return;
    };
    let good = std::fs::read(&jit).unwrap();
    let p = Path::new("damaged.pt");
    let check = |bytes: Vec<u8>| {
        if let Ok(c) = Checkpoint::read(&Storage::from_vec(bytes), p) {
            // Tensors read or refused, in bounds either way (views are checked).
            let _ = c.tensors(&[], |_| true);
            let _ = c.ints(&["x"]);
        }
    };
    // The pickle is the last entry before the zip's directory: damage both.
    let tail = good.len().saturating_sub(16384);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &proptest::collection::vec((tail..good.len(), any::<u8>()), 1..8),
            |edits| {
                let mut bad = good.clone();
                for (at, v) in edits {
                    bad[at] = v;
                }
                check(bad);
                Ok(())
            },
        )
        .unwrap();
    for cut in (0..good.len())
        .step_by(4099)
        .chain(good.len() - 600..good.len())
    {
        check(good[..cut].to_vec());
    }
}

/// openai-whisper's `.pt` checkpoints (here written from the f16 ggml file of tiny.en and
/// of base, whose names they share) read as that file: the same tensors, and as ordinary
/// tokens openai-whisper's own tokenizer's, which are the CTranslate2 models' too.
#[test]
fn openai_checkpoints_read_as_their_ggml_files() {
    for name in ["tiny.en", "base"] {
        let ct2 = load(&sotto_testdata::model_dir(name)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ggml = dir.path().join("ggml.bin");
        sotto_formats::ggml::write(&ct2, &vec![0.0; 80 * 201], &ggml).unwrap();
        let pt = dir.path().join(format!("{name}.pt"));
        if !torch_save(&["openai".as_ref(), ggml.as_os_str(), pt.as_os_str()]) {
            return;
        }
        let want = load(&ggml).unwrap();
        let got = load(&pt).unwrap();
        assert_eq!(got.format, sotto_formats::SourceFormat::Torch);
        assert_eq!(got.vocab, ct2.vocab, "{name}: openai-whisper's tokens");
        assert_eq!(got.tensors.len(), want.tensors.len());
        for (n, t) in &want.tensors {
            let u = &got.tensors[n];
            assert_eq!((t.dtype, &t.shape), (u.dtype, &u.shape), "{name} {n}");
            assert!(t.data == u.data, "{name} {n} differs");
        }
        assert_eq!(got.hparams, want.hparams);
    }
}

/// A PyTorch checkpoint that is neither openai-whisper's nor beside a `config.json` is
/// refused by name; so is one whose dims are missing or wrong.
#[test]
fn other_pytorch_checkpoints_are_refused() {
    let Some(jit) = sotto_testdata::silero_jit() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("vad.pt");
    std::fs::copy(&jit, &pt).unwrap();
    let e = load(&pt).unwrap_err().to_string();
    assert!(e.contains("model_state_dict"), "{e}");
}
