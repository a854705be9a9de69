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
    if rows == 0 || n_head == 0 || dh == 0 || n_keys == 0 {
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
    let tile = crate::kernels::FLASH_ROWS as usize;
    if dh != crate::kernels::FLASH_DH || n_keys == 0 || rows < tile || n_head > 65535 {
        return None;
    }
    Some(AttentionLaunch {
        rows: u32::try_from(rows.div_ceil(tile)).ok()?,
        heads: n_head as u32,
        block: crate::kernels::FLASH_ROWS * 8,
        shared_bytes: 0,
    })
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

/// Where each copy of a KV-cache reorder reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopySource {
    /// Another sequence slot of the cache.
    Slot(usize),
    /// Entry j of the scratch area (a slot saved before it was overwritten).
    Saved(usize),
}

/// The copies that make new sequence `i` the old sequence `src[i]`, as `sotto_model`'s
/// cache does: slots that are read but also overwritten are first saved to scratch
/// (`saved[j]` goes to scratch entry j), then each moved slot is filled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReorderPlan {
    pub saved: Vec<usize>,
    /// (destination slot, source).
    pub copies: Vec<(usize, CopySource)>,
}

pub fn reorder(src: &[usize]) -> ReorderPlan {
    let moved = |i: usize| src.get(i).is_some_and(|&s| s != i);
    let saved: Vec<usize> = src
        .iter()
        .copied()
        .filter(|&s| moved(s))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let copies = src
        .iter()
        .enumerate()
        .filter(|&(i, &s)| s != i)
        .map(|(i, &s)| {
            let from = match saved.binary_search(&s) {
                Ok(j) => CopySource::Saved(j),
                Err(_) => CopySource::Slot(s),
            };
            (i, from)
        })
        .collect();
    ReorderPlan { saved, copies }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies a plan to slots holding their own index, as the device does.
    fn apply(plan: &ReorderPlan, batch: usize, capacity: usize) -> Vec<usize> {
        let mut slots: Vec<usize> = (0..capacity.max(batch)).collect();
        let scratch: Vec<usize> = plan.saved.iter().map(|&s| slots[s]).collect();
        for &(dst, from) in &plan.copies {
            slots[dst] = match from {
                CopySource::Slot(s) => slots[s],
                CopySource::Saved(j) => scratch[j],
            };
        }
        slots
    }

    #[test]
    fn reorder_plans_gather_like_the_cpu_cache() {
        let cases: [&[usize]; 7] = [
            &[0],
            &[0, 0, 0, 0, 0],
            &[1, 0, 0],
            &[2, 2, 1],
            &[0, 1, 2],
            &[3, 0, 1, 2],
            &[1],
        ];
        for src in cases {
            let plan = reorder(src);
            let slots = apply(&plan, 5, src.len());
            for (i, &s) in src.iter().enumerate() {
                assert_eq!(slots[i], s, "{src:?}: slot {i}");
            }
            // Identity slots cost nothing.
            assert_eq!(
                plan.copies.len(),
                src.iter().enumerate().filter(|(i, s)| *i != **s).count()
            );
        }
        assert_eq!(reorder(&[0, 1, 2]), ReorderPlan::default());
        assert_eq!(reorder(&[1, 0]).saved, vec![0, 1]);
        assert_eq!(reorder(&[0, 0, 0]).saved, Vec::<usize>::new());
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
        assert!(attention(1, 1, 64, 0).is_err());
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
