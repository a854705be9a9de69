//! Device buffers addressed by raw pointers and the ops of the Whisper forward: kernel
//! launches on one stream and cuBLAS products.
//!
//! The model's context has event tracking off: every buffer of a session lives and dies on
//! that session's stream, and the weights are written once (then synchronized) before any
//! session reads them. Raw pointers let a step address rows and layers by offset, and stay
//! fixed, as a CUDA graph of the decode step will need.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    LaunchConfig, ValidAsZeroBits,
};

use crate::host::{Captured, HostDevice, KernelArg};
use crate::plan::{self, BatchedGemm, GemmShape};
use crate::{driver, kernels, launch, CudaError, QuantType, Result};

/// Where work is queued: a CUDA stream, or a [`HostDevice`] standing in for one.
#[derive(Clone)]
pub(crate) enum Stream {
    Cuda(Arc<CudaStream>),
    Host(Arc<dyn HostDevice>),
}

fn host_err(op: &'static str) -> impl Fn(String) -> CudaError {
    move |msg| CudaError::Library { op, msg }
}

/// A point in a stream's work, for timing groups of ops: a CUDA event recorded with
/// timing, or the host clock where a [`HostDevice`] completes each call as it is made.
pub(crate) enum Mark {
    Cuda(CudaEvent),
    Host(Instant),
}

impl Mark {
    /// The stream's time from `self` to `later`; waits for `later`'s work.
    pub fn until(&self, later: &Mark) -> Result<Duration> {
        match (self, later) {
            (Mark::Cuda(a), Mark::Cuda(b)) => a
                .elapsed_ms(b)
                .map(|ms| Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
                .map_err(driver("cuEventElapsedTime")),
            (Mark::Host(a), Mark::Host(b)) => Ok(b.saturating_duration_since(*a)),
            _ => Err(CudaError::Library {
                op: "cuEventElapsedTime",
                msg: "marks of different streams".into(),
            }),
        }
    }
}

impl Stream {
    /// Marks the work queued so far (see [`Mark`]).
    pub fn mark(&self) -> Result<Mark> {
        match self {
            Stream::Cuda(s) => s
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map(Mark::Cuda)
                .map_err(driver("cuEventRecord")),
            Stream::Host(_) => Ok(Mark::Host(Instant::now())),
        }
    }

    /// Waits for everything queued.
    pub fn synchronize(&self) -> Result<()> {
        match self {
            Stream::Cuda(s) => s.synchronize().map_err(driver("cuStreamSynchronize")),
            Stream::Host(_) => Ok(()),
        }
    }

    /// Copies `bytes` bytes between device addresses.
    fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        match self {
            // SAFETY: the caller passes ranges of `bytes` inside live buffers of this stream.
            Stream::Cuda(s) => {
                unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, s.cu_stream()) }
                    .map_err(driver("cuMemcpyDtoDAsync"))
            }
            Stream::Host(_) => {
                // SAFETY: host "device" addresses of live Bufs (or Pinned), `bytes` long;
                // `copy` allows overlap, as cuMemcpy's callers here never need.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
                Ok(())
            }
        }
    }

    /// Copies host values to device memory at `dst` (queued: `x` must outlive the copy,
    /// which the next [`Stream::download`] or synchronize guarantees).
    fn upload_to<T: DeviceRepr>(&self, dst: u64, x: &[T]) -> Result<()> {
        match self {
            // SAFETY: dst holds at least x.len() elements; callers synchronize before `x`
            // goes away.
            Stream::Cuda(s) => {
                unsafe { cudarc::driver::result::memcpy_htod_async(dst, x, s.cu_stream()) }
                    .map_err(driver("cuMemcpyHtoDAsync"))
            }
            Stream::Host(_) => {
                // SAFETY: dst is a live host Buf of at least x.len() elements of T.
                unsafe { std::ptr::copy_nonoverlapping(x.as_ptr(), dst as *mut T, x.len()) };
                Ok(())
            }
        }
    }

    /// Queues a copy of `bytes` bytes between device memory and page-locked host memory
    /// ([`Pinned`]), `to` saying which way: queued, and captured as a graph's copy node,
    /// where a pageable buffer's copy is neither.
    fn copy_pinned(&self, to: Way, device: u64, host: u64, bytes: usize) -> Result<()> {
        match self {
            Stream::Cuda(s) => {
                use cudarc::driver::result::{memcpy_dtoh_async, memcpy_htod_async};
                // SAFETY: `host` is a live Pinned allocation of at least `bytes` bytes, which
                // only queued copies touch until the session synchronizes.
                let host = unsafe { std::slice::from_raw_parts_mut(host as *mut u8, bytes) };
                let stream = s.cu_stream();
                match to {
                    // SAFETY: `device` is a live buffer of at least `bytes` bytes (as above).
                    Way::ToDevice => unsafe { memcpy_htod_async(device, host, stream) }
                        .map_err(driver("cuMemcpyHtoDAsync")),
                    // SAFETY: as above; the host reads `host` only after a synchronize.
                    Way::ToHost => unsafe { memcpy_dtoh_async(host, device, stream) }
                        .map_err(driver("cuMemcpyDtoHAsync")),
                }
            }
            Stream::Host(_) => {
                let (dst, src) = to.dst_src(device, host);
                self.copy(dst, src, bytes)
            }
        }
    }

    /// Waits for the stream and copies `out.len()` values from `src`.
    fn download<T: DeviceRepr>(&self, src: u64, out: &mut [T]) -> Result<()> {
        match self {
            Stream::Cuda(s) => {
                // SAFETY: src holds out.len() values; the synchronize below completes the
                // copy before `out` is read.
                unsafe { cudarc::driver::result::memcpy_dtoh_async(out, src, s.cu_stream()) }
                    .map_err(driver("cuMemcpyDtoHAsync"))?;
                self.synchronize()
            }
            Stream::Host(_) => {
                // SAFETY: src is a live host Buf of at least out.len() elements of T.
                unsafe {
                    std::ptr::copy_nonoverlapping(src as *const T, out.as_mut_ptr(), out.len())
                };
                Ok(())
            }
        }
    }
}

/// Which way a copy between device and page-locked host memory goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    ToDevice,
    ToHost,
}

impl Way {
    /// (destination, source) of a copy between `device` and `host` addresses.
    fn dst_src(self, device: u64, host: u64) -> (u64, u64) {
        match self {
            Way::ToDevice => (device, host),
            Way::ToHost => (host, device),
        }
    }
}

/// Page-locked host memory, which copies to and from the device read and write directly:
/// they are queued without a staging copy, and a graph can capture them. Host memory where
/// a [`HostDevice`] stands in. Freed when dropped (the session synchronizes first).
pub(crate) struct Pinned<T> {
    _mem: PinnedBacking<T>,
    addr: u64,
    len: usize,
}

// Held only to own (and on drop free) the memory that `Pinned::addr` addresses.
#[allow(dead_code)]
enum PinnedBacking<T> {
    Cuda(cudarc::driver::PinnedHostSlice<T>),
    Host(Vec<T>),
}

impl<T: DeviceRepr + ValidAsZeroBits + Default + Clone> Pinned<T> {
    /// `n` zeroed elements (at least one: cuMemHostAlloc refuses 0 bytes).
    pub fn zeros(stream: &Stream, n: usize) -> Result<Self> {
        let n = n.max(1);
        let (mem, addr) = match stream {
            Stream::Cuda(s) => {
                // Flags 0: cached memory, not cudarc's default write-combined, which the
                // host reads back uncached.
                // SAFETY: the memory is zeroed below before anything reads it.
                let mut mem = unsafe { s.context().alloc_pinned_with_flags::<T>(n, 0) }
                    .map_err(driver("cuMemHostAlloc"))?;
                let ptr = mem.as_mut_ptr().map_err(driver("cuMemHostAlloc"))?;
                // SAFETY: `ptr` holds n elements of T, for which zero bits are valid.
                unsafe { std::ptr::write_bytes(ptr, 0, n) };
                (PinnedBacking::Cuda(mem), ptr as u64)
            }
            Stream::Host(_) => {
                let mut v = vec![T::default(); n];
                let addr = v.as_mut_ptr() as u64;
                (PinnedBacking::Host(v), addr)
            }
        };
        Ok(Pinned {
            _mem: mem,
            addr,
            len: n,
        })
    }

    /// Makes room for `n` elements (contents are not kept).
    pub fn ensure(&mut self, stream: &Stream, n: usize) -> Result<()> {
        if self.len < n {
            *self = Self::zeros(stream, n)?;
        }
        Ok(())
    }

