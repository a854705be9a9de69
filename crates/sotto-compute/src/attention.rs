//! Multi-head scaled dot-product attention, parallel over heads × query blocks, with keys
//! tiled and an online softmax (flash attention) so no score matrix is materialized.

use rayon::prelude::*;

use crate::{kernels, shape_err, CpuBackend, Isa, Result};

/// Query rows per parallel task (a multiple of the SIMD tile's 6 rows; Whisper's 1500 are 25).
const Q_BLOCK: usize = 60;
/// Up to this many query rows (decoding), a head is done with dot products and axpys:
/// gemm would pack every K and V tile for a single row.
const SMALL_Q: usize = 8;
/// Keys per tile of the online softmax: a [Q_BLOCK, K_TILE] score tile stays in L2.
const K_TILE: usize = 256;

/// [`CpuBackend::attention_batch`]'s arguments: q, batch, tq, k, v, stride, tk, shared,
/// n_head, mask, out.
type BatchArgs<'a> = (
    &'a [f32],
    usize,
    usize,
    &'a [f32],
    &'a [f32],
    usize,
    usize,
    usize,
    usize,
    Mask,
    &'a mut [f32],
);

/// Levels a side of [`CpuBackend::attention_int16`]'s probabilities and values: the most
/// for which a key tile's products (768 keys on AVX2) cannot overflow the i32 sums
/// (`768 · q² ≤ i32::MAX`, as `int8::wide_qmax(768)`). Queries and keys take
/// `int8::wide_qmax(d_head)` (5 792 at 64).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const PV_QMAX: i32 = 1672;

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
        self.attention_batch(q, 1, tq, k, v, 0, tk, 0, n_head, mask, out)
    }

    /// [`CpuBackend::attention`] without a mask, for the `int16` encoder: on an AVX2
    /// backend both products run on i16 pairs (`vpmaddwd`, exact i32 sums, ~1.6× the f32
    /// FMA's rate) and the softmax between them in f32. Q·Kᵀ: each scaled query row and
    /// each key quantized per head to `wide_qmax(d_head)` levels a side (5 792 at 64);
    /// P·V: each row's probabilities per key tile and each value column to 1 672 levels,
    /// the most whose sums over a 768-key tile stay exact. ~20% faster than the f32 tiles
    /// at Whisper's shapes; elsewhere this is [`CpuBackend::attention`]. Same shapes and
    /// shape errors.
    ///
    /// `q` Shape: [tq, d]; `k`, `v` Shape: [tk, d]; `out` Shape: [tq, d]; d = n_head · d_head.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_int16(
        &self,
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        n_head: usize,
        out: &mut [f32],
    ) -> Result<()> {
        let args = (q, 1, tq, k, v, 0, tk, 0, n_head, Mask::None, out);
        self.attention_with(args, self.isa() == Isa::Avx2)
    }

    /// [`CpuBackend::attention`] for `batch` sequences in one parallel pass (one fork/join
    /// for all beams): sequence s has queries `q[s·tq·d..][..tq·d]` and keys and values
    /// `k[s·stride..][..tk·d]` (`v` alike), and writes `out[s·tq·d..][..tq·d]`.
    ///
    /// Keys and values `..shared` must be the same in every sequence (a prompt broadcast
    /// to the beams): a few-query batch reads them once, from sequence 0, for all sequences,
    /// with the same results as reading each sequence's own copy. `shared` 0 says nothing is.
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
        shared: usize,
        n_head: usize,
        mask: Mask,
        out: &mut [f32],
    ) -> Result<()> {
        let args = (q, batch, tq, k, v, stride, tk, shared, n_head, mask, out);
        self.attention_with(args, false)
    }

    /// [`CpuBackend::attention_batch`]'s body; `int_values`: the many-query AVX2 path runs
    /// P·V on 16-bit integers (see [`CpuBackend::attention_int16`]).
    fn attention_with(&self, args: BatchArgs<'_>, int_values: bool) -> Result<()> {
        let (q, batch, tq, k, v, stride, tk, shared, n_head, mask, out) = args;
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
        #[cfg(target_arch = "x86_64")]
        if matches!(self.isa(), Isa::Avx512 | Isa::Avx2) && tq > SMALL_Q {
            let shape = simd::Shape {
                batch,
                tq,
                tk,
                stride,
                d,
                n_head,
            };
            let pool = &self.scratch_f32;
            let args = (q, k, v, shape, mask, scale, out, pool);
            if self.isa() == Isa::Avx512 {
                self.install(|| simd::attention::<simd::Avx512>(args, None));
            } else {
                let int_pool = int_values.then_some(&self.scratch_pairs);
                self.install(|| simd::attention::<simd::Avx2>(args, int_pool));
            }
            return Ok(());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = int_values;
        let isa = self.isa();
        if tq <= SMALL_Q {
            self.few_query_heads(q, batch, tq, k, v, stride, tk, shared, n_head, mask, out);
            return Ok(());
        }
        let n_blocks = tq.div_ceil(Q_BLOCK);
        let per_seq = n_head * n_blocks;
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

impl CpuBackend {
    /// [`CpuBackend::attention_batch`] for at most [`SMALL_Q`] queries per sequence (decoder
    /// steps), without allocating once warm: each (sequence, head) task, or each head when
    /// the batch shares a prefix, writes its rows into a kept buffer laid out by task
    /// (Shape: [tasks, rows per task, dh]), with per-thread scores; then the rows are put
    /// in place in `out`. Arguments as [`CpuBackend::attention_batch`], already checked.
    #[allow(clippy::too_many_arguments)]
    fn few_query_heads(
        &self,
        q: &[f32],
        batch: usize,
        tq: usize,
        k: &[f32],
        v: &[f32],
        stride: usize,
        tk: usize,
        shared: usize,
        n_head: usize,
        mask: Mask,
        out: &mut [f32],
    ) {
        let (isa, d) = (self.isa(), out.len() / (batch * tq));
        let dh = d / n_head;
        let scale = 1.0 / (dh as f32).sqrt();
        // With a shared prefix one task per head covers every sequence (it reads the prefix
        // once for all); otherwise one task per (sequence, head).
        let shared = if batch > 1 { shared.min(tk) } else { 0 };
        let per_task = if shared > 0 { batch * tq } else { tq };
        let mut heads = self.scratch_f32.take_dirty();
        heads.resize(batch * tq * d, 0.0);
        let task = |(t, o): (usize, &mut [f32])| {
            SCORES.with(|cell| {
                let scores = &mut cell.borrow_mut();
                if shared > 0 {
                    let shape = (batch, tq, tk, stride, d, dh);
                    few_queries_shared(isa, q, k, v, shape, t, shared, mask, scale, scores, o);
                } else {
                    let (s, h) = (t / n_head, t % n_head);
                    let kv = s * stride..s * stride + tk * d;
                    let (q, k, v) = (&q[s * tq * d..][..tq * d], &k[kv.clone()], &v[kv]);
                    let (c0, lim) = (h * dh, tk);
                    few_queries(isa, q, k, v, d, c0, dh, 0, lim, mask, scale, scores, o);
                }
            })
        };
        let chunks = heads.chunks_exact_mut(per_task * dh).enumerate();
        if chunks.len() == 1 {
            chunks.for_each(task);
        } else {
            self.par_chunks_mut(&mut heads, per_task * dh, |t, o| task((t, o)));
        }
        for (t, o) in heads.chunks_exact(per_task * dh).enumerate() {
            // Task t's rows: sequence s's queries at head h, or head t's of every sequence.
            let (r0, h) = if shared > 0 {
                (0, t)
            } else {
                (t / n_head * tq, t % n_head)
            };
            for (r, row) in o.chunks_exact(dh).enumerate() {
                out[(r0 + r) * d + h * dh..][..dh].copy_from_slice(row);
            }
        }
        self.scratch_f32.give(heads);
    }
}

thread_local! {
    /// Each thread's score rows for [`few_queries`] and [`few_queries_shared`], kept so that
    /// decoder steps allocate nothing.
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Sizes this thread's [`SCORES`] for `shapes`: a task's rows (at most all of a step's,
/// when the batch shares a prefix) times the most keys.
pub(crate) fn reserve_thread(shapes: &crate::DecodeShapes) {
    SCORES.with_borrow_mut(|v| grow(v, shapes.rows * shapes.text_keys));
}

/// Capacity for `n` values, grown in steps of 4096 (see [`sized`]).
fn grow(v: &mut Vec<f32>, n: usize) {
    if v.capacity() < n {
        v.reserve_exact(n.next_multiple_of(4096) - v.len());
    }
}

/// `v` resized to `n`, its capacity grown in steps of 4096 values, so that a text that
/// grows by a token per step (a Whisper decoder's is at most 448, times 5 beams) reaches
/// its final size in one or two allocations rather than by doubling.
fn sized(v: &mut Vec<f32>, n: usize) {
    grow(v, n);
    v.resize(n, 0.0);
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
        let (mut scores, mut out) = (Vec::new(), vec![0.0f32; bq * dh]);
        few_queries(
            isa,
            q,
            k,
            v,
            d,
            c0,
            dh,
            i0,
            tk,
            mask,
            scale,
            &mut scores,
            &mut out,
        );
        return out;
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

/// [`head_block`] for a few query rows `i0..` (as many as `out` holds, Shape: [rows, dh]):
/// one [tk] score row at a time (at most 1500 floats for Whisper) in `scores`, then
/// `out = Σ_j p_j · v_j`.
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
    tk: usize,
    mask: Mask,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    sized(scores, tk);
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
        o.fill(0.0);
        kernels::axpy_rows(isa, s, &v[c0..], d, o);
    }
}

/// Keys per chunk of the shared prefix in [`few_queries_shared`]: one head's chunk
/// (64 keys × 64 columns × 4 bytes = 16 KiB) stays in L1 while every sequence reads it.
const SHARED_CHUNK: usize = 64;

/// [`few_queries`] for head `h` of every sequence of a batch whose keys and values `..shared`
/// are the same in every sequence: that prefix is read from sequence 0, a chunk at a time
/// for all rows, so a prompt broadcast to 5 beams streams from memory once instead of 5
/// times. Each row's dot products, softmax and value sums are the ones [`few_queries`] runs,
/// in the same order, so the results are the same bits.
/// `shape` is (batch, tq, tk, stride, d, dh); `scores` is scratch; `out` Shape: [batch · tq, dh].
#[allow(clippy::too_many_arguments)]
fn few_queries_shared(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    shape: (usize, usize, usize, usize, usize, usize),
    h: usize,
    shared: usize,
    mask: Mask,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    let (batch, tq, tk, stride, d, dh) = shape;
    let (rows, c0) = (batch * tq, h * dh);
    // Row r (sequence r / tq, query r % tq) sees keys ..lim(r), of which ..pre(r) shared.
    let lim = |r: usize| match mask {
        Mask::None => tk,
        Mask::Causal { q_pos0 } => (q_pos0 + r % tq + 1).min(tk),
    };
    let pre = |r: usize| shared.min(lim(r));
    let query = |r: usize| &q[r * d + c0..][..dh];
    let own = |r: usize| (r / tq) * stride + pre(r) * d + c0;
    sized(scores, rows * tk);
    out.fill(0.0);
    for j0 in (0..shared).step_by(SHARED_CHUNK) {
        for r in 0..rows {
            let j1 = (j0 + SHARED_CHUNK).min(pre(r));
            if j0 < j1 {
                let s = &mut scores[r * tk + j0..r * tk + j1];
                kernels::dot_rows(isa, query(r), &k[j0 * d + c0..], d, scale, s);
            }
        }
    }
    for r in 0..rows {
        let s = &mut scores[r * tk..r * tk + lim(r)];
        if pre(r) < lim(r) {
            kernels::dot_rows(isa, query(r), &k[own(r)..], d, scale, &mut s[pre(r)..]);
        }
        kernels::softmax(isa, s);
    }
    for j0 in (0..shared).step_by(SHARED_CHUNK) {
        for (r, o) in out.chunks_exact_mut(dh).enumerate() {
            let j1 = (j0 + SHARED_CHUNK).min(pre(r));
            if j0 < j1 {
                let p = &scores[r * tk + j0..r * tk + j1];
                kernels::axpy_rows(isa, p, &v[j0 * d + c0..], d, o);
            }
        }
    }
    for (r, o) in out
        .chunks_exact_mut(dh)
        .enumerate()
        .filter(|&(r, _)| pre(r) < lim(r))
    {
        let p = &scores[r * tk + pre(r)..r * tk + lim(r)];
        kernels::axpy_rows(isa, p, &v[own(r)..], d, o);
    }
}

/// The many-query path on AVX-512: K and V of every (sequence, head) packed once per call
/// into the panels of [`kernels::x86_attn_f32`], then per (sequence, head, query block) task
/// the same key tiles and online softmax as [`head_block`], with per-thread scratch.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::cell::RefCell;

    use rayon::prelude::*;

    use super::{Mask, PV_QMAX, Q_BLOCK};
    use crate::kernels::{x86_attn_avx2, x86_attn_f32, x86_int8};
    use crate::scratch::Pool;
    use crate::OutPtr;

    /// Query rows per tile (both ISAs).
    const MR: usize = x86_attn_f32::MR;

    /// Keys per tile of the online softmax: wider than the gemm path's, as the per-tile
    /// row work (max, rescale, kernel edges) weighs more next to these tiles; the
    /// [Q_BLOCK, K_TILE] scores (192 KiB) still sit in L2. Whisper's 1500 keys take two.
    const K_TILE: usize = 768;

    // The score tile's row stride must take whole key panels, a query block whole row tiles.
    const _: () = assert!(
        K_TILE.is_multiple_of(x86_attn_f32::NR)
            && K_TILE.is_multiple_of(x86_attn_avx2::NR)
            && Q_BLOCK.is_multiple_of(MR)
            && MR == 6
    );
    // Integer P·V: a key tile's sums fit i32 with the most levels that allow it, and tiles
    // start on whole key pairs.
    const _: () = assert!(
        K_TILE as i64 * (PV_QMAX as i64).pow(2) <= i32::MAX as i64
            && K_TILE as i64 * (PV_QMAX as i64 + 1).pow(2) > i32::MAX as i64
            && K_TILE.is_multiple_of(2)
    );

    /// One ISA's micro-kernels for this path: `NR`-wide key and value panels and
    /// `MR × NR` tiles (see `x86_attn_f32` and `x86_attn_avx2` for the contracts).
    pub(super) trait Tiles {
        const NR: usize;
        /// Lanes of a score tile's folded row maxima.
        const LANES: usize;
        /// # Safety
        /// As `x86_attn_f32::pack_k_panel` with W = NR.
        unsafe fn pack_k_panel(k: *const f32, ld: usize, rows: usize, dh: usize, p: *mut f32);
        /// # Safety
        /// As `x86_attn_f32::scores` with M = MR, W = NR, and `LANES` lane maxima per row.
        unsafe fn scores(
            dh: usize,
            q: *const f32,
            k: *const f32,
            s: *mut f32,
            lds: usize,
            row_max: Option<(*mut f32, usize)>,
        );
        /// # Safety
        /// As `x86_attn_f32::values`.
        #[allow(clippy::too_many_arguments)]
        unsafe fn values(
            kc: usize,
            p: *const f32,
            ldp: usize,
            v: *const f32,
            o: *mut f32,
            ldo: usize,
            corr: Option<*const f32>,
        );
        /// # Safety
        /// As `x86_attn_f32::softmax_row`.
        unsafe fn softmax_row(
            row: &mut [f32],
            lim: usize,
            m: f32,
            row_max: Option<f32>,
        ) -> (f32, f32, f32);
    }

    /// 64-wide panels, 24-register tiles.
    pub(super) struct Avx512;
    /// 16-wide panels, 12-register tiles.
    pub(super) struct Avx2;

    impl Tiles for Avx512 {
        const NR: usize = x86_attn_f32::NR;
        const LANES: usize = 16;
        unsafe fn pack_k_panel(k: *const f32, ld: usize, rows: usize, dh: usize, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_f32::pack_k_panel::<{ x86_attn_f32::NR }>(k, ld, rows, dh, p) }
        }
        unsafe fn scores(
            dh: usize,
            q: *const f32,
            k: *const f32,
            s: *mut f32,
            lds: usize,
            row_max: Option<(*mut f32, usize)>,
        ) {
            // SAFETY: the caller's contract.
            unsafe {
                let k = (k, x86_attn_f32::NR);
                x86_attn_f32::scores::<MR, { x86_attn_f32::NR / 16 }>(dh, q, k, s, lds, row_max)
            }
        }
        unsafe fn values(
            kc: usize,
            p: *const f32,
            ldp: usize,
            v: *const f32,
            o: *mut f32,
            ldo: usize,
            corr: Option<*const f32>,
        ) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_f32::values(kc, p, ldp, v, o, ldo, corr) }
        }
        unsafe fn softmax_row(
            row: &mut [f32],
            lim: usize,
            m: f32,
            row_max: Option<f32>,
        ) -> (f32, f32, f32) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_f32::softmax_row(row, lim, m, row_max) }
        }
    }

    impl Tiles for Avx2 {
        const NR: usize = x86_attn_avx2::NR;
        const LANES: usize = 8;
        unsafe fn pack_k_panel(k: *const f32, ld: usize, rows: usize, dh: usize, p: *mut f32) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_avx2::pack_k_panel(k, ld, rows, dh, p) }
        }
        unsafe fn scores(
            dh: usize,
            q: *const f32,
            k: *const f32,
            s: *mut f32,
            lds: usize,
            row_max: Option<(*mut f32, usize)>,
        ) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_avx2::scores::<MR>(dh, q, k, s, lds, row_max) }
        }
        unsafe fn values(
            kc: usize,
            p: *const f32,
            ldp: usize,
            v: *const f32,
            o: *mut f32,
            ldo: usize,
            corr: Option<*const f32>,
        ) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_avx2::values::<MR>(kc, p, ldp, v, o, ldo, corr) }
        }
        unsafe fn softmax_row(
            row: &mut [f32],
            lim: usize,
            m: f32,
            row_max: Option<f32>,
        ) -> (f32, f32, f32) {
            // SAFETY: the caller's contract.
            unsafe { x86_attn_avx2::softmax_row(row, lim, m, row_max) }
        }
    }

    /// The checked shapes of one [`crate::CpuBackend::attention_batch`] call.
    #[derive(Clone, Copy)]
    pub(super) struct Shape {
        pub batch: usize,
        pub tq: usize,
        pub tk: usize,
        pub stride: usize,
        pub d: usize,
        pub n_head: usize,
    }

    /// K and V of every (sequence, head) packed for the tiles.
    struct Panels {
        /// Per (sequence, head): `k_panels` panels of Shape: [dh, nr] (keys past tk zero).
        k: Vec<f32>,
        /// Per (sequence, head): `v_panels` panels of Shape: [tk, nr] (columns past dh
        /// zero); empty with integer values.
        v: Vec<f32>,
        /// Integer values (AVX2 only), else empty: per (sequence, head) `v_panels` panels
        /// of Shape: [tk.div_ceil(2), nr] pairs of i16 along the keys, each column
        /// quantized to [`PV_QMAX`] levels with its scale in `vs` (Shape: [.., v_panels,
        /// nr]; columns past dh zero).
        vq: Vec<u32>,
        vs: Vec<f32>,
        /// Integer keys (with integer values), else empty: per (sequence, head) `k_panels`
        /// panels of Shape: [dh.div_ceil(2), nr] pairs of i16 along d_head, each key
        /// quantized to `wide_qmax(dh)` levels with its scale in `ks` (Shape: [..,
        /// k_panels, nr]; keys past tk zero).
        kq: Vec<u32>,
        ks: Vec<f32>,
        dh: usize,
        tk: usize,
        /// Panel width.
        nr: usize,
        k_panels: usize,
        v_panels: usize,
    }

    impl Panels {
        /// Packs K and V (Shape: [tk, d] per sequence, `stride` apart) in panels `T::NR`
        /// wide, in parallel; V as integer pairs when `int_pool` is given.
        fn new<T: Tiles>(
            k: &[f32],
            v: &[f32],
            sh: Shape,
            pool: &Pool<f32>,
            int_pool: Option<&Pool<u32>>,
        ) -> Self {
            let nr = T::NR;
            let (tk, d) = (sh.tk, sh.d);
            let dh = d / sh.n_head;
            let (k_panels, v_panels) = (tk.div_ceil(nr), dh.div_ceil(nr));
            let (k_len, v_len) = (k_panels * dh * nr, v_panels * tk * nr);
            let n = sh.batch * sh.n_head;
            let int = int_pool.is_some();
            let mut pk = if int {
                Vec::new()
            } else {
                pool.take(n * k_len)
            };
            let mut pv = if int {
                Vec::new()
            } else {
                pool.take(n * v_len)
            };
            let vq_len = v_panels * tk.div_ceil(2) * nr;
            // Every pair is written below: only growth is zeroed.
            let mut vq = int_pool.map_or_else(Vec::new, |p| p.take_dirty());
            if int {
                vq.resize(n * vq_len, 0);
            }
            let mut vs = if int {
                vec![0.0; n * v_panels * nr]
            } else {
                Vec::new()
            };
            let kq_len = k_panels * dh.div_ceil(2) * nr;
            let mut kq = int_pool.map_or_else(Vec::new, |p| p.take_dirty());
            let mut ks = if int {
                vec![0.0; n * k_panels * nr]
            } else {
                Vec::new()
            };
            if int {
                kq.resize(n * kq_len, 0);
            }
            let pack = |t: usize, pk: &mut [f32], pv: &mut [f32]| {
                let (s, h) = (t / sh.n_head, t % sh.n_head);
                let c0 = s * sh.stride + h * dh;
                for (jp, panel) in pk.chunks_exact_mut(dh * nr).enumerate() {
                    let rows = nr.min(tk - jp * nr);
                    let src = &k[c0 + jp * nr * d..][..(rows - 1) * d + dh];
                    // SAFETY: T's ISA runs (the caller's check); rows ≤ NR keys of dh
                    // values d apart are in `src`, and the panel has dh·NR values.
                    unsafe { T::pack_k_panel(src.as_ptr(), d, rows, dh, panel.as_mut_ptr()) };
                }
                for (cp, panel) in pv.chunks_exact_mut(tk * nr).enumerate() {
                    let cols = nr.min(dh - cp * nr);
                    for (j, dst) in panel.chunks_exact_mut(nr).enumerate() {
                        let src = &v[c0 + j * d + cp * nr..];
                        // A whole panel row is a fixed-size copy (no memmove call).
                        if cols == nr {
                            dst.copy_from_slice(&src[..nr]);
                        } else {
                            dst[..cols].copy_from_slice(&src[..cols]);
                        }
                    }
                }
            };
            if int {
                (kq.par_chunks_mut(kq_len)
                    .zip(ks.par_chunks_mut(k_panels * nr)))
                .zip(vq.par_chunks_mut(vq_len))
                .zip(vs.par_chunks_mut(v_panels * nr))
                .enumerate()
                .for_each(|(t, (((kq, ks), vq), vs))| {
                    let c0 = t / sh.n_head * sh.stride + t % sh.n_head * dh;
                    pack_int_keys(&k[c0..], d, tk, dh, nr, kq, ks);
                    pack_int_values(&v[c0..], d, tk, dh, nr, vq, vs);
                });
            } else {
                pk.par_chunks_mut(k_len)
                    .zip(pv.par_chunks_mut(v_len))
                    .enumerate()
                    .for_each(|(t, (pk, pv))| pack(t, pk, pv));
            }
            Self {
                k: pk,
                v: pv,
                vq,
                vs,
                kq,
                ks,
                dh,
                tk,
                nr,
                k_panels,
                v_panels,
            }
        }

        /// Key panel `jp` of (sequence, head) `sh`. Shape: [dh, nr].
        fn k_panel(&self, sh: usize, jp: usize) -> &[f32] {
            let len = self.dh * self.nr;
            &self.k[(sh * self.k_panels + jp) * len..][..len]
        }

        /// Column panel `cp` of (sequence, head) `sh`. Shape: [tk, nr].
        fn v_panel(&self, sh: usize, cp: usize) -> &[f32] {
            let len = self.tk * self.nr;
            &self.v[(sh * self.v_panels + cp) * len..][..len]
        }

        /// Integer key panel `jp` of (sequence, head) `sh` and its key scales. Shapes:
        /// [dh.div_ceil(2), nr] pairs, [nr].
        fn kq_panel(&self, sh: usize, jp: usize) -> (&[u32], &[f32]) {
            let (len, at) = (self.dh.div_ceil(2) * self.nr, sh * self.k_panels + jp);
            (
                &self.kq[at * len..][..len],
                &self.ks[at * self.nr..][..self.nr],
            )
        }

        /// Integer column panel `cp` of (sequence, head) `sh` and its column scales.
        /// Shapes: [tk.div_ceil(2), nr] pairs, [nr].
        fn vq_panel(&self, sh: usize, cp: usize) -> (&[u32], &[f32]) {
            let (len, at) = (self.tk.div_ceil(2) * self.nr, sh * self.v_panels + cp);
            (
                &self.vq[at * len..][..len],
                &self.vs[at * self.nr..][..self.nr],
            )
        }
    }

    /// One head's keys (`tk` rows of `dh` values, `d` apart, from `k[0]`) as integer pair
    /// panels `nr` wide (`kq`, Shape: [k_panels, dh.div_ceil(2), nr]): each key quantized
    /// to `wide_qmax(dh)` levels a side by its own scale (`ks`, Shape: [k_panels, nr]),
    /// ties to even; keys past tk zero. AVX2 only.
    fn pack_int_keys(
        k: &[f32],
        d: usize,
        tk: usize,
        dh: usize,
        nr: usize,
        kq: &mut [u32],
        ks: &mut [f32],
    ) {
        let (dh2, qmax) = (dh.div_ceil(2), crate::int8::wide_qmax(dh) as f32);
        let mut pairs = vec![0u32; dh2];
        let panels = kq.chunks_exact_mut(dh2 * nr).zip(ks.chunks_exact_mut(nr));
        for (jp, (panel, scales)) in panels.enumerate() {
            for jj in 0..nr {
                let j = jp * nr + jj;
                if j < tk {
                    // SAFETY: the caller runs AVX2 (int attention is AVX2 only); `pairs`
                    // holds dh.div_ceil(2) pairs.
                    scales[jj] = unsafe {
                        x86_int8::quantize_row_pairs(&k[j * d..][..dh], qmax, &mut pairs)
                    };
                } else {
                    pairs.fill(0);
                    scales[jj] = 0.0;
                }
                for (p, &pair) in pairs.iter().enumerate() {
                    panel[p * nr + jj] = pair;
                }
            }
        }
    }

    /// One head's values (`tk` rows of `dh` columns, `d` apart, from `v[0]`) as integer
    /// pair panels `nr` wide (`vq`, Shape: [v_panels, tk.div_ceil(2), nr]): each column
    /// quantized to [`PV_QMAX`] levels a side by its own scale (`vs`, Shape: [v_panels,
    /// nr]), ties to even; keys past tk and columns past dh zero. AVX2 only.
    fn pack_int_values(
        v: &[f32],
        d: usize,
        tk: usize,
        dh: usize,
        nr: usize,
        vq: &mut [u32],
        vs: &mut [f32],
    ) {
        let (mut amax, mut inv) = ([0f32; x86_attn_avx2::NR], [0f32; x86_attn_avx2::NR]);
        debug_assert_eq!(nr, amax.len());
        for (cp, (panel, scales)) in vq
            .chunks_exact_mut(tk.div_ceil(2) * nr)
            .zip(vs.chunks_exact_mut(nr))
            .enumerate()
        {
            let cols = nr.min(dh - cp * nr);
            amax.fill(0.0);
            for j in 0..tk {
                let row = &v[j * d + cp * nr..][..cols];
                amax.iter_mut()
                    .zip(row)
                    .for_each(|(m, x)| *m = m.max(x.abs()));
            }
            for c in 0..nr {
                let ok = c < cols && amax[c] > 0.0 && amax[c].is_finite();
                scales[c] = if ok { amax[c] / PV_QMAX as f32 } else { 0.0 };
                inv[c] = if ok { PV_QMAX as f32 / amax[c] } else { 0.0 };
            }
            if cols == nr {
                // SAFETY: the caller runs AVX2 (int values are AVX2 only); v holds tk rows
                // of nr values from column cp·nr, d apart, and the panel tk.div_ceil(2)·nr
                // pairs.
                unsafe {
                    x86_attn_avx2::pack_v_pairs(
                        v[cp * nr..].as_ptr(),
                        d,
                        tk,
                        inv.as_ptr(),
                        panel.as_mut_ptr(),
                    )
                };
                continue;
            }
            // A partial panel (d_head not a multiple of 16), as the kernel does.
            let q = |x: f32, c: usize| (x * inv[c]).round_ties_even() as i32 as i16 as u16 as u32;
            for (t, dst) in panel.chunks_exact_mut(nr).enumerate() {
                for (c, pair) in dst.iter_mut().enumerate() {
                    let at = |j: usize| (j < tk && c < cols).then(|| v[j * d + cp * nr + c]);
                    let (lo, hi) = (at(2 * t), at(2 * t + 1));
                    *pair = lo.map_or(0, |x| q(x, c)) | hi.map_or(0, |x| q(x, c)) << 16;
                }
            }
        }
    }

    /// Per-thread buffers, reused across tasks.
    struct Scratch {
        /// Query block, rows past the block zero. Shape: [Q_BLOCK, dh].
        q: Vec<f32>,
        /// Score (then probability) tile. Shape: [Q_BLOCK, K_TILE].
        s: Vec<f32>,
        /// Unnormalized output rows. Shape: [Q_BLOCK, v_panels · nr].
        o: Vec<f32>,
        /// Running row max, softmax denominator, and this tile's rescale of `o`.
        /// Shape: [Q_BLOCK].
        m: Vec<f32>,
        l: Vec<f32>,
        corr: Vec<f32>,
        /// Each row's lane maxima of this key tile's scores, folded by the score tile
        /// (unmasked attention). Shape: [Q_BLOCK, LANES].
        mv: Vec<f32>,
        /// With integer values: the tile's probabilities as i16 pairs along the keys and
        /// each row's scale. Shapes: [Q_BLOCK, K_TILE / 2], [Q_BLOCK].
        pq: Vec<u32>,
        ps: Vec<f32>,
        /// With integer keys: the query block as i16 pairs and each row's scale. Shapes:
        /// [Q_BLOCK, dh.div_ceil(2)], [Q_BLOCK].
        qq: Vec<u32>,
        qs: Vec<f32>,
    }

    impl Scratch {
        const fn empty() -> Self {
            Self {
                mv: Vec::new(),
                q: Vec::new(),
                s: Vec::new(),
                o: Vec::new(),
                m: Vec::new(),
                l: Vec::new(),
                corr: Vec::new(),
                pq: Vec::new(),
                ps: Vec::new(),
                qq: Vec::new(),
                qs: Vec::new(),
            }
        }

        /// Sizes the buffers for `pn` (contents are rewritten before they are read).
        fn fit(&mut self, pn: &Panels) {
            self.mv.resize(Q_BLOCK * 16, 0.0);
            self.q.resize(Q_BLOCK * pn.dh, 0.0);
            self.s.resize(Q_BLOCK * K_TILE, 0.0);
            self.o.resize(Q_BLOCK * pn.v_panels * pn.nr, 0.0);
            self.m.resize(Q_BLOCK, 0.0);
            self.l.resize(Q_BLOCK, 0.0);
            self.corr.resize(Q_BLOCK, 1.0);
            if !pn.vq.is_empty() {
                self.pq.resize(Q_BLOCK * K_TILE / 2, 0);
                self.ps.resize(Q_BLOCK, 0.0);
                self.qq.resize(Q_BLOCK * pn.dh.div_ceil(2), 0);
                self.qs.resize(Q_BLOCK, 0.0);
            }
        }
    }

    thread_local! {
        /// Each thread's [`Scratch`], kept between calls: an encoder layer's attention
        /// would otherwise allocate and zero ~200 KiB per task split.
        static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::empty()) };
    }

    /// `attention`'s arguments: q, k, v, shapes, mask, scale, out, scratch pool.
    pub(super) type Args<'a> = (
        &'a [f32],
        &'a [f32],
        &'a [f32],
        Shape,
        Mask,
        f32,
        &'a mut [f32],
        &'a Pool<f32>,
    );

    /// The many-query path of `attention_batch` on `T`'s kernels, inside the backend's
    /// pool; the caller checked the shapes and that `T`'s ISA runs.
    ///
    /// `q`, `out` Shape: [batch, tq, d]; `k`, `v` Shape: [(batch − 1) · stride + tk · d].
    ///
    /// `int_pool` (AVX2 only): P·V on integers, its value panels kept in that pool.
    pub(super) fn attention<T: Tiles>(
        (q, k, v, sh, mask, scale, out, pool): Args<'_>,
        int_pool: Option<&Pool<u32>>,
    ) {
        debug_assert!(int_pool.is_none() || T::NR == x86_attn_avx2::NR);
        let panels = Panels::new::<T>(k, v, sh, pool, int_pool);
        // Scores in log2 units, so the softmax takes 2^x.
        let scale = scale * std::f32::consts::LOG2_E;
        let n_blocks = sh.tq.div_ceil(Q_BLOCK);
        let dst = OutPtr(out.as_mut_ptr());
        let task = |sc: &mut Scratch, t: usize| {
            let (sq, b) = (t / n_blocks, t % n_blocks);
            let i0 = b * Q_BLOCK;
            let i1 = (i0 + Q_BLOCK).min(sh.tq);
            block::<T>(q, sh, &panels, sq, i0, i1, mask, scale, dst, sc);
        };
        let tasks = sh.batch * sh.n_head * n_blocks;
        // A task starts no pool work, so no task stolen onto this thread finds the
        // scratch borrowed.
        let run = |t: usize| {
            SCRATCH.with_borrow_mut(|sc| {
                sc.fit(&panels);
                task(sc, t)
            })
        };
        if tasks == 1 {
            run(0);
        } else {
            (0..tasks).into_par_iter().for_each(run);
        }
        pool.give(panels.k);
        pool.give(panels.v);
        if let Some(p) = int_pool {
            p.give(panels.vq);
            p.give(panels.kq);
        }
    }

    /// (Sequence, head) `sq` = s · n_head + h, query rows `i0..i1` of sequence s: writes
    /// `out` rows s·tq + i0.., columns h·dh..(h + 1)·dh, which no other task touches.
    #[allow(clippy::too_many_arguments)]
    fn block<T: Tiles>(
        q: &[f32],
        sh: Shape,
        pn: &Panels,
        sq: usize,
        i0: usize,
        i1: usize,
        mask: Mask,
        scale: f32,
        out: OutPtr,
        sc: &mut Scratch,
    ) {
        let (d, dh) = (sh.d, pn.dh);
        let (nr, bq) = (pn.nr, i1 - i0);
        let dhp = pn.v_panels * nr;
        let row0 = sq / sh.n_head * sh.tq + i0;
        let c0 = sq % sh.n_head * dh;
        let rows = bq.div_ceil(MR) * MR;
        // The query block, scaled here so the score tile needs no epilogue.
        for r in 0..rows {
            let dst = &mut sc.q[r * dh..][..dh];
            match q.get((row0 + r) * d + c0..).filter(|_| r < bq) {
                Some(src) => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = s * scale),
                None => dst.fill(0.0),
            }
        }
        // The next block's queries, and this block's output rows, arrive while the tiles run.
        let int = !pn.kq.is_empty();
        let dh2 = dh.div_ceil(2);
        if int {
            let qmax = crate::int8::wide_qmax(dh) as f32;
            for r in 0..rows {
                let (src, dst) = (&sc.q[r * dh..][..dh], &mut sc.qq[r * dh2..][..dh2]);
                // SAFETY: int attention runs on AVX2 only; dst holds dh.div_ceil(2) pairs.
                sc.qs[r] = unsafe { x86_int8::quantize_row_pairs(src, qmax, dst) };
            }
        }
        let next = Q_BLOCK.min(sh.tq - i1);
        x86_attn_f32::prefetch_rows(q.as_ptr().wrapping_add((row0 + bq) * d + c0), next, d, dh);
        x86_attn_f32::prefetch_rows(out.0.wrapping_add(row0 * d + c0), bq, d, dh);
        // Keys past the last query's position are masked for every row: skip them.
        let tk = match mask {
            Mask::None => sh.tk,
            Mask::Causal { q_pos0 } => (q_pos0 + i1).min(sh.tk),
        };
        sc.m[..bq].fill(f32::NEG_INFINITY);
        sc.l[..bq].fill(0.0);
        // Unmasked, the score tile folds each row's max as it goes (a masked row's max
        // depends on the row).
        let fold = mask == Mask::None;
        for j0 in (0..tk).step_by(K_TILE) {
            let nk = K_TILE.min(tk - j0);
            if fold {
                sc.mv.fill(f32::NEG_INFINITY);
            }
            for jp in 0..nk.div_ceil(nr) {
                if int {
                    let (panel, scales) = pn.kq_panel(sq, j0 / nr + jp);
                    for ic in (0..rows).step_by(MR) {
                        let mv = sc.mv[ic * T::LANES..].as_mut_ptr();
                        let row_max = fold.then_some((mv, nk - jp * nr));
                        // SAFETY: AVX2 runs (int attention is AVX2 only); sc.qq holds
                        // Q_BLOCK ≥ ic + MR rows of dh2 pairs, sc.qs as many scales, the
                        // panel dh2·NR pairs and NR scales, and the score tile and sc.mv
                        // are as for the f32 tile below.
                        unsafe {
                            x86_attn_avx2::scores_pairs::<MR>(
                                dh2,
                                sc.qq[ic * dh2..].as_ptr(),
                                panel.as_ptr(),
                                sc.s[ic * K_TILE + jp * nr..].as_mut_ptr(),
                                K_TILE,
                                row_max,
                                sc.qs[ic..].as_ptr(),
                                scales.as_ptr(),
                            )
                        };
                    }
                    continue;
                }
                let panel = pn.k_panel(sq, j0 / nr + jp);
                for ic in (0..rows).step_by(MR) {
                    let mv = sc.mv[ic * T::LANES..].as_mut_ptr();
                    let row_max = fold.then_some((mv, nk - jp * nr));
                    // SAFETY: T's ISA runs (the caller's check); sc.q holds Q_BLOCK ≥ ic +
                    // MR rows of dh, the panel dh·nr values, the [Q_BLOCK, K_TILE] score
                    // tile has rows ic..ic + MR and columns jp·nr..(jp + 1)·nr ≤ K_TILE,
                    // and sc.mv rows ic..ic + MR of LANES ≤ 16.
                    unsafe {
                        T::scores(
                            dh,
                            sc.q[ic * dh..].as_ptr(),
                            panel.as_ptr(),
                            sc.s[ic * K_TILE + jp * nr..].as_mut_ptr(),
                            K_TILE,
                            row_max,
                        )
                    };
                }
            }
            softmax_tile::<T>(sc, bq, i0, j0, nk, mask, fold);
            if !pn.vq.is_empty() {
                int_values(sc, pn, sq, rows, bq, j0, nk, dhp);
                continue;
            }
            for cp in 0..pn.v_panels {
                let vt = &pn.v_panel(sq, cp)[j0 * nr..][..nk * nr];
                for ic in (0..rows).step_by(MR) {
                    let corr = (j0 > 0).then(|| sc.corr[ic..].as_ptr());
                    // SAFETY: T's ISA runs; sc.s holds rows ic..ic + MR of K_TILE ≥ nk
                    // values, `vt` nk·nr values, sc.corr Q_BLOCK ≥ ic + MR values, and
                    // sc.o rows ic..ic + MR of dhp ≥ (cp + 1)·nr columns.
                    unsafe {
                        T::values(
                            nk,
                            sc.s[ic * K_TILE..].as_ptr(),
                            K_TILE,
                            vt.as_ptr(),
                            sc.o[ic * dhp + cp * nr..].as_mut_ptr(),
                            dhp,
                            corr,
                        )
                    };
                }
            }
        }
        for r in 0..bq {
            // A fully masked row has l = 0 and gives zeros.
            let inv = if sc.l[r] > 0.0 { 1.0 / sc.l[r] } else { 0.0 };
            // SAFETY: row row0 + r, columns c0..c0 + dh of `out` ([batch·tq, d]) belong to
            // this task alone.
            let o = unsafe { std::slice::from_raw_parts_mut(out.at((row0 + r) * d + c0), dh) };
            for (o, &x) in o.iter_mut().zip(&sc.o[r * dhp..][..dh]) {
                *o = x * inv;
            }
        }
    }

    /// P·V of one key tile (keys `j0..j0 + nk`) on integers, AVX2: each probability row
    /// `0..bq` quantized to [`PV_QMAX`] levels by its own scale, then the pair tile adds
    /// its exact sums, scaled, into the rescaled output rows.
    #[allow(clippy::too_many_arguments)]
    fn int_values(
        sc: &mut Scratch,
        pn: &Panels,
        sq: usize,
        rows: usize,
        bq: usize,
        j0: usize,
        nk: usize,
        dhp: usize,
    ) {
        const LDP: usize = K_TILE / 2;
        let nk2 = nk.div_ceil(2);
        for r in 0..rows {
            let dst = &mut sc.pq[r * LDP..][..nk2];
            if r < bq {
                let src = &sc.s[r * K_TILE..][..nk];
                // SAFETY: the caller's pool runs the AVX2 kernels (int values are AVX2
                // only); dst holds nk.div_ceil(2) pairs.
                sc.ps[r] = unsafe { x86_int8::quantize_row_pairs(src, PV_QMAX as f32, dst) };
            } else {
                // Padding rows: finite zeros (their outputs are never stored).
                dst.fill(0);
                sc.ps[r] = 0.0;
            }
        }
        for cp in 0..pn.v_panels {
            let (panel, scales) = pn.vq_panel(sq, cp);
            let vt = &panel[j0 / 2 * x86_attn_avx2::NR..][..nk2 * x86_attn_avx2::NR];
            for ic in (0..rows).step_by(MR) {
                let corr = (j0 > 0).then(|| sc.corr[ic..].as_ptr());
                // SAFETY: AVX2 runs (as above); sc.pq holds rows ic..ic + MR of LDP ≥ nk2
                // pairs, `vt` nk2·NR pairs, `scales` NR values, sc.corr and sc.ps Q_BLOCK
                // ≥ ic + MR values, and sc.o rows ic..ic + MR of dhp ≥ (cp + 1)·NR columns.
                unsafe {
                    x86_attn_avx2::values_pairs::<MR>(
                        nk2,
                        sc.pq[ic * LDP..].as_ptr(),
                        LDP,
                        vt.as_ptr(),
                        sc.o[ic * dhp + cp * x86_attn_avx2::NR..].as_mut_ptr(),
                        dhp,
                        corr,
                        sc.ps[ic..].as_ptr(),
                        scales.as_ptr(),
                    )
                };
            }
        }
    }

    /// Online softmax over the score tile's rows `0..bq` (keys `j0..j0 + nk`, scores in
    /// log2 units): each row becomes 2^(s − m') with m' its new running max, masked keys 0,
    /// and `corr` the factor 2^(m − m') that rescales the row's earlier output. `folded`:
    /// the score tile left each row's lane maxima in `sc.mv`.
    fn softmax_tile<T: Tiles>(
        sc: &mut Scratch,
        bq: usize,
        i0: usize,
        j0: usize,
        nk: usize,
        mask: Mask,
        folded: bool,
    ) {
        for r in 0..bq {
            let lim = match mask {
                Mask::None => nk,
                Mask::Causal { q_pos0 } => (q_pos0 + i0 + r + 1).saturating_sub(j0).min(nk),
            };
            let row = &mut sc.s[r * K_TILE..][..nk];
            let lanes = &sc.mv[r * T::LANES..][..T::LANES];
            let row_max = folded.then(|| lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            // SAFETY: T's ISA runs (the caller's check).
            let (m, sum, corr) = unsafe { T::softmax_row(row, lim, sc.m[r], row_max) };
            sc.l[r] = sc.l[r] * corr + sum;
            sc.m[r] = m;
            sc.corr[r] = corr;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, naive_attention as naive, rand_vec};

    #[test]
    fn attention_matches_naive() {
        for isa in sotto_isa::available() {
            attention_cases(&CpuBackend::with_isa(3, isa).unwrap());
        }
    }

    /// The int16 encoder's attention: on AVX2 both products on integers, within ~one level
    /// of the f32 result (queries, keys, probabilities and values each within half a step
    /// of their scale), over two key tiles, an odd key count, an odd d_head, partial value
    /// panels and a zero value column; elsewhere exactly the f32 attention.
    #[test]
    fn int16_attention_stays_close() {
        for (tq, tk, nh, dh) in [
            (70, 1500, 2, 64),
            (13, 771, 3, 40),
            (9, 9, 1, 16),
            (20, 37, 2, 7),
        ] {
            let d = nh * dh;
            let q = rand_vec(tq * d, 4)
                .iter()
                .map(|x| x * 4.0)
                .collect::<Vec<_>>();
            let k = rand_vec(tk * d, 5);
            let mut v = rand_vec(tk * d, 6);
            (0..tk).for_each(|j| v[j * d + 1] = 0.0);
            for isa in sotto_isa::available() {
                let be = CpuBackend::with_isa(2, isa).unwrap();
                let mut want = vec![0.0; tq * d];
                be.attention(&q, tq, &k, &v, tk, nh, Mask::None, &mut want)
                    .unwrap();
                let mut got = vec![f32::NAN; tq * d];
                be.attention_int16(&q, tq, &k, &v, tk, nh, &mut got)
                    .unwrap();
                let err = max_abs_diff(&got, &want);
                let ints = isa == Isa::Avx2 && tq > SMALL_Q;
                assert!(err < 2e-3, "{isa:?} {tq}×{tk} heads {nh}×{dh}: {err}");
                assert_eq!(err > 0.0, ints, "{isa:?} {tq}×{tk}: integers ran iff AVX2");
                assert!((0..tq).all(|r| got[r * d + 1].abs() < 1e-6));
            }
        }
        let be = CpuBackend::new(1).unwrap();
        let mut out = vec![0.0; 8];
        assert!(be
            .attention_int16(&[0.0; 8], 2, &[0.0; 8], &[0.0; 7], 2, 2, &mut out)
            .is_err());
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

    /// Shapes of the many-query path: tq and tk off every block size, d_head 64, 40 and 80,
    /// causal with q_pos0 > 0; each kernel path on 1 and 3 threads.
    #[test]
    fn many_queries_match_naive() {
        // (tq, tk, n_head, d_head, causal q_pos0)
        let cases = [
            (1, 1, 1, 64, None),
            (7, 65, 2, 40, None),
            (65, 7, 2, 64, None),
            (65, 300, 3, 40, None),
            (300, 65, 2, 64, None),
            (300, 1500, 1, 64, None),
            (1500, 1500, 1, 40, None),
            (9, 9, 2, 64, Some(0)),
            (65, 300, 2, 64, Some(235)),
            (300, 300, 2, 40, Some(0)),
            (129, 200, 2, 40, Some(71)),
            (65, 1500, 1, 64, Some(1435)),
            // Two value panels, the second partial.
            (61, 130, 2, 80, None),
            (61, 130, 2, 80, Some(69)),
        ];
        let backends: Vec<CpuBackend> = sotto_isa::available()
            .into_iter()
            .flat_map(|isa| [1, 3].map(|t| CpuBackend::with_isa(t, isa).unwrap()))
            .collect();
        for (tq, tk, nh, dh, pos0) in cases {
            let d = nh * dh;
            for gain in [3.0, 12.0] {
                let q: Vec<f32> = rand_vec(tq * d, 4).iter().map(|x| x * gain).collect();
                let (k, v) = (rand_vec(tk * d, 5), rand_vec(tk * d, 6));
                let mask = pos0.map_or(Mask::None, |q_pos0| Mask::Causal { q_pos0 });
                let want = naive(&q, tq, &k, &v, tk, nh, pos0);
                let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                for be in &backends {
                    let mut out = vec![f32::NAN; tq * d];
                    be.attention(&q, tq, &k, &v, tk, nh, mask, &mut out)
                        .unwrap();
                    let err = max_abs_diff(&out, &want);
                    assert!(
                        err <= 1e-5 * scale,
                        "{:?} {} threads, {tq}×{tk} {nh}×{dh} {pos0:?} gain {gain}: {err}",
                        be.isa(),
                        be.threads()
                    );
                }
            }
        }
    }

    #[test]
    fn attention_batch_matches_one_sequence_at_a_time() {
        let be = CpuBackend::new(2).unwrap();
        for (batch, tq, tk, nh, dh, pos0) in [
            (3, 1, 9, 2, 5, 8),
            (2, 3, 70, 3, 4, 67),
            (1, 2, 5, 1, 3, 3),
            (2, 70, 150, 2, 40, 75),
            (3, 9, 40, 3, 64, 31),
        ] {
            let (d, cap) = (nh * dh, tk + 4);
            let stride = cap * d;
            let q = rand_vec(batch * tq * d, 1);
            let kv_len = (batch - 1) * stride + tk * d;
            let (k, v) = (rand_vec(kv_len, 2), rand_vec(kv_len, 3));
            let mask = Mask::Causal { q_pos0: pos0 };
            let mut out = vec![f32::NAN; batch * tq * d];
            be.attention_batch(&q, batch, tq, &k, &v, stride, tk, 0, nh, mask, &mut out)
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
                .attention_batch(&q, batch, tq, short, &v, stride, tk, 0, nh, mask, &mut out)
                .is_err());
        }
    }

    #[test]
    fn shared_prefix_is_read_once_with_the_same_results() {
        let be = CpuBackend::new(2).unwrap();
        for (batch, tq, tk, shared, nh, dh, mask) in [
            (5, 1, 210, 200, 2, 64, Mask::Causal { q_pos0: 209 }),
            (3, 2, 150, 70, 3, 16, Mask::Causal { q_pos0: 148 }),
            (2, 3, 40, 40, 2, 5, Mask::Causal { q_pos0: 37 }),
            (4, 1, 90, 130, 1, 8, Mask::None),
            (2, 8, 65, 64, 2, 4, Mask::Causal { q_pos0: 50 }),
        ] {
            let (d, cap) = (nh * dh, tk + 3);
            let stride = cap * d;
            let q = rand_vec(batch * tq * d, 4);
            let kv_len = (batch - 1) * stride + tk * d;
            let (mut k, mut v) = (rand_vec(kv_len, 5), rand_vec(kv_len, 6));
            // Every sequence holds sequence 0's prefix, as a broadcast prompt does.
            let pre = shared.min(tk) * d;
            for s in 1..batch {
                k.copy_within(..pre, s * stride);
                v.copy_within(..pre, s * stride);
            }
            let run = |k: &[f32], v: &[f32], shared| {
                let mut out = vec![f32::NAN; batch * tq * d];
                be.attention_batch(&q, batch, tq, k, v, stride, tk, shared, nh, mask, &mut out)
                    .unwrap();
                out
            };
            let want = run(&k, &v, 0);
            assert_eq!(
                run(&k, &v, shared),
                want,
                "batch {batch}, tq {tq}, shared {shared}"
            );
            // Only sequence 0's copy of the prefix is read.
            for s in 1..batch {
                k[s * stride..s * stride + pre].fill(f32::NAN);
                v[s * stride..s * stride + pre].fill(f32::NAN);
            }
            assert_eq!(run(&k, &v, shared), want, "batch {batch}, prefix read once");
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
