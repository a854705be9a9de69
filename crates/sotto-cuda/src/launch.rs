//! Grid and block sizes from shapes: plain functions, tested on the CPU.

use crate::{kernels, CudaError, Result};

/// Threads per block for element-wise kernels.
pub const ELEMENTWISE_BLOCK: u32 = 256;
/// Largest block the row kernels use (every GPU since compute 2.0 allows 1024).
pub const MAX_ROW_BLOCK: u32 = 1024;
/// Smallest row block: one warp.
pub const MIN_ROW_BLOCK: u32 = 32;
/// Largest grid x dimension (compute 3.0 and later).
pub const MAX_GRID_X: u32 = (1 << 31) - 1;
/// Largest grid y dimension.
pub const MAX_GRID_Y: u32 = 65535;

/// A 1-D launch: `grid` blocks of `block` threads with `shared_bytes` of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: u32,
    pub block: u32,
    pub shared_bytes: u32,
}

impl From<Launch> for cudarc::driver::LaunchConfig {
    fn from(l: Launch) -> Self {
        cudarc::driver::LaunchConfig {
            grid_dim: (l.grid, 1, 1),
            block_dim: (l.block, 1, 1),
            shared_mem_bytes: l.shared_bytes,
        }
    }
}

fn too_big(op: &'static str, what: &str, n: usize) -> CudaError {
    CudaError::Shape {
        op,
        msg: format!("{what} {n} exceeds what one launch addresses (u32 indices)"),
    }
}

/// The element count as the kernels' `unsigned int n`.
pub fn count_u32(op: &'static str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| too_big(op, "element count", n))
}

/// One thread per element. `None` for `n == 0` (nothing to launch).
pub fn elementwise(op: &'static str, n: usize) -> Result<Option<Launch>> {
    let n = count_u32(op, n)?;
    if n == 0 {
        return Ok(None);
    }
    Ok(Some(Launch {
        grid: n.div_ceil(ELEMENTWISE_BLOCK),
        block: ELEMENTWISE_BLOCK,
        shared_bytes: 0,
    }))
}

/// One block per row of `n_cols`: a power-of-two block no wider than the row (at least
/// one warp, at most [`MAX_ROW_BLOCK`]), with one f32 of shared memory per thread for the
/// reductions. `None` when there are no rows.
pub fn rows(op: &'static str, n_rows: usize, n_cols: usize) -> Result<Option<Launch>> {
    if n_cols == 0 {
        return Err(CudaError::Shape {
            op,
            msg: "rows of 0 columns".into(),
        });
    }
    count_u32(op, n_rows.saturating_mul(n_cols))?;
    if n_rows == 0 {
        return Ok(None);
    }
    let grid = u32::try_from(n_rows)
        .ok()
        .filter(|&g| g <= MAX_GRID_X)
        .ok_or_else(|| too_big(op, "row count", n_rows))?;
    let block = (n_cols.min(MAX_ROW_BLOCK as usize) as u32)
        .next_power_of_two()
        .clamp(MIN_ROW_BLOCK, MAX_ROW_BLOCK);
    Ok(Some(Launch {
        grid,
        block,
        shared_bytes: block * 4,
    }))
}

/// A `sotto_mul_mat_vec` kernel for `m` rows of `n_in` against `n_out` outputs: one warp
/// per output, [`kernels::MMV_BLOCK`] threads per block. `None` when there is nothing to
/// compute; an error past [`kernels::MMV_ROWS`] rows. (Quantized rows are whole blocks:
/// the model loader checks that.)
pub fn mul_mat_vec(
    op: &'static str,
    m: usize,
    n_out: usize,
    n_in: usize,
) -> Result<Option<Launch>> {
    if m > kernels::MMV_ROWS {
        return Err(CudaError::Shape {
            op,
            msg: format!("{m} rows (at most {})", kernels::MMV_ROWS),
        });
    }
    count_u32(op, n_out.saturating_mul(n_in))?;
    count_u32(op, m.saturating_mul(n_out.max(n_in)))?;
    if m == 0 || n_out == 0 || n_in == 0 {
        return Ok(None);
    }
    let per_block = (kernels::MMV_BLOCK / 32) as usize;
    Ok(Some(Launch {
        grid: n_out.div_ceil(per_block) as u32,
        block: kernels::MMV_BLOCK,
        shared_bytes: 0,
    }))
}

