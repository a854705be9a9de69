//! WavPack (`.wv`, and Matroska's `A_WAVPACK4`): lossless audio of 8 to 32 bits or
//! 32-bit float, and its hybrid (lossy) mode, which symphonia does not decode. A block
//! holds up to two channels' samples as an adaptive Golomb-like code of the residue after
//! a cascade of adaptive predictors ("decorrelation terms"); a frame of more channels is
//! a run of blocks. The bitstream is David Bryant's, as documented with the WavPack
//! sources and as FFmpeg and libwavpack decode it; `wv.rs` reads the `.wv` file.

mod wv;

use std::sync::OnceLock;

use symphonia::core::audio::{AudioBuffer, Channels, Signal};
use symphonia::core::codecs::{
    decl_codec_type, CodecDescriptor, CodecParameters, CodecType, Decoder, DecoderOptions,
};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room, LeBits};
pub(crate) use wv::WvReader;

/// WavPack, which symphonia has no codec type for.
pub(crate) const CODEC_TYPE_WAVPACK: CodecType = decl_codec_type(b"wavpack");

/// A `.wv` block's header: `wvpk`, its size past the first 8 bytes, the version, the
/// stream's length, the block's place, samples, flags and CRC.
pub(crate) const HEADER: usize = 32;
/// Most samples a block holds (WavPack writes at most 131 072 a block; FFmpeg takes
/// 150 000).
const MAX_SAMPLES: u32 = 1 << 18;
/// Most decorrelation terms a block has.
const MAX_TERMS: usize = 16;

// The block header's flags.
const BYTES: u32 = 0x3; // bytes a sample, less one
const MONO: u32 = 0x4;
const HYBRID: u32 = 0x8;
const JOINT: u32 = 0x10;
const FLOAT: u32 = 0x80;
const HYBRID_BITRATE: u32 = 0x200;
const HYBRID_BALANCE: u32 = 0x400;
const INITIAL: u32 = 0x800;
const FINAL: u32 = 0x1000;
const FALSE_STEREO: u32 = 0x4000_0000;
const DSD: u32 = 0x8000_0000;

/// The rates a header's 4-bit index names; 15: a sub-block says it.
const RATES: [u32; 15] = [
    6_000, 8_000, 9_600, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 64_000,
    88_200, 96_000, 192_000,
];

// Sub-block ids (the low 6 bits).
const ID_TERMS: u8 = 0x02;
const ID_WEIGHTS: u8 = 0x03;
const ID_SAMPLES: u8 = 0x04;
const ID_ENTROPY: u8 = 0x05;
const ID_HYBRID: u8 = 0x06;
const ID_FLOAT: u8 = 0x08;
const ID_INT32: u8 = 0x09;
const ID_BITSTREAM: u8 = 0x0A;
const ID_EXTRA_BITS: u8 = 0x0C;
const ID_CHANNELS: u8 = 0x0D;
const ID_RATE: u8 = 0x27;

// FLOATINFO's flags: how the bits a float's mantissa lost to the integer are filled.
const FLT_SHIFT_ONES: u8 = 0x01;
const FLT_SHIFT_SAME: u8 = 0x02;
const FLT_SHIFT_SENT: u8 = 0x04;
const FLT_ZERO_SENT: u8 = 0x08;
const FLT_ZERO_SIGN: u8 = 0x10;

/// WavPack's 8-bit tables of 2^x and log2(x) over a byte's fraction: (2^(i/256) - 1) × 256
/// and log2(1 + i/256) × 256, rounded (what its sources list, entry for entry).
fn tables() -> &'static ([u8; 256], [u8; 256]) {
    static T: OnceLock<([u8; 256], [u8; 256])> = OnceLock::new();
    T.get_or_init(|| {
        let mut exp = [0u8; 256];
        let mut log = [0u8; 256];
        for i in 0..256 {
            let x = i as f64 / 256.0;
            exp[i] = ((x.exp2() - 1.0) * 256.0).round() as u8;
            log[i] = ((1.0 + x).log2() * 256.0).round() as u8;
        }
        (exp, log)
    })
}

/// 2^(v/256), as WavPack's integer approximation: a stored value's magnitude from its log.
fn exp2(v: i16) -> i32 {
    let neg = v < 0;
    let v = i32::from(v).abs();
    let mantissa = i32::from(tables().0[(v & 0xFF) as usize]) | 0x100;
    let e = v >> 8;
    if e > 31 {
        return i32::MIN;
    }
    let r = if e > 9 {
        mantissa.wrapping_shl(e as u32 - 9)
    } else {
        mantissa >> (9 - e)
    };
    if neg {
        r.wrapping_neg()
    } else {
        r
    }
}

/// log2(v) × 256, as WavPack's integer approximation.
fn log2(v: u32) -> i32 {
    match v {
        0 => 0,
        1 => 256,
        _ => {
            let v = v.wrapping_add(v >> 9);
            let bits = 32 - v.leading_zeros() as i32;
            let frac = if bits < 9 {
                v << (9 - bits)
            } else {
                v >> (bits - 9)
            };
            (bits << 8) + i32::from(tables().1[(frac & 0xFF) as usize])
        }
    }
}

