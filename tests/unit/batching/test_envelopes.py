"""KServe envelopes opened for handlers that read plain payloads, as TorchServe's kserve/kservev2 envelopes do."""

from __future__ import annotations

import base64
import json

import pytest

from handlers.text_input import decode_text
from serve.batching import InferenceRequest
from serve.batching.envelopes import open_envelope
from serve.errors import InvalidInput

PNG = b"\x89PNG\r\n\x1a\n...."
B64 = base64.b64encode(PNG).decode()


def _request(body: object, protocol: str | None) -> InferenceRequest:
    headers = {"x-serve-protocol": protocol} if protocol else {}
    return InferenceRequest("r", {"body": json.dumps(body).encode()}, {"body": "application/json"}, headers,
                            decode=True)  # fmt: skip


def test_v1_instance_data_is_the_payload() -> None:
    assert _request({"data": B64}, "v1").handler_inputs(envelopes=True) == {"body": B64}
    assert _request({"data": B64}, "v1").handler_inputs() == {"body": {"data": B64}}  # a handler not opted in
    assert _request({"data": B64}, None).handler_inputs(envelopes=True) == {"body": {"data": B64}}  # /predictions
    assert _request({"text": "hi"}, "v1").handler_inputs(envelopes=True) == {"body": {"text": "hi"}}
    assert decode_text(_request({"data": "a film"}, "v1").handler_inputs(envelopes=True)["body"]) == "a film"


def _v2(datatype: str, shape: list[int], data: list[object]) -> dict:
    return {"id": "", "inputs": [{"name": "INPUT0", "datatype": datatype, "shape": shape, "data": data}]}


def test_v2_one_input_is_the_payload() -> None:
    assert _request(_v2("BYTES", [1], [B64]), "v2").handler_inputs(envelopes=True) == {"body": B64}
    assert _request(_v2("BYTES", [1], ["a film"]), "v2").handler_inputs(envelopes=True) == {"body": "a film"}
    uint8 = open_envelope({"body": _v2("UINT8", [len(PNG)], list(PNG))}, "v2")
    assert uint8 == {"body": PNG}  # an encoded image sent as a 1-D UINT8 tensor
    image = open_envelope({"body": _v2("FP32", [1, 1, 2, 2], [0.0, 0.5, 1.0, 0.25])}, "v2")
    assert image == {"body": [[[0.0, 0.5], [1.0, 0.25]]]}  # (1, C, H, W) -> (C, H, W)
    assert open_envelope({"body": {"inputs": "x"}}, "v2") == {"body": {"inputs": "x"}}  # not a v2 body


def test_v2_more_than_one_payload_is_400() -> None:
    with pytest.raises(InvalidInput, match="2 BYTES elements"):
        open_envelope({"body": _v2("BYTES", [2], [B64, B64])}, "v2")
    two = {"inputs": [_v2("BYTES", [1], [B64])["inputs"][0]] * 2}
    with pytest.raises(InvalidInput, match="one input per request, got 2"):
        open_envelope({"body": two}, "v2")


def test_v2_raw_bytes_come_back_as_bytes() -> None:
    """The v2 core writes BYTES elements into the handler's JSON with surrogateescape; non-UTF-8 bytes return."""
    as_text = PNG.decode("utf-8", "surrogateescape")
    assert open_envelope({"body": _v2("BYTES", [1], [as_text])}, "v2") == {"body": PNG}
