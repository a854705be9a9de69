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
//! one to six blocks, frame-level strategies, spectral extension and the adaptive hybrid
//! transform; as FFmpeg does, the first program's independent substream is decoded (a 7.1
//! stream's 5.1 core) and the dependent ones are skipped. Enhanced coupling and reduced
//! sample rates (which FFmpeg's decoder lacks too) are refused by name.

mod aht;
mod blocks;
mod eac3;
mod tables;
mod transform;
mod vq;

use symphonia::core::audio::Signal;
use symphonia::core::audio::{AudioBuffer, Channels};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_EAC3};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room};
use blocks::{Blocks, AC3_SYNTAX};
use tables::{FRAME_WORDS, FULL_CHANNELS, RATES};
use transform::{window, Transforms};

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

/// What a frame that a decoder lacks a coding tool for fails with, to be told from damage.
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
        if make_room(&mut self.buf, h.rate, mask, samples, 4 * FRAME_SAMPLES)? {
            self.delay = vec![[0.0; BLOCK]; out];
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
            b.aht = [false; CHANNELS];
            b.first_cpl_leak = false;
            b.spx.in_use = false;
            b.spx.uses = [false; 5];
            skip_bsi(&mut r, h.acmod).map_err(<&str>::from)
        };
        let mut failed = parsed.is_err();
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
        let buf = first_buffer(params, CODEC_TYPE_AC3, "ac3: not AC-3", 4 * FRAME_SAMPLES)?;
        let channels = buf.spec().channels;
        Ok(Self {
            params: params.clone(),
            blocks: Box::new(Blocks::new()),
            transforms: Transforms::new(),
            delay: vec![[0.0; BLOCK]; channels.count()],
            buf,
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

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frames(&p.data));
}

#[cfg(test)]
mod tests {
    use super::*;
    use symphonia::core::formats::Packet;

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
                decode_built(frames);
                Ok(())
            })
            .unwrap();
    }

    /// A frame built from a proptest case: the header's codes and bytes, then its body.
    type Built = ((u8, u8, u8), (u8, u8, u8), Vec<u8>);

    /// Decodes frames built from header fields and bodies one after another, checking that
    /// whatever comes out is finite.
    fn decode_built(frames: Vec<Built>) {
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
                assert!(out.samples().iter().all(|v| v.is_finite()));
            }
        }
    }

    /// What the proptest above once found: an E-AC-3 block that turned spectral extension
    /// on while keeping a band structure no block had coded (it panicked).
    #[test]
    fn spectral_extension_without_a_coded_structure() {
        let mut second = vec![0u8, 49, 0, 142, 144, 0, 64, 0, 192];
        second.resize(70, 0);
        second.extend([3, 61, 0, 0]);
        decode_built(vec![
            ((0, 0, 0), (0, 0, 64), vec![8, 64, 64, 0, 59, 206, 208]),
            ((19, 0, 11), (0, 74, 32), second),
        ]);
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

    /// An E-AC-3 frame's header to its audio frame fields: independent stream 0, 48 kHz,
    /// six blocks, stereo, bsid 16, and no compression, metadata or extra information.
    fn eac3_start(w: &mut Writer, words: u32) {
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
    }

    fn decode_one(frame: &[u8]) -> Result<usize> {
        let mut p = CodecParameters::new();
        p.for_codec(CODEC_TYPE_AC3);
        let mut dec = Ac3Decoder::try_new(&p, &DecoderOptions::default()).unwrap();
        dec.decode(&Packet::new_from_slice(0, 0, 0, frame))
            .map(|b| b.frames())
    }

    /// A frame whose first channel uses the adaptive hybrid transform decodes (to its six
    /// blocks); one that uses enhanced coupling, which sotto does not decode (nor FFmpeg),
    /// is refused as unsupported, naming the tool, not taken for a damaged one and
    /// silenced.
    #[test]
    fn e_ac3_tools_decode_or_are_named() {
        let words = 256;
        let mut w = Writer::default();
        eac3_start(&mut w, words);
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
        assert_eq!(decode_one(&frame).unwrap(), FRAME_SAMPLES);

        let mut w = Writer::default();
        eac3_start(&mut w, words);
        // AC-3-style strategies, no AHT, a frame SNR offset; coupling on from block 0.
        w.put(1, 1)
            .put(1, 0)
            .put(2, 0)
            .put(1, 0)
            .put(6, 0)
            .put(1, 0);
        w.put(1, 1).put(5, 0);
        // Each block: the coupling channel's strategy and both channels'.
        w.put(6, 0b01_01_01).put(30, 0);
        // The converter's strategies, the frame SNR offset, no block start information.
        w.put(10, 0).put(10, 0).put(1, 0);
        // Block 0: no dynamic range, no spectral extension, enhanced coupling on.
        w.put(1, 0).put(1, 0).put(1, 1);
        match decode_one(&w.bytes(2 * words as usize)) {
            Err(symphonia::core::errors::Error::Unsupported(what)) => assert_eq!(what, NO_ECPL),
            other => panic!("{other:?}"),
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
