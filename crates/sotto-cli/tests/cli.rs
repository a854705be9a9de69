//! The `sotto` binary end to end: a real model, real audio, and bad inputs.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;

mod common;
use common::{jfk, normalise, JFK};

fn sotto() -> Command {
    let mut cmd = Command::cargo_bin("sotto").expect("binary");
    // Models come from the test cache; nothing is fetched here.
    cmd.env("SOTTO_CACHE_DIR", sotto_testdata::cache_dir());
    cmd
}

#[test]
fn transcribes_jfk_with_tiny_en_by_name() {
    sotto_testdata::model_dir("tiny.en");
    let out = sotto()
        .args(["transcribe", "-m", "tiny.en", "-t", "2", "--no-timestamps"])
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(normalise(&String::from_utf8(out).unwrap()), JFK);
}

/// What phones and messengers record: Opus in Ogg (16 kb/s, a voice message's rate) and
/// AAC in MP4, made from jfk.wav by opusenc and ffmpeg (`crates/sotto-audio/tests/fixtures`).
#[test]
fn transcribes_opus_and_m4a() {
    sotto_testdata::model_dir("tiny.en");
    let fixtures = sotto_testdata::workspace_root().join("crates/sotto-audio/tests/fixtures");
    for name in ["jfk.opus", "jfk.m4a"] {
        let out = sotto()
            .args(["transcribe", "-m", "tiny.en", "-t", "2", "--no-timestamps"])
            .arg(fixtures.join(name))
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        assert_eq!(normalise(&String::from_utf8(out).unwrap()), JFK, "{name}");
    }
}

#[test]
fn default_output_has_timestamped_lines() {
    let model = sotto_testdata::model_dir("tiny.en");
    sotto()
        .args(["transcribe", "-t", "2", "-m"])
        .arg(&model)
        .arg(jfk())
        .assert()
        .success()
        .stdout(
            predicate::str::is_match(r"^\[00:00:00\.000 --> 00:00:\d\d\.\d{3}\]  And so").unwrap(),
        );
}

/// The screened vocabulary (the default for f16 files) and `--exact-logits` (the f16 rows)
/// choose the same tokens and timestamps on jfk, greedy and beam 5, base and tiny.en; a
/// decoder quantized as it loads (`--quantize-decoder`) the same words.
#[test]
fn exact_logits_changes_no_choice_on_jfk_nor_a_quantized_decoder_the_words() {
    for (name, beams) in [("tiny.en", "1"), ("tiny.en", "5"), ("base", "5")] {
        let run = |extra: &[&str]| {
            let out = sotto()
                .args([
                    "transcribe",
                    "-t",
                    "2",
                    "--beam-size",
                    beams,
                    "-l",
                    "en",
                    "-m",
                ])
                .arg(sotto_testdata::model_dir(name))
                .args(extra)
                .arg(jfk())
                .assert()
                .success()
                .get_output()
                .stdout
                .clone();
            String::from_utf8(out).unwrap()
        };
        let (screened, exact) = (run(&[]), run(&["--exact-logits"]));
        assert!(screened.contains("ask not what your country"), "{screened}");
        assert_eq!(screened, exact, "{name}, beam {beams}");
        // The decoder quantized to q8_0 as it loads: the same words here (its timestamps
        // may move by a step or so).
        let words = |s: &str| {
            let n = normalise(s);
            let w = n
                .split(' ')
                .filter(|w| !w.chars().all(|c| c.is_ascii_digit()));
            w.map(str::to_string).collect::<Vec<_>>()
        };
        let q8 = run(&["--quantize-decoder"]);
        assert_eq!(words(&q8), words(&screened), "{name}, beam {beams}");
    }
}

#[test]
fn writes_json_and_srt_into_a_folder() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    sotto()
        .args([
            "transcribe",
            "-t",
            "2",
            "-f",
            "json",
            "-f",
            "srt",
            "--offset-n",
            "10",
        ])
        .arg("-m")
        .arg(&model)
        .arg(jfk())
        .arg("-o")
        .arg(dir.path())
        .assert()
        .success();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("jfk.json")).unwrap())
            .unwrap();
    let segments = json["segments"].as_array().expect("segments");
    assert!(!segments.is_empty());
    let mut last_end = 0.0;
    for s in segments {
        let (start, end) = (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap());
        assert!(
            start >= last_end - 1e-6 && end >= start && end <= 11.01,
            "{s}"
        );
        last_end = end;
        assert!(!s["tokens"].as_array().unwrap().is_empty());
        assert!(s["avg_logprob"].as_f64().unwrap() <= 0.0);
        let p = s["no_speech_prob"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p));
    }
    assert_eq!(normalise(json["text"].as_str().unwrap()), JFK);
    // Cues numbered on from --offset-n, as whisper-cli's -on.
    let srt = std::fs::read_to_string(dir.path().join("jfk.srt")).unwrap();
    assert!(srt.starts_with("11\n00:00:00,000 --> "), "{srt}");
}

#[test]
fn reads_stdin() {
    let model = sotto_testdata::model_dir("tiny.en");
    let out = sotto()
        .args(["transcribe", "-t", "2", "-f", "txt", "-m"])
        .arg(&model)
        .arg("-")
        .write_stdin(std::fs::read(jfk()).unwrap())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(normalise(&String::from_utf8(out).unwrap()), JFK);
}

/// A failure: non-zero exit, exactly one line on stderr naming `needle`, no panic. A CUDA
/// build's `--device auto` note ("device: ...") may precede it.
fn assert_one_line_error(cmd: &mut Command, needle: &str) {
    let out = cmd.assert().failure().get_output().clone();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("device: "))
        .collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "{err} does not name {needle}");
    assert!(!err.contains("panicked"), "{err}");
}

fn copy_model_with(dir: &Path, model_bin: &[u8]) -> PathBuf {
    let src = sotto_testdata::model_dir("tiny.en");
    let dst = dir.join("broken-model");
    std::fs::create_dir_all(&dst).unwrap();
    for f in ["config.json", "vocabulary.txt"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    std::fs::write(dst.join("model.bin"), model_bin).unwrap();
    dst
}

#[test]
fn truncated_model_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read(sotto_testdata::model_dir("tiny.en").join("model.bin")).unwrap();
    for cut in [10, 1000, full.len() / 2, full.len() - 3] {
        let model = copy_model_with(dir.path(), &full[..cut]);
        assert_one_line_error(
            sotto().args(["transcribe", "-m"]).arg(&model).arg(jfk()),
            "model.bin",
        );
    }
}

