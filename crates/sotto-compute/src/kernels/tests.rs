//! Every available path against the scalar reference, on lengths that are not lane multiples.

use half::f16;

use super::*;
use crate::testutil::{max_abs_diff, rand_vec};

const LENS: [usize; 9] = [1, 3, 7, 8, 15, 17, 33, 100, 387];

fn simd_paths() -> Vec<Isa> {
    sotto_isa::available()
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .collect()
}

#[test]
fn dot_and_f16_match_scalar() {
    for isa in sotto_isa::available() {
        for n in LENS {
            let (a, b) = (rand_vec(n, 1), rand_vec(n, 2));
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            assert!((dot(isa, &a, &b) as f64 - want).abs() < 1e-4, "{isa:?} {n}");
            let h: Vec<f16> = a.iter().map(|&v| f16::from_f32(v)).collect();
            let mut got = vec![f32::NAN; n];
            f16_to_f32(isa, &h, &mut got);
            let want: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
            assert_eq!(got, want, "{isa:?} {n}");
            // And back, rounding as `f16::from_f32` (values off the f16 grid, beyond its
            // range, and subnormal).
            let wide: Vec<f32> = a
                .iter()
                .enumerate()
                .map(|(i, &v)| match i % 5 {
                    0 => v * 1e5,
                    1 => v * 1e-6,
                    _ => v * 3.1,
                })
                .collect();
            let mut got = vec![f16::NAN; n];
            f32_to_f16(isa, &wide, &mut got);
            let want: Vec<f16> = wide.iter().map(|&v| f16::from_f32(v)).collect();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{isa:?} {n}"
            );
        }
    }
}

#[test]
fn matmul_t_matches_scalar_every_m() {
    for isa in simd_paths() {
        for m in 1..=9 {
            for (rows, k) in [(1, 1), (5, 7), (9, 16), (13, 33), (6, 387)] {
                let x = rand_vec(m * k, 3);
                let w32 = rand_vec(rows * k, 4);
                let w16: Vec<f16> = w32.iter().map(|&v| f16::from_f32(v)).collect();
                for w in [WRows::F32(&w32), WRows::F16(&w16)] {
                    let mut want = vec![0.0; rows * m];
                    scalar::matmul_t(&x, m, k, w, &mut want);
                    let mut got = vec![f32::NAN; rows * m];
                    matmul_t(isa, &x, m, k, w, &mut got);
                    assert!(max_abs_diff(&got, &want) < 1e-4, "{isa:?} m {m} {rows}×{k}");
                }
            }
        }
    }
}

/// Each row of a tiled product is the same bits whatever rows come with it (greedy's one-row
/// kernel, beams' halves and quarters), on every path.
#[test]
fn matmul_tiled_rows_do_not_depend_on_the_batch() {
    let (rows, k) = (130, 517);
    let w16: Vec<f16> = rand_vec(rows * k, 5)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let tiles = crate::F16Tiles::new(&w16, rows, k).unwrap();
    let padded = rows.div_ceil(TILE_ROWS) * TILE_ROWS;
    for isa in sotto_isa::available() {
        for m in 2..=7 {
            let x = rand_vec(m * k, 6);
            let mut all = vec![f32::NAN; m * padded];
            matmul_tiled(isa, &x, m, k, tiles.data(), &mut all);
            for (i, want) in all.chunks_exact(padded).enumerate() {
                let mut one = vec![f32::NAN; padded];
                matmul_tiled(isa, &x[i * k..(i + 1) * k], 1, k, tiles.data(), &mut one);
                let same = one
                    .iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{isa:?}: row {i} of {m} differs from the row alone");
            }
        }
    }
}

