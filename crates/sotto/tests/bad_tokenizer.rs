//! A CTranslate2 folder whose `tokenizer.json` is broken: the load fails with an error that
//! names the file (its merges are parsed beside the weights, not by the format reader).

use std::fs;
use std::path::PathBuf;

use sotto::Model;

/// A copy of tiny.en's folder (model.bin linked) with `tokenizer` as its tokenizer.json.
fn folder_with_tokenizer(tag: &str, tokenizer: &str) -> PathBuf {
    let src = sotto_testdata::model_dir("tiny.en");
    let dir = std::env::temp_dir().join(format!("sotto-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for name in ["config.json", "vocabulary.txt"] {
        fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    if fs::hard_link(src.join("model.bin"), dir.join("model.bin")).is_err() {
        fs::copy(src.join("model.bin"), dir.join("model.bin")).unwrap();
    }
    fs::write(dir.join("tokenizer.json"), tokenizer).unwrap();
    dir
}

#[test]
fn a_broken_tokenizer_json_is_a_clear_load_error() {
    for (tag, text) in [
        ("tok-json", "{\"model\": {\"merges\": [\"a b\", "),
        ("tok-merge", "{\"model\": {\"merges\": [\"nospace\"]}}"),
    ] {
        let dir = folder_with_tokenizer(tag, text);
        let err = match Model::load(&dir) {
            Ok(_) => panic!("{tag}: a broken tokenizer.json loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("tokenizer.json"), "{tag}: {err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
