//! [`CudaBackend`]: a context and a stream on one GPU, with sotto's kernels loaded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
    DriverError, LaunchArgs, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use crate::kernels::{self, QK};
use crate::launch::{self, Launch};
use crate::{driver, guard, CudaError, DeviceInfo, KernelArg, QuantType, Result};

/// A buffer in device memory owned by one [`CudaBackend`]'s stream.
pub struct DeviceBuffer<T> {
    slice: CudaSlice<T>,
}

impl<T> DeviceBuffer<T> {
    /// Elements (not bytes).
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }
}

/// Compiled kernels per (device ordinal, compute capability), so NVRTC runs once per
/// process and GPU however many backends are opened.
fn image_for(ordinal: usize, cc: (i32, i32)) -> Result<Arc<KernelImage>> {
    type Key = (usize, (i32, i32));
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<KernelImage>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked mid-insert; the map is still valid.
    let mut map = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(image) = map.get(&(ordinal, cc)) {
        return Ok(image.clone());
    }
    let image = Arc::new(compile_cached(cc)?);
    map.insert((ordinal, cc), image.clone());
    Ok(image)
}

/// What NVRTC compiles sotto's kernels to for one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Machine code for this architecture (`sm_XY`, a cubin): the usual case. The driver
    /// JIT-compiles PTX and refuses PTX from an NVRTC newer than itself
    /// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION, common where pip's nvidia-cuda-nvrtc is newer
    /// than the installed driver), while machine code from a newer NVRTC of the same major
    /// version loads (CUDA's minor-version compatibility), with no JIT at start.
    Sm(i32),
    /// PTX for this older architecture (`compute_XY`), which the driver compiles for the GPU:
    /// for a GPU newer than every architecture NVRTC knows.
    Ptx(i32),
}

impl Target {
    /// The target for a GPU of compute capability `cc`, given the architectures NVRTC
    /// supports (`nvrtcGetSupportedArchs`, e.g. 75, 80, …, 120); None when the GPU is older
    /// than all of them.
    pub fn choose((major, minor): (i32, i32), supported: &[i32]) -> Option<Target> {
        let arch = major * 10 + minor;
        if supported.contains(&arch) {
            return Some(Target::Sm(arch));
        }
        let newest_below = supported.iter().copied().filter(|&a| a < arch).max();
        newest_below.map(Target::Ptx)
    }

    fn option(self) -> String {
        match self {
            Target::Sm(a) => format!("--gpu-architecture=sm_{a}"),
            Target::Ptx(a) => format!("--gpu-architecture=compute_{a}"),
        }
    }
}

/// sotto's kernels compiled for one GPU: a cubin, or PTX text (see [`Target`]).
#[derive(Clone, Debug)]
pub struct KernelImage {
    pub target: Target,
    pub bytes: Vec<u8>,
}

impl KernelImage {
    /// Whether the bytes hold every kernel whole (a cached file that does not is compiled
    /// again).
    fn is_whole(target: Target, bytes: &[u8]) -> bool {
        match target {
            Target::Sm(_) => holds_every_kernel(bytes),
            Target::Ptx(_) => std::str::from_utf8(bytes).is_ok_and(|text| {
                text.contains(".version")
                    && kernels::NAMES
                        .iter()
                        .all(|n| text.contains(&format!(".entry {n}(")))
            }),
        }
    }

    /// The image as the driver loads it.
    fn module(&self) -> Ptx {
        match self.target {
            Target::Sm(_) => Ptx::from_binary(self.bytes.clone()),
            Target::Ptx(_) => Ptx::from_src(String::from_utf8_lossy(&self.bytes)),
        }
    }
}

/// The architectures this NVRTC compiles for, e.g. [75, 80, 86, …, 120].
fn supported_archs() -> Result<Vec<i32>> {
    use cudarc::nvrtc::sys;
    if !crate::nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let failed = |op: &'static str| {
        move |e| CudaError::Library {
            op,
            msg: format!("{e:?}"),
        }
    };
    let mut n = 0;
    // SAFETY: libnvrtc is present (checked above); the call writes one int.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(failed("nvrtcGetNumSupportedArchs"))?;
    let mut archs = vec![0i32; n.max(0) as usize];
    // SAFETY: `archs` holds the `n` ints the call writes.
    unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
        .result()
        .map_err(failed("nvrtcGetSupportedArchs"))?;
    Ok(archs)
}

