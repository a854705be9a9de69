//! TTA, the True Audio lossless codec (`.tta`, and Matroska's `A_TTA1`), which symphonia
//! does not decode. A `.tta` file is a 22-byte header (`TTA1`, format, channels, bits,
//! rate, length, CRC), a table of each frame's size, then the frames: about 1.045 s each,
//! every channel's samples interleaved, each an adaptive Rice code of the residue of an
//! adaptive 8-tap filter and a fixed first-order predictor, the channels then undone from
//! their differences; the frame ends with its CRC-32. The format is Aleksander
//! Djuric's, as its reference decoder and FFmpeg read it.

use symphonia::core::audio::{AudioBuffer, Signal};
use symphonia::core::codecs::{
    decl_codec_type, CodecDescriptor, CodecParameters, CodecType, Decoder, DecoderOptions,
};
use symphonia::core::errors::Result;
use symphonia::core::errors::{decode_error, end_of_stream_error, unsupported_error, Error};
use symphonia::core::formats::{Cue, FormatOptions, FormatReader, Packet, Track};
use symphonia::core::io::{MediaSourceStream, ReadBytes};
use symphonia::core::meta::MetadataLog;
use symphonia::core::probe::{Descriptor, Instantiate, QueryDescriptor};
use symphonia::core::{support_codec, support_format};

use crate::codec::{first_buffer, make_room, LeBits};

/// TTA, which symphonia has no codec type for.
pub(crate) const CODEC_TYPE_TTA: CodecType = decl_codec_type(b"tta");

const MAGIC: &[u8; 4] = b"TTA1";
/// The header's length (the CRC included).
const HEADER: usize = 22;
/// Most channels taken.
const MAX_CHANNELS: u16 = 32;
/// Largest frame taken, in bytes (a frame of 8 channels of 24-bit samples at 192 kHz, as
/// stored, is about 4.8 MB).
const MAX_FRAME: u32 = 16 << 20;

/// What a stream's header says: what its samples are and how many there are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Format {
    pub channels: u16,
    pub bits: u16,
    pub rate: u32,
    /// Samples a channel in all (0: unknown).
    pub length: u32,
}

impl Format {
    /// The header's fields, after `TTA1`; an error for what sotto does not decode.
    fn parse(h: &[u8]) -> Result<Self> {
        if h.len() < 18 || &h[..4] != MAGIC {
            return decode_error("tta: not a TTA header");
        }
        let u16le = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
        let u32le = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        match u16le(4) {
            1 => {}
            2 => return unsupported_error("tta: encrypted TTA (a password protects it)"),
            _ => return decode_error("tta: an unknown TTA format"),
        }
        let f = Self {
            channels: u16le(6),
            bits: u16le(8),
            rate: u32le(10),
            length: u32le(14),
        };
        if !(1..=MAX_CHANNELS).contains(&f.channels) {
            return decode_error("tta: a channel count out of bounds");
        }
        if !(8..=24).contains(&f.bits) {
            return unsupported_error("tta: samples of other than 8 to 24 bits");
        }
        if !(1..=768_000).contains(&f.rate) {
            return decode_error("tta: a sample rate out of bounds");
        }
        Ok(f)
    }

    /// Samples a channel in a frame (256/245 s of them).
    pub(crate) fn frame_len(&self) -> u32 {
        256 * self.rate / 245
    }

    fn bytes(&self) -> u32 {
        u32::from(self.bits).div_ceil(8)
    }

    /// The header bytes (CRC left zero), for a stream whose header a container leaves out.
    pub(crate) fn header(&self) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend(1u16.to_le_bytes());
        h.extend(self.channels.to_le_bytes());
        h.extend(self.bits.to_le_bytes());
        h.extend(self.rate.to_le_bytes());
        h.extend(self.length.to_le_bytes());
        h.extend(0u32.to_le_bytes());
        h
    }
}

/// `1 << k`, held at the top bit past 31.
fn shift_1(k: u32) -> u32 {
    if k < 32 {
        1 << k
    } else {
        0x8000_0000
    }
}

