//! Speex (`.spx` voice recordings in Ogg; Flash Player's microphone in FLV): the CELP
//! codec of Xiph, in its narrowband (8 kHz), wideband (16 kHz: a high band over the
//! narrowband one, through a QMF) and ultra-wideband (32 kHz) modes, in-band stereo
//! included. Every step is FFmpeg's native decoder's (`speexdec.c`, from the reference
//! decoder's float build), in its order and float precision: sub-modes 1 to 8 of the
//! narrowband codec (LSPs, 3-tap pitch, split codebooks, the vocoder mode), the
//! high band's folding or codebooks, the perceptual enhancer's comb filter, and the
//! narrowband high-pass.

mod tables;

use symphonia::core::audio::{AudioBuffer, Channels, Signal, SignalSpec};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use crate::codec::{buffered_decoder_methods, make_room, Bits, Parse};
use tables::*;

/// Speex, configured by its 80-byte header (the parameters' extra data), or, where it has
/// none (FLV's), by the rate: 8, 16 or 32 kHz.
pub(crate) const CODEC_TYPE_SPEEX: CodecType = decl_codec_type(b"spx ");

/// Its WAV format tag (FFmpeg's, as in AVI, ASF and Matroska's `A_MS/ACM`), with the
/// Speex header after the WAVEFORMATEX.
pub(crate) const WAV_TAG: u16 = 0xA109;

const NB_ORDER: usize = 10;
const NB_FRAME_SIZE: usize = 160;
const NB_SUBFRAME_SIZE: usize = 40;
const NB_NB_SUBFRAMES: usize = 4;
const NB_PITCH_START: i32 = 17;
const NB_PITCH_END: usize = 144;
const NB_DEC_BUFFER: usize = NB_FRAME_SIZE + 2 * NB_PITCH_END + NB_SUBFRAME_SIZE + 12;
/// Where the current frame's excitation starts in the buffer (the past before it).
const EXC: usize = 2 * NB_PITCH_END + NB_SUBFRAME_SIZE + 6;
const QMF_ORDER: usize = 64;
const SB_SUBMODE_BITS: u32 = 3;
const SPEEX_INBAND_STEREO: u32 = 9;
/// Bits a narrowband decoder skips over each wideband sub-mode's layer.
const WB_SKIP: [i32; 8] = [0, 36, 112, 192, 352, 0, 0, 0];

/// How a sub-mode codes its LSPs.
#[derive(Clone, Copy, PartialEq)]
enum Lsp {
    Lbr,
    Nb,
    High,
}

/// A pitch predictor's gain codebook and bits.
struct LtpParams {
    gain_cdbk: &'static [i8],
    gain_bits: u32,
    pitch_bits: u32,
}

