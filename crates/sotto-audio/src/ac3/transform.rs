//! A/52's inverse transforms (§7.9): a block's 256 coefficients to 512 samples, through a
//! DCT-IV computed with a complex FFT of a quarter the block, for the long transform and
//! the two interleaved short ones of block switching; and its window.

use std::sync::OnceLock;

use crate::codec::Dct4;

use super::BLOCK;

/// A block's two inverse transforms: the long one (256 coefficients), and the pair of short
/// ones that block switching interleaves (128 each, at even and odd coefficients).
pub(super) struct Transforms {
    long: Dct4,
    short: Dct4,
    c: [f32; BLOCK],
}

impl Transforms {
    pub(super) fn new() -> Self {
        Self {
            long: Dct4::new(BLOCK),
            short: Dct4::new(BLOCK / 2),
            c: [0.0; BLOCK],
        }
    }

    /// The 512 samples, before the window, of a block's coefficients.
    pub(super) fn block(&mut self, coeffs: &[f32; BLOCK], short: bool, y: &mut [f32; 2 * BLOCK]) {
        if short {
            let (first, second) = y.split_at_mut(BLOCK);
            let c = &mut self.c[..BLOCK / 2];
            self.short.dct4(coeffs, 0, 2, c);
            unfold(c, 0, first);
            self.short.dct4(coeffs, 1, 2, c);
            unfold(c, BLOCK / 2, second);
        } else {
            self.long.dct4(coeffs, 0, 1, &mut self.c);
            unfold(&self.c, BLOCK / 2, y);
        }
    }
}

/// `2m` samples of the transform whose DCT-IV is `c`, from `offset` (at most `m`) samples
/// into its periodic extension: `c`, then `c` reversed and negated, then `c` negated
/// (A/52's long transform starts `m / 2` in; its two short ones, 0 and `m`).
fn unfold(c: &[f32], offset: usize, out: &mut [f32]) {
    let m = c.len();
    let mut ext = [0f32; 3 * BLOCK];
    ext[..m].copy_from_slice(c);
    for (e, &v) in ext[m..2 * m].iter_mut().zip(c.iter().rev()) {
        *e = -v;
    }
    for (e, &v) in ext[2 * m..3 * m].iter_mut().zip(c) {
        *e = -v;
    }
    out.copy_from_slice(&ext[offset..offset + 2 * m]);
}

