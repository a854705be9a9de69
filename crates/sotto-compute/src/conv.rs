//! 1-D convolution (kernel 3, padding 1) as a linear layer over im2col rows. The weight
//! is taps first ([`crate::Weight::taps_first`]), so a column row is three input time
//! steps side by side, which is a slice of the input itself: the bf16 GEMM reads those
//! slices in place (rows `stride·c_in` apart, see `CpuBackend::conv_bf16`); the other
//! paths copy them into a column matrix.

use rayon::prelude::*;

use crate::{shape_err, CpuBackend, Linear, Result, Weight};

const KERNEL: usize = 3;

impl CpuBackend {
    /// Conv1d with kernel 3, padding 1 and the given stride, on time-major data.
    ///
    /// `x` Shape: [t_in, c_in]; `w.weight` Shape: [c_out, 3, c_in] (taps first: PyTorch's
    /// [c_out, c_in, 3] through [`crate::Weight::taps_first`]), a linear layer with
    /// n_in = 3·c_in; `out` Shape: [t_out, c_out] with
    /// t_out = (t_in − 1) / stride + 1. Returns t_out.
    pub fn conv1d(
        &self,
        x: &[f32],
        c_in: usize,
        w: &Linear,
        stride: usize,
        out: &mut [f32],
    ) -> Result<usize> {
        self.conv1d_act(x, c_in, w, stride, out, false)
    }

    /// [`CpuBackend::conv1d`] then GELU, applied to each output block while it is hot.
    pub fn conv1d_gelu(
        &self,
        x: &[f32],
        c_in: usize,
        w: &Linear,
        stride: usize,
        out: &mut [f32],
    ) -> Result<usize> {
        self.conv1d_act(x, c_in, w, stride, out, true)
    }

    fn conv1d_act(
        &self,
        x: &[f32],
        c_in: usize,
        w: &Linear,
        stride: usize,
        out: &mut [f32],
        gelu: bool,
    ) -> Result<usize> {
        if c_in == 0 || stride == 0 || !x.len().is_multiple_of(c_in) || w.n_in != c_in * KERNEL {
            return Err(shape_err(
                "conv1d",
                format!(
                    "x has {} elements, c_in {c_in}, stride {stride}, weight n_in {}",
                    x.len(),
                    w.n_in
                ),
            ));
        }
        let t_in = x.len() / c_in;
        if t_in == 0 {
            return Err(shape_err("conv1d", "empty input"));
        }
        let t_out = (t_in - 1) / stride + 1;
        if out.len() != t_out * w.n_out {
            return Err(shape_err(
                "conv1d",
                format!(
                    "out has {} elements, expected {t_out}×{}",
                    out.len(),
                    w.n_out
                ),
            ));
        }
        // In place needs whole bf16 pairs per input row; a probe sees the column rows.
        if t_out > crate::linear::SMALL_M
            && c_in.is_multiple_of(2)
            && matches!(w.weight, Weight::Bf16(_))
            && crate::bf16::simd(self.isa)
            && self.probe.is_none()
        {
            let epi = crate::blocked::Epi::gelu(gelu);
            self.conv_bf16(x, c_in, w, stride, t_out, out, epi);
            return Ok(t_out);
        }
        if t_out > crate::linear::SMALL_M
            && crate::int8::runs(self.isa, &w.weight)
            && self.probe.is_none()
        {
            let epi = crate::blocked::Epi::gelu(gelu);
            self.conv_int8(x, c_in, w, stride, t_out, out, epi);
            return Ok(t_out);
        }
        let kc = c_in * KERNEL;
        // Kept between calls (a base window's conv2 columns are 9 MB: fresh, they cost
        // their page faults every window); every element is written below.
        let mut cols = self.scratch_f32.take_dirty();
        cols.truncate(t_out * kc);
        cols.resize(t_out * kc, 0.0);
        self.install(|| {
            cols.par_chunks_mut(kc)
                .enumerate()
                .for_each(|(t, col)| gather_column(x, c_in, stride, t, col))
        });
        self.observe(&[w], &cols, t_out);
        let result = self.linear_act(&cols, t_out, w, out, gelu);
        self.scratch_f32.give(cols);
        result?;
        Ok(t_out)
    }
}

