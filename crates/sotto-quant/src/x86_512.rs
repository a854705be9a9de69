//! AVX-512 dot products: two blocks per 512-bit step, the byte products summed by VNNI's
//! `vpdpbusd` where the CPU has it (else `vpmaddubsw` + `vpmaddwd`). An odd last block
//! goes through the AVX2 kernel. (AVX-512 intrinsics are stable since Rust 1.89, hence
//! the workspace's `rust-version`.)

use std::arch::x86_64::*;

use crate::reference::f16_at;
use crate::x86;
use crate::QuantType;

/// Whether the CPU has AVX-512 VNNI (std caches the detection).
pub(crate) fn has_vnni() -> bool {
    is_x86_feature_detected!("avx512vnni")
}

/// Runs the VNNI or the plain kernel. The caller has checked AVX-512 F/BW/VL (and AVX2,
/// FMA, F16C) and, when `vnni`, VNNI; `w`/`a` hold `nb` blocks.
pub(crate) fn vec_dot(vnni: bool, t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    debug_assert!(crate::Isa::Avx512.is_supported() && (!vnni || has_vnni()));
    if vnni {
        // SAFETY: CPU features checked by the caller (see above); lengths by check_dot.
        unsafe { with_vnni::vec_dot(t, nb, w, a) }
    } else {
        // SAFETY: as above.
        unsafe { plain::vec_dot(t, nb, w, a) }
    }
}

/// Stamps out the two-block kernel for one target-feature set and one `u8 × i8 → i32`
/// lane reduction, so everything inlines into a single loop per variant.
macro_rules! kernel {
    ($module:ident, $features:literal, |$a:ident, $b:ident| $dot:expr) => {
        mod $module {
            use super::*;

            #[inline]
            #[target_feature(enable = $features)]
            fn dot_u8i8($a: __m512i, $b: __m512i) -> __m512i {
                $dot
            }

            #[inline]
            #[target_feature(enable = $features)]
            fn pair(lo: __m256i, hi: __m256i) -> __m512i {
                _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
            }

            /// # Safety
            /// The CPU must have the target features; `w` and `a` hold `nb` blocks.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn vec_dot(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
                let (wb, ab) = (t.block_bytes(), t.activation_type().block_bytes());
                let offset = matches!(t, QuantType::Q4_1 | QuantType::Q5_1);
                let qy_at = if offset { 4 } else { 2 };
                let mut acc = _mm512_setzero_ps();
                let mut offsets = 0.0f32;
                let mut i = 0;
                while i + 2 <= nb {
                    let (x0, x1) = (&w[i * wb..], &w[(i + 1) * wb..]);
                    let (y0, y1) = (&a[i * ab..], &a[(i + 1) * ab..]);
                    // SAFETY: i + 1 < nb, so both blocks lie inside w and a.
                    let (qx, qy) = unsafe {
                        (
                            pair(x86::weights(t, x0.as_ptr()), x86::weights(t, x1.as_ptr())),
                            pair(
                                _mm256_loadu_si256(y0.as_ptr().add(qy_at).cast()),
                                _mm256_loadu_si256(y1.as_ptr().add(qy_at).cast()),
                            ),
                        )
                    };
                    let sumi = if offset {
                        dot_u8i8(qx, qy)
                    } else {
                        // Move x's sign onto y so the left operand is unsigned.
                        let neg = _mm512_movepi8_mask(qx);
                        let sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
                        dot_u8i8(_mm512_abs_epi8(qx), sy)
                    };
                    let d0 = f16_at(x0, 0) * f16_at(y0, 0);
                    let d1 = f16_at(x1, 0) * f16_at(y1, 0);
                    let d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
                    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), d, acc);
                    if offset {
                        offsets += f16_at(x0, 2) * f16_at(y0, 2) + f16_at(x1, 2) * f16_at(y1, 2);
                    }
                    i += 2;
                }
                let mut acc8 = _mm256_add_ps(
                    _mm512_castps512_ps256(acc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)),
                );
                if i < nb {
                    // SAFETY: block i is the last whole block of w and a.
                    offsets += unsafe {
                        x86::block(t, w.as_ptr().add(i * wb), a.as_ptr().add(i * ab), &mut acc8)
                    };
                }
                let s = _mm_add_ps(_mm256_castps256_ps128(acc8), _mm256_extractf128_ps(acc8, 1));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                _mm_cvtss_f32(s) + offsets
            }
        }
    };
}

kernel!(plain, "avx512f,avx512bw,avx512vl,avx2,fma,f16c", |a, b| {
    _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1))
});

kernel!(
    with_vnni,
    "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c",
    |a, b| _mm512_dpbusd_epi32(_mm512_setzero_si512(), a, b)
);
