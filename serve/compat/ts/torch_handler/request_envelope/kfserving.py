"""`ts.torch_handler.request_envelope.kfserving`: KServe v1's old name (KFServing), kept as TorchServe keeps it."""

from serve.compat.ts.torch_handler.request_envelope.kserve import KServeEnvelope

KFservingEnvelope = KServeEnvelope

__all__ = ["KFservingEnvelope"]
