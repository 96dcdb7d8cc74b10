"""TorchServe's stateful example (examples/stateful/sequence_batching), its handler and model unchanged, on a real
server with two workers: every request of a sequence goes to the worker that holds its state.

The handler keeps a running sum per sequence id in its worker's memory (an LRU), so without routing two workers
each hold part of a sequence and the README's 1, 2, 3 answers 1, 2, 4 instead of 1, 3, 6. Checked here, with the
model-config TorchServe's own test uses (test_example_stateful_sequence_batching_http.py): the README's
1, 3, 6; TorchServe's two interleaved sequences (seq_0 sends 1, 3, 5, 7, 9 and seq_1 2, 4, 6, 8, 10 from two
threads) answer TorchServe's "1 4 9 16 25" and "2 6 12 20 30"; a request without the id header opens a sequence
whose id comes back in the `ts_request_sequence_id` header. Two more registrations of the same archive check the
limits: `maxNumSequence: 2` answers a third sequence 503 (TorchServe's message) until one ends
(`ts_request_sequence_end: true`), after which that id is a 400; `sequenceMaxIdleMSec: 300` frees an idle
sequence (describe's openSequences drops to 0) and its id is then a 400 that says it expired; a sequence whose
worker process was killed and restarted is a 503 saying its state is lost, then a 400.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.examples.ts_files import archive, example_files, torch_import
from tests.helpers import torch
from tests.integration.server import ServerProcess

pytestmark = pytest.mark.skipif(torch is None, reason="torch is not installed (it makes the stand-in weights)")
LRU = Path(__file__).resolve().parent / "stateful_lru" / "lru.py"
SEQ, START, END = "ts_request_sequence_id", "ts_request_sequence_start", "ts_request_sequence_end"
# TorchServe's test's model-config (its example's own has sequenceMaxIdleMSec: 10, which TorchServe's test replaces)
TS_TEST_YAML = """minWorkers: 2
maxWorkers: 2
batchSize: 4
maxNumSequence: 4
sequenceMaxIdleMSec: 5000
maxSequenceJobQueueSize: 10
sequenceBatching: true

handler:
  cache:
    capacity: 4
"""
CAPPED = (TS_TEST_YAML.replace("Workers: 2", "Workers: 1").replace("maxNumSequence: 4", "maxNumSequence: 2")
          .replace("sequenceMaxIdleMSec: 5000", "sequenceMaxIdleMSec: 600000"))  # fmt: skip
CROWD = TS_TEST_YAML.replace("maxNumSequence: 4", "maxNumSequence: 8").replace("5000", "600000")
IDLE = CAPPED.replace("sequenceMaxIdleMSec: 600000", "sequenceMaxIdleMSec: 300")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_stateful")
    store = base / "store"
    store.mkdir()
    src = example_files(base / "examples", "stateful")
    torch.manual_seed(3)
    net = torch_import(src / "model.py").Net()
    torch.save(net.state_dict(), base / "model_cnn.pt")
    models = {"stateful": TS_TEST_YAML, "capped": CAPPED, "idle": IDLE, "phoenix": CAPPED, "crowd": CROWD}
    for name, yaml in models.items():
        (base / f"{name}.yaml").write_text(yaml)
        archive(store, "--model-name", name, "--version", "1.0", "--model-file", str(src / "model.py"),
                "--serialized-file", str(base / "model_cnn.pt"),
                "--handler", str(src / "sequence_batching" / "stateful_handler.py"), "--extra-files", str(LRU),
                "--config-file", str(base / f"{name}.yaml"))  # fmt: skip
    server = ServerProcess(base / "run", store, "--ncs", "--disable-token-auth", "--models",
                           "stateful=stateful.mar", "capped=capped.mar", "idle=idle.mar",
                           "phoenix=phoenix.mar", "crowd=crowd.mar")  # fmt: skip
    server.start()
    try:
        yield server, src
    finally:
        server.stop()


def predict(server: ServerProcess, model: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{server.inference}/predictions/{model}", content=body, headers=headers, timeout=300)


def test_readme_sequence_answers_1_3_6(served):
    server, src = served
    answers = [predict(server, "stateful", (src / "sample" / f"sample{i}.txt").read_bytes(), **{SEQ: "seq_readme"})
               for i in (1, 2, 3)]  # fmt: skip
    assert [(r.status_code, r.text) for r in answers] == [(200, "1"), (200, "3"), (200, "6")], server.log()
    assert all(r.headers[SEQ] == "seq_readme" for r in answers)
    assert predict(server, "stateful", b"0", **{SEQ: "seq_readme", END: "true"}).text == "6"  # ended: room for more


def test_interleaved_sequences_on_two_workers_are_kept_apart(served):
    server, _ = served
    out: dict[str, list[str]] = {}

    def run(sequence_id: str, first: int) -> None:
        out[sequence_id] = [predict(server, "stateful", str(first + 2 * i).encode(), **{SEQ: sequence_id}).text
                            for i in range(5)]  # fmt: skip

    threads = [threading.Thread(target=run, args=("seq_0", 1)), threading.Thread(target=run, args=("seq_1", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert " ".join(out["seq_0"]) == "1 4 9 16 25", server.log()
    assert " ".join(out["seq_1"]) == "2 6 12 20 30"
    describe = httpx.get(f"{server.management}/models/stateful", timeout=60).json()[0]
    assert describe["stateful"] is True and describe["maxNumSequence"] == 4
    assert describe["sequenceMaxIdleMSec"] == 5000 and describe["maxSequenceJobQueueSize"] == 10
    assert len(describe["workers"]) == 2
    for sequence_id, total in (("seq_0", "25"), ("seq_1", "30")):  # ended, so later tests find room under the cap
        assert predict(server, "stateful", b"0", **{SEQ: sequence_id, END: "true"}).text == total


def test_many_concurrent_sequences_each_keep_their_sum(served):
    """Eight sequences at once on two workers, so both workers are busy and batches hold several sequences: every
    running sum is right only if each sequence's requests all reach the worker that holds it."""
    server, _ = served
    sums: dict[int, list[str]] = {}

    def run(k: int) -> None:
        sums[k] = [predict(server, "crowd", str(k + i).encode(), **{SEQ: f"crowd-{k}"}).text for i in range(6)]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    expected = {k: [str(sum(k + j for j in range(i + 1))) for i in range(6)] for k in range(8)}
    assert sums == expected, server.log()