/// How a sub-mode codes its long-term (pitch) prediction.
enum Ltp {
    None,
    Forced,
    ThreeTap(&'static LtpParams),
}

/// A split codebook's shape.
struct SplitCb {
    subvect_size: usize,
    nb_subvect: usize,
    shape_cb: &'static [i8],
    shape_bits: u32,
    have_sign: bool,
}

/// How a sub-mode codes its innovation.
enum Innov {
    None,
    Noise,
    Split(&'static SplitCb),
}

struct Submode {
    lbr_pitch: i32,
    forced_pitch_gain: bool,
    have_subframe_gain: u8,
    double_codebook: bool,
    lsp: Lsp,
    ltp: Ltp,
    innov: Innov,
    comb_gain: f32,
}

const LTP_VLBR: LtpParams = LtpParams {
    gain_cdbk: &GAIN_CDBK_LBR,
    gain_bits: 5,
    pitch_bits: 0,
};
const LTP_LBR: LtpParams = LtpParams {
    gain_cdbk: &GAIN_CDBK_LBR,
    gain_bits: 5,
    pitch_bits: 7,
};
const LTP_NB: LtpParams = LtpParams {
    gain_cdbk: &GAIN_CDBK_NB,
    gain_bits: 7,
    pitch_bits: 7,
};

const fn split(
    subvect_size: usize,
    nb_subvect: usize,
    shape_cb: &'static [i8],
    shape_bits: u32,
    have_sign: bool,
) -> SplitCb {
    SplitCb {
        subvect_size,
        nb_subvect,
        shape_cb,
        shape_bits,
        have_sign,
    }
}

const SPLIT_NB_ULBR: SplitCb = split(20, 2, &EXC_20_32_TABLE, 5, false);
const SPLIT_NB_VLBR: SplitCb = split(10, 4, &EXC_10_16_TABLE, 4, false);
const SPLIT_NB_LBR: SplitCb = split(10, 4, &EXC_10_32_TABLE, 5, false);
const SPLIT_NB_MED: SplitCb = split(8, 5, &EXC_8_128_TABLE, 7, false);
const SPLIT_NB: SplitCb = split(5, 8, &EXC_5_64_TABLE, 6, false);
const SPLIT_SB: SplitCb = split(5, 8, &EXC_5_256_TABLE, 8, false);
const SPLIT_HIGH: SplitCb = split(8, 5, &HEXC_TABLE, 7, true);
const SPLIT_HIGH_LBR: SplitCb = split(10, 4, &HEXC_10_32_TABLE, 5, false);

#[allow(clippy::too_many_arguments)]
const fn submode(
    lbr_pitch: i32,
    forced_pitch_gain: bool,
    have_subframe_gain: u8,
    double_codebook: bool,
    lsp: Lsp,
    ltp: Ltp,
    innov: Innov,
    comb_gain: f32,
) -> Submode {
    Submode {
        lbr_pitch,
        forced_pitch_gain,
        have_subframe_gain,
        double_codebook,
        lsp,
        ltp,
        innov,
        comb_gain,
    }
}

/// The narrowband sub-modes 1 to 8 (2.15 to 24.6 kbit/s, and 3.95): pitch margin, forced
/// pitch gain, subframe gain bits, double codebook, LSPs, pitch, innovation, comb gain.
#[rustfmt::skip]
static NB_SUBMODES: [Submode; 8] = [
    submode(0, true, 0, false, Lsp::Lbr, Ltp::Forced, Innov::Noise, -1.0),
    submode(0, false, 0, false, Lsp::Lbr, Ltp::ThreeTap(&LTP_VLBR), Innov::Split(&SPLIT_NB_VLBR), 0.6),
    submode(-1, false, 1, false, Lsp::Lbr, Ltp::ThreeTap(&LTP_LBR), Innov::Split(&SPLIT_NB_LBR), 0.55),
    submode(-1, false, 1, false, Lsp::Lbr, Ltp::ThreeTap(&LTP_LBR), Innov::Split(&SPLIT_NB_MED), 0.45),
    submode(-1, false, 3, false, Lsp::Nb, Ltp::ThreeTap(&LTP_NB), Innov::Split(&SPLIT_NB), 0.25),
    submode(-1, false, 3, false, Lsp::Nb, Ltp::ThreeTap(&LTP_NB), Innov::Split(&SPLIT_SB), 0.15),
    submode(-1, false, 3, true, Lsp::Nb, Ltp::ThreeTap(&LTP_NB), Innov::Split(&SPLIT_NB), 0.05),
    submode(0, true, 0, false, Lsp::Lbr, Ltp::Forced, Innov::Split(&SPLIT_NB_ULBR), 0.5),
];

/// The high band's sub-modes 1 to 4.
#[rustfmt::skip]
static WB_SUBMODES: [Submode; 4] = [
    submode(0, false, 1, false, Lsp::High, Ltp::None, Innov::None, -1.0),
    submode(0, false, 1, false, Lsp::High, Ltp::None, Innov::Split(&SPLIT_HIGH_LBR), -1.0),
    submode(0, false, 1, false, Lsp::High, Ltp::None, Innov::Split(&SPLIT_HIGH), -1.0),
    submode(0, false, 1, true, Lsp::High, Ltp::None, Innov::Split(&SPLIT_HIGH), -1.0),
];

/// A mode's sub-mode `id`: None for the null one (no transmission) and those there are not.
fn submode_of(mode: usize, id: usize) -> Option<&'static Submode> {
    match (mode, id) {
        (_, 0) => None,
        (0, 1..=8) => Some(&NB_SUBMODES[id - 1]),
        (1, 1..=4) | (2, 1) => Some(&WB_SUBMODES[id - 1]),
        _ => None,
    }
}

/// One mode's decoder state (FFmpeg's `DecoderState`): narrowband (0), or a high band
/// over the mode below it (1: wideband, 2: ultra-wideband).
struct State {
    mode: usize,
    first: bool,
    frame_size: usize,
    subframe_size: usize,
    nb_subframes: usize,
    lpc_size: usize,
    full_frame_size: usize,
    folding_gain: f32,
    submode_id: usize,
    last_pitch_gain: f32,
    seed: u32,
    voc_m1: f32,
    voc_m2: f32,
    voc_mean: f32,
    voc_offset: i32,
    mem_hp: [f32; 2],
    exc_buf: [f32; NB_DEC_BUFFER],
    old_qlsp: [f32; NB_ORDER],
    interp_qlpc: [f32; NB_ORDER],
    mem_sp: [f32; NB_ORDER],
    g0_mem: [f32; QMF_ORDER],
    g1_mem: [f32; QMF_ORDER],
    pi_gain: [f32; NB_NB_SUBFRAMES],
    exc_rms: [f32; NB_NB_SUBFRAMES],
    /// Where in the frame's buffer this mode's innovation is kept for the band above.
    innov_save: Option<usize>,
}

impl State {
    fn new(mode: usize) -> Self {
        let (frame_size, subframe_size, lpc_size, folding_gain, default) = match mode {
            0 => (NB_FRAME_SIZE, NB_SUBFRAME_SIZE, NB_ORDER, 0.0, 5),
            1 => (NB_FRAME_SIZE, NB_SUBFRAME_SIZE, 8, 0.9, 3),
            _ => (320, 80, 8, 0.7, 1),
        };
        Self {
            mode,
            first: true,
            frame_size,
            subframe_size,
            nb_subframes: frame_size / subframe_size,
            lpc_size,
            full_frame_size: (1 + usize::from(mode > 0)) * frame_size,
            folding_gain,
            submode_id: default,
            last_pitch_gain: 0.0,
            seed: 1000,
            voc_m1: 0.0,
            voc_m2: 0.0,
            voc_mean: 0.0,
            voc_offset: 0,
            mem_hp: [0.0; 2],
            exc_buf: [0.0; NB_DEC_BUFFER],
            old_qlsp: [0.0; NB_ORDER],
            interp_qlpc: [0.0; NB_ORDER],
            mem_sp: [0.0; NB_ORDER],
            g0_mem: [0.0; QMF_ORDER],
            g1_mem: [0.0; QMF_ORDER],
            pi_gain: [0.0; NB_NB_SUBFRAMES],
            exc_rms: [0.0; NB_NB_SUBFRAMES],
            innov_save: None,
        }
    }
}

/// The in-band stereo parameters and their smoothed gains.
struct Stereo {
    balance: f32,
    e_ratio: f32,
    smooth_left: f32,
    smooth_right: f32,
}

/// The stream's configuration, from its header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Config {
    pub(crate) rate: u32,
    pub(crate) mode: usize,
    pub(crate) channels: usize,
    pub(crate) frame_size: usize,
    pub(crate) frames_per_packet: usize,
}

impl Config {
    /// The configuration Speex's 80-byte header (Ogg's first packet) describes.
    pub(crate) fn from_header(h: &[u8]) -> std::result::Result<Self, &'static str> {
        if !h.starts_with(b"Speex   ") || h.len() < 68 {
            return Err("not a Speex header");
        }
        let le = |at: usize| i32::from_le_bytes(h[at..at + 4].try_into().expect("four bytes"));
        let (rate, mode, version) = (le(36), le(40), le(44));
        let (channels, frame_size, fpp) = (le(48), le(56), le(64));
        if rate <= 0 || !(0..3).contains(&mode) {
            return Err("a Speex header with a bad rate or mode");
        }
        if version != 4 {
            return Err("a Speex bit-stream version other than 4");
        }
        if !(1..=2).contains(&channels) {
            return Err("Speex of more than two channels");
        }
        if frame_size < (NB_FRAME_SIZE << mode) as i32 || frame_size > 1 << 12 {
            return Err("a Speex header with a bad frame size");
        }
        if !(1..=64).contains(&fpp) {
            return Err("a Speex header with a bad frame count");
        }
        Ok(Self {
            rate: rate as u32,
            mode: mode as usize,
            channels: channels as usize,
            frame_size: frame_size as usize,
            frames_per_packet: fpp as usize,
        })
    }

    /// A header-less stream's configuration (FLV's): mono, one frame a packet, the mode
    /// by the rate.
    pub(crate) fn from_rate(rate: u32) -> Self {
        let mode = match rate {
            8000 => 0,
            16000 => 1,
            _ => 2,
        };
        Self {
            rate,
            mode,
            channels: 1,
            frame_size: NB_FRAME_SIZE << mode,
            frames_per_packet: 1,
        }
    }
}

