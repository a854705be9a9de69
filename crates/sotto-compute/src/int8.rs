//! int8 GEMM for the encoder's many-row products, on CPUs with AVX-512 VNNI or AVX2, or
//! aarch64 with the dot-product extension: the scheme of CTranslate2's int8
//! (faster-whisper's `compute_type="int8"`).
//!
//! Weights are quantized once per output channel ([`I8Packed`]: `w ≈ scale_j · q`, q in
//! [-127, 127], the scale `max|w_j| / 127`) and packed for the CPU's tile ([`Layout`]):
//! - **VNNI** ([`Layout::Quads`]): stored as `q + 128` (unsigned bytes, which `vpdpbusd`
//!   takes as its first operand) in panels of [`NR`] columns, each a run of k quads, so one
//!   64-byte load feeds 16 columns. Activations are broadcast four bytes at a time; the
//!   `+ 128` is taken out with each row's sum of quantized activations. aarch64's `sdot`
//!   tile reads the same panels, flipping each load back to signed bytes
//!   (`kernels::neon_int8`).
//! - **AVX2** ([`Layout::Pairs`]): stored as i16 pairs in panels of [`NR_AVX2`] columns.
//!   AVX2's byte product (`vpmaddubsw`) saturates its 16-bit pair sums at these ranges, so
//!   the tile multiplies i16 pairs (`vpmaddwd`, two products per 32-bit lane), which is
//!   exact and, added into the sums, half an instruction per product pair: 1.6× the f32
//!   FMA's rate here. Its activations are i16 too, so they take a wider range at no cost:
//!   [`pair_qmax`] levels, the most whose sums cannot overflow i32 (8 256 at k = 2048,
//!   against VNNI's 127). That halves the int8 encoder's distance from f16 (tiny.en q8_0,
//!   teacher-forced KL 0.0024 → 0.0013; `scripts/quant-quality`).
//!
//! - **AVX2, wide** ([`Layout::WidePairs`]): the same panels and tile, with the weights
//!   given as many levels as the activations: [`wide_qmax`] a side (2 047 at k = 512, 1 024
//!   at k = 2048, about 11–12 bits), the most whose sums still cannot overflow i32. The
//!   `int16` encoder of f16 files on AVX2 CPUs: the int8 tile's speed at ~1/60 of int8's
//!   distance from the f32 path (tiny.en teacher-forced KL 0.00091 → 0.000013).
//!
//! Activations are quantized per row on every call (dynamic scale `max|x_i| / qmax`, ties to
//! even). Products accumulate exactly in i32, then one f32 scale per (row, column), bias
//! and GELU. [`linear_reference`] is the scalar model of that arithmetic for either layout.

use std::ops::Range;

use rayon::prelude::*;

use crate::blocked::{for_each_tile, Blocks, Epi, Out};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::kernels;
use crate::scratch::Pool;
use crate::{f16, shape_err, CpuBackend, Isa, Linear, Norm, Result, Weight};

/// Rows per VNNI tile.
pub(crate) const MR: usize = 8;
/// Columns per VNNI tile (and per [`Layout::Quads`] panel): two 16-lane registers.
pub(crate) const NR: usize = 32;
/// Rows per AVX2 tile: 6 × 2 accumulators, 2 weight registers and a broadcast fit its 16.
pub(crate) const MR_AVX2: usize = 6;
/// Columns per AVX2 tile (and per [`Layout::Pairs`] panel): two 8-lane registers.
pub(crate) const NR_AVX2: usize = 16;
/// Rows per AMX int8 tile ([`kernels::x86_amx::tile_i8`]), which quantized rows in
/// [`Layout::Quads`] are padded to.
const AMX_ROWS: usize = 32;
/// Row tiles per task block; its activation block stays in L2.
const MC_TILES: usize = 12;
/// Column tiles per task block (fewer on AVX2 for deep k: see [`CpuBackend::gemm_int8`]).
const NC_TILES: usize = 8;
/// Most bytes of a whole-rows block ([`CpuBackend::gemm_int8_hidden`]): the f32 block stays
/// in L2 until its rows are quantized.
const WHOLE_ROWS_BLOCK: usize = 512 << 10;

impl Blocks {
    /// These blocks widened to all `n` columns, with as many row tiles (at least one) as
    /// keep an f32 block within [`WHOLE_ROWS_BLOCK`].
    fn whole_rows(self, n: usize) -> Blocks {
        let nc = n.next_multiple_of(self.nr).max(self.nr);
        let tiles = (WHOLE_ROWS_BLOCK / (4 * nc * self.mr)).max(1);
        Blocks {
            mc: tiles * self.mr,
            nc,
            ..self
        }
    }
}

/// How an [`I8Packed`] weight is laid out: for the VNNI tile or for the AVX2 one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Panels of [`NR`] columns, each Shape: [k.div_ceil(4), NR] quads of `q + 128`.
    Quads,
    /// Panels of [`NR_AVX2`] columns, each Shape: [k.div_ceil(2), NR_AVX2] pairs of i16:
    /// weights in [-127, 127], activations [`pair_qmax`] levels.
    Pairs,
    /// [`Layout::Pairs`]' panels with weights and activations both [`wide_qmax`] levels.
    WidePairs,
}

impl Layout {
    /// The layout of this CPU's integer GEMM: the int8 one ([`Layout::Quads`] with VNNI,
    /// else [`Layout::Pairs`]) or, when `wide`, [`Layout::WidePairs`]; None where the CPU
    /// has no such tile (no AVX2).
    pub fn this_cpu(wide: bool) -> Option<Layout> {
        match wide {
            false if int8_gemm_supported() => Some(Layout::for_isa(sotto_isa::isa())),
            true if int16_gemm_supported() => Some(Layout::WidePairs),
            _ => None,
        }
    }

    /// The layout this CPU's best int8 tile reads, for weights packed at load on kernel
    /// path `isa`: quads where it runs AVX-512 with VNNI, else pairs.
    fn for_isa(isa: Isa) -> Layout {
        if quad_tile(isa) {
            Layout::Quads
        } else {
            Layout::Pairs
        }
    }

    /// Whether the AVX2 pair tile reads this layout.
    fn pairs(self) -> bool {
        self != Layout::Quads
    }

    /// k values per 32-bit unit.
    fn per_unit(self) -> usize {
        if self.pairs() {
            2
        } else {
            4
        }
    }

    /// Columns per panel.
    fn nr(self) -> usize {
        if self.pairs() {
            NR_AVX2
        } else {
            NR
        }
    }

    /// Rows per tile.
    fn mr(self) -> usize {
        if self.pairs() {
            MR_AVX2
        } else {
            MR
        }
    }

    /// The weights' levels a side for inputs `k` wide.
    fn weight_qmax(self, k: usize) -> i32 {
        match self {
            Layout::Quads | Layout::Pairs => 127,
            Layout::WidePairs => wide_qmax(k),
        }
    }

