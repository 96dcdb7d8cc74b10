"""`F.pad`, `F.interpolate` / `F.upsample` (nearest, nearest-exact, linear, bilinear, trilinear, area).

Constant padding is the `Pad` primitive (plus a crop for negative pads). Reflect / replicate / circular padding
and interpolation are all resampling along axes: a plan from the backend names, per trailing axis, the
source positions (and for linear modes two positions and their weights). One linear primitive applies a plan,
its adjoint is its gradient, and each is the other's backward.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

from serve.nn.functional.pooling import adaptive_avg_pool1d, adaptive_avg_pool2d
from serve.tensor import function as fn
from serve.tensor.function import Primitive
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make

_PAD_COMBOS = (
    "Supported combinations for non-constant padding:\n"
    "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
    "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
    "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
)
_LINEAR_DIMS = {"linear": 1, "bilinear": 2, "trilinear": 3}


class Resample(Primitive):
    """x resampled along its trailing axes by a backend plan (see serve/backend/cpu_resample.py)."""

    _node_name = "ResampleBackward0"

    @staticmethod
    def forward(ctx, ops, x, *, plan):
        return ops.resample(x, plan)

    @staticmethod
    def backward(ctx, g):
        sizes = tuple(ctx.input_shapes[0][-len(ctx.plan) :])
        return ResampleAdjoint.apply(g, sizes=sizes, plan=ctx.plan)


class ResampleAdjoint(Primitive):
    @staticmethod
    def forward(ctx, ops, g, *, sizes, plan):
        return ops.resample_adjoint(g, sizes, plan)

    @staticmethod
    def backward(ctx, gg):
        return Resample.apply(gg, plan=ctx.plan)


def _resample(x: Tensor, plan: tuple) -> Tensor:
    if state.enabled and x._requires_grad:
        return Resample.apply(x, plan=plan)
    return _make(x._ops.resample(x._data, plan), x._dtype, x._device, x._ops)


# ---- padding -----------------------------------------------------------------------------------------
def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last len(pad) // 2 dims, the last dim first: (left, right, top, bottom, ...); negative pads crop."""
    if any(not isinstance(p, int) for p in pad):
        raise TypeError(f"pad(): argument 'pad' must be tuple of ints, but got {list(pad)}")
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but got padding length "
            f"{len(pad)} and input of dimension {input.ndim}"
        )
    # per padded dim, outermost first: (dim, before, after)
    dims = [(input.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)][::-1]
    if mode == "constant":
        return _constant_pad(input, dims, 0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    _check_pad(input, dims, mode, len(pad))
    return _resample(input, tuple(input._ops.pad_plan(mode, input.shape[d], b, a) for d, b, a in dims))


def _constant_pad(x: Tensor, dims: list[tuple[int, int, int]], value: float) -> Tensor:
    crop = [slice(None)] * x.ndim
    for d, before, after in dims:
        if before + after + x.shape[d] < 0:
            raise RuntimeError(f"narrow(): length must be non-negative. (dim {d} of size {x.shape[d]} padded by "
                               f"{(before, after)})")  # fmt: skip
        crop[d] = slice(max(-before, 0), x.shape[d] - max(-after, 0))
    if any(b < 0 or a < 0 for _, b, a in dims):
        x = x[tuple(crop)]
    width = [(0, 0)] * x.ndim
    for d, before, after in dims:
        width[d] = (max(before, 0), max(after, 0))
    if not any(b or a for b, a in width):
        return x
    if state.enabled and x._requires_grad:
        return fn.Pad.apply(x, pad_width=tuple(width), value=value)
    return _make(x._ops.pad(x._data, width, constant_values=value), x._dtype, x._device, x._ops)


def _check_pad(x: Tensor, dims: list[tuple[int, int, int]], mode: str, length: int) -> None:
    n = len(dims)
    if x.ndim not in (n + 1, n + 2):
        raise NotImplementedError(f"Padding size {length} is not supported for {x.ndim}D input tensor.\n{_PAD_COMBOS}")
    if 0 in x.shape[x.ndim - n - 1 :]:  # every dim but the batch
        raise RuntimeError(f"Expected {n + 1}D or {n + 2}D (batch mode) tensor with possibly 0 batch size and other "
                           f"non-zero dimensions for input, but got: {list(x.shape)}")  # fmt: skip
    for d, before, after in dims:
        size = x.shape[d]
        if mode == "reflect" and (before >= size or after >= size):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, but got: padding "
                f"({before}, {after}) at dimension {d} of input {list(x.shape)}"
            )
        if mode == "circular" and (before > size or after > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if size + before + after <= 0:
            raise RuntimeError(f"input of size {list(x.shape)} padded by {(before, after)} at dimension {d} is empty")


# ---- interpolation -----------------------------------------------------------------------------------
def _output_sizes(x: Tensor, size: Any, scale_factor: Any, recompute: bool | None) -> tuple[list[int], list]:
    """Output sizes and the scale factors PyTorch's kernels receive (None: derived from the sizes)."""
    dims, spatial = x.ndim - 2, list(x.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if recompute:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = list(size) if isinstance(size, (tuple, list)) else [size] * dims
        if len(sizes) != dims:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got input with spatial "
                f"dimensions of {spatial} and output size of {size}. Please provide input tensor in (N, C, d1, d2, "
                "...,dK) format and output size in (o1, o2, ...,oK) format."
            )
        return [int(s) for s in sizes], [None] * dims
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    scales = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * dims
    if len(scales) != dims:
        raise ValueError(
            f"Input and scale_factor must have the same number of spatial dimensions, but got input with spatial "
            f"dimensions of {spatial} and scale_factor of shape {scale_factor}. Please provide input tensor in (N, "
            "C, d1, d2, ...,dK) format and scale_factor in (s1, s2, ...,sK) format."
        )
    sizes = [math.floor(float(n) * float(s)) for n, s in zip(spatial, scales)]
    return sizes, ([None] * dims if recompute else [float(s) for s in scales])


def _check_mode(x: Tensor, mode: str, align_corners: bool | None, antialias: bool) -> None:
    known = ("nearest", "nearest-exact", "area", *_LINEAR_DIMS)
    if mode in ("nearest", "nearest-exact", "area") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")  # fmt: skip
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported by serve")
    if mode not in known or x.ndim not in (3, 4, 5):
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {x.ndim}D) for the modes: nearest | "
            f"linear | bilinear | trilinear | area | nearest-exact (got {mode})"
        )
    if mode in _LINEAR_DIMS and x.ndim != _LINEAR_DIMS[mode] + 2:
        raise NotImplementedError(f"Got {x.ndim}D input, but {mode} mode needs {_LINEAR_DIMS[mode] + 2}D input")
    if mode == "area" and x.ndim == 5:
        raise NotImplementedError("interpolate(mode='area') of 5D input is not supported by serve")
    if not x.is_floating_point():
        name = str(x.dtype).split(".")[-1]
        raise NotImplementedError(f"\"interpolate\" not implemented for '{name}'")


