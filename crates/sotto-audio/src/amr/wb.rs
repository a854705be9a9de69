//! One channel of AMR-WB speech (3GPP TS 26.190, ITU-T G.722.2): a frame's parameters to
//! 320 samples at 16 kHz. The core codes 0–6.4 kHz at 12.8 kHz, upsampled by 5/4; the
//! band above is white noise shaped by the core's LP filter and scaled to its tilt.
//!
//! Each step is FFmpeg's floating-point decoder's, in its order and at its precision, so
//! that the samples are FFmpeg's to the bit, its noise generator's sequence included.

use super::celp::*;
use super::wb_tables::*;
use crate::codec::Lfg;

/// Samples of a subframe at 12.8 kHz and at 16 kHz, and of a frame at 16 kHz.
const SUBFRAME: usize = 64;
const SUBFRAME_16K: usize = 80;
pub(super) const FRAME: usize = 4 * SUBFRAME_16K;
/// The LP filter's order, and the high band's at 16 kHz in the lowest mode.
const ORDER: usize = 16;
const ORDER_16K: usize = 20;
/// Past samples the high band's FIR filters keep, and the upsampler's.
const HB_FIR: usize = 30;
const UPS_FIR: usize = 12;
const UPS_MEM: usize = 2 * UPS_FIR;
const PITCH_DELAY_MIN: i32 = 34;
const PITCH_DELAY_MAX: i32 = 231;
/// The excitation kept for the pitch filter, ahead of the current subframe's.
const HISTORY: usize = PITCH_DELAY_MAX as usize + ORDER + 1;
const MIN_ISF_SPACING: f64 = 128.0 / 32768.0;
const PRED_FACTOR: f64 = 1.0 / 3.0;
const MIN_ENERGY: f32 = -14.0;
/// The fixed codebook's mean energy in every mode, in dB.
const ENERGY_MEAN: f32 = 30.0;
const PREEMPH_FAC: f32 = 0.68;
/// Q15, as the frame's ISF tables and the output are.
const Q15: f32 = 1.0 / 32768.0;

/// The state of FFmpeg's lagged Fibonacci generator seeded with 1 ([`Lfg`]), which makes
/// the high band's noise.
const LFG_SEED_1: [u32; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0x9b52c78c, 0x769717a6, 0x7210fe98, 0x30e8499c, 0x405c216a, 0xa361a851,
    0x48a945b2, 0x9a7827b6, 0xfdd55c02, 0x78e7339d, 0x10216e36, 0x481b4450, 0x9a15ac5b, 0x4cc3cc3e,
    0x21a67c60, 0xb4761aec, 0x1963ed24, 0x27308ade, 0x8e602c65, 0xa21145b0, 0xc1f43100, 0xbdd0138a,
    0x9ebb9990, 0x4fcc3b15, 0x76d67110, 0x10cfed53, 0xbf6c273c, 0x97ac729a, 0x0e687b3a, 0x7fc41f86,
    0x65b13dee, 0xa071e7ae, 0x9f4ca96c, 0x80321afd, 0x65774ceb, 0x92c380e5, 0xb2d27c43, 0x215d9740,
    0x989f039e, 0x15fdf5cb, 0xc791c180, 0x841b01f2, 0xa8fd21ef, 0xa1e4a8eb, 0x64ab3959, 0x9f9cdf19,
    0xe89a5244, 0x428ba68e, 0x40157736, 0xaa10cffe, 0xd1ee016f, 0x745b571b, 0x594f9768, 0xc7911a10,
    0xfb23f4cf, 0x2dfa40ec,
];

/// A speech frame's mode (TS 26.201 table 1a), by its bit rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Mode {
    M6k60,
    M8k85,
    M12k65,
    M14k25,
    M15k85,
    M18k25,
    M19k85,
    M23k05,
    M23k85,
}

pub(super) const MODES: [Mode; 9] = [
    Mode::M6k60,
    Mode::M8k85,
    Mode::M12k65,
    Mode::M14k25,
    Mode::M15k85,
    Mode::M18k25,
    Mode::M19k85,
    Mode::M23k05,
    Mode::M23k85,
];

/// Payload bytes of a frame of each frame type: its bits rounded up (SID's 40 too; none
/// for the others).
pub(super) fn payload_bytes(frame_type: usize) -> usize {
    usize::from(FRAME_BITS[frame_type & 15]).div_ceil(8)
}

/// A frame's parameters, as TS 26.201 orders them: the VAD flag, seven ISF indices, then
/// per subframe the pitch lag, the LTP filter flag, the gains, the high band's gain and
/// the pulse indices' high and low parts.
pub(super) type Params = [u16; 8 + 4 * 12];

