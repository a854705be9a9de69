//! Dolby TrueHD (Blu-ray's lossless track, in most films' Matroska remuxes) and MLP
//! (Meridian Lossless Packing: DVD-Audio), which share one coding. No Rust crate decodes
//! either, so this is sotto's own decoder, written from FFmpeg's (MLP's specification is
//! not public): access units of up to three decoded substreams, each with restart
//! headers, decoding parameters, Huffman-coded residuals, FIR and IIR prediction, and
//! primitive matrices with their noise channels. Lossless: the samples are FFmpeg's to
//! the bit. As FFmpeg does, the highest of the first three substreams is decoded (a
//! 7.1 stream's 7.1; a fourth, Dolby Atmos's objects, is not audio to decode), and
//! channels come out in FFmpeg's order.

use symphonia::core::audio::Signal;
use symphonia::core::audio::{AudioBuffer, Channels};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::Result;
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room, Bits};

/// TrueHD and MLP, which symphonia has no codec type for.
pub(crate) const CODEC_TYPE_TRUEHD: CodecType = decl_codec_type(b"truehd");

const MAX_CHANNELS: usize = 8;
const MAX_MATRICES: usize = 8;
const MAX_SUBSTREAMS: usize = 4;
/// Samples in an access unit at most (40 at 48 kHz, up to 192 kHz), and its power of two.
const MAX_BLOCKSIZE: usize = 160;
const MAX_BLOCKSIZE_POW2: usize = 256;
const MAX_FIR_ORDER: usize = 8;
const MAX_IIR_ORDER: usize = 4;
const SYNC_MAJOR: u32 = 0x00F8_726F;

/// The residual codebooks: (code, length) of values -7 up.
#[rustfmt::skip]
const HUFFMAN: [&[(u16, u8)]; 3] = [
    &[
        (0x01, 9), (0x01, 8), (0x01, 7), (0x01, 6), (0x01, 5), (0x01, 4), (0x01, 3), (0x04, 3),
        (0x05, 3), (0x06, 3), (0x07, 3), (0x03, 3), (0x05, 4), (0x09, 5), (0x11, 6), (0x21, 7),
        (0x41, 8), (0x81, 9),
    ],
    &[
        (0x01, 9), (0x01, 8), (0x01, 7), (0x01, 6), (0x01, 5), (0x01, 4), (0x01, 3), (0x02, 2),
        (0x03, 2), (0x03, 3), (0x05, 4), (0x09, 5), (0x11, 6), (0x21, 7), (0x41, 8), (0x81, 9),
    ],
    &[
        (0x01, 9), (0x01, 8), (0x01, 7), (0x01, 6), (0x01, 5), (0x01, 4), (0x01, 3), (0x01, 1),
        (0x03, 3), (0x05, 4), (0x09, 5), (0x11, 6), (0x21, 7), (0x41, 8), (0x81, 9),
    ],
];

/// TrueHD's channel groups in its coded order, with FFmpeg's (WAV order) positions.
const THD_GROUPS: [Channels; 13] = [
    Channels::FRONT_LEFT.union(Channels::FRONT_RIGHT),
    Channels::FRONT_CENTRE,
    Channels::LFE1,
    Channels::SIDE_LEFT.union(Channels::SIDE_RIGHT),
    Channels::TOP_FRONT_LEFT.union(Channels::TOP_FRONT_RIGHT),
    Channels::FRONT_LEFT_CENTRE.union(Channels::FRONT_RIGHT_CENTRE),
    Channels::REAR_LEFT.union(Channels::REAR_RIGHT),
    Channels::REAR_CENTRE,
    Channels::TOP_CENTRE,
    // Surround direct, which has no position of its own here: taken for the wides.
    Channels::FRONT_LEFT_WIDE.union(Channels::FRONT_RIGHT_WIDE),
    Channels::FRONT_LEFT_WIDE.union(Channels::FRONT_RIGHT_WIDE),
    Channels::TOP_FRONT_CENTRE,
    Channels::LFE2,
];

/// TrueHD's order of channels within a layout (ch_assign indexes it).
const THD_ORDER: [Channels; 18] = [
    Channels::FRONT_LEFT,
    Channels::FRONT_RIGHT,
    Channels::FRONT_CENTRE,
    Channels::LFE1,
    Channels::SIDE_LEFT,
    Channels::SIDE_RIGHT,
    Channels::TOP_FRONT_LEFT,
    Channels::TOP_FRONT_RIGHT,
    Channels::FRONT_LEFT_CENTRE,
    Channels::FRONT_RIGHT_CENTRE,
    Channels::REAR_LEFT,
    Channels::REAR_RIGHT,
    Channels::REAR_CENTRE,
    Channels::TOP_CENTRE,
    Channels::FRONT_LEFT_WIDE,
    Channels::FRONT_RIGHT_WIDE,
    Channels::TOP_FRONT_CENTRE,
    Channels::LFE2,
];

