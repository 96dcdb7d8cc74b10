"""`torch.autograd.graph`: `save_on_cpu` moves saved activations to the CPU while training; serve keeps no
activations for backward when serving, so it is a context that changes nothing."""

from __future__ import annotations

from typing import Any


class save_on_cpu:
    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        self.pin_memory = pin_memory

    def __enter__(self) -> save_on_cpu:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
