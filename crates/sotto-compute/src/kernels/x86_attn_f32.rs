//! AVX-512 f32 micro-kernels for the many-query attention of [`crate::CpuBackend::attention`]:
//! an `MR × NR` score tile (S = Q·Kᵀ, keys packed in panels of `NR`), one row of the
//! online softmax (2^(s − m) with a degree-6 polynomial), and an `MR × NR` value tile
//! (O = corr · O + P·V, values packed in panels of `NR` columns).
//! Both keep their `MR × NR` outputs in 24 registers and stream one panel row per step:
//! four loads and `4·MR` fused multiply-adds with broadcast operands.

use std::arch::x86_64::*;

/// Query rows per tile.
pub(crate) const MR: usize = 6;
/// Keys (score tile) or value columns (value tile) per panel: four 16-lane registers, so
/// the 24 accumulators take 4 loads and 6 broadcasts per step (fewer loads per FMA than
/// 8 × 32, which loads capped on Zen 5).
pub(crate) const NR: usize = 64;

/// `s[r·lds + j] = Σ_{p < dh} q[r·dh + p] · k[p·W + j]` for `r < M`, `j < W`, W = 16·V
/// (a multiply-add per p, in order). [`CpuBackend::attention`](crate::CpuBackend::attention)
/// runs it as [`MR`] × [`NR`]; the mixed attention as 6 × 64.
///
/// With `row_max` = (`mv`, `cols`), also folds each row's scores at columns `< cols` into
/// that row's 16 running lane maxima, `mv[r·16..(r + 1)·16]`, while they are in registers
/// (the softmax then needs no pass over the row for its max).
///
/// `q` Shape: [M, dh] (one query row block); `k` Shape: [dh, ldk] (one key panel, or its
/// first W keys: key j's element p at `p·ldk + j`); `s` Shape: [M, lds]; `mv` Shape: [M, 16].
///
/// # Safety
/// The CPU must have AVX-512 F; `ldk ≥ W`; `q` must hold `M·dh` values, `k`
/// `(dh − 1)·ldk + W`, and `s` rows `0..M` must be writable at columns `0..W`; `mv`, when
/// given, `M·16` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn scores<const M: usize, const V: usize>(
    dh: usize,
    q: *const f32,
    (k, ldk): (*const f32, usize),
    s: *mut f32,
    lds: usize,
    row_max: Option<(*mut f32, usize)>,
) {
    debug_assert!(ldk >= 16 * V);
    let mut c = [[_mm512_setzero_ps(); V]; M];
    for p in 0..dh {
        // SAFETY: p < dh, so k[p·ldk..p·ldk + W] and q[r·dh + p] (r < M) are in bounds.
        unsafe {
            let mut b = [_mm512_setzero_ps(); V];
            for (v, x) in b.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(k.add(p * ldk + 16 * v));
            }
            for (r, row) in c.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*q.add(r * dh + p));
                for (x, &bx) in row.iter_mut().zip(&b) {
                    *x = _mm512_fmadd_ps(a, bx, *x);
                }
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            // SAFETY: row r < M of s, columns 0..W, writable by the caller's contract.
            unsafe { _mm512_storeu_ps(s.add(r * lds + 16 * v), x) };
        }
    }
    if let Some((mv, cols)) = row_max {
        // SAFETY: mv holds M·16 values (the caller's contract).
        unsafe { fold_row_max(&c, mv, cols) };
    }
}

/// Folds each row's scores at columns `< cols` into that row's 16 running lane maxima,
/// `mv[r·16..(r + 1)·16]`, while the tile is in registers.
///
/// # Safety
/// The CPU must have AVX-512 F; `mv` must hold `M·16` values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fold_row_max<const M: usize, const V: usize>(
    tile: &[[__m512; V]; M],
    mv: *mut f32,
    cols: usize,
) {
    for (r, row) in tile.iter().enumerate() {
        // SAFETY: row r < M of mv's M·16 values (the contract).
        unsafe {
            let at = mv.add(16 * r);
            let mut mx = _mm512_loadu_ps(at);
            for (v, &x) in row.iter().enumerate() {
                let n = cols.saturating_sub(16 * v).min(16);
                mx = _mm512_mask_max_ps(mx, ((1u32 << n) - 1) as __mmask16, mx, x);
            }
            _mm512_storeu_ps(at, mx);
        }
    }
}

