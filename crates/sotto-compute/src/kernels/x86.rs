//! x86-64 kernels: AVX2+FMA+F16C (8 lanes) and AVX-512 F/BW/VL (16 lanes, masked tails).
//!
//! Every function here is `unsafe` because it must only run on a CPU with its features;
//! `kernels::checked` guarantees that before any call.

use super::approx::*;

/// How many R-row weight blocks ahead the small-M kernels prefetch.
const PF_BLOCKS: usize = 2;

macro_rules! small_mm {
    ($feat:literal, $name:ident, $T:ty, $lanes:expr, $zero:ident, $fma:ident, $ldx:ident, $ldw:ident, $tail:ident) => {
        /// `out_t[r·M + i] = x_i · w_r`, R weight rows at a time sharing each x load.
        #[target_feature(enable = $feat)]
        unsafe fn $name<const M: usize, const R: usize>(
            x: &[f32],
            k: usize,
            w: &[$T],
            out_t: &mut [f32],
        ) {
            let rows = w.len() / k;
            let full = rows / R * R;
            let kv = k / $lanes * $lanes;
            let (xp, wp) = (x.as_ptr(), w.as_ptr());
            let mut r = 0;
            while r < full {
                // SAFETY: rows r..r+R and columns p..p+lanes ≤ kv ≤ k lie inside w; x is [M, k].
                unsafe {
                    let mut acc = [[$zero(); M]; R];
                    let mut p = 0;
                    while p < kv {
                        let mut wv = [$zero(); R];
                        for (j, v) in wv.iter_mut().enumerate() {
                            *v = $ldw(wp.add((r + j) * k + p));
                            // Weights stream from DRAM once per token: prefetch the same
                            // spot PF_BLOCKS row blocks ahead (a hint; never faults).
                            let ahead = wp.wrapping_add((r + PF_BLOCKS * R + j) * k + p);
                            _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                        }
                        for i in 0..M {
                            let xv = $ldx(xp.add(i * k + p));
                            for j in 0..R {
                                acc[j][i] = $fma(wv[j], xv, acc[j][i]);
                            }
                        }
                        p += $lanes;
                    }
                    for j in 0..R {
                        for i in 0..M {
                            let o = $tail(&acc[j][i], xp.add(i * k), wp.add((r + j) * k), kv, k);
                            out_t[(r + j) * M + i] = o;
                        }
                    }
                }
                r += R;
            }
            if full < rows {
                // SAFETY: same features; the remaining rows form a whole [rows − full, k] block.
                unsafe { $name::<M, 1>(x, k, &w[full * k..], &mut out_t[full * M..]) };
            }
        }
    };
}

macro_rules! small_mm_dispatch {
    ($f32name:ident, $f16name:ident, $r5:expr, $r8:expr) => {
        pub(crate) unsafe fn matmul_t(
            x: &[f32],
            m: usize,
            k: usize,
            w: super::super::WRows<'_>,
            out_t: &mut [f32],
        ) {
            use super::super::WRows;
            macro_rules! go {
                ($M:literal, $R:expr) => {
                    match w {
                        // SAFETY: the caller checked the CPU features (see module docs).
                        WRows::F32(w) => unsafe { $f32name::<$M, { $R }>(x, k, w, out_t) },
                        // SAFETY: as above.
                        WRows::F16(w) => unsafe { $f16name::<$M, { $R }>(x, k, w, out_t) },
                    }
                };
            }
            match m {
                1 => go!(1, 4),
                2 => go!(2, 4),
                3 => go!(3, $r5),
                4 => go!(4, $r5),
                5 => go!(5, $r5),
                6 => go!(6, $r8),
                7 => go!(7, $r8),
                _ => go!(8, $r8),
            }
        }
    };
}

