"""guidellm (vLLM's load generator for OpenAI-compatible servers, from PyPI) against the benchmark's server.

    python3 -m venv bench/out/loadgen/guidellm-venv && bench/out/loadgen/guidellm-venv/bin/pip install guidellm
    summary = run_guidellm(port, "gpt2", folder, prompt=32, new=128, concurrency=16, out=Path(...))

Decisions:
- guidellm lives in its own venv under bench/out (it pins its own torch and transformers; the project's .venv is
  left alone); the benchmark runs it when that venv exists and says so when it does not.
- One scenario file: the openai_http backend on /v1/completions, a concurrent profile of `concurrency` streams,
  synthetic text of `prompt` tokens (the folder's tokenizer, offline) and `new` output tokens (guidellm then sends
  max_tokens and ignore_eos itself), 2 x concurrency requests. guidellm checks the server with GET /health, which
  serve answers as vLLM does (serve/frontends/http/routers/ping.py).
- Streamed first, with the `stream_options` guidellm sends (vLLM's `continuous_usage_stats` among them, which serve
  honours). Should every streamed request fail, the server's answer to that body is recorded and the run is repeated
  without streaming (throughput and end-to-end latency; no TTFT or ITL then), so the report says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

VENV = Path(__file__).resolve().parent / "out" / "loadgen" / "guidellm-venv"


def scenario(port: int, name: str, folder: Path, prompt: int, new: int, concurrency: int, out: Path,
             stream: bool) -> dict[str, Any]:  # fmt: skip
    backend = {"kind": "openai_http", "target": f"http://127.0.0.1:{port}", "model": name,
               "request_format": "/v1/completions", "stream": stream}  # fmt: skip
    return {"spec": {"backend": backend, "profile": {"kind": "concurrent", "streams": [concurrency]},
                     "data": [{"kind": "synthetic_text", "prompt_tokens": prompt, "output_tokens": new}],
                     "tokenizer": {"kind": "hf_auto", "model": str(folder)},
                     "constraints": [{"kind": "max_requests", "count": 2 * concurrency}],
                     "outputs": [{"kind": "json", "path": str(out)}]}}  # fmt: skip


def probe(port: int, name: str) -> str:
    """The server's answer to guidellm's streamed body (its stream_options), for the report."""
    body = {"model": name, "prompt": "a b c", "max_tokens": 2, "stop": None, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read().decode()[:300]}"


def one_run(port: int, name: str, folder: Path, prompt: int, new: int, concurrency: int, workdir: Path,
            stream: bool) -> dict[str, Any]:  # fmt: skip
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"guidellm-{'stream' if stream else 'whole'}.json"
    out.unlink(missing_ok=True)
    path = workdir / f"scenario-{'stream' if stream else 'whole'}.json"
    path.write_text(json.dumps(scenario(port, name, folder, prompt, new, concurrency, out, stream), indent=1))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [str(VENV / "bin" / "guidellm"), "run", "--scenario", str(path), "--disable-console"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0 or not out.is_file():
        return {"error": f"guidellm exited {done.returncode}: {(done.stderr or done.stdout)[-500:]}"}
    bench = json.loads(out.read_text())["benchmarks"][0]
    m = bench["metrics"]

    def stat(key: str, what: str = "median") -> float:
        s = m[key]["successful"]
        return float(s["percentiles"]["p99"] if what == "p99" else s[what])

    return {"stream": stream, "requests": m["request_totals"], "duration_s": bench["duration"],
            "output_tokens": stat("output_token_count", "total_sum"),
            "output_tokens_per_s_mean": stat("output_tokens_per_second", "mean"),
            "request_latency_p50_s": stat("request_latency"), "ttft_p50_ms": stat("time_to_first_token_ms"),
            "ttft_p99_ms": stat("time_to_first_token_ms", "p99"), "itl_p50_ms": stat("inter_token_latency_ms"),
            "tpot_p50_ms": stat("time_per_output_token_ms"), "json": str(out)}  # fmt: skip


def run_guidellm(port: int, name: str, folder: Path, prompt: int, new: int, concurrency: int,
                 workdir: Path) -> dict[str, Any]:  # fmt: skip
    if not (VENV / "bin" / "guidellm").is_file():
        return {"summary": f"guidellm is not installed (no {VENV}); see bench/generation_loadgen.py to install it"}
    version = subprocess.run([str(VENV / "bin" / "guidellm"), "--version"], capture_output=True, text=True)
    result: dict[str, Any] = {"version": version.stdout.strip()}
    streamed = one_run(port, name, folder, prompt, new, concurrency, workdir, stream=True)
    result["streamed"] = streamed
    run = streamed
    if "error" in streamed or streamed["requests"]["successful"] == 0:
        result["streamed_failure"] = probe(port, name)
        run = result["whole"] = one_run(port, name, folder, prompt, new, concurrency, workdir, stream=False)
    result["summary"] = summarize(result, run, concurrency)
    return result


def summarize(result: dict[str, Any], run: dict[str, Any], concurrency: int) -> str:
    head = f"{result['version']}, concurrent profile of {concurrency} streams"
    if "error" in run:
        return f"{head}: failed ({run['error']})"
    text = (f"{head}, {'streamed' if run['stream'] else 'not streamed'}: {run['requests']['successful']} of "
            f"{run['requests']['total']} requests succeeded, {run['output_tokens']:.0f} output tokens in "
            f"{run['duration_s']:.1f} s = {run['output_tokens'] / run['duration_s']:.1f} tokens/s "
            f"(guidellm's mean output tokens/s {run['output_tokens_per_s_mean']:.1f}), request latency p50 "
            f"{run['request_latency_p50_s']:.1f} s, TPOT p50 {run['tpot_p50_ms']:.0f} ms")  # fmt: skip
    if run["stream"]:
        text += (
            f", TTFT p50 {run['ttft_p50_ms']:.0f} ms (p99 {run['ttft_p99_ms']:.0f}), ITL p50 {run['itl_p50_ms']:.0f}"
        )
    if "streamed_failure" in result:
        text += f". Streamed, every request failed: serve answered guidellm's body with {result['streamed_failure']}"
    return text + "."
