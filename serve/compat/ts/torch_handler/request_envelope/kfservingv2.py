"""`ts.torch_handler.request_envelope.kfservingv2`: KServe v2's old name (KFServing), as TorchServe keeps it."""

from serve.compat.ts.torch_handler.request_envelope.kservev2 import KServev2Envelope

KFservingv2Envelope = KServev2Envelope

__all__ = ["KFservingv2Envelope"]
