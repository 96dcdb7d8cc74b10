"""The dtypes of serve, named like PyTorch's, and PyTorch's type promotion rules.

Each `dtype` wraps the numpy dtype that stores it (bfloat16 comes from ml_dtypes). Promotion follows
`torch.result_type`: operands are ranked as dimensioned tensors, zero-dim tensors, then Python
scalars, and a lower rank only changes the result when its category (bool < integer < floating <
complex) is higher.
"""

from __future__ import annotations

import builtins as _builtins
from typing import Any

import ml_dtypes
import numpy as np

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3
# The dtype names below shadow Python's bool/int/float, as PyTorch's do.
builtins_bool, builtins_int = _builtins.bool, _builtins.int
builtins_float, builtins_complex = _builtins.float, _builtins.complex


class dtype:
    """A tensor element type: `serve.float32`, `serve.int64`, ..."""

    __slots__ = ("_category", "is_signed", "itemsize", "name", "np")
    _category: _builtins.int

    def __init__(self, name: str, np_dtype: Any, category: _builtins.int, is_signed: _builtins.bool) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self._category = category
        self.is_signed = is_signed

    @property
    def is_floating_point(self) -> _builtins.bool:
        return self._category == _FLOAT

    @property
    def is_complex(self) -> _builtins.bool:
        return self._category == _COMPLEX

    def to_complex(self) -> dtype:
        return complex128 if self is float64 else complex64

    def to_real(self) -> dtype:
        return {complex64: float32, complex128: float64}.get(self, self)

    def __repr__(self) -> str:
        return f"serve.{self.name}"

    def __reduce__(self) -> str:
        return self.name


bool = dtype("bool", np.bool_, _BOOL, False)
uint8 = dtype("uint8", np.uint8, _INT, False)
int8 = dtype("int8", np.int8, _INT, True)
int16 = dtype("int16", np.int16, _INT, True)
int32 = dtype("int32", np.int32, _INT, True)
int64 = dtype("int64", np.int64, _INT, True)
float16 = dtype("float16", np.float16, _FLOAT, True)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, _FLOAT, True)
float32 = dtype("float32", np.float32, _FLOAT, True)
float64 = dtype("float64", np.float64, _FLOAT, True)
complex64 = dtype("complex64", np.complex64, _COMPLEX, True)
complex128 = dtype("complex128", np.complex128, _COMPLEX, True)

# PyTorch's aliases
half, float, double = float16, float32, float64
short, int, long = int16, int32, int64
cfloat, cdouble = complex64, complex128

ALL = (bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, complex128)
_BY_NUMPY = {d.np: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}


def from_numpy_dtype(np_dtype: Any) -> dtype:
    """The serve dtype storing numpy's `np_dtype`; TypeError (PyTorch's wording) when there is none."""
    found = _BY_NUMPY.get(np.dtype(np_dtype))
    if found is None:
        raise TypeError(
            f"can't convert np.ndarray of type {np.dtype(np_dtype)}. The only supported types are: "
            "float64, float32, float16, bfloat16, complex64, complex128, int64, int32, int16, int8, uint8, and bool."
        )
    return found


def from_name(name: str) -> dtype:
    return _BY_NAME[name]


class _DefaultDtype:
    value: dtype = float32  # process-wide, like PyTorch's


_default = _DefaultDtype()


def get_default_dtype() -> dtype:
    return _default.value


def set_default_dtype(d: dtype) -> None:
    if not isinstance(d, dtype) or d not in (float16, bfloat16, float32, float64):
        raise TypeError(f"only floating-point types are supported as the default type, got {d!r}")
    _default.value = d
    _scalar_results.clear()


# ---- promotion -----------------------------------------------------------------------------------

_INT_ORDER = (uint8, int8, int16, int32, int64)
_FLOAT_ORDER = (float16, float32, float64)
_promote_cache: dict[tuple[dtype, dtype], dtype] = {}


