//! [`CudaWhisper`]: a Whisper model's weights uploaded once to one GPU, shared by sessions.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use half::f16;
use sotto_formats::{DType, Hparams, TensorData, WhisperFile};
use sotto_quant::QuantType;

use crate::host::HostDevice;
use crate::ops::{Buf, DevLinear, DevNorm, Kernels, Precision, Stream};
use crate::{driver, guard, CudaError, DeviceInfo, Result};

const LN_EPS: f32 = 1e-5;

/// Decoder layers whose cross-attention K and V are one product: 2 × 2 × d outputs, the
/// width of the encoder's MLP buffer that holds the product before it is split.
pub(crate) const CROSS_GROUP: usize = 2;

pub(crate) struct DevAttention {
    pub query: DevLinear,
    pub key: DevLinear,
    pub value: DevLinear,
    pub out: DevLinear,
}

pub(crate) struct DevBlock {
    pub attn_ln: DevNorm,
    pub attn: DevAttention,
    pub cross: Option<(DevNorm, DevAttention)>,
    pub mlp_ln: DevNorm,
    pub mlp_0: DevLinear,
    pub mlp_2: DevLinear,
}

pub(crate) struct DevEncoder {
    /// Shape: [d, n_mels·3]
    pub conv1: DevLinear,
    /// Shape: [d, d·3]
    pub conv2: DevLinear,
    /// Shape: [n_audio_ctx, d]
    pub pos: Buf<f32>,
    pub blocks: Vec<DevBlock>,
    /// Per block, its q, k and v stacked as one product (their weights are views into it);
    /// None where their storage types differ.
    pub qkv: Vec<Option<DevLinear>>,
    pub ln_post: DevNorm,
}

pub(crate) struct DevDecoder {
    /// Shape: [n_vocab, d]; the embedding table and the tied output projection.
    pub token_embedding: DevLinear,
    /// Shape: [n_text_ctx, d]
    pub pos: Buf<f32>,
    pub blocks: Vec<DevBlock>,
    /// The cross-attention K and V of blocks `CROSS_GROUP·g ..` stacked as one product
    /// (K, V of the first block, then of the next); the blocks' K and V weights are views
    /// into it.
    pub cross_kv: Vec<Option<DevLinear>>,
    pub ln: DevNorm,
}

/// Whisper weights on one GPU: matrices in the chosen [`Precision`] (bf16 and f32
/// converted; ggml block types kept in their blocks at F16, dequantized on the host at
/// F32), vectors in f32. Immutable
/// once built; [`crate::CudaSession`]s share it through an `Arc`.
pub struct CudaWhisper {
    hparams: Hparams,
    precision: Precision,
    /// Elements of the largest matrix kept in ggml blocks (0: none): the size of each
    /// session's f16 scratch for dequantizing one for cuBLAS.
    pub(crate) max_quantized: usize,
    info: DeviceInfo,
    pub(crate) kernels: Kernels,
    pub(crate) encoder: DevEncoder,
    pub(crate) decoder: DevDecoder,
    /// Weights are uploaded on this stream; it is synchronized before `new` returns.
    _load_stream: Stream,
    // Dropped last: everything above frees into this context.
    runtime: Runtime,
}

/// What the model's memory belongs to.
enum Runtime {
    Cuda(Arc<CudaContext>),
    Host(Arc<dyn HostDevice>),
}

impl std::fmt::Debug for CudaWhisper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaWhisper")
            .field("device", &self.info.to_string())
            .field("precision", &self.precision)
            .field("hparams", &self.hparams)
            .finish()
    }
}

struct Loader<'a> {
    f: &'a WhisperFile,
    stream: &'a Stream,
    precision: Precision,
    /// Elements of the largest matrix kept in ggml blocks.
    max_quantized: std::cell::Cell<usize>,
}