#[test]
fn matmul_tiled_matches_scalar_and_rows() {
    for isa in sotto_isa::available() {
        for m in 1..=9 {
            for (rows, k) in [
                (1, 1),
                (5, 7),
                (9, 16),
                (13, 33),
                (6, 387),
                (130, 48),
                (70, 5),
            ] {
                let x = rand_vec(m * k, 3);
                let w16: Vec<f16> = rand_vec(rows * k, 4)
                    .iter()
                    .map(|&v| f16::from_f32(v))
                    .collect();
                let tiles = crate::F16Tiles::new(&w16, rows, k).unwrap();
                let padded = rows.div_ceil(TILE_ROWS) * TILE_ROWS;
                // matmul_t gives [rows, m]; the tiled product gives [m, padded].
                let mut want_t = vec![0.0; rows * m];
                scalar::matmul_t(&x, m, k, WRows::F16(&w16), &mut want_t);
                let mut reference = vec![f32::NAN; m * padded];
                scalar::matmul_tiled(&x, m, k, tiles.data(), &mut reference);
                let mut got = vec![f32::NAN; m * padded];
                matmul_tiled(isa, &x, m, k, tiles.data(), &mut got);
                let err = max_abs_diff(&got, &reference);
                assert!(err < 1e-5, "{isa:?} m {m} {rows}×{k} vs scalar: {err}");
                for (i, (g, ro)) in got
                    .chunks_exact(padded)
                    .zip(reference.chunks_exact(padded))
                    .enumerate()
                {
                    let want: Vec<f32> = (0..rows).map(|r| want_t[r * m + i]).collect();
                    let err = max_abs_diff(&g[..rows], &want);
                    assert!(err < 1e-4, "{isa:?} m {m} {rows}×{k} row {i}: {err}");
                    assert!(
                        g[rows..].iter().chain(&ro[rows..]).all(|&v| v == 0.0),
                        "padding rows"
                    );
                }
            }
        }
    }
}

#[test]
fn packed_attention_kernels_match_scalar() {
    for isa in simd_paths() {
        for g in 1..=14 {
            for (nb, dh, dhp, tk) in [
                (1, 1, 16, 1),
                (2, 5, 16, 40),
                (3, 64, 64, 70),
                (2, 17, 32, 64),
                (2, 70, 80, 33),
            ] {
                let q = rand_vec(g * (dh + 3), 1);
                let k: Vec<f16> = rand_vec(nb * dh * KEY_BLOCK, 2)
                    .iter()
                    .map(|&v| f16::from_f32(v))
                    .collect();
                let lds = nb * KEY_BLOCK + 5;
                let (mut a, mut b) = (vec![0.0; g * lds], vec![0.0; g * lds]);
                attn_scores(isa, &q, g, dh + 3, &k, dh, 0.3, &mut a, lds);
                scalar::attn_scores(&q, g, dh + 3, &k, dh, 0.3, &mut b, lds);
                assert!(max_abs_diff(&a, &b) < 1e-5, "{isa:?} scores g {g} dh {dh}");
                let scores = a;
                let v: Vec<f16> = rand_vec(tk * dhp, 3)
                    .iter()
                    .map(|&v| f16::from_f32(v))
                    .collect();
                let p = rand_vec(g * (tk + 2), 4);
                let (mut a, mut b) = (vec![0.0; g * (dhp + 1)], vec![0.0; g * (dhp + 1)]);
                attn_values(isa, &p, g, tk + 2, tk, &v, dhp, &mut a, dhp + 1);
                scalar::attn_values(&p, g, tk + 2, tk, &v, dhp, &mut b, dhp + 1);
                assert!(
                    max_abs_diff(&a, &b) < 1e-4,
                    "{isa:?} values g {g} dhp {dhp}"
                );
                // Rows in one call (the wide passes) give the bits of rows one at a time.
                for i in 0..g {
                    let mut one = vec![0.0; dhp];
                    let pi = &p[i * (tk + 2)..];
                    attn_values(isa, pi, 1, tk + 2, tk, &v, dhp, &mut one, dhp);
                    let row = &a[i * (dhp + 1)..][..dhp];
                    assert_eq!(row, &one[..], "{isa:?} values row {i} of {g}");
                    let mut one = vec![0.0; lds];
                    attn_scores(
                        isa,
                        &q[i * (dh + 3)..],
                        1,
                        dh + 3,
                        &k,
                        dh,
                        0.3,
                        &mut one,
                        lds,
                    );
                    let n = nb * KEY_BLOCK;
                    assert_eq!(
                        scores[i * lds..][..n],
                        one[..n],
                        "{isa:?} scores row {i} of {g}"
                    );
                }
            }
        }
    }
}

