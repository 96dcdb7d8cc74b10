"""Mask R-CNN (ResNet-50-FPN) on serve against torchvision's, torchvision's state_dict loaded strictly.

The reference runs with test_detection.py's stand-ins for torchvision's compiled ops (a greedy NMS, torchvision's
pure-PyTorch roi_align kernel); the mask head, maskrcnn_inference and paste_masks_in_image are torchvision's Python.
"""

from __future__ import annotations

import numpy as np

import serve
from serve.compat.torchvision.models import detection
from serve.compat.torchvision.models.detection.transform import paste_masks_in_image
from tests.torchvision_reference import needs_torchvision
from tests.unit.compat.torchvision.test_detection import (
    SMALL,
    _to_serve,
    torchvision_detection,  # noqa: F401 (a fixture)
)

pytestmark = needs_torchvision


def test_mask_rcnn_matches_torchvision(torchvision_detection) -> None:  # noqa: F811
    import torch

    torch.manual_seed(0)
    kwargs = {**SMALL, "box_detections_per_img": 12}
    reference = torchvision_detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=5,
                                                            **kwargs).eval()  # fmt: skip
    ours = detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=5, **kwargs).eval()
    assert list(ours.state_dict()) == list(reference.state_dict())
    ours.load_state_dict(_to_serve(reference.state_dict()))
    rng = np.random.default_rng(0)
    images = [rng.random((3, 120, 150), dtype=np.float32), rng.random((3, 100, 90), dtype=np.float32)]
    with torch.no_grad():
        want = reference([torch.from_numpy(i) for i in images])
    with serve.no_grad():
        got = ours([serve.from_numpy(i) for i in images])
    for g, w, image in zip(got, want, images):
        assert tuple(g["masks"].shape) == tuple(w["masks"].shape) == (12, 1, *image.shape[1:])
        np.testing.assert_array_equal(g["labels"].numpy(), w["labels"].numpy())
        np.testing.assert_allclose(g["boxes"].numpy(), w["boxes"].numpy(), rtol=1e-4, atol=5e-3)  # pixels
        # a box 5e-3 px off may move a pasted edge by one pixel: compare away from the box edges
        diff = np.abs(g["masks"].numpy() - w["masks"].numpy())
        assert np.mean(diff > 1e-4) < 0.01 and float(np.median(diff[w["masks"].numpy() > 0])) < 1e-5


def test_paste_masks_matches_torchvision_on_exact_boxes() -> None:
    import torch
    from torchvision.models.detection.roi_heads import paste_masks_in_image as tv_paste

    rng = np.random.default_rng(3)
    masks = rng.random((4, 1, 28, 28), dtype=np.float32)
    boxes = np.array([[3.2, 4.7, 40.1, 30.9], [-5.0, 10.0, 20.0, 70.0], [50.0, 0.0, 79.5, 59.0], [10, 10, 10.5, 11]],
                     dtype=np.float32)  # fmt: skip  # inside, past the left/bottom edge, past the right, tiny
    want = tv_paste(torch.from_numpy(masks), torch.from_numpy(boxes), (60, 80)).numpy()
    got = paste_masks_in_image(masks, boxes, (60, 80))
    assert got.shape == want.shape == (4, 1, 60, 80)
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_version_1_mask_head_keys_load(torchvision_detection) -> None:  # noqa: F811
    """Checkpoints saved before torchvision 0.8 name the mask head's convolutions mask_fcn1..4."""
    ours = detection.maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=3)
    sd = dict(ours.state_dict())
    for i in range(4):
        for kind in ("weight", "bias"):
            sd[f"roi_heads.mask_head.mask_fcn{i + 1}.{kind}"] = sd.pop(f"roi_heads.mask_head.{i}.0.{kind}") * 2
    ours.load_state_dict(sd)  # strict
    np.testing.assert_array_equal(ours.roi_heads.mask_head[2][0].weight.detach().numpy(),
                                  sd["roi_heads.mask_head.mask_fcn3.weight"].numpy())  # fmt: skip
