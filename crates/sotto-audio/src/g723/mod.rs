//! G.723.1 (MP-MLQ at 6.3 kbit/s, ACELP at 5.3 kbit/s): the long-play mode of Olympus's
//! and Philips's DSS dictation recorders, early VoIP and video-conferencing calls (WAV
//! format 0x0042, 0x0111 or 0xA100; raw `.tco`/`.rco` files). A frame is 30 ms of 8 kHz
//! speech in 24, 20, 4 (comfort-noise parameters) or 1 byte (no data), its size in its
//! first byte's low two bits: LSPs, four subframes of adaptive and fixed codebooks, the
//! pitch postfilter, synthesis, then the formant postfilter and its gain control.
//!
//! The decoder follows FFmpeg's (`g723_1dec.c`, `g723_1.c`), whose integer steps are the
//! reference's, with its postfilter on (its default), so its samples are FFmpeg's and
//! faster-whisper's. Frames that do not parse are concealed from the last good ones, three
//! in a row then muted; comfort noise fills silence frames. Decoded samples go to
//! symphonia as a 16-bit PCM WAV file ([`G7231Wav`]).

mod tables;

use std::io::Read;

use tables::*;

/// WAV's format tags for G.723.1.
pub(crate) const WAV_TAGS: [u16; 3] = [0x0042, 0x0111, 0xA100];

const SUBFRAMES: usize = 4;
const SUB: usize = 60;
const FRAME: usize = 4 * SUB;
const LPC: usize = 10;
const PITCH_MIN: i32 = 18;
const PITCH_MAX: usize = PITCH_MIN as usize + 127;
const GAIN_LEVELS: i32 = 24;
const CNG_SEED: i32 = 12345;
/// Bytes of a frame, by its first byte's low two bits.
pub(crate) const FRAME_SIZE: [usize; 4] = [24, 20, 4, 1];
const PULSES: [i32; 4] = [6, 5, 6, 5];
const MAX_POS: [i32; 4] = [593_775, 142_506, 593_775, 142_506];
const PPF_GAIN_WEIGHT: [i32; 2] = [0x1800, 0x2000];
const POSTFILTER: [[i32; LPC]; 2] = [
    [21299, 13844, 8999, 5849, 3802, 2471, 1606, 1044, 679, 441],
    [
        24576, 18432, 13824, 10368, 7776, 5832, 4374, 3281, 2460, 1845,
    ],
];
const CNG_ACB_LAG: [i32; 4] = [1, 0, 1, 3];
const CNG_FILT0: i64 = 273;
const CNG_BSEG: [i32; 3] = [2048, 18432, 231_233];

fn clip16(v: i32) -> i16 {
    v.clamp(i32::from(i16::MIN), i32::from(i16::MAX)) as i16
}

