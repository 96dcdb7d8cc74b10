"""`F.max_pool1d/2d`, `F.avg_pool1d/2d`, `F.adaptive_avg_pool1d/2d`, `F.adaptive_max_pool1d/2d`.

The backend reduces over the k*k strided views of the (padded) input. Max pooling records its gradient as a
gather at the argmax indices (`PlaneGather`, whose backward scatters them back); average pooling is a linear
primitive whose adjoint spreads each gradient over its window. Adaptive average pooling is composed from
`mean` / matmul with an averaging matrix, so autograd needs nothing of its own. 1-d forms run the 2-d ones
on (N, C, 1, L).
"""

from __future__ import annotations

from typing import Any

from serve.nn.functional.conv import IntOrTuple
from serve.tensor import dtypes
from serve.tensor.function import Primitive
from serve.tensor.grad_mode import state
from serve.tensor.tensor import Tensor, _make


# ---- primitives --------------------------------------------------------------------------------------
class PlaneGather(Primitive):
    """x (N, C, *plane) read at flat per-plane indices (N, C, *out); the indices get no gradient."""

    _node_name = "MaxPool2DWithIndicesBackward0"

    @staticmethod
    def forward(ctx, ops, x, idx):
        return ops.gather_planes(x, idx)

    @staticmethod
    def backward(ctx, g):
        return PlaneScatter.apply(g, ctx.input(1), plane=tuple(ctx.input_shapes[0][2:])), None


class PlaneScatter(Primitive):
    """zeros (N, C, *plane) with g added at the flat per-plane indices (the adjoint of PlaneGather)."""

    @staticmethod
    def forward(ctx, ops, g, idx, plane):
        return ops.scatter_planes(g, idx, plane)

    @staticmethod
    def backward(ctx, gg):
        return PlaneGather.apply(gg, ctx.input(1)), None


class AvgPool2d(Primitive):
    _node_name = "AvgPool2DBackward0"

    @staticmethod
    def forward(ctx, ops, x, *, kernel, stride, padding, out, count_include_pad, divisor_override):
        return ops.avg_pool2d(x, kernel, stride, padding, out, count_include_pad, divisor_override)

    @staticmethod
    def backward(ctx, g):
        return AvgPool2dAdjoint.apply(g, size=tuple(ctx.input_shapes[0][2:]), **_avg_params(ctx))


class AvgPool2dAdjoint(Primitive):
    @staticmethod
    def forward(ctx, ops, g, *, size, kernel, stride, padding, count_include_pad, divisor_override):
        return ops.avg_pool2d_backward(g, size, kernel, stride, padding, count_include_pad, divisor_override)

    @staticmethod
    def backward(ctx, gg):
        return AvgPool2d.apply(gg, out=tuple(ctx.input_shapes[0][2:]), **_avg_params(ctx))


def _avg_params(ctx: Any) -> dict[str, Any]:
    return {"kernel": ctx.kernel, "stride": ctx.stride, "padding": ctx.padding,
            "count_include_pad": ctx.count_include_pad, "divisor_override": ctx.divisor_override}  # fmt: skip


