//! Nellymoser Asao, the codec of Flash Player's microphone (FLV audio formats 4, 5 and 6:
//! webcam and voice recordings made in browsers before WebRTC, and their servers' FLV
//! files). A 64-byte block holds 256 samples: 23 band energies, then two halves of
//! 124 MDCT coefficients whose bits the energies allot, noise where they allot none.
//!
//! The decoder follows FFmpeg's (`nellymoserdec.c`, `nellymoser.c`): the bit allocation
//! in its integer steps, its noise generator's signs; its IMDCT is computed directly
//! here, so samples differ from FFmpeg's by float rounding alone.

use crate::codec::{BlockDecode, Lfg};

const BANDS: usize = 23;
const BLOCK: usize = 64;
const HEADER_BITS: usize = 116;
const DETAIL_BITS: i32 = 198;
const BUF_LEN: usize = 128;
const FILL_LEN: usize = 124;
const BIT_CAP: i32 = 6;
const BASE_OFF: i32 = 4228;
const BASE_SHIFT: i32 = 19;
pub(crate) const SAMPLES: usize = 2 * BUF_LEN;

/// The state of FFmpeg's lagged Fibonacci generator seeded with 0 ([`Lfg`]): the signs
/// of the noise.
const LFG_SEED_0: [u32; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0x3b376b5e, 0xf56be763, 0xcba2a7fc, 0x9751b2c7, 0x5b1fe69a, 0x860b05af,
    0x2b2650ca, 0x92a97fb0, 0x7315e8eb, 0x8b6287a3, 0x2ddbd8b3, 0x1d098ca2, 0x6a65b478, 0xc9b22db4,
    0x9637fbcf, 0xd4427934, 0xb390e2b5, 0x92a84d32, 0x2110b086, 0x25a9182f, 0x239295f1, 0xc6f846f7,
    0x5c5b3a51, 0xe6a7ba34, 0xd6597325, 0xa537e3df, 0xcb80e534, 0xeaecf2dc, 0x9bbb6bd1, 0x2ea8bd11,
    0x8c06ce60, 0x6859af1d, 0xf159f64e, 0xc213bd06, 0x2a5d7785, 0xe621dc54, 0xb8cb9a8e, 0xe6a491f8,
    0x85d7df25, 0x917d9aee, 0xb156c513, 0x5bd929dd, 0xf6a9dab1, 0xc3ec5f2a, 0x5215230d, 0xe2b677d7,
    0x701e36e7, 0x5405e2c7, 0xddcb3ae2, 0x95b866ea, 0x1eb13c9a, 0x346646c2, 0x8ba48526, 0xb325e9bf,
    0x29f07d49, 0xc986cf38,
];

/// Coefficient values for each bit count (1 to 6), from `(1 << bits) - 1` on.
const DEQUANTIZATION: [f32; 127] = [
    0.0, -0.847256, 0.722471, -1.524748, -0.453148, 0.375361, 1.47179, -1.982258, -1.192938,
    -0.582937, -0.069378, 0.390957, 0.90692, 1.486274, 2.221541, -2.388787, -1.806754, -1.410542,
    -1.077361, -0.799501, -0.555811, -0.333402, -0.132449, 0.056802, 0.254877, 0.477355, 0.738685,
    1.044306, 1.395446, 1.809875, 2.391876, -2.389383, -1.988468, -1.751404, -1.564312, -1.392213,
    -1.216465, -1.04695, -0.89051, -0.764558, -0.645458, -0.525928, -0.405955, -0.302972, -0.20969,
    -0.123987, -0.047923, 0.025773, 0.100134, 0.173718, 0.258554, 0.35229, 0.456988, 0.576775,
    0.700316, 0.842552, 1.009388, 1.182135, 1.353456, 1.532082, 1.733262, 1.972235, 2.397814,
    -2.575631, -2.057332, -1.898492, -1.772781, -1.66626, -1.574218, -1.499332, -1.431664,
    -1.365228, -1.300099, -1.228093, -1.158858, -1.092125, -1.013574, -0.920285, -0.828705,
    -0.737489, -0.644776, -0.559094, -0.485714, -0.411032, -0.34597, -0.285116, -0.234162,
    -0.187058, -0.14425, -0.110717, -0.073968, -0.036561, -0.007329, 0.020361, 0.047904, 0.075197,
    0.0981, 0.122039, 0.1459, 0.169435, 0.197046, 0.225243, 0.255687, 0.28701, 0.31971, 0.352583,
    0.388907, 0.433492, 0.476946, 0.520482, 0.564453, 0.612204, 0.668593, 0.734165, 0.803216,
    0.878404, 0.956621, 1.039707, 1.129377, 1.221116, 1.308028, 1.40248, 1.505682, 1.622773,
    1.772496, 1.943088, 2.290393,
];

