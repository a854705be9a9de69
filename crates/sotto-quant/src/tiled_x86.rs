//! x86-64 kernels over [`crate::QuantTiles`] (layout in `tiled.rs`): 16 weight rows per
//! group, each in its own i32/f32 lane, all input rows against every load.
//!
//! AVX-512 VNNI: `vpdpbusd` takes unsigned weight codes (q8_0 stored `^ 0x80`) times signed
//! activation bytes, and the codes' offset (8, 16 or 128) comes off once per block as
//! `offset · Σq_act`, exact in i32. AVX2 (16 registers) does each group as two halves of
//! 8 rows and at most 4 input rows per pass (10 for q8_0), with `vpmaddubsw` (for q8_0 on
//! the signed values, to keep its i16 pair sums from saturating).

use std::arch::x86_64::*;

use crate::tiled::{parts, QuantActs, GROUP_ROWS};
use crate::x86::bits_to_bytes;
use crate::QuantType;

const QK: usize = QuantType::BLOCK;
const NO: usize = usize::MAX;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q5_0: u8 = 2;
const Q5_1: u8 = 3;
const Q8_0: u8 = 4;

const fn qtype(t: u8) -> QuantType {
    match t {
        Q4_0 => QuantType::Q4_0,
        Q4_1 => QuantType::Q4_1,
        Q5_0 => QuantType::Q5_0,
        Q5_1 => QuantType::Q5_1,
        _ => QuantType::Q8_0,
    }
}

/// One pass's activation rows: element (block b, row i) at `b·m + i`.
#[derive(Clone, Copy)]
struct Acts {
    q: *const i8,
    d: *const f32,
    sum: *const i32,
    s: *const f32,
    m: usize,
}

#[inline]
unsafe fn dword(p: *const i8) -> i32 {
    // SAFETY: the caller guarantees 4 readable bytes.
    unsafe { p.cast::<i32>().read_unaligned() }
}

#[inline]
unsafe fn qword(p: *const u8) -> u64 {
    // SAFETY: the caller guarantees 8 readable bytes.
    u64::from_le(unsafe { p.cast::<u64>().read_unaligned() })
}

/// Groups `0..ng` of `w` against the M activation rows of `a`, AVX-512 VNNI.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI, AVX2, FMA, F16C; `w` holds `ng` groups of `nb` blocks of type T;
/// `a` holds `nb` blocks of ≥ M rows; `out` rows i < M hold `16·ng` values `ldo` apart.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn kernel_vnni<const T: u8, const M: usize>(
    w: *const u8,
    ng: usize,
    nb: usize,
    a: Acts,
    out: *mut f32,
    ldo: usize,
) {
    let t = qtype(T);
    let (mo, qho, qso) = parts(t);
    let bb = GROUP_ROWS * t.block_bytes();
    let off: i32 = match T {
        Q4_0 => 8,
        Q5_0 => 16,
        Q8_0 => 128,
        _ => 0,
    };
    let (low4, bit4) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x10));
    // SAFETY (whole body): every pointer stays inside the extents the caller guarantees.
    unsafe {
        for g in 0..ng {
            let mut acc = [_mm512_setzero_ps(); M];
            for b in 0..nb {
                let blk = w.add((g * nb + b) * bb);
                let e0 = b * a.m;
                let aq = a.q.add(e0 * QK);
                let mut ia = [_mm512_setzero_si512(); M];
                if off != 0 {
                    for (i, v) in ia.iter_mut().enumerate() {
                        *v = _mm512_set1_epi32(-off * *a.sum.add(e0 + i));
                    }
                }
                if T == Q8_0 {
                    for c in 0..8 {
                        let v = _mm512_loadu_si512(blk.add(qso + 64 * c).cast());
                        for (i, s) in ia.iter_mut().enumerate() {
                            let x = _mm512_set1_epi32(dword(aq.add(i * QK + 4 * c)));
                            *s = _mm512_dpbusd_epi32(*s, v, x);
                        }
                    }
                } else {
                    for c in 0..4 {
                        let v = _mm512_loadu_si512(blk.add(qso + 64 * c).cast());
                        let mut lo = _mm512_and_si512(v, low4);
                        let mut hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                        if qho != NO {
                            let (kl, kh) = (
                                qword(blk.add(qho + 16 * c)),
                                qword(blk.add(qho + 16 * c + 8)),
                            );
                            lo = _mm512_mask_add_epi8(lo, kl, lo, bit4);
                            hi = _mm512_mask_add_epi8(hi, kh, hi, bit4);
                        }
                        for (i, s) in ia.iter_mut().enumerate() {
                            let xl = _mm512_set1_epi32(dword(aq.add(i * QK + 4 * c)));
                            let xh = _mm512_set1_epi32(dword(aq.add(i * QK + 16 + 4 * c)));
                            *s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(*s, lo, xl), hi, xh);
                        }
                    }
                }
                let dw = _mm512_cvtph_ps(_mm256_loadu_si256(blk.cast()));
                for (i, (acc_i, s)) in acc.iter_mut().zip(&ia).enumerate() {
                    let d = _mm512_mul_ps(dw, _mm512_set1_ps(*a.d.add(e0 + i)));
                    *acc_i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*s), d, *acc_i);
                }
                if mo != NO {
                    let mw = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(mo).cast()));
                    for (i, acc_i) in acc.iter_mut().enumerate() {
                        *acc_i = _mm512_fmadd_ps(mw, _mm512_set1_ps(*a.s.add(e0 + i)), *acc_i);
                    }
                }
            }
            for (i, acc_i) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.add(i * ldo + g * GROUP_ROWS), *acc_i);
            }
        }
    }
}

