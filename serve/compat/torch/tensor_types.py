"""The torch names around tensors that compute nothing: the legacy typed-tensor classes, the storage-only dtypes,
memory formats and the default device.

    torch.LongTensor([1, 2])        a tensor of that dtype from data (torch.LongTensor(2, 3): uninitialised 2x3)
    isinstance(t, torch.FloatTensor) True for a float32 serve tensor (CPU or GPU: serve has one Tensor class)
    torch.float8_e4m3fn, float8_e5m2, uint16, uint32, uint64   dtypes (ml_dtypes / numpy storage), for the
                                    dtype tables libraries build; serve computes in its own dtypes
    torch.contiguous_format, preserve_format, channels_last    markers: serve's tensors are contiguous
    torch.get_default_device()      cpu
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from serve.backend.device import CPU, device
from serve.tensor import creation, dtypes
from serve.tensor.tensor import Tensor

float8_e4m3fn = dtypes.dtype("float8_e4m3fn", ml_dtypes.float8_e4m3fn, dtypes._FLOAT, True)
float8_e5m2 = dtypes.dtype("float8_e5m2", ml_dtypes.float8_e5m2, dtypes._FLOAT, True)
uint16 = dtypes.dtype("uint16", np.uint16, dtypes._INT, False)
uint32 = dtypes.dtype("uint32", np.uint32, dtypes._INT, False)
uint64 = dtypes.dtype("uint64", np.uint64, dtypes._INT, False)


class memory_format:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")


def get_default_device() -> device:
    return CPU


class _LegacyType(type):
    """The metaclass of torch.FloatTensor and friends: isinstance checks the dtype, calling makes a tensor."""

    dtype: dtypes.dtype

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype

    def __call__(cls, *args: Any) -> Tensor:
        if args and all(isinstance(a, int) for a in args):
            return creation.empty(args, dtype=cls.dtype)  # torch.FloatTensor(2, 3): a 2x3 tensor
        return creation.tensor(args[0] if args else [], dtype=cls.dtype)


def _legacy(name: str, dt: dtypes.dtype) -> type:
    return _LegacyType(name, (), {"dtype": dt, "__module__": "torch"})


BoolTensor = _legacy("BoolTensor", dtypes.bool)
ByteTensor = _legacy("ByteTensor", dtypes.uint8)
CharTensor = _legacy("CharTensor", dtypes.int8)
ShortTensor = _legacy("ShortTensor", dtypes.int16)
IntTensor = _legacy("IntTensor", dtypes.int32)
LongTensor = _legacy("LongTensor", dtypes.int64)
HalfTensor = _legacy("HalfTensor", dtypes.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", dtypes.bfloat16)
FloatTensor = _legacy("FloatTensor", dtypes.float32)
DoubleTensor = _legacy("DoubleTensor", dtypes.float64)
