//! Every CUDA kernel against its CPU reference, by normalised MSE, in the manner of
//! llama.cpp's test-backend-ops: one line per (op, shape, dtype) case in the table below.
//!
//! Each case runs on every device this machine has (tests/common/device.rs): the host
//! emulation of the kernels (always, where a C++ compiler is) and the GPU. The case code
//! is the same for both: buffers by device address, kernels launched with the arguments
//! and launch shapes the model's sessions use. Without libcuda the GPU half prints
//! "skipped (GPU): no CUDA driver (libcuda) found"; with libcuda present, any failure to
//! open the GPU, compile or launch fails the test. `SOTTO_REQUIRE_CUDA=1` (set by
//! scripts/gpu-check.sh) turns every GPU skip into a failure.

mod common;

use common::device::{self, Device};
use common::{nmse, values};
use sotto_compute::kernels::{self as cpu, Isa};
use sotto_cuda::{f16, kernels, launch, plan, CudaError, KernelArg as Arg, QuantType};

#[derive(Clone, Copy, Debug)]
enum Op {
    /// a += b. Shape: [.., n]
    Add,
    Gelu,
    /// Rows of the last dimension, eps 1e-5, after an add onto the input (stored), into
    /// f32 and/or f16 outputs; compared as [x after the add, each output].
    LayerNorm(LnAdd, LnOut),
    /// Rows of the last dimension; square shapes get a causal (-inf) mask.
    SoftMax,
    /// The dtype's storage to f32 (ggml's cpy/dequantize).
    ToF32,
    /// f32 to f16 (round to nearest even); compared as the f16 values.
    ToF16,
    /// f32 rounded to f16 and back, in place (the cross-attention K/V at f32 precision).
    RoundF16,
    /// A ggml block type to f16, as quantized weights go to cuBLAS.
    DequantizeHalf,
    /// y += bias (per column), then GELU: (bias, gelu, into f16 instead of in place).
    /// Shape: [rows, cols]
    BiasAct(bool, bool, bool),
    /// A stacked product's output split into this many parts, every other part (from
    /// the first) with its bias added, as q, k and v. Shape: [rows, width]
    SplitBias(usize),
    /// y = x · Wᵀ for this many rows of x, W of the dtype (f16 or a block type), as
    /// decoder steps multiply, with the epilogue `kernels::MMV_*` flags (bias, GELU, added
    /// onto y; with `MMV_NORM`, of x's layer norm, which must equal what the layer-norm
    /// launch computes bit for bit). Shape: [n_out, n_in]
    MatVec(usize, i32),
    /// q, k and v of a decoder step in one launch: three mat-vecs of the same rows, k
    /// without a bias; with `true`, k and v go into KV caches of two sequences at a
    /// position; the `kernels::MMV_*` flags of `extra` (Q8, NORM). Shape: [n_out, n_in]
    MatVec3(usize, bool, i32),
    /// Token rows of a table of the dtype plus positions. Shape: [n_vocab, d]
    Embed,
    /// conv1d columns: (stride, channel-major input, as f16). Shape: [t_in, c_in]
    Im2col(usize, bool, bool),
    /// New rows into a KV cache at position pos0. Shape: [batch, n_new, d, n_ctx, pos0]
    KvWrite,
    /// Multi-head attention. Shape: [batch, n_new, heads, head width, keys]
    Attention(Attn),
    /// One head's scores before the softmax (word alignment). Shape: [rows, heads, head
    /// width, keys]; the head is the last.
    Scores,
    /// A decoder step's logits to shortlist records (`sotto_shortlist_chunks`, then
    /// `sotto_shortlist_merge`), the logits made as [`SlData`] says; compared word for word
    /// with a plain host shortlist (bits, but the sum: relative 1e-5 of an f64 one).
    /// Shape: [rows, n_vocab, text_end, top, pinned]
    Shortlist(SlData),
}

/// The logits of a [`Op::Shortlist`] case. Each row has its largest logit at a pinned id
/// (where any is pinned), which the rest must leave out.
#[derive(Clone, Copy, Debug)]
enum SlData {
    /// Spread values.
    Spread,
    /// Values of a few levels (ties everywhere), the largest at ids around chunk
    /// boundaries and at the pinned ids; the first row all equal.
    Ties,
    /// NaN and -inf among them, in the pinned and tail logits too: the first row has
    /// none but NaN and -inf among its text ids, the second only three finite ones.
    NonFinite,
}

/// What `sotto_layer_norm` adds onto its input first.
#[derive(Clone, Copy, Debug)]
enum LnAdd {
    Nothing,
    /// One row for every row (a deferred bias).
    Bias,
    /// A matrix of the input's shape (the positions).
    Rows,
}

/// Which outputs `sotto_layer_norm` writes.
#[derive(Clone, Copy, Debug)]
enum LnOut {
    F32,
    Half,
    Both,
}

#[derive(Clone, Copy, Debug)]
enum Attn {
    /// Self-attention over each sequence's cache of `keys` slots, rows from this position.
    Causal(usize),
    /// Every row over the same keys (cross-attention; encoder self-attention).
    Shared,
    /// As `Shared`, through `sotto_flash_attention` (head width 64).
    Flash,
    /// As `Shared`, each (row, head)'s keys split over blocks (`sotto_attention_split`,
    /// then `sotto_attention_merge`), as decoder steps run cross-attention; and again with
    /// the merge in the split launch's last blocks, which must give the same bits.
    Split,
    /// As `Causal`, split over blocks as `Split`: a decoder step's self-attention.
    SplitCausal(usize),
    /// As `Causal`, each sequence's keys through a slot table (`sotto_kv_row`), as a beam
    /// batch reads them after reorders: key j of sequence s in sequence `slot(s, j)`'s rows.
    Reordered(usize),
    /// As `SplitCausal`, through a slot table as `Reordered`.
    SplitReordered(usize),
    /// As `Flash`, on tensor cores (`sotto_flash_attention_mma`): f16 operands; with
    /// `true`, the output as f16 (compared as the f16 values).
    Mma(bool),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum DType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
}

/// Largest accepted normalised MSE: f32 rounding-order differences for sums and
/// transcendental functions. Copies and f16 narrowing are exact. Dequantization is exact
/// but for the GPU's fused multiply-add in `d·q + m` (q4_1, q5_1: one rounding instead of
/// two, 1 ulp), which the f16 narrowing of `DequantizeHalf` can turn into a rare 1-ulp f16
/// difference (~2e-10 each at these sizes; a wrong element costs ~1/n, 1e-3).
fn max_nmse(op: Op) -> f64 {
    match op {
        Op::Im2col(..) | Op::KvWrite | Op::ToF16 | Op::RoundF16 | Op::SplitBias(_) => 0.0,
        Op::ToF32 | Op::Embed => 1e-12,
        Op::DequantizeHalf => 1e-9,
        Op::MatVec(_, flags) if flags & kernels::MMV_GELU != 0 => 1e-10,
        // The CPU's quantized products, bit for bit (sotto_mmv_q8).
        Op::MatVec(_, flags) if flags & kernels::MMV_Q8 != 0 => 0.0,
        Op::MatVec3(_, _, extra) if extra & kernels::MMV_Q8 != 0 => 0.0,
        // q, k, v and the probabilities rounded to f16 (relative error 2^-11 each).
        Op::Attention(Mma(_)) => 1e-6,
        Op::MatVec(..) | Op::MatVec3(..) | Op::Attention(_) | Op::Scores => 1e-11,
        _ => 1e-10,
    }
}

macro_rules! conformance {
    ($($name:ident: $op:expr, [$($dim:expr),+] $dtype:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check($op, &[$($dim),+], DType::$dtype);
            }
        )*
    };
}

use sotto_cuda::kernels::{MMV_ADD, MMV_BIAS, MMV_GELU, MMV_NORM, MMV_Q8};
use Attn::*;
use Op::*;

