//! x86-64 decoder kernels: the tiled f16 small-M product and attention over f16 keys and
//! values packed per head (see `kernels::matmul_tiled` and `kernels::attend_packed`).
//!
//! Every function here is `unsafe` because it must only run on a CPU with its features;
//! `kernels::checked` guarantees that before any call.

use super::{TILE_K, TILE_ROWS};

/// Copies the last `k % TILE_K` values of each of `g` rows of `x` (row i at `x[i·k..]`)
/// into zero-padded chunks, so the tail chunk runs the same code as the full ones.
fn tail_chunks<const G: usize>(x: &[f32], k: usize) -> [[f32; TILE_K]; G] {
    let kf = k / TILE_K * TILE_K;
    let mut t = [[0.0f32; TILE_K]; G];
    for (i, ti) in t.iter_mut().enumerate() {
        ti[..k - kf].copy_from_slice(&x[i * k + kf..(i + 1) * k]);
    }
    t
}

/// Calls `$f::<G>(x rows i0.., ...)` for groups of at most `$max` input rows.
macro_rules! by_groups {
    ($f:ident, $max:literal, $x:expr, $m:expr, $k:expr, $w:expr, $out:expr) => {{
        let mut i0 = 0;
        while i0 < $m {
            let g = ($m - i0).min($max);
            let xg = &$x[i0 * $k..(i0 + g) * $k];
            // SAFETY: the caller checked the CPU features (see module docs).
            unsafe {
                match g {
                    1 => $f::<1>(xg, $k, $w, $out, $m, i0),
                    2 => $f::<2>(xg, $k, $w, $out, $m, i0),
                    3 => $f::<3>(xg, $k, $w, $out, $m, i0),
                    4 => $f::<4>(xg, $k, $w, $out, $m, i0),
                    5 => $f::<5>(xg, $k, $w, $out, $m, i0),
                    _ => $f::<6>(xg, $k, $w, $out, $m, i0),
                }
            }
            i0 += g;
        }
    }};
}

