//! Grouped weights ([`QuantTiles`]) and their kernels: exact round trip of the ggml bytes,
//! and every path against the scalar oracle and against per-row `vec_dot_ref`.

use sotto_quant::{
    dequantize_row, quantize_activations, quantize_row, tiled_matmul, tiled_matmul_ref,
    tiled_matmul_split, tiled_matmul_variant, vec_dot_ref, Isa, QuantActs, QuantTiles, QuantType,
    GROUP_ROWS,
};

/// Deterministic values in [-scale, scale) (xorshift32).
fn data(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            ((s as f64 / u32::MAX as f64) * 2.0 - 1.0) as f32 * scale
        })
        .collect()
}

/// `n` rows of `k` values with varied block scales, zero and constant blocks, quantized.
fn rows(t: QuantType, n: usize, k: usize, seed: u32) -> Vec<u8> {
    let mut x = data(n * k, seed, 1.0);
    for (b, block) in x.chunks_mut(32).enumerate() {
        let scale = [1.0, 1e-3, 40.0, 0.25, 3.0][b % 5];
        block.iter_mut().for_each(|v| *v *= scale);
        match b % 11 {
            3 => block.fill(0.0),
            7 => block.fill(-0.75),
            _ => {}
        }
    }
    let rb = t.row_bytes(k);
    let mut q = vec![0u8; n * rb];
    for (xr, qr) in x.chunks_exact(k).zip(q.chunks_exact_mut(rb)) {
        quantize_row(t, xr, qr);
    }
    q
}

fn dequantized(t: QuantType, q: &[u8], n: usize, k: usize) -> Vec<f32> {
    let mut y = vec![0.0; n * k];
    for (qr, yr) in q.chunks_exact(t.row_bytes(k)).zip(y.chunks_exact_mut(k)) {
        dequantize_row(t, qr, yr);
    }
    y
}

/// Σ over the row of |each term the kernels add| (for q4_1/q5_1 the code part and the
/// offset part separately: the block offset is the block's smallest value): the scale of
/// the rounding error another summation order can make.
fn magnitude(t: QuantType, w: &[f32], x: &[f32]) -> f32 {
    let offset_type = matches!(t, QuantType::Q4_1 | QuantType::Q5_1);
    w.chunks(32)
        .zip(x.chunks(32))
        .map(|(wb, xb)| {
            let m = if offset_type {
                wb.iter().copied().fold(f32::MAX, f32::min)
            } else {
                0.0
            };
            wb.iter()
                .zip(xb)
                .map(|(w, x)| ((w - m).abs() + m.abs()) * x.abs())
                .sum::<f32>()
        })
        .sum()
}

#[test]
fn tiles_give_back_the_ggml_rows_and_values() {
    for t in QuantType::WEIGHTS {
        for (n, k) in [(1, 32), (16, 64), (37, 96), (50, 384)] {
            let q = rows(t, n, k, (n + k) as u32);
            let tiles = QuantTiles::new(t, &q, n, k);
            assert_eq!(tiles.groups(), n.div_ceil(GROUP_ROWS));
            assert_eq!(tiles.data().len(), tiles.groups() * tiles.group_bytes());
            let rb = t.row_bytes(k);
            let mut row = vec![0u8; rb];
            for r in 0..n {
                tiles.row_bytes_into(r, &mut row);
                assert_eq!(row, q[r * rb..(r + 1) * rb], "{t} {n}×{k} row {r}");
            }
            let want = dequantized(t, &q, n, k);
            let mut all = vec![f32::NAN; n * k];
            tiles.read_f32(0, &mut all);
            assert!(all == want, "{t} {n}×{k}: whole matrix");
            // Ranges inside a block, across blocks, rows and groups, and one row (an
            // embedding lookup).
            for (s, e) in [(5, 9), (k - 3, k + 40), (k / 2, n * k - k / 3), (0, n * k)] {
                let e = e.min(n * k);
                let mut part = vec![f32::NAN; e - s];
                tiles.read_f32(s, &mut part);
                assert!(part == want[s..e], "{t} {n}×{k} {s}..{e}");
            }
            let mut last = vec![f32::NAN; k];
            tiles.read_f32((n - 1) * k, &mut last);
            assert!(last == want[(n - 1) * k..], "{t} {n}×{k} last row");
            tiles.read_f32(n * k, &mut []);
        }
    }
}

