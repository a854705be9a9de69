//! Quantized weight rows re-laid out in groups for products with a few input rows (the
//! decoder), and the kernels over them.
//!
//! A row-major product reads one weight row per output and needs a horizontal sum per
//! (row, input) pair. Here [`GROUP_ROWS`] = 16 rows are interleaved so that one 64-byte
//! load holds 4 bytes of each of the 16 rows: VNNI's `vpdpbusd` against a broadcast
//! dword of activations then adds one 4-element dot into each row's own i32 lane. The 16
//! lanes are 16 outputs, so there is nothing to reduce across lanes, every input row
//! reuses each load, and a thread reads one contiguous stream.
//!
//! Layout of group `g` (rows `16g..16g + 16`, rows past `n_out` zero): its blocks one
//! after another, block `b` (values `32b..32b + 32` of every row) being `16 ×
//! t.block_bytes()` bytes:
//!
//! | part | bytes | content |
//! |---|---|---|
//! | `d` | 32 | the 16 rows' f16 scales |
//! | `m` (q4_1, q5_1) | 32 | the 16 rows' f16 offsets |
//! | `qh` (q5_0, q5_1) | 64 | for chunk c = 0..4: a u64 whose bit `4l + j` is the fifth bit of element `4c + j` of row `l`, then a u64 for element `16 + 4c + j` |
//! | `qs` | 256 or 512 | chunk c: 4 bytes per row (row l at `4l`); nibble types hold `qs[4c..4c + 4]`, q8_0 holds `qs[4c..4c + 4] ^ 0x80` (unsigned, for `vpdpbusd`) |
//!
//! Every original byte is kept (the q8_0 flip and the qh bit shuffle are bijections),
//! so [`QuantTiles::row_bytes_into`] gives back the ggml row exactly.

use std::ops::Range;

use rayon::prelude::*;

use half::f16;

use crate::{reference, Isa, QuantType};

/// Weight rows per group: one 16-lane register of i32 or f32 outputs.
pub const GROUP_ROWS: usize = 16;

const QK: usize = QuantType::BLOCK;
const R: usize = GROUP_ROWS;

/// Byte offsets inside one group block: (`m`, `qh`, `qs`), `usize::MAX` where absent.
pub(crate) const fn parts(t: QuantType) -> (usize, usize, usize) {
    const NO: usize = usize::MAX;
    match t {
        QuantType::Q4_0 => (NO, NO, 32),
        QuantType::Q4_1 => (32, NO, 64),
        QuantType::Q5_0 => (NO, 32, 96),
        QuantType::Q5_1 => (32, 64, 128),
        QuantType::Q8_0 | QuantType::Q8_1 => (NO, NO, 32),
    }
}

/// `(m, qh, qs)` offsets inside an original ggml block.
const fn ggml_parts(t: QuantType) -> (usize, usize, usize) {
    match t {
        QuantType::Q4_0 => (0, 0, 2),
        QuantType::Q4_1 => (2, 0, 4),
        QuantType::Q5_0 => (0, 2, 6),
        QuantType::Q5_1 => (2, 4, 8),
        QuantType::Q8_0 => (0, 0, 2),
        QuantType::Q8_1 => (0, 0, 4),
    }
}

/// `n_out × n_in` ggml-quantized weights in groups of [`GROUP_ROWS`] rows (layout in the
/// module docs).
#[derive(Clone, Debug)]
pub struct QuantTiles {
    t: QuantType,
    data: Vec<u8>,
    n_out: usize,
    n_in: usize,
}

impl QuantTiles {
    /// Groups `rows` (`n_out` ggml rows of `n_in` values, `t.row_bytes(n_in)` bytes each).
    /// Panics (a contract, as elsewhere in this crate) when `t` is q8_1, `n_in` is not a
    /// whole number of blocks, or `rows` has another length.
    pub fn new(t: QuantType, rows: &[u8], n_out: usize, n_in: usize) -> Self {
        assert!(t != QuantType::Q8_1, "q8_1 is not a weight type");
        assert!(n_in > 0, "QuantTiles: rows of 0 values");
        let rb = t.row_bytes(n_in);
        assert!(
            rows.len() == n_out * rb,
            "QuantTiles: {} bytes for {n_out} {t} rows of {n_in} values (expected {})",
            rows.len(),
            n_out * rb
        );
        let mut tiles = Self {
            t,
            data: vec![0u8; n_out.div_ceil(R) * R * rb],
            n_out,
            n_in,
        };
        let (bb, gbb) = (t.block_bytes(), tiles.group_block_bytes());
        // Groups in parallel: a vocabulary's worth (~28 MB) regroups at load.
        tiles
            .data
            .par_chunks_mut(R * rb)
            .zip(rows.par_chunks(R * rb))
            .for_each(|(group, src_rows)| {
                for (l, row) in src_rows.chunks_exact(rb).enumerate() {
                    for (b, src) in row.chunks_exact(bb).enumerate() {
                        scatter(t, src, &mut group[b * gbb..(b + 1) * gbb], l);
                    }
                }
            });
        tiles
    }

