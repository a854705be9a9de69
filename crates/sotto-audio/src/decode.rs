//! Decoding any supported file to mono f32 at its own sample rate (symphonia, and
//! rusty-opus for Opus: `opus.rs`).

use std::io::{Cursor, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::OnceLock;

use symphonia::core::audio::{SampleBuffer, SignalSpec};
use symphonia::core::codecs::{CodecRegistry, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::FormatOptions;
use symphonia::core::io::{MediaSource, MediaSourceStream};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::Hint;

use crate::mp4_edit::Edit;
use crate::{resample, AudioError, Result};

/// Most mono samples one input may decode to (2^30, 4 GiB of f32: over 18 h at 16 kHz).
/// Stops decompression bombs (FLAC can code silence in a few bytes per 65535 frames).
const MAX_SAMPLES: usize = 1 << 30;
/// Most bytes read into memory from a reader (stdin).
const MAX_INPUT_BYTES: u64 = 4 << 30;

/// Decoded audio, downmixed to mono at the input's own sample rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Mono samples (mean of the input channels), nominally in [-1, 1].
    pub samples: Vec<f32>,
    /// Sample rate of `samples`, in Hz (the input's rate).
    pub sample_rate: u32,
    /// Channel count of the input before downmixing.
    pub channels_in: u16,
    /// `samples.len() / sample_rate`, in seconds.
    pub duration_s: f64,
    /// The first two channels apart, at the input's rate, where the input has two or more
    /// and the caller asked for them ([`decode_file_keeping_stereo`]); None otherwise.
    pub stereo: Option<[Vec<f32>; 2]>,
}

/// 16 kHz audio: the mono mix, and the first two channels apart where they were asked for
/// and the input has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio16k {
    pub mono: Vec<f32>,
    pub stereo: Option<[Vec<f32>; 2]>,
}

/// Decodes an audio file (WAV, FLAC, MP3, Ogg Vorbis or Opus, AAC or ALAC in MP4, Opus or
/// Vorbis in WebM/Matroska, AIFF, CAF) to mono. Errors name the path.
pub fn decode_file(path: &Path) -> Result<Audio> {
    decode_file_with(path, false)
}

/// [`decode_file`], also keeping the first two channels apart ([`Audio::stereo`]).
pub fn decode_file_keeping_stereo(path: &Path) -> Result<Audio> {
    decode_file_with(path, true)
}

fn decode_file_with(path: &Path, keep_stereo: bool) -> Result<Audio> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| AudioError::Io {
        input: name.clone(),
        source,
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(1);
    if len == 0 {
        return Err(AudioError::Empty { input: name });
    }
    let hint = path.extension().and_then(|e| e.to_str());
    decode_source(Box::new(file), &name, hint, f64::INFINITY, keep_stereo)
}

/// Reads all of `r` into memory, then decodes it (for stdin, which cannot seek). Errors name
/// the input `stdin`. `hint` is an optional file extension (`"mp3"`) that helps probing.
pub fn decode_reader(r: impl Read, hint: Option<&str>) -> Result<Audio> {
    decode_reader_with(r, hint, false)
}

fn decode_reader_with(r: impl Read, hint: Option<&str>, keep_stereo: bool) -> Result<Audio> {
    let name = "stdin";
    let mut bytes = Vec::new();
    r.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| AudioError::Io {
            input: name.to_string(),
            source,
        })?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(AudioError::TooLarge {
            input: name.to_string(),
            detail: format!("more than {MAX_INPUT_BYTES} bytes"),
        });
    }
    decode_bytes_within(name, bytes, hint, f64::INFINITY, keep_stereo)
}

/// Decodes an in-memory file; `name` is what errors call it, `hint` an optional extension.
pub fn decode_bytes(name: &str, bytes: Vec<u8>, hint: Option<&str>) -> Result<Audio> {
    decode_bytes_within(name, bytes, hint, f64::INFINITY, false)
}

