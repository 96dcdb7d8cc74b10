"""`ts.torch_handler`: TorchServe's handler classes on serve's built-in handlers (see each module)."""
