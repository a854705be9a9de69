//! A transformer block's layer norms fused with the products that read them, so that on
//! the bf16 GEMM the activations between them pass as bf16 pairs and never as f32 in
//! memory: the layer norm writes pairs row by row, and the MLP's hidden activations (4·d
//! wide, the largest array of an encoder pass) leave the first GEMM block by block as
//! pairs, GELU applied, for the second. On the integer GEMMs (int8, int16) the layer norm
//! writes each row quantized (its f32 row stays in L1), and the MLP's residual add takes
//! the second GEMM's blocks; on int8's quads the first GEMM's tasks span whole rows, so
//! the hidden rows leave them quantized (a row's scale needs the whole row); on the pair
//! tiles they pass in f32. Elsewhere these are the separate ops, in order.

use std::ops::Range;

use crate::bf16::{self, Bf16Packed, ROW_PAD};
use crate::blocked::{add_onto, Epi, Out};
use crate::linear::{check_shapes, SMALL_M};
use crate::{kernels, shape_err, CpuBackend, Linear, Norm, Result, Weight};

/// A pairs buffer's base pointer, shared by tasks that write disjoint pairs.
#[derive(Clone, Copy)]
struct PairsPtr(*mut u32);

// SAFETY: tasks only write pairs no other task touches (see `layer_norm_mlp`).
unsafe impl Send for PairsPtr {}
// SAFETY: as above.
unsafe impl Sync for PairsPtr {}

impl PairsPtr {
    /// # Safety
    /// `i` must lie inside the buffer this pointer was taken from.
    unsafe fn at(self, i: usize) -> *mut u32 {
        // SAFETY: the caller keeps i in bounds.
        unsafe { self.0.add(i) }
    }
}

impl CpuBackend {
    /// `out_i = ln(x) · W_iᵀ + b_i` for each product (attention's q, k, v). `h` (Shape:
    /// [m, d]) is scratch: it holds ln(x) on the paths that need it in f32, and is left
    /// unspecified on the bf16 and integer GEMMs.
    ///
    /// `x` Shape: [m, d]; each `out_i` Shape: [m, n_out_i].
    pub fn layer_norm_linears(
        &self,
        x: &[f32],
        m: usize,
        norm: &Norm,
        h: &mut [f32],
        products: &mut [(&Linear, &mut [f32])],
    ) -> Result<()> {
        check_norm(x, m, norm, h)?;
        for (w, out) in products.iter() {
            check_shapes(x, m, w, out)?;
        }
        if let Some(layout) = self.fuses_int8(products.iter().map(|(w, _)| *w), m) {
            self.with_quant_rows(x, m, norm.gamma.len(), layout, Some(norm), |qr| {
                for (w, out) in products.iter_mut() {
                    self.gemm_int8(qr, m, w, Out::Whole(out), Epi::Store);
                }
            });
            return Ok(());
        }
        let fused = products.iter().all(|(w, _)| self.fuses(w, m));
        if !fused {
            self.layer_norm(x, norm, h)?;
            return self.linears(h, m, products);
        }
        self.with_pairs(
            |a| self.layer_norm_pairs(x, m, norm, a),
            |a| self.gemm_bf16_each(a, m, products, Epi::Store),
        );
        Ok(())
    }