/// [`scores`] on 16-bit integers: `s[r·lds + j] = (Σ_{p < kp} q[r·kp + p] ⊙ k[p·ldk + j]) ·
/// (k_scales[j] · q_scales[r])` for `r < M`, `j < W`, W = 16·V, each term a pair of i16
/// products (`vpdpwssd`, low halves and high halves) added into i32 lanes: exact sums,
/// which the caller keeps inside i32 (`int8::wide_qmax(d_head)` levels a side), converted
/// to f32 and scaled as written. Twice the f32 tile's multiply-adds per instruction, on
/// half the key bytes. `row_max` as [`scores`]'s.
///
/// `q` Shape: [M, kp] pairs (one query row block); `k` Shape: [kp, ldk] pairs (one key
/// panel); `s` Shape: [M, lds]; `q_scales` Shape: [M]; `k_scales` Shape: [W]; `mv` Shape:
/// [M, 16].
///
/// # Safety
/// The CPU must have AVX-512 F and VNNI; `ldk ≥ W`; `q` must hold `M·kp` pairs, `k`
/// `(kp − 1)·ldk + W`, `q_scales` `M` values and `k_scales` `W`; `s` rows `0..M` must be
/// writable at columns `0..W`; `mv`, when given, `M·16` values.
#[target_feature(enable = "avx512f,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_i16<const M: usize, const V: usize>(
    kp: usize,
    q: *const u32,
    (k, ldk): (*const u32, usize),
    (q_scales, k_scales): (*const f32, *const f32),
    s: *mut f32,
    lds: usize,
    row_max: Option<(*mut f32, usize)>,
) {
    debug_assert!(ldk >= 16 * V);
    let mut c = [[_mm512_setzero_si512(); V]; M];
    for p in 0..kp {
        // SAFETY: p < kp, so k[p·ldk..p·ldk + W] and q[r·kp + p] (r < M) are in bounds.
        unsafe {
            let mut b = [_mm512_setzero_si512(); V];
            for (v, x) in b.iter_mut().enumerate() {
                *x = _mm512_loadu_si512(k.add(p * ldk + 16 * v) as *const _);
            }
            for (r, row) in c.iter_mut().enumerate() {
                let a = _mm512_set1_epi32(*q.add(r * kp + p) as i32);
                for (x, &bx) in row.iter_mut().zip(&b) {
                    *x = _mm512_dpwssd_epi32(*x, a, bx);
                }
            }
        }
    }
    let mut ks = [_mm512_setzero_ps(); V];
    for (v, x) in ks.iter_mut().enumerate() {
        // SAFETY: k_scales holds W values (the contract).
        *x = unsafe { _mm512_loadu_ps(k_scales.add(16 * v)) };
    }
    let mut out = [[_mm512_setzero_ps(); V]; M];
    for (r, (row, o)) in c.iter().zip(out.iter_mut()).enumerate() {
        // SAFETY: q_scales holds M values; row r < M of s, columns 0..W (the contract).
        unsafe {
            let qs = _mm512_set1_ps(*q_scales.add(r));
            for (v, (&x, o)) in row.iter().zip(o.iter_mut()).enumerate() {
                *o = _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_mul_ps(ks[v], qs));
                _mm512_storeu_ps(s.add(r * lds + 16 * v), *o);
            }
        }
    }
    if let Some((mv, cols)) = row_max {
        // SAFETY: mv holds M·16 values (the caller's contract).
        unsafe { fold_row_max(&out, mv, cols) };
    }
}

