//! What symphonia's reader drops of a Matroska file's audio tracks: their channel counts,
//! which it keeps only where it names a layout for them (1, 2, 3 and 6 channels), and its
//! PCM decoder needs (PCM of 4, 5, 7 or 8 channels in Matroska, a Blu-ray's 7.1 LPCM
//! remuxed, could not be decoded without them); the codec private data of tracks in codecs
//! it leaves without a decoder (`A_MS/ACM`: Windows' audio codecs, WMA among them;
//! `A_ALAC`); and the `DiscardPadding` of a track's last block, the encoder's padding after
//! the audio's end (Opus, MP3 and AAC as FFmpeg writes them), which it reads and drops.

use std::io::{Read, Seek, SeekFrom};

/// Bytes read from the file's start for its track list, at most.
const HEAD: u64 = 1 << 20;

const EBML: u32 = 0x1A45_DFA3;
const SEGMENT: u32 = 0x1853_8067;
const TRACKS: u32 = 0x1654_AE6B;
const TRACK_ENTRY: u32 = 0xAE;
const TRACK_NUMBER: u32 = 0xD7;
const CODEC_ID: u32 = 0x86;
const CODEC_PRIVATE: u32 = 0x63A2;
const AUDIO: u32 = 0xE1;
const CHANNELS: u32 = 0x9F;
const BIT_DEPTH: u32 = 0x6264;
const CLUSTER: u32 = 0x1F43_B675;
const SIMPLE_BLOCK: u32 = 0xA3;
const BLOCK_GROUP: u32 = 0xA0;
const BLOCK: u32 = 0xA1;
const DISCARD_PADDING: u32 = 0x75A2;

/// Most top-level elements walked for the last clusters (a two-hour film holds a few
/// thousand clusters).
const MAX_ELEMENTS: usize = 1 << 20;
/// Last clusters searched for a track's last block, and the largest read.
const LAST_CLUSTERS: usize = 4;
const MAX_CLUSTER: u64 = 64 << 20;

/// Whether `head` starts as a Matroska (or WebM) file does.
pub(crate) fn is_matroska(head: &[u8]) -> bool {
    head.starts_with(&EBML.to_be_bytes())
}

/// An audio track's number, its codec, its channel count where it says it, its codec
/// private data, and the padding to drop after its last block.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AudioTrack {
    pub(crate) number: u64,
    pub(crate) codec: Vec<u8>,
    pub(crate) channels: Option<u64>,
    /// Bits a sample, where it says (PCM's).
    pub(crate) bits: Option<u64>,
    pub(crate) private: Option<Vec<u8>>,
    /// The last block's `DiscardPadding`, in nanoseconds, where it has one.
    pub(crate) end_padding_ns: Option<u64>,
}

impl AudioTrack {
    /// The codec private data, where the codec is `codec`.
    pub(crate) fn private_of(&self, codec: &[u8]) -> Option<&[u8]> {
        (self.codec == codec).then_some(self.private.as_deref()?)
    }

    /// The codec as an error names it: its CodecID, and for `A_MS/ACM` the WAVE format.
    pub(crate) fn codec_name(&self) -> String {
        let id = String::from_utf8_lossy(&self.codec);
        match self
            .private_of(b"A_MS/ACM")
            .and_then(crate::avi::format_tag)
        {
            Some(tag) => format!("Matroska codec {id} (WAVE format {tag:#06x})"),
            None => format!("Matroska codec {id}"),
        }
    }
}

/// The audio tracks; none for a file whose track list is not in its first MiB. Leaves
/// `src` at its start.
pub(crate) fn audio_tracks<S: Read + Seek + ?Sized>(src: &mut S) -> Vec<AudioTrack> {
    let mut head = Vec::new();
    let _ = (&mut *src).take(HEAD).read_to_end(&mut head);
    let mut tracks = parse(&head).unwrap_or_default();
    if !tracks.is_empty() {
        for (number, padding) in last_blocks(src).unwrap_or_default() {
            if let Some(t) = tracks.iter_mut().find(|t| t.number == number) {
                t.end_padding_ns = padding;
            }
        }
    }
    match src.seek(SeekFrom::Start(0)) {
        Ok(_) => tracks,
        Err(_) => Vec::new(),
    }
}

