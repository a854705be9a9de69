//! sotto's CUDA kernels, as CUDA C compiled by NVRTC at run time.
//!
//! One translation unit, no headers (NVRTC installs differ in which headers they ship):
//! f16 is converted with the PTX `cvt` instruction. Every kernel matches a CPU reference:
//! `sotto_compute::kernels` scalar paths (layer norm, GELU with erf, softmax, add, f16) and
//! `sotto_quant::dequantize_row` (ggml's q4_0, q4_1, q5_0, q5_1 and q8_0 blocks). Element counts are
//! `unsigned int`: [`crate::launch`] refuses larger shapes before a launch.

use sotto_quant::QuantType;

/// The kernels' entry points, in the order [`SOURCE`] defines them.
pub const NAMES: [&str; 48] = [
    "sotto_add_f32",
    "sotto_gelu_f32",
    "sotto_layer_norm",
    "sotto_softmax_rows_f32",
    "sotto_f16_to_f32",
    "sotto_dequantize_q4_0",
    "sotto_dequantize_q4_1",
    "sotto_dequantize_q5_0",
    "sotto_dequantize_q5_1",
    "sotto_dequantize_q8_0",
    "sotto_dequantize_half_q4_0",
    "sotto_dequantize_half_q4_1",
    "sotto_dequantize_half_q5_0",
    "sotto_dequantize_half_q5_1",
    "sotto_dequantize_half_q8_0",
    "sotto_mul_mat_vec_f16",
    "sotto_mul_mat_vec3_f16",
    "sotto_mul_mat_vec_q4_0",
    "sotto_mul_mat_vec_q4_1",
    "sotto_mul_mat_vec_q5_0",
    "sotto_mul_mat_vec_q5_1",
    "sotto_mul_mat_vec_q8_0",
    "sotto_mul_mat_vec3_q4_0",
    "sotto_mul_mat_vec3_q4_1",
    "sotto_mul_mat_vec3_q5_0",
    "sotto_mul_mat_vec3_q5_1",
    "sotto_mul_mat_vec3_q8_0",
    "sotto_f32_to_f16",
    "sotto_round_f16",
    "sotto_bias_act",
    "sotto_split_bias",
    "sotto_im2col",
    "sotto_embed_f16",
    "sotto_embed_f32",
    "sotto_embed_q4_0",
    "sotto_embed_q4_1",
    "sotto_embed_q5_0",
    "sotto_embed_q5_1",
    "sotto_embed_q8_0",
    "sotto_kv_write",
    "sotto_shortlist_chunks",
    "sotto_shortlist_merge",
    "sotto_attention",
    "sotto_attention_split",
    "sotto_attention_merge",
    "sotto_attention_scores",
    "sotto_flash_attention",
    "sotto_flash_attention_mma",
];

/// Which kernel of a family (`sotto_dequantize`, `sotto_dequantize_half`,
/// `sotto_mul_mat_vec`, `sotto_embed`) handles the weight type `t`; `None` for q8_1, an
/// activation type.
pub fn for_type(family: &str, t: QuantType) -> Option<&'static str> {
    NAMES
        .iter()
        .copied()
        .find(|n| n.strip_prefix(family).and_then(|n| n.strip_prefix('_')) == Some(t.name()))
}

/// Activation rows per block row of a [`for_type`]`("sotto_mul_mat_vec", ..)` launch
/// (`SOTTO_MMV_ROWS`). A decoder step has at most this many; more rows take cuBLAS at f16,
/// or a grid of row chunks ([`crate::launch::mul_mat_vec_chunks`]).
pub const MMV_ROWS: usize = 8;
/// Threads per block of the `sotto_mul_mat_vec` kernels: one warp per output.
pub const MMV_BLOCK: u32 = 128;
/// Epilogue flags of the `sotto_mul_mat_vec` kernels (their last parameter): add the bias
/// (the parameter before `n_in`), then GELU, then add the result onto `y` instead of
/// storing it.
pub const MMV_BIAS: i32 = 1;
pub const MMV_GELU: i32 = 2;
pub const MMV_ADD: i32 = 4;
/// With quantized weights: each input row quantized to q8_0 (q8_1 for q4_1 and q5_1)
/// blocks and the block sums added in order with fused multiply-adds, as the CPU's
/// quantized products (`sotto_quant::tiled_matmul`) do, for the same sums bit for bit.
pub const MMV_Q8: i32 = 8;
/// The product reads the layer norm of its input rows (the kernels' gamma, beta and eps),
/// which each block computes as `sotto_layer_norm` does, bit for bit
/// ([`crate::launch::mul_mat_vec_shared`] sizes its shared memory).
pub const MMV_NORM: i32 = 16;

/// Threads per block of `sotto_attention` (a power of two, at least the head width): wide,
/// because a decoder step launches only rows × heads blocks of it.
pub const ATTENTION_BLOCK: u32 = 1024;
/// `sotto_flash_attention`: query rows per block (8 threads each), and the head width it
/// takes (every Whisper size has 64).
pub const FLASH_ROWS: u32 = 16;
pub const FLASH_DH: usize = 64;
/// `sotto_flash_attention_mma`: query rows per block (16 per warp of its 4), its threads
/// (which its register loads are unrolled for), and the compute capability its
/// tensor-core instructions need.
pub const MMA_ROWS: u32 = 64;
pub const MMA_BLOCK: u32 = 128;
pub const MMA_MIN_CC: (i32, i32) = (8, 0);

/// `sotto_attention_split`: threads per block, the most keys one block scores (its chunk
/// of a (row, head)'s keys; more keys take more blocks), and the widest head it takes.
/// Small chunks on purpose: a step's few query rows must still fill the GPU.
pub const SPLIT_BLOCK: u32 = 128;
pub const SPLIT_KEYS: usize = 64;
pub const SPLIT_DH: usize = 128;
// The softmax of a chunk is one warp's, two keys a lane; the dims four a lane.
const _: () = assert!(SPLIT_KEYS <= 64 && SPLIT_DH <= 128);

/// The shortlist kernels (`sotto_shortlist_chunks`, then `sotto_shortlist_merge`): the most
/// top ids a record takes, threads per block of both, and the most values a thread of
/// `sotto_shortlist_chunks` holds (in registers; a chunk is `SHORTLIST_BLOCK · per` ids,
/// see [`crate::launch::shortlist`]). The merge gives each chunk of a row a thread, so a
/// row has at most `SHORTLIST_BLOCK` chunks.
pub const SHORTLIST_MAX_TOP: usize = 64;
pub const SHORTLIST_BLOCK: u32 = 256;
pub const SHORTLIST_PER: u32 = 8;
// The spill test (backend.rs) sizes the register check of kernels it does not name at the
// element-wise block.
const _: () = assert!(SHORTLIST_BLOCK == crate::launch::ELEMENTWISE_BLOCK);

/// Values in one ggml block.
pub const QK: usize = 32;

/// The device-only helpers: f16 conversions by PTX `cvt`. Host emulations of the kernels
/// (sotto-cuda's tests) put their own definitions of these two in its place.
macro_rules! device_prelude {
    () => {
        r#"
__device__ __forceinline__ float sotto_half_to_float(unsigned short h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short sotto_float_to_half(float f) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

// Programmatic dependent launch (sm_90 and later): a kernel launched with it
// (`Dev::pdl`) may be scheduled while the one before it in the stream still runs. Every
// kernel calls this first: it waits for the kernel before to finish and its writes to
// show, then lets the next one be scheduled, so that one's launch overlaps this one's
// work. Without the launch attribute (or below sm_90) it does nothing.
__device__ __forceinline__ void sotto_pdl_start() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for the 128-byte line holding `p`, for a kernel to call on memory the kernel
// before it does not write (weights, an encoded window's keys) before sotto_pdl_start: under
// a programmatic dependent launch these reads then overlap the kernel before, and the
// kernel's own loads find the lines in L2. Only a hint: every write lands in L2, so a
// prefetched line is never stale. sm_90 and later, where launches overlap.
__device__ __forceinline__ void sotto_prefetch_line(const void* p) {
#if __CUDA_ARCH__ >= 900
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// sotto_prefetch_line for the `bytes` from `p`, the warp's lanes taking its lines in turn.
__device__ __forceinline__ void sotto_prefetch_l2(const void* p, size_t bytes) {
    size_t at = (size_t)p, end = at + bytes;
    for (at = (at & ~(size_t)127) + (size_t)(threadIdx.x % 32) * 128; at < end; at += 32 * 128)
        sotto_prefetch_line((const void*)at);
}

// Tensor cores (sm_80 and later): one warp's d += a·b for a 16×16 f16 tile a (row-major),
// a 16×8 f16 tile b (column-major) and a 16×8 f32 tile d, in PTX's fragment layout: with
// g = lane / 4 and c = 2·(lane % 4), a[0] holds a(g, c..c+1), a[1] a(g+8, c..), a[2]
// a(g, c+8..), a[3] a(g+8, c+8..); b[0] b(c..c+1, g), b[1] b(c+8.., g); d[0..1] d(g,
// c..c+1), d[2..3] d(g+8, c..). Each 32-bit register packs two f16, the lower index in
// the low half. Kernels that use it compile to nothing below sm_80 (the host never
// launches them there).
#if __CUDA_ARCH__ >= 800
#define SOTTO_MMA 1
__device__ __forceinline__ void sotto_mma_16816(float* d, const unsigned int* a,
        const unsigned int* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
"#
    };
}

/// The kernels, in plain CUDA C over the helpers of [`DEVICE_PRELUDE`]. Row kernels take
/// one block per row and a power-of-two block size with `blockDim.x * 4` bytes of dynamic
/// shared memory.
macro_rules! kernel_source {
    () => {
        r#"

// Sum over the block; every thread gets the result. `sh` holds blockDim.x floats.
__device__ float sotto_block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float sotto_block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// a += b
extern "C" __global__ void sotto_add_f32(float* a, const float* b, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}

// Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as Whisper uses.
extern "C" __global__ void sotto_gelu_f32(float* x, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// A layer norm's arithmetic, shared by sotto_layer_norm and the mat-vec kernels that
// normalise their own input rows (SOTTO_MMV_NORM), so that both give the same values bit
// for bit: each operation rounded as written (no contraction left to the compiler).
__device__ __forceinline__ float sotto_ln_square(float acc, float v, float mean) {
    float d = __fsub_rn(v, mean);
    return fmaf(d, d, acc);
}

// 1 / sqrt(variance + eps) from the sum of squared deviations over n columns.
__device__ __forceinline__ float sotto_ln_inv(float squares, unsigned int n, float eps) {
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(squares, (float)n), eps)));
}

__device__ __forceinline__ float sotto_ln_value(float v, float mean, float inv, float g,
        float b) {
    return fmaf(__fmul_rn(__fsub_rn(v, mean), inv), g, b);
}

// Layer norm of each row, one block per row: out[r] = (x[r] - mean) / sqrt(var + eps)
// * gamma + beta, written as f32 to `out` and as f16 to `out_half`, each where not null.
// With `add` not null, x[r] += add[r·add_stride..] first and is stored (the residual
// stream takes a deferred bias, stride 0, or the positions, stride n_cols): the encoder
// folds those adds, and the narrowing of the next product's input, into this launch.
extern "C" __global__ void sotto_layer_norm(float* x, const float* add,
        unsigned int add_stride, const float* gamma, const float* beta, float* out,
        unsigned short* out_half, unsigned int n_cols, float eps) {
    sotto_pdl_start();
    extern __shared__ float sh[];
    float* row = x + (size_t)blockIdx.x * n_cols;
    const float* a = add ? add + (size_t)blockIdx.x * add_stride : 0;
    float s = 0.0f;
    // Each thread adds, stores and later rereads only its own columns.
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        float v = row[j];
        if (a) {
            v = __fadd_rn(v, a[j]);
            row[j] = v;
        }
        s = __fadd_rn(s, v);
    }
    float mean = __fdiv_rn(sotto_block_sum(s, sh), (float)n_cols);
    float v = 0.0f;
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x)
        v = sotto_ln_square(v, row[j], mean);
    float inv = sotto_ln_inv(sotto_block_sum(v, sh), n_cols, eps);
    float* o = out ? out + (size_t)blockIdx.x * n_cols : 0;
    unsigned short* oh = out_half ? out_half + (size_t)blockIdx.x * n_cols : 0;
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        float y = sotto_ln_value(row[j], mean, inv, gamma[j], beta[j]);
        if (o) o[j] = y;
        if (oh) oh[j] = sotto_float_to_half(y);
    }
}

