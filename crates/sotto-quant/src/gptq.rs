//! GPTQ (Frantar et al., 2022, "Accurate post-training quantization for generative
//! pre-trained transformers") in ggml's block formats: the same bytes layout, so
//! whisper.cpp reads the result, with codes chosen to keep a layer's *outputs* close on
//! real inputs instead of each weight close on its own.
//!
//! From calibration inputs `X` of a linear layer, `H = Σ x xᵀ` says how the input
//! dimensions move together. Each row of `W` is quantized one input column at a time; the
//! rounding error of column `i` is spread over the columns not yet quantized, along row `i`
//! of `U`, the upper Cholesky factor of `H⁻¹`, which is the least-squares correction of the
//! row's output for that error. A block's grid (scale, minimum) is fitted when the
//! quantization reaches the block, on the already corrected values, weighting each value by
//! its input's energy `H_ii` (the diagonal of the output error; weighting by the values'
//! size as well, as `--refine` does without statistics, measured worse, and fixing the
//! grids first to quantize the loudest inputs first, GPTQ's "act order", worse again).
//!
//! Rows are independent given `U`, so they run in parallel; `U` is computed once per `H`
//! ([`GptqFactor`]) and serves every weight that meets the same inputs (q, k and v).

use rayon::prelude::*;

use crate::refine::Grid;
use crate::QuantType;

const QK: usize = QuantType::BLOCK;

/// Dampening added to `H`'s diagonal, relative to its mean. It keeps `H` invertible when
/// the calibration rows do not span every input direction (a decoder layer sees a few
/// hundred tokens), and it keeps the corrections from fitting the calibration audio too
/// closely. GPTQ's default is 0.01; on tiny.en q4_0 (teacher-forced KL to f16 over the
/// shared clips the calibration did not use) 0.01 gave 0.142, 0.1 gave 0.096, 0.3 0.097,
/// 1.0 0.107; scaling it with columns per calibration row was worse than a flat 0.1.
const DAMP: f64 = 0.1;

/// Why a factor could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GptqError {
    #[error("input statistics: {0}")]
    Input(String),
    #[error("input statistics are not positive definite, even dampened")]
    NotPositiveDefinite,
}

/// `U`, the upper Cholesky factor of a layer's dampened `H⁻¹`, and the per-input weights
/// the block grids are fitted with.
#[derive(Debug, Clone)]
pub struct GptqFactor {
    n: usize,
    /// Shape: [n, n] row-major, upper triangle used.
    u: Vec<f32>,
    /// `H_ii` dampened, per input.
    importance: Vec<f64>,
}

impl GptqFactor {
    /// Factors `h` (Shape: [n, n], symmetric positive semi-definite: a sum of `x xᵀ`).
    /// Inputs that were always zero get the mean diagonal, so their weights are rounded
    /// as they are and pass no error on.
    pub fn new(h: &[f64], n: usize) -> Result<Self, GptqError> {
        if n == 0 || h.len() != n * n {
            return Err(GptqError::Input(format!(
                "{} values for a {n}×{n} matrix",
                h.len()
            )));
        }
        if let Some(bad) = h.iter().find(|v| !v.is_finite()) {
            return Err(GptqError::Input(format!("a value is {bad}")));
        }
        let diag: Vec<f64> = (0..n).map(|i| h[i * n + i]).collect();
        let live: Vec<f64> = diag.iter().copied().filter(|&d| d > 0.0).collect();
        let mean = if live.is_empty() {
            1.0
        } else {
            live.iter().sum::<f64>() / live.len() as f64
        };
        let mut damp = DAMP * mean;
        for _ in 0..5 {
            let fill = |i: usize| if diag[i] > 0.0 { diag[i] } else { mean } + damp;
            // H with its index order reversed: then U = P·L⁻¹·P where L is the lower
            // Cholesky factor of the reversed matrix, one factorisation and one triangular
            // inverse instead of inverting H and factoring again.
            let mut a = vec![0.0f64; n * n];
            for i in 0..n {
                for j in 0..=i {
                    a[i * n + j] = if i == j {
                        fill(n - 1 - i)
                    } else {
                        h[(n - 1 - i) * n + (n - 1 - j)]
                    };
                }
            }
            if cholesky(&mut a, n) {
                let t = lower_inverse_transposed(&a, n);
                let mut u = vec![0.0f32; n * n];
                for i in 0..n {
                    for j in i..n {
                        // U[i][j] = L⁻¹[n−1−i][n−1−j] = T[n−1−j][n−1−i].
                        u[i * n + j] = t[(n - 1 - j) * n + (n - 1 - i)] as f32;
                    }
                }
                let importance = (0..n).map(fill).collect();
                return Ok(GptqFactor { n, u, importance });
            }
            damp *= 10.0;
        }
        Err(GptqError::NotPositiveDefinite)
    }