    /// The activations' levels a side for inputs `k` wide.
    fn act_qmax(self, k: usize) -> i32 {
        match self {
            Layout::Quads => 127,
            Layout::Pairs => pair_qmax(k),
            Layout::WidePairs => wide_qmax(k),
        }
    }

    /// The encoder precision's name for products in this layout.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Quads | Layout::Pairs => "int8",
            Layout::WidePairs => "int16",
        }
    }
}

/// Whether this CPU runs the SIMD int8 GEMM: AVX-512 VNNI, or AVX2 with FMA (the f32 path's
/// baseline), or aarch64's dot-product extension.
pub fn int8_gemm_supported() -> bool {
    Isa::Avx2.is_supported() || quad_tile(Isa::Neon)
}

/// Whether this CPU runs [`Layout::WidePairs`] products (the `int16` encoder): AVX2.
pub fn int16_gemm_supported() -> bool {
    Isa::Avx2.is_supported()
}

/// [`int8_gemm_supported`] on the selected kernel path ([`sotto_isa::isa`]): AVX2 or
/// AVX-512 on x86, `sdot` on aarch64 (not the scalar path a forced run may select).
pub fn int8_gemm_active() -> bool {
    matches!(sotto_isa::isa(), Isa::Avx2 | Isa::Avx512) || quad_tile(sotto_isa::isa())
}

/// [`int16_gemm_supported`] on the selected kernel path: AVX2 or AVX-512.
pub fn int16_gemm_active() -> bool {
    matches!(sotto_isa::isa(), Isa::Avx2 | Isa::Avx512)
}

/// Whether the int8 GEMM on the selected kernel path runs the quad tile (AVX-512 VNNI, or
/// aarch64's `sdot`), with byte activations at four products per lane (else, on x86, the
/// AVX2 pair tile, where [`Layout::WidePairs`] costs no more than int8).
pub fn int8_quad_tile_active() -> bool {
    quad_tile(sotto_isa::isa())
}

/// Whether the selected kernel path is AVX2, where the pair tile ([`Layout::WidePairs`])
/// outruns the f32 GEMM (1.6× its rate); AVX-512's f32 tile is twice as wide.
pub fn int16_gemm_preferred() -> bool {
    sotto_isa::isa() == Isa::Avx2 && int16_gemm_supported()
}

/// Whether a backend on kernel path `isa` runs the quad tile ([`Layout::Quads`]): AVX-512
/// VNNI's `vpdpbusd`, or NEON's `sdot` where the CPU has the dot-product extension.
fn quad_tile(isa: Isa) -> bool {
    // std caches the detection: no cache of our own needed.
    #[cfg(target_arch = "x86_64")]
    {
        isa == Isa::Avx512
            && Isa::Avx512.is_supported()
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(target_arch = "aarch64")]
    {
        isa == Isa::Neon && std::arch::is_aarch64_feature_detected!("dotprod")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = isa;
        false
    }
}

/// Whether a backend on kernel path `isa` runs the AVX2 pair tile (AVX-512 CPUs too).
fn pair_tile(isa: Isa) -> bool {
    matches!(isa, Isa::Avx2 | Isa::Avx512) && isa.is_supported()
}

/// Whether this CPU has AVX-512 VNNI (the int8 rate [`crate::peak`] measures there).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn vnni_supported() -> bool {
    cfg!(target_arch = "x86_64") && quad_tile(Isa::Avx512)
}

/// Whether a backend on kernel path `isa` runs the SIMD int8 GEMM on `w` (otherwise int8
/// weights are widened to f32 and take the f32 path): quads on the VNNI tile, pairs on
/// the AVX2 one, which AVX-512 CPUs run too.
pub(crate) fn runs(isa: Isa, w: &Weight) -> bool {
    match w {
        Weight::Int8(p) if p.layout == Layout::Quads => quad_tile(isa),
        Weight::Int8(_) => pair_tile(isa),
        _ => false,
    }
}

/// `x` quantized symmetrically: the scale `max|x| / 127` and each `round(x / scale)` (ties
/// to even) into `q` (its length, a multiple of 4, padded with zeros); returns the scale
/// and the sum of the quantized values. An all-zero (or empty) row has scale 0.
fn quantize_row(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    q.fill(0);
    let mut sum = 0;
    let scale = quantize_levels(x, 127.0, |i, v| {
        q[i] = v as i8;
        sum += v;
    });
    (scale, sum)
}

/// Symmetric quantization of `x` to integers in [-qmax, qmax], each handed to `put(i, q_i)`
/// (nothing for an all-zero, empty or non-finite row): returns the scale `max|x| / qmax`
/// (0 for such a row). `q_i = round(x_i · (qmax / max|x|))`, ties to even.
pub(crate) fn quantize_levels(x: &[f32], qmax: f32, mut put: impl FnMut(usize, i32)) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 || !amax.is_finite() {
        return 0.0;
    }
    let inv = qmax / amax;
    for (i, &v) in x.iter().enumerate() {
        // |v · inv| ≤ qmax (up to rounding, which stays below qmax + 0.5).
        put(i, (v * inv).round_ties_even() as i32);
    }
    amax / qmax
}

/// The activation levels of the AVX2 tile ([`Layout::Pairs`]) for inputs `k` wide: the
/// most, up to i16's 32 767, for which `k` products with weights in [-127, 127] cannot
/// overflow the i32 sums.
pub fn pair_qmax(k: usize) -> i32 {
    let most = i32::MAX as usize / (127 * k.max(1));
    most.min(i16::MAX as usize) as i32
}

/// The levels of weights and activations alike in [`Layout::WidePairs`] for inputs `k`
/// wide: the most, up to 32 767, for which `k` products of two such values cannot overflow
/// the i32 sums (`k · q² ≤ i32::MAX`).
pub fn wide_qmax(k: usize) -> i32 {
    let k = k.max(1) as u64;
    // The integer square root of i32::MAX / k, by f64 and a correction step.
    let most = i32::MAX as u64 / k;
    let mut q = (most as f64).sqrt() as u64;
    while q * q > most {
        q -= 1;
    }
    while (q + 1) * (q + 1) <= most {
        q += 1;
    }
    q.min(i16::MAX as u64) as i32
}

/// Whether [`runs`] holds for every weight in `ws` and all share one layout, so that one
/// quantization of the activations serves them all.
pub(crate) fn runs_together<'a>(isa: Isa, mut ws: impl Iterator<Item = &'a Weight>) -> bool {
    let mut layout = None;
    ws.all(|w| match w {
        Weight::Int8(p) if runs(isa, w) => *layout.get_or_insert(p.layout) == p.layout,
        _ => false,
    })
}

/// An `n_out × n_in` weight quantized to int8 per output channel and packed for
/// [`CpuBackend::linear`]'s int8 GEMM in one of the [`Layout`]s: `n_out.div_ceil(nr)`
/// panels of `nr` columns; columns past `n_out` and values past `n_in` are zero (`q = 0`).
#[derive(Clone, Debug)]
pub struct I8Packed {
    data: Vec<u32>,
    /// Shape: [n_out.next_multiple_of(nr)], zero past `n_out`.
    scales: Vec<f32>,
    n_out: usize,
    n_in: usize,
    layout: Layout,
}