/// The [`Target`] for compute capability `cc` with this NVRTC; an error naming both when
/// the GPU is older than every architecture NVRTC supports.
pub fn target(cc: (i32, i32)) -> Result<Target> {
    let archs = supported_archs()?;
    Target::choose(cc, &archs).ok_or_else(|| CudaError::Compile {
        major: cc.0,
        minor: cc.1,
        log: format!("this NVRTC supports only the architectures {archs:?}"),
    })
}

/// [`compile`] through the on-disk cache (`crate::kernel_cache`): NVRTC runs only for a
/// source, options, target and NVRTC version not compiled before.
pub fn compile_cached(cc: (i32, i32)) -> Result<KernelImage> {
    compile_cached_in(crate::kernel_cache::dir().as_deref(), cc)
}

/// [`compile_cached`] with the cache in `dir` (None: no disk cache).
fn compile_cached_in(dir: Option<&std::path::Path>, cc: (i32, i32)) -> Result<KernelImage> {
    let target = target(cc)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: libnvrtc is present (`target` checked); the call writes two ints.
    let _ = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    let opts = nvrtc_options(target).join(" ");
    let nvrtc = format!("nvrtc {major}.{minor}");
    let key = crate::kernel_cache::key(&[
        kernels::SOURCE.as_bytes(),
        opts.as_bytes(),
        nvrtc.as_bytes(),
    ]);
    let ext = match target {
        Target::Sm(_) => "cubin",
        Target::Ptx(_) => "ptx",
    };
    let valid = |bytes: &[u8]| KernelImage::is_whole(target, bytes);
    let bytes = crate::kernel_cache::get_or_compile(dir, key, ext, valid, || {
        compile_for(cc, target).map(|image| image.bytes)
    })?;
    Ok(KernelImage { target, bytes })
}

/// Whether `image` is a whole CUDA ELF naming every kernel: 64-bit little-endian, e_machine
/// 190 (EM_CUDA), with its program headers, section headers and every section's bytes inside
/// the file. A cached file that is not is compiled again.
fn holds_every_kernel(image: &[u8]) -> bool {
    let int = |at: u64, n: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let b = image.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0, |v, &x| v << 8 | x as u64))
    };
    let extent = || -> Option<u64> {
        let table = |off, size, count| Some((int(off, 8)?, int(size, 2)?, int(count, 2)?));
        let (phoff, phsize, phnum) = table(0x20, 0x36, 0x38)?;
        let (shoff, shsize, shnum) = table(0x28, 0x3a, 0x3c)?;
        let mut end = phoff
            .checked_add(phsize * phnum)?
            .max(shoff.checked_add(shsize * shnum)?);
        for i in 0..shnum {
            let h = shoff + i * shsize; // within the table's end, checked above
            const NOBITS: u64 = 8; // .bss-like: no bytes in the file
            if int(h + 4, 4)? != NOBITS {
                end = end.max(int(h + 0x18, 8)?.checked_add(int(h + 0x20, 8)?)?);
            }
        }
        Some(end)
    };
    let contains = |name: &[u8]| image.windows(name.len()).any(|w| w == name);
    image.starts_with(b"\x7fELF\x02\x01")
        && int(18, 2) == Some(190)
        && extent().is_some_and(|end| end <= image.len() as u64)
        && kernels::NAMES.iter().all(|n| contains(n.as_bytes()))
}

/// NVRTC's options for `target`.
fn nvrtc_options(target: Target) -> Vec<String> {
    vec![
        target.option(),
        // Precise division and sqrt: the kernels are compared with the CPU by MSE.
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
    ]
}