#[test]
fn row_ops_match_scalar() {
    for isa in simd_paths() {
        for n in LENS {
            let x: Vec<f32> = rand_vec(n, 5).iter().map(|v| v * 8.0).collect();
            assert_eq!(max(isa, &x), scalar::max(&x), "{isa:?} {n}");

            let (mut a, mut b) = (x.clone(), x.clone());
            let m = scalar::max(&x);
            let (sa, sb) = (exp_sub_sum(isa, &mut a, m), scalar::exp_sub_sum(&mut b, m));
            assert!((sa - sb).abs() < 1e-5 * sb.abs(), "{isa:?} {n}");
            assert!(max_abs_diff(&a, &b) < 1e-6, "{isa:?} {n}");

            let (mut a, mut b) = (x.clone(), x.clone());
            scale(isa, &mut a, 0.3);
            scalar::scale(&mut b, 0.3);
            assert_eq!(a, b);

            let y = rand_vec(n, 6);
            let (mut a, mut b) = (x.clone(), x.clone());
            axpy(isa, 0.7, &y, &mut a);
            scalar::axpy(0.7, &y, &mut b);
            assert!(max_abs_diff(&a, &b) < 1e-6, "{isa:?} {n}");

            let (mut a, mut b) = (x.clone(), x.clone());
            add(isa, &mut a, &y);
            scalar::add(&mut b, &y);
            assert_eq!(a, b);

            let (mut a, mut b) = (x.clone(), x.clone());
            gelu(isa, &mut a);
            scalar::gelu(&mut b);
            assert!(max_abs_diff(&a, &b) < 2e-6, "{isa:?} {n}");

            let (g, be) = (rand_vec(n, 7), rand_vec(n, 8));
            let (mut a, mut b) = (vec![0.0; n], vec![0.0; n]);
            layer_norm(isa, &x, &g, &be, 1e-5, &mut a);
            scalar::layer_norm(&x, &g, &be, 1e-5, &mut b);
            assert!(max_abs_diff(&a, &b) < 1e-5, "{isa:?} {n}");
        }
    }
}

#[test]
fn strided_rows_match_scalar() {
    for isa in simd_paths() {
        for (rows, n, ld) in [
            (1, 1, 1),
            (5, 17, 20),
            (9, 64, 384),
            (3, 33, 33),
            (7, 80, 100),
            (4, 130, 131),
        ] {
            let q = rand_vec(n, 1);
            let k = rand_vec((rows - 1) * ld + n, 2);
            let (mut a, mut b) = (vec![0.0; rows], vec![0.0; rows]);
            dot_rows(isa, &q, &k, ld, 0.5, &mut a);
            scalar::dot_rows(&q, &k, ld, 0.5, &mut b);
            assert!(max_abs_diff(&a, &b) < 1e-5, "{isa:?}");
            let p = rand_vec(rows, 3);
            let (mut a, mut b) = (rand_vec(n, 4), rand_vec(n, 4));
            axpy_rows(isa, &p, &k, ld, &mut a);
            scalar::axpy_rows(&p, &k, ld, &mut b);
            assert!(max_abs_diff(&a, &b) < 1e-5, "{isa:?}");
        }
    }
}

/// The AVX-512 and AVX2 value sums keep each column's fused multiply-adds in order of rows:
/// the bits of the one-row-at-a-time loop (what `few_queries` and its shared-prefix twin
/// rely on).
#[test]
fn axpy_rows_keeps_the_order_of_rows() {
    let paths: Vec<Isa> = [Isa::Avx512, Isa::Avx2]
        .into_iter()
        .filter(|i| i.is_supported())
        .collect();
    if paths.is_empty() {
        eprintln!("skipped: no AVX2 or AVX-512");
    }
    for (isa, (rows, n, ld)) in paths.into_iter().flat_map(|isa| {
        [
            (1, 1, 1),
            (300, 64, 384),
            (17, 80, 100),
            (5, 130, 131),
            (3, 7, 9),
        ]
        .map(|c| (isa, c))
    }) {
        let (p, v) = (rand_vec(rows, 3), rand_vec((rows - 1) * ld + n, 2));
        let (mut a, mut b) = (rand_vec(n, 4), rand_vec(n, 4));
        axpy_rows(isa, &p, &v, ld, &mut a);
        for (j, &pj) in p.iter().enumerate() {
            for (c, o) in b.iter_mut().enumerate() {
                *o = pj.mul_add(v[j * ld + c], *o);
            }
        }
        assert_eq!(a, b, "{isa:?}: {rows} rows of {n}");
    }
}

