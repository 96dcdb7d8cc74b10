"""`torch.nn.parallel`: importable (captum imports `scatter_gather.scatter`); serve runs one model replica per worker
process, so spreading a batch over devices raises."""

from __future__ import annotations

from serve.compat.torch.nn.parallel import scatter_gather

__all__ = ["scatter_gather"]
