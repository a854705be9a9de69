//! x86 kernels for [`crate::int8`]: f32 rows to int8 quads and the `MR × NR` tile built
//! on AVX-512 VNNI's `vpdpbusd` (unsigned weight bytes × signed activation bytes, four
//! products summed per 32-bit lane); f32 rows to i16 pairs and the `MR_AVX2 × NR_AVX2`
//! tile built on AVX2's `vpmaddwd` (two i16 products summed per 32-bit lane, then added).

use std::arch::x86_64::*;

use crate::int8::{Epilogue, MR, MR_AVX2, NR, NR_AVX2};

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// `x` quantized symmetrically into `d` (quads of signed bytes, the tail past `x.len()`
/// zero): returns the scale `max|x| / 127` and the sum of the quantized values, as the
/// scalar `quantize_row` does (round to nearest even). Panics unless
/// `d.len() == x.len().div_ceil(4)`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn quantize_row(x: &[f32], d: &mut [u32]) -> (f32, i32) {
    assert_eq!(d.len(), x.len().div_ceil(4), "quantize_row: lengths differ");
    let (n, s, o) = (x.len(), x.as_ptr(), d.as_mut_ptr() as *mut i8);
    let mut vmax = _mm512_setzero_ps();
    for i in (0..n).step_by(16) {
        // SAFETY: the mask keeps the load inside x[i..n].
        let v = unsafe { _mm512_maskz_loadu_ps(low_mask((n - i).min(16)), s.add(i)) };
        // A NaN lane yields the second operand, the running max: NaN is skipped, as by
        // f32::max in the scalar code.
        vmax = _mm512_max_ps(_mm512_abs_ps(v), vmax);
    }
    let amax = _mm512_reduce_max_ps(vmax);
    if amax == 0.0 || !amax.is_finite() {
        d.fill(0);
        return (0.0, 0);
    }
    let inv = _mm512_set1_ps(127.0 / amax);
    // Whole blocks of 64: four vectors of quantized i32 packed to bytes with saturating
    // packs (exact: the values lie in [-127, 127]) and one lane permute, then one full store
    // instead of four masked 16-byte ones; their sum as Σ(q + 128) − 128·64, by `vpsadbw`
    // on the bytes flipped to unsigned.
    let whole = n / 64 * 64;
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    let (flip, zero) = (_mm512_set1_epi8(-128), _mm512_setzero_si512());
    let mut sad = _mm512_setzero_si512();
    for i in (0..whole).step_by(64) {
        // SAFETY: x[i..i + 64] lies inside x (i + 64 ≤ whole ≤ n) and bytes i..i + 64 inside
        // the 4·d.len() ≥ n bytes of d.
        unsafe {
            let q = |j: usize| {
                let v = _mm512_loadu_ps(s.add(i + 16 * j));
                // NaN lanes convert to 0: converted, they would be i32::MIN.
                let ord = _mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v);
                _mm512_maskz_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    ord,
                    _mm512_mul_ps(v, inv),
                )
            };
            let (ab, cd) = (
                _mm512_packs_epi32(q(0), q(1)),
                _mm512_packs_epi32(q(2), q(3)),
            );
            // Per 128-bit lane l the packs leave vectors 0..3's lane l side by side;
            // `order` puts each vector's four lanes back together.
            let packed = _mm512_permutexvar_epi32(order, _mm512_packs_epi16(ab, cd));
            _mm512_storeu_si512(o.add(i) as *mut _, packed);
            sad = _mm512_add_epi64(sad, _mm512_sad_epu8(_mm512_xor_si512(packed, flip), zero));
        }
    }
    let whole_sum = (_mm512_reduce_add_epi64(sad) - 128 * whole as i64) as i32;
    let mut sum = _mm512_setzero_si512();
    let bytes = 4 * d.len();
    for i in (whole..bytes).step_by(16) {
        // SAFETY: the load mask keeps inside x[i..n] (lanes past it read as zero and
        // quantize to zero); the store mask inside the 4·d.len() bytes of d.
        unsafe {
            let v = _mm512_maskz_loadu_ps(low_mask(n.saturating_sub(i).min(16)), s.add(i));
            // NaN lanes are zeroed: converted, they would add i32::MIN to the sum.
            let v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(v, v), v);
            let q = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(v, inv),
            );
            sum = _mm512_add_epi32(sum, q);
            let packed = _mm512_cvtepi32_epi8(q);
            _mm_mask_storeu_epi8(o.add(i), low_mask((bytes - i).min(16)), packed);
        }
    }
    (amax / 127.0, whole_sum + _mm512_reduce_add_epi32(sum))
}

