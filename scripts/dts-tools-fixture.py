#!/usr/bin/env python3
"""Rewrites DTS core frames (16-bit big-endian) to use the coding tools FFmpeg's encoder
never writes, so that sotto's decoder can be checked on them against FFmpeg's decoder:
Huffman-coded scale factors (all five books) and bit allocation, every transient mode
book and transients themselves, scale factor adjustments, block, Huffman and linear
sample codes by turns, high-frequency VQ, joint intensity (Huffman and linear joint
scales), 128x LFE decimation, CRC and dynamic range words, DSYNC after every subsubframe,
sum/difference pairs, the perfect-reconstruction filter and no predictor history.

    scripts/dts-tools-fixture.py IN.dts OUT.dts

The audio changes (that is not the point: both decoders must agree on what it now says).
The tables come from crates/sotto-audio/src/dts/. Used by make-audio-fixtures.sh.
"""

import re
import sys
from pathlib import Path

DTS = Path(__file__).resolve().parent.parent / "crates/sotto-audio/src/dts"


def load_tables():
    text = (DTS / "tables.rs").read_text()
    consts = {}
    for chunk in text.split("pub(super) const ")[1:]:
        name, rest = chunk.split(":", 1)
        body = rest.split("=", 1)[1] if "=" in rest else ""
        if "Book {" in body:
            consts[name] = [
                ([int(x) for x in lens.split(",") if x.strip()],
                 [int(x) for x in codes.split(",") if x.strip()])
                for lens, codes in re.findall(r"lens: &\[([^\]]*)\],\s*codes: &\[([^\]]*)\]", body, re.S)]
        else:
            consts[name] = [int(x) for x in re.findall(r"-?\d+", body.split(";")[0])]
    sizes = [3, 5, 7, 9, 13, 17, 25, 33, 65, 129]
    consts["SAMPLES"] = [consts[f"SAMPLES_{s}"] for s in sizes]
    vq = (DTS / "hf_vq.bin").read_bytes()
    consts["HF_VQ"] = [[b - 256 if b > 127 else b for b in vq[i * 32:(i + 1) * 32]]
                       for i in range(1024)]
    return consts


T = load_tables()
BLOCK_BITS = [7, 10, 12, 13, 15, 17, 19]


class Reader:
    def __init__(self, data):
        self.bits = "".join(f"{b:08b}" for b in data)
        self.p = 0

    def get(self, n):
        if n == 0:
            return 0
        s = self.bits[self.p:self.p + n]
        if len(s) < n:
            raise ValueError("past the frame")
        self.p += n
        return int(s, 2)

    def sget(self, n):
        v = self.get(n)
        return v - (1 << n) if v >> (n - 1) else v

    def huff(self, book, offset):
        for i, (ln, code) in enumerate(zip(*book)):
            if self.bits[self.p:self.p + ln] == format(code, f"0{ln}b"):
                self.p += ln
                return i + offset
        raise ValueError("no such code")


