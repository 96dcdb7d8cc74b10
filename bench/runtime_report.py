"""The markdown tables of bench/runtime.py, from its measurements: latency and ratios, GFLOP/s against the measured
GEMM peak, and (with --load) how each library's time rises with one of its two cores taken."""

from __future__ import annotations

import statistics
from typing import Any

from runtime_cases import Case
from runtime_worker import LIBS

NAMES = {"serve": "serve eager", "serve-opt": "serve optimized", "torch": "PyTorch eager", "ort": "ONNX Runtime",
         "serve-opt-bf16": "serve optimized bf16", "torch-bf16": "PyTorch bf16 autocast",
         "openvino": "OpenVINO default", "openvino-f32": "OpenVINO f32", "serve-opt-int8": "serve optimized int8",
         "torch-int8": "PyTorch quantize_dynamic int8"}  # fmt: skip
FP32 = LIBS[:4]  # the first tables' columns; the bf16 table has the rest beside serve optimized and PyTorch
BF16 = ("serve-opt", "serve-opt-bf16", "torch", "torch-bf16", "openvino-f32", "openvino")
INT8 = ("serve-opt", "serve-opt-bf16", "serve-opt-int8", "torch", "torch-int8")
Result = dict[str, dict[str, Any]]  # lib -> {"info": ready message, "idle": [ms per round], "load": [ms per round]}


def ms(result: Result, lib: str, key: str = "idle") -> float | None:
    """The median over rounds, or None where the library did not run."""
    times = result.get(lib, {}).get(key) or []
    return statistics.median(times) if times else None


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{a / b:.2f}"


def summary(result: Result) -> str:
    return ", ".join(f"{lib} {fmt_ms(ms(result, lib))}" for lib in LIBS)


def _flops(result: Result) -> int | None:
    for lib in ("serve", "serve-opt", "serve-opt-bf16"):  # counted by each serve worker, on the eager model
        flops = result.get(lib, {}).get("info", {}).get("flops")
        if flops:
            return flops
    return None


def _version(rows: list[tuple[Case, Result]], *libs: str) -> str:
    for lib in libs:
        for _, result in rows:
            version = result.get(lib, {}).get("info", {}).get("version")
            if version:
                return version
    return "not available"


def _notes(rows: list[tuple[Case, Result]]) -> list[str]:
    why_cases: dict[tuple[str, str], list[str]] = {}
    for case, result in rows:
        for lib in LIBS:
            info = result.get(lib, {}).get("info", {})
            why = info.get("na") or ""
            if info.get("optimized") is False:
                why = f"runs unoptimized: {info.get('reason')}"
            if why:
                why_cases.setdefault((lib, why), []).append(case.name)
    notes = []
    for (lib, why), names in why_cases.items():
        where = "all cases" if len(names) == len(rows) > 1 else ", ".join(names)
        notes.append(f"- {NAMES[lib]} ({where}): {why}")
    errors = []
    for lib in LIBS:
        errs = [r[lib]["info"]["err"] for _, r in rows if "err" in r.get(lib, {}).get("info", {})]
        if errs:
            errors.append(f"{NAMES[lib]} {max(errs):.1e}")
    if errors:
        notes.append("- Largest output difference from the torch twin's, relative to its largest |value|, over the "
                     "cases: " + ", ".join(errors) + ".")  # fmt: skip
    return notes


