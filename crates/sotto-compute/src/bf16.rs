//! bf16 GEMM for the encoder's many-row products, on CPUs with AVX-512 BF16.
//!
//! Weights are rounded to bf16 once ([`Bf16Packed`]) and stored in the order the
//! microkernels stream them: panels of [`PANEL`] output columns, each a run of k pairs, so
//! one 64-byte row feeds `vdpbf16ps` for 16 columns, and 16 rows are an AMX tile, one
//! contiguous KiB. Activations are rounded to bf16 pairs
//! (nearest even) per call and packed in panels of [`MR`] rows. Products accumulate in f32;
//! bias and GELU are applied in f32 on the finished tile. [`linear_reference`] is the
//! scalar model of the same arithmetic, which the SIMD path is tested against.

use rayon::prelude::*;

use half::slice::HalfFloatSliceExt;

use crate::blocked::{for_each_tile, Blocks, Epi, Out};
#[cfg(target_arch = "x86_64")]
use crate::kernels;
use crate::kernels::TILE_ROWS;
use crate::{shape_err, CpuBackend, F16Tiles, Isa, Linear, Result, Weight};

/// Rows per microkernel tile.
pub(crate) const MR: usize = 6;
/// Columns per microkernel tile (and per packed weight panel): four 16-lane registers.
/// 6 × 64 rather than 8 × 32: 24 accumulators fed by 4 weight loads and 6 broadcasts per
/// pair instead of 16 by 2 and 8, so loads no longer cap `vdpbf16ps` on cores that issue
/// two a cycle (Zen 5: 95% of peak in L1 against 86%).
pub(crate) const NR: usize = 64;
/// Columns per stored panel: one 64-byte row of pairs. The AVX-512 tile reads
/// [`NR`]/PANEL panels side by side; an AMX B tile is 16 consecutive rows of one, so it
/// loads 1 KiB in order (the 64-wide rows it read before, 256 bytes apart, ran its GEMM
/// ~25% slower).
const PANEL: usize = 16;
/// Most k pairs per cache block: a weight panel block of `KC·NR` pairs is 32 KiB (L1).
/// 256 rather than 192: a 512-wide input is then one block, so each output tile is
/// stored once instead of loaded and stored again. Base's encoder shapes ran 3–7% faster
/// on 2 threads (384 and 512 measured the same as 256). The sums are the same either
/// way: every tile adds its k pairs in order, across blocks too.
const KC: usize = 256;
/// Rows the packed activations are padded to with zero rows: whole row tiles for both
/// kernels (AVX-512's [`MR`], AMX's 32).
pub(crate) const ROW_PAD: usize = 96;
/// Rows per task block (a multiple of [`MR`]); its activation block stays in L2.
const MC: usize = 16 * MR;
/// Columns per task block (a multiple of [`NR`]).
const NC: usize = 4 * NR;

