"""`ts.protocol`: only what TorchServe handlers import from it (the older home of the streaming call)."""
