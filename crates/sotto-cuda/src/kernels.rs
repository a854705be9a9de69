//! sotto's CUDA kernels, as CUDA C compiled by NVRTC at run time.
//!
//! One translation unit, no headers (NVRTC installs differ in which headers they ship):
//! f16 is converted with the PTX `cvt` instruction. Every kernel matches a CPU reference:
//! `sotto_compute::kernels` scalar paths (layer norm, GELU with erf, softmax, add, f16) and
//! `sotto_quant::dequantize_row` (ggml's q8_0 and q4_0 blocks). Element counts are
//! `unsigned int`: [`crate::launch`] refuses larger shapes before a launch.

/// The kernels' entry points, in the order [`SOURCE`] defines them.
pub const NAMES: [&str; 7] = [
    "sotto_add_f32",
    "sotto_gelu_f32",
    "sotto_layer_norm_f32",
    "sotto_softmax_rows_f32",
    "sotto_f16_to_f32",
    "sotto_dequantize_q8_0",
    "sotto_dequantize_q4_0",
];

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
