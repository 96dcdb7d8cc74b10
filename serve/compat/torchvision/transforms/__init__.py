"""`torchvision.transforms` on serve: the v1 classes, `functional`, `InterpolationMode`, and `v2`.

A "tensor" here is a serve Tensor (what `torch.Tensor` is under torch compatibility); transforms take PIL images
or tensor images (..., C, H, W) and return the same kind, as torchvision's. See `functional.py` for how each
path computes and `_resample.py` for tensor resizing.
"""

from __future__ import annotations

from serve.compat.torchvision.transforms import functional, v2
from serve.compat.torchvision.transforms._mode import InterpolationMode
from serve.compat.torchvision.transforms.transforms import (
    CenterCrop,
    Compose,
    ConvertImageDtype,
    Grayscale,
    Lambda,
    Normalize,
    Pad,
    PILToTensor,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ToPILImage,
    ToTensor,
)

__all__ = ["CenterCrop", "Compose", "ConvertImageDtype", "Grayscale", "InterpolationMode", "Lambda", "Normalize",
           "PILToTensor", "Pad", "RandomCrop", "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip",
           "Resize", "ToPILImage", "ToTensor", "functional", "v2"]  # fmt: skip
