"""`torch.nn.parallel.scatter_gather`: `scatter` and `gather` raise: serve does not spread a model over devices."""

from __future__ import annotations

from typing import Any


def scatter(inputs: Any, target_gpus: Any, dim: int = 0) -> Any:
    raise NotImplementedError("torch.nn.parallel.scatter is not available on serve: one model replica per worker")


def gather(outputs: Any, target_device: Any, dim: int = 0) -> Any:
    raise NotImplementedError("torch.nn.parallel.gather is not available on serve: one model replica per worker")
