"""The metrics app: Prometheus text with TorchServe's names, `?name[]=` filtering, metrics_mode, counting."""

from __future__ import annotations

import re

from tests.unit.frontends.fakes import Server, run


def _value(page: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", page, re.M)
    assert match, f"{sample} not in the page"
    return float(match.group(1))


def test_metrics_count_requests_and_responses(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"x")
        await server.inference.post("/predictions/mnist/2.0", content=b"x")
        await server.inference.post("/predictions/nope", content=b"x")  # unknown models are not counted
        r = await server.metrics_api.get("/metrics")
        assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        page = r.text
        labels = 'model_name="mnist",model_version='
        assert _value(page, f'ts_inference_requests_total{{{labels}"default",hostname="testhost",}}') == 1.0
        assert _value(page, f'ts_inference_requests_total{{{labels}"2.0",hostname="testhost",}}') == 1.0
        assert _value(page, f'ts_inference_latency_microseconds{{{labels}"default",hostname="testhost",}}') > 0
        assert 'model_name="nope"' not in page
        assert _value(page, 'Requests2XX{Level="Host",Hostname="testhost",}') == 2.0
        assert _value(page, 'Requests4XX{Level="Host",Hostname="testhost",}') == 1.0

    run(check, tmp_path)


def test_name_filter(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"x")
        page = (await server.metrics_api.get("/metrics?name[]=ts_inference_requests_total&name[]=Requests2XX")).text
        assert "ts_inference_requests_total{" in page and "Requests2XX{" in page
        assert "ts_inference_latency_microseconds" not in page and "ts_batch_size" not in page

    run(check, tmp_path)


def test_legacy_mode_serves_only_the_three_ts_counters(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"x")
        page = (await server.metrics_api.get("/metrics")).text
        assert "ts_inference_requests_total{" in page and "ts_queue_latency_microseconds" in page
        assert "Requests2XX" not in page and "ts_inference_latency_seconds" not in page

    run(check, tmp_path, metrics_mode="legacy")


def test_log_mode_serves_an_empty_page(tmp_path):
    async def check(server: Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"x")
        r = await server.metrics_api.get("/metrics")
        assert (r.status_code, r.text) == (200, "")

    run(check, tmp_path, metrics_mode="log")


def test_metrics_port_serves_only_metrics(tmp_path):
    async def check(server: Server) -> None:
        assert (await server.metrics_api.get("/ping")).status_code == 404
        paths = (await server.metrics_api.options("/")).json()["paths"]
        assert "/metrics" in paths and "/ping" not in paths

    run(check, tmp_path)
