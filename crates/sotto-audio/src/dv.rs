//! DV (`.dv`/`.dif`: MiniDV and DVCAM tapes captured by FireWire, camcorders' files, and
//! AVI "type 1" captures, whose one stream is the DV frames themselves), which symphonia
//! does not read. A frame is 10 (525/60) or 12 (625/50) DIF sequences of 150 blocks of
//! 80 bytes; 9 blocks a sequence hold audio, its samples shuffled across them (IEC 61834,
//! SMPTE 314M). The first stereo pair is taken, as FFmpeg's first audio stream: 16-bit
//! linear at 48, 44.1 or 32 kHz, or 12-bit nonlinear at 32 kHz, widened to 16 bits; the
//! samples a frame holds are its AAUX source pack's. Samples marked as errors are
//! silenced, as FFmpeg silences them, so the decode is FFmpeg's exactly.

use std::io::{Read, Seek, SeekFrom};

use symphonia::core::io::MediaSource;

use crate::codec::Pending;

/// Bytes of a DIF block, and blocks of a DIF sequence before its first audio block.
const BLOCK: usize = 80;
const SEQUENCE_HEAD: usize = 6;
/// Most frames walked (an hour at 30 frames a second is 108 thousand).
const MAX_FRAMES: usize = 1 << 22;

/// Where each sequence's audio blocks put their samples (IEC 61834), 525/60 and 625/50:
/// for the first channel's sequences, then the second's.
const SHUFFLE_525: [[u8; 9]; 10] = [
    [0, 30, 60, 20, 50, 80, 10, 40, 70],
    [6, 36, 66, 26, 56, 86, 16, 46, 76],
    [12, 42, 72, 2, 32, 62, 22, 52, 82],
    [18, 48, 78, 8, 38, 68, 28, 58, 88],
    [24, 54, 84, 14, 44, 74, 4, 34, 64],
    [1, 31, 61, 21, 51, 81, 11, 41, 71],
    [7, 37, 67, 27, 57, 87, 17, 47, 77],
    [13, 43, 73, 3, 33, 63, 23, 53, 83],
    [19, 49, 79, 9, 39, 69, 29, 59, 89],
    [25, 55, 85, 15, 45, 75, 5, 35, 65],
];
const SHUFFLE_625: [[u8; 9]; 12] = [
    [0, 36, 72, 26, 62, 98, 16, 52, 88],
    [6, 42, 78, 32, 68, 104, 22, 58, 94],
    [12, 48, 84, 2, 38, 74, 28, 64, 100],
    [18, 54, 90, 8, 44, 80, 34, 70, 106],
    [24, 60, 96, 14, 50, 86, 4, 40, 76],
    [30, 66, 102, 20, 56, 92, 10, 46, 82],
    [1, 37, 73, 27, 63, 99, 17, 53, 89],
    [7, 43, 79, 33, 69, 105, 23, 59, 95],
    [13, 49, 85, 3, 39, 75, 29, 65, 101],
    [19, 55, 91, 9, 45, 81, 35, 71, 107],
    [25, 61, 97, 15, 51, 87, 5, 41, 77],
    [31, 67, 103, 21, 57, 93, 11, 47, 83],
];

const RATES: [u32; 3] = [48_000, 44_100, 32_000];

/// A frame's system: 525/60 or 625/50, at 25 or 50 Mbit/s (DVCPRO50's two DIF channels,
/// the first of which holds the first stereo pair).
#[derive(Debug, Clone, Copy, PartialEq)]
struct System {
    frame_size: usize,
    sequences: usize,
    /// Samples (of both channels) between one audio block's successive samples.
    stride: usize,
    min_samples: [usize; 3],
    shuffle: &'static [[u8; 9]],
}

const NTSC: System = System {
    frame_size: 120_000,
    sequences: 10,
    stride: 90,
    min_samples: [1580, 1452, 1053],
    shuffle: &SHUFFLE_525,
};
const PAL: System = System {
    frame_size: 144_000,
    sequences: 12,
    stride: 108,
    min_samples: [1896, 1742, 1264],
    shuffle: &SHUFFLE_625,
};