    /// The host address, which a copy on the stream takes.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The first `n` elements. Read them only when no queued copy writes them (after the
    /// stream synchronized).
    pub fn head(&self, n: usize) -> &[T] {
        assert!(n <= self.len, "{n} pinned elements of {}", self.len);
        // SAFETY: `addr` holds `len` initialized elements owned by `_mem`, borrowed here.
        unsafe { std::slice::from_raw_parts(self.addr as *const T, n) }
    }

    /// The first `n` elements, to write. Write them only when no queued copy reads them.
    pub fn head_mut(&mut self, n: usize) -> &mut [T] {
        assert!(n <= self.len, "{n} pinned elements of {}", self.len);
        // SAFETY: as in `head`, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut T, n) }
    }
}

// Held only to own (and on drop free) the memory that `Buf::ptr` addresses.
#[allow(dead_code)]
enum Backing<T> {
    Cuda(CudaSlice<T>),
    /// Host memory standing in for the device's; only ever accessed through `ptr`.
    Host(Vec<T>),
    /// Part of another buffer ([`Buf::view`]), which owns the memory.
    View,
}

/// A device allocation and its address. Freed (asynchronously, on its stream) when dropped.
pub(crate) struct Buf<T> {
    _mem: Backing<T>,
    ptr: u64,
    len: usize,
}

impl<T: DeviceRepr + ValidAsZeroBits + Default + Clone> Buf<T> {
    fn from_slice(slice: CudaSlice<T>, stream: &CudaStream) -> Self {
        let len = slice.len();
        let ptr = slice.device_ptr(stream).0;
        Buf {
            _mem: Backing::Cuda(slice),
            ptr,
            len,
        }
    }

    fn from_vec(mut v: Vec<T>) -> Self {
        let (ptr, len) = (v.as_mut_ptr() as u64, v.len());
        Buf {
            _mem: Backing::Host(v),
            ptr,
            len,
        }
    }

    pub fn zeros(stream: &Stream, n: usize) -> Result<Self> {
        // cuMemAlloc refuses 0 bytes; an empty buffer still gets one element.
        let mut b = match stream {
            Stream::Cuda(s) => {
                let slice = s.alloc_zeros::<T>(n.max(1)).map_err(driver("alloc"))?;
                Self::from_slice(slice, s)
            }
            Stream::Host(_) => Self::from_vec(vec![T::default(); n.max(1)]),
        };
        b.len = n;
        Ok(b)
    }

    pub fn upload(stream: &Stream, x: &[T]) -> Result<Self> {
        match stream {
            Stream::Cuda(s) => {
                let slice = s.clone_htod(x).map_err(driver("upload"))?;
                Ok(Self::from_slice(slice, s))
            }
            Stream::Host(_) => Ok(Self::from_vec(x.to_vec())),
        }
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Elements `offset..offset + len` of this buffer, as a buffer that frees nothing: its
    /// holder keeps it no longer than this one (the model keeps a stacked weight and the
    /// views into it side by side).
    pub fn view(&self, offset: usize, len: usize) -> Self {
        debug_assert!(offset + len <= self.len);
        Buf {
            _mem: Backing::View,
            ptr: self.at(offset),
            len,
        }
    }

    /// Address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Makes room for `n` elements (contents are not kept).
    pub fn ensure(&mut self, stream: &Stream, n: usize) -> Result<()> {
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

/// The kernels of one loaded module, by name (none for a [`HostDevice`], which has its own).
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

    pub fn none() -> Self {
        Kernels {
            funcs: HashMap::new(),
        }
    }

    fn get(&self, name: &'static str) -> Result<&CudaFunction> {
        self.funcs.get(name).ok_or_else(|| CudaError::Library {
            op: "kernel lookup",
            msg: format!("{name} is not in the loaded module"),
        })
    }
}

/// Ops queued on one stream. Pointers must address buffers large enough for the shapes
/// given; the session sizes its buffers from the same shapes before each call.
pub(crate) struct Dev<'a> {
    pub stream: &'a Stream,
    /// The session's cuBLAS handle (None on a [`HostDevice`]).
    pub blas: Option<&'a CudaBlas>,
    pub k: &'a Kernels,
    pub precision: Precision,
    /// f16 scratch for converted product inputs, and its length in elements.
    pub half: u64,
    pub half_len: usize,
    /// f16 scratch for a quantized weight dequantized for cuBLAS, and its length.
    pub wq: u64,
    pub wq_len: usize,
    /// How attention over shared keys runs (the session reads `SOTTO_CUDA_ATTENTION` once),
    /// and f32 scratch for the scores of [`AttentionPath::Blas`] with its length.
    pub attention: AttentionPath,
    pub scores: u64,
    pub scores_len: usize,
    /// On a [`HostDevice`], a graph being captured: launches, copies and products are
    /// recorded here instead of run, as a CUDA stream in capture mode does.
    pub record: Option<&'a std::cell::RefCell<Vec<HostOp>>>,
    /// Whether the encoder's `_in` ops fold adds and f16 narrowing into the launches around
    /// them (see [`GemmIn`], [`Deferred`]); off, they launch each step alone, as before.
    pub fuse: bool,
    /// Whether attention of a few rows over many shared keys (a decoder step's
    /// cross-attention) spreads each (row, head) over several blocks (`SOTTO_CUDA_SPLIT=0`
    /// turns it off), and f32 scratch for their partial results with its length.
    pub split: bool,
    pub part: u64,
    pub part_len: usize,
    /// A counter per (row, head) of split attention, all zero between launches: with
    /// `fuse`, the last block of each merges the chunks in the same launch
    /// (`sotto_attention_split`'s `done`); 0 for none. Its length in counters.
    pub done: u64,
    pub done_len: usize,
    /// Whether the mat-vec kernels quantize their input rows to q8 blocks against quantized
    /// weights and add the block sums in the CPU's order (`SOTTO_MMV_Q8`: the CPU's
    /// quantized products bit for bit; `SOTTO_CUDA_Q8=0` turns it off: f32 inputs against
    /// the dequantized blocks, as before).
    pub q8: bool,
    /// Whether kernels launch as programmatic dependent launches (compute capability 9.0
    /// and later; `SOTTO_CUDA_PDL=0` turns it off): each may be scheduled while the one
    /// before it runs, and waits for it first (`sotto_pdl_start`).
    pub pdl: bool,
}

/// A product's input as the next [`Dev::linear_in`] reads it: f32 at an address (which
/// the product narrows itself, or the mat-vec kernels read as is), or f16 already in the
/// session's scratch, written there by the launch that made it (layer norm, GELU, im2col,
/// the tensor-core attention) and valid until the next op that narrows into the scratch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GemmIn {
    F32(u64),
    Half,
}

/// A product's input rows: the layer norm of `x` (Shape: [m, d]). A decoder step's mat-vec
/// launch normalises the rows itself where it can ([`Dev::fuse`]: each block computes the
/// norm of its rows as the layer-norm launch does, bit for bit, [`kernels::MMV_NORM`]);
/// else a layer-norm launch writes them to `h` first.
#[derive(Clone, Copy)]
pub(crate) struct Normed<'n> {
    pub x: u64,
    pub norm: &'n DevNorm,
    pub h: u64,
}

/// An add onto the residual stream that the encoder leaves to the next layer norm's
/// launch: a bias (`stride` 0, one row for every row) or a matrix (the positions,
/// `stride` = the row width). The stream's values are the same: the norm adds before it
/// reads, in the order the separate launch would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deferred {
    pub ptr: u64,
    pub stride: usize,
}

/// One recorded step of a [`HostDevice`] graph.
pub(crate) enum HostOp {
    Launch {
        name: &'static str,
        cfg: LaunchConfig,
        args: Vec<KernelArg>,
    },
    Copy {
        dst: u64,
        src: u64,
        bytes: usize,
    },
    Gemm {
        g: GemmShape,
        a: u64,
        b: u64,
        c: u64,
        precision: Precision,
    },
    GemmBatched {
        g: BatchedGemm,
        a: u64,
        b: u64,
        c: u64,
    },
}

fn host_launch(
    device: &dyn HostDevice,
    name: &'static str,
    cfg: LaunchConfig,
    args: &[KernelArg],
) -> Result<()> {
    let (grid, block, shared) = (cfg.grid_dim, cfg.block_dim, cfg.shared_mem_bytes);
    device
        .launch(name, grid, block, shared, args)
        .map_err(host_err(name))
}

