//! The blocked loop nest the many-row GEMMs share (bf16 in `bf16.rs`, f32 in
//! `f32gemm.rs`, int8 in `int8.rs`): output blocks of `mc × nc` in parallel, row blocks outermost; within a
//! block, k in cache blocks of at most `kc`, then column panels of `nr` and row tiles of
//! `mr` (either one outermost); GELU on each finished block while it is hot. A block can
//! also be finished in a per-thread buffer and handed on ([`Out::Blocks`]): added onto a
//! residual, or packed.

use std::cell::RefCell;
use std::ops::Range;

use rayon::prelude::*;

use crate::{kernels, shape_err, Isa, OutPtr, Result};

/// What a blocked GEMM leaves in `out` besides the product and bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epi {
    /// `out = x·Wᵀ + b`.
    Store,
    /// `out = gelu(x·Wᵀ + b)`.
    Gelu,
    /// `out += x·Wᵀ + b` (the product rounded, then the add), by the tile as it stores:
    /// a residual connection with no pass of its own. The integer GEMM's tiles only
    /// ([`crate::int8`]), with [`Out::Whole`].
    Residual,
}

impl Epi {
    pub(crate) fn gelu(gelu: bool) -> Epi {
        if gelu {
            Epi::Gelu
        } else {
            Epi::Store
        }
    }
}

/// The shape checks of a GEMM's scalar model (`linear_reference`): `x` Shape: [m, k],
/// `out` Shape: [m, n], `bias` Shape: [n].
pub(crate) fn check_reference(
    op: &'static str,
    x: &[f32],
    m: usize,
    (n, k): (usize, usize),
    bias: Option<&[f32]>,
    out: &[f32],
) -> Result<()> {
    if x.len() != m * k || out.len() != m * n || bias.is_some_and(|b| b.len() != n) {
        return Err(shape_err(
            op,
            format!(
                "x has {} elements and out {}, expected {m}×{k} and {m}×{n}",
                x.len(),
                out.len()
            ),
        ));
    }
    Ok(())
}

/// Tile and block sizes of one GEMM (`mc` a multiple of `mr`, `nc` of `nr`).
#[derive(Clone, Copy)]
pub(crate) struct Blocks {
    pub mr: usize,
    pub nr: usize,
    pub mc: usize,
    pub nc: usize,
    /// Most k units (pairs for bf16, values for f32) per cache block.
    pub kc: usize,
    /// Within a k block, row tiles outermost: each row tile's activations stay in L1
    /// while the weight panels stream from L2 (AVX2's f32 GEMM, whose 24 KiB panel
    /// blocks and the row tile do not fit L1 together; the bf16 and int8 GEMMs on x86).
    /// Otherwise column panels outermost: each panel block stays in L1 while the row
    /// tiles pass.
    pub rows_outer: bool,
}

#[cfg(target_arch = "x86_64")]
impl Blocks {
    /// The AMX GEMMs' blocks (bf16 and int8): 32 × 32 tiles, the whole of k per block. The
    /// sums stay in tile registers from the first k unit to the last, and the tile loads,
    /// not the caches, set the pace (k in blocks of 256 was 18% slower at k = 1536 and
    /// 2048; other block shapes and loop orders measured the same).
    pub(crate) const AMX: Blocks = Blocks {
        mr: kernels::x86_amx::TR,
        nr: kernels::x86_amx::TC,
        mc: 4 * kernels::x86_amx::TR,
        nc: 4 * kernels::x86_amx::TC,
        kc: usize::MAX,
        rows_outer: false,
    };
}

/// One microkernel call: output rows `ic..ic + rows`, columns `jc..jc + cols`, k units
/// `p0..p0 + len` (`acc`: add onto the sums earlier k blocks left; `last`: the bias goes
/// on now).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the tiles are x86 kernels
pub(crate) struct Tile {
    pub ic: usize,
    pub jc: usize,
    pub rows: usize,
    pub cols: usize,
    pub p0: usize,
    pub len: usize,
    pub acc: bool,
    pub last: bool,
    /// The first tile of its task: a kernel with per-thread state (AMX's tile
    /// configuration) sets it up here.
    pub first: bool,
}

/// Takes a finished block: its rows, its columns, the block (row i − rows.start holds row
/// i's columns) and its row stride.
pub(crate) type FinishBlock<'f> = dyn Fn(Range<usize>, Range<usize>, &[f32], usize) + Sync + 'f;

