//! CPU compute for the Whisper forward pass.
//!
//! Activations are f32 slices in row-major order; weights are [`Weight`]s stored as f32, f16
//! (widened in registers) or ggml block-quantized rows. [`CpuBackend`] owns a rayon thread
//! pool and the kernel path ([`Isa`], detected at run time or forced with
//! `SOTTO_FORCE_ISA`), and exposes coarse ops (`linear`, `layer_norm`, `attention`, ...) so
//! that another backend can be put behind the same boundary later. The SIMD kernels
//! themselves are in [`kernels`]. Large products use the `gemm` crate, which does its own
//! CPU detection.

pub mod ab;
mod attention;
pub mod attention_bf16;
mod bf16;
mod blocked;
mod conv;
mod f32gemm;
mod fused;
mod governor;
mod int8;
pub mod kernels;
mod linear;
mod ops;
mod packed_attention;
mod peak;
mod pool;
mod probe;
mod scratch;
mod tiled;
mod tiled_many;
mod vocab;

pub use attention::Mask;
pub use bf16::{
    bf16_gemm_active, bf16_gemm_supported, bf16_to_f32, f32_to_bf16,
    linear_reference as bf16_linear_reference, Bf16Packed,
};
pub use f32gemm::{f32_gemm_supported, linear_reference as f32_linear_reference, F32Packed};
pub use governor::{ThreadGovernor, Threads};
pub use half::f16;
pub use int8::{
    int16_gemm_active, int16_gemm_preferred, int16_gemm_supported, int8_gemm_active,
    int8_gemm_supported, int8_quad_tile_active, linear_reference as int8_linear_reference,
    wide_qmax, I8Packed, Layout as I8Layout,
};
pub use packed_attention::PackedKv;
pub use peak::{measure_compute_peaks, measure_peaks, Peaks};
pub use probe::{accumulate_gram, LinearProbe};
pub use sotto_isa::Isa;
pub use sotto_quant::{quantize_row, QuantTiles, QuantType};
pub use tiled::F16Tiles;
pub use vocab::{VocabTop, VocabWeights};

