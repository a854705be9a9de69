//! AVI (`.avi`: older cameras, screen and video recorders, CCTV and IP cameras' exports),
//! which symphonia does not read. Its first audio stream is PCM (any width, float, A-law,
//! μ-law, ADPCM: WAV's own formats), a speech codec sotto decodes in WAV files (GSM 06.10,
//! G.722, G.723.1, G.726, G.729), MPEG audio, AAC, AC-3 or DTS; its chunks, interleaved
//! with the video's, are handed on one after another as the WAV file or the stream of
//! frames they make (each AAC access unit behind an ADTS header made from the format's
//! AudioSpecificConfig). OpenDML files (past 1 GiB,
//! in `AVIX` parts) included. Only the chunk headers are read to find them; the reader
//! then seeks from one audio chunk to the next, so the video is never read.

use std::io::{Cursor, Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

/// Whether a file starting with `head` is an AVI file.
pub(crate) fn is_avi(head: &[u8]) -> bool {
    head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"AVI "
}

/// Whether a file starting with `head` is a WAV file.
pub(crate) fn is_wav(head: &[u8]) -> bool {
    head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WAVE"
}

/// Most chunks walked (an hour at 30 frames a second holds ~220 thousand).
const MAX_CHUNKS: usize = 1 << 24;
/// Deepest nesting of lists walked (`movi` holds `rec ` lists; nothing nests further).
const MAX_DEPTH: usize = 4;
/// Largest stream format (`strf`) read: a WAVEFORMATEX is 16 to 40 bytes.
const MAX_FORMAT: u32 = 1 << 16;

/// WAV format tags symphonia's WAV reader decodes: PCM, MS ADPCM, IEEE float, A-law,
/// μ-law, IMA ADPCM, and WAVE_FORMAT_EXTENSIBLE.
const WAV_TAGS: [u16; 7] = [0x0001, 0x0002, 0x0003, 0x0006, 0x0007, 0x0011, 0xFFFE];
/// MPEG audio (layers 1 and 2, and layer 3): the chunks are an MPEG audio stream.
const MPEG_TAGS: [u16; 2] = [0x0050, 0x0055];
/// AC-3 and DTS (a DVD's audio, in AVI files made from one): the chunks are its frames.
const AC3_TAG: u16 = 0x2000;
const DTS_TAG: u16 = 0x2001;
/// AAC: raw access units, one a chunk, with the AudioSpecificConfig after the
/// WAVEFORMATEX (FFmpeg's and most cameras' tag, and others FFmpeg reads); ADTS frames.
pub(crate) const AAC_TAGS: [u16; 4] = [0x00FF, 0x706D, 0x4143, 0xA106];
const ADTS_TAG: u16 = 0x1600;
/// FLAC (FFmpeg's tag): the chunks are FLAC frames, the STREAMINFO after the WAVEFORMATEX.
const FLAC_TAG: u16 = 0xF1AC;

/// The block size a FLAC frame header starting `frame` says, where its blocks are all of
/// that size (a variable-size stream's header says None).
fn flac_block_size(frame: &[u8]) -> Option<u16> {
    if frame.get(..2)? != [0xFF, 0xF8] {
        return None;
    }
    let code = frame.get(2)? >> 4;
    // After the frame's number (UTF-8 coded: its first byte's leading ones, its length),
    // where the size is written out.
    let at = 4 + (frame.get(4)?.leading_ones() as usize).max(1);
    match code {
        1 => Some(192),
        2..=5 => Some(576 << (code - 2)),
        6 => Some(u16::from(*frame.get(at)?) + 1),
        7 => u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?).checked_add(1),
        8..=15 => Some(256 << (code - 8)),
        _ => None,
    }
}

/// The head of a FLAC stream for frames in the format `format` (a WAVEFORMATEX), the
/// first of which starts `first`: `fLaC` and the STREAMINFO block after it where there is
/// one, else [`flac_stream_head`]'s.
fn flac_head(format: &[u8], first: &[u8]) -> Option<Vec<u8>> {
    let size = format
        .get(16..18)
        .map_or(0, |b| usize::from(u16::from_le_bytes([b[0], b[1]])));
    if let Some(info) = format.get(18..18 + size).filter(|_| size >= 34) {
        let mut head = b"fLaC".to_vec();
        head.extend([0x80, 0, 0, 34]); // the last metadata block: STREAMINFO, 34 bytes
        head.extend(&info[..34]);
        return Some(head);
    }
    let channels = u16::from_le_bytes(format.get(2..4)?.try_into().ok()?);
    let rate = u32::from_le_bytes(format.get(4..8)?.try_into().ok()?);
    let bits = u16::from_le_bytes(format.get(14..16)?.try_into().ok()?);
    flac_stream_head(channels, rate, Some(bits), first)
}