/// As [`decode_bytes`], refusing audio longer than `max_seconds` as soon as decoding
/// passes it (a server's bound on what one upload may cost in memory: a few bytes of FLAC
/// can code minutes of silence); `keep_stereo` keeps the first two channels apart too.
pub fn decode_bytes_within(
    name: &str,
    bytes: Vec<u8>,
    hint: Option<&str>,
    max_seconds: f64,
    keep_stereo: bool,
) -> Result<Audio> {
    if bytes.is_empty() {
        return Err(AudioError::Empty {
            input: name.to_string(),
        });
    }
    decode_source(
        Box::new(Cursor::new(bytes)),
        name,
        hint,
        max_seconds,
        keep_stereo,
    )
}

/// Decodes `path_or_dash` (`-` reads stdin) and resamples it to 16 kHz mono.
pub fn load_16k_mono(path_or_dash: &str) -> Result<Vec<f32>> {
    load_16k(path_or_dash, false).map(|a| a.mono)
}

/// Decodes `path_or_dash` (`-` reads stdin) and resamples it to 16 kHz: the mono mix, and
/// with `keep_stereo` the first two channels apart (where the input has two or more).
pub fn load_16k(path_or_dash: &str, keep_stereo: bool) -> Result<Audio16k> {
    let audio = if path_or_dash == "-" {
        decode_reader_with(std::io::stdin().lock(), None, keep_stereo)?
    } else {
        decode_file_with(Path::new(path_or_dash), keep_stereo)?
    };
    to_16k(audio).map_err(|e| e.with_input(path_or_dash))
}

/// `audio` resampled to 16 kHz, its channels too where it kept them.
pub fn to_16k(audio: Audio) -> Result<Audio16k> {
    let rate = audio.sample_rate;
    let stereo = match &audio.stereo {
        Some([l, r]) => Some([
            resample::resample_to_16k(l, rate)?,
            resample::resample_to_16k(r, rate)?,
        ]),
        None => None,
    };
    Ok(Audio16k {
        mono: resample::resample_to_16k(&audio.samples, rate)?,
        stereo,
    })
}

/// Decodes an in-memory file (`name` is what errors call it) and resamples it to 16 kHz
/// mono.
pub fn decode_bytes_16k_mono(name: &str, bytes: Vec<u8>) -> Result<Vec<f32>> {
    let audio = decode_bytes(name, bytes, None)?;
    to_16k(audio)
        .map(|a| a.mono)
        .map_err(|e| e.with_input(name))
}

/// Symphonia parsers are not proven panic-free on hostile bytes (a WAV header declaring a
/// 0 Hz rate trips an assertion in symphonia 0.5): a panic there becomes an error that
/// quotes it, and prints nothing on its own, as no other bad input does.
fn decode_source(
    src: Box<dyn MediaSource>,
    name: &str,
    hint: Option<&str>,
    max_seconds: f64,
    keep_stereo: bool,
) -> Result<Audio> {
    quiet_panics::install();
    let _quiet = quiet_panics::Scope::enter();
    match catch_unwind(AssertUnwindSafe(|| {
        decode_inner(src, name, hint, max_seconds, keep_stereo)
    })) {
        Ok(result) => result,
        Err(payload) => {
            let why = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .map(|s| s.lines().next().unwrap_or_default().to_string())
                .filter(|s| !s.is_empty());
            Err(corrupt(
                name,
                match why {
                    Some(why) => format!("the decoder failed on malformed data ({why})"),
                    None => "the decoder failed on malformed data".to_string(),
                },
            ))
        }
    }
}

/// A process-wide panic hook, installed once and chained to the one before it, that stays
/// silent for panics on a thread inside [`decode_source`] (caught there and reported as an
/// error) and hands every other panic to the previous hook.
mod quiet_panics {
    use std::cell::Cell;
    use std::sync::Once;

    thread_local! {
        static DEPTH: Cell<u32> = const { Cell::new(0) };
    }

    pub(super) fn install() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if DEPTH.with(Cell::get) == 0 {
                    previous(info);
                }
            }));
        });
    }

    /// This thread is decoding while the scope lives.
    pub(super) struct Scope;

    impl Scope {
        pub(super) fn enter() -> Scope {
            DEPTH.with(|d| d.set(d.get() + 1));
            Scope
        }
    }

    impl Drop for Scope {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get() - 1));
        }
    }
}