impl I8Packed {
    /// Quantizes and packs row-major f32 `rows` (Shape: [n_out, n_in]) for this CPU's tile.
    pub fn new(rows: &[f32], n_out: usize, n_in: usize) -> Result<Self> {
        Self::with_layout(rows, n_out, n_in, Layout::for_isa(sotto_isa::isa()))
    }

    /// [`I8Packed::new`] in a given layout.
    pub fn with_layout(rows: &[f32], n_out: usize, n_in: usize, layout: Layout) -> Result<Self> {
        check_len(rows.len(), n_out, n_in)?;
        Ok(Self::pack(n_out, n_in, layout, |j, row| {
            row.copy_from_slice(&rows[j * n_in..(j + 1) * n_in])
        }))
    }

    /// [`I8Packed::with_layout`] from row-major f16 values as little-endian bytes, at any
    /// alignment (a model file's): each row is widened as it is quantized, with no f32 copy
    /// of the weight.
    pub fn from_f16_le_bytes(
        bytes: &[u8],
        n_out: usize,
        n_in: usize,
        layout: Layout,
    ) -> Result<Self> {
        let (halves, rest) = bytes.as_chunks::<2>();
        if !rest.is_empty() {
            return Err(shape_err(
                "int8 pack",
                format!("{} bytes of f16", bytes.len()),
            ));
        }
        check_len(halves.len(), n_out, n_in)?;
        let isa = sotto_isa::isa();
        Ok(Self::pack(n_out, n_in, layout, |j, row| {
            let src = &halves[j * n_in..(j + 1) * n_in];
            let half: Vec<f16> = src.iter().map(|&b| f16::from_le_bytes(b)).collect();
            crate::kernels::f16_to_f32(isa, &half, row);
        }))
    }

    /// Panels of `layout` in parallel (a base model's encoder is ~20 M weights per load),
    /// each row `j` widened into an f32 buffer by `fill(j, buffer)`, then quantized.
    fn pack(
        n_out: usize,
        n_in: usize,
        layout: Layout,
        fill: impl Fn(usize, &mut [f32]) + Sync,
    ) -> Self {
        let (k4, isa, nr) = (n_in.div_ceil(4), sotto_isa::isa(), layout.nr());
        let wq = layout.weight_qmax(n_in) as f32;
        let units = n_in.div_ceil(layout.per_unit());
        let zero = if layout.pairs() { 0 } else { 0x8080_8080u32 };
        let mut data = vec![zero; n_out.div_ceil(nr) * units * nr];
        let mut scales = vec![0.0f32; n_out.next_multiple_of(nr)];
        data.par_chunks_mut(units * nr)
            .zip(scales.par_chunks_mut(nr))
            .enumerate()
            .for_each(|(jp, (panel, scales))| {
                let (mut w, mut row) = (vec![0f32; n_in], vec![0u32; k4.max(units)]);
                for jj in 0..nr.min(n_out - jp * nr) {
                    fill(jp * nr + jj, &mut w);
                    if layout.pairs() {
                        scales[jj] = quantize_pairs(isa, &w, wq, &mut row[..units]);
                        (row[..units].iter().enumerate())
                            .for_each(|(p, &pair)| panel[p * nr + jj] = pair);
                    } else {
                        (scales[jj], _) = quantize_into(isa, &w, &mut row);
                        // Signed bytes to `q + 128`: flip each byte's top bit.
                        (row.iter().enumerate())
                            .for_each(|(p, &q)| panel[p * nr + jj] = q ^ 0x8080_8080);
                    }
                }
            });
        Self {
            data,
            scales,
            n_out,
            n_in,
            layout,
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// Bytes one product reads: the packed values (one byte each for quads, two for
    /// pairs) and a scale per column.
    pub(crate) fn stream_bytes(&self) -> usize {
        let per = 4 / self.layout.per_unit();
        self.n_out * (per * self.n_in + 4)
    }

    /// 32-bit units (quads or pairs) per column.
    fn units(&self) -> usize {
        self.n_in.div_ceil(self.layout.per_unit())
    }

    /// Column panel `jp`. Shape: [units, nr].
    fn panel(&self, jp: usize) -> &[u32] {
        let len = self.units() * self.layout.nr();
        &self.data[jp * len..(jp + 1) * len]
    }

    /// The quantized value of row `j`, column `c`.
    fn q(&self, j: usize, c: usize) -> i32 {
        let (nr, per) = (self.layout.nr(), self.layout.per_unit());
        let unit = self.panel(j / nr)[(c / per) * nr + j % nr];
        if self.layout.pairs() {
            (unit >> (16 * (c % 2))) as u16 as i16 as i32
        } else {
            ((unit >> (8 * (c % 4))) as u8 ^ 0x80) as i8 as i32
        }
    }

    /// Row-major elements `start..start + out.len()` dequantized to f32. Panics when the
    /// range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        assert!(
            end <= self.n_out * self.n_in,
            "read_f32: {start}..{end} past the end"
        );
        for (o, e) in out.iter_mut().zip(start..end) {
            let (j, c) = (e / self.n_in, e % self.n_in);
            *o = self.q(j, c) as f32 * self.scales[j];
        }
    }
}

impl Weight {
    /// The same weight quantized and packed for the int8 GEMM ([`Weight::Int8`]) when
    /// `enable` and this CPU can run it ([`int8_gemm_supported`]); any other weight is
    /// dequantized to f32 first. For weights only ever multiplied by many rows.
    pub fn for_int8_gemm(self, n_out: usize, n_in: usize, enable: bool) -> Result<Self> {
        match Layout::this_cpu(false) {
            Some(layout) if enable => self.int_packed(n_out, n_in, layout),
            _ => Ok(self),
        }
    }

    /// The same weight packed for the AVX2 tile with [`wide_qmax`] levels
    /// ([`Layout::WidePairs`], the `int16` encoder) where this CPU has AVX2
    /// ([`int16_gemm_supported`]); any other weight is dequantized to f32 first.
    pub fn for_int16_gemm(self, n_out: usize, n_in: usize) -> Result<Self> {
        match Layout::this_cpu(true) {
            Some(layout) => self.int_packed(n_out, n_in, layout),
            None => Ok(self),
        }
    }

    fn int_packed(self, n_out: usize, n_in: usize, layout: Layout) -> Result<Self> {
        if matches!(self, Weight::Int8(_)) {
            return Ok(self);
        }
        check_len(self.len(), n_out, n_in)?;
        let packed = match &self {
            Weight::F32(rows) => I8Packed::with_layout(rows, n_out, n_in, layout)?,
            w => {
                let mut rows = vec![0.0f32; n_out * n_in];
                w.read_f32(0, &mut rows);
                I8Packed::with_layout(&rows, n_out, n_in, layout)?
            }
        };
        Ok(Weight::Int8(packed))
    }
}

