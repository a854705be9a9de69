//! AVX2 f32 micro-kernels for the many-query attention of
//! [`crate::CpuBackend::attention`], the 8-lane counterparts of `x86_attn_f32`'s: an
//! `MR × NR` score tile (keys packed in panels of `NR`), one row of the online softmax
//! (2^(s − m) with the same degree-6 polynomial), and an `MR × NR` value tile. Both tiles
//! keep their `6 × 16` outputs in 12 of the 16 registers and take two loads, six
//! broadcasts and twelve fused multiply-adds per step.

use std::arch::x86_64::*;

use super::x86_attn_f32::EXP2_P;

/// Keys (score tile) or value columns (value tile) per panel: two 8-lane registers.
pub(crate) const NR: usize = 16;
const V: usize = NR / 8;

/// `s[r·lds + j] = Σ_{p < dh} q[r·dh + p] · k[p·NR + j]` for `r < M`, `j < NR` (a
/// multiply-add per p, in order).
///
/// With `row_max` = (`mv`, `cols`), also folds each row's scores at columns `< cols` into
/// that row's 8 running lane maxima, `mv[r·8..(r + 1)·8]`, while they are in registers.
///
/// `q` Shape: [M, dh]; `k` Shape: [dh, NR] (one key panel); `s` Shape: [M, lds]; `mv`
/// Shape: [M, 8].
///
/// # Safety
/// The CPU must have AVX2 and FMA; `q` must hold `M·dh` values, `k` `dh·NR`, and `s` rows
/// `0..M` must be writable at columns `0..NR`; `mv`, when given, `M·8` values.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn scores<const M: usize>(
    dh: usize,
    q: *const f32,
    k: *const f32,
    s: *mut f32,
    lds: usize,
    row_max: Option<(*mut f32, usize)>,
) {
    let mut c = [[_mm256_setzero_ps(); V]; M];
    for p in 0..dh {
        // SAFETY: p < dh, so k[p·NR..(p + 1)·NR] and q[r·dh + p] (r < M) are in bounds.
        unsafe {
            let b = [
                _mm256_loadu_ps(k.add(p * NR)),
                _mm256_loadu_ps(k.add(p * NR + 8)),
            ];
            for (r, row) in c.iter_mut().enumerate() {
                let a = _mm256_broadcast_ss(&*q.add(r * dh + p));
                for (x, &bx) in row.iter_mut().zip(&b) {
                    *x = _mm256_fmadd_ps(a, bx, *x);
                }
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            // SAFETY: row r < M of s, columns 0..NR (contract).
            unsafe { _mm256_storeu_ps(s.add(r * lds + 8 * v), x) };
        }
    }
    if let Some((mv, cols)) = row_max {
        // SAFETY: mv holds M·8 values (the caller's contract).
        unsafe { fold_row_max(&c, mv, cols) };
    }
}

/// Folds each row of a finished `M × NR` score tile, at columns `< cols`, into that row's 8
/// running lane maxima `mv[r·8..(r + 1)·8]`.
///
/// # Safety
/// The CPU must have AVX2; `mv` must hold `M·8` values.
#[target_feature(enable = "avx2")]
unsafe fn fold_row_max<const M: usize>(tile: &[[__m256; V]; M], mv: *mut f32, cols: usize) {
    let neg = _mm256_set1_ps(f32::NEG_INFINITY);
    for (r, row) in tile.iter().enumerate() {
        // SAFETY: mv holds M·8 values (contract).
        unsafe {
            let at = mv.add(8 * r);
            let mut mx = _mm256_loadu_ps(at);
            for (v, &x) in row.iter().enumerate() {
                let live = lanes_below(cols.saturating_sub(8 * v));
                mx = _mm256_max_ps(mx, _mm256_blendv_ps(neg, x, live));
            }
            _mm256_storeu_ps(at, mx);
        }
    }
}

/// `o[r·ldo + c] = o[r·ldo + c] · corr[r] + Σ_{j < kc} p[r·ldp + j] · v[j·NR + c]` for
/// `r < M`, `c < NR`; with `corr` None the old `o` is not read (taken as zero).
///
/// `p` Shape: [M, ldp]; `v` Shape: [kc, NR] (one value panel); `o` Shape: [M, ldo];
/// `corr` Shape: [M].
///
/// # Safety
/// The CPU must have AVX2 and FMA; `p` must hold `M` rows of `ldp ≥ kc` values, `v`
/// `kc·NR` values, `corr` (when given) `M`, and `o` rows `0..M` columns `0..NR` must be
/// valid for reads and writes.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn values<const M: usize>(
    kc: usize,
    p: *const f32,
    ldp: usize,
    v: *const f32,
    o: *mut f32,
    ldo: usize,
    corr: Option<*const f32>,
) {
    let mut c = [[_mm256_setzero_ps(); V]; M];
    if let Some(corr) = corr {
        for (r, row) in c.iter_mut().enumerate() {
            // SAFETY: corr[r] and o's row r, columns 0..NR, are in bounds (contract).
            unsafe {
                let f = _mm256_broadcast_ss(&*corr.add(r));
                for (i, x) in row.iter_mut().enumerate() {
                    *x = _mm256_mul_ps(_mm256_loadu_ps(o.add(r * ldo + 8 * i)), f);
                }
            }
        }
    }
    for j in 0..kc {
        // SAFETY: j < kc, so v[j·NR..(j + 1)·NR] and p[r·ldp + j] (r < M) are in bounds.
        unsafe {
            let b = [
                _mm256_loadu_ps(v.add(j * NR)),
                _mm256_loadu_ps(v.add(j * NR + 8)),
            ];
            for (r, row) in c.iter_mut().enumerate() {
                let a = _mm256_broadcast_ss(&*p.add(r * ldp + j));
                for (x, &bx) in row.iter_mut().zip(&b) {
                    *x = _mm256_fmadd_ps(a, bx, *x);
                }
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (i, &x) in row.iter().enumerate() {
            // SAFETY: row r < M of o, columns 0..NR (contract).
            unsafe { _mm256_storeu_ps(o.add(r * ldo + 8 * i), x) };
        }
    }
}

/// The exact i32 sums of an `M × NR` pair tile: `Σ_{t < steps} a[r·lda + t] ⊙ b[t·NR + j]`
/// for `r < M`, `j < NR`, each term a pair of i16 products (`vpmaddwd`) added into i32
/// lanes; the caller keeps the sums inside i32.
///
/// # Safety
/// The CPU must have AVX2; `a` must hold `M` rows of `lda ≥ steps` pairs and `b`
/// `steps·NR`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn pair_sums<const M: usize>(
    steps: usize,
    a: *const u32,
    lda: usize,
    b: *const u32,
) -> [[__m256i; V]; M] {
    let mut c = [[_mm256_setzero_si256(); V]; M];
    for t in 0..steps {
        // SAFETY: t < steps, so b[t·NR..(t + 1)·NR] and a[r·lda + t] (r < M) are in bounds.
        unsafe {
            let bv = [
                _mm256_loadu_si256(b.add(t * NR) as *const __m256i),
                _mm256_loadu_si256(b.add(t * NR + 8) as *const __m256i),
            ];
            for (r, row) in c.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(*a.add(r * lda + t) as i32);
                for (x, &bx) in row.iter_mut().zip(&bv) {
                    *x = _mm256_add_epi32(*x, _mm256_madd_epi16(bx, av));
                }
            }
        }
    }
    c
}