/// A Speex decoder (FFmpeg's `SpeexContext`).
pub(crate) struct Speex {
    config: Config,
    st: [State; 3],
    stereo: Stereo,
}

fn compute_rms(x: &[f32]) -> f32 {
    let sum = x.iter().fold(0f32, |s, &v| s + v * v);
    (0.1 + sum / x.len() as f32).sqrt()
}

fn bw_lpc(gamma: f32, lpc_in: &[f32], lpc_out: &mut [f32]) {
    let mut tmp = gamma;
    for (o, &i) in lpc_out.iter_mut().zip(lpc_in) {
        *o = tmp * i;
        tmp *= gamma;
    }
}

/// An all-pole filter over `x` into `y` (which may be `x`'s place: the buffer `buf`
/// from `x_at` to `y_at`), `n` samples.
fn iir_mem(buf: &mut [f32], x_at: usize, y_at: usize, n: usize, den: &[f32], mem: &mut [f32]) {
    let ord = den.len();
    for i in 0..n {
        let yi = buf[x_at + i] + mem[0];
        let nyi = -yi;
        for j in 0..ord - 1 {
            mem[j] = mem[j + 1] + den[j] * nyi;
        }
        mem[ord - 1] = den[ord - 1] * nyi;
        buf[y_at + i] = yi;
    }
}

fn highpass(x: &mut [f32], mem: &mut [f32; 2]) {
    const DEN: [f32; 3] = [1.0, -1.92683, 0.93071];
    const NUM: [f32; 3] = [0.96446, -1.92879, 0.96446];
    for v in x {
        let xi = *v;
        let yi = NUM[0] * xi + mem[0];
        mem[0] = mem[1] + NUM[1] * xi + -DEN[1] * yi;
        mem[1] = NUM[2] * xi + -DEN[2] * yi;
        *v = yi;
    }
}

fn inner_prod(x: &[f32], y: &[f32], len: usize) -> f32 {
    let mut sum = 0f32;
    for i in (0..len).step_by(8) {
        let mut part = 0f32;
        for k in 0..8 {
            part += x[i + k] * y[i + k];
        }
        sum += part;
    }
    sum
}

/// The excitation `pitch` back, interpolated to a fraction of a sample where that
/// correlates better (FFmpeg's `interp_pitch`); `exc` is the buffer, its samples from
/// `at`.
fn interp_pitch(buf: &[f32], at: usize, interp: &mut [f32], pitch: i32, len: usize) {
    let exc = |i: isize| buf[(at as isize + i) as usize];
    let slice = |i: isize| &buf[(at as isize + i) as usize..];
    let mut corr = [[0f32; 7]; 4];
    for (i, c) in corr[0].iter_mut().enumerate() {
        *c = inner_prod(slice(0), slice(-(pitch as isize) - 3 + i as isize), len);
    }
    for i in 0..3 {
        for j in 0..7i32 {
            let i1 = (3 - j).max(0);
            let i2 = (10 - j).min(7);
            let mut tmp = 0f32;
            for k in i1..i2 {
                tmp += SHIFT_FILT[i][k as usize] * corr[0][(j + k - 3) as usize];
            }
            corr[i + 1][j as usize] = tmp;
        }
    }
    let (mut maxi, mut maxj) = (0usize, 0i32);
    let mut maxcorr = corr[0][0];
    for (i, row) in corr.iter().enumerate() {
        for (j, &c) in row.iter().enumerate() {
            if c > maxcorr {
                maxcorr = c;
                maxi = i;
                maxj = j as i32;
            }
        }
    }
    let lag = (pitch - maxj + 3) as isize;
    for (i, o) in interp.iter_mut().take(len).enumerate() {
        let i = i as isize;
        *o = if maxi > 0 {
            let mut tmp = 0f32;
            for k in 0..7isize {
                tmp += exc(i - lag + k - 3) * SHIFT_FILT[maxi - 1][k as usize];
            }
            tmp
        } else {
            exc(i - lag)
        };
    }
}

/// The perceptual enhancer's comb filter over `nsf` samples of excitation from `at` in
/// `buf`, into `new_exc` (FFmpeg's `multicomb`).
fn multicomb(buf: &[f32], at: usize, new_exc: &mut [f32], nsf: usize, pitch: i32, comb_gain: f32) {
    const MAX_PITCH: i32 = 40;
    let mut iexc = [0f32; 4 * NB_SUBFRAME_SIZE];
    let exc = &buf[at..];
    interp_pitch(buf, at, &mut iexc, pitch, 80);
    let second = if pitch > MAX_PITCH { 2 * pitch } else { -pitch };
    interp_pitch(buf, at, &mut iexc[nsf..], second, 80);
    let iexc0_mag = (1000.0 + inner_prod(&iexc, &iexc, nsf)).sqrt();
    let iexc1_mag = (1000.0 + inner_prod(&iexc[nsf..], &iexc[nsf..], nsf)).sqrt();
    let exc_mag = (1.0 + inner_prod(exc, exc, nsf)).sqrt();
    let corr0 = inner_prod(&iexc, exc, nsf);
    let corr1 = inner_prod(&iexc[nsf..], exc, nsf);
    let pgain1 = if corr0 > iexc0_mag * exc_mag {
        1.0
    } else {
        (corr0 / exc_mag) / iexc0_mag
    };
    let pgain2 = if corr1 > iexc1_mag * exc_mag {
        1.0
    } else {
        (corr1 / exc_mag) / iexc1_mag
    };
    let gg1 = exc_mag / iexc0_mag;
    let gg2 = exc_mag / iexc1_mag;
    let (c1, c2) = if comb_gain > 0.0 {
        let c1 = 0.4 * comb_gain + 0.07;
        (c1, 0.5 + 1.72 * (c1 - 0.07))
    } else {
        (0.0, 0.0)
    };
    let g1 = c1 / (1.0 - c2 * pgain1 * pgain1).max(c1);
    let g2 = c1 / (1.0 - c2 * pgain2 * pgain2).max(c1);
    let (gain0, gain1) = if pitch > MAX_PITCH {
        (0.7 * g1 * gg1, 0.3 * g2 * gg2)
    } else {
        (0.6 * g1 * gg1, 0.6 * g2 * gg2)
    };
    for i in 0..nsf {
        new_exc[i] = exc[i] + (gain0 * iexc[i]) + (gain1 * iexc[i + nsf]);
    }
    let new_ener = compute_rms(&new_exc[..nsf]).max(1.0);
    let old_ener = compute_rms(&exc[..nsf]).max(1.0).min(new_ener);
    let ngain = old_ener / new_ener;
    for v in &mut new_exc[..nsf] {
        *v *= ngain;
    }
}

