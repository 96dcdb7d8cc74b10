"""v2 tensors: every datatype through JSON and the binary layout, tritonclient's own packing as the reference."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import tritonclient.utils as triton_utils
from tritonclient.utils import serialize_byte_tensor

from serve.errors import InvalidInput
from serve.frontends.oip import tensors


def triton_bf16_bytes(floats: np.ndarray) -> bytes:
    """tritonclient's BF16 wire bytes: its serialize_bf16_tensor before r26.06; since, the bytes of the
    ml_dtypes.bfloat16 array its InferInput takes (triton_to_np_dtype("BF16"))."""
    if hasattr(triton_utils, "serialize_bf16_tensor"):
        return triton_utils.serialize_bf16_tensor(floats).item()
    return floats.astype(triton_utils.triton_to_np_dtype("BF16")).tobytes()


def triton_bf16_floats(raw: bytes) -> np.ndarray:
    """BF16 wire bytes read back as tritonclient reads them, as float32."""
    if hasattr(triton_utils, "deserialize_bf16_tensor"):
        return triton_utils.deserialize_bf16_tensor(raw).astype(np.float32)
    return np.frombuffer(raw, dtype=triton_utils.triton_to_np_dtype("BF16")).astype(np.float32)


NUMERIC = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64"]


def sample(datatype: str) -> np.ndarray:
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BYTES":
        return np.array([[b"a", b"", b"\xff\x00z"], [b"hello", b"\xe2\x82\xac", b"x" * 300]], dtype=np.object_)
    if datatype == "BF16":
        return np.array([[1.0, -2.5, 0.0], [3.0, 65280.0, -0.125]], dtype=np.float32)  # exact in bf16
    dtype = tensors.numpy_dtype(datatype)
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return np.array([[0, 1, 2], [3, info.max, info.min]], dtype=dtype)


@pytest.mark.parametrize("datatype", [*NUMERIC, "BYTES", "BF16"])
def test_binary_round_trip(datatype):
    array = sample(datatype)
    raw = tensors.to_bytes(array, datatype)
    back = tensors.from_bytes(raw, datatype, [2, 3])
    assert back.shape == (2, 3)
    np.testing.assert_array_equal(back, array)
    if datatype != "BYTES":
        assert back.dtype == (np.float32 if datatype == "BF16" else array.dtype)


@pytest.mark.parametrize("datatype", NUMERIC)
def test_binary_layout_is_tritonclients(datatype):
    array = sample(datatype)
    assert tensors.to_bytes(array, datatype) == array.astype(array.dtype.newbyteorder("<")).tobytes()


def test_bytes_and_bf16_layouts_are_tritonclients():
    array = sample("BYTES")
    assert tensors.to_bytes(array, "BYTES") == serialize_byte_tensor(array).item()
    floats = sample("BF16")
    assert tensors.to_bytes(floats, "BF16") == triton_bf16_bytes(floats)
    np.testing.assert_array_equal(triton_bf16_floats(tensors.to_bytes(floats, "BF16")).reshape(-1), floats.reshape(-1))
    assert tensors.to_bytes(np.array([1.0], np.float32), "BF16") == struct.pack("<f", 1.0)[2:]


@pytest.mark.parametrize("datatype", [*NUMERIC, "BYTES"])
def test_json_round_trip_flat_and_nested(datatype):
    array = sample(datatype)
    flat = tensors.to_json(array, datatype)
    assert len(flat) == 6 and not isinstance(flat[0], list)
    np.testing.assert_array_equal(tensors.from_json(flat, datatype, [2, 3]), array)
    nested = np.array(flat, dtype=object).reshape(2, 3).tolist()
    np.testing.assert_array_equal(tensors.from_json(nested, datatype, [2, 3]), array)


def test_fp16_json_and_string_alias():
    out = tensors.from_json([0.5, 1.5], "FP16", [2])
    assert out.dtype == np.float16 and out.tolist() == [0.5, 1.5]
    assert tensors.from_json(["ab"], "STRING", [1])[0] == b"ab"
    assert tensors.datatype_of(np.zeros(2, np.int16)) == "INT16"
    assert tensors.datatype_of(np.array(["x"])) == "BYTES"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: tensors.from_json([1, 2, 3], "FP32", [2, 2]), "3 elements in data for shape"),
        (lambda: tensors.from_json(["a"], "INT32", [1]), "send numbers"),
        (lambda: tensors.from_json([1], "COMPLEX", [1]), "unknown datatype"),
        (lambda: tensors.from_json([1], "FP32", [-1]), "non-negative"),
        (lambda: tensors.from_json([1], "FP32", [2**70]), "1 elements in data"),  # was OverflowError (500)
        (lambda: tensors.from_json([], "FP32", [2**40, 2**40]), "0 elements in data"),  # int64 wrapped to 0
        (lambda: tensors.from_bytes(b"\x00" * 4, "FP32", [2**70]), "4 bytes of FP32"),
        (lambda: tensors.from_bytes(b"\x01\x00\x00\x00a", "BYTES", [2**70]), "past the end"),
        (lambda: tensors.from_bytes(b"\x00" * 7, "FP32", [2]), "7 bytes of FP32"),
        (lambda: tensors.from_bytes(b"\x05\x00\x00\x00ab", "BYTES", [1]), "past the end"),
        (lambda: tensors.from_bytes(b"\x01\x00\x00\x00ab", "BYTES", [1]), "left over"),
        (lambda: tensors.split_body(b"{}", 5), "Inference-Header-Content-Length is 5"),
    ],
)
def test_errors_say_what_was_wrong(call, message):
    with pytest.raises(InvalidInput, match=message):
        call()


def test_split_and_join_body():
    blob = tensors.join_body(b'{"a":1}', [b"\x01\x02", b"\x03"])
    head, rest = tensors.split_body(blob, 7)
    assert head == b'{"a":1}' and bytes(rest) == b"\x01\x02\x03"
    head, rest = tensors.split_body(b"{}", None)
    assert head == b"{}" and len(rest) == 0
