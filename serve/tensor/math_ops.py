"""Elementwise arithmetic, comparisons and logic with PyTorch's broadcasting and type promotion.

The no-grad path of a binary operation is: promote, call the backend function on the arrays, wrap. The
recording path goes through the primitives in `function.py`. In-place forms write into the tensor's own
storage; with a graph recorded they rebase the tensor onto the new node, as PyTorch does.
"""

from __future__ import annotations

import numbers
from typing import Any

from serve.tensor import dtypes
from serve.tensor import function as fn
from serve.tensor.dtypes import dtype
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make

_FLOAT, _INT = dtypes._FLOAT, dtypes._INT
_Scalar = (numbers.Number,)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of `shapes`, RuntimeError in PyTorch's words when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s):
            j = ndim - len(s) + i
            if out[j] == 1:
                out[j] = n
            elif n != 1 and n != out[j]:
                raise RuntimeError(
                    f"The size of tensor a ({out[j]}) must match the size of tensor b ({n}) at non-singleton "
                    f"dimension {j}"
                )
    return tuple(out)


def _result_dtype(a: Any, b: Any) -> dtype:
    """torch.result_type for two operands, each a Tensor or a Python number."""
    dims: list[dtype] = []
    zeros: list[dtype] = []
    scalars: list[dtype] = []
    for x in (a, b):
        if isinstance(x, Tensor):
            (dims if x._data.ndim else zeros).append(x._dtype)
        else:
            scalars.append(dtypes.scalar_dtype(x))
    return dtypes.result_type(dims, zeros, scalars)


def _check_devices(a: Tensor, b: Tensor) -> None:
    if a._device != b._device and b._data.ndim and a._data.ndim:
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{a._device} and {b._device}!"
        )


def _as_operand(x: Any, dt: dtype, like: Tensor) -> Tensor:
    """x as a Tensor of dtype `dt` on `like`'s device (scalars become 0-d tensors)."""
    if isinstance(x, Tensor):
        if x._device != like._device:
            x = x.to(like._device)
        return x if x._dtype is dt else fn.Cast.apply(x, dtype=dt)
    return _make(like._ops.asarray(x, dtype=dt.np), dt, like._device, like._ops)


_scalar_result = dtypes.scalar_result


def binary(prim: Any, name: str, a: Any, b: Any, dt: dtype | None = None) -> Tensor:
    """Apply the broadcasting primitive `prim` (backend function `name`) in dtype `dt` (default: promoted)."""
    if not isinstance(a, Tensor) and type(a) not in _PY_SCALARS:
        a = _array_operand(a, b)
    elif not isinstance(b, Tensor) and type(b) not in _PY_SCALARS:
        b = _array_operand(b, a)
    if isinstance(a, Tensor):
        ta = a
        if isinstance(b, Tensor):
            if dt is None:
                dt = a._dtype if a._dtype is b._dtype else _result_dtype(a, b)
            if a._device is not b._device:
                _check_devices(a, b)
                if not a._data.ndim:
                    ta = b  # a zero-dim tensor joins the other operand's device, as in PyTorch
            grad = a._requires_grad or b._requires_grad
        else:
            if dt is None:
                dt = _scalar_result(a._dtype, b)
            grad = a._requires_grad
    else:
        ta = b
        if dt is None:
            dt = _scalar_result(b._dtype, a)
        grad = b._requires_grad
    if grad and state.enabled:
        ea, eb = _as_operand(a, dt, ta), _as_operand(b, dt, ta)
        broadcast_shapes(ea._data.shape, eb._data.shape)
        return prim.apply(ea, eb)
    ops = ta._ops
    ad = a._data if isinstance(a, Tensor) and a._dtype is dt and a._ops is ops else _raw(a, dt, ops)
    bd = b._data if isinstance(b, Tensor) and b._dtype is dt and b._ops is ops else _raw(b, dt, ops)
    try:
        out = getattr(ops, name)(ad, bd)
    except OverflowError:  # a Python int outside a small integer dtype wraps around, as in PyTorch
        out = getattr(ops, name)(_wrapped(ad, dt, ops), _wrapped(bd, dt, ops))
    except ValueError:
        broadcast_shapes(a.shape if isinstance(a, Tensor) else (), b.shape if isinstance(b, Tensor) else ())
        raise
    npdt = dt.np
    if out.dtype is not npdt and out.dtype != npdt:
        out = out.astype(npdt)
    return _make(out, dt, ta._device, ops)


