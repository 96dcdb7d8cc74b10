"""DataPlane without HTTP: the model API switch, parameter ranges, metrics, explain (what gRPC will reuse)."""

from __future__ import annotations

import asyncio

import pytest

from serve.batching import InferenceRequest, InferenceResponse
from serve.config import Settings
from serve.errors import InvalidInput, ModelApiDisabled, ModelNotFound, QueueFull
from serve.frontends import DataPlane
from serve.metrics import ServerMetrics
from tests.unit.frontends.fakes import FakeRegistry


def _plane(**settings) -> tuple[DataPlane, FakeRegistry, ServerMetrics]:
    registry, metrics = FakeRegistry(), ServerMetrics(hostname="h")
    return DataPlane(registry, metrics, Settings(**settings)), registry, metrics


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def test_model_api_switch():
    plane, registry, _ = _plane()
    with pytest.raises(ModelApiDisabled, match="--enable-model-api"):
        _run(plane.register("a.mar"))
    with pytest.raises(ModelApiDisabled):
        _run(plane.unregister("mnist"))
    plane, registry, _ = _plane(enable_model_api=True)
    assert _run(plane.register("a.mar", batch_size=2)) == "ok"
    assert registry.calls[-1][2]["batch_size"] == 2


def test_ranges_are_checked_before_the_registry():
    plane, registry, _ = _plane(enable_model_api=True)
    for kwargs in ({"batch_size": 0}, {"max_batch_delay": -1}, {"initial_workers": -1}, {"startup_timeout": 0}):
        with pytest.raises(InvalidInput, match=next(iter(kwargs))):
            _run(plane.register("a.mar", **kwargs))
    with pytest.raises(InvalidInput, match="max_worker cannot be less than min_worker"):
        _run(plane.scale("mnist", None, 4, 2))
    with pytest.raises(InvalidInput, match="min_worker"):
        _run(plane.scale("mnist", None, -1, None))
    assert registry.calls == []


def test_predict_records_metrics_except_for_unknown_models():
    plane, registry, metrics = _plane()

    async def full(request: InferenceRequest) -> InferenceResponse:
        raise QueueFull("full")

    _run(plane.predict("mnist", None, InferenceRequest("r1", {"body": b""})))
    with pytest.raises(ModelNotFound):
        _run(plane.predict("ghost", None, InferenceRequest("r2", {"body": b""})))
    registry.responder = full
    with pytest.raises(QueueFull):
        _run(plane.predict("mnist", "2.0", InferenceRequest("r3", {"body": b""})))
    page = metrics.render()[0].decode()
    assert 'model_name="ghost"' not in page
    assert 'ts_inference_errors_total{model_name="mnist",model_version="2.0",hostname="h",code="503",} 1.0' in page
    assert 'ts_inference_requests_total{model_name="mnist",model_version="default",hostname="h",} 1.0' in page


def test_explain_marks_the_request():
    plane, registry, _ = _plane()
    request = InferenceRequest("r1", {"body": b""}, headers={"explain": "False"})
    _run(plane.explain("mnist", None, request))
    sent = registry.calls[-1][3]
    assert sent.explain is True and sent.headers["explain"] == "True"


def test_ping_and_describe_dispatch():
    plane, registry, _ = _plane()
    assert plane.ping() is True
    registry.healthy = False
    assert plane.ping() is False
    _run(plane.describe("mnist", "2.0", customized=True))
    assert registry.calls[-1] == ("describe_custom", "mnist", "2.0")
    _run(plane.describe("mnist", None, all_versions=True, customized=True))
    assert registry.calls[-1] == ("describe", "mnist", None, True)
