//! AVX-512 product of one [`crate::F16Tiles`] tile with many input rows (a decoder prompt).
//! The tile's columns are widened to f32 a block at a time into a panel that stays in L1,
//! and every row multiplies that block, so the f16 conversion is paid once per call and
//! both operands come from L1. Each output's running sum is kept in `out` between column
//! blocks (stored and reloaded as f32), so every output is the same sequence of fused
//! multiply-adds as in the small-M tile kernel: the results are identical bit for bit.

use std::arch::x86_64::*;

use half::f16;

use super::TILE_ROWS;

/// Tile columns per panel block: 16 KiB of f32.
const KC: usize = 64;
/// Input rows per register block: 6 × 4 accumulators.
const MR: usize = 6;
/// Vectors per tile column.
const V: usize = TILE_ROWS / 16;

/// `out[i·ldo + r] = Σ_{c < k} x[i·k + c] · w[c·TILE_ROWS + r]` for `i < m`, `r < TILE_ROWS`.
///
/// `x` Shape: [m, k]; `w` Shape: [k, TILE_ROWS] (one tile); `out` Shape: [m, ldo];
/// `panel` Shape: [KC · TILE_ROWS] (scratch). Panics on other shapes.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL, AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn tile_rows(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[f16],
    out: &mut [f32],
    ldo: usize,
    panel: &mut Panel,
) {
    assert!(x.len() == m * k && w.len() == k * TILE_ROWS && ldo >= TILE_ROWS);
    assert!(
        m == 0 || out.len() >= (m - 1) * ldo + TILE_ROWS,
        "tile_rows: out"
    );
    for c0 in (0..k).step_by(KC) {
        let kc = KC.min(k - c0);
        for (p, h) in panel
            .chunks_exact_mut(16)
            .zip(w[c0 * TILE_ROWS..(c0 + kc) * TILE_ROWS].chunks_exact(16))
        {
            // SAFETY: 16 f16 read from `h`, 16 f32 written to `p`.
            unsafe {
                let v = _mm512_cvtph_ps(_mm256_loadu_si256(h.as_ptr() as *const __m256i));
                _mm512_storeu_ps(p.as_mut_ptr(), v);
            }
        }
        let mut i0 = 0;
        while i0 < m {
            let g = (m - i0).min(MR);
            // SAFETY: rows i0..i0 + g < m of x (columns c0..c0 + kc ≤ k) and of out
            // (TILE_ROWS columns each, ldo apart) are in bounds (checked above); the panel
            // holds kc ≤ KC columns.
            unsafe {
                let (xp, op, pp) = (
                    x.as_ptr().add(i0 * k + c0),
                    out.as_mut_ptr().add(i0 * ldo),
                    panel.as_ptr(),
                );
                let first = c0 == 0;
                match g {
                    1 => block::<1>(xp, k, kc, pp, op, ldo, first),
                    2 => block::<2>(xp, k, kc, pp, op, ldo, first),
                    3 => block::<3>(xp, k, kc, pp, op, ldo, first),
                    4 => block::<4>(xp, k, kc, pp, op, ldo, first),
                    5 => block::<5>(xp, k, kc, pp, op, ldo, first),
                    _ => block::<6>(xp, k, kc, pp, op, ldo, first),
                }
            }
            i0 += g;
        }
    }
}

/// `o_i (+)= Σ_{c < kc} x_i[c] · panel[c]` for G rows (`o_i` starts at 0 when `first`).
///
/// # Safety
/// Same features as [`tile_rows`]; `x` rows i < G hold kc values `ldx` apart, `panel`
/// holds kc × TILE_ROWS values, `o` rows i < G hold TILE_ROWS values `ldo` apart.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn block<const G: usize>(
    x: *const f32,
    ldx: usize,
    kc: usize,
    panel: *const f32,
    o: *mut f32,
    ldo: usize,
    first: bool,
) {
    // SAFETY: every access stays inside the ranges the caller guarantees.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); V]; G];
        if !first {
            for (i, acc_i) in acc.iter_mut().enumerate() {
                for (u, a) in acc_i.iter_mut().enumerate() {
                    *a = _mm512_loadu_ps(o.add(i * ldo + u * 16));
                }
            }
        }
        for c in 0..kc {
            let mut wv = [_mm512_setzero_ps(); V];
            for (u, v) in wv.iter_mut().enumerate() {
                *v = _mm512_loadu_ps(panel.add(c * TILE_ROWS + u * 16));
            }
            for (i, acc_i) in acc.iter_mut().enumerate() {
                let xb = _mm512_set1_ps(*x.add(i * ldx + c));
                for u in 0..V {
                    acc_i[u] = _mm512_fmadd_ps(wv[u], xb, acc_i[u]);
                }
            }
        }
        for (i, acc_i) in acc.iter().enumerate() {
            for (u, a) in acc_i.iter().enumerate() {
                _mm512_storeu_ps(o.add(i * ldo + u * 16), *a);
            }
        }
    }
}

/// Scratch for [`tile_rows`].
pub(crate) type Panel = [f32; KC * TILE_ROWS];
