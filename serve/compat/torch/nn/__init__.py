"""`torch.nn` submodules that serve.nn does not have under torch's name (torch.nn itself is serve.nn)."""
