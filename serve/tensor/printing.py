"""`repr(tensor)` in PyTorch's style: `tensor([[1.0000, 2.5000]], dtype=serve.float64, requires_grad=True)`.

Floats print with 4 decimals, as integers with a trailing dot when all values are whole, or in
scientific notation when the magnitudes span more than 1000x; more than 1000 elements are summarised.
"""

from __future__ import annotations

import math
from typing import Any

from serve.backend import ops_cpu as host
from serve.tensor import dtypes

_PRECISION = 4
_THRESHOLD = 1000
_EDGEITEMS = 3
_LINEWIDTH = 80


def _float_formatter(values: Any) -> Any:
    finite = values[host.isfinite(values)] if values.size else values
    nonzero = host.abs(finite[finite != 0]) if finite.size else finite
    whole = bool(finite.size == 0 or (finite == host.round(finite)).all())
    if nonzero.size:
        lo, hi = float(nonzero.min()), float(nonzero.max())
        sci = hi / lo > 1000.0 or hi > 1e8 or (not whole and lo < 1e-4)
    else:
        sci = False
    if sci:
        fmt = f"{{:.{_PRECISION}e}}"
    elif whole:
        fmt = "{:.0f}."
    else:
        fmt = f"{{:.{_PRECISION}f}}"

    def one(v: Any) -> str:
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return fmt.format(v)

    # PyTorch sizes the columns from the finite nonzero values only (so `[nan, 1.]` is not padded)
    width = max((len(one(v)) for v in _sample(finite[finite != 0] if finite.size else finite)), default=1)
    return lambda v: one(v).rjust(width)


def _sample(values: Any) -> Any:
    flat = values.reshape(-1)
    if flat.size > 2 * _THRESHOLD:
        return list(flat[:_THRESHOLD]) + list(flat[-_THRESHOLD:])
    return list(flat)


def _formatter(t: Any, values: Any) -> Any:
    if t._dtype is dtypes.bool:
        return lambda v: str(bool(v)).rjust(5 if not values.all() else 4)
    if t._dtype.is_floating_point:
        return _float_formatter(values.astype("float64"))
    if t._dtype.is_complex:
        return lambda v: f"{v.real:.4f}{v.imag:+.4f}j"
    width = max((len(str(int(v))) for v in _sample(values)), default=1)
    return lambda v: str(int(v)).rjust(width)


def _vector_str(values: Any, indent: int, summarize: bool, fmt: Any) -> str:
    """One row of values, wrapped to the line width the way PyTorch's `_vector_str` does it."""
    if summarize and len(values) > 2 * _EDGEITEMS:
        data = [fmt(v) for v in values[:_EDGEITEMS]] + [" ..."] + [fmt(v) for v in values[-_EDGEITEMS:]]
    else:
        data = [fmt(v) for v in values]
    width = max((len(d) for d in data if d != " ..."), default=1)
    per_line = max(1, (_LINEWIDTH - indent) // (width + 2))
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _tensor_str(values: Any, indent: int, summarize: bool, fmt: Any) -> str:
    """Nested brackets as PyTorch prints them: one blank line more between blocks of each higher dimension."""
    if values.ndim == 0:
        return fmt(values[()])
    if values.ndim == 1:
        return _vector_str(values, indent, summarize, fmt)
    n = values.shape[0]
    if summarize and n > 2 * _EDGEITEMS:
        rows = [_tensor_str(values[i], indent + 1, summarize, fmt) for i in range(_EDGEITEMS)] + ["..."]
        rows += [_tensor_str(values[i], indent + 1, summarize, fmt) for i in range(n - _EDGEITEMS, n)]
    else:
        rows = [_tensor_str(values[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (values.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def tensor_repr(t: Any) -> str:
    values = t._host()
    prefix = "tensor("
    suffixes = []
    if t._data.size == 0 and t._data.shape != (0,):
        body = "[]"
        suffixes.append(f"size={tuple(t.shape)}")
    else:
        body = _tensor_str(values, len(prefix), values.size > _THRESHOLD, _formatter(t, values))
    if t._device.type != "cpu":
        suffixes.append(f"device='{t._device}'")
    if t._dtype not in (dtypes.get_default_dtype(), dtypes.int64, dtypes.bool) or (
        t._data.size == 0 and t._dtype is not dtypes.get_default_dtype()
    ):
        suffixes.append(f"dtype={t._dtype!r}")
    if t._grad_fn is not None:
        suffixes.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t._requires_grad:
        suffixes.append("requires_grad=True")
    return prefix + ", ".join([body, *suffixes]) + ")"
