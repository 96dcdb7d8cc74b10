"""Faster R-CNN (ResNet-50-FPN) on serve against torchvision's, with torchvision's state_dict loaded strictly.

torchvision's compiled nms and roi_align do not load here, so its model runs with two stand-ins: a greedy NMS
written here and torchvision's own pure-PyTorch roi_align kernel; everything else (transform, anchors, RPN, RoI
heads, box coding, postprocessing) is torchvision's Python.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import serve
from serve.compat.torchvision.models import detection
from serve.zoo.fpn import FeaturePyramidNetwork, LastLevelMaxPool
from tests.torchvision_reference import needs_torchvision, reference_torchvision

pytestmark = needs_torchvision

SMALL = {"min_size": 160, "max_size": 240, "box_score_thresh": 0.0, "rpn_pre_nms_top_n_test": 200,
         "rpn_post_nms_top_n_test": 50}  # fmt: skip


def _greedy_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> np.ndarray:
    order = list(np.argsort(-scores, kind="stable"))
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep = []
    while order:
        best, rest = order[0], np.asarray(order[1:], dtype=np.int64)
        keep.append(best)
        wh = np.clip(
            np.minimum(boxes[best, 2:], boxes[rest, 2:]) - np.maximum(boxes[best, :2], boxes[rest, :2]), 0, None
        )
        inter = wh[:, 0] * wh[:, 1]
        order = list(rest[inter / (area[best] + area[rest] - inter) <= threshold])
    return np.asarray(keep, dtype=np.int64)


@pytest.fixture
def torchvision_detection(monkeypatch: pytest.MonkeyPatch):
    import torch

    assert reference_torchvision() is not None
    import torchvision.models.detection as tv_detection
    import torchvision.ops.boxes as tv_boxes
    import torchvision.ops.poolers as tv_poolers

    kernel = importlib.import_module("torchvision.ops.roi_align")._roi_align.__wrapped__
    monkeypatch.setattr(tv_boxes, "nms", lambda b, s, t: torch.from_numpy(_greedy_nms(b.numpy(), s.numpy(), t)))
    monkeypatch.setattr(
        tv_poolers, "roi_align",
        lambda f, r, output_size, spatial_scale, sampling_ratio: kernel(f, r, spatial_scale, *output_size,
                                                                        sampling_ratio, False),
    )  # fmt: skip
    return tv_detection


def _pair(tv_detection, **kwargs):
    import torch

    torch.manual_seed(0)
    reference = tv_detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, **kwargs).eval()
    ours = detection.fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, **kwargs).eval()
    return reference, ours


def _to_serve(sd) -> dict:
    return {k: serve.from_numpy(v.numpy().copy()) for k, v in sd.items()}


def test_faster_rcnn_matches_torchvision(torchvision_detection) -> None:
    import torch

    reference, ours = _pair(torchvision_detection, num_classes=5, **SMALL)
    assert list(ours.state_dict()) == list(reference.state_dict())
    ours.load_state_dict(_to_serve(reference.state_dict()))
    rng = np.random.default_rng(0)
    images = [rng.random((3, 120, 150), dtype=np.float32), rng.random((3, 100, 90), dtype=np.float32)]
    with torch.no_grad():
        want = reference([torch.from_numpy(i) for i in images])
    with serve.no_grad():
        got = ours([serve.from_numpy(i) for i in images])
    for g, w in zip(got, want):
        assert g["boxes"].dtype == serve.float32 and g["labels"].dtype == serve.int64
        assert tuple(g["boxes"].shape) == tuple(w["boxes"].shape) == (100, 4)
        np.testing.assert_array_equal(g["labels"].numpy(), w["labels"].numpy())
        np.testing.assert_allclose(g["scores"].numpy(), w["scores"].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g["boxes"].numpy(), w["boxes"].numpy(), rtol=1e-4, atol=5e-3)  # pixels


def test_legacy_checkpoint_keys_are_renamed(torchvision_detection) -> None:
    reference, ours = _pair(torchvision_detection, num_classes=3)
    sd = _to_serve(reference.state_dict())
    for prefix in (
        "rpn.head.conv",
        *(f"backbone.fpn.{b}.{i}" for b in ("inner_blocks", "layer_blocks") for i in range(4)),
    ):
        for kind in ("weight", "bias"):
            sd[f"{prefix}.{kind}"] = sd.pop(f"{prefix}.0.{kind}" if "fpn" in prefix else f"{prefix}.0.0.{kind}")
    ours.load_state_dict(sd)  # strict
    np.testing.assert_array_equal(
        ours.rpn.head.conv[0][0].weight.detach().numpy(), reference.rpn.head.conv[0][0].weight.detach().numpy()
    )


def test_builder_arguments_and_weights_enum(torchvision_detection) -> None:
    theirs = torchvision_detection.FasterRCNN_ResNet50_FPN_Weights.DEFAULT
    enum = detection.FasterRCNN_ResNet50_FPN_Weights
    assert enum.DEFAULT.url == theirs.url and enum.DEFAULT.meta["categories"] == theirs.meta["categories"]
    assert [m.name for m in enum] == [m.name for m in torchvision_detection.FasterRCNN_ResNet50_FPN_Weights]
    with pytest.raises(ValueError, match="num_classes"):
        detection.fasterrcnn_resnet50_fpn(weights="DEFAULT", num_classes=3)
    model = detection.fasterrcnn_resnet50_fpn(weights_backbone=None, num_classes=4, min_size=64, max_size=96).eval()
    with pytest.raises(NotImplementedError, match="inference only"):
        model([serve.rand(3, 64, 64)], [{"boxes": serve.zeros(0, 4)}])
    out = model([serve.rand(3, 64, 80)])  # autograd on, as a handler without no_grad() calls it
    assert set(out[0]) == {"boxes", "labels", "scores"} and tuple(out[0]["boxes"].shape)[1:] == (4,)
    image = (serve.rand(3, 20, 30) * 255).to(serve.uint8)
    assert enum.DEFAULT.transforms()(image).dtype == serve.float32


def test_fpn_matches_torchvision() -> None:
    import torch
    from torchvision.ops import FeaturePyramidNetwork as TvFPN
    from torchvision.ops.feature_pyramid_network import LastLevelMaxPool as TvPool

    torch.manual_seed(1)
    reference = TvFPN([8, 16, 32], 12, extra_blocks=TvPool()).eval()
    ours = FeaturePyramidNetwork([8, 16, 32], 12, extra_blocks=LastLevelMaxPool()).eval()
    ours.load_state_dict(_to_serve(reference.state_dict()))
    rng = np.random.default_rng(2)
    x = {
        name: rng.standard_normal((1, c, s, s + 1)).astype(np.float32)
        for name, c, s in (("a", 8, 17), ("b", 16, 9), ("c", 32, 5))
    }
    with torch.no_grad():
        want = reference({k: torch.from_numpy(v) for k, v in x.items()})
    got = ours({k: serve.from_numpy(v) for k, v in x.items()})  # autograd on: outputs need detach()
    assert list(got) == list(want) == ["a", "b", "c", "pool"]
    for k in want:
        np.testing.assert_allclose(got[k].detach().numpy(), want[k].numpy(), rtol=1e-5, atol=1e-5)


def test_retinanet_matches_torchvision(torchvision_detection) -> None:
    import torch

    # every candidate kept (no top-k or per-image cut), so near-equal scores of a random model cannot swap across
    # a cut; the comparison is then of the whole detection set, by decreasing score
    kwargs = {"min_size": 64, "max_size": 96, "score_thresh": 0.0, "topk_candidates": 10**6,
              "detections_per_img": 10**6}  # fmt: skip
    torch.manual_seed(0)
    reference = torchvision_detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3,
                                                             **kwargs).eval()  # fmt: skip
    ours = detection.retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3, **kwargs).eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    sd = _to_serve(reference.state_dict())
    for i in range(4):  # the pre-0.13 names of the head convs load too
        for kind in ("weight", "bias"):
            key = f"head.classification_head.conv.{i}.0.{kind}"
            sd[f"head.classification_head.conv.{2 * i}.{kind}"] = sd.pop(key)
    ours.load_state_dict(sd)
    image = np.random.default_rng(3).random((3, 70, 90), dtype=np.float32)
    with torch.no_grad():
        (want,) = reference([torch.from_numpy(image)])
    with serve.no_grad():
        (got,) = ours([serve.from_numpy(image)])
    assert tuple(got["boxes"].shape) == tuple(want["boxes"].shape) and len(want["boxes"]) > 100
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got["labels"].numpy(), want["labels"].numpy())
    np.testing.assert_allclose(got["boxes"].numpy(), want["boxes"].numpy(), rtol=1e-4, atol=5e-3)  # pixels


def test_ssdlite_matches_torchvision(torchvision_detection) -> None:
    import torch

    torch.manual_seed(0)
    reference = torchvision_detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                    num_classes=4).eval()  # fmt: skip
    ours = detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4)
    ours.eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    with torch.no_grad():  # torchvision's init (std 0.03) makes the features vanish, every score a tie: re-draw
        for module in reference.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.normal_(0.0, (1.0 / module.weight[0].numel()) ** 0.5)
                if module.bias is not None:
                    module.bias.uniform_(-0.1, 0.1)
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        for block in reference.head.classification_head.module_list:
            block[1].weight.mul_(20.0)  # class logits of spread ~1: distinct scores, none saturated
    ours.load_state_dict(_to_serve(reference.state_dict()))
    images = [np.random.default_rng(4).random((3, 200, 260), dtype=np.float32)]
    with torch.no_grad():
        (want,) = reference([torch.from_numpy(i) for i in images])
    with serve.no_grad():
        (got,) = ours([serve.from_numpy(i) for i in images])
    assert tuple(got["boxes"].shape) == tuple(want["boxes"].shape) and len(want["boxes"]) > 100
    np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got["labels"].numpy(), want["labels"].numpy())
    np.testing.assert_allclose(got["boxes"].numpy(), want["boxes"].numpy(), rtol=1e-4, atol=5e-3)  # pixels
