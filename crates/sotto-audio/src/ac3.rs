//! AC-3 (Dolby Digital, ATSC A/52): the audio of DVDs, of broadcast TV (ATSC, many DVB
//! channels), and of most films' 5.1 tracks in Matroska and MP4. No Rust crate decodes it
//! and symphonia has no decoder, so this is sotto's own, written from the standard (A/52
//! §5–7): the syncframe's header and bit stream information, and each of its six audio
//! blocks' exponents, parametric bit allocation, mantissas, coupling, rematrixing, dynamic
//! range gain and inverse transforms (long and block-switched short ones) with the KBD
//! window. Channels come out in FFmpeg's order (front left and right first, then centre,
//! LFE and the surrounds), at full bandwidth and with the stream's dynamic range gain
//! applied, as FFmpeg's decoder (which faster-whisper hears through) gives them.
//!
//! E-AC-3 (Dolby Digital Plus, A/52 Annex E: streaming services' 5.1) too: its frames of
//! one to six blocks, frame-level strategies, and spectral extension; as FFmpeg does, the
//! first program's independent substream is decoded (a 7.1 stream's 5.1 core) and the
//! dependent ones are skipped. Its adaptive hybrid transform and enhanced coupling (which
//! FFmpeg's decoder lacks too) are refused by name.

use std::sync::{Arc, OnceLock};

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftPlanner};
use symphonia::core::audio::{AsAudioBufferRef, AudioBuffer, AudioBufferRef, Channels};
use symphonia::core::audio::{Signal, SignalSpec};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_EAC3};
use symphonia::core::codecs::{Decoder, DecoderOptions, FinalizeResult};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::formats::Packet;
use symphonia::core::support_codec;

/// symphonia's one codec type for AC-3 and E-AC-3.
pub(crate) const CODEC_TYPE_AC3: symphonia::core::codecs::CodecType = CODEC_TYPE_EAC3;

/// Audio blocks in a syncframe, and samples a block adds per channel.
const BLOCKS: usize = 6;
const BLOCK: usize = 256;
/// Samples a syncframe holds per channel.
pub(crate) const FRAME_SAMPLES: usize = BLOCKS * BLOCK;

/// Where the per-channel arrays keep the coupling channel and the LFE channel; the
/// full-bandwidth channels are 0–4.
const CPL: usize = 5;
const LFE: usize = 6;
const CHANNELS: usize = 7;

/// Frame sizes in 16-bit words by `frmsizecod` and `fscod` (A/52 table 5.18).
const FRAME_WORDS: [[u16; 3]; 38] = [
    [64, 69, 96],
    [64, 70, 96],
    [80, 87, 120],
    [80, 88, 120],
    [96, 104, 144],
    [96, 105, 144],
    [112, 121, 168],
    [112, 122, 168],
    [128, 139, 192],
    [128, 140, 192],
    [160, 174, 240],
    [160, 175, 240],
    [192, 208, 288],
    [192, 209, 288],
    [224, 243, 336],
    [224, 244, 336],
    [256, 278, 384],
    [256, 279, 384],
    [320, 348, 480],
    [320, 349, 480],
    [384, 417, 576],
    [384, 418, 576],
    [448, 487, 672],
    [448, 488, 672],
    [512, 557, 768],
    [512, 558, 768],
    [640, 696, 960],
    [640, 697, 960],
    [768, 835, 1152],
    [768, 836, 1152],
    [896, 975, 1344],
    [896, 976, 1344],
    [1024, 1114, 1536],
    [1024, 1115, 1536],
    [1152, 1253, 1728],
    [1152, 1254, 1728],
    [1280, 1393, 1920],
    [1280, 1394, 1920],
];

const RATES: [u32; 3] = [48_000, 44_100, 32_000];

/// Full-bandwidth channels by audio coding mode (`acmod`).
const FULL_CHANNELS: [usize; 8] = [2, 1, 2, 3, 3, 4, 4, 5];

/// The first transform coefficient of each of the 50 critical bands, and the end.
const BAND_START: [u8; 51] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 31, 34, 37, 40, 43, 46, 49, 55, 61, 67, 73, 79, 85, 97, 109, 121, 133, 157, 181,
    205, 229, 253,
];

/// The critical band of each transform coefficient.
const BIN_BAND: [u8; 256] = {
    let mut t = [49u8; 256];
    let mut band = 0;
    while band < 50 {
        let mut bin = BAND_START[band] as usize;
        while bin < BAND_START[band + 1] as usize {
            t[bin] = band as u8;
            bin += 1;
        }
        band += 1;
    }
    t
};

/// The log-addition table of the bit allocation (A/52 table 7.14).
const LOG_ADD: [u8; 260] = [
    0x40, 0x3f, 0x3e, 0x3d, 0x3c, 0x3b, 0x3a, 0x39, 0x38, 0x37, 0x36, 0x35, 0x34, 0x34, 0x33, 0x32,
    0x31, 0x30, 0x2f, 0x2f, 0x2e, 0x2d, 0x2c, 0x2c, 0x2b, 0x2a, 0x29, 0x29, 0x28, 0x27, 0x26, 0x26,
    0x25, 0x24, 0x24, 0x23, 0x23, 0x22, 0x21, 0x21, 0x20, 0x20, 0x1f, 0x1e, 0x1e, 0x1d, 0x1d, 0x1c,
    0x1c, 0x1b, 0x1b, 0x1a, 0x1a, 0x19, 0x19, 0x18, 0x18, 0x17, 0x17, 0x16, 0x16, 0x15, 0x15, 0x15,
    0x14, 0x14, 0x13, 0x13, 0x13, 0x12, 0x12, 0x12, 0x11, 0x11, 0x11, 0x10, 0x10, 0x10, 0x0f, 0x0f,
    0x0f, 0x0e, 0x0e, 0x0e, 0x0d, 0x0d, 0x0d, 0x0d, 0x0c, 0x0c, 0x0c, 0x0c, 0x0b, 0x0b, 0x0b, 0x0b,
    0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x09, 0x09, 0x09, 0x09, 0x09, 0x08, 0x08, 0x08, 0x08, 0x08, 0x08,
    0x07, 0x07, 0x07, 0x07, 0x07, 0x07, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x06, 0x05, 0x05,
    0x05, 0x05, 0x05, 0x05, 0x05, 0x05, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04,
    0x04, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x03, 0x02,
    0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02,
    0x02, 0x02, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
    0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
    0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00,
];

/// The hearing threshold of each critical band at 48, 44.1 and 32 kHz (A/52 table 7.15).
const HEARING: [[u16; 3]; 50] = [
    [0x04d0, 0x04f0, 0x0580],
    [0x04d0, 0x04f0, 0x0580],
    [0x0440, 0x0460, 0x04b0],
    [0x0400, 0x0410, 0x0450],
    [0x03e0, 0x03e0, 0x0420],
    [0x03c0, 0x03d0, 0x03f0],
    [0x03b0, 0x03c0, 0x03e0],
    [0x03b0, 0x03b0, 0x03d0],
    [0x03a0, 0x03b0, 0x03c0],
    [0x03a0, 0x03a0, 0x03b0],
    [0x03a0, 0x03a0, 0x03b0],
    [0x03a0, 0x03a0, 0x03b0],
    [0x03a0, 0x03a0, 0x03a0],
    [0x0390, 0x03a0, 0x03a0],
    [0x0390, 0x0390, 0x03a0],
    [0x0390, 0x0390, 0x03a0],
    [0x0380, 0x0390, 0x03a0],
    [0x0380, 0x0380, 0x03a0],
    [0x0370, 0x0380, 0x03a0],
    [0x0370, 0x0380, 0x03a0],
    [0x0360, 0x0370, 0x0390],
    [0x0360, 0x0370, 0x0390],
    [0x0350, 0x0360, 0x0390],
    [0x0350, 0x0360, 0x0390],
    [0x0340, 0x0350, 0x0380],
    [0x0340, 0x0350, 0x0380],
    [0x0330, 0x0340, 0x0380],
    [0x0320, 0x0340, 0x0370],
    [0x0310, 0x0320, 0x0360],
    [0x0300, 0x0310, 0x0350],
    [0x02f0, 0x0300, 0x0340],
    [0x02f0, 0x02f0, 0x0330],
    [0x02f0, 0x02f0, 0x0320],
    [0x02f0, 0x02f0, 0x0310],
    [0x0300, 0x02f0, 0x0300],
    [0x0310, 0x0300, 0x02f0],
    [0x0340, 0x0320, 0x02f0],
    [0x0390, 0x0350, 0x02f0],
    [0x03e0, 0x0390, 0x0300],
    [0x0420, 0x03e0, 0x0310],
    [0x0460, 0x0420, 0x0330],
    [0x0490, 0x0450, 0x0350],
    [0x04a0, 0x04a0, 0x03c0],
    [0x0460, 0x0490, 0x0410],
    [0x0440, 0x0460, 0x0470],
    [0x0440, 0x0440, 0x04a0],
    [0x0520, 0x0480, 0x0460],
    [0x0800, 0x0630, 0x0440],
    [0x0840, 0x0840, 0x0450],
    [0x0840, 0x0840, 0x04e0],
];

/// Bit allocation pointers by masked power (A/52 table 7.16).
const BAP: [u8; 64] = [
    0, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9,
    10, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14,
    15, 15, 15, 15, 15, 15, 15, 15, 15,
];

const SLOW_DECAY: [i32; 4] = [0x0f, 0x11, 0x13, 0x15];
const FAST_DECAY: [i32; 4] = [0x3f, 0x53, 0x67, 0x7b];
const SLOW_GAIN: [i32; 4] = [0x540, 0x4d8, 0x478, 0x410];
const DB_PER_BIT: [i32; 4] = [0x000, 0x700, 0x900, 0xb00];
const FLOOR: [i32; 8] = [0x2f0, 0x2b0, 0x270, 0x230, 0x1f0, 0x170, 0x0f0, -0x800];
const FAST_GAIN: [i32; 8] = [0x080, 0x100, 0x180, 0x200, 0x280, 0x300, 0x380, 0x400];

/// The first coefficient of each rematrixing band, and the end.
const REMATRIX_BANDS: [usize; 5] = [13, 25, 37, 61, 253];

/// Bits of an asymmetrically quantized mantissa by bit allocation pointer (6–15).
const MANTISSA_BITS: [u32; 16] = [0, 0, 0, 0, 0, 0, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16];

