//! E-AC-3's adaptive hybrid transform (A/52 §E.3.4): for a channel whose exponents hold
//! over a frame's six blocks, each coefficient's six values come coded together in the
//! first block, as a vector-quantized code (pointers 1–7) or six gain-adaptive quantized
//! mantissas (8–19), and a 6-point inverse DCT across the blocks gives them back.

use super::blocks::Blocks;
use super::vq::VQ;
use super::{Bits, Parse, BLOCKS};

/// The high-efficiency bit allocation pointers by masked power (A/52 table E3.1).
pub(super) const HEBAP: [u8; 64] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12,
    13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 17, 17, 17, 17, 18, 18, 18, 18,
    18, 18, 18, 18, 19, 19, 19, 19, 19, 19, 19, 19, 19,
];

/// Bits of a code (pointers 1–7) or of a mantissa (8–19) by pointer (A/52 table E3.2).
const BITS: [u32; 20] = [
    0, 2, 3, 4, 5, 7, 8, 9, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16,
];

/// Gain-adaptive quantization's remapping (A/52 table E3.6, Q15): of a mantissa without
/// gain by pointer 8–19, and of a large mantissa (its scale, and its offset when negative)
/// by pointer 8–16 and gain 2 or 4.
const REMAP_1: [i64; 12] = [4681, 2185, 1057, 520, 258, 129, 64, 32, 16, 8, 2, 0];
const REMAP_A: [[i64; 2]; 9] = [
    [-10923, -4681],
    [-14043, -6554],
    [-15292, -7399],
    [-15855, -7802],
    [-16124, -7998],
    [-16255, -8096],
    [-16320, -8144],
    [-16352, -8168],
    [-16368, -8180],
];
const REMAP_B: [[i64; 2]; 9] = [
    [-5461, -1170],
    [-11703, -4915],
    [-14199, -6606],
    [-15327, -7412],
    [-15864, -7805],
    [-16126, -7999],
    [-16255, -8096],
    [-16320, -8144],
    [-16352, -8168],
];

/// One in the 24-bit fixed point the remapping works in.
const ONE: f32 = (1 << 23) as f32;

/// The 6-point inverse DCT across a frame's blocks: `x[n] = X[0] + √2 Σ X[k] cos(π(2n+1)k/12)`.
fn idct6(x: [f32; BLOCKS]) -> [f32; BLOCKS] {
    std::array::from_fn(|n| {
        let pi = std::f32::consts::PI;
        x[0] + (1..BLOCKS)
            .map(|k| {
                std::f32::consts::SQRT_2 * x[k] * (pi * (2 * n + 1) as f32 * k as f32 / 12.0).cos()
            })
            .sum::<f32>()
    })
}

