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
    /// blocks and the row tile do not fit L1 together). Otherwise column panels
    /// outermost: each panel block stays in L1 while the row tiles pass.
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
    let (dst, finish) = match out {
        Out::Blocks(_) if epi == Epi::Residual => {
            unreachable!("a residual GEMM adds onto its whole output")
        }
        Out::Whole(out) => {
            assert_eq!(
                out.len(),
                m * n,
                "GEMM output: {} values for {m}×{n}",
                out.len()
            );
            (Some(OutPtr(out.as_mut_ptr())), None)
        }
        Out::Blocks(f) => (None, Some(f)),
    };
    (0..m_blocks * n_blocks).into_par_iter().for_each(|t| {
        // Row blocks outermost: rayon's halving gives each worker a run of rows, which the
        // ops before and after touch on the same worker too.
        let (i0, j0) = ((t / n_blocks) * b.mc, (t % n_blocks) * b.nc);
        let (i1, j1) = ((i0 + b.mc).min(m), (j0 + b.nc).min(n));
        let run = |base: OutPtr, ld: usize, origin: (usize, usize)| {
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
                        // SAFETY: (ic, jc) lies in this task's block, inside the output
                        // `base` points into (`ld` apart, from `origin`).
                        let c = unsafe { base.at((ic - origin.0) * ld + jc - origin.1) };
                        tile(t, c, ld);
                    }
                }
            }
            if epi == Epi::Gelu {
                let (r, c) = (i0 - origin.0..i1 - origin.0, j0 - origin.1..j1 - origin.1);
                // SAFETY: rows i0..i1, columns j0..j1 are this task's block of the output.
                unsafe { base.gelu_block(isa, ld, r, c) };
            }
        };
        match (dst, finish) {
            (Some(dst), _) => run(dst, n, (0, 0)),
            (None, Some(finish)) => BLOCK.with_borrow_mut(|blk| {
                blk.resize(b.mc * b.nc, 0.0);
                run(OutPtr(blk.as_mut_ptr()), b.nc, (i0, j0));
                finish(i0..i1, j0..j1, blk, b.nc);
            }),
            (None, None) => unreachable!("an output is either whole or in blocks"),
        }
    });
}
