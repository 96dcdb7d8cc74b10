"""`ts.torch_handler.request_envelope`: TorchServe's request envelopes (base, json, body, kserve, kservev2, and the
old names kfserving, kfservingv2)."""