_PY_SCALARS = frozenset((bool, int, float, complex))


def _array_operand(v: Any, like: Tensor) -> Any:
    """A numpy array (or anything with __array__) meeting a tensor becomes a tensor, as in PyTorch."""
    if isinstance(v, numbers.Number) or not hasattr(v, "__array__"):
        return v
    from serve.tensor.creation import as_tensor

    return as_tensor(v, device=like._device)


def _wrapped(v: Any, dt: dtype, ops: Any) -> Any:
    return ops.asarray(v).astype(dt.np) if isinstance(v, int) else v


def _raw(x: Any, dt: dtype, ops: Any) -> Any:
    t = type(x)
    if t is float or t is int:
        return x if dt.np.kind != "b" else bool(x)
    if isinstance(x, Tensor):
        data = x._data if x._ops is ops else ops.from_numpy(x._ops.to_numpy(x._data))
        return ops.astype(data, dt.np)
    if isinstance(x, _Scalar):
        return x if dt.np.kind != "b" else bool(x)
    raise TypeError(f"unsupported operand type: expected a Tensor or a number, got {type(x).__name__}")


def _operand_data(x: Any, dt: dtype, ops: Any) -> Any:
    """x's backend array in dtype `dt` on `ops`'s device (a number stays a number)."""
    return x._data if isinstance(x, Tensor) and x._dtype is dt and x._ops is ops else _raw(x, dt, ops)


def _float_dt(a: Any, b: Any) -> dtype:
    dt = _result_dtype(a, b)
    return dt if dt._category >= _FLOAT else dtypes.get_default_dtype()


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if alpha != 1:
        other = mul(other, alpha)
    return binary(fn.Add, "add", input, other)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    if _is_bool(input) and _is_bool(other):
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if _is_bool(input) or _is_bool(other):  # PyTorch refuses a bool on either side, Python's True included
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    if alpha != 1:
        other = mul(other, alpha)
    return binary(fn.Sub, "sub", input, other)


def rsub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    return sub(other, input, alpha=alpha)


def mul(input: Any, other: Any) -> Tensor:
    return binary(fn.Mul, "mul", input, other)


def div(input: Any, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is None:
        return binary(fn.Div, "div", input, other, _float_dt(input, other))
    if rounding_mode == "floor":
        return floor_divide(input, other)
    if rounding_mode == "trunc":
        dt = _result_dtype(input, other)
        out = binary(fn.Div, "div", input, other, _float_dt(input, other)).trunc()
        return out.to(dt)
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'")


true_divide = divide = div
multiply, subtract = mul, sub


def floor_divide(input: Any, other: Any) -> Tensor:
    dt = _result_dtype(input, other)
    if dt._category == _FLOAT:
        return binary(fn.Div, "div", input, other, dt).floor()
    _check_int_zero(other)
    return binary(None, "floor_divide", _nograd(input), _nograd(other), dt)  # type: ignore[arg-type]


def remainder(input: Any, other: Any) -> Tensor:
    if _result_dtype(input, other)._category == _INT:
        _check_int_zero(other)
    return binary(fn.Remainder, "remainder", input, other)


def _check_int_zero(other: Any) -> None:
    is_zero = (other == 0) if not isinstance(other, Tensor) else bool((other._data == 0).any())
    if is_zero:
        raise RuntimeError("ZeroDivisionError: integer division by zero")


def pow(input: Any, exponent: Any) -> Tensor:
    dt = _result_dtype(input, exponent)
    if dt._category == _INT and isinstance(exponent, int) and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    if type(exponent) in (int, float) and exponent == 3 and isinstance(input, Tensor) and input._dtype is dt:
        # (x * x) * x, as torch's CPU kernel computes a cube: numpy's power(x, 3.0) calls libm's pow per element,
        # 12x slower, and it was half of GPT-2's forward (its gelu_new cubes every MLP activation)
        return input * input * input
    return binary(fn.Pow, "power", input, exponent, dt)


def maximum(input: Tensor, other: Tensor) -> Tensor:
    _need_tensors("maximum", input, other)
    return binary(fn.Maximum, "maximum", input, other)


def minimum(input: Tensor, other: Tensor) -> Tensor:
    _need_tensors("minimum", input, other)
    return binary(fn.Minimum, "minimum", input, other)


def _need_tensors(name: str, *xs: Any) -> None:
    for x in xs:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name}(): argument 'other' must be Tensor, not {type(x).__name__}")


def _nograd(x: Any) -> Any:
    return x.detach() if isinstance(x, Tensor) and x._requires_grad else x


