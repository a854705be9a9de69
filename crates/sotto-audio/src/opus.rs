//! Opus for symphonia, which demuxes Opus (Ogg: `.opus`, `.ogg`; Matroska: `.webm`, `.mkv`;
//! MP4, whose `dOps` box [`head_from_dops`] reads) but has no decoder for it: voice messages and browser recordings are mostly Opus. The
//! decoding is rusty-opus's (pure Rust; its output matches libopus's `opusdec` to ~1e-7,
//! `tests/decode.rs`); this adapter reads the stream's `OpusHead`, drops the encoder's
//! pre-skip and applies the header's output gain, as `opusdec` does. Mono and stereo
//! (mapping family 0) and the standard surround layouts of up to 8 channels (family 1:
//! several streams a packet) are taken.

use symphonia::core::audio::{AudioBuffer, Channels};
use symphonia::core::audio::{Signal, SignalSpec};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_OPUS};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::formats::Packet;
use symphonia::core::support_codec;

/// The positions of Opus's (and Vorbis's) channel mapping family 1 layouts, the order the
/// surround decoder puts them in (WAV's): mono, stereo, 3.0, quad, 5.0, 5.1, 6.1, 7.1.
fn vorbis_positions(n: usize) -> Option<Channels> {
    const FRONT: Channels = Channels::FRONT_LEFT.union(Channels::FRONT_RIGHT);
    const REAR: Channels = Channels::REAR_LEFT.union(Channels::REAR_RIGHT);
    const SIDE: Channels = Channels::SIDE_LEFT.union(Channels::SIDE_RIGHT);
    const THREE: Channels = FRONT.union(Channels::FRONT_CENTRE);
    Some(match n {
        1 => Channels::FRONT_LEFT,
        2 => FRONT,
        3 => THREE,
        4 => FRONT.union(REAR),
        5 => THREE.union(REAR),
        6 => THREE.union(REAR).union(Channels::LFE1),
        7 => THREE
            .union(Channels::LFE1)
            .union(Channels::REAR_CENTRE)
            .union(SIDE),
        8 => THREE.union(Channels::LFE1).union(REAR).union(SIDE),
        _ => return None,
    })
}

/// Opus always decodes at 48 kHz.
const RATE: u32 = 48_000;
/// The longest packet Opus allows: 120 ms at 48 kHz.
const MAX_FRAMES: usize = 5_760;

/// What a decoder needs from the `OpusHead` identification header (RFC 7845 §5.1).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Head {
    channels: usize,
    /// Channel mapping family: 0 (one stream, mono or stereo) or 1 (Vorbis surround).
    family: u8,
    /// Samples (at 48 kHz) the encoder put before the audio.
    pre_skip: usize,
    /// Linear gain for the output (the header's Q7.8 dB).
    gain: f32,
}

impl Head {
    /// Parses `OpusHead`: mapping family 0 (mono or stereo), or family 1 with the standard
    /// streams and mapping for its channel count (what encoders write for surround).
    fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < 19 || &b[..8] != b"OpusHead" {
            return decode_error("opus: no OpusHead header");
        }
        if b[8] >> 4 != 0 {
            return unsupported_error("opus: OpusHead version");
        }
        let channels = usize::from(b[9]);
        let pre_skip = usize::from(u16::from_le_bytes([b[10], b[11]]));
        let gain_q8 = i16::from_le_bytes([b[16], b[17]]);
        let family = b[18];
        match family {
            0 if (1..=2).contains(&channels) => {}
            0 => return decode_error("opus: a single stream of more than two channels"),
            1 => {
                let Ok(standard) = rusty_opus::multistream::ChannelLayout::surround(channels, 1)
                else {
                    return decode_error("opus: surround of no or more than 8 channels");
                };
                let table = b.get(19..21 + channels);
                let want = [standard.nb_streams as u8, standard.nb_coupled_streams as u8];
                if table.map(|t| (&t[..2], &t[2..])) != Some((&want[..], &standard.mapping[..])) {
                    return unsupported_error("opus: a surround channel mapping of its own");
                }
            }
            _ => return unsupported_error("opus: channel mapping families above 1"),
        }
        let gain = 10f32.powf(f32::from(gain_q8) / (20.0 * 256.0));
        Ok(Head {
            channels,
            family,
            pre_skip,
            gain,
        })
    }
}