pub(super) mod avx512 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn ldx(p: *const f32) -> __m512 {
        // SAFETY: the caller passes 16 readable f32.
        unsafe { _mm512_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    unsafe fn ldh(p: *const f16) -> __m512 {
        // SAFETY: the caller passes 16 readable f16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn tail_f32(acc: &__m512, x: *const f32, w: *const f32, kv: usize, k: usize) -> f32 {
        let mut a = *acc;
        if kv < k {
            let m = ((1u32 << (k - kv)) - 1) as __mmask16;
            // SAFETY: masked lanes are not read; lanes kv..k exist in both rows.
            unsafe {
                let xv = _mm512_maskz_loadu_ps(m, x.add(kv));
                let wv = _mm512_maskz_loadu_ps(m, w.add(kv));
                a = _mm512_fmadd_ps(wv, xv, a);
            }
        }
        _mm512_reduce_add_ps(a)
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    unsafe fn tail_f16(acc: &__m512, x: *const f32, w: *const f16, kv: usize, k: usize) -> f32 {
        let mut a = *acc;
        if kv < k {
            let m = ((1u32 << (k - kv)) - 1) as __mmask16;
            // SAFETY: masked lanes are not read; lanes kv..k exist in both rows.
            unsafe {
                let xv = _mm512_maskz_loadu_ps(m, x.add(kv));
                let wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w.add(kv) as *const i16));
                a = _mm512_fmadd_ps(wv, xv, a);
            }
        }
        _mm512_reduce_add_ps(a)
    }