def _promote_uncached(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    ca, cb = a._category, b._category
    if ca != cb:
        hi, lo = (a, b) if ca > cb else (b, a)
        if hi._category == _COMPLEX and lo in (float64,):
            return complex128
        return hi
    if ca == _INT:
        if {a, b} == {uint8, int8}:
            return int16
        return max(a, b, key=_INT_ORDER.index)
    if ca == _FLOAT:
        if bfloat16 in (a, b):
            other = b if a is bfloat16 else a
            return float32 if other is float16 else other
        return max(a, b, key=_FLOAT_ORDER.index)
    return complex128 if complex128 in (a, b) else complex64


def promote_types(a: dtype, b: dtype) -> dtype:
    """The smallest dtype both `a` and `b` convert to (`torch.promote_types`)."""
    key = (a, b)
    found = _promote_cache.get(key)
    if found is None:
        found = _promote_cache[key] = _promote_uncached(a, b)
    return found


def scalar_dtype(value: Any) -> dtype:
    """The dtype a Python scalar takes in promotion: bool, int64, the default float, complex."""
    if isinstance(value, (builtins_bool, np.bool_)):
        return bool
    if isinstance(value, (builtins_int, np.integer)):
        return int64
    if isinstance(value, (builtins_float, np.floating)):
        return get_default_dtype()
    if isinstance(value, (builtins_complex, np.complexfloating)):
        return complex128 if get_default_dtype() is float64 else complex64
    raise TypeError(f"expected a Tensor or a Python number, got {type(value).__name__}")


_scalar_results: dict[tuple[dtype, type], dtype] = {}


def scalar_result(dt: dtype, scalar: Any) -> dtype:
    """The result dtype of a tensor of dtype `dt` with a Python scalar (cached: this is on the hot path)."""
    key = (dt, type(scalar))
    found = _scalar_results.get(key)
    if found is None:
        found = _combine(dt, scalar_dtype(scalar))
        assert found is not None
        if type(scalar) in (builtins_bool, builtins_int, builtins_float, builtins_complex):
            _scalar_results[key] = found
    return found  # type: ignore[return-value]


def _combine(higher: dtype | None, lower: dtype | None) -> dtype | None:
    """PyTorch's combine_categories: a lower-ranked operand only counts when its category is higher."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher._category == _COMPLEX:
        return higher
    if lower._category == _COMPLEX:
        return higher.to_complex() if higher._category == _FLOAT else lower
    if higher._category == _FLOAT:
        return higher
    if higher is bool or lower._category == _FLOAT:
        return promote_types(higher, lower)
    return higher


def result_type(dim_dtypes: list[dtype], zero_dim_dtypes: list[dtype], scalar_dtypes: list[dtype]) -> dtype:
    """`torch.result_type` over operands grouped by rank (dimensioned, zero-dim, Python scalars)."""

    def fold(ds: list[dtype]) -> dtype | None:
        out = None
        for d in ds:
            out = d if out is None else promote_types(out, d)
        return out

    found = _combine(fold(dim_dtypes), _combine(fold(zero_dim_dtypes), fold(scalar_dtypes)))
    assert found is not None, "result_type needs at least one operand"
    return found


def can_cast(src: dtype, dst: dtype) -> _builtins.bool:
    """PyTorch's `can_cast` for in-place results: no float->int, complex->real, or non-bool->bool."""
    return not (
        (src._category == _COMPLEX and dst._category != _COMPLEX)
        or (src._category == _FLOAT and dst._category < _FLOAT)
        or (src is not bool and dst is bool)
    )


class finfo:
    """Machine limits of a floating dtype (`torch.finfo`)."""

    def __init__(self, type: dtype | None = None) -> None:
        d = type or get_default_dtype()
        if d._category < _FLOAT:
            raise TypeError(f"finfo() requires a floating point input type, got {d!r}; use iinfo for integers")
        info = np.finfo(d.np) if d.np.kind == "f" else ml_dtypes.finfo(d.np)  # bfloat16, float8: ml_dtypes
        self.dtype = d.name
        self.bits = d.itemsize * 8
        self.eps = builtins_float(info.eps)
        self.max = builtins_float(info.max)
        self.min = builtins_float(info.min)
        self.tiny = self.smallest_normal = builtins_float(info.tiny)
        self.resolution = builtins_float(info.resolution)

    def __repr__(self) -> str:
        limits = f"resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}"
        return f"finfo({limits}, dtype={self.dtype})"


class iinfo:
    """Limits of an integer dtype (`torch.iinfo`)."""

    def __init__(self, type: dtype) -> None:
        if type._category != _INT and type is not bool:
            raise TypeError(f"iinfo() requires an integer input type, got {type!r}; use finfo for floating types")
        info = np.iinfo(type.np) if type is not bool else np.iinfo(np.uint8)
        self.dtype = type.name
        self.bits = type.itemsize * 8
        self.max = builtins_int(info.max) if type is not bool else 1
        self.min = builtins_int(info.min) if type is not bool else 0

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
