//! One decoding pass over one window: greedy at temperature 0, best-of-N sampling above.
//!
//! A [`Search`] turns a prompt into one [`DecodingResult`]: [`Greedy`] and [`Sampling`]
//! here, [`BeamSearch`](crate::BeamSearch) beside them.

use crate::filters::{logsumexp, LogitFilter, TextMasks};
use crate::inference::{Inference, LogitNeed};
use crate::shortlist::{Row, Shortlist, ShortlistSpec, Shortlists};
use crate::{DecodeError, Result};

/// What to decode: the prompt and the rules of one window.
#[derive(Clone, Copy)]
pub struct DecodeTask<'a> {
    /// `[<|startofprev|>, previous text..., <|startoftranscript|>, language, task, (<|notimestamps|>)]`.
    pub prompt: &'a [u32],
    /// Index of `<|startoftranscript|>` in `prompt`: its logits give the no-speech probability.
    pub sot_index: usize,
    /// Tokens forced after the prompt (faster-whisper's `prefix`: `<|0.00|>` then the prefix
    /// text). They begin the result, add 0 to its score and count toward `max_steps`, as
    /// CTranslate2's hard prefix does; the filters see them as generated tokens.
    pub forced: &'a [u32],
    /// `<|endoftext|>`.
    pub eot: u32,
    /// `<|nospeech|>`.
    pub no_speech: u32,
    /// Most tokens generated (the end token included, as CTranslate2's `max_length` counts).
    pub max_steps: usize,
    /// Applied in order before each token is chosen.
    pub filters: &'a [&'a dyn LogitFilter],
}

impl DecodeTask<'_> {
    /// What a search that chooses among the `best` highest tokens of each row needs in
    /// full, given what the filters mask.
    pub fn logit_need(&self, best: usize) -> LogitNeed {
        let (mut never, mut watch) = (Vec::new(), Vec::new());
        for f in self.filters {
            match f.text_masks() {
                TextMasks::Unknown => return LogitNeed::All,
                TextMasks::Known { always, sometimes } => {
                    never.extend(always);
                    watch.extend(sometimes.into_iter().filter(|&id| id < self.eot));
                }
            }
        }
        never.sort_unstable();
        never.dedup();
        watch.sort_unstable();
        watch.dedup();
        watch.retain(|id| never.binary_search(id).is_err());
        LogitNeed::Top {
            top: best,
            text_end: self.eot,
            never,
            watch,
        }
    }
}

/// One decoded sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodingResult {
    /// Generated tokens (the forced ones first), without the prompt and `<|endoftext|>`.
    pub tokens: Vec<u32>,
    /// Log-probability of each of `tokens` when it was chosen (after filtering); 0 for the
    /// forced ones.
    pub logprobs: Vec<f32>,
    /// Sum of the chosen tokens' log-probabilities (after filtering), `<|endoftext|>`'s included.
    pub sum_logprob: f64,
    /// `sum_logprob / (tokens.len() + 1)`, as faster-whisper recovers it.
    pub avg_logprob: f64,
    /// Probability of `<|nospeech|>` at the `<|startoftranscript|>` row, before filtering.
    pub no_speech_prob: f64,
}

/// A decoding strategy for one window.
pub trait Search {
    /// Decodes `task` against the audio `inf` has encoded.
    fn search(&mut self, inf: &mut dyn Inference, task: &DecodeTask) -> Result<DecodingResult>;
}

/// Takes the most likely token at each step (temperature 0).
#[derive(Debug, Default, Clone, Copy)]
pub struct Greedy;

impl Search for Greedy {
    fn search(&mut self, inf: &mut dyn Inference, task: &DecodeTask) -> Result<DecodingResult> {
        let (mut lists, no_speech_prob) = start_shortlists(inf, task, 1)?;
        let mut state = GreedyState::new(task);
        for step in task.forced.len()..task.max_steps {
            let Some(token) = state.step(task, lists.row(0), step) else {
                break;
            };
            inf.decode_shortlists(&[token], &[0], &mut lists)
                .map_err(DecodeError::Inference)?;
        }
        Ok(state.finish(no_speech_prob))
    }
}

