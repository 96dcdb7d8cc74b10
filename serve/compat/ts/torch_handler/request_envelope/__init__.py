"""`ts.torch_handler.request_envelope`: TorchServe's request envelopes (base, json, body, kserve, kservev2)."""