/// Errors from the compute ops: a shape or length that does not fit, or a pool that could not start.
#[derive(Debug, thiserror::Error)]
pub enum ComputeError {
    #[error("{op}: {msg}")]
    Shape { op: &'static str, msg: String },
    #[error("thread pool with {threads} threads: {msg}")]
    ThreadPool { threads: usize, msg: String },
}

pub type Result<T, E = ComputeError> = std::result::Result<T, E>;

pub(crate) fn shape_err(op: &'static str, msg: impl Into<String>) -> ComputeError {
    ComputeError::Shape {
        op,
        msg: msg.into(),
    }
}

/// Weight storage: f32, f16 (widened in registers), or ggml block-quantized rows.
#[derive(Clone, Debug)]
pub enum Weight {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// f16 in tiles for the decoder's few-row products (see [`Weight::for_decoding`]).
    F16Tiled(F16Tiles),
    /// bf16 packed for the many-row GEMM on AVX-512 BF16 (see [`Weight::for_bf16_gemm`]).
    Bf16(Bf16Packed),
    /// f32 packed for the many-row f32 GEMM on AVX-512 (see [`Weight::for_f32_gemm`]).
    F32Packed(F32Packed),
    /// Integers per output channel, packed for the many-row integer GEMM: int8 for AVX-512
    /// VNNI or AVX2, or 16-bit pairs with wider levels for AVX2 (see
    /// [`Weight::for_int8_gemm`], [`Weight::for_int16_gemm`]).
    Int8(I8Packed),
    /// ggml-quantized rows regrouped for the decoder's few-row products (see
    /// [`Weight::for_decoding`]).
    QuantTiled(QuantTiles),
    /// `n_out` rows of `n_in` values, each `t.row_bytes(n_in)` bytes (n_in a multiple of 32).
    Quant {
        t: QuantType,
        data: Vec<u8>,
        n_out: usize,
        n_in: usize,
    },
    /// A vocabulary projection screened by its q8_0 plane (see
    /// [`Weight::vocab_from_f16_bytes`]).
    Vocab(Box<VocabWeights>),
}

/// Whether decoding lays f16 weights out in [`F16Tiles`] (where there are SIMD kernels for
/// them: x86-64 and aarch64).
const F16_TILES: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

impl Weight {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Weight::F32(w) => w.len(),
            Weight::F16(w) => w.len(),
            Weight::F16Tiled(t) => t.n_out() * t.n_in(),
            Weight::Bf16(p) => p.n_out() * p.n_in(),
            Weight::F32Packed(p) => p.n_out() * p.n_in(),
            Weight::Int8(p) => p.n_out() * p.n_in(),
            Weight::QuantTiled(q) => q.n_out() * q.n_in(),
            Weight::Quant { n_out, n_in, .. } => n_out * n_in,
            Weight::Vocab(v) => v.n_out() * v.n_in(),
        }
    }

    /// Bytes one product reads from this weight: what a decoder step streams from memory
    /// for it (the screened plane of a vocabulary projection, not the rows it recomputes).
    pub fn stream_bytes(&self) -> usize {
        match self {
            Weight::F32(w) => 4 * w.len(),
            Weight::F32Packed(p) => p.bytes(),
            Weight::F16(_) | Weight::F16Tiled(_) | Weight::Bf16(_) => 2 * self.len(),
            Weight::Int8(p) => p.stream_bytes(),
            Weight::QuantTiled(q) => q.n_out() * q.quant_type().row_bytes(q.n_in()),
            Weight::Quant { data, .. } => data.len(),
            Weight::Vocab(v) => v.screen_bytes(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A conv1d weight in PyTorch's order, Shape: [c_out, c_in, taps], reordered taps
    /// first, Shape: [c_out, taps, c_in], the order [`CpuBackend::conv1d`] reads: each
    /// input column of the product is then a whole time step (one copy, not a scatter).
    /// f32 and f16 stay what they are; quantized rows are dequantized (their blocks run
    /// along the old order); packed layouts are an error.
    pub fn taps_first(self, c_out: usize, c_in: usize, taps: usize) -> Result<Self> {
        let n = c_out * c_in * taps;
        if self.len() != n {
            return Err(shape_err(
                "conv weight",
                format!("{} values for [{c_out}, {c_in}, {taps}]", self.len()),
            ));
        }
        fn reorder<T: Copy + Default>(w: &[T], c_in: usize, taps: usize) -> Vec<T> {
            let mut out = vec![T::default(); w.len()];
            for (src, dst) in w
                .chunks_exact(c_in * taps)
                .zip(out.chunks_exact_mut(c_in * taps))
            {
                for (c, tap_vals) in src.chunks_exact(taps).enumerate() {
                    for (k, &v) in tap_vals.iter().enumerate() {
                        dst[k * c_in + c] = v;
                    }
                }
            }
            out
        }
        match self {
            Weight::F32(w) => Ok(Weight::F32(reorder(&w, c_in, taps))),
            Weight::F16(w) => Ok(Weight::F16(reorder(&w, c_in, taps))),
            w @ Weight::Quant { .. } => {
                let mut f = vec![0.0f32; n];
                w.read_f32(0, &mut f);
                Ok(Weight::F32(reorder(&f, c_in, taps)))
            }
            _ => Err(shape_err("conv weight", "already packed for a product")),
        }
    }

    /// The same weight laid out for products with a few input rows (decoding): on x86-64
    /// and aarch64, f16 rows of an `n_out × n_in` weight become [`F16Tiles`] (the tiled
    /// kernels stream memory about three times faster on x86); where sotto-quant has
    /// SIMD kernels for them ([`sotto_quant::tiles_have_kernels`]: x86-64, aarch64 with
    /// `sdot`), quantized rows become [`QuantTiles`] (all input rows in one pass, no
    /// horizontal sums); anything else is returned as it is.
    pub fn for_decoding(self, n_out: usize, n_in: usize) -> Result<Self> {
        match self {
            Weight::F16(rows) if F16_TILES => {
                Ok(Weight::F16Tiled(F16Tiles::new(&rows, n_out, n_in)?))
            }
            Weight::Quant {
                t,
                data,
                n_out: qo,
                n_in: qi,
            } if sotto_quant::tiles_have_kernels() => {
                let ok = (qo, qi) == (n_out, n_in)
                    && n_in > 0
                    && n_in.is_multiple_of(QuantType::BLOCK)
                    && t != QuantType::Q8_1
                    && data.len() == n_out * t.row_bytes(n_in);
                if !ok {
                    return Err(shape_err(
                        "quantized tiles",
                        format!(
                            "{t} weight [{qo}, {qi}] with {} bytes for {n_out}×{n_in} rows \
                             (rows must be whole blocks of 32)",
                            data.len()
                        ),
                    ));
                }
                Ok(Weight::QuantTiled(QuantTiles::new(t, &data, n_out, n_in)))
            }
            other => Ok(other),
        }
    }

    /// [`Weight::for_decoding`] of f16 rows given as their little-endian bytes (a mapped
    /// file's, at any alignment), without an f16 copy of them first. `None` where decoding
    /// keeps f16 rows as they are: the caller builds the weight as usual.
    pub fn f16_bytes_for_decoding(bytes: &[u8], n_out: usize, n_in: usize) -> Option<Result<Self>> {
        F16_TILES.then(|| F16Tiles::from_le_bytes(bytes, n_out, n_in).map(Weight::F16Tiled))
    }

    /// The vocabulary projection (the token embedding, `n_out` rows) of a Whisper decoder
    /// for [`CpuBackend::vocab_logits`], from its f16 rows' little-endian bytes: where
    /// sotto-quant has SIMD kernels for its tiles ([`sotto_quant::tiles_have_kernels`]),
    /// [`VocabWeights`] with the first `n_text` rows (the text tokens) screened. `None`
    /// where it is not screened (another CPU, rows not whole blocks of 32): the caller
    /// builds the weight as usual ([`Weight::for_decoding`]).
    pub fn vocab_from_f16_bytes(
        rows: &[u8],
        n_out: usize,
        n_in: usize,
        n_text: usize,
    ) -> Option<Result<Self>> {
        (sotto_quant::tiles_have_kernels() && n_in.is_multiple_of(QuantType::BLOCK)).then(|| {
            VocabWeights::from_f16_bytes(rows, n_out, n_in, n_text)
                .map(|v| Weight::Vocab(Box::new(v)))
        })
    }

    /// Copies elements `start..start + out.len()` into `out` as f32. Panics when the range
    /// passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        match self {
            Weight::F32(w) => out.copy_from_slice(&w[start..end]),
            Weight::F16(w) => kernels::f16_to_f32(sotto_isa::isa(), &w[start..end], out),
            Weight::F16Tiled(t) => t.read_f32(start, out),
            Weight::Bf16(p) => p.read_f32(start, out),
            Weight::F32Packed(p) => p.read_f32(start, out),
            Weight::Int8(p) => p.read_f32(start, out),
            Weight::QuantTiled(q) => q.read_f32(start, out),
            Weight::Vocab(v) => v.read_f32(start, out),
            Weight::Quant { t, data, n_in, .. } => {
                assert!(end <= self.len(), "read_f32: {start}..{end} past the end");
                let (rb, mut row) = (t.row_bytes(*n_in), vec![0.0f32; *n_in]);
                let mut at = start;
                while at < end {
                    let (r, c0) = (at / n_in, at % n_in);
                    let c1 = (*n_in).min(c0 + end - at);
                    sotto_quant::dequantize_row(*t, &data[r * rb..(r + 1) * rb], &mut row);
                    out[at - start..at - start + c1 - c0].copy_from_slice(&row[c0..c1]);
                    at += c1 - c0;
                }
            }
        }
    }
}

