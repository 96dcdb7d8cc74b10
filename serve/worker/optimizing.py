"""Optimized inference in the worker: the handler's model replaced by its inference plan, warmed before ready.

    report = optimize_handler(handler, archive.model_config, batch_size, device)   # after handler.initialize

When `handler.model` (where TorchServe handlers keep it) is a `serve.nn.Module` on the CPU and the model-config
does not say `optimize: false`, it becomes `serve.inference.optimize(handler.model)`. Warm-up then plans, checks
and tunes it for each batch size the batcher can produce (`warm_batch_sizes`): every b in 1..batch_size when
batch_size <= 8, else the powers of two below batch_size and batch_size itself. The inputs come from
`handler.example_inputs(b)`. Where the handler has none (TorchServe's handlers) or returns None (the default), a
model the worker recognises as a torchvision detector is warmed with noise images at its transform's size
(serve.inference.detections.detector_inputs: the plan made before traffic, not at the first request, which paid
59-90 s for it under load); any other model is not warmed and each batch size is planned at its first batch.
Warm-up stops, with a log line, once `optimize_warmup_s` (default 30) seconds are spent; the sizes left are planned
lazily (0: no warm-up). The first size is warmed whatever it costs: the worker is not ready until its model is
planned, and the startup timeout (120 s by default) bounds it as it bounds the load. So kernels are timed only
within the budget (`opt.tune_within(optimize_warmup_s)`): a layer first seen after it takes its preferred kernel
untimed (serve.inference.tuning.TuningClock), and what is left is one capture, one planned run and the check
against eager.

The optimizer never fails a load: any exception from it is logged as a warning and the eager model is kept.
The report (JSON-safe: `opt.describe()` plus `warmed`, the batch sizes warmed, or `{"optimized": false,
"reason": ...}`) goes to the server with the ready handshake; describe shows it per worker.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serve import nn

log = logging.getLogger("serve.worker")

DEFAULT_WARMUP_S = 30.0
EVERY_SIZE_UP_TO = 8  # batch sizes up to this are all warmed; above it, powers of two and batch_size
MAX_REPORT_BYTES = 64 << 10  # the handshake carries the report; a larger describe is cut to its summary


@dataclass(frozen=True)
class OptimizeSettings:
    enabled: bool = True
    warmup_s: float = DEFAULT_WARMUP_S


def optimize_settings(config: Mapping[str, Any] | None) -> OptimizeSettings:
    """The model-config's `optimize` (bool) and `optimize_warmup_s` (seconds >= 0); ValueError naming the key."""
    config = config or {}
    enabled = config.get("optimize", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"optimize {enabled!r} is not valid: expected true or false (false runs the model eagerly)")
    warmup = config.get("optimize_warmup_s", DEFAULT_WARMUP_S)
    if isinstance(warmup, bool) or not isinstance(warmup, (int, float)) or not warmup >= 0:
        raise ValueError(f"optimize_warmup_s {warmup!r} is not valid: expected a number of seconds >= 0 "
                         "(how long the worker may warm the optimized model up before it reports ready)")  # fmt: skip
    return OptimizeSettings(enabled, float(warmup))


def warm_batch_sizes(batch_size: int) -> list[int]:
    """The batch sizes warmed: 1..batch_size when batch_size <= 8, else powers of two below it and batch_size."""
    if batch_size <= EVERY_SIZE_UP_TO:
        return list(range(1, batch_size + 1))
    sizes = [1 << k for k in range(batch_size.bit_length()) if 1 << k < batch_size]
    return [*sizes, batch_size]


def not_optimized(reason: str) -> dict[str, Any]:
    return {"optimized": False, "reason": reason, "warmed": []}


def optimize_handler(handler: Any, config: Mapping[str, Any] | None, batch_size: int,
                     device: str | None) -> dict[str, Any]:  # fmt: skip
    """Optimize and warm `handler.model` in place when it can be (see the module docstring); the report."""
    model = getattr(handler, "model", None)
    try:
        return _optimize(handler, model, config, batch_size, device)
    except Exception as e:  # the optimizer never fails a load
        log.warning("the model runs eagerly: optimizing it failed (%s: %s)", type(e).__name__, e)
        if model is not None:
            handler.model = model
        return not_optimized(f"the optimizer failed: {type(e).__name__}: {e}")


