"""`torch.nn.modules.module`: the names of torch's Module file that libraries reach for (Module itself is
serve.nn.Module)."""

from __future__ import annotations

from serve.nn.module import Module
from serve.nn.state_dict import IncompatibleKeys as _IncompatibleKeys

_EXTRA_STATE_KEY_SUFFIX = "_extra_state"  # the state_dict key of get_extra_state(), as in torch

__all__ = ["_EXTRA_STATE_KEY_SUFFIX", "Module", "_IncompatibleKeys"]
