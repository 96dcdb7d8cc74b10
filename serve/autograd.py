"""`serve.autograd`, named like `torch.autograd`: Function, backward, grad, and the grad-mode switches.

`serve.autograd.function` is provided too, so `from torch.autograd.function import once_differentiable`
ports over unchanged.
"""

import sys
import types

from serve.tensor.autograd import Function, backward, grad, once_differentiable
from serve.tensor.autograd import Node as FunctionCtx
from serve.tensor.grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled

function = types.ModuleType(__name__ + ".function", "`torch.autograd.function`: Function, once_differentiable.")
function.Function = Function  # type: ignore[attr-defined]
function.FunctionCtx = FunctionCtx  # type: ignore[attr-defined]
function.once_differentiable = once_differentiable  # type: ignore[attr-defined]
sys.modules[function.__name__] = function

__all__ = ["Function", "FunctionCtx", "backward", "enable_grad", "function", "grad", "inference_mode", "no_grad",
           "once_differentiable", "set_grad_enabled"]  # fmt: skip
