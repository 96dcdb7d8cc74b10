"""Build the real torchvision model and serve's twin with the same weights, for the torchvision.models tests.

torchvision's model is made on the meta device (no init cost), materialized and filled with seeded values sized
so activations stay O(1) through deep stacks: conv/linear weights N(0, 1/fan_in), norm weights U(0.5, 1.5),
biases and running means N(0, 0.1), running variances U(0.5, 1.5). serve's twin takes that state_dict strictly.
`cheap_init` turns serve's random initializers into no-ops, for tests that only read keys and shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import serve
from tests.torchvision_reference import reference_torchvision
from tests.unit.zoo.parity import assert_rel_close

_COMPUTED = {"relative_position_index", "relative_coords_table"}


def fill_(model: Any, seed: int = 0) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, t in model.state_dict(keep_vars=True).items():
            leaf = key.rsplit(".", 1)[-1]
            if leaf in _COMPUTED or (not t.is_floating_point() and leaf != "num_batches_tracked"):
                continue  # buffers the model computes (Swin's relative positions), checked on their own
            if leaf == "num_batches_tracked":
                t.fill_(7)
            elif leaf == "running_var" or (leaf == "weight" and t.dim() == 1):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif t.dim() <= 1:
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            else:
                fan_in = t.numel() // t.shape[0]
                t.copy_(torch.randn(t.shape, generator=g) / fan_in**0.5)
    return model


def torchvision_model(name: str, **kwargs: Any) -> Any:
    """torchvision's `name(weights=None, **kwargs)`, filled by `fill_`, in eval mode."""

    if name.startswith(("swin", "maxvit")):  # buffers computed at construction: built on the CPU
        return fill_(reference_torchvision().models.get_model(name, weights=None, **kwargs)).eval()
    return fill_(meta_model(name, **kwargs).to_empty(device="cpu")).eval()


def meta_model(name: str, **kwargs: Any) -> Any:
    """torchvision's model on the meta device (RegNet's stage widths, computed with tensors, on the CPU)."""
    import torch

    tv = reference_torchvision()
    params = tv.models.regnet.BlockParams
    widths = params.__dict__["from_init_params"]

    def on_cpu(cls: Any, *args: Any, **kw: Any) -> Any:
        with torch.device("cpu"):
            return widths.__func__(cls, *args, **kw)

    params.from_init_params = classmethod(on_cpu)
    try:
        with torch.device("meta"):
            return tv.models.get_model(name, weights=None, **kwargs)
    finally:
        params.from_init_params = widths


def load_into(ours: serve.nn.Module, theirs: Any) -> serve.nn.Module:
    """Strict load of torchvision's state_dict (same keys in the same order, same shapes)."""
    sd = theirs.state_dict()
    assert list(ours.state_dict()) == list(sd)
    ours.load_state_dict({k: serve.from_numpy(v.detach().numpy().copy()) for k, v in sd.items()}, strict=True)
    return ours.eval()


def images(size: int, n: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def max_rel_diff(ours: serve.nn.Module, theirs: Any, x: np.ndarray) -> float:
    """Largest |ours - torchvision| over the largest |torchvision| logit; asserts it is within 1e-4."""
    import torch

    with serve.no_grad(), torch.no_grad():
        a, b = ours(serve.from_numpy(x)).numpy().astype(np.float64), theirs(torch.from_numpy(x)).numpy()
    assert np.isfinite(b).all() and np.abs(b).max() > 0, "degenerate reference logits"
    assert_rel_close(a, b, rtol=1e-4)
    return float(np.abs(a - b).max() / np.abs(b).max())


def cheap_init(monkeypatch: Any) -> None:
    """serve's random initializers as no-ops (uninitialized parameters), so giant models build in milliseconds."""
    import serve.nn.init as init

    for name in ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                 "xavier_normal_"):  # fmt: skip
        monkeypatch.setattr(init, name, lambda t, *a, **k: t)
    monkeypatch.setattr(serve.Tensor, "normal_", lambda self, *a, **k: self)
