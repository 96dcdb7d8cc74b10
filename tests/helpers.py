"""Reference checks for tests: an op against PyTorch (when installed) and against finite differences.

    check_op([(2, 3), (3,)], lambda lib, x, y: x * y)      # forward and gradient vs torch and numerics

`fn(lib, *tensors)` is called once with `lib=serve` and once with `lib=torch`, on the same random inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import serve

try:
    import torch
except ImportError:  # torch is a test extra; checks against numerics still run without it
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _outputs(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [o for o in out]
    return [out]


def to_numpy(t: Any) -> np.ndarray:
    if torch is not None and isinstance(t, torch.Tensor):
        t = t.detach()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    if isinstance(t, serve.Tensor):
        t = t.detach()
        return (t.float() if t.dtype == serve.bfloat16 else t).numpy()
    return np.asarray(t)


def dtype_name(t: Any) -> str:
    return str(t.dtype).split(".")[-1]


def assert_close(ours: Any, ref: Any, atol: float = 1e-5, rtol: float = 1e-4, check_dtype: bool = True) -> None:
    """Same shape, same dtype name, values within tolerance (NaN matches NaN)."""
    if isinstance(ref, (bool, int, float)):
        assert not isinstance(ours, serve.Tensor), f"expected a Python {type(ref).__name__}, got a Tensor"
        assert ours == pytest.approx(ref, rel=rtol, abs=atol, nan_ok=True)
        return
    assert tuple(ours.shape) == tuple(ref.shape), f"shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    if check_dtype:
        assert dtype_name(ours) == dtype_name(ref), f"dtype {ours.dtype} != reference {ref.dtype}"
    a, b = to_numpy(ours), to_numpy(ref)
    if a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b)
    else:
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)


def random_inputs(shapes: Sequence[Any], dtype: str, low: float, high: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        if isinstance(s, np.ndarray):
            out.append(s)
        elif dtype == "bool":
            out.append(rng.random(s) > 0.5)
        elif dtype.startswith(("int", "uint")):
            out.append(rng.integers(int(low), int(high) + 1, s).astype(dtype))
        else:
            out.append(rng.uniform(low, high, s).astype(np.float64 if dtype == "bfloat16" else dtype))
    return out


def _make(lib: Any, a: np.ndarray, dtype: str, requires_grad: bool) -> Any:
    int_data_as_float = isinstance(a, np.ndarray) and a.dtype.kind in "biu" and dtype.startswith("float")
    dt = None if int_data_as_float else getattr(lib, dtype)
    t = lib.tensor(a, dtype=dt) if dt is not None else lib.tensor(a)
    return t.requires_grad_(True) if requires_grad and t.is_floating_point() else t


def check_op(
    shapes: Sequence[Any],
    fn: Callable[..., Any],
    *,
    dtype: str = "float32",
    grad: bool = True,
    low: float = -2.0,
    high: float = 2.0,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    grad_atol: float | None = None,
    fd: bool = True,
    seed: int = 0,
) -> None:
    """Check `fn(lib, *inputs)`'s outputs and gradients against torch, and gradients against finite differences."""
    arrays = random_inputs(shapes, dtype, low, high, seed)
    differentiable = grad and dtype.startswith(("float", "bfloat"))
    xs = [_make(serve, a, dtype, differentiable) for a in arrays]
    outs = _outputs(fn(serve, *xs))
    if torch is not None:
        ts = [_make(torch, a, dtype, differentiable) for a in arrays]
        touts = _outputs(fn(torch, *ts))
        assert len(outs) == len(touts), f"{len(outs)} outputs != reference {len(touts)}"
        for o, r in zip(outs, touts):
            assert_close(o, r, atol, rtol)
    if not differentiable:
        return
    diff_outs = [o for o in outs if isinstance(o, serve.Tensor) and o.requires_grad]
    if not diff_outs:
        return
    rng = np.random.default_rng(seed + 1)
    cots = [rng.uniform(-1, 1, tuple(o.shape)).astype(np.float64) for o in diff_outs]
    loss = sum((o.double() * serve.tensor(c)).sum() for o, c in zip(diff_outs, cots))
    loss.backward()
    grads = [x.grad for x in xs if x.requires_grad]
    if torch is not None:
        tdiff = [o for o in _outputs(fn(torch, *ts)) if isinstance(o, torch.Tensor) and o.requires_grad]
        for t in ts:
            t.grad = None
        tloss = sum((o.double() * torch.tensor(c)).sum() for o, c in zip(tdiff, cots))
        tloss.backward()
        for g, t in zip(grads, [t for t in ts if t.requires_grad]):
            if t.grad is None:
                assert g is None or not to_numpy(g).any(), "gradient where torch has none"
                continue
            assert g is not None, "no gradient where torch has one"
            assert_close(g, t.grad, grad_atol or atol * 10, rtol * 10)
    if fd and dtype == "float32":
        check_gradient_numerically(fn, arrays, grads, cots, [x.requires_grad for x in xs])


def check_gradient_numerically(fn: Callable[..., Any], arrays: list[np.ndarray], grads: list[Any],
                               cots: list[np.ndarray], diff: list[bool], eps: float = 1e-6) -> None:  # fmt: skip
    """Central differences in float64 of sum(fn(x) * cotangent), compared with the analytic gradients."""
    base = [a.astype(np.float64) if d else a for a, d in zip(arrays, diff)]

    def value(inputs: list[np.ndarray]) -> float:
        with serve.no_grad():
            outs = [o for o in _outputs(fn(serve, *[serve.tensor(a) for a in inputs])) if isinstance(o, serve.Tensor)]
            outs = [o for o in outs if o.is_floating_point()]
            return float(sum((o.double() * serve.tensor(c)).sum().item() for o, c in zip(outs, cots)))

    k = 0
    for i, a in enumerate(base):
        if not diff[i]:
            continue
        g = to_numpy(grads[k]) if grads[k] is not None else np.zeros(a.shape)
        k += 1
        numeric = np.zeros(a.shape)
        flat = a.reshape(-1)
        for j in range(min(flat.size, 64)):  # bounded: the first 64 elements are enough to catch a wrong formula
            plus, minus = [b.copy() for b in base], [b.copy() for b in base]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            numeric.reshape(-1)[j] = (value(plus) - value(minus)) / (2 * eps)
        n = min(flat.size, 64)
        np.testing.assert_allclose(g.reshape(-1)[:n], numeric.reshape(-1)[:n], atol=2e-3, rtol=2e-3)
