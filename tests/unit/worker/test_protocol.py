"""The worker channel: frames (JSON header + raw payloads), value packing, batch encoding, and BatchRunner's
answers (serialisation, content types, wrong result counts, oversize responses, metrics) without a process."""

from __future__ import annotations

import asyncio
import io
import json

import numpy as np
import pytest

from serve.batching import InferenceRequest
from serve.batching.envelopes import PROTOCOL_HEADER
from serve.errors import InvalidInput, PredictionException
from serve.worker import Context
from serve.worker.process import BatchRunner, batch_error, serialize
from serve.worker.protocol import (
    REENCODED_TEXT_RATIO,
    ProtocolError,
    decode_batch,
    encode,
    encode_batch,
    read_message,
    read_message_sync,
    write_message_sync,
)


def test_frames_round_trip_sync_and_async():
    buffer = io.BytesIO()
    write_message_sync(buffer, {"type": "x", "n": 1}, [b"\x00\xff", b""])
    write_message_sync(buffer, {"type": "y"})
    data = buffer.getvalue()
    stream = io.BytesIO(data)
    assert read_message_sync(stream, 100) == ({"type": "x", "n": 1}, [b"\x00\xff", b""])
    assert read_message_sync(stream, 100) == ({"type": "y"}, [])
    assert read_message_sync(stream, 100) is None

    async def read_all():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await read_message(reader, 100) for _ in range(3)]

    assert asyncio.run(read_all()) == [({"type": "x", "n": 1}, [b"\x00\xff", b""]), ({"type": "y"}, []), None]


@pytest.mark.parametrize(
    "data, limit, message",
    [
        (encode({"a": 1}, [b"12345"])[:-2], 100, "ended inside a frame"),
        (encode({"a": 1}, [b"12345"]), 4, "exceed the limit of 4 bytes"),
        (b"\x00\x00\x00\x03abc", 100, "not JSON"),
        (b"\x00\x00\x00\x02[]", 100, "must be a JSON object"),
        (b"\x00\x00", 100, "length prefix"),
    ],
)
def test_malformed_frames_are_refused(data, limit, message):
    with pytest.raises(ProtocolError, match=message):
        read_message_sync(io.BytesIO(data), limit)


def test_batches_carry_bytes_text_and_json():
    requests = [
        InferenceRequest("a", {"body": b"\x89PNG"}, {"body": "image/png"}, {"x-k": "v"}),
        InferenceRequest("b", {"data": "t\ud800xt", "n": {"k": [1, 2]}}, {}, {}, explain=True),
    ]
    header, payloads = encode_batch(7, "predict", requests)
    assert payloads == [b"\x89PNG", "t\ud800xt".encode("utf-8", "surrogatepass")]  # raw, not base64 in JSON
    frame = read_message_sync(io.BytesIO(encode(header, payloads)), 1 << 20)
    assert frame is not None
    out = decode_batch(*frame)
    assert out[0].inputs == {"body": bytearray(b"\x89PNG")} and isinstance(out[0].inputs["body"], bytearray)
    assert (out[0].content_types, out[0].headers) == ({"body": "image/png"}, {"x-k": "v"})
    assert out[1].inputs == {"data": "t\ud800xt", "n": {"k": [1, 2]}} and out[1].explain


def test_serialize_and_batch_errors():
    assert serialize(b"raw") == (b"raw", "application/octet-stream")
    assert serialize("text") == (b"text", "text/plain; charset=utf-8")
    assert serialize({"a": [1]}) == (b'{\n  "a": [\n    1\n  ]\n}', "application/json")  # TorchServe's indent=2
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        serialize(object())
    assert batch_error(PredictionException("nope", 513)) == {"code": 513, "type": "PredictionException",
                                                             "message": "nope"}  # fmt: skip
    assert batch_error(KeyError("k")) == {"code": 503, "type": "InternalServerException",
                                          "message": "Prediction failed: KeyError: 'k'"}  # fmt: skip
    assert batch_error(InvalidInput("bad shape"))["code"] == 400
    assert batch_error(json.JSONDecodeError("Expecting value", "x", 0))["code"] == 400
    assert batch_error(MemoryError())["code"] == 507


def run_batch(handle, bodies, max_response_size=1000, decode=False, headers=None):
    class Handler:
        def handle(self, data, context):
            return handle(data, context)

    channel = io.BytesIO()
    context = Context("m", ".", None, 4, None, "0")
    runner = BatchRunner(Handler(), context, channel, max_response_size)
    json_type = {"body": "application/json"} if decode else {}
    requests = [InferenceRequest(f"r{i}", {"body": b}, json_type, dict(headers or {}), decode=decode)
                for i, b in enumerate(bodies)]  # fmt: skip
    runner.run(*encode_batch(1, "predict", requests))
    channel.seek(0)
    messages = []
    while (m := read_message_sync(channel, 1 << 20)) is not None:
        messages.append(m)
    return messages


def test_runner_answers_per_request_statuses_and_content_types():
    def handle(data, context):
        context.set_response_status(404, "", 1)
        context.set_response_content_type(0, "image/png")
        context.metrics.add_counter("Seen", len(data))
        return [b"png", {"missing": True}]

    [(header, bodies)] = run_batch(handle, [b"a", b"b"])
    assert [(r["status"], r["content_type"]) for r in header["responses"]] == [(200, "image/png"),
                                                                             (404, "application/json")]  # fmt: skip
    assert [bodies[r["body"]] for r in header["responses"]] == [b"png", b'{\n  "missing": true\n}']
    assert header["metrics"][0]["name"] == "Seen" and header["metrics"][0]["value"] == 2


