//! MXF (`.mxf`: broadcast and professional cameras' files: Sony XDCAM, Panasonic P2,
//! Canon XF, Avid's OP-Atom media, news and archive material), which symphonia does not
//! read. The file is a run of KLV packets (a 16-byte SMPTE key, a BER length, the value):
//! partition packs, header metadata sets, index tables and essence elements. Only the
//! keys and lengths are read to walk it (the video is never read); from the header
//! metadata, the tracks (their IDs and essence track numbers) and the sound descriptors
//! (rate, channels, bits, the track each is linked to). The first sound track's
//! elements, in file order (one per frame, or one for the whole clip), are its PCM
//! samples (SMPTE 382M's BWF and AES3 mappings: little-endian, interleaved), handed on
//! behind a WAV header by `avi.rs`'s chunk reader, as FFmpeg takes them. SMPTE D-10's
//! (Sony IMX's) eight-channel AES3 elements are turned into PCM as they are read.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::avi::AviAudio;
use crate::codec::Pending;

/// SMPTE's key prefix, which every KLV key starts with.
const UL: [u8; 4] = [0x06, 0x0E, 0x2B, 0x34];
/// Most KLV packets walked (an hour of frame-wrapped essence at 60 frames a second with
/// eight sound tracks holds ~2 million).
const MAX_PACKETS: usize = 1 << 24;
/// Largest header metadata set read.
const MAX_SET: u64 = 1 << 16;

/// Essence element item types: the Generic Container's sound item, and the SMPTE D-10
/// content package's (its element type 0x10: eight-channel AES3).
const GC_SOUND: u8 = 0x16;
const CP_SOUND: u8 = 0x06;
const D10_AES3: u8 = 0x10;

/// Header metadata sets read, by the key's 15th byte: timeline, static and event tracks;
/// generic sound, AES3 and WAVE PCM descriptors.
const TRACKS: [u8; 3] = [0x3B, 0x3A, 0x39];
const SOUND_DESCRIPTORS: [u8; 3] = [0x42, 0x47, 0x48];

/// Whether a file starting with `head` is an MXF file: it starts with a header partition
/// pack.
pub(crate) fn is_mxf(head: &[u8]) -> bool {
    head.len() >= 16
        && head[..4] == UL
        && head[4..8] == [0x02, 0x05, 0x01, 0x01]
        && head[8..13] == [0x0D, 0x01, 0x02, 0x01, 0x01]
        && head[13] == 0x02
}

/// Why an MXF file gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum MxfError {
    /// No sound track.
    NoAudio,
    /// A sound track in a coding sotto does not read there: what it is.
    Codec(String),
    /// The packets are malformed or cut short.
    Corrupt(String),
}

/// What a sound descriptor says.
#[derive(Debug, Default, Clone, PartialEq)]
struct Sound {
    /// The track (its ID) the descriptor describes.
    linked: Option<u32>,
    rate: Option<(u32, u32)>,
    channels: u32,
    bits: u32,
    block_align: Option<u16>,
    /// The SoundEssenceCompression label, where there is one.
    compression: Option<[u8; 16]>,
}

