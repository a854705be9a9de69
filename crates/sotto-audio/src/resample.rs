//! Resampling to 16 kHz as FFmpeg's libswresample does it by default, which is how every
//! Whisper model heard its training audio (openai-whisper decodes through the `ffmpeg`
//! CLI) and how faster-whisper (PyAV) resamples: a polyphase bank of Kaiser-windowed sincs
//! (β = 9), 32 taps at the input rate when upsampling, cut at 0.97 of the output's Nyquist
//! (and as many more taps as that stretches them) when downsampling; one phase for each
//! distinct output position where there are at most 1024 of them (8, 11.025, 22.05, 44.1,
//! 48 kHz...), else 1024 phases interpolated linearly; the input mirrored at both ends.
//!
//! Its response is what matters: upsampling 8 kHz telephone audio, it passes up to the old
//! Nyquist and a little past it (−6 dB at 4 kHz, −14 dB at 4.2 kHz), where the steep
//! 256-tap sinc sotto used before cut at 3.8 kHz; the shared clips at 8 kHz read 1.0 (G.729)
//! and 1.5 (16-bit WAV) WER points better through this one (README, "Audio").

use std::sync::{Arc, Mutex};

use crate::{AudioError, Result, SAMPLE_RATE};

/// Lowest and highest input rates accepted (telephone-grade to studio 768 kHz).
const MIN_RATE: u32 = 1000;
const MAX_RATE: u32 = 768_000;
/// libswresample's defaults: taps at the lower rate, most phases, cutoff, Kaiser β.
const FILTER_SIZE: f64 = 32.0;
const MAX_PHASES: u64 = 1024;
const CUTOFF: f64 = 0.97;
const KAISER_BETA: f64 = 9.0;
/// Input held back between pushes, besides the filter's reach.
const CHUNK: usize = 4096;

/// Resamples mono `samples` at `rate` Hz to 16 kHz. The result has exactly
/// `round(len * 16000 / rate)` samples and is aligned with the input: output k is the
/// band-limited input at time k / 16000 s. At 16 kHz the input is returned unchanged.
pub fn resample_to_16k(samples: &[f32], rate: u32) -> Result<Vec<f32>> {
    let mut r = Resampler16k::new(rate)?;
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
    Poly(Box<Poly>),
}

/// A filter bank, shared by every resampler from one rate.
struct Bank {
    /// Taps a phase (even), and phases.
    taps: usize,
    phases: usize,
    /// `phases + 1` phases of `taps` taps: the last is the first one a sample later (for
    /// the interpolation), as libswresample lays it out.
    coeffs: Vec<f32>,
    /// libswresample's position step: `div` phases and `modulo / src_incr` of one per
    /// output sample.
    src_incr: u64,
    div: u64,
    modulo: u64,
}

impl Bank {
    fn new(rate: u32) -> Self {
        let (rate, out) = (u64::from(rate), u64::from(SAMPLE_RATE));
        let factor = (out as f64 * CUTOFF / rate as f64).min(1.0);
        let mut taps = ((FILTER_SIZE / factor).ceil() as usize).max(1);
        if taps > 1 {
            taps = taps.next_multiple_of(2);
        }
        let (exact, _) = reduce(out, rate);
        let phases = if exact <= MAX_PHASES {
            exact
        } else {
            MAX_PHASES
        };
        let (mut src_incr, mut dst_incr) = reduce(out, rate * phases);
        while dst_incr < 1 << 20 && src_incr < 1 << 20 {
            src_incr *= 2;
            dst_incr *= 2;
        }
        let phases = phases as usize;
        let center = (taps - 1) / 2;
        let mut coeffs = vec![0f32; (phases + 1) * taps];
        let mut norm = 0.0;
        let mut tab = vec![0f64; taps];
        for ph in 0..phases {
            for (i, t) in tab.iter_mut().enumerate() {
                let x = std::f64::consts::PI
                    * ((i as f64 - center as f64) - ph as f64 / phases as f64)
                    * factor;
                let sinc = if x == 0.0 { 1.0 } else { x.sin() / x };
                let w = 2.0 * x / (factor * taps as f64 * std::f64::consts::PI);
                *t = sinc * bessel_i0(KAISER_BETA * (1.0 - w * w).max(0.0).sqrt());
            }
            if ph == 0 {
                norm = tab.iter().sum();
            }
            for (c, t) in coeffs[ph * taps..(ph + 1) * taps].iter_mut().zip(&tab) {
                *c = (t / norm) as f32;
            }
        }
        // The extra phase: the first, one sample on. Its first tap is what libswresample's
        // copy puts there: the first phase's last where phases are stored 8-aligned without
        // padding, else padding's zero.
        let last = phases * taps;
        coeffs[last] = if taps.is_multiple_of(8) {
            coeffs[taps - 1]
        } else {
            0.0
        };
        let (head, tail) = coeffs.split_at_mut(last + 1);
        tail.copy_from_slice(&head[..taps - 1]);
        Self {
            taps,
            phases,
            coeffs,
            src_incr,
            div: dst_incr / src_incr,
            modulo: dst_incr % src_incr,
        }
    }

