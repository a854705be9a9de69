//! int8 GEMM for the encoder's many-row products, on CPUs with AVX-512 VNNI: the scheme of
//! CTranslate2's int8 (faster-whisper's `compute_type="int8"`).
//!
//! Weights are quantized once per output channel ([`I8Packed`]: `w ≈ scale_j · q`, q in
//! [-127, 127], the scale `max|w_j| / 127`) and stored as `q + 128` (unsigned bytes, which
//! `vpdpbusd` takes as its first operand) in panels of [`NR`] columns, each a run of k
//! quads, so one 64-byte load feeds 16 columns. Activations are quantized per row on every
//! call (dynamic scale `max|x_i| / 127`, ties to even) and broadcast four bytes at a time.
//! Products accumulate exactly in i32; the `+ 128` is taken out with each row's sum of
//! quantized activations; then one f32 scale per (row, column), bias and GELU.
//! [`linear_reference`] is the scalar model of the same arithmetic.

use rayon::prelude::*;

use crate::blocked::{for_each_tile, Blocks, Epi, Out};
#[cfg(target_arch = "x86_64")]
use crate::kernels;
use crate::{shape_err, CpuBackend, Isa, Linear, Result, Weight};

/// Rows per microkernel tile.
pub(crate) const MR: usize = 8;
/// Columns per microkernel tile (and per packed weight panel): two 16-lane registers.
pub(crate) const NR: usize = 32;
/// Rows per task block (a multiple of [`MR`]); its activation block stays in L2.
const MC: usize = 12 * MR;
/// Columns per task block (a multiple of [`NR`]).
const NC: usize = 8 * NR;

