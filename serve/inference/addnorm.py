"""A linear layer's residual add run in its GEMM's epilogue, and the LayerNorm after that add in the same pass.

Transformers end each sublayer in `LayerNorm(x + dropout(dense(h)))` (post-LN: BERT, nn.TransformerEncoderLayer)
or `x = x + proj(...)` followed by the next block's LayerNorm (pre-LN: GPT). The add is the model's own Python,
which the plan runs as written, so the linear layer cannot be handed `x` up front. Where the capture saw the
layer's output always go next into an add with another tensor, the layer returns a `Pending` tensor instead, made
at first use:

- `out + t` / `t + out` (out of place): a new Pending *sum*, still not computed, holding the product's input and t;
- `out += t`: the product runs now with t in its epilogue (the version bumps, as any in-place write);
- anything else reads it (its values, its shape, another operation): the product runs plainly.

A Pending sum is likewise made at first use: by a `PlannedLayerNorm` (below) as one pass per lane over its rows
(the GEMM with the residual in its epilogue, then LayerNorm on those rows while they are in cache), or by anything
else as the GEMM with the residual added. Either way the values are what the unfused code computes. When the capture
saw that only the LayerNorm reads the sum (post-LN), the norm is written over the sum's rows and the sum stays
pending: a later reader the capture could not see recomputes it (the product's input and t are checked unchanged,
else the call fails and the plan falls back to eager). Where the sum is also read elsewhere (pre-LN: the next
residual), it is kept and the norm goes to its own buffer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from serve import nn
from serve.backend import cpu_i8, cpu_threads
from serve.inference import kernels
from serve.inference.deferred import Deferred, deferred_like
from serve.inference.epilogue import wrap
from serve.nn.module import Module
from serve.tensor import dtypes, versions
from serve.tensor.grad_mode import state as grad_state
from serve.tensor.tensor import Tensor

if TYPE_CHECKING:
    from serve.inference.planned import PlannedLinear

__all__ = ["Pending", "PlannedLayerNorm", "pending_linear", "plannable_norm"]


def _spans(rows: int, flops_per_row: int) -> list[tuple[int, int]]:
    if rows * flops_per_row < (1 << 22):  # under ~4 MFLOP one lane is quicker than the hand-off
        return [(0, rows)]
    return cpu_threads.spans(rows, grain=12)


def _gemm(layer: PlannedLinear, kernel: str, x2: np.ndarray, res: np.ndarray | None, out: np.ndarray,
          after: Any = None) -> None:  # fmt: skip
    """out = x2 @ W + bias (+ res), split by rows over the lanes; `after(r0, r1)` runs on each lane's rows next."""
    dtype = kernels.packing(kernel) or "float32"
    packed = layer.packed(dtype)
    gemm = cpu_i8.gemm if dtype == "int8" else kernels.native().gemm

    def part(r0: int, r1: int) -> None:
        gemm(x2, packed, bias=layer.bias, residual=res, out=out, rows=(r0, r1))
        if after is not None:
            after(r0, r1)

    cpu_threads.parallel(part, _spans(x2.shape[0], 2 * layer.in_features * layer.out_features))