fn clip32(v: i64) -> i32 {
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

fn sat_add(a: i32, b: i32) -> i32 {
    clip32(i64::from(a) + i64::from(b))
}

fn sat_dadd(a: i32, b: i32) -> i32 {
    sat_add(a, sat_add(b, b))
}

/// ⌊log₂ v⌋, 0 for 0.
fn log2(v: u32) -> i32 {
    31 - (v | 1).leading_zeros() as i32
}

fn normalize_bits(num: i32, width: i32) -> i32 {
    width - log2(num as u32) - 1
}

/// Σ a·b as FFmpeg's 64-bit sum cut to 32 bits, then doubled with saturation.
fn dot(a: &[i16], b: &[i16], n: usize) -> i32 {
    let s = raw_dot(a, b, n);
    sat_add(s, s)
}

/// Σ a·b, cut to 32 bits.
fn raw_dot(a: &[i16], b: &[i16], n: usize) -> i32 {
    a[..n]
        .iter()
        .zip(&b[..n])
        .map(|(&x, &y)| i64::from(x) * i64::from(y))
        .sum::<i64>() as i32
}

/// `dst = vector << bits >> 3`, `bits` making the largest 14 bits; returns `bits - 3`.
fn scale_vector(dst: &mut [i16], vector: &[i16]) -> i32 {
    let max = vector
        .iter()
        .fold(0u32, |m, &v| m | i32::from(v).unsigned_abs());
    let bits = (14 - log2(max & 0xffff)).max(0);
    for (d, &v) in dst.iter_mut().zip(vector) {
        *d = ((i32::from(v) << bits) >> 3) as i16;
    }
    bits - 3
}

fn square_root(val: i32) -> i32 {
    (((val as u32).wrapping_shl(1).isqrt() >> 1) & !1) as i32
}

/// `(a · wa + b · wb + round) >> shift`, clipped, for each of `n` values.
fn weighted_sum(out: &mut [i16], a: &[i16], b: &[i16], wa: i32, wb: i32, n: usize) {
    for i in 0..n {
        let v = (i32::from(a[i]) * wa)
            .wrapping_add(i32::from(b[i]) * wb)
            .wrapping_add(1 << 13);
        out[i] = clip16(v >> 14);
    }
}

/// The LP synthesis filter over `buf[at..at + n]` in place (each sample's excitation is
/// read before its output replaces it), `buf[at - 10..at]` holding the past outputs.
fn synthesis(buf: &mut [i16], at: usize, coeffs: &[i16], n: usize) {
    for k in at..at + n {
        let mut sum = 1i32 << 12;
        for (i, &c) in coeffs[..LPC].iter().enumerate() {
            sum = sum.wrapping_sub(i32::from(c) * i32::from(buf[k - i - 1]));
        }
        buf[k] = clip16(((sum >> 12) + i32::from(buf[k])) >> 1);
    }
}

/// LSPs (Q15 cosine-domain indices) to LPC coefficients, in place.
fn lsp2lpc(lpc: &mut [i16]) {
    for v in lpc[..LPC].iter_mut() {
        let index = ((i32::from(*v) >> 7) & 0x1ff) as usize;
        let offset = i32::from(*v) & 0x7f;
        let t1 = COS[index] << 16;
        let t2 = (COS[index + 1] - COS[index]) * (((offset << 8) + 0x80) << 1);
        *v = (-(sat_dadd(1 << 15, t1.wrapping_add(t2)) >> 16)) as i16;
    }
    let l = |i: usize| i32::from(lpc[i]);
    let mull2 = |a: i32, b: i32| ((a >> 16) * b * 2).wrapping_add(((a & 0xffff) * b) >> 15);
    let mut f1 = [0i32; 6];
    let mut f2 = [0i32; 6];
    f1[0] = 1 << 28;
    f1[1] = (l(0) + l(2)) << 14;
    f1[2] = (l(0) * l(2)).wrapping_add(2 << 28);
    f2[0] = 1 << 28;
    f2[1] = (l(1) + l(3)) << 14;
    f2[2] = (l(1) * l(3)).wrapping_add(2 << 28);
    for i in 2..5 {
        let (a, b) = (l(2 * i), l(2 * i + 1));
        f1[i + 1] = clip32(i64::from(f1[i - 1]) + i64::from(mull2(f1[i], a)));
        f2[i + 1] = clip32(i64::from(f2[i - 1]) + i64::from(mull2(f2[i], b)));
        for j in (2..=i).rev() {
            f1[j] = mull2(f1[j - 1], a)
                .wrapping_add(f1[j] >> 1)
                .wrapping_add(f1[j - 2] >> 1);
            f2[j] = mull2(f2[j - 1], b)
                .wrapping_add(f2[j] >> 1)
                .wrapping_add(f2[j - 2] >> 1);
        }
        f1[0] >>= 1;
        f2[0] >>= 1;
        f1[1] = (((a << 16) >> i) + f1[1]) >> 1;
        f2[1] = (((b << 16) >> i) + f2[1]) >> 1;
    }
    for i in 0..5 {
        let ff1 = i64::from(f1[i + 1].wrapping_add(f1[i]));
        let ff2 = i64::from(f2[i + 1].wrapping_sub(f2[i]));
        lpc[i] = (clip32((ff1 + ff2) * 8 + (1 << 15)) >> 16) as i16;
        lpc[LPC - i - 1] = (clip32((ff1 - ff2) * 8 + (1 << 15)) >> 16) as i16;
    }
}

/// The four subframes' LPC coefficients, from the LSPs interpolated between frames.
fn lsp_interpolate(cur: &[i16; LPC], prev: &[i16; LPC]) -> [i16; SUBFRAMES * LPC] {
    let mut lpc = [0i16; SUBFRAMES * LPC];
    for (k, (wc, wp)) in [(4096, 12288), (8192, 8192), (12288, 4096)]
        .into_iter()
        .enumerate()
    {
        weighted_sum(&mut lpc[k * LPC..], cur, prev, wc, wp, LPC);
    }
    lpc[3 * LPC..].copy_from_slice(cur);
    for s in lpc.chunks_exact_mut(LPC) {
        lsp2lpc(s);
    }
    lpc
}

/// The frame's LSPs from its indices and the last frame's (a bad frame's from index 0,
/// predicted harder).
fn inverse_quant(prev: &[i16; LPC], index: &mut [u8; 3], bad: bool) -> [i16; LPC] {
    let (min_dist, pred) = if bad {
        *index = [0; 3];
        (0x200, 23552)
    } else {
        (0x100, 12288)
    };
    let mut cur = [0i16; LPC];
    cur[..3].copy_from_slice(&LSP_BAND0[usize::from(index[0])]);
    cur[3..6].copy_from_slice(&LSP_BAND1[usize::from(index[1])]);
    cur[6..].copy_from_slice(&LSP_BAND2[usize::from(index[2])]);
    for i in 0..LPC {
        let temp = ((i32::from(prev[i]) - i32::from(DC_LSP[i])) * pred + (1 << 14)) >> 15;
        cur[i] = (i32::from(cur[i]) + i32::from(DC_LSP[i]) + temp) as i16;
    }
    let mut stable = false;
    for _ in 0..LPC {
        cur[0] = cur[0].max(0x180);
        cur[LPC - 1] = cur[LPC - 1].min(0x7e00);
        for j in 1..LPC {
            let temp = min_dist + i32::from(cur[j - 1]) - i32::from(cur[j]);
            if temp > 0 {
                let temp = temp >> 1;
                cur[j - 1] = (i32::from(cur[j - 1]) - temp) as i16;
                cur[j] = (i32::from(cur[j]) + temp) as i16;
            }
        }
        stable = (1..LPC).all(|j| i32::from(cur[j - 1]) + min_dist - i32::from(cur[j]) - 4 <= 0);
        if stable {
            break;
        }
    }
    if stable {
        cur
    } else {
        *prev
    }
}

/// The pitch-lag residual a subframe's adaptive codebook filters: 64 samples of the past
/// excitation at `lag`, repeated where the lag is shorter.
fn residual(prev: &[i16], lag: i32) -> [i16; SUB + 4] {
    let lag = lag as usize;
    let offset = PITCH_MAX - 2 - lag;
    let mut r = [0i16; SUB + 4];
    r[0] = prev[offset];
    r[1] = prev[offset + 1];
    for (i, v) in r.iter_mut().enumerate().skip(2) {
        *v = prev[offset + 2 + (i - 2) % lag];
    }
    r
}

#[derive(Clone, Copy, Default)]
struct Subframe {
    ad_cb_lag: i32,
    ad_cb_gain: i32,
    dirac_train: i32,
    pulse_sign: i32,
    grid_index: i32,
    amp_index: i32,
    pulse_pos: i32,
}

/// The adaptive codebook vector of a subframe.
fn acb_excitation(prev: &[i16], pitch_lag: i32, sub: &Subframe, rate_5300: bool) -> [i16; SUB] {
    let r = residual(prev, pitch_lag + sub.ad_cb_lag - 1);
    let row = if !rate_5300 && pitch_lag < SUB as i32 - 2 {
        &ACB_GAIN85[sub.ad_cb_gain as usize]
    } else {
        &ACB_GAIN170[sub.ad_cb_gain as usize]
    };
    let mut v = [0i16; SUB];
    for (i, o) in v.iter_mut().enumerate() {
        let sum = raw_dot(&r[i..], row, 5);
        *o = (sat_dadd(1 << 15, sat_add(sum, sum)) >> 16) as i16;
    }
    v
}

#[derive(Clone, Copy, PartialEq)]
enum FrameType {
    Active,
    Sid,
    Untransmitted,
}

/// The pitch postfilter's lag and gains for one subframe.
#[derive(Clone, Copy)]
struct Ppf {
    index: i32,
    opt_gain: i32,
    sc_gain: i32,
}

/// LSB-first bits of a frame, zeros past its end.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bits<'_> {
    fn get(&mut self, n: u32) -> i32 {
        let mut v = 0u32;
        for i in 0..n {
            let at = self.pos + i as usize;
            let bit = self.data.get(at >> 3).map_or(0, |b| (b >> (at & 7)) & 1);
            v |= u32::from(bit) << i;
        }
        self.pos += n as usize;
        v as i32
    }
}

