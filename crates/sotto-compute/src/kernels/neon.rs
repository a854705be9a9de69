//! AArch64 NEON kernels (4 lanes). f16 weights are widened through a small stack buffer
//! (the f16 vector types are not stable in Rust); transcendental ops reuse the scalar code.

use std::arch::aarch64::*;

use half::f16;

use super::{scalar, WRows};

#[target_feature(enable = "neon")]
pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let nv = n / 8 * 8;
    // SAFETY: loads cover i..i+8 ≤ nv ≤ n in both slices.
    let s = unsafe {
        let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        for i in (0..nv).step_by(8) {
            s0 = vfmaq_f32(
                s0,
                vld1q_f32(a.as_ptr().add(i)),
                vld1q_f32(b.as_ptr().add(i)),
            );
            s1 = vfmaq_f32(
                s1,
                vld1q_f32(a.as_ptr().add(i + 4)),
                vld1q_f32(b.as_ptr().add(i + 4)),
            );
        }
        vaddvq_f32(vaddq_f32(s0, s1))
    };
    s + scalar::dot(&a[nv..], &b[nv..])
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    scalar::f16_to_f32(src, dst)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    scalar::f32_to_f16(src, dst)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn matmul_t(x: &[f32], m: usize, k: usize, w: WRows<'_>, out_t: &mut [f32]) {
    const CHUNK: usize = 64;
    let mut buf = [0.0f32; CHUNK];
    for (r, o) in out_t.chunks_exact_mut(m).enumerate() {
        let mut acc = [vdupq_n_f32(0.0); 8];
        let mut tail = [0.0f32; 8];
        for p0 in (0..k).step_by(CHUNK) {
            let len = CHUNK.min(k - p0);
            let wr: &[f32] = match w {
                WRows::F32(w) => &w[r * k + p0..r * k + p0 + len],
                WRows::F16(w) => {
                    scalar::f16_to_f32(&w[r * k + p0..r * k + p0 + len], &mut buf[..len]);
                    &buf[..len]
                }
            };
            let nv = len / 4 * 4;
            for (i, a) in acc.iter_mut().enumerate().take(m) {
                let xr = &x[i * k + p0..i * k + p0 + len];
                // SAFETY: loads cover j..j+4 ≤ nv ≤ len in both rows.
                unsafe {
                    for j in (0..nv).step_by(4) {
                        *a = vfmaq_f32(
                            *a,
                            vld1q_f32(wr.as_ptr().add(j)),
                            vld1q_f32(xr.as_ptr().add(j)),
                        );
                    }
                }
                tail[i] += scalar::dot(&wr[nv..], &xr[nv..]);
            }
        }
        for (i, oi) in o.iter_mut().enumerate() {
            *oi = vaddvq_f32(acc[i]) + tail[i];
        }
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn max(x: &[f32]) -> f32 {
    let nv = x.len() / 4 * 4;
    // SAFETY: loads cover i..i+4 ≤ nv.
    let m = unsafe {
        let mut acc = vdupq_n_f32(f32::NEG_INFINITY);
        for i in (0..nv).step_by(4) {
            acc = vmaxq_f32(acc, vld1q_f32(x.as_ptr().add(i)));
        }
        vmaxvq_f32(acc)
    };
    m.max(scalar::max(&x[nv..]))
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    scalar::exp_sub_sum(x, m)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn scale(x: &mut [f32], s: f32) {
    let nv = x.len() / 4 * 4;
    // SAFETY: loads and stores cover i..i+4 ≤ nv.
    unsafe {
        for i in (0..nv).step_by(4) {
            let p = x.as_mut_ptr().add(i);
            vst1q_f32(p, vmulq_n_f32(vld1q_f32(p), s));
        }
    }
    scalar::scale(&mut x[nv..], s)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    let nv = x.len() / 4 * 4;
    // SAFETY: x and y have the same length; loads and stores cover i..i+4 ≤ nv.
    unsafe {
        for i in (0..nv).step_by(4) {
            let p = y.as_mut_ptr().add(i);
            vst1q_f32(
                p,
                vfmaq_n_f32(vld1q_f32(p), vld1q_f32(x.as_ptr().add(i)), a),
            );
        }
    }
    scalar::axpy(a, &x[nv..], &mut y[nv..])
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn add(a: &mut [f32], b: &[f32]) {
    let nv = a.len() / 4 * 4;
    // SAFETY: a and b have the same length; loads and stores cover i..i+4 ≤ nv.
    unsafe {
        for i in (0..nv).step_by(4) {
            let p = a.as_mut_ptr().add(i);
            vst1q_f32(p, vaddq_f32(vld1q_f32(p), vld1q_f32(b.as_ptr().add(i))));
        }
    }
    scalar::add(&mut a[nv..], &b[nv..])
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn gelu(x: &mut [f32]) {
    scalar::gelu(x)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    scalar::layer_norm(x, gamma, beta, eps, out)
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_rows(q: &[f32], k: &[f32], ld: usize, s: f32, out: &mut [f32]) {
    let n = q.len();
    for (j, o) in out.iter_mut().enumerate() {
        // SAFETY: same features as this function; the caller checked k's length.
        *o = s * unsafe { dot(q, &k[j * ld..j * ld + n]) };
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn axpy_rows(p: &[f32], v: &[f32], ld: usize, out: &mut [f32]) {
    let n = out.len();
    for (j, &pj) in p.iter().enumerate() {
        // SAFETY: same features as this function; the caller checked v's length.
        unsafe { axpy(pj, &v[j * ld..j * ld + n], out) };
    }
}

/// f32 operations per iteration of [`fma_peak`]: 16 chains × 4 lanes × (mul + add).
pub(super) const FMA_PEAK_FLOPS: u64 = 16 * 4 * 2;

/// `iters` rounds of 16 independent 4-lane fused multiply-adds (see [`crate::peak`]).
#[target_feature(enable = "neon")]
pub(super) unsafe fn fma_peak(iters: u64) -> f32 {
    let (a, b) = (vdupq_n_f32(0.999_999), vdupq_n_f32(1e-7));
    let mut acc = [vdupq_n_f32(0.0); 16];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            // r·a + b, as the other paths' chains (vfmaq_f32(x, y, z) is x + y·z).
            *r = vfmaq_f32(b, *r, a);
        }
    }
    acc.iter().map(|&r| vaddvq_f32(r)).sum()
}
