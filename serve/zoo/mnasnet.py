"""MNASNet (Tan et al., 2018, "Platform-Aware Neural Architecture Search for Mobile") as `torchvision.models.mnasnet`.

mnasnet0_5/0_75/1_0/1_3 scale the B1 network's widths by alpha (rounded to multiples of 8, never more than 10%
down). BatchNorm momentum 0.0003 (TensorFlow's decay 0.9997). Keys: `layers.0..16`, `classifier.1`. This is
torchvision's current (version 2) layout, where the stem scales with alpha too. torchvision's mnasnet0_5
checkpoint was saved with the version 1 stem (32 and 16 channels whatever alpha): `load_state_dict` recognizes
it by the first conv's width and switches the first nine layers to that stem before loading, as torchvision does
(it reads a version number the checkpoint's metadata carries; serve reads the shapes).
"""

from __future__ import annotations

from typing import Any

import serve
from serve import nn

_BN_MOMENTUM = 1 - 0.9997


class _InvertedResidual(nn.Module):
    """1x1 expand, depthwise kxk, 1x1 project (BatchNorm after each, ReLU after the first two)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int, expansion_factor: int,
                 bn_momentum: float = 0.1) -> None:  # fmt: skip
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride should be 1 or 2 instead of {stride}")
        if kernel_size not in (3, 5):
            raise ValueError(f"kernel_size should be 3 or 5 instead of {kernel_size}")
        mid = in_ch * expansion_factor
        self.apply_residual = in_ch == out_ch and stride == 1
        self.layers = nn.Sequential(
            nn.Conv2d(in_ch, mid, 1, bias=False), nn.BatchNorm2d(mid, momentum=bn_momentum), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, kernel_size, padding=kernel_size // 2, stride=stride, groups=mid, bias=False),
            nn.BatchNorm2d(mid, momentum=bn_momentum), nn.ReLU(inplace=True),
            nn.Conv2d(mid, out_ch, 1, bias=False), nn.BatchNorm2d(out_ch, momentum=bn_momentum),
        )  # fmt: skip

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        return self.layers(input) + input if self.apply_residual else self.layers(input)


def _stack(in_ch: int, out_ch: int, kernel_size: int, stride: int, exp_factor: int, repeats: int,
           bn_momentum: float) -> nn.Sequential:  # fmt: skip
    first = _InvertedResidual(in_ch, out_ch, kernel_size, stride, exp_factor, bn_momentum=bn_momentum)
    rest = [_InvertedResidual(out_ch, out_ch, kernel_size, 1, exp_factor, bn_momentum) for _ in range(repeats - 1)]
    return nn.Sequential(first, *rest)


def _round_to_multiple_of(val: float, divisor: int, round_up_bias: float = 0.9) -> int:
    """Nearest multiple of `divisor`, bumped up one when that is more than 10% below `val`."""
    if not 0.0 < round_up_bias < 1.0:
        raise ValueError(f"round_up_bias should be greater than 0.0 and smaller than 1.0 instead of {round_up_bias}")
    new_val = max(divisor, int(val + divisor / 2) // divisor * divisor)
    return new_val if new_val >= round_up_bias * val else new_val + divisor


def _get_depths(alpha: float) -> list[int]:
    return [_round_to_multiple_of(d * alpha, 8) for d in (32, 16, 24, 40, 80, 96, 192, 320)]


class MNASNet(nn.Module):
    """torchvision's `MNASNet(alpha, num_classes=1000, dropout=0.2)`."""

    _version = 2

    def __init__(self, alpha: float, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        if alpha <= 0.0:
            raise ValueError(f"alpha should be greater than 0.0 instead of {alpha}")
        self.alpha = alpha
        self.num_classes = num_classes
        d = _get_depths(alpha)
        m = _BN_MOMENTUM
        self.layers = nn.Sequential(
            nn.Conv2d(3, d[0], 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(d[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(d[0], d[0], 3, padding=1, stride=1, groups=d[0], bias=False), nn.BatchNorm2d(d[0], momentum=m),
            nn.ReLU(inplace=True),
            nn.Conv2d(d[0], d[1], 1, padding=0, stride=1, bias=False), nn.BatchNorm2d(d[1], momentum=m),
            _stack(d[1], d[2], 3, 2, 3, 3, m), _stack(d[2], d[3], 5, 2, 3, 3, m), _stack(d[3], d[4], 5, 2, 6, 3, m),
            _stack(d[4], d[5], 3, 1, 6, 2, m), _stack(d[5], d[6], 5, 2, 6, 4, m), _stack(d[6], d[7], 3, 1, 6, 1, m),
            nn.Conv2d(d[7], 1280, 1, padding=0, stride=1, bias=False), nn.BatchNorm2d(1280, momentum=m),
            nn.ReLU(inplace=True),
        )  # fmt: skip
        self.classifier = nn.Sequential(nn.Dropout(p=dropout, inplace=True), nn.Linear(1280, num_classes))

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return self.classifier(self.layers(x).mean([2, 3]))  # global average pool: (N, 1280)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        first = state_dict.get("layers.0.weight") if hasattr(state_dict, "get") else None
        if first is not None and first.shape[0] == 32 and self.layers[0].out_channels != 32:
            self._use_v1_stem()
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def _use_v1_stem(self) -> None:
        """Version 1's stem: 32 -> 16 channels whatever alpha, then the first stack from 16 channels."""
        d, m = _get_depths(self.alpha), _BN_MOMENTUM
        stem = [
            nn.Conv2d(3, 32, 3, padding=1, stride=2, bias=False), nn.BatchNorm2d(32, momentum=m), nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 3, padding=1, stride=1, groups=32, bias=False), nn.BatchNorm2d(32, momentum=m),
            nn.ReLU(inplace=True), nn.Conv2d(32, 16, 1, padding=0, stride=1, bias=False),
            nn.BatchNorm2d(16, momentum=m), _stack(16, d[2], 3, 2, 3, 3, m),
        ]  # fmt: skip
        for i, layer in enumerate(stem):
            self.layers[i] = layer
        self._version = 1


def mnasnet0_5(**kwargs: Any) -> MNASNet:
    """MNASNet with depth multiplier 0.5."""
    return MNASNet(0.5, **kwargs)


def mnasnet0_75(**kwargs: Any) -> MNASNet:
    """MNASNet with depth multiplier 0.75."""
    return MNASNet(0.75, **kwargs)


def mnasnet1_0(**kwargs: Any) -> MNASNet:
    """MNASNet with depth multiplier 1.0."""
    return MNASNet(1.0, **kwargs)


def mnasnet1_3(**kwargs: Any) -> MNASNet:
    """MNASNet with depth multiplier 1.3."""
    return MNASNet(1.3, **kwargs)