    /// `x += W₂ · gelu(W₁ · ln(x) + b₁) + b₂`: a transformer block's MLP with its residual.
    /// `h` (Shape: [m, d]) and `buf` (Shape: [m, n₁], n₁ = W₁'s outputs) are scratch, used
    /// by the paths that hold ln(x) and the hidden activations in f32.
    ///
    /// `x` Shape: [m, d].
    #[allow(clippy::too_many_arguments)]
    pub fn layer_norm_mlp(
        &self,
        x: &mut [f32],
        m: usize,
        norm: &Norm,
        w1: &Linear,
        w2: &Linear,
        h: &mut [f32],
        buf: &mut [f32],
    ) -> Result<()> {
        check_norm(x, m, norm, h)?;
        check_shapes(x, m, w1, buf)?;
        check_shapes(buf, m, w2, x)?;
        let n1 = w1.n_out;
        if let Some(layout) = self.fuses_int8([w1, w2].into_iter(), m) {
            let d = norm.gamma.len();
            if layout == crate::int8::Layout::Quads {
                // The hidden rows leave the first GEMM quantized for the second, whose tiles
                // add onto x as they store.
                self.install(|| {
                    let qr = self.quant_rows(x, m, d, layout, Some(norm));
                    let hidden = self.gemm_int8_hidden(&qr, m, w1, layout);
                    self.recycle(qr);
                    self.gemm_int8(&hidden, m, w2, Out::Whole(x), Epi::Residual);
                    self.recycle(hidden);
                });
                return Ok(());
            }
            self.with_quant_rows(x, m, d, layout, Some(norm), |qr| {
                self.gemm_int8(qr, m, w1, Out::Whole(buf), Epi::Gelu)
            });
            return self.linear_residual(buf, m, w2, x);
        }
        if !(self.fuses(w1, m) && self.fuses(w2, m) && n1.is_multiple_of(2)) {
            self.layer_norm(x, norm, h)?;
            self.linear_gelu(h, m, w1, buf)?;
            return self.linear_residual(buf, m, w2, x);
        }
        let (pw1, pw2) = (bf16_weight(w1), bf16_weight(w2));
        let isa = self.isa();
        self.install(|| {
            let mut a = self.scratch_u32.take_dirty();
            self.layer_norm_pairs(x, m, norm, &mut a);
            // The hidden rows as pairs, padded with zero rows for the second GEMM.
            let hp = n1 / 2;
            let mut hidden = self.scratch_u32.take_dirty();
            hidden.truncate(m.next_multiple_of(ROW_PAD) * hp);
            hidden.resize(m.next_multiple_of(ROW_PAD) * hp, 0);
            hidden[m * hp..].fill(0);
            let dst = PairsPtr(hidden.as_mut_ptr());
            let finish = move |rows: Range<usize>, cols: Range<usize>, blk: &[f32], ld: usize| {
                for (r, i) in rows.enumerate() {
                    let src = &blk[r * ld..][..cols.len()];
                    // SAFETY: row i < m, pairs cols.start/2..cols.end/2 of `hidden` (Shape:
                    // [_, hp]; block columns start even and n1 is even) belong to this
                    // task's block alone.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(
                            dst.at(i * hp + cols.start / 2),
                            cols.len() / 2,
                        )
                    };
                    bf16::to_pairs(isa, src, out);
                }
            };
            let kp = pw1.n_in().div_ceil(2);
            let bias = w1.bias.as_deref();
            self.gemm_bf16_packed(&a, kp, m, pw1, bias, Out::Blocks(&finish), Epi::Gelu);
            let bias = w2.bias.as_deref();
            let add = add_onto(isa, x, w2.n_out);
            self.gemm_bf16_packed(&hidden, hp, m, pw2, bias, Out::Blocks(&add), Epi::Store);
            self.scratch_u32.give(hidden);
            self.scratch_u32.give(a);
        });
        Ok(())
    }

    /// The layout of the int8 GEMM that every weight of `ws` meeting `m` rows takes, when
    /// one quantization of ln(x) can feed them all and no probe needs to see ln(x).
    pub(crate) fn fuses_int8<'a>(
        &self,
        ws: impl Iterator<Item = &'a Linear> + Clone,
        m: usize,
    ) -> Option<crate::int8::Layout> {
        let first = ws.clone().next()?;
        let (Weight::Int8(p), true) = (&first.weight, m > SMALL_M && self.probe.is_none()) else {
            return None;
        };
        crate::int8::runs_together(self.isa(), ws.map(|w| &w.weight)).then(|| p.layout())
    }

    /// Whether `w` meeting `m` rows takes the bf16 GEMM that the fused paths feed.
    pub(crate) fn fuses(&self, w: &Linear, m: usize) -> bool {
        matches!(w.weight, Weight::Bf16(_)) && self.fuses_bf16(m)
    }

    /// Whether bf16 weights meeting `m` rows may take the fused paths: the bf16 GEMM runs
    /// them, and no probe needs to see their inputs.
    pub(crate) fn fuses_bf16(&self, m: usize) -> bool {
        m > SMALL_M && bf16::simd(self.isa()) && self.probe.is_none()
    }

    /// `a` = the rows of ln(x) as bf16 pairs (Shape: [m.next_multiple_of(ROW_PAD), d/2 rounded
    /// up]; padding rows zero), as `bf16::pack_rows` packs f32 rows, inside the pool.
    pub(crate) fn layer_norm_pairs(&self, x: &[f32], m: usize, norm: &Norm, a: &mut Vec<u32>) {
        let (d, isa) = (norm.gamma.len(), self.isa());
        let row = |ln: &mut Vec<f32>, s: &[f32], p: &mut [u32]| {
            kernels::layer_norm(isa, s, &norm.gamma, &norm.beta, norm.eps, ln);
            bf16::to_pairs(isa, ln, p);
        };
        bf16::pack_rows_with(x, m, d, a, || vec![0.0f32; d], row);
    }
}

/// The packed weight of a linear that [`CpuBackend::fuses`] accepted.
fn bf16_weight(w: &Linear) -> &Bf16Packed {
    match &w.weight {
        Weight::Bf16(pw) => pw,
        _ => unreachable!("the fused paths take bf16 weights only"),
    }
}

