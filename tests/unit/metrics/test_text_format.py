"""The /metrics text as TorchServe's simpleclient 0.9.0 writes it, read back by prometheus-client's own parser."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from serve.metrics import ServerMetrics
from serve.metrics.text_format import java_double

# Java's Double.toString for these values (JLS: decimal in [1e-3, 1e7), else computerized scientific notation)
JAVA = [(1.0, "1.0"), (0.0, "0.0"), (2.5, "2.5"), (0.001, "0.001"), (9999999.0, "9999999.0"), (1e7, "1.0E7"),
        (12345678.0, "1.2345678E7"), (0.0001, "1.0E-4"), (-3e-5, "-3.0E-5"), (1.5e20, "1.5E20"),
        (float("inf"), "+Inf"), (float("-inf"), "-Inf"), (float("nan"), "NaN")]  # fmt: skip


@pytest.mark.parametrize(("value", "text"), JAVA)
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text
    assert text == "NaN" or float(text) == value  # what Prometheus reads back


def _page() -> str:
    metrics = ServerMetrics(hostname="h")
    metrics.http_response(200)
    metrics.request("m", "", 200, 0.25)
    metrics.request("m", "", 503, 20.0)  # 2.025E7 microseconds in all
    metrics.queue_latency("m", "", 0.001)
    metrics.handler_time("m", "", 3.5)
    metrics.batch("m", "", 2)
    metrics.backend_metrics("m", "", [{"name": "Hits", "value": 2, "unit": "Count", "metric_type": "counter",
                                       "dimensions": {"ModelName": "m", "Level": "Model"}}])  # fmt: skip
    return metrics.render()[0].decode()


def test_torchserves_own_regexes_match() -> None:
    """TorchServe's test_metrics.py patterns (each must match exactly once)."""
    page = _page()
    patterns = [
        r"TYPE Requests2XX counter",
        r'Requests2XX\{Level="Host",Hostname=".+",\} \d+\.\d+',
        r"TYPE ts_inference_requests_total counter",
        r'ts_inference_requests_total\{model_name="m",model_version="default",hostname=".+",\} \d+\.\d+',
        r"TYPE ts_inference_latency_microseconds counter",
        r'ts_inference_latency_microseconds\{model_name="m",model_version="default",hostname=".+",\} \d+\.\d+',
        r"TYPE ts_queue_latency_microseconds counter",
        r'ts_queue_latency_microseconds\{model_name="m",model_version="default",hostname=".+",\} \d+\.\d+',
        r"TYPE QueueTime gauge",
        r'QueueTime\{Level="Host",Hostname=".+",\} \d+\.\d+',
        r"TYPE HandlerTime gauge",
        r'HandlerTime\{ModelName="m",Level="Model",Hostname=".+",\} \d+\.\d+',
        r"TYPE Hits counter",
        r'Hits\{ModelName="m",Level="Model",Hostname=".+",\} \d+\.\d+',
    ]
    for pattern in patterns:
        assert len(re.findall(pattern, page)) == 1, f"{pattern} in\n{page}"
    assert "_created" not in page and "# TYPE Requests2XX gauge" not in page
    assert 'ts_inference_latency_microseconds{model_name="m",model_version="default",hostname="h",} 2.025E7' in page
    assert 'ts_batch_size_bucket{model_name="m",model_version="default",hostname="h",le="+Inf",} 1.0' in page


def test_prometheus_reads_the_page() -> None:
    families = {f.name: f for f in text_string_to_metric_families(_page())}
    assert families["Requests2XX"].type == "counter"  # the parser reads TorchServe's names as they are
    (sample,) = [s for s in families["ts_inference_requests"].samples]
    assert sample.labels == {"model_name": "m", "model_version": "default", "hostname": "h"} and sample.value == 2
    latency = families["ts_inference_latency_microseconds"].samples[0]
    assert latency.value == pytest.approx(20.25e6)