/// A linear layer `y = x · Wᵀ + b`.
#[derive(Clone, Debug)]
pub struct Linear {
    /// Shape: [n_out, n_in] (PyTorch order).
    pub weight: Weight,
    /// Shape: [n_out]
    pub bias: Option<Vec<f32>>,
    pub n_out: usize,
    pub n_in: usize,
}

impl Linear {
    /// Bytes one product reads: the weight's ([`Weight::stream_bytes`]) and the bias.
    pub fn stream_bytes(&self) -> usize {
        self.weight.stream_bytes() + 4 * self.bias.as_ref().map_or(0, |b| b.len())
    }

    /// Checks that the weight and bias lengths match `n_out × n_in`.
    pub fn new(weight: Weight, bias: Option<Vec<f32>>, n_out: usize, n_in: usize) -> Result<Self> {
        if let Weight::Quant {
            t,
            data,
            n_out: qo,
            n_in: qi,
        } = &weight
        {
            let ok = (*qo, *qi) == (n_out, n_in)
                && n_in.is_multiple_of(QuantType::BLOCK)
                && data.len() == n_out * t.row_bytes(n_in);
            if !ok {
                return Err(shape_err(
                    "linear",
                    format!(
                        "{t} weight [{qo}, {qi}] with {} bytes for a {n_out}×{n_in} layer \
                         (rows must be whole blocks of 32)",
                        data.len()
                    ),
                ));
            }
        }
        if let Weight::F16Tiled(t) = &weight {
            if (t.n_out(), t.n_in()) != (n_out, n_in) {
                return Err(shape_err(
                    "linear",
                    format!(
                        "f16 tiles [{}, {}] for a {n_out}×{n_in} layer",
                        t.n_out(),
                        t.n_in()
                    ),
                ));
            }
        }
        if let Weight::QuantTiled(q) = &weight {
            if (q.n_out(), q.n_in()) != (n_out, n_in) {
                return Err(shape_err(
                    "linear",
                    format!(
                        "{} tiles [{}, {}] for a {n_out}×{n_in} layer",
                        q.quant_type(),
                        q.n_out(),
                        q.n_in()
                    ),
                ));
            }
        }
        let packed = match &weight {
            Weight::Bf16(p) => Some(("bf16", p.n_out(), p.n_in())),
            Weight::F32Packed(p) => Some(("f32", p.n_out(), p.n_in())),
            Weight::Int8(p) => Some((p.layout().name(), p.n_out(), p.n_in())),
            _ => None,
        };
        if let Some((kind, po, pi)) = packed.filter(|&(_, po, pi)| (po, pi) != (n_out, n_in)) {
            return Err(shape_err(
                "linear",
                format!("{kind} [{po}, {pi}] for a {n_out}×{n_in} layer"),
            ));
        }
        if weight.len() != n_out * n_in {
            return Err(shape_err(
                "linear",
                format!(
                    "weight has {} elements, expected {n_out}×{n_in}",
                    weight.len()
                ),
            ));
        }
        if let Some(b) = &bias {
            if b.len() != n_out {
                return Err(shape_err(
                    "linear",
                    format!("bias has {} elements, expected {n_out}", b.len()),
                ));
            }
        }
        Ok(Self {
            weight,
            bias,
            n_out,
            n_in,
        })
    }
}

