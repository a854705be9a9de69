//! Opus in MPEG transport streams: a private stream that a registration descriptor names
//! "Opus" (SRT and RIST contribution feeds, recorded; FFmpeg's `-c:a libopus -f mpegts`),
//! laid out as ETSI's Opus-in-TS draft says, which FFmpeg and GStreamer follow. The stream
//! is a run of access units, each behind a control header: an 11-bit sync, flags, the
//! unit's size as a run of 255s and a last byte, then the samples to trim at its start
//! (the encoder's pre-skip, on the first units) and at its end (the padding of the last).
//!
//! The PMT's channel configuration (its extension descriptor) says the channels: 1 to 8,
//! as Ogg's mapping families 0 and 1 lay them out. The trims are applied, so a stream
//! remuxed from Ogg decodes to the Ogg file's samples exactly. (FFmpeg 5.1 keeps both: it
//! decodes 312 samples more at the start and the padding at the end.)

use std::io::Read as _;

use symphonia::core::audio::Channels;
use symphonia::core::codecs::{CodecParameters, CODEC_TYPE_OPUS};
use symphonia::core::errors::{Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;

/// The bytes a lost sync is looked for in before the stream counts as broken.
const RESYNC_LIMIT: usize = 1 << 20;
/// The largest unit taken: eight streams of code-3 packets of 48 frames at the most
/// bytes a frame may have (RFC 6716 §3.4) fit well within it.
const MAX_UNIT: usize = 1 << 20;

/// What the PMT's Opus extension descriptor (tag 0x7F, extension 0x80) holds.
pub(crate) fn channel_config(mut descriptors: &[u8]) -> Option<u8> {
    while let [tag, len, rest @ ..] = descriptors {
        let body = rest.get(..usize::from(*len)).unwrap_or(rest);
        if let (0x7F, [0x80, config, ..]) = (tag, body) {
            return Some(*config);
        }
        descriptors = rest.get(usize::from(*len)..).unwrap_or(&[]);
    }
    None
}

/// What a control header says: the unit's size, and the samples to trim from it.
#[derive(Debug, PartialEq)]
struct Control {
    size: usize,
    start_trim: u32,
    end_trim: u32,
}

/// Reads a control header whose two sync bytes, `b0 b1`, were read.
fn control(b1: u8, src: &mut MediaSourceStream) -> Result<Control> {
    let mut size = 0;
    loop {
        let b = src.read_byte()?;
        size += usize::from(b);
        if b != 0xFF {
            break;
        }
        if size > MAX_UNIT {
            return Err(Error::DecodeError(
                "opus in ts: an access unit of over 1 MiB",
            ));
        }
    }
    // 13-bit trims behind three reserved bits.
    let mut trim = |on: bool| -> Result<u32> {
        Ok(if on {
            u32::from(src.read_be_u16()? & 0x1FFF)
        } else {
            0
        })
    };
    let start_trim = trim(b1 & 0x10 != 0)?;
    let end_trim = trim(b1 & 0x08 != 0)?;
    if b1 & 0x04 != 0 {
        let len = src.read_byte()?;
        src.ignore_bytes(u64::from(len))?;
    }
    Ok(Control {
        size,
        start_trim,
        end_trim,
    })
}

/// Whether `b0 b1` is a control header's sync: 11 bits set, then the flags.
fn is_sync(b0: u8, b1: u8) -> bool {
    b0 == 0x7F && b1 & 0xE0 == 0xE0
}

/// Samples (at 48 kHz) an Opus packet decodes to, from its TOC byte and frame count
/// (RFC 6716 §3.1, as rusty-opus reads them); None for a packet too short to say.
pub(crate) fn packet_samples(packet: &[u8]) -> Option<u32> {
    use rusty_opus::repacketizer::{nb_frames, samples_per_frame};
    let frames = nb_frames(packet).ok()?;
    u32::try_from(frames * samples_per_frame(packet[0], 48_000)).ok()
}

/// A symphonia [`FormatReader`] over the access units of Opus in a transport stream (the
/// bytes `ts.rs` takes out of its PES packets).
pub(crate) struct OpusTsReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    ts: u64,
}

impl OpusTsReader {
    /// A reader of `src` for a stream whose PMT gave channel configuration `config` (None:
    /// no descriptor, taken as stereo, which mono packets decode in too).
    pub(crate) fn open(src: MediaSourceStream, config: Option<u8>) -> Result<Self> {
        let channels = match config.unwrap_or(2) {
            c @ 1..=8 => usize::from(c),
            0 => return Err(Error::Unsupported("opus in ts: dual mono")),
            _ => {
                return Err(Error::Unsupported(
                    "opus in ts: a channel mapping of its own",
                ))
            }
        };
        let head = crate::opus::standard_head(channels)
            .ok_or(Error::Unsupported("opus in ts: no standard layout"))?;
        let mut params = CodecParameters::new();
        params
            .for_codec(CODEC_TYPE_OPUS)
            .with_sample_rate(48_000)
            .with_extra_data(head.into_boxed_slice());
        if channels <= 2 {
            params.with_channels(match channels {
                1 => Channels::FRONT_CENTRE,
                _ => Channels::FRONT_LEFT | Channels::FRONT_RIGHT,
            });
        }
        Ok(Self {
            src,
            tracks: vec![Track::new(0, params)],
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            ts: 0,
        })
    }

