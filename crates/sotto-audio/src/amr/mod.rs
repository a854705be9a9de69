//! AMR-NB (Adaptive Multi-Rate narrowband, 3GPP TS 26.090): the speech codec of GSM and
//! UMTS calls, in the `.amr` files that phones' voice recorders and call recorders write
//! and in 3GP/MP4 files (`samr`). 8 kHz mono, a 20 ms frame of 160 samples per packet.
//!
//! A packet holds frames in RFC 4867's storage form: a table-of-contents byte (frame
//! type in bits 6–3), then the frame's bits. The eight speech modes (4.75–12.2 kbit/s)
//! decode in `nb.rs`. Comfort-noise (SID) and no-data frames, which a discontinuous
//! transmission leaves in silences, decode as 160 samples of silence: FFmpeg drops them,
//! which would shorten the recording and move every later word.

mod nb;
mod tables;

use symphonia::core::audio::{Channels, Signal};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, Result};
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room};

pub(crate) const CODEC_TYPE_AMRNB: CodecType = decl_codec_type(b"samr");

/// The storage format's magic (RFC 4867 §5.1), and that of the formats it is not: AMR-WB
/// and the multichannel variants.
pub(crate) const MAGIC: &[u8] = b"#!AMR\n";
pub(crate) const MAGIC_WB: &[u8] = b"#!AMR-WB";
pub(crate) const MAGIC_MC: &[u8] = b"#!AMR_MC1.0\n";

/// AMR-NB's sample rate, and the samples of a frame.
pub(crate) const RATE: u32 = 8_000;
pub(crate) const FRAME: usize = nb::FRAME;

/// A speech frame's mode (TS 26.101 table 1a), by its bit rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    M4k75,
    M5k15,
    M5k9,
    M6k7,
    M7k4,
    M7k95,
    M10k2,
    M12k2,
}

const MODES: [Mode; 8] = [
    Mode::M4k75,
    Mode::M5k15,
    Mode::M5k9,
    Mode::M6k7,
    Mode::M7k4,
    Mode::M7k95,
    Mode::M10k2,
    Mode::M12k2,
];

/// The frame type a table-of-contents byte names.
fn frame_type(toc: u8) -> usize {
    usize::from((toc >> 3) & 0xF)
}

/// Bytes a storage-form frame starting with `toc` takes, the byte itself included: its
/// mode's bits rounded up, 6 for SID, and 1 for no data (type 15) and the reserved types,
/// as FFmpeg reads them.
pub(crate) fn frame_len(toc: u8) -> usize {
    1 + tables::FRAME_BYTES
        .get(frame_type(toc))
        .map_or(0, |&b| usize::from(b))
}

/// A decoder of AMR-NB packets, each of one or more storage-form frames.
pub(crate) struct AmrDecoder {
    params: CodecParameters,
    channel: Box<nb::Channel>,
    buf: symphonia::core::audio::AudioBuffer<f32>,
}

impl AmrDecoder {
    fn decode_frames(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        while let Some(&toc) = data.first() {
            let len = frame_len(toc);
            let Some(frame) = data.get(..len) else {
                return decode_error("amr: a frame cut short");
            };
            data = &data[len..];
            make_room(&mut self.buf, RATE, Channels::FRONT_CENTRE, FRAME, FRAME)?;
            let at = self.buf.frames();
            self.buf.render_reserved(Some(FRAME));
            let out: &mut [f32; FRAME] = (&mut self.buf.chan_mut(0)[at..at + FRAME])
                .try_into()
                .expect("a frame");
            match MODES.get(frame_type(toc)) {
                Some(&mode) => {
                    let params = nb::unpack(mode, &frame[1..]);
                    if let Err(why) = self.channel.decode(mode, &params, out) {
                        out.fill(0.0);
                        return decode_error(match why {
                            nb::Corrupt::ZeroLag => "amr: a pitch lag of 0",
                            nb::Corrupt::LongLag => "amr: a pitch lag beyond 145",
                        });
                    }
                }
                // SID, no data, or a reserved type: silence, for the time it stands for.
                None => out.fill(0.0),
            }
        }
        Ok(())
    }
}

