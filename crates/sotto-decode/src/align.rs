//! Word-level timestamps as faster-whisper 1.2.1 computes them (transcribe.py:
//! `find_alignment`, `add_word_timestamps`, `merge_punctuations`) over CTranslate2's
//! `Whisper.align`: the cross-attention of the alignment heads, softmaxed over the window's
//! audio frames, standardised per head over the tokens, median-filtered (width 7) along
//! time and averaged over the heads, is aligned to the text by dynamic time warping.

use crate::inference::Inference;
use crate::segments::Cut;
use crate::tokenizer::Tokenizer;
use crate::{DecodeError, Result};

/// faster-whisper's `find_alignment(median_filter_width=7)`.
pub const MEDIAN_FILTER_WIDTH: usize = 7;
/// faster-whisper's `prepend_punctuations` default.
pub const PREPEND_PUNCTUATIONS: &str = "\"'“¿([{-";
/// faster-whisper's `append_punctuations` default.
pub const APPEND_PUNCTUATIONS: &str = "\"'.。,，!！?？:：”)]}、";
/// Encoder positions per second (16000 / 320).
const TOKENS_PER_SECOND: f64 = 50.0;
/// Python's `string.punctuation`.
const PUNCTUATION: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
const SENTENCE_END_MARKS: &str = ".。!！?？";
/// Languages split into words at code-point boundaries rather than spaces.
const NO_SPACE_LANGUAGES: [&str; 6] = ["zh", "ja", "th", "lo", "my", "yue"];

/// One timed word of a segment (faster-whisper's `Word`).
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    /// Seconds from the start of the audio, to 10 ms.
    pub start: f64,
    /// Seconds from the start of the audio, to 10 ms.
    pub end: f64,
    /// Its text, leading space and merged punctuation included.
    pub word: String,
    /// Mean probability of its tokens (softmax over the text tokens).
    pub probability: f64,
    /// Its tokens (those of merged punctuation included): `decode(tokens) == word`.
    pub tokens: Vec<u32>,
    /// Where the alignment has each of `tokens` begin, seconds from the start of the audio,
    /// to 10 ms (whisper.cpp's `t_dtw`); the boundary rules that move `start` and `end`
    /// leave these as the alignment found them.
    pub token_times: Vec<f64>,
}

/// The cross-attention heads that follow word timing in openai-whisper's released models
/// (its `_ALIGNMENT_HEADS`, decoded), by model name.
const KNOWN_HEADS: [(&str, &[(usize, usize)]); 11] = [
    (
        "tiny.en",
        &[
            (1, 0),
            (2, 0),
            (2, 5),
            (3, 0),
            (3, 1),
            (3, 2),
            (3, 3),
            (3, 4),
        ],
    ),
    ("tiny", &[(2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)]),
    ("base.en", &[(3, 3), (4, 7), (5, 1), (5, 5), (5, 7)]),
    (
        "base",
        &[
            (3, 1),
            (4, 2),
            (4, 3),
            (4, 7),
            (5, 1),
            (5, 2),
            (5, 4),
            (5, 6),
        ],
    ),
    (
        "small.en",
        &[
            (6, 6),
            (7, 0),
            (7, 3),
            (7, 8),
            (8, 2),
            (8, 5),
            (8, 7),
            (9, 0),
            (9, 4),
            (9, 8),
            (9, 10),
            (10, 0),
            (10, 1),
            (10, 2),
            (10, 3),
            (10, 6),
            (10, 11),
            (11, 2),
            (11, 4),
        ],
    ),
    (
        "small",
        &[
            (5, 3),
            (5, 9),
            (8, 0),
            (8, 4),
            (8, 7),
            (8, 8),
            (9, 0),
            (9, 7),
            (9, 9),
            (10, 5),
        ],
    ),
    (
        "medium.en",
        &[
            (11, 4),
            (14, 1),
            (14, 12),
            (14, 14),
            (15, 4),
            (16, 0),
            (16, 4),
            (16, 9),
            (17, 12),
            (17, 14),
            (18, 7),
            (18, 10),
            (18, 15),
            (20, 0),
            (20, 3),
            (20, 9),
            (20, 14),
            (21, 12),
        ],
    ),
    (
        "medium",
        &[(13, 15), (15, 4), (15, 15), (16, 1), (20, 0), (23, 4)],
    ),
    (
        "large-v1",
        &[
            (9, 19),
            (11, 2),
            (11, 4),
            (11, 17),
            (22, 7),
            (22, 11),
            (22, 17),
            (23, 2),
            (23, 15),
        ],
    ),
    (
        "large-v2",
        &[
            (10, 12),
            (13, 17),
            (16, 11),
            (16, 12),
            (16, 13),
            (17, 15),
            (17, 16),
            (18, 4),
            (18, 11),
            (18, 19),
            (19, 11),
            (21, 2),
            (21, 3),
            (22, 3),
            (22, 9),
            (22, 12),
            (23, 5),
            (23, 7),
            (23, 13),
            (25, 5),
            (26, 1),
            (26, 12),
            (27, 15),
        ],
    ),
    (
        "large-v3",
        &[
            (7, 0),
            (10, 17),
            (12, 18),
            (13, 12),
            (16, 1),
            (17, 14),
            (19, 11),
            (21, 4),
            (24, 1),
            (25, 6),
        ],
    ),
];

