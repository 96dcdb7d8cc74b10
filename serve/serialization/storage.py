"""Storages and the tensors that view them: PyTorch's `_rebuild_tensor*` and `_rebuild_parameter*`, on numpy.

A storage is one flat array of one dtype; a tensor is (storage, offset, size, stride) into it, all counted in
elements. Tensors rebuilt from one storage are numpy views of one array, so tied weights stay tied. Every offset,
size and stride is checked against the storage before a view is made, and a view that repeats elements (zero
strides) may claim at most MAX_REPEATED_BYTES.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from serve.backend import CPU, device
from serve.errors import CheckpointError
from serve.nn.parameter import Parameter
from serve.serialization.location import Placement
from serve.tensor import dtypes
from serve.tensor.creation import from_numpy
from serve.tensor.dtypes import dtype
from serve.tensor.tensor import Tensor

# torch's legacy storage class names, as `torch.save` writes them (GLOBAL 'torch FloatStorage')
STORAGE_DTYPES: dict[str, dtype] = {
    "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool, "ComplexFloatStorage": dtypes.complex64,
    "ComplexDoubleStorage": dtypes.complex128, "UntypedStorage": dtypes.uint8,
}  # fmt: skip
# torch dtype attribute names (GLOBAL 'torch float32'), aliases included
TORCH_DTYPES: dict[str, dtype] = {d.name: d for d in dtypes.ALL} | {
    "float": dtypes.float32, "double": dtypes.float64, "half": dtypes.float16, "long": dtypes.int64,
    "int": dtypes.int32, "short": dtypes.int16, "cfloat": dtypes.complex64, "cdouble": dtypes.complex128,
}  # fmt: skip
_MAX_DIM = 1 << 62
# A view may repeat its storage's elements (zero strides, as torch saves an expanded tensor), but not to more than
# this many bytes: a 100-byte file could otherwise hand out a tensor of terabytes that the first copy allocates.
MAX_REPEATED_BYTES = 1 << 30
_MAX_NDIM = 64  # numpy's limit; checked first, so a huge memoized size list costs nothing per tensor


class StorageType:
    """What `torch.FloatStorage` and friends unpickle to: only a dtype."""

    __slots__ = ("dtype", "name")

    def __init__(self, name: str) -> None:
        self.name, self.dtype = name, STORAGE_DTYPES[name]

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Storage:
    """One loaded storage: a flat CPU array of its dtype, and the device its tensors go to."""

    __slots__ = ("array", "device", "dtype", "key")

    def __init__(self, key: str, dt: dtype, array: np.ndarray, dev: device) -> None:
        self.key, self.dtype, self.array, self.device = key, dt, array, dev


def ascii_str(value: Any) -> str:
    """A string field of a storage record (Python 2 checkpoints may hold it as bytes)."""
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    if isinstance(value, str):
        return value
    raise CheckpointError(f"expected a string in a storage record, got {type(value).__name__}")


def make_storage(key: str, dt: dtype, raw: np.ndarray, byteorder: str, location: str, place: Placement) -> Storage:
    """A Storage over the raw bytes `raw` (uint8), in native byte order, placed by map_location."""
    if raw.nbytes % dt.itemsize:
        raise CheckpointError(f"storage {key!r} holds {raw.nbytes} bytes, not a whole number of {dt.name} elements")
    if raw.__array_interface__["data"][0] % dt.itemsize:
        raw = raw.copy()  # an unaligned record (not written by torch.save): one copy beats slow unaligned math
    arr = raw.view(dt.np)
    if byteorder != sys.byteorder and dt.itemsize > 1:
        arr.byteswap(inplace=True)  # the bytes are our own copy or a private (copy-on-write) mapping
    arr, dev = place(arr, location)
    return Storage(key, dt, arr, dev)


def _dims(value: Any, what: str) -> tuple[int, ...]:
    if isinstance(value, (tuple, list)) and len(value) <= _MAX_NDIM:
        for v in value:
            if type(v) is not int or v < 0 or v >= _MAX_DIM:
                break
        else:
            return tuple(value)
    raise CheckpointError(f"invalid tensor {what} {value!r:.100} in the checkpoint")


def _is_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def view_storage(storage: Any, offset: Any, size: Any, stride: Any, dt: dtype | None = None) -> np.ndarray:
    """The numpy view of `storage` that a tensor with this offset, size and stride is (all in elements)."""
    if type(storage) is not Storage:
        raise CheckpointError(f"a tensor's storage must be a storage record, got {type(storage).__name__}")
    size, stride = _dims(size, "size"), _dims(stride, "stride")
    if len(size) != len(stride) or type(offset) is not int or offset < 0:
        raise CheckpointError(f"invalid tensor geometry: offset {offset!r}, size {size}, stride {stride}")
    arr = storage.array
    if dt is not None and dt is not storage.dtype:  # _rebuild_tensor_v3: an untyped (byte) storage
        if storage.dtype is not dtypes.uint8 or arr.nbytes % dt.itemsize:
            raise CheckpointError(f"cannot view a {storage.dtype.name} storage as {dt.name}")
        arr = arr.view(dt.np)
    numel = 1
    for n in size:
        numel *= n
    if numel == 0:
        return arr[:0].reshape(size)
    extent = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    if extent > arr.shape[0]:
        raise CheckpointError(
            f"a tensor of size {list(size)}, stride {list(stride)} at offset {offset} needs {extent} elements "
            f"but its storage {storage.key!r} has only {arr.shape[0]}"
        )
    if numel > extent - offset and numel * arr.itemsize > MAX_REPEATED_BYTES:
        raise CheckpointError(
            f"a tensor of size {list(size)}, stride {list(stride)} repeats {extent - offset} elements of its storage "
            f"{storage.key!r} (zero strides) into {numel * arr.itemsize} bytes, more than the {MAX_REPEATED_BYTES} a "
            "checkpoint's view may claim: save the tensor itself (t.contiguous()) instead of an expanded view"
        )
    if _is_contiguous(size, stride):
        return arr[offset : offset + numel].reshape(size)
    item = arr.itemsize
    return np.ndarray(size, arr.dtype, buffer=arr, offset=offset * item, strides=[s * item for s in stride])


def finish_tensor(arr: np.ndarray, storage: Storage, requires_grad: Any = False) -> Tensor:
    """The serve tensor over a view of `storage`, on the storage's target device."""
    t = from_numpy(arr)
    if storage.device != CPU:
        t = t.to(storage.device)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _no_metadata(metadata: Any) -> None:
    if metadata:  # {'conj': True} / {'neg': True}: lazily conjugated or negated views
        raise CheckpointError(
            f"tensors with lazy conj/neg bits ({metadata!r:.60}) are not supported: save t.resolve_conj().resolve_neg()"
        )


def rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any) -> Tensor:
    return finish_tensor(view_storage(storage, storage_offset, size, stride), storage, False)


def rebuild_tensor_v2(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any,
                      backward_hooks: Any, metadata: Any = None) -> Tensor:  # fmt: skip
    _no_metadata(metadata)
    return finish_tensor(view_storage(storage, storage_offset, size, stride), storage, requires_grad)


def rebuild_tensor_v3(storage: Any, storage_offset: Any, size: Any, stride: Any, requires_grad: Any,
                      backward_hooks: Any, dt: Any, metadata: Any = None) -> Tensor:  # fmt: skip
    _no_metadata(metadata)
    if not isinstance(dt, dtype):
        raise CheckpointError(f"_rebuild_tensor_v3 expects a dtype, got {type(dt).__name__}")
    return finish_tensor(view_storage(storage, storage_offset, size, stride, dt), storage, requires_grad)


def rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Parameter:
    if not isinstance(data, Tensor):
        raise CheckpointError(f"_rebuild_parameter expects a tensor, got {type(data).__name__}")
    return Parameter(data, bool(requires_grad))


def rebuild_parameter_with_state(data: Any, requires_grad: Any, backward_hooks: Any, state: Any) -> Parameter:
    # Python attributes set on a Parameter (its `state`) are dropped: a state_dict needs only the data
    return rebuild_parameter(data, requires_grad, backward_hooks)
