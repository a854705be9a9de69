//! One channel of AMR-NB speech (3GPP TS 26.090): a frame's parameters to 160 samples.
//!
//! Each step is FFmpeg's floating-point decoder's, in its order and at its precision (f32,
//! f64 where it works in double), so that the samples are FFmpeg's to the bit; like
//! FFmpeg's, they are not the fixed-point reference decoder's, which differs by a phase
//! that drifts in places (FFmpeg measured 30–80 dB PSNR between the two).

use super::celp::*;
use super::tables::*;
use super::Mode;

/// Samples in a subframe, and in a frame.
const SUBFRAME: usize = 40;
pub(super) const FRAME: usize = 160;
/// The LP filter's order.
const ORDER: usize = 10;
const PITCH_DELAY_MIN: i32 = 20;
const PITCH_DELAY_MAX: i32 = 143;
/// The lowest lag a 12.2 kbit/s frame's relative lags start from.
const PITCH_LAG_MIN_12K2: i32 = 18;
/// The excitation kept for the pitch filter, ahead of the current subframe's.
const HISTORY: usize = PITCH_DELAY_MAX as usize + ORDER + 1;

/// The prediction factor of 12.2 kbit/s frames' LSF residuals.
const PRED_FAC_12K2: f64 = 0.65;
/// LSF residual tables to Hz.
const LSF_R_FAC: f64 = 8000.0 / 32768.0;
/// The least distance between LSFs, which keeps the LP filter stable.
const MIN_LSF_SPACING: f64 = 50.0488 / 8000.0;
/// The prediction error energy a stream starts with, in dB.
const MIN_ENERGY: f32 = -14.0;
/// The largest pitch sharpening: the reference code's 13017 in Q14, not the standard's 0.8.
const SHARP_MAX: f32 = 13017.0 / 16384.0;
/// Impulse response samples the post-filter's tilt is measured on.
const TILT_RESPONSE: usize = 22;
const TILT_GAMMA_T: f64 = 0.8;
const AGC_ALPHA: f32 = 0.9;
/// A synthesized sample beyond this is an overflow, which the reference code clips.
const SAMPLE_BOUND: f64 = 32768.0;
/// From 16-bit samples, which AMR makes twice too large (TS 26.090 §6.2.2), to [-1, 1].
const SAMPLE_SCALE: f64 = 2.0 / 32768.0;
/// The output high-pass filter, the reference code's Q13 integers.
const HIGHPASS_POLES: [f32; 2] = [-15836.0 / 8192.0, 7667.0 / 8192.0];
const HIGHPASS_GAIN: f32 = 7699.0 / 8192.0;

/// What makes a frame undecodable: pitch lags no encoder makes (a lag beyond 145 would
/// read before the excitation kept, which FFmpeg does, into its other fields).
#[derive(Debug, PartialEq)]
pub(super) enum Corrupt {
    ZeroLag,
    LongLag,
}

/// A frame's parameters, as TS 26.101 orders them: five LSF indices, then per subframe
/// the pitch lag, pitch gain, fixed gain and up to ten pulse fields.
pub(super) type Params = [u16; 5 + 4 * 13];

/// A subframe's fields in [`Params`].
struct Sub<'a>(&'a [u16]);

impl Sub<'_> {
    fn lag(&self) -> i32 {
        i32::from(self.0[0])
    }
    fn gain(&self) -> usize {
        usize::from(self.0[1])
    }
    fn fixed_gain(&self) -> usize {
        usize::from(self.0[2])
    }
    fn pulses(&self) -> &[u16] {
        &self.0[3..13]
    }
}

/// Reads a frame's payload into its parameters.
pub(super) fn unpack(mode: Mode, payload: &[u8]) -> Params {
    let mut params = [0u16; 57];
    unpack_bits(BIT_ORDER[mode as usize], payload, &mut params);
    params
}

/// A sparse fixed (algebraic) codebook vector: pulses at `x` of sign and size `y`,
/// repeated every `pitch_lag` samples at `pitch_fac` times the size.
#[derive(Default)]
struct Fixed {
    n: usize,
    x: [usize; 10],
    y: [f32; 10],
    pitch_lag: usize,
    pitch_fac: f32,
}

impl Fixed {
    /// Adds the pulses, times `scale`, into `out`.
    fn add_to(&self, out: &mut [f32; SUBFRAME], scale: f32) {
        for i in 0..self.n {
            let mut x = self.x[i];
            let mut y = self.y[i] * scale;
            loop {
                out[x] += y;
                y *= self.pitch_fac;
                x += self.pitch_lag;
                if x >= SUBFRAME {
                    break;
                }
            }
        }
    }