/// The first half of A/52's window: Kaiser-Bessel derived, α = 5, 512 points.
pub(super) fn window() -> &'static [f32; 256] {
    static WINDOW: OnceLock<[f32; 256]> = OnceLock::new();
    WINDOW.get_or_init(|| {
        fn bessel_i0(x: f64) -> f64 {
            let (mut sum, mut term, mut k) = (1.0, 1.0, 1.0);
            while term > 1e-12 * sum {
                term *= (x / (2.0 * k)) * (x / (2.0 * k));
                sum += term;
                k += 1.0;
            }
            sum
        }
        let alpha = 5.0 * std::f64::consts::PI;
        let kernel: Vec<f64> = (0..=256)
            .map(|j| {
                let t = j as f64 / 128.0 - 1.0;
                bessel_i0(alpha * (1.0 - t * t).sqrt())
            })
            .collect();
        let total: f64 = kernel.iter().sum();
        let mut w = [0f32; 256];
        let mut acc = 0.0;
        for (o, k) in w.iter_mut().zip(&kernel) {
            acc += k;
            *o = (acc / total).sqrt() as f32;
        }
        w
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ac3::OUTPUT_GAIN;

    /// The DCT-IV through the FFT equals its definition.
    #[test]
    fn fast_dct4_matches_its_definition() {
        for m in [128usize, 256] {
            let x: Vec<f32> = (0..m)
                .map(|k| ((k * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut c = vec![0f32; m];
            Dct4::new(m).dct4(&x, 0, 1, &mut c);
            for (n, &got) in c.iter().enumerate() {
                let want: f64 = (0..m)
                    .map(|k| {
                        let a =
                            std::f64::consts::PI / m as f64 * (n as f64 + 0.5) * (k as f64 + 0.5);
                        f64::from(x[k]) * a.cos()
                    })
                    .sum();
                assert!(
                    (f64::from(got) - want).abs() < 1e-3,
                    "m {m} n {n}: {got} vs {want}"
                );
            }
        }
    }

    /// The window is A/52's (its table, in 16-bit fixed point, truncated), and
    /// power-complementary, which the overlap-add relies on.
    #[test]
    fn window_is_kbd_alpha_5() {
        let w = window();
        let q = |i: usize| (w[i] * 32768.0) as i32;
        assert_eq!(
            [q(0), q(1), q(2), q(3), q(128), q(200)],
            [4, 7, 12, 16, 23314, 32623]
        );
        for n in 0..256 {
            assert!((w[n] * w[n] + w[255 - n] * w[255 - n] - 1.0).abs() < 1e-6);
        }
    }

    /// A/52's forward transforms (§8.2.3.2: a phase of (1 + α)(2k + 1)π/4, α 0 for the
    /// long transform and -1 and +1 for the two short ones) over a signal, with long and
    /// short blocks in turn, come back through the decoder's inverse as the signal itself,
    /// a block later: the short transforms' phases, the window and the output's scale.
    #[test]
    fn forward_transforms_of_any_block_switching_invert() {
        let signal: Vec<f32> = (0..BLOCK * 12)
            .map(|n| ((n * 7919 % 2003) as f32 / 1001.5 - 1.0) * 0.5)
            .collect();
        let w = window();
        let win = |n: usize| {
            if n < BLOCK {
                w[n]
            } else {
                w[2 * BLOCK - 1 - n]
            }
        };
        let forward = |x: &[f32], n: usize, alpha: f64, k: usize| -> f32 {
            let pi = std::f64::consts::PI;
            let sum: f64 = (0..n)
                .map(|i| {
                    let a = 2.0 * pi / (4.0 * n as f64) * (2 * i + 1) as f64 * (2 * k + 1) as f64
                        + pi / 4.0 * (2 * k + 1) as f64 * (1.0 + alpha);
                    f64::from(x[i]) * a.cos()
                })
                .sum();
            (-2.0 / n as f64 * sum) as f32
        };
        let mut t = Transforms::new();
        let mut delay = [0f32; BLOCK];
        let mut out = Vec::new();
        for b in 0..signal.len() / BLOCK - 1 {
            let x: Vec<f32> = (0..2 * BLOCK)
                .map(|n| signal[b * BLOCK + n] * win(n))
                .collect();
            let short = b % 3 == 1 || b == 6;
            let mut coeffs = [0f32; BLOCK];
            for k in 0..BLOCK / 2 {
                if short {
                    coeffs[2 * k] = forward(&x[..BLOCK], BLOCK, -1.0, k);
                    coeffs[2 * k + 1] = forward(&x[BLOCK..], BLOCK, 1.0, k);
                } else {
                    coeffs[k] = forward(&x, 2 * BLOCK, 0.0, k);
                    coeffs[k + BLOCK / 2] = forward(&x, 2 * BLOCK, 0.0, k + BLOCK / 2);
                }
            }
            let mut y = [0f32; 2 * BLOCK];
            t.block(&coeffs, short, &mut y);
            for n in 0..BLOCK {
                out.push(OUTPUT_GAIN * (y[n] * w[n] + delay[n]));
                delay[n] = y[BLOCK + n] * w[BLOCK - 1 - n];
            }
        }
        // Block b's output is the second half of block b - 1's window: the signal from
        // sample b * 256.
        for (i, &o) in out.iter().enumerate().skip(BLOCK) {
            let want = signal[i];
            assert!((o - want).abs() < 1e-4, "sample {i}: {o} vs {want}");
        }
    }
}