/// Runs NVRTC on [`kernels::SOURCE`] for `target` with [`nvrtc_options`] and `extra`
/// (`cc` names the GPU in errors); returns the image (a cubin, or PTX text) and NVRTC's log.
fn nvrtc_run(cc: (i32, i32), target: Target, extra: &[&str]) -> Result<(Vec<u8>, String)> {
    use cudarc::nvrtc::{result, sys};
    if !crate::nvrtc_present() {
        return Err(CudaError::NoNvrtc);
    }
    let failed = |log: String| CudaError::Compile {
        major: cc.0,
        minor: cc.1,
        log,
    };
    let src = std::ffi::CString::new(kernels::SOURCE).map_err(|e| failed(e.to_string()))?;
    let prog = result::create_program(&src, Some(c"sotto_kernels.cu"))
        .map_err(|e| failed(format!("nvrtcCreateProgram: {e:?}")))?;
    let mut opts = nvrtc_options(target);
    opts.extend(extra.iter().map(|o| o.to_string()));
    // SAFETY: `prog` is live until destroyed below, and `src` outlives it; the options are
    // C strings without NUL.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| String::from_utf8_lossy(&c_bytes(&l)).trim().to_string())
        .unwrap_or_default();
    let image = compiled
        .map_err(|e| failed(format!("{e:?}: {log}")))
        .and_then(|()| match target {
            // SAFETY: `prog` compiled for a real architecture, so it holds a cubin of
            // `size` bytes, which nvrtcGetCUBIN writes into a buffer of that size.
            Target::Sm(_) => unsafe {
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| failed(format!("nvrtcGetCUBINSize: {e:?}")))?;
                let mut cubin = vec![0u8; size];
                sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr().cast())
                    .result()
                    .map_err(|e| failed(format!("nvrtcGetCUBIN: {e:?}")))?;
                Ok(cubin)
            },
            // SAFETY: `prog` compiled, so it holds PTX text (NUL-terminated).
            Target::Ptx(_) => unsafe { result::get_ptx(prog) }
                .map(|t| c_bytes(&t))
                .map_err(|e| failed(format!("nvrtcGetPTX: {e:?}"))),
        });
    // SAFETY: `prog` is not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    Ok((image?, log))
}

/// The bytes of NVRTC's NUL-terminated text (a log, PTX) before the NUL.
fn c_bytes(text: &[std::ffi::c_char]) -> Vec<u8> {
    text.iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect()
}

/// Compiles [`kernels::SOURCE`] for a GPU of compute capability `cc` ([`target`]: machine
/// code where this NVRTC knows the architecture). Needs libnvrtc only, no GPU or driver.
pub fn compile(cc: (i32, i32)) -> Result<KernelImage> {
    compile_for(cc, target(cc)?)
}

fn compile_for(cc: (i32, i32), target: Target) -> Result<KernelImage> {
    let (bytes, _) = nvrtc_run(cc, target, &[])?;
    Ok(KernelImage { target, bytes })
}

/// Queues `func` on `stream` with `args` as its parameters; with `pdl`, as a programmatic
/// dependent launch (`cuLaunchKernelEx`, compute capability 9.0 and later), which the GPU
/// may schedule while the kernel before it runs: sotto's kernels wait for that one first
/// (`sotto_pdl_start`).
///
/// # Safety
/// `args` must be exactly the kernel's parameters, in order, and every pointer among them
/// must address live device memory large enough for the kernel's indexing at `cfg`.
pub(crate) unsafe fn launch_on(
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &[KernelArg],
    pdl: bool,
) -> Result<(), DriverError> {
    if pdl {
        // SAFETY: as this function's own contract.
        return unsafe { launch_dependent(stream, func, cfg, args) };
    }
    let mut l = stream.launch_builder(func);
    for a in args {
        match a {
            KernelArg::Ptr(v) => l.arg(v),
            KernelArg::U32(v) => l.arg(v),
            KernelArg::I32(v) => l.arg(v),
            KernelArg::F32(v) => l.arg(v),
        };
    }
    // SAFETY: the caller guarantees the parameters and the memory (see above).
    unsafe { l.launch(cfg) }.map(|_| ())
}

/// Each kernel parameter in its own 8-byte slot, as `cuLaunchKernelEx`'s parameter
/// pointers address them: the kernel reads its type's size from the slot's start, which
/// holds the value's bytes (x86-64 and aarch64 are little-endian).
fn param_slots(args: &[KernelArg]) -> Vec<u64> {
    args.iter()
        .map(|a| match *a {
            KernelArg::Ptr(v) => v,
            KernelArg::U32(v) => v as u64,
            KernelArg::I32(v) => v as u32 as u64,
            KernelArg::F32(v) => v.to_bits() as u64,
        })
        .collect()
}

