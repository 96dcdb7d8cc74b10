"""Named (values, indices) results, printed like PyTorch's `torch.return_types.max(values=..., indices=...)`."""

from __future__ import annotations

from collections import namedtuple
from typing import Any


def _values_indices(name: str) -> Any:
    cls = namedtuple(name, ["values", "indices"])  # type: ignore[misc]

    def __repr__(self: Any) -> str:
        return f"serve.return_types.{name}(\nvalues={self.values!r},\nindices={self.indices!r})"

    cls.__repr__ = __repr__  # type: ignore[method-assign]
    cls.__module__ = "serve.return_types"
    return cls


max = _values_indices("max")
min = _values_indices("min")
sort = _values_indices("sort")
topk = _values_indices("topk")
kthvalue = _values_indices("kthvalue")
