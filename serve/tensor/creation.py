"""Tensor creation: tensor/as_tensor/from_numpy, zeros/ones/empty/full/eye, arange/linspace, the *_like forms.

Sizes are given as varargs or one sequence. Python floats become the default dtype (float32), ints
int64, bools bool, as in PyTorch; numpy arrays keep their dtype.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from serve.backend import CPU, get_ops, placed
from serve.backend import ops_cpu as host  # data given as lists or numpy arrays starts on the host
from serve.tensor import dtypes
from serve.tensor.dtypes import dtype as Dtype
from serve.tensor.tensor import Tensor, _make


def _sizes(size: Sequence[Any]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s.item())
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"size must be a tuple of ints, but got an element of type {type(s).__name__}: {s!r}")
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(size)}")
        out.append(int(s))
    return tuple(out)


def _finish(data: Any, dt: Dtype, dev: Any, requires_grad: bool) -> Tensor:
    device, ops = placed(dev)
    if device.type != "cpu":
        with ops.on_device(device.index):
            data = ops.from_numpy(data)
    t = _make(data, dt, device, ops)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(data: Any) -> Dtype:
    """The dtype PyTorch gives a nested list of Python scalars."""
    kinds = set()
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, Tensor):
            kinds.add(item._dtype)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "dtype") and hasattr(item, "shape"):
            kinds.add(dtypes.from_numpy_dtype(item.dtype))
        else:
            kinds.add(dtypes.scalar_dtype(item))
    if not kinds:
        return dtypes.get_default_dtype()
    out = kinds.pop()
    for k in kinds:
        out = dtypes.promote_types(out, k)
    return out


def _host_array(data: Any, dt: Dtype | None) -> tuple[Any, Dtype]:
    if isinstance(data, Tensor):
        arr = data._host()
        return (arr if dt is None else arr.astype(dt.np)), dt or data._dtype
    if isinstance(data, host.ndarray):
        src = dtypes.from_numpy_dtype(data.dtype)
        return (data if dt is None else data.astype(dt.np)), dt or src
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
        data = _tensors_to_lists(data)
    if dt is None:
        dt = _infer_dtype(data)
    try:
        arr = host.array(data, dtype=dt.np)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"could not build a tensor from {type(data).__name__}: {e} (nested lists must be rectangular)"
        ) from None
    if arr.dtype == object:
        raise TypeError(f"Could not infer dtype of {type(data).__name__}")
    return arr, dt


def _flat(data: Any) -> Any:
    for x in data:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _tensors_to_lists(data: Any) -> Any:
    if isinstance(data, Tensor):
        return data.tolist()
    if isinstance(data, (list, tuple)):
        return [_tensors_to_lists(x) for x in data]
    return data


def tensor(data: Any, *, dtype: Dtype | None = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:  # fmt: skip
    """A new tensor holding a copy of `data` (a number, nested lists, a numpy array or a tensor)."""
    arr, dt = _host_array(data, dtype)
    if isinstance(data, Tensor) or arr is data or (hasattr(data, "base") and arr.base is data):
        arr = arr.copy()
    return _finish(arr, dt, device, requires_grad)


def as_tensor(data: Any, dtype: Dtype | None = None, device: Any = None) -> Tensor:
    """Like `tensor`, but shares memory with a tensor or numpy array when dtype and device allow it."""
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype) if (device or dtype) else data
    arr, dt = _host_array(data, dtype)
    return _finish(arr, dt, device, False)


asarray = as_tensor


def from_numpy(ndarray: Any) -> Tensor:
    """A CPU tensor sharing memory with `ndarray`: writes to one are seen in the other."""
    if not isinstance(ndarray, host.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    return _make(ndarray, dtypes.from_numpy_dtype(ndarray.dtype), CPU, get_ops(CPU))


def _rebuild(host: Any, dtype_name: str, device: str, requires_grad: bool) -> Tensor:
    return _finish(host, dtypes.from_name(dtype_name), device, requires_grad)


def _filled(fill: str, size: Sequence[Any], dtype: Dtype | None, device: Any, requires_grad: bool,
            value: Any = None) -> Tensor:  # fmt: skip
    dt = dtype or dtypes.get_default_dtype()
    dev, ops = placed(device)
    shape = _sizes(size)
    with ops.on_device(dev.index):
        data = ops.full(shape, value, dt.np) if fill == "full" else getattr(ops, fill)(shape, dt.np)
    t = _make(data, dt, dev, ops)
    return t.requires_grad_(True) if requires_grad else t


def zeros(*shape: Any, size: Any = None, dtype: Dtype | None = None, device: Any = None,
          requires_grad: bool = False, out: Any = None) -> Tensor:  # fmt: skip
    """torch's `zeros(2, 3)`, `zeros((2, 3))` and `zeros(size=(2, 3))`."""
    return _filled("zeros", shape if size is None else (size,), dtype, device, requires_grad)


