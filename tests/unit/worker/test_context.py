"""Context against TorchServe's ts/context.py contract (spec §8): attributes, per-request headers and status."""

from __future__ import annotations

import pytest

from serve.worker import Context, MetricsCache


def make_context(**kw) -> Context:
    manifest = {"model": {"modelName": "m", "handler": "tensor"}}
    return Context("m", "/models/m", manifest, 4, None, "0.1.0", **kw)


def test_system_properties_are_torchserves():
    ctx = make_context()
    assert ctx.system_properties == {
        "model_dir": "/models/m",
        "gpu_id": None,
        "batch_size": 4,
        "server_name": "MMS",
        "server_version": "0.1.0",
        "limit_max_image_pixels": True,
    }
    assert ctx.model_name == "m" and ctx.manifest["model"]["handler"] == "tensor"
    assert ctx.model_yaml_config == {} and isinstance(ctx.metrics, MetricsCache)


def test_given_model_config_and_metrics_are_kept():
    metrics = MetricsCache("m")
    ctx = make_context(limit_max_image_pixels=1000, metrics=metrics, model_yaml_config={"handler": {"topk": 3}})
    assert ctx.metrics is metrics and ctx.model_yaml_config["handler"]["topk"] == 3
    assert ctx.system_properties["limit_max_image_pixels"] == 1000


def test_begin_batch_sets_ids_and_headers_case_insensitively():
    ctx = make_context()
    ctx.begin_batch({0: "r0", 1: "r1"}, [{"Accept": "application/x-npy"}, {"explain": "True"}])
    assert ctx.request_ids == {0: "r0", 1: "r1"} and ctx.get_request_id(1) == "r1" and ctx.get_request_id() == "r0"
    assert ctx.get_request_header(0, "accept") == "application/x-npy"
    assert ctx.get_request_header(0, "ACCEPT") == "application/x-npy"
    assert ctx.get_request_header(1, "accept") is None
    assert ctx.get_all_request_header(1) == {"explain": "True"}
    assert ctx.metrics.request_ids == {0: "r0", 1: "r1"}


def test_response_status_and_headers_per_request():
    ctx = make_context()
    ctx.begin_batch({0: "a", 1: "b"}, [{}, {}])
    assert ctx.get_response_status(0) == (200, "")
    ctx.set_response_status(400, "bad input", idx=1)
    assert ctx.get_response_status(1) == (400, "bad input") and ctx.get_response_status(0) == (200, "")
    ctx.set_response_content_type(0, "application/x-npy")
    ctx.set_response_header(0, "x-extra", "1")
    assert ctx.get_response_content_type(0) == "application/x-npy"
    assert ctx.get_response_headers(0) == {"content-type": "application/x-npy", "x-extra": "1"}
    assert ctx.get_response_content_type(1) is None
    ctx.set_all_response_status(507, "out of memory")
    assert [ctx.get_response_status(i) for i in (0, 1)] == [(507, "out of memory")] * 2


def test_set_response_status_defaults_to_the_first_request():
    ctx = make_context()
    ctx.begin_batch({0: "a"}, [{}])
    ctx.set_response_status(503)
    assert ctx.get_response_status(0) == (503, "")


def test_a_new_batch_resets_the_response_state():
    ctx = make_context()
    ctx.begin_batch({0: "a"}, [{}])
    ctx.set_response_status(400, "x", 0)
    ctx.set_response_content_type(0, "text/plain")
    ctx.begin_batch({0: "b"}, [{}])
    assert ctx.get_response_status(0) == (200, "") and ctx.get_response_headers(0) == {}


def test_sequence_id_comes_from_torchserves_header():
    ctx = make_context()
    ctx.begin_batch({0: "a"}, [{"ts_request_sequence_id": "seq-7"}])
    assert ctx.get_sequence_id(0) == "seq-7"


@pytest.mark.parametrize("idx", [0, 3])
def test_without_begin_batch_a_request_has_no_headers_and_status_200(idx):
    ctx = make_context()
    assert ctx.get_request_header(idx, "accept") is None and ctx.get_response_status(idx) == (200, "")
    ctx.set_response_status(400, "bad", idx)
    assert ctx.get_response_status(idx) == (400, "bad")
