//! Host-side shape arithmetic of the Whisper forward on CUDA: launch shapes, buffer sizes,
//! the cuBLAS mapping of a row-major linear layer and the copy plan of a KV-cache reorder.
//! Plain functions, tested on the CPU.

use crate::kernels::ATTENTION_BLOCK;
use crate::{CudaError, Result};

/// Dynamic shared memory a block may use without opting in (every GPU since compute 2.0).
pub const MAX_SHARED_BYTES: usize = 48 * 1024;

fn shape(op: &'static str, msg: String) -> CudaError {
    CudaError::Shape { op, msg }
}

/// A 2-D launch of `sotto_attention`: one block per (query row, head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLaunch {
    pub rows: u32,
    pub heads: u32,
    pub block: u32,
    pub shared_bytes: u32,
}

impl From<AttentionLaunch> for cudarc::driver::LaunchConfig {
    fn from(l: AttentionLaunch) -> Self {
        cudarc::driver::LaunchConfig {
            grid_dim: (l.rows, l.heads, 1),
            block_dim: (l.block, 1, 1),
            shared_mem_bytes: l.shared_bytes,
        }
    }
}

/// Launch shape of attention over `n_keys` keys for `rows` query rows of `n_head` heads of
/// width `dh`: the scores of one row live in shared memory, beside the reduction scratch.
pub fn attention(rows: usize, n_head: usize, dh: usize, n_keys: usize) -> Result<AttentionLaunch> {
    let op = "attention";
    if rows == 0 || n_head == 0 || dh == 0 || n_keys == 0 || dh > ATTENTION_BLOCK as usize {
        return Err(shape(
            op,
            format!("{rows} rows, {n_head} heads of {dh}, {n_keys} keys"),
        ));
    }
    let shared = (n_keys + ATTENTION_BLOCK as usize) * 4;
    if shared > MAX_SHARED_BYTES {
        return Err(shape(
            op,
            format!(
                "{n_keys} keys need {shared} bytes of shared memory (at most {MAX_SHARED_BYTES})"
            ),
        ));
    }
    let rows = u32::try_from(rows)
        .ok()
        .filter(|&r| r <= crate::launch::MAX_GRID_X)
        .ok_or_else(|| shape(op, format!("{rows} query rows")))?;
    let heads = u32::try_from(n_head)
        .ok()
        .filter(|&h| h <= 65535)
        .ok_or_else(|| shape(op, format!("{n_head} heads")))?;
    Ok(AttentionLaunch {
        rows,
        heads,
        block: ATTENTION_BLOCK,
        shared_bytes: shared as u32,
    })
}

/// Launch shape of `sotto_flash_attention` for `rows` query rows of `n_head` heads of width
/// `dh` over `n_keys` keys shared by every row, or None where it does not apply: another
/// head width, no keys, or fewer rows than one block takes (the one-row-per-block kernel
/// spreads those over more blocks). `rows` in [`AttentionLaunch::rows`] counts row tiles.
pub fn flash_attention(
    rows: usize,
    n_head: usize,
    dh: usize,
    n_keys: usize,
) -> Option<AttentionLaunch> {
    let k = crate::kernels::FLASH_ROWS;
    flash_tiles(rows, n_head, dh, n_keys, k, k * 8)
}

/// As [`flash_attention`], for `sotto_flash_attention_mma`: `MMA_ROWS` query rows per
/// block of 4 warps (it applies from the same number of rows as the f32 kernel).
pub fn flash_attention_mma(
    rows: usize,
    n_head: usize,
    dh: usize,
    n_keys: usize,
) -> Option<AttentionLaunch> {
    flash_tiles(
        rows,
        n_head,
        dh,
        n_keys,
        crate::kernels::MMA_ROWS,
        crate::kernels::MMA_BLOCK,
    )
}

fn flash_tiles(
    rows: usize,
    n_head: usize,
    dh: usize,
    n_keys: usize,
    tile: u32,
    block: u32,
) -> Option<AttentionLaunch> {
    let fewest = crate::kernels::FLASH_ROWS as usize;
    if dh != crate::kernels::FLASH_DH || n_keys == 0 || rows < fewest || n_head > 65535 {
        return None;
    }
    Some(AttentionLaunch {
        rows: u32::try_from(rows.div_ceil(tile as usize)).ok()?,
        heads: n_head as u32,
        block,
        shared_bytes: 0,
    })
}

