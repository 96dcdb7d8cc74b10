"""Activation functions (`F.relu`, `F.gelu`, `F.softmax`, ...) with PyTorch's arguments and gradients.

The elementwise ones are one primitive each: the forward is a fused backend kernel (`ops.gelu`, ...), the
backward is written with Tensor ops so it can be differentiated again. Without a graph to record, the kernel
is called directly (`_pointwise`), so serving pays one numpy pass and the wrapping of the result.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from serve.tensor import dtypes, math_ops, versions
from serve.tensor.function import Primitive
from serve.tensor.grad_mode import state
from serve.tensor.inplace import assign
from serve.tensor.reduce_ops import log_softmax as _log_softmax
from serve.tensor.reduce_ops import softmax as _softmax
from serve.tensor.tensor import Tensor, _make

sigmoid = math_ops.sigmoid
tanh = math_ops.tanh

_SQRT_HALF = 1 / math.sqrt(2.0)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _pointwise(prim: type[Primitive], name: str, x: Tensor, **kw: Any) -> Tensor:
    """Apply an activation primitive, skipping all graph bookkeeping when nothing is recorded."""
    if not x._dtype.is_floating_point:
        raise RuntimeError(f"\"{name}_cpu\" not implemented for '{x._dtype.name}': pass a floating point tensor")
    if state.enabled and x._requires_grad:
        return prim.apply(x, **kw)
    return _make(prim.forward(None, x._ops, x._data, **kw), x._dtype, x._device, x._ops)


def _maybe_inplace(op: Callable[..., Tensor], x: Tensor, inplace: bool, *args: Any) -> Tensor:
    """`op(x, *args)`, written back into x when `inplace` (autograd is kept right by `assign`)."""
    if inplace:
        return assign(x, lambda old: op(old, *args))
    return op(x, *args)


# ---- primitives ---------------------------------------------------------------------------------------
class Gelu(Primitive):
    _node_name = "GeluBackward0"

    @staticmethod
    def forward(ctx, ops, a, approximate):
        return ops.gelu(a, approximate)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        if ctx.approximate == "tanh":  # PyTorch's formula for the tanh approximation
            t = tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
            inner_grad = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * inner_grad)
        cdf = 0.5 * (1 + (x * _SQRT_HALF).erf())
        pdf = (-0.5 * x * x).exp() * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


class Silu(Primitive):
    _node_name = "SiluBackward0"

    @staticmethod
    def forward(ctx, ops, a):
        return ops.silu(a)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        s = sigmoid(x)
        return g * s * (1 + x * (1 - s))


class Elu(Primitive):
    """scale * (x if x > 0 else alpha * (exp(x * input_scale) - 1)): ELU, SELU and CELU."""

    _node_name = "EluBackward0"

    @staticmethod
    def forward(ctx, ops, a, alpha, scale, input_scale):
        return ops.elu(a, alpha, scale, input_scale)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        # clamp: the unused branch must stay finite, or a second derivative would multiply 0 by inf
        neg = g * (ctx.scale * ctx.alpha * ctx.input_scale) * (x.clamp(max=0) * ctx.input_scale).exp()
        return math_ops.where(x > 0, g * ctx.scale, neg)


class LeakyRelu(Primitive):
    _node_name = "LeakyReluBackward0"

    @staticmethod
    def forward(ctx, ops, a, slope):
        return ops.leaky_relu(a, slope)

    @staticmethod
    def backward(ctx, g):
        return math_ops.where(ctx.inputs[0] > 0, g, g * ctx.slope)


class Hardtanh(Primitive):
    _node_name = "HardtanhBackward0"

    @staticmethod
    def forward(ctx, ops, a, low, high):
        return ops.hardtanh(a, low, high)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        return g.masked_fill((x <= ctx.low).logical_or(x >= ctx.high), 0)


class Hardswish(Primitive):
    _node_name = "HardswishBackward0"

    @staticmethod
    def forward(ctx, ops, a):
        return ops.hardswish(a)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        slope = math_ops.where(x < -3, 0.0, math_ops.where(x <= 3, x / 3 + 0.5, 1.0))
        return g * slope


class Hardsigmoid(Primitive):
    _node_name = "HardsigmoidBackward0"

    @staticmethod
    def forward(ctx, ops, a):
        return ops.hardsigmoid(a)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        return g.masked_fill((x <= -3).logical_or(x >= 3), 0) / 6


class Softplus(Primitive):
    _node_name = "SoftplusBackward0"

    @staticmethod
    def forward(ctx, ops, a, beta, threshold):
        return ops.softplus(a, beta, threshold)

    @staticmethod
    def backward(ctx, g):
        z = ctx.inputs[0] * ctx.beta
        return math_ops.where(z > ctx.threshold, g, g * sigmoid(z))


class LogSigmoid(Primitive):
    _node_name = "LogSigmoidBackward0"

    @staticmethod
    def forward(ctx, ops, a):
        return ops.log_sigmoid(a)

    @staticmethod
    def backward(ctx, g):
        return g * sigmoid(-ctx.inputs[0])


class Mish(Primitive):
    _node_name = "MishBackward0"

    @staticmethod
    def forward(ctx, ops, a):
        return ops.mish(a)

    @staticmethod
    def backward(ctx, g):
        x = ctx.inputs[0]
        t = tanh(softplus(x))
        return g * (t + x * sigmoid(x) * (1 - t * t))


class Threshold(Primitive):
    _node_name = "ThresholdBackward0"

    @staticmethod
    def forward(ctx, ops, a, threshold, value):
        return ops.threshold(a, threshold, value)

    @staticmethod
    def backward(ctx, g):
        return g.masked_fill(ctx.inputs[0] <= ctx.threshold, 0)


# ---- the functional API -------------------------------------------------------------------------------
def relu(input: Tensor, inplace: bool = False) -> Tensor:
    if not inplace:
        return math_ops.relu(input)
    if (state.enabled and input._requires_grad) or input._dtype is dtypes.bool:
        return input.relu_()
    input._ops.relu_(input._data)  # nothing to record: clamp the storage itself (ResNet's ReLU(inplace=True))
    versions.bump(input._data)
    return input


def relu_(input: Tensor) -> Tensor:
    return relu(input, inplace=True)


def _hardtanh(x: Tensor, min_val: float, max_val: float) -> Tensor:
    if x._dtype.is_floating_point:
        return _pointwise(Hardtanh, "hardtanh", x, low=min_val, high=max_val)
    return x.clamp(min_val, max_val)  # integer tensors clamp, as in PyTorch


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _maybe_inplace(_hardtanh, input, inplace, min_val, max_val)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return hardtanh(input, 0.0, 6.0, inplace)


def _leaky_relu(x: Tensor, slope: float) -> Tensor:
    return _pointwise(LeakyRelu, "leaky_relu", x, slope=slope)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_leaky_relu, input, inplace, negative_slope)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, inplace=True)


def _elu(x: Tensor, alpha: float, scale: float, input_scale: float, name: str) -> Tensor:
    return _pointwise(Elu, name, x, alpha=alpha, scale=scale, input_scale=input_scale)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_elu, input, inplace, alpha, 1.0, 1.0, "elu")


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, inplace=True)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_elu, input, inplace, _SELU_ALPHA, _SELU_SCALE, 1.0, "selu")


def selu_(input: Tensor) -> Tensor:
    return selu(input, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: celu's alpha must not be 0")
    return _maybe_inplace(_elu, input, inplace, alpha, 1.0, 1.0 / alpha, "celu")


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, inplace=True)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return _pointwise(Gelu, "gelu", input, approximate=approximate)


def _silu(x: Tensor) -> Tensor:
    return _pointwise(Silu, "silu", x)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_silu, input, inplace)


def _mish(x: Tensor) -> Tensor:
    return _pointwise(Mish, "mish", x)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_mish, input, inplace)


def _hardswish(x: Tensor) -> Tensor:
    return _pointwise(Hardswish, "hardswish", x)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_hardswish, input, inplace)


def _hardsigmoid(x: Tensor) -> Tensor:
    return _pointwise(Hardsigmoid, "hardsigmoid", x)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_hardsigmoid, input, inplace)


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return _pointwise(Softplus, "softplus", input, beta=beta, threshold=threshold)


def logsigmoid(input: Tensor) -> Tensor:
    return _pointwise(LogSigmoid, "log_sigmoid", input)


def softsign(input: Tensor) -> Tensor:
    return input / (input.abs() + 1)


def _threshold(x: Tensor, threshold: float, value: float) -> Tensor:
    if x._dtype.is_floating_point:
        return _pointwise(Threshold, "threshold", x, threshold=threshold, value=value)
    return math_ops.where(x <= threshold, value, x).to(x._dtype)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return _maybe_inplace(_threshold, input, inplace, threshold, value)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return _maybe_inplace(_threshold, input, True, threshold, value)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {n}")
    a, b = input.chunk(2, dim)
    return a * sigmoid(b)


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() != 1 and weight.numel() != channels:
        raise RuntimeError(
            "Mismatch of parameter numbers and input channel size. Found parameter numbers = "
            f"{weight.numel()} and channel size = {channels}."
        )
    if weight.numel() != 1:
        weight = weight.reshape((channels,) + (1,) * (input.ndim - 2))  # (C, 1, ..., 1) broadcasts over dim 1
    return math_ops.where(input > 0, input, weight * input)


def _softmax_dim(name: str, ndim: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmax", input.ndim)
    return _softmax(input, dim, dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("softmin", input.ndim)
    if dtype is not None:
        input = input.to(dtype)
    return _softmax(-input, dim)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    if dim is None:
        dim = _softmax_dim("log_softmax", input.ndim)
    return _log_softmax(input, dim, dtype)
