//! AArch64 kernels over [`QuantTiles`](crate::QuantTiles) for CPUs with the dot-product
//! extension. A 16-byte load of a group block holds 4 bytes of each of 4 rows, so `sdot`
//! against 4 activation bytes repeated in every lane adds one 4-element dot into each row's
//! own i32 lane: the layout's VNNI reading, on NEON. Each block's i32 sums are exact and
//! are scaled into f32 sums block by block, in the scalar oracle's order.

use std::arch::aarch64::*;
use std::arch::asm;

use crate::neon::{bits, sdot};
use crate::tiled::{parts, QuantActs, GROUP_ROWS};
use crate::QuantType;

const QK: usize = QuantType::BLOCK;
/// Input rows per pass: each keeps 4 vectors of i32 block sums and 4 of f32 sums, beside
/// the block's 8 code vectors, in the 32 registers.
const ROWS: usize = 2;

/// The 16 rows' f16 values at `p` (a group block's scales or offsets) as 4 f32 vectors.
///
/// # Safety
/// `p` points at 32 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn widen16(p: *const u8) -> [float32x4_t; 4] {
    let mut out = [vdupq_n_f32(0.0); 4];
    for (h, pair) in out.chunks_exact_mut(2).enumerate() {
        // SAFETY: bytes 16h..16h + 16 < 32 of p.
        let v = unsafe { vld1q_u16(p.add(16 * h).cast()) };
        let (lo, hi): (float32x4_t, float32x4_t);
        // SAFETY: register-only conversions; `out` keeps lo apart from v, read after lo is set.
        unsafe {
            asm!(
                "fcvtl {lo:v}.4s, {v:v}.4h",
                "fcvtl2 {hi:v}.4s, {v:v}.8h",
                v = in(vreg) v,
                lo = out(vreg) lo,
                hi = lateout(vreg) hi,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        (pair[0], pair[1]) = (lo, hi);
    }
    out
}

/// 4 activation bytes at `p` in every lane.
///
/// # Safety
/// `p` points at 4 readable bytes.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn dup4(p: *const i8) -> int8x16_t {
    // SAFETY: the caller passes 4 readable bytes.
    unsafe { vreinterpretq_s8_u32(vdupq_n_u32(p.cast::<u32>().read_unaligned())) }
}

/// `out[i·ldo + 16g + l] = row (16g + l) · act_i` for every group of `data` (whole group
/// blocks of a `k`-wide [`QuantTiles`] of type `t`) and every input row of `acts`.
///
/// # Safety
/// The CPU has the dot-product extension; `data` holds whole groups of `k / 32` blocks;
/// `acts` holds `m` rows quantized for `t` at width `k`; `out` holds `m` rows of `ldo` ≥
/// 16 · groups values (checked by `tiled::check`).
#[target_feature(enable = "neon,dotprod")]
pub(crate) unsafe fn matmul(
    t: QuantType,
    k: usize,
    data: &[u8],
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) {
    let (nb, m) = (k / QK, acts.m());
    let gbb = GROUP_ROWS * t.block_bytes();
    for (g, group) in data.chunks_exact(nb * gbb).enumerate() {
        let mut i0 = 0;
        while i0 < m {
            let o = out[i0 * ldo + g * GROUP_ROWS..].as_mut_ptr();
            // SAFETY: as this function's contract, for rows i0.. of acts and out.
            unsafe {
                if m - i0 >= ROWS {
                    pass::<ROWS>(t, nb, group.as_ptr(), acts, i0, o, ldo);
                } else {
                    pass::<1>(t, nb, group.as_ptr(), acts, i0, o, ldo);
                }
            }
            i0 += ROWS.min(m - i0);
        }
    }
}

