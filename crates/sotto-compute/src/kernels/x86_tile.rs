//! The parts of an `M × 16·V` register tile that do not depend on how its sums are made:
//! loading earlier sums, adding the bias and storing, all masked to the tile's valid rows
//! and columns. Shared by the bf16 and f32 GEMM tiles.

use std::arch::x86_64::*;

/// Mask and first column of column vector `v` of a tile `cols` wide: a vector past `cols`
/// has an all-off mask, which touches no memory.
#[inline(always)]
fn vector(v: usize, cols: usize) -> (__mmask16, usize) {
    let n = cols.saturating_sub(16 * v).min(16);
    (((1u32 << n) - 1) as __mmask16, (16 * v).min(cols))
}

/// The sums in `c` (Shape: [rows, ldc], first `cols` columns), zero elsewhere.
///
/// # Safety
/// The CPU must have AVX-512 F; `c` rows `0..rows` must be readable at columns `0..cols`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn load<const M: usize, const V: usize>(
    c: *const f32,
    ldc: usize,
    rows: usize,
    cols: usize,
) -> [[__m512; V]; M] {
    let mut cv = [[_mm512_setzero_ps(); V]; M];
    for (r, row) in cv.iter_mut().enumerate().take(rows) {
        for (v, x) in row.iter_mut().enumerate() {
            let (m, at) = vector(v, cols);
            // SAFETY: row r < rows of c, columns masked to 0..cols.
            *x = unsafe { _mm512_maskz_loadu_ps(m, c.add(r * ldc + at)) };
        }
    }
    cv
}

/// Adds `bias` (its first `cols` values) to every row of `cv`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn add_bias<const M: usize, const V: usize>(
    cv: &mut [[__m512; V]; M],
    bias: &[f32],
    cols: usize,
) {
    assert!(bias.len() >= cols, "bias shorter than the tile");
    for v in 0..V {
        let (m, at) = vector(v, cols);
        // SAFETY: bias holds cols values (checked); the mask reads no further.
        let bb = unsafe { _mm512_maskz_loadu_ps(m, bias.as_ptr().add(at)) };
        for row in cv.iter_mut() {
            row[v] = _mm512_add_ps(row[v], bb);
        }
    }
}

/// Multiplies row r of `cv` by `f[r]`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn scale_rows<const M: usize, const V: usize>(cv: &mut [[__m512; V]; M], f: &[f32]) {
    assert!(f.len() >= M, "a factor per tile row");
    for (row, &f) in cv.iter_mut().zip(f) {
        let f = _mm512_set1_ps(f);
        for x in row.iter_mut() {
            *x = _mm512_mul_ps(*x, f);
        }
    }
}

/// Stores rows `0..rows`, columns `0..cols` of `cv` into `c` (Shape: [rows, ldc]).
///
/// # Safety
/// The CPU must have AVX-512 F; `c` rows `0..rows` must be writable at columns `0..cols`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn store<const M: usize, const V: usize>(
    cv: &[[__m512; V]; M],
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
) {
    for (r, row) in cv.iter().enumerate().take(rows) {
        for (v, &x) in row.iter().enumerate() {
            let (m, at) = vector(v, cols);
            // SAFETY: row r < rows of c, columns masked to 0..cols.
            unsafe { _mm512_mask_storeu_ps(c.add(r * ldc + at), m, x) };
        }
    }
}