    small_mm!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
        mm_f32,
        f32,
        16,
        _mm512_setzero_ps,
        _mm512_fmadd_ps,
        ldx,
        ldx,
        tail_f32
    );
    small_mm!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
        mm_f16,
        f16,
        16,
        _mm512_setzero_ps,
        _mm512_fmadd_ps,
        ldx,
        ldh,
        tail_f16
    );
    small_mm_dispatch!(mm_f32, mm_f16, 4, 2);

    #[inline]
    fn tail_mask(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        let mut i = 0;
        // SAFETY: every load covers i..i+16 ≤ n (or is masked to n) in both slices.
        unsafe {
            while i + 32 <= n {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                s1 = _mm512_fmadd_ps(
                    _mm512_loadu_ps(pa.add(i + 16)),
                    _mm512_loadu_ps(pb.add(i + 16)),
                    s1,
                );
                i += 32;
            }
            while i < n {
                let m = tail_mask((n - i).min(16));
                let (x, y) = (
                    _mm512_maskz_loadu_ps(m, pa.add(i)),
                    _mm512_maskz_loadu_ps(m, pb.add(i)),
                );
                s0 = _mm512_fmadd_ps(x, y, s0);
                i += 16;
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    pub(crate) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
        let n = src.len();
        let mut i = 0;
        // SAFETY: each step reads and writes i..i+16 ≤ n, or masks the tail to n.
        unsafe {
            while i < n {
                let m = tail_mask((n - i).min(16));
                let h = _mm256_maskz_loadu_epi16(m, src.as_ptr().add(i) as *const i16);
                _mm512_mask_storeu_ps(dst.as_mut_ptr().add(i), m, _mm512_cvtph_ps(h));
                i += 16;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    pub(crate) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
        let n = src.len();
        let mut i = 0;
        // SAFETY: each step reads and writes i..i+16 ≤ n, or masks the tail to n.
        unsafe {
            while i < n {
                let m = tail_mask((n - i).min(16));
                let v = _mm512_maskz_loadu_ps(m, src.as_ptr().add(i));
                // Round to nearest even, as `f16::from_f32`.
                let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
                _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i) as *mut i16, m, h);
                i += 16;
            }
        }
    }

    /// Applies `f` to 16-lane chunks of `x` in place (tail masked; masked lanes stay put).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn map(x: &mut [f32], mut f: impl FnMut(__m512) -> __m512) {
        let n = x.len();
        let p = x.as_mut_ptr();
        let mut i = 0;
        // SAFETY: loads and stores cover i..i+16 ≤ n or are masked to n.
        unsafe {
            // Whole vectors unmasked: a masked store every step ran GELU at a third of
            // its speed on Zen 5.
            while i + 16 <= n {
                _mm512_storeu_ps(p.add(i), f(_mm512_loadu_ps(p.add(i))));
                i += 16;
            }
            if i < n {
                let m = tail_mask(n - i);
                let v = _mm512_maskz_loadu_ps(m, p.add(i));
                _mm512_mask_storeu_ps(p.add(i), m, f(v));
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn exp(x: __m512) -> __m512 {
        let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
        let x = _mm512_min_ps(x, _mm512_set1_ps(EXP_HI));
        let x = _mm512_max_ps(x, _mm512_set1_ps(EXP_LO));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
        let mut p = _mm512_set1_ps(EXP_P[0]);
        for c in &EXP_P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
        }
        let y = _mm512_fmadd_ps(
            p,
            _mm512_mul_ps(r, r),
            _mm512_add_ps(r, _mm512_set1_ps(1.0)),
        );
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
            _mm512_cvtps_epi32(n),
            _mm512_set1_epi32(127),
        ));
        let y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
        _mm512_mask_mov_ps(y, under, _mm512_setzero_ps())
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn max(x: &[f32]) -> f32 {
        let n = x.len();
        let mut acc = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        // SAFETY: masked loads stay inside x.
        unsafe {
            while i < n {
                let m = tail_mask((n - i).min(16));
                acc = _mm512_mask_max_ps(acc, m, acc, _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)));
                i += 16;
            }
        }
        _mm512_reduce_max_ps(acc)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
        let mv = _mm512_set1_ps(m);
        let mut sum = _mm512_setzero_ps();
        // SAFETY: `map` is entered with the same features; masked lanes of the tail hold 0
        // and give exp(0 − m), so the sum counts only stored lanes (see below).
        unsafe {
            let n = x.len();
            let p = x.as_mut_ptr();
            let mut i = 0;
            while i < n {
                let k = tail_mask((n - i).min(16));
                let v = exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p.add(i)), mv));
                _mm512_mask_storeu_ps(p.add(i), k, v);
                sum = _mm512_mask_add_ps(sum, k, sum, v);
                i += 16;
            }
        }
        _mm512_reduce_add_ps(sum)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn scale(x: &mut [f32], s: f32) {
        let sv = _mm512_set1_ps(s);
        // SAFETY: same features as this function.
        unsafe { map(x, |v| _mm512_mul_ps(v, sv)) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
        let (n, av) = (x.len(), _mm512_set1_ps(a));
        let mut i = 0;
        // SAFETY: x and y have length n (checked by the caller); masked to n.
        unsafe {
            while i < n {
                let m = tail_mask((n - i).min(16));
                let py = y.as_mut_ptr().add(i);
                let v = _mm512_fmadd_ps(
                    av,
                    _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)),
                    _mm512_maskz_loadu_ps(m, py),
                );
                _mm512_mask_storeu_ps(py, m, v);
                i += 16;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn add(a: &mut [f32], b: &[f32]) {
        let n = a.len();
        let mut i = 0;
        // SAFETY: a and b have the same length (checked by the caller); masked to n.
        unsafe {
            while i < n {
                let m = tail_mask((n - i).min(16));
                let pa = a.as_mut_ptr().add(i);
                let v = _mm512_add_ps(
                    _mm512_maskz_loadu_ps(m, pa),
                    _mm512_maskz_loadu_ps(m, b.as_ptr().add(i)),
                );
                _mm512_mask_storeu_ps(pa, m, v);
                i += 16;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn gelu(x: &mut [f32]) {
        let half = _mm512_set1_ps(0.5);
        let one = _mm512_set1_ps(1.0);
        let f = |v: __m512| {
            // 0.5·v·(1 + erf(v/√2)); the quotient by one reciprocal step (relative error
            // ~2⁻²⁸) instead of a division, which is several times slower here.
            let z = _mm512_mul_ps(v, _mm512_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
            let z = _mm512_min_ps(
                _mm512_max_ps(z, _mm512_set1_ps(-ERF_CLAMP)),
                _mm512_set1_ps(ERF_CLAMP),
            );
            let u = _mm512_mul_ps(z, z);
            let (mut p, mut q) = (_mm512_set1_ps(ERF_NUM[5]), _mm512_set1_ps(ERF_DEN[5]));
            for (a, b) in ERF_NUM[..5].iter().zip(&ERF_DEN[..5]).rev() {
                p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(*a));
                q = _mm512_fmadd_ps(q, u, _mm512_set1_ps(*b));
            }
            let r = _mm512_rcp14_ps(q);
            let r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(q, r, one), r);
            let erf = _mm512_mul_ps(_mm512_mul_ps(z, p), r);
            let h = _mm512_mul_ps(half, v);
            _mm512_fmadd_ps(h, erf, h)
        };
        // SAFETY: same features as this function.
        unsafe { map(x, f) }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn layer_norm(
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
        out: &mut [f32],
    ) {
        let n = x.len();
        let px = x.as_ptr();
        // SAFETY: all slices have length n (checked by the caller); loads are masked to n.
        unsafe {
            let mut s = _mm512_setzero_ps();
            let mut i = 0;
            while i < n {
                s = _mm512_add_ps(
                    s,
                    _mm512_maskz_loadu_ps(tail_mask((n - i).min(16)), px.add(i)),
                );
                i += 16;
            }
            let mean = _mm512_reduce_add_ps(s) / n as f32;
            let mv = _mm512_set1_ps(mean);
            let mut s = _mm512_setzero_ps();
            i = 0;
            while i < n {
                let m = tail_mask((n - i).min(16));
                let d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, px.add(i)), mv);
                s = _mm512_fmadd_ps(d, d, s);
                i += 16;
            }
            let inv = _mm512_set1_ps(1.0 / (_mm512_reduce_add_ps(s) / n as f32 + eps).sqrt());
            i = 0;
            while i < n {
                let m = tail_mask((n - i).min(16));
                let d = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, px.add(i)), mv);
                let g = _mm512_maskz_loadu_ps(m, gamma.as_ptr().add(i));
                let b = _mm512_maskz_loadu_ps(m, beta.as_ptr().add(i));
                let o = _mm512_fmadd_ps(_mm512_mul_ps(d, inv), g, b);
                _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, o);
                i += 16;
            }
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn dot_rows(q: &[f32], k: &[f32], ld: usize, s: f32, out: &mut [f32]) {
        let n = q.len();
        for (j, o) in out.iter_mut().enumerate() {
            // SAFETY: same features as this function; the caller checked k's length.
            *o = s * unsafe { dot(q, &k[j * ld..j * ld + n]) };
        }
    }

    /// Columns of `out` per pass of [`axpy_rows`]: four registers of sums.
    const AXPY_COLS: usize = 64;

    /// `out += Σ_j p[j] · v[j·ld..]`, 64 columns at a time with the sums in registers across
    /// every j (a load and store of `out` per row kept each sum waiting on the store), each
    /// column's fused multiply-adds in order of j as before: the same bits.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn axpy_rows(p: &[f32], v: &[f32], ld: usize, out: &mut [f32]) {
        let n = out.len();
        let (vp, op) = (v.as_ptr(), out.as_mut_ptr());
        for c in (0..n).step_by(AXPY_COLS) {
            let m: [__mmask16; 4] =
                std::array::from_fn(|t| tail_mask((n - c).saturating_sub(16 * t).min(16)));
            // Offsets of the four registers' columns, kept inside the row (an all-off
            // mask reads and writes nothing).
            let at: [usize; 4] = std::array::from_fn(|t| c + (16 * t).min(n - c));
            // SAFETY: `out` holds n values, the masks keep every access below n.
            let mut acc: [__m512; 4] =
                std::array::from_fn(|t| unsafe { _mm512_maskz_loadu_ps(m[t], op.add(at[t])) });
            for (j, &pj) in p.iter().enumerate() {
                let a = _mm512_set1_ps(pj);
                for t in 0..4 {
                    // SAFETY: the caller checked v holds (p.len() − 1)·ld + n values;
                    // row j's columns at[t].. are masked below n.
                    let x = unsafe { _mm512_maskz_loadu_ps(m[t], vp.add(j * ld + at[t])) };
                    acc[t] = _mm512_fmadd_ps(a, x, acc[t]);
                }
            }
            for t in 0..4 {
                // SAFETY: as the loads of `out` above.
                unsafe { _mm512_mask_storeu_ps(op.add(at[t]), m[t], acc[t]) };
            }
        }
    }
}

pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn ldx(p: *const f32) -> __m256 {
        // SAFETY: the caller passes 8 readable f32.
        unsafe { _mm256_loadu_ps(p) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn ldh(p: *const f16) -> __m256 {
        // SAFETY: the caller passes 8 readable f16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tail_f32(acc: &__m256, x: *const f32, w: *const f32, kv: usize, k: usize) -> f32 {
        let mut s = hsum(*acc);
        for p in kv..k {
            // SAFETY: p < k, inside both rows.
            s += unsafe { *x.add(p) * *w.add(p) };
        }
        s
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tail_f16(acc: &__m256, x: *const f32, w: *const f16, kv: usize, k: usize) -> f32 {
        let mut s = hsum(*acc);
        for p in kv..k {
            // SAFETY: p < k, inside both rows.
            s += unsafe { *x.add(p) * (*w.add(p)).to_f32() };
        }
        s
    }

    small_mm!(
        "avx2,fma,f16c",
        mm_f32,
        f32,
        8,
        _mm256_setzero_ps,
        _mm256_fmadd_ps,
        ldx,
        ldx,
        tail_f32
    );
    small_mm!(
        "avx2,fma,f16c",
        mm_f16,
        f16,
        8,
        _mm256_setzero_ps,
        _mm256_fmadd_ps,
        ldx,
        ldh,
        tail_f16
    );
    small_mm_dispatch!(mm_f32, mm_f16, 2, 1);

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len();
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        // SAFETY: every load covers i..i+8 ≤ n in both slices.
        unsafe {
            while i + 16 <= n {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                s1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8)),
                    _mm256_loadu_ps(pb.add(i + 8)),
                    s1,
                );
                i += 16;
            }
            if i + 8 <= n {
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                i += 8;
            }
        }
        let mut s = hsum(_mm256_add_ps(s0, s1));
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
        let n = src.len();
        let mut i = 0;
        // SAFETY: each step reads and writes i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(
                    src.as_ptr().add(i),
                ));
                _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
                i += 8;
            }
        }
        super::super::scalar::f32_to_f16(&src[i..], &mut dst[i..]);
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
        let n = src.len();
        let mut i = 0;
        // SAFETY: each step reads and writes i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), ldh(src.as_ptr().add(i)));
                i += 8;
            }
        }
        super::super::scalar::f16_to_f32(&src[i..], &mut dst[i..]);
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn exp(x: __m256) -> __m256 {
        let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
        let x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
        let x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
        let mut p = _mm256_set1_ps(EXP_P[0]);
        for c in &EXP_P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
        }
        let y = _mm256_fmadd_ps(
            p,
            _mm256_mul_ps(r, r),
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        _mm256_andnot_ps(under, y)
    }

    /// Applies `f` to 8-lane chunks of `x` in place; the tail goes through a padded buffer.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn map(x: &mut [f32], mut f: impl FnMut(__m256) -> __m256) {
        let n = x.len();
        let p = x.as_mut_ptr();
        let mut i = 0;
        // SAFETY: loads and stores cover i..i+8 ≤ n; the tail uses a local 8-lane buffer.
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(p.add(i), f(_mm256_loadu_ps(p.add(i))));
                i += 8;
            }
            if i < n {
                let mut buf = [0.0f32; 8];
                buf[..n - i].copy_from_slice(&x[i..]);
                _mm256_storeu_ps(buf.as_mut_ptr(), f(_mm256_loadu_ps(buf.as_ptr())));
                x[i..].copy_from_slice(&buf[..n - i]);
            }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn max(x: &[f32]) -> f32 {
        let n = x.len();
        let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        // SAFETY: loads cover i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                acc = _mm256_max_ps(acc, _mm256_loadu_ps(x.as_ptr().add(i)));
                i += 8;
            }
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds 8 f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        lanes
            .iter()
            .chain(&x[i..])
            .copied()
            .fold(f32::NEG_INFINITY, f32::max)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
        let n = x.len();
        let mv = _mm256_set1_ps(m);
        let mut sum = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: loads and stores cover i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                let p = x.as_mut_ptr().add(i);
                let v = exp(_mm256_sub_ps(_mm256_loadu_ps(p), mv));
                _mm256_storeu_ps(p, v);
                sum = _mm256_add_ps(sum, v);
                i += 8;
            }
        }
        hsum(sum) + super::super::scalar::exp_sub_sum(&mut x[i..], m)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn scale(x: &mut [f32], s: f32) {
        let sv = _mm256_set1_ps(s);
        // SAFETY: same features as this function.
        unsafe { map(x, |v| _mm256_mul_ps(v, sv)) }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
        let (n, av) = (x.len(), _mm256_set1_ps(a));
        let mut i = 0;
        // SAFETY: x and y have length n (checked by the caller); loads cover i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                let py = y.as_mut_ptr().add(i);
                let v =
                    _mm256_fmadd_ps(av, _mm256_loadu_ps(x.as_ptr().add(i)), _mm256_loadu_ps(py));
                _mm256_storeu_ps(py, v);
                i += 8;
            }
        }
        super::super::scalar::axpy(a, &x[i..], &mut y[i..]);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn add(a: &mut [f32], b: &[f32]) {
        let n = a.len();
        let mut i = 0;
        // SAFETY: a and b have length n (checked by the caller); loads cover i..i+8 ≤ n.
        unsafe {
            while i + 8 <= n {
                let pa = a.as_mut_ptr().add(i);
                let v = _mm256_add_ps(_mm256_loadu_ps(pa), _mm256_loadu_ps(b.as_ptr().add(i)));
                _mm256_storeu_ps(pa, v);
                i += 8;
            }
        }
        super::super::scalar::add(&mut a[i..], &b[i..]);
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn gelu(x: &mut [f32]) {
        let half = _mm256_set1_ps(0.5);
        let f = |v: __m256| {
            // 0.5·v·(1 + erf(v/√2)), as the AVX-512 path.
            let z = _mm256_mul_ps(v, _mm256_set1_ps(std::f32::consts::FRAC_1_SQRT_2));
            let z = _mm256_min_ps(
                _mm256_max_ps(z, _mm256_set1_ps(-ERF_CLAMP)),
                _mm256_set1_ps(ERF_CLAMP),
            );
            let u = _mm256_mul_ps(z, z);
            let (mut p, mut q) = (_mm256_set1_ps(ERF_NUM[5]), _mm256_set1_ps(ERF_DEN[5]));
            for (a, b) in ERF_NUM[..5].iter().zip(&ERF_DEN[..5]).rev() {
                p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(*a));
                q = _mm256_fmadd_ps(q, u, _mm256_set1_ps(*b));
            }
            let erf = _mm256_div_ps(_mm256_mul_ps(z, p), q);
            let h = _mm256_mul_ps(half, v);
            _mm256_fmadd_ps(h, erf, h)
        };
        // SAFETY: same features as this function.
        unsafe { map(x, f) }
    }

    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn layer_norm(
        x: &[f32],
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
        out: &mut [f32],
    ) {
        let n = x.len();
        let nv = n / 8 * 8;
        let px = x.as_ptr();
        // SAFETY: all slices have length n (checked by the caller); loads cover i..i+8 ≤ nv.
        unsafe {
            let mut s = _mm256_setzero_ps();
            for i in (0..nv).step_by(8) {
                s = _mm256_add_ps(s, _mm256_loadu_ps(px.add(i)));
            }
            let mean = (hsum(s) + x[nv..].iter().sum::<f32>()) / n as f32;
            let mv = _mm256_set1_ps(mean);
            let mut s = _mm256_setzero_ps();
            for i in (0..nv).step_by(8) {
                let d = _mm256_sub_ps(_mm256_loadu_ps(px.add(i)), mv);
                s = _mm256_fmadd_ps(d, d, s);
            }
            let tail: f32 = x[nv..].iter().map(|v| (v - mean) * (v - mean)).sum();
            let inv = 1.0 / ((hsum(s) + tail) / n as f32 + eps).sqrt();
            let iv = _mm256_set1_ps(inv);
            for i in (0..nv).step_by(8) {
                let d = _mm256_sub_ps(_mm256_loadu_ps(px.add(i)), mv);
                let g = _mm256_loadu_ps(gamma.as_ptr().add(i));
                let b = _mm256_loadu_ps(beta.as_ptr().add(i));
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(i),
                    _mm256_fmadd_ps(_mm256_mul_ps(d, iv), g, b),
                );
            }
            for i in nv..n {
                out[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
            }
        }
    }

    /// `out[j] = s · q · k[j·ld..][..n]`. A 64-wide head (every Whisper model's) keeps `q` in
    /// 8 registers and takes 4 keys at a time, two sums each: 8 loads per key instead of
    /// 16, and four independent chains.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn dot_rows(q: &[f32], k: &[f32], ld: usize, s: f32, out: &mut [f32]) {
        let n = q.len();
        let mut j0 = 0;
        if n == 64 {
            let kp = k.as_ptr();
            // SAFETY: q holds 64 values.
            let qv: [__m256; 8] =
                std::array::from_fn(|t| unsafe { _mm256_loadu_ps(q.as_ptr().add(8 * t)) });
            while j0 + 4 <= out.len() {
                let mut acc = [[_mm256_setzero_ps(); 2]; 4];
                for (t, &qt) in qv.iter().enumerate() {
                    for (u, a) in acc.iter_mut().enumerate() {
                        // SAFETY: key j0 + u < out.len(), whose 64 values the caller
                        // checked lie in k.
                        let x = unsafe { _mm256_loadu_ps(kp.add((j0 + u) * ld + 8 * t)) };
                        a[t % 2] = _mm256_fmadd_ps(qt, x, a[t % 2]);
                    }
                }
                for (u, a) in acc.iter().enumerate() {
                    out[j0 + u] = s * hsum(_mm256_add_ps(a[0], a[1]));
                }
                j0 += 4;
            }
        }
        for (j, o) in out.iter_mut().enumerate().skip(j0) {
            // SAFETY: same features as this function; the caller checked k's length.
            *o = s * unsafe { dot(q, &k[j * ld..j * ld + n]) };
        }
    }

    /// Columns of `out` per pass of [`axpy_rows`]: eight registers of sums.
    const AXPY_COLS: usize = 64;

    /// `out += Σ_j p[j] · v[j·ld..]`: whole runs of 64 columns with the sums in registers
    /// across every j (as the AVX-512 one; a load and store of `out` per row kept each sum
    /// waiting on the store), the rest (no Whisper head: they are 64 wide) a column at a
    /// time. Each column's fused multiply-adds run in order of j: the bits of a
    /// one-row-at-a-time loop.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn axpy_rows(p: &[f32], v: &[f32], ld: usize, out: &mut [f32]) {
        let n = out.len();
        let whole = n / AXPY_COLS * AXPY_COLS;
        let (vp, op) = (v.as_ptr(), out.as_mut_ptr());
        for c in (0..whole).step_by(AXPY_COLS) {
            // SAFETY: columns c..c + 64 ≤ n of `out`.
            let mut acc: [__m256; 8] =
                std::array::from_fn(|t| unsafe { _mm256_loadu_ps(op.add(c + 8 * t)) });
            for (j, &pj) in p.iter().enumerate() {
                let a = _mm256_set1_ps(pj);
                for (t, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: the caller checked v holds (p.len() − 1)·ld + n values.
                    let x = unsafe { _mm256_loadu_ps(vp.add(j * ld + c + 8 * t)) };
                    *acc = _mm256_fmadd_ps(a, x, *acc);
                }
            }
            for (t, acc) in acc.iter().enumerate() {
                // SAFETY: as the loads of `out` above.
                unsafe { _mm256_storeu_ps(op.add(c + 8 * t), *acc) };
            }
        }
        for (c, o) in out.iter_mut().enumerate().skip(whole) {
            *o = p
                .iter()
                .enumerate()
                .fold(*o, |acc, (j, &pj)| pj.mul_add(v[j * ld + c], acc));
        }
    }
}
