//! CUDA backend for sotto.
//!
//! [`probe`] lists the GPUs the driver sees. [`CudaBackend`] owns a context and a stream on
//! one GPU and runs single kernels (layer norm, GELU, softmax, add, f16→f32, q8_0/q4_0
//! dequantization) for the conformance tests. [`CudaWhisper`] uploads a Whisper model's
//! weights once ([`Precision::F16`] by default); [`CudaSession`]s share it, each with its
//! own stream, cuBLAS handle, encoder buffers, cross-attention K/V and self-attention KV
//! cache, with `sotto_model::Session`'s methods and semantics (`align` included).
//!
//! Kernels are CUDA C ([`kernels::SOURCE`]) compiled by NVRTC at run time, once per
//! process and GPU, to machine code for that GPU's architecture, kept on disk for the next
//! process (`kernel_cache`); matrix
//! products go to cuBLAS (`cublasGemmEx`, f32 accumulation).
//! libcuda, libnvrtc and libcublas are loaded at run time (cudarc's `dynamic-loading`), so
//! this crate builds and links on machines without CUDA. cudarc panics when a library or
//! symbol is missing; every entry point here checks for the driver first and turns what is
//! left into a [`CudaError`].

mod backend;
pub mod host;
mod kernel_cache;
pub mod kernels;
pub mod launch;
mod ops;
pub mod plan;
mod session;
mod whisper;

use cudarc::driver::{result, sys};

pub use backend::{
    compile, compile_cached, target, CudaBackend, DeviceBuffer, KernelImage, Target,
};
pub use half::f16;
pub use host::{Captured, HostDevice, KernelArg};
pub use ops::{AttentionPath, Precision};
pub use session::{CudaSession, ShortlistOf};
pub use sotto_quant::QuantType;
pub use whisper::CudaWhisper;

/// Errors from probing, compiling and running on a GPU. Each message names the step.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver (libcuda) found")]
    NoDriver,
    #[error("the CUDA driver found no GPU")]
    NoDevice,
    #[error("GPU {ordinal} does not exist ({count} found)")]
    BadOrdinal { ordinal: usize, count: usize },
    #[error("NVRTC (libnvrtc) not found; it compiles sotto's CUDA kernels at run time")]
    NoNvrtc,
    #[error("CUDA driver: {op}: {msg}")]
    Driver { op: &'static str, msg: String },
    #[error(
        "NVRTC could not compile sotto's kernels for compute capability {major}.{minor}: {log}"
    )]
    Compile { major: i32, minor: i32, log: String },
    #[error("{op}: {msg}")]
    Shape { op: &'static str, msg: String },
    /// A model file whose tensors or hyper-parameters do not fit the CUDA model.
    #[error("{path}: {msg}")]
    Model {
        path: std::path::PathBuf,
        msg: String,
    },
    /// A call whose arguments do not fit the model or the session's state.
    #[error("{op}: {msg}")]
    Input { op: &'static str, msg: String },
    #[error("{op}: {ty} is not supported on CUDA yet")]
    Unsupported { op: &'static str, ty: QuantType },
    /// cudarc panicked (a symbol missing from an old driver, say); caught at the boundary.
    #[error("CUDA library failure during {op}: {msg}")]
    Library { op: &'static str, msg: String },
}

pub type Result<T, E = CudaError> = std::result::Result<T, E>;

/// One GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Bytes of device memory.
    pub total_memory: usize,
    /// (major, minor), e.g. (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (major, minor) = self.compute_capability;
        let gib = self.total_memory as f64 / (1u64 << 30) as f64;
        write!(
            f,
            "GPU {}: {} (compute {major}.{minor}, {gib:.1} GiB)",
            self.ordinal, self.name
        )
    }
}

/// Whether libcuda can be loaded. Checked before anything else touches the driver.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library names; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// Whether libnvrtc can be loaded (it is part of the CUDA toolkit, not the driver).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library names; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Every GPU the driver sees; `Err(NoDriver)` without libcuda, `Err(NoDevice)` when the
/// driver is there but has no GPU. Creates no context.
pub fn probe() -> Result<Vec<DeviceInfo>> {
    if !driver_present() {
        return Err(CudaError::NoDriver);
    }
    guard("probe", || {
        init()?;
        let count = result::device::get_count().map_err(driver("cuDeviceGetCount"))?;
        (0..count.max(0) as usize).map(device_info).collect()
    })
}

/// cuInit, with "no device" told apart from other failures.
pub(crate) fn init() -> Result<()> {
    match result::init() {
        Ok(()) => Ok(()),
        Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_NO_DEVICE => Err(CudaError::NoDevice),
        Err(e) => Err(driver("cuInit")(e)),
    }
}

pub(crate) fn device_info(ordinal: usize) -> Result<DeviceInfo> {
    use sys::CUdevice_attribute_enum as A;
    let dev = result::device::get(ordinal as i32).map_err(driver("cuDeviceGet"))?;
    let name = result::device::get_name(dev).map_err(driver("cuDeviceGetName"))?;
    // SAFETY: `dev` came from cuDeviceGet after a successful cuInit.
    let total_memory =
        unsafe { result::device::total_mem(dev) }.map_err(driver("cuDeviceTotalMem"))?;
    let attr = |a| {
        // SAFETY: as above; the attribute is a valid enum value.
        unsafe { result::device::get_attribute(dev, a) }.map_err(driver("cuDeviceGetAttribute"))
    };
    let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    Ok(DeviceInfo {
        ordinal,
        name,
        total_memory,
        compute_capability: (major, minor),
    })
}

/// Maps a driver error to [`CudaError::Driver`] naming the call.
pub(crate) fn driver(op: &'static str) -> impl Fn(result::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        op,
        msg: driver_message(&e),
    }
}

fn driver_message(e: &result::DriverError) -> String {
    match e.error_string() {
        Ok(s) => format!("{:?}: {}", e.0, s.to_string_lossy()),
        Err(_) => format!("{:?}", e.0),
    }
}

/// Runs `f`, turning a panic inside cudarc (missing library or symbol) into an error.
pub(crate) fn guard<T>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        Err(CudaError::Library { op, msg })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_matches_driver_presence() {
        match probe() {
            Err(CudaError::NoDriver) => assert!(!driver_present()),
            Err(e) => assert!(driver_present(), "{e}"),
            Ok(devs) => {
                assert!(driver_present());
                for (i, d) in devs.iter().enumerate() {
                    assert_eq!(d.ordinal, i);
                    assert!(d.compute_capability.0 >= 3, "{d}");
                }
            }
        }
    }

    #[test]
    fn guard_turns_panics_into_errors() {
        let r: Result<()> = guard("test", || panic!("no symbol cuFoo"));
        match r {
            Err(CudaError::Library { op, msg }) => {
                assert_eq!(op, "test");
                assert!(msg.contains("cuFoo"));
            }
            other => panic!("expected Library error, got {other:?}"),
        }
    }

    #[test]
    fn device_info_display() {
        let d = DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            total_memory: 141 << 30,
            compute_capability: (9, 0),
        };
        assert_eq!(d.to_string(), "GPU 0: NVIDIA H200 (compute 9.0, 141.0 GiB)");
    }
}