# ---- arguments ---------------------------------------------------------------------------------------
def _ints(value: Any, n: int, what: str, name: str) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)):
        if len(value) not in (1, n):
            raise RuntimeError(f"{name}: {what} must either be a single int, or a tuple of {n} ints")
        return tuple(int(v) for v in value) * (n // len(value))
    return (int(value),) * n


def _pool_args(name: str, dims: int, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> tuple:
    kernel = _ints(kernel_size, dims, "kernel_size", name)
    no_stride = stride is None or (isinstance(stride, (tuple, list)) and not stride)
    st = kernel if no_stride else _ints(stride, dims, "stride", name)
    pad, dil = _ints(padding, dims, "padding", name), _ints(dilation, dims, "dilation", name)
    if any(k <= 0 for k in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_size={kernel}")
    if 0 in st:
        raise RuntimeError("stride should not be zero")
    if any(s < 0 for s in st):
        raise RuntimeError(f"stride should be greater than zero, but got stride={st}")
    if any(d <= 0 for d in dil):
        raise RuntimeError(f"dilation should be greater than zero, but got dilation={dil}")
    if any(p < 0 for p in pad):
        raise RuntimeError(f"pad must be non-negative, but got pad: {min(pad)}")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got pad={pad}, "
                           f"kernel_size={kernel}")  # fmt: skip
    return kernel, st, pad, dil


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: the last ceil_mode window must start inside the input or left padding."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _planes(input: Tensor, dims: int, name: str) -> tuple[Tensor, bool]:
    """input as (N, C, H, W) (1-d: H = 1) and whether it was batched; RuntimeError for the wrong rank."""
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(f"{name}: Expected {dims + 1}D or {dims + 2}D (batch mode) tensor for input, but got: "
                           f"{list(input.shape)}")  # fmt: skip
    x = input if input.ndim == dims + 2 else input.unsqueeze(0)
    return (x.unsqueeze(2) if dims == 1 else x), input.ndim == dims + 2


def _unplanes(t: Tensor, dims: int, batched: bool) -> Tensor:
    t = t.squeeze(2) if dims == 1 else t
    return t if batched else t.squeeze(0)


def _out_sizes(x: Tensor, kernel: tuple, st: tuple, pad: tuple, dil: tuple, ceil_mode: bool) -> tuple[int, int]:
    out = tuple(_pool_out(n, k, s, p, d, ceil_mode) for n, k, s, p, d in zip(x.shape[2:], kernel, st, pad, dil))
    if min(out) <= 0:
        shape = "x".join(map(str, x.shape[1:]))
        raise RuntimeError(f"Given input size: ({shape}). Calculated output size: ({x.shape[1]}x{out[0]}x{out[1]}). "
                           "Output size is too small")  # fmt: skip
    return out  # type: ignore[return-value]


def _records(x: Tensor) -> bool:
    return state.enabled and x._requires_grad


def _wrap(data: Any, like: Tensor) -> Tensor:
    return _make(data, like._dtype, like._device, like._ops)


def _lift(dims: int, *params: tuple) -> list[tuple]:
    """1-d parameters as 2-d ones over (1, L): kernel/stride/dilation 1 and padding 0 along the added H."""
    return [p if dims == 2 else ((0,) if i == 2 else (1,)) + p for i, p in enumerate(params)]


# ---- max pooling -------------------------------------------------------------------------------------
def _max_pool(input: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
              return_indices: bool, dims: int) -> Any:  # fmt: skip
    name = f"max_pool{dims}d"
    kernel, st, pad, dil = _lift(dims, *_pool_args(name, dims, kernel_size, stride, padding, dilation))
    x, batched = _planes(input, dims, name)
    out = _out_sizes(x, kernel, st, pad, dil, ceil_mode)
    ops = x._ops
    values, idx = ops.max_pool2d(x._data, kernel, st, pad, dil, out, return_indices or _records(x))
    y = PlaneGather.apply(x, _make_index(idx, x)) if _records(x) else _wrap(values, x)
    y = _unplanes(y, dims, batched)
    return (y, _unplanes(_make_index(idx, x), dims, batched)) if return_indices else y


def _make_index(idx: Any, like: Tensor) -> Tensor:
    return _make(idx, dtypes.int64, like._device, like._ops)


def max_pool1d(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               dilation: IntOrTuple = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:  # fmt: skip
    """Max over windows of (N, C, L); with return_indices, also each max's position in L."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1)


def max_pool2d(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               dilation: IntOrTuple = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:  # fmt: skip
    """Max over windows of (N, C, H, W); with return_indices, also each max's flat index h * W + w."""
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2)


def max_pool1d_with_indices(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None,
                            padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
                            return_indices: bool = True) -> Any:  # fmt: skip
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 1)


def max_pool2d_with_indices(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None,
                            padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
                            return_indices: bool = True) -> Any:  # fmt: skip
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, True, 2)


# ---- average pooling ---------------------------------------------------------------------------------
def _avg_pool(input: Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
              divisor_override: int | None, dims: int) -> Tensor:  # fmt: skip
    name = f"avg_pool{dims}d"
    if divisor_override is not None and divisor_override == 0:
        raise RuntimeError("divisor must be not zero")
    kernel, st, pad, _ = _lift(dims, *_pool_args(name, dims, kernel_size, stride, padding, 1))
    x, batched = _planes(input, dims, name)
    kw = {"kernel": kernel, "stride": st, "padding": pad, "out": _out_sizes(x, kernel, st, pad, (1, 1), ceil_mode),
          "count_include_pad": count_include_pad, "divisor_override": divisor_override}  # fmt: skip
    y = AvgPool2d.apply(x, **kw) if _records(x) else _wrap(x._ops.avg_pool2d(x._data, *kw.values()), x)
    return _unplanes(y, dims, batched)