/// The head of a FLAC stream whose frames (the first starting `first`) have `channels` at
/// `rate` and `bits` (None: as the first frame says): `fLaC` and a STREAMINFO block made
/// from them, the block size the first frame's (length and checksum unknown).
pub(crate) fn flac_stream_head(
    channels: u16,
    rate: u32,
    bits: Option<u16>,
    first: &[u8],
) -> Option<Vec<u8>> {
    let bits = match bits {
        Some(b) => b,
        // The frame header's sample size code (byte 3, bits 1 to 3).
        None => match (first.get(3)? >> 1) & 7 {
            1 => 8,
            2 => 12,
            4 => 16,
            5 => 20,
            6 => 24,
            7 => 32,
            _ => return None,
        },
    };
    let (channels, rate, bits) = (u64::from(channels), u64::from(rate), u64::from(bits));
    if !(1..=8).contains(&channels) || !(1..1 << 20).contains(&rate) || !(4..=32).contains(&bits) {
        return None;
    }
    // Fixed-size blocks: all the size of the first (symphonia's reader holds the frames to
    // what the STREAMINFO says); else 16 to 65 535.
    let mut info = match flac_block_size(first) {
        Some(n) => [n.to_be_bytes(), n.to_be_bytes()].concat(),
        None => vec![0, 16, 0xFF, 0xFF],
    };
    info.extend([0; 6]);
    let packed = rate << 44 | (channels - 1) << 41 | (bits - 1) << 36;
    info.extend(packed.to_be_bytes());
    info.extend([0; 16]);
    let mut head = b"fLaC".to_vec();
    head.extend([0x80, 0, 0, 34]); // the last metadata block: STREAMINFO, 34 bytes
    head.extend(info);
    Some(head)
}

/// The codec of a format tag whose packets its decoder needs one at a time, so that it
/// cannot go as a WAV file's data: Vorbis, Speex.
pub(crate) fn packet_codec(tag: u16) -> Option<symphonia::core::codecs::CodecType> {
    if crate::vorbis::WAV_TAGS.contains(&tag) {
        Some(symphonia::core::codecs::CODEC_TYPE_VORBIS)
    } else if tag == crate::speex::WAV_TAG {
        Some(crate::speex::CODEC_TYPE_SPEEX)
    } else {
        None
    }
}

/// The codec parameters of a WAVEFORMATEX of [`packet_codec`]'s: its rate and channels,
/// and the headers after it (Vorbis's identification and setup; Speex's header).
pub(crate) fn packet_params(fmt: &[u8]) -> Option<symphonia::core::codecs::CodecParameters> {
    let tag = format_tag(fmt)?;
    let codec = packet_codec(tag)?;
    let extra = if codec == symphonia::core::codecs::CODEC_TYPE_VORBIS {
        crate::vorbis::from_waveformatex(fmt)?
    } else {
        let size = usize::from(u16::from_le_bytes(fmt.get(16..18)?.try_into().ok()?));
        let header = fmt.get(18..18 + size)?;
        crate::speex::Config::from_header(header).ok()?;
        header.to_vec()
    };
    let mut params = symphonia::core::codecs::CodecParameters::new();
    params.for_codec(codec).with_extra_data(extra.into());
    let rate = u32::from_le_bytes(fmt.get(4..8)?.try_into().ok()?);
    if rate > 0 {
        params.with_sample_rate(rate);
    }
    let channels = u16::from_le_bytes(fmt.get(2..4)?.try_into().ok()?);
    if let Some(c) = crate::decode::first_channels(u64::from(channels)) {
        params.with_channels(c);
    }
    Some(params)
}

/// Whether sotto decodes a WAV file of this format tag (symphonia, or its own readers).
pub(crate) fn wav_tag_decoded(tag: u16) -> bool {
    WAV_TAGS.contains(&tag)
        || MPEG_TAGS.contains(&tag)
        || [AC3_TAG, DTS_TAG, FLAC_TAG].contains(&tag)
        || own_codec(tag)
}

