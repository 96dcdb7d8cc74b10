"""`torch.nn.modules` submodules that serve.nn.modules does not have under torch's name: `utils`."""