    /// Quantizes `w` (Shape: [rows, n] row-major) into `out` (`rows · t.row_bytes(n)`
    /// bytes) in `t`'s format. Panics on lengths that do not match, or for q8_1 (an
    /// activation type).
    pub fn quantize(&self, t: QuantType, w: &[f32], out: &mut [u8]) {
        assert!(t != QuantType::Q8_1, "q8_1 is not a weight type");
        let n = self.n;
        let row_bytes = t.row_bytes(n);
        assert!(
            w.len().is_multiple_of(n) && out.len() == w.len() / n * row_bytes,
            "gptq: {} values and {} bytes for {t} rows of {n}",
            w.len(),
            out.len()
        );
        w.par_chunks_exact(n)
            .zip(out.par_chunks_exact_mut(row_bytes))
            .for_each_init(
                || vec![0.0f32; n],
                |row, (src, dst)| {
                    row.copy_from_slice(src);
                    self.quantize_row(t, row, dst);
                },
            );
    }

    /// One row, corrected in place as its columns are quantized.
    fn quantize_row(&self, t: QuantType, row: &mut [f32], out: &mut [u8]) {
        let n = self.n;
        let bb = t.block_bytes();
        for (b, y) in out.chunks_exact_mut(bb).enumerate() {
            let g0 = b * QK;
            let x = &row[g0..g0 + QK];
            let grid = Grid::fit(t, x, &self.importance[g0..g0 + QK]);
            let mut codes = [0i32; QK];
            for (j, c) in codes.iter_mut().enumerate() {
                let i = g0 + j;
                *c = grid.code(row[i]);
                let err = (row[i] - grid.value(*c)) / self.u[i * n + i];
                if err.is_finite() && err != 0.0 {
                    for (r, &u) in row[i + 1..]
                        .iter_mut()
                        .zip(&self.u[i * n + i + 1..(i + 1) * n])
                    {
                        *r -= err * u;
                    }
                }
            }
            grid.store(t, &codes, y);
        }
    }
}

/// In-place lower Cholesky factor of `a` (lower triangle read and written); false when a
/// pivot is not positive.
fn cholesky(a: &mut [f64], n: usize) -> bool {
    for i in 0..n {
        for j in 0..=i {
            let (head, tail) = a.split_at_mut(i * n);
            let ri = &tail[..n];
            let rj = if j == i { ri } else { &head[j * n..j * n + n] };
            let s = ri[j] - dot(&ri[..j], &rj[..j]);
            if i == j {
                if s.is_nan() || s <= 0.0 {
                    return false;
                }
                tail[i] = s.sqrt();
            } else {
                let pivot = head[j * n + j];
                tail[j] = s / pivot;
            }
        }
    }
    true
}