pub(super) mod avx512 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::*;

    /// One row group: `out_t[r·m + i0 + i] = x_i · w_r` for i < G, every row of every tile.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn tiles<const G: usize>(
        x: &[f32],
        k: usize,
        w: &[f16],
        out_t: &mut [f32],
        m: usize,
        i0: usize,
    ) {
        let (kf, kc) = (k / TILE_K, k.div_ceil(TILE_K));
        let tail = tail_chunks::<G>(x, k);
        let tile_len = kc * TILE_ROWS * TILE_K;
        for (t, tile) in w.chunks_exact(tile_len).enumerate() {
            let wp = tile.as_ptr();
            let mut acc = [[_mm512_setzero_ps(); TILE_ROWS]; G];
            for c in 0..kc {
                // SAFETY: chunk c < kc of this tile holds TILE_ROWS × 16 f16; x rows are
                // [G, k] and chunk c < kf lies inside them (the tail is the padded copy).
                unsafe {
                    let mut wv = [_mm512_setzero_ps(); TILE_ROWS];
                    for (j, v) in wv.iter_mut().enumerate() {
                        let p = wp.add((c * TILE_ROWS + j) * TILE_K) as *const __m256i;
                        *v = _mm512_cvtph_ps(_mm256_loadu_si256(p));
                    }
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let xv = if c < kf {
                            _mm512_loadu_ps(x.as_ptr().add(i * k + c * TILE_K))
                        } else {
                            _mm512_loadu_ps(tail[i].as_ptr())
                        };
                        for j in 0..TILE_ROWS {
                            acc_i[j] = _mm512_fmadd_ps(wv[j], xv, acc_i[j]);
                        }
                    }
                }
            }
            for (i, acc_i) in acc.iter().enumerate() {
                for (j, a) in acc_i.iter().enumerate() {
                    out_t[(t * TILE_ROWS + j) * m + i0 + i] = _mm512_reduce_add_ps(*a);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out_t: &mut [f32]) {
        by_groups!(tiles, 6, x, m, k, w, out_t);
    }
}

pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::*;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
    }

    /// As the AVX-512 `tiles`, each 16-value chunk as two 8-lane halves.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tiles<const G: usize>(
        x: &[f32],
        k: usize,
        w: &[f16],
        out_t: &mut [f32],
        m: usize,
        i0: usize,
    ) {
        let (kf, kc) = (k / TILE_K, k.div_ceil(TILE_K));
        let tail = tail_chunks::<G>(x, k);
        let tile_len = kc * TILE_ROWS * TILE_K;
        for (t, tile) in w.chunks_exact(tile_len).enumerate() {
            let wp = tile.as_ptr();
            let mut acc = [[_mm256_setzero_ps(); TILE_ROWS]; G];
            for c in 0..kc {
                for half in 0..2 {
                    // SAFETY: as in the AVX-512 kernel; each half is 8 of the chunk's 16.
                    unsafe {
                        let mut xv = [_mm256_setzero_ps(); G];
                        for (i, v) in xv.iter_mut().enumerate() {
                            let p = if c < kf {
                                x.as_ptr().add(i * k + c * TILE_K + half * 8)
                            } else {
                                tail[i].as_ptr().add(half * 8)
                            };
                            *v = _mm256_loadu_ps(p);
                        }
                        for j in 0..TILE_ROWS {
                            let p = wp.add((c * TILE_ROWS + j) * TILE_K + half * 8);
                            let wv = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
                            for (acc_i, xi) in acc.iter_mut().zip(&xv) {
                                acc_i[j] = _mm256_fmadd_ps(wv, *xi, acc_i[j]);
                            }
                        }
                    }
                }
            }
            for (i, acc_i) in acc.iter().enumerate() {
                for (j, a) in acc_i.iter().enumerate() {
                    out_t[(t * TILE_ROWS + j) * m + i0 + i] = hsum(*a);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out_t: &mut [f32]) {
        by_groups!(tiles, 2, x, m, k, w, out_t);
    }
}

/// Attention over packed f16 keys and values (`kernels::attn_scores`, `kernels::attn_values`),
/// for an ISA with `$lanes`-wide f32 vectors; at most `$gmax` query rows per pass.
macro_rules! packed_attention {
    ($feat:literal, $lanes:expr, $V:ty, $gmax:literal, $zero:ident, $fma:ident, $mul:ident,
     $set1:ident, $ldh:ident, $st:ident) => {
        /// `s[i·lds + j] = scale · q_i · k_j` for G query rows and every key of every block.
        #[target_feature(enable = $feat)]
        unsafe fn scores_g<const G: usize>(
            q: &[f32],
            ldq: usize,
            k: &[f16],
            dh: usize,
            scale: f32,
            s: &mut [f32],
            lds: usize,
        ) {
            const KV: usize = KEY_BLOCK / $lanes;
            let nb = k.len() / (dh * KEY_BLOCK);
            // SAFETY: block b holds dh × KEY_BLOCK f16; q rows i < G hold dh values ldq
            // apart; s rows hold nb · KEY_BLOCK values lds apart (all checked by the caller).
            unsafe {
                let sv = $set1(scale);
                for b in 0..nb {
                    let kb = k.as_ptr().add(b * dh * KEY_BLOCK);
                    let mut acc = [[$zero(); KV]; G];
                    for c in 0..dh {
                        let mut kv = [$zero(); KV];
                        for (u, v) in kv.iter_mut().enumerate() {
                            *v = $ldh(kb.add(c * KEY_BLOCK + u * $lanes));
                        }
                        for (i, acc_i) in acc.iter_mut().enumerate() {
                            let qv = $set1(*q.as_ptr().add(i * ldq + c));
                            for u in 0..KV {
                                acc_i[u] = $fma(kv[u], qv, acc_i[u]);
                            }
                        }
                    }
                    for (i, acc_i) in acc.iter().enumerate() {
                        for (u, a) in acc_i.iter().enumerate() {
                            let o = s.as_mut_ptr().add(i * lds + b * KEY_BLOCK + u * $lanes);
                            $st(o, $mul(*a, sv));
                        }
                    }
                }
            }
        }

        /// `out[i·ldo + c0 + c] = Σ_j p[i·ldp + j] · v[j·dhp + c0 + c]` for the NV vectors
        /// of columns from `c0`.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        unsafe fn values_g<const G: usize, const NV: usize>(
            p: &[f32],
            ldp: usize,
            tk: usize,
            v: &[f16],
            dhp: usize,
            c0: usize,
            out: &mut [f32],
            ldo: usize,
        ) {
            // SAFETY: p rows i < G hold tk values ldp apart; v holds tk rows of dhp with
            // c0 + NV·lanes ≤ dhp; out rows hold dhp values ldo apart (checked by the caller).
            unsafe {
                let mut acc = [[$zero(); NV]; G];
                for j in 0..tk {
                    let vr = v.as_ptr().add(j * dhp + c0);
                    let mut vv = [$zero(); NV];
                    for (u, x) in vv.iter_mut().enumerate() {
                        *x = $ldh(vr.add(u * $lanes));
                    }
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let pb = $set1(*p.as_ptr().add(i * ldp + j));
                        for u in 0..NV {
                            acc_i[u] = $fma(vv[u], pb, acc_i[u]);
                        }
                    }
                }
                for (i, acc_i) in acc.iter().enumerate() {
                    for (u, a) in acc_i.iter().enumerate() {
                        $st(out.as_mut_ptr().add(i * ldo + c0 + u * $lanes), *a);
                    }
                }
            }
        }

        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        unsafe fn values_cols<const G: usize>(
            p: &[f32],
            ldp: usize,
            tk: usize,
            v: &[f16],
            dhp: usize,
            out: &mut [f32],
            ldo: usize,
        ) {
            let mut c0 = 0;
            // SAFETY: same features; every call stays inside the dhp columns.
            unsafe {
                while c0 + 4 * $lanes <= dhp {
                    values_g::<G, 4>(p, ldp, tk, v, dhp, c0, out, ldo);
                    c0 += 4 * $lanes;
                }
                while c0 < dhp {
                    values_g::<G, 1>(p, ldp, tk, v, dhp, c0, out, ldo);
                    c0 += $lanes;
                }
            }
        }

        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn attn_scores(
            q: &[f32],
            g: usize,
            ldq: usize,
            k: &[f16],
            dh: usize,
            scale: f32,
            s: &mut [f32],
            lds: usize,
        ) {
            let mut i0 = 0;
            while i0 < g {
                let n = (g - i0).min($gmax);
                let (qg, sg) = (&q[i0 * ldq..], &mut s[i0 * lds..]);
                // SAFETY: same features; the caller checked the shapes.
                unsafe {
                    match n {
                        1 => scores_g::<1>(qg, ldq, k, dh, scale, sg, lds),
                        2 => scores_g::<2>(qg, ldq, k, dh, scale, sg, lds),
                        3 => scores_g::<3>(qg, ldq, k, dh, scale, sg, lds),
                        4 => scores_g::<4>(qg, ldq, k, dh, scale, sg, lds),
                        5 => scores_g::<5>(qg, ldq, k, dh, scale, sg, lds),
                        _ => scores_g::<6>(qg, ldq, k, dh, scale, sg, lds),
                    }
                }
                i0 += n;
            }
        }

        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        pub(crate) unsafe fn attn_values(
            p: &[f32],
            g: usize,
            ldp: usize,
            tk: usize,
            v: &[f16],
            dhp: usize,
            out: &mut [f32],
            ldo: usize,
        ) {
            let mut i0 = 0;
            while i0 < g {
                let n = (g - i0).min($gmax);
                let (pg, og) = (&p[i0 * ldp..], &mut out[i0 * ldo..]);
                // SAFETY: same features; the caller checked the shapes.
                unsafe {
                    match n {
                        1 => values_cols::<1>(pg, ldp, tk, v, dhp, og, ldo),
                        2 => values_cols::<2>(pg, ldp, tk, v, dhp, og, ldo),
                        3 => values_cols::<3>(pg, ldp, tk, v, dhp, og, ldo),
                        4 => values_cols::<4>(pg, ldp, tk, v, dhp, og, ldo),
                        5 => values_cols::<5>(pg, ldp, tk, v, dhp, og, ldo),
                        _ => values_cols::<6>(pg, ldp, tk, v, dhp, og, ldo),
                    }
                }
                i0 += n;
            }
        }
    };
}

