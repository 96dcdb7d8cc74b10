"""`torch.cuda` names beyond serve.cuda (which `torch.cuda` is under the alias): CUDA graphs and streams, which
libraries reach for only on a GPU path they take when capturing; serve's GPU path is its own, so capturing is
never in progress and making a graph or stream says what to use instead."""

from __future__ import annotations

from typing import Any

_NOT_HERE = "is not available on serve: serve plans and runs its own GPU kernels (serve.inference), not torch's"


def is_current_stream_capturing() -> bool:
    return False


class CUDAGraph:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torch.cuda.CUDAGraph {_NOT_HERE}")


class graph:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torch.cuda.graph {_NOT_HERE}")


class Stream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torch.cuda.Stream {_NOT_HERE}")


class StreamContext:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torch.cuda.StreamContext {_NOT_HERE}")
