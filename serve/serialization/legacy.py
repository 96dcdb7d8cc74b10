"""Reading PyTorch's legacy checkpoint format (torch < 1.6, or `_use_new_zipfile_serialization=False`).

The file is a run of pickles: a magic number, the protocol version (1001), a sys_info dict, the object itself
(tensors as persistent ids naming storages), the sorted list of storage keys; then, for each key in that order,
an int64 element count and the storage's raw little-endian bytes. Storages are allocated while the object is
unpickled (each size checked against what the file can hold) and filled afterwards, straight from the file.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import numpy as np

from serve.backend import CPU
from serve.errors import CheckpointError
from serve.serialization.allowlist import find_global
from serve.serialization.location import Placement
from serve.serialization.opcodes import PickleTruncated
from serve.serialization.sources import Source
from serve.serialization.storage import Storage, StorageType, ascii_str
from serve.serialization.unpickler import Unpickler

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
_I64 = struct.Struct("<q")


def is_legacy(head: bytes) -> bool:
    """Whether a file starts with a pickle (binary protocol): a legacy checkpoint, or a plain pickle to refuse."""
    return head[:1] == b"\x80"


def read_legacy(src: Source, place: Placement) -> Any:
    """The object a legacy `torch.save` wrote; the pickles are read from a prefix that grows until they fit."""
    chunk = min(src.size, 1 << 20)
    while True:
        try:
            return _Reader(src, src.read(0, chunk)).load(place)
        except PickleTruncated:
            if chunk >= src.size:
                raise
            chunk = min(2 * chunk, src.size)


class _Reader:
    def __init__(self, src: Source, head: bytes) -> None:
        self.src, self.head = src, head
        self.roots: dict[str, tuple[Storage, np.ndarray, str]] = {}  # key -> (storage, its raw bytes, location)
        self.views: dict[str, Storage] = {}
        self.allocated = 0

    def load(self, place: Placement) -> Any:
        magic, pos = self._pickle(0)
        version, pos = self._pickle(pos)
        if magic != MAGIC_NUMBER or version != PROTOCOL_VERSION:
            raise CheckpointError(f"not a PyTorch legacy checkpoint (magic {magic!r:.30}, version {version!r:.30})")
        _, pos = self._pickle(pos)  # sys_info: byte order and C type sizes of the writer; data is little-endian
        obj, pos = Unpickler(self.head, find_global, self._persistent_load).load(pos)
        keys, pos = self._pickle(pos)
        self._fill(keys, pos)
        self._place(place)
        return obj

    def _pickle(self, pos: int) -> tuple[Any, int]:
        return Unpickler(self.head, find_global).load(pos)

    def _persistent_load(self, pid: Any) -> Storage:
        if type(pid) is tuple and pid and ascii_str(pid[0]) == "module":
            raise CheckpointError(
                "the checkpoint pickles a whole nn.Module class, which is not supported: save the state_dict instead"
            )
        if type(pid) is not tuple or len(pid) != 6 or ascii_str(pid[0]) != "storage":
            raise CheckpointError(f"unexpected persistent id {pid!r:.100}: only storages may be referenced")
        _, stype, key, location, numel, view = pid
        if type(stype) is not StorageType or type(numel) is not int or numel < 0:
            raise CheckpointError(f"invalid storage record {pid!r:.100}")
        key = ascii_str(key)
        root = self.roots.get(key)
        if root is None:
            root = self.roots[key] = self._allocate(key, stype, numel, ascii_str(location))
        if root[0].dtype is not stype.dtype:
            raise CheckpointError(f"storage {key!r} is named with two dtypes")
        return root[0] if view is None else self._view(root[0], view)

    def _allocate(self, key: str, stype: StorageType, numel: int, location: str) -> tuple[Storage, np.ndarray, str]:
        nbytes = numel * stype.dtype.itemsize
        self.allocated += nbytes
        if self.allocated > self.src.size:
            raise CheckpointError(
                f"storage {key!r} declares {numel} elements ({nbytes} bytes), more than the {self.src.size}-byte "
                "file can hold (corrupt or crafted checkpoint)"
            )
        raw = np.empty(nbytes, dtype=np.uint8)
        return Storage(key, stype.dtype, raw.view(stype.dtype.np), CPU), raw, location

    def _view(self, root: Storage, view: Any) -> Storage:
        if type(view) is not tuple or len(view) != 3:
            raise CheckpointError(f"invalid storage view record {view!r:.80}")
        view_key, offset, size = ascii_str(view[0]), view[1], view[2]
        if type(offset) is not int or type(size) is not int or not 0 <= offset <= offset + size <= len(root.array):
            raise CheckpointError(f"storage view {view!r:.80} lies outside storage {root.key!r}")
        found = self.views.get(view_key)
        if found is None:
            found = self.views[view_key] = Storage(view_key, root.dtype, root.array[offset : offset + size], CPU)
        return found

    def _fill(self, keys: Any, pos: int) -> None:
        if type(keys) is not list or not all(type(k) is str for k in keys) or sorted(keys) != sorted(self.roots):
            raise CheckpointError("the legacy checkpoint's storage list does not match the storages its object uses")
        for key in keys:
            storage, raw, _ = self.roots[key]
            count = _I64.unpack(self.src.read(pos, 8))[0] if pos + 8 <= self.src.size else -1
            if count != len(storage.array):
                raise CheckpointError(
                    f"storage {key!r}: the file records {count} elements where the object needs {len(storage.array)}"
                )
            self.src.read_into(pos + 8, raw)
            pos += 8 + raw.nbytes
            if sys.byteorder == "big" and storage.dtype.itemsize > 1:
                storage.array.byteswap(inplace=True)

    def _place(self, place: Placement) -> None:
        # tensors already view these arrays: a CPU result is copied back into them, another device is refused
        for storage, _, location in self.roots.values():
            arr, dev = place(storage.array, location)
            if dev != CPU:
                raise RuntimeError(
                    f"map_location to {dev} is not supported for legacy-format checkpoints; load them with "
                    "map_location='cpu' and move the tensors, or re-save the checkpoint with torch.save"
                )
            if arr is not storage.array:
                storage.array[...] = arr