// The pairwise sum of red[0..width) (a power of two) as sotto_block_sum adds a block of
// `width` threads' values, by however many threads this block has; every thread gets it.
__device__ float sotto_tree_sum(float* red, unsigned int width) {
    __syncthreads();
    for (unsigned int s = width / 2; s > 0; s >>= 1) {
        for (unsigned int t = threadIdx.x; t < s; t += blockDim.x)
            red[t] = __fadd_rn(red[t], red[t + s]);
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

// Layer norm of m rows of n (x [m, n]) into xs [m, n], each value the one sotto_layer_norm
// computes for the row bit for bit: its launch gives rows of n a block of `width` threads
// (launch::rows: the next power of two of n, from 32 to 1024), whose sums this block adds
// in the same order, whatever its own size. red: `width` floats. Every thread of the
// block must call it.
__device__ void sotto_norm_rows(const float* x, unsigned int m, unsigned int n,
        const float* gamma, const float* beta, float eps, float* xs, float* red) {
    unsigned int width = 32;
    while (width < n && width < 1024) width *= 2;
    for (unsigned int r = 0; r < m; ++r) {
        const float* row = x + (size_t)r * n;
        for (unsigned int t = threadIdx.x; t < width; t += blockDim.x) {
            float s = 0.0f;
            for (unsigned int j = t; j < n; j += width) s = __fadd_rn(s, row[j]);
            red[t] = s;
        }
        float mean = __fdiv_rn(sotto_tree_sum(red, width), (float)n);
        for (unsigned int t = threadIdx.x; t < width; t += blockDim.x) {
            float v = 0.0f;
            for (unsigned int j = t; j < n; j += width) v = sotto_ln_square(v, row[j], mean);
            red[t] = v;
        }
        float inv = sotto_ln_inv(sotto_tree_sum(red, width), n, eps);
        for (unsigned int j = threadIdx.x; j < n; j += blockDim.x)
            xs[(size_t)r * n + j] = sotto_ln_value(row[j], mean, inv, gamma[j], beta[j]);
    }
    __syncthreads();
}

// In-place softmax of each row, one block per row.
extern "C" __global__ void sotto_softmax_rows_f32(float* x, unsigned int n_cols) {
    sotto_pdl_start();
    extern __shared__ float sh[];
    float* row = x + (size_t)blockIdx.x * n_cols;
    float m = __int_as_float(0xff800000);  // -inf; no math.h under NVRTC
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) m = fmaxf(m, row[j]);
    m = sotto_block_max(m, sh);
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        float e = expf(row[j] - m);
        row[j] = e;
        s += e;
    }
    float inv = 1.0f / sotto_block_sum(s, sh);
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) row[j] *= inv;
}

extern "C" __global__ void sotto_f16_to_f32(const unsigned short* src, float* dst, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = sotto_half_to_float(src[i]);
}

// ggml's block types by their template code: 0 q4_0, 1 q4_1, 2 q5_0, 3 q5_1, 8 q8_0.
// Every block holds 32 values behind an f16 scale d (and an f16 minimum m for the _1 types).
template <int T> __device__ __forceinline__ unsigned int sotto_qbytes() {
    return T == 0 ? 18 : T == 1 ? 20 : T == 2 ? 22 : T == 3 ? 24 : 34;
}

__device__ __forceinline__ float sotto_f16_at(const unsigned char* b, unsigned int o) {
    return sotto_half_to_float((unsigned short)(b[o] | (b[o + 1] << 8)));
}

// Value j of block b, as ggml dequantizes it: d·q for q8_0; d·(q − 8) for q4_0 and
// d·(q − 16) for q5_0; d·q + m for q4_1 and q5_1. The 4-bit codes of values j and j + 16
// share byte j of qs (low and high nibble); q5 types take bit j of the u32 qh as bit 4.
template <int T> __device__ __forceinline__ float sotto_qvalue(const unsigned char* b,
        unsigned int j) {
    float d = sotto_f16_at(b, 0);
    if (T == 8) return d * (float)(signed char)b[2 + j];
    unsigned int qho = T == 2 ? 2 : 4;
    unsigned int qh = (T == 2 || T == 3)
        ? (b[qho] | (b[qho + 1] << 8) | (b[qho + 2] << 16) | ((unsigned int)b[qho + 3] << 24))
        : 0u;
    const unsigned char* qs = b + (T == 0 ? 2 : T == 1 ? 4 : T == 2 ? 6 : 8);
    int q = (j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4)) | (int)(((qh >> j) & 1u) << 4);
    // No "+ 0" for the _0 types: it would turn ggml's −0 (code 0, negative d) into +0.
    if (T == 1 || T == 3) return (float)q * d + sotto_f16_at(b, 2);
    return (float)(q - (T == 0 ? 8 : 16)) * d;
}

// y[i] = value i of the blocks q, one thread per value. Shape: q [n / 32 blocks]; y [n]
template <int T> __device__ __forceinline__ void sotto_dequantize(const unsigned char* q,
        float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sotto_qvalue<T>(q + (size_t)(i / 32) * sotto_qbytes<T>(), i % 32);
}

// As sotto_dequantize, to f16: a quantized weight for an f16 cuBLAS product.
template <int T> __device__ __forceinline__ void sotto_dequantize_half(const unsigned char* q,
        unsigned short* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = sotto_float_to_half(sotto_qvalue<T>(q + (size_t)(i / 32) * sotto_qbytes<T>(), i % 32));
}

