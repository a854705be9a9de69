//! GSM 06.10 full-rate speech (RPE-LTP, 13 kb/s at 8 kHz): voicemail and call recorders'
//! WAV files (format 0x31, "WAV49": two 260-bit frames a 65-byte block, bits least
//! significant first; Microsoft's lower-rate variants in shorter blocks) and raw `.gsm`
//! files (33-byte frames, each a 0xD nibble and 260 bits most significant first).
//!
//! The decoder follows FFmpeg's integer steps (so faster-whisper's samples): the
//! dequantization by table, the long-term predictor, the lattice synthesis filter over
//! interpolated log-area ratios, de-emphasis and the 16-bit output with its low 3 bits
//! cleared. Decoded samples are handed to symphonia as a 16-bit PCM WAV file.

use crate::codec::BlockDecode;

/// Samples a frame decodes to (20 ms at 8 kHz).
const FRAME: usize = 160;
/// Bytes of a raw frame (the 0xD nibble and 260 bits) and of a WAV49 block (two frames).
const RAW_FRAME: usize = 33;
const MS_BLOCK: usize = 65;
/// The shortest Microsoft block (MSN audio at 8.2 kb/s); each 3 bytes more is one mode up.
const MS_MIN_BLOCK: usize = 41;
/// WAV's format tag for GSM 06.10.
pub(crate) const WAV_TAG: u16 = 0x0031;

/// The long-term predictor's gains (GSM 06.10 table 4.3b, QLB).
const LTP_GAIN: [i32; 4] = [3277, 11469, 21299, 32767];

/// Each APCM mode's code lengths per position (FFmpeg's `apcm_bits`).
const APCM_BITS: [[u8; 13]; 11] = [
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    [2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1],
    [2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1],
    [2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1],
    [2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1],
    [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2],
    [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3],
];

/// Per mode (13 kb/s full rate, then Microsoft's 12.4 down to 8.2 kb/s), each
/// sub-frame's row of [`APCM_BITS`].
const MODES: [[usize; 4]; 9] = [
    [10, 10, 10, 10],
    [10, 10, 10, 6],
    [10, 10, 7, 5],
    [10, 8, 5, 5],
    [9, 5, 5, 5],
    [5, 5, 5, 1],
    [5, 5, 2, 0],
    [5, 3, 0, 0],
    [4, 0, 0, 0],
];

/// An n-bit code's 3-bit level (FFmpeg's `requant_tab`).
const REQUANT: [[u8; 8]; 4] = [
    [0; 8],
    [0, 7, 0, 0, 0, 0, 0, 0],
    [0, 2, 5, 7, 0, 0, 0, 0],
    [0, 1, 2, 3, 4, 5, 6, 7],
];

/// The value of the 3-bit level `level` at the block maximum code `xmaxc`: GSM 06.10's
/// APCM inverse quantization, as FFmpeg tabulates it (`ff_gsm_dequant_tab`).
fn dequant(xmaxc: usize, level: usize) -> i16 {
    DEQUANT[xmaxc][level]
}

static DEQUANT: [[i16; 8]; 64] = dequant_table();

/// GSM 06.10 §4.2.15/4.3: x = ((2·level − 7) << 12) · FAC[mant] / 2¹⁵ (rounded), plus
/// half a step, shifted down by 6 − exp; computed as the standard does, at compile time.
const fn dequant_table() -> [[i16; 8]; 64] {
    const FAC: [i32; 8] = [18431, 20479, 22527, 24575, 26623, 28671, 30719, 32767];
    let mut t = [[0i16; 8]; 64];
    let mut xmaxc = 0;
    while xmaxc < 64 {
        // The block maximum's exponent and mantissa (APCM_quantization_xmaxc_to_exp_mant).
        let mut exp = if xmaxc > 15 {
            (xmaxc as i32 >> 3) - 1
        } else {
            0
        };
        let mut mant = xmaxc as i32 - (exp << 3);
        if mant == 0 {
            exp = -4;
            mant = 7;
        } else {
            while mant <= 7 {
                mant = (mant << 1) | 1;
                exp -= 1;
            }
            mant -= 8;
        }
        let shift = 6 - exp;
        let half = if shift >= 1 { 1 << (shift - 1) } else { 0 };
        let mut level = 0;
        while level < 8 {
            let x = ((2 * level as i32 - 7) << 12) * FAC[mant as usize];
            let x = (x + 16384) >> 15;
            t[xmaxc][level] = ((x + half) >> shift) as i16;
            level += 1;
        }
        xmaxc += 1;
    }
    t
}

/// `(a·b + 2¹⁴) >> 15` in 32-bit arithmetic, as FFmpeg's `gsm_mult` wraps it.
#[inline]
fn mult(a: i32, b: i32) -> i32 {
    (a.wrapping_mul(b).wrapping_add(1 << 14)) >> 15
}

fn clip16(v: i32) -> i32 {
    v.clamp(i32::from(i16::MIN), i32::from(i16::MAX))
}

