//! G.722 (wideband "HD voice": SIP phones and recorders; WAV format 0x028F, raw `.g722`):
//! two ADPCM sub-bands, 6 bits for 0–4 kHz and 2 for 4–8 kHz in each byte (64 kb/s), and
//! a 24-tap QMF that makes two 16 kHz samples of each byte.
//!
//! The decoder follows FFmpeg's (`g722.c`, `g722dec.c`; ITU-T G.722's arithmetic, bit
//! exact to its test vectors), so its samples are faster-whisper's. Decoded samples go to
//! symphonia as a 16-bit PCM WAV file (see [`crate::codec::DecodedWav`]).

use crate::codec::BlockDecode;

/// WAV's format tag for G.722.
pub(crate) const WAV_TAG: u16 = 0x028F;

/// 2^(i/32) in Q11, for the quantizer scale factor (ITU-T G.722 table 16's ILA).
const INV_LOG2: [i32; 32] = [
    2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
    2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008,
];
const HIGH_LOG_STEP: [i32; 2] = [798, -214];
const HIGH_INV_QUANT: [i32; 4] = [-926, -202, 926, 202];
const LOW_LOG_STEP: [i32; 16] = [
    -60, 3042, 1198, 538, 334, 172, 58, -30, 3042, 1198, 538, 334, 172, 58, -30, -60,
];
const LOW_INV_QUANT4: [i32; 16] = [
    0, -2557, -1612, -1121, -786, -530, -323, -150, 2557, 1612, 1121, 786, 530, 323, 150, 0,
];
const LOW_INV_QUANT6: [i32; 64] = [
    -17, -17, -17, -17, -3101, -2738, -2376, -2088, -1873, -1689, -1535, -1399, -1279, -1170,
    -1072, -982, -899, -822, -750, -682, -618, -558, -501, -447, -396, -347, -300, -254, -211,
    -170, -130, -91, 3101, 2738, 2376, 2088, 1873, 1689, 1535, 1399, 1279, 1170, 1072, 982, 899,
    822, 750, 682, 618, 558, 501, 447, 396, 347, 300, 254, 211, 170, 130, 91, 54, 17, -54, -17,
];
/// The QMF's coefficients (table 11), as each output sample of a pair takes them over the
/// last 24 inputs, oldest first.
const QMF_SECOND: [i32; 12] = [3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11];
const QMF_FIRST: [i32; 12] = [-11, 53, -156, 362, -805, 3876, 951, -210, 32, 12, -11, 3];

fn clip(v: i32, lo: i32, hi: i32) -> i32 {
    v.clamp(lo, hi)
}

fn clip16(v: i32) -> i32 {
    clip(v, i32::from(i16::MIN), i32::from(i16::MAX))
}

/// One sub-band's adaptive predictor and quantizer state.
#[derive(Default)]
struct Band {
    s_predictor: i32,
    s_zero: i32,
    part_reconst: [bool; 2],
    prev_qtzd_reconst: i32,
    pole: [i32; 2],
    diff: [i32; 6],
    /// The zero section's coefficients, kept to 16 bits as FFmpeg's `int16_t`s are.
    zero: [i16; 6],
    log_factor: i32,
    scale_factor: i32,
}

impl Band {
    /// The sixth-order zero section: coefficients adapted by the signs of the
    /// quantized differences, then the predictor's zero part.
    fn s_zero(&mut self, cur: i32) {
        let d = i32::from(cur != 0);
        let mut sum = 0i32;
        for k in (0..6).rev() {
            let tmp = if k == 0 { cur * 2 } else { self.diff[k - 1] };
            let sign = if (self.diff[k] ^ cur) < 0 { -128 } else { 128 };
            self.zero[k] = (((i32::from(self.zero[k]) * 255) >> 8) + d * sign) as i16;
            self.diff[k] = tmp;
            sum = sum.wrapping_add((tmp.wrapping_mul(i32::from(self.zero[k]))) >> 15);
        }
        self.s_zero = sum;
    }

