"""The import hook's prefix mapping: torch.X / torchvision.X.Y / ts.X.Y resolve to serve.compat modules by name
while compatibility is on, real modules are hidden and restored, and what serve.compat lacks says so."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

import serve
from serve.worker.torch_compat import torch_compat

hook = importlib.import_module("serve.worker.torch_compat")  # the module: serve.worker exports the function


@pytest.fixture
def fake_ts(tmp_path, monkeypatch):
    """A throwaway package `h1fake_ts` (with ts-like submodules) standing in for serve.compat.ts."""
    root = tmp_path / "h1fake_ts"
    (root / "torch_handler").mkdir(parents=True)
    (root / "__init__.py").write_text("ROOT = True\n")
    (root / "torch_handler" / "__init__.py").write_text("")
    (root / "torch_handler" / "base_handler.py").write_text("class BaseHandler:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(hook.PREFIXES, "ts", "h1fake_ts")
    yield "h1fake_ts"
    for name in [n for n in sys.modules if n.startswith("h1fake_ts")]:
        del sys.modules[name]


def test_prefix_maps_every_depth_to_the_same_module_objects(fake_ts):
    with torch_compat():
        import ts
        import ts.torch_handler.base_handler as bh
        from ts.torch_handler.base_handler import BaseHandler

        assert ts is sys.modules[fake_ts] and ts.ROOT
        assert bh is sys.modules[f"{fake_ts}.torch_handler.base_handler"] and BaseHandler is bh.BaseHandler
        assert sys.modules["ts.torch_handler"] is sys.modules[f"{fake_ts}.torch_handler"]
    assert bh.__spec__.name == f"{fake_ts}.torch_handler.base_handler"  # the real module keeps its own spec
    assert "ts" not in sys.modules and "ts.torch_handler" not in sys.modules


def test_a_submodule_serve_compat_lacks_is_a_clear_import_error(fake_ts):
    with torch_compat():
        with pytest.raises(ImportError, match=r"ts\.torch_handler\.nope is not available under serve's torch compat"):
            import ts.torch_handler.nope  # noqa: F401
        with pytest.raises(ImportError, match=r"cannot import name 'nothing' from 'h1fake_ts'"):
            from ts import nothing  # noqa: F401  (Python's own message, naming the serve.compat module)


def test_an_import_error_inside_a_compat_module_is_not_masked(fake_ts, tmp_path):
    (tmp_path / fake_ts / "broken.py").write_text("import no_such_module_h1\n")
    with torch_compat(), pytest.raises(ModuleNotFoundError, match="no_such_module_h1"):
        import ts.broken  # noqa: F401


def test_real_modules_under_mapped_names_are_hidden_and_restored(fake_ts, monkeypatch):
    real_ts, real_tv_models = types.ModuleType("ts"), types.ModuleType("torchvision.models")
    monkeypatch.setitem(sys.modules, "ts", real_ts)
    monkeypatch.setitem(sys.modules, "torchvision.models", real_tv_models)
    with torch_compat():
        import ts

        assert ts is not real_ts and "torchvision.models" not in sys.modules
    assert sys.modules["ts"] is real_ts and sys.modules["torchvision.models"] is real_tv_models


def test_torchvision_and_ts_resolve_to_serve_compat():
    with torch_compat():
        import torchvision
        import ts

    assert torchvision.__name__ == "serve.compat.torchvision" and ts.__name__ == "serve.compat.ts"


def test_torch_submodules_outside_the_aliases_come_from_serve_compat_torch():
    with torch_compat():
        import torch
        import torch.jit
        import torch.utils.checkpoint
        from torch.utils.data import DataLoader

        assert torch.jit is sys.modules["serve.compat.torch.jit"] and torch.jit.is_scripting() is False
        assert torch.utils.checkpoint is sys.modules["serve.compat.torch.utils.checkpoint"]
        assert DataLoader is sys.modules["serve.compat.torch.utils.data"].DataLoader
        assert torch.cat is serve.cat and torch._C._log_api_usage_once("x") is None
        assert torch.nn.utils is sys.modules["torch.nn.utils"]  # still serve.nn.utils' alias, not compat's utils
    assert "torch.jit" not in sys.modules or sys.modules["torch.jit"] is not torch.jit


def test_a_missing_root_package_in_serve_compat_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(hook.PREFIXES, "torchvision", "h1_no_such_package")
    message = "torchvision is not available under serve's torch compatibility"
    with torch_compat(), pytest.raises(ImportError, match=message):
        import torchvision  # noqa: F401


HANDLER = """
import torch


def handle(data, context):
    return None if data is None else [torch.diff(torch.tensor([1.0, 4.0, 9.0])).tolist() for _ in data]
"""


@pytest.mark.parametrize(("setting", "works"), [(None, True), (True, True), (False, False)])
def test_a_handler_importing_torch_gets_compat_by_default(tmp_path, monkeypatch, setting, works):
    from serve.worker import Context, load_handler

    monkeypatch.setitem(sys.modules, "torch", None)  # as on a server without torch: only compat can provide it
    (tmp_path / "handler.py").write_text(HANDLER)
    model = {"modelName": "m", "handler": "handler.py"}
    if setting is not None:
        model["torchCompat"] = setting
    context = Context("m", str(tmp_path), {"model": model}, 1, None, "0.1.0")
    if not works:
        with pytest.raises(ImportError):
            load_handler(context)
        return
    assert load_handler(context).handle([b"x"], context) == [[3.0, 5.0]]


def test_a_torch_submodule_under_an_alias_is_serves_then_compats():
    with torch_compat():
        import torch.nn.modules.conv as conv
        from torch.nn.modules.utils import _pair

        assert conv is sys.modules["serve.nn.modules.conv"] and conv.Conv2d is serve.nn.Conv2d
        assert _pair(3) == (3, 3) and _pair([1, 2]) == (1, 2)
        with pytest.raises(ImportError, match=r"torch\.nn\.modules\.nope is not available"):
            import torch.nn.modules.nope  # noqa: F401
