"""v2 tensors: datatypes <-> numpy, JSON `data`, the binary layout (HTTP binary extension and gRPC raw contents).

- Datatypes (spec §1.4): BOOL, UINT8/16/32/64, INT8/16/32/64, FP16, FP32, FP64, BYTES, BF16. `STRING` is read
  as BYTES (Triton's classification output uses it).
- numpy has no bfloat16: a BF16 tensor is a float32 array here (as tritonclient gives it back); on the wire it is
  the top 2 bytes of each little-endian float32 (truncation, tritonclient's packing).
- BYTES is a numpy object array of `bytes`; on the wire each element is a u32 little-endian length + the bytes.
  In JSON `data` an element is a string; bytes that are not UTF-8 survive as lone surrogates (surrogateescape).
- JSON `data` may be nested or flat (servers must accept both); we always write it flat, row-major.
- The binary extension: the JSON header, then the blobs of the tensors flagged binary, in order;
  `Inference-Header-Content-Length` = the JSON header's length (`split_body`, `join_body`).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from serve.errors import InvalidInput

HEADER_LENGTH = "inference-header-content-length"

NUMPY_TYPES: dict[str, Any] = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BF16": np.float32, "BYTES": np.object_,
}  # fmt: skip
DATATYPES = tuple(NUMPY_TYPES)
_ALIASES = {"STRING": "BYTES"}
_BY_KIND = {np.dtype(t).name: name for name, t in NUMPY_TYPES.items() if name not in ("BF16", "BYTES")}
_U32 = struct.Struct("<I")


def normalize(datatype: Any) -> str:
    """The canonical datatype name; InvalidInput lists the known ones."""
    name = _ALIASES.get(str(datatype), str(datatype))
    if name not in NUMPY_TYPES:
        raise InvalidInput(f"unknown datatype {datatype!r}: use one of {', '.join(DATATYPES)}")
    return name


def numpy_dtype(datatype: str) -> np.dtype:
    return np.dtype(NUMPY_TYPES[normalize(datatype)])


def datatype_of(array: np.ndarray) -> str:
    """The v2 datatype of a numpy array: object/str/bytes arrays are BYTES."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    name = _BY_KIND.get(array.dtype.name)
    if name is None:
        raise InvalidInput(f"numpy dtype {array.dtype} has no v2 datatype: use one of {', '.join(_BY_KIND)}")
    return name


def check_shape(shape: Any) -> list[int]:
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                          for d in shape):  # fmt: skip
        raise InvalidInput(f"shape must be a list of non-negative integers, got {shape!r}")
    return list(shape)


def _count(shape: list[int]) -> int:
    return math.prod(shape)  # Python ints: a shape past int64 is a mismatch (400), not an OverflowError (500)


def from_json(data: Any, datatype: str, shape: Any, name: str = "") -> np.ndarray:
    """`data` (nested or flat) as an array of `shape`; InvalidInput when the element count or types do not fit."""
    datatype, shape = normalize(datatype), check_shape(shape)
    flat = list(_flatten(data if isinstance(data, list) else [data]))
    if len(flat) != _count(shape):
        raise InvalidInput(f"input {name!r}: {len(flat)} elements in data for shape {shape} "
                           f"({_count(shape)} expected)")  # fmt: skip
    if datatype == "BYTES":
        values = [_to_bytes_element(v, name) for v in flat]
        out = np.empty(len(values), dtype=np.object_)
        out[:] = values
        return out.reshape(shape)
    for v in flat:
        if isinstance(v, (str, list, dict)) or v is None:
            raise InvalidInput(f"input {name!r}: {datatype} data holds {v!r}: send numbers (booleans for BOOL)")
    try:
        return np.array(flat, dtype=numpy_dtype(datatype)).reshape(shape)
    except (OverflowError, ValueError, TypeError) as e:
        raise InvalidInput(f"input {name!r}: data does not fit {datatype}: {e}") from None


def to_json(array: np.ndarray, datatype: str | None = None) -> list[Any]:
    """Flat row-major `data`; BYTES elements as strings."""
    datatype = normalize(datatype) if datatype else datatype_of(array)
    flat = np.asarray(array).reshape(-1)
    if datatype == "BYTES":
        return [_to_text(v) for v in flat.tolist()]
    return flat.astype(numpy_dtype(datatype)).tolist()


