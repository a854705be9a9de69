//! Loops that keep one core's vector units as busy as they can: independent chains of the
//! instruction each product kernel is built on, for [`crate::peak`]. Each returns a value
//! that depends on every chain, so no iteration can be dropped.

use std::arch::x86_64::*;

/// Independent accumulators per loop: more than the pipes × latency of any of these
/// instructions on current cores (2 × 4–6), within AVX-512's 32 registers.
const CHAINS: usize = 16;

/// f32 operations per iteration of [`fma_avx512`]: 16 chains × 16 lanes × (mul + add).
pub(crate) const FMA_AVX512_FLOPS: u64 = (CHAINS * 16 * 2) as u64;
/// f32 operations per iteration of [`fma_avx2`]: 12 chains × 8 lanes × (mul + add).
pub(crate) const FMA_AVX2_FLOPS: u64 = 12 * 8 * 2;
/// Operations per iteration of [`dpbf16`]: 16 chains × 16 lanes × 2 pairs × (mul + add).
pub(crate) const DPBF16_FLOPS: u64 = (CHAINS * 16 * 2 * 2) as u64;
/// Operations per iteration of [`dpbusd`]: 16 chains × 16 lanes × 4 bytes × (mul + add).
pub(crate) const DPBUSD_OPS: u64 = (CHAINS * 16 * 4 * 2) as u64;

/// Operations per iteration of [`maddwd`]: 12 chains × 8 lanes × 2 pairs × (mul + add).
pub(crate) const MADDWD_OPS: u64 = 12 * 8 * 2 * 2;

/// `iters` rounds of 16 independent 16-lane f32 fused multiply-adds.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn fma_avx512(iters: u64) -> f32 {
    let a = _mm512_set1_ps(0.999_999);
    let b = _mm512_set1_ps(1e-7);
    let mut acc = [_mm512_setzero_ps(); CHAINS];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm512_fmadd_ps(*r, a, b);
        }
    }
    let s = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &r| _mm512_add_ps(s, r));
    _mm512_reduce_add_ps(s)
}

/// `iters` rounds of 12 independent 8-lane f32 fused multiply-adds (AVX2 has 16 registers).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn fma_avx2(iters: u64) -> f32 {
    let a = _mm256_set1_ps(0.999_999);
    let b = _mm256_set1_ps(1e-7);
    let mut acc = [_mm256_setzero_ps(); 12];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm256_fmadd_ps(*r, a, b);
        }
    }
    let s = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &r| _mm256_add_ps(s, r));
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds exactly the 8 floats of one 256-bit store.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
    lanes.iter().sum()
}

/// `iters` rounds of 16 independent `vdpbf16ps` (pairs of bf16 products into f32 lanes).
///
/// # Safety
/// The CPU must have AVX-512 F and BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn dpbf16(iters: u64) -> f32 {
    // 2^-15 is exact in bf16: the sums stay small and finite for any run length.
    let v = _mm512_set1_ps(1.0 / 32768.0);
    let x = _mm512_cvtne2ps_pbh(v, v);
    let mut acc = [_mm512_setzero_ps(); CHAINS];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm512_dpbf16_ps(*r, x, x);
        }
    }
    let s = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &r| _mm512_add_ps(s, r));
    _mm512_reduce_add_ps(s)
}

/// `iters` rounds of 16 independent `vpdpbusd` (quads of u8 × i8 products into i32 lanes).
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(crate) unsafe fn dpbusd(iters: u64) -> i32 {
    let u = _mm512_set1_epi8(3);
    let s = _mm512_set1_epi8(-2);
    let mut acc = [_mm512_setzero_si512(); CHAINS];
    for _ in 0..iters {
        for r in acc.iter_mut() {
            *r = _mm512_dpbusd_epi32(*r, u, s);
        }
    }
    let t = acc
        .iter()
        .fold(_mm512_setzero_si512(), |t, &r| _mm512_add_epi32(t, r));
    _mm512_reduce_add_epi32(t)
}

/// `iters` rounds of 12 independent `vpmaddwd` + `vpaddd` (pairs of i16 products added
/// into i32 lanes: the AVX2 int8 tile's step; AVX2 has 16 registers).
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn maddwd(iters: u64) -> i32 {
    let y = _mm256_set1_epi16(-2);
    let mut acc = [_mm256_set1_epi32(3); 12];
    for _ in 0..iters {
        // Each product reads its own chain, so none can be hoisted out of the loop.
        for r in acc.iter_mut() {
            *r = _mm256_add_epi32(*r, _mm256_madd_epi16(*r, y));
        }
    }
    let t = acc
        .iter()
        .fold(_mm256_setzero_si256(), |t, &r| _mm256_add_epi32(t, r));
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` holds exactly the 8 i32 of one 256-bit store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, t) };
    lanes.iter().fold(0, |s, &v| s.wrapping_add(v))
}
