"""`torchvision.models.regnet` on serve: RegNet (definitions in serve.zoo.regnet), builders and weights enums."""

from __future__ import annotations

from serve.compat.torchvision.models._api import model_builder, weights_enum
from serve.zoo import regnet as _zoo
from serve.zoo.regnet import AnyStage, BlockParams, BottleneckTransform, RegNet, ResBottleneckBlock, SimpleStemIN

RegNet_Y_400MF_Weights = weights_enum("regnet_y_400mf", __name__)
RegNet_Y_800MF_Weights = weights_enum("regnet_y_800mf", __name__)
RegNet_Y_1_6GF_Weights = weights_enum("regnet_y_1_6gf", __name__)
RegNet_Y_3_2GF_Weights = weights_enum("regnet_y_3_2gf", __name__)
RegNet_Y_8GF_Weights = weights_enum("regnet_y_8gf", __name__)
RegNet_Y_16GF_Weights = weights_enum("regnet_y_16gf", __name__)
RegNet_Y_32GF_Weights = weights_enum("regnet_y_32gf", __name__)
RegNet_Y_128GF_Weights = weights_enum("regnet_y_128gf", __name__)
RegNet_X_400MF_Weights = weights_enum("regnet_x_400mf", __name__)
RegNet_X_800MF_Weights = weights_enum("regnet_x_800mf", __name__)
RegNet_X_1_6GF_Weights = weights_enum("regnet_x_1_6gf", __name__)
RegNet_X_3_2GF_Weights = weights_enum("regnet_x_3_2gf", __name__)
RegNet_X_8GF_Weights = weights_enum("regnet_x_8gf", __name__)
RegNet_X_16GF_Weights = weights_enum("regnet_x_16gf", __name__)
RegNet_X_32GF_Weights = weights_enum("regnet_x_32gf", __name__)

regnet_y_400mf = model_builder("regnet_y_400mf", _zoo.regnet_y_400mf, __name__)
regnet_y_800mf = model_builder("regnet_y_800mf", _zoo.regnet_y_800mf, __name__)
regnet_y_1_6gf = model_builder("regnet_y_1_6gf", _zoo.regnet_y_1_6gf, __name__)
regnet_y_3_2gf = model_builder("regnet_y_3_2gf", _zoo.regnet_y_3_2gf, __name__)
regnet_y_8gf = model_builder("regnet_y_8gf", _zoo.regnet_y_8gf, __name__)
regnet_y_16gf = model_builder("regnet_y_16gf", _zoo.regnet_y_16gf, __name__)
regnet_y_32gf = model_builder("regnet_y_32gf", _zoo.regnet_y_32gf, __name__)
regnet_y_128gf = model_builder("regnet_y_128gf", _zoo.regnet_y_128gf, __name__)
regnet_x_400mf = model_builder("regnet_x_400mf", _zoo.regnet_x_400mf, __name__)
regnet_x_800mf = model_builder("regnet_x_800mf", _zoo.regnet_x_800mf, __name__)
regnet_x_1_6gf = model_builder("regnet_x_1_6gf", _zoo.regnet_x_1_6gf, __name__)
regnet_x_3_2gf = model_builder("regnet_x_3_2gf", _zoo.regnet_x_3_2gf, __name__)
regnet_x_8gf = model_builder("regnet_x_8gf", _zoo.regnet_x_8gf, __name__)
regnet_x_16gf = model_builder("regnet_x_16gf", _zoo.regnet_x_16gf, __name__)
regnet_x_32gf = model_builder("regnet_x_32gf", _zoo.regnet_x_32gf, __name__)

__all__ = [
    "AnyStage",
    "BlockParams",
    "BottleneckTransform",
    "RegNet",
    "RegNet_X_1_6GF_Weights",
    "RegNet_X_3_2GF_Weights",
    "RegNet_X_8GF_Weights",
    "RegNet_X_16GF_Weights",
    "RegNet_X_32GF_Weights",
    "RegNet_X_400MF_Weights",
    "RegNet_X_800MF_Weights",
    "RegNet_Y_1_6GF_Weights",
    "RegNet_Y_3_2GF_Weights",
    "RegNet_Y_8GF_Weights",
    "RegNet_Y_16GF_Weights",
    "RegNet_Y_32GF_Weights",
    "RegNet_Y_128GF_Weights",
    "RegNet_Y_400MF_Weights",
    "RegNet_Y_800MF_Weights",
    "ResBottleneckBlock",
    "SimpleStemIN",
    "regnet_x_1_6gf",
    "regnet_x_3_2gf",
    "regnet_x_8gf",
    "regnet_x_16gf",
    "regnet_x_32gf",
    "regnet_x_400mf",
    "regnet_x_800mf",
    "regnet_y_1_6gf",
    "regnet_y_3_2gf",
    "regnet_y_8gf",
    "regnet_y_16gf",
    "regnet_y_32gf",
    "regnet_y_128gf",
    "regnet_y_400mf",
    "regnet_y_800mf",
]
