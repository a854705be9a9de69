#!/usr/bin/env python3
"""Goldens for sotto-quant's quantize_row: real tiny.en weight rows and whisper.cpp's bytes.

Usage: python3 scripts/goldens/quant_rows.py F16_BIN DIR_WITH_QUANTIZED
  F16_BIN: tiny.en f16 ggml file whose md5 is ca560bc86226e05111bdc20e9e9a8ce4
  DIR_WITH_QUANTIZED: tiny.en-<type>.bin for q4_0 q4_1 q5_0 q5_1 q8_0, each with the md5
  of whisper.cpp's whisper-quantize output (../shared/notes/model-formats.md), so the bytes
  taken from them are whisper.cpp's. scripts/goldens/quant_rows.sh makes both and runs this.

Writes to tests/golden/:
  quant_rows_input.f32   16 rows × 384 little-endian f32: rows 0..8 of
                         encoder.blocks.0.mlp.0.weight, then of decoder.token_embedding.weight
  quant_rows_<type>.bin  the same rows as whisper.cpp quantized them (12 blocks per row)
"""

import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden"
TENSORS = ["encoder.blocks.0.mlp.0.weight", "decoder.token_embedding.weight"]
ROWS = 8
MD5 = {
    "f16": "ca560bc86226e05111bdc20e9e9a8ce4",
    "q8_0": "79071f2d4ae8fc79c86b3719d234d223",
    "q5_1": "7cc772e50a7f859910e85c01dc47bbaf",
    "q5_0": "a89262b71258c566c79ba698a49f2934",
    "q4_1": "55faf0d37fd83cb796396df1f48aad95",
    "q4_0": "a2ffe3e2aa214117f26f51d5d0e35c84",
}
# ggml type id -> (values per block, bytes per block)
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34)}


def tensors(path):
    """name -> (ggml type, ne, raw bytes) of a legacy ggml whisper file."""
    b = Path(path).read_bytes()
    pos = 4 + 11 * 4
    n_mel, n_fft = struct.unpack_from("<ii", b, pos)
    pos += 8 + 4 * n_mel * n_fft
    (n_vocab,) = struct.unpack_from("<i", b, pos)
    pos += 4
    for _ in range(n_vocab):
        (n,) = struct.unpack_from("<I", b, pos)
        pos += 4 + n
    out = {}
    while pos < len(b):
        n_dims, name_len, ttype = struct.unpack_from("<iii", b, pos)
        pos += 12
        ne = struct.unpack_from(f"<{n_dims}i", b, pos)
        pos += 4 * n_dims
        name = b[pos : pos + name_len].decode()
        pos += name_len
        per, size = BLOCK[ttype]
        nbytes = int(np.prod(ne)) // per * size
        out[name] = (ttype, ne, b[pos : pos + nbytes])
        pos += nbytes
    return out


def checked(path, kind):
    got = hashlib.md5(Path(path).read_bytes()).hexdigest()
    if got != MD5[kind]:
        sys.exit(f"{path}: md5 {got}, expected {MD5[kind]} ({kind})")
    return tensors(path)


def main():
    f16_path, qdir = sys.argv[1], Path(sys.argv[2])
    f16 = checked(f16_path, "f16")
    rows = []
    for name in TENSORS:
        ttype, ne, data = f16[name]
        assert ttype == 1 and ne[0] == 384, (name, ttype, ne)
        rows.append(np.frombuffer(data[: ROWS * ne[0] * 2], dtype="<f2").astype("<f4"))
    np.concatenate(rows).tofile(OUT / "quant_rows_input.f32")
    for kind in ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]:
        q = checked(qdir / f"tiny.en-{kind}.bin", kind)
        parts = []
        for name in TENSORS:
            ttype, ne, data = q[name]
            per, size = BLOCK[ttype]
            parts.append(data[: ROWS * ne[0] // per * size])
        (OUT / f"quant_rows_{kind}.bin").write_bytes(b"".join(parts))
        print(f"quant_rows_{kind}.bin")


if __name__ == "__main__":
    main()
