//! Decoder weights ([`F16Tiles`], [`QuantTiles`]) meeting many input rows: a prompt pass
//! (the previous window's text, ~100–225 tokens). The small-M tile kernels run against one
//! weight tile (or group run) at a time for every input row, row chunk by row chunk, so
//! each weight byte comes from memory once per call while the tile stays in L2, instead
//! of once per [`SMALL_M`] rows. Each output is the same kernel sum as on the small-M path
//! (same operands in the same order): the results are bit for bit those of that path.

use std::cell::RefCell;

use sotto_quant::{QuantActs, GROUP_ROWS};

use crate::kernels::{self, TILE_ROWS};
use crate::linear::{finish_block, SMALL_M};
use crate::{CpuBackend, F16Tiles, OutPtr, QuantTiles};

/// Input rows per kernel call: whole groups of the AVX-512 (6) and AVX2 (2) kernels; with
/// one tile that is a 24 KiB output block on the stack.
const ROW_CHUNK: usize = 4 * SMALL_M - 8;
/// Quantized groups per kernel call (1024 outputs; ~32 KiB of q8_0 rows at n_in 512).
const QUANT_GROUPS: usize = 4;

thread_local! {
    /// The calling thread's quantized activations, one per row chunk, kept between calls.
    static CHUNK_ACTS: RefCell<Vec<QuantActs>> = const { RefCell::new(Vec::new()) };
}

impl CpuBackend {
    /// `out = x · Wᵀ + b` (then the GELU when `gelu`) for f16 tiles and any `m`: tiles split
    /// across threads in contiguous runs, each tile multiplied with every row chunk of `x`.
    ///
    /// `x` Shape: [m, k]; `out` Shape: [m, n].
    pub(crate) fn many_rows_tiled(
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
        #[cfg(target_arch = "x86_64")]
        if kernels::checked(isa) == crate::Isa::Avx512 {
            use crate::kernels::x86_tiles_many::{tile_rows, Panel};
            let run = |t0: usize, t1: usize| {
                let (mut buf, mut panel) = (vec![0.0f32; m * TILE_ROWS], [0.0; _]);
                let panel: &mut Panel = &mut panel;
                for tile in t0..t1 {
                    let w = &t.data()[tile * tl..(tile + 1) * tl];
                    let rows = tile * TILE_ROWS..((tile + 1) * TILE_ROWS).min(n);
                    // SAFETY: `checked` returned Avx512: the CPU has AVX-512 F/BW/VL, AVX2,
                    // FMA and F16C.
                    unsafe { tile_rows(x, m, k, w, &mut buf, TILE_ROWS, panel) };
                    // SAFETY: rows lie in 0..n, so the block's runs lie in `out` ([m, n]);
                    // tasks cover disjoint tiles.
                    unsafe { finish_block(isa, &mut buf, TILE_ROWS, rows, bias, gelu, dst, n) };
                }
            };
            return self.in_runs(n_tiles, run);
        }
        let run = |t0: usize, t1: usize| {
            let mut buf = [0.0f32; ROW_CHUNK * TILE_ROWS];
            for tile in t0..t1 {
                let w = &t.data()[tile * tl..(tile + 1) * tl];
                let rows = tile * TILE_ROWS..((tile + 1) * TILE_ROWS).min(n);
                for i0 in (0..m).step_by(ROW_CHUNK) {
                    let g = ROW_CHUNK.min(m - i0);
                    let block = &mut buf[..g * TILE_ROWS];
                    kernels::matmul_tiled(isa, &x[i0 * k..(i0 + g) * k], g, k, w, block);
                    // SAFETY: rows lie in 0..n and input rows i0..i0 + g in 0..m, so the
                    // block's runs lie in `out` ([m, n]); tasks cover disjoint tiles.
                    unsafe {
                        let at = OutPtr(dst.at(i0 * n));
                        finish_block(isa, block, TILE_ROWS, rows.clone(), bias, gelu, at, n);
                    }
                }
            }
        };
        self.in_runs(n_tiles, run);
    }