/// Whether this CPU has AVX-512 F/BW/VL, DQ, VNNI and BF16, which the bf16 GEMM and
/// attention need (every CPU with BF16 has DQ and VNNI: the attention's scores run on
/// VNNI's i16 pairs).
pub fn bf16_gemm_supported() -> bool {
    // std caches the detection: no cache of our own needed.
    #[cfg(target_arch = "x86_64")]
    {
        Isa::Avx512.is_supported()
            && std::arch::is_x86_feature_detected!("avx512bf16")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the selected kernel path ([`sotto_isa::isa`]: this CPU's best, or
/// `SOTTO_FORCE_ISA`) runs the SIMD bf16 GEMM, so that a run forced to AVX2 picks what an
/// AVX2 CPU would rather than bf16 weights its kernels would widen to f32.
pub fn bf16_gemm_active() -> bool {
    simd(sotto_isa::isa())
}

/// Whether a backend on kernel path `isa` runs the SIMD bf16 GEMM (otherwise bf16 weights
/// are widened to f32 and take the f32 path).
pub(crate) fn simd(isa: Isa) -> bool {
    isa == Isa::Avx512 && bf16_gemm_supported()
}

/// f32 to bf16 as `vcvtneps2bf16` does it: round to nearest even, subnormals to signed
/// zero, NaN kept quiet.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    if x.is_subnormal() {
        return ((bits >> 16) & 0x8000) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// bf16 to f32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The bf16 pair of `lo` (element 2p, low half) and `hi` (element 2p + 1, high half).
fn pair(lo: f32, hi: f32) -> u32 {
    f32_to_bf16(lo) as u32 | (f32_to_bf16(hi) as u32) << 16
}

/// `src` as bf16 pairs, a missing last element zero. `dst` Shape: [src.len().div_ceil(2)].
pub(crate) fn to_pairs(isa: Isa, src: &[f32], dst: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if simd(isa) {
        // SAFETY: `simd` checked that the CPU has AVX-512 F and BF16.
        return unsafe { kernels::x86_bf16::to_pairs(src, dst) };
    }
    let _ = isa;
    for (p, d) in dst.iter_mut().enumerate() {
        *d = pair(src[2 * p], src.get(2 * p + 1).copied().unwrap_or(0.0));
    }
}

/// An `n_out × n_in` weight rounded to bf16 and packed for [`CpuBackend::linear`]'s bf16
/// GEMM: `n_out.div_ceil(NR)` groups of NR/PANEL panels, each Shape:
/// [n_in.div_ceil(2), PANEL] bf16 pairs, columns past `n_out` and the element past an odd
/// `n_in` zero.
#[derive(Clone, Debug)]
pub struct Bf16Packed {
    data: Vec<u32>,
    n_out: usize,
    n_in: usize,
}

impl Bf16Packed {
    /// Packs row-major f32 `rows` (Shape: [n_out, n_in]), rounding to nearest even.
    pub fn new(rows: &[f32], n_out: usize, n_in: usize) -> Result<Self> {
        if rows.len() != n_out * n_in {
            return Err(shape_err(
                "bf16 pack",
                format!("{} values for a {n_out}×{n_in} weight", rows.len()),
            ));
        }
        let (kp, isa) = (n_in.div_ceil(2), sotto_isa::isa());
        let mut data = vec![0u32; n_out.div_ceil(NR) * kp * NR];
        // Panels in parallel, each row rounded by the SIMD converter then scattered: a
        // base encoder is ~20 M weights per load.
        data.par_chunks_mut(kp * NR)
            .enumerate()
            .for_each(|(jp, group)| {
                let mut pairs = vec![0u32; kp];
                for jj in 0..NR.min(n_out - jp * NR) {
                    let j = jp * NR + jj;
                    to_pairs(isa, &rows[j * n_in..(j + 1) * n_in], &mut pairs);
                    let panel = &mut group[(jj / PANEL) * kp * PANEL..][..kp * PANEL];
                    for (p, &v) in pairs.iter().enumerate() {
                        panel[p * PANEL + jj % PANEL] = v;
                    }
                }
            });
        Ok(Self { data, n_out, n_in })
    }

    /// f16 decoder tiles rounded to bf16 panels, written into `data` (reused: resized,
    /// every element written), panels in parallel on the current pool.
    pub(crate) fn from_tiles(t: &F16Tiles, isa: Isa, mut data: Vec<u32>) -> Self {
        let (n_out, n_in) = (t.n_out(), t.n_in());
        let (kp, tl) = (n_in.div_ceil(2), t.tile_len());
        data.resize(n_out.div_ceil(NR) * kp * NR, 0);
        data.par_chunks_mut(kp * NR)
            .enumerate()
            .for_each(|(jp, group)| {
                // Group jp is rows r0..r0 + NR of one tile; rows past n_out are zero there.
                let (tile, r0) = (jp * NR / TILE_ROWS, jp * NR % TILE_ROWS);
                let tile = &t.data()[tile * tl..][..tl];
                let (mut lo, mut hi, mut pairs) = ([0.0f32; NR], [0.0f32; NR], [0.0f32; 2 * NR]);
                let mut row = [0u32; NR];
                for p in 0..kp {
                    tile[2 * p * TILE_ROWS + r0..][..NR].convert_to_f32_slice(&mut lo);
                    if 2 * p + 1 < n_in {
                        tile[(2 * p + 1) * TILE_ROWS + r0..][..NR].convert_to_f32_slice(&mut hi);
                    } else {
                        hi = [0.0; NR];
                    }
                    for (j, pair) in pairs.chunks_exact_mut(2).enumerate() {
                        pair[0] = lo[j];
                        pair[1] = hi[j];
                    }
                    to_pairs(isa, &pairs, &mut row);
                    for (q, src) in row.chunks_exact(PANEL).enumerate() {
                        group[(q * kp + p) * PANEL..][..PANEL].copy_from_slice(src);
                    }
                }
            });
        Self { data, n_out, n_in }
    }

    pub fn n_out(&self) -> usize {
        self.n_out
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// k pairs per column.
    pub(crate) fn pairs(&self) -> usize {
        self.n_in.div_ceil(2)
    }

    /// Columns `NR·g..NR·(g + 1)`: NR/PANEL panels, each Shape: [pairs, PANEL].
    fn group(&self, g: usize) -> &[u32] {
        let len = self.pairs() * NR;
        &self.data[g * len..(g + 1) * len]
    }

    /// Where pair `p` of column `j` is stored.
    fn at(&self, p: usize, j: usize) -> usize {
        ((j / PANEL) * self.pairs() + p) * PANEL + j % PANEL
    }

    /// Row-major elements `start..start + out.len()` widened to f32. Panics when the
    /// range passes the end.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        assert!(
            end <= self.n_out * self.n_in,
            "read_f32: {start}..{end} past the end"
        );
        for (o, e) in out.iter_mut().zip(start..end) {
            let (j, c) = (e / self.n_in, e % self.n_in);
            let v = self.data[self.at(c / 2, j)];
            *o = bf16_to_f32((v >> (16 * (c % 2))) as u16);
        }
    }
}

impl Weight {
    /// The same weight packed for the bf16 GEMM ([`Weight::Bf16`]) when `enable` and this
    /// CPU can run it ([`bf16_gemm_supported`]); f32, f16 and block-quantized weights are
    /// converted, anything else is returned as it is. For weights only ever multiplied by many rows.
    pub fn for_bf16_gemm(self, n_out: usize, n_in: usize, enable: bool) -> Result<Self> {
        if !enable || !bf16_gemm_supported() {
            return Ok(self);
        }
        match self {
            Weight::F32(rows) => Ok(Weight::Bf16(Bf16Packed::new(&rows, n_out, n_in)?)),
            // Quantized encoder weights too: dequantized once here instead of to f32 on
            // every encoder product (the many-row path has no quantized kernel).
            w @ (Weight::F16(_) | Weight::F16Tiled(_) | Weight::Quant { .. }) => {
                if w.len() != n_out * n_in {
                    return Err(shape_err(
                        "bf16 pack",
                        format!("{} values for a {n_out}×{n_in} weight", w.len()),
                    ));
                }
                let mut rows = vec![0.0f32; n_out * n_in];
                w.read_f32(0, &mut rows);
                Ok(Weight::Bf16(Bf16Packed::new(&rows, n_out, n_in)?))
            }
            other => Ok(other),
        }
    }
}

/// Fills `a` with `x` as bf16 pairs, Shape: [m.next_multiple_of(ROW_PAD), k.div_ceil(2)], the
/// rows past `m` zero (the microkernel reads whole tiles). `a` keeps its allocation and
/// may hold anything on entry: every element is written (no serial memset of a buffer of
/// up to 6 MB per product first).
pub(crate) fn pack_rows(isa: Isa, x: &[f32], m: usize, k: usize, a: &mut Vec<u32>) {
    pack_rows_with(x, m, k, a, || (), |_, s, d| to_pairs(isa, s, d));
}

/// [`pack_rows`] with each row's pairs written by `row(state, x_row, pairs)`, in parallel
/// over row tiles; `init` makes a worker's `state` (the fused layer norm's f32 row).
pub(crate) fn pack_rows_with<T>(
    x: &[f32],
    m: usize,
    k: usize,
    a: &mut Vec<u32>,
    init: impl Fn() -> T + Send + Sync,
    row: impl Fn(&mut T, &[f32], &mut [u32]) + Send + Sync,
) {
    let kp = k.div_ceil(2);
    let len = m.next_multiple_of(ROW_PAD) * kp;
    a.truncate(len);
    a.resize(len, 0);
    a[m * kp..].fill(0);
    a[..m * kp]
        .par_chunks_mut(kp * MR)
        .zip(x.par_chunks(k * MR))
        .for_each_init(init, |state, (dst, src)| {
            for (d, s) in dst.chunks_exact_mut(kp).zip(src.chunks_exact(k)) {
                row(state, s, d);
            }
        });
}

impl CpuBackend {
    /// `f(pairs)` on the activation pairs `fill` writes into a buffer kept between calls (a
    /// fresh 6 MiB one per encoder product cost its page faults every time), inside the pool.
    pub(crate) fn with_pairs<R: Send>(
        &self,
        fill: impl FnOnce(&mut Vec<u32>) + Send,
        f: impl FnOnce(&[u32]) -> R + Send,
    ) -> R {
        self.install(|| {
            let mut a = self.scratch_u32.take_dirty();
            fill(&mut a);
            let r = f(&a);
            self.scratch_u32.give(a);
            r
        })
    }

    /// `out = x · Wᵀ + b` (then as `epi` says) with bf16 operands and f32 accumulation,
    /// on this backend's threads. Only for [`Weight::Bf16`] on a backend where [`simd`]
    /// holds; the caller has checked the shapes.
    ///
    /// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
    pub(crate) fn linear_bf16(&self, x: &[f32], m: usize, w: &Linear, out: Out<'_>, epi: Epi) {
        let Weight::Bf16(pw) = &w.weight else {
            unreachable!("linear_bf16 takes bf16 weights only")
        };
        self.with_pairs(
            |a| pack_rows(self.isa, x, m, w.n_in, a),
            |a| self.gemm_bf16_packed(a, pw.pairs(), m, pw, w.bias.as_deref(), out, epi),
        );
    }

    /// [`CpuBackend::linear_bf16`] for several weights of the same `n_in` meeting the same
    /// `x`: the activations are rounded and packed once.
    pub(crate) fn linears_bf16(
        &self,
        x: &[f32],
        m: usize,
        products: &mut [(&Linear, &mut [f32])],
        epi: Epi,
    ) {
        let Some(n_in) = products.first().map(|(w, _)| w.n_in) else {
            return;
        };
        self.with_pairs(
            |a| pack_rows(self.isa, x, m, n_in, a),
            |a| self.gemm_bf16_each(a, m, products, epi),
        );
    }

    /// Each of `products` (bf16 weights of the same `n_in`) against the packed rows `a`.
    pub(crate) fn gemm_bf16_each(
        &self,
        a: &[u32],
        m: usize,
        products: &mut [(&Linear, &mut [f32])],
        epi: Epi,
    ) {
        for (w, out) in products.iter_mut() {
            let Weight::Bf16(pw) = &w.weight else {
                unreachable!("linear_bf16 takes bf16 weights only")
            };
            let out = Out::Whole(out);
            self.gemm_bf16_packed(a, pw.pairs(), m, pw, w.bias.as_deref(), out, epi);
        }
    }

    /// Conv1d (kernel 3, padding 1, `stride`) of `x` (Shape: [t_in, c_in], c_in even) by
    /// the taps-first bf16 weight `w` into `out` (Shape: [t_out, n_out]), finished as
    /// `epi` says. Output t's column row, input steps t·stride − 1 ..= t·stride + 1, is a
    /// slice of x; so x is rounded to pairs once behind a zero row (the left padding), and
    /// the GEMM reads row t at pair t·stride·c_in/2, rows stride·c_in/2 pairs apart.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conv_bf16(
        &self,
        x: &[f32],
        c_in: usize,
        w: &Linear,
        stride: usize,
        t_out: usize,
        out: &mut [f32],
        epi: Epi,
    ) {
        let Weight::Bf16(pw) = &w.weight else {
            unreachable!("conv_bf16 takes bf16 weights only")
        };
        let (cp, kp) = (c_in / 2, pw.pairs());
        debug_assert!(c_in.is_multiple_of(2) && kp == 3 * cp);
        let (lda, t_in) = (stride * cp, x.len() / c_in);
        // Every tile reads whole row tiles; rows past the input (right padding, tile
        // padding) are zero.
        let len = ((t_out.next_multiple_of(ROW_PAD) - 1) * lda + kp).max((t_in + 1) * cp);
        let fill = |a: &mut Vec<u32>| {
            a.truncate(len);
            a.resize(len, 0);
            a[..cp].fill(0);
            a[(t_in + 1) * cp..].fill(0);
            a[cp..(t_in + 1) * cp]
                .par_chunks_mut(cp * MC)
                .zip(x.par_chunks(c_in * MC))
                .for_each(|(dst, src)| {
                    for (d, s) in dst.chunks_exact_mut(cp).zip(src.chunks_exact(c_in)) {
                        to_pairs(self.isa, s, d);
                    }
                });
        };
        self.with_pairs(fill, |a| {
            let out = Out::Whole(out);
            self.gemm_bf16_packed(a, lda, t_out, pw, w.bias.as_deref(), out, epi)
        });
    }

    /// [`CpuBackend::linear_bf16`] for f16 decoder tiles meeting many rows (a prompt of
    /// ~100–225 tokens): the tiles are rounded to bf16 panels in a reused buffer (a few ms
    /// for a whole decoder) and multiplied by the bf16 GEMM, ~3× the f16 tile kernels'
    /// rate at that size. Only where [`simd`] holds; the caller has checked the shapes.
    pub(crate) fn linear_tiles_bf16(
        &self,
        x: &[f32],
        m: usize,
        t: &F16Tiles,
        bias: Option<&[f32]>,
        out: &mut [f32],
        epi: Epi,
    ) {
        let buf = self.scratch_u32.take(0);
        let pw = self.install(|| Bf16Packed::from_tiles(t, self.isa, buf));
        self.with_pairs(
            |a| pack_rows(self.isa, x, m, pw.n_in, a),
            |a| self.gemm_bf16_packed(a, pw.pairs(), m, &pw, bias, Out::Whole(out), epi),
        );
        self.scratch_u32.give(pw.data);
    }

    /// The bf16 product of `m` rows of pairs (`a`, row i at pair i·`lda`, as
    /// [`pack_rows`] packs them with `lda` = the pairs of a row) with `pw`, inside the pool.
    /// `a` must hold m.next_multiple_of([`ROW_PAD`]) rows: tiles read all rows of theirs.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm_bf16_packed(
        &self,
        a: &[u32],
        lda: usize,
        m: usize,
        pw: &Bf16Packed,
        bias: Option<&[f32]>,
        out: Out<'_>,
        epi: Epi,
    ) {
        let (n, kp) = (pw.n_out, pw.pairs());
        #[cfg(target_arch = "x86_64")]
        if self.amx() {
            return self.gemm_bf16_amx(a, lda, m, pw, bias, out, epi);
        }
        let blocks = Blocks {
            mr: MR,
            nr: NR,
            mc: MC,
            nc: NC,
            kc: KC,
            // A row tile's pairs stay in L1 while the panels stream from L2 (as the int8
            // GEMM's): f16 windows alternated on Zen 4, MLP −1.3 to −4%, cross K/V −1.9 to
            // −3.7% in four runs of five, whole windows −0.5 to −3.4%.
            rows_outer: true,
        };
        assert_ne!(
            epi,
            Epi::Residual,
            "the bf16 tiles store; residuals add by block"
        );
        for_each_tile(self.isa, blocks, (m, n, kp), out, epi, |t, c, ldc| {
            let b = &pw.group(t.jc / NR)[t.p0 * PANEL..];
            let bias = bias.filter(|_| t.last).map(|b| &b[t.jc..t.jc + t.cols]);
            let ap = &a[t.ic * lda + t.p0..(t.ic + MR - 1) * lda + t.p0 + t.len];
            // SAFETY: `simd` holds (the caller's check); ap holds MR rows lda apart of
            // len pairs from p0, and b the group's NR/PANEL panels from pair p0 (panel v
            // at v·kp·PANEL, rows PANEL apart); the tile's rows and columns lie at `c`
            // (ldc apart) in its task's block, which no other task writes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                kernels::x86_bf16::tile::<MR, { NR / 16 }>(
                    t.len,
                    ap.as_ptr(),
                    lda,
                    (b.as_ptr(), PANEL, kp * PANEL),
                    c,
                    ldc,
                    t.rows,
                    t.cols,
                    t.acc,
                    bias,
                    (None, None),
                )
            };
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (ap, b, bias, c, ldc);
        });
    }
}

