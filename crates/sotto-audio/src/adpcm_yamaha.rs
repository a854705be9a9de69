//! Yamaha's ADPCM (WAV format 0x0020: Yamaha's sound chips and the ringtones and
//! recordings of the phones that carried them): a 4-bit code a sample, the low nibble of
//! each byte first (in stereo, the left channel's), a step that scales with each code. As
//! FFmpeg's `adpcm_yamaha` decodes it, so its samples are FFmpeg's.

use crate::codec::BlockDecode;

/// Its WAV format tag.
pub(crate) const WAV_TAG: u16 = 0x0020;

/// Each code's difference, in eighths of the step, and how it scales the step (/256).
const DIFF: [i32; 16] = [1, 3, 5, 7, 9, 11, 13, 15, -1, -3, -5, -7, -9, -11, -13, -15];
const SCALE: [i32; 16] = [
    230, 230, 230, 230, 307, 409, 512, 614, 230, 230, 230, 230, 307, 409, 512, 614,
];

/// A channel's predictor and step.
#[derive(Clone, Copy)]
struct Channel {
    predictor: i32,
    step: i32,
}

impl Channel {
    fn expand(&mut self, code: u8) -> i16 {
        let code = usize::from(code & 0xF);
        self.predictor = (self.predictor + self.step * DIFF[code] / 8)
            .clamp(i32::from(i16::MIN), i32::from(i16::MAX));
        self.step = ((self.step * SCALE[code]) >> 8).clamp(127, 24_576);
        self.predictor as i16
    }
}

/// The decoder of one or two channels.
pub(crate) struct Yamaha {
    channels: [Channel; 2],
    stereo: bool,
}

impl Yamaha {
    pub(crate) fn new(stereo: bool) -> Self {
        let start = Channel {
            predictor: 0,
            step: 127,
        };
        Self {
            channels: [start; 2],
            stereo,
        }
    }
}

impl BlockDecode for Yamaha {
    const PARTIAL: bool = true;
    type Sample = i16;

    fn block(&self) -> usize {
        1
    }

    fn samples_per_block(&self) -> usize {
        2
    }

    fn channels(&self) -> u16 {
        1 + u16::from(self.stereo)
    }

    fn decode(&mut self, block: &[u8], out: &mut Vec<i16>) {
        let right = usize::from(self.stereo);
        for &b in block {
            out.push(self.channels[0].expand(b & 0xF));
            out.push(self.channels[right].expand(b >> 4));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_grow_with_large_codes_and_stay_within_bounds() {
        let mut y = Yamaha::new(false);
        let mut out = Vec::new();
        // Code 7 (+15/8 of the step, step × 614/256) again and again: the predictor climbs
        // to the top, the step to its bound.
        y.decode(&[0x77; 16], &mut out);
        assert_eq!(out[0], 127 * 15 / 8);
        assert_eq!(*out.last().unwrap(), i16::MAX);
        assert_eq!(y.channels[0].step, 24_576);
    }
}
