//! Ogg Opus and Vorbis links whose audio is all in one page (under a second or so: a
//! short voice message, a chained file's short part), which symphonia's Ogg reader
//! mishandles: alone, the page's end trim is not applied (Opus: 648 samples too many);
//! chained before another link, the whole link is dropped, unsaid. Such a page is shown to
//! the reader as two (its first packet, then the rest), which it reads as it reads any
//! other link. The split is found by walking the page headers once; a file with no such
//! page is read as it is.

use std::io::{Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::codec::{Piece, Pieces};

/// Pages walked at the most (a page holds at least a byte of audio, so this is a file of
/// many gigabytes).
const MAX_PAGES: usize = 1 << 22;

/// A page header's fixed part.
const HEADER: usize = 27;
/// The flags of a page's header.
const CONTINUED: u8 = 1;
const FIRST: u8 = 2;
const LAST: u8 = 4;

/// `src`, an Ogg file at its start, with every Opus or Vorbis link whose audio is one page shown
/// with that page split in two; `src` as it is (at its start) where there is none.
pub(crate) fn split_lone_pages(mut src: Box<dyn MediaSource>) -> Box<dyn MediaSource> {
    let splits = find(&mut *src);
    let _ = src.seek(SeekFrom::Start(0));
    if splits.is_empty() {
        return src;
    }
    let len = src.byte_len().unwrap_or(0);
    let mut pieces = Vec::new();
    let mut at = 0;
    for s in splits {
        pieces.push(Piece::Src(at, s.page_at - at));
        pieces.push(Piece::Bytes(s.pages));
        at = s.page_at + s.page_len;
    }
    pieces.push(Piece::Src(at, len.saturating_sub(at)));
    Box::new(Pieces::new(src, pieces))
}

/// A page to split: where it is, its length, and the two pages made of it.
struct Split {
    page_at: u64,
    page_len: u64,
    pages: Vec<u8>,
}

/// The codecs whose lone pages are split.
#[derive(Clone, Copy, PartialEq)]
enum Codec {
    Opus,
    Vorbis,
}

impl Codec {
    /// The codec a logical stream's first packet starts, if one of these.
    fn of(first: &[u8; 8]) -> Option<Self> {
        match first {
            b"OpusHead" => Some(Codec::Opus),
            [1, b'v', b'o', b'r', b'b', b'i', b's', _] => Some(Codec::Vorbis),
            _ => None,
        }
    }

    /// Header packets before the audio: OpusHead and OpusTags; Vorbis's identification,
    /// comment and setup headers.
    fn headers(self) -> usize {
        match self {
            Codec::Opus => 2,
            Codec::Vorbis => 3,
        }
    }

    /// Samples a link's first audio packet ends at: an Opus packet's length (its TOC
    /// says), and none for Vorbis, whose first packet only primes the overlap.
    fn first_packet_end(self, packet: &[u8]) -> Option<u32> {
        match self {
            Codec::Opus => crate::ts_opus::packet_samples(packet),
            Codec::Vorbis => Some(0),
        }
    }
}

/// Per logical stream: its codec and header packets still to come, or None for a stream
/// of another codec, or whose first audio page has been passed.
type Streams = Vec<(u32, Option<(Codec, usize)>)>;

/// The pages to split, in file order.
fn find(src: &mut dyn MediaSource) -> Vec<Split> {
    let mut splits = Vec::new();
    let Some(len) = src.byte_len() else {
        return splits;
    };
    let mut streams: Streams = Vec::new();
    let mut at = 0u64;
    for _ in 0..MAX_PAGES {
        let Some((header, lacing)) = page_header(src, at, len) else {
            break;
        };
        let flags = header[5];
        let serial = u32::from_le_bytes(header[14..18].try_into().expect("four bytes"));
        let body_len: u64 = lacing.iter().map(|&l| u64::from(l)).sum();
        let page_len = (HEADER + lacing.len()) as u64 + body_len;
        let body_at = at + (HEADER + lacing.len()) as u64;
        // Packets that end in this page (a lacing value under 255 ends one).
        let ends = lacing.iter().filter(|&&l| l < 255).count();
        if flags & FIRST != 0 {
            let mut magic = [0u8; 8];
            let read =
                src.seek(SeekFrom::Start(body_at)).is_ok() && src.read_exact(&mut magic).is_ok();
            let codec = if read { Codec::of(&magic) } else { None };
            streams.retain(|s| s.0 != serial);
            streams.push((serial, codec.map(|c| (c, c.headers()))));
        }
        if let Some(entry) = streams.iter_mut().find(|s| s.0 == serial) {
            match entry.1 {
                Some((codec, 0)) => {
                    // The link's first audio page.
                    entry.1 = None;
                    let lone = flags & LAST != 0 && flags & CONTINUED == 0 && ends >= 2;
                    if lone && at + page_len <= len {
                        let pages = split(src, codec, &header, &lacing, body_at, body_len);
                        if let Some(pages) = pages {
                            splits.push(Split {
                                page_at: at,
                                page_len,
                                pages,
                            });
                        }
                    }
                }
                Some((codec, left)) => entry.1 = Some((codec, left.saturating_sub(ends))),
                None => {}
            }
        }
        at += page_len;
    }
    splits
}

/// The header (27 bytes) and lacing values of the page at `at`; None at the end, or where
/// no page is (damage is left to the reader).
fn page_header(src: &mut dyn MediaSource, at: u64, len: u64) -> Option<([u8; HEADER], Vec<u8>)> {
    if at + HEADER as u64 > len {
        return None;
    }
    src.seek(SeekFrom::Start(at)).ok()?;
    let mut header = [0u8; HEADER];
    src.read_exact(&mut header).ok()?;
    if &header[..4] != b"OggS" {
        return None;
    }
    let mut lacing = vec![0u8; usize::from(header[26])];
    src.read_exact(&mut lacing).ok()?;
    Some((header, lacing))
}

/// The page (`header`, `lacing`, its body at `body_at`) as two: its first packet, whose
/// granule position is where that packet ends (the link starts at 0, as FFmpeg takes a
/// lone page's), then the rest with the page's own granule position and flags. None
/// where the first packet ends past where the whole link says it does.
fn split(
    src: &mut dyn MediaSource,
    codec: Codec,
    header: &[u8; HEADER],
    lacing: &[u8],
    body_at: u64,
    body_len: u64,
) -> Option<Vec<u8>> {
    let mut body = vec![0u8; body_len as usize];
    src.seek(SeekFrom::Start(body_at)).ok()?;
    src.read_exact(&mut body).ok()?;
    // The first packet's lacing values: up to and including the first under 255.
    let first = lacing.iter().position(|&l| l < 255)? + 1;
    let first_len: usize = lacing[..first].iter().map(|&l| usize::from(l)).sum();
    let samples = codec.first_packet_end(&body[..first_len])?;
    let granule = i64::from_le_bytes(header[6..14].try_into().expect("eight bytes"));
    if granule < i64::from(samples) {
        return None;
    }
    let sequence = u32::from_le_bytes(header[18..22].try_into().expect("four bytes"));
    let mut out = page(
        header,
        header[5] & !LAST,
        i64::from(samples),
        sequence,
        &lacing[..first],
        &body[..first_len],
    );
    out.extend(page(
        header,
        header[5],
        granule,
        sequence.wrapping_add(1),
        &lacing[first..],
        &body[first_len..],
    ));
    Some(out)
}

/// A page like `like`'s (version, serial) with these fields, its CRC computed.
fn page(
    like: &[u8; HEADER],
    flags: u8,
    granule: i64,
    seq: u32,
    lacing: &[u8],
    body: &[u8],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(HEADER + lacing.len() + body.len());
    p.extend_from_slice(&like[..5]);
    p.push(flags);
    p.extend_from_slice(&granule.to_le_bytes());
    p.extend_from_slice(&like[14..18]);
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    p.push(lacing.len() as u8);
    p.extend_from_slice(lacing);
    p.extend_from_slice(body);
    let crc = crc32(&p);
    p[22..26].copy_from_slice(&crc.to_le_bytes());
    p
}

/// Ogg's CRC-32 (polynomial 0x04C11DB7, no reflection, no final xor).
fn crc32(bytes: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, entry) in t.iter_mut().enumerate() {
            let mut r = (i as u32) << 24;
            for _ in 0..8 {
                r = if r & 0x8000_0000 != 0 {
                    (r << 1) ^ 0x04C1_1DB7
                } else {
                    r << 1
                };
            }
            *entry = r;
        }
        t
    });
    bytes.iter().fold(0u32, |crc, &b| {
        (crc << 8) ^ table[usize::from((crc >> 24) as u8 ^ b)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A page of serial 7 with these flags, granule, sequence and packets.
    fn ogg_page(flags: u8, granule: i64, seq: u32, packets: &[&[u8]]) -> Vec<u8> {
        let mut lacing = Vec::new();
        let mut body = Vec::new();
        for p in packets {
            lacing.extend(std::iter::repeat_n(255, p.len() / 255));
            lacing.push((p.len() % 255) as u8);
            body.extend_from_slice(p);
        }
        let mut like = [0u8; HEADER];
        like[..4].copy_from_slice(b"OggS");
        like[14..18].copy_from_slice(&7u32.to_le_bytes());
        page(&like, flags, granule, seq, &lacing, &body)
    }

    fn opus_link(audio_flags: u8, granule: i64, packets: &[&[u8]]) -> Vec<u8> {
        let mut head = b"OpusHead".to_vec();
        head.extend([1, 1, 0x38, 1, 0x80, 0xBB, 0, 0, 0, 0, 0]);
        [
            ogg_page(FIRST, 0, 0, &[&head]),
            ogg_page(0, 0, 1, &[b"OpusTags\0\0\0\0\0\0\0\0"]),
            ogg_page(audio_flags, granule, 2, packets),
        ]
        .concat()
    }

    fn shown(file: Vec<u8>) -> Vec<u8> {
        let mut out = Vec::new();
        split_lone_pages(Box::new(Cursor::new(file)))
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn the_crc_is_oggs() {
        // CRC-32/POSIX's check value before its final xor: Ogg's CRC has none.
        assert_eq!(crc32(b"123456789"), 0x89A1_897F);
    }

    #[test]
    fn a_lone_audio_page_is_split_after_its_first_packet() {
        // CELT 20 ms packets (960 samples each), three of them, trimmed to 2,500.
        let packets: [&[u8]; 3] = [&[0xF8, 1, 2], &[0xF8, 3], &[0xF8, 4, 5, 6]];
        let link = opus_link(LAST, 2_500, &packets);
        let tail = link[link.len() - (HEADER + 3 + 9)..].to_vec();
        let mended = shown(link.clone());
        let head_len = link.len() - tail.len();
        assert_eq!(mended[..head_len], link[..head_len]);
        let want = [
            ogg_page(0, 960, 2, &packets[..1]),
            ogg_page(LAST, 2_500, 3, &packets[1..]),
        ]
        .concat();
        assert_eq!(mended[head_len..], want[..]);
        // Chained before another link, the same; the other as it was.
        let two = [link.clone(), link.clone()].concat();
        assert_eq!(shown(two), [mended.clone(), mended].concat());
    }

    #[test]
    fn other_pages_are_left_as_they_are() {
        let packets: [&[u8]; 2] = [&[0xF8, 1], &[0xF8, 2]];
        for file in [
            // Not the last page; one packet; trimmed to less than the first packet.
            opus_link(0, 1_920, &packets),
            opus_link(LAST, 960, &packets[..1]),
            opus_link(LAST, 500, &packets),
        ] {
            assert_eq!(shown(file.clone()), file);
        }
        // Neither Opus nor Vorbis (FLAC's mapping).
        let mut flac = opus_link(LAST, 1_920, &packets);
        flac[28..36].copy_from_slice(b"\x7fFLAC\x01\x00\x00");
        assert_eq!(shown(flac.clone()), flac);
    }
}