    fn phase(&self, ph: usize) -> &[f32] {
        &self.coeffs[ph * self.taps..(ph + 1) * self.taps]
    }
}

/// I₀, the modified Bessel function of the first kind of order 0 (its series; β ≤ 9
/// needs some 25 terms).
fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for k in 1..200 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

/// `a / b` in lowest terms.
fn reduce(a: u64, b: u64) -> (u64, u64) {
    let g = gcd(a, b);
    (a / g, b / g)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Banks built, by rate: a 44.1 kHz bank is 160 phases of 92 taps, which a server answering
/// short clips would otherwise build on every request.
fn bank(rate: u32) -> Arc<Bank> {
    static BANKS: Mutex<Vec<(u32, Arc<Bank>)>> = Mutex::new(Vec::new());
    /// At most this many are kept (the oldest makes way).
    const MAX: usize = 8;
    let mut banks = BANKS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, b)) = banks.iter().find(|(r, _)| *r == rate) {
        return Arc::clone(b);
    }
    let b = Arc::new(Bank::new(rate));
    if banks.len() >= MAX {
        banks.remove(0);
    }
    banks.push((rate, Arc::clone(&b)));
    b
}

/// One resampling in progress.
struct Poly {
    bank: Arc<Bank>,
    rate: u32,
    /// The first input samples, which the start mirrors (libswresample reflects the input
    /// about its first sample: x[-n] = x[n]).
    head: Vec<f32>,
    /// Input from absolute sample `base` on.
    input: Vec<f32>,
    base: usize,
    pushed: usize,
    /// The next output's first tap (absolute input sample, negative at the start), phase
    /// and fraction of a phase (in `src_incr` units).
    sample: i64,
    phase: usize,
    frac: u64,
    out: Vec<f32>,
    /// Outputs already taken out of `out` by `take_ready`.
    taken: usize,
    /// Window of taps gathered where it crosses the input's ends.
    window: Vec<f32>,
}

impl Resampler16k {
    /// A resampler from `rate` Hz; an error where the rate is outside what it handles.
    pub fn new(rate: u32) -> Result<Self> {
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
        let bank = bank(rate);
        let center = (bank.taps - 1) / 2;
        Ok(Self {
            inner: Inner::Poly(Box::new(Poly {
                head: Vec::with_capacity(bank.taps + 1),
                input: Vec::with_capacity(CHUNK + 2 * bank.taps),
                base: 0,
                pushed: 0,
                sample: -(center as i64),
                phase: 0,
                frac: 0,
                out: Vec::new(),
                taken: 0,
                window: vec![0.0; bank.taps],
                bank,
                rate,
            })),
        })
    }

    /// Feeds the next input samples.
    pub fn push(&mut self, samples: &[f32]) -> Result<()> {
        match &mut self.inner {
            Inner::Copy(out) => out.extend_from_slice(samples),
            Inner::Poly(p) => p.push(samples),
        }
        Ok(())
    }

    /// Takes out the 16 kHz samples ready so far: those whose filter window the input
    /// pushed already covers (at 48 kHz, all but the last ~50 input samples' worth). For
    /// live audio; the takes and [`finish`](Self::finish) joined are the samples one
    /// `finish` alone would give, bit for bit.
    pub fn take_ready(&mut self) -> Vec<f32> {
        match &mut self.inner {
            Inner::Copy(out) => std::mem::take(out),
            Inner::Poly(p) => {
                p.taken += p.out.len();
                std::mem::take(&mut p.out)
            }
        }
    }