#[test]
fn exp_and_gelu_edges() {
    for isa in sotto_isa::available() {
        let mut x = vec![
            f32::NEG_INFINITY,
            -100.0,
            -87.5,
            -20.0,
            0.0,
            1.0,
            30.0,
            80.0,
            0.5,
        ];
        let s = exp_sub_sum(isa, &mut x, 0.0);
        assert!(x[0] == 0.0 && x[1] < 1e-37 && x[2] < 1e-37, "{isa:?} {x:?}");
        assert!((x[6] / 30f32.exp() - 1.0).abs() < 1e-6 && (x[7] / 80f32.exp() - 1.0).abs() < 1e-6);
        assert!((s / x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        let mut row = vec![f32::NEG_INFINITY; 19];
        softmax(isa, &mut row);
        assert_eq!(row, vec![0.0; 19]);
        let mut g: Vec<f32> = (-60..=60).map(|i| i as f32 * 0.25).collect();
        let want: Vec<f32> = g
            .iter()
            .map(|&v| {
                let v = v as f64;
                (0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))) as f32
            })
            .collect();
        gelu(isa, &mut g);
        assert!(max_abs_diff(&g, &want) < 2e-6, "{isa:?}");
    }
}

#[test]
fn unsupported_paths_fall_back() {
    for isa in [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512] {
        assert!(checked(isa).is_supported());
        assert_eq!(dot(isa, &[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
    }
}

#[test]
fn gelu_dense_sweep() {
    // Every path against GELU in f64 on a dense grid through erf's curved part and past
    // its clamp: absolute error under 1e-6 (a few f32 ulps of the larger outputs).
    let xs: Vec<f32> = (-120_000..=120_000).map(|i| i as f32 * 1e-4).collect();
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| {
            let v = v as f64;
            (0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))) as f32
        })
        .collect();
    for isa in sotto_isa::available() {
        let mut g = xs.clone();
        gelu(isa, &mut g);
        let err = max_abs_diff(&g, &want);
        assert!(err < 1e-6, "{isa:?} {err:e}");
    }
}

#[test]
fn transposes_match_scalar() {
    // (rows, cols, ld, ldd): partial 16-blocks both ways, and strides wider than the block.
    for (rows, cols, ld, ldd) in [
        (1, 1, 1, 1),
        (5, 3, 3, 7),
        (17, 33, 40, 32),
        (32, 64, 384, 32),
    ] {
        let src: Vec<f32> = rand_vec(rows * ld, 9).iter().map(|v| v * 3.1).collect();
        let mut want = vec![f16::NAN; (cols - 1) * ldd + rows];
        transpose_to_f16(Isa::Scalar, &src, ld, rows, cols, &mut want, ldd);
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(want[c * ldd + r], f16::from_f32(src[r * ld + c]));
            }
        }
        for isa in simd_paths() {
            // NaN fill: entries between columns must stay untouched.
            let mut got = vec![f16::NAN; want.len()];
            transpose_to_f16(isa, &src, ld, rows, cols, &mut got, ldd);
            let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{isa:?} {rows}×{cols}");
        }
        for isa in sotto_isa::available() {
            let mut got = vec![f32::NAN; want.len()];
            transpose(isa, &src, ld, rows, cols, &mut got, ldd);
            for (i, g) in got.iter().enumerate() {
                let (c, r) = (i / ldd, i % ldd);
                // Entries between columns stay untouched (NaN).
                let expect = if r < rows { src[r * ld + c] } else { f32::NAN };
                assert_eq!(
                    g.to_bits(),
                    expect.to_bits(),
                    "{isa:?} {rows}×{cols} at {i}"
                );
            }
        }
    }
}
