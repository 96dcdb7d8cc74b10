"""Streaming on a real server (issue 25): TorchServe's `send_intermediate_predict_response` contract and the
worker's continuous mode, over REST (chunked HTTP/1.1) and gRPC StreamPredictions.

- `tsstream`: TorchServe's streaming handler shape, unchanged (`from ts.handler_utils.utils import ...`): three
  intermediate chunks, the returned list as the last. It makes each next chunk only once the client has written
  an acknowledgement file for the previous one, so every chunk provably reached the client before the next was made.
- `toks`: a continuous handler (`continuous = True`) whose own thread emits numbered chunks per request, each
  stamped with a global sequence number; requests of a "group" do not go past their first chunk until the whole
  group has arrived (bounded: 60 s), so a server that ran them one at a time would show no overlap.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from serve.archive import package
from serve.frontends.grpc.generated import inference_pb2 as ipb
from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc
from tests.integration.server import WAIT_SECONDS, ServerProcess, recorder_archive

TIMEOUT = 120  # seconds per call, for a loaded machine

TS_STREAM = """
import os
import time

from ts.handler_utils.utils import send_intermediate_predict_response

ACKS = {acks!r}


def handle(data, context):
    if data is None:
        return None
    tag = data[0].get("body") or data[0].get("data")
    tag = tag.decode() if isinstance(tag, (bytes, bytearray)) else str(tag)
    for i in range(3):
        send_intermediate_predict_response([f"part{{i}};" for _ in data], context.request_ids,
                                           "Intermediate Prediction success", 200, context)
        ack, deadline = os.path.join(ACKS, f"{{tag}}.{{i}}"), time.monotonic() + 60
        while not os.path.exists(ack) and time.monotonic() < deadline:
            time.sleep(0.005)
        if not os.path.exists(ack):
            return ["no ack" for _ in data]
    return ["last" for _ in data]
"""

TOKS = """
import json
import os
import threading
import time


class Toks:
    continuous = True

    def initialize(self, context):
        self.lock = threading.Lock()
        self.streams, self.groups, self.cancelled, self.seq = {}, {}, [], 0
        threading.Thread(target=self.loop, daemon=True).start()

    def handle(self, data, context):
        raise RuntimeError("this handler runs in continuous mode only")

    def submit(self, request_id, data, context, emit):
        body = data.get("body") if data.get("body") is not None else data.get("data")
        body = json.loads(body) if isinstance(body, (bytes, bytearray)) else body
        if body.get("query") == "cancelled":
            with self.lock:
                emit({"cancelled": list(self.cancelled)}, final=True)
            return
        if body.get("fail"):
            emit({"message": "this request asked to fail"}, final=True, code=400)
            return
        if body.get("die"):
            os._exit(3)
        with self.lock:
            if body.get("group"):
                self.groups.setdefault(body["group"], set()).add(body["name"])
            self.streams[request_id] = dict(body, i=0, emit=emit, since=time.monotonic())

    def cancel(self, request_id):
        with self.lock:
            stream = self.streams.pop(request_id, None)
            if stream is not None:
                self.cancelled.append(stream["name"])

    def loop(self):
        while True:
            time.sleep(0.005)
            with self.lock:
                for request_id, s in list(self.streams.items()):
                    waiting = s.get("group") and len(self.groups[s["group"]]) < s["size"]
                    if s["i"] > 0 and waiting and time.monotonic() - s["since"] < 60:
                        continue
                    self.seq += 1
                    last = s["i"] == s["n"] - 1
                    s["emit"]({"name": s["name"], "i": s["i"], "seq": self.seq}, final=last)
                    s["i"] += 1
                    if last:
                        del self.streams[request_id]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("streaming")
    store, src, acks = base / "store", base / "src", base / "acks"
    for folder in (store, src, acks):
        folder.mkdir()
    (src / "ts_stream.py").write_text(TS_STREAM.format(acks=str(acks)))
    package("tsstream", "1.0", f"{src / 'ts_stream.py'}:handle", export_path=store, progress=False)
    (src / "toks.py").write_text(TOKS)
    (src / "toks.yaml").write_text("continuousBatching: true\ncontinuousMaxInFlight: 64\nresponseTimeout: 120\n")
    package("toks", "1.0", str(src / "toks.py"), config_file=src / "toks.yaml", export_path=store, progress=False)
    recorder_archive(store, "plain", base / "plain.log")
    (src / "plain.yaml").write_text("continuousBatching: true\n")
    package("plaincb", "1.0", str(store.parent / "plain_1_0_handler.py") + ":handle", config_file=src / "plain.yaml",
            export_path=store, progress=False)  # fmt: skip
    flags = ("--ncs", "--disable-token-auth", "--enable-model-api", "--models", "tsstream=tsstream.mar,toks=toks.mar")
    proc = ServerProcess(base / "run", store, *flags).start()
    proc.acks = acks  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.stop()


