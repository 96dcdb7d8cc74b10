"""llama.cpp's llama-server beside serve (issue 25, "Measure": the CPU anchor), for bench/generation.py --llamacpp.

    build = find_build(Path("bench/out/llamacpp"))        # made by bench/llamacpp_build.sh
    result = paired_rounds(build, folder, "gpt2", serve_port, [("bf16", 2), ("bf16", 1)], levels=[1, 16], ...)
    model_result["llamacpp"] = result; print(section(model_result))

Decisions:
- The same folder serve loads, converted to GGUF by llama.cpp's own converter (bench/llamacpp_convert.py) once per
  weight type: f32 (serve's bench dtype, the like-for-like row), bf16 and Q8_0 (llama.cpp's usual CPU choices).
- `llama-server -m M.gguf -np 16 -t T -tb T -c 16*ctx` on 127.0.0.1 port 0; the port it bound is read from its
  log ("listening on http://127.0.0.1:PORT") and /health must answer 200 before it counts as started. Otherwise
  llama.cpp's defaults (continuous batching, prompt cache, flash attention auto), as its users run it; serve runs
  with its prefix cache on, so both may reuse a prompt seen before.
- The load is bench/generation_client.py's, unchanged: streaming /v1/completions, the prompts as token ids,
  greedy, `ignore_eos`, max_tokens 128, `stream_options.include_usage` (llama-server reads all of these).
- Threads: 2 as the issue says, and also 1: on this shared 2-core machine ggml's 2-thread pool (its threads wait
  for each other at every op's barrier) ran GPT-2 f32 at c1 6x slower than 1 thread (3.9 vs 22.9 tokens/s, load
  average 3.5), the same trap as torch's OpenMP pool (bench/generation.py's docstring); each run names its threads.
- Every request on a new connection (run_level's force_close), on both sides.
- Prompts new to both servers in every level (seeded by round and concurrency), so neither prompt cache hits.
- Paired rounds on a shared, noisy machine: in every round serve's level runs, then llama-server's at the same
  concurrency, so each pair sees about the same minute of the machine; the figures are medians over rounds and the
  ratios (serve / llama.cpp) medians of the per-round ratios. Both servers stay up; the idle one waits on sockets.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from generation_client import run_level
from generation_torch import prompts

BENCH = Path(__file__).resolve().parent
DEFAULT_BUILD = BENCH / "out" / "llamacpp"
OUTTYPES = ("f32", "bf16", "q8_0")


def find_build(path: Path | None) -> dict[str, Any] | None:
    """The build bench/llamacpp_build.sh recorded under `path` (its build.json), or None when there is none."""
    info = (path or DEFAULT_BUILD) / "build.json"
    if not info.is_file():
        if path is not None:
            raise SystemExit(f"no llama.cpp build at {path}: run `bash bench/llamacpp_build.sh` first")
        return None
    build: dict[str, Any] = json.loads(info.read_text())
    build["root"] = str(info.parent)
    return build


def convert(build: dict[str, Any], folder: Path, family: str, outtype: str) -> Path:
    """`folder` as GGUF of `outtype` (cached under the build's models/: delete it after changing the folder)."""
    out = Path(build["root"]) / "models" / f"{family}-{outtype}.gguf"
    if out.is_file() and out.stat().st_mtime > (folder / "model.safetensors").stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    llama = str(Path(build["convert"]).parent)
    cmd = [sys.executable, str(BENCH / "llamacpp_convert.py"), llama, str(folder), str(out) + ".part",
           "--outtype", outtype]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"GGUF conversion failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    Path(str(out) + ".part").rename(out)
    return out


class LlamaServer:
    """One llama-server process on 127.0.0.1, on the port it chose; `stop()` ends it."""

    def __init__(self, binary: str, gguf: Path, alias: str, slots: int, threads: int, ctx_per_slot: int,
                 log: Path, start_seconds: float = 600.0) -> None:  # fmt: skip
        self.cmd = [binary, "-m", str(gguf), "--alias", alias, "-np", str(slots), "-t", str(threads),
                    "-tb", str(threads), "-c", str(slots * ctx_per_slot), "--host", "127.0.0.1", "--port", "0",
                    "--no-webui"]  # fmt: skip
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(self.cmd, stdout=f, stderr=subprocess.STDOUT)
        self.port = self._wait_ready(start_seconds)

    def _wait_ready(self, seconds: float) -> int:
        deadline, port = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}; see {self.log}")
            if not port:
                found = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", self.log.read_bytes())
                port = int(found.group(1)) if found else 0
            if port:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
                        if r.status == 200:
                            return port
                except OSError:
                    pass  # 503 while the model loads
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama-server not ready within {seconds:.0f} s; see {self.log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def version(self) -> str:
        """`llama-server --version`'s first line ("version: 0.5.0-dev (build 1, commit 0c1e570)")."""
        out = subprocess.run([self.cmd[0], "--version"], capture_output=True, text=True, timeout=60)
        lines = (out.stdout + out.stderr).strip().splitlines()
        return lines[0].removeprefix("version: ") if lines else "(no version)"


def level(port: int, name: str, concurrency: int, round_: int, vocab: int, prompt: int, new: int,
          min_requests: int) -> dict[str, Any]:  # fmt: skip
    ids = prompts(max(concurrency, min_requests), prompt, vocab, seed=1000 * (round_ + 1) + concurrency)
    return asyncio.run(run_level(port, name, ids, concurrency, new, force_close=True)).summary()


def paired_rounds(build: dict[str, Any], folder: Path, family: str, serve_port: int, runs: list[tuple[str, int]],
                  levels: list[int], rounds: int, vocab: int, prompt: int, new: int, min_requests: int,
                  workdir: Path) -> dict[str, Any]:  # fmt: skip
    """Per (weight type, threads) in `runs`: llama-server up beside serve, then each round serve's and llama.cpp's
    levels in turn."""
    from generation import median_summary

    result: dict[str, Any] = {"sdist": build["sdist"], "slots": 16, "rounds": rounds, "runs": {}}
    for outtype, threads in runs:
        gguf = convert(build, folder, family, outtype)
        server = LlamaServer(build["server"], gguf, family, 16, threads, prompt + new + 96,
                             workdir / f"{family}-{outtype}-t{threads}.log")  # fmt: skip
        try:
            asyncio.run(run_level(server.port, family, prompts(2, prompt, vocab, seed=99), 2, 8))  # warm-up
            paired: dict[int, dict[str, list[dict[str, Any]]]] = {c: {"serve": [], "llamacpp": []} for c in levels}
            for r in range(rounds):
                for c in levels:
                    for who, port in (("serve", serve_port), ("llamacpp", server.port)):
                        s = level(port, family, c, r, vocab, prompt, new, min_requests)
                        paired[c][who].append(s)
                        print(f"  llama.cpp {outtype} t{threads} round {r + 1} c={c} {who}: "
                              f"{s['tokens_per_s']:.1f} tok/s, TTFT p50 {s['ttft_p50_ms']:.0f} ms, ITL p50 "
                              f"{s['itl_p50_ms']:.1f} ms, tokens {s['tokens_min_max']}, errors {s['errors']} "
                              f"{s['errors_seen']}",
                              flush=True)  # fmt: skip
            rows = []
            for c in levels:
                pairs = list(zip(paired[c]["serve"], paired[c]["llamacpp"]))
                rows.append({"concurrency": c, "serve": median_summary(paired[c]["serve"]),
                             "llamacpp": median_summary(paired[c]["llamacpp"]),
                             "ratio_tokens_per_s": statistics.median(a["tokens_per_s"] / b["tokens_per_s"]
                                                                     for a, b in pairs if b["tokens_per_s"]),
                             "ratio_ttft_p50": statistics.median(a["ttft_p50_ms"] / b["ttft_p50_ms"]
                                                                 for a, b in pairs if b["ttft_p50_ms"]),
                             "ratio_itl_p50": statistics.median(a["itl_p50_ms"] / b["itl_p50_ms"]
                                                                for a, b in pairs if b["itl_p50_ms"])})  # fmt: skip
            result["runs"][f"{outtype}, {threads} thread{'s' if threads > 1 else ''}"] = {
                "gguf_bytes": gguf.stat().st_size, "rows": rows}  # fmt: skip
            result["build_info"] = server.version()
        finally:
            server.stop()
    return result


def rounds_of(summary: dict[str, Any]) -> str:
    return ", ".join(f"{x:g}" for x in summary.get("tokens_per_s_all", []))


def section(model: dict[str, Any]) -> str:
    """The llama.cpp paragraph and table of one model's result (bench/generation.py's), to follow its report."""
    result, rounds = model["llamacpp"], model["llamacpp"]["rounds"]
    lines = ["", "", f"**{model['model']}** beside llama.cpp", "",
             f"llama.cpp anchor: `llama-server` built from the {result['sdist']} sdist's vendored llama.cpp "
             f"(bench/llamacpp_build.sh: CPU, Release, GGML_NATIVE; version {result.get('build_info', '?')}), GGUF "
             f"converted from the same folder by its convert_hf_to_gguf.py, {result['slots']} parallel slots, "
             f"threads as named (serve: 2); the same client and prompts, paired rounds ({rounds}: serve's level, "
             "then llama.cpp's), medians (tokens/s: each round's in brackets); ratios are serve / llama.cpp, "
             "medians of the per-round ratios "
             "(tokens/s: above 1 is serve faster; TTFT and ITL: below 1 is serve faster).", ""]  # fmt: skip
    lines += ["| llama.cpp weights, threads | GGUF MiB | concurrency | serve tok/s | llama.cpp tok/s | tok/s ratio "
              "| serve TTFT p50 ms | llama.cpp TTFT p50 ms | TTFT ratio | serve ITL p50 ms | llama.cpp ITL p50 ms "
              "| ITL ratio | ITL p99 ms (serve, llama.cpp) | errors (serve, llama.cpp) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for outtype, run in result["runs"].items():
        for row in run["rows"]:
            s, g = row["serve"], row["llamacpp"]
            lines.append(f"| {outtype} | {run['gguf_bytes'] / 2**20:.0f} | {row['concurrency']} | "
                         f"{s['tokens_per_s']:.1f} ({rounds_of(s)}) | {g['tokens_per_s']:.1f} ({rounds_of(g)}) | "
                         f"{row['ratio_tokens_per_s']:.2f} | "
                         f"{s['ttft_p50_ms']:.0f} | {g['ttft_p50_ms']:.0f} | {row['ratio_ttft_p50']:.2f} | "
                         f"{s['itl_p50_ms']:.1f} | {g['itl_p50_ms']:.1f} | {row['ratio_itl_p50']:.2f} | "
                         f"{s['itl_p99_ms']:.0f}, {g['itl_p99_ms']:.0f} | {s['errors']}, {g['errors']} |")  # fmt: skip
    lines += ["", f"serve's dtype in these rows: {model['dtype']}."]
    return "\n".join(lines)