/// Samples `best_of` sequences at `temperature` in one batch and keeps the one with the best
/// length-normalised log-probability: CTranslate2's `GreedySearch` with `num_hypotheses`
/// and `sampling_topk=0`, which faster-whisper runs at every temperature above 0.
pub struct Sampling<'r> {
    /// Softmax temperature, > 0.
    pub temperature: f64,
    /// Candidates drawn; at least 1.
    pub best_of: usize,
    /// Candidates are ranked by `sum_logprob / len^length_penalty`.
    pub length_penalty: f64,
    /// Candidates whose last 32 tokens are spread below this entropy rank after all
    /// others, as whisper.cpp judges each decoder before choosing (`entropy_thold`).
    pub entropy_threshold: Option<f64>,
    /// The random source.
    pub rng: &'r mut Rng,
}

/// One candidate of a batched search.
#[derive(Debug, Clone, Default)]
struct Candidate {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    sum_logprob: f64,
}

impl Candidate {
    /// A candidate that starts with the forced tokens, which score 0.
    fn forced(forced: &[u32]) -> Self {
        Candidate {
            tokens: forced.to_vec(),
            logprobs: vec![0.0; forced.len()],
            sum_logprob: 0.0,
        }
    }
}

impl Search for Sampling<'_> {
    fn search(&mut self, inf: &mut dyn Inference, task: &DecodeTask) -> Result<DecodingResult> {
        let n = inf.n_vocab();
        let k = self.best_of.max(1);
        inf.set_logit_need(&LogitNeed::All);
        let (first, no_speech_prob) = start(inf, task)?;
        if k > 1 {
            inf.reorder(&vec![0; k]).map_err(DecodeError::Inference)?;
        }
        let mut logits = first.repeat(k);
        let mut cands = vec![Candidate::forced(task.forced); k];
        // Candidate index of each batch row.
        let mut alive: Vec<usize> = (0..k).collect();
        for step in task.forced.len()..task.max_steps {
            let (mut keep, mut next) = (Vec::new(), Vec::new());
            for (row, &c) in alive.iter().enumerate() {
                let l = &mut logits[row * n..(row + 1) * n];
                let cand = &mut cands[c];
                for f in task.filters {
                    f.apply(&mut Row::Full(l), &cand.tokens);
                }
                log_softmax(l);
                let token = sample(l, self.temperature, self.rng);
                cand.sum_logprob += f64::from(l[token as usize]);
                if token != task.eot {
                    cand.tokens.push(token);
                    cand.logprobs.push(l[token as usize]);
                    if step + 1 < task.max_steps {
                        keep.push(row);
                        next.push(token);
                    }
                }
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() != alive.len() {
                inf.reorder(&keep).map_err(DecodeError::Inference)?;
                alive = keep.iter().map(|&r| alive[r]).collect();
            }
            logits.resize(alive.len() * n, 0.0);
            inf.decode_batch(&next, alive.len(), &mut logits)
                .map_err(DecodeError::Inference)?;
        }
        // The best normalised score among those not too repetitive, first on ties.
        let lp = self.length_penalty;
        let h = self.entropy_threshold;
        let rank = |c: &Candidate| {
            let score = normalised(c.sum_logprob, c.tokens.len(), lp);
            (!crate::fallback::low_entropy(&c.tokens, h), score)
        };
        let best = cands
            .into_iter()
            .reduce(|a, b| if rank(&b) > rank(&a) { b } else { a })
            .expect("best_of >= 1");
        Ok(DecodingResult::new(
            best.tokens,
            best.logprobs,
            best.sum_logprob,
            no_speech_prob,
        ))
    }
}

