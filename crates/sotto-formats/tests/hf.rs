//! Hugging Face folders: `transformers`' tensor names map onto whisper.cpp's exactly, a real
//! model survives the trip through the format (one file and sharded), and hostile folders
//! are refused with an error that names the problem.

use std::collections::BTreeSet;
use std::path::Path;

use sotto_formats::{hf, load, names, SourceFormat, WhisperFile};

/// Tensor names of `openai/whisper-tiny` as `transformers` saves them, per layer and
/// global, written out from its `modeling_whisper.py` module tree (not from our table).
const HF_ENCODER_LAYER: [&str; 15] = [
    "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",
    "self_attn.v_proj.bias",
    "self_attn.q_proj.weight",
    "self_attn.q_proj.bias",
    "self_attn.out_proj.weight",
    "self_attn.out_proj.bias",
    "self_attn_layer_norm.weight",
    "self_attn_layer_norm.bias",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
    "final_layer_norm.weight",
    "final_layer_norm.bias",
];
const HF_DECODER_CROSS: [&str; 9] = [
    "encoder_attn.k_proj.weight",
    "encoder_attn.v_proj.weight",
    "encoder_attn.v_proj.bias",
    "encoder_attn.q_proj.weight",
    "encoder_attn.q_proj.bias",
    "encoder_attn.out_proj.weight",
    "encoder_attn.out_proj.bias",
    "encoder_attn_layer_norm.weight",
    "encoder_attn_layer_norm.bias",
];
const HF_GLOBALS: [&str; 11] = [
    "model.encoder.conv1.weight",
    "model.encoder.conv1.bias",
    "model.encoder.conv2.weight",
    "model.encoder.conv2.bias",
    "model.encoder.embed_positions.weight",
    "model.encoder.layer_norm.weight",
    "model.encoder.layer_norm.bias",
    "model.decoder.embed_tokens.weight",
    "model.decoder.embed_positions.weight",
    "model.decoder.layer_norm.weight",
    "model.decoder.layer_norm.bias",
];

#[test]
fn transformers_names_map_one_to_one_onto_whisper_cpps() {
    let hp = sotto_formats::random::hparams("tiny").unwrap();
    let mut hf_names: Vec<String> = HF_GLOBALS.iter().map(|s| s.to_string()).collect();
    for l in 0..hp.n_audio_layer {
        hf_names.extend(
            HF_ENCODER_LAYER
                .iter()
                .map(|s| format!("model.encoder.layers.{l}.{s}")),
        );
    }
    for l in 0..hp.n_text_layer {
        hf_names.extend(
            HF_ENCODER_LAYER
                .iter()
                .chain(&HF_DECODER_CROSS)
                .map(|s| format!("model.decoder.layers.{l}.{s}")),
        );
    }
    let mapped: BTreeSet<String> = hf_names
        .iter()
        .map(|n| hf::canonical_name(n).unwrap_or_else(|| panic!("{n} unmapped")))
        .collect();
    assert_eq!(mapped.len(), hf_names.len(), "two names map to one");
    let expected: BTreeSet<String> = names::expected(&hp).into_iter().map(|s| s.name).collect();
    assert_eq!(mapped, expected);
    for n in &hf_names {
        assert_eq!(
            hf::hf_name(&hf::canonical_name(n).unwrap()).as_deref(),
            Some(n.as_str())
        );
    }
}

fn same(a: &WhisperFile, b: &WhisperFile) {
    assert_eq!(a.hparams, b.hparams);
    assert_eq!(a.vocab, b.vocab);
    assert_eq!(a.config.alignment_heads, b.config.alignment_heads);
    assert_eq!(a.config.suppress_ids, b.config.suppress_ids);
    assert_eq!(
        a.config.bpe_merges.as_ref().map(|m| m.text().len()),
        b.config.bpe_merges.as_ref().map(|m| m.text().len())
    );
    assert_eq!(
        a.tensors.keys().collect::<Vec<_>>(),
        b.tensors.keys().collect::<Vec<_>>()
    );
    for (name, t) in &a.tensors {
        let u = &b.tensors[name];
        assert_eq!((t.dtype, &t.shape), (u.dtype, &u.shape), "{name}");
        assert!(t.data.as_bytes() == u.data.as_bytes(), "{name} differs");
    }
}

