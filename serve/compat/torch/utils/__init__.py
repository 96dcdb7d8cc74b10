"""`torch.utils` on serve: `checkpoint` and `data` (torch.nn.utils is serve.nn.utils, mapped separately)."""

from __future__ import annotations

from serve.compat.torch.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
