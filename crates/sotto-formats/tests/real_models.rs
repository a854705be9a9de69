//! Loads the real CTranslate2 models (tiny.en, base).

mod common;

use sotto_formats::{ct2, hf, load, names, DType, SourceFormat};

fn check_tokens(vocab: &[Vec<u8>]) {
    assert_eq!(vocab[0], b"!");
    // GPT-2's byte tokens: 'Ā' (U+0100) is byte 0x00.
    assert_eq!(vocab[188], [0u8]);
    assert_eq!(vocab[220], b" ");
}

#[test]
fn tiny_en_ct2_folder() {
    let dir = sotto_testdata::model_dir("tiny.en");
    let f = load(&dir).unwrap();
    assert_eq!(f.format, SourceFormat::Ct2);
    let hp = f.hparams;
    assert_eq!(
        (hp.n_vocab, hp.n_audio_layer, hp.n_text_layer),
        (51864, 4, 4)
    );
    assert_eq!(
        (
            hp.n_audio_state,
            hp.n_text_state,
            hp.n_audio_head,
            hp.n_text_head
        ),
        (384, 384, 6, 6)
    );
    assert_eq!((hp.n_audio_ctx, hp.n_text_ctx, hp.n_mels), (1500, 448, 80));
    assert_eq!(f.vocab.len(), 50256);
    check_tokens(&f.vocab);
    assert_eq!(f.vocab[262], b" the");
    assert_eq!(f.vocab[50255], b" gazed");
    assert_eq!(f.tensors.len(), names::expected_count(&hp));
    let heads = f.config.alignment_heads.as_ref().unwrap();
    assert_eq!(heads[..3], [(1, 0), (2, 0), (2, 5)]);
    assert_eq!(f.config.suppress_ids.as_ref().unwrap()[..3], [1, 2, 7]);
    assert!(f.mel_filters.is_none());

    // Tensors are views of the mapped file, the fused qkv split into consecutive ranges.
    let q = &f.tensors["encoder.blocks.0.attn.query.weight"];
    let k = &f.tensors["encoder.blocks.0.attn.key.weight"];
    assert!(q.data.is_mapped());
    assert_eq!((q.dtype, q.shape.as_slice()), (DType::F16, &[384, 384][..]));
    assert_eq!(
        q.data.as_bytes().as_ptr_range().end,
        k.data.as_bytes().as_ptr()
    );
    assert!(!f.tensors.contains_key("encoder.blocks.0.attn.key.bias"));
    assert_eq!(f.tensors["encoder.conv1.bias"].shape, [384]);
    assert_eq!(f.tensors["encoder.conv1.weight"].shape, [384, 80, 3]);

    // The same folder opens through its model.bin.
    let g = load(&dir.join("model.bin")).unwrap();
    assert_eq!(g.hparams, hp);
}

#[test]
fn tiny_en_split_matches_fused_values() {
    let dir = sotto_testdata::model_dir("tiny.en");
    let raw = ct2::read_model_bin(
        &sotto_formats::Storage::map_file(&dir.join("model.bin")).unwrap(),
        &dir,
    )
    .unwrap();
    let f = load(&dir).unwrap();
    let fused = raw
        .get("decoder/layer_1/attention/linear_1/weight")
        .unwrap()
        .to_f32()
        .unwrap();
    let k = f.tensors["decoder.blocks.1.cross_attn.key.weight"]
        .to_f32()
        .unwrap();
    let v = f.tensors["decoder.blocks.1.cross_attn.value.weight"]
        .to_f32()
        .unwrap();
    assert_eq!(fused[..k.len()], k[..]);
    assert_eq!(fused[k.len()..], v[..]);
    let bias = raw
        .get("decoder/layer_1/self_attention/linear_0/bias")
        .unwrap()
        .to_f32()
        .unwrap();
    assert!(
        bias[384..768].iter().all(|&b| b == 0.0),
        "CTranslate2 stores a zero key bias"
    );
    assert_eq!(
        f.tensors["decoder.blocks.1.attn.value.bias"]
            .to_f32()
            .unwrap(),
        bias[768..]
    );
    // The output projection is an alias of the embedding.
    assert_eq!(
        raw.aliases["decoder/projection/weight"],
        "decoder/embeddings/weight"
    );
}

#[test]
fn base_ct2_folder() {
    let f = load(&sotto_testdata::model_dir("base")).unwrap();
    let hp = f.hparams;
    assert_eq!(
        (hp.n_vocab, hp.n_audio_layer, hp.n_text_layer),
        (51865, 6, 6)
    );
    assert_eq!(
        (hp.n_audio_state, hp.n_audio_head, hp.n_text_head),
        (512, 8, 8)
    );
    assert_eq!(f.vocab.len(), 50257);
    check_tokens(&f.vocab);
    assert_eq!(
        f.vocab[50256], b"",
        "the multilingual vocabulary's last ordinary token is empty"
    );
    assert_eq!(f.config.lang_ids.as_ref().unwrap()[0], 50259);
    assert_eq!(
        f.config.suppress_ids_begin.as_deref(),
        Some(&[220, 50257][..])
    );
}