/// Most dynamic shared memory a launch may take without opting in, on every GPU.
pub const MAX_DYNAMIC_SHARED: u32 = 48 * 1024;

/// Bytes of one input block's codes in a q8 mat-vec's shared memory (`SottoQ8`: eight
/// words of codes, the scale, the q8_1 sum and a word of padding).
pub const MMV_Q8_SHARED_BYTES: usize = 44;

/// The dynamic shared memory of a mat-vec launch over `m` input rows of `n_in` (a block
/// takes at most [`kernels::MMV_ROWS`] of them): with `q8` ([`kernels::MMV_Q8`]), the codes
/// of 32 input blocks a row; with `norm` ([`kernels::MMV_NORM`]), then the normalised rows
/// and a float per thread of the layer-norm launch it computes as ([`rows`]). None past
/// [`MAX_DYNAMIC_SHARED`].
pub fn mul_mat_vec_shared(m: usize, n_in: usize, q8: bool, norm: bool) -> Option<u32> {
    let m = m.min(kernels::MMV_ROWS);
    let codes = if q8 { m * 32 * MMV_Q8_SHARED_BYTES } else { 0 };
    let normed = match norm {
        true => {
            let width = rows("norm", 1, n_in.max(1)).ok()??.block as usize;
            m.checked_mul(n_in)?.checked_add(width)?.checked_mul(4)?
        }
        false => 0,
    };
    u32::try_from(codes.checked_add(normed)?)
        .ok()
        .filter(|&b| b <= MAX_DYNAMIC_SHARED)
}

/// [`mul_mat_vec`] for any number of rows: one block row of the grid per
/// [`kernels::MMV_ROWS`] rows (the kernels find their chunk by `blockIdx.y`).
pub fn mul_mat_vec_chunks(
    op: &'static str,
    m: usize,
    n_out: usize,
    n_in: usize,
) -> Result<Option<cudarc::driver::LaunchConfig>> {
    let chunks = m.div_ceil(kernels::MMV_ROWS);
    if chunks > MAX_GRID_Y as usize {
        return Err(too_big(op, "row count", m));
    }
    count_u32(op, m.saturating_mul(n_out.max(n_in)))?;
    let one = mul_mat_vec(op, m.min(kernels::MMV_ROWS), n_out, n_in)?;
    Ok(one.map(|l| cudarc::driver::LaunchConfig {
        grid_dim: (l.grid, chunks as u32, 1),
        ..l.into()
    }))
}

/// `sotto_shortlist_chunks` blocks a launch aims at: launches of few rows take smaller
/// chunks so that the launch still covers the GPU (a few blocks per SM of an H200's 132),
/// while many rows take larger ones, as each block's rounds cost the same whatever its size.
pub const SHORTLIST_TARGET_BLOCKS: usize = 512;

/// The two launches of a shortlist ([`shortlist`]): `sotto_shortlist_chunks` on a block per
/// (chunk, row), then `sotto_shortlist_merge` on a block per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortlist {
    pub rows: u32,
    /// Chunks of each row's text ids: at most [`kernels::SHORTLIST_BLOCK`], one per thread
    /// of the merge.
    pub chunks: u32,
    /// Ids per thread of a chunk, at most [`kernels::SHORTLIST_PER`].
    pub per: u32,
    pub top: u32,
}

impl Shortlist {
    /// Text ids per chunk.
    pub fn chunk(&self) -> usize {
        (kernels::SHORTLIST_BLOCK * self.per) as usize
    }