/// `out`'s base pointer, shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(*mut f32);

// SAFETY: tasks only write elements no other task touches (see their callers).
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `i` must lie inside the slice this pointer was taken from.
    pub(crate) unsafe fn at(self, i: usize) -> *mut f32 {
        // SAFETY: the caller keeps i in bounds.
        unsafe { self.0.add(i) }
    }

    /// GELU over rows `rows`, columns `cols` of the `[_, n]` output this points into.
    ///
    /// # Safety
    /// That block must lie inside the output and belong to the calling task alone.
    pub(crate) unsafe fn gelu_block(
        self,
        isa: Isa,
        n: usize,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
    ) {
        for i in rows {
            // SAFETY: row i, columns `cols` lie in the caller's block (this fn's contract).
            let row =
                unsafe { std::slice::from_raw_parts_mut(self.at(i * n + cols.start), cols.len()) };
            kernels::gelu(isa, row);
        }
    }
}

/// The largest decoder step a session runs, for [`CpuBackend::reserve_decode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShapes {
    /// Token rows in one step, all sequences together (5 for 5 beams).
    pub rows: usize,
    /// Widest input of a product (the MLP's second layer: 4·d).
    pub n_in: usize,
    /// Width and heads of the decoder.
    pub d: usize,
    pub n_head: usize,
    /// Most self-attention keys per sequence (the text context).
    pub text_keys: usize,
    /// Cross-attention keys (the audio context).
    pub audio_keys: usize,
}