#[test]
fn synthetic_ct2_round_trip_through_folder() {
    let dir = common::scratch("synthetic-ct2");
    std::fs::write(dir.join("model.bin"), common::ct2_model().bytes()).unwrap();
    std::fs::write(dir.join("vocabulary.txt"), common::VOCAB_TXT).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"alignment_heads": [[0, 1]], "lang_ids": [5]}"#,
    )
    .unwrap();
    let f = load(&dir.join("model.bin")).unwrap();
    assert_eq!(f.hparams, common::HP);
    assert_eq!(
        f.vocab,
        [b"!".to_vec(), b" a".to_vec(), vec![0], vec![0x80, 0xAD]]
    );
    assert_eq!(f.config.alignment_heads, Some(vec![(0, 1)]));
    assert_eq!(f.config.suppress_ids, None);
    drop(f); // Windows refuses to delete a file that is still mapped.
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn split_model_bin_parts_are_joined() {
    let dir = common::scratch("synthetic-parts");
    let bytes = common::ct2_model().bytes();
    let (a, b) = bytes.split_at(bytes.len() / 3);
    std::fs::write(dir.join("model.bin.part1"), a).unwrap();
    std::fs::write(dir.join("model.bin.part2"), b).unwrap();
    std::fs::write(dir.join("vocabulary.txt"), common::VOCAB_TXT).unwrap();
    let f = load(&dir).unwrap();
    assert_eq!(f.hparams, common::HP);
    assert!(!f.tensors["encoder.conv1.weight"].data.is_mapped());
    std::fs::remove_file(dir.join("model.bin.part2")).unwrap();
    assert!(
        load(&dir).is_err(),
        "a missing part leaves a truncated model"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `ct2::write` reproduces CTranslate2's own conversion of tiny.en and base byte for byte
/// (model.bin and vocabulary.txt; config.json as JSON), from the CTranslate2 folder and
/// from the same model passed through a Hugging Face folder.
#[test]
fn ct2_writer_reproduces_ctranslate2s_conversions() {
    for name in ["tiny.en", "base"] {
        let src = sotto_testdata::model_dir(name);
        let file = load(&src).unwrap();
        let specials =
            sotto_decode::special_token_texts(file.hparams.n_vocab, file.vocab.len()).unwrap();
        let out = tempfile::tempdir().unwrap();
        ct2::write(&file, &specials, out.path()).unwrap();
        let same = |f: &str| {
            let (a, b) = (
                std::fs::read(src.join(f)).unwrap(),
                std::fs::read(out.path().join(f)).unwrap(),
            );
            assert!(
                a == b,
                "{name}: {f} differs ({} vs {} bytes)",
                a.len(),
                b.len()
            );
        };
        same("model.bin");
        same("vocabulary.txt");
        let json = |p: std::path::PathBuf| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        assert_eq!(
            json(src.join("config.json")),
            json(out.path().join("config.json")),
            "{name}"
        );
        // Through a Hugging Face folder and back.
        let hf_dir = tempfile::tempdir().unwrap();
        hf::write(&file, hf_dir.path()).unwrap();
        let back = tempfile::tempdir().unwrap();
        ct2::write(&load(hf_dir.path()).unwrap(), &specials, back.path()).unwrap();
        assert!(
            std::fs::read(src.join("model.bin")).unwrap()
                == std::fs::read(back.path().join("model.bin")).unwrap(),
            "{name}: model.bin through a Hugging Face folder differs"
        );
    }
}

/// `ct2::write_quantized` writes what CTranslate2 4.8's converter writes for each
/// `--quantization`, byte for byte (md5s from `scripts/goldens/ct2_quantized.py`, which
/// runs CTranslate2's own `optimize` on these models).
#[test]
fn ct2_quantized_writes_are_ctranslate2s() {
    let goldens: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(sotto_testdata::golden("ct2_quantized.json")).unwrap(),
    )
    .unwrap();
    for name in ["tiny.en", "base"] {
        let file = load(&sotto_testdata::model_dir(name)).unwrap();
        let specials =
            sotto_decode::special_token_texts(file.hparams.n_vocab, file.vocab.len()).unwrap();
        let want = goldens[name].as_object().unwrap();
        assert_eq!(want.len(), 5, "{name}: every quantization has a golden");
        for (q, g) in want {
            let quantization = ct2::Quantization::from_name(q).unwrap();
            let out = tempfile::tempdir().unwrap();
            ct2::write_quantized(&file, &specials, out.path(), quantization).unwrap();
            let bin = out.path().join("model.bin");
            assert_eq!(
                std::fs::metadata(&bin).unwrap().len(),
                g["bytes"].as_u64().unwrap(),
                "{name} {q}"
            );
            assert_eq!(
                sotto_testdata::md5(&bin),
                g["md5"].as_str().unwrap(),
                "{name} {q}"
            );
        }
    }
}

/// An int8 folder reads back as the values it quantized: q8_0 matrices (the same codes,
/// the row's 1/scale as each block's f16 `d`) and f32 convolutions, each value within
/// half an int8 step (amax/254 of its row) of the float16 original, plus the f16
/// rounding of `d`. Written from q8_0 again with int8, the codes are unchanged.
#[test]
fn ct2_int8_reads_back_within_half_a_step() {
    let src = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let specials = sotto_decode::special_token_texts(src.hparams.n_vocab, src.vocab.len()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    ct2::write_quantized(&src, &specials, dir.path(), ct2::Quantization::Int8).unwrap();
    let back = load(dir.path()).unwrap();
    assert_eq!(back.vocab, src.vocab);
    assert_eq!(back.config.alignment_heads, src.config.alignment_heads);
    let mut seen = std::collections::HashMap::<DType, usize>::new();
    for (name, t) in &src.tensors {
        let b = &back.tensors[name];
        assert_eq!(b.shape, t.shape, "{name}");
        *seen.entry(b.dtype).or_default() += 1;
        let (want, got) = (t.to_f32().unwrap(), b.to_f32().unwrap());
        let quantized = name.ends_with(".weight") && t.shape.len() >= 2;
        if !quantized {
            assert_eq!(got, want, "{name} keeps its float16 values");
            continue;
        }
        let expected = if t.shape.len() == 2 {
            DType::Q8_0
        } else {
            DType::F32
        };
        assert_eq!(b.dtype, expected, "{name}");
        let cols = want.len() / t.shape[0];
        for (r, (w, g)) in want.chunks(cols).zip(got.chunks(cols)).enumerate() {
            let amax = w.iter().fold(0f32, |m, x| m.max(x.abs()));
            let bound = amax / 254.0 * 1.0001 + amax * 2f32.powi(-11);
            for (x, y) in w.iter().zip(g) {
                assert!((x - y).abs() <= bound, "{name} row {r}: {x} read as {y}");
            }
        }
    }
    // Matrices q8_0; the two convolutions f32; biases, norms and positions f16.
    assert_eq!(seen[&DType::F32], 2, "{seen:?}");
    assert_eq!(seen[&DType::Q8_0], 4 * 6 + 4 * 10 + 1, "{seen:?}");
    let again = tempfile::tempdir().unwrap();
    ct2::write_quantized(&back, &specials, again.path(), ct2::Quantization::Int8).unwrap();
    let codes = |d: &std::path::Path| {
        let m = ct2::read_model_bin(
            &sotto_formats::Storage::from_vec(std::fs::read(d.join("model.bin")).unwrap()),
            d,
        )
        .unwrap();
        m.variables
            .into_iter()
            .filter(|(_, v)| v.dtype == DType::I8 && !v.shape.is_empty())
            .map(|(n, v)| (n, v.data.as_bytes().to_vec()))
            .collect::<Vec<_>>()
    };
    let (first, second) = (codes(dir.path()), codes(again.path()));
    assert_eq!(first.len(), 4 * 4 + 4 * 7 + 1 + 2);
    assert!(first == second, "int8 → q8_0 → int8 changed a code");
}

/// CTranslate2 3.0 and later write the vocabulary as `vocabulary.json` (a JSON list):
/// such a folder reads as its `vocabulary.txt` twin; a malformed list is an error that
/// names the file.
#[test]
fn ct2_vocabulary_json() {
    let src = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.bin", "config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let txt = std::fs::read_to_string(src.join("vocabulary.txt")).unwrap();
    let tokens: Vec<&str> = txt.strip_suffix('\n').unwrap().split('\n').collect();
    let json = dir.path().join("vocabulary.json");
    std::fs::write(&json, serde_json::to_string_pretty(&tokens).unwrap()).unwrap();
    let (a, b) = (load(&src).unwrap(), load(dir.path()).unwrap());
    assert_eq!(a.vocab, b.vocab);
    assert_eq!(a.config.special_tokens, b.config.special_tokens);
    for bad in [r#"{"a": 1}"#, r#"["a", 2]"#, r#"["a\nb"]"#, "["] {
        std::fs::write(&json, bad).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("vocabulary.json"), "{bad}: {e}");
    }
}
