"""`torch.nn.modules` submodules that serve.nn.modules does not have under torch's name: `utils`, `module`."""

from serve.compat.torch.nn.modules import module, utils

__all__ = ["module", "utils"]