/// [`scores`] on 16-bit integers: `s[r·lds + j] = (Σ_{t < dh2} q[r·dh2 + t] ⊙ k[t·NR + j]) ·
/// q_scales[r] · k_scales[j]` for `r < M`, `j < NR`, each term a pair of i16 products
/// (`vpmaddwd`) added into i32 lanes: exact sums, which the caller keeps inside i32.
/// `row_max` as in [`scores`].
///
/// `q` Shape: [M, dh2] pairs; `k` Shape: [dh2, NR] pairs (one key panel); `s` Shape: [M,
/// lds]; `q_scales` Shape: [M]; `k_scales` Shape: [NR]; `mv` Shape: [M, 8].
///
/// # Safety
/// The CPU must have AVX2 and FMA; `q` must hold `M·dh2` pairs, `k` `dh2·NR`, `q_scales`
/// `M` values and `k_scales` `NR`; `s` rows `0..M` must be writable at columns `0..NR`;
/// `mv`, when given, `M·8` values.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_pairs<const M: usize>(
    dh2: usize,
    q: *const u32,
    k: *const u32,
    s: *mut f32,
    lds: usize,
    row_max: Option<(*mut f32, usize)>,
    q_scales: *const f32,
    k_scales: *const f32,
) {
    // SAFETY: q holds M rows of dh2 pairs and k dh2·NR (contract).
    let c = unsafe { pair_sums::<M>(dh2, q, dh2, k) };
    // SAFETY: k_scales holds NR values (contract).
    let ks = unsafe { [_mm256_loadu_ps(k_scales), _mm256_loadu_ps(k_scales.add(8))] };
    let mut out = [[_mm256_setzero_ps(); V]; M];
    for (r, (row, o)) in c.iter().zip(out.iter_mut()).enumerate() {
        // SAFETY: q_scales holds M values; row r < M of s, columns 0..NR (contract).
        unsafe {
            let qs = _mm256_broadcast_ss(&*q_scales.add(r));
            for (v, (&x, o)) in row.iter().zip(o.iter_mut()).enumerate() {
                *o = _mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_mul_ps(ks[v], qs));
                _mm256_storeu_ps(s.add(r * lds + 8 * v), *o);
            }
        }
    }
    if let Some((mv, cols)) = row_max {
        // SAFETY: mv holds M·8 values (the caller's contract).
        unsafe { fold_row_max(&out, mv, cols) };
    }
}