/// Runs a recorded graph on `device`, in order.
pub(crate) fn replay(device: &dyn HostDevice, ops: &[HostOp]) -> Result<()> {
    for op in ops {
        match op {
            HostOp::Launch { name, cfg, args } => host_launch(device, name, *cfg, args)?,
            &HostOp::Copy { dst, src, bytes } => {
                // SAFETY: recorded from Dev::copy_f32 or Dev::copy_pinned on live buffers of
                // the session, which discards its graphs when any buffer they address is
                // reallocated.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) }
            }
            HostOp::Gemm {
                g,
                a,
                b,
                c,
                precision,
            } => device
                .gemm(g, *a, *b, *c, *precision)
                .map_err(host_err("cublasGemmEx"))?,
            HostOp::GemmBatched { g, a, b, c } => device
                .gemm_batched(g, *a, *b, *c)
                .map_err(host_err("cublasGemmStridedBatchedEx"))?,
        }
    }
    Ok(())
}

/// A causal attention's device inputs: the first query row's position, and the table of
/// which sequence's cache rows hold each sequence's keys (`sotto_kv_row`; 0: its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Causal {
    pub q_pos0: u64,
    pub slots: u64,
}

/// How attention over keys every query row shares (the encoder's self-attention, the
/// decoder's cross-attention) runs, for more rows than a decoder step has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionPath {
    /// Two batched cuBLAS products around a softmax kernel ([`plan::attention_gemms`]):
    /// the scores of every head go through device memory. The scores in f32; P·V on
    /// tensor cores with TF32 inputs at [`Precision::F16`], in f32 at [`Precision::F32`].
    /// The default where [`AttentionPath::Mma`] does not apply.
    Blas,
    /// `sotto_flash_attention`: no scores in memory, f32 FMA on the SM's cores.
    Flash,
    /// `sotto_flash_attention_mma`: no scores in memory, f16 operands on the tensor cores
    /// (compute capability 8.0 and later). The default there, at [`Precision::F16`]: on
    /// the H200 it took the encoder's attention from 1.0 to 0.3 ms (tiny) and from 24 to
    /// 4 ms (large-v3) against `Blas`.
    Mma,
    /// `sotto_attention`: one block per query row and head.
    Rows,
}

impl AttentionPath {
    /// `SOTTO_CUDA_ATTENTION=blas|flash|mma|rows` (`SOTTO_CUDA_FLASH=0`, the older switch,
    /// means `rows`), or None when neither is set (the session picks its default); an
    /// unknown value is an error, not a silent default.
    pub fn from_env() -> Result<Option<Self>> {
        let flash_off = std::env::var_os("SOTTO_CUDA_FLASH").is_some_and(|v| v == "0");
        Self::parse(
            std::env::var("SOTTO_CUDA_ATTENTION").ok().as_deref(),
            flash_off,
        )
    }

    fn parse(name: Option<&str>, flash_off: bool) -> Result<Option<Self>> {
        match name {
            None | Some("") if flash_off => Ok(Some(AttentionPath::Rows)),
            None | Some("") => Ok(None),
            Some("blas") => Ok(Some(AttentionPath::Blas)),
            Some("flash") => Ok(Some(AttentionPath::Flash)),
            Some("mma") => Ok(Some(AttentionPath::Mma)),
            Some("rows") => Ok(Some(AttentionPath::Rows)),
            Some(other) => Err(CudaError::Input {
                op: "SOTTO_CUDA_ATTENTION",
                msg: format!("{other:?}: expected blas, flash, mma or rows"),
            }),
        }
    }
}

fn elementwise(op: &'static str, n: usize) -> Result<Option<(LaunchConfig, u32)>> {
    let n32 = launch::count_u32(op, n)?;
    Ok(launch::elementwise(op, n)?.map(|l| (l.into(), n32)))
}