    /// As [`CpuBackend::many_rows_tiled`] for quantized tiles: each row chunk's activations
    /// quantized once (ggml's q8 activation semantics, as on the small-M path), then runs
    /// of groups split across threads, each run multiplied with every chunk.
    ///
    /// `x` Shape: [m, k]; `out` Shape: [m, n].
    pub(crate) fn many_rows_quant(
        &self,
        x: &[f32],
        m: usize,
        q: &QuantTiles,
        bias: Option<&[f32]>,
        out: &mut [f32],
        gelu: bool,
    ) {
        let (n, k, isa, n_groups) = (q.n_out(), q.n_in(), self.isa, q.groups());
        // Taken, not borrowed: rayon may run another product on this thread meanwhile.
        let mut acts = CHUNK_ACTS.with(|c| std::mem::take(&mut *c.borrow_mut()));
        let chunks = m.div_ceil(ROW_CHUNK);
        acts.resize_with(acts.len().max(chunks), QuantActs::new);
        for (a, xc) in acts.iter_mut().zip(x.chunks(ROW_CHUNK * k)) {
            a.quantize(q.quant_type(), xc, xc.len() / k, k);
        }
        let dst = OutPtr(out.as_mut_ptr());
        let acts_ref = &acts[..chunks];
        let run = |g0: usize, g1: usize| {
            let mut buf = [0.0f32; ROW_CHUNK * QUANT_GROUPS * GROUP_ROWS];
            for b0 in (g0..g1).step_by(QUANT_GROUPS) {
                let b1 = (b0 + QUANT_GROUPS).min(g1);
                let rows = b0 * GROUP_ROWS..(b1 * GROUP_ROWS).min(n);
                let ldb = (b1 - b0) * GROUP_ROWS;
                for (c, a) in acts_ref.iter().enumerate() {
                    let block = &mut buf[..a.m() * ldb];
                    sotto_quant::tiled_matmul(isa, q, b0..b1, a, block, ldb);
                    // SAFETY: rows lie in 0..n and the chunk's input rows in 0..m, so the
                    // block's runs lie in `out` ([m, n]); tasks cover disjoint groups.
                    unsafe {
                        let at = OutPtr(dst.at(c * ROW_CHUNK * n));
                        finish_block(isa, block, ldb, rows.clone(), bias, gelu, at, n);
                    }
                }
            }
        };
        self.in_runs(n_groups, run);
        CHUNK_ACTS.with(|c| *c.borrow_mut() = acts);
    }

    /// Runs `run(u0, u1)` over `0..units` in contiguous runs: about four per thread, or all
    /// on the calling thread with one thread or at most one unit.
    pub(crate) fn in_runs(&self, units: usize, run: impl Fn(usize, usize) + Sync) {
        if self.threads() == 1 || units <= 1 {
            return run(0, units);
        }
        let per = units.div_ceil(self.threads() * 4);
        self.par_for(units.div_ceil(per), |c| {
            run(c * per, ((c + 1) * per).min(units))
        });
    }
}

#[cfg(test)]
mod tests {
    use half::f16;
    use sotto_quant::QuantType;

    use crate::testutil::{max_abs_diff, rand_vec};
    use crate::{CpuBackend, F16Tiles, Linear, Weight};

    /// The product as the small-M path gives it: [`SMALL_M`](crate::linear::SMALL_M) rows
    /// per call.
    fn by_small_chunks(be: &CpuBackend, x: &[f32], lin: &Linear, gelu: bool) -> Vec<f32> {
        let (n, k) = (lin.n_out, lin.n_in);
        let mut out = vec![f32::NAN; x.len() / k * n];
        let rows = crate::linear::SMALL_M;
        for (xc, oc) in x.chunks(rows * k).zip(out.chunks_mut(rows * n)) {
            if gelu {
                be.linear_gelu(xc, xc.len() / k, lin, oc).unwrap();
            } else {
                be.linear(xc, xc.len() / k, lin, oc).unwrap();
            }
        }
        out
    }

