//! AVX-512 f32 product tile for [`crate::f32gemm`]: the register-blocked `M × 16·V`
//! tile built on fused multiply-adds with broadcast activations.

use std::arch::x86_64::*;

use half::f16;

use super::x86_tile;

/// A value type of the AVX2 tile's weight panels: f32, or f16 widened exactly as it is
/// loaded (half the bytes per panel, the same products).
pub(crate) trait PanelValue: Copy {
    /// Eight panel values from `p`, as f32.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `p` must be readable for 8 values.
    unsafe fn load8(p: *const Self) -> __m256;
}

impl PanelValue for f32 {
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: p is readable for 8 values (contract).
        unsafe { _mm256_loadu_ps(p) }
    }
}

impl PanelValue for f16 {
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: p is readable for 8 values, 16 bytes (contract).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
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

/// [`tile`] on AVX2 and FMA: `M` rows × `8·V` columns in 256-bit registers, `b` a panel of
/// `8·V` columns of f32 or f16 values (widened as loaded). Same sums in the same order, so
/// the same bits. A partial tile (fewer rows or columns) is made in a local block and
/// copied, as AVX2 has no masked f32 stores that cost nothing.
///
/// # Safety
/// As [`tile`], with AVX2, FMA and F16C in place of AVX-512 F and `cols <= 8·V`.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_avx2<const M: usize, const V: usize, T: PanelValue>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const T,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
) {
    let w = 8 * V;
    debug_assert!(rows <= M && cols <= w);
    if let Some(bias) = bias {
        assert!(bias.len() >= cols, "bias shorter than the tile");
    }
    if rows == M && cols == w {
        // SAFETY: the whole tile is in `c` (this fn's contract) and bias has w values.
        unsafe { whole_avx2::<M, V, T>(kc, a, lda, b, c, ldc, acc, bias.map(|b| b.as_ptr())) };
    } else {
        // SAFETY: as this fn's contract.
        unsafe { partial_avx2::<M, V, T>(kc, a, lda, b, c, ldc, rows, cols, acc, bias) };
    }
}

/// A partial tile of [`tile_avx2`]: made whole in a local block (zeros past its rows and
/// columns), then copied.
///
/// # Safety
/// As [`tile_avx2`].
#[cold]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn partial_avx2<const M: usize, const V: usize, T: PanelValue>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const T,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    acc: bool,
    bias: Option<&[f32]>,
) {
    const LD: usize = 32;
    let mut local = [0f32; 8 * LD];
    assert!(M <= 8 && 8 * V <= LD, "tile_avx2: tile too large");
    if acc {
        for r in 0..rows {
            // SAFETY: c rows 0..rows are readable at columns 0..cols (contract).
            let src = unsafe { std::slice::from_raw_parts(c.add(r * ldc), cols) };
            local[r * LD..r * LD + cols].copy_from_slice(src);
        }
    }
    let mut padded = [0f32; LD];
    let bias = bias.map(|bias| {
        padded[..cols].copy_from_slice(&bias[..cols]);
        padded.as_ptr()
    });
    // SAFETY: the local block holds M rows of LD ≥ 8·V values; bias, when given, LD.
    unsafe { whole_avx2::<M, V, T>(kc, a, lda, b, local.as_mut_ptr(), LD, acc, bias) };
    for r in 0..rows {
        // SAFETY: c rows 0..rows are writable at columns 0..cols (contract).
        let out = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), cols) };
        out.copy_from_slice(&local[r * LD..r * LD + cols]);
    }
}

/// The whole `M × 8·V` tile of [`tile_avx2`] at `c`, `bias` (when given) `8·V` values.
///
/// # Safety
/// AVX2, FMA and F16C; `a` holds `M` rows of `lda ≥ kc`, `b` `kc·8·V` values, `c` rows
/// `0..M` columns `0..8·V` valid for reads (when `acc`) and writes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn whole_avx2<const M: usize, const V: usize, T: PanelValue>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const T,
    c: *mut f32,
    ldc: usize,
    acc: bool,
    bias: Option<*const f32>,
) {
    let w = 8 * V;
    let mut cv = [[_mm256_setzero_ps(); V]; M];
    if acc {
        for (r, row) in cv.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                // SAFETY: row r < M, columns 8v..8v + 8 ≤ w of c (contract).
                *x = unsafe { _mm256_loadu_ps(c.add(r * ldc + 8 * v)) };
            }
        }
    }
    for p in 0..kc {
        // SAFETY: p < kc, so b[p·w..(p + 1)·w] and a[r·lda + p] are in bounds.
        unsafe {
            let mut bv = [_mm256_setzero_ps(); V];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = T::load8(b.add(p * w + 8 * v));
            }
            for (r, row) in cv.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r * lda + p));
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, bx, *x);
                }
            }
        }
    }
    if let Some(bias) = bias {
        for v in 0..V {
            // SAFETY: bias holds w values (contract).
            let bb = unsafe { _mm256_loadu_ps(bias.add(8 * v)) };
            for row in cv.iter_mut() {
                row[v] = _mm256_add_ps(row[v], bb);
            }
        }
    }
    for (r, row) in cv.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            // SAFETY: as the loads above.
            unsafe { _mm256_storeu_ps(c.add(r * ldc + 8 * v), x) };
        }
    }
}
