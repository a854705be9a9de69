//! Where the model runs: `--device cpu|cuda|cuda:N|auto`.
//!
//! With the `cuda` feature, `--device cuda` runs the Whisper forward pass on the first GPU
//! (`sotto::cuda`), `cuda:N` on GPU N in CUDA's numbering, and `auto` picks GPU 0 when the
//! driver sees one (checked on an H200: conformance, and the shared clips' WER on a par with
//! the CPU's), else the CPU, saying which. The feature gate lives only in which `probe`
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
    /// The first GPU where the driver sees one, else the CPU (see the module note).
    #[default]
    Auto,
    Cpu,
    /// The GPU of this ordinal in CUDA's numbering (`cuda` is `cuda:0`).
    Cuda(usize),
}

impl std::str::FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let ordinal = |n: &str| {
            n.parse()
                .ok()
                .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))
        };
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").and_then(ordinal) {
                Some(n) => Ok(Device::Cuda(n)),
                None => Err(Error::Device(format!(
                    "unknown device '{s}' (expected cpu, cuda, cuda:N or auto)"
                ))),
            },
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(0) => f.write_str("cuda"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The device the model will run on, and, when that is not what was asked for in so many
/// words (what `auto` chose), one line saying which and why.
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
/// needs a build with CUDA and a GPU the driver sees; `Auto` takes GPU 0 where there is
/// one, else the CPU, with a note either way when a CUDA build probed.
pub fn select_device(requested: Device) -> Result<DeviceChoice> {
    match requested {
        Device::Cpu => resolve(requested, Probe::NotBuilt),
        _ => resolve(requested, gpu::probe()),
    }
}

fn resolve(requested: Device, probe: Probe) -> Result<DeviceChoice> {
    let cpu = |note: Option<String>| {
        Ok(DeviceChoice {
            device: Device::Cpu,
            note,
        })
    };
    match (requested, probe) {
        (Device::Cpu, _) | (Device::Auto, Probe::NotBuilt) => cpu(None),
        (Device::Cuda(_), Probe::NotBuilt) => Err(Error::Device(
            "this sotto was built without CUDA support (rebuild with --features cuda)".into(),
        )),
        (Device::Cuda(_), Probe::Unusable(why)) => {
            Err(Error::Device(format!("--device {requested}: {why}")))
        }
        (Device::Cuda(n), Probe::Gpus(gpus)) if n >= gpus.len() => Err(Error::Device(format!(
            "--device {requested}: the CUDA driver sees {} GPU{} ({})",
            gpus.len(),
            if gpus.len() == 1 { "" } else { "s" },
            gpus.join(", ")
        ))),
        (Device::Cuda(_), Probe::Gpus(_)) => Ok(DeviceChoice {
            device: requested,
            note: None,
        }),
        (Device::Auto, Probe::Unusable(why)) => {
            cpu(Some(format!("no usable CUDA GPU ({why}); using the CPU")))
        }
        (Device::Auto, Probe::Gpus(gpus)) => Ok(DeviceChoice {
            device: Device::Cuda(0),
            note: Some(format!("using {} (--device cpu for the CPU)", gpus[0])),
        }),
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
        let e = resolve(Device::Cuda(0), Probe::NotBuilt)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "this sotto was built without CUDA support (rebuild with --features cuda)"
        );
        let e = resolve(
            Device::Cuda(0),
            Probe::Unusable("no CUDA driver (libcuda) found".into()),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(e, "--device cuda: no CUDA driver (libcuda) found");
        assert_eq!(
            resolve(Device::Cuda(0), gpus()).unwrap(),
            DeviceChoice {
                device: Device::Cuda(0),
                note: None
            }
        );
    }

    #[test]
    fn cuda_n_picks_a_gpu_the_driver_sees() {
        let two = Probe::Gpus(vec!["GPU 0: A".into(), "GPU 1: B".into()]);
        assert_eq!(
            resolve(Device::Cuda(1), two.clone()).unwrap().device,
            Device::Cuda(1)
        );
        let e = resolve(Device::Cuda(2), two).unwrap_err().to_string();
        assert_eq!(
            e,
            "--device cuda:2: the CUDA driver sees 2 GPUs (GPU 0: A, GPU 1: B)"
        );
        let e = resolve(Device::Cuda(1), gpus()).unwrap_err().to_string();
        assert!(
            e.starts_with("--device cuda:1: the CUDA driver sees 1 GPU ("),
            "{e}"
        );
        let e = resolve(Device::Cuda(3), Probe::Unusable("no driver".into()));
        assert_eq!(e.unwrap_err().to_string(), "--device cuda:3: no driver");
    }

    #[test]
    fn auto_takes_the_first_gpu_else_the_cpu_and_says_which() {
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
        assert_eq!(c.device, Device::Cuda(0));
        assert_eq!(
            c.note.as_deref(),
            Some("using GPU 0: NVIDIA H200 (compute 9.0, 139.8 GiB) (--device cpu for the CPU)")
        );
        let two = Probe::Gpus(vec!["GPU 0: A".into(), "GPU 1: B".into()]);
        assert_eq!(resolve(Device::Auto, two).unwrap().device, Device::Cuda(0));
    }

    #[test]
    fn parses_names() {
        for d in [Device::Auto, Device::Cpu, Device::Cuda(0), Device::Cuda(3)] {
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d);
        }
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!("cuda:0".parse::<Device>().unwrap(), Device::Cuda(0));
        assert_eq!(Device::Cuda(0).to_string(), "cuda");
        assert_eq!(Device::Cuda(12).to_string(), "cuda:12");
        for bad in [
            "gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "cuda:1 ", "cuda0",
        ] {
            let e = bad.parse::<Device>().unwrap_err().to_string();
            assert!(
                e.contains("expected cpu, cuda, cuda:N or auto"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn this_build_selects_consistently() {
        assert_eq!(select_device(Device::Cpu).unwrap().device, Device::Cpu);
        // Auto never fails: a GPU where the driver sees one, else the CPU.
        let gpu_here = matches!(gpu::probe(), Probe::Gpus(_));
        let auto = if gpu_here {
            Device::Cuda(0)
        } else {
            Device::Cpu
        };
        assert_eq!(select_device(Device::Auto).unwrap().device, auto);
        // Cuda only with a CUDA build that finds a GPU.
        assert_eq!(select_device(Device::Cuda(0)).is_ok(), gpu_here);
        assert!(select_device(Device::Cuda(usize::MAX)).is_err());
    }
}
