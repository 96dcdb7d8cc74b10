"""`torch.distributions.categorical`: `Categorical` importable (captum's KernelShap imports it); sampling from it is
not available on serve, and making one says so."""

from __future__ import annotations

from typing import Any


class Categorical:
    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        raise NotImplementedError(
            "torch.distributions.Categorical is not available on serve: draw with torch.multinomial(probs, n) instead"
        )
