"""Which dtype each planned layer's products run in, and why float32 where bfloat16 was asked for.

`optimize(..., dtype="bfloat16")` (the model-config's `dtype: bfloat16`) only offers each layer its bfloat16 kernel
beside the float32 ones; the layer's timing at each input shape picks the fastest that passes the 1e-2 check
(planned.py). So asking for bfloat16 does not mean every product runs in it, and a user reading `describe()` must
be able to see which layers do and why the others do not. Decisions, and why:
- One entry per layer and input shape it chose a kernel for, in plan order: the choice is per shape, and a layer
  can run bfloat16 at batch 8 and float32 at batch 1 (a small product where the rounding of the input costs more
  than the faster dot product saves).
- A float32 choice under a bfloat16 plan says which of the five causes it was, checked in this order: mixed
  precision keeps the model's first and last product layers float32 (planned.keep_float32: the stem and the
  classifier, where rounding moves top-1 most); the layer has no bfloat16 kernel (depthwise or grouped, or a
  convolution over fewer than 16 input channels: kernels._bf16); the bfloat16 kernel was left out by `kernels=`;
  the timing picked float32 (both times given, in milliseconds: the best of the timed rounds); or no timing was
  made here (the choice came from the tuning cache, serve.inference.tuning, or `tune=False`), or the bfloat16
  kernel did not agree with the reference within 1e-2 and was dropped before timing.
- The members of a query/key/value group run as one product (planned.LinearGroup): that product is the entry,
  named after its members joined with '+'.
- A bfloat16 entry names what runs it (`engine`: "amx" where the AMX tile path passed its self-check on this CPU,
  else "avx512_bf16"; serve.backend.cpu_libraries), since the two differ several times in speed.
- Compact, since the worker's handshake carries describe() (ResNet-50 warmed at 8 batch sizes is 432 entries):
  times only where they explain a float32 choice under bfloat16 (the chosen kernel's and the best bf16 one's);
  every kernel's times stay on the layer (`timings`) for whoever needs them.
"""

from __future__ import annotations

from typing import Any

from serve.inference import kernels

__all__ = ["layer_precisions"]


def _is_bf16(kernel: str) -> bool:
    return kernel.endswith("_bf16")


def _best_bf16(layer: Any, times: dict[str, float]) -> str | None:
    """The fastest bf16 kernel the layer timed to the end, or None."""
    timed = [name for name in times if _is_bf16(name) and times[name] != float("inf")]
    return min(timed, key=times.__getitem__) if timed else None


def _why_float32(layer: Any, times: dict[str, float], chosen: str) -> str:
    bf16_names = [name for name in layer.KERNELS if _is_bf16(name)]
    if layer.keep_float32:
        return "mixed precision keeps the model's first and last product layers in float32"
    if not kernels.bf16_products():
        return "this CPU has no bfloat16 kernel (AVX512-BF16)"
    offered = [name for name in bf16_names if layer.KERNELS[name][2](layer)]
    if not offered:
        return "no bfloat16 kernel for this layer (depthwise or grouped, or under 16 input channels)"
    if layer.allowed is not None and not any(name in layer.allowed for name in offered):
        return "the bfloat16 kernel is not among the kernels optimize(kernels=...) allows"
    best = _best_bf16(layer, times)
    if best is not None:
        return (f"timed: float32 {chosen} {times[chosen] * 1e3:.3g} ms beat bfloat16 {best} "
                f"{times[best] * 1e3:.3g} ms")  # fmt: skip
    if times:
        return "the bfloat16 kernel differed from the reference by more than 1e-2 here and was not timed"
    return "not timed in this process (the choice came from the tuning cache, or tune=False)"


def _bf16_engine() -> str | None:
    nat = kernels.native()
    return None if nat is None else nat.bf16_engine()


def layer_precisions(fused: dict[str, Any], products: str) -> list[dict[str, Any]]:
    """Per planned layer and input shape: the kernel and the dtype of its products; in a bfloat16 plan, why a float32
    choice is float32, with the two times (ms) where the timing decided (the module docstring)."""
    entries: list[dict[str, Any]] = []
    seen: set[int] = set()
    for name, layer in fused.items():
        group = getattr(layer, "group", None)
        if group is not None:
            if id(group) in seen:
                continue
            seen.add(id(group))
            names = {id(p): n for n, p in fused.items()}
            name, layer = "+".join(names.get(id(m), "?") for m in group.members), group.combined
        for key, chosen in layer.choices.items():
            shape, _ = key
            times = layer.timings.get(key, {})
            entry: dict[str, Any] = {"layer": name, "input": list(shape), "kernel": chosen,
                                     "dtype": "bfloat16" if _is_bf16(chosen) else "float32"}  # fmt: skip
            if products == "bfloat16" and not _is_bf16(chosen):
                entry["float32_because"] = _why_float32(layer, times, chosen)
                best = _best_bf16(layer, times)
                if best is not None and chosen in times:
                    entry["ms"] = {chosen: round(times[chosen] * 1e3, 3), best: round(times[best] * 1e3, 3)}
            if entry["dtype"] == "bfloat16":
                entry["engine"] = _bf16_engine()
            entries.append(entry)
    return entries