/// The first sound track of `src` (an MXF file at its start), as the WAV file its
/// elements make.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<Box<dyn Read + Send + Sync>, MxfError> {
    let corrupt = |e: std::io::Error| MxfError::Corrupt(e.to_string());
    let len = match src.byte_len() {
        Some(n) => n,
        None => src.seek(SeekFrom::End(0)).map_err(corrupt)?,
    };
    let mut tracks: Vec<(u32, u32)> = Vec::new();
    let mut sounds: Vec<Sound> = Vec::new();
    // The chosen track's number (the first whose element comes first), its item and
    // element types, and its elements.
    let mut chosen: Option<(u32, u8)> = None;
    let mut chunks: Vec<(u64, u64)> = Vec::new();
    let mut at = 0u64;
    for _ in 0..MAX_PACKETS {
        let Some((key, body, size)) = packet(&mut *src, at, len).map_err(corrupt)? else {
            break;
        };
        if key[4..6] == [0x02, 0x53] && key[8..12] == [0x0D, 0x01, 0x01, 0x01] {
            // A header metadata set (two-byte local tags and lengths).
            let kind = key[14];
            if (TRACKS.contains(&kind) || SOUND_DESCRIPTORS.contains(&kind)) && size <= MAX_SET {
                let mut set = vec![0u8; size as usize];
                src.seek(SeekFrom::Start(body))
                    .and_then(|_| src.read_exact(&mut set))
                    .map_err(corrupt)?;
                if TRACKS.contains(&kind) {
                    tracks.extend(track(&set));
                } else {
                    sounds.push(sound(&set));
                }
            }
        } else if key[4..7] == [0x01, 0x02, 0x01] && key[8..12] == [0x0D, 0x01, 0x03, 0x01] {
            // An essence element: its track number is the key's last four bytes.
            let item = key[12];
            if item == GC_SOUND || item == CP_SOUND {
                let number = u32::from_be_bytes(key[12..16].try_into().expect("4 bytes"));
                if chosen.get_or_insert((number, key[14])).0 == number {
                    chunks.push((body, size));
                }
            }
        }
        at = body + size;
    }
    let Some((number, element)) = chosen else {
        return Err(MxfError::NoAudio);
    };
    // The descriptor linked to the chosen track; else the only one, or the first where
    // all agree (a camera's eight mono tracks).
    let id = tracks.iter().find(|t| t.1 == number).map(|t| t.0);
    let desc = sounds
        .iter()
        .find(|s| s.linked.is_some() && s.linked == id)
        .or_else(|| {
            let first = sounds.first()?;
            let alike = |s: &Sound| {
                (s.rate, s.channels, s.bits) == (first.rate, first.channels, first.bits)
            };
            sounds.iter().all(alike).then_some(first)
        })
        .ok_or_else(|| MxfError::Corrupt("no sound descriptor for the sound track".into()))?;
    let d10 = number >> 24 == u32::from(CP_SOUND) && element == D10_AES3;
    let format = wave_format(desc, d10)?;
    src.seek(SeekFrom::Start(0)).map_err(corrupt)?;
    if d10 {
        // Each element: a 4-byte header, then 32 bytes a sample.
        let frame = u64::from(format.channels) * u64::from(format.bits / 8);
        let out = chunks
            .iter()
            .map(|c| c.1.saturating_sub(4) / 32 * frame)
            .sum();
        let header = crate::avi::wav_header(&format.bytes(), out);
        let d10 = D10Aes3::new(src, chunks, usize::from(format.channels), format.bits == 24);
        return Ok(Box::new(std::io::Cursor::new(header).chain(d10)));
    }
    let data = chunks.iter().map(|c| c.1).sum::<u64>();
    let header = crate::avi::wav_header(&format.bytes(), data);
    Ok(Box::new(AviAudio::with_header(src, header, chunks, "wav")))
}

/// The KLV packet at `at`: its key, where its value starts, and its length (cut to the
/// file's); None at the end, or where the next bytes are not a key.
fn packet(
    src: &mut dyn MediaSource,
    at: u64,
    len: u64,
) -> std::io::Result<Option<([u8; 16], u64, u64)>> {
    if at + 17 > len {
        return Ok(None);
    }
    let mut head = [0u8; 25];
    let n = (len - at).min(25) as usize;
    src.seek(SeekFrom::Start(at))?;
    src.read_exact(&mut head[..n])?;
    let key: [u8; 16] = head[..16].try_into().expect("16 bytes");
    if key[..4] != UL {
        return Ok(None);
    }
    // BER: a short form below 0x80, else 0x80 | the count of big-endian bytes after it.
    let (size, ber) = match head[16] {
        b if b < 0x80 => (u64::from(b), 1),
        b => {
            let count = usize::from(b & 0x7F);
            if count == 0 || count > 8 || 17 + count > n {
                return Ok(None);
            }
            let v = head[17..17 + count]
                .iter()
                .fold(0u64, |v, &x| v << 8 | u64::from(x));
            (v, 1 + count)
        }
    };
    let body = at + 16 + ber as u64;
    Ok(Some((key, body, size.min(len - body.min(len)))))
}

/// A local set's (tag, value) pairs.
fn local_tags(set: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = set;
    std::iter::from_fn(move || {
        let tag = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?);
        let n = usize::from(u16::from_be_bytes(rest.get(2..4)?.try_into().ok()?));
        let value = rest.get(4..4 + n)?;
        rest = &rest[4 + n..];
        Some((tag, value))
    })
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

