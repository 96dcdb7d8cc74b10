"""The v2 protocol's parameter maps as plain Python values.

`map<string, InferParameter>` (inference requests, inputs, outputs) and `map<string, ModelRepositoryParameter>`
(repository load) hold each value in a `parameter_choice` oneof; both read the same way, so both go through
`parameters_of`: whichever member is set, and a key whose oneof is unset is left out.
"""

from __future__ import annotations

from typing import Any

__all__ = ["parameters_of"]


def parameters_of(params: Any) -> dict[str, Any]:
    """A map of `parameter_choice` messages as plain values (whichever oneof member is set)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        which = value.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(value, which)
    return out
