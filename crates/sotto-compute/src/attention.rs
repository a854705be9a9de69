//! Multi-head scaled dot-product attention, parallel over heads × query blocks, with keys
//! tiled and an online softmax (flash attention) so no score matrix is materialized.

use rayon::prelude::*;

use crate::{kernels, shape_err, CpuBackend, Isa, Result};

/// Query rows per parallel task.
const Q_BLOCK: usize = 64;
/// Up to this many query rows (decoding), a head is done with dot products and axpys:
/// gemm would pack every K and V tile for a single row.
const SMALL_Q: usize = 8;
/// Keys per tile of the online softmax: a [Q_BLOCK, K_TILE] score tile stays in L2.
const K_TILE: usize = 256;

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
        self.attention_batch(q, 1, tq, k, v, 0, tk, n_head, mask, out)
    }

    /// [`CpuBackend::attention`] for `batch` sequences in one parallel pass (one fork/join
    /// for all beams): sequence s has queries `q[s·tq·d..][..tq·d]` and keys and values
    /// `k[s·stride..][..tk·d]` (`v` alike), and writes `out[s·tq·d..][..tq·d]`.
    ///
    /// `q`, `out` Shape: [batch, tq, d]; `k`, `v` Shape: [(batch − 1) · stride + tk · d].
    #[allow(clippy::too_many_arguments)]
    pub fn attention_batch(
        &self,
        q: &[f32],
        batch: usize,
        tq: usize,
        k: &[f32],
        v: &[f32],
        stride: usize,
        tk: usize,
        n_head: usize,
        mask: Mask,
        out: &mut [f32],
    ) -> Result<()> {
        let rows = batch * tq;
        let d = q.len().checked_div(rows).unwrap_or(0);
        if rows == 0 || n_head == 0 || d == 0 || !d.is_multiple_of(n_head) || q.len() != rows * d {
            return Err(shape_err(
                "attention",
                format!(
                    "q has {} elements for {batch}×{tq} rows and {n_head} heads",
                    q.len()
                ),
            ));
        }
        let kv_len = (batch - 1) * stride + tk * d;
        if tk == 0
            || (batch > 1 && stride < tk * d)
            || k.len() != kv_len
            || v.len() != kv_len
            || out.len() != rows * d
        {
            return Err(shape_err(
                "attention",
                format!(
                    "k {}, v {}, out {} elements for batch {batch}, stride {stride}, tk {tk}, \
                     tq {tq}, d {d}",
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
        let per_seq = n_head * n_blocks;
        let isa = self.isa();
        let task = |t: usize| {
            let (s, h, b) = (t / per_seq, t % per_seq / n_blocks, t % n_blocks);
            let (q, kv) = (&q[s * tq * d..][..tq * d], s * stride..s * stride + tk * d);
            let i0 = b * Q_BLOCK;
            let i1 = (i0 + Q_BLOCK).min(tq);
            let (k, v) = (&k[kv.clone()], &v[kv]);
            let o = head_block(isa, q, k, v, d, h * dh, dh, i0, i1, tk, mask, scale);
            (s * tq + i0, h, o)
        };
        let blocks: Vec<(usize, usize, Vec<f32>)> = if batch * per_seq == 1 {
            vec![task(0)]
        } else {
            self.install(|| (0..batch * per_seq).into_par_iter().map(task).collect())
        };
        for (r0, h, o) in blocks {
            for (r, row) in o.chunks_exact(dh).enumerate() {
                let at = (r0 + r) * d + h * dh;
                out[at..at + dh].copy_from_slice(row);
            }
        }
        Ok(())
    }
}

/// One head (columns `c0..c0 + dh`) for query rows `i0..i1`, flash style: keys in tiles of
/// [`K_TILE`] with an online softmax, so no [tq, tk] score matrix is ever held.
/// Returns Shape: [i1 − i0, dh].
#[allow(clippy::too_many_arguments)]
fn head_block(
    isa: Isa,
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
    if bq <= SMALL_Q {
        return few_queries(isa, q, k, v, d, c0, dh, i0, i1, tk, mask, scale);
    }
    let mut out = vec![0.0f32; bq * dh];
    let mut scores = vec![0.0f32; bq * K_TILE.min(tk)];
    // Running row max and softmax denominator.
    let mut row_max = vec![f32::NEG_INFINITY; bq];
    let mut row_sum = vec![0.0f32; bq];
    for j0 in (0..tk).step_by(K_TILE) {
        let nk = K_TILE.min(tk - j0);
        let s = &mut scores[..bq * nk];
        // SAFETY: dst is [bq, nk] row-major in `s`; lhs reads q[(i0 + r)·d + c0 + p] and rhs
        // k[(j0 + j)·d + c0 + p] for r < bq, p < dh, j < nk, in bounds as the caller checked.
        unsafe {
            gemm::gemm(
                bq,
                nk,
                dh,
                s.as_mut_ptr(),
                1,
                nk as isize,
                false,
                q.as_ptr().add(i0 * d + c0),
                1,
                d as isize,
                k.as_ptr().add(j0 * d + c0),
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
        for (r, row) in s.chunks_exact_mut(nk).enumerate() {
            if let Mask::Causal { q_pos0 } = mask {
                let lim = (q_pos0 + i0 + r + 1).saturating_sub(j0).min(nk);
                row[lim..].fill(f32::NEG_INFINITY);
            }
            let m_new = kernels::max(isa, row).max(row_max[r]);
            if m_new == f32::NEG_INFINITY {
                row.fill(0.0);
                continue;
            }
            let corr = (row_max[r] - m_new).exp();
            row_sum[r] = row_sum[r] * corr + kernels::exp_sub_sum(isa, row, m_new);
            row_max[r] = m_new;
            if corr != 1.0 {
                kernels::scale(isa, &mut out[r * dh..(r + 1) * dh], corr);
            }
        }
        // SAFETY: dst is [bq, dh] in `out`; lhs is `s` [bq, nk]; rhs reads
        // v[(j0 + j)·d + c0 + c] for j < nk, c < dh, in bounds as the caller checked.
        unsafe {
            gemm::gemm(
                bq,
                dh,
                nk,
                out.as_mut_ptr(),
                1,
                dh as isize,
                true,
                s.as_ptr(),
                1,
                nk as isize,
                v.as_ptr().add(j0 * d + c0),
                1,
                d as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
    for (o, &l) in out.chunks_exact_mut(dh).zip(&row_sum) {
        // A fully masked row has l = 0 and stays all zeros.
        if l > 0.0 {
            kernels::scale(isa, o, 1.0 / l);
        }
    }
    out
}

/// [`head_block`] for a few query rows: one [tk] score row at a time (at most 1500 floats
/// for Whisper), then `out = Σ_j p_j · v_j`. `tk` is already cut to the causal limit.
#[allow(clippy::too_many_arguments)]
fn few_queries(
    isa: Isa,
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
    let mut out = vec![0.0f32; (i1 - i0) * dh];
    let mut scores = vec![0.0f32; tk];
    for (r, o) in out.chunks_exact_mut(dh).enumerate() {
        let i = i0 + r;
        let lim = match mask {
            Mask::None => tk,
            Mask::Causal { q_pos0 } => (q_pos0 + i + 1).min(tk),
        };
        let qi = &q[i * d + c0..i * d + c0 + dh];
        let s = &mut scores[..lim];
        kernels::dot_rows(isa, qi, &k[c0..], d, scale, s);
        kernels::softmax(isa, s);
        kernels::axpy_rows(isa, s, &v[c0..], d, o);
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
        for isa in sotto_isa::available() {
            attention_cases(&CpuBackend::with_isa(3, isa).unwrap());
        }
    }

    fn attention_cases(be: &CpuBackend) {
        // (tq, tk, n_head, d_head, causal q_pos0)
        let cases = [
            (1, 1, 1, 1, None),
            (3, 5, 2, 3, None),
            (70, 130, 3, 8, None),
            (5, 9, 2, 4, Some(4)),
            (1, 7, 3, 5, Some(6)),
            (67, 67, 2, 6, Some(0)),
            (3, 600, 2, 5, None),
            (2, 520, 1, 4, Some(518)),
            (70, 300, 1, 3, Some(230)),
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
                "{:?} {tq} {tk} {nh} {dh} {pos0:?}",
                be.isa()
            );
        }
    }

    #[test]
    fn attention_batch_matches_one_sequence_at_a_time() {
        let be = CpuBackend::new(2).unwrap();
        for (batch, tq, tk, nh, dh, pos0) in
            [(3, 1, 9, 2, 5, 8), (2, 3, 70, 3, 4, 67), (1, 2, 5, 1, 3, 3)]
        {
            let (d, cap) = (nh * dh, tk + 4);
            let stride = cap * d;
            let q = rand_vec(batch * tq * d, 1);
            let kv_len = (batch - 1) * stride + tk * d;
            let (k, v) = (rand_vec(kv_len, 2), rand_vec(kv_len, 3));
            let mask = Mask::Causal { q_pos0: pos0 };
            let mut out = vec![f32::NAN; batch * tq * d];
            be.attention_batch(&q, batch, tq, &k, &v, stride, tk, nh, mask, &mut out)
                .unwrap();
            for s in 0..batch {
                let (qs, kv) = (&q[s * tq * d..][..tq * d], s * stride..s * stride + tk * d);
                let mut want = vec![f32::NAN; tq * d];
                be.attention(qs, tq, &k[kv.clone()], &v[kv], tk, nh, mask, &mut want)
                    .unwrap();
                assert_eq!(out[s * tq * d..][..tq * d], want, "batch {batch} seq {s}");
            }
            let short = &k[..kv_len - 1];
            assert!(be
                .attention_batch(&q, batch, tq, short, &v, stride, tk, nh, mask, &mut out)
                .is_err());
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
