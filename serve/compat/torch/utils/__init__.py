"""`torch.utils` on serve: `checkpoint`, `data`, `model_zoo` (torch.nn.utils is serve.nn.utils, mapped separately)."""

from __future__ import annotations

from serve.compat.torch.utils import checkpoint, data, model_zoo

__all__ = ["checkpoint", "data", "model_zoo"]
