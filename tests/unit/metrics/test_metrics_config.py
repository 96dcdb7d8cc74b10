"""TorchServe's metrics YAML (metrics_config): its model metrics, made in the worker's cache; bad files refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.config import load_settings
from serve.errors import ConfigError
from serve.metrics.metrics_config import DeclaredMetric, read_metrics_config
from serve.worker.metrics_cache import MetricTypes, declared_metrics_cache

pytest.importorskip("yaml")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchserve" / "custom_metrics" / "metrics.yaml"


def test_torchserves_example_file_declares_its_model_metrics_with_their_anchored_dimensions():
    declared = read_metrics_config(EXAMPLE)
    assert declared == [
        DeclaredMetric("InferenceRequestCount", "count", (), "counter"),
        DeclaredMetric("InitializeCallCount", "count", ("ModelName", "Level"), "counter"),
        DeclaredMetric("PreprocessCallCount", "count", ("ModelName",), "counter"),
        DeclaredMetric("PostprocessCallCount", "CallCount", ("ModelName", "Level"), "counter"),
        DeclaredMetric("HandlerTime", "ms", ("ModelName", "Level"), "gauge"),
        DeclaredMetric("PredictionTime", "ms", ("ModelName", "Level"), "gauge"),
        DeclaredMetric("RequestBatchSize", "count", ("ModelName",), "gauge"),
        DeclaredMetric("SizeOfImage", "kB", ("ModelName", "Level"), "gauge"),
    ]


def test_the_workers_cache_holds_the_declared_metrics_before_the_handler_adds_any():
    cache = declared_metrics_cache("mnist", EXAMPLE)
    metric = cache.get_metric("RequestBatchSize", MetricTypes.GAUGE)  # the custom_metrics handler's call
    metric.add_or_update(4, ["mnist"])
    record = cache.drain()[0]
    assert (record.name, record.value, record.unit, record.metric_type) == ("RequestBatchSize", 4, "Count", "gauge")
    assert record.dimensions == (("ModelName", "mnist"),)
    with pytest.raises(KeyError, match="RequestBatchSize"):  # without the file, TorchServe's error
        declared_metrics_cache("mnist", None).get_metric("RequestBatchSize", MetricTypes.GAUGE)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_metrics: [1, 2]", "model_metrics must map counter/gauge/histogram"),
        ("model_metrics:\n  timer:\n    - name: X\n", r"model_metrics.timer is not a metric type"),
        ("ts_metrics:\n  counter:\n    - unit: ms\n", r"each metric of ts_metrics.counter needs a name"),
        ("model_metrics:\n  gauge:\n    - name: X\n      dimensions: ModelName\n", "dimensions must be a list"),
        ("- a\n- b\n", "expected a mapping"),
        ("model_metrics: {counter: [", "cannot read it as YAML"),
    ],
)
def test_a_file_not_in_torchserves_shape_is_refused_naming_the_entry(tmp_path, text, message):
    path = tmp_path / "metrics.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_metrics_config(path)


def test_settings_read_metrics_config_relative_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.yaml").write_text("model_metrics: {}\n")
    assert load_settings({"metrics_config": "m.yaml", "ncs": True}, {}).metrics_config == tmp_path / "m.yaml"
    with pytest.raises(ConfigError, match=r"metrics_config = .* does not exist"):
        load_settings({"metrics_config": "missing.yaml", "ncs": True}, {})