fn lsp_interpolate(old: &[f32], new: &[f32], lsp: &mut [f32], sub: usize, nb: usize, margin: f32) {
    let tmp = (1.0 + sub as f32) / nb as f32;
    let len = lsp.len();
    for i in 0..len {
        // FFmpeg's upper bound is `M_PI - margin` in double, made a float.
        let top = (std::f64::consts::PI - f64::from(margin)) as f32;
        lsp[i] = ((1.0 - tmp) * old[i] + tmp * new[i]).clamp(margin, top);
    }
    for i in 1..len - 1 {
        lsp[i] = lsp[i].max(lsp[i - 1] + margin);
        if lsp[i] > lsp[i + 1] - margin {
            lsp[i] = 0.5 * (lsp[i] + lsp[i + 1] - margin);
        }
    }
}

fn lsp_to_lpc(freq: &[f32], ak: &mut [f32]) {
    let lpcrdr = freq.len();
    let m = lpcrdr >> 1;
    let mut wp = [0f32; 4 * NB_ORDER + 2];
    let mut x_freq = [0f32; NB_ORDER];
    for (x, &f) in x_freq.iter_mut().zip(freq) {
        *x = -f.cos();
    }
    let (mut xin1, mut xin2) = (1f32, 1f32);
    for j in 0..=lpcrdr {
        let mut n0 = 0;
        for i in 0..m {
            n0 = i * 4;
            let xout1 = xin1 + 2.0 * x_freq[2 * i] * wp[n0] + wp[n0 + 1];
            let xout2 = xin2 + 2.0 * x_freq[2 * i + 1] * wp[n0 + 2] + wp[n0 + 3];
            wp[n0 + 1] = wp[n0];
            wp[n0 + 3] = wp[n0 + 2];
            wp[n0] = xin1;
            wp[n0 + 2] = xin2;
            xin1 = xout1;
            xin2 = xout2;
        }
        let xout1 = xin1 + wp[n0 + 4];
        let xout2 = xin2 - wp[n0 + 5];
        if j > 0 {
            ak[j - 1] = (xout1 + xout2) * 0.5;
        }
        wp[n0 + 4] = xin1;
        wp[n0 + 5] = xin2;
        xin1 = 0.0;
        xin2 = 0.0;
    }
}

fn lsp_unquant(kind: Lsp, lsp: &mut [f32], r: &mut Bits) -> Parse<()> {
    let order = lsp.len();
    let add = |lsp: &mut [f32], cb: &[i8], id: usize, n: usize, scale: f32| {
        for (l, &c) in lsp.iter_mut().zip(&cb[id * n..(id + 1) * n]) {
            *l += scale * f32::from(c);
        }
    };
    if kind == Lsp::High {
        for (i, l) in lsp.iter_mut().enumerate() {
            *l = 0.3125 * i as f32 + 0.75;
        }
        let id = r.get(6)? as usize;
        add(lsp, &HIGH_LSP_CDBK, id, order, 0.00390625);
        let id = r.get(6)? as usize;
        add(lsp, &HIGH_LSP_CDBK2, id, order, 0.001953125);
        return Ok(());
    }
    for (i, l) in lsp.iter_mut().enumerate() {
        *l = 0.25 * i as f32 + 0.25;
    }
    let id = r.get(6)? as usize;
    add(lsp, &CDBK_NB, id, 10, 0.00390625);
    let id = r.get(6)? as usize;
    add(&mut lsp[..5], &CDBK_NB_LOW1, id, 5, 0.001953125);
    if kind == Lsp::Nb {
        let id = r.get(6)? as usize;
        add(&mut lsp[..5], &CDBK_NB_LOW2, id, 5, 0.0009765625);
    }
    let id = r.get(6)? as usize;
    add(&mut lsp[5..], &CDBK_NB_HIGH1, id, 5, 0.001953125);
    if kind == Lsp::Nb {
        let id = r.get(6)? as usize;
        add(&mut lsp[5..], &CDBK_NB_HIGH2, id, 5, 0.0009765625);
    }
    Ok(())
}

/// The reference decoder's uniform noise of deviation `std`.
fn speex_rand(std: f32, seed: &mut u32) -> f32 {
    *seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
    let ran = 0x3f80_0000 | (0x007f_ffff & *seed);
    (f32::from_bits(ran) - 1.5) * std
}

fn innovation(kind: &Innov, exc: &mut [f32], r: &mut Bits, seed: &mut u32) -> Parse<()> {
    match kind {
        Innov::None => {}
        Innov::Noise => {
            for e in exc.iter_mut() {
                *e = speex_rand(1.0, seed);
            }
        }
        Innov::Split(p) => {
            let mut signs = [false; 10];
            let mut ind = [0usize; 10];
            for i in 0..p.nb_subvect {
                signs[i] = p.have_sign && r.bit()?;
                ind[i] = r.get(p.shape_bits)? as usize;
            }
            for i in 0..p.nb_subvect {
                let s = if signs[i] { -1.0 } else { 1.0 };
                let n = p.subvect_size;
                for j in 0..n {
                    exc[n * i + j] += s * 0.03125 * f32::from(p.shape_cb[ind[i] * n + j]);
                }
            }
        }
    }
    Ok(())
}

fn gain_3tap_to_1tap(g: &[f32; 3]) -> f32 {
    let side = |v: f32| if v > 0.0 { v } else { -0.5 * v };
    g[1].abs() + side(g[0]) + side(g[2])
}

impl Speex {
    pub(crate) fn new(config: Config) -> Self {
        Self {
            config,
            st: [State::new(0), State::new(1), State::new(2)],
            stereo: Stereo {
                balance: 1.0,
                e_ratio: 0.5,
                smooth_left: 1.0,
                smooth_right: 1.0,
            },
        }
    }

    /// Samples (per channel) a packet decodes to.
    pub(crate) fn packet_samples(&self) -> usize {
        self.config.frame_size * self.config.frames_per_packet
    }