/// Whether sotto's own decoders take a WAV file in the codec `tag` names (a speech
/// codec's, or WMA's), as `decode.rs`'s `speech_wav` sorts them.
pub(crate) fn own_codec(tag: u16) -> bool {
    speech_codec(tag).is_some() || crate::wma::WAV_TAGS.contains(&tag)
}

/// The speech codec a WAV format tag names, of those sotto decodes in WAV files (and so
/// in AVI's chunks, made into one).
pub(crate) fn speech_codec(tag: u16) -> Option<&'static str> {
    match tag {
        crate::gsm::WAV_TAG => Some("GSM 06.10"),
        crate::g722::WAV_TAG => Some("G.722"),
        t if crate::g726::WAV_TAGS.contains(&t) => Some("G.726"),
        t if crate::g729::WAV_TAGS.contains(&t) => Some("G.729"),
        t if crate::g723::WAV_TAGS.contains(&t) => Some("G.723.1"),
        crate::adpcm_swf::WAV_TAG => Some("Flash ADPCM"),
        crate::adpcm_yamaha::WAV_TAG => Some("Yamaha ADPCM"),
        _ => None,
    }
}

/// The first audio stream of an AVI file, read as the file symphonia decodes: a WAV file
/// (`ext` "wav"; in a speech codec where `speech`), an MPEG audio stream (`ext` "mp3"),
/// ADTS frames (`ext` "aac"), AC-3 syncframes (`ext` "ac3") or DTS frames (`ext` "dts").
pub(crate) struct AviAudio {
    src: Box<dyn MediaSource>,
    /// The WAV header before the chunks (empty for MPEG audio), and how much of it is read.
    header: Cursor<Vec<u8>>,
    /// (offset, length) of each audio chunk's data, in order.
    chunks: Vec<(u64, u64)>,
    /// The chunk being read, and how much of it is read.
    at: usize,
    done: u64,
    pub(crate) ext: &'static str,
    /// An ADTS header template put before each chunk (FLV's AAC access units), and the
    /// chunk it was last put before.
    pub(crate) frame_header: Option<[u8; 7]>,
    framed: Option<usize>,
    /// Whether the WAV file is in a codec sotto decodes itself ([`own_codec`]: for
    /// `decode.rs`'s `speech_wav`).
    pub(crate) speech: bool,
    /// Whether the chunks are DV frames (a "type 1" file's one interleaved stream), for
    /// `dv.rs` (see [`AviAudio::into_parts`]).
    pub(crate) dv: bool,
    /// The codec parameters of a stream whose chunks are packets that its decoder needs
    /// one at a time (Vorbis, Speex: see [`packet_params`]), which `codec::ChunkReader`
    /// hands out.
    pub(crate) packets: Option<symphonia::core::codecs::CodecParameters>,
}

/// Why an AVI file gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum AviError {
    /// Not one audio stream.
    NoAudio,
    /// An audio stream in a format we do not decode (the WAV format tag).
    Format(u16),
    /// The headers are malformed or cut short.
    Corrupt(String),
}

