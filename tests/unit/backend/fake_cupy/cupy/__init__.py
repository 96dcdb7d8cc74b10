"""A numpy stand-in for CuPy: just enough of its API to run serve's CUDA backend glue on a CPU-only machine.

Used only by `check_ops_cuda.py` (run in a subprocess by test_ops_cuda_cpu_side.py, with this folder first on
sys.path): `ops_cuda`, `cuda_nn` and `cuda_conv` then run against `ops_cpu` through the GPU parity table, and
zoo models run on "cuda". It checks the backend's own logic (shapes, dtypes, argument plumbing, fallbacks), not
CuPy's or the kernels' numerics: those are checked on a GPU by tests/gpu.
"""

import functools

import numpy as np


class _Device:
    def __init__(self, i=0):
        self.id = 0 if i is None else int(i)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def use(self):
        pass


class ndarray(np.ndarray):
    """A numpy array with CuPy's device-side extras (`device`, `get`, `set`)."""

    @property
    def device(self):
        return _Device(0)

    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            out[...] = np.asarray(self)
            return out
        return np.array(np.asarray(self))

    def set(self, arr, stream=None):
        self[...] = arr


def _device_result(r):
    """CuPy returns its arrays (0-d ones for scalars) where numpy returns numpy arrays and scalars."""
    if isinstance(r, np.ndarray) and not isinstance(r, ndarray):
        return r.view(ndarray)
    if isinstance(r, tuple):
        return tuple(_device_result(x) for x in r)
    if isinstance(r, list):
        return [_device_result(x) for x in r]
    if isinstance(r, np.generic):
        return np.asarray(r).view(ndarray)
    return r


def _wrap(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _device_result(fn(*args, **kwargs))

    return wrapper


_NAMES = """negative absolute abs exp log log1p expm1 sqrt sin cos tan tanh sign floor ceil trunc around reciprocal
isnan isinf isfinite logical_not invert add subtract multiply true_divide divide floor_divide remainder power maximum
minimum fmax equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor bitwise_and
bitwise_or bitwise_xor clip where copyto sum prod amax amin argmax argmin any all cumsum cumprod matmul einsum reshape
moveaxis transpose broadcast_to flip roll tril triu take_along_axis nonzero concatenate stack take empty zeros full
eye arange ascontiguousarray shares_memory expand_dims searchsorted bincount argsort indices""".split()  # noqa: SIM905
for _name in _NAMES:
    globals()[_name] = _wrap(getattr(np, _name))


def asarray(a, dtype=None):
    return np.array(a, dtype=dtype).view(ndarray)  # a host -> device copy


def asnumpy(a):
    return np.array(np.asarray(a))


from cupy import cuda  # noqa: E402, F401
