//! G.729 (CS-ACELP at 8 kbit/s) and its Annex D (6.4 kbit/s): the VoIP codec of call
//! recorders, PBXs (Asterisk's `.g729` recordings) and RTP payloads saved from captures.
//! Raw `.g729` files are 10-byte frames back to back; WAV files give it format tag 0x0083
//! (or 0x729A). Each frame is 10 ms of 8 kHz speech: LSP-coded LPC, two 5 ms subframes of
//! adaptive and algebraic codebooks, then a postfilter, gain control and a high-pass.
//!
//! The decoder follows FFmpeg's (`g729dec.c`, `g729postfilter.c` and the ACELP helpers), in
//! its default build: fixed point, but for the fixed-codebook gain, which it computes in
//! `double`, and FFmpeg's own long-term postfilter gain, so its samples are FFmpeg's (and
//! faster-whisper's), not the ITU reference's. As there, a frame of zero bytes is an erased
//! frame, concealed from the last good one, and Annex B's silence frames are not read.
//! Decoded samples go to symphonia as a 16-bit PCM WAV file (see
//! [`crate::codec::DecodedWav`]).

mod tables;

use crate::codec::{Bits, BlockDecode};
use tables::*;

/// WAV's format tags for G.729.
pub(crate) const WAV_TAGS: [u16; 2] = [0x0083, 0x729A];
/// Bytes of an 8 kbit/s frame, and of an Annex D (6.4 kbit/s) one.
pub(crate) const FRAME_8K: usize = 10;
pub(crate) const FRAME_6K4: usize = 8;

const SUB: usize = 40;
const PITCH_MIN: i32 = 20;
const PITCH_MAX: i32 = 143;
/// Past excitation kept: the longest lag and the interpolation filter's reach.
const EXC_PAST: usize = PITCH_MAX as usize + 11;
const EXC_LEN: usize = EXC_PAST + 2 * SUB;
/// Past residual the long-term postfilter reads.
const RES_PAST: usize = PITCH_MAX as usize + 8 + 1;
const SHARP_MIN: i32 = 3277;
/// (The specification says 0.8; the reference code and FFmpeg use 0.7945.)
const SHARP_MAX: i32 = 13017;
const MR_ENERGY: i32 = 1_018_156;