/// Layer norm parameters.
#[derive(Clone, Debug)]
pub struct Norm {
    /// Shape: [d]
    pub gamma: Vec<f32>,
    /// Shape: [d]
    pub beta: Vec<f32>,
    pub eps: f32,
}

/// The CPU backend: a rayon pool with a fixed number of threads that every op runs on,
/// or, while [`CpuBackend::set_solo`] is on, a pool of one.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    /// The decoder's ops fork/join here instead (`pool.rs`): the caller takes part, and
    /// the helpers stay awake between a step's ops and between steps.
    team: pool::Pool,
    threads: usize,
    /// One worker, for running on a single thread when the machine's other cores are
    /// taken (see [`crate::ThreadGovernor`]); None for a one-thread backend.
    solo_pool: Option<rayon::ThreadPool>,
    solo: bool,
    isa: Isa,
    /// Whether the bf16 GEMM runs on AMX tiles ([`CpuBackend::with_amx`]).
    amx: bool,
    /// Whether f16 decoder tiles meeting many rows (a prompt) may run as bf16 GEMMs.
    tiles_bf16: bool,
    /// Large per-call buffers kept between calls: packed attention K/V and bf16 GEMM
    /// operands (x86-64 kernels only).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) scratch_f32: scratch::Pool<f32>,
    pub(crate) scratch_u32: scratch::Pool<u32>,
    /// The int16 attention's key and value panels, apart from `scratch_u32` so that its
    /// smaller buffers never take the place of a GEMM's activations there.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) scratch_pairs: scratch::Pool<u32>,
    /// Sees every linear product's input (calibration); normally none.
    probe: Option<std::sync::Arc<dyn LinearProbe>>,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("threads", &self.threads)
            .field("isa", &self.isa)
            .field("amx", &self.amx)
            .finish()
    }
}

impl CpuBackend {
    /// A backend with `threads` worker threads (0 means one per available core) on the
    /// detected (or `SOTTO_FORCE_ISA`-forced) kernel path.
    pub fn new(threads: usize) -> Result<Self> {
        Self::with_isa(threads, sotto_isa::isa())
    }