/// A value below `k + 1` in as few bits as a truncated binary code takes.
fn tail(bits: &mut LeBits, k: i32) -> i32 {
    if k < 1 {
        return 0;
    }
    let p = 31 - k.leading_zeros();
    let e = (1i32 << (p + 1)) - k - 1;
    let r = bits.get(p) as i32;
    if r >= e {
        (r << 1) - e + bits.bit() as i32
    } else {
        r
    }
}

/// One decorrelation term: its kind (1 to 8: the sample that many back; 17, 18:
/// extrapolations from the last two; -1 to -3: across the two channels), the step its
/// weights adapt by, and each channel's weight and history.
#[derive(Clone, Copy, Default)]
struct Term {
    value: i32,
    delta: i32,
    weight: [i32; 2],
    samples: [[i32; 8]; 2],
}

impl Term {
    /// The prediction of a term of 1 to 8 or 17 and 18 for channel `c`, and where the new
    /// sample goes.
    fn predict(&mut self, c: usize, pos: usize) -> (i32, usize) {
        let s = &mut self.samples[c];
        if self.value > 8 {
            let a = if self.value & 1 == 1 {
                s[0].wrapping_mul(2).wrapping_sub(s[1])
            } else {
                s[0].wrapping_mul(3).wrapping_sub(s[1]) >> 1
            };
            s[1] = s[0];
            (a, 0)
        } else {
            (s[pos], (pos + self.value as usize) & 7)
        }
    }
}

/// `weight × a`, in units of 1/1024, rounded.
fn weighted(weight: i32, a: i32) -> i32 {
    ((i64::from(weight) * i64::from(a) + 512) >> 10) as i32
}

/// A weight's step toward agreeing with the signs of `a` and `b` (unbounded).
fn adapt(weight: &mut i32, delta: i32, a: i32, b: i32) {
    if a != 0 && b != 0 {
        *weight = if (a ^ b) < 0 {
            weight.wrapping_sub(delta)
        } else {
            weight.wrapping_add(delta)
        };
    }
}

/// The same, within ±1024 (the cross-channel terms').
fn adapt_clipped(weight: &mut i32, delta: i32, a: i32, b: i32) {
    if a != 0 && b != 0 {
        *weight = if (a ^ b) < 0 {
            (*weight - delta).max(-1024)
        } else {
            (*weight + delta).min(1024)
        };
    }
}

/// A channel's entropy coder state: three running medians of the residues' magnitudes,
/// and, in hybrid mode, how much error each value may carry.
#[derive(Clone, Copy, Default)]
struct Coder {
    median: [i32; 3],
    slow_level: i32,
    error_limit: i32,
    bitrate_acc: u32,
    bitrate_delta: u32,
}

impl Coder {
    fn med(&self, n: usize) -> i32 {
        (self.median[n] >> 4) + 1
    }

    fn dec_med(&mut self, n: usize) {
        let d = 128 >> n;
        let m = self.median[n];
        self.median[n] = m.wrapping_sub((m.wrapping_add(d - 2) / d).wrapping_mul(2));
    }

    fn inc_med(&mut self, n: usize) {
        let d = 128 >> n;
        let m = self.median[n];
        self.median[n] = m.wrapping_add((m.wrapping_add(d) / d).wrapping_mul(5));
    }
}

/// What a slow level decays by a sample.
fn level_decay(v: i32) -> i32 {
    v.wrapping_add(0x80) >> 8
}

/// A block's samples, flags and CRC, and its sub-blocks' bytes.
#[derive(Clone, Copy)]
pub(crate) struct Block<'a> {
    pub samples: u32,
    pub flags: u32,
    crc: u32,
    body: &'a [u8],
}

/// The blocks of a packet: whole `.wv` blocks one after another, or Matroska's form of
/// them (the samples once, then each block's flags, CRC and, where the frame has more
/// than one block, size, before its sub-blocks).
pub(crate) fn blocks(p: &[u8]) -> std::result::Result<Vec<Block<'_>>, &'static str> {
    let le = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let mut out = Vec::new();
    if p.starts_with(b"wvpk") {
        let mut rest = p;
        while rest.len() >= HEADER {
            if !rest.starts_with(b"wvpk") {
                return Err("a WavPack block without its `wvpk` mark");
            }
            let size = le(rest, 4).ok_or("short")? as usize + 8;
            if size < HEADER || size > rest.len() {
                return Err("a WavPack block's size runs past its packet");
            }
            out.push(Block {
                samples: le(rest, 20).ok_or("short")?,
                flags: le(rest, 24).ok_or("short")?,
                crc: le(rest, 28).ok_or("short")?,
                body: &rest[HEADER..size],
            });
            rest = &rest[size..];
        }
    } else {
        let samples = le(p, 0).ok_or("a WavPack packet is cut short")?;
        let mut at = 4;
        while p.len() >= at + 8 {
            let (flags, crc) = (le(p, at).unwrap_or(0), le(p, at + 4).unwrap_or(0));
            at += 8;
            let size = if flags & (INITIAL | FINAL) == INITIAL | FINAL {
                p.len() - at
            } else {
                let n = le(p, at).ok_or("a WavPack block's size is cut short")? as usize;
                at += 4;
                n
            };
            let body = p
                .get(at..at.saturating_add(size))
                .ok_or("a WavPack block's size runs past its packet")?;
            at += size;
            out.push(Block {
                samples,
                flags,
                crc,
                body,
            });
        }
    }
    if out.is_empty() {
        return Err("a WavPack packet without a block");
    }
    Ok(out)
}