/// Blocks of a group the AVX2 kernels request ahead of the one they multiply (measured
/// against 2 and 8 on Zen 3: 4 gained most for one row and five).
const BLOCKS_AHEAD: usize = 4;

/// Requests the lines of the block [`BLOCKS_AHEAD`] on from `blk` (`bb` bytes a block):
/// the AVX2 kernels' first half reads every line of a block. Past the data a prefetch is
/// a hint that never faults.
#[inline]
#[target_feature(enable = "avx2")]
fn request_ahead(blk: *const u8, bb: usize) {
    let ahead = blk.wrapping_add(BLOCKS_AHEAD * bb);
    for l in (0..bb).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(l).cast());
    }
}

/// As [`kernel_vnni`] on AVX2: per group, two halves of 8 rows.
///
/// # Safety
/// AVX2, FMA, F16C; extents as for [`kernel_vnni`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn kernel_avx2<const T: u8, const M: usize>(
    w: *const u8,
    ng: usize,
    nb: usize,
    a: Acts,
    out: *mut f32,
    ldo: usize,
) {
    let t = qtype(T);
    let (mo, qho, qso) = parts(t);
    let bb = GROUP_ROWS * t.block_bytes();
    let off: i32 = match T {
        Q4_0 => 8,
        Q5_0 => 16,
        _ => 0,
    };
    let (low4, bit4) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x10));
    let (ones, flip) = (_mm256_set1_epi16(1), _mm256_set1_epi8(-128));
    // SAFETY (whole body): every pointer stays inside the extents the caller guarantees.
    unsafe {
        for g in 0..ng {
            for h in 0..2 {
                let mut acc = [_mm256_setzero_ps(); M];
                for b in 0..nb {
                    let blk = w.add((g * nb + b) * bb);
                    let e0 = b * a.m;
                    let aq = a.q.add(e0 * QK);
                    let mut ia = [_mm256_setzero_si256(); M];
                    if h == 0 {
                        request_ahead(blk, bb);
                    }
                    if off != 0 {
                        for (i, v) in ia.iter_mut().enumerate() {
                            *v = _mm256_set1_epi32(-off * *a.sum.add(e0 + i));
                        }
                    }
                    if T == Q8_0 {
                        for c in 0..8 {
                            let v = _mm256_loadu_si256(blk.add(qso + 64 * c + 32 * h).cast());
                            let ws = _mm256_xor_si256(v, flip);
                            let aw = _mm256_abs_epi8(ws);
                            for (i, s) in ia.iter_mut().enumerate() {
                                let x = _mm256_set1_epi32(dword(aq.add(i * QK + 4 * c)));
                                let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, ws));
                                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(p, ones));
                            }
                        }
                    } else {
                        for c in 0..4 {
                            let v = _mm256_loadu_si256(blk.add(qso + 64 * c + 32 * h).cast());
                            let mut lo = _mm256_and_si256(v, low4);
                            let mut hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                            if qho != NO {
                                let at = blk.add(qho + 16 * c + 4 * h);
                                let kl = bits_to_bytes(crate::x86::read_u32(at));
                                let kh = bits_to_bytes(crate::x86::read_u32(at.add(8)));
                                lo = _mm256_or_si256(lo, _mm256_and_si256(kl, bit4));
                                hi = _mm256_or_si256(hi, _mm256_and_si256(kh, bit4));
                            }
                            for (i, s) in ia.iter_mut().enumerate() {
                                let xl = _mm256_set1_epi32(dword(aq.add(i * QK + 4 * c)));
                                let xh = _mm256_set1_epi32(dword(aq.add(i * QK + 16 + 4 * c)));
                                // Codes ≤ 31 and |x| ≤ 127: the i16 sums stay below 2^15.
                                let p = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(lo, xl),
                                    _mm256_maddubs_epi16(hi, xh),
                                );
                                *s = _mm256_add_epi32(*s, _mm256_madd_epi16(p, ones));
                            }
                        }
                    }
                    let dw = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16 * h).cast()));
                    for (i, (acc_i, s)) in acc.iter_mut().zip(&ia).enumerate() {
                        let d = _mm256_mul_ps(dw, _mm256_set1_ps(*a.d.add(e0 + i)));
                        *acc_i = _mm256_fmadd_ps(_mm256_cvtepi32_ps(*s), d, *acc_i);
                    }
                    if mo != NO {
                        let mw = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(mo + 16 * h).cast()));
                        for (i, acc_i) in acc.iter_mut().enumerate() {
                            *acc_i = _mm256_fmadd_ps(mw, _mm256_set1_ps(*a.s.add(e0 + i)), *acc_i);
                        }
                    }
                }
                for (i, acc_i) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(i * ldo + g * GROUP_ROWS + 8 * h), *acc_i);
                }
            }
        }
    }
}

