"""Generative serving benchmark (issue 25, "Measure"): serve's engine behind a real server against transformers + torch.

    .venv/bin/python bench/generation.py                              # GPT-2 small, concurrency 1 4 16 64, 2 threads
    .venv/bin/python bench/generation.py --model llama --concurrency 1 16 --rounds 2
    .venv/bin/python bench/generation.py --write                      # also the table into bench/RESULTS.md

For each model (seeded random weights, bench/generation_models.py): the memory copy bandwidth (numpy), the
references in their own process (bench/generation_torch.py: transformers `generate` at batch 1 and 16, torch's
prefill of one prompt), then serve: the folder archived with `--handler text_generation`, a real server
(bench/serve_process.py), streaming /v1/completions at each concurrency (bench/generation_client.py), `--rounds`
times, medians; then a KV-cache run (a budget too small for the sequences at once: every request must still
finish) and, when installed under bench/out/loadgen, guidellm at concurrency 16 against the same server.
When a llama.cpp build is present (bench/llamacpp_build.sh, or --llamacpp PATH; --skip-llamacpp skips it),
llama-server runs beside the same server on the same load, in paired rounds (bench/generation_llamacpp.py).

Threads: 2 for everyone. The references call torch.set_num_threads(2) under OMP/OPENBLAS/MKL_NUM_THREADS=2; serve's
worker gets TorchServe's model-config key `torchrun: {OMP_NUMBER_THREADS: 2}`, which the server turns into those
variables for the worker (serve/management/worker_process.py), from which serve's CPU lanes take their count
(serve/backend/cpu_threads.py). The server process and the client run beside it (the machine has 2 cores).
On a loaded machine torch's 2-thread OpenMP pool can run 10x slower than one thread (its threads spin-wait for
each other while other processes hold the cores: a 32-token GPT-2 prefill took 1.8 s on 2 threads, 0.18 s on 1,
at a load average of 7), so the references also run on `--torch-threads` (1 by default) and every target is judged
against the reference's best figure, with the thread count that gave it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out" / "generation"
sys.path.insert(0, str(BENCH))

from generation_client import run_level  # noqa: E402
from generation_llamacpp import find_build, paired_rounds  # noqa: E402
from generation_llamacpp import section as render_llamacpp  # noqa: E402
from generation_models import SIZES, archive, total_params, weight_bytes_per_token  # noqa: E402
from generation_report import bandwidth_bound, render, targets, write_results  # noqa: E402
from generation_torch import prompts  # noqa: E402
from serve_process import ServeProcess  # noqa: E402


def thread_env(threads: int) -> dict[str, str]:
    n = str(threads)
    return {**os.environ, "OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "PYTHONPATH": str(ROOT)}  # fmt: skip


def make_folder(family: str) -> Path:
    """The model folder, made in a child process (the client's process stays free of torch)."""
    code = f"from generation_models import make_folder; print(make_folder({family!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=BENCH, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def copy_bandwidth(mib: int = 512, rounds: int = 5) -> float:
    """Copy bandwidth in bytes/s (read + written, STREAM's copy): numpy copies of `mib` MiB, the best of 1 and 2
    threads (each copying its half), the median of `rounds`."""
    import numpy as np

    src = np.ones(mib * 2**20 // 8)
    dst = np.empty_like(src)
    best = 0.0
    for threads in (1, 2):
        parts = np.array_split(np.arange(src.size), threads)
        bounds = [(p[0], p[-1] + 1) for p in parts]
        times = []
        for _ in range(rounds):
            workers = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            times.append(time.perf_counter() - t0)
        best = max(best, 2 * src.nbytes / statistics.median(times))
    return best


def references(folder: Path, threads: int, rounds: int, prompt: int, new: int, timeout: float) -> dict[str, Any]:
    """The torch reference's figures; those measured within `timeout` seconds (`partial` says it ran out)."""
    cmd = [sys.executable, str(BENCH / "generation_torch.py"), str(folder), "--rounds", str(rounds),
           "--prompt", str(prompt), "--new", str(new)]  # fmt: skip
    try:
        out = subprocess.run(cmd, env=thread_env(threads), capture_output=True, text=True, timeout=timeout)
        stdout, partial = out.stdout, False
        if out.returncode != 0:
            raise RuntimeError(f"the torch reference failed:\n{out.stderr[-3000:]}")
    except subprocess.TimeoutExpired as e:
        stdout, partial = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), True
    lines = stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"threads": threads}
    result["partial"] = partial
    return result


