"""`torchvision.ops.misc` and `ops.stochastic_depth`: the layers torchvision's models share. They are defined once,
in `serve.zoo` (the zoo's models are built from them), and re-exported here under torchvision's names."""

from __future__ import annotations

from serve.zoo.frozen_bn import FrozenBatchNorm2d
from serve.zoo.layers import MLP, Conv2dNormActivation, Permute, SqueezeExcitation, StochasticDepth, stochastic_depth

__all__ = ["MLP", "Conv2dNormActivation", "FrozenBatchNorm2d", "Permute", "SqueezeExcitation", "StochasticDepth",
           "stochastic_depth"]  # fmt: skip
