//! f32 GEMM for the encoder's many-row products on AVX-512 and AVX2 CPUs: the f32
//! encoder, which is what runs where AVX-512 BF16 is missing (AVX2 laptops and desktops,
//! AMD before Zen 4, Intel's Skylake to Ice Lake servers).
//!
//! Weights are packed once at load ([`F32Packed`]) in the order the microkernel streams
//! them: panels of `nr` output columns (64 for the AVX-512 tile, 16 for the AVX2 one), each
//! a run of k rows of `nr` values, in f32 (f16 weights for AVX2 stay f16, widened in the
//! tile). Activations are read in place (only
//! a last partial row tile is copied).
//! Every output adds its k products by fused multiply-adds in order, bias last, so
//! [`linear_reference`] reproduces it exactly. The gemm crate this replaces reached ~40% of
//! the f32 peak on a Zen 5 core and widened f16 weights to a fresh f32 copy on every call.

use half::f16;

use crate::blocked::{for_each_tile, Blocks, Epi, Out};
#[cfg(target_arch = "x86_64")]
use crate::kernels;
use crate::tiled::column_panels;
use crate::{shape_err, CpuBackend, Isa, Linear, Result, Weight};

/// Rows per microkernel tile.
pub(crate) const MR: usize = 6;
/// Columns per AVX-512 tile (and packed weight panel): four 16-lane registers, so 24
/// accumulators take 4 loads and 6 broadcasts per k step.
const NR_AVX512: usize = 64;
/// Columns per AVX2 tile: two 8-lane registers, so 12 accumulators, 2 loads and 6
/// broadcasts per k step fill 15 of the 16 registers.
const NR_AVX2: usize = 16;

/// The cache blocks of the tile `nr` wide. AVX-512: a `KC·NR` weight panel block is 32 KiB
/// (L1) and stays there while the row tiles pass. AVX2: a whole d (384, 512) per k block,
/// fewer passes that reload and store the output tiles; each row tile (≤ 12 KiB) stays in
/// L1 while the block's 16 panels stream from L2 (on Zen 3, 3–12% faster than 256 and
/// panels outermost). Row blocks of 16 tiles keep their activations in L2.
fn blocks(nr: usize) -> Blocks {
    let avx2 = nr == NR_AVX2;
    Blocks {
        mr: MR,
        nr,
        mc: 16 * MR,
        nc: 256,
        kc: if avx2 { 512 } else { 128 },
        rows_outer: avx2,
    }
}

/// Whether this CPU runs the f32 GEMM (AVX-512 F, or AVX2 and FMA).
pub fn f32_gemm_supported() -> bool {
    simd(sotto_isa::isa())
}

/// Whether a backend on kernel path `isa` runs this GEMM (AVX-512 F, or AVX2 and FMA).
pub(crate) fn simd(isa: Isa) -> bool {
    panel_width(isa).is_some()
}

/// The panel width that kernel path `isa` packs for, where it runs this GEMM.
fn panel_width(isa: Isa) -> Option<usize> {
    if !cfg!(target_arch = "x86_64") || !isa.is_supported() {
        return None;
    }
    match isa {
        Isa::Avx512 => Some(NR_AVX512),
        Isa::Avx2 => Some(NR_AVX2),
        _ => None,
    }
}

/// Whether a backend on kernel path `isa` runs the GEMM on `w` (packed for its tile, or
/// for the AVX2 tile, which AVX-512 CPUs run too).
pub(crate) fn runs(isa: Isa, w: &Weight) -> bool {
    let Weight::F32Packed(pw) = w else {
        return false;
    };
    match panel_width(isa) {
        Some(NR_AVX512) => true,
        Some(_) => pw.nr == NR_AVX2,
        None => false,
    }
}

