//! A FLAC file's metadata blocks that transcription has no use for (Vorbis comments,
//! pictures, cue sheets, application data) shown to symphonia's reader as padding, which
//! it skips unread. It reads the others field by field, reserving room for a comment's or a
//! picture's length as the field claims before reading it, so a damaged length
//! (gigabytes, in a block of at most 16 MiB) would abort the process for want of memory.

use std::io::{Cursor, Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

/// Blocks walked at the most; a real file has a handful.
const MAX_BLOCKS: usize = 1024;
const PADDING: u8 = 1;

/// Whether a block of this type is shown as padding.
fn unused(kind: u8) -> bool {
    matches!(kind, 2 | 4 | 5 | 6)
}

/// `src`, a seekable FLAC file at its start, with its unused blocks' types made padding.
/// `src` as it is (at its start) where it has none or is not FLAC. (A stream read front to
/// back goes through [`without_tags_reader`].)
pub(crate) fn without_tags(mut src: Box<dyn MediaSource>) -> Box<dyn MediaSource> {
    let patches = headers(&mut src)
        .into_iter()
        .map(|(at, byte)| (at, vec![byte]))
        .collect();
    crate::codec::patched(src, patches)
}

/// The headers of `src`'s blocks to show as padding: where each is, and the byte to show
/// (padding's type, the last-block flag kept).
fn headers<S: Read + Seek + ?Sized>(src: &mut S) -> Vec<(u64, u8)> {
    let mut found = Vec::new();
    let mut magic = [0u8; 4];
    let read = src.seek(SeekFrom::Start(0)).is_ok() && src.read_exact(&mut magic).is_ok();
    if !read || &magic != b"fLaC" {
        return found;
    }
    let mut at = 4u64;
    let mut header = [0u8; 4];
    for _ in 0..MAX_BLOCKS {
        if src.seek(SeekFrom::Start(at)).is_err() || src.read_exact(&mut header).is_err() {
            break;
        }
        if unused(header[0] & 0x7f) {
            found.push((at, header[0] & 0x80 | PADDING));
        }
        at += 4 + u64::from(u32::from_be_bytes([0, header[1], header[2], header[3]]));
        if header[0] & 0x80 != 0 {
            break;
        }
    }
    found
}

/// `r`, a FLAC stream read front to back, with its unused blocks' types made padding: the
/// metadata is read ahead (blocks are at most 16 MiB; a picture is the largest that files
/// hold), then the audio follows as it arrives.
pub(crate) fn without_tags_reader<R: Read>(mut r: R) -> impl Read {
    let mut front = Vec::new();
    let take = |front: &mut Vec<u8>, n: u64, r: &mut R| {
        let had = front.len();
        let _ = r.by_ref().take(n).read_to_end(front);
        front.len() - had == n as usize
    };
    if take(&mut front, 4, &mut r) && front == b"fLaC" {
        for _ in 0..MAX_BLOCKS {
            let at = front.len();
            if !take(&mut front, 4, &mut r) {
                break;
            }
            let header = [front[at], front[at + 1], front[at + 2], front[at + 3]];
            if unused(header[0] & 0x7f) {
                front[at] = header[0] & 0x80 | PADDING;
            }
            let len = u32::from_be_bytes([0, header[1], header[2], header[3]]);
            if !take(&mut front, u64::from(len), &mut r) || header[0] & 0x80 != 0 {
                break;
            }
        }
    }
    Cursor::new(front).chain(r)
}
