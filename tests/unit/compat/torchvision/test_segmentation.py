"""serve.zoo.segmentation against torchvision.models.segmentation (pure Python there): torchvision's state_dict
loads key for key (strict) and the outputs ("out" and "aux") match within 1e-4."""

from __future__ import annotations

import numpy as np
import pytest

import serve
from serve.zoo import segmentation as zoo
from tests.torchvision_reference import needs_torchvision, reference_torchvision

pytestmark = needs_torchvision

CASES = [
    ("fcn_resnet50", {"aux_loss": True}),
    ("deeplabv3_resnet50", {"aux_loss": True}),
    ("lraspp_mobilenet_v3_large", {}),
    ("deeplabv3_mobilenet_v3_large", {"aux_loss": False}),
]


def _reference(name: str, num_classes: int, **kwargs):
    import torch
    import torchvision.models.segmentation as tv_seg

    assert reference_torchvision() is not None
    torch.manual_seed(0)
    model = getattr(tv_seg, name)(weights=None, weights_backbone=None, num_classes=num_classes, **kwargs).eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so a wrong buffer shows
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model


def _load_into(ours, reference) -> None:
    sd = {k: serve.from_numpy(v.detach().numpy().copy()) for k, v in reference.state_dict().items()}
    ours.load_state_dict(sd)  # strict: every key and shape must match
    assert list(ours.state_dict()) == list(reference.state_dict())


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_segmentation_models_match_torchvision(name: str, kwargs: dict) -> None:
    import torch

    reference = _reference(name, 7, **kwargs)
    ours = getattr(zoo, name)(num_classes=7, **kwargs).eval()
    _load_into(ours, reference)
    x = np.random.default_rng(0).standard_normal((2, 3, 75, 61)).astype(np.float32)  # odd sizes: exercises upsampling
    with torch.no_grad():
        want = reference(torch.from_numpy(x))
    with serve.no_grad():
        got = ours(serve.from_numpy(x))
    assert list(got) == list(want)
    for key in want:
        assert tuple(got[key].shape) == tuple(want[key].shape) == (2, 7, 75, 61)
        scale = float(np.abs(want[key].numpy()).max())
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), rtol=1e-4, atol=1e-4 * max(scale, 1.0))


def test_intermediate_layer_getter_keeps_children_and_names() -> None:
    from serve.zoo.resnet import resnet18

    body = zoo.IntermediateLayerGetter(resnet18(), {"layer2": "mid", "layer4": "out"})
    assert list(body) == ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"]
    with serve.no_grad():
        out = body(serve.randn(1, 3, 64, 64))
    assert list(out) == ["mid", "out"] and tuple(out["out"].shape) == (1, 512, 2, 2)
    with pytest.raises(ValueError, match="not all children"):
        zoo.IntermediateLayerGetter(resnet18(), {"layer9": "out"})
