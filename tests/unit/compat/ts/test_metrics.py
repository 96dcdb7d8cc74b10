"""TorchServe's metrics API on serve's cache: the calls of TorchServe's custom-metrics docs, record for record.

The reference is TorchServe's documented contract (docs/metrics.md, ts/metrics/metric_cache_abstract.py): the
argument orders and defaults of add_counter/add_time/add_size/add_percent/add_metric, Dimension objects as
dimensions, add_metric_to_cache returning a metric whose add_or_update/update record values with its own
dimension names only, get_metric finding it again and raising a KeyError subclass when absent.
"""

from __future__ import annotations

import pytest

from serve.compat.ts.metrics.caching_metric import CachingMetric
from serve.compat.ts.metrics.dimension import Dimension
from serve.compat.ts.metrics.metric_cache_errors import MetricsCacheKeyError
from serve.compat.ts.metrics.metric_type_enum import MetricTypes
from serve.worker.context import Context


@pytest.fixture
def context(tmp_path):
    ctx = Context("mnist", str(tmp_path), {"model": {"modelName": "mnist"}}, 2, None, "0.1")
    ctx.begin_batch({0: "req-a", 1: "req-b"})
    return ctx


def lines(ctx):
    return [(str(r), r.metric_type, r.request_id) for r in ctx.metrics.records()]


def test_add_methods_take_torchserves_positional_order_and_dimension_objects(context):
    m = context.metrics
    m.add_counter("InferenceCount", 2, 1, [Dimension("Stage", "post")])
    m.add_time("PreTime", 1.5, None, "s", [Dimension("Stage", "pre")], MetricTypes.HISTOGRAM)
    m.add_size("Payload", 3, 0, "kB")
    m.add_percent("Util", 40.0, None, None, MetricTypes.COUNTER)
    m.add_metric("Tokens", 7, "count", 0, [Dimension("Kind", "prompt")], MetricTypes.GAUGE)
    assert lines(context) == [
        ("InferenceCount.Count:2|#ModelName:mnist,Level:Model,Stage:post", "counter", "req-b"),
        ("PreTime.Seconds:1.5|#ModelName:mnist,Level:Model,Stage:pre", "histogram", "req-a,req-b"),
        ("Payload.Kilobytes:3|#ModelName:mnist,Level:Model", "gauge", "req-a"),
        ("Util.Percent:40.0|#ModelName:mnist,Level:Model", "counter", "req-a,req-b"),
        ("Tokens.Count:7|#ModelName:mnist,Level:Model,Kind:prompt", "gauge", "req-a"),
    ]


def test_add_metric_to_cache_then_get_metric_add_or_update_and_update(context):
    m = context.metrics
    metric = m.add_metric_to_cache("LoopCount", "count", ["ModelName", "Loop"], MetricTypes.COUNTER)
    assert isinstance(metric, CachingMetric) and m.get_metric("LoopCount", MetricTypes.COUNTER) is metric
    metric.add_or_update(3, ["mnist", "outer"], context.get_request_id(0))
    m.get_metric("LoopCount").update(4, "req-b", [Dimension("ModelName", "mnist"), Dimension("Loop", "inner")])
    assert lines(context) == [
        ("LoopCount.Count:3|#ModelName:mnist,Loop:outer", "counter", "req-a"),
        ("LoopCount.Count:4|#ModelName:mnist,Loop:inner", "counter", "req-b"),
    ]
    m.clear()  # a new batch: the records go, the metric objects stay
    assert m.records() == [] and m.get_metric("LoopCount", "counter") is metric


def test_metrics_made_by_add_methods_are_found_by_get_metric(context):
    context.metrics.add_time("HandlerTime", 2.0)
    assert context.metrics.get_metric("HandlerTime", MetricTypes.GAUGE).dimension_names == ["ModelName", "Level"]


def test_get_metric_of_an_unknown_metric_is_a_key_error_that_says_what_to_do(context):
    with pytest.raises(MetricsCacheKeyError, match="add_metric_to_cache") as info:
        context.metrics.get_metric("Nope", MetricTypes.HISTOGRAM)
    assert isinstance(info.value, KeyError)
    context.metrics.add_metric_to_cache("Nope", "ms", [], MetricTypes.GAUGE)
    with pytest.raises(MetricsCacheKeyError, match="Nope"):  # same name, other type
        context.metrics.get_metric("Nope", MetricTypes.HISTOGRAM)


def test_wrong_dimension_values_and_types_are_refused(context):
    metric = context.metrics.add_metric_to_cache("M", "count", ["A", "B"])
    with pytest.raises(ValueError, match=r"dimensions \['A', 'B'\]: give one value for each"):
        metric.add_or_update(1, ["only-one"])
    with pytest.raises(ValueError, match="metric_type"):
        context.metrics.add_metric("X", 1, "count", metric_type="summary")
    with pytest.raises(TypeError, match="Dimension"):
        context.metrics.add_counter("X", 1, None, ["Stage:pre"])


def test_add_error_is_a_counter_at_level_error(context):
    context.metrics.add_error("ModelError", 1, [Dimension("Kind", "oom")])
    assert lines(context) == [("ModelError.:1|#Level:Error,Kind:oom", "counter", None)]


def test_dimension_and_metric_types_are_torchserves():
    dim = Dimension("Level", "Model")
    assert str(dim) == "Level:Model" and dim.to_dict() == {"Name": "Level", "Value": "Model"}
    assert [t.value for t in MetricTypes] == ["counter", "gauge", "histogram"]
    assert MetricTypes.GAUGE == "gauge"
