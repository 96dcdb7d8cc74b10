"""Triton's sequence and decoupled examples (tests/examples/triton_client/, unchanged) as their own processes against a
real server, on both gRPC servers (serve's own HTTP/2 server and grpcio): the stream clients keep three sequences (two
integer ids, one string id) on one ModelStreamInfer stream, the sync clients send the same sequences through
ModelInfer and REST `/v2/.../infer` (the sequence_* request parameters), and simple_grpc_custom_repeat reads ten
streamed answers to one request. Each prints "PASS" and exits 0 only when every answer is the expected one.
`simple_sequence` runs on two workers and refuses a request of a sequence its worker did not start
(triton_sequence_models.py), so the clients also check that each sequence stays on one worker.

Also checked on REST: Triton's answers to what a sequence model refuses (a 400 with the reason): no sequence_id, a
new id without sequence_start, an id after its sequence_end, a flag that is not a boolean.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.examples.triton_sequence_models import build_sequence_store
from tests.integration.server import ServerProcess

# tritonclient is never imported here: its protos share the package `inference` with serve's stubs, which other
# test modules load into this process's descriptor pool; the examples run in their own processes
pytestmark = pytest.mark.skipif(importlib.util.find_spec("tritonclient") is None,
                                reason="tritonclient (a test extra) runs Triton's examples")  # fmt: skip
# not "triton": a directory of that name on a subprocess's sys.path shadows the package torch probes for
EXAMPLES = Path(__file__).resolve().parent / "triton_client"
CLIENT_SECONDS = 300  # a bound for a loaded machine; the clients take about a second each
GRPC_CLIENTS = ["simple_grpc_sequence_stream_infer_client.py", "simple_grpc_aio_sequence_stream_infer_client.py",
                "simple_grpc_sequence_sync_infer_client.py", "simple_grpc_custom_repeat.py"]  # fmt: skip


@pytest.fixture(scope="module", params=["serve", "grpcio"])
def served(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"triton_sequences_{request.param}")
    store = base / "store"
    store.mkdir()
    build_sequence_store(store, base / "src")
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models",
                           "simple_sequence=simple_sequence.mar", "repeat_int32=repeat_int32.mar",
                           grpc_server=request.param)  # fmt: skip
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_client(name: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / name), "-u", url], capture_output=True, text=True,
                          timeout=CLIENT_SECONDS)  # fmt: skip


@pytest.mark.parametrize("client", GRPC_CLIENTS)
def test_triton_grpc_example_passes(served, client):
    done = run_client(client, served.grpc_inference)
    assert done.returncode == 0 and "PASS" in done.stdout, f"{done.stdout}\n{done.stderr}\n{served.log()}"


def test_triton_http_sequence_example_passes(served):
    done = run_client("simple_http_sequence_sync_infer_client.py", served.inference.removeprefix("http://"))
    assert done.returncode == 0 and "PASS" in done.stdout, f"{done.stdout}\n{done.stderr}\n{served.log()}"


def infer(server: ServerProcess, value: int, **parameters: object) -> httpx.Response:
    body = {"inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
            "parameters": parameters}  # fmt: skip
    return httpx.post(f"{server.inference}/v2/models/simple_sequence/infer", json=body, timeout=300)


def test_rest_sequence_parameters_and_refusals(served):
    started = infer(served, 5, sequence_id=77, sequence_start=True)
    assert started.status_code == 200 and started.json()["outputs"][0]["data"] == [6], started.text
    assert infer(served, 9, sequence_id=77).json()["outputs"][0]["data"] == [9]
    assert infer(served, 2, sequence_id=77, sequence_end=True).json()["outputs"][0]["data"] == [2]
    refusals = {
        "no id": (infer(served, 1), "set the request parameter sequence_id"),
        "new id, no start": (infer(served, 1, sequence_id="never-started"), "is not open"),
        "after its end": (infer(served, 1, sequence_id=77), "was ended"),
        "flag type": (infer(served, 1, sequence_id=78, sequence_start="yes"), "sequence_start must be a boolean"),
    }
    for what, (response, words) in refusals.items():
        assert response.status_code == 400 and words in response.text, (what, response.text)


def test_the_model_config_shows_the_sequence_batcher(served):
    """Triton's ModelConfig of a sequence model has `sequence_batching` (what perf_analyzer reads to send sequences),
    not `dynamic_batching`, on REST and gRPC."""
    import grpc

    from serve.frontends.grpc.generated import grpc_predict_v2_pb2 as pb
    from serve.frontends.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc

    config = httpx.get(f"{served.inference}/v2/models/simple_sequence/config", timeout=60).json()
    assert config["sequence_batching"] == {"max_sequence_idle_microseconds": 60_000_000}
    assert "dynamic_batching" not in config
    with grpc.insecure_channel(served.grpc_inference) as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelConfig(pb.ModelConfigRequest(name="simple_sequence"),
                                                                       timeout=60)  # fmt: skip
    assert answer.config.sequence_batching.max_sequence_idle_microseconds == 60_000_000
    assert not answer.config.HasField("dynamic_batching")
