"""Version counters of storages: PyTorch's check that a tensor saved for backward was not modified in place.

Every in-place write (`add_`, `x[i] = v`, `copy_`, `fill_`, ...) bumps the counter of the storage it writes
(the root array that all views of it share). A recorded operation notes the versions of the tensors it saves;
reading them in backward after an in-place write raises PyTorch's error instead of giving a wrong gradient.
Counters exist only for storages written in place at least once, and only the recording path reads them.
"""

from __future__ import annotations

import weakref
from typing import Any

_counts: dict[int, int] = {}


def _root(arr: Any) -> Any:
    """The array owning `arr`'s memory: views share their root (and so their version)."""
    base = arr.base
    while base is not None and hasattr(base, "base") and hasattr(base, "shape"):
        arr, base = base, base.base
    return arr


def version(arr: Any) -> int:
    return _counts.get(id(_root(arr)), 0)


def bump(arr: Any) -> None:
    root = _root(arr)
    key = id(root)
    if key not in _counts:
        weakref.finalize(root, _counts.pop, key, None)  # the id may be reused once the root is freed
        _counts[key] = 0
    _counts[key] += 1


def check(tensors: tuple[Any, ...], expected: tuple[int, ...], node_name: str) -> None:
    """Raise PyTorch's error when a saved tensor was modified in place after it was saved."""
    for t, v in zip(tensors, expected):
        if t is None or not hasattr(t, "_data"):
            continue
        now = version(t._data)
        if now != v:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace operation: "
                f"[{t.type()} {list(t.shape)}], which is saved by {node_name}, is at version {now}; expected "
                f"version {v} instead. Compute the in-place update on a clone() instead, or do it after backward."
            )
