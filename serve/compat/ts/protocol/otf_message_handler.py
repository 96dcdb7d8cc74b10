"""`ts.protocol.otf_message_handler`: the older import path of TorchServe's streaming call, kept by TorchServe until
1.0 and still used by its examples; the same function as `ts.handler_utils.utils`."""

from serve.compat.ts.handler_utils.utils import send_intermediate_predict_response

__all__ = ["send_intermediate_predict_response"]
