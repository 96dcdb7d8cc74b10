"""ts.utils.util against TorchServe's documented behaviour, and PredictionException through serve's worker."""

from __future__ import annotations

import json
import types

import pytest

from serve.compat.ts.utils import util
from serve.errors import PredictionException as ServePredictionException
from serve.worker.process import batch_error


def test_map_class_to_label_with_and_without_mapping():
    probs, classes = [[0.7, 0.2], [0.6, 0.3]], [[2, 0], [1, 2]]
    mapping = {"0": "cat", "1": "dog", "2": "fish"}
    assert util.map_class_to_label(probs, mapping, classes) == [{"fish": 0.7, "cat": 0.2}, {"dog": 0.6, "fish": 0.3}]
    assert util.map_class_to_label([[0.1, 0.9]]) == [{"0": 0.1, "1": 0.9}]
    with pytest.raises(TypeError, match="tolist"):
        util.map_class_to_label(((0.1, 0.9),))


def test_load_label_mapping_flattens_lists_reads_object_type_names_and_misses_quietly(tmp_path):
    path = tmp_path / "index_to_name.json"
    path.write_text(json.dumps({"0": ["n01440764", "tench"], "1": "goldfish"}))
    assert util.load_label_mapping(str(path)) == {"0": "tench", "1": "goldfish"}
    path.write_text(json.dumps({"object_type_names": ["person", "car"]}))
    assert util.load_label_mapping(path) == {"0": "person", "1": "car"}
    assert util.load_label_mapping(tmp_path / "absent.json") is None
    path.write_text(json.dumps({"0": 3}))
    with pytest.raises(ValueError, match="labels must be strings"):
        util.load_label_mapping(path)


def test_list_classes_from_module_lists_only_its_own_classes():
    module = types.ModuleType("user_model")
    exec("import json\nclass A: pass\nclass B(A): pass\nJ = json.JSONDecoder", module.__dict__)
    assert [c.__name__ for c in util.list_classes_from_module(module)] == ["A", "B"]
    assert util.list_classes_from_module(module, module.B) == [module.B]


def test_prediction_exception_answers_with_its_code():
    e = util.PredictionException("image too small", 413)
    assert isinstance(e, ServePredictionException) and e.error_code == 413 and e.code == 413
    assert str(e) == "image too small : 413" and util.PredictionException("x").error_code == 500
    assert batch_error(e) == {"code": 413, "type": "PredictionException", "message": "image too small"}


def test_yaml_config_compiled_extensions_and_backends(tmp_path):
    (tmp_path / "c.yaml").write_text("minWorkers: 1\nhandler:\n  topk: 3\n")
    assert util.get_yaml_config(tmp_path / "c.yaml") == {"minWorkers": 1, "handler": {"topk": 3}}
    with pytest.raises(RuntimeError, match="cannot load compiled PyTorch C\\+\\+/CUDA extensions"):
        util.load_compiled_extension("my_ext", ["my_ext.cpp"])
    assert util.check_valid_pt2_backend("inductor") and not util.check_valid_pt2_backend("nope")