/// MLP's channel arrangements (by its 5-bit code) as FFmpeg lays them out.
fn mlp_layout(code: usize) -> Option<Channels> {
    use Channels as C;
    let (fl, fr, fc, lfe) = (C::FRONT_LEFT, C::FRONT_RIGHT, C::FRONT_CENTRE, C::LFE1);
    let (bc, bl, br) = (C::REAR_CENTRE, C::REAR_LEFT, C::REAR_RIGHT);
    let stereo = fl | fr;
    let quad = stereo | bl | br;
    let surround = stereo | fc;
    let four = surround | bc;
    let five_back = surround | bl | br;
    Some(match code {
        0 => fc,
        1 => stereo,
        2 => stereo | bc,
        3 => quad,
        4 => stereo | lfe,
        5 => stereo | bc | lfe,
        6 => quad | lfe,
        7 => surround,
        8 => four,
        9 => five_back,
        10 => surround | lfe,
        11 => four | lfe,
        12 => five_back | lfe,
        13 => four,
        14 => five_back,
        15 => surround | lfe,
        16 => four | lfe,
        17 => five_back | lfe,
        18 => quad | lfe,
        19 => five_back,
        20 => five_back | lfe,
        _ => return None,
    })
}

/// A major sync's facts (the header that starts a stream's access units every so often).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MajorSync {
    truehd: bool,
    pub(crate) rate: u32,
    /// Samples per access unit, and the power of two above.
    unit: usize,
    unit_pow2: usize,
    substreams: usize,
    /// Each decoded substream's channels.
    masks: [Channels; 3],
    /// The substream decoded: the highest of the first three.
    top: usize,
    /// MLP's arrangements 18 to 20, whose channels FFmpeg reorders.
    reorder: bool,
    /// Its 16-bit samples come out as 16-bit (MLP's group 1 of 16 bits); TrueHD is 24.
    bits16: bool,
    /// Bytes of the major sync block.
    size: usize,
}

impl MajorSync {
    /// Reads the major sync at the start of `b` (past an access unit's 4-byte header).
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let sync = u32::from_be_bytes(b.get(..4)?.try_into().ok()?);
        if sync >> 8 != SYNC_MAJOR || !matches!(sync & 0xFF, 0xBA | 0xBB) {
            return None;
        }
        let truehd = sync & 0xFF == 0xBA;
        let mut size = 28;
        if truehd && b.get(25)? & 1 == 1 {
            size += 2 + usize::from(b.get(26)? >> 4) * 2;
        }
        b.get(..size)?;
        let mut r = Bits::new(&b[4..]);
        let rate_of = |code: u32| match code {
            0xF => 0,
            c => (if c & 8 != 0 { 44_100 } else { 48_000 }) << (c & 7),
        };
        let (rate, ratebits, masks, reorder, bits16);
        if truehd {
            ratebits = r.get(4).ok()?;
            rate = rate_of(ratebits);
            r.skip(4 + 2 + 2).ok()?;
            let one = r.get(5).ok()?;
            r.skip(2).ok()?;
            let two = r.get(13).ok()?;
            let layout = |map: u32| {
                (0..13)
                    .filter(|i| map >> i & 1 == 1)
                    .fold(Channels::empty(), |m, i| m | THD_GROUPS[i])
            };
            masks = [
                Channels::FRONT_LEFT | Channels::FRONT_RIGHT,
                layout(one),
                layout(two),
            ];
            (reorder, bits16) = (false, false);
        } else {
            let group1 = r.get(4).ok()?;
            r.skip(4).ok()?;
            ratebits = r.get(4).ok()?;
            rate = rate_of(ratebits);
            r.skip(4 + 11).ok()?;
            let code = r.get(5).ok()? as usize;
            let layout = mlp_layout(code)?;
            masks = [Channels::FRONT_LEFT | Channels::FRONT_RIGHT, layout, layout];
            reorder = (18..=20).contains(&code);
            bits16 = match group1 {
                0 => true,
                1 | 2 => false,
                _ => return None,
            };
        }
        r.skip(48 + 1 + 15).ok()?;
        let substreams = r.get(4).ok()? as usize;
        let unit = 40 << (ratebits & 7);
        if rate == 0 || rate > 192_000 || unit > MAX_BLOCKSIZE || substreams == 0 {
            return None;
        }
        if substreams > MAX_SUBSTREAMS || (!truehd && substreams > 2) {
            return None;
        }
        let mut sync = Self {
            truehd,
            rate,
            unit,
            unit_pow2: 64 << (ratebits & 7),
            substreams,
            masks,
            top: (substreams - 1).min(2),
            reorder,
            bits16,
            size,
        };
        // One substream: its own layout. Two or more: the first is the stereo mix.
        if substreams == 1 {
            sync.masks[0] = masks[1];
        }
        if sync.masks[2].is_empty() {
            sync.masks[2] = masks[1];
        }
        // A mono presentation beside the stereo one: FFmpeg decodes the stereo.
        if truehd && sync.top == 1 && sync.masks[1] == Channels::FRONT_CENTRE {
            sync.top = 0;
        }
        if sync.masks[sync.top].is_empty() {
            return None;
        }
        Some(sync)
    }

    /// The channels that come out, in their order.
    pub(crate) fn channels(&self) -> Channels {
        self.masks[self.top]
    }
}