    /// Two planes of `n_out` rows built together, group by group in parallel, with no
    /// row-major copy of either: `fill(scratch, g, a, b)` writes the ggml rows `16g..` (at
    /// most [`GROUP_ROWS`], fewer in a last partial group; `t.row_bytes(n_in)` bytes each,
    /// row-major, zeroed first) of the two planes into `a` and `b` and returns what it
    /// found out about them, one value per group, in group order; `scratch` comes from
    /// `init`, once per worker. Panics as [`Self::new`].
    pub fn pair_from_groups<S, X: Send>(
        t: QuantType,
        n_out: usize,
        n_in: usize,
        init: impl Fn() -> S + Sync + Send,
        fill: impl Fn(&mut S, usize, &mut [u8], &mut [u8]) -> X + Sync + Send,
    ) -> (Self, Self, Vec<X>) {
        assert!(t != QuantType::Q8_1, "q8_1 is not a weight type");
        assert!(n_in > 0, "QuantTiles: rows of 0 values");
        let rb = t.row_bytes(n_in);
        let plane = || Self {
            t,
            data: vec![0u8; n_out.div_ceil(R) * R * rb],
            n_out,
            n_in,
        };
        let (mut a, mut b) = (plane(), plane());
        let (bb, gbb) = (t.block_bytes(), a.group_block_bytes());
        let found = a
            .data
            .par_chunks_mut(R * rb)
            .zip(b.data.par_chunks_mut(R * rb))
            .enumerate()
            .map_init(
                || (vec![0u8; R * rb], vec![0u8; R * rb], init()),
                |(ra, rb_, scratch), (g, (ga, gb))| {
                    let rows = R.min(n_out - g * R) * rb;
                    let (ra, rb_) = (&mut ra[..rows], &mut rb_[..rows]);
                    ra.fill(0);
                    rb_.fill(0);
                    let x = fill(scratch, g, ra, rb_);
                    for (src, group) in [(&*ra, ga), (&*rb_, gb)] {
                        for (l, row) in src.chunks_exact(rb).enumerate() {
                            for (blk, s) in row.chunks_exact(bb).enumerate() {
                                scatter(t, s, &mut group[blk * gbb..(blk + 1) * gbb], l);
                            }
                        }
                    }
                    x
                },
            )
            .collect();
        (a, b, found)
    }

