use thiserror::Error;

/// Result with [`AudioError`] as the default error.
pub type Result<T, E = AudioError> = std::result::Result<T, E>;

/// Why audio could not be loaded. Each message is one line that starts with the input's name.
#[derive(Debug, Error)]
pub enum AudioError {
    /// The input could not be opened or read.
    #[error("{input}: cannot read: {source}")]
    Io {
        input: String,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not in a container/codec we decode (or not audio at all).
    #[error("{input}: not a supported audio file (wav, flac, mp3, ogg, opus, m4a/mp4, aac, ac3, dts, thd, webm/mkv, avi, flv, ts, aiff, caf, au, gsm, amr/awb/3gp, wma/asf, mpg/vob, mxf, dv, mp2, spx, dss, wv, tta)")]
    Unsupported { input: String },
    /// The container was read, but its audio is in a codec we do not decode.
    #[error("{input}: its audio codec is not supported: {detail}")]
    Codec { input: String, detail: String },
    /// The container was recognised but its data is malformed.
    #[error("{input}: corrupt audio data: {detail}")]
    Corrupt { input: String, detail: String },
    /// The input decoded to zero samples (includes a zero-byte input).
    #[error("{input}: contains no audio samples")]
    Empty { input: String },
    /// The input is larger than this crate is willing to hold in memory.
    #[error("{input}: too large: {detail}")]
    TooLarge { input: String, detail: String },
    /// The sample rate is zero or outside what the resampler handles.
    #[error("{input}: unsupported sample rate {rate} Hz (supported: {min}..={max} Hz)")]
    SampleRate {
        input: String,
        rate: u32,
        min: u32,
        max: u32,
    },
    /// The resampler refused its configuration or input.
    #[error("{input}: resampling failed: {detail}")]
    Resample { input: String, detail: String },
}

impl AudioError {
    /// Replaces the input name this error reports (used when a generic helper ran on a named input).
    pub fn with_input(mut self, name: &str) -> Self {
        match &mut self {
            AudioError::Io { input, .. }
            | AudioError::Unsupported { input }
            | AudioError::Codec { input, .. }
            | AudioError::Corrupt { input, .. }
            | AudioError::Empty { input }
            | AudioError::TooLarge { input, .. }
            | AudioError::SampleRate { input, .. }
            | AudioError::Resample { input, .. } => *input = name.to_string(),
        }
        self
    }
}