/// Pairs of split activations per pass of [`kernel_split_avx2`]: two i32 sums per pair
/// and three shared registers take 13 of the 16.
const SPLIT_PASS: usize = 5;

/// Groups `0..ng` of q8_0 `w` against M pairs of [`crate::QuantActs::split_q8`], each
/// taken whole as one row of 16-bit values (element (block b, pair i) at `b·mp + i`; its
/// rows' sums and scales at `b·2mp + 2i` and `+ 1`):
/// per group, two halves of 8 rows. A chunk's 32 stored codes (`q + 128`, 4 per row) are
/// widened to 16 bits in two registers (rows 0–3, rows 4–7: two lanes per row) and
/// `vpmaddwd`'d against the pair's 4 values there; per block the lanes are paired up
/// (`vphaddd`), the codes' offset comes off as `128·Σx`, and the f32 sums take the
/// block's scales. Every integer is exact: |Σ| ≤ 32·255·32 640 < 2^31. (Regrouping the
/// codes so each row has one lane, with `vpshufb` and `vpermq` per chunk, measured 20%
/// slower.)
///
/// # Safety
/// AVX2, FMA, F16C; `w` holds `ng` q8_0 groups of `nb` blocks; `x` holds `nb` blocks of
/// `mp ≥ M` pairs, `sum` and `d` `nb` blocks of `2mp` rows; `out` rows i < M hold `16·ng`
/// values `ldo` apart.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel_split_avx2<const M: usize>(
    w: *const u8,
    ng: usize,
    nb: usize,
    x: *const i16,
    sum: *const i32,
    d: *const f32,
    mp: usize,
    out: *mut f32,
    ldo: usize,
) {
    let (_, _, qso) = parts(QuantType::Q8_0);
    let bb = GROUP_ROWS * QuantType::Q8_0.block_bytes();
    // SAFETY (whole body): every pointer stays inside the extents the caller guarantees.
    unsafe {
        for g in 0..ng {
            for h in 0..2 {
                // The f32 sums wait in `out` (L1) between blocks, leaving the registers to
                // the i32 ones.
                let o = out.add(g * GROUP_ROWS + 8 * h);
                for i in 0..M {
                    _mm256_storeu_ps(o.add(i * ldo), _mm256_setzero_ps());
                }
                for b in 0..nb {
                    let blk = w.add((g * nb + b) * bb);
                    let e0 = b * mp;
                    let mut lo = [_mm256_setzero_si256(); M];
                    let mut hi = [_mm256_setzero_si256(); M];
                    if h == 0 {
                        request_ahead(blk, bb);
                    }
                    for c in 0..8 {
                        let p = blk.add(qso + 64 * c + 32 * h);
                        let wl = _mm256_cvtepu8_epi16(_mm_loadu_si128(p.cast()));
                        let wh = _mm256_cvtepu8_epi16(_mm_loadu_si128(p.add(16).cast()));
                        for i in 0..M {
                            let at = x.add((e0 + i) * QK + 4 * c);
                            let xv = _mm256_set1_epi64x(at.cast::<i64>().read_unaligned());
                            lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(wl, xv));
                            hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(wh, xv));
                        }
                    }
                    let dw = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(16 * h).cast()));
                    for i in 0..M {
                        // [r0 r1 r4 r5 | r2 r3 r6 r7], then rows in order.
                        let s = _mm256_hadd_epi32(lo[i], hi[i]);
                        let s = _mm256_permute4x64_epi64::<0xD8>(s);
                        // The pair's rows: Σx = 256·Σa + Σb, at the second's scale.
                        let ea = 2 * (e0 + i);
                        let xs = 256 * *sum.add(ea) + *sum.add(ea + 1);
                        let s = _mm256_sub_epi32(s, _mm256_set1_epi32(128 * xs));
                        let scale = _mm256_mul_ps(dw, _mm256_set1_ps(*d.add(ea + 1)));
                        let acc = _mm256_loadu_ps(o.add(i * ldo));
                        let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc);
                        _mm256_storeu_ps(o.add(i * ldo), acc);
                    }
                }
            }
        }
    }
}

