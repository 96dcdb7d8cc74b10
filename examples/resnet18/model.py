"""ResNet-18 (torchvision's architecture, serve.zoo.resnet) with a no-argument constructor, for the `tensor` handler.

The weights are seeded random ones (make_weights.py): the example exists to benchmark the server on a real
convolutional network's cost, not to classify. Input per request: a (3, 224, 224) float32 array; output: the
1000 logits.
"""

from serve.zoo.resnet import BasicBlock, ResNet


class ResNet18(ResNet):
    """torchvision's `resnet18(weights=None)`: BasicBlock, [2, 2, 2, 2], 1000 classes."""

    def __init__(self) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2])