const BAND_SIZES: [u8; BANDS] = [
    2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 4, 4, 5, 6, 6, 7, 8, 9, 10, 12, 14, 15,
];

const INIT: [u16; 64] = [
    3134, 5342, 6870, 7792, 8569, 9185, 9744, 10191, 10631, 11061, 11434, 11770, 12116, 12513,
    12925, 13300, 13674, 14027, 14352, 14716, 15117, 15477, 15824, 16157, 16513, 16804, 17090,
    17401, 17679, 17948, 18238, 18520, 18764, 19078, 19381, 19640, 19921, 20205, 20500, 20813,
    21162, 21465, 21794, 22137, 22453, 22756, 23067, 23350, 23636, 23926, 24227, 24521, 24819,
    25107, 25414, 25730, 26120, 26497, 26895, 27344, 27877, 28463, 29426, 31355,
];

const DELTA: [i16; 32] = [
    -11725, -9420, -7910, -6801, -5948, -5233, -4599, -4039, -3507, -3030, -2596, -2170, -1774,
    -1383, -1016, -660, -329, -1, 337, 696, 1085, 1512, 1962, 2433, 2968, 3569, 4314, 5279, 6622,
    8154, 10076, 12975,
];

/// Reads bits from each byte's least significant on, the first bit read the value's
/// least significant.
struct LeBits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl LeBits<'_> {
    fn get(&mut self, n: u32) -> u32 {
        let mut v = 0;
        for k in 0..n {
            let at = self.pos + k as usize;
            let bit = self.data.get(at / 8).map_or(0, |b| (b >> (at % 8)) & 1);
            v |= u32::from(bit) << k;
        }
        self.pos += n as usize;
        v
    }
}

/// A Nellymoser decoder.
pub(crate) struct Nelly {
    lfg: Lfg,
    /// The last half-block's IMDCT output, whose second half overlaps the next.
    prev: [f32; BUF_LEN],
    /// The sine window, and the IMDCT's cosines.
    window: [f32; BUF_LEN],
    cosines: Vec<f64>,
}

impl Nelly {
    pub(crate) fn new() -> Self {
        let n = 2 * BUF_LEN;
        // imdct_half's outputs are the full IMDCT's middle half: k from n/4.
        let cosines = (0..BUF_LEN * BUF_LEN)
            .map(|kj| {
                let (k, j) = ((kj / BUF_LEN + n / 4) as f64, (kj % BUF_LEN) as f64);
                (2.0 * std::f64::consts::PI / n as f64 * (k + 0.5 + n as f64 / 4.0) * (j + 0.5))
                    .cos()
            })
            .collect();
        Self {
            lfg: Lfg::new(LFG_SEED_0),
            prev: [0.0; BUF_LEN],
            window: std::array::from_fn(|i| {
                (((i as f64 + 0.5) * (std::f64::consts::PI / (2.0 * BUF_LEN as f64))) as f32).sin()
            }),
            cosines,
        }
    }