/// The system a frame's header block and VAUX source pack say; None for DVCPRO HD, or
/// what is not a DV frame.
fn system(frame: &[u8]) -> Option<System> {
    let dsf = frame.get(3)? >> 7;
    let stype = frame.get(BLOCK * 5 + 48 + 3)? & 0x1F;
    let base = if dsf == 1 { PAL } else { NTSC };
    match stype {
        0 => Some(base),
        4 => Some(System {
            frame_size: 2 * base.frame_size,
            ..base
        }),
        _ => None,
    }
}

/// Whether `head` starts as a DV frame: a DIF header block of sequence 0.
pub(crate) fn is_dv(head: &[u8]) -> bool {
    matches!(head, [0x1F, 0x07, 0x00, b3, ..] if b3 & 0x7F == 0x3F)
}

/// What a frame's AAUX source pack says.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Source {
    /// Samples a channel holds in this frame.
    samples: usize,
    rate: u32,
    /// 12-bit nonlinear (else 16-bit linear).
    nonlinear: bool,
}

/// Where a frame's AAUX source pack may be: in the fourth audio block of even sequences,
/// the first of odd ones.
fn source_offsets() -> impl Iterator<Item = usize> {
    (0..10).map(|c| {
        let block = if c % 2 == 1 { 0 } else { 3 };
        BLOCK * SEQUENCE_HEAD + BLOCK * 16 * block + 3 + c * 12_000
    })
}

/// The source pack (5 bytes, from its 0x50 header) as `Source`; None for a frame without
/// audio, or with a quantization or rate FFmpeg does not read.
fn source(pack: &[u8], system: &System) -> Option<Source> {
    let &[0x50, b1, _, _, b4, ..] = pack else {
        return None;
    };
    let freq = usize::from((b4 >> 3) & 7);
    let quant = b4 & 7;
    let rate = *RATES.get(freq)?;
    if quant > 1 {
        return None;
    }
    Some(Source {
        samples: system.min_samples[freq] + usize::from(b1 & 0x3F),
        rate,
        nonlinear: quant == 1,
    })
}

/// A 12-bit nonlinear sample widened to 16 bits (IEC 61834-4).
fn widen(sample: u16) -> i16 {
    let s = if sample < 0x800 {
        sample
    } else {
        sample | 0xF000
    };
    let shift = (s & 0xF00) >> 8;
    let v = if !(2..=0xD).contains(&shift) {
        s
    } else if shift < 8 {
        let shift = shift - 1;
        s.wrapping_sub(256 * shift) << shift
    } else {
        let shift = 0xE - shift;
        (s.wrapping_add(256 * shift + 1) << shift).wrapping_sub(1)
    };
    v as i16
}

/// A frame's first stereo pair, interleaved, into `pcm` (silence where the frame is cut
/// short).
fn frame_pcm(frame: &[u8], system: &System, src: &Source, pcm: &mut Vec<i16>) {
    pcm.clear();
    pcm.resize(2 * src.samples, 0);
    let mut put = |of: usize, v: i16| {
        if let Some(p) = pcm.get_mut(of) {
            *p = v;
        }
    };
    // 12-bit audio gives each pair half the sequences.
    let sequences = if src.nonlinear {
        system.sequences / 2
    } else {
        system.sequences
    };
    let half = system.sequences / 2;
    for i in 0..sequences {
        for j in 0..9 {
            let block = (i * 150 + SEQUENCE_HEAD + 16 * j) * BLOCK;
            let Some(data) = frame.get(block + 8..block + BLOCK) else {
                return;
            };
            if src.nonlinear {
                for (k, b) in data.chunks_exact(3).enumerate() {
                    let l = u16::from(b[0]) << 4 | u16::from(b[2]) >> 4;
                    let r = u16::from(b[1]) << 4 | u16::from(b[2]) & 0x0F;
                    let value = |s: u16| if s == 0x800 { 0 } else { widen(s) };
                    put(
                        usize::from(system.shuffle[i][j]) + k * system.stride,
                        value(l),
                    );
                    put(
                        usize::from(system.shuffle[i + half][j]) + k * system.stride,
                        value(r),
                    );
                }
            } else {
                for (k, b) in data.chunks_exact(2).enumerate() {
                    let v = i16::from_be_bytes([b[0], b[1]]);
                    let v = if v == i16::MIN { 0 } else { v };
                    put(usize::from(system.shuffle[i][j]) + k * system.stride, v);
                }
            }
        }
    }
}