/// E-AC-3's exponent strategies of a frame's six blocks for each 5-bit code (A/52 table
/// E2.14; 0 reuse, 1 D15, 2 D25, 3 D45).
const FRAME_STRATEGIES: [[u8; 6]; 32] = [
    [1, 0, 0, 0, 0, 0],
    [1, 0, 0, 0, 0, 3],
    [1, 0, 0, 0, 2, 0],
    [1, 0, 0, 0, 3, 3],
    [2, 0, 0, 2, 0, 0],
    [2, 0, 0, 2, 0, 3],
    [2, 0, 0, 3, 2, 0],
    [2, 0, 0, 3, 3, 3],
    [2, 0, 1, 0, 0, 0],
    [2, 0, 2, 0, 0, 3],
    [2, 0, 2, 0, 2, 0],
    [2, 0, 2, 0, 3, 3],
    [2, 0, 3, 2, 0, 0],
    [2, 0, 3, 2, 0, 3],
    [2, 0, 3, 3, 2, 0],
    [2, 0, 3, 3, 3, 3],
    [3, 1, 0, 0, 0, 0],
    [3, 1, 0, 0, 0, 3],
    [3, 2, 0, 0, 2, 0],
    [3, 2, 0, 0, 3, 3],
    [3, 2, 0, 2, 0, 0],
    [3, 2, 0, 2, 0, 3],
    [3, 2, 0, 3, 2, 0],
    [3, 2, 0, 3, 3, 3],
    [3, 3, 1, 0, 0, 0],
    [3, 3, 2, 0, 0, 3],
    [3, 3, 2, 0, 2, 0],
    [3, 3, 2, 0, 3, 3],
    [3, 3, 3, 2, 0, 0],
    [3, 3, 3, 2, 0, 3],
    [3, 3, 3, 3, 2, 0],
    [3, 3, 3, 3, 3, 3],
];

/// E-AC-3's default banding of the coupling and spectral extension sub-bands (A/52
/// tables E2.16 and E2.15): 1 joins a sub-band to the one before.
const DEFAULT_CPL_BANDS: [u8; 18] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1];
const DEFAULT_SPX_BANDS: [u8; 17] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1];

/// What a frame that a decoder lacks a coding tool for fails with, to be told from damage.
const NO_AHT: &str = "ac3: E-AC-3's adaptive hybrid transform is not decoded";
const NO_ECPL: &str = "ac3: E-AC-3's enhanced coupling is not decoded";
const NO_REDUCED: &str = "ac3: E-AC-3 at a reduced sample rate is not decoded";

/// The transform's scale and sign in A/52's conventions: what makes the samples FFmpeg's
/// (measured on its decodes: the same to within its dither).
const OUTPUT_GAIN: f32 = -2.0;

/// What a syncframe's first seven bytes say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Header {
    pub(crate) rate: u32,
    /// The whole frame's bytes.
    pub(crate) len: usize,
    /// E-AC-3 (Dolby Digital Plus, A/52 Annex E).
    pub(crate) eac3: bool,
    /// Audio blocks in the frame: 6 for AC-3, 1, 2, 3 or 6 for E-AC-3.
    blocks: usize,
    /// An E-AC-3 frame of a dependent substream (7.1's extra channels) or of a program
    /// past the first, which FFmpeg skips too.
    extra: bool,
    /// E-AC-3's stream type: 0 independent, 1 dependent, 2 converted from AC-3.
    stream_type: u8,
    /// E-AC-3 at half its rates (`fscod` 3), which FFmpeg does not decode either.
    reduced: bool,
    acmod: u8,
    lfe: bool,
}

impl Header {
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let b: &[u8; 7] = b.get(..7)?.try_into().ok()?;
        if b[..2] != [0x0B, 0x77] {
            return None;
        }
        let bsid = b[5] >> 3;
        let fscod = usize::from(b[4] >> 6);
        match bsid {
            // AC-3; 9 and 10 are its half- and quarter-rate variants.
            0..=10 => {
                let words = *FRAME_WORDS.get(usize::from(b[4] & 0x3F))?.get(fscod)?;
                let mut r = Bits::new(&b[6..]);
                let acmod = r.get(3).ok()? as u8;
                if acmod & 1 != 0 && acmod != 1 {
                    r.skip(2).ok()?;
                }
                if acmod & 4 != 0 {
                    r.skip(2).ok()?;
                }
                if acmod == 2 {
                    r.skip(2).ok()?;
                }
                let lfe = r.get(1).ok()? == 1;
                Some(Self {
                    rate: RATES[fscod] >> bsid.saturating_sub(8),
                    len: usize::from(words) * 2,
                    eac3: false,
                    blocks: BLOCKS,
                    extra: false,
                    stream_type: 2,
                    reduced: false,
                    acmod,
                    lfe,
                })
            }
            11..=16 => {
                let words = (usize::from(b[2] & 7) << 8 | usize::from(b[3])) + 1;
                let code = usize::from((b[4] >> 4) & 3);
                let (rate, blocks) = match fscod {
                    3 => (*[24_000, 22_050, 16_000].get(code)?, BLOCKS),
                    _ => (RATES[fscod], [1, 2, 3, 6][code]),
                };
                let (stream_type, substream) = (b[2] >> 6, (b[2] >> 3) & 7);
                if stream_type == 3 {
                    return None;
                }
                Some(Self {
                    rate,
                    len: words * 2,
                    eac3: true,
                    blocks,
                    extra: stream_type == 1 || substream != 0,
                    stream_type,
                    reduced: fscod == 3,
                    acmod: (b[4] >> 1) & 7,
                    lfe: b[4] & 1 == 1,
                })
            }
            _ => None,
        }
        .filter(|h| h.len >= 8)
    }

    /// The frame's channels, in the order they come out.
    pub(crate) fn channels(&self) -> Channels {
        let mut mask = Channels::empty();
        for &c in coded_positions(self.acmod) {
            mask |= c;
        }
        if self.lfe {
            mask |= Channels::LFE1;
        }
        mask
    }
}

/// The positions of an audio coding mode's full-bandwidth channels in their coded order
/// (FFmpeg's names for them: its 5.0 has side surrounds, its 2.1 and 4.0 a back centre).
fn coded_positions(acmod: u8) -> &'static [Channels] {
    use Channels as C;
    match acmod {
        0 | 2 => &[C::FRONT_LEFT, C::FRONT_RIGHT],
        1 => &[C::FRONT_LEFT],
        3 => &[C::FRONT_LEFT, C::FRONT_CENTRE, C::FRONT_RIGHT],
        4 => &[C::FRONT_LEFT, C::FRONT_RIGHT, C::REAR_CENTRE],
        5 => &[
            C::FRONT_LEFT,
            C::FRONT_CENTRE,
            C::FRONT_RIGHT,
            C::REAR_CENTRE,
        ],
        6 => &[C::FRONT_LEFT, C::FRONT_RIGHT, C::SIDE_LEFT, C::SIDE_RIGHT],
        _ => &[
            C::FRONT_LEFT,
            C::FRONT_CENTRE,
            C::FRONT_RIGHT,
            C::SIDE_LEFT,
            C::SIDE_RIGHT,
        ],
    }
}

/// The bit stream ran past its frame.
#[derive(Debug)]
struct Overrun;

type Parse<T> = std::result::Result<T, &'static str>;

impl From<Overrun> for &'static str {
    fn from(_: Overrun) -> Self {
        "ac3: the frame's fields run past its end"
    }
}

/// Reads a frame's bits, most significant first.
struct Bits<'a> {
    data: &'a [u8],
    /// Bits read.
    pos: usize,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// The next `n` (1 to 16) bits.
    fn get(&mut self, n: u32) -> std::result::Result<u32, Overrun> {
        debug_assert!((1..=16).contains(&n));
        let end = self.pos + n as usize;
        if end > self.data.len() * 8 {
            return Err(Overrun);
        }
        let byte = self.pos / 8;
        let word = match self.data.get(byte..byte + 4) {
            Some(four) => u32::from_be_bytes(four.try_into().expect("four bytes")),
            None => {
                let mut word = [0u8; 4];
                let rest = &self.data[byte..];
                word[..rest.len()].copy_from_slice(rest);
                u32::from_be_bytes(word)
            }
        } << (self.pos % 8);
        self.pos = end;
        Ok(word >> (32 - n))
    }

    fn bit(&mut self) -> std::result::Result<bool, Overrun> {
        self.get(1).map(|b| b == 1)
    }

    /// The next `n` bits as a two's complement number.
    fn signed(&mut self, n: u32) -> std::result::Result<i32, Overrun> {
        let v = self.get(n)?;
        Ok(((v << (32 - n)) as i32) >> (32 - n))
    }

    fn skip(&mut self, n: usize) -> std::result::Result<(), Overrun> {
        if self.pos + n > self.data.len() * 8 {
            return Err(Overrun);
        }
        self.pos += n;
        Ok(())
    }
}

/// The inverse transform of A/52 §7.9: `m` coefficients to `2m` samples, through a
/// DCT-IV of `m` points computed with a complex FFT of `m / 2`.
struct Imdct {
    m: usize,
    fft: Arc<dyn Fft<f32>>,
    /// `e^{iπ(k + 1/4)/m}` and `e^{iπp/m}`: the DCT-IV's twiddles before and after the FFT.
    pre: Vec<Complex32>,
    post: Vec<Complex32>,
    buf: Vec<Complex32>,
    scratch: Vec<Complex32>,
}

impl Imdct {
    fn new(m: usize) -> Self {
        let fft = FftPlanner::new().plan_fft_inverse(m / 2);
        let twiddle = |a: f64| Complex32::new(a.cos() as f32, a.sin() as f32);
        let pi = std::f64::consts::PI;
        let scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
        Self {
            m,
            pre: (0..m / 2)
                .map(|k| twiddle(pi * (k as f64 + 0.25) / m as f64))
                .collect(),
            post: (0..m / 2)
                .map(|p| twiddle(pi * p as f64 / m as f64))
                .collect(),
            buf: vec![Complex32::default(); m / 2],
            fft,
            scratch,
        }
    }

    /// The DCT-IV of `x` (every `step`-th value from `first`, `m` of them) into `c`:
    /// `c[n] = Σ x[k] cos(π/m (n + ½)(k + ½))`.
    fn dct4(&mut self, x: &[f32], first: usize, step: usize, c: &mut [f32]) {
        let m = self.m;
        let at = |k: usize| x[first + k * step];
        for (k, (b, t)) in self.buf.iter_mut().zip(&self.pre).enumerate() {
            *b = Complex32::new(at(2 * k), -at(m - 1 - 2 * k)) * t;
        }
        self.fft
            .process_with_scratch(&mut self.buf, &mut self.scratch);
        for (p, (b, t)) in self.buf.iter().zip(&self.post).enumerate() {
            let w = b * t;
            c[2 * p] = w.re;
            c[m - 1 - 2 * p] = w.im;
        }
    }
}

