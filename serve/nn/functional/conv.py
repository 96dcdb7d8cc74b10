"""`F.conv1d/2d`, `F.conv_transpose1d/2d`, `F.unfold`/`F.fold`: convolution on the backend's im2col.

Three primitives close over each other's gradients: `Conv2d`, `ConvInputGrad` (its input gradient, which is
also the transposed convolution) and `ConvWeightGrad`; each backward is written with the other two, so
gradients of gradients work. 1-d forms run the 2-d ones on (N, C, 1, L). Under no_grad the backend is
called directly, without Primitive bookkeeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serve.tensor.function import Primitive
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make

IntOrTuple = int | Sequence[int]


def _ntuple(value: Any, n: int, name: str) -> tuple[int, ...]:
    """An int or a sequence of 1 or n ints as n ints, RuntimeError in PyTorch's words otherwise."""
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return (int(value[0]),) * n
        if len(value) != n:
            raise RuntimeError(
                f"expected {name} to be a single integer value or a list of {n} values to match the convolution "
                f"dimensions, but got {name}={list(value)}"
            )
        return tuple(int(v) for v in value)
    return (int(value),) * n


def _flat(pads: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """Per-dim (before, after) pairs as the backend's (top, bottom, left, right)."""
    return tuple(p for pair in pads for p in pair)


# ---- primitives --------------------------------------------------------------------------------------
class Conv2d(Primitive):
    """conv2d(x, w[, b]) on (N, C, H, W); `padding` is (top, bottom, left, right)."""

    _node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, ops, x, w, b=None, *, stride, padding, dilation, groups, out=None):
        y = ops.conv2d(x, w, b, stride, padding, dilation, groups)
        return y if out is None or y.shape[2:] == out else y[:, :, : out[0], : out[1]].copy()

    @staticmethod
    def backward(ctx, g):
        need, kw = ctx.needs_input_grad, _params(ctx)
        x, w = ctx.input(0), ctx.input(1)
        gx = ConvInputGrad.apply(g, w, size=tuple(x.shape[2:]), **kw) if need[0] else None
        gw = ConvWeightGrad.apply(x, g, kernel=tuple(w.shape[2:]), **kw) if need[1] else None
        if len(need) == 2:
            return gx, gw
        return gx, gw, (g.sum((0, 2, 3)) if need[2] else None)


class ConvInputGrad(Primitive):
    """The gradient of conv2d for an input of spatial `size`: the transposed convolution of g with w."""

    _node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, ops, g, w, *, size, stride, padding, dilation, groups):
        return ops.conv2d_input_grad(g, w, size, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, u):
        need, kw = ctx.needs_input_grad, _params(ctx)
        g, w = ctx.input(0), ctx.input(1)
        gg = Conv2d.apply(u, w, out=tuple(g.shape[2:]), **kw) if need[0] else None
        gw = ConvWeightGrad.apply(u, g, kernel=tuple(w.shape[2:]), **kw) if need[1] else None
        return gg, gw


class ConvWeightGrad(Primitive):
    """The gradient of conv2d with respect to its weight, given the input x and the output's gradient g."""

    _node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, ops, x, g, *, kernel, stride, padding, dilation, groups):
        return ops.conv2d_weight_grad(x, g, kernel, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, v):
        need, kw = ctx.needs_input_grad, _params(ctx)
        x, g = ctx.input(0), ctx.input(1)
        gx = ConvInputGrad.apply(g, v, size=tuple(x.shape[2:]), **kw) if need[0] else None
        gg = Conv2d.apply(x, v, out=tuple(g.shape[2:]), **kw) if need[1] else None
        return gx, gg


def _params(ctx: Any) -> dict[str, Any]:
    return {"stride": ctx.stride, "padding": ctx.padding, "dilation": ctx.dilation, "groups": ctx.groups}