/// One f32 key panel (`kf` Shape: [dh, W], key j's element p at `p·W + j`) as the integer
/// panel [`scores_i16`] reads (`kq` Shape: [dh.div_ceil(2), W] pairs of i16, elements 2p
/// low and 2p + 1 high, a missing last one zero): each key quantized symmetrically to
/// `qmax` levels by its own scale, `ks[j] = max_p |k_pj| / qmax`, values
/// `round_ties_even(k_pj · (qmax / max_p |k_pj|))` (`quantize_levels`, as
/// `x86_int8::quantize_row_pairs` does a row); a key of zeros or with a non-finite value
/// gets scale 0 and zeros.
///
/// # Safety
/// The CPU must have AVX-512 F and BW; `kf` must hold `dh·W` values, `kq`
/// `dh.div_ceil(2)·W` and `ks` `W`; W a multiple of 16.
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) unsafe fn quantize_k_panel<const W: usize>(
    kf: *const f32,
    dh: usize,
    qmax: f32,
    kq: *mut u32,
    ks: *mut f32,
) {
    let abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fff_ffff));
    for g in (0..W).step_by(16) {
        // SAFETY: row p < dh, keys g..g + 16 ≤ W of the panel (the contract), and the
        // same keys of `kq` rows < dh.div_ceil(2) and of `ks`.
        unsafe {
            // Max |k| per key; NaN and infinities propagate into `bad`.
            let (mut amax, mut bad) = (_mm512_setzero_ps(), 0 as __mmask16);
            for p in 0..dh {
                let x = _mm512_loadu_ps(kf.add(p * W + g));
                let a = _mm512_and_ps(x, abs);
                bad |= _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(a, _mm512_set1_ps(f32::INFINITY));
                amax = _mm512_max_ps(a, amax);
            }
            let zero = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(amax, _mm512_setzero_ps()) | bad;
            let keep = !zero;
            let inv = _mm512_maskz_div_ps(keep, _mm512_set1_ps(qmax), amax);
            _mm512_storeu_ps(
                ks.add(g),
                _mm512_maskz_div_ps(keep, amax, _mm512_set1_ps(qmax)),
            );
            for p2 in 0..dh.div_ceil(2) {
                let lo = _mm512_loadu_ps(kf.add(2 * p2 * W + g));
                let hi = if 2 * p2 + 1 < dh {
                    _mm512_loadu_ps(kf.add((2 * p2 + 1) * W + g))
                } else {
                    _mm512_setzero_ps()
                };
                // Rounds to nearest even (the default MXCSR mode); |x·inv| ≤ qmax.
                let ql = _mm512_maskz_cvtps_epi32(keep, _mm512_mul_ps(lo, inv));
                let qh = _mm512_maskz_cvtps_epi32(keep, _mm512_mul_ps(hi, inv));
                let pair = _mm512_or_si512(
                    _mm512_and_si512(ql, _mm512_set1_epi32(0xffff)),
                    _mm512_slli_epi32::<16>(qh),
                );
                _mm512_storeu_si512(kq.add(p2 * W + g) as *mut _, pair);
            }
        }
    }
}

/// `o[r·ldo + c] = o[r·ldo + c] · corr[r] + Σ_{j < kc} p[r·ldp + j] · v[j·NR + c]` for
/// `r < MR`, `c < NR`; with `corr` None the old `o` is not read (taken as zero).
///
/// `p` Shape: [MR, ldp] (probabilities, `kc` used); `v` Shape: [kc, NR] (one value panel:
/// key j's column c at `j·NR + c`); `o` Shape: [MR, ldo]; `corr` Shape: [MR].
///
/// # Safety
/// The CPU must have AVX-512 F; `p` must hold `MR` rows of `ldp ≥ kc` values, `v` `kc·NR`
/// values, `corr` (when given) `MR`, and `o` rows `0..MR` columns `0..NR` must be valid
/// for reads and writes.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn values(
    kc: usize,
    p: *const f32,
    ldp: usize,
    v: *const f32,
    o: *mut f32,
    ldo: usize,
    corr: Option<*const f32>,
) {
    const V: usize = NR / 16;
    let mut c = [[_mm512_setzero_ps(); V]; MR];
    if let Some(corr) = corr {
        for (r, row) in c.iter_mut().enumerate() {
            // SAFETY: corr[r] and o's row r, columns 0..NR, are in bounds (contract).
            unsafe {
                let f = _mm512_set1_ps(*corr.add(r));
                for (v, x) in row.iter_mut().enumerate() {
                    *x = _mm512_mul_ps(_mm512_loadu_ps(o.add(r * ldo + 16 * v)), f);
                }
            }
        }
    }
    for j in 0..kc {
        // SAFETY: j < kc, so v[j·NR..(j + 1)·NR] and p[r·ldp + j] (r < MR) are in bounds.
        unsafe {
            let mut b = [_mm512_setzero_ps(); V];
            for (i, x) in b.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(v.add(j * NR + 16 * i));
            }
            for (r, row) in c.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*p.add(r * ldp + j));
                for (x, &bx) in row.iter_mut().zip(&b) {
                    *x = _mm512_fmadd_ps(a, bx, *x);
                }
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (i, &x) in row.iter().enumerate() {
            // SAFETY: row r < MR of o, columns 0..NR (contract).
            unsafe { _mm512_storeu_ps(o.add(r * ldo + 16 * i), x) };
        }
    }
}