extern "C" __global__ void sotto_dequantize_q4_0(const unsigned char* q, float* y, unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize<0>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_q4_1(const unsigned char* q, float* y, unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize<1>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_q5_0(const unsigned char* q, float* y, unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize<2>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_q5_1(const unsigned char* q, float* y, unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize<3>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_q8_0(const unsigned char* q, float* y, unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize<8>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_half_q4_0(const unsigned char* q, unsigned short* y,
        unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize_half<0>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_half_q4_1(const unsigned char* q, unsigned short* y,
        unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize_half<1>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_half_q5_0(const unsigned char* q, unsigned short* y,
        unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize_half<2>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_half_q5_1(const unsigned char* q, unsigned short* y,
        unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize_half<3>(q, y, n);
}
extern "C" __global__ void sotto_dequantize_half_q8_0(const unsigned char* q, unsigned short* y,
        unsigned int n) {
    sotto_pdl_start();
    sotto_dequantize_half<8>(q, y, n);
}

__device__ __forceinline__ float sotto_gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// y[r, o] = Σ_k x[r, k] · W[o, k] for SOTTO_MMV_ROWS rows of x per block row of the grid
// (a decoder step: one row per beam, one block row), with W [n_out, n_in] in ggml blocks of
// type T, dequantized on the fly.
// One warp per output o (blockDim.x / 32 outputs per block); lane l takes blocks l, l + 32, …
// of W's row and sums them against every row of x; the warp then adds its lanes' sums.
// With SOTTO_MMV_Q8 the rows are quantized and the blocks summed as the CPU does instead
// (sotto_mmv_q8). The epilogue (flags, in this order): + b[o] (SOTTO_MMV_BIAS), GELU
// (SOTTO_MMV_GELU), then added onto y instead of stored (SOTTO_MMV_ADD: the residual
// stream), each as the separate bias_act and add kernels compute it, so a decoder step
// needs no launch for them. With SOTTO_MMV_NORM the product reads the layer norm of x
// (gamma, beta, eps) instead, which each block computes for itself (sotto_mmv_input), so
// a decoder step needs no launch for the norm either.
// Shape: w [n_out, n_in / 32 blocks]; x [m, n_in]; y [m, n_out]; b [n_out]; gamma, beta [n_in]
#define SOTTO_MMV_ROWS 8
#define SOTTO_MMV_BIAS 1
#define SOTTO_MMV_GELU 2
#define SOTTO_MMV_ADD 4
#define SOTTO_MMV_Q8 8
#define SOTTO_MMV_NORM 16

// Where output row r goes: row r of y ([m, n_out]) when pos0 is null; else the KV-cache
// slot of row r, as sotto_kv_write puts it: sequence r / n_new at position
// *pos0 + r % n_new, sequences seq_stride elements apart.
struct SottoMmvRows {
    const unsigned int* pos0;
    unsigned int n_new, seq_stride;
};

__device__ __forceinline__ size_t sotto_mmv_row(SottoMmvRows rows, unsigned int r,
        unsigned int n_out) {
    if (!rows.pos0) return (size_t)r * n_out;
    return (size_t)(r / rows.n_new) * rows.seq_stride
        + (size_t)(*rows.pos0 + r % rows.n_new) * n_out;
}

// Adds each row's sums over the warp's lanes (unless `summed`: every lane already holds
// them); lane 0 applies the epilogue and writes y[r0 + r, o]. Every lane of the warp takes
// part in the shuffles, live output or not.
__device__ __forceinline__ void sotto_mmv_store(const float* acc, float* y, const float* b,
        unsigned int o, unsigned int n_out, unsigned int m, int flags, SottoMmvRows rows,
        unsigned int r0, bool summed) {
#pragma unroll
    for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
        if (r < (int)m) {
            float s = acc[r];
            if (!summed)
                for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (threadIdx.x % 32 == 0 && o < n_out) {
                float* at = y + sotto_mmv_row(rows, r0 + (unsigned int)r, n_out) + o;
                if (flags & SOTTO_MMV_BIAS) s = __fadd_rn(s, b[o]);
                if (flags & SOTTO_MMV_GELU) s = sotto_gelu(s);
                *at = (flags & SOTTO_MMV_ADD) ? __fadd_rn(*at, s) : s;
            }
        }
    }
}

// One block of 32 input values quantized for sotto_mmv_q8 (sotto_q8_block's codes, scale
// and q8_1 sum), 11 words so that lanes reading consecutive ones hit distinct banks
// (launch::MMV_Q8_SHARED_BYTES is its size).
struct SottoQ8 {
    int qs[8];
    float d, s;
    int pad;
};
static_assert(sizeof(SottoQ8) == 44, "launch::MMV_Q8_SHARED_BYTES sizes it");

// The rows of x this block takes: SOTTO_MMV_ROWS from row r0 = blockIdx.y · SOTTO_MMV_ROWS
// (a launch with more rows has a grid.y of row chunks); m becomes the chunk's count.
// The block's dynamic shared memory (launch::mul_mat_vec_shared): with SOTTO_MMV_Q8, first
// m · 32 SottoQ8 (sotto_mmv_q8's input codes); with SOTTO_MMV_NORM, then the rows' layer
// norm, [m, n_in] floats, which x becomes, and the sums'. Every thread of the block must
// call it, before any returns.
__device__ __forceinline__ unsigned int sotto_mmv_input(const float** x, unsigned int* m,
        unsigned int n_in, int flags, const float* gamma, const float* beta, float eps) {
    unsigned int r0 = blockIdx.y * SOTTO_MMV_ROWS;
    *x += (size_t)r0 * n_in;
    *m = *m - r0 < SOTTO_MMV_ROWS ? *m - r0 : SOTTO_MMV_ROWS;
    if (flags & SOTTO_MMV_NORM) {
        extern __shared__ float sotto_mmv_sh[];
        size_t codes = (flags & SOTTO_MMV_Q8) ? (size_t)*m * 32 * sizeof(SottoQ8) / 4 : 0;
        float* normed = sotto_mmv_sh + codes;
        float* red = normed + (size_t)*m * n_in;
        sotto_norm_rows(*x, *m, n_in, gamma, beta, eps, normed, red);
        *x = normed;
    }
    return r0;
}

// This warp's output of a mat-vec launch (one warp per output), whose weight row of
// `row_bytes` at `w` it asks L2 for before the kernel waits for the one before
// (sotto_pdl_start): no kernel writes weights. A warp past the `n_out` outputs asks nothing.
__device__ __forceinline__ unsigned int sotto_mmv_warp_prefetch(const void* w,
        size_t row_bytes, unsigned int n_out) {
    unsigned int o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (o < n_out) sotto_prefetch_l2((const char*)w + (size_t)o * row_bytes, row_bytes);
    return o;
}

// Four f16 weights in one 8-byte load, and the four inputs they meet in one 16-byte load.
struct alignas(8) SottoHalf4 {
    unsigned int pair[2];
};
struct alignas(16) SottoFloat4 {
    float v[4];
};

// As sotto_mul_mat_vec_q with W in f16 (rows of any length). Where rows are a multiple of 4
// long and W and x aligned for it, lane l reads halves 4l .. 4l + 3 of every 128 in one
// 8-byte load and each row's four inputs in one 16-byte load, so a warp's loads cover 256
// and 512 contiguous bytes; else the pair 2l, 2l + 1 of every 64 (one 32-bit load when rows
// are an even length). Output o is this warp's.
__device__ __forceinline__ void sotto_mmv_f16(const unsigned short* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, unsigned int o, SottoMmvRows rows, unsigned int r0) {
    unsigned int lane = threadIdx.x % 32;
    float acc[SOTTO_MMV_ROWS];
#pragma unroll
    for (int r = 0; r < SOTTO_MMV_ROWS; ++r) acc[r] = 0.0f;
    bool wide = (n_in & 3u) == 0 && ((size_t)w & 7u) == 0 && ((size_t)x & 15u) == 0;
    if (o < n_out && wide) {
        const unsigned short* row = w + (size_t)o * n_in;
        for (unsigned int k = 4 * lane; k < n_in; k += 128) {
            SottoHalf4 h = *(const SottoHalf4*)(row + k);
            float w0 = sotto_half_to_float((unsigned short)(h.pair[0] & 0xffffu));
            float w1 = sotto_half_to_float((unsigned short)(h.pair[0] >> 16));
            float w2 = sotto_half_to_float((unsigned short)(h.pair[1] & 0xffffu));
            float w3 = sotto_half_to_float((unsigned short)(h.pair[1] >> 16));
#pragma unroll
            for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
                if (r < (int)m) {
                    SottoFloat4 xv = *(const SottoFloat4*)(x + (size_t)r * n_in + k);
                    acc[r] += fmaf(w3, xv.v[3], fmaf(w2, xv.v[2], fmaf(w1, xv.v[1], w0 * xv.v[0])));
                }
            }
        }
    } else if (o < n_out) {
        const unsigned short* row = w + (size_t)o * n_in;
        for (unsigned int k = 2 * lane; k < n_in; k += 64) {
            float w0, w1 = 0.0f;
            if ((n_in & 1u) == 0) {
                unsigned int pair = *(const unsigned int*)(row + k);
                w0 = sotto_half_to_float((unsigned short)(pair & 0xffffu));
                w1 = sotto_half_to_float((unsigned short)(pair >> 16));
            } else {
                w0 = sotto_half_to_float(row[k]);
                if (k + 1 < n_in) w1 = sotto_half_to_float(row[k + 1]);
            }
            bool two = k + 1 < n_in;
#pragma unroll
            for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
                if (r < (int)m) {
                    const float* xr = x + (size_t)r * n_in + k;
                    acc[r] += two ? w0 * xr[0] + w1 * xr[1] : w0 * xr[0];
                }
            }
        }
    }
    sotto_mmv_store(acc, y, b, o, n_out, m, flags, rows, r0, false);
}

extern "C" __global__ void sotto_mul_mat_vec_f16(const unsigned short* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    unsigned int o = sotto_mmv_warp_prefetch(w, (size_t)n_in * 2, n_out);
    sotto_pdl_start();
    unsigned int r0 = sotto_mmv_input(&x, &m, n_in, flags, gamma, beta, eps);
    SottoMmvRows rows = {nullptr, 1, 0};
    sotto_mmv_f16(w, x, y, b, n_in, n_out, m, flags, o, rows, r0);
}

// One block of activations quantized as the CPU's quantized products quantize them
// (sotto_quant's QuantActs, ggml's quantize_row_q8_0 / q8_1 reference): d = max|x| / 127,
// codes round(x / d) away from zero, packed four to a word for __dp4a; the scale rounded
// to f16 and widened, and for q8_1 (Q81) the f16-rounded d·Σq. Each operation rounds as
// the CPU's does (no contraction into a multiply-add), so the codes are the CPU's.
// x is read in 16-byte loads where it is aligned for them (a thread's 32 values are one
// 128-byte line: one load per value would touch a line per thread each time).
template <bool Q81> __device__ __forceinline__ void sotto_q8_block(const float* xp, int* qs,
        float* d, float* s) {
    float x[32];
    if (((size_t)xp & 15u) == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            SottoFloat4 f = ((const SottoFloat4*)xp)[i];
#pragma unroll
            for (int j = 0; j < 4; ++j) x[4 * i + j] = f.v[j];
        }
    } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) x[j] = xp[j];
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(x[j]));
    float dd = __fdiv_rn(amax, 127.0f);
    float id = dd != 0.0f ? __fdiv_rn(1.0f, dd) : 0.0f;
    int sum = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        unsigned int word = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            float v = __fmul_rn(x[4 * w + k], id);
            float r = truncf(__fadd_rn(v, copysignf(0.49999997f, v)));
            int q = r != r ? 0 : (int)fminf(fmaxf(r, -128.0f), 127.0f);
            sum += q;
            word |= (unsigned int)(q & 0xff) << (8 * k);
        }
        qs[w] = (int)word;
    }
    *d = sotto_half_to_float(sotto_float_to_half(dd));
    *s = Q81 ? sotto_half_to_float(sotto_float_to_half(__fmul_rn((float)sum, dd))) : 0.0f;
}

// Block blk of weight type T as signed byte codes packed four to a word (value j in byte
// j % 4 of word j / 4): q − 8 (q4_0), q − 16 (q5_0), q (q4_1, q5_1, q8_0); its scale d
// and, for q4_1 and q5_1, its minimum m (else 0).
template <int T> __device__ __forceinline__ void sotto_q_codes(const unsigned char* blk,
        int* qs, float* d, float* m) {
    *d = sotto_f16_at(blk, 0);
    *m = (T == 1 || T == 3) ? sotto_f16_at(blk, 2) : 0.0f;
    if (T == 8) {
#pragma unroll
        for (int w = 0; w < 8; ++w)
            qs[w] = (int)((unsigned int)blk[2 + 4 * w] | ((unsigned int)blk[3 + 4 * w] << 8)
                | ((unsigned int)blk[4 + 4 * w] << 16) | ((unsigned int)blk[5 + 4 * w] << 24));
        return;
    }
    unsigned int qho = T == 2 ? 2 : 4;
    unsigned int qh = (T == 2 || T == 3)
        ? (blk[qho] | (blk[qho + 1] << 8) | (blk[qho + 2] << 16)
            | ((unsigned int)blk[qho + 3] << 24))
        : 0u;
    const unsigned char* q = blk + (T == 0 ? 2 : T == 1 ? 4 : T == 2 ? 6 : 8);
    int off = T == 0 ? 8 : T == 2 ? 16 : 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        unsigned int word = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            unsigned int j = 4 * w + k;
            int c = (int)(j < 16 ? (q[j] & 0x0F) : (q[j - 16] >> 4)) | (int)(((qh >> j) & 1u) << 4);
            word |= (unsigned int)((c - off) & 0xff) << (8 * k);
        }
        qs[w] = (int)word;
    }
}

