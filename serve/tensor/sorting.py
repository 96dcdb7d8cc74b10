"""sort, argsort and topk. Values are gathered by the returned indices, so gradients flow back to them."""

from __future__ import annotations

from typing import Any

from serve.tensor import dtypes, return_types
from serve.tensor.tensor import Tensor, _make, wrap_dim


def _indices(x: Tensor, raw: Any) -> Tensor:
    return _make(raw.astype(dtypes.int64.np, copy=False), dtypes.int64, x._device, x._ops)


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """Sorted values and their indices along `dim`; ties keep their order (a stable sort), NaN sorts last."""
    if input.ndim == 0:
        return return_types.sort(input.clone(), _indices(input, input._ops.zeros((), "int64")))
    axis = wrap_dim(dim, input.ndim)
    _, raw_idx = input._ops.sort(input._data, axis, descending)
    idx = _indices(input, raw_idx)
    return return_types.sort(input.gather(axis, idx), idx)


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return sort(input, dim, descending, stable).indices


def msort(input: Tensor) -> Tensor:
    return sort(input, 0).values


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """The k largest (or smallest) values along `dim` and their indices, largest first."""
    if input.ndim == 0:
        if k > 1:
            raise RuntimeError("selected index k out of range")
        return return_types.topk(input.clone(), _indices(input, input._ops.zeros((), "int64")))
    axis = wrap_dim(dim, input.ndim)
    n = input.shape[axis]
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range: k={k} but dimension {axis} has size {n}")
    _, raw_idx = input._ops.topk(input._data, k, axis, largest)
    idx = _indices(input, raw_idx)
    return return_types.topk(input.gather(axis, idx), idx)


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    axis = wrap_dim(dim, input.ndim)
    values, indices = sort(input, axis)
    v, i = values.narrow(axis, k - 1, 1), indices.narrow(axis, k - 1, 1)
    return return_types.kthvalue(v, i) if keepdim else return_types.kthvalue(v.squeeze(axis), i.squeeze(axis))