conformance! {
    add_7: Add, [7] F32;
    add_enc: Add, [1500, 384] F32;
    add_odd: Add, [3, 1001] F32;
    gelu_1: Gelu, [1] F32;
    gelu_mlp: Gelu, [1500, 1536] F32;
    gelu_odd: Gelu, [4099] F32;
    layer_norm_1x1: LayerNorm(LnAdd::Nothing, LnOut::F32), [1, 1] F32;
    layer_norm_tiny: LayerNorm(LnAdd::Nothing, LnOut::F32), [1500, 384] F32;
    layer_norm_large: LayerNorm(LnAdd::Nothing, LnOut::F32), [3, 1280] F32;
    layer_norm_wide_odd: LayerNorm(LnAdd::Nothing, LnOut::F32), [2, 2049] F32;
    layer_norm_narrow: LayerNorm(LnAdd::Nothing, LnOut::F32), [5, 7] F32;
    layer_norm_bias_half: LayerNorm(LnAdd::Bias, LnOut::Half), [1500, 384] F32;
    layer_norm_positions_half: LayerNorm(LnAdd::Rows, LnOut::Half), [37, 512] F32;
    layer_norm_bias_both: LayerNorm(LnAdd::Bias, LnOut::Both), [9, 1280] F32;
    layer_norm_half_odd: LayerNorm(LnAdd::Nothing, LnOut::Half), [3, 2049] F32;
    layer_norm_rows_f32: LayerNorm(LnAdd::Rows, LnOut::F32), [5, 7] F32;
    softmax_small: SoftMax, [5, 7] F32;
    softmax_causal: SoftMax, [448, 448] F32;
    softmax_vocab: SoftMax, [2, 51865] F32;
    softmax_cross: SoftMax, [6, 1500] F32;
    to_f32_f16: ToF32, [4097] F16;
    to_f32_f16_wide: ToF32, [384, 1536] F16;
    to_f32_q8_0: ToF32, [8, 384] Q8_0;
    to_f32_q8_0_one_block: ToF32, [1, 32] Q8_0;
    to_f32_q4_0: ToF32, [8, 384] Q4_0;
    to_f32_q4_0_one_block: ToF32, [1, 32] Q4_0;
    to_f32_q4_1: ToF32, [8, 384] Q4_1;
    to_f32_q5_0: ToF32, [8, 384] Q5_0;
    to_f32_q5_1: ToF32, [8, 384] Q5_1;
    to_f16: ToF16, [3, 1001] F32;
    round_f16: RoundF16, [3, 1001] F32;
    dequantize_half_q4_0: DequantizeHalf, [4, 384] Q4_0;
    dequantize_half_q4_1: DequantizeHalf, [4, 384] Q4_1;
    dequantize_half_q5_0: DequantizeHalf, [4, 384] Q5_0;
    dequantize_half_q5_1: DequantizeHalf, [4, 384] Q5_1;
    dequantize_half_q8_0: DequantizeHalf, [4, 384] Q8_0;
    bias: BiasAct(true, false, false), [5, 300] F32;
    bias_gelu: BiasAct(true, true, false), [5, 300] F32;
    gelu_no_bias: BiasAct(false, true, false), [5, 300] F32;
    bias_gelu_half: BiasAct(true, true, true), [1500, 1536] F32;
    bias_half: BiasAct(true, false, true), [7, 301] F32;
    narrow_only: BiasAct(false, false, true), [3, 77] F32;
    split_qkv: SplitBias(3), [1500, 384] F32;
    split_cross_pair: SplitBias(4), [37, 64] F32;
    split_one: SplitBias(1), [5, 7] F32;
    split_two_odd: SplitBias(2), [3, 33] F32;
    mat_vec_f16_greedy: MatVec(1, 0), [51, 384] F16;
    mat_vec_f16_beams: MatVec(5, 0), [9, 1536] F16;
    mat_vec_f16_odd_rows: MatVec(8, 0), [7, 1537] F16;
    mat_vec_f16_short_rows: MatVec(3, 0), [5, 31] F16;
    mat_vec_q4_0: MatVec(1, 0), [51, 384] Q4_0;
    mat_vec_q4_1: MatVec(2, 0), [9, 1536] Q4_1;
    mat_vec_q5_0: MatVec(5, 0), [7, 64] Q5_0;
    mat_vec_q5_1: MatVec(8, 0), [5, 1120] Q5_1;
    mat_vec_q8_0: MatVec(5, 0), [51, 384] Q8_0;
    mat_vec_q8_0_vocab: MatVec(1, 0), [51864, 384] Q8_0;
    mat_vec_f16_bias_gelu: MatVec(5, MMV_BIAS | MMV_GELU), [37, 384] F16;
    mat_vec_f16_bias_add: MatVec(3, MMV_BIAS | MMV_ADD), [29, 1536] F16;
    mat_vec_q8_0_bias_gelu: MatVec(2, MMV_BIAS | MMV_GELU), [33, 384] Q8_0;
    mat_vec_q4_1_add: MatVec(5, MMV_ADD), [9, 1536] Q4_1;
    mat_vec_q5_0_bias_add: MatVec(1, MMV_BIAS | MMV_ADD), [7, 64] Q5_0;
    mat_vec_q8_q4_0_greedy: MatVec(1, MMV_Q8), [51, 384] Q4_0;
    mat_vec_q8_q4_1_beams: MatVec(5, MMV_Q8), [9, 1536] Q4_1;
    mat_vec_q8_q5_0_bias_add: MatVec(3, MMV_Q8 | MMV_BIAS | MMV_ADD), [7, 64] Q5_0;
    mat_vec_q8_q5_1_long_rows: MatVec(8, MMV_Q8), [5, 5120] Q5_1;
    mat_vec_q8_q8_0_bias: MatVec(2, MMV_Q8 | MMV_BIAS), [33, 384] Q8_0;
    mat_vec_q8_q4_0_gelu: MatVec(2, MMV_Q8 | MMV_BIAS | MMV_GELU), [33, 1536] Q4_0;
    mat_vec_q8_q4_0_prompt: MatVec(13, MMV_Q8 | MMV_BIAS), [17, 384] Q4_0;
    mat_vec_q8_q8_0_cross: MatVec(150, MMV_Q8), [20, 512] Q8_0;
    mat_vec_q4_1_chunked_f32: MatVec(11, MMV_BIAS), [9, 256] Q4_1;
    mat_vec_norm_f16_greedy: MatVec(1, MMV_NORM), [51, 384] F16;
    mat_vec_norm_f16_gelu: MatVec(5, MMV_NORM | MMV_BIAS | MMV_GELU), [37, 384] F16;
    mat_vec_norm_q8_q4_0_gelu: MatVec(1, MMV_NORM | MMV_Q8 | MMV_BIAS | MMV_GELU), [33, 384] Q4_0;
    mat_vec_norm_q8_q5_1_beams: MatVec(5, MMV_NORM | MMV_Q8 | MMV_BIAS), [9, 512] Q5_1;
    mat_vec_norm_q8_q8_0_large: MatVec(5, MMV_NORM | MMV_Q8), [5, 1280] Q8_0;
    mat_vec_norm_q8_q8_0_medium: MatVec(8, MMV_NORM | MMV_Q8), [5, 1024] Q8_0;
    mat_vec_norm_f16_large: MatVec(8, MMV_NORM), [5, 1280] F16;
    mat_vec_norm_q8_q4_1_short: MatVec(3, MMV_NORM | MMV_Q8), [7, 64] Q4_1;
    mat_vec_norm_q8_q5_0_prompt: MatVec(13, MMV_NORM | MMV_Q8 | MMV_BIAS), [17, 384] Q5_0;
    mat_vec_norm_q4_0_f32_in: MatVec(2, MMV_NORM | MMV_BIAS), [9, 384] Q4_0;
    mat_vec3_f16_greedy: MatVec3(1, false, 0), [37, 384] F16;
    mat_vec3_f16_cache: MatVec3(4, true, 0), [29, 384] F16;
    mat_vec3_q8_0_cache: MatVec3(6, true, 0), [9, 512] Q8_0;
    mat_vec3_q4_1: MatVec3(5, false, 0), [33, 256] Q4_1;
    mat_vec3_q5_0_cache: MatVec3(2, true, 0), [7, 64] Q5_0;
    mat_vec3_q4_0_prompt_cache: MatVec3(20, true, 0), [9, 128] Q4_0;
    mat_vec3_q8_q5_1_beams: MatVec3(5, false, MMV_Q8), [33, 1536] Q5_1;
    mat_vec3_norm_f16_cache: MatVec3(4, true, MMV_NORM), [29, 384] F16;
    mat_vec3_norm_q8_q4_0_cache: MatVec3(6, true, MMV_NORM | MMV_Q8), [9, 384] Q4_0;
    mat_vec3_norm_q8_q8_0_prompt: MatVec3(12, true, MMV_NORM | MMV_Q8), [7, 512] Q8_0;
    embed_f32: Embed, [50, 96] F32;
    embed_f16: Embed, [50, 96] F16;
    embed_q4_0: Embed, [50, 96] Q4_0;
    embed_q4_1: Embed, [50, 96] Q4_1;
    embed_q5_0: Embed, [50, 96] Q5_0;
    embed_q5_1: Embed, [50, 96] Q5_1;
    embed_q8_0: Embed, [50, 96] Q8_0;
    im2col_mel: Im2col(1, true, false), [37, 5] F32;
    im2col_mel_stride_2: Im2col(2, true, false), [37, 5] F32;
    im2col_time_major: Im2col(1, false, false), [37, 5] F32;
    im2col_conv2: Im2col(2, false, false), [3000, 8] F32;
    im2col_mel_half: Im2col(1, true, true), [3000, 80] F32;
    im2col_conv2_half: Im2col(2, false, true), [37, 5] F32;
    kv_write_beams: KvWrite, [3, 2, 8, 10, 4] F32;
    kv_write_prompt: KvWrite, [1, 7, 384, 448, 0] F32;
    attention_prompt: Attention(Causal(0)), [1, 5, 2, 64, 5] F32;
    attention_beams: Attention(Causal(6)), [3, 1, 3, 64, 9] F32;
    attention_beams_tiny: Attention(Causal(100)), [5, 1, 6, 64, 448] F32;
    attention_cross: Attention(Shared), [2, 2, 2, 64, 300] F32;
    attention_cross_tiny: Attention(Shared), [5, 1, 6, 64, 1500] F32;
    attention_encoder_dh_80: Attention(Shared), [1, 6, 2, 80, 150] F32;
    split_cross_tiny: Attention(Split), [5, 1, 6, 64, 1500] F32;
    split_cross_odd: Attention(Split), [2, 1, 3, 64, 300] F32;
    split_cross_dh_80: Attention(Split), [1, 1, 2, 80, 600] F32;
    split_cross_large: Attention(Split), [1, 1, 20, 64, 1500] F32;
    split_self_tiny: Attention(SplitCausal(100)), [5, 1, 6, 64, 448] F32;
    split_self_first: Attention(SplitCausal(0)), [1, 1, 6, 64, 448] F32;
    split_self_full: Attention(SplitCausal(447)), [2, 1, 2, 64, 448] F32;
    split_self_prompt: Attention(SplitCausal(60)), [1, 7, 3, 80, 200] F32;
    reordered_beams: Attention(Reordered(6)), [3, 1, 3, 64, 9] F32;
    reordered_beams_tiny: Attention(Reordered(100)), [5, 1, 6, 64, 448] F32;
    reordered_prompt: Attention(Reordered(3)), [2, 4, 2, 80, 20] F32;
    split_reordered_tiny: Attention(SplitReordered(100)), [5, 1, 6, 64, 448] F32;
    split_reordered_full: Attention(SplitReordered(447)), [3, 1, 2, 64, 448] F32;
    split_reordered_prompt: Attention(SplitReordered(60)), [2, 3, 3, 80, 200] F32;
    flash_one_tile: Attention(Flash), [1, 16, 2, 64, 64] F32;
    flash_partial_tiles: Attention(Flash), [1, 37, 3, 64, 150] F32;
    flash_one_key: Attention(Flash), [1, 20, 1, 64, 1] F32;
    flash_encoder_tiny: Attention(Flash), [1, 1500, 6, 64, 1500] F32;
    mma_one_tile: Attention(Mma(false)), [1, 64, 1, 64, 64] F32;
    mma_partial_tiles: Attention(Mma(false)), [1, 37, 3, 64, 150] F32;
    mma_one_key: Attention(Mma(false)), [1, 20, 1, 64, 1] F32;
    mma_encoder_tiny: Attention(Mma(false)), [1, 1500, 6, 64, 1500] F32;
    mma_half_out: Attention(Mma(true)), [1, 100, 2, 64, 100] F32;
    scores_align: Scores, [7, 3, 64, 150] F32;
    scores_align_tiny: Scores, [30, 6, 64, 1500] F32;
    shortlist_greedy: Shortlist(SlData::Spread), [1, 51865, 50257, 1, 90] F32;
    shortlist_beams: Shortlist(SlData::Spread), [5, 51865, 50257, 10, 90] F32;
    shortlist_top_64_english: Shortlist(SlData::Spread), [2, 51864, 50256, 64, 90] F32;
    shortlist_many_rows: Shortlist(SlData::Spread), [24, 20011, 19000, 3, 40] F32;
    shortlist_no_top: Shortlist(SlData::Spread), [2, 51865, 50257, 0, 90] F32;
    shortlist_ties: Shortlist(SlData::Ties), [3, 51865, 50257, 10, 90] F32;
    shortlist_ties_top_64: Shortlist(SlData::Ties), [2, 9000, 8800, 64, 30] F32;
    shortlist_non_finite: Shortlist(SlData::NonFinite), [4, 51865, 50257, 10, 90] F32;
    shortlist_none_pinned: Shortlist(SlData::Spread), [4, 51865, 50257, 10, 0] F32;
    shortlist_all_pinned: Shortlist(SlData::Spread), [2, 1000, 700, 5, 700] F32;
    // LogitNeed::All (the repetition filters): every text id pinned, no top.
    shortlist_whole_rows: Shortlist(SlData::Spread), [2, 51865, 50257, 0, 50257] F32;
    shortlist_no_tail: Shortlist(SlData::Ties), [3, 5000, 5000, 10, 20] F32;
    shortlist_odd_rows: Shortlist(SlData::NonFinite), [7, 3001, 2999, 10, 13] F32;
    shortlist_no_text: Shortlist(SlData::Spread), [2, 40, 0, 3, 0] F32;
}

