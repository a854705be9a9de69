//! Audio front end of sotto: decode audio files, bring them to 16 kHz mono, and compute
//! Whisper's log-mel spectrogram exactly as faster-whisper's `FeatureExtractor` does.
//!
//! ```no_run
//! let samples = sotto_audio::load_16k_mono("speech.flac")?;
//! let mel = sotto_audio::log_mel_spectrogram(&samples, 80, sotto_audio::HOP_LENGTH);
//! assert_eq!(mel.data.len(), mel.n_mels * mel.n_frames);
//! # Ok::<(), sotto_audio::AudioError>(())
//! ```

mod aac;
mod ac3;
mod adpcm_swf;
mod adpcm_yamaha;
mod aifc;
mod amr;
mod asf;
mod au;
mod avi;
mod caf;
mod codec;
mod decode;
mod demux;
pub mod diarize;
mod dss;
mod dts;
mod dv;
mod elementary;
mod error;
mod flac_meta;
mod flv;
mod g722;
mod g723;
mod g726;
mod g729;
mod gsm;
mod ima_qt;
mod long_wav;
mod mel;
mod mkv;
mod mlp;
mod mp2;
mod mp4_edit;
mod mxf;
mod nelly;
mod ogg_mend;
mod ogg_speex;
mod opus;
mod ps;
mod resample;
mod rf64;
mod speex;
mod ts;
mod ts_opus;
mod ts_pcm;
mod tta;
pub mod vad;
mod vorbis;
mod w64;
mod wavpack;
mod wma;

pub use decode::{
    decode_bytes, decode_bytes_16k_mono, decode_bytes_16k_within, decode_bytes_within, decode_file,
    decode_file_keeping_stereo, decode_reader, decode_stream_16k, load_16k, load_16k_mono, to_16k,
    Audio, Audio16k,
};
pub use error::{AudioError, Result};
pub use mel::{log_mel_spectrogram, mel_filters, Mel};
pub use resample::{resample_to_16k, Resampler16k};

/// Sample rate the Whisper models expect, in Hz.
pub const SAMPLE_RATE: u32 = 16000;
/// STFT window length in samples (25 ms).
pub const N_FFT: usize = 400;
/// STFT hop in samples (10 ms): one mel frame per hop.
pub const HOP_LENGTH: usize = 160;
/// Length of one model window, in seconds.
pub const CHUNK_LENGTH: usize = 30;
/// Samples in one 30 s window at 16 kHz.
pub const N_SAMPLES: usize = CHUNK_LENGTH * SAMPLE_RATE as usize;
/// Mel frames in one 30 s window.
pub const N_FRAMES: usize = N_SAMPLES / HOP_LENGTH;
