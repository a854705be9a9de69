#!/usr/bin/env python3
"""Goldens for a shortened encoder context (whisper.cpp's `audio_ctx`): CTranslate2's encoder
on the first 2·ctx mel frames of jfk.wav (it takes windows shorter than 3000 frames and adds
the first ctx positional embeddings, as whisper.cpp does), then the first-step logits
against that shorter audio. ctx = 557, an odd length, covers jfk's 1101 frames.

Writes to tests/golden/:
  model_<m>_ctx557_enc_every10.f32   encoder output rows 0, 10, 20, ...: [56, n_audio_state]
  model_<m>_ctx557_logits0.f32       raw first-step logits for the prompt of model.py

Requires numpy, ctranslate2 4.8.x, faster-whisper; models in ~/.cache/sotto/models/<m>;
mel80_jfk.f32 from model.py (or mel.py). Run: python3 scripts/goldens/audio_ctx.py
"""
import os
from pathlib import Path

import ctranslate2
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"
CACHE = Path(os.environ.get("SOTTO_CACHE_DIR", Path.home() / ".cache" / "sotto"))
CTX = 557
PROMPTS = {"tiny.en": [50257, 50362], "base": [50258, 50259, 50359, 50363]}


def main():
    mel = np.fromfile(OUT / "mel80_jfk.f32", dtype="<f4").reshape(80, -1)
    window = np.zeros((1, 80, 2 * CTX), np.float32)
    n = min(2 * CTX, mel.shape[1])
    window[0, :, :n] = mel[:, :n]
    for name, prompt in PROMPTS.items():
        model = ctranslate2.models.Whisper(str(CACHE / "models" / name), compute_type="float32")
        enc = model.encode(ctranslate2.StorageView.from_array(window))
        enc_np = np.array(enc)[0]
        assert enc_np.shape[0] == CTX, enc_np.shape
        np.ascontiguousarray(enc_np[::10], "<f4").tofile(OUT / f"model_{name}_ctx{CTX}_enc_every10.f32")
        res = model.generate(
            enc, [prompt], beam_size=1, max_length=len(prompt) + 1, return_logits_vocab=True,
            suppress_blank=False, suppress_tokens=[],
        )
        logits = np.array(res[0].logits[0])[0]
        np.ascontiguousarray(logits, "<f4").tofile(OUT / f"model_{name}_ctx{CTX}_logits0.f32")
        print(name, enc_np.shape, int(logits.argmax()))


if __name__ == "__main__":
    main()