/// One output tile: `c[r·ldc + j] = (Σ_p a[r·k4 + p] · b[p·NR + j] − 128·a_sums[r]) ·
/// a_scales[r] · w_scales[j] (+ bias[j])` for `r < rows`, `j < cols`.
///
/// `a` Shape: [MR, k4] quads of signed bytes (rows of activations); `b` Shape: [k4, NR]
/// quads of unsigned bytes (one packed column panel, `q + 128`); `c` Shape: [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VNNI; `a` must hold `MR·k4` quads (all `MR` rows are
/// read, so pad past the last real row) and `b` `k4·NR`; `c` rows `0..rows` must be
/// writable at columns `0..cols`; `rows <= MR`, `cols <= NR`; `a_scales` and `a_sums` must
/// hold `MR` values, `epi.w_scales` `NR` and `epi.bias`, when given, `cols`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile(
    k4: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    a_scales: &[f32],
    a_sums: &[i32],
    epi: &Epilogue,
) {
    debug_assert!(rows <= MR && cols <= NR && a_scales.len() >= MR && a_sums.len() >= MR);
    let mut c0 = [_mm512_setzero_si512(); MR];
    let mut c1 = [_mm512_setzero_si512(); MR];
    if epi.add {
        // The rows the epilogue reads back: fetched while the products run (a residual
        // stream is megabytes, so they would otherwise come from L3 at the end).
        for r in 0..rows {
            let row = c.wrapping_add(r * ldc) as *const i8;
            _mm_prefetch::<_MM_HINT_ET0>(row);
            _mm_prefetch::<_MM_HINT_ET0>(row.wrapping_add(64));
        }
    }
    for p in 0..k4 {
        // SAFETY: p < k4, so b[p·NR..(p + 1)·NR] and a[r·k4 + p] are in bounds.
        unsafe {
            let b0 = _mm512_loadu_si512(b.add(p * NR) as *const _);
            let b1 = _mm512_loadu_si512(b.add(p * NR + 16) as *const _);
            for r in 0..MR {
                let av = _mm512_set1_epi32(*a.add(r * k4 + p) as i32);
                c0[r] = _mm512_dpbusd_epi32(c0[r], b0, av);
                c1[r] = _mm512_dpbusd_epi32(c1[r], b1, av);
            }
        }
    }
    // SAFETY: AVX-512 F runs; `epi` holds NR scales and `cols` biases (the contract).
    let finish = unsafe { Finish::new(epi, cols) };
    for r in 0..rows {
        // SAFETY: row r < rows of c is writable at columns 0..cols (the contract).
        unsafe { finish.row((c0[r], c1[r]), a_scales[r], a_sums[r], c.add(r * ldc)) };
    }
}

/// The epilogue of a 32-column int8 tile (this VNNI one and AMX's `x86_amx::tile_i8`):
/// `(sum − 128·a_sum) · a_scale · w_scale + bias`, the reference's order.
pub(crate) struct Finish {
    ws: (__m512, __m512),
    bias: (__m512, __m512),
    masks: (__mmask16, __mmask16),
    add: bool,
}

