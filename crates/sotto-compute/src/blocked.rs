//! The blocked loop nest the many-row GEMMs share (bf16 in `bf16.rs`, f32 in
//! `f32gemm.rs`, int8 in `int8.rs`): output blocks of `mc × nc` in parallel, row blocks outermost; within a
//! block, k in cache blocks of at most `kc`, then column panels of `nr`, then row tiles of
//! `mr`; GELU on each finished block while it is hot, or the sums added onto `out` (a
//! residual connection) instead of stored.

use rayon::prelude::*;

use crate::{Isa, OutPtr};

/// What a blocked GEMM leaves in `out` besides the product and bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Epi {
    /// `out = x·Wᵀ + b`.
    Store,
    /// `out = gelu(x·Wᵀ + b)`.
    Gelu,
    /// `out += x·Wᵀ + b`: the first k block continues from `out`'s values.
    Add,
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

/// Tile and block sizes of one GEMM (`mc` a multiple of `mr`, `nc` of `nr`).
#[derive(Clone, Copy)]
pub(crate) struct Blocks {
    pub mr: usize,
    pub nr: usize,
    pub mc: usize,
    pub nc: usize,
    /// Most k units (pairs for bf16, values for f32) per cache block.
    pub kc: usize,
}

/// One microkernel call: output rows `ic..ic + rows`, columns `jc..jc + cols`, k units
/// `p0..p0 + len` (`acc`: add onto the tile's values in `out`, which earlier k blocks or
/// the caller ([`Epi::Add`]) left; `last`: the bias goes on now).
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
}

/// Runs `tile` over every tile of `out` (Shape: [m, n], `k` units deep), inside the current
/// pool; each tile's rows and columns lie in one task's block, which no other task writes.
/// An empty k still visits every tile once (`len` 0), so outputs get their bias.
pub(crate) fn for_each_tile(
    isa: Isa,
    b: Blocks,
    (m, n, k): (usize, usize, usize),
    out: &mut [f32],
    epi: Epi,
    tile: impl Fn(Tile, OutPtr) + Sync,
) {
    let (m_blocks, n_blocks) = (m.div_ceil(b.mc), n.div_ceil(b.nc));
    let k_blocks = k.div_ceil(b.kc).max(1);
    let kc = k.div_ceil(k_blocks).max(1);
    let dst = OutPtr(out.as_mut_ptr());
    (0..m_blocks * n_blocks).into_par_iter().for_each(|t| {
        // Row blocks outermost: rayon's halving gives each worker a run of rows, which the
        // ops before and after touch on the same worker too.
        let (i0, j0) = ((t / n_blocks) * b.mc, (t % n_blocks) * b.nc);
        let (i1, j1) = ((i0 + b.mc).min(m), (j0 + b.nc).min(n));
        for p0 in (0..k.max(1)).step_by(kc) {
            let len = kc.min(k - p0);
            for jc in (j0..j1).step_by(b.nr) {
                for ic in (i0..i1).step_by(b.mr) {
                    let (rows, cols) = (b.mr.min(i1 - ic), b.nr.min(j1 - jc));
                    let (acc, last) = (p0 > 0 || epi == Epi::Add, p0 + len >= k);
                    let t = Tile {
                        ic,
                        jc,
                        rows,
                        cols,
                        p0,
                        len,
                        acc,
                        last,
                    };
                    tile(t, dst);
                }
            }
        }
        if epi == Epi::Gelu {
            // SAFETY: rows i0..i1, columns j0..j1 are this task's block of `out`.
            unsafe { dst.gelu_block(isa, n, i0..i1, j0..j1) };
        }
    });
}