    /// Zeroes where the pulses are in `out` (which held them alone).
    fn clear(&self, out: &mut [f32; SUBFRAME]) {
        for i in 0..self.n {
            let mut x = self.x[i];
            while x < SUBFRAME {
                out[x] = 0.0;
                x += self.pitch_lag;
            }
        }
    }
}

/// A channel's decoder state, kept from frame to frame.
pub(super) struct Channel {
    prev_lsf_r: [i16; ORDER],
    lsp: [[f64; ORDER]; 4],
    prev_lsp_sub4: [f64; ORDER],
    /// The LSFs interpolated per subframe, for the fixed gain's smoothing.
    lsf_q: [[f32; ORDER]; 4],
    lsf_avg: [f32; ORDER],
    lpc: [[f32; ORDER]; 4],
    pitch_lag_int: i32,
    /// The past excitation, then the current subframe's.
    excitation: [f32; HISTORY + SUBFRAME],
    pitch_vector: [f32; SUBFRAME],
    /// The fixed vector, zero between subframes.
    fixed_vector: [f32; SUBFRAME],
    prediction_error: [f32; 4],
    /// The quantized gains of this subframe (`[4]`) and the four before.
    pitch_gain: [f32; 5],
    fixed_gain: [f32; 5],
    beta: f32,
    diff_count: u8,
    hang_count: u8,
    prev_sparse_fixed_gain: f32,
    prev_ir_filter_nr: u8,
    ir_filter_onset: u8,
    postfilter_mem: [f32; ORDER],
    tilt_mem: f32,
    postfilter_agc: f32,
    high_pass_mem: [f32; 2],
    /// The last subframe's synthesized samples' tail, then this one's.
    samples_in: [f32; ORDER + SUBFRAME],
    mode: Mode,
}

impl Channel {
    pub(super) fn new() -> Self {
        let mut lsf_avg = [0f32; ORDER];
        let mut prev_lsp_sub4 = [0f64; ORDER];
        for i in 0..ORDER {
            prev_lsp_sub4[i] = f64::from((i32::from(LSP_SUB4_INIT[i]) * 1000) as f32 / 32768.0);
            lsf_avg[i] = f32::from(LSP_AVG_INIT[i]) / 32768.0;
        }
        let mut lsf_q = [[0f32; ORDER]; 4];
        lsf_q[3] = lsf_avg;
        Self {
            prev_lsf_r: [0; ORDER],
            lsp: [[0.0; ORDER]; 4],
            prev_lsp_sub4,
            lsf_q,
            lsf_avg,
            lpc: [[0.0; ORDER]; 4],
            pitch_lag_int: 0,
            excitation: [0.0; HISTORY + SUBFRAME],
            pitch_vector: [0.0; SUBFRAME],
            fixed_vector: [0.0; SUBFRAME],
            prediction_error: [MIN_ENERGY; 4],
            pitch_gain: [0.0; 5],
            fixed_gain: [0.0; 5],
            beta: 0.0,
            diff_count: 0,
            hang_count: 0,
            prev_sparse_fixed_gain: 0.0,
            prev_ir_filter_nr: 0,
            ir_filter_onset: 0,
            postfilter_mem: [0.0; ORDER],
            tilt_mem: 0.0,
            postfilter_agc: 0.0,
            high_pass_mem: [0.0; 2],
            samples_in: [0.0; ORDER + SUBFRAME],
            mode: Mode::M12k2,
        }
    }

