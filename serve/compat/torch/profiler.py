"""`torch.profiler`: `record_function` and `profile` as no-ops (TorchServe's mnist handler imports them; serve's
own timing is its metrics), so a handler that profiles runs unchanged and records nothing."""

from __future__ import annotations

from typing import Any


class record_function:
    def __init__(self, name: str, args: str | None = None) -> None:
        self.name = name

    def __enter__(self) -> record_function:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, fn: Any) -> Any:
        return fn


class profile:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __enter__(self) -> profile:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def step(self) -> None:
        """Nothing recorded."""

    def key_averages(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


class ProfilerActivity:
    CPU = "CPU"
    CUDA = "CUDA"


def schedule(*args: Any, **kwargs: Any) -> Any:
    return lambda step: None