/// Two planes built group by group are the planes `new` makes from the same rows, and
/// each group's finding comes back in group order.
#[test]
fn pair_from_groups_equals_two_planes_from_rows() {
    for t in QuantType::WEIGHTS {
        for (n, k) in [(1, 32), (16, 64), (37, 96), (50, 384)] {
            let rb = t.row_bytes(k);
            let (qa, qb) = (rows(t, n, k, 3), rows(t, n, k, 4));
            let (a, b, found) = QuantTiles::pair_from_groups(
                t,
                n,
                k,
                || (),
                |_, g, ra, rb_| {
                    let r0 = g * GROUP_ROWS * rb;
                    assert!(ra.iter().chain(rb_.iter()).all(|&v| v == 0), "zeroed first");
                    ra.copy_from_slice(&qa[r0..r0 + ra.len()]);
                    rb_.copy_from_slice(&qb[r0..r0 + rb_.len()]);
                    (g, ra.len() / rb)
                },
            );
            assert_eq!(
                a.data(),
                QuantTiles::new(t, &qa, n, k).data(),
                "{t} {n}×{k} a"
            );
            assert_eq!(
                b.data(),
                QuantTiles::new(t, &qb, n, k).data(),
                "{t} {n}×{k} b"
            );
            let want: Vec<_> = (0..n.div_ceil(GROUP_ROWS))
                .map(|g| (g, GROUP_ROWS.min(n - g * GROUP_ROWS)))
                .collect();
            assert_eq!(found, want, "{t} {n}×{k}");
        }
    }
}

/// Every path (the ISA dispatch and the AVX2 / VNNI kernels directly) for the groups in
/// `groups`, written with a padded leading dimension.
fn all_paths(
    w: &QuantTiles,
    groups: std::ops::Range<usize>,
    acts: &QuantActs,
    ldo: usize,
) -> Vec<(String, Vec<f32>)> {
    let m = acts.m();
    let mut got = Vec::new();
    for isa in sotto_isa::available() {
        let mut out = vec![f32::NAN; m * ldo];
        tiled_matmul(isa, w, groups.clone(), acts, &mut out, ldo);
        got.push((isa.name().to_string(), out));
    }
    for vnni in [false, true] {
        let mut out = vec![f32::NAN; m * ldo];
        if tiled_matmul_variant(vnni, w, groups.clone(), acts, &mut out, ldo) {
            got.push((format!("kernel vnni={vnni}"), out));
        }
    }
    got
}

