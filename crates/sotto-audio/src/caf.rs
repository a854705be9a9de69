//! A check on CAF files before symphonia reads them: its reader reserves room for every
//! packet a packet table (`pakt`) claims before reading any, so a damaged count (billions)
//! would abort the process for want of memory.

use std::io::{Read, Seek, SeekFrom};

/// Most chunks walked before giving up (the file then goes to symphonia as it is).
const MAX_CHUNKS: usize = 4096;

/// Whether `src` is a CAF file whose packet table claims more packets than its chunk
/// holds (each takes a byte at least); leaves `src` at its start.
pub(crate) fn overlong_packet_table<S: Read + Seek + ?Sized>(src: &mut S) -> bool {
    let overlong = walk(src).unwrap_or(false);
    let _ = src.seek(SeekFrom::Start(0));
    overlong
}

fn walk<S: Read + Seek + ?Sized>(src: &mut S) -> Option<bool> {
    src.seek(SeekFrom::Start(0)).ok()?;
    let mut head = [0u8; 8];
    src.read_exact(&mut head).ok()?;
    if &head[..4] != b"caff" {
        return Some(false);
    }
    let mut at = 8u64;
    for _ in 0..MAX_CHUNKS {
        let mut chunk = [0u8; 20];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut chunk[..12]).ok()?;
        let size = i64::from_be_bytes(chunk[4..12].try_into().ok()?);
        if &chunk[..4] == b"pakt" {
            // The packet count, then the frame counts (16 bytes), then the table.
            src.read_exact(&mut chunk[12..20]).ok()?;
            let packets = i64::from_be_bytes(chunk[12..20].try_into().ok()?);
            return Some(packets > size.saturating_sub(24));
        }
        // Only the data chunk runs to the end (a size of -1); the table comes before it
        // in the files that have one.
        at = at.checked_add(12)?.checked_add(u64::try_from(size).ok()?)?;
    }
    Some(false)
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
        assert!(!overlong_packet_table(&mut f));
        assert_eq!(f.position(), 0);
        assert!(overlong_packet_table(&mut Cursor::new(caf(
            1 << 40,
            &[5, 7, 9]
        ))));
        assert!(!overlong_packet_table(&mut Cursor::new(
            b"RIFF....WAVE".to_vec()
        )));
        assert!(!overlong_packet_table(&mut Cursor::new(Vec::new())));
    }
}