/// Each track's last block in the file's last clusters, with its `DiscardPadding` where it
/// is in a block group that has one. None where the clusters cannot be walked by their
/// sizes (a live recording's clusters of unknown size, say: such files pad nothing).
fn last_blocks<S: Read + Seek + ?Sized>(src: &mut S) -> Option<Vec<(u64, Option<u64>)>> {
    let file_len = src.seek(SeekFrom::End(0)).ok()?;
    // The EBML header, then the segment's header.
    let (_, ebml_size, header) = header_at(src, 0)?;
    let segment_at = header as u64 + ebml_size?;
    let (id, segment_size, header) = header_at(src, segment_at)?;
    if id != SEGMENT {
        return None;
    }
    let start = segment_at + header as u64;
    let end = segment_size.map_or(file_len, |s| start.saturating_add(s).min(file_len));
    // The segment's children, by their sizes: the last clusters' bodies.
    let mut clusters: Vec<(u64, u64)> = Vec::new();
    let mut at = start;
    for _ in 0..MAX_ELEMENTS {
        if at >= end {
            break;
        }
        let Some((id, size, header)) = header_at(src, at) else {
            break;
        };
        let body = at + header as u64;
        let size = size?;
        if id == CLUSTER {
            if clusters.len() == LAST_CLUSTERS {
                clusters.remove(0);
            }
            clusters.push((body, size.min(end.saturating_sub(body))));
        }
        at = body.saturating_add(size);
    }
    let mut found: Vec<(u64, Option<u64>)> = Vec::new();
    for &(body, size) in clusters.iter().rev() {
        if size > MAX_CLUSTER {
            return None;
        }
        src.seek(SeekFrom::Start(body)).ok()?;
        let mut bytes = Vec::new();
        src.take(size).read_to_end(&mut bytes).ok()?;
        let mut last: Vec<(u64, Option<u64>)> = Vec::new();
        for (id, body) in children(&bytes) {
            let block = match id {
                SIMPLE_BLOCK => block_track(body).map(|t| (t, None)),
                BLOCK_GROUP => {
                    let mut track = None;
                    let mut padding = None;
                    for (id, field) in children(body) {
                        match id {
                            BLOCK => track = block_track(field),
                            DISCARD_PADDING => padding = int(field).filter(|&p| p > 0),
                            _ => {}
                        }
                    }
                    track.map(|t| (t, padding.map(|p| p as u64)))
                }
                _ => None,
            };
            if let Some((track, padding)) = block {
                match last.iter_mut().find(|(t, _)| *t == track) {
                    Some(entry) => entry.1 = padding,
                    None => last.push((track, padding)),
                }
            }
        }
        // A later cluster's last block of a track stands; an earlier one's fills in
        // tracks the later clusters lack.
        for entry in last {
            if !found.iter().any(|(t, _)| *t == entry.0) {
                found.push(entry);
            }
        }
    }
    Some(found)
}

/// The element header at `at`: [`element`]'s ID, size and header length.
fn header_at<S: Read + Seek + ?Sized>(src: &mut S, at: u64) -> Option<(u32, Option<u64>, usize)> {
    src.seek(SeekFrom::Start(at)).ok()?;
    let mut b = Vec::with_capacity(12);
    src.take(12).read_to_end(&mut b).ok()?;
    element(&b)
}

/// The track number a `Block` or `SimpleBlock` starts with (a variable-length integer).
fn block_track(b: &[u8]) -> Option<u64> {
    vint(b).map(|(v, _)| v)
}

/// A variable-length integer: its value (the length marker taken off) and its bytes.
fn vint(b: &[u8]) -> Option<(u64, usize)> {
    let len = b.first()?.leading_zeros() as usize + 1;
    if len > 8 {
        return None;
    }
    let raw = b
        .get(..len)?
        .iter()
        .fold(0u64, |v, &x| v << 8 | u64::from(x));
    Some((raw & ((1u64 << (7 * len)) - 1), len))
}