/// Where an access unit starts a TrueHD or MLP stream: its length (from the 4-byte
/// header) where the unit holds a major sync.
pub(crate) fn sync_unit(b: &[u8]) -> Option<(usize, MajorSync)> {
    let len = usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?]) & 0xFFF) * 2;
    let sync = MajorSync::parse(b.get(4..)?)?;
    (len >= 4 + sync.size).then_some((len, sync))
}

type Parse<T> = crate::codec::Parse<T>;

const OVERRUN: &str = "truehd: the access unit's fields run past its end";

impl Bits<'_> {
    /// A residual's Huffman-coded part: its symbol index (0 for -7).
    fn residual(&mut self, book: usize) -> Parse<i32> {
        let next = self.peek32();
        for (i, &(code, len)) in HUFFMAN[book].iter().enumerate() {
            if next >> (32 - u32::from(len)) == u32::from(code) {
                self.skip(usize::from(len))?;
                return Ok(i as i32);
            }
        }
        Err("truehd: a residual code that is in no codebook")
    }
}

#[derive(Clone, Copy, Default)]
struct Filter {
    order: usize,
    shift: u32,
    coeff: [i32; MAX_FIR_ORDER],
    state: [i32; MAX_FIR_ORDER],
}

#[derive(Clone, Copy, Default)]
struct Channel {
    fir: Filter,
    iir: Filter,
    huff_offset: i32,
    sign_huff_offset: i32,
    codebook: usize,
    huff_lsbs: u32,
}

/// A substream's state: its restart header, decoding parameters and filters.
#[derive(Clone, Copy, Default)]
struct Substream {
    restart_seen: bool,
    noise_type: bool,
    min_channel: usize,
    max_channel: usize,
    max_matrix_channel: usize,
    ch_assign: [usize; MAX_CHANNELS],
    channels: [Channel; MAX_CHANNELS],
    noise_shift: u32,
    noisegen_seed: u32,
    data_check: bool,
    presence: u8,
    matrices: usize,
    matrix_out: [usize; MAX_MATRICES],
    lsb_bypass: [bool; MAX_MATRICES],
    matrix_coeff: [[i32; MAX_CHANNELS + 2]; MAX_MATRICES],
    matrix_noise_shift: [u32; MAX_MATRICES],
    quant_step: [u32; MAX_CHANNELS],
    blocksize: usize,
    blockpos: usize,
    output_shift: [u32; MAX_CHANNELS],
}

const PARAM_BLOCKSIZE: u8 = 1 << 7;
const PARAM_MATRIX: u8 = 1 << 6;
const PARAM_OUTSHIFT: u8 = 1 << 5;
const PARAM_QUANTSTEP: u8 = 1 << 4;
const PARAM_FIR: u8 = 1 << 3;
const PARAM_IIR: u8 = 1 << 2;
const PARAM_HUFFOFFSET: u8 = 1 << 1;
const PARAM_PRESENCE: u8 = 1;

/// The decoder's state across access units.
struct State {
    sync: Option<MajorSync>,
    subs: [Substream; MAX_SUBSTREAMS],
    /// `[sample][channel]`: residuals, then filtered samples, then the matrices' output;
    /// two more channels for the noise of streams of the first noise type.
    samples: Box<[[i32; MAX_CHANNELS + 2]; MAX_BLOCKSIZE]>,
    bypassed: Box<[[i32; MAX_MATRICES]; MAX_BLOCKSIZE]>,
    noise: [i8; MAX_BLOCKSIZE_POW2],
    /// A substream of the unit ended the stream.
    end_of_stream: bool,
}

