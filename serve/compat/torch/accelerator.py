"""`torch.accelerator`: torch's device-generic accelerator API. serve's GPUs are reached through `serve.cuda`
(`torch.cuda` under the alias); here there is no current accelerator, so libraries fall back to the CPU path."""

from __future__ import annotations

from typing import Any


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def current_accelerator(check_available: bool = False) -> Any:
    return None


def synchronize(device: Any = None) -> None:
    """Nothing to wait for on the CPU."""
