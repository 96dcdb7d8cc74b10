"""A torchvision detector is planned before traffic (serve/worker/optimizing.py with serve.inference.detections):
TorchServe's object_detector handlers give no `example_inputs`, so the worker warms the model with noise images at its
transform's size, and the first request runs the plan already made (it used to make it: 59-90 s under load)."""

from __future__ import annotations

import numpy as np

import serve
from handlers.object_detector import ObjectDetector
from serve import nn
from serve.compat.torchvision.models.detection import FasterRCNN
from serve.compat.torchvision.models.detection.anchor_utils import AnchorGenerator
from serve.compat.torchvision.ops import MultiScaleRoIAlign
from serve.inference.optimized import mismatch
from serve.worker.optimizing import optimize_handler


def tiny_detector() -> FasterRCNN:
    serve.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    backbone.out_channels = 8
    return FasterRCNN(backbone, num_classes=3, min_size=64, max_size=96,
                      rpn_anchor_generator=AnchorGenerator(((16,),), ((1.0,),)),
                      box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2)).eval()  # fmt: skip


class NoExamples:  # a TorchServe handler: no example_inputs at all
    def __init__(self, model: nn.Module) -> None:
        self.model = model


def test_a_detector_is_planned_before_its_first_request():
    model = tiny_detector()
    for handler in (ObjectDetector(), NoExamples(model)):
        handler.model = model
        report = optimize_handler(handler, {}, 2, None)
        assert report["optimized"] and report["warmed"] == [1, 2], report
        assert handler.model.optimized and handler.model.plan is not None  # made before any request
        assert report["passes"]["bn_folded"] == 1  # the backbone's batch norm folded into its convolution
    image = serve.from_numpy(np.random.default_rng(3).random((3, 48, 60), dtype=np.float32))  # another size
    with serve.no_grad():
        got, want = handler.model([image]), model([image])
    assert mismatch(got, want) is None and handler.model.optimized


def test_any_other_model_without_examples_is_not_warmed():
    handler = NoExamples(nn.Sequential(nn.Linear(4, 4)).eval())
    report = optimize_handler(handler, {}, 1, None)
    assert report["warmed"] == [] and handler.model.plan is None


def test_kernels_are_timed_only_within_the_warm_up_budget():
    """optimize_warmup_s 1 ms: the first batch size is still planned and checked, its layers on their preferred kernels
    untimed (the startup bound holds however slow timing would be); shapes first seen in traffic are timed again."""
    model = tiny_detector()
    handler = NoExamples(model)
    report = optimize_handler(handler, {"optimize_warmup_s": 0.001}, 4, None)
    assert report["optimized"] and report["warmed"] == [1], report
    layers = handler.model.layers()
    assert layers and all(not layer.timings for layer in layers)
    chosen = [layer for layer in layers if layer.choices]  # a grouped projection runs as its group's product
    assert chosen and all(set(layer.choices.values()) == {layer._candidates()[-1]} for layer in chosen)
    image = serve.from_numpy(np.random.default_rng(4).random((3, 90, 60), dtype=np.float32))  # portrait
    with serve.no_grad():
        got = handler.model([image])
    assert any(layer.timings for layer in layers)  # the budget applied to the warm-up only
    assert mismatch(got, model([image])) is None