/// The noise generator's table for streams of the second noise type.
#[rustfmt::skip]
const NOISE_TABLE: [i8; 256] = [
    30, 51, 22, 54, 3, 7, -4, 38, 14, 55, 46, 81, 22, 58, -3, 2,
    52, 31, -7, 51, 15, 44, 74, 30, 85, -17, 10, 33, 18, 80, 28, 62,
    10, 32, 23, 69, 72, 26, 35, 17, 73, 60, 8, 56, 2, 6, -2, -5,
    51, 4, 11, 50, 66, 76, 21, 44, 33, 47, 1, 26, 64, 48, 57, 40,
    38, 16, -10, -28, 92, 22, -18, 29, -10, 5, -13, 49, 19, 24, 70, 34,
    61, 48, 30, 14, -6, 25, 58, 33, 42, 60, 67, 17, 54, 17, 22, 30,
    67, 44, -9, 50, -11, 43, 40, 32, 59, 82, 13, 49, -14, 55, 60, 36,
    48, 49, 31, 47, 15, 12, 4, 65, 1, 23, 29, 39, 45, -2, 84, 69,
    0, 72, 37, 57, 27, 41, -15, -16, 35, 31, 14, 61, 24, 0, 27, 24,
    16, 41, 55, 34, 53, 9, 56, 12, 25, 29, 53, 5, 20, -20, -8, 20,
    13, 28, -3, 78, 38, 16, 11, 62, 46, 29, 21, 24, 46, 65, 43, -23,
    89, 18, 74, 21, 38, -12, 19, 12, -19, 8, 15, 33, 4, 57, 9, -8,
    36, 35, 26, 28, 7, 83, 63, 79, 75, 11, 3, 87, 37, 47, 34, 40,
    39, 19, 20, 42, 27, 34, 39, 77, 13, 42, 59, 64, 45, -1, 32, 37,
    45, -5, 53, -6, 7, 36, 50, 23, 6, 32, 9, -21, 18, 71, 27, 52,
    -25, 31, 35, 42, -1, 68, 63, 52, 26, 43, 66, 37, 41, 25, 40, 70,
];

impl State {
    fn new() -> Self {
        Self {
            sync: None,
            subs: [Substream::default(); MAX_SUBSTREAMS],
            samples: Box::new([[0; MAX_CHANNELS + 2]; MAX_BLOCKSIZE]),
            bypassed: Box::new([[0; MAX_MATRICES]; MAX_BLOCKSIZE]),
            noise: [0; MAX_BLOCKSIZE_POW2],
            end_of_stream: false,
        }
    }

    /// Decodes one access unit; returns its samples' count (at the unit's start of
    /// `samples`, channels by matrix channel), or None where it has none to give (no major
    /// sync seen yet).
    fn unit(&mut self, unit: &[u8]) -> Parse<Option<usize>> {
        let len = usize::from(u16::from_be_bytes([unit[0], unit[1]]) & 0xFFF) * 2;
        if len < 4 || len > unit.len() {
            return Err("truehd: an access unit longer than its packet");
        }
        let unit = &unit[..len];
        let mut header = 4;
        let major = MajorSync::parse(&unit[4..]);
        if let Some(m) = major {
            // Each major sync is followed by every substream's restart header.
            for s in &mut self.subs {
                s.restart_seen = false;
            }
            self.sync = Some(m);
            header += m.size;
        }
        let Some(sync) = self.sync else {
            return Ok(None);
        };
        let mut r = Bits::new(&unit[header..]);
        let mut lens = [0usize; MAX_SUBSTREAMS];
        let mut start = 0;
        let mut sub_header = 0;
        for (s, l) in lens.iter_mut().enumerate().take(sync.substreams) {
            let extra = r.bit()?;
            let nonrestart = r.bit()?;
            let _check = r.bit()?;
            r.skip(1)?;
            let mut end = r.get(12)? as usize * 2;
            sub_header += 2;
            if extra {
                if !sync.truehd {
                    return Err("truehd: an extra word in an MLP substream");
                }
                r.skip(16)?;
                sub_header += 2;
            }
            if nonrestart == major.is_some() {
                return Err("truehd: a substream's restart flag contradicts the unit's");
            }
            end = end.min(len.saturating_sub(header + sub_header));
            if end < start {
                return Err("truehd: substreams out of order");
            }
            if s <= sync.top {
                *l = end - start;
            }
            start = end;
        }
        let parity = unit[..4]
            .iter()
            .chain(&unit[header..header + sub_header])
            .fold(0u8, |p, b| p ^ b);
        if ((parity >> 4) ^ parity) & 0xF != 0xF {
            return Err("truehd: an access unit's parity check failed");
        }
        let mut at = header + sub_header;
        let top = self.subs[sync.top];
        let channels = sync.channels().count();
        // The top substream carrying every channel itself needs none below it.
        let whole = top.min_channel == 0 && top.max_channel + 1 == channels;
        for (s, &len) in lens.iter().enumerate().take(sync.top + 1) {
            let data = unit.get(at..at + len).ok_or(OVERRUN)?;
            at += len;
            if s != sync.top && whole {
                continue;
            }
            self.substream(&sync, s, data)?;
        }
        let s = self.subs[sync.top];
        if !s.restart_seen || s.blockpos == 0 {
            return Err("truehd: no samples in the access unit");
        }
        if s.max_matrix_channel + 1 != channels {
            return Err("truehd: a substream's channels are not its layout's");
        }
        self.rematrix(&sync, sync.top);
        Ok(Some(s.blockpos))
    }

