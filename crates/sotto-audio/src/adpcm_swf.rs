//! Flash's ADPCM (FLV SoundFormat 1: Flash-era recordings and SWF sounds): IMA-style
//! ADPCM of 2 to 5 bits a sample, each packet its own blocks of 4096 samples a channel
//! behind a 22-bit header (the first sample and the step index). Decoded as FFmpeg's
//! `adpcm_swf` decodes it (so its samples are FFmpeg's), tag by tag as the file is read,
//! into a 16-bit WAV file of one or two channels.

use std::io::Read;

use symphonia::core::io::MediaSource;

use crate::codec::Bits;
use crate::ima_qt::STEP;

/// Its WAV format tag (`SF`, as FFmpeg writes it), whose blocks are FLV's packets.
pub(crate) const WAV_TAG: u16 = 0x5346;

/// Step index changes by code (without its sign bit), for 2- to 5-bit codes.
const INDEX: [&[i32]; 4] = [
    &[-1, 2],
    &[-1, -1, 2, 4],
    &[-1, -1, -1, -1, 2, 4, 6, 8],
    &[-1, -1, -1, -1, -1, -1, -1, -1, 1, 2, 4, 6, 8, 10, 13, 16],
];

/// Samples a channel that a packet of `len` bytes starting with `first` decodes to
/// (FFmpeg's count, which its decoder fills).
pub(crate) fn packet_samples(first: u8, len: u64, channels: u64) -> u64 {
    let bits = (len * 8).saturating_sub(2);
    let nbits = u64::from(first >> 6) + 2;
    let header = 22 * channels;
    let block = header + nbits * channels * 4095;
    let blocks = bits / block;
    let left = bits - blocks * block;
    let mut n = blocks * 4096;
    if left >= header {
        n += 1 + (left - header) / (nbits * channels);
    }
    n
}

/// Decodes one packet, channels interleaved, onto `out`.
fn decode(packet: &[u8], channels: usize, out: &mut Vec<i16>) {
    let size = packet.len() * 8;
    let mut b = Bits::new(packet);
    let mut get = |n: u32| b.get(n).unwrap_or(0) as i32;
    let nbits = get(2) as u32 + 2;
    let table = INDEX[nbits as usize - 2];
    let k0 = 1 << (nbits - 2);
    let signmask = 1 << (nbits - 1);
    let mut pos = 2;
    let mut status = [(0i32, 0i32); 2];
    while pos + 22 * channels <= size {
        for s in &mut status[..channels] {
            let first = get(16) as i16;
            *s = (i32::from(first), get(6));
            out.push(first);
        }
        pos += 22 * channels;
        let mut count = 0;
        while pos + nbits as usize * channels <= size && count < 4095 {
            for s in &mut status[..channels] {
                let delta = get(nbits);
                let mut step = STEP[s.1 as usize];
                let mut diff = 0;
                let mut k = k0;
                while k != 0 {
                    if delta & k != 0 {
                        diff += step;
                    }
                    step >>= 1;
                    k >>= 1;
                }
                diff += step;
                s.0 += if delta & signmask != 0 { -diff } else { diff };
                s.1 = (s.1 + table[(delta & !signmask) as usize]).clamp(0, 88);
                s.0 = s.0.clamp(i32::from(i16::MIN), i32::from(i16::MAX));
                out.push(s.0 as i16);
            }
            pos += nbits as usize * channels;
            count += 1;
        }
    }
}

/// An FLV file's Flash ADPCM tags (`chunks` of `src`: where each is, its length and its
/// first byte) decoded as they are read, as a 16-bit WAV file.
pub(crate) struct SwfWav {
    src: Box<dyn MediaSource>,
    chunks: std::vec::IntoIter<(u64, u64, u8)>,
    channels: usize,
    pending: crate::codec::Pending,
}

impl SwfWav {
    pub(crate) fn new(
        src: Box<dyn MediaSource>,
        chunks: Vec<(u64, u64, u8)>,
        rate: u32,
        channels: u16,
    ) -> Self {
        let ch = u64::from(channels);
        let samples: u64 = chunks
            .iter()
            .map(|&(_, len, first)| packet_samples(first, len, ch))
            .sum();
        let align = 2 * channels;
        let mut fmt = Vec::with_capacity(16);
        fmt.extend_from_slice(&1u16.to_le_bytes()); // PCM
        fmt.extend_from_slice(&channels.to_le_bytes());
        fmt.extend_from_slice(&rate.to_le_bytes());
        fmt.extend_from_slice(&(rate * u32::from(align)).to_le_bytes());
        fmt.extend_from_slice(&align.to_le_bytes());
        fmt.extend_from_slice(&16u16.to_le_bytes());
        let header = crate::avi::wav_header(&fmt, samples * ch * 2);
        Self {
            src,
            chunks: chunks.into_iter(),
            channels: usize::from(channels),
            pending: crate::codec::Pending::new(header),
        }
    }
}

impl Read for SwfWav {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.is_empty() {
            let Some((at, len, _)) = self.chunks.next() else {
                return Ok(0);
            };
            let Some(packet) = crate::codec::read_chunk(&mut *self.src, (at, len))? else {
                // The file ends inside the tag: what decoded is all there is.
                self.chunks = Vec::new().into_iter();
                return Ok(0);
            };
            let mut samples = Vec::new();
            decode(&packet, self.channels, &mut samples);
            self.pending.refill(samples);
        }
        Ok(self.pending.read(buf))
    }
}
