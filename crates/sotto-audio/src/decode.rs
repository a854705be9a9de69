//! Decoding any supported file to mono f32 at its own sample rate (symphonia, and
//! rusty-opus for Opus: `opus.rs`).

use std::io::{Cursor, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::OnceLock;
use std::thread::JoinHandle;

use symphonia::core::audio::{Channels, SampleBuffer, SignalSpec};
use symphonia::core::codecs::{CodecParameters, CodecRegistry, DecoderOptions, CODEC_TYPE_NULL};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::{FormatOptions, FormatReader};
use symphonia::core::io::{MediaSource, MediaSourceStream, ReadOnlySource};
use symphonia::core::meta::MetadataOptions;
use symphonia::core::probe::{Hint, Probe};

use crate::demux::OwnReader;
use crate::mp4_edit::Edit;
use crate::resample::{self, Resampler16k};
use crate::{AudioError, Result};

/// Most mono samples one input may decode to (2^30, 4 GiB of f32: over 18 h at 16 kHz),
/// at 16 kHz where resampled as it decodes (so a 48 kHz file may run as long as a 16 kHz
/// one), else at its own rate. Stops decompression bombs (FLAC can code silence in a few
/// bytes per 65535 frames).
const MAX_SAMPLES: usize = 1 << 30;
/// Most bytes read into memory from a reader (stdin).
const MAX_INPUT_BYTES: u64 = 4 << 30;

/// Decoded audio, downmixed to mono at the input's own sample rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Mono samples, nominally in [-1, 1]: the input's channels mixed as FFmpeg mixes them
    /// to mono (so as faster-whisper hears them; see `mono_weights` in `decode.rs`).
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

/// What to decode to: the input's rate or 16 kHz, its first two channels apart or not,
/// and the longest audio accepted.
#[derive(Clone, Copy)]
struct Want {
    to_16k: bool,
    keep_stereo: bool,
    max_seconds: f64,
}

impl Want {
    fn native(keep_stereo: bool, max_seconds: f64) -> Self {
        Self {
            to_16k: false,
            keep_stereo,
            max_seconds,
        }
    }

    fn at_16k(keep_stereo: bool, max_seconds: f64) -> Self {
        Self {
            to_16k: true,
            keep_stereo,
            max_seconds,
        }
    }
}

/// Decodes an audio file (WAV, FLAC, MP3, Ogg Vorbis or Opus, AAC or ALAC in MP4, Opus or
/// Vorbis in WebM/Matroska, AIFF, CAF) to mono. Errors name the path.
pub fn decode_file(path: &Path) -> Result<Audio> {
    decode_path(path, Want::native(false, f64::INFINITY)).map(Decoded::into_audio)
}

/// [`decode_file`], also keeping the first two channels apart ([`Audio::stereo`]).
pub fn decode_file_keeping_stereo(path: &Path) -> Result<Audio> {
    decode_path(path, Want::native(true, f64::INFINITY)).map(Decoded::into_audio)
}

fn decode_path(path: &Path, want: Want) -> Result<Decoded> {
    let name = path.display().to_string();
    let is_a_directory = || AudioError::Io {
        input: name.clone(),
        source: std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
    };
    let file = std::fs::File::open(path).map_err(|source| {
        // Windows refuses to open a folder at all ("Access denied"): say what it is.
        if path.is_dir() {
            return is_a_directory();
        }
        AudioError::Io {
            input: name.clone(),
            source,
        }
    })?;
    let meta = file.metadata().ok();
    if meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(is_a_directory());
    }
    let len = meta.map_or(1, |m| m.len());
    if len == 0 {
        return Err(AudioError::Empty { input: name });
    }
    let hint = path.extension().and_then(|e| e.to_str());
    decode_source(Box::new(file), &name, hint, want)
}

/// Reads all of `r` into memory, then decodes it (for stdin, which cannot seek). Errors name
/// the input `stdin`. `hint` is an optional file extension (`"mp3"`) that helps probing.
pub fn decode_reader(r: impl Read, hint: Option<&str>) -> Result<Audio> {
    decode_read(r, hint, Want::native(false, f64::INFINITY)).map(Decoded::into_audio)
}

fn decode_read(r: impl Read, hint: Option<&str>, want: Want) -> Result<Decoded> {
    let name = "stdin";
    let bytes = read_rest(r, Vec::new(), name)?;
    decode_memory(name, bytes, hint, want)
}

/// `bytes` followed by the rest of `r`, refused past [`MAX_INPUT_BYTES`] in all.
fn read_rest(r: impl Read, mut bytes: Vec<u8>, name: &str) -> Result<Vec<u8>> {
    let rest = (MAX_INPUT_BYTES + 1).saturating_sub(bytes.len() as u64);
    r.take(rest)
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
    Ok(bytes)
}

/// Decodes audio that `r` delivers front to back (a pipe, a socket: stdin for `-`), resampled
/// to 16 kHz as it arrives: WAV, FLAC and MP3, known by their first bytes, decode while `r`
/// still delivers, without holding its bytes; anything else is read whole first, up to
/// 4 GiB (MP4 may put its index last, and Ogg's end trim is on its last page, which
/// symphonia reads ahead for). Errors call the input `name`.
pub fn decode_stream_16k(
    mut r: impl Read + Send + Sync + 'static,
    name: &str,
    hint: Option<&str>,
    keep_stereo: bool,
) -> Result<Audio16k> {
    let want = Want::at_16k(keep_stereo, f64::INFINITY);
    let mut head = Vec::with_capacity(SNIFF);
    (&mut r)
        .take(SNIFF as u64)
        .read_to_end(&mut head)
        .map_err(|source| AudioError::Io {
            input: name.to_string(),
            source,
        })?;
    let whole_head = head.len() == SNIFF;
    if whole_head && (crate::avi::is_wav(&head) || crate::rf64::is_rf64(&head)) {
        // Far enough for a first `fmt ` chunk's format tag (and an extensible one's
        // sub-format): formats sotto decodes itself need the file whole.
        (&mut r)
            .take(WAV_SNIFF - SNIFF as u64)
            .read_to_end(&mut head)
            .map_err(|source| AudioError::Io {
                input: name.to_string(),
                source,
            })?;
    }
    let mends = crate::rf64::mends(&head);
    crate::rf64::patch(&mut head, &mends);
    if whole_head && read_front_to_back(&head) {
        // A WAV file says so, for its data past 4 GiB (FFmpeg's sizes to a pipe saturate).
        let hint = hint.or(crate::avi::is_wav(&head).then_some("wav"));
        let src: Box<dyn MediaSource> = match head.starts_with(b"fLaC") {
            true => Box::new(ReadOnlySource::new(crate::flac_meta::without_tags_reader(
                Cursor::new(head).chain(r),
            ))),
            false => Box::new(ReadOnlySource::new(Cursor::new(head).chain(r))),
        };
        return decode_source(src, name, hint, want).map(Decoded::into_16k);
    }
    let bytes = read_rest(r, head, name)?;
    decode_memory(name, bytes, hint, want).map(Decoded::into_16k)
}

/// Bytes read before choosing how to read the rest; for a WAV file, more.
const SNIFF: usize = 16;
const WAV_SNIFF: u64 = 64;

/// Whether a file starting with `head` is one symphonia decodes front to back, never
/// seeking, to what it decodes from the file: WAV in a format symphonia decodes (not AVI,
/// RIFF too, read whole; nor AC-3, DTS or GSM in WAV), FLAC, or MP3 (an ID3 tag or a frame
/// sync, which raw AAC's ADTS frames share; tested, they stream as well).
fn read_front_to_back(head: &[u8]) -> bool {
    let mp3_sync = head.len() >= 2 && head[0] == 0xFF && head[1] & 0xE0 == 0xE0;
    let wav = crate::avi::is_wav(head) && !crate::avi::coded_wav_head(head);
    wav || [&b"fLaC"[..], b"ID3"].iter().any(|m| head.starts_with(m)) || mp3_sync
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
    decode_memory(name, bytes, hint, Want::native(keep_stereo, max_seconds))
        .map(Decoded::into_audio)
}

/// As [`decode_bytes_within`], resampled to 16 kHz as it decodes (what [`to_16k`] of it
/// gives, without holding the input-rate signal).
pub fn decode_bytes_16k_within(
    name: &str,
    bytes: Vec<u8>,
    hint: Option<&str>,
    max_seconds: f64,
    keep_stereo: bool,
) -> Result<Audio16k> {
    decode_memory(name, bytes, hint, Want::at_16k(keep_stereo, max_seconds)).map(Decoded::into_16k)
}

