#!/usr/bin/env python3
"""Writes crates/sotto-audio/src/dts/'s tables: DTS Coherent Acoustics' tables (ETSI TS
102 114, annex D) as numbers, taken from FFmpeg 5.1's copy of them (Debian's source
package, fetched from deb.debian.org). tables.rs holds the small ones and the Huffman
codebooks; adpcm_vq.bin (4096 x 4 int16), hf_vq.bin (1024 x 32 int8) and fir.bin (the
perfect and lossy 512-tap synthesis windows, then the two 256-tap LFE interpolators, as
float32) the larger ones, little-endian. The tables are committed; rerun this only to
check or change them.
"""

import re
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SOURCE = "http://deb.debian.org/debian/pool/main/f/ffmpeg/ffmpeg_5.1.9.orig.tar.xz"
OUT = Path(__file__).resolve().parent.parent / "crates/sotto-audio/src/dts"


def arrays(text: str) -> dict[str, list]:
    """Every initialised C array of `text`: name -> its numbers, flattened."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    out = {}
    decl = r"(?:DECLARE_ALIGNED\(\d+,\s*)?(?:static\s+)?const\s+\w+\s*,?\s*\)?\s*(\w+)\s*\)?(?:\[[^\]]*\])+\s*=\s*\{"
    for m in re.finditer(decl, text):
        start = i = m.end() - 1
        depth = 0
        while True:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        values = []
        for n in re.findall(r"-?(?:0x[0-9A-Fa-f]+|\d+\.?\d*(?:[eE][-+]?\d+)?)f?", text[start + 1:i]):
            n = n.rstrip("f")
            if "0x" in n.lower():
                values.append(int(n, 16))
            elif "." in n or "e" in n.lower():
                values.append(float(n))
            else:
                values.append(int(n))
        out[m.group(1)] = values
    return out


def rust_array(name: str, ty: str, values: list, per: int = 12) -> str:
    rows = "".join("    " + ", ".join(str(x) for x in values[i:i + per]) + ",\n"
                   for i in range(0, len(values), per))
    return f"pub(super) const {name}: [{ty}; {len(values)}] = [\n{rows}];\n"


def rust_books(name: str, doc: str, books: list) -> str:
    items = "".join(
        "    Book {\n        lens: &[" + ", ".join(map(str, lens)) + "],\n        codes: &["
        + ", ".join(map(str, codes)) + "],\n    },\n" for lens, codes in books)
    return f"/// {doc}\npub(super) const {name}: [Book; {len(books)}] = [\n{items}];\n"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "ffmpeg.tar.xz"
        subprocess.run(["curl", "-sSfL", "-o", str(tarball), SOURCE], check=True)
        with tarfile.open(tarball) as tar:
            def read(name):
                member = next(m for m in tar.getmembers() if m.name.endswith(name))
                return tar.extractfile(member).read().decode()
            d = arrays(read("libavcodec/dcadata.c"))
            h = arrays(read("libavcodec/dcahuff.c"))
    (OUT / "adpcm_vq.bin").write_bytes(struct.pack("<16384h", *d["ff_dca_adpcm_vb"]))
    (OUT / "hf_vq.bin").write_bytes(struct.pack("<32768b", *d["ff_dca_high_freq_vq"]))
    fir = (d["ff_dca_fir_32bands_perfect"] + d["ff_dca_fir_32bands_nonperfect"]
           + d["ff_dca_lfe_fir_64"] + d["ff_dca_lfe_fir_128"])
    (OUT / "fir.bin").write_bytes(struct.pack("<1536f", *fir))

    def rows(base, count, n):
        lens, codes = h[base + "_bits"], h[base + "_codes"]
        return [(lens[i * n:(i + 1) * n], codes[i * n:(i + 1) * n]) for i in range(count)]

    r = [
        "//! DTS Coherent Acoustics' tables (ETSI TS 102 114, annex D), as numbers; written by",
        "//! `scripts/dts-tables.py` from FFmpeg 5.1's copy of them. The larger ones (the ADPCM and",
        "//! high-frequency codebooks, the filter banks' windows) are the `.bin` files beside this one.",
        "",
        "/// Bit rates by `RATE` code; 1, 2 and 3 mark open, variable and lossless.",
        rust_array("BIT_RATES", "u32", d["ff_dca_bit_rates"], 8),
        "/// Sample rates by `SFREQ` code; 0 where the code is not one.",
        rust_array("SAMPLE_RATES", "u32", [0, 8000, 16000, 32000, 0, 0, 11025, 22050, 44100,
                                           0, 0, 12000, 24000, 48000, 96000, 192000], 8),
        "/// Primary channels by audio mode (`AMODE`).",
        rust_array("CHANNELS", "u8", d["ff_dca_channels"], 16),
        "/// Bits of each codebook select (`SEL`), by allocation index 1 to 10.",
        rust_array("SEL_BITS", "u32", d["ff_dca_quant_index_sel_nbits"], 10),
        "/// How many of a select's values name Huffman codebooks, by allocation index 1 to 10.",
        rust_array("HUFFMAN_SELS", "u8", d["ff_dca_quant_index_group_size"], 10),
        "/// Scale factors, 6-bit (2.2 dB steps) and 7-bit (1.1 dB).",
        rust_array("SCALE6", "i32", d["ff_dca_scale_factor_quant6"], 8),
        rust_array("SCALE7", "i32", d["ff_dca_scale_factor_quant7"], 8),
        "/// Joint intensity scale factors (Q17), by index + 64.",
        rust_array("JOINT_SCALES", "i32", d["ff_dca_joint_scale_factors"], 8),
        "/// Scale factor adjustments for Huffman-coded samples (Q22).",
        rust_array("SCALE_ADJ", "i32", d["ff_dca_scale_factor_adj"], 4),
        "/// Levels of the block codes, by allocation index.",
        rust_array("LEVELS", "i32", d["ff_dca_quant_levels"], 8),
        "/// Quantizer step sizes (Q22), lossy and lossless, by allocation index.",
        rust_array("LOSSY_STEP", "i32", d["ff_dca_lossy_quant"], 8),
        rust_array("LOSSLESS_STEP", "i32", d["ff_dca_lossless_quant"], 8),
        "/// A Huffman codebook: symbol `i` has the code `codes[i]`, `lens[i]` bits long.",
        "pub(super) struct Book {\n    pub(super) lens: &'static [u8],\n"
        "    pub(super) codes: &'static [u16],\n}\n",
        rust_books("TMODE", "Transient mode codebooks (`TMODE`), by select.", rows("tmode", 4, 4)),
        rust_books("ABITS", "Bit allocation index codebooks (values 1 to 12), by select.",
                   rows("bitalloc_12", 5, 12)),
        rust_books("SCALES", "Scale factor codebooks (values -64 to 64), by select.",
                   rows("scales", 5, 129)),
    ]
    sizes = [3, 5, 7, 9, 13, 17, 25, 33, 65, 129]
    for size, count in zip(sizes, [1, 3, 3, 3, 3, 7, 7, 7, 7, 7]):
        books = []
        for j in range(count):
            suffix = "" if size == 3 else "_" + "abcdefg"[j]
            books.append((h[f"bitalloc_{size}_bits{suffix}"], h[f"bitalloc_{size}_codes{suffix}"]))
        r.append(rust_books(f"SAMPLES_{size}", f"Sample codebooks of {size} levels (values "
                            f"{-(size // 2)} to {size // 2}), by select.", books))
    r.append("/// The sample codebooks by allocation index 1 to 10.")
    r.append("pub(super) const SAMPLES: [&[Book]; 10] = [\n"
             + "".join(f"    &SAMPLES_{s},\n" for s in sizes) + "];\n")
    (OUT / "tables.rs").write_text("\n".join(r))
    subprocess.run(["rustfmt", "--edition", "2021", str(OUT / "tables.rs")], check=True)


if __name__ == "__main__":
    sys.exit(main())