/// The alignment heads of a model without them in its files: openai-whisper's set for the
/// released size its shape matches (`name_hint`, e.g. the folder name, tells large-v1 from
/// large-v2), else every head of the second half of the decoder layers, as openai does.
pub fn default_alignment_heads(
    n_text_layer: usize,
    n_text_head: usize,
    n_mels: usize,
    multilingual: bool,
    name_hint: &str,
) -> Vec<(usize, usize)> {
    let sized = |base: &str| {
        if multilingual {
            base.to_string()
        } else {
            format!("{base}.en")
        }
    };
    let name = match (n_text_layer, n_text_head) {
        (4, 6) => Some(sized("tiny")),
        (6, 8) => Some(sized("base")),
        (12, 12) => Some(sized("small")),
        (24, 16) => Some(sized("medium")),
        (32, 20) if n_mels == 128 => Some("large-v3".into()),
        (32, 20) if name_hint.contains("v1") => Some("large-v1".into()),
        (32, 20) => Some("large-v2".into()),
        _ => None,
    };
    if let Some((_, heads)) = name.and_then(|n| KNOWN_HEADS.iter().find(|(k, _)| *k == n)) {
        return heads.to_vec();
    }
    (n_text_layer / 2..n_text_layer)
        .flat_map(|l| (0..n_text_head).map(move |h| (l, h)))
        .collect()
}

/// One word of an alignment, times relative to the window (faster-whisper's dict).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WordTiming {
    pub word: String,
    pub tokens: Vec<u32>,
    /// Each token's start, seconds from the window's start.
    pub token_times: Vec<f64>,
    pub start: f64,
    pub end: f64,
    pub probability: f64,
}

/// What word alignment needs besides the model and the window.
pub(crate) struct Aligner<'a> {
    pub tok: &'a Tokenizer,
    pub language: &'a str,
    pub sot_sequence: &'a [u32],
    pub heads: &'a [(usize, usize)],
    pub prepend: &'a str,
    pub append: &'a str,
}

