//! The decoder's fork/join pool: the calling thread and `threads − 1` helpers.
//!
//! A decoder step is ~50–100 ops of 10–100 µs, each split across the threads, with the
//! search's ~0.2–0.5 ms on the calling thread between steps. Through rayon each step
//! entered the pool from outside (the caller slept on a latch and was woken at the end),
//! and a worker idle for more than ~0.5 ms fell asleep: on the 2-vCPU VMs here waking it
//! again cost 0.2–2 ms, so a step after a long search took up to twice its time. Here the
//! caller runs tasks itself, and a helper spins for [`SPIN`] after each job before it
//! parks, so it is awake when the next op, or the next step, comes.
//!
//! A job is `n` tasks `f(0..n)`, claimed one at a time from a shared counter by whoever is
//! free. A job started from inside a task (or while another thread's job holds the
//! helpers) runs on its caller alone, so nesting and concurrent callers never deadlock.
//! A panic in a task reaches the caller once every helper has left the job.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle helper spins before it parks: longer than the search between two
/// decoder steps (up to ~0.5 ms; more at a segment's end), short enough that a helper
/// idle through an encoder pass (tens of ms, on rayon's workers) leaves its core.
pub(crate) const SPIN: Duration = Duration::from_millis(2);
/// Checks of the epoch an idle helper makes with the pause instruction alone (~10 µs here:
/// the gaps between one step's ops) before it yields its core between checks. 16 times as
/// many measured the same on a quiet machine, and yield to other threads later.
const PURE_SPINS: u32 = 1 << 10;