    /// A packet's frames into `out` (interleaved when stereo, scaled to ±1), as FFmpeg's
    /// `speex_decode_frame`; an error where one fails (the packet's samples are lost).
    pub(crate) fn packet(&mut self, data: &[u8], out: &mut Vec<f32>) -> Parse<()> {
        let c = self.config;
        let n = (c.frame_size * c.frames_per_packet).next_multiple_of(4);
        let mut dst = vec![0f32; n * c.channels + c.frame_size * 2];
        let mut r = Bits::new(data);
        for i in 0..c.frames_per_packet {
            let at = i * c.frame_size;
            self.decode(c.mode, &mut r, &mut dst[at..], c.frames_per_packet - i)?;
            if c.channels == 2 {
                self.stereo(&mut dst[at..], c.frame_size);
            }
        }
        let total = c.frame_size * c.frames_per_packet * c.channels;
        out.extend(dst[..total].iter().map(|&v| v * (1.0 / 32768.0)));
        Ok(())
    }

    fn stereo(&mut self, data: &mut [f32], frame_size: usize) {
        let s = &mut self.stereo;
        let e_right = 1.0 / (s.e_ratio * (1.0 + s.balance)).sqrt();
        let e_left = s.balance.sqrt() * e_right;
        for i in (0..frame_size).rev() {
            let tmp = data[i];
            s.smooth_left = s.smooth_left * 0.98 + e_left * 0.02;
            s.smooth_right = s.smooth_right * 0.98 + e_right * 0.02;
            data[2 * i] = s.smooth_left * tmp;
            data[2 * i + 1] = s.smooth_right * tmp;
        }
    }

    fn decode(&mut self, mode: usize, r: &mut Bits, out: &mut [f32], left: usize) -> Parse<()> {
        if mode == 0 {
            self.nb_decode(r, out)
        } else {
            self.sb_decode(mode, r, out, left)
        }
    }

    /// An in-band request: stereo parameters are kept, others skipped.
    fn inband(&mut self, r: &mut Bits) -> Parse<()> {
        let id = r.get(4)?;
        if id == SPEEX_INBAND_STEREO {
            let sign = if r.bit()? { -1.0 } else { 1.0 };
            self.stereo.balance = (f64::from(sign * 0.25 * r.get(5)? as f32)).exp() as f32;
            self.stereo.e_ratio = E_RATIO_QUANT[r.get(2)? as usize];
        } else {
            let adv = match id {
                0..2 => 1,
                2..8 => 4,
                8..10 => 8,
                10..12 => 16,
                12..14 => 32,
                _ => 64,
            };
            r.skip(adv)?;
        }
        Ok(())
    }

