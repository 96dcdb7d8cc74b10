"""`optimize(model, example_inputs)`: the inference plan made at load, checked against eager before it is used.

Decisions, and why:
- Shape-polymorphic plan, kernels chosen per shape lazily. Folding and fusing do not depend on shapes, so one
  rewritten module tree serves every batch size; each planned layer times its kernels the first time it sees an
  input shape (and layout) and keeps the fastest for that shape. `warm(*inputs)` does it ahead of traffic (the
  worker warms each batch size its batcher can produce); a shape first seen in traffic pays for its timing once.
  Each layer times at most 32 shapes: past that (a client sending ever new shapes), a new shape takes the layer's
  most chosen kernel, untimed and unremembered, so no request can make the plan grow or time without bound.
- Never wrong for being optimized: the first plan is checked against the original module on its example inputs
  (every output tensor within 1e-4 of eager, relative to its largest magnitude; bfloat16 products 1e-2; int8
  products, whose per-row activation rounding compounds over layers, a relative L2 error of 0.25), and each
  `warm` shape is checked too (a detector's boxes, labels and scores as sets: two detections whose scores tie
  within rounding may swap, serve/inference/detections.py). A mismatch, or an error while capturing or checking,
  logs why and the model runs eagerly from then on (`optimized` False, `reason` says why). Each kernel of a
  planned layer is also checked against the reference kernel on the layer's real input when it is timed.
- The plan runs under no_grad (serving always does). With grad enabled, calls go to the original module, so a
  training step or a gradient through the model still works.
- The original module is left as it was: the plan is a copy of its tree that shares all unchanged tensors. It is
  made from the model as it is at load: weights or attributes changed on the original afterwards do not reach it
  (make a new plan, as a server does when it loads a model).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from serve.backend import cpu_attention
from serve.inference import capture
from serve.inference import kernels as kernel_table
from serve.inference import passes as rewriting
from serve.inference.arena import Arena
from serve.inference.attention_products import AttentionProducts
from serve.inference.choosing import BF16_RTOL, INT8_PLAN_RTOL, RTOL, _Fused
from serve.inference.detections import aligned
from serve.inference.pooling import PlannedMaxPool2d
from serve.inference.precision import layer_precisions
from serve.inference.tuning import TuningClock
from serve.nn.module import Module
from serve.tensor.grad_mode import is_grad_enabled, no_grad
from serve.tensor.tensor import Tensor

__all__ = ["OptimizedModule", "optimize"]

log = logging.getLogger(__name__)


def _arrays(out: Any) -> list[np.ndarray]:
    """Every tensor of a (nested) output, as numpy arrays, in a fixed order."""
    if isinstance(out, Tensor):
        return [np.asarray(out._ops.to_numpy(out._data))]
    if isinstance(out, dict):
        return [a for k in out for a in _arrays(out[k])]
    if isinstance(out, (tuple, list)):
        return [a for v in out for a in _arrays(v)]
    return []


def mismatch(got: Any, want: Any, rtol: float = RTOL, l2: bool = False) -> str | None:
    """Why `got` is not `want` within rtol (relative to each tensor's largest magnitude; with `l2`, its relative L2
    error ||got - want|| / ||want||), or None. Detections (dicts of boxes, labels, scores) are compared as sets: rows
    in eager's order first (detections.py)."""
    a, b = _arrays(aligned(got, want)), _arrays(want)
    if len(a) != len(b):
        return f"the plan returned {len(a)} tensors, eager {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return f"output {i}: shape {x.shape} vs eager {y.shape}"
        if y.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"output {i}: values differ from eager"
            continue
        if y.size == 0:
            continue
        err = float(np.max(np.abs(x.astype(np.float64) - y)))
        scale = float(np.max(np.abs(y)))
        if not np.isfinite(err) and not np.array_equal(x, y, equal_nan=True):
            return f"output {i}: non-finite values differ from eager"
        if l2:
            rel = float(np.linalg.norm(x.astype(np.float64) - y) / max(float(np.linalg.norm(y)), 1e-30))
            if rel > rtol:
                return f"output {i}: relative L2 error {rel:.3g} vs eager (tolerance {rtol:g})"
        elif err > rtol * scale + 1e-6:
            return f"output {i}: max error {err:.3g} vs eager (largest magnitude {scale:.3g}, tolerance {rtol:g})"
    return None


