"""The `tensor` handler: .npy or JSON arrays in, JSON or .npy out by Accept header; bad input is a 400 per request."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

import serve
from handlers.tensor import TensorHandler, decode_array, preferred_type
from serve import nn
from serve.errors import InvalidInput
from serve.worker import Context, load_handler
from tests.helpers import needs_torch, torch

MODEL = """
from serve import nn

class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3)))   # (B, 4, H, W) -> (B, 4) -> (B, 3)
"""


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def from_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def archive_dir(root: Path, state_dict: dict, config: dict | None = None) -> Context:
    (root / "MAR-INF").mkdir(parents=True)
    (root / "model.py").write_text(MODEL)
    serve.save(state_dict, root / "head.pt")
    manifest = {
        "model": {"modelName": "head", "modelFile": "model.py", "serializedFile": "head.pt", "handler": "tensor"}
    }
    (root / "MAR-INF" / "MANIFEST.json").write_text(json.dumps(manifest))
    return Context("head", str(root), manifest, 8, None, "0.1.0", model_yaml_config=config or {})


class Twin(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)


@pytest.fixture
def started(tmp_path):
    def start(config=None, headers=None, n=4):
        ctx = archive_dir(tmp_path / "m", Twin().state_dict(), config)
        handler = load_handler(ctx)
        ctx.begin_batch({i: f"r{i}" for i in range(n)}, headers or [{} for _ in range(n)])
        return handler, ctx

    return start


@needs_torch
def test_outputs_match_torch_for_npy_and_json_inputs(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Module()
    ref.conv, ref.fc = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Linear(4, 3)
    state = {k: serve.from_numpy(v.detach().numpy().copy()) for k, v in ref.state_dict().items()}
    ctx = archive_dir(tmp_path / "m", state)
    handler = load_handler(ctx)
    assert isinstance(handler, TensorHandler)
    x = np.random.default_rng(0).standard_normal((3, 2, 5, 5)).astype(np.float32)
    ctx.begin_batch({0: "a", 1: "b", 2: "c"}, [{"Accept": "application/x-npy"}, {}, {}])
    out = handler.handle([{"body": npy(x[0])}, {"body": json.dumps(x[1].tolist()).encode()}, {"data": x[2].tolist()}],
                         ctx)  # fmt: skip
    with torch.no_grad():
        expected = ref.fc(ref.conv(torch.from_numpy(x)).mean((2, 3))).numpy()
    assert isinstance(out[0], bytes) and ctx.get_response_content_type(0) == "application/x-npy"
    np.testing.assert_allclose(from_npy(out[0]), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(out[1:]), expected[1:], rtol=1e-5, atol=1e-6)
    assert ctx.get_response_content_type(1) == "application/json"


def test_octet_stream_accept_gives_npy_bytes(started):
    handler, ctx = started(headers=[{"accept": "application/octet-stream"}], n=1)
    out = handler.handle([{"body": npy(np.zeros((2, 4, 4), np.float32))}], ctx)
    assert from_npy(out[0]).shape == (3,) and ctx.get_response_content_type(0) == "application/octet-stream"


def reference(handler, x: np.ndarray) -> np.ndarray:
    """The model on `x` alone, (rows, 3)."""
    with serve.no_grad():
        return handler.model(serve.from_numpy(x)).numpy()


def test_every_shape_the_model_takes_is_answered_whatever_its_batch_mates(started):
    handler, ctx = started(n=4)
    small, large = np.ones((2, 3, 3), np.float32), np.full((2, 4, 4), 0.5, np.float32)
    data = [{"body": b"garbage"}, {"body": npy(small)}, {"body": npy(large)}, {"data": small.tolist()}]
    out = handler.handle(data, ctx)
    assert out[0]["code"] == 400 and "neither .npy" in out[0]["message"]
    assert [ctx.get_response_status(i)[0] for i in range(4)] == [400, 200, 200, 200]
    np.testing.assert_allclose(out[1], reference(handler, small[None])[0], rtol=1e-5)
    np.testing.assert_allclose(out[2], reference(handler, large[None])[0], rtol=1e-5)
    assert out[3] == out[1]


BAD_INPUTS = {
    "an extra dimension (.npy)": npy(np.ones((2, 2, 3, 3), np.float32)),  # a batch sent as one request
    "one channel (JSON)": b"[[[1.0, 2.0, 3.0]]]",  # (1, 1, 3): the convolution wants 2 channels
}


@pytest.mark.parametrize("bad", sorted(BAD_INPUTS))
@pytest.mark.parametrize("position", [0, 1, 3])
def test_a_request_the_model_cannot_take_fails_alone_at_any_position(started, bad, position):
    handler, ctx = started(n=4)
    goods = np.random.default_rng(position).standard_normal((3, 2, 3, 3)).astype(np.float32)
    data: list = [{"body": npy(g)} for g in goods]
    data.insert(position, {"body": BAD_INPUTS[bad]})
    out = handler.handle(data, ctx)
    assert [ctx.get_response_status(i)[0] for i in range(4)] == [400 if i == position else 200 for i in range(4)]
    assert out[position]["code"] == 400
    assert "it answers inputs of shape (2, 3, 3) float32: send an array of that shape" in out[position]["message"]
    answers = [out[i] for i in range(4) if i != position]
    np.testing.assert_allclose(np.array(answers), reference(handler, goods), rtol=1e-5, atol=1e-6)


def test_an_integer_request_does_not_turn_its_float_batch_mates_into_float64(started):
    handler, ctx = started(n=3)
    goods = np.random.default_rng(1).standard_normal((2, 2, 3, 3)).astype(np.float32)
    data = [{"body": npy(goods[0])}, {"data": np.ones((2, 3, 3), np.int64).tolist()}, {"body": npy(goods[1])}]
    out = handler.handle(data, ctx)
    assert [ctx.get_response_status(i)[0] for i in range(3)] == [200, 400, 200]
    assert "input of shape (2, 3, 3) int64" in out[1]["message"]
    np.testing.assert_allclose(np.array([out[0], out[2]]), reference(handler, goods), rtol=1e-5, atol=1e-6)


def test_a_lone_bad_request_after_good_batches_is_400(started):
    handler, ctx = started(n=1)
    handler.handle([{"body": npy(np.ones((2, 3, 3), np.float32))}], ctx)
    out = handler.handle([{"body": b"[[[1.0, 2.0, 3.0]]]"}], ctx)
    assert ctx.get_response_status(0)[0] == 400 and "it answers inputs of shape (2, 3, 3) float32" in out[0]["message"]


def test_a_fresh_worker_knows_the_example_input_shape(started):
    handler, ctx = started(config={"handler": {"example_input_shape": [2, 3, 3]}}, n=1)
    out = handler.handle([{"body": b"[[[1.0, 2.0, 3.0]]]"}], ctx)
    assert ctx.get_response_status(0)[0] == 400 and "it answers inputs of shape (2, 3, 3) float32" in out[0]["message"]


def test_with_no_shape_answered_yet_a_failing_batch_fails_as_a_whole(started):
    handler, ctx = started(n=2)
    with pytest.raises(RuntimeError, match="channels"):
        handler.handle([{"body": b"[[[1.0, 2.0, 3.0]]]"}, {"body": b"[[[4.0, 5.0, 6.0]]]"}], ctx)


def test_handler_dtype_casts_integer_json(started):
    handler, ctx = started(config={"handler": {"dtype": "float32"}}, n=1)
    out = handler.handle([{"data": np.ones((2, 3, 3), np.int64).tolist()}], ctx)
    assert len(out[0]) == 3


def test_bad_dtype_setting_is_refused(started):
    with pytest.raises(ValueError, match=r"handler\.dtype must be one of"):
        started(config={"handler": {"dtype": "complex64"}})


def test_model_output_without_batch_dimension_is_a_clear_error(started):
    handler, ctx = started(n=1)
    handler.model = lambda x: x.sum()
    with pytest.raises(RuntimeError, match="its first dimension must be the batch"):
        handler.handle([{"data": [[1.0]]}], ctx)


def test_json_floats_become_float32_and_ints_int64():
    assert decode_array(b"[[1.5, 2.0]]").dtype == np.float32
    assert decode_array("[1, 2]").dtype == np.int64
    assert decode_array([True, False]).dtype == np.bool_
    assert decode_array(npy(np.arange(3, dtype=np.float64))).dtype == np.float64  # .npy keeps its dtype
    assert decode_array(3.0).shape == ()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x00\x01binary", "neither .npy"),
        (b"[[1, 2], [3]]", "ragged"),
        (b'[1, "two"]', "non-numbers \\('two'\\)"),
        (b"[1, null]", "non-numbers \\(None\\)"),
        (b'{"a": 1}', "got a JSON dict"),
        ({"a": 1}, "got a JSON dict"),
        ("hello", "neither .npy"),
        (npy(np.array([object()], dtype=object)), "holds Python objects"),
        (npy(np.ones(3))[:-10], "truncated or malformed"),
        (npy(np.array([1 + 2j])), "unsupported dtype complex128"),
        (npy(np.array([1], np.uint32)), "unsupported dtype uint32"),
        (npy(np.array(["a"])), "unsupported dtype <U1"),
    ],
)
def test_bad_inputs_say_what_was_wrong(payload, message):
    with pytest.raises(InvalidInput, match=message):
        decode_array(payload)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, None),
        ("*/*", None),
        ("application/x-npy", "application/x-npy"),
        ("application/json, application/x-npy", "application/json"),
        ("application/json;q=0.5, application/x-npy", "application/x-npy"),
        ("application/x-npy;q=0, application/json", "application/json"),
        ("Application/Octet-Stream", "application/octet-stream"),
    ],
)
def test_accept_header_preference(accept, expected):
    assert preferred_type(accept) == expected


def npy_claiming(shape: tuple[int, ...], data: bytes) -> bytes:
    """A .npy whose header claims `shape` of float32, followed by `data`."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


