"""`max_response_size` counts the bytes that are sent, against a real `serve` process (max_response_size 3 MB here).

An answer is sent as the worker serialised it on `/predictions` (REST, and gRPC Predictions' `prediction`), but
re-encoded on v2 (REST JSON or the binary tensor extension, gRPC raw_output_contents): what counts is the REST body
or the serialized gRPC message, not the worker's JSON text of the tensor (a 2 MiB INT32 answer was refused as 8.3 MB
of indented JSON, 507 on REST, INTERNAL on gRPC). An answer over the limit is 507 on REST and RESOURCE_EXHAUSTED on
gRPC, never INTERNAL.

Model `big`: a v2 request `[n, base]` gets one INT32 output of n values base + (i % 10); a `/predictions` request
with body `n` gets n bytes.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import httpx
import numpy as np
import pytest

from serve.archive import package
from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as v2
from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as v2_grpc
from serve.frontends.grpc.generated import inference_pb2 as ts
from serve.frontends.grpc.generated import inference_pb2_grpc as ts_grpc
from tests.integration.server import ServerProcess

LIMIT = 3_000_000
TIMEOUT = 60
BIG = """
def handle(data, context):
    if data is None:
        return None
    out = []
    for row in data:
        body = row.get("body") if row.get("body") is not None else row.get("data")
        if isinstance(body, dict):  # a v2 request
            n, base = body["inputs"][0]["data"]
            out.append({"outputs": [{"name": "out", "datatype": "INT32", "shape": [n],
                                     "data": [base + i % 10 for i in range(n)]}]})
        else:
            out.append(b"x" * int(bytes(body)))
    return out
"""
MIB2 = 1 << 19  # INT32 values in 2 MiB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("response_size")
    store = base / "store"
    store.mkdir()
    (base / "big.py").write_text(BIG)
    package("big", "1.0", f"{base / 'big.py'}:handle", export_path=store, progress=False)
    flags = ("--ncs", "--disable-token-auth", "--models", "big=big.mar")
    proc = ServerProcess(base / "run", store, *flags, max_response_size=LIMIT).start()
    try:
        yield proc
    finally:
        proc.stop()


def _rest_v2(server: ServerProcess, n: int, base: int, binary: bool = False) -> httpx.Response:
    body = {"inputs": [{"name": "in", "datatype": "INT64", "shape": [2], "data": [n, base]}],
            "parameters": {"binary_data_output": binary}}  # fmt: skip
    return httpx.post(f"{server.inference}/v2/models/big/infer", json=body, timeout=TIMEOUT)


def _grpc_v2(server: ServerProcess, n: int, base: int) -> v2.ModelInferResponse:
    request = v2.ModelInferRequest(model_name="big")
    request.inputs.add(name="in", datatype="INT64", shape=[2]).contents.int64_contents.extend([n, base])
    options = [("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(server.grpc_inference, options=options) as channel:
        response: v2.ModelInferResponse = v2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=TIMEOUT)
        return response


def _exhausted(call: object, *args: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(*args)  # type: ignore[operator]
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value
    return err.value


def test_a_2_mib_int32_answer_is_counted_as_it_is_sent(server: ServerProcess) -> None:
    """The worker's JSON of it is 6.3 MB; REST sends 1 MB of JSON or 2 MiB binary, gRPC 2 MiB: all under 3 MB."""
    expected = (7 + np.arange(MIB2) % 10).astype(np.int32)
    plain = _rest_v2(server, MIB2, 7)
    assert plain.status_code == 200, plain.text[:300]
    assert len(plain.content) < LIMIT and plain.json()["outputs"][0]["data"] == expected.tolist()
    binary = _rest_v2(server, MIB2, 7, binary=True)
    assert binary.status_code == 200, binary.text[:300]
    assert binary.content.endswith(expected.tobytes())
    answer = _grpc_v2(server, MIB2, 7)
    assert answer.ByteSize() < LIMIT and answer.raw_output_contents[0] == expected.tobytes()


def test_an_answer_over_the_limit_is_507_on_rest_and_resource_exhausted_on_grpc(server: ServerProcess) -> None:
    # JSON of values with 10 digits: 5.8 MB sent as JSON (507 naming its size), 2 MiB as binary (fine)
    wide = _rest_v2(server, MIB2, 1_000_000_000)
    assert wide.status_code == 507, wide.text[:300]
    message = wide.json()["error"]
    assert "exceeds max_response_size (3000000 bytes)" in message and "raise max_response_size" in message
    assert _rest_v2(server, MIB2, 1_000_000_000, binary=True).status_code == 200
    assert _grpc_v2(server, MIB2, 1_000_000_000).raw_output_contents[0][:4] == np.int32(1_000_000_000).tobytes()
    # 4 MiB as binary: over the limit on both protocols
    assert _rest_v2(server, 2 * MIB2, 0, binary=True).status_code == 507
    _exhausted(_grpc_v2, server, 2 * MIB2, 0)
    # /predictions: the worker's bytes are what is sent
    over = httpx.post(f"{server.inference}/predictions/big", content=b"3100000", timeout=TIMEOUT)
    assert over.status_code == 507 and "exceeds max_response_size" in over.json()["message"]
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        request = ts.PredictionsRequest(model_name="big", input={"data": b"3100000"})
        error = _exhausted(stub.Predictions, request, TIMEOUT)
        assert "exceeds max_response_size" in (error.details() or "")
        small = stub.Predictions(ts.PredictionsRequest(model_name="big", input={"data": b"1000"}), timeout=TIMEOUT)
        assert small.prediction == b"x" * 1000
    assert httpx.get(f"{server.inference}/ping", timeout=TIMEOUT).status_code == 200


def test_the_server_keeps_its_worker(server: ServerProcess) -> None:
    """No answer above killed the worker (the channel carries a re-encoded answer's JSON text whole)."""
    described = httpx.get(f"{server.management}/models/big", timeout=TIMEOUT).json()[0]["workers"]
    assert len(described) == 1 and described[0]["status"] == "READY"
    assert "malformed reply" not in server.log(tail=200_000)
