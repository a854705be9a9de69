//! Device buffers addressed by raw pointers and the ops of the Whisper forward: kernel
//! launches on one stream and cuBLAS products.
//!
//! The model's context has event tracking off: every buffer of a session lives and dies on
//! that session's stream, and the weights are written once (then synchronized) before any
//! session reads them. Raw pointers let a step address rows and layers by offset, and stay
//! fixed, as a CUDA graph of the decode step will need.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::{
    CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};

use crate::plan::{self, GemmShape};
use crate::{driver, kernels, launch, CudaError, QuantType, Result};

/// A device allocation and its address. Freed (asynchronously, on its stream) when dropped.
pub(crate) struct Buf<T> {
    _slice: CudaSlice<T>,
    ptr: u64,
    len: usize,
}

impl<T: DeviceRepr> Buf<T> {
    fn from_slice(slice: CudaSlice<T>, stream: &CudaStream) -> Self {
        let len = slice.len();
        let ptr = slice.device_ptr(stream).0;
        Buf {
            _slice: slice,
            ptr,
            len,
        }
    }

    pub fn zeros(stream: &Arc<CudaStream>, n: usize) -> Result<Self>
    where
        T: ValidAsZeroBits,
    {
        // cuMemAlloc refuses 0 bytes; an empty buffer still gets one element.
        let slice = stream.alloc_zeros::<T>(n.max(1)).map_err(driver("alloc"))?;
        let mut b = Self::from_slice(slice, stream);
        b.len = n;
        Ok(b)
    }

    pub fn upload(stream: &Arc<CudaStream>, x: &[T]) -> Result<Self> {
        let slice = stream.clone_htod(x).map_err(driver("upload"))?;
        Ok(Self::from_slice(slice, stream))
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `n` elements (contents are not kept).
    pub fn ensure(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<()>
    where
        T: ValidAsZeroBits,
    {
        if self.len < n {
            *self = Self::zeros(stream, n)?;
        }
        Ok(())
    }
}

/// Storage type of the weights of matrix products on the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Precision {
    /// f16 weights and f16-rounded activations into the products, f32 accumulation and
    /// outputs (tensor cores). The default. Weights in ggml block types stay in their
    /// blocks: decoder steps read them directly (f32 activations), and larger products
    /// dequantize one weight at a time to f16 for cuBLAS.
    #[default]
    F16,
    /// f32 weights and activations, f32 products: slower and twice the memory, for checking
    /// the GPU against the CPU closely.
    F32,
}

impl Precision {
    fn cuda_type(self) -> blas_sys::cudaDataType_t {
        match self {
            Precision::F16 => blas_sys::cudaDataType_t::CUDA_R_16F,
            Precision::F32 => blas_sys::cudaDataType_t::CUDA_R_32F,
        }
    }
}

/// A linear layer on the device. Shape: weight [n_out, n_in] in `precision`, or in ggml
/// blocks of `qtype` (rows of n_in / 32 blocks); bias [n_out].
pub(crate) struct DevLinear {
    pub w: Buf<u8>,
    pub qtype: Option<QuantType>,
    pub bias: Option<Buf<f32>>,
    pub n_out: usize,
    pub n_in: usize,
}

/// Layer norm parameters. Shape: [d] each.
pub(crate) struct DevNorm {
    pub gamma: Buf<f32>,
    pub beta: Buf<f32>,
    pub eps: f32,
}

/// The kernels of one loaded module, by name.
pub(crate) struct Kernels {
    funcs: HashMap<&'static str, CudaFunction>,
}

impl Kernels {
    pub fn load(module: &Arc<CudaModule>) -> Result<Self> {
        let funcs = kernels::NAMES
            .iter()
            .map(|&name| Ok((name, module.load_function(name).map_err(driver(name))?)))
            .collect::<Result<_>>()?;
        Ok(Kernels { funcs })
    }

    fn get(&self, name: &'static str) -> &CudaFunction {
        // Every name in kernels::NAMES was loaded in `load`.
        &self.funcs[name]
    }
}

/// Ops queued on one stream. Pointers must address buffers large enough for the shapes
/// given; the session sizes its buffers from the same shapes before each call.
pub(crate) struct Dev<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub blas: &'a CudaBlas,
    pub k: &'a Kernels,
    pub precision: Precision,
    /// f16 scratch for converted product inputs, and its length in elements.
    pub half: u64,
    pub half_len: usize,
    /// f16 scratch for a quantized weight dequantized for cuBLAS, and its length.
    pub wq: u64,
    pub wq_len: usize,
}