/// A channel's adaptive Rice coder: two parameters and their running sums.
#[derive(Clone, Copy)]
struct Rice {
    k: [u32; 2],
    sum: [u32; 2],
}

impl Rice {
    fn new() -> Self {
        Self {
            k: [10, 10],
            sum: [shift_1(14), shift_1(14)],
        }
    }

    /// Moves parameter `i` toward the running magnitude of its values.
    fn adapt(&mut self, i: usize, value: u32) {
        self.sum[i] = self.sum[i].wrapping_add(value.wrapping_sub(self.sum[i] >> 4));
        if self.k[i] > 0 && self.sum[i] < shift_1(self.k[i] + 4) {
            self.k[i] -= 1;
        } else if self.sum[i] > shift_1(self.k[i] + 5) {
            self.k[i] += 1;
        }
    }

    /// The next residue; None where the bits run out.
    fn value(&mut self, bits: &mut LeBits) -> Option<i32> {
        if bits.left() <= 0 {
            return None;
        }
        let mut ones = 0u32;
        while bits.left() > 0 && bits.bit() == 1 {
            ones = ones.wrapping_add(1);
        }
        let (depth, k) = match ones {
            0 => (0, self.k[0]),
            _ => {
                ones -= 1;
                (1, self.k[1])
            }
        };
        if k > 25 || bits.left() < i64::from(k) {
            return None;
        }
        let mut v = ones.wrapping_shl(k).wrapping_add(bits.get(k));
        if depth == 1 {
            self.adapt(1, v);
            v = v.wrapping_add(shift_1(self.k[0]));
        }
        self.adapt(0, v);
        // Odd values are positive, even ones not: 1, 2, 3, 4... → 1, -1, 2, -2...
        let v = v as i32;
        Some(if v & 1 == 1 { (v >> 1) + 1 } else { -(v >> 1) })
    }
}

/// A channel's adaptive 8-tap filter: its weights, the steps they move by, and its history
/// (the last input, and its first, second and third differences).
#[derive(Clone, Copy, Default)]
struct Filter {
    shift: u32,
    round: i32,
    error: i32,
    qm: [i32; 8],
    dx: [i32; 8],
    dl: [i32; 8],
}

impl Filter {
    fn new(shift: u32) -> Self {
        Self {
            shift,
            round: 1 << (shift - 1),
            ..Self::default()
        }
    }

    fn process(&mut self, input: i32) -> i32 {
        // The weights step with the sign of the last error, then predict.
        let mut sum = self.round;
        for i in 0..8 {
            match self.error {
                0 => {}
                e if e < 0 => self.qm[i] = self.qm[i].wrapping_sub(self.dx[i]),
                _ => self.qm[i] = self.qm[i].wrapping_add(self.dx[i]),
            }
            sum = sum.wrapping_add(self.dl[i].wrapping_mul(self.qm[i]));
        }
        let sign = |v: i32| (v >> 30) | 1;
        // The steps of the newest four taps, before the history moves down one.
        let dx = [
            sign(self.dl[4]),
            sign(self.dl[5]) << 1,
            sign(self.dl[6]) << 1,
            sign(self.dl[7]) << 2,
        ];
        self.error = input;
        let out = input.wrapping_add(sum >> self.shift);
        // The newest sample, and its differences down the taps before it.
        let d1 = out.wrapping_sub(self.dl[7]);
        let d2 = d1.wrapping_sub(self.dl[6]);
        let d3 = d2.wrapping_sub(self.dl[5]);
        self.dl.copy_within(1.., 0);
        self.dl[4] = d3;
        self.dl[5] = d2;
        self.dl[6] = d1;
        self.dl[7] = out;
        self.dx.copy_within(1.., 0);
        self.dx[4..8].copy_from_slice(&dx);
        out
    }
}

/// The decoder of TTA frames; its parameters' extra data is the stream's header.
pub(crate) struct TtaDecoder {
    params: CodecParameters,
    format: Format,
    buf: AudioBuffer<f32>,
    /// Samples a channel decoded so far.
    produced: u64,
}