// sotto_mmv_q's products as the CPU's quantized decoder products compute them
// (sotto_quant::tiled_matmul): each row of x quantized per block (sotto_q8_block), exact
// integer block sums, and the blocks added in order, acc = fma(Σq·q', d·d', acc) (then
// acc = fma(m, s, acc) for q4_1 and q5_1), so the sums are the CPU's bit for bit. The
// blocks go 32 at a time: the block's threads quantize the group's input blocks of every
// row into shared memory once (not once per warp: the quantizing is most of the work),
// then lane l takes block base + l and the warp walks the 32 in order by shuffles, every
// lane keeping the same acc. A warp without an output (o ≥ n_out) still quantizes its share.
template <int T> __device__ __forceinline__ void sotto_mmv_q8(const unsigned char* w,
        const float* x, float* acc, unsigned int n_in, unsigned int n_out, unsigned int m,
        unsigned int o) {
    extern __shared__ float sotto_mmv_sh[];
    SottoQ8* codes = (SottoQ8*)sotto_mmv_sh;
    unsigned int lane = threadIdx.x % 32, nb = n_in / 32;
    const bool min = T == 1 || T == 3;
    bool live = o < n_out;  // the warp's o: uniform, so no lane is left in a shuffle
    const unsigned char* row = w + (size_t)(live ? o : 0) * nb * sotto_qbytes<T>();
    for (unsigned int base = 0; base < nb; base += 32) {
        unsigned int b = base + lane, n = nb - base < 32 ? nb - base : 32;
        if (base > 0) __syncthreads();  // every warp is done with the last group's codes
        for (unsigned int i = threadIdx.x; i < m * n; i += blockDim.x) {
            SottoQ8* c = codes + (i / n) * 32 + i % n;
            sotto_q8_block<min>(x + (size_t)(i / n) * n_in + (size_t)(base + i % n) * 32,
                c->qs, &c->d, &c->s);
        }
        __syncthreads();
        if (!live) continue;
        int wq[8];
        float dw = 0.0f, mw = 0.0f;
        if (b < nb) sotto_q_codes<T>(row + (size_t)b * sotto_qbytes<T>(), wq, &dw, &mw);
        float sf[SOTTO_MMV_ROWS], dd[SOTTO_MMV_ROWS], sa[SOTTO_MMV_ROWS];
#pragma unroll
        for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
            sf[r] = 0.0f, dd[r] = 0.0f, sa[r] = 0.0f;
            if (r < (int)m && b < nb) {
                const SottoQ8* c = codes + r * 32 + lane;
                int sumi = 0;
#pragma unroll
                for (int k = 0; k < 8; ++k) sumi = __dp4a(wq[k], c->qs[k], sumi);
                sf[r] = (float)sumi;
                dd[r] = __fmul_rn(dw, c->d);
                sa[r] = c->s;
            }
        }
        // Block j of the group, every row in turn: each row's sum still takes the blocks
        // in order, and the rows' chains of multiply-adds overlap.
        for (unsigned int j = 0; j < n; ++j) {
            float mj = min ? __shfl_sync(0xffffffffu, mw, j) : 0.0f;
#pragma unroll
            for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
                if (r < (int)m) {
                    float a = fmaf(__shfl_sync(0xffffffffu, sf[r], j),
                        __shfl_sync(0xffffffffu, dd[r], j), acc[r]);
                    if (min) a = fmaf(mj, __shfl_sync(0xffffffffu, sa[r], j), a);
                    acc[r] = a;
                }
            }
        }
    }
}

template <int T> __device__ __forceinline__ void sotto_mmv_q(const unsigned char* w,
        const float* x, float* y, const float* b, unsigned int n_in, unsigned int n_out,
        unsigned int m, int flags, unsigned int o, SottoMmvRows rows, unsigned int r0) {
    unsigned int lane = threadIdx.x % 32;
    float acc[SOTTO_MMV_ROWS];
#pragma unroll
    for (int r = 0; r < SOTTO_MMV_ROWS; ++r) acc[r] = 0.0f;
    unsigned int nb = n_in / 32;
    if (flags & SOTTO_MMV_Q8) {
        sotto_mmv_q8<T>(w, x, acc, n_in, n_out, m, o);
        sotto_mmv_store(acc, y, b, o, n_out, m, flags, rows, r0, true);
        return;
    }
    if (o < n_out) {
        const unsigned char* row = w + (size_t)o * nb * sotto_qbytes<T>();
        for (unsigned int b = lane; b < nb; b += 32) {
            const unsigned char* blk = row + (size_t)b * sotto_qbytes<T>();
            float v[32];
#pragma unroll
            for (unsigned int j = 0; j < 32; ++j) v[j] = sotto_qvalue<T>(blk, j);
#pragma unroll
            for (int r = 0; r < SOTTO_MMV_ROWS; ++r) {
                if (r < (int)m) {
                    const float* xr = x + (size_t)r * n_in + (size_t)b * 32;
                    float s = 0.0f;
#pragma unroll
                    for (unsigned int j = 0; j < 32; ++j) s += v[j] * xr[j];
                    acc[r] += s;
                }
            }
        }
    }
    sotto_mmv_store(acc, y, b, o, n_out, m, flags, rows, r0, false);
}

template <int T> __device__ __forceinline__ void sotto_mul_mat_vec_q(const unsigned char* w,
        const float* x, float* y, const float* b, unsigned int n_in, unsigned int n_out,
        unsigned int m, int flags, const float* gamma, const float* beta, float eps) {
    unsigned int o = sotto_mmv_warp_prefetch(w, (size_t)(n_in / 32) * sotto_qbytes<T>(), n_out);
    sotto_pdl_start();
    unsigned int r0 = sotto_mmv_input(&x, &m, n_in, flags, gamma, beta, eps);
    SottoMmvRows rows = {nullptr, 1, 0};
    sotto_mmv_q<T>(w, x, y, b, n_in, n_out, m, flags, o, rows, r0);
}

// q, k and v of a decoder step in one launch: three mat-vecs of the same x, each W
// [n_out, n_in], warps 0..n_out on W0, then W1, W2 (a warp past the last has nothing to
// do). b_i null: no bias. With pos0, the second and third outputs go straight into their
// KV caches (SottoMmvRows), so the step needs no sotto_kv_write. `extra`: SOTTO_MMV_Q8
// and SOTTO_MMV_NORM (gamma, beta, eps), or 0.
#define SOTTO_MMV3_PICK(W, ROW_BYTES)                                               \
    unsigned int o = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;              \
    bool live = o < 3 * n_out;                                                       \
    unsigned int which = live ? o / n_out : 2;                                       \
    o = live ? o - which * n_out : n_out;                                            \
    W w = which == 0 ? w0 : which == 1 ? w1 : w2;                                    \
    size_t row_bytes = (ROW_BYTES);                                                  \
    if (live) sotto_prefetch_l2((const char*)w + (size_t)o * row_bytes, row_bytes);  \
    sotto_pdl_start();                                                               \
    unsigned int r0 = sotto_mmv_input(&x, &m, n_in, extra, gamma, beta, eps);        \
    float* y = which == 0 ? y0 : which == 1 ? y1 : y2;                               \
    const float* b = which == 0 ? b0 : which == 1 ? b1 : b2;                         \
    SottoMmvRows rows = {which == 0 ? nullptr : pos0, n_new, seq_stride};            \
    int flags = (b ? SOTTO_MMV_BIAS : 0) | extra;

extern "C" __global__ void sotto_mul_mat_vec3_f16(const unsigned short* w0,
        const unsigned short* w1, const unsigned short* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    SOTTO_MMV3_PICK(const unsigned short*, (size_t)n_in * 2)
    sotto_mmv_f16(w, x, y, b, n_in, n_out, m, flags, o, rows, r0);
}

template <int T> __device__ __forceinline__ void sotto_mul_mat_vec3_q(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    SOTTO_MMV3_PICK(const unsigned char*, (size_t)(n_in / 32) * sotto_qbytes<T>())
    sotto_mmv_q<T>(w, x, y, b, n_in, n_out, m, flags, o, rows, r0);
}

