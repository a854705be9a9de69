//! Whisper's tokenizer and decoding, with faster-whisper 1.2.1 as the behavioural reference.
//!
//! The model is only seen through [`Inference`]; everything here (tokenizer, logit filters,
//! greedy, beam and sampled decoding with temperature fallback, long-form segmentation) is plain Rust
//! and is tested against a scripted mock.
//!
//! Layout, after openai-whisper's `decoding.py`:
//! - [`tokenizer`]: byte-level BPE (tiktoken-exact) and Whisper's special tokens.
//! - [`filters`]: logit filters (repetition penalty, no-repeat n-grams, suppress blank /
//!   tokens, timestamp rules).
//! - [`shortlist`]: a row as greedy and beam search read it (the best few text tokens,
//!   the masked and special ones, the normalizer of the rest).
//! - [`greedy`]: one decoding pass (greedy at T = 0, best-of-N sampling at T > 0).
//! - [`beam`]: beam search at T = 0, as CTranslate2's.
//! - [`batched`]: many windows in shared decoder passes (faster-whisper's batched mode).
//! - [`fallback`]: faster-whisper's `generate_with_fallback`.
//! - [`transcribe`]: the 30 s window loop and timestamp-driven seeking.
//! - `segments`: cutting a window's tokens into segments, hallucination rules, length limits.
//! - [`align`]: word timestamps from the alignment heads' cross-attention.

pub mod align;
pub mod batched;
pub mod beam;
pub mod fallback;
pub mod filters;
pub mod grammar;
pub mod greedy;
pub mod inference;
mod math;
mod segments;
pub mod shortlist;
pub mod tokenizer;
pub mod transcribe;

#[cfg(test)]
mod mock;

pub use align::{default_alignment_heads, Word, APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS};
pub use batched::{batched_transcribe_language, decode_windows, transcribe_batched, Chunk};
pub use beam::BeamSearch;
pub use fallback::{compression_ratio, generate_with_fallback, Fallback, FallbackOptions};
pub use filters::{
    ApplyTimestampRules, LogitFilter, NoRepeatNgram, RepetitionPenalty, SuppressBlank,
    SuppressTokens, TextMasks,
};
pub use grammar::{Grammar, GrammarError, GrammarFilter};
pub use greedy::{DecodeTask, DecodingResult, Greedy, Rng, Sampling, Search};
pub use inference::{BoxError, Inference, LogitNeed};
pub use shortlist::{Row, Shortlist, ShortlistSpec, Shortlists};
pub use tokenizer::{
    language_code, language_name, special_token_texts, Task, Tokenizer, LANGUAGES, LANGUAGE_NAMES,
};
pub use transcribe::{
    detect_language, fallback_temperatures, regex_suppressed, suppressed_tokens, transcribe,
    transcribe_language, LanguageDetection, MelView, Segment, TranscribeOptions, Transcript,
    DEFAULT_SILENCE_FLOOR,
};

/// Errors of tokenizing and decoding. Messages name the input and the problem.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The vocabulary handed to [`Tokenizer::new`] cannot be Whisper's.
    #[error("vocabulary: {0}")]
    Vocab(String),
    /// A language code the model does not know.
    #[error("unknown language code {code:?}: the model knows {known} codes (\"en\", \"zh\", ...)")]
    UnknownLanguage { code: String, known: usize },
    /// An option out of its range.
    #[error("option {name}: {reason}")]
    InvalidOption { name: &'static str, reason: String },
    /// The log-mel input does not match its stated shape.
    #[error("log-mel input: {0}")]
    Mel(String),
    /// The model and the tokenizer disagree on the vocabulary size.
    #[error("model has {model} vocabulary entries but the tokenizer has {tokenizer}")]
    VocabMismatch { model: usize, tokenizer: usize },
    /// The model failed.
    #[error("inference: {0}")]
    Inference(#[source] BoxError),
}

/// This crate's result.
pub type Result<T, E = DecodeError> = std::result::Result<T, E>;
