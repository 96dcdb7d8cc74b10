"""Handler entry point resolution as TorchServe's ts/model_loader.py (spec §8), plus our import isolation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from handlers.base_handler import BaseHandler
from handlers.tensor import TensorHandler
from serve.worker import Context, load_handler, resolve_handler


def model_dir(root: Path, files: dict[str, str], handler: str = "handler.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def context(root: Path, handler: str | None = None, **model) -> Context:
    manifest = {"model": {"modelName": "m", "handler": handler, **model}} if handler else None
    return Context("m", str(root), manifest, 2, None, "0.1.0")


FUNCTION_HANDLER = """
calls = []
def my_fn(data, context):
    calls.append(data)
    if data is None:
        return None
    return [row["body"].upper() for row in data]
"""


def test_function_entry_point_is_initialised_with_none(tmp_path):
    root = model_dir(tmp_path, {"handler.py": FUNCTION_HANDLER})
    ctx = context(root, "handler.py:my_fn")
    handler = load_handler(ctx)
    assert handler.fn.__globals__["calls"] == [None]  # TorchServe's init call: fn(None, context)
    assert handler.handle([{"body": "a"}, {"body": "b"}], ctx) == ["A", "B"]


def test_module_level_handle_is_the_default_function(tmp_path):
    root = model_dir(tmp_path, {"custom.py": "def handle(data, context):\n    return data and [len(data)]\n"})
    handler = load_handler(context(root, "custom"))
    assert handler.handle([{}, {}], None) == [2]


def test_directories_and_py_suffix_are_stripped(tmp_path):
    root = model_dir(tmp_path, {"handler.py": FUNCTION_HANDLER})
    handler = resolve_handler("some/dir/handler.py:my_fn", root)
    assert handler.handle([{"body": "x"}], None) == ["X"]


CLASS_HANDLER = """
import helper
from handlers.base_handler import BaseHandler

class Custom(BaseHandler):
    def initialize(self, context):
        self.initialized = True
        self.tag = helper.TAG

    def handle(self, data, context):
        return [self.tag for _ in data]
"""


def test_class_entry_point_is_instantiated_and_initialised(tmp_path):
    root = model_dir(tmp_path, {"handler.py": CLASS_HANDLER, "helper.py": "TAG = 'one'\n"})
    handler = load_handler(context(root, "handler.py"))
    assert type(handler).__name__ == "Custom" and handler.initialized
    assert handler.handle([{}, {}], None) == ["one", "one"]


def test_two_models_with_same_file_names_do_not_collide(tmp_path):
    a = model_dir(tmp_path / "a", {"handler.py": CLASS_HANDLER, "helper.py": "TAG = 'a'\n"})
    b = model_dir(tmp_path / "b", {"handler.py": CLASS_HANDLER, "helper.py": "TAG = 'b'\n"})
    path_before = list(sys.path)
    ha, hb = load_handler(context(a, "handler.py")), load_handler(context(b, "handler.py"))
    assert ha.handle([{}], None) == ["a"] and hb.handle([{}], None) == ["b"]
    assert type(ha) is not type(hb)
    assert sys.path == path_before and "helper" not in sys.modules


def test_builtin_handler_by_short_name():
    handler = resolve_handler("tensor", Path("/nonexistent"))
    assert type(handler) is TensorHandler


def test_a_file_in_the_model_dir_wins_over_the_builtin(tmp_path):
    root = model_dir(tmp_path, {"tensor.py": "def handle(data, context):\n    return ['mine']\n"})
    assert resolve_handler("tensor", root).handle([{}], None) == ["mine"]


def test_default_handler_is_base_handler_when_there_is_no_manifest(tmp_path):
    assert type(resolve_handler("base_handler", tmp_path)) is BaseHandler
    with pytest.raises(RuntimeError, match="has no model file"):
        load_handler(context(tmp_path))  # base_handler, which needs a model file


def test_unknown_handler_lists_the_builtins(tmp_path):
    with pytest.raises(ValueError, match=r"'nope' is neither a file nope.py in the model directory .* text_embedding"):
        resolve_handler("nope", tmp_path)


def test_missing_function_is_named(tmp_path):
    root = model_dir(tmp_path, {"handler.py": FUNCTION_HANDLER})
    with pytest.raises(ValueError, match="module 'handler' has no function 'other_fn'"):
        resolve_handler("handler.py:other_fn", root)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "exactly one handler class, found 0 classes: none"),
        ("class A:\n    pass\nclass B:\n    pass\n", r"found 2 classes: A \(no handle\), B \(no handle\)"),
        ("class A:\n    def handle(self, d, c): ...\nclass B:\n    def handle(self, d, c): ...\n", "2 classes: A, B"),
        ("class A:\n    pass\n", "class A has no handle"),
    ],
)
def test_bad_class_entry_points_are_refused(tmp_path, source, message):
    root = model_dir(tmp_path, {"handler.py": source})
    with pytest.raises(ValueError, match=message):
        resolve_handler("handler.py", root)


def test_one_class_with_handle_among_helpers_is_accepted(tmp_path):
    source = "class Helper:\n    pass\nclass H:\n    def handle(self, d, c):\n        return ['h']\n"
    root = model_dir(tmp_path, {"handler.py": source})
    assert resolve_handler("handler.py", root).handle([{}], None) == ["h"]


def test_an_import_error_inside_the_users_file_is_not_hidden(tmp_path):
    root = model_dir(tmp_path, {"tensor.py": "import not_a_module_anywhere\n"})
    with pytest.raises(ModuleNotFoundError, match="not_a_module_anywhere"):
        resolve_handler("tensor", root)  # TorchServe would silently fall back to its built-in


def test_invalid_module_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is not a Python module name"):
        resolve_handler("my-handler.py", tmp_path)


def test_load_from_archive_builds_the_context(tmp_path):
    archive = pytest.importorskip("serve.archive")
    root = model_dir(tmp_path / "src", {"handler.py": FUNCTION_HANDLER})
    (root / "model-config.yaml").write_text("batchSize: 4\nhandler:\n  flag: true\n")
    out = archive.package("fn", "1.0", str(root / "handler.py") + ":my_fn", config_file=root / "model-config.yaml",
                          export_path=tmp_path / "store")  # fmt: skip
    from serve.worker import load_from_archive

    with archive.open_archive(out) as opened:
        handler, ctx = load_from_archive(opened, batch_size=4)
        assert ctx.model_name == "fn" and ctx.system_properties["batch_size"] == 4
        assert ctx.model_yaml_config["handler"] == {"flag": True}
        assert json.loads((Path(ctx.system_properties["model_dir"]) / "MAR-INF/MANIFEST.json").read_text())
        assert handler.handle([{"body": "q"}], ctx) == ["Q"]
