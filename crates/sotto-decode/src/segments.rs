//! From one window's decoded tokens to segments: cutting at timestamps (faster-whisper's
//! `_split_segments_by_timestamps`), spotting likely hallucinations around silences (its
//! `hallucination_silence_threshold` rules), and splitting long segments on word boundaries
//! (whisper.cpp's `max_len` with `split_on_word`, and a token cap).

use crate::align::Word;
use crate::tokenizer::Tokenizer;

/// Seconds per timestamp step.
const TIME_PRECISION: f64 = 0.02;
/// Mel frames per timestamp step (the encoder's second convolution has stride 2).
const INPUT_STRIDE: usize = 2;

/// A segment cut from a window's tokens, before its text is checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cut {
    pub start: f64,
    pub end: f64,
    pub tokens: Vec<u32>,
    /// Log-probability of each of `tokens` as decoded.
    pub logprobs: Vec<f32>,
    /// Filled by word alignment.
    pub words: Vec<Word>,
}

/// faster-whisper's `_split_segments_by_timestamps`: cuts `tokens` (with their `logprobs`) at
/// consecutive timestamps and returns the segments, the next seek and whether the tokens end
/// on a single timestamp.
pub(crate) fn split_by_timestamps(
    tok: &Tokenizer,
    tokens: &[u32],
    logprobs: &[f32],
    time_offset: f64,
    segment_size: usize,
    segment_duration: f64,
    seek: usize,
) -> (Vec<Cut>, usize, bool) {
    let tb = tok.timestamp_begin();
    let is_ts = |t: u32| t >= tb;
    let pos = |t: u32| t.saturating_sub(tb) as usize;
    let lp = |r: std::ops::Range<usize>| {
        logprobs
            .get(r.clone())
            .map_or_else(|| vec![0.0; r.len()], <[f32]>::to_vec)
    };
    let n = tokens.len();
    let single_ending = n >= 2 && !is_ts(tokens[n - 2]) && is_ts(tokens[n - 1]);
    let mut slices: Vec<usize> = (1..n)
        .filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1]))
        .collect();
    if slices.is_empty() {
        let duration = match tokens.iter().rev().find(|&&t| is_ts(t)) {
            Some(&last) if last != tb => pos(last) as f64 * TIME_PRECISION,
            _ => segment_duration,
        };
        let cut = Cut {
            start: time_offset,
            end: time_offset + duration,
            tokens: tokens.to_vec(),
            logprobs: lp(0..n),
            words: Vec::new(),
        };
        return (vec![cut], seek + segment_size, single_ending);
    }
    if single_ending {
        slices.push(n);
    }
    let mut cuts = Vec::with_capacity(slices.len());
    let mut last = 0;
    for &s in &slices {
        let t = &tokens[last..s];
        let start = time_offset + pos(t[0]) as f64 * TIME_PRECISION;
        let end = time_offset + pos(t[t.len() - 1]) as f64 * TIME_PRECISION;
        cuts.push(Cut {
            start,
            end,
            tokens: t.to_vec(),
            logprobs: lp(last..s),
            words: Vec::new(),
        });
        last = s;
    }
    let seek = if single_ending {
        // No speech after the last timestamp.
        seek + segment_size
    } else {
        // Drop the unfinished segment; resume at the last timestamp.
        seek + pos(tokens[last - 1]) * INPUT_STRIDE
    };
    (cuts, seek, single_ending)
}

/// Words made only of these characters do not count toward a segment's anomaly
/// (faster-whisper's `punctuation` in `generate_segments`; the test is Python's substring
/// `in`, so an empty word is skipped too).
const ANOMALY_PUNCTUATION: &str = "\"'“¿([{-\"'.。,，!！?？:：”)]}、";

/// faster-whisper's `word_anomaly_score`: improbable, very short or very long words.
fn word_anomaly_score(w: &Word) -> f64 {
    let duration = w.end - w.start;
    let mut score = 0.0;
    if w.probability < 0.15 {
        score += 1.0;
    }
    if duration < 0.133 {
        score += (0.133 - duration) * 15.0;
    }
    if duration > 2.0 {
        score += duration - 2.0;
    }
    score
}

/// faster-whisper's `is_segment_anomaly`, over the first 8 words that are not punctuation.
pub(crate) fn is_segment_anomaly(cut: Option<&Cut>) -> bool {
    let Some(cut) = cut.filter(|c| !c.words.is_empty()) else {
        return false;
    };
    let words: Vec<&Word> = cut
        .words
        .iter()
        .filter(|w| !ANOMALY_PUNCTUATION.contains(w.word.as_str()))
        .take(8)
        .collect();
    let score: f64 = words.iter().map(|w| word_anomaly_score(w)).sum();
    score >= 3.0 || score + 0.01 >= words.len() as f64
}

/// The first cut that has words (faster-whisper's `next_words_segment`).
pub(crate) fn next_words_segment(cuts: &[Cut]) -> Option<&Cut> {
    cuts.iter().find(|c| !c.words.is_empty())
}

/// Where a window stands, for the hallucination rules.
pub(crate) struct WindowSpan {
    /// Seconds at which the window starts.
    pub time_offset: f64,
    /// Seconds of audio in the window.
    pub duration: f64,
    /// `time_offset` plus a full 30 s.
    pub end_time: f64,
    /// Seconds of content in the whole audio.
    pub content_duration: f64,
    /// Its first frame.
    pub seek: usize,
    /// Frames of content in the whole audio.
    pub content_frames: usize,
}

