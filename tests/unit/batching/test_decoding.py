"""TorchServe's decode_input_request rule, applied in the worker; the switch travels with the request."""

from __future__ import annotations

from serve.batching import InferenceRequest
from serve.batching.decoding import decode_value, mime_type
from serve.worker.protocol import decode_batch, encode_batch


def test_decode_rule() -> None:
    assert decode_value(b'{"a": [1, 2]}', "application/json") == {"a": [1, 2]}
    assert decode_value(b"{not json", "application/json") == b"{not json"
    assert decode_value("héllo".encode(), "text/plain") == "héllo"
    assert decode_value(b"\xff", "text/plain") == b"\xff"
    assert decode_value(b"\x89PNG", "image/png") == b"\x89PNG"
    assert mime_type("Application/JSON; charset=utf-8") == "application/json"


def test_the_worker_decodes_what_the_frontend_passed_as_bytes() -> None:
    raw = InferenceRequest("r1", {"body": b"[1, 2]", "img": b"\x00"}, {"body": "application/json"}, decode=True)
    kept = InferenceRequest("r2", {"body": b"[1, 2]"}, {"body": "application/json"}, decode=False)
    header, payloads = encode_batch(7, "predict", [raw, kept])
    first, second = decode_batch(header, payloads)
    assert first.handler_inputs() == {"body": [1, 2], "img": bytearray(b"\x00")}
    assert second.handler_inputs() == {"body": bytearray(b"[1, 2]")}