/// Whether this CPU has AVX-512 F/BW/VL and VNNI, which the int8 GEMM needs.
pub fn int8_gemm_supported() -> bool {
    // std caches the detection: no cache of our own needed.
    #[cfg(target_arch = "x86_64")]
    {
        Isa::Avx512.is_supported() && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether a backend on kernel path `isa` runs the SIMD int8 GEMM (otherwise int8 weights
/// are widened to f32 and take the f32 path).
pub(crate) fn simd(isa: Isa) -> bool {
    isa == Isa::Avx512 && int8_gemm_supported()
}

/// `x` quantized symmetrically: the scale `max|x| / 127` and each `round(x / scale)` (ties
/// to even) into `q` (its length, a multiple of 4, padded with zeros); returns the scale
/// and the sum of the quantized values. An all-zero (or empty) row has scale 0.
fn quantize_row(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    q.fill(0);
    if amax == 0.0 || !amax.is_finite() {
        return (0.0, 0);
    }
    let inv = 127.0 / amax;
    let mut sum = 0;
    for (d, &v) in q.iter_mut().zip(x) {
        // |v · inv| ≤ 127 (up to rounding, which stays below 127.5).
        *d = (v * inv).round_ties_even() as i8;
        sum += *d as i32;
    }
    (amax / 127.0, sum)
}

/// An `n_out × n_in` weight quantized to int8 per output channel and packed for
/// [`CpuBackend::linear`]'s int8 GEMM: `n_out.div_ceil(NR)` panels, each Shape:
/// [n_in.div_ceil(4), NR] quads of `q + 128`; columns past `n_out` and values past `n_in`
/// are zero (`q = 0`, byte 128).
#[derive(Clone, Debug)]
pub struct I8Packed {
    data: Vec<u32>,
    /// Shape: [n_out.next_multiple_of(NR)], zero past `n_out`.
    scales: Vec<f32>,
    n_out: usize,
    n_in: usize,
}

impl I8Packed {
    /// Quantizes and packs row-major f32 `rows` (Shape: [n_out, n_in]).
    pub fn new(rows: &[f32], n_out: usize, n_in: usize) -> Result<Self> {
        if rows.len() != n_out * n_in {
            return Err(shape_err(
                "int8 pack",
                format!("{} values for a {n_out}×{n_in} weight", rows.len()),
            ));
        }
        let (k4, isa) = (n_in.div_ceil(4), sotto_isa::isa());
        let mut data = vec![0x8080_8080u32; n_out.div_ceil(NR) * k4 * NR];
        let mut scales = vec![0.0f32; n_out.next_multiple_of(NR)];
        // Panels in parallel: a base model's encoder is ~20 M weights per load.
        data.par_chunks_mut(k4 * NR)
            .zip(scales.par_chunks_mut(NR))
            .enumerate()
            .for_each(|(jp, (panel, scales))| {
                let mut quads = vec![0u32; k4];
                for jj in 0..NR.min(n_out - jp * NR) {
                    let j = jp * NR + jj;
                    (scales[jj], _) =
                        quantize_into(isa, &rows[j * n_in..(j + 1) * n_in], &mut quads);
                    for (p, &q) in quads.iter().enumerate() {
                        // Signed bytes to `q + 128`: flip each byte's top bit.
                        panel[p * NR + jj] = q ^ 0x8080_8080;
                    }
                }
            });
        Ok(Self {
            data,
            scales,
            n_out,
            n_in,
        })
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// k quads per column.
    fn quads(&self) -> usize {
        self.n_in.div_ceil(4)
    }

    /// Column panel `jp`. Shape: [quads, NR].
    fn panel(&self, jp: usize) -> &[u32] {
        let len = self.quads() * NR;
        &self.data[jp * len..(jp + 1) * len]
    }

    /// The quantized value of row `j`, column `c`.
    fn q(&self, j: usize, c: usize) -> i32 {
        let quad = self.panel(j / NR)[(c / 4) * NR + j % NR];
        ((quad >> (8 * (c % 4))) as u8 ^ 0x80) as i8 as i32
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
        if !enable || !int8_gemm_supported() || matches!(self, Weight::Int8(_)) {
            return Ok(self);
        }
        if self.len() != n_out * n_in {
            return Err(shape_err(
                "int8 pack",
                format!("{} values for a {n_out}×{n_in} weight", self.len()),
            ));
        }
        let packed = match &self {
            Weight::F32(rows) => I8Packed::new(rows, n_out, n_in)?,
            w => {
                let mut rows = vec![0.0f32; n_out * n_in];
                w.read_f32(0, &mut rows);
                I8Packed::new(&rows, n_out, n_in)?
            }
        };
        Ok(Weight::Int8(packed))
    }
}

/// What a finished tile's i32 sums become: `· (s_x · s_w) + bias`, per column.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Epilogue<'a> {
    /// The weight scales of the tile's [`NR`] columns (zero past the last).
    pub w_scales: &'a [f32],
    /// The bias of the tile's valid columns.
    pub bias: Option<&'a [f32]>,
}

/// Activations quantized for one product: rows padded to a multiple of [`MR`] (zero rows)
/// and to whole k quads.
struct QuantRows {
    /// Shape: [m.next_multiple_of(MR), quads] quads of signed bytes.
    data: Vec<u32>,
    /// Per row: the scale and the sum of its quantized values. Shape: [m.next_multiple_of(MR)].
    scales: Vec<f32>,
    sums: Vec<i32>,
}

/// Quantizes `x` (Shape: [m, k]) row by row into `data` (reused, any contents), on the
/// current pool.
fn quantize_rows(isa: Isa, x: &[f32], m: usize, k: usize, data: Vec<u32>) -> QuantRows {
    let (k4, rows) = (k.div_ceil(4), m.next_multiple_of(MR));
    let mut qr = QuantRows {
        data,
        scales: vec![0.0; rows],
        sums: vec![0; rows],
    };
    // Rows < m are written whole when k fills its quads; otherwise (and for the padding
    // rows) the buffer must hold zeros, not the last call's bytes.
    if !k.is_multiple_of(4) {
        qr.data.clear();
    }
    qr.data.truncate(rows * k4);
    qr.data.resize(rows * k4, 0);
    qr.data[m * k4..].fill(0);
    qr.data
        .par_chunks_mut(k4 * MR)
        .zip(qr.scales.par_chunks_mut(MR))
        .zip(qr.sums.par_chunks_mut(MR))
        .zip(x.par_chunks(k * MR))
        .for_each(|(((dst, scales), sums), src)| {
            let rows = dst.chunks_exact_mut(k4).zip(src.chunks_exact(k));
            for ((d, s), (scale, sum)) in rows.zip(scales.iter_mut().zip(sums.iter_mut())) {
                (*scale, *sum) = quantize_into(isa, s, d);
            }
        });
    qr
}

/// One row quantized into quads `d` (Shape: [k.div_ceil(4)]): its scale and sum.
fn quantize_into(isa: Isa, x: &[f32], d: &mut [u32]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if simd(isa) {
        // SAFETY: `simd` checked AVX-512 F/BW/VL; d holds x.len().div_ceil(4) quads.
        return unsafe { kernels::x86_int8::quantize_row(x, d) };
    }
    let _ = isa;
    // SAFETY: u32 → 4 i8 of the same memory, alignment 1 ≤ 4, length 4·d.len().
    let bytes = unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut i8, 4 * d.len()) };
    quantize_row(x, bytes)
}

impl CpuBackend {
    /// `out = x · Wᵀ + b` (then GELU when `gelu`) with int8 operands and i32 accumulation,
    /// on this backend's threads. Only for [`Weight::Int8`] on a backend where [`simd`]
    /// holds; the caller has checked the shapes.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub(crate) fn linear_int8(&self, x: &[f32], m: usize, w: &Linear, out: &mut [f32], gelu: bool) {
        self.linears_int8(x, m, &mut [(w, out)], gelu);
    }

    /// [`CpuBackend::linear_int8`] for several weights of the same `n_in` meeting the same
    /// `x`: the activations are quantized once.
    pub(crate) fn linears_int8(
        &self,
        x: &[f32],
        m: usize,
        products: &mut [(&Linear, &mut [f32])],
        gelu: bool,
    ) {
        let Some(n_in) = products.first().map(|(w, _)| w.n_in) else {
            return;
        };
        self.install(|| {
            let qr = quantize_rows(self.isa, x, m, n_in, self.scratch_u32.take_dirty());
            for (w, out) in products.iter_mut() {
                self.gemm_int8(&qr, m, w, out, gelu);
            }
            self.scratch_u32.give(qr.data);
        });
    }

    /// The int8 product of quantized rows `qr` with `w`, inside the pool.
    fn gemm_int8(&self, qr: &QuantRows, m: usize, w: &Linear, out: &mut [f32], gelu: bool) {
        let Weight::Int8(pw) = &w.weight else {
            unreachable!("linear_int8 takes int8 weights only")
        };
        let (n, k4) = (pw.n_out, pw.quads());
        let bias = w.bias.as_deref();
        // Whole rows of k per tile: the tile has no sums to continue from.
        let blocks = Blocks {
            mr: MR,
            nr: NR,
            mc: MC,
            nc: NC,
            kc: usize::MAX,
            rows_outer: false,
        };
        for_each_tile(
            self.isa,
            blocks,
            (m, n, k4),
            Out::Whole(out),
            Epi::gelu(gelu),
            |t, c, ldc| {
                let b = pw.panel(t.jc / NR);
                let epi = Epilogue {
                    w_scales: &pw.scales[t.jc..t.jc + NR],
                    bias: bias.map(|b| &b[t.jc..t.jc + t.cols]),
                };
                let a = &qr.data[t.ic * k4..(t.ic + MR) * k4];
                let (a_scales, a_sums) = (&qr.scales[t.ic..t.ic + MR], &qr.sums[t.ic..t.ic + MR]);
                // SAFETY: `simd` holds (the caller's check); a holds MR rows of k4 quads and b
                // k4·NR; the tile's rows and columns lie at `c` (ldc apart) in its task's
                // block, which no other task writes.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    kernels::x86_int8::tile(
                        k4,
                        a.as_ptr(),
                        b.as_ptr(),
                        c,
                        ldc,
                        t.rows,
                        t.cols,
                        a_scales,
                        a_sums,
                        &epi,
                    )
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (a, b, a_scales, a_sums, &epi, c, ldc);
            },
        );
    }
}