#[test]
fn a_real_model_round_trips_whole_and_sharded() {
    let ct2 = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    hf::write(&ct2, dir.path()).unwrap();
    let back = load(dir.path()).unwrap();
    assert_eq!(back.format, SourceFormat::Hf);
    same(&ct2, &back);
    // Named by its weights file, too.
    same(&ct2, &load(&dir.path().join("model.safetensors")).unwrap());

    // Two shards and an index, as save_pretrained writes large models; a tied proj_out
    // copy in the second.
    let sharded = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "vocab.json",
        "generation_config.json",
        "tokenizer.json",
    ] {
        if dir.path().join(f).exists() {
            std::fs::copy(dir.path().join(f), sharded.path().join(f)).unwrap();
        }
    }
    let (a, b): (Vec<_>, Vec<_>) = ct2
        .tensors
        .iter()
        .partition(|(name, _)| name.starts_with("encoder."));
    let mut map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ] {
        let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = part
            .iter()
            .map(|(name, t)| {
                map.insert(hf::hf_name(name).unwrap(), file.into());
                (hf::hf_name(name).unwrap(), view(t))
            })
            .collect();
        if file.contains("00002") {
            let emb = &ct2.tensors["decoder.token_embedding.weight"];
            views.push(("proj_out.weight".into(), view(emb)));
            map.insert("proj_out.weight".into(), file.into());
        }
        let bytes = safetensors::serialize(views, None).unwrap();
        std::fs::write(sharded.path().join(file), bytes).unwrap();
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(
        sharded.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    same(&ct2, &load(sharded.path()).unwrap());
}

fn view(t: &sotto_formats::TensorData) -> safetensors::tensor::TensorView<'_> {
    let dtype = match t.dtype {
        sotto_formats::DType::F32 => safetensors::Dtype::F32,
        sotto_formats::DType::F16 => safetensors::Dtype::F16,
        other => panic!("{other:?}"),
    };
    safetensors::tensor::TensorView::new(dtype, t.shape.clone(), t.data.as_bytes()).unwrap()
}

/// A folder written from tiny.en, then changed by `edit`; its load error.
fn broken(edit: impl FnOnce(&Path)) -> String {
    let ct2 = load(&sotto_testdata::model_dir("tiny.en")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    hf::write(&ct2, dir.path()).unwrap();
    edit(dir.path());
    load(dir.path()).unwrap_err().to_string()
}

/// Rewrites model.safetensors with `edit` applied to its (name, view) list.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<(String, safetensors::tensor::TensorView<'_>)>)) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = st.tensors();
    edit(&mut views);
    let out = safetensors::serialize(views, None).unwrap();
    std::fs::write(&path, out).unwrap();
}

/// A change that breaks a written folder.
type Edit = Box<dyn FnOnce(&Path)>;

#[test]
fn hostile_folders_are_refused_with_the_reason() {
    let cases: Vec<(&str, Edit)> = vec![
        (
            "not a valid safetensors file",
            Box::new(|d: &Path| {
                let p = d.join("model.safetensors");
                let bytes = std::fs::read(&p).unwrap();
                std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
            }),
        ),
        (
            "not a valid safetensors file",
            Box::new(|d: &Path| {
                std::fs::write(
                    d.join("model.safetensors"),
                    b"\xff\xff\xff\xff\xff\xff\xff\x7f{}",
                )
                .unwrap()
            }),
        ),
        (
            "missing tensor decoder.ln.bias",
            Box::new(|d: &Path| {
                rewrite(d, |v| {
                    v.retain(|(n, _)| n != "model.decoder.layer_norm.bias")
                })
            }),
        ),
        (
            "lora_A.weight is not part of a Whisper model",
            Box::new(|d: &Path| {
                rewrite(d, |v| {
                    let extra = v[0].1.clone();
                    v.push(("model.encoder.layers.0.fc1.lora_A.weight".into(), extra));
                })
            }),
        ),
        (
            "type I32",
            Box::new(|d: &Path| {
                rewrite(d, |v| {
                    let i = v
                        .iter()
                        .position(|(n, _)| n == "model.decoder.layer_norm.bias")
                        .unwrap();
                    let t = &v[i].1;
                    let n = t.data().len() / 4;
                    let ints = safetensors::tensor::TensorView::new(
                        safetensors::Dtype::I32,
                        vec![n],
                        &t.data()[..n * 4],
                    )
                    .unwrap();
                    v[i].1 = ints;
                })
            }),
        ),
        (
            "proj_out.weight is not tied",
            Box::new(|d: &Path| {
                rewrite(d, |v| {
                    let bias = v
                        .iter()
                        .find(|(n, _)| n == "model.decoder.layer_norm.bias")
                        .unwrap()
                        .1
                        .clone();
                    v.push(("proj_out.weight".into(), bias));
                })
            }),
        ),
        (
            "is not a Whisper model",
            Box::new(|d: &Path| {
                let p = d.join("config.json");
                let t = std::fs::read_to_string(&p)
                    .unwrap()
                    .replace("\"whisper\"", "\"bert\"");
                std::fs::write(&p, t).unwrap();
            }),
        ),
        (
            "no <|endoftext|> token",
            Box::new(|d: &Path| {
                let p = d.join("vocab.json");
                let t = std::fs::read_to_string(&p)
                    .unwrap()
                    .replace("<|endoftext|>", "<|eot|>");
                std::fs::write(&p, t).unwrap();
            }),
        ),
        (
            "is not a .safetensors file name",
            Box::new(|d: &Path| {
                let idx = serde_json::json!({"weight_map": {"model.decoder.layer_norm.bias": "../x.safetensors"}});
                std::fs::write(d.join("model.safetensors.index.json"), idx.to_string()).unwrap();
            }),
        ),
        (
            "config.json",
            Box::new(|d: &Path| std::fs::write(d.join("config.json"), "{\"d_model\": 0}").unwrap()),
        ),
    ];
    for (says, edit) in cases {
        let err = broken(edit);
        assert!(err.contains(says), "{err:?} does not say {says:?}");
    }
}