/// [`values`] on 16-bit integers: `o[r·ldo + c] = o[r·ldo + c] · corr[r] + (Σ_{t < kc2}
/// p[r·ldp + t] ⊙ v[t·NR + c]) · p_scales[r] · v_scales[c]` for `r < M`, `c < NR`, each
/// term a pair of i16 products along the keys (`vpmaddwd`) added into i32 lanes: exact
/// sums, which the caller keeps inside i32. With `corr` None the old `o` is not read.
///
/// `p` Shape: [M, ldp] pairs of i16 (probabilities); `v` Shape: [kc2, NR] pairs (one value
/// panel); `o` Shape: [M, ldo]; `corr`, `p_scales` Shape: [M]; `v_scales` Shape: [NR].
///
/// # Safety
/// The CPU must have AVX2 and FMA; `p` must hold `M` rows of `ldp ≥ kc2` pairs, `v`
/// `kc2·NR`, `corr` (when given) and `p_scales` `M` values, `v_scales` `NR`, and `o` rows
/// `0..M` columns `0..NR` must be valid for reads and writes.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn values_pairs<const M: usize>(
    kc2: usize,
    p: *const u32,
    ldp: usize,
    v: *const u32,
    o: *mut f32,
    ldo: usize,
    corr: Option<*const f32>,
    p_scales: *const f32,
    v_scales: *const f32,
) {
    // SAFETY: p holds M rows of ldp ≥ kc2 pairs and v kc2·NR (contract).
    let c = unsafe { pair_sums::<M>(kc2, p, ldp, v) };
    // SAFETY: v_scales holds NR values (contract).
    let vs = unsafe { [_mm256_loadu_ps(v_scales), _mm256_loadu_ps(v_scales.add(8))] };
    for (r, row) in c.iter().enumerate() {
        // SAFETY: p_scales, corr (when given) hold M values; o's row r, columns 0..NR, is
        // valid (contract).
        unsafe {
            let ps = _mm256_broadcast_ss(&*p_scales.add(r));
            for (i, &x) in row.iter().enumerate() {
                let at = o.add(r * ldo + 8 * i);
                let x = _mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_mul_ps(vs[i], ps));
                let x = match corr {
                    Some(cr) => {
                        _mm256_fmadd_ps(_mm256_loadu_ps(at), _mm256_broadcast_ss(&*cr.add(r)), x)
                    }
                    None => x,
                };
                _mm256_storeu_ps(at, x);
            }
        }
    }
}