extern "C" __global__ void sotto_mul_mat_vec_q4_0(const unsigned char* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    sotto_mul_mat_vec_q<0>(w, x, y, b, n_in, n_out, m, flags, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec_q4_1(const unsigned char* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    sotto_mul_mat_vec_q<1>(w, x, y, b, n_in, n_out, m, flags, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec_q5_0(const unsigned char* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    sotto_mul_mat_vec_q<2>(w, x, y, b, n_in, n_out, m, flags, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec_q5_1(const unsigned char* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    sotto_mul_mat_vec_q<3>(w, x, y, b, n_in, n_out, m, flags, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec_q8_0(const unsigned char* w, const float* x,
        float* y, const float* b, unsigned int n_in, unsigned int n_out, unsigned int m,
        int flags, const float* gamma, const float* beta, float eps) {
    sotto_mul_mat_vec_q<8>(w, x, y, b, n_in, n_out, m, flags, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec3_q4_0(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    sotto_mul_mat_vec3_q<0>(w0, w1, w2, x, y0, y1, y2, b0, b1, b2, n_in, n_out, m, pos0,
        n_new, seq_stride, extra, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec3_q4_1(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    sotto_mul_mat_vec3_q<1>(w0, w1, w2, x, y0, y1, y2, b0, b1, b2, n_in, n_out, m, pos0,
        n_new, seq_stride, extra, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec3_q5_0(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    sotto_mul_mat_vec3_q<2>(w0, w1, w2, x, y0, y1, y2, b0, b1, b2, n_in, n_out, m, pos0,
        n_new, seq_stride, extra, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec3_q5_1(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    sotto_mul_mat_vec3_q<3>(w0, w1, w2, x, y0, y1, y2, b0, b1, b2, n_in, n_out, m, pos0,
        n_new, seq_stride, extra, gamma, beta, eps);
}
extern "C" __global__ void sotto_mul_mat_vec3_q8_0(const unsigned char* w0,
        const unsigned char* w1, const unsigned char* w2, const float* x, float* y0,
        float* y1, float* y2, const float* b0, const float* b1, const float* b2,
        unsigned int n_in, unsigned int n_out, unsigned int m, const unsigned int* pos0,
        unsigned int n_new, unsigned int seq_stride, int extra, const float* gamma,
        const float* beta, float eps) {
    sotto_mul_mat_vec3_q<8>(w0, w1, w2, x, y0, y1, y2, b0, b1, b2, n_in, n_out, m, pos0,
        n_new, seq_stride, extra, gamma, beta, eps);
}

// Narrows f32 to f16 (round to nearest even), for the f16 matrix products.
extern "C" __global__ void sotto_f32_to_f16(const float* x, unsigned short* y, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sotto_float_to_half(x[i]);
}

// x[i] rounded to f16 (nearest even) and widened back, in place: the values the CPU keeps
// where it stores f16 (the cross-attention K/V).
extern "C" __global__ void sotto_round_f16(float* x, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = sotto_half_to_float(sotto_float_to_half(x[i]));
}

// y[r, c] += b[c] when has_bias, then exact GELU when gelu; stored in y, or as f16 in
// y_half where that is not null (the input of the next f16 product).
// Shape: y [n / n_cols, n_cols]
extern "C" __global__ void sotto_bias_act(float* y, unsigned short* y_half, const float* b,
        unsigned int n_cols, unsigned int n, int has_bias, int gelu) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = y[i];
    if (has_bias) v += b[i % n_cols];
    if (gelu) v = sotto_gelu(v);
    if (y_half)
        y_half[i] = sotto_float_to_half(v);
    else
        y[i] = v;
}

// A stacked product's output split into its parts (at most 4: q, k and v; the cross K and
// V of two decoder layers), each part's bias added where bit p of has_bias is set:
// d_p[r, c] = src[r, p·width + c] (+ bias[p·width + c]).
// Shape: src [rows, parts·width]; each d_p [rows, width]; n = rows·parts·width
extern "C" __global__ void sotto_split_bias(const float* src, const float* bias, float* d0,
        float* d1, float* d2, float* d3, unsigned int width, unsigned int parts,
        unsigned int has_bias, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int cols = parts * width, r = i / cols, j = i % cols, p = j / width;
    float v = src[i];
    if ((has_bias >> p) & 1u) v += bias[j];
    float* d = p == 0 ? d0 : p == 1 ? d1 : p == 2 ? d2 : d3;
    d[(size_t)r * width + j % width] = v;
}

// Columns of a conv1d with kernel 3 and padding 1: cols[t, c·3 + kk] = x(t·stride + kk − 1, c),
// zero outside [0, t_in); as f16 into cols_half instead where that is not null. x(t, c)
// sits at x[t·ts + c·cs], so channel-major (the mel) and time-major (the first conv's
// output) inputs both work. Shape: cols [t_out, c_in·3]
extern "C" __global__ void sotto_im2col(const float* x, float* cols, unsigned short* cols_half,
        unsigned int t_in, unsigned int c_in, unsigned int t_out, unsigned int stride,
        unsigned int ts, unsigned int cs) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int kc = c_in * 3;
    if (i >= t_out * kc) return;
    unsigned int t = i / kc, r = i % kc;
    unsigned int c = r / 3, kk = r % 3;
    int ti = (int)(t * stride + kk) - 1;
    float v = (ti >= 0 && ti < (int)t_in) ? x[(size_t)ti * ts + (size_t)c * cs] : 0.0f;
    if (cols_half)
        cols_half[i] = sotto_float_to_half(v);
    else
        cols[i] = v;
}

// x[r, c] = table[tok[r], c] + pos[*pos0 + r % n_new, c]; rows are [batch, n_new] flattened.
// Positions (here, in sotto_kv_write and in sotto_attention) are read from device memory,
// so that one captured CUDA graph serves every step of a decode.
extern "C" __global__ void sotto_embed_f16(const unsigned short* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    x[i] = sotto_half_to_float(table[(size_t)tok[r] * d + c]) + pos[(size_t)(*pos0 + r % n_new) * d + c];
}

extern "C" __global__ void sotto_embed_f32(const float* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    x[i] = table[(size_t)tok[r] * d + c] + pos[(size_t)(*pos0 + r % n_new) * d + c];
}

// As sotto_embed_f32 with a table in ggml blocks of type T (rows of d / 32 blocks).
template <int T> __device__ __forceinline__ void sotto_embed_q(const unsigned char* table,
        const unsigned int* tok, const float* pos, float* x, unsigned int d, unsigned int n_new,
        const unsigned int* pos0, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    const unsigned char* b =
        table + ((size_t)tok[r] * (d / 32) + c / 32) * sotto_qbytes<T>();
    x[i] = sotto_qvalue<T>(b, c % 32) + pos[(size_t)(*pos0 + r % n_new) * d + c];
}

extern "C" __global__ void sotto_embed_q4_0(const unsigned char* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    sotto_embed_q<0>(table, tok, pos, x, d, n_new, pos0, n);
}
extern "C" __global__ void sotto_embed_q4_1(const unsigned char* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    sotto_embed_q<1>(table, tok, pos, x, d, n_new, pos0, n);
}
extern "C" __global__ void sotto_embed_q5_0(const unsigned char* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    sotto_embed_q<2>(table, tok, pos, x, d, n_new, pos0, n);
}
extern "C" __global__ void sotto_embed_q5_1(const unsigned char* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    sotto_embed_q<3>(table, tok, pos, x, d, n_new, pos0, n);
}
extern "C" __global__ void sotto_embed_q8_0(const unsigned char* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, const unsigned int* pos0,
        unsigned int n) {
    sotto_pdl_start();
    sotto_embed_q<8>(table, tok, pos, x, d, n_new, pos0, n);
}

// Appends new keys or values to the cache: row i of sequence s (src row s·n_new + i) goes to
// position *pos0 + i of that sequence. Shape: src [batch, n_new, d]; cache [capacity, n_ctx, d]
// with seq_stride = n_ctx·d; n = batch·n_new·d.
extern "C" __global__ void sotto_kv_write(const float* src, float* cache, unsigned int d,
        unsigned int n_new, const unsigned int* pos0, unsigned int seq_stride, unsigned int n) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    unsigned int s = r / n_new, p = *pos0 + r % n_new;
    cache[(size_t)s * seq_stride + (size_t)p * d + c] = src[i];
}

// A decoder step's logits reduced on the device to a shortlist record per row, so that the
// host downloads and searches a few thousand words instead of the whole vocabulary. Two
// launches: sotto_shortlist_chunks reduces chunks of each row's text ids into `part`, then
// sotto_shortlist_merge merges each row's chunks and copies the pinned and tail logits.
// Candidates are ordered by logit descending, ties to the lower id; NaN and -inf are never
// candidates (a NaN is read as -inf: never picked, and it adds nothing to the sum).
// Top-K as K rounds of a block-wide argmax of the candidates after the previous pick in that
// order, each thread keeping its own best and rescanning only when that one won: one warp
// butterfly and one barrier a round, no sort, no shared list, and the same code serves any
// K up to SHORTLIST_MAX_TOP, 64 (a per-thread top-K list would hold K entries in
// registers and spill at K = 64).
#define SOTTO_SHORTLIST_PER 8

// Whether candidate (v, i) comes before (w, j).
__device__ __forceinline__ bool sotto_sl_before(float v, unsigned int i, float w, unsigned int j) {
    return v > w || (v == w && i < j);
}

// The block's first (v, i) in the candidate order; every thread gets it. `shv`, `shi`: 64
// words each, whose halves successive calls take in turn (`round` & 1), so that one barrier
// a call suffices: a half is rewritten two calls later, after every thread has passed the
// barrier of the call between, and so has read it.
__device__ __forceinline__ void sotto_sl_block_first(float& v, unsigned int& i, float* shv,
        unsigned int* shi, unsigned int round) {
    for (int off = 16; off > 0; off >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, off);
        unsigned int j = __shfl_xor_sync(0xffffffffu, i, off);
        if (sotto_sl_before(w, j, v, i)) {
            v = w;
            i = j;
        }
    }
    unsigned int half = (round & 1u) * 32, warps = blockDim.x / 32;
    if (threadIdx.x % 32 == 0) {
        shv[half + threadIdx.x / 32] = v;
        shi[half + threadIdx.x / 32] = i;
    }
    __syncthreads();
    v = shv[half];
    i = shi[half];
    for (unsigned int w = 1; w < warps; ++w)
        if (sotto_sl_before(shv[half + w], shi[half + w], v, i)) {
            v = shv[half + w];
            i = shi[half + w];
        }
}

// The block's sum of s, in warp order (every thread gets the same). `sh`: 32 words, used
// once per launch.
__device__ __forceinline__ float sotto_sl_block_sum(float s, float* sh) {
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = s;
    __syncthreads();
    float t = sh[0];
    for (unsigned int w = 1; w < blockDim.x / 32; ++w) t += sh[w];
    return t;
}

// Stage 1: block (c, r) reduces chunk c of row r's text ids, blockDim.x · per of them from
// c · blockDim.x · per (value k of thread t at + k · blockDim.x + t, coalesced), leaving out
// the pinned ids (bit id % 32 of bitmap[id / 32]; a null bitmap pins none), into record
// (r, c) of `part`, 2 + 2 · top words: the chunk's largest candidate (-inf for none),
// Σ exp(x - that) over its candidates (0 for none), its `top` first ids (as floats, -1
// past its candidates), then their logits (-inf past them).
// Block: a multiple of 32 threads, at most 1024; per ≤ SOTTO_SHORTLIST_PER, its values in
// registers. Grid: (chunks, rows). Shape: logits [rows, n_vocab]; part [rows, chunks, 2 + 2 top]
extern "C" __global__ void sotto_shortlist_chunks(const float* logits, unsigned int n_vocab,
        unsigned int text_end, const unsigned int* bitmap, unsigned int per, unsigned int top,
        float* part) {
    sotto_pdl_start();
    __shared__ float shv[64];
    __shared__ unsigned int shi[64];
    __shared__ float shs[32];
    const float neg = __int_as_float(0xff800000);
    const float* row = logits + (size_t)blockIdx.y * n_vocab;
    unsigned int lo = blockIdx.x * blockDim.x * per + threadIdx.x;
    float x[SOTTO_SHORTLIST_PER];
#pragma unroll
    for (unsigned int k = 0; k < SOTTO_SHORTLIST_PER; ++k) {
        unsigned int id = lo + k * blockDim.x;
        float v = neg;
        if (k < per && id < text_end && !(bitmap && ((bitmap[id / 32] >> (id % 32)) & 1u))) {
            v = row[id];
            if (v != v) v = neg;
        }
        x[k] = v;
    }
    // This thread's first candidate, then after each pick its first one after that pick.
    float bv = neg;
    unsigned int bi = 0xffffffffu;
#pragma unroll
    for (unsigned int k = 0; k < SOTTO_SHORTLIST_PER; ++k)
        if (x[k] != neg && sotto_sl_before(x[k], lo + k * blockDim.x, bv, bi)) {
            bv = x[k];
            bi = lo + k * blockDim.x;
        }
    float* rec = part + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * (2 + 2 * (size_t)top);
    float m = neg;
    // One round even for top = 0: the first pick is the chunk's largest candidate.
    for (unsigned int r = 0; r < (top > 0 ? top : 1u); ++r) {
        float v = bv;
        unsigned int i = bi;
        sotto_sl_block_first(v, i, shv, shi, r);
        if (r == 0) m = v;
        if (v == neg) {  // no candidate left (the same for every thread)
            for (unsigned int j = r + threadIdx.x; j < top; j += blockDim.x) {
                rec[2 + j] = -1.0f;
                rec[2 + top + j] = neg;
            }
            break;
        }
        if (threadIdx.x == 0 && r < top) {
            rec[2 + r] = (float)i;
            rec[2 + top + r] = v;
        }
        if (i == bi) {  // ids are distinct: only the winner's thread moves on
            float pv = bv;
            bv = neg;
            bi = 0xffffffffu;
#pragma unroll
            for (unsigned int k = 0; k < SOTTO_SHORTLIST_PER; ++k) {
                unsigned int id = lo + k * blockDim.x;
                if (x[k] != neg && sotto_sl_before(pv, i, x[k], id)
                        && sotto_sl_before(x[k], id, bv, bi)) {
                    bv = x[k];
                    bi = id;
                }
            }
        }
    }
    float s = 0.0f;
    if (m != neg) {
#pragma unroll
        for (unsigned int k = 0; k < SOTTO_SHORTLIST_PER; ++k)
            if (x[k] != neg) s += expf(x[k] - m);
    }
    s = sotto_sl_block_sum(s, shs);
    if (threadIdx.x == 0) {
        rec[0] = m;
        rec[1] = s;
    }
}

// Stage 2: block r merges row r's `chunks` records of sotto_shortlist_chunks (thread c
// reads chunk c's: chunks ≤ blockDim.x) into the row's shortlist at out + r · (2 + 2 top +
// n_pinned + n_vocab - text_end): the largest candidate M of the row (-inf for none),
// Σ exp(x - M) over its candidates (0 for none), its `top` first ids (as floats, -1 past
// its candidates) and their logits (-inf past them), the logits of the n_pinned ids at
// `pinned` in their order (NaN for an id past n_vocab), then logits text_end .. n_vocab.
// Each chunk's list is in candidate order, so a round takes the first of the chunks' heads
// and moves the winner's head on. Copies are of the bits.
// Block: a multiple of 32 threads, at most 1024. Grid: rows.
extern "C" __global__ void sotto_shortlist_merge(const float* logits, unsigned int n_vocab,
        unsigned int text_end, const unsigned int* pinned, unsigned int n_pinned,
        unsigned int chunks, unsigned int top, const float* part, float* out) {
    sotto_pdl_start();
    __shared__ float shv[64];
    __shared__ unsigned int shi[64];
    __shared__ float shs[32];
    const float neg = __int_as_float(0xff800000);
    unsigned int t = threadIdx.x, w = 2 + 2 * top;
    const float* row = logits + (size_t)blockIdx.x * n_vocab;
    float* rec = out + (size_t)blockIdx.x * (w + n_pinned + (n_vocab - text_end));
    for (unsigned int j = t; j < n_pinned; j += blockDim.x) {
        unsigned int id = pinned[j];
        rec[w + j] = id < n_vocab ? row[id] : __int_as_float(0x7fc00000);
    }
    for (unsigned int j = t; j < n_vocab - text_end; j += blockDim.x)
        rec[w + n_pinned + j] = row[text_end + j];
    bool owner = t < chunks;
    const float* mine = part + ((size_t)blockIdx.x * chunks + (owner ? t : 0)) * w;
    float mc = owner ? mine[0] : neg, big = mc;
    unsigned int round = 0, any = t;
    sotto_sl_block_first(big, any, shv, shi, round++);
    float s = owner && mc != neg ? mine[1] * expf(mc - big) : 0.0f;
    s = sotto_sl_block_sum(s, shs);
    if (t == 0) {
        rec[0] = big;
        rec[1] = s;
    }
    // This thread's head: entry h of its chunk's list.
    unsigned int h = 0;
    float hv = neg;
    unsigned int hi = 0xffffffffu;
    if (owner && top > 0 && mine[2] >= 0.0f) {
        hv = mine[2 + top];
        hi = (unsigned int)mine[2];
    }
    for (unsigned int r = 0; r < top; ++r) {
        float v = hv;
        unsigned int i = hi;
        sotto_sl_block_first(v, i, shv, shi, round++);
        if (v == neg) {
            for (unsigned int j = r + t; j < top; j += blockDim.x) {
                rec[2 + j] = -1.0f;
                rec[2 + top + j] = neg;
            }
            break;
        }
        if (t == 0) {
            rec[2 + r] = (float)i;
            rec[2 + top + r] = v;
        }
        if (i == hi) {
            ++h;
            hv = neg;
            hi = 0xffffffffu;
            if (h < top && mine[2 + h] >= 0.0f) {
                hv = mine[2 + top + h];
                hi = (unsigned int)mine[2 + h];
            }
        }
    }
}

// Key (or value) row j of sequence s, from `base` (the head's first column): where a
// beam search has reordered the batch (`slots` set), in the rows of sequence
// slots[s·n_keys + j], which wrote it (a reorder moves no cache row: it rewrites the
// table); else in s's own. Sequences' rows lie seq_stride apart.
__device__ __forceinline__ const float* sotto_kv_row(const float* base,
        const unsigned int* slots, unsigned int s, unsigned int j, unsigned int n_keys,
        unsigned int seq_stride, unsigned int d) {
    unsigned int from = slots ? slots[(size_t)s * n_keys + j] : s;
    return base + (size_t)from * seq_stride + (size_t)j * d;
}

// softmax(q kᵀ · scale + mask) v for one query row and one head per block:
// blockIdx.x = row r (sequence s = r / n_new, position in step i = r % n_new),
// blockIdx.y = head h. Keys and values of sequence s start at s·kv_seq_stride (0: every
// row sees the same keys, as in cross-attention), or come through `slots`
// (sotto_kv_row; null: none). Causal rows see keys 0..=*q_pos0 + i (at most n_keys, the
// cache's length), others n_keys. q_pos0 and slots are read only when causal.
// A decoder step has few such blocks (rows × heads: 6 for tiny greedy), so each is wide
// (blockDim ≥ dh, a power of two): a thread scores a key or two, and P·V splits the keys
// over blockDim / dh groups whose partial sums meet in shared memory, so no thread walks
// every key alone.
// Dynamic shared memory: (n_keys + blockDim.x) floats.
// Shape: q, out [rows, d]; k, v [.., n_keys, d] per sequence; d = n_head·dh.
extern "C" __global__ void sotto_attention(const float* q, const float* k, const float* v,
        float* out, unsigned int d, unsigned int dh, unsigned int n_new,
        unsigned int kv_seq_stride, unsigned int n_keys, int causal, const unsigned int* q_pos0,
        const unsigned int* slots, float scale) {
    sotto_pdl_start();
    extern __shared__ float sh[];
    float* sc = sh;
    float* red = sh + n_keys;
    unsigned int r = blockIdx.x, h = blockIdx.y;
    unsigned int s = r / n_new, i = r % n_new;
    unsigned int nk = causal ? *q_pos0 + i + 1 : n_keys;
    if (nk > n_keys) nk = n_keys;
    const float* qr = q + (size_t)r * d + h * dh;
    const unsigned int* table = causal ? slots : 0;
    const float *kh = k + h * dh, *vh = v + h * dh;
    float m = __int_as_float(0xff800000);
    for (unsigned int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float* kr = sotto_kv_row(kh, table, s, j, n_keys, kv_seq_stride, d);
        float acc = 0.0f;
        for (unsigned int c = 0; c < dh; ++c) acc += qr[c] * kr[c];
        acc *= scale;
        sc[j] = acc;
        m = fmaxf(m, acc);
    }
    m = sotto_block_max(m, red);
    float sum = 0.0f;
    for (unsigned int j = threadIdx.x; j < nk; j += blockDim.x) {
        float e = expf(sc[j] - m);
        sc[j] = e;
        sum += e;
    }
    float inv = 1.0f / sotto_block_sum(sum, red);
    // P·V: thread t sums column c = t % dh over keys g, g + groups, … (g = t / dh; a group's
    // threads read one row of V together), then thread c < dh adds the groups' sums.
    unsigned int groups = blockDim.x / dh, c = threadIdx.x % dh, g = threadIdx.x / dh;
    float acc = 0.0f;
    if (g < groups)
        for (unsigned int j = g; j < nk; j += groups)
            acc += sc[j] * sotto_kv_row(vh, table, s, j, n_keys, kv_seq_stride, d)[c];
    red[threadIdx.x] = acc;  // sotto_block_sum left `red` free
    __syncthreads();
    if (threadIdx.x < dh) {
        float t = 0.0f;
        for (unsigned int k = 0; k < groups; ++k) t += red[k * dh + threadIdx.x];
        out[(size_t)r * d + h * dh + threadIdx.x] = t * inv;
    }
}

// softmax(q kᵀ · scale) v over keys every row shares (a decoder step's cross-attention)
// in two launches that spread one (row, head) over gridDim.z blocks: block s scores keys
// [s·chunk, min(n_keys, (s + 1)·chunk)) and writes that chunk's maximum score, sum of
// exponentials and unnormalised P·V to its slot of `part` (dh + 2 floats: the dh sums, the
// maximum, the sum); sotto_attention_merge combines the slots. With `done` set (a
// counter per (row, head), zero before the launch), the last of a (row, head)'s blocks to
// finish merges them itself into `out`, and sets its counter back to zero: one launch.
// Also a step's causal self-attention over its cache (q_pos0 set; keys kv_seq_stride apart
// per sequence, or through `slots`, as sotto_attention takes them). A step has one query row per beam, so the
// work is a few small blocks per head: latency, not arithmetic, sets its time. Each warp therefore keeps SOTTO_SPLIT_BATCH keys' loads in
// flight at once (lanes over the head's dims: coalesced rows of k and v) rather than one.
// Block: SOTTO_SPLIT_BLOCK threads; chunk ≤ SOTTO_SPLIT_KEYS; dh ≤ 128.
// Shape: q [rows, d]; k, v [n_keys, d]; part [rows, heads, splits, dh + 2]
#define SOTTO_SPLIT_BLOCK 128
// Dim c of one (row, head)'s `splits` slots of sotto_attention_split, merged. Read through
// L2 (__ldcg): in the fused merge other blocks wrote them during this launch.
__device__ __forceinline__ float sotto_merge_slots(const float* p, unsigned int splits,
        unsigned int dh, unsigned int c) {
    float mx = __int_as_float(0xff800000);
    for (unsigned int s = 0; s < splits; ++s) mx = fmaxf(mx, __ldcg(p + s * (dh + 2) + dh));
    float num = 0.0f, den = 0.0f;
    for (unsigned int s = 0; s < splits; ++s) {
        const float* ps = p + s * (dh + 2);
        float w = expf(__ldcg(ps + dh) - mx);
        num += w * __ldcg(ps + c);
        den += w * __ldcg(ps + dh + 1);
    }
    return num / den;
}
#define SOTTO_SPLIT_KEYS 64
#define SOTTO_SPLIT_BATCH 8
#define SOTTO_SPLIT_WARPS (SOTTO_SPLIT_BLOCK / 32)
extern "C" __global__ void sotto_attention_split(const float* q, const float* k,
        const float* v, float* part, unsigned int d, unsigned int dh, unsigned int n_keys,
        unsigned int chunk, float scale, unsigned int kv_seq_stride, unsigned int n_new,
        const unsigned int* q_pos0, const unsigned int* slots, unsigned int* done,
        float* merged) {
    __shared__ float sc[SOTTO_SPLIT_KEYS];
    __shared__ float pv[SOTTO_SPLIT_WARPS][128];
    __shared__ float stats[2];
    __shared__ bool last;
    unsigned int r = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    unsigned int j0 = s * chunk;
    // Key j of this row's sequence: sotto_kv_row, or every row's key j when shared.
    unsigned int sq = r / n_new, stride = q_pos0 ? kv_seq_stride : 0;
    const unsigned int* table = q_pos0 ? slots : 0;
    const float *kh = k + h * dh, *vh = v + h * dh;
    {
        // The chunk's key and value rows, asked of L2 before waiting for the kernel before
        // (which writes at most the newest self-attention row): a row of dh floats spans
        // at most dh / 32 + 1 lines; thread t takes line t % lines of row t / lines (K's
        // rows, then V's), and so on.
        unsigned int e = j0 + chunk < n_keys ? j0 + chunk : n_keys;
        unsigned int rows = e > j0 ? e - j0 : 0, lines = dh / 32 + 1;
        for (unsigned int i = threadIdx.x; i < 2 * rows * lines; i += blockDim.x) {
            unsigned int row = i / lines, line = i % lines;
            const float* base = sotto_kv_row(row < rows ? kh : vh, table, sq,
                j0 + row % rows, n_keys, stride, d);
            size_t first = (size_t)base & ~(size_t)127;
            if (first + (size_t)line * 128 < (size_t)(base + dh))
                sotto_prefetch_line((const void*)(first + (size_t)line * 128));
        }
    }
    sotto_pdl_start();
    // Causal (q_pos0 set): row r is sequence r / n_new's token at *q_pos0 + r % n_new and
    // sees the keys up to its own position; a chunk past them is empty (weight 0).
    unsigned int nk = q_pos0 ? *q_pos0 + r % n_new + 1 : n_keys;
    if (nk > n_keys) nk = n_keys;
    unsigned int j1 = j0 + chunk < nk ? j0 + chunk : nk;
    unsigned int n = j1 > j0 ? j1 - j0 : 0;
    unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* qr = q + (size_t)r * d + h * dh;
    // Lane l holds dims l, l + 32, l + 64, l + 96 of q (0 past dh).
    float qv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        unsigned int c = lane + 32 * i;
        qv[i] = c < dh ? qr[c] : 0.0f;
    }
    // Scores: warp w takes keys w·BATCH.. of each round of WARPS·BATCH keys.
    for (unsigned int jb = warp * SOTTO_SPLIT_BATCH; jb < n;
            jb += SOTTO_SPLIT_WARPS * SOTTO_SPLIT_BATCH) {
        float acc[SOTTO_SPLIT_BATCH];
#pragma unroll
        for (int u = 0; u < SOTTO_SPLIT_BATCH; ++u) {
            acc[u] = 0.0f;
            if (jb + u < n) {
                const float* kr = sotto_kv_row(kh, table, sq, j0 + jb + u, n_keys, stride, d);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    unsigned int c = lane + 32 * i;
                    if (c < dh) acc[u] += qv[i] * kr[c];
                }
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
#pragma unroll
            for (int u = 0; u < SOTTO_SPLIT_BATCH; ++u)
                acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
        }
        if (lane == 0) {
#pragma unroll
            for (int u = 0; u < SOTTO_SPLIT_BATCH; ++u)
                if (jb + u < n) sc[jb + u] = acc[u] * scale;
        }
    }
    __syncthreads();
    // The chunk's maximum, exponentials and their sum: warp 0, two keys a lane.
    if (warp == 0) {
        float a = lane < n ? sc[lane] : __int_as_float(0xff800000);
        float b = lane + 32 < n ? sc[lane + 32] : __int_as_float(0xff800000);
        float m = fmaxf(a, b);
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        float ea = lane < n ? expf(a - m) : 0.0f;
        float eb = lane + 32 < n ? expf(b - m) : 0.0f;
        if (lane < n) sc[lane] = ea;
        if (lane + 32 < n) sc[lane + 32] = eb;
        float sum = ea + eb;
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0) {
            stats[0] = m;
            stats[1] = sum;
        }
    }
    __syncthreads();
    // P·V: warp w sums keys w, w + WARPS, …; lane l dims l, l + 32, …; then the warps' sums.
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (unsigned int j = warp; j < n; j += SOTTO_SPLIT_WARPS) {
        const float* vr = sotto_kv_row(vh, table, sq, j0 + j, n_keys, stride, d);
        float p = sc[j];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned int c = lane + 32 * i;
            if (c < dh) o[i] += p * vr[c];
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) pv[warp][lane + 32 * i] = o[i];
    __syncthreads();
    float* out = part + ((size_t)(r * gridDim.y + h) * gridDim.z + s) * (dh + 2);
    if (threadIdx.x < dh) {
        float t = 0.0f;
#pragma unroll
        for (int w = 0; w < SOTTO_SPLIT_WARPS; ++w) t += pv[w][threadIdx.x];
        out[threadIdx.x] = t;
    }
    if (threadIdx.x == 0) {
        out[dh] = stats[0];
        out[dh + 1] = stats[1];
    }
    if (!done) return;
    // The slot is written; the block that counts the (row, head)'s last one merges. The
    // fence before the count makes this block's slot visible to that block, and the one
    // after it (in the last block) orders its reads of the others' slots after theirs.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int* count = done + r * gridDim.y + h;
        last = atomicAdd(count, 1u) == gridDim.z - 1;
        if (last) *count = 0;  // every block of the (row, head) has counted: ready for the next launch
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x < dh) {
        const float* p = part + (size_t)(r * gridDim.y + h) * gridDim.z * (dh + 2);
        merged[(size_t)r * d + h * dh + threadIdx.x] = sotto_merge_slots(p, gridDim.z, dh,
            threadIdx.x);
    }
}

// The slots of sotto_attention_split, merged: out[r, h·dh + c] = Σ_s e^(m_s − M)·o_s[c] /
// Σ_s e^(m_s − M)·l_s with M = max_s m_s. One block of dh threads per (row, head).
extern "C" __global__ void sotto_attention_merge(const float* part, float* out,
        unsigned int d, unsigned int dh, unsigned int splits) {
    sotto_pdl_start();
    unsigned int r = blockIdx.x, h = blockIdx.y, c = threadIdx.x;
    if (c >= dh) return;
    const float* p = part + (size_t)(r * gridDim.y + h) * splits * (dh + 2);
    out[(size_t)r * d + h * dh + c] = sotto_merge_slots(p, splits, dh, c);
}

// One head's attention scores before the softmax, for word alignment (the decoder's
// cross-attention against the window): scores[r, j] = scale · q[r, head] · k[j, head].
// One thread per (r, j). Shape: q [n / n_keys rows, d]; k [n_keys, d]; scores [.., n_keys]
extern "C" __global__ void sotto_attention_scores(const float* q, const float* k,
        float* scores, unsigned int d, unsigned int dh, unsigned int head, unsigned int n_keys,
        unsigned int n, float scale) {
    sotto_pdl_start();
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / n_keys, j = i % n_keys;
    const float* qr = q + (size_t)r * d + head * dh;
    const float* kr = k + (size_t)j * d + head * dh;
    float acc = 0.0f;
    for (unsigned int c = 0; c < dh; ++c) acc += qr[c] * kr[c];
    scores[i] = acc * scale;
}

// softmax(q kᵀ · scale) v, flash style: no score matrix in memory. A block takes 16 query
// rows of one head (blockIdx.x: row tile, blockIdx.y: head), 8 threads per row, and walks
// the keys in tiles of 64 through shared memory with a running maximum and sum per row
// (online softmax); thread j of a row scores keys j, j + 8, … of each tile and owns output
// dims 8j..8j + 7. Every row sees all n_keys keys (no mask), shared by all rows (the
// encoder's self-attention, the decoder's cross-attention). Head width 64.
// Shape: q, out [n_rows, d]; k, v [n_keys, d]; d = heads·64
#define SOTTO_FA_ROWS 16
#define SOTTO_FA_KEYS 64
#define SOTTO_FA_DH 64
extern "C" __global__ void sotto_flash_attention(const float* q, const float* k, const float* v,
        float* out, unsigned int n_rows, unsigned int n_keys, unsigned int d, float scale) {
    sotto_pdl_start();
    __shared__ float qs[SOTTO_FA_ROWS][SOTTO_FA_DH];
    // One float of padding per key row: the 8 threads of a row read 8 keys' same column.
    __shared__ float ks[SOTTO_FA_KEYS][SOTTO_FA_DH + 1];
    __shared__ float vs[SOTTO_FA_KEYS][SOTTO_FA_DH];
    __shared__ float ps[SOTTO_FA_ROWS][SOTTO_FA_KEYS];
    unsigned int tid = threadIdx.x, r = tid / 8, j = tid % 8;
    unsigned int row0 = blockIdx.x * SOTTO_FA_ROWS, hc = blockIdx.y * SOTTO_FA_DH;
    for (unsigned int i = tid; i < SOTTO_FA_ROWS * SOTTO_FA_DH; i += blockDim.x) {
        unsigned int rr = i / SOTTO_FA_DH, c = i % SOTTO_FA_DH, row = row0 + rr;
        qs[rr][c] = row < n_rows ? q[(size_t)row * d + hc + c] * scale : 0.0f;
    }
    float m = __int_as_float(0xff800000), l = 0.0f, o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = 0.0f;
    for (unsigned int key0 = 0; key0 < n_keys; key0 += SOTTO_FA_KEYS) {
        __syncthreads();  // the previous tile's reads are done
        for (unsigned int i = tid; i < SOTTO_FA_KEYS * SOTTO_FA_DH; i += blockDim.x) {
            unsigned int kk = i / SOTTO_FA_DH, c = i % SOTTO_FA_DH, key = key0 + kk;
            bool in = key < n_keys;
            ks[kk][c] = in ? k[(size_t)key * d + hc + c] : 0.0f;
            vs[kk][c] = in ? v[(size_t)key * d + hc + c] : 0.0f;
        }
        __syncthreads();
        float s[8], mt = __int_as_float(0xff800000);
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            unsigned int kk = j + 8 * t;
            float acc = 0.0f;
            for (unsigned int c = 0; c < SOTTO_FA_DH; ++c) acc += qs[r][c] * ks[kk][c];
            s[t] = key0 + kk < n_keys ? acc : __int_as_float(0xff800000);
            mt = fmaxf(mt, s[t]);
        }
        // The row's 8 threads are lanes 8g..8g + 7 of one warp.
        for (int off = 4; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
        float m_new = fmaxf(m, mt);  // finite: every tile holds at least one key
        float alpha = expf(m - m_new);
        float ls = 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            float p = expf(s[t] - m_new);
            ps[r][j + 8 * t] = p;
            ls += p;
        }
        for (int off = 4; off > 0; off >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, off);
        l = l * alpha + ls;
        m = m_new;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] *= alpha;
        __syncthreads();  // ps is complete
        for (unsigned int kk = 0; kk < SOTTO_FA_KEYS; ++kk) {
            float p = ps[r][kk];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] += p * vs[kk][8 * j + e];
        }
    }
    unsigned int row = row0 + r;
    if (row < n_rows) {
        float inv = 1.0f / l;
#pragma unroll
        for (int e = 0; e < 8; ++e) out[(size_t)row * d + hc + 8 * j + e] = o[e] * inv;
    }
}

// Two f32 as one register of two f16 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ unsigned int sotto_pack_half2(float lo, float hi) {
    return (unsigned int)sotto_float_to_half(lo) | ((unsigned int)sotto_float_to_half(hi) << 16);
}

// softmax(q kᵀ · scale) v as sotto_flash_attention computes it, on tensor cores: f16
// operands (q·scale, k, the probabilities, v) and f32 accumulation, the online softmax in
// f32. A block takes 64 query rows of one head (blockIdx.x: row tile, blockIdx.y: head),
// 16 per warp, and walks the keys in tiles of 64 through shared memory (k as keys × dims,
// v transposed, f16 pairs in 32-bit words: row pitch 36 words, so the 8 rows a fragment
// load touches fall in distinct banks). Per tile a warp makes S = Q·Kᵀ (16 × 64) in 32
// sotto_mma_16816, takes the row maxima over each quad of lanes, and feeds exp(S - max)
// straight from S's accumulator registers as the A fragments of P·V (32 more). The next
// tile's loads are issued before that work and land in registers meanwhile. The row sums
// add the rounded probabilities, so the weights that multiply v sum to one. 128 threads.
// Every row sees all n_keys keys (no mask). Head width 64. Needs sm_80. The output goes
// to `out`, or as f16 to `out_half` where that is not null (the next product's input).
// Shape: q, out [n_rows, d]; k, v [n_keys, d]; d = heads·64
#define SOTTO_MMA_ROWS 64
#define SOTTO_MMA_KEYS 64
#define SOTTO_MMA_PITCH 36
#define SOTTO_MMA_THREADS 128
// f32 pairs of k, and of v, each thread carries from global memory per key tile.
#define SOTTO_MMA_LOADS (SOTTO_MMA_KEYS * 32 / SOTTO_MMA_THREADS)

// Thread tid's share of the key tile at key0 (k as key × dim pairs, v as key pairs × dim;
// zeros past n_keys), into registers: issued before a tile's products, so the loads are
// in flight while the tensor cores work.
__device__ __forceinline__ void sotto_mma_fetch(const float* k, const float* v,
        unsigned int key0, unsigned int n_keys, unsigned int d, unsigned int hc,
        unsigned int tid, float (*kn)[2], float (*vn)[2]) {
#pragma unroll
    for (int j = 0; j < SOTTO_MMA_LOADS; ++j) {
        unsigned int i = tid + j * SOTTO_MMA_THREADS, key = key0 + i / 32;
        const float* x = k + (size_t)key * d + hc + 2 * (i % 32);
        kn[j][0] = key < n_keys ? x[0] : 0.0f;
        kn[j][1] = key < n_keys ? x[1] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < SOTTO_MMA_LOADS; ++j) {
        unsigned int i = tid + j * SOTTO_MMA_THREADS, key = key0 + 2 * (i / SOTTO_FA_DH);
        const float* x = v + (size_t)key * d + hc + i % SOTTO_FA_DH;
        vn[j][0] = key < n_keys ? x[0] : 0.0f;
        vn[j][1] = key + 1 < n_keys ? x[d] : 0.0f;
    }
}
extern "C" __global__ void sotto_flash_attention_mma(const float* q, const float* k,
        const float* v, float* out, unsigned int n_rows, unsigned int n_keys, unsigned int d,
        float scale, unsigned short* out_half) {
    sotto_pdl_start();
#if SOTTO_MMA
    __shared__ unsigned int ks[SOTTO_MMA_KEYS][SOTTO_MMA_PITCH];  // [key][dim pair]
    __shared__ unsigned int vt[SOTTO_FA_DH][SOTTO_MMA_PITCH];     // [dim][key pair]
    const float neg_inf = __int_as_float(0xff800000);
    unsigned int tid = threadIdx.x, lane = tid % 32, g = lane / 4, c = 2 * (lane % 4);
    unsigned int hc = blockIdx.y * SOTTO_FA_DH;
    unsigned int r0 = blockIdx.x * SOTTO_MMA_ROWS + (tid / 32) * 16 + g, r1 = r0 + 8;
    // Q·scale as A fragments, one per 16 dims.
    unsigned int qa[4][4];
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned int row = i & 1 ? r1 : r0, col = hc + 16 * s + 8 * (i >> 1) + c;
            bool in = row < n_rows;
            const float* x = q + (size_t)row * d + col;
            qa[s][i] = sotto_pack_half2(in ? x[0] * scale : 0.0f, in ? x[1] * scale : 0.0f);
        }
    float o[8][4], m0 = neg_inf, m1 = neg_inf, l0 = 0.0f, l1 = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[t][i] = 0.0f;
    float kn[SOTTO_MMA_LOADS][2], vn[SOTTO_MMA_LOADS][2];
    sotto_mma_fetch(k, v, 0, n_keys, d, hc, tid, kn, vn);
    for (unsigned int key0 = 0; key0 < n_keys; key0 += SOTTO_MMA_KEYS) {
        __syncthreads();  // the previous tile's reads are done
#pragma unroll
        for (int j = 0; j < SOTTO_MMA_LOADS; ++j) {
            unsigned int i = tid + j * SOTTO_MMA_THREADS;
            ks[i / 32][i % 32] = sotto_pack_half2(kn[j][0], kn[j][1]);
            vt[i % SOTTO_FA_DH][i / SOTTO_FA_DH] = sotto_pack_half2(vn[j][0], vn[j][1]);
        }
        __syncthreads();
        if (key0 + SOTTO_MMA_KEYS < n_keys)
            sotto_mma_fetch(k, v, key0 + SOTTO_MMA_KEYS, n_keys, d, hc, tid, kn, vn);
        float s[8][4];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
#pragma unroll
            for (int i = 0; i < 4; ++i) s[t][i] = 0.0f;
#pragma unroll
            for (int st = 0; st < 4; ++st) {
                unsigned int b[2] = {ks[8 * t + g][8 * st + c / 2], ks[8 * t + g][8 * st + 4 + c / 2]};
                sotto_mma_16816(s[t], qa[st], b);
            }
        }
        float mt0 = neg_inf, mt1 = neg_inf;
#pragma unroll
        for (int t = 0; t < 8; ++t)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                if (key0 + 8 * t + c + (i & 1) >= n_keys) s[t][i] = neg_inf;
                if (i < 2) mt0 = fmaxf(mt0, s[t][i]);
                else mt1 = fmaxf(mt1, s[t][i]);
            }
        // A row's 16 × 4 scores sit in the 4 lanes of a quad.
        for (int off = 1; off < 4; off <<= 1) {
            mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, off));
            mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, off));
        }
        float mn0 = fmaxf(m0, mt0), mn1 = fmaxf(m1, mt1);  // finite: a tile has a key
        float a0 = expf(m0 - mn0), a1 = expf(m1 - mn1);
        m0 = mn0;
        m1 = mn1;
        l0 *= a0;
        l1 *= a1;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
            o[t][0] *= a0;
            o[t][1] *= a0;
            o[t][2] *= a1;
            o[t][3] *= a1;
        }
        // P·V over the tile's keys, 16 at a time: S's accumulators of key tiles 2·st and
        // 2·st + 1 are exactly P's A fragment for those 16 keys.