def test_a_request_without_an_id_opens_a_sequence_and_gets_its_id(served):
    server, _ = served
    first = predict(server, "stateful", b"5")
    assert first.status_code == 200 and first.text == "5"
    sequence_id = first.headers[SEQ]
    assert sequence_id.startswith("ts-seq-")
    assert predict(server, "stateful", b"6", **{SEQ: sequence_id}).text == "11"
    assert predict(server, "stateful", b"1", **{SEQ: sequence_id, END: "true"}).text == "12"


def test_the_sequence_cap_is_a_503_until_one_ends(served):
    server, _ = served
    assert predict(server, "capped", b"1", **{SEQ: "a"}).text == "1"
    assert predict(server, "capped", b"2", **{SEQ: "b"}).text == "2"
    refused = predict(server, "capped", b"3", **{SEQ: "c"})
    assert refused.status_code == 503
    assert "has no worker to serve inference request" in refused.json()["message"]
    assert "maxNumSequence=2" in refused.json()["message"]
    assert predict(server, "capped", b"10", **{SEQ: "a", END: "true"}).text == "11"
    closed = predict(server, "capped", b"1", **{SEQ: "a"})
    assert closed.status_code == 400 and "was ended" in closed.json()["message"]
    assert predict(server, "capped", b"3", **{SEQ: "c"}).text == "3"  # room again
    restarted = predict(server, "capped", b"7", **{SEQ: "a", START: "true"})
    assert restarted.status_code == 503  # b and c are open: the cap holds for a restart too
    assert predict(server, "capped", b"0", **{SEQ: "b", END: "true"}).text == "2"
    assert predict(server, "capped", b"7", **{SEQ: "a", START: "true"}).text == "18"  # the handler's LRU kept a


def test_an_idle_sequence_is_freed_and_its_id_then_refused(served):
    server, _ = served
    assert predict(server, "idle", b"4", **{SEQ: "sleepy"}).text == "4"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        describe = httpx.get(f"{server.management}/models/idle", timeout=60).json()[0]
        if describe["openSequences"] == 0:
            break
        time.sleep(0.2)
    assert describe["openSequences"] == 0, describe
    expired = predict(server, "idle", b"1", **{SEQ: "sleepy"})
    assert expired.status_code == 400 and "expired" in expired.json()["message"], expired.text


def test_stream_predictions2_carries_a_sequence(served):
    """TorchServe's bidirectional gRPC call: `sequence_id` names the sequence, the input `ts_request_sequence_end`
    ends it; the answers carry the id (a new one for a request without it), a request after the end is answered
    in band with INVALID_ARGUMENT and the call goes on."""
    grpc = pytest.importorskip("grpc")
    from serve.frontends.grpc.generated import inference_pb2 as pb
    from serve.frontends.grpc.generated import inference_pb2_grpc

    server, _ = served

    def request(value: int, sequence_id: str | None = None, end: bool = False) -> pb.PredictionsRequest:
        inputs = {"data": str(value).encode(), **({END: b"true"} if end else {})}
        return pb.PredictionsRequest(model_name="stateful", sequence_id=sequence_id, input=inputs)

    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = inference_pb2_grpc.InferenceAPIsServiceStub(channel)
        sent = [request(1, "grpc_seq"), request(2, "grpc_seq"), request(3, "grpc_seq", end=True),
                request(4, "grpc_seq"), request(7)]  # fmt: skip
        answers = list(stub.StreamPredictions2(iter(sent), timeout=300))
    assert [(a.prediction, a.sequence_id) for a in answers[:3]] == [(b"1", "grpc_seq"), (b"3", "grpc_seq"),
                                                                      (b"6", "grpc_seq")]  # fmt: skip
    ended = answers[3]
    assert ended.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "was ended" in ended.status.message
    assert answers[4].prediction == b"7" and answers[4].sequence_id.startswith("ts-seq-")


def test_a_sequence_whose_worker_died_is_closed_with_a_503(served):
    server, _ = served
    assert predict(server, "phoenix", b"5", **{SEQ: "p"}).text == "5"  # its state is in this worker process
    (worker,) = httpx.get(f"{server.management}/models/phoenix", timeout=60).json()[0]["workers"]
    os.kill(worker["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        (now,) = httpx.get(f"{server.management}/models/phoenix", timeout=60).json()[0]["workers"]
        if now["status"] == "READY" and now["pid"] != worker["pid"]:
            break
        time.sleep(0.2)
    assert now["status"] == "READY" and now["pid"] != worker["pid"], now
    lost = predict(server, "phoenix", b"1", **{SEQ: "p"})
    assert lost.status_code == 503 and "was restarted" in lost.json()["message"], lost.text
    assert predict(server, "phoenix", b"1", **{SEQ: "p"}).status_code == 400
    assert predict(server, "phoenix", b"2", **{SEQ: "p", START: "true"}).text == "2"  # a new sequence, new state
