//! AIFF-C files that symphonia's AIFF reader refuses, shown to it as the file they would
//! be in another container (the same bytes behind another header): Apple's IMA 4:1 ADPCM
//! (`ima4`: older Macs' compressed recordings) as CAF, which `ima_qt.rs` decodes, and
//! 8-bit unsigned PCM (`raw `, as FFmpeg writes `pcm_u8`) as the 8-bit WAV it is.

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

/// What [`mend`] makes of an AIFF-C file.
pub(crate) struct Mended {
    pub src: Pieces,
    /// The extension of what it is shown as: "caf" or "wav".
    pub ext: &'static str,
}

/// `src` (an AIFF-C file at its start) as a CAF file where its compression is `ima4`, as a
/// WAV file where it is 8-bit `raw `; `src` back, at its start, otherwise.
pub(crate) fn mend(mut src: Box<dyn MediaSource>) -> Result<Mended, Box<dyn MediaSource>> {
    let found = find(&mut *src);
    if src.seek(SeekFrom::Start(0)).is_err() {
        return Err(src);
    }
    match found {
        Some(c) if &c.kind == b"ima4" => {
            let mut h = Vec::with_capacity(80);
            h.extend_from_slice(b"caff");
            h.extend_from_slice(&1u16.to_be_bytes());
            h.extend_from_slice(&0u16.to_be_bytes());
            h.extend_from_slice(b"desc");
            h.extend_from_slice(&32i64.to_be_bytes());
            h.extend_from_slice(&c.rate.to_be_bytes());
            h.extend_from_slice(b"ima4");
            h.extend_from_slice(&0u32.to_be_bytes());
            let block = crate::ima_qt::BLOCK as u32 * u32::from(c.channels);
            h.extend_from_slice(&block.to_be_bytes());
            h.extend_from_slice(&(crate::ima_qt::SAMPLES as u32).to_be_bytes());
            h.extend_from_slice(&u32::from(c.channels).to_be_bytes());
            // 4 bits a sample, as Apple's files say (symphonia takes 0 for a variable rate).
            h.extend_from_slice(&4u32.to_be_bytes());
            // The packets: whole ones (the edit count, then the data).
            let len = c.data.1 - c.data.1 % u64::from(block);
            h.extend_from_slice(b"data");
            h.extend_from_slice(&(4 + len as i64).to_be_bytes());
            h.extend_from_slice(&0u32.to_be_bytes());
            Ok(Mended {
                src: Pieces::new(src, vec![Piece::Bytes(h), Piece::Src(c.data.0, len)]),
                ext: "caf",
            })
        }
        Some(c) if &c.kind == b"raw " && c.bits == 8 && c.rate.fract() == 0.0 => {
            let (channels, rate) = (c.channels, c.rate as u32);
            // PCM, whose 8 bits are unsigned.
            let byte_rate = u64::from(rate) * u64::from(channels);
            let fmt = crate::avi::waveformatex(1, channels, rate, byte_rate, channels, 8);
            let len = c.data.1.min(u64::from(u32::MAX - 64));
            let len = len - len % u64::from(channels);
            let h = crate::avi::wav_header(&fmt, len);
            Ok(Mended {
                src: Pieces::new(src, vec![Piece::Bytes(h), Piece::Src(c.data.0, len)]),
                ext: "wav",
            })
        }
        _ => Err(src),
    }
}

/// An AIFF-C file's compression type, sample size, channels, rate and sound data (offset,
/// length, cut to the file).
struct Comm {
    kind: [u8; 4],
    bits: u16,
    channels: u16,
    rate: f64,
    data: (u64, u64),
}

fn find(src: &mut dyn MediaSource) -> Option<Comm> {
    let len = src.byte_len()?;
    let mut at = 12u64;
    let mut comm: Option<([u8; 4], u16, u16, f64)> = None;
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
                let channels = u16::from_be_bytes([c[0], c[1]]);
                let bits = u16::from_be_bytes([c[6], c[7]]);
                let rate = extended(c[8..18].try_into().ok()?);
                if !(1..=32).contains(&channels) || !(1.0..=768_000.0).contains(&rate) {
                    return None;
                }
                comm = Some((c[18..22].try_into().ok()?, bits, channels, rate));
            }
            b"SSND" => {
                let (kind, bits, channels, rate) = comm?;
                let mut offset = [0u8; 4];
                src.read_exact(&mut offset).ok()?;
                let start = body + 8 + u64::from(u32::from_be_bytes(offset));
                let end = (body + size).min(len);
                return Some(Comm {
                    kind,
                    bits,
                    channels,
                    rate,
                    data: (start, end.saturating_sub(start)),
                });
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
