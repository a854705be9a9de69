//! Whisper's log-mel spectrogram, bit-for-bit in method with faster-whisper's
//! `FeatureExtractor` (and openai-whisper's `log_mel_spectrogram`).

use std::sync::Arc;

use rayon::prelude::*;
use realfft::{RealFftPlanner, RealToComplex};

use crate::{HOP_LENGTH, N_FFT, SAMPLE_RATE};

/// FFT bins of one frame: `N_FFT / 2 + 1`.
const N_BINS: usize = N_FFT / 2 + 1;
/// Frames one rayon task computes (enough work per task to amortise the scratch buffers).
const FRAMES_PER_TASK: usize = 64;
/// Frames computed before they are written out as log10 (1.3 MB at 80 mels).
const FRAMES_PER_TILE: usize = 4096;

/// A log-mel spectrogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Mel {
    pub n_mels: usize,
    pub n_frames: usize,
    /// Shape: [n_mels, n_frames], row-major.
    pub data: Vec<f32>,
}

/// Slaney-style mel filterbank for 16 kHz audio and a 400-point FFT, as
/// `librosa.filters.mel(sr=16000, n_fft=400, n_mels, htk=False, norm="slaney")`:
/// computed in f64, stored as f32.
///
/// Shape: [n_mels, 201], row-major.
pub fn mel_filters(n_mels: usize) -> Vec<f32> {
    let sr = f64::from(SAMPLE_RATE);
    let fft_freqs: Vec<f64> = (0..N_BINS).map(|k| k as f64 * sr / N_FFT as f64).collect();
    // Band edges: n_mels + 2 points evenly spaced on the Slaney mel scale from 0 Hz to Nyquist.
    let max_mel = hz_to_mel(sr / 2.0);
    let edges: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(max_mel * i as f64 / (n_mels + 1) as f64))
        .collect();
    let mut weights = vec![0f32; n_mels * N_BINS];
    for (m, row) in weights.chunks_exact_mut(N_BINS).enumerate() {
        let (lo, mid, hi) = (edges[m], edges[m + 1], edges[m + 2]);
        let enorm = 2.0 / (hi - lo);
        for (w, &f) in row.iter_mut().zip(&fft_freqs) {
            let lower = (f - lo) / (mid - lo);
            let upper = (hi - f) / (hi - mid);
            *w = (lower.min(upper).max(0.0) * enorm) as f32;
        }
    }
    weights
}

/// Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
fn hz_to_mel(hz: f64) -> f64 {
    const F_SP: f64 = 200.0 / 3.0;
    const MIN_LOG_HZ: f64 = 1000.0;
    let min_log_mel = MIN_LOG_HZ / F_SP;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= MIN_LOG_HZ {
        min_log_mel + (hz / MIN_LOG_HZ).ln() / logstep
    } else {
        hz / F_SP
    }
}

fn mel_to_hz(mel: f64) -> f64 {
    const F_SP: f64 = 200.0 / 3.0;
    const MIN_LOG_HZ: f64 = 1000.0;
    let min_log_mel = MIN_LOG_HZ / F_SP;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        MIN_LOG_HZ * (logstep * (mel - min_log_mel)).exp()
    } else {
        F_SP * mel
    }
}

