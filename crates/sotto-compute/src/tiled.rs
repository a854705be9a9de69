//! f16 weight rows re-laid out in tiles for the decoder's small-M products.
//!
//! Row-major weights make a matrix-vector kernel read several rows at once, i.e. several
//! interleaved streams a few hundred bytes apart, which the hardware prefetcher follows
//! badly (about 10 GB/s per core on Zen 4). In tiles the kernel reads one contiguous
//! stream per thread (about 30 GB/s per core).

use half::f16;

use crate::kernels::{self, TILE_K, TILE_ROWS};
use crate::{shape_err, Result};

/// `n_out × n_in` f16 weights in tiles of [`TILE_ROWS`] rows: tile t holds rows
/// `t·TILE_ROWS..`, as `ceil(n_in / TILE_K)` chunks, each chunk the next [`TILE_K`]
/// columns of every row of the tile in turn. Rows past `n_out` and columns past `n_in`
/// are zero.
///
/// Element (r, p) is at `((r / TILE_ROWS · kc + p / TILE_K) · TILE_ROWS + r % TILE_ROWS)
/// · TILE_K + p % TILE_K` with `kc = ceil(n_in / TILE_K)`.
#[derive(Clone, Debug)]
pub struct F16Tiles {
    data: Vec<f16>,
    n_out: usize,
    n_in: usize,
}

impl F16Tiles {
    /// Tiles `rows` (Shape: [n_out, n_in], row-major).
    pub fn new(rows: &[f16], n_out: usize, n_in: usize) -> Result<Self> {
        if rows.len() != n_out * n_in || n_in == 0 {
            return Err(shape_err(
                "f16 tiles",
                format!("{} elements for {n_out}×{n_in} rows", rows.len()),
            ));
        }
        let kc = n_in.div_ceil(TILE_K);
        let tiles = n_out.div_ceil(TILE_ROWS);
        let mut data = vec![f16::ZERO; tiles * kc * TILE_ROWS * TILE_K];
        for (r, row) in rows.chunks_exact(n_in).enumerate() {
            for (c, chunk) in row.chunks(TILE_K).enumerate() {
                let at = ((r / TILE_ROWS * kc + c) * TILE_ROWS + r % TILE_ROWS) * TILE_K;
                data[at..at + chunk.len()].copy_from_slice(chunk);
            }
        }
        Ok(Self { data, n_out, n_in })
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// f16 values per tile.
    pub fn tile_len(&self) -> usize {
        self.n_in.div_ceil(TILE_K) * TILE_ROWS * TILE_K
    }

    /// All tiles. Shape: [ceil(n_out / TILE_ROWS), tile_len()].
    pub fn data(&self) -> &[f16] {
        &self.data
    }

    /// Copies logical (row-major) elements `start..start + out.len()` into `out` as f32.
    /// Panics when the range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let (k, end) = (self.n_in, start + out.len());
        assert!(
            end <= self.n_out * k,
            "read_f32: {start}..{end} past the end"
        );
        let kc = k.div_ceil(TILE_K);
        let isa = sotto_isa::isa();
        let mut at = start;
        while at < end {
            let (r, p) = (at / k, at % k);
            let n = (TILE_K - p % TILE_K).min(end - at).min(k - p);
            let src = ((r / TILE_ROWS * kc + p / TILE_K) * TILE_ROWS + r % TILE_ROWS) * TILE_K
                + p % TILE_K;
            kernels::f16_to_f32(isa, &self.data[src..src + n], &mut out[at - start..][..n]);
            at += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    #[test]
    fn read_f32_gives_back_the_rows() {
        for (n, k) in [(1, 1), (3, 17), (9, 40), (4, 16)] {
            let rows: Vec<f16> = rand_vec(n * k, 1).into_iter().map(f16::from_f32).collect();
            let t = F16Tiles::new(&rows, n, k).unwrap();
            assert_eq!(t.data().len(), n.div_ceil(TILE_ROWS) * t.tile_len());
            let want: Vec<f32> = rows.iter().map(|v| v.to_f32()).collect();
            let mut all = vec![f32::NAN; n * k];
            t.read_f32(0, &mut all);
            assert_eq!(all, want, "{n}×{k}");
            // A range that starts and ends inside rows.
            let (s, e) = (k / 2, n * k - k / 3);
            let mut part = vec![f32::NAN; e - s];
            t.read_f32(s, &mut part);
            assert_eq!(part, want[s..e], "{n}×{k} {s}..{e}");
        }
        assert!(F16Tiles::new(&[f16::ZERO; 5], 2, 3).is_err());
    }
}
