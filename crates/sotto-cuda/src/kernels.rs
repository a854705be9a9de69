//! sotto's CUDA kernels, as CUDA C compiled by NVRTC at run time.
//!
//! One translation unit, no headers (NVRTC installs differ in which headers they ship):
//! f16 is converted with the PTX `cvt` instruction. Every kernel matches a CPU reference:
//! `sotto_compute::kernels` scalar paths (layer norm, GELU with erf, softmax, add, f16) and
//! `sotto_quant::dequantize_row` (ggml's q8_0 and q4_0 blocks). Element counts are
//! `unsigned int`: [`crate::launch`] refuses larger shapes before a launch.

/// The kernels' entry points, in the order [`SOURCE`] defines them.
pub const NAMES: [&str; 14] = [
    "sotto_add_f32",
    "sotto_gelu_f32",
    "sotto_layer_norm_f32",
    "sotto_softmax_rows_f32",
    "sotto_f16_to_f32",
    "sotto_dequantize_q8_0",
    "sotto_dequantize_q4_0",
    "sotto_f32_to_f16",
    "sotto_bias_act",
    "sotto_im2col",
    "sotto_embed_f16",
    "sotto_embed_f32",
    "sotto_kv_write",
    "sotto_attention",
];

/// Threads per block of `sotto_attention` (a power of two, at least the head width 64).
pub const ATTENTION_BLOCK: u32 = 128;

/// Bytes in one ggml q8_0 block: f16 scale + 32 int8.
pub const Q8_0_BLOCK_BYTES: usize = 34;
/// Bytes in one ggml q4_0 block: f16 scale + 16 bytes of nibbles.
pub const Q4_0_BLOCK_BYTES: usize = 18;
/// Values in one q8_0 or q4_0 block.
pub const QK: usize = 32;

/// CUDA C source of every kernel. Row kernels take one block per row and a power-of-two
/// block size with `blockDim.x * 4` bytes of dynamic shared memory.
pub const SOURCE: &str = r#"
__device__ __forceinline__ float sotto_half_to_float(unsigned short h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

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
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += b[i];
}

// Exact GELU, 0.5 x (1 + erf(x / sqrt 2)), as Whisper uses.
extern "C" __global__ void sotto_gelu_f32(float* x, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// out[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta, one block per row.
extern "C" __global__ void sotto_layer_norm_f32(const float* x, const float* gamma,
        const float* beta, float* out, unsigned int n_cols, float eps) {
    extern __shared__ float sh[];
    const float* row = x + (size_t)blockIdx.x * n_cols;
    float* o = out + (size_t)blockIdx.x * n_cols;
    float s = 0.0f;
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) s += row[j];
    float mean = sotto_block_sum(s, sh) / (float)n_cols;
    float v = 0.0f;
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        float d = row[j] - mean;
        v += d * d;
    }
    float var = sotto_block_sum(v, sh) / (float)n_cols;
    float inv = 1.0f / sqrtf(var + eps);
    for (unsigned int j = threadIdx.x; j < n_cols; j += blockDim.x)
        o[j] = (row[j] - mean) * inv * gamma[j] + beta[j];
}

// In-place softmax of each row, one block per row.
extern "C" __global__ void sotto_softmax_rows_f32(float* x, unsigned int n_cols) {
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
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = sotto_half_to_float(src[i]);
}

// ggml q8_0: per 32 values, f16 d then 32 int8 q; y = d * q. One thread per value.
extern "C" __global__ void sotto_dequantize_q8_0(const unsigned char* q, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned char* b = q + (size_t)(i / 32) * 34;
    float d = sotto_half_to_float((unsigned short)(b[0] | (b[1] << 8)));
    y[i] = d * (float)(signed char)b[2 + i % 32];
}

// ggml q4_0: per 32 values, f16 d then 16 bytes; value j < 16 is the low nibble of byte j,
// value j + 16 the high nibble; y = d * (nibble - 8).
extern "C" __global__ void sotto_dequantize_q4_0(const unsigned char* q, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned char* b = q + (size_t)(i / 32) * 18;
    float d = sotto_half_to_float((unsigned short)(b[0] | (b[1] << 8)));
    unsigned int j = i % 32;
    int nib = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
    y[i] = d * (float)(nib - 8);
}

__device__ __forceinline__ unsigned short sotto_float_to_half(float f) {
    unsigned short h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float sotto_gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// Narrows f32 to f16 (round to nearest even), for the f16 matrix products.
extern "C" __global__ void sotto_f32_to_f16(const float* x, unsigned short* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = sotto_float_to_half(x[i]);
}

// y[r, c] += b[c] when has_bias, then exact GELU when gelu. Shape: y [n / n_cols, n_cols]
extern "C" __global__ void sotto_bias_act(float* y, const float* b, unsigned int n_cols,
        unsigned int n, int has_bias, int gelu) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = y[i];
    if (has_bias) v += b[i % n_cols];
    if (gelu) v = sotto_gelu(v);
    y[i] = v;
}

