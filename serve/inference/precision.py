"""Which dtype each planned layer's products run in, and why float32 where bfloat16 (or int8) was asked for.

`optimize(..., dtype="bfloat16")` (the model-config's `dtype: bfloat16`) only offers each layer its bfloat16 kernel
beside the float32 ones; the layer's timing at each input shape picks the fastest that passes the 1e-2 check
(choosing.py). So asking for bfloat16 does not mean every product runs in it, and a user reading `describe()` must
be able to see which layers do and why the others do not. Decisions, and why:
- One entry per layer and input shape it chose a kernel for, in plan order: the choice is per shape, and a layer
  can run bfloat16 at batch 8 and float32 at batch 1 (a small product where the rounding of the input costs more
  than the faster dot product saves).
- A float32 choice under a bfloat16 plan says which of the five causes it was, checked in this order: mixed
  precision keeps the model's first and last product layers float32 (choosing._Fused.keep_float32: the stem and the
  classifier, where rounding moves top-1 most); the layer has no bfloat16 kernel (depthwise or grouped, or a
  convolution over fewer than 16 input channels: kernels._bf16); the bfloat16 kernel was left out by `kernels=`;
  the timing picked float32 (both times given, in milliseconds: the best of the timed rounds); or no timing was
  made here (the choice came from the tuning cache, serve.inference.tuning, or `tune=False`), or the bfloat16
  kernel did not agree with the reference within 1e-2 and was dropped before timing.
- The members of a query/key/value group run as one product (planned.LinearGroup): that product is the entry,
  named after its members joined with '+'.
- A bfloat16 entry names what runs it (`engine`: "amx" where the AMX tile path passed its self-check on this CPU,
  else "avx512_bf16"; serve.backend.cpu_libraries), since the two differ several times in speed.
- `optimize(..., quantization="int8")` (the model-config's `quantization: int8`) is read the same way: its linear
  layers are offered the dynamically quantised int8 kernel (`native_int8`, AVX512-VNNI), the timing decides, and a
  float32 choice says why with the same causes (a convolution has no int8 kernel; the plan's check is 5e-2).
- Compact, since the worker's handshake carries describe() (ResNet-50 warmed at 8 batch sizes is 432 entries):
  times only where they explain a float32 choice under bfloat16 (the chosen kernel's and the best bf16 one's);
  every kernel's times stay on the layer (`timings`) for whoever needs them.
"""

from __future__ import annotations

from typing import Any

from serve.inference import kernels

__all__ = ["layer_precisions"]


# per product dtype: the kernels' name suffix, what the CPU lacks without it, why a layer has none, the check
_LOW = {
    "bfloat16": ("_bf16", "AVX512-BF16", "depthwise or grouped, or under 16 input channels", "1e-2"),
    "int8": ("_int8", "AVX512-VNNI", "int8 products are for linear layers; convolutions stay float32", "5e-2"),
}


def product_dtype(kernel: str) -> str:
    """The dtype of kernel `kernel`'s products."""
    return next((dtype for dtype, low in _LOW.items() if kernel.endswith(low[0])), "float32")


def _best_low(layer: Any, times: dict[str, float], products: str) -> str | None:
    """The fastest kernel of the plan's product dtype the layer timed to the end, or None."""
    timed = [name for name in times if product_dtype(name) == products and times[name] != float("inf")]
    return min(timed, key=times.__getitem__) if timed else None


def _has_kernels(products: str) -> bool:
    return kernels.bf16_products() if products == "bfloat16" else kernels.int8_products()


def _why_float32(layer: Any, times: dict[str, float], chosen: str, products: str) -> str:
    suffix, isa, no_kernel, rtol = _LOW[products]
    if layer.keep_float32:
        return "mixed precision keeps the model's first and last product layers in float32"
    if not _has_kernels(products):
        return f"this CPU has no {products} kernel ({isa})"
    offered = [name for name in layer.KERNELS if name.endswith(suffix) and layer.KERNELS[name][2](layer)]
    if not offered:
        return f"no {products} kernel for this layer ({no_kernel})"
    if layer.allowed is not None and not any(name in layer.allowed for name in offered):
        return f"the {products} kernel is not among the kernels optimize(kernels=...) allows"
    best = _best_low(layer, times, products)
    if best is not None:
        return (f"timed: float32 {chosen} {times[chosen] * 1e3:.3g} ms beat {products} {best} "
                f"{times[best] * 1e3:.3g} ms")  # fmt: skip
    if times:
        return f"the {products} kernel differed from the reference by more than {rtol} here and was not timed"
    return "not timed in this process (the choice came from the tuning cache, or tune=False)"


def _bf16_engine() -> str | None:
    nat = kernels.native()
    return None if nat is None else nat.bf16_engine()


def layer_precisions(fused: dict[str, Any], products: str) -> list[dict[str, Any]]:
    """Per planned layer and input shape: the kernel and the dtype of its products; in a bfloat16 or int8 plan, why a
    float32 choice is float32, with the two times (ms) where the timing decided (the module docstring)."""
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
            dtype = product_dtype(chosen)
            entry: dict[str, Any] = {"layer": name, "input": list(shape), "kernel": chosen, "dtype": dtype}
            if products in _LOW and dtype == "float32":
                entry["float32_because"] = _why_float32(layer, times, chosen, products)
                best = _best_low(layer, times, products)
                if best is not None and chosen in times:
                    entry["ms"] = {chosen: round(times[chosen] * 1e3, 3), best: round(times[best] * 1e3, 3)}
            if entry["dtype"] == "bfloat16":
                entry["engine"] = _bf16_engine()
            entries.append(entry)
    return entries