    pub fn quant_type(&self) -> QuantType {
        self.t
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// Number of groups, `ceil(n_out / GROUP_ROWS)`.
    pub fn groups(&self) -> usize {
        self.n_out.div_ceil(R)
    }

    /// Bytes of one group block (16 rows × 32 values).
    pub fn group_block_bytes(&self) -> usize {
        R * self.t.block_bytes()
    }

    /// Bytes of one group (16 whole rows).
    pub fn group_bytes(&self) -> usize {
        R * self.t.row_bytes(self.n_in)
    }

    /// The bytes of `groups` (checked by the caller to lie inside).
    fn groups_data(&self, groups: &Range<usize>) -> &[u8] {
        &self.data[groups.start * self.group_bytes()..groups.end * self.group_bytes()]
    }

    /// All groups. Shape: [groups(), group_bytes()].
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Writes ggml row `r` (`t.row_bytes(n_in)` bytes), exactly the bytes it was built from.
    /// Panics when `r ≥ n_out` or `out` has another length.
    pub fn row_bytes_into(&self, r: usize, out: &mut [u8]) {
        assert!(r < self.n_out, "row {r} of {} rows", self.n_out);
        let (bb, gbb) = (self.t.block_bytes(), self.group_block_bytes());
        assert_eq!(out.len(), self.t.row_bytes(self.n_in), "row_bytes_into");
        let group = &self.data[r / R * self.group_bytes()..][..self.group_bytes()];
        for (b, dst) in out.chunks_exact_mut(bb).enumerate() {
            gather(self.t, &group[b * gbb..(b + 1) * gbb], r % R, dst);
        }
    }

    /// Row `r` as f32 (`out.len() == n_in`), as [`QuantTiles::read_f32`] gives it; q8_0
    /// rows straight from the group layout (a screened vocabulary recomputes a few hundred
    /// rows per decoder step this way). Panics when `r ≥ n_out` or `out` has another length.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        assert!(
            r < self.n_out && out.len() == self.n_in,
            "row_f32: row {r} of {}, {} values for {}",
            self.n_out,
            out.len(),
            self.n_in
        );
        if self.t != QuantType::Q8_0 {
            return self.read_f32(r * self.n_in, out);
        }
        let (gbb, l) = (self.group_block_bytes(), r % R);
        let (_, _, qs) = parts(self.t);
        let group = &self.data[r / R * self.group_bytes()..][..self.group_bytes()];
        for (blk, ob) in group.chunks_exact(gbb).zip(out.chunks_exact_mut(QK)) {
            let d = reference::f16_at(blk, 2 * l);
            // The row's 32 codes lie 4 at a time, 64 bytes apart: gathered first, so the
            // conversion below is one vectorized loop rather than eight short ones.
            let mut codes = [0u8; QK];
            for (c, q4) in codes.chunks_exact_mut(4).enumerate() {
                let at = qs + 64 * c + 4 * l;
                q4.copy_from_slice(&blk[at..at + 4]);
            }
            for (o, &b) in ob.iter_mut().zip(&codes) {
                *o = f32::from((b ^ 0x80) as i8) * d;
            }
        }
    }

    /// Copies logical (row-major) elements `start..start + out.len()` into `out` as f32,
    /// each exactly what [`crate::dequantize_row`] gives for the original row. Touches only
    /// the rows in the range. Panics when the range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let (k, end) = (self.n_in, start + out.len());
        assert!(
            end <= self.n_out * k,
            "read_f32: {start}..{end} past the end"
        );
        let (bb, gbb, gb) = (
            self.t.block_bytes(),
            self.group_block_bytes(),
            self.group_bytes(),
        );
        let (mut block, mut vals) = ([0u8; 36], [0.0f32; QK]);
        let mut at = start;
        while at < end {
            let (r, p) = (at / k, at % k);
            let group = &self.data[r / R * gb..][..gb];
            let b = p / QK;
            gather(
                self.t,
                &group[b * gbb..(b + 1) * gbb],
                r % R,
                &mut block[..bb],
            );
            reference::dequantize(self.t, &block[..bb], &mut vals);
            let (from, to) = (p % QK, (QK - p % QK).min(end - at));
            out[at - start..at - start + to].copy_from_slice(&vals[from..from + to]);
            at += to;
        }
    }
}

/// Puts ggml block `src` as row `l` of the group block `dst`.
fn scatter(t: QuantType, src: &[u8], dst: &mut [u8], l: usize) {
    if t == QuantType::Q8_0 {
        // The common case at load (a vocabulary's two planes): four bytes at a time.
        dst[2 * l..2 * l + 2].copy_from_slice(&src[..2]);
        for (c, s4) in src[2..34].chunks_exact(4).enumerate() {
            let w = u32::from_le_bytes([s4[0], s4[1], s4[2], s4[3]]) ^ 0x8080_8080;
            dst[32 + 64 * c + 4 * l..][..4].copy_from_slice(&w.to_le_bytes());
        }
        return;
    }
    let (m, qh, qs) = parts(t);
    let (gm, gqh, gqs) = ggml_parts(t);
    dst[2 * l..2 * l + 2].copy_from_slice(&src[..2]);
    if m != usize::MAX {
        dst[m + 2 * l..m + 2 * l + 2].copy_from_slice(&src[gm..gm + 2]);
    }
    let flip = if t == QuantType::Q8_0 { 0x80 } else { 0 };
    let qs_len = if t == QuantType::Q8_0 { QK } else { QK / 2 };
    for c in 0..qs_len / 4 {
        for j in 0..4 {
            dst[qs + 64 * c + 4 * l + j] = src[gqs + 4 * c + j] ^ flip;
        }
    }
    if qh != usize::MAX {
        let bits = u32::from_le_bytes(src[gqh..gqh + 4].try_into().expect("4 bytes"));
        for c in 0..4 {
            for (half, at) in [(0, qh + 16 * c), (16, qh + 16 * c + 8)] {
                let mut mask = u64::from_le_bytes(dst[at..at + 8].try_into().expect("8 bytes"));
                for j in 0..4 {
                    let bit = u64::from((bits >> (half + 4 * c + j)) & 1);
                    mask |= bit << (4 * l + j);
                }
                dst[at..at + 8].copy_from_slice(&mask.to_le_bytes());
            }
        }
    }
}

