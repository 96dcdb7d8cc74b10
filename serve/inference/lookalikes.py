"""Modules that compute what a planned layer computes without being serve's class for it: transformers' `Conv1D`
(GPT-2, GPT-1's linear layer with its weight stored (in, out)) and activation modules such as transformers'
`NewGELUActivation` (GPT-2's `gelu_new`) and `GELUActivation` (BERT's `gelu`).

Decisions, and why:
- Recognised by what the module is and what it did, never by its class name: a user's module that shares the name
  and differs runs as written, and a module with another name that computes the same thing is planned alike.
  Source text is not compared either (it changes with every transformers release; the bytecode with the Python).
- A linear layer in all but name (`addmm_linear`) is a leaf module, not an `nn.Linear` (planned as itself), with
    - parameters exactly `weight`, 2-D (in, out), and `bias`, (out,), both float32, and no buffers;
    - a forward that is straight-line code: no branch, loop or attribute store in its own bytecode (a forward that
      agrees with the product on the example input but branches on a flag, a shape or the values could differ on
      another input; a store would be state the plan skips);
    - at every call the capture saw: one tensor in, (..., in) float32, and nothing else; out (..., out), whose first
      and last rows are x @ weight + bias within 1e-5 of sum(|x| |weight|) + |bias| (float64 reference: the
      float32 sum's own rounding is far below it), both tensors unchanged since the call.
  A module named Conv1D that adds, scales, reads `weight.T` or applies an activation fails the last rule.
- An activation (`activation`) is a leaf module with no parameters or buffers and a straight-line forward that, at
  every call the capture saw, returned one of the activations the native epilogue computes of its one input (on
  256 elements spread over each call's tensors, within 1e-5 relative + 1e-6 absolute), and on a probe of 1024
  values over [-10, 10] (run once, under no_grad, only for a module that passed the calls) exactly one of them:
  that is its name. The probe tells apart what the calls' values may not (gelu from gelu_tanh differ by up to 5e-4
  near |x| = 2, relu from relu6 only above 6).
- What these rules cannot see (a forward that calls a function that branches) the plan's check against eager on
  the example input covers, as it does for every pass.
- A planned `Conv1D` keeps the model's weight: its (in, out) array is already the product's right operand (K, N),
  which the BLAS kernel reads as is and the native kernels pack from; the layer's (out, in) `weight` is its
  transposed view, not a copy (choosing._Fused keeps such a view), so the model's parameters are neither changed
  nor held twice.
"""

from __future__ import annotations

import dis
import math
from types import CodeType

import numpy as np

import serve
from serve import nn
from serve.inference.capture import Call, Trace
from serve.inference.planned import PlannedLinear
from serve.nn.module import Module
from serve.tensor import dtypes, versions
from serve.tensor.grad_mode import no_grad
from serve.tensor.tensor import Tensor

__all__ = ["activation", "addmm_linear", "planned_addmm_linear"]

_LINEAR_RTOL = 1e-5
_ACT_RTOL, _ACT_ATOL = 1e-5, 1e-6
_PROBE = np.linspace(-10.0, 10.0, 1024, dtype=np.float32)
_UNSAFE = ("JUMP", "FOR_ITER", "STORE_ATTR", "STORE_GLOBAL", "DELETE_ATTR", "DELETE_GLOBAL")


def _straight_line(code: CodeType | None) -> bool:
    """No branch, loop or attribute/global store in `code` or the code objects it makes (lambdas, comprehensions)."""
    if code is None:
        return False
    if any(any(u in i.opname for u in _UNSAFE) for i in dis.get_instructions(code)):
        return False
    return all(_straight_line(c) for c in code.co_consts if isinstance(c, CodeType))


def _plain_leaf(module: Module) -> bool:
    """A leaf with a straight-line forward of its own and no buffers."""
    if any(True for _ in module.children()) or any(b is not None for b in module._buffers.values()):
        return False
    forward = getattr(type(module), "forward", None)
    return _straight_line(getattr(forward, "__code__", None))


def _unchanged(t: Tensor | None, version: int) -> np.ndarray | None:
    data = getattr(t, "_data", None)
    if not isinstance(data, np.ndarray) or versions.version(data) != version:
        return None
    return data


