//! DTS Coherent Acoustics (ETSI TS 102 114): the audio of many DVDs' and most Blu-rays'
//! film tracks, in Matroska remuxes, transport streams and `.dts` files. No Rust crate
//! decodes it, so this is sotto's own decoder of its core: up to 5.1 channels of 32-band
//! subband ADPCM, at every sample rate and bit rate (`core.rs`: side information,
//! Huffman and block codes, high-frequency VQ, joint intensity, LFE), and the synthesis
//! filter bank (`synth.rs`). Channels come out in FFmpeg's order and scale.
//!
//! Extensions are left out as FFmpeg leaves out those it cannot use: a DTS-ES stream's
//! extra back channel (XCH, XXCH: its signal is also mixed into the surrounds the core
//! carries), 96 kHz bands (X96), and DTS-HD's substreams (high resolution and lossless
//! audio), of which the core is the backward-compatible part every Blu-ray track has. A
//! stream with no core at all (DTS Express, lossless without a core) is refused by name.
//! The four ways a core frame is stored are taken: 16-bit words big- or little-endian,
//! and 14-bit words (DTS audio CDs' WAV files) of either order.

mod bits;
mod core;
mod synth;
mod tables;

use std::borrow::Cow;

use symphonia::core::audio::Signal;
use symphonia::core::audio::{AudioBuffer, Channels};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_DCA};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use self::core::{Core, FrameHeader, BANDS, LFE_HISTORY, MAX_CHANNELS};
use crate::codec::{first_buffer, make_room, Bits};
use synth::Qmf;

pub(crate) const CODEC_TYPE_DTS: symphonia::core::codecs::CodecType = CODEC_TYPE_DCA;

const NO_CORE: &str = "dts: DTS-HD audio without a core (DTS Express, or lossless only)";

/// How a core frame's words are stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Words {
    Be16,
    Le16,
    Be14,
    Le14,
}

/// What a frame's first bytes say: a core frame, or a DTS-HD substream (which follows
/// its core frame, or stands alone where there is none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Header {
    /// The frame's bytes as stored.
    pub(crate) len: usize,
    /// None for a DTS-HD substream.
    core: Option<CoreHeader>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct CoreHeader {
    words: Words,
    rate: u32,
    amode: usize,
    lfe: bool,
}

/// Bytes of a frame's start that `Header::parse` reads.
pub(crate) const HEADER: usize = 16;

impl Header {
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let words = match b.get(..6)? {
            [0x7F, 0xFE, 0x80, 0x01, ..] => Words::Be16,
            [0xFE, 0x7F, 0x01, 0x80, ..] => Words::Le16,
            [0x1F, 0xFF, 0xE8, 0x00, 0x07, x] if x & 0xF0 == 0xF0 => Words::Be14,
            [0xFF, 0x1F, 0x00, 0xE8, x, 0x07] if x & 0xF0 == 0xF0 => Words::Le14,
            [0x64, 0x58, 0x20, 0x25, ..] => {
                // DTS-HD's substream header: user bits, index, then its sizes' widths.
                let mut r = Bits::new(b.get(4..10)?);
                r.skip(10).ok()?;
                let wide = r.bit().ok()?;
                let (head, size) = if wide { (12, 20) } else { (8, 16) };
                r.skip(head).ok()?;
                let len = r.get(size).ok()? as usize + 1;
                return (len >= HEADER).then_some(Self { len, core: None });
            }
            _ => return None,
        };
        let head = to_be16(b.get(..HEADER)?, words);
        let mut r = Bits::new(&head);
        r.skip(32 + 1 + 5 + 1 + 7).ok()?;
        let size = r.get(14).ok()? as usize + 1;
        let amode = r.get(6).ok()? as usize;
        let rate = tables::SAMPLE_RATES[r.get(4).ok()? as usize];
        r.skip(5 + 1 + 1 + 1 + 1 + 1 + 3 + 1 + 1).ok()?;
        let lfe = r.get(2).ok()?;
        if size < 96 || amode >= 10 || rate == 0 || lfe == 3 {
            return None;
        }
        let len = match words {
            Words::Be16 | Words::Le16 => size,
            // 16 stored bits carry 14.
            Words::Be14 | Words::Le14 => (size * 8).div_ceil(7).next_multiple_of(2),
        };
        Some(Self {
            len,
            core: Some(CoreHeader {
                words,
                rate,
                amode,
                lfe: lfe != 0,
            }),
        })
    }

    pub(crate) fn rate(&self) -> Option<u32> {
        self.core.map(|c| c.rate)
    }

    /// The frame's channels, in the order they come out; None for a substream.
    pub(crate) fn channels(&self) -> Option<Channels> {
        self.core.map(|c| c.channels())
    }
}