/// The inverse of [`scatter`]: row `l` of group block `src` as a ggml block.
fn gather(t: QuantType, src: &[u8], l: usize, dst: &mut [u8]) {
    let (m, qh, qs) = parts(t);
    let (gm, gqh, gqs) = ggml_parts(t);
    dst[..2].copy_from_slice(&src[2 * l..2 * l + 2]);
    if m != usize::MAX {
        dst[gm..gm + 2].copy_from_slice(&src[m + 2 * l..m + 2 * l + 2]);
    }
    let flip = if t == QuantType::Q8_0 { 0x80 } else { 0 };
    let qs_len = if t == QuantType::Q8_0 { QK } else { QK / 2 };
    for c in 0..qs_len / 4 {
        for j in 0..4 {
            dst[gqs + 4 * c + j] = src[qs + 64 * c + 4 * l + j] ^ flip;
        }
    }
    if qh != usize::MAX {
        let mut bits = 0u32;
        for c in 0..4 {
            for (half, at) in [(0, qh + 16 * c), (16, qh + 16 * c + 8)] {
                let mask = u64::from_le_bytes(src[at..at + 8].try_into().expect("8 bytes"));
                for j in 0..4 {
                    let bit = ((mask >> (4 * l + j)) & 1) as u32;
                    bits |= bit << (half + 4 * c + j);
                }
            }
        }
        dst[gqh..gqh + 4].copy_from_slice(&bits.to_le_bytes());
    }
}

/// `m` activation rows quantized once for a product with [`QuantTiles`] of one weight
/// type: q8_0 (or q8_1 for q4_1/q5_1) blocks with the reference rounding, split into
/// parts a kernel loads directly. Reuse one across calls: [`QuantActs::quantize`] keeps
/// the buffers, so steady-state products allocate nothing.
#[derive(Clone, Debug, Default)]
pub struct QuantActs {
    t: Option<QuantType>,
    m: usize,
    k: usize,
    /// Shape: [nb, m, 32]
    pub(crate) q: Vec<i8>,
    /// Block scales. Shape: [nb, m]
    pub(crate) d: Vec<f32>,
    /// Σq per block. Shape: [nb, m]
    pub(crate) sum: Vec<i32>,
    /// q8_1's stored `d·Σq` (f16, widened); zero for q8_0. Shape: [nb, m]
    pub(crate) s: Vec<f32>,
    /// After [`QuantActs::split_q8`]: each pair of rows as one row of 16-bit values
    /// `256a + b` (Shape: [nb, m / 2, 32]), at the pair's second scale, with block sums
    /// `256·Σa + Σb`; empty otherwise.
    pub(crate) wide: Vec<i16>,
}

impl QuantActs {
    pub const fn new() -> Self {
        Self {
            t: None,
            m: 0,
            k: 0,
            q: Vec::new(),
            d: Vec::new(),
            sum: Vec::new(),
            s: Vec::new(),
            wide: Vec::new(),
        }
    }

    /// Room for `m` rows of `k` values (any weight type; `k` a whole number of blocks),
    /// so that quantizing that many, or splitting half as many, never allocates.
    pub fn reserve(&mut self, m: usize, k: usize) {
        let n = k.div_ceil(QK) * m;
        self.q.reserve((n * QK).saturating_sub(self.q.len()));
        self.d.reserve(n.saturating_sub(self.d.len()));
        self.sum.reserve(n.saturating_sub(self.sum.len()));
        self.s.reserve(n.saturating_sub(self.s.len()));
        let pairs = k.div_ceil(QK) * m.div_ceil(2);
        self.wide
            .reserve((pairs * QK).saturating_sub(self.wide.len()));
    }