impl CpuBackend {
    /// [`CpuBackend::gemm_bf16_packed`] on AMX tiles: 32 × 32 output blocks, each B tile
    /// 16 columns of a packed panel (64 bytes of each row of [`NR`]).
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    fn gemm_bf16_amx(
        &self,
        a: &[u32],
        lda: usize,
        m: usize,
        pw: &Bf16Packed,
        bias: Option<&[f32]>,
        out: Out<'_>,
        epi: Epi,
    ) {
        use kernels::x86_amx::TR;
        let (n, kp) = (pw.n_out, pw.pairs());
        assert_ne!(
            epi,
            Epi::Residual,
            "the bf16 tiles store; residuals add by block"
        );
        for_each_tile(self.isa, Blocks::AMX, (m, n, kp), out, epi, |t, c, ldc| {
            if t.first {
                // SAFETY: `amx` holds: AMX runs and the process has the tile state.
                unsafe { kernels::x86_amx::reconfigure() };
            }
            let (g, j0, panel_len) = (t.jc / NR, t.jc % NR, kp * PANEL);
            let b = &pw.group(g)[(j0 / PANEL) * panel_len + t.p0 * PANEL..];
            let bias = bias.filter(|_| t.last).map(|b| &b[t.jc..t.jc + t.cols]);
            let ap = &a[t.ic * lda + t.p0..(t.ic + TR - 1) * lda + t.p0 + t.len];
            // SAFETY: `amx` holds (AMX with the tile state, AVX-512), and this task configured
            // the tiles at its first; ap holds TR rows lda
            // apart of len pairs from p0, b two panels' len rows of PANEL pairs from p0 (the
            // second at panel_len: j0 + TC <= NR); the tile's rows and columns lie at `c`
            // (ldc apart) in its task's block, which no other task writes.
            unsafe {
                kernels::x86_amx::tile(
                    t.len,
                    ap.as_ptr(),
                    lda,
                    (b.as_ptr(), PANEL, panel_len),
                    c,
                    ldc,
                    t.rows,
                    t.cols,
                    t.acc,
                    bias,
                )
            };
        });
    }
}