    /// A narrowband frame of 160 samples into `out` (FFmpeg's `nb_decode`).
    fn nb_decode(&mut self, r: &mut Bits, out: &mut [f32]) -> Parse<()> {
        // The next narrowband block: wideband layers skipped, requests handled.
        let m = loop {
            if r.left() < 5 {
                return Err("speex: a frame past its packet's end");
            }
            let mut wideband = r.bit()?;
            let mut layers = 0;
            while wideband {
                layers += 1;
                if layers > 2 {
                    return Err("speex: more than two wideband layers");
                }
                let submode = r.get(SB_SUBMODE_BITS)? as usize;
                let advance = WB_SKIP[submode] - (SB_SUBMODE_BITS as i32 + 1);
                if advance < 0 {
                    return Err("speex: a wideband layer of no size");
                }
                r.skip(advance as usize)?;
                if layers == 1 && r.left() < 5 {
                    return Err("speex: a frame past its packet's end");
                }
                wideband = r.bit()?;
            }
            if r.left() < 4 {
                return Err("speex: a frame past its packet's end");
            }
            let m = r.get(4)?;
            match m {
                15 => return Err("speex: a terminator"),
                14 => self.inband(r)?,
                13 => {
                    let size = r.get(4)? as usize;
                    r.skip(5 + 8 * size)?;
                }
                9..=12 => return Err("speex: an invalid mode"),
                _ => break m as usize,
            }
        };
        let st = &mut self.st[0];
        st.submode_id = m;
        st.exc_buf.copy_within(NB_FRAME_SIZE.., 0);
        let Some(sm) = submode_of(0, m) else {
            // No transmission: noise of the last frame's energy through the last filter.
            let mut lpc = [0f32; NB_ORDER];
            bw_lpc(0.93, &st.interp_qlpc, &mut lpc);
            let innov_gain = compute_rms(&st.exc_buf[EXC..EXC + NB_FRAME_SIZE]);
            for i in 0..NB_FRAME_SIZE {
                st.exc_buf[EXC + i] = speex_rand(innov_gain, &mut st.seed);
            }
            out[..NB_FRAME_SIZE].copy_from_slice(&st.exc_buf[EXC..EXC + NB_FRAME_SIZE]);
            iir_mem(out, 0, 0, NB_FRAME_SIZE, &lpc, &mut st.mem_sp);
            return Ok(());
        };
        let mut qlsp = [0f32; NB_ORDER];
        lsp_unquant(sm.lsp, &mut qlsp, r)?;
        if st.first {
            st.old_qlsp = qlsp;
        }
        let ol_pitch = if sm.lbr_pitch != -1 {
            NB_PITCH_START + r.get(7)? as i32
        } else {
            0
        };
        let ol_pitch_coef = if sm.forced_pitch_gain {
            0.066667 * r.get(4)? as f32
        } else {
            0.0
        };
        let ol_gain = (r.get(5)? as f32 / 3.5).exp();
        if st.submode_id == 1 {
            r.get(4)?; // DTX
        }
        let (mut best_pitch, mut best_pitch_gain, mut pitch_average) = (40i32, 0f32, 0f32);
        let mut innov = [0f32; NB_SUBFRAME_SIZE];
        let mut exc32 = [0f32; NB_SUBFRAME_SIZE];
        for sub in 0..NB_NB_SUBFRAMES {
            let offset = NB_SUBFRAME_SIZE * sub;
            let e0 = EXC + offset;
            st.exc_buf[e0..e0 + NB_SUBFRAME_SIZE].fill(0.0);
            // The pitch's lower bound (its upper one bounds nothing the decoder reads).
            let pit_min = match sm.lbr_pitch {
                -1 => NB_PITCH_START,
                0 => ol_pitch,
                margin => (ol_pitch - margin + 1).max(NB_PITCH_START),
            };
            let pitch_gain;
            let pitch;
            match sm.ltp {
                Ltp::Forced => {
                    let coef = ol_pitch_coef.min(0.99);
                    for (i, e) in exc32.iter_mut().enumerate() {
                        let v = st.exc_buf[(e0 + i) - pit_min as usize] * coef;
                        *e = v;
                        st.exc_buf[e0 + i] = v;
                    }
                    pitch = pit_min;
                    pitch_gain = [0.0, coef, 0.0];
                }
                Ltp::ThreeTap(p) => {
                    let cb_size = 1usize << p.gain_bits;
                    let cdbk = &p.gain_cdbk[..4 * cb_size];
                    pitch = r.get(p.pitch_bits)? as i32 + pit_min;
                    let gi = r.get(p.gain_bits)? as usize;
                    let gain = [
                        0.015625 * f32::from(cdbk[gi * 4]) + 0.5,
                        0.015625 * f32::from(cdbk[gi * 4 + 1]) + 0.5,
                        0.015625 * f32::from(cdbk[gi * 4 + 2]) + 0.5,
                    ];
                    pitch_gain = gain;
                    exc32.fill(0.0);
                    let nsf = NB_SUBFRAME_SIZE as i32;
                    for i in 0..3i32 {
                        let pp = pitch + 1 - i;
                        let tmp1 = nsf.min(pp);
                        let g = gain[(2 - i) as usize];
                        for j in 0..tmp1 {
                            exc32[j as usize] += g * st.exc_buf[(e0 as i32 + j - pp) as usize];
                        }
                        let tmp3 = nsf.min(pp + pitch);
                        for j in tmp1..tmp3 {
                            exc32[j as usize] +=
                                g * st.exc_buf[(e0 as i32 + j - pp - pitch) as usize];
                        }
                    }
                }
                Ltp::None => return Err("speex: a narrowband sub-mode without pitch"),
            }
            for v in &mut exc32 {
                *v = if !v.is_normal() || v.abs() < 1e-8 {
                    0.0
                } else {
                    v.clamp(-32000.0, 32000.0)
                };
            }
            let tmp = gain_3tap_to_1tap(&pitch_gain);
            pitch_average += tmp;
            let near = |a: i32, b: i32, c: i32| (a - b).abs() < c;
            if (tmp > best_pitch_gain
                && !near(2 * best_pitch, pitch, 3)
                && !near(3 * best_pitch, pitch, 4)
                && !near(4 * best_pitch, pitch, 5))
                || (tmp > 0.6 * best_pitch_gain
                    && (near(best_pitch, 2 * pitch, 3)
                        || near(best_pitch, 3 * pitch, 4)
                        || near(best_pitch, 4 * pitch, 5)))
                || ((0.67 * tmp) > best_pitch_gain
                    && (near(2 * best_pitch, pitch, 3)
                        || near(3 * best_pitch, pitch, 4)
                        || near(4 * best_pitch, pitch, 5)))
            {
                best_pitch = pitch;
                if tmp > best_pitch_gain {
                    best_pitch_gain = tmp;
                }
            }
            innov.fill(0.0);
            let ener = match sm.have_subframe_gain {
                3 => EXC_GAIN_QUANT_SCAL3[r.get(3)? as usize] * ol_gain,
                1 => EXC_GAIN_QUANT_SCAL1[r.get(1)? as usize] * ol_gain,
                _ => ol_gain,
            };
            innovation(&sm.innov, &mut innov, r, &mut st.seed)?;
            for v in &mut innov {
                *v *= ener;
            }
            if sm.double_codebook {
                let mut innov2 = [0f32; NB_SUBFRAME_SIZE];
                innovation(&sm.innov, &mut innov2, r, &mut st.seed)?;
                for (i, v) in innov.iter_mut().zip(&innov2) {
                    *i += (0.454545 * ener) * v;
                }
            }
            for i in 0..NB_SUBFRAME_SIZE {
                st.exc_buf[e0 + i] = exc32[i] + innov[i];
            }
            if let Some(save) = st.innov_save {
                out[save + offset..save + offset + NB_SUBFRAME_SIZE].copy_from_slice(&innov);
            }
            if st.submode_id == 1 {
                // The vocoder mode: pulses at the pitch, mixed with the noise.
                let g = (1.5 * (ol_pitch_coef - 0.2)).clamp(0.0, 1.0);
                let exc = &mut st.exc_buf[e0..e0 + NB_SUBFRAME_SIZE];
                exc.fill(0.0);
                while st.voc_offset < NB_SUBFRAME_SIZE as i32 {
                    if st.voc_offset >= 0 {
                        exc[st.voc_offset as usize] =
                            (2.0 * ol_pitch as f32).sqrt() * (g * ol_gain);
                    }
                    st.voc_offset += ol_pitch;
                }
                st.voc_offset -= NB_SUBFRAME_SIZE as i32;
                for i in 0..NB_SUBFRAME_SIZE {
                    let exci = exc[i];
                    exc[i] = (0.7 * exc[i] + 0.3 * st.voc_m1) + ((1.0 - 0.85 * g) * innov[i])
                        - 0.15 * g * st.voc_m2;
                    st.voc_m1 = exci;
                    st.voc_m2 = innov[i];
                    st.voc_mean = 0.8 * st.voc_mean + 0.2 * exc[i];
                    exc[i] -= st.voc_mean;
                }
            }
        }
        if sm.comb_gain > 0.0 {
            let half = 2 * NB_SUBFRAME_SIZE;
            multicomb(
                &st.exc_buf,
                EXC - NB_SUBFRAME_SIZE,
                &mut out[..half],
                half,
                best_pitch,
                sm.comb_gain,
            );
            multicomb(
                &st.exc_buf,
                EXC + NB_SUBFRAME_SIZE,
                &mut out[half..2 * half],
                half,
                best_pitch,
                sm.comb_gain,
            );
        } else {
            out[..NB_FRAME_SIZE].copy_from_slice(
                &st.exc_buf[EXC - NB_SUBFRAME_SIZE..EXC - NB_SUBFRAME_SIZE + NB_FRAME_SIZE],
            );
        }
        let mut interp_qlsp = [0f32; NB_ORDER];
        let mut ak = [0f32; NB_ORDER];
        for sub in 0..NB_NB_SUBFRAMES {
            let offset = NB_SUBFRAME_SIZE * sub;
            lsp_interpolate(
                &st.old_qlsp,
                &qlsp,
                &mut interp_qlsp,
                sub,
                NB_NB_SUBFRAMES,
                0.002,
            );
            lsp_to_lpc(&interp_qlsp, &mut ak);
            let mut pi_g = 1f32;
            for i in (0..NB_ORDER).step_by(2) {
                pi_g += ak[i + 1] - ak[i];
            }
            st.pi_gain[sub] = pi_g;
            st.exc_rms[sub] =
                compute_rms(&st.exc_buf[EXC + offset..EXC + offset + NB_SUBFRAME_SIZE]);
            iir_mem(
                out,
                offset,
                offset,
                NB_SUBFRAME_SIZE,
                &st.interp_qlpc,
                &mut st.mem_sp,
            );
            st.interp_qlpc = ak;
        }
        if st.mode == 0 {
            highpass(&mut out[..NB_FRAME_SIZE], &mut st.mem_hp);
        }
        st.old_qlsp = qlsp;
        st.last_pitch_gain = 0.25 * pitch_average;
        st.first = false;
        Ok(())
    }