/// The heads' weights made into one alignment matrix: softmax over the first `frames`
/// frames, standardised per head over the tokens, median-filtered along time, averaged
/// over heads. `scores` Shape: [heads, n_tok, ctx]; returns Shape: [n_tok, frames].
fn alignment_matrix(
    scores: &[f32],
    n_heads: usize,
    n_tok: usize,
    ctx: usize,
    frames: usize,
) -> Vec<f32> {
    let mut mean = vec![0f32; n_tok * frames];
    let mut w = vec![0f32; n_tok * frames];
    let mut filtered = vec![0f32; frames];
    for h in 0..n_heads {
        for (i, row) in w.chunks_exact_mut(frames).enumerate() {
            let src = &scores[(h * n_tok + i) * ctx..][..frames];
            let max = src.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for (o, &s) in row.iter_mut().zip(src) {
                *o = (s - max).exp();
                sum += *o;
            }
            row.iter_mut().for_each(|o| *o /= sum);
        }
        for j in 0..frames {
            let col = || (0..n_tok).map(|i| w[i * frames + j]);
            let mu = col().sum::<f32>() / n_tok as f32;
            let var = col().map(|x| (x - mu) * (x - mu)).sum::<f32>() / n_tok as f32;
            let inv = 1.0 / var.sqrt();
            for i in 0..n_tok {
                w[i * frames + j] = (w[i * frames + j] - mu) * inv;
            }
        }
        for (row, acc) in w.chunks_exact(frames).zip(mean.chunks_exact_mut(frames)) {
            median_filter(row, MEDIAN_FILTER_WIDTH, &mut filtered);
            acc.iter_mut().zip(&filtered).for_each(|(a, f)| *a += f);
        }
    }
    mean.iter_mut().for_each(|a| *a /= n_heads as f32);
    mean
}

/// CTranslate2's `MedianFilter`: reflected edges; rows no longer than half the width pass.
fn median_filter(x: &[f32], width: usize, out: &mut [f32]) {
    let (n, rank) = (x.len(), width / 2);
    if n <= rank {
        out.copy_from_slice(x);
        return;
    }
    let mut window = vec![0f32; width];
    for (j, o) in out.iter_mut().enumerate() {
        for (k, slot) in window.iter_mut().enumerate() {
            let mut read = (j as isize + k as isize - rank as isize).unsigned_abs();
            if read >= n {
                read = (2 * n - 2).saturating_sub(read);
            }
            *slot = x[read];
        }
        window.sort_unstable_by(f32::total_cmp);
        *o = window[rank];
    }
}

/// CTranslate2's `negative_dtw`: the cheapest monotone path through `-x`, as
/// (row, column) pairs from (0, 0) to (n - 1, m - 1). `x` Shape: [n, m].
pub(crate) fn negative_dtw(x: &[f32], n: usize, m: usize) -> Vec<(usize, usize)> {
    let w = m + 1;
    let mut cost = vec![f32::INFINITY; (n + 1) * w];
    let mut trace = vec![0u8; (n + 1) * w];
    cost[0] = 0.0;
    for j in 1..=m {
        for i in 1..=n {
            let (c0, c1, c2) = (
                cost[(i - 1) * w + j - 1],
                cost[(i - 1) * w + j],
                cost[i * w + j - 1],
            );
            let (c, t) = if c0 < c1 && c0 < c2 {
                (c0, 0)
            } else if c1 < c0 && c1 < c2 {
                (c1, 1)
            } else {
                (c2, 2)
            };
            cost[i * w + j] = -x[(i - 1) * m + j - 1] + c;
            trace[i * w + j] = t;
        }
    }
    for t in &mut trace[..w] {
        *t = 2;
    }
    for i in 0..=n {
        trace[i * w] = 1;
    }
    let (mut i, mut j) = (n, m);
    let mut path = Vec::with_capacity(n + m);
    while i > 0 || j > 0 {
        // Row or column 0 is reached only at (0, 0) for finite inputs; saturate anyway.
        path.push((i.saturating_sub(1), j.saturating_sub(1)));
        match trace[i * w + j] {
            0 => (i, j) = (i - 1, j - 1),
            1 => i -= 1,
            _ => j -= 1,
        }
    }
    path.reverse();
    path
}