/// Output step `t`'s im2col column of `x` (Shape: [t_in, c_in]) into `col` (Shape:
/// [KERNEL·c_in]): input steps t·stride − 1 ..= t·stride + 1 side by side, zeros outside
/// [0, t_in) (the padding).
pub(crate) fn gather_column(x: &[f32], c_in: usize, stride: usize, t: usize, col: &mut [f32]) {
    let t_in = x.len() / c_in;
    for (kk, dst) in col.chunks_exact_mut(c_in).enumerate() {
        match (t * stride + kk).checked_sub(1).filter(|&ti| ti < t_in) {
            Some(ti) => dst.copy_from_slice(&x[ti * c_in..(ti + 1) * c_in]),
            None => dst.fill(0.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{max_abs_diff, rand_vec};
    use crate::Weight;

    fn naive(
        x: &[f32],
        c_in: usize,
        w: &[f32],
        b: &[f32],
        c_out: usize,
        stride: usize,
    ) -> Vec<f32> {
        let t_in = x.len() / c_in;
        let t_out = (t_in - 1) / stride + 1;
        let mut out = vec![0.0f32; t_out * c_out];
        for t in 0..t_out {
            for o in 0..c_out {
                let mut s = b[o] as f64;
                for c in 0..c_in {
                    for kk in 0..3 {
                        let ti = (t * stride + kk) as isize - 1;
                        if ti >= 0 && (ti as usize) < t_in {
                            s += x[ti as usize * c_in + c] as f64
                                * w[(o * c_in + c) * 3 + kk] as f64;
                        }
                    }
                }
                out[t * c_out + o] = s as f32;
            }
        }
        out
    }

    /// A conv weight (PyTorch's [c_out, c_in, 3], `w`) and bias `b` as the linear layer
    /// `conv1d` takes, packed for the bf16 GEMM when `bf16`.
    fn conv_linear(w: &[f32], b: &[f32], c_out: usize, c_in: usize, bf16: bool) -> Linear {
        let taps = Weight::F32(w.to_vec()).taps_first(c_out, c_in, 3).unwrap();
        let taps = taps.for_bf16_gemm(c_out, c_in * 3, bf16).unwrap();
        Linear::new(taps, Some(b.to_vec()), c_out, c_in * 3).unwrap()
    }

    #[test]
    fn conv1d_matches_naive() {
        let be = CpuBackend::new(2).unwrap();
        let shapes = [
            (1, 1, 1, 1),
            (7, 3, 5, 1),
            (7, 3, 5, 2),
            (30, 8, 11, 2),
            (31, 5, 4, 2),
        ];
        // Twice: the second pass reuses the column buffer of a larger input.
        for &(t_in, c_in, c_out, stride) in shapes.iter().chain(&shapes) {
            let x = rand_vec(t_in * c_in, 1);
            let w = rand_vec(c_out * c_in * 3, 2);
            let b = rand_vec(c_out, 3);
            let lin = conv_linear(&w, &b, c_out, c_in, false);
            let t_out = (t_in - 1) / stride + 1;
            let mut out = vec![f32::NAN; t_out * c_out];
            assert_eq!(be.conv1d(&x, c_in, &lin, stride, &mut out).unwrap(), t_out);
            assert!(max_abs_diff(&out, &naive(&x, c_in, &w, &b, c_out, stride)) < 1e-5);
        }
        let lin = Linear::new(Weight::F32(vec![0.0; 6]), None, 1, 6).unwrap();
        assert!(be
            .conv1d_gelu(&[0.0; 4], 2, &lin, 2, &mut [0.0; 2])
            .is_err());
        assert!(be.conv1d(&[0.0; 4], 2, &lin, 2, &mut [0.0; 2]).is_err());
        assert!(be.conv1d(&[0.0; 5], 2, &lin, 2, &mut [0.0; 1]).is_err());
        assert!(be.conv1d(&[0.0; 4], 2, &lin, 0, &mut [0.0; 1]).is_err());
    }

    /// The in-place paths (bf16 pairs; int8 columns quantized as they are gathered)
    /// against im2col columns through the same linear: the same values meet the same
    /// weights in the same order, so the bits match.
    #[test]
    fn in_place_matches_columns() {
        let be = CpuBackend::new(2).unwrap();
        let mut formats = vec![];
        if crate::bf16_gemm_supported() {
            formats.push("bf16");
        } else {
            eprintln!("bf16 skipped: no AVX-512 BF16");
        }
        let int8 = Weight::F32(vec![0.0; 4]).for_int8_gemm(1, 4, true).unwrap();
        if crate::int8::runs(be.isa, &int8) {
            formats.push("int8");
        } else {
            eprintln!("int8 skipped: no int8 tile on this CPU");
        }
        for format in formats {
            in_place_matches_columns_for(&be, format);
        }
    }

    fn in_place_matches_columns_for(be: &CpuBackend, format: &str) {
        // (t_in, c_in, c_out, stride): odd and even lengths, a partial last row tile and
        // block, Whisper's conv1 and conv2 shapes (scaled down in time).
        let shapes = [
            (9, 2, 3, 1),
            (20, 6, 70, 2),
            (21, 6, 70, 2),
            (131, 80, 96, 1),
            (300, 384, 384, 2),
            (301, 8, 300, 2),
        ];
        for (t_in, c_in, c_out, stride) in shapes {
            let x = rand_vec(t_in * c_in, 4);
            let (w, b) = (rand_vec(c_out * c_in * 3, 5), rand_vec(c_out, 6));
            let lin = match format {
                "bf16" => conv_linear(&w, &b, c_out, c_in, true),
                _ => {
                    let taps = Weight::F32(w.to_vec()).taps_first(c_out, c_in, 3).unwrap();
                    let taps = taps.for_int8_gemm(c_out, c_in * 3, true).unwrap();
                    Linear::new(taps, Some(b.to_vec()), c_out, c_in * 3).unwrap()
                }
            };
            let t_out = (t_in - 1) / stride + 1;
            let mut cols = vec![0.0; t_out * 3 * c_in];
            for (t, col) in cols.chunks_exact_mut(3 * c_in).enumerate() {
                for (kk, dst) in col.chunks_exact_mut(c_in).enumerate() {
                    if let Some(ti) = (t * stride + kk).checked_sub(1).filter(|&ti| ti < t_in) {
                        dst.copy_from_slice(&x[ti * c_in..(ti + 1) * c_in]);
                    }
                }
            }
            for gelu in [false, true] {
                let mut want = vec![0.0; t_out * c_out];
                let mut got = vec![f32::NAN; t_out * c_out];
                if gelu {
                    be.linear_gelu(&cols, t_out, &lin, &mut want).unwrap();
                    be.conv1d_gelu(&x, c_in, &lin, stride, &mut got).unwrap();
                } else {
                    be.linear(&cols, t_out, &lin, &mut want).unwrap();
                    be.conv1d(&x, c_in, &lin, stride, &mut got).unwrap();
                }
                assert_eq!(
                    got, want,
                    "{format}: {t_in}×{c_in} → {c_out}, stride {stride}, gelu {gelu}"
                );
            }
        }
    }
}
