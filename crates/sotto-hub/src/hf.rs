//! Hugging Face hub: faster-whisper CTranslate2 repos, whisper.cpp ggml files, and any repo
//! by id (`owner/name`): a CTranslate2 conversion or a `transformers` checkpoint in
//! safetensors.

use std::path::Path;

use crate::http::{Client, Expect};
use crate::{HubError, Progress};

/// Small files first, so a missing repo fails before the big download starts.
const REQUIRED: &[&str] = &["config.json"];
/// Older conversions have vocabulary.txt, large-v3 and later vocabulary.json.
const VOCABULARY: &[&str] = &["vocabulary.txt", "vocabulary.json"];
const OPTIONAL: &[&str] = &["tokenizer.json", "preprocessor_config.json"];

pub(crate) fn file_url(endpoint: &str, repo: &str, file: &str) -> String {
    format!("{endpoint}/{repo}/resolve/main/{file}")
}

/// Downloads `repo`'s `file` into the (staging) folder `model`.
fn download(
    client: &Client,
    endpoint: &str,
    repo: &str,
    model: &Path,
    file: &str,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let url = file_url(endpoint, repo, file);
    let what = format!("{repo}/{file}");
    client.download(&url, &model.join(file), &what, Expect::default(), progress)
}

/// Downloads a CTranslate2 Whisper repo's files into the (staging) folder `model`.
pub(crate) fn fetch_ct2(
    client: &Client,
    endpoint: &str,
    repo: &str,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let get = |file: &str, progress: &mut dyn Progress| {
        download(client, endpoint, repo, model, file, progress)
    };
    for file in REQUIRED {
        get(file, progress)?;
    }
    fetch_ct2_rest(client, endpoint, repo, model, progress)
}

/// Downloads a CTranslate2 repo's files after its `config.json`.
fn fetch_ct2_rest(
    client: &Client,
    endpoint: &str,
    repo: &str,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let get = |file: &str, progress: &mut dyn Progress| {
        download(client, endpoint, repo, model, file, progress)
    };
    let mut vocabulary = Err(HubError::Status {
        url: file_url(endpoint, repo, VOCABULARY[0]),
        status: 404,
    });
    for file in VOCABULARY {
        vocabulary = get(file, progress);
        if !matches!(&vocabulary, Err(e) if e.is_not_found()) {
            break;
        }
    }
    vocabulary?;
    for file in OPTIONAL {
        match get(file, progress) {
            Err(e) if e.is_not_found() => {}
            other => other?,
        }
    }
    get("model.bin", progress)
}

/// What a `transformers` Whisper repo may carry besides its weights.
const HF_OPTIONAL: &[&str] = &[
    "generation_config.json",
    "tokenizer.json",
    "vocab.json",
    "preprocessor_config.json",
];

/// Downloads any Whisper repo into the (staging) folder `model`: a `transformers`
/// checkpoint (its `config.json` names `model_type`) with `model.safetensors` or the
/// shards its index lists (else, for older checkpoints, `pytorch_model.bin` or its
/// shards), or else a CTranslate2 conversion.
pub(crate) fn fetch_repo(
    client: &Client,
    endpoint: &str,
    repo: &str,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let get = |file: &str, progress: &mut dyn Progress| {
        download(client, endpoint, repo, model, file, progress)
    };
    let optional = |file: &str, progress: &mut dyn Progress| match get(file, progress) {
        Err(e) if e.is_not_found() => Ok(false),
        other => other.map(|_| true),
    };
    get("config.json", progress)?;
    let config_path = model.join("config.json");
    let config =
        std::fs::read_to_string(&config_path).map_err(|e| HubError::io(&config_path, e))?;
    let config: serde_json::Value =
        serde_json::from_str(&config).map_err(|e| HubError::Invalid {
            what: format!("{repo}/config.json"),
            detail: format!("not JSON: {e}"),
        })?;
    if config.get("model_type").is_none() {
        return fetch_ct2_rest(client, endpoint, repo, model, progress);
    }
    let mut tokens = false;
    for file in HF_OPTIONAL {
        let got = optional(file, progress)?;
        tokens |= got && matches!(*file, "tokenizer.json" | "vocab.json");
    }
    if !tokens {
        return Err(HubError::Invalid {
            what: repo.to_string(),
            detail: "no vocab.json or tokenizer.json".into(),
        });
    }
    // safetensors where the repo has them; older checkpoints only PyTorch's format.
    for (one, ext) in [
        ("model.safetensors", ".safetensors"),
        ("pytorch_model.bin", ".bin"),
    ] {
        if optional(one, progress)? {
            return Ok(());
        }
        let index = format!("{one}.index.json");
        if optional(&index, progress)? {
            for shard in shard_names(&model.join(&index), repo, ext)? {
                get(&shard, progress)?;
            }
            return Ok(());
        }
    }
    Err(HubError::Invalid {
        what: repo.to_string(),
        detail: "no model.safetensors or pytorch_model.bin, whole or sharded".into(),
    })
}

/// The distinct shard files an index lists, each a plain file name ending in `ext`.
fn shard_names(index: &Path, repo: &str, ext: &str) -> Result<Vec<String>, HubError> {
    let text = std::fs::read_to_string(index).map_err(|e| HubError::io(index, e))?;
    let file = index.file_name().unwrap_or_default().to_string_lossy();
    let invalid = |detail: String| HubError::Invalid {
        what: format!("{repo}/{file}"),
        detail,
    };
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let map = doc
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| invalid("no weight_map".into()))?;
    let mut names: Vec<String> = Vec::new();
    for v in map.values() {
        let name = v
            .as_str()
            .filter(|n| crate::is_plain_name(n) && n.ends_with(ext))
            .ok_or_else(|| invalid(format!("shard {v} is not a {ext} file name")))?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Ok(names)
}
