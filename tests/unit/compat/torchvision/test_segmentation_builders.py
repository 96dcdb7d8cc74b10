"""torchvision.models.segmentation's builders on serve: arguments, weights enums and presets as torchvision's;
named weights read from the local torch hub cache give torchvision's outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import serve
from serve.compat.torch import hub
from serve.compat.torchvision.models import segmentation as seg
from tests.torchvision_reference import needs_torchvision, reference_torchvision

pytestmark = needs_torchvision

ENUMS = ["FCN_ResNet50_Weights", "FCN_ResNet101_Weights", "DeepLabV3_ResNet50_Weights", "DeepLabV3_ResNet101_Weights",
         "DeepLabV3_MobileNet_V3_Large_Weights", "LRASPP_MobileNet_V3_Large_Weights"]  # fmt: skip


def _tv_seg():
    assert reference_torchvision() is not None
    import torchvision.models.segmentation as tv_seg

    return tv_seg


@pytest.mark.parametrize("name", ENUMS)
def test_weights_enums_are_torchvisions(name: str) -> None:
    ours, theirs = getattr(seg, name), getattr(_tv_seg(), name)
    assert [m.name for m in ours] == [m.name for m in theirs]
    assert ours.DEFAULT.url == theirs.DEFAULT.url
    assert ours.DEFAULT.meta["categories"] == theirs.DEFAULT.meta["categories"]
    assert ours.DEFAULT.meta["num_params"] == theirs.DEFAULT.meta["num_params"]
    assert ours.verify("COCO_WITH_VOC_LABELS_V1") is ours.DEFAULT


def test_named_weights_load_from_the_hub_cache_and_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    torch.manual_seed(0)
    reference = _tv_seg().lraspp_mobilenet_v3_large(weights=None, weights_backbone=None).eval()
    (tmp_path / "checkpoints").mkdir()
    torch.save(
        reference.state_dict(), tmp_path / "checkpoints" / Path(seg.LRASPP_MobileNet_V3_Large_Weights.DEFAULT.url).name
    )
    monkeypatch.setattr(hub, "_override", [str(tmp_path)])
    ours = seg.lraspp_mobilenet_v3_large(weights="DEFAULT").eval()
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 80)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.from_numpy(x))["out"].numpy()
    with serve.no_grad():
        got = ours(serve.from_numpy(x))["out"].numpy()
    assert got.shape == want.shape == (1, 21, 64, 80)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_missing_weights_name_the_file_to_put_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "_override", [str(tmp_path)])
    with pytest.raises(FileNotFoundError, match=r"fcn_resnet50_coco-1167a1af\.pth"):
        seg.fcn_resnet50(weights=seg.FCN_ResNet50_Weights.DEFAULT)
    with pytest.raises(FileNotFoundError, match="resnet50-"):  # the default ImageNet backbone weights
        seg.fcn_resnet50()


def test_builder_arguments_follow_torchvision() -> None:
    model = seg.fcn_resnet50(weights_backbone=None, num_classes=3, aux_loss=True)
    assert isinstance(model, seg.FCN) and model.aux_classifier is not None
    assert model.classifier[4].out_channels == 3
    assert seg.deeplabv3_resnet50(weights_backbone=None).aux_classifier is None  # 21 classes, no aux by default
    assert seg.deeplabv3_mobilenet_v3_large(weights_backbone=None).classifier[4].out_channels == 21
    with pytest.raises(ValueError, match="num_classes"):
        seg.fcn_resnet50(weights=seg.FCN_ResNet50_Weights.DEFAULT, num_classes=5)
    with pytest.raises(ValueError, match="aux_loss"):
        seg.deeplabv3_resnet50(weights="DEFAULT", aux_loss=False)
    with pytest.raises(NotImplementedError, match="auxiliary"):
        seg.lraspp_mobilenet_v3_large(weights_backbone=None, aux_loss=True)
    with pytest.raises(TypeError, match="Invalid Weight"):
        seg.fcn_resnet50(weights="IMAGENET1K_V1")


def test_preset_transform_matches_torchvisions() -> None:
    img = Image.fromarray(np.random.default_rng(2).integers(0, 256, (300, 200, 3), dtype=np.uint8))
    got = seg.FCN_ResNet50_Weights.DEFAULT.transforms()(img)
    want = _tv_seg().FCN_ResNet50_Weights.DEFAULT.transforms()(img)
    assert tuple(got.shape) == tuple(want.shape) == (3, 780, 520)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)


def test_builders_are_registered_for_get_model() -> None:
    from serve.compat.torchvision import models

    assert models.list_models(seg) == sorted(
        ["deeplabv3_mobilenet_v3_large", "deeplabv3_resnet101", "deeplabv3_resnet50", "fcn_resnet101", "fcn_resnet50",
         "lraspp_mobilenet_v3_large"]
    )  # fmt: skip
    assert models.get_model_builder("lraspp_mobilenet_v3_large") is seg.lraspp_mobilenet_v3_large


def test_models_utils_exposes_intermediate_layer_getter() -> None:
    from serve.compat.torchvision.models import _utils
    from serve.zoo.segmentation import IntermediateLayerGetter

    assert _utils.IntermediateLayerGetter is IntermediateLayerGetter
    assert _utils._ovewrite_value_param("num_classes", None, 21) == 21
    with pytest.raises(ValueError, match="expected value 21 but got 3"):
        _utils._ovewrite_value_param("num_classes", 3, 21)
