"""`map_location`: which device each loaded storage goes to, with torch.load's rules.

None keeps the device a storage was saved on; a string or `serve.device` sends everything there; a dict maps saved
location tags ("cuda:1") to new ones; a callable gets `(storage, location)` and returns a storage, or None for the
default. serve has no Storage class: the callable receives the storage as a 1-D CPU tensor of its dtype.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from serve.backend import CPU, device, is_available
from serve.errors import CheckpointError
from serve.tensor.creation import from_numpy
from serve.tensor.tensor import Tensor

# the device types torch writes as location tags; anything else in a checkpoint is corruption
_DEVICE_TAG = re.compile(r"^(mps|xpu|hpu|meta|xla|mtia|ipu|lazy|vulkan|ve|maia|privateuseone|hip)(:\d+)?$")
# (storage as a CPU array, its saved location tag) -> (the CPU array to view, the device tensors end up on)
Placement = Callable[[np.ndarray, str], tuple[np.ndarray, device]]


def restore_device(location: str) -> device:
    """The device a location tag names; torch's errors when it cannot be used here."""
    if location == "cpu":
        return CPU
    if location.startswith("cuda"):
        try:
            dev = device(location)
        except RuntimeError:
            raise CheckpointError(f"invalid storage location {location!r} in the checkpoint") from None
        if not is_available("cuda"):
            raise RuntimeError(
                "Attempting to deserialize object on a CUDA device but serve.cuda.is_available() is False. "
                "If you are running on a CPU-only machine, please use serve.load with map_location='cpu' "
                "to map your storages to the CPU."
            )
        return dev
    if not _DEVICE_TAG.match(location):
        raise CheckpointError(f"invalid storage location {location!r:.40} in the checkpoint")
    raise RuntimeError(
        f"don't know how to restore data location of a storage tagged with {location!r}; "
        "pass map_location='cpu' (or a dict/callable) to choose a device serve supports"
    )


def placement(map_location: Any) -> Placement:
    """The function that places each storage, built once per load from `map_location`."""
    if map_location is None:
        return lambda arr, loc: (arr, restore_device(loc))
    if isinstance(map_location, (str, bytes, device)):
        target = restore_device(_tag(map_location))
        return lambda arr, loc: (arr, target)
    if isinstance(map_location, dict):
        table = {_tag(k): _tag(v) for k, v in map_location.items()}
        return lambda arr, loc: (arr, restore_device(table.get(loc, loc)))
    if callable(map_location):
        return lambda arr, loc: _call_user(map_location, arr, loc)
    raise TypeError(
        "map_location should be None, a string, a serve.device, a dict or a callable, "
        f"got {type(map_location).__name__}"
    )


def _tag(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("ascii")
    if isinstance(value, (str, device)):
        return str(value)
    raise TypeError(f"map_location entries must be strings or serve.device, got {type(value).__name__}")


def _call_user(fn: Callable[..., Any], arr: np.ndarray, location: str) -> tuple[np.ndarray, device]:
    result = fn(from_numpy(arr), location)
    if result is None:
        return arr, restore_device(location)
    if not isinstance(result, Tensor) or result.shape != (arr.shape[0],) or result.dtype.np != arr.dtype:
        raise TypeError(
            "a map_location callable must return the storage it was given (a 1-D tensor of the same size and dtype, "
            f"possibly moved) or None; got {result!r:.80}"
        )
    if result.device.type == "cpu":
        return result.numpy(force=True), CPU
    return arr, result.device
