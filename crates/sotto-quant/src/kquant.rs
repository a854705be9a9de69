//! ggml's k-quants (`q2_K` … `q6_K`), which whisper.cpp's `whisper-quantize` also writes
//! (for models whose rows are whole super-blocks: base and larger). sotto reads them and
//! has no kernels of their own: each super-block of 256 values becomes blocks of the
//! nearest type that has kernels ([`KQuant::target`]).
//!
//! | type | bytes | sub-blocks | value | becomes |
//! |---|---|---|---|---|
//! | q2_K | 84 | 16 × 16 | `d·s·q − dmin·m`, q 2 bits, s and m 4 bits | q8_0 |
//! | q3_K | 110 | 16 × 16 | `d·(s − 32)·(q − 4)`, q 3 bits, s 6 bits | q8_0 |
//! | q4_K | 144 | 8 × 32 | `d·s·q − dmin·m`, q 4 bits, s and m 6 bits | q4_1 |
//! | q5_K | 176 | 8 × 32 | `d·s·q − dmin·m`, q 5 bits, s and m 6 bits | q5_1 |
//! | q6_K | 210 | 16 × 16 | `d·s·(q − 32)`, q 6 bits, s 8 bits signed | q8_0 |
//!
//! A q4_K or q5_K sub-block of 32 is a q4_1 or q5_1 block (`q·d + m`) whose `d = d·s` and
//! `m = −dmin·m` are rounded to f16: the same codes, each value within 2⁻¹¹ of a quant
//! step of its own. The others are dequantized and rounded to q8_0's 8 bits, within half
//! an 8-bit step: a small fraction of their own steps (2 to 6 bits).
//!
//! [`KQuant::dequantize_row`] is ggml's `dequantize_row_*`, value for value.

use half::f16;

use crate::QuantType;

/// Values per super-block.
pub const QK_K: usize = 256;

/// A ggml k-quant type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum KQuant {
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
}

impl KQuant {
    pub const ALL: [KQuant; 5] = [
        KQuant::Q2_K,
        KQuant::Q3_K,
        KQuant::Q4_K,
        KQuant::Q5_K,
        KQuant::Q6_K,
    ];

    /// ggml's type id (`GGML_TYPE_Q2_K` = 10 … `GGML_TYPE_Q6_K` = 14).
    pub fn from_ggml_type_id(id: i32) -> Option<Self> {
        Self::ALL
            .get(usize::try_from(id).ok()?.checked_sub(10)?)
            .copied()
    }

    pub fn ggml_type_id(self) -> i32 {
        10 + Self::ALL.iter().position(|&k| k == self).unwrap() as i32
    }