impl Blocks {
    /// Channel `ch`'s values for all six blocks, read in the frame's first block where its
    /// mantissas come: the gain codes, then each coefficient's code or mantissas.
    pub(super) fn aht_mantissas(&mut self, r: &mut Bits, ch: usize) -> Parse<()> {
        let (start, end) = (self.start[ch], self.end[ch]);
        let mode = r.get(2)?;
        let end_bap: u8 = if mode < 2 { 12 } else { 17 };
        let mut gains = Vec::new();
        match mode {
            // One bit a gain: 1 or 2 (mode 1), 1 or 4 (mode 2); as log2.
            1 | 2 => {
                for bin in start..end {
                    if (8..end_bap).contains(&self.bap[ch][bin]) {
                        gains.push(r.get(1)? << (mode - 1));
                    }
                }
            }
            // Three gains of 1, 2 or 4 in five bits.
            3 => {
                let mut left = 0;
                for bin in start..end {
                    if (8..17).contains(&self.bap[ch][bin]) {
                        if left == 0 {
                            let g = r.get(5)?.min(26);
                            gains.extend([g / 9, g % 9 / 3, g % 3]);
                            left = 3;
                        }
                        left -= 1;
                    }
                }
            }
            _ => {}
        }
        let mut gains = gains.into_iter();
        for bin in start..end {
            let hebap = usize::from(self.bap[ch][bin]);
            let bits = BITS[hebap];
            let mut pre = [0f32; BLOCKS];
            if hebap == 0 {
                for p in &mut pre {
                    *p = self.dither_value() / std::f32::consts::SQRT_2;
                }
            } else if hebap < 8 {
                let code = r.get(bits)? as usize;
                let row = VQ[hebap]
                    .get(code)
                    .ok_or("ac3: a vector code past its codebook")?;
                for (p, &v) in pre.iter_mut().zip(row) {
                    *p = f32::from(v) / 32768.0;
                }
            } else {
                let gain = match mode != 0 && hebap < usize::from(end_bap) {
                    true => gains.next().unwrap_or(0),
                    false => 0,
                };
                let short = bits - gain;
                for p in &mut pre {
                    let mut m = i64::from(r.signed(short)?);
                    if gain != 0 && m == -(1 << (short - 1)) {
                        // A large mantissa: an escape, then more bits, remapped.
                        let long = bits - (2 - gain);
                        m = i64::from(r.signed(long)?) << (23 - (long - 1));
                        let g = gain as usize - 1;
                        let offset = match m >= 0 {
                            true => 1 << (23 - gain),
                            false => REMAP_B[hebap - 8][g] << 8,
                        };
                        m += ((REMAP_A[hebap - 8][g] * m) >> 15) + offset;
                    } else {
                        m <<= 24 - bits;
                        if gain == 0 {
                            m += (REMAP_1[hebap - 8] * m) >> 15;
                        }
                    }
                    *p = m as f32 / ONE;
                }
            }
            self.pre[ch][bin] = idct6(pre);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inverse DCT is FFmpeg's butterflies' (√2 cos(kπ/12) weights, checked on two
    /// outputs by hand), and a DC input comes out flat.
    #[test]
    fn idct6_is_the_standards() {
        let x = [0.5, 0.25, -0.125, 0.0625, 0.75, -0.375];
        let out = idct6(x);
        let s2 = std::f32::consts::SQRT_2;
        let (c15, c30, c75) = (
            15f32.to_radians().cos(),
            30f32.to_radians().cos(),
            75f32.to_radians().cos(),
        );
        let first = x[0] + s2 * (x[1] * c15 + x[2] * c30 + x[4] * 0.5 + x[5] * c75) + x[3];
        let last = x[0] + s2 * (-x[1] * c15 + x[2] * c30 + x[4] * 0.5 - x[5] * c75) - x[3];
        assert!((out[0] - first).abs() < 1e-5, "{} vs {first}", out[0]);
        assert!((out[5] - last).abs() < 1e-5, "{} vs {last}", out[5]);
        assert_eq!(idct6([0.25, 0.0, 0.0, 0.0, 0.0, 0.0]), [0.25; 6]);
    }

    /// The tables are the standard's: the codebooks' sizes, and rows against A/52's
    /// tables E4 (as FFmpeg carries them: its 32-code codebook ends in a zero row).
    #[test]
    fn codebooks_are_the_standards() {
        let sizes: Vec<usize> = VQ.iter().map(|v| v.len()).collect();
        assert_eq!(sizes, [0, 4, 8, 16, 32, 128, 256, 512]);
        for (hebap, &size) in sizes.iter().enumerate().skip(1) {
            assert_eq!(1 << BITS[hebap], size, "pointer {hebap}");
        }
        assert_eq!(VQ[1][0], [7167, 4739, 1106, 4269, 10412, 4820]);
        assert_eq!(VQ[4][31], [0; 6]);
        assert_eq!(VQ[5][127], [8495, -894, 20438, -13820, -17267, 139]);
        assert_eq!(VQ[7][511], [3231, -3284, 27336, 4174, -1683, 497]);
    }

    /// Each kind of coded value reads as the standard says: a vector code, mantissas
    /// without gain (remapped), and under gain 2 a small one and a large one (escaped).
    #[test]
    fn codes_and_mantissas_read_as_coded() {
        let mut b = Blocks::new();
        b.start[0] = 0;
        b.end[0] = 3;
        b.bap[0][..3].copy_from_slice(&[1, 8, 9]);
        // Gain mode 1 (gains for pointers 8–11): bin 1's gain 0, bin 2's gain 1 (×2).
        let mut bits = vec![(2, 1), (1, 0), (1, 1)];
        // Bin 0: code 2 of the first codebook.
        bits.push((2, 2));
        // Bin 1: six 3-bit mantissas, 1 each.
        bits.extend([(3, 1); 6]);
        // Bin 2: 4-bit pointer under gain 2: 3-bit mantissas; the escape (-4) then a
        // 3-bit large one (3), then five small ones of 1.
        bits.extend([(3, 4), (3, 3)]);
        bits.extend([(3, 1); 5]);
        let mut w = Vec::new();
        for (n, v) in bits {
            w.extend((0..n).rev().map(|i| (v >> i) & 1 == 1));
        }
        let mut bytes = vec![0u8; w.len().div_ceil(8) + 4];
        for (i, &bit) in w.iter().enumerate() {
            bytes[i / 8] |= u8::from(bit) << (7 - i % 8);
        }
        b.aht_mantissas(&mut Bits::new(&bytes), 0).unwrap();
        let vq = VQ[1][2].map(|v| f32::from(v) / 32768.0);
        let small = {
            let m = 1i64 << 21;
            (m + ((4681 * m) >> 15)) as f32 / ONE
        };
        let large = {
            let m = 3i64 << 21;
            (m + ((-14043 * m) >> 15) + (1 << 22)) as f32 / ONE
        };
        // Under a gain a small mantissa keeps the pointer's scale: 1 of 4 bits.
        let gained = (1i64 << 20) as f32 / ONE;
        let want = [
            idct6(vq),
            idct6([small; 6]),
            idct6([large, gained, gained, gained, gained, gained]),
        ];
        for (bin, w) in want.iter().enumerate() {
            for (got, want) in b.pre[0][bin].iter().zip(w) {
                assert!(
                    (got - want).abs() < 1e-6,
                    "bin {bin}: {:?} vs {w:?}",
                    b.pre[0][bin]
                );
            }
        }
    }
}
