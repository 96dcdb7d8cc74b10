"""Which dtype a planned attention's two products (q k^T and p v) run in: the fused kernel in float32, or its bf16
variant (serve.backend.cpu_attention, dtype="bfloat16"), chosen per input shape by timing as the product layers'
kernels are (choosing.py).

Decisions, and why:
- Only a plan asked for bfloat16 (`optimize(..., dtype="bfloat16")`, the model-config's `dtype: bfloat16`) offers
  the bf16 kernel; a float32 plan, and eager attention, run the float32 kernel exactly as before and make no
  choice (so describe() has no attention entries there).
- The bf16 kernel is kept only where it agrees with the float32 fused kernel within the plan's bf16 tolerance
  (choosing.BF16_RTOL, 1e-2 of the output's largest magnitude) and was the faster of the best of _TIME_REPS rounds,
  each round timing both kernels, so a burst of other load hits both alike. With AVX512-BF16 the bf16 kernel only
  halves the products' cost (softmax, packing and the rounding of q, k, v and p stay), so at a small L or S float32
  can win; on AMX tiles the products' share falls further.
- Without timing (`tune=False`, or the plan's warm-up deadline passed) the bf16 kernel is taken untimed, as the
  product layers take their preferred kernel.
- A timed choice is kept in the kernel-choice cache (serve.inference.tuning, `SERVE_TUNING_CACHE`) under the same
  key discipline as a product layer's (the machine's CPU, build and threads in the file's name; the shapes, mask
  kind, product dtype and kernels on offer in the signature), so the next process takes it without timing.
- The object answers what precision.layer_precisions asks of a product layer (choices, timings, KERNELS,
  keep_float32, allowed), so describe() lists each attention with the kernel that ran and, for float32, why.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from serve.backend import cpu_attention, cpu_native
from serve.inference import tuning
from serve.inference.choosing import _TIME_REPS, BF16_RTOL, agrees

__all__ = ["BF16", "FP32", "AttentionProducts"]

FP32, BF16 = "native_attention", "native_attention_bf16"


def _has_bf16(_: Any) -> bool:
    return cpu_native.attention_bf16_kernel() is not None


class AttentionProducts:
    """The kernel choice of one planned attention, per (q, k, mask) shape."""

    # name -> (dtype of the products, fused, applies): the shape precision.py reads from a product layer's KERNELS
    KERNELS: ClassVar[dict[str, tuple[str, bool, Any]]] = {FP32: ("float32", True, lambda _: True),
                                                            BF16: ("bfloat16", True, _has_bf16)}  # fmt: skip

    def __init__(self) -> None:
        self.product_dtype = "float32"  # the plan's: "bfloat16" offers the bf16 kernel
        self.tune = True
        self.clock = tuning.TuningClock()
        self.allowed: set[str] | None = None
        self.keep_float32 = False
        self.choices: dict[tuple, str] = {}
        self.timings: dict[tuple, dict[str, float]] = {}
        self._lock = threading.Lock()

    def run(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, is_bool: bool, safe: bool,
            scale: float, out: np.ndarray | None = None) -> np.ndarray | None:  # fmt: skip
        """cpu_attention.attention with the chosen products' dtype; None where the fused kernel does not apply."""
        if self.product_dtype != "bfloat16":
            return cpu_attention.attention(q, k, v, mask, is_bool, safe, scale, out=out)
        key = (q.shape, (k.shape, v.shape, None if mask is None else mask.shape))
        name = self.choices.get(key)
        if name is None:
            with self._lock:
                call = functools.partial(cpu_attention.attention, q, k, v, mask, is_bool, safe, scale)
                name = self.choices.get(key) or self._choose(key, call, (is_bool, safe))
        if name is None:
            return None
        return cpu_attention.attention(q, k, v, mask, is_bool, safe, scale, out=out, dtype=self.KERNELS[name][0])

    def _candidates(self) -> list[str]:
        names = [name for name, (_, _, applies) in self.KERNELS.items() if applies(self)]
        if self.allowed is not None:  # float32, the reference, always stays
            names = names[:1] + [n for n in names[1:] if n in self.allowed]
        return names

    def _choose(self, key: tuple, call: Callable[..., np.ndarray | None], mask_kind: tuple[bool, bool]) -> str | None:
        """`call(dtype=...)` runs this shape's attention into a fresh array; `mask_kind` is (is_bool, safe)."""
        names = self._candidates()
        if call() is None:  # the fused kernel does not apply: the caller's unfused path
            return None
        if len(names) == 1 or not self.tune:
            self.choices[key] = names[-1]
            return names[-1]
        signature = self.signature(key, mask_kind, names)
        choice = tuning.lookup(signature)  # timed by an earlier process on this machine (serve.inference.tuning)
        if choice not in names and self.clock.over():  # the warm-up's time is spent: preferred, untimed
            choice = names[-1]
        elif choice not in names:
            times = self._time(names, call)
            self.timings[key] = times
            choice = min(times, key=times.__getitem__)
            tuning.store(signature, choice)
        self.choices[key] = choice
        return choice

    def signature(self, key: tuple, mask_kind: tuple[bool, bool], names: list[str]) -> str:
        """What the choice at (q, (k, v, mask)) shapes `key` depends on besides the machine (tuning.machine_key:
        CPU, build, threads): the shapes, the mask's kind (bool or float, fully masked rows guarded), the product
        dtype and the kernels on offer. The same key discipline as a product layer's (choosing.py)."""
        return repr((type(self).__name__, key, mask_kind, self.product_dtype, tuple(names)))

    def _time(self, names: list[str], call: Callable[..., np.ndarray | None]) -> dict[str, float]:
        """Each kernel checked against the float32 one, then the best of _TIME_REPS rounds of each that agrees."""
        ref = call()
        usable = [FP32]
        for name in names[1:]:
            got = call(dtype=self.KERNELS[name][0])
            if got is not None and ref is not None and agrees(np.nan_to_num(got), np.nan_to_num(ref), BF16_RTOL):
                usable.append(name)
        times = {name: float("inf") for name in usable}
        for _ in range(_TIME_REPS):
            for name in usable:
                start = time.perf_counter()
                call(dtype=self.KERNELS[name][0])
                times[name] = min(times[name], time.perf_counter() - start)
        return times
