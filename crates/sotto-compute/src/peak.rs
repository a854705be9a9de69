//! This machine's ceilings, measured on the spot: what `sotto bench` sets its figures
//! against, so that "within 1.3× of the compute limit" can be rerun on any CPU.
//!
//! Compute rates come from loops of independent chains of the instruction each product
//! kernel is built on (f32 FMA, bf16 `vdpbf16ps`, int8 `vpdpbusd` or, on AVX2, `vpmaddwd`
//! with its add), run on every thread at
//! once with nothing else in them: no loads, no stores, no shuffles, so no kernel can
//! pass them. Memory bandwidth comes from reading a buffer far larger than the caches.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::{kernels, Isa};

/// Measured ceilings on some number of threads, each the best of a few runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peaks {
    pub threads: usize,
    /// f32 fused multiply-adds on the kernels' widest path, GFLOP/s (an FMA counts two).
    pub f32_gflops: f64,
    /// `vdpbf16ps` (pairs of bf16 products into f32), GFLOP/s; `None` without AVX-512 BF16.
    pub bf16_gflops: Option<f64>,
    /// AMX `tdpbf16ps` (tile products of bf16 pairs into f32), GFLOP/s: the bf16 GEMM's and
    /// attention's rate where they run on tiles ([`sotto_isa::amx_bf16`]); else `None`.
    pub amx_bf16_gflops: Option<f64>,
    /// The int8 GEMM's rate, GOP/s: `vpdpbusd` (quads of u8 × i8 products into i32) with
    /// AVX-512 VNNI, else `vpmaddwd` and `vpaddd` (pairs of i16 products into i32) on the
    /// AVX2 path; `None` on other paths.
    pub int8_gops: Option<f64>,
    /// Every thread reading its share of a [`READ_BYTES`] buffer (smaller where that cannot
    /// be allocated; NaN where nothing can), GB/s.
    pub read_gbs: f64,
}

/// The bandwidth test's buffer: eight times a large server L3.
pub const READ_BYTES: usize = 256 << 20;
/// Wall time aimed at per compute run: long enough to swamp the start, short enough that a
/// whole measurement stays under a second.
const TARGET: Duration = Duration::from_millis(40);
/// Runs per figure; the best counts (noise only ever slows a run).
const REPEATS: usize = 5;

/// Measures the ceilings on `threads` threads (at least one), with f32 on kernel path `isa`.
/// Takes about a second and a [`READ_BYTES`] buffer, freed before it returns.
pub fn measure_peaks(isa: Isa, threads: usize) -> Peaks {
    Peaks {
        read_gbs: read_rate(threads.max(1)) / 1e9,
        ..measure_compute_peaks(isa, threads)
    }
}

