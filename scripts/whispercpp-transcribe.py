#!/usr/bin/env python3
"""Transcribe with whisper.cpp itself (the pywhispercpp wheel bundles it).

Usage: whispercpp-transcribe.py MODEL.bin AUDIO.wav [THREADS] [BEAM_SIZE] [LANGUAGE]
Prints the transcript text on one line. Used by the tests to check that files written
by `sotto convert` / `sotto quantize` load in whisper.cpp and give the same text, and by
scripts/wer. LANGUAGE defaults to en.
Install: python3 -m venv .venv-whispercpp && .venv-whispercpp/bin/pip install pywhispercpp
"""
import sys

from pywhispercpp.model import Model


def main() -> None:
    model_path, audio = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    beam = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    language = sys.argv[5] if len(sys.argv) > 5 else "en"
    # Greedy (strategy 0) unless a beam size above 1 is asked for.
    model = Model(model_path, params_sampling_strategy=0 if beam <= 1 else 1, n_threads=threads,
                  print_realtime=False, print_progress=False, redirect_whispercpp_logs_to=None)
    params = {"beam_search": {"beam_size": beam, "patience": -1.0}} if beam > 1 else {}
    segments = model.transcribe(audio, language=language, **params)
    print(" ".join(s.text.strip() for s in segments))


if __name__ == "__main__":
    main()