/// A track set's (TrackID, TrackNumber), where it has both and the number is an
/// essence track's.
fn track(set: &[u8]) -> Option<(u32, u32)> {
    let (mut id, mut number) = (None, None);
    for (tag, v) in local_tags(set) {
        match tag {
            0x4801 => id = be32(v),
            0x4804 => number = be32(v),
            _ => {}
        }
    }
    Some((id?, number.filter(|&n| n != 0)?))
}

/// A sound descriptor's fields.
fn sound(set: &[u8]) -> Sound {
    let mut s = Sound::default();
    for (tag, v) in local_tags(set) {
        match tag {
            0x3006 => s.linked = be32(v),
            0x3D03 => s.rate = be32(v).zip(v.get(4..).and_then(be32)),
            0x3D07 => s.channels = be32(v).unwrap_or(0),
            0x3D01 => s.bits = be32(v).unwrap_or(0),
            0x3D0A => s.block_align = v.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])),
            0x3D06 => s.compression = v.get(..16).and_then(|b| b.try_into().ok()),
            _ => {}
        }
    }
    s
}

/// The PCM a sound track decodes to, as a WAVEFORMATEX says it.
struct WaveFormat {
    rate: u32,
    channels: u16,
    /// Bits a sample takes in the output (8, 16, 24 or 32).
    bits: u16,
}

impl WaveFormat {
    /// The 16-byte WAVEFORMATEX (PCM).
    fn bytes(&self) -> Vec<u8> {
        let align = self.channels * self.bits / 8;
        let mut f = Vec::with_capacity(16);
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&self.channels.to_le_bytes());
        f.extend_from_slice(&self.rate.to_le_bytes());
        f.extend_from_slice(&(self.rate * u32::from(align)).to_le_bytes());
        f.extend_from_slice(&align.to_le_bytes());
        f.extend_from_slice(&self.bits.to_le_bytes());
        f
    }
}

/// The PCM a descriptor describes; an error for compressed sound, or fields out of range.
fn wave_format(s: &Sound, d10: bool) -> Result<WaveFormat, MxfError> {
    // The PCM family of sound codings (SMPTE's 04.02.02.01 labels), little-endian but for
    // 0x7E.
    if let Some(c) = s.compression {
        let pcm = c[..4] == UL && c[8..12] == [0x04, 0x02, 0x02, 0x01];
        if !pcm || c[12] == 0x7E {
            return Err(MxfError::Codec(format!(
                "sound coded as {} (sotto decodes PCM there)",
                c.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(".")
            )));
        }
    }
    let rate = match s.rate {
        Some((n, d)) if d > 0 && n % d == 0 && (1..=768_000).contains(&(n / d)) => n / d,
        other => return Err(MxfError::Corrupt(format!("sound at a rate of {other:?}"))),
    };
    // D-10's elements hold eight channels at most.
    let most = if d10 { 8 } else { 32 };
    if !(1..=most).contains(&s.channels) {
        return Err(MxfError::Corrupt(format!("{} sound channels", s.channels)));
    }
    let channels = s.channels as u16;
    let bits = if d10 {
        if s.bits > 16 {
            24
        } else {
            16
        }
    } else {
        // The bytes a sample takes: the block alignment's share where it is given.
        let bytes = match s.block_align {
            Some(a) if a > 0 && a % channels == 0 => a / channels,
            _ => s.bits.div_ceil(8) as u16,
        };
        if !(1..=4).contains(&bytes) {
            return Err(MxfError::Codec(format!("PCM of {} bits", s.bits)));
        }
        bytes * 8
    };
    Ok(WaveFormat {
        rate,
        channels,
        bits,
    })
}

/// SMPTE D-10's sound elements (SMPTE 331M) as little-endian PCM: each element a 4-byte
/// header, then for every sample eight 32-bit AES3 subframes, of which the first
/// `channels` carry the audio in bits 4 to 27.
struct D10Aes3 {
    src: Box<dyn MediaSource>,
    chunks: Vec<(u64, u64)>,
    at: usize,
    channels: usize,
    wide: bool,
    element: Vec<u8>,
    pending: Pending,
}

