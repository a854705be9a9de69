//! AArch64 NEON kernels (4 lanes), with the same exp and erf polynomials as the x86 paths.
//!
//! f16 is widened and narrowed by `fcvtl` / `fcvtn` in inline assembly: Rust's f16 vector
//! types and their conversion intrinsics are not stable. Both instructions are in the
//! aarch64 baseline and round as `half` does (to nearest even, the default FPCR mode).

use std::arch::aarch64::*;
use std::arch::asm;

use half::f16;

use super::approx::*;
use super::{scalar, WRows, TILE_ROWS};

/// Eight f16 at `p` as two f32 vectors.
///
/// # Safety
/// `p` points at 8 readable f16.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn ld8h(p: *const f16) -> (float32x4_t, float32x4_t) {
    // SAFETY: the caller passes 8 readable f16.
    let h = unsafe { vld1q_u16(p.cast()) };
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: register-only conversions; `out` keeps lo apart from h, read after lo is set.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = lateout(vreg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    (lo, hi)
}

/// Four f16 at `p` as f32.
///
/// # Safety
/// `p` points at 4 readable f16.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn ld4h(p: *const f16) -> float32x4_t {
    // SAFETY: the caller passes 4 readable f16.
    let h = unsafe { vld1_u16(p.cast()) };
    let o: float32x4_t;
    // SAFETY: a register-only conversion.
    unsafe {
        asm!(
            "fcvtl {o:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            o = lateout(vreg) o,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    o
}

/// Eight f32 (two vectors) rounded to f16 at `p`.
///
/// # Safety
/// `p` points at 8 writable f16.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn st8h(p: *mut f16, lo: float32x4_t, hi: float32x4_t) {
    let h: uint16x8_t;
    // SAFETY: register-only conversions; `out` keeps h apart from hi, read after h is set.
    unsafe {
        asm!(
            "fcvtn {h:v}.4h, {lo:v}.4s",
            "fcvtn2 {h:v}.8h, {hi:v}.4s",
            lo = in(vreg) lo,
            hi = in(vreg) hi,
            h = out(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        );
        // SAFETY: the caller passes 8 writable f16.
        vst1q_u16(p.cast(), h);
    }
}

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
    let nv = src.len() / 8 * 8;
    for i in (0..nv).step_by(8) {
        // SAFETY: src and dst have the same length (checked by the caller); i + 8 ≤ nv.
        unsafe {
            let (lo, hi) = ld8h(src.as_ptr().add(i));
            vst1q_f32(dst.as_mut_ptr().add(i), lo);
            vst1q_f32(dst.as_mut_ptr().add(i + 4), hi);
        }
    }
    scalar::f16_to_f32(&src[nv..], &mut dst[nv..])
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    let nv = src.len() / 8 * 8;
    for i in (0..nv).step_by(8) {
        // SAFETY: src and dst have the same length (checked by the caller); i + 8 ≤ nv.
        unsafe {
            let (lo, hi) = (
                vld1q_f32(src.as_ptr().add(i)),
                vld1q_f32(src.as_ptr().add(i + 4)),
            );
            st8h(dst.as_mut_ptr().add(i), lo, hi);
        }
    }
    scalar::f32_to_f16(&src[nv..], &mut dst[nv..])
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
                    // SAFETY: same features as this function.
                    unsafe { f16_to_f32(&w[r * k + p0..r * k + p0 + len], &mut buf[..len]) };
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

/// exp(x), Cephes' polynomial as the x86 paths; 0 below [`EXP_LO`] (and for −∞).
#[inline]
#[target_feature(enable = "neon")]
fn exp(x: float32x4_t) -> float32x4_t {
    let under = vcltq_f32(x, vdupq_n_f32(EXP_LO));
    let x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(EXP_HI)), vdupq_n_f32(EXP_LO));
    // Nearest, ties to even: as the x86 paths' rounding.
    let n = vrndnq_f32(vmulq_n_f32(x, LOG2E));
    let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
    let mut p = vdupq_n_f32(EXP_P[0]);
    for c in &EXP_P[1..] {
        p = vfmaq_f32(vdupq_n_f32(*c), p, r);
    }
    let y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0)), p, vmulq_f32(r, r));
    let e = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
    let y = vmulq_f32(y, vreinterpretq_f32_s32(e));
    vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under))
}

