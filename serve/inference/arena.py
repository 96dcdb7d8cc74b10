"""The plan's memory: output buffers of the planned layers, sized by the calls that warm the plan at load and reused
across layers and calls, so a served forward pass allocates nothing for its large activations.

Decisions, and why:
- Reuse is decided by reference counts, not by a liveness analysis. The plan captures modules, not the code between
  them, so it cannot know when the model's own code is done with an activation (a residual kept for later, a
  feature map returned to the caller, a tensor a hook stored). A buffer that only the arena still refers to cannot
  be read by anyone, so handing it out again can never change an answer; one that a tensor, a view (numpy views
  keep their base alive), a pending residual output or the caller still holds is never handed out. In CPython a
  buffer is free the moment its last user drops it, so a forward pass reuses its own dead activations layer by
  layer and the arena settles at the peak live set of the shapes it serves.
- Buffers are raw bytes, not shapes: a request takes the smallest free buffer that holds it and is at most SHARE (8)
  times its size, so the batch sizes a worker warms (1-8) all run in the batch-8 buffers instead of each size
  keeping a set of its own (with a factor of 2, ResNet-18's worker held ~250 MiB more); a much smaller request
  (a bias-sized one) gets its own buffer rather than tying up a big one.
- Only large buffers (>= 256 KiB) go through the arena: malloc serves small blocks from hot per-thread caches at
  least as fast, and skipping them keeps the search short (an MLP's step pays nothing).
- Bounded: an arena holds at most `limit` bytes (default 2 GiB). Past it, the least recently used free buffers are
  dropped first, and a request that still does not fit is plain np.empty, as before the arena existed.
- Thread safe: taking a buffer holds a lock, so two threads running the same plan never take the same one.
- Kernel timing bypasses the arena (`bypassed()`): it keeps several candidates' outputs alive at once, a moment
  serving never repeats, and sizing the arena for it held twice the bytes (ResNet-18 warmed at batch 1-8: 239 MB in
  24 buffers and +186 MiB peak RSS over plain malloc; bypassed, 125 MB in 17 and +41 MiB).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["Arena", "bypassed", "empty"]

MIN_BYTES = 256 * 1024
SHARE = 8
_ALIGN = 4096


class Arena:
    """Reusable output buffers for one plan (see the module docstring)."""

    def __init__(self, limit: int = 2 << 30) -> None:
        self.limit = limit
        self._bufs: list[np.ndarray] = []  # uint8 buffers, sorted by size
        self._stamp: dict[int, int] = {}  # id(buffer) -> last use
        self._clock = 0
        self._lock = threading.Lock()
        self.held = 0  # bytes of the buffers the arena holds
        self.allocated = 0  # buffers made
        self.reused = 0  # requests served by a buffer made earlier
        self._free_refs = self._calibrate()

    def _refs(self, i: int) -> int:
        """References to buffer i: the arena's list, this frame and getrefcount's argument, plus any user's."""
        return sys.getrefcount(self._bufs[i])

    def _calibrate(self) -> int:
        self._bufs.append(np.empty(0, np.uint8))
        free = self._refs(0)
        self._bufs.clear()
        return free

    def empty(self, shape: tuple[int, ...], dtype: type | np.dtype = np.float32) -> np.ndarray:
        """An uninitialised C-contiguous array, from a free buffer of the arena where one fits."""
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        if nbytes < MIN_BYTES:
            return np.empty(shape, dt)
        with self._lock:
            buf = self._take(nbytes)
        if buf is None:
            return np.empty(shape, dt)
        return buf[:nbytes].view(dt).reshape(shape)

    def _take(self, nbytes: int) -> np.ndarray | None:
        self._clock += 1
        for i in range(len(self._bufs)):
            size = self._bufs[i].nbytes
            if size > SHARE * nbytes:
                break
            if size >= nbytes and self._refs(i) == self._free_refs:
                self._stamp[id(self._bufs[i])] = self._clock
                self.reused += 1
                return self._bufs[i]
        size = -(-nbytes // _ALIGN) * _ALIGN
        if self.held + size > self.limit and not self._drop(self.held + size - self.limit):
            return None
        buf = np.empty(size, np.uint8)
        i = next((j for j, b in enumerate(self._bufs) if b.nbytes > size), len(self._bufs))
        self._bufs.insert(i, buf)
        self._stamp[id(buf)] = self._clock
        self.held += size
        self.allocated += 1
        return buf

    def _drop(self, need: int) -> bool:
        """Drop free buffers, least recently used first, until `need` bytes are released; whether it could."""
        free = [i for i in range(len(self._bufs)) if self._refs(i) == self._free_refs]
        free.sort(key=lambda i: self._stamp[id(self._bufs[i])])
        released, gone = 0, set()
        for i in free:
            if released >= need:
                break
            released += self._bufs[i].nbytes
            gone.add(i)
        if released < need:
            return False
        for i in sorted(gone, reverse=True):
            buf = self._bufs.pop(i)
            del self._stamp[id(buf)]
            self.held -= buf.nbytes
        return True

    def describe(self) -> dict[str, int]:
        return {"buffers": len(self._bufs), "held_bytes": self.held, "allocated": self.allocated,
                "reused": self.reused}  # fmt: skip


_local = threading.local()


@contextmanager
def bypassed() -> Iterator[None]:
    """Allocations on this thread skip every arena meanwhile (kernel timing: see the module docstring)."""
    before = getattr(_local, "bypass", False)
    _local.bypass = True
    try:
        yield
    finally:
        _local.bypass = before


def empty(owner: object, shape: tuple[int, ...], dtype: type | np.dtype = np.float32) -> np.ndarray:
    """`owner.arena.empty(shape)` when the planned layer belongs to a plan with an arena, else np.empty."""
    arena = getattr(owner, "arena", None)
    if arena is None or getattr(_local, "bypass", False):
        return np.empty(shape, dtype)
    return arena.empty(shape, dtype)