impl AviAudio {
    /// Finds the first audio stream of `src` (an AVI file at its start) and its chunks.
    pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<Self, AviError> {
        let len = match src.byte_len() {
            Some(n) => n,
            None => src
                .seek(SeekFrom::End(0))
                .map_err(|e| AviError::Corrupt(e.to_string()))?,
        };
        let mut walk = Walk::new(&mut *src, len);
        walk.file()?;
        let Some((_, format)) = walk.audio.take() else {
            // A "type 1" DV file: the DV frames themselves, audio and all.
            if walk.dv.is_some() && !walk.dv_chunks.is_empty() {
                let frames = std::mem::take(&mut walk.dv_chunks);
                let mut audio = Self::with_header(src, Vec::new(), frames, "dv");
                audio.dv = true;
                return Ok(audio);
            }
            return Err(AviError::NoAudio);
        };
        let chunks = std::mem::take(&mut walk.chunks);
        let tag = format_tag(&format)
            .ok_or_else(|| AviError::Corrupt("an audio stream's format is cut short".into()))?;
        let data: u64 = chunks.iter().map(|c| c.1).sum();
        let mut frame_header = None;
        let mut packets = None;
        let (header, ext) = if WAV_TAGS.contains(&tag) || own_codec(tag) {
            (wav_header(&format, data), "wav")
        } else if AAC_TAGS.contains(&tag) || tag == ADTS_TAG {
            // The AudioSpecificConfig after the WAVEFORMATEX's 18 bytes; without one the
            // chunks are taken for ADTS frames.
            let size = format
                .get(16..18)
                .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
            let asc = format.get(18..18 + usize::from(size)).unwrap_or(&[]);
            if tag != ADTS_TAG && !asc.is_empty() {
                frame_header = Some(crate::flv::adts_template(asc).map_err(AviError::Corrupt)?);
            }
            (Vec::new(), "aac")
        } else if MPEG_TAGS.contains(&tag) {
            (Vec::new(), "mp3")
        } else if tag == AC3_TAG {
            (Vec::new(), "ac3")
        } else if tag == DTS_TAG {
            (Vec::new(), "dts")
        } else if packet_codec(tag).is_some() {
            let params = packet_params(&format)
                .ok_or_else(|| AviError::Corrupt("a stream without its codec's headers".into()))?;
            packets = Some(params);
            (Vec::new(), "packets")
        } else if tag == FLAC_TAG {
            let mut first = [0u8; 16];
            if let Some(&(at, _)) = chunks.first() {
                let _ = src
                    .seek(SeekFrom::Start(at))
                    .and_then(|_| src.read(&mut first));
            }
            let head = flac_head(&format, &first)
                .ok_or_else(|| AviError::Corrupt("a FLAC stream's format is malformed".into()))?;
            (head, "flac")
        } else {
            return Err(AviError::Format(tag));
        };
        src.seek(SeekFrom::Start(0))
            .map_err(|e| AviError::Corrupt(e.to_string()))?;
        let mut audio = Self::with_header(src, header, chunks, ext);
        audio.frame_header = frame_header;
        audio.speech = own_codec(tag);
        audio.packets = packets;
        Ok(audio)
    }
}

impl AviAudio {
    /// `header`, then the bytes of `chunks` ((offset, length) in `src`, in order): the
    /// file symphonia reads by the extension `ext`.
    pub(crate) fn with_header(
        src: Box<dyn MediaSource>,
        header: Vec<u8>,
        chunks: Vec<(u64, u64)>,
        ext: &'static str,
    ) -> Self {
        Self {
            src,
            header: Cursor::new(header),
            chunks,
            at: 0,
            done: 0,
            ext,
            frame_header: None,
            framed: None,
            speech: false,
            dv: false,
            packets: None,
        }
    }

    /// The file and its chunks: a type 1 DV file's frames.
    pub(crate) fn into_parts(self) -> (Box<dyn MediaSource>, Vec<(u64, u64)>) {
        (self.src, self.chunks)
    }

    /// The frames of a WAV file whose format is AC-3, DTS (tags 0x2000 and 0x2001, as
    /// FFmpeg writes them), MPEG audio (0x0050, 0x0055: broadcast and recorder software's
    /// MP3 in WAV) or FLAC (0xF1AC, behind the head of a FLAC stream), which symphonia's
    /// WAV reader refuses: its `data` chunk, as a stream of frames. None for any other WAV
    /// file (and any other file).
    pub(crate) fn coded_wav(
        mut src: Box<dyn MediaSource>,
        head: &[u8],
    ) -> Result<Self, Box<dyn MediaSource>> {
        if !is_wav(head) {
            return Err(src);
        }
        let (fmt, data) = wav_chunks(&mut *src);
        let fmt = fmt.unwrap_or_default();
        let (ext, head) = match format_tag(&fmt) {
            Some(AC3_TAG) => (Some("ac3"), Some(Vec::new())),
            Some(DTS_TAG) => (Some("dts"), Some(Vec::new())),
            Some(tag) if MPEG_TAGS.contains(&tag) => (Some("mp3"), Some(Vec::new())),
            Some(FLAC_TAG) => {
                let mut first = [0u8; 16];
                if let Some((at, _)) = data {
                    let _ = src
                        .seek(SeekFrom::Start(at))
                        .and_then(|_| src.read(&mut first));
                }
                (Some("flac"), flac_head(&fmt, &first))
            }
            _ => (None, None),
        };
        match (ext, head, data) {
            (Some(ext), Some(head), Some(chunk)) if src.seek(SeekFrom::Start(0)).is_ok() => {
                Ok(Self::with_header(src, head, vec![chunk], ext))
            }
            _ => {
                let _ = src.seek(SeekFrom::Start(0));
                Err(src)
            }
        }
    }
}

