"""`torch._subclasses.fake_tensor`: the same names as torch._subclasses."""

from serve.compat.torch._subclasses import FakeTensor, FakeTensorMode

__all__ = ["FakeTensor", "FakeTensorMode"]