    /// As [`CpuBackend::new`] on kernel path `isa` (one this CPU lacks falls back to the best
    /// below it).
    pub fn with_isa(threads: usize, isa: Isa) -> Result<Self> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let build = |n: usize, name: &'static str| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .thread_name(move |i| format!("{name}-{i}"))
                .build()
                .map_err(|e| ComputeError::ThreadPool {
                    threads: n,
                    msg: e.to_string(),
                })
        };
        let pool = build(threads, "sotto-cpu")?;
        let team =
            pool::Pool::new(threads, "sotto-team").map_err(|e| ComputeError::ThreadPool {
                threads,
                msg: e.to_string(),
            })?;
        let solo_pool = if threads > 1 {
            Some(build(1, "sotto-solo")?)
        } else {
            None
        };
        let isa = kernels::checked(isa);
        Ok(Self {
            pool,
            team,
            threads,
            solo_pool,
            solo: false,
            isa,
            amx: isa == Isa::Avx512 && sotto_isa::amx_bf16(),
            tiles_bf16: false,
            scratch_f32: Default::default(),
            scratch_u32: Default::default(),
            scratch_pairs: Default::default(),
            probe: None,
        })
    }

    /// The threads ops run on now: 1 while [`CpuBackend::set_solo`] is on.
    pub fn threads(&self) -> usize {
        if self.solo {
            1
        } else {
            self.threads
        }
    }

    /// The threads this backend was built with.
    pub fn max_threads(&self) -> usize {
        self.threads
    }

    /// Runs every op on one thread (`true`) or on all of them (`false`, the default).
    /// The results are the same bits either way; only the time differs. A no-op on a
    /// one-thread backend.
    pub fn set_solo(&mut self, on: bool) {
        self.solo = on && self.solo_pool.is_some();
    }

    /// Whether ops run on one thread now (see [`CpuBackend::set_solo`]).
    pub fn solo(&self) -> bool {
        self.solo
    }

    /// The kernel path every op runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Whether the bf16 GEMM runs on Intel AMX tiles: on by default where
    /// [`sotto_isa::amx_bf16`] holds and the path is AVX-512; `false` keeps it on AVX-512's
    /// `vdpbf16ps` (tests run both).
    pub fn with_amx(mut self, on: bool) -> Self {
        self.amx = on && self.isa == Isa::Avx512 && sotto_isa::amx_bf16();
        self
    }

    /// Whether the bf16 GEMM runs on AMX tiles here.
    pub fn amx(&self) -> bool {
        self.amx
    }

    /// Lets products of f16 tiles ([`Weight::F16Tiled`]) with many rows (32 or more: a
    /// decoder's prompt) run as bf16 GEMMs, the tiles rounded to bf16 per call, on CPUs
    /// with AVX-512 BF16: about 1.6× faster prompts, at bf16 rounding. Off by default.
    pub fn with_bf16_tiles(mut self, on: bool) -> Self {
        self.tiles_bf16 = on;
        self
    }

    /// Whether tiled products of many rows may take the bf16 GEMM here.
    pub(crate) fn tiles_bf16(&self) -> bool {
        self.tiles_bf16 && bf16::simd(self.isa)
    }

    /// Sizes every worker's own scratch (of both pools) for decoder steps up to `shapes`,
    /// so that steps that size never allocate, on whichever worker their tasks land.
    /// Growing only: a smaller `shapes` later keeps what is there.
    pub fn reserve_decode(&self, shapes: &DecodeShapes) {
        let reserve = || {
            attention::reserve_thread(shapes);
            packed_attention::reserve_thread(shapes);
            linear::reserve_thread(shapes);
            vocab::reserve_thread(shapes);
        };
        self.pool.broadcast(|_| reserve());
        if let Some(solo) = &self.solo_pool {
            solo.broadcast(|_| reserve());
        }
        self.team.broadcast(&|_| reserve());
    }

    /// Runs `f(i)` for every `i < n` on this backend's threads, the caller among them (the
    /// decoder's fork/join, `pool.rs`), or all on the caller while solo; returns when all
    /// have run, re-raising a task's panic. Called from inside a task, it runs inline.
    pub fn par_for(&self, n: usize, f: impl Fn(usize) + Sync) {
        if self.threads() == 1 {
            (0..n).for_each(f);
        } else {
            self.team.run(n, &f);
        }
    }

    /// [`CpuBackend::par_for`] over `out`'s chunks of `len` values (the last one shorter):
    /// `f(i, chunk i)`.
    pub(crate) fn par_chunks_mut(
        &self,
        out: &mut [f32],
        len: usize,
        f: impl Fn(usize, &mut [f32]) + Sync,
    ) {
        let (total, dst) = (out.len(), OutPtr(out.as_mut_ptr()));
        self.par_for(total.div_ceil(len), |i| {
            let at = i * len;
            // SAFETY: chunk i lies inside `out`, and each task takes its own chunk.
            f(i, unsafe {
                std::slice::from_raw_parts_mut(dst.at(at), len.min(total - at))
            })
        });
    }

    /// Runs `f` inside this backend's pool (so nested rayon work uses its threads), or
    /// its one-thread pool while solo.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.solo_pool {
            Some(solo) if self.solo => solo.install(f),
            _ => self.pool.install(f),
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::{CpuBackend, Isa, Linear, Weight};

    /// A backend of `threads` on the detected path and, where that runs the bf16 products
    /// on AMX tiles, one on AVX-512's `vdpbf16ps` too: tests run both.
    pub fn backends(threads: usize) -> Vec<CpuBackend> {
        let be = CpuBackend::new(threads).unwrap();
        let avx512 = be
            .amx()
            .then(|| CpuBackend::new(threads).unwrap().with_amx(false));
        std::iter::once(be).chain(avx512).collect()
    }

    /// Deterministic pseudo-random values in [-1, 1).
    pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Exact attention in f64 on the unrounded inputs; `pos0`: causal, query i at
    /// position pos0 + i.
    #[allow(clippy::too_many_arguments)]
    pub fn naive_attention(
        q: &[f32],
        tq: usize,
        k: &[f32],
        v: &[f32],
        tk: usize,
        nh: usize,
        pos0: Option<usize>,
    ) -> Vec<f32> {
        let d = q.len() / tq;
        let dh = d / nh;
        let mut out = vec![0.0f32; tq * d];
        for h in 0..nh {
            for i in 0..tq {
                let lim = pos0.map_or(tk, |p| p + i + 1);
                let s: Vec<f64> = (0..lim)
                    .map(|j| {
                        (0..dh)
                            .map(|c| q[i * d + h * dh + c] as f64 * k[j * d + h * dh + c] as f64)
                            .sum::<f64>()
                            / (dh as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..dh {
                    let o: f64 = (0..lim)
                        .map(|j| e[j] / z * v[j * d + h * dh + c] as f64)
                        .sum();
                    out[i * d + h * dh + c] = o as f32;
                }
            }
        }
        out
    }

    /// A scalar model of a packed many-row GEMM: `out = x · Wᵀ + b` for `m` rows of `x`.
    pub type GemmReference<'a> = &'a dyn Fn(&[f32], usize, &Weight, Option<&[f32]>, &mut [f32]);

    /// Packs f32 rows `[n, k]` into a GEMM format; `None` where this CPU lacks its kernel.
    pub type GemmPack<'a> = &'a dyn Fn(&[f32], usize, usize) -> Option<Weight>;

    /// Checks a packed weight format of the many-row GEMM (`pack`: f32 rows `[n, k]` to the
    /// format, `None` where this CPU lacks its kernel) at odd shapes around its tiles, on
    /// 1 and 3 threads, with and without bias, GELU and a residual: within `ref_tol(k)` of its scalar
    /// model `reference`, and within `f32_tol(k)` of the f32 product of the unrounded weights.
    pub fn check_packed_gemm(
        pack: GemmPack,
        reference: GemmReference,
        ref_tol: &dyn Fn(usize) -> f32,
        f32_tol: &dyn Fn(usize) -> f32,
    ) {
        let shapes = [
            (9, 1, 1),
            (13, 33, 3),
            (17, 31, 64),
            (67, 45, 101),
            (100, 300, 385),
            (9, 257, 450),
            (203, 70, 33),
            (31, 70, 1100),
        ];
        for be in [1, 3].into_iter().flat_map(backends) {
            for &(m, n, k) in &shapes {
                let (x, w, b) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
                let Some(weight) = pack(&w, n, k) else {
                    eprintln!("skipped: this CPU lacks the format's kernel");
                    return;
                };
                for bias in [None, Some(b.clone())] {
                    let mut want = vec![0.0; m * n];
                    reference(&x, m, &weight, bias.as_deref(), &mut want);
                    let lin = Linear::new(weight.clone(), bias.clone(), n, k).unwrap();
                    let mut got = vec![f32::NAN; m * n];
                    be.linear(&x, m, &lin, &mut got).unwrap();
                    let err = max_abs_diff(&got, &want);
                    assert!(err <= ref_tol(k), "{m}×{n}×{k} vs reference: {err}");
                    let f32_lin = Linear::new(Weight::F32(w.clone()), bias.clone(), n, k);
                    let mut exact = vec![0.0; m * n];
                    be.linear(&x, m, &f32_lin.unwrap(), &mut exact).unwrap();
                    let err = max_abs_diff(&got, &exact);
                    assert!(err < f32_tol(k), "{m}×{n}×{k} vs f32: {err}");
                    be.linear_gelu(&x, m, &lin, &mut got).unwrap();
                    crate::kernels::gelu(Isa::Scalar, &mut want);
                    let err = max_abs_diff(&got, &want);
                    assert!(err <= ref_tol(k), "{m}×{n}×{k} gelu: {err}");
                    // Onto a residual (values of the product's size: one more rounding).
                    let base = rand_vec(m * n, 4);
                    let mut got = base.clone();
                    be.linear_residual(&x, m, &lin, &mut got).unwrap();
                    reference(&x, m, &weight, bias.as_deref(), &mut want);
                    want.iter_mut().zip(&base).for_each(|(w, b)| *w += b);
                    let err = max_abs_diff(&got, &want);
                    let tol = ref_tol(k) + 4.0 * f32::EPSILON * (k as f32).sqrt();
                    assert!(err <= tol, "{m}×{n}×{k} residual: {err}");
                    // The bits of the product, then the add (whether blocks are added or
                    // the tiles add as they store).
                    let mut product = vec![0.0; m * n];
                    be.linear(&x, m, &lin, &mut product).unwrap();
                    let added: Vec<f32> = base.iter().zip(&product).map(|(b, p)| b + p).collect();
                    assert_eq!(got, added, "{m}×{n}×{k} residual: not the product plus x");
                }
            }
        }
    }

    /// A packed weight on a backend whose kernel path cannot run its GEMM (scalar, AVX2)
    /// takes the f32 path over its rounded values, for few rows and for many. `packed`
    /// Shape: [n, k].
    pub fn check_packed_fallback(packed: Weight, n: usize, k: usize) {
        let m = 20;
        let x = rand_vec(m * k, 1);
        let mut rounded = vec![0.0; n * k];
        packed.read_f32(0, &mut rounded);
        let lin = Linear::new(packed, None, n, k).unwrap();
        let lin32 = Linear::new(Weight::F32(rounded), None, n, k).unwrap();
        for isa in [Isa::Scalar, Isa::Avx2] {
            let be = CpuBackend::with_isa(2, isa).unwrap();
            let gemm = crate::f32gemm::runs(be.isa(), &lin.weight)
                || crate::int8::runs(be.isa(), &lin.weight)
                || (matches!(lin.weight, Weight::Bf16(_)) && crate::bf16::simd(be.isa()));
            if gemm {
                continue;
            }
            for rows in [3, m] {
                let mut got = vec![0.0; rows * n];
                let mut exact = vec![0.0; rows * n];
                be.linear(&x[..rows * k], rows, &lin, &mut got).unwrap();
                be.linear(&x[..rows * k], rows, &lin32, &mut exact).unwrap();
                assert!(max_abs_diff(&got, &exact) < 1e-5, "{isa:?} m={rows}");
            }
        }
    }

    pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }
}
