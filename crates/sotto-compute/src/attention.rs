//! Multi-head scaled dot-product attention, parallel over heads × query blocks.

use rayon::prelude::*;

use crate::{ops::softmax_row, shape_err, CpuBackend, Result};

/// Query rows per parallel task.
const Q_BLOCK: usize = 64;

/// Which keys each query may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Every query sees every key.
    None,
    /// Query row i sits at absolute position `q_pos0 + i` and sees keys `0..=q_pos0 + i`.
    Causal { q_pos0: usize },
}

impl CpuBackend {
    /// `out = softmax(Q_h K_hᵀ / sqrt(d_head) + mask) V_h` per head h, heads concatenated.
    ///
    /// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        n_head: usize,
        mask: Mask,
        out: &mut [f32],
    ) -> Result<()> {
        let d = q.len().checked_div(tq).unwrap_or(0);
        if tq == 0 || n_head == 0 || d == 0 || d % n_head != 0 || q.len() != tq * d {
            return Err(shape_err(
                "attention",
                format!(
                    "q has {} elements for {tq} rows and {n_head} heads",
                    q.len()
                ),
            ));
        }
        if tk == 0 || k.len() != tk * d || v.len() != tk * d || out.len() != tq * d {
            return Err(shape_err(
                "attention",
                format!(
                    "k {}, v {}, out {} elements for tk {tk}, tq {tq}, d {d}",
                    k.len(),
                    v.len(),
                    out.len()
                ),
            ));
        }
        if let Mask::Causal { q_pos0 } = mask {
            if q_pos0 + tq > tk {
                return Err(shape_err(
                    "attention",
                    format!("causal queries up to {} but only {tk} keys", q_pos0 + tq),
                ));
            }
        }
        let dh = d / n_head;
        let scale = 1.0 / (dh as f32).sqrt();
        let n_blocks = tq.div_ceil(Q_BLOCK);
        let blocks: Vec<(usize, usize, Vec<f32>)> = self.install(|| {
            (0..n_head * n_blocks)
                .into_par_iter()
                .map(|task| {
                    let (h, b) = (task / n_blocks, task % n_blocks);
                    let i0 = b * Q_BLOCK;
                    let i1 = (i0 + Q_BLOCK).min(tq);
                    (
                        h,
                        i0,
                        head_block(q, k, v, d, h * dh, dh, i0, i1, tk, mask, scale),
                    )
                })
                .collect()
        });
        for (h, i0, o) in blocks {
            for (r, row) in o.chunks_exact(dh).enumerate() {
                let at = (i0 + r) * d + h * dh;
                out[at..at + dh].copy_from_slice(row);
            }
        }
        Ok(())
    }
}

/// One head (columns `c0..c0 + dh`) for query rows `i0..i1`. Returns Shape: [i1 − i0, dh].
#[allow(clippy::too_many_arguments)]
fn head_block(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    d: usize,
    c0: usize,
    dh: usize,
    i0: usize,
    i1: usize,
    tk: usize,
    mask: Mask,
    scale: f32,
) -> Vec<f32> {
    let bq = i1 - i0;
    // Keys past the last query's position are masked for every row: skip them.
    let tk = match mask {
        Mask::None => tk,
        Mask::Causal { q_pos0 } => (q_pos0 + i1).min(tk),
    };
    let mut scores = vec![0.0f32; bq * tk];
    // SAFETY: dst is [bq, tk] row-major in `scores`; lhs reads q[(i0 + r)·d + c0 + p] and rhs
    // k[j·d + c0 + p] for r < bq, p < dh, j < tk, all in bounds as checked by the caller.
    unsafe {
        gemm::gemm(
            bq,
            tk,
            dh,
            scores.as_mut_ptr(),
            1,
            tk as isize,
            false,
            q.as_ptr().add(i0 * d + c0),
            1,
            d as isize,
            k.as_ptr().add(c0),
            d as isize,
            1,
            0.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    for (r, row) in scores.chunks_exact_mut(tk).enumerate() {
        if let Mask::Causal { q_pos0 } = mask {
            row[(q_pos0 + i0 + r + 1).min(tk)..].fill(f32::NEG_INFINITY);
        }
        softmax_row(row);
    }
    let mut out = vec![0.0f32; bq * dh];
    // SAFETY: dst is [bq, dh] in `out`; lhs is `scores` [bq, tk]; rhs reads v[j·d + c0 + c]
    // for j < tk, c < dh, in bounds as checked by the caller.
    unsafe {
        gemm::gemm(
            bq,
            dh,
            tk,
            out.as_mut_ptr(),
            1,
            dh as isize,
            false,
            scores.as_ptr(),
            1,
            tk as isize,
            v.as_ptr().add(c0),
            1,
            d as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, rand_vec};

    #[allow(clippy::too_many_arguments)]
    fn naive(
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        nh: usize,
        pos0: Option<usize>,
    ) -> Vec<f32> {
        let d = q.len() / tq;
        let dh = d / nh;
        let mut out = vec![0.0f32; tq * d];
        for h in 0..nh {
            for i in 0..tq {
                let lim = pos0.map_or(tk, |p| p + i + 1);
                let s: Vec<f64> = (0..lim)
                    .map(|j| {
                        (0..dh)
                            .map(|c| q[i * d + h * dh + c] as f64 * k[j * d + h * dh + c] as f64)
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dh {
                    let o: f64 = (0..lim)
                        .map(|j| e[j] / z * v[j * d + h * dh + c] as f64)
                        .sum();
                    out[i * d + h * dh + c] = o as f32;
                }
            }
        }
        out
    }

    #[test]
    fn attention_matches_naive() {
        let be = CpuBackend::new(3).unwrap();
        // (tq, tk, n_head, d_head, causal q_pos0)
        let cases = [
            (1, 1, 1, 1, None),
            (3, 5, 2, 3, None),
            (70, 130, 3, 8, None),
            (5, 9, 2, 4, Some(4)),
            (1, 7, 3, 5, Some(6)),
            (67, 67, 2, 6, Some(0)),
        ];
        for (tq, tk, nh, dh, pos0) in cases {
            let d = nh * dh;
            let q = rand_vec(tq * d, 1)
                .iter()
                .map(|x| x * 3.0)
                .collect::<Vec<_>>();
            let k = rand_vec(tk * d, 2);
            let v = rand_vec(tk * d, 3);
            let mask = pos0.map_or(Mask::None, |q_pos0| Mask::Causal { q_pos0 });
            let mut out = vec![f32::NAN; tq * d];
            be.attention(&q, tq, &k, &v, tk, nh, mask, &mut out)
                .unwrap();
            let want = naive(&q, tq, &k, &v, tk, nh, pos0);
            assert!(
                max_abs_diff(&out, &want) < 1e-5,
                "{tq} {tk} {nh} {dh} {pos0:?}"
            );
        }
    }

    #[test]
    fn attention_rejects_bad_shapes() {
        let be = CpuBackend::new(1).unwrap();
        let mut out = vec![0.0; 4];
        assert!(be
            .attention(
                &[0.0; 4],
                1,
                &[0.0; 4],
                &[0.0; 4],
                1,
                3,
                Mask::None,
                &mut out
            )
            .is_err());
        assert!(be
            .attention(
                &[0.0; 4],
                1,
                &[0.0; 8],
                &[0.0; 4],
                2,
                2,
                Mask::None,
                &mut out
            )
            .is_err());
        let causal = Mask::Causal { q_pos0: 2 };
        assert!(be
            .attention(&[0.0; 4], 1, &[0.0; 8], &[0.0; 8], 2, 2, causal, &mut out)
            .is_err());
    }
}
