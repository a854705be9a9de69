#!/usr/bin/env python3
"""Goldens for sotto's batched transcription, from faster-whisper 1.2.1's
BatchedInferencePipeline (float32 on the CPU, so that no int8 rounding is in the way).

Writes tests/golden/batched.json: per case, the segments (start, end, text) and the
language faster-whisper reports. Cases (the shared clips, and samples/jfk.wav):
  longform      synth/en10_longform.wav (150 s), tiny.en, greedy, batch 8, no timestamps
  longform_b5   the same with beam 5 (the pipeline's default)
  longform_ts   the same, greedy, with timestamps (without_timestamps=False)
  gap           jfk, 3 s of silence, jfk (1 s of silence around), tiny.en, greedy, batch 4
  gap_words     the same with word timestamps (each word's start, end and text)
  de            real/cheetah_de.wav, base, greedy, language detected, batch 8
  multilingual  de01_news twice, fr01_news three times, es01_news twice (synth; 2 s of
                silence between clips, 20 between languages), base, greedy, batch 8,
                multilingual=True: each chunk in its own language

Usage: python3 scripts/goldens/batched.py TINY_EN_DIR BASE_DIR [CASE ...]
(with CASEs, only those are computed again; the file keeps the others as they are)
(CTranslate2 folders, e.g. `sotto models path tiny.en`; needs faster-whisper==1.2.1, as
scripts/compare-peers installs into .venv-peers)
"""

import json
import sys
import wave
from pathlib import Path

import numpy as np
from faster_whisper import BatchedInferencePipeline, WhisperModel

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "clips"


def read_wav(path):
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def run(model, audio, **kw):
    segments, info = BatchedInferencePipeline(model).transcribe(audio, **kw)
    segments = list(segments)
    out = {
        "language": info.language,
        "segments": [[round(s.start, 3), round(s.end, 3), s.text] for s in segments],
    }
    if kw.get("word_timestamps"):
        out["words"] = [[round(w.start, 3), round(w.end, 3), w.word]
                        for s in segments for w in s.words]
    return out


def main():
    tiny_dir, base_dir = sys.argv[1:3]
    tiny = WhisperModel(tiny_dir, device="cpu", compute_type="float32", cpu_threads=2)
    base = WhisperModel(base_dir, device="cpu", compute_type="float32", cpu_threads=2)
    longform = read_wav(SHARED / "synth" / "en10_longform.wav")
    jfk = read_wav(ROOT / "samples" / "jfk.wav")
    z = lambda s: np.zeros(s * 16000, dtype=np.float32)
    gap = np.concatenate([z(1), jfk, z(3), jfk, z(1)])
    def languages():
        parts = []
        for clip, times in [("de01_news", 2), ("fr01_news", 3), ("es01_news", 2)]:
            a = read_wav(SHARED / "synth" / f"{clip}.wav")
            parts += [a, z(2)] * times + [z(18)]
        return np.concatenate(parts)

    cases = {
        "longform": lambda: run(tiny, longform, beam_size=1, batch_size=8),
        "longform_b5": lambda: run(tiny, longform, beam_size=5, batch_size=8),
        "longform_ts": lambda: run(tiny, longform, beam_size=1, batch_size=8,
                                   without_timestamps=False),
        "gap": lambda: run(tiny, gap, beam_size=1, batch_size=4),
        "gap_words": lambda: run(tiny, gap, beam_size=1, batch_size=4, word_timestamps=True),
        "de": lambda: run(base, read_wav(SHARED / "real" / "cheetah_de.wav"), beam_size=1,
                          batch_size=8),
        "multilingual": lambda: run(base, languages(), beam_size=1, batch_size=8,
                                    multilingual=True),
    }
    path = ROOT / "tests" / "golden" / "batched.json"
    only = sys.argv[3:]
    out = json.loads(path.read_text()) if only else {}
    for name, case in cases.items():
        if not only or name in only:
            out[name] = case()
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
