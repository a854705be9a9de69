//! AVX-512 f32 product tile for [`crate::f32gemm`]: the register-blocked `M × 16·V`
//! tile built on fused multiply-adds with broadcast activations.

use std::arch::x86_64::*;

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// One output tile of `M` rows × `16·V` columns: `c[r·ldc + j] = (acc ? c : 0) +
/// Σ_p a[r·lda + p] · b[p·16V + j] (+ bias[j])` for `r < rows`, `j < cols`, a fused
/// multiply-add per p in order.
///
/// `a` Shape: [M, lda] (rows of activations, `kc` used); `b` Shape: [kc, 16·V] (one packed
/// column panel); `c` Shape: [rows, ldc].
///
/// # Safety
/// The CPU must have AVX-512 F; `a` must hold `M` rows of `lda ≥ kc` values (all `M` are
/// read) and `b` `kc·16·V` values; `c` rows `0..rows` must be writable at columns `0..cols`;
/// `rows <= M`, `cols <= 16·V`; `bias`, when given, must hold `cols` values.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile<const M: usize, const V: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
) {
    debug_assert!(rows <= M && cols <= 16 * V);
    // Column vector v's mask and first column; a vector past `cols` has an all-off mask,
    // which touches no memory.
    let mask = |v: usize| low_mask(cols.saturating_sub(16 * v).min(16));
    let at = |v: usize| (16 * v).min(cols);
    let mut cv = [[_mm512_setzero_ps(); V]; M];
    if acc {
        for (r, row) in cv.iter_mut().enumerate().take(rows) {
            for (v, x) in row.iter_mut().enumerate() {
                // SAFETY: row r < rows of c, columns masked to 0..cols.
                *x = unsafe { _mm512_maskz_loadu_ps(mask(v), c.add(r * ldc + at(v))) };
            }
        }
    }
    let w = 16 * V;
    for p in 0..kc {
        // SAFETY: p < kc, so b[p·w..(p + 1)·w] and a[r·lda + p] are in bounds.
        unsafe {
            let mut bv = [_mm512_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(b.add(p * w + 16 * v));
            }
            for (r, row) in cv.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(r * lda + p));
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm512_fmadd_ps(av, bx, *x);
                }
            }
        }
    }
    if let Some(bias) = bias {
        for v in 0..V {
            // SAFETY: bias holds cols values; the mask reads no further.
            let bb = unsafe { _mm512_maskz_loadu_ps(mask(v), bias.as_ptr().add(at(v))) };
            for row in cv.iter_mut().take(rows) {
                row[v] = _mm512_add_ps(row[v], bb);
            }
        }
    }
    for (r, row) in cv.iter().enumerate().take(rows) {
        for (v, &x) in row.iter().enumerate() {
            // SAFETY: row r < rows of c, columns masked to 0..cols.
            unsafe { _mm512_mask_storeu_ps(c.add(r * ldc + at(v)), mask(v), x) };
        }
    }
}