    /// Decodes a speech frame of `mode` into `out`; an error where its pitch lag is one
    /// no encoder makes.
    pub(super) fn decode(
        &mut self,
        mode: Mode,
        params: &Params,
        out: &mut [f32; FRAME],
    ) -> Result<(), Corrupt> {
        self.mode = mode;
        if mode == Mode::M12k2 {
            self.lsf2lsp_5(params);
        } else {
            self.lsf2lsp_3(params);
        }
        for i in 0..4 {
            self.lpc[i] = lspd2lpc(&self.lsp[i]);
        }
        for subframe in 0..4 {
            let sub = Sub(&params[5 + 13 * subframe..5 + 13 * (subframe + 1)]);
            self.decode_pitch_vector(&sub, subframe)?;
            let mut fixed = decode_fixed_sparse(sub.pulses(), mode, subframe);
            let fixed_gain_factor = self.decode_gains(params, &sub, subframe);
            self.pitch_sharpening(subframe, &mut fixed);
            if fixed.pitch_lag == 0 {
                return Err(Corrupt::ZeroLag);
            }
            fixed.add_to(&mut self.fixed_vector, 1.0);
            let energy = dot(&self.fixed_vector, &self.fixed_vector) / SUBFRAME as f32;
            self.fixed_gain[4] = self.set_fixed_gain(fixed_gain_factor, energy);

            // The excitation fed back is made before the gain's smoothing, and kept
            // without fractions as the reference code keeps it (lest silence buzz).
            let exc = &mut self.excitation[HISTORY..];
            let exc: &mut [f32; SUBFRAME] = exc.try_into().expect("a subframe");
            for e in exc.iter_mut() {
                *e *= self.pitch_gain[4];
            }
            fixed.add_to(exc, self.fixed_gain[4]);
            for e in exc.iter_mut() {
                *e = e.trunc();
            }

            let synth_gain = self.fixed_gain_smooth(subframe);
            let mut spare = [0f32; SUBFRAME];
            let dispersed = self.anti_sparseness(&fixed, synth_gain, &mut spare);
            let fixed_vector = match dispersed {
                true => spare,
                false => self.fixed_vector,
            };
            let lpc = self.lpc[subframe];
            if self.synthesis(&lpc, synth_gain, &fixed_vector, false) {
                // An overflow: again with the pitch vector a quarter, unemphasized.
                self.synthesis(&lpc, synth_gain, &fixed_vector, true);
            }
            let o: &mut [f32; SUBFRAME] = (&mut out[subframe * SUBFRAME..][..SUBFRAME])
                .try_into()
                .expect("a subframe");
            self.postfilter(&lpc, o);

            fixed.clear(&mut self.fixed_vector);
            self.update_state();
        }
        let gain = (f64::from(HIGHPASS_GAIN) * SAMPLE_SCALE) as f32;
        order_2_filter(out, HIGHPASS_POLES, gain, &mut self.high_pass_mem);
        // The average excludes this frame's LSFs until now (the reference code's
        // q̄(n-1), where TS 26.090's equation 71 says q̄(n)).
        self.lsf_avg = weighted_sum(&self.lsf_avg, &self.lsf_q[3], 0.84, 0.16);
        Ok(())
    }

    /// The LSPs of the four subframes from a 12.2 kbit/s frame's five split-matrix LSF
    /// indices, which code subframes 2 and 4.
    fn lsf2lsp_5(&mut self, params: &Params) {
        let q = [
            &LSF_5_1[usize::from(params[0]) % LSF_5_1.len()],
            &LSF_5_2[usize::from(params[1]) % LSF_5_2.len()],
            &LSF_5_3[usize::from(params[2] >> 1) % LSF_5_3.len()],
            &LSF_5_4[usize::from(params[3]) % LSF_5_4.len()],
            &LSF_5_5[usize::from(params[4]) % LSF_5_5.len()],
        ];
        let mut lsf_no_r = [0f32; ORDER];
        for (i, v) in lsf_no_r.iter_mut().enumerate() {
            *v = (f64::from(self.prev_lsf_r[i]) * LSF_R_FAC * PRED_FAC_12K2
                + f64::from(LSF_5_MEAN[i])) as f32;
        }
        let sign = params[2] & 1 == 1;
        self.lsp[1] = self.lsf2lsp_12k2(&lsf_no_r, &q, 0, sign, false);
        self.lsp[3] = self.lsf2lsp_12k2(&lsf_no_r, &q, 2, sign, true);
        for j in 0..ORDER {
            self.lsp[0][j] = 0.5 * self.prev_lsp_sub4[j] + 0.5 * self.lsp[1][j];
            self.lsp[2][j] = 0.5 * self.lsp[1][j] + 0.5 * self.lsp[3][j];
        }
    }

    fn lsf2lsp_12k2(
        &mut self,
        lsf_no_r: &[f32; ORDER],
        q: &[&[i16; 4]; 5],
        offset: usize,
        sign: bool,
        update: bool,
    ) -> [f64; ORDER] {
        let mut lsf_r = [0i16; ORDER];
        for i in 0..ORDER / 2 {
            lsf_r[2 * i] = q[i][offset];
            lsf_r[2 * i + 1] = q[i][offset + 1];
        }
        if sign {
            lsf_r[4] = lsf_r[4].wrapping_neg();
            lsf_r[5] = lsf_r[5].wrapping_neg();
        }
        if update {
            self.prev_lsf_r = lsf_r;
        }
        let mut lsf_q = [0f32; ORDER];
        for i in 0..ORDER {
            lsf_q[i] = (f64::from(lsf_r[i]) * (LSF_R_FAC / 8000.0)
                + f64::from(lsf_no_r[i]) * (1.0 / 8000.0)) as f32;
        }
        set_min_dist_lsf(&mut lsf_q, MIN_LSF_SPACING);
        if update {
            self.interpolate_lsf(&lsf_q);
        }
        lsf2lspd(&lsf_q)
    }