/// Reads a frame's payload into its parameters.
pub(super) fn unpack(mode: Mode, payload: &[u8]) -> Params {
    let mut params = [0u16; 56];
    unpack_bits(BIT_ORDER[mode as usize], payload, &mut params);
    params
}

/// A subframe's fields in [`Params`].
struct Sub<'a>(&'a [u16]);

impl Sub<'_> {
    fn adap(&self) -> i32 {
        i32::from(self.0[0])
    }
    fn ltp(&self) -> bool {
        self.0[1] != 0
    }
    fn vq_gain(&self) -> usize {
        usize::from(self.0[2] as u8)
    }
    fn hb_gain(&self) -> usize {
        usize::from(self.0[3])
    }
    fn pulse_hi(&self, i: usize) -> i32 {
        i32::from(self.0[4 + i])
    }
    fn pulse_lo(&self, i: usize) -> i32 {
        i32::from(self.0[8 + i])
    }
}

/// A channel's decoder state, kept from frame to frame.
pub(super) struct Channel {
    isf_cur: [f32; ORDER],
    isf_q_past: [f32; ORDER],
    isf_past_final: [f32; ORDER],
    isp: [[f64; ORDER]; 4],
    isp_sub4_past: [f64; ORDER],
    lp_coef: [[f32; ORDER]; 4],
    base_pitch_lag: i32,
    pitch_lag_int: i32,
    /// The past excitation, then the current subframe's and one sample more.
    excitation: [f32; HISTORY + SUBFRAME + 1],
    pitch_vector: [f32; SUBFRAME],
    fixed_vector: [f32; SUBFRAME],
    prediction_error: [f32; 4],
    /// The quantized gains of this subframe (`[0]`) and the ones before.
    pitch_gain: [f32; 6],
    fixed_gain: [f32; 2],
    tilt_coef: f32,
    prev_ir_filter_nr: u8,
    prev_tr_gain: f32,
    samples_az: [f32; ORDER + SUBFRAME],
    samples_up: [f32; UPS_MEM + SUBFRAME],
    samples_hb: [f32; ORDER_16K + SUBFRAME_16K],
    hpf_31_mem: [f32; 2],
    hpf_400_mem: [f32; 2],
    demph_mem: f32,
    bpf_6_7_mem: [f32; HB_FIR],
    lpf_7_mem: [f32; HB_FIR],
    lfg: Lfg,
    first_frame: bool,
    mode: Mode,
}

/// What makes a frame undecodable: a pitch lag that reaches before the excitation kept,
/// which no encoder makes.
#[derive(Debug, PartialEq)]
pub(super) struct LongLag;

impl Channel {
    pub(super) fn new() -> Self {
        Self {
            isf_cur: [0.0; ORDER],
            isf_q_past: [0.0; ORDER],
            isf_past_final: std::array::from_fn(|i| f32::from(ISF_INIT[i]) * Q15),
            isp: [[0.0; ORDER]; 4],
            isp_sub4_past: [0.0; ORDER],
            lp_coef: [[0.0; ORDER]; 4],
            base_pitch_lag: 0,
            pitch_lag_int: 0,
            excitation: [0.0; HISTORY + SUBFRAME + 1],
            pitch_vector: [0.0; SUBFRAME],
            fixed_vector: [0.0; SUBFRAME],
            prediction_error: [MIN_ENERGY; 4],
            pitch_gain: [0.0; 6],
            fixed_gain: [0.0; 2],
            tilt_coef: 0.0,
            prev_ir_filter_nr: 0,
            prev_tr_gain: 0.0,
            samples_az: [0.0; ORDER + SUBFRAME],
            samples_up: [0.0; UPS_MEM + SUBFRAME],
            samples_hb: [0.0; ORDER_16K + SUBFRAME_16K],
            hpf_31_mem: [0.0; 2],
            hpf_400_mem: [0.0; 2],
            demph_mem: 0.0,
            bpf_6_7_mem: [0.0; HB_FIR],
            lpf_7_mem: [0.0; HB_FIR],
            lfg: Lfg::new(LFG_SEED_1),
            first_frame: true,
            mode: Mode::M6k60,
        }
    }

