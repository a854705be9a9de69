//! AAC's elementary streams: frames that each start with a sync word and say their own
//! length, as `.aac` files and MPEG transport streams carry them. Two framings:
//! - ADTS (`.aac`, and stream type 0x0F in a transport stream), read in place of
//!   symphonia's reader, which takes only MPEG-4 frames without a CRC, of one raw data
//!   block, in mono to 5.1: MPEG-2 frames (`FF F9`, older encoders and devices),
//!   CRC-protected ones (broadcast), 7.1 and layouts of their own (a PCE) stopped there;
//! - LOAS, whose frames hold LATM AudioMuxElements (stream type 0x11: DVB broadcasts,
//!   often HE-AAC), which symphonia has no reader for.
//!
//! Frames go to the AAC decoder whole, headers and all (`aac.rs`: rusty_aac reads them,
//! and configures itself from them).
//!
//! The same reader takes the other streams of frames that say their own length: AC-3 and
//! DTS syncframes, TrueHD's access units, and AMR's storage format.

use std::io::Read as _;
use std::marker::PhantomData;

use symphonia::core::audio::Channels;
use symphonia::core::codecs::{CodecParameters, CODEC_TYPE_AAC};
use symphonia::core::errors::{Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes, SeekBuffered};
use symphonia::core::meta::MetadataLog;
use symphonia::core::probe::{Descriptor, Instantiate, QueryDescriptor};
use symphonia::core::support_format;

/// The bytes a lost sync is looked for in before the stream counts as not one of these.
const RESYNC_LIMIT: u64 = 1 << 20;

/// The longest `Framing::HEADER`.
const MAX_HEADER: usize = 16;

/// How a framing marks and sizes its frames.
pub(crate) trait Framing: Send + Sync + 'static {
    /// Bytes of a frame's start that tell whether it is one, and its length.
    const HEADER: usize;
    /// The whole frame's length (header included), where `head` starts one.
    fn frame_len(head: &[u8]) -> Option<usize>;
    /// The track a stream whose first frame is `first` (whole) makes; an error where the
    /// frame is not what it seemed. (A format with a `MAGIC` is given no frame.)
    fn params(first: &[u8]) -> Result<CodecParameters>;
    /// What frames may be padded to a multiple of, before the next (DTS-HD's substreams
    /// start 4-byte aligned after their core frame).
    const ALIGN: usize = 1;
    /// Bytes from a first frame's start to the marker the probe finds (TrueHD's major
    /// sync follows its access unit's 4-byte header).
    const MARKER_AT: usize = 0;
    /// A file's magic, which the probe finds and the first frame follows (`.amr`'s).
    const MAGIC: &'static [u8] = &[];
}

/// ADTS (ISO 14496-3 §1.A.2.2).
pub(crate) enum Adts {}

/// The sampling frequencies an ADTS header indexes (ISO 14496-3 table 1.18).
const RATES: [u32; 13] = [
    96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025, 8_000,
    7_350,
];

/// What an ADTS header says.
#[derive(Debug, Clone, Copy, PartialEq)]
struct AdtsHeader {
    rate: u32,
    /// The channel configuration: 1-6 name that many channels, 7 eight, 0 a layout the
    /// frame's program config element gives.
    config: u8,
    /// The whole frame's bytes, header included.
    len: usize,
}

impl AdtsHeader {
    fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; 7] = b.get(..7)?.try_into().ok()?;
        // 12 sync bits, then the MPEG version (either), and layer 0 (which MPEG audio's
        // layers never have).
        if b[0] != 0xFF || b[1] & 0xF6 != 0xF0 {
            return None;
        }
        let protected = b[1] & 1 == 0;
        let rate = *RATES.get(usize::from((b[2] >> 2) & 0xF))?;
        let config = ((b[2] & 1) << 2) | (b[3] >> 6);
        let len = (usize::from(b[3] & 3) << 11) | (usize::from(b[4]) << 3) | usize::from(b[5] >> 5);
        let blocks = usize::from(b[6] & 3) + 1;
        // The header, its CRC, and the blocks' positions where there are several.
        let header = if protected { 9 + 2 * (blocks - 1) } else { 7 };
        (len > header).then_some(Self { rate, config, len })
    }

    fn channels(&self) -> Option<Channels> {
        let n = match self.config {
            1..=6 => usize::from(self.config),
            7 => 8,
            _ => return None,
        };
        crate::aac::channels_mask(n)
    }
}