def _is_bool(x: Any) -> bool:
    return (isinstance(x, Tensor) and x._dtype is dtypes.bool) or isinstance(x, bool)


# ---- comparisons and logic (never differentiable) ----------------------------------------------------
def _compare_into_bool(name: str) -> Any:
    def compare(input: Tensor, other: Any) -> Any:
        if not isinstance(other, (Tensor, numbers.Number)):
            return NotImplemented
        ta = input if isinstance(input, Tensor) else other
        if isinstance(other, Tensor) and other._device is not input._device:
            _check_devices(input, other)
            if not input._data.ndim:
                ta = other
        dt = input._dtype if isinstance(other, Tensor) and input._dtype is other._dtype else _result_dtype(input, other)
        ops = ta._ops
        ad, bd = _operand_data(input, dt, ops), _operand_data(other, dt, ops)
        try:
            out = getattr(ops, name)(ad, bd)
        except ValueError:
            broadcast_shapes(input.shape, other.shape if isinstance(other, Tensor) else ())
            raise
        return _make(out, dtypes.bool, ta._device, ops)

    compare.__name__ = name
    return compare


eq = _compare_into_bool("eq")
ne = _compare_into_bool("ne")
lt = _compare_into_bool("lt")
le = _compare_into_bool("le")
gt = _compare_into_bool("gt")
ge = _compare_into_bool("ge")
greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne


def _logical(name: str) -> Any:
    def logical(input: Tensor, other: Any) -> Tensor:
        return binary(None, name, _nograd(input), _nograd(other), dtypes.bool)  # type: ignore[arg-type]

    logical.__name__ = name
    return logical


logical_and = _logical("logical_and")
logical_or = _logical("logical_or")
logical_xor = _logical("logical_xor")


def logical_not(input: Tensor) -> Tensor:
    return _make(input._ops.logical_not(input._data), dtypes.bool, input._device, input._ops)


def _bitwise(name: str) -> Any:
    def bitwise(input: Any, other: Any) -> Tensor:
        dt = _result_dtype(input, other)
        if dt._category >= _FLOAT:
            raise RuntimeError(
                f"\"{name}_cpu\" not implemented for '{dt.name}': bitwise operations need integer or bool tensors"
            )
        return binary(None, name, _nograd(input), _nograd(other), dt)  # type: ignore[arg-type]

    bitwise.__name__ = name
    return bitwise


bitwise_and = _bitwise("bitwise_and")
bitwise_or = _bitwise("bitwise_or")
bitwise_xor = _bitwise("bitwise_xor")


def bitwise_not(input: Tensor) -> Tensor:
    if input._dtype._category >= _FLOAT:
        raise RuntimeError(f"bitwise_not is only supported for integer and boolean tensors, got {input._dtype!r}")
    return _make(input._ops.bitwise_not(input._data), input._dtype, input._device, input._ops)


def isnan(input: Tensor) -> Tensor:
    return _make(input._ops.isnan(input._data), dtypes.bool, input._device, input._ops)


def isinf(input: Tensor) -> Tensor:
    return _make(input._ops.isinf(input._data), dtypes.bool, input._device, input._ops)


def isfinite(input: Tensor) -> Tensor:
    return _make(input._ops.isfinite(input._data), dtypes.bool, input._device, input._ops)


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    if input._dtype is not other._dtype:
        raise RuntimeError(f"{input._dtype!r} did not match {other._dtype!r}")
    a, b = input.detach(), other.detach()
    if not a.is_floating_point():
        a, b = a.double(), b.double()
    diff = (a - b).abs()
    # an infinite difference is never within tolerance (else -inf would be close to inf); equal infs are, via ==
    close = (diff <= atol + rtol * b.abs()).logical_and(diff.isfinite())
    close = close.logical_or(a == b)
    if equal_nan:
        close = close.logical_or(a.isnan().logical_and(b.isnan()))
    return close


def equal(input: Tensor, other: Tensor) -> bool:
    return input.shape == other.shape and bool((input == other).all())


# ---- one-input functions -----------------------------------------------------------------------------
def unary(prim: Any, name: str, x: Tensor, to_float: bool = True) -> Tensor:
    """Apply the elementwise primitive `prim`; integer and bool inputs become the default float dtype."""
    if to_float and x._dtype._category < _FLOAT:
        x = x.to(dtypes.get_default_dtype())
    if state.enabled and x._requires_grad:
        return prim.apply(x)
    return _make(getattr(x._ops, name)(x._data), x._dtype, x._device, x._ops)