    /// The LSPs of the four subframes from another mode's three split-matrix LSF indices,
    /// which code subframe 4; the others are interpolated from the last frame's.
    fn lsf2lsp_3(&mut self, params: &Params) {
        let mode = self.mode;
        let first: &[i16; 3] = match mode {
            Mode::M7k95 => &LSF_3_1_MODE_7K95[usize::from(params[0]) % 512],
            _ => &LSF_3_1[usize::from(params[0]) % 256],
        };
        let low = mode <= Mode::M5k15;
        let second = &LSF_3_2[(usize::from(params[1]) << usize::from(low)) % 512];
        let third: &[i16; 4] = match low {
            true => &LSF_3_3_MODE_5K15[usize::from(params[2]) % 128],
            false => &LSF_3_3[usize::from(params[2]) % 512],
        };
        let mut lsf_r = [0i16; ORDER];
        lsf_r[..3].copy_from_slice(first);
        lsf_r[3..6].copy_from_slice(second);
        lsf_r[6..].copy_from_slice(third);
        let mut lsf_q = [0f32; ORDER];
        for i in 0..ORDER {
            let r = f32::from(lsf_r[i]) + f32::from(self.prev_lsf_r[i]) * PRED_FAC[i];
            lsf_q[i] = (f64::from(r) * (LSF_R_FAC / 8000.0)
                + f64::from(LSF_3_MEAN[i]) * (1.0 / 8000.0)) as f32;
        }
        set_min_dist_lsf(&mut lsf_q, MIN_LSF_SPACING);
        self.interpolate_lsf(&lsf_q);
        self.prev_lsf_r = lsf_r;
        self.lsp[3] = lsf2lspd(&lsf_q);
        for i in 1..=3 {
            for j in 0..ORDER {
                let (prev, new) = (self.prev_lsp_sub4[j], self.lsp[3][j]);
                self.lsp[i - 1][j] = prev + (new - prev) * 0.25 * i as f64;
            }
        }
    }

    /// The LSFs of the four subframes (for the gain's smoothing, in every mode) from the
    /// last frame's fourth and this one's.
    fn interpolate_lsf(&mut self, lsf_new: &[f32; ORDER]) {
        let last = self.lsf_q[3];
        for i in 0..4 {
            let (a, b) = (
                (0.25 * (3 - i) as f64) as f32,
                (0.25 * (i + 1) as f64) as f32,
            );
            self.lsf_q[i] = weighted_sum(&last, lsf_new, a, b);
        }
    }

    /// The adaptive codebook vector: the past excitation at the pitch lag, interpolated to
    /// its fraction by a Hamming-windowed sinc.
    fn decode_pitch_vector(&mut self, sub: &Sub, subframe: usize) -> Result<(), Corrupt> {
        let (lag_int, lag_frac) = match self.mode {
            Mode::M12k2 => pitch_lag_1_6(sub.lag(), self.pitch_lag_int, subframe),
            mode => {
                let resolution = match mode {
                    m if m <= Mode::M6k7 => 4,
                    Mode::M7k95 => 5,
                    _ => 6,
                };
                let third_as_first = mode != Mode::M4k75 && mode != Mode::M5k15;
                let (i, f) = pitch_lag(
                    sub.lag(),
                    self.pitch_lag_int,
                    subframe,
                    third_as_first,
                    resolution,
                );
                (i, 2 * f)
            }
        };
        // FFmpeg keeps the lag in a byte.
        self.pitch_lag_int = lag_int & 0xFF;
        let lag = (lag_int + i32::from(lag_frac > 0)) as usize;
        let frac = (lag_frac + 6 - 6 * i32::from(lag_frac > 0)) as usize;
        // The past excitation from `lag - 1` samples back, in sixths.
        let start = match (HISTORY + 1).checked_sub(lag) {
            Some(start) if start >= 10 => start,
            _ => return Err(Corrupt::LongLag),
        };
        interpolate(
            &mut self.excitation,
            (start, HISTORY, SUBFRAME),
            &B60_SINC,
            6,
            frac,
            10,
        );
        self.pitch_vector
            .copy_from_slice(&self.excitation[HISTORY..HISTORY + SUBFRAME]);
        Ok(())
    }

