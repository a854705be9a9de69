//! AVX-512 BF16 kernels for [`crate::attention_bf16`]: the softmax step that turns a row of
//! f32 scores (from the int16 or bf16 tiles) into bf16 probability pairs, and the packing of values into k-pair panels.
//! The products themselves run on [`super::x86_bf16::tile`].

use std::arch::x86_64::*;

use crate::attention_bf16::EXP2_C;
use crate::attention_bf16::NR;

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// 2^t for t ≤ 0, as [`crate::attention_bf16::exp2_model`] computes it: f = t − floor(t)
/// in one `vreduceps`, a cubic in f, scaled by 2^floor(t) in `vscalefps` (which floors t
/// itself).
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn exp2(t: __m512) -> __m512 {
    let f = _mm512_reduce_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(t);
    let mut p = _mm512_set1_ps(EXP2_C[3]);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C[2]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C[1]));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_C[0]));
    _mm512_scalef_ps(p, t)
}

/// `p` = bf16 pairs of `exp2(s[j]·c − mc)` (nearest even; a missing last element zero);
/// returns the f32 sum of the rounded values (by pairs into 16 lanes, then across lanes).
///
/// `s` Shape: [n]; `p` Shape: [n.div_ceil(2)]. Panics on other lengths.
///
/// # Safety
/// The CPU must have AVX-512 F, DQ and BF16.
#[target_feature(enable = "avx512f,avx512dq,avx512bf16")]
pub(crate) unsafe fn exp2_pairs(s: &[f32], c: f32, mc: f32, p: &mut [u32]) -> f32 {
    assert_eq!(p.len(), s.len().div_ceil(2), "exp2_pairs: lengths differ");
    let (cv, mcv) = (_mm512_set1_ps(c), _mm512_set1_ps(mc));
    // bf16 pairs (1, 1): one `vdpbf16ps` adds both rounded values of a pair, exactly.
    let one = _mm512_set1_ps(1.0);
    let ones = _mm512_cvtne2ps_pbh(one, one);
    let (sp, pp) = (s.as_ptr(), p.as_mut_ptr() as *mut i32);
    // Two sums, so consecutive pair blocks do not wait on each other's `vdpbf16ps`.
    let (mut acc, mut acc1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= s.len() {
        // SAFETY: s[i..i + 32] and p[i / 2..i / 2 + 16] are in bounds (loop condition and
        // the length check above).
        unsafe {
            let lo = exp2(_mm512_fmsub_ps(_mm512_loadu_ps(sp.add(i)), cv, mcv));
            let hi = exp2(_mm512_fmsub_ps(_mm512_loadu_ps(sp.add(i + 16)), cv, mcv));
            let v = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(
                pp.add(i / 2) as *mut __m512i,
                std::mem::transmute::<__m512bh, __m512i>(v),
            );
            acc = _mm512_dpbf16_ps(acc, v, ones);
        }
        std::mem::swap(&mut acc, &mut acc1);
        i += 32;
    }
    acc = _mm512_add_ps(acc, acc1);
    let rest = s.len() - i;
    if rest > 0 {
        let (m_lo, m_hi) = (low_mask(rest.min(16)), low_mask(rest.saturating_sub(16)));
        // SAFETY: the masks only read the `rest` remaining scores and store the
        // `rest.div_ceil(2)` remaining pairs; lanes past the end are zeroed before the
        // conversion, so they neither count in the sum nor fill a pair's missing half.
        unsafe {
            let x_lo = _mm512_maskz_loadu_ps(m_lo, sp.add(i));
            let x_hi = _mm512_maskz_loadu_ps(m_hi, sp.add(i + 16.min(rest)));
            let lo = _mm512_maskz_mov_ps(m_lo, exp2(_mm512_fmsub_ps(x_lo, cv, mcv)));
            let hi = _mm512_maskz_mov_ps(m_hi, exp2(_mm512_fmsub_ps(x_hi, cv, mcv)));
            let v = _mm512_cvtne2ps_pbh(hi, lo);
            let pairs: __m512i = std::mem::transmute(v);
            _mm512_mask_storeu_epi32(pp.add(i / 2), low_mask(rest.div_ceil(2)), pairs);
            acc = _mm512_dpbf16_ps(acc, v, ones);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// Columns of a value panel from `rows` rows of `v`: `panel[p·NR + c] = (bf16 v[2p·ld + c],
/// bf16 v[(2p + 1)·ld + c])` for pairs p < `rows.div_ceil(2)` and c < `cols` (the missing
/// row of an odd `rows` zero). Masked stores write nothing else, so the tasks of a GEMM
/// can each put their rows and columns into panels they share.
///
/// `v` Shape: [rows, ld] (first `cols` of each row used); `panel` points at the first pair
/// row's first column written (rows NR apart).
///
/// # Safety
/// The CPU must have AVX-512 F, BW and BF16; `v` must hold `(rows − 1)·ld + cols` values
/// and `panel` `(rows.div_ceil(2) − 1)·NR + cols` pairs.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pack_v_cols(
    v: *const f32,
    ld: usize,
    rows: usize,
    cols: usize,
    panel: *mut u32,
) {
    for p in 0..rows.div_ceil(2) {
        for c in (0..cols).step_by(16) {
            let m = low_mask((cols - c).min(16));
            let m_hi = if 2 * p + 1 < rows { m } else { 0 };
            // SAFETY: the masks read only columns < cols of rows 2p and 2p + 1 < rows, which
            // the caller guarantees are in `v`, and store only columns < cols of pair row p.
            unsafe {
                let lo = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, v.add(2 * p * ld + c)));
                let row1 = v.wrapping_add((2 * p + 1) * ld + c);
                let hi = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m_hi, row1));
                let lo = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(lo));
                let hi = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(hi));
                let pair = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
                _mm512_mask_storeu_epi32(panel.add(p * NR + c) as *mut i32, m, pair);
            }
        }
    }
}

/// One value panel: `panel[p·NR + c] = (bf16 v[2p·ld + c], bf16 v[(2p + 1)·ld + c])` for
/// pairs p < `rows.div_ceil(2)` and columns c < `cols`; the missing row of an odd `rows`
/// and columns `cols..NR` zero.
///
/// `v` Shape: [rows, ld] (first `cols` of each row used); `panel` Shape: [rows.div_ceil(2), NR].
///
/// # Safety
/// The CPU must have AVX-512 F, BW and BF16; `cols ≤ NR`; `v` must hold `(rows − 1)·ld + cols`
/// values and `panel` `rows.div_ceil(2)·NR`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pack_v_panel(
    v: *const f32,
    ld: usize,
    rows: usize,
    cols: usize,
    panel: *mut u32,
) {
    debug_assert!(cols <= NR);
    // SAFETY: the same contract; pair rows are NR apart in the panel.
    unsafe { pack_v_cols(v, ld, rows, cols, panel) };
    for p in 0..rows.div_ceil(2) {
        // SAFETY: pair row p < rows.div_ceil(2) of the panel, columns cols..NR.
        unsafe { std::slice::from_raw_parts_mut(panel.add(p * NR + cols), NR - cols) }.fill(0);
    }
}
