"""Torch compatibility: PyTorch imports resolve to serve during the import only; what is not covered says so."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import serve
from serve.worker.handler_loader import import_user_file
from serve.worker.torch_compat import ALIASES, torch_compat, torch_compat_enabled
from tests.helpers import needs_torch, torch

MODEL = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor, nn as nn_again
from torch.nn import init
import helper

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.fc = nn.Linear(8, 3)
        init.zeros_(self.fc.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.conv(x)), 2)   # (B, 2, 2, 2)
        return self.fc(torch.flatten(x, 1)) * helper.SCALE
"""


def write(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_torch_imports_resolve_to_serve(tmp_path):
    root = write(tmp_path, {"model.py": MODEL, "helper.py": "SCALE = 2.0\n"})
    module = import_user_file(root, "model.py", torch_compat=True)
    assert module.Tensor is serve.Tensor and module.nn.Module is serve.nn.Module
    assert module.nn_again is module.nn and module.F.relu is serve.nn.functional.relu
    assert module.torch.nn is module.nn and module.torch.nn.functional is module.F
    net = module.Net()
    assert isinstance(net, serve.nn.Module) and list(net.state_dict()) == ["conv.weight", "conv.bias", "fc.weight",
                                                                           "fc.bias"]  # fmt: skip
    with serve.no_grad():
        out = net(serve.randn(4, 1, 6, 6))
    assert tuple(out.shape) == (4, 3)


@needs_torch
def test_real_torch_is_untouched_outside_the_scope(tmp_path):
    before = {k: v for k, v in sys.modules.items() if k == "torch" or k.startswith("torch.")}
    with torch_compat():
        import torch as inside

        assert inside.Tensor is serve.Tensor
        assert "torch.optim" not in sys.modules
    after = {k: v for k, v in sys.modules.items() if k == "torch" or k.startswith("torch.")}
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    import torch as outside

    assert outside is torch and isinstance(outside.ones(1), torch.Tensor)


@needs_torch
def test_same_file_trains_under_torch_and_serves_under_compat(tmp_path):
    root = write(tmp_path, {"model.py": MODEL, "helper.py": "SCALE = 2.0\n"})
    sys.path.insert(0, str(root))
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("h2_compat_torch_model", root / "model.py")
        real = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(real)
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("helper", None)
    torch.manual_seed(0)
    theirs = real.Net().eval()
    ours = import_user_file(root, "model.py", torch_compat=True).Net().eval()
    ours.load_state_dict({k: serve.from_numpy(v.numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((3, 1, 6, 6)).astype(np.float32)
    with torch.no_grad(), serve.no_grad():
        np.testing.assert_allclose(ours(serve.from_numpy(x)).numpy(), theirs(torch.from_numpy(x)).numpy(), atol=1e-5)


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("import torch.optim\n", ImportError, "torch.optim is not available under serve's torch compatibility"),
        ("from torch.utils.tensorboard import SummaryWriter\n", ImportError, "torch.utils.tensorboard is not avail"),
        ("import torchaudio\n", ModuleNotFoundError, "torchaudio"),  # as if not installed: find_spec gives None
        ("import torch\nf = torch.sparse_coo_tensor\n", AttributeError, "torch.sparse_coo_tensor is not provided by"),
        ("import torch.nn as nn\nx = nn.NotALayer\n", AttributeError, "torch.nn.NotALayer is not provided"),
    ],
)
def test_what_is_not_covered_says_so(tmp_path, source, error, message):
    root = write(tmp_path, {"model.py": source})
    with pytest.raises(error, match=message):
        import_user_file(root, "model.py", torch_compat=True)
    assert "torch" not in sys.modules or sys.modules["torch"] is torch  # restored after the failure


def test_without_compat_a_torch_file_imports_real_torch_or_fails(tmp_path):
    root = write(tmp_path, {"model.py": "import torch\nT = torch.Tensor\n"})
    if torch is None:
        with pytest.raises(ModuleNotFoundError):
            import_user_file(root, "model.py")
    else:
        assert import_user_file(root, "model.py").T is torch.Tensor


def test_the_scope_is_reentrant():
    with torch_compat():
        with torch_compat():
            import torch as inner
        import torch as outer

        assert inner is outer and outer.cat is serve.cat
    assert "torch" not in sys.modules or sys.modules["torch"] is torch


def test_every_alias_points_at_a_serve_module():
    import importlib

    for alias, target in ALIASES.items():
        assert importlib.import_module(target).__name__ == target, alias


@pytest.mark.parametrize(
    ("manifest", "config", "enabled"),
    [
        ({"model": {"torchCompat": True}}, {}, True),
        ({"model": {}}, {"torchCompat": True}, True),
        ({"model": {}}, {"torchCompat": "true"}, True),
        ({"model": {"torchCompat": False}}, {}, False),
        ({"model": {"torchCompat": True}}, {"torchCompat": False}, False),
        ({"model": {"torchCompat": "false"}}, {}, False),
        (None, None, False),
    ],
)
def test_enabled_by_manifest_or_model_config(manifest, config, enabled):
    assert torch_compat_enabled(manifest, config) is enabled
