//! Sun/NeXT audio (`.au`, `.snd`: Unix and Java tools, telephony systems), which symphonia
//! does not read. Its header names an encoding, a rate and a channel count; its samples are
//! big-endian, as AIFF-C's are, so the file is handed to symphonia's AIFF reader as an
//! AIFF-C file: a header made from the `.au` one, then the samples unchanged. Telephony's
//! headerless files (G.711 μ-law and A-law, 16-bit signed linear), known by their names,
//! go the same way.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::avi::AviAudio;

/// `.snd`, the magic every `.au` file starts with.
const MAGIC: &[u8; 4] = b".snd";
/// Where the header says the size is unknown (a stream written as it was recorded).
const UNKNOWN_SIZE: u32 = u32::MAX;

/// Whether a file starting with `head` is a `.au` file.
pub(crate) fn is_au(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

/// Why a `.au` file gives no audio to decode.
#[derive(Debug, PartialEq)]
pub(crate) enum AuError {
    /// An encoding sotto does not decode (G.721, G.722, G.723 ADPCM and the like).
    Encoding(u32),
    /// The header is malformed or cut short.
    Corrupt(String),
}

/// AIFF-C's compression type and sample size for an `.au` encoding.
fn aifc_format(encoding: u32) -> Option<(&'static [u8; 4], u16)> {
    Some(match encoding {
        1 => (b"ulaw", 8),
        2 => (b"NONE", 8),
        3 => (b"NONE", 16),
        4 => (b"NONE", 24),
        5 => (b"NONE", 32),
        6 => (b"fl32", 32),
        7 => (b"fl64", 64),
        27 => (b"alaw", 8),
        _ => return None,
    })
}

/// An IEEE 754 80-bit extended number, big-endian, as AIFF writes its sample rate.
fn extended(v: u32) -> [u8; 10] {
    let mut out = [0u8; 10];
    if v == 0 {
        return out;
    }
    let shift = v.leading_zeros();
    let exponent = 16383 + 31 - shift as u16;
    let mantissa = u64::from(v) << (32 + shift);
    out[..2].copy_from_slice(&exponent.to_be_bytes());
    out[2..].copy_from_slice(&mantissa.to_be_bytes());
    out
}

/// The AIFF-C header for `data` bytes of samples (whole frames, under 4 GiB).
pub(crate) fn aifc_header(
    kind: &[u8; 4],
    bits: u16,
    channels: u16,
    rate: u32,
    data: u32,
) -> Vec<u8> {
    let frame = u32::from(channels) * u32::from(bits / 8);
    let mut comm = Vec::with_capacity(24);
    comm.extend_from_slice(&(channels as i16).to_be_bytes());
    comm.extend_from_slice(&(data / frame).to_be_bytes());
    comm.extend_from_slice(&bits.to_be_bytes());
    comm.extend_from_slice(&extended(rate));
    comm.extend_from_slice(kind);
    comm.extend_from_slice(&[0, 0]); // an empty Pascal string, padded to even
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(b"FORM");
    let form = 4 + (8 + 4) + (8 + comm.len() as u32) + (8 + 8 + data);
    h.extend_from_slice(&form.to_be_bytes());
    h.extend_from_slice(b"AIFCFVER");
    h.extend_from_slice(&4u32.to_be_bytes());
    h.extend_from_slice(&0xA280_5140u32.to_be_bytes()); // AIFF-C version 1
    h.extend_from_slice(b"COMM");
    h.extend_from_slice(&(comm.len() as u32).to_be_bytes());
    h.extend_from_slice(&comm);
    h.extend_from_slice(b"SSND");
    h.extend_from_slice(&(8 + data).to_be_bytes());
    h.extend_from_slice(&[0; 8]); // offset and block size
    h
}

/// Headerless telephony files, known by their names alone (Asterisk's and SIP recorders'
/// raw formats): the extension, the AIFF-C form of their samples, their sample size and
/// rate. All are mono.
const RAW: [(&str, &[u8; 4], u16, u32); 9] = [
    ("ul", b"ulaw", 8, 8_000),
    ("ulaw", b"ulaw", 8, 8_000),
    ("pcmu", b"ulaw", 8, 8_000),
    ("al", b"alaw", 8, 8_000),
    ("alaw", b"alaw", 8, 8_000),
    ("pcma", b"alaw", 8, 8_000),
    // Signed linear: 16-bit little-endian samples at 8 or 16 kHz.
    ("sln", b"sowt", 16, 8_000),
    ("sln16", b"sowt", 16, 16_000),
    ("slin", b"sowt", 16, 8_000),
];

/// Whether a file named with `ext` is one of the headerless telephony formats.
pub(crate) fn is_raw(ext: &str) -> bool {
    RAW.iter().any(|r| r.0.eq_ignore_ascii_case(ext))
}

/// `src`, a headerless telephony file named with `ext` (see [`is_raw`]), as the AIFF-C
/// file symphonia reads.
pub(crate) fn open_raw(mut src: Box<dyn MediaSource>, ext: &str) -> Result<AviAudio, AuError> {
    let &(_, kind, bits, rate) = RAW
        .iter()
        .find(|r| r.0.eq_ignore_ascii_case(ext))
        .ok_or_else(|| AuError::Corrupt(format!("not a raw format: {ext}")))?;
    let len = match src.byte_len() {
        Some(n) => n,
        None => src
            .seek(SeekFrom::End(0))
            .map_err(|e| AuError::Corrupt(e.to_string()))?,
    };
    Ok(with_aifc(src, (kind, bits), 1, rate, (0, len)))
}

/// The samples at `data` (offset, bytes) in `src` behind an AIFF-C header saying `format`
/// (compression type, bits), `channels` and `rate`: whole frames, as many as AIFF-C's
/// 32-bit sizes hold.
pub(crate) fn with_aifc(
    src: Box<dyn MediaSource>,
    (kind, bits): (&[u8; 4], u16),
    channels: u16,
    rate: u32,
    (offset, data): (u64, u64),
) -> AviAudio {
    with_aifc_chunks(
        src,
        (kind, bits),
        channels,
        rate,
        vec![(offset, data)],
        data,
    )
}

/// Big-endian samples in `chunks` of `src` (`data` bytes in all) behind an AIFF-C header
/// saying `format`, `channels` and `rate`: whole frames, as many as AIFF-C's sizes hold.
pub(crate) fn with_aifc_chunks(
    src: Box<dyn MediaSource>,
    (kind, bits): (&[u8; 4], u16),
    channels: u16,
    rate: u32,
    mut chunks: Vec<(u64, u64)>,
    data: u64,
) -> AviAudio {
    let frame = u64::from(channels) * u64::from(bits / 8);
    let most = u64::from(u32::MAX - 64) / frame * frame;
    let whole = (data / frame * frame).min(most);
    let mut left = whole;
    chunks.retain_mut(|c| {
        c.1 = c.1.min(left);
        left -= c.1;
        c.1 > 0
    });
    let header = aifc_header(kind, bits, channels, rate, whole as u32);
    AviAudio::with_header(src, header, chunks, "aiff")
}

/// What a `.au` file is read as.
pub(crate) enum Opened {
    /// The AIFF-C file symphonia reads (`ext` "aiff").
    Aifc(Box<AviAudio>),
    /// G.722 (encoding 24) and G.726 (23, 25, 26: G.721 and G.723's 3 and 5 bits), decoded
    /// as they are read into a 16-bit WAV file.
    Decoded(Box<dyn MediaSource>),
}

/// `.au`'s encoding numbers for G.722, and for G.726 by its bits a code (FFmpeg writes 23
/// whatever the size, and reads it as 4 bits).
const G722: u32 = 24;
fn g726_bits(encoding: u32) -> Option<u32> {
    match encoding {
        23 => Some(4),
        25 => Some(3),
        26 => Some(5),
        _ => None,
    }
}

/// `src`, a `.au` file at its start, as [`Opened`] says.
pub(crate) fn open(mut src: Box<dyn MediaSource>) -> Result<Opened, AuError> {
    let corrupt = |e: std::io::Error| AuError::Corrupt(e.to_string());
    let len = match src.byte_len() {
        Some(n) => n,
        None => src.seek(SeekFrom::End(0)).map_err(corrupt)?,
    };
    let mut h = [0u8; 24];
    src.seek(SeekFrom::Start(0))
        .and_then(|_| src.read_exact(&mut h))
        .map_err(|_| AuError::Corrupt("the header is cut short".into()))?;
    let field = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let (offset, size, encoding, rate, channels) =
        (field(4), field(8), field(12), field(16), field(20));
    let format = match encoding {
        e if e == G722 || g726_bits(e).is_some() => None,
        e => Some(aifc_format(e).ok_or(AuError::Encoding(e))?),
    };
    if offset < 24 || u64::from(offset) > len {
        return Err(AuError::Corrupt(format!("the samples start at {offset}")));
    }
    let channels = u16::try_from(channels)
        .ok()
        .filter(|c| (1..=32).contains(c))
        .ok_or_else(|| AuError::Corrupt(format!("{channels} channels")))?;
    if !(1..=768_000).contains(&rate) {
        return Err(AuError::Corrupt(format!("a sample rate of {rate} Hz")));
    }
    // The samples run to the end of the file where the size is unknown or overstated
    // (a recording cut short).
    let there = len - u64::from(offset);
    let data = match size {
        UNKNOWN_SIZE => there,
        n => u64::from(n).min(there),
    };
    src.seek(SeekFrom::Start(0)).map_err(corrupt)?;
    let at = u64::from(offset);
    match format {
        Some(format) => {
            let aifc = with_aifc(src, format, channels, rate, (at, data));
            Ok(Opened::Aifc(Box::new(aifc)))
        }
        None if channels == 1 => {
            use crate::codec::DecodedWav;
            use symphonia::core::io::ReadOnlySource;
            let range = (at, at + data);
            let pcm: Box<dyn MediaSource> = match g726_bits(encoding) {
                Some(bits) => {
                    let g726 = crate::g726::G726::lsb_first(bits).expect("2 to 5 bits");
                    Box::new(ReadOnlySource::new(DecodedWav::new(src, g726, range, rate)))
                }
                None => {
                    let g722 = crate::g722::G722::new();
                    Box::new(ReadOnlySource::new(DecodedWav::new(src, g722, range, rate)))
                }
            };
            Ok(Opened::Decoded(pcm))
        }
        None => Err(AuError::Corrupt(format!("ADPCM in {channels} channels"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_rates() {
        // 44 100 Hz as AIFF writes it, and 8 000 Hz.
        assert_eq!(extended(44_100), [0x40, 0x0E, 0xAC, 0x44, 0, 0, 0, 0, 0, 0]);
        assert_eq!(extended(8_000), [0x40, 0x0B, 0xFA, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(extended(1), [0x3F, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0]);
    }
}
