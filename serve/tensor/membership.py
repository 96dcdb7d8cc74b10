"""`isin` and `x in tensor`, PyTorch's names, composed from comparisons (any device, no new primitive).

    serve.isin(elements, test_elements, invert=False)   elements' shape, True where the element is in test_elements
    value in t                                          (t == value).any(), as torch's Tensor.__contains__

Decision: isin compares every element with every test element ((N, M) booleans), which is what generation needs
(token ids against a few stop ids) and keeps the op on the tensors' device; large test sets are chunked.
"""

from __future__ import annotations

from typing import Any

from serve.tensor.creation import as_tensor
from serve.tensor.math_ops import eq, logical_not
from serve.tensor.reduce_ops import any as any_
from serve.tensor.shape_ops import cat, reshape
from serve.tensor.tensor import Tensor

_CHUNK = 1 << 22  # booleans compared at once


def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() expects elements or test_elements to be a Tensor")
    like = elements if isinstance(elements, Tensor) else test_elements
    x = elements if isinstance(elements, Tensor) else as_tensor(elements, device=like.device)
    tests = test_elements if isinstance(test_elements, Tensor) else as_tensor(test_elements, device=like.device)
    flat = reshape(x, (-1, 1))  # (N, 1)
    candidates = reshape(tests, (1, -1))  # (1, M)
    step = max(1, _CHUNK // max(1, candidates.shape[1]))
    parts = [any_(eq(flat[i : i + step], candidates), 1) for i in range(0, max(1, flat.shape[0]), step)]
    found = reshape(parts[0] if len(parts) == 1 else cat(parts), x.shape)  # elements' shape
    return logical_not(found) if invert else found


def contains(self: Tensor, element: Any) -> bool:
    if not isinstance(element, (Tensor, int, float, bool)):
        raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you passed in a {type(element)}")
    return bool(any_(eq(self, element)).item())


__all__ = ["contains", "isin"]