impl Finish {
    /// The tile's weight scales (`epi.w_scales`: 32, zero past the last column) and bias
    /// (`cols` values) for `cols <= 32` columns.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; `epi.w_scales` must hold 32 values.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn new(epi: &Epilogue, cols: usize) -> Self {
        let (m0, m1) = (low_mask(cols.min(16)), low_mask(cols.saturating_sub(16)));
        // SAFETY: w_scales holds 32 values (the contract); bias `cols`, which the masks
        // do not pass.
        unsafe {
            let ws = epi.w_scales.as_ptr();
            let bias = match epi.bias {
                Some(bias) => (
                    _mm512_maskz_loadu_ps(m0, bias.as_ptr()),
                    _mm512_maskz_loadu_ps(m1, bias.as_ptr().add(16.min(cols))),
                ),
                None => (_mm512_setzero_ps(), _mm512_setzero_ps()),
            };
            let ws = (_mm512_loadu_ps(ws), _mm512_loadu_ps(ws.add(16)));
            Finish {
                ws,
                bias,
                masks: (m0, m1),
                add: epi.add,
            }
        }
    }

    /// Writes one row's `cols` outputs to `dst` (or adds them onto it, with `epi.add`)
    /// from its i32 sums (columns 0..16, 16..32).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F; `dst` must be writable (and, adding, readable) at
    /// `cols` values.
    #[target_feature(enable = "avx512f")]
    pub(crate) unsafe fn row(
        &self,
        (c0, c1): (__m512i, __m512i),
        a_scale: f32,
        a_sum: i32,
        dst: *mut f32,
    ) {
        let corr = _mm512_set1_epi32(128 * a_sum);
        let s = _mm512_set1_ps(a_scale);
        let v0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(c0, corr));
        let v1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(c1, corr));
        // Scale, then bias, in the reference's order: the bias of a missing one is 0 + x.
        let v0 = _mm512_add_ps(_mm512_mul_ps(v0, _mm512_mul_ps(self.ws.0, s)), self.bias.0);
        let v1 = _mm512_add_ps(_mm512_mul_ps(v1, _mm512_mul_ps(self.ws.1, s)), self.bias.1);
        // SAFETY: columns masked to 0..cols (an all-off mask touches nothing, so the
        // second half's address may lie past the end).
        unsafe {
            let (v0, v1) = if self.add {
                let o0 = _mm512_maskz_loadu_ps(self.masks.0, dst);
                let o1 = _mm512_maskz_loadu_ps(self.masks.1, dst.wrapping_add(16));
                (_mm512_add_ps(o0, v0), _mm512_add_ps(o1, v1))
            } else {
                (v0, v1)
            };
            _mm512_mask_storeu_ps(dst, self.masks.0, v0);
            _mm512_mask_storeu_ps(dst.wrapping_add(16), self.masks.1, v1);
        }
    }
}

/// `x` quantized symmetrically to `qmax` levels (at most 32 767) into `d` as pairs of i16
/// (low half first; past `x.len()` zero), for the AVX2 tile: returns the scale
/// `max|x| / qmax`, the values those of the scalar `quantize_levels` (round to nearest
/// even). Panics unless `d.len() == x.len().div_ceil(2)`.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn quantize_row_pairs(x: &[f32], qmax: f32, d: &mut [u32]) -> f32 {
    assert_eq!(
        d.len(),
        x.len().div_ceil(2),
        "quantize_row_pairs: lengths differ"
    );
    let n = x.len();
    let whole = n - n % 16;
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let mut vmax = _mm256_setzero_ps();
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 ≤ whole ≤ n.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
        // A NaN lane yields the second operand, the running max (as f32::max skips NaN).
        vmax = _mm256_max_ps(_mm256_and_ps(v, abs), vmax);
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds the 8 floats of one store.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax) };
    let amax = (lanes.iter().chain(&x[whole..])).fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        d.fill(0);
        return 0.0;
    }
    let inv = qmax / amax;
    let vinv = _mm256_set1_ps(inv);
    for i in (0..whole).step_by(16) {
        // SAFETY: x[i..i + 16] lies inside x (i + 16 ≤ whole) and d[i/2..i/2 + 8] inside d.
        // The conversion rounds to nearest even (the default MXCSR mode).
        // NaN lanes are zeroed first: converted, they would be i32::MIN, not the scalar 0.
        unsafe {
            let y0 = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), vinv);
            let y1 = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i + 8)), vinv);
            let y0 = _mm256_and_ps(y0, _mm256_cmp_ps::<_CMP_ORD_Q>(y0, y0));
            let y1 = _mm256_and_ps(y1, _mm256_cmp_ps::<_CMP_ORD_Q>(y1, y1));
            let (q0, q1) = (_mm256_cvtps_epi32(y0), _mm256_cvtps_epi32(y1));
            // packs interleaves 128-bit halves: restore the order with one permute.
            let p = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q0, q1));
            _mm256_storeu_si256(d.as_mut_ptr().add(i / 2) as *mut __m256i, p);
        }
    }
    let q = |v: f32| (v * inv).round_ties_even() as i32 as i16 as u16 as u32;
    for (p, dst) in d.iter_mut().enumerate().skip(whole / 2) {
        let hi = x.get(2 * p + 1).map_or(0, |&v| q(v));
        *dst = q(x[2 * p]) | (hi << 16);
    }
    amax / qmax
}