    /// Quantizes `x` (Shape: [m, k]) for weights of type `t` (as [`crate::quantize_activations`]
    /// does, so the blocks are the ones [`crate::vec_dot`] would get). Panics unless `k` is a
    /// whole number of blocks and `x.len() == m·k`.
    pub fn quantize(&mut self, t: QuantType, x: &[f32], m: usize, k: usize) {
        let at = t.activation_type();
        let nb = at.row_bytes(k) / at.block_bytes();
        assert_eq!(x.len(), m * k, "QuantActs::quantize: x is not {m}×{k}");
        self.t = Some(t);
        (self.m, self.k) = (m, k);
        self.q.resize(nb * m * QK, 0);
        self.d.resize(nb * m, 0.0);
        self.sum.resize(nb * m, 0);
        self.s.resize(nb * m, 0.0);
        self.wide.clear();
        #[cfg(target_arch = "x86_64")]
        {
            // The same Rust arithmetic compiled for wider vectors (the rounding loop
            // vectorizes, `round` inlines): bit-identical results, checked in the tests.
            if Isa::Avx512.is_supported() {
                // SAFETY: the CPU has AVX-512 F/BW/VL, AVX2, FMA and F16C (just checked).
                return unsafe { self.fill_avx512(at, x) };
            }
            if Isa::Avx2.is_supported() {
                // SAFETY: the CPU has AVX2, FMA and F16C (just checked).
                return unsafe { self.fill_avx2(at, x) };
            }
        }
        self.fill(at, x);
    }

    /// Quantizes `x` (Shape: [m, k]) for q8_0 weights as 2m rows in pairs, x̃_i = the sum
    /// of rows 2i and 2i + 1: row 2i holds each block's q8_0 codes `a` at scale
    /// d = amax / 127 (kept in f32, not rounded to f16 as a ggml block's, so what the codes
    /// miss is at most d/2 at any magnitude), row 2i + 1 what they miss in steps of d/256
    /// (codes `b` in −127..=127). So x̃_i is x_i to within d/512 (d/256 on an exact tie at
    /// ±128 steps), and each pair is also one row of 16-bit values `256a + b` at scale d/256,
    /// which [`tiled_matmul_split`] takes whole. Panics unless `k` is a whole number of
    /// blocks and `x.len() == m·k`.
    pub fn split_q8(&mut self, x: &[f32], m: usize, k: usize) {
        assert!(
            k.is_multiple_of(QK) && x.len() == m * k,
            "QuantActs::split_q8: x is not {m}×{k} in blocks of {QK}"
        );
        let (nb, rows) = (k / QK, 2 * m);
        self.t = Some(QuantType::Q8_0);
        (self.m, self.k) = (rows, k);
        self.q.resize(nb * rows * QK, 0);
        self.d.resize(nb * rows, 0.0);
        self.sum.resize(nb * rows, 0);
        self.s.clear();
        self.s.resize(nb * rows, 0.0);
        self.wide.resize(nb * m * QK, 0);
        for (i, row) in x.chunks_exact(k.max(1)).enumerate() {
            for (b, xb) in row.chunks_exact(QK).enumerate() {
                let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                let d = amax / 127.0;
                let step = d / 256.0;
                let (ea, eb, ew) = (b * rows + 2 * i, b * rows + 2 * i + 1, b * m + i);
                let (mut sa, mut sb) = (0i32, 0i32);
                for (j, &v) in xb.iter().enumerate() {
                    // Non-finite inputs give 0 codes (`as` saturates NaN to 0).
                    let a = if d > 0.0 {
                        (v / d).round().clamp(-127.0, 127.0) as i8
                    } else {
                        0
                    };
                    let r = v - f32::from(a) * d;
                    let bq = if step > 0.0 {
                        (r / step).round().clamp(-127.0, 127.0) as i8
                    } else {
                        0
                    };
                    self.q[ea * QK + j] = a;
                    self.q[eb * QK + j] = bq;
                    self.wide[ew * QK + j] = 256 * i16::from(a) + i16::from(bq);
                    (sa, sb) = (sa + i32::from(a), sb + i32::from(bq));
                }
                (self.d[ea], self.d[eb]) = (d, step);
                (self.sum[ea], self.sum[eb]) = (sa, sb);
            }
        }
    }