/// One key panel `W` keys wide (a multiple of 16): `panel[p·W + j] = k[j·ld + p]` for keys
/// `j < rows`, `p < dh`; keys `rows..W` zero. Transposes 16 × 16 blocks in registers.
///
/// `k` Shape: [rows, ld] (first `dh` of each row used); `panel` Shape: [dh, W].
///
/// # Safety
/// The CPU must have AVX-512 F; `rows ≤ W`; `k` must hold `(rows − 1)·ld + dh` values
/// and `panel` `dh·W`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_k_panel<const W: usize>(
    k: *const f32,
    ld: usize,
    rows: usize,
    dh: usize,
    panel: *mut f32,
) {
    debug_assert!(rows <= W);
    // SAFETY: the same contract, keys 0..rows ≤ W.
    unsafe { pack_k_keys::<W>(k, ld, rows, dh, panel, 0) };
    for p in 0..dh {
        // SAFETY: row p < dh of the panel, keys rows..W.
        unsafe { std::slice::from_raw_parts_mut(panel.add(p * W + rows), W - rows) }.fill(0.0);
    }
}

/// Keys `key0..key0 + keys` of one key panel `W` keys wide: `panel[p·W + key0 + j] =
/// k[j·ld + p]` for keys `j < keys`, `p < dh`. Masked stores write nothing else, so the
/// tasks of a GEMM can each put their rows' keys into panels they share.
///
/// `k` Shape: [keys, ld] (first `dh` of each row used); `panel` Shape: [dh, W] (rows
/// `0..dh` of it here: the caller may point it at a later row).
///
/// # Safety
/// The CPU must have AVX-512 F; `key0 + keys ≤ W`; `k` must hold `(keys − 1)·ld + dh`
/// values and `panel` `(dh − 1)·W + key0 + keys`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn pack_k_keys<const W: usize>(
    k: *const f32,
    ld: usize,
    keys: usize,
    dh: usize,
    panel: *mut f32,
    key0: usize,
) {
    debug_assert!(key0 + keys <= W);
    for g in 0..keys.div_ceil(16) {
        let n = (keys - 16 * g).min(16);
        // The next 16 keys' rows (ld apart, so no stream the hardware follows) come in
        // while these transpose.
        for i in 16 * (g + 1)..keys.min(16 * (g + 2)) {
            for p in (0..dh).step_by(16) {
                _mm_prefetch::<_MM_HINT_T0>(k.wrapping_add(i * ld + p) as *const i8);
            }
        }
        for p0 in (0..dh).step_by(16) {
            let cols = (dh - p0).min(16);
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, r) in r.iter_mut().enumerate().take(n) {
                // SAFETY: key 16g + i < keys, columns p0..p0 + cols ≤ dh: inside `k`.
                *r =
                    unsafe { _mm512_maskz_loadu_ps(low_mask(cols), k.add((16 * g + i) * ld + p0)) };
            }
            let w = transpose16(r);
            for (c, w) in w.iter().enumerate().take(cols) {
                // SAFETY: row p0 + c < dh of the panel, keys key0 + 16g.. (n of them, the
                // mask) ≤ key0 + keys ≤ W.
                unsafe {
                    let at = panel.add((p0 + c) * W + key0 + 16 * g);
                    _mm512_mask_storeu_ps(at, low_mask(n), *w)
                };
            }
        }
    }
}

