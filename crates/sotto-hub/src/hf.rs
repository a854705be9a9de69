//! Hugging Face hub: faster-whisper CTranslate2 repos and whisper.cpp ggml files.

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

/// Downloads a CTranslate2 Whisper repo's files into the (staging) folder `model`.
pub(crate) fn fetch_ct2(
    client: &Client,
    endpoint: &str,
    repo: &str,
    model: &Path,
    progress: &mut dyn Progress,
) -> Result<(), HubError> {
    let get = |file: &str, progress: &mut dyn Progress| {
        let url = file_url(endpoint, repo, file);
        let what = format!("{repo}/{file}");
        client.download(&url, &model.join(file), &what, Expect::default(), progress)
    };
    for file in REQUIRED {
        get(file, progress)?;
    }
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
