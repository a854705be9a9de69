//! `sotto serve` end to end: the binary listening on a free port, real clients' requests
//! (whisper.cpp's and OpenAI's fields), a real model and real audio, and bad requests.
#![cfg(feature = "server")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

mod common;
use common::{jfk, normalise, JFK};
use sotto_testdata::wav;

/// A running `sotto serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let model = sotto_testdata::model_dir("tiny.en");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sotto"))
            .env("SOTTO_CACHE_DIR", sotto_testdata::cache_dir())
            .args(["serve", "--port", "0", "-t", "1", "-m"])
            .arg(&model)
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("sotto serve starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut url = None;
        let mut seen = String::new();
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if let Some(i) = line.find("at http://") {
                url = Some(line[i + 3..].trim().to_string());
                break;
            }
        }
        let url = url.unwrap_or_else(|| panic!("no address in the server's output:\n{seen}"));
        let log = Arc::new(Mutex::new(seen));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Server { child, url, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(name, file name, bytes)` parts as a multipart body, with its `Content-Type`.
fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "sotto-test-boundary-7d1f";
    let mut body = Vec::new();
    for (name, file, data) in parts {
        let disposition = match file {
            Some(f) => format!("form-data; name=\"{name}\"; filename=\"{f}\""),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

struct Answer {
    status: u16,
    content_type: String,
    #[cfg_attr(not(unix), allow(dead_code))]
    retry_after: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: not JSON: {}", self.body))
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn answer(mut r: ureq::http::Response<ureq::Body>) -> Answer {
    let header = |n: &str| {
        r.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (status, content_type, retry_after) = (
        r.status().as_u16(),
        header("content-type").unwrap_or_default(),
        header("retry-after"),
    );
    let body = r.body_mut().read_to_string().unwrap();
    Answer {
        status,
        content_type,
        retry_after,
        body,
    }
}

fn post_raw(url: &str, content_type: &str, body: &[u8]) -> Answer {
    answer(
        agent()
            .post(url)
            .header("Content-Type", content_type)
            .send(body)
            .unwrap(),
    )
}

fn post(url: &str, parts: &[(&str, Option<&str>, &[u8])]) -> Answer {
    let (ct, body) = multipart(parts);
    post_raw(url, &ct, &body)
}

fn get(url: &str) -> Answer {
    answer(agent().get(url).call().unwrap())
}

#[test]
fn answers_whisper_cpp_and_openai_clients() {
    let audio = std::fs::read(jfk()).unwrap();
    let file = ("file", Some("jfk.wav"), audio.as_slice());
    let s = Server::start(&["--workers", "2"]);

    let health = get(&format!("{}/health", s.url)).json();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["workers"], 2);

    // whisper.cpp's curl example; the default answer is {"text": ...}.
    let a = post(
        &format!("{}/inference", s.url),
        &[
            file,
            ("temperature", None, b"0.0"),
            ("response-format", None, b"json"),
        ],
    );
    assert_eq!(
        (a.status, a.content_type.as_str()),
        (200, "application/json")
    );
    assert_eq!(normalise(a.json()["text"].as_str().unwrap()), JFK);

    let srt = post(
        &format!("{}/inference", s.url),
        &[file, ("response_format", None, b"srt")],
    );
    assert_eq!(srt.status, 200);
    assert!(srt.body.starts_with("1\n00:00:00,000 --> "), "{}", srt.body);

    // What phones and browsers record: Opus in Ogg, AAC in MP4.
    let fixtures = sotto_testdata::workspace_root().join("crates/sotto-audio/tests/fixtures");
    for name in ["jfk.opus", "jfk.m4a"] {
        let bytes = std::fs::read(fixtures.join(name)).unwrap();
        let a = post(
            &format!("{}/v1/audio/transcriptions", s.url),
            &[("file", Some(name), &bytes), ("model", None, b"whisper-1")],
        );
        assert_eq!(a.status, 200, "{name}: {}", a.body);
        assert_eq!(normalise(a.json()["text"].as_str().unwrap()), JFK, "{name}");
    }

    // OpenAI's client sends `model` and a repeated `timestamp_granularities[]`.
    let v = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[
            file,
            ("model", None, b"whisper-1"),
            ("response_format", None, b"verbose_json"),
            ("timestamp_granularities[]", None, b"word"),
            ("timestamp_granularities[]", None, b"segment"),
        ],
    )
    .json();
    assert_eq!(v["language"], "english");
    assert_eq!(v["task"], "transcribe");
    assert!((v["duration"].as_f64().unwrap() - 11.0).abs() < 0.1);
    assert_eq!(normalise(v["text"].as_str().unwrap()), JFK);
    let words = v["words"].as_array().unwrap();
    assert_eq!(words.len(), JFK.split(' ').count());
    assert!(words
        .windows(2)
        .all(|w| w[0]["end"].as_f64() <= w[1]["end"].as_f64()));
    assert!(v["segments"][0]["tokens"].as_array().unwrap().len() > 5);

    // faster-whisper-server's vad_filter: speech only, the original times.
    let v = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[
            file,
            ("vad_filter", None, b"true"),
            ("response_format", None, b"verbose_json"),
        ],
    )
    .json();
    assert_eq!(normalise(v["text"].as_str().unwrap()), JFK, "{v}");
    let text = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[file, ("response_format", None, b"text")],
    );
    assert!(text.content_type.starts_with("text/plain"));
    assert_eq!(normalise(&text.body), JFK);

    // A grammar per request (whisper.cpp's grammar sampling): lower case only; one that
    // does not parse is the client's fault.
    let lower = post(
        &format!("{}/inference", s.url),
        &[
            file,
            ("beam_size", None, b"1"),
            ("grammar", None, b"root ::= [^A-Z]*"),
        ],
    );
    let lower = lower.json()["text"].as_str().unwrap().to_string();
    assert_eq!(lower, lower.to_lowercase());
    assert_eq!(normalise(&lower), JFK);
    let e = post(
        &format!("{}/inference", s.url),
        &[file, ("grammar", None, b"root ::= colour")],
    );
    assert_eq!(e.status, 400, "{}", e.body);
    assert!(
        e.body.contains("`colour` is used but never defined"),
        "{}",
        e.body
    );

    // Two workers, two clients at once: each gets its own session and the same text.
    let texts: Vec<String> = std::thread::scope(|scope| {
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    post(
                        &format!("{}/inference", s.url),
                        &[file, ("beam_size", None, b"1")],
                    )
                    .json()["text"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    assert_eq!(normalise(&texts[0]), JFK);
    assert_eq!(texts[0], texts[1]);
    assert!(s.log().contains("jfk.wav: 11.0 s of audio"), "{}", s.log());
}

#[test]
fn bad_requests_get_clear_errors_and_the_server_keeps_serving() {
    let audio = std::fs::read(jfk()).unwrap();
    let file = ("file", Some("jfk.wav"), audio.as_slice());
    let s = Server::start(&["--max-upload-mb", "1", "--max-audio-minutes", "0.1"]);
    let clip = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let short = wav(&clip[..5 * 16_000]);
    let short = ("file", Some("short.wav"), short.as_slice());
    let inference = format!("{}/inference", s.url);
    let openai = format!("{}/v1/audio/transcriptions", s.url);

    let check = |a: Answer, status: u16, says: &str| {
        assert_eq!(a.status, status, "{}", a.body);
        let msg = a.json()["error"].as_str().unwrap().to_string();
        assert!(msg.contains(says), "{msg:?} does not say {says:?}");
    };
    check(
        post(&inference, &[("language", None, b"en")]),
        400,
        "no `file` field",
    );
    check(
        post(
            &inference,
            &[("file", Some("notes.txt"), b"not audio at all")],
        ),
        400,
        "not a supported audio file",
    );
    check(
        post(&inference, &[("file", Some("empty.wav"), b"")]),
        400,
        "no audio",
    );
    check(
        post(&inference, &[file, ("response_format", None, b"pdf")]),
        400,
        "response_format",
    );
    check(
        post(&inference, &[short, ("language", None, b"de")]),
        400,
        "English-only",
    );
    check(
        post_raw(&inference, "application/json", b"{}"),
        415,
        "multipart",
    );
    let (ct, body) = multipart(&[file]);
    check(
        post_raw(&inference, &ct, &body[..body.len() / 2]),
        400,
        "malformed multipart",
    );
    let big = vec![0u8; 3 << 20];
    check(
        post(&inference, &[("file", Some("big.wav"), &big)]),
        413,
        "larger than",
    );
    // jfk is 11 s; this server takes 6 s at most.
    let long = post(&inference, &[file]);
    check(long, 413, "longer than 6 s");
    check(get(&format!("{}/nope", s.url)), 404, "/nope");
    check(get(&inference), 405, "GET");
    check(
        post(
            &format!("{}/load", s.url),
            &[("model", None, b"/no/such/model")],
        ),
        400,
        "unknown model",
    );

    // OpenAI's error shape on its endpoints.
    let a = post(&openai, &[("model", None, b"whisper-1")]);
    assert_eq!(a.status, 400);
    let e = a.json();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(e["error"]["message"].as_str().unwrap().contains("file"));

    // After all that, the same server still transcribes (the first 5 s of jfk).
    let ok = post(&inference, &[short]);
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(normalise(ok.json()["text"].as_str().unwrap()).starts_with("and so my fellow"));
}

// SIGTERM needs a Unix; the rest of the server is tested on every platform.
#[cfg(unix)]
#[test]
fn a_full_queue_answers_503_and_shutdown_waits_for_work_in_flight() {
    use std::time::{Duration, Instant};
    let clip = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let long: Vec<f32> = (0..4).flat_map(|_| clip.iter().copied()).collect();
    let long = wav(&long);
    let short = std::fs::read(jfk()).unwrap();
    let mut s = Server::start(&["--workers", "1", "--queue", "0"]);
    let url = format!("{}/inference", s.url);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| {
            post(
                &url,
                &[("file", Some("long.wav"), &long), ("beam_size", None, b"1")],
            )
        });
        // The one worker holds the 44 s clip (seconds of work on one thread) when the
        // second request arrives; with no queue it is turned away at once.
        std::thread::sleep(Duration::from_millis(700));
        let busy = post(&url, &[("file", Some("jfk.wav"), &short)]);
        assert_eq!(busy.status, 503, "{}", busy.body);
        assert_eq!(busy.retry_after.as_deref(), Some("1"));
        assert!(busy.json()["error"].as_str().unwrap().contains("busy"));
        // SIGTERM while the first is still being transcribed: it gets its answer.
        let pid = libc::pid_t::try_from(s.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let first = first.join().unwrap();
        assert_eq!(first.status, 200, "{}", first.body);
        assert!(normalise(first.json()["text"].as_str().unwrap()).starts_with(JFK));
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop: {}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}: {}", s.log());
    std::thread::sleep(Duration::from_millis(100));
    assert!(s.log().contains("sotto: stopped"), "{}", s.log());
}

#[test]
fn load_swaps_the_model_unless_refused() {
    let audio = std::fs::read(jfk()).unwrap();
    let base = sotto_testdata::model_dir("base");
    let s = Server::start(&[]);
    let a = post(
        &format!("{}/load", s.url),
        &[("model", None, base.to_str().unwrap().as_bytes())],
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let health = get(&format!("{}/health", s.url)).json();
    assert_eq!(health["model"], base.to_str().unwrap());
    // base is multilingual: the language can now be detected.
    let d = post(
        &format!("{}/inference", s.url),
        &[
            ("file", Some("jfk.wav"), &audio),
            ("detect_language", None, b"true"),
        ],
    )
    .json();
    assert_eq!(d["language"], "en", "{d}");
    assert_eq!(d["language_name"], "english");
    drop(s);

    let s = Server::start(&["--no-load"]);
    let a = post(&format!("{}/load", s.url), &[("model", None, b"base")]);
    assert_eq!(a.status, 403, "{}", a.body);
}

#[test]
fn a_vad_model_given_at_start_serves_whisper_cpp_vad_requests() {
    // A bad file stops the server before it listens, naming the file.
    let out = Command::new(env!("CARGO_BIN_EXE_sotto"))
        .env("SOTTO_CACHE_DIR", sotto_testdata::cache_dir())
        .args([
            "serve",
            "--port",
            "0",
            "--vad-model",
            "/no/such-vad.bin",
            "-m",
        ])
        .arg(sotto_testdata::model_dir("tiny.en"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/no/such-vad.bin"), "{err}");

    let Some(ggml) = sotto_testdata::silero_ggml() else {
        return;
    };
    let s = Server::start(&["--vad-model", ggml.to_str().unwrap()]);
    let audio = std::fs::read(jfk()).unwrap();
    let v = post(
        &format!("{}/inference", s.url),
        &[
            ("file", Some("jfk.wav"), &audio),
            ("vad", None, b"true"),
            ("vad_max_speech_duration_s", None, b"3"),
            ("response_format", None, b"verbose_json"),
        ],
    )
    .json();
    assert_eq!(normalise(v["text"].as_str().unwrap()), JFK, "{v}");
}

/// What `sotto transcribe -m tiny.en -t 1` with `args` writes for `file`.
fn cli_output(file: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_sotto"))
        .env("SOTTO_CACHE_DIR", sotto_testdata::cache_dir())
        .args(["transcribe", "-t", "1", "--no-progress", "-m"])
        .arg(sotto_testdata::model_dir("tiny.en"))
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `sotto transcribe -m tiny.en -t 1 -f json` with `args` on `file`: (start, text) per segment.
fn cli_segments(file: &std::path::Path, args: &[&str]) -> Vec<(f64, String)> {
    let json = cli_output(file, &[&["-f", "json"][..], args].concat());
    segments(&serde_json::from_slice(&json).unwrap())
}

fn segments(v: &serde_json::Value) -> Vec<(f64, String)> {
    let all = v["segments"].as_array().unwrap_or_else(|| panic!("{v}"));
    all.iter()
        .map(|s| {
            (
                s["start"].as_f64().unwrap(),
                s["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn batch_size_answers_as_sotto_transcribe_batch_size() {
    // jfk, 5 s of silence, jfk, 5 s, jfk: 43 s, speech in two chunks of at most 30 s.
    let one = sotto::audio::load_16k_mono(jfk().to_str().unwrap()).unwrap();
    let gap = vec![0.0f32; 5 * 16_000];
    let body = wav(&[&one[..], &gap, &one, &gap, &one].concat());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("three.wav");
    std::fs::write(&path, &body).unwrap();
    let file = ("file", Some("three.wav"), body.as_slice());
    let batched = cli_segments(&path, &["--batch-size", "4"]);
    let sequential = cli_segments(&path, &[]);
    // At the original audio's times: the speech alone is ~33 s, the last words start ~40 s.
    assert!(batched.iter().any(|s| s.0 > 36.0), "{batched:?}");
    assert_ne!(batched, sequential);

    // The server's --batch-size for requests without the field; a request's own batch_size
    // (the windows' text does not depend on it); 0 for one window at a time.
    let s = Server::start(&["--batch-size", "4"]);
    let url = format!("{}/v1/audio/transcriptions", s.url);
    let verbose = ("response_format", None, &b"verbose_json"[..]);
    let ask = |extra: &[(&str, Option<&str>, &[u8])]| {
        let a = post(&url, &[&[file, verbose][..], extra].concat());
        assert_eq!(a.status, 200, "{}", a.body);
        segments(&a.json())
    };
    assert_eq!(ask(&[]), batched);
    assert_eq!(ask(&[("batch_size", None, b"2")]), batched);
    assert_eq!(ask(&[("batch_size", None, b"0")]), sequential);

    // Clips are the chunks (no VAD); a bad batch and a non-zero first temperature are 400s.
    let c = post(
        &url,
        &[
            file,
            ("batch_size", None, b"2"),
            ("offset_t", None, b"32000"),
        ],
    );
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(normalise(c.json()["text"].as_str().unwrap()), JFK);
    let e = post(&url, &[file, ("batch_size", None, b"65")]);
    assert_eq!(e.status, 400);
    assert!(e.body.contains("batch_size"), "{}", e.body);
    let e = post(&url, &[file, ("temperature", None, b"0.4")]);
    assert_eq!(e.status, 400, "{}", e.body);
    assert!(e.body.contains("temperature"), "{}", e.body);
}

#[test]
fn diarize_labels_a_stereo_upload_as_sotto_transcribe_diarize() {
    let call = common::jfk_two_speakers();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("call.wav");
    std::fs::write(&path, &call).unwrap();
    let cli_txt = String::from_utf8(cli_output(&path, &["--diarize", "-f", "txt"])).unwrap();

    let s = Server::start(&[]);
    let url = format!("{}/inference", s.url);
    let file = ("file", Some("call.wav"), call.as_slice());
    let diarize = ("diarize", None, &b"true"[..]);
    let a = post(&url, &[file, diarize, ("response_format", None, b"text")]);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.body, cli_txt);
    assert!(a.body.starts_with("(speaker 0) And so"), "{}", a.body);
    let last = a.body.lines().last().unwrap();
    assert!(last.starts_with("(speaker 1) "), "{}", a.body);
    let v = post(
        &url,
        &[file, diarize, ("response_format", None, b"verbose_json")],
    )
    .json();
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs[0]["speaker"], "0", "{v}");
    assert_eq!(segs.last().unwrap()["speaker"], "1", "{v}");
    // Mono audio has no channels to tell apart: no labels; tinydiarize is refused.
    let mono = std::fs::read(jfk()).unwrap();
    let m = post(&url, &[("file", Some("jfk.wav"), &mono), diarize]).json();
    assert_eq!(normalise(m["text"].as_str().unwrap()), JFK);
    assert!(!m["text"].as_str().unwrap().contains("speaker"), "{m}");
    let e = post(&url, &[file, ("tinydiarize", None, b"true")]);
    assert_eq!(e.status, 400, "{}", e.body);
    assert!(e.body.contains("tinydiarize"), "{}", e.body);
}

#[test]
fn stream_true_answers_server_sent_events_as_segments_finish() {
    let s = Server::start(&[]);
    let audio = std::fs::read(jfk()).unwrap();
    let a = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[
            ("file", Some("jfk.wav"), &audio),
            ("stream", None, b"true"),
            ("beam_size", None, b"1"),
        ],
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(
        a.content_type.starts_with("text/event-stream"),
        "{}",
        a.content_type
    );
    let events: Vec<serde_json::Value> = a
        .body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("a data line")).unwrap())
        .collect();
    let (last, deltas) = events.split_last().unwrap();
    assert!(deltas.len() >= 2, "{events:?}");
    assert!(deltas.iter().all(|d| d["type"] == "transcript.text.delta"));
    assert_eq!(last["type"], "transcript.text.done");
    let joined: String = deltas
        .iter()
        .map(|d| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(joined.trim(), last["text"].as_str().unwrap());
    assert_eq!(normalise(&joined), JFK);
    // A failing job ends the stream with an error event; a bad field is a plain 400.
    let a = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[
            ("file", Some("jfk.wav"), &audio),
            ("stream", None, b"true"),
            ("language", None, b"de"),
        ],
    );
    assert!(
        a.body.contains("\"type\":\"error\"") && a.body.contains("English-only"),
        "{}",
        a.body
    );
    let a = post(
        &format!("{}/v1/audio/transcriptions", s.url),
        &[
            ("file", Some("jfk.wav"), &audio),
            ("stream", None, b"perhaps"),
        ],
    );
    assert_eq!(a.status, 400, "{}", a.body);
    // The in-flight count came back down: health says no request is running.
    let health = get(&format!("{}/health", s.url)).json();
    assert_eq!(health["status"], "ok", "{health}");
}