    pub fn name(self) -> &'static str {
        match self {
            KQuant::Q2_K => "q2_K",
            KQuant::Q3_K => "q3_K",
            KQuant::Q4_K => "q4_K",
            KQuant::Q5_K => "q5_K",
            KQuant::Q6_K => "q6_K",
        }
    }

    /// Bytes of one super-block of [`QK_K`] values.
    pub fn block_bytes(self) -> usize {
        match self {
            KQuant::Q2_K => 84,
            KQuant::Q3_K => 110,
            KQuant::Q4_K => 144,
            KQuant::Q5_K => 176,
            KQuant::Q6_K => 210,
        }
    }

    /// The type its values run as.
    pub fn target(self) -> QuantType {
        match self {
            KQuant::Q4_K => QuantType::Q4_1,
            KQuant::Q5_K => QuantType::Q5_1,
            KQuant::Q2_K | KQuant::Q3_K | KQuant::Q6_K => QuantType::Q8_0,
        }
    }

    /// The values of whole super-blocks `q` into `out` (256 per block).
    pub fn dequantize_row(self, q: &[u8], out: &mut [f32]) {
        self.blocks(q, out.len());
        for (b, y) in q
            .chunks_exact(self.block_bytes())
            .zip(out.chunks_exact_mut(QK_K))
        {
            match self {
                KQuant::Q2_K => q2_k(b, y),
                KQuant::Q3_K => q3_k(b, y),
                KQuant::Q4_K => q4_k(b, y),
                KQuant::Q5_K => q5_k(b, y),
                KQuant::Q6_K => q6_k(b, y),
            }
        }
    }

    /// Whole super-blocks `q` as [`Self::target`] blocks in `out` (its exact size), on
    /// all of rayon's threads.
    pub fn transcode_row(self, q: &[u8], out: &mut [u8]) {
        use rayon::prelude::*;
        let target = self.target();
        let nb = self.blocks(q, QK_K * (q.len() / self.block_bytes()));
        assert_eq!(out.len(), target.row_bytes(nb * QK_K), "output size");
        // 64 super-blocks a task: 16 384 values.
        let (in_chunk, out_chunk) = (64 * self.block_bytes(), 64 * target.row_bytes(QK_K));
        q.par_chunks(in_chunk)
            .zip(out.par_chunks_mut(out_chunk))
            .for_each(|(q, out)| self.transcode_blocks(q, out));
    }

    fn transcode_blocks(self, q: &[u8], out: &mut [u8]) {
        let target = self.target();
        let out_block = target.row_bytes(QK_K);
        let mut values = [0f32; QK_K];
        for (b, o) in q
            .chunks_exact(self.block_bytes())
            .zip(out.chunks_exact_mut(out_block))
        {
            match self {
                KQuant::Q4_K => k_as_1(b, o, false),
                KQuant::Q5_K => k_as_1(b, o, true),
                _ => {
                    self.dequantize_row(b, &mut values);
                    crate::quantize_row(target, &values, o);
                }
            }
        }
    }

    fn blocks(self, q: &[u8], values: usize) -> usize {
        assert!(
            values.is_multiple_of(QK_K),
            "{values} values: not whole super-blocks"
        );
        let nb = values / QK_K;
        assert_eq!(q.len(), nb * self.block_bytes(), "{} bytes", self.name());
        nb
    }
}

fn half_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Sub-block `j`'s 6-bit scale and min from q4_K's and q5_K's 12 packed bytes.
fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// `scales[16], qs[64], d, dmin`.
fn q2_k(b: &[u8], y: &mut [f32]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (half_at(b, 80), half_at(b, 82));
    let mut out = y.iter_mut();
    for (half, q) in qs.chunks_exact(32).enumerate() {
        for j in 0..4 {
            let shift = 2 * j;
            for (k, q) in q.chunks_exact(16).enumerate() {
                let sc = scales[8 * half + 2 * j + k];
                let (dl, ml) = (d * f32::from(sc & 0xf), dmin * f32::from(sc >> 4));
                for &q in q {
                    *out.next().unwrap() = dl * f32::from((q >> shift) & 3) - ml;
                }
            }
        }
    }
}

/// `hmask[32], qs[64], scales[12], d`.
fn q3_k(b: &[u8], y: &mut [f32]) {
    let (hmask, qs, packed) = (&b[..32], &b[32..96], &b[96..108]);
    let d = half_at(b, 108);
    // Sixteen 6-bit scales: the low 4 bits in bytes 0-7 (two a byte), the high 2 bits in
    // bytes 8-11 (four a byte).
    let mut scales = [0i8; 16];
    for (i, s) in scales.iter_mut().enumerate() {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0xf;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        *s = (low | high << 4) as i8 - 32;
    }
    let mut out = y.iter_mut();
    let mut bit = 0;
    for (half, q) in qs.chunks_exact(32).enumerate() {
        for j in 0..4 {
            let shift = 2 * j;
            for (k, (q, h)) in q.chunks_exact(16).zip(hmask.chunks_exact(16)).enumerate() {
                let dl = d * f32::from(scales[8 * half + 2 * j + k]);
                for (&q, &h) in q.iter().zip(h) {
                    let low = ((q >> shift) & 3) as i8;
                    let v = low - if h & (1 << bit) != 0 { 0 } else { 4 };
                    *out.next().unwrap() = dl * f32::from(v);
                }
            }
            bit += 1;
        }
    }
}