/// The log-mel spectrogram of 16 kHz mono `samples` after appending `padding` zeros, as
/// faster-whisper's `FeatureExtractor(feature_size=n_mels)(samples, padding=padding)`:
/// centred STFT (reflect padding, periodic Hann, n_fft 400, hop 160), power spectrum, Slaney mel
/// filters, log10 clamped at 1e-10 and to 8 below the maximum, then `(x + 4) / 4`.
/// `n_frames = (samples.len() + padding) / 160` (the last STFT frame is dropped).
///
/// Shape of `data`: [n_mels, n_frames]. Empty input gives zero frames.
pub fn log_mel_spectrogram(samples: &[f32], n_mels: usize, padding: usize) -> Mel {
    let len = samples.len() + padding;
    let n_frames = len / HOP_LENGTH;
    if n_frames == 0 || n_mels == 0 {
        return Mel {
            n_mels,
            n_frames: 0,
            data: Vec::new(),
        };
    }
    let filters = SparseFilters::new(n_mels);
    let window = hann_window();
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT);
    let signal = Padded { samples, len };

    // Tiles of frames, each computed frame-major (every frame is independent) and then
    // written into its columns of the [n_mels, n_frames] result as log10: only a tile is
    // ever held twice, not the whole spectrogram (115 MB an hour at 80 mels).
    let mut data = vec![0f32; n_mels * n_frames];
    let mut tile = vec![0f32; FRAMES_PER_TILE.min(n_frames) * n_mels];
    let mut max = f32::NEG_INFINITY;
    for t0 in (0..n_frames).step_by(FRAMES_PER_TILE) {
        let frames = FRAMES_PER_TILE.min(n_frames - t0);
        let tile = &mut tile[..frames * n_mels];
        tile.par_chunks_mut(FRAMES_PER_TASK * n_mels)
            .enumerate()
            .for_each_init(
                || FrameScratch::new(&fft),
                |scratch, (task, out)| {
                    for (i, mel_row) in out.chunks_exact_mut(n_mels).enumerate() {
                        let frame = t0 + task * FRAMES_PER_TASK + i;
                        scratch.power_spectrum(&fft, &signal, &window, frame);
                        filters.apply(&scratch.power, mel_row);
                    }
                },
            );
        let tile = &*tile;
        let tile_max = data
            .par_chunks_mut(n_frames)
            .enumerate()
            .map(|(m, row)| {
                let mut row_max = f32::NEG_INFINITY;
                for (t, v) in row[t0..t0 + frames].iter_mut().enumerate() {
                    *v = log10_clamped(tile[t * n_mels + m]);
                    row_max = row_max.max(*v);
                }
                row_max
            })
            .reduce(|| f32::NEG_INFINITY, f32::max);
        max = max.max(tile_max);
    }
    let floor = max - 8.0;
    data.par_chunks_mut(FRAMES_PER_TASK * n_mels)
        .for_each(|chunk| {
            for v in chunk {
                *v = (v.max(floor) + 4.0) / 4.0;
            }
        });
    Mel {
        n_mels,
        n_frames,
        data,
    }
}

/// `log10(max(v, 1e-10))`, kept finite: a power past f32's range (samples far beyond ±1
/// in a float file) counts as the largest f32, and NaN (an FFT of such samples) as silence,
/// so the model never sees a non-finite input.
fn log10_clamped(v: f32) -> f32 {
    if v >= 1e-10 {
        v.min(f32::MAX).log10()
    } else {
        1e-10f32.log10()
    }
}

/// `np.hanning(401)[:-1]` (periodic Hann) computed in f64, stored as f32.
fn hann_window() -> Vec<f32> {
    (0..N_FFT)
        .map(|i| {
            let x = 2.0 * std::f64::consts::PI * i as f64 / N_FFT as f64;
            (0.5 - 0.5 * x.cos()) as f32
        })
        .collect()
}

/// The signal after zero padding, read with numpy's `reflect` extension on both sides
/// (the STFT's centring): index `j` may be negative or past the end.
struct Padded<'a> {
    samples: &'a [f32],
    len: usize,
}

impl Padded<'_> {
    fn at(&self, j: isize) -> f32 {
        let n = self.len as isize;
        let idx = if n == 1 {
            0
        } else {
            // Reflection without repeating the edge is periodic with period 2(n-1).
            let period = 2 * (n - 1);
            let r = j.rem_euclid(period);
            if r < n {
                r
            } else {
                period - r
            }
        } as usize;
        self.samples.get(idx).copied().unwrap_or(0.0)
    }
}