#[test]
fn wrong_magic_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-model.bin");
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00 this is not a whisper model").unwrap();
    assert_one_line_error(
        sotto().args(["transcribe", "-m"]).arg(&path).arg(jfk()),
        "not-a-model.bin",
    );
}

#[test]
fn non_audio_and_empty_audio_are_one_line_errors() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "hello, this is not audio\n").unwrap();
    assert_one_line_error(
        sotto().args(["transcribe", "-m"]).arg(&model).arg(&text),
        "notes.txt",
    );

    // A valid WAV header with no samples.
    let empty = dir.path().join("empty.wav");
    std::fs::write(&empty, sotto_testdata::wav(&[])).unwrap();
    assert_one_line_error(
        sotto().args(["transcribe", "-m"]).arg(&model).arg(&empty),
        "empty.wav",
    );

    // A header declaring 0 Hz: symphonia panics inside; the user sees one line, no panic.
    let mut rate0 = sotto_testdata::wav(&[0.1; 1600]);
    rate0[24..28].copy_from_slice(&0u32.to_le_bytes());
    let rate0_path = dir.path().join("rate0.wav");
    std::fs::write(&rate0_path, rate0).unwrap();
    assert_one_line_error(
        sotto()
            .args(["transcribe", "-m"])
            .arg(&model)
            .arg(&rate0_path),
        "rate0.wav: corrupt audio data",
    );

    let missing = dir.path().join("missing.wav");
    assert_one_line_error(
        sotto().args(["transcribe", "-m"]).arg(&model).arg(&missing),
        "missing.wav",
    );
    // Named once, as transcribe names it.
    let name = missing.display().to_string();
    let out = sotto()
        .args(["detect-language", "-m"])
        .arg(&model)
        .arg(&missing)
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.starts_with(&format!("error: {name}: cannot read")),
        "{err}"
    );
    assert_eq!(err.matches(&name).count(), 1, "{err}");
}

#[test]
fn device_cuda_without_a_gpu_is_a_one_line_error() {
    // Without the feature: not built in; with it: no driver here (scripts/gpu-check.sh
    // runs --device cuda where there is a GPU). The device is checked before the model.
    for device in ["cuda", "cuda:1"] {
        let needle = if cfg!(feature = "cuda") {
            format!("--device {device}: ")
        } else {
            "without CUDA support".to_string()
        };
        assert_one_line_error(
            sotto().args(["transcribe", "--device", device, "-m", "none", "x.wav"]),
            &needle,
        );
    }
    // A name that is no device is refused as clap refuses any bad value.
    let out = sotto()
        .args(["bench", "--device", "gpu", "-m", "none"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected cpu, cuda, cuda:N or auto"), "{err}");
}

/// Every command that takes `--threads` refuses 0 the same way, before loading anything.
#[test]
fn zero_threads_is_a_one_line_error_everywhere() {
    for args in [
        &["transcribe", "-t", "0", "-m", "none", "x.wav"][..],
        &["bench", "-t", "0", "-m", "none"],
        &["detect-language", "-t", "0", "-m", "none", "x.wav"],
        &["quantize", "-t", "0", "none", "out.bin", "q8_0"],
    ] {
        assert_one_line_error(sotto().args(args), "--threads must be at least 1");
    }
}

#[test]
fn unknown_model_name_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    assert_one_line_error(
        sotto()
            .env("SOTTO_CACHE_DIR", dir.path())
            .args(["transcribe", "-m", "no-such-model"])
            .arg(jfk()),
        "no-such-model",
    );
}

#[test]
fn convert_writes_a_loadable_ggml_file() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ggml-tiny.en.bin");
    sotto()
        .arg("convert")
        .arg(&model)
        .arg(&out)
        .assert()
        .success();
    assert_eq!(
        &std::fs::read(&out).unwrap()[..4],
        &0x67676d6cu32.to_le_bytes()
    );
    let text = sotto()
        .args(["transcribe", "-t", "2", "--no-timestamps", "-m"])
        .arg(&out)
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(normalise(&String::from_utf8(text).unwrap()), JFK);
}

/// A Hugging Face folder written by `sotto convert --to hf` transcribes exactly as the
/// model it came from (the same tensors, in safetensors under `transformers`' names), and
/// so does the CTranslate2 folder `--to ct2` makes of it.
#[test]
fn convert_to_hugging_face_and_ctranslate2_folders_and_transcribe_them_the_same() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("whisper-tiny.en");
    sotto()
        .args(["convert", "--to", "hf"])
        .arg(&model)
        .arg(&out)
        .assert()
        .success();
    assert!(out.join("model.safetensors").is_file());
    let run = |m: &Path| {
        let out = sotto()
            .args(["transcribe", "-t", "2", "--beam-size", "1", "-m"])
            .arg(m)
            .arg(jfk())
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    let hf = run(&out);
    assert!(
        normalise(&hf).contains("and so my fellow americans ask not"),
        "{hf}"
    );
    assert_eq!(hf, run(&model));
    // And on to CTranslate2's layout: the very model.bin CTranslate2's converter wrote.
    let ct2 = dir.path().join("faster-whisper-tiny.en");
    sotto()
        .args(["convert", "--to", "ct2"])
        .arg(&out)
        .arg(&ct2)
        .assert()
        .success();
    let same = std::fs::read(ct2.join("model.bin")).unwrap()
        == std::fs::read(model.join("model.bin")).unwrap();
    assert!(same, "model.bin differs from CTranslate2's");
    assert_eq!(run(&ct2), hf);
}