/// Whether a WAV file starting with `head` (64 bytes of it) has as its first chunk a
/// format symphonia's WAV reader does not decode (AC-3, DTS, GSM, G.722: sotto's own
/// readers take those, from the whole file).
pub(crate) fn coded_wav_head(head: &[u8]) -> bool {
    head.get(12..16) == Some(b"fmt ")
        && head
            .get(20..)
            .and_then(format_tag)
            .is_some_and(|tag| !WAV_TAGS.contains(&tag))
}

/// A WAV file's format (its `fmt ` chunk, if it comes before the samples) and where its
/// `data` chunk's bytes are (cut to the file's end); `src` is left anywhere.
pub(crate) fn wav_chunks(src: &mut dyn MediaSource) -> (Option<Vec<u8>>, Option<(u64, u64)>) {
    let Some(len) = src.byte_len() else {
        return (None, None);
    };
    let mut walk = Walk::new(src, len);
    let (mut at, mut fmt, mut data) = (12, None, None);
    while let Ok(Some((id, size, _))) = walk.chunk(at, len) {
        match &id {
            b"fmt " if size >= 2 && size <= u64::from(MAX_FORMAT) => {
                let mut f = vec![0u8; size as usize];
                if walk.src.seek(SeekFrom::Start(at + 8)).is_err()
                    || walk.src.read_exact(&mut f).is_err()
                {
                    break;
                }
                fmt = Some(f);
            }
            b"data" => {
                data = Some((at + 8, size));
                break;
            }
            _ => {}
        }
        at += 8 + size + size % 2;
    }
    (fmt, data)
}

/// A WAVEFORMATEX's format tag; WAVE_FORMAT_EXTENSIBLE's sub-format where that is AC-3
/// or DTS (FFmpeg writes their 5.1 so), which symphonia's readers do not take, and AC-3's
/// tag for E-AC-3's sub-format (Windows' IEC 61937 Dolby Digital Plus GUID, which FFmpeg
/// writes E-AC-3 in WAV and AVI with): the AC-3 path reads both.
pub(crate) fn format_tag(format: &[u8]) -> Option<u16> {
    let tag = u16::from_le_bytes(format.get(..2)?.try_into().ok()?);
    let sub = format.get(24..26).map(|b| u16::from_le_bytes([b[0], b[1]]));
    match (tag, sub) {
        (0xFFFE, _) if format.get(24..40) == Some(&EAC3_GUID[..]) => Some(AC3_TAG),
        (0xFFFE, Some(sub @ (AC3_TAG | DTS_TAG))) => Some(sub),
        _ => Some(tag),
    }
}

/// KSDATAFORMAT_SUBTYPE_IEC61937_DOLBY_DIGITAL_PLUS, as a WAVEFORMATEXTENSIBLE holds it.
const EAC3_GUID: [u8; 16] = [
    0xAF, 0x87, 0xFB, 0xA7, 0x02, 0x2D, 0xFB, 0x42, 0xA4, 0xD4, 0x05, 0xCD, 0x93, 0x84, 0x3B, 0xDD,
];

/// A WAVEFORMATEX's first 16 bytes (a codec's extra size and bytes go after them); the
/// byte rate saturates.
pub(crate) fn waveformatex(
    tag: u16,
    channels: u16,
    rate: u32,
    byte_rate: u64,
    align: u16,
    bits: u16,
) -> Vec<u8> {
    let mut fmt = Vec::with_capacity(18);
    fmt.extend(tag.to_le_bytes());
    fmt.extend(channels.to_le_bytes());
    fmt.extend(rate.to_le_bytes());
    fmt.extend(u32::try_from(byte_rate).unwrap_or(u32::MAX).to_le_bytes());
    fmt.extend(align.to_le_bytes());
    fmt.extend(bits.to_le_bytes());
    fmt
}

