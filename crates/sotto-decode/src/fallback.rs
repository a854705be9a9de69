//! faster-whisper's `generate_with_fallback`: decode at rising temperatures until the result
//! is neither too repetitive nor too unlikely (transcribe.py, `generate_with_fallback`).

use std::io::Write;

use flate2::write::ZlibEncoder;
use flate2::Compression;

use crate::greedy::{DecodeTask, DecodingResult, Rng, Sampling, Search};
use crate::inference::Inference;
use crate::tokenizer::Tokenizer;
use crate::Result;

/// The thresholds of the fallback, with faster-whisper's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct FallbackOptions {
    /// Tried in order; 0 decodes greedily, above samples `best_of` candidates.
    pub temperatures: Vec<f64>,
    /// Candidates per sampled temperature.
    pub best_of: usize,
    /// Sampled candidates are ranked by `sum_logprob / len^length_penalty`.
    pub length_penalty: f64,
    /// Retry when the text's zlib compression ratio is above this.
    pub compression_ratio_threshold: Option<f64>,
    /// Retry when a result of more than [`ENTROPY_TOKENS`] tokens has its last that many
    /// spread below this entropy (whisper.cpp's `entropy_thold`; nats). As in whisper.cpp,
    /// the searches also judge each beam or sampled candidate by it before choosing one.
    pub entropy_threshold: Option<f64>,
    /// Retry when the average log-probability is below this.
    pub log_prob_threshold: Option<f64>,
    /// With `log_prob_threshold`: a likely-silent window (no-speech probability above this and
    /// average log-probability below that) is accepted as is.
    pub no_speech_threshold: Option<f64>,
}

impl Default for FallbackOptions {
    fn default() -> Self {
        FallbackOptions {
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            best_of: 5,
            length_penalty: 1.0,
            compression_ratio_threshold: Some(2.4),
            entropy_threshold: None,
            log_prob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
        }
    }
}

/// The kept decoding, and what the window loop needs of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    /// The chosen result.
    pub result: DecodingResult,
    /// Temperature of the last attempt (faster-whisper passes it on for the prompt reset
    /// rule, even when an earlier attempt was kept).
    pub temperature: f64,
    /// Compression ratio of the chosen result's text.
    pub compression_ratio: f64,
    /// Every temperature failed the thresholds: the result is the least bad attempt.
    pub exhausted: bool,
}

/// `len(text) / len(zlib.compress(text))` over UTF-8 bytes, zlib level 6 as Python's default.
pub fn compression_ratio(text: &str) -> f64 {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::new(6));
    // Writing to a Vec cannot fail.
    let compressed = z
        .write_all(text.as_bytes())
        .and_then(|_| z.finish())
        .unwrap_or_default();
    text.len() as f64 / compressed.len().max(1) as f64
}

/// Tokens whose spread [`token_entropy`] measures: whisper.cpp's last 32.
pub const ENTROPY_TOKENS: usize = 32;

/// The entropy (nats) of how the last [`ENTROPY_TOKENS`] of `tokens` are spread over
/// distinct ids, as whisper.cpp measures a decoding's repetition: low when a few tokens
/// repeat. None for results no longer than that, which whisper.cpp does not judge.
pub fn token_entropy(tokens: &[u32]) -> Option<f64> {
    if tokens.len() <= ENTROPY_TOKENS {
        return None;
    }
    let mut last = tokens[tokens.len() - ENTROPY_TOKENS..].to_vec();
    last.sort_unstable();
    let n = ENTROPY_TOKENS as f64;
    let entropy = last
        .chunk_by(|a, b| a == b)
        .map(|run| {
            let p = run.len() as f64 / n;
            -p * p.ln()
        })
        .sum();
    Some(entropy)
}

/// Whether `tokens` fail whisper.cpp's entropy test at `threshold` (none: never).
pub(crate) fn low_entropy(tokens: &[u32], threshold: Option<f64>) -> bool {
    threshold.is_some_and(|h| token_entropy(tokens).is_some_and(|e| e < h))
}

