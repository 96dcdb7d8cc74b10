"""`torch.nn` names that serve.nn does not have (torch.nn itself is serve.nn, these join it under the alias), and
its submodules under torch's names.

    Conv3d      named so that isinstance checks over layer kinds work (transformers' weight init lists it);
                building one says that serve has no 3-D convolution
"""

from __future__ import annotations

from typing import Any

from serve.nn.module import Module


class Conv3d(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("nn.Conv3d is not available on serve (no 3-D convolution): video models do not run")


__all__ = ["Conv3d"]
