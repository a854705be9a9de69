#!/usr/bin/env python3
"""Goldens for sotto-audio's voice activity detection, from faster-whisper 1.2.1's VAD:
its Silero model (assets/silero_vad_v6.onnx) run by onnxruntime, and get_speech_timestamps.

Writes to tests/golden/:
  vad_jfk.f32, vad_gap.f32   speech probability per 512-sample window, little-endian f32
  vad.json                   the speech stretches (samples) with the default VadOptions

Clips: samples/jfk.wav as int16 / 32768; "gap" is 1 s of zeros, jfk, 3 s of zeros, jfk,
1 s of zeros (two stretches of speech). faster-whisper's vad.py is loaded on its own (its
package __init__ wants CTranslate2); the wheel is the one the hub unpacks the model from.

Usage: python3 scripts/goldens/vad.py FASTER_WHISPER_DIR   (the unpacked wheel's folder,
holding faster_whisper/vad.py; needs numpy and onnxruntime)
"""

import importlib.util
import json
import sys
import types
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"


def load_vad(fw_dir):
    pkg = Path(fw_dir) / "faster_whisper"
    utils = types.ModuleType("faster_whisper.utils")
    utils.get_assets_path = lambda: str(pkg / "assets")
    sys.modules["faster_whisper"] = types.ModuleType("faster_whisper")
    sys.modules["faster_whisper.utils"] = utils
    spec = importlib.util.spec_from_file_location("faster_whisper.vad", pkg / "vad.py")
    vad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vad)
    return vad


def main():
    vad = load_vad(sys.argv[1])
    with wave.open(str(ROOT / "samples" / "jfk.wav")) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        jfk = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    z = lambda s: np.zeros(int(s * 16000), dtype=np.float32)
    clips = {"jfk": jfk, "gap": np.concatenate([z(1), jfk, z(3), jfk, z(1)])}
    model = vad.get_vad_model()
    stretches = {}
    for name, audio in clips.items():
        padded = np.pad(audio, (0, 512 - audio.shape[0] % 512))
        probs = model(padded).reshape(-1).astype("<f4")
        probs.tofile(OUT / f"vad_{name}.f32")
        stretches[name] = [[s["start"], s["end"]] for s in vad.get_speech_timestamps(audio)]
        print(name, len(probs), "windows", stretches[name])
    (OUT / "vad.json").write_text(json.dumps({
        "source": "faster-whisper 1.2.1 silero_vad_v6.onnx via onnxruntime; get_speech_timestamps(audio) with VadOptions()",
        "stretches": stretches,
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
