#!/usr/bin/env python3
"""Goldens for sotto-model: the Whisper forward pass of CTranslate2 (float32 compute).

Writes to tests/golden/:
  mel80_jfk.f32                [80, n_frames] log-mel of jfk.wav (faster-whisper FeatureExtractor,
                               padding=160), unpadded; the test pads with zeros to 3000 frames.
  model_<m>_enc_every10.f32    encoder output rows 0, 10, 20, ... : [150, n_audio_state]
  model_<m>_logits0.f32        raw first-step logits for the prompt: [n_vocab]
  model_goldens.json           shapes, prompts, greedy tokens (tiny.en)

Requires numpy, ctranslate2 4.8.x, faster-whisper; models in ~/.cache/sotto/models/<m>.
Run: python3 scripts/goldens/model.py
"""
import json
import os
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper.audio import decode_audio
from faster_whisper.feature_extractor import FeatureExtractor

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"
SHARED = Path(os.environ.get("SOTTO_SHARED_DIR", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("SOTTO_CACHE_DIR", Path.home() / ".cache" / "sotto"))
N_FRAMES = 3000

PROMPTS = {
    # <|startoftranscript|> <|notimestamps|>
    "tiny.en": [50257, 50362],
    # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
    "base": [50258, 50259, 50359, 50363],
}


def write_f32(name, arr):
    arr = np.ascontiguousarray(arr, dtype="<f4")
    (OUT / name).write_bytes(arr.tobytes())
    return list(arr.shape)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    audio = decode_audio(str(SHARED / "data/clips/real/jfk.wav"), sampling_rate=16000)
    mel = FeatureExtractor(feature_size=80)(audio, padding=160)[:, :N_FRAMES]
    # The same bytes as mel.py's mel80_jfk.f32: one file serves both.
    meta = {"mel": {"file": "mel80_jfk.f32", "shape": write_f32("mel80_jfk.f32", mel)}}
    window = np.pad(mel, ((0, 0), (0, N_FRAMES - mel.shape[1])))[None].astype(np.float32)

    for name, prompt in PROMPTS.items():
        model = ctranslate2.models.Whisper(str(CACHE / "models" / name), compute_type="float32")
        enc = model.encode(ctranslate2.StorageView.from_array(window))
        enc_np = np.array(enc)[0]
        m = {"prompt": prompt}
        m["enc_every10_shape"] = write_f32(f"model_{name}_enc_every10.f32", enc_np[::10])
        # Raw logits of the first generated step, with every suppression turned off.
        res = model.generate(
            enc, [prompt], beam_size=1, max_length=len(prompt) + 1, return_logits_vocab=True,
            suppress_blank=False, suppress_tokens=[],
        )
        # [steps, n_vocab]; max_length counts the prompt differently for multilingual models.
        logits = np.array(res[0].logits[0])[0]
        m["logits0_shape"] = write_f32(f"model_{name}_logits0.f32", logits)
        m["logits0_argmax"] = int(logits.argmax())
        # Plain argmax greedy decoding (no suppression), as the test's minimal loop does.
        res = model.generate(
            enc, [prompt], beam_size=1, max_length=448, suppress_blank=False, suppress_tokens=[],
        )
        m["greedy_tokens"] = [int(t) for t in res[0].sequences_ids[0]]
        meta[name] = m
        print(name, m["logits0_argmax"], m["greedy_tokens"])
    (OUT / "model_goldens.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