/// Reads `src` (`rows` × `cols`, rows `ld` apart) in 16 × 16 blocks transposed in
/// registers and hands each piece of a column to `store(c, r0, mask, v)`: lanes `mask` of
/// `v` are column c's values in rows r0...
///
/// # Safety
/// The CPU must have AVX-512 F; `src` must hold `(rows − 1)·ld + cols` values (nothing
/// when either count is zero).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_bands(
    src: *const f32,
    ld: usize,
    rows: usize,
    cols: usize,
    mut store: impl FnMut(usize, usize, __mmask16, __m512),
) {
    for r0 in (0..rows).step_by(16) {
        let nr = (rows - r0).min(16);
        for c0 in (0..cols).step_by(16) {
            let nc = (cols - c0).min(16);
            let mut r = [_mm512_setzero_ps(); 16];
            for (i, r) in r.iter_mut().enumerate().take(nr) {
                // SAFETY: row r0 + i < rows, columns c0..c0 + nc ≤ cols: inside `src`.
                *r = unsafe { _mm512_maskz_loadu_ps(low_mask(nc), src.add((r0 + i) * ld + c0)) };
            }
            for (c, w) in transpose16(r).iter().enumerate().take(nc) {
                store(c0 + c, r0, low_mask(nr), *w);
            }
        }
    }
}

/// `dst[c·ldd + r] = f16(src[r·ld + c])` (nearest even) for `r < rows`, `c < cols`.
///
/// # Safety
/// The CPU must have AVX-512 F, BW and VL; `src` must hold `(rows − 1)·ld + cols` values
/// and `dst` `(cols − 1)·ldd + rows` (nothing when either count is zero).
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub(crate) unsafe fn transpose_to_f16(
    src: *const f32,
    ld: usize,
    rows: usize,
    cols: usize,
    dst: *mut u16,
    ldd: usize,
) {
    let store = |c: usize, r0: usize, m: __mmask16, w: __m512| {
        let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(w);
        // SAFETY: column c < cols, rows r0.. (masked to rows): inside `dst`.
        unsafe { _mm256_mask_storeu_epi16(dst.add(c * ldd + r0) as *mut i16, m, h) };
    };
    // SAFETY: the caller's contract covers `src`.
    unsafe { transpose_bands(src, ld, rows, cols, store) };
}

/// `dst[c·ldd + r] = src[r·ld + c]` for `r < rows`, `c < cols`.
///
/// # Safety
/// As [`transpose_to_f16`], with `dst` f32.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn transpose(
    src: *const f32,
    ld: usize,
    rows: usize,
    cols: usize,
    dst: *mut f32,
    ldd: usize,
) {
    let store = |c: usize, r0: usize, m: __mmask16, w: __m512| {
        // SAFETY: column c < cols, rows r0.. (masked to rows): inside `dst`.
        unsafe { _mm512_mask_storeu_ps(dst.add(c * ldd + r0), m, w) };
    };
    // SAFETY: the caller's contract covers `src`.
    unsafe { transpose_bands(src, ld, rows, cols, store) };
}

/// The 16 × 16 transpose: lane i of result c is lane c of `r[i]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Within each 128-bit lane l of u[4i + c]: lane 4l + c of rows 4i..4i + 4.
    let mut u = [_mm512_setzero_ps(); 16];
    for i in 0..4 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        u[4 * i] = _mm512_shuffle_ps::<0x44>(a, c);
        u[4 * i + 1] = _mm512_shuffle_ps::<0xee>(a, c);
        u[4 * i + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        u[4 * i + 3] = _mm512_shuffle_ps::<0xee>(b, d);
    }
    let mut v = [_mm512_setzero_ps(); 16];
    for h in 0..2 {
        for c in 0..4 {
            let (a, b) = (u[8 * h + c], u[8 * h + 4 + c]);
            v[8 * h + c] = _mm512_shuffle_f32x4::<0x88>(a, b);
            v[8 * h + 4 + c] = _mm512_shuffle_f32x4::<0xdd>(a, b);
        }
    }
    let mut w = [_mm512_setzero_ps(); 16];
    for c in 0..8 {
        w[c] = _mm512_shuffle_f32x4::<0x88>(v[c], v[8 + c]);
        w[8 + c] = _mm512_shuffle_f32x4::<0xdd>(v[c], v[8 + c]);
    }
    w
}

