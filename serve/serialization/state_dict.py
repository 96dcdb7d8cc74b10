"""Finding the model's state_dict inside what users actually save, and stripping DataParallel's `module.` prefix.

Training scripts save `{'epoch': 3, 'model_state_dict': ..., 'optimizer_state_dict': ..., 'loss': ...}`, Lightning
saves `{'state_dict': ...}`, others `{'model': ...}` or the state_dict itself, often from a model wrapped in
DataParallel/DistributedDataParallel whose keys all start with `module.`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from serve.errors import CheckpointError
from serve.tensor.tensor import Tensor

STATE_DICT_KEYS = ("state_dict", "model_state_dict", "model")


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())


def find_state_dict(obj: Any, prefix: str = "module.") -> OrderedDict[str, Tensor]:
    """The model's state_dict in a loaded checkpoint, with a `prefix` shared by every key removed.

    Looks under the keys "state_dict", "model_state_dict" and "model" (in that order), then at the checkpoint
    itself; a state_dict is a mapping of string keys to tensors. CheckpointError when none is found.
    """
    if isinstance(obj, Mapping):
        for key in STATE_DICT_KEYS:
            if _is_state_dict(obj.get(key)):
                return strip_prefix(obj[key], prefix)
        if _is_state_dict(obj):
            return strip_prefix(obj, prefix)
        keys = ", ".join(repr(k) for k in list(obj)[:10])
        raise CheckpointError(
            f"no state_dict in this checkpoint (keys: {keys}): expected a dict of tensors, or one under "
            f"{', '.join(repr(k) for k in STATE_DICT_KEYS)}"
        )
    raise CheckpointError(f"no state_dict in this checkpoint: it holds a {type(obj).__name__}, not a dict of tensors")


def strip_prefix(state_dict: Mapping[str, Any], prefix: str = "module.") -> OrderedDict[str, Any]:
    """A copy of `state_dict` without `prefix` when every key starts with it (else the same keys, copied).

    Like torch's `consume_prefix_in_state_dict_if_present`, the `_metadata` of a state_dict is kept and
    its keys are stripped too, so `load_state_dict` still sees each module's version.
    """
    strip = bool(prefix) and bool(state_dict) and all(k.startswith(prefix) for k in state_dict)
    out = OrderedDict((k[len(prefix) :] if strip else k, v) for k, v in state_dict.items())
    metadata = getattr(state_dict, "_metadata", None)
    if isinstance(metadata, Mapping):
        bare = prefix.rstrip(".")
        out._metadata = OrderedDict(  # type: ignore[attr-defined]
            (_strip_meta_key(k, prefix, bare) if strip else k, v) for k, v in metadata.items()
        )
    return out


def _strip_meta_key(key: str, prefix: str, bare: str) -> str:
    if key == bare:
        return ""
    return key[len(prefix) :] if key.startswith(prefix) else key
