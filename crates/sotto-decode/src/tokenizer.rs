//! Whisper's tokenizer: tiktoken-exact byte-level BPE over the GPT-2 pre-tokenization, plus the
//! special tokens laid out after the ordinary ones as openai's `tokenizer.py` does.
//!
//! Special token layout (n = number of ordinary tokens, L = number of languages):
//! `eot = n`, `sot = n+1`, languages `n+2 .. n+2+L`, then translate, transcribe, startoflm,
//! startofprev, nospeech, notimestamps, and the 1501 timestamps `<|0.00|>..<|30.00|>`.

/// foldhash's: building the tables hashes ~150 000 keys at every model load, which
/// SipHash made a third of the tokenizer's load time.
type HashMap<K, V> = foldhash::HashMap<K, V>;

use regex::Regex;

use crate::{DecodeError, Result};

/// Language codes in openai's order (`whisper/tokenizer.py` LANGUAGES); the language token of
/// `LANGUAGES[i]` is `sot + 1 + i`. Models with 99 languages stop before "yue".
pub const LANGUAGES: [&str; 100] = [
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it",
    "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur",
    "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn",
    "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si",
    "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo",
    "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln",
    "ha", "ba", "jw", "su", "yue",
];

/// English names of [`LANGUAGES`], index for index (openai's `LANGUAGES` values), as
/// openai-whisper's `verbose_json` and OpenAI's transcription API report a language.
pub const LANGUAGE_NAMES: [&str; 100] = [
    "english",
    "chinese",
    "german",
    "spanish",
    "russian",
    "korean",
    "french",
    "japanese",
    "portuguese",
    "turkish",
    "polish",
    "catalan",
    "dutch",
    "arabic",
    "swedish",
    "italian",
    "indonesian",
    "hindi",
    "finnish",
    "vietnamese",
    "hebrew",
    "ukrainian",
    "greek",
    "malay",
    "czech",
    "romanian",
    "danish",
    "hungarian",
    "tamil",
    "norwegian",
    "thai",
    "urdu",
    "croatian",
    "bulgarian",
    "lithuanian",
    "latin",
    "maori",
    "malayalam",
    "welsh",
    "slovak",
    "telugu",
    "persian",
    "latvian",
    "bengali",
    "serbian",
    "azerbaijani",
    "slovenian",
    "kannada",
    "estonian",
    "macedonian",
    "breton",
    "basque",
    "icelandic",
    "armenian",
    "nepali",
    "mongolian",
    "bosnian",
    "kazakh",
    "albanian",
    "swahili",
    "galician",
    "marathi",
    "punjabi",
    "sinhala",
    "khmer",
    "shona",
    "yoruba",
    "somali",
    "afrikaans",
    "occitan",
    "georgian",
    "belarusian",
    "tajik",
    "sindhi",
    "gujarati",
    "amharic",
    "yiddish",
    "lao",
    "uzbek",
    "faroese",
    "haitian creole",
    "pashto",
    "turkmen",
    "nynorsk",
    "maltese",
    "sanskrit",
    "luxembourgish",
    "myanmar",
    "tibetan",
    "tagalog",
    "malagasy",
    "assamese",
    "tatar",
    "hawaiian",
    "lingala",
    "hausa",
    "bashkir",
    "javanese",
    "sundanese",
    "cantonese",
];

/// The English name of a language code (`"de"` → `"german"`).
pub fn language_name(code: &str) -> Option<&'static str> {
    LANGUAGES
        .iter()
        .position(|&c| c == code)
        .map(|i| LANGUAGE_NAMES[i])
}

/// The code of a language given by code or English name, any case (`"German"` → `"de"`).
pub fn language_code(code_or_name: &str) -> Option<&'static str> {
    let key = code_or_name.trim().to_ascii_lowercase();
    LANGUAGES
        .iter()
        .zip(LANGUAGE_NAMES)
        .find(|(c, n)| **c == key || *n == key)
        .map(|(c, _)| *c)
}