fn check_len(len: usize, n_out: usize, n_in: usize) -> Result<()> {
    if len != n_out * n_in {
        return Err(shape_err(
            "int8 pack",
            format!("{len} values for a {n_out}×{n_in} weight"),
        ));
    }
    Ok(())
}

/// What a finished tile's i32 sums become: `· (s_x · s_w) + bias`, per column.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) struct Epilogue<'a> {
    /// The weight scales of the tile's columns (a whole panel's: zero past the last).
    pub w_scales: &'a [f32],
    /// The bias of the tile's valid columns.
    pub bias: Option<&'a [f32]>,
    /// Add onto the output instead of storing it ([`Epi::Residual`]).
    pub add: bool,
}

/// Activations quantized for one product in a weight's [`Layout`]: rows padded to a
/// multiple of its tile's rows (zero rows) and to whole k units (quads of signed bytes, or
/// pairs of i16).
pub(crate) struct QuantRows {
    /// Shape: [m.next_multiple_of(mr), units].
    data: Vec<u32>,
    /// Per row: the scale and (quads only) the sum of its quantized values.
    /// Shape: [m.next_multiple_of(mr)].
    scales: Vec<f32>,
    sums: Vec<i32>,
}

impl QuantRows {
    /// Room for `m` rows of `k` values in `layout` in `data` (reused, any contents): the
    /// padding rows (and, when k does not fill its units, every row) zero, the rest to be
    /// written.
    fn sized(layout: Layout, m: usize, k: usize, pool: &Pool<u32>) -> QuantRows {
        let k4 = k.div_ceil(layout.per_unit());
        // Quads feed the AMX tile too, which reads 32 rows at a time.
        let rows = m.next_multiple_of(if layout.pairs() {
            layout.mr()
        } else {
            AMX_ROWS
        });
        // Rows < m are written whole when k fills its units; otherwise (and for the padding
        // rows) the buffer must hold zeros, not the last call's bytes.
        let mut data = if k.is_multiple_of(layout.per_unit()) {
            pool.take_overwritten(rows * k4)
        } else {
            pool.take(rows * k4)
        };
        data[m * k4..].fill(0);
        QuantRows {
            data,
            scales: vec![0.0; rows],
            sums: vec![0; rows],
        }
    }
}

/// One row `x` quantized for `layout` into its units `d`: its scale and (quads) sum.
fn quantize_one(isa: Isa, layout: Layout, x: &[f32], d: &mut [u32]) -> (f32, i32) {
    if layout.pairs() {
        (
            quantize_pairs(isa, x, layout.act_qmax(x.len()) as f32, d),
            0,
        )
    } else {
        quantize_into(isa, x, d)
    }
}

/// A [`QuantRows`]' storage for tasks that each quantize their own rows.
#[derive(Clone, Copy)]
struct RowsDst {
    data: *mut u32,
    scales: *mut f32,
    sums: *mut i32,
    k4: usize,
    rows: usize,
}

// SAFETY: tasks write disjoint rows (see `RowsDst::put`).
unsafe impl Send for RowsDst {}
// SAFETY: as above.
unsafe impl Sync for RowsDst {}

impl RowsDst {
    fn new(qr: &mut QuantRows, k4: usize) -> Self {
        RowsDst {
            data: qr.data.as_mut_ptr(),
            scales: qr.scales.as_mut_ptr(),
            sums: qr.sums.as_mut_ptr(),
            k4,
            rows: qr.scales.len(),
        }
    }

    /// Row `i` quantized from `x` for `layout`.
    ///
    /// # Safety
    /// No other thread touches row `i` meanwhile, and the rows outlive the call.
    unsafe fn put(self, isa: Isa, layout: Layout, i: usize, x: &[f32]) {
        assert!(i < self.rows, "quantized row {i} past {}", self.rows);
        // SAFETY: row i lies inside the buffers (checked), and is this caller's alone.
        unsafe {
            let d = std::slice::from_raw_parts_mut(self.data.add(i * self.k4), self.k4);
            (*self.scales.add(i), *self.sums.add(i)) = quantize_one(isa, layout, x, d);
        }
    }
}

/// Quantizes `x` (Shape: [m, k]) row by row for `layout` into `data` (reused, any
/// contents), on the current pool.
fn quantize_rows(
    isa: Isa,
    layout: Layout,
    (x, norm): (&[f32], Option<&Norm>),
    m: usize,
    k: usize,
    pool: &Pool<u32>,
) -> QuantRows {
    let (mr, k4) = (layout.mr(), k.div_ceil(layout.per_unit()));
    let mut qr = QuantRows::sized(layout, m, k, pool);
    qr.data
        .par_chunks_mut(k4 * mr)
        .zip(qr.scales.par_chunks_mut(mr))
        .zip(qr.sums.par_chunks_mut(mr))
        .zip(x.par_chunks(k * mr))
        .for_each_init(
            || vec![0.0f32; if norm.is_some() { k } else { 0 }],
            |ln, (((dst, scales), sums), src)| {
                let rows = dst.chunks_exact_mut(k4).zip(src.chunks_exact(k));
                for ((d, s), (scale, sum)) in rows.zip(scales.iter_mut().zip(sums.iter_mut())) {
                    let s = match norm {
                        Some(n) => {
                            kernels::layer_norm(isa, s, &n.gamma, &n.beta, n.eps, ln);
                            &ln[..]
                        }
                        None => s,
                    };
                    (*scale, *sum) = quantize_one(isa, layout, s, d);
                }
            },
        );
    qr
}

/// One row quantized to `qmax` levels a side (at most 32 767) into i16 pairs `d` (Shape:
/// [k.div_ceil(2)]): its scale.
fn quantize_pairs(isa: Isa, x: &[f32], qmax: f32, d: &mut [u32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if pair_tile(isa) {
        // SAFETY: both paths imply AVX2; d holds x.len().div_ceil(2) pairs.
        return unsafe { kernels::x86_int8::quantize_row_pairs(x, qmax, d) };
    }
    let _ = isa;
    d.fill(0);
    quantize_levels(x, qmax, |i, v| {
        d[i / 2] |= (v as i16 as u16 as u32) << (16 * (i % 2))
    })
}

/// One row quantized into quads `d` (Shape: [k.div_ceil(4)]): its scale and sum.
fn quantize_into(isa: Isa, x: &[f32], d: &mut [u32]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 && isa.is_supported() {
        // SAFETY: the CPU has AVX-512 F/BW/VL; d holds x.len().div_ceil(4) quads.
        return unsafe { kernels::x86_int8::quantize_row(x, d) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: NEON is part of the aarch64 baseline.
        return unsafe { kernels::neon_int8::quantize_row(x, d) };
    }
    let _ = isa;
    // SAFETY: u32 → 4 i8 of the same memory, alignment 1 ≤ 4, length 4·d.len().
    let bytes = unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut i8, 4 * d.len()) };
    quantize_row(x, bytes)
}

