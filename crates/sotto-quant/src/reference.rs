//! Scalar quantize / dequantize / dot, operation for operation as ggml's reference C
//! (`quantize_row_*_ref`, `dequantize_row_*`, the generic `ggml_vec_dot_*`), so the bytes
//! match whisper.cpp's. Callers have checked every length.

use half::f16;

use crate::QuantType;

const QK: usize = QuantType::BLOCK;

#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline]
fn put_f16(b: &mut [u8], at: usize, v: f32) {
    // Round to nearest even, as ggml's GGML_FP32_TO_FP16 (F16C `_cvtss_sh(x, 0)`).
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

#[inline]
fn qh_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn quantize(t: QuantType, x: &[f32], out: &mut [u8]) {
    let blocks = x
        .chunks_exact(QK)
        .zip(out.chunks_exact_mut(t.block_bytes()));
    match t {
        QuantType::Q4_0 => blocks.for_each(|(x, y)| q4_0(x, y)),
        QuantType::Q4_1 => blocks.for_each(|(x, y)| q4_1(x, y)),
        QuantType::Q5_0 => blocks.for_each(|(x, y)| q5_0(x, y)),
        QuantType::Q5_1 => blocks.for_each(|(x, y)| q5_1(x, y)),
        QuantType::Q8_0 => blocks.for_each(|(x, y)| q8_0(x, y)),
        QuantType::Q8_1 => blocks.for_each(|(x, y)| q8_1(x, y)),
    }
}

/// The value of largest magnitude, keeping its sign (the first one on ties).
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Packs 32 codes (each < 16 after masking) into 16 bytes; returns the fifth bits as `qh`.
#[inline]
pub(crate) fn pack(codes: &[u8; QK], qs: &mut [u8]) -> u32 {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (a, b) = (codes[j], codes[j + QK / 2]);
        qs[j] = (a & 0x0F) | ((b & 0x0F) << 4);
        qh |= u32::from((a & 0x10) >> 4) << j;
        qh |= u32::from((b & 0x10) >> 4) << (j + QK / 2);
    }
    qh
}

fn q4_0(x: &[f32], y: &mut [u8]) {
    let d = signed_absmax(x) / -8.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    // C's `(int8_t)` truncates; `as i8` does too for these in-range values.
    let codes: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 8.5) as i8).min(15) as u8);
    pack(&codes, &mut y[2..18]);
}

fn q4_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    let codes: [u8; QK] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as i8).min(15) as u8);
    pack(&codes, &mut y[4..20]);
}

fn q5_0(x: &[f32], y: &mut [u8]) {
    let d = signed_absmax(x) / -16.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    let codes: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 16.5) as i8).min(31) as u8);
    let qh = pack(&codes, &mut y[6..22]);
    y[2..6].copy_from_slice(&qh.to_le_bytes());
}

fn q5_1(x: &[f32], y: &mut [u8]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    put_f16(y, 2, min);
    let codes: [u8; QK] = std::array::from_fn(|j| ((x[j] - min) * id + 0.5) as u8);
    let qh = pack(&codes, &mut y[8..24]);
    y[4..8].copy_from_slice(&qh.to_le_bytes());
}

/// `roundf` (halves away from zero, as `f32::round`) for |x| < 2^23, in a form that
/// vectorizes: adding the largest f32 below ½ rounds x + ½ up exactly when x's fraction
/// is ½ or more.
#[inline(always)]
fn round_away(x: f32) -> f32 {
    (x + 0.49999997f32.copysign(x)).trunc()
}

/// The largest |x|, NaN ignored as `f32::max` ignores it, as an integer max over the
/// bit patterns (non-negative floats order as their bits), which vectorizes.
#[inline(always)]
fn abs_max(x: &[f32]) -> f32 {
    let key = |v: &f32| {
        let b = v.to_bits() & 0x7fff_ffff;
        if b > 0x7f80_0000 {
            0
        } else {
            b
        }
    };
    // Sixteen lanes, then halved in a tree: a plain fold ended in sixteen extracts and
    // compares per block.
    let mut lanes = [0u32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = (*l).max(key(v));
        }
    }
    for (l, v) in lanes.iter_mut().zip(chunks.remainder()) {
        *l = (*l).max(key(v));
    }
    let mut w = 8;
    while w > 0 {
        for i in 0..w {
            lanes[i] = lanes[i].max(lanes[i + w]);
        }
        w /= 2;
    }
    f32::from_bits(lanes[0])
}

/// `x as i8` (saturating, NaN to 0) for a rounded (integer-valued) x, read from the low
/// bits of x + 1.5·2^23 (exact for integers that small): integer ops that vectorize,
/// where a float-to-int cast checks every lane.
#[inline(always)]
fn to_i8(x: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    let c = x.clamp(-128.0, 127.0);
    if c.is_nan() {
        0
    } else {
        (c + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits()) as i8
    }
}