/// The sub-blocks of a block: (id, data).
fn sub_blocks(mut b: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&id, rest) = b.split_first()?;
        let (words, head) = if id & 0x80 != 0 {
            let s = rest.get(..3)?;
            (
                usize::from(s[0]) | usize::from(s[1]) << 8 | usize::from(s[2]) << 16,
                4,
            )
        } else {
            (usize::from(*rest.first()?), 2)
        };
        let size = words * 2;
        let whole = b.get(head..head + size)?;
        let data = if id & 0x40 != 0 {
            &whole[..size.saturating_sub(1)]
        } else {
            whole
        };
        b = &b[head + size..];
        Some((id & 0x3F, data))
    })
}

/// What a frame's first block says of the stream: its rate and channels.
pub(crate) fn frame_format(blocks: &[Block]) -> Result<(u32, Channels, u32)> {
    let first = blocks[0];
    if first.flags & DSD != 0 {
        return unsupported_error("wavpack: DSD audio (sotto decodes WavPack's PCM and float)");
    }
    let mut rate = RATES.get(((first.flags >> 23) & 0xF) as usize).copied();
    let mut declared = None;
    for (id, data) in sub_blocks(first.body) {
        match id {
            ID_RATE if data.len() >= 3 => {
                rate = Some(u32::from_le_bytes([data[0], data[1], data[2], 0]));
            }
            ID_CHANNELS if data.len() >= 2 => {
                let count = u32::from(data[0]);
                let mask = match data.len() {
                    2 => u32::from(data[1]),
                    3 => u32::from(u16::from_le_bytes([data[1], data[2]])),
                    4 => u32::from_le_bytes([data[1], data[2], data[3], 0]),
                    5 => u32::from_le_bytes([data[1], data[2], data[3], data[4]]),
                    // WavPack 5's long form: the count's high bits, then a 16-bit mask.
                    7 => u32::from(u16::from_le_bytes([data[5], data[6]])),
                    _ => 0,
                };
                let count = match data.len() {
                    7 => count | u32::from(data[4] & 0xF) << 8,
                    _ => count,
                };
                declared = Some((count, mask));
            }
            _ => {}
        }
    }
    let rate = match rate {
        Some(r @ 1..) => r,
        _ => return decode_error("wavpack: a block without its sample rate"),
    };
    let coded: u32 = blocks
        .iter()
        .map(|b| if b.flags & MONO != 0 { 1 } else { 2 })
        .sum();
    let single = blocks.len() == 1 && first.flags & (INITIAL | FINAL) == INITIAL | FINAL;
    let (count, mask) = match declared {
        Some((count, mask)) if !single && count > 0 => (count, mask),
        _ => (coded, 0),
    };
    if count != coded || count > 32 {
        return decode_error("wavpack: a frame's blocks code another number of channels");
    }
    let channels = match Channels::from_bits(mask) {
        Some(c) if mask != 0 && c.count() == count as usize => c,
        _ => crate::decode::first_channels(u64::from(count)).ok_or(
            symphonia::core::errors::Error::DecodeError("wavpack: no channels"),
        )?,
    };
    let bits = if first.flags & FLOAT != 0 {
        32
    } else {
        ((first.flags & BYTES) + 1) * 8
    };
    Ok((rate, channels, bits))
}

/// How a block's integers become samples: bits sent apart from the bitstream (`extra`),
/// or low bits known to be zeros, ones or copies of the next (`and`, `or`, `shift`),
/// then the header's shift; and a float's exponent and the bits it lost.
#[derive(Default)]
struct Output {
    extra_bits: u32,
    and: i32,
    or: i32,
    shift: u32,
    post_shift: u32,
    hybrid: bool,
    clip: (i32, i32),
    float: Option<(u8, u32, i32)>,
}

/// A block's state for decoding: its terms, coders and output.
struct BlockState {
    terms: Vec<Term>,
    coders: [Coder; 2],
    stereo_in: bool,
    hybrid: bool,
    hybrid_bitrate: bool,
    hybrid_balance: bool,
    zero: bool,
    one: bool,
    zeroes: i32,
}

