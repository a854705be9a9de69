//! DTS's synthesis: the 32-band cosine-modulated filter bank that turns subband samples
//! into PCM, and the LFE channel's interpolation, in floating point as FFmpeg's default
//! decoder does (its window tables, its modulation and its output scale of 2^-17).

use std::sync::OnceLock;

use super::core::{BANDS, LFE_HISTORY};

const TAPS: usize = 512;

/// The filter banks' windows: the perfect-reconstruction one, the lossy one, and the
/// LFE interpolators for one sample in 64 and in 128.
struct Windows {
    perfect: [f32; TAPS],
    nonperfect: [f32; TAPS],
    lfe64: [f32; 256],
    lfe128: [f32; 256],
    /// `-cos(2π/64 · (m + 32.5) · (k + 0.5))`, `[k][m]`: the half inverse MDCT the
    /// polyphase filter starts from.
    modulation: [[f32; BANDS]; BANDS],
}

fn windows() -> &'static Windows {
    static W: OnceLock<Box<Windows>> = OnceLock::new();
    W.get_or_init(|| {
        let bytes: &[u8; 6144] = include_bytes!("fir.bin");
        let at = |i: usize| f32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("four"));
        Box::new(Windows {
            perfect: std::array::from_fn(at),
            nonperfect: std::array::from_fn(|i| at(TAPS + i)),
            lfe64: std::array::from_fn(|i| at(2 * TAPS + i)),
            lfe128: std::array::from_fn(|i| at(2 * TAPS + 256 + i)),
            modulation: std::array::from_fn(|k| {
                std::array::from_fn(|m| {
                    let x = std::f64::consts::PI / 32.0 * (m as f64 + 32.5) * (k as f64 + 0.5);
                    -x.cos() as f32
                })
            }),
        })
    })
}

/// One channel's synthesis filter bank and its history.
#[derive(Clone)]
pub(super) struct Qmf {
    /// The last 16 blocks' modulated samples, a ring written 32 at a time downwards.
    ring: [f32; TAPS],
    at: usize,
    /// The overlap each block leaves for the next.
    carry: [f32; BANDS],
}

impl Qmf {
    pub(super) fn new() -> Self {
        Self {
            ring: [0.0; TAPS],
            at: 0,
            carry: [0.0; BANDS],
        }
    }

    /// 32 PCM samples from one sample of each subband.
    pub(super) fn block(&mut self, input: &[f32; BANDS], perfect: bool, out: &mut [f32]) {
        let w = windows();
        let window = if perfect { &w.perfect } else { &w.nonperfect };
        // Band by band, so that the 32 sums vectorize.
        let mut v = [0f32; BANDS];
        for (row, &x) in w.modulation.iter().zip(input) {
            for (v, c) in v.iter_mut().zip(row) {
                *v += c * x;
            }
        }
        let at = self.at;
        self.ring[at..at + BANDS].copy_from_slice(&v);
        let (mut a, mut b) = ([0f32; 16], [0f32; 16]);
        a.copy_from_slice(&self.carry[..16]);
        b.copy_from_slice(&self.carry[16..]);
        let (mut c, mut d) = ([0f32; 16], [0f32; 16]);
        // Each 64 taps of the window meet one 32-sample block of the ring (which never
        // wraps within a block), read forwards and backwards.
        for (j, taps) in window.chunks_exact(64).enumerate() {
            let base = (at + 64 * j) & (TAPS - 1);
            let seg = &self.ring[base..base + BANDS];
            for i in 0..16 {
                a[i] -= taps[i] * seg[15 - i];
                b[i] += taps[16 + i] * seg[i];
                c[i] += taps[32 + i] * seg[16 + i];
                d[i] += taps[48 + i] * seg[31 - i];
            }
        }
        const SCALE: f32 = 1.0 / (1 << 17) as f32;
        for i in 0..16 {
            out[i] = a[i] * SCALE;
            out[16 + i] = b[i] * SCALE;
        }
        self.carry[..16].copy_from_slice(&c);
        self.carry[16..].copy_from_slice(&d);
        self.at = (at + TAPS - 32) & (TAPS - 1);
    }
}

/// The LFE channel at the full rate: each of `lfe`'s samples past its `LFE_HISTORY` first
/// gives 64 (`one_in` 64) or 128 PCM samples into `out`.
pub(super) fn lfe(lfe: &[i32], one_in: usize, out: &mut [f32]) {
    let w = windows();
    let (table, taps) = if one_in == 128 {
        (&w.lfe128, 4)
    } else {
        (&w.lfe64, 8)
    };
    for (i, pcm) in out.chunks_exact_mut(one_in).enumerate() {
        let now = LFE_HISTORY + i;
        let (front, back) = pcm.split_at_mut(one_in / 2);
        for j in 0..one_in / 2 {
            let (mut a, mut b) = (0.0f32, 0.0f32);
            for k in 0..taps {
                let x = lfe[now - k] as f32;
                a += table[j * taps + k] * x;
                b += table[255 - j * taps - k] * x;
            }
            front[j] = a;
            back[j] = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter bank carries each subband to its own 1/64 of the spectrum: the response
    /// to one sample in band `k` has most of its energy between `k` and `k + 1`
    /// sixty-fourths of the sample rate, and nearly all of it there and in the bands
    /// beside (the lossy filter's overlap).
    #[test]
    fn a_subband_comes_out_in_its_band() {
        for band in [0usize, 1, 5, 17, 31] {
            let mut q = Qmf::new();
            let mut pcm = vec![0f32; 32 * 24];
            for (n, out) in pcm.chunks_exact_mut(32).enumerate() {
                let mut input = [0f32; BANDS];
                if n == 0 {
                    input[band] = 1e5;
                }
                q.block(&input, false, out);
            }
            let bins = 1024;
            let (mut inside, mut near, mut all) = (0.0, 0.0, 0.0);
            for f in 0..bins / 2 {
                let (mut re, mut im) = (0.0, 0.0);
                for (n, &x) in pcm.iter().enumerate() {
                    let p = 2.0 * std::f64::consts::PI * (f * n) as f64 / bins as f64;
                    re += f64::from(x) * p.cos();
                    im += f64::from(x) * p.sin();
                }
                let e = re * re + im * im;
                all += e;
                if (16 * band).saturating_sub(16) <= f && f < 16 * band + 32 {
                    near += e;
                }
                // Band k spans bins 16k to 16k + 16 of the 512 up to half the rate.
                if (16 * band..16 * band + 16).contains(&f) {
                    inside += e;
                }
            }
            let (inside, near) = (inside / all, near / all);
            assert!(
                inside > 0.9 && near > 0.999,
                "band {band}: {inside}, {near}"
            );
        }
    }
}
