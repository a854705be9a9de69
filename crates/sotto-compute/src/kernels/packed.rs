//! The decoder's attention over f16 keys and values packed per head
//! (`kernels::attn_scores`, `kernels::attn_values`), written once for every ISA: each path
//! instantiates [`packed_attention!`] with its vector type and operations.

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
                // One row keeps eight vectors of sums: whole 128-byte value rows, read in
                // order (four vectors read one line in two).
                while G == 1 && c0 + 8 * $lanes <= dhp {
                    values_g::<G, 8>(p, ldp, tk, v, dhp, c0, out, ldo);
                    c0 += 8 * $lanes;
                }
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
