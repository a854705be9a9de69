//! SIMD kernels chosen at run time.
//!
//! Every kernel takes an explicit [`Isa`] (normally [`sotto_isa::isa()`]) and has a scalar
//! reference plus AVX2+FMA+F16C and AVX-512 paths on x86-64 and a NEON path on aarch64.
//! A path the CPU lacks is never entered: [`checked`] maps it to the best one it has.
//! Row slices may have any length; the SIMD paths handle tails themselves.

mod scalar;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod x86;

use half::f16;
pub use sotto_isa::Isa;

/// A block of weight rows, row-major with `k` elements per row.
#[derive(Clone, Copy, Debug)]
pub enum WRows<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl WRows<'_> {
    fn len(&self) -> usize {
        match self {
            WRows::F32(w) => w.len(),
            WRows::F16(w) => w.len(),
        }
    }
}

/// The path to run: `isa` if this CPU supports it, else the best one below it.
#[inline]
pub fn checked(isa: Isa) -> Isa {
    // Cached: kernels dispatch per row, and feature detection is not free.
    static PATHS: std::sync::OnceLock<[Isa; 4]> = std::sync::OnceLock::new();
    let paths = PATHS.get_or_init(|| {
        [Isa::Scalar, Isa::Neon, Isa::Avx2, Isa::Avx512].map(sotto_isa::best_at_most)
    });
    paths[isa as usize]
}

macro_rules! dispatch {
    ($isa:expr, $f:ident($($arg:expr),*)) => {
        match checked($isa) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F/BW/VL, AVX2, FMA, F16C.
            Isa::Avx512 => unsafe { x86::avx512::$f($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `checked` returned Avx2, so the CPU has AVX2, FMA and F16C.
            Isa::Avx2 => unsafe { x86::avx2::$f($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: NEON is part of the aarch64 baseline.
            Isa::Neon => unsafe { neon::$f($($arg),*) },
            _ => scalar::$f($($arg),*),
        }
    };
}

/// Σ a·b over the common length. Panics if the lengths differ.
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    dispatch!(isa, dot(a, b))
}

/// Widens f16 to f32. Panics if the lengths differ.
pub fn f16_to_f32(isa: Isa, src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "f16_to_f32: lengths differ");
    dispatch!(isa, f16_to_f32(src, dst))
}

/// `out_t[r·m + i] = x_i · w_r` for every weight row r: all `m` input rows share each weight
/// load, and f16 weights are widened in registers.
///
/// `x` Shape: [m, k]; `w` Shape: [rows, k]; `out_t` Shape: [rows, m]. Panics on other shapes.
pub fn matmul_t(isa: Isa, x: &[f32], m: usize, k: usize, w: WRows<'_>, out_t: &mut [f32]) {
    assert!(k > 0 && m > 0 && x.len() == m * k && w.len().is_multiple_of(k));
    assert_eq!(out_t.len(), w.len() / k * m, "matmul_t: out_t length");
    if m > 8 {
        return scalar::matmul_t(x, m, k, w, out_t);
    }
    dispatch!(isa, matmul_t(x, m, k, w, out_t))
}

/// Largest element (−∞ for an empty slice).
pub fn max(isa: Isa, x: &[f32]) -> f32 {
    dispatch!(isa, max(x))
}

/// `x = exp(x − m)` in place; returns Σ x. Inputs below −87 (and −∞) give 0.
pub fn exp_sub_sum(isa: Isa, x: &mut [f32], m: f32) -> f32 {
    dispatch!(isa, exp_sub_sum(x, m))
}

/// `x *= s`.
pub fn scale(isa: Isa, x: &mut [f32], s: f32) {
    dispatch!(isa, scale(x, s))
}

/// `y += a·x`. Panics if the lengths differ.
pub fn axpy(isa: Isa, a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: lengths differ");
    dispatch!(isa, axpy(a, x, y))
}

/// `out[j] = s · (q · k[j·ld .. j·ld + q.len()])` for every j < out.len() (attention scores
/// of one query against keys stored `ld` apart). Panics when `k` is too short.
pub fn dot_rows(isa: Isa, q: &[f32], k: &[f32], ld: usize, s: f32, out: &mut [f32]) {
    if let Some(last) = out.len().checked_sub(1) {
        assert!(k.len() >= last * ld + q.len(), "dot_rows: k too short");
    }
    dispatch!(isa, dot_rows(q, k, ld, s, out))
}

/// `out += Σ_j p[j] · v[j·ld .. j·ld + out.len()]` (attention-weighted sum of value rows
/// stored `ld` apart). Panics when `v` is too short.
pub fn axpy_rows(isa: Isa, p: &[f32], v: &[f32], ld: usize, out: &mut [f32]) {
    if let Some(last) = p.len().checked_sub(1) {
        assert!(v.len() >= last * ld + out.len(), "axpy_rows: v too short");
    }
    dispatch!(isa, axpy_rows(p, v, ld, out))
}

/// `a += b`. Panics if the lengths differ.
pub fn add(isa: Isa, a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "add: lengths differ");
    dispatch!(isa, add(a, b))
}

/// Exact-erf GELU in place (the SIMD paths use an erf with |error| < 2e-7).
pub fn gelu(isa: Isa, x: &mut [f32]) {
    dispatch!(isa, gelu(x))
}

/// One row of layer norm. All slices Shape: `[d]`. Panics if the lengths differ.
pub fn layer_norm(isa: Isa, x: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let d = x.len();
    assert!(d > 0 && gamma.len() == d && beta.len() == d && out.len() == d);
    dispatch!(isa, layer_norm(x, gamma, beta, eps, out))
}

/// Numerically stable softmax of one row; an all −∞ row becomes zeros.
pub fn softmax(isa: Isa, row: &mut [f32]) {
    let m = max(isa, row);
    if m == f32::NEG_INFINITY {
        row.fill(0.0);
        return;
    }
    let s = exp_sub_sum(isa, row, m);
    scale(isa, row, 1.0 / s);
}

#[cfg(test)]
mod tests;