/// One head's value columns `c0..c0 + NR` (`tk` rows, `ld` apart, from `v`) as a panel of
/// i16 pairs along the keys: `panel[t·NR + c] = q(v[2t·ld + c]) | q(v[(2t + 1)·ld + c]) << 16`
/// with `q(x) = round(x · inv[c])` (nearest even), the key past an odd `tk` zero. `inv`
/// must keep every |q| ≤ 32 767.
///
/// `v` Shape: [tk, ld] (first NR of each row used); `inv` Shape: [NR]; `panel` Shape:
/// [tk.div_ceil(2), NR].
///
/// # Safety
/// The CPU must have AVX2; `v` must hold `(tk − 1)·ld + NR` values, `inv` `NR` and
/// `panel` `tk.div_ceil(2)·NR`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn pack_v_pairs(
    v: *const f32,
    ld: usize,
    tk: usize,
    inv: *const f32,
    panel: *mut u32,
) {
    // SAFETY: inv holds NR values (contract).
    let s = unsafe { [_mm256_loadu_ps(inv), _mm256_loadu_ps(inv.add(8))] };
    let low = _mm256_set1_epi32(0xffff);
    for t in 0..tk.div_ceil(2) {
        for (i, &si) in s.iter().enumerate() {
            // SAFETY: rows 2t and 2t + 1 (when < tk) hold NR values from column 0, and the
            // panel row t has NR pairs (contract). Conversion rounds to nearest even.
            unsafe {
                let lo = _mm256_cvtps_epi32(_mm256_mul_ps(
                    _mm256_loadu_ps(v.add(2 * t * ld + 8 * i)),
                    si,
                ));
                let hi = if 2 * t + 1 < tk {
                    let x = _mm256_loadu_ps(v.add((2 * t + 1) * ld + 8 * i));
                    _mm256_slli_epi32::<16>(_mm256_cvtps_epi32(_mm256_mul_ps(x, si)))
                } else {
                    _mm256_setzero_si256()
                };
                let pair = _mm256_or_si256(_mm256_and_si256(lo, low), hi);
                _mm256_storeu_si256(panel.add(t * NR + 8 * i) as *mut __m256i, pair);
            }
        }
    }
}

/// One key panel: `panel[p·NR + j] = k[j·ld + p]` for keys `j < rows`, `p < dh`; keys
/// `rows..NR` zero. Transposes 8 × 8 blocks in registers.
///
/// `k` Shape: [rows, ld] (first `dh` of each row used); `panel` Shape: [dh, NR].
///
/// # Safety
/// The CPU must have AVX2; `rows ≤ NR`; `k` must hold `(rows − 1)·ld + dh` values and
/// `panel` `dh·NR`.
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn pack_k_panel(
    k: *const f32,
    ld: usize,
    rows: usize,
    dh: usize,
    panel: *mut f32,
) {
    debug_assert!(rows <= NR);
    for g in 0..V {
        let keys = rows.saturating_sub(8 * g).min(8);
        for p0 in (0..dh).step_by(8) {
            let cols = (dh - p0).min(8);
            let mut r = [_mm256_setzero_ps(); 8];
            for (i, r) in r.iter_mut().enumerate().take(keys) {
                let src = k.wrapping_add((8 * g + i) * ld + p0);
                *r = if cols == 8 {
                    // SAFETY: key 8g + i < rows, columns p0..p0 + 8 ≤ dh: inside `k`.
                    unsafe { _mm256_loadu_ps(src) }
                } else {
                    let mut buf = [0f32; 8];
                    // SAFETY: as above, `cols` values.
                    unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), cols) };
                    // SAFETY: 8 values of `buf`.
                    unsafe { _mm256_loadu_ps(buf.as_ptr()) }
                };
            }
            for (c, w) in transpose8(r).iter().enumerate().take(cols) {
                // SAFETY: row p0 + c < dh of the panel, keys 8g..8g + 8 ≤ NR.
                unsafe { _mm256_storeu_ps(panel.add((p0 + c) * NR + 8 * g), *w) };
            }
        }
    }
}