def avg_pool1d(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:  # fmt: skip
    """Mean over windows of (N, C, L)."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1)


def avg_pool2d(input: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None,
               ) -> Tensor:  # fmt: skip
    """Mean over windows of (N, C, H, W), divided by the window's size (padding counted or not) or the override."""
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


# ---- adaptive pooling --------------------------------------------------------------------------------
def _adaptive_args(input: Tensor, output_size: Any, dims: int, name: str) -> tuple[Tensor, bool, tuple[int, ...]]:
    if input.ndim not in (dims + 1, dims + 2):
        raise RuntimeError(f"{name}(): Expected {dims + 1}D or {dims + 2}D tensor, but got: {list(input.shape)}")
    sizes = list(output_size) if isinstance(output_size, (tuple, list)) else [output_size] * dims
    if len(sizes) != dims:
        raise RuntimeError(f"{name}: output_size must be {dims}")
    out = tuple(n if s is None else int(s) for s, n in zip(sizes, input.shape[-dims:]))
    if any(s < 0 for s in out):
        raise RuntimeError(f"{name}: elements of output_size must be greater than or equal to 0 but received {out}")
    for i in range(input.ndim - dims, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(input.shape)} with dimension {i} being empty")  # fmt: skip
    x, batched = _planes(input, dims, name)
    return x, batched, ((1,) + out if dims == 1 else out)


def _adaptive_avg(x: Tensor, out: tuple[int, ...]) -> Tensor:
    n, c, h, w = x.shape
    (oh, ow), ops = out, x._ops
    if out == (1, 1):
        return x.mean((2, 3), keepdim=True)
    if oh and ow and h % oh == 0 and w % ow == 0:  # equal windows: a mean over a reshape
        return x.reshape(n, c, oh, h // oh, ow, w // ow).mean((3, 5))
    rows = _wrap(ops.adaptive_avg_matrix(h, oh, x._data.dtype), x)  # (OH, H)
    cols = _wrap(ops.adaptive_avg_matrix(w, ow, x._data.dtype), x)  # (OW, W)
    return rows @ x @ cols.mT  # (OH, H) @ (N, C, H, W) @ (W, OW) -> (N, C, OH, OW)


def adaptive_avg_pool1d(input: Tensor, output_size: IntOrTuple) -> Tensor:
    """Mean over PyTorch's adaptive windows of (N, C, L), giving `output_size` positions."""
    x, batched, out = _adaptive_args(input, output_size, 1, "adaptive_avg_pool1d")
    return _unplanes(_adaptive_avg(x, out), 1, batched)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Mean over PyTorch's adaptive windows of (N, C, H, W); an output size of None keeps that input size."""
    x, batched, out = _adaptive_args(input, output_size, 2, "adaptive_avg_pool2d")
    return _unplanes(_adaptive_avg(x, out), 2, batched)


def _adaptive_max(input: Tensor, output_size: Any, return_indices: bool, dims: int) -> Any:
    x, batched, out = _adaptive_args(input, output_size, dims, f"adaptive_max_pool{dims}d")
    values, idx = x._ops.adaptive_max_pool2d(x._data, out)
    y = PlaneGather.apply(x, _make_index(idx, x)) if _records(x) else _wrap(values, x)
    y = _unplanes(y, dims, batched)
    return (y, _unplanes(_make_index(idx, x), dims, batched)) if return_indices else y


def adaptive_max_pool1d(input: Tensor, output_size: IntOrTuple, return_indices: bool = False) -> Any:
    """Max over PyTorch's adaptive windows of (N, C, L); with return_indices, also the positions."""
    return _adaptive_max(input, output_size, return_indices, 1)


def adaptive_max_pool2d(input: Tensor, output_size: Any, return_indices: bool = False) -> Any:
    """Max over PyTorch's adaptive windows of (N, C, H, W); with return_indices, also the flat indices."""
    return _adaptive_max(input, output_size, return_indices, 2)