/// The texts of the special tokens of a vocabulary of `n_vocab` entries whose first
/// `n_ordinary` are ordinary tokens, in id order from `<|endoftext|>`: as CTranslate2's
/// `vocabulary.txt` lists them, after the Hugging Face vocabularies it converts
/// (`<|iw|>` for Hebrew, `<|nocaptions|>` for no-speech). None when the count leaves no
/// whole set of languages.
pub fn special_token_texts(n_vocab: usize, n_ordinary: usize) -> Option<Vec<String>> {
    let n_languages = n_vocab.checked_sub(n_ordinary + 2 + N_TASK_SPECIALS + N_TIMESTAMPS)?;
    if n_languages > LANGUAGES.len() {
        return None;
    }
    let mut out = vec![
        "<|endoftext|>".to_string(),
        "<|startoftranscript|>".to_string(),
    ];
    out.extend(LANGUAGES[..n_languages].iter().map(|&l| {
        let l = if l == "he" { "iw" } else { l };
        format!("<|{l}|>")
    }));
    out.extend(
        [
            "translate",
            "transcribe",
            "startoflm",
            "startofprev",
            "nocaptions",
            "notimestamps",
        ]
        .iter()
        .map(|t| format!("<|{t}|>")),
    );
    out.extend((0..N_TIMESTAMPS).map(|i| format!("<|{:.2}|>", i as f64 * 0.02)));
    Some(out)
}

/// Number of timestamp tokens: `<|0.00|>` to `<|30.00|>` by 0.02 s.
pub const N_TIMESTAMPS: usize = 1501;

/// Special tokens between the languages and the timestamps.
const N_TASK_SPECIALS: usize = 6;

/// GPT-2's pre-tokenization pattern without the `\s+(?!\S)` alternative, which
/// [`Tokenizer::pieces`] restores by post-processing whitespace runs.
const PRETOKENIZE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

/// Whisper's task token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Task {
    /// `<|transcribe|>`: text in the spoken language.
    #[default]
    Transcribe,
    /// `<|translate|>`: English text.
    Translate,
}

/// Whisper's tokenizer. Cheap to share; immutable after [`Tokenizer::new`].
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// Bytes of the ordinary tokens; index = token id.
    vocab: Vec<Vec<u8>>,
    /// Byte sequence -> token id, which is also its BPE merge rank (tiktoken's rule).
    ranks: HashMap<Vec<u8>, u32>,
    /// HF `tokenizers` merges, `(left id, right id) -> (rank, merged id)`; None: tiktoken's
    /// rule (any adjacent pair whose bytes are a token, ranked by that token's id).
    merges: Option<HashMap<(u32, u32), (u32, u32)>>,
    /// Token of each single byte.
    byte_ids: [u32; 256],
    n_vocab: usize,
    n_languages: usize,
    pretokenize: Regex,
}

impl Tokenizer {
    /// Builds the tokenizer from the raw bytes of the ordinary tokens (ids `0..vocab.len()`)
    /// and the model's full vocabulary size, from which the number of languages follows.
    pub fn new(vocab: Vec<Vec<u8>>, n_vocab: usize) -> Result<Tokenizer> {
        let specials = 2 + N_TASK_SPECIALS + N_TIMESTAMPS;
        let n_languages = n_vocab.checked_sub(vocab.len() + specials).ok_or_else(|| {
            DecodeError::Vocab(format!(
                "{} ordinary tokens plus {specials} special tokens exceed n_vocab {n_vocab}",
                vocab.len()
            ))
        })?;
        if n_languages == 0 || n_languages > LANGUAGES.len() {
            return Err(DecodeError::Vocab(format!(
                "n_vocab {n_vocab} with {} ordinary tokens leaves {n_languages} language tokens \
                 (expected 1..={})",
                vocab.len(),
                LANGUAGES.len()
            )));
        }
        let mut ranks = HashMap::with_capacity_and_hasher(vocab.len(), Default::default());
        for (id, bytes) in vocab.iter().enumerate() {
            // A duplicate keeps the lower id, the rank BPE would reach first.
            ranks.entry(bytes.clone()).or_insert(id as u32);
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            *slot = *ranks.get(&[b as u8][..]).ok_or_else(|| {
                DecodeError::Vocab(format!("byte 0x{b:02x} has no token of its own"))
            })?;
        }
        let pretokenize = Regex::new(PRETOKENIZE).expect("the pre-tokenization pattern is valid");
        Ok(Tokenizer {
            vocab,
            ranks,
            merges: None,
            byte_ids,
            n_vocab,
            n_languages,
            pretokenize,
        })
    }