fn decode_memory(name: &str, bytes: Vec<u8>, hint: Option<&str>, want: Want) -> Result<Decoded> {
    if bytes.is_empty() {
        return Err(AudioError::Empty {
            input: name.to_string(),
        });
    }
    decode_source(Box::new(Cursor::new(bytes)), name, hint, want)
}

/// Decodes `path_or_dash` (`-` reads stdin) and resamples it to 16 kHz mono.
pub fn load_16k_mono(path_or_dash: &str) -> Result<Vec<f32>> {
    load_16k(path_or_dash, false).map(|a| a.mono)
}

/// Decodes `path_or_dash` (`-` reads stdin) and resamples it to 16 kHz as it decodes: the
/// mono mix, and with `keep_stereo` the first two channels apart (where the input has two
/// or more).
pub fn load_16k(path_or_dash: &str, keep_stereo: bool) -> Result<Audio16k> {
    if path_or_dash == "-" {
        return decode_stream_16k(std::io::stdin(), "stdin", None, keep_stereo);
    }
    let want = Want::at_16k(keep_stereo, f64::INFINITY);
    decode_path(Path::new(path_or_dash), want).map(Decoded::into_16k)
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
    decode_bytes_16k_within(name, bytes, None, f64::INFINITY, false).map(|a| a.mono)
}