/// An `n_out × n_in` weight packed for [`CpuBackend::linear`]'s f32 GEMM:
/// `n_out.div_ceil(nr)` panels, each Shape: [n_in, nr], columns past `n_out` zero.
///
/// Panels for the AVX2 tile keep an f16 weight's values as f16 (the tile widens them
/// exactly as it loads them): the same products at half the memory, and a load that writes
/// half the bytes. The AVX-512 tile reads f32.
#[derive(Clone, Debug)]
pub struct F32Packed {
    data: Panels,
    n_out: usize,
    n_in: usize,
    /// Panel width: the columns of the tile it is packed for.
    nr: usize,
}

#[derive(Clone, Debug)]
enum Panels {
    F32(Vec<f32>),
    F16(Vec<f16>),
}

/// One column panel of a [`F32Packed`]. Shape: [n_in, nr].
#[derive(Clone, Copy)]
enum Panel<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
}

impl Panel<'_> {
    fn get(self, i: usize) -> f32 {
        match self {
            Panel::F32(p) => p[i],
            Panel::F16(p) => p[i].to_f32(),
        }
    }
}

/// `n_out` rows of `n_in` source values laid out in panels `nr` wide (16 or 64), each
/// value through `conv`.
fn pack<S: Copy + Sync, T: Copy + Default + Send>(
    rows: &[S],
    n_out: usize,
    n_in: usize,
    nr: usize,
    conv: impl Fn(S) -> T + Sync,
) -> Vec<T> {
    match nr {
        NR_AVX2 => column_panels::<S, T, NR_AVX2>(rows, n_out, n_in, conv),
        _ => column_panels::<S, T, NR_AVX512>(rows, n_out, n_in, conv),
    }
}

fn check_len(len: usize, n_out: usize, n_in: usize) -> Result<()> {
    if len != n_out * n_in {
        return Err(shape_err(
            "f32 pack",
            format!("{len} values for a {n_out}×{n_in} weight"),
        ));
    }
    Ok(())
}

impl F32Packed {
    /// Packs row-major `rows` (Shape: [n_out, n_in]) for this CPU's tile (the AVX2 one
    /// where AVX-512 is missing).
    pub fn new(rows: &[f32], n_out: usize, n_in: usize) -> Result<Self> {
        Self::with_width(rows, n_out, n_in, this_width())
    }

    /// [`F32Packed::new`] from f16 values: kept as f16 in panels for the AVX2 tile,
    /// widened in panels for the AVX-512 one.
    pub fn from_f16(rows: &[f16], n_out: usize, n_in: usize) -> Result<Self> {
        Self::f16_panels(rows, n_out, n_in, this_width(), |v| v)
    }

    /// [`F32Packed::from_f16`] from the values' little-endian bytes (a mapped file's, at
    /// any alignment), without an f16 copy of them first.
    pub fn from_f16_le_bytes(bytes: &[u8], n_out: usize, n_in: usize) -> Result<Self> {
        let (pairs, rest) = bytes.as_chunks::<2>();
        if !rest.is_empty() {
            return Err(shape_err(
                "f32 pack",
                format!("{} bytes of f16", bytes.len()),
            ));
        }
        Self::f16_panels(pairs, n_out, n_in, this_width(), f16::from_le_bytes)
    }

    /// [`F32Packed::new`] in panels `nr` wide (16 or 64).
    fn with_width(rows: &[f32], n_out: usize, n_in: usize, nr: usize) -> Result<Self> {
        debug_assert!(nr == NR_AVX2 || nr == NR_AVX512);
        check_len(rows.len(), n_out, n_in)?;
        Ok(Self {
            data: Panels::F32(pack(rows, n_out, n_in, nr, |v| v)),
            n_out,
            n_in,
            nr,
        })
    }

