//! The aarch64 kernel for [`crate::int8`]'s quad layout ([`crate::int8::Layout::Quads`]) on
//! CPUs with the dot-product extension: `sdot` by element multiplies a 16-byte load of a
//! weight panel (one 4-byte quad of each of 4 columns) by one activation quad and adds
//! each column's 4 products into its own i32 lane, as VNNI's `vpdpbusd` does on x86. The
//! panel stores `q + 128` for that instruction's unsigned operand; here each load flips
//! the top bits back to signed `q`, so the sums need no correction.

use std::arch::aarch64::*;
use std::arch::asm;

use crate::int8::{Epilogue, MR, NR};

/// Rows and columns of one sub-tile: 4 × 4 vectors of sums, 4 activation vectors (4 quads
/// of each row) and 4 weight vectors fill 24 of the 32 registers.
const SR: usize = 4;
const SC: usize = 16;

/// `acc` plus, in each lane, the dot of that lane's 4 bytes of `w` with quad `L` of `a`
/// (`sdot` by element, written out: Rust's dot-product intrinsics are not stable).
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn sdot_lane<const L: i32>(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction of the `dotprod` feature this function enables.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{l}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg_low16) a,
            l = const L,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// One output tile, as `kernels::x86_int8::tile`: `c[r·ldc + j] = (Σ_p a[r·k4 + p] ·
/// q[p][j]) · a_scales[r] · w_scales[j] (+ bias[j])` for `r < rows`, `j < cols`, where
/// `b[p·NR + j]` holds `q[p][j] + 128` bytewise.
///
/// # Safety
/// The CPU must have the dot-product extension; `a` must hold `MR·k4` quads and `b`
/// `k4·NR`; `c` rows `0..rows` must be writable at columns `0..cols`; `rows <= MR`,
/// `cols <= NR`; `a_scales` must hold `MR` values, `epi.w_scales` `NR` and `epi.bias`,
/// when given, `cols`.
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    k4: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    a_scales: &[f32],
    epi: &Epilogue,
) {
    debug_assert!(rows <= MR && cols <= NR && a_scales.len() >= MR);
    for r0 in (0..rows).step_by(SR) {
        for c0 in (0..cols).step_by(SC) {
            // SAFETY: rows r0..r0 + SR ≤ MR of a and columns c0..c0 + SC ≤ NR of b exist
            // (the caller's contract); the sub-tile writes only rows < rows, cols < cols.
            unsafe {
                sub_tile(
                    k4,
                    a.add(r0 * k4),
                    b.add(c0),
                    c,
                    ldc,
                    r0,
                    c0,
                    rows,
                    cols,
                    a_scales,
                    epi,
                )
            };
        }
    }
}