/// The `OpusHead` of a stream of `channels` (1 to 8) laid out as Ogg's mapping families 0
/// and 1 do, without pre-skip or gain: what a container that says only the channel count
/// (Opus in MPEG-TS) implies.
pub(crate) fn standard_head(channels: usize) -> Option<Vec<u8>> {
    let mut head = b"OpusHead".to_vec();
    head.extend([1, channels as u8, 0, 0]);
    head.extend(RATE.to_le_bytes());
    head.extend([0, 0]);
    if channels <= 2 {
        head.push(0);
    } else {
        let layout = rusty_opus::multistream::ChannelLayout::surround(channels, 1).ok()?;
        head.extend([1, layout.nb_streams as u8, layout.nb_coupled_streams as u8]);
        head.extend(&layout.mapping);
    }
    (1..=8).contains(&channels).then_some(head)
}

/// The `OpusHead` of an MP4 track's `dOps` box as symphonia hands it on (the magic, then
/// the box: version 0 and big-endian fields, where `OpusHead` has version 1 and
/// little-endian ones); None for anything else. With `edited`, the pre-skip is 0: the
/// track's edit list starts after it (ISO/IEC 23003-5's Opus in ISOBMFF), and the edit
/// is applied to the decoded samples.
pub(crate) fn head_from_dops(b: &[u8], edited: bool) -> Option<Vec<u8>> {
    if b.len() < 19 || &b[..8] != b"OpusHead" || b[8] != 0 {
        return None;
    }
    let mut head = b.to_vec();
    head[8] = 1;
    let pre_skip = if edited {
        0
    } else {
        u16::from_be_bytes([b[10], b[11]])
    };
    head[10..12].copy_from_slice(&pre_skip.to_le_bytes());
    head[12..16].copy_from_slice(&u32::from_be_bytes([b[12], b[13], b[14], b[15]]).to_le_bytes());
    head[16..18].copy_from_slice(&i16::from_be_bytes([b[16], b[17]]).to_le_bytes());
    Some(head)
}

/// A symphonia [`Decoder`] for Opus, registered beside symphonia's own (see `decode.rs`).
pub(crate) struct OpusDecoder {
    params: CodecParameters,
    head: Head,
    dec: Streams,
    /// Interleaved output of the last packet.
    pcm: Vec<f32>,
    buf: AudioBuffer<f32>,
    /// Pre-skip samples still to drop.
    skip: usize,
}

impl OpusDecoder {
    fn decode_inner(&mut self, packet: &Packet) -> Result<()> {
        let ch = self.head.channels;
        let frames = match self.dec.decode(&packet.data, &mut self.pcm) {
            Ok(n) => n.min(MAX_FRAMES),
            Err(e) => return decode_error(opus_error(&e)),
        };
        // A demuxer that trims the pre-skip itself marks it on the first packets.
        if packet.trim_start() > 0 {
            self.skip = 0;
        }
        let skip = self.skip.min(frames);
        self.skip -= skip;
        self.buf.clear();
        self.buf.render_reserved(Some(frames));
        for c in 0..ch {
            let gain = self.head.gain;
            let out = self.buf.chan_mut(c);
            for (o, s) in out.iter_mut().zip(self.pcm.iter().skip(c).step_by(ch)) {
                *o = s * gain;
            }
        }
        let start = skip + packet.trim_start() as usize;
        self.buf.trim(start, packet.trim_end() as usize);
        Ok(())
    }
}

/// One Opus stream (mono or stereo), or several a packet (surround).
enum Streams {
    One(Box<rusty_opus::OpusDecoder>),
    Several(Surround),
}

impl Streams {
    fn new(head: &Head) -> std::result::Result<Self, rusty_opus::Error> {
        let rate = RATE as i32;
        Ok(match head.family {
            0 => Streams::One(Box::new(rusty_opus::OpusDecoder::new(rate, head.channels)?)),
            _ => Streams::Several(Surround::new(head.channels)?),
        })
    }

    /// Decodes a packet into `pcm`, interleaved; the frames per channel.
    fn decode(
        &mut self,
        packet: &[u8],
        pcm: &mut [f32],
    ) -> std::result::Result<usize, rusty_opus::Error> {
        match self {
            Streams::One(d) => d.decode(packet, MAX_FRAMES, pcm),
            Streams::Several(d) => d.decode(packet, pcm),
        }
    }
}

