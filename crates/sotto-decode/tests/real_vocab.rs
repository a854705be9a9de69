//! The tokenizer over the real vocabularies of tiny.en and base, against goldens from
//! faster-whisper 1.2.1 (scripts/goldens/tokenizer.py).

use std::collections::HashMap;

use serde_json::Value;
use sotto_decode::{compression_ratio, suppressed_tokens, Task, Tokenizer};

/// GPT-2's byte-to-unicode table, inverted: printable stand-in char -> byte.
fn unicode_to_byte() -> HashMap<char, u8> {
    let mut bs: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    cs.iter()
        .zip(&bs)
        .map(|(c, b)| (char::from_u32(*c).unwrap(), *b as u8))
        .collect()
}

/// The merges of the model's tokenizer.json, as bytes.
fn merges(model: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let path = sotto_testdata::model_dir(model).join("tokenizer.json");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let map = unicode_to_byte();
    let bytes = |s: &str| s.chars().map(|c| map[&c]).collect::<Vec<u8>>();
    j["model"]["merges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match m {
            Value::String(s) => {
                let (a, b) = s.split_once(' ').unwrap();
                (bytes(a), bytes(b))
            }
            _ => (bytes(m[0].as_str().unwrap()), bytes(m[1].as_str().unwrap())),
        })
        .collect()
}

/// The model's tokenizer with tokenizer.json's merges (faster-whisper's rule).
fn load_hf(model: &str) -> (Tokenizer, Vec<String>) {
    let (tok, lines) = load(model);
    let vocab: Vec<Vec<u8>> = (0..tok.eot()).map(|i| tok.decode_bytes(&[i])).collect();
    (
        Tokenizer::with_merges(vocab, tok.n_vocab(), &merges(model)).unwrap(),
        lines,
    )
}

/// The model's vocabulary.txt: ordinary tokens as bytes, and every line.
fn load(model: &str) -> (Tokenizer, Vec<String>) {
    let path = sotto_testdata::model_dir(model).join("vocabulary.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    // One token a line; base has an empty ordinary token (id 50256), so keep empty lines.
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let lines: Vec<String> = text.split('\n').map(String::from).collect();
    let eot = lines
        .iter()
        .position(|l| l == "<|endoftext|>")
        .expect("eot line");
    let map = unicode_to_byte();
    let vocab = lines[..eot]
        .iter()
        .map(|l| l.chars().map(|c| map[&c]).collect::<Vec<u8>>())
        .collect();
    (Tokenizer::new(vocab, lines.len()).unwrap(), lines)
}

fn golden(model: &str) -> Value {
    let path = sotto_testdata::golden(&format!("tokenizer_{model}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn check_model(model: &str, multilingual: bool) {
    let (tok, lines) = load_hf(model);
    let g = golden(model);
    assert_eq!(tok.is_multilingual(), multilingual);
    for (name, id) in [
        ("eot", tok.eot()),
        ("sot", tok.sot()),
        ("sot_prev", tok.sot_prev()),
        ("sot_lm", tok.sot_lm()),
        ("no_speech", tok.no_speech()),
        ("no_timestamps", tok.no_timestamps()),
        ("timestamp_begin", tok.timestamp_begin()),
        ("transcribe", tok.transcribe()),
        ("translate", tok.translate()),
    ] {
        assert_eq!(u64::from(id), g[name].as_u64().unwrap(), "{model} {name}");
    }
    // Language and timestamp tokens sit where the vocabulary file names them.
    for code in tok.languages() {
        let id = tok.language_token(code).unwrap();
        // tiny.en's vocabulary still calls Hebrew by its old code.
        let alias = if *code == "he" && lines[id as usize] == "<|iw|>" {
            "iw"
        } else {
            code
        };
        assert_eq!(lines[id as usize], format!("<|{alias}|>"), "{model}");
        assert_eq!(tok.language_code(id), Some(*code));
    }
    assert_eq!(lines[tok.timestamp_begin() as usize + 1500], "<|30.00|>");
    assert_eq!(
        tok.sot_sequence("en", Task::Transcribe).unwrap(),
        ids(&g["sot_sequence_en_transcribe"])
    );
    if multilingual {
        assert_eq!(
            tok.sot_sequence("fr", Task::Translate).unwrap(),
            ids(&g["sot_sequence_fr_translate"])
        );
    }

    for case in g["encode"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        assert_eq!(
            tok.encode(text),
            ids(&case["ids"]),
            "{model}: encode {text:?}"
        );
        assert_eq!(
            tok.decode(&tok.encode(text)),
            text,
            "{model}: round trip {text:?}"
        );
    }
    assert_eq!(
        tok.non_speech_tokens(),
        ids(&g["non_speech_tokens"]),
        "{model}"
    );
    assert_eq!(
        suppressed_tokens(&tok, &[-1]),
        ids(&g["suppress_tokens_default"]),
        "{model}"
    );
    let dwt = &g["decode_with_timestamps"];
    assert_eq!(
        tok.decode_with_timestamps(&ids(&dwt["ids"])),
        dwt["text"].as_str().unwrap()
    );
    for case in g["compression_ratio"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = case["ratio"].as_f64().unwrap();
        assert!((compression_ratio(text) - want).abs() < 1e-12, "{text:?}");
    }
}

#[test]
fn tiny_en_matches_faster_whisper() {
    check_model("tiny.en", false);
}

#[test]
fn base_matches_faster_whisper() {
    check_model("base", true);
}

#[test]
fn tiktoken_rule_agrees_where_the_merges_are_complete() {
    // tiny.en's tokenizer.json has every merge: both rules give faster-whisper's ids.
    let (tok, _) = load("tiny.en");
    for case in golden("tiny.en")["encode"].as_array().unwrap() {
        assert_eq!(
            tok.encode(case["text"].as_str().unwrap()),
            ids(&case["ids"])
        );
    }
    assert_eq!(
        tok.non_speech_tokens(),
        ids(&golden("tiny.en")["non_speech_tokens"])
    );
    // base's lacks "Ġ t": tiktoken (openai-whisper) and HF (faster-whisper) part ways.
    let (tiktoken, _) = load("base");
    let (hf, _) = load_hf("base");
    assert_eq!(tiktoken.encode(" they"), vec![436]);
    assert_eq!(hf.encode(" they"), vec![220, 13162]);
    assert_eq!(tiktoken.non_speech_tokens(), hf.non_speech_tokens());
}

#[test]
fn round_trips_on_varied_text() {
    let (tok, _) = load_hf("base");
    let texts = [
        "Ω≈ç√∫˜µ≤≥÷ åß∂ƒ©˙∆˚¬…æ œ∑´®†¥¨ˆøπ“‘",
        "  \t\n\r\n   mixed\u{3000}whitespace\u{2028}end  ",
        "🙂🙃 👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 zalgo Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇",
        "numbers: 0 00 000 1_000 -12.5e+3 ١٢٣ ½ ²",
        "'s 't 're 've 'm 'll 'd 'S 'T ''' \"\"",
        "",
    ];
    for t in texts {
        assert_eq!(tok.decode(&tok.encode(t)), t, "{t:?}");
    }
    // Byte-level: every single byte round trips through an incomplete-UTF-8 decode.
    assert_eq!(tok.decode(&tok.encode("é")[..1]).chars().count(), 1);
}