/// `d, dmin, scales[12], qs[128]`.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin, scales, qs) = (half_at(b, 0), half_at(b, 2), &b[4..16], &b[16..144]);
    for (i, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (s1, m1) = scale_min(2 * i, scales);
        let (s2, m2) = scale_min(2 * i + 1, scales);
        let (d1, m1) = (d * f32::from(s1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(s2), dmin * f32::from(m2));
        for (l, &q) in q.iter().enumerate() {
            y[l] = d1 * f32::from(q & 0xf) - m1;
            y[l + 32] = d2 * f32::from(q >> 4) - m2;
        }
    }
}

/// `d, dmin, scales[12], qh[32], qs[128]`.
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin, scales) = (half_at(b, 0), half_at(b, 2), &b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for (i, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
        let (s1, m1) = scale_min(2 * i, scales);
        let (s2, m2) = scale_min(2 * i + 1, scales);
        let (d1, m1) = (d * f32::from(s1), dmin * f32::from(m1));
        let (d2, m2) = (d * f32::from(s2), dmin * f32::from(m2));
        for (l, (&q, &h)) in q.iter().zip(qh).enumerate() {
            let h1 = (h >> (2 * i)) & 1;
            let h2 = (h >> (2 * i + 1)) & 1;
            y[l] = d1 * f32::from((q & 0xf) | h1 << 4) - m1;
            y[l + 32] = d2 * f32::from((q >> 4) | h2 << 4) - m2;
        }
    }
}

/// `ql[128], qh[64], scales[16] (i8), d`.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = half_at(b, 208);
    for half in 0..2 {
        let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
        let sc = &scales[8 * half..];
        let y = &mut y[128 * half..];
        for l in 0..32 {
            let is = l / 16;
            let q = [
                (ql[l] & 0xf) | (qh[l] & 3) << 4,
                (ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4,
                (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4,
                (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4,
            ];
            for (k, q) in q.into_iter().enumerate() {
                let s = f32::from(sc[is + 2 * k] as i8);
                y[l + 32 * k] = d * s * f32::from(q as i8 - 32);
            }
        }
    }
}

/// One q4_1 (or q5_1) block: `d·q + m` from 32 codes.
fn put_block(d: f32, m: f32, codes: &[u8; 32], o: &mut [u8]) {
    o[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    o[2..4].copy_from_slice(&f16::from_f32(m).to_le_bytes());
    let high_bytes = o.len() - 20;
    let (qh, qs) = o[4..].split_at_mut(high_bytes);
    let high = crate::reference::pack(codes, qs);
    if !qh.is_empty() {
        qh.copy_from_slice(&high.to_le_bytes());
    }
}

/// A q4_K super-block as eight q4_1 blocks, or (`fifth`) a q5_K one as eight q5_1 blocks:
/// `d, dmin, scales[12]`, then q5_K's fifth bits `qh[32]`, then `qs[128]`.
fn k_as_1(b: &[u8], o: &mut [u8], fifth: bool) {
    let (d, dmin, scales) = (half_at(b, 0), half_at(b, 2), &b[4..16]);
    let (qh, qs) = match fifth {
        true => (Some(&b[16..48]), &b[48..176]),
        false => (None, &b[16..144]),
    };
    let mut blocks = o.chunks_exact_mut(o.len() / 8);
    for (i, q) in qs.chunks_exact(32).enumerate() {
        for (j, shift) in [(2 * i, 0), (2 * i + 1, 4)] {
            let (s, m) = scale_min(j, scales);
            let high = |l: usize| qh.map_or(0, |h| ((h[l] >> j) & 1) << 4);
            let codes = std::array::from_fn(|l| (q[l] >> shift) & 0xf | high(l));
            let block = blocks.next().unwrap();
            put_block(d * f32::from(s), -(dmin * f32::from(m)), &codes, block);
        }
    }
}
