"""`torch.distributions`: only `constraints`, which libraries import for type annotations of their own
distribution heads (serve samples in serve.generation, not through torch.distributions)."""

from __future__ import annotations

from serve.compat.torch.distributions import constraints

__all__ = ["constraints"]