/// Scalar model of the bf16 GEMM: `out = x · Wᵀ + b` with `x` rounded to bf16 like the
/// packed weights, each pair accumulated in f32 high element first (as `vdpbf16ps`), the
/// bias added last.
///
/// `x` Shape: [m, n_in]; `out` Shape: [m, n_out].
pub fn linear_reference(
    x: &[f32],
    m: usize,
    w: &Bf16Packed,
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    let (n, k) = (w.n_out, w.n_in);
    crate::blocked::check_reference("bf16 linear", x, m, (n, k), bias, out)?;
    let kp = w.pairs();
    let mut xa = vec![0u32; kp];
    for (xi, oi) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(n.max(1))) {
        to_pairs(Isa::Scalar, xi, &mut xa);
        for (j, o) in oi.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for (p, &a) in xa.iter().enumerate() {
                let b = w.data[w.at(p, j)];
                let (al, ah) = (bf16_to_f32(a as u16), bf16_to_f32((a >> 16) as u16));
                let (bl, bh) = (bf16_to_f32(b as u16), bf16_to_f32((b >> 16) as u16));
                acc += ah * bh;
                acc += al * bl;
            }
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
    fn bf16_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: ties up to even.
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0 + 1e-6), 0x3f81);
        assert_eq!(f32_to_bf16(-2.5), 0xc020);
        assert_eq!(f32_to_bf16(f32::MIN_POSITIVE / 2.0), 0);
        assert_eq!(f32_to_bf16(-f32::MIN_POSITIVE / 2.0), 0x8000);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
        let xs = rand_vec(1001, 7);
        for isa in [Isa::Scalar, Isa::Avx512] {
            let mut got = vec![0u32; xs.len().div_ceil(2)];
            to_pairs(isa, &xs, &mut got);
            for (p, &v) in got.iter().enumerate() {
                let hi = xs.get(2 * p + 1).copied().unwrap_or(0.0);
                assert_eq!(v, pair(xs[2 * p], hi), "{isa:?} pair {p}");
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn amx_survives_another_librarys_tile_release() {
        let be = CpuBackend::new(1).unwrap();
        if !be.amx() {
            eprintln!("skipped: no AMX");
            return;
        }
        let (m, n, k) = (70, 100, 300);
        let (x, w) = (rand_vec(m * k, 1), rand_vec(n * k, 2));
        let pw = Weight::F32(w).for_bf16_gemm(n, k, true).unwrap();
        let lin = Linear::new(pw, None, n, k).unwrap();
        let mut want = vec![0.0; m * n];
        be.linear(&x, m, &lin, &mut want).unwrap();
        // SAFETY: `amx` says the CPU has AMX; the pool's one worker runs it.
        be.install(|| unsafe { kernels::x86_amx::release_behind_our_back() });
        let mut got = vec![f32::NAN; m * n];
        be.linear(&x, m, &lin, &mut got).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn packed_reads_back_rounded() {
        let (n, k) = (37, 9);
        let w = rand_vec(n * k, 3);
        let p = Bf16Packed::new(&w, n, k).unwrap();
        let mut back = vec![0.0; n * k - 5];
        p.read_f32(5, &mut back);
        for (b, &v) in back.iter().zip(&w[5..]) {
            assert_eq!(*b, bf16_to_f32(f32_to_bf16(v)));
        }
        assert!(Bf16Packed::new(&w, n, k + 1).is_err());
    }

    #[test]
    fn simd_matches_reference_and_f32() {
        // The selected kernel path's (`SOTTO_FORCE_ISA` may select one without the tile).
        if !simd(sotto_isa::isa()) {
            eprintln!("skipped: no AVX-512 BF16 on the selected kernel path");
            return;
        }
        let pack = |w: &[f32], n, k| Weight::F32(w.to_vec()).for_bf16_gemm(n, k, true).ok();
        let reference = |x: &[f32], m, w: &Weight, bias: Option<&[f32]>, out: &mut [f32]| {
            let Weight::Bf16(pw) = w else { unreachable!() };
            linear_reference(x, m, pw, bias, out).unwrap()
        };
        // Same roundings and order as the reference: only the hardware's pair sums differ;
        // against f32 each operand is off by up to 2^-9 relative.
        let sqrt_k = |k: usize| 0.01 * (k as f32).sqrt();
        check_packed_gemm(&pack, &reference, &|k| 1e-5 * k as f32, &sqrt_k);
    }

    #[test]
    fn bf16_weight_without_simd_takes_f32_path() {
        match Weight::F32(rand_vec(40 * 30, 2)).for_bf16_gemm(40, 30, true) {
            Ok(p @ Weight::Bf16(_)) => check_packed_fallback(p, 40, 30),
            _ => eprintln!("skipped: no AVX-512 BF16"),
        }
    }
}
