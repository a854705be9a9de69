//! ASF (`.wma`, `.wmv`, `.asf`: Windows Media files), read for symphonia: the header's
//! audio streams (their WAVEFORMATEX and audio-spread descrambling), then the data
//! packets, fixed in size, whose payloads are fragments of media objects (or, compressed,
//! several whole small ones) that are put back together, descrambled, and handed out as
//! packets, in the order of the file. A packet cut short or damaged loses its objects;
//! the packets after it are read. WMA 1 and 2 (`wma/`) decode; the other Windows Media
//! codecs are refused by name, as is DRM-protected content.

use std::collections::VecDeque;

use symphonia::core::audio::Channels;
use symphonia::core::codecs::CODEC_TYPE_PCM_U8;
use symphonia::core::codecs::{CodecParameters, CODEC_TYPE_NULL, CODEC_TYPE_PCM_S16LE};
use symphonia::core::errors::{end_of_stream_error, Error, Result};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;
use symphonia::core::probe::{Descriptor, Instantiate, QueryDescriptor};
use symphonia::core::support_format;

/// A GUID as ASF stores it: its first three fields little-endian.
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let (a, b, c) = (a.to_le_bytes(), b.to_le_bytes(), c.to_le_bytes());
    [
        a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6],
        d[7],
    ]
}

/// The header object's GUID, with which every ASF file starts.
pub(crate) const HEADER: [u8; 16] = guid(
    0x75B2_2630,
    0x668E,
    0x11CF,
    [0xA6, 0xD9, 0x00, 0xAA, 0x00, 0x62, 0xCE, 0x6C],
);
const DATA: [u8; 16] = guid(
    0x75B2_2636,
    0x668E,
    0x11CF,
    [0xA6, 0xD9, 0x00, 0xAA, 0x00, 0x62, 0xCE, 0x6C],
);
const FILE_PROPERTIES: [u8; 16] = guid(
    0x8CAB_DCA1,
    0xA947,
    0x11CF,
    [0x8E, 0xE4, 0x00, 0xC0, 0x0C, 0x20, 0x53, 0x65],
);
const STREAM_PROPERTIES: [u8; 16] = guid(
    0xB7DC_0791,
    0xA9B7,
    0x11CF,
    [0x8E, 0xE6, 0x00, 0xC0, 0x0C, 0x20, 0x53, 0x65],
);
const AUDIO_MEDIA: [u8; 16] = guid(
    0xF869_9E40,
    0x5B4D,
    0x11CF,
    [0xA8, 0xFD, 0x00, 0x80, 0x5F, 0x5C, 0x44, 0x2B],
);
const CONTENT_ENCRYPTION: [u8; 16] = guid(
    0x2211_B3FB,
    0xBD23,
    0x11D2,
    [0xB4, 0xB7, 0x00, 0xA0, 0xC9, 0x55, 0xFC, 0x6E],
);
const EXT_CONTENT_ENCRYPTION: [u8; 16] = guid(
    0x298A_E614,
    0x2622,
    0x4C17,
    [0xB9, 0x35, 0xDA, 0xE0, 0x7E, 0xE9, 0x28, 0x9C],
);

/// Whether a file starting with `head` is an ASF file.
pub(crate) fn is_asf(head: &[u8]) -> bool {
    head.starts_with(&HEADER)
}

/// Bytes of a header object read, at the most (its pictures and tags are skipped).
const MAX_OBJECT: u64 = 1 << 20;
/// A data packet's size, at the most (ASF's are a few KiB; FFmpeg refuses 512 MiB).
const MAX_PACKET: u32 = 1 << 20;
/// A media object's size, at the most (FFmpeg's bound).
const MAX_MEDIA_OBJECT: usize = 1 << 24;

/// An audio stream's descrambling (ASF's audio spread): objects of `span` × `packet`
/// bytes, whose `chunk`-byte pieces were interleaved.
#[derive(Clone, Copy)]
struct Spread {
    span: usize,
    packet: usize,
    chunk: usize,
}