/// Why a DV stream gives no audio.
#[derive(Debug, PartialEq)]
pub(crate) enum DvError {
    /// Not a frame FFmpeg's DV reader takes (DVCPRO HD), or none with audio.
    NoAudio,
    /// The file could not be read.
    Io(String),
}

/// A DV stream's first stereo pair, as the 16-bit WAV file it makes, converted a frame at
/// a time as it is read.
pub(crate) struct DvWav {
    src: Box<dyn MediaSource>,
    /// (offset, length) of each frame, in order.
    frames: Vec<(u64, u64)>,
    next: usize,
    frame: Vec<u8>,
    pcm: Vec<i16>,
    pending: Pending,
}

impl DvWav {
    /// The frames of a raw DV file (`src` at its start), one after another.
    pub(crate) fn raw(mut src: Box<dyn MediaSource>) -> Result<Self, DvError> {
        let io = |e: std::io::Error| DvError::Io(e.to_string());
        let len = match src.byte_len() {
            Some(n) => n,
            None => src.seek(SeekFrom::End(0)).map_err(io)?,
        };
        let mut first = vec![0u8; BLOCK * 6];
        src.seek(SeekFrom::Start(0)).map_err(io)?;
        src.read_exact(&mut first).map_err(|_| DvError::NoAudio)?;
        let size = system(&first).ok_or(DvError::NoAudio)?.frame_size as u64;
        let count = (len / size).min(MAX_FRAMES as u64);
        let frames = (0..count).map(|i| (i * size, size)).collect();
        Self::new(src, frames)
    }

    /// The DV frames at `frames` ((offset, length) in `src`: an AVI file's chunks).
    pub(crate) fn new(
        mut src: Box<dyn MediaSource>,
        frames: Vec<(u64, u64)>,
    ) -> Result<Self, DvError> {
        let io = |e: std::io::Error| DvError::Io(e.to_string());
        // The first frame with audio says the rate. The samples a frame holds vary, so the
        // WAV's sizes say all ones: `long_wav.rs` reads it to its end, with no pass over
        // the file first.
        let mut head = vec![0u8; BLOCK * 6];
        let mut first = None;
        for &(at, len) in &frames {
            if (len as usize) < head.len() {
                continue;
            }
            src.seek(SeekFrom::Start(at)).map_err(io)?;
            src.read_exact(&mut head).map_err(io)?;
            let Some(sys) = system(&head) else {
                continue;
            };
            let mut pack = [0u8; 5];
            first = source_offsets()
                .filter(|&o| (o + 5) as u64 <= len)
                .find_map(|o| {
                    src.seek(SeekFrom::Start(at + o as u64)).ok()?;
                    src.read_exact(&mut pack).ok()?;
                    source(&pack, &sys)
                });
            if first.is_some() {
                break;
            }
        }
        let first = first.ok_or(DvError::NoAudio)?;
        let mut fmt = Vec::with_capacity(16);
        fmt.extend_from_slice(&1u16.to_le_bytes());
        fmt.extend_from_slice(&2u16.to_le_bytes());
        fmt.extend_from_slice(&first.rate.to_le_bytes());
        fmt.extend_from_slice(&(first.rate * 4).to_le_bytes());
        fmt.extend_from_slice(&4u16.to_le_bytes());
        fmt.extend_from_slice(&16u16.to_le_bytes());
        let header = crate::avi::wav_header(&fmt, u64::MAX);
        Ok(Self {
            src,
            frames,
            next: 0,
            frame: Vec::new(),
            pcm: Vec::new(),
            pending: Pending::new(header),
        })
    }

