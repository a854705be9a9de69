//! CTranslate2 → our ggml writer → our ggml reader, and byte-for-byte agreement with the
//! independent converter `shared/tools/ct2_to_ggml.py`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use sotto_formats::{ggml, load, names, DType, SourceFormat, WhisperFile};

/// Writes `src` as ggml into a scratch folder and returns the output path.
fn write_ggml(src: &WhisperFile, mel: &[f32], tag: &str) -> PathBuf {
    let out = common::scratch(tag).join("ggml-model.bin");
    ggml::write(src, mel, &out).unwrap();
    out
}

fn assert_same_model(src: &WhisperFile, back: &WhisperFile, mel: &[f32]) {
    assert_eq!(back.format, SourceFormat::Ggml);
    assert_eq!(back.hparams, src.hparams);
    assert_eq!(back.vocab, src.vocab);
    assert_eq!(back.mel_filters.as_deref(), Some(mel));
    assert_eq!(back.tensors.len(), src.tensors.len());
    for spec in names::expected(&src.hparams) {
        let (a, b) = (&src.tensors[&spec.name], &back.tensors[&spec.name]);
        assert_eq!(a.shape, b.shape, "{}", spec.name);
        if a.dtype == b.dtype {
            assert!(a.data == b.data, "{} differs", spec.name);
        } else {
            // Widened to f32 (1-D, positional) or narrowed to f16: values must survive.
            let (x, y) = (a.to_f32().unwrap(), b.to_f32().unwrap());
            let narrowed = b.dtype == DType::F16;
            for (i, (p, q)) in x.iter().zip(&y).enumerate() {
                let want = if narrowed {
                    half::f16::from_f32(*p).to_f32()
                } else {
                    *p
                };
                assert_eq!(want.to_bits(), q.to_bits(), "{}[{i}]", spec.name);
            }
        }
    }
}

#[test]
fn tiny_en_ct2_to_ggml_and_back() {
    let src = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let mel = common::mel_filters(80);
    let out = write_ggml(&src, &mel, "tiny-roundtrip");
    let back = load(&out).unwrap();
    assert_same_model(&src, &back, &mel);
    // Type rules of whisper.cpp's converter.
    let t = &back.tensors;
    assert_eq!(t["encoder.conv1.weight"].dtype, DType::F16);
    assert_eq!(t["encoder.conv1.bias"].dtype, DType::F32);
    assert_eq!(t["encoder.positional_embedding"].dtype, DType::F32);
    assert_eq!(t["decoder.positional_embedding"].dtype, DType::F32);
    assert_eq!(t["decoder.token_embedding.weight"].dtype, DType::F16);
    assert_eq!(t["decoder.blocks.0.mlp.0.bias"].dtype, DType::F32);
    assert!(t["decoder.blocks.0.mlp.0.weight"].data.is_mapped());
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        77_704_698,
        "reference f16 size (model-formats.md)"
    );
    // Writing a ggml source again reproduces the file.
    let again = write_ggml(&back, &mel, "tiny-rewrite");
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&out).unwrap());
    // Windows refuses to delete a file that is still mapped.
    drop(back);
    for p in [out, again] {
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}

#[test]
fn synthetic_f32_model_round_trips() {
    let src = common::whisper_file();
    let mel = common::mel_filters(common::HP.n_mels);
    let out = write_ggml(&src, &mel, "synthetic-roundtrip");
    let back = load(&out).unwrap();
    assert_same_model(&src, &back, &mel);
    assert_eq!(back.tensors["encoder.conv2.bias"].shape, [4]);
    drop(back);
    std::fs::remove_dir_all(out.parent().unwrap()).unwrap();
}

