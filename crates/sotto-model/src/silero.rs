//! The Silero VAD network (v6, as faster-whisper 1.2.1 ships it; v5 has the same shape),
//! which gives each 32 ms window of 16 kHz audio a speech probability;
//! `sotto_audio::vad` turns those into stretches of speech.
//!
//! Per window of 512 new samples after 64 of context: reflect-padded by 128, a 258-filter
//! STFT convolution (stride 128, first frame dropped) to 129 magnitudes × 4 frames, four
//! 3-tap convolutions with ReLU (strides 1, 2, 2, 1) to 128 features, an LSTM cell (128)
//! carried from window to window, then ReLU, a 1×1 convolution and a sigmoid. The weights
//! come by name from the ONNX export (`from_tensors`) or the PyTorch state dict that
//! whisper.cpp's ggml files hold (`from_torch_tensors`).

use sotto_compute::{kernels, CpuBackend, Linear, Weight};

/// Samples per window at 16 kHz.
pub const WINDOW: usize = 512;
const CONTEXT: usize = 64;
const ROW: usize = WINDOW + CONTEXT;
const PAD: usize = 128;
const N_FFT: usize = 256;
const BINS: usize = 129;
const HIDDEN: usize = 128;
/// STFT frames per window.
const FRAMES: usize = 4;

/// A 3-tap convolution with one sample of zero padding each side, ReLU after: a GEMM
/// over every position's `[c_in][3]` patch (the weights' own layout).
struct Conv {
    lin: Linear,
    c_in: usize,
    stride: usize,
}

impl Conv {
    fn new(
        w: Vec<f32>,
        b: Vec<f32>,
        c_out: usize,
        c_in: usize,
        stride: usize,
    ) -> Result<Conv, String> {
        Ok(Conv {
            lin: linear(w, Some(b), c_out, c_in * 3)?,
            c_in,
            stride,
        })
    }

    /// `x` holds `m` windows of `t` positions, a row of `c_in` channels each; the output
    /// `m` windows of `t_out` positions of `c_out` channels, and `t_out`.
    fn forward(
        &self,
        be: &CpuBackend,
        x: &[f32],
        m: usize,
        t: usize,
    ) -> Result<(Vec<f32>, usize), String> {
        let (c_in, t_out) = (self.c_in, (t + 2 - 3) / self.stride + 1);
        let mut patches = vec![0f32; m * t_out * c_in * 3];
        for (r, patch) in patches.chunks_exact_mut(c_in * 3).enumerate() {
            let (w, j) = (r / t_out, r % t_out);
            for k in 0..3 {
                // Input position of tap k, with the one-sample zero padding.
                let Some(pos) = (j * self.stride + k).checked_sub(1).filter(|&p| p < t) else {
                    continue;
                };
                let src = &x[(w * t + pos) * c_in..][..c_in];
                for (i, &v) in src.iter().enumerate() {
                    patch[i * 3 + k] = v;
                }
            }
        }
        let mut y = vec![0f32; m * t_out * self.lin.n_out];
        be.linear(&patches, m * t_out, &self.lin, &mut y)
            .map_err(|e| e.to_string())?;
        y.iter_mut().for_each(|v| *v = v.max(0.0));
        Ok((y, t_out))
    }
}

/// A linear layer for sotto-compute's many-row f32 GEMM.
fn linear(w: Vec<f32>, b: Option<Vec<f32>>, n_out: usize, n_in: usize) -> Result<Linear, String> {
    let weight = Weight::F32(w)
        .for_f32_gemm(n_out, n_in, true)
        .map_err(|e| e.to_string())?;
    Linear::new(weight, b, n_out, n_in).map_err(|e| e.to_string())
}

/// Windows whose front end runs as one batch of GEMMs (about 1.6 MiB of patches at most).
const BATCH: usize = 256;