def _optimize(handler: Any, model: Any, config: Mapping[str, Any] | None, batch_size: int,
              device: str | None) -> dict[str, Any]:  # fmt: skip
    reason = _refusal(model, config, device)
    if reason is not None:
        log.info("model runs eagerly: %s", reason)
        return not_optimized(reason)
    settings = optimize_settings(config)  # checked by _refusal already
    from serve.inference import optimize  # here: a worker that runs eagerly never imports it

    quantization = getattr(handler, "product_quantization", None)  # model-config `quantization: int8`
    extra = {"quantization": quantization} if quantization else {}
    opt = optimize(model, dtype=getattr(handler, "product_dtype", "float32"), **extra)
    handler.model = opt
    warmed = _warm(handler, opt, batch_size, settings.warmup_s)
    if isinstance(warmed, str):  # the warm-up raised: back to the eager model
        handler.model = model
        return not_optimized(warmed)
    return _report(opt, warmed)


def _refusal(model: Any, config: Mapping[str, Any] | None, device: str | None) -> str | None:
    """Why the model is not optimized, or None when it is to be."""
    try:
        if not optimize_settings(config).enabled:
            return "optimize: false in the model-config"
    except ValueError as e:  # refused at registration; a worker started another way keeps its model eager
        return f"model-config {e}"
    if device is not None:
        return f"the model runs on {device}; the inference plan is made for the CPU"
    if not isinstance(model, nn.Module):
        kind = "no model" if model is None else type(model).__name__
        return f"handler.model is {kind}, not a serve.nn.Module"
    tensors = [*model.parameters(), *model.buffers()]
    if any(not t.is_cpu for t in tensors):
        return "the model's weights are not on the CPU; the inference plan is made for the CPU"
    return None


def _warm(handler: Any, opt: Any, batch_size: int, budget_s: float) -> list[int] | str:
    """The batch sizes warmed, or the reason the optimized model was given up (its warm-up raised)."""
    own = getattr(handler, "example_inputs", None)

    def example_inputs(b: int) -> Any:
        inputs = own(b) if callable(own) else None
        if inputs is not None:
            return inputs
        from serve.inference.detections import detector_inputs  # here, as optimize: eager workers never import it

        return detector_inputs(getattr(opt, "original", None), b)

    started = time.perf_counter()
    bound = getattr(opt, "tune_within", None)  # kernels are timed within the budget, then taken untimed
    if callable(bound):
        bound(budget_s)
    try:
        warmed = _warm_sizes(opt, example_inputs, type(handler).__name__, batch_size, budget_s, started)
    finally:
        if callable(bound):
            bound(None)  # shapes first seen in traffic are timed, as before
    if isinstance(warmed, list) and warmed:
        log.info("optimized model warmed for batch sizes %s in %.2f s", warmed, time.perf_counter() - started)
    return warmed


def _warm_sizes(opt: Any, example_inputs: Any, handler_name: str, batch_size: int, budget_s: float,
                started: float) -> list[int] | str:  # fmt: skip
    warmed: list[int] = []
    sizes = warm_batch_sizes(batch_size)
    for b in sizes:
        if time.perf_counter() - started >= budget_s:
            log.info("warm-up stopped after %.1f s (optimize_warmup_s=%g): batch sizes %s are planned at their "
                     "first batch", time.perf_counter() - started, budget_s, sizes[len(warmed):])  # fmt: skip
            break
        try:
            inputs = example_inputs(b)
        except Exception as e:  # the handler's own bug: no warm-up, plans are made lazily
            log.warning("no warm-up: %s.example_inputs(%d) raised %s: %s", handler_name, b, type(e).__name__,
                        e)  # fmt: skip
            break
        if inputs is None:
            break
        try:
            opt.warm(*inputs)
        except Exception as e:  # the optimizer never fails a load
            log.warning("the model runs eagerly: warming the optimized model for batch size %d failed (%s: %s)",
                        b, type(e).__name__, e)  # fmt: skip
            return f"the optimizer failed warming batch size {b}: {type(e).__name__}: {e}"
        warmed.append(b)
        if not opt.optimized:  # the plan was refused: every call runs eagerly, nothing more to warm
            break
    return warmed


def _report(opt: Any, warmed: list[int]) -> dict[str, Any]:
    """`opt.describe()` with the sizes warmed; just the summary if describe fails or is too big for the handshake."""
    reason = None if opt.reason is None else str(opt.reason)
    summary = {"optimized": bool(opt.optimized), "reason": reason, "warmed": warmed}
    if not summary["optimized"]:
        log.info("the optimizer refused a plan; the model runs eagerly: %s", reason)
    try:
        report = {**opt.describe(), **summary}
        if len(json.dumps(report)) > MAX_REPORT_BYTES:  # the per-layer list goes first (product_dtypes counts stay)
            report.pop("precision", None)
            report.pop("attention", None)
        if len(json.dumps(report)) <= MAX_REPORT_BYTES:
            return report
    except Exception as e:  # describe is information only
        log.warning("the optimizer's describe() failed (%s: %s)", type(e).__name__, e)
    return summary