@pytest.mark.parametrize("shape", [(10**12,), (1 << 20, 1 << 20), (5,)])
def test_an_npy_header_claiming_more_than_its_bytes_is_400_before_any_allocation(shape):
    with pytest.raises(InvalidInput, match=r"truncated or malformed: its header claims shape .* but it holds 16 bytes"):
        decode_array(npy_claiming(shape, b"\x00" * 16))
    assert decode_array(npy_claiming((4,), b"\x00" * 16)).shape == (4,)


def test_a_shape_contradicting_the_declared_input_shape_is_400_naming_both(started):
    config = {"handler": {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 2, 3, 3]}]}}
    handler, ctx = started(config=config, n=3)
    data = [
        {"data": np.ones((2, 3, 3)).tolist()},
        {"body": npy(np.ones((2, 4, 4), np.float32))},
        {"body": {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3, 3], "data": [0.0] * 9}]}},
    ]
    out = handler.handle(data, ctx)
    assert [ctx.get_response_status(i)[0] for i in range(3)] == [200, 400, 400]
    assert out[1]["message"].startswith("input shape [1, 2, 4, 4] contradicts the model-config's declared input "
                                        "shape [-1, 2, 3, 3]")  # fmt: skip
    assert "input shape [1, 3, 3] contradicts" in out[2]["message"] and "[-1, 2, 3, 3]" in out[2]["message"]