/// A mask of the low `n` of 16 lanes.
#[inline(always)]
fn low_mask(n: usize) -> __mmask16 {
    debug_assert!(n <= 16);
    ((1u32 << n) - 1) as __mmask16
}

/// Coefficients of the degree-6 polynomial for 2^f, f ∈ [−0.5, 0.5] (relative error
/// < 1e-7 evaluated in f32, about one rounding).
pub(crate) const EXP2_P: [f32; 7] = [
    1.0,
    std::f32::consts::LN_2,
    0.240_226_46,
    0.055_503_286,
    0.009_618_489,
    0.001_339_993_1,
    0.000_153_458_07,
];

/// 2^t lane by lane for the lanes in `keep` (finite t there), else 0: t = r + f with r
/// the nearest integer, a degree-6 polynomial in f, times 2^r (0 or subnormal below
/// 2^−126).
#[inline]
#[target_feature(enable = "avx512f")]
fn exp2(t: __m512, keep: __mmask16) -> __m512 {
    let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
    let f = _mm512_sub_ps(t, r);
    let mut p = _mm512_set1_ps(EXP2_P[6]);
    for c in EXP2_P[..6].iter().rev() {
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(*c));
    }
    _mm512_maskz_scalef_ps(keep, p, r)
}

/// One row of the online softmax over a key tile, scores in log2 units: with
/// m' = max(m, s_0..s_lim), `row[j] = 2^(s_j − m')` for j < lim and 0 for j ≥ lim.
/// `row_max`, when given, is max(s_0..s_lim) already (folded by the score tile), and the
/// row is not read for it.
/// Returns (m', Σ_j row[j], 2^(m − m')); a row with m' = −∞ (no score and no earlier max)
/// is all zeros and returns (−∞, 0, 1). Scores must be finite.
///
/// # Safety
/// The CPU must have AVX-512 F. Panics unless `lim ≤ row.len()`.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn softmax_row(
    row: &mut [f32],
    lim: usize,
    m: f32,
    row_max: Option<f32>,
) -> (f32, f32, f32) {
    assert!(lim <= row.len(), "softmax_row: lim past the row");
    let (n, px) = (row.len(), row.as_mut_ptr());
    let m_new = match row_max {
        Some(t) => t.max(m),
        None => {
            let mut mv = _mm512_set1_ps(m);
            let mut i = 0;
            while i < lim {
                let lanes = low_mask((lim - i).min(16));
                // SAFETY: the mask keeps the load inside row[i..lim].
                mv = unsafe {
                    _mm512_mask_max_ps(mv, lanes, mv, _mm512_maskz_loadu_ps(lanes, px.add(i)))
                };
                i += 16;
            }
            _mm512_reduce_max_ps(mv)
        }
    };
    if m_new == f32::NEG_INFINITY {
        row.fill(0.0);
        return (m_new, 0.0, 1.0);
    }
    let mv = _mm512_set1_ps(m_new);
    let mut sum = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let lanes = low_mask((n - i).min(16));
        let live = low_mask(lim.saturating_sub(i).min(16));
        // SAFETY: the masks keep the load and store inside row[i..n]; lanes past `lim`
        // are stored as zero.
        unsafe {
            let t = _mm512_sub_ps(_mm512_maskz_loadu_ps(live, px.add(i)), mv);
            let y = exp2(t, live);
            _mm512_mask_storeu_ps(px.add(i), lanes, y);
            sum = _mm512_add_ps(sum, y);
        }
        i += 16;
    }
    // No earlier max: nothing to rescale (and 2^−∞ would give NaN here).
    let corr = if m == f32::NEG_INFINITY {
        0.0
    } else {
        _mm512_cvtss_f32(exp2(_mm512_set1_ps(m - m_new), 1))
    };
    (m_new, _mm512_reduce_add_ps(sum), corr)
}