/// A frame's log-area ratio code (`coded`, its bits as the table gives) decoded.
fn log_area(coded: u32, factor: i32, offset: i32) -> i32 {
    mult(((coded as i32) << 10) - offset, factor) * 2
}

/// The reflection coefficient of an interpolated log-area ratio.
fn rrp(lar: i32) -> i32 {
    let a = lar.abs();
    let a = if a < 11059 {
        a << 1
    } else if a < 20070 {
        a + 11059
    } else {
        (a >> 2) + 26112
    };
    if lar < 0 {
        -a
    } else {
        a
    }
}

/// A decoder's state across frames.
pub(crate) struct Gsm {
    /// The excitation: 120 samples of history, then the frame's 160.
    excitation: [i16; 280],
    /// The lattice filter's state.
    v: [i32; 9],
    /// This frame's and the last frame's log-area ratios, and which is this frame's.
    lar: [[i32; 8]; 2],
    current: usize,
    /// The de-emphasis filter's last output.
    msr: i32,
}

impl Gsm {
    pub(crate) fn new() -> Self {
        Self {
            excitation: [0; 280],
            v: [0; 9],
            lar: [[0; 8]; 2],
            current: 0,
            msr: 0,
        }
    }

    /// Decodes one frame whose fields `bits` reads (the next `n` bits as a number), in
    /// APCM mode `mode` (0 for full rate), into `out`.
    fn frame(&mut self, bits: &mut impl FnMut(u32) -> u32, mode: usize, out: &mut [i16; FRAME]) {
        // (bits, factor, offset) of each log-area ratio (GSM 06.10 table 4.1 and §4.2.8).
        const LAR: [(u32, i32, i32); 8] = [
            (6, 13107, 1 << 15),
            (6, 13107, 1 << 15),
            (5, 13107, (1 << 14) + 2048 * 2),
            (5, 13107, (1 << 14) - 2560 * 2),
            (4, 19223, (1 << 13) + 94 * 2),
            (4, 17476, (1 << 13) - 1792 * 2),
            (3, 31454, (1 << 12) - 341 * 2),
            (3, 29708, (1 << 12) - 1144 * 2),
        ];
        for (i, &(n, factor, offset)) in LAR.iter().enumerate() {
            self.lar[self.current][i] = log_area(bits(n), factor, offset);
        }
        for (sub, &row) in MODES[mode].iter().enumerate() {
            let lag = (bits(7) as usize).clamp(40, 120);
            let gain = LTP_GAIN[bits(2) as usize];
            let grid = bits(2) as usize;
            let xmaxc = bits(6) as usize;
            let at = 120 + 40 * sub;
            // Long-term prediction from the excitation `lag` samples back.
            for i in at..at + 40 {
                self.excitation[i] = mult(gain, i32::from(self.excitation[i - lag])) as i16;
            }
            // The 13 pulses on their grid.
            for (k, &n) in APCM_BITS[row].iter().enumerate() {
                let level = REQUANT[usize::from(n)][bits(u32::from(n)) as usize];
                let e = &mut self.excitation[at + grid + 3 * k];
                *e = e.wrapping_add(dequant(xmaxc, usize::from(level)));
            }
        }
        self.excitation.copy_within(160.., 0);
        self.synthesize(out);
        self.current ^= 1;
    }

    /// The short-term (lattice) synthesis filter over the frame's excitation, its
    /// coefficients interpolated from the last frame's over the first 40 samples, then
    /// de-emphasis and the output's scaling.
    fn synthesize(&mut self, out: &mut [i16; FRAME]) {
        let (lar, prev) = (self.lar[self.current], self.lar[self.current ^ 1]);
        /// A log-area ratio between the last frame's (`p`) and this one's (`c`).
        type Mix = fn(i32, i32) -> i32;
        // (first sample, interpolation) of each stretch.
        let stretches: [(usize, Mix); 4] = [
            (0, |p, c| (p >> 2) + (p >> 1) + (c >> 2)),
            (13, |p, c| (p >> 1) + (c >> 1)),
            (27, |p, c| (p >> 2) + (c >> 1) + (c >> 2)),
            (40, |_, c| c),
        ];
        for (s, &(start, mix)) in stretches.iter().enumerate() {
            let end = stretches.get(s + 1).map_or(FRAME, |n| n.0);
            let r: [i32; 8] = std::array::from_fn(|i| rrp(mix(prev[i], lar[i])));
            let excitation = &self.excitation[120 + start..120 + end];
            for (o, &e) in out[start..end].iter_mut().zip(excitation) {
                let mut x = i32::from(e);
                // Wrapping, as FFmpeg's ints do on streams that drive the filter wild.
                for i in (0..8).rev() {
                    x = x.wrapping_sub(mult(r[i], self.v[i]));
                    self.v[i + 1] = self.v[i].wrapping_add(mult(r[i], x));
                }
                self.v[0] = x;
                *o = x as i16;
            }
        }
        for o in out.iter_mut() {
            self.msr = clip16(i32::from(*o) + mult(self.msr, 28180));
            *o = (clip16(self.msr * 2) & !7) as i16;
        }
    }
}

