//! openai-whisper's two tokenizers' ordinary tokens, which its `.pt` checkpoints do not
//! carry: `gpt2` (English-only models, 50 256 tokens) and `multilingual` (50 257).
//!
//! `data/<name>.tokens.gz` hold them in rank (= id) order, each as a length byte and its
//! bytes, written by `scripts/tiktoken-vocab.py` from openai-whisper's own
//! `whisper/assets/<name>.tiktoken`.

use std::io::Read;

static GPT2: &[u8] = include_bytes!("../data/gpt2.tokens.gz");
static MULTILINGUAL: &[u8] = include_bytes!("../data/multilingual.tokens.gz");

/// The ordinary tokens (ids below `<|endoftext|>`) of openai-whisper's tokenizer for an
/// English-only (`gpt2`) or a multilingual model.
pub fn ordinary_tokens(multilingual: bool) -> Vec<Vec<u8>> {
    let gz = if multilingual { MULTILINGUAL } else { GPT2 };
    let mut blob = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut blob)
        .expect("the embedded token lists decompress");
    let mut tokens = Vec::with_capacity(50257);
    let mut rest = &blob[..];
    while let Some((&n, tail)) = rest.split_first() {
        let (token, tail) = tail.split_at(usize::from(n));
        tokens.push(token.to_vec());
        rest = tail;
    }
    tokens
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_lists_have_their_sizes() {
        let (en, ml) = (super::ordinary_tokens(false), super::ordinary_tokens(true));
        assert_eq!((en.len(), ml.len()), (50256, 50257));
        assert_eq!(en[220], b" ");
        assert_eq!(ml[50256], b"", "multilingual's last token is empty");
    }
}