impl Framing for Adts {
    const HEADER: usize = 7;

    fn frame_len(head: &[u8]) -> Option<usize> {
        AdtsHeader::parse(head).map(|h| h.len)
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        let h = AdtsHeader::parse(first).ok_or(Error::Unsupported("adts: not a frame header"))?;
        let mut params = CodecParameters::new();
        params.for_codec(CODEC_TYPE_AAC).with_sample_rate(h.rate);
        if let Some(channels) = h.channels() {
            params.with_channels(channels);
        }
        Ok(params)
    }
}

/// LOAS's AudioSyncStream (ISO 14496-3 §1.7.2): an 11-bit sync, a 13-bit length.
pub(crate) enum Loas {}

impl Framing for Loas {
    const HEADER: usize = 3;

    fn frame_len(head: &[u8]) -> Option<usize> {
        match head {
            [0x56, b1, b2, ..] if b1 & 0xE0 == 0xE0 => {
                let len = (usize::from(b1 & 0x1F) << 8) | usize::from(*b2);
                (len > 0).then_some(3 + len)
            }
            _ => None,
        }
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        // The first frame carries the stream's configuration (a StreamMuxConfig).
        let frame = rusty_aac::latm::parse_loas_frame(first)
            .map_err(|_| Error::Unsupported("loas: no stream configuration in the first frame"))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(crate::aac::CODEC_TYPE_LATM)
            .with_sample_rate(frame.config.sample_rate);
        Ok(params)
    }
}

/// AC-3 and E-AC-3 syncframes (`.ac3`, `.eac3`; stream types 0x81 and 0x87 in a transport
/// stream, or a private stream that a descriptor names so), which symphonia has no reader
/// for. E-AC-3's frames are framed, for its decoder to say that it does not decode them.
pub(crate) enum Ac3 {}

impl Framing for Ac3 {
    const HEADER: usize = 7;

    fn frame_len(head: &[u8]) -> Option<usize> {
        crate::ac3::Header::parse(head).map(|h| h.len)
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        let h =
            crate::ac3::Header::parse(first).ok_or(Error::Unsupported("ac3: not a syncframe"))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(crate::ac3::CODEC_TYPE_AC3)
            .with_sample_rate(h.rate)
            .with_channels(h.channels());
        Ok(params)
    }
}

/// MPEG audio Layer II frames (`.mp2`, `.mpa`; MPEG audio in transport and program
/// streams, AVI and WAV), read in place of symphonia's reader, which refuses the bitrates
/// the standard does not pair with a channel mode (`mp2.rs`).
pub(crate) enum Mp2 {}

impl Framing for Mp2 {
    const HEADER: usize = 4;

    fn frame_len(head: &[u8]) -> Option<usize> {
        crate::mp2::Header::parse(head).map(|h| h.len)
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        let h = crate::mp2::Header::parse(first).ok_or(Error::Unsupported("mp2: not a frame"))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(symphonia::core::codecs::CODEC_TYPE_MP2)
            .with_sample_rate(h.rate)
            .with_channels(h.channels());
        Ok(params)
    }
}

/// DTS frames (`.dts`, `.cpt`; stream types 0x82, 0x85 and 0x86 in a transport stream):
/// core frames in any of their four word forms, and the DTS-HD substreams that follow them.
pub(crate) enum Dts {}

impl Framing for Dts {
    const HEADER: usize = crate::dts::HEADER;
    const ALIGN: usize = 4;

    fn frame_len(head: &[u8]) -> Option<usize> {
        crate::dts::Header::parse(head).map(|h| h.len)
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        let h = crate::dts::Header::parse(first).ok_or(Error::Unsupported("dts: not a frame"))?;
        let mut params = CodecParameters::new();
        params.for_codec(crate::dts::CODEC_TYPE_DTS);
        if let (Some(rate), Some(channels)) = (h.rate(), h.channels()) {
            params.with_sample_rate(rate).with_channels(channels);
        }
        Ok(params)
    }
}

/// TrueHD's and MLP's access units (`.thd`, `.mlp`: tracks taken out of Matroska files),
/// a stream's first one with a major sync. Only that sync marks a unit; the others are
/// known by the 12-bit length of their 4-byte header alone, so damage is left to the
/// decoder (which waits for the next major sync).
pub(crate) enum Thd {}