/// Scalar model of the int8 GEMM: `out = x · Wᵀ + b` with each row of `x` quantized as the
/// GEMM does, exact i32 products, then `(Σ q_x q_w) · (s_x s_w) + b` in f32.
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
    let mut q = vec![0i8; 4 * w.quads()];
    for (xi, oi) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(n.max(1))) {
        let (sx, _) = quantize_row(xi, &mut q);
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
        let xs = rand_vec(1003, 9);
        let mut want = vec![0i8; 1004];
        let (s, sum) = quantize_row(&xs, &mut want);
        for isa in [Isa::Scalar, Isa::Avx512] {
            let mut got = vec![0u32; 251];
            assert_eq!(quantize_into(isa, &xs, &mut got), (s, sum), "{isa:?}");
            let bytes: Vec<i8> = got
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .map(|b| b as i8)
                .collect();
            assert_eq!(bytes, want, "{isa:?}");
        }
    }

    #[test]
    fn packed_reads_back_quantized() {
        let (n, k) = (37, 9);
        let w = rand_vec(n * k, 3);
        let p = I8Packed::new(&w, n, k).unwrap();
        let mut back = vec![0.0; n * k - 5];
        p.read_f32(5, &mut back);
        for (e, (b, &v)) in back.iter().zip(&w[5..]).enumerate() {
            let j = (e + 5) / k;
            assert!(
                (b - v).abs() <= p.scales[j] * 0.5 + 1e-7,
                "element {}",
                e + 5
            );
        }
        assert!(I8Packed::new(&w, n, k + 1).is_err());
    }

    #[test]
    fn simd_matches_reference_and_f32() {
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
    }

    #[test]
    fn zero_and_outlier_rows() {
        let (m, n, k) = (11, 40, 70);
        let mut x = rand_vec(m * k, 4);
        x[2 * k..3 * k].fill(0.0);
        x[5 * k + 7] = 300.0;
        let w = rand_vec(n * k, 5);
        let Ok(Weight::Int8(pw)) = Weight::F32(w.clone()).for_int8_gemm(n, k, true) else {
            eprintln!("skipped: no AVX-512 VNNI");
            return;
        };
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
            _ => eprintln!("skipped: no AVX-512 VNNI"),
        }
    }
}
