"""The building blocks torchvision's models share (`torchvision.ops.misc` and `ops.stochastic_depth`), on serve.nn.

Conv2dNormActivation, SqueezeExcitation, StochasticDepth (identity in eval; drops whole residual branches per
sample or per batch in training), MLP, Permute and LayerNorm2d (ConvNeXt's channels-first LayerNorm). Their
module names are torchvision's, so the models built from them keep torchvision's state_dict keys
(`features.0.0.weight`, `block.2.fc1.bias`, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import serve
import serve.nn.functional as F
from serve import nn

NormLayer = Callable[..., nn.Module]
IntOrPair = int | tuple[int, int]


def _pair(v: IntOrPair) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


class Conv2dNormActivation(nn.Sequential):
    """Conv2d (with a bias only when there is no norm), a norm layer, an activation: keys `0`, `1`."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrPair = 3,
        stride: IntOrPair = 1,
        padding: IntOrPair | None = None,
        groups: int = 1,
        norm_layer: NormLayer | None = nn.BatchNorm2d,
        activation_layer: Callable[..., nn.Module] | None = nn.ReLU,
        dilation: IntOrPair = 1,
        inplace: bool | None = True,
        bias: bool | None = None,
    ) -> None:
        if padding is None:  # "same" for odd kernels at stride 1
            k, d = _pair(kernel_size), _pair(dilation)
            padding = ((k[0] - 1) // 2 * d[0], (k[1] - 1) // 2 * d[1])
        if bias is None:
            bias = norm_layer is None
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation=dilation, groups=groups,
                      bias=bias)
        ]  # fmt: skip
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer() if inplace is None else activation_layer(inplace=inplace))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """Hu et al., 2017: global average pool, 1x1 squeeze (`fc1`), activation, 1x1 excite (`fc2`), gate the input."""

    def __init__(
        self,
        input_channels: int,
        squeeze_channels: int,
        activation: Callable[..., nn.Module] = nn.ReLU,
        scale_activation: Callable[..., nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def _scale(self, input: serve.Tensor) -> serve.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(input))))  # (N, C, 1, 1)
        return self.scale_activation(scale)

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        return self._scale(input) * input


def stochastic_depth(input: serve.Tensor, p: float, mode: str, training: bool = True) -> serve.Tensor:
    """Huang et al., 2016: zero the residual branch with probability `p` ("row": per sample, "batch": for all),
    scaling survivors by 1/(1-p); the identity when not training or when p is 0."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
    if mode not in ("batch", "row"):
        raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
    if not training or p == 0.0:
        return input
    survival = 1.0 - p
    shape = [input.shape[0]] + [1] * (input.dim() - 1) if mode == "row" else [1] * input.dim()
    keep = (serve.rand(*shape) < survival).to(input.dtype)
    if survival > 0.0:
        keep = keep / survival
    return input * keep


class StochasticDepth(nn.Module):
    """`stochastic_depth` as a layer (no parameters, so no keys)."""

    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, input: serve.Tensor) -> serve.Tensor:
        return stochastic_depth(input, self.p, self.mode, self.training)


class MLP(nn.Sequential):
    """Linear, [norm], activation, Dropout for each hidden width; the last Linear, then Dropout."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: Sequence[int],
        norm_layer: NormLayer | None = None,
        activation_layer: Callable[..., nn.Module] | None = nn.ReLU,
        inplace: bool | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        params: dict[str, Any] = {} if inplace is None else {"inplace": inplace}
        layers: list[nn.Module] = []
        in_dim = in_channels
        for hidden_dim in hidden_channels[:-1]:
            layers.append(nn.Linear(in_dim, hidden_dim, bias=bias))
            if norm_layer is not None:
                layers.append(norm_layer(hidden_dim))
            if activation_layer is not None:
                layers.append(activation_layer(**params))
            layers.append(nn.Dropout(dropout, **params))
            in_dim = hidden_dim
        layers.append(nn.Linear(in_dim, hidden_channels[-1], bias=bias))
        layers.append(nn.Dropout(dropout, **params))
        super().__init__(*layers)


class Permute(nn.Module):
    """`x.permute(*dims)` as a layer."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = dims

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        return x.permute(*self.dims)


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) tensor (ConvNeXt's downsampling layers)."""

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        x = x.permute(0, 2, 3, 1)  # (N, H, W, C)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)  # (N, C, H, W)