impl BlockState {
    fn update_error_limit(&mut self) {
        let n = 1 + usize::from(self.stereo_in);
        let mut br = [0i32; 2];
        let mut sl = [0i32; 2];
        for i in 0..n {
            let c = &mut self.coders[i];
            c.bitrate_acc = c.bitrate_acc.wrapping_add(c.bitrate_delta);
            br[i] = (c.bitrate_acc >> 16) as i32;
            sl[i] = level_decay(c.slow_level);
        }
        if self.stereo_in && self.hybrid_bitrate && self.hybrid_balance {
            let balance = (sl[1] - sl[0] + br[1] + 1) >> 1;
            if balance > br[0] {
                br[1] = br[0] * 2;
                br[0] = 0;
            } else if -balance > br[0] {
                br[0] *= 2;
                br[1] = 0;
            } else {
                br[1] = br[0] + balance;
                br[0] -= balance;
            }
        }
        for i in 0..n {
            self.coders[i].error_limit = if self.hybrid_bitrate {
                if sl[i] - br[i] > -0x100 {
                    exp2((sl[i] - br[i] + 0x100) as i16)
                } else {
                    0
                }
            } else {
                exp2(br[i] as i16)
            };
        }
    }

    /// Channel `ch`'s next residue; None where the bits run out.
    fn value(&mut self, bits: &mut LeBits, ch: usize) -> Option<i32> {
        if self.coders[0].median[0] < 2 && self.coders[1].median[0] < 2 && !self.zero && !self.one {
            // A run of zeros, its length coded once.
            if self.zeroes > 0 {
                self.zeroes -= 1;
                if self.zeroes > 0 {
                    let c = &mut self.coders[ch];
                    c.slow_level = c.slow_level.wrapping_sub(level_decay(c.slow_level));
                    return Some(0);
                }
            } else {
                let mut t = bits.unary(33);
                if t >= 2 {
                    if bits.left() < i64::from(t - 1) {
                        return None;
                    }
                    t = bits.get(t - 1) | 1u32.wrapping_shl(t - 1);
                } else if bits.left() < 0 {
                    return None;
                }
                self.zeroes = t as i32;
                if self.zeroes != 0 {
                    self.coders[0].median = [0; 3];
                    self.coders[1].median = [0; 3];
                    let c = &mut self.coders[ch];
                    c.slow_level = c.slow_level.wrapping_sub(level_decay(c.slow_level));
                    return Some(0);
                }
            }
        }
        let t = if self.zero {
            self.zero = false;
            0
        } else {
            let mut t = bits.unary(33);
            if bits.left() < 0 {
                return None;
            }
            if t == 16 {
                let t2 = bits.unary(33);
                if t2 < 2 {
                    if bits.left() < 0 {
                        return None;
                    }
                    t += t2;
                } else {
                    if bits.left() < i64::from(t2 - 1) {
                        return None;
                    }
                    t = t.wrapping_add(bits.get(t2 - 1) | 1u32.wrapping_shl(t2 - 1));
                }
            }
            // The count's low bit says whether the next value is at least one unit (else
            // it is known to be zero, and takes no bits).
            let t = t as i32;
            let odd = t & 1 == 1;
            let t = if self.one { (t >> 1) + 1 } else { t >> 1 };
            (self.one, self.zero) = (odd, !odd);
            t
        };
        if self.hybrid && ch == 0 {
            self.update_error_limit();
        }
        let c = &mut self.coders[ch];
        let (mut base, mut add) = match t {
            0 => {
                let r = (0, c.med(0) - 1);
                c.dec_med(0);
                r
            }
            1 => {
                let r = (c.med(0), c.med(1) - 1);
                c.inc_med(0);
                c.dec_med(1);
                r
            }
            2 => {
                let r = (c.med(0) + c.med(1), c.med(2) - 1);
                c.inc_med(0);
                c.inc_med(1);
                c.dec_med(2);
                r
            }
            _ => {
                let base = c
                    .med(0)
                    .wrapping_add(c.med(1))
                    .wrapping_add(c.med(2).wrapping_mul(t - 2));
                let r = (base, c.med(2) - 1);
                c.inc_med(0);
                c.inc_med(1);
                c.inc_med(2);
                r
            }
        };
        let v = if c.error_limit == 0 {
            if add as u32 >= 0x200_0000 {
                return None;
            }
            let v = base.wrapping_add(tail(bits, add));
            if bits.left() <= 0 {
                return None;
            }
            v
        } else {
            // Hybrid: the value is only placed within the error the bitrate allows.
            let mut mid = (base.wrapping_mul(2).wrapping_add(add).wrapping_add(1)) >> 1;
            while add > c.error_limit {
                if bits.left() <= 0 {
                    return None;
                }
                if bits.bit() == 1 {
                    add = add.wrapping_sub(mid.wrapping_sub(base));
                    base = mid;
                } else {
                    add = mid.wrapping_sub(base).wrapping_sub(1);
                }
                mid = (base.wrapping_mul(2).wrapping_add(add).wrapping_add(1)) >> 1;
            }
            mid
        };
        let negative = bits.bit() == 1;
        if self.hybrid_bitrate {
            let level = log2(v as u32).wrapping_sub(level_decay(c.slow_level));
            c.slow_level = c.slow_level.wrapping_add(level);
        }
        Some(if negative { !v } else { v })
    }
}

/// The decoder of WavPack frames.
pub(crate) struct WavPackDecoder {
    params: CodecParameters,
    buf: AudioBuffer<f32>,
}

