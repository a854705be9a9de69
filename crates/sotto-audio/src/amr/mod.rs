//! AMR (Adaptive Multi-Rate), the speech codec of mobile calls, in the `.amr` and `.awb`
//! files that phones' voice recorders and call recorders write and in 3GP/MP4 files
//! (`samr`, `sawb`):
//! - AMR-NB (3GPP TS 26.090; GSM and UMTS calls): 8 kHz, 160 samples a 20 ms frame, eight
//!   modes from 4.75 to 12.2 kbit/s, decoded in `nb.rs`;
//! - AMR-WB (TS 26.190, ITU-T G.722.2; "HD voice", VoLTE): 16 kHz, 320 samples a frame,
//!   nine modes from 6.60 to 23.85 kbit/s, decoded in `wb.rs`.
//!
//! A packet holds frames in RFC 4867's storage form: a table-of-contents byte (frame
//! type in bits 6–3, the quality bit in bit 2), then the frame's bits. Comfort-noise
//! (SID), lost and no-data frames, which a discontinuous transmission leaves in pauses,
//! decode as a frame of silence: FFmpeg drops SID frames (and AMR-NB's no-data ones),
//! which would shorten the recording and move every later word. As FFmpeg's, AMR-WB
//! frames marked bad are silence too.

mod celp;
mod nb;
mod tables;
mod wb;
mod wb_tables;

use symphonia::core::audio::{Channels, Signal};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

use crate::codec::{first_buffer, make_room};

pub(crate) const CODEC_TYPE_AMRNB: CodecType = decl_codec_type(b"samr");
pub(crate) const CODEC_TYPE_AMRWB: CodecType = decl_codec_type(b"sawb");

/// The storage formats' magic (RFC 4867 §5.1), and the multichannel variants' (which
/// sotto does not read).
pub(crate) const MAGIC: &[u8] = b"#!AMR\n";
pub(crate) const MAGIC_WB: &[u8] = b"#!AMR-WB\n";
pub(crate) const MAGIC_MC: [&[u8]; 2] = [b"#!AMR_MC1.0\n", b"#!AMR-WB_MC1.0\n"];

/// AMR-NB's sample rate and frame, and AMR-WB's.
pub(crate) const RATE: u32 = 8_000;
pub(crate) const FRAME: usize = nb::FRAME;
pub(crate) const RATE_WB: u32 = 16_000;
pub(crate) const FRAME_WB: usize = wb::FRAME;

/// An AMR-NB speech frame's mode (TS 26.101 table 1a), by its bit rate.
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

/// Bytes an AMR-NB storage-form frame starting with `toc` takes, the byte itself
/// included: its mode's bits rounded up, 6 for SID, and 1 for no data (type 15) and the
/// reserved types, as FFmpeg reads them.
pub(crate) fn frame_len(toc: u8) -> usize {
    1 + tables::FRAME_BYTES
        .get(frame_type(toc))
        .map_or(0, |&b| usize::from(b))
}

/// [`frame_len`] for AMR-WB.
pub(crate) fn frame_len_wb(toc: u8) -> usize {
    1 + wb::payload_bytes(frame_type(toc))
}

/// One channel's decoder.
enum Channel {
    Nb(Box<nb::Channel>),
    Wb(Box<wb::Channel>),
}

impl Channel {
    fn new(codec: CodecType) -> Self {
        match codec == CODEC_TYPE_AMRWB {
            true => Self::Wb(Box::new(wb::Channel::new())),
            false => Self::Nb(Box::new(nb::Channel::new())),
        }
    }
}

/// A decoder of AMR-NB or AMR-WB packets, each of one or more storage-form frames.
pub(crate) struct AmrDecoder {
    params: CodecParameters,
    channel: Channel,
    buf: symphonia::core::audio::AudioBuffer<f32>,
}

impl AmrDecoder {
    fn decode_frames(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        let (rate, samples) = match self.channel {
            Channel::Nb(_) => (RATE, FRAME),
            Channel::Wb(_) => (RATE_WB, FRAME_WB),
        };
        while let Some(&toc) = data.first() {
            let len = match self.channel {
                Channel::Nb(_) => frame_len(toc),
                Channel::Wb(_) => frame_len_wb(toc),
            };
            let Some(frame) = data.get(..len) else {
                return decode_error("amr: a frame cut short");
            };
            data = &data[len..];
            make_room(
                &mut self.buf,
                rate,
                Channels::FRONT_CENTRE,
                samples,
                samples,
            )?;
            let at = self.buf.frames();
            self.buf.render_reserved(Some(samples));
            let out = &mut self.buf.chan_mut(0)[at..at + samples];
            out.fill(0.0);
            let payload = &frame[1..];
            // SID, lost, no-data and reserved frames stay silence, for the time they
            // stand for.
            let decoded = match &mut self.channel {
                Channel::Nb(ch) => match MODES.get(frame_type(toc)) {
                    Some(&mode) => {
                        let out = out.try_into().expect("a frame");
                        ch.decode(mode, &nb::unpack(mode, payload), out)
                            .map_err(|why| match why {
                                nb::Corrupt::ZeroLag => "amr: a pitch lag of 0",
                                nb::Corrupt::LongLag => "amr: a pitch lag beyond 145",
                            })
                    }
                    None => Ok(()),
                },
                Channel::Wb(ch) => match wb::MODES.get(frame_type(toc)) {
                    // The quality bit: FFmpeg mutes a frame marked bad.
                    Some(&mode) if toc & 4 != 0 => {
                        let out = out.try_into().expect("a frame");
                        ch.decode(mode, &wb::unpack(mode, payload), out)
                            .map_err(|wb::LongLag| "amr-wb: a pitch lag beyond 233")
                    }
                    _ => Ok(()),
                },
            };
            if let Err(why) = decoded {
                self.buf.chan_mut(0)[at..at + samples].fill(0.0);
                return decode_error(why);
            }
        }
        Ok(())
    }
}