fn elementwise(op: &'static str, n: usize) -> Result<Option<(LaunchConfig, u32)>> {
    let n32 = launch::count_u32(op, n)?;
    Ok(launch::elementwise(op, n)?.map(|l| (l.into(), n32)))
}

impl Dev<'_> {
    fn run(
        &self,
        name: &'static str,
        mut args: cudarc::driver::LaunchArgs<'_>,
        cfg: LaunchConfig,
    ) -> Result<()> {
        // SAFETY: each caller pushes exactly the parameters its kernel declares (pointers as
        // u64), and the session sized every buffer for the shapes it passes.
        unsafe { args.launch(cfg) }.map_err(driver(name))?;
        Ok(())
    }

    /// `a += b`. Shape: [n]
    pub fn add(&self, a: u64, b: u64, n: usize) -> Result<()> {
        let Some((cfg, n)) = elementwise("add", n)? else {
            return Ok(());
        };
        let name = "sotto_add_f32";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&a).arg(&b).arg(&n);
        self.run(name, l, cfg)
    }

    /// Layer norm of each row. Shape: x, out [n_rows, d]
    pub fn layer_norm(&self, x: u64, norm: &DevNorm, out: u64, n_rows: usize) -> Result<()> {
        let d = norm.gamma.len();
        let Some(l) = launch::rows("layer_norm", n_rows, d)? else {
            return Ok(());
        };
        let name = "sotto_layer_norm_f32";
        let (g, b, d) = (norm.gamma.ptr(), norm.beta.ptr(), d as u32);
        let mut a = self.stream.launch_builder(self.k.get(name));
        a.arg(&x).arg(&g).arg(&b).arg(&out).arg(&d).arg(&norm.eps);
        self.run(name, a, l.into())
    }

    fn to_half(&self, x: u64, n: usize) -> Result<()> {
        if n > self.half_len {
            return Err(CudaError::Shape {
                op: "f32_to_f16",
                msg: format!("{n} values exceed the {} of f16 scratch", self.half_len),
            });
        }
        let Some((cfg, n)) = elementwise("f32_to_f16", n)? else {
            return Ok(());
        };
        let name = "sotto_f32_to_f16";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&x).arg(&self.half).arg(&n);
        self.run(name, l, cfg)
    }

    /// `out = x · Wᵀ + b`, then GELU when `gelu`. Shape: x [m, n_in]; out [m, n_out]
    ///
    /// Quantized weights: up to [`kernels::MMV_ROWS`] rows (decoder steps) go through the
    /// `sotto_mul_mat_vec` kernel, which reads the blocks; more rows (the encoder, prompt
    /// passes) dequantize the weight to f16 scratch for a cuBLAS product.
    pub fn linear(&self, w: &DevLinear, x: u64, m: usize, out: u64, gelu: bool) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        match w.qtype {
            Some(t) if m <= kernels::MMV_ROWS => self.mul_mat_vec(t, w, x, m, out)?,
            _ => {
                let g = plan::linear_gemm(m, w.n_out, w.n_in)?;
                let a = match w.qtype {
                    Some(t) => self.dequantize_half(t, w)?,
                    None => w.w.ptr(),
                };
                let b_in = match self.precision {
                    Precision::F16 => {
                        self.to_half(x, m * w.n_in)?;
                        self.half
                    }
                    Precision::F32 => x,
                };
                self.gemm(g, a, b_in, out)?;
            }
        }
        if w.bias.is_none() && !gelu {
            return Ok(());
        }
        let n = m * w.n_out;
        let Some((cfg, n)) = elementwise("bias_act", n)? else {
            return Ok(());
        };
        let (b, has) = match &w.bias {
            Some(b) => (b.ptr(), 1i32),
            None => (0u64, 0i32),
        };
        let (cols, gelu) = (w.n_out as u32, gelu as i32);
        let name = "sotto_bias_act";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&out).arg(&b).arg(&cols).arg(&n).arg(&has).arg(&gelu);
        self.run(name, l, cfg)
    }

    /// `out = x · Wᵀ` for at most [`kernels::MMV_ROWS`] rows, W in ggml blocks.
    fn mul_mat_vec(&self, t: QuantType, w: &DevLinear, x: u64, m: usize, out: u64) -> Result<()> {
        let op = "mul_mat_vec";
        let name = kernels::for_type("sotto_mul_mat_vec", t)
            .ok_or(CudaError::Unsupported { op, ty: t })?;
        let Some(cfg) = launch::mul_mat_vec(op, m, w.n_out, w.n_in)? else {
            return Ok(());
        };
        let (n_in, n_out, m) = (w.n_in as u32, w.n_out as u32, m as u32);
        let wp = w.w.ptr();
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&wp).arg(&x).arg(&out).arg(&n_in).arg(&n_out).arg(&m);
        self.run(name, l, cfg.into())
    }

    /// Dequantizes W into the f16 weight scratch and returns its address.
    fn dequantize_half(&self, t: QuantType, w: &DevLinear) -> Result<u64> {
        let op = "dequantize_half";
        let n = w.n_out * w.n_in;
        if n > self.wq_len {
            return Err(CudaError::Shape {
                op,
                msg: format!("{n} weights exceed the {} of f16 scratch", self.wq_len),
            });
        }
        let name = kernels::for_type("sotto_dequantize_half", t)
            .ok_or(CudaError::Unsupported { op, ty: t })?;
        let Some((cfg, n)) = elementwise(op, n)? else {
            return Ok(self.wq);
        };
        let (q, y) = (w.w.ptr(), self.wq);
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&q).arg(&y).arg(&n);
        self.run(name, l, cfg)?;
        Ok(self.wq)
    }

    /// `C = Aᵀ B` in column-major terms (see [`plan::linear_gemm`]); A and B in the
    /// precision's type, C f32, f32 accumulation.
    fn gemm(&self, g: GemmShape, a: u64, b: u64, c: u64) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let ty = self.precision.cuda_type();
        // SAFETY: a, b and c address buffers of at least k·m, k·n and m·n elements of their
        // types (the session sized them from the same shapes); alpha and beta are host f32
        // as CUBLAS_COMPUTE_32F reads them (the handle's default host pointer mode).
        unsafe {
            blas::gemm_ex(
                *self.blas.handle(),
                blas_sys::cublasOperation_t::CUBLAS_OP_T,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                g.m,
                g.n,
                g.k,
                (&alpha) as *const f32 as *const _,
                a as *const _,
                ty,
                g.lda,
                b as *const _,
                ty,
                g.ldb,
                (&beta) as *const f32 as *const _,
                c as *mut _,
                blas_sys::cudaDataType_t::CUDA_R_32F,
                g.ldc,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Library {
            op: "cublasGemmEx",
            msg: format!("{e:?} ({g:?})"),
        })
    }

    /// im2col of a conv1d with kernel 3, padding 1; x(t, c) at `x + (t·ts + c·cs)`.
    /// Shape: cols [t_out, c_in·3]
    #[allow(clippy::too_many_arguments)]
    pub fn im2col(
        &self,
        x: u64,
        cols: u64,
        t_in: usize,
        c_in: usize,
        stride: usize,
        ts: usize,
        cs: usize,
    ) -> Result<usize> {
        let t_out = plan::conv_out_len(t_in, stride);
        let Some((cfg, _)) = elementwise("im2col", t_out * c_in * 3)? else {
            return Ok(t_out);
        };
        let u = |v: usize| launch::count_u32("im2col", v);
        let (t_in, c_in, t_out32, stride, ts, cs) =
            (u(t_in)?, u(c_in)?, u(t_out)?, u(stride)?, u(ts)?, u(cs)?);
        let name = "sotto_im2col";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&x)
            .arg(&cols)
            .arg(&t_in)
            .arg(&c_in)
            .arg(&t_out32)
            .arg(&stride)
            .arg(&ts)
            .arg(&cs);
        self.run(name, l, cfg)?;
        Ok(t_out)
    }

    /// `x[r] = table[tok[r]] + pos[pos0 + r % n_new]`. Shape: tok [m]; x [m, d]
    #[allow(clippy::too_many_arguments)]
    pub fn embed(
        &self,
        table: &DevLinear,
        tok: u64,
        pos: u64,
        x: u64,
        m: usize,
        d: usize,
        n_new: usize,
        pos0: usize,
    ) -> Result<()> {
        let Some((cfg, n)) = elementwise("embed", m * d)? else {
            return Ok(());
        };
        let name = match (table.qtype, self.precision) {
            (Some(t), _) => kernels::for_type("sotto_embed", t)
                .ok_or(CudaError::Unsupported { op: "embed", ty: t })?,
            (None, Precision::F16) => "sotto_embed_f16",
            (None, Precision::F32) => "sotto_embed_f32",
        };
        let table = table.w.ptr();
        let (d, n_new, pos0) = (d as u32, n_new as u32, pos0 as u32);
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&table)
            .arg(&tok)
            .arg(&pos)
            .arg(&x)
            .arg(&d)
            .arg(&n_new)
            .arg(&pos0)
            .arg(&n);
        self.run(name, l, cfg)
    }

    /// Writes `batch · n_new` new rows into the cache at position `pos0` of each sequence.
    /// Shape: src [batch, n_new, d]; cache [.., seq_stride / d, d]
    #[allow(clippy::too_many_arguments)]
    pub fn kv_write(
        &self,
        src: u64,
        cache: u64,
        batch: usize,
        n_new: usize,
        d: usize,
        pos0: usize,
        seq_stride: usize,
    ) -> Result<()> {
        let Some((cfg, n)) = elementwise("kv_write", batch * n_new * d)? else {
            return Ok(());
        };
        let u = |v: usize| launch::count_u32("kv_write", v);
        let (d, n_new, pos0, seq_stride) = (u(d)?, u(n_new)?, u(pos0)?, u(seq_stride)?);
        let name = "sotto_kv_write";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&src)
            .arg(&cache)
            .arg(&d)
            .arg(&n_new)
            .arg(&pos0)
            .arg(&seq_stride)
            .arg(&n);
        self.run(name, l, cfg)
    }

    /// Multi-head attention of `rows` query rows (sequences of `n_new` rows each) over
    /// `n_keys` keys per sequence (`kv_seq_stride` elements apart; 0 when shared), causal
    /// from `q_pos0` when `causal`. Shape: q, out [rows, d]
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: u64,
        k: u64,
        v: u64,
        out: u64,
        rows: usize,
        n_new: usize,
        d: usize,
        n_head: usize,
        kv_seq_stride: usize,
        n_keys: usize,
        causal: Option<usize>,
    ) -> Result<()> {
        let dh = d / n_head.max(1);
        let cfg = plan::attention(rows, n_head, dh, n_keys)?;
        let u = |v: usize| launch::count_u32("attention", v);
        let scale = 1.0 / (dh as f32).sqrt();
        let (d, dh, n_new, stride, nk) = (u(d)?, u(dh)?, u(n_new)?, u(kv_seq_stride)?, u(n_keys)?);
        let (is_causal, pos0) = (causal.is_some() as i32, u(causal.unwrap_or(0))?);
        let name = "sotto_attention";
        let mut l = self.stream.launch_builder(self.k.get(name));
        l.arg(&q)
            .arg(&k)
            .arg(&v)
            .arg(&out)
            .arg(&d)
            .arg(&dh)
            .arg(&n_new)
            .arg(&stride)
            .arg(&nk)
            .arg(&is_causal)
            .arg(&pos0)
            .arg(&scale);
        self.run(name, l, cfg.into())
    }

    /// Copies `n` f32 values on the device.
    pub fn copy_f32(&self, dst: u64, src: u64, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the caller passes ranges of n f32 inside live buffers of this stream.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst, src, n * 4, self.stream.cu_stream())
        }
        .map_err(driver("cuMemcpyDtoDAsync"))
    }

    /// Copies host values into device memory at `dst` (queued; `x` must outlive the copy,
    /// which [`Dev::download`]'s synchronization guarantees for the session's step).
    pub fn upload_to<T>(&self, dst: u64, x: &[T]) -> Result<()> {
        // SAFETY: dst holds at least x.len() elements; the stream is synchronized before
        // the step returns, so `x` outlives the copy.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, x, self.stream.cu_stream()) }
            .map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Waits for the stream and copies `out.len()` f32 from `src`.
    pub fn download(&self, src: u64, out: &mut [f32]) -> Result<()> {
        // SAFETY: src holds out.len() f32; the synchronize below completes the copy before
        // `out` is read.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(out, src, self.stream.cu_stream()) }
            .map_err(driver("cuMemcpyDtoHAsync"))?;
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }
}
