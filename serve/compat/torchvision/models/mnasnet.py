"""`torchvision.models.mnasnet` on serve: MNASNet (definitions in serve.zoo.mnasnet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import mnasnet as _zoo
from serve.zoo.mnasnet import MNASNet

MNASNet0_5_Weights = weights_enum("mnasnet0_5", __name__)
MNASNet0_75_Weights = weights_enum("mnasnet0_75", __name__)
MNASNet1_0_Weights = weights_enum("mnasnet1_0", __name__)
MNASNet1_3_Weights = weights_enum("mnasnet1_3", __name__)

mnasnet0_5 = model_builder("mnasnet0_5", _zoo.mnasnet0_5, __name__)
mnasnet0_75 = model_builder("mnasnet0_75", _zoo.mnasnet0_75, __name__)
mnasnet1_0 = model_builder("mnasnet1_0", _zoo.mnasnet1_0, __name__)
mnasnet1_3 = model_builder("mnasnet1_3", _zoo.mnasnet1_3, __name__)

__all__ = [
    "MNASNet",
    "MNASNet0_5_Weights",
    "MNASNet0_75_Weights",
    "MNASNet1_0_Weights",
    "MNASNet1_3_Weights",
    "mnasnet0_5",
    "mnasnet0_75",
    "mnasnet1_0",
    "mnasnet1_3",
]