    /// Decodes a speech frame of `mode` into `out`.
    pub(super) fn decode(
        &mut self,
        mode: Mode,
        params: &Params,
        out: &mut [f32; FRAME],
    ) -> Result<(), LongLag> {
        self.mode = mode;
        let ind = &params[1..8];
        let mut isf = [0f32; ORDER];
        let q = |v: i16| f32::from(v) * Q15;
        let row = |i: usize, len: usize| usize::from(ind[i]) % len;
        for i in 0..9 {
            isf[i] = q(DICO1_ISF[row(0, 256)][i]);
        }
        for i in 0..7 {
            isf[i + 9] = q(DICO2_ISF[row(1, 256)][i]);
        }
        if mode == Mode::M6k60 {
            for i in 0..5 {
                isf[i] += q(DICO21_ISF_36B[row(2, 128)][i]);
            }
            for i in 0..4 {
                isf[i + 5] += q(DICO22_ISF_36B[row(3, 128)][i]);
            }
            for i in 0..7 {
                isf[i + 9] += q(DICO23_ISF_36B[row(4, 64)][i]);
            }
        } else {
            for i in 0..3 {
                isf[i] += q(DICO21_ISF[row(2, 64)][i]);
                isf[i + 3] += q(DICO22_ISF[row(3, 128)][i]);
                isf[i + 6] += q(DICO23_ISF[row(4, 128)][i]);
                isf[i + 9] += q(DICO24_ISF[row(5, 32)][i]);
            }
            for i in 0..4 {
                isf[i + 12] += q(DICO25_ISF[row(6, 32)][i]);
            }
        }
        // The mean, and a third of the last frame's quantized residual.
        for i in 0..ORDER {
            let residual = isf[i];
            isf[i] += f32::from(ISF_MEAN[i]) * Q15;
            isf[i] = (f64::from(isf[i]) + PRED_FACTOR * f64::from(self.isf_q_past[i])) as f32;
            self.isf_q_past[i] = residual;
        }
        set_min_dist_lsf(&mut isf[..ORDER - 1], MIN_ISF_SPACING);
        let stab_fac = stability_factor(&isf, &self.isf_past_final);
        isf[ORDER - 1] = (f64::from(isf[ORDER - 1]) * 2.0) as f32;
        self.isf_cur = isf;
        self.isp[3] = lsf2lspd(&isf);
        if self.first_frame {
            self.first_frame = false;
            self.isp_sub4_past = self.isp[3];
        }
        let (past, last) = (self.isp_sub4_past, self.isp[3]);
        for (isp, &c) in self.isp[..3].iter_mut().zip(&ISFP_INTER) {
            let c = f64::from(c);
            *isp = std::array::from_fn(|i| (1.0 - c) * past[i] + c * last[i]);
        }
        for sub in 0..4 {
            self.lp_coef[sub] = isp2lpc(&self.isp[sub]);
        }

        for sub in 0..4 {
            let s = Sub(&params[8 + 12 * sub..8 + 12 * (sub + 1)]);
            self.decode_pitch_vector(&s, sub)?;
            self.decode_fixed_vector(&s);
            self.pitch_sharpening();
            let gains = match mode <= Mode::M8k85 {
                true => &QUA_GAIN_6B[s.vq_gain() % 64],
                false => &QUA_GAIN_7B[s.vq_gain() % 128],
            };
            self.pitch_gain[0] = f32::from(gains[0]) * (1.0 / 16384.0);
            let factor = f32::from(gains[1]) * (1.0 / 2048.0);
            let energy = dot(&self.fixed_vector, &self.fixed_vector) / SUBFRAME as f32;
            self.fixed_gain[0] = predicted_gain(
                factor,
                energy,
                &mut self.prediction_error,
                ENERGY_MEAN,
                &ENERGY_PRED_FAC,
            );
            let voice_fac = self.voice_factor();
            self.tilt_coef = (f64::from(voice_fac) * 0.25 + 0.25) as f32;

            // The excitation fed back, without fractions as the reference code keeps it.
            let (pg, fg) = (self.pitch_gain[0], self.fixed_gain[0]);
            for (e, f) in self.excitation[HISTORY..HISTORY + SUBFRAME]
                .iter_mut()
                .zip(&self.fixed_vector)
            {
                *e *= pg;
                *e += fg * f;
                *e = e.trunc();
            }

            let synth_gain = self.noise_enhancer(voice_fac, stab_fac);
            let mut fixed = self.anti_sparseness();
            pitch_enhancer(&mut fixed, voice_fac);
            let synth_exc = self.synthesis(sub, synth_gain, &fixed);

            // Low band: de-emphasis, a 31 Hz high-pass, 12.8 to 16 kHz.
            let mut prev = self.demph_mem;
            for i in 0..SUBFRAME {
                prev = self.samples_az[ORDER + i] + prev * PREEMPH_FAC;
                self.samples_up[UPS_MEM + i] = prev;
            }
            self.demph_mem = prev;
            order_2_filter(
                &mut self.samples_up[UPS_MEM..],
                HPF_31_POLES,
                HPF_31_GAIN,
                &mut self.hpf_31_mem,
            );
            let o: &mut [f32; SUBFRAME_16K] = (&mut out[sub * SUBFRAME_16K..][..SUBFRAME_16K])
                .try_into()
                .expect("a subframe");
            self.upsample_5_4(o);

            // High band (6.4–7 kHz): noise at the low band's energy and tilt, through the
            // LP filter, band-passed.
            let mut hb = [0f32; SUBFRAME_16K];
            hb[..SUBFRAME].copy_from_slice(&self.samples_up[UPS_MEM..]);
            order_2_filter(
                &mut hb[..SUBFRAME],
                HPF_400_POLES,
                HPF_400_GAIN,
                &mut self.hpf_400_mem,
            );
            let hb_gain = self.hb_gain(&hb[..SUBFRAME], s.hb_gain(), params[0]);
            let hb_exc = self.hb_excitation(&synth_exc, hb_gain);
            self.hb_synthesis(sub, &hb_exc);
            let synthesized: [f32; SUBFRAME_16K] =
                self.samples_hb[ORDER_16K..].try_into().expect("a subframe");
            hb = fir(&BPF_6_7_COEF, &mut self.bpf_6_7_mem, &synthesized);
            if mode == Mode::M23k85 {
                hb = fir(&LPF_7_COEF, &mut self.lpf_7_mem, &hb);
            }
            for (o, h) in o.iter_mut().zip(&hb) {
                *o = (*o + h) * Q15;
            }

            self.excitation.copy_within(SUBFRAME..SUBFRAME + HISTORY, 0);
            self.pitch_gain.copy_within(..5, 1);
            self.fixed_gain[1] = self.fixed_gain[0];
            self.samples_az.copy_within(SUBFRAME.., 0);
            self.samples_up.copy_within(SUBFRAME.., 0);
            self.samples_hb.copy_within(SUBFRAME_16K.., 0);
        }
        self.isp_sub4_past = self.isp[3];
        self.isf_past_final = self.isf_cur;
        Ok(())
    }

