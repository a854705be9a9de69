#!/usr/bin/env python3
"""Summarises quant-quality/run's logits: stats.py DIR MODEL KIND... (the first KIND is the
reference, normally f16). Per engine and file, over the first window of every clip: mean
negative log-likelihood of the reference tokens, KL(reference || file) per token, and the
share of rows whose top token agrees with the reference file's and with the reference text.
"""
import glob
import os
import sys

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def main() -> None:
    folder, model, kinds = sys.argv[1], sys.argv[2], sys.argv[3:]
    base = kinds[0]
    clips = sorted(os.path.basename(p)[len(f"{model}-{base}-"):-len(".tokens")]
                   for p in glob.glob(os.path.join(folder, f"{model}-{base}-*.tokens")))
    engines = [e for e in ("sotto", "wcpp")
               if all(os.path.exists(os.path.join(folder, f"{model}-{k}-{c}.{e}.f32"))
                      for k in kinds for c in clips)]
    n_vocab = 51864 if model.endswith(".en") else 51865
    print(f"{model}: {len(clips)} clips, first window, teacher-forced on the reference text")
    print(f"{'engine file':26} {'NLL/token':>10} {'KL':>8} {'top1=' + base:>10} {'top1=ref':>9}")
    for e in engines:
        for k in kinds:
            nll = kl = agree = ok = n = 0.0
            for c in clips:
                pre = os.path.join(folder, f"{model}-{k}-{c}")
                toks = np.fromfile(pre + ".tokens", dtype="<u4")
                lp = log_softmax(np.fromfile(f"{pre}.{e}.f32", dtype="<f4").reshape(-1, n_vocab)
                                 .astype(np.float64))
                ref = os.path.join(folder, f"{model}-{base}-{c}.{e}.f32")
                lp0 = log_softmax(np.fromfile(ref, dtype="<f4").reshape(-1, n_vocab).astype(np.float64))
                tgt = toks[len(toks) - lp.shape[0]:]
                nll += -lp[np.arange(len(tgt)), tgt].sum()
                kl += (np.exp(lp0) * (lp0 - lp)).sum()
                agree += (lp.argmax(1) == lp0.argmax(1)).sum()
                ok += (lp.argmax(1) == tgt).sum()
                n += len(tgt)
            print(f"{e + ' ' + k:26} {nll / n:10.4f} {kl / n:8.4f} {agree / n:10.3f} {ok / n:9.3f}")


if __name__ == "__main__":
    main()
