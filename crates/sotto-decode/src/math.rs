//! Reductions over a row of logits (51 864 for Whisper), written so the compiler
//! vectorizes them: lane-wise accumulators and a branch-free `exp`. A serial f32 sum of
//! libm `expf` calls costs ~0.3 ms per row, i.e. ~1.5 ms of every 5-beam step spent on
//! one thread while the decoder's workers wait (or the GPU). `cargo bench -p sotto-decode
//! --bench search` times the searches' own work per step.

/// Independent accumulators of [`max`].
const LANES: usize = 16;
/// Values [`sum_exp_sub`] takes a stage at a time: each stage of `exp` is then four
/// independent 8-lane operations (two 16-lane), not one long dependent chain per vector,
/// which the out-of-order window cannot overlap (1.3× on Zen 3).
const BLOCK: usize = 32;

/// `a·b + c`, fused on the paths with FMA (AVX-512, AVX2 + FMA, aarch64), which then give
/// the same bits in fewer operations; the others round the product first.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `e^x` for `x ≤ 0` (every logit minus the row's maximum), to within 2 ulp: Cephes'
/// `expf` polynomial after a `2^n` range reduction. 0 below ln(f32::MIN_POSITIVE) and for
/// NaN (which the reductions skip). Branch-free so loops over it vectorize.
#[inline(always)]
pub(crate) fn exp_nonpos<const FMA: bool>(x: f32) -> f32 {
    let mut out = [0.0];
    exp_stages::<FMA, 1>(&[x], &mut out);
    out[0]
}

/// [`exp_nonpos`] of each of `x`, one stage at a time over all of them.
#[inline(always)]
fn exp_stages<const FMA: bool, const N: usize>(x: &[f32; N], out: &mut [f32; N]) {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for |n| ≤ 2^9.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    const LO: f32 = -87.336_54;
    let (mut t, mut r) = ([0f32; N], [0f32; N]);
    for i in 0..N {
        t[i] = madd::<FMA>(x[i].clamp(LO, 0.0), LOG2E, ROUND);
    }
    for i in 0..N {
        let n = t[i] - ROUND;
        r[i] = madd::<FMA>(n, -LN2_LO, madd::<FMA>(n, -LN2_HI, x[i].clamp(LO, 0.0)));
    }
    let mut p = [1.987_569_1e-4_f32; N];
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ] {
        for i in 0..N {
            p[i] = madd::<FMA>(p[i], r[i], c);
        }
    }
    for i in 0..N {
        p[i] = madd::<FMA>(p[i] * r[i], r[i], r[i]) + 1.0;
    }
    for i in 0..N {
        // t's low mantissa bits hold n (two's complement): 2^n without a float-to-int cast.
        let bits = t[i].to_bits().wrapping_sub(ROUND.to_bits());
        let pow2 = f32::from_bits(bits.wrapping_add(127) << 23);
        out[i] = if x[i] >= LO { p[i] * pow2 } else { 0.0 };
    }
}

/// The largest value, NaN skipped; -inf for an empty or all-NaN slice.
#[inline(always)]
fn max_lanes(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    tail.iter()
        .chain(&acc)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `Σ e^(x_i − m)` for `m ≥ max(x)`.
#[inline(always)]
fn sum_exp_sub_lanes<const FMA: bool>(x: &[f32], m: f32) -> f32 {
    let (mut acc, mut d, mut e) = ([0.0f32; BLOCK], [0.0f32; BLOCK], [0.0f32; BLOCK]);
    let chunks = x.chunks_exact(BLOCK);
    let tail = chunks.remainder();
    for c in chunks {
        for (d, &v) in d.iter_mut().zip(c) {
            *d = v - m;
        }
        exp_stages::<FMA, BLOCK>(&d, &mut e);
        for (a, &v) in acc.iter_mut().zip(&e) {
            *a += v;
        }
    }
    acc.iter().sum::<f32>() + tail.iter().map(|&v| exp_nonpos::<FMA>(v - m)).sum::<f32>()
}

/// Runs `$fused` (a call of an `#[inline(always)]` function) compiled for AVX-512 F or
/// AVX2 + FMA where the CPU has them (the default target is SSE2, where `$plain` runs):
/// 4–8× the lanes on the same code. aarch64 (which always has FMA) runs `$fused`, other
/// targets `$plain`. The explicit lane accumulators fix the summation order, so every
/// path with FMA gives the same bits.
macro_rules! widest {
    ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $fused:expr, $plain:expr) => {
        pub(crate) fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) -> $ret {
                    $fused
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) -> $ret {
                    $fused
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512 F (checked on the line above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA (checked above).
                    return unsafe { avx2($($arg),*) };
                }
                $plain
            }
            #[cfg(target_arch = "aarch64")]
            {
                $fused
            }
            #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
            {
                $plain
            }
        }
    };
}

widest!(max(x: &[f32]) -> f32 = max_lanes(x), max_lanes(x));
widest!(sum_exp_sub(x: &[f32], m: f32) -> f32 =
    sum_exp_sub_lanes::<true>(x, m), sum_exp_sub_lanes::<false>(x, m));