fn corrupt(name: &str, detail: impl Into<String>) -> AudioError {
    AudioError::Corrupt {
        input: name.to_string(),
        detail: detail.into(),
    }
}

fn decode_inner(
    mut src: Box<dyn MediaSource>,
    name: &str,
    ext: Option<&str>,
    max_seconds: f64,
    keep_stereo: bool,
) -> Result<Audio> {
    let edit = crate::mp4_edit::read_edit(&mut *src);
    let mss = MediaSourceStream::new(src, Default::default());
    let mut hint = Hint::new();
    if let Some(ext) = ext {
        hint.with_extension(ext);
    }
    // Gapless: trim encoder delay and padding (MP3 LAME tag, Ogg granules) so the length is
    // the source's.
    let format_options = FormatOptions {
        enable_gapless: true,
        ..Default::default()
    };
    let probed = symphonia::default::get_probe()
        .format(&hint, mss, &format_options, &MetadataOptions::default())
        .map_err(|e| probe_error(name, e))?;
    let mut format = probed.format;
    let track = format
        .tracks()
        .iter()
        .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        .ok_or_else(|| AudioError::Unsupported {
            input: name.to_string(),
        })?;
    let track_id = track.id;
    let mut decoder = codecs()
        .make(&track.codec_params, &DecoderOptions::default())
        .map_err(|_| AudioError::Unsupported {
            input: name.to_string(),
        })?;

    let mut mono = Mono {
        max_seconds,
        stereo: keep_stereo.then(Default::default),
        ..Mono::default()
    };
    // Reused while packets keep the same layout and fit.
    let mut buf: Option<(SampleBuffer<f32>, SignalSpec, usize)> = None;
    let mut first_error: Option<String> = None;
    loop {
        let packet = match format.next_packet() {
            Ok(p) => p,
            // End of stream, or a truncated tail: keep what decoded so far.
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(SymError::ResetRequired) => break,
            Err(SymError::IoError(source)) => {
                return Err(AudioError::Io {
                    input: name.to_string(),
                    source,
                })
            }
            Err(e) => {
                first_error.get_or_insert_with(|| e.to_string());
                break;
            }
        };
        if packet.track_id() != track_id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // A bad packet is skipped, as players do; the rest of the stream may be fine.
            Err(SymError::DecodeError(e)) => {
                first_error.get_or_insert_with(|| e.to_string());
                continue;
            }
            Err(SymError::IoError(e)) => {
                first_error.get_or_insert_with(|| e.to_string());
                continue;
            }
            Err(e) => {
                first_error.get_or_insert_with(|| e.to_string());
                break;
            }
        };
        if decoded.frames() == 0 {
            continue;
        }
        let spec = *decoded.spec();
        if spec.channels.count() == 0 {
            // SampleBuffer divides by the channel count.
            return Err(corrupt(name, "stream declares zero channels"));
        }
        let frames_cap = decoded.capacity();
        let fits = buf
            .as_ref()
            .is_some_and(|(_, s, cap)| *cap >= frames_cap && *s == spec);
        if !fits {
            buf = Some((SampleBuffer::new(frames_cap as u64, spec), spec, frames_cap));
        }
        let (b, _, _) = buf.as_mut().expect("buffer was just set");
        b.copy_interleaved_ref(decoded);
        mono.push(b.samples(), spec, name)?;
    }

    let Some(rate) = mono.rate else {
        return Err(match first_error {
            Some(e) => corrupt(name, format!("no packet could be decoded ({e})")),
            None => AudioError::Empty {
                input: name.to_string(),
            },
        });
    };
    if let Some(edit) = edit {
        mono.apply(edit, rate);
        if mono.samples.is_empty() {
            return Err(corrupt(name, "its edit list keeps none of the audio"));
        }
    }
    let duration_s = mono.samples.len() as f64 / f64::from(rate);
    Ok(Audio {
        samples: mono.samples,
        sample_rate: rate,
        channels_in: mono.channels,
        duration_s,
        stereo: mono.stereo.filter(|_| mono.channels >= 2),
    })
}