/// CTranslate2's final hypothesis score, `sum_logprob / len^length_penalty` (len without
/// `<|endoftext|>`); NaN (0 / 0) ranks as -inf.
pub(crate) fn normalised(sum_logprob: f64, len: usize, length_penalty: f64) -> f64 {
    let s = sum_logprob / (len as f64).powf(length_penalty);
    if s.is_nan() {
        f64::NEG_INFINITY
    } else {
        s
    }
}

impl DecodingResult {
    /// A result with faster-whisper's recovered average:
    /// `score · len^length_penalty / (len + 1)` = `sum_logprob / (len + 1)`.
    pub(crate) fn new(
        tokens: Vec<u32>,
        logprobs: Vec<f32>,
        sum_logprob: f64,
        no_speech_prob: f64,
    ) -> Self {
        debug_assert_eq!(tokens.len(), logprobs.len());
        let avg_logprob = sum_logprob / (tokens.len() + 1) as f64;
        DecodingResult {
            tokens,
            logprobs,
            sum_logprob,
            avg_logprob,
            no_speech_prob,
        }
    }
}

/// The prompt rows whose logits a search reads: `<|startoftranscript|>`'s (the no-speech
/// probability), then the last one's where it is another and no forced tokens follow.
fn prompt_rows(task: &DecodeTask) -> Result<Vec<usize>> {
    let last = task
        .prompt
        .len()
        .checked_sub(1)
        .filter(|&l| task.sot_index <= l)
        .ok_or_else(|| DecodeError::InvalidOption {
            name: "prompt",
            reason: format!(
                "sot index {} outside a prompt of {}",
                task.sot_index,
                task.prompt.len()
            ),
        })?;
    Ok(if task.sot_index == last || !task.forced.is_empty() {
        vec![task.sot_index]
    } else {
        vec![task.sot_index, last]
    })
}

/// Decodes `task.prompt` (then `task.forced`) as a batch of one and returns the logits of
/// the first free step (Shape: [n_vocab]) and the no-speech probability at
/// `<|startoftranscript|>`.
pub(crate) fn start(inf: &mut dyn Inference, task: &DecodeTask) -> Result<(Vec<f32>, f64)> {
    let n = inf.n_vocab();
    let rows = prompt_rows(task)?;
    let mut logits = vec![0f32; rows.len() * n];
    inf.reset();
    inf.decode(task.prompt, &rows, &mut logits)
        .map_err(DecodeError::Inference)?;
    let no_speech_prob = softmax_at(&logits[..n], task.no_speech as usize);
    if let Some(f_last) = task.forced.len().checked_sub(1) {
        logits.truncate(n);
        inf.decode(task.forced, &[f_last], &mut logits)
            .map_err(DecodeError::Inference)?;
        return Ok((logits, no_speech_prob));
    }
    Ok((logits.split_off((rows.len() - 1) * n), no_speech_prob))
}

/// [`start`] for a search that chooses among the `best` highest tokens of each row: tells
/// the model so, and returns the first free step's [`Shortlists`] (one row).
pub(crate) fn start_shortlists(
    inf: &mut dyn Inference,
    task: &DecodeTask,
    best: usize,
) -> Result<(Shortlists, f64)> {
    let need = task.logit_need(best);
    inf.set_logit_need(&need);
    let spec = ShortlistSpec::from_need(inf.n_vocab(), task.eot as usize, &need);
    let mut lists = Shortlists::new(spec);
    let rows = prompt_rows(task)?;
    inf.reset();
    inf.decode_shortlists(task.prompt, &rows, &mut lists)
        .map_err(DecodeError::Inference)?;
    let no_speech_prob = lists.row(0).softmax_at(task.no_speech);
    if let Some(f_last) = task.forced.len().checked_sub(1) {
        inf.decode_shortlists(task.forced, &[f_last], &mut lists)
            .map_err(DecodeError::Inference)?;
    }
    lists.keep_last();
    Ok((lists, no_speech_prob))
}

/// One window's greedy search between decoder passes: [`Greedy::search`] drives one,
/// `crate::batched` many windows in shared passes.
#[derive(Debug, Clone)]
pub(crate) struct GreedyState {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    sum_logprob: f64,
}

