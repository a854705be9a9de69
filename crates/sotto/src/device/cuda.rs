//! Built with the `cuda` feature: ask the driver.

use super::Probe;

pub(super) fn probe() -> Probe {
    match sotto_cuda::probe() {
        Ok(devs) if devs.is_empty() => Probe::Unusable("the CUDA driver found no GPU".into()),
        Ok(devs) => Probe::Gpus(devs.iter().map(|d| d.to_string()).collect()),
        Err(e) => Probe::Unusable(e.to_string()),
    }
}