    /// The adaptive codebook vector: the past excitation at the pitch lag, interpolated to
    /// its quarter (or half, in the lower modes), then low-passed where the frame says so.
    fn decode_pitch_vector(&mut self, s: &Sub, subframe: usize) -> Result<(), LongLag> {
        let index = s.adap();
        let first = subframe == 0 || (subframe == 2 && self.mode != Mode::M6k60);
        let (lag_int, lag_frac) = if self.mode <= Mode::M8k85 {
            if first {
                let (int, frac) = if index < 116 {
                    let int = (index + 69) >> 1;
                    (int, (index - (int << 1) + 68) * 2)
                } else {
                    (index - 24, 0)
                };
                self.set_base_lag(int, frac);
                (int, frac)
            } else {
                let int = (index + 1) >> 1;
                (int + self.base_pitch_lag, (index - (int << 1)) * 2)
            }
        } else if subframe == 0 || subframe == 2 {
            let (int, frac) = if index < 376 {
                let int = (index + 137) >> 2;
                (int, index - (int << 2) + 136)
            } else if index < 440 {
                // Halves, in quarters.
                let int = (index + 257 - 376) >> 1;
                (int, (index - (int << 1) + 256 - 376) * 2)
            } else {
                (index - 280, 0)
            };
            self.set_base_lag(int, frac);
            (int, frac)
        } else {
            let int = (index + 1) >> 2;
            (int + self.base_pitch_lag, index - (int << 2))
        };
        // FFmpeg keeps the lag in a byte.
        self.pitch_lag_int = lag_int & 0xFF;
        let lag = (lag_int + i32::from(lag_frac > 0)) as usize;
        let frac = (lag_frac + if lag_frac > 0 { 0 } else { 4 }) as usize;
        let start = match (HISTORY + 1).checked_sub(lag) {
            Some(start) if start >= ORDER => start,
            _ => return Err(LongLag),
        };
        interpolate(
            &mut self.excitation,
            (start, HISTORY, SUBFRAME + 1),
            &AC_INTER,
            4,
            frac,
            ORDER,
        );
        let exc = &mut self.excitation;
        if s.ltp() {
            self.pitch_vector
                .copy_from_slice(&exc[HISTORY..HISTORY + SUBFRAME]);
        } else {
            for i in 0..SUBFRAME {
                let at = HISTORY + i;
                self.pitch_vector[i] = (0.18 * f64::from(exc[at - 1])
                    + 0.64 * f64::from(exc[at])
                    + 0.18 * f64::from(exc[at + 1])) as f32;
            }
            exc[HISTORY..HISTORY + SUBFRAME].copy_from_slice(&self.pitch_vector);
        }
        Ok(())
    }

