"""Dropout: `F.dropout` (elementwise) and `F.dropout1d/2d/3d` (whole channels), with PyTorch's 1/(1-p) scaling.

Not training (or p == 0) returns the input unchanged. The mask comes from serve's default random stream.
"""

from __future__ import annotations

import warnings

from serve.tensor.random import default_generator
from serve.tensor.tensor import Tensor, _make


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input: Tensor, p: float, mask_shape: tuple[int, ...], inplace: bool) -> Tensor:
    """input * (a Bernoulli(1-p) mask of `mask_shape`, scaled by 1/(1-p)), broadcast over the rest."""
    ops = input._ops
    data = ops.dropout_mask(default_generator._state, mask_shape, 1.0 - p, input._dtype.np)
    mask = _make(data, input._dtype, input._device, ops)
    return input.mul_(mask) if inplace else input * mask


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (identity unless training)."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    return _apply_mask(input, p, tuple(input.shape), inplace)


def _feature_dropout(input: Tensor, p: float, training: bool, inplace: bool) -> Tensor:
    """Drop whole channels: one mask value per (N, C), broadcast over the remaining dims."""
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    if not training or p == 0.0:
        return input
    return _apply_mask(input, p, tuple(input.shape[:2]) + (1,) * (input.ndim - 2), inplace)


def _unbatched_feature_dropout(input: Tensor, p: float, training: bool, inplace: bool, batched: bool) -> Tensor:
    if batched:
        return _feature_dropout(input, p, training, inplace)
    if not training or p == 0.0:
        return input
    # an unbatched (C, ...) input is one sample: one mask value per channel
    return _apply_mask(input, p, (input.shape[0],) + (1,) * (input.ndim - 1), inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel dropout for (N, C, L) or (C, L) inputs."""
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that dropout1d exists to "
            "provide channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, and an optional "
            "batch dimension (i.e. 2D or 3D inputs)."
        )
    return _unbatched_feature_dropout(input, p, training, inplace, batched=input.ndim == 3)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel dropout for (N, C, H, W) inputs; a 3-D input is read as (N, C, L), as PyTorch still does."""
    _check_p(p)
    if input.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and will result in an "
            "error in a future release. To retain the behavior and silence this warning, please use dropout instead. "
            "Note that dropout2d exists to provide channel-wise dropout on inputs with 2 spatial dimensions, a "
            "channel dimension, and an optional batch dimension (i.e. 3D or 4D inputs).",
            stacklevel=2,
        )
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior is "
            "desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior will "
            "change in a future release to interpret the input as one without a batch dimension, i.e. shape "
            "(C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel dropout for (N, C, D, H, W) or (C, D, H, W) inputs."""
    _check_p(p)
    if input.ndim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and will result in an "
            "error in a future release. To retain the behavior and silence this warning, please use dropout instead. "
            "Note that dropout3d exists to provide channel-wise dropout on inputs with 3 spatial dimensions, a "
            "channel dimension, and an optional batch dimension (i.e. 4D or 5D inputs).",
            stacklevel=2,
        )
    return _unbatched_feature_dropout(input, p, training, inplace, batched=input.ndim == 5)