impl Framing for Thd {
    const HEADER: usize = 4;
    const MARKER_AT: usize = 4;

    fn frame_len(head: &[u8]) -> Option<usize> {
        let len = usize::from(u16::from_be_bytes([head[0], head[1]]) & 0xFFF) * 2;
        (len >= 8).then_some(len)
    }

    fn params(first: &[u8]) -> Result<CodecParameters> {
        let (_, sync) =
            crate::mlp::sync_unit(first).ok_or(Error::Unsupported("truehd: no major sync"))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(crate::mlp::CODEC_TYPE_TRUEHD)
            .with_sample_rate(sync.rate)
            .with_channels(sync.channels());
        Ok(params)
    }
}

/// AMR's storage formats (`.amr`, `.awb`; RFC 4867 §5): a magic line, then frames whose
/// first byte's frame type alone gives their length. Nothing marks a frame, so nothing
/// resyncs: every byte sizes one, as FFmpeg reads them. AMR-NB's, and [`AmrWb`].
pub(crate) enum Amr {}

/// AMR-WB's storage format.
pub(crate) enum AmrWb {}

impl Framing for Amr {
    const HEADER: usize = 1;
    const MAGIC: &'static [u8] = crate::amr::MAGIC;

    fn frame_len(head: &[u8]) -> Option<usize> {
        head.first().map(|&toc| crate::amr::frame_len(toc))
    }

    fn params(_: &[u8]) -> Result<CodecParameters> {
        Ok(amr_params(crate::amr::CODEC_TYPE_AMRNB, crate::amr::RATE))
    }
}

impl Framing for AmrWb {
    const HEADER: usize = 1;
    const MAGIC: &'static [u8] = crate::amr::MAGIC_WB;

    fn frame_len(head: &[u8]) -> Option<usize> {
        head.first().map(|&toc| crate::amr::frame_len_wb(toc))
    }

    fn params(_: &[u8]) -> Result<CodecParameters> {
        Ok(amr_params(
            crate::amr::CODEC_TYPE_AMRWB,
            crate::amr::RATE_WB,
        ))
    }
}

/// An AMR track: mono, at its codec's rate.
pub(crate) fn amr_params(codec: symphonia::core::codecs::CodecType, rate: u32) -> CodecParameters {
    let mut params = CodecParameters::new();
    params
        .for_codec(codec)
        .with_sample_rate(rate)
        .with_channels(Channels::FRONT_CENTRE);
    params
}

/// A symphonia [`FormatReader`] for a stream of `F`'s frames, registered ahead of
/// symphonia's readers (`decode.rs`).
pub(crate) struct FrameReader<F> {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    /// The packets handed out so far.
    frames: u64,
    framing: PhantomData<F>,
}

impl<F: Framing> FrameReader<F> {
    /// The next frame's length, its header read into `head`. Where the stream is not at a
    /// frame (a damaged one, junk between frames), the next header that another header
    /// follows is looked for byte by byte, so that junk that looks like a sync is passed
    /// over.
    fn header(&mut self, head: &mut [u8]) -> Result<usize> {
        self.src.read_exact(head)?;
        if let Some(len) = F::frame_len(head) {
            return Ok(len);
        }
        for _ in 0..RESYNC_LIMIT {
            head.copy_within(1.., 0);
            head[F::HEADER - 1] = self.src.read_byte()?;
            if let Some(len) = F::frame_len(head) {
                if self.another_follows(len)? {
                    return Ok(len);
                }
            }
        }
        Err(Error::DecodeError("no frame sync in the stream"))
    }

    /// Whether the frame of `len` bytes whose header was just read is followed by another
    /// header (at once, or after padding to `F::ALIGN`), or ends where the stream does;
    /// leaves the stream where it was. (Skipping within symphonia's buffer copies nothing,
    /// so junk full of false syncs costs no more than any other.)
    fn another_follows(&mut self, len: usize) -> Result<bool> {
        let aligned = len.next_multiple_of(F::ALIGN);
        Ok(self.header_at(len)? || (aligned != len && self.header_at(aligned)?))
    }