/// One `cublasGemmStridedBatchedEx` over f32 matrices, column-major:
/// `C_b[i + j·ldc] = alpha · Σ_l op(A_b)[i, l] · B_b[l + j·ldb]` for `b < batch`, where
/// `op(A_b)[i, l]` is `A_b[l + i·lda]` when `trans_a` (cuBLAS's `OP_T`), else
/// `A_b[i + l·lda]`, and `X_b` starts `b·stride_x` elements after `X`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchedGemm {
    pub trans_a: bool,
    /// Rows of C, columns of C, inner dimension.
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    pub stride_a: i64,
    pub stride_b: i64,
    pub stride_c: i64,
    pub batch: i32,
    pub alpha: f32,
}

/// Attention through cuBLAS, for `rows` query rows of `n_head` heads of width `dh = d /
/// n_head` over `n_keys` keys that every row sees (q, k, v, out row-major [.., d], head h at
/// columns `h·dh..`): `scores` (per head, row-major [rows, n_keys]) `= q_h · k_hᵀ / √dh` in
/// one batched product, a softmax of each of the `n_head · rows` score rows, then `out_h =
/// scores_h · v_h` in another. Returns the two products; [`attention_scores_len`] elements
/// of scratch hold the scores.
pub fn attention_gemms(
    rows: usize,
    n_keys: usize,
    d: usize,
    n_head: usize,
) -> Result<(BatchedGemm, BatchedGemm)> {
    let op = "attention";
    if rows == 0 || n_keys == 0 || n_head == 0 || !d.is_multiple_of(n_head) {
        return Err(shape(
            op,
            format!("{rows} rows, {n_keys} keys, width {d} in {n_head} heads"),
        ));
    }
    let dh = d / n_head;
    let int = |v: usize| {
        i32::try_from(v).map_err(|_| shape(op, format!("dimension {v} exceeds cuBLAS's int")))
    };
    // The softmax launch counts every score in 32 bits.
    let per_head = rows
        .checked_mul(n_keys)
        .filter(|&n| {
            n.checked_mul(n_head)
                .is_some_and(|t| t <= u32::MAX as usize)
        })
        .ok_or_else(|| shape(op, format!("{n_head} × {rows} × {n_keys} scores")))?;
    let scores = BatchedGemm {
        // scores_hᵀ (column-major [n_keys, rows]) = k_h (read transposed) · q_h
        trans_a: true,
        m: int(n_keys)?,
        n: int(rows)?,
        k: int(dh)?,
        lda: int(d)?,
        ldb: int(d)?,
        ldc: int(n_keys)?,
        stride_a: dh as i64,
        stride_b: dh as i64,
        stride_c: per_head as i64,
        batch: int(n_head)?,
        alpha: 1.0 / (dh as f32).sqrt(),
    };
    let values = BatchedGemm {
        // out_hᵀ (column-major [dh, rows], ld d) = v_hᵀ (column-major [dh, n_keys]) · P_hᵀ
        trans_a: false,
        m: int(dh)?,
        n: int(rows)?,
        k: int(n_keys)?,
        lda: int(d)?,
        ldb: int(n_keys)?,
        ldc: int(d)?,
        stride_a: dh as i64,
        stride_b: per_head as i64,
        stride_c: dh as i64,
        batch: int(n_head)?,
        alpha: 1.0,
    };
    Ok((scores, values))
}

/// The two launches of split attention (`sotto_attention_split`, then
/// `sotto_attention_merge`): each (row, head)'s keys in `splits` chunks of `chunk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitAttention {
    pub rows: u32,
    pub heads: u32,
    pub splits: u32,
    pub chunk: u32,
}

