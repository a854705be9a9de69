//! Blu-ray's LPCM (stream type 0x80 in `.m2ts`: concert and film discs, and their rips),
//! which symphonia does not read: each PES packet's payload is a 4-byte header (its layout,
//! rate and sample size) and big-endian samples of an even number of channels (a silent
//! one added to odd layouts), some in an order of the disc format's. `ts.rs` hands on the
//! samples without the headers; here they become a little-endian WAV file, in FFmpeg's
//! channel order (that of WAVE_FORMAT_EXTENSIBLE's mask), read to its end by
//! `long_wav.rs` (its sizes are all ones: the length is not known before the end).

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

/// The samples of a Blu-ray LPCM stream (`src`: what `ts.rs` hands on) as a WAV file.
pub(crate) struct BdLpcmWav<R> {
    src: R,
    map: &'static [Option<usize>],
    channels: usize,
    bytes: usize,
    /// A frame's bytes read so far.
    frame: Vec<u8>,
    got: usize,
    out: Vec<u8>,
    pending: Pending,
}

impl<R: Read> BdLpcmWav<R> {
    /// The stream whose first header is `header` (see [`refusal`] for what it may not be).
    pub(crate) fn new(src: R, header: [u8; 4]) -> Option<Self> {
        refusal(header).is_none().then_some(())?;
        let (mask, map) = layout(header[2] >> 4)?;
        let rate: u32 = match header[2] & 0xF {
            1 => 48_000,
            4 => 96_000,
            _ => 192_000,
        };
        let bytes = if header[3] >> 6 == 1 { 2 } else { 3 };
        let channels = mask.count_ones() as u16;
        let align = channels * bytes as u16;
        let bits = 8 * bytes as u16;
        let mut fmt = 0xFFFEu16.to_le_bytes().to_vec();
        fmt.extend(channels.to_le_bytes());
        fmt.extend(rate.to_le_bytes());
        fmt.extend((rate * u32::from(align)).to_le_bytes());
        fmt.extend(align.to_le_bytes());
        fmt.extend(bits.to_le_bytes());
        fmt.extend(22u16.to_le_bytes());
        fmt.extend(bits.to_le_bytes());
        fmt.extend(mask.to_le_bytes());
        // KSDATAFORMAT_SUBTYPE_PCM.
        fmt.extend([
            1, 0, 0, 0, 0, 0, 0x10, 0, 0x80, 0, 0, 0xAA, 0, 0x38, 0x9B, 0x71,
        ]);
        Some(Self {
            src,
            map,
            channels: usize::from(channels),
            bytes,
            frame: vec![0; map.len() * bytes],
            got: 0,
            out: Vec::new(),
            pending: Pending::new(crate::avi::wav_header(&fmt, u64::MAX)),
        })
    }

    /// Reads whole frames (up to ~4k) and makes them WAV frames; false at the end.
    fn refill(&mut self) -> std::io::Result<bool> {
        self.out.clear();
        let out_frame = self.channels * self.bytes;
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
            self.out.resize(at + out_frame, 0);
            for (k, to) in self.map.iter().enumerate() {
                let Some(to) = *to else { continue };
                let sample = &self.frame[k * self.bytes..(k + 1) * self.bytes];
                let dst = &mut self.out[at + to * self.bytes..at + (to + 1) * self.bytes];
                for (d, s) in dst.iter_mut().zip(sample.iter().rev()) {
                    *d = *s;
                }
            }
        }
        let bytes = self.pending.refill_bytes();
        bytes.extend_from_slice(&self.out);
        Ok(!self.out.is_empty())
    }
}

impl<R: Read> Read for BdLpcmWav<R> {
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
        let mut wav = BdLpcmWav::new(&frame[..], [0, 0, 0x91, 0x40]).unwrap();
        let mut out = Vec::new();
        wav.read_to_end(&mut out).unwrap();
        let samples: Vec<u8> = out[out.len() - 12..].chunks(2).map(|s| s[0]).collect();
        // FL FR FC LFE SL SR.
        assert_eq!(samples, [1, 2, 3, 6, 4, 5]);
        assert_eq!(refusal([0, 0, 0x31, 0x80]), Some("20-bit Blu-ray LPCM"));
        assert!(refusal([0, 0, 0x21, 0x40]).is_some());
    }
}