/// One channel's decoder state.
pub(crate) struct G7231 {
    sub: [Subframe; SUBFRAMES],
    cur_type: FrameType,
    past_type: FrameType,
    rate_5300: bool,
    lsp_index: [u8; 3],
    pitch_lag: [i32; 2],
    erased: i32,
    prev_lsp: [i16; LPC],
    sid_lsp: [i16; LPC],
    prev_excitation: [i16; PITCH_MAX],
    excitation: [i16; PITCH_MAX + FRAME + 4],
    synth_mem: [i16; LPC],
    fir_mem: [i16; LPC],
    iir_mem: [i32; LPC],
    random_seed: i32,
    cng_seed: i32,
    interp_index: i32,
    interp_gain: i32,
    sid_gain: i32,
    cur_gain: i32,
    reflection: i32,
    pf_gain: i32,
    /// Excitation, then speech: 10 past outputs, the frame, and room the pitch search and
    /// the comfort noise use past it.
    audio: [i16; FRAME + LPC + PITCH_MAX + 4],
}

impl G7231 {
    pub(crate) fn new() -> Self {
        Self {
            sub: [Subframe::default(); SUBFRAMES],
            cur_type: FrameType::Active,
            past_type: FrameType::Sid,
            rate_5300: false,
            lsp_index: [0; 3],
            pitch_lag: [0; 2],
            erased: 0,
            prev_lsp: DC_LSP,
            sid_lsp: DC_LSP,
            prev_excitation: [0; PITCH_MAX],
            excitation: [0; PITCH_MAX + FRAME + 4],
            synth_mem: [0; LPC],
            fir_mem: [0; LPC],
            iir_mem: [0; LPC],
            random_seed: 0,
            cng_seed: CNG_SEED,
            interp_index: 0,
            interp_gain: 0,
            sid_gain: 0,
            cur_gain: 0,
            reflection: 0,
            pf_gain: 1 << 12,
            audio: [0; FRAME + LPC + PITCH_MAX + 4],
        }
    }

    /// Reads a frame's parameters; `false` where they are invalid (a forbidden lag or
    /// gain), with what was read before kept, as FFmpeg keeps it.
    fn unpack(&mut self, frame: &[u8]) -> bool {
        let mut b = Bits {
            data: frame,
            pos: 0,
        };
        let info = b.get(2);
        if info == 3 {
            self.cur_type = FrameType::Untransmitted;
            return true;
        }
        self.lsp_index[2] = b.get(8) as u8;
        self.lsp_index[1] = b.get(8) as u8;
        self.lsp_index[0] = b.get(8) as u8;
        if info == 2 {
            self.cur_type = FrameType::Sid;
            self.sub[0].amp_index = b.get(6);
            return true;
        }
        self.rate_5300 = info != 0;
        self.cur_type = FrameType::Active;
        for k in 0..2 {
            self.pitch_lag[k] = b.get(7);
            if self.pitch_lag[k] > 123 {
                return false;
            }
            self.pitch_lag[k] += PITCH_MIN;
            self.sub[2 * k + 1].ad_cb_lag = b.get(2);
        }
        self.sub[0].ad_cb_lag = 1;
        self.sub[2].ad_cb_lag = 1;
        for i in 0..SUBFRAMES {
            let mut temp = b.get(12);
            let mut len = 170;
            self.sub[i].dirac_train = 0;
            if !self.rate_5300 && self.pitch_lag[i >> 1] < SUB as i32 - 2 {
                self.sub[i].dirac_train = temp >> 11;
                temp &= 0x7ff;
                len = 85;
            }
            self.sub[i].ad_cb_gain = temp / GAIN_LEVELS;
            if self.sub[i].ad_cb_gain >= len {
                return false;
            }
            self.sub[i].amp_index = temp - self.sub[i].ad_cb_gain * GAIN_LEVELS;
        }
        for s in &mut self.sub {
            s.grid_index = b.get(1);
        }
        if !self.rate_5300 {
            b.get(1);
            let mut temp = b.get(13);
            let p0 = temp / 810;
            temp -= p0 * 810;
            let p1 = temp / 90;
            temp -= p1 * 90;
            let p2 = temp / 9;
            let p3 = temp - p2 * 9;
            for (s, (p, bits)) in self
                .sub
                .iter_mut()
                .zip([(p0, 16), (p1, 14), (p2, 16), (p3, 14)])
            {
                s.pulse_pos = (p << bits) + b.get(bits);
            }
            for (s, bits) in self.sub.iter_mut().zip([6, 5, 6, 5]) {
                s.pulse_sign = b.get(bits);
            }
        } else {
            for s in &mut self.sub {
                s.pulse_pos = b.get(12);
            }
            for s in &mut self.sub {
                s.pulse_sign = b.get(4);
            }
        }
        true
    }

