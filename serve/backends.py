"""`serve.backends`: PyTorch's `torch.backends` switches that matter to serve's CUDA backend.

    serve.backends.cuda.matmul.allow_tf32 = True   # float32 matmul may use TF32 (default False: strict FP32)
    serve.backends.cudnn.allow_tf32 = False        # float32 convolutions strict FP32 (default True: TF32)

The CPU backend ignores them. The values live in `serve.backend.flags`, read by every GPU matrix product.
`serve.backends.mps.is_available()` is False: serve has no Metal backend (libraries probe it to pick a device).
"""

from __future__ import annotations

from typing import Any

from serve.backend import flags as _flags

__all__ = ["cuda", "cudnn", "mps"]


class _Flag:
    """A class attribute that reads and writes one name of `serve.backend.flags`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> bool:
        return bool(getattr(_flags, self.name))

    def __set__(self, obj: Any, value: bool) -> None:
        setattr(_flags, self.name, bool(value))


class _Matmul:
    allow_tf32 = _Flag("matmul_allow_tf32")

    def __repr__(self) -> str:
        return f"serve.backends.cuda.matmul(allow_tf32={self.allow_tf32})"


class _Cuda:
    matmul = _Matmul()

    @staticmethod
    def is_built() -> bool:
        """True: serve always ships its CUDA backend (whether a GPU can run it: `serve.cuda.is_available()`)."""
        return True


class _Cudnn:
    allow_tf32 = _Flag("conv_allow_tf32")
    enabled = True
    benchmark = False  # accepted for PyTorch code that sets them; serve's convolutions do not read them
    deterministic = False

    @staticmethod
    def is_available() -> bool:
        return False  # serve's convolutions are its own im2col + cuBLAS, not cuDNN


class _Mps:
    """Apple's Metal backend, which serve does not have (libraries probe it to pick a device)."""

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def is_built() -> bool:
        return False


cuda = _Cuda()
cudnn = _Cudnn()
mps = _Mps()
