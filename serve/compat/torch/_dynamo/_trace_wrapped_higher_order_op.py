"""`TransformGetItemToIndex`: under torch's compiler, a context that rewrites tensor indexing; eagerly nothing."""

from __future__ import annotations

from typing import Any


class TransformGetItemToIndex:
    def __enter__(self) -> TransformGetItemToIndex:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
