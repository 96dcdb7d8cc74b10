"""Reference models written with serve.nn whose state_dict keys equal the PyTorch originals.

Vision: MLP, LeNet, and every torchvision classification family, one module each with torchvision's module names,
constructor arguments and keys: resnet (ResNet, ResNeXt, Wide ResNet), alexnet, vgg, squeezenet, densenet,
googlenet, inception, mobilenet (V2), mobilenetv3, mnasnet, shufflenetv2, efficientnet (B0-B7, V2), regnet,
convnext, vit, swin (V1, V2), maxvit; their shared blocks in `layers` (Conv2dNormActivation, SqueezeExcitation,
StochasticDepth, ...). `serve.compat.torchvision.models` puts torchvision's builders and weights enums on them.
Text: BertModel, LSTMClassifier, and sentence-transformers pipelines (`all_minilm_l6_v2()`).
"""

from serve.zoo.bert import BaseModelOutputWithPooling, BertConfig, BertModel
from serve.zoo.lenet import LeNet
from serve.zoo.lstm_classifier import LSTMClassifier
from serve.zoo.mlp import MLP
from serve.zoo.mobilenet import MobileNetV2, mobilenet_v2
from serve.zoo.resnet import (
    BasicBlock,
    Bottleneck,
    ResNet,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    resnet152,
    resnext50_32x4d,
    resnext101_32x8d,
    resnext101_64x4d,
    wide_resnet50_2,
    wide_resnet101_2,
)
from serve.zoo.sentence import SentenceTransformer, all_minilm_l6_v2, from_pretrained, mean_pooling
from serve.zoo.vit import VisionTransformer, vit_b_16

__all__ = [
    "MLP",
    "BaseModelOutputWithPooling",
    "BasicBlock",
    "BertConfig",
    "BertModel",
    "Bottleneck",
    "LSTMClassifier",
    "LeNet",
    "MobileNetV2",
    "ResNet",
    "SentenceTransformer",
    "VisionTransformer",
    "all_minilm_l6_v2",
    "from_pretrained",
    "mean_pooling",
    "mobilenet_v2",
    "resnet18",
    "resnet34",
    "resnet50",
    "vit_b_16",
]