/// Per-thread buffers for one frame's FFT.
struct FrameScratch {
    input: Vec<f32>,
    spectrum: Vec<realfft::num_complex::Complex<f32>>,
    fft_scratch: Vec<realfft::num_complex::Complex<f32>>,
    /// |X[k]|^2 for k in 0..=200.
    power: Vec<f32>,
}

impl FrameScratch {
    fn new(fft: &Arc<dyn RealToComplex<f32>>) -> Self {
        Self {
            input: fft.make_input_vec(),
            spectrum: fft.make_output_vec(),
            fft_scratch: fft.make_scratch_vec(),
            power: vec![0.0; N_BINS],
        }
    }

    fn power_spectrum(
        &mut self,
        fft: &Arc<dyn RealToComplex<f32>>,
        signal: &Padded<'_>,
        window: &[f32],
        frame: usize,
    ) {
        let half = (N_FFT / 2) as isize;
        let start = (frame * HOP_LENGTH) as isize - half;
        let end = start + N_FFT as isize;
        if start >= 0 && end as usize <= signal.samples.len() {
            let src = &signal.samples[start as usize..end as usize];
            for ((x, &s), &w) in self.input.iter_mut().zip(src).zip(window) {
                *x = s * w;
            }
        } else {
            for (i, (x, &w)) in self.input.iter_mut().zip(window).enumerate() {
                *x = signal.at(start + i as isize) * w;
            }
        }
        fft.process_with_scratch(&mut self.input, &mut self.spectrum, &mut self.fft_scratch)
            .expect("buffers come from the plan, so their sizes match");
        for (p, c) in self.power.iter_mut().zip(&self.spectrum) {
            *p = c.norm_sqr();
        }
    }
}

/// Mel filters stored as each row's nonzero span (a row covers only a few FFT bins).
struct SparseFilters {
    rows: Vec<(usize, Vec<f32>)>,
}

impl SparseFilters {
    fn new(n_mels: usize) -> Self {
        let dense = mel_filters(n_mels);
        let rows = dense
            .chunks_exact(N_BINS)
            .map(|row| {
                let first = row.iter().position(|&w| w != 0.0).unwrap_or(0);
                let last = row.iter().rposition(|&w| w != 0.0).map_or(0, |l| l + 1);
                (first, row[first..last.max(first)].to_vec())
            })
            .collect();
        Self { rows }
    }

