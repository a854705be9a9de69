//! SIMD kernels chosen at run time.
//!
//! Every kernel takes an explicit [`Isa`] (normally [`sotto_isa::isa()`]) and has a scalar
//! reference plus AVX2+FMA+F16C and AVX-512 paths on x86-64 and a NEON path on aarch64.
//! A path the CPU lacks is never entered: [`checked`] maps it to the best one it has.
//! Row slices may have any length; the SIMD paths handle tails themselves.

mod scalar;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod approx;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[macro_use]
mod packed;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon_int8;
#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_amx;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_attn_avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_attn_f32;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_bf16;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_bf16_attn;
#[cfg(target_arch = "x86_64")]
mod x86_decode;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_f32;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_int8;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_peak;
#[cfg(target_arch = "x86_64")]
mod x86_tile;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_tiles_many;

use half::f16;
pub use sotto_isa::Isa;

/// Rows per tile of [`crate::F16Tiles`]: four 16-lane registers of outputs.
pub const TILE_ROWS: usize = 64;

/// Keys per block of packed attention keys (see [`attn_scores`]).
pub const KEY_BLOCK: usize = 32;
/// Packed attention values have rows padded to a multiple of this (see [`attn_values`]).
pub const VALUE_ALIGN: usize = 16;

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

/// Rounds f32 to f16 (to nearest even). Panics if the lengths differ.
pub fn f32_to_f16(isa: Isa, src: &[f32], dst: &mut [f16]) {
    assert_eq!(src.len(), dst.len(), "f32_to_f16: lengths differ");
    dispatch!(isa, f32_to_f16(src, dst))
}

/// `dst[c·ldd + r] = f16(src[r·ld + c])` (nearest even) for `r < rows`, `c < cols`: a
/// block of rows stored as columns. Panics if a slice is too short or `cols > ld`.
#[allow(clippy::too_many_arguments)]
pub fn transpose_to_f16(
    isa: Isa,
    src: &[f32],
    ld: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f16],
    ldd: usize,
) {
    if !check_transpose(src.len(), ld, rows, cols, dst.len(), ldd) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        let d = dst.as_mut_ptr() as *mut u16;
        // SAFETY: Avx512 is only selected where F, BW and VL run; the lengths are checked.
        unsafe { x86_attn_f32::transpose_to_f16(src.as_ptr(), ld, rows, cols, d, ldd) };
        return;
    }
    let _ = isa;
    for r in 0..rows {
        for c in 0..cols {
            dst[c * ldd + r] = f16::from_f32(src[r * ld + c]);
        }
    }
}

/// `dst[c·ldd + r] = src[r·ld + c]` for `r < rows`, `c < cols`. Panics as
/// [`transpose_to_f16`].
#[allow(clippy::too_many_arguments)]
pub fn transpose(
    isa: Isa,
    src: &[f32],
    ld: usize,
    rows: usize,
    cols: usize,
    dst: &mut [f32],
    ldd: usize,
) {
    if !check_transpose(src.len(), ld, rows, cols, dst.len(), ldd) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        let d = dst.as_mut_ptr();
        // SAFETY: Avx512 is only selected where F runs; the lengths are checked.
        unsafe { x86_attn_f32::transpose(src.as_ptr(), ld, rows, cols, d, ldd) };
        return;
    }
    let _ = isa;
    for r in 0..rows {
        for c in 0..cols {
            dst[c * ldd + r] = src[r * ld + c];
        }
    }
}