/// symphonia's decoders, and ours for Opus.
fn codecs() -> &'static CodecRegistry {
    static CODECS: OnceLock<CodecRegistry> = OnceLock::new();
    CODECS.get_or_init(|| {
        let mut registry = CodecRegistry::new();
        symphonia::default::register_enabled_codecs(&mut registry);
        registry.register_all::<crate::opus::OpusDecoder>();
        registry
    })
}

fn probe_error(name: &str, e: SymError) -> AudioError {
    match e {
        SymError::Unsupported(_) => AudioError::Unsupported {
            input: name.to_string(),
        },
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            corrupt(name, "truncated before the audio data")
        }
        SymError::IoError(source) => AudioError::Io {
            input: name.to_string(),
            source,
        },
        other => corrupt(name, other.to_string()),
    }
}

/// The mono signal being built, with the stream's rate and channel count (from the first
/// packet), and the longest it may grow.
#[derive(Default)]
struct Mono {
    samples: Vec<f32>,
    rate: Option<u32>,
    channels: u16,
    max_seconds: f64,
    /// The first two channels, when asked for.
    stereo: Option<[Vec<f32>; 2]>,
}

impl Mono {
    /// Keeps what an MP4 edit list plays (`mp4_edit.rs`): drops the encoder's priming and
    /// any padding after the edit's length.
    fn apply(&mut self, edit: Edit, rate: u32) {
        let at = |s: f64| (s * f64::from(rate)).round() as usize;
        let start = at(edit.start_s).min(self.samples.len());
        let end = edit
            .duration_s
            .map_or(usize::MAX, |d| start.saturating_add(at(d)));
        let channels = std::iter::once(&mut self.samples).chain(self.stereo.iter_mut().flatten());
        for v in channels {
            v.truncate(end);
            v.drain(..start.min(v.len()));
        }
    }

    fn push(&mut self, interleaved: &[f32], spec: SignalSpec, name: &str) -> Result<()> {
        let channels = spec.channels.count();
        if channels == 0 || spec.rate == 0 {
            return Err(corrupt(
                name,
                "stream declares zero channels or a 0 Hz rate",
            ));
        }
        match self.rate {
            None => {
                self.rate = Some(spec.rate);
                self.channels = u16::try_from(channels).unwrap_or(u16::MAX);
            }
            Some(r) if r != spec.rate => {
                return Err(corrupt(
                    name,
                    format!("sample rate changes mid-stream ({r} -> {} Hz)", spec.rate),
                ))
            }
            Some(_) => {}
        }
        let frames = interleaved.len() / channels;
        let seconds = (self.samples.len() + frames) as f64 / f64::from(spec.rate);
        if seconds > self.max_seconds {
            return Err(AudioError::TooLarge {
                input: name.to_string(),
                detail: format!("longer than {} s", self.max_seconds),
            });
        }
        if self.samples.len() + frames > MAX_SAMPLES {
            return Err(AudioError::TooLarge {
                input: name.to_string(),
                detail: format!("decodes to more than {MAX_SAMPLES} samples"),
            });
        }
        if let Some([l, r]) = self.stereo.as_mut() {
            // A mono packet counts on both sides, so the channels keep the mix's length.
            let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
            for f in interleaved.chunks_exact(channels) {
                l.push(finite(f[0]));
                r.push(finite(f[channels.min(2) - 1]));
            }
        }
        let start = self.samples.len();
        if channels == 1 {
            self.samples.extend_from_slice(interleaved);
        } else {
            let n = channels as f32;
            self.samples.extend(
                interleaved
                    .chunks_exact(channels)
                    .map(|f| f.iter().sum::<f32>() / n),
            );
        }
        // Float WAVs can carry NaN or infinity; downstream maths wants finite samples.
        for v in &mut self.samples[start..] {
            if !v.is_finite() {
                *v = 0.0;
            }
        }
        Ok(())
    }
}
