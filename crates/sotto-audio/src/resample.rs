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

/// Resamples mono `samples` at `rate` Hz to 16 kHz. The result has exactly
/// `round(len * 16000 / rate)` samples and is aligned with the input: output k is the
/// band-limited input at time k / 16000 s. At 16 kHz the input is returned unchanged.
pub fn resample_to_16k(samples: &[f32], rate: u32) -> Result<Vec<f32>> {
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
    let params = SincInterpolationParameters {
        sinc_len: SINC_LEN,
        f_cutoff: calculate_cutoff(SINC_LEN, window),
        interpolation: SincInterpolationType::Cubic,
        oversampling_factor: OVERSAMPLING,
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
