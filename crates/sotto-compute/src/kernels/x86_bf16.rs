//! AVX-512 BF16 kernels for [`crate::bf16`]: f32 rows to bf16 pairs, and the
//! `MR × NR` register-blocked product tile built on `vdpbf16ps`.
//!
//! A bf16 pair is one u32: element `2p` in the low half, `2p + 1` in the high half, which
//! is the order `vdpbf16ps` multiplies in within each 32-bit lane.

use std::arch::x86_64::*;

use crate::bf16::{MR, NR};

/// `dst[p]` = the bf16 pair (`src[2p]`, `src[2p + 1]`), rounded to nearest even; a
/// missing last element (odd length) is zero. Panics unless `dst.len() == src.len().div_ceil(2)`.
///
/// # Safety
/// The CPU must have AVX-512 F and BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(crate) unsafe fn to_pairs(src: &[f32], dst: &mut [u32]) {
    assert_eq!(dst.len(), src.len().div_ceil(2), "to_pairs: lengths differ");
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr() as *mut i32);
    let mut i = 0;
    while i + 32 <= src.len() {
        // SAFETY: src[i..i + 32] and dst[i / 2..i / 2 + 16] are in bounds (loop condition
        // and the length check above).
        unsafe {
            let lo = _mm512_loadu_ps(s.add(i));
            let hi = _mm512_loadu_ps(s.add(i + 16));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_storeu_si512(d.add(i / 2) as *mut __m512i, v);
        }
        i += 32;
    }
    let rest = src.len() - i;
    if rest > 0 {
        let m_lo = low_mask(rest.min(16));
        let m_hi = low_mask(rest.saturating_sub(16));
        let m_out = low_mask(rest.div_ceil(2));
        // SAFETY: the masks only touch the `rest` remaining inputs and `rest.div_ceil(2)`
        // remaining outputs; masked-off lanes read as zero and are not stored.
        unsafe {
            let lo = _mm512_maskz_loadu_ps(m_lo, s.add(i));
            let hi = _mm512_maskz_loadu_ps(m_hi, s.add(i + 16.min(rest)));
            let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
            _mm512_mask_storeu_epi32(d.add(i / 2), m_out, v);
        }
    }
}

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// One output tile: `c[r·ldc + j] = (acc ? c : 0) + Σ_p a[r·lda + p] · b[p·NR + j]
/// (+ bias[j])` for `r < rows`, `j < cols`, with f32 accumulation in pair order.
///
/// `a` Shape: [MR, lda] bf16 pairs (rows of activations, `kc` used); `b` Shape: [kc, NR]
/// bf16 pairs (one packed column panel); `c` Shape: [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AVX-512 F and BF16; `a` must hold `MR` rows of `lda ≥ kc` values
/// (all `MR` are read, so pad past the last real row) and `b` `kc·NR` values;
/// `c` rows `0..rows` must be writable at columns `0..cols`; `rows <= MR`, `cols <= NR`;
/// `bias`, when given, must hold `cols` values.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    kc: usize,
    a: *const u32,
    lda: usize,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
) {
    debug_assert!(rows <= MR && cols <= NR);
    let (m0, m1) = (low_mask(cols.min(16)), low_mask(cols.saturating_sub(16)));
    let mut c0 = [_mm512_setzero_ps(); MR];
    let mut c1 = [_mm512_setzero_ps(); MR];
    if acc {
        for r in 0..rows {
            // SAFETY: row r < rows of c, columns masked to 0..cols (an all-off mask touches
            // nothing, so the second half's address may lie past the end).
            unsafe {
                c0[r] = _mm512_maskz_loadu_ps(m0, c.add(r * ldc));
                c1[r] = _mm512_maskz_loadu_ps(m1, c.add(r * ldc).wrapping_add(16));
            }
        }
    }
    for p in 0..kc {
        // SAFETY: p < kc, so b[p·NR..(p + 1)·NR] and a[r·lda + p] are in bounds.
        unsafe {
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR) as *const _));
            let b1: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16) as *const _));
            for r in 0..MR {
                let av: __m512bh =
                    std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + p) as i32));
                c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
                c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
            }
        }
    }
    if let Some(bias) = bias {
        // SAFETY: bias holds cols values; the masks read no further.
        let (bv0, bv1) = unsafe {
            (
                _mm512_maskz_loadu_ps(m0, bias.as_ptr()),
                _mm512_maskz_loadu_ps(m1, bias.as_ptr().add(16.min(cols))),
            )
        };
        for r in 0..rows {
            c0[r] = _mm512_add_ps(c0[r], bv0);
            c1[r] = _mm512_add_ps(c1[r], bv1);
        }
    }
    for r in 0..rows {
        // SAFETY: row r < rows of c, columns masked to 0..cols (an all-off mask touches
        // nothing, so the second half's address may lie past the end).
        unsafe {
            _mm512_mask_storeu_ps(c.add(r * ldc), m0, c0[r]);
            _mm512_mask_storeu_ps(c.add(r * ldc).wrapping_add(16), m1, c1[r]);
        }
    }
}