    /// Quantizes the rows of `x` into the buffers [`QuantActs::quantize`] sized, as blocks of
    /// activation type `at`.
    #[inline(always)]
    fn fill(&mut self, at: QuantType, x: &[f32]) {
        // One monomorphic loop per activation type, so the block quantizer inlines.
        match at {
            QuantType::Q8_1 => self.fill_with(x, 4, reference::q8_1),
            _ => self.fill_with(x, 2, reference::q8_0),
        }
    }

    /// [`QuantActs::fill`] with block quantizer `quantize`, whose codes start at byte `qoff`.
    #[inline(always)]
    fn fill_with(&mut self, x: &[f32], qoff: usize, quantize: impl Fn(&[f32], &mut [u8])) {
        let (m, k) = (self.m, self.k);
        let mut block = [0u8; 36];
        let blk = &mut block[..qoff + QK];
        for (i, row) in x.chunks_exact(k.max(1)).enumerate() {
            for (b, xb) in row.chunks_exact(QK).enumerate() {
                quantize(xb, blk);
                let e = b * m + i;
                let q = &mut self.q[e * QK..(e + 1) * QK];
                for (dst, &src) in q.iter_mut().zip(&blk[qoff..qoff + QK]) {
                    *dst = src as i8;
                }
                self.d[e] = reference::f16_at(blk, 0);
                self.sum[e] = q.iter().map(|&v| i32::from(v)).sum();
                self.s[e] = if qoff == 4 {
                    reference::f16_at(blk, 2)
                } else {
                    0.0
                };
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
    unsafe fn fill_avx512(&mut self, at: QuantType, x: &[f32]) {
        self.fill(at, x)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn fill_avx2(&mut self, at: QuantType, x: &[f32]) {
        self.fill(at, x)
    }

    /// Input row `i` as the kernels see it: each block's codes times its scale.
    /// Panics unless `i < m` and `out.len() == k`.
    pub fn dequantize(&self, i: usize, out: &mut [f32]) {
        assert!(
            i < self.m && out.len() == self.k,
            "QuantActs::dequantize: row {i} of {}, {} values for {}",
            self.m,
            out.len(),
            self.k
        );
        for (b, ob) in out.chunks_exact_mut(QK).enumerate() {
            let e = b * self.m + i;
            let d = self.d[e];
            for (o, &q) in ob.iter_mut().zip(&self.q[e * QK..(e + 1) * QK]) {
                *o = f32::from(q) * d;
            }
        }
    }

    /// Input rows.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Values per input row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The weight type these activations were quantized for (None before the first call).
    pub fn weight_type(&self) -> Option<QuantType> {
        self.t
    }
}

/// `out[i·ldo + 16(g − groups.start) + l] = row (16g + l) · act_i` for every group g in
/// `groups`, all 16 lanes (rows past `n_out` give 0) and every input row i of `acts`, on
/// the `isa` path (one this CPU lacks falls back to the best below it).
///
/// SIMD paths sum in a different order than [`tiled_matmul_ref`]; results agree to f32
/// rounding. Panics when `acts` were quantized for another type or width, the groups
/// pass the end, or `out` is too short for `[m, ldo]` with `ldo ≥ 16·groups.len()`.
pub fn tiled_matmul(
    isa: Isa,
    w: &QuantTiles,
    groups: Range<usize>,
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) {
    check(w, &groups, acts, (acts.m, out.len()), ldo);
    if groups.is_empty() || acts.m == 0 {
        return;
    }
    let data = w.groups_data(&groups);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 if Isa::Avx2.is_supported() => {
            // SAFETY: AVX2/FMA/F16C checked above, AVX-512 F/BW/VL/VNNI when `vnni`;
            // `check` sized `out` and the activations, `data` holds whole groups.
            unsafe { crate::tiled_x86::matmul(vnni(isa), w.t, w.n_in, data, acts, out, ldo) };
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon if crate::neon::has_dotprod() => {
            // SAFETY: the CPU has the dot-product extension (checked above); `check` sized
            // `out` and the activations, `data` holds whole groups.
            unsafe { crate::tiled_neon::matmul(w.t, w.n_in, data, acts, out, ldo) };
        }
        _ => scalar(w.t, w.n_in, data, acts, out, ldo),
    }
}

/// `out[i·ldo + 16(g − groups.start) + l] = row (16g + l) · x̃_i` for the pairs of
/// [`QuantActs::split_q8`] (i < m / 2), each taken whole as 16-bit values, on a path that
/// has a kernel for that: x86-64's AVX2 kernels (not VNNI's), where it does half the work
/// of the pair's two byte rows. Returns false, leaving `out` alone, on every other path: there
/// [`tiled_matmul`]'s two rows per pair, added, give the same product (to f32 rounding).
/// Panics as [`tiled_matmul`] does, and when `acts` are not [`QuantActs::split_q8`]'s or
/// `w` is not q8_0.
pub fn tiled_matmul_split(
    isa: Isa,
    w: &QuantTiles,
    groups: Range<usize>,
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) -> bool {
    let pairs = acts.m / 2;
    assert!(
        w.t == QuantType::Q8_0 && acts.wide.len() == pairs * acts.k,
        "tiled_matmul_split: q8_0 weights and split_q8 activations only"
    );
    check(w, &groups, acts, (pairs, out.len()), ldo);
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx2) && Isa::Avx2.is_supported() && !vnni(isa) {
        if !groups.is_empty() && pairs > 0 {
            let data = w.groups_data(&groups);
            // SAFETY: AVX2/FMA/F16C checked just above; `check` and the asserts sized the
            // activations and `out`; `data` holds whole groups.
            unsafe { crate::tiled_x86::matmul_split(w.n_in, data, acts, out, ldo) };
        }
        return true;
    }
    let _ = (isa, out);
    false
}

/// Whether kernel path `isa` runs the AVX-512 VNNI kernels (else, on x86-64, the AVX2 ones).
#[cfg(target_arch = "x86_64")]
fn vnni(isa: Isa) -> bool {
    isa == Isa::Avx512 && Isa::Avx512.is_supported() && crate::x86_512::has_vnni()
}

/// [`tiled_matmul`] on the scalar path: each lane summed block by block as the SIMD paths
/// do, with exact integer block dots (the test oracle).
pub fn tiled_matmul_ref(
    w: &QuantTiles,
    groups: Range<usize>,
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) {
    check(w, &groups, acts, (acts.m, out.len()), ldo);
    let data = w.groups_data(&groups);
    scalar(w.t, w.n_in, data, acts, out, ldo);
}

#[doc(hidden)]
/// Test hook: [`tiled_matmul`] through the AVX2 kernel (`vnni` false) or the AVX-512 VNNI
/// one; false when this CPU cannot run it.
pub fn tiled_matmul_variant(
    vnni: bool,
    w: &QuantTiles,
    groups: Range<usize>,
    acts: &QuantActs,
    out: &mut [f32],
    ldo: usize,
) -> bool {
    check(w, &groups, acts, (acts.m, out.len()), ldo);
    #[cfg(target_arch = "x86_64")]
    {
        let ok = if vnni {
            Isa::Avx512.is_supported() && crate::x86_512::has_vnni()
        } else {
            Isa::Avx2.is_supported()
        };
        if ok && !groups.is_empty() && acts.m > 0 {
            let data = w.groups_data(&groups);
            // SAFETY: CPU features checked just above; shapes by `check`.
            unsafe { crate::tiled_x86::matmul(vnni, w.t, w.n_in, data, acts, out, ldo) };
        }
        ok
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (vnni, out);
        false
    }
}

/// The shapes of a product of `w`'s `groups` with `acts` into `rows` rows of `ldo` (`out`
/// values in all).
fn check(
    w: &QuantTiles,
    groups: &Range<usize>,
    acts: &QuantActs,
    (rows, out): (usize, usize),
    ldo: usize,
) {
    assert!(
        acts.t == Some(w.t) && acts.k == w.n_in,
        "tiled_matmul: activations for {:?} × {} against {} weights of width {}",
        acts.t,
        acts.k,
        w.t,
        w.n_in
    );
    assert!(
        groups.start <= groups.end && groups.end <= w.groups(),
        "tiled_matmul: groups {groups:?} of {}",
        w.groups()
    );
    let cols = groups.len() * R;
    assert!(
        ldo >= cols && (rows == 0 || out >= (rows - 1) * ldo + cols),
        "tiled_matmul: out of {out} for {rows} rows of {cols} (ldo {ldo})"
    );
}

/// Element `e` of row `l` of a group block as its signed code (minus the `_0` types'
/// offset), read from the group layout.
fn code(t: QuantType, blk: &[u8], l: usize, e: usize) -> i32 {
    let (_, qh, qs) = parts(t);
    if t == QuantType::Q8_0 {
        return i32::from((blk[qs + 64 * (e / 4) + 4 * l + e % 4] ^ 0x80) as i8);
    }
    let (c, j, high) = (e % 16 / 4, e % 4, e >= 16);
    let byte = blk[qs + 64 * c + 4 * l + j];
    let mut v = i32::from(if high { byte >> 4 } else { byte & 0x0F });
    if qh != usize::MAX {
        let at = qh + 16 * c + if high { 8 } else { 0 };
        let mask = u64::from_le_bytes(blk[at..at + 8].try_into().expect("8 bytes"));
        v |= (((mask >> (4 * l + j)) & 1) as i32) << 4;
    }
    v - match t {
        QuantType::Q4_0 => 8,
        QuantType::Q5_0 => 16,
        _ => 0,
    }
}

fn scalar(t: QuantType, k: usize, data: &[u8], acts: &QuantActs, out: &mut [f32], ldo: usize) {
    let (nb, m) = (k / QK, acts.m);
    let gbb = R * t.block_bytes();
    let (mo, _, _) = parts(t);
    for (g, group) in data.chunks_exact(nb * gbb).enumerate() {
        for l in 0..R {
            for i in 0..m {
                let mut acc = 0.0f32;
                for (b, blk) in group.chunks_exact(gbb).enumerate() {
                    let e = b * m + i;
                    let a = &acts.q[e * QK..(e + 1) * QK];
                    let sumi: i32 = (0..QK).map(|j| code(t, blk, l, j) * i32::from(a[j])).sum();
                    let dw = f16::from_le_bytes([blk[2 * l], blk[2 * l + 1]]).to_f32();
                    acc += sumi as f32 * (dw * acts.d[e]);
                    if mo != usize::MAX {
                        let mw = f16::from_le_bytes([blk[mo + 2 * l], blk[mo + 2 * l + 1]]);
                        acc += mw.to_f32() * acts.s[e];
                    }
                }
                out[i * ldo + g * R + l] = acc;
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Values on the rounding ties (x·127/amax exactly k + 0.5) and just off them.
    fn tricky(m: usize, k: usize) -> Vec<f32> {
        (0..m * k)
            .map(|i| match i % 32 {
                0 => 127.0,
                j if j % 3 == 0 => (j as f32 - 16.0) + 0.5,
                j if j % 3 == 1 => f32::from_bits((j as f32 + 0.5).to_bits() - 1),
                j => ((i * 2654435761) % 1000) as f32 / 7.0 - 70.0 + j as f32,
            })
            .collect()
    }

    #[test]
    fn wide_fills_match_the_scalar_one() {
        let (m, k) = (5, 96);
        let x = tricky(m, k);
        for t in [QuantType::Q8_0, QuantType::Q4_1] {
            let mut want = QuantActs::new();
            want.quantize(t, &x, m, k);
            // Overwrite with the plain build of the same code.
            let mut base = want.clone();
            base.fill(t.activation_type(), &x);
            let mut paths = vec![("scalar", base)];
            if Isa::Avx2.is_supported() {
                let mut a = want.clone();
                // SAFETY: AVX2, FMA and F16C checked.
                unsafe { a.fill_avx2(t.activation_type(), &x) };
                paths.push(("avx2", a));
            }
            if Isa::Avx512.is_supported() {
                let mut a = want.clone();
                // SAFETY: AVX-512 F/BW/VL, AVX2, FMA and F16C checked.
                unsafe { a.fill_avx512(t.activation_type(), &x) };
                paths.push(("avx512", a));
            }
            for (name, got) in paths {
                assert_eq!(got.q, want.q, "{t} {name} codes");
                assert_eq!(got.d, want.d, "{t} {name} scales");
                assert_eq!(got.sum, want.sum, "{t} {name} sums");
                assert_eq!(got.s, want.s, "{t} {name} q8_1 sums");
            }
        }
    }
}
