#!/usr/bin/env python3
"""Goldens for sotto's prompting, input-range, anti-hallucination, repetition, language and
window-length options, from faster-whisper 1.2.1 (float32, its transcribe() defaults otherwise: beam 5,
fallback).

Writes tests/golden/fw_options.json: for each case the model, clip, options and the
segments faster-whisper returns (start, end, text, tokens, and words when timed).
Audio "pad:<clip>:<before>:<after>" is the clip with that many seconds of digital silence
before and after it; "cat:<clip>:<seconds>+<clip>:<seconds>+..." the clips one after
another, each followed by digital silence up to that many seconds.

Usage: python3 scripts/goldens/options.py [--missing]   (needs ../shared and the cached
       models: sotto models fetch tiny.en base). --missing computes only the cases the
       file lacks and keeps the others as they are (CTranslate2's arithmetic differs a
       little between CPUs).
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.audio import decode_audio

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "fw_options.json"
SHARED = Path(os.environ.get("SOTTO_SHARED_DIR", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("SOTTO_CACHE_DIR", Path.home() / ".cache" / "sotto"))

CASES = [
    ("tiny.en", "real/jfk.wav", {"prefix": "And so my"}),
    ("tiny.en", "real/jfk.wav", {"prefix": "Hello world"}),
    ("tiny.en", "real/jfk.wav", {"prefix": "And so", "without_timestamps": True}),
    ("tiny.en", "real/jfk.wav", {"hotwords": "Kennedy Americans"}),
    ("tiny.en", "real/jfk.wav", {"clip_timestamps": "1,5,6,9"}),
    ("tiny.en", "real/jfk.wav", {"prefix": "And so", "beam_size": 1}),
    ("tiny.en", "synth/en07_story.wav", {"clip_timestamps": "3,12,20"}),
    ("tiny.en", "synth/en07_story.wav", {"hotwords": "story", "prefix": "Once"}),
    ("tiny.en", "synth/en10_longform.wav", {"clip_timestamps": "20,50,100,130"}),
    ("tiny.en", "pad:real/jfk.wav:15:10",
     {"word_timestamps": True, "hallucination_silence_threshold": 2.0}),
    ("tiny.en", "pad:real/jfk.wav:40:0",
     {"word_timestamps": True, "hallucination_silence_threshold": 1.0}),
    ("base", "real/jfk.wav", {"prefix": "And so my"}),
    ("base", "synth/es01_news.wav", {"clip_timestamps": "3"}),
    ("base", "synth/fr01_news.wav", {"hotwords": "Paris", "language": "fr"}),
    # At temperature 0 only: a fallback to sampling after the speech would draw from a
    # random stream no other engine can reproduce.
    ("base", "pad:real/jfk.wav:15:10",
     {"word_timestamps": True, "hallucination_silence_threshold": 2.0, "temperature": 0.0}),
    # Repetition: each changes what these decode to.
    ("tiny.en", "real/jfk.wav", {"repetition_penalty": 1.5}),
    ("tiny.en", "real/jfk.wav", {"no_repeat_ngram_size": 2}),
    ("tiny.en", "real/jfk.wav", {"no_repeat_ngram_size": 1, "beam_size": 1}),
    ("tiny.en", "synth/en07_story.wav", {"repetition_penalty": 1.3, "beam_size": 1}),
    ("tiny.en", "synth/en07_story.wav", {"repetition_penalty": 0.9, "no_repeat_ngram_size": 3}),
    # A window per language: German, French, Spanish.
    ("base", "cat:synth/de01_news.wav:30+synth/fr01_news.wav:30+synth/es01_news.wav:12",
     {"multilingual": True}),
    ("base", "cat:synth/de01_news.wav:30+synth/fr01_news.wav:30+synth/es01_news.wav:12",
     {"multilingual": True, "language": "de", "beam_size": 1, "word_timestamps": True,
      "temperature": 0.0}),
    # Detection over several windows: the second passes the threshold; none does (the
    # most frequent wins, and on a tie the first).
    ("base", "cat:real/cheetah_es.wav:30+real/cheetah_fr.wav:30+real/cheetah_fr.wav:30",
     {"language_detection_threshold": 0.99, "language_detection_segments": 3}),
    ("base", "cat:real/cheetah_es.wav:30+real/cheetah_fr.wav:30+real/cheetah_fr.wav:30",
     {"language_detection_threshold": 1.01, "language_detection_segments": 3,
      "without_timestamps": True}),
    ("base", "cat:real/cheetah_es.wav:30+real/cheetah_fr.wav:30",
     {"language_detection_threshold": 1.01, "language_detection_segments": 5,
      "beam_size": 1}),
    # Shorter windows (chunk_length): seeking, word timing and language detection in them.
    ("tiny.en", "synth/en07_story.wav", {"chunk_length": 10}),
    ("tiny.en", "real/jfk.wav", {"chunk_length": 5, "word_timestamps": True}),
    ("base", "cat:real/cheetah_es.wav:20+real/cheetah_fr.wav:20",
     {"chunk_length": 20, "language_detection_threshold": 1.01,
      "language_detection_segments": 2, "beam_size": 1}),
]


def audio_of(spec):
    if spec.startswith("cat:"):
        parts = []
        for part in spec[4:].split("+"):
            clip, seconds = part.split(":")
            a = decode_audio(str(SHARED / "data/clips" / clip))
            rest = max(0, int(float(seconds) * 16000) - len(a))
            parts += [a, np.zeros(rest, np.float32)]
        return np.concatenate(parts)
    if spec.startswith("pad:"):
        _, clip, before, after = spec.split(":")
        a = decode_audio(str(SHARED / "data/clips" / clip))
        z = lambda s: np.zeros(int(float(s) * 16000), np.float32)
        return np.concatenate([z(before), a, z(after)])
    return str(SHARED / "data/clips" / spec)


def key(name, clip, opts):
    return json.dumps([name, clip, opts], sort_keys=True)


def main():
    models = {}
    out = []
    have = {}
    if "--missing" in sys.argv[1:] and OUT.exists():
        have = {key(c["model"], c["audio"], c["options"]): c for c in json.loads(OUT.read_text())}
    for name, clip, opts in CASES:
        if key(name, clip, opts) in have:
            out.append(have[key(name, clip, opts)])
            continue
        if name not in models:
            models[name] = WhisperModel(
                str(CACHE / "models" / name), device="cpu", compute_type="float32", cpu_threads=2
            )
        # faster-whisper keeps a case's chunk_length in the model's feature extractor:
        # the others ask for its 30 s again.
        segs, info = models[name].transcribe(audio_of(clip), **{"chunk_length": 30, **opts})
        segs = list(segs)
        case = {
            "model": name,
            "audio": clip,
            "options": opts,
            "language": info.language,
            "language_probability": round(info.language_probability, 4),
            "segments": [
                {
                    "start": round(s.start, 3),
                    "end": round(s.end, 3),
                    "text": s.text,
                    "tokens": [int(t) for t in s.tokens],
                    "words": [
                        [round(w.start, 3), round(w.end, 3), w.word] for w in (s.words or [])
                    ],
                }
                for s in segs
            ],
        }
        print(name, clip, opts, "->", "".join(s.text for s in segs)[:100])
        out.append(case)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
