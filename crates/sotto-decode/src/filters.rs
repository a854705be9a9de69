//! Logit filters applied before each token is chosen, in CTranslate2's order (the one
//! faster-whisper runs): repetition penalty, no-repeat n-grams, suppress tokens, suppress
//! blank, timestamp rules.
//!
//! Filters see only the tokens generated so far in this window (`generated`), not the
//! prompt, so the same filters serve every candidate of a search.

use crate::shortlist::Row;
use crate::tokenizer::Tokenizer;

/// A rule that masks logits (sets them to -inf) before the next token is chosen.
pub trait LogitFilter {
    /// `row`: the next token's logits, whole or as a shortlist (which holds the text
    /// tokens this filter's [`LogitFilter::text_masks`] names, and every special one).
    /// `generated`: tokens sampled after the prompt.
    fn apply(&self, row: &mut Row, generated: &[u32]);

    /// Which text tokens this filter may mask, so that a search can tell the model which
    /// logits it needs in full (see [`crate::LogitNeed`]). The default, `Unknown`, asks
    /// for every logit.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Unknown
    }
}

/// The text tokens (those below `<|endoftext|>`) a [`LogitFilter`] masks one by one.
/// Masking every text token at once, or special tokens, is not counted: with every text
/// token masked the choice is among special tokens, whose logits are always in full. A
/// filter that says `Known` masks no other part of the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMasks {
    /// Any of them, at any step.
    Unknown,
    /// `always` at every step, and `sometimes` at some steps.
    Known {
        always: Vec<u32>,
        sometimes: Vec<u32>,
    },
}

fn suppress(row: &mut Row, ids: impl IntoIterator<Item = u32>) {
    for id in ids {
        row.mask(id);
    }
}

/// Lowers the logits of the tokens generated so far (faster-whisper's
/// `repetition_penalty`, CTranslate2's `RepetitionPenalty`, the CTRL paper's rule): a
/// negative logit is multiplied by the penalty, any other divided by it. Each token once,
/// however often it occurs, from the logit as the model gave it; nothing before the first
/// generated token (so not the prompt).
#[derive(Debug, Clone)]
pub struct RepetitionPenalty {
    penalty: f32,
}

impl RepetitionPenalty {
    /// `penalty` above 1 discourages repetition, below 1 encourages it; 1 changes nothing.
    pub fn new(penalty: f32) -> Self {
        RepetitionPenalty { penalty }
    }
}

impl LogitFilter for RepetitionPenalty {
    fn apply(&self, row: &mut Row, generated: &[u32]) {
        let mut ids = generated.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let p = self.penalty;
        for id in ids {
            row.update(id, |x| if x < 0.0 { x * p } else { x / p });
        }
    }

    /// Any text token generated before, which no list made ahead of time names.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Unknown
    }
}

/// Forbids any token that would repeat an n-gram of the tokens generated so far
/// (faster-whisper's `no_repeat_ngram_size`, CTranslate2's `NoRepeatNgram`): wherever the
/// last `n - 1` tokens occurred before, the token that followed them is masked. With
/// `n = 1` no generated token comes again.
#[derive(Debug, Clone)]
pub struct NoRepeatNgram {
    n: usize,
}

impl NoRepeatNgram {
    /// `n` ≥ 1 (0 would forbid nothing; the caller leaves the filter out).
    pub fn new(n: usize) -> Self {
        NoRepeatNgram { n: n.max(1) }
    }
}

impl LogitFilter for NoRepeatNgram {
    fn apply(&self, row: &mut Row, generated: &[u32]) {
        let (n, len) = (self.n, generated.len());
        if len < n {
            return;
        }
        let tail = &generated[len - (n - 1)..];
        for start in 0..=len - n {
            if generated[start..start + n - 1] == *tail {
                row.mask(generated[start + n - 1]);
            }
        }
    }

    fn text_masks(&self) -> TextMasks {
        TextMasks::Unknown
    }
}

/// Never samples these tokens (faster-whisper's `suppress_tokens`, see
/// [`suppressed_tokens`](crate::suppressed_tokens)).
#[derive(Debug, Clone)]
pub struct SuppressTokens {
    ids: Vec<u32>,
}

