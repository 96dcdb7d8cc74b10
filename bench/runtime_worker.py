"""The worker side of bench/runtime.py: one library timing one case in its own process.

`python bench/runtime.py --worker LIB --case NAME --cache DIR` loads the case's files (see runtime_cases), builds
the callable, warms it up and prints one JSON line: {"ready": true, "ms": a warm call's time, "err": its max
difference from torch's output relative to the largest |value|, ...} or {"ready": false, "na": why}. Then for each
line N read from stdin it waits for idle thread pools to park, makes one untimed call, times N calls and prints
{"ms": median, "min": fastest}. It exits at the end of stdin.

LIB is serve (eager, under no_grad), serve-opt (serve.inference.optimize), torch (eager, inference_mode) or ort
(ONNX Runtime, CPU provider); serve-opt-bf16 (optimize(..., dtype="bfloat16"): the plan may choose bf16 products
per layer; its ready message says how many layers did), torch-bf16 (eager under torch.autocast("cpu",
torch.bfloat16): PyTorch's own mixed precision, float32 weights), openvino (OpenVINO's CPU plugin on the ONNX file
at its default precision: bf16 where the CPU has AMX, f32 elsewhere; the precision it chose is reported) and
openvino-f32 (INFERENCE_PRECISION_HINT f32); serve-opt-int8 (optimize(..., quantization="int8"): dynamically quantised
int8 linear layers where the timing picks them) and torch-int8 (torch.ao.quantization.quantize_dynamic on the
nn.Linear modules, qint8, the fbgemm engine: PyTorch's int8 for encoders; the MHA fast path off, which does not take
its quantized modules). OpenVINO is bench-only and never a dependency of serve: its workers run
on the python of a venv of their own, bench/out/openvino/venv (OPENVINO_PYTHON), made with
`python3 -m venv bench/out/openvino/venv && bench/out/openvino/venv/bin/pip install openvino`; without it their
columns read n/a. gemm-numpy / gemm-torch measure the fp32 GEMM peak instead, and spin busy-loops.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from runtime_cases import Case, count_flops, first, serve_model

LIBS = ("serve", "serve-opt", "torch", "ort", "serve-opt-bf16", "torch-bf16", "openvino", "openvino-f32",
        "serve-opt-int8", "torch-int8")  # fmt: skip
OPENVINO_PYTHON = Path(__file__).resolve().parent / "out" / "openvino" / "venv" / "bin" / "python"
PARK_S = 0.2  # seconds for an idle BLAS/OpenMP pool to stop spinning before a block starts
GEMM_N = 2048


def _serve(
    case: Case, folder: Path, threads: int, optimized: bool, dtype: str = "float32", quantization: str | None = None
) -> tuple[Callable[[], Any], dict]:
    import serve

    serve.set_num_threads(threads)
    weights = dict(np.load(folder / "weights.npz"))
    inputs = tuple(serve.from_numpy(v) for v in np.load(folder / "inputs.npz").values())
    model = serve_model(case, weights)
    info: dict[str, Any] = {"version": serve.__version__, "flops": count_flops(model, inputs)}
    if not optimized:
        fn = model
    else:
        try:
            from serve.inference import optimize
        except ImportError as e:
            return _na(f"serve.inference not importable ({e})")
        try:
            fn = optimize(model, example_inputs=inputs, dtype=dtype, **({"quantization": quantization} if quantization
                                                                         else {}))  # fmt: skip
        except Exception as e:  # the bench runs on at every commit: a failing plan is reported, not fatal
            return _na(f"optimize raised {type(e).__name__}: {e}")
        info["optimized"] = bool(getattr(fn, "optimized", False))
        info["reason"] = str(getattr(fn, "reason", "") or "")
        described = fn.describe()
        info["products"], info["product_dtypes"] = described["products"], described.get("product_dtypes", {})

    def call() -> Any:
        with serve.no_grad():
            return fn(*inputs)

    return call, info


def _torch(case: Case, folder: Path, threads: int, bf16: bool = False, int8: bool = False
           ) -> tuple[Callable[[], Any], dict]:  # fmt: skip
    import torch
    from runtime_cases import torch_model

    torch.set_num_threads(threads)
    model = torch_model(case)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in np.load(folder / "weights.npz").items()})
    if int8:
        if "fbgemm" in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = "fbgemm"
        torch.backends.mha.set_fastpath_enabled(False)
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    inputs = tuple(torch.from_numpy(v) for v in np.load(folder / "inputs.npz").values())

    def call() -> Any:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = first(model(*inputs))
            return out.float() if bf16 else out

    return call, {"version": torch.__version__}


def _openvino(folder: Path, threads: int, f32: bool) -> tuple[Callable[[], Any], dict]:
    try:
        import openvino as ov
    except ImportError:
        return _na(f"openvino is not installed in this python ({sys.executable}); bench/runtime.py runs its workers "
                   f"on {OPENVINO_PYTHON}: python3 -m venv bench/out/openvino/venv && "
                   "bench/out/openvino/venv/bin/pip install openvino")  # fmt: skip
    if not (folder / "model.onnx").exists():
        return _na((folder / "onnx_error.txt").read_text())
    core = ov.Core()
    config: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    if f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = core.compile_model(core.read_model(str(folder / "model.onnx")), "CPU", config)
    request = compiled.create_infer_request()
    feeds = dict(np.load(folder / "inputs.npz"))
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type: "bf16" or "f32"
    precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)
    return (lambda: list(request.infer(feeds).values())), {"version": ov.__version__, "precision": precision}


def _ort(folder: Path, threads: int) -> tuple[Callable[[], Any], dict]:
    try:
        import onnxruntime as ort
    except ImportError:
        return _na("onnxruntime is not installed (pip install -e '.[bench]')")
    if not (folder / "model.onnx").exists():
        return _na((folder / "onnx_error.txt").read_text())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    feeds = dict(np.load(folder / "inputs.npz"))
    return lambda: session.run(None, feeds), {"version": ort.__version__}


def _na(why: str) -> tuple[Callable[[], Any], dict]:
    return (lambda: None), {"na": why}


def _to_numpy(out: Any) -> np.ndarray:
    out = first(out)
    return out if isinstance(out, np.ndarray) else out.numpy()


def build(lib: str, case: Case, folder: Path, threads: int) -> tuple[Callable[[], Any], dict]:
    if lib in ("serve", "serve-opt", "serve-opt-bf16", "serve-opt-int8"):
        return _serve(case, folder, threads, lib != "serve", "bfloat16" if lib.endswith("bf16") else "float32",
                      "int8" if lib.endswith("int8") else None)  # fmt: skip
    if lib in ("torch", "torch-bf16", "torch-int8"):
        return _torch(case, folder, threads, lib == "torch-bf16", lib == "torch-int8")
    if lib == "ort":
        return _ort(folder, threads)
    if lib in ("openvino", "openvino-f32"):
        return _openvino(folder, threads, lib == "openvino-f32")
    raise SystemExit(f"unknown library {lib!r}; one of {', '.join(LIBS)}")


def time_calls(fn: Callable[[], Any], calls: int) -> list[float]:
    """Milliseconds of each of `calls` calls, after a pause for idle pools to park and one untimed call."""
    time.sleep(PARK_S)
    fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def run(lib: str, case: Case, folder: Path, threads: int, warmup: int) -> None:
    """The worker loop (module docstring)."""
    fn, info = build(lib, case, folder, threads)
    if "na" in info:
        return _say({"ready": False, **info})
    for _ in range(warmup):
        fn()
    start = time.perf_counter()
    out = fn()
    info["ms"] = (time.perf_counter() - start) * 1e3
    ref = np.load(folder / "reference.npy")
    info["err"] = float(np.abs(_to_numpy(out).astype(np.float64) - ref).max() / (np.abs(ref).max() or 1.0))
    _say({"ready": True, **info})
    for line in sys.stdin:
        times = time_calls(fn, max(1, int(line)))
        _say({"ms": statistics.median(times), "min": min(times)})


def profile(case: Case, folder: Path, threads: int, calls: int) -> None:
    """cProfile of serve's eager calls on one case, top functions by own time."""
    import cProfile
    import pstats

    fn, _ = build("serve", case, folder, threads)
    fn()
    prof = cProfile.Profile()
    prof.runcall(lambda: [fn() for _ in range(calls)])
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)