/// Symphonia parsers are not proven panic-free on hostile bytes (a WAV header declaring a
/// 0 Hz rate trips an assertion in symphonia 0.5): a panic there becomes an error that
/// quotes it, and prints nothing on its own, as no other bad input does.
fn decode_source(
    src: Box<dyn MediaSource>,
    name: &str,
    hint: Option<&str>,
    want: Want,
) -> Result<Decoded> {
    quiet_panics::install();
    let _quiet = quiet_panics::Scope::enter();
    // Extensions as Windows and recorders write them too (`CALL.G729`, `REC01.WAV`).
    let hint = hint.map(str::to_ascii_lowercase);
    let hint = hint.as_deref();
    match catch_unwind(AssertUnwindSafe(|| {
        decode_inner(src, name, hint, want, None)
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

/// Most frames a packet may claim: symphonia's decoders reserve room for a whole packet
/// (ALAC's frame length, a block of ADPCM's) as they start, so a damaged count (billions)
/// would abort the process for want of memory. Real files use 4096 at most (ALAC), some
/// 65536 (FLAC, WAV's ADPCM).
const MAX_PACKET_FRAMES: u64 = 1 << 20;

/// The frames a packet of `params` claims, where that is more than [`MAX_PACKET_FRAMES`].
fn oversized_frames(params: &CodecParameters) -> Option<u64> {
    let alac = match params.extra_data.as_deref() {
        Some(cookie) if params.codec == symphonia::core::codecs::CODEC_TYPE_ALAC => cookie
            .get(..4)
            .map(|b| u64::from(u32::from_be_bytes(b.try_into().unwrap()))),
        _ => None,
    };
    [alac, params.max_frames_per_packet, params.frames_per_block]
        .into_iter()
        .flatten()
        .find(|&frames| frames > MAX_PACKET_FRAMES)
}

pub(crate) fn corrupt(name: &str, detail: impl Into<String>) -> AudioError {
    AudioError::Corrupt {
        input: name.to_string(),
        detail: detail.into(),
    }
}

/// Decodes `src` (hinted `ext`) as `want` asks. `edit` is an MP4 edit list's, for a WAV
/// file made of an MP4 track (which keeps the track's edit).
fn decode_inner(
    mut src: Box<dyn MediaSource>,
    name: &str,
    ext: Option<&str>,
    want: Want,
    edit: Option<Edit>,
) -> Result<Decoded> {
    // Tables whose damaged counts would have symphonia ask for more memory than there is
    // (which aborts, where an error should say so).
    let mut moov = crate::mp4_edit::read_moov(&mut *src);
    moov.edit = moov.edit.or(edit);
    if let Some(table) = moov.overlong_table {
        return Err(corrupt(
            name,
            format!("MP4 sample table `{table}` claims more entries than it holds"),
        ));
    }
    if let Some(what) = crate::caf::overlong_chunk(&mut *src) {
        return Err(corrupt(name, what));
    }
    if !moov.tags.is_empty() {
        let free = moov.tags.iter().map(|&at| (at, b"free".to_vec())).collect();
        src = crate::codec::patched(src, free);
    }
    let head = match src.is_seekable() {
        true => read_head(&mut *src),
        false => Vec::new(),
    };
    // Matroska keeps some tracks' channel counts and formats from symphonia (see `mkv.rs`).
    let mkv_tracks = match crate::mkv::is_matroska(&head) {
        true => crate::mkv::audio_tracks(&mut *src),
        false => Vec::new(),
    };
    // RF64, and WAV files whose recorder stopped before writing their sizes.
    let mends = crate::rf64::mends(&head);
    if !mends.is_empty() {
        src = Box::new(crate::rf64::Mended::new(src, mends));
    }
    // QuickTime's 8-bit PCM (its chunks, behind an AIFF-C header), Apple's GSM and
    // Nellymoser (their chunks' blocks, decoded as read).
    let mut ext = ext;
    let own =
        |e: &mut crate::mp4_edit::SoundEntry| e.is_pcm8() || matches!(&e.kind, b"agsm" | b"nmos");
    if let Some(entry) = moov.coded_track.take_if(own) {
        // Cut to the file, whatever the tables claim.
        let len = src.byte_len().unwrap_or(u64::MAX);
        let chunks: Vec<(u64, u64)> = (entry.chunks.clone().unwrap_or_default().into_iter())
            .map(|(at, n)| (at, n.min(len.saturating_sub(at))))
            .collect();
        let total = chunks.iter().map(|c| c.1).sum();
        if entry.is_pcm8() {
            let format = (b"NONE", 8);
            let aifc =
                crate::au::with_aifc_chunks(src, format, entry.channels, entry.rate, chunks, total);
            ext = Some(aifc.ext);
            src = Box::new(ReadOnlySource::new(aifc));
        } else {
            // GSM and Nellymoser take 1.6 to 2 kB a second: their blocks are gathered first.
            let mut blocks = Vec::new();
            crate::avi::AviAudio::with_header(src, Vec::new(), chunks, "blocks")
                .read_to_end(&mut blocks)
                .map_err(|source| AudioError::Io {
                    input: name.to_string(),
                    source,
                })?;
            let range = (0, blocks.len() as u64);
            let blocks = Box::new(Cursor::new(blocks));
            let rate = entry.rate;
            src = match &entry.kind {
                b"agsm" => {
                    let raw = crate::gsm::GsmBlocks::new(crate::gsm::Packing::Raw);
                    let pcm = crate::codec::DecodedWav::new(blocks, raw, range, rate);
                    Box::new(ReadOnlySource::new(pcm))
                }
                _ => {
                    let nelly = crate::nelly::Nelly::new();
                    let pcm = crate::codec::DecodedWav::new(blocks, nelly, range, rate);
                    Box::new(ReadOnlySource::new(pcm))
                }
            };
            ext = Some("wav");
        }
    }
    let crate::demux::Unwrapped {
        src,
        ext,
        reader,
        ima4,
    } = crate::demux::unwrap(src, &head, name, ext)?;
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
    // Readers of sotto's own, which no probe finds: what they refuse names the codec.
    let refused = |e: SymError| match e {
        SymError::Unsupported(what) => AudioError::Codec {
            input: name.to_string(),
            detail: what.into(),
        },
        e => probe_error(name, e, &head),
    };
    let mut format: Box<dyn symphonia::core::formats::FormatReader> =
        if crate::ogg_speex::is_ogg_speex(&head) {
            // Speex in Ogg, which symphonia's Ogg reader passes over.
            Box::new(crate::ogg_speex::OggSpeexReader::open(mss).map_err(&refused)?)
        } else if let OwnReader::WmaWav(fmt, data) = reader {
            Box::new(crate::wma::WavReader::open(mss, &fmt, data).map_err(&refused)?)
        } else if let OwnReader::Chunks(params, chunks) = reader {
            Box::new(crate::codec::ChunkReader::new(mss, params, chunks))
        } else if let OwnReader::OpusTs(config) = reader {
            Box::new(crate::ts_opus::OpusTsReader::open(mss, config).map_err(&refused)?)
        } else {
            probe()
                .format(&hint, mss, &format_options, &MetadataOptions::default())
                .map_err(|e| probe_error(name, e, &head))?
                .format
        };
    let tracks = format.tracks();
    // A packet read ahead to find the track (see `sniffed_track`), decoded first.
    let mut pending = None;
    // A track symphonia leaves without a codec that sotto decodes.
    let coded = moov.coded_track.as_ref().and_then(|entry| {
        tracks.iter().find(|t| t.id == entry.id)?;
        Some((entry.id, coded_track_params(entry)?))
    });
    // A Matroska track in a codec symphonia's reader leaves without one: Windows' (WMA),
    // ALAC (its magic cookie as the codec private data), 8-bit PCM, TTA or WavPack.
    let mkv_coded = || {
        mkv_tracks.iter().find_map(|t| {
            let track = tracks.iter().find(|k| u64::from(k.id) == t.number)?;
            let mut params = track.codec_params.clone();
            if let Some(acm) = t.private_of(b"A_MS/ACM") {
                // Vorbis and Speex: a block a packet, as their decoders need.
                if let Some(p) = crate::avi::packet_params(acm) {
                    return Some((track.id, p));
                }
                match crate::wma::Config::from_waveformatex(acm) {
                    Some(config) => params.for_codec(config.codec()),
                    None => {
                        let tag = crate::avi::format_tag(acm)?;
                        crate::avi::wav_tag_decoded(tag).then_some(())?;
                        params.for_codec(crate::avi::CODEC_TYPE_ACM)
                    }
                };
                params.with_extra_data(acm.into());
            } else if t.codec.starts_with(b"A_PCM/INT/") && t.bits == Some(8) {
                // 8-bit PCM, unsigned (as in WAV), which symphonia's reader leaves out.
                params
                    .for_codec(symphonia::core::codecs::CODEC_TYPE_PCM_U8)
                    .with_bits_per_sample(8)
                    .with_bits_per_coded_sample(8);
            } else if t.codec == b"A_TTA1" {
                // TTA's header is the track's fields (the decoder reads its format there).
                // Its length, from the segment's duration as FFmpeg takes it, tells the
                // last frame's.
                let rate = params.sample_rate?;
                let length = match (params.n_frames, params.time_base) {
                    (Some(n), Some(tb)) => {
                        let t = tb.calc_time(n);
                        ((t.seconds as f64 + t.frac) * f64::from(rate)).round() as u32
                    }
                    _ => 0,
                };
                let format = crate::tta::Format {
                    channels: u16::try_from(t.channels?).ok()?,
                    bits: u16::try_from(t.bits?).ok()?,
                    rate,
                    length,
                };
                params
                    .for_codec(crate::tta::CODEC_TYPE_TTA)
                    .with_extra_data(format.header().into());
            } else if t.codec == b"A_WAVPACK4" {
                // Its blocks' headers cut down to their flags and CRCs (the decoder reads
                // both forms).
                params.for_codec(crate::wavpack::CODEC_TYPE_WAVPACK);
            } else {
                let cookie = t.private_of(b"A_ALAC")?;
                params
                    .for_codec(symphonia::core::codecs::CODEC_TYPE_ALAC)
                    .with_extra_data(cookie.into());
            }
            Some((track.id, params))
        })
    };
    let (mut track_id, mut params) = match coded.or_else(mkv_coded).or_else(|| {
        tracks
            .iter()
            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
            .map(|t| (t.id, t.codec_params.clone()))
    }) {
        Some(found) => found,
        None => match sniffed_track(&mut *format, moov.sound) {
            Some((track_id, params, packet)) => {
                pending = Some(packet);
                (track_id, params)
            }
            None => {
                // What the file says its audio is, for the error to name.
                let named = match (mkv_tracks.first(), moov.sound_entry) {
                    (Some(t), _) => Some(t.codec_name()),
                    // QuickTime's `ms` entries carry a WAVE format tag.
                    (None, Some([b'm', b's', hi, lo])) => Some(format!(
                        "QuickTime sample entry 'ms' (WAVE format {:#06x})",
                        u16::from_be_bytes([hi, lo])
                    )),
                    (None, Some(kind)) => Some(format!("MP4 sample entry '{}'", fourcc(kind))),
                    (None, None) => None,
                };
                return Err(no_track(name, format.tracks(), moov.sound, named));
            }
        },
    };
    if params.channels.is_none() && params.channel_layout.is_none() {
        let count = mkv_tracks.iter().find(|t| t.number == u64::from(track_id));
        if let Some(channels) = count.and_then(|t| first_channels(t.channels?)) {
            params.with_channels(channels);
        }
    }
    if params.codec == symphonia::core::codecs::CODEC_TYPE_ADPCM_IMA_WAV && ima4 {
        params.for_codec(crate::ima_qt::CODEC_TYPE_IMA_QT);
    }
    if params.codec == symphonia::core::codecs::CODEC_TYPE_ALAC {
        if let Some(config) = params.extra_data.as_deref().and_then(alac_config) {
            params.with_extra_data(config.into());
        }
    }
    // Opus in MP4: symphonia hands on the `dOps` box (big-endian) behind the `OpusHead`
    // magic; and the edit list, when there is one, already drops the pre-skip.
    if params.codec == symphonia::core::codecs::CODEC_TYPE_OPUS {
        let head = params.extra_data.as_deref();
        if let Some(head) = head.and_then(|h| crate::opus::head_from_dops(h, moov.edit.is_some())) {
            params.with_extra_data(head.into());
        }
    }
    // Vorbis in MP4 (FFmpeg's): the edit list's start is the first packet's length, whose
    // samples the decoder gives none of already.
    if params.codec == symphonia::core::codecs::CODEC_TYPE_VORBIS {
        if let Some(edit) = &mut moov.edit {
            edit.start_s = 0.0;
        }
    }
    // PCM in Matroska comes without a largest packet, which symphonia's PCM decoder sizes
    // its buffer by (and silently cuts longer packets to): made again for each larger one.
    let pcm_frame = pcm_frame_bytes(&params).filter(|_| params.max_frames_per_packet.is_none());
    if pcm_frame.is_some() {
        params.with_max_frames_per_packet(PCM_FRAMES);
    }
    // WAV data past 4 GiB (RF64's, and the WAV files made of Wave64, AVI, MXF and DV
    // audio), where symphonia's reader stops: read on as PCM frames.
    let wav_like = ext == Some("wav") || crate::avi::is_wav(&head) || crate::rf64::is_rf64(&head);
    if let Some(frame) = pcm_frame_bytes(&params).filter(|_| wav_like && pending.is_none()) {
        if crate::long_wav::saturated(&params, frame) {
            let data = crate::rf64::data_size(&head);
            let long =
                crate::long_wav::LongPcm::new(format.into_inner(), track_id, &params, frame, data);
            params = FormatReader::tracks(&long)[0].codec_params.clone();
            format = Box::new(long);
        }
    }
    // A track in a WAV format that only its WAVEFORMATEX names: its packets, gathered,
    // decode as the WAV file they make.
    if params.codec == crate::avi::CODEC_TYPE_ACM {
        let fmt = params.extra_data.clone().unwrap_or_default();
        // An MP4 track's chunks where sotto reads them itself; else the reader's packets.
        let chunks = moov.coded_track.as_ref().and_then(|t| t.chunks.as_deref());
        let wav = match chunks {
            Some(chunks) => chunks_wav(format.into_inner(), &fmt, chunks),
            None => gather_track(&mut *format, track_id, pending).map(|data| {
                let mut wav = crate::avi::wav_header(&fmt, data.len() as u64);
                wav.extend_from_slice(&data);
                wav
            }),
        };
        let wav = wav.map_err(|e| match e {
            SymError::IoError(source) => AudioError::Io {
                input: name.to_string(),
                source,
            },
            e => corrupt(name, e.to_string()),
        })?;
        let wav = Box::new(Cursor::new(wav));
        return decode_inner(wav, name, Some("wav"), want, moov.edit);
    }
    let make = |params: &CodecParameters| {
        if let Some(frames) = oversized_frames(params) {
            return Err(corrupt(name, format!("packets of {frames} frames claimed")));
        }
        codecs()
            .make(params, &DecoderOptions::default())
            .map_err(|e| match e {
                // A decoder we have, refusing this stream's configuration: say what.
                SymError::Unsupported(what) if codecs().get_codec(params.codec).is_some() => {
                    AudioError::Codec {
                        input: name.to_string(),
                        detail: what.to_string(),
                    }
                }
                SymError::DecodeError(what) => corrupt(name, what),
                _ => AudioError::Unsupported {
                    input: name.to_string(),
                },
            })
    };
    let mut decoder = make(&params)?;

    let mut mono = Mono::new(want, moov.edit);
    // The encoder's padding after the end of a Matroska track's audio.
    mono.end_padding_ns = mkv_tracks
        .iter()
        .find(|t| t.number == u64::from(track_id))
        .and_then(|t| t.end_padding_ns);
    // MP3's gapless end (its LAME tag's padding) is dropped where the stream ends where the
    // tag says it does: symphonia's reader trims every frame past that length, so MP3 files
    // joined end to end (`cat a.mp3 b.mp3`) lost all but the first, unsaid.
    let mp3_end = match (params.codec, params.padding, params.n_frames) {
        (symphonia::core::codecs::CODEC_TYPE_MP3, Some(padding), Some(frames)) => {
            Some((u64::from(padding), frames + u64::from(padding)))
        }
        _ => None,
    };
    mono.mp3_end = mp3_end;
    // PCM's channel positions are a guess from their count (a WAV without a channel mask,
    // Matroska), which FFmpeg makes otherwise.
    mono.unlabelled = pcm_frame_bytes(&params).is_some()
        || matches!(
            params.codec,
            symphonia::core::codecs::CODEC_TYPE_ADPCM_MS
                | symphonia::core::codecs::CODEC_TYPE_ADPCM_IMA_WAV
        );
    // Reused while packets keep the same layout and fit.
    let mut buf: Option<(SampleBuffer<f32>, SignalSpec, usize)> = None;
    let mut first_error: Option<String> = None;
    loop {
        let next = match pending.take() {
            Some(p) => Ok(p),
            None => format.next_packet(),
        };
        let mut packet = match next {
            Ok(p) => p,
            // End of stream, or a truncated tail: keep what decoded so far.
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            // A chained Ogg file's next link (a radio recording's next song, voice messages
            // put end to end): its own stream, decoded on by a new decoder (a rate that
            // changes is followed at 16 kHz, and an error at the stream's rate: `Mono`).
            Err(SymError::ResetRequired) => {
                let tracks = format.tracks();
                let next = tracks
                    .iter()
                    .find(|t| t.codec_params.codec == params.codec)
                    .or_else(|| {
                        tracks
                            .iter()
                            .find(|t| t.codec_params.codec != CODEC_TYPE_NULL)
                    })
                    .map(|t| (t.id, t.codec_params.clone()));
                match next {
                    Some((id, next)) => {
                        (track_id, params) = (id, next);
                        decoder = make(&params)?;
                        continue;
                    }
                    None => break,
                }
            }
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
        if mp3_end.is_some() {
            packet.trim_end = 0;
        }
        if let Some(frame) = pcm_frame {
            let frames = packet.data.len().div_ceil(frame) as u64;
            if params
                .max_frames_per_packet
                .is_some_and(|most| frames > most)
            {
                params.with_max_frames_per_packet(frames.next_power_of_two());
                decoder = make(&params)?;
            }
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
            // A coding tool the decoder lacks (E-AC-3's adaptive hybrid transform, say):
            // an error wherever it comes, lest the rest of the stream be dropped unsaid.
            Err(SymError::Unsupported(what)) => {
                return Err(AudioError::Codec {
                    input: name.to_string(),
                    detail: what.to_string(),
                })
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

    // A decoder that holds samples back (WMA's last overlap) gives them for an empty packet.
    if crate::wma::holds_back(params.codec) {
        let end = symphonia::core::formats::Packet::new_from_slice(track_id, 0, 0, &[]);
        if let Ok(decoded) = decoder.decode(&end) {
            if decoded.frames() > 0 {
                let spec = *decoded.spec();
                let mut b = SampleBuffer::new(decoded.capacity() as u64, spec);
                b.copy_interleaved_ref(decoded);
                mono.push(b.samples(), spec, name)?;
            }
        }
    }
    mono.finish(name, first_error)
}

/// The WAV file (format `fmt`) of `chunks` ((offset, length) in `src`), read as AVI's
/// chunks are (a chunk cut short by the file's end gives what is there, and ends them).
/// Chunks that claim more bytes in all than the file has (a damaged table) are an error.
fn chunks_wav(
    src: MediaSourceStream,
    fmt: &[u8],
    chunks: &[(u64, u64)],
) -> std::result::Result<Vec<u8>, SymError> {
    let total = chunks.iter().map(|c| c.1).fold(0u64, u64::saturating_add);
    if total > src.byte_len().unwrap_or(u64::MAX) {
        return Err(SymError::DecodeError(
            "mp4: the sound track's chunks claim more bytes than the file has",
        ));
    }
    let header = crate::avi::wav_header(fmt, total);
    let mut wav = Vec::new();
    crate::avi::AviAudio::with_header(Box::new(src), header, chunks.to_vec(), "wav")
        .read_to_end(&mut wav)?;
    Ok(wav)
}

/// The bytes of every packet of track `id` (after `pending`, a packet read ahead), to the
/// end of the stream; an error only where nothing was read.
fn gather_track(
    format: &mut dyn FormatReader,
    id: u32,
    pending: Option<symphonia::core::formats::Packet>,
) -> std::result::Result<Vec<u8>, SymError> {
    let mut data = pending.map(|p| p.data.to_vec()).unwrap_or_default();
    loop {
        match format.next_packet() {
            Ok(p) if p.track_id() == id => data.extend_from_slice(&p.data),
            Ok(_) => {}
            Err(SymError::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(_) if !data.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(data)
}

/// The first `n` channel positions (1 to 32), for a count that comes with no layout.
pub(crate) fn first_channels(n: u64) -> Option<Channels> {
    (1..=32)
        .contains(&n)
        .then(|| Channels::from_bits_truncate((u64::MAX >> (64 - n)) as u32))
}

/// The codec parameters of an MP4 sound track whose entry symphonia leaves without a codec.
fn coded_track_params(entry: &crate::mp4_edit::SoundEntry) -> Option<CodecParameters> {
    use crate::amr::{CODEC_TYPE_AMRNB, CODEC_TYPE_AMRWB, RATE, RATE_WB};
    use symphonia::core::codecs::{CODEC_TYPE_PCM_ALAW, CODEC_TYPE_PCM_MULAW};
    let codec = match &entry.kind {
        b"sawb" => return Some(crate::elementary::amr_params(CODEC_TYPE_AMRWB, RATE_WB)),
        b"samr" => return Some(crate::elementary::amr_params(CODEC_TYPE_AMRNB, RATE)),
        b"ulaw" => CODEC_TYPE_PCM_MULAW,
        b"alaw" => CODEC_TYPE_PCM_ALAW,
        b".mp2" => symphonia::core::codecs::CODEC_TYPE_MP2,
        b"alac" => symphonia::core::codecs::CODEC_TYPE_ALAC,
        b"mp4a" | b"msVo" => symphonia::core::codecs::CODEC_TYPE_VORBIS,
        b"spex" => crate::speex::CODEC_TYPE_SPEEX,
        [b'm', b's', ..] => crate::avi::CODEC_TYPE_ACM,
        _ => crate::ima_qt::CODEC_TYPE_IMA_QT,
    };
    let mut params = CodecParameters::new();
    params
        .for_codec(codec)
        .with_sample_rate(entry.rate)
        .with_channels(first_channels(u64::from(entry.channels))?);
    if let Some(config) = &entry.config {
        params.with_extra_data(config.clone().into_boxed_slice());
    }
    Some(params)
}

/// Packets read ahead, at most, for an AC-3, DTS or TrueHD track's first frame.
const SNIFF_PACKETS: usize = 64;

/// The AC-3, DTS or TrueHD track of a Matroska or MP4 file, which symphonia's readers
/// leave without a codec (`A_AC3`, `A_DTS`, `A_TRUEHD`, `ac-3`, `dtsc`, `mlpa`): a sound
/// track whose first packet is an AC-3 syncframe, a DTS frame or a TrueHD (or MLP) access
/// unit with a major sync. With its codec parameters (from that header) and that packet,
/// which is read ahead.
fn sniffed_track(
    format: &mut dyn symphonia::core::formats::FormatReader,
    sound: bool,
) -> Option<(u32, CodecParameters, symphonia::core::formats::Packet)> {
    let audio = |p: &CodecParameters| sound || p.sample_rate.is_some() || p.channels.is_some();
    if !format.tracks().iter().any(|t| audio(&t.codec_params)) {
        return None;
    }
    for _ in 0..SNIFF_PACKETS {
        let packet = format.next_packet().ok()?;
        let Some(track) = format.tracks().iter().find(|t| t.id == packet.track_id()) else {
            continue;
        };
        if !audio(&track.codec_params) {
            continue;
        }
        let mut params = track.codec_params.clone();
        if let Some(h) = crate::ac3::Header::parse(&packet.data) {
            if packet.data.len() < h.len {
                continue;
            }
            params
                .for_codec(crate::ac3::CODEC_TYPE_AC3)
                .with_sample_rate(h.rate)
                .with_channels(h.channels());
        } else if let Some(h) = crate::dts::Header::parse(&packet.data) {
            params.for_codec(crate::dts::CODEC_TYPE_DTS);
            if let (Some(rate), Some(channels)) = (h.rate(), h.channels()) {
                params.with_sample_rate(rate).with_channels(channels);
            }
        } else if let Some((_, sync)) = crate::mlp::sync_unit(&packet.data) {
            params
                .for_codec(crate::mlp::CODEC_TYPE_TRUEHD)
                .with_sample_rate(sync.rate)
                .with_channels(sync.channels());
        } else {
            continue;
        }
        return Some((track.id, params, packet));
    }
    None
}

/// Why a container that was read has no track to decode: its audio is in a codec symphonia
/// does not know (a track with a sample rate or channels, or an MP4 sound track: DTS...),
/// which `named` names where the file says what it is, it holds video alone, or nothing
/// was recognised at all.
fn no_track(
    name: &str,
    tracks: &[symphonia::core::formats::Track],
    sound: bool,
    named: Option<String>,
) -> AudioError {
    let input = name.to_string();
    let audio = |t: &symphonia::core::formats::Track| {
        let p = &t.codec_params;
        p.sample_rate.is_some() || p.channels.is_some() || p.channel_layout.is_some()
    };
    if sound || tracks.iter().any(audio) {
        AudioError::Codec {
            input,
            detail: match named {
                Some(named) => format!("{named}, a codec sotto does not decode"),
                None => "a codec sotto does not decode".into(),
            },
        }
    } else if tracks.is_empty() {
        AudioError::Unsupported { input }
    } else {
        AudioError::Empty { input }
    }
}

/// A four-character code as it reads: its letters, and `\xNN` for any other byte.
fn fourcc(kind: [u8; 4]) -> String {
    kind.iter()
        .map(|&b| match b {
            b' '..=b'~' => char::from(b).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect()
}

/// The 24-byte ALACSpecificConfig of an ALAC magic cookie that wraps it in `frma` and
/// `alac` atoms, as FFmpeg's CAF files (and some of Apple's) hold it, where symphonia's
/// decoder takes the bare config alone; None for a bare one.
fn alac_config(cookie: &[u8]) -> Option<Vec<u8>> {
    let mut rest = cookie;
    let mut unwrapped = false;
    if rest.get(4..8) == Some(b"frma") {
        rest = rest.get(12..)?;
        unwrapped = true;
    }
    if rest.get(4..8) == Some(b"alac") {
        rest = rest.get(12..)?;
        unwrapped = true;
    }
    unwrapped.then(|| rest.get(..24).map(<[u8]>::to_vec))?
}

/// Frames a PCM decoder made for a stream that names no largest packet holds at first.
const PCM_FRAMES: u64 = 4096;

/// Bytes of one interleaved frame of a PCM stream; None for other codecs, or where the
/// channels are unknown.
fn pcm_frame_bytes(params: &CodecParameters) -> Option<usize> {
    use symphonia::core::codecs::*;
    let bytes = match params.codec {
        CODEC_TYPE_PCM_S8 | CODEC_TYPE_PCM_U8 | CODEC_TYPE_PCM_ALAW | CODEC_TYPE_PCM_MULAW => 1,
        CODEC_TYPE_PCM_S16LE | CODEC_TYPE_PCM_S16BE | CODEC_TYPE_PCM_U16LE
        | CODEC_TYPE_PCM_U16BE => 2,
        CODEC_TYPE_PCM_S24LE | CODEC_TYPE_PCM_S24BE | CODEC_TYPE_PCM_U24LE
        | CODEC_TYPE_PCM_U24BE => 3,
        CODEC_TYPE_PCM_S32LE | CODEC_TYPE_PCM_S32BE | CODEC_TYPE_PCM_U32LE
        | CODEC_TYPE_PCM_U32BE | CODEC_TYPE_PCM_F32LE | CODEC_TYPE_PCM_F32BE => 4,
        CODEC_TYPE_PCM_F64LE | CODEC_TYPE_PCM_F64BE => 8,
        _ => return None,
    };
    let channels = match (params.channels, params.channel_layout) {
        (Some(c), _) => c.count(),
        (None, Some(layout)) => layout.into_channels().count(),
        (None, None) => return None,
    };
    Some(bytes * channels.max(1))
}

/// The first bytes of `src` that tell its container (fewer where it is shorter: enough
/// for three transport stream packets); leaves `src` at its start.
fn read_head(src: &mut dyn MediaSource) -> Vec<u8> {
    let mut head = Vec::with_capacity(crate::ts::SNIFF);
    let _ = src.take(crate::ts::SNIFF as u64).read_to_end(&mut head);
    match src.seek(std::io::SeekFrom::Start(0)) {
        Ok(_) => head,
        Err(_) => Vec::new(),
    }
}

/// symphonia's container readers, behind ours for AAC's elementary streams (registered
/// first, so that ADTS frames, whose marker symphonia's reader shares, come to ours).
fn probe() -> &'static Probe {
    use crate::elementary::{Ac3, Adts, Amr, AmrWb, Dts, FrameReader, Loas, Mp2, Thd};
    static PROBE: OnceLock<Probe> = OnceLock::new();
    PROBE.get_or_init(|| {
        let mut probe = Probe::default();
        probe.register_all::<FrameReader<Adts>>();
        probe.register_all::<FrameReader<Loas>>();
        probe.register_all::<FrameReader<Ac3>>();
        probe.register_all::<FrameReader<Dts>>();
        probe.register_all::<FrameReader<Thd>>();
        probe.register_all::<FrameReader<Amr>>();
        probe.register_all::<FrameReader<AmrWb>>();
        probe.register_all::<crate::asf::AsfReader>();
        probe.register_all::<crate::wavpack::WvReader>();
        probe.register_all::<crate::tta::TtaReader>();
        // Before symphonia's MPEG audio reader, which refuses some Layer II bitrates.
        probe.register_all::<FrameReader<Mp2>>();
        symphonia::default::register_enabled_formats(&mut probe);
        probe
    })
}

/// symphonia's decoders, and ours for Opus and AAC (in place of symphonia's, which takes
/// neither HE-AAC nor more than two channels).
fn codecs() -> &'static CodecRegistry {
    static CODECS: OnceLock<CodecRegistry> = OnceLock::new();
    CODECS.get_or_init(|| {
        let mut registry = CodecRegistry::new();
        symphonia::default::register_enabled_codecs(&mut registry);
        registry.register_all::<crate::opus::OpusDecoder>();
        registry.register_all::<crate::aac::AacDecoder>();
        registry.register_all::<crate::ac3::Ac3Decoder>();
        registry.register_all::<crate::dts::DtsDecoder>();
        registry.register_all::<crate::mlp::MlpDecoder>();
        registry.register_all::<crate::amr::AmrDecoder>();
        registry.register_all::<crate::ima_qt::ImaQtDecoder>();
        registry.register_all::<crate::wma::WmaDecoder>();
        registry.register_all::<crate::wavpack::WavPackDecoder>();
        registry.register_all::<crate::tta::TtaDecoder>();
        registry.register_all::<crate::speex::SpeexDecoder>();
        // In place of symphonia's, which refuses some bitrates for a channel mode.
        registry.register_all::<crate::mp2::Mp2Decoder>();
        registry.register_all::<crate::mp2::MpegAudioDecoder>();
        registry
    })
}

/// Why probing failed. Running out of bytes means a cut file only where the file starts as
/// one we read does (or its start is unknown, from a pipe): a format symphonia does not
/// know (WMA, say) can run a probe to its end chasing what looked like an MP3 frame.
fn probe_error(name: &str, e: SymError, head: &[u8]) -> AudioError {
    let unsupported = || AudioError::Unsupported {
        input: name.to_string(),
    };
    if let Some(what) = known_codec_refused(head) {
        return AudioError::Codec {
            input: name.to_string(),
            detail: what.into(),
        };
    }
    if crate::asf::is_asf(head) {
        match e {
            SymError::Unsupported(what) => {
                return AudioError::Codec {
                    input: name.to_string(),
                    detail: what.into(),
                }
            }
            SymError::DecodeError(what) => return corrupt(name, what),
            _ => {}
        }
    }
    // WAV (or AVI-less RIFF) whose format is one sotto lacks: say which.
    if let Some(tag) = wav_format_refused(head) {
        let known = match tag {
            0x00FF | 0x1600 | 0x1602 | 0x706D | 0x4143 | 0xA106 => "AAC",
            0x0162 => "WMA Pro",
            0x0163 => "WMA Lossless",
            0x000A => "WMA Voice",
            t if crate::vorbis::WAV_TAGS.contains(&t) => "Vorbis",
            crate::speex::WAV_TAG => "Speex",
            0x0270 => "ATRAC3",
            _ => "a format",
        };
        return AudioError::Codec {
            input: name.to_string(),
            detail: format!(
                "{known} in WAV (format tag {tag:#06x}; sotto decodes PCM, float, A-law, μ-law, \
                 ADPCM, Flash and Yamaha ADPCM, MPEG audio, AC-3, DTS, FLAC, GSM, G.722, \
                 G.723.1, G.726, G.729 and WMA there)"
            ),
        };
    }
    // CAF whose `desc` names a format symphonia lacks: say which.
    if let (SymError::Unsupported(_), Some(format)) = (&e, caf_format(head)) {
        return AudioError::Codec {
            input: name.to_string(),
            detail: format!(
                "{format} in CAF (sotto decodes PCM, A-law, μ-law, IMA 4:1, IMA and Microsoft \
                 ADPCM, AAC, ALAC, FLAC, MPEG audio, AC-3, GSM and Opus there)"
            ),
        };
    }
    match e {
        SymError::Unsupported(_) => unsupported(),
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            if head.is_empty() || known_start(head) {
                corrupt(name, "truncated before the audio data")
            } else {
                unsupported()
            }
        }
        SymError::IoError(source) => AudioError::Io {
            input: name.to_string(),
            source,
        },
        other => corrupt(name, other.to_string()),
    }
}

/// The format tag of a WAV file starting with `head` whose first chunk is its format, in
/// a format sotto does not decode.
fn wav_format_refused(head: &[u8]) -> Option<u16> {
    if !crate::avi::is_wav(head) || head.get(12..16) != Some(b"fmt ") {
        return None;
    }
    crate::avi::format_tag(head.get(20..)?).filter(|&t| !crate::avi::wav_tag_decoded(t))
}

/// Whether `head` starts as a file of a container sotto decodes does.
/// What a file that starts with `head` holds, where it is a format sotto knows but does
/// not decode (which would otherwise read as not audio, or as cut short).
fn known_codec_refused(head: &[u8]) -> Option<&'static str> {
    if crate::amr::MAGIC_MC
        .iter()
        .any(|magic| head.starts_with(magic))
    {
        return Some("multichannel AMR (sotto decodes mono AMR-NB and AMR-WB)");
    }
    None
}

/// A CAF file's format ID, from its `desc` chunk (the first, by the specification), as
/// it reads: four letters, or Microsoft's `ms` and a WAVE format tag.
fn caf_format(head: &[u8]) -> Option<String> {
    if !head.starts_with(b"caff") || head.get(8..12) != Some(b"desc") {
        return None;
    }
    let id = head.get(28..32)?;
    Some(match id {
        [b'm', b's', hi, lo] => format!("WAVE format {:#06x}", u16::from_be_bytes([*hi, *lo])),
        _ if id.iter().all(|b| b.is_ascii_graphic() || *b == b' ') => {
            format!("format '{}'", String::from_utf8_lossy(id))
        }
        _ => format!(
            "format {:#010x}",
            u32::from_be_bytes([id[0], id[1], id[2], id[3]])
        ),
    })
}

fn known_start(head: &[u8]) -> bool {
    const MAGIC: [&[u8]; 16] = [
        &crate::asf::HEADER,
        b"RIFF",
        b"RF64",
        b"BW64",
        b"fLaC",
        b"OggS",
        b"ID3",
        b"FORM",
        b"caff",
        b"wvpk",
        b"TTA1",
        b"#!AMR",
        b"FLV\x01",
        b"\x1a\x45\xdf\xa3", // EBML: Matroska, WebM
        b"\xff",             // an MPEG audio frame's sync
        b"\x0b\x77",         // an AC-3 syncframe's
    ];
    MAGIC.iter().any(|m| head.starts_with(m)) || head.get(4..8) == Some(b"ftyp")
}

/// Input frames per batch handed to the resampling thread (~0.3 s at 48 kHz).
const BATCH: usize = 16 * 1024;

/// Resamples the tracks to 16 kHz on a thread of its own, in batches, as they decode: on
/// two cores the decoder and the resampler run side by side, and the input-rate signal is
/// never held whole.
struct Resampling {
    batches: SyncSender<Vec<Vec<f32>>>,
    done: JoinHandle<Result<Vec<Vec<f32>>>>,
}

impl Resampling {
    /// One resampler per track (checked here, so that a bad rate fails at once).
    fn start(rate: u32, tracks: usize) -> Result<Self> {
        let mut resamplers = (0..tracks)
            .map(|_| Resampler16k::new(rate))
            .collect::<Result<Vec<_>>>()?;
        let (batches, rx) = sync_channel::<Vec<Vec<f32>>>(4);
        let done = std::thread::Builder::new()
            .name("sotto-resample".into())
            .spawn(move || {
                for batch in rx {
                    for (r, b) in resamplers.iter_mut().zip(&batch) {
                        r.push(b)?;
                    }
                }
                resamplers.into_iter().map(Resampler16k::finish).collect()
            })
            .map_err(|e| resample_failed(format!("cannot start its thread: {e}")))?;
        Ok(Self { batches, done })
    }

    /// Hands over a batch; an error where the thread has stopped on one.
    fn send(self, batch: Vec<Vec<f32>>) -> Result<Self> {
        match self.batches.send(batch) {
            Ok(()) => Ok(self),
            Err(_) => Err(self
                .finish()
                .err()
                .unwrap_or_else(|| resample_failed("its thread stopped early".to_string()))),
        }
    }

    fn finish(self) -> Result<Vec<Vec<f32>>> {
        drop(self.batches);
        self.done
            .join()
            .map_err(|_| resample_failed("its thread panicked".to_string()))?
    }
}

fn resample_failed(detail: String) -> AudioError {
    AudioError::Resample {
        input: "audio".to_string(),
        detail,
    }
}

/// The mono signal being built (and the first two channels, when asked for), with the
/// stream's rate and channel count from its first packet, the part of it an MP4 edit list
/// keeps, and the longest it may grow.
struct Mono {
    want: Want,
    edit: Option<Edit>,
    rate: Option<u32>,
    channels: u16,
    /// Input frames decoded so far.
    frames_in: usize,
    /// The input frames kept: `[start, end)`, from the edit list (all without one).
    keep: (usize, usize),
    /// Frames kept so far.
    kept: usize,
    /// Most input frames decoded (see [`MAX_SAMPLES`]).
    max_frames: usize,
    /// Whether the decoder's channel positions are only a guess from their count.
    unlabelled: bool,
    /// The encoder's padding after the audio's end (Matroska's `DiscardPadding`), and
    /// the frames it comes to: the last frames decoded, held back from the resampler and
    /// dropped at the end.
    end_padding_ns: Option<u64>,
    hold: usize,
    /// MP3's end padding (frames), dropped only where the frames decoded are as many as
    /// its LAME tag says (the second number).
    mp3_end: Option<(u64, u64)>,
    /// At 16 kHz, what the stream gave before its rate last changed (files of other rates
    /// joined end to end), and how long that ran.
    done: Vec<Vec<f32>>,
    done_s: f64,
    /// Each channel's weight in the mix, and the positions they were made for.
    weights: Vec<f32>,
    weighed: Option<Channels>,
    /// The mix, then the left and right channels where they are kept: all of them at the
    /// input's rate, or the batch not yet handed to `resampling`.
    tracks: Vec<Vec<f32>>,
    resampling: Option<Resampling>,
}

/// Each channel's weight in the mono mix, in the decoder's order (that of `channels`'
/// positions), as FFmpeg's resampler mixes a layout down to mono (measured through
/// faster-whisper's `decode_audio`): the centre at 1, the front left and right (and those
/// beside the centre) at √½, the LFE at 0 and every other channel (the surrounds) at ½,
/// scaled to sum to 1. So 5.1 is 0.293 centre, 0.207 each front, 0.146 each surround,
/// and stereo the mean. Where the positions are a guess from the count (`unlabelled`),
/// they are FFmpeg's guess instead: 2.1 for three channels, 4.0 for four, 5.0, 5.1, 6.1
/// and 7.1 for five to eight; more channels than FFmpeg guesses for, or none of them
/// weighed, are averaged.
fn mono_weights(channels: Channels, unlabelled: bool) -> Vec<f32> {
    use Channels as C;
    let n = channels.count();
    let guess = |bits: &[C]| bits.iter().fold(C::empty(), |a, &b| a | b);
    let surround5 = [
        C::FRONT_LEFT,
        C::FRONT_RIGHT,
        C::FRONT_CENTRE,
        C::REAR_LEFT,
        C::REAR_RIGHT,
    ];
    let positions = match (unlabelled, n) {
        (true, 3) => guess(&[C::FRONT_LEFT, C::FRONT_RIGHT, C::LFE1]),
        (true, 4) => guess(&[
            C::FRONT_LEFT,
            C::FRONT_RIGHT,
            C::FRONT_CENTRE,
            C::REAR_CENTRE,
        ]),
        (true, 5) => guess(&surround5),
        (true, 6) => guess(&surround5) | C::LFE1,
        (true, 7) => {
            guess(&surround5[..3]) | C::LFE1 | C::REAR_CENTRE | C::SIDE_LEFT | C::SIDE_RIGHT
        }
        (true, 8) => guess(&surround5) | C::LFE1 | C::SIDE_LEFT | C::SIDE_RIGHT,
        (true, 9..) => C::empty(),
        _ => channels,
    };
    let mut w: Vec<f32> = positions
        .iter()
        .map(|c| {
            if c == C::FRONT_CENTRE {
                1.0
            } else if c == C::LFE1 || c == C::LFE2 {
                0.0
            } else if [
                C::FRONT_LEFT,
                C::FRONT_RIGHT,
                C::FRONT_LEFT_CENTRE,
                C::FRONT_RIGHT_CENTRE,
            ]
            .contains(&c)
            {
                std::f32::consts::FRAC_1_SQRT_2
            } else {
                0.5
            }
        })
        .collect();
    let total: f32 = w.iter().sum();
    if w.len() != n || total <= 0.0 {
        return vec![1.0 / n as f32; n];
    }
    for v in &mut w {
        *v /= total;
    }
    w
}

/// What [`Mono`] decoded: the mix (and channels) at the input's rate, or at 16 kHz where
/// resampled.
struct Decoded {
    mono: Vec<f32>,
    stereo: Option<[Vec<f32>; 2]>,
    input_rate: u32,
    channels_in: u16,
}

impl Decoded {
    fn into_audio(self) -> Audio {
        let rate = self.input_rate;
        Audio {
            duration_s: self.mono.len() as f64 / f64::from(rate),
            samples: self.mono,
            sample_rate: rate,
            channels_in: self.channels_in,
            stereo: self.stereo,
        }
    }

    fn into_16k(self) -> Audio16k {
        Audio16k {
            mono: self.mono,
            stereo: self.stereo,
        }
    }
}

impl Mono {
    fn new(want: Want, edit: Option<Edit>) -> Self {
        Self {
            want,
            edit,
            rate: None,
            channels: 0,
            frames_in: 0,
            keep: (0, usize::MAX),
            kept: 0,
            max_frames: MAX_SAMPLES,
            unlabelled: false,
            end_padding_ns: None,
            hold: 0,
            mp3_end: None,
            done: Vec::new(),
            done_s: 0.0,
            weights: Vec::new(),
            weighed: None,
            tracks: Vec::new(),
            resampling: None,
        }
    }

    /// Sets the stream's layout from its first packet.
    fn start(&mut self, rate: u32, channels: usize, name: &str) -> Result<()> {
        self.rate = Some(rate);
        self.channels = u16::try_from(channels).unwrap_or(u16::MAX);
        if self.want.to_16k {
            let frames = MAX_SAMPLES as u64 * u64::from(rate) / u64::from(crate::SAMPLE_RATE);
            self.max_frames = usize::try_from(frames).unwrap_or(usize::MAX);
        }
        if let Some(edit) = self.edit {
            // What an MP4 edit list plays (`mp4_edit.rs`): no encoder priming, and no
            // padding after the edit's length.
            let at = |s: f64| (s * f64::from(rate)).round() as usize;
            let start = at(edit.start_s);
            let end = edit
                .duration_s
                .map_or(usize::MAX, |d| start.saturating_add(at(d)));
            self.keep = (start, end);
        }
        if let Some((padding, _)) = self.mp3_end {
            self.hold = usize::try_from(padding).unwrap_or(0).min(self.max_frames);
        }
        if let Some(ns) = self.end_padding_ns {
            // Rounded to the nearest frame, as FFmpeg does.
            let frames = (u128::from(ns) * u128::from(rate) + 500_000_000) / 1_000_000_000;
            self.hold = usize::try_from(frames)
                .unwrap_or(usize::MAX)
                .min(self.max_frames);
        }
        let tracks = if self.want.keep_stereo && channels >= 2 {
            3
        } else {
            1
        };
        self.tracks = vec![Vec::new(); tracks];
        if self.want.to_16k && rate != crate::SAMPLE_RATE {
            let r = Resampling::start(rate, tracks).map_err(|e| e.with_input(name))?;
            self.resampling = Some(r);
        }
        Ok(())
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
            None => self.start(spec.rate, channels, name)?,
            // Resampled to 16 kHz, a stream may change its rate (MP3 or Ogg files joined
            // end to end), as FFmpeg takes it; kept at its rate, it may not.
            Some(r) if r != spec.rate && self.want.to_16k && self.edit.is_none() => {
                self.restart(r, spec.rate, name)?
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
        let seconds = self.done_s + (self.frames_in + frames) as f64 / f64::from(spec.rate);
        if seconds > self.want.max_seconds {
            return Err(AudioError::TooLarge {
                input: name.to_string(),
                detail: format!("longer than {} s", self.want.max_seconds),
            });
        }
        if self.frames_in + frames > self.max_frames {
            let at = if self.want.to_16k { " at 16 kHz" } else { "" };
            return Err(AudioError::TooLarge {
                input: name.to_string(),
                detail: format!("decodes to more than {MAX_SAMPLES} samples{at}"),
            });
        }
        // The frames of this packet that the edit keeps.
        let (start, end) = self.keep;
        let lo = start.saturating_sub(self.frames_in).min(frames);
        let hi = end.saturating_sub(self.frames_in).min(frames);
        self.frames_in += frames;
        if lo >= hi {
            return Ok(());
        }
        let kept = &interleaved[lo * channels..hi * channels];
        self.kept += hi - lo;
        // Float WAVs can carry NaN or infinity; downstream maths wants finite samples.
        let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
        if let [_, l, r] = &mut self.tracks[..] {
            // A mono packet in a stereo stream counts on both sides.
            let right = channels.min(2) - 1;
            l.extend(kept.chunks_exact(channels).map(|f| finite(f[0])));
            r.extend(kept.chunks_exact(channels).map(|f| finite(f[right])));
        }
        if self.weighed != Some(spec.channels) {
            self.weights = mono_weights(spec.channels, self.unlabelled);
            self.weighed = Some(spec.channels);
        }
        let mix = &mut self.tracks[0];
        match &self.weights[..] {
            [_] => mix.extend(kept.iter().map(|&v| finite(v))),
            [a, b] => mix.extend(kept.chunks_exact(2).map(|f| finite(a * f[0] + b * f[1]))),
            w => mix.extend(
                kept.chunks_exact(channels)
                    .map(|f| finite(f.iter().zip(w).map(|(v, w)| v * w).sum::<f32>())),
            ),
        }
        if self.tracks[0].len() >= BATCH + self.hold {
            if let Some(r) = self.resampling.take() {
                let hold = self.hold;
                let fresh = self
                    .tracks
                    .iter_mut()
                    .map(|t| {
                        let mut f = Vec::with_capacity(BATCH + 4096 + hold);
                        f.extend(t.drain(t.len() - hold..));
                        f
                    })
                    .collect();
                let batch = std::mem::replace(&mut self.tracks, fresh);
                self.resampling = Some(r.send(batch).map_err(|e| e.with_input(name))?);
            }
        }
        Ok(())
    }

    /// Resamples what came at rate `old` to its end, and starts again at `rate`.
    fn restart(&mut self, old: u32, rate: u32, name: &str) -> Result<()> {
        let segment = std::mem::take(&mut self.tracks);
        let out = match self.resampling.take() {
            Some(r) => r
                .send(segment)
                .and_then(Resampling::finish)
                .map_err(|e| e.with_input(name))?,
            None => segment,
        };
        let n = out.len();
        if self.done.is_empty() {
            self.done = out;
        } else {
            for (d, o) in self.done.iter_mut().zip(out) {
                d.extend(o);
            }
        }
        self.done_s += self.frames_in as f64 / f64::from(old);
        self.frames_in = 0;
        let left = MAX_SAMPLES.saturating_sub(self.done[0].len()) as u64;
        let frames = left * u64::from(rate) / u64::from(crate::SAMPLE_RATE);
        self.max_frames = usize::try_from(frames).unwrap_or(usize::MAX);
        self.rate = Some(rate);
        self.tracks = vec![Vec::new(); n];
        if rate != crate::SAMPLE_RATE {
            let r = Resampling::start(rate, n).map_err(|e| e.with_input(name))?;
            self.resampling = Some(r);
        }
        Ok(())
    }

    fn finish(mut self, name: &str, first_error: Option<String>) -> Result<Decoded> {
        let Some(rate) = self.rate else {
            return Err(match first_error {
                Some(e) => corrupt(name, format!("no packet could be decoded ({e})")),
                None => AudioError::Empty {
                    input: name.to_string(),
                },
            });
        };
        if self.kept == 0 {
            return Err(corrupt(name, "its edit list keeps none of the audio"));
        }
        // MP3's padding stays where more frames came than its tag counts (files joined).
        if let Some((_, expected)) = self.mp3_end {
            if !self.done.is_empty() || self.frames_in as u64 != expected {
                self.hold = 0;
            }
        }
        for t in &mut self.tracks {
            t.truncate(t.len().saturating_sub(self.hold));
        }
        if self.kept <= self.hold {
            return Err(AudioError::Empty {
                input: name.to_string(),
            });
        }
        let mut last = match self.resampling {
            Some(r) => r
                .send(self.tracks)
                .and_then(Resampling::finish)
                .map_err(|e| e.with_input(name))?,
            None => self.tracks,
        };
        if !self.done.is_empty() {
            for (d, t) in self.done.iter_mut().zip(&mut last) {
                d.append(t);
            }
            last = self.done;
        }
        let mut tracks = last.into_iter();
        let mono = tracks.next().unwrap_or_default();
        let stereo = match (tracks.next(), tracks.next()) {
            (Some(l), Some(r)) => Some([l, r]),
            _ => None,
        };
        Ok(Decoded {
            mono,
            stereo,
            input_rate: rate,
            channels_in: self.channels,
        })
    }
}

#[cfg(test)]
mod tests {
    /// The weights FFmpeg's resampler (through faster-whisper's `decode_audio`) gave each
    /// layout's channels, to three places.
    #[test]
    fn four_character_codes_read_as_they_are() {
        assert_eq!(fourcc(*b"mp4a"), "mp4a");
        assert_eq!(fourcc([b'm', b's', 0, 0x11]), "ms\\x00\\x11");
    }

    #[test]
    fn mono_weights_are_ffmpegs() {
        use super::mono_weights;
        use symphonia::core::audio::Channels as C;
        let round = |w: Vec<f32>| {
            w.iter()
                .map(|v| (v * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        };
        let front = C::FRONT_LEFT | C::FRONT_RIGHT;
        let cases: [(C, bool, &[f32]); 9] = [
            (front, false, &[0.5, 0.5]),
            (front | C::FRONT_CENTRE, false, &[0.293, 0.293, 0.414]),
            (front | C::REAR_CENTRE, false, &[0.369, 0.369, 0.261]),
            (
                front | C::REAR_LEFT | C::REAR_RIGHT,
                false,
                &[0.293, 0.293, 0.207, 0.207],
            ),
            (
                front | C::FRONT_CENTRE | C::LFE1 | C::SIDE_LEFT | C::SIDE_RIGHT,
                false,
                &[0.207, 0.207, 0.293, 0.0, 0.146, 0.146],
            ),
            (
                C::from_bits(0xFF).unwrap(),
                false,
                &[0.146, 0.146, 0.207, 0.0, 0.104, 0.104, 0.146, 0.146],
            ),
            // Counts alone: FFmpeg's guesses (2.1, 4.0, 6.1).
            (C::from_bits(0x7).unwrap(), true, &[0.5, 0.5, 0.0]),
            (
                C::from_bits(0xF).unwrap(),
                true,
                &[0.243, 0.243, 0.343, 0.172],
            ),
            (
                C::from_bits(0x7F).unwrap(),
                true,
                &[0.181, 0.181, 0.255, 0.0, 0.128, 0.128, 0.128],
            ),
        ];
        for (channels, unlabelled, want) in cases {
            assert_eq!(
                round(mono_weights(channels, unlabelled)),
                want,
                "{channels}"
            );
        }
        // Nothing weighed (an LFE alone), and more channels than FFmpeg guesses for: a mean.
        assert_eq!(mono_weights(C::LFE1, false), [1.0]);
        assert_eq!(mono_weights(C::from_bits(0x3FF).unwrap(), true), [0.1; 10]);
    }

    use super::*;
    use symphonia::core::audio::Channels;

    /// The bound on decoded samples counts 16 kHz samples where the input is resampled as
    /// it decodes (a 48 kHz input may run three times as many frames as a 16 kHz one, 18 h
    /// either way), and input frames where it is kept at its rate.
    #[test]
    fn the_sample_bound_is_at_16k_when_resampling() {
        let spec = SignalSpec::new(48_000, Channels::FRONT_LEFT);
        let packet = [0.1f32; 100];
        for (want, limit) in [
            (Want::at_16k(false, f64::INFINITY), 3 * MAX_SAMPLES),
            (Want::native(false, f64::INFINITY), MAX_SAMPLES),
        ] {
            let mut m = Mono::new(want, None);
            m.push(&packet, spec, "x").unwrap();
            m.frames_in = limit - 150;
            m.push(&packet, spec, "x").unwrap();
            let e = m.push(&packet, spec, "x").unwrap_err().to_string();
            assert!(
                e.starts_with("x: too large: decodes to more than 1073741824 samples"),
                "{e}"
            );
            assert_eq!(e.ends_with("at 16 kHz"), want.to_16k, "{e}");
        }
    }

    /// Matroska's end padding is dropped before resampling, however many batches went to
    /// the resampler before it: the result is the shorter signal's, resampled whole.
    #[test]
    fn end_padding_is_dropped_before_resampling() {
        let spec = SignalSpec::new(48_000, Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
        let frames = 3 * BATCH + 777;
        let signal: Vec<f32> = (0..2 * frames)
            .map(|i| ((i as f32) * 0.013).sin() * 0.5)
            .collect();
        let run = |interleaved: &[f32], padding_ns| {
            let mut m = Mono::new(Want::at_16k(true, f64::INFINITY), None);
            m.end_padding_ns = padding_ns;
            for packet in interleaved.chunks(2 * 960) {
                m.push(packet, spec, "x").unwrap();
            }
            m.finish("x", None).unwrap()
        };
        // 13.5 ms at 48 kHz: 648 frames.
        let padded = run(&signal, Some(13_500_000));
        let cut = run(&signal[..2 * (frames - 648)], None);
        assert_eq!(padded.mono, cut.mono);
        assert_eq!(padded.stereo, cut.stereo);
        // Padding longer than the audio leaves none.
        let mut m = Mono::new(Want::native(false, f64::INFINITY), None);
        m.end_padding_ns = Some(1_000_000_000);
        m.push(&signal[..2 * 960], spec, "x").unwrap();
        assert!(matches!(m.finish("x", None), Err(AudioError::Empty { .. })));
    }
}