/// [`measure_peaks`] without the memory test (its `read_gbs` NaN): no large buffer, so it can
/// run before a peak RSS is read.
pub fn measure_compute_peaks(isa: Isa, threads: usize) -> Peaks {
    let threads = threads.max(1);
    let (flops, _) = kernels::fma_peak(isa, 0);
    let f32_gflops = rate(threads, flops, |n| {
        black_box(kernels::fma_peak(isa, n));
    }) / 1e9;
    let wide = kernels::checked(isa) == Isa::Avx512;
    #[cfg(target_arch = "x86_64")]
    let (bf16_gflops, amx_bf16_gflops, int8_gops) = {
        use kernels::{x86_amx, x86_peak};
        let amx = (wide && sotto_isa::amx_bf16()).then(|| {
            rate(threads, x86_amx::PEAK_FLOPS, |n| {
                // SAFETY: amx_bf16() says the CPU has AMX and the process its tile state.
                black_box(unsafe { x86_amx::peak(n) });
            }) / 1e9
        });
        let bf16 = (wide && crate::bf16_gemm_supported()).then(|| {
            rate(threads, x86_peak::DPBF16_FLOPS, |n| {
                // SAFETY: bf16_gemm_supported() says the CPU has AVX-512 F and BF16.
                black_box(unsafe { x86_peak::dpbf16(n) });
            }) / 1e9
        });
        let int8 = if wide && crate::int8::vnni_supported() {
            Some(rate(threads, x86_peak::DPBUSD_OPS, |n| {
                // SAFETY: vnni_supported() says the CPU has AVX-512 F and VNNI.
                black_box(unsafe { x86_peak::dpbusd(n) });
            }))
        } else if kernels::checked(isa) == Isa::Avx2 {
            Some(rate(threads, x86_peak::MADDWD_OPS, |n| {
                // SAFETY: `checked` returned Avx2: the CPU has AVX2.
                black_box(unsafe { x86_peak::maddwd(n) });
            }))
        } else {
            None
        }
        .map(|r| r / 1e9);
        (bf16, amx, int8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (bf16_gflops, amx_bf16_gflops, int8_gops) = {
        let _ = wide;
        (None, None, None)
    };
    Peaks {
        threads,
        f32_gflops,
        bf16_gflops,
        amx_bf16_gflops,
        int8_gops,
        read_gbs: f64::NAN,
    }
}

impl Peaks {
    /// Each rate the higher of two measurements' (a NaN or missing one loses): others' load
    /// only ever lowers a measured peak, so two taken minutes apart bound it better than one.
    pub fn best_of(self, other: Peaks) -> Peaks {
        let opt = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Peaks {
            threads: self.threads,
            f32_gflops: self.f32_gflops.max(other.f32_gflops),
            bf16_gflops: opt(self.bf16_gflops, other.bf16_gflops),
            amx_bf16_gflops: opt(self.amx_bf16_gflops, other.amx_bf16_gflops),
            int8_gops: opt(self.int8_gops, other.int8_gops),
            read_gbs: self.read_gbs.max(other.read_gbs),
        }
    }
}

/// The best rate, in operations per second, of `run(iters)` on `threads` threads at once,
/// each round of `run` doing `ops_per_iter` operations.
fn rate(threads: usize, ops_per_iter: u64, run: impl Fn(u64) + Sync) -> f64 {
    // Rounds for about TARGET, from one thread's timing of ever longer runs.
    let mut iters = 1u64 << 10;
    loop {
        let t = Instant::now();
        run(iters);
        let took = t.elapsed();
        if took >= TARGET / 8 || iters >= 1 << 40 {
            let scale = TARGET.as_secs_f64() / took.as_secs_f64().max(1e-9);
            iters = ((iters as f64 * scale) as u64).max(1);
            break;
        }
        iters *= 4;
    }
    let ops = (threads as u64 * iters * ops_per_iter) as f64;
    (0..REPEATS)
        .map(|_| ops / on_threads(threads, |_| run(iters)))
        .fold(0.0, f64::max)
}

/// Bytes per second of every thread summing its share of a buffer far larger than the caches.
fn read_rate(threads: usize) -> f64 {
    // A machine that cannot spare the buffer gets a quarter of it (still past most caches)
    // rather than an abort.
    let mut words = Vec::new();
    for bytes in [READ_BYTES, READ_BYTES / 4, READ_BYTES / 16] {
        if words.try_reserve_exact(bytes / 8).is_ok() {
            words.resize(bytes / 8, 1u64);
            break;
        }
    }
    if words.is_empty() {
        return f64::NAN;
    }
    let bytes = 8 * words.len();
    let share = words.len().div_ceil(threads);
    (0..REPEATS)
        .map(|_| {
            let secs = on_threads(threads, |i| {
                let part = words.chunks(share).nth(i).unwrap_or(&[]);
                // XOR folds vectorize on every target and cost less than the loads.
                black_box(part.iter().fold(0u64, |a, &w| a ^ w));
            });
            bytes as f64 / secs
        })
        .fold(0.0, f64::max)
}

/// Seconds from the first start to the last end of `f(i)` for each `i < threads`, each on
/// its own thread, released together.
fn on_threads(threads: usize, f: impl Fn(usize) + Sync) -> f64 {
    let start = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (start, f) = (&start, &f);
                s.spawn(move || {
                    start.wait();
                    let t = Instant::now();
                    f(i);
                    (t, Instant::now())
                })
            })
            .collect();
        workers.into_iter().filter_map(|w| w.join().ok()).collect()
    });
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    match (first, last) {
        (Some(a), Some(b)) => (b - a).as_secs_f64().max(1e-9),
        _ => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_of_keeps_each_higher_rate() {
        let a = Peaks {
            threads: 2,
            f32_gflops: 200.0,
            bf16_gflops: Some(450.0),
            amx_bf16_gflops: None,
            int8_gops: Some(800.0),
            read_gbs: f64::NAN,
        };
        let b = Peaks {
            threads: 2,
            f32_gflops: 220.0,
            bf16_gflops: Some(400.0),
            amx_bf16_gflops: Some(1000.0),
            int8_gops: None,
            read_gbs: 30.0,
        };
        let want = Peaks {
            threads: 2,
            f32_gflops: 220.0,
            bf16_gflops: Some(450.0),
            amx_bf16_gflops: Some(1000.0),
            int8_gops: Some(800.0),
            read_gbs: 30.0,
        };
        assert_eq!(a.best_of(b), want);
        assert_eq!(b.best_of(a), want);
    }

    /// Every path's loop does what it counts: the same rounds give the same value on every
    /// path (each chain is x ← 0.999999·x + 1e-7 from 0, so all chains agree).
    #[test]
    fn fma_loops_agree_across_paths() {
        let reference = kernels::fma_peak(Isa::Scalar, 1000);
        let per_chain = reference.1 / (reference.0 / 2) as f32;
        for isa in sotto_isa::available() {
            let (flops, v) = kernels::fma_peak(isa, 1000);
            let chains = (flops / 2) as f32;
            assert!(
                (v / chains - per_chain).abs() <= 1e-4 * per_chain.abs(),
                "{isa:?}: {} per chain against {per_chain}",
                v / chains
            );
        }
        // Closed form: 1e-7 · (1 − 0.999999^1000) / (1 − 0.999999).
        let expect = 1e-7 * (1.0 - 0.999_999f64.powi(1000)) / 1e-6;
        assert!((per_chain as f64 - expect).abs() < 1e-4 * expect);
    }

    /// The dot-product loops count what they do: their sums over every chain and lane.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn dot_loops_count_their_operations() {
        use kernels::x86_peak;
        let n = 100u64;
        if crate::bf16_gemm_supported() {
            // Each instruction adds two products of 2^-15 · 2^-15 to each lane.
            // SAFETY: the CPU has AVX-512 F and BF16 (checked above).
            let v = unsafe { x86_peak::dpbf16(n) } as f64;
            let lanes = (x86_peak::DPBF16_FLOPS / 4) as f64;
            assert_eq!(v, lanes * n as f64 * 2.0 * 2f64.powi(-30));
        }
        if sotto_isa::amx_bf16() {
            // Each tile product adds 32 products of 1 · 2^-20 to each sum.
            // SAFETY: amx_bf16() says the CPU has AMX and the process its tile state.
            let v = unsafe { kernels::x86_amx::peak(n) } as f64;
            assert_eq!(v, n as f64 * 32.0 * 2f64.powi(-20));
        }
        if crate::int8::vnni_supported() {
            // Each instruction adds four products of 3 · −2 to each lane.
            // SAFETY: the CPU has AVX-512 F and VNNI (checked above).
            let v = unsafe { x86_peak::dpbusd(n) } as i64;
            let lanes = (x86_peak::DPBUSD_OPS / 8) as i64;
            assert_eq!(v, lanes * n as i64 * -24);
        }
        if Isa::Avx2.is_supported() {
            // Each step adds the lane's own two i16 halves times −2 to it (wrapping).
            let lane = (0..n).fold(3i32, |r, _| {
                let (lo, hi) = (r as i16 as i32, (r >> 16) as i16 as i32);
                r.wrapping_add(-2 * lo + -2 * hi)
            });
            let lanes = (x86_peak::MADDWD_OPS / 4) as i32;
            // SAFETY: the CPU has AVX2 (checked above).
            let v = unsafe { x86_peak::maddwd(n) };
            assert_eq!(v, lane.wrapping_mul(lanes));
        }
    }

    #[test]
    fn peaks_are_positive_and_plausible() {
        let p = measure_peaks(sotto_isa::isa(), 1);
        assert_eq!(p.threads, 1);
        // At least a tenth of a scalar unit's worth (an emulator, as qemu running the NEON
        // tests, reaches a fraction of one); no more than 64 FMA lanes at 10 GHz.
        assert!(
            p.f32_gflops > 0.05 && p.f32_gflops < 1280.0,
            "{}",
            p.f32_gflops
        );
        for x in [p.bf16_gflops, p.int8_gops].into_iter().flatten() {
            // The dot-product instructions do at least half as much as an FMA per cycle
            // (Sapphire Rapids' `vdpbf16ps` measured half).
            assert!(x > 0.25 * p.f32_gflops, "{x} against f32 {}", p.f32_gflops);
        }
        if let Some(amx) = p.amx_bf16_gflops {
            // A tile product is 1024 multiply-adds per 16 cycles: several FMA units' worth.
            assert!(
                amx > 2.0 * p.f32_gflops,
                "AMX {amx} against f32 {}",
                p.f32_gflops
            );
        }
        assert!(p.read_gbs > 0.1 && p.read_gbs < 10_000.0, "{}", p.read_gbs);
    }
}
