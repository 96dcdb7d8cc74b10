"""`RemovableHandle`: what `register_forward_hook` and friends return, to take a hook off again."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

_next_id = itertools.count()


class RemovableHandle:
    """Removes its hook from the dict it was added to: `handle.remove()`, or use it as a context manager."""

    def __init__(self, hooks_dict: dict[int, Any], *extra_dicts: dict[int, Any]) -> None:
        self.id = next(_next_id)
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.extra_dict_refs = tuple(weakref.ref(d) for d in extra_dicts)

    def remove(self) -> None:
        for ref in (self.hooks_dict_ref, *self.extra_dict_refs):
            d = ref()
            if d is not None:
                d.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def add_hook(hooks: dict[int, Any], hook: Any, prepend: bool, *extra_dicts: dict[int, Any]) -> RemovableHandle:
    """Insert `hook` into `hooks` (first when `prepend`), returning its handle."""
    if not callable(hook):
        raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(hooks, *extra_dicts)
    hooks[handle.id] = hook
    if prepend:
        items = list(hooks.items())
        hooks.clear()
        hooks[handle.id] = hook
        hooks.update((k, v) for k, v in items if k != handle.id)
    return handle
