//! `y = x · Wᵀ + b`: gemm for many rows (the encoder), small-M SIMD kernels for few (the
//! decoder: 1 row greedy, a few rows for beams), with f16 widened in registers and
//! quantized rows dotted against quantized activations.

use std::cell::Cell;

use rayon::prelude::*;
use sotto_quant::{QuantActs, QuantType, GROUP_ROWS};

use crate::blocked::{add_onto, Epi, Out};
use crate::kernels::{self, WRows, TILE_ROWS};
use crate::{shape_err, CpuBackend, F16Tiles, Isa, Linear, OutPtr, QuantTiles, Result, Weight};

/// Up to this many input rows, each weight row is streamed once for all inputs.
pub(crate) const SMALL_M: usize = 8;
/// From this many rows f16 decoder tiles are rounded to bf16 per call for the bf16 GEMM
/// (where the CPU has it): the conversion costs about as much as 16 rows of tile kernel.
const TILES_BF16_M: usize = 32;
/// Up to this many multiply-adds a small-M product runs on the calling thread: a rayon
/// fork/join from outside the pool measured ~17 µs on 2 cores, while a 1536×384 f16
/// product takes ~25 µs on one core (weights in cache).
const INLINE_WORK: usize = 1 << 18;
/// Up to this many weight bytes a tiled product runs on the calling thread, whatever m.
/// Inside the pool a fork/join costs a few µs, while a d×d decoder weight (288 KiB tiny,
/// 512 KiB base) streams from memory in ~15 µs on one core: splitting those too measured
/// 13–20% faster decoder steps on 2 cores (tiny.en and base, greedy and 5 beams).
const INLINE_BYTES: usize = 1 << 17;