/// The Silero VAD network's weights.
pub struct SileroVad {
    /// The STFT as a linear layer: `[258][256]`, 129 real then 129 imaginary filters.
    stft: Linear,
    convs: [Conv; 4],
    /// The LSTM's input term: weights `[4·128][128]` (gates i, o, f, c as ONNX orders
    /// them) and both biases summed.
    lstm_in: Linear,
    /// The LSTM's recurrent weights, `[4·128][128]`.
    r: Vec<f32>,
    out_w: Vec<f32>,
    out_b: f32,
}

/// A network's tensors, checked, before its layers are built.
struct Parts {
    basis: Vec<f32>,
    convs: [ConvParts; 4],
    w: Vec<f32>,
    r: Vec<f32>,
    bias: Vec<f32>,
    out_w: Vec<f32>,
    out_b: f32,
}

/// Output and input channels and stride of the four convolutions.
const CONVS: [(usize, usize, usize); 4] = [(128, BINS, 1), (64, 128, 2), (64, 64, 2), (128, 64, 1)];

/// A named tensor's shape and values, or None where there is no such tensor.
type Lookup<'a> = &'a dyn Fn(&str) -> Option<(Vec<usize>, Vec<f32>)>;
/// A convolution's weights and bias.
type ConvParts = (Vec<f32>, Vec<f32>);

/// A tensor getter that checks shapes (`squeezed`: size-1 dimensions do not count, as
/// whisper.cpp's converter drops them).
fn checked<'a>(
    get: Lookup<'a>,
    squeezed: bool,
) -> impl Fn(&str, &[usize]) -> Result<Vec<f32>, String> + 'a {
    move |name, shape| {
        let (s, v) = get(name).ok_or_else(|| format!("no tensor {name}"))?;
        let dims = |d: &[usize]| -> Vec<usize> {
            d.iter().copied().filter(|&x| !squeezed || x != 1).collect()
        };
        if dims(&s) != dims(shape) || v.len() != shape.iter().product::<usize>() {
            return Err(format!("tensor {name} has shape {s:?}, not {shape:?}"));
        }
        Ok(v)
    }
}

/// The four convolutions' weights and biases, named by `name(layer, "weight" | "bias")`.
fn conv_parts(
    take: &impl Fn(&str, &[usize]) -> Result<Vec<f32>, String>,
    name: impl Fn(usize, &str) -> String,
) -> Result<[ConvParts; 4], String> {
    let conv = |i: usize| -> Result<ConvParts, String> {
        let (c_out, c_in, _) = CONVS[i];
        Ok((
            take(&name(i, "weight"), &[c_out, c_in, 3])?,
            take(&name(i, "bias"), &[c_out])?,
        ))
    };
    Ok([conv(0)?, conv(1)?, conv(2)?, conv(3)?])
}

impl SileroVad {
    /// The network from named float tensors (shape and values), as the ONNX export names
    /// them; an error names what is missing or misshapen.
    pub fn from_tensors(
        get: impl Fn(&str) -> Option<(Vec<usize>, Vec<f32>)>,
    ) -> Result<SileroVad, String> {
        let take = checked(&get, false);
        let b = take("onnx::LSTM_211", &[1, 8 * HIDDEN])?;
        SileroVad::new(Parts {
            basis: take(
                "encoder.feature_extractor.forward_basis_buffer",
                &[2 * BINS, 1, N_FFT],
            )?,
            convs: conv_parts(&take, |i, what| format!("encoder.conv_layers.{i}.{what}"))?,
            w: take("onnx::LSTM_209", &[1, 4 * HIDDEN, HIDDEN])?,
            r: take("onnx::LSTM_210", &[1, 4 * HIDDEN, HIDDEN])?,
            bias: (0..4 * HIDDEN).map(|i| b[i] + b[4 * HIDDEN + i]).collect(),
            out_w: take("decoder.conv1d.weight", &[1, HIDDEN, 1])?,
            out_b: take("decoder.conv1d.bias", &[1])?[0],
        })
    }