    pub fn chunks_config(&self) -> cudarc::driver::LaunchConfig {
        cudarc::driver::LaunchConfig {
            grid_dim: (self.chunks, self.rows, 1),
            block_dim: (kernels::SHORTLIST_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    pub fn merge_config(&self) -> cudarc::driver::LaunchConfig {
        cudarc::driver::LaunchConfig {
            grid_dim: (self.rows, 1, 1),
            block_dim: (kernels::SHORTLIST_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// f32 words of the chunks' records in the scratch: 2 + 2 · top per (row, chunk).
    pub fn part_len(&self) -> usize {
        self.rows as usize * self.chunks as usize * (2 + 2 * self.top as usize)
    }
}

/// (chunks, per) for `rows` rows of `text_end` text ids: about [`SHORTLIST_TARGET_BLOCKS`]
/// blocks, but no more chunks than the merge's threads where the values a thread holds
/// allow, and at least one (an empty one where there are no text ids).
fn shortlist_split(rows: usize, text_end: usize) -> (usize, usize) {
    let block = kernels::SHORTLIST_BLOCK as usize;
    let wanted = SHORTLIST_TARGET_BLOCKS.div_ceil(rows.max(1)).min(block);
    let per = text_end
        .div_ceil(wanted * block)
        .clamp(1, kernels::SHORTLIST_PER as usize);
    (text_end.div_ceil(block * per).max(1), per)
}

/// f32 words of one row's shortlist record: the rest's max and sum, `top` ids and their
/// logits, the `n_pinned` pinned logits, then the `n_vocab - text_end` tail logits.
pub fn shortlist_record_len(n_vocab: usize, text_end: usize, top: usize, n_pinned: usize) -> usize {
    2 + 2 * top + n_pinned + n_vocab.saturating_sub(text_end)
}

/// Bytes of scratch that a shortlist of up to `rows` rows (any count from 1 to `rows`:
/// fewer rows take smaller chunks, so more of them) of `text_end` text ids and `top` ids
/// needs for its chunks' records.
pub fn shortlist_scratch_bytes(rows: usize, text_end: usize, top: usize) -> usize {
    (1..=rows)
        .map(|r| r * shortlist_split(r, text_end).0 * (2 + 2 * top) * 4)
        .max()
        .unwrap_or(0)
}

/// The launches that reduce `rows` rows of `n_vocab` logits to shortlist records: text ids
/// below `text_end` (of which `n_pinned` are pinned) in chunks of [`Shortlist::chunk`], the
/// `top` first of the rest kept. `None` when there are no rows; an error past
/// [`kernels::SHORTLIST_MAX_TOP`], for more pinned ids than text ids or more text ids than
/// ids, or for ids that f32 does not hold exactly (2^24 and up).
pub fn shortlist(
    op: &'static str,
    rows: usize,
    n_vocab: usize,
    text_end: usize,
    top: usize,
    n_pinned: usize,
) -> Result<Option<Shortlist>> {
    let bad = |msg: String| Err(CudaError::Shape { op, msg });
    if top > kernels::SHORTLIST_MAX_TOP {
        return bad(format!(
            "top {top} exceeds the most a shortlist keeps ({})",
            kernels::SHORTLIST_MAX_TOP
        ));
    }
    if text_end > n_vocab || n_pinned > text_end {
        return bad(format!(
            "{n_pinned} pinned of {text_end} text ids of {n_vocab}: each at most the next"
        ));
    }
    if n_vocab > 1 << 24 {
        return bad(format!(
            "{n_vocab} ids: ids are f32 in the record, exact below 2^24"
        ));
    }
    if rows > MAX_GRID_Y as usize {
        return Err(too_big(op, "row count", rows));
    }
    count_u32(op, shortlist_record_len(n_vocab, text_end, top, n_pinned))?;
    let (chunks, per) = shortlist_split(rows, text_end);
    if chunks > kernels::SHORTLIST_BLOCK as usize {
        return bad(format!(
            "{text_end} text ids: more chunks than the merge has threads"
        ));
    }
    if rows == 0 {
        return Ok(None);
    }
    Ok(Some(Shortlist {
        rows: rows as u32,
        chunks: chunks as u32,
        per: per as u32,
        top: top as u32,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortlist_chunks_cover_the_text_ids_and_fill_the_gpu() {
        let (n_vocab, text_end) = (51865, 50257);
        // A greedy step: one row, small chunks (a value a thread), 197 blocks.
        let one = shortlist("t", 1, n_vocab, text_end, 1, 90)
            .unwrap()
            .unwrap();
        assert_eq!((one.chunks, one.per, one.chunk()), (197, 1, 256));
        let c = one.chunks_config();
        assert_eq!((c.grid_dim, c.block_dim), ((197, 1, 1), (256, 1, 1)));
        let m = one.merge_config();
        assert_eq!((m.grid_dim, m.block_dim), ((1, 1, 1), (256, 1, 1)));
        assert_eq!(one.part_len(), 197 * 4);
        // Five beams: two values a thread; 80 rows: the most a thread holds.
        let beams = shortlist("t", 5, n_vocab, text_end, 10, 90)
            .unwrap()
            .unwrap();
        assert_eq!((beams.chunks, beams.per), (99, 2));
        assert_eq!(beams.part_len(), 5 * 99 * 22);
        let many = shortlist("t", 80, n_vocab, text_end, 10, 90)
            .unwrap()
            .unwrap();
        assert_eq!((many.chunks, many.per), (25, kernels::SHORTLIST_PER));
        assert_eq!(many.chunks_config().grid_dim, (25, 80, 1));
        for rows in 1..=200 {
            for text_end in [0, 1, 255, 256, 257, 50256, 50257, 300_000] {
                let s = shortlist("t", rows, 1 << 20, text_end, 3, 0)
                    .unwrap()
                    .unwrap();
                let covered = s.chunks as usize * s.chunk();
                assert!(covered >= text_end, "{rows} x {text_end}");
                assert!(text_end == 0 || covered - text_end < s.chunk());
                assert!((1..=kernels::SHORTLIST_BLOCK).contains(&s.chunks));
                assert!((1..=kernels::SHORTLIST_PER).contains(&s.per));
                let scratch = shortlist_scratch_bytes(rows, text_end, 3);
                assert!(scratch >= s.part_len() * 4, "{rows} x {text_end}");
                assert!(scratch >= shortlist_scratch_bytes(rows - 1, text_end, 3));
            }
        }
        assert_eq!(shortlist_scratch_bytes(0, text_end, 10), 0);
    }

    #[test]
    fn shortlist_records_and_bad_shapes() {
        assert_eq!(
            shortlist_record_len(51865, 50257, 10, 90),
            2 + 20 + 90 + 1608
        );
        assert_eq!(shortlist_record_len(100, 100, 0, 0), 2);
        assert_eq!(shortlist("t", 0, 51865, 50257, 10, 90).unwrap(), None);
        let top = shortlist("t", 1, 51865, 50257, kernels::SHORTLIST_MAX_TOP, 0);
        assert_eq!(top.unwrap().unwrap().top, 64);
        let e = shortlist("shortlist", 1, 51865, 50257, 65, 0).unwrap_err();
        assert!(
            e.to_string().starts_with("shortlist: top 65 exceeds"),
            "{e}"
        );
        assert!(
            shortlist("t", 0, 51865, 50257, 65, 0).is_err(),
            "checked with no rows"
        );
        assert!(shortlist("t", 1, 100, 101, 1, 0).is_err());
        assert!(shortlist("t", 1, 100, 50, 1, 51).is_err());
        assert!(
            shortlist("t", 1, 100, 50, 1, 50).is_ok(),
            "every text id pinned"
        );
        assert!(shortlist("t", 1, (1 << 24) + 1, 100, 1, 0).is_err());
        assert!(shortlist("t", 70_000, 100, 50, 1, 0).is_err());
        // More chunks than the merge's threads, even at the most values a thread.
        let most =
            (kernels::SHORTLIST_BLOCK * kernels::SHORTLIST_BLOCK * kernels::SHORTLIST_PER) as usize;
        assert!(shortlist("t", 1, most + 1, most, 1, 0).is_ok());
        assert!(shortlist("t", 1, most + 1, most + 1, 1, 0).is_err());
    }

    #[test]
    fn elementwise_covers_every_element_once() {
        assert_eq!(elementwise("t", 0).unwrap(), None);
        for n in [1usize, 255, 256, 257, 1500 * 384, (1 << 31) + 3] {
            let l = elementwise("t", n).unwrap().unwrap();
            let threads = l.grid as usize * l.block as usize;
            assert!(threads >= n, "n {n}");
            assert!(threads - n < l.block as usize, "n {n}: a whole idle block");
            assert!(l.grid <= MAX_GRID_X);
        }
    }

    #[test]
    fn elementwise_rejects_counts_past_u32() {
        let err = elementwise("gelu", u32::MAX as usize + 1).unwrap_err();
        assert!(err.to_string().starts_with("gelu: element count"), "{err}");
    }

    #[test]
    fn row_blocks_are_powers_of_two_within_limits() {
        let cases = [
            (1usize, 1usize, 32u32),
            (3, 31, 32),
            (3, 33, 64),
            (1500, 384, 512),
            (448, 448, 512),
            (1, 1024, 1024),
            (2, 51865, 1024),
        ];
        for (n_rows, n_cols, block) in cases {
            let l = rows("t", n_rows, n_cols).unwrap().unwrap();
            assert_eq!(l.grid as usize, n_rows);
            assert_eq!(l.block, block, "{n_rows}x{n_cols}");
            assert!(l.block.is_power_of_two());
            assert_eq!(l.shared_bytes, 4 * l.block);
        }
    }

    #[test]
    fn rows_reject_bad_shapes() {
        assert_eq!(rows("t", 0, 8).unwrap(), None);
        assert!(rows("softmax", 4, 0)
            .unwrap_err()
            .to_string()
            .contains("0 columns"));
        assert!(rows("t", 1 << 20, 1 << 13).is_err());
    }

    #[test]
    fn mul_mat_vec_gives_each_output_a_warp() {
        assert_eq!(mul_mat_vec("t", 0, 10, 64).unwrap(), None);
        let l = mul_mat_vec("t", 5, 51865, 384).unwrap().unwrap();
        assert_eq!(l.block, kernels::MMV_BLOCK);
        let warps = l.grid as usize * (l.block / 32) as usize;
        assert!(warps >= 51865 && warps - 51865 < (l.block / 32) as usize);
        assert!(mul_mat_vec("t", kernels::MMV_ROWS + 1, 8, 64).is_err());
        assert!(mul_mat_vec("t", 1, 1 << 20, 1 << 12).is_err());
    }

    #[test]
    fn mul_mat_vec_chunks_take_eight_rows_a_grid_row() {
        assert!(mul_mat_vec_chunks("t", 0, 10, 64).unwrap().is_none());
        let one = mul_mat_vec_chunks("t", 5, 384, 384).unwrap().unwrap();
        assert_eq!(one.grid_dim, (96, 1, 1));
        let many = mul_mat_vec_chunks("t", 1500, 384, 384).unwrap().unwrap();
        assert_eq!((many.grid_dim, many.block_dim), ((96, 188, 1), (128, 1, 1)));
        assert_eq!(
            mul_mat_vec_chunks("t", 17, 3, 64)
                .unwrap()
                .unwrap()
                .grid_dim,
            (1, 3, 1)
        );
        assert!(mul_mat_vec_chunks("t", 8 * 65536, 1, 32).is_err());
    }

    #[test]
    fn a_norm_in_the_mat_vec_fits_shared_memory_at_every_whisper_width() {
        let shared = |m, d, q8| mul_mat_vec_shared(m, d, q8, true);
        // The rows, then the layer norm launch's block of sums (512 threads for 384).
        assert_eq!(shared(1, 384, false), Some((384 + 512) * 4));
        assert_eq!(shared(8, 7, false), Some((56 + 32) * 4));
        // q8 codes first: 32 blocks of 44 bytes a row.
        assert_eq!(shared(1, 384, true), Some(32 * 44 + (384 + 512) * 4));
        for d in [384, 512, 768, 1024, 1280] {
            assert!(shared(kernels::MMV_ROWS, d, false).is_some(), "{d}");
            // Five beams with quantized weights, at every size.
            assert!(shared(5, d, true).is_some(), "{d}");
        }
        // Eight rows of large-v3's 1280 with codes do not fit: that norm runs apart.
        assert!(shared(kernels::MMV_ROWS, 1024, true).is_some());
        assert_eq!(shared(kernels::MMV_ROWS, 1280, true), None);
        assert_eq!(shared(8, 2048, false), None);
        assert_eq!(
            mul_mat_vec_shared(usize::MAX, 2, true, false),
            Some(8 * 32 * 44)
        );
        // A block takes at most eight rows: more are chunks of eight.
        assert_eq!(shared(13, 64, false), shared(8, 64, false));
    }

    #[test]
    fn converts_to_cudarc_config() {
        let c: cudarc::driver::LaunchConfig = rows("t", 5, 100).unwrap().unwrap().into();
        assert_eq!(c.grid_dim, (5, 1, 1));
        assert_eq!(c.block_dim, (128, 1, 1));
        assert_eq!(c.shared_mem_bytes, 512);
    }
}
