"""`serve.autograd`, named like `torch.autograd`: Function, backward, grad, and the grad-mode switches."""

from serve.tensor.autograd import Function, backward, grad
from serve.tensor.autograd import Node as FunctionCtx
from serve.tensor.grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled

__all__ = ["Function", "FunctionCtx", "backward", "enable_grad", "grad", "inference_mode", "no_grad", "set_grad_enabled"]