def ones(*shape: Any, size: Any = None, dtype: Dtype | None = None, device: Any = None,
         requires_grad: bool = False, out: Any = None) -> Tensor:  # fmt: skip
    """torch's `ones(2, 3)`, `ones((2, 3))` and `ones(size=(2, 3))`."""
    return _filled("ones", shape if size is None else (size,), dtype, device, requires_grad)


def empty(*shape: Any, size: Any = None, dtype: Dtype | None = None, device: Any = None,
          requires_grad: bool = False, memory_format: Any = None, pin_memory: bool = False) -> Tensor:  # fmt: skip
    """torch's `empty(2, 3)`, `empty((2, 3))` and `empty(size=(2, 3))`."""
    return _filled("empty", shape if size is None else (size,), dtype, device, requires_grad)


def full(size: Sequence[Any], fill_value: Any, *, dtype: Dtype | None = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:  # fmt: skip
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    dt = dtype or dtypes.scalar_dtype(fill_value)
    return _filled("full", (tuple(size),), dt, device, requires_grad, fill_value)


def eye(n: int, m: int | None = None, *, dtype: Dtype | None = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:  # fmt: skip
    if n < 0 or (m is not None and m < 0):
        raise RuntimeError(f"n must be greater or equal to 0, got {n if n < 0 else m}")
    dt = dtype or dtypes.get_default_dtype()
    dev, ops = placed(device)
    with ops.on_device(dev.index):
        data = ops.eye(n, n if m is None else m, dtype=dt.np)
    t = _make(data, dt, dev, ops)
    return t.requires_grad_(True) if requires_grad else t


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Dtype | None = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:  # fmt: skip
    """Values from `start` (default 0) up to but excluding `end`, `step` apart."""
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) / step < 0:
        raise RuntimeError(
            f"upper bound and larger bound inconsistent with step sign: start={start}, end={end}, step={step}"
        )
    if dtype is None:
        is_float = any(isinstance(v, float) for v in (start, end, step))
        dtype = dtypes.get_default_dtype() if is_float else dtypes.int64
    dev, ops = placed(device)
    with ops.on_device(dev.index):
        data = ops.arange(start, end, step, dtype.np)
    t = _make(data, dtype, dev, ops)
    return t.requires_grad_(True) if requires_grad else t


def linspace(start: Any, end: Any, steps: int, *, dtype: Dtype | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    dt = dtype or dtypes.get_default_dtype()
    dev, ops = placed(device)
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    with ops.on_device(dev.index):
        data = ops.linspace(float(start), float(end), steps, dt.np)
    t = _make(data, dt, dev, ops)
    return t.requires_grad_(True) if requires_grad else t


def _like(fill: str) -> Any:
    def like(input: Tensor, *, dtype: Dtype | None = None, device: Any = None, requires_grad: bool = False,
             memory_format: Any = None) -> Tensor:  # fmt: skip
        return _filled(fill, (input.shape,), dtype or input._dtype, device or input._device, requires_grad)

    like.__name__ = f"{fill}_like"
    return like


zeros_like = _like("zeros")
ones_like = _like("ones")
empty_like = _like("empty")


def full_like(input: Tensor, fill_value: Any, *, dtype: Dtype | None = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:  # fmt: skip
    return _filled("full", (input.shape,), dtype or input._dtype, device or input._device, requires_grad, fill_value)


# ---- Tensor.new_* (same dtype and device as the tensor unless told otherwise) ------------------------
def new_tensor(self: Tensor, data: Any, *, dtype: Dtype | None = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:  # fmt: skip
    return tensor(data, dtype=dtype or self._dtype, device=device or self._device, requires_grad=requires_grad)


def _new(fill: str) -> Any:
    def new(self: Tensor, *size: Any, dtype: Dtype | None = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:  # fmt: skip
        return _filled(fill, size, dtype or self._dtype, device or self._device, requires_grad)

    new.__name__ = f"new_{fill}"
    return new


new_zeros = _new("zeros")
new_ones = _new("ones")
new_empty = _new("empty")


def new_full(self: Tensor, size: Sequence[Any], fill_value: Any, *, dtype: Dtype | None = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
    return _filled("full", (tuple(size),), dtype or self._dtype, device or self._device, requires_grad, fill_value)