    fn decode_block(&mut self, block: &[u8], audio: &mut [f32]) {
        let mut r = LeBits {
            data: block,
            pos: 0,
        };
        let mut buf = [0f32; FILL_LEN];
        let mut pows = [0f32; FILL_LEN];
        let mut val = f32::from(INIT[r.get(6) as usize]);
        let mut at = 0;
        for (i, &size) in BAND_SIZES.iter().enumerate() {
            if i > 0 {
                val += f32::from(DELTA[r.get(5) as usize]);
            }
            let pval = (-f64::from(val / 2048.0).exp2() * f64::from(SCALE_BIAS)) as f32;
            for _ in 0..size {
                buf[at] = val;
                pows[at] = pval;
                at += 1;
            }
        }
        let bits = sample_bits(&buf);
        for half in 0..2 {
            let mut r = LeBits {
                data: block,
                pos: HEADER_BITS + half * DETAIL_BITS as usize,
            };
            let mut coefs = [0f32; BUF_LEN];
            for j in 0..FILL_LEN {
                if bits[j] <= 0 {
                    coefs[j] = (std::f64::consts::FRAC_1_SQRT_2 * f64::from(pows[j])) as f32;
                    if self.lfg.next() & 1 == 1 {
                        coefs[j] = -coefs[j];
                    }
                } else {
                    let v = r.get(bits[j] as u32) as usize;
                    coefs[j] = DEQUANTIZATION[(1 << bits[j]) - 1 + v] * pows[j];
                }
            }
            let out = self.imdct_half(&coefs);
            // Overlap-add with the last half-block's second half, windowed.
            let dst = &mut audio[half * BUF_LEN..(half + 1) * BUF_LEN];
            let len = BUF_LEN / 2;
            for i in 0..len {
                let j = BUF_LEN - 1 - i;
                let (s0, s1) = (self.prev[len + i], out[j - len]);
                let (wi, wj) = (self.window[i], self.window[j]);
                dst[i] = s0 * wj - s1 * wi;
                dst[j] = s0 * wi + s1 * wj;
            }
            self.prev = out;
        }
    }

    /// The middle half of the 256-point IMDCT of `coefs`.
    fn imdct_half(&self, coefs: &[f32; BUF_LEN]) -> [f32; BUF_LEN] {
        std::array::from_fn(|k| {
            let row = &self.cosines[k * BUF_LEN..(k + 1) * BUF_LEN];
            -row.iter()
                .zip(coefs)
                .map(|(c, &x)| c * f64::from(x))
                .sum::<f64>() as f32
        })
    }
}

const SCALE_BIAS: f32 = 1.0 / (32768.0 * 8.0);

fn signed_shift(i: i32, shift: i32) -> i32 {
    if shift > 0 {
        (i as u32).wrapping_shl(shift as u32) as i32
    } else {
        i >> (-shift).min(31)
    }
}

/// Shifts `la` left until its top bit is bit 30; by how much (31 for 0).
fn headroom(la: &mut i32) -> i32 {
    if *la == 0 {
        return 31;
    }
    let l = 30 - (31 - la.unsigned_abs().leading_zeros() as i32);
    *la = la.wrapping_mul(1 << l);
    l
}

fn sum_bits(buf: &[i16; FILL_LEN], shift: i32, off: i32) -> i32 {
    buf.iter()
        .map(|&b| {
            let b = i32::from(b).wrapping_sub(off);
            (((b >> (shift - 1)) + 1) >> 1).clamp(0, BIT_CAP)
        })
        .sum()
}

