//! Constants of the SIMD paths' exp and erf approximations (each path evaluates the same
//! polynomials in its own vectors; the scalar reference calls libm).

/// Cephes expf constants: exp(x) = 2^n · p(r), r = x − n·ln2 (ln2 split in two).
pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
pub(super) const LN2_HI: f32 = 0.693_359_4;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
pub(super) const EXP_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];
/// Below this exp returns 0 (avoids denormals; −∞ lands here).
pub(super) const EXP_LO: f32 = -87.0;
pub(super) const EXP_HI: f32 = 88.0;
/// erf(z) ≈ z·P(z²)/Q(z²) for |z| ≤ [`ERF_CLAMP`] (beyond it erf is ±1 in f32), a
/// rational fit of ours (P, Q coefficients lowest degree first; Q₀ = 1). Its error is
/// 2.2e-8 in exact arithmetic and 3.7e-7 evaluated in f32, so GELU's is under 1e-6.
/// No exponential and no division: ~2.5× fewer instructions than erfc's
/// t·poly(t)·exp(−z²) with t = 1/(1 + p·z).
pub(super) const ERF_CLAMP: f32 = 4.0;
pub(super) const ERF_NUM: [f32; 6] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    0.196_239_3,
    0.053_466_3,
    0.004_003_261_7,
    0.000_288_038,
    1.974_970_5e-6,
];
pub(super) const ERF_DEN: [f32; 6] = [
    1.0,
    0.507_243_75,
    0.116_472_53,
    0.015_443_645,
    0.001_216_276_7,
    3.748_214_3e-5,
];
