//! Attention against keys and values that many steps read: Whisper's cross-attention over
//! the encoder output. They are packed once per window as f16, per head, in the layouts
//! the decode kernels stream (half the bytes of f32, one contiguous run per head).

use std::cell::RefCell;

use half::f16;
use rayon::prelude::*;

use std::ops::Range;

use crate::blocked::{Epi, Out};
use crate::kernels::{self, KEY_BLOCK, VALUE_ALIGN};
use crate::linear::SMALL_M;
use crate::{shape_err, CpuBackend, Isa, Linear, OutPtr, Result, Weight};

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

impl PackedKv {
    /// Fills the keys and values with `x · W_kᵀ + b_k` and `x · W_vᵀ + b_v` (Whisper's
    /// cross-attention projections of the encoder output), rounded to f16 as [`PackedKv::pack`]
    /// rounds them. On the bf16 GEMM each finished block of the products goes straight into
    /// the packed layouts; elsewhere the products go through `k_buf` and `v_buf` (Shape:
    /// [tk, d], scratch) and `pack`. Call it inside [`CpuBackend::install`].
    ///
    /// `x` Shape: [tk, n_in].
    pub fn project(
        &mut self,
        be: &CpuBackend,
        x: &[f32],
        wk: &Linear,
        wv: &Linear,
        k_buf: &mut [f32],
        v_buf: &mut [f32],
    ) -> Result<()> {
        PackedKv::project_all(std::slice::from_mut(self), be, x, &[(wk, wv)], k_buf, v_buf)
    }

    /// [`PackedKv::project`] for several layers' K/V meeting the same `x` (every decoder
    /// layer's cross-attention over one encoder output): on the bf16 GEMM `x` is rounded
    /// and packed once for all of them. `kvs` and `weights` pair up one to one. Call it
    /// inside [`CpuBackend::install`].
    pub fn project_all(
        kvs: &mut [PackedKv],
        be: &CpuBackend,
        x: &[f32],
        weights: &[(&Linear, &Linear)],
        k_buf: &mut [f32],
        v_buf: &mut [f32],
    ) -> Result<()> {
        let n_in = weights.first().map_or(0, |(wk, _)| wk.n_in);
        let fits = |kv: &PackedKv, w: &Linear| {
            w.n_out == kv.d() && w.n_in == n_in && x.len() == kv.tk * n_in
        };
        let ok = kvs.len() == weights.len()
            && kvs
                .iter()
                .zip(weights)
                .all(|(kv, (wk, wv))| fits(kv, wk) && fits(kv, wv));
        if !ok {
            return Err(shape_err(
                "packed kv",
                format!(
                    "x {} values, {} K/V and {} weight pairs of {n_in} inputs",
                    x.len(),
                    kvs.len(),
                    weights.len()
                ),
            ));
        }
        let Some(tk) = kvs.first().map(|kv| kv.tk) else {
            return Ok(());
        };
        let bf16 = weights
            .iter()
            .all(|(wk, wv)| matches!((&wk.weight, &wv.weight), (Weight::Bf16(_), Weight::Bf16(_))));
        let all = || weights.iter().flat_map(|(wk, wv)| [&wk.weight, &wv.weight]);
        let int8 =
            tk > SMALL_M && be.probe.is_none() && crate::int8::runs_together(be.isa(), all());
        if !(bf16 && be.fuses_bf16(tk) || int8) {
            for (kv, (wk, wv)) in kvs.iter_mut().zip(weights) {
                be.linears(x, tk, &mut [(wk, &mut *k_buf), (wv, &mut *v_buf)])?;
                kv.pack(be.isa(), k_buf, v_buf)?;
            }
            return Ok(());
        }
        let isa = be.isa();
        // Every layer's two products, each finished block going straight into the packed
        // layouts: `gemm(w, out)` runs one product on the activations prepared once.
        // The layers' products run at once on the pool, so one product's last tasks overlap
        // the next one's first instead of each waiting out its own tail.
        let mut project = |gemm: &(dyn Fn(&Linear, Out<'_>) + Sync)| {
            kvs.par_iter_mut().zip(weights).for_each(|(kv, (wk, wv))| {
                let dst = KvDst {
                    k: kv.k.as_mut_ptr(),
                    v: kv.v.as_mut_ptr(),
                    tk,
                    dh: kv.dh,
                    nb: kv.nb(),
                    dhp: kv.dhp(),
                };
                // SAFETY (both): each block is its task's rows and columns of the products,
                // which land in packed elements no other block's do.
                let keys = move |rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize| unsafe {
                    dst.keys(isa, rows, cols, blk, ld)
                };
                let values =
                    move |rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize| unsafe {
                        dst.values(isa, rows, cols, blk, ld)
                    };
                rayon::join(
                    || gemm(wk, Out::Blocks(&keys)),
                    || gemm(wv, Out::Blocks(&values)),
                );
            })
        };
        if let (true, Some(Weight::Int8(first))) = (int8, all().next()) {
            be.with_quant_rows(x, tk, n_in, first.layout(), None, |qr| {
                project(&|w, out| be.gemm_int8(qr, tk, w, out, Epi::Store))
            });
            return Ok(());
        }
        let kp = n_in.div_ceil(2);
        be.with_pairs(
            |a| crate::bf16::pack_rows(isa, x, tk, n_in, a),
            |a| {
                project(&|w, out| {
                    let Weight::Bf16(pw) = &w.weight else {
                        unreachable!("checked above: bf16 weights")
                    };
                    be.gemm_bf16_packed(a, kp, tk, pw, w.bias.as_deref(), out, Epi::Store)
                })
            },
        );
        Ok(())
    }
}

/// Columns `cols` of a `[_, n_head·dh]` row split at head boundaries: each head they touch
/// with its columns among them.
pub(crate) fn head_spans(
    cols: Range<usize>,
    dh: usize,
) -> impl Iterator<Item = (usize, Range<usize>)> {
    (cols.start / dh..cols.end.div_ceil(dh))
        .map(move |h| (h, cols.start.max(h * dh)..cols.end.min((h + 1) * dh)))
}

/// A [`PackedKv`]'s storage for GEMM tasks that each write the packed elements of their
/// own block of positions and columns.
#[derive(Clone, Copy)]
struct KvDst {
    k: *mut f16,
    v: *mut f16,
    tk: usize,
    dh: usize,
    nb: usize,
    dhp: usize,
}

// SAFETY: tasks write disjoint elements (see `PackedKv::project`).
unsafe impl Send for KvDst {}
// SAFETY: as above.
unsafe impl Sync for KvDst {}

impl KvDst {
    /// Splits columns `cols` (of d) at head boundaries: (head, column in head, first
    /// column, count).
    fn heads(self, cols: Range<usize>) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let dh = self.dh;
        head_spans(cols, dh).map(move |(h, c)| (h, c.start - h * dh, c.start, c.len()))
    }

