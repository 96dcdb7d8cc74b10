"""Integrated gradients on serve's autograd: the explanations the built-in handlers answer `/explanations` with.

    attributions, delta = integrated_gradients(model, images, target=[3, 1], n_steps=15)      # (N, C, H, W), (N,)
    attributions, delta = layer_integrated_gradients(model, model.embedding, (text, offsets), (base, offsets),
                                                     target=0, repeat=repeat_bags)            # the layer's shape

Integrated gradients (Sundararajan, Taly and Yan, "Axiomatic Attribution for Deep Networks", 2017): the
attribution of input feature i is (x_i - x'_i) times the integral over a in [0, 1] of dF/dx_i at x' + a (x - x'),
with x' the baseline (zeros by default). The integral is a weighted sum over `n_steps` points, `method` one of
Captum's: "gausslegendre" (Captum's default, so the numbers are TorchServe's), "riemann_right", "riemann_left",
"riemann_middle", "riemann_trapezoid" (the trapezoid rule proper, end weights 1/(2(n-1)): Captum's gives every
point 1/n and halves the ends, weights summing to (n-1)/n, so its numbers differ there). Completeness: the
attributions of a row sum to F(x) - F(x') up to the quadrature error, returned as the convergence `delta`
(attributions' sum minus that difference).

Decisions:
- The steps are batched: one forward and one backward per `internal_batch_size` rows (steps x inputs), not one per
  step, so 50 steps of one image cost ceil(50 / 16) passes of 16 images, and the memory one pass holds is bounded.
- Gradients are taken with `serve.autograd.grad` on the scaled inputs only: the model's parameters get no `.grad`
  (the backward is pruned to the path from the inputs), and nothing is left on the model.
- The layer variant (Captum's LayerIntegratedGradients, which TorchServe's text handler uses on
  `model.embedding`) integrates over the layer's output: a forward hook replaces the output by the scaled
  points, the model's inputs are repeated per step by `repeat` (rows for ids, bags for EmbeddingBag's
  (text, offsets)) so the rows of the layer's output and of the model's output stay step-major.
- Sums are accumulated in float64 numpy; the attributions come back as a float32 `serve.Tensor` on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import serve
from serve.errors import InvalidInput

METHODS = ("gausslegendre", "riemann_right", "riemann_left", "riemann_middle", "riemann_trapezoid")
MAX_STEPS = 256  # one request cannot hold the worker for minutes
Target = int | Sequence[int] | None


class TargetOutOfRange(InvalidInput):
    """A target that is not one of the model's outputs; `outputs` says how many it has."""

    def __init__(self, targets: list[int], outputs: int) -> None:
        super().__init__(f"target {targets} is out of range for a model with {outputs} outputs")
        self.outputs = outputs


def integration_points(n_steps: int, method: str = "gausslegendre") -> tuple[np.ndarray, np.ndarray]:
    """(alphas, weights) in [0, 1] for `n_steps` points of `method`; the weights sum to 1."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise ValueError(f"n_steps must be a positive integer, got {n_steps!r}")
    if method == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n_steps)
        return 0.5 * (nodes + 1.0), 0.5 * weights
    if method == "riemann_trapezoid":
        if n_steps < 2:
            raise ValueError("riemann_trapezoid needs n_steps >= 2")
        weights = np.full(n_steps, 1.0 / (n_steps - 1))
        weights[[0, -1]] *= 0.5
        return np.linspace(0.0, 1.0, n_steps), weights
    offsets = {"riemann_right": 1.0, "riemann_left": 0.0, "riemann_middle": 0.5}
    if method not in offsets:
        raise ValueError(f"unknown integration method {method!r}: expected one of {', '.join(METHODS)}")
    return (np.arange(n_steps) + offsets[method]) / n_steps, np.full(n_steps, 1.0 / n_steps)


def integrated_gradients(forward: Callable[[serve.Tensor], Any], inputs: serve.Tensor, target: Target = None, *,
                         baselines: serve.Tensor | None = None, n_steps: int = 50, method: str = "gausslegendre",
                         internal_batch_size: int | None = None) -> tuple[serve.Tensor, serve.Tensor]:  # fmt: skip
    """Attributions of `forward(inputs)[row, target]` to `inputs` (same shape), and each row's delta (N,)."""
    x = _array(inputs)
    base = np.zeros_like(x) if baselines is None else np.broadcast_to(_array(baselines), x.shape)
    device, dtype = inputs.device, inputs.dtype
    n = x.shape[0]
    alphas, weights = integration_points(n_steps, method)
    total = np.zeros(x.shape, dtype=np.float64)
    for start, stop in _chunks(n_steps, n, internal_batch_size):
        a = alphas[start:stop].reshape(-1, *([1] * x.ndim))  # (k, 1, ...)
        points = (base[None] + a * (x - base)[None]).reshape(-1, *x.shape[1:])  # (k * N, ...) step-major
        scaled = serve.from_numpy(points.astype(_numpy_dtype(x), copy=False)).to(device, dtype).requires_grad_()
        with serve.enable_grad():
            chosen = _select(_output(forward(scaled)), target, n)
            (grad,) = serve.autograd.grad(chosen, [scaled])
        g = _array(grad).astype(np.float64).reshape(stop - start, *x.shape)  # (k, N, ...)
        total += np.tensordot(weights[start:stop], g, axes=1)
    attributions = total * (x - base)
    with serve.no_grad():
        ends = _select_rows(_output(forward(serve.from_numpy(np.concatenate([x, base])).to(device, dtype))), target, n)
    return _result(attributions, ends)


