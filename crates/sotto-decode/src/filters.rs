//! Logit filters applied before each token is chosen, in CTranslate2's order (the one
//! faster-whisper runs): suppress tokens, suppress blank, timestamp rules.
//!
//! Filters see only the tokens generated so far in this window (`generated`), not the
//! prompt, so the same filters serve every candidate of a search.

use crate::tokenizer::Tokenizer;

/// A rule that masks logits (sets them to -inf) before the next token is chosen.
pub trait LogitFilter {
    /// `logits`: Shape [n_vocab], the next token's. `generated`: tokens sampled after the prompt.
    fn apply(&self, logits: &mut [f32], generated: &[u32]);

    /// Which text tokens this filter may mask, so that a search can tell the model which
    /// logits it needs in full (see [`crate::LogitNeed`]). The default, `Unknown`, asks
    /// for every logit.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Unknown
    }
}

/// The text tokens (those below `<|endoftext|>`) a [`LogitFilter`] masks one by one.
/// Masking every text token at once, or special tokens, is not counted: with every text
/// token masked the choice is among special tokens, whose logits are always in full.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMasks {
    /// Any of them, at any step.
    Unknown,
    /// `always` at every step, and at most `sometimes` others at some steps.
    Known { always: Vec<u32>, sometimes: usize },
}

fn suppress(logits: &mut [f32], ids: impl IntoIterator<Item = u32>) {
    for id in ids {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = f32::NEG_INFINITY;
        }
    }
}

fn suppress_range(logits: &mut [f32], from: usize, to: usize) {
    let to = to.min(logits.len());
    if from < to {
        logits[from..to].fill(f32::NEG_INFINITY);
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
    fn apply(&self, logits: &mut [f32], _generated: &[u32]) {
        suppress(logits, self.ids.iter().copied());
    }

    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: self.ids.clone(),
            sometimes: 0,
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
    fn apply(&self, logits: &mut [f32], generated: &[u32]) {
        if generated.is_empty() {
            suppress(logits, self.ids.iter().copied());
        }
    }

    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: Vec::new(),
            sometimes: self.ids.len(),
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
    fn timestamp_is_likelier(&self, logits: &[f32]) -> bool {
        let tb = (self.timestamp_begin as usize).min(logits.len());
        let (text, stamps) = logits.split_at(tb);
        let max_text = crate::math::max(text);
        // Both sides share log_softmax's normalizer, so compare raw logits.
        logsumexp(stamps) > max_text
    }
}

pub(crate) use crate::math::logsumexp;

impl LogitFilter for ApplyTimestampRules {
    /// Only ranges: every text token, or timestamps.
    fn text_masks(&self) -> TextMasks {
        TextMasks::Known {
            always: Vec::new(),
            sometimes: 0,
        }
    }

    fn apply(&self, logits: &mut [f32], generated: &[u32]) {
        let (tb, eot) = (self.timestamp_begin as usize, self.eot as usize);
        suppress(logits, [self.no_timestamps]);
        let Some(&last) = generated.last() else {
            suppress_range(logits, 0, tb);
            if let Some(max) = self.max_initial {
                suppress_range(logits, max as usize + 1, logits.len());
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
                suppress_range(logits, tb, logits.len());
                check_probability = false;
            } else {
                // An open timestamp: close it or end.
                suppress_range(logits, 0, eot);
            }
        }
        if let Some(&stamp) = generated.iter().rev().find(|&&t| t >= self.timestamp_begin) {
            suppress_range(logits, tb, stamp as usize);
        }
        if check_probability && self.timestamp_is_likelier(logits) {
            suppress_range(logits, 0, tb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::tests::toy;

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
        let mut l = vec![0.0; tok.n_vocab()];
        SuppressTokens::new(vec![3, 5, u32::MAX]).apply(&mut l, &[]);
        assert!(l[3].is_infinite() && l[5].is_infinite() && l[4] == 0.0);
        let blank = SuppressBlank::new(&tok);
        let mut l = vec![0.0; tok.n_vocab()];
        blank.apply(&mut l, &[1]);
        assert_eq!(allowed(&l).len(), tok.n_vocab());
        blank.apply(&mut l, &[]);
        assert!(l[b' ' as usize].is_infinite() && l[tok.eot() as usize].is_infinite());
        assert_eq!(allowed(&l).len(), tok.n_vocab() - 2);
    }

    #[test]
    fn first_token_is_an_early_timestamp() {
        let tok = toy(&[], 99);
        let tb = tok.timestamp_begin() as usize;
        let rules = ApplyTimestampRules::new(&tok, Some(50));
        let mut l = vec![0.0; tok.n_vocab()];
        rules.apply(&mut l, &[]);
        assert_eq!(allowed(&l), (tb..=tb + 50).collect::<Vec<_>>());
        let mut l = vec![0.0; tok.n_vocab()];
        ApplyTimestampRules::new(&tok, None).apply(&mut l, &[]);
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
        rules.apply(&mut l, &[tb + 10]);
        assert!(allowed(&l).iter().all(|&i| i < tb as usize));
        // After text then timestamp: timestamps >= it, or eot.
        let mut l = text_heavy(&tok);
        l[tok.eot() as usize] = 30.0;
        rules.apply(&mut l, &[tb, b'a' as u32, tb + 20]);
        let a = allowed(&l);
        assert!(a.contains(&(tok.eot() as usize)) && a.contains(&(tb as usize + 20)));
        assert!(!a.contains(&(tb as usize + 19)) && !a.contains(&(b'a' as usize)));
        assert!(a
            .iter()
            .all(|&i| i == tok.eot() as usize || i > tok.eot() as usize));
        // Unless eot is likely, the timestamps' mass then forbids it too.
        let mut l = text_heavy(&tok);
        rules.apply(&mut l, &[tb, b'a' as u32, tb + 20]);
        assert!(allowed(&l).iter().all(|&i| i >= tb as usize + 20));
        // After a closed pair: no timestamps.
        let mut l = text_heavy(&tok);
        rules.apply(&mut l, &[tb, b'a' as u32, tb + 20, tb + 20]);
        assert!(allowed(&l).iter().all(|&i| i < tb as usize));
        // Text after a timestamp: only timestamps >= the last one, and text.
        let mut l = text_heavy(&tok);
        rules.apply(&mut l, &[tb, b'a' as u32, tb + 20, tb + 20, b'a' as u32]);
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
        rules.apply(&mut l, &[tb, b'a' as u32]);
        assert!(allowed(&l).iter().all(|&i| i >= tb as usize));
        // Best text logit 8 > 7.3: text stays.
        l[b'a' as usize] = 8.0;
        rules.apply(&mut l, &[tb, b'a' as u32]);
        assert!(allowed(&l).contains(&(b'a' as usize)));
        assert_eq!(logsumexp(&[f32::NEG_INFINITY]), f32::NEG_INFINITY);
    }
}
