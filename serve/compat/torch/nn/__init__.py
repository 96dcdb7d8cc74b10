"""`torch.nn` names that serve.nn does not have (torch.nn itself is serve.nn, these join it under the alias), and
its submodules under torch's names.

    Conv3d      named so that isinstance checks over layer kinds work (transformers' weight init lists it);
                building one says that serve has no 3-D convolution
    MaxPool3d   the same (captum's DeepLift lists it among the layers it knows)
    DataParallel  the same (captum checks for it): serve runs one model replica per worker process
    CosineSimilarity  x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along `dim` (captum's Lime imports it)
"""

from __future__ import annotations

from typing import Any

import serve
from serve.compat.torch.nn import parallel
from serve.nn.module import Module
from serve.tensor.tensor import Tensor


class Conv3d(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("nn.Conv3d is not available on serve (no 3-D convolution): video models do not run")


class MaxPool3d(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("nn.MaxPool3d is not available on serve (no 3-D pooling): video models do not run")


class DataParallel(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("nn.DataParallel is not available on serve: each worker process runs one model "
                                  "replica; scale with more workers (minWorkers / maxWorkers)")  # fmt: skip


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        norms = [serve.clamp(serve.sqrt((x * x).sum(dim=self.dim)), min=self.eps) for x in (x1, x2)]
        return (x1 * x2).sum(dim=self.dim) / (norms[0] * norms[1])


__all__ = ["Conv3d", "CosineSimilarity", "DataParallel", "MaxPool3d", "parallel"]