/// A block's two inverse transforms: the long one (256 coefficients), and the pair of short
/// ones that block switching interleaves (128 each, at even and odd coefficients).
struct Transforms {
    long: Imdct,
    short: Imdct,
    c: [f32; BLOCK],
}

impl Transforms {
    fn new() -> Self {
        Self {
            long: Imdct::new(BLOCK),
            short: Imdct::new(BLOCK / 2),
            c: [0.0; BLOCK],
        }
    }

    /// The 512 samples, before the window, of a block's coefficients.
    fn block(&mut self, coeffs: &[f32; BLOCK], short: bool, y: &mut [f32; 2 * BLOCK]) {
        if short {
            let (first, second) = y.split_at_mut(BLOCK);
            let c = &mut self.c[..BLOCK / 2];
            self.short.dct4(coeffs, 0, 2, c);
            unfold(c, 0, first);
            self.short.dct4(coeffs, 1, 2, c);
            unfold(c, BLOCK / 2, second);
        } else {
            self.long.dct4(coeffs, 0, 1, &mut self.c);
            unfold(&self.c, BLOCK / 2, y);
        }
    }
}

/// `2m` samples of the transform whose DCT-IV is `c`, from `offset` (at most `m`) samples
/// into its periodic extension: `c`, then `c` reversed and negated, then `c` negated
/// (A/52's long transform starts `m / 2` in; its two short ones, 0 and `m`).
fn unfold(c: &[f32], offset: usize, out: &mut [f32]) {
    let m = c.len();
    let mut ext = [0f32; 3 * BLOCK];
    ext[..m].copy_from_slice(c);
    for (e, &v) in ext[m..2 * m].iter_mut().zip(c.iter().rev()) {
        *e = -v;
    }
    for (e, &v) in ext[2 * m..3 * m].iter_mut().zip(c) {
        *e = -v;
    }
    out.copy_from_slice(&ext[offset..offset + 2 * m]);
}

/// The first half of A/52's window: Kaiser-Bessel derived, α = 5, 512 points.
fn window() -> &'static [f32; 256] {
    static WINDOW: OnceLock<[f32; 256]> = OnceLock::new();
    WINDOW.get_or_init(|| {
        fn bessel_i0(x: f64) -> f64 {
            let (mut sum, mut term, mut k) = (1.0, 1.0, 1.0);
            while term > 1e-12 * sum {
                term *= (x / (2.0 * k)) * (x / (2.0 * k));
                sum += term;
                k += 1.0;
            }
            sum
        }
        let alpha = 5.0 * std::f64::consts::PI;
        let kernel: Vec<f64> = (0..=256)
            .map(|j| {
                let t = j as f64 / 128.0 - 1.0;
                bessel_i0(alpha * (1.0 - t * t).sqrt())
            })
            .collect();
        let total: f64 = kernel.iter().sum();
        let mut w = [0f32; 256];
        let mut acc = 0.0;
        for (o, k) in w.iter_mut().zip(&kernel) {
            acc += k;
            *o = (acc / total).sqrt() as f32;
        }
        w
    })
}

/// `2^-e` for the exponents a frame may code.
const POW2_NEG: [f32; 25] = {
    let mut t = [1f32; 25];
    let mut i = 1;
    while i < 25 {
        t[i] = t[i - 1] * 0.5;
        i += 1;
    }
    t
};

/// The mantissas of bit allocation pointers 1, 2 and 4, which come in groups of three,
/// three and two values: the values of a group not yet used, across a block's channels.
#[derive(Default)]
struct Groups {
    b1: Group<3>,
    b2: Group<3>,
    b4: Group<2>,
}

/// A group's values in the order they are used, and how many are left.
struct Group<const N: usize>([f32; N], usize);

impl<const N: usize> Group<N> {
    /// The group's next value; a new group from `read` (its codes, most significant
    /// first, of a quantizer of `levels` levels) where this one is used up.
    fn next(&mut self, read: impl FnOnce() -> Parse<[u32; N]>, levels: u32) -> Parse<f32> {
        if self.1 == 0 {
            self.0 = read()?.map(|c| level(c, levels));
            self.1 = N;
        }
        self.1 -= 1;
        Ok(self.0[N - 1 - self.1])
    }
}

impl<const N: usize> Default for Group<N> {
    fn default() -> Self {
        Self([0.0; N], 0)
    }
}

/// The value of level `code` of a symmetric quantizer of `levels` levels.
fn level(code: u32, levels: u32) -> f32 {
    (2 * code as i32 - (levels as i32 - 1)) as f32 / levels as f32
}

/// One delta bit allocation segment: its offset in bands, length and value.
type Segment = (u8, u8, u8);

/// What a frame's blocks carry over from one to the next (and, as FFmpeg keeps it, from
/// one frame to the next).
struct Blocks {
    full: usize,
    acmod: u8,
    lfe: bool,
    /// log2 of the rate divisor of bsid 9 and 10.
    shift: u32,
    fscod: usize,
    block_switch: [bool; 5],
    dither: [bool; 5],
    dynrng: [f32; 2],
    cpl_in_use: bool,
    in_cpl: [bool; 5],
    phase_in_use: bool,
    cpl_bands: Vec<usize>,
    cpl_coords: [[f32; 18]; 5],
    phase: [bool; 18],
    rematrix: [bool; 4],
    rematrix_bands: usize,
    strategy: [u8; CHANNELS],
    start: [usize; CHANNELS],
    end: [usize; CHANNELS],
    exps: [[u8; 256]; CHANNELS],
    slow_decay: i32,
    fast_decay: i32,
    slow_gain: i32,
    db_per_bit: i32,
    floor: i32,
    snr: [i32; CHANNELS],
    fast_gain: [i32; CHANNELS],
    cpl_leak: (i32, i32),
    dba_mode: [u8; CHANNELS],
    dba: [Vec<Segment>; CHANNELS],
    /// What each channel's bit allocation was last computed from, besides its exponents
    /// (which set `fresh`): blocks that change neither reuse it, as most do.
    computed: [Option<Allocation>; CHANNELS],
    fresh: [bool; CHANNELS],
    bap: [[u8; 256]; CHANNELS],
    coeffs: [[f32; 256]; CHANNELS],
    /// The dither's state (a 32-bit xorshift).
    seed: u32,
    syntax: Syntax,
    /// E-AC-3's frame header: whether each block has a coupling strategy, and uses
    /// coupling; each block's exponent strategies.
    cpl_strategy: [bool; BLOCKS],
    cpl_use: [bool; BLOCKS],
    strategies: [[u8; CHANNELS]; BLOCKS],
    first_cpl_coords: [bool; 5],
    first_cpl_leak: bool,
    spx: Spx,
}

/// E-AC-3's switches for what a frame's blocks carry (A/52 §E.1.2.3); AC-3's are all on,
/// with an SNR offset for each channel.
#[derive(Clone, Copy)]
struct Syntax {
    eac3: bool,
    /// An independent stream's frame (not one converted from AC-3).
    independent: bool,
    block_switch: bool,
    dither: bool,
    bit_alloc: bool,
    fast_gain: bool,
    dba: bool,
    skip: bool,
    snr_strategy: u32,
}

const AC3_SYNTAX: Syntax = Syntax {
    eac3: false,
    independent: false,
    block_switch: true,
    dither: true,
    bit_alloc: true,
    fast_gain: false,
    dba: true,
    skip: true,
    snr_strategy: 2,
};

/// E-AC-3's spectral extension (A/52 §E.3.6): the band above `src` rebuilt from copies of
/// the band from `dst`, scaled to each band's coded energy and blended with noise.
#[derive(Default)]
struct Spx {
    in_use: bool,
    uses: [bool; 5],
    first_coords: [bool; 5],
    dst: usize,
    src: usize,
    end: usize,
    bands: Vec<usize>,
    /// Each channel's notch at the wrap points, where coded (A/52 table E.25's code).
    atten: [Option<u32>; 5],
    noise: [[f32; 17]; 5],
    signal: [[f32; 17]; 5],
}

/// The inputs of a channel's bit allocation other than its exponents.
#[derive(Clone, PartialEq)]
struct Allocation {
    range: (usize, usize),
    decay: (i32, i32),
    slow_gain: i32,
    db_per_bit: i32,
    floor: i32,
    snr: i32,
    fast_gain: i32,
    cpl_leak: (i32, i32),
    dba: Option<Vec<Segment>>,
    rate: (usize, u32),
}

/// A delta bit allocation mode: reuse, new, none (3 is reserved).
const DBA_NONE: u8 = 2;

impl Blocks {
    fn new() -> Self {
        Self {
            full: 0,
            acmod: 0,
            lfe: false,
            shift: 0,
            fscod: 0,
            block_switch: [false; 5],
            dither: [false; 5],
            dynrng: [1.0; 2],
            cpl_in_use: false,
            in_cpl: [false; 5],
            phase_in_use: false,
            cpl_bands: Vec::new(),
            cpl_coords: [[0.0; 18]; 5],
            phase: [false; 18],
            rematrix: [false; 4],
            rematrix_bands: 0,
            strategy: [0; CHANNELS],
            start: [0; CHANNELS],
            end: [0; CHANNELS],
            exps: [[0; 256]; CHANNELS],
            slow_decay: 0,
            fast_decay: 0,
            slow_gain: 0,
            db_per_bit: 0,
            floor: 0,
            snr: [0; CHANNELS],
            fast_gain: [0; CHANNELS],
            cpl_leak: (0, 0),
            dba_mode: [DBA_NONE; CHANNELS],
            dba: Default::default(),
            computed: Default::default(),
            fresh: [true; CHANNELS],
            bap: [[0; 256]; CHANNELS],
            coeffs: [[0.0; 256]; CHANNELS],
            seed: 0x2545_F491,
            syntax: AC3_SYNTAX,
            cpl_strategy: [false; BLOCKS],
            cpl_use: [false; BLOCKS],
            strategies: [[0; CHANNELS]; BLOCKS],
            first_cpl_coords: [true; 5],
            first_cpl_leak: false,
            spx: Spx::default(),
        }
    }