thread_local! {
    /// Whether this thread is running a task of some pool's job (nested jobs run inline).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
    /// On a helper: its pool (the address of the pool's shared state) and its index, from
    /// 1 (the caller is 0); (0, 0) elsewhere.
    static HELPER_OF: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// One job: `n` tasks of `f`, claimed through `next`. Lives on its caller's stack; the
/// caller returns only once no helper is inside it.
struct Job {
    /// `f` with its lifetime erased (see [`Pool::run`]).
    f: *const (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job {
    /// Claims and runs tasks until none are left; a panic is kept for the caller and stops
    /// the claiming.
    fn work(&self) {
        let was = IN_TASK.replace(true);
        loop {
            let i = self.next.fetch_add(1, SeqCst);
            if i >= self.n {
                break;
            }
            // SAFETY: `f` outlives the job: the caller waits for every helper to leave it.
            let f = unsafe { &*self.f };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                self.next.store(self.n, SeqCst);
                let mut slot = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                slot.get_or_insert(p);
                break;
            }
        }
        IN_TASK.set(was);
    }
}

struct Shared {
    /// Bumped to publish each job.
    epoch: AtomicU64,
    /// The newest epoch whose caller stopped waiting for helpers to join: a helper that
    /// sees its job's epoch here must not touch the job.
    closed: AtomicU64,
    /// Helpers inside the current job.
    inside: AtomicUsize,
    job: AtomicPtr<Job>,
    /// Held by the thread whose job the helpers serve.
    dispatch: Mutex<()>,
    /// Per helper: whether it is parked (so a caller must unpark it).
    parked: Vec<AtomicBool>,
    shutdown: AtomicBool,
}

/// A fork/join pool of the calling thread and `threads − 1` spinning helpers (see the
/// module docs).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// A pool of `threads` (the caller counts as one, so `threads − 1` helpers start).
    pub(crate) fn new(threads: usize, name: &str) -> std::io::Result<Self> {
        let n = threads.max(1) - 1;
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            inside: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            dispatch: Mutex::new(()),
            parked: (0..n).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
        });
        let mut helpers = Vec::with_capacity(n);
        for i in 0..n {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("{name}-{}", i + 1))
                .spawn(move || helper(&s, i));
            match spawned {
                Ok(h) => helpers.push(h),
                Err(e) => {
                    // Stop the ones already running before giving up.
                    drop(Pool { shared, helpers });
                    return Err(e);
                }
            }
        }
        Ok(Pool { shared, helpers })
    }

    /// Runs `f(i)` for every `i < n` across the caller and the helpers, and returns when
    /// all have run (re-raising a task's panic). Inline on the caller when there is one
    /// task, no helper, a job around this call, or another thread's job in progress.
    pub(crate) fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n == 0 {
            return;
        }
        let guard = match () {
            _ if n == 1 || self.helpers.is_empty() || IN_TASK.get() => None,
            // A panic that unwound through an earlier job poisoned nothing we rely on.
            _ => match self.shared.dispatch.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            },
        };
        if guard.is_none() {
            let was = IN_TASK.replace(true);
            let done = catch_unwind(AssertUnwindSafe(|| (0..n).for_each(f)));
            IN_TASK.set(was);
            return done.unwrap_or_else(|p| resume_unwind(p));
        }
        self.dispatch(n, f, true);
    }

    /// Runs `f(t)` once on each thread of the pool, `t = 0` the caller and `1..` the
    /// helpers (for per-thread state), and returns when all have.
    pub(crate) fn broadcast(&self, f: &(dyn Fn(usize) + Sync)) {
        let _guard = self
            .shared
            .dispatch
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f(0);
        let me = Arc::as_ptr(&self.shared) as usize;
        let done: Vec<AtomicBool> = self
            .helpers
            .iter()
            .map(|_| AtomicBool::new(false))
            .collect();
        // Tasks go to whichever helper comes first, so repeat until each has had its turn.
        while !done.iter().all(|d| d.load(SeqCst)) {
            self.dispatch(
                done.len(),
                &|_| {
                    let (pool, t) = HELPER_OF.get();
                    if pool == me && t > 0 && !done[t - 1].swap(true, SeqCst) {
                        f(t);
                    }
                },
                false,
            );
        }
    }

    /// Publishes a job of `n` tasks of `f` to the helpers, works on it too when
    /// `caller_works` (else waits until every task is claimed), and returns once no
    /// helper is inside it. The caller holds the dispatch lock.
    fn dispatch(&self, n: usize, f: &(dyn Fn(usize) + Sync), caller_works: bool) {
        // SAFETY: only the lifetime changes; this function returns only after every
        // helper has left the job (the wait below), so no use of `f` outlives it.
        let f: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(f) };
        let job = Job {
            f,
            n,
            next: AtomicUsize::new(0),
            panic: Mutex::new(None),
        };
        let s = &*self.shared;
        s.job.store(&job as *const Job as *mut Job, SeqCst);
        let epoch = s.epoch.fetch_add(1, SeqCst) + 1;
        for (h, parked) in self.helpers.iter().zip(&s.parked) {
            // A helper that parks after this sees the new epoch first (both SeqCst).
            if parked.load(SeqCst) {
                h.thread().unpark();
            }
        }
        if caller_works {
            job.work();
        } else {
            while job.next.load(SeqCst) < n {
                std::thread::yield_now();
            }
        }
        s.closed.store(epoch, SeqCst);
        let start = Instant::now();
        while s.inside.load(SeqCst) != 0 {
            // A helper mid-task; give its core back if it was preempted on ours.
            if start.elapsed() > Duration::from_micros(50) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        let panic = job.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(p) = panic {
            resume_unwind(p);
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        for h in &self.helpers {
            h.thread().unpark();
        }
        for h in self.helpers.drain(..) {
            // A helper only ends by seeing `shutdown`; its tasks' panics were caught.
            let _ = h.join();
        }
    }
}

