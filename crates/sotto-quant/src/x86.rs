//! AVX2 dot products (one block per step), after ggml's x86 kernels: widen the packed
//! codes to 32 bytes, multiply-add bytes to i32 lanes, scale in f32.

use std::arch::x86_64::*;

use crate::reference::f16_at;
use crate::QuantType;

/// 16 packed bytes → 32 bytes: low nibbles (elements 0..16), then high nibbles (16..32).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn nibbles(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes at `qs`.
    let lo = unsafe { _mm_loadu_si128(qs.cast()) };
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
}

/// The 32 bits of `qh` as 32 bytes: 0xFF where bit `j` is set, else 0.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bits_to_bytes(qh: u32) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    // Set every bit but bit j%8 in byte j; the byte is all ones exactly when that bit was set.
    let bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe));
    _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1))
}

/// A weight block's 32 values as i8 lanes: signed for q4_0/q5_0/q8_0, unsigned codes
/// (0..32) for q4_1/q5_1.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn weights(t: QuantType, b: *const u8) -> __m256i {
    // SAFETY (whole body): the caller guarantees a full block of type `t` at `b`.
    unsafe {
        match t {
            QuantType::Q4_0 => _mm256_sub_epi8(nibbles(b.add(2)), _mm256_set1_epi8(8)),
            QuantType::Q4_1 => nibbles(b.add(4)),
            QuantType::Q5_0 => {
                // (code | hbit<<4) - 16 == code | (hbit ? 0 : 0xF0) as i8.
                let high =
                    _mm256_andnot_si256(bits_to_bytes(read_u32(b.add(2))), _mm256_set1_epi8(-16));
                _mm256_or_si256(nibbles(b.add(6)), high)
            }
            QuantType::Q5_1 => {
                let high =
                    _mm256_and_si256(bits_to_bytes(read_u32(b.add(4))), _mm256_set1_epi8(0x10));
                _mm256_or_si256(nibbles(b.add(8)), high)
            }
            QuantType::Q8_0 | QuantType::Q8_1 => _mm256_loadu_si256(b.add(2).cast()),
        }
    }
}

#[inline]
pub(crate) unsafe fn read_u32(p: *const u8) -> u32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    u32::from_le(unsafe { p.cast::<u32>().read_unaligned() })
}

/// Σ x·y over pairs of i8 lanes into 8 i32 lanes; `signed` says whether `x` holds signed
/// values (else unsigned 0..=31).
#[inline]
#[target_feature(enable = "avx2")]
fn dot_i8(signed: bool, x: __m256i, y: __m256i) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let p = if signed {
        // maddubs wants u8 × i8: move x's sign onto y. |x|·|y| ≤ 127·127, so the pairwise
        // i16 sums cannot saturate for ggml's codes (which never hold -128).
        _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
    } else {
        _mm256_maddubs_epi16(x, y)
    };
    _mm256_madd_epi16(p, ones)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// One block's contribution to the running sum: `acc` for the d·d·Σ part, the return
/// value for the offset part (`m·s`, only q4_1/q5_1).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn block(t: QuantType, x: *const u8, y: *const u8, acc: &mut __m256) -> f32 {
    let offset = matches!(t, QuantType::Q4_1 | QuantType::Q5_1);
    // SAFETY: the caller guarantees whole blocks at `x` (type t) and `y` (its activation type).
    unsafe {
        let xs = std::slice::from_raw_parts(x, 4);
        let ys = std::slice::from_raw_parts(y, 4);
        let qy = _mm256_loadu_si256(y.add(if offset { 4 } else { 2 }).cast());
        let sumi = dot_i8(!offset, weights(t, x), qy);
        let d = f16_at(xs, 0) * f16_at(ys, 0);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(d), *acc);
        if offset {
            f16_at(xs, 2) * f16_at(ys, 2)
        } else {
            0.0
        }
    }
}

/// # Safety
/// The CPU must have AVX2, FMA and F16C; `w` and `a` must hold `nb` blocks of `t` and of
/// `t.activation_type()`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn vec_dot(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wb, ab) = (t.block_bytes(), t.activation_type().block_bytes());
    let mut acc = _mm256_setzero_ps();
    let mut offsets = 0.0f32;
    for i in 0..nb {
        // SAFETY: i < nb, and the caller sized w and a for nb blocks.
        offsets += unsafe { block(t, w.as_ptr().add(i * wb), a.as_ptr().add(i * ab), &mut acc) };
    }
    hsum(acc) + offsets
}