/// `convert --to ct2 --quantization int8` writes what faster-whisper users make with
/// CTranslate2's converter (the bytes are checked in sotto-formats); sotto reads it as
/// q8_0 and transcribes jfk as from the float16 model. The option is refused for other
/// targets and unknown names.
#[test]
fn convert_to_an_int8_ctranslate2_folder_and_transcribe_it() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let int8 = dir.path().join("faster-whisper-tiny.en-int8");
    sotto()
        .args(["convert", "--to", "ct2", "--quantization", "int8"])
        .arg(&model)
        .arg(&int8)
        .assert()
        .success();
    let size = std::fs::metadata(int8.join("model.bin")).unwrap().len();
    assert_eq!(size, 38_920_568, "as CTranslate2's converter writes it");
    let text = |m: &Path| {
        let out = sotto()
            .args([
                "transcribe",
                "-t",
                "2",
                "--beam-size",
                "1",
                "--no-timestamps",
                "-m",
            ])
            .arg(m)
            .arg(jfk())
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        normalise(&String::from_utf8(out).unwrap())
    };
    assert_eq!(text(&int8), text(&model));
    // On to whisper.cpp: a q8_0 file holding the folder's own codes, which whisper.cpp
    // loads, or an f16 file of its values; not another quantization of them.
    let q8 = dir.path().join("ggml-tiny.en-q8_0.bin");
    sotto()
        .arg("quantize")
        .arg(&int8)
        .arg(&q8)
        .arg("q8_0")
        .assert()
        .success();
    assert_eq!(std::fs::metadata(&q8).unwrap().len(), 43_550_778);
    let (folder, file) = (
        sotto::formats::load(&int8).unwrap(),
        sotto::formats::load(&q8).unwrap(),
    );
    for (name, t) in &folder.tensors {
        if t.dtype == sotto::formats::DType::Q8_0 {
            assert!(file.tensors[name].data == t.data, "{name}: codes changed");
        }
    }
    if let Some(text) = whisper_cpp_jfk(&q8) {
        assert_eq!(text, JFK);
    }
    let f16 = dir.path().join("ggml-tiny.en.bin");
    sotto()
        .arg("convert")
        .arg(&int8)
        .arg(&f16)
        .assert()
        .success();
    assert_eq!(text(&f16), text(&model));
    for args in [&["q4_0"][..], &["q8_0", "--refine"]] {
        sotto()
            .arg("quantize")
            .arg(&int8)
            .arg(dir.path().join("again.bin"))
            .args(args)
            .assert()
            .failure();
    }
    sotto()
        .args(["convert", "--to", "hf", "--quantization", "int8"])
        .arg(&model)
        .arg(dir.path().join("hf"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("--quantization is for --to ct2"));
    sotto()
        .args(["convert", "--to", "ct2", "--quantization", "int4"])
        .arg(&model)
        .arg(dir.path().join("x"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("int8_float16"));
}

/// `random:SIZE` writes a model of that size with random weights (to time a peer on sizes
/// whose weights are not at hand): a CTranslate2 folder sotto loads and times again.
#[test]
fn convert_writes_random_weights_of_a_size() {
    let dir = tempfile::tempdir().unwrap();
    let ct2 = dir.path().join("random-tiny");
    sotto()
        .args(["convert", "--to", "ct2", "random:tiny"])
        .arg(&ct2)
        .assert()
        .success();
    assert!(ct2.join("model.bin").is_file() && ct2.join("vocabulary.txt").is_file());
    sotto()
        .args([
            "bench",
            "--runs",
            "1",
            "--tokens",
            "1",
            "--no-limits",
            "-t",
            "2",
            "-m",
        ])
        .arg(&ct2)
        .assert()
        .success()
        .stdout(predicate::str::contains("(4 layers, d 384)"));
    sotto()
        .args(["convert", "random:huge"])
        .arg(dir.path().join("x.bin"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("no model size \"huge\""));
}

/// Serves the files under `root` over plain HTTP/1.1 (GET only, one request per
/// connection) on a free local port; returns its base URL and a count of requests.
fn static_server(
    root: std::path::PathBuf,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            // Skip the headers.
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            let path = line
                .split(' ')
                .nth(1)
                .unwrap_or("/")
                .trim_start_matches('/');
            let mut out = reader.into_inner();
            let _ = match std::fs::read(root.join(path)) {
                Ok(body) => out
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|_| out.write_all(&body)),
                Err(_) => out.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    (base, hits)
}

/// sotto's greedy transcript of jfk with model `m` and `args`, its cache in `cache` and
/// the hub at `endpoint` (a [`static_server`]).
fn jfk_via_hub(m: &str, args: &[&str], cache: &Path, endpoint: &str) -> String {
    let out = sotto()
        .env("SOTTO_CACHE_DIR", cache)
        .env("SOTTO_HF_ENDPOINT", endpoint)
        .args(["transcribe", "-t", "2", "--beam-size", "1", "--no-progress"])
        .args(args)
        .args(["-m", m])
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

/// A Hugging Face repo named by its id is fetched (here from a local stand-in for
/// huggingface.co), cached, loaded as a `transformers` checkpoint and transcribes as the
/// model it was made from.
#[test]
fn a_hugging_face_repo_by_id() {
    let model = sotto_testdata::model_dir("tiny.en");
    let site = tempfile::tempdir().unwrap();
    let repo = site.path().join("someone/whisper-tiny.en/resolve/main");
    sotto()
        .args(["convert", "--to", "hf"])
        .arg(&model)
        .arg(&repo)
        .assert()
        .success();
    let (endpoint, hits) = static_server(site.path().to_path_buf());
    let cache = tempfile::tempdir().unwrap();
    let run = |m: &str| jfk_via_hub(m, &[], cache.path(), &endpoint);
    let by_id = run("someone/whisper-tiny.en");
    assert!(cache
        .path()
        .join("models/hf--someone--whisper-tiny.en/model.safetensors")
        .is_file());
    assert_eq!(by_id, run(model.to_str().unwrap()));
    // Cached now: the second run asks the server nothing.
    let asked = hits.load(std::sync::atomic::Ordering::SeqCst);
    assert!(asked >= 3, "{asked}");
    assert_eq!(run("someone/whisper-tiny.en"), by_id);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), asked);
}

/// A faster-whisper repo as current CTranslate2 writes one (int8 weights, the vocabulary
/// as `vocabulary.json`, as Systran/faster-whisper-large-v3 has it) is fetched by id,
/// loaded and transcribes jfk as the float16 model does.
#[test]
fn an_int8_ctranslate2_repo_with_vocabulary_json_by_id() {
    let model = sotto_testdata::model_dir("tiny.en");
    let site = tempfile::tempdir().unwrap();
    let repo = site
        .path()
        .join("someone/faster-whisper-tiny.en-int8/resolve/main");
    sotto()
        .args(["convert", "--to", "ct2", "--quantization", "int8"])
        .arg(&model)
        .arg(&repo)
        .assert()
        .success();
    let txt = std::fs::read_to_string(repo.join("vocabulary.txt")).unwrap();
    let tokens: Vec<&str> = txt.lines().collect();
    let json = serde_json::to_string_pretty(&tokens).unwrap();
    std::fs::write(repo.join("vocabulary.json"), json).unwrap();
    std::fs::remove_file(repo.join("vocabulary.txt")).unwrap();
    let (endpoint, _) = static_server(site.path().to_path_buf());
    let cache = tempfile::tempdir().unwrap();
    // int8 moves some timestamps: the words are compared.
    let text = |m: &str| {
        normalise(&jfk_via_hub(
            m,
            &["--no-timestamps"],
            cache.path(),
            &endpoint,
        ))
    };
    let by_id = text("someone/faster-whisper-tiny.en-int8");
    let cached = cache
        .path()
        .join("models/hf--someone--faster-whisper-tiny.en-int8");
    assert!(cached.join("vocabulary.json").is_file());
    assert_eq!(by_id, text(model.to_str().unwrap()));
}

/// PyTorch checkpoints transcribe as the model they hold: openai-whisper's `.pt` (as
/// `whisper.load_model` caches it) given by path, and a Hugging Face repo with only
/// `pytorch_model.bin`, fetched by id.
#[test]
fn pytorch_checkpoints_transcribe_as_their_model() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let ggml = dir.path().join("ggml-tiny.en.bin");
    sotto()
        .arg("convert")
        .arg(&model)
        .arg(&ggml)
        .assert()
        .success();
    let pt = dir.path().join("tiny.en.pt");
    if !sotto_testdata::torch_save(&["openai".as_ref(), ggml.as_os_str(), pt.as_os_str()]) {
        return;
    }
    let site = tempfile::tempdir().unwrap();
    let hf = dir.path().join("hf");
    sotto()
        .args(["convert", "--to", "hf"])
        .arg(&model)
        .arg(&hf)
        .assert()
        .success();
    let repo = site.path().join("old/whisper-tiny.en-pt/resolve/main");
    if !sotto_testdata::torch_save(&["hf".as_ref(), hf.as_os_str(), repo.as_os_str()]) {
        return;
    }
    let (endpoint, _) = static_server(site.path().to_path_buf());
    let cache = tempfile::tempdir().unwrap();
    let run = |m: &str| jfk_via_hub(m, &[], cache.path(), &endpoint);
    let want = run(model.to_str().unwrap());
    assert_eq!(run(pt.to_str().unwrap()), want);
    assert_eq!(run("old/whisper-tiny.en-pt"), want);
    assert!(cache
        .path()
        .join("models/hf--old--whisper-tiny.en-pt/pytorch_model.bin")
        .is_file());
}

