"""`torchvision.transforms` (v1) classes on serve: each one holds its arguments and calls `functional`.

Random transforms (RandomResizedCrop, RandomHorizontalFlip, RandomVerticalFlip, RandomCrop) draw from Python's
`random` module, enough for evaluation handlers that keep them in a pipeline; they are not torch's random stream.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import serve
from serve.compat.torchvision.transforms import functional as F
from serve.compat.torchvision.transforms._images import image_hw, pair
from serve.compat.torchvision.transforms._mode import InterpolationMode, interpolation_mode

__all__ = [
    "CenterCrop",
    "Compose",
    "ConvertImageDtype",
    "Grayscale",
    "Lambda",
    "Normalize",
    "PILToTensor",
    "Pad",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "ToPILImage",
    "ToTensor",
]


class Compose:
    """Apply transforms in order."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        inner = "".join(f"\n    {t!r}" for t in self.transforms)
        return f"{type(self).__name__}({inner}\n)"


class Transform:
    """A transform is a callable object with a repr; `forward` is the name torchvision's nn.Module form uses."""

    def __call__(self, img: Any) -> Any:
        return self.forward(img)

    def forward(self, img: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({args})"


class Resize(Transform):
    def __init__(self, size: Any, interpolation: Any = InterpolationMode.BILINEAR, max_size: int | None = None,
                 antialias: bool | None = True) -> None:  # fmt: skip
        if size is not None and not isinstance(size, int | Sequence):
            raise TypeError(f"Size should be int or sequence. Got {type(size)}")
        if isinstance(size, Sequence) and len(size) not in (1, 2):
            raise ValueError("If size is a sequence, it should have 1 or 2 values")
        self.size = size
        self.interpolation = interpolation_mode(interpolation)
        self.max_size = max_size
        self.antialias = antialias

    def forward(self, img: Any) -> Any:
        return F.resize(img, self.size, self.interpolation, self.max_size, self.antialias)


class CenterCrop(Transform):
    def __init__(self, size: Any) -> None:
        self.size = pair(size, "CenterCrop")

    def forward(self, img: Any) -> Any:
        return F.center_crop(img, self.size)


class Pad(Transform):
    def __init__(self, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> None:
        F._padding(padding)  # validates now, as torchvision's constructor does
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise ValueError("Padding mode should be either constant, edge, reflect or symmetric")
        self.padding, self.fill, self.padding_mode = padding, fill, padding_mode

    def forward(self, img: Any) -> Any:
        return F.pad(img, self.padding, self.fill, self.padding_mode)


class Grayscale(Transform):
    def __init__(self, num_output_channels: int = 1) -> None:
        self.num_output_channels = num_output_channels

    def forward(self, img: Any) -> Any:
        return F.rgb_to_grayscale(img, self.num_output_channels)


class ToTensor:
    def __call__(self, pic: Any) -> serve.Tensor:
        return F.to_tensor(pic)

    def __repr__(self) -> str:
        return "ToTensor()"


class PILToTensor:
    def __call__(self, pic: Any) -> serve.Tensor:
        return F.pil_to_tensor(pic)

    def __repr__(self) -> str:
        return "PILToTensor()"


class ToPILImage(Transform):
    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode

    def forward(self, pic: Any) -> Any:
        return F.to_pil_image(pic, self.mode)


class ConvertImageDtype(Transform):
    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype

    def forward(self, image: Any) -> Any:
        return F.convert_image_dtype(image, self.dtype)


class Normalize(Transform):
    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = list(mean), list(std), inplace

    def forward(self, tensor: Any) -> Any:
        return F.normalize(tensor, self.mean, self.std, self.inplace)


class Lambda(Transform):
    def __init__(self, lambd: Callable[[Any], Any]) -> None:
        if not callable(lambd):
            raise TypeError(f"Argument lambd should be callable, got {type(lambd).__name__!r}")
        self.lambd = lambd

    def forward(self, img: Any) -> Any:
        return self.lambd(img)


class RandomHorizontalFlip(Transform):
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def forward(self, img: Any) -> Any:
        return F.hflip(img) if random.random() < self.p else img


class RandomVerticalFlip(Transform):
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def forward(self, img: Any) -> Any:
        return F.vflip(img) if random.random() < self.p else img


class RandomCrop(Transform):
    def __init__(self, size: Any, padding: Any = None, pad_if_needed: bool = False, fill: Any = 0,
                 padding_mode: str = "constant") -> None:  # fmt: skip
        self.size = pair(size, "RandomCrop")
        self.padding, self.pad_if_needed, self.fill, self.padding_mode = padding, pad_if_needed, fill, padding_mode

    def forward(self, img: Any) -> Any:
        if self.padding is not None:
            img = F.pad(img, self.padding, self.fill, self.padding_mode)
        height, width = image_hw(img)
        th, tw = self.size
        if self.pad_if_needed and (width < tw or height < th):
            img = F.pad(img, [max(tw - width, 0), max(th - height, 0)], self.fill, self.padding_mode)
            height, width = image_hw(img)
        if height < th or width < tw:
            raise ValueError(f"Required crop size {(th, tw)} is larger than input image size {(height, width)}")
        return F.crop(img, random.randint(0, height - th), random.randint(0, width - tw), th, tw)


class RandomResizedCrop(Transform):
    """A random area/aspect crop resized to `size` (torchvision's sampling: 10 tries, then a centre crop)."""

    def __init__(self, size: Any, scale: tuple[float, float] = (0.08, 1.0), ratio: tuple[float, float] = (3 / 4, 4 / 3),
                 interpolation: Any = InterpolationMode.BILINEAR, antialias: bool | None = True) -> None:  # fmt: skip
        self.size = pair(size, "RandomResizedCrop")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"scale and ratio should be of kind (min, max), got scale={scale} ratio={ratio}")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation, self.antialias = interpolation_mode(interpolation), antialias

    @staticmethod
    def get_params(img: Any, scale: Sequence[float], ratio: Sequence[float]) -> tuple[int, int, int, int]:
        height, width = image_hw(img)
        area = height * width
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target_area = area * random.uniform(scale[0], scale[1])
            aspect = math.exp(random.uniform(*log_ratio))
            w, h = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        in_ratio = width / height
        if in_ratio < min(ratio):
            w, h = width, round(width / min(ratio))
        elif in_ratio > max(ratio):
            h, w = height, round(height * max(ratio))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def forward(self, img: Any) -> Any:
        top, left, h, w = self.get_params(img, self.scale, self.ratio)
        return F.resized_crop(img, top, left, h, w, list(self.size), self.interpolation, self.antialias)