    fn substream(&mut self, sync: &MajorSync, n: usize, data: &[u8]) -> Parse<()> {
        let mut r = Bits::new(data);
        let mut matrix_changed = 0;
        let mut filter_changed = [[0u8; 2]; MAX_CHANNELS];
        self.subs[n].blockpos = 0;
        loop {
            if r.bit()? {
                if r.bit()? {
                    self.restart_header(sync, n, &mut r)?;
                    self.subs[n].restart_seen = true;
                }
                if !self.subs[n].restart_seen {
                    return Ok(());
                }
                self.decoding_params(sync, n, &mut r, &mut matrix_changed, &mut filter_changed)?;
            }
            if !self.subs[n].restart_seen {
                return Ok(());
            }
            self.block(sync, n, &mut r)?;
            if r.pos >= data.len() * 8 {
                return Err("truehd: a substream's blocks run past it");
            }
            if r.bit()? {
                break;
            }
        }
        // Past the padding to 16 bits: an end-of-stream marker may shorten the unit.
        r.skip((16 - r.pos % 16) % 16)?;
        if data.len() * 8 - r.pos >= 32 {
            if r.get(16)? != 0xD234 {
                return Err("truehd: a bad end-of-stream marker");
            }
            let shorten = r.get(16)? as usize;
            let s = &mut self.subs[n];
            if sync.truehd && shorten & 0x2000 != 0 {
                s.blockpos -= (shorten & 0x1FFF).min(s.blockpos);
            } else if !sync.truehd && shorten != 0xD234 {
                return Err("truehd: a bad end-of-stream marker");
            }
            // What follows needs a major sync again.
            self.end_of_stream = true;
        }
        Ok(())
    }

    fn restart_header(&mut self, sync: &MajorSync, n: usize, r: &mut Bits) -> Parse<()> {
        if r.get(13)? != 0x31EA >> 1 {
            return Err("truehd: a restart header without its sync");
        }
        let noise_type = r.bit()?;
        if !sync.truehd && noise_type {
            return Err("truehd: MLP with TrueHD's noise");
        }
        r.skip(16)?;
        let min_channel = r.get(4)? as usize;
        let max_channel = r.get(4)? as usize;
        let max_matrix_channel = r.get(4)? as usize;
        let most = if sync.truehd { 7 } else { 5 };
        if max_matrix_channel > most || max_channel != max_matrix_channel {
            return Err("truehd: a channel count out of range");
        }
        if max_matrix_channel > 5 && !noise_type {
            return Err("truehd: more than six channels with the first noise type");
        }
        if min_channel > max_channel {
            return Err("truehd: channels in the wrong order");
        }
        let s = &mut self.subs[n];
        s.min_channel = min_channel;
        s.max_channel = max_channel;
        s.max_matrix_channel = max_matrix_channel;
        s.noise_type = noise_type;
        s.noise_shift = r.get(4)?;
        s.noisegen_seed = r.get(23)?;
        r.skip(19)?;
        s.data_check = r.bit()?;
        r.skip(8 + 16)?; // lossless check, and reserved
        let mask = sync.masks[n];
        s.ch_assign = [0; MAX_CHANNELS];
        for ch in 0..=max_matrix_channel {
            let mut assign = r.get(6)? as usize;
            if sync.truehd {
                // An index into the layout in TrueHD's order, made one in FFmpeg's.
                let channel = THD_ORDER.iter().filter(|&&c| mask.contains(c)).nth(assign);
                assign = match channel {
                    Some(c) => (mask.bits() & (c.bits() - 1)).count_ones() as usize,
                    None => usize::MAX,
                };
            }
            if assign > max_matrix_channel {
                return Err("truehd: a channel assigned past the layout");
            }
            s.ch_assign[assign] = ch;
        }
        r.skip(8)?; // checksum
        s.presence = 0xFF;
        s.matrices = 0;
        s.blocksize = 8;
        s.output_shift = [0; MAX_CHANNELS];
        s.quant_step = [0; MAX_CHANNELS];
        for c in &mut s.channels[min_channel..=max_channel] {
            c.fir.order = 0;
            c.iir.order = 0;
            c.fir.shift = 0;
            c.iir.shift = 0;
            c.huff_offset = 0;
            c.sign_huff_offset = -(1 << 23);
            c.codebook = 0;
            c.huff_lsbs = 24;
        }
        if sync.reorder && n == sync.top {
            use Channels as C;
            let five_back = C::FRONT_LEFT | C::FRONT_RIGHT | C::FRONT_CENTRE;
            let five_back = five_back | C::REAR_LEFT | C::REAR_RIGHT;
            let quad_lfe = C::FRONT_LEFT | C::FRONT_RIGHT | C::REAR_LEFT | C::REAR_RIGHT | C::LFE1;
            if mask == quad_lfe || mask == five_back {
                let i = s.ch_assign[4];
                s.ch_assign[4] = s.ch_assign[3];
                s.ch_assign[3] = s.ch_assign[2];
                s.ch_assign[2] = i;
            } else if mask == five_back | C::LFE1 {
                s.ch_assign.swap(2, 4);
                s.ch_assign.swap(3, 5);
            }
        }
        Ok(())
    }