def interpolate(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:  # fmt: skip
    """Resize the spatial dims of (N, C, *spatial) to `size` or by `scale_factor`, as PyTorch's interpolate."""
    _check_mode(input, mode, align_corners, antialias)
    sizes, scales = _output_sizes(input, size, scale_factor, recompute_scale_factor)
    spatial = list(input.shape[2:])
    if min(spatial) <= 0 or min(sizes) <= 0:
        names = "DHW"[3 - len(spatial) :]
        raise RuntimeError(
            "Input and output sizes should be greater than 0, but got input ("
            + ", ".join(f"{n}: {s}" for n, s in zip(names, spatial)) + ") and output ("
            + ", ".join(f"{n}: {s}" for n, s in zip(names, sizes)) + ")"
        )  # fmt: skip
    if mode == "area":
        return (adaptive_avg_pool1d if input.ndim == 3 else adaptive_avg_pool2d)(input, sizes)
    ops = input._ops
    if mode in _LINEAR_DIMS:
        dt = input._data.dtype
        plan = tuple(ops.linear_plan(n, o, bool(align_corners), s, dt) for n, o, s in zip(spatial, sizes, scales))
    else:
        plan = tuple(ops.nearest_plan(n, o, s, mode == "nearest-exact") for n, o, s in zip(spatial, sizes, scales))
    return _resample(input, plan)


def upsample(input: Tensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:  # fmt: skip
    """Deprecated alias of interpolate, as in PyTorch."""
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.", stacklevel=2)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: interpolate(..., mode='nearest')."""
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)  # fmt: skip
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size: Any = None, scale_factor: Any = None) -> Tensor:
    """Deprecated: interpolate(..., mode='bilinear', align_corners=True)."""
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.",
                  stacklevel=2)  # fmt: skip
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
