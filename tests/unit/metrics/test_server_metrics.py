"""ServerMetrics: TorchServe's names and labels, our extra metrics, handler records, filtering, isolation."""

from __future__ import annotations

import logging
import re

from serve.metrics import ServerMetrics
from serve.worker import MetricsCache

MODEL = 'model_name="m",model_version="1.0",hostname="h",'  # TorchServe's order, its trailing comma


def _bucket(le: str) -> str:
    return f'{MODEL}le="{le}",'  # declared order, then le


def _page(metrics: ServerMetrics, names=None) -> str:
    body, content_type = metrics.render(names)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    return body.decode()


def _value(page: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", page, re.M)
    assert match, f"{sample!r} not in:\n{page}"
    return float(match.group(1))


def test_request_metrics_keep_torchserve_sample_names():
    metrics = ServerMetrics(hostname="h")
    metrics.request("m", "1.0", 200, 0.002)
    metrics.request("m", "1.0", 503, 0.001)
    metrics.request("m", "", 200, 0.001)
    page = _page(metrics)
    assert _value(page, f"ts_inference_requests_total{{{MODEL}}}") == 2.0
    assert abs(_value(page, f"ts_inference_latency_microseconds{{{MODEL}}}") - 3000.0) < 1e-6
    assert _value(page, 'ts_inference_requests_total{model_name="m",model_version="default",hostname="h",}') == 1.0
    assert _value(page, f'ts_inference_errors_total{{{MODEL}code="503",}}') == 1.0
    assert _value(page, f"ts_inference_latency_seconds_bucket{{{_bucket('0.001')}}}") == 1.0
    assert _value(page, f"ts_inference_latency_seconds_count{{{MODEL}}}") == 2.0


def test_queue_handler_batch_and_worker_metrics():
    metrics = ServerMetrics(hostname="h")
    metrics.queue_latency("m", "1.0", 0.004)
    metrics.handler_time("m", "1.0", 3.5)
    for size in (1, 8, 8):
        metrics.batch("m", "1.0", size)
    metrics.queue_depth("m", "1.0", 7)
    metrics.workers("m", "1.0", live=1, total=2)
    page = _page(metrics)
    assert abs(_value(page, f"ts_queue_latency_microseconds{{{MODEL}}}") - 4000.0) < 1e-6
    assert _value(page, 'QueueTime{Level="Host",Hostname="h",}') == 4.0
    assert _value(page, 'HandlerTime{ModelName="m",Level="Model",Hostname="h",}') == 3.5
    assert _value(page, f"ts_batch_size_bucket{{{_bucket('4.0')}}}") == 1.0
    assert _value(page, f"ts_batch_size_sum{{{MODEL}}}") == 17.0
    assert _value(page, f"ts_queue_depth{{{MODEL}}}") == 7.0
    assert _value(page, f'ts_model_workers{{{MODEL}state="live",}}') == 1.0
    assert _value(page, f'ts_model_workers{{{MODEL}state="total",}}') == 2.0
    metrics.remove_model("m", "1.0")
    page = _page(metrics)
    assert "ts_queue_depth{" not in page and "ts_model_workers{" not in page
    metrics.remove_model("never", "registered")  # no error


def test_http_response_classes():
    metrics = ServerMetrics(hostname="h")
    for status in (200, 202, 404, 401, 500, 503, 507):
        metrics.http_response(status)
    page = _page(metrics)
    counts = [_value(page, f'Requests{c}XX{{Level="Host",Hostname="h",}}') for c in "245"]
    assert counts == [2.0, 2.0, 3.0]
    assert "# TYPE Requests2XX counter" in page  # a TorchServe counter name without _total (see the module doc)


def test_handler_records_from_a_metrics_cache():
    cache = MetricsCache("m", {0: "r0"})
    cache.add_time("HandlerTime", 2.5, None, "ms")
    cache.add_counter("CacheHits", 1, idx=0, dimensions={"Cache": "lru"})
    cache.add_counter("CacheHits", 2, idx=0, dimensions={"Cache": "lru"})
    cache.add_metric("Tokens", 17, "count", metric_type="histogram")
    cache.add_size("odd-name", 3, unit="MB")
    records = [{"name": r.name, "value": r.value, "unit": r.unit, "metric_type": r.metric_type,
                "dimensions": [list(d) for d in r.dimensions], "request_id": r.request_id}
               for r in cache.records()]  # fmt: skip
    metrics = ServerMetrics(hostname="h")
    metrics.backend_metrics("m", "1.0", records)
    page = _page(metrics)
    assert _value(page, 'HandlerTime{ModelName="m",Level="Model",Hostname="h",}') == 2.5
    assert _value(page, 'CacheHits{ModelName="m",Level="Model",Cache="lru",Hostname="h",}') == 3.0
    assert _value(page, 'Tokens_count{ModelName="m",Level="Model",Hostname="h",}') == 1.0
    assert _value(page, 'odd_name{ModelName="m",Level="Model",Hostname="h",}') == 3.0
    assert "# HELP CacheHits Torchserve prometheus counter metric with unit: Count" in page


def test_records_that_do_not_fit_are_dropped_with_one_warning(caplog):
    metrics = ServerMetrics(hostname="h")
    good = {"name": "Latency", "value": 1.0, "unit": "ms", "metric_type": "gauge", "dimensions": {"ModelName": "m"}}
    other_labels = {**good, "dimensions": {"Other": "x"}}
    clash = {**good, "name": "ts_batch_size"}  # one of the server's own names
    with caplog.at_level(logging.WARNING, logger="serve.metrics.backend_metrics"):
        metrics.backend_metrics("m", "1", [good, other_labels, other_labels, clash, {**good, "value": "1"}])
    page = _page(metrics)
    assert _value(page, 'Latency{ModelName="m",Hostname="h",}') == 1.0 and 'Other="x"' not in page
    assert len([r for r in caplog.records if "Latency" in r.getMessage()]) == 1
    assert any("ts_batch_size" in r.getMessage() for r in caplog.records)


def test_name_filter_matches_families_and_samples():
    metrics = ServerMetrics(hostname="h")
    metrics.request("m", "1.0", 200, 0.001)
    metrics.batch("m", "1.0", 4)
    page = _page(metrics, {"ts_inference_requests_total", "ts_batch_size"})
    assert "ts_inference_requests_total{" in page and "ts_batch_size_bucket{" in page
    assert "ts_inference_latency_microseconds" not in page
    assert _page(metrics, set()) == ""


def test_instances_are_independent():
    first, second = ServerMetrics(hostname="a"), ServerMetrics(hostname="b")
    first.request("m", "1", 200, 0.1)
    assert "ts_inference_requests_total{" in _page(first)
    assert "ts_inference_requests_total{" not in _page(second)


def test_what_every_request_records_makes_no_prometheus_client_call():
    """prometheus-client checks and locks on every inc/set/observe: a request's records are plain tallies
    (request_tallies.py); the page still shows them (the tests above)."""
    import sys

    metrics = ServerMetrics(hostname="h")
    calls: list[str] = []

    def count(frame, event, arg):
        if event == "call" and "prometheus_client" in frame.f_code.co_filename:
            calls.append(frame.f_code.co_name)

    sys.setprofile(count)
    try:
        for _ in range(5):
            metrics.http_response(200)
            metrics.request("m", "1.0", 200, 0.001)
            metrics.queue_latency("m", "1.0", 0.002)
            metrics.queue_depth("m", "1.0", 3)
    finally:
        sys.setprofile(None)
    assert calls == []


def test_per_batch_records_look_up_each_label_set_once(monkeypatch):
    """`.labels()` takes a lock and builds a key: per-batch records go through children looked up once."""
    import prometheus_client.metrics

    looked_up: list[tuple[str, ...]] = []
    labels = prometheus_client.metrics.MetricWrapperBase.labels

    def spy(self, *values, **named):
        looked_up.append(values)
        return labels(self, *values, **named)

    metrics = ServerMetrics(hostname="h")
    monkeypatch.setattr(prometheus_client.metrics.MetricWrapperBase, "labels", spy)
    for _ in range(5):
        metrics.batch("m", "1.0", 8)
        metrics.handler_time("m", "1.0", 1.5)
    assert looked_up == [("m", "1.0", "h"), ("m", "Model", "h"), ("m", "Model", "h")]  # HandlerTime, PredictionTime
    metrics.queue_depth("m", "1.0", 3)
    metrics.remove_model("m", "1.0")
    assert "ts_queue_depth{" not in _page(metrics)
    metrics.queue_depth("m", "1.0", 4)  # recorded again after the removal: shown again
    assert _value(_page(metrics), f"ts_queue_depth{{{MODEL}}}") == 4.0


def test_handler_histogram_buckets_fit_what_they_measure():
    """vLLM's buckets for its generative names (any prefix), 1-2-5 for counts, the default buckets in the unit of a
    millisecond timer, prometheus-client's defaults otherwise (backend_metrics.py's docstring)."""
    cache = MetricsCache("m")
    for name, unit in [("serve:time_to_first_token_seconds", "s"), ("serve:inter_token_latency_seconds", "s"),
                       ("serve:e2e_request_latency_seconds", "s"), ("serve:request_generation_tokens", "count"),
                       ("PreprocessTime", "ms"), ("LoadTime", "s")]:  # fmt: skip
        cache.add_metric_to_cache(name, unit, ["model_name"], "histogram").add_or_update(1.0, ["m"])
    metrics = ServerMetrics(hostname="h")
    metrics.backend_metrics("m", "1.0", [r.to_dict() for r in cache.drain()])
    page = _page(metrics)

    def bounds(name: str) -> list[str]:
        return re.findall(rf'^{re.escape(name)}_bucket{{model_name="m",Hostname="h",le="([^"]+)",}}', page, re.M)

    assert bounds("serve:time_to_first_token_seconds")[:3] == ["0.001", "0.005", "0.01"]
    assert bounds("serve:time_to_first_token_seconds")[-2:] == ["2560.0", "+Inf"]
    assert bounds("serve:inter_token_latency_seconds")[:2] == ["0.01", "0.025"]
    assert bounds("serve:inter_token_latency_seconds")[-2:] == ["80.0", "+Inf"]
    assert bounds("serve:e2e_request_latency_seconds")[:2] == ["0.3", "0.5"]
    assert bounds("serve:e2e_request_latency_seconds")[-2:] == ["7680.0", "+Inf"]
    assert bounds("serve:request_generation_tokens") == ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0",
                                                         "200.0", "500.0", "1000.0", "2000.0", "5000.0", "10000.0",
                                                         "20000.0", "50000.0", "100000.0", "+Inf"]  # fmt: skip
    assert bounds("PreprocessTime")[:2] == ["5.0", "10.0"] and bounds("PreprocessTime")[-2:] == ["10000.0", "+Inf"]
    assert bounds("LoadTime")[:2] == ["0.005", "0.01"] and bounds("LoadTime")[-2:] == ["10.0", "+Inf"]
    assert _value(page, 'serve:request_generation_tokens_bucket{model_name="m",Hostname="h",le="1.0",}') == 1.0
