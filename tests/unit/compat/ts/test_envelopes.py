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
    handle, seen = recorder([[[0.25, 0.75]], 3])
    request = {"id": "abc", "inputs": [{"name": "a", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]},
                                       {"name": "b", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}  # fmt: skip
    out = KServev2Envelope(handle).handle([{"body": json.dumps(request).encode()}], context)
    # TorchServe's: the first request's inputs, numbers in their shape, BYTES data its first element
    assert seen == [[{**request["inputs"][0], "data": [[1.0, 2.0]]}, {**request["inputs"][1], "data": "hi"}]]
    assert out == [{"id": "abc", "model_name": "bert", "model_version": "1.0", "outputs": [
        {"name": "a", "shape": [2], "datatype": "FP64", "data": [0.25, 0.75]},  # result i named after input i
        {"name": "b", "shape": [1], "datatype": "INT64", "data": [3]},  # flattened: a scalar has shape [1]
    ]}]  # fmt: skip
    out = KServev2Envelope(recorder([1, 2])[0]).handle([{"body": {"id": " ", "inputs": [request["inputs"][1]]}}],
                                                       context)  # fmt: skip
    assert out[0]["id"] == "rid-0"  # a blank id: the server's request id
    assert [o["name"] for o in out[0]["outputs"]] == ["b", "output-1"]  # past the inputs (TorchServe: IndexError)


def test_kserve_v2_answers_torchserves_mnist_example(tmp_path):
    """pytorch/serve 62c4d6a: kubernetes/kserve/kf_request_json/v2/mnist/mnist_v2_tensor.json in, the answer its
    tests/scripts/test_mnist.sh expects out (input-0 in, input-0 with shape [1] out), for a handler answering 1."""
    context = Context("mnist", str(tmp_path), {"model": {"modelName": "mnist", "modelVersion": "1.0"}}, 1, None, "0")
    context.begin_batch({0: "rid-0"}, [{}])
    image = [[[0.0] * 28 for _ in range(28)]]
    request = {"id": "d3b15cad-50a2-4eaf-80ce-8b0a428bd298",
               "inputs": [{"name": "input-0", "shape": [1, 28, 28], "datatype": "FP32", "data": image}]}  # fmt: skip
    handle, seen = recorder(lambda rows: [1 for _ in rows])
    out = KServev2Envelope(handle).handle([{"body": json.dumps(request).encode()}], context)
    assert seen == [request["inputs"]]  # as TorchServe's test_handle_kfv2 hands the mnist handler its rows
    expected = ('{"id":"d3b15cad-50a2-4eaf-80ce-8b0a428bd298","model_name":"mnist","model_version":"1.0",'
                '"outputs":[{"name":"input-0","datatype":"INT64","data":[1],"shape":[1]}]}')  # fmt: skip
    assert out == [json.loads(expected)]


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