/// Rows `r0..r0 + SR` and columns `c0..c0 + SC` of [`tile`]; `a` and `b` already point
/// at them.
#[inline]
#[target_feature(enable = "neon,dotprod")]
#[allow(clippy::too_many_arguments)]
unsafe fn sub_tile(
    k4: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    r0: usize,
    c0: usize,
    rows: usize,
    cols: usize,
    a_scales: &[f32],
    epi: &Epilogue,
) {
    let flip = vdupq_n_u8(0x80);
    let mut acc = [[vdupq_n_s32(0); SC / 4]; SR];
    // SAFETY (whole body): quads p < k4 of SR rows of a (k4 apart) and SC columns of b
    // (NR apart per quad) are readable (the caller's contract).
    unsafe {
        let ldw = |p: usize, u: usize| {
            let v = vld1q_u8(b.add(p * NR + 4 * u).cast());
            vreinterpretq_s8_u8(veorq_u8(v, flip))
        };
        let whole = k4 / 4 * 4;
        for p0 in (0..whole).step_by(4) {
            let av: [int8x16_t; SR] = std::array::from_fn(|r| vld1q_s8(a.add(r * k4 + p0).cast()));
            macro_rules! quad {
                ($l:literal) => {
                    let w: [int8x16_t; SC / 4] = std::array::from_fn(|u| ldw(p0 + $l, u));
                    for (acc_r, &a_r) in acc.iter_mut().zip(&av) {
                        for (s, &wu) in acc_r.iter_mut().zip(&w) {
                            *s = sdot_lane::<$l>(*s, wu, a_r);
                        }
                    }
                };
            }
            quad!(0);
            quad!(1);
            quad!(2);
            quad!(3);
        }
        for p in whole..k4 {
            // One quad: in lane 0 of each row's vector.
            let av: [int8x16_t; SR] = std::array::from_fn(|r| {
                vreinterpretq_s8_u32(vdupq_n_u32(a.add(r * k4 + p).read_unaligned()))
            });
            let w: [int8x16_t; SC / 4] = std::array::from_fn(|u| ldw(p, u));
            for (acc_r, &a_r) in acc.iter_mut().zip(&av) {
                for (s, &wu) in acc_r.iter_mut().zip(&w) {
                    *s = sdot_lane::<0>(*s, wu, a_r);
                }
            }
        }
    }
    // Scale, then bias, in the reference's order (a missing bias adds 0).
    let mut out = [0.0f32; SC];
    for (r, acc_r) in acc.iter().enumerate().take(rows.saturating_sub(r0)) {
        let s = a_scales[r0 + r];
        for (u, &v) in acc_r.iter().enumerate() {
            // SAFETY: w_scales holds NR ≥ c0 + SC values; `out` holds SC.
            unsafe {
                let ws = vld1q_f32(epi.w_scales.as_ptr().add(c0 + 4 * u));
                let x = vmulq_f32(vcvtq_f32_s32(v), vmulq_n_f32(ws, s));
                vst1q_f32(out.as_mut_ptr().add(4 * u), x);
            }
        }
        let n = SC.min(cols - c0);
        for (j, o) in out[..n].iter().enumerate() {
            let v = o + epi.bias.map_or(0.0, |bias| bias[c0 + j]);
            // SAFETY: row r0 + r < rows and column c0 + j < cols of c are valid for reads
            // and writes.
            unsafe {
                let dst = c.add((r0 + r) * ldc + c0 + j);
                *dst = if epi.add { *dst + v } else { v };
            }
        }
    }
}

/// `x` quantized symmetrically into `d` (quads of signed bytes, zero past `x.len()`): the
/// scale `max|x| / 127` and the sum of the quantized values, as the scalar `quantize_row`
/// (NaN ignored by the max and quantized to 0; rounding to nearest even). Panics unless
/// `d.len() == x.len().div_ceil(4)`.
#[target_feature(enable = "neon")]
pub(crate) fn quantize_row(x: &[f32], d: &mut [u32]) -> (f32, i32) {
    assert_eq!(d.len(), x.len().div_ceil(4), "quantize_row: lengths differ");
    let (n, xp) = (x.len(), x.as_ptr());
    let nv = n / 4 * 4;
    let mut vmax = vdupq_n_f32(0.0);
    for i in (0..nv).step_by(4) {
        // SAFETY: i + 4 ≤ nv ≤ n. `maxnm` drops NaN as f32::max does.
        vmax = vmaxnmq_f32(vmax, vabsq_f32(unsafe { vld1q_f32(xp.add(i)) }));
    }
    let amax = x[nv..]
        .iter()
        .fold(vmaxnmvq_f32(vmax), |m, v| m.max(v.abs()));
    d.fill(0);
    if amax == 0.0 || !amax.is_finite() {
        return (0.0, 0);
    }
    let inv = 127.0 / amax;
    let o = d.as_mut_ptr();
    let mut sum = vdupq_n_s32(0);
    for i in (0..nv).step_by(4) {
        // SAFETY: i + 4 ≤ nv ≤ n; quad i / 4 of d exists. |x·inv| ≤ 127 rounds into i8,
        // so the narrowing moves keep every value.
        unsafe {
            let q = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xp.add(i)), inv));
            sum = vaddq_s32(sum, q);
            let b = vmovn_s16(vcombine_s16(vmovn_s32(q), vdup_n_s16(0)));
            vst1_lane_u32::<0>(o.add(i / 4), vreinterpret_u32_s8(b));
        }
    }
    let mut tail = 0;
    for (i, &v) in x.iter().enumerate().skip(nv) {
        let q = (v * inv).round_ties_even() as i32;
        d[i / 4] |= u32::from(q as i8 as u8) << (8 * (i % 4));
        tail += q;
    }
    (amax / 127.0, vaddvq_s32(sum) + tail)
}