    /// The channels with exponents and mantissas this block, in their coded order: the
    /// coupling channel (where in use), the full-bandwidth ones, the LFE.
    fn coded(&self) -> impl Iterator<Item = usize> {
        let cpl = self.cpl_in_use.then_some(CPL);
        let lfe = self.lfe.then_some(LFE);
        cpl.into_iter().chain(0..self.full).chain(lfe)
    }

    /// A dither value, uniform in ±0.707 (A/52 §7.3.4).
    fn dither_value(&mut self) -> f32 {
        let mut x = self.seed;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.seed = x;
        (x as f32 / u32::MAX as f32 - 0.5) * std::f32::consts::SQRT_2
    }

    /// Reads audio block `blk`'s side information and mantissas into `coeffs`.
    fn read(&mut self, r: &mut Bits, blk: usize) -> Parse<()> {
        let full = self.full;
        let first = blk == 0;
        let syntax = self.syntax;
        if syntax.block_switch {
            for ch in 0..full {
                self.block_switch[ch] = r.bit()?;
            }
        }
        if syntax.dither {
            for ch in 0..full {
                self.dither[ch] = r.bit()?;
            }
        }
        for i in 0..1 + usize::from(self.acmod == 0) {
            if r.bit()? {
                // A 3-bit signed power of two, then five bits of mantissa below an implied 1.
                let v = r.get(8)?;
                let exp = ((v as i32) << 24 >> 29) as f32;
                self.dynrng[i] = exp.exp2() * (32 + (v & 0x1F)) as f32 / 32.0;
            } else if first {
                self.dynrng[i] = 1.0;
            }
        }
        if syntax.eac3 {
            self.spx_strategy(r, first)?;
            self.spx_coordinates(r)?;
        }
        self.coupling_strategy(r, blk)?;
        if self.cpl_in_use {
            self.coupling_coordinates(r, first)?;
        }
        if self.acmod == 2 {
            if (syntax.eac3 && first) || r.bit()? {
                self.rematrix_bands = 4;
                if self.cpl_in_use && self.start[CPL] <= 61 {
                    self.rematrix_bands -= 1 + usize::from(self.start[CPL] == 37);
                } else if self.spx.in_use && self.spx.src <= 61 {
                    self.rematrix_bands -= 1;
                }
                for f in &mut self.rematrix[..self.rematrix_bands] {
                    *f = r.bit()?;
                }
            } else if first {
                self.rematrix_bands = 0;
            }
        }
        let coded: Vec<usize> = self.coded().collect();
        for &ch in &coded {
            self.strategy[ch] = match syntax.eac3 {
                true => self.strategies[blk][ch],
                false => r.get(if ch == LFE { 1 } else { 2 })? as u8,
            };
        }
        self.bandwidths(r)?;
        for &ch in &coded {
            self.exponents(r, ch)?;
        }
        self.allocation_parameters(r, first, &coded)?;
        if syntax.skip && r.bit()? {
            let skip = r.get(9)? as usize;
            r.skip(8 * skip)?;
        }
        for &ch in &coded {
            self.allocate(ch)?;
        }
        self.mantissas(r)?;
        if self.spx.in_use {
            self.extend_spectrum();
        }
        Ok(())
    }

    /// A band structure: sub-bands of 12 coefficients from `begin` to `end`, each joined to
    /// the one before where its bit (coded, or E-AC-3's default where none is) says.
    /// None where an E-AC-3 block after the first keeps the structure it had.
    fn band_structure(
        &self,
        r: &mut Bits,
        blk: usize,
        (begin, end): (usize, usize),
        default: &[u8],
    ) -> Parse<Option<Vec<usize>>> {
        let coded: Vec<u8> = if !self.syntax.eac3 || r.bit()? {
            (begin + 1..end)
                .map(|_| r.bit().map(u8::from))
                .collect::<std::result::Result<_, _>>()?
        } else if blk == 0 {
            default
                .get(begin + 1..end)
                .ok_or("ac3: a band structure past its table")?
                .to_vec()
        } else {
            return Ok(None);
        };
        let mut bands = vec![12];
        for join in coded {
            match join {
                1 => *bands.last_mut().expect("one band at least") += 12,
                _ => bands.push(12),
            }
        }
        Ok(Some(bands))
    }

    /// E-AC-3's spectral extension strategy: which channels, and its range and bands.
    fn spx_strategy(&mut self, r: &mut Bits, first: bool) -> Parse<()> {
        if !first && !r.bit()? {
            return Ok(());
        }
        self.spx.in_use = r.bit()?;
        if !self.spx.in_use {
            self.spx.uses = [false; 5];
            self.spx.first_coords = [true; 5];
            return Ok(());
        }
        for ch in 0..self.full {
            self.spx.uses[ch] = self.acmod == 1 || r.bit()?;
        }
        let dst = r.get(2)? as usize;
        let widen = |b: usize| if b > 7 { 2 * b - 7 } else { b };
        let begin = widen(r.get(3)? as usize + 2);
        let end = widen(r.get(3)? as usize + 5);
        let (dst, src, stop) = (25 + 12 * dst, 25 + 12 * begin, 25 + 12 * end);
        if begin >= end || dst >= src {
            return Err("ac3: an empty spectral extension range");
        }
        (self.spx.dst, self.spx.src, self.spx.end) = (dst, src, stop);
        let blk = usize::from(!first);
        if let Some(bands) = self.band_structure(r, blk, (begin, end), &DEFAULT_SPX_BANDS)? {
            self.spx.bands = bands;
        }
        Ok(())
    }

    /// E-AC-3's spectral extension coordinates: each band's signal and noise levels.
    fn spx_coordinates(&mut self, r: &mut Bits) -> Parse<()> {
        if !self.spx.in_use {
            return Ok(());
        }
        for ch in 0..self.full {
            if !self.spx.uses[ch] {
                self.spx.first_coords[ch] = true;
                continue;
            }
            if !self.spx.first_coords[ch] && !r.bit()? {
                continue;
            }
            self.spx.first_coords[ch] = false;
            let blend = r.get(5)? as f32 / 32.0;
            let master = 3 * r.get(2)? as i32;
            let mut bin = self.spx.src;
            for (band, &size) in self.spx.bands.iter().enumerate() {
                let ratio = ((bin + size / 2) as f32 / self.spx.end as f32 - blend).clamp(0.0, 1.0);
                bin += size;
                let exp = r.get(4)? as i32;
                let mant = r.get(2)? as f32;
                let mant = if exp == 15 { 2.0 * mant } else { mant + 4.0 };
                let coord = mant * ((2 - exp - master) as f32).exp2();
                // Noise of unit variance: uniform in ±1, scaled by √3.
                self.spx.noise[ch][band] = (3.0 * ratio).sqrt() * coord;
                self.spx.signal[ch][band] = (1.0 - ratio).sqrt() * coord;
            }
        }
        Ok(())
    }

    /// Rebuilds the spectral extension band of the channels that use it: copies of the
    /// band from `dst` (wrapping where they reach `src`), notched at the wraps where the
    /// frame says, scaled to each band's coded level and blended with noise of its energy.
    fn extend_spectrum(&mut self) {
        let Spx { dst, src, .. } = self.spx;
        let bands = self.spx.bands.clone();
        let mut wrap = vec![false; bands.len()];
        wrap[0] = true;
        let mut copies = Vec::new();
        let mut bin = dst;
        for (band, &size) in bands.iter().enumerate() {
            if bin + size > src {
                copies.push(bin - dst);
                bin = dst;
                wrap[band] = true;
            }
            let mut i = 0;
            while i < size {
                if bin == src {
                    copies.push(bin - dst);
                    bin = dst;
                }
                let n = (size - i).min(src - bin);
                bin += n;
                i += n;
            }
        }
        copies.push(bin - dst);
        for ch in 0..self.full {
            if !self.spx.uses[ch] {
                continue;
            }
            let c = &mut self.coeffs[ch];
            let mut at = src;
            for &n in &copies {
                c.copy_within(dst..dst + n, at);
                at += n;
            }
            let mut rms = Vec::with_capacity(bands.len());
            let mut at = src;
            for &size in &bands {
                let energy: f32 = c[at..at + size].iter().map(|v| v * v).sum();
                rms.push((energy / size as f32).sqrt());
                at += size;
            }
            if let Some(code) = self.spx.atten[ch] {
                let a = |k: u32| (-(((k + 1) * (code + 1)) as f32) / 15.0).exp2();
                let notch = [a(0), a(1), a(2), a(1), a(0)];
                let mut at = src - 2;
                for (band, &size) in bands.iter().enumerate() {
                    if wrap[band] {
                        for (v, g) in c[at..at + 5].iter_mut().zip(notch) {
                            *v *= g;
                        }
                    }
                    at += size;
                }
            }
            let mut at = src;
            for (band, &size) in bands.iter().enumerate() {
                let noise = self.spx.noise[ch][band] * rms[band];
                let signal = self.spx.signal[ch][band];
                for i in at..at + size {
                    let mut x = self.seed;
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    self.seed = x;
                    let uniform = x as f32 / u32::MAX as f32 * 2.0 - 1.0;
                    let c = &mut self.coeffs[ch];
                    c[i] = c[i] * signal + noise * uniform;
                }
                at += size;
            }
        }
    }

    fn coupling_strategy(&mut self, r: &mut Bits, blk: usize) -> Parse<()> {
        let eac3 = self.syntax.eac3;
        let exists = match eac3 {
            true => self.cpl_strategy[blk],
            false => r.bit()?,
        };
        if !exists {
            return match blk == 0 && !eac3 {
                true => Err("ac3: no coupling strategy in a frame's first block"),
                false => Ok(()),
            };
        }
        self.cpl_in_use = match eac3 {
            true => self.cpl_use[blk],
            false => r.bit()?,
        };
        if !self.cpl_in_use {
            self.in_cpl = [false; 5];
            self.first_cpl_coords = [true; 5];
            self.first_cpl_leak = eac3;
            self.phase_in_use = false;
            return Ok(());
        }
        if self.acmod < 2 {
            return Err("ac3: coupling in mono or dual mono");
        }
        if eac3 && r.bit()? {
            return Err(NO_ECPL);
        }
        for ch in 0..self.full {
            self.in_cpl[ch] = (eac3 && self.acmod == 2) || r.bit()?;
        }
        if self.acmod == 2 {
            self.phase_in_use = r.bit()?;
        }
        let begin = r.get(4)? as usize;
        let end = match self.spx.in_use {
            true => (self.spx.src.saturating_sub(37)) / 12,
            false => r.get(4)? as usize + 3,
        };
        if begin >= end {
            return Err("ac3: an empty coupling range");
        }
        self.start[CPL] = 37 + 12 * begin;
        self.end[CPL] = 37 + 12 * end;
        if let Some(bands) = self.band_structure(r, blk, (begin, end), &DEFAULT_CPL_BANDS)? {
            self.cpl_bands = bands;
        }
        Ok(())
    }

