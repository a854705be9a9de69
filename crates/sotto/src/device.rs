//! Where the model runs: `--device cpu|cuda|auto`.
//!
//! With the `cuda` feature, `--device cuda` runs the Whisper forward pass on the first GPU
//! (`sotto::cuda`). That path has not yet been validated on a GPU, so `auto` keeps to the
//! CPU and says why rather than choosing it. The feature gate lives only in which `probe`
//! module is compiled.

#[cfg(feature = "cuda")]
#[path = "device/cuda.rs"]
mod gpu;
#[cfg(not(feature = "cuda"))]
#[path = "device/no_cuda.rs"]
mod gpu;

use crate::{Error, Result};

/// A requested device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The best validated device (today the CPU; see the module note).
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            _ => Err(Error::Device(format!(
                "unknown device '{s}' (expected cpu, cuda or auto)"
            ))),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The device the model will run on, and, when that is not what was asked for in so many
/// words (`auto` that found a GPU it cannot use yet, say), one line saying why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceChoice {
    pub device: Device,
    pub note: Option<String>,
}

/// What probing for GPUs found.
#[derive(Clone, Debug, PartialEq, Eq)]
// Without the `cuda` feature only `NotBuilt` is ever produced (the tests build the rest).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
enum Probe {
    /// This build has no CUDA support.
    NotBuilt,
    /// Built with CUDA, but no usable GPU: why.
    Unusable(String),
    /// The GPUs found, one description each.
    Gpus(Vec<String>),
}

/// Resolves a requested device to the one the model runs on. `Cpu` never probes; `Cuda`
/// needs a build with CUDA and a GPU the driver sees; `Auto` falls back to the CPU with a
/// note.
pub fn select_device(requested: Device) -> Result<DeviceChoice> {
    match requested {
        Device::Cpu => resolve(requested, Probe::NotBuilt),
        _ => resolve(requested, gpu::probe()),
    }
}

const NOT_YET: &str = "the CUDA backend is not yet validated on a GPU, so auto keeps to the \
                       CPU (--device cuda runs it)";

fn resolve(requested: Device, probe: Probe) -> Result<DeviceChoice> {
    let cpu = |note: Option<String>| {
        Ok(DeviceChoice {
            device: Device::Cpu,
            note,
        })
    };
    match (requested, probe) {
        (Device::Cpu, _) | (Device::Auto, Probe::NotBuilt) => cpu(None),
        (Device::Cuda, Probe::NotBuilt) => Err(Error::Device(
            "this sotto was built without CUDA support (rebuild with --features cuda)".into(),
        )),
        (Device::Cuda, Probe::Unusable(why)) => Err(Error::Device(format!("--device cuda: {why}"))),
        (Device::Cuda, Probe::Gpus(_)) => Ok(DeviceChoice {
            device: Device::Cuda,
            note: None,
        }),
        (Device::Auto, Probe::Unusable(why)) => {
            cpu(Some(format!("no usable CUDA GPU ({why}); using the CPU")))
        }
        (Device::Auto, Probe::Gpus(gpus)) => cpu(Some(format!(
            "found {}, but {NOT_YET}; using the CPU",
            gpus.join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus() -> Probe {
        Probe::Gpus(vec!["GPU 0: NVIDIA H200 (compute 9.0, 139.8 GiB)".into()])
    }

    #[test]
    fn cpu_is_always_the_cpu_without_a_note() {
        for p in [Probe::NotBuilt, Probe::Unusable("x".into()), gpus()] {
            assert_eq!(
                resolve(Device::Cpu, p).unwrap(),
                DeviceChoice {
                    device: Device::Cpu,
                    note: None
                }
            );
        }
    }

    #[test]
    fn cuda_needs_a_cuda_build_and_a_gpu() {
        let e = resolve(Device::Cuda, Probe::NotBuilt)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "this sotto was built without CUDA support (rebuild with --features cuda)"
        );
        let e = resolve(
            Device::Cuda,
            Probe::Unusable("no CUDA driver (libcuda) found".into()),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "--device cuda: no CUDA driver (libcuda) found");
        assert_eq!(
            resolve(Device::Cuda, gpus()).unwrap(),
            DeviceChoice {
                device: Device::Cuda,
                note: None
            }
        );
    }

    #[test]
    fn auto_falls_back_to_the_cpu_and_says_why() {
        assert_eq!(resolve(Device::Auto, Probe::NotBuilt).unwrap().note, None);
        let c = resolve(
            Device::Auto,
            Probe::Unusable("the CUDA driver found no GPU".into()),
        )
        .unwrap();
        assert_eq!(c.device, Device::Cpu);
        assert_eq!(
            c.note.as_deref(),
            Some("no usable CUDA GPU (the CUDA driver found no GPU); using the CPU")
        );
        let c = resolve(Device::Auto, gpus()).unwrap();
        assert_eq!(c.device, Device::Cpu);
        let note = c.note.unwrap();
        assert!(
            note.contains("NVIDIA H200") && note.contains("--device cuda"),
            "{note}"
        );
        assert!(!note.contains('\n'));
    }

    #[test]
    fn parses_names() {
        for d in [Device::Auto, Device::Cpu, Device::Cuda] {
            assert_eq!(d.name().parse::<Device>().unwrap(), d);
        }
        assert!("gpu"
            .parse::<Device>()
            .unwrap_err()
            .to_string()
            .contains("expected cpu"));
    }

    #[test]
    fn this_build_selects_consistently() {
        assert_eq!(select_device(Device::Cpu).unwrap().device, Device::Cpu);
        // Auto never fails: the CPU is always there.
        assert_eq!(select_device(Device::Auto).unwrap().device, Device::Cpu);
        // Cuda only with a CUDA build that finds a GPU.
        let gpu_here = matches!(gpu::probe(), Probe::Gpus(_));
        assert_eq!(select_device(Device::Cuda).is_ok(), gpu_here);
    }
}