    /// Keys at positions `rows`, columns `cols` from `blk` (row i − rows.start `ld` apart).
    ///
    /// # Safety
    /// `rows` < tk and `cols` < d; no other thread writes these keys meanwhile.
    unsafe fn keys(self, isa: Isa, rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize) {
        for (h, cc, c, len) in self.heads(cols.clone()) {
            let mut i = rows.start;
            while i < rows.end {
                let (b, ii) = (i / KEY_BLOCK, i % KEY_BLOCK);
                let n = (KEY_BLOCK - ii).min(rows.end - i);
                let src = &blk[(i - rows.start) * ld + c - cols.start..];
                let at = ((h * self.nb + b) * self.dh + cc) * KEY_BLOCK + ii;
                // SAFETY: columns cc..cc + len of head h's key block b, positions ii..ii + n:
                // inside `k` (Shape: [n_head, nb, dh, KEY_BLOCK]) and this block's alone.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(self.k.add(at), (len - 1) * KEY_BLOCK + n)
                };
                kernels::transpose_to_f16(
                    isa,
                    &src[..(n - 1) * ld + len],
                    ld,
                    n,
                    len,
                    dst,
                    KEY_BLOCK,
                );
                i += n;
            }
        }
    }

    /// Values at positions `rows`, columns `cols` from `blk` (row i − rows.start `ld` apart).
    ///
    /// # Safety
    /// As [`KvDst::keys`].
    unsafe fn values(
        self,
        isa: Isa,
        rows: Range<usize>,
        cols: Range<usize>,
        blk: &[f32],
        ld: usize,
    ) {
        for (h, cc, c, len) in self.heads(cols.clone()) {
            for i in rows.clone() {
                let src = &blk[(i - rows.start) * ld + c - cols.start..][..len];
                // SAFETY: row i of head h's values (Shape: [n_head, tk, dhp]), columns
                // cc..cc + len: inside `v` and this block's alone.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.v.add((h * self.tk + i) * self.dhp + cc),
                        len,
                    )
                };
                kernels::f32_to_f16(isa, src, dst);
            }
        }
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
        self.attention_packed_groups(q, &[(0, tq)], &|_| kv, out)
    }

    /// [`CpuBackend::attention_packed`] over consecutive row groups, each against its own
    /// keys and values (a batch of windows decoded together: each sequence attends to its
    /// window's audio), in one fork/join over (group, head, row chunk).
    ///
    /// `groups`: `(kv index, rows)` in row order; group g attends to `kv(index)`, every kv
    /// of the same shape. `q`, `out` Shape: [Σ rows, d].
    pub fn attention_packed_groups<'k>(
        &self,
        q: &[f32],
        groups: &[(usize, usize)],
        kv: &(dyn Fn(usize) -> &'k PackedKv + Sync),
        out: &mut [f32],
    ) -> Result<()> {
        let Some(&(first, _)) = groups.first() else {
            return Err(shape_err("attention_packed", "no row groups"));
        };
        let first = kv(first);
        let (d, tq) = (first.d(), groups.iter().map(|g| g.1).sum::<usize>());
        let same = |kv: &PackedKv| (kv.tk, kv.n_head, kv.dh) == (first.tk, first.n_head, first.dh);
        if tq == 0
            || q.len() != tq * d
            || out.len() != tq * d
            || groups.iter().any(|&(i, rows)| rows == 0 || !same(kv(i)))
        {
            return Err(shape_err(
                "attention_packed",
                format!(
                    "q {} and out {} values for {tq} rows of {d} in {} groups (each group \
                     non-empty, every kv of one shape)",
                    q.len(),
                    out.len(),
                    groups.len()
                ),
            ));
        }
        let (isa, dh, dhp, tk, n_head) =
            (self.isa(), first.dh, first.dhp(), first.tk, first.n_head);
        let lds = first.nb() * KEY_BLOCK;
        let scale = 1.0 / (dh as f32).sqrt();
        // Tasks: per group, its heads × row chunks, numbered on from the groups before.
        let tasks: usize = groups.iter().map(|g| n_head * g.1.div_ceil(Q_CHUNK)).sum();
        // Task t's group: its kv, first row, rows and chunks, and t within the group.
        let locate = |mut t: usize| {
            let mut row0 = 0;
            for &(i, rows) in groups {
                let chunks = rows.div_ceil(Q_CHUNK);
                if t < n_head * chunks {
                    return (kv(i), row0, rows, chunks, t);
                }
                (t, row0) = (t - n_head * chunks, row0 + rows);
            }
            unreachable!("task {t} past the groups' tasks")
        };
        let dst = OutPtr(out.as_mut_ptr());
        let task = |t: usize| {
            let (kv, row0, rows, chunks, t) = locate(t);
            let (h, c) = (t / chunks, t % chunks);
            let i0 = row0 + c * Q_CHUNK;
            let n = Q_CHUNK.min(row0 + rows - i0);
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
        if self.threads() == 1 {
            (0..tasks).for_each(task);
        } else {
            self.par_for(tasks, task);
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

    /// Projections packed from the GEMM's blocks equal the products packed afterwards, bit
    /// for bit: key blocks cut by row blocks, heads cut by column blocks (80-wide heads in
    /// 256-wide blocks), few positions (not fused), and weights the fused path does not take.
    #[test]
    fn project_matches_linears_then_pack() {
        let be = CpuBackend::new(2).unwrap();
        // (tk, n_head, d_head, n_in)
        for (tk, nh, dh, n_in) in [
            (5, 2, 8, 16),
            (100, 3, 40, 64),
            (301, 4, 80, 96),
            (1500, 6, 64, 384),
        ] {
            let d = nh * dh;
            let x = rand_vec(tk * n_in, 4);
            for format in ["bf16", "int8", "f32"] {
                let lin = |seed| {
                    let w = Weight::F32(rand_vec(d * n_in, seed));
                    let w = match format {
                        "bf16" => w.for_bf16_gemm(d, n_in, true).unwrap(),
                        "int8" => w.for_int8_gemm(d, n_in, true).unwrap(),
                        _ => w,
                    };
                    Linear::new(w, Some(rand_vec(d, seed + 1)), d, n_in).unwrap()
                };
                let (wk, wv) = (lin(5), lin(7));
                let (mut kb, mut vb) = (vec![0.0; tk * d], vec![0.0; tk * d]);
                let mut got = PackedKv::new(tk, nh, d).unwrap();
                be.install(|| got.project(&be, &x, &wk, &wv, &mut kb, &mut vb))
                    .unwrap();
                let mut want = PackedKv::new(tk, nh, d).unwrap();
                be.linears(&x, tk, &mut [(&wk, &mut kb), (&wv, &mut vb)])
                    .unwrap();
                want.pack(be.isa(), &kb, &vb).unwrap();
                let bits = |v: &[f16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got.k), bits(&want.k), "{tk}×{nh}×{dh} keys, {format}");
                assert_eq!(
                    bits(&got.v),
                    bits(&want.v),
                    "{tk}×{nh}×{dh} values, {format}"
                );
            }
        }
        // Two layers at once equal each on its own (the activations rounded or quantized
        // once for both).
        let (tk, nh, dh, n_in) = (200, 2, 64, 128);
        let x = rand_vec(tk * n_in, 9);
        for int8 in [false, true] {
            let lin = |seed| {
                let w = Weight::F32(rand_vec(nh * dh * n_in, seed));
                let w = if int8 {
                    w.for_int8_gemm(nh * dh, n_in, true).unwrap()
                } else {
                    w.for_bf16_gemm(nh * dh, n_in, true).unwrap()
                };
                Linear::new(w, Some(rand_vec(nh * dh, seed + 1)), nh * dh, n_in).unwrap()
            };
            let ws = [(lin(10), lin(12)), (lin(14), lin(16))];
            let pairs: Vec<(&Linear, &Linear)> = ws.iter().map(|(k, v)| (k, v)).collect();
            let (mut kb, mut vb) = (vec![0.0; tk * nh * dh], vec![0.0; tk * nh * dh]);
            let mut all = vec![PackedKv::new(tk, nh, nh * dh).unwrap(); 2];
            be.install(|| PackedKv::project_all(&mut all, &be, &x, &pairs, &mut kb, &mut vb))
                .unwrap();
            for (kv, (wk, wv)) in all.iter().zip(&pairs) {
                let mut one = PackedKv::new(tk, nh, nh * dh).unwrap();
                be.install(|| one.project(&be, &x, wk, wv, &mut kb, &mut vb))
                    .unwrap();
                assert!(kv.k == one.k && kv.v == one.v, "int8 {int8}");
            }
        }
        let (mut kb, mut vb) = (vec![0.0; tk * nh * dh], vec![0.0; tk * nh * dh]);
        let lin = |seed| {
            let w = Weight::F32(rand_vec(nh * dh * n_in, seed));
            Linear::new(w, None, nh * dh, n_in).unwrap()
        };
        let ws = [(lin(10), lin(12)), (lin(14), lin(16))];
        let pairs: Vec<(&Linear, &Linear)> = ws.iter().map(|(k, v)| (k, v)).collect();
        let mut all = vec![PackedKv::new(tk, nh, nh * dh).unwrap(); 2];
        assert!(PackedKv::project_all(&mut all[..1], &be, &x, &pairs, &mut kb, &mut vb).is_err());
        let mut kv = PackedKv::new(4, 1, 8).unwrap();
        let w = Linear::new(Weight::F32(vec![0.0; 64]), None, 8, 8).unwrap();
        let mut buf = vec![0.0; 32];
        assert!(kv
            .project(&be, &[0.0; 24], &w, &w, &mut buf.clone(), &mut buf)
            .is_err());
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

    /// Row groups against their own keys and values equal each group on its own, bit for
    /// bit; groups of other shapes, empty groups and no groups are refused.
    #[test]
    fn groups_match_each_group_alone() {
        for isa in sotto_isa::available() {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            let (tk, nh, dh) = (70, 3, 20);
            let d = nh * dh;
            let kvs: Vec<PackedKv> = (0..3)
                .map(|i| {
                    let mut kv = PackedKv::new(tk, nh, d).unwrap();
                    kv.pack(isa, &rand_vec(tk * d, 10 + i), &rand_vec(tk * d, 20 + i))
                        .unwrap();
                    kv
                })
                .collect();
            let by_index = |i: usize| &kvs[i];
            for groups in [
                [(0, 1), (1, 1), (2, 1)],
                [(2, 5), (0, 1), (1, 9)],
                [(1, 2), (1, 7), (0, 3)],
            ] {
                let tq: usize = groups.iter().map(|g| g.1).sum();
                let q = rand_vec(tq * d, 3);
                let mut got = vec![f32::NAN; tq * d];
                be.attention_packed_groups(&q, &groups, &by_index, &mut got)
                    .unwrap();
                let mut r0 = 0;
                for (i, n) in groups {
                    let mut want = vec![f32::NAN; n * d];
                    be.attention_packed(&q[r0 * d..(r0 + n) * d], n, &kvs[i], &mut want)
                        .unwrap();
                    assert_eq!(&got[r0 * d..(r0 + n) * d], &want[..], "{isa:?} {groups:?}");
                    r0 += n;
                }
            }
            let other = PackedKv::new(tk + 1, nh, d).unwrap();
            let with_other = |i: usize| if i == 3 { &other } else { &kvs[i] };
            let mut out = vec![0.0; 2 * d];
            let q = vec![0.0; 2 * d];
            let bad: [&[(usize, usize)]; 3] = [&[(0, 1), (3, 1)], &[(0, 2), (1, 0)], &[]];
            for groups in bad {
                assert!(be
                    .attention_packed_groups(&q, groups, &with_other, &mut out)
                    .is_err());
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