    /// `out[m] = sum_k filters[m][k] * power[k]`.
    fn apply(&self, power: &[f32], out: &mut [f32]) {
        for ((first, w), o) in self.rows.iter().zip(out) {
            *o = w.iter().zip(&power[*first..]).map(|(a, b)| a * b).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiles give what one pass over all frames gives, bit for bit, across tile edges and
    /// with the loudest frame in a later tile than the quietest.
    #[test]
    fn tiles_equal_one_pass() {
        let n = (2 * FRAMES_PER_TILE + 777) * HOP_LENGTH + 55;
        let x: Vec<f32> = (0..n)
            .map(|i| {
                let t = i as f32 / 16000.0;
                (t * 0.02).min(1.0) * (2.0 * std::f32::consts::PI * (300.0 + 40.0 * t) * t).sin()
            })
            .collect();
        let (n_mels, padding) = (80, HOP_LENGTH);
        let got = log_mel_spectrogram(&x, n_mels, padding);

        let len = n + padding;
        let n_frames = len / HOP_LENGTH;
        let filters = SparseFilters::new(n_mels);
        let window = hann_window();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(N_FFT);
        let signal = Padded { samples: &x, len };
        let mut scratch = FrameScratch::new(&fft);
        let mut by_frame = vec![0f32; n_frames * n_mels];
        for (frame, row) in by_frame.chunks_exact_mut(n_mels).enumerate() {
            scratch.power_spectrum(&fft, &signal, &window, frame);
            filters.apply(&scratch.power, row);
        }
        let max = by_frame
            .iter()
            .map(|&v| log10_clamped(v))
            .fold(f32::NEG_INFINITY, f32::max);
        let mut want = vec![0f32; n_mels * n_frames];
        for m in 0..n_mels {
            for t in 0..n_frames {
                let v = log10_clamped(by_frame[t * n_mels + m]).max(max - 8.0);
                want[m * n_frames + t] = (v + 4.0) / 4.0;
            }
        }
        assert_eq!(got.n_frames, n_frames);
        assert!(got.data == want, "tiled mel differs from one pass");
    }

    #[test]
    fn reflect_matches_numpy() {
        // np.pad(arange(1, n+1), 4, mode="reflect") for n = 1, 2, 3, 5.
        let cases: [(&[f32], &[f32]); 4] = [
            (&[1.], &[1.; 9]),
            (&[1., 2.], &[1., 2., 1., 2., 1., 2., 1., 2., 1., 2.]),
            (&[1., 2., 3.], &[1., 2., 3., 2., 1., 2., 3., 2., 1., 2., 3.]),
            (
                &[1., 2., 3., 4., 5.],
                &[5., 4., 3., 2., 1., 2., 3., 4., 5., 4., 3., 2., 1.],
            ),
        ];
        for (x, want) in cases {
            let p = Padded {
                samples: x,
                len: x.len(),
            };
            let got: Vec<f32> = (-4..x.len() as isize + 4).map(|j| p.at(j)).collect();
            assert_eq!(got, want, "n = {}", x.len());
        }
    }

    #[test]
    fn reflect_sees_the_zero_padding() {
        // Two samples plus two zeros of padding: reflection runs over the padded signal.
        let p = Padded {
            samples: &[1., 2.],
            len: 4,
        };
        let got: Vec<f32> = (-2..6).map(|j| p.at(j)).collect();
        assert_eq!(got, [0., 2., 1., 2., 0., 0., 0., 2.]);
    }

    #[test]
    fn frame_count_drops_the_last_stft_frame() {
        for (len, pad, frames) in [(0, 0, 0), (0, 160, 1), (159, 0, 0), (480_000, 160, 3001)] {
            let x = vec![0.1f32; len];
            let mel = log_mel_spectrogram(&x, 80, pad);
            assert_eq!(mel.n_frames, frames, "len {len} pad {pad}");
            assert_eq!(mel.data.len(), 80 * frames);
        }
    }

    #[test]
    fn silence_is_uniform_and_finite() {
        let mel = log_mel_spectrogram(&[0.0; 1600], 80, 160);
        // log10(1e-10) = -10, max is -10, so every value is (-10 + 4) / 4.
        assert!(mel.data.iter().all(|&v| v == -1.5), "{:?}", &mel.data[..4]);
    }

    #[test]
    fn samples_far_past_full_scale_give_a_finite_mel() {
        // Powers overflow f32 at 1e30; at 3e38 the FFT's sums do too (inf − inf = NaN).
        for amp in [1e30f32, 3e38] {
            let x: Vec<f32> = (0..16000).map(|i| amp * (i as f32 * 0.17).sin()).collect();
            let mel = log_mel_spectrogram(&x, 80, 160);
            assert!(mel.data.iter().all(|v| v.is_finite()), "amplitude {amp}");
        }
    }

    #[test]
    fn filters_have_expected_shape_and_peaks() {
        for n in [80, 128] {
            let f = mel_filters(n);
            assert_eq!(f.len(), n * N_BINS);
            // Every band has weight somewhere and all weights are nonnegative.
            for row in f.chunks_exact(N_BINS) {
                assert!(row.iter().all(|&w| w >= 0.0));
                assert!(row.iter().any(|&w| w > 0.0));
            }
        }
        assert!((hz_to_mel(8000.0) - 45.245640471924965).abs() < 1e-12);
        assert!((mel_to_hz(hz_to_mel(3210.0)) - 3210.0).abs() < 1e-9);
    }
}
