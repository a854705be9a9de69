//! AIFF-C files of Apple's IMA 4:1 ADPCM (`ima4`: older Macs' compressed recordings),
//! which symphonia's AIFF reader refuses: shown to it as the CAF file they would be (the
//! same packets behind a CAF header, seekable as CAF's reader wants), which it reads and
//! `ima_qt.rs` decodes.

use std::io::{Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::codec::{Piece, Pieces};

/// Most chunks walked before the sound data.
const MAX_CHUNKS: usize = 1024;

/// Whether a file starting with `head` is an AIFF-C file.
pub(crate) fn is_aifc(head: &[u8]) -> bool {
    head.len() >= 12 && &head[..4] == b"FORM" && &head[8..12] == b"AIFC"
}

/// An 80-bit IEEE extended float (AIFF's sample rate).
fn extended(b: &[u8; 10]) -> f64 {
    let exponent = i32::from(u16::from_be_bytes([b[0], b[1]]) & 0x7FFF);
    let mantissa = u64::from_be_bytes(b[2..10].try_into().expect("eight bytes"));
    let v = mantissa as f64 * 2f64.powi(exponent - 16383 - 63);
    if b[0] & 0x80 != 0 {
        -v
    } else {
        v
    }
}

/// `src` (an AIFF-C file at its start) as a CAF file, where its compression is `ima4`;
/// `src` back, at its start, otherwise.
pub(crate) fn ima4_as_caf(mut src: Box<dyn MediaSource>) -> Result<Pieces, Box<dyn MediaSource>> {
    match find(&mut *src) {
        Some((channels, rate, data)) if src.seek(SeekFrom::Start(0)).is_ok() => {
            let mut h = Vec::with_capacity(80);
            h.extend_from_slice(b"caff");
            h.extend_from_slice(&1u16.to_be_bytes());
            h.extend_from_slice(&0u16.to_be_bytes());
            h.extend_from_slice(b"desc");
            h.extend_from_slice(&32i64.to_be_bytes());
            h.extend_from_slice(&rate.to_be_bytes());
            h.extend_from_slice(b"ima4");
            h.extend_from_slice(&0u32.to_be_bytes());
            let block = crate::ima_qt::BLOCK as u32 * u32::from(channels);
            h.extend_from_slice(&block.to_be_bytes());
            h.extend_from_slice(&(crate::ima_qt::SAMPLES as u32).to_be_bytes());
            h.extend_from_slice(&u32::from(channels).to_be_bytes());
            // 4 bits a sample, as Apple's files say (symphonia takes 0 for a variable rate).
            h.extend_from_slice(&4u32.to_be_bytes());
            // The packets: whole ones (the edit count, then the data).
            let len = data.1 - data.1 % u64::from(block);
            h.extend_from_slice(b"data");
            h.extend_from_slice(&(4 + len as i64).to_be_bytes());
            h.extend_from_slice(&0u32.to_be_bytes());
            Ok(Pieces::new(
                src,
                vec![Piece::Bytes(h), Piece::Src(data.0, len)],
            ))
        }
        _ => {
            let _ = src.seek(SeekFrom::Start(0));
            Err(src)
        }
    }
}

/// The channels, rate and sound data (offset, length, cut to the file) of an `ima4`
/// AIFF-C file.
fn find(src: &mut dyn MediaSource) -> Option<(u16, f64, (u64, u64))> {
    let len = src.byte_len()?;
    let mut at = 12u64;
    let mut comm: Option<(u16, f64)> = None;
    for _ in 0..MAX_CHUNKS {
        let mut head = [0u8; 8];
        src.seek(SeekFrom::Start(at)).ok()?;
        src.read_exact(&mut head).ok()?;
        let size = u64::from(u32::from_be_bytes(head[4..8].try_into().ok()?));
        let body = at + 8;
        match &head[..4] {
            b"COMM" => {
                let mut c = [0u8; 22];
                src.read_exact(&mut c).ok()?;
                if &c[18..22] != b"ima4" {
                    return None;
                }
                let channels = u16::from_be_bytes([c[0], c[1]]);
                let rate = extended(c[8..18].try_into().ok()?);
                if channels == 0 || !(1.0..=768_000.0).contains(&rate) {
                    return None;
                }
                comm = Some((channels, rate));
            }
            b"SSND" => {
                let (channels, rate) = comm?;
                let mut offset = [0u8; 4];
                src.read_exact(&mut offset).ok()?;
                let start = body + 8 + u64::from(u32::from_be_bytes(offset));
                let end = (body + size).min(len);
                return Some((channels, rate, (start, end.saturating_sub(start))));
            }
            _ => {}
        }
        at = body + size + size % 2;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_floats_read_as_their_rates() {
        // 44100 and 8000 Hz as AIFF writes them.
        let r44 = [0x40, 0x0E, 0xAC, 0x44, 0, 0, 0, 0, 0, 0];
        let r8 = [0x40, 0x0B, 0xFA, 0x00, 0, 0, 0, 0, 0, 0];
        assert_eq!((extended(&r44), extended(&r8)), (44_100.0, 8_000.0));
    }
}
