"""serve's torchvision.models against the real torchvision: every architecture's keys and shapes, and logits.

Keys/shapes: every builder at full size and default arguments, torchvision's model on the meta device, serve's
built with its initializers turned off (so even vit_h_14 and regnet_y_128gf take milliseconds). Numbers: at least
one variant per family on the smallest input it accepts, torchvision's seeded weights loaded strictly, eval mode,
batch 2, logits within 1e-4 of the largest |logit|. The measured differences are printed (`-s`).
"""

from __future__ import annotations

import pytest

from serve.compat.torchvision import models
from tests.torchvision_reference import needs_torchvision, reference_torchvision
from tests.unit.compat.torchvision._twins import (
    cheap_init,
    fill_,
    images,
    load_into,
    max_rel_diff,
    meta_model,
    torchvision_model,
)

pytestmark = needs_torchvision

# (builder, input size, extra kwargs for both); num_classes=10 keeps the heads small
NUMBERS = [
    ("resnet18", 32, {}), ("resnet50", 32, {}), ("resnext50_32x4d", 32, {}), ("mobilenet_v2", 32, {}),
    ("mobilenet_v3_large", 32, {}), ("mobilenet_v3_small", 32, {}),
    ("efficientnet_b0", 32, {}), ("efficientnet_v2_s", 32, {}), ("densenet121", 32, {}),
    ("vgg11_bn", 32, {"init_weights": False}), ("alexnet", 63, {}), ("squeezenet1_0", 32, {}),
    ("squeezenet1_1", 32, {}), ("googlenet", 32, {"init_weights": False}),
    ("googlenet", 32, {"init_weights": False, "transform_input": True, "aux_logits": False}),
    ("inception_v3", 75, {"init_weights": False}), ("regnet_y_400mf", 32, {}), ("regnet_x_400mf", 32, {}),
    ("shufflenet_v2_x1_0", 32, {}), ("mnasnet0_5", 32, {}), ("mnasnet1_0", 32, {}), ("convnext_tiny", 32, {}),
    ("vit_b_32", 64, {"image_size": 64}), ("swin_t", 64, {}), ("swin_v2_t", 64, {}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "size", "kwargs"), NUMBERS, ids=[f"{n}-{s}px" for n, s, _ in NUMBERS])
def test_logits_match_torchvision(name, size, kwargs, monkeypatch):
    theirs = torchvision_model(name, num_classes=10, **kwargs)
    cheap_init(monkeypatch)  # every parameter is overwritten by the strict load
    ours = load_into(models.get_model(name, num_classes=10, **kwargs), theirs)
    err = max_rel_diff(ours, theirs, images(size))
    print(f"{name}: max relative difference {err:.2e}")


@pytest.mark.parametrize("name", models.list_models(module=models))  # detection's have their own tests
def test_keys_and_shapes_equal_torchvisions(name, monkeypatch):
    theirs = meta_model(name)
    cheap_init(monkeypatch)
    ours = models.get_model(name)
    want = [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == want


def test_maxvit_logits_match_torchvisions_on_a_small_configuration(monkeypatch):
    tv = reference_torchvision()
    config = {"input_size": (64, 64), "stem_channels": 16, "partition_size": 2, "block_channels": [32, 64],
              "block_layers": [1, 2], "head_dim": 8, "stochastic_depth_prob": 0.2, "num_classes": 10}  # fmt: skip
    theirs = fill_(tv.models.maxvit.MaxVit(**config)).eval()
    cheap_init(monkeypatch)
    ours = load_into(models.maxvit.MaxVit(**config), theirs)
    print(f"maxvit (small config): max relative difference {max_rel_diff(ours, theirs, images(64)):.2e}")


def test_maxvit_refuses_an_input_size_its_partitions_do_not_divide():
    with pytest.raises(ValueError, match="partition size 7"):
        models.maxvit.MaxVit((64, 64), 16, 7, [32], [1], 8, 0.0)


def test_every_torchvision_classification_builder_exists_here():
    tv = reference_torchvision()
    missing = set(tv.models.list_models(module=tv.models)) - set(models.list_models(module=models))
    assert not missing


@pytest.mark.parametrize("name", ["swin_t", "swin_v2_t"])
def test_swin_position_buffers_equal_torchvisions(name, monkeypatch):
    import numpy as np

    theirs = reference_torchvision().models.get_model(name).state_dict()
    cheap_init(monkeypatch)
    ours = models.get_model(name).state_dict()
    buffers = [k for k in theirs if k.endswith(("relative_position_index", "relative_coords_table"))]
    assert len(buffers) == (24 if "v2" in name else 12)
    for key in buffers:
        np.testing.assert_allclose(ours[key].numpy(), theirs[key].numpy(), rtol=0, atol=1e-6, err_msg=key)