class Unfold(Primitive):
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L)."""

    _node_name = "Im2ColBackward0"

    @staticmethod
    def forward(ctx, ops, x, *, kernel, stride, padding, dilation):
        return ops.unfold(x, kernel, stride, padding, dilation)

    @staticmethod
    def backward(ctx, g):
        size = tuple(ctx.input_shapes[0][2:])
        return Fold.apply(g, size=size, kernel=ctx.kernel, stride=ctx.stride, padding=ctx.padding,
                          dilation=ctx.dilation)  # fmt: skip


class Fold(Primitive):
    """col2im: (N, C*kh*kw, L) -> (N, C, H, W), overlaps summed."""

    _node_name = "Col2ImBackward0"

    @staticmethod
    def forward(ctx, ops, cols, *, size, kernel, stride, padding, dilation):
        return ops.fold(cols, size, kernel, stride, padding, dilation)

    @staticmethod
    def backward(ctx, g):
        return Unfold.apply(g, kernel=ctx.kernel, stride=ctx.stride, padding=ctx.padding, dilation=ctx.dilation)


def _records(*tensors: Tensor | None) -> bool:
    return state.enabled and any(t is not None and t._requires_grad for t in tensors)


def _conv2d(x: Tensor, w: Tensor, b: Tensor | None, stride: tuple, padding: tuple, dilation: tuple,
            groups: int) -> Tensor:  # fmt: skip
    if _records(x, w, b):
        args = (x, w) if b is None else (x, w, b)
        return Conv2d.apply(*args, stride=stride, padding=padding, dilation=dilation, groups=groups)
    data = x._ops.conv2d(x._data, w._data, None if b is None else b._data, stride, padding, dilation, groups)
    return _make(data, x._dtype, x._device, x._ops)


def _conv_transpose2d(x: Tensor, w: Tensor, b: Tensor | None, size: tuple, stride: tuple, padding: tuple,
                      dilation: tuple, groups: int) -> Tensor:  # fmt: skip
    kw = {"size": size, "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    if _records(x, w, b):
        out = ConvInputGrad.apply(x, w, **kw)
        return out if b is None else out + b.reshape(-1, 1, 1)
    data = x._ops.conv2d_input_grad(x._data, w._data, *kw.values())
    if b is not None:
        data += b._data.reshape(-1, 1, 1)
    return _make(data, x._dtype, x._device, x._ops)


# ---- argument checks ---------------------------------------------------------------------------------
def _check_input(input: Tensor, dims: int, name: str) -> bool:
    """True when batched; RuntimeError unless the input has dims + 1 or dims + 2 dimensions."""
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(
            f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to {name}, but got input of size: "
            f"{list(input.shape)}"
        )
    return input.ndim == dims + 2


def _check_common(input: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple, dilation: tuple,
                  groups: int, dims: int) -> None:  # fmt: skip
    if weight.ndim != dims + 2:
        raise RuntimeError(
            f"expected a {dims + 2}-D weight (out_channels, in_channels / groups, *kernel_size) for a {dims}-d "
            f"convolution, but got weight of size {list(weight.shape)}"
        )
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("non-positive dilation is not supported")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"expected scalar type {weight.dtype} but found {input.dtype}: input and weight differ")
    if bias is not None and bias.dtype is not input.dtype:
        raise RuntimeError(f"Input type ({input.dtype}) and bias type ({bias.dtype}) should be the same")


def _check_bias(weight: Tensor, bias: Tensor | None, out_channels: int, transposed: bool) -> None:
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_channels):
        kind = "transposed=1, weight" if transposed else "weight"
        raise RuntimeError(
            f"Given {kind} of size {list(weight.shape)}, expected bias to be 1-dimensional with {out_channels} "
            f"elements, but got bias of size {list(bias.shape)} instead"
        )


def _check_groups(weight: Tensor, groups: int) -> None:
    if weight.shape[0] % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but got weight "
            f"of size [{list(weight.shape)}] instead"
        )


def _conv_padding(padding: Any, weight: Tensor, stride: tuple, dilation: tuple, dims: int) -> list[tuple[int, int]]:
    """Per spatial dim (before, after): 'valid' is none, 'same' puts the odd extra after, as PyTorch."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * dims
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
        return [(t // 2, t - t // 2) for t in totals]
    pads = _ntuple(padding, dims, "padding")
    if any(p < 0 for p in pads):
        raise RuntimeError("negative padding is not supported")
    return [(p, p) for p in pads]


def _check_conv(input: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple, pads: list, dilation: tuple,
                groups: int, dims: int) -> None:  # fmt: skip
    _check_common(input, weight, bias, stride, dilation, groups, dims)
    _check_groups(weight, groups)
    channels = input.shape[-dims - 1]
    if channels != weight.shape[1] * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(input.shape)} to "
            f"have {weight.shape[1] * groups} channels, but got {channels} channels instead"
        )
    _check_bias(weight, bias, weight.shape[0], False)
    padded = [n + a + b for n, (a, b) in zip(input.shape[-dims:], pads)]
    kernel = [d * (k - 1) + 1 for d, k in zip(dilation, weight.shape[2:])]
    if any(k > p for k, p in zip(kernel, padded)):
        raise RuntimeError(
            f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel size: "
            f"({' x '.join(map(str, kernel))}). Kernel size can't be greater than actual input size"
        )


