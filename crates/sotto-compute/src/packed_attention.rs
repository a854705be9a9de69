//! Attention against keys and values that many steps read: Whisper's cross-attention over
//! the encoder output. They are packed once per window as f16, per head, in the layouts
//! the decode kernels stream (half the bytes of f32, one contiguous run per head).

use std::cell::RefCell;

use half::f16;
use rayon::prelude::*;

use crate::kernels::{self, KEY_BLOCK, VALUE_ALIGN};
use crate::{shape_err, CpuBackend, Isa, OutPtr, Result};

/// Query rows per parallel task (and per pass over a head's keys and values).
const Q_CHUNK: usize = 24;

thread_local! {
    /// Per-thread scores and outputs of one task, kept between calls.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Sizes this thread's [`SCRATCH`] for cross-attention over `shapes.audio_keys` keys.
pub(crate) fn reserve_thread(shapes: &crate::DecodeShapes) {
    let dh = shapes.d / shapes.n_head.max(1);
    let n = scratch_len(shapes.audio_keys, dh);
    SCRATCH.with_borrow_mut(|v| v.reserve(n.saturating_sub(v.len())));
}

/// A task's scratch: [`Q_CHUNK`] rows of scores over `tk` keys (whole key blocks), of
/// `dh` outputs (padded), and of inverse sums.
fn scratch_len(tk: usize, dh: usize) -> usize {
    Q_CHUNK * (tk.div_ceil(KEY_BLOCK) * KEY_BLOCK + dh.next_multiple_of(VALUE_ALIGN) + 1)
}

/// Keys and values of `n_head` heads over `tk` positions, f16.
#[derive(Clone, Debug)]
pub struct PackedKv {
    /// Shape: [n_head, nb, dh, KEY_BLOCK], nb = ceil(tk / KEY_BLOCK); keys past tk are 0.
    k: Vec<f16>,
    /// Shape: [n_head, tk, dhp], dhp = dh rounded up to VALUE_ALIGN; padding columns are 0.
    v: Vec<f16>,
    tk: usize,
    n_head: usize,
    dh: usize,
}

impl PackedKv {
    /// Zeroed storage for `tk` positions of width `d = n_head · dh`.
    pub fn new(tk: usize, n_head: usize, d: usize) -> Result<Self> {
        if tk == 0 || n_head == 0 || d == 0 || !d.is_multiple_of(n_head) {
            return Err(shape_err(
                "packed kv",
                format!("{tk} positions of width {d} in {n_head} heads"),
            ));
        }
        let dh = d / n_head;
        let (nb, dhp) = (tk.div_ceil(KEY_BLOCK), dh.next_multiple_of(VALUE_ALIGN));
        Ok(Self {
            k: vec![f16::ZERO; n_head * nb * dh * KEY_BLOCK],
            v: vec![f16::ZERO; n_head * tk * dhp],
            tk,
            n_head,
            dh,
        })
    }

    pub fn tk(&self) -> usize {
        self.tk
    }

    pub fn n_head(&self) -> usize {
        self.n_head
    }

    /// Width of a position: n_head · d_head.
    pub fn d(&self) -> usize {
        self.n_head * self.dh
    }

    fn nb(&self) -> usize {
        self.tk.div_ceil(KEY_BLOCK)
    }

    fn dhp(&self) -> usize {
        self.dh.next_multiple_of(VALUE_ALIGN)
    }

    /// Head h's keys. Shape: [nb, dh, KEY_BLOCK].
    fn head_k(&self, h: usize) -> &[f16] {
        let n = self.nb() * self.dh * KEY_BLOCK;
        &self.k[h * n..(h + 1) * n]
    }

    /// Head h's values. Shape: [tk, dhp].
    fn head_v(&self, h: usize) -> &[f16] {
        let n = self.tk * self.dhp();
        &self.v[h * n..(h + 1) * n]
    }

    /// Packs `k` and `v` (Shape: [tk, d] each, f32), rounding to f16 on kernel path `isa`,
    /// heads in parallel on the current rayon pool (call it inside [`CpuBackend::install`]).
    pub fn pack(&mut self, isa: Isa, k: &[f32], v: &[f32]) -> Result<()> {
        let (tk, d, dh, dhp, nb) = (self.tk, self.d(), self.dh, self.dhp(), self.nb());
        if k.len() != tk * d || v.len() != tk * d {
            return Err(shape_err(
                "packed kv",
                format!("k {} and v {} values for {tk}×{d}", k.len(), v.len()),
            ));
        }
        // Blocks of KEY_BLOCK positions in parallel (on the caller's pool; a base window
        // packs 9 M values), each reading its rows of k and v front to back, all heads at
        // once: per head, the rows' 2 KiB stride left every load waiting on memory.
        let kb = dh * KEY_BLOCK;
        type Dst<'a> = (Vec<&'a mut [f16]>, Vec<&'a mut [f16]>);
        let mut blocks: Vec<Dst> = (0..nb).map(|_| (Vec::new(), Vec::new())).collect();
        for kh in self.k.chunks_exact_mut(nb * kb) {
            for (blk, dst) in blocks.iter_mut().zip(kh.chunks_exact_mut(kb)) {
                blk.0.push(dst);
            }
        }
        for vh in self.v.chunks_exact_mut(tk * dhp) {
            for (blk, dst) in blocks.iter_mut().zip(vh.chunks_mut(KEY_BLOCK * dhp)) {
                blk.1.push(dst);
            }
        }
        blocks
            .into_par_iter()
            .enumerate()
            .for_each(|(b, (mut kd, mut vd))| {
                let (j0, j1) = (b * KEY_BLOCK, tk.min((b + 1) * KEY_BLOCK));
                // Keys: each head's [rows, dh] block turned into its [dh, KEY_BLOCK]
                // columns. Keys past tk stay zero from `new`.
                for (h, dst) in kd.iter_mut().enumerate() {
                    let src = &k[j0 * d + h * dh..(j1 - 1) * d + (h + 1) * dh];
                    kernels::transpose_to_f16(isa, src, d, j1 - j0, dh, dst, KEY_BLOCK);
                }
                for (jj, j) in (j0..j1).enumerate() {
                    let src = &v[j * d..(j + 1) * d];
                    for (head, dst) in src.chunks_exact(dh).zip(vd.iter_mut()) {
                        kernels::f32_to_f16(isa, head, &mut dst[jj * dhp..jj * dhp + dh]);
                    }
                }
            });
        Ok(())
    }
}

impl CpuBackend {
    /// `out = softmax(Q_h K_hᵀ / sqrt(d_head)) V_h` per head h against packed keys and
    /// values, heads concatenated; no mask.
    ///
    /// `q`, `out` Shape: [tq, d] with d = `kv.d()`.
    pub fn attention_packed(
        &self,
        q: &[f32],
        tq: usize,
        kv: &PackedKv,
        out: &mut [f32],
    ) -> Result<()> {
        let d = kv.d();
        if tq == 0 || q.len() != tq * d || out.len() != tq * d {
            return Err(shape_err(
                "attention_packed",
                format!(
                    "q {} and out {} values for {tq} rows of {d}",
                    q.len(),
                    out.len()
                ),
            ));
        }
        let (isa, dh, dhp, tk) = (self.isa(), kv.dh, kv.dhp(), kv.tk);
        let lds = kv.nb() * KEY_BLOCK;
        let scale = 1.0 / (dh as f32).sqrt();
        let chunks = tq.div_ceil(Q_CHUNK);
        let dst = OutPtr(out.as_mut_ptr());
        let task = |t: usize| {
            let (h, i0) = (t / chunks, t % chunks * Q_CHUNK);
            let n = Q_CHUNK.min(tq - i0);
            SCRATCH.with_borrow_mut(|buf| {
                buf.resize(scratch_len(tk, dh), 0.0);
                let (s, rest) = buf.split_at_mut(Q_CHUNK * lds);
                let (o, inv) = rest.split_at_mut(Q_CHUNK * dhp);
                let qh = &q[i0 * d + h * dh..];
                kernels::attn_scores(isa, qh, n, d, kv.head_k(h), dh, scale, s, lds);
                for (row, iv) in s.chunks_exact_mut(lds).zip(inv.iter_mut()).take(n) {
                    let row = &mut row[..tk];
                    let m = kernels::max(isa, row);
                    *iv = 1.0 / kernels::exp_sub_sum(isa, row, m);
                }
                kernels::attn_values(isa, s, n, lds, tk, kv.head_v(h), dhp, o, dhp);
                for (r, (orow, &iv)) in o.chunks_exact(dhp).zip(inv.iter()).take(n).enumerate() {
                    for (c, &x) in orow[..dh].iter().enumerate() {
                        // SAFETY: row i0 + r < tq and column h·dh + c < d lie in `out`
                        // ([tq, d]); tasks own disjoint (row chunk, head) blocks.
                        unsafe { *dst.at((i0 + r) * d + h * dh + c) = x * iv };
                    }
                }
            })
        };
        let tasks = kv.n_head * chunks;
        if self.threads() == 1 {
            (0..tasks).for_each(task);
        } else {
            self.install(|| (0..tasks).into_par_iter().for_each(task));
        }
        Ok(())
    }

    /// Head `head`'s attention scores before the softmax, `q_i · k_j / sqrt(d_head)`.
    ///
    /// `q` Shape: [tq, d]; `out` Shape: [tq, kv.tk()].
    pub fn attention_scores_packed(
        &self,
        q: &[f32],
        tq: usize,
        kv: &PackedKv,
        head: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let (d, tk) = (kv.d(), kv.tk);
        if head >= kv.n_head || q.len() != tq * d || out.len() != tq * tk {
            return Err(shape_err(
                "attention_scores_packed",
                format!(
                    "head {head} of {}, q {} and out {} values for {tq} rows",
                    kv.n_head,
                    q.len(),
                    out.len()
                ),
            ));
        }
        let (dh, lds) = (kv.dh, kv.nb() * KEY_BLOCK);
        let scale = 1.0 / (dh as f32).sqrt();
        let mut s = vec![0.0f32; lds];
        for (i, row) in out.chunks_exact_mut(tk).enumerate() {
            let qi = &q[i * d + head * dh..];
            kernels::attn_scores(
                self.isa(),
                qi,
                1,
                d,
                kv.head_k(head),
                dh,
                scale,
                &mut s,
                lds,
            );
            row.copy_from_slice(&s[..tk]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, rand_vec};
    use crate::Mask;

    fn rounded(x: &[f32]) -> Vec<f32> {
        x.iter().map(|&v| f16::from_f32(v).to_f32()).collect()
    }

    #[test]
    fn packed_matches_attention_on_rounded_kv() {
        for isa in sotto_isa::available() {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            // (tq, tk, n_head, d_head)
            for (tq, tk, nh, dh) in [
                (1, 1, 1, 1),
                (5, 70, 2, 5),
                (3, 33, 3, 64),
                (30, 100, 2, 17),
            ] {
                let d = nh * dh;
                let q: Vec<f32> = rand_vec(tq * d, 1).iter().map(|x| x * 3.0).collect();
                let (k, v) = (rand_vec(tk * d, 2), rand_vec(tk * d, 3));
                let mut kv = PackedKv::new(tk, nh, d).unwrap();
                kv.pack(isa, &k, &v).unwrap();
                let mut got = vec![f32::NAN; tq * d];
                be.attention_packed(&q, tq, &kv, &mut got).unwrap();
                let (kr, vr) = (rounded(&k), rounded(&v));
                let mut want = vec![0.0; tq * d];
                be.attention(&q, tq, &kr, &vr, tk, nh, Mask::None, &mut want)
                    .unwrap();
                let err = max_abs_diff(&got, &want);
                assert!(err < 1e-5, "{isa:?} {tq} {tk} {nh} {dh}: {err}");

                let head = nh - 1;
                let mut s = vec![f32::NAN; tq * tk];
                be.attention_scores_packed(&q, tq, &kv, head, &mut s)
                    .unwrap();
                for i in 0..tq {
                    for j in 0..tk {
                        let qh = &q[i * d + head * dh..][..dh];
                        let kh = &kr[j * d + head * dh..][..dh];
                        let w: f32 =
                            qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() / (dh as f32).sqrt();
                        assert!((s[i * tk + j] - w).abs() < 1e-4, "{isa:?} score {i} {j}");
                    }
                }
            }
        }
    }

    #[test]
    fn packed_rejects_bad_shapes() {
        assert!(PackedKv::new(4, 3, 8).is_err());
        let mut kv = PackedKv::new(4, 2, 8).unwrap();
        assert!(kv.pack(Isa::Scalar, &[0.0; 32], &[0.0; 31]).is_err());
        let be = CpuBackend::new(1).unwrap();
        assert!(be
            .attention_packed(&[0.0; 8], 1, &kv, &mut [0.0; 7])
            .is_err());
        assert!(be
            .attention_scores_packed(&[0.0; 8], 1, &kv, 2, &mut [0.0; 4])
            .is_err());
    }
}
