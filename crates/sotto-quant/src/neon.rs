//! AArch64 Advanced SIMD dot products: widen the codes to 32 i8 lanes, multiply and sum
//! to an i32 per block, scale in f32 in ggml's generic order. The integer products take
//! `sdot` where the CPU has the dot-product extension (Armv8.2 and later: one instruction
//! per 16 products), else baseline `vmull_s8` + pairwise adds; the block sums are exact
//! either way, so both give the same bits.

use std::arch::aarch64::*;
use std::arch::asm;

use crate::reference::f16_at;
use crate::QuantType;

/// 16 packed bytes → (elements 0..16, elements 16..32) as u8 lanes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn nibbles(qs: *const u8) -> (uint8x16_t, uint8x16_t) {
    // SAFETY: the caller guarantees 16 readable bytes.
    let v = unsafe { vld1q_u8(qs) };
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

/// Bits `base..base + 16` of `qh` as 16 bytes: 0xFF where set.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn bits(qh: u64, base: u32) -> uint8x16_t {
    let lo = vdup_n_u8((qh >> base) as u8);
    let hi = vdup_n_u8((qh >> (base + 8)) as u8);
    let masks: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `masks` is 16 bytes.
    let m = unsafe { vld1q_u8(masks.as_ptr()) };
    vtstq_u8(vcombine_u8(lo, hi), m)
}

/// A block's 32 values as two i8 vectors (see `x86::weights` for the value conventions).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn weights(t: QuantType, b: *const u8) -> (int8x16_t, int8x16_t) {
    // SAFETY (whole body): the caller guarantees a whole block of type `t` at `b`.
    unsafe {
        let read_qh = |at: usize| u64::from(u32::from_le(b.add(at).cast::<u32>().read_unaligned()));
        match t {
            QuantType::Q4_0 => {
                let (l, h) = nibbles(b.add(2));
                let eight = vdupq_n_s8(8);
                (
                    vsubq_s8(vreinterpretq_s8_u8(l), eight),
                    vsubq_s8(vreinterpretq_s8_u8(h), eight),
                )
            }
            QuantType::Q4_1 => {
                let (l, h) = nibbles(b.add(4));
                (vreinterpretq_s8_u8(l), vreinterpretq_s8_u8(h))
            }
            QuantType::Q5_0 | QuantType::Q5_1 => {
                let (qh, qs, signed) = match t {
                    QuantType::Q5_0 => (read_qh(2), b.add(6), true),
                    _ => (read_qh(4), b.add(8), false),
                };
                let (l, h) = nibbles(qs);
                let hb = |m: uint8x16_t| vandq_u8(m, vdupq_n_u8(0x10));
                let (l, h) = (vorrq_u8(l, hb(bits(qh, 0))), vorrq_u8(h, hb(bits(qh, 16))));
                let (l, h) = (vreinterpretq_s8_u8(l), vreinterpretq_s8_u8(h));
                if signed {
                    let sixteen = vdupq_n_s8(16);
                    (vsubq_s8(l, sixteen), vsubq_s8(h, sixteen))
                } else {
                    (l, h)
                }
            }
            QuantType::Q8_0 | QuantType::Q8_1 => {
                (vld1q_s8(b.add(2).cast()), vld1q_s8(b.add(18).cast()))
            }
        }
    }
}

#[inline]
#[target_feature(enable = "neon")]
fn dot16(x: int8x16_t, y: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(x), vget_low_s8(y));
    let hi = vmull_high_s8(x, y);
    vaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi))
}

/// `acc` plus the sums of each 4 adjacent products of `x` and `y` in its lanes: `sdot`,
/// written out because Rust's dot-product intrinsics are not stable.
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(crate) fn sdot(mut acc: int32x4_t, x: int8x16_t, y: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction of the `dotprod` feature this function enables.
    unsafe {
        asm!(
            "sdot {a:v}.4s, {x:v}.16b, {y:v}.16b",
            a = inout(vreg) acc,
            x = in(vreg) x,
            y = in(vreg) y,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Whether this CPU has the dot-product extension (std caches the answer).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// `w` and `a` hold `nb` blocks (checked by the caller).
pub(crate) fn vec_dot(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    vec_dot_with(has_dotprod(), t, nb, w, a)
}

/// [`vec_dot`] with `sdot` on or off (on only where the CPU has it).
pub(crate) fn vec_dot_with(dotprod: bool, t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    if dotprod && has_dotprod() {
        // SAFETY: NEON is part of the aarch64 baseline; dotprod was detected.
        unsafe { kernel_dotprod(t, nb, w, a) }
    } else {
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe { kernel(t, nb, w, a) }
    }
}

#[target_feature(enable = "neon,dotprod")]
fn kernel_dotprod(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    kernel_with(t, nb, w, a, |x0, y0, x1, y1| {
        sdot(sdot(vdupq_n_s32(0), x0, y0), x1, y1)
    })
}

#[target_feature(enable = "neon")]
fn kernel(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    kernel_with(t, nb, w, a, |x0, y0, x1, y1| {
        vaddq_s32(dot16(x0, y0), dot16(x1, y1))
    })
}

/// The block loop, with `dot32` summing a block's 32 products into i32 lanes.
#[inline(always)]
fn kernel_with(
    t: QuantType,
    nb: usize,
    w: &[u8],
    a: &[u8],
    dot32: impl Fn(int8x16_t, int8x16_t, int8x16_t, int8x16_t) -> int32x4_t,
) -> f32 {
    let (wb, ab) = (t.block_bytes(), t.activation_type().block_bytes());
    let offset = matches!(t, QuantType::Q4_1 | QuantType::Q5_1);
    let qy_at = if offset { 4 } else { 2 };
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let (x, y) = (&w[i * wb..(i + 1) * wb], &a[i * ab..(i + 1) * ab]);
        // SAFETY: x and y are whole blocks; the loads stay inside them.
        let sumi = unsafe {
            let (x0, x1) = weights(t, x.as_ptr());
            let y0 = vld1q_s8(y.as_ptr().add(qy_at).cast());
            let y1 = vld1q_s8(y.as_ptr().add(qy_at + 16).cast());
            vaddvq_s32(dot32(x0, y0, x1, y1))
        };
        let (dx, dy) = (f16_at(x, 0), f16_at(y, 0));
        sumf += if offset {
            (dx * dy) * sumi as f32 + f16_at(x, 2) * f16_at(y, 2)
        } else {
            sumi as f32 * (dx * dy)
        };
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{quantize_activations, quantize_row};

    /// Both integer paths against each other where the CPU has `sdot` (qemu's default CPU
    /// does): the same block sums, so the same bits.
    #[test]
    fn dotprod_and_baseline_agree() {
        if !has_dotprod() {
            eprintln!("skipped: this CPU has no dot-product extension");
            return;
        }
        let n = 256;
        let w: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.021)
            .collect();
        for t in QuantType::WEIGHTS {
            let mut wq = vec![0u8; t.row_bytes(n)];
            quantize_row(t, &w, &mut wq);
            let mut aq = vec![0u8; t.activation_type().row_bytes(n)];
            quantize_activations(t, &x, &mut aq);
            let nb = n / QuantType::BLOCK;
            let (on, off) = (
                vec_dot_with(true, t, nb, &wq, &aq),
                vec_dot_with(false, t, nb, &wq, &aq),
            );
            assert_eq!(on.to_bits(), off.to_bits(), "{t}: {on} vs {off}");
        }
    }
}
