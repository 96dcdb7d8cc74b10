"""Torch compatibility's default: on when the model or handler file imports torch/torchvision/ts (found with
ast), an explicit manifest or model-config setting wins, and ModelArchive / model-archiver agree."""

from __future__ import annotations

import json

import pytest

from serve.archive.torch_imports import compat_enabled, file_imports_torch, imports_torch
from serve.worker.torch_compat import torch_compat_enabled


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\n", True),
        ("import torch.nn as nn\n", True),
        ("from torchvision import models\n", True),
        ("from ts.torch_handler.base_handler import BaseHandler\n", True),
        ("def initialize():\n    if True:\n        import torchvision.transforms as T\n", True),
        ("class H:\n    def f(self):\n        from ts.utils.util import map_class_to_label\n", True),
        ("try:\n    import torch\nexcept ImportError:\n    pass\n", True),
        ("import serve\nimport numpy as np\n", False),
        ("from . import torch\nfrom .ts import x\n", False),  # relative imports are the archive's own files
        ("import torchtext_like\nimport tsx\n", False),
        ("x = 'import torch'\n# import torch\n", False),
        ("import torch(\n", False),  # does not parse: the import itself reports it
    ],
)
def test_file_imports_torch(tmp_path, source, expected):
    path = tmp_path / "f.py"
    path.write_text(source)
    assert file_imports_torch(path) is expected


def test_model_file_or_handler_file_decides(tmp_path):
    (tmp_path / "model.py").write_text("import serve\n")
    (tmp_path / "my_handler.py").write_text("from ts.torch_handler.base_handler import BaseHandler\n")
    assert imports_torch(tmp_path, "model.py", "my_handler.py") is True
    assert imports_torch(tmp_path, "model.py", "sub/my_handler:handle") is True
    assert imports_torch(tmp_path, "model.py", "image_classifier") is False  # built-in: no file here
    (tmp_path / "model.py").write_text("import torch\n")
    assert imports_torch(tmp_path, "model.py", "image_classifier") is True
    assert imports_torch(tmp_path, None, None) is False


@pytest.mark.parametrize(
    ("manifest_value", "config_value", "expected"),
    [
        (None, None, True),  # detected from the import
        (False, None, False),  # --no-torch-compat wins over the detection
        ("false", None, False),
        (None, False, False),  # model-config wins too
        (True, False, False),  # model-config over manifest
        (False, "true", True),
    ],
)
def test_explicit_setting_wins_over_detection(tmp_path, manifest_value, config_value, expected):
    (tmp_path / "model.py").write_text("import torch\n")
    model = {"modelFile": "model.py", "handler": "image_classifier"}
    if manifest_value is not None:
        model["torchCompat"] = manifest_value
    config = {} if config_value is None else {"torchCompat": config_value}
    assert compat_enabled({"model": model}, config, tmp_path) is expected
    assert torch_compat_enabled({"model": model}, config, tmp_path) is expected


def test_no_model_dir_means_no_detection():
    assert torch_compat_enabled({"model": {"modelFile": "model.py"}}, {}) is False


def test_model_archive_and_archiver_flag(tmp_path):
    from serve.archive import open_archive
    from serve.cli.model_archiver import main

    (tmp_path / "model.py").write_text("import torch.nn as nn\nclass Net(nn.Module):\n    pass\n")
    for flags, name, expected in (([], "on", True), (["--no-torch-compat"], "off", False)):
        model = str(tmp_path / "model.py")
        main(["--model-name", name, "--version", "1", "--model-file", model, "--handler", "image_classifier",
              "--export-path", str(tmp_path), "--archive-format", "no-archive", *flags])  # fmt: skip
        manifest = json.loads((tmp_path / name / "MAR-INF" / "MANIFEST.json").read_text())
        assert manifest["model"].get("torchCompat", None) is (None if expected else False)
        with open_archive(tmp_path / name) as archive:
            assert archive.torch_compat is expected