    fn decode_gains(&mut self, params: &Params, sub: &Sub, subframe: usize) -> f32 {
        match self.mode {
            Mode::M12k2 | Mode::M7k95 => {
                self.pitch_gain[4] =
                    (f64::from(QUA_GAIN_PIT[sub.gain() % 16]) * (1.0 / 16384.0)) as f32;
                (f64::from(QUA_GAIN_CODE[sub.fixed_gain() % 32]) * (1.0 / 2048.0)) as f32
            }
            mode => {
                let gains = if mode >= Mode::M6k7 {
                    &GAINS_HIGH[sub.gain() % 128]
                } else if mode >= Mode::M5k15 {
                    &GAINS_LOW[sub.gain() % 64]
                } else {
                    // 4.75 kbit/s codes the gains of subframes 0 and 2, each for two.
                    let coded = usize::from(params[5 + 13 * (subframe & 2) + 1]);
                    &GAINS_MODE_4K75[((coded << 1) + (subframe & 1)) % 512]
                };
                self.pitch_gain[4] = (f64::from(gains[0]) * (1.0 / 16384.0)) as f32;
                (f64::from(gains[1]) * (1.0 / 4096.0)) as f32
            }
        }
    }

    /// The pitch sharpening of the fixed vector (§6.1.2), by the last subframe's bounded
    /// pitch gain (this one's at 12.2 kbit/s, whose gains are not quantized jointly).
    fn pitch_sharpening(&mut self, subframe: usize, fixed: &mut Fixed) {
        if self.mode == Mode::M12k2 {
            self.beta = self.pitch_gain[4].min(1.0);
        }
        fixed.pitch_lag = self.pitch_lag_int as usize;
        fixed.pitch_fac = self.beta;
        // 4.75 kbit/s updates it on the subframes whose gains end a pair.
        if self.mode != Mode::M4k75 || subframe & 1 == 1 {
            self.beta = self.pitch_gain[4].clamp(0.0, SHARP_MAX);
        }
    }

    /// The fixed gain from its coded correction of the gain predicted from the last four
    /// (TS 26.090 equations 66–69); records this one's prediction error.
    fn set_fixed_gain(&mut self, factor: f32, mean_energy: f32) -> f32 {
        let mean = ENERGY_MEAN[self.mode as usize];
        predicted_gain(
            factor,
            mean_energy,
            &mut self.prediction_error,
            mean,
            &ENERGY_PRED_FAC,
        )
    }

    /// The fixed gain smoothed over the last five subframes where the spectrum is steady
    /// (§6.1.4), in the modes below 7.4 kbit/s and at 10.2.
    fn fixed_gain_smooth(&mut self, subframe: usize) -> f32 {
        let lsf = &self.lsf_q[subframe];
        let mut diff = 0f32;
        for (&avg, &l) in self.lsf_avg.iter().zip(lsf) {
            diff = (f64::from(diff) + f64::from(avg - l).abs() / f64::from(avg)) as f32;
        }
        // Ten subframes of a changing spectrum start a 40-subframe hangover without it.
        self.diff_count = self.diff_count.wrapping_add(1);
        if f64::from(diff) <= 0.65 {
            self.diff_count = 0;
        }
        if self.diff_count > 10 {
            self.hang_count = 0;
            self.diff_count -= 1;
        }
        if self.hang_count < 40 {
            self.hang_count += 1;
        } else if self.mode < Mode::M7k4 || self.mode == Mode::M10k2 {
            let factor = ((4.0 * f64::from(diff) - 1.6) as f32).clamp(0.0, 1.0);
            let g = &self.fixed_gain;
            let mean = (f64::from(g[0] + g[1] + g[2] + g[3] + g[4]) * 0.2) as f32;
            return (f64::from(factor * g[4]) + (1.0 - f64::from(factor)) * f64::from(mean)) as f32;
        }
        self.fixed_gain[4]
    }

    /// Adaptive phase dispersion (§6.1.5): below 10.2 kbit/s (but 7.4), a fixed vector of
    /// weak pitch is spread by one of two impulse responses, into `out`; whether it was.
    fn anti_sparseness(
        &mut self,
        fixed: &Fixed,
        fixed_gain: f32,
        out: &mut [f32; SUBFRAME],
    ) -> bool {
        let pg = f64::from(self.pitch_gain[4]);
        let mut nr: u8 = if pg < 0.6 {
            0
        } else if pg < 0.9 {
            1
        } else {
            2
        };
        if f64::from(fixed_gain) > 2.0 * f64::from(self.prev_sparse_fixed_gain) {
            self.ir_filter_onset = 2;
        } else if self.ir_filter_onset > 0 {
            self.ir_filter_onset -= 1;
        }
        if self.ir_filter_onset == 0 {
            let weak = self
                .pitch_gain
                .iter()
                .filter(|&&g| f64::from(g) < 0.6)
                .count();
            if weak > 2 {
                nr = 0;
            }
            if nr > self.prev_ir_filter_nr + 1 {
                nr -= 1;
            }
        } else if nr < 2 {
            nr += 1;
        }
        // Not in the standard's text, but in its code: none for a very low gain.
        if f64::from(fixed_gain) < 5.0 {
            nr = 2;
        }
        let mode = self.mode;
        let applied = mode != Mode::M7k4 && mode < Mode::M10k2 && nr < 2;
        if applied {
            let filter = match (mode == Mode::M7k95, nr) {
                (true, 0) => &IR_FILTER_STRONG_MODE_7K95,
                (false, 0) => &IR_FILTER_STRONG,
                _ => &IR_FILTER_MEDIUM,
            };
            apply_ir_filter(out, fixed, filter);
        }
        self.prev_ir_filter_nr = nr;
        self.prev_sparse_fixed_gain = fixed_gain;
        applied
    }

