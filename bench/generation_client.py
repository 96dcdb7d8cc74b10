"""The generative benchmark's client: streaming /v1/completions requests at a fixed concurrency, timed per SSE chunk.

    level = asyncio.run(run_level(port, "gpt2", prompts, concurrency=16, new_tokens=128))
    level.summary()   # aggregate tokens/s, TTFT and inter-token latency p50/p99, per-request tokens/s

Decisions:
- `concurrency` clients, each sending its next request as soon as its last one finished (a closed loop, as
  vLLM's and aiperf's concurrency mode); the level's wall time runs from the first send to the last [DONE].
- Requests are greedy (temperature 0), `ignore_eos` (vLLM's extra field) and `max_tokens` = 128, prompts as token
  ids; `stream_options.include_usage` gives the completion tokens counted by the server, which must equal 128.
- TTFT is send -> first chunk with a choice; inter-token latency the gaps between successive choice chunks (one
  chunk per engine step per request, so one per token but for any text the detokenizer holds back); per-request
  throughput completion tokens / end-to-end time, and TPOT (end-to-end - TTFT) / (tokens - 1), vLLM's definition.
- aiohttp (in the project's venv) with an unlimited connector: one connection per stream, no pooling limit.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestTiming:
    sent: float
    chunks: list[float] = field(default_factory=list)
    done: float = 0.0
    tokens: int = 0
    error: str | None = None


@dataclass
class Level:
    concurrency: int
    wall_s: float
    requests: list[RequestTiming]

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.requests if r.error is None and r.chunks]
        ttft = [r.chunks[0] - r.sent for r in ok]
        itl = [b - a for r in ok for a, b in zip(r.chunks, r.chunks[1:])]
        tokens = sum(r.tokens for r in ok)
        return {"concurrency": self.concurrency, "requests": len(self.requests), "errors": len(self.requests) - len(ok),
                "errors_seen": sorted({r.error for r in self.requests if r.error})[:3],
                "completion_tokens": tokens, "tokens_min_max": [min((r.tokens for r in ok), default=0),
                                                                max((r.tokens for r in ok), default=0)],
                "wall_s": self.wall_s, "tokens_per_s": tokens / self.wall_s if self.wall_s else 0.0,
                "ttft_p50_ms": pct(ttft, 50) * 1e3, "ttft_p99_ms": pct(ttft, 99) * 1e3,
                "itl_p50_ms": pct(itl, 50) * 1e3, "itl_p99_ms": pct(itl, 99) * 1e3,
                "request_tokens_per_s_p50": statistics.median(r.tokens / (r.done - r.sent) for r in ok) if ok else 0.0,
                "tpot_p50_ms": statistics.median((r.done - r.chunks[0]) / max(1, r.tokens - 1) for r in ok) * 1e3
                if ok else 0.0}  # fmt: skip


def pct(values: list[float], q: float) -> float:
    """The q-th percentile (linear interpolation, numpy's default); 0 for no values."""
    if not values:
        return 0.0
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


async def one_request(session: Any, url: str, body: dict[str, Any], timeout: float) -> RequestTiming:
    timing = RequestTiming(sent=time.perf_counter())
    try:
        async with asyncio.timeout(timeout), session.post(url, json=body) as response:
            if response.status != 200:
                timing.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return timing
            async for raw in response.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    timing.error = str(chunk["error"])[:200]
                if chunk.get("choices"):
                    timing.chunks.append(time.perf_counter())
                if chunk.get("usage"):
                    timing.tokens = chunk["usage"]["completion_tokens"]
    except (TimeoutError, OSError) as e:  # aiohttp.ClientError is an OSError
        timing.error = f"{type(e).__name__}: {e}"
    timing.done = time.perf_counter()
    return timing


async def run_level(port: int, model: str, prompts: list[list[int]], concurrency: int, new_tokens: int,
                    timeout: float = 1800.0, force_close: bool = False) -> Level:  # fmt: skip
    """Send every prompt once, `concurrency` at a time (closed loop); the timings of each. `force_close`: a new
    connection per request (llama-server closes idle keep-alive connections, which aiohttp may then reuse)."""
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/completions"
    queue = list(enumerate(prompts))
    results: list[RequestTiming | None] = [None] * len(prompts)

    async def client(session: Any) -> None:
        while queue:
            i, ids = queue.pop(0)
            body = {"model": model, "prompt": ids, "max_tokens": new_tokens, "temperature": 0, "stream": True,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
            results[i] = await one_request(session, url, body, timeout)

    connector = aiohttp.TCPConnector(limit=0, force_close=force_close)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return Level(concurrency, wall, [r for r in results if r is not None])