impl Decoder for AmrDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        let (rate, frame) = match params.codec == CODEC_TYPE_AMRWB {
            true => (RATE_WB, FRAME_WB),
            false => (RATE, FRAME),
        };
        if params.codec != CODEC_TYPE_AMRNB && params.codec != CODEC_TYPE_AMRWB {
            return unsupported_error("amr: not AMR");
        }
        let mut mono = params.clone();
        mono.with_sample_rate(rate)
            .with_channels(Channels::FRONT_CENTRE);
        let buf = first_buffer(&mono, params.codec, "amr: not AMR", frame)?;
        Ok(Self {
            params: params.clone(),
            channel: Channel::new(params.codec),
            buf,
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[
            support_codec!(
                CODEC_TYPE_AMRNB,
                "amrnb",
                "AMR-NB (Adaptive Multi-Rate narrowband)"
            ),
            support_codec!(
                CODEC_TYPE_AMRWB,
                "amrwb",
                "AMR-WB (Adaptive Multi-Rate wideband)"
            ),
        ]
    }

    fn reset(&mut self) {
        self.channel = Channel::new(self.params.codec);
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_frames(&p.data));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The samples `packets` of AMR-NB decode to, in order.
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

    /// Random bits in every frame type of both codecs (pitch lags and indices no encoder
    /// makes included) decode to finite samples, or to an error for that packet: never a
    /// panic.
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
        for (codec, len, samples) in [
            (CODEC_TYPE_AMRNB, frame_len as fn(u8) -> usize, FRAME),
            (CODEC_TYPE_AMRWB, frame_len_wb, FRAME_WB),
        ] {
            let mut params = CodecParameters::new();
            params.for_codec(codec);
            let mut dec = AmrDecoder::try_new(&params, &DecoderOptions::default()).unwrap();
            let mut errors = 0;
            for i in 0..3000 {
                let toc = ((i % 16) as u8) << 3 | 4;
                let mut frame: Vec<u8> = (0..len(toc)).map(|_| next() as u8).collect();
                frame[0] = toc;
                let packet = symphonia::core::formats::Packet::new_from_slice(0, 0, 0, &frame);
                match dec.decode(&packet) {
                    Ok(AudioBufferRef::F32(b)) => {
                        assert_eq!(b.frames(), samples);
                        assert!(b.chan(0).iter().all(|s| s.is_finite()), "frame {i}");
                    }
                    Ok(_) => unreachable!("AMR decodes to f32"),
                    Err(_) => errors += 1,
                }
            }
            assert!(errors < 300, "{errors} errors");
        }
    }

    #[test]
    fn frame_lengths_are_rfc_4867s() {
        let lens = |len: fn(u8) -> usize| (0..16u8).map(|ft| len(ft << 3 | 4)).collect::<Vec<_>>();
        let nb = [13, 14, 16, 18, 20, 21, 27, 32, 6, 1, 1, 1, 1, 1, 1, 1];
        let wb = [18, 24, 33, 37, 41, 47, 51, 59, 61, 6, 1, 1, 1, 1, 1, 1];
        assert_eq!(
            (lens(frame_len), lens(frame_len_wb)),
            (nb.to_vec(), wb.to_vec())
        );
    }

    /// The payload bit positions a bit-order table reads, in stream order (the tables
    /// count bits from each byte's least significant), sorted.
    fn bits_read<B: Copy + Into<usize>>(table: &[(u8, &[B])]) -> Vec<usize> {
        let mut seen: Vec<usize> = table
            .iter()
            .flat_map(|(_, b)| b.iter().map(|&b| b.into()))
            .map(|b| b & !7 | (7 - (b & 7)))
            .collect();
        seen.sort_unstable();
        seen
    }

    #[test]
    fn every_order_table_reads_each_payload_bit_once() {
        // TS 26.101 and TS 26.201 table 1a: 95 to 244 bits, and 132 to 477.
        let nb = [95, 103, 118, 134, 148, 159, 204, 244];
        for (m, table) in tables::BIT_ORDER.iter().enumerate() {
            assert_eq!(bits_read(table), (0..nb[m]).collect::<Vec<_>>(), "mode {m}");
            assert!(nb[m].div_ceil(8) == usize::from(tables::FRAME_BYTES[m]));
        }
        let wb = [132, 177, 253, 285, 317, 365, 397, 461, 477];
        for (m, table) in wb_tables::BIT_ORDER.iter().enumerate() {
            assert_eq!(
                bits_read(table),
                (0..wb[m]).collect::<Vec<_>>(),
                "wideband {m}"
            );
        }
    }
}