/// A WAV file's header for `data` bytes of samples in the format `fmt` (a WAVEFORMATEX):
/// its sizes saturate at 4 GiB, where a WAV reader stops.
pub(crate) fn wav_header(fmt: &[u8], data: u64) -> Vec<u8> {
    let data32 = u32::try_from(data).unwrap_or(u32::MAX);
    let pad = fmt.len() % 2;
    let riff = 4 + 8 + fmt.len() as u64 + pad as u64 + 8 + u64::from(data32);
    let mut h = Vec::with_capacity(44 + fmt.len());
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&u32::try_from(riff).unwrap_or(u32::MAX).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    h.extend_from_slice(fmt);
    h.resize(h.len() + pad, 0);
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data32.to_le_bytes());
    h
}

/// Not a codec: a track whose packets are in the WAV format its parameters' extra data
/// holds (a WAVEFORMATEX: ASF's streams and Matroska's `A_MS/ACM` tracks in G.711, ADPCM,
/// MP3 and the rest a WAV file may hold). `decode.rs` gathers them into such a WAV file.
pub(crate) const CODEC_TYPE_ACM: symphonia::core::codecs::CodecType =
    symphonia::core::codecs::decl_codec_type(b"acm ");

/// A chunk's header: its id, its length (cut to the file's), and the first 4 bytes of its
/// body (a list's type, a stream header's stream type).
type Header = ([u8; 4], u64, [u8; 4]);

/// A walk over an AVI file's chunks, noting the first audio stream's format and chunks.
struct Walk<'a> {
    src: &'a mut dyn MediaSource,
    len: u64,
    /// Streams (`strl` lists) seen so far.
    streams: usize,
    /// The first audio stream: its index and format.
    audio: Option<(usize, Vec<u8>)>,
    chunks: Vec<(u64, u64)>,
    /// The first interleaved DV stream (`iavs`), and its chunks.
    dv: Option<usize>,
    dv_chunks: Vec<(u64, u64)>,
    visited: usize,
}

impl<'a> Walk<'a> {
    fn new(src: &'a mut dyn MediaSource, len: u64) -> Self {
        Self {
            src,
            len,
            streams: 0,
            audio: None,
            chunks: Vec::new(),
            dv: None,
            dv_chunks: Vec::new(),
            visited: 0,
        }
    }

