//! Where a conformance case runs: the kernel emulation (always, where a C++ compiler is)
//! and the GPU (where one is). Cases are written once against [`Device`]: buffers by
//! device address, kernels launched with raw arguments, as the model's sessions do.

use std::sync::OnceLock;

use sotto_cuda::{CudaBackend, CudaError, DeviceBuffer, KernelArg};

use super::emu::{self, Emu, Schedule};

pub trait Device {
    fn label(&self) -> String;
    /// Copies `bytes` into a new buffer (16-byte aligned, as the kernels' widest loads
    /// need; cudaMalloc's are 256) and returns its address.
    fn put(&mut self, bytes: &[u8]) -> u64;
    /// Reads `len` bytes from the start of the buffer at `addr`, after all queued work.
    fn get(&self, addr: u64, len: usize) -> Vec<u8>;
    /// Runs kernel `name`; panics (naming the kernel) if the launch fails.
    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    );
}

impl dyn Device + '_ {
    pub fn put_f32(&mut self, x: &[f32]) -> u64 {
        self.put(&x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    pub fn put_u16(&mut self, x: &[u16]) -> u64 {
        self.put(&x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    pub fn put_u32(&mut self, x: &[u32]) -> u64 {
        self.put(&x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    }

    /// A buffer of `n` f32 NaN: an output element a kernel skips stays NaN.
    pub fn nans(&mut self, n: usize) -> u64 {
        self.put_f32(&vec![f32::NAN; n])
    }

    pub fn get_f32(&self, addr: u64, n: usize) -> Vec<f32> {
        let b = self.get(addr, 4 * n);
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn get_u16(&self, addr: u64, n: usize) -> Vec<u16> {
        let b = self.get(addr, 2 * n);
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn get_u32(&self, addr: u64, n: usize) -> Vec<u32> {
        let b = self.get(addr, 4 * n);
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// A 1-D launch as `sotto_cuda::launch` plans it.
    pub fn launch_1d(&self, name: &str, l: sotto_cuda::launch::Launch, args: &[KernelArg]) {
        self.launch(name, (l.grid, 1, 1), (l.block, 1, 1), l.shared_bytes, args)
    }
}

/// Host memory standing in for the device's, for the emulated kernels, run in the order
/// of `schedule`.
pub struct OnEmulator {
    emu: &'static Emu,
    schedule: Schedule,
    bufs: Vec<Vec<u128>>,
}

impl Device for OnEmulator {
    fn label(&self) -> String {
        match self.schedule {
            Schedule::Forward => "emulation".into(),
            Schedule::Reverse => "emulation, blocks and threads in reverse".into(),
        }
    }

    fn put(&mut self, bytes: &[u8]) -> u64 {
        let words = bytes
            .chunks(16)
            .map(|c| {
                let mut w = [0u8; 16];
                w[..c.len()].copy_from_slice(c);
                u128::from_le_bytes(w)
            })
            .collect::<Vec<_>>();
        let mut buf = if words.is_empty() { vec![0] } else { words };
        let addr = buf.as_mut_ptr() as u64;
        self.bufs.push(buf);
        addr
    }

    fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        let buf = self
            .bufs
            .iter()
            .find(|b| b.as_ptr() as u64 == addr)
            .expect("an address put() returned");
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes[..len].to_vec()
    }

    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) {
        self.emu
            .try_launch(self.schedule, name, grid, block, shared_bytes, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// GPU 0 through `CudaBackend::launch_raw`.
pub struct OnGpu {
    gpu: &'static CudaBackend,
    bufs: Vec<(u64, DeviceBuffer<u8>)>,
}

impl Device for OnGpu {
    fn label(&self) -> String {
        self.gpu.device().to_string()
    }

    fn put(&mut self, bytes: &[u8]) -> u64 {
        let data = if bytes.is_empty() { &[0u8][..] } else { bytes };
        let buf = self.gpu.upload(data).expect("upload");
        let addr = self.gpu.address(&buf);
        self.bufs.push((addr, buf));
        addr
    }

    fn get(&self, addr: u64, len: usize) -> Vec<u8> {
        let (_, buf) = self
            .bufs
            .iter()
            .find(|(a, _)| *a == addr)
            .expect("an address put() returned");
        let mut bytes = self.gpu.download(buf).expect("download");
        bytes.truncate(len);
        bytes
    }

    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) {
        // SAFETY: the conformance cases pass each kernel's parameters in order, with
        // buffers put() for the shapes they launch.
        unsafe { self.gpu.launch_raw(name, grid, block, shared_bytes, args) }
            .unwrap_or_else(|e| panic!("{name} on {}: {e}", self.label()));
    }
}

fn require_cuda() -> bool {
    std::env::var_os("SOTTO_REQUIRE_CUDA").is_some_and(|v| v != "0")
}

/// The shared GPU backend, or None (after printing why) when this machine has no GPU.
/// With libcuda present, failing to open the GPU is a test failure.
pub fn gpu() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    let skip = |why: &str| {
        assert!(!require_cuda(), "SOTTO_REQUIRE_CUDA is set, but {why}");
        println!("skipped (GPU): {why}");
        None
    };
    if !sotto_cuda::driver_present() {
        return skip("no CUDA driver (libcuda) found");
    }
    let opened = BACKEND.get_or_init(|| match CudaBackend::new(0) {
        Ok(b) => Ok(b),
        // The driver library without a GPU (a container with compat libs, say).
        Err(CudaError::NoDevice) => Err(CudaError::NoDevice.to_string()),
        Err(e) => panic!("libcuda is present but the CUDA backend failed: {e}"),
    });
    match opened {
        Ok(b) => Some(b),
        Err(why) => skip(why),
    }
}

/// Every device a case runs on here: the emulation (in both orders, so that a race between
/// threads or blocks changes the result of one of them) and the GPU, each where available.
pub fn devices() -> Vec<Box<dyn Device>> {
    let mut out: Vec<Box<dyn Device>> = Vec::new();
    if let Some(e) = emu::get() {
        for schedule in [Schedule::Forward, Schedule::Reverse] {
            out.push(Box::new(OnEmulator {
                emu: e,
                schedule,
                bufs: Vec::new(),
            }));
        }
    }
    if let Some(g) = gpu() {
        out.push(Box::new(OnGpu {
            gpu: g,
            bufs: Vec::new(),
        }));
    }
    out
}
