"""`torch.nn.utils` names beyond serve.nn.utils (which `torch.nn.utils` is under the alias; these join it)."""

from __future__ import annotations

from serve.compat.torch.nn.utils import parametrizations

__all__ = ["parametrizations"]