impl Decoder for AmrDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let mut mono = params.clone();
        mono.with_sample_rate(RATE)
            .with_channels(Channels::FRONT_CENTRE);
        let buf = first_buffer(&mono, CODEC_TYPE_AMRNB, "amr: not AMR-NB", FRAME)?;
        Ok(Self {
            params: params.clone(),
            channel: Box::new(nb::Channel::new()),
            buf,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            CODEC_TYPE_AMRNB,
            "amrnb",
            "AMR-NB (Adaptive Multi-Rate narrowband)"
        )]
    }

    fn reset(&mut self) {
        *self.channel = nb::Channel::new();
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frames(&p.data));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The samples `packets` decode to, in order.
    fn decode_all<'a>(packets: impl Iterator<Item = &'a [u8]>) -> Vec<f32> {
        use symphonia::core::audio::AudioBufferRef;
        let mut params = CodecParameters::new();
        params.for_codec(CODEC_TYPE_AMRNB);
        let mut dec = AmrDecoder::try_new(&params, &DecoderOptions::default()).unwrap();
        let mut out = Vec::new();
        for p in packets {
            let packet = symphonia::core::formats::Packet::new_from_slice(0, 0, 0, p);
            match dec.decode(&packet).unwrap() {
                AudioBufferRef::F32(b) => out.extend_from_slice(b.chan(0)),
                _ => unreachable!("AMR decodes to f32"),
            }
        }
        out
    }

    /// 3GP samples may hold several frames: they decode as those frames one by one.
    #[test]
    fn a_packet_of_several_frames_decodes_as_its_frames() {
        let file = include_bytes!("../../tests/fixtures/speech.amr");
        let mut frames = Vec::new();
        let mut rest = &file[MAGIC.len()..];
        while let Some(&toc) = rest.first() {
            let (frame, next) = rest.split_at(frame_len(toc));
            frames.push(frame);
            rest = next;
        }
        let one_by_one = decode_all(frames.iter().copied());
        let joined: Vec<Vec<u8>> = frames.chunks(7).map(|c| c.concat()).collect();
        let together = decode_all(joined.iter().map(|p| &p[..]));
        assert_eq!(one_by_one.len(), 200 * FRAME);
        assert!(one_by_one == together);
    }

    /// Random bits in every frame type (pitch lags and indices no encoder makes included)
    /// decode to finite samples, or to an error for that packet: never a panic.
    #[test]
    fn random_frames_decode_to_finite_samples_or_an_error() {
        use symphonia::core::audio::AudioBufferRef;
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut params = CodecParameters::new();
        params.for_codec(CODEC_TYPE_AMRNB);
        let mut dec = AmrDecoder::try_new(&params, &DecoderOptions::default()).unwrap();
        let mut errors = 0;
        for i in 0..4000 {
            let toc = ((i % 16) as u8) << 3 | 4;
            let mut frame: Vec<u8> = (0..frame_len(toc)).map(|_| next() as u8).collect();
            frame[0] = toc;
            let packet = symphonia::core::formats::Packet::new_from_slice(0, 0, 0, &frame);
            match dec.decode(&packet) {
                Ok(AudioBufferRef::F32(b)) => {
                    assert_eq!(b.frames(), FRAME);
                    assert!(b.chan(0).iter().all(|s| s.is_finite()), "frame {i}");
                }
                Ok(_) => unreachable!("AMR decodes to f32"),
                Err(_) => errors += 1,
            }
        }
        assert!(errors < 400, "{errors} errors");
    }

    #[test]
    fn frame_lengths_are_rfc_4867s() {
        let lens: Vec<usize> = (0..16u8).map(|ft| frame_len(ft << 3 | 4)).collect();
        assert_eq!(
            lens,
            [13, 14, 16, 18, 20, 21, 27, 32, 6, 1, 1, 1, 1, 1, 1, 1]
        );
    }

    #[test]
    fn every_order_table_reads_each_payload_bit_once() {
        // TS 26.101 table 1a: 95, 103, 118, 134, 148, 159, 204 and 244 bits.
        let bits = [95, 103, 118, 134, 148, 159, 204, 244];
        for (m, table) in tables::BIT_ORDER.iter().enumerate() {
            // The tables count bits from each byte's least significant.
            let mut seen: Vec<usize> = table
                .iter()
                .flat_map(|(_, b)| b.iter().map(|&b| usize::from(b & !7 | (7 - (b & 7)))))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..bits[m]).collect::<Vec<_>>(), "mode {m}");
            assert!(bits[m].div_ceil(8) == usize::from(tables::FRAME_BYTES[m]));
        }
    }
}
