"""torchvision.models' API on serve: builders, weights enums (from the local torch hub cache only), the registry.

References: the real torchvision's enums (names, URLs, transform settings, categories) and torch checkpoints
written into a temporary TORCH_HOME, loaded by our builders and compared with torch's logits.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import serve
from serve.compat.torchvision import models
from serve.compat.torchvision.models._api import legacy_weights
from tests.torchvision_reference import needs_torchvision, reference_torchvision
from tests.unit.compat.torchvision._twins import cheap_init, fill_, images, max_rel_diff

pytestmark = needs_torchvision


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty torch hub cache ($TORCH_HOME/hub/checkpoints)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = tmp_path / "hub" / "checkpoints"
    path.mkdir(parents=True)
    return path


def _cache(hub, weights, state_dict):
    import torch

    torch.save(state_dict, hub / weights.url.rsplit("/", 1)[-1])


def test_every_enum_has_torchvisions_members_urls_transforms_and_categories():
    tv = reference_torchvision()
    for name in models.list_models(module=models):  # classification (detection's presets are classes of ours)
        ours, theirs = models.get_model_weights(name), tv.models.get_model_weights(name)
        assert ours.__name__ == theirs.__name__
        assert list(ours.__members__) == list(theirs.__members__), name
        assert ours.DEFAULT is ours[theirs.DEFAULT.name]
        for member in theirs:
            mine = ours[member.name]
            assert mine.url == member.url
            assert mine.transforms.keywords.keys() == member.transforms.keywords.keys()
            assert mine.meta["categories"] == (
                list(member.meta["categories"]) if member.meta.get("categories") else None
            )
            assert mine.meta["num_params"] == member.meta["num_params"]


def test_named_weights_load_from_the_hub_cache_and_give_torchs_logits(hub):
    tv = reference_torchvision()
    theirs = fill_(tv.models.resnet18()).eval()
    _cache(hub, models.ResNet18_Weights.IMAGENET1K_V1, theirs.state_dict())
    ours = models.resnet18(weights="DEFAULT").eval()
    max_rel_diff(ours, theirs, images(32))
    with pytest.warns(UserWarning, match="pretrained"):
        legacy = models.resnet18(pretrained=True).eval()
    assert np.array_equal(legacy.fc.weight.detach().numpy(), ours.fc.weight.detach().numpy())


def test_missing_weights_say_where_to_put_the_file(hub):
    with pytest.raises(FileNotFoundError, match=re.escape(str(hub / "resnet18-f37072fd.pth"))):
        models.resnet18(weights=models.ResNet18_Weights.IMAGENET1K_V1)


def torchvisions_legacy_weights(tv, name: str):
    """The member torchvision's `handle_legacy_interface` gives `name(pretrained=True)` (its closure's `weights`)."""
    fn = tv.models.get_model_builder(name)
    while fn is not None:
        found = inspect.getclosurevars(fn).nonlocals.get("weights")
        if isinstance(found, dict) and "weights" in found:
            return found["weights"][1]
        fn = getattr(fn, "__wrapped__", None)
    raise AssertionError(f"{name}: no legacy interface found in torchvision's builder")


def test_legacy_pretrained_means_torchvisions_member_for_every_classification_model():
    """IMAGENET1K_V1, not DEFAULT: resnet50(pretrained=True) is resnet50-0676ba61.pth in torchvision."""
    tv = reference_torchvision()
    for name in models.list_models(module=models):
        theirs = torchvisions_legacy_weights(tv, name)
        enum = models.get_model_weights(name)
        if theirs is None:
            with pytest.raises(ValueError, match=f"No weights available for model {name}"):
                legacy_weights(name, enum)
        else:
            assert legacy_weights(name, enum) is enum[theirs.name], name
            assert legacy_weights(name, enum).url == theirs.url


def test_legacy_pretrained_without_its_file_is_an_error_naming_it(hub):
    """TorchServe's Faster R-CNN example builds its backbone with pretrained=True: the file must be in the cache."""
    from serve.compat.torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    with pytest.warns(UserWarning, match="pretrained"), pytest.raises(FileNotFoundError, match="resnet50-0676ba61"):
        resnet_fpn_backbone("resnet50", True)  # torchvision < 0.13's positional form (TorchServe's example)
    with pytest.warns(UserWarning, match="pretrained"), pytest.raises(FileNotFoundError, match="googlenet-1378be20"):
        models.googlenet(pretrained=True)
    legacy = resnet_fpn_backbone("resnet50", False)
    current = resnet_fpn_backbone(backbone_name="resnet50", weights=None)
    assert list(legacy.state_dict()) == list(current.state_dict())


