"""`serve.save`: write PyTorch's zip checkpoint format, which `torch.load(..., weights_only=True)` reads bit-exactly.

The object is pickled with protocol 2 as torch.save pickles it: a tensor is `torch._utils._rebuild_tensor_v2` of a
storage persistent id, offset, size and stride; a Parameter is `torch._utils._rebuild_parameter` of its data.
Tensors that view one numpy array (tied weights, transposes, slices) share one storage record. The names torch's
loader looks up (`torch.FloatStorage`, ...) are written as GLOBAL opcodes directly, so torch is never imported.
Storages are written uncompressed and 64-byte aligned (padding in a local "FB" extra field, like torch's writer),
so `torch.load(mmap=True)` and `serve.load(mmap=True)` can map them.
"""

from __future__ import annotations

import codecs
import io
import os
import pickle
import secrets
import struct
import sys
import zipfile
from collections import OrderedDict
from typing import IO, Any

import numpy as np

from serve.backend import device
from serve.nn.parameter import Parameter
from serve.serialization.storage import STORAGE_DTYPES
from serve.tensor.dtypes import dtype
from serve.tensor.tensor import Size, Tensor

ALIGNMENT = 64
_PLAIN = {type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, OrderedDict, set}
# classes and functions that protocol 2 names when it pickles the plain types above
_PLAIN_GLOBALS = {id(x) for x in (OrderedDict, set, bytearray, bytes, complex, codecs.encode)}


