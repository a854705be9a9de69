//! MPEG audio Layer II (MP2: broadcast archives, DVB and DAB radio, DVDs' and VCDs' MPEG
//! audio, `.mp2`/`.mpa` files), MPEG-1's and MPEG-2's half rates (ISO 11172-3 §2.4.3.3,
//! 13818-3 §2.4.3), in place of symphonia's decoder and reader, which refuse the bitrates
//! the standard does not pair with a channel mode: FFmpeg writes mono MP2 at 384 kb/s by
//! default (`ffmpeg -i in -ac 1 out.mp2` at 32 to 48 kHz), and decodes it, as every
//! player does. The allocation table is chosen by the bitrate per channel, as FFmpeg
//! chooses it for any pair.
//!
//! Each frame's bit allocation, scale factor selection and scale factors are read, its
//! 36 samples per subband requantized (grouped codes for 3, 5 and 9 steps; intensity
//! stereo above the joint-stereo bound), and the 32 subbands turned into PCM by the
//! standard's polyphase synthesis, its matrixing computed as a 32-point DCT. The samples
//! are FFmpeg's `mp2float` decoder's to within rounding, and its default (fixed-point)
//! decoder's to about one 16-bit step.

use std::sync::OnceLock;

use symphonia::core::audio::{AudioBuffer, Channels, Signal};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_MP2};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, Result};
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room, Bits, Parse};

/// Samples a frame holds per channel, and subbands.
pub(crate) const FRAME_SAMPLES: usize = 1152;
const SUBBANDS: usize = 32;
/// Samples per subband in a frame: 3 parts of 4 granules of 3.
const SLOTS: usize = 36;

/// Layer II's bitrates in kb/s by index (1-14): MPEG-1's, and MPEG-2's half rates'.
const KBPS: [[u16; 15]; 2] = [
    [
        0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
    ],
    [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
];
const RATES: [u32; 3] = [44_100, 48_000, 32_000];

/// What a frame's four header bytes say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Header {
    /// MPEG-2's half rates (or MPEG-2.5's quarter rates): the low sampling frequency table.
    lsf: bool,
    protected: bool,
    kbps: u32,
    pub(crate) rate: u32,
    mode: u8,
    mode_ext: u8,
    /// The whole frame's bytes, header included.
    pub(crate) len: usize,
}

/// Channel modes.
const JOINT_STEREO: u8 = 1;
const MONO: u8 = 3;

impl Header {
    /// A Layer II frame's header; None for anything else (other layers, free format,
    /// reserved values).
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let &[b0, b1, b2, b3, ..] = b else {
            return None;
        };
        if b0 != 0xFF || b1 & 0xE0 != 0xE0 || (b1 >> 1) & 3 != 2 {
            return None;
        }
        let shift = match (b1 >> 3) & 3 {
            3 => 0, // MPEG-1
            2 => 1, // MPEG-2
            0 => 2, // MPEG-2.5
            _ => return None,
        };
        let lsf = shift > 0;
        let index = usize::from(b2 >> 4);
        let kbps = u32::from(*KBPS[usize::from(lsf)].get(index).filter(|&&k| k > 0)?);
        let rate = RATES.get(usize::from((b2 >> 2) & 3))? >> shift;
        let padding = usize::from((b2 >> 1) & 1);
        Some(Self {
            lsf,
            protected: b1 & 1 == 0,
            kbps,
            rate,
            mode: b3 >> 6,
            mode_ext: (b3 >> 4) & 3,
            len: (144_000 * kbps / rate) as usize + padding,
        })
    }

    pub(crate) fn channels(&self) -> Channels {
        match self.mode {
            MONO => Channels::FRONT_LEFT,
            _ => Channels::FRONT_LEFT | Channels::FRONT_RIGHT,
        }
    }

    /// The bit allocation table (ISO 11172-3 B.2a-d, 13818-3 B.1), by the bitrate per
    /// channel, as FFmpeg picks it whether or not the standard pairs that bitrate with
    /// the mode.
    fn table(&self) -> &'static Table {
        let per_channel = self.kbps / self.channels().count() as u32;
        if self.lsf {
            &LSF
        } else if (self.rate == 48_000 && per_channel >= 56) || (56..=80).contains(&per_channel) {
            &TABLE_A
        } else if self.rate != 48_000 && per_channel >= 96 {
            &TABLE_B
        } else if self.rate != 32_000 && per_channel <= 48 {
            &TABLE_C
        } else {
            &TABLE_D
        }
    }
}

