"""`torch.fx` on serve: `wrap` for model files that mark functions as leaves; tracing itself is not available.

serve captures a model's forward for its own inference plan (serve/inference), so a model file never needs FX;
`symbolic_trace` (graph rewriting, feature extraction) raises and names the eager alternative.
"""

from __future__ import annotations

from typing import Any

from serve.compat.torch.fx import _pytree


def wrap(fn_or_name: Any) -> Any:
    """Return the argument unchanged: a function (used as a decorator) or a function name (module-level call)."""
    return fn_or_name


def symbolic_trace(root: Any, concrete_args: Any = None) -> Any:
    """Not available: raises NotImplementedError naming the alternative."""
    raise NotImplementedError(
        "torch.fx.symbolic_trace is not available on serve (no FX graphs): call the module eagerly, or use "
        "forward hooks (module.register_forward_hook) to read intermediate outputs"
    )


class Proxy:
    """torch.fx's symbolic value: nothing on serve is one (transformers checks `isinstance(x, torch.fx.Proxy)`)."""