    /// Decodes one frame (as long as its first byte says) into 240 samples; a frame
    /// shorter than that gives none.
    pub(crate) fn frame(&mut self, frame: &[u8], out: &mut Vec<i16>) {
        let Some(&first) = frame.first() else { return };
        if frame.len() < FRAME_SIZE[usize::from(first & 3)] {
            return;
        }
        let mut bad = false;
        if !self.unpack(frame) {
            bad = true;
            self.cur_type = if self.past_type == FrameType::Active {
                FrameType::Active
            } else {
                FrameType::Untransmitted
            };
        }
        let lpc;
        if self.cur_type == FrameType::Active {
            if !bad {
                self.erased = 0;
            } else if self.erased != 3 {
                self.erased += 1;
            }
            let cur_lsp = inverse_quant(&self.prev_lsp, &mut self.lsp_index, bad);
            lpc = lsp_interpolate(&cur_lsp, &self.prev_lsp);
            self.prev_lsp = cur_lsp;
            self.excitation[..PITCH_MAX].copy_from_slice(&self.prev_excitation);
            if self.erased == 0 {
                self.active_excitation();
            } else {
                self.interp_gain = (self.interp_gain * 3 + 2) >> 2;
                if self.erased == 3 {
                    // Muted: the excitation's memory cleared (the speech buffer, which
                    // FFmpeg leaves as it was, is synthesized again).
                    self.excitation[..PITCH_MAX + FRAME].fill(0);
                    self.prev_excitation.fill(0);
                } else {
                    self.residual_interp();
                    self.prev_excitation
                        .copy_from_slice(&self.audio[LPC + FRAME - PITCH_MAX..LPC + FRAME]);
                }
            }
            self.cng_seed = CNG_SEED;
        } else {
            if self.cur_type == FrameType::Sid {
                self.sid_gain = sid_gain_to_lsp_index(self.sub[0].amp_index);
                self.sid_lsp = inverse_quant(&self.prev_lsp, &mut self.lsp_index, false);
            } else if self.past_type == FrameType::Active {
                self.sid_gain = self.estimate_sid_gain();
            }
            self.cur_gain = if self.past_type == FrameType::Active {
                self.sid_gain
            } else {
                (self.cur_gain * 7 + self.sid_gain) >> 3
            };
            self.generate_noise();
            lpc = lsp_interpolate(&self.sid_lsp, &self.prev_lsp);
            self.prev_lsp = self.sid_lsp;
        }
        self.past_type = self.cur_type;
        self.audio[..LPC].copy_from_slice(&self.synth_mem);
        for j in 0..SUBFRAMES {
            synthesis(&mut self.audio, LPC + j * SUB, &lpc[j * LPC..], SUB);
        }
        self.synth_mem
            .copy_from_slice(&self.audio[FRAME..FRAME + LPC]);
        let start = out.len();
        out.resize(start + FRAME, 0);
        self.formant_postfilter(&lpc, &mut out[start..]);
    }

    /// An active frame's excitation (fixed plus adaptive codebook), then the pitch
    /// postfilter's into `audio[10..250]`.
    fn active_excitation(&mut self) {
        self.interp_gain = i32::from(
            FIXED_CB_GAIN[((self.sub[2].amp_index + self.sub[3].amp_index) >> 1) as usize],
        );
        for i in 0..SUBFRAMES {
            let lag = self.pitch_lag[i >> 1];
            let fcb = fcb_excitation(&self.sub[i], self.rate_5300, lag, i);
            let acb = acb_excitation(
                &self.excitation[SUB * i..],
                lag,
                &self.sub[i],
                self.rate_5300,
            );
            let at = PITCH_MAX + SUB * i;
            for j in 0..SUB {
                let v = clip16(i32::from(fcb[j]) * 2);
                self.excitation[at + j] = clip16(i32::from(v) + i32::from(acb[j]));
            }
        }
        let (index, sid_gain, cur_gain) = self.interp_index_of(self.pitch_lag[1]);
        (self.interp_index, self.sid_gain, self.cur_gain) = (index, sid_gain, cur_gain);
        let ppf: [Ppf; SUBFRAMES] =
            std::array::from_fn(|j| self.ppf_coeff(PITCH_MAX + SUB * j, self.pitch_lag[j >> 1]));
        for (j, p) in ppf.iter().enumerate() {
            let at = PITCH_MAX + SUB * j;
            let lagged = (at as i32 + p.index) as usize;
            let (cur, lag): ([i16; SUB], [i16; SUB]) = (
                self.excitation[at..at + SUB]
                    .try_into()
                    .expect("a subframe"),
                self.excitation[lagged..lagged + SUB]
                    .try_into()
                    .expect("a subframe"),
            );
            for k in 0..SUB {
                let v = (i32::from(cur[k]) * p.sc_gain)
                    .wrapping_add(i32::from(lag[k]) * p.opt_gain)
                    .wrapping_add(1 << 14);
                self.audio[LPC + SUB * j + k] = clip16(v >> 15);
            }
        }
        self.prev_excitation
            .copy_from_slice(&self.excitation[FRAME..FRAME + PITCH_MAX]);
    }

