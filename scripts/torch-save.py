#!/usr/bin/env python3
"""Writes Whisper checkpoints in PyTorch's format without PyTorch, for sotto's tests.

    scripts/torch-save.py hf HF_DIR OUT_DIR [--shards N]
        a Hugging Face folder (as `sotto convert --to hf` writes one) with its
        model.safetensors written as `pytorch_model.bin` (or N shards and their
        `pytorch_model.bin.index.json`), as transformers' save_pretrained wrote
        checkpoints before safetensors; the other files are copied.
    scripts/torch-save.py openai GGML_BIN OUT.pt
        a whisper.cpp f16 ggml file as openai-whisper's checkpoint: {"dims": {...},
        "model_state_dict": {...}}, under the same names (whisper.cpp's converter kept
        openai-whisper's); conv biases [d] again.

The file is what `torch.save` writes (torch/serialization.py): a zip of stored entries,
`<archive>/data.pkl` (pickle protocol 2; each tensor a
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)`
call whose storage is the persistent id `("storage", torch.<T>Storage, key, "cpu",
numel)`; the state dict an OrderedDict with its `_metadata`), `<archive>/byteorder`,
`<archive>/data/<key>` per storage, `<archive>/version`. Python's pickle writes the
pickle, with stand-ins registered as the torch functions and classes it names. Only the
standard library is needed.
"""
import collections
import json
import pickle
import shutil
import struct
import sys
import types
import zipfile
from pathlib import Path

torch = types.ModuleType("torch")
torch_utils = types.ModuleType("torch._utils")
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch_utils


def _rebuild_tensor_v2(*args):  # named by the pickle, never called here
    raise RuntimeError("a stand-in")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch_utils._rebuild_tensor_v2 = _rebuild_tensor_v2
STORAGES = {}
for name in ("HalfStorage", "FloatStorage", "BFloat16Storage"):
    cls = type(name, (), {"__module__": "torch"})
    setattr(torch, name, cls)
    STORAGES[name] = cls
KIND = {"F16": ("HalfStorage", 2), "F32": ("FloatStorage", 4), "BF16": ("BFloat16Storage", 2)}


class Storage:
    def __init__(self, kind, key, data):
        self.kind, self.key, self.data = kind, key, data


class Tensor:
    def __init__(self, storage, shape):
        self.storage, self.shape = storage, tuple(shape)

    def __reduce_ex__(self, protocol):
        stride, acc = [], 1
        for d in reversed(self.shape):
            stride.insert(0, acc)
            acc *= d
        return (_rebuild_tensor_v2,
                (self.storage, 0, self.shape, tuple(stride), False, collections.OrderedDict()))


class Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            size = KIND[obj.kind][1]
            return ("storage", STORAGES[KIND[obj.kind][0]], obj.key, "cpu", len(obj.data) // size)
        return None


def save(obj, storages, path):
    """torch.save's zip: data.pkl, byteorder, data/<key> in key order, version."""
    import io
    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(obj)
    archive = Path(path).stem
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{archive}/data.pkl", buf.getvalue())
        z.writestr(f"{archive}/byteorder", "little")
        for s in sorted(storages, key=lambda s: s.key):
            z.writestr(f"{archive}/data/{s.key}", s.data)
        z.writestr(f"{archive}/version", "3\n")


def state_dict(tensors):
    """An OrderedDict of tensors, each on its own storage, with torch's `_metadata`."""
    sd = collections.OrderedDict()
    storages = []
    for i, (name, kind, shape, data) in enumerate(tensors):
        s = Storage(kind, str(i), data)
        storages.append(s)
        sd[name] = Tensor(s, shape)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    return sd, storages


def read_safetensors(path):
    b = Path(path).read_bytes()
    (n,) = struct.unpack_from("<Q", b, 0)
    header = json.loads(b[8:8 + n])
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        out.append((s, (name, info["dtype"], info["shape"], b[8 + n + s:8 + n + e])))
    return [t for _, t in sorted(out, key=lambda x: x[0])]


def hf(src, dst, shards):
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, dst / f.name)
    tensors = read_safetensors(src / "model.safetensors")
    if shards <= 1:
        save(*state_dict(tensors), dst / "pytorch_model.bin")
        return
    per = -(-len(tensors) // shards)
    weight_map = {}
    for k in range(shards):
        part = tensors[k * per:(k + 1) * per]
        name = f"pytorch_model-{k + 1:05d}-of-{shards:05d}.bin"
        save(*state_dict(part), dst / name)
        weight_map.update({t[0]: name for t in part})
    index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2))


def read_ggml(path):
    """(dims, [(name, kind, shape, bytes)]) of a whisper.cpp f16 ggml file."""
    b = Path(path).read_bytes()
    pos = 4
    h = struct.unpack_from("<11i", b, pos)
    pos += 44
    keys = ["n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
            "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels"]
    dims = dict(zip(keys, h[:10]))
    n_mel, n_fft = struct.unpack_from("<2i", b, pos)
    pos += 8 + 4 * n_mel * n_fft
    (n_tokens,) = struct.unpack_from("<i", b, pos)
    pos += 4
    for _ in range(n_tokens):
        (n,) = struct.unpack_from("<i", b, pos)
        pos += 4 + n
    tensors = []
    while pos < len(b):
        n_dims, name_len, ttype = struct.unpack_from("<3i", b, pos)
        pos += 12
        ne = struct.unpack_from(f"<{n_dims}i", b, pos)
        pos += 4 * n_dims
        name = b[pos:pos + name_len].decode()
        pos += name_len
        kind, size = {0: ("F32", 4), 1: ("F16", 2)}[ttype]
        count = 1
        for d in ne:
            count *= d
        shape = list(reversed(ne))
        if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
            shape = [shape[0] * shape[1]]
        tensors.append((name, kind, shape, b[pos:pos + count * size]))
        pos += count * size
    return dims, tensors


def openai(src, dst):
    dims, tensors = read_ggml(src)
    sd, storages = state_dict(tensors)
    save({"dims": dims, "model_state_dict": sd}, storages, dst)


def main():
    mode, src, dst, *rest = sys.argv[1:]
    if mode == "hf":
        shards = int(rest[1]) if rest[:1] == ["--shards"] else 1
        hf(src, dst, shards)
    elif mode == "openai":
        openai(src, dst)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