/// A media object being put back together from its fragments.
struct Partial {
    data: Vec<u8>,
    filled: usize,
    time: u32,
}

/// An audio stream handed out as a track.
struct Stream {
    number: u8,
    spread: Option<Spread>,
    /// The size the last replicated data named (payloads without it keep it).
    object_size: usize,
    partial: Option<Partial>,
}

pub(crate) struct AsfReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    streams: Vec<Stream>,
    packet_size: usize,
    /// Data packets left to read (None: to the end of the file).
    packets_left: Option<u64>,
    preroll: u32,
    ready: VecDeque<Packet>,
    /// Whether the file ended inside the last packet read.
    cut: bool,
}

/// A little-endian field of 0, 1, 2 or 4 bytes at `at`, as a packet's two-bit length
/// types say (`default` for 0).
fn field(b: &[u8], at: &mut usize, kind: u8, default: u32) -> Option<u32> {
    let n = [0usize, 1, 2, 4][usize::from(kind & 3)];
    if n == 0 {
        return Some(default);
    }
    let bytes = b.get(*at..*at + n)?;
    *at += n;
    let mut v = [0u8; 4];
    v[..n].copy_from_slice(bytes);
    Some(u32::from_le_bytes(v))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// An audio stream's parameters from its WAVEFORMATEX; the codec is NULL where sotto
/// does not decode it, with a name for it.
fn audio_params(fmt: &[u8]) -> Option<(CodecParameters, Option<&'static str>)> {
    let tag = le16(fmt, 0)?;
    let channels = le16(fmt, 2)?;
    let rate = le32(fmt, 4)?;
    let bits = le16(fmt, 14).unwrap_or(0);
    let mut params = CodecParameters::new();
    if rate > 0 {
        params.with_sample_rate(rate);
    }
    if let Some(c) = crate::decode::first_channels(u64::from(channels)) {
        params.with_channels(c);
    }
    let refused = match (tag, bits) {
        (0x0160 | 0x0161, _) => {
            let config = crate::wma::Config::from_waveformatex(fmt)?;
            params.for_codec(config.codec()).with_extra_data(fmt.into());
            None
        }
        (0x0001, 16) => {
            params
                .for_codec(CODEC_TYPE_PCM_S16LE)
                .with_bits_per_sample(16);
            None
        }
        (0x0001, 8) => {
            params.for_codec(CODEC_TYPE_PCM_U8).with_bits_per_sample(8);
            None
        }
        // AAC's access units, configured by the AudioSpecificConfig after the 18 bytes.
        (tag, _) if crate::avi::AAC_TAGS.contains(&tag) => {
            let size = usize::from(le16(fmt, 16).unwrap_or(0));
            match fmt.get(18..18 + size).filter(|asc| !asc.is_empty()) {
                Some(asc) => {
                    params
                        .for_codec(symphonia::core::codecs::CODEC_TYPE_AAC)
                        .with_extra_data(asc.into());
                    None
                }
                None => Some("AAC without its configuration"),
            }
        }
        // Vorbis and Speex: their headers after the 18 bytes, a packet a media object.
        (tag, _) if crate::avi::packet_codec(tag).is_some() => match crate::avi::packet_params(fmt)
        {
            Some(p) => {
                params = p;
                None
            }
            None => Some("Vorbis or Speex without its headers"),
        },
        (0x0162, _) => Some("WMA Pro (Windows Media Audio 9 Professional)"),
        (0x0163, _) => Some("WMA Lossless"),
        (0x000A, _) => Some("WMA Voice"),
        // What a WAV file may hold (G.711, ADPCM, MP3, wider PCM...): as that file.
        _ if crate::avi::format_tag(fmt).is_some_and(crate::avi::wav_tag_decoded) => {
            params
                .for_codec(crate::avi::CODEC_TYPE_ACM)
                .with_extra_data(fmt.into());
            None
        }
        _ => Some("an audio codec sotto does not decode"),
    };
    if params.codec == CODEC_TYPE_NULL && params.channels.is_none() {
        params.with_channels(Channels::FRONT_CENTRE);
    }
    Some((params, refused))
}

impl AsfReader {
    /// Reads the header object (the reader at its GUID) up to the data packets.
    fn open(mut src: MediaSourceStream) -> Result<Self> {
        let mut head = [0u8; 30];
        src.read_buf_exact(&mut head)?;
        if head[..16] != HEADER {
            return Err(Error::Unsupported("not an ASF header"));
        }
        let size = u64::from_le_bytes(head[16..24].try_into().expect("eight bytes"));
        let mut left = size.checked_sub(30).ok_or(Error::DecodeError(
            "asf: a header object shorter than its fields",
        ))?;
        let (mut packet_size, mut preroll) = (None, 0);
        let mut tracks = Vec::new();
        let mut streams = Vec::new();
        let mut refused = None;
        while left >= 24 {
            let mut obj = [0u8; 24];
            src.read_buf_exact(&mut obj)?;
            let id: [u8; 16] = obj[..16].try_into().expect("sixteen bytes");
            let size = u64::from_le_bytes(obj[16..24].try_into().expect("eight bytes"));
            if size < 24 || size > left {
                return Err(Error::DecodeError(
                    "asf: a header object runs past its header",
                ));
            }
            left -= size;
            let body = size - 24;
            let wanted = [FILE_PROPERTIES, STREAM_PROPERTIES];
            if id == CONTENT_ENCRYPTION || id == EXT_CONTENT_ENCRYPTION {
                return Err(Error::Unsupported(
                    "DRM-protected Windows Media, which sotto cannot decrypt",
                ));
            }
            if !wanted.contains(&id) || body > MAX_OBJECT {
                src.ignore_bytes(body)?;
                continue;
            }
            let mut b = vec![0u8; body as usize];
            src.read_buf_exact(&mut b)?;
            if id == FILE_PROPERTIES {
                let min = le32(&b, 68);
                let max = le32(&b, 72);
                preroll = le32(&b, 56).unwrap_or(0);
                match (min, max) {
                    (Some(min), Some(max)) if min == max && min > 0 => {
                        if min > MAX_PACKET {
                            return Err(Error::DecodeError("asf: data packets over 1 MiB"));
                        }
                        packet_size = Some(min as usize);
                    }
                    _ => return Err(Error::Unsupported("ASF packets of varying size")),
                }
            } else if b.get(..16) == Some(&AUDIO_MEDIA) {
                let Some((stream, params, why)) = Self::stream(&b) else {
                    return Err(Error::DecodeError("asf: a malformed audio stream"));
                };
                if why.is_some() {
                    refused = refused.or(why);
                }
                tracks.push(Track::new(u32::from(stream.number), params));
                streams.push(stream);
            }
        }
        src.ignore_bytes(left)?;
        // The data object: its GUID, size, file ID, packet count and two reserved bytes.
        let mut data = [0u8; 50];
        src.read_buf_exact(&mut data)?;
        if data[..16] != DATA {
            return Err(Error::DecodeError("asf: no data object after the header"));
        }
        let count = u64::from_le_bytes(data[40..48].try_into().expect("eight bytes"));
        let packet_size =
            packet_size.ok_or(Error::DecodeError("asf: no file properties in the header"))?;
        if !tracks
            .iter()
            .any(|t| t.codec_params.codec != CODEC_TYPE_NULL)
        {
            return Err(Error::Unsupported(refused.unwrap_or("ASF without audio")));
        }
        Ok(Self {
            src,
            tracks,
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            streams,
            packet_size,
            // Broadcast files may leave the count 0 (unknown).
            packets_left: (count > 0).then_some(count),
            preroll,
            ready: VecDeque::new(),
            cut: false,
        })
    }

    /// An audio stream properties object's stream, its parameters, and why its codec is
    /// refused, if it is.
    fn stream(b: &[u8]) -> Option<(Stream, CodecParameters, Option<&'static str>)> {
        let type_len = le32(b, 40)? as usize;
        let ecc_len = le32(b, 44)? as usize;
        let number = (le16(b, 48)? & 0x7F) as u8;
        let fmt = b.get(54..54 + type_len)?;
        let ecc = b.get(54 + type_len..54 + type_len + ecc_len).unwrap_or(&[]);
        let (params, refused) = audio_params(fmt)?;
        let spread = match ecc {
            [span, p0, p1, c0, c1, ..] if *span > 1 => {
                let packet = usize::from(u16::from_le_bytes([*p0, *p1]));
                let chunk = usize::from(u16::from_le_bytes([*c0, *c1]));
                (chunk > 0 && packet / chunk > 1 && packet % chunk == 0).then_some(Spread {
                    span: usize::from(*span),
                    packet,
                    chunk,
                })
            }
            _ => None,
        };
        let stream = Stream {
            number,
            spread,
            object_size: 0,
            partial: None,
        };
        Some((stream, params, refused))
    }

    /// Reads the next data packet, queueing the objects it completes; false at the end.
    fn read_packet(&mut self) -> Result<bool> {
        if self.packets_left == Some(0) {
            return Ok(false);
        }
        if self.cut {
            return Err(Error::DecodeError(
                "asf: the file ends inside a data packet",
            ));
        }
        let mut b = vec![0u8; self.packet_size];
        let mut got = 0;
        while got < b.len() {
            match self.src.read_buf(&mut b[got..]) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got == 0 {
            return Ok(false);
        }
        // A packet cut short keeps the payloads it holds whole.
        self.cut = got < b.len();
        b.truncate(got);
        if let Some(n) = &mut self.packets_left {
            *n -= 1;
        }
        // A damaged packet loses its payloads; the next is read on.
        let _ = self.parse_packet(&b);
        Ok(true)
    }

    /// A data packet's payloads (FFmpeg's `asf_get_packet` and `asf_read_frame_header`).
    fn parse_packet(&mut self, b: &[u8]) -> Option<()> {
        let mut at = 0;
        let mut flags = *b.first()?;
        at += 1;
        if flags & 0x80 != 0 {
            // Error correction data.
            if flags & 0x60 == 0 {
                at += usize::from(flags & 0x0F);
            }
            flags = *b.get(at)?;
            at += 1;
        }
        let property = *b.get(at)?;
        at += 1;
        let size = self.packet_size;
        let length = field(b, &mut at, flags >> 5, size as u32)? as usize;
        field(b, &mut at, flags >> 1, 0)?; // sequence
        let padding = field(b, &mut at, flags >> 3, 0)? as usize;
        at += 6; // send time, duration
        let (count, length_kind) = if flags & 1 != 0 {
            let x = *b.get(at)?;
            at += 1;
            (usize::from(x & 0x3F), x >> 6)
        } else {
            (1, 2)
        };
        let end = length.min(size).checked_sub(padding)?;
        for _ in 0..count {
            let number = b.get(at)? & 0x7F;
            at += 1;
            field(b, &mut at, property >> 4, 0)?; // media object number
            let offset = field(b, &mut at, property >> 2, 0)? as usize;
            let replicated = field(b, &mut at, property, 0)? as usize;
            let mut object = None;
            let mut delta = None;
            if replicated >= 8 {
                let size = le32(b, at)? as usize;
                let time = le32(b, at + 4)?;
                if size >= MAX_MEDIA_OBJECT {
                    return None;
                }
                object = Some((size, time));
                at += replicated;
            } else if replicated == 1 {
                delta = Some(*b.get(at)?);
                at += 1;
            } else if replicated != 0 {
                return None;
            }
            let len = if flags & 1 != 0 {
                field(b, &mut at, length_kind, 0)? as usize
            } else {
                end.checked_sub(at)?
            };
            // A payload may run into the padding (FFmpeg takes it so), not past the packet.
            let payload = b
                .get(at..at + len)
                .filter(|_| at + len <= length.min(size))?;
            at += len;
            let Some(s) = self.streams.iter().position(|s| s.number == number) else {
                continue;
            };
            let track = u32::from(number);
            if let Some(delta) = delta {
                // Compressed: whole objects, each behind its length, `offset` their time.
                let mut time = offset as u32;
                let mut rest = payload;
                while let Some((&n, tail)) = rest.split_first() {
                    let n = usize::from(n);
                    let Some(obj) = tail.get(..n) else { break };
                    self.emit(s, track, obj.to_vec(), time);
                    time = time.wrapping_add(u32::from(delta));
                    rest = &tail[n..];
                }
                continue;
            }
            let stream = &mut self.streams[s];
            if let Some((size, time)) = object {
                stream.object_size = size;
                if offset == 0 {
                    stream.partial = Some(Partial {
                        data: vec![0; size],
                        filled: 0,
                        time,
                    });
                }
            } else if offset == 0 {
                stream.partial = Some(Partial {
                    data: vec![0; stream.object_size],
                    filled: 0,
                    time: 0,
                });
            }
            // A fragment that does not continue the object being made (one was lost)
            // drops it.
            let fits = stream.partial.as_ref().is_some_and(|p| {
                p.filled == offset
                    && p.data.len() == stream.object_size
                    && offset + len <= p.data.len()
            });
            if !fits {
                stream.partial = None;
                continue;
            }
            let p = stream.partial.as_mut().expect("checked above");
            p.data[offset..offset + len].copy_from_slice(payload);
            p.filled += len;
            if p.filled == p.data.len() {
                let p = stream.partial.take().expect("checked above");
                self.emit(s, track, p.data, p.time);
            }
        }
        Some(())
    }

    /// Queues a whole media object of stream `s`, descrambled.
    fn emit(&mut self, s: usize, track: u32, data: Vec<u8>, time: u32) {
        let data = match self.streams[s].spread {
            Some(d) if data.len() == d.packet * d.span => {
                let mut out = Vec::with_capacity(data.len());
                let per_packet = d.packet / d.chunk;
                for off in 0..data.len() / d.chunk {
                    let (row, col) = (off / d.span, off % d.span);
                    let idx = row + col * per_packet;
                    out.extend_from_slice(&data[idx * d.chunk..(idx + 1) * d.chunk]);
                }
                out
            }
            _ => data,
        };
        if data.is_empty() {
            return;
        }
        let ts = u64::from(time.saturating_sub(self.preroll));
        self.ready.push_back(Packet::new_from_boxed_slice(
            track,
            ts,
            0,
            data.into_boxed_slice(),
        ));
    }
}

impl QueryDescriptor for AsfReader {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "asf",
            "Advanced Systems Format (Windows Media)",
            &["wma", "wmv", "asf"],
            &["audio/x-ms-wma", "video/x-ms-asf", "video/x-ms-wmv"],
            &[&HEADER]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl FormatReader for AsfReader {
    fn try_new(src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Self::open(src)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        loop {
            if let Some(p) = self.ready.pop_front() {
                return Ok(p);
            }
            if !self.read_packet()? {
                return end_of_stream_error();
            }
        }
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PACKET: usize = 64;

    fn object(guid: [u8; 16], body: &[u8]) -> Vec<u8> {
        let mut o = guid.to_vec();
        o.extend_from_slice(&(24 + body.len() as u64).to_le_bytes());
        o.extend_from_slice(body);
        o
    }

    /// An ASF file: stream 1, WMA 2 spread over 2 × 4 bytes in 2-byte chunks, then these
    /// data packets.
    fn file(packets: &[Vec<u8>]) -> Vec<u8> {
        let mut props = vec![0u8; 80];
        props[56..60].copy_from_slice(&50u32.to_le_bytes()); // preroll
        props[68..72].copy_from_slice(&(PACKET as u32).to_le_bytes());
        props[72..76].copy_from_slice(&(PACKET as u32).to_le_bytes());
        let mut fmt = 0x0161u16.to_le_bytes().to_vec();
        fmt.extend_from_slice(&[1, 0, 0x80, 0x3E, 0, 0, 0xE8, 0x03, 0, 0, 8, 0, 16, 0]);
        fmt.extend_from_slice(&[6, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        let ecc = [2, 4, 0, 2, 0, 2, 0, 0];
        let mut stream = AUDIO_MEDIA.to_vec();
        stream.extend_from_slice(&[0; 16 + 8]);
        stream.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
        stream.extend_from_slice(&(ecc.len() as u32).to_le_bytes());
        stream.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
        stream.extend_from_slice(&fmt);
        stream.extend_from_slice(&ecc);
        let mut body = 2u32.to_le_bytes().to_vec();
        body.extend_from_slice(&[1, 2]);
        body.extend(object(FILE_PROPERTIES, &props));
        body.extend(object(STREAM_PROPERTIES, &stream));
        let mut out = object(HEADER, &body);
        let mut data = vec![0u8; 26];
        data[16..24].copy_from_slice(&(packets.len() as u64).to_le_bytes());
        for p in packets {
            assert_eq!(p.len(), PACKET);
            data.extend_from_slice(p);
        }
        out.extend(object(DATA, &data));
        out
    }

    /// A payload's header (stream, object number, offset, replicated data) and data.
    struct Payload<'a> {
        stream: u8,
        offset: u32,
        replicated: &'a [u8],
        data: &'a [u8],
    }

    /// A data packet of these payloads (several behind a count and 16-bit lengths),
    /// padded to its size.
    fn packet(payloads: &[Payload]) -> Vec<u8> {
        let multiple = payloads.len() > 1;
        let mut p = vec![
            if multiple { 0x09 } else { 0x08 },
            0x5D,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        if multiple {
            p.push(0x80 | payloads.len() as u8);
        }
        for pl in payloads {
            p.extend_from_slice(&[pl.stream, 0]);
            p.extend_from_slice(&pl.offset.to_le_bytes());
            p.push(pl.replicated.len() as u8);
            p.extend_from_slice(pl.replicated);
            if multiple {
                p.extend_from_slice(&(pl.data.len() as u16).to_le_bytes());
            }
            p.extend_from_slice(pl.data);
        }
        p[2] = (PACKET - p.len()) as u8;
        p.resize(PACKET, 0);
        p
    }

    fn replicated(size: u32, time: u32) -> Vec<u8> {
        [size.to_le_bytes(), time.to_le_bytes()].concat()
    }

    #[test]
    fn objects_are_put_together_descrambled_and_unpacked() {
        let first = replicated(8, 150);
        let packets = [
            // The first 5 bytes of a spread object, and another stream's payload.
            packet(&[
                Payload {
                    stream: 1,
                    offset: 0,
                    replicated: &first,
                    data: &[1, 2, 3, 4, 5],
                },
                Payload {
                    stream: 5,
                    offset: 0,
                    replicated: &replicated(3, 0),
                    data: &[9; 3],
                },
            ]),
            // Its other 3.
            packet(&[Payload {
                stream: 1,
                offset: 5,
                replicated: &first,
                data: &[6, 7, 8],
            }]),
            // Compressed: two whole objects behind their lengths, the offset their time.
            packet(&[Payload {
                stream: 1,
                offset: 200,
                replicated: &[10],
                data: &[2, 0xA, 0xB, 3, 0xC, 0xD, 0xE],
            }]),
            // The end of an object whose start was lost, and one that continues nothing.
            packet(&[Payload {
                stream: 1,
                offset: 4,
                replicated: &first,
                data: &[1, 1, 1, 1],
            }]),
            packet(&[Payload {
                stream: 1,
                offset: 0,
                replicated: &replicated(2, 300),
                data: &[7, 7],
            }]),
        ];
        let bytes = file(&packets);
        let mss = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
        let mut asf = AsfReader::try_new(mss, &Default::default()).unwrap();
        assert_eq!(asf.tracks().len(), 1);
        assert_eq!(
            asf.tracks()[0].codec_params.codec,
            crate::wma::CODEC_TYPE_WMAV2
        );
        let mut got = Vec::new();
        while let Ok(p) = asf.next_packet() {
            got.push((p.ts, p.data.to_vec()));
        }
        // Chunks [a, b, c, d] were written as [a, c, b, d].
        assert_eq!(
            got,
            [
                (100, vec![1, 2, 5, 6, 3, 4, 7, 8]),
                (150, vec![0xA, 0xB]),
                (160, vec![0xC, 0xD, 0xE]),
                (250, vec![7, 7]),
            ]
        );
    }

    /// A WAVEFORMATEX of `tag`, 2 channels at 44.1 kHz, 16 bits, with `extra` after it.
    fn waveformatex(tag: u16, extra: &[u8]) -> Vec<u8> {
        let mut f = tag.to_le_bytes().to_vec();
        f.extend(2u16.to_le_bytes());
        f.extend(44_100u32.to_le_bytes());
        f.extend([0, 0, 0, 0, 4, 0, 16, 0]);
        f.extend((extra.len() as u16).to_le_bytes());
        f.extend(extra);
        f
    }

    #[test]
    fn streams_are_wma_aac_a_wav_format_or_named() {
        let codec = |tag, extra: &[u8]| {
            let (p, refused) = audio_params(&waveformatex(tag, extra)).unwrap();
            (p.codec, p.extra_data.map(|e| e.len()), refused)
        };
        let aac = symphonia::core::codecs::CODEC_TYPE_AAC;
        assert_eq!(codec(0x00FF, &[0x12, 0x10]), (aac, Some(2), None));
        assert_eq!(
            codec(0x00FF, &[]),
            (CODEC_TYPE_NULL, None, Some("AAC without its configuration"))
        );
        // MP3, μ-law, MS ADPCM: the WAV format, whole, for `decode.rs` to make a WAV file.
        for tag in [0x0055, 0x0007, 0x0002] {
            assert_eq!(
                codec(tag, &[]),
                (crate::avi::CODEC_TYPE_ACM, Some(18), None)
            );
        }
        assert_eq!(
            codec(0x0162, &[]).2,
            Some("WMA Pro (Windows Media Audio 9 Professional)")
        );
        assert_eq!(
            codec(0x1234, &[]).2,
            Some("an audio codec sotto does not decode")
        );
    }

    #[test]
    fn a_huge_packet_size_is_refused_not_allocated() {
        let mut bytes = file(&[]);
        // The file properties' body starts after the header's 30 bytes and its own 24.
        let props = 30 + 24;
        assert_eq!(bytes[30..46], FILE_PROPERTIES);
        for at in [props + 68, props + 72] {
            bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        let mss = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
        let e = AsfReader::try_new(mss, &Default::default()).err().unwrap();
        assert!(e.to_string().contains("over 1 MiB"), "{e}");
    }

    #[test]
    fn damaged_packets_and_headers_are_errors_not_panics() {
        let good = file(&[packet(&[Payload {
            stream: 1,
            offset: 0,
            replicated: &replicated(4, 0),
            data: &[1, 2, 3, 4],
        }])]);
        for cut in 0..good.len() {
            let mss = MediaSourceStream::new(
                Box::new(std::io::Cursor::new(good[..cut].to_vec())),
                Default::default(),
            );
            if let Ok(mut asf) = AsfReader::try_new(mss, &Default::default()) {
                while asf.next_packet().is_ok() {}
            }
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                let mss =
                    MediaSourceStream::new(Box::new(std::io::Cursor::new(bad)), Default::default());
                if let Ok(mut asf) = AsfReader::try_new(mss, &Default::default()) {
                    for _ in 0..16 {
                        if asf.next_packet().is_err() {
                            break;
                        }
                    }
                }
            }
        }
    }
}