# ---- public functions --------------------------------------------------------------------------------
def _conv(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any, dilation: Any,
          groups: int, dims: int) -> Tensor:  # fmt: skip
    stride, dilation = _ntuple(stride, dims, "stride"), _ntuple(dilation, dims, "dilation")
    batched = _check_input(input, dims, f"conv{dims}d")
    pads = _conv_padding(padding, weight, stride, dilation, dims)
    _check_conv(input, weight, bias, stride, pads, dilation, groups, dims)
    x = input if batched else input.unsqueeze(0)
    if dims == 1:  # (N, C, L) -> (N, C, 1, L)
        out = _conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, *stride), (0, 0, *pads[0]), (1, *dilation),
                      groups).squeeze(2)  # fmt: skip
    else:
        out = _conv2d(x, weight, bias, stride, _flat(pads), dilation, groups)
    return out if batched else out.squeeze(0)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """1-d cross-correlation of input (N, C, L) or (C, L) with weight (out_channels, C / groups, k)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:  # fmt: skip
    """2-d cross-correlation of input (N, C, H, W) or (C, H, W) with weight (out_channels, C / groups, kH, kW)."""
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


def transposed_output_size(size: Sequence[int], kernel: Sequence[int], stride: tuple, padding: tuple,
                           output_padding: tuple, dilation: tuple) -> tuple[int, ...]:  # fmt: skip
    """(H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 per spatial dim."""
    return tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1
                 for n, k, s, p, op, d in zip(size, kernel, stride, padding, output_padding, dilation))  # fmt: skip


def _conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Any, padding: Any,
                    output_padding: Any, groups: int, dilation: Any, dims: int) -> Tensor:  # fmt: skip
    name = f"conv_transpose{dims}d"
    if isinstance(padding, str):
        raise TypeError(f"{name}(): argument 'padding' must be tuple of ints, not str")
    stride, dilation = _ntuple(stride, dims, "stride"), _ntuple(dilation, dims, "dilation")
    pads, out_pad = _ntuple(padding, dims, "padding"), _ntuple(output_padding, dims, "output_padding")
    batched = _check_input(input, dims, name)
    _check_transposed(input, weight, bias, stride, pads, out_pad, dilation, groups, dims)
    size = transposed_output_size(input.shape[-dims:], weight.shape[2:], stride, pads, out_pad, dilation)
    if any(n <= 0 for n in size):
        raise RuntimeError(f"Given input size per channel: {list(input.shape[-dims:])}. Calculated output size "
                           f"per channel: {list(size)}. Output size is too small")  # fmt: skip
    x = input if batched else input.unsqueeze(0)
    if dims == 1:  # (N, C, L) -> (N, C, 1, L)
        out = _conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, *size), (1, *stride),
                                (0, 0, pads[0], pads[0]), (1, *dilation), groups).squeeze(2)  # fmt: skip
    else:
        out = _conv_transpose2d(x, weight, bias, size, stride, _flat([(p, p) for p in pads]), dilation, groups)
    return out if batched else out.squeeze(0)


def _check_transposed(input: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple, pads: tuple,
                      out_pad: tuple, dilation: tuple, groups: int, dims: int) -> None:  # fmt: skip
    _check_common(input, weight, bias, stride, dilation, groups, dims)
    if any(p < 0 for p in pads):
        raise RuntimeError("negative padding is not supported")
    if any(op >= s and op >= d for op, s, d in zip(out_pad, stride, dilation)):
        names = ("height", "width") if dims == 2 else ("",)
        parts = [f"{what}_{n}: {v}".replace("_:", ":") for what, vals in
                 (("output_padding", out_pad), ("stride", stride), ("dilation", dilation))
                 for n, v in zip(names, vals)]  # fmt: skip
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got {' '.join(parts)}")
    _check_groups(weight, groups)
    channels = input.shape[-dims - 1]
    if channels != weight.shape[0]:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(input.shape)} to have "
            f"{weight.shape[0]} channels, but got {channels} channels instead"
        )
    _check_bias(weight, bias, weight.shape[1] * groups, True)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """1-d transposed convolution of (N, C_in, L) with weight (C_in, C_out / groups, k)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """2-d transposed convolution of (N, C_in, H, W) with weight (C_in, C_out / groups, kH, kW)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2)


def unfold(input: Tensor, kernel_size: IntOrTuple, dilation: IntOrTuple = 1, padding: IntOrTuple = 0,
           stride: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """Sliding local blocks as columns: (N, C, H, W) -> (N, C * kH * kW, L)."""
    if input.ndim not in (3, 4):
        raise RuntimeError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    kernel, dil = _ntuple(kernel_size, 2, "kernel_size"), _ntuple(dilation, 2, "dilation")
    pad, st = _ntuple(padding, 2, "padding"), _ntuple(stride, 2, "stride")
    _check_blocks(kernel, dil, pad, st)
    x = input if input.ndim == 4 else input.unsqueeze(0)
    blocks = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, d, p, s in zip(x.shape[2:], kernel, dil, pad, st)]
    if any(b <= 0 for b in blocks):
        raise RuntimeError(f"Given input with spatial size {list(x.shape[2:])}, kernel_size={kernel}, dilation={dil}, "
                           f"padding={pad}, calculated shape of the array of sliding blocks as {blocks}, but its "
                           "components must be at least one.")  # fmt: skip
    kw = {"kernel": kernel, "stride": st, "padding": (pad[0], pad[0], pad[1], pad[1]), "dilation": dil}
    out = Unfold.apply(x, **kw) if _records(x) else _make(x._ops.unfold(x._data, *kw.values()), x._dtype,
                                                          x._device, x._ops)  # fmt: skip
    return out if input.ndim == 4 else out.squeeze(0)


def fold(input: Tensor, output_size: IntOrTuple, kernel_size: IntOrTuple, dilation: IntOrTuple = 1,
         padding: IntOrTuple = 0, stride: IntOrTuple = 1) -> Tensor:  # fmt: skip
    """Sums sliding local blocks back into planes: (N, C * kH * kW, L) -> (N, C, *output_size)."""
    if input.ndim not in (2, 3):
        raise RuntimeError("Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and non-zero "
                           f"dimensions for input, but got: {list(input.shape)}")  # fmt: skip
    size, kernel = _ntuple(output_size, 2, "output_size"), _ntuple(kernel_size, 2, "kernel_size")
    dil, pad, st = _ntuple(dilation, 2, "dilation"), _ntuple(padding, 2, "padding"), _ntuple(stride, 2, "stride")
    _check_blocks(kernel, dil, pad, st)
    x = input if input.ndim == 3 else input.unsqueeze(0)
    if x.shape[1] % (kernel[0] * kernel[1]):
        raise RuntimeError("Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size={kernel}.")  # fmt: skip
    blocks = [(n + 2 * p - d * (k - 1) - 1) // s + 1 for n, k, d, p, s in zip(size, kernel, dil, pad, st)]
    if blocks[0] * blocks[1] != x.shape[2] or min(blocks) <= 0:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={kernel}, dilation={dil}, padding={pad}, stride={st}, expected "
            f"size of input's dimension 2 to match the calculated number of sliding blocks {blocks[0]} * "
            f"{blocks[1]} = {blocks[0] * blocks[1]}, but got input.size(2)={x.shape[2]}."
        )
    kw = {"size": size, "kernel": kernel, "stride": st, "padding": (pad[0], pad[0], pad[1], pad[1]), "dilation": dil}
    out = Fold.apply(x, **kw) if _records(x) else _make(x._ops.fold(x._data, *kw.values()), x._dtype, x._device,
                                                        x._ops)  # fmt: skip
    return out if input.ndim == 3 else out.squeeze(0)


def _check_blocks(kernel: tuple, dilation: tuple, padding: tuple, stride: tuple) -> None:
    for name, vals, low in (("kernel", kernel, 1), ("dilation", dilation, 1), ("padding", padding, 0),
                            ("stride", stride, 1)):  # fmt: skip
        if any(v < low for v in vals):
            raise RuntimeError(f"{name} should be {'non-negative' if low == 0 else 'greater than zero'}, but got "
                               f"{name}={vals}")  # fmt: skip
