"""Normalization: `F.batch_norm`, `F.layer_norm`, `F.group_norm`, `F.instance_norm`, `F.normalize`.

All share one primitive, `Standardize` ((x - mean) / sqrt(var + eps) over some axes, biased variance), whose
backward recomputes the statistics with Tensor ops so it can be differentiated again; the affine part is
ordinary Tensor arithmetic. Without a graph, layer norm is one fused backend kernel and eval-mode batch
norm is folded into one scale and one shift per channel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from serve.tensor.function import Primitive
from serve.tensor.grad_mode import no_grad, state
from serve.tensor.tensor import Tensor, _make


class Standardize(Primitive):
    """(x - mean) / sqrt(var + eps) over `axes` (biased variance)."""

    _node_name = "StandardizeBackward0"

    @staticmethod
    def forward(ctx, ops, a, axes, eps):
        return ops.standardize(a, axes, eps)

    @staticmethod
    def backward(ctx, g):
        x, axes = ctx.inputs[0], ctx.axes
        xc = x - x.mean(axes, keepdim=True)
        rstd = ((xc * xc).mean(axes, keepdim=True) + ctx.eps).rsqrt()
        xhat = xc * rstd
        return rstd * (g - g.mean(axes, keepdim=True) - xhat * (g * xhat).mean(axes, keepdim=True))


def _records(*tensors: Tensor | None) -> bool:
    return state.enabled and any(t is not None and t._requires_grad for t in tensors)


def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """x * weight + bias with both reshaped to `shape` (e.g. (C, 1, 1) for a per-channel affine)."""
    if weight is not None:
        x = x * weight.reshape(shape)
    if bias is not None:
        x = x + bias.reshape(shape)
    return x


def _channel_shape(input: Tensor) -> tuple[int, ...]:
    return (input.shape[1],) + (1,) * (input.ndim - 2)  # (C, 1, ..., 1): broadcasts over dim 1


# ---- layer norm ---------------------------------------------------------------------------------------
def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize over the last len(normalized_shape) dims, then scale and shift elementwise."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if not k or input._data.shape[input._data.ndim - k :] != shape:
        _layer_norm_shape_error(input, shape)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t._data.shape != shape:
            raise RuntimeError(
                f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                f"{list(t.shape)} and normalized_shape = {list(shape)}"
            )
    if _records(input, weight, bias):
        out = Standardize.apply(input, axes=tuple(range(input.ndim - k, input.ndim)), eps=eps)
        return _affine(out, weight, bias, shape)
    w = None if weight is None else weight._data
    b = None if bias is None else bias._data
    return _make(input._ops.layer_norm(input._data, w, b, k, eps), input._dtype, input._device, input._ops)


def _layer_norm_shape_error(input: Tensor, shape: tuple[int, ...]) -> None:
    if not shape:
        raise RuntimeError(
            "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got "
            "normalized_shape = []"
        )
    raise RuntimeError(
        f"Given normalized_shape={list(shape)}, expected input with shape [*, {', '.join(map(str, shape))}], but got "
        f"input of size{list(input.shape)}"
    )


# ---- batch norm ---------------------------------------------------------------------------------------
def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize each channel (dim 1) with the batch statistics (training, updating the running ones by
    `momentum`) or with the running statistics (eval), then scale and shift per channel."""
    _check_batch_norm(input, running_mean, running_var, weight, bias, training)
    if not training and running_mean is not None and running_var is not None:
        return _batch_norm_eval(input, running_mean, running_var, weight, bias, eps)
    axes = (0,) + tuple(range(2, input.ndim))
    out = _affine(Standardize.apply(input, axes=axes, eps=eps), weight, bias, _channel_shape(input))
    if running_mean is not None and running_var is not None:
        _update_running_stats(input, axes, running_mean, running_var, momentum)
    return out


def _batch_norm_eval(input: Tensor, running_mean: Tensor, running_var: Tensor, weight: Tensor | None,
                     bias: Tensor | None, eps: float) -> Tensor:  # fmt: skip
    """Normalization with the running statistics, folded into one scale and one shift per channel."""
    if _records(input, weight, bias):
        scale = (running_var + eps).rsqrt()
        scale = scale if weight is None else scale * weight
        shift = -running_mean * scale
        shift = shift if bias is None else shift + bias
        return _affine(input, scale, shift, _channel_shape(input))
    w = None if weight is None else weight._data
    b = None if bias is None else bias._data
    data = input._ops.batch_norm_eval(input._data, running_mean._data, running_var._data, w, b, eps)
    return _make(data, input._dtype, input._device, input._ops)


def _check_batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
                      weight: Tensor | None, bias: Tensor | None, training: bool) -> None:  # fmt: skip
    channels = input.shape[1] if input.ndim > 1 else 0
    if training and math.prod(input.shape) // max(channels, 1) == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.shape}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither be None")
    if not training and running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
        if t is not None and t.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")


def _update_running_stats(input: Tensor, axes: tuple[int, ...], running_mean: Tensor, running_var: Tensor,
                          momentum: float) -> None:  # fmt: skip
    """running = (1 - momentum) * running + momentum * batch statistic, with the unbiased batch variance."""
    ops = input._ops
    mean, var = ops.moments(input._data, axes)
    n = math.prod(input.shape[a] for a in axes)
    _blend(running_mean, mean, momentum)
    _blend(running_var, var * (n / max(n - 1, 1)), momentum)


def _blend(running: Tensor, batch_stat: object, momentum: float) -> None:
    stat = _make(running._ops.astype(batch_stat, running._dtype.np).reshape(running.shape), running._dtype,
                 running._device, running._ops)  # fmt: skip
    with no_grad():
        running.mul_(1 - momentum).add_(stat * momentum)


# ---- instance norm and group norm ---------------------------------------------------------------------
def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize each (sample, channel) over its spatial dims; with running stats given, also track their mean."""
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    if math.prod(input.shape[2:]) == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {input.shape}")
    axes = tuple(range(2, input.ndim))
    out = _affine(Standardize.apply(input, axes=axes, eps=eps), weight, bias, _channel_shape(input))
    if running_mean is not None and running_var is not None:
        mean, var = input._ops.moments(input._data, axes)  # (N, C, 1, ...): per instance
        n = math.prod(input.shape[2:])
        _blend(running_mean, mean.mean(0), momentum)
        _blend(running_var, (var * (n / max(n - 1, 1))).mean(0), momentum)
    return out


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:  # fmt: skip
    """Normalize each sample over groups of channels (and all spatial dims), then a per-channel affine."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got input of shape "
            f"{list(input.shape)} and num_groups={num_groups}"
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.numel() != c):
            raise RuntimeError(
                f"Expected {name} to be a vector of size equal to the number of channels in input, but got {name} of "
                f"shape {list(t.shape)} and input of shape {list(input.shape)}"
            )
    grouped = input.reshape(n, num_groups, -1)  # (N, G, C/G * spatial)
    out = Standardize.apply(grouped, axes=(2,), eps=eps).reshape(input.shape)
    return _affine(out, weight, bias, _channel_shape(input))


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out: Tensor | None = None) -> Tensor:
    """input / max(||input||_p over dim, eps)."""
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)
    result = input / denom
    return result if out is None else out.copy_(result)