    /// Panels `nr` wide of the f16 values `half(rows[i])`: f16 for the AVX2 tile (16),
    /// widened for the AVX-512 one (64).
    fn f16_panels<S: Copy + Sync>(
        rows: &[S],
        n_out: usize,
        n_in: usize,
        nr: usize,
        half: impl Fn(S) -> f16 + Sync,
    ) -> Result<Self> {
        debug_assert!(nr == NR_AVX2 || nr == NR_AVX512);
        check_len(rows.len(), n_out, n_in)?;
        let data = if nr == NR_AVX2 {
            Panels::F16(pack(rows, n_out, n_in, nr, half))
        } else {
            Panels::F32(pack(rows, n_out, n_in, nr, |v| half(v).to_f32()))
        };
        Ok(Self {
            data,
            n_out,
            n_in,
            nr,
        })
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// Bytes of the packed panels.
    pub fn bytes(&self) -> usize {
        match &self.data {
            Panels::F32(d) => 4 * d.len(),
            Panels::F16(d) => 2 * d.len(),
        }
    }

    /// Column panel `jp`. Shape: [n_in, nr].
    fn panel(&self, jp: usize) -> Panel<'_> {
        let len = self.n_in * self.nr;
        match &self.data {
            Panels::F32(d) => Panel::F32(&d[jp * len..(jp + 1) * len]),
            Panels::F16(d) => Panel::F16(&d[jp * len..(jp + 1) * len]),
        }
    }

    /// Row-major elements `start..start + out.len()`. Panics when the range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        assert!(
            end <= self.n_out * self.n_in,
            "read_f32: {start}..{end} past the end"
        );
        for (o, e) in out.iter_mut().zip(start..end) {
            let (j, c) = (e / self.n_in, e % self.n_in);
            *o = self.panel(j / self.nr).get(c * self.nr + j % self.nr);
        }
    }
}

/// The panel width of this CPU's tile (the AVX2 one where neither runs, for tests).
fn this_width() -> usize {
    panel_width(sotto_isa::isa()).unwrap_or(NR_AVX2)
}

impl Weight {
    /// The same weight packed for the f32 GEMM ([`Weight::F32Packed`]) when `enable` and
    /// this CPU runs it (AVX-512 F, or AVX2 and FMA); f32, f16 and block-quantized weights
    /// are converted (f16 ones packed straight from their values), anything else is
    /// returned as it is. For weights only ever multiplied by many rows.
    pub fn for_f32_gemm(self, n_out: usize, n_in: usize, enable: bool) -> Result<Self> {
        if !enable || !simd(sotto_isa::isa()) {
            return Ok(self);
        }
        match self {
            Weight::F32(rows) => Ok(Weight::F32Packed(F32Packed::new(&rows, n_out, n_in)?)),
            Weight::F16(rows) => Ok(Weight::F32Packed(F32Packed::from_f16(&rows, n_out, n_in)?)),
            w
            @ (Weight::F16Tiled(_) | Weight::Quant { .. } | Weight::Bf16(_) | Weight::Int8(_)) => {
                check_len(w.len(), n_out, n_in)?;
                let mut rows = vec![0.0f32; n_out * n_in];
                w.read_f32(0, &mut rows);
                Ok(Weight::F32Packed(F32Packed::new(&rows, n_out, n_in)?))
            }
            other => Ok(other),
        }
    }
}

