"""Devices and the registry that maps each device type to the module implementing its primitives.

A backend module (`ops_cpu` over numpy, `ops_cuda` over CuPy) implements the small primitive set listed in
`ops_cpu.__all__` and nothing else; everything above it is written once for all devices.
The CUDA backend is imported only when a CUDA device is first asked for, so CPU installs never import cupy.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from serve.backend.cuda_runtime import INSTALL_HINT
from serve.backend.device import CPU, as_device, device

__all__ = ["CPU", "as_device", "device", "get_ops", "is_available", "placed", "register"]

# "meta" tensors are CPU tensors under another name (device.py: serve has no storage-less tensors)
_MODULES: dict[str, str] = {
    "cpu": "serve.backend.ops_cpu",
    "cuda": "serve.backend.ops_cuda",
    "meta": "serve.backend.ops_cpu",
}
_loaded: dict[str, ModuleType] = {}


def register(device_type: str, module_name: str) -> None:
    """Name the module that implements `device_type`'s primitives; it is imported on first use."""
    _MODULES[device_type] = module_name
    _loaded.pop(device_type, None)


def is_available(device_type: str) -> bool:
    try:
        get_ops(device(device_type))
    except RuntimeError:
        return False
    return True


def get_ops(dev: device) -> ModuleType:
    """The primitive module for `dev`; RuntimeError saying what to install when that backend is absent."""
    ops = _loaded.get(dev.type)
    if ops is not None:
        return ops
    name = _MODULES.get(dev.type)
    if name is None:
        raise RuntimeError(
            f"{dev.type.upper()} is not available: serve's {dev.type} backend is not registered. Use device='cpu'."
        )
    try:
        ops = importlib.import_module(name)
    except ImportError as e:
        if (e.name or "").split(".")[0] not in ("cupy", "cupyx", "cupy_backends"):
            raise
        raise RuntimeError(
            f"{dev.type.upper()} is not available: CuPy is not installed ({e}); {INSTALL_HINT}, or use device='cpu'."
        ) from None
    _loaded[dev.type] = ops
    return ops


def placed(value: Any) -> tuple[device, ModuleType]:
    """(the device `value` names, with the current CUDA device's index when it gives none; its primitive module).

    PyTorch reports `torch.zeros(2, device="cuda").device` as `cuda:0`: tensors always carry a concrete index.
    """
    dev = as_device(value)
    ops = get_ops(dev)
    if dev.index is None and dev.type == "cuda":
        dev = device(dev.type, ops.current_device())
    return dev, ops