    /// Like [`new`](Self::new), but merging only the listed pairs, in list order, as HF
    /// `tokenizers` does with a `tokenizer.json` (what faster-whisper uses). The two differ
    /// where the list lacks a merge: the multilingual models' `tokenizer.json` has no
    /// `"Ġ t"`, so faster-whisper encodes `" they"` as `[" ", "they"]` where tiktoken gives
    /// `[" they"]`. `merges`: the byte strings of each pair, best first.
    pub fn with_merges(
        vocab: Vec<Vec<u8>>,
        n_vocab: usize,
        merges: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Tokenizer> {
        let mut tok = Tokenizer::new(vocab, n_vocab)?;
        let mut table = HashMap::with_capacity_and_hasher(merges.len(), Default::default());
        let mut joined = Vec::new();
        for (rank, (a, b)) in merges.iter().enumerate() {
            let id = |bytes: &[u8]| tok.ranks.get(bytes).copied();
            joined.clear();
            joined.extend_from_slice(a);
            joined.extend_from_slice(b);
            match (id(a), id(b), id(&joined)) {
                (Some(l), Some(r), Some(m)) => {
                    table.entry((l, r)).or_insert((rank as u32, m));
                }
                _ => {
                    return Err(DecodeError::Vocab(format!(
                        "merge {rank} ({:?} + {:?}) names bytes that are not tokens",
                        String::from_utf8_lossy(a),
                        String::from_utf8_lossy(b)
                    )))
                }
            }
        }
        tok.merges = Some(table);
        Ok(tok)
    }

    /// The model's full vocabulary size (logits per row).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
    /// Whether the model has language and task tokens in its start sequence (n_vocab >= 51865).
    pub fn is_multilingual(&self) -> bool {
        self.n_vocab >= 51865
    }
    /// Number of language tokens in the vocabulary (99 or 100; English-only models have 99).
    pub fn n_languages(&self) -> usize {
        self.n_languages
    }
    /// The language codes of this vocabulary, in token order.
    pub fn languages(&self) -> &'static [&'static str] {
        &LANGUAGES[..self.n_languages]
    }
    /// `<|endoftext|>`; every id below it is an ordinary text token.
    pub fn eot(&self) -> u32 {
        self.vocab.len() as u32
    }
    /// `<|startoftranscript|>`.
    pub fn sot(&self) -> u32 {
        self.eot() + 1
    }
    fn after_languages(&self) -> u32 {
        self.sot() + 1 + self.n_languages as u32
    }
    /// `<|translate|>`.
    pub fn translate(&self) -> u32 {
        self.after_languages()
    }
    /// `<|transcribe|>`.
    pub fn transcribe(&self) -> u32 {
        self.after_languages() + 1
    }
    /// `<|startoflm|>`.
    pub fn sot_lm(&self) -> u32 {
        self.after_languages() + 2
    }
    /// `<|startofprev|>`.
    pub fn sot_prev(&self) -> u32 {
        self.after_languages() + 3
    }
    /// `<|nospeech|>` (named `<|nocaptions|>` in older vocabularies).
    pub fn no_speech(&self) -> u32 {
        self.after_languages() + 4
    }
    /// `<|notimestamps|>`.
    pub fn no_timestamps(&self) -> u32 {
        self.after_languages() + 5
    }
    /// `<|0.00|>`; timestamp `t` is `timestamp_begin + t / 0.02`.
    pub fn timestamp_begin(&self) -> u32 {
        self.after_languages() + 6
    }
    /// The task's token.
    pub fn task_token(&self, task: Task) -> u32 {
        match task {
            Task::Transcribe => self.transcribe(),
            Task::Translate => self.translate(),
        }
    }