    fn decoding_params(
        &mut self,
        sync: &MajorSync,
        n: usize,
        r: &mut Bits,
        matrix_changed: &mut u8,
        filter_changed: &mut [[u8; 2]; MAX_CHANNELS],
    ) -> Parse<()> {
        let s = &mut self.subs[n];
        if s.presence & PARAM_PRESENCE != 0 && r.bit()? {
            s.presence = r.get(8)? as u8;
        }
        if s.presence & PARAM_BLOCKSIZE != 0 && r.bit()? {
            s.blocksize = r.get(9)? as usize;
            if s.blocksize < 8 || s.blocksize > sync.unit {
                s.blocksize = 0;
                return Err("truehd: a block size out of range");
            }
        }
        if s.presence & PARAM_MATRIX != 0 && r.bit()? {
            *matrix_changed += 1;
            if *matrix_changed > 2 {
                return Err("truehd: matrices changed three times in an access unit");
            }
            if let Err(e) = matrix_params(s, sync, r) {
                s.matrices = 0;
                s.matrix_out = [0; MAX_MATRICES];
                return Err(e);
            }
        }
        if s.presence & PARAM_OUTSHIFT != 0 && r.bit()? {
            for ch in 0..=s.max_matrix_channel {
                // FFmpeg takes a negative shift for none.
                s.output_shift[ch] = r.signed(4)?.max(0) as u32;
            }
        }
        let mut recompute = 0u32;
        if s.presence & PARAM_QUANTSTEP != 0 && r.bit()? {
            for ch in 0..=s.max_channel {
                s.quant_step[ch] = r.get(4)?;
                recompute |= 1 << ch;
            }
        }
        let mut result = Ok(());
        for (ch, changed) in filter_changed
            .iter_mut()
            .enumerate()
            .take(s.max_channel + 1)
            .skip(s.min_channel)
        {
            if r.bit()? {
                recompute |= 1 << ch;
                result = channel_params(s, ch, r, changed);
                if result.is_err() {
                    break;
                }
            }
        }
        for ch in 0..=s.max_channel {
            if recompute >> ch & 1 == 1 {
                let c = &mut s.channels[ch];
                if c.codebook > 0 && c.huff_lsbs < s.quant_step[ch] {
                    if result.is_ok() {
                        result = Err("truehd: fewer residual bits than the quantizer step");
                    }
                    s.quant_step[ch] = 0;
                }
                let lsb_bits = c.huff_lsbs as i32 - s.quant_step[ch] as i32;
                let sign_shift = lsb_bits
                    + if c.codebook > 0 {
                        2 - c.codebook as i32
                    } else {
                        -1
                    };
                let mut offset = c.huff_offset;
                if c.codebook > 0 {
                    offset -= 7 << lsb_bits;
                }
                if sign_shift >= 0 {
                    offset -= 1 << sign_shift;
                }
                c.sign_huff_offset = offset;
            }
        }
        result
    }

    /// One block of residuals for every channel, filtered into samples.
    fn block(&mut self, sync: &MajorSync, n: usize, r: &mut Bits) -> Parse<()> {
        let s = &mut self.subs[n];
        let mut expected = None;
        if s.data_check {
            expected = Some(r.pos + r.get(16)? as usize);
        }
        if s.blockpos + s.blocksize > sync.unit {
            return Err("truehd: more samples than the access unit holds");
        }
        for i in s.blockpos..s.blockpos + s.blocksize {
            self.bypassed[i] = [0; MAX_MATRICES];
            for mat in 0..s.matrices {
                if s.lsb_bypass[mat] {
                    self.bypassed[i][mat] = r.get(1)? as i32;
                }
            }
            for ch in s.min_channel..=s.max_channel {
                let c = &s.channels[ch];
                let lsb_bits = c.huff_lsbs.saturating_sub(s.quant_step[ch]);
                let mut v = if c.codebook > 0 {
                    r.residual(c.codebook - 1)?
                } else {
                    0
                };
                if lsb_bits > 0 {
                    v = v
                        .wrapping_shl(lsb_bits)
                        .wrapping_add(r.get(lsb_bits)? as i32);
                }
                v = v.wrapping_add(c.sign_huff_offset);
                self.samples[i][ch] = v.wrapping_shl(s.quant_step[ch]);
            }
        }
        for ch in s.min_channel..=s.max_channel {
            let mask = (-1i32).wrapping_shl(s.quant_step[ch]);
            let c = &mut s.channels[ch];
            // The filters' histories: the newest first.
            let mut fir = c.fir.state;
            let mut iir = [0i32; MAX_IIR_ORDER];
            iir.copy_from_slice(&c.iir.state[..MAX_IIR_ORDER]);
            let shift = c.fir.shift;
            for i in s.blockpos..s.blockpos + s.blocksize {
                let residual = self.samples[i][ch];
                let taps = |state: &[i32], coeff: &[i32], order: usize| -> i64 {
                    let pairs = state.iter().zip(coeff).take(order);
                    pairs.map(|(&x, &k)| i64::from(x) * i64::from(k)).sum()
                };
                let acc =
                    taps(&fir, &c.fir.coeff, c.fir.order) + taps(&iir, &c.iir.coeff, c.iir.order);
                let acc = (acc >> shift) as i32;
                let result = acc.wrapping_add(residual) & mask;
                fir.copy_within(..MAX_FIR_ORDER - 1, 1);
                fir[0] = result;
                iir.copy_within(..MAX_IIR_ORDER - 1, 1);
                iir[0] = result.wrapping_sub(acc);
                self.samples[i][ch] = result;
            }
            c.fir.state = fir;
            c.iir.state[..MAX_IIR_ORDER].copy_from_slice(&iir);
        }
        s.blockpos += s.blocksize;
        if let Some(end) = expected {
            if r.pos != end {
                return Err("truehd: a block's size check failed");
            }
            r.skip(8)?;
        }
        Ok(())
    }