impl GreedyState {
    /// The search of `task` before its first step: the forced tokens.
    pub(crate) fn new(task: &DecodeTask) -> Self {
        GreedyState {
            tokens: task.forced.to_vec(),
            logprobs: vec![0.0; task.forced.len()],
            sum_logprob: 0.0,
        }
    }

    /// Chooses the most likely token from the sequence's shortlist (filtered in place) at
    /// `step`; returns the token to decode next, or None when the search is over.
    pub(crate) fn step(
        &mut self,
        task: &DecodeTask,
        mut row: Shortlist<'_>,
        step: usize,
    ) -> Option<u32> {
        for f in task.filters {
            f.apply(&mut Row::Short(&mut row), &self.tokens);
        }
        // The log-probabilities are the logits plus one offset: the choice and its value
        // read them as `log_softmax` would have written them (ties to the lower id).
        let mut best = Vec::with_capacity(2);
        row.offer(row.offset(0.0), 0, 1, &mut best);
        let (token, logprob) = best
            .first()
            .map_or((0, f32::NEG_INFINITY), |c| (c.flat as u32, c.score));
        self.sum_logprob += f64::from(logprob);
        if token == task.eot {
            return None;
        }
        self.tokens.push(token);
        self.logprobs.push(logprob);
        (step + 1 < task.max_steps).then_some(token)
    }

    pub(crate) fn finish(self, no_speech_prob: f64) -> DecodingResult {
        DecodingResult::new(self.tokens, self.logprobs, self.sum_logprob, no_speech_prob)
    }
}

pub(crate) fn softmax_at(logits: &[f32], i: usize) -> f64 {
    let lse = logsumexp(logits);
    logits.get(i).map_or(0.0, |l| f64::from((l - lse).exp()))
}

pub(crate) fn log_softmax(x: &mut [f32]) {
    crate::math::log_softmax_shifted(x, 0.0);
}

/// First index of the maximum (CTranslate2's and torch's argmax tie rule).
pub(crate) fn argmax(x: &[f32]) -> u32 {
    argmax_shifted(x, 0.0)
}

/// [`argmax`] of `x + d` (each sum rounded as f32, so ties are those of the sums), without
/// writing them.
pub(crate) fn argmax_shifted(x: &[f32], d: f32) -> u32 {
    let Some(&first) = x.first() else {
        return 0;
    };
    let (mut best, mut top) = (0, first + d);
    for (c, chunk) in x.chunks(ARGMAX_CHUNK).enumerate() {
        // A chunk with nothing above the best so far changes nothing: one branch-free
        // (vectorized) pass over it instead of a branch per logit.
        if !chunk.iter().fold(false, |any, &v| any | (v + d > top)) {
            continue;
        }
        for (i, &v) in chunk.iter().enumerate() {
            if v + d > top {
                (best, top) = (c * ARGMAX_CHUNK + i, v + d);
            }
        }
    }
    best as u32
}

/// Logits per pre-checked chunk of [`argmax`].
const ARGMAX_CHUNK: usize = 64;

/// Draws from softmax(logprobs / temperature).
fn sample(logprobs: &[f32], temperature: f64, rng: &mut Rng) -> u32 {
    let max = logprobs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return argmax(logprobs);
    }
    // Each weight once (the f64 `exp` per logit was computed twice per draw), and masked
    // logits weigh 0 without one. Same weights, same sum, same draw.
    let weight = |l: f32| {
        if l == f32::NEG_INFINITY {
            0.0
        } else {
            (f64::from(l - max) / temperature).exp()
        }
    };
    WEIGHTS.with_borrow_mut(|weights| {
        weights.clear();
        weights.extend(logprobs.iter().map(|&l| weight(l)));
        let total: f64 = weights.iter().sum();
        let mut r = rng.next_f64() * total;
        let mut chosen = argmax(logprobs);
        for (i, &w) in weights.iter().enumerate() {
            if w > 0.0 {
                chosen = i as u32;
                if r < w {
                    break;
                }
                r -= w;
            }
        }
        chosen
    })
}