impl CpuBackend {
    /// `out = x · Wᵀ + b`.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub fn linear(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) -> Result<()> {
        self.observe(&[w], x, m);
        self.linear_act(x, m, w, out, false)
    }

    /// `out = gelu(x · Wᵀ + b)`, the GELU applied to each output block while it is hot.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub fn linear_gelu(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) -> Result<()> {
        self.observe(&[w], x, m);
        self.linear_act(x, m, w, out, true)
    }

    /// `out += x · Wᵀ + b`: a residual connection, rounded as the product then the add. On
    /// the encoder's bf16 and f32 GEMMs each finished block is added while it is hot, and
    /// the integer GEMM's tiles add as they store (no product in memory, no pass of its own
    /// for the add); elsewhere the product goes through a buffer and [`CpuBackend::add`].
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub fn linear_residual(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) -> Result<()> {
        check_shapes(x, m, w, out)?;
        self.observe(&[w], x, m);
        let many = m > SMALL_M && w.n_out > 0;
        if many && matches!(w.weight, Weight::Bf16(_)) && crate::bf16::simd(self.isa) {
            let add = add_onto(self.isa, out, w.n_out);
            self.linear_bf16(x, m, w, Out::Blocks(&add), Epi::Store);
        } else if many && crate::f32gemm::runs(self.isa, &w.weight) {
            let add = add_onto(self.isa, out, w.n_out);
            self.linear_f32(x, m, w, Out::Blocks(&add), Epi::Store);
        } else if many && crate::int8::runs(self.isa, &w.weight) {
            self.linear_int8_out(x, m, w, Out::Whole(out), Epi::Residual);
        } else {
            let mut y = self.scratch_f32.take(out.len());
            let done = self.linear_act(x, m, w, &mut y, false);
            let done = done.and_then(|()| self.add(out, &y));
            self.scratch_f32.give(y);
            done?;
        }
        Ok(())
    }

    /// `out_i = x · W_iᵀ + b_i` for several weights meeting the same `x` (attention's
    /// q, k, v; every decoder layer's cross-attention k, v): on the encoder's bf16 and int8
    /// GEMMs `x` is rounded or quantized once for all of them, otherwise each is a
    /// [`CpuBackend::linear`].
    ///
    /// `x` Shape: [m, n_in]; each `out_i` Shape: [m, n_out_i].
    pub fn linears(
        &self,
        x: &[f32],
        m: usize,
        products: &mut [(&Linear, &mut [f32])],
    ) -> Result<()> {
        for (w, out) in products.iter() {
            check_shapes(x, m, w, out)?;
        }
        if self.probe.is_some() {
            let ws: Vec<&Linear> = products.iter().map(|(w, _)| *w).collect();
            self.observe(&ws, x, m);
        }
        let n_in = products.first().map_or(0, |(w, _)| w.n_in);
        let same = |f: fn(&Weight) -> bool| {
            products
                .iter()
                .all(|(w, _)| f(&w.weight) && w.n_in == n_in && w.n_out > 0)
        };
        if m > SMALL_M && same(|w| matches!(w, Weight::Bf16(_))) && crate::bf16::simd(self.isa) {
            self.linears_bf16(x, m, products, Epi::Store);
        } else if m > SMALL_M
            && same(|w| matches!(w, Weight::Int8(_)))
            && crate::int8::runs_together(self.isa, products.iter().map(|(w, _)| &w.weight))
        {
            self.linears_int8(x, m, products, false);
        } else {
            for (w, out) in products.iter_mut() {
                self.linear_act(x, m, w, out, false)?;
            }
        }
        Ok(())
    }

    pub(crate) fn linear_act(
        &self,
        x: &[f32],
        m: usize,
        w: &Linear,
        out: &mut [f32],
        gelu: bool,
    ) -> Result<()> {
        check_shapes(x, m, w, out)?;
        if m == 0 || w.n_out == 0 {
            return Ok(());
        }
        if let Weight::Vocab(v) = &w.weight {
            self.vocab_exact(x, m, v, out);
            if let Some(b) = &w.bias {
                out.chunks_exact_mut(w.n_out)
                    .for_each(|o| o.iter_mut().zip(b).for_each(|(v, bj)| *v += bj));
            }
            if gelu {
                self.gelu(out);
            }
            return Ok(());
        }
        if m <= SMALL_M {
            self.small_m(x, m, w, out, gelu);
        } else if matches!(w.weight, Weight::Bf16(_)) && crate::bf16::simd(self.isa) {
            self.linear_bf16(x, m, w, Out::Whole(out), Epi::gelu(gelu));
        } else if crate::int8::runs(self.isa, &w.weight) {
            self.linear_int8(x, m, w, out, gelu);
        } else if crate::f32gemm::runs(self.isa, &w.weight) {
            self.linear_f32(x, m, w, Out::Whole(out), Epi::gelu(gelu));
        } else if let (Weight::F16Tiled(t), true) =
            (&w.weight, m >= TILES_BF16_M && self.tiles_bf16())
        {
            self.linear_tiles_bf16(x, m, t, w.bias.as_deref(), out, Epi::gelu(gelu));
        } else if let Weight::F16Tiled(t) = &w.weight {
            // Decoder weights meeting a prompt (~100–225 rows): the tiled kernels, each
            // tile against every row; the gemm path would widen the whole matrix to a
            // fresh f32 copy on every call.
            self.many_rows_tiled(x, m, t, w.bias.as_deref(), out, gelu);
        } else if let Weight::QuantTiled(q) = &w.weight {
            self.many_rows_quant(x, m, q, w.bias.as_deref(), out, gelu);
        } else {
            self.install(|| self.gemm_linear(x, m, w, out));
            if gelu {
                self.gelu(out);
            }
        }
        Ok(())
    }

    /// Few input rows: weight rows split across threads into `[rows, m]` blocks.
    fn small_m(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32], gelu: bool) {
        if let Weight::F16Tiled(t) = &w.weight {
            return self.small_m_tiled(x, m, t, w.bias.as_deref(), out, gelu);
        }
        if let Weight::QuantTiled(q) = &w.weight {
            return self.small_m_quant(x, m, q, w.bias.as_deref(), out, gelu);
        }
        let (n, k, isa) = (w.n_out, w.n_in, self.isa);
        let act = quantized_activations(&w.weight, x, m, k);
        let block = |r0: usize, chunk: &mut [f32]| {
            let rows = chunk.len() / m;
            match &w.weight {
                Weight::F32(v) => {
                    kernels::matmul_t(isa, x, m, k, WRows::F32(&v[r0 * k..(r0 + rows) * k]), chunk)
                }
                Weight::F16(v) => {
                    kernels::matmul_t(isa, x, m, k, WRows::F16(&v[r0 * k..(r0 + rows) * k]), chunk)
                }
                Weight::Quant { t, data, .. } => {
                    quant_block(isa, *t, k, data, &act, r0, m, chunk);
                }
                Weight::F16Tiled(_) | Weight::QuantTiled(_) | Weight::Vocab(_) => {
                    unreachable!("tiled and vocabulary weights take their own paths")
                }
                Weight::Bf16(_) | Weight::Int8(_) | Weight::F32Packed(_) => {
                    let mut wf = vec![0.0f32; rows * k];
                    w.weight.read_f32(r0 * k, &mut wf);
                    kernels::matmul_t(isa, x, m, k, WRows::F32(&wf), chunk)
                }
            }
            if let Some(b) = &w.bias {
                for (o, bj) in chunk.chunks_exact_mut(m).zip(&b[r0..r0 + rows]) {
                    o.iter_mut().for_each(|v| *v += bj);
                }
            }
            if gelu {
                kernels::gelu(isa, chunk);
            }
        };
        let fill = |out_t: &mut [f32]| {
            if n * k * m <= INLINE_WORK || self.threads() == 1 {
                block(0, out_t);
            } else {
                let rows = rows_per_task(n, self.threads());
                self.par_chunks_mut(out_t, rows * m, |ci, chunk| block(ci * rows, chunk));
            }
        };
        if m == 1 {
            fill(out);
            return;
        }
        let mut out_t = vec![0.0f32; n * m];
        fill(&mut out_t);
        for (j, o) in out_t.chunks_exact(m).enumerate() {
            for (i, v) in o.iter().enumerate() {
                out[i * n + j] = *v;
            }
        }
    }

    /// [`CpuBackend::small_m`] for tiled f16: contiguous runs of tiles split across
    /// threads, each run computed into a small local `[m, rows]` block and written to its
    /// columns of `out`, so nothing is allocated.
    ///
    /// `x` Shape: [m, k]; `out` Shape: [m, n].
    fn small_m_tiled(
        &self,
        x: &[f32],
        m: usize,
        t: &F16Tiles,
        bias: Option<&[f32]>,
        out: &mut [f32],
        gelu: bool,
    ) {
        let (n, k, isa, tl) = (t.n_out(), t.n_in(), self.isa, t.tile_len());
        let n_tiles = n.div_ceil(TILE_ROWS);
        let dst = OutPtr(out.as_mut_ptr());
        let run = |t0: usize, t1: usize| {
            let mut buf = [0.0f32; LOCAL_TILES * TILE_ROWS * SMALL_M];
            for b0 in (t0..t1).step_by(LOCAL_TILES) {
                let b1 = (b0 + LOCAL_TILES).min(t1);
                let (r0, r1) = (b0 * TILE_ROWS, (b1 * TILE_ROWS).min(n));
                let ldb = (b1 - b0) * TILE_ROWS;
                let block = &mut buf[..ldb * m];
                kernels::matmul_tiled(isa, x, m, k, &t.data()[b0 * tl..b1 * tl], block);
                // SAFETY: r0..r1 lies in 0..n, and tasks cover disjoint rows.
                unsafe { finish_block(isa, block, ldb, r0..r1, bias, gelu, dst, n) };
            }
        };
        if n * k * 2 <= INLINE_BYTES || self.threads() == 1 {
            run(0, n_tiles);
        } else {
            self.in_runs(n_tiles, run);
        }
    }

    /// [`CpuBackend::small_m`] for quantized tiles: the inputs quantized once into a
    /// per-thread buffer, then contiguous runs of groups split across threads as in
    /// [`CpuBackend::small_m_tiled`].
    ///
    /// `x` Shape: [m, k]; `out` Shape: [m, n].
    fn small_m_quant(
        &self,
        x: &[f32],
        m: usize,
        q: &QuantTiles,
        bias: Option<&[f32]>,
        out: &mut [f32],
        gelu: bool,
    ) {
        let (n, isa, n_groups) = (q.n_out(), self.isa, q.groups());
        // Taken, not borrowed: rayon may run another product on this thread while it
        // waits below, and that one then starts from an empty buffer instead of panicking.
        let mut acts = ACTS.with(Cell::take);
        acts.quantize(q.quant_type(), x, m, q.n_in());
        let dst = OutPtr(out.as_mut_ptr());
        let acts_ref = &acts;
        let run = |g0: usize, g1: usize| {
            let mut buf = [0.0f32; LOCAL_GROUPS * GROUP_ROWS * SMALL_M];
            for b0 in (g0..g1).step_by(LOCAL_GROUPS) {
                let b1 = (b0 + LOCAL_GROUPS).min(g1);
                let (r0, r1) = (b0 * GROUP_ROWS, (b1 * GROUP_ROWS).min(n));
                let ldb = (b1 - b0) * GROUP_ROWS;
                let block = &mut buf[..ldb * m];
                sotto_quant::tiled_matmul(isa, q, b0..b1, acts_ref, block, ldb);
                // SAFETY: r0..r1 lies in 0..n, and tasks cover disjoint rows.
                unsafe { finish_block(isa, block, ldb, r0..r1, bias, gelu, dst, n) };
            }
        };
        if q.data().len() <= INLINE_BYTES || self.threads() == 1 {
            run(0, n_groups);
        } else {
            self.in_runs(n_groups, run);
        }
        ACTS.with(|c| c.set(acts));
    }

    fn gemm_linear(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32]) {
        let (n, k) = (w.n_out, w.n_in);
        let converted;
        let wf: &[f32] = match &w.weight {
            Weight::F32(v) => v,
            other => {
                let mut buf = vec![0.0f32; n * k];
                let rows = rows_per_task(n, self.threads());
                buf.par_chunks_mut(rows * k)
                    .enumerate()
                    .for_each(|(i, c)| other.read_f32(i * rows * k, c));
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

/// Tiles per local output block of [`CpuBackend::small_m_tiled`] (an 8 KiB stack buffer).
const LOCAL_TILES: usize = 4;
/// Groups per local output block of [`CpuBackend::small_m_quant`] (a 4 KiB stack buffer).
const LOCAL_GROUPS: usize = 8;

thread_local! {
    /// The calling thread's quantized activations, kept so steady-state products reuse them.
    static ACTS: Cell<QuantActs> = const { Cell::new(QuantActs::new()) };
}

/// Sizes this thread's [`ACTS`] for the quantized few-row products of `shapes`.
pub(crate) fn reserve_thread(shapes: &crate::DecodeShapes) {
    let mut acts = ACTS.take();
    acts.reserve(shapes.rows.min(SMALL_M), shapes.n_in);
    ACTS.set(acts);
}

/// Adds the bias and applies the GELU to a local block of outputs for weight rows `rows`
/// (Shape: [m, ldb], the first `rows.len()` columns valid), then copies each input row's
/// run to its columns of `out` ([m, n] behind `dst`).
///
/// # Safety
/// `rows` must lie in `0..n`, `dst` must point at `m·n` writable values, and no other task
/// may write these rows' columns meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn finish_block(
    isa: Isa,
    block: &mut [f32],
    ldb: usize,
    rows: std::ops::Range<usize>,
    bias: Option<&[f32]>,
    gelu: bool,
    dst: OutPtr,
    n: usize,
) {
    for (i, src) in block.chunks_exact_mut(ldb).enumerate() {
        let src = &mut src[..rows.len()];
        if let Some(b) = bias {
            src.iter_mut()
                .zip(&b[rows.clone()])
                .for_each(|(v, bj)| *v += bj);
        }
        if gelu {
            kernels::gelu(isa, src);
        }
        // SAFETY: i < m and `rows` lies in 0..n, so the run lies in `out` ([m, n]); the
        // caller guarantees no other writer.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst.at(i * n + rows.start), rows.len())
        };
    }
}

/// Weight rows per parallel task: about four tasks per thread, a multiple of 4 rows.
fn rows_per_task(n: usize, threads: usize) -> usize {
    n.div_ceil(threads * 4).max(16).next_multiple_of(4)
}

/// For quantized weights, the `m` input rows quantized once to the weight type's
/// activation blocks (Shape: [m, row_bytes]); empty otherwise.
fn quantized_activations(w: &Weight, x: &[f32], m: usize, k: usize) -> Vec<u8> {
    let Weight::Quant { t, .. } = w else {
        return Vec::new();
    };
    let rb = t.activation_type().row_bytes(k);
    let mut act = vec![0u8; m * rb];
    for (xi, a) in x.chunks_exact(k).zip(act.chunks_exact_mut(rb)) {
        sotto_quant::quantize_activations(*t, xi, a);
    }
    act
}

/// `out_t[r·m + i] = w_{r0 + r} · act_i` for quantized weight rows.
#[allow(clippy::too_many_arguments)]
fn quant_block(
    isa: Isa,
    t: QuantType,
    k: usize,
    data: &[u8],
    act: &[u8],
    r0: usize,
    m: usize,
    out_t: &mut [f32],
) {
    let (wb, ab) = (t.row_bytes(k), t.activation_type().row_bytes(k));
    for (r, o) in out_t.chunks_exact_mut(m).enumerate() {
        let wr = &data[(r0 + r) * wb..(r0 + r + 1) * wb];
        for (i, oi) in o.iter_mut().enumerate() {
            *oi = sotto_quant::vec_dot(isa, t, k, wr, &act[i * ab..(i + 1) * ab]);
        }
    }
}

pub(crate) fn check_shapes(x: &[f32], m: usize, w: &Linear, out: &[f32]) -> Result<()> {
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
    Ok(())
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
        for (threads, isa) in [1, 3]
            .into_iter()
            .flat_map(|t| sotto_isa::available().into_iter().map(move |i| (t, i)))
        {
            let be = CpuBackend::with_isa(threads, isa)
                .unwrap()
                .with_bf16_tiles(true);
            for &(m, n, k) in &[
                (1, 7, 13),
                (3, 33, 65),
                (5, 100, 9),
                (8, 17, 31),
                (9, 19, 23),
                (37, 71, 129),
                (2, 700, 97),
                (1, 1000, 100),
                (5, 1001, 385),
                (7, 300, 64),
                (40, 97, 65),
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
                    let tiled = Weight::F16Tiled(F16Tiles::new(&w16, n, k).unwrap());
                    let lt = Linear::new(tiled, bias.clone(), n, k).unwrap();
                    out.fill(f32::NAN);
                    be.linear(&x, m, &lt, &mut out).unwrap();
                    if m >= TILES_BF16_M && crate::bf16::simd(isa) {
                        // Many rows on tiles take the bf16 GEMM: against its scalar model.
                        let packed = crate::bf16::Bf16Packed::new(&w16_as32, n, k).unwrap();
                        let mut want_bf = vec![0.0; m * n];
                        crate::bf16::linear_reference(
                            &x,
                            m,
                            &packed,
                            bias.as_deref(),
                            &mut want_bf,
                        )
                        .unwrap();
                        assert!(
                            max_abs_diff(&out, &want_bf) < 1e-4,
                            "tiled bf16 {m} {n} {k}"
                        );
                        assert!(max_abs_diff(&out, &want) < 5e-2, "tiled bf16 {m} {n} {k}");
                    } else {
                        assert!(max_abs_diff(&out, &want) < 1e-4, "tiled {m} {n} {k}");
                    }
                    let mut g = vec![f32::NAN; m * n];
                    be.linear_gelu(&x, m, &lt, &mut g).unwrap();
                    // Against the same product, so only the GELU is compared.
                    let mut want_g = out.clone();
                    crate::kernels::gelu(Isa::Scalar, &mut want_g);
                    assert!(max_abs_diff(&g, &want_g) < 1e-5, "tiled gelu {m} {n} {k}");
                    let mut g = vec![f32::NAN; m * n];
                    be.linear_gelu(&x, m, &l16, &mut g).unwrap();
                    be.linear(&x, m, &l16, &mut out).unwrap();
                    crate::kernels::gelu(Isa::Scalar, &mut out);
                    assert!(max_abs_diff(&g, &out) < 1e-5, "gelu {m} {n} {k}");
                }
            }
        }
    }

    #[test]
    fn linear_quantized_matches_dequantized() {
        for isa in sotto_isa::available() {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            for t in QuantType::WEIGHTS {
                for &(m, n, k) in &[(1, 37, 64), (3, 300, 96), (5, 9, 32), (12, 40, 64)] {
                    let x = rand_vec(m * k, 1);
                    let w = rand_vec(n * k, 2);
                    let rb = t.row_bytes(k);
                    let mut data = vec![0u8; n * rb];
                    for (wr, q) in w.chunks_exact(k).zip(data.chunks_exact_mut(rb)) {
                        sotto_quant::quantize_row(t, wr, q);
                    }
                    let weight = Weight::Quant {
                        t,
                        data,
                        n_out: n,
                        n_in: k,
                    };
                    let mut deq = vec![0.0; n * k];
                    weight.read_f32(0, &mut deq);
                    let b = rand_vec(n, 3);
                    let lin = Linear::new(weight, Some(b.clone()), n, k).unwrap();
                    let mut out = vec![f32::NAN; m * n];
                    be.linear(&x, m, &lin, &mut out).unwrap();
                    let want = naive(&x, m, &deq, Some(&b), n, k);
                    // Small M also quantizes the activations (q8): allow for that rounding.
                    let tol = if m <= SMALL_M { 0.05 } else { 1e-4 };
                    let err = max_abs_diff(&out, &want);
                    assert!(err < tol, "{isa:?} {t} {m}×{n}×{k}: {err}");
                }
            }
        }
        let q = |n_in| Weight::Quant {
            t: QuantType::Q8_0,
            data: vec![0; 34],
            n_out: 1,
            n_in,
        };
        assert!(Linear::new(q(32), None, 1, 32).is_ok());
        assert!(Linear::new(q(31), None, 1, 31).is_err());
        assert!(Linear::new(q(32), None, 2, 16).is_err());
    }

    /// Quantized rows regrouped for decoding against the same rows as they are: the same
    /// quantized activations, so only the summation order differs; the many-row path reads
    /// the tiles back as f32.
    #[test]
    fn linear_quant_tiles_match_plain_quant_rows() {
        for (threads, isa) in [1, 3]
            .into_iter()
            .flat_map(|t| sotto_isa::available().into_iter().map(move |i| (t, i)))
        {
            let be = CpuBackend::with_isa(threads, isa).unwrap();
            for t in QuantType::WEIGHTS {
                for &(m, n, k) in &[
                    (1, 37, 64),
                    (3, 300, 96),
                    (5, 9, 32),
                    (8, 2100, 384),
                    (12, 40, 64),
                ] {
                    let x = rand_vec(m * k, 1);
                    let w = rand_vec(n * k, 2);
                    let rb = t.row_bytes(k);
                    let mut data = vec![0u8; n * rb];
                    for (wr, q) in w.chunks_exact(k).zip(data.chunks_exact_mut(rb)) {
                        sotto_quant::quantize_row(t, wr, q);
                    }
                    let plain = Weight::Quant {
                        t,
                        data,
                        n_out: n,
                        n_in: k,
                    };
                    let tiled = Weight::QuantTiled(match plain.clone().for_decoding(n, k) {
                        Ok(Weight::QuantTiled(q)) => q,
                        Ok(_) if !sotto_quant::tiles_have_kernels() => return,
                        other => panic!("for_decoding gave {other:?}"),
                    });
                    let mut deq = vec![0.0; n * k];
                    plain.read_f32(0, &mut deq);
                    let mut deq_t = vec![f32::NAN; n * k];
                    tiled.read_f32(0, &mut deq_t);
                    assert!(deq == deq_t, "{t}: tiles read back other values");
                    let b = rand_vec(n, 3);
                    for bias in [None, Some(b.clone())] {
                        let lp = Linear::new(plain.clone(), bias.clone(), n, k).unwrap();
                        let lt = Linear::new(tiled.clone(), bias.clone(), n, k).unwrap();
                        let (mut want, mut got) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                        be.linear(&x, m, &lp, &mut want).unwrap();
                        be.linear(&x, m, &lt, &mut got).unwrap();
                        let err = max_abs_diff(&got, &want);
                        // Past SMALL_M plain rows take the f32 gemm while tiles still
                        // quantize the activations (q8): allow for that rounding.
                        let tol = if m <= SMALL_M { 1e-4 } else { 0.05 };
                        assert!(err < tol, "{isa:?} {threads}t {t} {m}×{n}×{k}: {err}");
                        let mut g = vec![f32::NAN; m * n];
                        be.linear_gelu(&x, m, &lt, &mut g).unwrap();
                        crate::kernels::gelu(Isa::Scalar, &mut got);
                        let err = max_abs_diff(&g, &got);
                        assert!(err < 1e-5, "{isa:?} {threads}t {t} gelu {m}×{n}×{k}: {err}");
                    }
                }
            }
        }
        let q = Weight::Quant {
            t: QuantType::Q8_0,
            data: vec![0; 34],
            n_out: 1,
            n_in: 32,
        };
        let tiled = q.clone().for_decoding(1, 32).unwrap();
        assert!(Linear::new(tiled.clone(), None, 1, 32).is_ok());
        assert!(Linear::new(tiled, None, 2, 16).is_err());
        if sotto_quant::tiles_have_kernels() {
            assert!(q.clone().for_decoding(2, 16).is_err());
        }
    }

    #[test]
    fn reused_gemm_buffers_leave_no_trace() {
        // The bf16 and int8 GEMMs reuse their packed-activation buffers without zeroing
        // them: a product after a larger one (more rows, longer rows, an odd width) must
        // equal the same product on a fresh backend.
        let shapes = [
            (40, 96, 24),
            (21, 64, 8),
            (9, 31, 5),
            (19, 64, 8),
            (13, 32, 5),
        ];
        for format in 1..3 {
            let used = CpuBackend::new(2).unwrap();
            for (i, &(m, k, n)) in shapes.iter().enumerate() {
                let w = Weight::F32(rand_vec(n * k, 40 + i as u64));
                let w = match format {
                    1 => w.for_bf16_gemm(n, k, true).unwrap(),
                    _ => w.for_int8_gemm(n, k, true).unwrap(),
                };
                let l = Linear::new(w, None, n, k).unwrap();
                let x = rand_vec(m * k, 50 + i as u64);
                let (mut got, mut want) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
                used.linear(&x, m, &l, &mut got).unwrap();
                CpuBackend::new(2)
                    .unwrap()
                    .linear(&x, m, &l, &mut want)
                    .unwrap();
                assert_eq!(got, want, "format {format}, shape {:?}", (m, k, n));
            }
        }
    }

    #[test]
    fn linears_equal_one_linear_each() {
        // Shared-input products are the same arithmetic as one linear each, bit for bit,
        // on every weight format the encoder uses (bf16 and int8 where the CPU has them).
        let (m, k) = (37, 70);
        let x = rand_vec(m * k, 11);
        for threads in [1, 3] {
            let be = CpuBackend::new(threads).unwrap();
            for format in 0..3 {
                let lins: Vec<Linear> = [33, 64, 5]
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        let w = Weight::F32(rand_vec(n * k, 20 + i as u64));
                        let w = match format {
                            0 => w,
                            1 => w.for_bf16_gemm(n, k, true).unwrap(),
                            _ => w.for_int8_gemm(n, k, true).unwrap(),
                        };
                        let b = rand_vec(n, 30 + i as u64);
                        Linear::new(w, Some(b), n, k).unwrap()
                    })
                    .collect();
                let mut got: Vec<Vec<f32>> =
                    lins.iter().map(|l| vec![f32::NAN; m * l.n_out]).collect();
                let mut products: Vec<(&Linear, &mut [f32])> = lins
                    .iter()
                    .zip(got.iter_mut())
                    .map(|(l, o)| (l, &mut o[..]))
                    .collect();
                be.linears(&x, m, &mut products).unwrap();
                for (l, g) in lins.iter().zip(&got) {
                    let mut want = vec![0.0; m * l.n_out];
                    be.linear(&x, m, l, &mut want).unwrap();
                    assert_eq!(
                        g, &want,
                        "format {format}, {threads} threads, n {}",
                        l.n_out
                    );
                }
            }
        }
        let be = CpuBackend::new(1).unwrap();
        let l = Linear::new(Weight::F32(vec![0.0; 6]), None, 2, 3).unwrap();
        let (mut a, mut b) = (vec![0.0; 2], vec![0.0; 3]);
        assert!(be
            .linears(&[0.0; 3], 1, &mut [(&l, &mut a), (&l, &mut b)])
            .is_err());
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