    fn coupling_coordinates(&mut self, r: &mut Bits, first: bool) -> Parse<()> {
        let mut any = false;
        for ch in 0..self.full {
            if !self.in_cpl[ch] {
                self.first_cpl_coords[ch] = true;
                continue;
            }
            if (self.syntax.eac3 && self.first_cpl_coords[ch]) || r.bit()? {
                self.first_cpl_coords[ch] = false;
                any = true;
                let master = 3 * r.get(2)? as i32;
                for band in 0..self.cpl_bands.len() {
                    let exp = r.get(4)? as i32;
                    let mant = r.get(4)? as f32;
                    let value = match exp {
                        15 => mant / 16.0,
                        _ => (mant + 16.0) / 32.0,
                    };
                    self.cpl_coords[ch][band] = value * ((-(exp + master)) as f32).exp2();
                }
            } else if first {
                return Err("ac3: no coupling coordinates in a frame's first block");
            }
        }
        if self.acmod == 2 && any {
            for band in 0..self.cpl_bands.len() {
                self.phase[band] = self.phase_in_use && r.bit()?;
            }
        }
        Ok(())
    }

    /// The full-bandwidth channels' ends: the coupling range's start for coupled ones,
    /// the spectral extension's for those that use it, their bandwidth code's for the
    /// others.
    fn bandwidths(&mut self, r: &mut Bits) -> Parse<()> {
        for ch in 0..self.full {
            self.start[ch] = 0;
            if self.strategy[ch] == 0 {
                continue;
            }
            self.end[ch] = if self.in_cpl[ch] {
                self.start[CPL]
            } else if self.spx.uses[ch] && self.spx.in_use {
                self.spx.src
            } else {
                let code = r.get(6)? as usize;
                if code > 60 {
                    return Err("ac3: a bandwidth code above 60");
                }
                73 + 3 * code
            };
        }
        self.start[LFE] = 0;
        self.end[LFE] = 7;
        Ok(())
    }

    /// Channel `ch`'s exponents, where its strategy is not to reuse them: an absolute
    /// first one, then groups of three differences in 7 bits, each covering 1, 2 or 4
    /// coefficients.
    fn exponents(&mut self, r: &mut Bits, ch: usize) -> Parse<()> {
        let strategy = self.strategy[ch];
        if strategy == 0 {
            return Ok(());
        }
        self.fresh[ch] = true;
        let size = 1usize << (strategy - 1);
        let (start, end) = (self.start[ch], self.end[ch]);
        let groups = match ch {
            CPL => (end - start) / (3 * size),
            LFE => 2,
            _ => (end + 3 * size - 4) / (3 * size),
        };
        let mut exp = r.get(4)? as i32;
        let exps = &mut self.exps[ch];
        let mut at = start;
        if ch == CPL {
            exp <<= 1;
        } else {
            exps[0] = exp as u8;
            at += 1;
        }
        for _ in 0..groups {
            let g = r.get(7)? as i32;
            for d in [g / 25, g % 25 / 5, g % 5] {
                exp += d - 2;
                if !(0..=24).contains(&exp) {
                    return Err("ac3: an exponent out of range");
                }
                let run = exps
                    .get_mut(at..at + size)
                    .ok_or("ac3: exponents past the last coefficient")?;
                run.fill(exp as u8);
                at += size;
            }
        }
        if ch < CPL {
            r.skip(2)?; // gainrng
        }
        Ok(())
    }

    fn allocation_parameters(&mut self, r: &mut Bits, first: bool, coded: &[usize]) -> Parse<()> {
        let syntax = self.syntax;
        if syntax.bit_alloc {
            if r.bit()? {
                self.slow_decay = SLOW_DECAY[r.get(2)? as usize] >> self.shift;
                self.fast_decay = FAST_DECAY[r.get(2)? as usize] >> self.shift;
                self.slow_gain = SLOW_GAIN[r.get(2)? as usize];
                self.db_per_bit = DB_PER_BIT[r.get(2)? as usize];
                self.floor = FLOOR[r.get(3)? as usize];
            } else if first {
                return Err("ac3: no bit allocation parameters in a frame's first block");
            }
        }
        // E-AC-3 codes its SNR offsets once a frame: in its header (strategy 0), or in its
        // first block, for all channels (1) or each (2).
        if !syntax.eac3 || first {
            if syntax.snr_strategy != 0 && r.bit()? {
                let coarse = (r.get(6)? as i32 - 15) << 4;
                let mut snr = 0;
                for (i, &ch) in coded.iter().enumerate() {
                    if i == 0 || syntax.snr_strategy == 2 {
                        snr = (coarse + r.get(4)? as i32) << 2;
                    }
                    self.snr[ch] = snr;
                    if !syntax.eac3 {
                        self.fast_gain[ch] = FAST_GAIN[r.get(3)? as usize];
                    }
                }
            } else if !syntax.eac3 && first {
                return Err("ac3: no SNR offsets in a frame's first block");
            }
        }
        if syntax.fast_gain && r.bit()? {
            for &ch in coded {
                self.fast_gain[ch] = FAST_GAIN[r.get(3)? as usize];
            }
        } else if syntax.eac3 && first {
            for &ch in coded {
                self.fast_gain[ch] = FAST_GAIN[4];
            }
        }
        if syntax.independent && r.bit()? {
            r.skip(10)?; // the converter's SNR offset
        }
        if self.cpl_in_use {
            if self.first_cpl_leak || r.bit()? {
                self.cpl_leak = (r.get(3)? as i32, r.get(3)? as i32);
            } else if first && !syntax.eac3 {
                return Err("ac3: no coupling leak in a frame's first block");
            }
            self.first_cpl_leak = false;
        }
        let dba: Vec<usize> = coded.iter().copied().filter(|&c| c != LFE).collect();
        if syntax.dba && r.bit()? {
            for &ch in &dba {
                self.dba_mode[ch] = r.get(2)? as u8;
                if self.dba_mode[ch] == 3 {
                    return Err("ac3: a reserved delta bit allocation mode");
                }
            }
            for &ch in &dba {
                if self.dba_mode[ch] == 1 {
                    let segments = r.get(3)? as usize + 1;
                    self.dba[ch].clear();
                    for _ in 0..segments {
                        let seg = (r.get(5)? as u8, r.get(4)? as u8, r.get(3)? as u8);
                        self.dba[ch].push(seg);
                    }
                }
            }
        } else if first {
            self.dba_mode = [DBA_NONE; CHANNELS];
        }
        Ok(())
    }

    /// An E-AC-3 frame's bit stream information and audio frame fields (A/52 §E.1.2.2–3),
    /// from after its bsid: the switches of what its blocks carry, and its strategies.
    fn eac3_header(&mut self, r: &mut Bits, h: &Header) -> Parse<()> {
        let (acmod, blocks) = (h.acmod, h.blocks);
        let programs = if acmod == 0 { 2 } else { 1 };
        let stream_type = h.stream_type;
        for _ in 0..programs {
            r.skip(5)?; // dialnorm
            if r.bit()? {
                r.skip(8)?; // compr
            }
        }
        if r.bit()? {
            // Mixing metadata.
            if acmod > 2 {
                r.skip(2)?;
                if acmod & 1 != 0 {
                    r.skip(6)?;
                }
                if acmod & 4 != 0 {
                    r.skip(6)?;
                }
            }
            if h.lfe && r.bit()? {
                r.skip(5)?;
            }
            if stream_type == 0 {
                for _ in 0..programs {
                    if r.bit()? {
                        r.skip(6)?;
                    }
                }
                if r.bit()? {
                    r.skip(6)?;
                }
                match r.get(2)? {
                    1 => r.skip(5)?,
                    2 => r.skip(12)?,
                    3 => {
                        let bits = (r.get(5)? as usize + 2) * 8;
                        r.skip(bits)?;
                    }
                    _ => {}
                }
                if acmod < 2 {
                    for _ in 0..programs {
                        if r.bit()? {
                            r.skip(14)?;
                        }
                    }
                }
                if r.bit()? {
                    for _ in 0..blocks {
                        if blocks == 1 || r.bit()? {
                            r.skip(5)?;
                        }
                    }
                }
            }
        }
        if r.bit()? {
            // Informational metadata.
            r.skip(5)?;
            if acmod == 2 {
                r.skip(4)?;
            }
            if acmod >= 6 {
                r.skip(2)?;
            }
            for _ in 0..programs {
                if r.bit()? {
                    r.skip(8)?;
                }
            }
            r.skip(1)?;
        }
        if stream_type == 0 && blocks != 6 {
            r.skip(1)?;
        }
        if stream_type == 2 && (blocks == 6 || r.bit()?) {
            r.skip(6)?;
        }
        if r.bit()? {
            let len = r.get(6)? as usize + 1;
            r.skip(8 * len)?;
        }
        let (lut_strategies, aht) = match blocks {
            6 => (!r.bit()?, r.bit()?),
            _ => (false, false),
        };
        let snr_strategy = r.get(2)?;
        let transient = r.bit()?;
        self.syntax = Syntax {
            eac3: true,
            independent: stream_type == 0,
            block_switch: r.bit()?,
            dither: r.bit()?,
            bit_alloc: r.bit()?,
            fast_gain: r.bit()?,
            dba: r.bit()?,
            skip: r.bit()?,
            snr_strategy,
        };
        let atten = r.bit()?;
        if !self.syntax.block_switch {
            self.block_switch = [false; 5];
        }
        if !self.syntax.dither {
            self.dither = [true; 5];
        }
        if !self.syntax.bit_alloc {
            self.slow_decay = SLOW_DECAY[2];
            self.fast_decay = FAST_DECAY[1];
            self.slow_gain = SLOW_GAIN[1];
            self.db_per_bit = DB_PER_BIT[2];
            self.floor = FLOOR[7];
        }
        for blk in 0..blocks {
            self.cpl_strategy[blk] = acmod > 1 && (blk == 0 || r.bit()?);
            self.cpl_use[blk] = match (acmod > 1, self.cpl_strategy[blk]) {
                (false, _) => false,
                (true, true) => r.bit()?,
                (true, false) => self.cpl_use[blk - 1],
            };
        }
        let cpl_blocks = self.cpl_use[..blocks].iter().filter(|&&u| u).count();
        if lut_strategies {
            let cpl = (cpl_blocks > 0).then_some(CPL);
            for ch in cpl.into_iter().chain(0..self.full) {
                let code = r.get(5)? as usize;
                for (block, &strategy) in self.strategies.iter_mut().zip(&FRAME_STRATEGIES[code]) {
                    block[ch] = strategy;
                }
            }
        } else {
            for blk in 0..blocks {
                let cpl = self.cpl_use[blk].then_some(CPL);
                for ch in cpl.into_iter().chain(0..self.full) {
                    self.strategies[blk][ch] = r.get(2)? as u8;
                }
            }
        }
        if h.lfe {
            for blk in 0..blocks {
                self.strategies[blk][LFE] = r.get(1)? as u8;
            }
        }
        if stream_type == 0 && (blocks == 6 || r.bit()?) {
            r.skip(5 * self.full)?;
        }
        if aht {
            let cpl = (cpl_blocks == 6).then_some(CPL);
            let lfe = h.lfe.then_some(LFE);
            for ch in cpl.into_iter().chain(0..self.full).chain(lfe) {
                let reused = (1..BLOCKS)
                    .all(|b| self.strategies[b][ch] == 0 && (ch != CPL || !self.cpl_strategy[b]));
                if reused && r.bit()? {
                    return Err(NO_AHT);
                }
            }
        }
        if snr_strategy == 0 {
            let coarse = (r.get(6)? as i32 - 15) << 4;
            let snr = (coarse + r.get(4)? as i32) << 2;
            self.snr = [snr; CHANNELS];
        }
        if transient {
            for _ in 0..self.full {
                if r.bit()? {
                    r.skip(18)?;
                }
            }
        }
        for ch in 0..self.full {
            self.spx.atten[ch] = match atten && r.bit()? {
                true => Some(r.get(5)?),
                false => None,
            };
        }
        if blocks > 1 && r.bit()? {
            let bits = (h.len - 2).ilog2() as usize;
            r.skip((blocks - 1) * (4 + bits))?;
        }
        self.spx.first_coords = [true; 5];
        self.first_cpl_coords = [true; 5];
        self.first_cpl_leak = true;
        Ok(())
    }

