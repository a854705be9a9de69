//! MPEG transport streams (`.ts`: broadcast and HLS recordings; `.m2ts`/`.mts`: Blu-ray
//! and AVCHD camcorders, 192-byte packets), which symphonia does not read. The first audio
//! stream the program map names (AAC in ADTS or LATM, MPEG audio, AC-3, DTS, TrueHD, Opus)
//! is taken out of its PES packets as it is read and handed on as the elementary stream
//! it is: nothing is held but a packet.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

/// A transport stream packet.
const PACKET: usize = 188;
/// Packets read looking for the program map and the audio stream's first PES packet.
const MAX_SEARCH: usize = 1 << 16;

/// Bytes of a packet as stored: 188, or 192 with the 4-byte arrival time of `.m2ts`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Layout {
    stride: usize,
    skip: usize,
}

/// How a file starting with `head` holds its packets, if it is a transport stream: a sync
/// byte (0x47) at the start of three packets in a row.
pub(crate) fn layout(head: &[u8]) -> Option<Layout> {
    [(PACKET, 0), (PACKET + 4, 4)]
        .into_iter()
        .map(|(stride, skip)| Layout { stride, skip })
        .find(|l| (0..3).all(|i| head.get(i * l.stride + l.skip) == Some(&0x47)))
}

/// Bytes of a file's start [`layout`] needs to see.
pub(crate) const SNIFF: usize = 3 * (PACKET + 4);

/// The audio of a transport stream, as the elementary stream symphonia decodes: `ext` is
/// "aac" (ADTS), "loas" (AAC in LATM) or "mp3" (MPEG audio), or None for symphonia to tell (a private stream whose
/// PES packets are MPEG audio's: AAC as ffmpeg writes it in `.m2ts`).
pub(crate) struct TsAudio {
    src: Box<dyn MediaSource>,
    layout: Layout,
    pid: u16,
    packet: Vec<u8>,
    /// The current packet's audio bytes not yet handed out: `packet[at..end]`.
    at: usize,
    end: usize,
    /// Whether the audio stream's first PES packet has begun (bytes before it are the
    /// tail of one that started before the file did).
    started: bool,
    /// The PES extension's stream id the audio's packets must carry (TrueHD's, beside an
    /// AC-3 copy in the same PID), and whether the current PES packet is another's.
    substream: Option<u8>,
    skipping: bool,
    pub(crate) ext: Option<&'static str>,
    /// An Opus stream's channel configuration, where its PMT entry gives one.
    pub(crate) opus_config: Option<u8>,
    /// Bytes of each PES packet's payload that are not the stream's (Blu-ray LPCM's and
    /// SMPTE 302M's header), and the first packet's of them.
    pes_skip: usize,
    pub(crate) pes_header: Option<[u8; 4]>,
}

/// Why a transport stream gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum TsError {
    /// No audio stream in its program map.
    NoAudio,
    /// An audio stream of a type we do not decode (the PMT's stream type: 0x81 AC-3...).
    Codec(u8),
    Io(String),
}

/// Stream types of the PMT that we decode, and the elementary stream they are.
fn decoded(stream_type: u8) -> Option<&'static str> {
    match stream_type {
        0x03 | 0x04 => Some("mp3"),        // MPEG-1 and MPEG-2 audio
        0x0F => Some("aac"),               // AAC in ADTS frames
        0x11 => Some("loas"),              // AAC in LATM, in LOAS frames (DVB)
        0x81 | 0x87 => Some("ac3"),        // AC-3 and E-AC-3 (ATSC; and DVB's, see `first_audio`)
        0x82 | 0x85 | 0x86 => Some("dts"), // DTS, DTS-HD (Blu-ray; DVB's as AC-3's)
        TRUEHD => Some("thd"),             // TrueHD, its AC-3 copy beside it (Blu-ray)
        OPUS => Some("opus-ts"),           // Opus access units (`ts_opus.rs`)
        BD_LPCM => Some("bd-lpcm"),        // Blu-ray's LPCM (`ts_pcm.rs`)
        S302M => Some("s302m"),            // SMPTE 302M (`ts_pcm.rs`)
        _ => None,
    }
}