    /// The matrices, applied in turn to make the original channels from the coded ones.
    fn rematrix(&mut self, sync: &MajorSync, n: usize) {
        let s = &mut self.subs[n];
        let count = s.blockpos;
        let mut maxchan = s.max_matrix_channel;
        if !s.noise_type {
            let mut seed = s.noisegen_seed;
            for row in &mut self.samples[..count] {
                let shr7 = (seed >> 7) as u16;
                row[maxchan + 1] = i32::from((seed >> 15) as i8) << s.noise_shift;
                row[maxchan + 2] = i32::from(shr7 as i8) << s.noise_shift;
                seed = (seed << 16) ^ u32::from(shr7) ^ (u32::from(shr7) << 5);
            }
            s.noisegen_seed = seed;
            maxchan += 2;
        } else {
            let mut seed = s.noisegen_seed;
            for x in &mut self.noise[..sync.unit_pow2] {
                let shr15 = (seed >> 15) as u8;
                *x = NOISE_TABLE[usize::from(shr15)];
                seed = (seed << 8) ^ u32::from(shr15) ^ (u32::from(shr15) << 5);
            }
            s.noisegen_seed = seed;
        }
        for mat in 0..s.matrices {
            let dest = s.matrix_out[mat];
            let coeffs = s.matrix_coeff[mat];
            let mask = (-1i32).wrapping_shl(s.quant_step[dest]);
            let shift = s.matrix_noise_shift[mat];
            let mut index = s.matrices - mat;
            let step = 2 * index + 1;
            for i in 0..count {
                let row = &self.samples[i];
                let mut acc: i64 = (0..=maxchan)
                    .map(|c| i64::from(row[c]) * i64::from(coeffs[c]))
                    .sum();
                if shift != 0 {
                    index &= sync.unit_pow2 - 1;
                    acc += i64::from(self.noise[index]) << (shift + 7);
                    index += step;
                }
                let v = ((acc >> 14) as i32 & mask).wrapping_add(self.bypassed[i][mat]);
                self.samples[i][dest] = v;
            }
        }
    }
}

fn matrix_params(s: &mut Substream, sync: &MajorSync, r: &mut Bits) -> Parse<()> {
    s.matrices = r.get(4)? as usize;
    let most = if sync.truehd { 8 } else { 6 };
    if s.matrices > most {
        return Err("truehd: too many matrices");
    }
    for mat in 0..s.matrices {
        s.matrix_out[mat] = r.get(4)? as usize;
        let frac_bits = r.get(4)?;
        s.lsb_bypass[mat] = r.bit()?;
        if s.matrix_out[mat] > s.max_matrix_channel {
            return Err("truehd: a matrix writes past the channels");
        }
        if frac_bits > 14 {
            return Err("truehd: too many fractional bits in a matrix");
        }
        let max_chan = s.max_matrix_channel + if s.noise_type { 0 } else { 2 };
        for ch in 0..=max_chan {
            let v = if r.bit()? {
                r.signed(frac_bits + 2)?
            } else {
                0
            };
            s.matrix_coeff[mat][ch] = v << (14 - frac_bits);
        }
        s.matrix_noise_shift[mat] = if s.noise_type { r.get(4)? } else { 0 };
    }
    Ok(())
}

