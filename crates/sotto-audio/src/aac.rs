//! AAC for symphonia, whose own decoder takes AAC-LC in mono or stereo alone: a film's 5.1
//! or 7.1 track and HE-AAC (v1 with SBR, v2 with parametric stereo: low-bitrate streams,
//! radio, podcasts) stopped there. The decoding is rusty_aac's (pure Rust; its output
//! matches FFmpeg's, which faster-whisper decodes with, within a bit of 16-bit PCM on the
//! ISO conformance streams); symphonia still demuxes (MP4, Matroska, ADTS). Channels come
//! out in FFmpeg's (WAV's) order, front left and right first, so that `--diarize` hears the
//! front pair. HE-AAC comes out at its full (doubled) rate, as FFmpeg gives it. AAC in
//! LOAS/LATM (`loas.rs`: DVB broadcasts) has a codec type of its own, [`CODEC_TYPE_LATM`],
//! since its frames carry their configuration in a syntax of their own.

use symphonia::core::audio::{AudioBuffer, Channels};
use symphonia::core::audio::{Signal, SignalSpec};
use symphonia::core::codecs::CODEC_TYPE_AAC;
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::formats::Packet;
use symphonia::core::support_codec;

/// AAC in LOAS frames (an AudioSyncStream of LATM AudioMuxElements).
pub(crate) const CODEC_TYPE_LATM: CodecType = decl_codec_type(b"latm");

/// A symphonia [`Decoder`] for AAC, registered in place of symphonia's own (see `decode.rs`),
/// and for AAC in LOAS.
pub(crate) struct AacDecoder {
    params: CodecParameters,
    dec: Inner,
    buf: AudioBuffer<f32>,
    /// Where the stream came without an AudioSpecificConfig: the one its rate and channels
    /// make, for its first packet to take if that has no ADTS header to configure from.
    raw: Option<rusty_aac::AudioSpecificConfig>,
}

/// The AAC channel configuration (ISO 14496-3 table 1.19) for a channel count, where one
/// names it.
fn channel_config(channels: usize) -> Option<u16> {
    match channels {
        1..=6 => Some(channels as u16),
        8 => Some(7),
        _ => None,
    }
}

/// The positions of `n` channels as AAC's standard layouts put them, in the order they
/// decode in (FFmpeg's, which is symphonia's order of positions): mono, stereo, 3.0, 4.0
/// (a back centre), 5.0, 5.1, 6.1 and 7.1 (FFmpeg's "wide": left and right of centre).
pub(crate) fn channels_mask(n: usize) -> Option<Channels> {
    const FRONT: Channels = Channels::FRONT_LEFT.union(Channels::FRONT_RIGHT);
    const THREE: Channels = FRONT.union(Channels::FRONT_CENTRE);
    const REAR: Channels = Channels::REAR_LEFT.union(Channels::REAR_RIGHT);
    const SIDE: Channels = Channels::SIDE_LEFT.union(Channels::SIDE_RIGHT);
    Some(match n {
        1 => Channels::FRONT_LEFT,
        2 => FRONT,
        3 => THREE,
        4 => THREE.union(Channels::REAR_CENTRE),
        5 => THREE.union(REAR),
        6 => THREE.union(Channels::LFE1).union(REAR),
        7 => THREE
            .union(Channels::LFE1)
            .union(Channels::REAR_CENTRE)
            .union(SIDE),
        8 => Channels::from_bits(0xFF)?,
        _ => return None,
    })
}

enum Inner {
    /// Raw access units (MP4, Matroska) or ADTS frames.
    Plain(Box<rusty_aac::AacDecoder>),
    Latm(Box<rusty_aac::latm::LatmDecoder>),
}

impl AacDecoder {
    /// A buffer for `frames` frames of `channels` at `rate`, kept while later packets fit it.
    fn fit(&mut self, rate: u32, channels: usize, frames: usize) -> Result<()> {
        let spec = self.buf.spec();
        if spec.rate == rate && spec.channels.count() == channels && self.buf.capacity() >= frames {
            return Ok(());
        }
        let Some(mask) = channels_mask(channels) else {
            return decode_error("aac: no or too many channels");
        };
        self.buf = AudioBuffer::new(frames as u64, SignalSpec::new(rate, mask));
        Ok(())
    }

    fn decode_inner(&mut self, packet: &Packet) -> Result<()> {
        if let Some(config) = self.raw.take() {
            if !rusty_aac::is_adts(&packet.data) {
                self.dec = Inner::Plain(Box::new(rusty_aac::AacDecoder::with_config(config)));
            }
        }
        let decoded = match &mut self.dec {
            Inner::Plain(dec) => dec.decode(&packet.data, None),
            Inner::Latm(dec) => dec.decode(&packet.data, None).map(|(pcm, _)| pcm),
        };
        let pcm = match decoded {
            Ok(pcm) => pcm,
            Err(rusty_aac::Error::Again) => {
                self.buf.clear();
                return Ok(());
            }
            Err(rusty_aac::Error::Unsupported(_) | rusty_aac::Error::Unimplemented(_)) => {
                return unsupported_error("aac: a coding tool sotto's AAC decoder lacks")
            }
            Err(_) => return decode_error("aac: malformed packet"),
        };
        let ch = usize::from(pcm.channels);
        let frames = pcm.frames();
        self.fit(pcm.sample_rate, ch, frames)?;
        self.buf.clear();
        self.buf.render_reserved(Some(frames));
        for c in 0..ch {
            let out = self.buf.chan_mut(c);
            for (o, &s) in out.iter_mut().zip(pcm.samples.iter().skip(c).step_by(ch)) {
                *o = s;
            }
        }
        Ok(())
    }
}