def test_densenet_checkpoints_with_torchvisions_legacy_key_names_load(hub, monkeypatch):
    tv = reference_torchvision()
    theirs = fill_(tv.models.densenet121()).eval()
    legacy = {
        re.sub(r"(denselayer\d+\.(?:norm|relu|conv))([12])\.", r"\1.\2.", k): v for k, v in theirs.state_dict().items()
    }
    assert "features.denseblock1.denselayer1.norm.1.weight" in legacy
    _cache(hub, models.DenseNet121_Weights.DEFAULT, legacy)
    cheap_init(monkeypatch)
    max_rel_diff(models.densenet121(weights="IMAGENET1K_V1").eval(), theirs, images(32, n=1))


def test_googlenet_weights_drop_the_auxiliary_heads_and_transform_the_input(hub, monkeypatch):
    tv = reference_torchvision()
    theirs = fill_(tv.models.googlenet(aux_logits=True, init_weights=False)).eval()
    _cache(hub, models.GoogLeNet_Weights.DEFAULT, theirs.state_dict())
    theirs.transform_input = True
    cheap_init(monkeypatch)
    ours = models.googlenet(weights=models.GoogLeNet_Weights.IMAGENET1K_V1).eval()
    assert ours.aux1 is None and ours.aux2 is None and ours.transform_input
    assert not any(k.startswith("aux") for k in ours.state_dict())
    max_rel_diff(ours, theirs, images(32, n=1))


def test_weights_transforms_match_torchvisions_preset_on_a_pil_image():
    from PIL import Image

    tv = reference_torchvision()
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (300, 280, 3), dtype=np.uint8))
    ours = models.ResNet50_Weights.IMAGENET1K_V2.transforms()(img)
    ref = tv.models.ResNet50_Weights.IMAGENET1K_V2.transforms()(img).numpy()
    assert tuple(ours.shape) == ref.shape == (3, 224, 224)
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-5)


def test_weights_verify_and_wrong_arguments_are_clear_errors():
    assert models.ResNet50_Weights.verify("ResNet50_Weights.IMAGENET1K_V1") is models.ResNet50_Weights.IMAGENET1K_V1
    with pytest.raises(TypeError, match="expected ResNet18_Weights"):
        models.resnet18(weights=models.ResNet50_Weights.DEFAULT)
    with pytest.raises(TypeError, match="IMAGENET1K_V1"):
        models.resnet18(weights="IMAGENET9K")
    with pytest.raises(ValueError, match="num_classes"):
        models.resnet18(weights="DEFAULT", num_classes=10)


def test_registry_matches_torchvisions():
    tv = reference_torchvision()
    assert (
        models.get_weight("ResNet50_Weights.IMAGENET1K_V2").url
        == tv.models.get_weight("ResNet50_Weights.IMAGENET1K_V2").url
    )
    assert models.get_model_weights(models.resnet50) is models.ResNet50_Weights
    resnets = ["resnet101", "resnet152", "resnet18", "resnet34", "resnet50", "resnext101_32x8d", "resnext101_64x4d",
               "resnext50_32x4d", "wide_resnet101_2", "wide_resnet50_2"]  # fmt: skip
    assert models.list_models(module=models.resnet) == tv.models.list_models(module=tv.models.resnet) == []
    assert [n for n in models.list_models(module=models) if n.startswith(("resne", "wide_resnet"))] == resnets
    assert models.list_models(module=models) == tv.models.list_models(module=tv.models)  # classification only
    assert models.list_models(include="vit_*", exclude="*_32") == ["vit_b_16", "vit_h_14", "vit_l_16"]
    assert isinstance(models.get_model("squeezenet1_1", num_classes=3), models.SqueezeNet)
    with pytest.raises(ValueError, match="Unknown model"):
        models.get_model("resnet19")


