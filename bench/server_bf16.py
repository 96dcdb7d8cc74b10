"""Issue 27's server measurement: ResNet-50 `.npy` under wrk, serve fp32 vs serve `dtype: bfloat16` vs TorchServe.

    .venv/bin/python bench/server_bf16.py                        # the table (about 15 minutes at a load of 3)
    .venv/bin/python bench/server_bf16.py --write                # and put it in bench/RESULTS.md (issue 27 section)
    .venv/bin/python bench/server_bf16.py --no-torchserve        # serve only

The same command is the AMX run: on a Xeon with AMX, serve's bf16 products run on tiles (`cpu_native.bf16_engine()`
says "amx"), on an AVX512-BF16 CPU without AMX on vdpbf16ps ("avx512_bf16"); the table names the CPU and the engine.
A new file rather than a case of bench/server.py: that one runs the anchor's own anchors.sh (MLP and ResNet-18, one
server after the other); this one needs three servers up at once, so that rounds alternate between them and each
sees the same load from whatever else runs on the machine, and bench/server.py is near the size limit already.

What runs: the torch twin of torchvision's ResNet-50 (tests/unit/zoo/twins_vision.py), seeded as bench/runtime.py
seeds it (torch.manual_seed(0), its norms randomized), saved once as a state_dict. serve loads it into serve.zoo's
resnet50 behind bench/serve_bench_handler.py, in one server as two models whose model-configs differ only in
`dtype: bfloat16`; TorchServe 0.12.0 (bench/torchserve_process.py: the anchor's venv recipe) loads it into
bench/ts_resnet50_model.py behind the anchor's handler (bench/ts_resnet50_handler.py), checked first to give the
twin's output. Both sides: batch_size 8, max_batch_delay 5 ms, 1 worker, 2 threads (serve: `torchrun:
OMP_NUMBER_THREADS: 2`, TorchServe: torch.set_num_threads(2)); bodies are the anchor's img.npy (float32
3x224x224, seed 0), answers top-5 `[index, logit]`. serve's workers warm their plans for batch 1-8 before ready
(`optimize_warmup_s`); each side then gets a wrk warm-up at each concurrency.
Rounds: each round runs wrk `-t1 -c<c> -d<s>s` (the anchor's post.lua) once per side and concurrency, the sides'
order rotated per round; the table gives medians over rounds of req/s, p50 and p99, and the 1-minute load
average around the rounds. Numerics: a few seeded images sent to every side, top-1 of serve bf16 against serve fp32
(and TorchServe against serve fp32), and the largest difference of the top-1 logit relative to its size.
Everything started is stopped by PID (serve: SIGTERM to its process, which stops its workers; TorchServe: the JVM,
then its workers), also on errors; every wait is bounded.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]  # bench's modules, and tests/ for the torch twin
from serve_process import ServeProcess  # noqa: E402
from server import ANCHOR, _batch_totals, write_payloads, wrk  # noqa: E402
from torchserve_process import TorchServeProcess, TorchServeUnavailable, build_mar, torchserve_python  # noqa: E402

OUT = ROOT / "bench" / "out" / "server_bf16"
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- server_bf16:begin -->", "<!-- server_bf16:end -->"
NPY = "application/octet-stream"
MODEL_CONFIG = "batchSize: 8\nmaxBatchDelay: 5\nminWorkers: 1\nmaxWorkers: 1\nstartupTimeout: {startup}\n" \
               "torchrun:\n  OMP_NUMBER_THREADS: 2\noptimize_warmup_s: {warmup}\n"  # fmt: skip


def weights(build: Path) -> Path:
    """The twin's seeded state_dict as a torch file; TorchServe's model checked to give the twin's output."""
    import torch
    import ts_resnet50_model

    from tests.unit.zoo import twins_vision
    from tests.unit.zoo.parity import randomize_norms

    path = build / "resnet50.pt"
    torch.manual_seed(0)
    twin = twins_vision.resnet50()
    randomize_norms(twin)
    twin.eval()
    ts_model = ts_resnet50_model.resnet50()
    ts_model.load_state_dict(twin.state_dict(), strict=True)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        if not torch.allclose(ts_model(x), twin(x), rtol=1e-5, atol=1e-5):
            raise SystemExit("bench/ts_resnet50_model.py does not give the torch twin's output")
    torch.save(twin.state_dict(), path)
    return path


def serve_archives(store: Path, pt: Path, warmup_s: int) -> None:
    from serve.archive import package

    store.mkdir(parents=True, exist_ok=True)
    for name, extra in (("resnet50_fp32", ""), ("resnet50_bf16", "dtype: bfloat16\n")):
        config = OUT / "build" / f"{name}.yaml"
        config.write_text(MODEL_CONFIG.format(startup=warmup_s + 600, warmup=warmup_s) + extra)
        package(name, "1.0", str(ROOT / "bench" / "serve_bench_handler.py"), serialized_file=pt, config_file=config,
                export_path=store, archive_format="zip-store", force=True)  # fmt: skip


