//! sotto's CUDA kernels run on the host: [`sotto_cuda::kernels::KERNELS`] compiled by the
//! host C++ compiler over `emu_host.hpp` (CUDA's built-ins as fibers and plain C++), loaded
//! as a shared library, launched cuLaunchKernel-style with host addresses as device
//! pointers. It checks the kernels' logic where no GPU is; see `emu_host.hpp` for what it
//! cannot check.
//!
//! Needs a C++17 compiler (`$CXX`, else `c++`). Without one, [`get`] prints "skipped: …"
//! and returns None, unless `SOTTO_REQUIRE_EMULATOR=1` (set by CI) makes that a failure.
//! `SOTTO_SKIP_EMULATION=1` (scripts/gpu-check.sh, where the GPU runs the kernels) skips it.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use sotto_cuda::kernels;

const HOST: &str = include_str!("emu_host.hpp");

type LaunchFn = unsafe extern "C" fn(
    *const c_char,
    *const c_uint,
    *const c_uint,
    c_uint,
    *mut *mut c_void,
    c_int,
) -> c_int;

/// The order in which a launch runs its blocks, and within each barrier phase its threads.
/// A kernel that gives different results in the two reads another thread's or block's
/// writes without a barrier between them: a race a GPU would expose (see `emu_host.hpp`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    #[default]
    Forward,
    Reverse,
}

/// The compiled emulator. Launches are serialized: the emulation keeps its state in globals.
pub struct Emu {
    launch: Mutex<LaunchFn>,
    _lib: libloading::Library,
}

/// A kernel that races on purpose, for tests/emulated.rs to check that the two
/// [`Schedule`]s expose what a missing sync does. Thread t of block b (i = b·blockDim + t)
/// writes, then reads another's write into `seen[i]`, by `mode`:
/// 0 the next thread's, after __syncthreads; 1 the next thread's, with no sync; 2 the
/// previous thread's, with no sync; 3 a thread's of the other warp (64 threads), after a
/// shuffle alone; 4 the neighbouring lane's, after a shuffle; 5 a shuffle half the warp
/// makes; 6 the previous block's `out`, which it writes in the same launch.
const SELF_CHECK: &str = r#"
extern "C" __global__ void emu_self_check(float* out, float* seen, int mode) {
    extern __shared__ float s[];
    unsigned int t = threadIdx.x, n = blockDim.x, i = blockIdx.x * n + t;
    s[t] = (float)t;
    out[i] = 1.0f;
    float v = 0.0f;
    if (mode == 0) {
        __syncthreads();
        v = s[(t + 1) % n];
    } else if (mode == 1) {
        v = s[(t + 1) % n];
    } else if (mode == 2) {
        v = s[(t + n - 1) % n];
    } else if (mode == 3 || mode == 4) {
        float w = __shfl_xor_sync(0xffffffffu, (float)t, 1);
        v = mode == 3 ? s[(t + 32) % n] : s[(unsigned int)w];
    } else if (mode == 5) {
        if (t % 32 < 16) v = __shfl_xor_sync(0xffffffffu, (float)t, 1);
    } else if (mode == 6) {
        v = blockIdx.x > 0 ? out[i - n] : 1.0f;
    }
    seen[i] = v;
}
"#;