def layer_integrated_gradients(model: Callable[..., Any], layer: serve.nn.Module, inputs: tuple[Any, ...],
                               baselines: tuple[Any, ...], target: Target = None, *,
                               repeat: Callable[[tuple[Any, ...], int], tuple[Any, ...]] | None = None,
                               n_steps: int = 50, method: str = "gausslegendre", internal_batch_size: int | None = None,
                               ) -> tuple[serve.Tensor, serve.Tensor]:  # fmt: skip
    """Attributions to `layer`'s output when the model runs on `inputs` (baseline: its output on `baselines`)."""
    repeat = repeat or repeat_rows
    with serve.no_grad():
        layer_in, out_in = _layer_output(model, layer, inputs)
        layer_base, out_base = _layer_output(model, layer, baselines)
    x, base = _array(layer_in), _array(layer_base)
    if x.shape != base.shape:
        raise ValueError(f"the layer's output on the inputs {list(x.shape)} and on the baselines "
                         f"{list(base.shape)} differ in shape: give baselines of the inputs' shape")  # fmt: skip
    n = x.shape[0]
    alphas, weights = integration_points(n_steps, method)
    total = np.zeros(x.shape, dtype=np.float64)
    for start, stop in _chunks(n_steps, n, internal_batch_size):
        a = alphas[start:stop].reshape(-1, *([1] * x.ndim))
        points = (base[None] + a * (x - base)[None]).reshape(-1, *x.shape[1:])  # (k * N, ...) step-major
        scaled = serve.from_numpy(points.astype(_numpy_dtype(x), copy=False)).to(layer_in.device, layer_in.dtype)
        scaled.requires_grad_()
        handle = layer.register_forward_hook(_replace_output(scaled))
        try:
            with serve.enable_grad():
                chosen = _select(_output(model(*repeat(inputs, stop - start))), target, n)
                (grad,) = serve.autograd.grad(chosen, [scaled])
        finally:
            handle.remove()
        g = _array(grad).astype(np.float64).reshape(stop - start, *x.shape)
        total += np.tensordot(weights[start:stop], g, axes=1)
    attributions = total * (x - base)
    ends = np.concatenate([_select_rows(_output(out_in), target, n), _select_rows(_output(out_base), target, n)])
    return _result(attributions, ends)


def repeat_rows(args: tuple[Any, ...], k: int) -> tuple[Any, ...]:
    """Each tensor argument repeated `k` times along its first dimension (ids, masks); other arguments kept."""
    return tuple(a.repeat(k, *([1] * (a.ndim - 1))) if isinstance(a, serve.Tensor) else a for a in args)


def repeat_bags(args: tuple[Any, ...], k: int) -> tuple[Any, ...]:
    """EmbeddingBag's (text, offsets) repeated `k` times: the text concatenated, the offsets shifted per copy."""
    text, offsets, *rest = args
    length = text.shape[0]
    shifted = [offsets + j * length for j in range(k)]
    return (serve.cat([text] * k), serve.cat(shifted), *rest)


def steps_setting(config: dict[str, Any], key: str, default: int, cap: int = MAX_STEPS) -> int:
    """A model-config `handler:` step count (`ig_steps`, `ig_batch_size`): a positive integer up to `cap`."""
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cap:
        raise ValueError(f"model-config handler.{key} must be an integer from 1 to {cap}, got {value!r}")
    return value


def row_target(row: Any) -> int:
    """A request's `target` (TorchServe's explanation field: a form field or JSON key), 0 when absent."""
    value = row.get("target") if isinstance(row, dict) else None
    if value is None and isinstance(row, dict) and isinstance(row.get("body"), dict):
        value = row["body"].get("target")
    if value is None or value == b"" or value == "":
        return 0
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", "replace")
    try:
        target = int(value)
    except (TypeError, ValueError):
        target = -1
    if isinstance(value, bool) or target < 0:
        raise InvalidInput(f"target {value!r} is not a class index: send a non-negative integer")
    return target


# ---- helpers ---------------------------------------------------------------------------------------------------


