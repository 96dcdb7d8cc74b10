"""`torch.utils` on serve: `checkpoint`, `data`, `model_zoo`, `hooks`, `_pytree` (attributes as soon as torch is
imported, as in torch: captum annotates with `torch.utils.hooks.RemovableHandle`; torch.nn.utils is serve.nn.utils,
mapped separately)."""

from __future__ import annotations

from serve.compat.torch.utils import _pytree, checkpoint, data, hooks, model_zoo

__all__ = ["_pytree", "checkpoint", "data", "hooks", "model_zoo"]