impl WavPackDecoder {
    fn decode_packet(&mut self, data: &[u8]) -> Result<()> {
        self.buf.clear();
        let blocks = blocks(data).map_err(symphonia::core::errors::Error::DecodeError)?;
        let (rate, channels, _) = frame_format(&blocks)?;
        let n = blocks[0].samples;
        if n == 0 {
            return Ok(());
        }
        if n > MAX_SAMPLES || blocks.iter().any(|b| b.samples != n) {
            return decode_error("wavpack: a frame's blocks hold different numbers of samples");
        }
        let n = n as usize;
        make_room(&mut self.buf, rate, channels, n, n)?;
        self.buf.render_reserved(Some(n));
        let mut ch = 0;
        let mut left = vec![0f32; n];
        let mut right = vec![0f32; n];
        for b in &blocks {
            let stereo = b.flags & MONO == 0;
            decode_block(b, &mut left, &mut right)?;
            self.buf.chan_mut(ch).copy_from_slice(&left);
            ch += 1;
            if stereo {
                self.buf.chan_mut(ch).copy_from_slice(&right);
                ch += 1;
            }
        }
        Ok(())
    }
}

/// Decodes one block's one or two channels into `left` and `right`.
fn decode_block(b: &Block, left: &mut [f32], right: &mut [f32]) -> Result<()> {
    let flags = b.flags;
    let stereo = flags & MONO == 0;
    let stereo_in = stereo && flags & FALSE_STEREO == 0;
    let hybrid = flags & HYBRID != 0;
    let bytes = (flags & BYTES) + 1;
    let orig_bits = bytes * 8;
    let mut out = Output {
        post_shift: (flags >> 13) & 0x1F,
        hybrid,
        clip: (
            (-1i64 << (orig_bits - 1)) as i32,
            ((1i64 << (orig_bits - 1)) - 1) as i32,
        ),
        ..Output::default()
    };
    let mut st = BlockState {
        terms: Vec::new(),
        coders: [Coder::default(); 2],
        stereo_in,
        hybrid,
        hybrid_bitrate: flags & HYBRID_BITRATE != 0,
        hybrid_balance: flags & HYBRID_BALANCE != 0,
        zero: false,
        one: false,
        zeroes: 0,
    };
    let le16 = |d: &[u8], i: usize| i16::from_le_bytes([d[i], d[i + 1]]);
    let mut bitstream = None;
    let mut extra: Option<(LeBits, u32)> = None;
    let (mut got_weights, mut got_samples, mut got_entropy, mut got_hybrid) =
        (false, false, false, false);
    let bad = |what: &'static str| symphonia::core::errors::Error::DecodeError(what);
    for (id, d) in sub_blocks(b.body) {
        match id {
            ID_TERMS => {
                if d.len() > MAX_TERMS {
                    return decode_error("wavpack: too many decorrelation terms");
                }
                st.terms = d
                    .iter()
                    .rev()
                    .map(|&v| Term {
                        value: i32::from(v & 0x1F) - 5,
                        delta: i32::from(v >> 5),
                        ..Term::default()
                    })
                    .collect();
                let legal =
                    |v: i32| matches!(v, 1..=8 | 17 | 18) || (stereo_in && (-3..=-1).contains(&v));
                if st.terms.iter().any(|t| !legal(t.value)) {
                    return decode_error("wavpack: a decorrelation term of no known kind");
                }
            }
            ID_WEIGHTS => {
                let per = 1 + usize::from(stereo_in);
                let n = d.len() / per;
                if n > st.terms.len() {
                    return decode_error("wavpack: more decorrelation weights than terms");
                }
                let weight = |b: u8| {
                    let w = i32::from(b as i8) * 8;
                    if w > 0 {
                        w + ((w + 64) >> 7)
                    } else {
                        w
                    }
                };
                let len = st.terms.len();
                for i in 0..n {
                    let t = &mut st.terms[len - 1 - i];
                    t.weight[0] = weight(d[i * per]);
                    if stereo_in {
                        t.weight[1] = weight(d[i * per + 1]);
                    }
                }
                got_weights = true;
            }
            ID_SAMPLES => {
                let mut at = 0;
                for t in st.terms.iter_mut().rev() {
                    if at >= d.len() {
                        break;
                    }
                    let mut next = || -> Result<i32> {
                        let v = d
                            .get(at..at + 2)
                            .ok_or(bad("wavpack: term samples cut short"))?;
                        at += 2;
                        Ok(exp2(le16(v, 0)))
                    };
                    if t.value > 8 {
                        t.samples[0][0] = next()?;
                        t.samples[0][1] = next()?;
                        if stereo_in {
                            t.samples[1][0] = next()?;
                            t.samples[1][1] = next()?;
                        }
                    } else if t.value < 0 {
                        t.samples[0][0] = next()?;
                        t.samples[1][0] = next()?;
                    } else {
                        for j in 0..t.value as usize {
                            t.samples[0][j] = next()?;
                            if stereo_in {
                                t.samples[1][j] = next()?;
                            }
                        }
                    }
                }
                got_samples = true;
            }
            ID_ENTROPY => {
                if d.len() != 6 * (1 + usize::from(stereo_in)) {
                    return decode_error("wavpack: entropy variables of the wrong size");
                }
                for (c, coder) in st
                    .coders
                    .iter_mut()
                    .take(1 + usize::from(stereo_in))
                    .enumerate()
                {
                    for (i, m) in coder.median.iter_mut().enumerate() {
                        *m = exp2(le16(d, c * 6 + i * 2));
                    }
                }
                got_entropy = true;
            }
            ID_HYBRID => {
                let n = 1 + usize::from(stereo_in);
                let mut words = d.chunks_exact(2).map(|w| i16::from_le_bytes([w[0], w[1]]));
                let mut next = || {
                    words
                        .next()
                        .ok_or(bad("wavpack: hybrid variables cut short"))
                };
                if st.hybrid_bitrate {
                    for c in &mut st.coders[..n] {
                        c.slow_level = exp2(next()?);
                    }
                }
                for c in &mut st.coders[..n] {
                    c.bitrate_acc = u32::from(next()? as u16) << 16;
                }
                // The deltas, where the sub-block has them.
                let used = 2 * n * (1 + usize::from(st.hybrid_bitrate));
                for c in &mut st.coders[..n] {
                    c.bitrate_delta = if d.len() > used {
                        exp2(next()?) as u32
                    } else {
                        0
                    };
                }
                got_hybrid = true;
            }
            ID_INT32 => {
                if d.len() != 4 {
                    return decode_error("wavpack: INT32INFO of the wrong size");
                }
                if d[0] > 31 {
                    return decode_error("wavpack: INT32INFO sends more than 31 bits");
                } else if d[0] != 0 {
                    out.extra_bits = u32::from(d[0]);
                } else if d[1] != 0 {
                    out.shift = u32::from(d[1]);
                } else if d[2] != 0 {
                    (out.and, out.or, out.shift) = (1, 1, u32::from(d[2]));
                } else if d[3] != 0 {
                    (out.and, out.shift) = (1, u32::from(d[3]));
                }
                // libwavpack clips 32-bit hybrid audio as 24-bit.
                if hybrid && bytes == 4 && out.post_shift < 8 && out.shift > 8 {
                    out.post_shift += 8;
                    out.shift -= 8;
                    out.clip = (out.clip.0 >> 8, out.clip.1 >> 8);
                }
            }
            ID_FLOAT => {
                if d.len() != 4 {
                    return decode_error("wavpack: FLOATINFO of the wrong size");
                }
                out.float = Some((d[0], u32::from(d[1]), i32::from(d[2])));
            }
            ID_BITSTREAM => bitstream = Some(d),
            ID_EXTRA_BITS if d.len() > 4 => {
                let mut x = LeBits::new(d);
                let crc = x.get(32);
                extra = Some((x, crc));
            }
            _ => {}
        }
    }
    if !got_weights && !st.terms.is_empty()
        || !got_samples && !st.terms.is_empty()
        || !got_entropy
        || hybrid && !got_hybrid
    {
        return decode_error("wavpack: a block lacks its decorrelation or entropy variables");
    }
    let bitstream = bitstream.ok_or(bad("wavpack: a block without its bitstream"))?;
    if flags & FLOAT != 0 && out.float.is_none() {
        return decode_error("wavpack: float samples without FLOATINFO");
    }
    let n = b.samples as usize;
    if let Some((x, _)) = &extra {
        let wanted = (n as i64 * i64::from(out.extra_bits)) << u32::from(stereo_in);
        if out.float.is_none() && x.left() < wanted {
            extra = None;
        }
    }
    let mut bits = LeBits::new(bitstream);
    let mut crc: u32 = 0xFFFF_FFFF;
    let mut crc_extra: u32 = 0xFFFF_FFFF;
    let scale = 1.0 / (1u64 << (orig_bits - 1)) as f64;
    let mut emit = |s: i32, extra: &mut Option<(LeBits, u32)>| -> f32 {
        let x = extra.as_mut().map(|(x, _)| x);
        match out.float {
            Some(_) => out.float_sample(s, x, &mut crc_extra),
            None => {
                // Within the stream's bits, as WavPack's decoder and FFmpeg's store them
                // (FFmpeg's encoder writes 8-bit samples 256 off).
                let v = out.int_sample(s, x, &mut crc_extra);
                let v = v.wrapping_shl(32 - orig_bits) >> (32 - orig_bits);
                (f64::from(v) * scale) as f32
            }
        }
    };
    let mut pos = 0usize;
    let ran_out = || bad("wavpack: a block's bitstream ends before its samples");
    for i in 0..n {
        if stereo_in {
            let mut l = st.value(&mut bits, 0).ok_or_else(ran_out)?;
            let mut r = st.value(&mut bits, 1).ok_or_else(ran_out)?;
            for t in st.terms.iter_mut() {
                match t.value {
                    1.. => {
                        let (a, j) = t.predict(0, pos);
                        let (bv, _) = t.predict(1, pos);
                        let l2 = l.wrapping_add(weighted(t.weight[0], a));
                        let r2 = r.wrapping_add(weighted(t.weight[1], bv));
                        adapt(&mut t.weight[0], t.delta, a, l);
                        adapt(&mut t.weight[1], t.delta, bv, r);
                        (l, r) = (l2, r2);
                        t.samples[0][j] = l;
                        t.samples[1][j] = r;
                    }
                    -1 => {
                        let a = t.samples[0][0];
                        let l2 = l.wrapping_add(weighted(t.weight[0], a));
                        adapt_clipped(&mut t.weight[0], t.delta, a, l);
                        l = l2;
                        let r2 = r.wrapping_add(weighted(t.weight[1], l2));
                        adapt_clipped(&mut t.weight[1], t.delta, l2, r);
                        r = r2;
                        t.samples[0][0] = r;
                    }
                    _ => {
                        let bv = t.samples[1][0];
                        let r2 = r.wrapping_add(weighted(t.weight[1], bv));
                        adapt_clipped(&mut t.weight[1], t.delta, bv, r);
                        r = r2;
                        let mut a = r;
                        if t.value == -3 {
                            a = t.samples[0][0];
                            t.samples[0][0] = r;
                        }
                        let l2 = l.wrapping_add(weighted(t.weight[0], a));
                        adapt_clipped(&mut t.weight[0], t.delta, a, l);
                        l = l2;
                        t.samples[1][0] = l;
                    }
                }
            }
            if bytes <= 2 && (i64::from(l).abs() + i64::from(r).abs()) > 1 << 19 {
                return decode_error("wavpack: a sample too large for its bits");
            }
            pos = (pos + 1) & 7;
            if flags & JOINT != 0 {
                r = r.wrapping_sub(l >> 1);
                l = l.wrapping_add(r);
            }
            crc = crc.wrapping_mul(3).wrapping_add(l as u32);
            crc = crc.wrapping_mul(3).wrapping_add(r as u32);
            left[i] = emit(l, &mut extra);
            right[i] = emit(r, &mut extra);
        } else {
            let mut s = st.value(&mut bits, 0).ok_or_else(ran_out)?;
            for t in st.terms.iter_mut() {
                let (a, j) = t.predict(0, pos);
                let s2 = s.wrapping_add(weighted(t.weight[0], a));
                adapt(&mut t.weight[0], t.delta, a, s);
                s = s2;
                t.samples[0][j] = s;
            }
            pos = (pos + 1) & 7;
            crc = crc.wrapping_mul(3).wrapping_add(s as u32);
            left[i] = emit(s, &mut extra);
            if stereo {
                right[i] = left[i];
            }
        }
    }
    if crc != b.crc {
        return decode_error("wavpack: a block's samples fail its CRC");
    }
    if let Some((_, stored)) = extra {
        if crc_extra != stored {
            return decode_error("wavpack: a block's extra bits fail their CRC");
        }
    }
    Ok(())
}