impl CpuBackend {
    /// `out = x · Wᵀ + b` (then GELU when `gelu`) with int8 operands and i32 accumulation,
    /// on this backend's threads. Only for a weight that [`runs`] here; the caller has
    /// checked the shapes.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub(crate) fn linear_int8(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32], gelu: bool) {
        self.linears_int8(x, m, &mut [(w, out)], gelu);
    }

    /// [`CpuBackend::linear_int8`] for several weights of the same `n_in` and layout meeting
    /// the same `x`: the activations are quantized once.
    pub(crate) fn linears_int8(
        &self,
        x: &[f32],
        m: usize,
        products: &mut [(&Linear, &mut [f32])],
        gelu: bool,
    ) {
        let Some((n_in, Weight::Int8(first))) = products.first().map(|(w, _)| (w.n_in, &w.weight))
        else {
            return;
        };
        self.with_quant_rows(x, m, n_in, first.layout, None, |qr| {
            for (w, out) in products.iter_mut() {
                self.gemm_int8(qr, m, w, Out::Whole(out), Epi::gelu(gelu));
            }
        });
    }

    /// A 3-tap `conv1d` (padding 1) with int8 weights ([`crate::CpuBackend::conv1d`]'s
    /// shapes): each output step's column (its three input rows side by side) is gathered
    /// in a per-thread buffer and quantized at once, the bits of quantizing a stored column
    /// array, which for conv2 of a base window would be 9 MB of f32 written and read back.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conv_int8(
        &self,
        x: &[f32],
        c_in: usize,
        w: &Linear,
        stride: usize,
        t_out: usize,
        out: &mut [f32],
        epi: Epi,
    ) {
        let Weight::Int8(pw) = &w.weight else {
            unreachable!("conv_int8 takes int8 weights only")
        };
        let (layout, isa, k) = (pw.layout, self.isa, w.n_in);
        debug_assert_eq!(k, 3 * c_in);
        self.install(|| {
            let mut qr = QuantRows::sized(layout, t_out, k, &self.scratch_u32);
            let dst = RowsDst::new(&mut qr, k.div_ceil(layout.per_unit()));
            (0..t_out)
                .into_par_iter()
                .with_min_len(layout.mr())
                .for_each_init(
                    || vec![0.0f32; k],
                    |col, t| {
                        crate::conv::gather_column(x, c_in, stride, t, col);
                        // SAFETY: each output step t is one task's alone; `qr` outlives them.
                        unsafe { dst.put(isa, layout, t, col) };
                    },
                );
            self.gemm_int8(&qr, t_out, w, Out::Whole(out), epi);
            self.recycle(qr);
        });
    }

    /// `x · Wᵀ + b` with int8 operands into `out` (whole, or block by block: a residual
    /// add or a packing that never puts the product in memory). As
    /// [`CpuBackend::linear_int8`] otherwise.
    pub(crate) fn linear_int8_out(&self, x: &[f32], m: usize, w: &Linear, out: Out<'_>, epi: Epi) {
        let Weight::Int8(pw) = &w.weight else {
            unreachable!("linear_int8_out takes int8 weights only")
        };
        self.with_quant_rows(x, m, w.n_in, pw.layout, None, |qr| {
            self.gemm_int8(qr, m, w, out, epi)
        });
    }

    /// Runs `f` inside the pool on `x` (Shape: [m, k]) quantized row by row for `layout`,
    /// in a scratch buffer reused across calls. With `norm`, each row is the layer norm of
    /// `x`'s, made just before it is quantized (never stored as f32).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn with_quant_rows<R: Send>(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        layout: Layout,
        norm: Option<&Norm>,
        f: impl FnOnce(&QuantRows) -> R + Send,
    ) -> R {
        self.install(|| {
            let qr = self.quant_rows(x, m, k, layout, norm);
            let r = f(&qr);
            self.recycle(qr);
            r
        })
    }

    /// [`CpuBackend::with_quant_rows`]'s rows, owned (hand them back with
    /// [`CpuBackend::recycle`]); on the current pool.
    pub(crate) fn quant_rows(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        layout: Layout,
        norm: Option<&Norm>,
    ) -> QuantRows {
        quantize_rows(self.isa, layout, (x, norm), m, k, &self.scratch_u32)
    }

    /// Keeps `qr`'s buffer for later rows.
    pub(crate) fn recycle(&self, qr: QuantRows) {
        self.scratch_u32.give(qr.data);
    }

    /// An MLP's hidden rows, `gelu(qr · W₁ᵀ + b₁)`, quantized for a second product of
    /// `layout` as each task finishes its rows (whole rows per task, so a row's scale is
    /// known there): no f32 hidden array reaches memory. The bits of the f32 product, then
    /// [`CpuBackend::quant_rows`]. Quads only (the pair tiles stream their panels per row
    /// tile, which whole rows would take from L3); inside the pool.
    pub(crate) fn gemm_int8_hidden(
        &self,
        qr: &QuantRows,
        m: usize,
        w1: &Linear,
        layout: Layout,
    ) -> QuantRows {
        assert_eq!(layout, Layout::Quads, "hidden rows for quads only");
        let (n1, isa) = (w1.n_out, self.isa);
        let mut hidden = QuantRows::sized(layout, m, n1, &self.scratch_u32);
        let dst = RowsDst::new(&mut hidden, n1.div_ceil(layout.per_unit()));
        let finish = move |rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize| {
            assert_eq!(cols, 0..n1, "hidden rows come whole");
            for (r, i) in rows.enumerate() {
                // SAFETY: row i < m belongs to this task's block alone; `hidden` outlives
                // the GEMM.
                unsafe { dst.put(isa, layout, i, &blk[r * ld..][..n1]) };
            }
        };
        self.gemm_int8_with(qr, m, w1, Out::Blocks(&finish), Epi::Gelu, true);
        hidden
    }

    /// The int8 product of quantized rows `qr` with `w`, inside the pool.
    pub(crate) fn gemm_int8(&self, qr: &QuantRows, m: usize, w: &Linear, out: Out<'_>, epi: Epi) {
        self.gemm_int8_with(qr, m, w, out, epi, false);
    }

    /// [`CpuBackend::gemm_int8`]; with `whole_rows` (quads only) each task's block spans
    /// every column, rows as many as keep it within [`WHOLE_ROWS_BLOCK`].
    fn gemm_int8_with(
        &self,
        qr: &QuantRows,
        m: usize,
        w: &Linear,
        out: Out<'_>,
        epi: Epi,
        whole_rows: bool,
    ) {
        let Weight::Int8(pw) = &w.weight else {
            unreachable!("linear_int8 takes int8 weights only")
        };
        let (n, k4, layout) = (pw.n_out, pw.units(), pw.layout);
        #[cfg(target_arch = "x86_64")]
        if layout == Layout::Quads && self.amx_int8() {
            return self.gemm_int8_amx(qr, m, w, pw, out, epi, whole_rows);
        }
        let (mr, nr) = (layout.mr(), layout.nr());
        let bias = w.bias.as_deref();
        // Whole rows of k per tile: the tile has no sums to continue from. On x86 a row
        // tile stays in L1 while the block's panels (at most ~256 KiB) stream from L2: its
        // broadcast activations hit L1, the panels are one stream each for the prefetcher.
        // Against columns outer (the row block streamed past each panel) on Zen 4, q8_0
        // windows alternated: MLP ~2% faster, out-projection ~6%, the rest level.
        let panel_bytes = 4 * k4 * nr;
        let blocks = match layout {
            Layout::Quads => Blocks {
                mr,
                nr,
                mc: MC_TILES * mr,
                nc: NC_TILES * nr,
                kc: usize::MAX,
                // aarch64's `sdot` tile keeps the order it was measured in.
                rows_outer: cfg!(target_arch = "x86_64"),
            },
            Layout::Pairs | Layout::WidePairs => Blocks {
                mr,
                nr,
                mc: MC_TILES * mr,
                nc: nr * ((256 << 10) / panel_bytes).clamp(1, 2 * NC_TILES),
                kc: usize::MAX,
                rows_outer: true,
            },
        };
        let blocks = if whole_rows {
            blocks.whole_rows(n)
        } else {
            blocks
        };
        for_each_tile(self.isa, blocks, (m, n, k4), out, epi, |t, c, ldc| {
            let b = pw.panel(t.jc / nr);
            let epi = Epilogue {
                w_scales: &pw.scales[t.jc..t.jc + nr],
                bias: bias.map(|b| &b[t.jc..t.jc + t.cols]),
                add: epi == Epi::Residual,
            };
            let a = &qr.data[t.ic * k4..(t.ic + mr) * k4];
            let (a_scales, a_sums) = (&qr.scales[t.ic..t.ic + mr], &qr.sums[t.ic..t.ic + mr]);
            // SAFETY: `runs` holds (the caller's check): the CPU has the layout's tile; a
            // holds mr rows of k4 units and b k4·nr; the tile's rows and columns lie at
            // `c` (ldc apart) in its task's block, which no other task writes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use kernels::x86_int8 as k;
                let (a, b) = (a.as_ptr(), b.as_ptr());
                let (rows, cols) = (t.rows, t.cols);
                match layout {
                    Layout::Quads => k::tile(k4, a, b, c, ldc, rows, cols, a_scales, a_sums, &epi),
                    Layout::Pairs | Layout::WidePairs => {
                        k::tile_avx2(k4, a, b, c, ldc, rows, cols, a_scales, &epi)
                    }
                }
            };
            // SAFETY: as above; on aarch64 `runs` means quads on the `sdot` tile.
            #[cfg(target_arch = "aarch64")]
            unsafe {
                let _ = a_sums;
                let (a, b, rows, cols) = (a.as_ptr(), b.as_ptr(), t.rows, t.cols);
                kernels::neon_int8::tile(k4, a, b, c, ldc, rows, cols, a_scales, &epi)
            };
            #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
            let _ = (a, b, a_scales, a_sums, &epi, c, ldc);
        });
    }
}