fn clip16(v: i32) -> i16 {
    v.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

/// ⌊log₂ v⌋, 0 for 0 (FFmpeg's `av_log2`).
fn log2(v: u32) -> i32 {
    31 - (v | 1).leading_zeros() as i32
}

/// Σ a·b, saturated to 32 bits.
fn dot(a: &[i16], b: &[i16], n: usize) -> i32 {
    let s: i64 = a[..n]
        .iter()
        .zip(&b[..n])
        .map(|(&x, &y)| i64::from(x) * i64::from(y))
        .sum();
    s.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// `(a·wa + b·wb + round) >> shift`, clipped, for each sample.
#[allow(clippy::too_many_arguments)]
fn weighted_sum(
    out: &mut [i16],
    a: &[i16],
    b: &[i16],
    wa: i16,
    wb: i16,
    round: i32,
    shift: u32,
    n: usize,
) {
    for i in 0..n {
        let v = (i32::from(a[i]) * i32::from(wa))
            .wrapping_add(i32::from(b[i]) * i32::from(wb))
            .wrapping_add(round);
        out[i] = clip16(v >> shift);
    }
}

/// One output sample of a fractional delay: `len` taps either side of `buf[at]`.
fn interp_at(
    buf: &[i16],
    at: usize,
    coeffs: &[i32],
    precision: usize,
    frac: usize,
    len: usize,
) -> i16 {
    let mut v = 0x4000i32;
    let mut idx = 0;
    for i in 0..len {
        v = v.wrapping_add(i32::from(buf[at + i]) * coeffs[idx + frac]);
        idx += precision;
        v = v.wrapping_add(i32::from(buf[at - i - 1]) * coeffs[idx - frac]);
    }
    (v >> 15) as i16
}

/// `n` samples delayed by a fraction, read from `input` at `at` on.
fn interpolate(
    out: &mut [i16],
    input: &[i16],
    at: usize,
    coeffs: &[i32],
    precision: usize,
    frac: usize,
    len: usize,
) {
    for (n, o) in out.iter_mut().enumerate() {
        *o = interp_at(input, at + n, coeffs, precision, frac, len);
    }
}

/// The LP synthesis filter 1/A(z) over `out[pre..pre + n]`, `out[..pre]` holding the
/// past outputs. With `stop`, returns whether a sample overflowed (and stops there).
fn synthesis(
    out: &mut [i16],
    pre: usize,
    coeffs: &[i16],
    input: &[i16],
    n: usize,
    stop: bool,
) -> bool {
    for k in 0..n {
        let mut sum = 0x800i32;
        for (i, &c) in coeffs[..10].iter().enumerate() {
            sum = sum.wrapping_sub(i32::from(c) * i32::from(out[pre + k - i - 1]));
        }
        let full = (sum >> 12) + i32::from(input[k]);
        let v = clip16(full);
        if stop && i32::from(v) != full {
            return true;
        }
        out[pre + k] = v;
    }
    false
}

/// Q15 log₂ of `v` (FFmpeg's `ff_log2_q15`, default table).
fn log2_q15(v: u32) -> i32 {
    let p = log2(v);
    let v = v << (31 - p);
    let x0 = ((v & 0x7c00_0000) >> 26) as usize;
    let dx = ((v & 0x03ff_f800) >> 11) as i32;
    let f = LOG2[x0] + ((dx * (LOG2[x0 + 1] - LOG2[x0])) >> 15);
    (p << 15) + f
}

/// cos of a Q14 angle over π/2 · 2 (FFmpeg's `ff_cos`: the table, linearly interpolated).
fn cos_q15(arg: i32) -> i16 {
    let (ind, off) = (((arg >> 8) & 0xff) as usize, arg & 0xff);
    // (Past the table's end only for LSFs that sorting leaves above the last one's bound.)
    let (a, b) = (COS[ind.min(64)], COS[(ind + 1).min(64)]);
    (a + ((off * (b - a)) >> 8)) as i16
}

/// One polynomial of LSPs `lsp[0], lsp[2], …` (3.22).
fn lsp_poly(lsp: &[i16]) -> [i32; 6] {
    let mut f = [0i32; 6];
    f[0] = 0x40_0000;
    f[1] = -i32::from(lsp[0]) * 256;
    for i in 2..=5 {
        f[i] = f[i - 2];
        let l = i64::from(lsp[2 * i - 2]);
        for j in (2..=i).rev() {
            let m = ((i64::from(f[j - 1]) * l) >> 14) as i32;
            f[j] = f[j].wrapping_sub(m.wrapping_sub(f[j - 2]));
        }
        f[1] = f[1].wrapping_sub(i32::from(lsp[2 * i - 2]) * 256);
    }
    f
}

/// LPC coefficients (3.12, `lp[0]` = 1) of ten LSPs.
fn lsp_to_lpc(lsp: &[i16; 10]) -> [i16; 11] {
    let (f1, f2) = (lsp_poly(&lsp[..]), lsp_poly(&lsp[1..]));
    let mut lp = [0i16; 11];
    lp[0] = 4096;
    for i in 1..=5 {
        let ff1 = f1[i].wrapping_add(f1[i - 1]).wrapping_add(1 << 10);
        let ff2 = f2[i].wrapping_sub(f2[i - 1]);
        lp[i] = (ff1.wrapping_add(ff2) >> 11) as i16;
        lp[11 - i] = (ff1.wrapping_sub(ff2) >> 11) as i16;
    }
    lp
}

/// One channel's decoder state.
pub(crate) struct G729 {
    /// Annex D's 8-byte frames, else 10-byte ones.
    annex_d: bool,
    /// Past excitation, then this frame's two subframes.
    exc: [i16; EXC_LEN],
    pitch_prev: i32,
    /// The LSF quantizer's outputs: the four last frames', newest first, then the slot
    /// this frame's goes to.
    past_q: [[i16; 10]; 5],
    lsfq: [i16; 10],
    lsp_prev: [i16; 10],
    quant_energy: [i16; 4],
    syn_mem: [i16; 10],
    residual: [i16; SUB + RES_PAST],
    res_mem: [i16; 10],
    pos_mem: [i16; SUB + 10],
    /// Pitch gains (1.14) of this subframe and the five before.
    gain_pitch: [i16; 6],
    /// Code gains of this subframe and the one before.
    gain_code: [i16; 2],
    voice_decision: i32,
    onset: i32,
    was_periodic: bool,
    ht_prev: i16,
    gain_coeff: i16,
    rand: u16,
    ma_prev: usize,
    hpf_f: [i32; 2],
    hpf_z: [i16; 2],
}

impl G729 {
    /// A decoder of 8 kbit/s frames, or with `annex_d` of 6.4 kbit/s ones.
    pub(crate) fn new(annex_d: bool) -> Self {
        let mut past_q = [[0i16; 10]; 5];
        for q in &mut past_q {
            for (i, v) in q.iter_mut().enumerate() {
                *v = ((18717 * (i as i32 + 1)) >> 3) as i16;
            }
        }
        Self {
            annex_d,
            exc: [0; EXC_LEN],
            pitch_prev: PITCH_MIN,
            past_q,
            lsfq: [0; 10],
            lsp_prev: LSP_INIT,
            quant_energy: [-14336; 4],
            syn_mem: [0; 10],
            residual: [0; SUB + RES_PAST],
            res_mem: [0; 10],
            pos_mem: [0; SUB + 10],
            gain_pitch: [0; 6],
            gain_code: [0; 2],
            voice_decision: 0,
            onset: 0,
            was_periodic: false,
            ht_prev: 0,
            gain_coeff: 16384,
            rand: 21845,
            ma_prev: 0,
            hpf_f: [0; 2],
            hpf_z: [0; 2],
        }
    }

    /// The quantized LSFs of a frame's indices (3.2.4).
    fn lsf_decode(&mut self, ma: usize, first: usize, lo: usize, hi: usize) {
        let q = &mut self.past_q[4];
        for i in 0..5 {
            q[i] = LSP_1ST[first][i] + LSP_2ND[lo][i];
            q[i + 5] = LSP_1ST[first][i + 5] + LSP_2ND[hi][i + 5];
        }
        for gap in [10, 5] {
            for i in 1..10 {
                let diff = (i32::from(q[i - 1]) - i32::from(q[i]) + gap) >> 1;
                if diff > 0 {
                    q[i - 1] = (i32::from(q[i - 1]) - diff) as i16;
                    q[i] = (i32::from(q[i]) + diff) as i16;
                }
            }
        }
        for i in 0..10 {
            let mut sum = i32::from(self.past_q[4][i]) * i32::from(MA_PREDICTOR_SUM[ma][i]);
            for (past, pred) in self.past_q[..4].iter().zip(&MA_PREDICTOR[ma]) {
                sum = sum.wrapping_add(i32::from(past[i]) * i32::from(pred[i]));
            }
            self.lsfq[i] = (sum >> 15) as i16;
        }
        // Sorted, then kept apart and within range.
        let l = &mut self.lsfq;
        for i in 0..9 {
            let mut j = i + 1;
            while j > 0 && l[j - 1] > l[j] {
                l.swap(j - 1, j);
                j -= 1;
            }
        }
        let mut least = 40i32;
        for v in l.iter_mut() {
            *v = i32::from(*v).max(least) as i16;
            least = i32::from(*v) + 321;
        }
        l[9] = l[9].min(25681);
    }

    /// An erased frame's quantizer output, from the last LSFs.
    fn lsf_restore(&mut self) {
        let ma = self.ma_prev;
        for i in 0..10 {
            let mut tmp = i32::from(self.lsfq[i]) << 15;
            for (past, pred) in self.past_q[..4].iter().zip(&MA_PREDICTOR[ma]) {
                tmp = tmp.wrapping_sub(i32::from(past[i]) * i32::from(pred[i]));
            }
            self.past_q[4][i] =
                (((tmp >> 15) * i32::from(MA_PREDICTOR_SUM_INV[ma][i])) >> 12) as i16;
        }
    }

    /// The fixed-codebook gain from its correction factor (FFmpeg's default build:
    /// in `double`).
    fn code_gain(&self, correction: i32, fc: &[i16; SUB]) -> i16 {
        let mut energy = MR_ENERGY << 10;
        for (&q, &c) in self.quant_energy.iter().zip(&MA_PREDICTION_COEFF) {
            energy = energy.wrapping_add(i32::from(q) * c);
        }
        let exp10 = (std::f64::consts::LOG2_10 * (f64::from(energy) / f64::from(20 << 23))).exp2();
        let g = f64::from(correction) * exp10 / f64::from(dot(fc, fc, SUB)).sqrt();
        // Out of range, x86's conversion gives i32::MIN (Rust's would saturate).
        let g = if g.abs() < 2_147_483_648.0 {
            g as i32
        } else {
            i32::MIN
        };
        (g >> 12) as i16
    }

    /// The predicted energies, shifted on by this subframe's.
    fn update_energy(&mut self, correction: i32, erased: bool) {
        let q = &mut self.quant_energy;
        let mut avg = i32::from(q[3]);
        for i in (1..4).rev() {
            avg += i32::from(q[i - 1]);
            q[i] = q[i - 1];
        }
        q[0] = if erased {
            ((avg >> 2).max(-10240) - 4096) as i16
        } else {
            ((6165 * ((log2_q15(correction as u32) >> 2) - (13 << 13))) >> 13) as i16
        };
    }

    /// Decodes one frame into 80 samples.
    fn frame(&mut self, block: &[u8], out: &mut Vec<i16>) {
        let annex_d = block.len() == FRAME_6K4;
        if !annex_d {
            self.onset = 0;
            self.voice_decision = 2;
        }
        let erased = block.iter().all(|&b| b == 0);
        let mut bits = Bits::new(block);
        let mut get = |n: u32| bits.get(n).unwrap_or(0) as usize;
        let (ma, first, lo, hi) = (get(1), get(7), get(5), get(5));
        if erased {
            self.lsf_restore();
        } else {
            self.lsf_decode(ma, first, lo, hi);
            self.ma_prev = ma;
        }
        self.past_q.rotate_right(1);
        let mut lsp = [0i16; 10];
        for (p, &f) in lsp.iter_mut().zip(&self.lsfq) {
            *p = cos_q15((i32::from(f) * 20861) >> 15);
        }
        let mut mid = [0i16; 10];
        for i in 0..10 {
            mid[i] = ((i32::from(lsp[i]) + i32::from(self.lsp_prev[i])) >> 1) as i16;
        }
        let lp = [lsp_to_lpc(&mid), lsp_to_lpc(&lsp)];
        self.lsp_prev = lsp;

        let mut pitch_int = [0i32; 2];
        let mut bad_pitch = false;
        let mut is_periodic = false;
        for (i, lp) in lp.iter().enumerate() {
            let ac_bits = match (i, annex_d) {
                (0, _) => 8,
                (_, false) => 5,
                (_, true) => 4,
            };
            let ac = get(ac_bits) as i32;
            if i == 0 && !annex_d {
                // The parity bit of the lag's six high bits (odd parity).
                bad_pitch = ((ac >> 2).count_ones() & 1) as usize == get(1);
            }
            let (fc_bits, sign_bits, g2_bits) = if annex_d { (9, 2, 3) } else { (13, 4, 4) };
            let mut fc_index = get(fc_bits) as u32;
            let mut signs = get(sign_bits) as u32;
            let (g1, g2) = (get(3), get(g2_bits));

            let pitch3 = if erased || (i == 0 && bad_pitch) {
                3 * self.pitch_prev
            } else if i == 0 {
                let p = ac + 58;
                if p > 254 {
                    3 * p - 510
                } else {
                    p
                }
            } else {
                let min = (self.pitch_prev - 5).clamp(PITCH_MIN, PITCH_MAX - 9);
                if !annex_d {
                    3 * min + ac - 2
                } else if ac < 4 {
                    3 * (ac + min)
                } else if ac < 12 {
                    3 * min + ac + 6
                } else {
                    3 * (ac + min) - 18
                }
            };
            pitch_int[i] = ((pitch3 + 1) / 3).min(PITCH_MAX);

            if erased {
                self.rand = self.rand.wrapping_mul(31821).wrapping_add(13849);
                fc_index = u32::from(self.rand) & ((1 << fc_bits) - 1);
                self.rand = self.rand.wrapping_mul(31821).wrapping_add(13849);
                signs = u32::from(self.rand & 0xff);
            }
            let mut fc = [0i16; SUB];
            let pulse = |fc: &mut [i16; SUB], at: usize, signs: u32| {
                fc[at] = fc[at].wrapping_add(if signs & 1 != 0 { 8191 } else { -8192 });
            };
            if annex_d {
                pulse(
                    &mut fc,
                    usize::from(TRACK1_GRAY[(fc_index & 15) as usize]),
                    signs,
                );
                pulse(
                    &mut fc,
                    usize::from(TRACK2_GRAY[(fc_index >> 4) as usize & 31]),
                    signs >> 1,
                );
            } else {
                for k in 0..3 {
                    let at = k + usize::from(TRACKS_13[((fc_index >> (3 * k)) & 7) as usize]);
                    pulse(&mut fc, at, signs >> k);
                }
                pulse(
                    &mut fc,
                    usize::from(TRACK_4[(fc_index >> 9) as usize & 31]),
                    signs >> 3,
                );
            }
            // Harmonic enhancement of the fixed-codebook vector, in place as FFmpeg runs it.
            let pd = pitch_int[i] as usize;
            if pd < SUB {
                let g = i32::from(self.gain_pitch[0]).clamp(SHARP_MIN, SHARP_MAX);
                for k in 0..SUB - pd {
                    let v = i32::from(fc[pd + k]) * 16384 + i32::from(fc[k]) * g;
                    fc[pd + k] = clip16(v >> 14);
                }
            }

            self.gain_pitch.copy_within(0..5, 1);
            self.gain_code[1] = self.gain_code[0];
            let correction = if erased {
                self.gain_pitch[0] = ((29491 * i32::from(self.gain_pitch[0])) >> 15) as i16;
                self.gain_code[0] = ((2007 * i32::from(self.gain_code[0])) >> 11) as i16;
                0
            } else {
                let (pitch, corr) = if annex_d {
                    let (a, b) = (GAIN_1ST_6K4[g1], GAIN_2ND_6K4[g2]);
                    let corr = (i32::from(a[1]) + i32::from(b[1])).max(1024) >> 1;
                    (i32::from(a[0]) + i32::from(b[0]), corr)
                } else {
                    let (a, b) = (GAIN_1ST_8K[g1], GAIN_2ND_8K[g2]);
                    (
                        i32::from(a[0]) + i32::from(b[0]),
                        i32::from(a[1]) + i32::from(b[1]),
                    )
                };
                self.gain_pitch[0] = pitch as i16;
                self.gain_code[0] = self.code_gain(corr, &fc);
                corr
            };
            self.update_energy(correction, erased);

            // The adaptive codebook: the past excitation at the pitch lag, in place (a lag
            // shorter than the subframe repeats what this loop has just written).
            let at = EXC_PAST + i * SUB;
            let (back, frac) = ((pitch3 / 3) as usize, ((pitch3 % 3) << 1) as usize);
            for n in 0..SUB {
                self.exc[at + n] = interp_at(&self.exc, at - back + n, &INTERP_FILTER, 6, frac, 10);
            }
            let wp = if !self.was_periodic && erased {
                0
            } else {
                self.gain_pitch[0]
            };
            let wc = if self.was_periodic && erased {
                0
            } else {
                self.gain_code[0]
            };
            let cur: [i16; SUB] = self.exc[at..at + SUB].try_into().expect("a subframe");
            weighted_sum(&mut self.exc[at..], &cur, &fc, wp, wc, 1 << 13, 14, SUB);

            let mut synth = [0i16; SUB + 10];
            synth[..10].copy_from_slice(&self.syn_mem);
            if synthesis(&mut synth, 10, &lp[1..], &self.exc[at..], SUB, true) {
                // Overflow: the whole excitation scaled down, and synthesized again.
                for e in &mut self.exc {
                    *e >>= 2;
                }
            }
            if annex_d {
                self.onset = if (self.gain_code[0] >> 1) > self.gain_code[1] {
                    2
                } else {
                    (self.onset - 1).max(0)
                };
                self.voice_decision = self.voice(self.onset);
                let exc = self.dispersed(at, &fc);
                synthesis(&mut synth, 10, &lp[1..], &exc, SUB, false);
            } else {
                synthesis(&mut synth, 10, &lp[1..], &self.exc[at..], SUB, false);
            }
            self.syn_mem.copy_from_slice(&synth[SUB..]);

            let before: i32 = synth[10..].iter().map(|&s| i32::from(s).abs()).sum();
            is_periodic |= self.postfilter(lp, pitch_int[0], &mut synth);
            let after: i32 = synth[10..].iter().map(|&s| i32::from(s).abs()).sum();
            self.gain_coeff = agc(before, after, &mut synth[10..], self.gain_coeff);

            self.pitch_prev = if erased {
                (self.pitch_prev + 1).min(PITCH_MAX)
            } else {
                pitch_int[i]
            };

            synth[8..10].copy_from_slice(&self.hpf_z);
            for k in 0..SUB {
                let x = 10 + k;
                let mut t = ((i64::from(self.hpf_f[0]) * 15836) >> 13) as i32;
                t = t.wrapping_add(((i64::from(self.hpf_f[1]) * -7667) >> 13) as i32);
                let d = i32::from(synth[x]) - 2 * i32::from(synth[x - 1]) + i32::from(synth[x - 2]);
                t = t.wrapping_add(7699 * d);
                out.push(clip16(t.wrapping_add(0x800) >> 12));
                self.hpf_f = [t, self.hpf_f[0]];
            }
            self.hpf_z.copy_from_slice(&synth[SUB + 8..]);
        }
        self.was_periodic = is_periodic;
        self.exc.copy_within(2 * SUB.., 0);
    }

    /// Annex D's voicing decision for this subframe: 0 noise, 1 between, 2 voiced.
    fn voice(&self, onset: i32) -> i32 {
        let g = &self.gain_pitch;
        let mut d = if g[0] >= 14745 {
            2
        } else if g[0] <= 9830 {
            0
        } else {
            1
        };
        let low = g.iter().filter(|&&v| v < 9830).count();
        if low > 2 && onset == 0 {
            d = 0;
        }
        if onset == 0 && d > self.voice_decision + 1 {
            d -= 1;
        }
        if onset != 0 && d < 2 {
            d += 1;
        }
        d
    }

    /// Annex D's excitation with the fixed-codebook part's phase dispersed.
    fn dispersed(&self, at: usize, fc: &[i16; SUB]) -> [i16; SUB] {
        let filter = &PHASE_FILTER[self.voice_decision.clamp(0, 2) as usize];
        let mut spread = [0i16; SUB];
        for (i, &f) in fc.iter().enumerate().filter(|(_, &f)| f != 0) {
            let f = i32::from(f);
            for (k, s) in spread.iter_mut().enumerate() {
                let c = if k < i {
                    filter[SUB + k - i]
                } else {
                    filter[k - i]
                };
                *s = s.wrapping_add(((f * i32::from(c)) >> 15) as i16);
            }
        }
        let g = i32::from(self.gain_code[0]);
        let mut out = [0i16; SUB];
        for i in 0..SUB {
            let mut v = self.exc[at + i];
            v = v.wrapping_sub(((g * i32::from(fc[i]) + 0x2000) >> 14) as i16);
            v = v.wrapping_add(((g * i32::from(spread[i]) + 0x2000) >> 14) as i16);
            out[i] = v;
        }
        out
    }

    /// The postfilter over `synth[10..]` (which it overwrites, `synth[..10]` too): the
    /// long-term filter on the residual, the short-term filter and its tilt compensation.
    /// Returns whether the long-term filter found the subframe periodic.
    fn postfilter(&mut self, lp: &[i16; 11], pitch: i32, synth: &mut [i16; SUB + 10]) -> bool {
        const NUM_POW: [i32; 10] = [18022, 9912, 5451, 2998, 1649, 907, 499, 274, 151, 83];
        const DEN_POW: [i32; 10] = [22938, 16057, 11240, 7868, 5508, 3856, 2699, 1889, 1322, 925];
        let mut gn = [0i16; 33];
        let mut gd = [0i16; 11];
        for i in 0..10 {
            gn[i + 11] = ((i32::from(lp[i + 1]) * NUM_POW[i] + 0x4000) >> 15) as i16;
            gd[i + 1] = ((i32::from(lp[i + 1]) * DEN_POW[i] + 0x4000) >> 15) as i16;
        }
        synth[..10].copy_from_slice(&self.res_mem);
        for n in (0..SUB).rev() {
            let mut sum = 0x800i32;
            for i in 0..10 {
                sum = sum.wrapping_add(i32::from(gn[11 + i]) * i32::from(synth[10 + n - i - 1]));
            }
            self.residual[RES_PAST + n] = (i32::from(synth[10 + n]) + (sum >> 12)) as i16;
        }
        self.res_mem.copy_from_slice(&synth[SUB..]);

        let mut filtered = [0i16; SUB + 1];
        let periodic = long_term(pitch, &self.residual, &mut filtered);
        self.residual.copy_within(SUB.., 0);

        let tilt = tilt_coeff(&mut gn, &gd, &mut filtered[..SUB]);
        synthesis(&mut self.pos_mem, 10, &gd[1..], &filtered, SUB, false);
        self.pos_mem.copy_within(SUB.., 0);
        self.ht_prev = apply_tilt(&mut synth[10..], &self.pos_mem[10..], tilt, self.ht_prev);
        periodic
    }
}

/// The long-term postfilter: finds the best delay near `pitch` in 1/8 samples, and if
/// its prediction gain passes 3 dB, mixes the delayed residual into `out`; else copies
/// the residual. Returns whether it filtered.
fn long_term(pitch: i32, residual: &[i16; SUB + RES_PAST], out: &mut [i16; SUB + 1]) -> bool {
    const FRACS: usize = 7;
    let p = RES_PAST;
    let any = residual
        .iter()
        .fold(0u32, |a, &r| a | i32::from(r).unsigned_abs());
    let shift = if any == 0 { 3 } else { log2(any) - 11 };
    let mut sig = [0i16; SUB + RES_PAST];
    for (s, &r) in sig.iter_mut().zip(residual) {
        *s = if shift > 0 {
            r >> shift
        } else {
            (i32::from(r) << -shift) as i16
        };
    }
    let mut delayed = [[0i16; SUB + 1]; FRACS];
    let mut gain_num = 0i16;
    let (mut gain_den, mut sh_num, mut sh_den) = (0i16, 0i32, 0i32);
    let (mut best_int, mut best_frac, mut offset) = (pitch - 1, 0usize, 1usize);
    let mut ener = dot(&sig[p..], &sig[p..], SUB);
    if ener != 0 {
        let sh_ener = (log2(ener as u32) - 14).max(0);
        ener >>= sh_ener;
        let mut corr_num = 0;
        for i in pitch - 1..=pitch + 1 {
            let sum = dot(&sig[p..], &sig[p - i as usize..], SUB);
            if sum > corr_num {
                corr_num = sum;
                best_int = i;
            }
        }
        if corr_num != 0 {
            let at = p - best_int as usize;
            let corr_den = dot(&sig[at..], &sig[at..], SUB);
            for (k, d) in delayed.iter_mut().enumerate() {
                interpolate(d, &sig, at, &INTERP_SHORT, 8, 8 - k - 1, 2);
            }
            let mut most = corr_den;
            let mut den = [[0i32; 2]; FRACS];
            for (d, den) in delayed.iter().zip(&mut den) {
                let sum = dot(&d[1..], &d[1..], SUB - 1);
                den[0] = sum.wrapping_add(i32::from(d[0]) * i32::from(d[0]));
                den[1] = sum.wrapping_add(i32::from(d[SUB]) * i32::from(d[SUB]));
                most = most.max(den[0]).max(den[1]);
            }
            sh_den = i32::from((log2(most as u32) - 14) as i16);
            if sh_den >= 0 {
                sh_num = sh_den.max(sh_ener);
                gain_den = (corr_den >> sh_den) as i16;
                gain_num = (corr_num >> sh_num) as i16;
                let mut num_sq = i32::from(gain_num) * i32::from(gain_num);
                for k in 0..FRACS {
                    for i in 0..2 {
                        let sum = dot(&delayed[k][i..], &sig[p..], SUB);
                        let num_short = (sum >> sh_num).max(0) as i16;
                        let short_sq = i32::from(num_short) * i32::from(num_short);
                        let den_short = (den[k][i] >> sh_den) as i16;
                        let a = ((i64::from(short_sq) * i64::from(gain_den)) >> 15) as i32;
                        let b = ((i64::from(num_sq) * i64::from(den_short)) >> 15) as i32;
                        if a > b {
                            gain_num = num_short;
                            gain_den = den_short;
                            num_sq = short_sq;
                            offset = i;
                            best_frac = k + 1;
                        }
                    }
                }
                let l0 = i64::from(num_sq) << ((sh_num << 1) + 1);
                let l1 = (i64::from(gain_den) * i64::from(ener)) << (sh_den + sh_ener);
                if l0 < l1 {
                    gain_num = 0;
                }
            }
        }
    }
    if gain_num == 0 {
        out[..SUB].copy_from_slice(&residual[p..]);
        return false;
    }
    // The delayed signal: the short filter's, or the long filter's where that correlates
    // better; back at the residual's scale.
    let mut chosen: Option<[i16; SUB]> = None;
    if best_frac != 0 {
        let at = p - best_int as usize + offset;
        interpolate(&mut out[..], &sig, at, &INTERP_LONG, 8, 8 - best_frac, 8);
        let sum = dot(&out[..], &sig[p..], SUB);
        let (long_num, sh_long_num) = if sum < 0 {
            (0i16, 0i32)
        } else {
            let t = (log2(sum as u32) - 14).max(0);
            ((sum >> t) as i16, t)
        };
        let sum = dot(&out[..], &out[..], SUB);
        let t = (log2(sum as u32) - 14).max(0);
        let (long_den, sh_long_den) = ((sum >> t) as i16, t);
        let mut l0 = i32::from(gain_num) * i32::from(gain_num);
        l0 = ((i64::from(l0) * i64::from(long_den)) >> 15) as i32;
        let mut l1 = i32::from(long_num) * i32::from(long_num);
        l1 = ((i64::from(l1) * i64::from(gain_den)) >> 15) as i32;
        let t = (sh_long_num - sh_num) * 2 - (sh_long_den - sh_den);
        if t > 0 {
            l0 = l0.wrapping_shr(t as u32);
        } else {
            l1 >>= (-t).min(31);
        }
        let mut sel: [i16; SUB] = if l1 > l0 {
            gain_num = long_num;
            gain_den = long_den;
            sh_num = sh_long_num;
            sh_den = sh_long_den;
            out[..SUB].try_into().expect("a subframe")
        } else {
            delayed[best_frac - 1][offset..offset + SUB]
                .try_into()
                .expect("a subframe")
        };
        for s in &mut sel {
            *s = if shift > 0 {
                (i32::from(*s) << shift) as i16
            } else {
                *s >> -shift
            };
        }
        chosen = Some(sel);
    }
    let sel: [i16; SUB] = chosen.unwrap_or_else(|| {
        let at = p - (best_int as usize + 1 - offset);
        residual[at..at + SUB].try_into().expect("a subframe")
    });
    let l0 = (i64::from(gain_num) << sh_num) >> 1;
    let l1 = i64::from(gain_den) << sh_den;
    let a = (l1 << 15).checked_div(l1 + l0).unwrap_or(0).max(21845) as i32;
    let b = 32767 - a + 1;
    let cur: [i16; SUB] = residual[p..].try_into().expect("a subframe");
    weighted_sum(
        &mut out[..],
        &cur,
        &sel,
        a as i16,
        b as i16,
        1 << 14,
        15,
        SUB,
    );
    true
}

/// The short-term postfilter's tilt: from the impulse response of A(z/γn)/A(z/γd) (made
/// in `gn[10..]`), its first reflection coefficient; `speech` is scaled by the response's
/// gain on the way.
fn tilt_coeff(gn: &mut [i16; 33], gd: &[i16; 11], speech: &mut [i16]) -> i16 {
    gn[10] = 4096;
    let input: [i16; 22] = gn[11..33].try_into().expect("22 taps");
    synthesis(&mut gn[..], 11, &gd[1..], &input, 22, false);
    let mut rh0 = dot(&gn[10..], &gn[10..], 20);
    let mut rh1 = dot(&gn[10..], &gn[11..], 20);
    let t = log2(rh0 as u32) - 14;
    if t > 0 {
        rh0 >>= t;
        rh1 >>= t;
    }
    if rh1.abs() > rh0 || rh0 == 0 {
        return 0;
    }
    let gain: i32 = gn[10..30].iter().map(|&g| i32::from(g).abs()).sum::<i32>() >> 2;
    if gain > 0x400 {
        let inv = 0x200_0000 / gain;
        for s in speech.iter_mut() {
            *s = ((i32::from(*s) * inv + 0x4000) >> 15) as i16;
        }
    }
    (-(rh1 * (1 << 15)) / rh0) as i16
}

/// The tilt compensation filter from `res` into `out`; returns `res`'s last sample, the
/// next subframe's `prev`.
fn apply_tilt(out: &mut [i16], res: &[i16], refl: i16, prev: i16) -> i16 {
    let refl = i32::from(refl);
    let (mut gt, fact, sh) = if refl > 0 {
        ((refl * 6554 + 0x4000) >> 15, 0x2000, 14)
    } else {
        ((refl * 29491 + 0x4000) >> 15, 0x400, 11)
    };
    let ga = (fact << 16) / i32::from(clip16(32768 - gt.abs()));
    gt >>= 1;
    let filt = |x: i16, before: i16| {
        let t = gt
            .wrapping_mul(i32::from(before))
            .wrapping_mul(2)
            .wrapping_add(0x4000);
        let t = i32::from(x).wrapping_add(t >> 15);
        (t.wrapping_mul(ga).wrapping_add(fact) >> sh) as i16
    };
    for i in (1..SUB).rev() {
        out[i] = filt(res[i], res[i - 1]);
    }
    out[0] = filt(res[0], prev);
    res[SUB - 1]
}

/// Adaptive gain control: scales `speech` (postfiltered) back toward the energy it had
/// before, smoothly from `prev`; returns the gain reached.
fn agc(before: i32, after: i32, speech: &mut [i16], prev: i16) -> i16 {
    fn sal(v: u32, by: i32) -> u32 {
        if by < 0 {
            v.wrapping_shr(by.unsigned_abs())
        } else {
            v.wrapping_shl(by as u32)
        }
    }
    if after == 0 && before != 0 {
        return 0;
    }
    let gain: u32 = if before != 0 {
        let exp_before = 14 - log2(before as u32);
        let b = sal(before as u32, exp_before) as i32;
        let exp_after = 14 - log2(after as u32);
        let a = sal(after as u32, exp_after) as i32;
        let g = if b < a {
            sal(((b << 15) / a) as u32, exp_after - exp_before - 1)
        } else {
            sal(
                (((b - a) << 14) / a + 0x4000) as u32,
                exp_after - exp_before,
            )
        };
        (g.min(32767) * (32768 - 32358) + 0x4000) >> 15
    } else {
        0
    };
    let mut g = prev;
    for s in speech.iter_mut() {
        g = ((32358 * i32::from(g) + 0x4000) >> 15) as i16;
        g = clip16(gain as i32 + i32::from(g));
        *s = clip16((i32::from(*s) * i32::from(g) + 0x2000) >> 14);
    }
    g
}

impl BlockDecode for G729 {
    const PARTIAL: bool = false;
    type Sample = i16;

    fn block(&self) -> usize {
        if self.annex_d {
            FRAME_6K4
        } else {
            FRAME_8K
        }
    }

    fn samples_per_block(&self) -> usize {
        2 * SUB
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<i16>) {
        self.frame(block, out);
    }
}