impl CoreHeader {
    fn channels(&self) -> Channels {
        let mut mask = speakers(self.amode)
            .iter()
            .fold(Channels::empty(), |m, &s| m | s);
        if self.lfe {
            mask |= Channels::LFE1;
        }
        mask
    }
}

/// The positions of an audio mode's primary channels, in their coded order (FFmpeg's
/// names for them: its DTS surrounds are side ones, the single surround a back centre).
fn speakers(amode: usize) -> &'static [Channels] {
    use Channels as C;
    match amode {
        0 => &[C::FRONT_CENTRE],
        1..=4 => &[C::FRONT_LEFT, C::FRONT_RIGHT],
        5 => &[C::FRONT_CENTRE, C::FRONT_LEFT, C::FRONT_RIGHT],
        6 => &[C::FRONT_LEFT, C::FRONT_RIGHT, C::REAR_CENTRE],
        7 => &[
            C::FRONT_CENTRE,
            C::FRONT_LEFT,
            C::FRONT_RIGHT,
            C::REAR_CENTRE,
        ],
        8 => &[C::FRONT_LEFT, C::FRONT_RIGHT, C::SIDE_LEFT, C::SIDE_RIGHT],
        _ => &[
            C::FRONT_CENTRE,
            C::FRONT_LEFT,
            C::FRONT_RIGHT,
            C::SIDE_LEFT,
            C::SIDE_RIGHT,
        ],
    }
}

/// A frame's bytes as 16-bit big-endian words, the form the syntax is read in.
fn to_be16(b: &[u8], words: Words) -> Cow<'_, [u8]> {
    let word = |p: &[u8]| match words {
        Words::Be16 | Words::Be14 => u16::from_be_bytes([p[0], p[1]]),
        Words::Le16 | Words::Le14 => u16::from_le_bytes([p[0], p[1]]),
    };
    match words {
        Words::Be16 => Cow::Borrowed(b),
        Words::Le16 => b
            .chunks_exact(2)
            .flat_map(|p| word(p).to_be_bytes())
            .collect(),
        Words::Be14 | Words::Le14 => {
            // Each word's low 14 bits, packed.
            let mut out = Vec::with_capacity(b.len() * 7 / 8 + 4);
            let (mut acc, mut n) = (0u32, 0);
            for p in b.chunks_exact(2) {
                acc = (acc << 14) | u32::from(word(p) & 0x3FFF);
                n += 14;
                while n >= 8 {
                    n -= 8;
                    out.push((acc >> n) as u8);
                }
            }
            if n > 0 {
                out.push((acc << (8 - n)) as u8);
            }
            Cow::Owned(out)
        }
    }
}

/// A symphonia [`Decoder`] for DTS's core audio.
pub(crate) struct DtsDecoder {
    params: CodecParameters,
    core: Box<Core>,
    qmf: Vec<Qmf>,
    buf: AudioBuffer<f32>,
    /// Whether a core frame has come: DTS-HD substreams before any mean there is none.
    cored: bool,
}

/// PCM samples a frame holds at most.
const MAX_FRAME: usize = self::core::MAX_BLOCKS * BANDS;

