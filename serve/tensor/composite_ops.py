"""Ops composed from other ops, so autograd comes from theirs: `diff`, `meshgrid`, `tile`, `log2`, `log10`
(PyTorch's names and arguments; torchvision's model sources use them). No new primitive: each is a few views
and one subtraction, or a log and a scale."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from serve.tensor import dtypes
from serve.tensor.creation import as_tensor
from serve.tensor.math_ops import log, mul, ne, sub
from serve.tensor.shape_ops import cat, expand, narrow, repeat, reshape
from serve.tensor.tensor import Tensor, wrap_dim


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Any = None, append: Any = None) -> Tensor:
    """The n-th forward difference along `dim`: out[i] = x[i+1] - x[i], applied n times, after `prepend` and
    `append` are concatenated along `dim` (bool tensors: x[i+1] != x[i], as torch)."""
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    axis = wrap_dim(dim, input.ndim)
    x = cat([_edge(prepend, input, axis), input, _edge(append, input, axis)], axis) if (
        prepend is not None or append is not None) else input  # fmt: skip
    step = ne if x.dtype is dtypes.bool else sub
    for _ in range(n):
        length = x.shape[axis] - 1
        if length < 0:
            break
        x = step(narrow(x, axis, 1, length), narrow(x, axis, 0, length))
    return x


def _edge(value: Any, input: Tensor, axis: int) -> Tensor:
    """prepend/append as a tensor of input's rank (a number becomes one slice along `axis`)."""
    if value is None:
        return input[tuple(slice(0, 0) if d == axis else slice(None) for d in range(input.ndim))]
    t = value if isinstance(value, Tensor) else as_tensor(value, dtype=input.dtype, device=input.device)
    if t.ndim == 0:
        shape = tuple(1 if d == axis else s for d, s in enumerate(input.shape))
        return expand(reshape(t, (1,) * input.ndim), shape)
    if t.ndim != input.ndim:
        raise RuntimeError(f"diff expects prepend or append to be the same dimension as input, got {t.ndim} and "
                           f"{input.ndim}")  # fmt: skip
    return t


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D (or 0-D) tensors: with indexing="ij" output k varies along dim k; with "xy"
    (numpy's default) the first two dims are swapped, so outputs have shape (len(t1), len(t0), len(t2), ...)."""
    if len(tensors) == 1 and isinstance(tensors[0], Sequence) and not isinstance(tensors[0], Tensor):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of 'xy' or 'ij', but received: {indexing}")
    if not tensors:
        raise RuntimeError("torch.meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t.ndim}D")
    if len({t.dtype for t in tensors}) > 1 or len({str(t.device) for t in tensors}) > 1:
        raise RuntimeError("torch.meshgrid: expects all tensors to have the same dtype and device")
    sizes = [t.numel() for t in tensors]
    order = list(range(len(tensors)))  # order[k]: the output dim that tensor k varies along
    if indexing == "xy" and len(tensors) >= 2:
        order[0], order[1] = 1, 0
    shape = [0] * len(tensors)
    for k, d in enumerate(order):
        shape[d] = sizes[k]
    grids = []
    for k, t in enumerate(tensors):
        view = [1] * len(tensors)
        view[order[k]] = sizes[k]
        grids.append(expand(reshape(t, tuple(view)), tuple(shape)))
    return tuple(grids)


def tile(input: Tensor, dims: Sequence[int]) -> Tensor:
    """`input` repeated `dims[k]` times along dim k; shorter `dims` are padded with 1s in front (torch.tile)."""
    reps = tuple(dims)
    if len(reps) < input.ndim:
        reps = (1,) * (input.ndim - len(reps)) + reps
    return repeat(input, reps)


def log2(input: Tensor) -> Tensor:
    """Base-2 logarithm, elementwise (integers give the default float dtype, as torch.log)."""
    return mul(log(input), 1.0 / math.log(2.0))


def log10(input: Tensor) -> Tensor:
    """Base-10 logarithm, elementwise."""
    return mul(log(input), 1.0 / math.log(10.0))