def tables(rows: list[tuple[Case, Result]], peaks: dict[str, float | None], meta: dict[str, Any], load: bool) -> str:
    peak_np, peak_t = peaks.get("gemm-numpy"), peaks.get("gemm-torch")
    peak = max([p for p in (peak_np, peak_t) if p] or [0.0])
    lines = [
        f"`{meta['command']}` on {meta['date']}, {meta['cpu']} ({meta['cpus']} CPUs, 1-minute load average "
        f"{meta['load']:.1f} at the start, {meta.get('load_end', meta['load']):.1f} at the end; Python "
        f"{meta['python']}, numpy {meta['numpy']}): median over "
        f"{meta['rounds']} rounds of each library's median call, milliseconds per forward call. Each library in its "
        f"own process on {meta['threads']} threads: serve {_version(rows, 'serve', 'serve-opt')} eager under "
        f"no_grad, serve "
        f"optimized (serve.inference.optimize), PyTorch {_version(rows, 'torch')} eager under inference_mode, ONNX "
        f"Runtime {_version(rows, 'ort')} (CPU provider, intra-op {meta['threads']}, inter-op 1). fp32 GEMM peak "
        f"(2048^3): numpy/OpenBLAS 1 thread x {meta['threads']} serve lanes {_gflops(peak_np)} GFLOP/s, torch.mm on "
        f"{meta['threads']} threads {_gflops(peak_t)} GFLOP/s.",
        "",
        "| model | serve eager ms | serve optimized ms | PyTorch ms | ORT ms | optimized / torch | optimized / ORT "
        "| eager / torch | target (serve / torch) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for case, r in rows:
        e, o, t, x = (ms(r, lib) for lib in FP32)
        cells = [fmt_ms(v) for v in (e, o, t, x)] + [ratio(o, t), ratio(o, x), ratio(e, t), case.target]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    lines += ["", f"GFLOP/s reached (in brackets: % of the higher measured GEMM figure, {_gflops(peak)} GFLOP/s; above "
              "100% a library's kernels outrun both measured GEMMs):", "",
              "| model | GFLOP per call | serve eager | serve optimized | PyTorch | ORT |",
              "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for case, r in rows:
        flops = _flops(r)
        cells = [_rate(flops, ms(r, lib), peak) for lib in FP32]
        gflop = "n/a" if flops is None else f"{flops / 1e9:.3g}"
        lines.append(f"| {case.name} | {gflop} | " + " | ".join(cells) + " |")
    if load:
        lines += ["", "With one of the two cores taken by a busy-looping process (pinned to it), in the same rounds: "
                  "ms idle -> ms loaded (rise).", "",
                  "| model | serve eager | serve optimized | PyTorch | ORT "
                  "| serve rise / torch rise (optimized, else eager) |",
                  "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for case, r in rows:
            rises = {lib: _rise(ms(r, lib), ms(r, lib, "load")) for lib in FP32}
            cells = [_loaded(ms(r, lib), ms(r, lib, "load")) for lib in FP32]
            best = rises["serve-opt"] if rises["serve-opt"] is not None else rises["serve"]
            lines.append(f"| {case.name} | " + " | ".join(cells) + f" | {ratio(best, rises['torch'])} |")
    if any(ms(r, lib) is not None for _, r in rows for lib in BF16[1:] if lib not in FP32):
        lines += ["", *bf16_table(rows)]
    if any(ms(r, lib) is not None for _, r in rows for lib in ("serve-opt-int8", "torch-int8")):
        lines += ["", *int8_table(rows)]
    lines += ["", *_notes(rows)]
    return "\n".join(lines)


def _bf16_layers(result: Result) -> str:
    """How many of the bf16 plan's product layers (per input shape) chose bf16 kernels: 'bf16 / all'."""
    counts = result.get("serve-opt-bf16", {}).get("info", {}).get("product_dtypes") or {}
    return f"{counts.get('bfloat16', 0)} / {sum(counts.values())}" if counts else "n/a"


def bf16_table(rows: list[tuple[Case, Result]]) -> list[str]:
    """serve's plan in fp32 and with dtype=bfloat16 beside PyTorch fp32 / bf16 autocast and OpenVINO f32 / default."""
    precision = next((r["openvino"]["info"]["precision"] for _, r in rows
                      if "precision" in r.get("openvino", {}).get("info", {})), "n/a")  # fmt: skip
    lines = [f"bfloat16, in the same rounds: serve's plan with `dtype=bfloat16` (bf16 products where its timing picks "
             f"them: layers bf16 / all), PyTorch {_version(rows, 'torch')} eager under torch.autocast(\"cpu\", "
             f"bfloat16), OpenVINO {_version(rows, 'openvino')} on the ONNX file with INFERENCE_PRECISION_HINT f32 "
             f"and at its default (here: {precision}).", "",
             "| model | serve fp32 ms | serve bf16 ms | torch fp32 ms | torch bf16 ms | OpenVINO f32 ms "
             "| OpenVINO default ms | serve bf16 / serve fp32 | serve bf16 / OpenVINO default "
             "| serve fp32 / torch fp32 | serve layers bf16 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for case, r in rows:
        o, ob, t, tb, vf, vd = (ms(r, lib) for lib in BF16)
        cells = [fmt_ms(v) for v in (o, ob, t, tb, vf, vd)]
        cells += [ratio(ob, o), ratio(ob, vd), ratio(o, t), _bf16_layers(r)]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return lines


def _err(result: Result, lib: str) -> str:
    err = result.get(lib, {}).get("info", {}).get("err")
    return "n/a" if err is None else f"{err:.2g}"


def int8_table(rows: list[tuple[Case, Result]]) -> list[str]:
    """serve's plan with quantization="int8" beside its fp32 and bf16 plans and PyTorch fp32 / quantize_dynamic."""
    lines = ["int8, in the same rounds: serve's plan with `quantization=\"int8\"` (dynamically quantised int8 linear "
             "layers on AVX512-VNNI where its timing picks them: layers int8 / all) beside its fp32 and bf16 plans, "
             f"PyTorch {_version(rows, 'torch')} fp32 and torch.ao.quantization.quantize_dynamic (nn.Linear, qint8, "
             "fbgemm). err: max difference from PyTorch fp32's output over its largest magnitude.", "",
             "| model | serve fp32 ms | serve bf16 ms | serve int8 ms | torch fp32 ms | torch int8 ms "
             "| serve int8 / serve fp32 | serve int8 / serve bf16 | serve int8 / torch int8 | serve layers int8 "
             "| err serve int8 | err torch int8 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for case, r in rows:
        o, ob, oi, t, ti = (ms(r, lib) for lib in INT8)
        counts = r.get("serve-opt-int8", {}).get("info", {}).get("product_dtypes") or {}
        layers = f"{counts.get('int8', 0)} / {sum(counts.values())}" if counts else "n/a"
        cells = [fmt_ms(v) for v in (o, ob, oi, t, ti)] + [ratio(oi, o), ratio(oi, ob), ratio(oi, ti), layers]
        cells += [_err(r, "serve-opt-int8"), _err(r, "torch-int8")]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " |")
    return lines


def _gflops(value: float | None) -> str:
    return "n/a" if not value else f"{value:.1f}"


def _rate(flops: int | None, millis: float | None, peak: float) -> str:
    if flops is None or millis is None:
        return "n/a"
    rate = flops / millis / 1e6
    return f"{rate:.1f} ({100 * rate / peak:.0f}%)" if peak else f"{rate:.1f}"


def _rise(idle: float | None, loaded: float | None) -> float | None:
    return None if idle is None or loaded is None else loaded / idle


def _loaded(idle: float | None, loaded: float | None) -> str:
    rise = _rise(idle, loaded)
    return "n/a" if rise is None else f"{fmt_ms(idle)} -> {fmt_ms(loaded)} ({rise:.2f}x)"