    /// The 16 kHz signal: `round(n * 16000 / rate)` samples for the `n` pushed, less those
    /// [`take_ready`](Self::take_ready) took.
    pub fn finish(self) -> Result<Vec<f32>> {
        match self.inner {
            Inner::Copy(out) => Ok(out),
            Inner::Poly(p) => Ok(p.finish()),
        }
    }
}

impl Poly {
    fn push(&mut self, samples: &[f32]) {
        let want = self.bank.taps + 1;
        if self.head.len() < want {
            let n = (want - self.head.len()).min(samples.len());
            self.head.extend_from_slice(&samples[..n]);
        }
        self.pushed += samples.len();
        self.input.extend_from_slice(samples);
        // Outputs wait for the start's mirror to be whole; then each goes out once its
        // window (and the next phase's, one sample on) is in.
        if self.head.len() == want {
            self.run(self.base + self.input.len(), None);
        }
        // Keep from the next output's first tap on.
        let keep = usize::try_from(self.sample.max(0)).unwrap_or(0);
        if keep > self.base + CHUNK {
            self.input.drain(..keep - self.base);
            self.base = keep;
        }
    }

    /// Outputs while their windows end by `end` (or, at the end, `count` of them in all).
    fn run(&mut self, end: usize, count: Option<usize>) {
        let taps = self.bank.taps;
        let linear = self.bank.modulo != 0;
        loop {
            if let Some(n) = count {
                if self.taken + self.out.len() >= n {
                    return;
                }
            } else if self.sample + taps as i64 + 1 > end as i64 {
                return;
            }
            let v = self.one(linear);
            self.out.push(v);
            let b = &self.bank;
            self.frac += b.modulo;
            self.phase += b.div as usize;
            if self.frac >= b.src_incr {
                self.frac -= b.src_incr;
                self.phase += 1;
            }
            self.sample += (self.phase / b.phases) as i64;
            self.phase %= b.phases;
        }
    }

    /// The output at the current position.
    fn one(&mut self, linear: bool) -> f32 {
        let b = &*self.bank;
        let taps = b.taps;
        let from = self.sample - self.base as i64;
        let inside = from >= 0 && (from as usize) + taps < self.input.len();
        let x: &[f32] = if inside {
            &self.input[from as usize..from as usize + taps + 1]
        } else {
            self.window.resize(taps + 1, 0.0);
            for i in 0..=taps {
                self.window[i] = self.at(self.sample + i as i64);
            }
            &self.window
        };
        let v1 = dot(&x[..taps], b.phase(self.phase));
        if !linear {
            return v1;
        }
        let v2 = dot(&x[..taps], b.phase(self.phase + 1));
        v1 + ((f64::from(v2 - v1) / b.src_incr as f64) * self.frac as f64) as f32
    }

    /// Input sample `i` (absolute), mirrored before the start, and after the end as far as
    /// libswresample's flush reflects it (zeros past that).
    fn at(&self, i: i64) -> f32 {
        let n = self.pushed as i64;
        let i = i.abs();
        let i = if i >= n {
            let reflection = (n.min(self.bank.taps as i64) + 1) / 2;
            let j = i - n;
            if j >= reflection {
                return 0.0;
            }
            n - 1 - j
        } else {
            i
        };
        let Ok(i) = usize::try_from(i) else {
            return 0.0;
        };
        if i >= self.base && i - self.base < self.input.len() {
            self.input[i - self.base]
        } else {
            self.head.get(i).copied().unwrap_or(0.0)
        }
    }