impl CpuBackend {
    /// Whether the int8 GEMM's quads run on AMX tiles here.
    #[cfg(target_arch = "x86_64")]
    fn amx_int8(&self) -> bool {
        self.amx() && sotto_isa::amx_int8()
    }

    /// [`CpuBackend::gemm_int8`] for [`Layout::Quads`] on AMX tiles: 32 × 32 output tiles
    /// over the whole of k, the same bits as the VNNI tile.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn gemm_int8_amx(
        &self,
        qr: &QuantRows,
        m: usize,
        w: &Linear,
        pw: &I8Packed,
        out: Out<'_>,
        epi: Epi,
        whole_rows: bool,
    ) {
        use kernels::x86_amx::{TC, TR};
        const _: () = assert!(TC == NR && TR == AMX_ROWS);
        let (n, k4) = (pw.n_out, pw.units());
        let bias = w.bias.as_deref();
        let blocks = if whole_rows {
            Blocks::AMX.whole_rows(n)
        } else {
            Blocks::AMX
        };
        for_each_tile(self.isa, blocks, (m, n, k4), out, epi, |t, c, ldc| {
            if t.first {
                // SAFETY: `amx_int8` holds: AMX runs and the process has the tile state.
                unsafe { kernels::x86_amx::reconfigure() };
            }
            let b = pw.panel(t.jc / NR);
            let w_scales = &pw.scales[t.jc..t.jc + NR];
            let bias = bias.map(|b| &b[t.jc..t.jc + t.cols]);
            let a = &qr.data[t.ic * k4..(t.ic + TR) * k4];
            let (a_scales, a_sums) = (&qr.scales[t.ic..t.ic + TR], &qr.sums[t.ic..t.ic + TR]);
            // SAFETY: `amx_int8` holds (AMX-INT8 with the tile state, AVX-512), and this task
            // configured the tiles at its first; a holds TR
            // rows of k4 quads (rows padded to AMX_ROWS), b k4·NR; the tile's rows and
            // columns lie at `c` (ldc apart) in its task's block, which no other task writes.
            unsafe {
                kernels::x86_amx::tile_i8(
                    k4,
                    a.as_ptr(),
                    b.as_ptr(),
                    c,
                    ldc,
                    (t.rows, t.cols),
                    (a_scales, a_sums),
                    (w_scales, bias, epi == Epi::Residual),
                )
            };
        });
    }
}