/// Runs `op` on every device here and compares each result with the CPU reference; fails
/// after all have run, naming each device that missed (which of the emulation's orders
/// fails tells a race from a wrong result).
fn check(op: Op, shape: &[usize], dtype: DType) {
    if let Shortlist(data) = op {
        return check_shortlist(data, shape);
    }
    let mut failed = Vec::new();
    for mut dev in device::devices() {
        let (got, want) = run(dev.as_mut(), op, shape, dtype);
        assert!(
            want.iter().all(|v| v.is_finite()),
            "CPU reference has non-finite values"
        );
        let err = nmse(&got, &want);
        println!(
            "{op:?} {shape:?} {dtype:?}: nmse {err:.3e} on {}",
            dev.label()
        );
        if !(err.is_finite() && err <= max_nmse(op)) {
            failed.push(format!("nmse {err:.3e} on {}", dev.label()));
        }
    }
    assert!(
        failed.is_empty(),
        "{op:?} {shape:?} {dtype:?} (at most {:.0e}): {}",
        max_nmse(op),
        failed.join("; ")
    );
}

fn u(n: usize) -> Arg {
    Arg::U32(u32::try_from(n).unwrap())
}

fn quant_type(dtype: DType) -> QuantType {
    match dtype {
        DType::Q8_0 => QuantType::Q8_0,
        DType::Q4_0 => QuantType::Q4_0,
        DType::Q4_1 => QuantType::Q4_1,
        DType::Q5_0 => QuantType::Q5_0,
        DType::Q5_1 => QuantType::Q5_1,
        other => panic!("{other:?} is not a block type"),
    }
}

/// `x` stored as `dtype` (f16 as bits, block types quantized), and the f32 values that
/// storage holds.
fn stored(dtype: DType, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    match dtype {
        DType::F32 => (x.iter().flat_map(|v| v.to_le_bytes()).collect(), x.to_vec()),
        DType::F16 => {
            let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            (
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                h.iter().map(|v| v.to_f32()).collect(),
            )
        }
        _ => {
            let t = quant_type(dtype);
            let mut q = vec![0u8; t.row_bytes(x.len())];
            sotto_quant::quantize_row(t, x, &mut q);
            let mut back = vec![0.0; x.len()];
            sotto_quant::dequantize_row(t, &q, &mut back);
            (q, back)
        }
    }
}

/// `x · Wᵀ` as the CPU's decoder computes it with quantized weights: the rows quantized
/// once (`QuantActs`), W regrouped (`QuantTiles`), on this CPU's SIMD kernels (AVX2 or
/// AVX-512 VNNI, the same sums: the scalar oracle rounds its multiply-adds twice).
/// Shape: w [n_out, n_in] in ggml blocks; x [m, n_in]; result [m, n_out]
fn cpu_quantized_product(
    t: QuantType,
    w: &[u8],
    x: &[f32],
    m: usize,
    n_out: usize,
    n_in: usize,
) -> Vec<f32> {
    use sotto_quant::{QuantActs, QuantTiles, GROUP_ROWS};
    let tiles = QuantTiles::new(t, w, n_out, n_in);
    let mut acts = QuantActs::new();
    acts.quantize(t, x, m, n_in);
    let ldo = tiles.groups() * GROUP_ROWS;
    let mut out = vec![0.0; m * ldo];
    let isa = sotto_quant::Isa::Avx512;
    sotto_quant::tiled_matmul(isa, &tiles, 0..tiles.groups(), &acts, &mut out, ldo);
    out.chunks_exact(ldo)
        .flat_map(|r| r[..n_out].to_vec())
        .collect()
}