    /// A wideband (`mode` 1) or ultra-wideband (2) frame: the band below, then this
    /// mode's high band, joined by the QMF (FFmpeg's `sb_decode`).
    fn sb_decode(&mut self, mode: usize, r: &mut Bits, out: &mut [f32], left: usize) -> Parse<()> {
        let frame_size = self.st[mode].frame_size;
        if left * self.config.frame_size < 2 * frame_size {
            return Err("speex: a frame past its packet's buffer");
        }
        let low_innov = frame_size;
        self.st[mode - 1].innov_save = Some(low_innov);
        self.decode(mode - 1, r, out, left)?;
        let (low, high) = self.st.split_at_mut(mode);
        let lower = &low[mode - 1];
        let st = &mut high[0];
        let wideband = r.left() > 0 && r.peek32() >> 31 == 1;
        if wideband {
            r.skip(1)?;
            st.submode_id = r.get(SB_SUBMODE_BITS)? as usize;
        } else {
            st.submode_id = 0;
        }
        let sm = submode_of(mode, st.submode_id);
        if st.submode_id != 0 && sm.is_none() {
            return Err("speex: an invalid wideband sub-mode");
        }
        let Some(sm) = sm else {
            out[frame_size..2 * frame_size].fill(1e-15);
            st.first = true;
            let lpc = st.interp_qlpc;
            iir_mem(
                out,
                frame_size,
                frame_size,
                frame_size,
                &lpc[..st.lpc_size],
                &mut st.mem_sp,
            );
            qmf_synth(
                out,
                frame_size,
                st.full_frame_size,
                &mut st.g0_mem,
                &mut st.g1_mem,
            );
            return Ok(());
        };
        let low_pi_gain = lower.pi_gain;
        let low_exc_rms = lower.exc_rms;
        let lpc_size = st.lpc_size;
        let mut qlsp = [0f32; NB_ORDER];
        lsp_unquant(sm.lsp, &mut qlsp[..lpc_size], r)?;
        if st.first {
            st.old_qlsp = qlsp;
        }
        let sfs = st.subframe_size;
        let mut interp_qlsp = [0f32; NB_ORDER];
        let mut ak = [0f32; NB_ORDER];
        for sub in 0..st.nb_subframes {
            let offset = sfs * sub;
            let sp = frame_size + offset;
            if let Some(save) = st.innov_save {
                out[save + 2 * offset..save + 2 * offset + 2 * sfs].fill(0.0);
            }
            lsp_interpolate(
                &st.old_qlsp[..lpc_size],
                &qlsp[..lpc_size],
                &mut interp_qlsp[..lpc_size],
                sub,
                st.nb_subframes,
                0.05,
            );
            lsp_to_lpc(&interp_qlsp[..lpc_size], &mut ak[..lpc_size]);
            st.pi_gain[sub] = 1.0;
            let mut rh = 1f32;
            for i in (0..lpc_size).step_by(2) {
                rh += ak[i + 1] - ak[i];
                st.pi_gain[sub] += ak[i] + ak[i + 1];
            }
            let rl = low_pi_gain[sub];
            let filter_ratio = (rl + 0.01) / (rh + 0.01);
            let mut exc = [0f32; 80];
            if matches!(sm.innov, Innov::None) {
                let x = r.get(5)? as f32;
                let g = (0.125 * (x - 10.0)).exp() / filter_ratio;
                for i in (0..sfs).step_by(2) {
                    exc[i] = st.folding_gain * out[low_innov + offset + i] * g;
                    exc[i + 1] = -st.folding_gain * out[low_innov + offset + i + 1] * g;
                }
            } else {
                let el = low_exc_rms[sub];
                let mut gc = 0.87360 * GC_QUANT_BOUND[r.get(4)? as usize];
                if sfs == 80 {
                    gc = (f64::from(gc) * std::f64::consts::SQRT_2) as f32;
                }
                let scale = (gc * el) / filter_ratio;
                innovation(&sm.innov, &mut exc[..sfs], r, &mut st.seed)?;
                for v in &mut exc[..sfs] {
                    *v *= scale;
                }
                if sm.double_codebook {
                    let mut innov2 = [0f32; 80];
                    innovation(&sm.innov, &mut innov2[..sfs], r, &mut st.seed)?;
                    for (e, v) in exc.iter_mut().zip(&innov2[..sfs]) {
                        *e += (0.4 * scale) * v;
                    }
                }
            }
            if let Some(save) = st.innov_save {
                for i in 0..sfs {
                    out[save + 2 * offset + 2 * i] = exc[i];
                }
            }
            // The last subframe's excitation, through the last filter, into this one (as
            // FFmpeg's does).
            out[sp..sp + sfs].copy_from_slice(&st.exc_buf[..sfs]);
            iir_mem(
                out,
                sp,
                sp,
                sfs,
                &st.interp_qlpc[..lpc_size],
                &mut st.mem_sp,
            );
            st.exc_buf[..80].copy_from_slice(&exc);
            st.interp_qlpc[..lpc_size].copy_from_slice(&ak[..lpc_size]);
            st.exc_rms[sub] = compute_rms(&st.exc_buf[..sfs]);
        }
        qmf_synth(
            out,
            frame_size,
            st.full_frame_size,
            &mut st.g0_mem,
            &mut st.g1_mem,
        );
        st.old_qlsp = qlsp;
        st.first = false;
        Ok(())
    }
}

