"""A stand-in for the `lru-dict` package (`from lru import LRU`), which TorchServe's stateful example handler uses
and which the test environment does not have: a dict of at most `capacity` entries that drops the least recently
used one. Only what the example calls: `LRU(capacity)`, `has_key`, `[key]`, `[key] = value`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class LRU:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"LRU capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[Any, Any] = OrderedDict()

    def has_key(self, key: Any) -> bool:
        return key in self._items

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def __getitem__(self, key: Any) -> Any:
        self._items.move_to_end(key)
        return self._items[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