#[test]
fn writer_rejects_bad_inputs_and_leaves_no_file() {
    let src = common::whisper_file();
    let dir = common::scratch("writer-errors");
    let out = dir.join("m.bin");
    assert!(
        ggml::write(&src, &[0.0; 5], &out).is_err(),
        "5 values do not split into 2 filters"
    );
    let mut missing = common::whisper_file();
    missing
        .tensors
        .remove("decoder.blocks.0.cross_attn.key.weight");
    let err = ggml::write(&missing, &common::mel_filters(2), &out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing tensor decoder.blocks.0.cross_attn.key.weight"),
        "{err}"
    );
    assert!(ggml::write(
        &src,
        &common::mel_filters(2),
        &dir.join("no/such/dir/m.bin")
    )
    .is_err());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no temp files left behind"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn python_with_numpy() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: python3 with numpy is not available");
    }
    ok
}

/// Runs `ct2_to_ggml.py` on `model` with our `mel` filters and checks our writer's bytes
/// against its output.
fn compare_with_python_converter(model: &str) {
    let Some(shared) = sotto_testdata::shared_dir() else {
        return;
    };
    if !python_with_numpy() {
        return;
    }
    let ct2 = sotto_testdata::model_dir(model);
    let src = load(&ct2).unwrap();
    let mel = common::mel_filters(src.hparams.n_mels);
    let ours = write_ggml(&src, &mel, &format!("py-{model}"));
    let dir = ours.parent().unwrap();
    let raw: Vec<u8> = mel.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("mel.f32"), raw).unwrap();
    let script = sotto_testdata::workspace_root().join("scripts/formats/mel_npz.py");
    let n_mels = src.hparams.n_mels.to_string();
    run(Command::new("python3")
        .arg(&script)
        .arg(dir.join("mel.f32"))
        .arg(&n_mels)
        .arg(dir.join("mel.npz")));
    let theirs = dir.join("python.bin");
    let tool = shared.join("tools/ct2_to_ggml.py");
    run(Command::new("python3")
        .arg(&tool)
        .arg(&ct2)
        .arg(dir.join("mel.npz"))
        .arg(&theirs));
    let (a, b) = (
        std::fs::read(&ours).unwrap(),
        std::fs::read(&theirs).unwrap(),
    );
    assert_eq!(a.len(), b.len(), "file sizes differ");
    if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
        panic!("first differing byte at offset {i}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tiny_en_matches_python_converter_byte_for_byte() {
    compare_with_python_converter("tiny.en");
}

/// Slower (145 MB); run with `--ignored`.
#[test]
#[ignore]
fn base_matches_python_converter_byte_for_byte() {
    compare_with_python_converter("base");
}

/// `SOTTO_MEL_FILTERS_NPZ=…/whisper/assets/mel_filters.npz` (openai-whisper's): our f16
/// tiny.en and base must have the md5s that model-formats.md lists for `ct2_to_ggml.py`'s
/// output. Without the variable the test says so and returns. `scripts/formats/check_md5.sh`
/// fetches the filters and runs it.
#[test]
fn openai_filters_reproduce_reference_md5() {
    let Some(npz) = std::env::var_os("SOTTO_MEL_FILTERS_NPZ").map(PathBuf::from) else {
        eprintln!("skipped: SOTTO_MEL_FILTERS_NPZ is not set");
        return;
    };
    if !python_with_numpy() {
        return;
    }
    let dir = common::scratch("md5");
    let script = sotto_testdata::workspace_root().join("scripts/formats/mel_npz.py");
    run(Command::new("python3")
        .arg(&script)
        .arg("--dump")
        .arg(&npz)
        .arg("80")
        .arg(dir.join("mel.f32")));
    let mel = sotto_testdata::read_f32(&dir.join("mel.f32"));
    for (model, want) in [
        ("tiny.en", "ca560bc86226e05111bdc20e9e9a8ce4"),
        ("base", "9c2854244c087d6e25d43668fcfcf759"),
    ] {
        let src = load(&sotto_testdata::model_dir(model)).unwrap();
        let out = dir.join(format!("ggml-{model}.bin"));
        ggml::write(&src, &mel, &out).unwrap();
        assert_eq!(sotto_testdata::md5(&out), want, "{model}");
        std::fs::remove_file(&out).unwrap();
    }
    std::fs::remove_dir_all(Path::new(&dir)).unwrap();
}
