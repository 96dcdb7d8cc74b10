"""The worker's optimization step (serve/worker/optimizing.py) against a stand-in for serve.inference, and the
built-in handlers' `example_inputs` (what each one's `inference` passes its model)."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer, models

import serve
from handlers.base_handler import BaseHandler
from handlers.image_classifier import ImageClassifier
from handlers.object_detector import ObjectDetector
from handlers.tensor import TensorHandler
from handlers.text_classifier import TextClassifier
from handlers.text_embedding import TextEmbeddingHandler
from serve import nn
from serve.management.worker_describe import _optimization
from serve.worker.optimizing import optimize_handler, optimize_settings, warm_batch_sizes
from tests.unit.handlers.vision_helpers import make_context


class FakeOptimized:
    """The contract of serve.inference.OptimizedModule, recording what it is asked."""

    fail_warm_at: int | None = None

    def __init__(self, model: Any) -> None:
        self.original, self.warmed, self.optimized, self.reason = model, [], True, None

    def __call__(self, *args: Any) -> Any:
        return self.original(*args)

    def warm(self, *inputs: Any) -> None:
        if inputs[0].shape[0] == self.fail_warm_at:
            raise RuntimeError("no kernel for that")
        self.warmed.append(tuple(tuple(t.shape) for t in inputs))

    def describe(self) -> dict[str, Any]:
        return {"optimized": self.optimized, "reason": self.reason, "passes": {"fold": 1}, "layers": 2}


@pytest.fixture
def fake_inference(monkeypatch):
    module = types.ModuleType("serve.inference")
    made: list[FakeOptimized] = []

    def optimize(model: Any, example_inputs: Any = None, dtype: str = "float32") -> FakeOptimized:
        made.append(FakeOptimized(model))
        return made[-1]

    module.optimize = optimize  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "serve.inference", module)
    return made


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.fc(x)


class Shaped(BaseHandler):
    def example_inputs(self, batch_size: int) -> tuple[Any, ...] | None:
        return (self.example_tensor((batch_size, 4)),)


def handler_with(model: Any, cls: type = Shaped) -> Any:
    handler = cls()
    handler.model, handler.device = model, serve.device("cpu")
    return handler


@pytest.mark.parametrize(("batch_size", "sizes"), [(1, [1]), (3, [1, 2, 3]), (8, list(range(1, 9))),
                                                   (9, [1, 2, 4, 8, 9]), (16, [1, 2, 4, 8, 16]),
                                                   (12, [1, 2, 4, 8, 12])])  # fmt: skip
def test_warm_batch_sizes(batch_size, sizes):
    assert warm_batch_sizes(batch_size) == sizes


def test_settings_defaults_and_wrong_types():
    assert (optimize_settings({}).enabled, optimize_settings(None).warmup_s) == (True, 30.0)
    assert optimize_settings({"optimize": False, "optimize_warmup_s": 2}).warmup_s == 2.0
    with pytest.raises(ValueError, match="optimize 'notabool' is not valid: expected true or false"):
        optimize_settings({"optimize": "notabool"})
    for bad in (-1, True, "10s"):
        with pytest.raises(ValueError, match=r"optimize_warmup_s .* is not valid"):
            optimize_settings({"optimize_warmup_s": bad})


def test_the_model_is_optimized_and_warmed_for_every_batch_size(fake_inference):
    model = Mlp().eval()
    handler = handler_with(model)
    report = optimize_handler(handler, {}, 3, None)
    [opt] = fake_inference
    assert handler.model is opt and opt.original is model
    assert opt.warmed == [((1, 4),), ((2, 4),), ((3, 4),)]
    assert report == {"optimized": True, "reason": None, "passes": {"fold": 1}, "layers": 2, "warmed": [1, 2, 3]}


def test_no_example_inputs_means_no_warm_up(fake_inference):
    handler = handler_with(Mlp().eval(), BaseHandler)
    assert optimize_handler(handler, {}, 4, None)["warmed"] == []
    assert handler.model is fake_inference[0] and fake_inference[0].warmed == []


def test_warm_up_stops_at_its_budget(fake_inference):
    handler = handler_with(Mlp().eval())
    report = optimize_handler(handler, {"optimize_warmup_s": 0}, 4, None)
    assert report["optimized"] and report["warmed"] == [] and handler.model is fake_inference[0]


@pytest.mark.parametrize(
    ("model", "config", "device", "reason"),
    [
        (Mlp(), {"optimize": False}, None, "optimize: false in the model-config"),
        (Mlp(), {}, "cuda:0", "the model runs on cuda:0"),
        (lambda x: x, {}, None, "handler.model is function, not a serve.nn.Module"),
        (None, {}, None, "handler.model is no model"),
    ],
)
def test_models_left_eager_say_why(fake_inference, model, config, device, reason):
    handler = handler_with(model)
    report = optimize_handler(handler, config, 2, device)
    assert report["optimized"] is False and report["reason"].startswith(reason)
    assert handler.model is model and fake_inference == []


def test_an_optimizer_that_raises_keeps_the_eager_model(fake_inference, monkeypatch):
    model = Mlp().eval()
    handler = handler_with(model)
    monkeypatch.setattr(FakeOptimized, "fail_warm_at", 2)
    report = optimize_handler(handler, {}, 3, None)
    assert handler.model is model
    assert report["optimized"] is False and "warming batch size 2" in report["reason"]

    def broken(model: Any, example_inputs: Any = None, dtype: str = "float32") -> Any:
        raise TypeError("cannot capture")

    monkeypatch.setattr(sys.modules["serve.inference"], "optimize", broken)
    report = optimize_handler(handler, {}, 3, None)
    assert handler.model is model and report["reason"] == "the optimizer failed: TypeError: cannot capture"


def test_a_refused_plan_is_reported(fake_inference, monkeypatch):
    def refusing(model: Any, example_inputs: Any = None, dtype: str = "float32") -> FakeOptimized:
        opt = FakeOptimized(model)
        opt.optimized, opt.reason = False, "data-dependent control flow"
        return opt

    monkeypatch.setattr(sys.modules["serve.inference"], "optimize", refusing)
    report = optimize_handler(handler_with(Mlp().eval()), {}, 1, None)
    assert (report["optimized"], report["reason"], report["warmed"]) == (False, "data-dependent control flow", [1])


def test_describe_entry_of_a_worker():
    worker = types.SimpleNamespace(optimization={"optimized": True, "reason": None, "warmed": [1, 2]})
    assert _optimization(worker) == {"optimized": True, "optimizeReason": None, "warmedBatchSizes": [1, 2]}  # type: ignore[arg-type]
    assert _optimization(None)["optimized"] is False


# ---- the built-in handlers' example inputs -------------------------------------------------------------------


def initialized(cls: type, tmp_path, config: dict[str, Any]) -> Any:
    class Toy(cls):  # type: ignore[misc, valid-type]
        def load_model(self, context: Any) -> Any:
            return Mlp().eval()

    handler = Toy()
    handler.initialize(make_context(tmp_path, config))
    return handler


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({}, (2, 3, 224, 224)),
        ({"image_size": 32, "grayscale": True, "mean": [0.5], "std": [0.3]}, (2, 1, 32, 32)),
        ({"resize": [20, 30], "crop": None}, (2, 3, 20, 30)),
        ({"crop": [10, 12]}, (2, 3, 10, 12)),
    ],
)
def test_image_classifier_examples_have_the_transforms_size(tmp_path, config, shape):
    [x] = initialized(ImageClassifier, tmp_path, config).example_inputs(2)
    assert tuple(x.shape) == shape and x.dtype == serve.float32


def test_images_of_their_own_size_have_no_examples(tmp_path):
    assert initialized(ImageClassifier, tmp_path, {"crop": None}).example_inputs(2) is None
    assert initialized(ObjectDetector, tmp_path, {"crop": 32}).example_inputs(2) is None


def test_tensor_handler_examples_only_with_a_shape(tmp_path):
    assert initialized(TensorHandler, tmp_path, {}).example_inputs(2) is None
    [x] = initialized(TensorHandler, tmp_path, {"example_input_shape": [4]}).example_inputs(3)
    assert tuple(x.shape) == (3, 4) and x.dtype == serve.float32
    [x] = initialized(TensorHandler, tmp_path, {"example_input_shape": [2], "dtype": "float64"}).example_inputs(1)
    assert x.dtype == serve.float64
    with pytest.raises(ValueError, match="example_input_shape must be a list of positive integers"):
        initialized(TensorHandler, tmp_path, {"example_input_shape": 4})


def text_handler(cls: type, pass_mask: bool = True) -> Any:
    handler = cls()
    handler.device, handler.max_length = serve.device("cpu"), 6
    handler.tokenizer = Tokenizer(models.WordLevel({"[PAD]": 0, "a": 1, "b": 2}, unk_token="[PAD]"))
    handler.pass_attention_mask = pass_mask
    return handler


def test_text_examples_are_what_inference_passes():
    ids, mask = text_handler(TextEmbeddingHandler).example_inputs(2)
    assert (tuple(ids.shape), ids.dtype, tuple(mask.shape), mask.dtype) == ((2, 6), serve.int64, (2, 6), serve.int64)
    assert int(ids.numpy().min()) >= 0 and int(ids.numpy().max()) < 3 and np.all(mask.numpy() == 1)
    assert len(text_handler(TextClassifier, pass_mask=True).example_inputs(3)) == 2
    [ids] = text_handler(TextClassifier, pass_mask=False).example_inputs(3)
    assert tuple(ids.shape) == (3, 6)


def test_the_handler_s_product_dtype_reaches_the_plan(fake_inference, monkeypatch):
    seen: list[str] = []

    def recording(model: Any, example_inputs: Any = None, dtype: str = "float32") -> FakeOptimized:
        seen.append(dtype)
        return FakeOptimized(model)

    monkeypatch.setattr(sys.modules["serve.inference"], "optimize", recording)
    handler = handler_with(Mlp().eval())
    handler.product_dtype = "bfloat16"  # what BaseHandler sets for `dtype: bfloat16` on the CPU
    optimize_handler(handler, {}, 1, None)
    assert seen == ["bfloat16"]
