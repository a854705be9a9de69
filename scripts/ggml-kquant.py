#!/usr/bin/env python3
"""ggml's k-quants with whisper.cpp's own ggml (the library the pywhispercpp wheel bundles).

Usage:
  ggml-kquant.py quantize IN.bin OUT.bin TYPE       TYPE: q2_k q3_k q4_k q5_k q6_k
      A whisper ggml file (f16 or f32) quantized as whisper.cpp's `whisper-quantize IN
      OUT TYPE` writes it: every 2-D tensor but the positional embeddings, with ggml's
      own quantizer (ggml_quantize_chunk), the header's ftype 2000 + TYPE's.
  ggml-kquant.py dequantize TYPE BLOCKS OUT
      ggml's dequantize_row_<TYPE> of the raw super-blocks in the file BLOCKS, as
      little-endian f32 into OUT.

The tests use it as the reference for sotto's k-quant reader (`crates/sotto-quant/tests`,
`crates/sotto-cli/tests/cli.rs`). Run it with the Python that has pywhispercpp
(`.ci/run` makes `.venv-whispercpp`).
"""
import ctypes
import glob
import os
import struct
import sys

import numpy as np
import pywhispercpp

TYPES = {"q2_k": 10, "q3_k": 11, "q4_k": 12, "q5_k": 13, "q6_k": 14}
BLOCK_BYTES = {10: 84, 11: 110, 12: 144, 13: 176, 14: 210}
SKIP = {"encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding",
        "decoder.positional_embedding"}


def ggml():
    site = os.path.dirname(os.path.dirname(pywhispercpp.__file__))
    path = sorted(glob.glob(os.path.join(site, "libggml-base.so*")))[0]
    lib = ctypes.CDLL(path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    return lib


def quantize(src, dst, name):
    ttype = TYPES[name]
    lib = ggml()
    data = open(src, "rb").read()
    at = 0

    def take(n):
        nonlocal at
        at += n
        return data[at - n:at]

    out = [take(4)]
    hp = list(struct.unpack("<11i", take(44)))
    hp[10] = 2 * 1000 + ttype
    out.append(struct.pack("<11i", *hp))
    n_mel, n_fft = struct.unpack("<2i", take(8))
    out.append(struct.pack("<2i", n_mel, n_fft) + take(4 * n_mel * n_fft))
    (n_vocab,) = struct.unpack("<i", take(4))
    out.append(struct.pack("<i", n_vocab))
    for _ in range(n_vocab):
        (n,) = struct.unpack("<I", take(4))
        out.append(struct.pack("<I", n) + take(n))
    while at < len(data):
        n_dims, name_len, t = struct.unpack("<3i", take(12))
        ne = struct.unpack(f"<{n_dims}i", take(4 * n_dims))
        tname = take(name_len)
        count = int(np.prod(ne))
        raw = take(count * (4 if t == 0 else 2))
        if n_dims == 2 and tname.decode() not in SKIP:
            x = np.frombuffer(raw, np.float32 if t == 0 else np.float16).astype(np.float32)
            x = np.ascontiguousarray(x)
            buf = ctypes.create_string_buffer(count // 256 * BLOCK_BYTES[ttype])
            size = lib.ggml_quantize_chunk(ttype, x.ctypes.data, buf, 0, count // ne[0], ne[0],
                                           None)
            raw, t = buf.raw[:size], ttype
        out.append(struct.pack(f"<3i{n_dims}i", n_dims, name_len, t, *ne) + tname + raw)
    with open(dst, "wb") as f:
        f.write(b"".join(out))


def dequantize(name, blocks, dst):
    ttype = TYPES[name]
    fn = getattr(ggml(), f"dequantize_row_{name[:-1]}K")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    q = open(blocks, "rb").read()
    count = len(q) // BLOCK_BYTES[ttype] * 256
    y = np.zeros(count, np.float32)
    fn(q, y.ctypes.data, count)
    y.astype("<f4").tofile(dst)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "quantize":
        quantize(sys.argv[2], sys.argv[3], sys.argv[4].lower())
    elif len(sys.argv) == 5 and sys.argv[1] == "dequantize":
        dequantize(sys.argv[2].lower(), sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
