//! All threads or one, chosen by timing the decoder's repeated steps.
//!
//! A decoder step is ~100 ops of 10–100 µs, each a fork/join across the pool. When another
//! process keeps a core busy, the scheduler may take a worker's core away for a whole time
//! slice (milliseconds) while it holds part of an op, and the other workers wait at the
//! join. On 2 cores with one taken, 2 threads then decode slower than 1 (tiny.en 2.45
//! against 1.8 ms per token). The governor times every step of a given shape. When steps
//! on all threads grow well past the best they have done, it runs a few steps on one
//! thread and keeps whichever is faster; on one thread it tries all threads again every
//! so often. On a quiet machine the steps stay near their best, and it never tries.
//! Either way the results are the same bits ([`crate::CpuBackend::set_solo`]).

/// Which threads a step runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    All,
    One,
}

impl Threads {
    fn other(self) -> Self {
        match self {
            Threads::All => Threads::One,
            Threads::One => Threads::All,
        }
    }
}

/// Steps per trial of the other mode. The first is not counted (it wakes the other
/// pool); the mean of the rest is compared, stalls included, since they are real time.
const TRIAL: usize = 5;
/// All threads are suspected of losing time when their smoothed step time passes this
/// multiple of their fastest step (on a quiet machine steps vary by ~10%).
const SUSPECT: f64 = 1.3;
/// The other mode wins a trial when its mean is under this fraction of the current
/// mode's smoothed time.
const WIN: f64 = 0.85;
/// Steps between trials: at first, and at most (each lost trial doubles the gap, so a
/// noisy but uncontended machine pays for few trials).
const GAP_MIN: u32 = 32;
const GAP_MAX_ALL: u32 = 1024;
const GAP_MAX_ONE: u32 = 256;
/// Smoothing of the step time (an exponential moving average).
const ALPHA: f64 = 0.125;
/// How fast the fastest step on all threads relaxes per step: steps grow a little as the
/// text grows, and the reference must follow, or a long window would look contended.
const RELAX: f64 = 1.002;
/// Step shapes told apart: 1–16 rows, each with and without every logit.
const MAX_ROWS: usize = 16;
const CLASSES: usize = 2 * MAX_ROWS;

#[derive(Clone, Copy, Debug)]
struct Class {
    mode: Threads,
    /// Smoothed step time in `mode`, seconds (0: none yet).
    avg: f64,
    /// The fastest step on all threads so far, relaxed by [`RELAX`] per step (0: none).
    best_all: f64,
    /// Steps since the last trial ended, and the steps to wait before the next.
    since_trial: u32,
    gap: u32,
    /// The trial in progress (in the other mode): steps run, and the sum of the counted ones.
    in_trial: bool,
    trial_len: usize,
    trial_sum: f64,
}

impl Default for Class {
    fn default() -> Self {
        Self {
            mode: Threads::All,
            avg: 0.0,
            best_all: 0.0,
            since_trial: 0,
            gap: GAP_MIN,
            in_trial: false,
            trial_len: 0,
            trial_sum: 0.0,
        }
    }
}

/// Chooses all threads or one per step shape; see the module docs.
#[derive(Clone, Debug)]
pub struct ThreadGovernor {
    classes: [Class; CLASSES],
}

impl Default for ThreadGovernor {
    fn default() -> Self {
        Self {
            classes: [Class::default(); CLASSES],
        }
    }
}

impl ThreadGovernor {
    /// The class of a step of `rows` rows that computes every logit (`all_logits`) or only
    /// the best ones; None (always all threads) past 16 rows: a prompt, whose ops are long
    /// enough to gain from the second thread even on a busy machine.
    pub fn class(rows: usize, all_logits: bool) -> Option<usize> {
        (1..=MAX_ROWS)
            .contains(&rows)
            .then(|| (rows - 1) * 2 + all_logits as usize)
    }