/// log(Σ e^x), -inf for an empty or all -inf slice.
pub(crate) fn logsumexp(x: &[f32]) -> f32 {
    let m = max(x);
    if m == f32::NEG_INFINITY {
        return m;
    }
    m + sum_exp_sub(x, m).ln()
}

/// What [`log_softmax_shifted`] adds to each of `x`: `shift − logsumexp(x)`, or `shift`
/// alone when the normalizer is not finite. A search that reads a few log-probabilities
/// adds it to those, and leaves the row as it is.
pub(crate) fn log_softmax_offset(x: &[f32], shift: f32) -> f32 {
    let lse = logsumexp(x);
    if lse.is_finite() {
        shift - lse
    } else {
        shift
    }
}

/// `x = log_softmax(x) + shift` (a row left as it is when its normalizer is not finite).
pub(crate) fn log_softmax_shifted(x: &mut [f32], shift: f32) {
    let d = log_softmax_offset(x, shift);
    if d != 0.0 {
        x.iter_mut().for_each(|v| *v += d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp_is_within_two_ulp_and_handles_the_ends<const FMA: bool>() {
        let ulps = |a: f32, b: f32| (a.to_bits() as i64 - b.to_bits() as i64).abs();
        let mut x = -87.3f32;
        while x < 0.0 {
            let (got, want) = (exp_nonpos::<FMA>(x), x.exp());
            assert!(ulps(got, want) <= 2, "exp({x}) = {got}, std {want}");
            x += 0.000_37;
        }
        for x in [0.0f32, -0.0, -1.0, -1e-8, -0.5, -10.0, -87.0] {
            assert!(ulps(exp_nonpos::<FMA>(x), x.exp()) <= 2, "exp({x})");
        }
        assert_eq!(exp_nonpos::<FMA>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpos::<FMA>(-100.0), 0.0);
        assert_eq!(exp_nonpos::<FMA>(f32::NAN), 0.0);
    }

    #[test]
    fn exp_matches_std_to_two_ulp_fused_or_not() {
        exp_is_within_two_ulp_and_handles_the_ends::<true>();
        exp_is_within_two_ulp_and_handles_the_ends::<false>();
    }

    #[test]
    fn staged_blocks_give_the_values_one_at_a_time() {
        // Whole blocks, the tail, -inf and NaN: each value as exp_nonpos gives it alone.
        let x: Vec<f32> = (0..BLOCK * 3 + 7)
            .map(|i| match i % 29 {
                3 => f32::NEG_INFINITY,
                11 => f32::NAN,
                _ => -((i * 7919 % 1000) as f32) / 11.0,
            })
            .collect();
        let serial = |fma: bool| {
            let mut acc = [0.0f32; BLOCK];
            let chunks = x.chunks_exact(BLOCK);
            let tail: f32 = chunks
                .remainder()
                .iter()
                .map(|&v| {
                    if fma {
                        exp_nonpos::<true>(v)
                    } else {
                        exp_nonpos::<false>(v)
                    }
                })
                .sum();
            for c in chunks {
                for (a, &v) in acc.iter_mut().zip(c) {
                    *a += if fma {
                        exp_nonpos::<true>(v)
                    } else {
                        exp_nonpos::<false>(v)
                    };
                }
            }
            acc.iter().sum::<f32>() + tail
        };
        assert_eq!(sum_exp_sub_lanes::<true>(&x, 0.0), serial(true));
        assert_eq!(sum_exp_sub_lanes::<false>(&x, 0.0), serial(false));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            || (std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma"))
        {
            // The dispatched path is a fused one: the same bits as the portable fused code.
            assert_eq!(sum_exp_sub(&x, 0.0), serial(true));
        }
    }

    #[test]
    fn reductions_match_serial_sums() {
        for n in [0usize, 1, 15, 16, 17, 100, 1501, 51_864] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0)
                .collect();
            let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(&x), m, "max of {n}");
            if n == 0 {
                assert_eq!(logsumexp(&x), f32::NEG_INFINITY);
                continue;
            }
            let want: f64 = x.iter().map(|&v| f64::from(v - m).exp()).sum();
            let got = f64::from(sum_exp_sub(&x, m));
            assert!((got - want).abs() <= 1e-5 * want, "{n}: {got} vs {want}");
            let lse = f64::from(logsumexp(&x));
            assert!((lse - (f64::from(m) + want.ln())).abs() < 1e-5, "{n}");
        }
    }

    #[test]
    fn masked_and_nan_rows() {
        let mut x = vec![f32::NEG_INFINITY; 40];
        assert_eq!(logsumexp(&x), f32::NEG_INFINITY);
        x[33] = 2.0;
        assert!((logsumexp(&x) - 2.0).abs() < 1e-6);
        x[3] = f32::NAN;
        assert_eq!(max(&x), 2.0);
        let mut row = vec![f32::NEG_INFINITY, 0.0, 0.0];
        log_softmax_shifted(&mut row, -1.0);
        assert_eq!(row[0], f32::NEG_INFINITY);
        assert!((row[1] - (-1.0 - 2f32.ln())).abs() < 1e-6);
        let mut dead = vec![f32::NEG_INFINITY; 3];
        log_softmax_shifted(&mut dead, -1.0);
        assert!(dead.iter().all(|&v| v == f32::NEG_INFINITY));
    }
}
