//! whisper.cpp's stereo diarization (`--diarize`): a stretch of a two-channel recording
//! belongs to the speaker whose channel is louder there, as in a call or an interview
//! recorded with one microphone per person.

/// Who speaks in a stretch of stereo audio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Speaker {
    /// The first channel is louder by more than 10%.
    Left,
    /// The second channel is louder by more than 10%.
    Right,
    /// Neither is.
    Unknown,
}

impl Speaker {
    /// whisper.cpp's id: `0`, `1` or `?`.
    pub fn id(self) -> &'static str {
        match self {
            Speaker::Left => "0",
            Speaker::Right => "1",
            Speaker::Unknown => "?",
        }
    }

    /// whisper.cpp's label before a segment's text: `(speaker 0)`.
    pub fn label(self) -> String {
        format!("(speaker {})", self.id())
    }
}

/// The speaker of `[start, end)` seconds of 16 kHz `channels`, as whisper.cpp's
/// `estimate_diarization_speaker`: the sums of absolute samples of each channel over the
/// stretch (its times taken at 10 ms, as whisper.cpp's segments have them), one winning
/// where it is more than 1.1 times the other.
pub fn speaker(channels: &[Vec<f32>; 2], start: f64, end: f64) -> Speaker {
    let n = channels[0].len().min(channels[1].len());
    // whisper.cpp: centiseconds to a sample index, clamped to the last sample.
    let index = |t: f64| {
        let cs = (t * 100.0).round().max(0.0) as usize;
        (cs.saturating_mul(160)).min(n.saturating_sub(1))
    };
    let (a, b) = (index(start), index(end));
    let energy = |c: &[f32]| -> f64 { c[a.min(b)..b].iter().map(|&v| f64::from(v.abs())).sum() };
    let (e0, e1) = (energy(&channels[0]), energy(&channels[1]));
    if e0 > 1.1 * e1 {
        Speaker::Left
    } else if e1 > 1.1 * e0 {
        Speaker::Right
    } else {
        Speaker::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_louder_channel_speaks() {
        let n = 16000 * 3;
        let mut left = vec![0.01f32; n];
        let mut right = vec![0.01f32; n];
        // 0-1 s: left talks; 1-2 s: right talks; 2-3 s: both.
        left[..16000].fill(0.5);
        right[16000..32000].fill(-0.5);
        left[32000..].fill(0.3);
        right[32000..].fill(0.31);
        let ch = [left, right];
        assert_eq!(speaker(&ch, 0.0, 1.0), Speaker::Left);
        assert_eq!(speaker(&ch, 1.0, 2.0), Speaker::Right);
        assert_eq!(speaker(&ch, 2.0, 3.0), Speaker::Unknown);
        // Past the end, reversed or empty: nothing to compare.
        assert_eq!(speaker(&ch, 5.0, 9.0), Speaker::Unknown);
        assert_eq!(speaker(&ch, 2.0, 1.0), Speaker::Unknown);
        assert_eq!(speaker(&[vec![], vec![]], 0.0, 1.0), Speaker::Unknown);
        assert_eq!(Speaker::Right.label(), "(speaker 1)");
    }
}