fn gamma_beta(cols: usize) -> (Vec<f32>, Vec<f32>) {
    let gamma = values(cols, 7, 1.0).iter().map(|g| 1.0 + g).collect();
    (gamma, values(cols, 11, 0.5))
}

/// Square shapes get a causal mask: entry (i, j) with j > i is -inf.
fn softmax_input(x: &[f32], cols: usize) -> Vec<f32> {
    let rows = x.len() / cols;
    let mut x = x.to_vec();
    if rows == cols {
        for (i, row) in x.chunks_exact_mut(cols).enumerate() {
            row[i + 1..].fill(f32::NEG_INFINITY);
        }
    }
    x
}

fn flat(n: usize) -> launch::Launch {
    launch::elementwise("t", n).unwrap().unwrap()
}

/// The case on `dev`: (its output, the CPU reference).
fn run(dev: &mut dyn Device, op: Op, shape: &[usize], dtype: DType) -> (Vec<f32>, Vec<f32>) {
    let n: usize = shape.iter().product();
    let cols = *shape.last().unwrap();
    let seed = n as u64 ^ (cols as u64) << 32;
    let isa = Isa::Scalar;
    match op {
        Add => {
            let (a, b) = (values(n, seed, 4.0), values(n, 3, 2.0));
            let (pa, pb) = (dev.put_f32(&a), dev.put_f32(&b));
            dev.launch_1d(
                "sotto_add_f32",
                flat(n),
                &[Arg::Ptr(pa), Arg::Ptr(pb), u(n)],
            );
            let mut want = a;
            cpu::add(isa, &mut want, &b);
            (dev.get_f32(pa, n), want)
        }
        Gelu => {
            let x = values(n, seed, 4.0);
            let px = dev.put_f32(&x);
            dev.launch_1d("sotto_gelu_f32", flat(n), &[Arg::Ptr(px), u(n)]);
            let mut want = x;
            cpu::gelu(isa, &mut want);
            (dev.get_f32(px, n), want)
        }
        LayerNorm(add, out) => {
            let x = values(n, seed, 4.0);
            let (gamma, beta) = gamma_beta(cols);
            let a = match add {
                LnAdd::Nothing => Vec::new(),
                LnAdd::Bias => values(cols, 5, 2.0),
                LnAdd::Rows => values(n, 6, 2.0),
            };
            let stride = if matches!(add, LnAdd::Rows) { cols } else { 0 };
            let (f32_out, half_out) = match out {
                LnOut::F32 => (true, false),
                LnOut::Half => (false, true),
                LnOut::Both => (true, true),
            };
            let (px, pg, pb) = (dev.put_f32(&x), dev.put_f32(&gamma), dev.put_f32(&beta));
            let pa = if a.is_empty() { 0 } else { dev.put_f32(&a) };
            let po = if f32_out { dev.nans(n) } else { 0 };
            let ph = if half_out {
                dev.put_u16(&vec![0x7e00; n])
            } else {
                0
            };
            let l = launch::rows("t", n / cols, cols).unwrap().unwrap();
            let args = [
                Arg::Ptr(px),
                Arg::Ptr(pa),
                u(stride),
                Arg::Ptr(pg),
                Arg::Ptr(pb),
                Arg::Ptr(po),
                Arg::Ptr(ph),
                u(cols),
                Arg::F32(1e-5),
            ];
            dev.launch_1d("sotto_layer_norm", l, &args);
            let mut added = x;
            if !a.is_empty() {
                for (r, row) in added.chunks_exact_mut(cols).enumerate() {
                    let add = &a[r * stride..][..cols];
                    row.iter_mut().zip(add).for_each(|(v, a)| *v += a);
                }
            }
            let mut normed = vec![0.0; n];
            for (row, o) in added.chunks_exact(cols).zip(normed.chunks_exact_mut(cols)) {
                cpu::layer_norm(isa, row, &gamma, &beta, 1e-5, o);
            }
            let (mut got, mut want) = (dev.get_f32(px, n), added);
            if f32_out {
                got.extend(dev.get_f32(po, n));
                want.extend(&normed);
            }
            if half_out {
                got.extend(
                    dev.get_u16(ph, n)
                        .iter()
                        .map(|&h| f16::from_bits(h).to_f32()),
                );
                want.extend(normed.iter().map(|&v| f16::from_f32(v).to_f32()));
            }
            (got, want)
        }
        SoftMax => {
            let x = softmax_input(&values(n, seed, 4.0), cols);
            let px = dev.put_f32(&x);
            let l = launch::rows("t", n / cols, cols).unwrap().unwrap();
            dev.launch_1d("sotto_softmax_rows_f32", l, &[Arg::Ptr(px), u(cols)]);
            let mut want = x;
            want.chunks_exact_mut(cols)
                .for_each(|row| cpu::softmax(isa, row));
            (dev.get_f32(px, n), want)
        }
        ToF32 => {
            let (bytes, want) = stored(dtype, &values(n, seed, 4.0));
            let (pq, po) = (dev.put(&bytes), dev.nans(n));
            let name = match dtype {
                DType::F16 => "sotto_f16_to_f32",
                _ => kernels::for_type("sotto_dequantize", quant_type(dtype)).unwrap(),
            };
            dev.launch_1d(name, flat(n), &[Arg::Ptr(pq), Arg::Ptr(po), u(n)]);
            (dev.get_f32(po, n), want)
        }
        ToF16 => {
            let x = values(n, seed, 70_000.0);
            let (px, po) = (dev.put_f32(&x), dev.put_u16(&vec![0; n]));
            dev.launch_1d(
                "sotto_f32_to_f16",
                flat(n),
                &[Arg::Ptr(px), Arg::Ptr(po), u(n)],
            );
            let half = |b: &[u16]| b.iter().map(|&h| f16::from_bits(h).to_f32()).collect();
            let want: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
            // Values past 65504 round to infinity: compared as the largest finite f16 so
            // that nmse stays finite (and still fails on any other difference).
            let clamp = |v: Vec<f32>| v.into_iter().map(|x: f32| x.clamp(-65504.0, 65504.0));
            let (got, want): (Vec<f32>, Vec<f32>) = (half(&dev.get_u16(po, n)), half(&want));
            (clamp(got).collect(), clamp(want).collect())
        }
        RoundF16 => {
            let x = values(n, seed, 60_000.0);
            let px = dev.put_f32(&x);
            dev.launch_1d("sotto_round_f16", flat(n), &[Arg::Ptr(px), u(n)]);
            let want = x.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
            (dev.get_f32(px, n), want)
        }
        DequantizeHalf => {
            let t = quant_type(dtype);
            let (bytes, wide) = stored(dtype, &values(n, seed, 3.0));
            let (pq, po) = (dev.put(&bytes), dev.put_u16(&vec![0; n]));
            let name = kernels::for_type("sotto_dequantize_half", t).unwrap();
            dev.launch_1d(name, flat(n), &[Arg::Ptr(pq), Arg::Ptr(po), u(n)]);
            let got = dev.get_u16(po, n);
            let got = got.iter().map(|&h| f16::from_bits(h).to_f32()).collect();
            let want = wide.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
            (got, want)
        }
        BiasAct(bias, gelu, half) => {
            let (y, b) = (values(n, seed, 3.0), values(cols, 72, 1.0));
            let (py, pb) = (dev.put_f32(&y), dev.put_f32(&b));
            let ph = if half {
                dev.put_u16(&vec![0x7e00; n])
            } else {
                0
            };
            let flags = [Arg::I32(bias as i32), Arg::I32(gelu as i32)];
            let ptrs = [py, ph, pb].map(Arg::Ptr);
            let args = [&ptrs[..], &[u(cols), u(n)], &flags].concat();
            dev.launch_1d("sotto_bias_act", flat(n), &args);
            let mut want = y.clone();
            if bias {
                for row in want.chunks_exact_mut(cols) {
                    row.iter_mut().zip(&b).for_each(|(v, b)| *v += b);
                }
            }
            if gelu {
                cpu::gelu(isa, &mut want);
            }
            if !half {
                return (dev.get_f32(py, n), want);
            }
            // Into f16 alone: y itself is left as it was.
            let mut got = dev.get_f32(py, n);
            got.extend(
                dev.get_u16(ph, n)
                    .iter()
                    .map(|&h| f16::from_bits(h).to_f32()),
            );
            let narrowed = want.iter().map(|&v| f16::from_f32(v).to_f32());
            (got, y.into_iter().chain(narrowed).collect())
        }
        SplitBias(parts) => {
            let (rows, width) = (shape[0], shape[1]);
            let src = values(rows * parts * width, seed, 3.0);
            let bias = values(parts * width, 17, 1.0);
            let has_bias = (0..parts).step_by(2).fold(0u32, |m, p| m | 1 << p);
            let (ps, pb) = (dev.put_f32(&src), dev.put_f32(&bias));
            let outs: Vec<u64> = (0..4)
                .map(|p| if p < parts { dev.nans(rows * width) } else { 0 })
                .collect();
            let ptrs = [ps, pb, outs[0], outs[1], outs[2], outs[3]].map(Arg::Ptr);
            let tail = [u(width), u(parts), Arg::U32(has_bias), u(src.len())];
            dev.launch_1d(
                "sotto_split_bias",
                flat(src.len()),
                &[&ptrs[..], &tail].concat(),
            );
            let (mut got, mut want) = (Vec::new(), Vec::new());
            for (p, &out) in outs.iter().enumerate().take(parts) {
                got.extend(dev.get_f32(out, rows * width));
                for r in 0..rows {
                    for c in 0..width {
                        let j = p * width + c;
                        let b = if has_bias >> p & 1 == 1 { bias[j] } else { 0.0 };
                        want.push(src[r * parts * width + j] + b);
                    }
                }
            }
            (got, want)
        }
        MatVec(m, flags) => {
            let (n_out, n_in) = (shape[0], shape[1]);
            let (bytes, w) = stored(dtype, &values(n_out * n_in, seed, 1.0));
            let x = values(m * n_in, 41 + m as u64, 2.0);
            // With a norm, the product of the layer-norm launch's output is expected.
            let norm = flags & kernels::MMV_NORM != 0;
            let (px, x, norm_args, pn) = with_norm(dev, x, m, n_in, norm);
            let b = values(n_out, 43, 1.0);
            // Added onto: y's old values; stored: NaN, so an output never written shows.
            let add = flags & kernels::MMV_ADD != 0;
            let y0 = values(m * n_out, 47, 3.0);
            let py = if add {
                dev.put_f32(&y0)
            } else {
                dev.nans(m * n_out)
            };
            let (pw, pb) = (dev.put(&bytes), dev.put_f32(&b));
            let name = match dtype {
                DType::F16 => "sotto_mul_mat_vec_f16",
                _ => kernels::for_type("sotto_mul_mat_vec", quant_type(dtype)).unwrap(),
            };
            let l = launch::mul_mat_vec_chunks("t", m, n_out, n_in)
                .unwrap()
                .unwrap();
            let shared = mmv_shared(flags, m, n_in);
            let ptrs = [pw, px, py, pb].map(Arg::Ptr);
            let tail = [u(n_in), u(n_out), u(m), Arg::I32(flags)];
            let args = [&ptrs[..], &tail, &norm_args].concat();
            dev.launch(name, l.grid_dim, l.block_dim, shared, &args);
            if norm {
                // The same product of the layer-norm launch's output: the same bits.
                let py2 = if add {
                    dev.put_f32(&y0)
                } else {
                    dev.nans(m * n_out)
                };
                let ptrs = [pw, pn, py2, pb].map(Arg::Ptr);
                let tail = [
                    u(n_in),
                    u(n_out),
                    u(m),
                    Arg::I32(flags & !kernels::MMV_NORM),
                ];
                let args = [&ptrs[..], &tail, &with_norm_none()].concat();
                let shared = mmv_shared(flags & !kernels::MMV_NORM, m, n_in);
                dev.launch(name, l.grid_dim, l.block_dim, shared, &args);
                let (fused, apart) = (dev.get_f32(py, m * n_out), dev.get_f32(py2, m * n_out));
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert!(
                    bits(&fused) == bits(&apart),
                    "norm in the launch: not bit for bit"
                );
            }
            let want = if flags & kernels::MMV_Q8 != 0 {
                cpu_quantized_product(quant_type(dtype), &bytes, &x, m, n_out, n_in)
            } else {
                let mut want = vec![0.0; m * n_out];
                for r in 0..m {
                    for o in 0..n_out {
                        let (wr, xr) = (&w[o * n_in..][..n_in], &x[r * n_in..][..n_in]);
                        let s: f64 = wr.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        want[r * n_out + o] = s as f32;
                    }
                }
                want
            };
            let mut want = want;
            if flags & kernels::MMV_BIAS != 0 {
                for row in want.chunks_exact_mut(n_out) {
                    row.iter_mut().zip(&b).for_each(|(v, b)| *v += b);
                }
            }
            if flags & kernels::MMV_GELU != 0 {
                cpu::gelu(isa, &mut want);
            }
            if add {
                want.iter_mut().zip(&y0).for_each(|(v, y)| *v += y);
            }
            (dev.get_f32(py, m * n_out), want)
        }
        MatVec3(m, cache, extra) => {
            let (n_out, n_in) = (shape[0], shape[1]);
            let w: Vec<_> = (0..3u64)
                .map(|i| stored(dtype, &values(n_out * n_in, seed + i, 1.0)))
                .collect();
            let x = values(m * n_in, 51, 2.0);
            let (px, x, norm_args, _) = with_norm(dev, x, m, n_in, extra & kernels::MMV_NORM != 0);
            let bias = [
                Some(values(n_out, 52, 1.0)),
                None,
                Some(values(n_out, 53, 1.0)),
            ];
            let mut outs = vec![vec![0.0f32; m * n_out]; 3];
            for (i, out) in outs.iter_mut().enumerate() {
                let (bytes, wi) = &w[i];
                if extra & kernels::MMV_Q8 != 0 {
                    *out = cpu_quantized_product(quant_type(dtype), bytes, &x, m, n_out, n_in);
                }
                for r in 0..m {
                    for o in 0..n_out {
                        let b = bias[i].as_ref().map_or(0.0, |b| b[o]);
                        if extra & kernels::MMV_Q8 != 0 {
                            // The kernel adds the bias as its epilogue does: one rounding.
                            if bias[i].is_some() {
                                out[r * n_out + o] += b;
                            }
                            continue;
                        }
                        let (wr, xr) = (&wi[o * n_in..][..n_in], &x[r * n_in..][..n_in]);
                        let s: f64 = wr.iter().zip(xr).map(|(&a, &b)| a as f64 * b as f64).sum();
                        out[r * n_out + o] = s as f32 + b;
                    }
                }
            }
            // Two sequences of m / 2 new rows at position 3 of 8-slot caches, which hold
            // other values elsewhere; or plain rows (NaN first: an unwritten one shows).
            let (n_new, pos0, n_ctx) = if cache {
                (m / 2, 3u32, m / 2 + 5)
            } else {
                (1, 0, 0)
            };
            let seq_stride = n_ctx * n_out;
            let mut want = outs[0].clone();
            let mut ys = vec![dev.nans(m * n_out)];
            for (i, out) in outs.iter().enumerate().skip(1) {
                if cache {
                    let old = values(2 * seq_stride, 60 + i as u64, 1.0);
                    let mut slots = old.clone();
                    for r in 0..m {
                        let at = (r / n_new) * seq_stride + (pos0 as usize + r % n_new) * n_out;
                        slots[at..][..n_out].copy_from_slice(&out[r * n_out..][..n_out]);
                    }
                    want.extend(slots);
                    ys.push(dev.put_f32(&old));
                } else {
                    want.extend_from_slice(out);
                    ys.push(dev.nans(m * n_out));
                }
            }
            let pw: Vec<u64> = w.iter().map(|(bytes, _)| dev.put(bytes)).collect();
            let pb: Vec<u64> = bias
                .iter()
                .map(|b| b.as_ref().map_or(0, |b| dev.put_f32(b)))
                .collect();
            let ppos = if cache { dev.put_u32(&[pos0]) } else { 0 };
            let name = match dtype {
                DType::F16 => "sotto_mul_mat_vec3_f16",
                _ => kernels::for_type("sotto_mul_mat_vec3", quant_type(dtype)).unwrap(),
            };
            let l = launch::mul_mat_vec_chunks("t", m, 3 * n_out, n_in)
                .unwrap()
                .unwrap();
            let ptrs = [
                pw[0], pw[1], pw[2], px, ys[0], ys[1], ys[2], pb[0], pb[1], pb[2],
            ];
            let tail = [
                u(n_in),
                u(n_out),
                u(m),
                Arg::Ptr(ppos),
                u(n_new),
                u(seq_stride),
                Arg::I32(extra),
            ];
            let args = [&ptrs.map(Arg::Ptr)[..], &tail, &norm_args].concat();
            let shared = mmv_shared(extra, m, n_in);
            dev.launch(name, l.grid_dim, l.block_dim, shared, &args);
            let mut got = dev.get_f32(ys[0], m * n_out);
            for &y in &ys[1..] {
                got.extend(dev.get_f32(y, if cache { 2 * seq_stride } else { m * n_out }));
            }
            (got, want)
        }
        Embed => {
            let (n_vocab, d) = (shape[0], shape[1]);
            let n_ctx = 12;
            let (bytes, table) = stored(dtype, &values(n_vocab * d, seed, 1.0));
            let pos = values(n_ctx * d, 62, 0.5);
            // Two sequences of three new tokens at position 4.
            let (tok, n_new, pos0) = (vec![3u32, 49, 0, 7, 7, 12], 3usize, 4u32);
            let m = tok.len() * d;
            let (pt, ptok, ppos) = (dev.put(&bytes), dev.put_u32(&tok), dev.put_f32(&pos));
            let (px, p0) = (dev.nans(m), dev.put_u32(&[pos0]));
            let name = match dtype {
                DType::F32 => "sotto_embed_f32",
                DType::F16 => "sotto_embed_f16",
                _ => kernels::for_type("sotto_embed", quant_type(dtype)).unwrap(),
            };
            let args = [
                Arg::Ptr(pt),
                Arg::Ptr(ptok),
                Arg::Ptr(ppos),
                Arg::Ptr(px),
                u(d),
                u(n_new),
                Arg::Ptr(p0),
                u(m),
            ];
            dev.launch_1d(name, flat(m), &args);
            let mut want = vec![0.0; m];
            for (r, &t) in tok.iter().enumerate() {
                for c in 0..d {
                    let p = (pos0 as usize + r % n_new) * d + c;
                    want[r * d + c] = table[t as usize * d + c] + pos[p];
                }
            }
            (dev.get_f32(px, m), want)
        }
        Im2col(stride, channel_major, half) => {
            let (t_in, c_in) = (shape[0], shape[1]);
            let x = values(t_in * c_in, seed, 1.0);
            let (ts, cs) = if channel_major { (1, t_in) } else { (c_in, 1) };
            let t_out = plan::conv_out_len(t_in, stride);
            let len = t_out * c_in * 3;
            let px = dev.put_f32(&x);
            let (pc, ph) = if half {
                (0, dev.put_u16(&vec![0x7e00; len]))
            } else {
                (dev.nans(len), 0)
            };
            let args = [
                Arg::Ptr(px),
                Arg::Ptr(pc),
                Arg::Ptr(ph),
                u(t_in),
                u(c_in),
                u(t_out),
                u(stride),
                u(ts),
                u(cs),
            ];
            dev.launch_1d("sotto_im2col", flat(len), &args);
            let mut want = vec![0.0; len];
            for t in 0..t_out {
                for c in 0..c_in {
                    for k in 0..3 {
                        let ti = (t * stride + k) as isize - 1;
                        if (0..t_in as isize).contains(&ti) {
                            want[t * c_in * 3 + c * 3 + k] = x[ti as usize * ts + c * cs];
                        }
                    }
                }
            }
            if half {
                let got = dev.get_u16(ph, len);
                let got = got.iter().map(|&h| f16::from_bits(h).to_f32()).collect();
                return (
                    got,
                    want.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
                );
            }
            (dev.get_f32(pc, len), want)
        }
        KvWrite => {
            let [batch, n_new, d, n_ctx, pos0] = shape[..] else {
                panic!("KvWrite shape: [batch, n_new, d, n_ctx, pos0]")
            };
            let src = values(batch * n_new * d, seed, 1.0);
            let cache = values(batch * n_ctx * d, 92, 1.0);
            let (ps, pc) = (dev.put_f32(&src), dev.put_f32(&cache));
            let p0 = dev.put_u32(&[pos0 as u32]);
            let len = src.len();
            let args = [
                Arg::Ptr(ps),
                Arg::Ptr(pc),
                u(d),
                u(n_new),
                Arg::Ptr(p0),
                u(n_ctx * d),
                u(len),
            ];
            dev.launch_1d("sotto_kv_write", flat(len), &args);
            let mut want = cache;
            for s in 0..batch {
                for i in 0..n_new {
                    let dst = &mut want[(s * n_ctx + pos0 + i) * d..][..d];
                    dst.copy_from_slice(&src[(s * n_new + i) * d..][..d]);
                }
            }
            (dev.get_f32(pc, batch * n_ctx * d), want)
        }
        Attention(kind) => attention(dev, kind, shape, seed),
        Scores => {
            let [rows, n_head, dh, n_keys] = shape[..] else {
                panic!("Scores shape: [rows, heads, dh, keys]")
            };
            let (d, head) = (n_head * dh, n_head - 1);
            let (q, k) = (
                values(rows * d, seed, 1.5),
                values(n_keys * d, seed + 1, 1.5),
            );
            let (pq, pk, po) = (dev.put_f32(&q), dev.put_f32(&k), dev.nans(rows * n_keys));
            let scale = 1.0 / (dh as f32).sqrt();
            let args = [
                Arg::Ptr(pq),
                Arg::Ptr(pk),
                Arg::Ptr(po),
                u(d),
                u(dh),
                u(head),
                u(n_keys),
                u(rows * n_keys),
                Arg::F32(scale),
            ];
            dev.launch_1d("sotto_attention_scores", flat(rows * n_keys), &args);
            let mut want = vec![0.0; rows * n_keys];
            for r in 0..rows {
                for j in 0..n_keys {
                    let (qr, kr) = (&q[r * d + head * dh..][..dh], &k[j * d + head * dh..][..dh]);
                    let dot: f64 = qr.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    want[r * n_keys + j] = (dot * scale as f64) as f32;
                }
            }
            (dev.get_f32(po, rows * n_keys), want)
        }
        Shortlist(_) => unreachable!("compared by check_shortlist"),
    }
}

