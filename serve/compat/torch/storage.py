"""`torch.UntypedStorage`: bytes a tensor can be made from. safetensors' `safe_open(..., framework="pt")` maps a
checkpoint with `UntypedStorage.from_file(path, shared, nbytes)`, slices it per tensor and calls
`torch.asarray(storage[start:stop], dtype=torch.uint8)`, then `.view(dtype)` and `.reshape(shape)`.

Decision: the storage is a read-only numpy memory map (copy-on-write), so a serve tensor made from it is a view of
the file's bytes until a copy is made (loading a state dict copies into the model's parameters).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class UntypedStorage:
    """Bytes, on the CPU: a memory-mapped file or a slice of one."""

    def __init__(self, data: Any = 0) -> None:
        self._bytes = np.zeros(data, np.uint8) if isinstance(data, int) else np.asarray(data, np.uint8)

    @classmethod
    def from_file(cls, filename: str, shared: bool = False, nbytes: int = 0) -> UntypedStorage:
        storage = cls()
        if nbytes:
            storage._bytes = np.memmap(filename, dtype=np.uint8, mode="r" if shared else "c", shape=(nbytes,))
        return storage

    def _untyped(self) -> UntypedStorage:
        return self  # torch 1.x's TypedStorage._untyped(), which safetensors still asks for

    def untyped(self) -> UntypedStorage:
        return self

    def __getitem__(self, index: slice) -> UntypedStorage:
        part = UntypedStorage()
        part._bytes = self._bytes[index]
        return part

    def __len__(self) -> int:
        return int(self._bytes.shape[0])

    def nbytes(self) -> int:
        return len(self)

    def size(self) -> int:
        return len(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._bytes if dtype is None else self._bytes.astype(dtype)


TypedStorage = UntypedStorage
ByteStorage = UntypedStorage