    /// Reads up to the next control header's sync, passing over bytes that are not one
    /// (a unit damaged, or lost with its transport packets); returns its second byte.
    fn sync(&mut self) -> Result<u8> {
        let mut b0 = self.src.read_byte()?;
        let mut b1 = self.src.read_byte()?;
        for _ in 0..RESYNC_LIMIT {
            if is_sync(b0, b1) {
                return Ok(b1);
            }
            (b0, b1) = (b1, self.src.read_byte()?);
        }
        Err(Error::DecodeError(
            "opus in ts: no access unit sync in the stream",
        ))
    }
}

impl FormatReader for OpusTsReader {
    fn try_new(src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Self::open(src, None)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        let b1 = self.sync()?;
        let c = control(b1, &mut self.src)?;
        let mut unit = vec![0u8; c.size];
        self.src.read_exact(&mut unit)?;
        let dur = packet_samples(&unit).unwrap_or(0);
        let start = c.start_trim.min(dur);
        let end = c.end_trim.min(dur - start);
        let ts = self.ts;
        self.ts += u64::from(dur);
        let mut packet = Packet::new_from_boxed_slice(0, ts, u64::from(dur), unit.into());
        packet.trim_start = start;
        packet.trim_end = end;
        Ok(packet)
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symphonia::core::io::MediaSourceStream;

    fn reader(bytes: Vec<u8>, config: Option<u8>) -> Result<OpusTsReader> {
        let mss = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
        OpusTsReader::open(mss, config)
    }

    /// A unit of `payload` behind a control header with the trims given.
    fn unit(payload: &[u8], start: Option<u16>, end: Option<u16>, ext: &[u8]) -> Vec<u8> {
        let flags = u8::from(start.is_some()) << 4
            | u8::from(end.is_some()) << 3
            | u8::from(!ext.is_empty()) << 2;
        let mut out = vec![0x7F, 0xE0 | flags];
        out.extend(std::iter::repeat_n(0xFF, payload.len() / 255));
        out.push((payload.len() % 255) as u8);
        for t in [start, end].into_iter().flatten() {
            out.extend((0xE000 | t).to_be_bytes());
        }
        if !ext.is_empty() {
            out.push(ext.len() as u8);
            out.extend(ext);
        }
        out.extend(payload);
        out
    }

    #[test]
    fn units_are_read_with_their_trims_past_junk() {
        // CELT 20 ms (config 31), one frame: 960 samples.
        let a = [0xF8u8; 600];
        let b = [0xF9u8, 1, 2];
        // Code 3, 3 frames of 20 ms.
        let c = [0xFBu8, 3, 9, 9];
        let mut bytes = unit(&a, Some(312), None, &[]);
        bytes.extend([0x7F, 0x00, 0x12]);
        bytes.extend(unit(&b, None, None, &[1, 2, 3]));
        bytes.extend(unit(&c, None, Some(4000), &[]));
        let mut r = reader(bytes, Some(2)).unwrap();
        let p = r.next_packet().unwrap();
        assert_eq!((p.data.len(), p.ts, p.dur), (600, 0, 960));
        assert_eq!((p.trim_start, p.trim_end), (312, 0));
        let p = r.next_packet().unwrap();
        assert_eq!((&p.data[..], p.ts), (&b[..], 960));
        let p = r.next_packet().unwrap();
        assert_eq!((&p.data[..], p.dur), (&c[..], 2880));
        assert_eq!((p.trim_start, p.trim_end), (0, 2880));
        assert!(matches!(r.next_packet(), Err(Error::IoError(_))));
    }

    #[test]
    fn packet_lengths_follow_the_toc() {
        // SILK 60 ms, hybrid 10 ms, CELT 2.5 ms ×2, and code 3 with 5 frames of 5 ms.
        assert_eq!(packet_samples(&[3 << 3]), Some(2880));
        assert_eq!(packet_samples(&[12 << 3]), Some(480));
        assert_eq!(packet_samples(&[16 << 3 | 1]), Some(240));
        assert_eq!(packet_samples(&[17 << 3 | 3, 5]), Some(1200));
        assert_eq!(packet_samples(&[17 << 3 | 3]), None);
    }

    #[test]
    fn channel_configurations() {
        let descriptors = [0x05, 4, b'O', b'p', b'u', b's', 0x7F, 2, 0x80, 6];
        assert_eq!(channel_config(&descriptors), Some(6));
        assert_eq!(channel_config(&descriptors[..6]), None);
        let six = reader(Vec::new(), Some(6)).unwrap();
        let head = six.tracks[0].codec_params.extra_data.clone().unwrap();
        assert_eq!((head[9], head[18], head[19], head[20]), (6, 1, 4, 2));
        let mono = reader(Vec::new(), Some(1)).unwrap();
        assert_eq!(mono.tracks[0].codec_params.channels.unwrap().count(), 1);
        for (config, why) in [(0, "dual mono"), (0x86, "a channel mapping of its own")] {
            match reader(Vec::new(), Some(config)) {
                Err(Error::Unsupported(w)) => assert!(w.ends_with(why), "{w}"),
                _ => panic!("config {config} taken"),
            }
        }
    }

    #[test]
    fn a_run_of_255s_cannot_claim_more_than_a_mebibyte() {
        let mut bytes = vec![0x7F, 0xE0];
        bytes.extend(std::iter::repeat_n(0xFF, 5000));
        let mut r = reader(bytes, None).unwrap();
        assert!(matches!(r.next_packet(), Err(Error::DecodeError(_))));
    }
}
