//! AVX-512 f32 product tile for [`crate::f32gemm`]: the register-blocked `M × 16·V`
//! tile built on fused multiply-adds with broadcast activations.

use std::arch::x86_64::*;

use super::x86_tile;

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
    let mut cv = if acc {
        // SAFETY: c rows 0..rows are readable at columns 0..cols (this fn's contract).
        unsafe { x86_tile::load::<M, V>(c, ldc, rows, cols) }
    } else {
        [[_mm512_setzero_ps(); V]; M]
    };
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
        x86_tile::add_bias(&mut cv, bias, cols);
    }
    // SAFETY: c rows 0..rows are writable at columns 0..cols (this fn's contract).
    unsafe { x86_tile::store(&cv, c, ldc, rows, cols) };
}
