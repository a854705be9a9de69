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

/// q8_0 blocks of `x` into `out`, the bytes of [`crate::reference::quantize`]: per block the
/// largest |x| as the max of the bit patterns (NaN counted as 0), `d = amax / 127` rounded
/// to f16 for the scale, and each `x · (1/d)` rounded half away from zero (`trunc(p ±
/// 0.49999997)`), clamped to [−128, 127], NaN to 0. (The same Rust loop compiled for AVX2
/// did not vectorize its rounding; this is ~5× faster, and a vocabulary's two planes
/// quantize ~53M values at load.)
///
/// # Safety
/// The CPU must have AVX2; `x` must be whole blocks of 32 and `out` their 34-byte blocks.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn q8_0(x: &[f32], out: &mut [u8]) {
    const QK: usize = QuantType::BLOCK;
    let bb = QuantType::Q8_0.block_bytes();
    debug_assert!(x.len() / QK * bb == out.len());
    let (abs, inf) = (
        _mm256_set1_epi32(0x7fff_ffff),
        _mm256_set1_epi32(0x7f80_0000),
    );
    let (half, sign) = (_mm256_set1_ps(0.499_999_97), _mm256_set1_ps(-0.0));
    let (hi, lo) = (_mm256_set1_ps(127.0), _mm256_set1_ps(-128.0));
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (xb, yb) in x.chunks_exact(QK).zip(out.chunks_exact_mut(bb)) {
        // SAFETY: xb holds 32 values, yb 34 bytes (chunks of the caller's whole blocks).
        let v = unsafe { [0, 8, 16, 24].map(|i| _mm256_loadu_ps(xb.as_ptr().add(i))) };
        let mut m = _mm256_setzero_si256();
        for &x in &v {
            let b = _mm256_and_si256(_mm256_castps_si256(x), abs);
            let b = _mm256_andnot_si256(_mm256_cmpgt_epi32(b, inf), b);
            m = _mm256_max_epu32(m, b);
        }
        let h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256::<1>(m));
        let h = _mm_max_epu32(h, _mm_shuffle_epi32::<0b0100_1110>(h));
        let h = _mm_max_epu32(h, _mm_shuffle_epi32::<0b1011_0001>(h));
        let amax = f32::from_bits(_mm_cvtsi128_si32(h) as u32);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
        yb[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        let q = v.map(|x| {
            let p = _mm256_mul_ps(x, id);
            let t = _mm256_add_ps(p, _mm256_or_ps(half, _mm256_and_ps(p, sign)));
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(t);
            let c = _mm256_cvttps_epi32(_mm256_max_ps(_mm256_min_ps(t, hi), lo));
            _mm256_andnot_si256(_mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(t, t)), c)
        });
        // Packing works per 128-bit lane: dwords come out as [x0 x1 x2 x3 | x0' x1' x2' x3'].
        let w = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let w = _mm256_permutevar8x32_epi32(w, order);
        // SAFETY: bytes 2..34 of the block.
        unsafe { _mm256_storeu_si256(yb.as_mut_ptr().add(2).cast(), w) };
    }
}