def test_a_torchserve_model_file_subclasses_resnet_from_the_submodule():
    from serve.compat.torchvision.models.resnet import BasicBlock, ResNet

    class ImageClassifier(ResNet):  # TorchServe's examples/image_classifier/resnet_18/model.py shape
        def __init__(self):
            super().__init__(BasicBlock, [2, 2, 2, 2])

    tv = reference_torchvision()
    want = [(k, tuple(v.shape)) for k, v in tv.models.resnet18().state_dict().items()]
    assert [(k, tuple(v.shape)) for k, v in ImageClassifier().state_dict().items()] == want
    out = ImageClassifier().eval()(serve.zeros(1, 3, 32, 32))
    assert tuple(out.shape) == (1, 1000)


def test_mnasnet0_5_loads_torchvisions_version_1_checkpoint(hub, monkeypatch):
    """torchvision's published mnasnet0_5 weights keep the version 1 stem (32 -> 16 channels)."""
    import torch

    tv = reference_torchvision()
    theirs = tv.models.mnasnet0_5()
    theirs.load_state_dict(_v1_stem_checkpoint(tv, torch))  # torchvision switches to the v1 stem by metadata
    fill_(theirs).eval()
    assert tuple(theirs.state_dict()["layers.0.weight"].shape) == (32, 3, 3, 3)
    _cache(hub, models.MNASNet0_5_Weights.IMAGENET1K_V1, theirs.state_dict())
    cheap_init(monkeypatch)
    max_rel_diff(models.mnasnet0_5(weights="DEFAULT").eval(), theirs, images(32))


def _v1_stem_checkpoint(tv, torch):
    """A state_dict torchvision reads as version 1: the v1 stem's shapes and `_metadata` version 1."""
    v1 = tv.models.mnasnet1_0()  # alpha 1.0 has the v1 stem's widths for layers 0-7
    donor = tv.models.mnasnet0_5().state_dict()
    sd = {k: (v1.state_dict()[k] if int(k.split(".")[1]) < 8 else donor[k]) for k in donor}
    sd = {k: v for k, v in sd.items() if not k.startswith("layers.8.")}
    stack = tv.models.mnasnet._stack(16, 16, 3, 2, 3, 3, 1 - 0.9997).state_dict()
    sd.update({f"layers.8.{k}": v for k, v in stack.items()})
    out = torch.nn.Module().state_dict()
    out.update(sd)
    out._metadata = {"": {"version": 1}}
    return out


def test_get_model_weights_finds_the_enums_of_builders_other_subpackages_register():
    segmentation = pytest.importorskip("serve.compat.torchvision.models.segmentation")
    tv = reference_torchvision()
    names = models.list_models(module=segmentation)
    assert "fcn_resnet50" in names
    for name in names:
        assert models.get_model_weights(name).__name__ == tv.models.get_model_weights(name).__name__
    fcn = models.get_weight("FCN_ResNet50_Weights.COCO_WITH_VOC_LABELS_V1")
    assert fcn is segmentation.FCN_ResNet50_Weights.DEFAULT


def test_weights_members_pickle_by_name_and_live_in_their_submodule():
    import pickle

    member = models.ResNet50_Weights.IMAGENET1K_V2
    assert type(member).__module__ == "serve.compat.torchvision.models.resnet"
    assert pickle.loads(pickle.dumps(member)) is member
    assert pickle.loads(pickle.dumps(models.ResNet50_Weights.DEFAULT)) is member
