"""Devices and the registry that maps each device type to the module implementing its primitives.

A backend module (`ops_cpu` over numpy, later `ops_cuda` over CuPy) implements the small primitive set
listed in `ops_cpu.__all__` and nothing else; everything above it is written once for all devices.
The CUDA backend is imported only when a CUDA device is first asked for, so CPU installs never import cupy.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from serve.backend.device import CPU, as_device, device

__all__ = ["CPU", "as_device", "device", "get_ops", "is_available", "register"]

_MODULES: dict[str, str] = {"cpu": "serve.backend.ops_cpu"}
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
            f"{dev.type.upper()} is not available: serve's CUDA backend is not built into this version. "
            "Use device='cpu'."
        )
    ops = _loaded[dev.type] = importlib.import_module(name)
    return ops