/// `out[i·ldo + 16g + l] = row (16g + l) · x̃_i` for the whole q8_0 groups in `data` and
/// the pairs of split activations `acts`, [`SPLIT_PASS`] pairs per pass.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `data` is whole q8_0 groups of rows of `k > 0` values;
/// `acts` are [`crate::QuantActs::split_q8`]'s for `k`; `out` holds `[acts.m / 2, ldo]`
/// with `ldo ≥ 16 · groups`.
pub(crate) unsafe fn matmul_split(
    k: usize,
    data: &[u8],
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) {
    let nb = k / QK;
    let ng = data.len() / (GROUP_ROWS * QuantType::Q8_0.row_bytes(k));
    let mp = acts.m() / 2;
    let mut i0 = 0;
    while i0 < mp {
        let g = (mp - i0).min(SPLIT_PASS);
        // SAFETY: i0 < mp, so the offsets stay inside the [nb, mp] wide rows, the [nb, 2mp]
        // sums and scales and the [mp, ldo] output; the kernel reads pairs i0..i0 + g only.
        unsafe {
            let (x, xs, xd) = (
                acts.wide.as_ptr().add(i0 * QK),
                acts.sum.as_ptr().add(2 * i0),
                acts.d.as_ptr().add(2 * i0),
            );
            let (w, o) = (data.as_ptr(), out.as_mut_ptr().add(i0 * ldo));
            match g {
                1 => kernel_split_avx2::<1>(w, ng, nb, x, xs, xd, mp, o, ldo),
                2 => kernel_split_avx2::<2>(w, ng, nb, x, xs, xd, mp, o, ldo),
                3 => kernel_split_avx2::<3>(w, ng, nb, x, xs, xd, mp, o, ldo),
                4 => kernel_split_avx2::<4>(w, ng, nb, x, xs, xd, mp, o, ldo),
                _ => kernel_split_avx2::<5>(w, ng, nb, x, xs, xd, mp, o, ldo),
            }
        }
        i0 += g;
    }
}