impl Output {
    fn int_sample(&self, s: i32, extra: Option<&mut LeBits>, crc: &mut u32) -> i32 {
        let mut s = s;
        if self.extra_bits > 0 {
            s = s.wrapping_shl(self.extra_bits);
            if let Some(x) = extra.filter(|x| x.left() >= i64::from(self.extra_bits)) {
                s |= x.get(self.extra_bits) as i32;
                *crc = crc
                    .wrapping_mul(9)
                    .wrapping_add((s as u32 & 0xFFFF).wrapping_mul(3))
                    .wrapping_add(s as u32 >> 16);
            }
        }
        let bit = (s & self.and) | self.or;
        let mut v = s
            .wrapping_add(bit)
            .wrapping_shl(self.shift)
            .wrapping_sub(bit);
        if self.hybrid {
            v = v.clamp(self.clip.0, self.clip.1);
        }
        v.wrapping_shl(self.post_shift)
    }

    fn float_sample(&self, s: i32, mut extra: Option<&mut LeBits>, crc: &mut u32) -> f32 {
        let (flags, shift, max_exp) = self.float.expect("float info");
        let mut exp = max_exp;
        let (mut m, sign);
        if s != 0 {
            let mut v = s.wrapping_shl(shift);
            sign = u32::from(v < 0);
            v = v.wrapping_abs();
            if v >= 0x100_0000 {
                v = match extra.as_mut() {
                    Some(x) => match x.bit() {
                        1 => x.get(23) as i32,
                        _ => 0,
                    },
                    None => 0,
                };
                exp = 255;
            } else if exp != 0 {
                let mut sh = 23 - (31 - v.leading_zeros() as i32);
                exp = max_exp;
                if exp <= sh {
                    exp -= 1;
                    sh = exp;
                }
                exp -= sh;
                if sh > 0 {
                    v <<= sh;
                    let fill = if flags & FLT_SHIFT_ONES != 0 {
                        true
                    } else {
                        flags & FLT_SHIFT_SAME != 0 && extra.as_mut().is_some_and(|x| x.bit() == 1)
                    };
                    if fill {
                        v |= (1 << sh) - 1;
                    } else if flags & FLT_SHIFT_SENT != 0 {
                        if let Some(x) = extra.as_mut() {
                            v |= x.get(sh as u32) as i32;
                        }
                    }
                }
            }
            m = (v & 0x7F_FFFF) as u32;
        } else {
            m = 0;
            exp = 0;
            let mut sg = 0;
            if let Some(x) = extra.as_mut().filter(|_| flags & FLT_ZERO_SENT != 0) {
                if x.bit() == 1 {
                    m = x.get(23);
                    if max_exp >= 25 {
                        exp = x.get(8) as i32;
                    }
                    sg = x.bit();
                } else if flags & FLT_ZERO_SIGN != 0 {
                    sg = x.bit();
                }
            }
            sign = sg;
        }
        let exp = (exp & 0xFF) as u32;
        *crc = crc
            .wrapping_mul(27)
            .wrapping_add(m.wrapping_mul(9))
            .wrapping_add(exp.wrapping_mul(3))
            .wrapping_add(sign);
        f32::from_bits(sign << 31 | exp << 23 | m)
    }
}