    /// Whether another header starts `end` bytes from the start of the frame whose header
    /// was just read, or the stream ends there; leaves the stream where it was.
    fn header_at(&mut self, end: usize) -> Result<bool> {
        let at = self.src.pos();
        let follows = match self.src.ignore_bytes((end - F::HEADER) as u64) {
            Err(_) => false,
            Ok(()) => {
                let end = self.src.pos();
                let mut next = [0u8; MAX_HEADER];
                match self.src.read_exact(&mut next[..F::HEADER]) {
                    Ok(()) => F::frame_len(&next).is_some(),
                    Err(_) => self.src.pos() == end,
                }
            }
        };
        self.src.seek_buffered(at);
        Ok(follows)
    }
}

impl QueryDescriptor for FrameReader<Adts> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "adts",
            "Audio Data Transport Stream (AAC)",
            &["aac", "adts"],
            &["audio/aac", "audio/aacp"],
            // MPEG-4 and MPEG-2 frames, without and with a CRC.
            &[&[0xFF, 0xF1], &[0xFF, 0xF9], &[0xFF, 0xF0], &[0xFF, 0xF8]]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<Loas> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "loas",
            "Low Overhead Audio Stream (AAC in LATM)",
            &["loas", "latm"],
            &["audio/mp4a-latm"],
            &LOAS_MARKERS
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<Ac3> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "ac3",
            "Dolby Digital (AC-3, E-AC-3) syncframes",
            &["ac3", "eac3", "ec3", "a52"],
            &["audio/ac3", "audio/eac3"],
            &[&[0x0B, 0x77]]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<Mp2> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "mp2",
            "MPEG audio Layer II frames",
            &["mp2", "mpa", "m2a"],
            &["audio/mpeg", "audio/mp2"],
            // MPEG-1, MPEG-2 and MPEG-2.5, with and without a CRC.
            &[
                &[0xFF, 0xFD],
                &[0xFF, 0xFC],
                &[0xFF, 0xF5],
                &[0xFF, 0xF4],
                &[0xFF, 0xE5],
                &[0xFF, 0xE4]
            ]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<Dts> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "dts",
            "DTS Coherent Acoustics frames",
            &["dts", "cpt", "dtshd"],
            &["audio/vnd.dts", "audio/vnd.dts.hd"],
            &[
                &[0x7F, 0xFE, 0x80, 0x01],
                &[0xFE, 0x7F, 0x01, 0x80],
                &[0x1F, 0xFF, 0xE8, 0x00],
                &[0xFF, 0x1F, 0x00, 0xE8],
                &[0x64, 0x58, 0x20, 0x25]
            ]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<Thd> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "truehd",
            "Dolby TrueHD and MLP access units",
            &["thd", "truehd", "mlp"],
            &["audio/vnd.dolby.mlp"],
            &[&[0xF8, 0x72, 0x6F, 0xBA], &[0xF8, 0x72, 0x6F, 0xBB]]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

/// A LOAS frame's first two bytes: the sync, then the length's top five bits.
const LOAS_MARKERS: [&[u8]; 32] = {
    const ALL: [[u8; 2]; 32] = {
        let mut all = [[0x56, 0xE0]; 32];
        let mut i = 0;
        while i < 32 {
            all[i][1] = 0xE0 | i as u8;
            i += 1;
        }
        all
    };
    let mut out: [&[u8]; 32] = [&[]; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = &ALL[i];
        i += 1;
    }
    out
};