    /// The many-row product of `lin`, with and without GELU, must equal the small-M path's
    /// bit for bit, and (without GELU) lie within `tol` of `exact`.
    fn check_rows(be: &CpuBackend, x: &[f32], lin: &Linear, exact: &[f32], tol: f32, at: &str) {
        let m = x.len() / lin.n_in;
        for gelu in [false, true] {
            let mut got = vec![f32::NAN; m * lin.n_out];
            if gelu {
                be.linear_gelu(x, m, lin, &mut got).unwrap();
            } else {
                be.linear(x, m, lin, &mut got).unwrap();
            }
            let want = by_small_chunks(be, x, lin, gelu);
            let same = got
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{at} gelu {gelu}");
            if !gelu {
                let err = max_abs_diff(&got, exact);
                assert!(err < tol, "{at}: {err}");
            }
        }
    }

    /// `x · Wᵀ + b` in f64. `w` Shape: [n, k].
    fn naive(x: &[f32], w: &[f32], b: &[f32], n: usize, k: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(x.len() / k * n);
        for xi in x.chunks_exact(k) {
            for (wr, bj) in w.chunks_exact(k).zip(b) {
                let s: f64 = xi.iter().zip(wr).map(|(&a, &c)| a as f64 * c as f64).sum();
                out.push((s + *bj as f64) as f32);
            }
        }
        out
    }

    /// Odd shapes: m past and not a multiple of the row chunk, n not a multiple of 64, k odd.
    const SHAPES: [(usize, usize, usize); 5] = [
        (9, 65, 7),
        (25, 130, 33),
        (50, 64, 1),
        (31, 200, 129),
        (97, 70, 64),
    ];

    #[test]
    fn tiles_match_the_small_m_path_bit_for_bit() {
        for (threads, isa) in [1, 3]
            .into_iter()
            .flat_map(|t| sotto_isa::available().into_iter().map(move |i| (t, i)))
        {
            let be = CpuBackend::with_isa(threads, isa).unwrap();
            for (m, n, k) in SHAPES {
                let x = rand_vec(m * k, 1);
                let w16: Vec<f16> = rand_vec(n * k, 2).into_iter().map(f16::from_f32).collect();
                let w32: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
                let b = rand_vec(n, 3);
                let tiles = Weight::F16Tiled(F16Tiles::new(&w16, n, k).unwrap());
                let lin = Linear::new(tiles, Some(b.clone()), n, k).unwrap();
                let at = format!("{isa:?} {threads}t {m}×{n}×{k}");
                check_rows(&be, &x, &lin, &naive(&x, &w32, &b, n, k), 1e-4, &at);
            }
        }
    }

    #[test]
    fn quant_tiles_match_the_small_m_path_bit_for_bit() {
        for (threads, isa) in [1, 3]
            .into_iter()
            .flat_map(|t| sotto_isa::available().into_iter().map(move |i| (t, i)))
        {
            let be = CpuBackend::with_isa(threads, isa).unwrap();
            for t in QuantType::WEIGHTS {
                for (m, n, k) in [(9, 17, 32), (25, 130, 64), (53, 300, 96)] {
                    let x = rand_vec(m * k, 1);
                    let rb = t.row_bytes(k);
                    let mut data = vec![0u8; n * rb];
                    for (wr, q) in rand_vec(n * k, 2)
                        .chunks_exact(k)
                        .zip(data.chunks_exact_mut(rb))
                    {
                        sotto_quant::quantize_row(t, wr, q);
                    }
                    let plain = Weight::Quant {
                        t,
                        data,
                        n_out: n,
                        n_in: k,
                    };
                    let Ok(tiled @ Weight::QuantTiled(_)) = plain.clone().for_decoding(n, k) else {
                        return;
                    };
                    let mut deq = vec![0.0; n * k];
                    plain.read_f32(0, &mut deq);
                    let b = rand_vec(n, 3);
                    let lin = Linear::new(tiled, Some(b.clone()), n, k).unwrap();
                    let at = format!("{isa:?} {threads}t {t} {m}×{n}×{k}");
                    // The activations are quantized (q8): allow for that rounding.
                    check_rows(&be, &x, &lin, &naive(&x, &deq, &b, n, k), 0.05, &at);
                }
            }
        }
    }
}
