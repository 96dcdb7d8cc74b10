"""The channel between the server and a worker process: length-prefixed frames, a JSON header plus raw payloads.

    frame   = u32 big-endian header length | header (UTF-8 JSON object) | payload bytes, concatenated
    header["sizes"] = the payloads' lengths, in order (absent when there are none)

No pickle crosses the channel: a worker that misbehaves can send garbage, never code. Bytes travel raw (an image is
not base64'd into JSON); text and JSON values are described in the header (`pack_value`).

Messages, by header "type":
    worker -> server   ready {pid, optimization, continuous} the handler loaded (optimization: worker/optimizing.py)
                       load_error {error_type, message, traceback, invalid_model}
                       chunk {id, responses, metrics?}     a streamed part of batch `id` (a handler that yields)
                       result {id, responses | error | end, metrics, handler_ms}
                       metrics {metrics}                   a continuous handler's records with no frame to ride on
    server -> worker   batch {id, kind, requests}          kind "predict" or "describe"
                       submit {id, kind, requests: [one]}  a continuous handler's request (worker/continuous.py)
                       cancel {id}                         its client went away, or its deadline passed
A response is {status, headers, content_type, body: payload index}; an error {code, type, message}.
The worker exits when its input closes.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any, BinaryIO

from serve.batching.job import InferenceRequest

_LENGTH = struct.Struct(">I")
MAX_HEADER_BYTES = 64 << 20
# A response a frontend re-encodes (a KServe v1 or v2 answer) travels here as JSON text, which spells a tensor in up
# to this many characters per byte of it (FP16 values as JSON floats): the worker lets such a response be this many
# times max_response_size, and the frontend holds the bytes it sends to max_response_size.
REENCODED_TEXT_RATIO = 8
REENCODED_PROTOCOLS = ("v1", "v2")  # the x-serve-protocol values (batching/envelopes.py) of such answers

Message = tuple[dict[str, Any], list[bytes]]


class ProtocolError(Exception):
    """A frame that cannot be what the other side sent on purpose (truncated, oversized, not JSON)."""


def encode(header: dict[str, Any], payloads: list[bytes] | None = None) -> bytes:
    """One frame: the header (with the payload sizes added) and the payloads."""
    payloads = payloads or []
    if payloads:
        header = {**header, "sizes": [len(p) for p in payloads]}
    head = json.dumps(header, separators=(",", ":")).encode()  # ASCII: lone surrogates survive
    return b"".join([_LENGTH.pack(len(head)), head, *payloads])


def _parse_header(head: bytes, max_payload_bytes: int) -> tuple[dict[str, Any], list[int]]:
    try:
        header = json.loads(head)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"frame header is not JSON ({e}): {head[:80]!r}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"frame header must be a JSON object, got {type(header).__name__}")
    sizes = header.pop("sizes", [])
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n >= 0 for n in sizes):
        raise ProtocolError(f"frame payload sizes must be a list of non-negative ints, got {sizes!r}")
    if sum(sizes) > max_payload_bytes:
        raise ProtocolError(f"frame payloads of {sum(sizes)} bytes exceed the limit of {max_payload_bytes} bytes")
    return header, sizes


def _header_length(prefix: bytes) -> int:
    (length,) = _LENGTH.unpack(prefix)
    if length > MAX_HEADER_BYTES:
        raise ProtocolError(f"frame header of {length} bytes exceeds the limit of {MAX_HEADER_BYTES} bytes")
    return length


async def read_message(reader: asyncio.StreamReader, max_payload_bytes: int) -> Message | None:
    """The next message, or None when the stream ended cleanly between frames."""
    try:
        prefix = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ProtocolError("the stream ended inside a frame's length prefix") from None
        return None
    try:
        header, sizes = _parse_header(await reader.readexactly(_header_length(prefix)), max_payload_bytes)
        return header, [await reader.readexactly(n) for n in sizes]
    except asyncio.IncompleteReadError:
        raise ProtocolError("the stream ended inside a frame") from None


def read_message_sync(stream: BinaryIO, max_payload_bytes: int) -> Message | None:
    """read_message for a blocking binary stream (the worker's side)."""
    prefix = stream.read(_LENGTH.size)
    if not prefix:
        return None
    header, sizes = _parse_header(_read_exactly(stream, _header_length(_exact(prefix))), max_payload_bytes)
    return header, [_read_exactly(stream, n) for n in sizes]


def write_message_sync(stream: BinaryIO, header: dict[str, Any], payloads: list[bytes] | None = None) -> None:
    stream.write(encode(header, payloads))
    stream.flush()


def _exact(prefix: bytes) -> bytes:
    if len(prefix) != _LENGTH.size:
        raise ProtocolError("the stream ended inside a frame's length prefix")
    return prefix


def _read_exactly(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise ProtocolError(f"the stream ended inside a frame ({len(data)} of {n} bytes)")
    return data


# ---- values and requests -------------------------------------------------------------------------------------


def pack_value(value: Any, payloads: list[bytes]) -> dict[str, Any]:
    """Describe `value` for a header: bytes and text go to `payloads` by index, anything else inline as JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        payloads.append(bytes(value))
        return {"bytes": len(payloads) - 1}
    if isinstance(value, str):
        payloads.append(value.encode("utf-8", "surrogatepass"))
        return {"str": len(payloads) - 1}
    return {"json": value}


def unpack_value(desc: dict[str, Any], payloads: list[bytes]) -> Any:
    """The value `pack_value` described; bytes arrive as a bytearray, as TorchServe hands them to handlers."""
    if "bytes" in desc:
        return bytearray(payloads[desc["bytes"]])
    if "str" in desc:
        return payloads[desc["str"]].decode("utf-8", "surrogatepass")
    return desc.get("json")


def encode_batch(batch_id: int, kind: str, requests: list[InferenceRequest]) -> Message:
    """The `batch` message for these requests."""
    payloads: list[bytes] = []
    items = []
    for r in requests:
        inputs = [{"name": name, "content_type": r.content_types.get(name, ""), **pack_value(v, payloads)}
                  for name, v in r.inputs.items()]  # fmt: skip
        items.append({"request_id": r.request_id, "headers": r.headers, "explain": r.explain, "decode": r.decode,
                      "inputs": inputs})  # fmt: skip
    return {"type": "batch", "id": batch_id, "kind": kind, "requests": items}, payloads


def decode_batch(header: dict[str, Any], payloads: list[bytes]) -> list[InferenceRequest]:
    """The requests of a `batch` message."""
    out = []
    for item in header["requests"]:
        inputs = {i["name"]: unpack_value(i, payloads) for i in item["inputs"]}
        types = {i["name"]: i["content_type"] for i in item["inputs"] if i["content_type"]}
        out.append(InferenceRequest(item["request_id"], inputs, types, dict(item["headers"]), bool(item["explain"]),
                                    bool(item.get("decode", False))))  # fmt: skip
    return out