/// Rewrites what plain C++ cannot compile: `extern __shared__ T name[];` (dynamic shared
/// memory) becomes a pointer into the emulator's per-block buffer.
fn host_source() -> String {
    let mut out = String::from(HOST);
    out.push_str("\n// ---- sotto_cuda::kernels::KERNELS, then the emulator's self-check ----\n");
    for line in kernels::KERNELS.lines().chain(SELF_CHECK.lines()) {
        match line.trim().strip_prefix("extern __shared__ ") {
            Some(decl) => {
                let decl = decl
                    .strip_suffix("[];")
                    .expect("extern __shared__ T name[];");
                let (ty, name) = decl.rsplit_once(' ').expect("a type and a name");
                out.push_str(&format!(
                    "    {ty}* {name} = reinterpret_cast<{ty}*>(emu::dynamic_shared);\n"
                ));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.push_str("\nstatic const EmuKernel emu_kernels[] = {\n");
    for name in kernels::NAMES.iter().chain(&["emu_self_check"]) {
        out.push_str(&format!(
            "    {{\"{name}\", [](void** a) {{ emu_invoke({name}, a); }}}},\n"
        ));
    }
    out.push_str(
        r#"};

extern "C" int sotto_emu_launch(const char* name, const unsigned int* grid,
                                const unsigned int* block, unsigned int shared_bytes,
                                void** args, int reverse) {
    for (const EmuKernel& k : emu_kernels)
        if (std::strcmp(k.name, name) == 0)
            return emu_launch(k, grid, block, shared_bytes, args, reverse != 0);
    return 1;
}
"#,
    );
    out
}

fn compile() -> Result<Emu, String> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sotto-cuda-emu");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // One file per test process: test binaries may compile at the same time.
    let tag = std::process::id();
    let src = dir.join(format!("kernels-{tag}.cpp"));
    let lib = dir.join(format!("libkernels-{tag}.so"));
    std::fs::write(&src, host_source()).map_err(|e| format!("{}: {e}", src.display()))?;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let build = |checks: &[&str]| {
        Command::new(&cxx)
            .args(["-std=c++17", "-O2", "-fPIC", "-shared", "-w"])
            .args(checks)
            .arg("-o")
            .arg(&lib)
            .arg(&src)
            .output()
            .map_err(|e| format!("no C++ compiler ({cxx}): {e}"))
    };
    // UBSan's checks stop the tests at what a GPU would fault on or silently corrupt: a
    // misaligned load or store, an index past a shared array's bounds, a shift by the
    // width or more. Where the compiler lacks its runtime the kernels build without them.
    let mut out = build(&[
        "-fsanitize=alignment,bounds,shift",
        "-fno-sanitize-recover=all",
    ])?;
    if !out.status.success() {
        let plain = build(&[])?;
        if plain.status.success() {
            println!(
                "kernel emulation without UBSan's alignment and bounds checks ({cxx} could not build them):\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out = plain;
    }
    if !out.status.success() {
        // A compiler that runs but rejects the kernels is a test failure, not a skip.
        panic!(
            "{cxx} could not compile the emulated kernels ({}):\n{}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // SAFETY: the library is the one just built from our source; its initializers only
    // set up plain static data.
    let lib_handle = unsafe { libloading::Library::new(&lib) }
        .unwrap_or_else(|e| panic!("loading {}: {e}", lib.display()));
    // SAFETY: sotto_emu_launch is defined in host_source() with exactly LaunchFn's signature.
    let launch = unsafe { *lib_handle.get::<LaunchFn>(b"sotto_emu_launch\0").unwrap() };
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&lib); // the mapping stays valid
    Ok(Emu {
        launch: Mutex::new(launch),
        _lib: lib_handle,
    })
}

/// The emulator, compiled once per test process, or None (after saying why) without a
/// C++ compiler.
pub fn get() -> Option<&'static Emu> {
    static EMU: OnceLock<Result<Emu, String>> = OnceLock::new();
    if std::env::var_os("SOTTO_SKIP_EMULATION").is_some_and(|v| v != "0") {
        println!("skipped (kernel emulation): SOTTO_SKIP_EMULATION is set");
        return None;
    }
    match EMU.get_or_init(compile) {
        Ok(e) => Some(e),
        Err(why) => {
            let require = std::env::var_os("SOTTO_REQUIRE_EMULATOR").is_some_and(|v| v != "0");
            assert!(!require, "SOTTO_REQUIRE_EMULATOR is set, but {why}");
            println!("skipped (kernel emulation): {why}");
            None
        }
    }
}

pub use sotto_cuda::KernelArg as Arg;

/// A host slice as a "device pointer".
pub fn ptr<T>(x: &[T]) -> Arg {
    Arg::Ptr(x.as_ptr() as u64)
}

pub fn ptr_mut<T>(x: &mut [T]) -> Arg {
    Arg::Ptr(x.as_mut_ptr() as u64)
}

impl Emu {
    /// Runs kernel `name` on a grid of `grid` blocks of `block` threads.
    ///
    /// Every pointer in `args` must address host memory large enough for the kernel's
    /// indexing at this shape, as on a GPU.
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) {
        let forward = Schedule::Forward;
        if let Err(e) = self.try_launch(forward, name, grid, block, shared_bytes, args) {
            panic!("{e}");
        }
    }

    /// [`Emu::launch`] in the order `schedule`, its failure returned.
    pub fn try_launch(
        &self,
        schedule: Schedule,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), String> {
        let mut vals = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|a| match a {
                Arg::Ptr(p) => p as *mut u64 as *mut c_void,
                Arg::U32(v) => v as *mut u32 as *mut c_void,
                Arg::I32(v) => v as *mut i32 as *mut c_void,
                Arg::F32(v) => v as *mut f32 as *mut c_void,
            })
            .collect();
        let c_name = CString::new(name).unwrap();
        let g = [grid.0, grid.1, grid.2];
        let b = [block.0, block.1, block.2];
        let launch = self.launch.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `ptrs` points at one value per parameter, of the parameter's size; the
        // caller sized the buffers behind the pointer values; the lock keeps one launch at a
        // time in the emulator's globals.
        let rc = unsafe {
            (*launch)(
                c_name.as_ptr(),
                g.as_ptr(),
                b.as_ptr(),
                shared_bytes,
                ptrs.as_mut_ptr(),
                c_int::from(schedule == Schedule::Reverse),
            )
        };
        let why = match rc {
            0 => return Ok(()),
            1 => "no such kernel",
            2 => "block of 0 or more than 1024 threads",
            3 => "more than 48 KiB of dynamic shared memory",
            4 => "a barrier in a block after the first, which never synchronised",
            5 => "a warp shuffle or __syncwarp that not every lane of the warp reached",
            _ => "unknown failure",
        };
        Err(format!(
            "emulated launch of {name} {grid:?}x{block:?} ({schedule:?}): {why}"
        ))
    }

    /// A 1-D launch as [`sotto_cuda::launch`] plans it.
    pub fn launch_1d(&self, name: &str, l: sotto_cuda::launch::Launch, args: &[Arg]) {
        self.launch(name, (l.grid, 1, 1), (l.block, 1, 1), l.shared_bytes, args)
    }
}

/// The emulator as the device of `sotto_cuda::CudaWhisper::on_host`: kernels as above, in
/// the order of its [`Schedule`], cuBLAS's GemmEx as a plain f32-accumulating product.
/// Counts its launches by kernel name.
pub struct EmuDevice {
    emu: &'static Emu,
    schedule: Schedule,
    launches: Mutex<std::collections::BTreeMap<String, usize>>,
    /// What a graph being captured may not take, as a driver that refuses it would say.
    refused: Vec<sotto_cuda::Captured>,
}

impl EmuDevice {
    pub fn new(emu: &'static Emu, schedule: Schedule) -> Self {
        EmuDevice {
            emu,
            schedule,
            launches: Mutex::default(),
            refused: Vec::new(),
        }
    }

    /// This device, failing every capture that takes one of `ops`.
    pub fn refusing(self, ops: &[sotto_cuda::Captured]) -> Self {
        EmuDevice {
            refused: ops.to_vec(),
            ..self
        }
    }

    /// Launches by kernel name (cuBLAS's products by their function's) since the last
    /// call, which starts the count again.
    pub fn take_launches(&self) -> std::collections::BTreeMap<String, usize> {
        std::mem::take(&mut *self.launches.lock().unwrap())
    }

    fn count(&self, name: &str) {
        *self
            .launches
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default() += 1;
    }
}

impl sotto_cuda::HostDevice for EmuDevice {
    fn capture(&self, op: sotto_cuda::Captured) -> Result<(), String> {
        match self.refused.contains(&op) {
            true => Err(format!("this device refuses {op:?} in a graph")),
            false => Ok(()),
        }
    }

    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[Arg],
    ) -> Result<(), String> {
        self.count(name);
        self.emu
            .try_launch(self.schedule, name, grid, block, shared_bytes, args)
    }

    fn gemm(
        &self,
        g: &sotto_cuda::plan::GemmShape,
        a: u64,
        b: u64,
        c: u64,
        inputs: sotto_cuda::Precision,
    ) -> Result<(), String> {
        self.count("cublasGemmEx");
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
        // SAFETY: as cuBLAS would read them: A holds (m - 1)·lda + k values, B (n - 1)·ldb
        // + k, C (n - 1)·ldc + m, at host addresses of the session's live buffers.
        let read = |p: u64, len: usize| -> Vec<f32> {
            match inputs {
                sotto_cuda::Precision::F16 => {
                    // SAFETY: `len` f16 at `p` (see above).
                    let h = unsafe { std::slice::from_raw_parts(p as *const u16, len) };
                    h.iter()
                        .map(|&b| half::f16::from_bits(b).to_f32())
                        .collect()
                }
                sotto_cuda::Precision::F32 => {
                    // SAFETY: `len` f32 at `p` (see above).
                    unsafe { std::slice::from_raw_parts(p as *const f32, len) }.to_vec()
                }
            }
        };
        let av = read(a, (m - 1) * lda + k);
        let bv = read(b, (n - 1) * ldb + k);
        // SAFETY: C's extent at `c` (see above); nothing else reads it during the call.
        let cv = unsafe { std::slice::from_raw_parts_mut(c as *mut f32, (n - 1) * ldc + m) };
        for j in 0..n {
            let bj = &bv[j * ldb..][..k];
            for i in 0..m {
                let s = dot(&av[i * lda..][..k], bj);
                cv[i + j * ldc] = if g.accumulate { cv[i + j * ldc] + s } else { s };
            }
        }
        Ok(())
    }

    fn gemm_batched(
        &self,
        g: &sotto_cuda::plan::BatchedGemm,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), String> {
        self.count("cublasGemmStridedBatchedEx");
        gemm_batched(g, a, b, c);
        Ok(())
    }
}

/// `cublasGemmStridedBatchedEx` on f32 matrices, each batch as cuBLAS indexes it.
fn gemm_batched(g: &sotto_cuda::plan::BatchedGemm, a: u64, b: u64, c: u64) {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let (sa, sb, sc) = (
        g.stride_a as usize,
        g.stride_b as usize,
        g.stride_c as usize,
    );
    for bt in 0..g.batch as usize {
        // SAFETY: as cuBLAS would read them: batch bt's A holds (k - 1)·lda + m values
        // ((m - 1)·lda + k read transposed), B (n - 1)·ldb + k and C (n - 1)·ldc + m, at
        // host addresses of the session's live buffers, which this call alone touches.
        let (av, bv, cv) = unsafe {
            let a_len = if g.trans_a {
                (m - 1) * lda + k
            } else {
                (k - 1) * lda + m
            };
            (
                std::slice::from_raw_parts((a as *const f32).add(bt * sa), a_len),
                std::slice::from_raw_parts((b as *const f32).add(bt * sb), (n - 1) * ldb + k),
                std::slice::from_raw_parts_mut((c as *mut f32).add(bt * sc), (n - 1) * ldc + m),
            )
        };
        for j in 0..n {
            let bj = &bv[j * ldb..][..k];
            for i in 0..m {
                let s = if g.trans_a {
                    dot(&av[i * lda..][..k], bj)
                } else {
                    (0..k).map(|l| av[i + l * lda] * bj[l]).sum()
                };
                cv[i + j * ldc] = g.alpha * s;
            }
        }
    }
}

/// f32 dot product in eight interleaved sums (vectorizable; cuBLAS's order differs anyway).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}