    /// Channel `ch`'s bit allocation pointers from its exponents (A/52 §7.2), where they or
    /// the allocation's parameters changed since they were last computed.
    fn allocate(&mut self, ch: usize) -> Parse<()> {
        let (start, end) = (self.start[ch], self.end[ch]);
        let inputs = Allocation {
            range: (start, end),
            decay: (self.slow_decay, self.fast_decay),
            slow_gain: self.slow_gain,
            db_per_bit: self.db_per_bit,
            floor: self.floor,
            snr: self.snr[ch],
            fast_gain: self.fast_gain[ch],
            cpl_leak: if ch == CPL { self.cpl_leak } else { (0, 0) },
            dba: (ch != LFE && self.dba_mode[ch] <= 1).then(|| self.dba[ch].clone()),
            rate: (self.fscod, self.shift),
        };
        if !std::mem::take(&mut self.fresh[ch]) && self.computed[ch].as_ref() == Some(&inputs) {
            return Ok(());
        }
        self.computed[ch] = None;
        self.allocate_anew(ch)?;
        self.computed[ch] = Some(inputs);
        Ok(())
    }

    fn allocate_anew(&mut self, ch: usize) -> Parse<()> {
        let (start, end) = (self.start[ch], self.end[ch]);
        if end <= start || end > 253 {
            self.bap[ch].fill(0);
            return if end > 253 {
                Err("ac3: coefficients past the last band")
            } else {
                Ok(())
            };
        }
        let snr = self.snr[ch];
        if snr == -960 {
            self.bap[ch].fill(0);
            return Ok(());
        }
        let exps = &self.exps[ch];
        let mut psd = [0i32; 256];
        for bin in start..end {
            psd[bin] = 3072 - (i32::from(exps[bin]) << 7);
        }
        // Power in each band, by log addition.
        let mut band_psd = [0i32; 50];
        let mut bin = start;
        let mut band = usize::from(BIN_BAND[start]);
        loop {
            let mut v = psd[bin];
            bin += 1;
            let band_end = usize::from(BAND_START[band + 1]).min(end);
            while bin < band_end {
                let max = v.max(psd[bin]);
                let at = (max - ((v + psd[bin] + 1) >> 1)).min(255) as usize;
                v = max + i32::from(LOG_ADD[at]);
                bin += 1;
            }
            band_psd[band] = v;
            band += 1;
            if end <= usize::from(BAND_START[band]) {
                break;
            }
        }
        let mask = self.mask(ch, &band_psd)?;
        // Each coefficient's pointer, by how far its power stands above its band's mask.
        let floor = self.floor;
        let bap = &mut self.bap[ch];
        let mut bin = start;
        let mut band = usize::from(BIN_BAND[start]);
        loop {
            let m = ((mask[band] - snr - floor).max(0) & 0x1FE0) + floor;
            band += 1;
            let band_end = usize::from(BAND_START[band]).min(end);
            while bin < band_end {
                bap[bin] = BAP[((psd[bin] - m) >> 5).clamp(0, 63) as usize];
                bin += 1;
            }
            if end <= band_end {
                break;
            }
        }
        Ok(())
    }

    /// The masking curve of channel `ch`'s bands: the excitation its own power spreads,
    /// above the hearing threshold, moved by the delta bit allocation.
    fn mask(&self, ch: usize, band_psd: &[i32; 50]) -> Parse<[i32; 50]> {
        let (start, end) = (self.start[ch], self.end[ch]);
        let lfe = ch == LFE;
        let fast_gain = self.fast_gain[ch];
        let (fast_decay, slow_decay, slow_gain) =
            (self.fast_decay, self.slow_decay, self.slow_gain);
        let band_start = usize::from(BIN_BAND[start]);
        let band_end = usize::from(BIN_BAND[end - 1]) + 1;
        let mut excite = [0i32; 50];
        let (mut fast_leak, mut slow_leak);
        let begin;
        let lowcomp1 = |a: i32, b0: i32, b1: i32, c: i32| {
            if b0 + 256 == b1 {
                c
            } else if b0 > b1 {
                (a - 64).max(0)
            } else {
                a
            }
        };
        let lowcomp = |a: i32, b0: i32, b1: i32, band: usize| match band {
            0..=6 => lowcomp1(a, b0, b1, 384),
            7..=19 => lowcomp1(a, b0, b1, 320),
            _ => (a - 128).max(0),
        };
        if band_start == 0 {
            let p = band_psd;
            let mut low = lowcomp1(0, p[0], p[1], 384);
            excite[0] = p[0] - fast_gain - low;
            low = lowcomp1(low, p[1], p[2], 384);
            excite[1] = p[1] - fast_gain - low;
            let mut from = 7;
            fast_leak = 0;
            slow_leak = 0;
            for band in 2..7 {
                let skip = lfe && band == 6;
                if !skip {
                    low = lowcomp1(low, p[band], p[band + 1], 384);
                }
                fast_leak = p[band] - fast_gain;
                slow_leak = p[band] - slow_gain;
                excite[band] = fast_leak - low;
                if !skip && p[band] <= p[band + 1] {
                    from = band + 1;
                    break;
                }
            }
            for band in from..band_end.min(22) {
                if !(lfe && band == 6) {
                    low = lowcomp(low, p[band], p[band + 1], band);
                }
                fast_leak = (fast_leak - fast_decay).max(p[band] - fast_gain);
                slow_leak = (slow_leak - slow_decay).max(p[band] - slow_gain);
                excite[band] = (fast_leak - low).max(slow_leak);
            }
            begin = 22;
        } else {
            begin = band_start;
            fast_leak = (self.cpl_leak.0 << 8) + 768;
            slow_leak = (self.cpl_leak.1 << 8) + 768;
        }
        for band in begin..band_end {
            fast_leak = (fast_leak - fast_decay).max(band_psd[band] - fast_gain);
            slow_leak = (slow_leak - slow_decay).max(band_psd[band] - slow_gain);
            excite[band] = fast_leak.max(slow_leak);
        }
        let mut mask = [0i32; 50];
        for band in band_start..band_end {
            let knee = self.db_per_bit - band_psd[band];
            if knee > 0 {
                excite[band] += knee >> 2;
            }
            let hearing = i32::from(HEARING[band >> self.shift][self.fscod]);
            mask[band] = hearing.max(excite[band]);
        }
        if ch != LFE && self.dba_mode[ch] <= 1 {
            let mut band = band_start;
            for &(offset, len, value) in &self.dba[ch] {
                band += usize::from(offset);
                if band + usize::from(len) > 50 {
                    return Err("ac3: delta bit allocation past the last band");
                }
                let delta = (i32::from(value) - if value >= 4 { 3 } else { 4 }) << 7;
                for m in &mut mask[band..band + usize::from(len)] {
                    *m += delta;
                }
                band += usize::from(len);
            }
        }
        Ok(mask)
    }

    /// The block's mantissas, as coefficients: each full-bandwidth channel's, the coupling
    /// channel's after the first coupled one's (and the coupled channels' from them), then
    /// the LFE's.
    fn mantissas(&mut self, r: &mut Bits) -> Parse<()> {
        let mut groups = Groups::default();
        let mut got_cpl = false;
        for ch in 0..self.full {
            self.channel_mantissas(r, ch, &mut groups)?;
            let end = if self.in_cpl[ch] && self.cpl_in_use {
                if !got_cpl {
                    self.channel_mantissas(r, CPL, &mut groups)?;
                    self.uncouple();
                    got_cpl = true;
                }
                self.end[CPL]
            } else {
                self.end[ch]
            };
            self.coeffs[ch][end..].fill(0.0);
        }
        if self.lfe {
            self.channel_mantissas(r, LFE, &mut groups)?;
            self.coeffs[LFE][7..].fill(0.0);
        }
        if self.acmod == 2 {
            let end = self.end[0].min(self.end[1]);
            for band in 0..self.rematrix_bands {
                if !self.rematrix[band] {
                    continue;
                }
                let hi = end.min(REMATRIX_BANDS[band + 1]);
                for i in REMATRIX_BANDS[band]..hi {
                    let (l, r) = (self.coeffs[0][i], self.coeffs[1][i]);
                    self.coeffs[0][i] = l + r;
                    self.coeffs[1][i] = l - r;
                }
            }
        }
        Ok(())
    }