impl QueryDescriptor for FrameReader<Amr> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "amr",
            "AMR-NB storage format",
            &["amr", "3ga"],
            &["audio/amr"],
            &[crate::amr::MAGIC]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl QueryDescriptor for FrameReader<AmrWb> {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "awb",
            "AMR-WB storage format",
            &["awb", "amr"],
            &["audio/amr-wb"],
            &[crate::amr::MAGIC_WB]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl<F: Framing> FormatReader for FrameReader<F>
where
    FrameReader<F>: QueryDescriptor,
{
    fn try_new(src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        let mut reader = Self {
            src,
            tracks: Vec::new(),
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            frames: 0,
            framing: PhantomData,
        };
        // The probe found a sync here: the first frame starts at it (or `MARKER_AT`
        // before), or this is not such a stream. Past the stream's start (after junk, or a
        // tag), another frame (or the end) must follow it, lest bytes that only look like
        // a sync be taken for one.
        if !F::MAGIC.is_empty() {
            let mut magic = [0u8; 16];
            let magic = &mut magic[..F::MAGIC.len()];
            reader.src.read_exact(magic)?;
            if magic != F::MAGIC {
                return Err(Error::Unsupported("not the format's magic"));
            }
            // The magic says what the frames are; a file of none is an empty recording.
            reader.tracks.push(Track::new(0, F::params(&[])?));
            return Ok(reader);
        }
        if F::MARKER_AT > 0 {
            if reader.src.pos() < F::MARKER_AT as u64 {
                return Err(Error::Unsupported("no frame header before the marker"));
            }
            reader.src.seek_buffered_rev(F::MARKER_AT);
        }
        let start = reader.src.pos();
        let mut head = [0u8; MAX_HEADER];
        reader.src.read_exact(&mut head[..F::HEADER])?;
        let len = F::frame_len(&head).ok_or(Error::Unsupported("not a frame header"))?;
        let whole = reader.another_follows(len)?;
        reader.src.seek_buffered_rev(F::HEADER);
        if !whole && start > 0 {
            return Err(Error::Unsupported("no frame after the first"));
        }
        let mut first = vec![0u8; len];
        reader.src.read_exact(&mut first)?;
        reader.src.seek_buffered_rev(len);
        reader.tracks.push(Track::new(0, F::params(&first)?));
        Ok(reader)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        let mut head = [0u8; MAX_HEADER];
        let len = self.header(&mut head[..F::HEADER])?;
        let mut frame = vec![0u8; len];
        frame[..F::HEADER].copy_from_slice(&head[..F::HEADER]);
        self.src.read_exact(&mut frame[F::HEADER..])?;
        // Timestamps count frames: nothing here reads them.
        let ts = self.frames;
        self.frames += 1;
        Ok(Packet::new_from_boxed_slice(
            0,
            ts,
            1,
            frame.into_boxed_slice(),
        ))
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adts(mpeg2: bool, crc: bool, rate_index: u8, config: u8, len: usize, blocks: u8) -> [u8; 7] {
        let b1 = 0xF0 | (u8::from(mpeg2) << 3) | u8::from(!crc);
        let b2 = (1 << 6) | (rate_index << 2) | (config >> 2);
        let b3 = ((config & 3) << 6) | ((len >> 11) as u8 & 3);
        [
            0xFF,
            b1,
            b2,
            b3,
            (len >> 3) as u8,
            ((len & 7) << 5) as u8 | 0x1F,
            0xFC | (blocks - 1),
        ]
    }

    #[test]
    fn adts_headers_of_every_kind_parse() {
        let h = AdtsHeader::parse(&adts(false, false, 4, 2, 300, 1)).unwrap();
        assert_eq!((h.rate, h.config, h.len), (44_100, 2, 300));
        let h = AdtsHeader::parse(&adts(true, true, 7, 7, 1000, 4)).unwrap();
        assert_eq!((h.rate, h.config, h.len), (22_050, 7, 1000));
        assert_eq!(h.channels().map(|c| c.count()), Some(8));
        let h = AdtsHeader::parse(&adts(false, false, 3, 0, 200, 1)).unwrap();
        assert_eq!(h.channels(), None);
    }

    #[test]
    fn non_adts_headers_are_refused() {
        // A reserved rate, frames no longer than their headers, and MPEG audio's layer III.
        assert_eq!(AdtsHeader::parse(&adts(false, false, 13, 2, 300, 1)), None);
        assert_eq!(AdtsHeader::parse(&adts(false, false, 4, 2, 7, 1)), None);
        assert_eq!(AdtsHeader::parse(&adts(false, true, 4, 2, 9, 1)), None);
        let mut mp3 = adts(false, false, 4, 2, 300, 1);
        mp3[1] = 0xFB;
        assert_eq!(AdtsHeader::parse(&mp3), None);
        assert_eq!(AdtsHeader::parse(&mp3[..5]), None);
    }

    #[test]
    fn loas_headers_give_their_length() {
        assert_eq!(Loas::frame_len(&[0x56, 0xE1, 0x3D]), Some(3 + 0x13D));
        assert_eq!(Loas::frame_len(&[0x56, 0xE0, 0x00]), None);
        assert_eq!(Loas::frame_len(&[0x56, 0xC1, 0x3D]), None);
        assert_eq!(Loas::frame_len(&[0x56, 0xE1]), None);
        assert_eq!(LOAS_MARKERS[0x1F], &[0x56, 0xFF]);
    }
}
