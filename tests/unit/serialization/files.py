"""Helpers for the serialization tests: craft checkpoint files byte by byte, and describe loaded objects.

`describe(obj)` turns a loaded checkpoint (serve's or torch's objects) into plain JSON-able data: containers,
scalars, and for each tensor its dtype, shape, stride, storage offset, which storage it views (numbered by first
appearance), whether it is a Parameter, requires_grad and its values. Equal descriptions mean equal loads,
including which tensors share memory. `tests/fixtures/checkpoints/expected.json` holds torch's descriptions.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Any

import numpy as np

import serve
from serve.serialization.storage import STORAGE_DTYPES

try:
    import torch
except ImportError:
    torch = None


# -- describing loaded objects ---------------------------------------------------------------------
def describe(obj: Any, storages: dict | None = None) -> Any:
    storages = {} if storages is None else storages
    if serve.is_tensor(obj) or (torch is not None and isinstance(obj, torch.Tensor)):
        return _tensor(obj, storages)
    if isinstance(obj, OrderedDict):
        meta = getattr(obj, "_metadata", None)
        out = {"OrderedDict": [[describe(k, storages), describe(v, storages)] for k, v in obj.items()]}
        if meta is not None:
            out["_metadata"] = describe(meta, storages)
        return out
    if isinstance(obj, dict):
        return {"dict": [[describe(k, storages), describe(v, storages)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__: [describe(v, storages) for v in obj]}
    if isinstance(obj, (set, frozenset)):
        return {type(obj).__name__: sorted(describe(v, storages) for v in obj)}
    if isinstance(obj, (bytes, bytearray)):
        return {type(obj).__name__: obj.hex()}
    if isinstance(obj, serve.dtype) or (torch is not None and isinstance(obj, torch.dtype)):
        return {"dtype": str(obj).split(".")[-1]}
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"float": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return {"other": repr(obj)}


def _tensor(t: Any, storages: dict) -> dict:
    if serve.is_tensor(t):
        arr = t.detach().numpy()
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        base_ptr = root.__array_interface__["data"][0]
        offset = (arr.__array_interface__["data"][0] - base_ptr) // arr.itemsize if arr.size else 0
        stride = list(t.stride())
        key = ("serve", id(root)) if arr.size else ("empty", len(storages))
        is_param = isinstance(t, serve.nn.Parameter)
    else:
        arr = _torch_numpy(t)
        st = t.untyped_storage()
        offset, stride = t.storage_offset(), list(t.stride())
        key = ("torch", st.data_ptr()) if st.nbytes() else ("empty", len(storages))
        is_param = isinstance(t, torch.nn.Parameter)
    storage = storages.setdefault(key, len(storages))
    dtype = str(t.dtype).split(".")[-1]
    return {
        "tensor": dtype, "shape": list(t.shape), "stride": stride if t.numel() else None,
        "offset": offset if t.numel() else None, "storage": storage, "parameter": is_param,
        "requires_grad": bool(t.requires_grad), "values": _values(arr),
    }  # fmt: skip


def _torch_numpy(t: Any) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def _values(arr: np.ndarray) -> Any:
    if arr.dtype.kind == "c":
        return {"re": _floats(arr.real), "im": _floats(arr.imag)}
    if arr.dtype.kind in "biu":
        return arr.tolist()
    return _floats(arr)


def _floats(arr: np.ndarray) -> Any:
    vals = arr.astype(np.float64).tolist()
    return _finite(vals)


def _finite(v: Any) -> Any:
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v if math.isfinite(v) else repr(v)


# -- crafting files ----------------------------------------------------------------------------------
def torch_zip(pkl: bytes, storages: dict[str, bytes] | None = None, root: str = "archive",
              byteorder: str | None = "little", extra: dict[str, bytes] | None = None) -> bytes:  # fmt: skip
    """A PyTorch zip checkpoint from raw parts: data.pkl, data/<key> records, byteorder, version."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{root}/data.pkl", pkl)
        if byteorder is not None:
            zf.writestr(f"{root}/byteorder", byteorder)
        for key, data in (storages or {}).items():
            zf.writestr(f"{root}/data/{key}", data)
        zf.writestr(f"{root}/version", "3\n")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return out.getvalue()


def records(path_or_bytes: Any) -> tuple[str, dict[str, bytes]]:
    """The root and every record of a zip checkpoint."""
    src = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    with zipfile.ZipFile(src) as zf:
        names = zf.namelist()
        root = next(n for n in names if n.endswith("/data.pkl"))[: -len("data.pkl")]
        return root, {n[len(root) :]: zf.read(n) for n in names}


def patch_pickle(data: bytes, old: bytes, new: bytes) -> bytes:
    """The same zip checkpoint with bytes of its data.pkl replaced (the archive rebuilt around it)."""
    root, recs = records(data)
    assert old in recs["data.pkl"], "nothing to patch"
    storages = {name[len("data/") :]: blob for name, blob in recs.items() if name.startswith("data/")}
    return torch_zip(recs["data.pkl"].replace(old, new), storages, root.rstrip("/"))


def storage_dtypes(pkl: bytes) -> dict[str, np.dtype]:
    """Storage key -> numpy dtype, read from a data.pkl without building anything (torch-free)."""
    found: dict[str, np.dtype] = {}

    class _Anything(dict):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()

    class _Spy(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if name in STORAGE_DTYPES:
                return STORAGE_DTYPES[name]
            return _Anything

        def persistent_load(self, pid: Any) -> Any:
            found[pid[2]] = pid[1].np
            return None

    _Spy(io.BytesIO(pkl)).load()
    return found


def to_big_endian(data: bytes) -> bytes:
    """The same checkpoint with every storage byteswapped and the byteorder record saying 'big'."""
    root, recs = records(data)
    kinds = storage_dtypes(recs["data.pkl"])
    storages = {
        name[len("data/") :]: np.frombuffer(blob, kinds[name[len("data/") :]]).byteswap().tobytes()
        for name, blob in recs.items()
        if name.startswith("data/")
    }
    return torch_zip(recs["data.pkl"], storages, root.rstrip("/"), byteorder="big")


def safetensors_file(header: Any, data: bytes = b"", header_len: int | None = None) -> bytes:
    """A safetensors file from a header (a dict, or raw bytes) and data; header_len may lie."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + data