def _computed_product(call: Call, w: np.ndarray, b: np.ndarray) -> bool:
    """Whether `call` took one (..., in) tensor and returned (..., out) = x @ w + b on its first and last rows."""
    x, y = _unchanged(call.input, call.input_version), _unchanged(call.output, call.output_version)
    if x is None or y is None or call.extra_inputs or x.dtype != np.float32 or x.ndim < 1:
        return False
    k, n = w.shape
    if x.shape[-1] != k or y.shape != x.shape[:-1] + (n,):
        return False
    x2, y2 = x.reshape(-1, k), y.reshape(-1, n)  # (rows, in), (rows, out)
    rows = sorted({0, x2.shape[0] - 1}) if x2.shape[0] else []
    xs = x2[rows].astype(np.float64)
    want = xs @ w + b  # (len(rows), out)
    bound = _LINEAR_RTOL * (np.abs(xs) @ np.abs(w) + np.abs(b)) + 1e-7
    return bool(np.all(np.abs(y2[rows] - want) <= bound))


def addmm_linear(module: Module, trace: Trace) -> bool:
    """Whether `module` is a linear layer with an (in, out) weight in all but name (the module docstring's rule)."""
    if isinstance(module, nn.Linear) or set(module._parameters) != {"weight", "bias"}:
        return False
    w, b = module._parameters["weight"], module._parameters["bias"]
    if w is None or b is None or w.ndim != 2 or b.ndim != 1 or tuple(b.shape) != (w.shape[1],):
        return False
    if w._dtype is not dtypes.float32 or b._dtype is not dtypes.float32 or not _plain_leaf(module):
        return False
    calls = trace.calls_of(module)
    w64 = w._data.astype(np.float64)
    return bool(calls) and all(_computed_product(c, w64, b._data) for c in calls)


def planned_addmm_linear(module: Module, act_module: Module | None) -> PlannedLinear:
    """The planned linear layer of a module `addmm_linear` accepted: its (out, in) weight the transposed view of the
    module's (in, out) weight (no copy; the module is not changed)."""
    w, b = module._parameters["weight"], module._parameters["bias"]
    assert w is not None and b is not None
    return PlannedLinear(None, None, act_module, arrays=(w._data.T, b._data))  # (out, in) view of (in, out)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.astype(np.float64)])


def _references(x: np.ndarray) -> dict[str, np.ndarray]:
    """The native epilogue's activations on x, in float64."""
    x = x.astype(np.float64)
    relu6 = np.clip(x, 0.0, 6.0)
    return {
        "relu": np.maximum(x, 0.0),
        "relu6": relu6,
        "gelu": 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
        "gelu_tanh": 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))),
        "silu": x / (1.0 + np.exp(-x)),
        "sigmoid": 1.0 / (1.0 + np.exp(-x)),
        "hardswish": x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
    }


def _matching(x: np.ndarray, y: np.ndarray, names: set[str]) -> set[str]:
    """Those of `names` whose activation on x is y (1e-5 relative + 1e-6 absolute)."""
    refs = _references(x)
    return {name for name in names if np.all(np.abs(y - refs[name]) <= _ACT_RTOL * np.abs(refs[name]) + _ACT_ATOL)}


def activation(module: Module, trace: Trace) -> str | None:
    """The epilogue name of the activation `module` computes (the module docstring's rule), or None."""
    if module._parameters or not _plain_leaf(module):
        return None
    calls = trace.calls_of(module)
    names = set(_references(_PROBE[:1]))
    for c in calls:  # the calls first: a module that did not act as one of them is never run on the probe
        x, y = _unchanged(c.input, c.input_version), _unchanged(c.output, c.output_version)
        if c.extra_inputs or x is None or y is None or x.shape != y.shape or y.dtype != np.float32:
            return None
        picks = np.linspace(0, x.size - 1, min(x.size, 256)).astype(np.int64)  # spread over the whole tensor
        names = _matching(x.reshape(-1)[picks], y.reshape(-1)[picks], names)
    if not calls or not names:
        return None
    try:
        with no_grad():
            out = module(serve.from_numpy(_PROBE.copy()))
    except Exception:  # a module that cannot take a 1-D probe is not one of these
        return None
    got = getattr(out, "_data", None)
    if not isinstance(got, np.ndarray) or got.shape != _PROBE.shape or got.dtype != np.float32:
        return None
    found = _matching(_PROBE, got, names)
    return found.pop() if len(found) == 1 else None
