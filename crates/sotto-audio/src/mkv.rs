//! What symphonia's reader drops of a Matroska file's audio tracks: their channel counts,
//! which it keeps only where it names a layout for them (1, 2, 3 and 6 channels), and its
//! PCM decoder needs (PCM of 4, 5, 7 or 8 channels in Matroska, a Blu-ray's 7.1 LPCM
//! remuxed, could not be decoded without them); and the WAVEFORMATEX of a track in
//! `A_MS/ACM` (Windows' audio codecs, WMA among them), which it leaves without a codec.

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
const CLUSTER: u32 = 0x1F43_B675;

/// Whether `head` starts as a Matroska (or WebM) file does.
pub(crate) fn is_matroska(head: &[u8]) -> bool {
    head.starts_with(&EBML.to_be_bytes())
}

/// An audio track's number, its channel count where it says it, and its WAVEFORMATEX where
/// its codec is `A_MS/ACM`.
#[derive(Debug, PartialEq)]
pub(crate) struct AudioTrack {
    pub(crate) number: u64,
    pub(crate) channels: Option<u64>,
    pub(crate) acm: Option<Vec<u8>>,
}

/// The audio tracks; none for a file whose track list is not in its first MiB. Leaves
/// `src` at its start.
pub(crate) fn audio_tracks<S: Read + Seek + ?Sized>(src: &mut S) -> Vec<AudioTrack> {
    let mut head = Vec::new();
    let _ = (&mut *src).take(HEAD).read_to_end(&mut head);
    match src.seek(SeekFrom::Start(0)) {
        Ok(_) => parse(&head).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// An element's ID (its marker bit kept), its body's size (None where unknown), and the
/// bytes of its header.
fn element(b: &[u8]) -> Option<(u32, Option<u64>, usize)> {
    let first = *b.first()?;
    let id_len = first.leading_zeros() as usize + 1;
    if id_len > 4 {
        return None;
    }
    let id = b
        .get(..id_len)?
        .iter()
        .fold(0u32, |v, &x| v << 8 | u32::from(x));
    let rest = &b[id_len..];
    let first = *rest.first()?;
    let size_len = first.leading_zeros() as usize + 1;
    if size_len > 8 {
        return None;
    }
    let mask = (1u64 << (7 * size_len)) - 1;
    let raw = rest
        .get(..size_len)?
        .iter()
        .fold(0u64, |v, &x| v << 8 | u64::from(x))
        & mask;
    let size = (raw != mask).then_some(raw);
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
                    let (mut number, mut channels, mut audio) = (None, None, false);
                    let (mut codec, mut private) = (None, None);
                    for (id, field) in children(entry) {
                        match id {
                            TRACK_NUMBER => number = uint(field),
                            CODEC_ID => codec = Some(field),
                            CODEC_PRIVATE => private = Some(field),
                            AUDIO => {
                                audio = true;
                                channels = children(field)
                                    .find(|(id, _)| *id == CHANNELS)
                                    .and_then(|(_, v)| uint(v));
                            }
                            _ => {}
                        }
                    }
                    let acm = (codec == Some(b"A_MS/ACM".as_slice()))
                        .then(|| private.map(<[u8]>::to_vec))
                        .flatten();
                    if let Some(number) = number.filter(|_| audio) {
                        found.push(AudioTrack {
                            number,
                            channels,
                            acm,
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
        let track = |number, channels, acm: Option<&[u8]>| AudioTrack {
            number,
            channels,
            acm: acm.map(<[u8]>::to_vec),
        };
        assert_eq!(
            parse(&file),
            Some(vec![
                track(2, Some(8), None),
                track(3, Some(4), None),
                track(4, None, Some(&[0x61, 0x01]))
            ])
        );
        assert!(is_matroska(&file));
        // Cut anywhere, or not Matroska: whatever was found, never a panic.
        for cut in 0..file.len() {
            let _ = parse(&file[..cut]);
        }
        assert_eq!(parse(b"RIFF....WAVE"), None);
    }
}
