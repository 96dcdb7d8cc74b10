"""`F.linear` and `F.bilinear`.

`linear` is the hottest operation of every model, so it is one primitive whose forward is one BLAS call
with the bias added in place (`ops.linear`), and under no_grad it skips `Primitive.apply` altogether.
Shape and dtype problems are diagnosed only after the backend refuses, so the fast path checks nothing twice.
"""

from __future__ import annotations

import math

from serve.tensor.function import Primitive, unbroadcast
from serve.tensor.grad_mode import state
from serve.tensor.linalg import einsum, matmul
from serve.tensor.tensor import Tensor, _make


class Linear(Primitive):
    """x @ w.T (+ b) for a 2-D weight (out_features, in_features); x is (*, in_features)."""

    _node_name = "LinearBackward0"

    @staticmethod
    def forward(ctx, ops, x, w, b=None):
        return ops.linear(x, w, b)

    @staticmethod
    def backward(ctx, g):
        need = ctx.needs_input_grad
        out_features, in_features = ctx.input_shapes[1]
        g2 = g.reshape(-1, out_features)  # (N, out)
        gx = gw = gb = None
        if need[0]:
            gx = (g2 @ ctx.input(1)).reshape(ctx.input_shapes[0])  # (N, out) @ (out, in) -> (*, in)
        if need[1]:
            gw = g2.mT @ ctx.input(0).reshape(-1, in_features)  # (out, N) @ (N, in) -> (out, in)
        if len(need) == 3 and need[2]:
            gb = unbroadcast(g, ctx.input_shapes[2])
        return (gx, gw) if len(need) == 2 else (gx, gw, gb)


def _check_linear(input: Tensor, weight: Tensor, bias: Tensor | None) -> None:
    """Raise PyTorch's RuntimeError for arguments that linear cannot combine."""
    if input.ndim == 0 or weight.ndim == 0:
        raise RuntimeError(
            f"both arguments to linear need to be at least 1D, but they are {input.ndim}D and {weight.ndim}D"
        )
    if input.dtype is not weight.dtype or (bias is not None and bias.dtype is not input.dtype):
        other = weight.dtype if input.dtype is not weight.dtype else bias.dtype  # type: ignore[union-attr]
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {input.dtype} != {other}")
    if weight.ndim > 2:
        raise RuntimeError(f"linear(): weight must be 1-D or 2-D, got a {weight.ndim}-D tensor")
    in_features = weight.shape[-1]
    if input.shape[-1] != in_features:
        rows = math.prod(input.shape[:-1])
        w = f"{in_features}x{weight.shape[0]}" if weight.ndim == 2 else f"{in_features}x1"
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and {w})")
    if bias is not None:
        out_shape = tuple(input.shape[:-1]) + tuple(weight.shape[:-1])
        if not _broadcasts_to(tuple(bias.shape), out_shape):
            raise RuntimeError(
                f"linear(): bias of shape {list(bias.shape)} does not broadcast to the output shape {list(out_shape)}"
            )


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = input @ weight.T + bias, weight (out_features, in_features), input (*, in_features)."""
    if state.enabled and (input._requires_grad or weight._requires_grad or (bias is not None and bias._requires_grad)):
        _check_linear(input, weight, bias)
        if weight.ndim == 1:
            return _vector_weight(input, weight, bias)
        return Linear.apply(input, weight) if bias is None else Linear.apply(input, weight, bias)
    same_dtype = input._dtype is weight._dtype and (bias is None or bias._dtype is input._dtype)
    if same_dtype and weight._data.ndim == 2 and input._data.ndim:
        try:
            out = input._ops.linear(input._data, weight._data, None if bias is None else bias._data)
        except ValueError:
            _check_linear(input, weight, bias)
            raise
        return _make(out, input._dtype, input._device, input._ops)
    _check_linear(input, weight, bias)
    return _vector_weight(input, weight, bias)


def _vector_weight(input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """PyTorch allows a 1-D weight (in_features,): the output drops the feature dim."""
    out = matmul(input, weight)
    return out if bias is None else out + bias


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., o] = input1[..., i] weight[o, i, j] input2[..., j] + bias[o]."""
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for d in range(input1.ndim - 1):
        if input1.shape[d] != input2.shape[d]:
            raise RuntimeError(
                f"bilinear(): input batch dimensions do not match at dim {d}: got {input1.shape[d]} and "
                f"{input2.shape[d]}"
            )
    if weight.ndim != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-D (out, in1, in2), got a {weight.ndim}-D tensor")
    for k, x in ((1, input1), (2, input2)):
        if x.shape[-1] != weight.shape[k]:
            raise RuntimeError(
                f"bilinear(): input{k} size does not match weight size: got {x.shape[-1]} but expected "
                f"{weight.shape[k]}"
            )
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        got = bias.shape[0] if bias.ndim else bias.numel()
        raise RuntimeError(
            f"bilinear(): bias size does not match weight size: got {got} but expected {weight.shape[0]}"
        )
    out = einsum("...i,oij,...j->...o", input1, weight, input2)  # (*, out)
    return out if bias is None else out + bias