/// Prefetches into L2 the first `len` floats of `rows` rows `ld` apart from `base`: the
/// strided query and output rows of a block, whose cache misses would otherwise stall
/// the task. Nothing is dereferenced, so any address is fine.
pub(crate) fn prefetch_rows(base: *const f32, rows: usize, ld: usize, len: usize) {
    for r in 0..rows {
        for c in (0..len).step_by(16) {
            let p = base.wrapping_add(r * ld + c);
            // SAFETY: a prefetch is only a hint: it never faults and reads nothing back.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) };
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    fn avx512() -> bool {
        let ok = sotto_isa::Isa::Avx512.is_supported();
        if !ok {
            eprintln!("skipped: no AVX-512");
        }
        ok
    }

    #[test]
    fn pack_k_panel_transposes() {
        if !avx512() {
            return;
        }
        fn check<const W: usize>() {
            for rows in [1, 15, 16, 17, 32, W - 1, W] {
                for dh in [1, 5, 16, 40, 64] {
                    let ld = dh + 3;
                    let k = rand_vec((rows - 1) * ld + dh, 7);
                    let mut panel = vec![f32::NAN; dh * W];
                    // SAFETY: AVX-512 F runs; k and panel have the documented lengths.
                    unsafe { pack_k_panel::<W>(k.as_ptr(), ld, rows, dh, panel.as_mut_ptr()) };
                    for p in 0..dh {
                        for j in 0..W {
                            let want = if j < rows { k[j * ld + p] } else { 0.0 };
                            let got = panel[p * W + j];
                            assert_eq!(got, want, "W {W} rows {rows} dh {dh} p {p} j {j}");
                        }
                    }
                }
            }
        }
        check::<NR>();
        check::<64>();
    }

    #[test]
    fn int16_scores_are_the_exact_dots_of_each_key_s_levels() {
        if !(avx512() && std::arch::is_x86_feature_detected!("avx512vnni")) {
            eprintln!("skipped: no AVX-512 VNNI");
            return;
        }
        let (dh, w) = (64, NR);
        let qmax = crate::int8::wide_qmax(dh) as f32;
        let kp = dh / 2;
        // A key of zeros, one with an infinity and one far larger than the rest.
        let mut kf: Vec<f32> = rand_vec(dh * w, 11).iter().map(|x| x * 3.0).collect();
        for p in 0..dh {
            kf[p * w + 5] = 0.0;
            kf[p * w + 40] *= 1e6;
        }
        kf[7 * w + 9] = f32::INFINITY;
        let (mut kq, mut ks) = (vec![0u32; kp * w], vec![f32::NAN; w]);
        // SAFETY: AVX-512 F and BW run; the lengths are the documented ones.
        unsafe { quantize_k_panel::<NR>(kf.as_ptr(), dh, qmax, kq.as_mut_ptr(), ks.as_mut_ptr()) };
        let lane = |x: u32, hi: bool| (if hi { x >> 16 } else { x & 0xffff }) as u16 as i16 as i32;
        for j in 0..w {
            let key: Vec<f32> = (0..dh).map(|p| kf[p * w + j]).collect();
            let mut want = vec![0i32; dh];
            let scale = match key.iter().all(|v| v.is_finite()) {
                true => crate::int8::quantize_levels(&key, qmax, |i, v| want[i] = v),
                false => 0.0,
            };
            assert_eq!(ks[j], scale, "key {j}");
            for p in 0..dh {
                assert_eq!(
                    lane(kq[(p / 2) * w + j], p % 2 == 1),
                    want[p],
                    "key {j}, {p}"
                );
            }
        }
        // Queries: levels per row; the tile's sums against i64 dots of the same levels.
        let q: Vec<f32> = rand_vec(6 * dh, 12);
        let (mut qi, mut qs) = (vec![0u32; 6 * kp], [0f32; 6]);
        for r in 0..6 {
            // SAFETY: AVX2 runs where AVX-512 does; the row has dh values, its pairs kp.
            qs[r] = unsafe {
                crate::kernels::x86_int8::quantize_row_pairs(
                    &q[r * dh..][..dh],
                    qmax,
                    &mut qi[r * kp..][..kp],
                )
            };
        }
        let (mut s, mut mv) = (vec![f32::NAN; 6 * w], vec![f32::NEG_INFINITY; 6 * 16]);
        // SAFETY: AVX-512 F and VNNI run; the lengths are the documented ones.
        unsafe {
            scores_i16::<6, { NR / 16 }>(
                kp,
                qi.as_ptr(),
                (kq.as_ptr(), w),
                (qs.as_ptr(), ks.as_ptr()),
                s.as_mut_ptr(),
                w,
                Some((mv.as_mut_ptr(), 50)),
            )
        };
        for r in 0..6 {
            for j in 0..w {
                let dot: i64 = (0..dh)
                    .map(|p| {
                        let (a, b) = (qi[r * kp + p / 2], kq[(p / 2) * w + j]);
                        lane(a, p % 2 == 1) as i64 * lane(b, p % 2 == 1) as i64
                    })
                    .sum();
                let want = (dot as i32 as f32) * (ks[j] * qs[r]);
                assert_eq!(s[r * w + j], want, "row {r} key {j}");
            }
            let lanes_max = (0..16).map(|l| {
                (l..50)
                    .step_by(16)
                    .map(|j| s[r * w + j])
                    .fold(f32::NEG_INFINITY, f32::max)
            });
            for (l, m) in lanes_max.enumerate() {
                assert_eq!(mv[r * 16 + l], m, "row {r} lane {l}");
            }
        }
    }

    /// A softmax row kernel: `softmax_row`'s contract, on the caller's ISA.
    pub(crate) type SoftmaxRow = unsafe fn(&mut [f32], usize, f32, Option<f32>) -> (f32, f32, f32);

    /// Checks `softmax` against f64 exp2, with and without the row's max given. The caller
    /// has checked that its ISA runs.
    pub(crate) fn check_softmax_row(softmax: SoftmaxRow) {
        for (n, lim, m) in [
            (37, 37, f32::NEG_INFINITY),
            (64, 20, 3.0),
            (33, 0, 1.5),
            (16, 9, 40.0),
            (5, 3, f32::NEG_INFINITY),
        ] {
            let s: Vec<f32> = rand_vec(n, 3).iter().map(|x| x * 20.0).collect();
            let mut row = s.clone();
            // SAFETY: the caller checked the ISA.
            let (m_new, sum, corr) = unsafe { softmax(&mut row, lim, m, None) };
            let want_m = s[..lim].iter().copied().fold(m, f32::max);
            assert_eq!(m_new, want_m);
            // The same with the row's max given.
            let mut row2 = s.clone();
            let tile_max = s[..lim].iter().copied().fold(f32::NEG_INFINITY, f32::max);
            // SAFETY: as above.
            let got = unsafe { softmax(&mut row2, lim, m, Some(tile_max)) };
            assert_eq!((got, &row2), ((m_new, sum, corr), &row));
            if m_new == f32::NEG_INFINITY {
                assert!(row.iter().all(|&v| v == 0.0) && (sum, corr) == (0.0, 1.0));
                continue;
            }
            let mut want_sum = 0.0f64;
            for (j, (&got, &x)) in row.iter().zip(&s).enumerate() {
                let want = if j < lim {
                    ((x - want_m) as f64).exp2()
                } else {
                    0.0
                };
                want_sum += want;
                assert!(
                    (got as f64 - want).abs() <= 2e-7 * want,
                    "{n} {lim} {j}: {got} {want}"
                );
            }
            assert!(
                (sum as f64 - want_sum).abs() <= 1e-6 * want_sum,
                "{sum} {want_sum}"
            );
            let want_corr = if m == f32::NEG_INFINITY {
                0.0
            } else {
                ((m - want_m) as f64).exp2()
            };
            assert!(
                (corr as f64 - want_corr).abs() <= 2e-7 * want_corr,
                "{corr} {want_corr}"
            );
        }
        let mut empty = [0.0f32; 5];
        // SAFETY: as above.
        let got = unsafe { softmax(&mut empty, 0, f32::NEG_INFINITY, None) };
        assert_eq!(got, (f32::NEG_INFINITY, 0.0, 1.0));
    }

    #[test]
    fn softmax_row_matches_exp2() {
        if avx512() {
            check_softmax_row(softmax_row);
        }
    }
}