/// The bounds of a transpose (panics when a slice is short); false when there is nothing
/// to move.
fn check_transpose(
    src: usize,
    ld: usize,
    rows: usize,
    cols: usize,
    dst: usize,
    ldd: usize,
) -> bool {
    if rows == 0 || cols == 0 {
        return false;
    }
    assert!(
        cols <= ld && rows <= ldd && src >= (rows - 1) * ld + cols,
        "transpose: {src} values for {rows}×{cols} rows {ld} apart"
    );
    assert!(
        dst >= (cols - 1) * ldd + rows,
        "transpose: {dst} values for {cols} columns {ldd} apart"
    );
    true
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

/// Calls `$f` compiled for the widest vectors `isa` allows.
macro_rules! wide_dispatch {
    ($isa:expr, $f:ident($($arg:expr),*)) => {
        match checked($isa) {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F/BW/VL, AVX2, FMA, F16C.
            Isa::Avx512 => unsafe { wide::avx512::$f($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `checked` returned Avx2, so the CPU has AVX2, FMA and F16C.
            Isa::Avx2 => unsafe { wide::avx2::$f($($arg),*) },
            _ => wide::$f($($arg),*),
        }
    };
}

/// The vocabulary screen's loops, plain and (on x86-64) the same Rust compiled for AVX2
/// and AVX-512.
mod wide {
    /// [`super::screen_floor`] for k > 0, the k best so far kept ascending in `best`.
    #[inline(always)]
    pub(super) fn screen_floor(
        s: &[f32],
        c: &[f32],
        xn: f32,
        k: usize,
        excluded: &[u64],
        best: &mut Vec<f32>,
    ) -> f32 {
        let mut floor = f32::NEG_INFINITY;
        for (ci, (sc, cc)) in s.chunks(16).zip(c.chunks(16)).enumerate() {
            // The chunk's largest lower bound; NaN compares false and drops out.
            let mx = sc
                .iter()
                .zip(cc)
                .map(|(&a, &b)| a - b * xn)
                .fold(f32::NEG_INFINITY, |m, v| if v > m { v } else { m });
            if best.len() == k && mx <= floor {
                continue;
            }
            for (j, (&a, &b)) in sc.iter().zip(cc).enumerate() {
                let lb = a - b * xn;
                let r = ci * 16 + j;
                if lb.is_nan()
                    || (best.len() == k && lb <= floor)
                    || excluded.get(r / 64).is_some_and(|w| w >> (r % 64) & 1 == 1)
                {
                    continue;
                }
                let at = best.partition_point(|&v| v < lb);
                best.insert(at, lb);
                if best.len() > k {
                    best.remove(0);
                }
                if best.len() == k {
                    floor = best[0];
                }
            }
        }
        if best.len() < k {
            f32::NEG_INFINITY
        } else {
            floor
        }
    }

    // `!(ub < tau)`, not `ub >= tau`: a NaN bound must count as reaching.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    #[inline(always)]
    pub(super) fn screen_reach(s: &[f32], c: &[f32], xn: f32, tau: f32, out: &mut Vec<u32>) {
        for (ci, (sc, cc)) in s.chunks(16).zip(c.chunks(16)).enumerate() {
            // NaN counts as reaching: `!(ub < tau)`.
            let any = sc
                .iter()
                .zip(cc)
                .fold(false, |m, (&a, &b)| m | !(a + b * xn < tau));
            if any {
                for (j, (&a, &b)) in sc.iter().zip(cc).enumerate() {
                    if !(a + b * xn < tau) {
                        out.push((ci * 16 + j) as u32);
                    }
                }
            }
        }
    }

    macro_rules! wide {
        ($name:ident, $feat:literal) => {
            #[cfg(target_arch = "x86_64")]
            pub(super) mod $name {
                #[target_feature(enable = $feat)]
                pub(in super::super) unsafe fn screen_floor(
                    s: &[f32],
                    c: &[f32],
                    xn: f32,
                    k: usize,
                    excluded: &[u64],
                    best: &mut Vec<f32>,
                ) -> f32 {
                    super::screen_floor(s, c, xn, k, excluded, best)
                }

                #[target_feature(enable = $feat)]
                pub(in super::super) unsafe fn screen_reach(
                    s: &[f32],
                    c: &[f32],
                    xn: f32,
                    tau: f32,
                    out: &mut Vec<u32>,
                ) {
                    super::screen_reach(s, c, xn, tau, out)
                }
            }
        };
    }
    wide!(avx512, "avx512f,avx512bw,avx512vl,avx2,fma,f16c");
    wide!(avx2, "avx2,fma,f16c");
}

/// The k-th largest lower bound `s_r − c_r·xn` over the rows r not set in the bitmask
/// `excluded` (NaN skipped): +inf for k = 0, -inf when fewer than k rows count. The
/// screened vocabulary's threshold (`crate::VocabTop`); `best` is the caller's scratch.
pub fn screen_floor(
    isa: Isa,
    s: &[f32],
    c: &[f32],
    xn: f32,
    k: usize,
    excluded: &[u64],
    best: &mut Vec<f32>,
) -> f32 {
    assert_eq!(s.len(), c.len(), "screen_floor: lengths differ");
    if k == 0 {
        return f32::INFINITY;
    }
    best.clear();
    wide_dispatch!(isa, screen_floor(s, c, xn, k, excluded, best))
}

/// Appends to `out` every row r whose upper bound `s_r + c_r·xn` reaches `tau` (or is NaN).
pub fn screen_reach(isa: Isa, s: &[f32], c: &[f32], xn: f32, tau: f32, out: &mut Vec<u32>) {
    assert_eq!(s.len(), c.len(), "screen_reach: lengths differ");
    wide_dispatch!(isa, screen_reach(s, c, xn, tau, out))
}

/// `out[i·(tiles·TILE_ROWS) + r] = x_i · w_r` for every row r of whole [`crate::F16Tiles`]
/// tiles `w` (rows of `k` values; padding rows give 0): one contiguous weight stream, each
/// load shared by all `m` input rows.
///
/// `x` Shape: [m, k]; `w` Shape: [tiles, k · TILE_ROWS]; `out` Shape: [m, tiles · TILE_ROWS].
/// Panics on other shapes.
pub fn matmul_tiled(isa: Isa, x: &[f32], m: usize, k: usize, w: &[f16], out: &mut [f32]) {
    assert!(k > 0 && m > 0 && x.len() == m * k && w.len().is_multiple_of(k * TILE_ROWS));
    assert_eq!(out.len(), w.len() / k * m, "matmul_tiled: out");
    match checked(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F/BW/VL, AVX2, FMA, F16C.
        Isa::Avx512 => unsafe { x86_decode::avx512::matmul_tiled(x, m, k, w, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx2, so the CPU has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe { x86_decode::avx2::matmul_tiled(x, m, k, w, out) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => unsafe { neon::matmul_tiled(x, m, k, w, out) },
        _ => scalar::matmul_tiled(x, m, k, w, out),
    }
}

/// `s[i·lds + j] = scale · q_i · k_j` for `g` query rows and every key of `k`, keys packed
/// f16 in blocks: key `b·KEY_BLOCK + l`, column c at `(b·dh + c)·KEY_BLOCK + l`.
///
/// `q` Shape: [g, ldq] (the first `dh` of each row used); `k` Shape: [nb, dh, KEY_BLOCK];
/// `s` Shape: [g, lds] with lds ≥ nb·KEY_BLOCK. Panics on other shapes.
#[allow(clippy::too_many_arguments)]
pub fn attn_scores(
    isa: Isa,
    q: &[f32],
    g: usize,
    ldq: usize,
    k: &[f16],
    dh: usize,
    scale: f32,
    s: &mut [f32],
    lds: usize,
) {
    assert!(g > 0 && dh > 0 && ldq >= dh && k.len().is_multiple_of(dh * KEY_BLOCK));
    let nk = k.len() / dh;
    assert!(q.len() >= (g - 1) * ldq + dh, "attn_scores: q too short");
    assert!(
        lds >= nk && s.len() >= (g - 1) * lds + nk,
        "attn_scores: s too short"
    );
    match checked(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F/BW/VL, AVX2, FMA, F16C.
        Isa::Avx512 => unsafe {
            x86_decode::avx512_attn::attn_scores(q, g, ldq, k, dh, scale, s, lds)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx2, so the CPU has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe {
            x86_decode::avx2_attn::attn_scores_rows(q, g, ldq, k, dh, scale, s, lds)
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => unsafe { neon::attn::attn_scores(q, g, ldq, k, dh, scale, s, lds) },
        _ => scalar::attn_scores(q, g, ldq, k, dh, scale, s, lds),
    }
}

/// `out[i·ldo + c] = Σ_{j < tk} p[i·ldp + j] · v[j·dhp + c]` for `g` rows and every column
/// c < dhp, values packed f16 with rows padded to `dhp`, a multiple of [`VALUE_ALIGN`].
///
/// `p` Shape: [g, ldp]; `v` Shape: [≥ tk, dhp]; `out` Shape: [g, ldo]. Panics on other shapes.
#[allow(clippy::too_many_arguments)]
pub fn attn_values(
    isa: Isa,
    p: &[f32],
    g: usize,
    ldp: usize,
    tk: usize,
    v: &[f16],
    dhp: usize,
    out: &mut [f32],
    ldo: usize,
) {
    assert!(g > 0 && dhp > 0 && dhp.is_multiple_of(VALUE_ALIGN) && v.len() >= tk * dhp);
    assert!(
        ldp >= tk && p.len() >= (g - 1) * ldp + tk,
        "attn_values: p too short"
    );
    assert!(
        ldo >= dhp && out.len() >= (g - 1) * ldo + dhp,
        "attn_values: out too short"
    );
    match checked(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F/BW/VL, AVX2, FMA, F16C.
        Isa::Avx512 => unsafe {
            x86_decode::avx512_attn::attn_values(p, g, ldp, tk, v, dhp, out, ldo)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx2, so the CPU has AVX2, FMA and F16C.
        Isa::Avx2 => unsafe {
            x86_decode::avx2_attn::attn_values_rows(p, g, ldp, tk, v, dhp, out, ldo)
        },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => unsafe { neon::attn::attn_values(p, g, ldp, tk, v, dhp, out, ldo) },
        _ => scalar::attn_values(p, g, ldp, tk, v, dhp, out, ldo),
    }
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

/// `iters` rounds of independent fused multiply-add chains on path `isa`, for
/// [`crate::peak`]: (f32 operations per round, a value that depends on every round).
pub(crate) fn fma_peak(isa: Isa, iters: u64) -> (u64, f32) {
    match checked(isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx512, so the CPU has AVX-512 F.
        Isa::Avx512 => (x86_peak::FMA_AVX512_FLOPS, unsafe {
            x86_peak::fma_avx512(iters)
        }),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` returned Avx2, so the CPU has AVX2 and FMA.
        Isa::Avx2 => (x86_peak::FMA_AVX2_FLOPS, unsafe {
            x86_peak::fma_avx2(iters)
        }),
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => (neon::FMA_PEAK_FLOPS, unsafe { neon::fma_peak(iters) }),
        _ => (scalar::FMA_PEAK_FLOPS, scalar::fma_peak(iters)),
    }
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