#pragma unroll
        for (int st = 0; st < 4; ++st) {
            unsigned int pa[4];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float* x = s[2 * st + hf];
                unsigned short p0 = sotto_float_to_half(expf(x[0] - m0));
                unsigned short p1 = sotto_float_to_half(expf(x[1] - m0));
                unsigned short p2 = sotto_float_to_half(expf(x[2] - m1));
                unsigned short p3 = sotto_float_to_half(expf(x[3] - m1));
                l0 += sotto_half_to_float(p0) + sotto_half_to_float(p1);
                l1 += sotto_half_to_float(p2) + sotto_half_to_float(p3);
                pa[2 * hf] = (unsigned int)p0 | ((unsigned int)p1 << 16);
                pa[2 * hf + 1] = (unsigned int)p2 | ((unsigned int)p3 << 16);
            }
#pragma unroll
            for (int t = 0; t < 8; ++t) {
                unsigned int b[2] = {vt[8 * t + g][8 * st + c / 2], vt[8 * t + g][8 * st + 4 + c / 2]};
                sotto_mma_16816(o[t], pa, b);
            }
        }
    }
    for (int off = 1; off < 4; off <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, off);
        l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
        unsigned int col = hc + 8 * t + c;
        float y[4] = {o[t][0] * inv0, o[t][1] * inv0, o[t][2] * inv1, o[t][3] * inv1};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            unsigned int row = i < 2 ? r0 : r1;
            if (row >= n_rows) continue;
            size_t at = (size_t)row * d + col + (i & 1);
            if (out_half)
                out_half[at] = sotto_float_to_half(y[i]);
            else
                out[at] = y[i];
        }
    }