/// whisper.cpp's transcript of jfk with the ggml file `model`, normalised; `None` without
/// whisper.cpp ([`sotto_testdata::whisper_cpp_python`]).
fn whisper_cpp_jfk(model: &std::path::Path) -> Option<String> {
    let python = sotto_testdata::whisper_cpp_python()?;
    let script = sotto_testdata::workspace_root().join("scripts/whispercpp-transcribe.py");
    let result = std::process::Command::new(python)
        .arg(script)
        .arg(model)
        .arg(jfk())
        .output()
        .expect("run whisper.cpp");
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    Some(normalise(&String::from_utf8_lossy(&result.stdout)))
}

/// whisper.cpp itself loads a file written by `sotto convert` and transcribes it as
/// sotto does.
#[test]
fn whisper_cpp_loads_converted_file() {
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ggml-tiny.en.bin");
    sotto()
        .arg("convert")
        .arg(&model)
        .arg(&out)
        .assert()
        .success();
    if let Some(text) = whisper_cpp_jfk(&out) {
        assert_eq!(text, JFK);
    }
}

/// A whisper.cpp file in k-quants (base: tiny's rows of 384 are not whole super-blocks of
/// 256), written by ggml's own quantizer as `whisper-quantize` writes it: sotto reads each
/// type as the nearest with kernels, says so, and transcribes jfk from q3_K to q6_K as
/// whisper.cpp does from the same file. q2_K is read too; neither engine gets jfk's words
/// from it (whisper.cpp: "a").
#[test]
fn whisper_cpp_k_quant_files_transcribe_as_in_whisper_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("ggml-base.bin");
    sotto()
        .arg("convert")
        .arg(sotto_testdata::model_dir("base"))
        .arg(&f16)
        .assert()
        .success();
    for (kind, runs_as) in [
        ("q2_k", "q8_0"),
        ("q3_k", "q8_0"),
        ("q4_k", "q4_1"),
        ("q5_k", "q5_1"),
        ("q6_k", "q8_0"),
    ] {
        let model = dir.path().join(format!("ggml-base-{kind}.bin"));
        let args = [
            "quantize".as_ref(),
            f16.as_os_str(),
            model.as_os_str(),
            kind.as_ref(),
        ];
        if !sotto_testdata::ggml_kquant(&args) {
            return;
        }
        let file = sotto::formats::load(&model).unwrap();
        let note = file.config.weights_note.unwrap();
        assert!(
            note.contains(&format!("{} as {runs_as}", kind.replace('k', "K"))),
            "{note}"
        );
        let out = sotto()
            .args([
                "transcribe",
                "-t",
                "2",
                "--beam-size",
                "1",
                "--no-timestamps",
                "-m",
            ])
            .arg(&model)
            .arg(jfk())
            .assert()
            .success()
            .stderr(predicate::str::contains(format!("model: {note}")));
        if kind == "q2_k" {
            continue;
        }
        if kind == "q4_k" {
            // Block types are not converted to CTranslate2's float layout; the note says
            // where the q4_1 in the refusal comes from.
            sotto()
                .arg("convert")
                .arg(&model)
                .arg(dir.path().join("ct2"))
                .args(["--to", "ct2"])
                .assert()
                .failure()
                .stderr(predicate::str::contains(format!("model: {note}")))
                .stderr(predicate::str::contains("is Q4_1"));
        }
        let text = normalise(&String::from_utf8_lossy(&out.get_output().stdout));
        assert_eq!(text, JFK, "{kind}");
        if let Some(theirs) = whisper_cpp_jfk(&model) {
            assert_eq!(theirs, text, "{kind}");
        }
    }
}

/// `sotto quantize <tiny.en> out args…`.
fn quantize_tiny_en(out: &Path, args: &[&str]) -> assert_cmd::assert::Assert {
    sotto()
        .arg("quantize")
        .arg(sotto_testdata::model_dir("tiny.en"))
        .arg(out)
        .args(args)
        .assert()
}

