//! Helpers shared by sotto-cuda's test files (each file uses its own subset).
#![allow(dead_code)]

pub mod device;
pub mod emu;

/// Deterministic values in [-scale, scale) (xorshift64*).
pub fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let u = (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as f32 / (1u64 << 24) as f32;
            (2.0 * u - 1.0) * scale
        })
        .collect()
}

/// Normalised MSE: sum (out - ref)^2 / sum ref^2 (the plain sum of squares when `reference`
/// is all zeros).
pub fn nmse(out: &[f32], reference: &[f32]) -> f64 {
    assert_eq!(out.len(), reference.len());
    let (mut err, mut norm) = (0.0f64, 0.0f64);
    for (&o, &r) in out.iter().zip(reference) {
        let d = o as f64 - r as f64;
        err += d * d;
        norm += r as f64 * r as f64;
    }
    if norm == 0.0 {
        err
    } else {
        err / norm
    }
}
