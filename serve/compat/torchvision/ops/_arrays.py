"""Moving ops' tensors to numpy and back: the ops compute on the arrays and answer on the input's device/dtype."""

from __future__ import annotations

from typing import Any

import numpy as np

import serve


def array(t: Any, name: str, arg: str) -> np.ndarray:
    if not isinstance(t, serve.Tensor):
        raise TypeError(f"{name}: {arg} should be a tensor, got {type(t).__name__}")
    return t.detach().cpu().numpy()


def tensor(arr: np.ndarray, like: serve.Tensor) -> serve.Tensor:
    out = serve.from_numpy(np.ascontiguousarray(arr))
    return out if str(like.device) == "cpu" else out.to(like.device)


def boxes_array(boxes: Any, name: str) -> np.ndarray:
    arr = array(boxes, name, "boxes")
    if arr.ndim != 2 or arr.shape[-1] != 4:
        raise ValueError(f"{name}: boxes should be of shape (N, 4) as (x1, y1, x2, y2), got {tuple(arr.shape)}")
    return arr
