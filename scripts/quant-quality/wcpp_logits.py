#!/usr/bin/env python3
"""whisper.cpp's teacher-forced logits for the token sequence quant-probe wrote.

wcpp_logits.py MODEL.bin WAV PREFIX: reads PREFIX.tokens and PREFIX.sotto.f32 (for its row
count), writes PREFIX.wcpp.f32 with the same rows, from the libwhisper that the pywhispercpp
wheel bundles (this Python must have it installed).
"""
import ctypes
import glob
import os
import sys
import wave

import numpy as np
import pywhispercpp

libs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(pywhispercpp.__file__)), "libwhisper.so*"))
if not libs:
    sys.exit("libwhisper.so not found beside pywhispercpp")
lib = ctypes.CDLL(sorted(libs)[0])
lib.whisper_init_from_file.restype = ctypes.c_void_p
lib.whisper_init_from_file.argtypes = [ctypes.c_char_p]
lib.whisper_pcm_to_mel.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int, ctypes.c_int]
lib.whisper_encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
lib.whisper_decode.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int, ctypes.c_int,
                               ctypes.c_int]
lib.whisper_get_logits.restype = ctypes.POINTER(ctypes.c_float)
lib.whisper_get_logits.argtypes = [ctypes.c_void_p]
lib.whisper_n_vocab.argtypes = [ctypes.c_void_p]

model, wav, prefix = sys.argv[1:4]
tokens = np.fromfile(prefix + ".tokens", dtype="<u4").astype(np.int32)
ctx = lib.whisper_init_from_file(model.encode())
nv = lib.whisper_n_vocab(ctx)
n_rows = len(np.fromfile(prefix + ".sotto.f32", dtype="<f4")) // nv
with wave.open(wav) as w:
    assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
    pcm = (np.frombuffer(w.readframes(w.getnframes()), dtype="<i2") / 32768.0).astype(np.float32)
assert lib.whisper_pcm_to_mel(ctx, pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), len(pcm), 2) == 0
assert lib.whisper_encode(ctx, 0, 2) == 0
n_prompt = len(tokens) - n_rows  # the rows start at the last prompt token
out = []
for i in range(len(tokens) - 1):
    t = (ctypes.c_int32 * 1)(int(tokens[i]))
    assert lib.whisper_decode(ctx, t, 1, i, 2) == 0
    if i >= n_prompt - 1:
        out.append(np.ctypeslib.as_array(lib.whisper_get_logits(ctx), shape=(nv,)).copy())
np.stack(out).astype("<f4").tofile(prefix + ".wcpp.f32")
