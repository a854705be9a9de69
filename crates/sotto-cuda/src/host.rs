//! The CUDA forward without a GPU: a [`HostDevice`] takes the place of the stream, so that
//! [`crate::CudaWhisper::on_host`] and its sessions run every launch, copy and product of
//! the GPU path, with the same arguments, on host memory.
//!
//! sotto-cuda's tests implement it with the kernels compiled for the host (see
//! `tests/common/emu.rs`): the whole session, its buffers, offsets and launch arguments,
//! is then checked against the CPU model on machines without a GPU. Device pointers are
//! host addresses there.

use crate::plan::{BatchedGemm, GemmShape};
use crate::Precision;

/// One kernel parameter, in the order and width the kernel declares it: pointers are
/// 64-bit device addresses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    Ptr(u64),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl From<u64> for KernelArg {
    fn from(v: u64) -> Self {
        KernelArg::Ptr(v)
    }
}

impl From<u32> for KernelArg {
    fn from(v: u32) -> Self {
        KernelArg::U32(v)
    }
}

impl From<i32> for KernelArg {
    fn from(v: i32) -> Self {
        KernelArg::I32(v)
    }
}

impl From<f32> for KernelArg {
    fn from(v: f32) -> Self {
        KernelArg::F32(v)
    }
}

/// What a graph being captured is about to take ([`HostDevice::capture`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Captured {
    /// A kernel launch.
    Launch,
    /// A copy between device memory and page-locked host memory.
    HostCopy,
}

/// What a CUDA stream and cuBLAS handle do, done on the host. Calls arrive in stream
/// order; each completes before it returns.
pub trait HostDevice: Send + Sync {
    /// Runs kernel `name` (one of [`crate::kernels::NAMES`]) on `grid` blocks of `block`
    /// threads with `shared_bytes` of dynamic shared memory, as `cuLaunchKernel` would.
    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) -> Result<(), String>;

    /// `cublasGemmEx(OP_T, OP_N, ..)` with the shape `g`: column-major
    /// `C[i + j·ldc] = Σ_l A[l + i·lda] · B[l + j·ldb]` (added onto C with `g.accumulate`),
    /// A and B of the precision's type (f16 as bits, or f32), C f32.
    fn gemm(&self, g: &GemmShape, a: u64, b: u64, c: u64, inputs: Precision) -> Result<(), String>;

    /// Whether a graph being captured may take `op`, as a CUDA driver decides for a stream
    /// in capture mode: an error fails the capture. Every op by default; a device that
    /// refuses some stands in for a driver that does, so that the fallbacks run.
    fn capture(&self, op: Captured) -> Result<(), String> {
        let _ = op;
        Ok(())
    }

    /// `cublasGemmStridedBatchedEx` over f32 matrices with the shape `g` (see
    /// [`BatchedGemm`]), f32 accumulation.
    fn gemm_batched(&self, g: &BatchedGemm, a: u64, b: u64, c: u64) -> Result<(), String>;
}