/// [`Op::Shortlist`] on every device here, each record against [`shortlist_reference`].
fn check_shortlist(data: SlData, shape: &[usize]) {
    let [rows, n_vocab, text_end, top, n_pinned] = shape[..] else {
        panic!("Shortlist shape: [rows, n_vocab, text_end, top, pinned]")
    };
    let plan = launch::shortlist("shortlist", rows, n_vocab, text_end, top, n_pinned)
        .unwrap()
        .unwrap();
    // Sorted, distinct, spread over the text ids (all of them when n_pinned = text_end).
    let pinned: Vec<u32> = (0..n_pinned)
        .map(|j| (j * text_end / n_pinned) as u32)
        .collect();
    let logits = shortlist_logits(data, rows, n_vocab, text_end, &pinned, plan.chunk());
    let want = shortlist_reference(&logits, n_vocab, text_end, top, &pinned);
    let len = launch::shortlist_record_len(n_vocab, text_end, top, n_pinned);
    assert_eq!(want.len(), rows * len);
    let mut failed = Vec::new();
    for mut dev in device::devices() {
        let pl = dev.put_f32(&logits);
        let pp = dev.put_u32(&pinned);
        // No pinned ids: no bitmap either (a null one pins none).
        let bitmap = match n_pinned {
            0 => 0,
            _ => dev.put_u32(&plan::pinned_bitmap(text_end, &pinned)),
        };
        let scratch = launch::shortlist_scratch_bytes(rows, text_end, top);
        let (ps, po) = (dev.nans(scratch / 4), dev.nans(rows * len));
        let cfg = plan.chunks_config();
        let args = [
            Arg::Ptr(pl),
            u(n_vocab),
            u(text_end),
            Arg::Ptr(bitmap),
            Arg::U32(plan.per),
            Arg::U32(plan.top),
            Arg::Ptr(ps),
        ];
        dev.launch(
            "sotto_shortlist_chunks",
            cfg.grid_dim,
            cfg.block_dim,
            0,
            &args,
        );
        let cfg = plan.merge_config();
        let args = [
            Arg::Ptr(pl),
            u(n_vocab),
            u(text_end),
            Arg::Ptr(pp),
            u(n_pinned),
            Arg::U32(plan.chunks),
            Arg::U32(plan.top),
            Arg::Ptr(ps),
            Arg::Ptr(po),
        ];
        dev.launch(
            "sotto_shortlist_merge",
            cfg.grid_dim,
            cfg.block_dim,
            0,
            &args,
        );
        let got = dev.get_f32(po, rows * len);
        let wrong: Vec<String> = got
            .iter()
            .zip(&want)
            .enumerate()
            .filter(|&(i, (&g, &w))| match i % len {
                1 => {
                    let close = (g as f64 - w as f64).abs() <= 1e-5 * w as f64;
                    !close // NaN too
                }
                _ => g.to_bits() != w.to_bits(),
            })
            .map(|(i, (g, w))| format!("row {} word {}: {g} (want {w})", i / len, i % len))
            .collect();
        println!(
            "Shortlist({data:?}) {shape:?}: {} of {} words differ on {} ({} chunks of {})",
            wrong.len(),
            got.len(),
            dev.label(),
            plan.chunks,
            plan.chunk()
        );
        if !wrong.is_empty() {
            let first = wrong[..wrong.len().min(8)].join("; ");
            failed.push(format!("{} words on {}: {first}", wrong.len(), dev.label()));
        }
    }
    assert!(
        failed.is_empty(),
        "Shortlist({data:?}) {shape:?}: {}",
        failed.join("\n")
    );
}

