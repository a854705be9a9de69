//! Apple's IMA 4:1 ADPCM (`ima4`: iOS apps' recordings in CAF, older Macs' AIFF-C and
//! QuickTime files), which symphonia takes for WAV's IMA ADPCM in CAF (and fails on, its
//! blocks being other) and does not read in AIFF-C. Each channel's 64 samples a packet
//! come in a 34-byte block: the predictor's top 9 bits and the step index, then 32 bytes
//! of 4-bit codes, low nibble first. FFmpeg's decoder (`adpcm_ima_qt`), so its samples.

use symphonia::core::audio::{AudioBuffer, Signal, SignalSpec};
use symphonia::core::codecs::{decl_codec_type, CodecDescriptor, CodecParameters, CodecType};
use symphonia::core::codecs::{Decoder, DecoderOptions};
use symphonia::core::errors::{decode_error, unsupported_error, Result};
use symphonia::core::support_codec;

pub(crate) const CODEC_TYPE_IMA_QT: CodecType = decl_codec_type(b"ima4");

/// A channel's block, and the samples it holds.
pub(crate) const BLOCK: usize = 34;
pub(crate) const SAMPLES: usize = 64;

const INDEX: [i32; 16] = [-1, -1, -1, -1, 2, 4, 6, 8, -1, -1, -1, -1, 2, 4, 6, 8];
/// IMA ADPCM's step sizes (Flash's ADPCM uses them too).
pub(crate) const STEP: [i32; 89] = [
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66,
    73, 80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449,
    494, 544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272,
    2499, 2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493,
    10442, 11487, 12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767,
];

/// One channel's predictor and step index, kept from block to block.
#[derive(Clone, Copy, Default)]
struct Status {
    predictor: i32,
    step_index: i32,
}

impl Status {
    fn nibble(&mut self, nibble: u8) -> i16 {
        let step = STEP[self.step_index as usize];
        let step_index = (self.step_index + INDEX[usize::from(nibble)]).clamp(0, 88);
        let mut diff = step >> 3;
        if nibble & 4 != 0 {
            diff += step;
        }
        if nibble & 2 != 0 {
            diff += step >> 1;
        }
        if nibble & 1 != 0 {
            diff += step >> 2;
        }
        let predictor = match nibble & 8 != 0 {
            true => self.predictor - diff,
            false => self.predictor + diff,
        };
        self.predictor = predictor.clamp(i32::from(i16::MIN), i32::from(i16::MAX));
        self.step_index = step_index;
        self.predictor as i16
    }

    /// A block's samples into `out`; an error for a step index past the table.
    fn block(&mut self, block: &[u8], out: &mut [f32]) -> Result<()> {
        let header = i32::from(i16::from_be_bytes([block[0], block[1]]));
        let (predictor, step_index) = (header & !0x7F, header & 0x7F);
        // The block's predictor is kept unless it is far from where the last block left it
        // (a stream's first block, or a new step index, sets it).
        if self.step_index != step_index || (predictor - self.predictor).abs() > 0x7F {
            self.step_index = step_index;
            self.predictor = predictor;
        }
        if self.step_index > 88 {
            return decode_error("ima4: a step index past 88");
        }
        for (m, &byte) in block[2..BLOCK].iter().enumerate() {
            out[2 * m] = f32::from(self.nibble(byte & 0x0F)) / 32768.0;
            out[2 * m + 1] = f32::from(self.nibble(byte >> 4)) / 32768.0;
        }
        Ok(())
    }
}

/// A decoder of `ima4` packets: whole blocks of every channel in turn.
pub(crate) struct ImaQtDecoder {
    params: CodecParameters,
    status: Vec<Status>,
    buf: AudioBuffer<f32>,
}

impl ImaQtDecoder {
    fn decode_blocks(&mut self, data: &[u8]) -> Result<()> {
        let channels = self.status.len();
        let group = BLOCK * channels;
        if !data.len().is_multiple_of(group) {
            return decode_error("ima4: a packet of part of a block");
        }
        let blocks = data.len() / group;
        let spec = *self.buf.spec();
        if self.buf.capacity() < blocks * SAMPLES {
            self.buf = AudioBuffer::new((blocks * SAMPLES) as u64, spec);
        }
        self.buf.clear();
        self.buf.render_reserved(Some(blocks * SAMPLES));
        for (b, group) in data.chunks_exact(group).enumerate() {
            for (c, block) in group.chunks_exact(BLOCK).enumerate() {
                let out = &mut self.buf.chan_mut(c)[b * SAMPLES..(b + 1) * SAMPLES];
                self.status[c].block(block, out)?;
            }
        }
        Ok(())
    }
}

impl Decoder for ImaQtDecoder {
    fn try_new(params: &CodecParameters, _: &DecoderOptions) -> Result<Self> {
        if params.codec != CODEC_TYPE_IMA_QT {
            return unsupported_error("ima4: not Apple's IMA ADPCM");
        }
        let channels = params.channels.filter(|c| c.count() > 0);
        let Some(channels) = channels else {
            return unsupported_error("ima4: no channel count");
        };
        let Some(rate) = params.sample_rate.filter(|&r| r > 0) else {
            return unsupported_error("ima4: no sample rate");
        };
        Ok(Self {
            params: params.clone(),
            status: vec![Status::default(); channels.count()],
            buf: AudioBuffer::new(SAMPLES as u64, SignalSpec::new(rate, channels)),
        })
    }

    fn supported_codecs() -> &'static [CodecDescriptor] {
        &[support_codec!(
            CODEC_TYPE_IMA_QT,
            "adpcm_ima_qt",
            "Apple IMA 4:1 ADPCM"
        )]
    }

    fn reset(&mut self) {
        self.status.fill(Status::default());
    }

    crate::codec::buffered_decoder_methods!(|this, p| this.decode_blocks(&p.data));
}