/// faster-whisper's `Tokenizer.split_tokens_on_unicode`: cuts where the text decoded so far
/// holds no replacement character that the whole text does not also hold.
fn split_on_unicode(tok: &Tokenizer, tokens: &[u32]) -> (Vec<String>, Vec<Vec<u32>>) {
    const REPLACEMENT: char = '\u{fffd}';
    let full: Vec<char> = tok.decode_with_timestamps(tokens).chars().collect();
    let (mut words, mut word_tokens, mut current) = (Vec::new(), Vec::new(), Vec::new());
    let mut offset = 0;
    for &t in tokens {
        current.push(t);
        let decoded = tok.decode_with_timestamps(&current);
        let bad = decoded.chars().position(|c| c == REPLACEMENT);
        if bad.is_none_or(|i| full.get(i + offset) == Some(&REPLACEMENT)) {
            offset += decoded.chars().count();
            words.push(decoded);
            word_tokens.push(std::mem::take(&mut current));
        }
    }
    (words, word_tokens)
}

/// faster-whisper's `Tokenizer.split_to_word_tokens`.
fn split_to_word_tokens(
    tok: &Tokenizer,
    language: &str,
    tokens: &[u32],
) -> (Vec<String>, Vec<Vec<u32>>) {
    let (subwords, subword_tokens) = split_on_unicode(tok, tokens);
    if NO_SPACE_LANGUAGES.contains(&language) {
        return (subwords, subword_tokens);
    }
    let (mut words, mut word_tokens): (Vec<String>, Vec<Vec<u32>>) = (Vec::new(), Vec::new());
    for (sub, toks) in subwords.into_iter().zip(subword_tokens) {
        let special = toks[0] >= tok.eot();
        let with_space = sub.starts_with(' ');
        // Python's `in` on strings: a substring test ("" is in every string).
        let punctuation = PUNCTUATION.contains(sub.trim());
        match (words.last_mut(), word_tokens.last_mut()) {
            (Some(w), Some(wt)) if !(special || with_space || punctuation) => {
                w.push_str(&sub);
                wt.extend(toks);
            }
            _ => {
                words.push(sub);
                word_tokens.push(toks);
            }
        }
    }
    (words, word_tokens)
}