/// PES data of a private stream type (0x06), which may be audio of any kind, or subtitles.
const PRIVATE: u8 = 0x06;
/// Blu-ray's TrueHD: its access units and an AC-3 copy in PES packets of one PID, told
/// apart by the PES extension's stream id (0x72 and 0x76).
const TRUEHD: u8 = 0x83;
const TRUEHD_SUBSTREAM: u8 = 0x72;
/// Blu-ray's LPCM: big-endian samples behind a 4-byte header in each PES packet.
const BD_LPCM: u8 = 0x80;
/// Not a stream type of ISO 13818-1: what [`private_type`] makes of a private stream that
/// a registration descriptor names "BSSD" (SMPTE 302M's AES3 audio).
const S302M: u8 = 0xFE;
/// Not a stream type of ISO 13818-1 (none was given to Opus): what [`private_type`] makes
/// of a private stream that a registration descriptor names "Opus".
const OPUS: u8 = 0xFF;

/// Stream types that are audio (for an error that names the codec): AC-3, DTS, E-AC-3,
/// TrueHD and more.
fn audio_type(stream_type: u8) -> bool {
    decoded(stream_type).is_some() || matches!(stream_type, 0x80..=0x87 | 0xA1 | 0xA2)
}

impl TsAudio {
    /// Finds the first audio stream of `src` (a transport stream at its start, laid out as
    /// `layout`) in its program map.
    pub(crate) fn open(mut src: Box<dyn MediaSource>, layout: Layout) -> Result<Self, TsError> {
        let io = |e: std::io::Error| TsError::Io(e.to_string());
        let mut packet = vec![0u8; layout.stride];
        let mut pmt_pid = None;
        let mut found = None;
        // A private stream's first PES header says what it is: MPEG audio's stream ids
        // (0xC0–0xDF) or not (private stream 1, 0xBD: AC-3, DTS, LPCM, subtitles).
        let mut private = None;
        let mut pes_header = None;
        for _ in 0..MAX_SEARCH {
            if !read_packet(&mut *src, &mut packet).map_err(io)? {
                break;
            }
            let p = &packet[layout.skip..];
            let Some((pid, start, payload)) = parse(p) else {
                continue;
            };
            if !start {
                continue;
            }
            if pid == 0 && pmt_pid.is_none() {
                pmt_pid = first_program(section(payload));
            } else if Some(pid) == pmt_pid && found.is_none() {
                found = first_audio(section(payload));
                if found.is_none_or(|f| ![PRIVATE, BD_LPCM, S302M].contains(&f.stream_type)) {
                    break;
                }
            } else if found.is_some_and(|f| f.pid == pid) {
                // A private stream's PES stream id, or Blu-ray LPCM's header.
                private = payload.get(3).copied();
                pes_header = pes_payload(payload)
                    .and_then(|at| payload.get(at..at + 4))
                    .and_then(|h| h.try_into().ok());
                break;
            }
        }
        let Es {
            pid,
            stream_type,
            opus_config,
        } = found.ok_or(TsError::NoAudio)?;
        let ext = match (decoded(stream_type), private) {
            (Some(ext), _) => Some(ext),
            (None, Some(0xC0..=0xDF)) if stream_type == PRIVATE => None,
            (None, _) if stream_type == PRIVATE => return Err(TsError::NoAudio),
            (None, _) => return Err(TsError::Codec(stream_type)),
        };
        src.seek(SeekFrom::Start(0)).map_err(io)?;
        Ok(Self {
            src,
            layout,
            pid,
            packet,
            at: 0,
            end: 0,
            started: false,
            substream: (stream_type == TRUEHD).then_some(TRUEHD_SUBSTREAM),
            skipping: false,
            ext,
            opus_config,
            pes_skip: if [BD_LPCM, S302M].contains(&stream_type) {
                4
            } else {
                0
            },
            pes_header,
        })
    }