/// The logits of a shortlist case (see [`SlData`]); `chunk`: the launch's chunk of ids.
fn shortlist_logits(
    data: SlData,
    rows: usize,
    n_vocab: usize,
    text_end: usize,
    pinned: &[u32],
    chunk: usize,
) -> Vec<f32> {
    let seed = (rows * n_vocab + text_end) as u64;
    let mut x = values(rows * n_vocab, seed, 8.0);
    let (nan, neg) = (f32::NAN, f32::NEG_INFINITY);
    for (r, row) in x.chunks_exact_mut(n_vocab).enumerate() {
        match data {
            SlData::Spread => {}
            SlData::Ties => {
                // Levels from -4 to 4 (-9 to -1 in the third row, where the lead is
                // ±0: -0 and +0 tie).
                let low = if r == 2 { 5.0 } else { 0.0 };
                for v in row.iter_mut() {
                    *v = (*v * 0.5).round() - low;
                }
                let lead = |id: usize| match r {
                    2 if id.is_multiple_of(2) => -0.0,
                    2 => 0.0,
                    _ => 9.0,
                };
                if r == 0 {
                    row.fill(1.5);
                } else {
                    // Ties for the lead around each chunk boundary, at the end of the text
                    // ids, and at the pinned ids (the first of them 0, the lowest).
                    let edges = (chunk..text_end).step_by(chunk).chain([text_end]);
                    for b in edges {
                        let ids = b.saturating_sub(3)..(b + 3).min(text_end);
                        for (v, id) in row[ids.clone()].iter_mut().zip(ids) {
                            *v = lead(id);
                        }
                    }
                    for &p in pinned {
                        row[p as usize] = lead(p as usize);
                    }
                }
            }
            SlData::NonFinite => {
                for (id, v) in row.iter_mut().enumerate() {
                    match (id * 7 + r) % 11 {
                        0 | 5 => *v = nan,
                        3 => *v = neg,
                        _ => {}
                    }
                }
                let text = &mut row[..text_end];
                match r {
                    0 => text.iter_mut().enumerate().for_each(|(i, v)| {
                        *v = if i % 3 == 0 { nan } else { neg };
                    }),
                    1 => {
                        text.fill(neg);
                        for (k, i) in [text_end / 3, 2, text_end - 1].into_iter().enumerate() {
                            text[i] = k as f32 - 1.0;
                        }
                    }
                    _ => {}
                }
            }
        }
        if !pinned.is_empty() {
            row[pinned[r % pinned.len()] as usize] = 50.0;
        }
    }
    x
}