impl CpuBackend {
    /// `out = x · Wᵀ + b` (then as `epi` says) in f32 on this backend's threads. Only for
    /// [`Weight::F32Packed`] on a backend where [`runs`] holds; the caller has checked the
    /// shapes.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub(crate) fn linear_f32(&self, x: &[f32], m: usize, w: &Linear, out: Out<'_>, epi: Epi) {
        let Weight::F32Packed(pw) = &w.weight else {
            unreachable!("linear_f32 takes packed f32 weights only")
        };
        let k = pw.n_in;
        // Whole row tiles read `x` in place; the rows of a last partial one are copied
        // into a zero-padded tile, since the microkernel reads all MR rows.
        let full = m / MR * MR;
        let mut tail = self.scratch_f32.take(if full < m { MR * k } else { 0 });
        tail[..(m - full) * k].copy_from_slice(&x[full * k..]);
        self.install(|| self.gemm_f32_packed(x, &tail, m, pw, w.bias.as_deref(), out, epi));
        self.scratch_f32.give(tail);
    }

    /// The product of `x` (rows `full..m` taken from `tail`) with `pw`, inside the pool.
    #[allow(clippy::too_many_arguments)]
    fn gemm_f32_packed(
        &self,
        x: &[f32],
        tail: &[f32],
        m: usize,
        pw: &F32Packed,
        bias: Option<&[f32]>,
        out: Out<'_>,
        epi: Epi,
    ) {
        let (n, k, nr) = (pw.n_out, pw.n_in, pw.nr);
        let full = m / MR * MR;
        assert_ne!(
            epi,
            Epi::Residual,
            "the f32 tiles store; residuals add by block"
        );
        for_each_tile(self.isa, blocks(nr), (m, n, k), out, epi, |t, c, ldc| {
            let b = t.p0 * nr..(t.p0 + t.len) * nr;
            let b = match pw.panel(t.jc / nr) {
                Panel::F32(p) => Panel::F32(&p[b]),
                Panel::F16(p) => Panel::F16(&p[b]),
            };
            let bias = bias.filter(|_| t.last).map(|b| &b[t.jc..t.jc + t.cols]);
            let a = if t.ic < full {
                &x[t.ic * k + t.p0..(t.ic + MR - 1) * k + t.p0 + t.len]
            } else {
                &tail[t.p0..(MR - 1) * k + t.p0 + t.len]
            };
            let a = a.as_ptr();
            // SAFETY: `runs` holds (the caller's check): AVX-512 F for 64-wide panels,
            // AVX2, FMA and F16C for 16; a holds MR rows of k from p0 (len used) and b
            // len·nr values; the tile's rows and columns lie at `c` (ldc apart) in its
            // task's block, which no other task writes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                use kernels::x86_f32::{tile, tile_avx2};
                const V2: usize = NR_AVX2 / 8;
                let (len, rows, cols, acc) = (t.len, t.rows, t.cols, t.acc);
                match b {
                    Panel::F32(b) if nr == NR_AVX512 => tile::<MR, { NR_AVX512 / 16 }>(
                        len,
                        a,
                        k,
                        b.as_ptr(),
                        c,
                        ldc,
                        rows,
                        cols,
                        acc,
                        bias,
                    ),
                    Panel::F32(b) => {
                        let b = b.as_ptr();
                        tile_avx2::<MR, V2, f32>(len, a, k, b, c, ldc, rows, cols, acc, bias)
                    }
                    Panel::F16(b) => {
                        let b = b.as_ptr();
                        tile_avx2::<MR, V2, f16>(len, a, k, b, c, ldc, rows, cols, acc, bias)
                    }
                }
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (a, b, bias, c, ldc);
        });
    }
}