    /// The token of a language code (`"en"` -> `<|en|>`), if this vocabulary has it.
    pub fn language_token(&self, code: &str) -> Option<u32> {
        let i = self.languages().iter().position(|c| *c == code)?;
        Some(self.sot() + 1 + i as u32)
    }

    /// The code of a language token, if `token` is one.
    pub fn language_code(&self, token: u32) -> Option<&'static str> {
        let i = token.checked_sub(self.sot() + 1)? as usize;
        self.languages().get(i).copied()
    }

    /// The start sequence as faster-whisper's `Tokenizer.sot_sequence`: `[sot, language, task]`
    /// for multilingual models, `[sot]` for English-only ones (which take neither).
    pub fn sot_sequence(&self, language: &str, task: Task) -> Result<Vec<u32>> {
        if !self.is_multilingual() {
            return Ok(vec![self.sot()]);
        }
        let lang = self
            .language_token(language)
            .ok_or_else(|| DecodeError::UnknownLanguage {
                code: language.to_string(),
                known: self.n_languages,
            })?;
        Ok(vec![self.sot(), lang, self.task_token(task)])
    }

    /// Text of `tokens`: the bytes of the ordinary tokens joined, then UTF-8 with U+FFFD for
    /// invalid or incomplete sequences (tiktoken's `errors="replace"`). Special tokens and
    /// timestamps are skipped, as faster-whisper's `decode` does.
    pub fn decode(&self, tokens: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(tokens)).into_owned()
    }

    /// The bytes of the ordinary tokens in `tokens`, joined (no UTF-8 repair).
    pub fn decode_bytes(&self, tokens: &[u32]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for &t in tokens {
            if let Some(b) = self.vocab.get(t as usize) {
                bytes.extend_from_slice(b);
            }
        }
        bytes
    }

    /// Like [`decode`](Self::decode) but writes timestamps as `<|1.23|>`
    /// (faster-whisper's `decode_with_timestamps`).
    pub fn decode_with_timestamps(&self, tokens: &[u32]) -> String {
        let tb = self.timestamp_begin();
        let mut out = String::new();
        let mut run = Vec::new();
        for &t in tokens {
            if t >= tb {
                out.push_str(&self.decode(&run));
                run.clear();
                out.push_str(&format!("<|{:.2}|>", f64::from(t - tb) * 0.02));
            } else {
                run.push(t);
            }
        }
        out.push_str(&self.decode(&run));
        out
    }

    /// Ordinary tokens of `text`; special-token names in `text` are plain text.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for piece in self.pieces(text) {
            self.bpe(piece.as_bytes(), &mut out);
        }
        out
    }

    /// Splits `text` as GPT-2's pattern does. The regex lacks `\s+(?!\S)`, so a whitespace
    /// run followed by a non-space gives up its last character, which then starts the next
    /// piece (` word`) or stands alone (`\n`), as the lookahead would have it.
    fn pieces<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let mut end = match self.pretokenize.find_at(text, pos) {
                Some(m) if m.start() == pos && m.end() > pos => m.end(),
                // Unreachable: `\s+` or `[^\s\p{L}\p{N}]+` matches any character.
                _ => pos + text[pos..].chars().next().map_or(1, char::len_utf8),
            };
            let run = &text[pos..end];
            if end < text.len() && run.chars().all(char::is_whitespace) {
                let last = run.chars().next_back().map_or(0, char::len_utf8);
                if run.len() > last {
                    end -= last;
                }
            }
            pieces.push(&text[pos..end]);
            pos = end;
        }
        pieces
    }

    /// Byte-pair encodes one piece: repeatedly merges the adjacent pair whose concatenation
    /// has the lowest rank (leftmost on ties), as tiktoken does.
    fn bpe(&self, piece: &[u8], out: &mut Vec<u32>) {
        if let Some(merges) = &self.merges {
            return self.bpe_merges(merges, piece, out);
        }
        if let Some(&id) = self.ranks.get(piece) {
            out.push(id);
            return;
        }
        // Part boundaries: part i is piece[bounds[i]..bounds[i + 1]].
        let mut bounds: Vec<usize> = (0..=piece.len()).collect();
        loop {
            let mut best: Option<(u32, usize)> = None;
            for i in 0..bounds.len().saturating_sub(2) {
                if let Some(&rank) = self.ranks.get(&piece[bounds[i]..bounds[i + 2]]) {
                    if best.is_none_or(|(r, _)| rank < r) {
                        best = Some((rank, i));
                    }
                }
            }
            match best {
                Some((_, i)) => {
                    bounds.remove(i + 1);
                }
                None => break,
            }
        }
        for w in bounds.windows(2) {
            // Every part is a single byte or a merge found in `ranks`.
            if let Some(&id) = self.ranks.get(&piece[w[0]..w[1]]) {
                out.push(id);
            }
        }
    }

    /// HF's BPE: starts from the bytes' tokens and merges the listed pair of lowest rank,
    /// leftmost first, even when the whole piece is a token (`ignore_merges` is off).
    fn bpe_merges(
        &self,
        merges: &HashMap<(u32, u32), (u32, u32)>,
        piece: &[u8],
        out: &mut Vec<u32>,
    ) {
        let mut ids: Vec<u32> = piece.iter().map(|&b| self.byte_ids[b as usize]).collect();
        loop {
            let best = ids
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| merges.get(&(w[0], w[1])).map(|&(rank, m)| (rank, i, m)))
                .min_by_key(|&(rank, i, _)| (rank, i));
            let Some((_, i, merged)) = best else { break };
            ids[i] = merged;
            ids.remove(i + 1);
        }
        out.extend(ids);
    }

    /// Tokens that start speaker tags or non-speech annotations (`♪`, `[`, `(`...), as
    /// faster-whisper's `Tokenizer.non_speech_tokens` computes them. Sorted, unique.
    pub fn non_speech_tokens(&self) -> Vec<u32> {
        let mut symbols: Vec<String> = "\"#()*+/:;<=>@[\\]^_`{|}~「」『』"
            .chars()
            .map(String::from)
            .collect();
        symbols.extend(
            "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪"
                .split(' ')
                .map(String::from),
        );
        // U+2640..U+267F: when split, their first token is safe to suppress.
        let miscellaneous = ["♩", "♪", "♫", "♬", "♭", "♮", "♯"];
        let mut result: Vec<u32> = [" -", " '"]
            .iter()
            .filter_map(|s| self.encode(s).first().copied())
            .collect();
        let all = symbols.iter().map(|s| (s.as_str(), false));
        for (symbol, misc) in all.chain(miscellaneous.iter().map(|s| (*s, true))) {
            for tokens in [self.encode(symbol), self.encode(&format!(" {symbol}"))] {
                if tokens.len() == 1 || (misc && !tokens.is_empty()) {
                    result.push(tokens[0]);
                }
            }
        }
        result.sort_unstable();
        result.dedup();
        result
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A toy vocabulary: the 256 bytes (id = byte) then a few merges.
    pub(crate) fn toy(merges: &[&str], n_languages: usize) -> Tokenizer {
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        vocab.extend(merges.iter().map(|m| m.as_bytes().to_vec()));
        let n = vocab.len() + 2 + n_languages + N_TASK_SPECIALS + N_TIMESTAMPS;
        Tokenizer::new(vocab, n).unwrap()
    }

    #[test]
    fn special_token_texts_follow_the_layout() {
        let t = special_token_texts(51864, 50256).unwrap();
        assert_eq!(t.len(), 51864 - 50256);
        assert_eq!(t[0], "<|endoftext|>");
        assert_eq!(t[2], "<|en|>");
        assert_eq!(t[2 + 20], "<|iw|>");
        assert_eq!(t[2 + 99], "<|translate|>");
        assert_eq!(t[2 + 99 + 5], "<|notimestamps|>");
        assert_eq!(t.last().unwrap(), "<|30.00|>");
        assert_eq!(t[t.len() - 2], "<|29.98|>");
        assert_eq!(special_token_texts(51866, 50257).unwrap()[101], "<|yue|>");
        assert!(special_token_texts(100, 50256).is_none());
        assert!(special_token_texts(60000, 50256).is_none());
    }

    #[test]
    fn language_names_and_codes() {
        assert_eq!(language_name("en"), Some("english"));
        assert_eq!(language_name("haw"), Some("hawaiian"));
        assert_eq!(language_name("yue"), Some("cantonese"));
        assert_eq!(language_name("xx"), None);
        assert_eq!(language_code("German"), Some("de"));
        assert_eq!(language_code(" ht "), Some("ht"));
        assert_eq!(language_code("haitian creole"), Some("ht"));
        assert_eq!(language_code("klingon"), None);
        // Names are unique, and no name is another language's code.
        let mut names = LANGUAGE_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), LANGUAGES.len());
        assert!(LANGUAGE_NAMES.iter().all(|n| !LANGUAGES.contains(n)));
    }

    #[test]
    fn merges_follow_rank_not_position() {
        // "bc" (rank 257) beats "ab" (rank 258): a|bc, then "abc" is unknown.
        let tok = toy(&["xx", "bc", "ab"], 99);
        assert_eq!(tok.encode("abc"), vec![b'a' as u32, 257]);
        let tok = toy(&["ab", "bc", "abc"], 99);
        assert_eq!(tok.encode("abc"), vec![258]);
        assert_eq!(tok.decode(&tok.encode("abcab")), "abcab");
    }

    #[test]
    fn whitespace_runs_give_their_last_char_to_the_next_word() {
        let tok = toy(&[], 99);
        assert_eq!(tok.pieces("a  b"), vec!["a", " ", " b"]);
        assert_eq!(tok.pieces("a \nb"), vec!["a", " ", "\n", "b"]);
        assert_eq!(tok.pieces("a  "), vec!["a", "  "]);
        assert_eq!(
            tok.pieces("it's 12 ok!?"),
            vec!["it", "'s", " 12", " ok", "!?"]
        );
        assert_eq!(tok.pieces("\n\nx"), vec!["\n", "\n", "x"]);
    }

    #[test]
    fn special_layout_and_languages() {
        let tok = toy(&[], 99);
        assert_eq!(tok.eot(), 256);
        assert_eq!(tok.sot(), 257);
        assert_eq!(tok.language_token("en"), Some(258));
        assert_eq!(tok.language_code(258 + 98), Some("su"));
        assert_eq!(tok.language_token("yue"), None);
        assert_eq!(tok.translate(), 258 + 99);
        assert_eq!(tok.timestamp_begin(), tok.no_timestamps() + 1);
        assert_eq!(tok.timestamp_begin() as usize + N_TIMESTAMPS, tok.n_vocab());
        let tok = toy(&[], 100);
        assert_eq!(tok.language_code(tok.sot() + 100), Some("yue"));
        assert!(Tokenizer::new(vec![vec![0]; 10], 20).is_err());
        let missing_byte: Vec<Vec<u8>> = (0..255u8).map(|b| vec![b]).collect();
        assert!(Tokenizer::new(missing_byte, 255 + 99 + 1509).is_err());
    }

    #[test]
    fn decode_replaces_incomplete_utf8_and_skips_specials() {
        let tok = toy(&[], 99);
        let e = "é".as_bytes();
        assert_eq!(tok.decode(&[e[0] as u32]), "\u{fffd}");
        assert_eq!(tok.decode(&[e[0] as u32, tok.sot(), e[1] as u32]), "é");
        let tb = tok.timestamp_begin();
        let ids = [tb, b'h' as u32, b'i' as u32, tb + 1500];
        assert_eq!(tok.decode_with_timestamps(&ids), "<|0.00|>hi<|30.00|>");
        assert_eq!(tok.decode(&[u32::MAX]), "");
    }
}
