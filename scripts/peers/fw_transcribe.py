#!/usr/bin/env python3
"""One faster-whisper run, as a whole process: load the model, transcribe, print the text.

Usage: fw_transcribe.py MODEL_DIR AUDIO BEAM THREADS COMPUTE_TYPE [LANGUAGE] [--batch=N]

With --batch=N: BatchedInferencePipeline.transcribe(batch_size=N), its defaults otherwise
(VAD on, no timestamps).
"""
import sys

from faster_whisper import BatchedInferencePipeline, WhisperModel


def main() -> None:
    batch = [int(a.split("=", 1)[1]) for a in sys.argv[1:] if a.startswith("--batch=")]
    argv = [a for a in sys.argv[1:] if not a.startswith("--batch=")]
    model_dir, audio, beam, threads, compute = argv[:5]
    language = argv[5] if len(argv) > 5 else None
    model = WhisperModel(model_dir, device="cpu", compute_type=compute, cpu_threads=int(threads))
    if batch:
        pipeline = BatchedInferencePipeline(model)
        segments, _ = pipeline.transcribe(audio, beam_size=int(beam), language=language,
                                          batch_size=batch[0])
    else:
        segments, _ = model.transcribe(audio, beam_size=int(beam), language=language)
    print("".join(s.text for s in segments).strip())


if __name__ == "__main__":
    main()