/// Where a blocked GEMM's sums go.
pub(crate) enum Out<'a> {
    /// Shape: [m, n].
    Whole(&'a mut [f32]),
    /// Each task makes its block in a per-thread buffer and hands it, finished (GELU
    /// applied), to the closure with its rows, columns and row stride: row i − rows.start
    /// of the slice holds row i's columns `cols`. The block never reaches memory as f32.
    /// The closure runs while the buffer is borrowed, so it must not start pool work (a
    /// task stolen onto this thread would find its buffer taken).
    Blocks(&'a FinishBlock<'a>),
    /// Columns split into heads of `dh`, each head's rows together: element (i, j) at
    /// `((j / dh)·rows + i)·dh + j % dh` (Shape: [n / dh, rows, dh], rows ≥ m; rows past m
    /// are not written). The attention's queries, written there by the tiles themselves
    /// when a tile's columns lie in one head (`nr` divides `dh`), else through a block.
    /// `Epi::Store` only.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // the mixed attention is x86's
    Heads(&'a mut [f32], usize, usize),
}

/// A finish for [`Out::Blocks`] that adds each block onto its place in `out` (Shape:
/// [_, n]): a residual connection, `out + (x·Wᵀ + b)` rounded as a product then an add.
pub(crate) fn add_onto(
    isa: Isa,
    out: &mut [f32],
    n: usize,
) -> impl Fn(Range<usize>, Range<usize>, &[f32], usize) + Sync + '_ {
    let rows = out.len().checked_div(n).unwrap_or(0);
    let dst = OutPtr(out.as_mut_ptr());
    move |r: Range<usize>, c: Range<usize>, blk: &[f32], ld: usize| {
        assert!(r.end <= rows && c.end <= n, "block past the residual");
        for (i, src) in r.zip(blk.chunks(ld)) {
            // SAFETY: row i < rows, columns c < n lie in `out`, and a block's elements are
            // its task's alone (`for_each_tile`).
            let o = unsafe { std::slice::from_raw_parts_mut(dst.at(i * n + c.start), c.len()) };
            kernels::add(isa, o, &src[..c.len()]);
        }
    }
}

