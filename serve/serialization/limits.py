"""Limits on what a checkpoint's pickle may build: nesting depth, and which dict keys and set items it may use.

Both guard the code that later walks the loaded object (printing, comparing, copying, hashing) rather than the
unpickling itself: a 100,000-level nested list loads fine, then crashes its first `repr`; and ten thousand dict
keys with one hash make a single dict insertion quadratic.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from serve.errors import CheckpointError

MAX_DEPTH = 256  # far above any real checkpoint; keeps repr/== of the result clear of RecursionError
_KEY_INT = 1 << 60
_CONTAINERS = (list, tuple, dict, OrderedDict, set, frozenset)


def check_key(key: Any) -> Any:
    """Refuse dict keys and set items whose hashes a file could make collide (hash flooding: a quadratic hang).

    str and bytes hashes are randomised per process; ints below 2**60 hash to themselves. Tuples, floats and
    big ints hash deterministically, so a crafted file could give thousands of them one hash.
    """
    t = type(key)
    if t is str or t is bytes or t is bool or key is None or (t is int and -_KEY_INT < key < _KEY_INT):
        return key
    raise CheckpointError(
        f"refused a {t.__name__} as a dict key or set item: only strings, bytes, booleans, None and integers "
        "below 2**60 are accepted"
    )


def check_depth(root: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse results nested deeper than `limit` containers: the longest path, through shared parts too."""
    if type(root) not in _CONTAINERS:
        return
    height: dict[int, int] = {}  # finished containers: how many levels they add
    path: list[list[Any]] = [[root, iter(_children(root))]]
    on_path = {id(root)}
    while path:
        frame = path[-1]
        for child in frame[1]:
            if type(child) not in _CONTAINERS or id(child) in on_path:
                continue  # leaves, and cycles (which printing and copying treat as references)
            h = height.get(id(child))
            if h is None:
                if len(path) >= limit:
                    raise CheckpointError(_too_deep(limit))
                path.append([child, iter(_children(child))])
                on_path.add(id(child))
                break
            if len(path) + h > limit:
                raise CheckpointError(_too_deep(limit))
        else:
            path.pop()
            on_path.discard(id(frame[0]))
            height[id(frame[0])] = 1 + max(
                (height.get(id(c), 0) for c in _children(frame[0]) if type(c) in _CONTAINERS), default=0
            )


def _too_deep(limit: int) -> str:
    return f"the checkpoint nests containers more than {limit} levels deep; refusing it"


def _children(obj: Any) -> Any:
    if isinstance(obj, dict):
        extra = list(vars(obj).values()) if type(obj) is OrderedDict else []
        return [*obj.keys(), *obj.values(), *extra]
    return obj