def _get(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _post_npy(url: str, image: np.ndarray) -> list:
    buf = io.BytesIO()
    np.save(buf, image)
    request = urllib.request.Request(url, data=buf.getvalue(), headers={"Content-Type": NPY}, method="POST")
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def numerics(urls: dict[str, str], images: int) -> dict[str, str]:
    """Top-1 agreement with serve fp32 over seeded images, and the top-1 logit's largest relative difference."""
    rng = np.random.default_rng(1)
    batch = [rng.standard_normal((3, 224, 224), dtype=np.float32) for _ in range(images)]
    answers = {side: [_post_npy(url, x) for x in batch] for side, url in urls.items()}
    ref = answers["serve fp32"]
    margins = [abs(a[0][1] - a[1][1]) / abs(a[0][1]) for a in ref]
    found = {"top-1 margin of serve fp32 (smallest, relative)": f"{min(margins):.1e}"}
    for side, got in answers.items():
        if side == "serve fp32":
            continue
        agree = sum(g[0][0] == r[0][0] for g, r in zip(got, ref))
        rel = max(abs(g[0][1] - r[0][1]) / abs(r[0][1]) for g, r in zip(got, ref))
        found[side] = f"top-1 agrees with serve fp32 on {agree} / {images}; top-1 logit max rel diff {rel:.1e}"
    return found


def run_rounds(urls: dict[str, str], body: Path, concs: list[int], rounds: int, secs: int, warm: int,
               metrics: dict[str, tuple[str, str]]) -> dict:  # fmt: skip
    """Warm-up, then the rounds; `metrics`: per serve side its /metrics URL and model, for the mean batch size."""
    sides = list(urls)
    for side in sides:
        for c in concs:
            wrk(urls[side], body, NPY, c, warm)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(s, c): [] for s in sides for c in concs}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:
            for c in concs:
                before = _batch_totals(*metrics[side]) if side in metrics else None
                result = wrk(urls[side], body, NPY, c, secs)
                if before is not None:
                    after = _batch_totals(*metrics[side])
                    result["batch"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
                runs[(side, c)].append(result)
                loads.append(os.getloadavg()[0])
                print(
                    f"round {r + 1} {side} c{c}: {result['rps']:.1f} req/s p50 {result['p50_ms']:.0f} ms "
                    f"p99 {result['p99_ms']:.0f} ms errors {result['errors']:.0f} (load {loads[-1]:.1f})",
                    flush=True,
                )
    return {"runs": runs, "loads": loads}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "n/a (no answer in the run)"


def _per_round(a: list[dict[str, float]], b: list[dict[str, float]]) -> str:
    """Ratios of the same round (both sides under that round's load): their median and range."""
    ratios = [x["rps"] / y["rps"] for x, y in zip(a, b) if y["rps"] > 0]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else "n/a"


def table(measured: dict, concs: list[int], info: dict[str, str], checks: dict[str, str]) -> str:
    runs = measured["runs"]
    sides = list(dict.fromkeys(side for side, _ in runs))
    med = {key: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_ms", "p99_ms", "errors")}
           for key, rs in runs.items()}  # fmt: skip
    lines = [info["head"], "", "| side | c | req/s | p50 ms | p99 ms | mean batch | errors |",
             "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for c in concs:
        for side in sides:
            m = med[(side, c)]
            batches = [r["batch"] for r in runs[(side, c)] if "batch" in r]
            batch = f"{statistics.median(batches):.2f}" if batches else "-"
            lines.append(f"| {side} | {c} | {m['rps']:.1f} | {m['p50_ms']:.0f} | {m['p99_ms']:.0f} | {batch} | "
                         f"{m['errors']:.0f} |")  # fmt: skip
    heads = " | ".join(f"c{c} of the medians | c{c} per round: median [range]" for c in concs)
    lines += ["", f"| req/s ratio | {heads} |", "|---|" + "---:|---:|" * len(concs)]
    pairs = [("serve bf16 / serve fp32", "serve bf16", "serve fp32"), ("serve bf16 / TorchServe", "serve bf16",
             "TorchServe"), ("serve fp32 / TorchServe", "serve fp32", "TorchServe")]  # fmt: skip
    for label, a, b in pairs:
        if a in sides and b in sides:
            cells = [cell for c in concs for cell in (_ratio(med[(a, c)]["rps"], med[(b, c)]["rps"]),
                                                      _per_round(runs[(a, c)], runs[(b, c)]))]  # fmt: skip
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", *(f"- {k}: {v}" for k, v in checks.items())]
    return "\n".join(lines)


def describe_machine() -> tuple[str, str]:
    from serve.backend import cpu_libraries, cpu_native

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    flags = set(re.findall(r"\S+", next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                                         if line.startswith("flags")), "")))  # fmt: skip
    have = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags]
    engine = cpu_native.bf16_engine() or "none"
    amx = cpu_libraries.amx_status()
    return f"{cpu} ({os.cpu_count()} CPUs; {', '.join(have) or 'no AVX-512'})", f"{engine} ({amx})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=int, default=20, help="wrk duration per side, concurrency and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 1])
    p.add_argument("--warm-seconds", type=int, default=10, help="wrk warm-up per side and concurrency")
    p.add_argument("--optimize-warmup-s", type=int, default=180, help="serve's plan warm-up budget (batch 1-8)")
    p.add_argument("--images", type=int, default=8, help="seeded images for the top-1 check")
    p.add_argument("--no-torchserve", action="store_true")
    p.add_argument("--ts-work", type=Path, default=Path("/tmp/ts-bf16"), help="TorchServe's copy of the anchor")
    p.add_argument("--ts-venv", type=Path, default=Path("/tmp/ts-anchor/.venv"), help="reused when it works")
    p.add_argument("--write", action="store_true", help="replace the table in bench/RESULTS.md")
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/server_bf16.py needs wrk (Debian: apt-get install wrk)")
    (OUT / "build").mkdir(parents=True, exist_ok=True)
    pt = weights(OUT / "build")
    serve_archives(OUT / "store", pt, args.optimize_warmup_s)
    write_payloads(OUT / "payloads")
    body = OUT / "payloads" / "img.npy"
    cpu, engine = describe_machine()
    load0 = os.getloadavg()
    checks: dict[str, str] = {}
    server = ts = None
    try:
        ts_python = None
        if not args.no_torchserve:
            try:
                shutil.rmtree(args.ts_work, ignore_errors=True)
                shutil.copytree(ANCHOR, args.ts_work, copy_function=shutil.copyfile)
                ts_python = torchserve_python(args.ts_work, args.ts_venv)
                here = ROOT / "bench"
                build_mar(ts_python, args.ts_work / "model_store", "resnet50", pt, here / "ts_resnet50_handler.py",
                          [args.ts_work / "handlers" / "bench_handler.py", here / "ts_resnet50_model.py"])  # fmt: skip
            except (TorchServeUnavailable, OSError) as e:
                checks["TorchServe"] = f"not run: {e}"
                ts_python = None
        started = time.monotonic()
        server = ServeProcess(OUT / "serve", OUT / "store", "all", ready="/v2/models/resnet50_bf16/ready",
                              start_seconds=2 * args.optimize_warmup_s + 1200, max_request_size=20000000,
                              job_queue_size=1000)  # fmt: skip
        ServeProcess._wait_ready(server, "/v2/models/resnet50_fp32/ready", args.optimize_warmup_s + 600)
        print(f"serve ready in {time.monotonic() - started:.0f} s", flush=True)
        base = f"http://127.0.0.1:{server.ports['inference']}/predictions"
        urls = {"serve fp32": f"{base}/resnet50_fp32", "serve bf16": f"{base}/resnet50_bf16"}
        if ts_python is not None:
            try:
                ts = TorchServeProcess(ts_python, args.ts_work, args.ts_work / "model_store")
                ts.register("resnet50", 8, 5, register_s=600)
                urls["TorchServe"] = f"http://127.0.0.1:{ts.ports['inference']}/predictions/resnet50"
            except (TorchServeUnavailable, OSError) as e:
                checks["TorchServe"] = f"not run: {e}"
        checks.update(numerics(urls, args.images))
        print("\n".join(f"{k}: {v}" for k, v in checks.items()), flush=True)
        metrics_url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
        metrics = {side: (metrics_url, url.rsplit("/", 1)[1]) for side, url in urls.items() if side.startswith("serve")}
        measured = run_rounds(urls, body, args.concurrency, args.rounds, args.seconds, args.warm_seconds, metrics)
    finally:
        if ts is not None:
            ts.stop()
        if server is not None:
            server.stop()
    loads = measured["loads"]
    command = "python bench/server_bf16.py " + " ".join(sys.argv[1:])
    head = (f"`{command.strip()}` on {datetime.date.today().isoformat()}: {cpu}; serve's bf16 engine: {engine}. "
            f"ResNet-50 (torchvision layout, seeded weights) with a `.npy` float32 3x224x224 body; batch_size 8, "
            f"max_batch_delay 5 ms, 1 worker, 2 threads on every side; wrk -t1 -d{args.seconds}s at each concurrency, "
            f"{args.rounds} rounds alternating the sides, medians. 1-minute load average {load0[0]:.1f} before, "
            f"{min(loads):.1f}-{max(loads):.1f} through the rounds (the machine is shared).")  # fmt: skip
    text = table(measured, args.concurrency, {"head": head}, checks)
    print(text)
    (OUT / "table.md").write_text(text + "\n")
    (OUT / "runs.json").write_text(json.dumps([[side, c, r] for (side, c), rs in measured["runs"].items() for r in rs]))
    if args.write:
        old = RESULTS.read_text()
        if BEGIN not in old:
            sys.exit(f"bench/RESULTS.md has no {BEGIN} marker; the table is in {OUT / 'table.md'}")
        head_text, _, rest = old.partition(BEGIN)
        RESULTS.write_text(f"{head_text}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


if __name__ == "__main__":
    main()
