#!/usr/bin/env python3
"""Writes crates/sotto-formats/data/{gpt2,multilingual}.tokens.gz: the ordinary tokens of
openai-whisper's two tokenizers, which its `.pt` checkpoints do not carry.

The source is openai-whisper's own `whisper/assets/<name>.tiktoken` (one base64 token and
its rank per line), from the openai-whisper 20250625 source package (fetched from PyPI
unless its path is given). The output lists the tokens in rank order, each as one length
byte and its bytes, gzip-compressed (mtime 0: rerunning gives the same bytes).

    scripts/tiktoken-vocab.py [openai_whisper-20250625.tar.gz]
"""
import base64
import gzip
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "sotto-formats" / "data"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        if len(sys.argv) > 1:
            sdist = Path(sys.argv[1])
        else:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", "openai-whisper==20250625", "-d", tmp],
                           check=True)
            sdist = Path(tmp) / "openai_whisper-20250625.tar.gz"
        with tarfile.open(sdist) as tar:
            for name in ("gpt2", "multilingual"):
                member = f"openai_whisper-20250625/whisper/assets/{name}.tiktoken"
                text = tar.extractfile(member).read().decode()
                tokens = []
                for line in filter(None, text.split("\n")):
                    token, rank = line.split()
                    assert int(rank) == len(tokens), (name, rank)
                    tokens.append(base64.b64decode(token))
                assert all(len(t) < 256 for t in tokens)  # multilingual's last is empty
                blob = b"".join(bytes([len(t)]) + t for t in tokens)
                out = OUT / f"{name}.tokens.gz"
                out.write_bytes(gzip.compress(blob, compresslevel=9, mtime=0))
                print(out, len(tokens), "tokens")


if __name__ == "__main__":
    main()
