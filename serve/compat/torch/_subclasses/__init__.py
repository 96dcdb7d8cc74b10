"""`torch._subclasses`: `FakeTensor` for isinstance checks; serve never makes fake tensors, so nothing is one."""

from __future__ import annotations


class FakeTensor:
    """No serve tensor is a FakeTensor."""


class FakeTensorMode:
    """Not available on serve: there is no tracing with fake tensors."""


__all__ = ["FakeTensor", "FakeTensorMode"]