#[test]
fn every_path_matches_the_oracle_and_vec_dot() {
    let n = 37; // three groups, the last one partial
    for t in QuantType::WEIGHTS {
        for k in [32, 64, 96, 384, 1536] {
            let q = rows(t, n, k, k as u32);
            let w = QuantTiles::new(t, &q, n, k);
            let rb = t.row_bytes(k);
            let ab = t.activation_type().row_bytes(k);
            let ng = w.groups();
            let deq = dequantized(t, &q, n, k);
            // Up to 10 rows run in one VNNI pass; 11 takes a second.
            for m in 1..=11 {
                let x = data(m * k, (7 * m + k) as u32, 3.0);
                let mut acts = QuantActs::new();
                acts.quantize(t, &x, m, k);
                let ldo = ng * GROUP_ROWS + 3;
                let mut want = vec![f32::NAN; m * ldo];
                tiled_matmul_ref(&w, 0..ng, &acts, &mut want, ldo);
                let mag = |i: usize, r: usize| {
                    if r >= n {
                        return 0.0;
                    }
                    magnitude(t, &deq[r * k..(r + 1) * k], &x[i * k..(i + 1) * k])
                };
                // The oracle against ggml's per-row dot products.
                let mut act = vec![0u8; ab];
                for i in 0..m {
                    quantize_activations(t, &x[i * k..(i + 1) * k], &mut act);
                    for r in 0..ng * GROUP_ROWS {
                        let v = want[i * ldo + r];
                        if r >= n {
                            assert_eq!(v, 0.0, "{t} k={k} padding row {r}");
                            continue;
                        }
                        let d = vec_dot_ref(t, k, &q[r * rb..(r + 1) * rb], &act);
                        assert!(
                            (v - d).abs() <= 1e-5 * mag(i, r) + 1e-6,
                            "{t} k={k} m={m} row {r} input {i}: {v} vs vec_dot_ref {d}"
                        );
                    }
                }
                for (path, out) in all_paths(&w, 0..ng, &acts, ldo) {
                    for i in 0..m {
                        for r in 0..ng * GROUP_ROWS {
                            let (v, o) = (out[i * ldo + r], want[i * ldo + r]);
                            assert!(
                                (v - o).abs() <= 2e-6 * mag(i, r) + 1e-6,
                                "{t} k={k} m={m} {path} row {r} input {i}: {v} vs {o}"
                            );
                        }
                        let tail = &out[i * ldo + ng * GROUP_ROWS..(i + 1) * ldo];
                        assert!(
                            tail.iter().all(|v| v.is_nan()),
                            "{path} wrote past its columns"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_range_of_groups_lands_at_column_zero() {
    let (t, n, k, m) = (QuantType::Q5_1, 70, 64, 3);
    let q = rows(t, n, k, 9);
    let w = QuantTiles::new(t, &q, n, k);
    let x = data(m * k, 4, 1.0);
    let mut acts = QuantActs::new();
    acts.quantize(t, &x, m, k);
    let ng = w.groups();
    let mut full = vec![0.0; m * ng * GROUP_ROWS];
    tiled_matmul_ref(&w, 0..ng, &acts, &mut full, ng * GROUP_ROWS);
    let ldo = 2 * GROUP_ROWS;
    for (path, part) in all_paths(&w, 1..3, &acts, ldo) {
        for i in 0..m {
            let want = &full[i * ng * GROUP_ROWS + GROUP_ROWS..][..ldo];
            let got = &part[i * ldo..(i + 1) * ldo];
            for (a, b) in got.iter().zip(want) {
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{path}: {a} vs {b}"
                );
            }
        }
    }
    // Reusing the activations buffer for another type and size re-quantizes it.
    acts.quantize(QuantType::Q8_0, &x[..k], 1, k);
    assert_eq!((acts.m(), acts.weight_type()), (1, Some(QuantType::Q8_0)));
}

#[test]
#[should_panic(expected = "activations for")]
fn activations_for_another_type_panic() {
    let w = QuantTiles::new(QuantType::Q4_0, &[0u8; 18], 1, 32);
    let mut acts = QuantActs::new();
    acts.quantize(QuantType::Q4_1, &[0.0; 32], 1, 32);
    tiled_matmul(Isa::Scalar, &w, 0..1, &acts, &mut [0.0; 16], 16);
}

#[test]
fn dequantized_activations_are_what_the_kernels_multiply() {
    let (m, k) = (3, 96);
    let x = data(m * k, 11, 5.0);
    for t in QuantType::WEIGHTS {
        let mut acts = QuantActs::new();
        acts.quantize(t, &x, m, k);
        let at = t.activation_type();
        let mut bytes = vec![0u8; at.row_bytes(k)];
        let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
        for i in 0..m {
            quantize_activations(t, &x[i * k..(i + 1) * k], &mut bytes);
            dequantize_row(at, &bytes, &mut want);
            acts.dequantize(i, &mut got);
            assert_eq!(got, want, "{t} row {i}");
        }
    }
}

#[test]
fn whole_rows_read_as_read_f32_gives_them() {
    let (n, k) = (37, 96);
    for t in QuantType::WEIGHTS {
        let w = QuantTiles::new(t, &rows(t, n, k, 5), n, k);
        let (mut a, mut b) = (vec![0f32; k], vec![0f32; k]);
        for r in 0..n {
            w.row_f32(r, &mut a);
            w.read_f32(r * k, &mut b);
            assert_eq!(a, b, "{t} row {r}");
        }
    }
}

/// Split activations ([`QuantActs::split_q8`]): each pair sums to within 1/256 of a q8_0
/// step of the input, and a path that takes each pair whole gives the sum of the oracle's
/// two rows, for a range of groups landing at column 0, one pass and two.
#[test]
fn split_pairs_stay_close_and_whole_pairs_match_their_two_rows() {
    let (t, n) = (QuantType::Q8_0, 37);
    for k in [32, 96, 384] {
        let q = rows(t, n, k, 3 * k as u32);
        let w = QuantTiles::new(t, &q, n, k);
        let deq = dequantized(t, &q, n, k);
        let ng = w.groups();
        for m in [1, 2, 5, 7] {
            let mut x = data(m * k, (m + k) as u32, 2.0);
            // An outlier, a zero block, a tiny block and a rounding tie.
            x[k / 3] = 140.0;
            x[..32].fill(0.0);
            if k > 32 {
                x[32..64].iter_mut().for_each(|v| *v *= 1e-6);
            }
            x[k - 1] = 0.5 * x[k - 32..k].iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            let mut acts = QuantActs::new();
            acts.split_q8(&x, m, k);
            assert_eq!((acts.m(), acts.k()), (2 * m, k));
            let (mut a, mut b) = (vec![0.0; k], vec![0.0; k]);
            let mut tilde = vec![0.0; m * k];
            for i in 0..m {
                acts.dequantize(2 * i, &mut a);
                acts.dequantize(2 * i + 1, &mut b);
                for (j, (t, (a, b))) in tilde[i * k..].iter_mut().zip(a.iter().zip(&b)).enumerate()
                {
                    *t = a + b;
                    let blk = &x[i * k + j / 32 * 32..][..32];
                    let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let err = (*t - x[i * k + j]).abs();
                    assert!(
                        err <= amax / 127.0 / 256.0 * 1.001,
                        "k={k} m={m} {i},{j}: {err}"
                    );
                }
            }
            let ldo = ng * GROUP_ROWS + 3;
            let mut parts = vec![f32::NAN; 2 * m * ldo];
            tiled_matmul_ref(&w, 0..ng, &acts, &mut parts, ldo);
            for isa in sotto_isa::available() {
                for g0 in [0, 1] {
                    let mut out = vec![f32::NAN; m * ldo];
                    if !tiled_matmul_split(isa, &w, g0..ng, &acts, &mut out, ldo) {
                        assert!(
                            out.iter().all(|v| v.is_nan()),
                            "{isa:?}: declined but wrote"
                        );
                        continue;
                    }
                    for i in 0..m {
                        for r in g0 * GROUP_ROWS..ng * GROUP_ROWS {
                            let got = out[i * ldo + r - g0 * GROUP_ROWS];
                            let want = parts[2 * i * ldo + r] + parts[(2 * i + 1) * ldo + r];
                            let mag = if r < n {
                                magnitude(t, &deq[r * k..(r + 1) * k], &tilde[i * k..(i + 1) * k])
                            } else {
                                0.0
                            };
                            assert!(
                                (got - want).abs() <= 2e-6 * mag + 1e-6,
                                "{isa:?} k={k} m={m} groups {g0}.. row {r} input {i}: {got} vs {want}"
                            );
                        }
                        let cols = (ng - g0) * GROUP_ROWS;
                        assert!(out[i * ldo + cols..(i + 1) * ldo]
                            .iter()
                            .all(|v| v.is_nan()));
                    }
                }
            }
        }
    }
}
