"""The generative metrics on a real server's /metrics (issue 25, "Metrics"): the tinychat archive as `make run`
builds it, driven by the openai SDK. After whole and streamed requests the histograms count one observation per
request and sum the usage the API reported; the success counter counts by finish reason; and once every stream has
ended, also streams whose clients left mid-stream, num_requests_running is back to 0 (their cancel freed them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from examples.build_model_store import build, tinychat
from tests.integration.server import ServerProcess

openai = pytest.importorskip("openai")

LABELS = {"model_name": "tinychat"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base: Path = tmp_path_factory.mktemp("generation_metrics")
    store = base / "store"
    store.mkdir()
    build(tinychat(), store, force=True)
    proc = ServerProcess(base / "run", store, "--ncs", "--models", "tinychat=tinychat.mar").start()
    try:
        yield proc
    finally:
        proc.stop()


def _samples(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the page whose labels include model_name=tinychat, by (name, labels without Hostname)."""
    page = httpx.get(server.metrics + "/metrics", timeout=60).text
    out = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            if s.labels.get("model_name") == "tinychat":
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("Hostname", "model_name")))
                out[(s.name, labels)] = s.value
    return out


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples.get(("serve:" + name, tuple(sorted(labels.items()))), 0.0)


def _settled(server: ServerProcess, requests: int) -> dict:
    """The samples once `requests` requests are counted and none runs; bounded (the records of a finish travel
    with that request's last frame, so this is quick unless the machine is very loaded)."""
    deadline, samples = time.monotonic() + 120, {}
    for _ in range(1200):
        samples = _samples(server)
        done = _value(samples, "e2e_request_latency_seconds_count") >= requests
        if (done and _value(samples, "num_requests_running") == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return samples


def test_metrics_count_requests_sum_usage_and_fall_back_to_zero(server: ServerProcess) -> None:
    client = openai.OpenAI(base_url=server.inference + "/v1", api_key=server.key("inference"), timeout=120,
                           max_retries=0)  # fmt: skip
    usage, reasons = [], []
    for question in ("Count to 5.", "Hello!"):
        answer = client.chat.completions.create(model="tinychat", messages=[{"role": "user", "content": question}],
                                                temperature=0, max_tokens=30)  # fmt: skip
        usage.append(answer.usage)
        reasons.append(answer.choices[0].finish_reason)
    stream = client.completions.create(model="tinychat", prompt="Count", max_tokens=7, temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})  # fmt: skip
    chunks = list(stream)
    usage.append(chunks[-1].usage)
    reasons.append("length")
    assert chunks[-1].usage.completion_tokens == 7

    samples = _settled(server, 3)
    for name in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
                 "request_prefill_time_seconds", "request_decode_time_seconds", "request_prompt_tokens",
                 "request_generation_tokens"):  # fmt: skip
        assert _value(samples, name + "_count") == 3, name
    generated, prompted = sum(u.completion_tokens for u in usage), sum(u.prompt_tokens for u in usage)
    assert _value(samples, "request_generation_tokens_sum") == generated
    assert _value(samples, "generation_tokens_total") == generated
    assert _value(samples, "request_prompt_tokens_sum") == prompted == _value(samples, "prompt_tokens_total")
    assert _value(samples, "inter_token_latency_seconds_count") == generated - 3  # a gap per token after the first
    for reason in ("stop", "length"):
        assert _value(samples, "request_success_total", finished_reason=reason) == reasons.count(reason), reason
    assert _value(samples, "request_success_total", finished_reason="abort") == 0
    assert _value(samples, "time_to_first_token_seconds_bucket", le="2560.0") == 3  # vLLM's buckets
    assert _value(samples, "request_generation_tokens_bucket", le="100.0") == 3
    assert _value(samples, "num_requests_waiting") == 0 and _value(samples, "kv_cache_usage_perc") == 0
    assert _value(samples, "prefix_cache_queries_total") >= prompted - 1  # the prompts were looked up

    with httpx.Client(timeout=120) as http:  # two streams whose clients leave after their first chunk
        body = {"model": "tinychat", "prompt": "Count", "max_tokens": 400, "stream": True, "ignore_eos": True}
        for _ in range(2):
            with http.stream("POST", server.inference + "/v1/completions", json=body,
                             headers={"Authorization": f"Bearer {server.key('inference')}"}) as response:  # fmt: skip
                assert response.status_code == 200
                next(response.iter_lines())
    samples = _settled(server, 5)
    assert _value(samples, "e2e_request_latency_seconds_count") == 5
    assert _value(samples, "num_requests_running") == 0 and _value(samples, "kv_cache_usage_perc") == 0
    finished = {r: _value(samples, "request_success_total", finished_reason=r) for r in ("stop", "length", "abort")}
    # each stream that left was cancelled ("abort"), unless it reached its 400 tokens first on a fast machine
    assert finished["abort"] + finished["length"] - reasons.count("length") == 2
    assert finished["stop"] == reasons.count("stop")