    /// The excitation through the LP synthesis filter into `samples_in`; whether a sample
    /// overflowed.
    fn synthesis(
        &mut self,
        lpc: &[f32; ORDER],
        fixed_gain: f32,
        fixed_vector: &[f32; SUBFRAME],
        overflow: bool,
    ) -> bool {
        if overflow {
            for p in self.pitch_vector.iter_mut() {
                *p = (f64::from(*p) * 0.25) as f32;
            }
        }
        let pg = self.pitch_gain[4];
        let mut excitation = weighted_sum(&self.pitch_vector, fixed_vector, pg, fixed_gain);
        // Emphasize the pitch vector's share.
        if f64::from(pg) > 0.5 && !overflow {
            let energy = dot(&excitation, &excitation);
            let bound = match self.mode {
                Mode::M12k2 => 0.25 * f64::from(pg).min(1.0),
                _ => 0.5 * f64::from(pg).min(f64::from(SHARP_MAX)),
            };
            let factor = (f64::from(pg) * bound) as f32;
            for (e, p) in excitation.iter_mut().zip(&self.pitch_vector) {
                *e += factor * p;
            }
            scale_to_energy(&mut excitation, energy);
        }
        lp_synthesis(&mut self.samples_in, ORDER, lpc, &excitation);
        self.samples_in[ORDER..]
            .iter()
            .any(|s| f64::from(s.abs()) > SAMPLE_BOUND)
    }

    /// The adaptive post-filter (§6.2.1): formant filter, tilt compensation, gain control.
    fn postfilter(&mut self, lpc: &[f32; ORDER], out: &mut [f32; SUBFRAME]) {
        let samples: [f32; SUBFRAME] = self.samples_in[ORDER..].try_into().expect("a subframe");
        let speech_gain = dot(&samples, &samples);
        let (gamma_n, gamma_d) = match self.mode {
            Mode::M12k2 | Mode::M10k2 => (&POW_0_7, &POW_0_75),
            _ => (&POW_0_55, &POW_0_7),
        };
        let mut lpc_n = [0f32; ORDER];
        let mut lpc_d = [0f32; ORDER];
        for i in 0..ORDER {
            lpc_n[i] = lpc[i] * gamma_n[i];
            lpc_d[i] = lpc[i] * gamma_d[i];
        }
        let mut pole_out = [0f32; ORDER + SUBFRAME];
        pole_out[..ORDER].copy_from_slice(&self.postfilter_mem);
        lp_synthesis(&mut pole_out, ORDER, &lpc_d, &samples);
        self.postfilter_mem
            .copy_from_slice(&pole_out[SUBFRAME..SUBFRAME + ORDER]);
        for n in 0..SUBFRAME {
            let mut v = pole_out[ORDER + n];
            for i in 1..=ORDER {
                v += lpc_n[i - 1] * pole_out[ORDER + n - i];
            }
            out[n] = v;
        }
        // Tilt compensation.
        let tilt = tilt_factor(&lpc_n, &lpc_d);
        let last = out[SUBFRAME - 1];
        for i in (1..SUBFRAME).rev() {
            out[i] -= tilt * out[i - 1];
        }
        out[0] -= tilt * self.tilt_mem;
        self.tilt_mem = last;
        // Adaptive gain control, towards the synthesized speech's energy.
        let filtered = dot(out, out);
        let mut scale = 1f32;
        if filtered != 0.0 {
            scale = f64::from(speech_gain / filtered).sqrt() as f32;
        }
        scale = (f64::from(scale) * (1.0 - f64::from(AGC_ALPHA))) as f32;
        let mut mem = self.postfilter_agc;
        for o in out.iter_mut() {
            mem = AGC_ALPHA * mem + scale;
            *o *= mem;
        }
        self.postfilter_agc = mem;
    }

