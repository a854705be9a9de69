//! Plain-Rust reference kernels: every SIMD path is tested against these.

use half::f16;

use super::{WRows, KEY_BLOCK, TILE_ROWS};

pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent partial sums: same association as the SIMD paths, and vectorizable.
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

pub(super) fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

pub(super) fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f16::from_f32(s);
    }
}

pub(super) fn matmul_t(x: &[f32], m: usize, k: usize, w: WRows<'_>, out_t: &mut [f32]) {
    let mut row = vec![0.0f32; k];
    for (r, o) in out_t.chunks_exact_mut(m).enumerate() {
        let wr: &[f32] = match w {
            WRows::F32(w) => &w[r * k..(r + 1) * k],
            WRows::F16(w) => {
                f16_to_f32(&w[r * k..(r + 1) * k], &mut row);
                &row
            }
        };
        for (i, oi) in o.iter_mut().enumerate() {
            *oi = dot(&x[i * k..(i + 1) * k], wr);
        }
    }
}

/// Sums in the SIMD kernels' order: over columns, one running sum per output.
pub(super) fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out: &mut [f32]) {
    let ldo = out.len() / m;
    for (xi, oi) in x.chunks_exact(k).zip(out.chunks_exact_mut(ldo)) {
        for (r, o) in oi.iter_mut().enumerate() {
            let col0 = r / TILE_ROWS * k * TILE_ROWS + r % TILE_ROWS;
            *o = xi.iter().enumerate().fold(0.0f32, |s, (c, &v)| {
                s + v * w[col0 + c * TILE_ROWS].to_f32()
            });
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn attn_scores(
    q: &[f32],
    g: usize,
    ldq: usize,
    k: &[f16],
    dh: usize,
    scale: f32,
    s: &mut [f32],
    lds: usize,
) {
    for b in 0..k.len() / (dh * KEY_BLOCK) {
        let kb = &k[b * dh * KEY_BLOCK..(b + 1) * dh * KEY_BLOCK];
        for i in 0..g {
            for l in 0..KEY_BLOCK {
                let mut acc = 0.0f32;
                for c in 0..dh {
                    acc += q[i * ldq + c] * kb[c * KEY_BLOCK + l].to_f32();
                }
                s[i * lds + b * KEY_BLOCK + l] = scale * acc;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn attn_values(
    p: &[f32],
    g: usize,
    ldp: usize,
    tk: usize,
    v: &[f16],
    dhp: usize,
    out: &mut [f32],
    ldo: usize,
) {
    for i in 0..g {
        let o = &mut out[i * ldo..i * ldo + dhp];
        o.fill(0.0);
        for j in 0..tk {
            let pj = p[i * ldp + j];
            for (oc, vc) in o.iter_mut().zip(&v[j * dhp..(j + 1) * dhp]) {
                *oc += pj * vc.to_f32();
            }
        }
    }
}

pub(super) fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

pub(super) fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    let mut s = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - m).exp();
        s += *v;
    }
    s
}

pub(super) fn scale(x: &mut [f32], s: f32) {
    x.iter_mut().for_each(|v| *v *= s);
}

pub(super) fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

pub(super) fn add(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

pub(super) fn gelu(x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = 0.5 * *v * (1.0 + libm::erff(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

pub(super) fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let d = x.len() as f32;
    let mean = x.iter().sum::<f32>() / d;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d;
    let inv = 1.0 / (var + eps).sqrt();
    for (((o, v), g), b) in out.iter_mut().zip(x).zip(gamma).zip(beta) {
        *o = (v - mean) * inv * g + b;
    }
}

pub(super) fn dot_rows(q: &[f32], k: &[f32], ld: usize, s: f32, out: &mut [f32]) {
    let n = q.len();
    for (j, o) in out.iter_mut().enumerate() {
        *o = s * dot(q, &k[j * ld..j * ld + n]);
    }
}

pub(super) fn axpy_rows(p: &[f32], v: &[f32], ld: usize, out: &mut [f32]) {
    let n = out.len();
    for (j, &pj) in p.iter().enumerate() {
        axpy(pj, &v[j * ld..j * ld + n], out);
    }
}

/// f32 operations per iteration of [`fma_peak`]: 32 chains × (mul + add).
pub(super) const FMA_PEAK_FLOPS: u64 = 32 * 2;

/// `iters` rounds of 32 independent multiply-adds (unfused: a fused one is a library call
/// on CPUs without FMA), the portable stand-in for the SIMD loops of [`crate::peak`].
pub(super) fn fma_peak(iters: u64) -> f32 {
    let (a, b) = (
        std::hint::black_box(0.999_999f32),
        std::hint::black_box(1e-7f32),
    );
    let mut acc = [0f32; 32];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = *r * a + b;
        }
    }
    acc.iter().sum()
}