/// The ggml file `model` holds `tensor` as `dtype`, and sotto, and whisper.cpp where it is
/// installed, transcribe jfk from it.
fn check_quantized(model: &Path, tensor: &str, dtype: sotto::formats::DType) {
    let file = sotto::formats::load(model).unwrap();
    assert_eq!(file.tensors[tensor].dtype, dtype);
    let text = sotto()
        .args(["transcribe", "-t", "2", "--no-timestamps", "-m"])
        .arg(model)
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(normalise(&String::from_utf8(text).unwrap()), JFK);
    if let Some(text) = whisper_cpp_jfk(model) {
        assert_eq!(text, JFK);
    }
}

/// `sotto quantize --refine` writes the same format with least-squares scales: sotto reads
/// it back (the header names the type) and transcribes jfk, and so does whisper.cpp.
#[test]
fn refined_quantization_loads_in_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ggml-tiny.en-q5_1-refined.bin");
    quantize_tiny_en(&out, &["q5_1", "--refine"]).success();
    check_quantized(
        &out,
        "decoder.blocks.0.mlp.0.weight",
        sotto::formats::DType::Q5_1,
    );
}

/// `sotto quantize --calibrate` (GPTQ from the layers' inputs on real speech) writes the
/// same format: sotto and whisper.cpp both read it and transcribe jfk.
#[test]
fn calibrated_quantization_loads_in_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ggml-tiny.en-q5_0-gptq.bin");
    let jfk = jfk();
    let assert = quantize_tiny_en(
        &out,
        &["q5_0", "-t", "2", "--calibrate", jfk.to_str().unwrap()],
    )
    .success();
    let log = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    // Every 2-D weight: 4 per attention, 2 MLPs per block (4 encoder + 4 decoder blocks
    // with cross-attention), and the token embedding.
    assert!(log.contains("GPTQ on 65 matrices"), "{log}");
    check_quantized(
        &out,
        "decoder.token_embedding.weight",
        sotto::formats::DType::Q5_0,
    );
}

/// Calibration audio that cannot be read is an error naming it, before anything is written.
#[test]
fn unreadable_calibration_audio_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never.bin");
    let bad = dir.path().join("noise.wav");
    std::fs::write(&bad, b"RIFF\x04\x00\x00\x00WAVEjunk").unwrap();
    let assert = quantize_tiny_en(&out, &["q4_0", "--calibrate", bad.to_str().unwrap()]).failure();
    let err = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(err.contains("noise.wav"), "{err}");
    assert!(!out.exists());
}

/// `bench --file` times the file's decoding to 16 kHz and its transcription end to end.
#[test]
fn bench_times_a_file_end_to_end() {
    sotto_testdata::model_dir("tiny.en");
    let out = sotto()
        .args([
            "bench", "-m", "tiny.en", "-t", "2", "--runs", "1", "--tokens", "1",
        ])
        .args(["--no-limits", "--file"])
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for line in ["audio to 16 kHz", "end to end"] {
        let l = out
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(l.contains("for 11.0 s of audio"), "{l}");
    }
}