/// The 8 × 8 transpose: lane i of result c is lane c of `r[i]`.
#[inline]
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // Within each 128-bit half h of u[4i + c]: lane 4h + c of rows 4i..4i + 4.
    let mut u = [_mm256_setzero_ps(); 8];
    for i in 0..2 {
        let (a, b, c, d) = (t[4 * i], t[4 * i + 1], t[4 * i + 2], t[4 * i + 3]);
        u[4 * i] = _mm256_shuffle_ps::<0x44>(a, c);
        u[4 * i + 1] = _mm256_shuffle_ps::<0xee>(a, c);
        u[4 * i + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        u[4 * i + 3] = _mm256_shuffle_ps::<0xee>(b, d);
    }
    let mut w = [_mm256_setzero_ps(); 8];
    for c in 0..4 {
        w[c] = _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c]);
        w[4 + c] = _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c]);
    }
    w
}

/// The constants of [`exp2`], set once outside a loop: its body then takes no broadcasts.
#[derive(Clone, Copy)]
struct Exp2 {
    /// [`EXP2_P`], highest degree last.
    p: [__m256; 7],
    floor: __m256,
    bias: __m256i,
}

impl Exp2 {
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new() -> Self {
        Self {
            p: EXP2_P.map(|c| _mm256_set1_ps(c)),
            floor: _mm256_set1_ps(-127.0),
            bias: _mm256_set1_epi32(127),
        }
    }

    /// 2^t lane by lane (t ≤ 0 or small): t = r + f with r the nearest integer, the
    /// degree-6 polynomial in f, times 2^r built in the exponent bits. Below 2^−126 it
    /// gives 0.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp2(&self, t: __m256) -> __m256 {
        let t = _mm256_max_ps(t, self.floor);
        let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(t);
        let f = _mm256_sub_ps(t, r);
        let mut p = self.p[6];
        for &c in self.p[..6].iter().rev() {
            p = _mm256_fmadd_ps(p, f, c);
        }
        // r = −127 makes a zero exponent field: 2^r reads as 0.
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(r), self.bias));
        _mm256_mul_ps(p, _mm256_castsi256_ps(e))
    }
}

/// [`Exp2::exp2`] with the constants set here (for single uses outside a loop).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp2(t: __m256) -> __m256 {
    Exp2::new().exp2(t)
}

/// Lanes `j` with `j < n` all ones, as a float mask.
#[inline]
#[target_feature(enable = "avx2")]
fn lanes_below(n: usize) -> __m256 {
    let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let n = _mm256_set1_epi32(n.min(8) as i32);
    _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, idx))
}

/// Eight values of `x` from `i` (zeros past its end).
///
/// # Safety
/// The CPU must have AVX; `i < x.len()`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load8(x: &[f32], i: usize) -> __m256 {
    if i + 8 <= x.len() {
        // SAFETY: x[i..i + 8] is in bounds.
        unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) }
    } else {
        let mut buf = [0f32; 8];
        buf[..x.len() - i].copy_from_slice(&x[i..]);
        // SAFETY: 8 values of `buf`.
        unsafe { _mm256_loadu_ps(buf.as_ptr()) }
    }
}

