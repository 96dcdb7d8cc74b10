"""`torch.version`: the torch release whose API serve's alias follows, and no CUDA/ROCm build of torch.

`__version__` is what libraries compare against their minimum (transformers 5.x wants torch >= 2.6 and switches
code paths on `is_torch_greater_or_equal`); it names the PyTorch API the alias is tested against (the reference
torch of the test extras), not serve's own version. `cuda` and `hip` are None as in a CPU build of torch: serve's
GPU support is its own (serve.cuda), never torch's CUDA runtime.
"""

from __future__ import annotations

__version__ = "2.13.0"
cuda: str | None = None
hip: str | None = None
git_version = "serve"
debug = False
