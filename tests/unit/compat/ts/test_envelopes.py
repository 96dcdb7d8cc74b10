"""TorchServe's request envelopes: what each hands the wrapped handle and what it answers (TorchServe's docs and
its test_envelopes cases as the contract)."""

from __future__ import annotations

import base64
import json

import pytest

from serve.compat.ts.torch_handler.request_envelope.base import BaseEnvelope
from serve.compat.ts.torch_handler.request_envelope.body import BodyEnvelope
from serve.compat.ts.torch_handler.request_envelope.json import JSONEnvelope
from serve.compat.ts.torch_handler.request_envelope.kserve import KServeEnvelope
from serve.compat.ts.torch_handler.request_envelope.kservev2 import KServev2Envelope
from serve.worker.context import Context


@pytest.fixture
def context(tmp_path):
    manifest = {"model": {"modelName": "bert", "modelVersion": "1.0"}}
    ctx = Context("bert", str(tmp_path), manifest, 1, None, "0.1")
    ctx.begin_batch({0: "rid-0"}, [{}])
    return ctx


def recorder(result):
    seen = []

    def handle(data, context):
        seen.append(data)
        return result(data) if callable(result) else result

    return handle, seen


def test_body_envelope_passes_the_payloads_and_the_output(context):
    handle, seen = recorder(lambda rows: [len(r) for r in rows])
    out = BodyEnvelope(handle).handle([{"body": b"abc"}, {"data": b"de"}], context)
    assert seen == [[b"abc", b"de"]] and out == [3, 2]


def test_json_envelope_joins_instances_decodes_b64_and_splits_the_answers(context):
    handle, seen = recorder(lambda rows: [f"p{i}" for i in range(len(rows))])
    b64 = {"b64": base64.b64encode(b"img").decode()}
    second = json.dumps({"instances": [{"x": {"b64": base64.b64encode(b"z").decode()}}]}).encode()
    rows = [{"body": {"instances": [b64, [1, 2]]}}, {"body": second}]
    out = JSONEnvelope(handle).handle(rows, context)
    assert seen == [[b"img", [1, 2], {"x": b"z"}]]
    assert [json.loads(o) for o in out] == [{"predictions": ["p0", "p1"]}, {"predictions": ["p2"]}]


def test_kserve_v1_takes_the_first_requests_instances(context):
    handle, seen = recorder(["cat", "dog"])
    out = KServeEnvelope(handle).handle([{"body": json.dumps({"instances": [[1], [2]]}).encode()}], context)
    assert seen == [[[1], [2]]] and out == [{"predictions": ["cat", "dog"]}]
    context.begin_batch({0: "rid-1"}, [{"explain": "True"}])
    out = KServeEnvelope(handle).handle([{"body": {"instances": [[1]]}}], context)
    assert out == [{"explanations": ["cat", "dog"]}]


def test_kserve_v2_parses_inputs_and_answers_the_open_inference_protocol(context):
    handle, seen = recorder([[[0.25, 0.75]], [3]])
    request = {"id": "abc", "inputs": [{"name": "input-0", "shape": [2], "datatype": "INT64", "data": [66, 108]}]}
    out = KServev2Envelope(handle).handle([{"body": json.dumps(request).encode()}], context)
    assert seen == [[request["inputs"]]]
    assert out == [{"id": "abc", "model_name": "bert", "model_version": "1.0", "outputs": [
        {"name": "predict", "shape": [1, 2], "datatype": "FP64", "data": [0.25, 0.75]},
        {"name": "predict", "shape": [1], "datatype": "INT64", "data": [3]},
    ]}]  # fmt: skip
    out = KServev2Envelope(handle).handle([{"body": {"inputs": []}}], context)
    assert out[0]["id"] == "rid-0"  # no id in the request: the server's request id


def test_an_envelope_must_define_both_directions():
    class Half(BaseEnvelope):
        def parse_input(self, data):
            return data

    with pytest.raises(TypeError, match="format_output"):
        Half(lambda d, c: d)


def test_the_old_kfserving_names_are_the_kserve_envelopes():
    from serve.compat.ts.torch_handler.request_envelope.kfserving import KFservingEnvelope
    from serve.compat.ts.torch_handler.request_envelope.kfservingv2 import KFservingv2Envelope

    assert KFservingEnvelope is KServeEnvelope and KFservingv2Envelope is KServev2Envelope