    /// Converts the next frame with audio into `pending`; false at the end.
    fn next_frame(&mut self) -> std::io::Result<bool> {
        while let Some(&(at, len)) = self.frames.get(self.next) {
            self.next += 1;
            self.frame.clear();
            self.src.seek(SeekFrom::Start(at))?;
            (&mut self.src)
                .take(len.min(4 * PAL.frame_size as u64))
                .read_to_end(&mut self.frame)?;
            let Some(system) = system(&self.frame) else {
                continue;
            };
            let pack = source_offsets().find_map(|o| source(self.frame.get(o..o + 5)?, &system));
            if let Some(src) = pack {
                frame_pcm(&self.frame, &system, &src, &mut self.pcm);
                self.pending.refill(self.pcm.iter().copied());
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl Read for DvWav {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.pending.read(buf);
            if n > 0 || buf.is_empty() {
                return Ok(n);
            }
            if !self.next_frame()? {
                return Ok(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 525/60 frame whose audio blocks all hold `sample` bytes (2 or 3 a step), with a
    /// source pack of `freq` and `quant`.
    fn frame(freq: u8, quant: u8, sample: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; NTSC.frame_size];
        f[..4].copy_from_slice(&[0x1F, 0x07, 0x00, 0x3F]);
        for i in 0..10 {
            for j in 0..9 {
                let block = (i * 150 + SEQUENCE_HEAD + 16 * j) * BLOCK;
                for d in f[block + 8..block + BLOCK].chunks_exact_mut(sample.len()) {
                    d.copy_from_slice(sample);
                }
            }
        }
        let at = source_offsets().next().unwrap();
        f[at..at + 5].copy_from_slice(&[0x50, 0x05, 0, 0, freq << 3 | quant]);
        f
    }

    fn decode(frame: Vec<u8>) -> Vec<i16> {
        let mut wav = Vec::new();
        let src = std::io::Cursor::new(frame);
        DvWav::raw(Box::new(src))
            .unwrap()
            .read_to_end(&mut wav)
            .unwrap();
        assert_eq!(&wav[..4], b"RIFF");
        wav[44..]
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    #[test]
    fn sixteen_bit_frames_give_their_samples_and_silence_errors() {
        assert!(is_dv(&frame(0, 0, &[1, 2])));
        // 48 kHz: 1580 + 5 samples a channel, big-endian; 0x8000 marks an error.
        let pcm = decode(frame(0, 0, &[0x12, 0x34]));
        assert_eq!(pcm.len(), 2 * 1585);
        assert!(pcm.iter().all(|&v| v == 0x1234));
        assert!(decode(frame(0, 0, &[0x80, 0x00])).iter().all(|&v| v == 0));
    }

    #[test]
    fn twelve_bit_frames_give_the_first_pair_widened() {
        // 32 kHz, 12-bit: two samples in three bytes, the left's 12 bits in the first byte
        // and the third's high nibble, the right's in the second and the low nibble.
        let pcm = decode(frame(2, 1, &[0x30, 0xE0, 0x00]));
        assert_eq!(pcm.len(), 2 * (1053 + 5));
        for lr in pcm.chunks_exact(2) {
            assert_eq!(lr, [widen(0x300), widen(0xE00)]);
        }
        assert_eq!((widen(0x300), widen(0xE00)), (1024, -512));
        // A frame without a source pack has no audio; a 20-bit one is not read.
        let mut none = frame(0, 0, &[1, 2]);
        none[source_offsets().next().unwrap()] = 0xFF;
        assert!(matches!(
            DvWav::raw(Box::new(std::io::Cursor::new(none))),
            Err(DvError::NoAudio)
        ));
        let twenty = frame(0, 2, &[1, 2]);
        assert!(matches!(
            DvWav::raw(Box::new(std::io::Cursor::new(twenty))),
            Err(DvError::NoAudio)
        ));
        // Cut anywhere: an error or what there is, never a panic.
        let whole = frame(0, 0, &[1, 2]);
        for cut in (0..whole.len()).step_by(997) {
            if let Ok(mut d) = DvWav::raw(Box::new(std::io::Cursor::new(whole[..cut].to_vec()))) {
                let _ = d.read_to_end(&mut Vec::new());
            }
        }
    }

    #[test]
    fn twelve_bit_samples_widen_as_the_standard_says() {
        // The linear segments at both ends, and one compressed segment each way.
        assert_eq!(widen(0x000), 0);
        assert_eq!(widen(0x1FF), 0x1FF);
        assert_eq!(widen(0x200), 0x200);
        assert_eq!(widen(0x300), 0x400);
        assert_eq!(widen(0x7FF), 0x7FC0);
        assert_eq!(widen(0xFFF), -1);
        assert_eq!(widen(0xE00), -512);
        assert_eq!(widen(0xD00), -1023);
        assert_eq!(widen(0x800), i16::MIN + 0x40 - 1);
    }
}
