//! Temporary files and folders in the cache, removed unless committed.
//!
//! Everything in flight lives under a `.tmp-` name next to its final place, so a crash or a
//! failed download never leaves anything that `Hub::cached` would take for a model.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::HubError;

pub(crate) const TMP_PREFIX: &str = ".tmp-";

/// Staging entries older than this are leftovers of a killed process.
const STALE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A name no other fetch (in this or another process) uses at the same time.
pub(crate) fn unique_name(stem: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{stem}-{}-{nanos:x}-{n}", std::process::id())
}

/// A staging path that is deleted (file or folder) when dropped, unless `keep` was called.
pub(crate) struct Staged {
    path: PathBuf,
    armed: bool,
}

impl Staged {
    /// Creates an empty staging folder `<parent>/.tmp-<stem>-…`.
    pub fn dir(parent: &Path, stem: &str) -> Result<Self, HubError> {
        let path = parent.join(unique_name(stem));
        fs::create_dir(&path).map_err(|e| HubError::io(&path, e))?;
        Ok(Staged { path, armed: true })
    }

    /// Reserves `<parent>/.tmp-<stem>-…` for a file the caller creates.
    pub fn file(parent: &Path, stem: &str) -> Self {
        Staged {
            path: parent.join(unique_name(stem)),
            armed: true,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the staged entry to `dest`. If `dest` already exists (another fetch won the race),
    /// the staged copy is discarded and `Ok(false)` is returned.
    pub fn commit(mut self, dest: &Path) -> Result<bool, HubError> {
        if dest.exists() {
            return Ok(false);
        }
        match fs::rename(&self.path, dest) {
            Ok(()) => {
                self.armed = false;
                Ok(true)
            }
            // A folder rename onto a non-empty folder fails: someone else was faster.
            Err(_) if dest.exists() => Ok(false),
            Err(e) => Err(HubError::io(dest, e)),
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Best effort: a leftover is only disk space, never something that looks like a model.
        if self.path.is_dir() {
            let _ = fs::remove_dir_all(&self.path);
        } else {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Removes staging entries in `dir` left behind by processes that were killed long ago.
pub(crate) fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > STALE_AFTER);
        if old {
            let path = entry.path();
            let _ = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
        }
    }
}