/// `x` (Shape: [m, d]) and the scratch `h` against a norm of width d.
pub(crate) fn check_norm(x: &[f32], m: usize, norm: &Norm, h: &[f32]) -> Result<()> {
    let d = norm.gamma.len();
    if d == 0 || norm.beta.len() != d || x.len() != m * d || h.len() != m * d {
        return Err(shape_err(
            "layer norm",
            format!(
                "x has {} elements and h {} for {m} rows of gamma {d}, beta {}",
                x.len(),
                h.len(),
                norm.beta.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rand_vec;
    use crate::Isa;

    fn norm(d: usize) -> Norm {
        Norm {
            gamma: rand_vec(d, 11),
            beta: rand_vec(d, 12),
            eps: 1e-5,
        }
    }

    /// A weight for the bf16, int8 or int16 GEMM (f32 where the CPU lacks it).
    fn linear(n: usize, k: usize, seed: u64, format: &str) -> Linear {
        let w = Weight::F32(rand_vec(n * k, seed));
        let w = match format {
            "int8" => w.for_int8_gemm(n, k, true).unwrap(),
            "int16" => w.for_int16_gemm(n, k).unwrap(),
            _ => w.for_bf16_gemm(n, k, true).unwrap(),
        };
        Linear::new(w, Some(rand_vec(n, seed + 1)), n, k).unwrap()
    }

    /// The fused ops give the bits of the separate ones: the same pairs or quantized rows
    /// meet the same weights in the same order (and on paths without the bf16 or integer
    /// GEMMs they are those ops).
    #[test]
    fn fused_match_separate_ops() {
        // (m, d, n1): few rows (not fused), partial row tiles and blocks, an odd d, a d
        // past one k block (kp > KC) and an odd n1 (not fused).
        let shapes = [
            (5, 64, 256),
            (100, 64, 256),
            (301, 97, 388),
            (20, 600, 2400),
            (30, 64, 255),
        ];
        let mut backends = vec![CpuBackend::new(2).unwrap()];
        backends.push(CpuBackend::with_isa(2, Isa::Scalar).unwrap());
        let cases = backends
            .iter()
            .flat_map(|be| ["bf16", "int8", "int16"].map(|format| (be, format)));
        for (be, format) in cases {
            for (m, d, n1) in shapes {
                let nm = norm(d);
                let x = rand_vec(m * d, 13);
                let (wq, wk) = (linear(d, d, 20, format), linear(d / 2 + 1, d, 22, format));
                let (w1, w2) = (linear(n1, d, 24, format), linear(d, n1, 26, format));
                let mut h = vec![0.0; m * d];
                let (mut q, mut k) = (vec![0.0; m * d], vec![0.0; m * (d / 2 + 1)]);
                be.layer_norm_linears(&x, m, &nm, &mut h, &mut [(&wq, &mut q), (&wk, &mut k)])
                    .unwrap();
                let (mut q2, mut k2) = (vec![0.0; m * d], vec![0.0; m * (d / 2 + 1)]);
                be.layer_norm(&x, &nm, &mut h).unwrap();
                be.linears(&h, m, &mut [(&wq, &mut q2), (&wk, &mut k2)])
                    .unwrap();
                let isa = be.isa();
                assert_eq!((&q, &k), (&q2, &k2), "{isa:?} {format} {m}×{d} linears");

                let mut got = x.clone();
                let mut buf = vec![0.0; m * n1];
                be.layer_norm_mlp(&mut got, m, &nm, &w1, &w2, &mut h, &mut buf)
                    .unwrap();
                let mut want = x.clone();
                be.layer_norm(&want, &nm, &mut h).unwrap();
                be.linear_gelu(&h, m, &w1, &mut buf).unwrap();
                be.linear_residual(&buf, m, &w2, &mut want).unwrap();
                assert_eq!(got, want, "{isa:?} {format} {m}×{d}×{n1} mlp");
            }
        }
    }

    #[test]
    fn fused_reject_bad_shapes() {
        let be = CpuBackend::new(1).unwrap();
        let (nm, w) = (norm(8), linear(8, 8, 1, "bf16"));
        let (mut h, mut out) = (vec![0.0; 80], vec![0.0; 80]);
        let x = vec![0.0; 80];
        // x holds 10 rows of 8, not 9.
        assert!(be
            .layer_norm_linears(&x, 9, &nm, &mut h, &mut [(&w, &mut out)])
            .is_err());
        // h is short.
        assert!(be
            .layer_norm_linears(&x, 10, &nm, &mut h[..72], &mut [(&w, &mut out)])
            .is_err());
        let mut x = x;
        let mut buf = vec![0.0; 79];
        assert!(be
            .layer_norm_mlp(&mut x, 10, &nm, &w, &w, &mut h, &mut buf)
            .is_err());
    }
}