// Columns of a conv1d with kernel 3 and padding 1: cols[t, c·3 + kk] = x(t·stride + kk − 1, c),
// zero outside [0, t_in). x(t, c) sits at x[t·ts + c·cs], so channel-major (the mel) and
// time-major (the first conv's output) inputs both work. Shape: cols [t_out, c_in·3]
extern "C" __global__ void sotto_im2col(const float* x, float* cols, unsigned int t_in,
        unsigned int c_in, unsigned int t_out, unsigned int stride, unsigned int ts,
        unsigned int cs) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int kc = c_in * 3;
    if (i >= t_out * kc) return;
    unsigned int t = i / kc, r = i % kc;
    unsigned int c = r / 3, kk = r % 3;
    int ti = (int)(t * stride + kk) - 1;
    cols[i] = (ti >= 0 && ti < (int)t_in) ? x[(size_t)ti * ts + (size_t)c * cs] : 0.0f;
}

// x[r, c] = table[tok[r], c] + pos[pos0 + r % n_new, c]; rows are [batch, n_new] flattened.
extern "C" __global__ void sotto_embed_f16(const unsigned short* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, unsigned int pos0,
        unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    x[i] = sotto_half_to_float(table[(size_t)tok[r] * d + c]) + pos[(size_t)(pos0 + r % n_new) * d + c];
}

extern "C" __global__ void sotto_embed_f32(const float* table, const unsigned int* tok,
        const float* pos, float* x, unsigned int d, unsigned int n_new, unsigned int pos0,
        unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    x[i] = table[(size_t)tok[r] * d + c] + pos[(size_t)(pos0 + r % n_new) * d + c];
}

// Appends new keys or values to the cache: row i of sequence s (src row s·n_new + i) goes to
// position pos0 + i of that sequence. Shape: src [batch, n_new, d]; cache [capacity, n_ctx, d]
// with seq_stride = n_ctx·d; n = batch·n_new·d.
extern "C" __global__ void sotto_kv_write(const float* src, float* cache, unsigned int d,
        unsigned int n_new, unsigned int pos0, unsigned int seq_stride, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int r = i / d, c = i % d;
    unsigned int s = r / n_new, p = pos0 + r % n_new;
    cache[(size_t)s * seq_stride + (size_t)p * d + c] = src[i];
}

// softmax(q kᵀ · scale + mask) v for one query row and one head per block:
// blockIdx.x = row r (sequence s = r / n_new, position in step i = r % n_new),
// blockIdx.y = head h. Keys and values of sequence s start at s·kv_seq_stride (0: every
// row sees the same keys, as in cross-attention). Causal rows see keys 0..=q_pos0 + i,
// others n_keys. Dynamic shared memory: (n_keys + blockDim.x) floats.
// Shape: q, out [rows, d]; k, v [.., n_keys, d] per sequence; d = n_head·dh.
extern "C" __global__ void sotto_attention(const float* q, const float* k, const float* v,
        float* out, unsigned int d, unsigned int dh, unsigned int n_new,
        unsigned int kv_seq_stride, unsigned int n_keys, int causal, unsigned int q_pos0,
        float scale) {
    extern __shared__ float sh[];
    float* sc = sh;
    float* red = sh + n_keys;
    unsigned int r = blockIdx.x, h = blockIdx.y;
    unsigned int s = r / n_new, i = r % n_new;
    unsigned int nk = causal ? q_pos0 + i + 1 : n_keys;
    if (nk > n_keys) nk = n_keys;
    const float* qr = q + (size_t)r * d + h * dh;
    const float* kb = k + (size_t)s * kv_seq_stride + h * dh;
    const float* vb = v + (size_t)s * kv_seq_stride + h * dh;
    float m = __int_as_float(0xff800000);
    for (unsigned int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float* kr = kb + (size_t)j * d;
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
    float* o = out + (size_t)r * d + h * dh;
    for (unsigned int c = threadIdx.x; c < dh; c += blockDim.x) {
        float acc = 0.0f;
        for (unsigned int j = 0; j < nk; ++j) acc += sc[j] * vb[(size_t)j * d + c];
        o[c] = acc * inv;
    }
}
"#;

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
        use sotto_quant::QuantType;
        assert_eq!(QuantType::Q8_0.block_bytes(), Q8_0_BLOCK_BYTES);
        assert_eq!(QuantType::Q4_0.block_bytes(), Q4_0_BLOCK_BYTES);
        assert_eq!(QuantType::Q8_0.row_bytes(QK), Q8_0_BLOCK_BYTES);
    }
}