    /// The threads the next step of `class` should run on.
    pub fn next(&mut self, class: usize) -> Threads {
        let c = &mut self.classes[class];
        if !c.in_trial {
            let due = c.since_trial >= c.gap
                && match c.mode {
                    Threads::All => c.best_all > 0.0 && c.avg > SUSPECT * c.best_all,
                    Threads::One => true,
                };
            if !due {
                return c.mode;
            }
            c.in_trial = true;
            c.trial_len = 0;
            c.trial_sum = 0.0;
        }
        c.mode.other()
    }

    /// Records that a step of `class` took `secs` on `used` threads.
    pub fn record(&mut self, class: usize, used: Threads, secs: f64) {
        let c = &mut self.classes[class];
        if c.in_trial && used != c.mode {
            if c.trial_len > 0 {
                c.trial_sum += secs;
            }
            c.trial_len += 1;
            if c.trial_len == TRIAL {
                let mean = c.trial_sum / (TRIAL - 1) as f64;
                c.in_trial = false;
                c.since_trial = 0;
                if mean < WIN * c.avg {
                    c.mode = used;
                    c.avg = mean;
                    c.gap = GAP_MIN;
                } else {
                    let max = match c.mode {
                        Threads::All => GAP_MAX_ALL,
                        Threads::One => GAP_MAX_ONE,
                    };
                    c.gap = (c.gap * 2).min(max);
                }
            }
            return;
        }
        if used != c.mode {
            // A step run against the governor's advice (not asked through `next`).
            return;
        }
        c.since_trial = c.since_trial.saturating_add(1);
        c.avg = if c.avg == 0.0 {
            secs
        } else {
            c.avg + ALPHA * (secs - c.avg)
        };
        if c.mode == Threads::All {
            c.best_all = if c.best_all == 0.0 {
                secs
            } else {
                (c.best_all * RELAX).min(secs)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` steps of class 0 whose time on each mode is given by `time`, and
    /// returns how many ran on one thread.
    fn run(g: &mut ThreadGovernor, steps: usize, time: impl Fn(Threads, usize) -> f64) -> usize {
        let mut one = 0;
        for i in 0..steps {
            let mode = g.next(0);
            one += (mode == Threads::One) as usize;
            g.record(0, mode, time(mode, i));
        }
        one
    }

    /// Quiet-machine times: all threads 1.2 ms ± 10% (a deterministic wobble), one
    /// thread 1.8 ms.
    fn quiet(mode: Threads, i: usize) -> f64 {
        let wobble = 1.0 + 0.1 * ((i * 7919 % 13) as f64 / 6.0 - 1.0);
        match mode {
            Threads::All => 1.2e-3 * wobble,
            Threads::One => 1.8e-3 * wobble,
        }
    }

    /// A busy core: all threads 1.4 ms, plus a 4 ms stall (a worker waiting out a
    /// scheduler slice) in one step of three; one thread 1.8 ms.
    fn busy(mode: Threads, i: usize) -> f64 {
        match mode {
            Threads::All if i.is_multiple_of(3) => 5.4e-3,
            Threads::All => 1.4e-3,
            Threads::One => 1.8e-3,
        }
    }

    #[test]
    fn a_quiet_machine_never_leaves_all_threads() {
        let mut g = ThreadGovernor::default();
        assert_eq!(run(&mut g, 2000, quiet), 0);
        // Steps that grow slowly (a long window) are not taken for contention either.
        let mut g = ThreadGovernor::default();
        let growing = |m: Threads, i: usize| quiet(m, i) * (1.0 + i as f64 / 400.0);
        assert_eq!(run(&mut g, 400, growing), 0);
    }

    #[test]
    fn a_busy_core_moves_to_one_thread_and_back() {
        let mut g = ThreadGovernor::default();
        run(&mut g, 100, quiet);
        // Contention: within a few dozen steps the governor settles on one thread, and
        // afterwards spends only its trials (ever rarer) on all threads.
        let one = run(&mut g, 1000, busy);
        assert!(one > 850, "{one} of 1000 busy steps on one thread");
        assert_eq!(g.next(0), Threads::One);
        // The other core frees up: back to all threads within one trial period.
        let mut first_all = None;
        for i in 0..GAP_MAX_ONE as usize + 50 {
            let mode = g.next(0);
            g.record(0, mode, quiet(mode, i));
            if g.classes[0].mode == Threads::All && first_all.is_none() {
                first_all = Some(i);
            }
        }
        assert!(first_all.is_some_and(|i| i <= (GAP_MAX_ONE as usize + TRIAL)));
        assert_eq!(
            run(&mut g, 500, quiet),
            0,
            "stays on all threads once quiet"
        );
    }

    #[test]
    fn a_trial_that_loses_keeps_the_mode() {
        // All threads slow (suspected), but one thread slower still: trials, no switch.
        let mut g = ThreadGovernor::default();
        run(&mut g, 50, quiet);
        let slow = |m: Threads, _| match m {
            Threads::All => 2.0e-3,
            Threads::One => 2.2e-3,
        };
        let one = run(&mut g, 640, slow);
        assert!(one <= 4 * TRIAL, "{one} steps on one thread");
        assert_eq!(g.classes[0].mode, Threads::All);
    }

    #[test]
    fn a_machine_busy_from_the_start_moves_to_one_thread() {
        let mut g = ThreadGovernor::default();
        let one = run(&mut g, 500, busy);
        assert!(one > 400, "{one} of 500 busy steps on one thread");
    }

    #[test]
    fn classes_split_rows_and_logit_needs() {
        assert_eq!(ThreadGovernor::class(0, false), None);
        assert_eq!(ThreadGovernor::class(1, false), Some(0));
        assert_eq!(ThreadGovernor::class(1, true), Some(1));
        assert_eq!(ThreadGovernor::class(5, false), Some(8));
        assert_eq!(ThreadGovernor::class(16, true), Some(CLASSES - 1));
        assert_eq!(ThreadGovernor::class(17, false), None);
        // Classes are independent.
        let mut g = ThreadGovernor::default();
        run(&mut g, 50, quiet);
        run(&mut g, 300, busy);
        assert_eq!(g.next(0), Threads::One);
        assert_eq!(g.next(8), Threads::All);
    }
}

#[cfg(test)]
mod solo_tests {
    use half::f16;

    use crate::testutil::rand_vec;
    use crate::{CpuBackend, Linear, Mask, Weight};

    /// A solo backend runs on one thread, and its decoder ops give the same bits as on
    /// all threads (so the governor may switch between steps of one decode).
    #[test]
    fn solo_runs_on_one_thread_with_the_same_bits() {
        let mut be = CpuBackend::new(3).unwrap();
        assert_eq!(be.install(rayon::current_num_threads), 3);
        be.set_solo(true);
        assert!(be.solo());
        assert_eq!((be.threads(), be.max_threads()), (1, 3));
        assert_eq!(be.install(rayon::current_num_threads), 1);

        let (n, k, m, tk, heads) = (384, 512, 5, 70, 8);
        let w: Vec<f16> = rand_vec(n * k, 1).into_iter().map(f16::from_f32).collect();
        let lin = Linear::new(
            Weight::F16(w).for_decoding(n, k).unwrap(),
            Some(rand_vec(n, 2)),
            n,
            k,
        )
        .unwrap();
        let (x, kv) = (rand_vec(m * k, 3), rand_vec(tk * k, 4));
        let step = |be: &CpuBackend| {
            be.install(|| {
                let mut y = vec![0.0; m * n];
                be.linear_gelu(&x, m, &lin, &mut y).unwrap();
                let mut att = vec![0.0; m * k];
                let mask = Mask::Causal { q_pos0: tk - m };
                be.attention(&x, m, &kv, &kv, tk, heads, mask, &mut att)
                    .unwrap();
                (y, att)
            })
        };
        let solo = step(&be);
        be.set_solo(false);
        assert_eq!(be.threads(), 3);
        assert_eq!(step(&be), solo);
        // A one-thread backend has no solo pool: set_solo changes nothing.
        let mut one = CpuBackend::new(1).unwrap();
        one.set_solo(true);
        assert!(!one.solo());
        assert_eq!(step(&one), solo);
    }
}