impl SuppressTokens {
    /// Suppresses `ids` at every step; ids past the vocabulary are ignored.
    pub fn new(ids: Vec<u32>) -> Self {
        SuppressTokens { ids }
    }
}

impl LogitFilter for SuppressTokens {
    fn apply(&self, row: &mut Row, _generated: &[u32]) {
        suppress(row, self.ids.iter().copied());
    }

    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: self.ids.clone(),
            sometimes: Vec::new(),
        }
    }
}

/// At the first step, forbids a blank start: `encode(" ")` and `<|endoftext|>`
/// (openai `SuppressBlank`; CTranslate2's `suppress_ids_begin`).
#[derive(Debug, Clone)]
pub struct SuppressBlank {
    ids: Vec<u32>,
}

impl SuppressBlank {
    /// The blank tokens of `tok`.
    pub fn new(tok: &Tokenizer) -> Self {
        let mut ids = tok.encode(" ");
        ids.push(tok.eot());
        SuppressBlank { ids }
    }
}

impl LogitFilter for SuppressBlank {
    fn apply(&self, row: &mut Row, generated: &[u32]) {
        if generated.is_empty() {
            suppress(row, self.ids.iter().copied());
        }
    }

    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: Vec::new(),
            sometimes: self.ids.clone(),
        }
    }
}

/// Whisper's timestamp grammar, as CTranslate2's `ApplyTimestampRules` (what faster-whisper
/// runs; openai's `ApplyTimestampRules` differs only in forbidding equal timestamps):
/// - `<|notimestamps|>` is never sampled;
/// - the first token is a timestamp no later than `max_initial_timestamp`;
/// - timestamps come in pairs, except directly before `<|endoftext|>`;
/// - timestamps never decrease;
/// - if the timestamps' summed probability beats every single text token, a timestamp is sampled.
#[derive(Debug, Clone)]
pub struct ApplyTimestampRules {
    eot: u32,
    no_timestamps: u32,
    timestamp_begin: u32,
    /// Last allowed initial timestamp token; None: no limit.
    max_initial: Option<u32>,
}

impl ApplyTimestampRules {
    /// `max_initial_timestamp_index`: faster-whisper's `round(max_initial_timestamp / 0.02)`.
    pub fn new(tok: &Tokenizer, max_initial_timestamp_index: Option<u32>) -> Self {
        ApplyTimestampRules {
            eot: tok.eot(),
            no_timestamps: tok.no_timestamps(),
            timestamp_begin: tok.timestamp_begin(),
            max_initial: max_initial_timestamp_index.map(|i| tok.timestamp_begin() + i),
        }
    }

    /// Whether the timestamps' total log-probability beats the best text token's.
    fn timestamp_is_likelier(&self, row: &Row) -> bool {
        let (tb, n) = (self.timestamp_begin as usize, row.n_vocab());
        // Both sides share log_softmax's normalizer, so compare raw logits.
        row.logsumexp(tb, n) > row.max(0, tb)
    }
}

pub(crate) use crate::math::logsumexp;

