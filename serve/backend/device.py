"""`serve.device`: where a tensor lives, named like `torch.device` ("cpu", "cuda", "cuda:1").

`device("meta")` exists because libraries build models under `with torch.device("meta"):` (transformers builds
there, skips initialising what it will load, then loads the weights) and compare devices against it. serve has no
storage-less tensors: a "meta" tensor is a CPU tensor that reports `device(type='meta')` (its primitives are the
CPU's), so building under the meta context allocates what torch would not, and nothing else changes.

`with device("cpu")` / `with device("meta")`: tensors made without a device inside the block are made there
(`as_device(None)`), as under torch's device context. A CUDA default-device context is refused with what to do
instead (build on the CPU and call .to("cuda")). The context is process-wide, not per thread.
"""

from __future__ import annotations

from typing import Any


class device:
    """A device type plus an optional index: `device("cpu")`, `device("cuda:0")`, `device("cuda", 1)`."""

    __slots__ = ("index", "type")
    type: str
    index: int | None

    def __init__(self, type: Any, index: int | None = None) -> None:
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        elif not isinstance(type, str):
            raise TypeError(f"device() expects a string like 'cpu' or 'cuda:0', got {type!r}")
        if ":" in type:
            type, _, idx = type.partition(":")
            if index is not None or not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}:{idx}'; expected 'cpu', 'cuda' or 'cuda:N'")
            index = int(idx)
        if type not in ("cpu", "cuda", "meta"):
            raise RuntimeError(f"Expected one of cpu, cuda, meta device type at start of device string: {type}")
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self.type = type
        self.index = index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and self.type == other.type and self.index == other.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __enter__(self) -> device:
        if self.type == "cuda":
            raise RuntimeError(
                f"'with device({str(self)!r})' is not supported: serve has no default-device context for CUDA; "
                "build the model on the CPU and call .to('cuda')"
            )
        _context.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _context.pop()

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"


CPU = device("cpu")
_context: list[device] = []  # the devices of the `with device(...)` blocks being run, innermost last


def as_device(value: Any) -> device:
    """A `device` from a device, a string or a CUDA index; for None the `with device(...)` block's, else cpu."""
    if value is None:
        return _context[-1] if _context else CPU
    if isinstance(value, device):
        return value
    return device(value)