/// A multistream (surround) decoder, RFC 7845 §5.1.1: a packet holds one Opus packet per
/// stream, all but the last self-delimited (RFC 6716 Appendix B), the coupled (stereo)
/// streams first. (rusty-opus's own `OpusMSDecoder` hands the self-delimited packets to
/// its decoder as if they were plain ones, which decodes them wrongly.)
struct Surround {
    layout: rusty_opus::multistream::ChannelLayout,
    /// Where each channel, in Opus's (Vorbis's) order, goes in WAV's, as `opusdec` puts
    /// them: left and right first, so that `--diarize` hears the front pair.
    wav_position: Vec<usize>,
    streams: Vec<rusty_opus::OpusDecoder>,
    /// One stream's output, interleaved.
    scratch: Vec<f32>,
    /// One stream's packet rewritten with plain framing.
    plain: Vec<u8>,
}

impl Surround {
    fn new(channels: usize) -> std::result::Result<Self, rusty_opus::Error> {
        let layout = rusty_opus::multistream::ChannelLayout::surround(channels, 1)?;
        // WAV channel w takes Vorbis channel VORBIS_IN_WAV[n - 1][w] (opusdec's table).
        const VORBIS_IN_WAV: [&[usize]; 8] = [
            &[0],
            &[0, 1],
            &[0, 2, 1],
            &[0, 1, 2, 3],
            &[0, 2, 1, 3, 4],
            &[0, 2, 1, 5, 3, 4],
            &[0, 2, 1, 6, 5, 3, 4],
            &[0, 2, 1, 7, 5, 6, 3, 4],
        ];
        let order = VORBIS_IN_WAV[channels - 1];
        let wav_position = (0..channels)
            .map(|v| order.iter().position(|&o| o == v).unwrap_or(v))
            .collect();
        let streams = (0..layout.nb_streams)
            .map(|s| {
                let ch = if s < layout.nb_coupled_streams { 2 } else { 1 };
                rusty_opus::OpusDecoder::new(RATE as i32, ch)
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Self {
            layout,
            wav_position,
            streams,
            scratch: vec![0.0; 2 * MAX_FRAMES],
            plain: Vec::new(),
        })
    }

    fn decode(
        &mut self,
        mut packet: &[u8],
        pcm: &mut [f32],
    ) -> std::result::Result<usize, rusty_opus::Error> {
        let bad = rusty_opus::Error::InvalidPacket("opus: malformed multistream packet");
        let (n_ch, coupled) = (self.layout.nb_channels, self.layout.nb_coupled_streams);
        let mut frames = None;
        for (s, dec) in self.streams.iter_mut().enumerate() {
            let last = s + 1 == self.layout.nb_streams;
            let n = if last {
                dec.decode(packet, MAX_FRAMES, &mut self.scratch)?
            } else {
                let end = plain_packet(packet, &mut self.plain).ok_or(bad)?;
                packet = &packet[end..];
                dec.decode(&self.plain, MAX_FRAMES, &mut self.scratch)?
            };
            if *frames.get_or_insert(n) != n {
                return Err(bad);
            }
            // Every output channel this stream's channels feed (the layout maps output
            // channel c to decoded channel `mapping[c]`: 2s and 2s+1 for a coupled stream
            // s, coupled + s for a mono one).
            let width = if s < coupled { 2 } else { 1 };
            for (c, &m) in self.layout.mapping.iter().enumerate() {
                let m = usize::from(m);
                let from = match s < coupled {
                    true if m / 2 == s && m < 2 * coupled => m % 2,
                    false if m == coupled + s => 0,
                    _ => continue,
                };
                let w = self.wav_position[c];
                for i in 0..n {
                    pcm[i * n_ch + w] = self.scratch[i * width + from];
                }
            }
        }
        Ok(frames.unwrap_or(0))
    }
}

/// An Opus frame length (RFC 6716 §3.2.1) at the start of `b`: (length, bytes it took).
fn frame_len(b: &[u8]) -> Option<(usize, usize)> {
    match *b.first()? {
        l @ 0..=251 => Some((usize::from(l), 1)),
        l => Some((usize::from(l) + 4 * usize::from(*b.get(1)?), 2)),
    }
}

fn push_frame_len(out: &mut Vec<u8>, l: usize) {
    if l < 252 {
        out.push(l as u8);
    } else {
        let first = 252 + (l & 3);
        out.push(first as u8);
        out.push(((l - first) / 4) as u8);
    }
}

/// Rewrites the self-delimited packet at the start of `data` (RFC 6716 Appendix B: one
/// more frame length than the plain framing says, so that packets can follow it) as the
/// plain packet of the same frame code, without padding, into `out`; the bytes it took of
/// `data`, or None where it is malformed. (rusty-opus's own parser of this framing gives
/// the frames one length byte short.)
fn plain_packet(data: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    out.clear();
    let toc = *data.first()?;
    out.push(toc);
    let mut at = 1;
    let len = |at: &mut usize| -> Option<usize> {
        let (l, n) = frame_len(data.get(*at..)?)?;
        *at += n;
        Some(l)
    };
    let (sizes, padding): (Vec<usize>, usize) = match toc & 3 {
        0 => (vec![len(&mut at)?], 0),
        1 => {
            let l = len(&mut at)?;
            (vec![l, l], 0)
        }
        2 => {
            let (first, last) = (len(&mut at)?, len(&mut at)?);
            push_frame_len(out, first);
            (vec![first, last], 0)
        }
        _ => {
            let count_byte = *data.get(at)?;
            at += 1;
            let count = usize::from(count_byte & 0x3f);
            if count == 0 {
                return None;
            }
            let mut padding = 0;
            if count_byte & 0x40 != 0 {
                loop {
                    let p = *data.get(at)?;
                    at += 1;
                    padding += if p == 255 { 254 } else { usize::from(p) };
                    if p != 255 {
                        break;
                    }
                }
            }
            out.push(count_byte & !0x40);
            let vbr = count_byte & 0x80 != 0;
            let mut sizes = Vec::with_capacity(count);
            if vbr {
                for _ in 0..count - 1 {
                    let l = len(&mut at)?;
                    push_frame_len(out, l);
                    sizes.push(l);
                }
                sizes.push(len(&mut at)?);
            } else {
                sizes.resize(count, len(&mut at)?);
            }
            (sizes, padding)
        }
    };
    for l in sizes {
        if l > 1275 {
            return None;
        }
        out.extend_from_slice(data.get(at..at + l)?);
        at += l;
    }
    Some(at + padding).filter(|&end| end <= data.len())
}

/// rusty-opus's error as a static string (symphonia's decode errors take `&'static str`).
fn opus_error(e: &rusty_opus::Error) -> &'static str {
    match e {
        rusty_opus::Error::InvalidPacket(_) => "opus: malformed packet",
        rusty_opus::Error::BufferTooSmall(_) => "opus: packet longer than 120 ms",
        _ => "opus: the packet could not be decoded",
    }
}