def gemm(lib: str, threads: int, reps: int = 5) -> None:
    """fp32 GEMM peak in GFLOP/s, best of `reps`: numpy's one-threaded OpenBLAS on each of serve's `threads` lanes
    (one 2048^3 product per lane, all at once), or torch.mm of one 2048^3 product on `threads` threads."""
    rng = np.random.default_rng(0)
    n = GEMM_N
    if lib == "gemm-numpy":
        from serve.backend import cpu_threads

        cpu_threads.hold_blas()
        cpu_threads.set_num_threads(threads)
        a, b = (rng.standard_normal((threads, n, n), dtype=np.float32) for _ in range(2))
        c = np.empty_like(a)

        def lane(start: int, stop: int) -> None:
            for i in range(start, stop):
                np.matmul(a[i], b[i], out=c[i])

        spans = [(i, i + 1) for i in range(threads)]
        fn, products = (lambda: cpu_threads.parallel(lane, spans)), threads
        info = {"blas_controlled": cpu_threads.blas_controlled()}
    else:
        import torch

        torch.set_num_threads(threads)
        ta, tb = (torch.from_numpy(rng.standard_normal((n, n), dtype=np.float32)) for _ in range(2))
        fn, products, info = (lambda: torch.mm(ta, tb)), 1, {}
    fn()
    best = min(time_calls(fn, reps))
    _say({"ready": True, "gflops": products * 2 * n**3 / (best / 1e3) / 1e9, **info})


def spin() -> None:
    """A busy loop: the competing load of `--load`."""
    while True:
        pass
