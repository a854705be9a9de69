//! PCM in transport streams, which symphonia does not read, made a little-endian WAV file
//! (its sizes all ones: the length is not known before the end, and `long_wav.rs` reads
//! it to its end), in FFmpeg's channel order (that of WAVE_FORMAT_EXTENSIBLE's mask).
//! `ts.rs` hands on the samples without each PES packet's 4-byte header, whose first
//! says what they are.
//! - Blu-ray's LPCM (stream type 0x80 in `.m2ts`: concert and film discs, and their rips):
//!   big-endian samples of an even number of channels (a silent one added to odd layouts),
//!   some in an order of the disc format's.
//! - SMPTE 302M (broadcast contribution feeds: AES3 audio, a private stream a registration
//!   descriptor names `BSSD`): pairs of 16-, 20- or 24-bit samples, each byte's bits
//!   reversed, packed in 5, 6 or 7 bytes.

use std::io::Read;

use crate::codec::Pending;

/// A layout (the header's high nibble of byte 2): its channels' WAVE mask, and where each
/// coded channel goes in FFmpeg's order (None: the padding channel).
fn layout(code: u8) -> Option<(u32, &'static [Option<usize>])> {
    const N: Option<usize> = None;
    Some(match code {
        1 => (0x4, &[Some(0), N]),
        3 => (0x3, &[Some(0), Some(1)]),
        4 => (0x7, &[Some(0), Some(1), Some(2), N]),
        5 => (0x103, &[Some(0), Some(1), Some(2), N]),
        6 => (0x107, &[Some(0), Some(1), Some(2), Some(3)]),
        7 => (0x603, &[Some(0), Some(1), Some(2), Some(3)]),
        8 => (0x607, &[Some(0), Some(1), Some(2), Some(3), Some(4), N]),
        // L R C Ls Rs LFE; L R C Ls Rls Rrs Rs (LFE).
        9 => (
            0x60F,
            &[Some(0), Some(1), Some(2), Some(4), Some(5), Some(3)],
        ),
        10 => (
            0x637,
            &[
                Some(0),
                Some(1),
                Some(2),
                Some(5),
                Some(3),
                Some(4),
                Some(6),
                N,
            ],
        ),
        11 => (
            0x63F,
            &[
                Some(0),
                Some(1),
                Some(2),
                Some(6),
                Some(4),
                Some(5),
                Some(7),
                Some(3),
            ],
        ),
        _ => return None,
    })
}

/// What a stream's first header says sotto does not decode.
pub(crate) fn refusal(header: [u8; 4]) -> Option<&'static str> {
    if layout(header[2] >> 4).is_none() {
        return Some("Blu-ray LPCM of a reserved channel layout");
    }
    if !matches!(header[2] & 0xF, 1 | 4 | 5) {
        return Some("Blu-ray LPCM at a reserved sample rate");
    }
    match header[3] >> 6 {
        1 | 3 => None,
        // As FFmpeg, which decodes 16 and 24 bits alone.
        _ => Some("20-bit Blu-ray LPCM"),
    }
}

/// How a stream's units (a frame; a pair of samples) become WAV samples.
enum Unit {
    /// Blu-ray LPCM: where each coded channel goes (None: the padding channel).
    Bd(&'static [Option<usize>]),
    /// SMPTE 302M: bits a sample (16, 20, 24).
    Aes3(u32),
}

/// The samples of a PCM stream in a transport stream (`src`: what `ts.rs` hands on) as a
/// WAV file.
pub(crate) struct PcmWav<R> {
    src: R,
    unit: Unit,
    channels: usize,
    /// Bytes a WAV sample takes.
    bytes: usize,
    /// A unit's bytes, and how many are read so far.
    frame: Vec<u8>,
    got: usize,
    out: Vec<u8>,
    pending: Pending,
}

/// A WAV header of unknown length for `channels` (whose positions `mask` gives) of `bits`
/// at `rate`.
fn wav_head(channels: u16, mask: u32, rate: u32, bits: u16) -> Pending {
    let align = channels * (bits / 8);
    let byte_rate = u64::from(rate) * u64::from(align);
    let mut fmt = crate::avi::waveformatex(0xFFFE, channels, rate, byte_rate, align, bits);
    fmt.extend(22u16.to_le_bytes());
    fmt.extend(bits.to_le_bytes());
    fmt.extend(mask.to_le_bytes());
    // KSDATAFORMAT_SUBTYPE_PCM.
    fmt.extend([
        1, 0, 0, 0, 0, 0, 0x10, 0, 0x80, 0, 0, 0xAA, 0, 0x38, 0x9B, 0x71,
    ]);
    Pending::new(crate::avi::wav_header(&fmt, u64::MAX))
}

/// What a SMPTE 302M stream's first header says sotto does not decode.
pub(crate) fn aes3_refusal(header: [u8; 4]) -> Option<&'static str> {
    (header[3] >> 4 & 3 == 3).then_some("SMPTE 302M of a reserved sample size")
}

impl<R: Read> PcmWav<R> {
    /// A Blu-ray LPCM stream whose first header is `header` (see [`refusal`] for what it
    /// may not be).
    pub(crate) fn bd(src: R, header: [u8; 4]) -> Option<Self> {
        refusal(header).is_none().then_some(())?;
        let (mask, map) = layout(header[2] >> 4)?;
        let rate: u32 = match header[2] & 0xF {
            1 => 48_000,
            4 => 96_000,
            _ => 192_000,
        };
        let bytes = if header[3] >> 6 == 1 { 2 } else { 3 };
        let channels = mask.count_ones() as u16;
        Some(Self {
            src,
            unit: Unit::Bd(map),
            channels: usize::from(channels),
            bytes,
            frame: vec![0; map.len() * bytes],
            got: 0,
            out: Vec::new(),
            pending: wav_head(channels, mask, rate, 8 * bytes as u16),
        })
    }