impl Decoder for OpusDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let head = match params.extra_data.as_deref() {
            Some(b) => Head::parse(b)?,
            // No header (a bare stream): what the container says.
            None => Head {
                channels: params.channels.map_or(1, |c| c.count()),
                family: 0,
                pre_skip: params.delay.unwrap_or(0) as usize,
                gain: 1.0,
            },
        };
        if head.family == 0 && !(1..=2).contains(&head.channels) {
            return unsupported_error("opus: more than two channels without a mapping");
        }
        let dec = match Streams::new(&head) {
            Ok(d) => d,
            Err(e) => return decode_error(opus_error(&e)),
        };
        let layout = vorbis_positions(head.channels).unwrap_or(Channels::FRONT_LEFT);
        let spec = SignalSpec::new(RATE, layout);
        Ok(OpusDecoder {
            params: params.clone(),
            head,
            dec,
            pcm: vec![0.0; MAX_FRAMES * head.channels],
            buf: AudioBuffer::new(MAX_FRAMES as u64, spec),
            skip: head.pre_skip,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(CODEC_TYPE_OPUS, "opus", "Opus")]
    }

    fn reset(&mut self) {
        if let Ok(d) = Streams::new(&self.head) {
            self.dec = d;
        }
        self.skip = 0;
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_inner(p));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(channels: u8, pre_skip: u16, gain_q8: i16, family: u8) -> Vec<u8> {
        let mut b = b"OpusHead".to_vec();
        b.push(1);
        b.push(channels);
        b.extend_from_slice(&pre_skip.to_le_bytes());
        b.extend_from_slice(&48_000u32.to_le_bytes());
        b.extend_from_slice(&gain_q8.to_le_bytes());
        b.push(family);
        b
    }

    #[test]
    fn opus_head_fields() {
        let h = Head::parse(&head(2, 312, 0, 0)).unwrap();
        assert_eq!((h.channels, h.pre_skip, h.gain), (2, 312, 1.0));
        // +6 dB in Q7.8.
        let h = Head::parse(&head(1, 0, 6 * 256, 0)).unwrap();
        assert!((h.gain - 1.9953).abs() < 1e-3, "{}", h.gain);
    }

    /// Self-delimited packets of each frame code (RFC 6716 Appendix B) rewritten as plain
    /// ones: the extra length dropped, padding dropped, the bytes taken counted.
    #[test]
    fn self_delimited_packets_become_plain_ones() {
        let cases: [(&[u8], &[u8], usize); 6] = [
            // Code 0: one frame of 3 bytes; what follows is the next stream's.
            (&[0xfc, 3, 1, 2, 3, 9, 9], &[0xfc, 1, 2, 3], 5),
            // Code 1: two frames of 2 bytes.
            (&[0xfd, 2, 1, 2, 3, 4], &[0xfd, 1, 2, 3, 4], 6),
            // Code 2: frames of 1 and 2 bytes; the plain packet keeps the first length.
            (&[0xfe, 1, 2, 1, 2, 3], &[0xfe, 1, 1, 2, 3], 6),
            // Code 3, two frames of 2 bytes (CBR) and one byte of padding.
            (
                &[0xff, 0x42, 1, 2, 1, 2, 3, 4, 0],
                &[0xff, 0x02, 1, 2, 3, 4],
                9,
            ),
            // Code 3, VBR: frames of 1, 2 and 1 bytes.
            (
                &[0xff, 0x83, 1, 2, 1, 1, 2, 3, 4],
                &[0xff, 0x83, 1, 2, 1, 2, 3, 4],
                9,
            ),
            // A two-byte length: 252 + 4·12 = 300.
            (&[0xfc, 252, 12], &[], 0),
        ];
        let mut out = Vec::new();
        for (packet, plain, end) in &cases[..5] {
            assert_eq!(plain_packet(packet, &mut out), Some(*end), "{packet:?}");
            assert_eq!(&out, plain, "{packet:?}");
        }
        let mut long = cases[5].0.to_vec();
        long.extend(std::iter::repeat_n(7u8, 300));
        assert_eq!(plain_packet(&long, &mut out), Some(303));
        assert_eq!(out.len(), 301);
        // Cut, empty, or a frame count of zero: None, never a panic.
        for bad in [
            &[][..],
            &[0xfc, 3, 1],
            &[0xff, 0x80],
            &[0xfe, 1],
            &[0xfc, 252],
        ] {
            assert_eq!(plain_packet(bad, &mut out), None, "{bad:?}");
        }
        let mut x = 12345u32;
        for _ in 0..20_000 {
            let bytes: Vec<u8> = (0..(x % 40))
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    (x >> 16) as u8
                })
                .collect();
            if let Some(end) = plain_packet(&bytes, &mut out) {
                assert!(end <= bytes.len());
            }
        }
    }

    #[test]
    fn bad_opus_heads_are_errors() {
        assert!(Head::parse(b"OpusHea").is_err());
        assert!(Head::parse(&head(2, 0, 0, 0)[..18]).is_err());
        // 5.1: four streams, two of them stereo, the standard order; another order is
        // refused, as is a family past 1 or a single stream of six channels.
        let mut surround = head(6, 312, 0, 1);
        surround.extend_from_slice(&[4, 2, 0, 4, 1, 2, 3, 5]);
        let h = Head::parse(&surround).unwrap();
        assert_eq!((h.channels, h.family, h.pre_skip), (6, 1, 312));
        let mut odd = surround.clone();
        odd.swap(21, 22);
        assert!(Head::parse(&odd).is_err(), "a mapping of its own");
        assert!(Head::parse(&surround[..26]).is_err(), "a cut mapping table");
        assert!(Head::parse(&head(6, 0, 0, 1)).is_err(), "no mapping table");
        assert!(Head::parse(&head(6, 0, 0, 0)).is_err());
        assert!(Head::parse(&head(2, 0, 0, 2)).is_err());
        assert!(Head::parse(&head(0, 0, 0, 0)).is_err());
        let mut v2 = head(1, 0, 0, 0);
        v2[8] = 0x10;
        assert!(Head::parse(&v2).is_err(), "an incompatible version");
    }
}
