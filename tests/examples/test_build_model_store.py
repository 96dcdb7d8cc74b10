"""examples/build_model_store.py: the example archives build, open with open_archive and load their handler.

The store is built once for this module (the resnet18 weights are ~45 MB: made and archived once, ~1 s).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from examples.build_model_store import build_model_store, is_stale
from serve.archive import open_archive
from serve.worker import load_from_archive

EXPECTED = {
    "digits": ("image_classifier", "digits_lenet.pt", True),
    "minilm": ("text_embedding", "model.safetensors", False),
    "resnet18": ("tensor", "resnet18.pt", False),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    built = build_model_store(root / "model_store", root / "build")
    assert built == ["digits", "minilm", "tinychat", "resnet18"]
    return root


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_archive_opens_with_the_expected_manifest(store, name):
    handler, serialized, torch_compat = EXPECTED[name]
    with open_archive(store / "model_store" / f"{name}.mar") as archive:
        model = archive.manifest["model"]
        assert (model["modelName"], model["modelVersion"], model["handler"]) == (name, "1.0", handler)
        assert model["serializedFile"] == serialized and archive.serialized_file.is_file()
        assert model["modelFile"] == "model.py" and model["configFile"] == "model-config.yaml"
        assert archive.torch_compat is torch_compat
        assert archive.model_config["handler"], "the model-config's handler: section reached the archive"


def test_the_tinychat_archive_holds_its_hugging_face_folder_and_no_model_file(store):
    with open_archive(store / "model_store" / "tinychat.mar") as archive:
        model = archive.manifest["model"]
        assert (model["handler"], model.get("modelFile"), model.get("serializedFile")) == ("text_generation", None,
                                                                                           None)  # fmt: skip
        for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json"):  # fmt: skip
            assert (archive.model_dir / name).is_file(), name
        assert archive.model_config["continuousBatching"] is True


def test_the_resnet18_archive_serves_a_224_image(store):
    with open_archive(store / "model_store" / "resnet18.mar") as archive:
        handler, context = load_from_archive(archive)  # a strict state_dict load of the generated weights
        context.begin_batch({0: "r0"}, [{}])
        (logits,) = handler.handle([{"body": np.zeros((3, 224, 224)).tolist()}], context)
    assert np.asarray(logits).shape == (1000,) and np.isfinite(logits).all()


def test_the_minilm_archive_loads_the_packaged_weights(store):
    with open_archive(store / "model_store" / "minilm.mar") as archive:
        assert {"tokenizer.json", "config.json"} <= {p.name for p in archive.model_dir.iterdir()}
        handler, context = load_from_archive(archive)
        context.begin_batch({0: "r0"}, [{}])
        (embedding,) = handler.handle([{"body": b"A model server in the TorchServe mould."}], context)
    assert len(embedding) == 384 and np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-5)


def test_a_second_run_with_nothing_changed_builds_nothing_and_is_fast(store):
    archives = sorted((store / "model_store").glob("*.mar"))
    before = [p.stat().st_mtime_ns for p in archives]
    start = time.perf_counter()
    assert build_model_store(store / "model_store", store / "build") == []
    assert time.perf_counter() - start < 1.0
    assert [p.stat().st_mtime_ns for p in archives] == before


def test_is_stale(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.write_text("x")
    assert is_stale(out, [src])  # missing output
    out.write_text("y")
    os.utime(src, (1000, 1000))
    os.utime(out, (2000, 2000))
    assert not is_stale(out, [src])
    os.utime(src, (3000, 3000))
    assert is_stale(out, [src])