    /// The network from the PyTorch state dict's tensors, as whisper.cpp's ggml VAD files
    /// hold them (`_model.encoder.0.reparam_conv.weight`, ...; size-1 dimensions may be
    /// squeezed away). PyTorch orders the LSTM's gates i, f, g, o; they are reordered to
    /// ONNX's i, o, f, c here.
    pub fn from_torch_tensors(
        get: impl Fn(&str) -> Option<(Vec<usize>, Vec<f32>)>,
    ) -> Result<SileroVad, String> {
        let take = checked(&get, true);
        // PyTorch's gate blocks i, f, g, o, in ONNX's order i, o, f, c.
        let onnx_order = |v: Vec<f32>| -> Vec<f32> {
            let block = v.len() / 4;
            [0, 3, 1, 2]
                .iter()
                .flat_map(|&g| v[g * block..(g + 1) * block].to_vec())
                .collect()
        };
        let (b_ih, b_hh) = (
            onnx_order(take("_model.decoder.rnn.bias_ih", &[4 * HIDDEN])?),
            onnx_order(take("_model.decoder.rnn.bias_hh", &[4 * HIDDEN])?),
        );
        SileroVad::new(Parts {
            basis: take("_model.stft.forward_basis_buffer", &[2 * BINS, 1, N_FFT])?,
            convs: conv_parts(&take, |i, what| {
                format!("_model.encoder.{i}.reparam_conv.{what}")
            })?,
            w: onnx_order(take("_model.decoder.rnn.weight_ih", &[4 * HIDDEN, HIDDEN])?),
            r: onnx_order(take("_model.decoder.rnn.weight_hh", &[4 * HIDDEN, HIDDEN])?),
            bias: b_ih.iter().zip(&b_hh).map(|(a, b)| a + b).collect(),
            out_w: take("_model.decoder.decoder.2.weight", &[1, HIDDEN, 1])?,
            out_b: take("_model.decoder.decoder.2.bias", &[1])?[0],
        })
    }

    /// The layers, packed for the GEMM, from checked tensors.
    fn new(p: Parts) -> Result<SileroVad, String> {
        let [c0, c1, c2, c3] = p.convs;
        let conv = |(w, b): ConvParts, i: usize| {
            let (c_out, c_in, stride) = CONVS[i];
            Conv::new(w, b, c_out, c_in, stride)
        };
        Ok(SileroVad {
            stft: linear(p.basis, None, 2 * BINS, N_FFT)?,
            convs: [conv(c0, 0)?, conv(c1, 1)?, conv(c2, 2)?, conv(c3, 3)?],
            lstm_in: linear(p.w, Some(p.bias), 4 * HIDDEN, HIDDEN)?,
            r: p.r,
            out_w: p.out_w,
            out_b: p.out_b,
        })
    }