/// Helper `me`'s loop: wait for a new epoch (spinning, then parked), join its job unless
/// its caller has closed it, work, leave.
fn helper(s: &Shared, me: usize) {
    HELPER_OF.set((s as *const Shared as usize, me + 1));
    let mut seen = 0u64;
    loop {
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = s.epoch.load(SeqCst);
            if e != seen {
                break e;
            }
            if s.shutdown.load(SeqCst) {
                return;
            }
            spins = spins.wrapping_add(1);
            if spins > PURE_SPINS {
                // Past the gaps between a step's ops: still awake, but a rayon worker
                // (the encoder's GEMMs) or another process on this core goes first.
                std::thread::yield_now();
            }
            if spins.is_multiple_of(64) && idle_since.elapsed() > SPIN {
                s.parked[me].store(true, SeqCst);
                if s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
                    std::thread::park();
                }
                s.parked[me].store(false, SeqCst);
                idle_since = Instant::now();
                spins = 0;
            } else {
                std::hint::spin_loop();
            }
        };
        seen = epoch;
        s.inside.fetch_add(1, SeqCst);
        if s.closed.load(SeqCst) < epoch {
            // SAFETY: the job of `epoch` is current and alive: its caller stores `closed`
            // only after its own work, then waits for `inside` to reach zero, and the next
            // job cannot start before that.
            let job = unsafe { &*s.job.load(SeqCst) };
            job.work();
        }
        s.inside.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_once() {
        for threads in [1, 2, 3] {
            let pool = Pool::new(threads, "t").unwrap();
            for n in [0, 1, 2, 7, 100] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                for _ in 0..50 {
                    pool.run(n, &|i| {
                        hits[i].fetch_add(1, SeqCst);
                    });
                }
                assert!(
                    hits.iter().all(|h| h.load(SeqCst) == 50),
                    "{threads} threads, {n}"
                );
            }
        }
    }

    #[test]
    fn nested_and_concurrent_jobs_finish() {
        let pool = Pool::new(2, "t").unwrap();
        let total = AtomicU32::new(0);
        std::thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    for _ in 0..200 {
                        pool.run(4, &|_| {
                            pool.run(3, &|_| {
                                total.fetch_add(1, SeqCst);
                            })
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(SeqCst), 3 * 200 * 12);
    }

    #[test]
    fn a_panic_reaches_the_caller_and_the_pool_still_works() {
        let pool = Pool::new(2, "t").unwrap();
        for _ in 0..20 {
            let r = catch_unwind(AssertUnwindSafe(|| {
                pool.run(8, &|i| {
                    if i == 5 {
                        panic!("task 5");
                    }
                })
            }));
            let msg = r.unwrap_err();
            assert_eq!(msg.downcast_ref::<&str>(), Some(&"task 5"));
        }
        let n = AtomicU32::new(0);
        pool.run(10, &|_| {
            n.fetch_add(1, SeqCst);
        });
        assert_eq!(n.load(SeqCst), 10);
        assert!(
            a_helper_takes_part(&pool),
            "after a panic jobs must still reach the helper"
        );
    }

    #[test]
    fn broadcast_reaches_each_thread_once() {
        let pool = Pool::new(3, "bc").unwrap();
        let seen = Mutex::new(Vec::new());
        pool.broadcast(&|t| {
            seen.lock().unwrap().push((t, std::thread::current().id()));
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort_by_key(|p| p.0);
        assert_eq!(seen.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(seen[0].1, std::thread::current().id());
        assert!(seen[1].1 != seen[2].1 && seen[1].1 != seen[0].1);
    }

    #[test]
    fn helpers_park_when_idle_and_wake_for_work() {
        let pool = Pool::new(2, "t").unwrap();
        // Parks after SPIN idle (given time on a core: other tests may be running).
        let start = Instant::now();
        while !pool.shared.parked[0].load(SeqCst) && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(SPIN);
        }
        assert!(pool.shared.parked[0].load(SeqCst), "the helper should park");
        assert!(
            a_helper_takes_part(&pool),
            "the parked helper never woke for work"
        );
    }

    /// Whether some of a few jobs' tasks (long enough for the helper to take some) run
    /// off the calling thread.
    fn a_helper_takes_part(pool: &Pool) -> bool {
        let on_helper = AtomicBool::new(false);
        let caller = std::thread::current().id();
        for _ in 0..100 {
            pool.run(64, &|_| {
                std::thread::sleep(Duration::from_micros(200));
                if std::thread::current().id() != caller {
                    on_helper.store(true, SeqCst);
                }
            });
            if on_helper.load(SeqCst) {
                return true;
            }
        }
        false
    }
}