/// Scalar model of the int8 GEMM: `out = x · Wᵀ + b` with each row of `x` quantized as the
/// GEMM does for `w`'s layout (127 levels for quads, [`pair_qmax`] for pairs, [`wide_qmax`]
/// for wide pairs), exact i32
/// products, then `(Σ q_x q_w) · (s_x s_w) + b` in f32.
///
/// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
pub fn linear_reference(
    x: &[f32],
    m: usize,
    w: &I8Packed,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    let (n, k) = (w.n_out, w.n_in);
    crate::blocked::check_reference("int8 linear", x, m, (n, k), bias, out)?;
    let qmax = w.layout.act_qmax(k);
    let mut q = vec![0i32; k];
    for (xi, oi) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(n.max(1))) {
        q.fill(0);
        let sx = quantize_levels(xi, qmax as f32, |i, v| q[i] = v);
        for (j, o) in oi.iter_mut().enumerate() {
            let dot: i32 = (0..k).map(|c| q[c] as i32 * w.q(j, c)).sum();
            *o = dot as f32 * (w.scales[j] * sx) + bias.map_or(0.0, |b| b[j]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{check_packed_fallback, check_packed_gemm, max_abs_diff, rand_vec};

    #[test]
    fn rows_quantize_symmetric_ties_even() {
        let mut q = [0i8; 8];
        let (s, sum) = quantize_row(&[1.27, -1.27, 0.005, 0.015, 0.0, 0.635], &mut q);
        assert!((s - 0.01).abs() < 1e-7);
        // 0.5 → 0 and 1.5 → 2 (ties to even), 63.5 → 64; past the input, zeros.
        assert_eq!(q, [127, -127, 0, 2, 0, 64, 0, 0]);
        assert_eq!(sum, 66);
        assert_eq!(quantize_row(&[0.0; 3], &mut q), (0.0, 0));
        assert_eq!(q, [0; 8]);
        // Whole blocks of 64 (the AVX-512 path packs those), with and without a tail.
        for len in [1003, 1002, 384, 130, 64, 17, 16, 5] {
            let xs = rand_vec(len, 9);
            let mut want = vec![0i8; len.next_multiple_of(4)];
            let (s, sum) = quantize_row(&xs, &mut want);
            for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon] {
                let mut got = vec![0u32; len.div_ceil(4)];
                assert_eq!(quantize_into(isa, &xs, &mut got), (s, sum), "{isa:?}");
                let bytes: Vec<i8> = got
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .map(|b| b as i8)
                    .collect();
                assert_eq!(bytes, want, "{isa:?} quads, {len}");
                // Pairs: pair_qmax(len) levels, the scalar model's values.
                let qmax = pair_qmax(len);
                let mut levels = vec![0i16; len.next_multiple_of(2)];
                let sp = quantize_levels(&xs, qmax as f32, |i, v| levels[i] = v as i16);
                assert!(levels.iter().any(|&v| v.abs() as i32 == qmax));
                let mut pairs = vec![0u32; len.div_ceil(2)];
                assert_eq!(
                    quantize_pairs(isa, &xs, qmax as f32, &mut pairs),
                    sp,
                    "{isa:?}"
                );
                let wide: Vec<i16> = pairs
                    .iter()
                    .flat_map(|&v| [v as u16 as i16, (v >> 16) as u16 as i16])
                    .collect();
                assert_eq!(wide, levels, "{isa:?} pairs, {len}");
            }
        }
        // NaN is skipped by the max and quantized to 0 on every path, in and past the
        // vector part (and in and past AVX-512's blocks of 64).
        let mut xs = rand_vec(101, 4);
        for i in [3, 20, 35, 70, 99] {
            xs[i] = f32::NAN;
        }
        let mut want = vec![0i8; 104];
        let (s, sum) = quantize_row(&xs, &mut want);
        assert!(s > 0.0 && want[3] == 0 && want[35] == 0 && want[99] == 0);
        let mut levels = [0u32; 51];
        let sp = quantize_pairs(Isa::Scalar, &xs, 999.0, &mut levels);
        for isa in [Isa::Avx2, Isa::Avx512, Isa::Neon] {
            let mut got = vec![0u32; 26];
            assert_eq!(quantize_into(isa, &xs, &mut got), (s, sum), "{isa:?} NaN");
            let bytes: Vec<i8> = got
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .map(|b| b as i8)
                .collect();
            assert_eq!(bytes, want, "{isa:?} NaN quads");
            let mut pairs = [0u32; 51];
            assert_eq!(
                quantize_pairs(isa, &xs, 999.0, &mut pairs),
                sp,
                "{isa:?} NaN"
            );
            assert_eq!(pairs, levels, "{isa:?} NaN pairs");
        }
        let mut pairs = [7u32; 3];
        assert_eq!(quantize_pairs(Isa::Avx2, &[0.0; 5], 99.0, &mut pairs), 0.0);
        assert_eq!(pairs, [0; 3]);
    }

    #[test]
    fn packed_reads_back_quantized() {
        let (n, k) = (37, 9);
        let w = rand_vec(n * k, 3);
        let quads = I8Packed::with_layout(&w, n, k, Layout::Quads).unwrap();
        for layout in [Layout::Quads, Layout::Pairs, Layout::WidePairs] {
            let p = I8Packed::with_layout(&w, n, k, layout).unwrap();
            let mut back = vec![0.0; n * k - 5];
            p.read_f32(5, &mut back);
            for (e, (b, &v)) in back.iter().zip(&w[5..]).enumerate() {
                let j = (e + 5) / k;
                assert!(
                    (b - v).abs() <= p.scales[j] * 0.5 + 1e-7,
                    "{layout:?} element {}",
                    e + 5
                );
            }
            // The same quantized values in either int8 layout; the wide one's levels.
            for (j, c) in (0..n).flat_map(|j| (0..k).map(move |c| (j, c))) {
                if layout == Layout::WidePairs {
                    assert!(p.q(j, c).abs() <= wide_qmax(k), "({j}, {c})");
                } else {
                    assert_eq!(p.q(j, c), quads.q(j, c), "{layout:?} ({j}, {c})");
                }
            }
            // From f16 bytes at an odd offset: the f16 values' quantization, bit for bit.
            let halves: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
            let mut bytes = vec![0u8];
            bytes.extend(halves.iter().flat_map(|h| h.to_le_bytes()));
            let from_bytes = I8Packed::from_f16_le_bytes(&bytes[1..], n, k, layout).unwrap();
            let widened: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            let want = I8Packed::with_layout(&widened, n, k, layout).unwrap();
            assert_eq!(
                (from_bytes.data, from_bytes.scales),
                (want.data, want.scales)
            );
            assert!(I8Packed::from_f16_le_bytes(&bytes[1..], n, k + 1, layout).is_err());
            assert!(I8Packed::from_f16_le_bytes(&bytes, n, k, layout).is_err());
            assert!(I8Packed::with_layout(&w, n, k + 1, layout).is_err());
        }
    }

    /// Both tiles (where this CPU has them), partial row and column tiles, odd k, deep k
    /// (narrower AVX2 task blocks) and 1–3 threads: exact sums, so the reference's bits.
    #[test]
    fn tiles_equal_reference_bitwise() {
        let cases = [
            (Layout::Pairs, Isa::Avx2),
            (Layout::WidePairs, Isa::Avx2),
            (Layout::Quads, Isa::Avx512),
            (Layout::Quads, Isa::Neon),
        ];
        let mut ran = false;
        for (m, n, k) in [(101, 130, 301), (13, 40, 2050), (17, 17, 3)] {
            let (x, w, b) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
            for (layout, isa) in cases {
                let pw = I8Packed::with_layout(&w, n, k, layout).unwrap();
                let mut want = vec![0.0; m * n];
                linear_reference(&x, m, &pw, Some(&b), &mut want).unwrap();
                let lin = Linear::new(Weight::Int8(pw), Some(b.clone()), n, k).unwrap();
                if !runs(isa, &lin.weight) {
                    continue;
                }
                ran = true;
                // AMX's int8 tile where the CPU has one, and the VNNI tile.
                for (threads, amx) in [1, 2, 3].into_iter().flat_map(|t| [(t, true), (t, false)]) {
                    let be = CpuBackend::with_isa(threads, isa).unwrap().with_amx(amx);
                    let mut got = vec![f32::NAN; m * n];
                    be.linear(&x, m, &lin, &mut got).unwrap();
                    let amx = be.amx();
                    assert_eq!(
                        got, want,
                        "{m}×{n}×{k} {layout:?} {threads} threads, amx {amx}"
                    );
                }
            }
        }
        if !ran {
            eprintln!("skipped: no AVX2");
        }
    }

    /// The pair layouts' levels keep the widest sums inside i32: a full-scale row against
    /// full-scale weights, at the k where the levels stop being capped by i16 and past it,
    /// sums exactly as the reference does.
    #[test]
    fn pair_levels_never_overflow() {
        assert_eq!(pair_qmax(384), 32767);
        assert_eq!(pair_qmax(2048), 8256);
        assert_eq!(pair_qmax(5120), 3302);
        assert_eq!(
            [2, 3, 384, 512, 1536, 2048].map(wide_qmax),
            [32767, 26754, 2364, 2047, 1182, 1023]
        );
        for k in 1..5000 {
            let (q, k) = (wide_qmax(k) as i64, k as i64);
            assert!(k * q * q <= i32::MAX as i64, "k {k}");
            assert!(
                q == 32767 || k * (q + 1) * (q + 1) > i32::MAX as i64,
                "k {k}"
            );
        }
        let cases = [
            (Layout::Pairs, (i32::MAX / (127 * 32767)) as usize),
            (Layout::Pairs, 5121),
            (Layout::WidePairs, 2),
            (Layout::WidePairs, 3),
            (Layout::WidePairs, 2048),
            (Layout::WidePairs, 5121),
        ];
        for (layout, k) in cases {
            let (m, n) = (9, 16);
            let x = vec![-1.0f32; m * k];
            let w = vec![1.0f32; n * k];
            let pw = I8Packed::with_layout(&w, n, k, layout).unwrap();
            let sum = k as i64 * layout.act_qmax(k) as i64 * layout.weight_qmax(k) as i64;
            assert!(sum <= i32::MAX as i64, "{layout:?} k {k}");
            let mut want = vec![0.0; m * n];
            linear_reference(&x, m, &pw, None, &mut want).unwrap();
            assert!(
                want.iter()
                    .all(|&v| (v + k as f32).abs() <= 1e-3 * k as f32),
                "{layout:?} k {k}"
            );
            let lin = Linear::new(Weight::Int8(pw), None, n, k).unwrap();
            if runs(Isa::Avx2, &lin.weight) {
                let be = CpuBackend::with_isa(2, Isa::Avx2).unwrap();
                let mut got = vec![0.0; m * n];
                be.linear(&x, m, &lin, &mut got).unwrap();
                assert_eq!(got, want, "{layout:?} k {k}");
            }
        }
    }

    /// Quads need VNNI: on an AVX2 backend they take the f32 path over their values; pairs
    /// run on AVX-512 backends too.
    #[test]
    fn layouts_pick_their_tiles() {
        let w = Weight::Int8(
            I8Packed::with_layout(&rand_vec(40 * 30, 2), 40, 30, Layout::Quads).unwrap(),
        );
        assert!(!runs(Isa::Avx2, &w) && !runs(Isa::Scalar, &w));
        let pairs = I8Packed::with_layout(&rand_vec(40 * 30, 2), 40, 30, Layout::Pairs).unwrap();
        let pairs = Weight::Int8(pairs);
        let wide = Weight::Int8(
            I8Packed::with_layout(&rand_vec(40 * 30, 2), 40, 30, Layout::WidePairs).unwrap(),
        );
        for p in [&pairs, &wide] {
            assert!(!runs(Isa::Scalar, p));
            assert_eq!(runs(Isa::Avx2, p), Isa::Avx2.is_supported());
            assert_eq!(runs(Isa::Avx512, p), Isa::Avx512.is_supported());
        }
        // Never together: one of them cannot run, or their activations differ.
        assert!(!runs_together(Isa::Avx512, [&w, &pairs].into_iter()));
        assert!(!runs_together(Isa::Avx2, [&wide, &pairs].into_iter()));
        assert_eq!(
            runs_together(Isa::Avx2, [&wide, &wide].into_iter()),
            Isa::Avx2.is_supported()
        );
        check_packed_fallback(w, 40, 30);
    }

    #[test]
    fn simd_matches_reference_and_f32() {
        // The selected kernel path's (`SOTTO_FORCE_ISA` may select the scalar one).
        if !int8_gemm_active() {
            eprintln!("skipped: no integer GEMM on the selected kernel path");
            return;
        }
        let pack = |w: &[f32], n, k| match Weight::F32(w.to_vec()).for_int8_gemm(n, k, true) {
            Ok(p @ Weight::Int8(_)) => Some(p),
            _ => None,
        };
        let reference = |x: &[f32], m, w: &Weight, bias: Option<&[f32]>, out: &mut [f32]| {
            let Weight::Int8(pw) = w else { unreachable!() };
            linear_reference(x, m, pw, bias, out).unwrap()
        };
        // Exact integer sums (only the f32 scaling may round differently); against f32 each
        // operand is off by up to half a step of 1/127.
        check_packed_gemm(&pack, &reference, &|_| 1e-5, &|k| 0.01 * (k as f32).sqrt());
        // The wide levels: steps of 1/1 023 or finer for these k, so 8× closer to f32.
        let wide = |w: &[f32], n, k| match Weight::F32(w.to_vec()).for_int16_gemm(n, k) {
            Ok(p @ Weight::Int8(_)) => Some(p),
            _ => None,
        };
        check_packed_gemm(&wide, &reference, &|_| 1e-5, &|k| {
            0.00125 * (k as f32).sqrt()
        });
    }

    #[test]
    fn zero_and_outlier_rows() {
        let (m, n, k) = (11, 40, 70);
        let mut x = rand_vec(m * k, 4);
        x[2 * k..3 * k].fill(0.0);
        x[5 * k + 7] = 300.0;
        let w = rand_vec(n * k, 5);
        let Ok(Weight::Int8(pw)) = Weight::F32(w.clone()).for_int8_gemm(n, k, true) else {
            eprintln!("skipped: no integer GEMM on this CPU");
            return;
        };
        if !int8_gemm_active() {
            eprintln!("skipped: no integer GEMM on the selected kernel path");
            return;
        }
        let mut want = vec![0.0; m * n];
        linear_reference(&x, m, &pw, None, &mut want).unwrap();
        let be = CpuBackend::new(2).unwrap();
        let mut got = vec![0.0; m * n];
        let lin = Linear::new(Weight::Int8(pw), None, n, k).unwrap();
        be.linear(&x, m, &lin, &mut got).unwrap();
        assert!(max_abs_diff(&got, &want) <= 1e-3);
        assert!(got[2 * n..3 * n].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn int8_weight_without_simd_takes_f32_path() {
        match Weight::F32(rand_vec(40 * 30, 2)).for_int8_gemm(40, 30, true) {
            Ok(p @ Weight::Int8(_)) => check_packed_fallback(p, 40, 30),
            _ => eprintln!("skipped: no AVX2"),
        }
    }
}
