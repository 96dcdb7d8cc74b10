"""`multinomial`: category indices drawn from rows of weights (GPT-style sampling), seeded by serve's generator.

Composed from tensor ops on the input's device (no host round trip, no new primitive):
- with replacement, inverse CDF: one uniform u per sample, the index is the number of CDF entries <= u
  (a (rows, samples, categories) comparison, fine for the sample counts sampling uses);
- without replacement, exponential keys -log(1-u)/w and the num_samples smallest (ties: lowest index first).
  This is the law of drawing one at a time without putting back; zero weights get infinite keys, so they come
  last, which is what torch returns when there are fewer positive weights than samples.
The stream is serve's (reproducible under manual_seed / a Generator), not torch's.
"""

from __future__ import annotations

from typing import Any

from serve.tensor import dtypes
from serve.tensor.math_ops import isfinite
from serve.tensor.random import Generator, rand
from serve.tensor.reduce_ops import cumsum
from serve.tensor.shape_ops import reshape, unsqueeze
from serve.tensor.sorting import argsort
from serve.tensor.tensor import Tensor


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator: Generator | None = None,
                out: Any = None) -> Tensor:  # fmt: skip
    """Indices drawn from the rows of `input` (non-negative weights, 1-D or 2-D): int64 of shape (num_samples,)
    or (rows, num_samples); without replacement the indices of one row are distinct."""
    if out is not None:
        raise TypeError("multinomial(out=...) is not supported: use the returned tensor")
    _check(input, num_samples, replacement)
    categories = input.shape[-1]
    w = reshape(input.detach().double(), (-1, categories))  # (rows, categories)
    rows = w.shape[0]
    if replacement:
        cdf = cumsum(w, 1)
        cdf = cdf / cdf[:, -1:]  # (rows, categories), last column 1
        u = rand((rows, num_samples), generator=generator, dtype=dtypes.float64, device=input.device)
        below = unsqueeze(cdf, 1) <= unsqueeze(u, 2)  # (rows, samples, categories)
        picks = below.sum(-1).clamp(max=categories - 1)
    else:
        u = rand((rows, categories), generator=generator, dtype=dtypes.float64, device=input.device)
        keys = (-(1 - u).log() / w.clamp(min=1e-300)).masked_fill(w <= 0, float("inf"))  # (rows, categories)
        picks = argsort(keys, dim=1, stable=True)[:, :num_samples]
    return reshape(picks.long(), (*input.shape[:-1], num_samples))


def _check(input: Tensor, num_samples: int, replacement: bool) -> None:
    """torch's refusals, with its messages."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {input.ndim}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {input.dtype}")
    if num_samples <= 0:
        raise RuntimeError(f"cannot sample n_sample <= 0 samples, got {num_samples}")
    if not replacement and num_samples > input.shape[-1]:
        raise RuntimeError(f"cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                           f"({num_samples} > {input.shape[-1]})")  # fmt: skip
    if bool((input < 0).any()) or not bool(isfinite(input).all()):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if bool((input.sum(-1) <= 0).any()):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