/// Scalar model of the f32 GEMM: `out = x · Wᵀ + b`, each output's products added by fused
/// multiply-adds in order of k, the bias last.
///
/// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
pub fn linear_reference(
    x: &[f32],
    m: usize,
    w: &F32Packed,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    let (n, k) = (w.n_out, w.n_in);
    crate::blocked::check_reference("f32 linear", x, m, (n, k), bias, out)?;
    for (i, oi) in out.chunks_exact_mut(n.max(1)).enumerate().take(m) {
        let xi = &x[i * k..(i + 1) * k];
        for (j, o) in oi.iter_mut().enumerate() {
            let (panel, nr) = (w.panel(j / w.nr), w.nr);
            let acc = xi.iter().enumerate().fold(0.0f32, |acc, (p, &a)| {
                a.mul_add(panel.get(p * nr + j % nr), acc)
            });
            *o = acc + bias.map_or(0.0, |b| b[j]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{check_packed_fallback, check_packed_gemm, rand_vec};

    #[test]
    fn packed_reads_back() {
        let (n, k) = (70, 9);
        let w = rand_vec(n * k, 3);
        let p = F32Packed::new(&w, n, k).unwrap();
        let mut back = vec![0.0; n * k - 5];
        p.read_f32(5, &mut back);
        assert_eq!(back, w[5..]);
        assert!(F32Packed::new(&w, n, k + 1).is_err());
    }

    #[test]
    fn f16_panels_read_back_and_halve_the_bytes() {
        let (n, k) = (70, 9);
        let w: Vec<f16> = rand_vec(n * k, 3).into_iter().map(f16::from_f32).collect();
        let p = F32Packed::f16_panels(&w, n, k, NR_AVX2, |v| v).unwrap();
        let mut back = vec![0.0; n * k - 5];
        p.read_f32(5, &mut back);
        assert!(back.iter().zip(&w[5..]).all(|(b, h)| *b == h.to_f32()));
        let wide: Vec<f32> = w.iter().map(|h| h.to_f32()).collect();
        let f = F32Packed::with_width(&wide, n, k, NR_AVX2).unwrap();
        assert_eq!(2 * p.bytes(), f.bytes());
        // AVX-512 panels widen.
        let p64 = F32Packed::f16_panels(&w, n, k, NR_AVX512, |v| v).unwrap();
        assert_eq!(
            p64.bytes(),
            F32Packed::with_width(&wide, n, k, NR_AVX512)
                .unwrap()
                .bytes()
        );
        assert!(F32Packed::from_f16(&w, n, k + 1).is_err());
        // From a file's bytes at an odd offset: the same panels.
        let mut bytes = vec![7u8];
        bytes.extend(w.iter().flat_map(|v| v.to_le_bytes()));
        let b = F32Packed::from_f16_le_bytes(&bytes[1..], n, k).unwrap();
        let mut all = vec![0.0; n * k];
        b.read_f32(0, &mut all);
        assert!(all.iter().zip(&w).all(|(b, h)| *b == h.to_f32()));
        assert_eq!(b.bytes(), F32Packed::from_f16(&w, n, k).unwrap().bytes());
        assert!(F32Packed::from_f16_le_bytes(&bytes, n, k).is_err());
        assert!(F32Packed::from_f16_le_bytes(&bytes[1..], n, k + 1).is_err());
    }

    /// f16 weights packed as f16 give the same bits as the same values packed as f32, on
    /// every tile this CPU runs (whole and partial tiles, blocks of k, several threads).
    #[test]
    fn f16_panels_equal_widened_f32_panels() {
        if widths().is_empty() {
            eprintln!("skipped: no AVX2 or AVX-512");
            return;
        }
        for (m, n, k) in [(101, 130, 300), (13, 40, 600), (6, 16, 512)] {
            let x = rand_vec(m * k, 1);
            let w: Vec<f16> = rand_vec(n * k, 2).into_iter().map(f16::from_f32).collect();
            let wide: Vec<f32> = w.iter().map(|h| h.to_f32()).collect();
            let b = rand_vec(n, 3);
            let half = Weight::F16(w).for_f32_gemm(n, k, true).unwrap();
            let full = Weight::F32(wide).for_f32_gemm(n, k, true).unwrap();
            if this_width() == NR_AVX2 {
                assert_eq!(2 * half.stream_bytes(), full.stream_bytes(), "f16 panels");
            }
            for threads in [1, 3] {
                let be = CpuBackend::new(threads).unwrap();
                let mut outs = Vec::new();
                for w in [&half, &full] {
                    let lin = Linear::new(w.clone(), Some(b.clone()), n, k).unwrap();
                    let mut got = vec![f32::NAN; m * n];
                    be.linear(&x, m, &lin, &mut got).unwrap();
                    outs.push(got);
                }
                assert_eq!(outs[0], outs[1], "{m}×{n}×{k}, {threads} threads");
            }
        }
    }

    /// The panel widths this CPU's tiles run: 16 on AVX2, 16 and 64 on AVX-512.
    fn widths() -> Vec<usize> {
        [(Isa::Avx2, NR_AVX2), (Isa::Avx512, NR_AVX512)]
            .into_iter()
            .filter(|&(isa, _)| simd(isa))
            .map(|(_, nr)| nr)
            .collect()
    }

    #[test]
    fn simd_matches_reference_and_f32() {
        // The selected kernel path's (`SOTTO_FORCE_ISA` may select the scalar one).
        if !simd(sotto_isa::isa()) {
            eprintln!("skipped: no AVX2 or AVX-512 on the selected kernel path");
            return;
        }
        let pack = |w: &[f32], n, k| Weight::F32(w.to_vec()).for_f32_gemm(n, k, true).ok();
        let reference = |x: &[f32], m, w: &Weight, bias: Option<&[f32]>, out: &mut [f32]| {
            let Weight::F32Packed(pw) = w else {
                unreachable!()
            };
            linear_reference(x, m, pw, bias, out).unwrap()
        };
        // The same products in the same order as the reference: equal but for the SIMD
        // GELU (1e-6 absolute, plus f32 rounding of outputs that grow as sqrt(k)); against
        // the gemm crate's order, f32 rounding of k terms.
        let sqrt_k = |k: usize| 1e-6 * (k as f32).sqrt().max(2.0);
        check_packed_gemm(&pack, &reference, &sqrt_k, &|k: usize| 1e-6 * k as f32);
    }

    /// Blocks of k, partial row and column tiles, several threads, every tile this CPU
    /// runs: the same bits as the reference, which adds in order.
    #[test]
    fn simd_equals_reference_bitwise() {
        if widths().is_empty() {
            eprintln!("skipped: no AVX2 or AVX-512");
            return;
        }
        for (m, n, k) in [(101, 130, 300), (13, 40, 600)] {
            let (x, w, b) = (rand_vec(m * k, 1), rand_vec(n * k, 2), rand_vec(n, 3));
            for nr in widths() {
                let pw = F32Packed::with_width(&w, n, k, nr).unwrap();
                let mut want = vec![0.0; m * n];
                linear_reference(&x, m, &pw, Some(&b), &mut want).unwrap();
                let lin = Linear::new(Weight::F32Packed(pw), Some(b.clone()), n, k).unwrap();
                for threads in [1, 2, 3] {
                    for isa in [Isa::Avx2, Isa::Avx512].into_iter().filter(|&i| simd(i)) {
                        if !runs(isa, &lin.weight) {
                            continue;
                        }
                        let mut got = vec![f32::NAN; m * n];
                        let be = CpuBackend::with_isa(threads, isa).unwrap();
                        be.linear(&x, m, &lin, &mut got).unwrap();
                        assert_eq!(
                            got, want,
                            "{m}×{n}×{k}, nr {nr}, {isa:?}, {threads} threads"
                        );
                    }
                }
            }
        }
    }

    /// A weight packed for AVX-512 meets an AVX2 backend: the row path, same values.
    #[test]
    fn wide_panels_on_avx2_take_the_row_path() {
        if !simd(Isa::Avx512) {
            eprintln!("skipped: no AVX-512");
            return;
        }
        let (n, k) = (40, 30);
        let w = rand_vec(n * k, 2);
        let pw = F32Packed::with_width(&w, n, k, NR_AVX512).unwrap();
        assert!(!runs(Isa::Avx2, &Weight::F32Packed(pw.clone())));
        check_packed_fallback(Weight::F32Packed(pw), n, k);
    }

    #[test]
    fn f32_packed_without_simd_takes_the_row_path() {
        match Weight::F32(rand_vec(40 * 30, 2)).for_f32_gemm(40, 30, true) {
            Ok(p @ Weight::F32Packed(_)) => check_packed_fallback(p, 40, 30),
            _ => eprintln!("skipped: no AVX2 or AVX-512"),
        }
    }
}
