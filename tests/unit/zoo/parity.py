"""Helpers for the zoo parity tests: copy a torch twin's weights into a serve model, compare outputs."""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from tests.helpers import to_numpy


def randomize_norms(model: Any, seed: int = 0) -> None:
    """Give the torch twin's BatchNorm/LayerNorm non-trivial affine parameters and running statistics."""
    import torch

    norms = {name for name, m in model.named_modules() if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.LayerNorm))}
    g = torch.Generator().manual_seed(seed)
    fills = {
        "weight": lambda s: torch.rand(s, generator=g) + 0.5,
        "bias": lambda s: torch.randn(s, generator=g) * 0.1,
        "running_mean": lambda s: torch.randn(s, generator=g) * 0.1,
        "running_var": lambda s: torch.rand(s, generator=g) + 0.5,
        "num_batches_tracked": lambda s: torch.full(s, 7),
    }
    with torch.no_grad():
        for key, t in model.state_dict(keep_vars=True).items():
            owner, _, leaf = key.rpartition(".")
            if owner in norms:
                t.copy_(fills[leaf](t.shape))


def copy_weights(src: Any, dst: serve.nn.Module) -> None:
    """Same keys in the same order, then a strict load of the torch twin's tensors into the serve model."""
    theirs = src.state_dict()
    assert list(dst.state_dict().keys()) == list(theirs.keys())
    missing, unexpected = dst.load_state_dict(
        {k: serve.from_numpy(v.detach().numpy().copy()) for k, v in theirs.items()}, strict=True
    )
    assert not missing and not unexpected


def assert_rel_close(ours: Any, ref: Any, rtol: float = 1e-4) -> None:
    """Max |ours - ref| at most rtol times the largest |ref| (logits cross zero, so not elementwise)."""
    a, b = to_numpy(ours).astype(np.float64), to_numpy(ref).astype(np.float64)
    assert a.shape == b.shape, f"shape {a.shape} != reference {b.shape}"
    scale = float(np.abs(b).max()) or 1.0
    err = float(np.abs(a - b).max()) / scale
    assert err <= rtol, f"max error {err:.3g} of the largest |value| {scale:.3g} exceeds {rtol}"