/// The shortlist records of `logits` (rows of `n_vocab`), plainly: see `Dev::shortlist`.
/// The sum in f64.
fn shortlist_reference(
    logits: &[f32],
    n_vocab: usize,
    text_end: usize,
    top: usize,
    pinned: &[u32],
) -> Vec<f32> {
    let mut is_pinned = vec![false; text_end];
    pinned.iter().for_each(|&p| is_pinned[p as usize] = true);
    let mut out = Vec::new();
    for row in logits.chunks_exact(n_vocab) {
        let mut rest: Vec<(f32, usize)> = (0..text_end)
            .filter(|&i| !is_pinned[i] && !row[i].is_nan() && row[i] != f32::NEG_INFINITY)
            .map(|i| (row[i], i))
            .collect();
        rest.sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap().then(a.1.cmp(&b.1)));
        // The first candidate's logit: of -0 and +0 tied, the lower id's.
        let max = rest.first().map_or(f32::NEG_INFINITY, |&(v, _)| v);
        let sum: f64 = match max {
            f32::NEG_INFINITY => 0.0,
            _ => rest
                .iter()
                .map(|&(v, _)| (v as f64 - max as f64).exp())
                .sum(),
        };
        rest.truncate(top);
        out.extend([max, sum as f32]);
        out.extend((0..top).map(|j| rest.get(j).map_or(-1.0, |&(_, i)| i as f32)));
        out.extend((0..top).map(|j| rest.get(j).map_or(f32::NEG_INFINITY, |&(v, _)| v)));
        out.extend(pinned.iter().map(|&p| row[p as usize]));
        out.extend(&row[text_end..]);
    }
    out
}

#[test]
fn shortlist_reference_orders_ties_by_id_and_skips_what_it_must() {
    let (nan, neg) = (f32::NAN, f32::NEG_INFINITY);
    // Ids 0..6 text (2 pinned), 6..8 the tail.
    let row = [1.0, 3.0, 9.0, nan, 3.0, neg, nan, 4.0];
    let got = shortlist_reference(&row, 8, 6, 4, &[2]);
    let sum = 2.0 + (-2.0f64).exp();
    let want = [
        3.0, sum as f32, 1.0, 4.0, 0.0, -1.0, 3.0, 3.0, 1.0, neg, 9.0, nan, 4.0,
    ];
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (i == 1 && (g - w).abs() < 1e-6),
            "{i}: {g} {w}"
        );
    }
}