/// What the hallucination rules decided for a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Hallucination {
    /// Nothing suspicious before silence: keep the cuts (some may have been dropped).
    Keep,
    /// The window starts with silence then a likely hallucination: emit nothing and decode
    /// again from this frame.
    SkipTo(usize),
}

/// faster-whisper's "skip silence before possible hallucinations" (`generate_segments` with
/// `hallucination_silence_threshold`, run after word alignment). May truncate `cuts` and move
/// `seek`.
pub(crate) fn skip_hallucinations(
    cuts: &mut Vec<Cut>,
    seek: &mut usize,
    span: &WindowSpan,
    threshold: f64,
    last_speech_timestamp: f64,
) -> Hallucination {
    let frames = |t: f64| (t * 100.0).round_ties_even().max(0.0) as usize;
    if let Some(first) = next_words_segment(cuts).filter(|c| is_segment_anomaly(Some(c))) {
        let gap = first.start - span.time_offset;
        if gap > threshold {
            // Always move forward, even where rounding would not.
            return Hallucination::SkipTo((span.seek + frames(gap)).max(span.seek + 1));
        }
    }
    let mut hal_last_end = last_speech_timestamp;
    for si in 0..cuts.len() {
        if cuts[si].words.is_empty() {
            continue;
        }
        if is_segment_anomaly(Some(&cuts[si])) {
            let next = next_words_segment(&cuts[si + 1..]);
            let hal_next_start =
                next.map_or(span.time_offset + span.duration, |n| n.words[0].start);
            let seg = &cuts[si];
            let silence_before = seg.start - hal_last_end > threshold
                || seg.start < threshold
                || seg.start - span.time_offset < 2.0;
            let silence_after = hal_next_start - seg.end > threshold
                || is_segment_anomaly(next)
                || span.end_time - seg.end < 2.0;
            if silence_before && silence_after {
                *seek = frames((span.time_offset + 1.0).max(seg.start));
                if span.content_duration - seg.end < threshold {
                    *seek = span.content_frames;
                }
                cuts.truncate(si);
                break;
            }
        }
        hal_last_end = cuts[si].end;
    }
    Hallucination::Keep
}

/// Limits on a segment's length; the text is split between words to respect them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SegmentLimits {
    /// Characters of text, its leading space not counted.
    pub max_chars: Option<usize>,
    /// Text tokens.
    pub max_tokens: Option<usize>,
}

impl SegmentLimits {
    pub fn is_set(&self) -> bool {
        self.max_chars.is_some() || self.max_tokens.is_some()
    }

    fn exceeded(&self, chars: usize, tokens: usize) -> bool {
        self.max_chars.is_some_and(|m| chars > m) || self.max_tokens.is_some_and(|m| tokens > m)
    }
}

/// Splits a timed cut into pieces within `limits`, between words: each piece holds as many
/// whole words as fit (at least one, so a word longer than the limit stands alone). Pieces
/// keep the words' tokens (timestamps dropped) and log-probabilities; inner bounds are word
/// times, the outer ones the cut's. None when the cut fits, has no words, or its words do
/// not account for its text tokens.
pub(crate) fn split_cut(tok: &Tokenizer, cut: &Cut, limits: SegmentLimits) -> Option<Vec<Cut>> {
    if !limits.is_set() || cut.words.len() < 2 {
        return None;
    }
    let eot = tok.eot();
    let text: Vec<(u32, f32)> = cut
        .tokens
        .iter()
        .zip(&cut.logprobs)
        .filter(|(&t, _)| t < eot)
        .map(|(&t, &l)| (t, l))
        .collect();
    let from_words = cut.words.iter().flat_map(|w| w.tokens.iter().copied());
    if !from_words.eq(text.iter().map(|&(t, _)| t)) {
        return None;
    }
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let (mut begin, mut chars, mut tokens) = (0, 0, 0);
    for (i, w) in cut.words.iter().enumerate() {
        let (c, t) = (w.word.chars().count(), w.tokens.len());
        if i > begin && limits.exceeded(chars + c, tokens + t) {
            groups.push(begin..i);
            begin = i;
            chars = w.word.trim_start().chars().count();
            tokens = t;
        } else if i == begin {
            chars = w.word.trim_start().chars().count();
            tokens = t;
        } else {
            chars += c;
            tokens += t;
        }
    }
    groups.push(begin..cut.words.len());
    if groups.len() == 1 {
        return None;
    }
    let last = groups.len() - 1;
    let mut at = 0;
    let pieces = groups
        .into_iter()
        .enumerate()
        .map(|(g, range)| {
            let words = cut.words[range].to_vec();
            let n: usize = words.iter().map(|w| w.tokens.len()).sum();
            let (tokens, logprobs) = text[at..at + n].iter().copied().unzip();
            at += n;
            Cut {
                start: if g == 0 { cut.start } else { words[0].start },
                end: if g == last {
                    cut.end
                } else {
                    words[words.len() - 1].end
                },
                tokens,
                logprobs,
                words,
            }
        })
        .collect();
    Some(pieces)
}

#[cfg(test)]
#[path = "segments_tests.rs"]
mod tests;