def _chunks(n_steps: int, rows: int, internal_batch_size: int | None) -> list[tuple[int, int]]:
    """Step ranges whose k * rows points fit in `internal_batch_size` rows per forward (at least one step)."""
    per = n_steps if internal_batch_size is None else max(1, internal_batch_size // max(rows, 1))
    return [(s, min(s + per, n_steps)) for s in range(0, n_steps, per)]


def _array(t: serve.Tensor) -> np.ndarray:
    return np.asarray(t.detach().float().cpu().numpy())


def _numpy_dtype(x: np.ndarray) -> Any:
    return np.float32 if x.dtype != np.float64 else np.float64


def _output(out: Any) -> serve.Tensor:
    """The tensor to explain: the output itself, a tuple's first element, or `.logits` / `["logits"]`."""
    if isinstance(out, dict):
        out = out.get("logits")
    elif isinstance(out, (tuple, list)) and out:
        out = out[0]
    elif not isinstance(out, serve.Tensor):
        out = getattr(out, "logits", None)
    if not isinstance(out, serve.Tensor):
        raise TypeError(f"explanations need the model to return a tensor of scores, got {type(out).__name__}")
    return out


def _onehot(out: serve.Tensor, target: Target, n: int) -> np.ndarray:
    """(rows, classes) mask choosing each row's target; rows are step-major copies of the `n` inputs."""
    rows = out.shape[0]
    flat = int(np.prod(out.shape[1:])) if out.ndim > 1 else 1
    targets = np.zeros(n, dtype=np.int64) if target is None else np.broadcast_to(np.asarray(target, np.int64), (n,))
    if out.ndim > 1 and (targets.min() < 0 or targets.max() >= flat):
        raise TargetOutOfRange(targets.tolist(), flat)
    mask = np.zeros((rows, flat), dtype=np.float32)
    mask[np.arange(rows), np.tile(targets, rows // n) if out.ndim > 1 else 0] = 1.0
    return mask


def _select(out: serve.Tensor, target: Target, n: int) -> serve.Tensor:
    """The sum over rows of each row's target score (its gradient is each row's own)."""
    mask = serve.from_numpy(_onehot(out, target, n)).to(out.device, out.dtype)
    return (out.reshape(out.shape[0], -1) * mask).sum()


def _select_rows(out: serve.Tensor, target: Target, n: int) -> np.ndarray:
    """Each row's target score, float64."""
    scores = _array(out).astype(np.float64).reshape(out.shape[0], -1)
    return (scores * _onehot(out, target, n)).sum(axis=1)


def _replace_output(value: serve.Tensor) -> Callable[..., serve.Tensor]:
    """A forward hook whose module answers `value` instead of its own output."""
    return lambda module, args, output: value


def _layer_output(model: Callable[..., Any], layer: serve.nn.Module, args: tuple[Any, ...]) -> tuple[Any, Any]:
    seen: list[Any] = []
    handle = layer.register_forward_hook(lambda module, a, output: seen.append(output))
    try:
        out = model(*args)
    finally:
        handle.remove()
    if not seen or not isinstance(seen[0], serve.Tensor):
        raise RuntimeError(f"the layer {type(layer).__name__} did not run (or gave no tensor) in the model's forward")
    return seen[0], out


def _result(attributions: np.ndarray, ends: np.ndarray) -> tuple[serve.Tensor, serve.Tensor]:
    n = attributions.shape[0]
    delta = attributions.reshape(n, -1).sum(axis=1) - (ends[:n] - ends[n:])
    return serve.from_numpy(attributions.astype(np.float32)), serve.from_numpy(delta.astype(np.float32))


class IntegratedGradients:
    """Captum's `IntegratedGradients(forward_func).attribute(...)` on serve, for TorchServe handlers that call
    `self.ig.attribute(tensor, target=target, n_steps=15)` (ts's VisionHandler sets `self.ig` as TorchServe's)."""

    def __init__(self, forward_func: Callable[..., Any]) -> None:
        self.forward_func = forward_func

    def attribute(self, inputs: serve.Tensor, baselines: serve.Tensor | None = None, target: Target = None,
                  additional_forward_args: Any = None, n_steps: int = 50, method: str = "gausslegendre",
                  internal_batch_size: int | None = None, return_convergence_delta: bool = False) -> Any:  # fmt: skip
        """Attributions of `inputs` (and the convergence delta when asked), Captum's argument names."""
        if additional_forward_args is not None:
            raise NotImplementedError("IntegratedGradients.attribute: additional_forward_args is not supported on "
                                      "serve; wrap the model in a function of the inputs alone")  # fmt: skip
        steps = min(int(n_steps), MAX_STEPS)
        attributions, delta = integrated_gradients(self.forward_func, inputs, target, baselines=baselines,
                                                   n_steps=steps, method=method,
                                                   internal_batch_size=internal_batch_size)  # fmt: skip
        return (attributions, delta) if return_convergence_delta else attributions