impl D10Aes3 {
    fn new(
        src: Box<dyn MediaSource>,
        chunks: Vec<(u64, u64)>,
        channels: usize,
        wide: bool,
    ) -> Self {
        Self {
            src,
            chunks,
            at: 0,
            channels,
            wide,
            element: Vec::new(),
            pending: Pending::new(Vec::new()),
        }
    }

    /// Converts the next element into `out`; false at the end.
    fn next_element(&mut self) -> std::io::Result<bool> {
        let Some(&(at, len)) = self.chunks.get(self.at) else {
            return Ok(false);
        };
        self.at += 1;
        self.element.clear();
        self.src.seek(SeekFrom::Start(at))?;
        (&mut self.src)
            .take(len.min(1 << 20))
            .read_to_end(&mut self.element)?;
        let out = self.pending.refill_bytes();
        for sample in self.element.get(4..).unwrap_or(&[]).chunks_exact(32) {
            for word in sample.chunks_exact(4).take(self.channels) {
                let v = u32::from_le_bytes(word.try_into().expect("4 bytes"));
                if self.wide {
                    out.extend_from_slice(&((v >> 4) & 0xFF_FFFF).to_le_bytes()[..3]);
                } else {
                    out.extend_from_slice(&(((v >> 12) & 0xFFFF) as u16).to_le_bytes());
                }
            }
        }
        Ok(true)
    }
}

impl Read for D10Aes3 {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.pending.read(buf);
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            if !self.next_element()? {
                return Ok(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn klv(key: [u8; 16], value: &[u8]) -> Vec<u8> {
        let mut v = key.to_vec();
        // The long BER form, as MXF writers use.
        v.push(0x83);
        v.extend_from_slice(&(value.len() as u32).to_be_bytes()[1..]);
        v.extend_from_slice(value);
        v
    }

    fn set_key(kind: u8) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..4].copy_from_slice(&UL);
        k[4..14].copy_from_slice(&[0x02, 0x53, 0x01, 0x01, 0x0D, 0x01, 0x01, 0x01, 0x01, 0x01]);
        k[14] = kind;
        k
    }

    fn tag(t: u16, v: &[u8]) -> Vec<u8> {
        [&t.to_be_bytes()[..], &(v.len() as u16).to_be_bytes(), v].concat()
    }

    fn essence(number: u32) -> [u8; 16] {
        let mut k = [0u8; 16];
        k[..12].copy_from_slice(&[
            0x06, 0x0E, 0x2B, 0x34, 0x01, 0x02, 0x01, 0x01, 0x0D, 0x01, 0x03, 0x01,
        ]);
        k[12..].copy_from_slice(&number.to_be_bytes());
        k
    }

    fn descriptor(kind: u8, linked: u32, channels: u32, bits: u32) -> Vec<u8> {
        let set = [
            tag(0x3006, &linked.to_be_bytes()),
            tag(0x3D03, &[0, 0, 0xBB, 0x80, 0, 0, 0, 1]),
            tag(0x3D07, &channels.to_be_bytes()),
            tag(0x3D01, &bits.to_be_bytes()),
        ]
        .concat();
        klv(set_key(kind), &set)
    }

    fn track_set(id: u32, number: u32) -> Vec<u8> {
        let set = [
            tag(0x4801, &id.to_be_bytes()),
            tag(0x4804, &number.to_be_bytes()),
        ]
        .concat();
        klv(set_key(0x3B), &set)
    }

    /// A header partition pack, then `rest`.
    fn file(rest: &[Vec<u8>]) -> Vec<u8> {
        let mut key = [0u8; 16];
        key[..14].copy_from_slice(&[
            0x06, 0x0E, 0x2B, 0x34, 0x02, 0x05, 0x01, 0x01, 0x0D, 0x01, 0x02, 0x01, 0x01, 0x02,
        ]);
        key[14] = 0x04;
        [klv(key, &[0; 88]), rest.concat()].concat()
    }

    fn decode(bytes: Vec<u8>) -> Result<Vec<u8>, MxfError> {
        let mut out = Vec::new();
        open(Box::new(std::io::Cursor::new(bytes)))?
            .read_to_end(&mut out)
            .unwrap();
        Ok(out)
    }