    /// The header of the chunk at `at`; None past `end` or where the file stops short of it.
    fn chunk(&mut self, at: u64, end: u64) -> Result<Option<Header>, AviError> {
        if at + 8 > end {
            return Ok(None);
        }
        self.visited += 1;
        if self.visited > MAX_CHUNKS {
            return Err(AviError::Corrupt(format!("more than {MAX_CHUNKS} chunks")));
        }
        let mut head = [0u8; 12];
        let n = if at + 12 <= end { 12 } else { 8 };
        self.src
            .seek(SeekFrom::Start(at))
            .and_then(|_| self.src.read_exact(&mut head[..n]))
            .map_err(|e| AviError::Corrupt(e.to_string()))?;
        let id: [u8; 4] = head[..4].try_into().expect("4 bytes");
        let size = u64::from(u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")));
        let kind: [u8; 4] = head[8..12].try_into().expect("4 bytes");
        // A chunk cut off by the end of the file (a recording that stopped) keeps what is there.
        Ok(Some((id, size.min(end - at - 8), kind)))
    }

    /// The top level: `RIFF AVI `, then any `RIFF AVIX` parts after it.
    fn file(&mut self) -> Result<(), AviError> {
        let mut at = 0;
        while let Some((id, size, kind)) = self.chunk(at, self.len)? {
            if &id != b"RIFF" || size < 4 {
                break;
            }
            match &kind {
                b"AVI " | b"AVIX" => self.list(at + 12, at + 8 + size, &kind, 0)?,
                _ => break,
            }
            at += 8 + size + size % 2;
        }
        Ok(())
    }

    /// The chunks of a list (of type `kind`, `depth` lists down) from `at` to `end`.
    fn list(
        &mut self,
        mut at: u64,
        end: u64,
        kind: &[u8; 4],
        depth: usize,
    ) -> Result<(), AviError> {
        if depth > MAX_DEPTH {
            return Err(AviError::Corrupt("lists nested too deep".into()));
        }
        while let Some((id, size, sub)) = self.chunk(at, end)? {
            let body = at + 8;
            match (&id, kind) {
                (b"LIST", _) if size >= 4 => match &sub {
                    b"hdrl" | b"movi" | b"rec " => {
                        self.list(body + 4, body + size, &sub, depth + 1)?
                    }
                    b"strl" => {
                        self.list(body + 4, body + size, &sub, depth + 1)?;
                        self.streams += 1;
                    }
                    _ => {}
                },
                // The first audio stream's header; its format follows in `strf`.
                (b"strh", b"strl") if self.audio.is_none() && size >= 4 && sub == *b"auds" => {
                    self.audio = Some((self.streams, Vec::new()));
                }
                (b"strh", b"strl") if self.dv.is_none() && size >= 4 && sub == *b"iavs" => {
                    self.dv = Some(self.streams);
                }
                (b"strf", b"strl") => {
                    let ours =
                        matches!(&self.audio, Some((s, f)) if *s == self.streams && f.is_empty());
                    if ours {
                        if size > u64::from(MAX_FORMAT) {
                            return Err(AviError::Corrupt(format!("a {size}-byte stream format")));
                        }
                        let mut f = vec![0u8; size as usize];
                        self.src
                            .seek(SeekFrom::Start(body))
                            .and_then(|_| self.src.read_exact(&mut f))
                            .map_err(|e| AviError::Corrupt(e.to_string()))?;
                        self.audio = Some((self.streams, f));
                    }
                }
                (_, b"movi" | b"rec ") => {
                    if let Some((s, _)) = &self.audio {
                        if is_audio_chunk(&id, *s) && size > 0 {
                            self.chunks.push((body, size));
                        }
                    }
                    if let Some(s) = self.dv {
                        if stream_of(&id) == Some(s) && size > 0 {
                            self.dv_chunks.push((body, size));
                        }
                    }
                }
                _ => {}
            }
            at = body + size + size % 2;
        }
        Ok(())
    }
}

/// Whether a `movi` chunk id holds stream `stream`'s audio: its number in two digits,
/// then `wb`.
fn is_audio_chunk(id: &[u8; 4], stream: usize) -> bool {
    &id[2..] == b"wb" && stream_of(id) == Some(stream)
}

/// The stream a `movi` chunk belongs to: the number its id starts with, in two digits.
fn stream_of(id: &[u8; 4]) -> Option<usize> {
    let digit = |b: u8| (b as char).to_digit(10).map(|d| d as usize);
    Some(digit(id[0])? * 10 + digit(id[1])?)
}

impl Read for AviAudio {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.header.read(buf)?;
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            let Some(&(at, len)) = self.chunks.get(self.at) else {
                return Ok(0);
            };
            if self.done == len {
                (self.at, self.done) = (self.at + 1, 0);
                continue;
            }
            if let Some(template) = self.frame_header {
                if self.framed != Some(self.at) {
                    self.framed = Some(self.at);
                    let header = crate::flv::adts_header(template, len);
                    self.header = Cursor::new(header.to_vec());
                    continue;
                }
            }
            let want = (len - self.done).min(buf.len() as u64) as usize;
            self.src.seek(SeekFrom::Start(at + self.done))?;
            let n = self.src.read(&mut buf[..want])?;
            if n == 0 {
                // The file ends inside the chunk: what was there is all there is.
                self.chunks.truncate(self.at);
                return Ok(0);
            }
            self.done += n as u64;
            return Ok(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut c = id.to_vec();
        c.extend_from_slice(&(body.len() as u32).to_le_bytes());
        c.extend_from_slice(body);
        if body.len() % 2 == 1 {
            c.push(0);
        }
        c
    }

    fn list(kind: &[u8; 4], items: &[Vec<u8>]) -> Vec<u8> {
        let mut body = kind.to_vec();
        items.iter().for_each(|i| body.extend_from_slice(i));
        chunk(b"LIST", &body)
    }

    /// A PCM format: mono 16-bit at 8 kHz.
    fn pcm_format() -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&8000u32.to_le_bytes());
        f.extend_from_slice(&16000u32.to_le_bytes());
        f.extend_from_slice(&2u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f
    }