    fn channel_mantissas(&mut self, r: &mut Bits, ch: usize, groups: &mut Groups) -> Parse<()> {
        let dither = ch == CPL || (ch < CPL && self.dither[ch]);
        for bin in self.start[ch]..self.end[ch] {
            let m = match self.bap[ch][bin] {
                0 if dither => self.dither_value(),
                0 => 0.0,
                1 => groups.b1.next(
                    || {
                        r.get(5)
                            .map(|g| [g / 9, g / 3 % 3, g % 3])
                            .map_err(Into::into)
                    },
                    3,
                )?,
                2 => groups.b2.next(
                    || {
                        r.get(7)
                            .map(|g| [g / 25, g / 5 % 5, g % 5])
                            .map_err(Into::into)
                    },
                    5,
                )?,
                3 => level(r.get(3)?, 7),
                4 => groups.b4.next(
                    || r.get(7).map(|g| [g / 11, g % 11]).map_err(Into::into),
                    11,
                )?,
                5 => level(r.get(4)?, 15),
                bap => {
                    let bits = MANTISSA_BITS[usize::from(bap)];
                    r.signed(bits)? as f32 * (1.0 - bits as f32).exp2()
                }
            };
            self.coeffs[ch][bin] = m * POW2_NEG[usize::from(self.exps[ch][bin])];
        }
        Ok(())
    }

    /// The coupled channels' coefficients in the coupling range: the coupling channel's,
    /// scaled by each one's coordinates (A/52 §7.4.3), and without the dither a channel
    /// that does not dither would not have had.
    fn uncouple(&mut self) {
        let mut bin = self.start[CPL];
        for (band, &size) in self.cpl_bands.iter().enumerate() {
            for ch in 0..self.full {
                if !self.in_cpl[ch] {
                    continue;
                }
                let mut scale = 8.0 * self.cpl_coords[ch][band];
                if ch == 1 && self.acmod == 2 && self.phase[band] {
                    scale = -scale;
                }
                for i in bin..bin + size {
                    self.coeffs[ch][i] = if !self.dither[ch] && self.bap[CPL][i] == 0 {
                        0.0
                    } else {
                        self.coeffs[CPL][i] * scale
                    };
                }
            }
            bin += size;
        }
    }
}

/// A symphonia [`Decoder`] for AC-3 and E-AC-3.
pub(crate) struct Ac3Decoder {
    params: CodecParameters,
    blocks: Box<Blocks>,
    transforms: Transforms,
    /// Each output channel's second half of the last block, windowed, for the next.
    delay: Vec<[f32; BLOCK]>,
    buf: AudioBuffer<f32>,
}

impl Ac3Decoder {
    /// Decodes every syncframe of `data` into `buf`.
    fn decode_frames(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        let mut decoded = 0;
        while let Some(h) = Header::parse(data) {
            let Some(frame) = data.get(..h.len) else {
                break;
            };
            if h.reduced {
                return unsupported_error(NO_REDUCED);
            }
            // A dependent substream's frame, or another program's: skipped, as FFmpeg does.
            if !h.extra {
                self.frame(h, frame)?;
            }
            data = &data[h.len..];
            decoded += 1;
        }
        if decoded == 0 {
            return decode_error("ac3: not an AC-3 or E-AC-3 syncframe");
        }
        Ok(())
    }

    /// Decodes one syncframe onto the end of `buf`; a frame whose blocks do not parse
    /// comes out silent (as long as it is, so that what follows keeps its time).
    fn frame(&mut self, h: Header, frame: &[u8]) -> Result<()> {
        let samples = h.blocks * BLOCK;
        let mask = h.channels();
        let out = mask.count();
        let spec = self.buf.spec();
        if spec.rate != h.rate || spec.channels != mask {
            if self.buf.frames() > 0 {
                return decode_error("ac3: the layout changes within a packet");
            }
            self.buf = AudioBuffer::new(4 * FRAME_SAMPLES as u64, SignalSpec::new(h.rate, mask));
            self.delay = vec![[0.0; BLOCK]; out];
        }
        while self.buf.capacity() < self.buf.frames() + samples {
            let mut bigger = AudioBuffer::new(
                (2 * self.buf.capacity()) as u64,
                SignalSpec::new(h.rate, mask),
            );
            bigger.render_reserved(Some(self.buf.frames()));
            for c in 0..out {
                bigger.chan_mut(c).copy_from_slice(self.buf.chan(c));
            }
            self.buf = bigger;
        }
        let at = self.buf.frames();
        self.buf.render_reserved(Some(samples));
        // Where each coded channel goes among the output's, which are in mask order.
        let rank = |c: Channels| (mask.bits() & (c.bits() - 1)).count_ones() as usize;
        let mut place: Vec<(usize, usize)> = coded_positions(h.acmod)
            .iter()
            .enumerate()
            .map(|(i, &c)| (i, rank(c)))
            .collect();
        if h.lfe {
            place.push((LFE, rank(Channels::LFE1)));
        }
        let b = &mut self.blocks;
        b.full = FULL_CHANNELS[usize::from(h.acmod)];
        b.acmod = h.acmod;
        b.lfe = h.lfe;
        b.fscod = usize::from(frame[4] >> 6);
        let mut r = Bits::new(frame);
        let parsed = if h.eac3 {
            b.shift = 0;
            // syncinfo and bsi up to bsid: 16 + 2 + 3 + 11 + 2 + 2 + 3 + 1 + 5 bits.
            r.skip(45)
                .map_err(<&str>::from)
                .and_then(|()| b.eac3_header(&mut r, &h))
        } else {
            b.shift = u32::from(frame[5] >> 3).saturating_sub(8);
            b.syntax = AC3_SYNTAX;
            b.first_cpl_leak = false;
            b.spx.in_use = false;
            b.spx.uses = [false; 5];
            skip_bsi(&mut r, h.acmod).map_err(<&str>::from)
        };
        let mut failed = match parsed {
            Err(e) if e == NO_AHT => return unsupported_error(NO_AHT),
            parsed => parsed.is_err(),
        };
        let mut long = [0f32; 2 * BLOCK];
        for blk in 0..h.blocks {
            if !failed {
                match self.blocks.read(&mut r, blk) {
                    Err(e) if e == NO_ECPL => return unsupported_error(NO_ECPL),
                    Err(_) => failed = true,
                    Ok(()) => {}
                }
            }
            for &(ch, o) in &place {
                let out = &mut self.buf.chan_mut(o)[at + blk * BLOCK..][..BLOCK];
                if failed {
                    out.fill(0.0);
                    self.delay[o] = [0.0; BLOCK];
                    continue;
                }
                let b = &self.blocks;
                let gain = OUTPUT_GAIN
                    * if b.acmod == 0 && ch == 1 {
                        b.dynrng[1]
                    } else {
                        b.dynrng[0]
                    };
                self.transforms
                    .block(&b.coeffs[ch], ch < CPL && b.block_switch[ch], &mut long);
                let w = window();
                let delay = &mut self.delay[o];
                for n in 0..BLOCK {
                    out[n] = gain * (long[n] * w[n] + delay[n]);
                    delay[n] = long[BLOCK + n] * w[BLOCK - 1 - n];
                }
            }
        }
        Ok(())
    }
}

/// Reads past the syncinfo and the bit stream information, to the first audio block.
fn skip_bsi(r: &mut Bits, acmod: u8) -> std::result::Result<(), Overrun> {
    r.skip(16 + 16 + 8 + 5 + 3 + 3)?;
    if acmod & 1 != 0 && acmod != 1 {
        r.skip(2)?;
    }
    if acmod & 4 != 0 {
        r.skip(2)?;
    }
    if acmod == 2 {
        r.skip(2)?;
    }
    r.skip(1)?; // lfeon
    for _ in 0..1 + usize::from(acmod == 0) {
        r.skip(5)?; // dialnorm
        for bits in [8, 8, 7] {
            // compr, langcod, and mixlevel with roomtyp
            if r.bit()? {
                r.skip(bits)?;
            }
        }
    }
    r.skip(2)?; // copyrightb, origbs
    for _ in 0..2 {
        // timecod1/2, or (bsid 6) the extra bit stream information: 14 bits either way
        if r.bit()? {
            r.skip(14)?;
        }
    }
    if r.bit()? {
        let len = r.get(6)? as usize + 1;
        r.skip(8 * len)?;
    }
    Ok(())
}

