//! Band-limited resampling to 16 kHz (rubato's windowed-sinc resampler).

use rubato::{
    calculate_cutoff, Resampler, SincFixedIn, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use crate::{AudioError, Result, SAMPLE_RATE};

/// Lowest and highest input rates accepted (telephone-grade to studio 768 kHz).
const MIN_RATE: u32 = 1000;
const MAX_RATE: u32 = 768_000;
/// Input frames per resampler call.
const CHUNK: usize = 4096;
/// Sinc filter length: long, for a flat passband up to ~0.95 of the lower Nyquist.
const SINC_LEN: usize = 256;
/// Sinc sub-steps per input sample. rubato 0.16 places output samples 1/OVERSAMPLING of an input
/// sample late (a fixed sub-step bias we cannot shift away in whole samples); at 1024 that is
/// under 0.1 ppm of a second at 16 kHz, with a 1 MiB filter table.
const OVERSAMPLING: usize = 1024;
/// Most distinct output phases (16000 / gcd(rate, 16000)) for which the filter table holds
/// every phase exactly, so that each output is one 256-tap dot product instead of four
/// interpolated ones: 48 kHz has 1 phase, 44.1 kHz 160, 22.05 kHz 320, 11.025 kHz 640.
/// Rates with more (44 056 Hz: 2000) interpolate the table.
const MAX_EXACT_PHASES: usize = 2048;

/// Resamples mono `samples` at `rate` Hz to 16 kHz. The result has exactly
/// `round(len * 16000 / rate)` samples and is aligned with the input: output k is the
/// band-limited input at time k / 16000 s. At 16 kHz the input is returned unchanged.
pub fn resample_to_16k(samples: &[f32], rate: u32) -> Result<Vec<f32>> {
    resample_with(samples, rate, true)
}

/// [`resample_to_16k`], with the filter's taps looked up at exact phases where `exact`
/// asks for it and the rate has at most [`MAX_EXACT_PHASES`] (the table's sub-steps a
/// multiple of them), else interpolated between sub-steps. Both give the same
/// band-limited signal (tested); the first takes one tap per tap instead of four.
fn resample_with(samples: &[f32], rate: u32, exact: bool) -> Result<Vec<f32>> {
    if rate == SAMPLE_RATE {
        return Ok(samples.to_vec());
    }
    if !(MIN_RATE..=MAX_RATE).contains(&rate) {
        return Err(AudioError::SampleRate {
            input: "audio".to_string(),
            rate,
            min: MIN_RATE,
            max: MAX_RATE,
        });
    }
    let out_len = output_len(samples.len(), rate);
    if out_len == 0 {
        return Ok(Vec::new());
    }
    let window = WindowFunction::BlackmanHarris2;
    let phases = (SAMPLE_RATE / gcd(rate, SAMPLE_RATE)) as usize;
    let (interpolation, oversampling_factor) = if exact && phases <= MAX_EXACT_PHASES {
        // Output k lies k·rate/16000 input samples in: a whole number of 1/phases steps,
        // so a table of a multiple of `phases` sub-steps has its taps exactly.
        let n = phases * OVERSAMPLING.div_ceil(phases);
        (SincInterpolationType::Nearest, n)
    } else {
        (SincInterpolationType::Cubic, OVERSAMPLING)
    };
    let params = SincInterpolationParameters {
        sinc_len: SINC_LEN,
        f_cutoff: calculate_cutoff(SINC_LEN, window),
        interpolation,
        oversampling_factor,
        window,
    };
    let ratio = f64::from(SAMPLE_RATE) / f64::from(rate);
    let align = Alignment::new(rate);
    let total_in = align.zeros + samples.len();
    let chunk = CHUNK.min(total_in).max(1);
    let mut resampler =
        SincFixedIn::<f32>::new(ratio, 1.0, params, chunk, 1).map_err(resample_error)?;
    let want = align.skip + out_len;
    let mut out: Vec<f32> = Vec::with_capacity(want + chunk);
    let mut out_buf = resampler.output_buffer_allocate(true);
    let mut in_buf = vec![0f32; chunk];

    let mut pos = 0;
    while pos + chunk <= total_in && out.len() < want {
        align.fill(samples, pos, &mut in_buf);
        let (used, written) = resampler
            .process_into_buffer(&[&in_buf], &mut out_buf, None)
            .map_err(resample_error)?;
        out.extend_from_slice(&out_buf[0][..written]);
        pos += used;
    }
    // The partial last chunk, then zeros until the filter's tail has come out. (rubato reads an
    // empty slice as an inactive channel, so an empty remainder is passed as no input.)
    let rest = total_in.saturating_sub(pos);
    let mut tail = (rest > 0 && out.len() < want).then(|| {
        align.fill(samples, pos, &mut in_buf[..rest]);
        &in_buf[..rest]
    });
    while out.len() < want {
        let input = tail.take().map(|r| [r]);
        let (_, written) = resampler
            .process_partial_into_buffer(input.as_ref().map(|a| &a[..]), &mut out_buf, None)
            .map_err(resample_error)?;
        out.extend_from_slice(&out_buf[0][..written]);
    }
    out.truncate(want);
    out.drain(..align.skip);
    Ok(out)
}

/// Puts output sample k exactly at input time k * rate / 16000.
///
/// rubato 0.16's `SincFixedIn` emits output k at input time (k + 1) * step - 1 (step = rate /
/// 16000; its `output_delay()` does not describe this). Prepending `zeros` input samples and
/// dropping `skip` outputs turns that into an integer shift: with g = gcd(rate, 16000),
/// `zeros = rate / g - 1` and `skip = 16000 / g - 1` satisfy (skip + 1) * step - 1 = zeros.
struct Alignment {
    zeros: usize,
    skip: usize,
}

impl Alignment {
    fn new(rate: u32) -> Self {
        let g = gcd(rate, SAMPLE_RATE);
        Self {
            zeros: (rate / g - 1) as usize,
            skip: (SAMPLE_RATE / g - 1) as usize,
        }
    }

    /// Copies `[zeros ++ samples][pos..pos + buf.len()]` into `buf`.
    fn fill(&self, samples: &[f32], pos: usize, buf: &mut [f32]) {
        for (i, v) in buf.iter_mut().enumerate() {
            let j = pos + i;
            *v = if j < self.zeros {
                0.0
            } else {
                samples[j - self.zeros]
            };
        }
    }
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `round(len * 16000 / rate)`, in integers so long inputs do not lose precision.
fn output_len(len: usize, rate: u32) -> usize {
    let num = len as u128 * u128::from(SAMPLE_RATE);
    let rate = u128::from(rate);
    ((2 * num + rate) / (2 * rate)) as usize
}

fn resample_error(e: impl std::fmt::Display) -> AudioError {
    AudioError::Resample {
        input: "audio".to_string(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taps at exact phases give what interpolated taps give, at the usual rates: to
    /// ~1e-6 where the table keeps 1024 sub-steps (48, 32, 24, 8 kHz), and within the
    /// difference of the sub-step bias (1/1024 against 1/1280 or 1/1120 of an input
    /// sample: ~1e-4 on this chirp's steepest slope) where it keeps more. A wrong phase
    /// would be off by the signal's size.
    #[test]
    fn exact_phases_equal_interpolated_taps() {
        for rate in [8000, 11_025, 22_050, 24_000, 32_000, 44_100, 48_000, 96_000] {
            let n = rate as usize / 2 + 7;
            let x: Vec<f32> = (0..n)
                .map(|i| {
                    let t = i as f64 / f64::from(rate);
                    (0.5 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                        + 0.3 * (2.0 * std::f64::consts::PI * 3100.0 * t * t).sin())
                        as f32
                })
                .collect();
            let (fast, slow) = (
                resample_with(&x, rate, true).unwrap(),
                resample_with(&x, rate, false).unwrap(),
            );
            assert_eq!(fast.len(), slow.len(), "{rate}");
            let d = fast
                .iter()
                .zip(&slow)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let bound = if 1024 % (16_000 / gcd(rate, 16_000)) == 0 {
                2e-5
            } else {
                3e-4
            };
            assert!(d < bound, "{rate} Hz: {d}");
        }
    }

    #[test]
    fn output_len_rounds_half_up() {
        assert_eq!(output_len(441, 44100), 160);
        assert_eq!(output_len(1, 32000), 1); // 0.5 rounds up
        assert_eq!(output_len(1, 48000), 0);
        assert_eq!(output_len(3, 48000), 1);
    }

    #[test]
    fn short_and_empty_inputs_resample_to_exact_lengths() {
        for len in [0usize, 1, 2, 5, 100, 4095, 4096, 4097, 10_000] {
            let x: Vec<f32> = (0..len).map(|i| (i as f32 * 0.01).sin()).collect();
            for rate in [8000, 22050, 44100, 48000] {
                let y = resample_to_16k(&x, rate).unwrap();
                assert_eq!(y.len(), output_len(len, rate), "len {len} rate {rate}");
            }
        }
    }

    #[test]
    fn bad_rates_are_errors() {
        let e = resample_to_16k(&[0.0; 10], 0).unwrap_err();
        assert!(
            e.to_string().contains("unsupported sample rate 0 Hz"),
            "{e}"
        );
        assert!(resample_to_16k(&[0.0; 10], 10_000_000).is_err());
    }
}
