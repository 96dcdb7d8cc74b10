"""`torch.fx._pytree`: the flatten-spec registry FX tracing reads. serve has no FX tracing, so registering a spec
(transformers 4.x registers one for its DynamicCache at import) is accepted and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def register_pytree_flatten_spec(cls: type, flatten_fn_spec: Callable[..., Any],
                                 flatten_fn_exact_match_spec: Callable[..., Any] | None = None) -> None:  # fmt: skip
    """Accepted and ignored: nothing on serve traces with FX."""