fn channel_params(s: &mut Substream, ch: usize, r: &mut Bits, changed: &mut [u8; 2]) -> Parse<()> {
    let presence = s.presence;
    let c = &mut s.channels[ch];
    for (which, flag) in [(0, PARAM_FIR), (1, PARAM_IIR)] {
        if presence & flag != 0 && r.bit()? {
            changed[which] += 1;
            if changed[which] > 2 {
                return Err("truehd: a filter changed more than twice in an access unit");
            }
            let f = if which == 0 { &mut c.fir } else { &mut c.iir };
            let most = if which == 0 {
                MAX_FIR_ORDER
            } else {
                MAX_IIR_ORDER
            };
            let order = r.get(4)? as usize;
            if order > most {
                return Err("truehd: a filter's order out of range");
            }
            f.order = order;
            if order > 0 {
                f.shift = r.get(4)?;
                let bits = r.get(5)?;
                let shift = r.get(3)?;
                if !(1..=16).contains(&bits) || bits + shift > 16 {
                    return Err("truehd: a filter's coefficients out of range");
                }
                for k in 0..order {
                    f.coeff[k] = r.signed(bits)? << shift;
                }
                if r.bit()? {
                    if which == 0 {
                        return Err("truehd: FIR filter state given");
                    }
                    let state_bits = r.get(4)?;
                    let state_shift = r.get(4)?;
                    for k in 0..order {
                        f.state[k] = if state_bits > 0 {
                            r.signed(state_bits)?.wrapping_shl(state_shift)
                        } else {
                            0
                        };
                    }
                }
            }
        }
    }
    if c.fir.order + c.iir.order > 8 {
        return Err("truehd: filters of more than 8 taps together");
    }
    if c.fir.order > 0 && c.iir.order > 0 && c.fir.shift != c.iir.shift {
        return Err("truehd: FIR and IIR filters of different precisions");
    }
    if c.fir.order == 0 && c.iir.order > 0 {
        c.fir.shift = c.iir.shift;
    }
    if presence & PARAM_HUFFOFFSET != 0 && r.bit()? {
        c.huff_offset = r.signed(15)?;
    }
    c.codebook = r.get(2)? as usize;
    c.huff_lsbs = r.get(5)?;
    if c.codebook > 0 && c.huff_lsbs > 24 {
        c.huff_lsbs = 0;
        return Err("truehd: too many residual bits");
    }
    Ok(())
}

/// A symphonia [`Decoder`] for TrueHD and MLP.
pub(crate) struct MlpDecoder {
    params: CodecParameters,
    state: Box<State>,
    buf: AudioBuffer<f32>,
}

impl MlpDecoder {
    fn decode_units(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        while data.len() >= 4 {
            let len = usize::from(u16::from_be_bytes([data[0], data[1]]) & 0xFFF) * 2;
            if len < 4 || len > data.len() {
                break;
            }
            let unit = &data[..len];
            data = &data[len..];
            let result = self.state.unit(unit);
            let Some(sync) = self.state.sync else {
                continue;
            };
            let count = match result {
                Ok(Some(count)) => count,
                Ok(None) => continue,
                // A damaged unit: silence of its length, so that what follows keeps its
                // time; decoding starts again at the next major sync.
                Err(_) => {
                    self.state.sync = None;
                    sync.unit
                }
            };
            let ok = result.is_ok();
            self.output(&sync, count, ok)?;
            if std::mem::take(&mut self.state.end_of_stream) {
                self.state.sync = None;
            }
        }
        Ok(())
    }

    fn output(&mut self, sync: &MajorSync, count: usize, ok: bool) -> Result<()> {
        let mask = sync.channels();
        make_room(&mut self.buf, sync.rate, mask, count, 4 * MAX_BLOCKSIZE)?;
        let at = self.buf.frames();
        self.buf.render_reserved(Some(count));
        let s = &self.state.subs[sync.top];
        for out in 0..mask.count() {
            let dst = &mut self.buf.chan_mut(out)[at..at + count];
            if !ok || out > s.max_matrix_channel {
                dst.fill(0.0);
                continue;
            }
            let ch = s.ch_assign[out];
            let shift = s.output_shift[ch];
            for (i, d) in dst.iter_mut().enumerate() {
                let v = self.state.samples[i][ch].wrapping_shl(shift);
                *d = if sync.bits16 {
                    (v >> 8) as f32 / 32_768.0
                } else {
                    v.wrapping_shl(8) as f32 / 2_147_483_648.0
                };
            }
        }
        Ok(())
    }
}

impl Decoder for MlpDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let refusal = "truehd: not TrueHD or MLP";
        let buf = first_buffer(params, CODEC_TYPE_TRUEHD, refusal, 4 * MAX_BLOCKSIZE)?;
        Ok(Self {
            params: params.clone(),
            state: Box::new(State::new()),
            buf,
        })
    }

    fn reset(&mut self) {
        *self.state = State::new();
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            CODEC_TYPE_TRUEHD,
            "truehd",
            "Dolby TrueHD and Meridian Lossless Packing"
        )]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_units(&p.data));
}
