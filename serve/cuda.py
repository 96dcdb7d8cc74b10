"""`serve.cuda`: the GPUs CuPy sees, named like `torch.cuda`.

    serve.cuda.is_available()           # False (never an exception) without CuPy or without a visible GPU
    serve.cuda.set_device(1); with serve.cuda.device(0): ...
    serve.cuda.memory_allocated(), serve.cuda.empty_cache(), serve.cuda.set_per_process_memory_fraction(0.5)

Devices: "cuda" means the current device (tensors report its index: `cuda:0`), "cuda:N" device N. Operations run
on the current device, as CuPy's do: a process that computes on `cuda:N` makes N current first (`set_device(N)`,
as the worker does for its `gpu_id`, or `with serve.cuda.device(N):`). Unlike PyTorch, an operation on tensors of
a device that is not current is not switched to it for you.

Nothing here imports cupy until a function is called, so `import serve` stays CPU-only. Without CUDA,
`is_available()` is False and `device_count()` 0; everything else raises RuntimeError saying why.

Memory: tensors live in CuPy's memory pool, which keeps freed blocks for reuse instead of handing them back to
the driver, so `memory_reserved()` (held by the pool) stays above `memory_allocated()` (in use by arrays) after
a peak. `empty_cache()` returns the unused blocks. By default the pool may grow until the GPU is full;
`set_per_process_memory_fraction(f)` caps it at f of the device's memory, after which an allocation that does
not fit raises `cupy.cuda.memory.OutOfMemoryError`, a `MemoryError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from serve.backend import cuda_runtime

__all__ = [
    "current_device", "device", "device_count", "empty_cache", "get_device_capability", "get_device_name",
    "get_device_properties", "is_available", "mem_get_info", "memory_allocated", "memory_reserved", "set_device",
    "set_per_process_memory_fraction", "synchronize",
]  # fmt: skip


def is_available() -> bool:
    return cuda_runtime.unavailable_reason() is None


def device_count() -> int:
    return cuda_runtime.device_count()


def _cupy() -> Any:
    return cuda_runtime.cupy_module()


def _index(dev: Any) -> int:
    """A device index from None (the current device), an int, "cuda:N" or a serve.device."""
    if dev is None:
        return current_device()
    if isinstance(dev, int) and not isinstance(dev, bool):
        index = dev
    else:
        from serve.backend import as_device

        d = as_device(dev)
        if d.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {d}")
        index = current_device() if d.index is None else d.index
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (this process sees {count} device(s))")
    return index


def current_device() -> int:
    return int(_cupy().cuda.runtime.getDevice())


def set_device(dev: Any) -> None:
    """Make `dev` the current device: tensors created on "cuda" without an index and every operation go there."""
    _cupy().cuda.Device(_index(dev)).use()


@contextlib.contextmanager
def device(dev: Any) -> Iterator[None]:
    """`with serve.cuda.device(1): ...` runs the block with device 1 current (None: leave it as it is)."""
    if dev is None or (isinstance(dev, int) and dev < 0):
        yield
        return
    with _cupy().cuda.Device(_index(dev)):
        yield


def get_device_properties(dev: Any = None) -> dict[str, Any]:
    """The CUDA runtime's properties of `dev` (name, totalGlobalMem, major, minor, multiProcessorCount, ...)."""
    props = dict(_cupy().cuda.runtime.getDeviceProperties(_index(dev)))
    name = props.get("name", b"")
    props["name"] = name.decode() if isinstance(name, bytes) else str(name)
    return props


def get_device_name(dev: Any = None) -> str:
    return str(get_device_properties(dev)["name"])


def get_device_capability(dev: Any = None) -> tuple[int, int]:
    props = get_device_properties(dev)
    return int(props["major"]), int(props["minor"])


def synchronize(dev: Any = None) -> None:
    """Wait for every kernel queued on `dev` (default: the current device) to finish."""
    cupy = _cupy()
    with cupy.cuda.Device(_index(dev)):
        cupy.cuda.runtime.deviceSynchronize()


def _pool() -> Any:
    return _cupy().get_default_memory_pool()


def empty_cache() -> None:
    """Give CuPy's cached free blocks (device and pinned host memory) back to the driver."""
    cupy = _cupy()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


def memory_allocated(dev: Any = None) -> int:
    """Bytes held by live arrays on `dev`."""
    with _cupy().cuda.Device(_index(dev)):
        return int(_pool().used_bytes())


def memory_reserved(dev: Any = None) -> int:
    """Bytes CuPy's pool holds on `dev`: live arrays plus freed blocks kept for reuse."""
    with _cupy().cuda.Device(_index(dev)):
        return int(_pool().total_bytes())


def mem_get_info(dev: Any = None) -> tuple[int, int]:
    """(free, total) bytes of `dev` as the driver reports them (the pool's cached blocks count as used)."""
    cupy = _cupy()
    with cupy.cuda.Device(_index(dev)):
        free, total = cupy.cuda.runtime.memGetInfo()
    return int(free), int(total)


def set_per_process_memory_fraction(fraction: float, dev: Any = None) -> None:
    """Cap CuPy's memory pool on `dev` at `fraction` of its total memory; past it allocations raise MemoryError."""
    if not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    with _cupy().cuda.Device(_index(dev)):
        _pool().set_limit(fraction=float(fraction))
