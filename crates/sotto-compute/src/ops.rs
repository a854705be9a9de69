//! Element-wise and row-wise ops: layer norm, GELU, softmax, add.

use rayon::prelude::*;

use crate::{kernels, shape_err, CpuBackend, Norm, Result};

/// Rows per parallel task for row-wise ops (small enough to balance, big enough to amortize).
const ROW_CHUNK: usize = 16;
/// Elements per parallel task for element-wise ops; smaller inputs run on the calling
/// thread (a fork/join costs more than the work).
const ELEM_CHUNK: usize = 1 << 14;

impl CpuBackend {
    /// Layer norm over the last dimension: `out = (x - mean) / sqrt(var + eps) * gamma + beta`.
    ///
    /// `x`, `out` Shape: [rows, d] with d = `norm.gamma.len()`.
    pub fn layer_norm(&self, x: &[f32], norm: &Norm, out: &mut [f32]) -> Result<()> {
        let d = norm.gamma.len();
        if d == 0 || norm.beta.len() != d || !x.len().is_multiple_of(d) || out.len() != x.len() {
            return Err(shape_err(
                "layer_norm",
                format!(
                    "x has {} elements, out {}, gamma {d}, beta {}",
                    x.len(),
                    out.len(),
                    norm.beta.len()
                ),
            ));
        }
        let isa = self.isa();
        let rows = |o: &mut [f32], xi: &[f32]| {
            for (orow, xrow) in o.chunks_exact_mut(d).zip(xi.chunks_exact(d)) {
                kernels::layer_norm(isa, xrow, &norm.gamma, &norm.beta, norm.eps, orow);
            }
        };
        if x.len() <= ELEM_CHUNK {
            rows(out, x);
        } else {
            self.install(|| {
                out.par_chunks_mut(d * ROW_CHUNK)
                    .zip(x.par_chunks(d * ROW_CHUNK))
                    .for_each(|(o, xi)| rows(o, xi))
            });
        }
        Ok(())
    }

    /// Exact (erf) GELU in place, as PyTorch's `nn.GELU()`.
    pub fn gelu(&self, x: &mut [f32]) {
        let isa = self.isa();
        if x.len() <= ELEM_CHUNK {
            kernels::gelu(isa, x);
        } else {
            self.install(|| {
                x.par_chunks_mut(ELEM_CHUNK)
                    .for_each(|c| kernels::gelu(isa, c))
            });
        }
    }

    /// Softmax of each row in place. `x` Shape: [rows, n_cols].
    pub fn softmax_rows(&self, x: &mut [f32], n_cols: usize) -> Result<()> {
        if n_cols == 0 || !x.len().is_multiple_of(n_cols) {
            return Err(shape_err(
                "softmax_rows",
                format!("{} elements in rows of {n_cols}", x.len()),
            ));
        }
        let isa = self.isa();
        let rows = |c: &mut [f32]| {
            c.chunks_exact_mut(n_cols)
                .for_each(|r| kernels::softmax(isa, r))
        };
        if x.len() <= ELEM_CHUNK {
            rows(x);
        } else {
            self.install(|| x.par_chunks_mut(n_cols * ROW_CHUNK).for_each(rows));
        }
        Ok(())
    }

    /// `a += b` element-wise.
    pub fn add(&self, a: &mut [f32], b: &[f32]) -> Result<()> {
        if a.len() != b.len() {
            return Err(shape_err(
                "add",
                format!("lengths {} and {}", a.len(), b.len()),
            ));
        }
        let isa = self.isa();
        if a.len() <= ELEM_CHUNK {
            kernels::add(isa, a, b);
        } else {
            self.install(|| {
                a.par_chunks_mut(ELEM_CHUNK)
                    .zip(b.par_chunks(ELEM_CHUNK))
                    .for_each(|(a, b)| kernels::add(isa, a, b))
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, rand_vec};

    #[test]
    fn layer_norm_matches_naive() {
        let be = CpuBackend::new(2).unwrap();
        for &(rows, d) in &[(1, 1), (3, 7), (37, 384), (100, 65)] {
            let x: Vec<f32> = rand_vec(rows * d, 5)
                .iter()
                .map(|v| v * 3.0 + 0.5)
                .collect();
            let norm = Norm {
                gamma: rand_vec(d, 6),
                beta: rand_vec(d, 7),
                eps: 1e-5,
            };
            let mut out = vec![0.0; rows * d];
            be.layer_norm(&x, &norm, &mut out).unwrap();
            let mut want = vec![0.0; rows * d];
            for r in 0..rows {
                let row = &x[r * d..(r + 1) * d];
                let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
                let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
                for c in 0..d {
                    let n = (row[c] as f64 - mean) / (var + 1e-5).sqrt();
                    want[r * d + c] = (n * norm.gamma[c] as f64 + norm.beta[c] as f64) as f32;
                }
            }
            assert!(max_abs_diff(&out, &want) < 1e-4, "{rows}×{d}");
        }
        let norm = Norm {
            gamma: vec![1.0; 4],
            beta: vec![0.0; 4],
            eps: 1e-5,
        };
        assert!(be.layer_norm(&[0.0; 6], &norm, &mut [0.0; 6]).is_err());
    }

    #[test]
    fn gelu_matches_known_values() {
        let be = CpuBackend::new(2).unwrap();
        // 0.5·x·(1 + erf(x/√2)) in f64 (what torch.nn.GELU() computes), rounded to f32.
        let mut x = vec![-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0];
        let want = [
            -0.004_049_694,
            -0.158_655_26,
            -0.154_268_77,
            0.0,
            0.345_731_23,
            0.841_344_8,
            2.995_950_2,
        ];
        be.gelu(&mut x);
        assert!(max_abs_diff(&x, &want) < 1e-6, "{x:?}");
        // An odd length that spans several parallel chunks.
        let mut big = rand_vec(ELEM_CHUNK * 2 + 3, 9);
        let want: Vec<f32> = big
            .iter()
            .map(|&v| {
                let v = v as f64;
                (0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2))) as f32
            })
            .collect();
        be.gelu(&mut big);
        assert!(max_abs_diff(&big, &want) < 1e-6);
    }

    #[test]
    fn softmax_rows_matches_naive() {
        let be = CpuBackend::new(2).unwrap();
        for &(rows, n) in &[(1, 1), (5, 3), (40, 1501)] {
            let x: Vec<f32> = rand_vec(rows * n, 11).iter().map(|v| v * 20.0).collect();
            let mut y = x.clone();
            be.softmax_rows(&mut y, n).unwrap();
            for r in 0..rows {
                let row = &x[r * n..(r + 1) * n];
                let m = row.iter().copied().fold(f32::MIN, f32::max) as f64;
                let s: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
                for c in 0..n {
                    let want = ((x[r * n + c] as f64 - m).exp() / s) as f32;
                    assert!((y[r * n + c] - want).abs() < 1e-6);
                }
            }
        }
        let mut masked = vec![f32::NEG_INFINITY; 4];
        be.softmax_rows(&mut masked, 4).unwrap();
        assert_eq!(masked, vec![0.0; 4]);
        assert!(be.softmax_rows(&mut [0.0; 5], 2).is_err());
    }

    #[test]
    fn add_matches_naive() {
        let be = CpuBackend::new(2).unwrap();
        let a0 = rand_vec(ELEM_CHUNK + 5, 1);
        let b = rand_vec(ELEM_CHUNK + 5, 2);
        let mut a = a0.clone();
        be.add(&mut a, &b).unwrap();
        let want: Vec<f32> = a0.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(a, want);
        assert!(be.add(&mut a, &b[1..]).is_err());
    }
}