impl SplitAttention {
    /// The scoring launch: a block per (row, head, chunk).
    pub fn split_config(&self) -> cudarc::driver::LaunchConfig {
        let block = crate::kernels::SPLIT_BLOCK;
        cudarc::driver::LaunchConfig {
            grid_dim: (self.rows, self.heads, self.splits),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// The merging launch: a block of `dh` threads per (row, head).
    pub fn merge_config(&self, dh: usize) -> cudarc::driver::LaunchConfig {
        cudarc::driver::LaunchConfig {
            grid_dim: (self.rows, self.heads, 1),
            block_dim: (dh as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// f32 scratch (elements) of the chunks' partial results.
    pub fn part_len(&self, dh: usize) -> usize {
        (self.rows as usize * self.heads as usize * self.splits as usize) * (dh + 2)
    }
}

/// Split attention for `rows` query rows of `n_head` heads of width `dh` over `n_keys`
/// keys every row shares, or None where one block per (row, head) serves as well (keys
/// that fit one chunk) or the kernel does not apply (a head wider than it takes).
pub fn attention_split(
    rows: usize,
    n_head: usize,
    dh: usize,
    n_keys: usize,
) -> Option<SplitAttention> {
    let most = crate::kernels::SPLIT_KEYS;
    if n_keys <= most || dh == 0 || dh > crate::kernels::SPLIT_DH {
        return None;
    }
    let splits = n_keys.div_ceil(most);
    Some(SplitAttention {
        rows: u32::try_from(rows).ok().filter(|&r| r > 0)?,
        heads: u32::try_from(n_head)
            .ok()
            .filter(|&h| (1..=65535).contains(&h))?,
        splits: u32::try_from(splits).ok().filter(|&s| s <= 65535)?,
        chunk: n_keys.div_ceil(splits) as u32,
    })
}

/// f32 scratch (elements) of [`attention_gemms`]' scores: every head's [rows, n_keys].
pub fn attention_scores_len(rows: usize, n_keys: usize, n_head: usize) -> usize {
    rows.saturating_mul(n_keys).saturating_mul(n_head)
}

/// cuBLAS (column-major) arguments of the row-major `out[m, n_out] = x[m, n_in] · Wᵀ` with
/// W row-major [n_out, n_in]: `C = op(A) · B` with A = W read transposed (lda n_in),
/// B = x (ldb n_in), C = out (ldc n_out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    /// Rows of C (= n_out), columns of C (= m), inner dimension (= n_in).
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i32,
    pub ldb: i32,
    pub ldc: i32,
    /// Adds the product onto C (cuBLAS's beta = 1) instead of overwriting it.
    pub accumulate: bool,
}

pub fn linear_gemm(m: usize, n_out: usize, n_in: usize) -> Result<GemmShape> {
    let int = |v: usize| {
        i32::try_from(v).map_err(|_| shape("linear", format!("dimension {v} exceeds cuBLAS's int")))
    };
    // Elements are addressed with 32-bit unsigned counts by the element-wise kernels.
    if m.checked_mul(n_out.max(n_in))
        .filter(|&n| n <= u32::MAX as usize)
        .is_none()
    {
        return Err(shape("linear", format!("{m} rows of {n_out}×{n_in}")));
    }
    Ok(GemmShape {
        m: int(n_out)?,
        n: int(m)?,
        k: int(n_in)?,
        lda: int(n_in)?,
        ldb: int(n_in)?,
        ldc: int(n_out)?,
        accumulate: false,
    })
}

/// Length of a conv1d (kernel 3, padding 1) output: `(t_in − 1) / stride + 1`.
pub fn conv_out_len(t_in: usize, stride: usize) -> usize {
    if t_in == 0 || stride == 0 {
        0
    } else {
        (t_in - 1) / stride + 1
    }
}

/// The slot table after a reorder (`sotto_kv_row`; the session's `DevKv`): new sequence
/// `i` reads its keys below `len` where sequence `src[i]` read them in `old` (`n_ctx` a
/// sequence; empty: each in its own slot), and from `len` on in its own slot `i`. Empty
/// where every sequence then reads its own slot.
pub fn reorder_slots(old: &[u32], src: &[usize], n_ctx: usize, len: usize) -> Vec<u32> {
    let mut table = vec![0u32; src.len() * n_ctx];
    for (i, (row, &s)) in table.chunks_mut(n_ctx.max(1)).zip(src).enumerate() {
        for (t, slot) in row.iter_mut().enumerate() {
            *slot = match t < len {
                true => old.get(s * n_ctx + t).copied().unwrap_or(s as u32),
                false => i as u32,
            };
        }
    }
    let own = (table.chunks(n_ctx.max(1)).enumerate())
        .all(|(i, row)| row.iter().all(|&slot| slot as usize == i));
    if own {
        table.clear();
    }
    table
}

/// f16 scratch (elements) the encoder's matrix products need for their converted inputs:
/// the two im2col matrices and the 4·d-wide MLP input.
pub fn encoder_half_scratch(n_mels: usize, n_frames: usize, n_ctx: usize, d: usize) -> usize {
    (n_frames * 3 * n_mels)
        .max(n_ctx * 4 * d)
        .max(n_ctx * 3 * d)
}

/// f32 im2col scratch (elements) of the two encoder convolutions.
pub fn encoder_cols(n_mels: usize, n_frames: usize, n_ctx: usize, d: usize) -> usize {
    (n_frames * 3 * n_mels).max(n_ctx * 3 * d)
}

/// The bitmap of a shortlist's pinned ids (`sotto_shortlist_chunks`' `bitmap`): bit
/// `id % 32` of word `id / 32` set for each id of `pinned`, `text_end.div_ceil(32)` words.
/// Ids at or past `text_end` are not text ids, so they set nothing.
pub fn pinned_bitmap(text_end: usize, pinned: &[u32]) -> Vec<u32> {
    let mut words = vec![0u32; text_end.div_ceil(32)];
    for &id in pinned.iter().filter(|&&id| (id as usize) < text_end) {
        words[id as usize / 32] |= 1 << (id % 32);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reorder_slots_follow_each_sequence_to_the_rows_it_wrote() {
        let n_ctx = 4;
        // Where sequence b reads position t, after applying `t` to a batch that each
        // wrote at positions below `len` into its own slot.
        let at = |t: &[u32], b: usize, p: usize| match t.is_empty() {
            true => b as u32,
            false => t[b * n_ctx + p],
        };
        // Beams 0, 0, 1 from a batch of 3 at length 2: rows 0..2 of slots 0, 0, 1.
        let t = reorder_slots(&[], &[0, 0, 1], n_ctx, 2);
        assert_eq!(t, vec![0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
        // One step later (length 3; each wrote row 2 in its own slot), reordered again:
        // new 0 is old 2 (slot 1's rows 0, 1, then its own row 2 in slot 2), new 1 old 1.
        let u = reorder_slots(&t, &[2, 1], n_ctx, 3);
        assert_eq!(u, vec![1, 1, 2, 0, 0, 0, 1, 1]);
        for (b, src) in [(0usize, 2usize), (1, 1)] {
            for p in 0..3 {
                assert_eq!(at(&u, b, p), at(&t, src, p), "{b} {p}");
            }
        }
        // Each sequence from its own slot: no table.
        assert!(reorder_slots(&[], &[0, 1, 2], n_ctx, 3).is_empty());
        assert!(
            reorder_slots(&u, &[0, 1], n_ctx, 0).is_empty(),
            "nothing written yet"
        );
        // Back to a batch of one: reading slot 0's rows needs no table; slot 1's does.
        assert!(reorder_slots(&u, &[1], n_ctx, 2).is_empty());
        assert_eq!(reorder_slots(&u, &[0], n_ctx, 2), vec![1, 1, 0, 0]);
        assert!(reorder_slots(&[], &[0], n_ctx, 2).is_empty());
    }

    #[test]
    fn pinned_bitmap_sets_a_bit_per_text_id() {
        assert!(pinned_bitmap(0, &[]).is_empty());
        assert_eq!(pinned_bitmap(33, &[]), vec![0, 0]);
        let b = pinned_bitmap(50257, &[0, 31, 32, 220, 50256, 50257, 50300]);
        assert_eq!(b.len(), 1571);
        assert_eq!((b[0], b[1], b[6]), (1 | 1 << 31, 1, 1 << 28));
        assert_eq!(b[1570], 1 << 16, "50256, the last text id");
        assert_eq!(
            b.iter().map(|w| w.count_ones()).sum::<u32>(),
            5,
            "none past text_end"
        );
        let all: Vec<u32> = (0..70).collect();
        assert_eq!(pinned_bitmap(70, &all), vec![u32::MAX, u32::MAX, 0b11_1111]);
    }

    #[test]
    fn flash_attention_takes_whole_row_tiles_of_width_64() {
        let l = flash_attention(1500, 6, 64, 1500).unwrap();
        assert_eq!((l.rows, l.heads, l.block, l.shared_bytes), (94, 6, 128, 0));
        assert_eq!(flash_attention(16, 20, 64, 1500).unwrap().rows, 1);
        assert_eq!(
            flash_attention(15, 6, 64, 1500),
            None,
            "fewer rows than a tile"
        );
        assert_eq!(flash_attention(1500, 6, 80, 1500), None, "head width");
        assert_eq!(flash_attention(1500, 6, 64, 0), None);
        // The tensor-core kernel: 64 rows a block, from as few rows as the f32 kernel.
        let l = flash_attention_mma(1500, 6, 64, 1500).unwrap();
        assert_eq!((l.rows, l.heads, l.block, l.shared_bytes), (24, 6, 128, 0));
        assert_eq!(flash_attention_mma(16, 2, 64, 1).unwrap().rows, 1);
        assert_eq!(flash_attention_mma(15, 6, 64, 1500), None);
        assert_eq!(flash_attention_mma(1500, 6, 80, 1500), None);
    }

    #[test]
    fn split_attention_covers_every_key_once() {
        let p = attention_split(5, 6, 64, 1500).unwrap();
        assert_eq!((p.rows, p.heads, p.splits, p.chunk), (5, 6, 24, 63));
        assert!(p.splits * p.chunk >= 1500 && (p.splits - 1) * p.chunk < 1500);
        assert_eq!(p.part_len(64), 5 * 6 * 24 * 66);
        let c = p.split_config();
        assert_eq!((c.grid_dim, c.shared_mem_bytes), ((5, 6, 24), 0));
        assert_eq!(p.merge_config(64).block_dim, (64, 1, 1));
        for n_keys in [65, 257, 511, 512, 513, 1500, 4097] {
            let p = attention_split(1, 1, 64, n_keys).unwrap();
            let (s, c) = (p.splits as usize, p.chunk as usize);
            assert!(c <= crate::kernels::SPLIT_KEYS && s * c >= n_keys && (s - 1) * c < n_keys);
        }
        assert_eq!(attention_split(1, 6, 64, 64), None, "one chunk");
        assert_eq!(
            attention_split(1, 6, 160, 1500),
            None,
            "head wider than the kernel takes"
        );
        assert_eq!(attention_split(0, 6, 64, 1500), None);
    }

    #[test]
    fn attention_launch_fits_shared_memory() {
        let l = attention(1500, 6, 64, 1500).unwrap();
        assert_eq!((l.rows, l.heads, l.block), (1500, 6, ATTENTION_BLOCK));
        assert_eq!(
            l.shared_bytes as usize,
            (1500 + ATTENTION_BLOCK as usize) * 4
        );
        let c: cudarc::driver::LaunchConfig = l.into();
        assert_eq!(c.grid_dim, (1500, 6, 1));
        assert!(attention(1, 20, 64, 448).is_ok());
        let e = attention(1, 1, 64, 20_000).unwrap_err().to_string();
        assert!(e.contains("shared memory"), "{e}");
        assert!(attention(0, 1, 64, 1).is_err());
        assert!(
            attention(1, 1, ATTENTION_BLOCK as usize + 1, 8).is_err(),
            "head wider than a block"
        );
        assert!(attention(1, 1, 64, 0).is_err());
    }

    /// Row-major attention through the two products as cuBLAS reads them, against the
    /// definition: the shapes, strides and transposes say what they mean.
    #[test]
    fn attention_gemms_compute_attention() {
        let (rows, n_keys, n_head, dh) = (5, 7, 3, 4);
        let d = n_head * dh;
        let val = |i: usize, s: usize| ((i * 7 + s * 13) % 17) as f32 / 17.0 - 0.4;
        let q: Vec<f32> = (0..rows * d).map(|i| val(i, 1)).collect();
        let k: Vec<f32> = (0..n_keys * d).map(|i| val(i, 2)).collect();
        let v: Vec<f32> = (0..n_keys * d).map(|i| val(i, 3)).collect();
        let (gs, gv) = attention_gemms(rows, n_keys, d, n_head).unwrap();
        let run = |g: &BatchedGemm, a: &[f32], b: &[f32], c: &mut [f32]| {
            for bt in 0..g.batch as usize {
                let (a, b) = (
                    &a[bt * g.stride_a as usize..],
                    &b[bt * g.stride_b as usize..],
                );
                let c = &mut c[bt * g.stride_c as usize..];
                for j in 0..g.n as usize {
                    for i in 0..g.m as usize {
                        let mut acc = 0.0;
                        for l in 0..g.k as usize {
                            let av = if g.trans_a {
                                a[l + i * g.lda as usize]
                            } else {
                                a[i + l * g.lda as usize]
                            };
                            acc += av * b[l + j * g.ldb as usize];
                        }
                        c[i + j * g.ldc as usize] = g.alpha * acc;
                    }
                }
            }
        };
        let mut scores = vec![0f32; attention_scores_len(rows, n_keys, n_head)];
        run(&gs, &k, &q, &mut scores);
        for row in scores.chunks_mut(n_keys) {
            let m = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            row.iter_mut().for_each(|x| *x = (*x - m).exp());
            let sum: f32 = row.iter().sum();
            row.iter_mut().for_each(|x| *x /= sum);
        }
        let mut out = vec![f32::NAN; rows * d];
        run(&gv, &v, &scores, &mut out);
        for h in 0..n_head {
            for r in 0..rows {
                let s: Vec<f32> = (0..n_keys)
                    .map(|j| {
                        (0..dh)
                            .map(|c| q[r * d + h * dh + c] * k[j * d + h * dh + c])
                            .sum::<f32>()
                            / (dh as f32).sqrt()
                    })
                    .collect();
                let m = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                let p: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
                let sum: f32 = p.iter().sum();
                for c in 0..dh {
                    let want: f32 = (0..n_keys)
                        .map(|j| p[j] / sum * v[j * d + h * dh + c])
                        .sum();
                    let got = out[r * d + h * dh + c];
                    assert!(
                        (got - want).abs() < 1e-5,
                        "head {h} row {r} col {c}: {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn attention_gemms_check_their_shapes() {
        let (s, v) = attention_gemms(1500, 1500, 384, 6).unwrap();
        assert_eq!((s.m, s.n, s.k, s.batch), (1500, 1500, 64, 6));
        assert_eq!((v.m, v.n, v.k), (64, 1500, 1500));
        assert_eq!(s.stride_c, 1500 * 1500);
        assert_eq!(attention_scores_len(1500, 1500, 6), 6 * 1500 * 1500);
        assert!(attention_gemms(0, 1500, 384, 6).is_err());
        assert!(
            attention_gemms(10, 1500, 384, 5).is_err(),
            "width not whole heads"
        );
        let e = attention_gemms(1 << 16, 1 << 16, 64, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("scores"), "{e}");
    }

    #[test]
    fn linear_maps_row_major_to_cublas() {
        let g = linear_gemm(1500, 1536, 384).unwrap();
        assert_eq!((g.m, g.n, g.k), (1536, 1500, 384));
        assert_eq!((g.lda, g.ldb, g.ldc), (384, 384, 1536));
        assert!(linear_gemm(1 << 20, 1 << 13, 8).is_err());
    }

    /// The gemm mapping computes out = x Wᵀ when run as column-major BLAS (checked here
    /// with a naive column-major gemm with A transposed).
    #[test]
    fn linear_gemm_mapping_is_right_numerically() {
        let (m, n_out, n_in) = (3usize, 4usize, 5usize);
        let x: Vec<f32> = (0..m * n_in).map(|i| i as f32 * 0.5 - 3.0).collect();
        let w: Vec<f32> = (0..n_out * n_in).map(|i| (i % 7) as f32 - 2.0).collect();
        let g = linear_gemm(m, n_out, n_in).unwrap();
        let mut c = vec![0f32; m * n_out];
        for col in 0..g.n as usize {
            for row in 0..g.m as usize {
                // op(A)(row, p) = A(p, row) = a[p + row·lda]; B(p, col) = b[p + col·ldb].
                let s: f32 = (0..g.k as usize)
                    .map(|p| w[p + row * g.lda as usize] * x[p + col * g.ldb as usize])
                    .sum();
                c[row + col * g.ldc as usize] = s;
            }
        }
        for i in 0..m {
            for j in 0..n_out {
                let want: f32 = (0..n_in).map(|p| x[i * n_in + p] * w[j * n_in + p]).sum();
                assert_eq!(c[i * n_out + j], want, "({i}, {j})");
            }
        }
    }

    #[test]
    fn conv_lengths_and_scratch() {
        assert_eq!(conv_out_len(3000, 1), 3000);
        assert_eq!(conv_out_len(3000, 2), 1500);
        assert_eq!(conv_out_len(7, 2), 4);
        assert_eq!(conv_out_len(0, 2), 0);
        // tiny: im2col of conv2 (1500 × 1152) is below the MLP input (1500 × 1536).
        assert_eq!(encoder_half_scratch(80, 3000, 1500, 384), 1500 * 1536);
        assert_eq!(encoder_cols(80, 3000, 1500, 384), 1500 * 1152);
        // A narrow model: the mel's im2col is the largest.
        assert_eq!(encoder_half_scratch(80, 3000, 1500, 8), 3000 * 240);
    }
}