impl Aligner<'_> {
    /// faster-whisper's `find_alignment` for one window: the words of `text_tokens` with
    /// times relative to the window and their mean token probabilities.
    pub fn find_alignment(
        &self,
        inf: &mut dyn Inference,
        text_tokens: &[u32],
        num_frames: usize,
    ) -> Result<Vec<WordTiming>> {
        if text_tokens.is_empty() {
            return Ok(Vec::new());
        }
        if self.heads.is_empty() {
            return Err(DecodeError::InvalidOption {
                name: "alignment_heads",
                reason: "word timestamps need at least one alignment head".into(),
            });
        }
        let tok = self.tok;
        let offset = self.sot_sequence.len();
        let mut seq = self.sot_sequence.to_vec();
        seq.push(tok.no_timestamps());
        seq.extend_from_slice(text_tokens);
        seq.push(tok.eot());
        let (n_tok, n_text, n_vocab) = (seq.len(), text_tokens.len(), tok.n_vocab());
        let rows: Vec<usize> = (offset..offset + n_text).collect();
        let mut logits = vec![0f32; n_text * n_vocab];
        let scores = inf
            .align(&seq, self.heads, &rows, &mut logits)
            .map_err(DecodeError::Inference)?;
        let per_ctx = self.heads.len() * n_tok;
        if scores.is_empty() || scores.len() % per_ctx != 0 {
            return Err(DecodeError::Inference(
                format!(
                    "align returned {} scores for {} heads × {n_tok} tokens",
                    scores.len(),
                    self.heads.len()
                )
                .into(),
            ));
        }
        let ctx = scores.len() / per_ctx;
        let frames = (num_frames / 2).min(ctx);
        if frames == 0 {
            return Ok(Vec::new());
        }
        let matrix = alignment_matrix(&scores, self.heads.len(), n_tok, ctx, frames);
        let path = negative_dtw(
            &matrix[offset * frames..(n_tok - 1) * frames],
            n_text + 1,
            frames,
        );

        // Probability of each text token among the text tokens (softmax below eot).
        let eot = tok.eot() as usize;
        let probs: Vec<f64> = logits
            .chunks_exact(n_vocab)
            .zip(text_tokens)
            .map(|(row, &t)| {
                let row = &row[..eot];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = row.iter().map(|&l| (l - max).exp()).sum();
                f64::from((row[t as usize] - max).exp() / sum)
            })
            .collect();

        let mut all = text_tokens.to_vec();
        all.push(tok.eot());
        let (words, word_tokens) = split_to_word_tokens(tok, self.language, &all);
        if word_tokens.len() <= 1 {
            return Ok(Vec::new());
        }
        let mut bounds = vec![0usize];
        for wt in &word_tokens[..word_tokens.len() - 1] {
            bounds.push(bounds.last().copied().unwrap_or(0) + wt.len());
        }
        let jump_times: Vec<f64> = path
            .iter()
            .enumerate()
            .filter(|&(k, p)| k == 0 || p.0 != path[k - 1].0)
            .map(|(_, p)| p.1 as f64 / TOKENS_PER_SECOND)
            .collect();
        let at = |i: usize| jump_times.get(i).copied().unwrap_or(0.0);
        Ok(words
            .into_iter()
            .zip(word_tokens)
            .zip(bounds.windows(2))
            .map(|((word, tokens), b)| WordTiming {
                word,
                tokens,
                token_times: (b[0]..b[1]).map(at).collect(),
                start: at(b[0]),
                end: at(b[1]),
                probability: probs[b[0]..b[1]].iter().sum::<f64>() / (b[1] - b[0]).max(1) as f64,
            })
            .collect())
    }

    /// faster-whisper's `add_word_timestamps` for the segments of one window (`cuts`,
    /// decoded from the window starting at frame `window_seek`, `num_frames` long): fills
    /// their words and adjusts their bounds. Returns the new last speech timestamp.
    pub fn add_word_timestamps(
        &self,
        inf: &mut dyn Inference,
        cuts: &mut [Cut],
        window_seek: usize,
        num_frames: usize,
        mut last_speech_timestamp: f64,
    ) -> Result<f64> {
        let eot = self.tok.eot();
        let per_cut: Vec<Vec<u32>> = cuts
            .iter()
            .map(|c| c.tokens.iter().copied().filter(|&t| t < eot).collect())
            .collect();
        let text: Vec<u32> = per_cut.concat();
        let mut alignment = self.find_alignment(inf, &text, num_frames)?;

        let mut durations: Vec<f64> = alignment
            .iter()
            .map(|w| w.end - w.start)
            .filter(|&d| d != 0.0)
            .collect();
        durations.sort_by(f64::total_cmp);
        let median = match durations.len() {
            0 => 0.0,
            n if n % 2 == 1 => durations[n / 2],
            n => (durations[n / 2 - 1] + durations[n / 2]) / 2.0,
        };
        let median_duration = median.min(0.7);
        let max_duration = median_duration * 2.0;
        if !durations.is_empty() {
            // Words at sentence boundaries are no longer than twice the median.
            for i in 1..alignment.len() {
                if alignment[i].end - alignment[i].start > max_duration {
                    if SENTENCE_END_MARKS.contains(alignment[i].word.as_str()) {
                        alignment[i].end = alignment[i].start + max_duration;
                    } else if SENTENCE_END_MARKS.contains(alignment[i - 1].word.as_str()) {
                        alignment[i].start = alignment[i].end - max_duration;
                    }
                }
            }
        }
        merge_punctuations(&mut alignment, self.prepend, self.append);

        let time_offset = window_seek as f64 / 100.0;
        let mut next = 0;
        for (cut, cut_text) in cuts.iter_mut().zip(&per_cut) {
            let mut saved = 0;
            let mut words = Vec::new();
            while next < alignment.len() && saved < cut_text.len() {
                let t = &alignment[next];
                if !t.word.is_empty() {
                    words.push(Word {
                        word: t.word.clone(),
                        start: round2(time_offset + t.start),
                        end: round2(time_offset + t.end),
                        probability: t.probability,
                        tokens: t.tokens.clone(),
                        token_times: (t.token_times.iter())
                            .map(|&x| round2(time_offset + x))
                            .collect(),
                    });
                }
                saved += t.tokens.len();
                next += 1;
            }
            if !words.is_empty() {
                adjust_bounds(
                    cut,
                    &mut words,
                    last_speech_timestamp,
                    median_duration,
                    max_duration,
                );
                last_speech_timestamp = cut.end;
            }
            cut.words = words;
        }
        Ok(last_speech_timestamp)
    }
}