impl DtsDecoder {
    /// Decodes every frame of `data` into `buf`, skipping DTS-HD substreams.
    fn decode_frames(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        let mut frames = 0;
        while let Some(h) = Header::parse(data) {
            let Some(frame) = data.get(..h.len) else {
                // A last frame cut short: as much of it as there is.
                if let Some(c) = h.core {
                    self.frame(&c, &to_be16(data, c.words))?;
                    frames += 1;
                }
                break;
            };
            match h.core {
                Some(c) => {
                    self.frame(&c, &to_be16(frame, c.words))?;
                    self.cored = true;
                }
                None if !self.cored => return unsupported_error(NO_CORE),
                None => {}
            }
            data = &data[h.len..];
            frames += 1;
        }
        if frames == 0 {
            return decode_error("dts: not a DTS frame");
        }
        Ok(())
    }

    /// Decodes one core frame onto the end of `buf`; a frame that does not parse comes
    /// out silent (as long as it is, so that what follows keeps its time).
    fn frame(&mut self, c: &CoreHeader, frame: &[u8]) -> Result<()> {
        let mut r = Bits::new(frame);
        let h = match FrameHeader::read(&mut r) {
            Ok(h) => h,
            Err(e) => return decode_error(e),
        };
        let mask = c.channels();
        let samples = h.blocks * BANDS;
        if make_room(&mut self.buf, h.rate, mask, samples, MAX_FRAME)? {
            self.qmf = vec![Qmf::new(); MAX_CHANNELS];
        }
        let at = self.buf.frames();
        self.buf.render_reserved(Some(samples));
        let rank = |s: Channels| (mask.bits() & (s.bits() - 1)).count_ones() as usize;
        if self.core.read(&mut r, &h).is_err() {
            for o in 0..mask.count() {
                self.buf.chan_mut(o)[at..].fill(0.0);
            }
            self.core.reset();
            self.qmf = vec![Qmf::new(); MAX_CHANNELS];
            return Ok(());
        }
        for (ch, &s) in speakers(h.amode).iter().enumerate() {
            let out = &mut self.buf.chan_mut(rank(s))[at..at + samples];
            let mut input = [0f32; BANDS];
            for (j, pcm) in out.chunks_exact_mut(BANDS).enumerate() {
                for (band, x) in input.iter_mut().enumerate() {
                    let v = self.core.subband(ch, band, h.blocks)[j] as f32;
                    // The modulation's sign pattern: - + + - by band.
                    *x = if (band.wrapping_sub(1)) & 2 != 0 {
                        -v
                    } else {
                        v
                    };
                }
                self.qmf[ch].block(&input, h.filter_perfect, pcm);
            }
        }
        if h.lfe != 0 {
            let one_in = if h.lfe == 1 { 128 } else { 64 };
            let count = samples / one_in;
            let out = &mut self.buf.chan_mut(rank(Channels::LFE1))[at..at + samples];
            synth::lfe(&self.core.lfe[..LFE_HISTORY + count], one_in, out);
            self.core.lfe.copy_within(count..count + LFE_HISTORY, 0);
        }
        let pair = |buf: &mut AudioBuffer<f32>, a: Channels, b: Channels| {
            let (a, b) = (rank(a), rank(b));
            let (lo, hi) = buf.chan_pair_mut(a, b);
            for (x, y) in lo[at..].iter_mut().zip(&mut hi[at..]) {
                (*x, *y) = (*x + *y, *x - *y);
            }
        };
        if (h.sumdiff_front && h.amode > 0) || h.amode == 3 {
            pair(&mut self.buf, Channels::FRONT_LEFT, Channels::FRONT_RIGHT);
        }
        if h.sumdiff_surround && h.amode >= 8 {
            pair(&mut self.buf, Channels::SIDE_LEFT, Channels::SIDE_RIGHT);
        }
        Ok(())
    }
}

impl Decoder for DtsDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let buf = first_buffer(params, CODEC_TYPE_DTS, "dts: not DTS", MAX_FRAME)?;
        Ok(Self {
            params: params.clone(),
            core: Box::new(Core::new()),
            qmf: vec![Qmf::new(); MAX_CHANNELS],
            buf,
            cored: false,
        })
    }

    fn reset(&mut self) {
        self.core.reset();
        self.qmf = vec![Qmf::new(); MAX_CHANNELS];
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            CODEC_TYPE_DTS,
            "dca",
            "DTS Coherent Acoustics (its core; DTS-HD's core too)"
        )]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frames(&p.data));
}