    /// The lag the next subframe's relative lag counts from: the floor of this one, less
    /// 8 (where the standard says the nearest, its code takes the floor).
    fn set_base_lag(&mut self, int: i32, frac: i32) {
        self.base_pitch_lag =
            (int - 8 - i32::from(frac < 0)).clamp(PITCH_DELAY_MIN, PITCH_DELAY_MAX - 15);
    }

    /// The algebraic codebook vector: four tracks of interleaved positions, each with its
    /// mode's count of signed pulses.
    fn decode_fixed_vector(&mut self, s: &Sub) {
        let mut sig = [[0i32; 6]; 4];
        let spacing = if self.mode == Mode::M6k60 { 2 } else { 4 };
        let joined = |i: usize, shift: u32| s.pulse_lo(i) + (s.pulse_hi(i) << shift);
        for (i, track) in sig.iter_mut().enumerate() {
            match self.mode {
                Mode::M6k60 if i < 2 => one_pulse(track, s.pulse_lo(i), 5, 1),
                Mode::M6k60 => {}
                Mode::M8k85 => one_pulse(track, s.pulse_lo(i), 4, 1),
                Mode::M12k65 => two_pulses(track, s.pulse_lo(i), 4, 1),
                Mode::M14k25 if i < 2 => three_pulses(track, s.pulse_lo(i), 4, 1),
                Mode::M14k25 => two_pulses(track, s.pulse_lo(i), 4, 1),
                Mode::M15k85 => three_pulses(track, s.pulse_lo(i), 4, 1),
                Mode::M18k25 => four_pulses(track, joined(i, 14), 4, 1),
                Mode::M19k85 if i < 2 => five_pulses(track, joined(i, 10), 4, 1),
                Mode::M19k85 => four_pulses(track, joined(i, 14), 4, 1),
                Mode::M23k05 | Mode::M23k85 => six_pulses(track, joined(i, 11), 4, 1),
            }
        }
        self.fixed_vector = [0.0; SUBFRAME];
        let counts = PULSES_NB_PER_MODE_TR[self.mode as usize];
        for (i, track) in sig.iter().enumerate() {
            for &p in &track[..usize::from(counts[i])] {
                let pos = (p.unsigned_abs() as usize).saturating_sub(1) * spacing + i;
                if let Some(v) = self.fixed_vector.get_mut(pos) {
                    *v += if p < 0 { -1.0 } else { 1.0 };
                }
            }
        }
    }

    /// Tilt, then periodicity at the pitch lag (which the standard applies below a lag of
    /// 64 alone, its code always).
    fn pitch_sharpening(&mut self) {
        let v = &mut self.fixed_vector;
        for i in (1..SUBFRAME).rev() {
            v[i] -= v[i - 1] * self.tilt_coef;
        }
        let lag = self.pitch_lag_int.max(1) as usize;
        for i in lag..SUBFRAME {
            v[i] = (f64::from(v[i]) + f64::from(v[i - lag]) * 0.85) as f32;
        }
    }

    /// How voiced the subframe is, from -1 (all fixed codebook) to 1 (all pitch).
    fn voice_factor(&self) -> f32 {
        let energy =
            |v: &[f32; SUBFRAME], g: f32| f64::from(dot(v, v)) * f64::from(g) * f64::from(g);
        let p = energy(&self.pitch_vector, self.pitch_gain[0]);
        let f = energy(&self.fixed_vector, self.fixed_gain[0]);
        ((p - f) / (p + f + 0.01)) as f32
    }

    /// The fixed gain smoothed towards the last one's threshold in stable, unvoiced
    /// subframes, by at most ±1.5 dB (the reference code's constants).
    fn noise_enhancer(&mut self, voice_fac: f32, stab_fac: f32) -> f32 {
        let gain = self.fixed_gain[0];
        let sm_fac = (0.5 * f64::from(1.0 - voice_fac) * f64::from(stab_fac)) as f32;
        let g0 = if gain < self.prev_tr_gain {
            self.prev_tr_gain.min(gain + gain * (6226.0 * Q15))
        } else {
            self.prev_tr_gain.max(gain * (27536.0 * Q15))
        };
        self.prev_tr_gain = g0;
        sm_fac * g0 + (1.0 - sm_fac) * gain
    }

