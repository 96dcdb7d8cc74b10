"""`serve.cuda`: whether a CUDA device can be used (`serve.cuda.is_available()`), like `torch.cuda`.

The CUDA backend itself is a later piece of work; until it is registered, CUDA is reported unavailable and
moving a tensor to "cuda" raises a RuntimeError that says so.
"""

from serve import backend


def is_available() -> bool:
    return backend.is_available("cuda")


def device_count() -> int:
    return 1 if is_available() else 0
