"""MLP: the multilayer perceptron people write as `nn.Sequential(nn.Linear, nn.ReLU, ..., nn.Linear)`."""

from __future__ import annotations

from collections.abc import Sequence

from serve import nn


class MLP(nn.Sequential):
    """`Linear -> ReLU [-> Dropout]` per hidden width, then a `Linear` head.

    A subclass of `Sequential`, so its `state_dict` keys (`0.weight`, `0.bias`, `2.weight`, ...) are those of the
    PyTorch original `nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))` and its checkpoints load
    unchanged. With `dropout > 0` a `Dropout` follows each `ReLU`, which shifts the indices as it does in PyTorch.

        model = MLP(in_features=64, hidden=(128,), out_features=10)
    """

    def __init__(
        self, in_features: int = 64, hidden: Sequence[int] = (128,), out_features: int = 10, dropout: float = 0.0
    ) -> None:
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, out_features))
        super().__init__(*layers)
