"""`max_response_size` counts the answer as it is sent: the v2 and KServe v1 REST bodies the frontend encodes are
507 one byte past it. gRPC: tests/unit/frontends/grpc/test_response_size.py; the worker's side (the intermediate it
writes for the frontend to re-encode): tests/unit/worker/test_protocol.py; the whole path against a real server:
tests/integration/test_response_size.py."""

from __future__ import annotations

import json
from pathlib import Path

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import ResponseTooLarge
from serve.frontends.errors import error_info
from tests.unit.frontends import fakes

V2_REQUEST = {"inputs": [{"name": "n", "datatype": "INT64", "shape": [1], "data": [0]}]}


async def v2_answer(request: InferenceRequest) -> InferenceResponse:
    """n INT32 values 7, n from the request: the worker's compact JSON of them is 2n + 60 bytes."""
    n = json.loads(request.inputs["body"])["inputs"][0]["data"][0]
    output = {"name": "out", "datatype": "INT32", "shape": [n], "data": [7] * n}
    return InferenceResponse(body=json.dumps({"outputs": [output]}, separators=(",", ":")).encode())


def _v2(n: int, binary: bool = False) -> dict:
    return {"inputs": [{**V2_REQUEST["inputs"][0], "data": [n]}], "parameters": {"binary_data_output": binary}}


def test_the_limit_is_the_sent_rest_body_exactly(tmp_path: Path) -> None:
    """A v2 JSON answer at the limit is sent, one byte past it is 507 naming both sizes; the same tensor as binary
    (12 kB of bytes, where its JSON is 6 kB of "7,") is counted as binary; a KServe v1 answer as its whole body."""
    v2_registry, v1_registry = fakes.FakeRegistry(), fakes.FakeRegistry()
    v2_registry.responder = v2_answer
    sizes: dict[str, int] = {}

    async def measure(server: fakes.Server) -> None:
        for kind, binary in (("json", False), ("binary", True)):
            answer = await server.inference.post("/v2/models/mnist/infer", json=_v2(3000, binary))
            assert answer.status_code == 200
            sizes[kind] = len(answer.content)

    async def measure_v1(server: fakes.Server) -> None:
        sizes["v1"] = len((await server.inference.post("/v1/models/mnist:predict", json={"instances": [1, 2]})).content)

    async def at_the_limit(server: fakes.Server) -> None:
        answer = await server.inference.post("/v2/models/mnist/infer", json=_v2(3000))
        assert answer.status_code == 200 and len(answer.content) == sizes["json"]

    async def one_past(server: fakes.Server) -> None:
        answer = await server.inference.post("/v2/models/mnist/infer", json=_v2(3000))
        assert answer.status_code == 507
        assert answer.json()["error"] == (f"the response of {sizes['json']} bytes exceeds max_response_size "
                                          f"({sizes['json'] - 1} bytes); raise max_response_size in "
                                          "config.properties")  # fmt: skip
        binary = await server.inference.post("/v2/models/mnist/infer", json=_v2(3000, binary=True))
        assert binary.status_code == 507 and str(sizes["binary"]) in binary.json()["error"]

    async def v1_one_past(server: fakes.Server) -> None:
        answer = await server.inference.post("/v1/models/mnist:predict", json={"instances": [1, 2]})
        assert answer.status_code == 507 and "exceeds max_response_size" in answer.json()["error"]

    fakes.run(measure, tmp_path, v2_registry)
    fakes.run(measure_v1, tmp_path, v1_registry)
    assert sizes["binary"] > sizes["json"] > 6000
    fakes.run(at_the_limit, tmp_path, v2_registry, max_response_size=sizes["json"])
    fakes.run(one_past, tmp_path, v2_registry, max_response_size=sizes["json"] - 1)
    fakes.run(v1_one_past, tmp_path, v1_registry, max_response_size=sizes["v1"] - 1)


def test_response_too_large_is_507_on_rest_and_resource_exhausted_on_grpc() -> None:
    info = error_info(ResponseTooLarge("the response of 9 bytes exceeds max_response_size (8 bytes)"))
    assert (info.status, info.type, info.grpc_code) == (507, "InternalServerException", "RESOURCE_EXHAUSTED")
