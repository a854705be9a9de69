//! Watching the inputs of linear products: what `sotto quantize --calibrate` needs to see
//! how a model's activations move (see `sotto_quant::GptqFactor`). A backend without a
//! probe pays one branch per product.

use std::sync::Arc;

use crate::{CpuBackend, Linear};

/// Sees the input of every linear product a [`CpuBackend`] runs, before the product.
pub trait LinearProbe: Send + Sync {
    /// `x` (Shape: [m, n_in]) is the input every weight in `weights` meets in this call.
    fn observe(&self, weights: &[&Linear], x: &[f32], m: usize);
}

impl CpuBackend {
    /// Calls `probe` with the input of every later linear product.
    pub fn set_probe(&mut self, probe: Option<Arc<dyn LinearProbe>>) {
        self.probe = probe;
    }

    #[inline]
    pub(crate) fn observe(&self, weights: &[&Linear], x: &[f32], m: usize) {
        if let Some(p) = &self.probe {
            p.observe(weights, x, m);
        }
    }
}

/// `out += xᵀ·x` for `x` Shape: [m, n] (so `out` Shape: [n, n]): the inputs' second
/// moments. Many rows are summed in f32 per call (the gemm crate, on the calling rayon
/// pool) and added to `out` in f64, so long calibration runs do not lose the small terms.
pub fn accumulate_gram(x: &[f32], m: usize, n: usize, out: &mut [f64]) {
    assert!(
        x.len() == m * n && out.len() == n * n,
        "accumulate_gram: {} values for [{m}, {n}], {} for [{n}, {n}]",
        x.len(),
        out.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if m <= 16 {
        // A decoder step's few rows: a direct rank-m update, no temporary.
        for r in x.chunks_exact(n) {
            for (&a, orow) in r.iter().zip(out.chunks_exact_mut(n)) {
                let a = a as f64;
                for (o, &b) in orow.iter_mut().zip(r) {
                    *o += a * b as f64;
                }
            }
        }
        return;
    }
    let mut g = vec![0.0f32; n * n];
    // SAFETY: every pointer, stride and extent describes the slices checked above.
    unsafe {
        gemm::gemm(
            n,
            n,
            m,
            g.as_mut_ptr(),
            1,
            n as isize,
            false,
            // xᵀ: element (i, k) is x[k·n + i].
            x.as_ptr(),
            n as isize,
            1,
            x.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
    }
    for (o, &v) in out.iter_mut().zip(&g) {
        *o += v as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gram_matches_the_definition() {
        for m in [3, 37] {
            gram_case(m, 19);
        }
    }

    fn gram_case(m: usize, n: usize) {
        let x: Vec<f32> = (0..m * n)
            .map(|k| ((k * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut h = vec![1.0f64; n * n];
        accumulate_gram(&x, m, n, &mut h);
        for i in 0..n {
            for j in 0..n {
                let want: f64 = 1.0
                    + (0..m)
                        .map(|k| x[k * n + i] as f64 * x[k * n + j] as f64)
                        .sum::<f64>();
                assert!((h[i * n + j] - want).abs() < 1e-4 * want.abs().max(1.0));
            }
        }
    }
}