/// [`launch_on`] with the programmatic stream serialization attribute.
///
/// # Safety
/// As [`launch_on`].
unsafe fn launch_dependent(
    stream: &CudaStream,
    func: &CudaFunction,
    cfg: LaunchConfig,
    args: &[KernelArg],
) -> Result<(), DriverError> {
    use cudarc::driver::sys;
    let mut slots = param_slots(args);
    let mut params: Vec<*mut std::ffi::c_void> =
        slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
    // The value union zeroed whole, then its one field for this attribute set.
    let mut value = sys::CUlaunchAttributeValue { pad: [0; 64] };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `params` points at one live slot per kernel parameter, in order (the caller
    // guarantees they are the kernel's), and `config` and `attr` outlive the call, which
    // copies them; the context is bound to this thread by the caller, as for launch_on.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            func.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
}

/// Initializes the driver and opens GPU `ordinal`: its description, a context on it and
/// sotto's kernels compiled (once per process and GPU) and loaded. Call inside [`guard`]
/// after checking [`crate::driver_present`].
pub(crate) fn open(ordinal: usize) -> Result<(DeviceInfo, Arc<CudaContext>, Arc<CudaModule>)> {
    crate::init()?;
    let count = cudarc::driver::result::device::get_count()
        .map_err(driver("cuDeviceGetCount"))?
        .max(0) as usize;
    if count == 0 {
        return Err(CudaError::NoDevice);
    }
    if ordinal >= count {
        return Err(CudaError::BadOrdinal { ordinal, count });
    }
    let info = crate::device_info(ordinal)?;
    let image = image_for(ordinal, info.compute_capability)?;
    let ctx = CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))?;
    let module = ctx
        .load_module(image.module())
        .map_err(driver("cuModuleLoadData"))?;
    Ok((info, ctx, module))
}

/// A context and stream on one GPU with sotto's kernels loaded. Ops queue on the stream;
/// [`CudaBackend::download`] waits for them.
pub struct CudaBackend {
    info: DeviceInfo,
    stream: Arc<CudaStream>,
    funcs: HashMap<&'static str, CudaFunction>,
    // Kept last so the functions and stream drop before it.
    _ctx: Arc<CudaContext>,
}

