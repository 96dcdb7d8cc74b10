"""Helpers around modules and state_dicts (PyTorch's `torch.nn.modules.utils` and `torch.nn.utils` names)."""

from __future__ import annotations

from typing import Any


def consume_prefix_in_state_dict_if_present(state_dict: Any, prefix: str) -> None:
    """Strip `prefix` (e.g. "module." left by DataParallel/DistributedDataParallel) from the keys, in place.

    The state_dict's `_metadata` keys are renamed too, so version-dependent loading still works.
    """
    for key in [k for k in state_dict if k.startswith(prefix)]:
        state_dict[key[len(prefix) :]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        for key in list(metadata):
            if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
                metadata[key[len(prefix) :]] = metadata.pop(key)