    /// The lag of the best match in `audio` (from `buf` on, `len` long) near `pitch_lag`,
    /// forward (`dir` 1) or backward (−1), and its correlation if above `best`.
    fn autocorr_max(
        &self,
        buf: usize,
        offset: usize,
        best: &mut i32,
        pitch_lag: i32,
        len: usize,
        dir: i32,
    ) -> i32 {
        let pitch_lag = pitch_lag.min(PITCH_MAX as i32 - 3);
        let limit = if dir > 0 {
            ((FRAME + PITCH_MAX) as i32 - offset as i32 - len as i32).min(pitch_lag + 3)
        } else {
            pitch_lag + 3
        };
        let mut lag = 0;
        for i in pitch_lag - 3..=limit {
            let other = (buf as i32 + dir * i) as usize;
            let ccr = dot(&self.audio[buf..], &self.audio[other..], len);
            if ccr > *best {
                *best = ccr;
                lag = i;
            }
        }
        lag
    }

    /// The excitation scaled into `audio`, and from it the lag a lost frame repeats (0
    /// where the last frame was not periodic enough), its energy, and the scale.
    fn interp_index_of(&mut self, pitch_lag: i32) -> (i32, i32, i32) {
        let offset = PITCH_MAX + 2 * SUB;
        let scale = scale_vector(
            &mut self.audio[LPC..LPC + FRAME + PITCH_MAX],
            &self.excitation[..FRAME + PITCH_MAX],
        );
        let buf = LPC + offset;
        let mut ccr = 0;
        let index = self.autocorr_max(buf, offset, &mut ccr, pitch_lag, 2 * SUB, -1);
        let ccr = sat_add(ccr, 1 << 15) >> 16;
        let tgt = dot(&self.audio[buf..], &self.audio[buf..], 2 * SUB);
        let exc_eng = sat_add(tgt, 1 << 15) >> 16;
        if ccr <= 0 {
            return (0, exc_eng, scale);
        }
        let back = buf - index as usize;
        let best = dot(&self.audio[back..], &self.audio[back..], 2 * SUB);
        let best = sat_add(best, 1 << 15) >> 16;
        let temp = best.wrapping_mul(exc_eng) >> 3;
        let index = if temp < ccr.wrapping_mul(ccr) {
            index
        } else {
            0
        };
        (index, exc_eng, scale)
    }

    /// The pitch postfilter's parameters for the subframe at `offset` in the excitation.
    fn ppf_coeff(&self, offset: usize, pitch_lag: i32) -> Ppf {
        let mut energy = [0i32; 5];
        let buf = LPC + offset;
        let fwd = self.autocorr_max(buf, offset, &mut energy[1], pitch_lag, SUB, 1);
        let back = self.autocorr_max(buf, offset, &mut energy[3], pitch_lag, SUB, -1);
        let none = Ppf {
            index: 0,
            opt_gain: 0,
            sc_gain: 0x7fff,
        };
        if back == 0 && fwd == 0 {
            return none;
        }
        let a = &self.audio;
        energy[0] = dot(&a[buf..], &a[buf..], SUB);
        if fwd != 0 {
            let at = buf + fwd as usize;
            energy[2] = dot(&a[at..], &a[at..], SUB);
        }
        if back != 0 {
            let at = buf - back as usize;
            energy[4] = dot(&a[at..], &a[at..], SUB);
        }
        let most = energy.iter().fold(0, |m, &e| e.max(m));
        let scale = normalize_bits(most, 31) as i16;
        for e in &mut energy {
            *e = e.wrapping_shl(scale as u32) >> 16;
        }
        let rate = usize::from(self.rate_5300);
        if fwd != 0 && back == 0 {
            ppf_gains(fwd, rate, energy[0], energy[1], energy[2])
        } else if fwd == 0 {
            ppf_gains(-back, rate, energy[0], energy[3], energy[4])
        } else {
            let t1 = energy[4].wrapping_mul((energy[1].wrapping_mul(energy[1]) + (1 << 14)) >> 15);
            let t2 = energy[2].wrapping_mul((energy[3].wrapping_mul(energy[3]) + (1 << 14)) >> 15);
            if t1 >= t2 {
                ppf_gains(fwd, rate, energy[0], energy[1], energy[2])
            } else {
                ppf_gains(-back, rate, energy[0], energy[3], energy[4])
            }
        }
    }

    /// A lost frame's excitation into `audio[10..]`: the last period repeated, attenuated,
    /// or (not periodic) noise at the interpolation gain.
    fn residual_interp(&mut self) {
        let lag = self.interp_index as usize;
        let out = &mut self.audio[LPC..LPC + FRAME];
        if lag != 0 {
            let last = &self.excitation[PITCH_MAX - lag..PITCH_MAX];
            for (o, &e) in out[..lag].iter_mut().zip(last) {
                *o = ((i32::from(e) * 3) >> 2) as i16;
            }
            for i in lag..FRAME {
                out[i] = out[i - lag];
            }
        } else {
            for o in out.iter_mut() {
                self.random_seed = i32::from((self.random_seed.wrapping_mul(521) + 259) as i16);
                *o = ((self.interp_gain * self.random_seed) >> 15) as i16;
            }
            self.excitation[..FRAME + PITCH_MAX].fill(0);
        }
    }