/// The boundary hacks of faster-whisper's `add_word_timestamps` for one segment.
fn adjust_bounds(cut: &mut Cut, words: &mut [Word], last_speech: f64, median: f64, max: f64) {
    let n = words.len();
    // The first and second word after a pause are no longer than twice the median.
    if words[0].end - last_speech > median * 4.0
        && (words[0].end - words[0].start > max
            || (n > 1 && words[1].end - words[0].start > max * 2.0))
    {
        if n > 1 && words[1].end - words[1].start > max {
            let boundary = (words[1].end / 2.0).max(words[1].end - max);
            words[0].end = boundary;
            words[1].start = boundary;
        }
        words[0].start = (words[0].end - max).max(0.0);
    }
    // Prefer the segment's start when the first word is too long.
    if cut.start < words[0].end && cut.start - 0.5 > words[0].start {
        words[0].start = (words[0].end - median).min(cut.start).max(0.0);
    } else {
        cut.start = words[0].start;
    }
    // Prefer the segment's end when the last word is too long.
    let last = &mut words[n - 1];
    if cut.end > last.start && cut.end + 0.5 < last.end {
        last.end = (last.start + median).max(cut.end);
    } else {
        cut.end = last.end;
    }
}

/// faster-whisper's `merge_punctuations`: leading punctuation joins the next word, trailing
/// punctuation the previous one; the emptied entries stay, with no text and no tokens.
fn merge_punctuations(alignment: &mut [WordTiming], prepended: &str, appended: &str) {
    let n = alignment.len();
    if n >= 2 {
        let mut j = n - 1;
        for i in (0..n - 1).rev() {
            let prev = &alignment[i];
            if prev.word.starts_with(' ') && prepended.contains(prev.word.trim()) {
                let (word, tokens, times) = (
                    std::mem::take(&mut alignment[i].word),
                    std::mem::take(&mut alignment[i].tokens),
                    std::mem::take(&mut alignment[i].token_times),
                );
                let following = &mut alignment[j];
                following.word = word + &following.word;
                following.tokens.splice(0..0, tokens);
                following.token_times.splice(0..0, times);
            } else {
                j = i;
            }
        }
    }
    let mut i = 0;
    for j in 1..n {
        if !alignment[i].word.ends_with(' ') && appended.contains(alignment[j].word.as_str()) {
            let (word, tokens, times) = (
                std::mem::take(&mut alignment[j].word),
                std::mem::take(&mut alignment[j].tokens),
                std::mem::take(&mut alignment[j].token_times),
            );
            alignment[i].word.push_str(&word);
            alignment[i].tokens.extend(tokens);
            alignment[i].token_times.extend(times);
        } else {
            i = j;
        }
    }
}

/// Python's `round(x, 2)`: the exact binary value rounded to two decimals.
fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

/// faster-whisper's `get_end`: the end of the last word of the window, else of its last
/// segment.
pub(crate) fn get_end(cuts: &[Cut]) -> Option<f64> {
    cuts.iter()
        .rev()
        .find_map(|c| c.words.last().map(|w| w.end))
        .or_else(|| cuts.last().map(|c| c.end))
}

#[cfg(test)]
#[path = "align_tests.rs"]
mod tests;