impl CudaBackend {
    /// Opens GPU `ordinal`: checks for libcuda before touching it, creates the context and
    /// a stream, and compiles (once per process) and loads the kernels.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !crate::driver_present() {
            return Err(CudaError::NoDriver);
        }
        guard("opening the GPU", || {
            let (info, ctx, module) = open(ordinal)?;
            let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
            let funcs = kernels::NAMES
                .iter()
                .map(|&name| Ok((name, module.load_function(name).map_err(driver(name))?)))
                .collect::<Result<_>>()?;
            Ok(CudaBackend {
                info,
                stream,
                funcs,
                _ctx: ctx,
            })
        })
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    /// Copies host values to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, x: &[T]) -> Result<DeviceBuffer<T>> {
        let slice = self.stream.clone_htod(x).map_err(driver("upload"))?;
        Ok(DeviceBuffer { slice })
    }

    /// A zeroed device buffer of `n` elements.
    pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<DeviceBuffer<T>> {
        let slice = self.stream.alloc_zeros(n).map_err(driver("alloc"))?;
        Ok(DeviceBuffer { slice })
    }

    /// Waits for the queued work and copies `x` back to the host.
    pub fn download<T: DeviceRepr>(&self, x: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let out = self
            .stream
            .clone_dtoh(&x.slice)
            .map_err(driver("download"))?;
        self.stream.synchronize().map_err(driver("synchronize"))?;
        Ok(out)
    }

    /// The device address of `x`, for [`CudaBackend::launch_raw`]'s arguments.
    pub fn address<T>(&self, x: &DeviceBuffer<T>) -> u64 {
        x.slice.device_ptr(&self.stream).0
    }

    /// Queues kernel `name` (one of [`kernels::NAMES`]) on `grid` blocks of `block` threads
    /// with `shared_bytes` of dynamic shared memory, as the model's sessions launch them:
    /// how the conformance tests reach every kernel.
    ///
    /// # Safety
    /// `args` must be exactly the kernel's parameters, in order, and every pointer among
    /// them must address a live buffer of this backend, large enough for the kernel's
    /// indexing at this launch shape.
    pub unsafe fn launch_raw(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) -> Result<()> {
        let func = self.funcs.get(name).ok_or_else(|| CudaError::Shape {
            op: "launch_raw",
            msg: format!("no kernel named {name}"),
        })?;
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: block,
            shared_mem_bytes: shared_bytes,
        };
        // SAFETY: the caller guarantees the parameters and the buffers (see above).
        unsafe { launch_on(&self.stream, func, cfg, args, false) }.map_err(driver("cuLaunchKernel"))
    }

    fn builder(&self, name: &'static str) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.funcs[name])
    }

    /// Queues the kernel whose arguments `args` holds.
    fn launch(name: &'static str, mut args: LaunchArgs<'_>, cfg: Launch) -> Result<()> {
        // SAFETY: each caller pushes exactly the parameters its kernel declares, and the
        // launch shape comes from `launch`, which bounds indices by the checked lengths.
        unsafe { args.launch(cfg.into()) }.map_err(driver(name))?;
        Ok(())
    }

    /// `a += b`. Shape: a, b [n]
    pub fn add(&self, a: &mut DeviceBuffer<f32>, b: &DeviceBuffer<f32>) -> Result<()> {
        same_len("add", a.len(), b.len())?;
        let n = launch::count_u32("add", a.len())?;
        let Some(cfg) = launch::elementwise("add", a.len())? else {
            return Ok(());
        };
        let mut l = self.builder("sotto_add_f32");
        l.arg(&mut a.slice).arg(&b.slice).arg(&n);
        Self::launch("sotto_add_f32", l, cfg)
    }

    /// Exact (erf) GELU in place. Shape: x [n]
    pub fn gelu(&self, x: &mut DeviceBuffer<f32>) -> Result<()> {
        let n = launch::count_u32("gelu", x.len())?;
        let Some(cfg) = launch::elementwise("gelu", x.len())? else {
            return Ok(());
        };
        let mut l = self.builder("sotto_gelu_f32");
        l.arg(&mut x.slice).arg(&n);
        Self::launch("sotto_gelu_f32", l, cfg)
    }

    /// Layer norm of each row. Shape: x, out [n_rows, d]; gamma, beta [d]
    pub fn layer_norm(
        &self,
        x: &DeviceBuffer<f32>,
        gamma: &DeviceBuffer<f32>,
        beta: &DeviceBuffer<f32>,
        eps: f32,
        out: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        let d = gamma.len();
        same_len("layer_norm (beta)", beta.len(), d)?;
        same_len("layer_norm (out)", out.len(), x.len())?;
        let n_rows = whole_rows("layer_norm", x.len(), d)?;
        let Some(cfg) = launch::rows("layer_norm", n_rows, d)? else {
            return Ok(());
        };
        let (d, none, stride) = (d as u32, 0u64, 0u32);
        let name = "sotto_layer_norm";
        let mut l = self.builder(name);
        // No add (null, stride 0); f32 out only (a null f16 out).
        l.arg(&x.slice)
            .arg(&none)
            .arg(&stride)
            .arg(&gamma.slice)
            .arg(&beta.slice)
            .arg(&mut out.slice)
            .arg(&none)
            .arg(&d)
            .arg(&eps);
        Self::launch(name, l, cfg)
    }

    /// Softmax of each row in place. Shape: x [n_rows, n_cols]
    pub fn softmax_rows(&self, x: &mut DeviceBuffer<f32>, n_cols: usize) -> Result<()> {
        let n_rows = whole_rows("softmax_rows", x.len(), n_cols)?;
        let Some(cfg) = launch::rows("softmax_rows", n_rows, n_cols)? else {
            return Ok(());
        };
        let n_cols = n_cols as u32;
        let mut l = self.builder("sotto_softmax_rows_f32");
        l.arg(&mut x.slice).arg(&n_cols);
        Self::launch("sotto_softmax_rows_f32", l, cfg)
    }

    /// Widens f16 to f32. Shape: src, dst [n]
    pub fn f16_to_f32(
        &self,
        src: &DeviceBuffer<half::f16>,
        dst: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        same_len("f16_to_f32", dst.len(), src.len())?;
        let n = launch::count_u32("f16_to_f32", src.len())?;
        let Some(cfg) = launch::elementwise("f16_to_f32", src.len())? else {
            return Ok(());
        };
        let mut l = self.builder("sotto_f16_to_f32");
        l.arg(&src.slice).arg(&mut dst.slice).arg(&n);
        Self::launch("sotto_f16_to_f32", l, cfg)
    }

    /// Dequantizes ggml blocks of a weight type to f32, as `sotto_quant::dequantize_row`.
    /// Shape: src [n / 32 blocks, bytes], dst [n]
    pub fn dequantize(
        &self,
        t: QuantType,
        src: &DeviceBuffer<u8>,
        dst: &mut DeviceBuffer<f32>,
    ) -> Result<()> {
        let name = kernels::for_type("sotto_dequantize", t).ok_or(CudaError::Unsupported {
            op: "dequantize",
            ty: t,
        })?;
        let n = dst.len();
        if !n.is_multiple_of(QK) || src.len() != n / QK * t.block_bytes() {
            return Err(CudaError::Shape {
                op: "dequantize",
                msg: format!(
                    "{t}: {} bytes do not hold {n} values ({} per {QK}-value block)",
                    src.len(),
                    t.block_bytes()
                ),
            });
        }
        let n32 = launch::count_u32("dequantize", n)?;
        let Some(cfg) = launch::elementwise("dequantize", n)? else {
            return Ok(());
        };
        let mut l = self.builder(name);
        l.arg(&src.slice).arg(&mut dst.slice).arg(&n32);
        Self::launch(name, l, cfg)
    }
}

