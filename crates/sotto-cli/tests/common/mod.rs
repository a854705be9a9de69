//! What the binary's end-to-end tests share: the sample clip and how its text is compared.

use std::path::PathBuf;

/// `samples/jfk.wav`'s words, as [`normalise`] leaves them.
pub const JFK: &str = "and so my fellow americans ask not what your country can do for you ask what you can do for your country";

pub fn jfk() -> PathBuf {
    sotto_testdata::workspace_root().join("samples/jfk.wav")
}

/// Letters and spaces only, lower case.
pub fn normalise(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphanumeric() || c.is_whitespace())
        .collect::<String>()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