/// `(L⁻¹)ᵀ` of a lower-triangular `l` (Shape: [n, n]), row-major: row `j` is column `j` of
/// `L⁻¹`, so both operands of every dot product are contiguous. Columns are independent.
fn lower_inverse_transposed(l: &[f64], n: usize) -> Vec<f64> {
    let mut t = vec![0.0f64; n * n];
    t.par_chunks_exact_mut(n).enumerate().for_each(|(j, col)| {
        col[j] = 1.0 / l[j * n + j];
        for i in j + 1..n {
            let li = &l[i * n..i * n + n];
            col[i] = -dot(&li[j..i], &col[j..i]) / li[i];
        }
    });
    t
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    // Four partial sums, so the loop vectorizes.
    let mut s = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let tail: f64 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            s[k] += x[k] * y[k];
        }
    }
    s.iter().sum::<f64>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);
    impl Rng {
        fn uniform(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        }
        fn normal(&mut self) -> f32 {
            (0..4).map(|_| self.uniform()).sum::<f32>()
        }
    }

    /// `rows` inputs of width `n` that move together (a few shared factors plus noise,
    /// some inputs much louder than others), as a layer's activations do.
    fn correlated_inputs(rows: usize, n: usize, rng: &mut Rng) -> Vec<f32> {
        let k = 8;
        let mix: Vec<f32> = (0..k * n).map(|_| rng.normal()).collect();
        let loud: Vec<f32> = (0..n).map(|i| if i % 7 == 0 { 4.0 } else { 1.0 }).collect();
        let mut x = vec![0.0f32; rows * n];
        for r in 0..rows {
            let f: Vec<f32> = (0..k).map(|_| rng.normal()).collect();
            for i in 0..n {
                let shared: f32 = (0..k).map(|c| f[c] * mix[c * n + i]).sum();
                x[r * n + i] = loud[i] * (shared + 0.3 * rng.normal());
            }
        }
        x
    }

    fn gram(x: &[f32], n: usize) -> Vec<f64> {
        let mut h = vec![0.0f64; n * n];
        for r in x.chunks_exact(n) {
            for i in 0..n {
                for j in 0..n {
                    h[i * n + j] += r[i] as f64 * r[j] as f64;
                }
            }
        }
        h
    }

    /// Σ over inputs and rows of (x·w − x·ŵ)²: the layer's output error.
    fn output_error(x: &[f32], w: &[f32], wq: &[f32], n: usize) -> f64 {
        let mut e = 0.0;
        for xr in x.chunks_exact(n) {
            for (a, b) in w.chunks_exact(n).zip(wq.chunks_exact(n)) {
                let d: f64 = xr
                    .iter()
                    .zip(a.iter().zip(b))
                    .map(|(&xi, (&ai, &bi))| xi as f64 * (ai - bi) as f64)
                    .sum();
                e += d * d;
            }
        }
        e
    }

    #[test]
    fn u_is_the_upper_factor_of_the_inverse() {
        let n = 40;
        let mut rng = Rng(3);
        let x = correlated_inputs(200, n, &mut rng);
        let h = gram(&x, n);
        let f = GptqFactor::new(&h, n).unwrap();
        // Uᵀ·U·(H + damp·I) = I.
        let damp = f.importance[0] - h[0];
        for i in 0..n {
            for j in 0..n {
                let mut s = 0.0f64;
                for k in 0..n {
                    let hk = h[k * n + j] + if k == j { damp } else { 0.0 };
                    let uu: f64 = (0..=i.min(k))
                        .map(|l| f.u[l * n + i] as f64 * f.u[l * n + k] as f64)
                        .sum();
                    s += uu * hk;
                }
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((s - want).abs() < 1e-3, "({i},{j}): {s}");
            }
        }
    }

    #[test]
    fn lower_output_error_than_rounding_each_weight() {
        let (n, rows) = (128, 24);
        let mut rng = Rng(11);
        let x = correlated_inputs(512, n, &mut rng);
        let w: Vec<f32> = (0..rows * n).map(|_| 0.05 * rng.normal()).collect();
        let f = GptqFactor::new(&gram(&x, n), n).unwrap();
        for t in QuantType::WEIGHTS {
            let mut plain = vec![0u8; rows * t.row_bytes(n)];
            let mut gptq = plain.clone();
            for (src, dst) in w
                .chunks_exact(n)
                .zip(plain.chunks_exact_mut(t.row_bytes(n)))
            {
                crate::quantize_row_refined(t, src, dst);
            }
            f.quantize(t, &w, &mut gptq);
            let (mut a, mut b) = (vec![0.0f32; w.len()], vec![0.0f32; w.len()]);
            crate::dequantize_row(t, &plain, &mut a);
            crate::dequantize_row(t, &gptq, &mut b);
            let (e0, e1) = (output_error(&x, &w, &a, n), output_error(&x, &w, &b, n));
            eprintln!(
                "{t}: output error {e0:.3e} → {e1:.3e} ({:.0}%)",
                100.0 * e1 / e0
            );
            assert!(e1 < 0.8 * e0, "{t}: gptq {e1} vs per-weight {e0}");
        }
    }

    #[test]
    fn uncorrelated_inputs_round_each_weight() {
        // With H diagonal no error is passed on: every weight is its grid's nearest code.
        let n = 64;
        let h: Vec<f64> = (0..n * n)
            .map(|k| {
                if k % (n + 1) == 0 {
                    1.0 + (k % 5) as f64
                } else {
                    0.0
                }
            })
            .collect();
        let f = GptqFactor::new(&h, n).unwrap();
        let mut rng = Rng(5);
        let w: Vec<f32> = (0..3 * n).map(|_| rng.normal()).collect();
        let t = QuantType::Q4_0;
        let mut q = vec![0u8; 3 * t.row_bytes(n)];
        f.quantize(t, &w, &mut q);
        let mut back = vec![0.0f32; w.len()];
        crate::dequantize_row(t, &q, &mut back);
        for (b, (xb, yb)) in w.chunks_exact(QK).zip(back.chunks_exact(QK)).enumerate() {
            let d = half::f16::from_le_bytes([q[b * 18], q[b * 18 + 1]])
                .to_f32()
                .abs();
            for (&v, &y) in xb.iter().zip(yb) {
                assert!(
                    (v - y).abs() <= d * 0.5 + 1e-6 || (v / d).abs() > 7.5,
                    "{v} → {y}"
                );
            }
        }
    }

    #[test]
    fn bad_statistics_are_errors() {
        assert!(GptqFactor::new(&[1.0; 3], 2).is_err());
        assert!(GptqFactor::new(&[1.0, f64::NAN, f64::NAN, 1.0], 2).is_err());
        // All zero (an input never seen): factored as the identity.
        let f = GptqFactor::new(&[0.0; 4], 2).unwrap();
        assert_eq!(f.u[1], 0.0);
    }
}