def test_runner_fails_the_batch_on_a_wrong_count_and_one_request_on_an_oversize_body():
    [(header, _)] = run_batch(lambda data, ctx: ["only one"], [b"a", b"b"])
    assert header["error"]["code"] == 503 and "returned 1 results for 2 requests" in header["error"]["message"]
    [(header, bodies)] = run_batch(lambda data, ctx: ["x" * 2000, "small"], [b"a", b"b"])
    big, small = header["responses"]
    assert big["status"] == 507 and "exceeds max_response_size (1000 bytes)" in json.loads(bodies[0])["message"]
    assert small["status"] == 200 and bodies[1] == b"small"


def test_an_answer_the_frontend_re_encodes_is_compact_json_held_to_a_multiple_of_the_limit():
    """A v2 (or KServe v1) answer is JSON text the frontend parses and re-encodes, counting what it sends: the worker
    writes it compactly and refuses it only past REENCODED_TEXT_RATIO x max_response_size (here 8 x 1000). The same
    answer to /predictions is sent as written (indented, TorchServe's) and refused past max_response_size."""

    def handle(data, context):
        n = int(data[0]["body"])
        return [{"outputs": [{"name": "o", "datatype": "INT32", "shape": [n], "data": [7] * n}]}] * len(data)

    v2 = {PROTOCOL_HEADER: "v2"}
    [(header, bodies)] = run_batch(handle, [b"1500"], headers=v2)
    assert header["responses"][0]["status"] == 200
    assert json.loads(bodies[0])["outputs"][0]["data"] == [7] * 1500 and b" " not in bodies[0]  # 3069 bytes
    [(header, bodies)] = run_batch(handle, [b"1500"], headers={PROTOCOL_HEADER: "v1"})
    assert header["responses"][0]["status"] == 200
    [(header, bodies)] = run_batch(handle, [b"1500"])
    assert header["responses"][0]["status"] == 507 and b'\n  "outputs"' not in bodies[0]
    [(header, bodies)] = run_batch(handle, [b"5000"], headers=v2)
    message = json.loads(bodies[0])["message"]
    assert header["responses"][0]["status"] == 507
    assert message == (f"the response of 10069 bytes exceeds {REENCODED_TEXT_RATIO} x max_response_size (8000 "
                       "bytes); raise max_response_size in config.properties")  # fmt: skip


def test_runner_streams_a_generator():
    def handle(data, context):
        yield ["a", "b"]
        yield ["c", "d"]

    messages = run_batch(handle, [b"1", b"2"])
    assert [h["type"] for h, _ in messages] == ["chunk", "chunk", "result"]
    assert messages[1][1] == [b"c", b"d"] and messages[2][0]["end"] is True


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_a_request_whose_json_python_cannot_hold_is_400_and_the_rest_of_its_batch_is_served():
    seen = []

    def handle(data, context):
        seen.append([row["body"] for row in data])
        assert context.get_request_id(0) == "r1" and context.get_request_id(1) == "r3"
        return [{"got": row["body"]} for row in data]

    [(header, bodies)] = run_batch(handle, [DEEP, b'{"a": 1}', b"9" * 5000, b"[2]"], decode=True)
    assert seen == [[{"a": 1}, [2]]]
    assert [r["status"] for r in header["responses"]] == [400, 200, 400, 200]
    deep, one, huge, two = (json.loads(bodies[r["body"]]) for r in header["responses"])
    assert deep["code"] == 400 and "nested too deeply" in deep["message"]
    assert huge["code"] == 400 and "4300 digits" in huge["message"]
    assert (one, two) == ({"got": {"a": 1}}, {"got": [2]})


def test_refused_requests_keep_their_400_when_the_handler_fails_the_rest():
    def handle(data, context):
        raise RuntimeError("broken model")

    [(header, bodies)] = run_batch(handle, [DEEP, b"[1]"], decode=True)
    assert [r["status"] for r in header["responses"]] == [400, 503]
    assert (
        json.loads(bodies[header["responses"][1]["body"]])["message"] == "Prediction failed: RuntimeError: broken model"
    )
    [(header, _)] = run_batch(lambda data, ctx: 1 / 0, [DEEP], decode=True)  # nothing left: the handler is not called
    assert [r["status"] for r in header["responses"]] == [400]


def test_nan_and_infinity_serialize_as_null():
    body, _ = serialize({"v": [float("nan"), float("inf"), 1.5], "a": np.array([np.nan, 2.0])})
    assert json.loads(body, parse_constant=lambda name: pytest.fail(f"not standard JSON: {name}")) == {
        "v": [None, None, 1.5],
        "a": [None, 2.0],
    }


def test_a_refused_request_in_a_streamed_batch_gets_its_400_in_the_first_chunk():
    def handle(data, context):
        yield [f"a{row['body']}" for row in data]
        yield [f"b{row['body']}" for row in data]

    messages = run_batch(handle, [b"1", DEEP], decode=True)
    assert [h["type"] for h, _ in messages] == ["chunk", "chunk", "result"]
    (first, first_bodies), (second, second_bodies) = messages[0], messages[1]
    assert [r["status"] for r in first["responses"]] == [200, 400]
    assert first_bodies[0] == b"a1" and "nested too deeply" in json.loads(first_bodies[1])["message"]
    assert second_bodies == [b"b1", b""] and [r["status"] for r in second["responses"]] == [200, 400]
