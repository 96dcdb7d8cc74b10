"""Numerics switches of the CUDA backend, read at each operation; `serve.backends` exposes them under PyTorch's names.

- `matmul_allow_tf32` (`serve.backends.cuda.matmul.allow_tf32`, default False): float32 matrix products may use
  TF32 tensor cores. False keeps them strict FP32, PyTorch's default for matmul.
- `conv_allow_tf32` (`serve.backends.cudnn.allow_tf32`, default True): float32 convolutions may use TF32,
  PyTorch's default for cuDNN convolutions.

The CPU backend ignores both.
"""

from __future__ import annotations

matmul_allow_tf32 = False
conv_allow_tf32 = True