class _Global:
    """A global written by name (`torch FloatStorage`) without importing its module."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __reduce__(self) -> str:
        return self.name

    def __call__(self, *args: Any) -> Any:  # pickle insists a reduce function be callable; it is never called
        raise TypeError(f"{self.module}.{self.name} only names a global in a checkpoint")


_REBUILD_TENSOR = _Global("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = _Global("torch._utils", "_rebuild_parameter")
_TORCH_SIZE, _TORCH_DEVICE = _Global("torch", "Size"), _Global("torch", "device")
_STORAGE_TYPES = {dt: _Global("torch", name) for name, dt in reversed(STORAGE_DTYPES.items())}  # ByteStorage wins
_DTYPE_GLOBALS = {dt: _Global("torch", dt.name) for dt in _STORAGE_TYPES}


class _StorageRef:
    __slots__ = ("bytes", "key", "location", "numel", "stype")

    def __init__(self, key: str, dt: dtype, data: np.ndarray, location: str) -> None:
        self.key, self.stype, self.location = key, _STORAGE_TYPES[dt], location
        self.bytes = data  # flat uint8, the storage's content
        self.numel = data.nbytes // dt.itemsize


class _Storages:
    """The storages of the tensors being saved: one per (numpy root array, dtype), so views share one."""

    def __init__(self) -> None:
        self.refs: dict[tuple[int, dtype], _StorageRef] = {}
        self.roots: list[np.ndarray] = []  # keeps every root alive, so no id() is reused while saving
        self.order: list[_StorageRef] = []

    def add(self, arr: np.ndarray, dt: dtype, location: str) -> tuple[_StorageRef, int, tuple[int, ...]]:
        """The storage holding `arr`, and arr's offset and strides in it (in elements)."""
        item = dt.itemsize
        root = arr
        while isinstance(root.base, np.ndarray):
            root = root.base
        if arr.size and (root.flags.c_contiguous or root.flags.f_contiguous) and root.nbytes % item == 0:
            flat = (root if root.flags.c_contiguous else root.T).reshape(-1).view(np.uint8)
            offset = arr.__array_interface__["data"][0] - flat.__array_interface__["data"][0]
            if offset % item == 0 and all(s >= 0 and s % item == 0 for s in arr.strides):
                ref = self.refs.get((id(root), dt))
                if ref is None:
                    ref = self.refs[(id(root), dt)] = self._new(dt, flat, location)
                    self.roots.append(root)
                return ref, offset // item, tuple(s // item for s in arr.strides)
        # empty, negatively strided, or byte-strided views are saved as a contiguous copy of their own
        copy = np.ascontiguousarray(arr)
        strides = tuple(s // item for s in copy.strides) if copy.size else _contiguous_strides(copy.shape)
        return self._new(dt, copy.reshape(-1).view(np.uint8), location), 0, strides

    def _new(self, dt: dtype, flat: np.ndarray, location: str) -> _StorageRef:
        ref = _StorageRef(str(len(self.order)), dt, flat, location)
        self.order.append(ref)
        return ref


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


# the pure-Python pickler: unlike the C one, it lets save_global write a name without importing its module
_PurePickler: Any = pickle._Pickler


class _Pickler(_PurePickler):
    """Protocol 2 pickling restricted to what torch's weights-only loader and serve.load accept."""

    def __init__(self, file: IO[bytes], storages: _Storages) -> None:
        super().__init__(file, protocol=2)
        self.storages = storages

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is _StorageRef:
            return ("storage", obj.stype, obj.key, obj.location, obj.numel)
        return None

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        t = type(obj)
        if t is _Global or t is dtype:
            return "global"  # routed to save_global below
        if t is device:
            return _TORCH_DEVICE, (obj.type,) if obj.index is None else (obj.type, obj.index)
        if t is Size:
            return _TORCH_SIZE, (tuple(obj),)
        if t in _PLAIN or id(obj) in _PLAIN_GLOBALS:
            return NotImplemented
        raise TypeError(
            f"serve.save writes tensors, dicts, lists, tuples, sets and Python scalars (what torch.load(weights_only="
            f"True) reads back); got {t.__module__}.{t.__qualname__}. Save a model's state_dict(), not the model."
        )

    def save_global(self, obj: Any, name: Any = None) -> None:
        g = obj if type(obj) is _Global else _DTYPE_GLOBALS.get(obj) if type(obj) is dtype else None
        if g is None:
            super().save_global(obj, name)
            return
        self.write(pickle.GLOBAL + f"{g.module}\n{g.name}\n".encode("ascii"))
        self.memoize(obj)

    def _tensor(self, t: Tensor) -> tuple[Any, tuple[Any, ...]]:
        if isinstance(t, Parameter):
            return _REBUILD_PARAMETER, (t.detach(), t.requires_grad, OrderedDict())
        location = "cpu" if t.device.type == "cpu" else str(t.device)
        arr = t._data if t.device.type == "cpu" else t._host()
        ref, offset, stride = self.storages.add(arr, t.dtype, location)
        return _REBUILD_TENSOR, (ref, offset, tuple(arr.shape), stride, t.requires_grad, OrderedDict())


def save(obj: Any, f: str | os.PathLike | IO[bytes]) -> None:
    """Save `obj` (a state_dict, a tensor, or a checkpoint dict around them) in PyTorch's zip format."""
    storages = _Storages()
    pkl = io.BytesIO()
    _Pickler(pkl, storages).dump(obj)
    records: list[tuple[str, Any]] = [
        ("data.pkl", pkl.getbuffer()), (".format_version", b"1"), (".storage_alignment", str(ALIGNMENT).encode()),
        ("byteorder", sys.byteorder.encode()),
    ]  # fmt: skip
    records += [(f"data/{ref.key}", memoryview(ref.bytes)) for ref in storages.order]  # type: ignore[arg-type]
    records += [("version", b"3\n"), (".data/serialization_id", f"{secrets.randbits(128):040d}".encode())]
    if isinstance(f, (str, os.PathLike)):
        root = os.path.splitext(os.path.basename(os.fspath(f)))[0] or "archive"
        with open(f, "wb") as out:
            _write_zip(out, root, records)
    elif hasattr(f, "write"):
        _write_zip(f, "archive", records)
    else:
        raise TypeError(f"serve.save expects a path or a binary file object, got {type(f).__name__}")


def _write_zip(out: IO[bytes], root: str, records: list[tuple[str, Any]]) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in records:
            info = zipfile.ZipInfo(f"{root}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.file_size = info.compress_size = len(data)
            info.extra = _padding(zf.start_dir, info)
            zf.writestr(info, data)


def _padding(offset: int, info: zipfile.ZipInfo) -> bytes:
    """A local extra field that puts the entry's data at a multiple of ALIGNMENT bytes from the file's start."""
    zip64 = info.file_size * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's own rule for adding a zip64 extra field
    # fixed header, name, our extra field's id and length, zip64's (id, length, two sizes)
    header = 30 + len(info.filename.encode("utf-8")) + 4 + (20 if zip64 else 0)
    pad = -(offset + header) % ALIGNMENT
    return struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # 0x4246 = "FB", the id torch's writer uses