/// One group against input rows `i0..i0 + R`, written from `o` (row i at `o + i·ldo`).
///
/// # Safety
/// As [`matmul`]: `group` is a whole group, the rows exist in `acts`, and `o` has 16
/// writable values at each of the R rows.
#[inline]
#[target_feature(enable = "neon,dotprod")]
unsafe fn pass<const R: usize>(
    t: QuantType,
    nb: usize,
    group: *const u8,
    acts: &QuantActs,
    i0: usize,
    o: *mut f32,
    ldo: usize,
) {
    let m = acts.m();
    let gbb = GROUP_ROWS * t.block_bytes();
    let (mo, qh, qs) = parts(t);
    let mut sums = [[vdupq_n_f32(0.0); 4]; R];
    // SAFETY (whole body): block b of the group is gbb bytes from b·gbb, holding the parts
    // `parts(t)` places; activation block e = b·m + i has 32 codes from e·32.
    unsafe {
        for b in 0..nb {
            let blk = group.add(b * gbb);
            let e0 = b * m + i0;
            let mut acc = [[vdupq_n_s32(0); 4]; R];
            if t == QuantType::Q8_0 {
                // 8 chunks of 4 elements; the codes are stored `^ 0x80` (see `tiled`).
                let flip = vdupq_n_u8(0x80);
                for c in 0..8 {
                    let w: [int8x16_t; 4] = std::array::from_fn(|u| {
                        vreinterpretq_s8_u8(veorq_u8(vld1q_u8(blk.add(qs + 64 * c + 16 * u)), flip))
                    });
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let a = dup4(acts.q.as_ptr().add((e0 + i) * QK + 4 * c));
                        for u in 0..4 {
                            acc_i[u] = sdot(acc_i[u], w[u], a);
                        }
                    }
                }
            } else {
                // 4 chunks: byte j of a row's 4 holds element 4c + j (low nibble) and
                // 16 + 4c + j (high), and the fifth bits come from two u64 per chunk.
                let low = vdupq_n_u8(0x0F);
                let offset = match t {
                    QuantType::Q4_0 => 8,
                    QuantType::Q5_0 => 16,
                    _ => 0,
                };
                for c in 0..4 {
                    let (mut lo, mut hi) = ([vdupq_n_s8(0); 4], [vdupq_n_s8(0); 4]);
                    let (hl, hh) = if qh != usize::MAX {
                        let at = blk.add(qh + 16 * c);
                        (
                            at.cast::<u64>().read_unaligned().to_le(),
                            at.add(8).cast::<u64>().read_unaligned().to_le(),
                        )
                    } else {
                        (0, 0)
                    };
                    for u in 0..4 {
                        let v = vld1q_u8(blk.add(qs + 64 * c + 16 * u));
                        let (mut l, mut h) = (vandq_u8(v, low), vshrq_n_u8::<4>(v));
                        if qh != usize::MAX {
                            let five = vdupq_n_u8(0x10);
                            l = vorrq_u8(l, vandq_u8(bits(hl, 16 * u as u32), five));
                            h = vorrq_u8(h, vandq_u8(bits(hh, 16 * u as u32), five));
                        }
                        let off = vdupq_n_s8(offset);
                        lo[u] = vsubq_s8(vreinterpretq_s8_u8(l), off);
                        hi[u] = vsubq_s8(vreinterpretq_s8_u8(h), off);
                    }
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let a = acts.q.as_ptr().add((e0 + i) * QK);
                        let (al, ah) = (dup4(a.add(4 * c)), dup4(a.add(16 + 4 * c)));
                        for u in 0..4 {
                            acc_i[u] = sdot(sdot(acc_i[u], lo[u], al), hi[u], ah);
                        }
                    }
                }
            }
            let dw = widen16(blk);
            let mw = (mo != usize::MAX).then(|| widen16(blk.add(mo)));
            for (i, (sum_i, acc_i)) in sums.iter_mut().zip(&acc).enumerate() {
                let (d, s) = (acts.d[e0 + i], acts.s[e0 + i]);
                for u in 0..4 {
                    let x = vfmaq_f32(sum_i[u], vcvtq_f32_s32(acc_i[u]), vmulq_n_f32(dw[u], d));
                    sum_i[u] = match &mw {
                        Some(mw) => vfmaq_n_f32(x, mw[u], s),
                        None => x,
                    };
                }
            }
        }
        for (i, sum_i) in sums.iter().enumerate() {
            for (u, s) in sum_i.iter().enumerate() {
                vst1q_f32(o.add(i * ldo + 4 * u), *s);
            }
        }
    }
}