/// A bit allocation table: the subbands it codes, and for each run of subbands the bits
/// of their allocation and the quantization class (an index into [`STEPS`]) of each
/// allocation after 0 (none).
struct Table {
    sblimit: usize,
    runs: &'static [(usize, u32, &'static [u8])],
}

impl Table {
    /// Subband `sb`'s allocation bits and classes.
    fn band(&self, sb: usize) -> (u32, &'static [u8]) {
        let mut first = 0;
        for &(count, bits, classes) in self.runs {
            if sb < first + count {
                return (bits, classes);
            }
            first += count;
        }
        unreachable!("subband {sb} past the table's {}", self.sblimit)
    }
}

const HIGH_A: &[u8] = &[0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const MID_A: &[u8] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16];
const LOW_A: &[u8] = &[0, 1, 2, 3, 4, 5, 16];
const TOP_A: &[u8] = &[0, 1, 16];
const HIGH_C: &[u8] = &[0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const LOW_C: &[u8] = &[0, 1, 3, 4, 5, 6, 7];
const HIGH_LSF: &[u8] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
const TOP_LSF: &[u8] = &[0, 1, 3];

const TABLE_A: Table = Table {
    sblimit: 27,
    runs: &[(3, 4, HIGH_A), (8, 4, MID_A), (12, 3, LOW_A), (4, 2, TOP_A)],
};
const TABLE_B: Table = Table {
    sblimit: 30,
    runs: &[(3, 4, HIGH_A), (8, 4, MID_A), (12, 3, LOW_A), (7, 2, TOP_A)],
};
const TABLE_C: Table = Table {
    sblimit: 8,
    runs: &[(2, 4, HIGH_C), (6, 3, LOW_C)],
};
const TABLE_D: Table = Table {
    sblimit: 12,
    runs: &[(2, 4, HIGH_C), (10, 3, LOW_C)],
};
const LSF: Table = Table {
    sblimit: 30,
    runs: &[(4, 4, HIGH_LSF), (7, 3, LOW_C), (19, 2, TOP_LSF)],
};

/// Each quantization class's steps, and the bits of a code: one per sample, or (3, 5 and
/// 9 steps) one per group of three samples.
const STEPS: [u32; 17] = [
    3, 5, 7, 9, 15, 31, 63, 127, 255, 511, 1023, 2047, 4095, 8191, 16383, 32767, 65535,
];
const CODE_BITS: [u32; 17] = [5, 7, 3, 10, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const fn grouped(class: usize) -> bool {
    matches!(class, 0 | 1 | 3)
}

/// The synthesis window (ISO 11172-3 table B.3), its first 257 coefficients × 2^16; the
/// rest mirror them (negated, but at multiples of 64).
const WINDOW_HALF: [i32; 257] = [
    0, -1, -1, -1, -1, -1, -1, -2, -2, -2, -2, -3, -3, -4, -4, -5, -5, -6, -7, -7, -8, -9, -10,
    -11, -13, -14, -16, -17, -19, -21, -24, -26, -29, -31, -35, -38, -41, -45, -49, -53, -58, -63,
    -68, -73, -79, -85, -91, -97, -104, -111, -117, -125, -132, -139, -147, -154, -161, -169, -176,
    -183, -190, -196, -202, -208, 213, 218, 222, 225, 227, 228, 228, 227, 224, 221, 215, 208, 200,
    189, 177, 163, 146, 127, 106, 83, 57, 29, -2, -36, -72, -111, -153, -197, -244, -294, -347,
    -401, -459, -519, -581, -645, -711, -779, -848, -919, -991, -1064, -1137, -1210, -1283, -1356,
    -1428, -1498, -1567, -1634, -1698, -1759, -1817, -1870, -1919, -1962, -2001, -2032, -2057,
    -2075, -2085, -2087, -2080, -2063, 2037, 2000, 1952, 1893, 1822, 1739, 1644, 1535, 1414, 1280,
    1131, 970, 794, 605, 402, 185, -45, -288, -545, -814, -1095, -1388, -1692, -2006, -2330, -2663,
    -3004, -3351, -3705, -4063, -4425, -4788, -5153, -5517, -5879, -6237, -6589, -6935, -7271,
    -7597, -7910, -8209, -8491, -8755, -8998, -9219, -9416, -9585, -9727, -9838, -9916, -9959,
    -9966, -9935, -9863, -9750, -9592, -9389, -9139, -8840, -8492, -8092, -7640, -7134, 6574, 5959,
    5288, 4561, 3776, 2935, 2037, 1082, 70, -998, -2122, -3300, -4533, -5818, -7154, -8540, -9975,
    -11455, -12980, -14548, -16155, -17799, -19478, -21189, -22929, -24694, -26482, -28289, -30112,
    -31947, -33791, -35640, -37489, -39336, -41176, -43006, -44821, -46617, -48390, -50137, -51853,
    -53534, -55178, -56778, -58333, -59838, -61289, -62684, -64019, -65290, -66494, -67629, -68692,
    -69679, -70590, -71420, -72169, -72835, -73415, -73908, -74313, -74630, -74856, -74992, 75038,
];

/// What the synthesis uses, made once: the window D, and the 32-point DCT's cosines.
struct Synthesis {
    window: [f32; 512],
    cos: [[f32; SUBBANDS]; SUBBANDS],
}

fn synthesis() -> &'static Synthesis {
    static S: OnceLock<Synthesis> = OnceLock::new();
    S.get_or_init(|| {
        let mut window = [0f32; 512];
        for (i, &v) in WINDOW_HALF.iter().enumerate() {
            let v = v as f32 / 65536.0;
            window[i] = v;
            if i != 0 {
                window[512 - i] = if i % 64 == 0 { v } else { -v };
            }
        }
        let mut cos = [[0f32; SUBBANDS]; SUBBANDS];
        for (m, row) in cos.iter_mut().enumerate() {
            for (k, c) in row.iter_mut().enumerate() {
                let angle = std::f64::consts::PI * (m * (2 * k + 1)) as f64 / 64.0;
                *c = angle.cos() as f32;
            }
        }
        Synthesis { window, cos }
    })
}

/// One channel's synthesis filter bank: the last 16 vectors V of 64 (ISO 11172-3
/// §A.2, figure A.2), newest at `newest`.
#[derive(Clone)]
struct FilterBank {
    v: [[f32; 64]; 16],
    newest: usize,
}

impl FilterBank {
    fn new() -> Self {
        Self {
            v: [[0.0; 64]; 16],
            newest: 0,
        }
    }

    /// 32 PCM samples from one sample of each subband.
    fn synthesize(&mut self, s: &[f32; SUBBANDS], out: &mut [f32]) {
        let syn = synthesis();
        // V[i] = Σ_k cos((16 + i)(2k + 1)π/64) S[k], from the DCT X[m] = Σ_k cos(m(2k + 1)π/64) S[k].
        let mut x = [0f32; SUBBANDS];
        for (xm, row) in x.iter_mut().zip(&syn.cos) {
            *xm = row.iter().zip(s).map(|(c, v)| c * v).sum();
        }
        self.newest = (self.newest + 15) % 16;
        let v = &mut self.v[self.newest];
        for i in 0..16 {
            v[i] = x[16 + i];
            v[48 + i] = -x[i];
        }
        v[16] = 0.0;
        for i in 17..48 {
            v[i] = -x[48 - i];
        }
        // out[j] = Σ_m V_{2m}[j] D[64m + j] + V_{2m+1}[32 + j] D[64m + 32 + j].
        let d = &syn.window;
        for (j, o) in out.iter_mut().enumerate().take(SUBBANDS) {
            let mut sum = 0.0;
            for m in 0..8 {
                let even = &self.v[(self.newest + 2 * m) % 16];
                let odd = &self.v[(self.newest + 2 * m + 1) % 16];
                sum += even[j] * d[64 * m + j] + odd[32 + j] * d[64 * m + 32 + j];
            }
            *o = sum;
        }
    }
}

/// MPEG audio Layer II, as symphonia's `mp2` codec type.
pub(crate) struct Mp2Decoder {
    params: CodecParameters,
    banks: Vec<FilterBank>,
    /// A frame's requantized samples: channel, slot, subband.
    samples: Box<Samples>,
    buf: AudioBuffer<f32>,
}

type Samples = [[[f32; SUBBANDS]; SLOTS]; 2];

impl Mp2Decoder {
    fn decode_frames(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        let mut decoded = 0;
        while let Some(h) = Header::parse(data) {
            // A frame cut short is dropped, as FFmpeg drops it.
            let Some(frame) = data.get(..h.len) else {
                break;
            };
            self.frame(h, frame)?;
            data = &data[h.len..];
            decoded += 1;
        }
        if decoded == 0 {
            return decode_error("mp2: not a Layer II frame");
        }
        Ok(())
    }

    /// Decodes one frame onto the end of `buf`; one whose fields run past its end comes
    /// out silent (as long as it is, so that what follows keeps its time).
    fn frame(&mut self, h: Header, frame: &[u8]) -> Result<()> {
        let channels = h.channels();
        let n = channels.count();
        if make_room(
            &mut self.buf,
            h.rate,
            channels,
            FRAME_SAMPLES,
            4 * FRAME_SAMPLES,
        )? || self.banks.len() != n
        {
            self.banks = vec![FilterBank::new(); n];
        }
        let at = self.buf.frames();
        self.buf.render_reserved(Some(FRAME_SAMPLES));
        if read_samples(&h, frame, &mut self.samples).is_err() {
            for c in 0..n {
                self.buf.chan_mut(c)[at..].fill(0.0);
            }
            return Ok(());
        }
        for (c, bank) in self.banks.iter_mut().enumerate() {
            let out = &mut self.buf.chan_mut(c)[at..at + FRAME_SAMPLES];
            for (slot, pcm) in self.samples[c].iter().zip(out.chunks_exact_mut(SUBBANDS)) {
                bank.synthesize(slot, pcm);
            }
        }
        Ok(())
    }
}

/// Reads a frame's bit allocation, scale factors and samples into `out` (channel, slot,
/// subband), requantized; subbands without an allocation are 0.
fn read_samples(h: &Header, frame: &[u8], out: &mut Samples) -> Parse<()> {
    *out = [[[0.0; SUBBANDS]; SLOTS]; 2];
    let mut r = Bits::new(frame);
    r.skip(32 + if h.protected { 16 } else { 0 })?;
    let table = h.table();
    let sblimit = table.sblimit;
    let n = h.channels().count();
    let bound = match h.mode {
        JOINT_STEREO => (4 * (usize::from(h.mode_ext) + 1)).min(sblimit),
        _ => sblimit,
    };
    let mut alloc = [[0u8; SUBBANDS]; 2];
    for sb in 0..sblimit {
        let (bits, _) = table.band(sb);
        if sb < bound {
            for a in alloc.iter_mut().take(n) {
                a[sb] = r.get(bits)? as u8;
            }
        } else {
            let v = r.get(bits)? as u8;
            alloc[0][sb] = v;
            alloc[1][sb] = v;
        }
    }
    let mut scfsi = [[0u8; SUBBANDS]; 2];
    for sb in 0..sblimit {
        for c in 0..n {
            if alloc[c][sb] != 0 {
                scfsi[c][sb] = r.get(2)? as u8;
            }
        }
    }
    // Each part's scale factors, as multipliers: part, channel, subband.
    let mut scale = [[[0f32; SUBBANDS]; 2]; 3];
    for sb in 0..sblimit {
        for c in 0..n {
            if alloc[c][sb] == 0 {
                continue;
            }
            let mut sf = [0u32; 3];
            match scfsi[c][sb] {
                0 => {
                    for f in &mut sf {
                        *f = r.get(6)?;
                    }
                }
                1 => {
                    sf[0] = r.get(6)?;
                    sf[1] = sf[0];
                    sf[2] = r.get(6)?;
                }
                2 => sf = [r.get(6)?; 3],
                _ => {
                    sf[0] = r.get(6)?;
                    sf[1] = r.get(6)?;
                    sf[2] = sf[1];
                }
            }
            for (part, &f) in sf.iter().enumerate() {
                scale[part][c][sb] = scale_factor(f);
            }
        }
    }
    for (part, scale) in scale.iter().enumerate() {
        for granule in 0..4 {
            let slot = 12 * part + 3 * granule;
            for sb in 0..sblimit {
                let (_, classes) = table.band(sb);
                let shared = sb >= bound;
                let coded = if shared { 1 } else { n };
                for (c, alloc) in alloc.iter().enumerate().take(coded) {
                    let a = usize::from(alloc[sb]);
                    if a == 0 {
                        continue;
                    }
                    let class = usize::from(classes[a - 1]);
                    let codes = read_codes(&mut r, class)?;
                    let targets = if shared { 0..n } else { c..c + 1 };
                    for t in targets {
                        let sf = scale[t][sb];
                        for (m, &code) in codes.iter().enumerate() {
                            out[t][slot + m][sb] = requantize(code, STEPS[class]) * sf;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Three samples' codes of quantization class `class`: one grouped code, or three.
fn read_codes(r: &mut Bits, class: usize) -> Parse<[u32; 3]> {
    let bits = CODE_BITS[class];
    if grouped(class) {
        let steps = STEPS[class];
        let v = r.get(bits)?;
        Ok([v % steps, (v / steps) % steps, v / (steps * steps)])
    } else {
        Ok([r.get(bits)?, r.get(bits)?, r.get(bits)?])
    }
}

/// A code of a quantizer of `steps` levels as a fraction in (-1, 1): ISO 11172-3's
/// C·(s'' + D), which is (2c - (steps - 1)) / steps.
fn requantize(code: u32, steps: u32) -> f32 {
    (2.0 * code as f32 - (steps - 1) as f32) / steps as f32
}

/// Scale factor index `i` as a multiplier: 2^(1 - i/3) (ISO 11172-3 table B.1).
fn scale_factor(i: u32) -> f32 {
    (2.0f64.powf(1.0 - f64::from(i) / 3.0)) as f32
}

impl Decoder for Mp2Decoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let buf = first_buffer(
            params,
            CODEC_TYPE_MP2,
            "mp2: not Layer II",
            4 * FRAME_SAMPLES,
        )?;
        let n = buf.spec().channels.count();
        Ok(Self {
            params: params.clone(),
            banks: vec![FilterBank::new(); n],
            samples: Box::new([[[0.0; SUBBANDS]; SLOTS]; 2]),
            buf,
        })
    }

    fn reset(&mut self) {
        for b in &mut self.banks {
            *b = FilterBank::new();
        }
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(CODEC_TYPE_MP2, "mp2", "MPEG Audio Layer II")]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frames(&p.data));
}

/// MPEG audio of any layer where a container names them all MP3 (MP4's object types
/// 0x69 and 0x6B, QuickTime's `.mp3`): Layer II frames go to [`Mp2Decoder`], the others
/// to symphonia's decoder, made anew where the frames' rate or channels change (MP3 files
/// joined end to end), which it refuses: after two frames of the new kind, the first of
/// which is dropped, so that one damaged header is passed over as before.
pub(crate) struct MpegAudioDecoder {
    layer2: Mp2Decoder,
    other: symphonia::default::codecs::MpaDecoder,
    params: CodecParameters,
    options: DecoderOptions,
    /// The version, rate and mono bits of the frames symphonia's decoder takes, and of a
    /// frame unlike them just passed over.
    spec: Option<(u8, u8, bool)>,
    changed: Option<(u8, u8, bool)>,
    last_layer2: bool,
}

impl Decoder for MpegAudioDecoder {
    fn try_new(params: &CodecParameters, options: &DecoderOptions) -> Result<Self> {
        let mut layer2 = params.clone();
        layer2.for_codec(CODEC_TYPE_MP2);
        Ok(Self {
            layer2: Mp2Decoder::try_new(&layer2, options)?,
            other: symphonia::default::codecs::MpaDecoder::try_new(params, options)?,
            params: params.clone(),
            options: *options,
            spec: None,
            changed: None,
            last_layer2: false,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            symphonia::core::codecs::CODEC_TYPE_MP3,
            "mp3",
            "MPEG Audio Layer III (and I and II where so named)"
        )]
    }

    fn reset(&mut self) {
        self.layer2.reset();
        self.other.reset();
    }

    fn codec_params(&self) -> &CodecParameters {
        self.other.codec_params()
    }

    fn decode(
        &mut self,
        packet: &symphonia::core::formats::Packet,
    ) -> Result<symphonia::core::audio::AudioBufferRef<'_>> {
        self.last_layer2 = Header::parse(&packet.data).is_some();
        if self.last_layer2 {
            return self.layer2.decode(packet);
        }
        if let &[0xFF, b1, b2, b3, ..] = &packet.data[..] {
            let spec = (b1 & 0x18, b2 & 0x0C, b3 >> 6 == MONO);
            match self.spec {
                Some(s) if s != spec && self.changed != Some(spec) => {
                    self.changed = Some(spec);
                    return decode_error("mpa: a frame of another rate or channels");
                }
                Some(s) if s != spec => {
                    self.other = symphonia::default::codecs::MpaDecoder::try_new(
                        &self.params,
                        &self.options,
                    )?;
                }
                _ => {}
            }
            self.spec = Some(spec);
            self.changed = None;
        }
        self.other.decode(packet)
    }

    fn finalize(&mut self) -> symphonia::core::codecs::FinalizeResult {
        self.other.finalize()
    }

    fn last_decoded(&self) -> symphonia::core::audio::AudioBufferRef<'_> {
        match self.last_layer2 {
            true => self.layer2.last_decoded(),
            false => self.other.last_decoded(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_give_rates_lengths_and_tables() {
        // MPEG-1, 48 kHz, mono, 384 kb/s (what FFmpeg writes by default), no CRC.
        let h = Header::parse(&[0xFF, 0xFD, 0xE4, 0xC0]).unwrap();
        assert_eq!(
            (h.rate, h.kbps, h.len, h.protected),
            (48_000, 384, 1152, false)
        );
        assert_eq!(h.channels(), Channels::FRONT_LEFT);
        assert_eq!(h.table().sblimit, 27);
        // 44.1 kHz stereo at 192 kb/s, padded, with a CRC: table B.
        let h = Header::parse(&[0xFF, 0xFC, 0xA2, 0x00]).unwrap();
        assert_eq!((h.rate, h.len, h.protected), (44_100, 627, true));
        assert_eq!(h.table().sblimit, 30);
        // 32 kHz stereo at 64 kb/s (32 per channel): table D; at 44.1 kHz, table C.
        assert_eq!(
            Header::parse(&[0xFF, 0xFD, 0x48, 0])
                .unwrap()
                .table()
                .sblimit,
            12
        );
        assert_eq!(
            Header::parse(&[0xFF, 0xFD, 0x40, 0])
                .unwrap()
                .table()
                .sblimit,
            8
        );
        // MPEG-2 at 16 kHz, 160 kb/s: the LSF table; 1440 bytes a frame.
        let h = Header::parse(&[0xFF, 0xF5, 0xE8, 0xC0]).unwrap();
        assert_eq!((h.rate, h.len, h.table().sblimit), (16_000, 1440, 30));
        // Other layers, free format, bad bitrate or rate, reserved version: none.
        for bad in [
            [0xFF, 0xFB, 0x90, 0],
            [0xFF, 0xFD, 0x00, 0],
            [0xFF, 0xFD, 0xF0, 0],
            [0xFF, 0xFD, 0x9C, 0],
            [0xFF, 0xED, 0x90, 0],
        ] {
            assert_eq!(Header::parse(&bad), None, "{bad:x?}");
        }
        // Every table's runs cover its subbands.
        for t in [&TABLE_A, &TABLE_B, &TABLE_C, &TABLE_D, &LSF] {
            let covered: usize = t.runs.iter().map(|r| r.0).sum();
            assert_eq!(covered, t.sblimit);
            assert!(t
                .runs
                .iter()
                .all(|&(_, bits, c)| c.len() == (1 << bits) - 1));
        }
    }

    #[test]
    fn requantization_is_the_standards() {
        // 3 steps: -2/3, 0, 2/3; 7 steps (3 bits): C = 8/7, D = 1/4.
        assert_eq!(requantize(0, 3), -2.0 / 3.0);
        assert_eq!(requantize(1, 3), 0.0);
        assert!((requantize(0, 7) - 8.0 / 7.0 * (-1.0 + 0.25)).abs() < 1e-7);
        assert!((scale_factor(1) - 1.587_401).abs() < 1e-6);
        assert_eq!(scale_factor(0), 2.0);
    }

    #[test]
    fn silence_synthesizes_to_silence_and_a_subband_to_its_band() {
        let mut bank = FilterBank::new();
        let mut out = [1f32; 32];
        bank.synthesize(&[0.0; 32], &mut out);
        assert_eq!(out, [0.0; 32]);
        // A constant in subband 0 settles to a constant output (the low band's DC gain
        // is 1 in the standard's scale, within the window's rounding).
        let mut s = [0f32; 32];
        s[0] = 0.5;
        for _ in 0..40 {
            bank.synthesize(&s, &mut out);
        }
        for o in out {
            assert!((o - 0.5).abs() < 0.01, "{o}");
        }
    }

    #[test]
    fn damaged_frames_come_out_silent_or_an_error() {
        let mut d = Mp2Decoder::try_new(
            CodecParameters::new().for_codec(CODEC_TYPE_MP2),
            &DecoderOptions::default(),
        )
        .unwrap();
        // A header and a frame of all-ones fields: every allocation at its largest.
        let mut frame = vec![0xFF; 1152];
        frame[..4].copy_from_slice(&[0xFF, 0xFD, 0xE4, 0xC0]);
        assert!(d.decode_frames(&frame).is_ok());
        assert_eq!(d.buf.frames(), FRAME_SAMPLES);
        assert!(d.buf.chan(0).iter().all(|v| v.is_finite()));
        // Random bodies behind every header there is: finite samples, never a panic.
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut frames = 0;
        for _ in 0..3000 {
            let head = (next() as u32 | 0xFFE0_0000).to_be_bytes();
            let Some(h) = Header::parse(&head) else {
                continue;
            };
            frames += 1;
            let mut frame: Vec<u8> = (0..h.len).map(|_| next() as u8).collect();
            frame[..4].copy_from_slice(&head);
            assert!(d.decode_frames(&frame).is_ok());
            let n = h.channels().count();
            assert!((0..n).all(|c| d.buf.chan(c).iter().all(|v| v.is_finite())));
        }
        assert!(frames > 200, "{frames} frames");
        // Cut short, or not a frame at all.
        assert!(d.decode_frames(&frame[..500]).is_err());
        assert!(d.decode_frames(b"not a frame").is_err());
    }
}