/// As `x86_attn_f32::softmax_row` (the same contract and results within the polynomial's
/// rounding; values below 2^−126 flush to 0).
///
/// # Safety
/// The CPU must have AVX2 and FMA. Panics unless `lim ≤ row.len()`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax_row(
    row: &mut [f32],
    lim: usize,
    m: f32,
    row_max: Option<f32>,
) -> (f32, f32, f32) {
    assert!(lim <= row.len(), "softmax_row: lim past the row");
    let n = row.len();
    let m_new = match row_max {
        Some(t) => t.max(m),
        None => {
            let mut mv = _mm256_set1_ps(m);
            let whole = lim / 8 * 8;
            for i in (0..whole).step_by(8) {
                // SAFETY: i + 8 ≤ whole ≤ lim ≤ n.
                mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(row.as_ptr().add(i)) });
            }
            if whole < lim {
                // SAFETY: whole < lim ≤ n.
                let x = unsafe { load8(row, whole) };
                let neg = _mm256_set1_ps(f32::NEG_INFINITY);
                mv = _mm256_max_ps(mv, _mm256_blendv_ps(neg, x, lanes_below(lim - whole)));
            }
            hmax(mv)
        }
    };
    if m_new == f32::NEG_INFINITY {
        row.fill(0.0);
        return (m_new, 0.0, 1.0);
    }
    let (mv, k) = (_mm256_set1_ps(m_new), Exp2::new());
    let mut sum = _mm256_setzero_ps();
    // Whole vectors of live keys without masks, then the rest (the same operations on
    // the same values, in the same order).
    let whole = lim / 8 * 8;
    let at = row.as_mut_ptr();
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 ≤ whole ≤ lim ≤ n.
        unsafe {
            let y = k.exp2(_mm256_sub_ps(_mm256_loadu_ps(at.add(i)), mv));
            sum = _mm256_add_ps(sum, y);
            _mm256_storeu_ps(at.add(i), y);
        }
    }
    for i in (whole..n).step_by(8) {
        // SAFETY: i < n.
        let x = unsafe { load8(row, i) };
        let live = lanes_below(lim.saturating_sub(i));
        let y = _mm256_and_ps(k.exp2(_mm256_sub_ps(x, mv)), live);
        sum = _mm256_add_ps(sum, y);
        if i + 8 <= n {
            // SAFETY: row[i..i + 8] is in bounds.
            unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(i), y) };
        } else {
            let mut buf = [0f32; 8];
            // SAFETY: 8 values of `buf`.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), y) };
            row[i..].copy_from_slice(&buf[..n - i]);
        }
    }
    // No earlier max: nothing to rescale (and 2^−∞ would give NaN here).
    let corr = if m == f32::NEG_INFINITY {
        0.0
    } else {
        _mm256_cvtss_f32(exp2(_mm256_set1_ps(m - m_new)))
    };
    (m_new, hsum(sum), corr)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hmax(v: __m256) -> f32 {
    let h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_max_ss(h, _mm_shuffle_ps::<1>(h, h));
    _mm_cvtss_f32(h)
}

