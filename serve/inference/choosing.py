"""The base of a plan's product layers (planned.py): the kernel for each input shape chosen by timing, and the marks
that let a `Skip` pass a fused layer's output through.

A product layer times every kernel that can run it (serve.inference.kernels) the first time it sees an input shape
and layout, checks each against the reference kernel (the first: numpy, eager's own code) and keeps the fastest
that agrees: per-layer algorithm choice as `cudnn.benchmark` makes it, on the shapes the model really sees.

Decisions, and why:
- Agreement is relative to the output's largest magnitude: RTOL for float32 kernels, BF16_RTOL for bf16 products,
  INT8_RTOL for int8 ones; a kernel that fails or disagrees is logged and never chosen.
- Rounds go over all the kernels (so a burst of other load hits them alike), the best of each counts; after the
  first round only contenders are timed again, and a big layer stops sooner (_CONTENDER, _BIG_S, _BIG_REPS).
- A timed choice is kept in the kernel-choice cache (serve.inference.tuning) under the layer's signature; past the
  plan's warm-up deadline (tuning.TuningClock), or with `tune=False`, a layer takes its preferred kernel untimed.
- Past MAX_SHAPES shapes a layer stops timing and remembering: a client sending ever new shapes costs no memory.
- This file holds the machinery that every kind of product layer shares; planned.py holds the layers themselves
  (the convolution, the linear layer, a group of linear layers, Skip) and what is particular to each.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, ClassVar

import numpy as np

from serve.backend import cpu_nn
from serve.inference import arena, kernels, residual, tuning
from serve.inference.epilogue import activation_name, apply_activation, wrap
from serve.nn.module import Module
from serve.tensor import dtypes, versions
from serve.tensor.grad_mode import state as grad_state
from serve.tensor.tensor import Tensor

__all__ = ["BF16_RTOL", "INT8_PLAN_RTOL", "INT8_RTOL", "MAX_SHAPES", "RTOL", "agrees"]

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
        return repr(tuple(parts + self._signature_extra()))

    def _signature_extra(self) -> list[Any]:
        """What else the kind of layer makes the choice depend on (a convolution's geometry)."""
        return []

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
