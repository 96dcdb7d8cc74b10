"""`Identity`, `Flatten` and `Unflatten`: the shape-only layers."""

from __future__ import annotations

from typing import Any

from serve.nn.module import Module
from serve.tensor.tensor import Tensor


class Identity(Module):
    """Returns its input; accepts (and ignores) any constructor arguments, like PyTorch's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Flatten(Module):
    """Flattens dims `start_dim..end_dim` into one: (N, C, H, W) -> (N, C*H*W) by default."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expands dim `dim` into `unflattened_size`: Unflatten(1, (2, 5)) maps (N, 10) -> (N, 2, 5)."""

    def __init__(self, dim: int | str, unflattened_size: Any) -> None:
        super().__init__()
        if isinstance(dim, str):
            raise TypeError("named dimensions are not supported: pass the dimension as an int")
        if not isinstance(unflattened_size, (tuple, list)) or not all(isinstance(s, int) for s in unflattened_size):
            raise TypeError(
                f"unflattened_size must be a tuple of ints, but found type {type(unflattened_size).__name__}"
            )
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
