"""`ts.handler_utils`: the plain-Python helpers of TorchServe's handlers: micro-batching and the `timed` decorator.

`from ts.handler_utils import MicroBatching` works, as TorchServe's micro-batching example imports it.
"""

from serve.compat.ts.handler_utils.micro_batching import MicroBatching

__all__ = ["MicroBatching"]
