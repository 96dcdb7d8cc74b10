"""`torch.nn.utils.parametrizations`: importable, without `weight_norm` (serve has no parametrizations), so code that
probes `hasattr(nn.utils.parametrizations, "weight_norm")` (transformers 4.x, renaming checkpoint keys) takes the
path of a torch without it and keeps `weight_g` / `weight_v` names."""

from __future__ import annotations