impl Decoder for WavPackDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let buf = first_buffer(params, CODEC_TYPE_WAVPACK, "wavpack: not WavPack", 4096)?;
        Ok(Self {
            params: params.clone(),
            buf,
        })
    }

    fn reset(&mut self) {}

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(CODEC_TYPE_WAVPACK, "wavpack", "WavPack")]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_packet(&p.data));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_wavpacks() {
        // Sums of the 256 entries of each, and entries where rounding is closest, as the
        // WavPack sources list them.
        let (exp, log) = tables();
        let sum = |t: &[u8; 256]| t.iter().map(|&v| u32::from(v)).sum::<u32>();
        assert_eq!((sum(exp), sum(log)), (28_882, 36_401));
        assert_eq!(
            (exp[155], exp[156], log[133], log[134]),
            (133, 135, 155, 155)
        );
        assert_eq!(
            (exp2(0), exp2(0x900), exp2(-0x900), exp2(0x7FFF)),
            (0, 256, -256, i32::MIN)
        );
        assert_eq!((log2(0), log2(1), log2(256)), (0, 256, 0x900));
    }

    #[test]
    fn bits_come_least_significant_first() {
        let mut b = LeBits::new(&[0b1011_0110, 0xFF]);
        assert_eq!((b.bit(), b.get(3), b.get(6)), (0, 0b011, 0b11_1011));
        assert_eq!(b.unary(33), 6);
        assert!(b.left() < 0);
    }

    #[test]
    fn matroska_blocks_and_wv_blocks_read_alike() {
        let body = [0x0A, 0x01, 0xAB, 0xCD];
        let mut wv = b"wvpk".to_vec();
        wv.extend((HEADER as u32 - 8 + 4).to_le_bytes());
        wv.extend([0x10, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        wv.extend(300u32.to_le_bytes());
        wv.extend((INITIAL | FINAL).to_le_bytes());
        wv.extend(7u32.to_le_bytes());
        wv.extend(body);
        let mut mkv = 300u32.to_le_bytes().to_vec();
        mkv.extend((INITIAL | FINAL).to_le_bytes());
        mkv.extend(7u32.to_le_bytes());
        mkv.extend(body);
        for p in [&wv, &mkv] {
            let b = blocks(p).unwrap();
            assert_eq!(
                (b.len(), b[0].samples, b[0].crc, b[0].body),
                (1, 300, 7, &body[..])
            );
            let subs: Vec<_> = sub_blocks(b[0].body).collect();
            assert_eq!(subs, [(ID_BITSTREAM, &[0xAB, 0xCD][..])]);
        }
        // A block that claims more than the packet holds.
        wv[4] = 0xFF;
        assert!(blocks(&wv).is_err());
    }

    #[test]
    fn odd_and_long_sub_blocks_are_sized() {
        // An odd-sized (0x40) long-form (0x80) sub-block of 3 bytes, then a short one.
        let b = [
            0xC0 | ID_RATE,
            2,
            0,
            0,
            0x80,
            0x3E,
            0,
            0,
            ID_TERMS,
            1,
            0x17,
            0x18,
        ];
        let subs: Vec<_> = sub_blocks(&b).collect();
        assert_eq!(
            subs,
            [
                (ID_RATE, &[0x80, 0x3E, 0][..]),
                (ID_TERMS, &[0x17, 0x18][..])
            ]
        );
    }

    #[test]
    fn dsd_and_a_missing_rate_are_named() {
        let block = |flags| Block {
            samples: 10,
            flags,
            crc: 0,
            body: &[],
        };
        let dsd = frame_format(&[block(INITIAL | FINAL | DSD)]).unwrap_err();
        assert!(dsd.to_string().contains("DSD"), "{dsd}");
        let no_rate = frame_format(&[block(INITIAL | FINAL | 0xF << 23)]).unwrap_err();
        assert!(no_rate.to_string().contains("sample rate"), "{no_rate}");
        let (rate, channels, bits) =
            frame_format(&[block(INITIAL | FINAL | MONO | 9 << 23 | 1)]).unwrap();
        assert_eq!((rate, channels.count(), bits), (44_100, 1, 16));
    }
}
