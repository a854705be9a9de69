#!/usr/bin/env python3
"""Save raw little-endian f32 mel filters as an npz, the input ct2_to_ggml.py takes.

Usage: mel_npz.py FILTERS.f32 N_MELS OUT.npz   (writes key mel_<N_MELS>, shape [N_MELS, n_fft])
       mel_npz.py --dump MEL_FILTERS.npz N_MELS OUT.f32   (the reverse: npz -> raw f32)
"""
import sys

import numpy as np


def main():
    if sys.argv[1] == "--dump":
        _, _, npz, n_mels, out = sys.argv
        with np.load(npz) as f:
            np.asarray(f[f"mel_{n_mels}"], dtype="<f4").tofile(out)
        return
    src, n_mels, out = sys.argv[1:]
    n_mels = int(n_mels)
    filters = np.fromfile(src, dtype="<f4").reshape(n_mels, -1)
    np.savez(out, **{f"mel_{n_mels}": filters})


if __name__ == "__main__":
    main()