class OptimizedModule:
    """The plan in front of a module: same call signature, same results (within 1e-4), eager when refused."""

    def __init__(self, model: Module, *, tune: bool = True, check: bool = True,
                 passes: tuple[str, ...] = rewriting.PASSES, dtype: str = "float32",
                 kernels: tuple[str, ...] | None = None, quantization: str | None = None) -> None:  # fmt: skip
        self.original = model
        self.optimized = False
        self.reason: str | None = "not planned yet: the plan is made at the first call or warm()"
        self._tune, self._check, self._passes = tune, check, tuple(passes)
        self._kernels = None if kernels is None else set(kernels)
        self.products = _products(dtype, quantization)
        self._rtol = {"bfloat16": BF16_RTOL, "int8": INT8_PLAN_RTOL}.get(self.products, RTOL)
        self._l2 = self.products == "int8"  # an int8 plan's whole-model check: relative L2 (choosing.INT8_PLAN_RTOL)
        self._plan: Module | None = None
        self._refused = False
        self._rewrite: rewriting.Rewrite | None = None
        self._warmed: list[list[int]] = []
        self._plan_s = 0.0
        self._lock = threading.RLock()
        self.arena = Arena()
        self.clock = TuningClock()
        # the attention computed through scaled_dot_product_attention (not a planned nn.MultiheadAttention): its
        # products' dtype, chosen per shape for the whole plan while the plan runs (cpu_attention.ROUTE)
        self._sdpa = AttentionProducts()

    # -- calling ----------------------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._refused or is_grad_enabled():
            return self.original(*args, **kwargs)
        if self._plan is None:
            with self._lock:
                if self._plan is None and not self._refused:
                    return self._make_plan(args, kwargs)
            if self._refused:
                return self.original(*args, **kwargs)
        try:
            with self._routed():
                return self._plan(*args, **kwargs)  # type: ignore[misc]
        except Exception as e:  # the plan must never fail a call that eager would answer
            out = self.original(*args, **kwargs)  # a bad input raises here too, and fails only its own call
            self._refuse(f"the plan failed on a call eager answered ({type(e).__name__}: {e})")
            return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # everything else is the original module's
        if name == "original":
            raise AttributeError(name)
        return getattr(self.original, name)

    # -- planning ---------------------------------------------------------------------------------------------
    def warm(self, *args: Any, **kwargs: Any) -> None:
        """Plan (first time), choose kernels and check against eager for these inputs now."""
        with no_grad(), self._lock:
            if self._refused:
                return
            if self._plan is None:
                self._make_plan(args, kwargs)
            elif self._check:
                self._verify(args, kwargs)
            if not self._refused:
                self._warmed.append(_shapes(args, kwargs))

    def tune_within(self, seconds: float | None) -> None:
        """Time kernels for new shapes only for `seconds` from now (None: always); past that a layer takes its
        preferred kernel untimed for a shape it has not seen (tuning.TuningClock). The worker bounds its warm-up."""
        self.clock.deadline = None if seconds is None else time.perf_counter() + seconds

    def _make_plan(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        start = time.perf_counter()
        try:
            trace, eager_out = capture.trace(self.original, args, kwargs)
            self._rewrite = rewriting.plan_rewrites(trace, self.original, self._passes)
            del trace
            plan = rewriting.rewrite_tree(self.original, self._rewrite)
            for module in plan.modules():
                if isinstance(module, PlannedMaxPool2d):
                    module.arena = self.arena
            for layer in self._rewrite.fused.values():
                layers = [layer] + ([layer.group.combined] if getattr(layer, "group", None) is not None else [])
                for each in layers:
                    each.tune, each.product_dtype, each.allowed = self._tune, self.products, self._kernels
                    each.clock = self.clock
                    each.arena = self.arena
            for attention in self._rewrite.attentions.values():  # its two products' dtype: chosen like a layer's
                attention.products.tune, attention.products.product_dtype = self._tune, self.products
                attention.products.allowed, attention.products.clock = self._kernels, self.clock
            self._sdpa.tune, self._sdpa.product_dtype, self._sdpa.allowed = self._tune, self.products, self._kernels
            self._sdpa.clock = self.clock
            with self._routed():
                out = plan(*args, **kwargs)
                if self._rewrite.counts.get("residual_fused"):  # the first call chose the kernels; this one defers
                    out = plan(*args, **kwargs)
        except Exception as e:
            self._refuse(f"capture failed ({type(e).__name__}: {e})")
            return self.original(*args, **kwargs)
        why = mismatch(out, eager_out, self._rtol, self._l2) if self._check else None
        if why is not None:
            self._refuse(f"the plan's output differs from eager on the example input: {why}")
            return eager_out
        self._plan, self.optimized, self.reason = plan, True, None
        self._plan_s = time.perf_counter() - start
        log.info("inference plan: %s in %.2f s", self._rewrite.counts, self._plan_s)
        return out

    def _verify(self, args: tuple, kwargs: dict[str, Any]) -> None:
        want = self.original(*args, **kwargs)
        try:
            with self._routed():
                got = self._plan(*args, **kwargs)  # type: ignore[misc]
                if self._rewrite is not None and self._rewrite.counts.get("residual_fused"):
                    got = self._plan(*args, **kwargs)  # type: ignore[misc]  # with the kernels chosen, adds deferred
        except Exception as e:
            self._refuse(f"the plan failed on a warm-up input ({type(e).__name__}: {e})")
            return
        why = mismatch(got, want, self._rtol, self._l2)
        if why is not None:
            self._refuse(f"the plan's output differs from eager for inputs {_shapes(args, kwargs)}: {why}")

    @contextlib.contextmanager
    def _routed(self) -> Iterator[None]:
        """A bfloat16 plan's scaled_dot_product_attention calls go through its choice (cpu_attention.ROUTE) while
        the plan runs in this context; a float32 plan leaves the route unset."""
        if self.products != "bfloat16":
            yield
            return
        token = cpu_attention.ROUTE.set(self._sdpa.run)
        try:
            yield
        finally:
            cpu_attention.ROUTE.reset(token)

    def _refuse(self, reason: str) -> None:
        log.warning("inference plan not used, serving eagerly: %s", reason)
        self._refused, self.optimized, self.reason, self._plan = True, False, reason, None

    # -- reporting --------------------------------------------------------------------------------------------
    @property
    def plan(self) -> Module | None:
        """The rewritten module tree (None unless optimized)."""
        return self._plan

    def layers(self) -> list[_Fused]:
        return [] if self._rewrite is None else list(self._rewrite.fused.values())

    def describe(self) -> dict[str, Any]:
        """JSON-safe: whether it runs optimized, why not, what the passes did and which kernels were chosen; per
        layer and input shape the kernel and the dtype of its products, with why float32 where bfloat16 was asked
        for (serve.inference.precision), and how many products run in each dtype."""
        fused = {} if self._rewrite is None else self._rewrite.fused
        per_layer = layer_precisions(fused, self.products)
        attentions = {} if self._rewrite is None else {a.products_name: a.products
                                                       for a in self._rewrite.attentions.values()}  # fmt: skip
        attentions["scaled_dot_product_attention"] = self._sdpa
        chosen: dict[str, int] = {}
        dtypes: dict[str, int] = {}
        for entry in per_layer:
            chosen[entry["kernel"]] = chosen.get(entry["kernel"], 0) + 1
            dtypes[entry["dtype"]] = dtypes.get(entry["dtype"], 0) + 1
        nat = kernel_table.native()
        return {
            "optimized": self.optimized,
            "reason": self.reason,
            "passes": {} if self._rewrite is None else dict(self._rewrite.counts),
            "layers": len(self.layers()),
            "kernels": chosen,
            "native": None if nat is None else nat.isa(),
            "products": self.products,
            "product_dtypes": dtypes,
            "precision": per_layer,
            "attention": layer_precisions(attentions, self.products),  # the attentions' two products (q k^T, p v)
            "warmed": list(self._warmed),
            "plan_seconds": round(self._plan_s, 3),
            "arena": self.arena.describe(),
        }


def _products(dtype: str, quantization: str | None = None) -> str:
    """The dtype of the plan's products: bfloat16 only where the CPU has AVX512-BF16, int8 only where it has
    AVX512-VNNI (else float32, logged)."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"optimize(dtype={dtype!r}): the CPU plan's products are float32 or bfloat16")
    if quantization not in (None, "int8"):
        raise ValueError(f"optimize(quantization={quantization!r}): the CPU plan quantises to int8 (or leave it out)")
    if quantization == "int8":
        if dtype != "float32":
            raise ValueError(f"optimize(dtype={dtype!r}, quantization='int8'): choose one product precision")
        if not kernel_table.int8_products():
            log.warning("int8 products asked for, but this CPU has no AVX512-VNNI (or serve's native kernels did not "
                        "load): the plan computes in float32")  # fmt: skip
            return "float32"
        return "int8"
    if dtype == "bfloat16" and not kernel_table.bf16_products():
        log.warning("bfloat16 products asked for, but this CPU has no AVX512-BF16 (or serve's native kernels did not "
                    "load): the plan computes in float32")  # fmt: skip
        return "float32"
    return dtype


def _shapes(args: tuple, kwargs: dict[str, Any]) -> list:
    return [list(a.shape) for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]


def optimize(model: Module, example_inputs: tuple | Tensor | None = None, *, tune: bool = True,
             check: bool = True, passes: tuple[str, ...] = rewriting.PASSES, dtype: str = "float32",
             kernels: tuple[str, ...] | None = None, quantization: str | None = None) -> OptimizedModule:  # fmt: skip
    """Make `model`'s inference plan (see the module docstring). `example_inputs` (a tensor or a tuple of the
    forward's positional arguments) plans, tunes and checks now; without it, the first call does. `passes`
    (a subset of fold, fuse, group, pool) is for measuring what each buys; `tune=False` takes each layer's
    preferred kernel without timing; `check=False` skips the comparison with eager (tests and benchmarks).
    `dtype="bfloat16"` lets the products run on bfloat16 operands with float32 accumulation where the CPU has
    AVX512-BF16 (float32 elsewhere, logged); its check against eager is then 1e-2 instead of 1e-4. `kernels`
    limits the kernels each layer may choose among (serve.inference.kernels' names, and the attention's
    native_attention / native_attention_bf16; the reference kernel, numpy or the float32 attention, always stays),
    to measure what each one buys. `quantization="int8"` (PyTorch's `quantize_dynamic` arithmetic,
    serve.backend.cpu_i8) lets linear layers run int8 products (weights quantised once here, activations per row
    at each call, int32 sums) where the CPU has AVX512-VNNI, the first and last product layers kept float32; its
    check against eager is then each output's relative L2 error within 0.25 (choosing.INT8_PLAN_RTOL)."""
    if not isinstance(model, Module):
        raise TypeError(f"optimize() takes a serve.nn.Module, got {type(model).__name__}")
    if model.training:
        raise ValueError("optimize() folds batch norm with its running statistics: call model.eval() first")
    unknown = set(passes) - set(rewriting.PASSES)
    if unknown:
        raise ValueError(f"unknown passes {sorted(unknown)}: choose among {list(rewriting.PASSES)}")
    known = set(kernel_table.CONV_KERNELS) | set(kernel_table.LINEAR_KERNELS) | set(AttentionProducts.KERNELS)
    if kernels is not None and set(kernels) - known:
        raise ValueError(f"unknown kernels {sorted(set(kernels) - known)}: choose among {sorted(known)}")
    opt = OptimizedModule(
        model, tune=tune, check=check, passes=passes, dtype=dtype, kernels=kernels, quantization=quantization
    )
    if example_inputs is not None:
        opt.warm(*(example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)))
    return opt