    /// Reads packets until one carries audio bytes; false at the end of the file.
    fn next(&mut self) -> std::io::Result<bool> {
        loop {
            if !read_packet(&mut *self.src, &mut self.packet)? {
                return Ok(false);
            }
            let skip = self.layout.skip;
            let Some((pid, start, payload)) = parse(&self.packet[skip..]) else {
                continue;
            };
            if pid != self.pid {
                continue;
            }
            let offset = self.packet.len() - payload.len();
            if start {
                self.skipping = self
                    .substream
                    .is_some_and(|id| pes_extension_id(payload).is_some_and(|x| x != id));
            }
            if self.skipping {
                continue;
            }
            let body = match start {
                true => pes_payload(payload).map(|at| at + self.pes_skip),
                false if self.started => Some(0),
                false => None,
            };
            if let Some(body) = body {
                self.started = true;
                (self.at, self.end) = (offset + body, self.packet.len());
                if self.at < self.end {
                    return Ok(true);
                }
            }
        }
    }
}

/// Reads one packet; false at the end of the file (a last packet cut short is dropped).
fn read_packet(src: &mut dyn MediaSource, packet: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < packet.len() {
        match src.read(&mut packet[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// A packet's PID, whether a payload unit starts in it, and its payload; None for a packet
/// out of sync, with an error flagged, or with no payload.
fn parse(p: &[u8]) -> Option<(u16, bool, &[u8])> {
    if p.len() < PACKET || p[0] != 0x47 || p[1] & 0x80 != 0 {
        return None;
    }
    let start = p[1] & 0x40 != 0;
    let pid = u16::from(p[1] & 0x1F) << 8 | u16::from(p[2]);
    let control = (p[3] >> 4) & 3;
    if control & 1 == 0 {
        return None;
    }
    let at = match control & 2 {
        0 => 4,
        _ => 5 + usize::from(p[4]),
    };
    p.get(at..PACKET).map(|payload| (pid, start, payload))
}

/// The section a PSI payload starts (after its pointer field), up to its length.
fn section(payload: &[u8]) -> &[u8] {
    let Some(&pointer) = payload.first() else {
        return &[];
    };
    let s = payload.get(1 + usize::from(pointer)..).unwrap_or(&[]);
    if s.len() < 3 {
        return &[];
    }
    let len = usize::from(s[1] & 0x0F) << 8 | usize::from(s[2]);
    // Without its CRC (4 bytes) at the end.
    &s[..(3 + len).saturating_sub(4).min(s.len())]
}

/// The PMT PID of the first program of a PAT section.
fn first_program(s: &[u8]) -> Option<u16> {
    if s.first() != Some(&0x00) {
        return None;
    }
    s.get(8..)?.chunks_exact(4).find_map(|e| {
        let program = u16::from_be_bytes([e[0], e[1]]);
        // Program 0 names the network PID, not a program map.
        (program != 0).then_some(u16::from(e[2] & 0x1F) << 8 | u16::from(e[3]))
    })
}

/// An elementary stream of a program map.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Es {
    pid: u16,
    /// Its stream type, or for a private stream the type a descriptor names.
    stream_type: u8,
    /// Opus's channel configuration, from its extension descriptor.
    opus_config: Option<u8>,
}

/// A PMT section's first audio stream, preferring one we decode.
fn first_audio(s: &[u8]) -> Option<Es> {
    if s.first() != Some(&0x02) || s.len() < 12 {
        return None;
    }
    let info = usize::from(s[10] & 0x0F) << 8 | usize::from(s[11]);
    let mut rest = s.get(12 + info..)?;
    let mut streams = Vec::new();
    while rest.len() >= 5 {
        let stream_type = rest[0];
        let pid = u16::from(rest[1] & 0x1F) << 8 | u16::from(rest[2]);
        let es_info = usize::from(rest[3] & 0x0F) << 8 | usize::from(rest[4]);
        let descriptors = rest.get(5..5 + es_info).unwrap_or(&[]);
        streams.push(Es {
            pid,
            stream_type: private_type(stream_type, descriptors),
            opus_config: crate::ts_opus::channel_config(descriptors),
        });
        rest = rest.get(5 + es_info..).unwrap_or(&[]);
    }
    let ours = streams.iter().find(|s| decoded(s.stream_type).is_some());
    ours.or_else(|| streams.iter().find(|s| audio_type(s.stream_type)))
        .or_else(|| streams.iter().find(|s| s.stream_type == PRIVATE))
        .copied()
}

/// The ATSC stream type of a private stream (0x06: DVB's way) that a descriptor names
/// AC-3 (DVB's descriptor 0x6A, or a registration descriptor's "AC-3"), E-AC-3 (0x7A,
/// "EAC3") or DTS (0x7B, "DTS1" to "DTS3"), or [`OPUS`] ("Opus"); other streams' types as
/// they are.
fn private_type(stream_type: u8, mut descriptors: &[u8]) -> u8 {
    if stream_type != PRIVATE {
        return stream_type;
    }
    while let [tag, len, rest @ ..] = descriptors {
        let body = rest.get(..usize::from(*len)).unwrap_or(rest);
        match (tag, body) {
            (0x6A, _) | (0x05, [b'A', b'C', b'-', b'3', ..]) => return 0x81,
            (0x7A, _) | (0x05, [b'E', b'A', b'C', b'3', ..]) => return 0x87,
            (0x7B, _) | (0x05, [b'D', b'T', b'S', b'1'..=b'3', ..]) => return 0x82,
            (0x05, [b'O', b'p', b'u', b's', ..]) => return OPUS,
            (0x05, [b'B', b'S', b'S', b'D', ..]) => return S302M,
            _ => {}
        }
        descriptors = rest.get(usize::from(*len)..).unwrap_or(&[]);
    }
    stream_type
}

/// A PES packet's extension stream id (ISO 13818-1's `stream_id_extension`), where its
/// header has one: Blu-ray's TrueHD (0x72) and its AC-3 copy (0x76) share a PID.
fn pes_extension_id(payload: &[u8]) -> Option<u8> {
    if payload.get(..3)? != [0, 0, 1] || *payload.get(3)? != 0xFD {
        return None;
    }
    let flags = *payload.get(7)?;
    // PTS, DTS, ESCR, ES rate, trick mode, additional copy info, CRC: their bytes.
    let sizes = [
        (0x80, 5),
        (0x40, 5),
        (0x20, 6),
        (0x10, 3),
        (0x08, 1),
        (0x04, 1),
        (0x02, 2),
    ];
    let mut at = 9 + sizes
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| n)
        .sum::<usize>();
    if flags & 0x01 == 0 {
        return None;
    }
    let ext = *payload.get(at)?;
    at += 1;
    // Private data, pack header, sequence counter, P-STD buffer.
    if ext & 0x80 != 0 {
        at += 16;
    }
    if ext & 0x40 != 0 {
        at += 1 + usize::from(*payload.get(at)?);
    }
    at += if ext & 0x20 != 0 { 2 } else { 0 } + if ext & 0x10 != 0 { 2 } else { 0 };
    if ext & 0x01 == 0 {
        return None;
    }
    // The second extension's length, then (its flag clear) the stream id extension.
    let id = *payload.get(at + 1)?;
    (id & 0x80 == 0).then_some(id & 0x7F)
}

/// Where a PES packet's payload starts in `payload` (after its header); None for a
/// payload that is not a PES packet.
fn pes_payload(payload: &[u8]) -> Option<usize> {
    if payload.len() < 9 || payload[..3] != [0, 0, 1] {
        return None;
    }
    Some(9 + usize::from(payload[8])).filter(|&at| at <= payload.len())
}

impl Read for TsAudio {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.at == self.end && !self.next()? {
            return Ok(0);
        }
        let n = (self.end - self.at).min(buf.len());
        buf[..n].copy_from_slice(&self.packet[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A 188-byte packet of `pid` carrying `payload` (padded by an adaptation field).
    fn packet(pid: u16, start: bool, payload: &[u8]) -> Vec<u8> {
        assert!(payload.len() <= 182);
        let stuffing = 184 - payload.len();
        let mut p = vec![0x47, (start as u8) << 6 | (pid >> 8) as u8, pid as u8];
        match stuffing {
            0 => p.push(0x10),
            n => {
                p.push(0x30);
                p.push((n - 1) as u8);
                if n > 1 {
                    p.push(0);
                    p.resize(p.len() + n - 2, 0xFF);
                }
            }
        }
        p.extend_from_slice(payload);
        assert_eq!(p.len(), 188);
        p
    }

    fn psi(table: &[u8]) -> Vec<u8> {
        let mut s = vec![0u8];
        s.extend_from_slice(table);
        s.extend_from_slice(&[0; 4]); // CRC, unchecked
        s
    }

    /// A stream: PAT, PMT (a video stream, then audio of `stream_type` on PID 0x101), then
    /// the audio's PES packets holding `a` (split over two packets) and `b`, and video.
    fn stream(stream_type: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
        let pat = [0x00, 0xB0, 13, 0, 1, 0xC1, 0, 0, 0, 1, 0xF0, 0x00]; // map on 0x1000
        let pmt = [
            0x02,
            0xB0,
            23,
            0,
            1,
            0xC1,
            0,
            0,
            0xE1,
            0x00,
            0xF0,
            0, // header, no info
            0x1B,
            0xE1,
            0x00,
            0xF0,
            0, // H.264 on 0x100
            stream_type,
            0xE1,
            0x01,
            0xF0,
            0, // audio on 0x101
        ];
        let pes = |body: &[u8]| {
            [
                &[0, 0, 1, 0xC0, 0, 0, 0x80, 0x80, 5, 1, 2, 3, 4, 5][..],
                body,
            ]
            .concat()
        };
        let mut s = Vec::new();
        s.extend(packet(0, true, &psi(&pat)));
        s.extend(packet(0x100, true, &[9; 100])); // video before the map: skipped
        s.extend(packet(0x1000, true, &psi(&pmt)));
        s.extend(packet(0x101, false, &[8; 20])); // the tail of a PES packet begun earlier
        let (a1, a2) = a.split_at(a.len() / 2);
        s.extend(packet(0x101, true, &pes(a1)));
        s.extend(packet(0x100, true, &[9; 150]));
        s.extend(packet(0x101, false, a2));
        s.extend(packet(0x101, true, &pes(b)));
        s
    }

    /// A Blu-ray PES header (stream id 0xFD) whose extension names the substream `id`.
    fn extended_pes(id: u8, body: &[u8]) -> Vec<u8> {
        // PTS, and the extension: flag 2 only, its length 1, then the id.
        let header = [0x80, 0x81, 5 + 1 + 2, 0x21, 0, 1, 0, 1, 0x01, 0x81, id];
        [&[0, 0, 1, 0xFD, 0, 0][..], &header, body].concat()
    }

    #[test]
    fn truehd_pes_packets_are_told_from_their_ac3_copys() {
        assert_eq!(pes_extension_id(&extended_pes(0x72, &[1])), Some(0x72));
        assert_eq!(pes_extension_id(&extended_pes(0x76, &[1])), Some(0x76));
        assert_eq!(pes_payload(&extended_pes(0x72, &[1, 2])), Some(17));
        assert_eq!(
            pes_extension_id(&[0, 0, 1, 0xC0, 0, 0, 0x80, 0x80, 5, 1, 2, 3, 4, 5]),
            None
        );
        assert_eq!(pes_extension_id(&extended_pes(0x72, &[])[..12]), None);
    }

    /// Blu-ray's TrueHD stream: its units' PES packets (substream 0x72, the first split
    /// over two TS packets) and its AC-3 copy's (0x76) in turn on one PID; only the
    /// TrueHD bytes come out, for the TrueHD reader.
    #[test]
    fn blu_ray_truehd_comes_without_its_ac3_copy() {
        let mut file = stream(TRUEHD, &[], &[]);
        file.truncate(3 * 188); // the PAT, the video, the PMT
        let thd1 = extended_pes(0x72, &[1; 300]);
        let (first, rest) = thd1.split_at(150);
        file.extend(packet(0x101, true, first));
        file.extend(packet(0x101, false, rest));
        file.extend(packet(
            0x101,
            true,
            &extended_pes(0x76, &[0x0B, 0x77, 9, 9]),
        ));
        file.extend(packet(0x101, false, &[9; 100])); // the rest of the AC-3 packet
        file.extend(packet(0x101, true, &extended_pes(0x72, &[2; 40])));
        let (out, ext) = read_all(file).unwrap();
        assert_eq!(out, [vec![1; 300], vec![2; 40]].concat());
        assert_eq!(ext, Some("thd"));
    }

    fn read_all(file: Vec<u8>) -> Result<(Vec<u8>, Option<&'static str>), TsError> {
        let l = layout(&file).expect("a transport stream");
        let mut t = TsAudio::open(Box::new(Cursor::new(file)), l)?;
        let mut out = Vec::new();
        t.read_to_end(&mut out).unwrap();
        Ok((out, t.ext))
    }

    #[test]
    fn the_audio_streams_pes_payloads_read_in_order() {
        let (a, b) = ([1u8, 2, 3, 4, 5, 6], [7u8, 8]);
        let (out, ext) = read_all(stream(0x0F, &a, &b)).unwrap();
        assert_eq!(out, [1u8, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(ext, Some("aac"));
        assert_eq!(read_all(stream(0x03, &a, &b)).unwrap().1, Some("mp3"));
        // A private stream whose PES stream id is MPEG audio's: symphonia tells which.
        assert_eq!(read_all(stream(PRIVATE, &a, &b)).unwrap(), (out, None));
    }

    #[test]
    fn m2ts_packets_carry_four_more_bytes() {
        let ts = stream(0x04, &[1, 2], &[3]);
        let m2ts: Vec<u8> = ts
            .chunks(188)
            .flat_map(|p| [&[0u8; 4][..], p].concat())
            .collect();
        assert_eq!(
            layout(&m2ts),
            Some(Layout {
                stride: 192,
                skip: 4
            })
        );
        assert_eq!(read_all(m2ts).unwrap().0, vec![1, 2, 3]);
    }

    #[test]
    fn dvb_descriptors_name_dolby_streams() {
        assert_eq!(
            private_type(PRIVATE, &[0x0A, 4, b'e', b'n', b'g', 0, 0x6A, 1, 0]),
            0x81
        );
        assert_eq!(
            private_type(PRIVATE, &[0x05, 4, b'A', b'C', b'-', b'3']),
            0x81
        );
        assert_eq!(private_type(PRIVATE, &[0x7A, 0]), 0x87);
        assert_eq!(private_type(PRIVATE, &[0x7B, 0]), 0x82);
        assert_eq!(
            private_type(PRIVATE, &[0x05, 4, b'D', b'T', b'S', b'2']),
            0x82
        );
        assert_eq!(
            private_type(PRIVATE, &[0x05, 4, b'O', b'p', b'u', b's']),
            OPUS
        );
        // Subtitles, a descriptor cut short, and a stream type of its own.
        assert_eq!(private_type(PRIVATE, &[0x59, 8, 0, 0]), PRIVATE);
        assert_eq!(private_type(PRIVATE, &[0x6A]), PRIVATE);
        assert_eq!(private_type(0x0F, &[0x6A, 0]), 0x0F);
    }

    #[test]
    fn other_codecs_and_no_audio_are_named() {
        assert_eq!(
            read_all(stream(0x84, &[1], &[2])).unwrap_err(),
            TsError::Codec(0x84)
        );
        assert_eq!(
            read_all(stream(0x1B, &[1], &[2])).unwrap_err(),
            TsError::NoAudio
        );
        assert_eq!(layout(b"GIF89a not a stream"), None);
    }
}