    /// The comfort noise's gain index from the last active frame's energy.
    fn estimate_sid_gain(&self) -> i32 {
        let shift = 16 - self.cur_gain * 2;
        let sid = self.sid_gain;
        let t = if shift > 0 {
            if sid == 0 {
                0
            } else if shift >= 31 || ((sid as u32) << shift) as i32 >> shift != sid {
                if sid < 0 {
                    i32::MIN
                } else {
                    i32::MAX
                }
            } else {
                sid << shift
            }
        } else if shift < -31 {
            if sid < 0 {
                -1
            } else {
                0
            }
        } else {
            sid >> -shift
        };
        let x = clip32((i64::from(t) * CNG_FILT0) >> 16);
        if x >= CNG_BSEG[2] {
            return 0x3f;
        }
        let (shift, seg) = if x >= CNG_BSEG[1] {
            (4, 3)
        } else {
            (3, i32::from(x >= CNG_BSEG[0]))
        };
        let seg2 = seg.min(3);
        let mut val = 1 << shift;
        let mut val_add = val >> 1;
        for _ in 0..shift {
            let t = seg * 32 + (val << seg2);
            if x >= t * t {
                val += val_add;
            } else {
                val -= val_add;
            }
            val_add >>= 1;
        }
        let t = seg * 32 + (val << seg2);
        let y = t * t - x;
        if y <= 0 {
            let t = seg * 32 + ((val + 1) << seg2);
            let t = t * t - x;
            val += (seg2 - 1) * 16;
            if t >= y {
                val += 1;
            }
        } else {
            let t = seg * 32 + ((val - 1) << seg2);
            let t = t * t - x;
            val += (seg2 - 1) * 16;
            if t >= y {
                val -= 1;
            }
        }
        val
    }

    fn cng_rand(&mut self, base: i32) -> i32 {
        self.cng_seed = (self.cng_seed.wrapping_mul(521) + 259) & 0xffff;
        ((self.cng_seed & 0x7fff) * base) >> 15
    }

    /// Comfort noise's excitation into `audio[10..250]`: random lags, gains and pulses,
    /// the pulses' size set to reach the noise's gain.
    fn generate_noise(&mut self) {
        self.pitch_lag[0] = self.cng_rand(21) + 123;
        self.pitch_lag[1] = self.cng_rand(19) + 123;
        let gains: [i32; SUBFRAMES] = std::array::from_fn(|_| self.cng_rand(50) + 1);
        for ((s, gain), lag) in self.sub.iter_mut().zip(gains).zip(CNG_ACB_LAG) {
            s.ad_cb_gain = gain;
            s.ad_cb_lag = lag;
        }
        let mut off = [0usize; SUBFRAMES];
        let mut signs = [0i32; 22];
        let mut pos = [0usize; 22];
        for i in 0..2 {
            let mut t = self.cng_rand(1 << 13);
            off[2 * i] = (t & 1) as usize;
            off[2 * i + 1] = ((t >> 1) & 1) as usize + SUB;
            t >>= 2;
            for s in &mut signs[11 * i..11 * i + 11] {
                *s = ((t & 1) * 2 - 1) << 14;
                t >>= 1;
            }
        }
        let mut idx = 0;
        for i in 0..SUBFRAMES {
            let mut tmp: [usize; SUB / 2] = std::array::from_fn(|j| j);
            let mut t = SUB / 2;
            for _ in 0..PULSES[i] {
                let idx2 = self.cng_rand(t as i32) as usize;
                pos[idx] = tmp[idx2] * 2 + off[i];
                t -= 1;
                tmp[idx2] = tmp[t];
                idx += 1;
            }
        }
        let mut v = LPC;
        self.audio[v..v + PITCH_MAX].copy_from_slice(&self.prev_excitation);
        for i in (0..SUBFRAMES).step_by(2) {
            let lag = self.pitch_lag[i >> 1];
            for k in 0..2 {
                let at = v + k * SUB;
                let e = acb_excitation(&self.audio[at..], lag, &self.sub[i + k], self.rate_5300);
                self.audio[at..at + SUB].copy_from_slice(&e);
            }
            let t = self.audio[v..v + 2 * SUB]
                .iter()
                .fold(0u32, |m, &s| m | i32::from(s).unsigned_abs())
                .min(0x7fff);
            let mut shift = if t == 0 { 0 } else { (log2(t) - 10).max(-2) };
            let mut sum = 0i64;
            let mut tmp = [0i32; 2 * SUB];
            for (j, tj) in tmp.iter_mut().enumerate() {
                let s = i32::from(self.audio[v + j]);
                let t = if shift < 0 { s << -shift } else { s >> shift };
                sum += i64::from(t) * i64::from(t);
                *tj = t;
            }
            let pair = i / 2 * 11;
            let mut b0 = 0i32;
            for j in 0..11 {
                b0 = b0.wrapping_add(tmp[pos[pair + j]].wrapping_mul(signs[pair + j]));
            }
            let b0 = ((i64::from(b0) * 2 * 2979 + (1 << 29)) >> 30) as i32;
            let mut c = self
                .cur_gain
                .wrapping_mul((self.cur_gain * SUB as i32) >> 5);
            if shift * 2 + 3 >= 0 {
                c >>= shift * 2 + 3;
            } else {
                c <<= -(shift * 2 + 3);
            }
            let c = (((i64::from(clip32(sum << 1)) - i64::from(c)) * 2979) >> 15) as i32;
            let delta = b0.wrapping_mul(b0).wrapping_mul(2).wrapping_sub(c);
            let mut x = if delta <= 0 {
                -b0
            } else {
                let d = square_root(delta);
                let (x, t) = (d - b0, d + b0);
                if t.abs() < x.abs() {
                    -t
                } else {
                    x
                }
            };
            shift += 1;
            if shift < 0 {
                x >>= -shift;
            } else {
                x = x.wrapping_shl(shift as u32);
            }
            let x = x.clamp(-10000, 10000);
            for j in 0..11 {
                let at = v + pos[pair + j];
                self.audio[at] = clip16(i32::from(self.audio[at]) + ((x * signs[pair + j]) >> 15));
            }
            self.audio.copy_within(v..v + 2 * SUB, v + PITCH_MAX);
            v += 2 * SUB;
        }
        self.prev_excitation
            .copy_from_slice(&self.audio[LPC + FRAME..LPC + FRAME + PITCH_MAX]);
    }