    /// A SMPTE 302M stream whose first header is `header`: 2, 4, 6 or 8 channels at 48 kHz
    /// (FFmpeg's layouts: stereo, quad, 5.1 with back surrounds, and that and a pair).
    pub(crate) fn aes3(src: R, header: [u8; 4]) -> Option<Self> {
        aes3_refusal(header).is_none().then_some(())?;
        let channels = u16::from(header[2] >> 6) * 2 + 2;
        let bits = u32::from(header[3] >> 4 & 3) * 4 + 16;
        let mask = match channels {
            2 => 0x3,
            4 => 0x33,
            6 => 0x3F,
            _ => 0x63F,
        };
        let bytes = if bits == 16 { 2 } else { 3 };
        Some(Self {
            src,
            unit: Unit::Aes3(bits),
            channels: usize::from(channels),
            bytes,
            // A pair: two samples and their 4 AES3 bits each.
            frame: vec![0; (2 * (bits as usize + 4)).div_ceil(8)],
            got: 0,
            out: Vec::new(),
            pending: wav_head(channels, mask, 48_000, 8 * bytes as u16),
        })
    }

    /// Reads whole frames (up to ~4k) and makes them WAV frames; false at the end.
    fn refill(&mut self) -> std::io::Result<bool> {
        self.out.clear();
        let out_frame = self.channels * self.bytes;
        let unit_out = match self.unit {
            Unit::Bd(_) => out_frame,
            Unit::Aes3(_) => 2 * self.bytes,
        };
        while self.out.len() < 4096 * out_frame {
            let n = self.src.read(&mut self.frame[self.got..])?;
            if n == 0 {
                break;
            }
            self.got += n;
            if self.got < self.frame.len() {
                continue;
            }
            self.got = 0;
            let at = self.out.len();
            self.out.resize(at + unit_out, 0);
            match self.unit {
                Unit::Bd(map) => {
                    for (k, to) in map.iter().enumerate() {
                        let Some(to) = *to else { continue };
                        let sample = &self.frame[k * self.bytes..(k + 1) * self.bytes];
                        let dst = &mut self.out[at + to * self.bytes..][..self.bytes];
                        for (d, s) in dst.iter_mut().zip(sample.iter().rev()) {
                            *d = *s;
                        }
                    }
                }
                Unit::Aes3(bits) => {
                    for (i, v) in aes3_pair(&self.frame, bits).into_iter().enumerate() {
                        // The top bytes of the sample, left-justified in 32 bits.
                        let le = v.to_le_bytes();
                        let dst = &mut self.out[at + i * self.bytes..][..self.bytes];
                        dst.copy_from_slice(&le[4 - self.bytes..]);
                    }
                }
            }
        }
        let bytes = self.pending.refill_bytes();
        bytes.extend_from_slice(&self.out);
        Ok(!self.out.is_empty())
    }
}

/// A pair of SMPTE 302M samples of `bits`, left-justified in 32 bits: the bytes' bits
/// reversed, then the samples' bits taken across them (each followed by 4 bits of AES3
/// validity, user, channel status and framing, which are dropped).
fn aes3_pair(b: &[u8], bits: u32) -> [u32; 2] {
    let r = |i: usize| u32::from(b[i].reverse_bits());
    let hi = |i: usize| u32::from((b[i] & 0xF0).reverse_bits());
    let lo = |i: usize| u32::from((b[i] & 0x0F).reverse_bits());
    match bits {
        16 => [
            (r(1) << 8 | r(0)) << 16,
            (hi(4) << 12 | r(3) << 4 | r(2) >> 4) << 16,
        ],
        20 => [
            hi(2) << 28 | r(1) << 20 | r(0) << 12,
            hi(5) << 28 | r(4) << 20 | r(3) << 12,
        ],
        _ => [
            r(2) << 24 | r(1) << 16 | r(0) << 8,
            hi(6) << 28 | r(5) << 20 | r(4) << 12 | lo(3) << 4,
        ],
    }
}

impl<R: Read> Read for PcmWav<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.is_empty() {
            if !self.refill()? {
                return Ok(0);
            }
        }
        Ok(self.pending.read(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_become_little_endian_in_ffmpegs_order() {
        // 5.1 at 48 kHz, 16 bits: L R C Ls Rs LFE, one frame.
        let frame: Vec<u8> = (1..=6u8).flat_map(|c| [0, c]).collect();
        let mut wav = PcmWav::bd(&frame[..], [0, 0, 0x91, 0x40]).unwrap();
        let mut out = Vec::new();
        wav.read_to_end(&mut out).unwrap();
        let samples: Vec<u8> = out[out.len() - 12..].chunks(2).map(|s| s[0]).collect();
        // FL FR FC LFE SL SR.
        assert_eq!(samples, [1, 2, 3, 6, 4, 5]);
        assert_eq!(refusal([0, 0, 0x31, 0x80]), Some("20-bit Blu-ray LPCM"));
        // SMPTE 302M's 16-bit pair: each byte's bits reversed, 20 bits a sample.
        let pair = [0x80, 0x00, 0x0C, 0x00, 0x10];
        assert_eq!(
            aes3_pair(&pair, 16),
            [0x0001 << 16, 0x8000_0000 | 0x3 << 16]
        );
        assert!(refusal([0, 0, 0x21, 0x40]).is_some());
    }
}