    /// Adaptive phase dispersion in the two lowest modes: the fixed vector circularly
    /// convolved with a strong or medium impulse response where the pitch is weak.
    fn anti_sparseness(&mut self) -> [f32; SUBFRAME] {
        if self.mode > Mode::M8k85 {
            return self.fixed_vector;
        }
        let pg = f64::from(self.pitch_gain[0]);
        let mut nr: u8 = if pg < 0.6 {
            0
        } else if pg < 0.9 {
            1
        } else {
            2
        };
        if f64::from(self.fixed_gain[0]) > 3.0 * f64::from(self.fixed_gain[1]) {
            // An onset.
            nr = (nr + 1).min(2);
        } else {
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
        }
        self.prev_ir_filter_nr = nr;
        nr += u8::from(self.mode == Mode::M8k85);
        let coef = match nr {
            0 => &IR_FILTER_STR,
            1 => &IR_FILTER_MID,
            _ => return self.fixed_vector,
        };
        let mut out = [0f32; SUBFRAME];
        for (i, &v) in self.fixed_vector.iter().enumerate() {
            if v != 0.0 {
                out = circ_add(&out, coef, i, v);
            }
        }
        out
    }

    /// The excitation (returned) through the LP synthesis filter into `samples_az`.
    fn synthesis(
        &mut self,
        sub: usize,
        fixed_gain: f32,
        fixed: &[f32; SUBFRAME],
    ) -> [f32; SUBFRAME] {
        let pg = self.pitch_gain[0];
        let mut exc = weighted_sum(&self.pitch_vector, fixed, pg, fixed_gain);
        // The pitch's share emphasized in the lower modes.
        if f64::from(pg) > 0.5 && self.mode <= Mode::M8k85 {
            let energy = dot(&exc, &exc);
            let factor = (0.25 * f64::from(pg) * f64::from(pg)) as f32;
            for (e, p) in exc.iter_mut().zip(&self.pitch_vector) {
                *e += factor * p;
            }
            scale_to_energy(&mut exc, energy);
        }
        lp_synthesis(&mut self.samples_az, ORDER, &self.lp_coef[sub], &exc);
        exc
    }

    /// `samples_up` (12.8 kHz, with the filter's memory before it) to 16 kHz: each fifth
    /// sample taken, the four between by a 24-tap FIR.
    fn upsample_5_4(&self, out: &mut [f32; SUBFRAME_16K]) {
        let input = &self.samples_up[UPS_FIR..];
        let before = &self.samples_up[1..];
        let mut at = 0;
        for j in 0..SUBFRAME_16K / 5 {
            out[5 * j] = input[at];
            for k in 1..5 {
                out[5 * j + k] = dot(&before[at..at + UPS_MEM], &UPSAMPLE_FIR[k - 1]);
                at += 1;
            }
        }
    }

    /// The high band's gain: coded at 23.85 kbit/s, else from the low band's tilt.
    fn hb_gain(&self, synth: &[f32], index: usize, vad: u16) -> f32 {
        if self.mode == Mode::M23k85 {
            return f32::from(QUA_HB_GAIN[index % 16]) * (1.0 / 16384.0);
        }
        let wsp = f64::from(u8::from(vad > 0));
        let tmp = dot(&synth[..SUBFRAME - 1], &synth[1..]);
        let tilt = if tmp > 0.0 {
            tmp / dot(synth, synth)
        } else {
            0.0
        };
        (((1.0 - f64::from(tilt)) * (1.25 - 0.25 * wsp)) as f32).clamp(0.1, 1.0)
    }

    /// White noise at the excitation's energy times the gain squared.
    fn hb_excitation(&mut self, synth_exc: &[f32; SUBFRAME], gain: f32) -> [f32; SUBFRAME_16K] {
        let energy = dot(synth_exc, synth_exc);
        let mut noise = [0f32; SUBFRAME_16K];
        for n in noise.iter_mut() {
            *n = (32768.0 - f64::from(self.lfg.next() as u16)) as f32;
        }
        scale_to_energy(&mut noise, energy * gain * gain);
        noise
    }

    /// The high band's LP synthesis into `samples_hb`: at 6.60 kbit/s by an order-20
    /// filter from the ISFs extrapolated to 8 kHz, else by the core's, weighted.
    fn hb_synthesis(&mut self, sub: usize, exc: &[f32; SUBFRAME_16K]) {
        let mut lpc = [0f32; ORDER_16K];
        let order = if self.mode == Mode::M6k60 {
            let c = ISFP_INTER[sub];
            let mut e_isf = [0f32; ORDER_16K];
            let mixed = weighted_sum(
                &self.isf_past_final,
                &self.isf_cur,
                c,
                (1.0 - f64::from(c)) as f32,
            );
            e_isf[..ORDER].copy_from_slice(&mixed);
            extrapolate_isf(&mut e_isf);
            e_isf[ORDER_16K - 1] = (f64::from(e_isf[ORDER_16K - 1]) * 2.0) as f32;
            let e_isp = lsf2lspd(&e_isf);
            lpc = isp2lpc(&e_isp);
            weigh(&mut lpc, 0.9);
            ORDER_16K
        } else {
            lpc[..ORDER].copy_from_slice(&self.lp_coef[sub]);
            weigh(&mut lpc[..ORDER], 0.6);
            ORDER
        };
        lp_synthesis(&mut self.samples_hb, ORDER_16K, &lpc[..order], exc);
    }
}

