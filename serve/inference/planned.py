"""The layers of a plan: a convolution or linear layer with its batch norm folded in and its activation fused,
the kernel for each input shape chosen by timing, and `Skip`, which stands where the folded modules were.

`PlannedConv2d`/`PlannedLinear` time every kernel that can run them (serve.inference.kernels) the first time they
see an input shape and layout, check each against the reference kernel (numpy, eager's own code) and keep the
fastest that agrees: per-layer algorithm choice as `cudnn.benchmark` makes it, on the shapes the model really
sees. A fused layer marks each tensor it returns (until that tensor is freed); the `Skip` standing for its batch
norm or activation passes such a tensor through when it is still unchanged (same storage version), and runs the
original module on anything else, so a module shared between call sites (ResNet's one `relu`) is skipped only
where it was fused, whatever order the calls come in.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, ClassVar

import numpy as np

import serve
from serve import nn
from serve.backend import cpu_i8, cpu_nn
from serve.inference import addnorm, arena, kernels, residual, tuning
from serve.inference.epilogue import activation_name, apply_activation, wrap
from serve.nn import functional as F
from serve.nn.module import Module
from serve.tensor import dtypes, versions
from serve.tensor.grad_mode import state as grad_state
from serve.tensor.tensor import Tensor

__all__ = ["LinearGroup", "PlannedConv2d", "PlannedLinear", "Skip", "fold_batch_norm"]

log = logging.getLogger(__name__)
# every live tensor a fused layer returned: id -> (weakref, storage version then, the layer). The entry goes with
# the tensor (the weakref's callback), so an id reused by a later object never matches a stale mark
_MARKS: dict[int, tuple[weakref.ref, int, Any]] = {}
RTOL = 1e-4  # a kernel is kept only when it agrees with the reference this closely (relative to the output's max)
BF16_RTOL = 1e-2  # a bfloat16 product's operands carry 8 bits of mantissa: the 1e-2 on logits
# int8 products (serve.backend.cpu_i8): one layer against float32, max error over largest magnitude (all-MiniLM-L6's
# layers on a padded batch of 8: 0.2-2.5e-2); a whole plan, each output's relative L2 error (its layers' errors
# compound, and a padded position's output, which masked pooling drops, moves most: MiniLM's token embeddings 0.15
# with padding, its sentence embeddings 0.056, a BERT-base-sized random-weight encoder 0.009)
INT8_RTOL = 5e-2
INT8_PLAN_RTOL = 0.25
MAX_SHAPES = 32  # shapes a layer times kernels for; past it, new shapes take its most chosen kernel untimed
_TIME_REPS = 3  # timed rounds per kernel at a new shape; the fastest of each counts
# after the first round only kernels within _CONTENDER of the best are timed again, and a layer whose best takes
# _BIG_S or more stops after _BIG_REPS rounds: at a detector's 800 x 1088 a 3x3 convolution ran 16 times (4 kernels,
# a check and 3 rounds each, 50-250 ms a run), ~9-10 now; noise is small beside such times
_CONTENDER = 1.5
_BIG_S, _BIG_REPS = 0.02, 2


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


def agrees(got: np.ndarray, ref: np.ndarray, rtol: float = RTOL) -> bool:
    """Within rtol of ref's largest magnitude. In float32 when both are (the subtraction's own rounding, 6e-8 of the
    magnitude, is far below any rtol used): converting a detector's 800 x 1088 feature maps to float64 for each
    candidate kernel took 25 s of a 180 s plan on a loaded 2-core machine."""
    if got.shape != ref.shape:
        return False
    if ref.size == 0:
        return True
    scale = max(float(ref.max()), -float(ref.min()))
    diff = np.subtract(got, ref, dtype=np.result_type(got.dtype, ref.dtype, np.float32))
    return bool(np.abs(diff, out=diff).max() <= rtol * scale + 1e-6)


class _Fused(Module):
    """A product layer with a folded batch norm and a fused activation, its kernel chosen per input layout."""

    KERNELS: ClassVar[dict[str, Any]] = {}

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, act_module: Module | None) -> None:
        super().__init__()
        # a 2-D weight that is the transposed view of a C-ordered (in, out) array (transformers' Conv1D,
        # serve.inference.lookalikes) stays that view: weight_kn() is then the model's array itself, no copy
        kept = weight.ndim == 2 and weight.T.flags.c_contiguous
        self.weight, self.bias = (weight if kept else np.ascontiguousarray(weight)), bias
        self.act_module = act_module  # registered as a child, so the plan's repr shows it
        self.act = None if act_module is None else activation_name(act_module)
        self.tune = True  # time the kernels at a new shape (else take the last that applies)
        self.clock = tuning.TuningClock()  # the plan's (OptimizedModule.tune_within): past its deadline, no timing
        self.allowed: set[str] | None = None  # the kernels it may choose among (None: all)
        self.skipped = False  # whether Skips stand for modules folded into it (then its outputs are marked)
        self.keep_float32 = False  # the model's first or last product layer: never bfloat16 products
        self.choices: dict[tuple, str] = {}
        self.timings: dict[tuple, dict[str, float]] = {}
        self._weight_kn: np.ndarray | None = None
        self._packed: dict[str, Any] = {}  # the native kernels' packed weight, per product dtype
        self.product_dtype = "float32"  # "bfloat16": the plan may also choose bf16 products (fp32 accumulation)
        self._lock = threading.Lock()

    # -- what Skip asks -------------------------------------------------------------------------------------
    def _mark(self, y: Tensor) -> None:
        key = id(y)

        def forget(_: Any) -> None:
            _MARKS.pop(key, None)

        version = 0 if _pending(y) else versions.version(y._data)  # a fresh array's version is 0
        _MARKS[key] = (weakref.ref(y, forget), version, self)

    def produced(self, t: Any) -> bool:
        """True when `t` is a tensor this layer returned, unchanged since (a pending one is unchanged)."""
        mark = _MARKS.get(id(t))
        if mark is None or mark[2] is not self or mark[0]() is not t:
            return False
        return _pending(t) or versions.version(t._data) == mark[1]  # type: ignore[union-attr]

    # -- packed weights, made once -------------------------------------------------------------------------
    def weight_kn(self) -> np.ndarray:
        """The weight as the right operand of a product, (K, N). A big weight is a transposed view, no copy (the
        BLAS reads it as eager's `x @ w.T` does, and packing copies it into panels once): a plan must not hold
        the model's weights twice over. A small one (under 1 MiB) is copied once, C-ordered: numpy's tiny
        products take ~3 us longer on a transposed operand."""
        if self._weight_kn is not None:
            return self._weight_kn
        kn = self.weight.reshape(self.weight.shape[0], -1).T
        if kn.nbytes >= 1 << 20:
            return kn
        self._weight_kn = np.ascontiguousarray(kn)
        return self._weight_kn

    # -- running ---------------------------------------------------------------------------------------------
    def _plannable(self, x: Any) -> bool:
        return (isinstance(x, Tensor) and x._dtype is dtypes.float32 and x._device.type == "cpu"
                and not (grad_state.enabled and x._requires_grad))  # fmt: skip

    def _run(self, x: Tensor, data: np.ndarray) -> Tensor:
        name = self.choices.get((data.shape, data.strides))
        if name is None:
            with self._lock:
                key = (data.shape, data.strides)
                name = self.choices.get(key) or self._choose(key, x, data)
        fn, fused, _ = self.KERNELS[name]
        out = fn(self, data)
        if fused or self.act is None:
            return wrap(out, x)
        if self.act == "relu":  # eager's own kernels, in place: no module call on the hot path
            return wrap(cpu_nn.relu_(out), x)
        if self.act == "relu6":
            return wrap(np.clip(out, 0.0, 6.0, out=out), x)
        return apply_activation(wrap(out, x), self.act_module)

    def _candidates(self) -> list[str]:
        names = [name for name, (_, _, applies) in self.KERNELS.items() if applies(self)]
        if self.allowed is not None:  # the reference (first) kernel always stays
            names = names[:1] + [n for n in names[1:] if n in self.allowed]
        return names

    def _choose(self, key: tuple, x: Tensor, data: np.ndarray) -> str:
        names = self._candidates()
        if len(self.choices) >= MAX_SHAPES:  # a client sending ever new shapes: no timing, no memory per shape
            counts = [list(self.choices.values()).count(n) for n in names]
            return names[counts.index(max(counts))]
        if not self.tune:
            self.choices[key] = names[-1]
            return names[-1]
        signature = self.signature(key, names)
        choice = tuning.lookup(signature)  # timed by an earlier process on this machine (serve.inference.tuning)
        if choice not in names and self.clock.over():  # the warm-up's time is spent: preferred, untimed, kept
            choice = names[-1]
        elif choice not in names:
            with arena.bypassed():  # the candidates' outputs live together while timed: a moment serving never has
                times = self._time_candidates(names, x, data)
            choice = min(times, key=times.__getitem__) if times else names[0]
            self.timings[key] = times
            if times:
                tuning.store(signature, choice)
        self.choices[key] = choice
        kept = {kernels.packing(name) for name in self.choices.values()}
        for unused in [k for k in self._packed if k not in kept]:  # the losers' packed weights: memory back
            del self._packed[unused]
        return choice

    def signature(self, key: tuple, names: list[str]) -> str:
        """What the kernel choice at input (shape, strides) `key` depends on, besides the machine: the layer's
        kind and shape, what is fused into it, the product dtype, and the kernels it offers."""
        shape, strides = key
        parts: list[Any] = [type(self).__name__, self.weight.shape, self.bias is not None, self.act,
                            self.residual_add, getattr(self, "act_after_add", None), self.keep_float32,
                            self.product_dtype, tuple(names), shape, strides]  # fmt: skip
        if isinstance(self, PlannedConv2d):
            parts += [self.kernel, self.stride, self.padding, self.dilation, self.groups]
        return repr(tuple(parts))

    def _time_candidates(self, names: list[str], x: Tensor, data: np.ndarray) -> dict[str, float]:
        """Each kernel run once (packing its weight) and checked against the reference (the first); the best time of
        each that agrees, over rounds."""
        ref: np.ndarray | None = None
        usable: list[str] = []
        for name in names:  # the reference kernel comes first; each is run once (packing its weight) and checked
            fn, fused, _ = self.KERNELS[name]
            try:
                out = wrap(fn(self, data), x)
                got = np.asarray((out if fused else apply_activation(out, self.act_module))._data)
            except Exception as e:  # a kernel that fails here is not chosen; the reference always runs
                log.warning("kernel %s failed on %s: %s", name, data.shape, e)
                continue
            if ref is None:
                ref = got.astype(np.float32) if got.dtype == np.float32 else got.astype(np.float64)  # a copy
            elif not agrees(got, ref, INT8_RTOL if name.endswith("_int8") else BF16_RTOL if name.endswith("_bf16")
                            else RTOL):  # fmt: skip
                log.warning("kernel %s disagrees with the reference on %s; not used", name, data.shape)
                continue
            usable.append(name)
        times = {name: float("inf") for name in usable}
        for round_ in range(_TIME_REPS):  # rounds over the kernels, so a burst of other load hits them all alike
            if round_:  # only kernels that can still win are timed again; a big layer's ranking is clear sooner
                best = min(times.values())
                if round_ >= _BIG_REPS and best >= _BIG_S:
                    break
                usable = [name for name in usable if times[name] <= _CONTENDER * best]
            for name in usable:
                fn, fused, _ = self.KERNELS[name]
                start = time.perf_counter()
                out = wrap(fn(self, data), x)
                if not fused:
                    apply_activation(out, self.act_module)
                self._unfused_after(name, out._data)
                times[name] = min(times[name], time.perf_counter() - start)
        return times

    def _unfused_after(self, name: str, out: np.ndarray) -> None:
        """What the code after this layer pays for when kernel `name` leaves it undone (timed with the kernel)."""


def _pending(t: Any) -> bool:
    return isinstance(t, residual.PendingOutput) and t.is_pending()


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