def _objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream of chunks, one object per chunk (however the reads cut them)."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)
    return out


def _rest_stream(server: ServerProcess, body: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    with httpx.stream("POST", f"{server.inference}/predictions/toks", json=body, timeout=TIMEOUT) as r:
        return r.status_code, _objects(b"".join(r.iter_raw()).decode())


def _grpc_stream(server: ServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        request = ipb.PredictionsRequest(model_name="toks", input={"data": json.dumps(body).encode()})
        return [json.loads(m.prediction) for m in stub.StreamPredictions(request, timeout=TIMEOUT)]


# ---- TorchServe's send_intermediate_predict_response ------------------------------------------------------------


def test_intermediate_responses_stream_over_rest_each_before_the_next_is_made(server: ServerProcess) -> None:
    acks: Path = server.acks  # type: ignore[attr-defined]
    received = ""
    with httpx.stream("POST", f"{server.inference}/predictions/tsstream", content=b"rest", timeout=TIMEOUT) as r:
        assert r.status_code == 200
        assert r.headers.get("transfer-encoding") == "chunked"
        for chunk in r.iter_raw():
            received += chunk.decode()
            for i in range(3):
                if f"part{i};" in received:
                    (acks / f"rest.{i}").touch()
    assert received == "part0;part1;part2;last"


def test_intermediate_responses_stream_over_grpc_one_message_per_chunk(server: ServerProcess) -> None:
    acks: Path = server.acks  # type: ignore[attr-defined]
    messages = []
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        request = ipb.PredictionsRequest(model_name="tsstream", input={"data": b"grpc"})
        for message in stub.StreamPredictions(request, timeout=TIMEOUT):
            (acks / f"grpc.{len(messages)}").touch()
            messages.append(message.prediction)
    assert messages == [b"part0;", b"part1;", b"part2;", b"last"]


# ---- continuous mode ---------------------------------------------------------------------------------------------


def _overlapping(streams: list[list[dict[str, Any]]], n: int) -> None:
    for chunks in streams:
        assert [c["i"] for c in chunks] == list(range(n)), chunks
        assert len({c["name"] for c in chunks}) == 1
    for a in streams:  # every stream's first chunk was made before every other stream's last one
        for b in streams:
            assert a[0]["seq"] < b[-1]["seq"], (a[0], b[-1])


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_concurrent_streams_of_a_continuous_handler_overlap(server: ServerProcess, protocol: str) -> None:
    n, size = 6, 8
    results: list[Any] = [None] * size

    def one(k: int) -> None:
        body = {"name": f"{protocol}{k}", "n": n, "group": f"overlap-{protocol}", "size": size}
        results[k] = _rest_stream(server, body)[1] if protocol == "rest" else _grpc_stream(server, body)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    assert all(r is not None for r in results), results
    _overlapping(results, n)


def _cancelled(server: ServerProcess, name: str) -> bool:
    """Ask the model, until it records `name` as cancelled (bounded)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        r = httpx.post(f"{server.inference}/predictions/toks", json={"query": "cancelled"}, timeout=TIMEOUT)
        assert r.status_code == 200, r.text
        if name in r.json()["cancelled"]:
            return True
        time.sleep(0.1)
    return False


def test_a_rest_client_that_disconnects_cancels_its_request(server: ServerProcess) -> None:
    url, body = f"{server.inference}/predictions/toks", {"name": "gone-rest", "n": 100000}
    with httpx.Client(timeout=TIMEOUT) as client, client.stream("POST", url, json=body) as r:
        assert r.status_code == 200
        next(r.iter_raw())
    assert _cancelled(server, "gone-rest")


def test_a_grpc_client_that_cancels_its_stream_cancels_its_request(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        body = json.dumps({"name": "gone-grpc", "n": 100000}).encode()
        call = stub.StreamPredictions(ipb.PredictionsRequest(model_name="toks", input={"data": body}), timeout=TIMEOUT)
        next(call)
        call.cancel()
    assert _cancelled(server, "gone-grpc")


def test_an_error_emitted_for_one_request_is_its_4xx_while_its_neighbours_finish(server: ServerProcess) -> None:
    out: dict[str, Any] = {}

    def rest(name: str, body: dict[str, Any]) -> None:
        out[name] = _rest_stream(server, body)

    def grpc_call(name: str, body: dict[str, Any]) -> None:
        try:
            out[name] = _grpc_stream(server, body)
        except grpc.RpcError as e:
            out[name] = (e.code(), e.details())

    jobs = [(rest, "a", {"name": "a", "n": 5}), (rest, "bad", {"fail": True}), (rest, "c", {"name": "c", "n": 5}),
            (grpc_call, "ga", {"name": "ga", "n": 5}), (grpc_call, "gbad", {"fail": True})]  # fmt: skip
    threads = [threading.Thread(target=fn, args=(name, body)) for fn, name, body in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    assert out["bad"][0] == 400 and "this request asked to fail" in json.dumps(out["bad"][1])
    assert out["gbad"] == (grpc.StatusCode.INVALID_ARGUMENT, "this request asked to fail") or (
        out["gbad"][0] == grpc.StatusCode.INVALID_ARGUMENT and "this request asked to fail" in out["gbad"][1]
    )
    for name in ("a", "c"):
        assert out[name][0] == 200 and [c["i"] for c in out[name][1]] == list(range(5))
    assert [c["i"] for c in out["ga"]] == list(range(5))


def test_stream_predictions2_answers_each_request_in_order_with_errors_in_band(server: ServerProcess) -> None:
    """TorchServe's bidirectional rpc: a send_intermediate_predict_response handler's chunks, then a continuous
    handler's error (in band, the call goes on), then its stream, on one call."""
    acks: Path = server.acks  # type: ignore[attr-defined]
    toks = [json.dumps(body).encode() for body in ({"fail": True}, {"name": "b", "n": 3})]
    sent = [ipb.PredictionsRequest(model_name="tsstream", input={"data": b"bidi"}, sequence_id="s"),
            *(ipb.PredictionsRequest(model_name="toks", input={"data": data}) for data in toks)]  # fmt: skip
    got = []
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        for message in stub.StreamPredictions2(iter(sent), timeout=TIMEOUT):
            if len(got) < 3:
                (acks / f"bidi.{len(got)}").touch()
            got.append(message)
    assert [m.prediction for m in got[:4]] == [b"part0;", b"part1;", b"part2;", b"last"]
    assert {m.sequence_id for m in got[:4]} == {"s"}
    assert got[4].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and got[4].prediction == b""
    assert "this request asked to fail" in got[4].status.message
    assert [json.loads(m.prediction)["i"] for m in got[5:]] == [0, 1, 2]


def test_a_grpc_client_that_cancels_stream_predictions2_cancels_its_request(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        body = json.dumps({"name": "gone-bidi", "n": 100000}).encode()
        call = stub.StreamPredictions2(iter([ipb.PredictionsRequest(model_name="toks", input={"data": body})]),
                                       timeout=TIMEOUT)  # fmt: skip
        next(call)  # answered after the client's half-close: the half-close waits for the answer
        call.cancel()
    assert _cancelled(server, "gone-bidi")


def test_continuous_batching_is_accepted_only_for_a_continuous_handler(server: ServerProcess) -> None:
    described = httpx.get(f"{server.management}/models/toks", timeout=TIMEOUT).json()[0]
    assert described["continuousBatching"] is True
    r = httpx.post(f"{server.management}/models", params={"url": "plaincb.mar", "initial_workers": 1,
                                                          "synchronous": "true"}, timeout=TIMEOUT)  # fmt: skip
    assert r.status_code == 400, r.text
    assert "continuous = True" in r.json()["message"] and "submit(request_id, data, context, emit)" in r.text


def test_a_worker_crash_fails_its_streams_in_flight_and_the_worker_restarts(server: ServerProcess) -> None:
    """Last in this file: it restarts the toks worker."""
    with grpc.insecure_channel(server.grpc_inference) as channel:
        stub = ipb_grpc.InferenceAPIsServiceStub(channel)
        body = json.dumps({"name": "crash", "n": 100000}).encode()
        call = stub.StreamPredictions(ipb.PredictionsRequest(model_name="toks", input={"data": body}), timeout=TIMEOUT)
        next(call)
        dead = httpx.post(f"{server.inference}/predictions/toks", json={"die": True}, timeout=TIMEOUT)
        assert dead.status_code == 500 and "Worker died" in dead.text, dead.text
        with pytest.raises(grpc.RpcError) as broken:
            for _ in range(100000):
                next(call)
        assert "Worker died" in (broken.value.details() or ""), broken.value.details()
    deadline = time.monotonic() + WAIT_SECONDS
    status = 0
    while time.monotonic() < deadline and status != 200:
        url = f"{server.inference}/predictions/toks"
        status = httpx.post(url, json={"query": "cancelled"}, timeout=TIMEOUT).status_code
        time.sleep(0.2)
    assert status == 200