/// How stable the spectrum is, from 0 to 1.25, by the ISFs' change since the last frame.
fn stability_factor(isf: &[f32; ORDER], past: &[f32; ORDER]) -> f32 {
    let mut acc = 0f32;
    for i in 0..ORDER - 1 {
        acc += (isf[i] - past[i]) * (isf[i] - past[i]);
    }
    // The reference code's scale, which FFmpeg matches with `* 512` for its `/ 256`.
    0f64.max(1.25 - f64::from(acc) * 0.8 * 512.0) as f32
}

/// Lowers each pulse by its neighbours' mean, by how unvoiced the subframe is.
fn pitch_enhancer(v: &mut [f32; SUBFRAME], voice_fac: f32) {
    let cpe = (0.125 * f64::from(1.0 + voice_fac)) as f32;
    let mut last = v[0];
    v[0] -= cpe * v[1];
    for i in 1..SUBFRAME - 1 {
        let cur = v[i];
        v[i] -= cpe * (last + v[i + 1]);
        last = cur;
    }
    v[SUBFRAME - 1] -= cpe * last;
}

/// Multiplies LP coefficient `i` by `gamma^(i + 1)`.
fn weigh(lpc: &mut [f32], gamma: f32) {
    let mut fac = gamma;
    for c in lpc.iter_mut() {
        *c *= fac;
        fac *= gamma;
    }
}

/// A 31-tap FIR over `input` (80 samples), `mem` holding the 30 before.
fn fir(
    coef: &[f32; HB_FIR + 1],
    mem: &mut [f32; HB_FIR],
    input: &[f32; SUBFRAME_16K],
) -> [f32; SUBFRAME_16K] {
    let mut data = [0f32; SUBFRAME_16K + HB_FIR];
    data[..HB_FIR].copy_from_slice(mem);
    data[HB_FIR..].copy_from_slice(input);
    let mut out = [0f32; SUBFRAME_16K];
    for (i, o) in out.iter_mut().enumerate() {
        for (j, c) in coef.iter().enumerate() {
            *o += data[i + j] * c;
        }
    }
    mem.copy_from_slice(&data[SUBFRAME_16K..]);
    out
}

/// The ISFs (the first 16, at 12.8 kHz) extended to order 20 at 16 kHz, spaced as the
/// upper ones' differences correlate best.
fn extrapolate_isf(isf: &mut [f32; ORDER_16K]) {
    isf[ORDER_16K - 1] = isf[ORDER - 1];
    let mut diff = [0f32; ORDER - 2];
    for i in 0..ORDER - 2 {
        diff[i] = isf[i + 1] - isf[i];
    }
    let mut mean = 0f32;
    for d in &diff[2..] {
        mean += d * (1.0 / (ORDER - 4) as f32);
    }
    let corr = |lag: usize| {
        let mut sum = 0f32;
        for i in 7..ORDER - 2 {
            let prod = (diff[i] - mean) * (diff[i - lag] - mean);
            sum += prod * prod;
        }
        sum
    };
    let mut best = 0;
    let lags = [corr(2), corr(3), corr(4)];
    for i in 0..3 {
        if lags[i] > lags[best] {
            best = i;
        }
    }
    let best = best + 1;
    for i in ORDER - 1..ORDER_16K - 1 {
        isf[i] = isf[i - 1] + isf[i - 1 - best] - isf[i - 2 - best];
    }
    // An estimate of the 19th, and the added ones scaled to meet it.
    let est = (7965.0 + f64::from(isf[2] - isf[3] - isf[4]) / 6.0) as f32;
    let scale = (0.5 * f64::from(est.min(7600.0) - isf[ORDER - 2])
        / f64::from(isf[ORDER_16K - 2] - isf[ORDER - 2])) as f32;
    let mut d = [0f32; ORDER_16K - ORDER];
    for (j, i) in (ORDER - 1..ORDER_16K - 1).enumerate() {
        d[j] = scale * (isf[i] - isf[i - 1]);
    }
    // Keep them apart.
    for i in 1..ORDER_16K - ORDER {
        if f64::from(d[i] + d[i - 1]) < 5.0 {
            if d[i] > d[i - 1] {
                d[i - 1] = (5.0 - f64::from(d[i])) as f32;
            } else {
                d[i] = (5.0 - f64::from(d[i - 1])) as f32;
            }
        }
    }
    for (j, i) in (ORDER - 1..ORDER_16K - 1).enumerate() {
        isf[i] = isf[i - 1] + d[j] * Q15;
    }
    for v in &mut isf[..ORDER_16K - 1] {
        *v = (f64::from(*v) * 0.8) as f32;
    }
}