/// Reads bits most significant first (raw `.gsm` frames).
fn be_bits(data: &[u8]) -> impl FnMut(u32) -> u32 + '_ {
    let mut pos = 0usize;
    move |n| {
        let mut v = 0;
        for _ in 0..n {
            let bit = data.get(pos / 8).map_or(0, |b| (b >> (7 - pos % 8)) & 1);
            v = (v << 1) | u32::from(bit);
            pos += 1;
        }
        v
    }
}

/// Reads bits least significant first (WAV49 blocks).
fn le_bits(data: &[u8]) -> impl FnMut(u32) -> u32 + '_ {
    let mut pos = 0usize;
    move |n| {
        let mut v = 0;
        for k in 0..n {
            let bit = data.get(pos / 8).map_or(0, |b| (b >> (pos % 8)) & 1);
            v |= u32::from(bit) << k;
            pos += 1;
        }
        v
    }
}

/// How the bytes hold frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Packing {
    /// 33-byte frames: a 0xD nibble, then 260 bits most significant first.
    Raw,
    /// Microsoft's blocks of two frames, bits least significant first: 65 bytes at full
    /// rate, 3 fewer for each lower mode.
    Ms { block: usize },
}

impl Packing {
    fn block(self) -> usize {
        match self {
            Packing::Raw => RAW_FRAME,
            Packing::Ms { block } => block,
        }
    }
}

/// Decodes one block (a raw frame, or a WAV49 block of two frames) into `out`.
pub(crate) fn decode_block(gsm: &mut Gsm, packing: Packing, block: &[u8], out: &mut Vec<i16>) {
    let mut frame = [0i16; FRAME];
    match packing {
        Packing::Raw => {
            let mut bits = be_bits(block);
            bits(4); // the 0xD signature (FFmpeg decodes a frame without it too)
            gsm.frame(&mut bits, 0, &mut frame);
            out.extend_from_slice(&frame);
        }
        Packing::Ms { block: size } => {
            let mode = (MS_BLOCK - size) / 3;
            let mut bits = le_bits(block);
            for _ in 0..2 {
                gsm.frame(&mut bits, mode, &mut frame);
                out.extend_from_slice(&frame);
            }
        }
    }
}

/// Whether `head` starts a raw GSM stream: its first 4 frames (or, where the name says
/// `.gsm`, its first) each begin with the 0xD signature.
pub(crate) fn is_raw(head: &[u8], ext: Option<&str>) -> bool {
    let needed = if ext == Some("gsm") { 1 } else { 4 };
    let frames: Vec<&[u8]> = head.chunks_exact(RAW_FRAME).take(needed).collect();
    frames.len() == needed && frames.iter().all(|f| f[0] >> 4 == 0xD)
}

/// A GSM stream's blocks, for [`crate::codec::DecodedWav`].
pub(crate) struct GsmBlocks {
    gsm: Gsm,
    packing: Packing,
}

impl GsmBlocks {
    pub(crate) fn new(packing: Packing) -> Self {
        Self {
            gsm: Gsm::new(),
            packing,
        }
    }
}

impl BlockDecode for GsmBlocks {
    const PARTIAL: bool = false;
    type Sample = i16;

    fn block(&self) -> usize {
        self.packing.block()
    }

    fn samples_per_block(&self) -> usize {
        match self.packing {
            Packing::Raw => FRAME,
            Packing::Ms { .. } => 2 * FRAME,
        }
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<i16>) {
        decode_block(&mut self.gsm, self.packing, block, out);
    }
}

/// A WAV49 block size FFmpeg accepts: 41 to 65 bytes, in steps of 3.
pub(crate) fn ms_block_ok(block: usize) -> bool {
    (MS_MIN_BLOCK..=MS_BLOCK).contains(&block) && (block - MS_MIN_BLOCK).is_multiple_of(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table the standard's arithmetic makes is FFmpeg's (`ff_gsm_dequant_tab`): its
    /// first, middle and last rows.
    #[test]
    fn dequantization_table_is_ffmpegs() {
        assert_eq!(DEQUANT[0], [-28, -20, -12, -4, 4, 12, 20, 28]);
        assert_eq!(DEQUANT[16], [-504, -360, -216, -72, 72, 216, 360, 504]);
        assert_eq!(
            DEQUANT[48],
            [-8063, -5759, -3456, -1152, 1152, 3456, 5760, 8064]
        );
        assert_eq!(
            DEQUANT[63],
            [-28671, -20479, -12288, -4096, 4096, 12288, 20479, 28671]
        );
        assert_eq!(
            DEQUANT[56],
            [-16127, -11519, -6912, -2304, 2304, 6912, 11519, 16127]
        );
    }

    #[test]
    fn bit_orders() {
        let mut be = be_bits(&[0b1010_0000, 0xFF]);
        assert_eq!((be(3), be(5), be(4)), (0b101, 0, 0xF));
        let mut le = le_bits(&[0b0000_0101, 0xFF]);
        assert_eq!((le(3), le(5), le(4)), (0b101, 0, 0xF));
    }
}