def exp(input: Tensor) -> Tensor:
    return unary(fn.Exp, "exp", input)


def log(input: Tensor) -> Tensor:
    return unary(fn.Log, "log", input)


def sqrt(input: Tensor) -> Tensor:
    return unary(fn.Sqrt, "sqrt", input)


def rsqrt(input: Tensor) -> Tensor:
    return unary(fn.Rsqrt, "rsqrt", input)


def sin(input: Tensor) -> Tensor:
    return unary(fn.Sin, "sin", input)


def cos(input: Tensor) -> Tensor:
    return unary(fn.Cos, "cos", input)


def tanh(input: Tensor) -> Tensor:
    return unary(fn.Tanh, "tanh", input)


def sigmoid(input: Tensor) -> Tensor:
    return unary(fn.Sigmoid, "sigmoid", input)


def erf(input: Tensor) -> Tensor:
    return unary(fn.Erf, "erf", input)


def relu(input: Tensor) -> Tensor:
    if input._dtype is dtypes.bool:
        raise RuntimeError("relu is not implemented for bool tensors")
    return unary(fn.Relu, "relu", input, to_float=False)


def neg(input: Tensor) -> Tensor:
    if input._dtype is dtypes.bool:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    return unary(fn.Neg, "neg", input, to_float=False)


negative = neg


def abs(input: Tensor) -> Tensor:
    return unary(fn.Abs, "abs", input, to_float=False)


absolute = abs


def reciprocal(input: Tensor) -> Tensor:
    return div(1.0, input)


def square(input: Tensor) -> Tensor:
    return mul(input, input)


def _piecewise_constant(name: str) -> Any:
    def func(input: Tensor) -> Tensor:
        if input._dtype._category < _FLOAT and name != "sign":
            return input.clone()
        if state.enabled and input._requires_grad:
            return fn.ZeroGrad.apply(input, fn=name)
        return _make(getattr(input._ops, name)(input._data), input._dtype, input._device, input._ops)

    func.__name__ = name
    return func


floor = _piecewise_constant("floor")
ceil = _piecewise_constant("ceil")
trunc = _piecewise_constant("trunc")
sign = _piecewise_constant("sign")


def round(input: Tensor, *, decimals: int = 0) -> Tensor:
    if decimals == 0:
        return _piecewise_constant("round")(input)
    scale = 10.0**decimals
    return (input * scale).round() / scale


def clamp(input: Tensor, min: Any = None, max: Any = None) -> Tensor:
    """Limit values to [min, max]; either bound may be a number or a tensor (PyTorch's clamp)."""
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    out = input
    if min is not None:
        out = _clamp_side(out, min, fn.Maximum, "maximum")
    if max is not None:
        out = _clamp_side(out, max, fn.Minimum, "minimum")
    return out


clip = clamp


def _clamp_side(x: Tensor, bound: Any, prim: Any, name: str) -> Tensor:
    recording = state.enabled and (x._requires_grad or getattr(bound, "_requires_grad", False))
    if not recording:
        return binary(prim, name, x, bound, _result_dtype(x, bound))
    # PyTorch's clamp gradient goes to x where x is inside the bound or on it, to the bound elsewhere (not split
    # on ties like maximum/minimum); NaN in x stays NaN
    keep = (x >= bound) if name == "maximum" else (x <= bound)
    return where(keep.logical_or(x.isnan()), x, bound)


def where(condition: Tensor, input: Any, other: Any) -> Tensor:
    """Elements of `input` where `condition`, else of `other` (tensors or numbers, broadcast together)."""
    if not isinstance(condition, Tensor) or condition._dtype is not dtypes.bool:
        got = condition._dtype.name if isinstance(condition, Tensor) else type(condition).__name__
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype {got}")
    ref = input if isinstance(input, Tensor) else other if isinstance(other, Tensor) else condition
    dt = _result_dtype(input, other) if isinstance(input, Tensor) or isinstance(other, Tensor) else (
        dtypes.result_type([], [], [dtypes.scalar_dtype(input), dtypes.scalar_dtype(other)]))  # fmt: skip
    a, b = _as_operand(input, dt, ref), _as_operand(other, dt, ref)
    broadcast_shapes(condition._data.shape, a._data.shape, b._data.shape)
    return fn.Where.apply(condition, a, b)


def lerp(input: Tensor, end: Tensor, weight: Any) -> Tensor:
    return input + weight * (end - input)