thread_local! {
    /// [`sample`]'s weights, kept between steps.
    static WEIGHTS: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A small seeded PRNG (SplitMix64): reproducible sampling without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    /// The first index of the maximum across chunks, NaN never chosen over a number after
    /// it, a leading NaN kept (as the one-branch-per-logit loop did).
    #[test]
    fn argmax_keeps_the_first_maximum() {
        let mut x = vec![0.0f32; 51_864];
        assert_eq!(super::argmax(&x), 0);
        x[70] = 1.0;
        x[700] = 1.0;
        x[69] = f32::NAN;
        assert_eq!(super::argmax(&x), 70);
        x[51_863] = 2.0;
        assert_eq!(super::argmax(&x), 51_863);
        x[0] = f32::NAN;
        assert_eq!(super::argmax(&x), 0);
        assert_eq!(super::argmax(&[]), 0);
        assert_eq!(super::argmax(&[f32::NEG_INFINITY, -1.0]), 1);
    }

    /// The argmax of the row as log_softmax would write it: logits that differ but round
    /// alike once the offset is added tie, and the first wins.
    #[test]
    fn argmax_shifted_reads_the_sums_as_written() {
        let mut x = vec![0.0f32; 300];
        x[200] = f32::from_bits(100f32.to_bits() + 1);
        x[100] = 100.0;
        assert_eq!(super::argmax(&x), 200);
        assert_eq!(super::argmax_shifted(&x, 1e5), 100);
        let written: Vec<f32> = x.iter().map(|&v| v + 1e5).collect();
        assert_eq!(super::argmax(&written), 100);
        assert_eq!(super::argmax_shifted(&x, 0.0), super::argmax(&x));
    }

    use super::*;
    use crate::filters::SuppressTokens;
    use crate::mock::MockInference;

    const N: usize = 16;
    const EOT: u32 = 10;

    fn task<'a>(prompt: &'a [u32], filters: &'a [&'a dyn LogitFilter]) -> DecodeTask<'a> {
        DecodeTask {
            prompt,
            sot_index: 1,
            forced: &[],
            eot: EOT,
            no_speech: 12,
            max_steps: 8,
            filters,
        }
    }

    #[test]
    fn greedy_follows_the_script_and_scores_it() {
        // Prompt [11, 13]: sot at index 1 (the last row).
        let mut inf = MockInference::scripted(N, EOT, vec![vec![3, 4, 5]]);
        inf.encode(&[]).unwrap();
        let r = Greedy.search(&mut inf, &task(&[11, 13], &[])).unwrap();
        assert_eq!(r.tokens, vec![3, 4, 5]);
        // Each chosen logit is 10 over 15 zeros: logprob = -ln(1 + 15 e^-10).
        let lp = -(1.0 + 15.0 * (-10f64).exp()).ln();
        assert!((r.sum_logprob - 4.0 * lp).abs() < 1e-5, "{}", r.sum_logprob);
        assert!((r.avg_logprob - lp).abs() < 1e-5);
        // The scripted row at sot prefers token 3: no-speech prob is a zero logit's share.
        let p = 1.0 / (15.0 + 10f64.exp());
        assert!((r.no_speech_prob - p).abs() < 1e-6, "{}", r.no_speech_prob);
    }

    #[test]
    fn greedy_respects_filters_and_max_steps() {
        let mut inf = MockInference::scripted(N, EOT, vec![vec![3, 4, 5]]);
        inf.encode(&[]).unwrap();
        let ban = SuppressTokens::new(vec![4]);
        let filters: [&dyn LogitFilter; 1] = [&ban];
        let r = Greedy.search(&mut inf, &task(&[11, 13], &filters)).unwrap();
        // With 4 banned the runner-up (token 0, first of the zeros) is taken; the script goes on.
        assert_eq!(r.tokens, vec![3, 0, 5]);
        let mut t = task(&[11, 13], &[]);
        t.max_steps = 2;
        assert_eq!(Greedy.search(&mut inf, &t).unwrap().tokens, vec![3, 4]);
    }

    /// A filter this crate cannot see into.
    struct Opaque;
    impl LogitFilter for Opaque {
        fn apply(&self, _row: &mut Row, _generated: &[u32]) {}
    }

    #[test]
    fn each_search_asks_for_the_logits_it_reads() {
        let eot_only = |_: &crate::mock::Ctx| {
            let mut l = vec![0.0; N];
            l[EOT as usize] = 5.0;
            l
        };
        let mut inf = MockInference::new(N, eot_only);
        inf.encode(&[]).unwrap();
        let (sup, blank) = (SuppressTokens::new(vec![7, 3, 7]), Blank2);
        let filters: [&dyn LogitFilter; 2] = [&sup, &blank];
        let t = task(&[14, 15], &filters);
        Greedy.search(&mut inf, &t).unwrap();
        crate::BeamSearch {
            beam_size: 3,
            patience: 1.0,
            length_penalty: 1.0,
            entropy_threshold: None,
        }
        .search(&mut inf, &t)
        .unwrap();
        let mut rng = Rng::new(1);
        Sampling {
            temperature: 0.5,
            best_of: 2,
            length_penalty: 1.0,
            entropy_threshold: None,
            rng: &mut rng,
        }
        .search(&mut inf, &t)
        .unwrap();
        let top = |top| LogitNeed::Top {
            top,
            text_end: EOT,
            never: vec![3, 7],
            watch: vec![1, 2],
        };
        // The best one (greedy) or 2 per beam; the tokens a blank start masks watched
        // (3 is masked always).
        assert_eq!(inf.needs, vec![top(1), top(6), LogitNeed::All]);
        let opaque = Opaque;
        let filters: [&dyn LogitFilter; 2] = [&sup, &opaque];
        assert_eq!(task(&[14, 15], &filters).logit_need(1), LogitNeed::All);
    }

    /// Masks two tokens at the first step, as `SuppressBlank` does.
    struct Blank2;
    impl LogitFilter for Blank2 {
        fn apply(&self, row: &mut Row, generated: &[u32]) {
            if generated.is_empty() {
                row.mask(1);
                row.mask(2);
            }
        }
        fn text_masks(&self) -> TextMasks {
            TextMasks::Known {
                always: Vec::new(),
                sometimes: vec![2, 1, 3],
            }
        }
    }

    #[test]
    fn no_speech_prob_comes_from_the_sot_row_before_the_end_of_the_prompt() {
        // Prompt [14, 15, 11, 13]: sot at 2, last row 3.
        let mut inf = MockInference::new(N, |ctx| {
            let mut l = vec![0.0; N];
            if ctx.position == 2 {
                l[12] = 5.0;
            } else {
                l[EOT as usize] = 5.0;
            }
            l
        });
        inf.encode(&[]).unwrap();
        let mut t = task(&[14, 15, 11, 13], &[]);
        t.sot_index = 2;
        let r = Greedy.search(&mut inf, &t).unwrap();
        assert!(r.tokens.is_empty());
        let p = 5f64.exp() / (15.0 + 5f64.exp());
        assert!((r.no_speech_prob - p).abs() < 1e-6);
        assert!(Greedy
            .search(&mut inf, &DecodeTask { sot_index: 4, ..t })
            .is_err());
    }

    #[test]
    fn sampling_is_seeded_and_follows_the_temperature() {
        let flat = |_: &crate::mock::Ctx| {
            let mut l = vec![0.0f32; N];
            l[EOT as usize] = -1.0;
            l
        };
        let mut inf = MockInference::new(N, flat);
        inf.encode(&[]).unwrap();
        let draw = |inf: &mut MockInference, seed| {
            let mut rng = Rng::new(seed);
            let mut s = Sampling {
                temperature: 1.0,
                best_of: 1,
                length_penalty: 1.0,
                entropy_threshold: None,
                rng: &mut rng,
            };
            s.search(inf, &task(&[11, 13], &[])).unwrap()
        };
        let a = draw(&mut inf, 7);
        assert_eq!(a, draw(&mut inf, 7));
        assert_ne!(a.tokens, draw(&mut inf, 8).tokens);
        // Frequencies at T=1 match softmax: token 0 has p = 1 / (15 + e^-1).
        let mut rng = Rng::new(1);
        let probs: Vec<f32> = {
            let mut l = flat(&crate::mock::Ctx::default());
            log_softmax(&mut l);
            l
        };
        let hits = (0..20000)
            .filter(|_| sample(&probs, 1.0, &mut rng) == 0)
            .count();
        let expect = 20000.0 / (15.0 + (-1f64).exp());
        assert!(
            (hits as f64 - expect).abs() < 4.0 * expect.sqrt(),
            "{hits} vs {expect}"
        );
        // Near-zero temperature is greedy.
        let mut peaked = probs.clone();
        peaked[3] = 0.5;
        assert_eq!(sample(&peaked, 1e-6, &mut rng), 3);
    }

    #[test]
    fn best_of_samples_in_one_batch_and_keeps_the_best_normalised_candidate() {
        // First token 3 or 4 at even odds; after 3 the end is certain, after 4 the end has
        // p = e^-3 / (e^-3 + 15): the candidates starting with 3 score best.
        let mut inf = MockInference::new(N, |ctx| {
            let mut l = vec![f32::NEG_INFINITY; N];
            match ctx.generated {
                [] => (l[3], l[4]) = (0.0, 0.0),
                [3] => l[EOT as usize] = 0.0,
                _ => {
                    l = vec![0.0; N];
                    l[EOT as usize] = -3.0;
                }
            }
            l
        });
        inf.encode(&[]).unwrap();
        let mut rng = Rng::new(3);
        let mut s = Sampling {
            temperature: 1.0,
            best_of: 8,
            length_penalty: 1.0,
            entropy_threshold: None,
            rng: &mut rng,
        };
        let best = s.search(&mut inf, &task(&[11, 13], &[])).unwrap();
        assert_eq!(best.tokens, vec![3]);
        assert!((best.sum_logprob - 0.5f64.ln()).abs() < 1e-5);
        // One broadcast of the prompt, then every step decodes the live candidates at once;
        // the batch shrinks as candidates end.
        assert_eq!(inf.reorders[0], vec![0; 8]);
        assert_eq!(inf.batches[0], 8);
        assert!(inf.batches.windows(2).all(|w| w[1] <= w[0]));
        assert!(inf.reorders.len() > 1);
    }

    /// whisper.cpp's entropy test judges each sampled candidate before the best is chosen.
    #[test]
    fn entropy_threshold_ranks_looping_candidates_last() {
        let mut inf = crate::beam::tests::loop_or_cycle(N, EOT);
        let mut first = |h: Option<f64>| {
            let mut rng = Rng::new(5);
            let mut s = Sampling {
                temperature: 1.0,
                best_of: 8,
                length_penalty: 1.0,
                entropy_threshold: h,
                rng: &mut rng,
            };
            let long = DecodeTask {
                max_steps: 60,
                ..task(&[11, 13], &[])
            };
            s.search(&mut inf, &long).unwrap().tokens[0]
        };
        assert_eq!(first(None), 3);
        assert_eq!(first(Some(1.0)), 4);
    }

    #[test]
    fn normalised_score_follows_the_length_penalty() {
        assert_eq!(normalised(-3.0, 3, 1.0), -1.0);
        assert_eq!(normalised(-3.0, 3, 0.0), -3.0);
        assert!((normalised(-4.0, 4, 0.5) + 2.0).abs() < 1e-12);
        assert_eq!(normalised(-1.0, 0, 1.0), f64::NEG_INFINITY);
        assert_eq!(normalised(0.0, 0, 1.0), f64::NEG_INFINITY);
    }
}