    /// The adaptive predictor after the dequantized difference `cur`.
    fn predict(&mut self, cur: i32) {
        let part = self.s_zero.wrapping_add(cur) < 0;
        let sg0 = if part != self.part_reconst[0] { 1 } else { -1 };
        let sg1 = if part == self.part_reconst[1] { 1 } else { -1 };
        self.part_reconst = [part, self.part_reconst[0]];
        self.pole[1] = clip(
            ((sg0 * clip(self.pole[0], -8191, 8191)) >> 5)
                + sg1 * 128
                + ((self.pole[1] * 127) >> 7),
            -12288,
            12288,
        );
        let limit = 15360 - self.pole[1];
        self.pole[0] = clip(-192 * sg0 + ((self.pole[0] * 255) >> 8), -limit, limit);
        self.s_zero(cur);
        let reconst = clip16((self.s_predictor + cur) * 2);
        self.s_predictor = clip16(
            self.s_zero
                .wrapping_add((self.pole[0] * reconst) >> 15)
                .wrapping_add((self.pole[1] * self.prev_qtzd_reconst) >> 15),
        );
        self.prev_qtzd_reconst = reconst;
    }

    fn scale(&mut self, offset: i32) {
        let f = self.log_factor - offset;
        let wd1 = INV_LOG2[((f >> 6) & 31) as usize];
        let shift = f >> 11;
        self.scale_factor = if shift < 0 {
            wd1 >> -shift
        } else {
            wd1 << shift
        };
    }

    fn update_low(&mut self, ilow: usize) {
        self.predict((self.scale_factor * LOW_INV_QUANT4[ilow]) >> 10);
        self.log_factor = clip(
            ((self.log_factor * 127) >> 7) + LOW_LOG_STEP[ilow],
            0,
            18432,
        );
        self.scale(8 << 11);
    }

    fn update_high(&mut self, dhigh: i32, ihigh: usize) {
        self.predict(dhigh);
        self.log_factor = clip(
            ((self.log_factor * 127) >> 7) + HIGH_LOG_STEP[ihigh & 1],
            0,
            22528,
        );
        self.scale(10 << 11);
    }
}

/// A G.722 decoder at 64 kb/s (all 8 bits of each byte).
pub(crate) struct G722 {
    low: Band,
    high: Band,
    /// The QMF's last 22 inputs, then the two of this byte.
    history: [i32; 24],
}

impl G722 {
    pub(crate) fn new() -> Self {
        let mut g = Self {
            low: Band::default(),
            high: Band::default(),
            history: [0; 24],
        };
        g.low.scale_factor = 8;
        g.high.scale_factor = 2;
        g
    }

    /// The two 16 kHz samples of one byte.
    fn byte(&mut self, b: u8) -> [i16; 2] {
        let (ihigh, ilow) = (usize::from(b >> 6), usize::from(b & 63));
        let rlow = clip(
            ((self.low.scale_factor * LOW_INV_QUANT6[ilow]) >> 10) + self.low.s_predictor,
            -(1 << 14),
            (1 << 14) - 1,
        );
        self.low.update_low(ilow >> 2);
        let dhigh = (self.high.scale_factor * HIGH_INV_QUANT[ihigh]) >> 10;
        let rhigh = clip(dhigh + self.high.s_predictor, -(1 << 14), (1 << 14) - 1);
        self.high.update_high(dhigh, ihigh);
        self.history.copy_within(2.., 0);
        // FFmpeg keeps these as int16_t: the sum and difference wrap there.
        self.history[22] = i32::from((rlow + rhigh) as i16);
        self.history[23] = i32::from((rlow - rhigh) as i16);
        // The first output sample sums the odd-numbered inputs, the second the even.
        let (mut first, mut second) = (0i32, 0i32);
        for k in 0..12 {
            second += self.history[2 * k] * QMF_SECOND[k];
            first += self.history[2 * k + 1] * QMF_FIRST[k];
        }
        [clip16(first >> 11) as i16, clip16(second >> 11) as i16]
    }
}

impl BlockDecode for G722 {
    const PARTIAL: bool = true;
    type Sample = i16;

    fn block(&self) -> usize {
        1024
    }

    fn samples_per_block(&self) -> usize {
        2048
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<i16>) {
        for &b in block {
            out.extend_from_slice(&self.byte(b));
        }
    }
}