def best_reference(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each reference figure at its best over the thread counts tried (the targets are judged against these)."""
    best = {k: v for r in runs.values() for k, v in r.items()}
    for key in list(best):
        values = {t: r[key] for t, r in runs.items() if key in r}
        if key.endswith("tokens_per_s"):
            t = max(values, key=lambda t: values[t])
        elif key == "prefill_s" or (key.endswith("_s") and not key.endswith("_all_s")):
            t = min(values, key=lambda t: values[t])
        else:
            continue
        best[key], best[f"{key}_threads"] = values[t], t
    return best


def engine_settings(family: str, max_model_len: int, kv_cache_bytes: int, dtype: str) -> dict[str, Any]:
    """The model-config's handler section; dtype "int8" is float32 with weight-only int8 products."""
    weights = {"dtype": "float32", "quantization": "int8"} if dtype == "int8" else {"dtype": dtype}
    return {"max_model_len": max_model_len, "max_num_seqs": 64, "max_num_batched_tokens": 512,
            "kv_cache_bytes": kv_cache_bytes, "block_size": 16, **weights}  # fmt: skip


def kv_block_bytes(folder: Path, itemsize: int, block_size: int = 16) -> int:
    config = json.loads((folder / "config.json").read_text())
    layers = config.get("num_hidden_layers", config.get("n_layer"))
    hidden = config.get("hidden_size", config.get("n_embd"))
    heads = config.get("num_attention_heads", config.get("n_head"))
    kv_heads = config.get("num_key_value_heads") or heads
    return 2 * layers * kv_heads * (hidden // heads) * block_size * itemsize


def start_server(folder: Path, name: str, settings: dict[str, Any], threads: int, tag: str) -> ServeProcess:
    store = OUT / "store" / tag
    models = archive(folder, store, name, settings, threads)
    env_threads = thread_env(threads)
    os.environ.update({k: env_threads[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return ServeProcess(OUT / "server" / tag, store, models, ready=f"/v2/models/{name}/ready")


def descendants_peak_rss(pid: int) -> int:
    """The largest VmHWM (peak resident bytes) among `pid`'s descendant processes (the worker)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    peak, todo = 0, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            continue
    return peak


def metrics_lines(server: ServeProcess, words: tuple[str, ...]) -> list[str]:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        return [f"(metrics unreadable: {e})"]
    return [line for line in text.splitlines() if not line.startswith("#") and any(w in line for w in words)]


def serve_levels(server: ServeProcess, name: str, levels: list[int], rounds: int, vocab: int, prompt: int,
                 new: int, min_requests: int) -> list[dict[str, Any]]:  # fmt: skip
    port = server.ports["inference"]
    asyncio.run(run_level(port, name, prompts(2, prompt, vocab, seed=99), 2, 8))  # warm-up
    per_level: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}
    for r in range(rounds):
        for c in levels:
            level = asyncio.run(run_level(port, name, prompts(max(c, min_requests), prompt, vocab, seed=r), c, new))
            summary = level.summary()
            per_level[c].append(summary)
            print(f"  round {r + 1} c={c}: {summary['tokens_per_s']:.1f} tok/s, TTFT p50 "
                  f"{summary['ttft_p50_ms']:.0f} ms, ITL p50 {summary['itl_p50_ms']:.0f} ms, errors "
                  f"{summary['errors']} {summary['errors_seen']}", flush=True)  # fmt: skip
    return [median_summary(per_level[c]) for c in levels]


def median_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, float):
            out[key] = statistics.median(r[key] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    out["tokens_per_s_all"] = [round(r["tokens_per_s"], 1) for r in runs]
    return out


def kv_run(folder: Path, name: str, threads: int, dtype: str, vocab: int, prompt: int, new: int,
           concurrency: int) -> dict[str, Any]:  # fmt: skip
    """16 sequences of prompt + new tokens against a KV budget of 4 such sequences: all must finish."""
    block = kv_block_bytes(folder, 4)  # serve's KV cache is float32 whatever the weights' dtype
    per_seq = -(-(prompt + new) // 16)
    budget = 4 * per_seq * block
    server = start_server(folder, name, engine_settings(name, prompt + new, budget, dtype), threads, f"{name}-kv")
    try:
        level = asyncio.run(run_level(server.ports["inference"], name, prompts(concurrency, prompt, vocab, 7),
                                      concurrency, new))  # fmt: skip
        metrics = metrics_lines(server, ("preempt", "kv_cache"))
        peak = descendants_peak_rss(server.proc.pid)
    finally:
        server.stop()
    log = (OUT / "server" / f"{name}-kv" / "server.log").read_text(errors="replace")
    blocks = [line.split("text_generation:", 1)[1].strip() for line in log.splitlines() if "KV blocks" in line]
    return {"budget_bytes": budget, "block_bytes": block, "blocks_needed_at_once": concurrency * per_seq,
            "worker_log": blocks[-1:] or ["(no KV line in the worker's log)"], "metrics": metrics[:8],
            "worker_peak_rss": peak, **level.summary()}  # fmt: skip


def loadgen(server: ServeProcess, name: str, folder: Path, prompt: int, new: int, concurrency: int) -> dict[str, Any]:
    from generation_loadgen import run_guidellm

    return run_guidellm(server.ports["inference"], name, folder, prompt, new, concurrency, OUT / "guidellm")


def bench_model(family: str, args: argparse.Namespace) -> dict[str, Any]:
    itemsize = {"float32": 4, "bfloat16": 2, "int8": 1}[args.dtype]  # the products' weights; the KV cache is float32
    folder = make_folder(family)
    vocab = SIZES[family][1]["vocab_size"]
    params, weight_bytes = weight_bytes_per_token(folder, itemsize)
    result: dict[str, Any] = {"model": family, "params": total_params(folder), "read_params": params,
                              "weight_bytes": weight_bytes, "dtype": args.dtype}  # fmt: skip
    print(
        f"{family}: {result['params'] / 1e6:.0f}M parameters, {weight_bytes / 2**20:.0f} MiB read per step", flush=True
    )
    result["copy_bandwidth"] = copy_bandwidth()
    print(f"  copy bandwidth {result['copy_bandwidth'] / 1e9:.1f} GB/s", flush=True)
    if not args.skip_torch:
        runs = {}
        for threads in dict.fromkeys([args.threads, *args.torch_threads]):
            runs[threads] = references(folder, threads, args.torch_rounds, args.prompt, args.new, args.torch_timeout)
            print(f"  torch ({threads} threads): "
                  f"{json.dumps({k: v for k, v in runs[threads].items() if not k.endswith('_all_s')})}",
                  flush=True)  # fmt: skip
        result["torch_runs"] = runs
        result["torch"] = best_reference(runs)
    max_len = int(SIZES[family][1].get("n_positions") or SIZES[family][1]["max_position_embeddings"])
    settings = engine_settings(family, max_len, args.kv_cache_mib * 2**20, args.dtype)
    server = start_server(folder, family, settings, args.threads, family)
    try:
        result["serve"] = serve_levels(server, family, args.concurrency, args.rounds, vocab, args.prompt, args.new,
                                       args.min_requests)  # fmt: skip
        result["worker_peak_rss"] = descendants_peak_rss(server.proc.pid)
        if args.llamacpp_build:
            llama_runs = [(w, int(t)) for w, t in (run.split(":") for run in args.llamacpp_runs)]
            levels = [c for c in args.concurrency if c <= 16]
            result["llamacpp"] = paired_rounds(args.llamacpp_build, folder, family, server.ports["inference"],
                                               llama_runs, levels, args.llamacpp_rounds, vocab, args.prompt, args.new,
                                               args.min_requests, OUT / "llamacpp")  # fmt: skip
        if not args.skip_loadgen:  # our client's c16 right before it: the same minute of the machine
            ours = asyncio.run(run_level(server.ports["inference"], family, prompts(32, args.prompt, vocab, seed=5), 16,
                                         args.new))  # fmt: skip
            result["loadgen"] = loadgen(server, family, folder, args.prompt, args.new, 16)
            result["loadgen"]["ours_before"] = ours.summary()
    finally:
        server.stop()
    if not args.skip_kv:
        result["kv"] = kv_run(folder, family, args.threads, args.dtype, vocab, args.prompt, args.new, 16)
    result["targets"] = targets(result)
    result["bandwidth"] = bandwidth_bound(result)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", nargs="+", choices=sorted(SIZES), default=["gpt2"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--rounds", type=int, default=3, help="repeats of every figure (medians)")
    p.add_argument("--min-requests", type=int, default=4, help="requests per level at least (else the concurrency)")
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "int8"],
        default="float32",
        help="the products' weights (int8: float32 with handler.quantization int8)",
    )
    p.add_argument("--kv-cache-mib", type=int, default=1024, help="the main run's KV budget (enough for 64 streams)")
    p.add_argument(
        "--torch-threads",
        type=int,
        nargs="*",
        default=[1],
        help="also run the references at these thread counts (each figure's best is the reference)",
    )
    p.add_argument("--torch-rounds", type=int, default=2, help="timed generate runs per reference figure")
    p.add_argument("--torch-timeout", type=float, default=900, help="seconds per reference process")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--skip-kv", action="store_true")
    p.add_argument("--skip-loadgen", action="store_true")
    p.add_argument("--llamacpp", type=Path, help="the llama.cpp build (default: bench/out/llamacpp when built)")
    p.add_argument("--skip-llamacpp", action="store_true")
    p.add_argument(
        "--llamacpp-runs",
        nargs="+",
        default=["f32:2", "f32:1", "bf16:1", "q8_0:1"],
        help="llama-server runs as WEIGHTS:THREADS (weights f32, bf16 or q8_0)",
    )
    p.add_argument("--llamacpp-rounds", type=int, default=3, help="paired rounds (serve, then llama.cpp)")
    p.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    p.add_argument("--from-json", action="store_true", help="only re-render the saved runs of --model")
    args = p.parse_args()
    args.llamacpp_build = None if args.skip_llamacpp or args.from_json else find_build(args.llamacpp)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    cpu += " (" + ", ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags) + ")"
    header = {"cpu": cpu, "cpus": os.cpu_count(), "load_start": os.getloadavg()[0], "python": platform.python_version(),
              "date": time.strftime("%Y-%m-%d"), "argv": " ".join(sys.argv[1:]), "threads": args.threads,
              "prompt": args.prompt, "new": args.new}  # fmt: skip
    results = []
    if args.from_json:  # re-render saved runs (bench/out/generation/MODEL.json) with this report code
        saved = [json.loads((OUT / f"{family}.json").read_text()) for family in args.model]
        header, results = saved[0]["header"], saved
    else:
        for family in args.model:
            results.append(bench_model(family, args))
            header["load_end"] = os.getloadavg()[0]
            (OUT / f"{family}.json").write_text(json.dumps({**results[-1], "header": header}, indent=1))
    for r in results:
        r["targets"] = targets(r)
    text = render(header, results)
    text += "".join(render_llamacpp(r) for r in results if "llamacpp" in r)
    print(text)
    if args.write:
        write_results(text, "+".join(args.model))


if __name__ == "__main__":
    main()