/// A published size with random weights: no file, the real shapes. With `--ab`, windows
/// alternated with the experiment switch (nothing gated on it here: an A/A run).
#[test]
fn bench_times_random_weights_of_a_size() {
    // `sotto bench` of tiny's shapes on the CPU, 2 threads, one run of two tokens.
    let bench = |more: &[&str]| {
        let out = sotto()
            .args(["bench", "-t", "2", "--runs", "1", "--tokens", "2"])
            .args(more)
            .args(["--device", "cpu", "--random-weights", "tiny"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    let out = bench(&["--no-limits", "--encoder-ops", "--ab", "4,2"]);
    assert!(
        out.starts_with("model tiny (random weights) (4 layers, d 384)"),
        "{out}"
    );
    assert!(out.contains("encoder / window"), "{out}");
    // The op groups' laps: each named once, each a positive time.
    for op in [
        "conv",
        "self-attention",
        "out-projection",
        "mlp",
        "cross K/V",
    ] {
        let line = out.lines().find(|l| l.trim_start().starts_with(op));
        let ms: f64 = line
            .and_then(|l| l.split_whitespace().rev().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no time for {op}: {out}"));
        assert!(ms > 0.0, "{op}: {ms} ms\n{out}");
    }
    // The A/B block: both sides' times, then each op group with its ratio.
    let ab: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("A/B bits 4, 2 window pairs: off "))
        .collect();
    assert!(
        ab.len() > 5 && ab[0].contains(", on ") && ab[0].contains("on/off "),
        "{out}"
    );
    for op in ["conv", "self-attention", "mlp", "cross K/V"] {
        assert!(
            ab.iter()
                .any(|l| l.trim_start().starts_with(op) && l.contains("on/off")),
            "{op} missing from the A/B block:\n{out}"
        );
    }
    // A shorter encoder context (whisper.cpp's audio_ctx) times its own windows.
    let out = bench(&["--audio-ctx", "100"]);
    assert!(out.contains("audio_ctx 100: windows of 2.00 s"), "{out}");
    assert!(
        out.contains("encoder / window") && !out.contains("limit"),
        "{out}"
    );
    sotto()
        .args(["bench", "--random-weights", "huge"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("possible values"));
    for bad in ["x", "1,0", "1,y"] {
        sotto()
            .args(["bench", "--random-weights", "tiny", "--ab", bad])
            .assert()
            .failure()
            .stderr(predicates::str::contains("--ab"));
    }
}

/// `SOTTO_FORCE_ISA` below AVX-512 makes the encoder choose what a CPU with only that path
/// would (int16 on AVX2), and refuses bf16 by name, rather than packing bf16 weights that
/// the forced kernels would widen to f32 at every product.
#[test]
fn a_forced_kernel_path_picks_its_own_encoder_precision() {
    let model = sotto_testdata::model_dir("tiny.en");
    for isa in ["scalar", "avx2"] {
        sotto()
            .env("SOTTO_FORCE_ISA", isa)
            .args(["transcribe", "--encoder-precision", "bf16", "-m"])
            .arg(&model)
            .arg(jfk())
            .assert()
            .failure()
            .stderr(predicate::str::contains("lacks AVX-512 BF16"));
    }
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    if !avx2 {
        return;
    }
    let out = sotto()
        .env("SOTTO_FORCE_ISA", "avx2")
        .args([
            "bench",
            "-t",
            "1",
            "--runs",
            "1",
            "--tokens",
            "1",
            "--no-limits",
            "-m",
        ])
        .arg(&model)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let head = out.lines().next().unwrap_or_default();
    assert!(head.contains("ISA avx2, encoder int16"), "{head}");
}

/// `sotto bench` prints every figure, the long-prompt beam step included.
#[test]
fn bench_prints_every_figure() {
    let out = sotto()
        .args(["bench", "-t", "2", "--runs", "3", "--tokens", "2", "-m"])
        .arg(sotto_testdata::model_dir("tiny.en"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    for figure in [
        "mel / 30 s",
        "encoder / window",
        "(batch 1)",
        "(batch 5: ",
        "(batch 5 after a 102-token prompt)",
        "(batch 5, every logit: best-of-5 sampling)",
        "peak RSS",
        "peaks             f32 FMA ",
        "encoder limit",
        ", its quietest three in a row ",
        ", its best run ",
        "decoder floor",
    ] {
        assert!(out.contains(figure), "{figure} missing from:\n{out}");
    }
    // The encoder's median, its best run and its quietest three in a row (with three runs,
    // the median): the best is no slower than either.
    let line = out
        .lines()
        .find(|l| l.starts_with("encoder / window"))
        .unwrap();
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse().ok())
        .collect();
    assert!(
        line.contains("(best run ")
            && line.contains(", quietest three in a row ")
            && nums.len() == 3
            && nums[1] <= nums[0]
            && nums[1] <= nums[2]
            && nums[2] == nums[0],
        "{line}"
    );
}

#[test]
fn vad_options_as_faster_whisper_and_whisper_cpp_name_them() {
    let model = sotto_testdata::model_dir("tiny.en");
    let vad = sotto_testdata::vad_model();
    // A 3 s limit splits the 11 s of speech at its pauses; the words stay the same.
    let out = sotto()
        .args([
            "transcribe",
            "-t",
            "2",
            "--beam-size",
            "1",
            "--format",
            "json",
            "--vad",
        ])
        .arg("--vad-model")
        .arg(&vad)
        .args([
            "--vad-max-speech-duration-s",
            "3",
            "--vad-min-speech-ms",
            "100",
            "-m",
        ])
        .arg(&model)
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(normalise(v["text"].as_str().unwrap()), JFK, "{v}");
    for bad in [
        ["--vad-max-speech-s", "0"],
        ["--vad-min-speech-ms=-5", "--vad-speech-pad-ms=0"],
        ["--vad-threshold", "NaN"],
    ] {
        sotto()
            .args(["transcribe", "--vad"])
            .arg("--vad-model")
            .arg(&vad)
            .args(bad)
            .arg("-m")
            .arg(&model)
            .arg(jfk())
            .assert()
            .failure()
            .stderr(predicate::str::contains("--vad-max-speech-s is > 0"));
    }
}

#[test]
fn batch_size_decodes_the_vad_s_chunks_together() {
    let model = sotto_testdata::model_dir("tiny.en");
    let vad = sotto_testdata::vad_model();
    let run = |extra: &[&str]| {
        sotto()
            .args([
                "transcribe",
                "-t",
                "2",
                "--beam-size",
                "1",
                "--format",
                "json",
            ])
            .args(extra)
            .arg("--vad-model")
            .arg(&vad)
            .arg("-m")
            .arg(&model)
            .arg(jfk())
            .assert()
    };
    // A 3 s limit (the VAD's) cuts the 11 s of speech into stretches, joined into one
    // chunk; the text is the sample's, the times the audio's.
    let out = run(&["--batch-size", "4", "--vad-max-speech-s", "3"])
        .success()
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(normalise(v["text"].as_str().unwrap()), JFK, "{v}");
    let first = &v["segments"][0];
    assert!(first["start"].as_f64().unwrap() < 1.0, "{v}");
    // What batched decoding cannot do is refused, naming the option.
    run(&["--batch-size", "0"])
        .failure()
        .stderr(predicate::str::contains("batch-size"));
    run(&["--batch-size", "2", "--temperature", "0.5"])
        .failure()
        .stderr(predicate::str::contains("temperature 0"));
    // Clips are the chunks themselves, without the VAD: two clips, two windows.
    let out = sotto()
        .args([
            "transcribe",
            "-t",
            "2",
            "--beam-size",
            "1",
            "--format",
            "json",
        ])
        .args([
            "--batch-size",
            "2",
            "--clip-timestamps",
            "0,4.6,4.6",
            "--timings",
            "-m",
        ])
        .arg(&model)
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        normalise(v["text"].as_str().unwrap()).ends_with("for your country"),
        "{v}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(2 windows)"), "{err}");
    run(&["--batch-size", "2", "--clip-timestamps", "1,5", "--vad"])
        .failure()
        .stderr(predicate::str::contains("no VAD"));
}

/// `sotto stream -t 2 --timestamps ARGS -m MODEL` on `bytes`: what it printed.
fn stream_lines(model: &Path, args: &[&str], bytes: Vec<u8>) -> String {
    let out = sotto()
        .args(["stream", "-t", "2", "--timestamps"])
        .args(args)
        .arg("-m")
        .arg(model)
        .write_stdin(bytes)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

#[test]
fn stream_transcribes_raw_pcm_as_it_comes() {
    let model = sotto_testdata::model_dir("tiny.en");
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let s16 = sotto_testdata::s16le(&samples);
    let f32le: Vec<u8> = samples.iter().flat_map(|x| x.to_le_bytes()).collect();
    let run = |pcm: &str, bytes: Vec<u8>, more: &[&str]| {
        stream_lines(&model, &[&["--pcm", pcm], more].concat(), bytes)
    };
    // 11 s in steps of 3 s, a line per 10 s window's two steps: two finished lines, the
    // second window starting 0.2 s before the first ends; together the sample's words (a
    // word may be cut where the windows meet).
    let out = run("s16le", s16, &[]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("[0.00 --> 6.00]"), "{out}");
    assert!(lines[1].starts_with("[5.80 --> 11.00]"), "{out}");
    let text = normalise(&out.replace(['[', ']', '>'], " "));
    assert!(text.contains("and so my fellow americans ask not"), "{out}");
    assert!(
        text.ends_with("ask what you can do for your country"),
        "{out}"
    );
    assert_eq!(run("f32le", f32le.clone(), &[]), out);
    // 10 s windows from a shorter encoder context: the same lines and times.
    let short = run("f32le", f32le, &["--audio-ctx", "500"]);
    let starts: Vec<_> = short
        .lines()
        .map(|l| &l[..l.find(']').unwrap_or(0)])
        .collect();
    assert_eq!(starts, ["[0.00 --> 6.00", "[5.80 --> 11.00"], "{short}");
    assert!(normalise(&short).contains("fellow americans"), "{short}");
    // Bad windows are refused; silence gives no lines.
    sotto()
        .args(["stream", "--step", "5000", "--length", "1000"])
        .write_stdin(vec![])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--step must be"));
    let quiet = sotto()
        .args(["stream", "-t", "2", "-m"])
        .arg(&model)
        .write_stdin(vec![0u8; 2 * 16_000 * 4 + 1])
        .assert()
        .success();
    let quiet = quiet.get_output();
    assert!(
        quiet.stdout.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&quiet.stdout)
    );
    assert!(String::from_utf8_lossy(&quiet.stderr).contains("1 byte(s) into a sample"));
}

/// 48 kHz stereo (a microphone's) with `--rate` and `--channels`: mixed and resampled as it
/// arrives, the lines are those of the same audio resampled whole and given at 16 kHz.
#[test]
fn stream_resamples_and_mixes_what_it_is_told_the_input_is() {
    let model = sotto_testdata::model_dir("tiny.en");
    let x = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let high: Vec<f32> = (0..x.len() * 3)
        .map(|i| {
            let (j, k) = (i / 3, (i % 3) as f32 / 3.0);
            x[j] + (x.get(j + 1).copied().unwrap_or(x[j]) - x[j]) * k
        })
        .collect();
    let s16 = sotto_testdata::s16le(&high);
    let stereo: Vec<u8> = s16
        .chunks_exact(2)
        .flat_map(|b| [b[0], b[1], b[0], b[1]])
        .collect();
    let mono: Vec<f32> = s16
        .chunks_exact(2)
        .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
        .collect();
    let at16 = sotto::audio::resample_to_16k(&mono, 48_000).unwrap();
    let live = stream_lines(&model, &["--rate", "48000", "--channels", "2"], stereo);
    let whole = stream_lines(
        &model,
        &["--pcm", "f32le"],
        at16.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    assert_eq!(live, whole);
    assert!(live.starts_with("[0.00 --> 6.00]"), "{live}");
    assert!(normalise(&live).contains("fellow americans"), "{live}");
    sotto()
        .args(["stream", "--rate", "10"])
        .write_stdin(vec![])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--rate"));
    sotto()
        .args(["stream", "--channels", "0"])
        .write_stdin(vec![])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--channels"));
}

#[test]
fn stream_with_the_vad_transcribes_each_stretch_of_speech_once_it_ends() {
    let model = sotto_testdata::model_dir("tiny.en");
    let vad = sotto_testdata::vad_model();
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let z = |s: usize| vec![0f32; s * 16_000];
    let gap = [z(1), samples.clone(), z(3), samples, z(1)].concat();
    let s16 = sotto_testdata::s16le(&gap);
    let out = sotto()
        .args(["stream", "-t", "2", "--vad", "--timestamps", "--vad-model"])
        .arg(&vad)
        .arg("-m")
        .arg(&model)
        .write_stdin(s16)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    // Lines in the stream's own times: the speech from about 1 s, then after the 3 s of
    // silence from about 15 s; nothing in the silences.
    let starts: Vec<f64> = out
        .lines()
        .map(|l| l[1..].split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!((0.8..1.2).contains(&starts[0]), "{out}");
    assert!(starts.iter().any(|s| (14.5..15.5).contains(s)), "{out}");
    assert!(!starts.iter().any(|s| (12.5..14.5).contains(s)), "{out}");
    let text = normalise(&out);
    assert_eq!(text.matches("my fellow americans").count(), 2, "{out}");
    assert_eq!(text.matches("can do for your country").count(), 2, "{out}");
    sotto()
        .args(["stream", "--vad-threshold", "0.3"])
        .write_stdin(vec![])
        .assert()
        .failure()
        .stderr(predicate::str::contains("apply with --vad"));
}

#[test]
fn converts_the_onnx_vad_to_whisper_cpp_s_ggml_vad_file() {
    let vad = sotto_testdata::vad_model();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ggml-silero.bin");
    sotto()
        .arg("convert")
        .arg(&vad)
        .arg(&out)
        .assert()
        .success();
    // The file runs: transcribing speech only with it gives the sample's words.
    let model = sotto_testdata::model_dir("tiny.en");
    let text = sotto()
        .args([
            "transcribe",
            "-t",
            "2",
            "--beam-size",
            "1",
            "--no-timestamps",
            "--vad",
        ])
        .arg("--vad-model")
        .arg(&out)
        .arg("-m")
        .arg(&model)
        .arg(jfk())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(normalise(&String::from_utf8(text).unwrap()), JFK);
    sotto()
        .arg("convert")
        .arg(&vad)
        .arg(dir.path().join("x"))
        .args(["--to", "hf"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("ggml only"));
}

#[test]
fn vad_lists_the_stretches_of_speech() {
    let vad = sotto_testdata::vad_model();
    let dir = tempfile::tempdir().unwrap();
    // jfk, 3 s of silence, jfk again: two stretches, the second from about 14 s.
    let samples = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let gap = [samples.clone(), vec![0.0; 3 * 16_000], samples].concat();
    let wav = dir.path().join("gap.wav");
    std::fs::write(&wav, sotto_testdata::wav(&gap)).unwrap();
    let out = sotto()
        .arg("vad")
        .arg("--vad-model")
        .arg(&vad)
        .arg(&wav)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let lines: Vec<(f64, f64)> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].0 < 0.5 && (13.5..14.5).contains(&lines[1].0),
        "{lines:?}"
    );
    // JSON, a missing file among good ones (an error, the others still listed).
    let out = sotto()
        .args(["vad", "--json", "--vad-max-speech-s", "3"])
        .arg("--vad-model")
        .arg(&vad)
        .arg(jfk())
        .arg(dir.path().join("missing.wav"))
        .assert()
        .failure()
        .stderr(predicate::str::contains("missing.wav"))
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert!(v[0]["speech"].as_array().unwrap().len() >= 4, "{v}");
    // VAD flags without --vad are an error, not ignored.
    sotto()
        .args(["transcribe", "--vad-threshold", "0.3"])
        .arg(jfk())
        .assert()
        .failure()
        .stderr(predicate::str::contains("apply with --vad"));
}

#[test]
fn diarize_labels_each_segment_with_the_louder_channel() {
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("call.wav");
    std::fs::write(&wav, common::jfk_two_speakers()).unwrap();
    sotto()
        .args(["transcribe", "--diarize", "-f", "txt", "-f", "json", "-o"])
        .arg(dir.path())
        .arg(&wav)
        .assert()
        .success();
    let txt = std::fs::read_to_string(dir.path().join("call.txt")).unwrap();
    let lines: Vec<&str> = txt.lines().collect();
    assert!(lines.len() >= 2, "{txt}");
    assert!(lines[0].starts_with("(speaker 0) And so"), "{txt}");
    assert!(lines.last().unwrap().starts_with("(speaker 1) "), "{txt}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("call.json")).unwrap())
            .unwrap();
    let segments = json["segments"].as_array().unwrap();
    assert_eq!(segments[0]["speaker"], "0");
    assert!(!segments[0]["text"].as_str().unwrap().contains("speaker"));
    // One channel: a note, and no labels.
    sotto()
        .args(["transcribe", "--diarize", "--beam-size", "1"])
        .arg(jfk())
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "--diarize needs a stereo recording",
        ))
        .stdout(predicate::str::contains("speaker").not());
}

#[test]
fn grammar_from_a_file_or_inline_steers_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lower.gbnf");
    std::fs::write(&file, "# lower case only\nroot ::= [^A-Z]*\n").unwrap();
    for grammar in [file.to_str().unwrap(), "root ::= [^A-Z]*"] {
        let out = sotto()
            .args([
                "transcribe",
                "--beam-size",
                "1",
                "-f",
                "txt",
                "--grammar",
                grammar,
            ])
            .arg(jfk())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("and so my fellow americans"), "{text}");
        assert!(!text.contains(|c: char| c.is_ascii_uppercase()), "{text}");
    }
    sotto()
        .args([
            "transcribe",
            "--grammar",
            "root ::= (\"a\"",
            "--beam-size",
            "1",
        ])
        .arg(jfk())
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "grammar: line 1, column 14: expected `)`",
        ));
    sotto()
        .args(["transcribe", "--grammar-penalty", "10"])
        .arg(jfk())
        .assert()
        .failure()
        .stderr(predicate::str::contains("--grammar"));
}