thread_local! {
    /// The block of [`Out::Blocks`], kept between calls.
    static BLOCK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `tile` over every tile of `out` (m × n, `k` units deep), inside the current pool;
/// `tile` gets the tile and where its sums go (row r of the tile at `c + r·ldc`). Each
/// tile's rows and columns lie in one task's block, which no other task writes. An empty k
/// still visits every tile once (`len` 0), so outputs get their bias.
pub(crate) fn for_each_tile(
    isa: Isa,
    b: Blocks,
    (m, n, k): (usize, usize, usize),
    out: Out<'_>,
    epi: Epi,
    tile: impl Fn(Tile, *mut f32, usize) + Sync,
) {
    let (m_blocks, n_blocks) = (m.div_ceil(b.mc), n.div_ceil(b.nc));
    let k_blocks = k.div_ceil(b.kc).max(1);
    let kc = k.div_ceil(k_blocks).max(1);
    let dst = match out {
        Out::Blocks(_) | Out::Heads(..) if epi == Epi::Residual => {
            unreachable!("a residual GEMM adds onto its whole output")
        }
        Out::Heads(..) if epi == Epi::Gelu => unreachable!("GELU runs on whole rows"),
        Out::Whole(out) => {
            assert_eq!(
                out.len(),
                m * n,
                "GEMM output: {} values for {m}×{n}",
                out.len()
            );
            Dst::Rows(OutPtr(out.as_mut_ptr()))
        }
        Out::Heads(out, rows, dh) => {
            assert!(
                dh > 0 && n.is_multiple_of(dh) && rows >= m && out.len() == n * rows,
                "GEMM output by heads: {} values for {m}×{n} in heads of {dh}, {rows} rows",
                out.len()
            );
            let heads = OutPtr(out.as_mut_ptr());
            if !dh.is_multiple_of(b.nr) {
                // A tile would straddle two heads: each block goes through a copy.
                let put = |r: Range<usize>, c: Range<usize>, blk: &[f32], ld: usize| {
                    for (i, src) in r.zip(blk.chunks(ld)) {
                        for (j, &v) in c.clone().zip(src) {
                            // SAFETY: i < m ≤ rows and j < n, so the element lies in `out`
                            // (checked above); a block is its task's alone.
                            unsafe { *heads.at(((j / dh) * rows + i) * dh + j % dh) = v };
                        }
                    }
                };
                return for_each_tile(isa, b, (m, n, k), Out::Blocks(&put), epi, tile);
            }
            Dst::Heads(heads, rows, dh)
        }
        Out::Blocks(f) => Dst::Block(f),
    };
    (0..m_blocks * n_blocks).into_par_iter().for_each(|t| {
        // Row blocks outermost: rayon's halving gives each worker a run of rows, which the
        // ops before and after touch on the same worker too.
        let (i0, j0) = ((t / n_blocks) * b.mc, (t % n_blocks) * b.nc);
        let (i1, j1) = ((i0 + b.mc).min(m), (j0 + b.nc).min(n));
        // Where tile (ic, jc) of the block starts, and its row stride.
        let run = |at: &dyn Fn(usize, usize) -> (*mut f32, usize)| {
            for p0 in (0..k.max(1)).step_by(kc) {
                let len = kc.min(k - p0);
                let (n_j, n_i) = ((j1 - j0).div_ceil(b.nr), (i1 - i0).div_ceil(b.mr));
                let (n_outer, n_inner) = if b.rows_outer { (n_i, n_j) } else { (n_j, n_i) };
                for outer in 0..n_outer {
                    for inner in 0..n_inner {
                        let (jt, it) = if b.rows_outer {
                            (inner, outer)
                        } else {
                            (outer, inner)
                        };
                        let (jc, ic) = (j0 + jt * b.nr, i0 + it * b.mr);
                        let (rows, cols) = (b.mr.min(i1 - ic), b.nr.min(j1 - jc));
                        let (acc, last) = (p0 > 0, p0 + len >= k);
                        let first = p0 == 0 && outer == 0 && inner == 0;
                        let t = Tile {
                            ic,
                            jc,
                            rows,
                            cols,
                            p0,
                            len,
                            acc,
                            last,
                            first,
                        };
                        let (c, ldc) = at(ic, jc);
                        tile(t, c, ldc);
                    }
                }
            }
        };
        // GELU on the block of a [_, ld] output whose row r0, column c0 `base` points at.
        let gelu = |base: OutPtr, ld: usize, (r0, c0): (usize, usize)| {
            if epi == Epi::Gelu {
                let (r, c) = (i0 - r0..i1 - r0, j0 - c0..j1 - c0);
                // SAFETY: rows i0..i1, columns j0..j1 are this task's block of the output.
                unsafe { base.gelu_block(isa, ld, r, c) };
            }
        };
        match dst {
            Dst::Rows(dst) => {
                // SAFETY: (ic, jc) lies in this task's block of the [m, n] output.
                run(&|ic, jc| (unsafe { dst.at(ic * n + jc) }, n));
                gelu(dst, n, (0, 0));
            }
            Dst::Heads(dst, rows, dh) => {
                // SAFETY: tile (ic, jc) lies in this task's block; its columns jc..jc + nr
                // lie in head jc / dh (nr divides dh), at rows ic.. < m ≤ rows.
                let at = |ic: usize, jc: usize| unsafe {
                    (dst.at(((jc / dh) * rows + ic) * dh + jc % dh), dh)
                };
                run(&at);
            }
            Dst::Block(finish) => BLOCK.with_borrow_mut(|blk| {
                blk.resize(b.mc * b.nc, 0.0);
                let base = OutPtr(blk.as_mut_ptr());
                // SAFETY: (ic, jc) lies in this task's block, which the buffer holds
                // (`nc` apart, from (i0, j0)).
                run(&|ic, jc| (unsafe { base.at((ic - i0) * b.nc + jc - j0) }, b.nc));
                gelu(base, b.nc, (i0, j0));
                finish(i0..i1, j0..j1, blk, b.nc);
            }),
        }
    });
}

/// Where [`for_each_tile`]'s tiles write: an [`Out`] with its slices as shared pointers.
#[derive(Clone, Copy)]
enum Dst<'f> {
    Rows(OutPtr),
    Heads(OutPtr, usize, usize),
    Block(&'f FinishBlock<'f>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    /// A product through `for_each_tile` with a plain tile (sums in the order of k, onto
    /// the earlier k blocks' when `acc`), into `out`.
    fn product(x: &[f32], w: &[f32], (m, n, k): (usize, usize, usize), b: Blocks, out: Out<'_>) {
        for_each_tile(Isa::Scalar, b, (m, n, k), out, Epi::Store, |t, c, ldc| {
            for r in 0..t.rows {
                for j in 0..t.cols {
                    let (i, col) = (t.ic + r, t.jc + j);
                    let s: f32 = (t.p0..t.p0 + t.len)
                        .map(|p| x[i * k + p] * w[col * k + p])
                        .sum();
                    // SAFETY: the tile's rows and columns lie at c, ldc apart.
                    unsafe {
                        let at = c.add(r * ldc + j);
                        *at = if t.acc { *at + s } else { s };
                    }
                }
            }
        });
    }

    /// Out::Heads holds Out::Whole's values by head, whether the tiles write there
    /// themselves (nr divides dh) or through a block (it does not), with k in one block or
    /// several; the padding rows past m are left alone.
    #[test]
    fn heads_hold_the_whole_output_by_head() {
        let (m, k) = (37, 21);
        for (n, dh, nr, kc) in [
            (96, 32, 16, 64),
            (96, 32, 32, 8),
            (96, 48, 32, 64),
            (64, 16, 32, 5),
        ] {
            let b = Blocks {
                mr: 4,
                nr,
                mc: 12,
                nc: 2 * nr,
                kc,
                rows_outer: false,
            };
            let (x, w) = (rand_vec(m * k, 1), rand_vec(n * k, 2));
            let mut whole = vec![f32::NAN; m * n];
            product(&x, &w, (m, n, k), b, Out::Whole(&mut whole));
            let rows = m + 3;
            let mut heads = vec![7.0; n * rows];
            product(&x, &w, (m, n, k), b, Out::Heads(&mut heads, rows, dh));
            for h in 0..n / dh {
                for i in 0..rows {
                    for p in 0..dh {
                        let got = heads[(h * rows + i) * dh + p];
                        let want = if i < m {
                            whole[i * n + h * dh + p]
                        } else {
                            7.0
                        };
                        assert_eq!(
                            got, want,
                            "n {n} dh {dh} nr {nr} kc {kc}: ({i}, {h}·{dh} + {p})"
                        );
                    }
                }
            }
        }
    }
}
