//! f16 weight rows re-laid out in tiles for the decoder's small-M products.
//!
//! Row-major weights make a matrix-vector kernel read several rows at once, i.e. several
//! interleaved streams a few hundred bytes apart, which the hardware prefetcher follows
//! badly (about 10 GB/s per core on Zen 4). In tiles the kernel reads one contiguous
//! stream per thread, and each tile column is a run of outputs, so the kernel keeps
//! outputs in vector lanes and never sums across lanes.

use half::f16;
use rayon::prelude::*;

use crate::kernels::{self, TILE_ROWS};
use crate::{shape_err, Result};

/// `n_out` rows of `n_in` values laid out in panels of `W` rows, each value through
/// `conv`: panel t holds rows `t·W..` column by column (`W` values per input position),
/// rows past `n_out` `T::default()`. Element (r, p) lands at `(r / W · n_in + p) · W + r % W`.
///
/// Columns are made in parallel straight into the new buffer (a model load lays out ~75M
/// values), each read from `W` rows whose current cache lines serve the next columns too.
pub(crate) fn column_panels<S, T, const W: usize>(
    rows: &[S],
    n_out: usize,
    n_in: usize,
    conv: impl Fn(S) -> T + Sync,
) -> Vec<T>
where
    S: Copy + Sync,
    T: Copy + Default + Send,
{
    assert_eq!(rows.len(), n_out * n_in, "column_panels: rows");
    let columns: Vec<[T; W]> = (0..n_out.div_ceil(W) * n_in)
        .into_par_iter()
        .with_min_len(256)
        .map(|i| {
            let (r0, p) = (i / n_in * W, i % n_in);
            std::array::from_fn(|j| match r0 + j < n_out {
                true => conv(rows[(r0 + j) * n_in + p]),
                false => T::default(),
            })
        })
        .collect();
    columns.into_flattened()
}

/// `n_out × n_in` f16 weights in tiles of [`TILE_ROWS`] rows: tile t holds rows
/// `t·TILE_ROWS..` column by column, each column the [`TILE_ROWS`] values of one input
/// position. Rows past `n_out` are zero.
///
/// Element (r, p) is at `(r / TILE_ROWS · n_in + p) · TILE_ROWS + r % TILE_ROWS`.
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
        let data = column_panels::<_, _, TILE_ROWS>(rows, n_out, n_in, |v| v);
        Ok(Self { data, n_out, n_in })
    }

    /// [`F16Tiles::new`] from the rows' little-endian f16 bytes (a mapped file's, at any
    /// alignment), without an f16 copy of them first.
    pub fn from_le_bytes(bytes: &[u8], n_out: usize, n_in: usize) -> Result<Self> {
        let (pairs, rest) = bytes.as_chunks::<2>();
        if !rest.is_empty() || pairs.len() != n_out * n_in || n_in == 0 {
            return Err(shape_err(
                "f16 tiles",
                format!("{} bytes for {n_out}×{n_in} f16 rows", bytes.len()),
            ));
        }
        let data = column_panels::<_, _, TILE_ROWS>(pairs, n_out, n_in, f16::from_le_bytes);
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
        self.n_in * TILE_ROWS
    }

    /// All tiles. Shape: [ceil(n_out / TILE_ROWS), tile_len()].
    pub fn data(&self) -> &[f16] {
        &self.data
    }

    /// Copies logical (row-major) elements `start..start + out.len()` into `out` as f32,
    /// reading each touched tile front to back. Panics when the range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let (k, end) = (self.n_in, start + out.len());
        assert!(
            end <= self.n_out * k,
            "read_f32: {start}..{end} past the end"
        );
        if out.is_empty() {
            return;
        }
        let (r_first, r_last) = (start / k, (end - 1) / k);
        let (isa, mut col32) = (sotto_isa::isa(), [0.0f32; TILE_ROWS]);
        for t in r_first / TILE_ROWS..=r_last / TILE_ROWS {
            let tile = &self.data[t * k * TILE_ROWS..][..k * TILE_ROWS];
            let (ra, rb) = (
                (t * TILE_ROWS).max(r_first),
                ((t + 1) * TILE_ROWS).min(r_last + 1),
            );
            let ia = ra % TILE_ROWS;
            // Rows ra..rb of each column are contiguous: widen them at once, then scatter.
            for (p, col) in tile.chunks_exact(TILE_ROWS).enumerate() {
                let c = &mut col32[..rb - ra];
                kernels::f16_to_f32(isa, &col[ia..ia + rb - ra], c);
                for (r, &v) in (ra..rb).zip(c.iter()) {
                    let at = r * k + p;
                    if (start..end).contains(&at) {
                        out[at - start] = v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;

    /// Tiles from a file's bytes at an odd offset are the tiles of the same values; a
    /// byte count that is not the shape's is an error.
    #[test]
    fn tiles_from_le_bytes_equal_tiles_from_values() {
        for (n, k) in [(1, 1), (64, 3), (70, 33), (130, 64)] {
            let w: Vec<f16> = rand_vec(n * k, 4).into_iter().map(f16::from_f32).collect();
            let mut bytes = vec![7u8];
            bytes.extend(w.iter().flat_map(|v| v.to_le_bytes()));
            let got = F16Tiles::from_le_bytes(&bytes[1..], n, k).unwrap();
            assert_eq!(
                got.data(),
                F16Tiles::new(&w, n, k).unwrap().data(),
                "{n}×{k}"
            );
            assert!(F16Tiles::from_le_bytes(&bytes, n, k).is_err());
            assert!(F16Tiles::from_le_bytes(&bytes[1..bytes.len() - 2], n, k).is_err());
        }
    }

    #[test]
    fn read_f32_gives_back_the_rows() {
        for (n, k) in [(1, 1), (3, 17), (9, 40), (4, 16), (130, 7)] {
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
            // One row (an embedding lookup), and nothing at the very end.
            let mut row = vec![f32::NAN; k];
            t.read_f32((n - 1) * k, &mut row);
            assert_eq!(row, want[(n - 1) * k..], "{n}×{k} last row");
            t.read_f32(n * k, &mut []);
        }
        assert!(F16Tiles::new(&[f16::ZERO; 5], 2, 3).is_err());
    }
}