class Pending(Deferred):  # type: ignore[misc]
    """See the module docstring: a linear layer's output (`_res` None) or its sum with `_res`, made at first use."""

    __slots__ = ("_kernel", "_res", "_rv", "_shape", "_x2", "_xv")
    _layer: PlannedLinear | None
    _x2: np.ndarray
    _res: np.ndarray | None
    _shape: tuple[int, ...]
    _kernel: str
    _xv: int
    _rv: int

    def _make(self) -> np.ndarray:
        out = np.empty((self._x2.shape[0], self._shape[-1]), np.float32)
        self._run(out)
        return out.reshape(self._shape)

    def _run(self, out: np.ndarray, after: Any = None) -> None:
        """The product (with the residual) into out (M, N), checking its operands are as they were."""
        layer = self._layer
        assert layer is not None
        moved = self._res is not None and versions.version(self._res) != self._rv
        if moved or versions.version(self._x2) != self._xv:
            raise RuntimeError("a deferred residual add's operand was written in place before the sum was read")
        _gemm(layer, self._kernel, self._x2, self._res, out, after)

    def _plus(self, other: Tensor) -> Pending:
        """This pending product + other, as a pending sum."""
        res = other._data.reshape(self._x2.shape[0], -1)
        if not res.flags.c_contiguous:
            res = np.ascontiguousarray(res)
        t = deferred_like(Pending, other)
        t._layer, t._x2, t._res, t._shape, t._kernel = self._layer, self._x2, res, self._shape, self._kernel
        t._xv, t._rv = self._xv, versions.version(res)
        return t

    def _fuses(self, other: Any) -> bool:
        """Whether self is a pending product that can take `other` as its residual."""
        return (self._layer is not None and self._res is None and isinstance(other, Tensor) and other is not self
                and other._dtype is dtypes.float32 and other._device.type == "cpu" and not other._requires_grad
                and tuple(other._data.shape) == self._shape)  # fmt: skip

    def __add__(self, other: Any) -> Tensor:
        if self._fuses(other):
            return self._plus(other)
        if isinstance(other, Pending) and other._fuses(self):  # a pending sum + a pending product
            return other._plus(self)
        return Tensor.__add__(self, other)

    def __radd__(self, other: Any) -> Tensor:
        if self._fuses(other):  # addition of two floats commutes exactly
            return self._plus(other)
        return Tensor.__radd__(self, other)

    def __iadd__(self, other: Any) -> Tensor:
        if not self._fuses(other):
            return Tensor.__iadd__(self, other)
        res = other._data.reshape(self._x2.shape[0], -1)
        self._res, self._rv = (res if res.flags.c_contiguous else np.ascontiguousarray(res)), versions.version(res)
        data = self._data  # the product with the residual in its epilogue
        self._res = None
        versions.bump(data)
        return self

    def normalized(self, norm: PlannedLayerNorm) -> np.ndarray:
        """norm(self) for a pending sum, in one pass per lane: the GEMM with the residual, then LayerNorm."""
        m, n = self._x2.shape[0], self._shape[-1]
        nat = kernels.native()
        y = np.empty((m, n), np.float32)
        if norm.in_place:  # only the norm reads the sum (as captured): written over it; a late reader recomputes
            self._run(y, lambda r0, r1: nat.layer_norm(y, norm.w, norm.b, norm.eps, out=y, rows=(r0, r1)))
        else:
            s = np.empty((m, n), np.float32)
            self._run(s, lambda r0, r1: nat.layer_norm(s, norm.w, norm.b, norm.eps, out=y, rows=(r0, r1)))
            self._layer = None
            self._data = s.reshape(self._shape)
        return y.reshape(self._shape)


def pending_linear(layer: PlannedLinear, x: Tensor, x2: np.ndarray, kernel: str) -> Pending:
    """`layer` on x (as x2, its rows), not computed yet; `kernel` (a native one) says which packed weight."""
    t: Pending = deferred_like(Pending, x)
    t._layer, t._x2, t._res, t._kernel = layer, x2, None, kernel
    t._shape = tuple(x.shape[:-1]) + (layer.out_features,)
    t._xv, t._rv = versions.version(x2), 0
    return t


class PlannedLayerNorm(Module):
    """nn.LayerNorm over the last dim, float32, on the native kernel: a pending sum normalized in the same pass as its
    product; anything else the plan cannot run goes to the original module."""

    def __init__(self, original: Module) -> None:
        super().__init__()
        self.original = original
        self.eps = float(original.eps)
        self.n = int(original.normalized_shape[-1])
        self.w = None if original.weight is None else np.ascontiguousarray(original.weight._data)
        self.b = None if original.bias is None else np.ascontiguousarray(original.bias._data)
        self.in_place = False  # only this norm reads the sums it gets (the capture's finding): write over them

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        nat = kernels.native()
        if (args or kwargs or nat is None or not isinstance(x, Tensor) or x._dtype is not dtypes.float32
                or x._device.type != "cpu" or (grad_state.enabled and x._requires_grad)):  # fmt: skip
            return self.original(x, *args, **kwargs)
        if isinstance(x, Pending) and x.is_pending() and x._res is not None:
            return wrap(x.normalized(self), x)
        data = x._data
        if data.ndim < 1 or data.shape[-1] != self.n or not data.flags.c_contiguous or not data.size:
            return self.original(x)
        out = np.empty(data.shape, np.float32)
        rows = data.size // self.n
        cpu_threads.parallel(lambda r0, r1: nat.layer_norm(data, self.w, self.b, self.eps, out=out, rows=(r0, r1)),
                             _spans(rows, 8 * self.n))  # fmt: skip
        return wrap(out, x)

    def extra_repr(self) -> str:
        return f"{self.n}, eps={self.eps}, in_place={self.in_place}"


def plannable_norm(module: Module) -> bool:
    """A LayerNorm the native kernel computes exactly: over the last dim only, float32 parameters (or none)."""
    if type(module) is not nn.LayerNorm or len(module.normalized_shape) != 1:
        return False
    return all(p is None or p._dtype is dtypes.float32 for p in (module.weight, module.bias))
