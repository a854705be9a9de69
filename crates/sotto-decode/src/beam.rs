//! Beam search as CTranslate2's `BeamSearch` (src/decoding.cc), which faster-whisper runs at
//! temperature 0 (`beam_size=5, patience=1, length_penalty=1` by default).
//!
//! Per step, over every beam's filtered log-probabilities plus the beam's score:
//! - take the best `2 · beam_size` (beam, token) candidates, best first;
//! - each of the first `beam_size` that is `<|endoftext|>` (or any, at the last step)
//!   becomes a finished hypothesis, and the next not-ending candidate from the second half
//!   takes its place among the beams;
//! - stop once `round(beam_size · patience)` hypotheses are finished (or at the last step);
//! - the answer is the hypothesis with the best `score / len^length_penalty`.
//!
//! The first step runs on the prompt's single sequence; the batch becomes `beam_size`
//! sequences after it (CTranslate2's `expand_after_first_step` on the CPU).

use crate::greedy::{normalised, start_shortlists, DecodeTask, DecodingResult, Search};
use crate::inference::Inference;
use crate::shortlist::{Row, ShortlistRows};
use crate::{DecodeError, Result};

/// Beam search at temperature 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeamSearch {
    /// Beams kept per step; at least 1.
    pub beam_size: usize,
    /// Hypotheses finished before stopping: `round(beam_size · patience)`, at least 1.
    pub patience: f64,
    /// Hypotheses are ranked by `sum_logprob / len^length_penalty`.
    pub length_penalty: f64,
    /// Hypotheses whose last 32 tokens are spread below this entropy rank after all
    /// others, as whisper.cpp judges each beam before choosing (`entropy_thold`).
    pub entropy_threshold: Option<f64>,
}

impl BeamSearch {
    /// How many finished hypotheses end the search (CTranslate2's `get_max_candidates`).
    pub fn max_finished(&self) -> Result<usize> {
        let n = (self.beam_size as f64 * self.patience).round();
        if self.beam_size == 0 || !(1.0..=1e6).contains(&n) {
            return Err(DecodeError::InvalidOption {
                name: "patience",
                reason: format!(
                    "beam size {} × patience {} must round to at least 1 hypothesis",
                    self.beam_size, self.patience
                ),
            });
        }
        Ok(n as usize)
    }
}

/// A live beam or a finished hypothesis.
#[derive(Debug, Clone)]
struct Beam {
    /// Generated tokens, without `<|endoftext|>`.
    tokens: Vec<u32>,
    /// Each token's log-probability when chosen.
    logprobs: Vec<f32>,
    /// Sum of the chosen tokens' log-probabilities (float32, as CTranslate2 keeps it).
    score: f32,
}

/// A (beam, token) pair: `flat = beam · n_vocab + token`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) flat: usize,
    pub(crate) score: f32,
}

/// Adds a candidate to `top`, the `m` best so far, best first, ties to the lower `flat`;
/// NaN is skipped. Candidates may come in any order.
pub(crate) fn push_best(top: &mut Vec<Candidate>, m: usize, flat: usize, score: f32) {
    let before = |c: &Candidate| c.score > score || (c.score == score && c.flat < flat);
    if score.is_nan() || (top.len() == m && top.last().is_none_or(before)) {
        return;
    }
    let at = top.partition_point(before);
    top.insert(at, Candidate { flat, score });
    top.truncate(m);
}

/// The `m` best entries of the rows of `logits` (each `n` long) plus their row's shift,
/// best first; ties keep the lower index; NaN is skipped. Each score is `logit + shift`
/// rounded as f32, as [`crate::math::log_softmax_shifted`] would have written it.
pub(crate) fn top_k(logits: &[f32], n: usize, shifts: &[f32], m: usize) -> Vec<Candidate> {
    let mut top: Vec<Candidate> = Vec::with_capacity(m + 1);
    for (row, (scores, &d)) in logits.chunks(n.max(1)).zip(shifts).enumerate() {
        for (c, chunk) in scores.chunks(TOP_K_CHUNK).enumerate() {
            // Once the list is full, a chunk with nothing above its last entry changes
            // nothing: one branch-free (vectorized) pass over it instead of a branch per
            // score. NaN compares false, so it stays skipped.
            if let Some(last) = top.last().filter(|_| top.len() == m) {
                let thr = last.score;
                if !chunk.iter().fold(false, |any, &s| any | (s + d > thr)) {
                    continue;
                }
            }
            for (i, &logit) in chunk.iter().enumerate() {
                let score = logit + d;
                if score.is_nan() || (top.len() == m && top.last().is_none_or(|c| score <= c.score))
                {
                    continue;
                }
                let at = top.partition_point(|c| c.score >= score);
                let flat = row * n + c * TOP_K_CHUNK + i;
                top.insert(at, Candidate { flat, score });
                top.truncate(m);
            }
        }
    }
    top
}

/// Scores per pre-checked chunk of [`top_k`]: a beam step reads 5 × 51 864.
const TOP_K_CHUNK: usize = 64;

