#!/usr/bin/env python3
"""Writes tests/golden/tokenizer_<model>.json: the reference tokenizer's answers for sotto-decode.

The reference is faster-whisper 1.2.1's Tokenizer over the model's tokenizer.json (HF `tokenizers`),
plus faster-whisper's get_compression_ratio (Python's zlib) for the fallback rule.

Usage: python3 scripts/goldens/tokenizer.py   (models from ~/.cache/sotto/models/<name>/)
"""

import json
import os
import pathlib

import tokenizers
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

ROOT = pathlib.Path(__file__).resolve().parents[2]
CACHE = pathlib.Path(
    os.environ.get("SOTTO_CACHE_DIR")
    or pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "sotto"
)

TEXTS = [
    "",
    " ",
    "Hello world",
    " And so my fellow Americans, ask not what your country can do for you.",
    "ask what you can do for your country.",
    "It's 3:45pm; they'll say we've won 1,234,567 votes (99.5%)!",
    "multiple   spaces  here",
    "trailing spaces   ",
    "   leading spaces",
    "new\nlines\n\n\nand\ttabs\t\t x",
    "line end \n next",
    "Ünïcödé: naïve café, Straße, Ελληνικά, русский текст",
    "日本語のテキストと中文文本，还有한국어.",
    "emoji 🎉🚀 and symbols ♪♫ ♬ «quotes» — dashes – ellipsis…",
    "I'M SHOUTING, DON'T YOU'LL WE'D",
    "don't won't can't shouldn't y'all 'tis",
    "1234567890 3.14159 1e10 0x1F",
    # Not "<|endoftext|>" in text: HF emits the special token, sotto (like tiktoken's
    # encode_ordinary) encodes the characters.
    "  \n  \n",
    "a\u00a0b\u2003c",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Mr. O'Neil said: \"Well—hmm... OK?!\" [laughs] (applause) ♪ music ♪",
]

COMPRESSION_TEXTS = [
    "And so my fellow Americans, ask not what your country can do for you, "
    "ask what you can do for your country.",
    "the the the the the the the the the the the the the the the the the the the",
    "Thank you. Thank you. Thank you. Thank you. Thank you. Thank you. Thank you.",
    "x",
    "日本語のテキストと中文文本",
]


def main() -> None:
    for name in ["tiny.en", "base"]:
        model = CACHE / "models" / name
        hf = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
        multilingual = name != "tiny.en"
        tok = Tokenizer(hf, multilingual, task="transcribe", language="en")
        out = {
            "model": name,
            "eot": tok.eot,
            "sot": tok.sot,
            "sot_prev": tok.sot_prev,
            "sot_lm": tok.sot_lm,
            "no_speech": tok.no_speech,
            "no_timestamps": tok.no_timestamps,
            "timestamp_begin": tok.timestamp_begin,
            "transcribe": tok.transcribe,
            "translate": tok.translate,
            "sot_sequence_en_transcribe": tok.sot_sequence,
            "encode": [{"text": t, "ids": tok.encode(t)} for t in TEXTS],
            "non_speech_tokens": list(tok.non_speech_tokens),
            "suppress_tokens_default": list(get_suppressed_tokens(tok, [-1])),
            "compression_ratio": [
                {"text": t, "ratio": get_compression_ratio(t)} for t in COMPRESSION_TEXTS
            ],
        }
        if multilingual:
            fr = Tokenizer(hf, True, task="translate", language="fr")
            out["sot_sequence_fr_translate"] = fr.sot_sequence
        ids = [tok.encode(t) for t in TEXTS]
        out["decode_with_timestamps"] = {
            "ids": [tok.timestamp_begin] + ids[3] + [tok.timestamp_begin + 150],
            "text": tok.decode_with_timestamps(
                [tok.timestamp_begin] + ids[3] + [tok.timestamp_begin + 150]
            ),
        }
        path = ROOT / "tests" / "golden" / f"tokenizer_{name}.json"
        path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
        print("wrote", path)


if __name__ == "__main__":
    main()