    /// An AVI with a video stream (0) and an audio stream (1) whose chunks, in a `rec `
    /// list and out of one, hold `a` and `b`; `cut` bytes taken off the end.
    fn avi(a: &[u8], b: &[u8], cut: usize) -> Vec<u8> {
        let strh = |t: &[u8; 4]| chunk(b"strh", &[t.as_slice(), &[0; 52]].concat());
        let hdrl = list(
            b"hdrl",
            &[
                chunk(b"avih", &[0; 56]),
                list(b"strl", &[strh(b"vids"), chunk(b"strf", &[0; 40])]),
                list(b"strl", &[strh(b"auds"), chunk(b"strf", &pcm_format())]),
            ],
        );
        let movi = list(
            b"movi",
            &[
                chunk(b"00dc", &[7; 301]),
                list(b"rec ", &[chunk(b"01wb", a), chunk(b"00dc", &[7; 10])]),
                chunk(b"01wb", b),
            ],
        );
        let mut file = chunk(b"RIFF", &[b"AVI ".as_slice(), &hdrl, &movi].concat());
        file.truncate(file.len() - cut);
        file
    }

    fn read_all(file: Vec<u8>) -> Result<(Vec<u8>, &'static str), AviError> {
        let mut a = AviAudio::open(Box::new(Cursor::new(file)))?;
        let mut out = Vec::new();
        a.read_to_end(&mut out).unwrap();
        Ok((out, a.ext))
    }

    #[test]
    fn the_audio_chunks_read_as_a_wav_file() {
        let (a, b) = ([1u8, 2, 3, 4], [5u8, 6]);
        let (out, ext) = read_all(avi(&a, &b, 0)).unwrap();
        assert_eq!(ext, "wav");
        let header = wav_header(&pcm_format(), 6);
        assert_eq!(out, [header.as_slice(), &a, &b].concat());
        assert_eq!(&out[..4], b"RIFF");
        assert_eq!(
            u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize,
            out.len() - 8
        );
    }

    #[test]
    fn a_file_cut_short_keeps_what_is_there() {
        let (a, b) = ([1u8, 2, 3, 4], [5u8, 6, 7, 8]);
        let (out, _) = read_all(avi(&a, &b, 2)).unwrap();
        assert!(out.ends_with(&[1, 2, 3, 4, 5, 6]), "{out:?}");
    }

    #[test]
    fn no_audio_and_unknown_formats_are_named() {
        let no_audio = chunk(
            b"RIFF",
            &[
                b"AVI ".as_slice(),
                &list(b"hdrl", &[chunk(b"avih", &[0; 56])]),
            ]
            .concat(),
        );
        assert_eq!(read_all(no_audio).unwrap_err(), AviError::NoAudio);
        let mut file = avi(&[1, 2], &[3, 4], 0);
        // The format tag (first bytes of the audio stream's `strf`) made WMA Pro's.
        let at = file.windows(4).rposition(|w| w == b"strf").unwrap() + 8;
        file[at..at + 2].copy_from_slice(&0x0162u16.to_le_bytes());
        assert_eq!(read_all(file).unwrap_err(), AviError::Format(0x0162));
    }

    #[test]
    fn extensible_formats_name_ac3_e_ac3_and_dts_by_their_sub_format() {
        let mut f = vec![0u8; 40];
        f[..2].copy_from_slice(&0xFFFEu16.to_le_bytes());
        for (sub, tag) in [(0x2000, 0x2000), (0x2001, 0x2001), (0x0001, 0xFFFE)] {
            f[24..26].copy_from_slice(&u16::to_le_bytes(sub));
            assert_eq!(format_tag(&f), Some(tag));
        }
        f[24..40].copy_from_slice(&EAC3_GUID);
        assert_eq!(format_tag(&f), Some(AC3_TAG));
        assert_eq!(format_tag(&f[..30]), Some(0xFFFE));
        assert_eq!(format_tag(&[0x50, 0]), Some(0x50));
        assert_eq!(format_tag(&[0x50]), None);
    }

    #[test]
    fn lists_nested_too_deep_are_an_error() {
        let mut inner = chunk(b"01wb", &[1, 2]);
        for _ in 0..50 {
            inner = list(b"rec ", &[inner]);
        }
        let file = chunk(
            b"RIFF",
            &[b"AVI ".as_slice(), &list(b"movi", &[inner])].concat(),
        );
        assert!(matches!(read_all(file), Err(AviError::Corrupt(_))));
    }

    #[test]
    fn audio_chunk_ids_name_their_stream() {
        assert!(is_audio_chunk(b"01wb", 1));
        assert!(is_audio_chunk(b"12wb", 12));
        assert!(!is_audio_chunk(b"01wb", 0));
        assert!(!is_audio_chunk(b"01dc", 1));
        assert!(!is_audio_chunk(b"ix01", 1));
    }
}