impl TtaDecoder {
    fn decode_frame(&mut self, data: &[u8]) -> Result<()> {
        self.buf.clear();
        let f = self.format;
        let frame_len = f.frame_len() as usize;
        // Every frame is whole but the last, which holds what the length leaves (a whole
        // frame where the length is unknown, or already reached).
        let n = match u64::from(f.length).saturating_sub(self.produced) {
            0 => frame_len,
            left => frame_len.min(left as usize),
        };
        if data.len() < 4 {
            return decode_error("tta: a frame without its CRC");
        }
        let (body, crc) = data.split_at(data.len() - 4);
        if crc32fast::hash(body).to_le_bytes() != crc {
            return decode_error("tta: a frame fails its CRC");
        }
        let channels = usize::from(f.channels);
        // Each sample takes a bit at least: what claims more is damaged (and is not given
        // the room it claims).
        if n * channels > body.len() * 8 {
            return decode_error("tta: a frame too short for its samples");
        }
        let layout = crate::decode::first_channels(channels as u64)
            .ok_or(Error::DecodeError("tta: no channels"))?;
        make_room(&mut self.buf, f.rate, layout, n, frame_len)?;
        self.buf.render_reserved(Some(n));
        let bytes = f.bytes();
        let shift = [10, 9, 10][bytes as usize - 1];
        let mut rice = vec![Rice::new(); channels];
        let mut filters = vec![Filter::new(shift); channels];
        let mut last = vec![0i32; channels];
        let mut bits = LeBits::new(body);
        let mut x = vec![0i32; channels];
        let scale = 1.0 / (1u32 << (bytes * 8 - 1)) as f32;
        for i in 0..n {
            for c in 0..channels {
                let r = rice[c].value(&mut bits).ok_or(Error::DecodeError(
                    "tta: a frame's bits end before its samples",
                ))?;
                let v = filters[c].process(r);
                // A fixed first-order predictor: 15/16 of the last (31/32 past 8 bits).
                let k = if bytes == 1 { 4 } else { 5 };
                let p = ((i64::from(last[c]) << k) - i64::from(last[c])) >> k;
                let v = v.wrapping_add(p as i32);
                last[c] = v;
                x[c] = v;
            }
            // The channels were coded as differences: the last from the mean of the last
            // two, each before it from the one after.
            if channels > 1 {
                x[channels - 1] = x[channels - 1].wrapping_add(x[channels - 2] / 2);
                for c in (0..channels - 1).rev() {
                    x[c] = x[c + 1].wrapping_sub(x[c]);
                }
            }
            for (c, &v) in x.iter().enumerate() {
                self.buf.chan_mut(c)[i] = v as f32 * scale;
            }
        }
        self.produced += n as u64;
        Ok(())
    }
}

impl Decoder for TtaDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let buf = first_buffer(params, CODEC_TYPE_TTA, "tta: not TTA", 4096)?;
        let format = Format::parse(params.extra_data.as_deref().unwrap_or_default())?;
        Ok(Self {
            params: params.clone(),
            format,
            buf,
            produced: 0,
        })
    }

    fn reset(&mut self) {}

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(CODEC_TYPE_TTA, "tta", "True Audio")]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frame(&p.data));
}

/// The `.tta` file: its header, the frames' sizes, then the frames, each a packet.
pub(crate) struct TtaReader {
    src: MediaSourceStream,
    tracks: Vec<Track>,
    cues: Vec<Cue>,
    metadata: MetadataLog,
    /// Each frame's size, in order, and the next's place among them.
    sizes: Vec<u32>,
    next: usize,
    frame_len: u32,
    length: u64,
    ts: u64,
}