/// The bits each coefficient gets: in proportion to its band's energy, 198 in all, as
/// the encoder allotted them (FFmpeg's `ff_nelly_get_sample_bits`).
fn sample_bits(buf: &[f32; FILL_LEN]) -> [i32; FILL_LEN] {
    let mut max = 0i32;
    for &b in buf {
        if b > max as f32 {
            max = b as i32;
        }
    }
    let mut shift = -16 + headroom(&mut max);
    let mut sum = 0i32;
    let mut sbuf = [0i16; FILL_LEN];
    for (s, &b) in sbuf.iter_mut().zip(buf) {
        *s = signed_shift(b as i32, shift) as i16;
        *s = ((3 * i32::from(*s)) >> 2) as i16;
        sum += i32::from(*s);
    }
    shift += 11;
    let shift_saved = shift;
    // Wrapping, as FFmpeg's ints do (a shift past 31 bits only for blocks of no energy).
    sum = sum.wrapping_sub(DETAIL_BITS.wrapping_shl(shift as u32));
    shift += headroom(&mut sum);
    let mut small_off = (BASE_OFF * (sum >> 16)) >> 15;
    shift = shift_saved - (BASE_SHIFT + shift - 31);
    small_off = signed_shift(small_off, shift);
    let mut bitsum = sum_bits(&sbuf, shift_saved, small_off);

    if bitsum != DETAIL_BITS {
        let mut off = bitsum - DETAIL_BITS;
        shift = 0;
        while off.abs() <= 16383 {
            off *= 2;
            shift += 1;
        }
        off = (off * BASE_OFF) >> 15;
        shift = shift_saved - (BASE_SHIFT + shift - 15);
        off = signed_shift(off, shift);

        let (mut last_off, mut last_bitsum) = (small_off, bitsum);
        let mut j = 1;
        while j < 20 {
            last_off = small_off;
            small_off = small_off.wrapping_add(off);
            last_bitsum = bitsum;
            bitsum = sum_bits(&sbuf, shift_saved, small_off);
            if (bitsum - DETAIL_BITS) * (last_bitsum - DETAIL_BITS) <= 0 {
                break;
            }
            j += 1;
        }
        let (mut big_off, mut big_bitsum, mut small_bitsum);
        if bitsum > DETAIL_BITS {
            big_off = small_off;
            small_off = last_off;
            big_bitsum = bitsum;
            small_bitsum = last_bitsum;
        } else {
            big_off = last_off;
            big_bitsum = last_bitsum;
            small_bitsum = bitsum;
        }
        while bitsum != DETAIL_BITS && j <= 19 {
            let off = big_off.wrapping_add(small_off) >> 1;
            bitsum = sum_bits(&sbuf, shift_saved, off);
            if bitsum > DETAIL_BITS {
                big_off = off;
                big_bitsum = bitsum;
            } else {
                small_off = off;
                small_bitsum = bitsum;
            }
            j += 1;
        }
        if (big_bitsum - DETAIL_BITS).abs() >= (small_bitsum - DETAIL_BITS).abs() {
            bitsum = small_bitsum;
        } else {
            small_off = big_off;
            bitsum = big_bitsum;
        }
    }

    let mut bits = [0i32; FILL_LEN];
    for (b, &s) in bits.iter_mut().zip(&sbuf) {
        let tmp = i32::from(s).wrapping_sub(small_off);
        *b = (((tmp >> (shift_saved - 1)) + 1) >> 1).clamp(0, BIT_CAP);
    }
    if bitsum > DETAIL_BITS {
        let (mut tmp, mut i) = (0, 0);
        while tmp < DETAIL_BITS && i < FILL_LEN {
            tmp += bits[i];
            i += 1;
        }
        bits[i - 1] -= tmp - DETAIL_BITS;
        for b in &mut bits[i..] {
            *b = 0;
        }
    }
    bits
}

impl BlockDecode for Nelly {
    const PARTIAL: bool = false;
    type Sample = f32;

    fn block(&self) -> usize {
        BLOCK
    }

    fn samples_per_block(&self) -> usize {
        SAMPLES
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<f32>) {
        let at = out.len();
        out.resize(at + SAMPLES, 0.0);
        self.decode_block(block, &mut out[at..]);
    }
}