    fn finish(mut self) -> Vec<f32> {
        let n = output_len(self.pushed, self.rate);
        self.run(usize::MAX, Some(n));
        self.out.truncate(n.saturating_sub(self.taken));
        self.out
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight lanes, so the compiler keeps them in one vector register.
    let mut acc = [0f32; 8];
    let (ac, ar) = a.split_at(a.len() / 8 * 8);
    let (bc, br) = b.split_at(ac.len());
    for (x, y) in ac.chunks_exact(8).zip(bc.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// `round(len * 16000 / rate)`, in integers so long inputs do not lose precision.
fn output_len(len: usize, rate: u32) -> usize {
    let num = len as u128 * u128::from(SAMPLE_RATE);
    let rate = u128::from(rate);
    ((2 * num + rate) / (2 * rate)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The banks libswresample builds: 32 taps at the input rate when upsampling, 0.97 of
    /// 8 kHz when downsampling (48 kHz: ⌈32 / 0.3233⌉ = 99, made even); a phase for each
    /// output position, or 1024 interpolated (44 057 Hz: 16000/44057 in lowest terms);
    /// every phase passing DC whole.
    #[test]
    fn banks_are_libswresamples() {
        for (rate, taps, phases, linear) in [
            (8_000, 32, 2, false),
            (11_025, 32, 640, false),
            (22_050, 46, 320, false),
            (44_100, 92, 160, false),
            (48_000, 100, 1, false),
            (44_057, 92, 1024, true),
        ] {
            let b = Bank::new(rate);
            assert_eq!(
                (b.taps, b.phases, b.modulo != 0),
                (taps, phases, linear),
                "{rate}"
            );
            for ph in 0..b.phases {
                let dc: f32 = b.phase(ph).iter().sum();
                assert!((dc - 1.0).abs() < 2e-3, "{rate} Hz, phase {ph}: {dc}");
            }
        }
    }

    /// Fed in pieces of any size, as packets come, the resampler gives what one call over
    /// the joined input gives, bit for bit.
    #[test]
    fn pieces_give_what_the_whole_gives() {
        let n = 3 * CHUNK + 1234;
        let x: Vec<f32> = (0..n).map(|i| ((i * i) as f32 * 1e-5).sin()).collect();
        for rate in [8_000, 16_000, 22_050, 44_100, 44_057, 48_000] {
            let whole = resample_to_16k(&x, rate).unwrap();
            for sizes in [
                &[1usize, 4095, 2][..],
                &[CHUNK],
                &[CHUNK + 1, 7],
                &[1152, 576],
                &[13],
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

    /// Taken as it becomes ready (live audio), the output joined with the rest from
    /// `finish` is what one `finish` gives, bit for bit; and what is ready trails the input
    /// by no more than the filter's reach.
    #[test]
    fn taking_as_it_comes_gives_what_the_whole_gives() {
        let n = 3 * CHUNK + 1234;
        let x: Vec<f32> = (0..n).map(|i| ((i * i) as f32 * 1e-5).sin()).collect();
        for rate in [8_000, 16_000, 22_050, 44_100, 44_057, 48_000] {
            let whole = resample_to_16k(&x, rate).unwrap();
            let reach = Bank::new(rate).taps + 2;
            for (size, every) in [(1usize, 1usize), (160, 1), (441, 3), (CHUNK + 1, 2), (n, 1)] {
                let mut r = Resampler16k::new(rate).unwrap();
                let (mut got, mut at, mut i) = (Vec::new(), 0, 0);
                while at < n {
                    let len = size.min(n - at);
                    r.push(&x[at..at + len]).unwrap();
                    (at, i) = (at + len, i + 1);
                    if i % every == 0 {
                        got.extend(r.take_ready());
                        let lag = output_len(at, rate) - got.len();
                        assert!(
                            lag <= output_len(reach, rate) + 1,
                            "{rate} Hz: {lag} behind"
                        );
                    }
                }
                got.extend(r.finish().unwrap());
                assert_eq!(got, whole, "{rate} Hz, pieces of {size}");
            }
        }
    }

    /// A tone well inside the band comes out as the same tone, at its place in time
    /// (output k at input time k / 16000 s).
    #[test]
    fn a_tone_keeps_its_size_and_time() {
        for rate in [8_000u32, 22_050, 44_100, 44_057, 48_000] {
            let tone = |t: f64| (2.0 * std::f64::consts::PI * 440.0 * t).sin() as f32 * 0.5;
            let x: Vec<f32> = (0..rate as usize)
                .map(|i| tone(i as f64 / f64::from(rate)))
                .collect();
            let y = resample_to_16k(&x, rate).unwrap();
            let worst = (1000..15_000)
                .map(|k| (y[k] - tone(k as f64 / 16_000.0)).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-3, "{rate} Hz: {worst}");
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
                assert!(y.iter().all(|v| v.is_finite()));
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