/// The AVX2 tile: `c[r·ldc + j] = (Σ_p a[r·k2 + p] · b[p·NR_AVX2 + j]) · a_scales[r] ·
/// w_scales[j] (+ bias[j])` for `r < rows`, `j < cols`, each product term a pair of i16
/// products (`vpmaddwd`) added into i32 lanes: exact sums, as the VNNI tile's.
///
/// `a` Shape: [MR_AVX2, k2] pairs of i16 (rows of activations); `b` Shape: [k2, NR_AVX2]
/// pairs of i16 (one packed column panel); `c` Shape: [rows, ldc] f32.
///
/// # Safety
/// The CPU must have AVX2; `a` must hold `MR_AVX2·k2` pairs (all rows are read, so pad
/// past the last real row) and `b` `k2·NR_AVX2`; `c` rows `0..rows` must be writable at
/// columns `0..cols`; `rows <= MR_AVX2`, `cols <= NR_AVX2`; `a_scales` must hold `MR_AVX2`
/// values, `epi.w_scales` `NR_AVX2` and `epi.bias`, when given, `cols`.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_avx2(
    k2: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    a_scales: &[f32],
    epi: &Epilogue,
) {
    debug_assert!(rows <= MR_AVX2 && cols <= NR_AVX2 && a_scales.len() >= MR_AVX2);
    let mut c0 = [_mm256_setzero_si256(); MR_AVX2];
    let mut c1 = [_mm256_setzero_si256(); MR_AVX2];
    for p in 0..k2 {
        // SAFETY: p < k2, so b[p·NR_AVX2..(p + 1)·NR_AVX2] and a[r·k2 + p] are in bounds.
        unsafe {
            let b0 = _mm256_loadu_si256(b.add(p * NR_AVX2) as *const _);
            let b1 = _mm256_loadu_si256(b.add(p * NR_AVX2 + 8) as *const _);
            for r in 0..MR_AVX2 {
                let av = _mm256_set1_epi32(*a.add(r * k2 + p) as i32);
                c0[r] = _mm256_add_epi32(c0[r], _mm256_madd_epi16(b0, av));
                c1[r] = _mm256_add_epi32(c1[r], _mm256_madd_epi16(b1, av));
            }
        }
    }
    let mut bias = [0f32; NR_AVX2];
    if let Some(b) = epi.bias {
        bias[..cols].copy_from_slice(&b[..cols]);
    }
    // SAFETY: w_scales holds NR_AVX2 values and `bias` is NR_AVX2 long.
    let (ws0, ws1, bv0, bv1) = unsafe {
        let ws = epi.w_scales.as_ptr();
        (
            _mm256_loadu_ps(ws),
            _mm256_loadu_ps(ws.add(8)),
            _mm256_loadu_ps(bias.as_ptr()),
            _mm256_loadu_ps(bias.as_ptr().add(8)),
        )
    };
    for r in 0..rows {
        let s = _mm256_set1_ps(a_scales[r]);
        // Scale, then bias, in the reference's order: the bias of a missing one is 0 + x.
        let v0 = _mm256_cvtepi32_ps(c0[r]);
        let v1 = _mm256_cvtepi32_ps(c1[r]);
        let v0 = _mm256_add_ps(_mm256_mul_ps(v0, _mm256_mul_ps(ws0, s)), bv0);
        let v1 = _mm256_add_ps(_mm256_mul_ps(v1, _mm256_mul_ps(ws1, s)), bv1);
        // SAFETY: row r < rows of c; whole tiles store 16 columns, partial ones copy `cols`
        // from a local row (adding: read first, from the same places).
        unsafe {
            let dst = c.add(r * ldc);
            let (v0, v1) = match (epi.add, cols == NR_AVX2) {
                (false, _) => (v0, v1),
                (true, true) => (
                    _mm256_add_ps(_mm256_loadu_ps(dst), v0),
                    _mm256_add_ps(_mm256_loadu_ps(dst.add(8)), v1),
                ),
                (true, false) => {
                    let mut row = [0f32; NR_AVX2];
                    std::ptr::copy_nonoverlapping(dst, row.as_mut_ptr(), cols);
                    (
                        _mm256_add_ps(_mm256_loadu_ps(row.as_ptr()), v0),
                        _mm256_add_ps(_mm256_loadu_ps(row.as_ptr().add(8)), v1),
                    )
                }
            };
            if cols == NR_AVX2 {
                _mm256_storeu_ps(dst, v0);
                _mm256_storeu_ps(dst.add(8), v1);
            } else {
                let mut row = [0f32; NR_AVX2];
                _mm256_storeu_ps(row.as_mut_ptr(), v0);
                _mm256_storeu_ps(row.as_mut_ptr().add(8), v1);
                std::ptr::copy_nonoverlapping(row.as_ptr(), dst, cols);
            }
        }
    }
}
