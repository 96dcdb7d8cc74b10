"""The layers of a plan: a convolution or linear layer with its batch norm folded in and its activation fused,
a group of linear layers that share an input run as one product, and `Skip`, which stands where the folded
modules were.

`PlannedConv2d`/`PlannedLinear` choose their kernel per input shape by timing (the machinery they share, with the
tolerances, is serve.inference.choosing); this file holds what is particular to each kind: folding the batch
norm, packing the weight, the deferred residual add, and what an unfused kernel leaves for the code after it. A
fused layer marks each tensor it returns (until that tensor is freed); the `Skip` standing for its batch norm or
activation passes such a tensor through when it is still unchanged (same storage version), and runs the original
module on anything else, so a module shared between call sites (ResNet's one `relu`) is skipped only where it was
fused, whatever order the calls come in.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

import serve
from serve import nn
from serve.backend import cpu_i8
from serve.inference import addnorm, kernels, residual
from serve.inference.choosing import _Fused
from serve.inference.epilogue import apply_activation, wrap
from serve.nn import functional as F
from serve.nn.module import Module
from serve.tensor import versions
from serve.tensor.tensor import Tensor

__all__ = ["LinearGroup", "PlannedConv2d", "PlannedLinear", "Skip", "fold_batch_norm"]


def fold_batch_norm(weight: np.ndarray, bias: np.ndarray | None, bn: Module) -> tuple[np.ndarray, np.ndarray]:
    """The weight and bias of `layer` followed by the eval-mode batch norm `bn`, in one layer (float64 math)."""
    var = bn.running_var._data.astype(np.float64)
    scale = 1.0 / np.sqrt(var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight._data.astype(np.float64)
    shift = -bn.running_mean._data.astype(np.float64) * scale
    if bn.bias is not None:
        shift = shift + bn.bias._data.astype(np.float64)
    if bias is not None:
        shift = shift + bias.astype(np.float64) * scale
    w = weight.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    return w.astype(weight.dtype), shift.astype(weight.dtype)


class PlannedConv2d(_Fused):
    """Conv2d (+ BatchNorm2d folded) (+ activation fused), zero padding."""

    KERNELS = kernels.CONV_KERNELS

    def __init__(self, conv: nn.Conv2d, bn: Module | None, act_module: Module | None) -> None:
        w = conv.weight._data
        b = None if conv.bias is None else conv.bias._data
        if bn is not None:
            w, b = fold_batch_norm(w, b, bn)
        super().__init__(w, None if b is None else np.ascontiguousarray(b), act_module)
        pads = F.conv._conv_padding(conv.padding, conv.weight, tuple(conv.stride), tuple(conv.dilation), 2)
        self.padding = (pads[0][0], pads[0][1], pads[1][0], pads[1][1])  # (top, bottom, left, right)
        self.stride, self.dilation = tuple(conv.stride), tuple(conv.dilation)
        self.kernel = tuple(conv.kernel_size)
        self.groups: int = conv.groups
        self.out_channels: int = conv.out_channels
        self.folded = bn is not None
        self._w_t = serve.from_numpy(self.weight)
        self._b_t = None if self.bias is None else serve.from_numpy(self.bias)
        self.residual_add = False  # its output takes `+= t` next: return it pending (serve.inference.residual)
        self.act_after_add: str | None = None  # the activation that consumed that sum, fused with the add

    def _signature_extra(self) -> list[Any]:
        return [self.kernel, self.stride, self.padding, self.dilation, self.groups]

    def is_pointwise(self) -> bool:
        return (self.groups == 1 and self.kernel == (1, 1) and self.stride == (1, 1)
                and self.padding == (0, 0, 0, 0))  # fmt: skip

    def is_depthwise(self) -> bool:
        w = self.weight
        return self.groups > 1 and self.groups == self.out_channels == w.shape[0] and w.shape[1] == 1

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        t, b, l, r = self.padding
        return (h + t + b - dh * (kh - 1) - 1) // sh + 1, (w + l + r - dw * (kw - 1) - 1) // sw + 1

    def packed(self, dtype: str = "float32") -> Any:
        """The weight packed for the native kernels: dtype "float32" or "bfloat16", or "winograd" / "winograd4"
        (transformed for F(2x2, 3x3) / F(4x4, 3x3))."""
        if dtype not in self._packed:
            nat = kernels.native()
            self._packed[dtype] = (nat.pack_winograd_weight(self.weight, 4 if dtype == "winograd4" else 2)
                                   if dtype.startswith("winograd")
                                   else nat.pack_conv_weight(self.weight, dtype=dtype))  # fmt: skip
        return self._packed[dtype]

    def forward(self, x: Any) -> Tensor:
        if not (self._plannable(x) and x.ndim == 4 and x.shape[1] == self.weight.shape[1] * self.groups):
            t, b, l, r = self.padding
            y = F.conv2d(x, self._w_t, self._b_t, self.stride, 0, self.dilation, self.groups) if (t, b, l, r) == (
                0, 0, 0, 0) else F.conv2d(F.pad(x, (l, r, t, b)), self._w_t, self._b_t, self.stride, 0, self.dilation,
                                          self.groups)  # fmt: skip
            return apply_activation(y, self.act_module)
        data = x._data
        if self.residual_add and self.choices.get((data.shape, data.strides), "").startswith("native_nhwc"):
            oh, ow = self.out_size(data.shape[2], data.shape[3])
            y = residual.pending(self, x, (data.shape[0], self.out_channels, oh, ow))
        else:
            y = self._run(x, data)
        if self.skipped:
            self._mark(y)
        return y

    def _unfused_after(self, name: str, out: np.ndarray) -> None:
        """Only the native kernels take the residual add (and its activation) into their epilogue; with any other
        kernel the model's `out += identity` is one more pass over the output. Timing the same pass here lets a
        kernel that is a little faster alone lose to the fused one, as it does in the model."""
        if self.residual_add and not name.startswith("native_nhwc"):
            np.add(out, out, out=out)
            if self.act_after_add is not None:
                np.maximum(out, 0.0, out=out)

    # -- the deferred residual add (serve.inference.residual) --------------------------------------------------
    def compute(self, x: Tensor, res: np.ndarray | None) -> np.ndarray:
        """This layer on x now, with `res` (the in-place add's operand) added in the epilogue when given."""
        data = x._data
        name = self.choices[(data.shape, data.strides)]
        act = None if res is None else self.act_after_add or "none"
        if name.startswith("native_nhwc_winograd"):
            return kernels.conv_winograd(self, data, residual=res, act=act, m=4 if name.endswith("4") else 2)
        dtype = "bfloat16" if name.endswith("_bf16") else "float32"
        return kernels.conv_native(self, data, dtype, residual=res, act=act)

    def after_residual(self, y: Tensor) -> None:
        """The add (and the activation after it) is in y: let the Skip of that activation pass y through."""
        if self.act_after_add is not None:
            self._mark(y)

    def extra_repr(self) -> str:
        return (f"{self.weight.shape[1] * self.groups}, {self.out_channels}, kernel_size={self.kernel}, "
                f"stride={self.stride}, groups={self.groups}, bn_folded={self.folded}, act={self.act}")  # fmt: skip


class PlannedLinear(_Fused):
    """Linear (+ BatchNorm1d folded) (+ activation fused) on (..., in_features)."""

    KERNELS = kernels.LINEAR_KERNELS

    def __init__(self, linear: nn.Linear | None, bn: Module | None, act_module: Module | None,
                 arrays: tuple[np.ndarray, np.ndarray | None] | None = None) -> None:  # fmt: skip
        if linear is not None:
            w = linear.weight._data
            b = None if linear.bias is None else linear.bias._data
        else:  # a layer made from arrays (the shared product of a group)
            assert arrays is not None
            w, b = arrays
        if bn is not None:
            w, b = fold_batch_norm(w, b, bn)
        super().__init__(w, None if b is None else np.ascontiguousarray(b), act_module)
        self.out_features, self.in_features = self.weight.shape
        self.folded = bn is not None
        self.group: LinearGroup | None = None
        self.residual_add = False  # its output goes next into `+ t`: return it pending (serve.inference.addnorm)
        self._w_t = serve.from_numpy(self.weight)
        self._b_t = None if self.bias is None else serve.from_numpy(self.bias)

    def packed(self, dtype: str = "float32") -> Any:
        if dtype not in self._packed:  # int8: quantised once, here (serve.backend.cpu_i8)
            self._packed[dtype] = (cpu_i8.pack(self.weight_kn()) if dtype == "int8"
                                   else kernels.native().pack_weight(self.weight_kn(), dtype=dtype))  # fmt: skip
        return self._packed[dtype]

    def forward(self, x: Any) -> Tensor:
        data: Any = getattr(x, "_data", None)
        if not (self._plannable(x) and data.ndim >= 1 and data.shape[-1] == self.in_features and data.size):
            return apply_activation(F.linear(x, self._w_t, self._b_t), self.act_module)
        if self.group is not None:
            return self.group.output(self, x)
        x2 = data if data.ndim == 2 else data.reshape(-1, self.in_features)
        if not x2.flags.c_contiguous:
            x2 = np.ascontiguousarray(x2)
        if self.residual_add:
            kernel = self.choices.get((x2.shape, x2.strides), "")
            if kernel.startswith("native"):
                return addnorm.pending_linear(self, x, x2, kernel)
        y = self._run(x, x2)
        if data.ndim != 2:
            y = wrap(y._data.reshape(data.shape[:-1] + (self.out_features,)), x)
        if self.skipped:
            self._mark(y)
        return y

    def _unfused_after(self, name: str, out: np.ndarray) -> None:
        """Only the native GEMM takes the residual add into its epilogue: time the add the others leave undone."""
        if self.residual_add and not name.startswith("native"):
            np.add(out, out, out=out)

    def extra_repr(self) -> str:
        return (f"{self.in_features}, {self.out_features}, bn_folded={self.folded}, act={self.act}, "
                f"residual_add={self.residual_add}")  # fmt: skip


class LinearGroup:
    """Linear layers that always take the same input (attention's query, key and value) as one product.

    The first member called with an input computes every member's output in one GEMM over the concatenated
    weights and keeps them (per thread) with that input; a member called with the same input, unchanged, takes
    its columns; any other input is computed by the member alone."""

    def __init__(self, members: list[PlannedLinear]) -> None:
        weight = np.concatenate([m.weight for m in members])
        bias = None
        if any(m.bias is not None for m in members):
            bias = np.concatenate([m.bias if m.bias is not None else np.zeros(m.out_features, m.weight.dtype)
                                   for m in members])  # fmt: skip
        self.combined = PlannedLinear(None, None, None, arrays=(weight, bias))
        self.combined.keep_float32 = any(m.keep_float32 for m in members)  # the model's first product among them
        self.members = members
        bounds = np.cumsum([0] + [m.out_features for m in members])
        self.columns = {id(m): (int(bounds[i]), int(bounds[i + 1])) for i, m in enumerate(members)}
        self._local = threading.local()

    def output(self, member: PlannedLinear, x: Tensor) -> Tensor:
        kept = getattr(self._local, "kept", None)
        if kept is None or kept[0]() is not x or kept[1] != versions.version(x._data):
            y = self.combined(x)._data  # (..., sum of out_features)
            kept = (weakref.ref(x), versions.version(x._data), y)
            self._local.kept = kept
        c0, c1 = self.columns[id(member)]
        out = wrap(kept[2][..., c0:c1], x)
        if member.skipped:
            member._mark(out)
        return out


class Skip(Module):
    """Where a folded batch norm or a fused activation was: the producer's own output passes through."""

    def __init__(self, original: Module, producers: list[_Fused]) -> None:
        super().__init__()
        self.original = original
        object.__setattr__(self, "_producers", producers)  # not children: they sit elsewhere in the tree

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and any(p.produced(x) for p in self._producers):
            return x
        return self.original(x, *args, **kwargs)
