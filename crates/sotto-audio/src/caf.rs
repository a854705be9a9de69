//! A check on CAF files before symphonia reads them: its reader reserves room for every
//! packet a packet table (`pakt`) claims before reading any, and for a magic cookie
//! (`kuki`) of the size its chunk claims, so a damaged count or size (billions) would abort
//! the process for want of memory.

use std::io::{Read, Seek, SeekFrom};

/// Most chunks walked before giving up (the file then goes to symphonia as it is).
const MAX_CHUNKS: usize = 4096;

/// What of `src`, a CAF file, claims more than it holds: its packet table (more packets
/// than its chunk has bytes, each taking one at least) or its magic cookie (more bytes
/// than the file has); leaves `src` at its start.
pub(crate) fn overlong_chunk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<&'static str> {
    let overlong = walk(src).flatten();
    let _ = src.seek(SeekFrom::Start(0));
    overlong
}

fn walk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<Option<&'static str>> {
    let len = src.seek(SeekFrom::End(0)).ok()?;
    src.seek(SeekFrom::Start(0)).ok()?;
    let mut head = [0u8; 8];
    src.read_exact(&mut head).ok()?;
    if &head[..4] != b"caff" {
        return Some(None);
    }
    let mut at = 8u64;
    for _ in 0..MAX_CHUNKS {
        let mut chunk = [0u8; 20];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut chunk[..12]).ok()?;
        let size = i64::from_be_bytes(chunk[4..12].try_into().ok()?);
        match &chunk[..4] {
            b"pakt" => {
                // The packet count, then the frame counts (16 bytes), then the table.
                src.read_exact(&mut chunk[12..20]).ok()?;
                let packets = i64::from_be_bytes(chunk[12..20].try_into().ok()?);
                if packets > size.saturating_sub(24) {
                    return Some(Some("CAF packet table claims more packets than it holds"));
                }
            }
            b"kuki" if u64::try_from(size).map_or(true, |n| n > len.saturating_sub(at + 12)) => {
                return Some(Some("CAF magic cookie runs past the end of the file"));
            }
            _ => {}
        }
        // Only the data chunk runs to the end (a size of -1); the tables come before it in
        // the files that have them.
        at = at.checked_add(12)?.checked_add(u64::try_from(size).ok()?)?;
    }
    Some(None)
}

/// The channels, rate and sample data (offset, bytes, cut to the file) of `src`, a CAF
/// file at its start with `head`, where it is 8-bit integer PCM (signed, as FFmpeg's
/// `pcm_s8`), which symphonia's CAF reader refuses; leaves `src` at its start.
pub(crate) fn pcm8<S: Read + Seek + ?Sized>(
    src: &mut S,
    head: &[u8],
) -> Option<(u16, u32, (u64, u64))> {
    // `desc` comes first: the rate (f64), the format, its flags (bit 0: float), bytes and
    // frames a packet, channels, bits.
    let field = |at: usize| Some(u32::from_be_bytes(head.get(at..at + 4)?.try_into().ok()?));
    if !head.starts_with(b"caff") || head.get(8..12)? != b"desc" || head.get(28..32)? != b"lpcm" {
        return None;
    }
    let rate = f64::from_be_bytes(head.get(20..28)?.try_into().ok()?);
    let (flags, channels, bits) = (field(32)?, field(44)?, field(48)?);
    if bits != 8 || flags & 1 != 0 || rate.fract() != 0.0 || !(1.0..=768_000.0).contains(&rate) {
        return None;
    }
    let channels = u16::try_from(channels)
        .ok()
        .filter(|c| (1..=32).contains(c))?;
    let data = data_chunk(src);
    src.seek(SeekFrom::Start(0)).ok()?;
    Some((channels, rate as u32, data?))
}

/// The samples of the `data` chunk (after its edit count), to its end or the file's.
fn data_chunk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<(u64, u64)> {
    let len = src.seek(SeekFrom::End(0)).ok()?;
    let mut at = 8u64;
    for _ in 0..MAX_CHUNKS {
        let mut chunk = [0u8; 12];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut chunk).ok()?;
        let size = i64::from_be_bytes(chunk[4..12].try_into().ok()?);
        let body = at + 12;
        if &chunk[..4] == b"data" {
            let end = u64::try_from(size).map_or(len, |n| body.saturating_add(n).min(len));
            return Some((body + 4, end.checked_sub(body + 4)?));
        }
        at = body.checked_add(u64::try_from(size).ok()?)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn caf(packets: i64, table: &[u8]) -> Vec<u8> {
        let mut b = b"caff\0\x01\0\0".to_vec();
        b.extend_from_slice(b"desc");
        b.extend_from_slice(&32i64.to_be_bytes());
        b.extend_from_slice(&[0; 32]);
        b.extend_from_slice(b"pakt");
        b.extend_from_slice(&(24 + table.len() as i64).to_be_bytes());
        b.extend_from_slice(&packets.to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(table);
        b
    }

    #[test]
    fn a_packet_table_longer_than_its_chunk_is_found() {
        let mut f = Cursor::new(caf(3, &[5, 7, 9]));
        assert_eq!(overlong_chunk(&mut f), None);
        assert_eq!(f.position(), 0);
        let long = overlong_chunk(&mut Cursor::new(caf(1 << 40, &[5, 7, 9])));
        assert!(long.is_some_and(|what| what.contains("packet table")));
        assert_eq!(
            overlong_chunk(&mut Cursor::new(b"RIFF....WAVE".to_vec())),
            None
        );
        assert_eq!(overlong_chunk(&mut Cursor::new(Vec::new())), None);
    }

    #[test]
    fn a_magic_cookie_past_the_file_is_found() {
        let cookie = |size: i64| {
            let mut b = b"caff\0\x01\0\0kuki".to_vec();
            b.extend_from_slice(&size.to_be_bytes());
            b.extend_from_slice(&[0; 24]);
            b
        };
        assert_eq!(overlong_chunk(&mut Cursor::new(cookie(24))), None);
        for size in [25, 1 << 37, -5] {
            let long = overlong_chunk(&mut Cursor::new(cookie(size)));
            assert!(
                long.is_some_and(|what| what.contains("magic cookie")),
                "{size}"
            );
        }
    }
}