impl Dev<'_> {
    /// Launches kernel `name` with `args`, which list its parameters in order.
    fn run(&self, name: &'static str, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        if let Some(rec) = self.record {
            self.may_capture(Captured::Launch)?;
            rec.borrow_mut().push(HostOp::Launch {
                name,
                cfg,
                args: args.to_vec(),
            });
            return Ok(());
        }
        match self.stream {
            Stream::Cuda(s) => {
                // SAFETY: each caller passes exactly the parameters its kernel declares
                // (pointers as u64), and the session sized every buffer for the shapes.
                unsafe { crate::backend::launch_on(s, self.k.get(name)?, cfg, args, self.pdl) }
                    .map_err(driver(name))
            }
            Stream::Host(h) => host_launch(h.as_ref(), name, cfg, args),
        }
    }

    /// `a += b`. Shape: [n]
    pub fn add(&self, a: u64, b: u64, n: usize) -> Result<()> {
        let Some((cfg, n)) = elementwise("add", n)? else {
            return Ok(());
        };
        let name = "sotto_add_f32";
        self.run(name, cfg, &[a.into(), b.into(), n.into()])
    }

    /// Layer norm of each row. Shape: x, out [n_rows, d]
    pub fn layer_norm(&self, x: u64, norm: &DevNorm, out: u64, n_rows: usize) -> Result<()> {
        self.norm_launch(x, None, norm, out, 0, n_rows)
    }

    /// `sotto_layer_norm`: `add` onto x first (stored), then the norm into `out` (f32)
    /// and `out_half` (f16), each skipped where 0. Shape: x [n_rows, d]
    fn norm_launch(
        &self,
        x: u64,
        add: Option<Deferred>,
        norm: &DevNorm,
        out: u64,
        out_half: u64,
        n_rows: usize,
    ) -> Result<()> {
        let d = norm.gamma.len();
        let Some(l) = launch::rows("layer_norm", n_rows, d)? else {
            return Ok(());
        };
        let name = "sotto_layer_norm";
        let (a, stride) = add.map_or((0, 0), |a| (a.ptr, a.stride));
        let stride = launch::count_u32("layer_norm", stride)?;
        let (g, b, d) = (norm.gamma.ptr(), norm.beta.ptr(), d as u32);
        self.run(
            name,
            l.into(),
            &[
                x.into(),
                a.into(),
                stride.into(),
                g.into(),
                b.into(),
                out.into(),
                out_half.into(),
                d.into(),
                norm.eps.into(),
            ],
        )
    }

    /// Whether a fused launch narrows `n` values for a cuBLAS product of `w` over `m` rows
    /// straight into the f16 scratch.
    fn narrows_for(&self, w: &DevLinear, m: usize, n: usize) -> bool {
        self.fuse
            && self.precision == Precision::F16
            && !self.mat_vec_takes(w, m)
            && n <= self.half_len
    }

    /// The encoder's layer norm before the products of `next` (the first of them, when
    /// several read it): `add` onto x first, then the norm as the products read it: f16
    /// in the scratch where they narrow (and f32 in `out` too with `keep_f32`), else f32
    /// in `out`. Shape: x, out [n_rows, d]
    #[allow(clippy::too_many_arguments)]
    pub fn norm_in(
        &self,
        x: u64,
        add: Option<Deferred>,
        norm: &DevNorm,
        n_rows: usize,
        out: u64,
        keep_f32: bool,
        next: Option<&DevLinear>,
    ) -> Result<GemmIn> {
        let n = n_rows * norm.gamma.len();
        if next.is_some_and(|w| self.narrows_for(w, n_rows, n)) {
            let out = if keep_f32 { out } else { 0 };
            self.norm_launch(x, add, norm, out, self.half, n_rows)?;
            return Ok(GemmIn::Half);
        }
        self.norm_launch(x, add, norm, out, 0, n_rows)?;
        Ok(GemmIn::F32(out))
    }

    /// `x += add` (Shape: [rows, d], `add` [rows, d]), or, fusing, left to the next
    /// [`Dev::norm_in`].
    pub fn add_or_defer(
        &self,
        x: u64,
        add: u64,
        rows: usize,
        d: usize,
    ) -> Result<Option<Deferred>> {
        if self.fuse {
            return Ok(Some(Deferred {
                ptr: add,
                stride: d,
            }));
        }
        self.add(x, add, rows * d)?;
        Ok(None)
    }

    /// `x[i]` rounded to f16 and widened back, in place. Shape: x [n]
    pub fn round_f16(&self, x: u64, n: usize) -> Result<()> {
        let Some((cfg, n)) = elementwise("round_f16", n)? else {
            return Ok(());
        };
        self.run("sotto_round_f16", cfg, &[x.into(), n.into()])
    }

    /// One block of a kernel with nothing to do (`sotto_round_f16` of no values): whether
    /// a launch as this `Dev` makes them goes through.
    pub fn probe_launch(&self) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        self.run("sotto_round_f16", cfg, &[0u64.into(), 0u32.into()])
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
        self.run(name, cfg, &[x.into(), self.half.into(), n.into()])
    }

    /// `out = x · Wᵀ + b`, then GELU when `gelu`. Shape: x [m, n_in]; out [m, n_out]
    ///
    /// Up to [`kernels::MMV_ROWS`] rows (decoder steps) of f16 or quantized weights go
    /// through a `sotto_mul_mat_vec` kernel, which reads the weights as stored (and keeps
    /// cuBLAS out of a captured step); more rows (the encoder, prompt passes) use cuBLAS,
    /// quantized weights dequantized to f16 scratch first. At [`Precision::F32`] quantized
    /// weights (the decoder's: the encoder's are f32 there) take the kernel for every row
    /// count, as the CPU's quantized products do.
    pub fn linear(&self, w: &DevLinear, x: u64, m: usize, out: u64, gelu: bool) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        if self.mat_vec_takes(w, m) {
            let flags = if gelu { kernels::MMV_GELU } else { 0 };
            return self.mat_vec(w, x, m, out, flags, None);
        }
        let b_in = self.gemm_input(x, m * w.n_in)?;
        self.gemm_linear(w, b_in, m, out, gelu, false)
    }

    /// [`Dev::linear`] of normalised rows ([`Normed`]).
    pub fn norm_linear(
        &self,
        w: &DevLinear,
        input: Normed<'_>,
        m: usize,
        out: u64,
        gelu: bool,
    ) -> Result<()> {
        match self.rows_in(input, w, m)? {
            (x, Some(norm)) => {
                let flags = if gelu { kernels::MMV_GELU } else { 0 };
                self.mat_vec(w, x, m, out, flags, Some(norm))
            }
            (x, None) => self.linear(w, x, m, out, gelu),
        }
    }

    /// Whether a mat-vec launch of `m` rows against `w` normalises its input itself.
    fn norm_fuses(&self, w: &DevLinear, m: usize) -> bool {
        let q8 = self.q8_flag(w) != 0;
        self.fuse
            && self.mat_vec_takes(w, m)
            && launch::mul_mat_vec_shared(m, w.n_in, q8, true).is_some()
    }

    /// What a product of `m` rows against `w` reads: the address of its rows, and the norm
    /// its launch applies to them. A norm the launch cannot take runs here, into `h`.
    fn rows_in<'n>(
        &self,
        input: Normed<'n>,
        w: &DevLinear,
        m: usize,
    ) -> Result<(u64, Option<&'n DevNorm>)> {
        if self.norm_fuses(w, m) {
            return Ok((input.x, Some(input.norm)));
        }
        self.layer_norm(input.x, input.norm, input.h, m)?;
        Ok((input.h, None))
    }

    /// `out_i = x · W_iᵀ + b_i` for several layers that read the same `x` (q, k and v; the
    /// cross-attention K and V of every decoder layer): as [`Dev::linear`], but where they go
    /// through cuBLAS in f16, `x` is converted once for all of them.
    /// Shape: x [m, n_in]; each out [m, n_out of its layer]
    pub fn linears(&self, layers: &[(&DevLinear, u64)], x: u64, m: usize) -> Result<()> {
        let Some(&(first, _)) = layers.first() else {
            return Ok(());
        };
        if m == 0 || self.mat_vec_takes(first, m) {
            for &(w, out) in layers {
                self.linear(w, x, m, out, false)?;
            }
            return Ok(());
        }
        if let Some((w, _)) = layers.iter().find(|(w, _)| w.n_in != first.n_in) {
            return Err(CudaError::Shape {
                op: "linears",
                msg: format!("inputs of {} and {} values per row", first.n_in, w.n_in),
            });
        }
        let b_in = self.gemm_input(x, m * first.n_in)?;
        for &(w, out) in layers {
            self.gemm_linear(w, b_in, m, out, false, false)?;
        }
        Ok(())
    }

    /// [`Dev::linear`] of an input a fused launch may have left in the f16 scratch.
    pub fn linear_in(
        &self,
        w: &DevLinear,
        x: GemmIn,
        m: usize,
        out: u64,
        gelu: bool,
    ) -> Result<()> {
        match x {
            GemmIn::F32(x) => self.linear(w, x, m, out, gelu),
            GemmIn::Half => self.gemm_linear(w, self.half, m, out, gelu, false),
        }
    }

    /// [`Dev::linears`] of an input a fused launch may have left in the f16 scratch.
    pub fn linears_in(&self, layers: &[(&DevLinear, u64)], x: GemmIn, m: usize) -> Result<()> {
        match x {
            GemmIn::F32(x) => self.linears(layers, x, m),
            GemmIn::Half => {
                for &(w, out) in layers {
                    self.gemm_linear(w, self.half, m, out, false, false)?;
                }
                Ok(())
            }
        }
    }

    /// [`Dev::linears_in`] of `layers` (each `x · W_iᵀ + b_i` into its output), as one
    /// product where the encoder fuses and `stacked` holds their weights in order
    /// ([`crate::whisper::DevEncoder::qkv`]): the stacked output goes to `tmp` (Shape:
    /// [m, stacked.n_out], within `tmp_len` elements), and one launch splits it into the
    /// layers' outputs, adding their biases.
    pub fn linears_stacked(
        &self,
        stacked: Option<&DevLinear>,
        layers: &[(&DevLinear, u64)],
        x: GemmIn,
        m: usize,
        (tmp, tmp_len): (u64, usize),
    ) -> Result<()> {
        let fits = |w: &DevLinear| {
            self.fuse
                && !self.mat_vec_takes(w, m)
                && m * w.n_out <= tmp_len
                && (1..=4).contains(&layers.len())
                && layers
                    .iter()
                    .all(|(l, _)| l.n_out * layers.len() == w.n_out)
        };
        let Some(w) = stacked.filter(|w| fits(w)) else {
            return self.linears_in(layers, x, m);
        };
        let b_in = self.gemm_in(x, m * w.n_in)?;
        self.gemm_product(w, b_in, m, tmp, false)?;
        let (width, parts) = (layers[0].0.n_out, layers.len());
        let Some((cfg, n)) = elementwise("split_bias", m * w.n_out)? else {
            return Ok(());
        };
        let has_bias = (layers.iter().enumerate())
            .filter(|(_, (l, _))| l.bias.is_some())
            .fold(0u32, |mask, (p, _)| mask | 1 << p);
        let mut outs = [0u64; 4];
        for (o, &(_, out)) in outs.iter_mut().zip(layers) {
            *o = out;
        }
        let bias = w.bias.as_ref().map_or(0, |b| b.ptr());
        let u = |v: usize| launch::count_u32("split_bias", v);
        let args = [
            tmp.into(),
            bias.into(),
            outs[0].into(),
            outs[1].into(),
            outs[2].into(),
            outs[3].into(),
            u(width)?.into(),
            u(parts)?.into(),
            has_bias.into(),
            n.into(),
        ];
        self.run("sotto_split_bias", cfg, &args)
    }

    /// `out = gelu(x · Wᵀ + b)` for the product of `next` to read: fusing, the bias and
    /// GELU launch writes f16 into the scratch (once the product has read its input from
    /// there: the stream orders them) instead of f32 into `out`.
    /// Shape: x [m, n_in]; out [m, n_out]
    pub fn linear_gelu_in(
        &self,
        w: &DevLinear,
        x: GemmIn,
        m: usize,
        out: u64,
        next: &DevLinear,
    ) -> Result<GemmIn> {
        if !self.narrows_for(next, m, m * w.n_out) || self.mat_vec_takes(w, m) {
            self.linear_in(w, x, m, out, true)?;
            return Ok(GemmIn::F32(out));
        }
        let b_in = self.gemm_in(x, m * w.n_in)?;
        self.gemm_product(w, b_in, m, out, false)?;
        self.bias_act(w, m, out, self.half, true)?;
        Ok(GemmIn::Half)
    }

    /// [`Dev::linear_residual`] (`acc += x · Wᵀ + b`) of an input a fused launch may have
    /// left in the f16 scratch; fusing, a cuBLAS product leaves its bias to the next
    /// [`Dev::norm_in`] and returns it.
    pub fn linear_residual_in(
        &self,
        w: &DevLinear,
        x: GemmIn,
        m: usize,
        acc: u64,
    ) -> Result<Option<Deferred>> {
        let b_in = match x {
            GemmIn::F32(x) if m == 0 || !self.fuse || self.mat_vec_takes(w, m) => {
                self.linear_residual(w, x, m, acc)?;
                return Ok(None);
            }
            x => self.gemm_in(x, m * w.n_in)?,
        };
        if !self.fuse {
            self.gemm_linear(w, b_in, m, acc, false, true)?;
            return Ok(None);
        }
        self.gemm_product(w, b_in, m, acc, true)?;
        Ok(w.bias.as_ref().map(|b| Deferred {
            ptr: b.ptr(),
            stride: 0,
        }))
    }

    /// [`Dev::gemm_input`] of an input that may already be in the f16 scratch.
    fn gemm_in(&self, x: GemmIn, n: usize) -> Result<u64> {
        match x {
            GemmIn::F32(x) => self.gemm_input(x, n),
            GemmIn::Half => Ok(self.half),
        }
    }

    /// `x` as the precision's products read it: narrowed to f16 into the scratch, or as is.
    fn gemm_input(&self, x: u64, n: usize) -> Result<u64> {
        match self.precision {
            Precision::F16 => {
                self.to_half(x, n)?;
                Ok(self.half)
            }
            Precision::F32 => Ok(x),
        }
    }

    /// cuBLAS's product of `b_in` (from [`Dev::gemm_input`]) and W (added onto `out` with
    /// `accumulate`), then the bias and GELU.
    fn gemm_linear(
        &self,
        w: &DevLinear,
        b_in: u64,
        m: usize,
        out: u64,
        gelu: bool,
        accumulate: bool,
    ) -> Result<()> {
        self.gemm_product(w, b_in, m, out, accumulate)?;
        self.bias_act(w, m, out, 0, gelu)
    }

    /// cuBLAS's `x · Wᵀ` alone (onto `out` with `accumulate`), quantized W dequantized to
    /// f16 first.
    fn gemm_product(
        &self,
        w: &DevLinear,
        b_in: u64,
        m: usize,
        out: u64,
        accumulate: bool,
    ) -> Result<()> {
        let g = plan::GemmShape {
            accumulate,
            ..plan::linear_gemm(m, w.n_out, w.n_in)?
        };
        let a = match w.qtype {
            Some(t) => self.dequantize_half(t, w)?,
            None => w.w.ptr(),
        };
        self.gemm(g, a, b_in, out)
    }

    /// `out[r] += b` of `w`, then GELU when `gelu`; into `out_half` as f16 where not 0,
    /// else in place. Nothing to do (no bias, no GELU, nothing to narrow) launches nothing.
    /// Shape: out [m, n_out]
    fn bias_act(&self, w: &DevLinear, m: usize, out: u64, out_half: u64, gelu: bool) -> Result<()> {
        if w.bias.is_none() && !gelu && out_half == 0 {
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
        self.run(
            name,
            cfg,
            &[
                out.into(),
                out_half.into(),
                b.into(),
                cols.into(),
                n.into(),
                has.into(),
                gelu.into(),
            ],
        )
    }

    /// `acc += x · Wᵀ + b`: the residual stream's update by a layer's last product. Decoder
    /// steps do it in the product's own launch (`MMV_ADD`): `acc + (x·Wᵀ + b)`, as the CPU
    /// adds. More rows go through cuBLAS onto `acc` (beta = 1), then the bias: `(acc +
    /// x·Wᵀ) + b`, one rounding apart, with no launch for the add. Shape: x [m, n_in];
    /// acc [m, n_out]
    pub fn linear_residual(&self, w: &DevLinear, x: u64, m: usize, acc: u64) -> Result<()> {
        if m == 0 {
            return Ok(());
        }
        if self.mat_vec_takes(w, m) {
            return self.mat_vec(w, x, m, acc, kernels::MMV_ADD, None);
        }
        let b_in = self.gemm_input(x, m * w.n_in)?;
        self.gemm_linear(w, b_in, m, acc, false, true)
    }

    /// q, k and v of a decoder step in one launch (`sotto_mul_mat_vec3_*`), where all three
    /// take the mat-vec kernels with one weight type and shape. With `cache` = (position
    /// address, n_new, sequence stride), k and v go straight into the KV caches at
    /// `outs[1]` and `outs[2]`, as [`Dev::kv_write`] would put them. Returns false where it
    /// does not apply, having launched nothing but the input's norm (into its `h`, for the
    /// products the caller then runs). Shape: x [m, n_in]; outs[0] [m, n_out]
    pub fn qkv_mat_vec(
        &self,
        ws: [&DevLinear; 3],
        input: Normed<'_>,
        m: usize,
        outs: [u64; 3],
        cache: Option<(u64, usize, usize)>,
    ) -> Result<bool> {
        let [q, k, v] = ws;
        let same = |w: &DevLinear| w.qtype == q.qtype && w.n_in == q.n_in && w.n_out == q.n_out;
        if m == 0 || !self.mat_vec_takes(q, m) || !same(k) || !same(v) {
            self.layer_norm(input.x, input.norm, input.h, m)?;
            return Ok(false);
        }
        let (x, norm) = self.rows_in(input, q, m)?;
        let op = "mul_mat_vec3";
        let name = match q.qtype {
            Some(t) => kernels::for_type("sotto_mul_mat_vec3", t)
                .ok_or(CudaError::Unsupported { op, ty: t })?,
            None => "sotto_mul_mat_vec3_f16",
        };
        let Some(mut cfg) = launch::mul_mat_vec_chunks(op, m, 3 * q.n_out, q.n_in)? else {
            return Ok(true);
        };
        let mut extra = self.q8_flag(q);
        let norm_args = self.mat_vec_extras(op, norm, m, q.n_in, &mut cfg, &mut extra)?;
        let (pos0, n_new, seq_stride) = cache.unwrap_or((0, 1, 0));
        let u = |v: usize| launch::count_u32(op, v);
        let (n_in, n_out, m) = (u(q.n_in)?, u(q.n_out)?, u(m)?);
        let (n_new, seq_stride) = (u(n_new.max(1))?, u(seq_stride)?);
        let bias = |w: &DevLinear| w.bias.as_ref().map_or(0, |b| b.ptr());
        let args = [
            q.w.ptr().into(),
            k.w.ptr().into(),
            v.w.ptr().into(),
            x.into(),
            outs[0].into(),
            outs[1].into(),
            outs[2].into(),
            bias(q).into(),
            bias(k).into(),
            bias(v).into(),
            n_in.into(),
            n_out.into(),
            m.into(),
            pos0.into(),
            n_new.into(),
            seq_stride.into(),
            extra.into(),
        ];
        self.run(name, cfg, &[&args[..], &norm_args].concat())?;
        Ok(true)
    }

    /// Whether `m` rows against `w` go through a `sotto_mul_mat_vec` kernel (weights as
    /// stored) rather than cuBLAS.
    fn mat_vec_takes(&self, w: &DevLinear, m: usize) -> bool {
        match (w.qtype, self.precision) {
            (Some(_), Precision::F32) => true,
            (Some(_), Precision::F16) | (None, Precision::F16) => m <= kernels::MMV_ROWS,
            (None, Precision::F32) => false,
        }
    }

    /// `SOTTO_MMV_Q8` where `w` is quantized and the session quantizes activations.
    fn q8_flag(&self, w: &DevLinear) -> i32 {
        if self.q8 && w.qtype.is_some() {
            kernels::MMV_Q8
        } else {
            0
        }
    }

    /// `out = x · Wᵀ (+ b)` (or `out +=`, with GELU, as `flags` add to the bias the layer
    /// has), W in f16 or ggml blocks, in one launch: [`kernels::MMV_ROWS`] rows per block
    /// row of its grid.
    fn mat_vec(
        &self,
        w: &DevLinear,
        x: u64,
        m: usize,
        out: u64,
        flags: i32,
        norm: Option<&DevNorm>,
    ) -> Result<()> {
        let op = "mul_mat_vec";
        let name = match w.qtype {
            Some(t) => kernels::for_type("sotto_mul_mat_vec", t)
                .ok_or(CudaError::Unsupported { op, ty: t })?,
            None => "sotto_mul_mat_vec_f16",
        };
        let Some(mut cfg) = launch::mul_mat_vec_chunks(op, m, w.n_out, w.n_in)? else {
            return Ok(());
        };
        let mut flags = flags | self.q8_flag(w);
        let norm_args = self.mat_vec_extras(op, norm, m, w.n_in, &mut cfg, &mut flags)?;
        let (bias, flags) = match &w.bias {
            Some(b) => (b.ptr(), flags | kernels::MMV_BIAS),
            None => (0u64, flags),
        };
        let (n_in, n_out, m) = (w.n_in as u32, w.n_out as u32, m as u32);
        let args = [
            w.w.ptr().into(),
            x.into(),
            out.into(),
            bias.into(),
            n_in.into(),
            n_out.into(),
            m.into(),
            flags.into(),
        ];
        self.run(name, cfg, &[&args[..], &norm_args].concat())
    }

    /// The mat-vec kernels' last arguments (gamma, beta, eps): a norm's, with
    /// [`kernels::MMV_NORM`] added to `flags`, or nulls; and the launch's shared memory for
    /// the norm and the q8 codes `flags` asks for.
    fn mat_vec_extras(
        &self,
        op: &'static str,
        norm: Option<&DevNorm>,
        m: usize,
        n_in: usize,
        cfg: &mut LaunchConfig,
        flags: &mut i32,
    ) -> Result<[KernelArg; 3]> {
        let q8 = *flags & kernels::MMV_Q8 != 0;
        cfg.shared_mem_bytes =
            launch::mul_mat_vec_shared(m, n_in, q8, norm.is_some()).ok_or_else(|| {
                CudaError::Shape {
                    op,
                    msg: format!("rows of {n_in} to normalise or quantize exceed shared memory"),
                }
            })?;
        let Some(norm) = norm else {
            return Ok([0u64.into(), 0u64.into(), 0f32.into()]);
        };
        if norm.gamma.len() != n_in {
            return Err(CudaError::Shape {
                op,
                msg: format!("a norm of {} values before {n_in} inputs", norm.gamma.len()),
            });
        }
        *flags |= kernels::MMV_NORM;
        Ok([
            norm.gamma.ptr().into(),
            norm.beta.ptr().into(),
            norm.eps.into(),
        ])
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
        self.run(name, cfg, &[q.into(), y.into(), n.into()])?;
        Ok(self.wq)
    }

    /// `C = Aᵀ B` in column-major terms (see [`plan::linear_gemm`]); A and B in the
    /// precision's type, C f32, f32 accumulation.
    fn gemm(&self, g: GemmShape, a: u64, b: u64, c: u64) -> Result<()> {
        if let Some(rec) = self.record {
            let precision = self.precision;
            rec.borrow_mut().push(HostOp::Gemm {
                g,
                a,
                b,
                c,
                precision,
            });
            return Ok(());
        }
        if let Stream::Host(h) = self.stream {
            return h
                .gemm(&g, a, b, c, self.precision)
                .map_err(host_err("cublasGemmEx"));
        }
        let blas = self.blas_handle("cublasGemmEx")?;
        let (alpha, beta) = (1.0f32, if g.accumulate { 1.0f32 } else { 0.0 });
        let ty = self.precision.cuda_type();
        // SAFETY: a, b and c address buffers of at least k·m, k·n and m·n elements of their
        // types (the session sized them from the same shapes); alpha and beta are host f32
        // as CUBLAS_COMPUTE_32F reads them (the handle's default host pointer mode).
        unsafe {
            blas::gemm_ex(
                *blas.handle(),
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

    /// im2col of a conv1d with kernel 3, padding 1; x(t, c) at `x + (t·ts + c·cs)`, for
    /// the product of `next`: into `cols` (f32), or fusing, f16 into the scratch where that
    /// product narrows. Returns t_out and where the columns are.
    /// Shape: cols [t_out, c_in·3]
    #[allow(clippy::too_many_arguments)]
    pub fn im2col_in(
        &self,
        x: u64,
        cols: u64,
        t_in: usize,
        c_in: usize,
        stride: usize,
        ts: usize,
        cs: usize,
        next: &DevLinear,
    ) -> Result<(usize, GemmIn)> {
        let t_out = plan::conv_out_len(t_in, stride);
        let n = t_out * c_in * 3;
        let (cols, cols_half, got) = if self.narrows_for(next, t_out, n) {
            (0, self.half, GemmIn::Half)
        } else {
            (cols, 0, GemmIn::F32(cols))
        };
        let Some((cfg, _)) = elementwise("im2col", n)? else {
            return Ok((t_out, got));
        };
        let u = |v: usize| launch::count_u32("im2col", v);
        let (t_in, c_in, t_out32, stride, ts, cs) =
            (u(t_in)?, u(c_in)?, u(t_out)?, u(stride)?, u(ts)?, u(cs)?);
        let name = "sotto_im2col";
        self.run(
            name,
            cfg,
            &[
                x.into(),
                cols.into(),
                cols_half.into(),
                t_in.into(),
                c_in.into(),
                t_out32.into(),
                stride.into(),
                ts.into(),
                cs.into(),
            ],
        )?;
        Ok((t_out, got))
    }

    /// `x[r] = table[tok[r]] + pos[*pos0 + r % n_new]`, `pos0` the device address of a u32.
    /// Shape: tok [m]; x [m, d]
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
        pos0: u64,
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
        let (d, n_new) = (d as u32, n_new as u32);
        self.run(
            name,
            cfg,
            &[
                table.into(),
                tok.into(),
                pos.into(),
                x.into(),
                d.into(),
                n_new.into(),
                pos0.into(),
                n.into(),
            ],
        )
    }

    /// Writes `batch · n_new` new rows into the cache at position `*pos0` (a device u32) of
    /// each sequence.
    /// Shape: src [batch, n_new, d]; cache [.., seq_stride / d, d]
    #[allow(clippy::too_many_arguments)]
    pub fn kv_write(
        &self,
        src: u64,
        cache: u64,
        batch: usize,
        n_new: usize,
        d: usize,
        pos0: u64,
        seq_stride: usize,
    ) -> Result<()> {
        let Some((cfg, n)) = elementwise("kv_write", batch * n_new * d)? else {
            return Ok(());
        };
        let u = |v: usize| launch::count_u32("kv_write", v);
        let (d, n_new, seq_stride) = (u(d)?, u(n_new)?, u(seq_stride)?);
        let name = "sotto_kv_write";
        self.run(
            name,
            cfg,
            &[
                src.into(),
                cache.into(),
                d.into(),
                n_new.into(),
                pos0.into(),
                seq_stride.into(),
                n.into(),
            ],
        )
    }

    /// Reduces `rows` rows of `n_vocab` logits at `logits` to shortlist records at `out`
    /// ([`launch::shortlist_record_len`] f32 each): over the text ids below `text_end` that
    /// are not pinned (NaN and -inf left out), the largest (the first in the order below:
    /// of -0 and +0, the lower id's; -inf for none) and Σ exp(x − largest) (0 for none),
    /// and the `top` largest (ties to the lower id) as ids in f32 (-1 past the last) then
    /// their logits (-inf past the last); then the logits of the `n_pinned` ids at `pinned`
    /// (device u32, sorted, below `text_end`), in order, and of ids `text_end..n_vocab`.
    /// `bitmap`: the pinned ids' [`plan::pinned_bitmap`] on the device (0 when none is
    /// pinned); `scratch`: [`launch::shortlist_scratch_bytes`] for these rows.
    #[allow(clippy::too_many_arguments)]
    pub fn shortlist(
        &self,
        logits: u64,
        rows: usize,
        n_vocab: usize,
        text_end: usize,
        top: usize,
        pinned: u64,
        n_pinned: usize,
        bitmap: u64,
        scratch: u64,
        out: u64,
    ) -> Result<()> {
        let op = "shortlist";
        let Some(p) = launch::shortlist(op, rows, n_vocab, text_end, top, n_pinned)? else {
            return Ok(());
        };
        let u = |v: usize| launch::count_u32(op, v);
        let (n_vocab, text_end, n_pinned) = (u(n_vocab)?, u(text_end)?, u(n_pinned)?);
        let args = [
            logits.into(),
            n_vocab.into(),
            text_end.into(),
            bitmap.into(),
            p.per.into(),
            p.top.into(),
            scratch.into(),
        ];
        self.run("sotto_shortlist_chunks", p.chunks_config(), &args)?;
        let args = [
            logits.into(),
            n_vocab.into(),
            text_end.into(),
            pinned.into(),
            n_pinned.into(),
            p.chunks.into(),
            p.top.into(),
            scratch.into(),
            out.into(),
        ];
        self.run("sotto_shortlist_merge", p.merge_config(), &args)
    }

    /// Multi-head attention of `rows` query rows (sequences of `n_new` rows each) over
    /// `n_keys` keys per sequence (`kv_seq_stride` elements apart; 0 when shared). Causal
    /// with `Some(causal)`: row i sees keys `..=*q_pos0 + i`, of at most `n_keys`, read
    /// through `causal.slots` where set. Shape: q, out [rows, d]
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
        causal: Option<Causal>,
    ) -> Result<()> {
        let dh = d / n_head.max(1);
        let scale = 1.0 / (dh as f32).sqrt();
        let path = if causal.is_none() && kv_seq_stride == 0 {
            self.attention
        } else {
            AttentionPath::Rows
        };
        // Decoder steps (at most MMV_ROWS rows, captured in graphs) keep cuBLAS out, as
        // their linear layers do; a session without the scratch takes the kernels.
        if path == AttentionPath::Blas
            && rows > kernels::MMV_ROWS
            && plan::attention_scores_len(rows, n_keys, n_head) <= self.scores_len
        {
            return self.attention_blas(q, k, v, out, rows, n_keys, d, n_head);
        }
        let flash = match path {
            AttentionPath::Mma => plan::flash_attention_mma(rows, n_head, dh, n_keys)
                .map(|cfg| ("sotto_flash_attention_mma", cfg)),
            AttentionPath::Rows => None,
            _ => plan::flash_attention(rows, n_head, dh, n_keys)
                .map(|cfg| ("sotto_flash_attention", cfg)),
        };
        if let Some((name, cfg)) = flash {
            // The tensor-core kernel's f16 output goes unused here (see Dev::attention_in).
            let half = (path == AttentionPath::Mma).then_some(0);
            return self.flash(name, cfg, (q, k, v), out, half, rows, n_keys, d, scale);
        }
        // A step's few rows: their keys spread over blocks, so that they fill the GPU.
        let shared = causal.is_none() && kv_seq_stride == 0;
        if (shared || causal.is_some()) && rows <= kernels::MMV_ROWS && self.split {
            let split = plan::attention_split(rows, n_head, dh, n_keys);
            if let Some(p) = split.filter(|p| p.part_len(dh) <= self.part_len) {
                let seqs = (kv_seq_stride, n_new, causal);
                return self.attention_split(&p, (q, k, v), out, d, dh, n_keys, scale, seqs);
            }
        }
        let cfg = plan::attention(rows, n_head, dh, n_keys)?;
        let u = |v: usize| launch::count_u32("attention", v);
        let (d, dh, n_new, stride, nk) = (u(d)?, u(dh)?, u(n_new)?, u(kv_seq_stride)?, u(n_keys)?);
        let (is_causal, c) = (causal.is_some() as i32, causal.unwrap_or_default());
        let name = "sotto_attention";
        self.run(
            name,
            cfg.into(),
            &[
                q.into(),
                k.into(),
                v.into(),
                out.into(),
                d.into(),
                dh.into(),
                n_new.into(),
                stride.into(),
                nk.into(),
                is_causal.into(),
                c.q_pos0.into(),
                c.slots.into(),
                scale.into(),
            ],
        )
    }

    /// One of the flash kernels; `out_half` is the tensor-core kernel's f16 output (0 for
    /// none), None for the f32 kernel, which has no such parameter.
    #[allow(clippy::too_many_arguments)]
    fn flash(
        &self,
        name: &'static str,
        cfg: plan::AttentionLaunch,
        (q, k, v): (u64, u64, u64),
        out: u64,
        out_half: Option<u64>,
        rows: usize,
        n_keys: usize,
        d: usize,
        scale: f32,
    ) -> Result<()> {
        let u = |v: usize| launch::count_u32("flash_attention", v);
        let (n_rows, n_keys, d) = (u(rows)?, u(n_keys)?, u(d)?);
        let mut args = vec![
            q.into(),
            k.into(),
            v.into(),
            out.into(),
            n_rows.into(),
            n_keys.into(),
            d.into(),
            scale.into(),
        ];
        args.extend(out_half.map(KernelArg::from));
        self.run(name, cfg.into(), &args)
    }

    /// Attention over shared keys in chunks ([`plan::SplitAttention`]): a block per (row,
    /// head, chunk) into the `part` scratch, then one per (row, head) merging them.
    #[allow(clippy::too_many_arguments)]
    fn attention_split(
        &self,
        p: &plan::SplitAttention,
        (q, k, v): (u64, u64, u64),
        out: u64,
        d: usize,
        dh: usize,
        n_keys: usize,
        scale: f32,
        (kv_seq_stride, n_new, causal): (usize, usize, Option<Causal>),
    ) -> Result<()> {
        let u = |v: usize| launch::count_u32("attention_split", v);
        let (d, dh32, n_keys) = (u(d)?, u(dh)?, u(n_keys)?);
        let (stride, n_new) = (u(kv_seq_stride)?, u(n_new.max(1))?);
        // The last block of each (row, head) merges, where the counters suffice.
        let counters = p.rows as usize * p.heads as usize;
        let done = if self.fuse && self.done != 0 && counters <= self.done_len {
            self.done
        } else {
            0
        };
        let args = [
            q.into(),
            k.into(),
            v.into(),
            self.part.into(),
            d.into(),
            dh32.into(),
            n_keys.into(),
            p.chunk.into(),
            scale.into(),
            stride.into(),
            n_new.into(),
            causal.map_or(0, |c| c.q_pos0).into(),
            causal.map_or(0, |c| c.slots).into(),
            done.into(),
            out.into(),
        ];
        self.run("sotto_attention_split", p.split_config(), &args)?;
        if done != 0 {
            return Ok(());
        }
        let args = [
            self.part.into(),
            out.into(),
            d.into(),
            dh32.into(),
            p.splits.into(),
        ];
        self.run("sotto_attention_merge", p.merge_config(dh), &args)
    }

    /// The encoder's self-attention ([`Dev::attention`] over keys every row shares) for
    /// the product of `next` to read: on the tensor-core path, fusing, the kernel writes
    /// its output as f16 straight into the scratch (no narrowing launch after it).
    /// Shape: q, k, v, out [rows, d]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_in(
        &self,
        (q, k, v): (u64, u64, u64),
        out: u64,
        rows: usize,
        d: usize,
        n_head: usize,
        next: &DevLinear,
    ) -> Result<GemmIn> {
        let dh = d / n_head.max(1);
        let plan = plan::flash_attention_mma(rows, n_head, dh, rows);
        match plan {
            Some(cfg)
                if self.attention == AttentionPath::Mma
                    && self.narrows_for(next, rows, rows * d) =>
            {
                let scale = 1.0 / (dh as f32).sqrt();
                let (name, half) = ("sotto_flash_attention_mma", Some(self.half));
                self.flash(name, cfg, (q, k, v), 0, half, rows, rows, d, scale)?;
                Ok(GemmIn::Half)
            }
            _ => {
                self.attention(q, k, v, out, rows, rows, d, n_head, 0, rows, None)?;
                Ok(GemmIn::F32(out))
            }
        }
    }

    /// [`AttentionPath::Blas`]: the scores of every head in one batched product into the
    /// session's scratch, a softmax of each row, and the values in a second product.
    /// Shape: q, out [rows, d]; k, v [n_keys, d]
    #[allow(clippy::too_many_arguments)]
    fn attention_blas(
        &self,
        q: u64,
        k: u64,
        v: u64,
        out: u64,
        rows: usize,
        n_keys: usize,
        d: usize,
        n_head: usize,
    ) -> Result<()> {
        let (scores, values) = plan::attention_gemms(rows, n_keys, d, n_head)?;
        // The scores in f32 (the logits move with them, as on the CPU); the values may
        // take TF32 inputs, as the CPU's bf16 encoder rounds the probabilities to bf16.
        self.gemm_batched(&scores, k, q, self.scores, false)?;
        if let Some(l) = launch::rows("softmax_rows", n_head * rows, n_keys)? {
            let n_cols = launch::count_u32("softmax_rows", n_keys)?;
            let args = [self.scores.into(), n_cols.into()];
            self.run("sotto_softmax_rows_f32", l.into(), &args)?;
        }
        let tf32 = self.precision == Precision::F16;
        self.gemm_batched(&values, v, self.scores, out, tf32)
    }

    /// The session's cuBLAS handle, which a CUDA stream always has.
    fn blas_handle(&self, op: &'static str) -> Result<&CudaBlas> {
        self.blas.ok_or_else(|| CudaError::Library {
            op,
            msg: "no cuBLAS handle on a CUDA stream".into(),
        })
    }

    /// One strided batched product of f32 matrices (see [`BatchedGemm`]), f32 accumulation;
    /// with `tf32` cuBLAS may round the inputs to TF32 for the tensor cores.
    fn gemm_batched(&self, g: &BatchedGemm, a: u64, b: u64, c: u64, tf32: bool) -> Result<()> {
        let op = "cublasGemmStridedBatchedEx";
        if let Some(rec) = self.record {
            let g = *g;
            rec.borrow_mut().push(HostOp::GemmBatched { g, a, b, c });
            return Ok(());
        }
        if let Stream::Host(h) = self.stream {
            return h.gemm_batched(g, a, b, c).map_err(host_err(op));
        }
        let blas = self.blas_handle(op)?;
        let beta = 0.0f32;
        let f32_ty = blas_sys::cudaDataType_t::CUDA_R_32F;
        let compute = if tf32 {
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let trans_a = if g.trans_a {
            blas_sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            blas_sys::cublasOperation_t::CUBLAS_OP_N
        };
        // SAFETY: a, b and c address f32 buffers holding every batch's matrix at the
        // strides and leading dimensions of `g` (plan::attention_gemms derives them from
        // the shapes the session sized its buffers for); alpha and beta are host f32.
        unsafe {
            blas::gemm_strided_batched_ex(
                *blas.handle(),
                trans_a,
                blas_sys::cublasOperation_t::CUBLAS_OP_N,
                g.m,
                g.n,
                g.k,
                (&g.alpha) as *const f32 as *const _,
                a as *const _,
                f32_ty,
                g.lda,
                g.stride_a,
                b as *const _,
                f32_ty,
                g.ldb,
                g.stride_b,
                (&beta) as *const f32 as *const _,
                c as *mut _,
                f32_ty,
                g.ldc,
                g.stride_c,
                g.batch,
                compute,
                blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| CudaError::Library {
            op,
            msg: format!("{e:?} ({g:?})"),
        })
    }

    /// Head `head`'s scores `q·k / √dh` before the softmax, of `rows` query rows against
    /// `n_keys` keys (word alignment). Shape: q [rows, d]; k [n_keys, d]; out [rows, n_keys]
    #[allow(clippy::too_many_arguments)]
    pub fn attention_scores(
        &self,
        q: u64,
        k: u64,
        out: u64,
        rows: usize,
        n_keys: usize,
        d: usize,
        n_head: usize,
        head: usize,
    ) -> Result<()> {
        let op = "attention_scores";
        let Some((cfg, n)) = elementwise(op, rows * n_keys)? else {
            return Ok(());
        };
        let dh = d / n_head.max(1);
        let scale = 1.0 / (dh as f32).sqrt();
        let u = |v: usize| launch::count_u32(op, v);
        let (d, dh, head, n_keys) = (u(d)?, u(dh)?, u(head)?, u(n_keys)?);
        let args = [
            q.into(),
            k.into(),
            out.into(),
            d.into(),
            dh.into(),
            head.into(),
            n_keys.into(),
            n.into(),
            scale.into(),
        ];
        self.run("sotto_attention_scores", cfg, &args)
    }

    /// Copies `n` f32 values on the device.
    pub fn copy_f32(&self, dst: u64, src: u64, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        if let Some(rec) = self.record {
            let bytes = n * 4;
            rec.borrow_mut().push(HostOp::Copy { dst, src, bytes });
            return Ok(());
        }
        self.stream.copy(dst, src, n * 4)
    }

    /// Whether the graph being recorded may take `op` ([`HostDevice::capture`]).
    fn may_capture(&self, op: Captured) -> Result<()> {
        match self.stream {
            Stream::Host(d) => d.capture(op).map_err(host_err("capture")),
            Stream::Cuda(_) => Ok(()),
        }
    }

    /// Queues a copy of `n` values of `T` between device memory at `device` and
    /// page-locked host memory at `host` ([`Pinned::addr`]); in a graph being captured, a
    /// copy node.
    pub fn copy_pinned<T>(&self, to: Way, device: u64, host: u64, n: usize) -> Result<()> {
        let bytes = n * std::mem::size_of::<T>();
        if bytes == 0 {
            return Ok(());
        }
        if let Some(rec) = self.record {
            self.may_capture(Captured::HostCopy)?;
            let (dst, src) = to.dst_src(device, host);
            rec.borrow_mut().push(HostOp::Copy { dst, src, bytes });
            return Ok(());
        }
        self.stream.copy_pinned(to, device, host, bytes)
    }

    /// Copies host values into device memory at `dst` (queued; `x` must outlive the copy,
    /// which [`Dev::download`]'s synchronization guarantees for the session's step).
    pub fn upload_to<T: DeviceRepr>(&self, dst: u64, x: &[T]) -> Result<()> {
        self.stream.upload_to(dst, x)
    }

    /// Waits for the stream and copies `out.len()` f32 from `src`.
    pub fn download(&self, src: u64, out: &mut [f32]) -> Result<()> {
        self.stream.download(src, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that runs nothing: the test's [`Dev`] records its launches instead.
    struct NoDevice;

    impl HostDevice for NoDevice {
        fn launch(
            &self,
            _: &str,
            _: (u32, u32, u32),
            _: (u32, u32, u32),
            _: u32,
            _: &[KernelArg],
        ) -> std::result::Result<(), String> {
            Err("recorded, not run".into())
        }

        fn gemm(&self, _: &GemmShape, _: u64, _: u64, _: u64, _: Precision) -> Result<(), String> {
            Err("recorded, not run".into())
        }

        fn gemm_batched(&self, _: &BatchedGemm, _: u64, _: u64, _: u64) -> Result<(), String> {
            Err("recorded, not run".into())
        }
    }

    /// The launches `f` makes on a [`Dev`] that records them.
    fn recorded(f: impl FnOnce(&Dev) -> Result<()>) -> Result<Vec<HostOp>> {
        let stream = Stream::Host(Arc::new(NoDevice));
        let (k, rec) = (Kernels::none(), std::cell::RefCell::new(Vec::new()));
        let dev = Dev {
            stream: &stream,
            blas: None,
            k: &k,
            precision: Precision::F32,
            half: 0,
            half_len: 0,
            wq: 0,
            wq_len: 0,
            attention: AttentionPath::Rows,
            scores: 0,
            scores_len: 0,
            record: Some(&rec),
            fuse: true,
            split: true,
            part: 0,
            part_len: 0,
            done: 0,
            done_len: 0,
            q8: false,
            pdl: false,
        };
        f(&dev)?;
        Ok(rec.into_inner())
    }

    #[test]
    fn shortlist_launches_chunks_then_merge_with_their_parameters() {
        let (logits, pinned, bitmap, scratch, out) = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000);
        let ops = recorded(|d| {
            d.shortlist(
                logits, 5, 51865, 50257, 10, pinned, 90, bitmap, scratch, out,
            )
        })
        .unwrap();
        let p = launch::shortlist("t", 5, 51865, 50257, 10, 90)
            .unwrap()
            .unwrap();
        let [HostOp::Launch {
            name: a,
            cfg: ca,
            args: aa,
        }, HostOp::Launch {
            name: b,
            cfg: cb,
            args: ab,
        }] = &ops[..]
        else {
            panic!("two launches");
        };
        assert_eq!(
            (*a, *b),
            ("sotto_shortlist_chunks", "sotto_shortlist_merge")
        );
        assert_eq!(
            (ca.grid_dim, ca.block_dim),
            (p.chunks_config().grid_dim, (256, 1, 1))
        );
        assert_eq!(cb.grid_dim, (5, 1, 1));
        use KernelArg::{Ptr, U32};
        let chunks = [
            Ptr(logits),
            U32(51865),
            U32(50257),
            Ptr(bitmap),
            U32(p.per),
            U32(10),
        ];
        assert_eq!(aa[..], [&chunks[..], &[Ptr(scratch)]].concat()[..]);
        let merge = [
            Ptr(logits),
            U32(51865),
            U32(50257),
            Ptr(pinned),
            U32(90),
            U32(p.chunks),
        ];
        let tail = [U32(10), Ptr(scratch), Ptr(out)];
        assert_eq!(ab[..], [&merge[..], &tail[..]].concat()[..]);

        assert!(
            recorded(|d| d.shortlist(logits, 0, 51865, 50257, 10, 0, 0, 0, 0, 0))
                .unwrap()
                .is_empty()
        );
        let e = recorded(|d| d.shortlist(logits, 1, 51865, 50257, 65, 0, 0, 0, 0, 0))
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                CudaError::Shape {
                    op: "shortlist",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("top 65"), "{e}");
    }

    #[test]
    fn attention_path_is_chosen_by_name_and_never_guessed() {
        use AttentionPath::*;
        assert_eq!(
            AttentionPath::parse(None, false).unwrap(),
            None,
            "the default"
        );
        assert_eq!(AttentionPath::parse(Some(""), false).unwrap(), None);
        assert_eq!(
            AttentionPath::parse(None, true).unwrap(),
            Some(Rows),
            "SOTTO_CUDA_FLASH=0"
        );
        assert_eq!(
            AttentionPath::parse(Some("blas"), true).unwrap(),
            Some(Blas)
        );
        assert_eq!(
            AttentionPath::parse(Some("flash"), false).unwrap(),
            Some(Flash)
        );
        assert_eq!(
            AttentionPath::parse(Some("rows"), false).unwrap(),
            Some(Rows)
        );
        assert_eq!(AttentionPath::parse(Some("mma"), false).unwrap(), Some(Mma));
        let e = AttentionPath::parse(Some("fast"), false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SOTTO_CUDA_ATTENTION") && e.contains("fast"),
            "{e}"
        );
    }
}
