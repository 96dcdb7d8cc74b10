"""`torchvision.ops.feature_pyramid_network`: FeaturePyramidNetwork and its extra blocks, defined in serve.zoo.fpn
(the detection backbones are built from them) and re-exported under torchvision's module name."""

from __future__ import annotations

from serve.zoo.fpn import ExtraFPNBlock, FeaturePyramidNetwork, LastLevelMaxPool, LastLevelP6P7

__all__ = ["ExtraFPNBlock", "FeaturePyramidNetwork", "LastLevelMaxPool", "LastLevelP6P7"]
