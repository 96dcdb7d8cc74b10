"""Loss functions (`F.cross_entropy`, `F.nll_loss`, `F.binary_cross_entropy[_with_logits]`, `F.mse_loss`, ...).

Composed from Tensor ops (so every gradient, input's and target's, comes from autograd), with PyTorch's
arguments, reductions (including the deprecated `size_average`/`reduce`), class weights, `ignore_index`,
label smoothing and error messages.
"""

from __future__ import annotations

import warnings

from serve.nn.functional.activation import log_softmax, logsigmoid
from serve.tensor import dtypes
from serve.tensor.math_ops import where
from serve.tensor.tensor import Tensor


def _legacy_reduction(size_average: bool | None, reduce: bool | None) -> str:
    """PyTorch's mapping of the deprecated size_average/reduce flags onto `reduction`."""
    warnings.warn("size_average and reduce args will be deprecated, please use reduction='...' instead.", stacklevel=3)
    size_average = True if size_average is None else size_average
    if reduce is None or reduce:
        return "mean" if size_average else "sum"
    return "none"


def _reduction(size_average: bool | None, reduce: bool | None, reduction: str, allowed: tuple = ()) -> str:
    if size_average is not None or reduce is not None:
        return _legacy_reduction(size_average, reduce)
    if reduction not in ("none", "mean", "sum") + allowed:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _weighted_mean(loss: Tensor, weight: Tensor | None, reduction: str) -> Tensor:
    """The reduction of `loss * weight`, a weighted mean dividing by the weights' sum (mse_loss, l1_loss)."""
    if weight is None:
        return _reduce(loss, reduction)
    if weight.shape != loss.shape:
        raise ValueError("Weights and input must have the same size.")
    weighted = loss * weight
    return weighted.sum() / weight.sum() if reduction == "mean" else _reduce(weighted, reduction)


def _warn_size(input: Tensor, target: Tensor) -> None:
    if target.shape != input.shape:
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size ({input.shape}). This will "
            "likely lead to incorrect results due to broadcasting. Please ensure they have the same size.",
            stacklevel=3,
        )