impl Decoder for AacDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        if params.codec == CODEC_TYPE_LATM {
            // Each frame may carry the stream's configuration; the first one does.
            return Ok(Self {
                params: params.clone(),
                dec: Inner::Latm(Box::new(rusty_aac::latm::LatmDecoder::new())),
                buf: AudioBuffer::new(2048, SignalSpec::new(48_000, Channels::FRONT_LEFT)),
                raw: None,
            });
        }
        if params.codec != CODEC_TYPE_AAC {
            return unsupported_error("aac: not AAC");
        }
        let (dec, raw) = match &params.extra_data {
            // MP4's `esds`, Matroska's codec private: the AudioSpecificConfig, HE-AAC's
            // signalling and program config elements included.
            Some(asc) => match rusty_aac::AacDecoder::with_config_bytes(asc) {
                Ok(dec) => (dec, None),
                Err(rusty_aac::Error::Unsupported(_) | rusty_aac::Error::Unimplemented(_)) => {
                    return unsupported_error("aac: an object type sotto does not decode")
                }
                Err(_) => return decode_error("aac: malformed AudioSpecificConfig"),
            },
            // ADTS frames (`adts.rs`) configure the decoder from their headers, HE-AAC and
            // program config elements included. Raw frames with nothing to say what they
            // are (Matroska's oldest AAC tracks) are taken as AAC-LC at the track's rate
            // and channels.
            None => {
                let channels = channel_config(params.channels.map_or(0, |c| c.count()));
                let raw = params.sample_rate.zip(channels).map(|(rate, channels)| {
                    rusty_aac::AudioSpecificConfig {
                        object_type: 2,
                        sample_rate: rate,
                        channels,
                    }
                });
                (rusty_aac::AacDecoder::new(), raw)
            }
        };
        let rate = dec
            .output_sample_rate()
            .or(params.sample_rate)
            .unwrap_or(48_000);
        let count = params.channels.map_or(2, |c| c.count()).max(1);
        let mask = channels_mask(count).unwrap_or(Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
        Ok(Self {
            params: params.clone(),
            dec: Inner::Plain(Box::new(dec)),
            buf: AudioBuffer::new(2048, SignalSpec::new(rate, mask)),
            raw,
        })
    }

    fn reset(&mut self) {
        if let Ok(fresh) = Self::try_new(&self.params, &DecoderOptions::default()) {
            *self = fresh;
        }
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[
            support_codec!(
                CODEC_TYPE_AAC,
                "aac",
                "Advanced Audio Coding (LC, HE-AAC v1/v2, up to 7.1)"
            ),
            support_codec!(CODEC_TYPE_LATM, "aac_latm", "AAC in LOAS/LATM"),
        ]
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_inner(p));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_masks_name_aacs_layouts() {
        for n in 1..=8 {
            assert_eq!(channels_mask(n).map(|c| c.count()), Some(n), "{n}");
        }
        let five = channels_mask(5).unwrap();
        assert!(five.contains(Channels::REAR_LEFT) && !five.contains(Channels::LFE1));
        assert!(channels_mask(6).unwrap().contains(Channels::LFE1));
        assert_eq!(channels_mask(0), None);
        assert_eq!(channels_mask(9), None);
    }

    /// Any AudioSpecificConfig (the bytes a file hands over) and any packets after it give
    /// a decoder or an error, and frames or an error: never a panic.
    #[test]
    fn arbitrary_configs_and_packets_never_panic() {
        use proptest::prelude::*;
        use symphonia::core::audio::Channels;
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(3000));
        let config = proptest::collection::vec(any::<u8>(), 0..8);
        let packets =
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..700), 1..4);
        let adts = any::<bool>();
        runner
            .run(&(config, packets, adts), |(asc, packets, adts)| {
                let mut params = CodecParameters::new();
                params
                    .for_codec(CODEC_TYPE_AAC)
                    .with_sample_rate(44_100)
                    .with_channels(Channels::FRONT_LEFT | Channels::FRONT_RIGHT);
                if !adts {
                    params.with_extra_data(asc.into_boxed_slice());
                }
                if let Ok(mut dec) = AacDecoder::try_new(&params, &DecoderOptions::default()) {
                    for p in packets {
                        if let Ok(buf) = dec.decode(&Packet::new_from_slice(0, 0, 1024, &p)) {
                            prop_assert!(buf.frames() <= 8 * 1024);
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn adts_channel_counts_map_to_configurations() {
        assert_eq!(channel_config(6), Some(6));
        assert_eq!(channel_config(8), Some(7));
        assert_eq!(channel_config(7), None);
        assert_eq!(channel_config(0), None);
    }
}
