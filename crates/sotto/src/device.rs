//! Where the model runs: `--device cpu|cuda|auto`.
//!
//! Only the CPU runs the model today. With the `cuda` feature, sotto can probe GPUs and run
//! single kernels on them (`sotto::cuda`), but not the Whisper forward pass; asking for
//! CUDA says so rather than quietly running on the CPU. The feature gate lives only in
//! which `probe` module is compiled.

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
    /// The best device that can run the model (today always the CPU).
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

/// Resolves a requested device to the one the model runs on. `Cpu` never probes; `Cuda` is
/// an error until the model runs on CUDA; `Auto` falls back to the CPU with a note.
pub fn select_device(requested: Device) -> Result<DeviceChoice> {
    match requested {
        Device::Cpu => resolve(requested, Probe::NotBuilt),
        _ => resolve(requested, gpu::probe()),
    }
}

const NOT_YET: &str = "running the model on CUDA is not implemented yet (only GPU probing and \
                       kernels are)";

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
        (Device::Cuda, Probe::Gpus(gpus)) => Err(Error::Device(format!(
            "--device cuda: found {}, but {NOT_YET}; use --device cpu",
            gpus.join(", ")
        ))),
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
    fn cuda_is_an_error_naming_the_problem() {
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
        let e = resolve(Device::Cuda, gpus()).unwrap_err().to_string();
        assert!(
            e.contains("NVIDIA H200") && e.contains("not implemented yet"),
            "{e}"
        );
        assert!(!e.contains('\n'));
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
        assert!(c.note.unwrap().contains("not implemented yet"));
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
        assert!(select_device(Device::Cuda).is_err());
    }
}
