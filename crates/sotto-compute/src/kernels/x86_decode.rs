//! x86-64 decoder kernels: the tiled f16 small-M product and attention over f16 keys and
//! values packed per head (see `kernels::matmul_tiled` and `kernels::attend_packed`).
//!
//! Every function here is `unsafe` because it must only run on a CPU with its features;
//! `kernels::checked` guarantees that before any call.

use super::TILE_ROWS;

/// Calls `$f::<G>(x rows i0.., k, w, out rows i0.., ldo)` for groups of at most `$max` input rows.
macro_rules! by_groups {
    ($f:ident, $max:literal, $x:expr, $m:expr, $k:expr, $w:expr, $out:expr, $ldo:expr) => {{
        let mut i0 = 0;
        while i0 < $m {
            let g = ($m - i0).min($max);
            let xg = &$x[i0 * $k..(i0 + g) * $k];
            let og = &mut $out[i0 * $ldo..];
            // SAFETY: the caller checked the CPU features (see module docs).
            unsafe {
                match g {
                    1 => $f::<1>(xg, $k, $w, og, $ldo),
                    2 => $f::<2>(xg, $k, $w, og, $ldo),
                    3 => $f::<3>(xg, $k, $w, og, $ldo),
                    4 => $f::<4>(xg, $k, $w, og, $ldo),
                    5 => $f::<5>(xg, $k, $w, og, $ldo),
                    _ => $f::<6>(xg, $k, $w, og, $ldo),
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

    /// Vectors per tile column.
    const V: usize = TILE_ROWS / 16;

    /// One row group: `out[i·ldo + r] = x_i · w_r` for i < G, every row r of every tile.
    /// Each tile column is V vectors of 16 outputs: an x value broadcast times one
    /// vector updates 16 sums at once, so no horizontal reduction is needed.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn tiles<const G: usize>(x: &[f32], k: usize, w: &[f16], out: &mut [f32], ldo: usize) {
        for (t, tile) in w.chunks_exact(k * TILE_ROWS).enumerate() {
            let wp = tile.as_ptr();
            let mut acc = [[_mm512_setzero_ps(); V]; G];
            // SAFETY: column c < k of the tile holds TILE_ROWS f16; x rows are [G, k]; out
            // rows i < G hold ldo ≥ (t + 1)·TILE_ROWS values (checked by the caller).
            unsafe {
                for c in 0..k {
                    let mut wv = [_mm512_setzero_ps(); V];
                    for (u, v) in wv.iter_mut().enumerate() {
                        let p = wp.add(c * TILE_ROWS + u * 16) as *const __m256i;
                        *v = _mm512_cvtph_ps(_mm256_loadu_si256(p));
                    }
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let xb = _mm512_set1_ps(*x.as_ptr().add(i * k + c));
                        for u in 0..V {
                            acc_i[u] = _mm512_fmadd_ps(wv[u], xb, acc_i[u]);
                        }
                    }
                }
                for (i, acc_i) in acc.iter().enumerate() {
                    for (u, a) in acc_i.iter().enumerate() {
                        let o = out.as_mut_ptr().add(i * ldo + t * TILE_ROWS + u * 16);
                        _mm512_storeu_ps(o, *a);
                    }
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    pub(crate) unsafe fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out: &mut [f32]) {
        let ldo = out.len() / m;
        by_groups!(tiles, 6, x, m, k, w, out, ldo);
    }
}

pub(super) mod avx2 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::*;

    /// 8-lane vectors per half tile column.
    const V: usize = TILE_ROWS / 16;

    /// As the AVX-512 `tiles`, each tile as two halves of TILE_ROWS / 2 outputs (one
    /// half's accumulators for two x rows fit the 16 registers).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tiles<const G: usize>(x: &[f32], k: usize, w: &[f16], out: &mut [f32], ldo: usize) {
        for (t, tile) in w.chunks_exact(k * TILE_ROWS).enumerate() {
            for half in 0..2 {
                let wp = tile.as_ptr().wrapping_add(half * TILE_ROWS / 2);
                let mut acc = [[_mm256_setzero_ps(); V]; G];
                // SAFETY: as in the AVX-512 kernel; a half column is TILE_ROWS / 2 values.
                unsafe {
                    for c in 0..k {
                        let mut wv = [_mm256_setzero_ps(); V];
                        for (u, v) in wv.iter_mut().enumerate() {
                            let p = wp.add(c * TILE_ROWS + u * 8) as *const __m128i;
                            *v = _mm256_cvtph_ps(_mm_loadu_si128(p));
                        }
                        for (i, acc_i) in acc.iter_mut().enumerate() {
                            let xb = _mm256_set1_ps(*x.as_ptr().add(i * k + c));
                            for u in 0..V {
                                acc_i[u] = _mm256_fmadd_ps(wv[u], xb, acc_i[u]);
                            }
                        }
                    }
                    for (i, acc_i) in acc.iter().enumerate() {
                        for (u, a) in acc_i.iter().enumerate() {
                            let r = t * TILE_ROWS + half * TILE_ROWS / 2 + u * 8;
                            _mm256_storeu_ps(out.as_mut_ptr().add(i * ldo + r), *a);
                        }
                    }
                }
            }
        }
    }

    /// Columns per block of [`quarters`]: a block's 64 · 128 bytes of a tile stay in L1
    /// while its four quarters pass over them.
    const QUARTER_COLS: usize = 64;

    /// As [`tiles`] for 3 to 6 x rows (beams), each tile as four quarters of TILE_ROWS / 4
    /// outputs: six rows' accumulators for a quarter fit the 16 registers, so the weights
    /// are read and widened once for all rows instead of once per pair. The quarters take
    /// turns over each block of [`QUARTER_COLS`] columns, their sums kept between blocks,
    /// so the tile streams from memory once, in order (a whole quarter at a time read one
    /// line in two, 128 bytes apart, and stalled on memory). Each output is the same
    /// sequence of fused multiply-adds, so the same bits.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn quarters<const G: usize>(
        x: &[f32],
        k: usize,
        w: &[f16],
        out: &mut [f32],
        ldo: usize,
    ) {
        const Q: usize = TILE_ROWS / 4;
        for (t, tile) in w.chunks_exact(k * TILE_ROWS).enumerate() {
            let mut sums = [[[_mm256_setzero_ps(); 2]; G]; 4];
            for c0 in (0..k).step_by(QUARTER_COLS) {
                let c1 = (c0 + QUARTER_COLS).min(k);
                for (quarter, acc) in sums.iter_mut().enumerate() {
                    let wp = tile.as_ptr().wrapping_add(quarter * Q);
                    let mut a = *acc;
                    // SAFETY: as in `tiles`; a quarter column is Q = 16 values.
                    unsafe {
                        for c in c0..c1 {
                            if quarter == 0 {
                                // The next block's column c, both lines: requested a block
                                // ahead, where the loads alone would stall on memory.
                                let ahead = wp.wrapping_add((c + QUARTER_COLS) * TILE_ROWS);
                                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(32).cast());
                            }
                            let p = wp.add(c * TILE_ROWS) as *const __m128i;
                            let wv = [
                                _mm256_cvtph_ps(_mm_loadu_si128(p)),
                                _mm256_cvtph_ps(_mm_loadu_si128(p.add(1))),
                            ];
                            for (i, acc_i) in a.iter_mut().enumerate() {
                                let xb = _mm256_set1_ps(*x.as_ptr().add(i * k + c));
                                acc_i[0] = _mm256_fmadd_ps(wv[0], xb, acc_i[0]);
                                acc_i[1] = _mm256_fmadd_ps(wv[1], xb, acc_i[1]);
                            }
                        }
                    }
                    *acc = a;
                }
            }
            for (quarter, acc) in sums.iter().enumerate() {
                for (i, acc_i) in acc.iter().enumerate() {
                    for (u, a) in acc_i.iter().enumerate() {
                        let r = t * TILE_ROWS + quarter * Q + u * 8;
                        // SAFETY: out rows i < G hold ldo ≥ (t + 1)·TILE_ROWS values.
                        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i * ldo + r), *a) };
                    }
                }
            }
        }
    }

    /// Columns [`columns`] requests ahead of the one it multiplies (16 and 64 measured no
    /// better).
    const COLUMNS_AHEAD: usize = 32;

    /// One x row (greedy): each tile column's TILE_ROWS values at once into eight
    /// accumulators, so the tile streams in order (the halves of [`tiles`] read one line
    /// in two). Each output is the same sequence of fused multiply-adds, so the same bits.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn columns(x: &[f32], k: usize, w: &[f16], out: &mut [f32]) {
        const U: usize = TILE_ROWS / 8;
        for (t, tile) in w.chunks_exact(k * TILE_ROWS).enumerate() {
            let wp = tile.as_ptr();
            let mut acc = [_mm256_setzero_ps(); U];
            // SAFETY: column c < k of the tile holds TILE_ROWS f16; x holds k values; out
            // holds ≥ (t + 1)·TILE_ROWS values (checked by the caller).
            unsafe {
                for (c, &xc) in x[..k].iter().enumerate() {
                    // Both lines of a column well ahead (past the tile's end: the next
                    // tile's; past the data, a prefetch is a hint that never faults): 4–6%
                    // on one thread streaming from memory, neutral on two.
                    let ahead = wp.wrapping_add((c + COLUMNS_AHEAD) * TILE_ROWS);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(32).cast());
                    let xb = _mm256_set1_ps(xc);
                    for (u, a) in acc.iter_mut().enumerate() {
                        let p = wp.add(c * TILE_ROWS + u * 8) as *const __m128i;
                        *a = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), xb, *a);
                    }
                }
                for (u, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.as_mut_ptr().add(t * TILE_ROWS + u * 8), *a);
                }
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn matmul_tiled(x: &[f32], m: usize, k: usize, w: &[f16], out: &mut [f32]) {
        let ldo = out.len() / m;
        // One row (greedy) takes whole columns, in order; two stream the weights from
        // memory either way, and halves keep more sums in flight. More rows take quarters,
        // one pass over the weights.
        if m == 1 {
            // SAFETY: as for `tiles`; out holds the whole tiles' outputs (ldo = out.len()).
            return unsafe { columns(x, k, w, out) };
        }
        if m <= 2 {
            by_groups!(tiles, 2, x, m, k, w, out, ldo);
        } else {
            by_groups!(quarters, 6, x, m, k, w, out, ldo);
        }
    }
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
    /// Query rows per pass of the wide kernels: a prompt's cross-attention (row chunks of
    /// 24) is bound by arithmetic, and 6 rows × 16 columns keep 12 sums in registers with a
    /// third of the f16 widenings per multiply-add of the 2-row pass. Beams' 3–5 rows take
    /// one pass too (on the 2-row pass, five rows read each head's keys three times and its
    /// values six); one or two rows keep the narrower passes, which read whole lines.
    const WIDE: usize = 6;

    /// [`attn_scores`] with every whole group of [`WIDE`] rows, and a rest of 3–5, on
    /// [`scores_wide`]: the same multiply-adds in the same order, so the same bits.
    ///
    /// # Safety
    /// As [`attn_scores`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn attn_scores_rows(
        q: &[f32],
        g: usize,
        ldq: usize,
        k: &[f16],
        dh: usize,
        scale: f32,
        s: &mut [f32],
        lds: usize,
    ) {
        let wide = g / WIDE * WIDE;
        for i0 in (0..wide).step_by(WIDE) {
            let (q, s) = (&q[i0 * ldq..], &mut s[i0 * lds..]);
            // SAFETY: rows i0..i0 + WIDE < g of q and s (the caller checked the shapes).
            unsafe { scores_wide::<WIDE>(q, ldq, k, dh, scale, s, lds) };
        }
        if wide == g {
            return;
        }
        let (q, s) = (&q[wide * ldq..], &mut s[wide * lds..]);
        // SAFETY: the remaining rows, same contract.
        unsafe {
            match g - wide {
                3 => scores_wide::<3>(q, ldq, k, dh, scale, s, lds),
                4 => scores_wide::<4>(q, ldq, k, dh, scale, s, lds),
                5 => scores_wide::<5>(q, ldq, k, dh, scale, s, lds),
                n => attn_scores(q, n, ldq, k, dh, scale, s, lds),
            }
        }
    }

    /// [`attn_values`] with every whole group of [`WIDE`] rows, and a rest of 3–5, on
    /// [`values_wide`]: the same multiply-adds in the same order, so the same bits.
    ///
    /// # Safety
    /// As [`attn_values`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(crate) unsafe fn attn_values_rows(
        p: &[f32],
        g: usize,
        ldp: usize,
        tk: usize,
        v: &[f16],
        dhp: usize,
        out: &mut [f32],
        ldo: usize,
    ) {
        let wide = g / WIDE * WIDE;
        for i0 in (0..wide).step_by(WIDE) {
            let (pg, og) = (&p[i0 * ldp..], &mut out[i0 * ldo..]);
            // SAFETY: rows i0..i0 + WIDE < g of p and out (the caller checked the shapes).
            unsafe { values_wide::<WIDE>(pg, ldp, tk, v, dhp, og, ldo) };
        }
        if wide == g {
            return;
        }
        let (p, out) = (&p[wide * ldp..], &mut out[wide * ldo..]);
        // SAFETY: the remaining rows, same contract.
        unsafe {
            match g - wide {
                3 => values_wide::<3>(p, ldp, tk, v, dhp, out, ldo),
                4 => values_wide::<4>(p, ldp, tk, v, dhp, out, ldo),
                5 => values_wide::<5>(p, ldp, tk, v, dhp, out, ldo),
                n => attn_values(p, n, ldp, tk, v, dhp, out, ldo),
            }
        }
    }

    /// `scores_g::<G>` (G ≤ [`WIDE`]) a half key block (16 keys) at a time.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scores_wide<const G: usize>(
        q: &[f32],
        ldq: usize,
        k: &[f16],
        dh: usize,
        scale: f32,
        s: &mut [f32],
        lds: usize,
    ) {
        let nb = k.len() / (dh * KEY_BLOCK);
        // SAFETY: block b holds dh × KEY_BLOCK f16; q rows i < G hold dh values ldq
        // apart; s rows hold nb · KEY_BLOCK values lds apart (all checked by the caller).
        unsafe {
            let sv = _mm256_set1_ps(scale);
            for b in 0..nb {
                for half in (0..KEY_BLOCK).step_by(16) {
                    let kb = k.as_ptr().add(b * dh * KEY_BLOCK + half);
                    let mut acc = [[_mm256_setzero_ps(); 2]; G];
                    for c in 0..dh {
                        let kv = [ldh(kb.add(c * KEY_BLOCK)), ldh(kb.add(c * KEY_BLOCK + 8))];
                        for (i, acc_i) in acc.iter_mut().enumerate() {
                            let qv = _mm256_set1_ps(*q.as_ptr().add(i * ldq + c));
                            for u in 0..2 {
                                acc_i[u] = _mm256_fmadd_ps(kv[u], qv, acc_i[u]);
                            }
                        }
                    }
                    for (i, acc_i) in acc.iter().enumerate() {
                        for (u, a) in acc_i.iter().enumerate() {
                            let o = s.as_mut_ptr().add(i * lds + b * KEY_BLOCK + half + u * 8);
                            st(o, _mm256_mul_ps(*a, sv));
                        }
                    }
                }
            }
        }
    }

    /// `values_g::<G, 2>` (G ≤ [`WIDE`]) over every 16-column strip.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values_wide<const G: usize>(
        p: &[f32],
        ldp: usize,
        tk: usize,
        v: &[f16],
        dhp: usize,
        out: &mut [f32],
        ldo: usize,
    ) {
        // SAFETY: p rows i < G hold tk values ldp apart; v holds tk rows of dhp (a
        // multiple of 16); out rows hold dhp values ldo apart (checked by the caller).
        unsafe {
            for c0 in (0..dhp).step_by(16) {
                let mut acc = [[_mm256_setzero_ps(); 2]; G];
                for j in 0..tk {
                    let vr = v.as_ptr().add(j * dhp + c0);
                    let vv = [ldh(vr), ldh(vr.add(8))];
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        let pb = _mm256_set1_ps(*p.as_ptr().add(i * ldp + j));
                        for u in 0..2 {
                            acc_i[u] = _mm256_fmadd_ps(vv[u], pb, acc_i[u]);
                        }
                    }
                }
                for (i, acc_i) in acc.iter().enumerate() {
                    for (u, a) in acc_i.iter().enumerate() {
                        st(out.as_mut_ptr().add(i * ldo + c0 + u * 8), *a);
                    }
                }
            }
        }
    }
}