#endif
}
"#
    };
}

/// [`device_prelude`]'s text: what NVRTC compiles before [`KERNELS`].
pub const DEVICE_PRELUDE: &str = device_prelude!();
/// The kernels without the device helpers.
pub const KERNELS: &str = kernel_source!();
/// CUDA C source of every kernel, as NVRTC compiles it.
pub const SOURCE: &str = concat!(device_prelude!(), kernel_source!());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_defined_once_as_a_kernel() {
        for name in NAMES {
            let def = format!("extern \"C\" __global__ void {name}(");
            assert_eq!(SOURCE.matches(&def).count(), 1, "{name}");
        }
        assert_eq!(
            SOURCE.matches("extern \"C\" __global__").count(),
            NAMES.len()
        );
    }

    #[test]
    fn block_sizes_match_sotto_quant() {
        let b = |t: QuantType| t.block_bytes();
        let line = format!(
            "T == 0 ? {} : T == 1 ? {} : T == 2 ? {} : T == 3 ? {} : {};",
            b(QuantType::Q4_0),
            b(QuantType::Q4_1),
            b(QuantType::Q5_0),
            b(QuantType::Q5_1),
            b(QuantType::Q8_0)
        );
        assert!(SOURCE.contains(&line), "sotto_qbytes differs from {line}");
        assert_eq!(QuantType::BLOCK, QK);
    }

    #[test]
    fn every_weight_type_has_each_kernel_family() {
        let families = [
            "sotto_dequantize",
            "sotto_dequantize_half",
            "sotto_mul_mat_vec",
            "sotto_mul_mat_vec3",
            "sotto_embed",
        ];
        for family in families {
            for t in QuantType::WEIGHTS {
                let name = for_type(family, t).unwrap_or_else(|| panic!("{family} {t}"));
                assert!(name.ends_with(&t.to_string()), "{name} for {t}");
            }
            assert_eq!(for_type(family, QuantType::Q8_1), None);
        }
        // `sotto_dequantize` does not pick up its `_half` sibling.
        assert_eq!(
            for_type("sotto_dequantize", QuantType::Q5_1),
            Some("sotto_dequantize_q5_1")
        );
        assert!(SOURCE.contains(&format!("#define SOTTO_MMV_ROWS {MMV_ROWS}\n")));
        assert!(SOURCE.contains(&format!("#define SOTTO_MMA_ROWS {MMA_ROWS}\n")));
        assert!(SOURCE.contains(&format!("#define SOTTO_MMA_THREADS {MMA_BLOCK}\n")));
        assert!(SOURCE.contains(&format!("#define SOTTO_SPLIT_BLOCK {SPLIT_BLOCK}\n")));
        assert!(SOURCE.contains(&format!("#define SOTTO_SPLIT_KEYS {SPLIT_KEYS}\n")));
        let per = format!("#define SOTTO_SHORTLIST_PER {SHORTLIST_PER}\n");
        assert!(SOURCE.contains(&per));
        for (name, v) in [("BIAS", MMV_BIAS), ("GELU", MMV_GELU), ("ADD", MMV_ADD)] {
            assert!(
                SOURCE.contains(&format!("#define SOTTO_MMV_{name} {v}\n")),
                "{name}"
            );
        }
    }
}
