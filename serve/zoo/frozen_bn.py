"""FrozenBatchNorm2d (`torchvision.ops.FrozenBatchNorm2d`): BatchNorm2d with fixed statistics and affine
parameters, all four buffers, none trainable; the detection and segmentation backbones' norm layer.

Kept in the zoo, beside the other shared layers, so models defined here can use it; `torchvision.ops` re-exports it.
Checkpoints saved from a regular BatchNorm2d carry `num_batches_tracked`, which this layer does not have: the key
is dropped on load, as torchvision does, so such checkpoints load strictly.
"""

from __future__ import annotations

import serve
from serve import nn


class FrozenBatchNorm2d(nn.Module):
    """y = (x - running_mean) / sqrt(running_var + eps) * weight + bias, per channel of (N, C, H, W)."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", serve.ones(num_features))
        self.register_buffer("bias", serve.zeros(num_features))
        self.register_buffer("running_mean", serve.zeros(num_features))
        self.register_buffer("running_var", serve.ones(num_features))

    def _load_from_state_dict(self, state_dict: dict, prefix: str, local_metadata: dict, strict: bool,
                              missing_keys: list[str], unexpected_keys: list[str], error_msgs: list[str]
                              ) -> None:  # fmt: skip
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)  # fmt: skip

    def forward(self, x: serve.Tensor) -> serve.Tensor:
        scale = self.weight * (self.running_var + self.eps).rsqrt()  # (C,)
        shift = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