    /// Speech probability of each 512-sample window of 16 kHz `audio`, as faster-whisper
    /// computes them: the audio padded with zeros to a whole number of windows plus one
    /// more when it already is one, each window seeing the previous one's last 64 samples.
    ///
    /// Batches of windows run the front end (STFT, convolutions) and the LSTM's input term
    /// as GEMMs on as many threads as the calling rayon pool has; the LSTM's recurrence
    /// then runs window after window. Fails only where the threads cannot start.
    pub fn probabilities(&self, audio: &[f32]) -> Result<Vec<f32>, String> {
        let be = CpuBackend::new(rayon::current_num_threads()).map_err(|e| e.to_string())?;
        let n = audio.len() / WINDOW + 1;
        // The padded audio: zeros before the start (the first window's context) and after
        // the end.
        let sample = |i: isize| usize::try_from(i).ok().and_then(|i| audio.get(i)).copied();
        let mut probs = Vec::with_capacity(n);
        let (mut h, mut c) = ([0f32; HIDDEN], [0f32; HIDDEN]);
        let isa = be.isa();
        for first in (0..n).step_by(BATCH) {
            let m = BATCH.min(n - first);
            // Each window's 64 + 512 samples, reflect-padded by 128 (the edge sample not
            // repeated); its STFT frames 1..=4 (the export drops frame 0), 256 samples each.
            let mut frames = vec![0f32; m * FRAMES * N_FFT];
            for (w, win) in frames.chunks_exact_mut(FRAMES * N_FFT).enumerate() {
                let start = ((first + w) * WINDOW) as isize - CONTEXT as isize;
                let mut x = [0f32; ROW + 2 * PAD];
                for (j, v) in x.iter_mut().enumerate() {
                    let i = j as isize - PAD as isize;
                    let i = if i < 0 {
                        -i
                    } else if i >= ROW as isize {
                        2 * (ROW as isize - 1) - i
                    } else {
                        i
                    };
                    *v = sample(start + i).unwrap_or(0.0);
                }
                for (f, frame) in win.chunks_exact_mut(N_FFT).enumerate() {
                    frame.copy_from_slice(&x[(f + 1) * PAD..][..N_FFT]);
                }
            }
            let mut spec = vec![0f32; m * FRAMES * 2 * BINS];
            be.linear(&frames, m * FRAMES, &self.stft, &mut spec)
                .map_err(|e| e.to_string())?;
            let mut x: Vec<f32> = spec
                .chunks_exact(2 * BINS)
                .flat_map(|row| {
                    let (re, im) = row.split_at(BINS);
                    re.iter().zip(im).map(|(a, b)| (a * a + b * b).sqrt())
                })
                .collect();
            let mut t = FRAMES;
            for conv in &self.convs {
                (x, t) = conv.forward(&be, &x, m, t)?;
            }
            debug_assert_eq!(t, 1);
            let mut pre = vec![0f32; m * 4 * HIDDEN];
            be.linear(&x, m, &self.lstm_in, &mut pre)
                .map_err(|e| e.to_string())?;
            // The LSTM's recurrence (R·h), window after window.
            for gates in pre.chunks_exact_mut(4 * HIDDEN) {
                for (gate, r) in gates.iter_mut().zip(self.r.chunks_exact(HIDDEN)) {
                    *gate += kernels::dot(isa, r, &h);
                }
                // σ(x) = 1 / (1 + e^−x) for gates i, o, f; tanh(x) = ±(1 − e^−2|x|) /
                // (1 + e^−2|x|) for the cell input and the cell, one vector exp each.
                let (sig, cand) = gates.split_at_mut(3 * HIDDEN);
                sig.iter_mut().for_each(|v| *v = -*v);
                let signs: [f32; HIDDEN] = std::array::from_fn(|k| cand[k].signum());
                cand.iter_mut().for_each(|v| *v = -2.0 * v.abs());
                kernels::exp_sub_sum(isa, gates, 0.0);
                let (sig, cand) = gates.split_at(3 * HIDDEN);
                let sigmoid = |e: f32| 1.0 / (1.0 + e);
                let tanh = |e: f32, sign: f32| sign * (1.0 - e) / (1.0 + e);
                let mut tc = [0f32; HIDDEN];
                for k in 0..HIDDEN {
                    let (i, f) = (sigmoid(sig[k]), sigmoid(sig[2 * HIDDEN + k]));
                    c[k] = f * c[k] + i * tanh(cand[k], signs[k]);
                    tc[k] = -2.0 * c[k].abs();
                }
                kernels::exp_sub_sum(isa, &mut tc, 0.0);
                let mut out = self.out_b;
                for k in 0..HIDDEN {
                    h[k] = sigmoid(sig[HIDDEN + k]) * tanh(tc[k], c[k].signum());
                    out += self.out_w[k] * h[k].max(0.0);
                }
                probs.push(1.0 / (1.0 + (-out).exp()));
            }
        }
        Ok(probs)
    }
}
