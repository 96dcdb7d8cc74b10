"""Reading safetensors files: an 8-byte header length, a JSON header, then the tensors' raw little-endian bytes.

Our own reader rather than the `safetensors` package's numpy API, which has no bfloat16 and always copies: each
tensor is one `readinto` into its own array, or a view of the mapped file under mmap=True. The header is checked
before any data is touched, as the reference `safetensors` reader checks it: size limits, no duplicate names,
`__metadata__` a map of strings to strings, known dtypes, shapes that match their byte ranges, and ranges that
tile the data section exactly (no overlap, no gap, no trailing bytes); a deeply nested header is refused too.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from serve.errors import CheckpointError
from serve.serialization.location import Placement
from serve.serialization.sources import Source
from serve.serialization.storage import finish_tensor, make_storage
from serve.tensor import dtypes
from serve.tensor.tensor import Tensor

MAX_HEADER = 100_000_000  # the safetensors format's own limit
_DTYPES = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
    "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8, "U8": dtypes.uint8,
    "BOOL": dtypes.bool, "C64": dtypes.complex64,
}  # fmt: skip


def is_safetensors(head: bytes) -> bool:
    return len(head) >= 9 and head[8:9] == b"{"


def read_safetensors(src: Source, place: Placement) -> dict[str, Tensor]:
    """Every tensor of a safetensors file by name, in the header's order (the `__metadata__` entry is dropped)."""
    base, entries = _header(src)
    out = {}
    for name, (dt, shape, begin, end) in entries.items():
        storage = make_storage(name, dt, src.array(base + begin, end - begin), "little", "cpu", place)
        out[name] = finish_tensor(storage.array.reshape(shape), storage)
    return out


def _header(src: Source) -> tuple[int, dict[str, tuple[Any, tuple[int, ...], int, int]]]:
    if src.size < 8:
        raise CheckpointError("the safetensors file is shorter than its 8-byte header length")
    n = struct.unpack("<Q", src.read(0, 8))[0]
    if n > MAX_HEADER or 8 + n > src.size:
        raise CheckpointError(f"the safetensors header claims {n} bytes but the file has {src.size} (corrupt file)")
    try:
        header = json.loads(src.read(8, n), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"the safetensors header is not valid JSON: {e}") from None
    except RecursionError:
        raise CheckpointError("the safetensors header nests JSON too deeply; refusing it") from None
    if type(header) is not dict:
        raise CheckpointError("the safetensors header must be a JSON object")
    _check_metadata(header.pop("__metadata__", {}))
    base = 8 + n
    entries = {name: _entry(name, info, src.size - base) for name, info in header.items()}
    _check_coverage(entries, src.size - base)
    return base, entries


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise CheckpointError(f"the safetensors header names {key!r:.100} twice; refusing it")
        out[key] = value
    return out


def _check_metadata(meta: Any) -> None:
    """`__metadata__` is a map of strings to strings in the format (the reference reader refuses anything else)."""
    if type(meta) is not dict or not all(type(v) is str for v in meta.values()):
        raise CheckpointError(
            f"the safetensors __metadata__ must map strings to strings, not {meta!r:.100}; refusing the header"
        )


def _check_coverage(entries: dict[str, tuple[Any, tuple[int, ...], int, int]], data_size: int) -> None:
    """The tensors' byte ranges, in order, tile the data section exactly: no overlap, no gap, nothing after."""
    at, prev = 0, None
    for begin, end, name in sorted((begin, end, name) for name, (_, _, begin, end) in entries.items()):
        if begin != at:
            what = f"overlap {prev!r} ({begin} < {at})" if begin < at else f"leave bytes {at}..{begin} unused"
            raise CheckpointError(f"safetensors tensor {name!r} would {what}; the header lies about its offsets")
        at, prev = end, name
    if at != data_size:
        raise CheckpointError(
            f"the safetensors data section holds {data_size} bytes but its tensors cover {at}; "
            "the file is not fully covered (corrupt or crafted)"
        )


def _entry(name: str, info: Any, data_size: int) -> tuple[Any, tuple[int, ...], int, int]:
    if type(info) is not dict or set(info) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"safetensors entry {name!r} must have exactly dtype, shape and data_offsets")
    dt = _DTYPES.get(info["dtype"]) if type(info["dtype"]) is str else None
    if dt is None:
        raise CheckpointError(f"safetensors tensor {name!r} has dtype {info['dtype']!r:.30}, unsupported by serve")
    shape, offsets = info["shape"], info["data_offsets"]
    if type(shape) is not list or not all(type(d) is int and 0 <= d < 1 << 62 for d in shape):
        raise CheckpointError(f"safetensors tensor {name!r} has an invalid shape {shape!r:.60}")
    if type(offsets) is not list or len(offsets) != 2 or not all(type(o) is int for o in offsets):
        raise CheckpointError(f"safetensors tensor {name!r} has invalid data_offsets {offsets!r:.60}")
    begin, end = offsets
    numel = 1
    for d in shape:
        numel *= d
    if not 0 <= begin <= end <= data_size or end - begin != numel * dt.itemsize:
        raise CheckpointError(
            f"safetensors tensor {name!r} ({info['dtype']} {shape}) claims bytes {begin}..{end} of a "
            f"{data_size}-byte data section; the header lies about its offsets"
        )
    return dt, tuple(shape), begin, end
