//! `y = x · Wᵀ + b`: gemm for many rows (the encoder), a row-split matvec for few (the decoder).

use rayon::prelude::*;

use crate::{shape_err, CpuBackend, Linear, Result, Weight};

/// Up to this many input rows, the matvec path streams each weight row once for all inputs.
const SMALL_M: usize = 8;

impl CpuBackend {
    /// `out = x · Wᵀ + b`.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub fn linear(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) -> Result<()> {
        if x.len() != m * w.n_in || out.len() != m * w.n_out {
            return Err(shape_err(
                "linear",
                format!(
                    "x has {} elements and out {}, expected {m}×{} and {m}×{}",
                    x.len(),
                    out.len(),
                    w.n_in,
                    w.n_out
                ),
            ));
        }
        if m == 0 || w.n_out == 0 {
            return Ok(());
        }
        if m <= SMALL_M {
            self.install(|| matvec(x, m, w, out));
        } else {
            self.install(|| self.gemm_linear(x, m, w, out));
        }
        Ok(())
    }

    fn gemm_linear(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) {
        let (n, k) = (w.n_out, w.n_in);
        let converted;
        let wf: &[f32] = match &w.weight {
            Weight::F32(v) => v,
            Weight::F16(_) => {
                let mut buf = vec![0.0f32; n * k];
                let rows = rows_per_task(n, self.threads());
                buf.par_chunks_mut(rows * k)
                    .enumerate()
                    .for_each(|(i, c)| w.weight.read_f32(i * rows * k, c));
                converted = buf;
                &converted
            }
        };
        let read_dst = match &w.bias {
            Some(b) => {
                out.par_chunks_mut(n).for_each(|row| row.copy_from_slice(b));
                true
            }
            None => false,
        };
        let par = if self.threads() > 1 {
            gemm::Parallelism::Rayon(self.threads())
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: dst is [m, n] row-major, lhs [m, k] row-major and rhs = Wᵀ (element
        // (p, j) at j*k + p) all lie inside their slices, whose lengths were checked above.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                read_dst,
                x.as_ptr(),
                1,
                k as isize,
                wf.as_ptr(),
                k as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
    }
}

fn rows_per_task(n: usize, threads: usize) -> usize {
    n.div_ceil(threads * 4).max(16)
}

/// Dot product with independent accumulators so the compiler can vectorize it.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// Few input rows: split the weight rows across threads; each converts its rows to f32
/// once and dots them with every input row. Results go to a [n_out, m] buffer first.
fn matvec(x: &[f32], m: usize, w: &Linear, out: &mut [f32]) {
    let (n, k) = (w.n_out, w.n_in);
    let rows = rows_per_task(n, rayon::current_num_threads());
    let mut out_t = vec![0.0f32; n * m];
    out_t
        .par_chunks_mut(rows * m)
        .enumerate()
        .for_each(|(ci, chunk)| {
            let mut wrow = vec![0.0f32; k];
            for (r, o) in chunk.chunks_exact_mut(m).enumerate() {
                let j = ci * rows + r;
                w.weight.read_f32(j * k, &mut wrow);
                let b = w.bias.as_ref().map_or(0.0, |b| b[j]);
                for (i, oi) in o.iter_mut().enumerate() {
                    *oi = dot(&x[i * k..(i + 1) * k], &wrow) + b;
                }
            }
        });
    for j in 0..n {
        for i in 0..m {
            out[i * n + j] = out_t[j * m + i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, rand_vec};
    use half::f16;

    fn naive(x: &[f32], m: usize, w: &[f32], b: Option<&[f32]>, n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    s += x[i * k + p] as f64 * w[j * k + p] as f64;
                }
                out[i * n + j] = s as f32 + b.map_or(0.0, |b| b[j]);
            }
        }
        out
    }

    #[test]
    fn linear_matches_naive_f32_and_f16_all_paths() {
        for threads in [1, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for &(m, n, k) in &[
                (1, 7, 13),
                (3, 33, 65),
                (5, 100, 9),
                (8, 17, 31),
                (9, 19, 23),
                (37, 71, 129),
            ] {
                let x = rand_vec(m * k, 1);
                let w32 = rand_vec(n * k, 2);
                let w16: Vec<f16> = w32.iter().map(|&v| f16::from_f32(v)).collect();
                let w16_as32: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
                let b = rand_vec(n, 3);
                for bias in [None, Some(b.clone())] {
                    let l32 = Linear::new(Weight::F32(w32.clone()), bias.clone(), n, k).unwrap();
                    let l16 = Linear::new(Weight::F16(w16.clone()), bias.clone(), n, k).unwrap();
                    let mut out = vec![f32::NAN; m * n];
                    be.linear(&x, m, &l32, &mut out).unwrap();
                    let want = naive(&x, m, &w32, bias.as_deref(), n, k);
                    assert!(max_abs_diff(&out, &want) < 1e-4, "f32 {m} {n} {k}");
                    be.linear(&x, m, &l16, &mut out).unwrap();
                    let want = naive(&x, m, &w16_as32, bias.as_deref(), n, k);
                    assert!(max_abs_diff(&out, &want) < 1e-4, "f16 {m} {n} {k}");
                }
            }
        }
    }

    #[test]
    fn linear_rejects_bad_shapes() {
        let be = CpuBackend::new(1).unwrap();
        let l = Linear::new(Weight::F32(vec![0.0; 6]), None, 2, 3).unwrap();
        let mut out = vec![0.0; 2];
        assert!(be.linear(&[0.0; 4], 1, &l, &mut out).is_err());
        assert!(Linear::new(Weight::F32(vec![0.0; 5]), None, 2, 3).is_err());
        assert!(Linear::new(Weight::F32(vec![0.0; 6]), Some(vec![0.0; 3]), 2, 3).is_err());
    }
}