/// The ggml block type of a stored tensor (None for f32, f16 and the other plain types).
fn quant_type(d: DType) -> Option<QuantType> {
    QuantType::from_ggml_type_id(sotto_formats::ggml::ggml_type_id(d)?)
}

impl Loader<'_> {
    fn err(&self, name: &str, msg: impl std::fmt::Display) -> CudaError {
        CudaError::Model {
            path: self.f.path.clone(),
            msg: format!("tensor {name}: {msg}"),
        }
    }

    fn tensor(&self, name: &str, numel: usize) -> Result<&TensorData> {
        let t = self
            .f
            .tensors
            .get(name)
            .ok_or_else(|| self.err(name, "missing"))?;
        if t.numel() != numel {
            return Err(self.err(
                name,
                format!("shape {:?}, expected {numel} elements", t.shape),
            ));
        }
        Ok(t)
    }

    fn vector(&self, name: &str, n: usize) -> Result<Buf<f32>> {
        let v = self
            .tensor(name, n)?
            .to_f32()
            .map_err(|e| self.err(name, e))?;
        Buf::upload(self.stream, &v)
    }

    /// A [n_out, n_in] matrix (conv weights [d, c_in, 3] flattened) as the precision's
    /// bytes, or ggml blocks kept as they are (with their type): every quantized weight at
    /// F16 precision, the decoder's at F32.
    fn matrix(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<(Buf<u8>, Option<QuantType>)> {
        let (bytes, qtype) = self.matrix_bytes(name, n_out, n_in)?;
        Ok((Buf::upload(self.stream, &bytes)?, qtype))
    }

    /// [`Loader::matrix`]'s bytes, on the host.
    fn matrix_bytes(
        &self,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<(std::borrow::Cow<'_, [u8]>, Option<QuantType>)> {
        let t = self.tensor(name, n_out * n_in)?;
        let bytes = t.data.as_bytes();
        if t.dtype == DType::F16 && self.precision == Precision::F16 {
            if bytes.len() != n_out * n_in * 2 {
                return Err(self.err(name, format!("{} bytes of f16", bytes.len())));
            }
            return Ok((bytes.into(), None));
        }
        let values = match quant_type(t.dtype) {
            Some(q) => {
                if !n_in.is_multiple_of(QuantType::BLOCK)
                    || bytes.len() != q.row_bytes(n_in) * n_out
                {
                    return Err(self.err(
                        name,
                        format!("{} bytes for a {q} [{n_out}, {n_in}] tensor", bytes.len()),
                    ));
                }
                if self.precision == Precision::F16 {
                    self.max_quantized
                        .set(self.max_quantized.get().max(n_out * n_in));
                    return Ok((bytes.into(), Some(q)));
                }
                // At f32 the decoder keeps its blocks: the mat-vec kernels take them for
                // every row count, as the CPU's quantized products do. The CPU counts the
                // cross-attention K/V weights, which read the encoder output once per
                // window, with the encoder's (f32) products.
                if decoder_product(name) {
                    return Ok((bytes.into(), Some(q)));
                }
                let rb = q.row_bytes(n_in);
                let mut v = vec![0f32; n_out * n_in];
                for (row, out) in bytes.chunks_exact(rb).zip(v.chunks_exact_mut(n_in)) {
                    sotto_quant::dequantize_row(q, row, out);
                }
                v
            }
            None => t.to_f32().map_err(|e| self.err(name, e))?,
        };
        let out: Vec<u8> = match self.precision {
            Precision::F16 => values
                .iter()
                .flat_map(|&x| f16::from_f32(x).to_le_bytes())
                .collect(),
            Precision::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        };
        Ok((out.into(), None))
    }

    /// `parts`, the products of the weight tensors `names` over one input (one storage
    /// type, one input width), as one stacked product: their rows in order in one matrix,
    /// their biases in one vector (zeros where a part has none). Each part's weights become
    /// a view into the stacked matrix, so nothing is stored twice. None (the parts as they
    /// were) where their storage types or widths differ.
    fn stack(&self, names: &[String], parts: &mut [&mut DevLinear]) -> Result<Option<DevLinear>> {
        let Some(first) = parts.first() else {
            return Ok(None);
        };
        let (qtype, n_in) = (first.qtype, first.n_in);
        if parts.iter().any(|p| p.qtype != qtype || p.n_in != n_in) {
            return Ok(None);
        }
        let (mut bytes, mut bias) = (Vec::new(), Vec::new());
        let mut offsets = Vec::with_capacity(parts.len());
        for (name, p) in names.iter().zip(parts.iter()) {
            let (b, _) = self.matrix_bytes(name, p.n_out, n_in)?;
            offsets.push((bytes.len(), b.len()));
            bytes.extend_from_slice(&b);
            match &p.bias {
                Some(_) => {
                    let bias_name = name.replace(".weight", ".bias");
                    let t = self.tensor(&bias_name, p.n_out)?;
                    bias.extend(t.to_f32().map_err(|e| self.err(&bias_name, e))?);
                }
                None => bias.resize(bias.len() + p.n_out, 0.0),
            }
        }
        let n_out = bias.len();
        if qtype.is_some() && self.precision == Precision::F16 {
            self.max_quantized
                .set(self.max_quantized.get().max(n_out * n_in));
        }
        let w = Buf::upload(self.stream, &bytes)?;
        for (p, &(at, len)) in parts.iter_mut().zip(&offsets) {
            p.w = w.view(at, len);
        }
        Ok(Some(DevLinear {
            w,
            qtype,
            bias: Some(Buf::upload(self.stream, &bias)?),
            n_out,
            n_in,
        }))
    }

    fn linear(&self, prefix: &str, n_out: usize, n_in: usize, bias: bool) -> Result<DevLinear> {
        let (w, qtype) = self.matrix(&format!("{prefix}.weight"), n_out, n_in)?;
        Ok(DevLinear {
            w,
            qtype,
            bias: match bias {
                true => Some(self.vector(&format!("{prefix}.bias"), n_out)?),
                false => None,
            },
            n_out,
            n_in,
        })
    }

    fn norm(&self, prefix: &str, d: usize) -> Result<DevNorm> {
        Ok(DevNorm {
            gamma: self.vector(&format!("{prefix}.weight"), d)?,
            beta: self.vector(&format!("{prefix}.bias"), d)?,
            eps: LN_EPS,
        })
    }

    fn attention(&self, prefix: &str, d: usize, d_kv: usize) -> Result<DevAttention> {
        Ok(DevAttention {
            query: self.linear(&format!("{prefix}.query"), d, d, true)?,
            key: self.linear(&format!("{prefix}.key"), d, d_kv, false)?,
            value: self.linear(&format!("{prefix}.value"), d, d_kv, true)?,
            out: self.linear(&format!("{prefix}.out"), d, d, true)?,
        })
    }

    fn block(&self, prefix: &str, d: usize, d_cross: Option<usize>) -> Result<DevBlock> {
        let cross = match d_cross {
            Some(d_kv) => Some((
                self.norm(&format!("{prefix}.cross_attn_ln"), d)?,
                self.attention(&format!("{prefix}.cross_attn"), d, d_kv)?,
            )),
            None => None,
        };
        Ok(DevBlock {
            attn_ln: self.norm(&format!("{prefix}.attn_ln"), d)?,
            attn: self.attention(&format!("{prefix}.attn"), d, d)?,
            cross,
            mlp_ln: self.norm(&format!("{prefix}.mlp_ln"), d)?,
            mlp_0: self.linear(&format!("{prefix}.mlp.0"), 4 * d, d, true)?,
            mlp_2: self.linear(&format!("{prefix}.mlp.2"), d, 4 * d, true)?,
        })
    }
}

/// Whether weight tensor `name` is one the CPU multiplies as a decoder product (its
/// activations quantized against ggml blocks): the decoder's, but for the cross-attention
/// K/V (`sotto_model`'s split of the weights, which these names follow).
fn decoder_product(name: &str) -> bool {
    name.starts_with("decoder.")
        && !name.contains("cross_attn.key.")
        && !name.contains("cross_attn.value.")
}

/// Checks what the kernels assume of the shapes: heads divide the widths, and the
/// attention scores of one query row fit in shared memory.
pub(crate) fn check_hparams(path: &std::path::Path, h: &Hparams) -> Result<()> {
    let bad = |msg: String| {
        Err(CudaError::Model {
            path: path.to_path_buf(),
            msg: format!("hyper-parameters: {msg}"),
        })
    };
    let dims = [
        h.n_vocab,
        h.n_audio_ctx,
        h.n_audio_state,
        h.n_audio_head,
        h.n_text_ctx,
        h.n_text_state,
        h.n_text_head,
        h.n_mels,
    ];
    if dims.contains(&0) {
        return bad(format!("a dimension is zero: {h:?}"));
    }
    if !h.n_audio_state.is_multiple_of(h.n_audio_head)
        || !h.n_text_state.is_multiple_of(h.n_text_head)
    {
        return bad(format!("state is not a multiple of the head count: {h:?}"));
    }
    let (da, dt) = (h.n_audio_state, h.n_text_state);
    crate::plan::attention(1, h.n_audio_head, da / h.n_audio_head, h.n_audio_ctx)?;
    crate::plan::attention(1, h.n_text_head, dt / h.n_text_head, h.n_text_ctx)?;
    Ok(())
}

impl CudaWhisper {
    /// Uploads the model in `f` to GPU `ordinal`. Checks for libcuda first; compiles the
    /// kernels (once per process and GPU) and waits until every weight is on the device.
    pub fn new(f: &WhisperFile, ordinal: usize, precision: Precision) -> Result<Self> {
        check_hparams(&f.path, &f.hparams)?;
        if !crate::driver_present() {
            return Err(CudaError::NoDriver);
        }
        guard("loading the model onto the GPU", || {
            let (info, ctx, module) = crate::backend::open(ordinal)?;
            // SAFETY: sessions keep every buffer on their own stream, and the weights are
            // synchronized below before any session can read them (see crate::ops).
            unsafe { ctx.disable_event_tracking() };
            let kernels = Kernels::load(&module)?;
            let stream = Stream::Cuda(ctx.new_stream().map_err(driver("cuStreamCreate"))?);
            Self::build(f, precision, info, kernels, stream, Runtime::Cuda(ctx))
        })
    }

    /// The model on a [`HostDevice`] instead of a GPU: the same weights layout and, in its
    /// sessions, the same launches, copies and products, on host memory. For checking the
    /// CUDA path where there is no GPU (sotto-cuda's tests).
    pub fn on_host(
        f: &WhisperFile,
        precision: Precision,
        device: Arc<dyn HostDevice>,
    ) -> Result<Self> {
        check_hparams(&f.path, &f.hparams)?;
        let info = DeviceInfo {
            ordinal: 0,
            name: "host emulation".into(),
            total_memory: 0,
            compute_capability: (0, 0),
        };
        let stream = Stream::Host(device.clone());
        Self::build(
            f,
            precision,
            info,
            Kernels::none(),
            stream,
            Runtime::Host(device),
        )
    }

    fn build(
        f: &WhisperFile,
        precision: Precision,
        info: DeviceInfo,
        kernels: Kernels,
        stream: Stream,
        runtime: Runtime,
    ) -> Result<Self> {
        let l = Loader {
            f,
            stream: &stream,
            precision,
            max_quantized: Default::default(),
        };
        let h = f.hparams;
        let (da, dt) = (h.n_audio_state, h.n_text_state);
        let mut blocks: Vec<DevBlock> = (0..h.n_audio_layer)
            .map(|i| l.block(&format!("encoder.blocks.{i}"), da, None))
            .collect::<Result<_>>()?;
        // Each block's q, k and v as one product.
        let mut qkv = Vec::with_capacity(blocks.len());
        for (i, blk) in blocks.iter_mut().enumerate() {
            let names =
                ["query", "key", "value"].map(|p| format!("encoder.blocks.{i}.attn.{p}.weight"));
            let a = &mut blk.attn;
            qkv.push(l.stack(&names, &mut [&mut a.query, &mut a.key, &mut a.value])?);
        }
        let encoder = DevEncoder {
            conv1: l.linear("encoder.conv1", da, h.n_mels * 3, true)?,
            conv2: l.linear("encoder.conv2", da, da * 3, true)?,
            pos: l.vector("encoder.positional_embedding", h.n_audio_ctx * da)?,
            blocks,
            qkv,
            ln_post: l.norm("encoder.ln_post", da)?,
        };
        let mut blocks: Vec<DevBlock> = (0..h.n_text_layer)
            .map(|i| l.block(&format!("decoder.blocks.{i}"), dt, Some(da)))
            .collect::<Result<_>>()?;
        // The cross-attention K and V of CROSS_GROUP decoder layers at a time as one
        // product over the encoder output.
        let mut cross_kv = Vec::new();
        for (g, group) in blocks.chunks_mut(CROSS_GROUP).enumerate() {
            let mut names = Vec::new();
            let mut parts: Vec<&mut DevLinear> = Vec::new();
            for (j, blk) in group.iter_mut().enumerate() {
                let Some((_, cross)) = blk.cross.as_mut() else {
                    return Err(l.err("decoder", "a decoder block has no cross-attention"));
                };
                let i = g * CROSS_GROUP + j;
                for p in ["key", "value"] {
                    names.push(format!("decoder.blocks.{i}.cross_attn.{p}.weight"));
                }
                parts.push(&mut cross.key);
                parts.push(&mut cross.value);
            }
            cross_kv.push(l.stack(&names, &mut parts)?);
        }
        let decoder = DevDecoder {
            token_embedding: l.linear("decoder.token_embedding", h.n_vocab, dt, false)?,
            pos: l.vector("decoder.positional_embedding", h.n_text_ctx * dt)?,
            blocks,
            cross_kv,
            ln: l.norm("decoder.ln", dt)?,
        };
        let max_quantized = l.max_quantized.get();
        stream.synchronize()?;
        Ok(CudaWhisper {
            hparams: h,
            precision,
            max_quantized,
            info,
            kernels,
            encoder,
            decoder,
            _load_stream: stream,
            runtime,
        })
    }

    /// Makes the model's context current on this thread (nothing to do on the host).
    pub(crate) fn bind(&self) -> Result<()> {
        match &self.runtime {
            Runtime::Cuda(ctx) => ctx.bind_to_thread().map_err(driver("cuCtxSetCurrent")),
            Runtime::Host(_) => Ok(()),
        }
    }

    /// A new stream for a session, and a cuBLAS handle on it (none on the host).
    pub(crate) fn new_stream(&self) -> Result<(Stream, Option<cudarc::cublas::CudaBlas>)> {
        match &self.runtime {
            Runtime::Cuda(ctx) => {
                let s = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
                let blas =
                    cudarc::cublas::CudaBlas::new(s.clone()).map_err(|e| CudaError::Library {
                        op: "cublasCreate",
                        msg: format!("{e:?}"),
                    })?;
                Ok((Stream::Cuda(s), Some(blas)))
            }
            Runtime::Host(d) => Ok((Stream::Host(d.clone()), None)),
        }
    }

    pub fn hparams(&self) -> &Hparams {
        &self.hparams
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    /// Mel frames in one window (2 · n_audio_ctx).
    pub fn n_frames(&self) -> usize {
        2 * self.hparams.n_audio_ctx
    }
}

// Sessions on several threads share one model.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<CudaWhisper>();
};