/// Decodes `task` at each temperature in turn until one passes the thresholds; if none does,
/// keeps the best average log-probability among those the repetition tests (compression
/// ratio, entropy) passed, or among all when those are off or none passed. `zero` decodes
/// at temperature 0 (greedy or beam search).
pub fn generate_with_fallback(
    inf: &mut dyn Inference,
    tok: &Tokenizer,
    task: &DecodeTask,
    opts: &FallbackOptions,
    zero: &mut dyn Search,
    rng: &mut Rng,
) -> Result<Fallback> {
    let mut all: Vec<Fallback> = Vec::new();
    let mut not_repetitive: Vec<usize> = Vec::new();
    let mut temperature = 0.0;
    for &t in &opts.temperatures {
        temperature = t;
        let result = if t > 0.0 {
            Sampling {
                temperature: t,
                best_of: opts.best_of,
                length_penalty: opts.length_penalty,
                entropy_threshold: opts.entropy_threshold,
                rng: &mut *rng,
            }
            .search(inf, task)?
        } else {
            zero.search(inf, task)?
        };
        let compression_ratio = compression_ratio(tok.decode(&result.tokens).trim());
        // Too repetitive, by each test that is on.
        let repetitive = [
            opts.compression_ratio_threshold
                .map(|cr| compression_ratio > cr),
            opts.entropy_threshold
                .map(|_| low_entropy(&result.tokens, opts.entropy_threshold)),
        ];
        let mut needs_fallback = repetitive.contains(&Some(true));
        if !needs_fallback && repetitive.iter().any(Option::is_some) {
            not_repetitive.push(all.len());
        }
        let low_logprob = opts
            .log_prob_threshold
            .is_some_and(|lp| result.avg_logprob < lp);
        if low_logprob {
            needs_fallback = true;
        }
        if low_logprob
            && opts
                .no_speech_threshold
                .is_some_and(|ns| result.no_speech_prob > ns)
        {
            needs_fallback = false; // silence
        }
        let done = Fallback {
            result,
            temperature: t,
            compression_ratio,
            exhausted: false,
        };
        if !needs_fallback {
            return Ok(done);
        }
        all.push(done);
    }
    // Every temperature failed: the best average log-probability, first on ties (Python's max).
    let pool: Vec<usize> = if not_repetitive.is_empty() {
        (0..all.len()).collect()
    } else {
        not_repetitive
    };
    let mut best = *pool.first().ok_or(crate::DecodeError::InvalidOption {
        name: "temperatures",
        reason: "the list is empty".into(),
    })?;
    for &i in &pool {
        if all[i].result.avg_logprob > all[best].result.avg_logprob {
            best = i;
        }
    }
    let mut kept = all.swap_remove(best);
    kept.temperature = temperature;
    kept.exhausted = true;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::greedy::Greedy;
    use crate::mock::{one_hot, MockInference};
    use crate::tokenizer::tests::toy;

    #[test]
    fn compression_ratio_matches_python_zlib() {
        // Values from Python 3.11's zlib (faster-whisper's get_compression_ratio).
        let golden = [
            (
                "the the the the the the the the the the the the the the the the the the the",
                5.0,
            ),
            ("x", 1.0 / 9.0),
            ("", 0.0),
        ];
        for (text, ratio) in golden {
            assert!((compression_ratio(text) - ratio).abs() < 1e-12, "{text:?}");
        }
    }

    fn tok_and_task() -> (crate::Tokenizer, Vec<u32>) {
        let tok = toy(&[], 99);
        let prompt = vec![tok.sot()];
        (tok, prompt)
    }

    /// A window of at most 60 tokens after `prompt`, no filters.
    fn task<'a>(tok: &crate::Tokenizer, prompt: &'a [u32]) -> DecodeTask<'a> {
        DecodeTask {
            prompt,
            sot_index: 0,
            forced: &[],
            eot: tok.eot(),
            no_speech: tok.no_speech(),
            max_steps: 60,
            filters: &[],
        }
    }

    #[test]
    fn repetitive_text_falls_back_to_sampling() {
        let (tok, prompt) = tok_and_task();
        let n = tok.n_vocab();
        let eot = tok.eot();
        // Greedy: 'a' forever (ratio high). Any temperature > 0: "hi" then eot, as the
        // mock sees whether it is being sampled by its logits alone; so script by attempt.
        let calls = std::rc::Rc::new(std::cell::Cell::new(0usize));
        let c = calls.clone();
        let mut inf = MockInference::new(n, move |ctx| {
            if ctx.generated.is_empty() && ctx.position + 1 == ctx.sequence.len() {
                c.set(c.get() + 1);
            }
            let next = if c.get() <= 1 {
                b'a' as u32
            } else {
                b"hi"
                    .get(ctx.generated.len())
                    .map_or(eot, |b| u32::from(*b))
            };
            one_hot(n, next, 40.0)
        });
        inf.encode(&[]).unwrap();
        let task = task(&tok, &prompt);
        let mut rng = Rng::new(0);
        let opts = FallbackOptions {
            best_of: 1,
            ..Default::default()
        };
        let f =
            generate_with_fallback(&mut inf, &tok, &task, &opts, &mut Greedy, &mut rng).unwrap();
        assert_eq!(tok.decode(&f.result.tokens), "hi");
        assert_eq!(f.temperature, 0.2);
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn token_entropy_measures_the_last_32_tokens_spread() {
        assert_eq!(token_entropy(&[7; 32]), None);
        assert_eq!(token_entropy(&[7; 33]), Some(0.0));
        let distinct: Vec<u32> = (0..40).collect();
        let e = token_entropy(&distinct).unwrap();
        assert!((e - 32f64.ln()).abs() < 1e-12, "{e}");
        // Two tokens in turn: ln 2, whatever came before the last 32.
        let ab: Vec<u32> = (0..50).map(|i| i % 2).collect();
        assert!((token_entropy(&ab).unwrap() - 2f64.ln()).abs() < 1e-12);
    }

    /// whisper.cpp's entropy test alone (no compression test): a greedy "abab..." loop is
    /// retried by sampling; without the test it stands.
    #[test]
    fn low_entropy_falls_back_like_a_high_compression_ratio() {
        let (tok, prompt) = tok_and_task();
        let n = tok.n_vocab();
        let eot = tok.eot();
        let run = |entropy_threshold| {
            let calls = std::rc::Rc::new(std::cell::Cell::new(0usize));
            let c = calls.clone();
            let mut inf = MockInference::new(n, move |ctx| {
                if ctx.generated.is_empty() && ctx.position + 1 == ctx.sequence.len() {
                    c.set(c.get() + 1);
                }
                let k = ctx.generated.len();
                let next = match (c.get(), k) {
                    (1, 0..40) => [b'a', b'b'][k % 2] as u32,
                    (1, _) => eot,
                    _ => b"hi".get(k).map_or(eot, |b| u32::from(*b)),
                };
                one_hot(n, next, 40.0)
            });
            inf.encode(&[]).unwrap();
            let task = task(&tok, &prompt);
            let opts = FallbackOptions {
                best_of: 1,
                compression_ratio_threshold: None,
                entropy_threshold,
                ..Default::default()
            };
            let mut rng = Rng::new(0);
            generate_with_fallback(&mut inf, &tok, &task, &opts, &mut Greedy, &mut rng).unwrap()
        };
        let f = run(Some(2.4));
        assert_eq!(
            (tok.decode(&f.result.tokens).as_str(), f.temperature),
            ("hi", 0.2)
        );
        let f = run(None);
        assert_eq!((f.result.tokens.len(), f.temperature), (40, 0.0));
    }

    #[test]
    fn all_failing_keeps_best_logprob_and_reports_last_temperature() {
        let (tok, prompt) = tok_and_task();
        let n = tok.n_vocab();
        let eot = tok.eot();
        // Flat logits: every attempt is unlikely (avg logprob ~ -ln n), nothing is silent.
        let mut inf = MockInference::new(n, move |ctx| {
            if ctx.generated.len() >= 3 {
                one_hot(n, eot, 100.0)
            } else {
                vec![0.0; n]
            }
        });
        inf.encode(&[]).unwrap();
        let task = task(&tok, &prompt);
        let mut rng = Rng::new(5);
        let opts = FallbackOptions {
            best_of: 1,
            ..Default::default()
        };
        let f =
            generate_with_fallback(&mut inf, &tok, &task, &opts, &mut Greedy, &mut rng).unwrap();
        assert_eq!(f.temperature, 1.0);
        assert!(f.result.avg_logprob < -1.0);
        assert!(f.exhausted);
        // Silence: high no-speech probability with a low logprob stops at the first attempt.
        let ns = tok.no_speech();
        let mut inf = MockInference::new(n, move |ctx| {
            if ctx.position == 0 {
                one_hot(n, ns, 100.0)
            } else {
                vec![0.0; n]
            }
        });
        inf.encode(&[]).unwrap();
        let f =
            generate_with_fallback(&mut inf, &tok, &task, &opts, &mut Greedy, &mut rng).unwrap();
        assert_eq!(f.temperature, 0.0);
        assert!(f.result.no_speech_prob > 0.99);
        assert!(!f.exhausted);
        let none = FallbackOptions {
            temperatures: vec![],
            ..Default::default()
        };
        assert!(
            generate_with_fallback(&mut inf, &tok, &task, &none, &mut Greedy, &mut rng).is_err()
        );
    }
}
