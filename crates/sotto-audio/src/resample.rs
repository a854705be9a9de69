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

fn resample_with(samples: &[f32], rate: u32, exact: bool) -> Result<Vec<f32>> {
    let mut r = Resampler16k::with_taps(rate, exact)?;
    r.push(samples)?;
    r.finish()
}

/// [`resample_to_16k`] fed in pieces, as a decoder produces them: the output of the
/// pieces joined, while holding only the 16 kHz output and under one chunk of input.
pub struct Resampler16k {
    inner: Inner,
}

enum Inner {
    /// Already at 16 kHz.
    Copy(Vec<f32>),
    Sinc(Box<Sinc>),
}

struct Sinc {
    resampler: SincFixedIn<f32>,
    exact: bool,
    rate: u32,
    skip: usize,
    /// Input not yet fed to rubato (under one chunk after each push), led by the
    /// alignment's zeros.
    pending: Vec<f32>,
    /// Input samples pushed, without the alignment's zeros.
    pushed: usize,
    out: Vec<f32>,
    out_buf: Vec<Vec<f32>>,
}

impl Resampler16k {
    /// A resampler from `rate` Hz; an error where the rate is outside what it handles.
    pub fn new(rate: u32) -> Result<Self> {
        Self::with_taps(rate, true)
    }

    /// With the filter's taps at exact phases where `exact` asks for it and the rate allows
    /// ([`build`]), else interpolated between sub-steps. Both give the same band-limited
    /// signal (tested); the first takes one tap per tap instead of four.
    fn with_taps(rate: u32, exact: bool) -> Result<Self> {
        if rate == SAMPLE_RATE {
            return Ok(Self {
                inner: Inner::Copy(Vec::new()),
            });
        }
        if !(MIN_RATE..=MAX_RATE).contains(&rate) {
            return Err(AudioError::SampleRate {
                input: "audio".to_string(),
                rate,
                min: MIN_RATE,
                max: MAX_RATE,
            });
        }
        let resampler = match idle::take(rate, exact) {
            Some(r) => r,
            None => build(rate, exact)?,
        };
        let out_buf = resampler.output_buffer_allocate(true);
        let align = Alignment::new(rate);
        let mut sinc = Box::new(Sinc {
            resampler,
            exact,
            rate,
            skip: align.skip,
            pending: Vec::with_capacity(CHUNK),
            pushed: 0,
            out: Vec::new(),
            out_buf,
        });
        sinc.feed(&vec![0.0; align.zeros])?;
        Ok(Self {
            inner: Inner::Sinc(sinc),
        })
    }

    /// Feeds the next input samples.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        match &mut self.inner {
            Inner::Copy(out) => out.extend_from_slice(samples),
            Inner::Sinc(s) => s.push(samples)?,
        }
        Ok(())
    }

    /// The 16 kHz signal: `round(n * 16000 / rate)` samples for the `n` pushed.
    pub fn finish(self) -> Result<Vec<f32>> {
        match self.inner {
            Inner::Copy(out) => Ok(out),
            Inner::Sinc(s) => s.finish(),
        }
    }
}

impl Sinc {
    fn push(&mut self, samples: &[f32]) -> Result<()> {
        self.pushed += samples.len();
        self.feed(samples)
    }