    /// The formant postfilter over the synthesized frame, with tilt compensation and
    /// gain control, into `out`.
    fn formant_postfilter(&mut self, lpc: &[i16; SUBFRAMES * LPC], out: &mut [i16]) {
        self.audio[..LPC].copy_from_slice(&self.fir_mem);
        let mut signal = [0i32; LPC + FRAME];
        signal[..LPC].copy_from_slice(&self.iir_mem);
        for j in 0..SUBFRAMES {
            let at = LPC + j * SUB;
            let mut fir = [0i32; LPC];
            let mut iir = [0i32; LPC];
            for k in 0..LPC {
                let l = -i32::from(lpc[j * LPC + k]);
                fir[k] = i32::from(((l * POSTFILTER[0][k] + (1 << 14)) >> 15) as i16);
                iir[k] = i32::from(((l * POSTFILTER[1][k] + (1 << 14)) >> 15) as i16);
            }
            for m in at..at + SUB {
                let mut filter = 0i64;
                for n in 1..=LPC {
                    let d = (fir[n - 1] * i32::from(self.audio[m - n]))
                        .wrapping_sub(iir[n - 1] * (signal[m - n] >> 16));
                    filter -= i64::from(d);
                }
                signal[m] =
                    clip32(i64::from(i32::from(self.audio[m]) << 16) + filter * 8 + (1 << 15));
            }
        }
        self.fir_mem
            .copy_from_slice(&self.audio[FRAME..FRAME + LPC]);
        self.iir_mem.copy_from_slice(&signal[FRAME..FRAME + LPC]);
        for i in 0..SUBFRAMES {
            let dst = &mut out[i * SUB..(i + 1) * SUB];
            let at = LPC + i * SUB;
            let scale = scale_vector(dst, &self.audio[at..at + SUB]);
            let ac0 = dot(dst, &dst[1..], SUB - 1);
            let ac1 = dot(dst, dst, SUB);
            let mut temp = ac1 >> 16;
            if temp != 0 {
                temp = (ac0 >> 2) / temp;
            }
            self.reflection = (3 * self.reflection + temp + 2) >> 2;
            let temp = (-self.reflection >> 1) & !3;
            for j in 0..SUB {
                let s = signal[at + j];
                let before = signal[at + j - 1];
                dst[j] = (sat_dadd(s, (before >> 16).wrapping_mul(temp)) >> 16) as i16;
            }
            let t = 2 * scale + 4;
            let energy = if t < 0 {
                clip32(i64::from(ac1) << -t)
            } else {
                ac1 >> t
            };
            self.gain_scale(dst, energy);
        }
    }

    /// Scales a postfiltered subframe back toward `energy`, smoothly.
    fn gain_scale(&mut self, buf: &mut [i16], energy: i32) {
        let mut denom = 0i32;
        for &b in buf.iter() {
            let t = i32::from(b) >> 2;
            denom = sat_dadd(denom, t * t);
        }
        let gain = if energy != 0 && denom != 0 {
            let bits1 = normalize_bits(energy, 31);
            let bits2 = normalize_bits(denom, 31);
            let num = energy.wrapping_shl(bits1 as u32) >> 1;
            let denom = denom.wrapping_shl(bits2 as u32);
            let shift = (5 + bits1 - bits2).clamp(0, 31);
            let gain = (num >> 1) / (denom >> 16);
            square_root(gain.wrapping_shl(16) >> shift)
        } else {
            1 << 12
        };
        for b in buf.iter_mut() {
            self.pf_gain = (15 * self.pf_gain + gain + (1 << 3)) >> 4;
            let g = self.pf_gain + (self.pf_gain >> 4);
            *b = clip16((i32::from(*b) * g + (1 << 10)) >> 11);
        }
    }
}

/// The pitch postfilter's gains for the chosen lag.
fn ppf_gains(lag: i32, rate: usize, tgt_eng: i32, ccr: i32, res_eng: i32) -> Ppf {
    let mut ppf = Ppf {
        index: lag,
        opt_gain: 0,
        sc_gain: 0x7fff,
    };
    let t1 = tgt_eng.wrapping_mul(res_eng) >> 1;
    let t2 = ccr.wrapping_mul(ccr) << 1;
    if t2 > t1 {
        let opt = if ccr >= res_eng {
            PPF_GAIN_WEIGHT[rate]
        } else {
            ((ccr << 15).checked_div(res_eng).unwrap_or(0) * PPF_GAIN_WEIGHT[rate]) >> 15
        };
        let opt = i32::from(opt as i16);
        let t1 = (tgt_eng << 15).wrapping_add((ccr * opt) << 1);
        let t2 = ((opt * opt) >> 15).wrapping_mul(res_eng);
        let residual = sat_add(t1, t2.wrapping_add(1 << 15)) >> 16;
        let t1 = if tgt_eng >= residual << 1 {
            0x7fff
        } else {
            (tgt_eng << 14).checked_div(residual).unwrap_or(0)
        };
        ppf.opt_gain = opt;
        ppf.sc_gain = i32::from(square_root(t1 << 16) as i16);
    } else {
        ppf.opt_gain = 0;
        ppf.sc_gain = 0x7fff;
    }
    ppf.opt_gain = i32::from(clip16((ppf.opt_gain * ppf.sc_gain) >> 15));
    ppf
}