impl Search for BeamSearch {
    fn search(&mut self, inf: &mut dyn Inference, task: &DecodeTask) -> Result<DecodingResult> {
        let mut state = BeamState::new(*self, task)?;
        // The step keeps the best 2k (beam, token) pairs: at most 2k from any one beam.
        let (mut lists, no_speech_prob) = start_shortlists(inf, task, 2 * self.beam_size)?;
        for step in task.forced.len()..task.max_steps {
            let rows = lists.rows();
            let Some((origins, tokens)) = state.step(task, &mut lists.range(0, rows), step) else {
                break;
            };
            inf.reorder(&origins).map_err(DecodeError::Inference)?;
            inf.decode_batch_shortlists(&tokens, tokens.len(), &mut lists)
                .map_err(DecodeError::Inference)?;
        }
        Ok(state.finish(no_speech_prob))
    }
}

/// One window's beam search between decoder passes: [`BeamSearch::search`] drives one,
/// `crate::batched` many windows in shared passes.
#[derive(Debug, Clone)]
pub(crate) struct BeamState {
    cfg: BeamSearch,
    max_finished: usize,
    /// The live beams, one per batch row of this window.
    beams: Vec<Beam>,
    finished: Vec<Beam>,
}

impl BeamState {
    /// The search of `task` before its first step: one beam of the forced tokens.
    pub(crate) fn new(cfg: BeamSearch, task: &DecodeTask) -> Result<Self> {
        Ok(BeamState {
            cfg,
            max_finished: cfg.max_finished()?,
            beams: vec![Beam {
                tokens: task.forced.to_vec(),
                logprobs: vec![0.0; task.forced.len()],
                score: 0.0,
            }],
            finished: Vec::new(),
        })
    }

    /// Chooses from the live beams' shortlists (one row each, masked in place) at `step`
    /// (tokens generated so far, forced ones included). Returns the next beams' origins
    /// (indices among the live beams) and tokens, or None when the search is over.
    pub(crate) fn step(
        &mut self,
        task: &DecodeTask,
        rows: &mut ShortlistRows<'_>,
        step: usize,
    ) -> Option<(Vec<usize>, Vec<u32>)> {
        let (k, beams) = (self.cfg.beam_size, &self.beams);
        debug_assert_eq!(rows.len(), beams.len());
        let n = rows.n_vocab();
        let mut cands = Vec::with_capacity(2 * k + 1);
        for (b, beam) in beams.iter().enumerate() {
            let mut row = rows.row(b);
            for f in task.filters {
                f.apply(&mut Row::Short(&mut row), &beam.tokens);
            }
            // The beam's score folded into the normalisation: each score is what
            // log_softmax plus the score would have written.
            row.offer(row.offset(beam.score), b * n, 2 * k, &mut cands);
        }
        if step > 0 && step == task.forced.len() {
            // CTranslate2 (`update_sample_with_prefix`): right after a prefix, an end in
            // any but the best candidate becomes token 0 at a hopeless score.
            for c in cands.iter_mut().skip(1) {
                if (c.flat % n) as u32 == task.eot {
                    *c = Candidate {
                        flat: c.flat - c.flat % n,
                        score: -1e10,
                    };
                }
            }
        }
        let is_last = step + 1 == task.max_steps;
        let token = |c: &Candidate| (c.flat % n) as u32;
        let mut next: Vec<Candidate> = Vec::with_capacity(k);
        let mut secondary = k;
        for (j, c) in cands.iter().enumerate().take(k) {
            let mut pick = j;
            if token(c) == task.eot || is_last {
                let from = &beams[c.flat / n];
                let (mut tokens, mut logprobs) = (from.tokens.clone(), from.logprobs.clone());
                if token(c) != task.eot {
                    tokens.push(token(c));
                    logprobs.push(c.score - from.score);
                }
                self.finished.push(Beam {
                    tokens,
                    logprobs,
                    score: c.score,
                });
                if let Some(r) = (secondary..cands.len()).find(|&r| token(&cands[r]) != task.eot) {
                    pick = r;
                    secondary = r + 1;
                }
            }
            next.push(cands[pick]);
        }
        if is_last || self.finished.len() >= self.max_finished || next.is_empty() {
            return None;
        }
        let origins: Vec<usize> = next.iter().map(|c| c.flat / n).collect();
        let tokens: Vec<u32> = next.iter().map(token).collect();
        self.beams = next
            .iter()
            .map(|c| {
                let from = &beams[c.flat / n];
                let (mut tokens, mut logprobs) = (from.tokens.clone(), from.logprobs.clone());
                tokens.push(token(c));
                logprobs.push(c.score - from.score);
                Beam {
                    tokens,
                    logprobs,
                    score: c.score,
                }
            })
            .collect();
        Some((origins, tokens))
    }

    /// The best finished hypothesis by normalised score (first registered on ties) among
    /// those the entropy test passes, if any does; an empty result when none finished.
    pub(crate) fn finish(self, no_speech_prob: f64) -> DecodingResult {
        let (lp, h) = (self.cfg.length_penalty, self.cfg.entropy_threshold);
        let rank = |b: &Beam| {
            let score = normalised(f64::from(b.score), b.tokens.len(), lp);
            (!crate::fallback::low_entropy(&b.tokens, h), score)
        };
        let best =
            (self.finished.into_iter()).reduce(|a, b| if rank(&b) > rank(&a) { b } else { a });
        match best {
            Some(b) => {
                DecodingResult::new(b.tokens, b.logprobs, f64::from(b.score), no_speech_prob)
            }
            None => DecodingResult::new(Vec::new(), Vec::new(), 0.0, no_speech_prob),
        }
    }
}

#[cfg(test)]
#[path = "beam_tests.rs"]
pub(crate) mod tests;