def from_bytes(raw: bytes | memoryview, datatype: str, shape: Any, name: str = "") -> np.ndarray:
    """The binary layout (spec §1.4) back to an array; InvalidInput when the size does not match the shape."""
    datatype, shape = normalize(datatype), check_shape(shape)
    count = _count(shape)
    if datatype == "BYTES":
        return _bytes_elements(bytes(raw), count, name).reshape(shape)
    size = 2 if datatype == "BF16" else numpy_dtype(datatype).itemsize
    if len(raw) != count * size:
        raise InvalidInput(f"input {name!r}: {len(raw)} bytes of {datatype} for shape {shape} "
                           f"({count * size} expected)")  # fmt: skip
    if datatype == "BF16":
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    array = np.frombuffer(raw, dtype=numpy_dtype(datatype).newbyteorder("<"))
    if datatype == "BOOL":
        return (array.view(np.uint8) != 0).reshape(shape)
    return array.astype(numpy_dtype(datatype), copy=False).reshape(shape)


def to_bytes(array: np.ndarray, datatype: str | None = None) -> bytes:
    """An array in the binary layout: little-endian, BOOL one byte, BF16 truncated, BYTES length-prefixed."""
    datatype = normalize(datatype) if datatype else datatype_of(array)
    if datatype == "BYTES":
        parts = []
        for v in np.asarray(array, dtype=np.object_).reshape(-1):
            data = _to_bytes_element(v, "")
            parts += [_U32.pack(len(data)), data]
        return b"".join(parts)
    if datatype == "BF16":
        words = np.ascontiguousarray(array, dtype="<f4").view("<u4") >> 16
        return words.astype("<u2").tobytes()
    return np.ascontiguousarray(array, dtype=numpy_dtype(datatype).newbyteorder("<")).tobytes()


def split_body(body: bytes, header_length: int | None) -> tuple[bytes, memoryview]:
    """(JSON header, the trailing blobs) of a request body; no header length: all JSON."""
    if header_length is None:
        return body, memoryview(b"")
    if header_length < 0 or header_length > len(body):
        raise InvalidInput(f"Inference-Header-Content-Length is {header_length} but the body has {len(body)} bytes: "
                           "it must be the length of the JSON part")  # fmt: skip
    return body[:header_length], memoryview(body)[header_length:]


def join_body(header: bytes, blobs: list[bytes]) -> bytes:
    """A binary-extension body: the JSON header then the blobs (send len(header) as Inference-Header-Content-Length)."""
    return b"".join([header, *blobs])


def _flatten(value: list[Any]) -> Any:
    for v in value:
        if isinstance(v, list):
            yield from _flatten(v)
        else:
            yield v


def _to_bytes_element(value: Any, name: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, (np.str_, np.bytes_)):
        return _to_bytes_element(value.item(), name)
    raise InvalidInput(f"input {name!r}: BYTES data holds {value!r}: send strings")


def _to_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def _bytes_elements(raw: bytes, count: int, name: str) -> np.ndarray:
    if count * 4 > len(raw):  # each element has its 4-byte length: checked before allocating `count` slots
        raise InvalidInput(f"input {name!r}: {len(raw)} bytes cannot hold {count} BYTES elements (4 bytes of length "
                           "each at least): the data ends past the end of what was sent")  # fmt: skip
    out = np.empty(count, dtype=np.object_)
    at = 0
    for i in range(count):
        if at + 4 > len(raw):
            raise InvalidInput(f"input {name!r}: BYTES data ends inside element {i} of {count}")
        (n,) = _U32.unpack_from(raw, at)
        if at + 4 + n > len(raw):
            raise InvalidInput(f"input {name!r}: BYTES element {i} claims {n} bytes, past the end of the data")
        out[i] = raw[at + 4 : at + 4 + n]
        at += 4 + n
    if at != len(raw):
        raise InvalidInput(f"input {name!r}: {len(raw) - at} bytes left over after {count} BYTES elements")
    return out