/// Attention cases: see [`Attn`]. Shape: [batch, n_new, heads, dh, keys]
fn attention(dev: &mut dyn Device, kind: Attn, shape: &[usize], seed: u64) -> (Vec<f32>, Vec<f32>) {
    let [batch, n_new, n_head, dh, n_keys] = shape[..] else {
        panic!("Attention shape: [batch, n_new, heads, dh, keys]")
    };
    let (d, rows) = (n_head * dh, batch * n_new);
    let per_sequence = matches!(
        kind,
        Causal(_) | SplitCausal(_) | Reordered(_) | SplitReordered(_)
    );
    // The sequence whose rows hold sequence s's key j: its own, or a mix of the batch.
    let reordered = matches!(kind, Reordered(_) | SplitReordered(_));
    let slot = |s: usize, j: usize| match reordered {
        true => (s + 3 * j + j / 5) % batch,
        false => s,
    };
    let table: Vec<u32> = (0..batch * n_keys)
        .map(|i| slot(i / n_keys, i % n_keys) as u32)
        .collect();
    let pt = if reordered { dev.put_u32(&table) } else { 0 };
    let kv_rows = if per_sequence { batch * n_keys } else { n_keys };
    let q = values(rows * d, seed, 1.5);
    let k = values(kv_rows * d, seed + 1, 1.5);
    let v = values(kv_rows * d, seed + 2, 1.0);
    let (pq, pk, pv, po) = (
        dev.put_f32(&q),
        dev.put_f32(&k),
        dev.put_f32(&v),
        dev.nans(rows * d),
    );
    let scale = 1.0 / (dh as f32).sqrt();
    let ptrs = [pq, pk, pv, po].map(Arg::Ptr);
    let (mut half_out, mut fused_out) = (None, None);
    match kind {
        Flash | Mma(_) => {
            let (name, l) = match kind {
                Mma(_) => (
                    "sotto_flash_attention_mma",
                    plan::flash_attention_mma(rows, n_head, dh, n_keys),
                ),
                _ => (
                    "sotto_flash_attention",
                    plan::flash_attention(rows, n_head, dh, n_keys),
                ),
            };
            let l = l.expect("a flash shape");
            let rest = [u(rows), u(n_keys), u(d), Arg::F32(scale)];
            let mut args = [&ptrs[..], &rest].concat();
            if let Mma(half) = kind {
                half_out = half.then(|| dev.put_u16(&vec![0x7e00; rows * d]));
                args.push(Arg::Ptr(half_out.unwrap_or(0)));
            }
            dev.launch(name, (l.rows, l.heads, 1), (l.block, 1, 1), 0, &args);
        }
        Split | SplitCausal(_) | SplitReordered(_) => {
            let p = plan::attention_split(rows, n_head, dh, n_keys).expect("a split shape");
            let part = dev.nans(p.part_len(dh));
            let (stride, pos) = match kind {
                SplitCausal(p) | SplitReordered(p) => (n_keys * d, dev.put_u32(&[p as u32])),
                _ => (0, 0),
            };
            let rest = [
                u(d),
                u(dh),
                u(n_keys),
                Arg::U32(p.chunk),
                Arg::F32(scale),
                u(stride),
                u(n_new),
                Arg::Ptr(pos),
                Arg::Ptr(pt),
            ];
            let c = p.split_config();
            // The split launch, merging into `merged` with the counters `done` (0, 0: not).
            let split = |dev: &mut dyn Device, done: u64, merged: u64| {
                let tail = [Arg::Ptr(done), Arg::Ptr(merged)];
                let args = [&[pq, pk, pv, part].map(Arg::Ptr)[..], &rest, &tail].concat();
                let (grid, block, shared) = (c.grid_dim, c.block_dim, c.shared_mem_bytes);
                dev.launch("sotto_attention_split", grid, block, shared, &args);
            };
            // The merge in the split launch: a counter per (row, head), to be left at zero.
            let counters = (p.rows * p.heads) as usize;
            let (done, fused) = (dev.put_u32(&vec![0; counters]), dev.nans(rows * d));
            split(dev, done, fused);
            let left = dev.get_u32(done, counters);
            assert!(left.iter().all(|&c| c == 0), "counters left at {left:?}");
            fused_out = Some(fused);
            split(dev, 0, 0);
            let m = p.merge_config(dh);
            let args = [
                Arg::Ptr(part),
                Arg::Ptr(po),
                u(d),
                u(dh),
                Arg::U32(p.splits),
            ];
            dev.launch("sotto_attention_merge", m.grid_dim, m.block_dim, 0, &args);
        }
        Causal(_) | Reordered(_) | Shared => {
            let q_pos0 = match kind {
                Causal(p) | Reordered(p) => p as u32,
                _ => 0,
            };
            let pp = dev.put_u32(&[q_pos0]);
            let stride = if per_sequence { n_keys * d } else { 0 };
            let rest = [
                u(d),
                u(dh),
                u(n_new),
                u(stride),
                u(n_keys),
                Arg::I32(per_sequence as i32),
                Arg::Ptr(pp),
                Arg::Ptr(pt),
                Arg::F32(scale),
            ];
            let args = [&ptrs[..], &rest].concat();
            let l = plan::attention(rows, n_head, dh, n_keys).unwrap();
            let grid = (l.rows, l.heads, 1);
            dev.launch(
                "sotto_attention",
                grid,
                (l.block, 1, 1),
                l.shared_bytes,
                &args,
            );
        }
    }
    // softmax(q kᵀ / √dh) v per head, in f64.
    let mut want = vec![0.0; rows * d];
    for r in 0..rows {
        let (s, i) = (r / n_new, r % n_new);
        let base = |j: usize| match per_sequence {
            true => (slot(s, j) * n_keys + j) * d,
            false => j * d,
        };
        let nk = match kind {
            Causal(p) | SplitCausal(p) | Reordered(p) | SplitReordered(p) => {
                (p + i + 1).min(n_keys)
            }
            _ => n_keys,
        };
        for h in 0..n_head {
            let qr = &q[r * d + h * dh..][..dh];
            let sc: Vec<f64> = (0..nk)
                .map(|j| {
                    let kr = &k[base(j) + h * dh..][..dh];
                    let dot: f64 = qr.iter().zip(kr).map(|(&a, &b)| a as f64 * b as f64).sum();
                    dot * scale as f64
                })
                .collect();
            let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = w.iter().sum();
            for c in 0..dh {
                let acc: f64 = (0..nk).map(|j| w[j] * v[base(j) + h * dh + c] as f64).sum();
                want[r * d + h * dh + c] = (acc / z) as f32;
            }
        }
    }
    if let Some(ph) = half_out {
        let got = dev.get_u16(ph, rows * d);
        let got = got.iter().map(|&h| f16::from_bits(h).to_f32()).collect();
        return (
            got,
            want.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        );
    }
    let got = dev.get_f32(po, rows * d);
    if let Some(fused) = fused_out {
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let merged = dev.get_f32(fused, rows * d);
        assert!(
            bits(&merged) == bits(&got),
            "merged in the split launch: nmse {:.3e} from the merge launch's",
            nmse(&merged, &got)
        );
    }
    (got, want)
}

/// A mat-vec case's input: x on the device and as the product's reference reads it, the
/// kernels' norm arguments, and the layer norm's output on the device (0 for none). With
/// `norm`, the reference reads x's layer norm as the layer-norm launch computes it (so that
/// the CPU's quantized products see the same rows), and the arguments name that norm's
/// gamma, beta and eps.
fn with_norm(
    dev: &mut dyn Device,
    x: Vec<f32>,
    m: usize,
    n_in: usize,
    norm: bool,
) -> (u64, Vec<f32>, Vec<Arg>, u64) {
    let px = dev.put_f32(&x);
    if !norm {
        return (px, x, with_norm_none(), 0);
    }
    let (gamma, beta) = gamma_beta(n_in);
    let (pg, pb, po) = (dev.put_f32(&gamma), dev.put_f32(&beta), dev.nans(m * n_in));
    let l = launch::rows("t", m, n_in).unwrap().unwrap();
    let args = [
        Arg::Ptr(px),
        Arg::Ptr(0),
        u(0),
        Arg::Ptr(pg),
        Arg::Ptr(pb),
        Arg::Ptr(po),
        Arg::Ptr(0),
        u(n_in),
        Arg::F32(1e-5),
    ];
    dev.launch_1d("sotto_layer_norm", l, &args);
    let normed = dev.get_f32(po, m * n_in);
    (
        px,
        normed,
        vec![Arg::Ptr(pg), Arg::Ptr(pb), Arg::F32(1e-5)],
        po,
    )
}

/// The mat-vec kernels' norm arguments for no norm.
fn with_norm_none() -> Vec<Arg> {
    vec![Arg::Ptr(0), Arg::Ptr(0), Arg::F32(0.0)]
}

/// A mat-vec launch's dynamic shared memory: its q8 codes with `MMV_Q8`, its rows' norm
/// with `MMV_NORM`.
fn mmv_shared(flags: i32, m: usize, n_in: usize) -> u32 {
    let (q8, norm) = (flags & MMV_Q8 != 0, flags & MMV_NORM != 0);
    launch::mul_mat_vec_shared(m, n_in, q8, norm).unwrap()
}

#[test]
fn nmse_catches_a_wrong_result() {
    let r = values(1000, 1, 1.0);
    assert_eq!(nmse(&r, &r), 0.0);
    let mut wrong = r.clone();
    wrong[500] += 0.1;
    assert!(nmse(&wrong, &r) > max_nmse(Add));
    let halved: Vec<f32> = r.iter().map(|v| v * 0.5).collect();
    assert!((nmse(&halved, &r) - 0.25).abs() < 1e-6);
}

#[test]
fn values_are_deterministic_and_spread() {
    let a = values(4096, 5, 4.0);
    assert_eq!(a, values(4096, 5, 4.0));
    assert_ne!(a, values(4096, 6, 4.0));
    assert!(a.iter().all(|v| (-4.0..4.0).contains(v)));
    let mean = a.iter().sum::<f32>() / a.len() as f32;
    assert!(mean.abs() < 0.2, "mean {mean}");
}

#[test]
fn probe_lists_devices() {
    match sotto_cuda::probe() {
        Ok(devs) => devs.iter().for_each(|d| println!("{d}")),
        Err(e) => {
            println!("probe: {e}");
            if std::env::var_os("SOTTO_REQUIRE_CUDA").is_some_and(|v| v != "0") {
                panic!("SOTTO_REQUIRE_CUDA is set, but probing failed: {e}");
            }
        }
    }
}

/// `CudaBackend`'s own ops (the checked, typed API) on the GPU, and their shape errors.
#[test]
fn backend_ops_and_bad_shapes_on_the_gpu() {
    let Some(gpu) = device::gpu() else {
        return;
    };
    let x = values(1000, 1, 2.0);
    let mut a = gpu.upload(&x).unwrap();
    gpu.add(&mut a, &gpu.upload(&x).unwrap()).unwrap();
    gpu.gelu(&mut a).unwrap();
    let mut want: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
    cpu::gelu(Isa::Scalar, &mut want);
    assert!(nmse(&gpu.download(&a).unwrap(), &want) < 1e-10);

    let mut a = gpu.upload(&[1.0f32; 8]).unwrap();
    let b = gpu.upload(&[1.0f32; 7]).unwrap();
    assert!(matches!(gpu.add(&mut a, &b), Err(CudaError::Shape { .. })));
    assert!(matches!(
        gpu.softmax_rows(&mut a, 3),
        Err(CudaError::Shape { .. })
    ));
    let q = gpu.upload(&[0u8; 33]).unwrap();
    let mut out = gpu.zeros::<f32>(32).unwrap();
    assert!(gpu.dequantize(QuantType::Q8_0, &q, &mut out).is_err());
    assert!(matches!(
        gpu.dequantize(QuantType::Q8_1, &q, &mut out),
        Err(CudaError::Unsupported { .. })
    ));
}
