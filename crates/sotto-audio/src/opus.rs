//! Opus for symphonia, which demuxes Opus (Ogg: `.opus`, `.ogg`; Matroska: `.webm`, `.mkv`)
//! but has no decoder for it: voice messages and browser recordings are mostly Opus. The
//! decoding is rusty-opus's (pure Rust; its output matches libopus's `opusdec` to ~1e-7,
//! `tests/decode.rs`); this adapter reads the stream's `OpusHead`, drops the encoder's
//! pre-skip and applies the header's output gain, as `opusdec` does.

use symphonia::core::audio::{AsAudioBufferRef, AudioBuffer, AudioBufferRef, Channels};
use symphonia::core::audio::{Signal, SignalSpec};
use symphonia::core::codecs::{CodecDescriptor, CodecParameters, CODEC_TYPE_OPUS};
use symphonia::core::codecs::{Decoder, DecoderOptions, FinalizeResult};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::formats::Packet;
use symphonia::core::support_codec;

/// Opus always decodes at 48 kHz.
const RATE: u32 = 48_000;
/// The longest packet Opus allows: 120 ms at 48 kHz.
const MAX_FRAMES: usize = 5_760;

/// What a decoder needs from the `OpusHead` identification header (RFC 7845 §5.1).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Head {
    channels: usize,
    /// Samples (at 48 kHz) the encoder put before the audio.
    pre_skip: usize,
    /// Linear gain for the output (the header's Q7.8 dB).
    gain: f32,
}

impl Head {
    /// Parses `OpusHead`; only mapping family 0 (mono or stereo) is taken.
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
        if b[18] != 0 || !(1..=2).contains(&channels) {
            return unsupported_error("opus: multichannel streams (mapping family above 0)");
        }
        let gain = 10f32.powf(f32::from(gain_q8) / (20.0 * 256.0));
        Ok(Head {
            channels,
            pre_skip,
            gain,
        })
    }
}

/// A symphonia [`Decoder`] for Opus, registered beside symphonia's own (see `decode.rs`).
pub(crate) struct OpusDecoder {
    params: CodecParameters,
    head: Head,
    dec: rusty_opus::OpusDecoder,
    /// Interleaved output of the last packet.
    pcm: Vec<f32>,
    buf: AudioBuffer<f32>,
    /// Pre-skip samples still to drop.
    skip: usize,
}

impl OpusDecoder {
    fn decode_inner(&mut self, packet: &Packet) -> Result<()> {
        let ch = self.head.channels;
        let frames = match self.dec.decode(&packet.data, MAX_FRAMES, &mut self.pcm) {
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
                pre_skip: params.delay.unwrap_or(0) as usize,
                gain: 1.0,
            },
        };
        if !(1..=2).contains(&head.channels) {
            return unsupported_error("opus: more than two channels");
        }
        let dec = match rusty_opus::OpusDecoder::new(RATE as i32, head.channels) {
            Ok(d) => d,
            Err(e) => return decode_error(opus_error(&e)),
        };
        let layout = if head.channels == 1 {
            Channels::FRONT_LEFT
        } else {
            Channels::FRONT_LEFT | Channels::FRONT_RIGHT
        };
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
        if let Ok(d) = rusty_opus::OpusDecoder::new(RATE as i32, self.head.channels) {
            self.dec = d;
        }
        self.skip = 0;
    }

    fn codec_params(&self) -> &CodecParameters {
        &self.params
    }

    fn decode(&mut self, packet: &Packet) -> Result<AudioBufferRef<'_>> {
        if let Err(e) = self.decode_inner(packet) {
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

    #[test]
    fn bad_opus_heads_are_errors() {
        assert!(Head::parse(b"OpusHea").is_err());
        assert!(Head::parse(&head(2, 0, 0, 0)[..18]).is_err());
        assert!(Head::parse(&head(6, 0, 0, 1)).is_err(), "5.1 is not taken");
        assert!(Head::parse(&head(0, 0, 0, 0)).is_err());
        let mut v2 = head(1, 0, 0, 0);
        v2[8] = 0x10;
        assert!(Head::parse(&v2).is_err(), "an incompatible version");
    }
}