    #[test]
    fn the_first_sound_tracks_elements_follow_a_wav_header() {
        // Picture, then two mono sound tracks (16-bit and 24-bit), element by element; the
        // second descriptor is the first track's.
        let picture = essence(0x1501_0500);
        let (first, second) = (0x1601_0101, 0x1601_0102);
        let bytes = file(&[
            track_set(2, first),
            track_set(3, second),
            descriptor(0x48, 3, 1, 24),
            descriptor(0x48, 2, 1, 16),
            klv(picture, &[9; 40]),
            klv(essence(first), &[1, 0, 2, 0]),
            klv(essence(second), &[7, 7, 7]),
            klv(picture, &[9; 40]),
            klv(essence(first), &[3, 0]),
            klv(essence(second), &[8, 8, 8]),
        ]);
        assert!(is_mxf(&bytes));
        let wav = decode(bytes).unwrap();
        let fmt = &wav[20..36];
        assert_eq!(u16::from_le_bytes([fmt[2], fmt[3]]), 1, "mono");
        assert_eq!(u32::from_le_bytes(fmt[4..8].try_into().unwrap()), 48_000);
        assert_eq!(
            u16::from_le_bytes([fmt[14], fmt[15]]),
            16,
            "the linked descriptor's bits"
        );
        assert_eq!(&wav[36..44], b"data\x06\0\0\0");
        assert_eq!(&wav[44..], &[1, 0, 2, 0, 3, 0]);
    }

    #[test]
    fn what_is_not_pcm_sound_is_named_and_damage_is_an_error_not_a_panic() {
        let picture_only = file(&[klv(essence(0x1501_0500), &[0; 8])]);
        assert_eq!(decode(picture_only).unwrap_err(), MxfError::NoAudio);
        // Sound whose descriptor says it is compressed (MPEG audio's label).
        let mut set = vec![
            tag(0x3D03, &[0, 0, 0xBB, 0x80, 0, 0, 0, 1]),
            tag(0x3D07, &1u32.to_be_bytes()),
            tag(0x3D01, &16u32.to_be_bytes()),
        ];
        let mpeg = [
            0x06, 0x0E, 0x2B, 0x34, 0x04, 0x01, 0x01, 0x01, 0x04, 0x02, 0x02, 0x02, 0x03, 0x01,
            0x01, 0x00,
        ];
        set.push(tag(0x3D06, &mpeg));
        let compressed = file(&[
            klv(set_key(0x42), &set.concat()),
            klv(essence(0x1601_0101), &[0; 8]),
        ]);
        match decode(compressed) {
            Err(MxfError::Codec(what)) => assert!(what.contains("04.02.02.02.03.01"), "{what}"),
            other => panic!("{other:?}"),
        }
        // No descriptor at all.
        let bare = file(&[klv(essence(0x1601_0101), &[0; 8])]);
        assert!(matches!(decode(bare), Err(MxfError::Corrupt(_))));
        // Cut anywhere: an error or what there is, never a panic.
        let whole = file(&[
            track_set(2, 0x1601_0101),
            descriptor(0x47, 2, 2, 24),
            klv(essence(0x1601_0101), &[5; 60]),
        ]);
        for cut in 0..whole.len() {
            let _ = decode(whole[..cut].to_vec());
        }
    }

    #[test]
    fn d10_aes3_subframes_become_pcm() {
        // A 4-byte header, then two samples of eight subframes; two channels used.
        let word = |v: u32| v.to_le_bytes();
        let mut element = vec![0u8; 4];
        for (l, r) in [(0x1234_5670u32, 0x0ABC_DEF0u32), (0x0FFF_FFF0, 0x0000_0010)] {
            element.extend_from_slice(&word(l));
            element.extend_from_slice(&word(r));
            element.extend_from_slice(&[0; 24]);
        }
        let bytes = file(&[
            track_set(2, 0x0601_1000),
            descriptor(0x47, 2, 2, 24),
            klv(essence(0x0601_1000), &element),
        ]);
        let wav = decode(bytes).unwrap();
        assert_eq!(u16::from_le_bytes([wav[34], wav[35]]), 24);
        assert_eq!(
            &wav[44..],
            &[0x67, 0x45, 0x23, 0xEF, 0xCD, 0xAB, 0xFF, 0xFF, 0xFF, 0x01, 0x00, 0x00]
        );
    }
}
