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

Usage: python3 scripts/goldens/batched.py TINY_EN_DIR BASE_DIR
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
    out = {
        "longform": run(tiny, longform, beam_size=1, batch_size=8),
        "longform_b5": run(tiny, longform, beam_size=5, batch_size=8),
        "longform_ts": run(tiny, longform, beam_size=1, batch_size=8, without_timestamps=False),
        "gap": run(tiny, gap, beam_size=1, batch_size=4),
        "gap_words": run(tiny, gap, beam_size=1, batch_size=4, word_timestamps=True),
        "de": run(base, read_wav(SHARED / "real" / "cheetah_de.wav"), beam_size=1, batch_size=8),
    }
    path = ROOT / "tests" / "golden" / "batched.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
