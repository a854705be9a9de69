#!/usr/bin/env python3
"""Goldens for sotto-audio's log-mel front end, from faster-whisper 1.2.1's FeatureExtractor.

Writes to tests/golden/:
  mel80_<clip>.f32, mel128_<clip>.f32   log-mel, little-endian f32, shape [n_mels, n_frames]
  mel_filters80.f32, mel_filters128.f32 Slaney mel filterbank, shape [n_mels, 201]
  mel.json                              shapes and how each file was made

Audio is read with faster_whisper.decode_audio (what transcribe() uses); the features are
FeatureExtractor(feature_size=n_mels)(audio, padding=160), the call transcribe() makes.
The filterbank is checked against an independent transcription of librosa.filters.mel
(sr=16000, n_fft=400, htk=False, norm="slaney") before it is written.

Usage: python3 scripts/goldens/mel.py   (needs ../shared beside the checkout, or SOTTO_SHARED_DIR)
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import faster_whisper
from faster_whisper.audio import decode_audio
from faster_whisper.feature_extractor import FeatureExtractor

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"
SHARED = Path(os.environ.get("SOTTO_SHARED_DIR", ROOT.parent / "shared"))

# (clip, n_mels). All clips are 16 kHz mono 16-bit WAV.
CASES = [
    ("jfk.wav", 80),
    ("ldc93s1.wav", 80),
    ("en01_short.wav", 80),
    ("cheetah_de.wav", 80),
    ("cheetah_de.wav", 128),
]


def clip_path(name: str) -> Path:
    for sub in ("real", "synth"):
        p = SHARED / "data" / "clips" / sub / name
        if p.is_file():
            return p
    sys.exit(f"{name}: not found under {SHARED}/data/clips")


def librosa_mel(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa.filters.mel(..., htk=False, norm='slaney'), fmin=0, fmax=sr/2, in float64."""
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-300) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        m = np.asanyarray(m, dtype=np.float64)
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, len(fftfreqs)))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    return weights * enorm[:, np.newaxis]


def write_f32(name: str, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array, dtype="<f4")
    (OUT / name).write_bytes(array.tobytes())
    print(f"wrote {name} {list(array.shape)}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {
        "source": f"faster-whisper {faster_whisper.__version__} FeatureExtractor, numpy {np.__version__}",
        "filters": {},
        "mel": {},
    }
    for n_mels in (80, 128):
        fw = FeatureExtractor.get_mel_filters(16000, 400, n_mels=n_mels)
        ref = librosa_mel(16000, 400, n_mels)
        diff = float(np.abs(fw - ref).max())
        assert diff < 1e-9, f"faster-whisper and librosa filters differ by {diff}"
        name = f"mel_filters{n_mels}.f32"
        write_f32(name, ref.astype(np.float32))
        meta["filters"][name] = {"shape": [n_mels, 201], "max_diff_faster_whisper_vs_librosa": diff}

    for clip, n_mels in CASES:
        audio = decode_audio(str(clip_path(clip)), sampling_rate=16000)
        mel = FeatureExtractor(feature_size=n_mels)(audio, padding=160)
        name = f"mel{n_mels}_{Path(clip).stem}.f32"
        write_f32(name, mel)
        meta["mel"][name] = {
            "clip": clip,
            "n_mels": n_mels,
            "padding": 160,
            "n_samples": int(audio.shape[0]),
            "shape": list(mel.shape),
        }
    (OUT / "mel.json").write_text(json.dumps(meta, indent=2) + "\n")
    print("wrote mel.json")


if __name__ == "__main__":
    main()
