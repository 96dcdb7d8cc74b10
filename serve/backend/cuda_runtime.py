"""Whether CUDA can be used, asked lazily: this module never imports cupy until a function here is called.

`serve.cuda` and `ops_cuda` ask here. The answer is cached: CUDA devices do not appear in a running process.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType

INSTALL_HINT = "install CuPy with `pip install 'serve[gpu]'` (cupy-cuda13x 14 or later)"


@functools.cache
def unavailable_reason() -> str | None:
    """None when CuPy is installed and sees at least one device, else a sentence saying why not and what to do."""
    try:
        import cupy
    except ImportError as e:
        return f"CuPy is not installed ({e}); {INSTALL_HINT}"
    except Exception as e:  # a broken install (missing CUDA libraries, ...): still an answer, never a crash
        return f"CuPy failed to import ({type(e).__name__}: {e}); reinstall it: {INSTALL_HINT}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError: no driver, a driver older than CuPy's CUDA, no device
        return f"no CUDA device is usable ({e}); check the NVIDIA driver and CUDA_VISIBLE_DEVICES{_visible()}"
    if count == 0:
        return f"no CUDA device is visible{_visible()}"
    return None


def _visible() -> str:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if value is None else f" (CUDA_VISIBLE_DEVICES={value!r})"


def device_count() -> int:
    if unavailable_reason() is not None:
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def require() -> None:
    """Raise RuntimeError("CUDA is not available: <why>") unless a CUDA device can be used."""
    why = unavailable_reason()
    if why is not None:
        raise RuntimeError(f"CUDA is not available: {why}. Use device='cpu'.")


def cupy_module() -> ModuleType:
    """The cupy module, for `serve.cuda` (which never imports it itself); RuntimeError saying why without CUDA."""
    require()
    import cupy

    return cupy
