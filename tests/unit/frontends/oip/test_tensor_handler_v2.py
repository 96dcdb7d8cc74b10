"""The `tensor` handler with v2 requests (the kservev2 dict of frontends/oip/core.py) mixed with plain ones."""

from __future__ import annotations

import json

import numpy as np
import pytest

import serve
from handlers.tensor import decode_v2
from serve.errors import InvalidInput
from serve.frontends.oip import core
from serve.worker import load_handler
from tests.unit.handlers.test_tensor_handler import Twin, archive_dir


def v2(x: np.ndarray, name: str = "x", datatype: str = "FP32") -> dict:
    request = core.InferRequest([core.InferInput(name, datatype, list(x.shape), x)], id="r")
    return {"body": json.loads(json.dumps(core.handler_body(request)))}  # as the worker decodes it


@pytest.fixture
def handler(tmp_path):
    def make(config=None, n=3):
        ctx = archive_dir(tmp_path / "m", Twin().state_dict(), config)
        h = load_handler(ctx)
        ctx.begin_batch({i: f"r{i}" for i in range(n)}, [{} for _ in range(n)])
        return h, ctx

    return make


def test_every_v2_request_of_a_batch_gets_v2_outputs(handler):
    h, ctx = handler(n=4)
    x = np.random.default_rng(0).standard_normal((4, 2, 3, 3)).astype(np.float32)
    out = h.handle([v2(x[:2]), {"data": x[2].tolist()}, v2(x[3:]), v2(x[:1], datatype="BYTES")], ctx)
    reference = h.model(serve.from_numpy(x)).detach().numpy()
    first, plain, last, bad = out
    assert first["outputs"][0]["name"] == "output0" and first["outputs"][0]["shape"] == [2, 3]
    np.testing.assert_allclose(np.array(first["outputs"][0]["data"]).reshape(2, 3), reference[:2], rtol=1e-5)
    np.testing.assert_allclose(plain, reference[2], rtol=1e-5)
    assert last["outputs"][0]["datatype"] == "FP32"
    np.testing.assert_allclose(last["outputs"][0]["data"], reference[3], rtol=1e-5)
    assert bad["code"] == 400 and "not numeric" in bad["message"]
    assert [ctx.get_response_content_type(i) for i in (0, 2)] == ["application/json", "application/json"]
    parsed = core.parse_handler_answer(json.dumps(first).encode())
    assert parsed[0].data.shape == (2, 3) and parsed[0].data.dtype == np.float32


def test_configured_names_and_dtype(handler):
    config = {"handler": {"dtype": "float32", "inputs": [{"name": "IN", "datatype": "FP32", "shape": [-1, 2, 3, 3]}],
                          "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [-1, 3]}]}}  # fmt: skip
    h, ctx = handler(config, n=2)
    ints = np.ones((1, 2, 3, 3), np.int64)
    good, wrong = h.handle([v2(ints, "IN", "INT64"), v2(ints, "x", "INT64")], ctx)
    assert good["outputs"][0]["name"] == "OUT" and good["outputs"][0]["shape"] == [1, 3]
    assert wrong["code"] == 400 and "this model's input is 'IN'" in wrong["message"]


def test_decode_v2_errors():
    one = {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}
    assert decode_v2({"inputs": [one]}).shape == (1, 2)
    assert decode_v2({"inputs": [{**one, "datatype": "BF16"}]}).dtype == np.float32
    for body, message in [
        ({"inputs": [one, one]}, "exactly one input"),
        ({"inputs": [{**one, "shape": []}]}, "the first the batch"),
        ({"inputs": [{**one, "shape": [3]}]}, "does not fit FP32 of shape"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            decode_v2(body)