/// Applies `f` to 4-lane chunks of `x` in place; the tail goes through a padded buffer.
#[inline]
#[target_feature(enable = "neon")]
fn map(x: &mut [f32], mut f: impl FnMut(float32x4_t) -> float32x4_t) {
    let nv = x.len() / 4 * 4;
    let p = x.as_mut_ptr();
    for i in (0..nv).step_by(4) {
        // SAFETY: loads and stores cover i..i + 4 ≤ nv.
        unsafe { vst1q_f32(p.add(i), f(vld1q_f32(p.add(i)))) };
    }
    if nv < x.len() {
        let mut buf = [0.0f32; 4];
        buf[..x.len() - nv].copy_from_slice(&x[nv..]);
        // SAFETY: `buf` holds 4 f32.
        unsafe { vst1q_f32(buf.as_mut_ptr(), f(vld1q_f32(buf.as_ptr()))) };
        let n = x.len();
        x[nv..].copy_from_slice(&buf[..n - nv]);
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    let nv = x.len() / 4 * 4;
    let mv = vdupq_n_f32(m);
    let (mut s0, mut s1) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    let p = x.as_mut_ptr();
    let mut i = 0;
    // SAFETY: loads and stores cover i..i + 4 ≤ nv (two chains: the sums' adds).
    unsafe {
        while i + 8 <= nv {
            let (a, b) = (
                exp(vsubq_f32(vld1q_f32(p.add(i)), mv)),
                exp(vsubq_f32(vld1q_f32(p.add(i + 4)), mv)),
            );
            vst1q_f32(p.add(i), a);
            vst1q_f32(p.add(i + 4), b);
            (s0, s1) = (vaddq_f32(s0, a), vaddq_f32(s1, b));
            i += 8;
        }
        if i < nv {
            let a = exp(vsubq_f32(vld1q_f32(p.add(i)), mv));
            vst1q_f32(p.add(i), a);
            s0 = vaddq_f32(s0, a);
        }
    }
    vaddvq_f32(vaddq_f32(s0, s1)) + scalar::exp_sub_sum(&mut x[nv..], m)
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
    map(x, |v| {
        // 0.5·v·(1 + erf(v/√2)), erf by the x86 paths' rational fit.
        let z = vmulq_n_f32(v, std::f32::consts::FRAC_1_SQRT_2);
        let z = vminq_f32(
            vmaxq_f32(z, vdupq_n_f32(-ERF_CLAMP)),
            vdupq_n_f32(ERF_CLAMP),
        );
        let u = vmulq_f32(z, z);
        let (mut p, mut q) = (vdupq_n_f32(ERF_NUM[5]), vdupq_n_f32(ERF_DEN[5]));
        for (a, b) in ERF_NUM[..5].iter().zip(&ERF_DEN[..5]).rev() {
            p = vfmaq_f32(vdupq_n_f32(*a), p, u);
            q = vfmaq_f32(vdupq_n_f32(*b), q, u);
        }
        let erf = vdivq_f32(vmulq_f32(z, p), q);
        let h = vmulq_n_f32(v, 0.5);
        vfmaq_f32(h, h, erf)
    })
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len();
    let nv = n / 4 * 4;
    let px = x.as_ptr();
    // SAFETY: all slices have length n (checked by the caller); loads cover i..i + 4 ≤ nv.
    unsafe {
        let mut s = vdupq_n_f32(0.0);
        for i in (0..nv).step_by(4) {
            s = vaddq_f32(s, vld1q_f32(px.add(i)));
        }
        let mean = (vaddvq_f32(s) + x[nv..].iter().sum::<f32>()) / n as f32;
        let mv = vdupq_n_f32(mean);
        let mut s = vdupq_n_f32(0.0);
        for i in (0..nv).step_by(4) {
            let d = vsubq_f32(vld1q_f32(px.add(i)), mv);
            s = vfmaq_f32(s, d, d);
        }
        let tail: f32 = x[nv..].iter().map(|v| (v - mean) * (v - mean)).sum();
        let inv = 1.0 / ((vaddvq_f32(s) + tail) / n as f32 + eps).sqrt();
        for i in (0..nv).step_by(4) {
            let d = vmulq_n_f32(vsubq_f32(vld1q_f32(px.add(i)), mv), inv);
            let g = vld1q_f32(gamma.as_ptr().add(i));
            let b = vld1q_f32(beta.as_ptr().add(i));
            vst1q_f32(out.as_mut_ptr().add(i), vfmaq_f32(b, d, g));
        }
        for i in nv..n {
            out[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
        }
    }
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

/// Columns per block of [`parts`]: a block's 64 · 128 bytes of a tile stay in L1 while its
/// parts take turns over them.
const PART_COLS: usize = 64;

/// `out[i·ldo + r] = x_i · w_r` for G ≤ 6 input rows and every row r of whole tiles.
///
/// Each tile goes in parts of 4·P outputs, so that G·P sums and P widened weight vectors
/// fit the 32 registers. The parts take turns over each block of [`PART_COLS`] columns and
/// keep their sums between blocks, so the tile streams from memory once, in order. Each
/// output is the same fused multiply-adds in column order whatever G and P: the same bits
/// for a row alone as in any batch.
///
/// # Safety
/// `x` holds G rows of `k`; `w` whole tiles of `k` columns; `out` G rows of at least the
/// tiles' outputs, `ldo` apart.
#[target_feature(enable = "neon")]
unsafe fn parts<const G: usize, const P: usize>(
    x: &[f32],
    k: usize,
    w: &[f16],
    out: &mut [f32],
    ldo: usize,
) {
    let n_parts = TILE_ROWS / (4 * P);
    let xp = x.as_ptr();
    for (t, tile) in w.chunks_exact(k * TILE_ROWS).enumerate() {
        let mut sums = [[[vdupq_n_f32(0.0); P]; G]; TILE_ROWS / 16];
        for c0 in (0..k).step_by(PART_COLS) {
            let c1 = (c0 + PART_COLS).min(k);
            for (part, acc) in sums.iter_mut().enumerate().take(n_parts) {
                let wp = tile.as_ptr().wrapping_add(part * 4 * P);
                let mut a = *acc;
                for c in c0..c1 {
                    // SAFETY: column c < k of the tile holds TILE_ROWS f16, this part's 4·P
                    // from part·4·P; x holds G rows of k (the caller's contract).
                    unsafe {
                        let p = wp.add(c * TILE_ROWS);
                        let mut wv = [vdupq_n_f32(0.0); P];
                        for h in 0..P / 2 {
                            (wv[2 * h], wv[2 * h + 1]) = ld8h(p.add(8 * h));
                        }
                        for (i, acc_i) in a.iter_mut().enumerate() {
                            let xc = *xp.add(i * k + c);
                            for u in 0..P {
                                acc_i[u] = vfmaq_n_f32(acc_i[u], wv[u], xc);
                            }
                        }
                    }
                }
                *acc = a;
            }
        }
        for (part, acc) in sums.iter().enumerate().take(n_parts) {
            for (i, acc_i) in acc.iter().enumerate() {
                for (u, a) in acc_i.iter().enumerate() {
                    let r = t * TILE_ROWS + part * 4 * P + 4 * u;
                    // SAFETY: out rows i < G hold ldo ≥ (t + 1)·TILE_ROWS values.
                    unsafe { vst1q_f32(out.as_mut_ptr().add(i * ldo + r), *a) };
                }
            }
        }
    }
}

/// One or two rows (greedy, two beams) take halves of a tile (eight chains of sums per
/// row); more rows take quarters in groups of up to six, one pass over the weights.
#[target_feature(enable = "neon")]
pub(super) unsafe fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out: &mut [f32]) {
    let ldo = out.len() / m;
    let mut i0 = 0;
    while i0 < m {
        let g = if m <= 2 { m } else { (m - i0).min(6) };
        let (xg, og) = (&x[i0 * k..(i0 + g) * k], &mut out[i0 * ldo..]);
        // SAFETY: xg holds g rows of k; og g rows of ldo (checked by `kernels::matmul_tiled`).
        unsafe {
            match g {
                1 => parts::<1, 8>(xg, k, w, og, ldo),
                2 if m <= 2 => parts::<2, 8>(xg, k, w, og, ldo),
                2 => parts::<2, 4>(xg, k, w, og, ldo),
                3 => parts::<3, 4>(xg, k, w, og, ldo),
                4 => parts::<4, 4>(xg, k, w, og, ldo),
                5 => parts::<5, 4>(xg, k, w, og, ldo),
                _ => parts::<6, 4>(xg, k, w, og, ldo),
            }
        }
        i0 += g;
    }
}

/// The decoder's attention over packed f16 keys and values, from the shared macro.
pub(super) mod attn {
    use std::arch::aarch64::*;

    use half::f16;

    use super::super::KEY_BLOCK;

    #[inline]
    #[target_feature(enable = "neon")]
    fn zero() -> float32x4_t {
        vdupq_n_f32(0.0)
    }

    /// a·b + c, in the x86 paths' operand order.
    #[inline]
    #[target_feature(enable = "neon")]
    fn fma(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        vfmaq_f32(c, a, b)
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn ldh(p: *const f16) -> float32x4_t {
        // SAFETY: the caller passes 4 readable f16.
        unsafe { super::ld4h(p) }
    }

    #[inline]
    #[target_feature(enable = "neon")]
    unsafe fn st(p: *mut f32, v: float32x4_t) {
        // SAFETY: the caller passes 4 writable f32.
        unsafe { vst1q_f32(p, v) }
    }

    // Two rows: 2 × 8 sums and 8 key vectors of a 32-key block in the 32 registers.
    packed_attention!(
        "neon",
        4,
        float32x4_t,
        2,
        zero,
        fma,
        vmulq_f32,
        vdupq_n_f32,
        ldh,
        st
    );
}