fn same_len(op: &'static str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(CudaError::Shape {
            op,
            msg: format!("length {got}, expected {want}"),
        })
    }
}

fn whole_rows(op: &'static str, len: usize, n_cols: usize) -> Result<usize> {
    if n_cols == 0 || !len.is_multiple_of(n_cols) {
        return Err(CudaError::Shape {
            op,
            msg: format!("{len} values are not whole rows of {n_cols}"),
        });
    }
    Ok(len / n_cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_checks_name_the_op() {
        assert!(same_len("add", 3, 3).is_ok());
        let e = same_len("add", 3, 4).unwrap_err().to_string();
        assert_eq!(e, "add: length 3, expected 4");
        assert_eq!(whole_rows("softmax_rows", 12, 4).unwrap(), 3);
        let e = whole_rows("softmax_rows", 10, 4).unwrap_err().to_string();
        assert!(e.contains("not whole rows of 4"), "{e}");
        assert!(whole_rows("softmax_rows", 0, 0).is_err());
    }

    /// NVRTC needs no GPU: wherever libnvrtc loads, every kernel must compile for the
    /// architectures sotto targets. `SOTTO_REQUIRE_NVRTC=1` turns a missing library into a
    /// failure (CI sets it after unpacking the nvidia-cuda-nvrtc wheel).
    /// Whether NVRTC can be loaded; when not, says why the test skips, or fails it where
    /// `SOTTO_REQUIRE_NVRTC` is set.
    fn nvrtc_or_skip() -> bool {
        if crate::nvrtc_present() {
            return true;
        }
        let require = std::env::var_os("SOTTO_REQUIRE_NVRTC").is_some_and(|v| v != "0");
        assert!(
            !require,
            "SOTTO_REQUIRE_NVRTC is set, but libnvrtc was not found (LD_LIBRARY_PATH)"
        );
        println!(
            "skipped: libnvrtc not found; set LD_LIBRARY_PATH to a folder with libnvrtc.so.13"
        );
        false
    }

    #[test]
    fn kernels_compile_with_nvrtc() {
        if !nvrtc_or_skip() {
            return;
        }
        for cc in [(7, 5), (8, 0), (8, 9), (9, 0)] {
            let image = compile(cc).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(image.target, Target::Sm(cc.0 * 10 + cc.1));
            assert!(
                holds_every_kernel(&image.bytes),
                "sm {cc:?}: not a whole cubin"
            );
            println!(
                "sm {}.{}: {} bytes of machine code",
                cc.0,
                cc.1,
                image.bytes.len()
            );
        }
        // A cubin cut short, or not a CUDA ELF, is not taken from the cache.
        let cubin = compile((8, 0)).unwrap().bytes;
        assert!(!holds_every_kernel(&cubin[..cubin.len() - 1]), "truncated");
        let mut other = cubin.clone();
        other[18] = 62; // EM_X86_64
        assert!(!holds_every_kernel(&other));
    }

    /// A GPU newer than every architecture this NVRTC knows gets PTX for the newest one
    /// (which its driver compiles); one older than all of them, a clear error.
    #[test]
    fn a_gpu_newer_than_nvrtc_gets_ptx() {
        if !nvrtc_or_skip() {
            return;
        }
        let archs = supported_archs().unwrap();
        let newest = *archs.iter().max().unwrap();
        let future = (newest / 10 + 1, 0);
        assert_eq!(target(future).unwrap(), Target::Ptx(newest));
        let image = compile(future).unwrap_or_else(|e| panic!("{e}"));
        assert!(KernelImage::is_whole(image.target, &image.bytes));
        let text = String::from_utf8(image.bytes.clone()).unwrap();
        assert!(
            text.contains(&format!(".target sm_{newest}")),
            "PTX for the newest arch"
        );
        assert!(!KernelImage::is_whole(
            image.target,
            &image.bytes[..image.bytes.len() / 2]
        ));
        let e = target((1, 0)).unwrap_err().to_string();
        assert!(
            e.contains("compute capability 1.0") && e.contains("supports only"),
            "{e}"
        );
    }

    #[test]
    fn targets_follow_nvrtcs_architectures() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(Target::choose((9, 0), &archs), Some(Target::Sm(90)));
        assert_eq!(Target::choose((12, 0), &archs), Some(Target::Sm(120)));
        // Not in the list: PTX for the newest architecture below, forward-compatible.
        assert_eq!(Target::choose((8, 7), &archs), Some(Target::Ptx(86)));
        assert_eq!(Target::choose((13, 0), &archs), Some(Target::Ptx(120)));
        assert_eq!(Target::choose((7, 0), &archs), None);
        assert_eq!(Target::choose((9, 0), &[]), None);
        assert_eq!(Target::Sm(90).option(), "--gpu-architecture=sm_90");
        assert_eq!(Target::Ptx(120).option(), "--gpu-architecture=compute_120");
    }

    /// The disk cache with the real compiler: the first call compiles and saves, the
    /// second reads the same bytes back (`SOTTO_KERNEL_CACHE` is read per call).
    #[test]
    fn compiled_kernels_are_cached_on_disk() {
        if !nvrtc_or_skip() {
            return;
        }
        let dir = std::env::temp_dir().join(format!("sotto-kernels-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cached = |cc| compile_cached_in(Some(&dir), cc).unwrap().bytes;
        let first = cached((8, 0));
        assert!(holds_every_kernel(&first));
        let t = std::time::Instant::now();
        let second = cached((8, 0));
        assert_eq!(first, second);
        assert!(
            t.elapsed().as_millis() < 500,
            "read back, not compiled again"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Another architecture is another file.
        cached((9, 0));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What ptxas says of one kernel (`--ptxas-options=-v`).
    #[derive(Debug, Default)]
    struct Resources {
        registers: u32,
        stack: u32,
        spill_stores: u32,
        spill_loads: u32,
        smem: u32,
    }

    /// Compiles [`kernels::SOURCE`] to machine code for `sm_{cc}` (NVRTC runs ptxas itself
    /// for a real architecture) and reads each entry's resources from ptxas's report.
    fn sass_resources(cc: (i32, i32)) -> HashMap<String, Resources> {
        let target = Target::Sm(cc.0 * 10 + cc.1);
        let (_, log) =
            nvrtc_run(cc, target, &["--ptxas-options=-v"]).unwrap_or_else(|e| panic!("{e}"));
        parse_ptxas_report(&log)
    }

    /// Each entry's resources from ptxas's `-v` report: "Function properties for NAME",
    /// then "N bytes stack frame, N bytes spill stores, N bytes spill loads" and "Used N
    /// registers, ..., N bytes smem". A figure that does not parse reads as `u32::MAX`.
    fn parse_ptxas_report(log: &str) -> HashMap<String, Resources> {
        let number = |line: &str, unit: &str| -> Option<u32> {
            let at = line.find(unit)?;
            line[..at].split_whitespace().last()?.parse().ok()
        };
        let mut out = HashMap::new();
        let mut current: Option<String> = None;
        for line in log.lines() {
            if let Some(at) = line.find("Function properties for ") {
                let name = line[at + "Function properties for ".len()..]
                    .trim()
                    .to_string();
                out.insert(name.clone(), Resources::default());
                current = Some(name);
                continue;
            }
            let Some(r) = current.as_ref().and_then(|n| out.get_mut(n)) else {
                continue;
            };
            if line.contains("stack frame") {
                r.stack = number(line, "bytes stack frame").unwrap_or(u32::MAX);
                r.spill_stores = number(line, "bytes spill stores").unwrap_or(u32::MAX);
                r.spill_loads = number(line, "bytes spill loads").unwrap_or(u32::MAX);
            } else if line.contains("Used ") && line.contains(" registers") {
                r.registers = number(line, " registers").unwrap_or(u32::MAX);
                r.smem = number(line, " bytes smem").unwrap_or(0);
                current = None;
            }
        }
        out
    }

    #[test]
    fn parameters_fill_the_low_bytes_of_their_slots() {
        let slots = super::param_slots(&[
            KernelArg::Ptr(0x7f00_1234_5678),
            KernelArg::U32(7),
            KernelArg::I32(-2),
            KernelArg::F32(1.5),
        ]);
        assert_eq!(slots[0], 0x7f00_1234_5678);
        // A 4-byte parameter is read from the slot's first 4 bytes: the value, exactly.
        let low = |s: u64| u32::from_le_bytes(s.to_le_bytes()[..4].try_into().unwrap());
        assert_eq!(low(slots[1]), 7);
        assert_eq!(low(slots[2]) as i32, -2);
        assert_eq!(f32::from_bits(low(slots[3])), 1.5);
        assert!(slots[1..].iter().all(|s| s >> 32 == 0));
    }

    #[test]
    fn ptxas_report_is_read_per_kernel() {
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 41216 bytes smem
ptxas info    : Compile time = 1.0 ms
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
";
        let r = parse_ptxas_report(log);
        let a = &r["a"];
        assert_eq!(
            (a.stack, a.spill_stores, a.spill_loads, a.registers, a.smem),
            (16, 8, 4, 255, 41216)
        );
        let b = &r["b"];
        assert_eq!(
            (b.stack, b.spill_stores, b.spill_loads, b.registers, b.smem),
            (0, 0, 0, 12, 0)
        );
        assert_eq!(r.len(), 2);
    }

    /// The widest block each kernel is launched with (see `launch.rs`, `plan.rs`).
    fn launch_block(name: &str) -> u32 {
        match name {
            "sotto_attention" => kernels::ATTENTION_BLOCK,
            "sotto_flash_attention" => kernels::FLASH_ROWS * 8,
            "sotto_flash_attention_mma" => kernels::MMA_BLOCK,
            "sotto_layer_norm" | "sotto_softmax_rows_f32" => launch::MAX_ROW_BLOCK,
            n if n.starts_with("sotto_mul_mat_vec") => kernels::MMV_BLOCK,
            _ => launch::ELEMENTWISE_BLOCK,
        }
    }

    /// The kernels' machine code, checked without a GPU: no kernel spills registers to
    /// local memory or keeps a stack frame (both cost device-memory traffic in the hot
    /// loops), none asks for more static shared memory than every architecture gives a
    /// block without opting in (48 KiB; more fails at launch), and each fits its widest
    /// block in an SM's registers.
    #[test]
    fn kernels_do_not_spill_on_the_target_architectures() {
        if !nvrtc_or_skip() {
            return;
        }
        for (major, minor) in [(7, 5), (8, 0), (8, 9), (9, 0)] {
            let cc = major * 10 + minor;
            let res = sass_resources((major, minor));
            for name in kernels::NAMES {
                let r = res
                    .get(name)
                    .unwrap_or_else(|| panic!("sm_{cc}: ptxas said nothing of {name}"));
                assert!(
                    r.spill_stores == 0 && r.spill_loads == 0 && r.stack == 0,
                    "sm_{cc}: {name} spills or keeps a stack frame: {r:?}"
                );
                assert!(
                    r.registers > 0 && r.registers <= 255,
                    "sm_{cc}: {name}: {r:?}"
                );
                assert!(r.smem <= 48 * 1024, "sm_{cc}: {name}: {r:?}");
                // A block needs registers for all its threads (per thread, rounded up to 8)
                // out of an SM's 64 Ki, or the launch fails.
                let block = launch_block(name);
                assert!(
                    r.registers.next_multiple_of(8) * block <= 64 * 1024,
                    "sm_{cc}: {name}: {} registers × {block} threads",
                    r.registers
                );
            }
            let most = kernels::NAMES
                .iter()
                .max_by_key(|n| res[**n].registers)
                .expect("kernels");
            println!(
                "sm_{cc}: {} kernels, none spills; most registers {} ({most}); flash attention {:?}",
                kernels::NAMES.len(),
                res[*most].registers,
                res["sotto_flash_attention"],
            );
        }
    }

    #[test]
    fn new_without_driver_is_an_error_not_a_panic() {
        if crate::driver_present() {
            return; // covered by the conformance tests on a GPU machine
        }
        assert!(matches!(CudaBackend::new(0), Err(CudaError::NoDriver)));
    }
}