impl Decoder for Ac3Decoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        if params.codec != CODEC_TYPE_AC3 {
            return unsupported_error("ac3: not AC-3");
        }
        let rate = params.sample_rate.unwrap_or(48_000);
        let channels = params
            .channels
            .filter(|c| c.count() > 0)
            .unwrap_or(Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
        Ok(Self {
            params: params.clone(),
            blocks: Box::new(Blocks::new()),
            transforms: Transforms::new(),
            delay: vec![[0.0; BLOCK]; channels.count()],
            buf: AudioBuffer::new(4 * FRAME_SAMPLES as u64, SignalSpec::new(rate, channels)),
        })
    }

    fn reset(&mut self) {
        *self.blocks = Blocks::new();
        for d in &mut self.delay {
            *d = [0.0; BLOCK];
        }
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            CODEC_TYPE_AC3,
            "ac3",
            "Dolby Digital (AC-3) and Dolby Digital Plus (E-AC-3), ATSC A/52"
        )]
    }

    fn codec_params(&self) -> &CodecParameters {
        &self.params
    }

    fn decode(&mut self, packet: &Packet) -> Result<AudioBufferRef<'_>> {
        if let Err(e) = self.decode_frames(&packet.data) {
            self.buf.clear();
            return Err(e);
        }
        Ok(self.buf.as_audio_buffer_ref())
    }

    fn finalize(&mut self) -> FinalizeResult {
        FinalizeResult::default()
    }

    fn last_decoded(&self) -> AudioBufferRef<'_> {
        self.buf.as_audio_buffer_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DCT-IV through the FFT equals its definition.
    #[test]
    fn fast_dct4_matches_its_definition() {
        for m in [128usize, 256] {
            let x: Vec<f32> = (0..m)
                .map(|k| ((k * 7919) % 1000) as f32 / 500.0 - 1.0)
                .collect();
            let mut c = vec![0f32; m];
            Imdct::new(m).dct4(&x, 0, 1, &mut c);
            for (n, &got) in c.iter().enumerate() {
                let want: f64 = (0..m)
                    .map(|k| {
                        let a =
                            std::f64::consts::PI / m as f64 * (n as f64 + 0.5) * (k as f64 + 0.5);
                        f64::from(x[k]) * a.cos()
                    })
                    .sum();
                assert!(
                    (f64::from(got) - want).abs() < 1e-3,
                    "m {m} n {n}: {got} vs {want}"
                );
            }
        }
    }

    /// The window is A/52's (its table, in 16-bit fixed point, truncated), and
    /// power-complementary, which the overlap-add relies on.
    #[test]
    fn window_is_kbd_alpha_5() {
        let w = window();
        let q = |i: usize| (w[i] * 32768.0) as i32;
        assert_eq!(
            [q(0), q(1), q(2), q(3), q(128), q(200)],
            [4, 7, 12, 16, 23314, 32623]
        );
        for n in 0..256 {
            assert!((w[n] * w[n] + w[255 - n] * w[255 - n] - 1.0).abs() < 1e-6);
        }
    }

    /// A/52's forward transforms (§8.2.3.2: a phase of (1 + α)(2k + 1)π/4, α 0 for the
    /// long transform and -1 and +1 for the two short ones) over a signal, with long and
    /// short blocks in turn, come back through the decoder's inverse as the signal itself,
    /// a block later: the short transforms' phases, the window and the output's scale.
    #[test]
    fn forward_transforms_of_any_block_switching_invert() {
        let signal: Vec<f32> = (0..BLOCK * 12)
            .map(|n| ((n * 7919 % 2003) as f32 / 1001.5 - 1.0) * 0.5)
            .collect();
        let w = window();
        let win = |n: usize| {
            if n < BLOCK {
                w[n]
            } else {
                w[2 * BLOCK - 1 - n]
            }
        };
        let forward = |x: &[f32], n: usize, alpha: f64, k: usize| -> f32 {
            let pi = std::f64::consts::PI;
            let sum: f64 = (0..n)
                .map(|i| {
                    let a = 2.0 * pi / (4.0 * n as f64) * (2 * i + 1) as f64 * (2 * k + 1) as f64
                        + pi / 4.0 * (2 * k + 1) as f64 * (1.0 + alpha);
                    f64::from(x[i]) * a.cos()
                })
                .sum();
            (-2.0 / n as f64 * sum) as f32
        };
        let mut t = Transforms::new();
        let mut delay = [0f32; BLOCK];
        let mut out = Vec::new();
        for b in 0..signal.len() / BLOCK - 1 {
            let x: Vec<f32> = (0..2 * BLOCK)
                .map(|n| signal[b * BLOCK + n] * win(n))
                .collect();
            let short = b % 3 == 1 || b == 6;
            let mut coeffs = [0f32; BLOCK];
            for k in 0..BLOCK / 2 {
                if short {
                    coeffs[2 * k] = forward(&x[..BLOCK], BLOCK, -1.0, k);
                    coeffs[2 * k + 1] = forward(&x[BLOCK..], BLOCK, 1.0, k);
                } else {
                    coeffs[k] = forward(&x, 2 * BLOCK, 0.0, k);
                    coeffs[k + BLOCK / 2] = forward(&x, 2 * BLOCK, 0.0, k + BLOCK / 2);
                }
            }
            let mut y = [0f32; 2 * BLOCK];
            t.block(&coeffs, short, &mut y);
            for n in 0..BLOCK {
                out.push(OUTPUT_GAIN * (y[n] * w[n] + delay[n]));
                delay[n] = y[BLOCK + n] * w[BLOCK - 1 - n];
            }
        }
        // Block b's output is the second half of block b - 1's window: the signal from
        // sample b * 256.
        for (i, &o) in out.iter().enumerate().skip(BLOCK) {
            let want = signal[i];
            assert!((o - want).abs() < 1e-4, "sample {i}: {o} vs {want}");
        }
    }

    #[test]
    fn headers_give_rate_length_and_channels() {
        // 48 kHz, 448 kb/s (frmsizecod 30), bsid 8, acmod 7 with LFE: cmixlev, surmixlev,
        // then lfeon.
        let h = Header::parse(
            &[0x0B, 0x77, 0, 0, 30, 8 << 3, 0b1110_0001], /* acmod 7, cmixlev, surmixlev, lfeon */
        )
        .unwrap();
        assert_eq!((h.rate, h.len, h.eac3), (48_000, 1792, false));
        assert_eq!(h.channels().count(), 6);
        assert!(h.channels().contains(Channels::LFE1 | Channels::SIDE_LEFT));
        // 44.1 kHz, 192 kb/s padded, stereo (dsurmod), no LFE.
        let h = Header::parse(
            &[0x0B, 0x77, 0, 0, 0x40 | 21, 8 << 3, 0b0100_0000], /* acmod 2, dsurmod, lfeon 0 */
        )
        .unwrap();
        assert_eq!((h.rate, h.len), (44_100, 836));
        assert_eq!(h.channels(), Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
        // E-AC-3: 5.1 at 48 kHz, frmsiz 767 words.
        let h = Header::parse(&[
            0x0B,
            0x77,
            0x02,
            0xFF,
            0b0011_1111, /* fscod 0, numblkscod 3, acmod 7, lfeon */
            16 << 3,
            0,
        ])
        .unwrap();
        assert_eq!((h.rate, h.len, h.eac3), (48_000, 1536, true));
        assert_eq!(h.channels().count(), 6);
        // A reserved rate, a frame size code past the table, no sync, a bsid of neither.
        assert_eq!(Header::parse(&[0x0B, 0x77, 0, 0, 0xC0, 8 << 3, 0]), None);
        assert_eq!(Header::parse(&[0x0B, 0x77, 0, 0, 38, 8 << 3, 0]), None);
        assert_eq!(Header::parse(&[0x0B, 0x78, 0, 0, 30, 8 << 3, 0]), None);
        assert_eq!(Header::parse(&[0x0B, 0x77, 0, 0, 30, 20 << 3, 0]), None);
    }

    /// Any bytes behind a syncframe's header (any layout, rate and size), in frames one
    /// after another, give samples or an error: never a panic, and never a frame's worth
    /// of anything but finite samples.
    #[test]
    fn arbitrary_frames_never_panic() {
        use proptest::prelude::*;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(2000));
        let frame = (
            (0u8..38, 0u8..4, 0u8..17),
            (any::<u8>(), any::<u8>(), any::<u8>()),
            proptest::collection::vec(any::<u8>(), 0..4000),
        );
        runner
            .run(&proptest::collection::vec(frame, 1..4), |frames| {
                let params = {
                    let mut p = CodecParameters::new();
                    p.for_codec(CODEC_TYPE_AC3);
                    p
                };
                let mut dec = Ac3Decoder::try_new(&params, &DecoderOptions::default()).unwrap();
                for ((size, fscod, bsid), (b2, b3, modes), mut body) in frames {
                    // AC-3's frame size code, or E-AC-3's size, stream and blocks.
                    let b4 = match bsid {
                        0..=10 => fscod << 6 | size,
                        _ => fscod << 6 | (size & 0x3F),
                    };
                    let b2 = if bsid > 10 { b2 & 0x3F } else { b2 };
                    let mut bytes = vec![0x0B, 0x77, b2, b3, b4, bsid << 3, modes];
                    if let Some(h) = Header::parse(&bytes) {
                        body.resize(h.len - bytes.len(), 0);
                    }
                    bytes.extend(body);
                    if let Ok(buf) = dec.decode(&Packet::new_from_slice(0, 0, 0, &bytes)) {
                        let mut out = symphonia::core::audio::SampleBuffer::<f32>::new(
                            buf.capacity() as u64,
                            *buf.spec(),
                        );
                        out.copy_interleaved_ref(buf);
                        prop_assert!(out.samples().iter().all(|v| v.is_finite()));
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    /// Bits, most significant first, for frames built by hand.
    #[derive(Default)]
    struct Writer(Vec<bool>);

    impl Writer {
        fn put(&mut self, n: u32, v: u32) -> &mut Self {
            self.0.extend((0..n).rev().map(|i| v >> i & 1 == 1));
            self
        }

        fn bytes(&self, len: usize) -> Vec<u8> {
            let mut b = vec![0u8; len];
            for (i, &bit) in self.0.iter().enumerate() {
                b[i / 8] |= u8::from(bit) << (7 - i % 8);
            }
            b
        }
    }

    /// An E-AC-3 frame whose channels use the adaptive hybrid transform, which sotto does
    /// not decode, is refused as unsupported (the file's error names the tool), not taken
    /// for a damaged one and silenced.
    #[test]
    fn e_ac3_tools_sotto_lacks_are_named() {
        let words = 256;
        let mut w = Writer::default();
        // syncinfo and bsi: independent stream 0, 48 kHz, six blocks, stereo, bsid 16,
        // dialnorm, and no compression, metadata or extra information.
        w.put(16, 0x0B77)
            .put(2, 0)
            .put(3, 0)
            .put(11, words - 1)
            .put(2, 0)
            .put(2, 3);
        w.put(3, 2)
            .put(1, 0)
            .put(5, 16)
            .put(5, 0)
            .put(1, 0)
            .put(1, 0)
            .put(1, 0)
            .put(1, 0);
        // audfrm: AC-3-style exponent strategies, AHT on; the switches off.
        w.put(1, 1)
            .put(1, 1)
            .put(2, 0)
            .put(1, 0)
            .put(6, 0)
            .put(1, 0);
        // No coupling in block 0, no new strategy after.
        w.put(1, 0).put(5, 0);
        // Exponents new in block 0 (D15) and reused after, both channels.
        w.put(2, 1).put(2, 1).put(20, 0);
        // The converter's exponent strategies, then AHT on for the first channel.
        w.put(10, 0).put(1, 1);
        let frame = w.bytes(2 * words as usize);
        let h = Header::parse(&frame).unwrap();
        assert!(h.eac3 && !h.extra && h.blocks == 6);
        let mut p = CodecParameters::new();
        p.for_codec(CODEC_TYPE_AC3);
        let mut dec = Ac3Decoder::try_new(&p, &DecoderOptions::default()).unwrap();
        match dec.decode(&Packet::new_from_slice(0, 0, 0, &frame)) {
            Err(symphonia::core::errors::Error::Unsupported(what)) => assert_eq!(what, NO_AHT),
            other => panic!("{:?}", other.map(|b| b.frames())),
        }
    }

    #[test]
    fn coded_channels_map_to_ffmpeg_positions() {
        for acmod in 0..8u8 {
            assert_eq!(
                coded_positions(acmod).len(),
                FULL_CHANNELS[usize::from(acmod)]
            );
        }
    }
}