# ---- classification over class scores ---------------------------------------------------------------
def _check_class_target(input: Tensor, target: Tensor, weight: Tensor | None) -> int:
    """Validate (N, C, d1, ...) scores against (N, d1, ...) class indices; returns C."""
    if target._dtype not in (dtypes.int64, dtypes.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {target._dtype}")
    if input.ndim >= 2 and (target.ndim == 0 or target.shape[0] != input.shape[0]):
        got = target.shape[0] if target.ndim else 0
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size ({got}).")
    if input.ndim <= 2 and target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input.ndim > 2 and tuple(target.shape[1:]) != tuple(input.shape[2:]):
        raise RuntimeError(f"size mismatch (got input: {list(input.shape)}, target: {list(target.shape)})")
    classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(
            f"weight tensor should be defined either for all {classes} classes or no classes but got weight tensor "
            f"of shape: {list(weight.shape)}"
        )
    return classes


def _picked(input: Tensor, target: Tensor, ignore_index: int, classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """(input at each target class, the non-ignored mask, the targets with ignored ones set to class 0)."""
    valid = target != ignore_index
    safe = where(valid, target.long(), 0)
    out_of_range = (safe < 0).logical_or(safe >= classes)
    if bool(out_of_range.any()):
        raise IndexError(f"Target {int(safe[out_of_range][0])} is out of bounds.")
    dim = 1 if input.ndim >= 2 else 0
    picked = input.gather(dim, safe.unsqueeze(dim)).squeeze(dim)
    return picked, valid, safe


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
             ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean") -> Tensor:  # fmt: skip
    """-weight[target] * input[target] per sample (log-probabilities in, class indices as targets)."""
    reduction = _reduction(size_average, reduce, reduction)
    classes = _check_class_target(input, target, weight)
    picked, valid, safe = _picked(input, target, ignore_index, classes)
    w = valid.to(input.dtype) if weight is None else weight[safe] * valid
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
                  ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:  # fmt: skip
    """log_softmax over the class dim then nll_loss; or, with class probabilities as targets, their cross entropy."""
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 1 if input.ndim >= 2 else 0
    logp = log_softmax(input, class_dim)
    if target.shape == input.shape:
        return _cross_entropy_probs(logp, target, weight, reduction, label_smoothing, class_dim)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing == 0.0:
        return nll
    classes = input.shape[class_dim]
    shape = [1] * input.ndim
    shape[class_dim] = classes
    smooth = -(logp if weight is None else logp * weight.reshape(shape)).sum(class_dim)
    valid = target != ignore_index
    smooth = smooth * valid
    if reduction == "mean":
        denom = valid.sum() if weight is None else (weight[where(valid, target, 0)] * valid).sum()
        smooth = smooth.sum() / denom
    else:
        smooth = _reduce(smooth, reduction)
    return (1 - label_smoothing) * nll + smooth * (label_smoothing / classes)


def _cross_entropy_probs(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str,
                         label_smoothing: float, class_dim: int) -> Tensor:  # fmt: skip
    if not target.is_floating_point():
        raise RuntimeError(f"Expected floating point type for target with class probabilities, got {target._dtype}")
    classes = logp.shape[class_dim]
    if label_smoothing > 0:
        target = target * (1 - label_smoothing) + label_smoothing / classes
    terms = logp * target
    if weight is not None:
        shape = [1] * logp.ndim
        shape[class_dim] = classes
        terms = terms * weight.reshape(shape)
    if reduction == "none":
        return -terms.sum(class_dim)
    total = -terms.sum()
    if reduction == "sum":
        return total
    samples = logp.numel() // classes
    return total / samples if samples else total * float("nan")


# ---- binary classification ----------------------------------------------------------------------------
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         size_average: bool | None = None, reduce: bool | None = None,
                         reduction: str = "mean") -> Tensor:  # fmt: skip
    """-(t log x + (1 - t) log(1 - x)), each log clamped at -100 as in PyTorch; x must be probabilities."""
    reduction = _reduction(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size ({input.shape}) is deprecated. "
            "Please ensure they have the same size."
        )
    for name, t in (("input", input), ("target", target)):
        if t.numel() and not bool(((t >= 0).logical_and(t <= 1)).all()):
            raise RuntimeError(f"all elements of {name} should be between 0 and 1")
    loss = -(target * input.log().clamp(min=-100) + (1 - target) * (1 - input).log().clamp(min=-100))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average: bool | None = None, reduce: bool | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:  # fmt: skip
    """binary_cross_entropy(sigmoid(input), target) computed stably; pos_weight weighs the positive term."""
    reduction = _reduction(size_average, reduce, reduction)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({target.shape}) must be the same as input size ({input.shape})")
    log_weight = 1 if pos_weight is None else (pos_weight - 1) * target + 1
    loss = (1 - target) * input - log_weight * logsigmoid(input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# ---- regression ---------------------------------------------------------------------------------------
def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
             reduction: str = "mean", weight: Tensor | None = None) -> Tensor:  # fmt: skip
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    diff = input - target
    return _weighted_mean(diff * diff, weight, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
            reduction: str = "mean", weight: Tensor | None = None) -> Tensor:  # fmt: skip
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_mean((input - target).abs(), weight, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:  # fmt: skip
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta=0 is the L1 loss."""
    _warn_size(input, target)
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    if beta == 0:
        return _reduce(d, reduction)
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:  # fmt: skip
    """0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    _warn_size(input, target)
    reduction = _reduction(None, None, reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    d = (input - target).abs()
    loss = where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    if weight is not None:  # unlike mse_loss and l1_loss, PyTorch's weighted 'mean' here is a plain mean
        if weight.shape != input.shape:
            raise ValueError("Weights and input must have the same size.")
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:  # fmt: skip
    """target * (log target - input) pointwise (input holds log-probabilities); 'batchmean' divides by the batch."""
    reduction = _reduction(size_average, reduce, reduction, allowed=("batchmean",))
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support size.'batchmean' "
            "divides only by the batch size, and aligns with the KL div math definition.'mean' will be changed to "
            "behave the same as 'batchmean' in the next major release.",
            stacklevel=2,
        )
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # xlogy(target, target): 0 where target is 0, as in PyTorch (a negative target still gives nan)
        loss = target * where(target == 0, 1.0, target).log() - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return _reduce(loss, reduction)