/// An element's ID (its marker bit kept), its body's size (None where unknown: all ones),
/// and the bytes of its header.
fn element(b: &[u8]) -> Option<(u32, Option<u64>, usize)> {
    let id_len = b.first()?.leading_zeros() as usize + 1;
    if id_len > 4 {
        return None;
    }
    let id = b
        .get(..id_len)?
        .iter()
        .fold(0u32, |v, &x| v << 8 | u32::from(x));
    let (raw, size_len) = vint(&b[id_len..])?;
    let size = (raw != (1u64 << (7 * size_len)) - 1).then_some(raw);
    Some((id, size, id_len + size_len))
}

/// The children of a body: (ID, body), up to the first whose size is unknown or that runs
/// past the bytes there are (whose body is then what there is).
fn children(mut b: &[u8]) -> impl Iterator<Item = (u32, &[u8])> {
    std::iter::from_fn(move || {
        let (id, size, header) = element(b)?;
        let body = &b[header..];
        let len = size.map_or(body.len(), |s| usize::try_from(s).unwrap_or(usize::MAX));
        let (body, rest) = body.split_at(len.min(body.len()));
        b = if size.is_some() { rest } else { &[] };
        Some((id, body))
    })
}

fn uint(b: &[u8]) -> Option<u64> {
    (b.len() <= 8).then(|| b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
}

/// A signed integer element (big-endian two's complement, 1 to 8 bytes).
fn int(b: &[u8]) -> Option<i64> {
    let v = uint(b)?;
    let bits = 8 * b.len() as u32;
    Some(match bits {
        0 => 0,
        64 => v as i64,
        _ => ((v << (64 - bits)) as i64) >> (64 - bits),
    })
}

fn parse(b: &[u8]) -> Option<Vec<AudioTrack>> {
    let mut top = children(b);
    let (id, _) = top.next()?;
    if id != EBML {
        return None;
    }
    let (id, segment) = top.next()?;
    if id != SEGMENT {
        return None;
    }
    let mut found = Vec::new();
    for (id, body) in children(segment) {
        match id {
            TRACKS => {
                for (id, entry) in children(body) {
                    if id != TRACK_ENTRY {
                        continue;
                    }
                    let (mut number, mut channels, mut bits, mut audio) = (None, None, None, false);
                    let (mut codec, mut private) = (None, None);
                    for (id, field) in children(entry) {
                        match id {
                            TRACK_NUMBER => number = uint(field),
                            CODEC_ID => codec = Some(field),
                            CODEC_PRIVATE => private = Some(field),
                            AUDIO => {
                                audio = true;
                                let of = |want: u32| {
                                    children(field)
                                        .find(|(id, _)| *id == want)
                                        .and_then(|(_, v)| uint(v))
                                };
                                (channels, bits) = (of(CHANNELS), of(BIT_DEPTH));
                            }
                            _ => {}
                        }
                    }
                    if let Some(number) = number.filter(|_| audio) {
                        found.push(AudioTrack {
                            number,
                            codec: codec.unwrap_or_default().to_vec(),
                            channels,
                            bits,
                            private: private.map(<[u8]>::to_vec),
                            end_padding_ns: None,
                        });
                    }
                }
                break;
            }
            CLUSTER => break,
            _ => {}
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(id: u32, body: &[u8]) -> Vec<u8> {
        let mut v: Vec<u8> = id
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        v.push(0x80 | body.len() as u8);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn audio_tracks_channel_counts_and_acm_formats_are_found() {
        let audio = |n: u8, ch: u8| {
            let number = el(TRACK_NUMBER, &[n]);
            let channels = el(AUDIO, &el(CHANNELS, &[ch]));
            el(TRACK_ENTRY, &[number, channels].concat())
        };
        let video = el(TRACK_ENTRY, &el(TRACK_NUMBER, &[1]));
        let wma = el(
            TRACK_ENTRY,
            &[
                el(TRACK_NUMBER, &[4]),
                el(CODEC_ID, b"A_MS/ACM"),
                el(CODEC_PRIVATE, &[0x61, 0x01]),
                el(AUDIO, &[]),
            ]
            .concat(),
        );
        let tracks = el(TRACKS, &[video, audio(2, 8), audio(3, 4), wma].concat());
        let info = el(0x1549_A966, &[1, 2, 3]);
        let segment = el(SEGMENT, &[info, tracks].concat());
        let file = [el(EBML, &[0x42, 0x86, 0x81, 1]), segment].concat();
        let track = |number, channels| AudioTrack {
            number,
            channels,
            ..Default::default()
        };
        let wma = AudioTrack {
            number: 4,
            codec: b"A_MS/ACM".to_vec(),
            private: Some(vec![0x61, 0x01]),
            ..Default::default()
        };
        assert_eq!(wma.private_of(b"A_MS/ACM"), Some(&[0x61, 0x01][..]));
        assert_eq!(wma.private_of(b"A_ALAC"), None);
        assert_eq!(
            parse(&file),
            Some(vec![track(2, Some(8)), track(3, Some(4)), wma])
        );
        assert!(is_matroska(&file));
        // Cut anywhere, or not Matroska: whatever was found, never a panic.
        for cut in 0..file.len() {
            let _ = parse(&file[..cut]);
        }
        assert_eq!(parse(b"RIFF....WAVE"), None);
    }

    #[test]
    fn the_last_blocks_padding_is_found_per_track() {
        let simple = |track: u8| el(SIMPLE_BLOCK, &[0x80 | track, 0, 0, 0x80, 1, 2]);
        let group = |track: u8, padding: &[u8]| {
            let block = el(BLOCK, &[0x80 | track, 0, 0, 0, 1, 2]);
            match padding {
                [] => el(BLOCK_GROUP, &block),
                p => el(BLOCK_GROUP, &[block, el(DISCARD_PADDING, p)].concat()),
            }
        };
        let timecode = el(0xE7, &[0]);
        let tracks = el(
            TRACKS,
            &el(
                TRACK_ENTRY,
                &[el(TRACK_NUMBER, &[1]), el(AUDIO, &[])].concat(),
            ),
        );
        let clusters = [
            el(CLUSTER, &[timecode.clone(), group(1, &[0x10])].concat()),
            // Track 2's last block; track 3's, padded by a negative amount (none).
            el(
                CLUSTER,
                &[
                    timecode.clone(),
                    simple(1),
                    group(2, &[0x02, 0x88]),
                    group(3, &[0xFF]),
                ]
                .concat(),
            ),
            // Track 1's last block, unpadded after a padded one.
            el(
                CLUSTER,
                &[timecode.clone(), group(1, &[0x20]), simple(1)].concat(),
            ),
        ];
        let segment = el(SEGMENT, &[tracks, clusters.concat()].concat());
        let file = [el(EBML, &[0x42, 0x86, 0x81, 1]), segment].concat();
        let mut found = last_blocks(&mut std::io::Cursor::new(&file)).unwrap();
        found.sort();
        assert_eq!(found, vec![(1, None), (2, Some(0x288)), (3, None)]);

        // Track 1 padded last; what `audio_tracks` hands on.
        let last = el(
            CLUSTER,
            &[timecode, simple(2), group(1, &[0x03, 0xE8])].concat(),
        );
        let segment = el(
            SEGMENT,
            &[
                el(
                    TRACKS,
                    &el(
                        TRACK_ENTRY,
                        &[el(TRACK_NUMBER, &[1]), el(AUDIO, &[])].concat(),
                    ),
                ),
                last,
            ]
            .concat(),
        );
        let file = [el(EBML, &[0x42, 0x86, 0x81, 1]), segment].concat();
        let mut cursor = std::io::Cursor::new(&file);
        let tracks = audio_tracks(&mut cursor);
        assert_eq!(tracks[0].end_padding_ns, Some(1000));
        assert_eq!(cursor.position(), 0);
        // Cut anywhere: never a panic.
        for cut in 0..file.len() {
            let _ = audio_tracks(&mut std::io::Cursor::new(&file[..cut]));
        }
    }

    #[test]
    fn signed_integers_are_twos_complement() {
        assert_eq!(int(&[0xFF]), Some(-1));
        assert_eq!(int(&[0x7F]), Some(127));
        assert_eq!(int(&[0xFF, 0x38]), Some(-200));
        assert_eq!(int(&[]), Some(0));
        assert_eq!(int(&[0x80, 0, 0, 0, 0, 0, 0, 0]), Some(i64::MIN));
        assert_eq!(int(&[0; 9]), None);
    }
}
