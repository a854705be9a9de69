//! Built without the `cuda` feature: there is nothing to probe.

use super::Probe;

pub(super) fn probe() -> Probe {
    Probe::NotBuilt
}
