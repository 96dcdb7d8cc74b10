"""`torch.utils.hooks`: `RemovableHandle`, serve's (what register_forward_hook returns)."""

from serve.nn.hooks import RemovableHandle

__all__ = ["RemovableHandle"]
