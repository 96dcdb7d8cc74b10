"""`torch.utils.model_zoo`: the old home of `load_url`, which is torch.hub.load_state_dict_from_url (local only)."""

from __future__ import annotations

from serve.compat.torch.hub import load_state_dict_from_url as load_url

__all__ = ["load_url"]