    fn update_state(&mut self) {
        self.prev_lsp_sub4 = self.lsp[3];
        self.excitation.copy_within(SUBFRAME.., 0);
        self.pitch_gain.copy_within(1.., 0);
        self.fixed_gain.copy_within(1.., 0);
        self.samples_in.copy_within(SUBFRAME.., 0);
    }
}

/// The formant filter's spectral tilt: its impulse response's first autocorrelation
/// coefficient, times γt; never negative.
fn tilt_factor(lpc_n: &[f32; ORDER], lpc_d: &[f32; ORDER]) -> f32 {
    let mut buf = [0f32; ORDER + TILT_RESPONSE];
    buf[ORDER] = 1.0;
    buf[ORDER + 1..=2 * ORDER].copy_from_slice(lpc_n);
    let input: [f32; TILT_RESPONSE] = buf[ORDER..].try_into().expect("the response");
    lp_synthesis(&mut buf, ORDER, lpc_d, &input);
    let hf = &buf[ORDER..];
    let rh0 = dot(hf, hf);
    let rh1 = dot(&hf[..TILT_RESPONSE - 1], &hf[1..]);
    match f64::from(rh1) >= 0.0 {
        true => (f64::from(rh1 / rh0) * TILT_GAMMA_T) as f32,
        false => 0.0,
    }
}

/// The sparse fixed vector circularly convolved with `filter`, made periodic at the pitch
/// lag as the vector is (D.6.2 of G.729, §6.1.5 of TS 26.090).
fn apply_ir_filter(out: &mut [f32; SUBFRAME], fixed: &Fixed, filter: &[f32; SUBFRAME]) {
    let lag = fixed.pitch_lag;
    let fac = fixed.pitch_fac;
    let mut filter1 = [0f32; SUBFRAME];
    let mut filter2 = [0f32; SUBFRAME];
    if lag < SUBFRAME {
        filter1 = circ_add(filter, filter, lag, fac);
        if lag < SUBFRAME / 2 {
            filter2 = circ_add(filter, &filter1, lag, fac);
        }
    }
    *out = [0.0; SUBFRAME];
    for i in 0..fixed.n {
        let (x, y) = (fixed.x[i], fixed.y[i]);
        let f = if x + lag >= SUBFRAME {
            filter
        } else if x + 2 * lag >= SUBFRAME {
            &filter1
        } else {
            &filter2
        };
        *out = circ_add(out, f, x, y);
    }
}

/// A 12.2 kbit/s pitch lag (integer, and sixths from -2 to 3) from its index.
fn pitch_lag_1_6(index: i32, prev_lag_int: i32, subframe: usize) -> (i32, i32) {
    if subframe == 0 || subframe == 2 {
        if index < 463 {
            let int = ((index + 107) * 10923) >> 16;
            (int, index - int * 6 + 105)
        } else {
            (index - 368, 0)
        }
    } else {
        let int = (((index + 5) * 10923) >> 16) - 1;
        let frac = index - int * 6 - 3;
        let base = (prev_lag_int - 5).clamp(PITCH_LAG_MIN_12K2, PITCH_DELAY_MAX - 9);
        (int + base, frac)
    }
}

/// Another mode's pitch lag (integer, and thirds from -1 to 1) from its index: absolute
/// in a frame's first subframe (and third, but at 4.75 and 5.15 kbit/s), else relative to
/// the last, at `resolution` bits.
fn pitch_lag(
    index: i32,
    prev_lag_int: i32,
    subframe: usize,
    third_as_first: bool,
    resolution: u32,
) -> (i32, i32) {
    let mut index = index;
    if subframe == 0 || (subframe == 2 && third_as_first) {
        index = if index < 197 {
            index + 59
        } else {
            3 * index - 335
        };
    } else if resolution == 4 {
        let min = (prev_lag_int - 5).clamp(PITCH_DELAY_MIN, PITCH_DELAY_MAX - 9);
        index = if index < 4 {
            3 * (index + min) + 1
        } else if index < 12 {
            index + 3 * min + 7
        } else {
            3 * (index + min - 6) + 1
        };
    } else {
        index -= 1;
        index += match resolution {
            5 => 3 * (prev_lag_int - 10).clamp(PITCH_DELAY_MIN, PITCH_DELAY_MAX - 19),
            _ => 3 * (prev_lag_int - 5).clamp(PITCH_DELAY_MIN, PITCH_DELAY_MAX - 9),
        };
    }
    // n · 10923 >> 15 is n / 3, rounded down, for n below 32768.
    let int = (index * 10923) >> 15;
    (int, index - 3 * int - 1)
}