pub(super) mod avx512_attn {
    use std::arch::x86_64::*;

    use half::f16;

    use super::super::KEY_BLOCK;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    unsafe fn ldh(p: *const f16) -> __m512 {
        // SAFETY: the caller passes 16 readable f16.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn st(p: *mut f32, v: __m512) {
        // SAFETY: the caller passes 16 writable f32.
        unsafe { _mm512_storeu_ps(p, v) }
    }

    packed_attention!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl",
        16,
        __m512,
        6,
        _mm512_setzero_ps,
        _mm512_fmadd_ps,
        _mm512_mul_ps,
        _mm512_set1_ps,
        ldh,
        st
    );
}

pub(super) mod avx2_attn {
    use std::arch::x86_64::*;

    use half::f16;

    use super::super::KEY_BLOCK;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn ldh(p: *const f16) -> __m256 {
        // SAFETY: the caller passes 8 readable f16.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn st(p: *mut f32, v: __m256) {
        // SAFETY: the caller passes 8 writable f32.
        unsafe { _mm256_storeu_ps(p, v) }
    }

    packed_attention!(
        "avx2,fma,f16c",
        8,
        __m256,
        2,
        _mm256_setzero_ps,
        _mm256_fmadd_ps,
        _mm256_mul_ps,
        _mm256_set1_ps,
        ldh,
        st
    );
}