/// `BIT_STR`: `len` bits of `x` from bit `lsb` up.
fn bits(x: i32, lsb: u32, len: u32) -> i32 {
    (x >> lsb) & ((1 << len) - 1)
}

fn bit(x: i32, p: u32) -> bool {
    (x >> p) & 1 == 1
}

/// Pulse positions (1-based, signed), as TS 26.190 §5.8.1 codes one to six pulses of a
/// track in `m`-bit positions from `off`.
fn one_pulse(out: &mut [i32], code: i32, m: u32, off: i32) {
    let pos = bits(code, 0, m) + off;
    out[0] = if bit(code, m) { -pos } else { pos };
}

fn two_pulses(out: &mut [i32], code: i32, m: u32, off: i32) {
    let pos0 = bits(code, m, m) + off;
    let pos1 = bits(code, 0, m) + off;
    let neg = bit(code, 2 * m);
    out[0] = if neg { -pos0 } else { pos0 };
    out[1] = if neg { -pos1 } else { pos1 };
    if pos0 > pos1 {
        out[1] = -out[1];
    }
}

fn three_pulses(out: &mut [i32], code: i32, m: u32, off: i32) {
    let half = i32::from(bit(code, 2 * m - 1)) << (m - 1);
    two_pulses(out, bits(code, 0, 2 * m - 1), m - 1, off + half);
    one_pulse(&mut out[2..], bits(code, 2 * m, m + 1), m, off);
}

fn four_pulses(out: &mut [i32], code: i32, m: u32, off: i32) {
    let b_offset = 1 << (m - 1);
    match bits(code, 4 * m - 2, 2) {
        0 => {
            let half = i32::from(bit(code, 4 * m - 3)) << (m - 1);
            let sub = i32::from(bit(code, 2 * m - 3)) << (m - 2);
            two_pulses(out, bits(code, 0, 2 * m - 3), m - 2, off + half + sub);
            two_pulses(
                &mut out[2..],
                bits(code, 2 * m - 2, 2 * m - 1),
                m - 1,
                off + half,
            );
        }
        1 => {
            one_pulse(out, bits(code, 3 * m - 2, m), m - 1, off);
            three_pulses(
                &mut out[1..],
                bits(code, 0, 3 * m - 2),
                m - 1,
                off + b_offset,
            );
        }
        2 => {
            two_pulses(out, bits(code, 2 * m - 1, 2 * m - 1), m - 1, off);
            two_pulses(
                &mut out[2..],
                bits(code, 0, 2 * m - 1),
                m - 1,
                off + b_offset,
            );
        }
        _ => {
            three_pulses(out, bits(code, m, 3 * m - 2), m - 1, off);
            one_pulse(&mut out[3..], bits(code, 0, m), m - 1, off + b_offset);
        }
    }
}

fn five_pulses(out: &mut [i32], code: i32, m: u32, off: i32) {
    let half = i32::from(bit(code, 5 * m - 1)) << (m - 1);
    three_pulses(out, bits(code, 2 * m + 1, 3 * m - 2), m - 1, off + half);
    two_pulses(&mut out[3..], bits(code, 0, 2 * m + 1), m, off);
}

fn six_pulses(out: &mut [i32], code: i32, m: u32, off: i32) {
    let b_offset = 1 << (m - 1);
    // Which half has more pulses in cases 0 to 2.
    let more = i32::from(bit(code, 6 * m - 5)) << (m - 1);
    let other = b_offset - more;
    match bits(code, 6 * m - 4, 2) {
        0 => {
            one_pulse(out, bits(code, 0, m), m - 1, off + more);
            five_pulses(&mut out[1..], bits(code, m, 5 * m - 5), m - 1, off + more);
        }
        1 => {
            one_pulse(out, bits(code, 0, m), m - 1, off + other);
            five_pulses(&mut out[1..], bits(code, m, 5 * m - 5), m - 1, off + more);
        }
        2 => {
            two_pulses(out, bits(code, 0, 2 * m - 1), m - 1, off + other);
            four_pulses(
                &mut out[2..],
                bits(code, 2 * m - 1, 4 * m - 4),
                m - 1,
                off + more,
            );
        }
        _ => {
            three_pulses(out, bits(code, 3 * m - 2, 3 * m - 2), m - 1, off);
            three_pulses(
                &mut out[3..],
                bits(code, 0, 3 * m - 2),
                m - 1,
                off + b_offset,
            );
        }
    }
}