    /// Hands rubato every whole chunk of `pending ++ samples` and keeps the rest.
    fn feed(&mut self, samples: &[f32]) -> Result<()> {
        let mut rest = samples;
        // Whole chunks go to rubato straight from the input once `pending` is empty.
        while !rest.is_empty() {
            if self.pending.is_empty() && rest.len() >= CHUNK {
                let (chunk, tail) = rest.split_at(CHUNK);
                self.process(chunk)?;
                rest = tail;
                continue;
            }
            let take = (CHUNK - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == CHUNK {
                let chunk = std::mem::take(&mut self.pending);
                self.process(&chunk)?;
                self.pending = chunk;
                self.pending.clear();
            }
        }
        Ok(())
    }

    fn process(&mut self, chunk: &[f32]) -> Result<()> {
        let (_, written) = self
            .resampler
            .process_into_buffer(&[chunk], &mut self.out_buf, None)
            .map_err(resample_error)?;
        self.out.extend_from_slice(&self.out_buf[0][..written]);
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<f32>> {
        let out_len = output_len(self.pushed, self.rate);
        if out_len == 0 {
            return Ok(Vec::new());
        }
        let want = self.skip + out_len;
        // The partial last chunk, then zeros until the filter's tail has come out. (rubato
        // reads an empty slice as an inactive channel, so an empty remainder is passed as
        // no input.)
        let pending = std::mem::take(&mut self.pending);
        let mut tail = (!pending.is_empty() && self.out.len() < want).then_some(&pending[..]);
        while self.out.len() < want {
            let input = tail.take().map(|r| [r]);
            let (_, written) = self
                .resampler
                .process_partial_into_buffer(
                    input.as_ref().map(|a| &a[..]),
                    &mut self.out_buf,
                    None,
                )
                .map_err(resample_error)?;
            self.out.extend_from_slice(&self.out_buf[0][..written]);
        }
        self.out.truncate(want);
        self.out.drain(..self.skip);
        idle::put(self.rate, self.exact, self.resampler);
        Ok(self.out)
    }
}

/// rubato's resampler from `rate` (checked by the caller), its taps at exact phases where
/// `exact` asks for it and the rate has at most [`MAX_EXACT_PHASES`] (the table's sub-steps
/// a multiple of them), else interpolated between sub-steps.
fn build(rate: u32, exact: bool) -> Result<SincFixedIn<f32>> {
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
    SincFixedIn::<f32>::new(ratio, 1.0, params, CHUNK, 1).map_err(resample_error)
}

/// Resamplers that finished, reset, for the next input at their rate: building one
/// computes its filter table at every sub-step (~7 ms, as long as resampling 10 s of
/// audio), which a server answering short clips would pay on every request, thrice with
/// the channels kept apart.
mod idle {
    use std::sync::Mutex;

    use rubato::{Resampler, SincFixedIn};

    /// At most this many are kept (about 1.1 MiB each).
    const MAX: usize = 6;

    static IDLE: Mutex<Vec<(u32, bool, SincFixedIn<f32>)>> = Mutex::new(Vec::new());

    #[cfg(test)]
    pub(super) fn holds(rate: u32, exact: bool) -> bool {
        let idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        idle.iter().any(|(r, e, _)| (*r, *e) == (rate, exact))
    }

    pub(super) fn take(rate: u32, exact: bool) -> Option<SincFixedIn<f32>> {
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        let i = idle
            .iter()
            .position(|(r, e, _)| (*r, *e) == (rate, exact))?;
        Some(idle.swap_remove(i).2)
    }

    /// Keeps `r`, reset, unless enough are kept (the oldest makes way).
    pub(super) fn put(rate: u32, exact: bool, mut r: SincFixedIn<f32>) {
        r.reset();
        let mut idle = IDLE.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= MAX {
            idle.remove(0);
        }
        idle.push((rate, exact, r));
    }
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

    /// Fed in pieces of any size, as packets come, the resampler gives what one call over
    /// the joined input gives, bit for bit, at rates whose alignment zeros exceed a chunk
    /// too (44 057 Hz: 44 056 zeros).
    #[test]
    fn pieces_give_what_the_whole_gives() {
        let n = 3 * CHUNK + 1234;
        let x: Vec<f32> = (0..n).map(|i| ((i * i) as f32 * 1e-5).sin()).collect();
        for rate in [16_000, 22_050, 44_100, 44_057, 48_000] {
            let whole = resample_to_16k(&x, rate).unwrap();
            for sizes in [
                &[1usize, 4095, 2][..],
                &[CHUNK],
                &[CHUNK + 1, 7],
                &[1152, 576],
            ] {
                let mut r = Resampler16k::new(rate).unwrap();
                let (mut at, mut i) = (0, 0);
                while at < n {
                    let len = sizes[i % sizes.len()].min(n - at);
                    r.push(&x[at..at + len]).unwrap();
                    (at, i) = (at + len, i + 1);
                }
                assert_eq!(r.finish().unwrap(), whole, "{rate} Hz, pieces {sizes:?}");
            }
        }
    }

    /// A resampler kept after one input gives the next input the bits a new one gives
    /// (37.8 kHz: a rate no other test uses, so none takes it from the pool meanwhile).
    #[test]
    fn a_kept_resampler_gives_a_new_ones_bits() {
        let rate = 37_800;
        let x: Vec<f32> = (0..CHUNK + 999).map(|i| (i as f32 * 0.37).sin()).collect();
        let noise: Vec<f32> = (0..2 * CHUNK + 3)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        assert!(!idle::holds(rate, true));
        let new = resample_to_16k(&x, rate).unwrap();
        resample_to_16k(&noise, rate).unwrap();
        assert!(idle::holds(rate, true), "a finished resampler is kept");
        assert_eq!(resample_to_16k(&x, rate).unwrap(), new);
        assert!(idle::holds(rate, true));
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
