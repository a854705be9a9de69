//! AVX-512 BF16 kernels for [`crate::bf16`]: f32 rows to bf16 pairs, and the
//! register-blocked product tile built on `vdpbf16ps`.
//!
//! A bf16 pair is one u32: element `2p` in the low half, `2p + 1` in the high half, which
//! is the order `vdpbf16ps` multiplies in within each 32-bit lane.

use std::arch::x86_64::*;

use super::x86_tile;

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

/// One output tile of `M` rows × `16·V` columns: `c[r·ldc + j] = ((acc ? c·before[r] : 0) +
/// Σ_p a[r·lda + p] · b[p·16V + j] (+ bias[j]))·after[r]` for `r < rows`, `j < cols`, with
/// f32 accumulation in pair order; `scale` = (`before`, `after`), each factor 1 when None
/// (the attention's online-softmax rescale and final 1/l). The GEMM runs it as `M × V` = [`crate::bf16::MR`] × [`crate::bf16::NR`]/16; the
/// encoder attention's panels as 8 × 2.
///
/// `a` Shape: [M, lda] bf16 pairs (rows of activations, `kc` used); `b`: pair p of columns
/// 16v..16v + 16 at `b[p·ldb + v·vstride..][..16]` (a panel of 16·V columns, `ldb` = 16·V
/// and `vstride` = 16; or V panels of 16 columns, `ldb` = 16 and `vstride` their length);
/// `c` Shape: [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AVX-512 F and BF16; `a` must hold `M` rows of `lda ≥ kc` values
/// (all `M` are read, so pad past the last real row) and `b` the `kc` rows of all V groups;
/// `c` rows `0..rows` must be writable at columns `0..cols`; `rows <= M`, `cols <= 16·V`;
/// `bias`, when given, must hold `cols` values, and each of `scale`'s slices `M`.
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile<const M: usize, const V: usize>(
    kc: usize,
    a: *const u32,
    lda: usize,
    (b, ldb, vstride): (*const u32, usize, usize),
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
    (before, after): (Option<&[f32]>, Option<&[f32]>),
) {
    debug_assert!(rows <= M && cols <= 16 * V);
    let mut cv = if acc {
        // SAFETY: c rows 0..rows are readable at columns 0..cols (this fn's contract).
        unsafe { x86_tile::load::<M, V>(c, ldc, rows, cols) }
    } else {
        [[_mm512_setzero_ps(); V]; M]
    };
    if let Some(f) = before.filter(|_| acc) {
        x86_tile::scale_rows(&mut cv, f);
    }
    for p in 0..kc {
        // SAFETY: p < kc, so b[p·ldb + v·vstride..][..16] and a[r·lda + p] are in bounds.
        unsafe {
            let mut bv = [_mm512_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                let src = b.add(p * ldb + v * vstride);
                *x = _mm512_castsi512_ps(_mm512_loadu_si512(src as *const _));
            }
            for (r, row) in cv.iter_mut().enumerate() {
                let av: __m512bh =
                    std::mem::transmute(_mm512_set1_epi32(*a.add(r * lda + p) as i32));
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm512_dpbf16_ps(*x, av, std::mem::transmute::<__m512, __m512bh>(bx));
                }
            }
        }
    }
    if let Some(bias) = bias {
        x86_tile::add_bias(&mut cv, bias, cols);
    }
    if let Some(f) = after {
        x86_tile::scale_rows(&mut cv, f);
    }
    // SAFETY: c rows 0..rows are writable at columns 0..cols (this fn's contract).
    unsafe { x86_tile::store(&cv, c, ldc, rows, cols) };
}