impl TtaReader {
    fn open(mut src: MediaSourceStream) -> Result<Self> {
        let mut h = [0u8; HEADER];
        src.read_buf_exact(&mut h)?;
        let format = Format::parse(&h)?;
        if crc32fast::hash(&h[..18]).to_le_bytes() != h[18..22] {
            return decode_error("tta: the header fails its CRC");
        }
        if format.length == 0 {
            return decode_error("tta: a stream of no samples");
        }
        let frame_len = format.frame_len();
        let frames = format.length.div_ceil(frame_len) as usize;
        // The table: 4 bytes a frame, then its CRC (a damaged length would claim more than
        // the file has: read a little at a time).
        let mut table = Vec::new();
        let mut left = frames * 4 + 4;
        while left > 0 {
            let mut chunk = vec![0u8; left.min(1 << 16)];
            src.read_buf_exact(&mut chunk)?;
            left -= chunk.len();
            table.extend_from_slice(&chunk);
        }
        let (sizes, crc) = table.split_at(frames * 4);
        if crc32fast::hash(sizes).to_le_bytes() != crc {
            return decode_error("tta: the frame table fails its CRC");
        }
        let sizes = sizes
            .chunks_exact(4)
            .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
            .collect();
        let mut params = CodecParameters::new();
        params
            .for_codec(CODEC_TYPE_TTA)
            .with_sample_rate(format.rate)
            .with_bits_per_sample(u32::from(format.bits))
            .with_n_frames(u64::from(format.length))
            .with_extra_data(h.into());
        if let Some(channels) = crate::decode::first_channels(u64::from(format.channels)) {
            params.with_channels(channels);
        }
        Ok(Self {
            src,
            tracks: vec![Track::new(0, params)],
            cues: Vec::new(),
            metadata: MetadataLog::default(),
            sizes,
            next: 0,
            frame_len,
            length: u64::from(format.length),
            ts: 0,
        })
    }
}

impl QueryDescriptor for TtaReader {
    fn query() -> &'static [Descriptor] {
        &[support_format!(
            "tta",
            "True Audio",
            &["tta"],
            &["audio/x-tta", "audio/tta"],
            &[MAGIC]
        )]
    }

    fn score(_context: &[u8]) -> u8 {
        255
    }
}

impl FormatReader for TtaReader {
    fn try_new(src: MediaSourceStream, _options: &FormatOptions) -> Result<Self> {
        Self::open(src)
    }

    crate::codec::front_to_back_reader_methods!();

    fn next_packet(&mut self) -> Result<Packet> {
        let Some(&size) = self.sizes.get(self.next) else {
            return end_of_stream_error();
        };
        if size > MAX_FRAME {
            return decode_error("tta: a frame's size is out of bounds");
        }
        let mut frame = vec![0u8; size as usize];
        // A frame cut short ends the stream (what was read before it stands).
        self.src.read_buf_exact(&mut frame)?;
        self.next += 1;
        let dur = u64::from(self.frame_len).min(self.length - self.ts);
        let ts = self.ts;
        self.ts += dur;
        Ok(Packet::new_from_boxed_slice(
            0,
            ts,
            dur,
            frame.into_boxed_slice(),
        ))
    }

    fn into_inner(self: Box<Self>) -> MediaSourceStream {
        self.src
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_says_its_format_and_refusals_are_named() {
        let f = Format {
            channels: 2,
            bits: 16,
            rate: 44_100,
            length: 100_000,
        };
        let h = f.header();
        assert_eq!(Format::parse(&h).unwrap(), f);
        assert_eq!(f.frame_len(), 46_080);
        let mut encrypted = h.clone();
        encrypted[4] = 2;
        let e = Format::parse(&encrypted).unwrap_err().to_string();
        assert!(e.contains("encrypted"), "{e}");
        let mut wide = h;
        wide[8] = 32;
        assert!(Format::parse(&wide)
            .unwrap_err()
            .to_string()
            .contains("bits"));
    }

    #[test]
    fn rice_values_alternate_in_sign() {
        // k = 10: a zero, then ten bits of value 3 (odd: +2), least significant first.
        let mut r = Rice::new();
        let mut bits = LeBits::new(&[0b0000_0110, 0]);
        assert_eq!(r.value(&mut bits), Some(2));
    }
}