/// Calls `$f::<T, G>(args)` for the run-time type `$t` and pass size `$g`.
macro_rules! call {
    ($f:ident, $t:expr, $g:expr, [$($m:literal),*], $args:tt) => {{
        macro_rules! by_m {
            ($T:ident) => {
                match $g {
                    $($m => $f::<$T, $m> $args,)*
                    _ => unreachable!("pass sizes are capped"),
                }
            };
        }
        match $t {
            QuantType::Q4_0 => by_m!(Q4_0),
            QuantType::Q4_1 => by_m!(Q4_1),
            QuantType::Q5_0 => by_m!(Q5_0),
            QuantType::Q5_1 => by_m!(Q5_1),
            QuantType::Q8_0 => by_m!(Q8_0),
            QuantType::Q8_1 => unreachable!("not a weight type"),
        }
    }};
}

/// `out[i·ldo + 16g + l] = row (16g + l) · act_i` for the whole groups in `data`.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C, and AVX-512 F/BW/VL/VNNI when `vnni`; `data` is whole
/// groups of `t` rows of `k > 0` values; `acts` were quantized for `t` and `k`; `out`
/// holds `[acts.m, ldo]` with `ldo ≥ 16 · groups`.
pub(crate) unsafe fn matmul(
    vnni: bool,
    t: QuantType,
    k: usize,
    data: &[u8],
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) {
    let nb = k / QK;
    let ng = data.len() / (GROUP_ROWS * t.row_bytes(k));
    // Ten rows (twenty VNNI accumulators) still fit the 32 registers: five beams with
    // split activations (see `sotto_compute`'s screened vocabulary) in one pass.
    // AVX2's q8_0 kernel takes ten rows too (its f32 sums wait in L1 between blocks):
    // the split rows of five beams in one pass over the plane instead of three.
    let max_pass = if vnni || t == QuantType::Q8_0 { 10 } else { 4 };
    let w = data.as_ptr();
    let mut i0 = 0;
    while i0 < acts.m() {
        let g = (acts.m() - i0).min(max_pass);
        // SAFETY: i0 < m, so the offsets stay inside the [nb, m] activation parts and the
        // [m, ldo] output; the kernels read rows i0..i0 + g only.
        unsafe {
            let a = Acts {
                q: acts.q.as_ptr().add(i0 * QK),
                d: acts.d.as_ptr().add(i0),
                sum: acts.sum.as_ptr().add(i0),
                s: acts.s.as_ptr().add(i0),
                m: acts.m(),
            };
            let o = out.as_mut_ptr().add(i0 * ldo);
            if vnni {
                call!(
                    kernel_vnni,
                    t,
                    g,
                    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
                    (w, ng, nb, a, o, ldo)
                );
            } else if t == QuantType::Q8_0 && g > 4 {
                match g {
                    5 => kernel_avx2::<Q8_0, 5>(w, ng, nb, a, o, ldo),
                    6 => kernel_avx2::<Q8_0, 6>(w, ng, nb, a, o, ldo),
                    7 => kernel_avx2::<Q8_0, 7>(w, ng, nb, a, o, ldo),
                    8 => kernel_avx2::<Q8_0, 8>(w, ng, nb, a, o, ldo),
                    9 => kernel_avx2::<Q8_0, 9>(w, ng, nb, a, o, ldo),
                    _ => kernel_avx2::<Q8_0, 10>(w, ng, nb, a, o, ldo),
                }
            } else {
                call!(kernel_avx2, t, g, [1, 2, 3, 4], (w, ng, nb, a, o, ldo));
            }
        }
        i0 += g;
    }
}
