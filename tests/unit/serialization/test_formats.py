"""serve.load/serve.save without torch: safetensors, npz, map_location, save's format, find_state_dict."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file as st_load
from safetensors.numpy import save_file as st_save

import serve
from serve.errors import CheckpointError
from serve.serialization import find_state_dict, strip_prefix
from tests.unit.serialization.files import describe, patch_pickle, records

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "checkpoints"


def _saved(obj: object) -> bytes:
    buf = io.BytesIO()
    serve.save(obj, buf)
    return buf.getvalue()


# -- safetensors and npz -------------------------------------------------------------------------------
def test_safetensors_matches_the_safetensors_package(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"w": rng.standard_normal((3, 5)).astype(np.float32), "odd": np.ones(3, np.float16),
              "i": np.arange(7, dtype=np.int64), "b": np.array([True, False]), "empty": np.zeros((0, 4), np.int8),
              "scalar": np.array(2.5)}  # fmt: skip
    st_save(arrays, tmp_path / "m.safetensors")
    ref = st_load(tmp_path / "m.safetensors")
    for mmap in (False, True):
        ours = serve.load(tmp_path / "m.safetensors", mmap=mmap)
        assert list(ours) == list(ref)
        for key, arr in ref.items():
            got = ours[key].numpy()
            assert got.dtype == arr.dtype and got.shape == arr.shape and got.flags.aligned and got.flags.writeable
            np.testing.assert_array_equal(got, arr)
    mapped = serve.load(tmp_path / "m.safetensors", mmap=True)["w"].numpy()
    assert not mapped.flags.owndata  # a view of the mapped file


def test_npz_matches_numpy(tmp_path: Path) -> None:
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "f": np.asfortranarray(np.eye(3)),
              "big": np.arange(4, dtype=">i4")}  # fmt: skip
    for save in (np.savez, np.savez_compressed):
        save(tmp_path / "x.npz", **arrays)
        ours = serve.load(tmp_path / "x.npz")
        for key, arr in arrays.items():
            assert ours[key].numpy().dtype.isnative
            np.testing.assert_array_equal(ours[key].numpy(), arr)
        assert ours["f"].stride() == (1, 3)


# -- map_location ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [None, "cpu", b"cpu", serve.device("cpu"), {"cpu": "cpu"}, {"cuda:1": "cuda:0"}])
def test_map_location_to_cpu(where: object) -> None:
    out = serve.load(FIXTURES / "tensors.pt", map_location=where)
    assert out["base"].device == serve.device("cpu")


def test_map_location_callable_gets_each_storage_once() -> None:
    seen = []

    def where(storage: serve.Tensor, location: str) -> serve.Tensor | None:
        seen.append((storage.dim(), location))
        return None if len(seen) % 2 else storage.clone()

    out = serve.load(FIXTURES / "tensors.pt", map_location=where)
    ref = serve.load(FIXTURES / "tensors.pt")
    assert all(dim == 1 and loc == "cpu" for dim, loc in seen)
    assert len(seen) == len({d["storage"] for d in _tensors(describe(ref))})
    assert describe(out) == describe(ref)
    with pytest.raises(TypeError, match="must return the storage"):
        serve.load(FIXTURES / "tensors.pt", map_location=lambda s, loc: serve.zeros(1))


def _tensors(desc: object) -> list[dict]:
    if isinstance(desc, dict) and "tensor" in desc:
        return [desc]
    children = desc.values() if isinstance(desc, dict) else desc if isinstance(desc, list) else []
    return [t for c in children for t in _tensors(c)]


@pytest.mark.parametrize("where", ["cuda", "cuda:0", serve.device("cuda", 1), {"cpu": "cuda"}])
def test_map_location_to_cuda_without_cuda(where: object) -> None:
    with pytest.raises(RuntimeError, match=r"serve\.cuda\.is_available\(\) is False"):
        serve.load(FIXTURES / "tensors.pt", map_location=where)


def test_saved_locations_are_honoured() -> None:
    data = patch_pickle(_saved({"w": serve.ones(2)}), b"X\x03\x00\x00\x00cpu", b"X\x03\x00\x00\x00mps")
    with pytest.raises(RuntimeError, match="tagged with 'mps'"):
        serve.load(io.BytesIO(data))
    assert serve.load(io.BytesIO(data), map_location={"mps": "cpu"})["w"].tolist() == [1.0, 1.0]
    with pytest.raises(TypeError, match="map_location should be"):
        serve.load(io.BytesIO(data), map_location=3)


# -- serve.load's arguments -----------------------------------------------------------------------------
def test_load_arguments() -> None:
    with pytest.raises(ValueError, match="weights_only=False"):
        serve.load(FIXTURES / "tensors.pt", weights_only=False)
    assert "base" in serve.load(FIXTURES / "tensors.pt", weights_only=None)
    with pytest.raises(ValueError, match="must be a file path"):
        serve.load(io.BytesIO((FIXTURES / "tensors.pt").read_bytes()), mmap=True)
    with pytest.raises(FileNotFoundError):
        serve.load(FIXTURES / "missing.pt")


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".bin", ".ckpt", ""])
def test_torchserve_file_names(suffix: str, tmp_path: Path) -> None:
    path = tmp_path / f"weights{suffix}"
    path.write_bytes((FIXTURES / "state_dict.pt").read_bytes())
    assert list(serve.load(path)) == list(serve.load(FIXTURES / "state_dict.pt"))


def test_loading_never_imports_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import io, serve\n"
        f"for name in ['state_dict.pt', 'legacy.pth', 'model.safetensors', 'arrays.npz']:\n"
        f"    serve.load({str(FIXTURES)!r} + '/' + name)\n"
        f"serve.save(serve.load({str(FIXTURES)!r} + '/tensors.pt'), io.BytesIO())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


# -- serve.save ------------------------------------------------------------------------------------------
def test_save_round_trip_keeps_views_and_sharing(tmp_path: Path) -> None:
    base = serve.arange(24.0).reshape(4, 6)
    obj = OrderedDict(base=base, t=base.t(), rows=base[1:3], cols=base[:, 1::2], flipped=base.flip(0),
                      fortran=serve.from_numpy(np.asfortranarray(np.ones((3, 2), np.float32))),
                      bf=serve.ones(3, dtype=serve.bfloat16), empty=serve.zeros(0, 2), scalar=serve.tensor(True),
                      param=serve.nn.Parameter(serve.ones(2)))  # fmt: skip
    serve.save(obj, tmp_path / "m.pt")
    back = serve.load(tmp_path / "m.pt")
    flipped = obj.pop("flipped")
    assert back.pop("flipped").tolist() == flipped.tolist()
    assert describe(back) == describe(obj)
    back["base"][0, 0] = 100.0
    assert back["t"][0, 0].item() == 100.0  # still one storage
    assert flipped.stride() == (-6, 1)  # saved as a copy: torch has no negative strides


def test_save_writes_torchs_layout(tmp_path: Path) -> None:
    serve.save({"w": serve.ones(3, 5), "b": serve.zeros(7, dtype=serve.float16)}, tmp_path / "weights.pth")
    root, recs = records((tmp_path / "weights.pth").read_bytes())
    assert root == "weights/"
    assert {k for k in recs if not k.startswith("data/")} == {
        "data.pkl",
        ".format_version",
        ".storage_alignment",
        "byteorder",
        "version",
        ".data/serialization_id",
    }
    assert recs["version"] == b"3\n" and recs["byteorder"] == sys.byteorder.encode()
    with zipfile.ZipFile(tmp_path / "weights.pth") as zf:
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            if "/data/" in info.filename:  # data offset = header + fixed 30 bytes + name + extra
                offset = info.header_offset + 30 + len(info.filename) + len(info.extra)
                assert offset % 64 == 0
    assert records(_saved({}))[0] == "archive/"


def test_save_refuses_what_cannot_be_loaded_back() -> None:
    with pytest.raises(TypeError, match="Save a model's state_dict"):
        _saved(serve.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"serve\.save writes tensors"):
        _saved({"f": frozenset()})
    with pytest.raises(TypeError, match="path or a binary file"):
        serve.save({}, 3)


# -- find_state_dict -------------------------------------------------------------------------------------
def test_find_state_dict() -> None:
    sd = OrderedDict(w=serve.ones(1))
    for ckpt in (sd, {"state_dict": sd}, {"model_state_dict": sd, "epoch": 1}, {"model": sd, "opt": {}}):
        assert list(find_state_dict(ckpt)) == ["w"]
    assert list(find_state_dict({"module.a": serve.ones(1), "module.b": serve.ones(1)})) == ["a", "b"]
    assert list(find_state_dict({"module.a": serve.ones(1), "b": serve.ones(1)})) == ["module.a", "b"]
    with pytest.raises(CheckpointError, match="no state_dict in this checkpoint"):
        find_state_dict({"epoch": 3, "weights": [1, 2]})
    with pytest.raises(CheckpointError, match="holds a list"):
        find_state_dict([serve.ones(1)])


def test_strip_prefix_keeps_metadata() -> None:
    sd = OrderedDict([("module.fc.weight", serve.ones(1))])
    sd._metadata = OrderedDict([("", {"version": 1}), ("module", {"version": 2}), ("module.fc", {"version": 3})])
    out = strip_prefix(sd)
    assert list(out) == ["fc.weight"] and out._metadata == {"": {"version": 2}, "fc": {"version": 3}}