/// A JSON value's shape: each object's keys in order with their values' shapes; an
/// array's, that of its first element (all elements must share it).
fn json_shape(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let fields: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}: {}", json_shape(v)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        serde_json::Value::Array(a) => {
            let shapes: Vec<String> = a.iter().map(json_shape).collect();
            assert!(shapes.windows(2).all(|w| w[0] == w[1]), "{v}");
            format!("[{}]", shapes.first().map_or("", String::as_str))
        }
        serde_json::Value::String(_) => "string".into(),
        serde_json::Value::Number(_) => "number".into(),
        serde_json::Value::Bool(_) => "bool".into(),
        serde_json::Value::Null => "null".into(),
    }
}

/// `-f cpp-json` and `cpp-json-full` write what whisper-cli 1.8.5 writes for `-oj` and
/// `-ojf` (tests/golden/wcpp_json_jfk.json, scripts/goldens/cpp-json.sh): the same keys in
/// the same order, the same model block, and, greedy, the same two segments.
#[test]
fn whisper_cpp_json_has_whisper_cli_s_shape() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            sotto_testdata::workspace_root().join("tests/golden/wcpp_json_jfk.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let model = sotto_testdata::model_dir("tiny.en");
    let dir = tempfile::tempdir().unwrap();
    for (format, kind) in [("cpp-json", "oj"), ("cpp-json-full", "ojf")] {
        let out = dir.path().join(format!("{kind}.json"));
        sotto()
            .args([
                "transcribe",
                "-t",
                "2",
                "--beam-size",
                "1",
                "-f",
                format,
                "-m",
            ])
            .arg(&model)
            .arg(jfk())
            .arg("-o")
            .arg(&out)
            .assert()
            .success();
        let ours: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let theirs = &golden[kind];
        assert_eq!(json_shape(&ours), json_shape(theirs), "{kind}");
        assert_eq!(ours["model"], theirs["model"]);
        assert_eq!(ours["result"], theirs["result"]);
        assert_eq!(ours["params"]["language"], theirs["params"]["language"]);
        let (a, b) = (
            ours["transcription"].as_array().unwrap(),
            theirs["transcription"].as_array().unwrap(),
        );
        assert_eq!(a.len(), b.len(), "{kind}");
        let text = |s: &serde_json::Value| normalise(s["text"].as_str().unwrap());
        for (s, t) in a.iter().zip(b) {
            assert_eq!(text(s), text(t));
            // Times agree to within the timestamp rules' differences (0.26 s here).
            for end in ["from", "to"] {
                let d = s["offsets"][end].as_i64().unwrap() - t["offsets"][end].as_i64().unwrap();
                assert!(d.abs() <= 600, "{kind}: {s}");
            }
        }
        if kind == "ojf" {
            for s in a {
                let toks = s["tokens"].as_array().unwrap();
                let joined: String = (toks.iter())
                    .map(|t| t["text"].as_str().unwrap())
                    .filter(|t| !t.starts_with("[_"))
                    .collect();
                assert_eq!(joined, s["text"].as_str().unwrap());
                let mut last_dtw = 0;
                for t in toks {
                    let (from, to) = (t["offsets"]["from"].as_i64(), t["offsets"]["to"].as_i64());
                    assert!(from <= to && to <= Some(11_000), "{t}");
                    assert!((0.0..=1.0).contains(&t["p"].as_f64().unwrap()), "{t}");
                    // Text tokens carry the alignment's time, in order, in 10 ms units.
                    let dtw = t["t_dtw"].as_i64().unwrap();
                    let special = t["text"].as_str().unwrap().starts_with("[_");
                    assert_eq!(dtw == -1, special, "{t}");
                    if !special {
                        assert!(dtw >= last_dtw && dtw <= 1100, "{t}");
                        last_dtw = dtw;
                    }
                }
            }
        }
    }
    // Both write .json: one folder cannot take both.
    sotto()
        .args(["transcribe", "-f", "json", "-f", "cpp-json", "-m"])
        .arg(&model)
        .arg(jfk())
        .arg("-o")
        .arg(dir.path())
        .assert()
        .failure()
        .stderr(predicate::str::contains("both write .json"));
}
