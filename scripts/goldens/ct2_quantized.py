#!/usr/bin/env python3
"""Goldens for quantized CTranslate2 folders: what CTranslate2's own converter writes.

faster-whisper users make int8 models with `ct2-transformers-converter --quantization int8`.
That converter builds a WhisperSpec, then `spec.optimize(quantization)` quantizes it and
`spec.save` writes model.bin. This script feeds CTranslate2's converter the float16 tiny.en
and base folders sotto fetches (variables read from their model.bin) and records, for each
quantization, the md5 and size of the model.bin it writes. `sotto convert --to ct2
--quantization Q` must write the same bytes.

It also keeps the int8 folders (under ~/.cache/sotto/test-data/ct2-<model>-<q>/) and
records faster-whisper 1.2.1's greedy transcripts of shared clips read from them (CPU,
compute_type "int8", CTranslate2's own int8 kernels), for the README's comparison.

Writes tests/golden/ct2_quantized.json.
Requires numpy, ctranslate2 4.8.x, faster-whisper 1.2.1; models in ~/.cache/sotto/models/<m>.
Run: python3 scripts/goldens/ct2_quantized.py
"""
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
from ctranslate2.converters.converter import Converter
from ctranslate2.specs import model_spec, whisper_spec

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "ct2_quantized.json"
SHARED = Path(os.environ.get("SOTTO_SHARED_DIR", ROOT.parent / "shared"))
CACHE = Path(os.environ.get("SOTTO_CACHE_DIR", Path.home() / ".cache" / "sotto"))
# None: the source's float16, unchanged; its md5 must be the shipped model.bin's.
QUANTIZATIONS = [None, "int8", "int8_float16", "int8_float32", "int16", "float32"]
KEEP = {"int8"}
CLIPS = ["real/jfk.wav", "synth/en01_short.wav", "synth/en03_news.wav"]
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_model_bin(path):
    """The variables of a CTranslate2 model.bin (binary version 6), by name."""
    b = Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        (n,) = take("<H")
        s = b[pos:pos + n - 1].decode()
        pos += n
        return s

    (version,) = take("<I")
    assert version == 6, version
    string()
    take("<I")
    (n_vars,) = take("<I")
    out = {}
    for _ in range(n_vars):
        name = string()
        (rank,) = take("<B")
        shape = take("<%dI" % rank)
        (dtype,) = take("<B")
        (nbytes,) = take("<I")
        out[name] = np.frombuffer(b[pos:pos + nbytes], dtype=DTYPES[dtype]).reshape(shape)
        pos += nbytes
    return out


def set_path(spec, name, value):
    """spec.encoder.layer[0].self_attention.linear[0].weight = value, for
    "encoder/layer_0/self_attention/linear_0/weight"."""
    *scopes, attr = name.split("/")
    for s in scopes:
        m = re.fullmatch(r"(.+)_(\d+)", s)
        if m and isinstance(getattr(spec, m.group(1), None), list):
            spec = getattr(spec, m.group(1))[int(m.group(2))]
        else:
            spec = getattr(spec, s)
    setattr(spec, attr, value)


class FolderConverter(Converter):
    """CTranslate2's converter fed from an existing float CTranslate2 folder."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def _load(self):
        v = read_model_bin(self.folder / "model.bin")
        count = lambda side: sum(
            1 for k in v if re.fullmatch(side + r"/layer_\d+/self_attention/linear_0/weight", k)
        )
        spec = whisper_spec.WhisperSpec(
            count("encoder"), int(v["encoder/num_heads"]),
            count("decoder"), int(v["decoder/num_heads"]),
        )
        for name, value in v.items():
            if value.ndim > 0:
                set_path(spec, name, np.array(value))
        # CTranslate2 4.8 adds two ALiBi scalars that the files faster-whisper users have
        # (and sotto writes) lack; without them the float16 conversion is the shipped file.
        for attr in ("scale_alibi", "alibi_use_positive_positions"):
            setattr(spec.decoder, attr, model_spec.OPTIONAL)
        # The tied output head, as the transformers converter sets it (then aliased).
        spec.decoder.projection.weight = spec.decoder.embeddings.weight
        config = json.loads((self.folder / "config.json").read_text())
        for key in ("suppress_ids", "suppress_ids_begin", "lang_ids", "alignment_heads"):
            setattr(spec.config, key, config.get(key))
        spec.register_vocabulary(
            (self.folder / "vocabulary.txt").read_text(encoding="utf-8").rstrip("\n").split("\n")
        )
        return spec


def transcripts(folder):
    from faster_whisper import WhisperModel

    model = WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=2)
    out = {}
    for clip in CLIPS:
        segments, _ = model.transcribe(
            str(SHARED / "data" / "clips" / clip), beam_size=1, language="en",
            condition_on_previous_text=False,
        )
        out[clip] = "".join(s.text for s in segments).strip()
        print("  ", clip, out[clip][:70])
    return out


def main():
    goldens = {}
    for model in ["tiny.en", "base"]:
        src = CACHE / "models" / model
        goldens[model] = {}
        for q in QUANTIZATIONS:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "m"
                FolderConverter(src).convert(str(out), quantization=q)
                data = (out / "model.bin").read_bytes()
                g = {"bytes": len(data), "md5": hashlib.md5(data).hexdigest()}
                print(model, q, g)
                if q is None:
                    shipped = (src / "model.bin").read_bytes()
                    assert data == shipped, "the float16 conversion is not the shipped file"
                    continue
                if q in KEEP:
                    keep = CACHE / "test-data" / f"ct2-{model}-{q}"
                    shutil.rmtree(keep, ignore_errors=True)
                    shutil.copytree(out, keep)
                    shutil.copy(src / "tokenizer.json", keep / "tokenizer.json")
                    g["faster_whisper_int8_greedy"] = transcripts(keep)
                goldens[model][q] = g
    OUT.write_text(json.dumps(goldens, indent=1) + "\n")


if __name__ == "__main__":
    main()
