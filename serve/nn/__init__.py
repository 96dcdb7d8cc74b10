"""serve.nn: PyTorch's `torch.nn` on serve's runtime: `Module`, `Parameter`, the layers, `functional`, `init`.

Porting a model file means changing `torch.nn` to `serve.nn`; class names, constructor arguments, parameter
shapes and `state_dict` keys are PyTorch's, so a checkpoint saved by PyTorch loads unchanged.
"""

from serve.nn import functional, init, utils
from serve.nn.module import Module, RemovableHandle
from serve.nn.modules import *
from serve.nn.parameter import Buffer, Parameter