impl LogitFilter for ApplyTimestampRules {
    /// Only ranges: every text token, or timestamps.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: Vec::new(),
            sometimes: Vec::new(),
        }
    }

    fn apply(&self, row: &mut Row, generated: &[u32]) {
        let (tb, eot, n) = (
            self.timestamp_begin as usize,
            self.eot as usize,
            row.n_vocab(),
        );
        row.mask(self.no_timestamps);
        let Some(&last) = generated.last() else {
            row.mask_range(0, tb);
            if let Some(max) = self.max_initial {
                row.mask_range(max as usize + 1, n);
            }
            return;
        };
        let mut check_probability = true;
        if last >= self.timestamp_begin {
            let penultimate = generated
                .len()
                .checked_sub(2)
                .map_or(last, |i| generated[i]);
            if penultimate >= self.timestamp_begin {
                // A closed pair: the next must be text (or eot).
                row.mask_range(tb, n);
                check_probability = false;
            } else {
                // An open timestamp: close it or end.
                row.mask_range(0, eot);
            }
        }
        if let Some(&stamp) = generated.iter().rev().find(|&&t| t >= self.timestamp_begin) {
            row.mask_range(tb, stamp as usize);
        }
        if check_probability && self.timestamp_is_likelier(row) {
            row.mask_range(0, tb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shortlist::tests::check_against_full;
    use crate::tokenizer::tests::toy;

    /// Applies `f` to the whole row, checking that it masks a shortlist of the row alike.
    fn run(f: &dyn LogitFilter, l: &mut Vec<f32>, generated: &[u32], tok: &Tokenizer) {
        *l = check_against_full(f, l, generated, tok.eot(), 2);
    }

    fn allowed(logits: &[f32]) -> Vec<usize> {
        logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn suppress_tokens_and_blank() {
        let tok = toy(&[], 99);
        let mut l = vec![0.0f32; tok.n_vocab()];
        run(
            &SuppressTokens::new(vec![3, 5, u32::MAX]),
            &mut l,
            &[],
            &tok,
        );
        assert!(l[3].is_infinite() && l[5].is_infinite() && l[4] == 0.0);
        let blank = SuppressBlank::new(&tok);
        let mut l = vec![0.0f32; tok.n_vocab()];
        run(&blank, &mut l, &[1], &tok);
        assert_eq!(allowed(&l).len(), tok.n_vocab());
        run(&blank, &mut l, &[], &tok);
        assert!(l[b' ' as usize].is_infinite() && l[tok.eot() as usize].is_infinite());
        assert_eq!(allowed(&l).len(), tok.n_vocab() - 2);
    }

    #[test]
    fn repetition_penalty_lowers_each_generated_token_once() {
        let tok = toy(&[], 99);
        let mut l = vec![1.0f32; tok.n_vocab()];
        l[3] = 4.0;
        l[5] = -2.0;
        l[7] = 0.0;
        let f = RepetitionPenalty::new(2.0);
        // Nothing generated: nothing changes (CTranslate2 skips the first step).
        run(&f, &mut l, &[], &tok);
        assert_eq!((l[3], l[5]), (4.0, -2.0));
        // 3 twice: divided once; negative: multiplied; 0 stays; others untouched.
        run(&f, &mut l, &[3, 5, 3, 7, tok.timestamp_begin()], &tok);
        assert_eq!((l[3], l[5], l[7], l[4]), (2.0, -4.0, 0.0, 1.0));
        assert_eq!(l[tok.timestamp_begin() as usize], 0.5);
        // Below 1 it raises them.
        run(&RepetitionPenalty::new(0.5), &mut l, &[3], &tok);
        assert_eq!(l[3], 4.0);
    }

    #[test]
    fn no_repeat_ngram_masks_what_followed_the_last_tokens() {
        let tok = toy(&[], 99);
        let fresh = || vec![0.0f32; tok.n_vocab()];
        // Trigrams: [1 2] was followed by 3 and by 4; the last two tokens are [1 2].
        let mut l = fresh();
        run(
            &NoRepeatNgram::new(3),
            &mut l,
            &[1, 2, 3, 1, 2, 4, 1, 2],
            &tok,
        );
        assert_eq!(masked(&l), vec![3, 4]);
        // Shorter than n: nothing.
        let mut l = fresh();
        run(&NoRepeatNgram::new(3), &mut l, &[1, 2], &tok);
        assert!(masked(&l).is_empty());
        // Bigrams after [.. 2]: what followed each earlier 2.
        let mut l = fresh();
        run(&NoRepeatNgram::new(2), &mut l, &[2, 9, 5, 2, 8, 2], &tok);
        assert_eq!(masked(&l), vec![8, 9]);
        // Unigrams: every generated token.
        let mut l = fresh();
        run(&NoRepeatNgram::new(1), &mut l, &[6, 4, 6], &tok);
        assert_eq!(masked(&l), vec![4, 6]);
    }

    fn masked(logits: &[f32]) -> Vec<usize> {
        (0..logits.len())
            .filter(|&i| logits[i].is_infinite())
            .collect()
    }

    #[test]
    fn first_token_is_an_early_timestamp() {
        let tok = toy(&[], 99);
        let tb = tok.timestamp_begin() as usize;
        let rules = ApplyTimestampRules::new(&tok, Some(50));
        let mut l = vec![0.0f32; tok.n_vocab()];
        run(&rules, &mut l, &[], &tok);
        assert_eq!(allowed(&l), (tb..=tb + 50).collect::<Vec<_>>());
        let mut l = vec![0.0f32; tok.n_vocab()];
        run(&ApplyTimestampRules::new(&tok, None), &mut l, &[], &tok);
        assert_eq!(allowed(&l), (tb..tok.n_vocab()).collect::<Vec<_>>());
    }

    #[test]
    fn timestamps_pair_and_never_decrease() {
        let tok = toy(&[], 99);
        let tb = tok.timestamp_begin();
        let rules = ApplyTimestampRules::new(&tok, Some(50));
        // Text strongly preferred so the probability rule stays out of the way.
        let text_heavy = |tok: &Tokenizer| {
            let mut l = vec![0.0f32; tok.n_vocab()];
            l[b'a' as usize] = 30.0;
            l
        };
        // After one timestamp (pair of itself at the start): text only.
        let mut l = text_heavy(&tok);
        run(&rules, &mut l, &[tb + 10], &tok);
        assert!(allowed(&l).iter().all(|&i| i < tb as usize));
        // After text then timestamp: timestamps >= it, or eot.
        let mut l = text_heavy(&tok);
        l[tok.eot() as usize] = 30.0;
        run(&rules, &mut l, &[tb, b'a' as u32, tb + 20], &tok);
        let a = allowed(&l);
        assert!(a.contains(&(tok.eot() as usize)) && a.contains(&(tb as usize + 20)));
        assert!(!a.contains(&(tb as usize + 19)) && !a.contains(&(b'a' as usize)));
        assert!(a
            .iter()
            .all(|&i| i == tok.eot() as usize || i > tok.eot() as usize));
        // Unless eot is likely, the timestamps' mass then forbids it too.
        let mut l = text_heavy(&tok);
        run(&rules, &mut l, &[tb, b'a' as u32, tb + 20], &tok);
        assert!(allowed(&l).iter().all(|&i| i >= tb as usize + 20));
        // After a closed pair: no timestamps.
        let mut l = text_heavy(&tok);
        run(&rules, &mut l, &[tb, b'a' as u32, tb + 20, tb + 20], &tok);
        assert!(allowed(&l).iter().all(|&i| i < tb as usize));
        // Text after a timestamp: only timestamps >= the last one, and text.
        let mut l = text_heavy(&tok);
        run(
            &rules,
            &mut l,
            &[tb, b'a' as u32, tb + 20, tb + 20, b'a' as u32],
            &tok,
        );
        let a = allowed(&l);
        assert!(!a.contains(&(tb as usize + 19)) && a.contains(&(tb as usize + 20)));
        assert!(a.contains(&(b'a' as usize)));
        assert!(l[tok.no_timestamps() as usize].is_infinite());
    }

    #[test]
    fn timestamp_mass_beats_best_text_token() {
        let tok = toy(&[], 99);
        let tb = tok.timestamp_begin();
        let rules = ApplyTimestampRules::new(&tok, Some(50));
        // Best text logit 5 vs 1501 timestamps at 0: logsumexp = ln 1501 = 7.3 > 5.
        let mut l = vec![f32::NEG_INFINITY; tok.n_vocab()];
        l[b'a' as usize] = 5.0;
        l[tb as usize..].fill(0.0);
        run(&rules, &mut l, &[tb, b'a' as u32], &tok);
        assert!(allowed(&l).iter().all(|&i| i >= tb as usize));
        // Best text logit 8 > 7.3: text stays.
        l[b'a' as usize] = 8.0;
        run(&rules, &mut l, &[tb, b'a' as u32], &tok);
        assert!(allowed(&l).contains(&(b'a' as usize)));
        assert_eq!(logsumexp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }
}