#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256) -> f32 {
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
    _mm_cvtss_f32(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    fn avx2() -> bool {
        let ok = sotto_isa::Isa::Avx2.is_supported();
        if !ok {
            eprintln!("skipped: no AVX2");
        }
        ok
    }

    #[test]
    fn pack_k_panel_transposes() {
        if !avx2() {
            return;
        }
        for rows in [1, 7, 8, 9, 15, 16] {
            for dh in [1, 5, 8, 13, 64] {
                let ld = dh + 3;
                let k = rand_vec((rows - 1) * ld + dh, 7);
                let mut panel = vec![f32::NAN; dh * NR];
                // SAFETY: AVX2 runs; k and panel have the documented lengths.
                unsafe { pack_k_panel(k.as_ptr(), ld, rows, dh, panel.as_mut_ptr()) };
                for p in 0..dh {
                    for j in 0..NR {
                        let want = if j < rows { k[j * ld + p] } else { 0.0 };
                        assert_eq!(panel[p * NR + j], want, "rows {rows} dh {dh} p {p} j {j}");
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_match_sums_in_order() {
        if !avx2() {
            return;
        }
        let (dh, kc, ld) = (37, 29, 40);
        let q = rand_vec(6 * dh, 1);
        let k = rand_vec(dh * NR, 2);
        let mut s = vec![f32::NAN; 6 * ld];
        // SAFETY: AVX2 and FMA run; the buffers have the documented lengths.
        unsafe { scores::<6>(dh, q.as_ptr(), k.as_ptr(), s.as_mut_ptr(), ld, None) };
        for r in 0..6 {
            for j in 0..NR {
                let want = (0..dh).fold(0f32, |a, p| q[r * dh + p].mul_add(k[p * NR + j], a));
                assert_eq!(s[r * ld + j], want, "scores {r} {j}");
            }
        }
        // The folded lane maxima: columns below `cols` only, onto the earlier maxima.
        for cols in [0, 5, 8, 11, 16] {
            let mut mv = vec![f32::NEG_INFINITY; 6 * 8];
            mv[3] = 1e9;
            let mut s2 = vec![f32::NAN; 6 * ld];
            let rm = Some((mv.as_mut_ptr(), cols));
            // SAFETY: as above; mv holds 6·8 values.
            unsafe { scores::<6>(dh, q.as_ptr(), k.as_ptr(), s2.as_mut_ptr(), ld, rm) };
            for r in 0..6 {
                assert_eq!(s2[r * ld..r * ld + NR], s[r * ld..r * ld + NR]);
            }
            for r in 0..6 {
                let lanes = &mv[8 * r..8 * r + 8];
                let got = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let want = s[r * ld..r * ld + cols]
                    .iter()
                    .copied()
                    .fold(if r == 0 { 1e9 } else { f32::NEG_INFINITY }, f32::max);
                assert_eq!(got, want, "cols {cols} row {r}");
            }
        }
        let p = rand_vec(6 * ld, 3);
        let v = rand_vec(kc * NR, 4);
        let corr = rand_vec(6, 5);
        let o0 = rand_vec(6 * ld, 6);
        for with_corr in [false, true] {
            let mut o = o0.clone();
            let c = with_corr.then_some(corr.as_ptr());
            // SAFETY: as above.
            unsafe { values::<6>(kc, p.as_ptr(), ld, v.as_ptr(), o.as_mut_ptr(), ld, c) };
            for r in 0..6 {
                for j in 0..NR {
                    let start = if with_corr {
                        o0[r * ld + j] * corr[r]
                    } else {
                        0.0
                    };
                    let want = (0..kc).fold(start, |a, i| p[r * ld + i].mul_add(v[i * NR + j], a));
                    assert_eq!(o[r * ld + j], want, "values {with_corr} {r} {j}");
                }
            }
        }
    }

    #[test]
    fn softmax_row_matches_exp2() {
        if !avx2() {
            return;
        }
        crate::kernels::x86_attn_f32::tests::check_softmax_row(softmax_row);
        // Far below the max: 0, not NaN or garbage.
        let mut row = [0.0f32, -300.0, -126.5, -10.0];
        // SAFETY: AVX2 and FMA run.
        let (_, _, _) = unsafe { softmax_row(&mut row, 4, f32::NEG_INFINITY, None) };
        assert_eq!(row[1], 0.0);
        assert!(row[2] >= 0.0 && row[2] < 1e-37 && (row[3] - 2f32.powi(-10)).abs() < 1e-9);
    }
}