/// A 10-bit index of 10.2 kbit/s pulse positions: three base-5 digits in the top seven
/// bits, each position's low bit in the bottom three.
fn decode_10bit_pulse(code: i32, pos: &mut [i32; 8], i1: usize, i2: usize, i3: usize) {
    let digits = (code >> 3) as u32;
    // 125 to 127 are no base-5 number; FFmpeg reads them as 0.
    let (d0, d1, d2) = match digits < 125 {
        true => (digits / 25, digits / 5 % 5, digits % 5),
        false => (0, 0, 0),
    };
    pos[i1] = ((d2 as i32) << 1) + (code & 1);
    pos[i2] = ((d1 as i32) << 1) + ((code >> 1) & 1);
    pos[i3] = ((d0 as i32) << 1) + ((code >> 2) & 1);
}

/// A subframe's fixed codebook vector, as pulse positions and signs.
fn decode_fixed_sparse(pulses: &[u16], mode: Mode, subframe: usize) -> Fixed {
    let mut f = Fixed::default();
    let p = |i: usize| i32::from(pulses[i]);
    match mode {
        Mode::M12k2 => {
            // Ten pulses, two per track, 3 Gray-coded position bits each and a sign.
            f.n = 10;
            for i in 0..5 {
                let pos1 = usize::from(GRAY_DECODE[(pulses[2 * i + 1] & 7) as usize]) + i;
                let pos2 = usize::from(GRAY_DECODE[(pulses[2 * i] & 7) as usize]) + i;
                let sign = match pulses[2 * i + 1] & 8 != 0 {
                    true => -1.0,
                    false => 1.0,
                };
                f.x[2 * i + 1] = pos1;
                f.x[2 * i] = pos2;
                f.y[2 * i + 1] = sign;
                f.y[2 * i] = if pos2 < pos1 { -sign } else { sign };
            }
        }
        Mode::M10k2 => {
            let mut pos = [0i32; 8];
            decode_10bit_pulse(p(4), &mut pos, 0, 4, 1);
            decode_10bit_pulse(p(5), &mut pos, 2, 6, 5);
            let temp = ((p(6) >> 2) * 25 + 12) >> 5;
            pos[3] = temp % 5;
            pos[7] = temp / 5;
            if pos[7] & 1 == 1 {
                pos[3] = 4 - pos[3];
            }
            pos[3] = (pos[3] << 1) + (p(6) & 1);
            pos[7] = (pos[7] << 1) + ((p(6) >> 1) & 1);
            f.n = 8;
            for i in 0..4 {
                let pos1 = ((pos[i] << 2) + i as i32) as usize;
                let pos2 = ((pos[i + 4] << 2) + i as i32) as usize;
                let sign = if p(i) != 0 { -1.0 } else { 1.0 };
                f.x[i] = pos1;
                f.x[i + 4] = pos2;
                f.y[i] = sign;
                f.y[i + 4] = if pos2 < pos1 { -sign } else { sign };
            }
        }
        _ => {
            let index = p(0);
            let x = &mut f.x;
            if mode <= Mode::M5k15 {
                let subset = (((index >> 3) & 8) + ((subframe as i32) << 1)) as usize;
                x[0] = ((index & 7) * 5) as usize + usize::from(TRACK_POSITION[subset]);
                x[1] = (((index >> 3) & 7) * 5) as usize + usize::from(TRACK_POSITION[subset + 1]);
                f.n = 2;
            } else if mode == Mode::M5k9 {
                let subset = ((index & 1) << 1) + 1;
                x[0] = (((index >> 1) & 7) * 5 + subset) as usize;
                let subset = (index >> 4) & 3;
                x[1] = (((index >> 6) & 7) * 5 + subset + i32::from(subset == 3)) as usize;
                f.n = if x[0] == x[1] { 1 } else { 2 };
            } else if mode == Mode::M6k7 {
                x[0] = ((index & 7) * 5) as usize;
                let subset = (index >> 2) & 2;
                x[1] = (((index >> 4) & 7) * 5 + subset + 1) as usize;
                let subset = (index >> 6) & 2;
                x[2] = (((index >> 8) & 7) * 5 + subset + 2) as usize;
                f.n = 3;
            } else {
                let g = |shift: i32| usize::from(GRAY_DECODE[((index >> shift) & 7) as usize]);
                x[0] = g(0);
                x[1] = g(3) + 1;
                x[2] = g(6) + 2;
                x[3] = g(10) + ((index >> 9) & 1) as usize + 3;
                f.n = 4;
            }
            for i in 0..f.n {
                f.y[i] = if (p(1) >> i) & 1 == 1 { 1.0 } else { -1.0 };
            }
        }
    }
    f
}