class Writer:
    def __init__(self):
        self.parts = []

    def put(self, n, v):
        if n:
            self.parts.append(format(v & ((1 << n) - 1), f"0{n}b"))

    def huff(self, book, value, offset):
        lens, codes = book
        i = value - offset
        assert 0 <= i < len(lens), (value, offset, len(lens))
        self.parts.append(format(codes[i], f"0{lens[i]}b"))

    def bytes(self):
        bits = "".join(self.parts)
        bits += "0" * (-len(bits) % 32)  # whole 32-bit words
        return int(bits, 2).to_bytes(len(bits) // 8, "big")


HEADER = [("sync", 32), ("ftype", 1), ("short", 5), ("crc", 1), ("nblks", 7), ("fsize", 14),
          ("amode", 6), ("sfreq", 4), ("rate", 5), ("mix", 1), ("dynf", 1), ("timef", 1),
          ("auxf", 1), ("hdcd", 1), ("ext_id", 3), ("ext", 1), ("aspf", 1), ("lff", 2),
          ("hflag", 1)]
HEADER2 = [("filts", 1), ("vernum", 4), ("chist", 2), ("pcmr", 3), ("sumf", 1), ("sums", 1),
           ("dialnorm", 4)]


def codes_read(r, c, ch, abits):
    if abits == 0:
        return [0] * 8, False
    if abits <= 10:
        sel = c["sample_sel"][abits - 1][ch]
        if sel < T["HUFFMAN_SELS"][abits - 1]:
            book = T["SAMPLES"][abits - 1][sel]
            return [r.huff(book, -(len(book[0]) // 2)) for _ in range(8)], True
        if abits <= 7:
            levels = T["LEVELS"][abits]
            out = []
            for _ in range(2):
                code = r.get(BLOCK_BITS[abits - 1])
                for _ in range(4):
                    out.append(code % levels - (levels - 1) // 2)
                    code //= levels
            return out, False
    return [r.sget(abits - 3) for _ in range(8)], False


def codes_write(w, c, ch, abits, codes):
    if abits == 0:
        return
    if abits <= 10:
        sel = c["sample_sel"][abits - 1][ch]
        if sel < T["HUFFMAN_SELS"][abits - 1]:
            book = T["SAMPLES"][abits - 1][sel]
            for x in codes:
                w.huff(book, x, -(len(book[0]) // 2))
            return
        if abits <= 7:
            levels = T["LEVELS"][abits]
            for half in (codes[:4], codes[4:]):
                code = 0
                for x in reversed(half):
                    code = code * levels + x + (levels - 1) // 2
                w.put(BLOCK_BITS[abits - 1], code)
            return
    for x in codes:
        w.put(abits - 3, x)


def parse(frame):
    r = Reader(frame)
    h = {name: r.get(n) for name, n in HEADER}
    if h["crc"]:
        r.get(16)
    h.update({name: r.get(n) for name, n in HEADER2})
    blocks = h["nblks"] + 1
    c = {"subframes": r.get(4) + 1, "nch": r.get(3) + 1}
    n = c["nch"]
    c["subs"] = [r.get(5) + 2 for _ in range(n)]
    c["vq_start"] = [r.get(5) + 1 for _ in range(n)]
    c["joint"] = [r.get(3) for _ in range(n)]
    c["tmode_sel"] = [r.get(2) for _ in range(n)]
    c["scale_sel"] = [r.get(3) for _ in range(n)]
    c["abits_sel"] = [r.get(3) for _ in range(n)]
    c["sample_sel"] = [[r.get(T["SEL_BITS"][k]) for _ in range(n)] for k in range(10)]
    c["adjust"] = [[r.get(2) if c["sample_sel"][k][ch] < T["HUFFMAN_SELS"][k] else None
                    for ch in range(n)] for k in range(10)]
    if h["crc"]:
        r.get(16)
    subframes = []
    for _ in range(c["subframes"]):
        s = {"ssfs": r.get(2) + 1, "pssc": r.get(3)}
        s["pmode"] = [[r.get(1) for _ in range(c["subs"][ch])] for ch in range(n)]
        s["pvq"] = [[r.get(12) if m else 0 for m in s["pmode"][ch]] for ch in range(n)]
        s["abits"] = []
        for ch in range(n):
            sel = c["abits_sel"][ch]
            s["abits"].append([r.huff(T["ABITS"][sel], 1) if sel < 5 else r.get(sel - 1)
                               for _ in range(c["vq_start"][ch])])
        s["tmode"] = []
        for ch in range(n):
            s["tmode"].append([r.huff(T["TMODE"][c["tmode_sel"][ch]], 0)
                               if s["ssfs"] > 1 and a else 0 for a in s["abits"][ch]])
        s["scales"] = []
        for ch in range(n):
            sel, idx, out = c["scale_sel"][ch], 0, []

            def one():
                nonlocal idx
                idx = idx + r.huff(T["SCALES"][sel], -64) if sel < 5 else r.get(sel + 1)
                return idx
            for band in range(max(c["vq_start"][ch], c["subs"][ch])):
                if band < c["vq_start"][ch]:
                    if s["abits"][ch][band]:
                        first = one()
                        out.append([first, one() if s["tmode"][ch][band] else None])
                    else:
                        out.append([None, None])
                else:
                    out.append([one(), None])
            s["scales"].append(out)
        s["joint_sel"] = [r.get(3) if c["joint"][ch] else None for ch in range(n)]
        s["joint_scales"] = []
        for ch in range(n):
            vals = []
            if c["joint"][ch]:
                sel = s["joint_sel"][ch]
                for _ in range(c["subs"][ch], c["subs"][c["joint"][ch] - 1]):
                    vals.append(r.huff(T["SCALES"][sel], -64) if sel < 5 else r.get(sel + 1))
            s["joint_scales"].append(vals)
        s["drc"] = r.get(8) if h["dynf"] else None
        if h["crc"]:
            r.get(16)
        s["vq"] = [[r.get(10) for _ in range(c["vq_start"][ch], c["subs"][ch])]
                   for ch in range(n)]
        if h["lff"]:
            s["lfe"] = [r.sget(8) for _ in range(2 * h["lff"] * s["ssfs"])]
            s["lfe_scale"] = r.get(8)
        s["codes"] = []
        for ssf in range(s["ssfs"]):
            per = []
            for ch in range(n):
                per.append([codes_read(r, c, ch, a)[0] for a in s["abits"][ch]])
            s["codes"].append(per)
            if ssf == s["ssfs"] - 1 or h["aspf"]:
                assert r.get(16) == 0xFFFF, "DSYNC"
        subframes.append(s)
    assert blocks == 8 * sum(s["ssfs"] for s in subframes)
    return h, c, subframes


def write(h, c, subframes):
    w = Writer()
    for name, n in HEADER:
        w.put(n, h[name])
    if h["crc"]:
        w.put(16, 0x1234)
    for name, n in HEADER2:
        w.put(n, h[name])
    n = c["nch"]
    w.put(4, c["subframes"] - 1)
    w.put(3, n - 1)
    for key, off, bits in [("subs", 2, 5), ("vq_start", 1, 5), ("joint", 0, 3),
                           ("tmode_sel", 0, 2), ("scale_sel", 0, 3), ("abits_sel", 0, 3)]:
        for ch in range(n):
            w.put(bits, c[key][ch] - off)
    for k in range(10):
        for ch in range(n):
            w.put(T["SEL_BITS"][k], c["sample_sel"][k][ch])
    for k in range(10):
        for ch in range(n):
            if c["sample_sel"][k][ch] < T["HUFFMAN_SELS"][k]:
                w.put(2, c["adjust"][k][ch])
    if h["crc"]:
        w.put(16, 0x5678)
    for s in subframes:
        w.put(2, s["ssfs"] - 1)
        w.put(3, s["pssc"])
        for ch in range(n):
            for band in range(c["subs"][ch]):
                w.put(1, s["pmode"][ch][band])
        for ch in range(n):
            for band in range(c["subs"][ch]):
                if s["pmode"][ch][band]:
                    w.put(12, s["pvq"][ch][band])
        for ch in range(n):
            sel = c["abits_sel"][ch]
            for a in s["abits"][ch][:c["vq_start"][ch]]:
                if sel < 5:
                    w.huff(T["ABITS"][sel], a, 1)
                else:
                    w.put(sel - 1, a)
        for ch in range(n):
            if s["ssfs"] > 1:
                for band in range(c["vq_start"][ch]):
                    if s["abits"][ch][band]:
                        w.huff(T["TMODE"][c["tmode_sel"][ch]], s["tmode"][ch][band], 0)
        for ch in range(n):
            sel, last = c["scale_sel"][ch], 0

            def one(idx):
                nonlocal last
                if sel < 5:
                    w.huff(T["SCALES"][sel], idx - last, -64)
                else:
                    w.put(sel + 1, idx)
                last = idx
            for band in range(max(c["vq_start"][ch], c["subs"][ch])):
                first, second = s["scales"][ch][band]
                if band < c["vq_start"][ch]:
                    if s["abits"][ch][band]:
                        one(first)
                        if s["tmode"][ch][band]:
                            one(second)
                else:
                    one(first)
        for ch in range(n):
            if c["joint"][ch]:
                w.put(3, s["joint_sel"][ch])
        for ch in range(n):
            if c["joint"][ch]:
                sel = s["joint_sel"][ch]
                for v in s["joint_scales"][ch]:
                    if sel < 5:
                        w.huff(T["SCALES"][sel], v, -64)
                    else:
                        w.put(sel + 1, v)
        if h["dynf"]:
            w.put(8, s["drc"])
        if h["crc"]:
            w.put(16, 0x9ABC)
        for ch in range(n):
            for v in s["vq"][ch]:
                w.put(10, v)
        if h["lff"]:
            for x in s["lfe"]:
                w.put(8, x)
            w.put(8, s["lfe_scale"])
        for ssf in range(s["ssfs"]):
            for ch in range(n):
                for band in range(c["vq_start"][ch]):
                    codes_write(w, c, ch, s["abits"][ch][band], s["codes"][ssf][ch][band])
            if ssf == s["ssfs"] - 1 or h["aspf"]:
                w.put(16, 0xFFFF)
    out = bytearray(w.bytes())
    size = len(out) - 1
    # FSIZE: bits 46-59.
    word = int.from_bytes(out[4:8], "big") & ~(0x3FFF << 4) | (size << 4)
    out[4:8] = word.to_bytes(4, "big")
    return bytes(out)


def requantize(codes, old, new):
    """Codes at allocation `old` as codes at `new` (the same scale factor)."""
    step = T["LOSSY_STEP"]
    top = (1 << (new - 4)) - 1 if new > 10 else T["LEVELS"][new] // 2
    return [max(-top, min(top, round(x * step[old] / step[new]))) for x in codes]


def transform(h, c, subframes, frame_no):
    n = c["nch"]
    h.update(crc=1, dynf=1, aspf=1, sumf=1, sums=1, filts=1, hflag=0)
    for sf, s in enumerate(subframes):
        s["drc"] = (37 * sf + 11 * frame_no) % 256
    if h["lff"] == 2:
        h["lff"] = 1
        for s in subframes:
            s["lfe"] = s["lfe"][::2]
    for ch in range(n):
        c["tmode_sel"][ch] = (ch + frame_no) % 4
        c["scale_sel"][ch] = (ch + frame_no) % 5
        for k in range(10):
            sel = (k + ch + frame_no) % (1 << T["SEL_BITS"][k])
            c["sample_sel"][k][ch] = sel
            c["adjust"][k][ch] = (k + ch) % 4
    # Joint intensity: channel 2 takes channel 1's bands above 12.
    if n >= 3 and c["subs"][1] > 12:
        c["subs"][2] = min(c["subs"][2], 12)
        c["vq_start"][2] = c["subs"][2]
        c["joint"][2] = 2
        for sf, s in enumerate(subframes):
            sel = s["joint_sel"][2] = (sf + frame_no) % 7
            count = c["subs"][1] - c["subs"][2]
            # Huffman books code -64 to 64, the 6- and 7-bit fields 0 up (an index past 128
            # is invalid).
            s["joint_scales"][2] = [((b * 7 + sf) % 60) - (16 if sel < 5 else 0)
                                    for b in range(count)]
            for key in ("pmode", "pvq"):
                s[key][2] = s[key][2][:c["subs"][2]]
    # High-frequency VQ: channels 0 and 1 above band 20.
    vq_from = {ch: 20 for ch in range(min(n, 2)) if c["subs"][ch] > 20}
    for s in subframes:
        for ch in range(n):
            abits = s["abits"][ch][:c["vq_start"][ch]]
            abits += [0] * (c["vq_start"][ch] - len(abits))
            for band, a in enumerate(abits):
                if a > 12:
                    for ssf in range(s["ssfs"]):
                        s["codes"][ssf][ch][band] = requantize(s["codes"][ssf][ch][band], a, 12)
                    abits[band] = 12
                elif a == 0 and (band % 2 == 1 or frame_no % 2 == 0):
                    # Allocated, with zero samples: a scale factor and a transient to code
                    # (and, in even frames, no band left at 0 for the Huffman books).
                    abits[band] = 1
                    s["scales"][ch][band] = [30, None]
            s["abits"][ch] = abits
            for band in range(c["vq_start"][ch]):
                if s["abits"][ch][band] and s["ssfs"] > 1:
                    t = (band + ch) % 3 if band % 2 == 0 else 0
                    s["tmode"][ch][band] = min(t, s["ssfs"] - 1)
                else:
                    s["tmode"][ch][band] = 0
        for ch in range(n):
            for band in range(len(s["scales"][ch])):
                first, second = s["scales"][ch][band]
                if first is not None:
                    first = min(63, first // 2 if c["scale_sel"][ch] < 6 else first)
                if band < c["vq_start"][ch] and s["tmode"][ch][band]:
                    second = min(63, first + 3)
                s["scales"][ch][band] = [first, second]
    for ch, start in vq_from.items():
        for s in subframes:
            s["vq"][ch] = [(17 * band + 5 * ch + frame_no) % 1024
                           for band in range(start, c["subs"][ch])]
            s["abits"][ch] = s["abits"][ch][:start]
            s["tmode"][ch] = s["tmode"][ch][:start]
            for band in range(start, c["subs"][ch]):
                s["scales"][ch][band] = [20 + band % 20, None]
        c["vq_start"][ch] = start
    for ch in range(n):
        c["abits_sel"][ch] = (ch + frame_no) % 5
        if any(a > 12 or a < 1 for s in subframes for a in s["abits"][ch]):
            c["abits_sel"][ch] = 5 + (ch % 2)  # 4- or 5-bit indices
    return h, c, subframes


def main():
    data = Path(sys.argv[1]).read_bytes()
    out = bytearray()
    frame_no = 0
    while len(data) >= 16:
        size = (((data[5] & 3) << 12) | (data[6] << 4) | (data[7] >> 4)) + 1
        frame, data = data[:size], data[size:]
        h, c, subframes = parse(frame)
        written = write(*transform(h, c, subframes, frame_no))
        # What was written reads back, and writes again, as itself.
        assert write(*parse(written)) == written
        out += written
        frame_no += 1
    Path(sys.argv[2]).write_bytes(bytes(out))


if __name__ == "__main__":
    main()