#[inline(always)]
pub(crate) fn q8_0(x: &[f32], y: &mut [u8]) {
    let amax = abs_max(x);
    let d = amax / 127.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    for (q, &v) in y[2..34].iter_mut().zip(x) {
        *q = to_i8(round_away(v * id)) as u8;
    }
}

#[inline(always)]
pub(crate) fn q8_1(x: &[f32], y: &mut [u8]) {
    let amax = abs_max(x);
    let d = amax / 127.0;
    let id = inverse(d);
    put_f16(y, 0, d);
    let mut sum = 0i32;
    for (q, &v) in y[4..36].iter_mut().zip(x) {
        let r = to_i8(round_away(v * id));
        sum += i32::from(r);
        *q = r as u8;
    }
    put_f16(y, 2, sum as f32 * d);
}

pub(crate) fn dequantize(t: QuantType, q: &[u8], out: &mut [f32]) {
    for (b, y) in q
        .chunks_exact(t.block_bytes())
        .zip(out.chunks_exact_mut(QK))
    {
        let d = f16_at(b, 0);
        match t {
            QuantType::Q8_0 => {
                for (y, &v) in y.iter_mut().zip(&b[2..34]) {
                    *y = f32::from(v as i8) * d;
                }
            }
            QuantType::Q8_1 => {
                for (y, &v) in y.iter_mut().zip(&b[4..36]) {
                    *y = f32::from(v as i8) * d;
                }
            }
            _ => {
                let codes = codes(t, b);
                let m = if matches!(t, QuantType::Q4_1 | QuantType::Q5_1) {
                    f16_at(b, 2)
                } else {
                    0.0
                };
                for (y, &c) in y.iter_mut().zip(&codes) {
                    *y = match t {
                        QuantType::Q4_1 | QuantType::Q5_1 => f32::from(c) * d + m,
                        _ => f32::from(c) * d,
                    };
                }
            }
        }
    }
}

/// The 32 signed (q4_0, q5_0: offset removed) or unsigned (q4_1, q5_1) codes of a block.
#[inline]
pub(crate) fn codes(t: QuantType, b: &[u8]) -> [i8; QK] {
    let (qs, qh, offset) = match t {
        QuantType::Q4_0 => (&b[2..18], 0, 8),
        QuantType::Q4_1 => (&b[4..20], 0, 0),
        QuantType::Q5_0 => (&b[6..22], qh_at(b, 2), 16),
        QuantType::Q5_1 => (&b[8..24], qh_at(b, 4), 0),
        QuantType::Q8_0 | QuantType::Q8_1 => unreachable!("8-bit blocks hold bytes, not codes"),
    };
    std::array::from_fn(|j| {
        let nib = if j < QK / 2 {
            qs[j] & 0x0F
        } else {
            qs[j - QK / 2] >> 4
        };
        let high = (((qh >> j) & 1) << 4) as u8;
        ((nib | high) as i32 - offset) as i8
    })
}

/// `nb` blocks of weights `w` against activations `a` (q8_0 or q8_1 blocks).
pub(crate) fn vec_dot(t: QuantType, nb: usize, w: &[u8], a: &[u8]) -> f32 {
    let (wb, ab) = (t.block_bytes(), t.activation_type().block_bytes());
    let mut sumf = 0.0f32;
    for i in 0..nb {
        let x = &w[i * wb..(i + 1) * wb];
        let y = &a[i * ab..(i + 1) * ab];
        let dx = f16_at(x, 0);
        let dy = f16_at(y, 0);
        match t {
            QuantType::Q8_0 => {
                let sumi: i32 = x[2..34]
                    .iter()
                    .zip(&y[2..34])
                    .map(|(&p, &q)| i32::from(p as i8) * i32::from(q as i8))
                    .sum();
                sumf += sumi as f32 * (dx * dy);
            }
            QuantType::Q4_0 | QuantType::Q5_0 => {
                let sumi = code_dot(&codes(t, x), &y[2..34]);
                sumf += if t == QuantType::Q4_0 {
                    sumi as f32 * dx * dy
                } else {
                    (dx * dy) * sumi as f32
                };
            }
            QuantType::Q4_1 | QuantType::Q5_1 => {
                let sumi = code_dot(&codes(t, x), &y[4..36]);
                let (m, s) = (f16_at(x, 2), f16_at(y, 2));
                sumf += (dx * dy) * sumi as f32 + m * s;
            }
            QuantType::Q8_1 => unreachable!("checked by the caller"),
        }
    }
    sumf
}

#[inline]
fn code_dot(c: &[i8; QK], y: &[u8]) -> i32 {
    c.iter()
        .zip(y)
        .map(|(&p, &q)| i32::from(p) * i32::from(q as i8))
        .sum()
}