/// The QMF synthesis of the low band (`out[..half]`) and the high band (`out[half..]`)
/// into `n` samples at `out[..n]` (FFmpeg's `qmf_synth` with `h0`).
fn qmf_synth(out: &mut [f32], half: usize, n: usize, mem1: &mut [f32], mem2: &mut [f32]) {
    let (m2, n2) = (QMF_ORDER / 2, n / 2);
    let a = &H0;
    let mut xx1 = [0f32; 352];
    let mut xx2 = [0f32; 352];
    for i in 0..n2 {
        xx1[i] = out[n2 - 1 - i];
        xx2[i] = out[half + n2 - 1 - i];
    }
    for i in 0..m2 {
        xx1[n2 + i] = mem1[2 * i + 1];
        xx2[n2 + i] = mem2[2 * i + 1];
    }
    for i in (0..n2).step_by(2) {
        let (mut y0, mut y1, mut y2, mut y3) = (0f32, 0f32, 0f32, 0f32);
        let mut x10 = xx1[n2 - 2 - i];
        let mut x20 = xx2[n2 - 2 - i];
        for j in (0..m2).step_by(2) {
            let (a0, a1) = (a[2 * j], a[2 * j + 1]);
            let x11 = xx1[n2 - 1 + j - i];
            let x21 = xx2[n2 - 1 + j - i];
            y0 += a0 * (x11 - x21);
            y1 += a1 * (x11 + x21);
            y2 += a0 * (x10 - x20);
            y3 += a1 * (x10 + x20);
            let (a0, a1) = (a[2 * j + 2], a[2 * j + 3]);
            x10 = xx1[n2 + j - i];
            x20 = xx2[n2 + j - i];
            y0 += a0 * (x10 - x20);
            y1 += a1 * (x10 + x20);
            y2 += a0 * (x11 - x21);
            y3 += a1 * (x11 + x21);
        }
        out[2 * i] = 2.0 * y0;
        out[2 * i + 1] = 2.0 * y1;
        out[2 * i + 2] = 2.0 * y2;
        out[2 * i + 3] = 2.0 * y3;
    }
    for i in 0..m2 {
        mem1[2 * i + 1] = xx1[i];
        mem2[2 * i + 1] = xx2[i];
    }
}

/// Header-less mono Speex packets (FLV's tags: `chunks` of `src`, at `rate`) decoded as
/// they are read and handed out as a float WAV file: a packet that fails to decode is
/// its length of silence, so that the rest keeps its time.
pub(crate) struct PacketsWav {
    src: Box<dyn symphonia::core::io::MediaSource>,
    chunks: std::vec::IntoIter<(u64, u64)>,
    speex: Speex,
    pending: crate::codec::Pending,
}

impl PacketsWav {
    pub(crate) fn new(
        src: Box<dyn symphonia::core::io::MediaSource>,
        chunks: Vec<(u64, u64)>,
        rate: u32,
    ) -> Self {
        let speex = Speex::new(Config::from_rate(rate));
        let data = (chunks.len() * speex.packet_samples() * 4) as u64;
        let mut fmt = Vec::with_capacity(18);
        fmt.extend_from_slice(&3u16.to_le_bytes()); // IEEE float
        fmt.extend_from_slice(&1u16.to_le_bytes());
        fmt.extend_from_slice(&rate.to_le_bytes());
        fmt.extend_from_slice(&(rate * 4).to_le_bytes());
        fmt.extend_from_slice(&4u16.to_le_bytes());
        fmt.extend_from_slice(&32u16.to_le_bytes());
        fmt.extend_from_slice(&0u16.to_le_bytes());
        Self {
            src,
            chunks: chunks.into_iter(),
            speex,
            pending: crate::codec::Pending::new(crate::avi::wav_header(&fmt, data)),
        }
    }
}

impl std::io::Read for PacketsWav {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pending.is_empty() {
            let Some((at, len)) = self.chunks.next() else {
                return Ok(0);
            };
            let Some(packet) = crate::codec::read_chunk(&mut *self.src, (at, len))? else {
                // The file ends inside the packet: what decoded is all there is.
                self.chunks = Vec::new().into_iter();
                return Ok(0);
            };
            let mut samples = Vec::with_capacity(self.speex.packet_samples());
            if self.speex.packet(&packet, &mut samples).is_err() {
                samples.clear();
                samples.resize(self.speex.packet_samples(), 0.0);
            }
            self.pending.refill(samples);
        }
        Ok(self.pending.read(buf))
    }
}

/// A symphonia [`Decoder`] for Speex: each packet is a header's frames a packet.
pub(crate) struct SpeexDecoder {
    params: CodecParameters,
    speex: Speex,
    buf: AudioBuffer<f32>,
    channels: Channels,
    rate: u32,
    samples: Vec<f32>,
}

impl SpeexDecoder {
    fn decode_packet(&mut self, data: &[u8]) -> Result<()> {
        self.buf.clear();
        self.samples.clear();
        if let Err(why) = self.speex.packet(data, &mut self.samples) {
            return decode_error(why);
        }
        let ch = self.channels.count();
        let n = self.samples.len() / ch;
        make_room(&mut self.buf, self.rate, self.channels, n, n)?;
        self.buf.render_reserved(Some(n));
        for c in 0..ch {
            for (o, f) in self
                .buf
                .chan_mut(c)
                .iter_mut()
                .zip(self.samples.chunks_exact(ch))
            {
                *o = f[c];
            }
        }
        Ok(())
    }
}

impl Decoder for SpeexDecoder {
    fn try_new(params: &CodecParameters, _options: &DecoderOptions) -> Result<Self> {
        if params.codec != CODEC_TYPE_SPEEX {
            return unsupported_error("speex: not Speex");
        }
        let config = match params.extra_data.as_deref() {
            Some(h) if h.len() >= 80 => match Config::from_header(h) {
                Ok(c) => c,
                Err(why) => return unsupported_error(why),
            },
            _ => Config::from_rate(params.sample_rate.unwrap_or(16_000)),
        };
        let channels = if config.channels == 1 {
            Channels::FRONT_CENTRE
        } else {
            Channels::FRONT_LEFT | Channels::FRONT_RIGHT
        };
        let speex = Speex::new(config);
        Ok(Self {
            params: params.clone(),
            buf: AudioBuffer::new(
                speex.packet_samples() as u64,
                SignalSpec::new(config.rate, channels),
            ),
            channels,
            rate: config.rate,
            samples: Vec::new(),
            speex,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(CODEC_TYPE_SPEEX, "speex", "Speex")]
    }

    fn reset(&mut self) {}

    buffered_decoder_methods!(|this, packet| this.decode_packet(&packet.data));
}