fn sid_gain_to_lsp_index(gain: i32) -> i32 {
    if gain < 0x10 {
        gain << 6
    } else if gain < 0x20 {
        (gain - 8) << 7
    } else {
        (gain - 20) << 8
    }
}

/// A subframe's fixed codebook vector: 6.3 kbit/s's pulse combination (and Dirac train),
/// or 5.3 kbit/s's four signed pulses, enhanced at the pitch.
fn fcb_excitation(sub: &Subframe, rate_5300: bool, pitch_lag: i32, index: usize) -> [i16; SUB] {
    // (5.3 kbit/s pulses may land past the subframe, as in FFmpeg's buffer; they are dropped.)
    let mut v = [0i16; SUB + 4];
    if !rate_5300 {
        if sub.pulse_pos >= MAX_POS[index] {
            return [0; SUB];
        }
        let mut j = (6 - PULSES[index]) as usize;
        let mut temp = sub.pulse_pos;
        let gain = FIXED_CB_GAIN[sub.amp_index as usize];
        // (The table's row moves on with each pulse placed.)
        #[allow(clippy::needless_range_loop)]
        for i in 0..SUB / 2 {
            temp -= COMBINATORIAL[j][i];
            if temp >= 0 {
                continue;
            }
            temp += COMBINATORIAL[j][i];
            j += 1;
            let at = sub.grid_index as usize + 2 * i;
            v[at] = if sub.pulse_sign & (1 << (6 - j)) != 0 {
                -gain
            } else {
                gain
            };
            if j == 6 {
                break;
            }
        }
        if sub.dirac_train == 1 {
            let orig = v;
            let lag = pitch_lag as usize;
            let mut i = lag;
            while i < SUB {
                for k in 0..SUB - i {
                    v[i + k] = v[i + k].wrapping_add(orig[k]);
                }
                i += lag;
            }
        }
    } else {
        let gain = FIXED_CB_GAIN[sub.amp_index as usize];
        let (mut pos, mut sign) = (sub.pulse_pos, sub.pulse_sign);
        for i in (0..8).step_by(2) {
            let at = (((pos & 7) << 3) + sub.grid_index) as usize + i;
            v[at] = if sign & 1 != 0 { gain } else { -gain };
            pos >>= 3;
            sign >>= 1;
        }
        let row = PITCH_CONTRIB[sub.ad_cb_gain as usize];
        let lag = row[0] + pitch_lag + sub.ad_cb_lag - 1;
        if lag < SUB as i32 - 2 {
            let lag = lag as usize;
            for i in lag..SUB {
                let add = (row[1] * i32::from(v[i - lag])) >> 15;
                v[i] = (i32::from(v[i]) + add) as i16;
            }
        }
    }
    v[..SUB].try_into().expect("a subframe")
}

/// Where a stream of G.723.1 frames comes from.
pub(crate) enum Framing {
    /// Frames back to back (raw files, WAV data).
    Plain,
    /// DSS long play: 512-byte blocks whose first 6 bytes are a header, the frames running
    /// across them; a frame byte of 0xFF ends the audio, as FFmpeg's reader ends there.
    Dss,
}

/// The frames' bytes, headers skipped, cut to the whole frames, and how many they are.
pub(crate) fn frame_stream(bytes: Vec<u8>, framing: Framing) -> (Vec<u8>, usize) {
    let mut stream: Vec<u8> = match framing {
        Framing::Plain => bytes,
        Framing::Dss => bytes
            .chunks(512)
            .flat_map(|b| b.get(6..).unwrap_or_default())
            .copied()
            .collect(),
    };
    let dss = matches!(framing, Framing::Dss);
    let (mut at, mut frames) = (0, 0);
    while let Some(&b) = stream.get(at) {
        if dss && b == 0xff {
            break;
        }
        let size = FRAME_SIZE[usize::from(b & 3)];
        if at + size > stream.len() {
            break;
        }
        at += size;
        frames += 1;
    }
    stream.truncate(at);
    (stream, frames)
}

/// G.723.1 frames decoded as they are read, handed out as a 16-bit 8 kHz WAV file.
pub(crate) struct G7231Wav {
    stream: Vec<u8>,
    at: usize,
    dec: Box<G7231>,
    pending: crate::codec::Pending,
}

impl G7231Wav {
    /// The whole frames of `stream` (from [`frame_stream`]).
    pub(crate) fn new((stream, frames): (Vec<u8>, usize)) -> Self {
        let mut fmt = Vec::with_capacity(16);
        fmt.extend_from_slice(&1u16.to_le_bytes()); // PCM
        fmt.extend_from_slice(&1u16.to_le_bytes());
        fmt.extend_from_slice(&8_000u32.to_le_bytes());
        fmt.extend_from_slice(&16_000u32.to_le_bytes());
        fmt.extend_from_slice(&2u16.to_le_bytes());
        fmt.extend_from_slice(&16u16.to_le_bytes());
        let header = crate::avi::wav_header(&fmt, frames as u64 * FRAME as u64 * 2);
        Self {
            stream,
            at: 0,
            dec: Box::new(G7231::new()),
            pending: crate::codec::Pending::new(header),
        }
    }
}

impl Read for G7231Wav {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            let Some(&first) = self.stream.get(self.at) else {
                return Ok(0);
            };
            let size = FRAME_SIZE[usize::from(first & 3)];
            let mut samples = Vec::with_capacity(FRAME);
            self.dec
                .frame(&self.stream[self.at..self.at + size], &mut samples);
            self.at += size;
            self.pending.refill(samples);
        }
        Ok(self.pending.read(buf))
    }
}
