#!/usr/bin/env python3
"""One faster-whisper run, as a whole process: load the model, transcribe, print the text.

Usage: fw_transcribe.py MODEL_DIR AUDIO BEAM THREADS COMPUTE_TYPE [LANGUAGE]
"""
import sys

from faster_whisper import WhisperModel


def main() -> None:
    model_dir, audio, beam, threads, compute = sys.argv[1:6]
    language = sys.argv[6] if len(sys.argv) > 6 else None
    model = WhisperModel(model_dir, device="cpu", compute_type=compute, cpu_threads=int(threads))
    segments, _ = model.transcribe(audio, beam_size=int(beam), language=language)
    print("".join(s.text for s in segments).strip())


if __name__ == "__main__":
    main()
