"""`torch.autograd` submodules serve.autograd does not have (torch.autograd itself is serve.autograd; these join
it under the alias): `graph`."""

from serve.compat.torch.autograd import graph

__all__ = ["graph"]
