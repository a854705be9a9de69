//! What AMR-NB and AMR-WB share of FFmpeg's CELP code (its `celp_*`, `acelp_*` and `lsp`
//! files): each in FFmpeg's steps and precision, on which the samples depend to the bit.

/// `log2(10)`, as FFmpeg's `exp10` multiplies by it.
const LOG2_10: f64 = std::f64::consts::LOG2_10;

/// Reads a frame's payload into `params` by a bit-order table: each parameter's index,
/// then its bits' positions, most significant first (bit `b` of the payload being bit
/// `b % 8` of byte `b / 8`, from the least significant, as the tables count them).
pub(super) fn unpack_bits<B: Copy + Into<usize>>(
    order: &[(u8, &[B])],
    payload: &[u8],
    params: &mut [u16],
) {
    for &(field, bits) in order {
        let mut v = 0u16;
        for &b in bits {
            let b: usize = b.into();
            let byte = payload.get(b >> 3).copied().unwrap_or(0);
            v = (v << 1) | u16::from(byte >> (b & 7) & 1);
        }
        params[usize::from(field)] = v;
    }
}

/// `a·b`, summed in order as FFmpeg's C does.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sum = 0f32;
    for (x, y) in a.iter().zip(b) {
        sum += x * y;
    }
    sum
}

pub(super) fn weighted_sum<const N: usize>(
    a: &[f32; N],
    b: &[f32; N],
    wa: f32,
    wb: f32,
) -> [f32; N] {
    std::array::from_fn(|i| wa * a[i] + wb * b[i])
}

/// Raises LSFs (in [0, 1]) to keep them `spacing` apart.
pub(super) fn set_min_dist_lsf(lsf: &mut [f32], spacing: f64) {
    let mut prev = 0f32;
    for l in lsf.iter_mut() {
        let floor = f64::from(prev) + spacing;
        *l = f64::from(*l).max(floor) as f32;
        prev = *l;
    }
}

/// LSFs (in [0, 1]) to LSPs, their cosines.
pub(super) fn lsf2lspd<const N: usize>(lsf: &[f32; N]) -> [f64; N] {
    std::array::from_fn(|i| (2.0 * std::f64::consts::PI * f64::from(lsf[i])).cos())
}

/// The coefficients of the polynomial whose roots are `lsp[0], lsp[2], …` (as cosines).
fn lsp2polyf(lsp: &[f64], f: &mut [f64], half: usize) {
    f[0] = 1.0;
    f[1] = -2.0 * lsp[0];
    for i in 2..=half {
        let val = -2.0 * lsp[2 * i - 2];
        f[i] = val * f[i - 1] + 2.0 * f[i - 2];
        for j in (2..i).rev() {
            f[j] += f[j - 1] * val + f[j - 2];
        }
        f[1] += val;
    }
}

/// An LSP vector of order 10 to its LP coefficients.
pub(super) fn lspd2lpc(lsp: &[f64; 10]) -> [f32; 10] {
    let mut pa = [0f64; 6];
    let mut qa = [0f64; 6];
    lsp2polyf(lsp, &mut pa, 5);
    lsp2polyf(&lsp[1..], &mut qa, 5);
    let mut lpc = [0f32; 10];
    for k in (0..5).rev() {
        let paf = pa[k + 1] + pa[k];
        let qaf = qa[k + 1] - qa[k];
        lpc[k] = (0.5 * (paf + qaf)) as f32;
        lpc[9 - k] = (0.5 * (paf - qaf)) as f32;
    }
    lpc
}

/// An ISP vector (AMR-WB's: `N - 1` LSPs, then the last coefficient itself) to its LP
/// coefficients.
pub(super) fn isp2lpc<const N: usize>(isp: &[f64; N]) -> [f32; N] {
    let half = N / 2;
    let mut pa = [0f64; 11];
    // `qa` from its second entry on, the first being the zero `qa[-1]` is read as.
    let mut qa = [0f64; 12];
    lsp2polyf(isp, &mut pa, half);
    lsp2polyf(&isp[1..], &mut qa[1..], half - 1);
    let last = isp[N - 1];
    let mut lp = [0f32; N];
    for i in 1..half {
        let paf = pa[i] * (1.0 + last);
        let qaf = (qa[i + 1] - qa[i - 1]) * (1.0 - last);
        lp[i - 1] = ((paf + qaf) * 0.5) as f32;
        lp[N - 1 - i] = ((paf - qaf) * 0.5) as f32;
    }
    lp[half - 1] = ((1.0 + last) * pa[half] * 0.5) as f32;
    lp[N - 1] = last as f32;
    lp
}

