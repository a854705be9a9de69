//! A switch for comparing two variants of the code inside one process, window by window
//! (`sotto bench --ab`). On a shared machine other tenants slow whole minutes by up to
//! 1.5×, so two builds timed one after the other cannot resolve a change of a few percent;
//! two variants alternated every encoder window see the same minutes.
//!
//! A developer keeps both variants and picks one with [`on`]; nothing in the shipped code
//! reads the switch, so there `--ab` is an A/A run: the spread it shows is this machine's
//! noise floor for a comparison. Read the switch outside register loops: a branch inside a
//! tile's loop can change the code of both variants.

use std::sync::atomic::{AtomicU32, Ordering};

static BITS: AtomicU32 = AtomicU32::new(0);

/// Whether experiment `bit` (a mask) is switched on.
#[inline(always)]
pub fn on(bit: u32) -> bool {
    BITS.load(Ordering::Relaxed) & bit != 0
}

/// Switches the experiments in `bits` on and every other off.
pub fn set(bits: u32) {
    BITS.store(bits, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    #[test]
    fn bits_switch_on_and_off() {
        super::set(0b101);
        assert!(super::on(1) && super::on(4) && !super::on(2));
        super::set(0);
        assert!(!super::on(1));
    }
}