/// The LP synthesis filter `1/A(z)` of an even order (`c.len()`, at least 4) over
/// `input`, into `buf` from `at` on, the samples before `at` being the filter's memory.
/// FFmpeg's four-sample unrolling, whose order of sums the samples depend on, is kept.
pub(super) fn lp_synthesis(buf: &mut [f32], at: usize, c: &[f32], input: &[f32]) {
    let order = c.len();
    let len = input.len();
    let a = c[0];
    let mut b = c[1];
    let mut cc = c[2];
    b -= c[0] * c[0];
    cc -= c[1] * c[0];
    cc -= c[0] * b;
    let mut old0 = buf[at - 4];
    let mut old1 = buf[at - 3];
    let mut old2 = buf[at - 2];
    let mut old3 = buf[at - 1];
    let mut n = 0;
    while n + 4 <= len {
        let o = at + n;
        let mut out0 = input[n];
        let mut out1 = input[n + 1];
        let mut out2 = input[n + 2];
        let mut out3 = input[n + 3];
        out0 -= c[2] * old1;
        out1 -= c[2] * old2;
        out2 -= c[2] * old3;
        out0 -= c[1] * old2;
        out1 -= c[1] * old3;
        out0 -= c[0] * old3;
        let val = c[3];
        out0 -= val * old0;
        out1 -= val * old1;
        out2 -= val * old2;
        out3 -= val * old3;
        let mut i = 5;
        while i < order {
            old3 = buf[o - i];
            let val = c[i - 1];
            out0 -= val * old3;
            out1 -= val * old0;
            out2 -= val * old1;
            out3 -= val * old2;
            old2 = buf[o - i - 1];
            let val = c[i];
            out0 -= val * old2;
            out1 -= val * old3;
            out2 -= val * old0;
            out3 -= val * old1;
            std::mem::swap(&mut old0, &mut old2);
            old1 = old3;
            i += 2;
        }
        let (t0, t1, t2) = (out0, out1, out2);
        out3 -= a * t2;
        out2 -= a * t1;
        out1 -= a * t0;
        out3 -= b * t1;
        out2 -= b * t0;
        out3 -= cc * t0;
        buf[o] = out0;
        buf[o + 1] = out1;
        buf[o + 2] = out2;
        buf[o + 3] = out3;
        old0 = out0;
        old1 = out1;
        old2 = out2;
        old3 = out3;
        n += 4;
    }
    while n < len {
        let o = at + n;
        let mut v = input[n];
        for (i, &ci) in c.iter().enumerate() {
            v -= ci * buf[o - i - 1];
        }
        buf[o] = v;
        n += 1;
    }
}

/// `out[k] = a[k] + fac · lagged[(k - lag) mod N]`.
pub(super) fn circ_add<const N: usize>(
    a: &[f32; N],
    lagged: &[f32; N],
    lag: usize,
    fac: f32,
) -> [f32; N] {
    std::array::from_fn(|k| match k < lag {
        true => a[k] + fac * lagged[N + k - lag],
        false => a[k] + fac * lagged[k - lag],
    })
}

/// Scales `v` to the sum of squares `energy` (where it is not all zeros).
pub(super) fn scale_to_energy(v: &mut [f32], energy: f32) {
    let now = dot(v, v);
    let scale = match now != 0.0 {
        true => f64::from(energy / now).sqrt() as f32,
        false => now,
    };
    for e in v.iter_mut() {
        *e *= scale;
    }
}

/// A second-order filter in place, of zeros (-2, 1): `(1 - z⁻¹)²` times `gain` over the
/// `poles`; a high-pass.
pub(super) fn order_2_filter(v: &mut [f32], poles: [f32; 2], gain: f32, mem: &mut [f32; 2]) {
    for s in v.iter_mut() {
        let tmp = gain * *s - poles[0] * mem[0] - poles[1] * mem[1];
        *s = tmp + -2.0 * mem[0] + 1.0 * mem[1];
        mem[1] = mem[0];
        mem[0] = tmp;
    }
}

/// The fixed codebook gain from its coded correction `factor` of the gain that the last
/// four subframes' errors predict (TS 26.090 equations 66–69, TS 26.190's likewise), for a
/// fixed vector of `mean_energy`; records this one's prediction error.
pub(super) fn predicted_gain(
    factor: f32,
    mean_energy: f32,
    prediction_error: &mut [f32; 4],
    energy_mean: f32,
    pred: &[f32; 4],
) -> f32 {
    let predicted = dot(pred, prediction_error);
    let db = 0.05 * f64::from(predicted + energy_mean);
    let energy = match mean_energy != 0.0 {
        true => mean_energy,
        false => 1.0,
    };
    let val = (f64::from(factor) * (LOG2_10 * db).exp2() / f64::from(energy.sqrt())) as f32;
    prediction_error.copy_within(1.., 0);
    prediction_error[3] = (20.0 * f64::from(factor.log10())) as f32;
    val
}

/// The past excitation `exc[start..]` interpolated to a fractional lag: `out[n]` (into
/// `exc[at + n]`, which may overwrite its own later input, as FFmpeg's does) is
/// `Σ in[n + i] c[p·i + frac] + in[n - i - 1] c[p·(i + 1) - frac]` over `taps` pairs.
pub(super) fn interpolate(
    exc: &mut [f32],
    (start, at, len): (usize, usize, usize),
    coefs: &[f32],
    precision: usize,
    frac: usize,
    taps: usize,
) {
    for n in 0..len {
        let mut v = 0f32;
        let mut idx = 0;
        let mut i = 0;
        while i < taps {
            v += exc[start + n + i] * coefs[idx + frac];
            idx += precision;
            i += 1;
            v += exc[start + n - i] * coefs[idx - frac];
        }
        exc[at + n] = v;
    }
}
